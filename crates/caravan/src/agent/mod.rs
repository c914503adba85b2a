//! The agent as a library: [`Agent::start`] turns an agent config into a running server, client
//! or both, with the HTTP API in front, and [`Agent::shutdown`] stops it. The `caravan agent`
//! command resolves the config (defaults, `-dev`, files, flags), starts one and stops it on a
//! signal; tests start agents in their own process with it.
//!
//! Invariant: a setting this module reads is applied or refused with the key named, never
//! dropped; what is process-wide (the metrics recorder, the HTTPS client for calls to other
//! agents) is installed once, and a second agent in the process must agree with the first.

mod telemetry_config;

use anyhow::{bail, Context, Result};
use jobspec::agent::AgentConfig;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// How an agent is started, beyond its config.
#[derive(Debug, Clone, Default)]
pub struct AgentOptions {
    /// `-dev`: a temporary data dir when none is set, `raw_exec` on, the node on the loopback,
    /// and every allocation destroyed when the agent stops.
    pub dev: bool,
    /// The `caravan` executable that task log helpers (`caravan logmon`) run from: the running
    /// executable when `None`. A test process that runs agents itself names the binary.
    pub helper_exe: Option<PathBuf>,
}

/// A running agent: a server, a client or both, with the HTTP API in front.
pub struct Agent {
    http_addr: SocketAddr,
    region: String,
    datacenter: String,
    server: Option<server::Server>,
    client: Option<(Arc<client::Client>, Arc<client::RpcServerConn>)>,
    http: tokio::task::JoinHandle<std::io::Result<()>>,
    stop_http: tokio::sync::oneshot::Sender<()>,
    dev: bool,
    _temp: Option<TempDir>,
}

impl Agent {
    /// Starts what `cfg` enables (`server { enabled }`, `client { enabled }`); returns once the
    /// HTTP API listens, the server runs and the client has started (it registers by itself).
    pub async fn start(cfg: AgentConfig, opts: AgentOptions) -> Result<Agent> {
        let server_enabled = cfg.server.as_ref().and_then(|s| s.enabled).unwrap_or(false);
        let client_enabled = cfg.client.as_ref().and_then(|c| c.enabled).unwrap_or(false);
        if !server_enabled && !client_enabled {
            bail!("neither server nor client mode is enabled: use -dev, -server, -client, or a config with server {{ enabled = true }} or client {{ enabled = true }}");
        }
        let tls = security_settings(&cfg)?;
        if let Some(client) = &tls.http_client {
            httpapi::tls::set_agent_client(client.clone());
        }
        if server_enabled {
            start_server_agent(cfg, opts, client_enabled, tls).await
        } else {
            start_client_agent(cfg, opts, tls).await
        }
    }

    /// Where the HTTP API listens.
    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The server, on a server agent.
    pub fn server(&self) -> Option<&server::Server> {
        self.server.as_ref()
    }

    /// The client, on a client agent.
    pub fn client(&self) -> Option<&client::Client> {
        self.client.as_ref().map(|(c, _)| c.as_ref())
    }

    pub fn region(&self) -> &str {
        &self.region
    }

    pub fn datacenter(&self) -> &str {
        &self.datacenter
    }

    /// A server agent's RPC address, and its serf address where it gossips.
    pub fn rpc_summary(&self) -> Option<String> {
        let server = self.server.as_ref()?;
        Some(match server.gossip() {
            Some(g) => format!("{}; Serf: {}", server.rpc_addr(), g.local().addr),
            None => server.rpc_addr().to_string(),
        })
    }

    /// Stops the agent: a server that `leave`s says so in gossip first (the others list it
    /// `left`, not `failed`), as Nomad's `leave_on_interrupt` / `leave_on_terminate`; the HTTP
    /// API stops; a dev agent destroys its allocations, any other leaves its tasks running for
    /// the next client to reattach; then the server stops.
    pub async fn shutdown(self, leave: bool) {
        if let (true, Some(server)) = (leave, &self.server) {
            println!("==> Gracefully leaving the cluster");
            server.leave().await;
        }
        let _ = self.stop_http.send(());
        let _ = self.http.await;
        if let Some((node_client, _conn)) = self.client {
            if self.dev {
                // A dev agent leaves nothing behind, as Nomad's: its allocations are destroyed
                // (tasks killed, directories removed) while its server still runs.
                println!("==> Dev mode: stopping every allocation");
                node_client.destroy_all_allocs(DEV_DESTROY_GRACE).await;
            }
            // The HTTP API has stopped, so this is the last handle (dropping a client stops it
            // too).
            if let Ok(node_client) = Arc::try_unwrap(node_client) {
                node_client.shutdown().await;
            }
        }
        if let Some(server) = self.server {
            server.shutdown().await;
        }
    }
}

/// What the `tls` block turns on, loaded and checked.
#[derive(Default, Clone)]
struct TlsSetup {
    /// `rpc = true`: rpc and raft only over mutual TLS.
    rpc: Option<Arc<rpc::tls::AgentTls>>,
    /// `http = true`: the API over https.
    http_server: Option<Arc<rustls::ServerConfig>>,
    /// How this agent calls other agents' https APIs.
    http_client: Option<Arc<rustls::ClientConfig>>,
}

/// Security settings are honoured or refused, never ignored.
fn security_settings(cfg: &AgentConfig) -> Result<TlsSetup> {
    let Some(tls) = &cfg.tls else {
        return Ok(TlsSetup::default());
    };
    let http = tls.http.unwrap_or(false);
    let rpc_on = tls.rpc.unwrap_or(false);
    if !http && !rpc_on {
        if tls.verify_https_client.unwrap_or(false) || tls.verify_server_hostname.unwrap_or(false) {
            bail!("tls: verify_https_client and verify_server_hostname need http = true or rpc = true");
        }
        return Ok(TlsSetup::default());
    }
    let file = |name: &str, v: &Option<String>| -> Result<std::path::PathBuf> {
        match v.as_deref().filter(|s| !s.is_empty()) {
            Some(p) => Ok(p.into()),
            None => bail!(
                "tls.{name} is required when http or rpc is true (make one with `caravan tls`)"
            ),
        }
    };
    let tls13_only = match tls.tls_min_version.as_deref().unwrap_or("tls12") {
        "tls12" | "" => false,
        "tls13" => true,
        other => bail!("tls.tls_min_version = {other:?}: use \"tls12\" or \"tls13\""),
    };
    let files = rpc::tls::TlsFiles {
        ca_file: file("ca_file", &tls.ca_file)?,
        cert_file: file("cert_file", &tls.cert_file)?,
        key_file: file("key_file", &tls.key_file)?,
        region: cfg.region.clone().unwrap_or_else(|| "global".into()),
        verify_server_hostname: tls.verify_server_hostname.unwrap_or(false),
        tls13_only,
    };
    if rpc_on && !http {
        println!(
            "==> WARNING: tls.rpc without tls.http: agents call each other's HTTP APIs (node secrets, \
             users' tokens, exec streams) in the clear. Set http = true as well."
        );
    }
    let mut setup = TlsSetup::default();
    if rpc_on {
        setup.rpc = Some(Arc::new(
            rpc::tls::AgentTls::load(&files).map_err(|e| anyhow::anyhow!("{e}"))?,
        ));
    }
    if http {
        let err = |e: rpc::tls::TlsError| anyhow::anyhow!("{e}");
        let certs = rpc::tls::load_certs(&files.cert_file).map_err(err)?;
        let key = rpc::tls::load_key(&files.key_file).map_err(err)?;
        let roots = rpc::tls::load_roots(&files.ca_file).map_err(err)?;
        let server = rpc::tls::server_config(
            roots.clone(),
            certs.clone(),
            key.clone_key(),
            tls.verify_https_client.unwrap_or(false),
            tls13_only,
        )
        .map_err(err)?;
        let client =
            rpc::tls::client_config(roots, Some((certs, key)), false, tls13_only).map_err(err)?;
        setup.http_server = Some(Arc::new(server));
        setup.http_client = Some(Arc::new(client));
    }
    Ok(setup)
}

fn listen_addr(cfg: &AgentConfig, specific: Option<&String>, port: u16) -> Result<SocketAddr> {
    let host = specific
        .or(cfg.bind_addr.as_ref())
        .map_or("0.0.0.0", String::as_str);
    let text = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    text.parse().with_context(|| {
        format!("{text:?} is not an address to listen on; check bind_addr and addresses")
    })
}

/// A client-only agent: runs tasks for the servers in `client { servers }`; its HTTP API answers
/// the client paths itself and forwards everything else to a server.
async fn start_client_agent(cfg: AgentConfig, opts: AgentOptions, tls: TlsSetup) -> Result<Agent> {
    let dev = opts.dev;
    if cfg.leave_on_interrupt == Some(true) || cfg.leave_on_terminate == Some(true) {
        eprintln!(
            "==> Warning: leave_on_interrupt / leave_on_terminate are not used by a client-only \
             agent: they make a server leave gossip (a client's node stays registered and is \
             marked down when its heartbeats stop)"
        );
    }
    let (data_dir, temp) = data_dir(&cfg, dev)?;
    let servers: Vec<String> = cfg
        .client
        .as_ref()
        .and_then(|c| c.servers.clone())
        .unwrap_or_default();
    if servers.is_empty() {
        bail!("a client-only agent needs servers to register with: set client {{ servers = [\"host:4647\"] }} or pass -servers host:4647");
    }
    let ports = cfg.ports.clone().unwrap_or_default();
    let addresses = cfg.addresses.clone().unwrap_or_default();
    let http_addr = listen_addr(&cfg, addresses.http.as_ref(), ports.http.unwrap_or(4646))?;
    let region = cfg.region.clone().unwrap_or_else(|| "global".into());
    let datacenter = cfg.datacenter.clone().unwrap_or_else(|| "dc1".into());
    let name = cfg.name.clone().unwrap_or_else(hostname);
    let telemetry = telemetry_config::from_config(&cfg, dev, &name)?;
    telemetry.install()?;
    let listener = tokio::net::TcpListener::bind(http_addr)
        .await
        .with_context(|| format!("binding the HTTP API to {http_addr}"))?;
    let http_bound = listener.local_addr()?;
    let (mut node_client, conn) = start_client(
        &cfg,
        &opts,
        &data_dir,
        &name,
        &region,
        &datacenter,
        servers,
        http_bound,
        tls.rpc.clone(),
    )
    .await?;
    node_client.spawn_metrics(telemetry.client_settings());
    let node_client = Arc::new(node_client);
    let state = httpapi::forward::ClientAgentState {
        client: Arc::new(LocalClientHandle(node_client.clone(), conn.clone())),
        servers: Arc::new(ConnServers(conn.clone())),
        rpc: rpc::Client::with_tls(rpc::limits::CALL_TIMEOUT_DEFAULT, tls.rpc.clone()),
        acl_enabled: cfg.acl.as_ref().and_then(|a| a.enabled).unwrap_or(false),
        enable_debug: cfg.enable_debug.unwrap_or(false),
    };
    node_client.set_task_api(Arc::new(TaskApi(httpapi::task_api_router(
        httpapi::forward::client_agent_router(state.clone()),
    ))));
    let (stop_http, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(httpapi::serve_client_agent(
        listener,
        state,
        tls.http_server.clone(),
        ui_enabled(&cfg),
        async move {
            let _ = stop_rx.await;
        },
    ));
    Ok(Agent {
        http_addr: http_bound,
        region,
        datacenter,
        server: None,
        client: Some((node_client, conn)),
        http,
        stop_http,
        dev,
        _temp: temp,
    })
}

/// The servers a client-only agent forwards API requests to: the ones its client knows.
struct ConnServers(Arc<client::RpcServerConn>);

impl httpapi::forward::ServerPicker for ConnServers {
    fn servers(&self) -> Vec<String> {
        self.0.servers()
    }
}

/// The agent's data dir; a `-dev` agent without one gets a temporary dir, removed when it stops.
fn data_dir(cfg: &AgentConfig, dev: bool) -> Result<(PathBuf, Option<TempDir>)> {
    match cfg.data_dir.as_deref() {
        Some(dir) => Ok((PathBuf::from(dir), None)),
        None if dev => {
            let dir = std::env::temp_dir().join(format!("caravan-dev-{}", std::process::id()));
            Ok((dir.clone(), Some(TempDir(dir))))
        }
        None => {
            bail!("an agent needs a data directory: set data_dir in the config or pass -data-dir")
        }
    }
}

/// Nomad's `ui { enabled }` (on unless set false); the block's other keys (`consul`, `vault`,
/// `label`, `content_security_policy`) are not built yet and say so in the log.
fn ui_enabled(cfg: &jobspec::agent::AgentConfig) -> bool {
    let Some(block) = cfg.ui.as_ref() else {
        return true;
    };
    let blocks: Vec<&serde_json::Value> = match block {
        serde_json::Value::Array(list) => list.iter().collect(),
        other => vec![other],
    };
    let mut enabled = true;
    for b in blocks {
        for (k, v) in b.as_object().into_iter().flatten() {
            match (k.as_str(), v.as_bool()) {
                ("enabled", Some(on)) => enabled = on,
                _ => eprintln!("==> Warning: ui.{k} is not supported yet and is not applied"),
            }
        }
    }
    enabled
}

/// The agent's HTTP API on the tasks' `secrets/api.sock` sockets, for callers with a credential.
struct TaskApi(httpapi::Router);

impl client::TaskApiServer for TaskApi {
    fn serve(&self, listener: tokio::net::UnixListener) -> tokio::task::JoinHandle<()> {
        tokio::spawn(httpapi::serve_task_api(listener, self.0.clone()))
    }
}

/// How long a stopping dev agent waits for its allocations' tasks to die (each has its own
/// `kill_timeout`, 5 s by default).
const DEV_DESTROY_GRACE: std::time::Duration = std::time::Duration::from_secs(30);

/// Holds a `-dev` agent's temporary data dir; removes it when the agent stops.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn start_server_agent(
    cfg: AgentConfig,
    opts: AgentOptions,
    client_enabled: bool,
    tls: TlsSetup,
) -> Result<Agent> {
    let dev = opts.dev;
    check_plugin_blocks(&cfg)?;
    if cfg.plugin_dir.as_deref().is_some_and(|d| !d.is_empty()) {
        eprintln!(
            "==> Warning: plugin_dir {:?} is not used: Caravan loads no external plugins yet (its drivers and device plugins are built in)",
            cfg.plugin_dir.as_deref().unwrap_or_default()
        );
    }
    let (data_dir, temp) = data_dir(&cfg, dev)?;
    let ports = cfg.ports.clone().unwrap_or_default();
    let addresses = cfg.addresses.clone().unwrap_or_default();
    let http_addr = listen_addr(&cfg, addresses.http.as_ref(), ports.http.unwrap_or(4646))?;
    let rpc_addr = listen_addr(&cfg, addresses.rpc.as_ref(), ports.rpc.unwrap_or(4647))?;
    let serf_addr = listen_addr(
        &cfg,
        addresses.serf.as_ref(),
        ports.serf.unwrap_or(gossip::DEFAULT_SERF_PORT),
    )?;
    let region = cfg.region.clone().unwrap_or_else(|| "global".into());
    let datacenter = cfg.datacenter.clone().unwrap_or_else(|| "dc1".into());
    let name = cfg.name.clone().unwrap_or_else(hostname);
    let server_cfg_block = cfg.server.clone().unwrap_or_default();
    let telemetry = telemetry_config::from_config(&cfg, dev, &name)?;
    telemetry.install()?;

    let mut server_cfg = server::ServerConfig::new(data_dir.join("server"), rpc_addr);
    server_cfg.stats_interval = telemetry.collection_interval;
    server_cfg.disable_dispatched_job_summary_metrics =
        telemetry.disable_dispatched_job_summary_metrics;
    server_cfg.region = region.clone();
    server_cfg.datacenter = datacenter.clone();
    server_cfg.name = name.clone();
    server_cfg.bootstrap_expect = server_cfg_block.bootstrap_expect.unwrap_or(1);
    if let Some(n) = server_cfg_block.num_schedulers {
        server_cfg.num_schedulers = n as usize;
    }
    if let Some(list) = &server_cfg_block.enabled_schedulers {
        server_cfg.enabled_schedulers.clone_from(list);
    }
    let pool = server::pool::PoolConfig {
        num_schedulers: server_cfg.num_schedulers,
        enabled_schedulers: server_cfg.enabled_schedulers.clone(),
    };
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    pool.check(cores.max(server_cfg.num_schedulers))
        .map_err(|e| anyhow::anyhow!("server.{e}"))?;
    if let Some(grace) = server_cfg_block.heartbeat_grace {
        server_cfg.heartbeat_grace = grace;
    }
    if let Some(ttl) = server_cfg_block.min_heartbeat_ttl {
        server_cfg.min_heartbeat_ttl = ttl;
    }
    if let Some(rate) = server_cfg_block.max_heartbeats_per_second {
        server_cfg.max_heartbeats_per_second = rate;
    }
    if let Some(ttl) = server_cfg_block.failover_heartbeat_ttl {
        server_cfg.failover_heartbeat_ttl = ttl;
    }
    if let Some(t) = server_cfg_block.csi_controller_timeout {
        if t < std::time::Duration::from_secs(1) || t > std::time::Duration::from_secs(3600) {
            bail!("server.csi_controller_timeout = {t:?}: must be between 1s and 1h (default 2m)");
        }
        server_cfg.csi_controller_timeout = t;
    }
    if let Some(d) = server_cfg_block.job_gc_interval {
        if d.is_zero() {
            bail!("server.job_gc_interval = 0s: must be above zero (default 5m)");
        }
        server_cfg.gc_interval = d;
    }
    for (value, slot) in [
        (server_cfg_block.job_gc_threshold, &mut server_cfg.gc.job),
        (server_cfg_block.eval_gc_threshold, &mut server_cfg.gc.eval),
        (
            server_cfg_block.batch_eval_gc_threshold,
            &mut server_cfg.gc.batch_eval,
        ),
        (
            server_cfg_block.deployment_gc_threshold,
            &mut server_cfg.gc.deployment,
        ),
        (server_cfg_block.node_gc_threshold, &mut server_cfg.gc.node),
    ] {
        if let Some(d) = value {
            *slot = d;
        }
    }
    if let Some(n) = server_cfg_block.raft_snapshot_threshold {
        server_cfg.raft_snapshot_every = n;
    }
    if let Some(n) = server_cfg_block.job_max_count {
        if n == 0 {
            bail!("server.job_max_count = 0: must be at least 1 (default 50000)");
        }
        server_cfg.job_max_count = n;
    }
    if let Some(size) = server_cfg_block.job_max_source_size.as_deref() {
        let n = jobspec::volume::parse_bytes(size).map_err(|e| {
            anyhow::anyhow!("server.job_max_source_size = {size:?}: {e} (write a size like \"1M\")")
        })?;
        server_cfg.job_max_source_size = usize::try_from(n.max(0)).unwrap_or(usize::MAX);
    }
    let acl = cfg.acl.clone().unwrap_or_default();
    server_cfg.acl_enabled = acl.enabled.unwrap_or(false);
    if let Some(t) = acl.token_min_expiration_ttl {
        server_cfg.acl_token_min_ttl = t;
    }
    if let Some(t) = acl.token_max_expiration_ttl {
        server_cfg.acl_token_max_ttl = t;
    }
    if server_cfg.acl_token_min_ttl > server_cfg.acl_token_max_ttl {
        bail!("acl.token_min_expiration_ttl is longer than acl.token_max_expiration_ttl");
    }
    apply_autopilot(&cfg, &mut server_cfg)?;
    // ACL replication from the authoritative region (Nomad's), which needs the region's
    // management token; a setting that would do nothing is refused, never ignored.
    let replication_token = cfg
        .acl
        .as_ref()
        .and_then(|a| a.replication_token.clone())
        .filter(|t| !t.is_empty());
    let authoritative = server_cfg_block
        .authoritative_region
        .clone()
        .filter(|r| !r.is_empty());
    match (&authoritative, &replication_token) {
        (Some(a), None) if *a != region && server_cfg.acl_enabled => bail!(
            "server.authoritative_region = {a:?} is another region: set acl {{ replication_token }} to a management token of {a:?} so ACLs replicate from it"
        ),
        (None, Some(_)) => bail!(
            "acl.replication_token is set but server.authoritative_region is not: name the region ACLs replicate from"
        ),
        (Some(a), Some(_)) if *a != region && !server_cfg.acl_enabled => bail!(
            "ACL replication from {a:?} needs ACLs on here too (acl {{ enabled = true }})"
        ),
        _ => {}
    }
    server_cfg.authoritative_region = authoritative;
    server_cfg.replication_token = replication_token;
    // An explicit `advertise { rpc }` wins; otherwise the server advertises the address it bound
    // (so port 0 works).
    server_cfg.rpc_advertise = cfg.advertise.as_ref().and_then(|a| a.rpc.clone());
    // Where the other servers are: `server_join { retry_join }`, its older spelling
    // `retry_join`, `start_join`, and `-retry-join`.
    let join_block = server_cfg_block.server_join.clone().unwrap_or_default();
    server_cfg.retry_join = [
        join_block.retry_join.clone(),
        join_block.start_join.clone(),
        server_cfg_block.retry_join.clone(),
        server_cfg_block.start_join.clone(),
    ]
    .into_iter()
    .flatten()
    .flatten()
    .collect();
    if server_cfg.bootstrap_expect > 1 && server_cfg.retry_join.is_empty() {
        println!(
            "==> bootstrap_expect = {}: waiting for other servers; join them with `caravan server join ADDR` \
             or list them in server_join {{ retry_join = [...] }}",
            server_cfg.bootstrap_expect
        );
    }

    // Gossip on the serf port, as Nomad's servers: `advertise { serf }` (a bare host takes the
    // bound port); on loopback memberlist's LAN timings (a failed server shows in seconds),
    // otherwise the WAN timings Nomad's servers use.
    server_cfg.serf_bind = Some(serf_addr);
    server_cfg.serf_advertise = match cfg
        .advertise
        .as_ref()
        .and_then(|a| a.serf.clone())
        .filter(|h| !h.is_empty())
    {
        Some(h) => Some(match h.parse::<std::net::SocketAddr>() {
            Ok(a) => a,
            // A bare IP takes the bound port (0 here; gossip fills in the bound one).
            Err(_) => h
                .trim_matches(['[', ']'])
                .parse::<std::net::IpAddr>()
                .map(|ip| std::net::SocketAddr::new(ip, 0))
                .with_context(|| {
                    format!(
                        "advertise {{ serf = {h:?} }}: give an IP address, with or without a port (host names are not supported yet)"
                    )
                })?,
        }),
        None => None,
    };
    let loopback = server_cfg
        .serf_advertise
        .map_or(serf_addr.ip(), |a| a.ip())
        .is_loopback();
    server_cfg.gossip_timing = if loopback {
        gossip::Timing::Lan
    } else {
        gossip::Timing::Wan
    };
    if let Some(key) = server_cfg_block
        .encrypt
        .as_deref()
        .filter(|k| !k.is_empty())
    {
        gossip::decode_key(key).map_err(|e| anyhow::anyhow!("server {{ encrypt }}: {e}"))?;
        server_cfg.gossip_keys = vec![key.to_string()];
    }

    server_cfg.tls = tls.rpc.clone();
    if let Some(key) = server_cfg_block
        .encrypt
        .as_deref()
        .filter(|k| !k.is_empty())
    {
        server_cfg.rpc_secret =
            Some(server::peers::rpc_secret_from_key(key).map_err(|e| anyhow::anyhow!("{e}"))?);
    } else if server_cfg.acl_enabled && tls.rpc.is_none() {
        println!(
            "==> WARNING: ACLs are on but servers know each other only by address (no tls.rpc, no \
             server.encrypt): any process that can use a server's address, tasks on a server host \
             included, can make server calls. Set server {{ encrypt = \"<key>\" }} on every server, \
             or better tls {{ rpc = true verify_server_hostname = true }}."
        );
    }
    let server = server::Server::start(server_cfg)
        .await
        .map_err(|e| anyhow::anyhow!("starting the server: {e}"))?;
    let listener = tokio::net::TcpListener::bind(http_addr)
        .await
        .with_context(|| format!("binding the HTTP API to {http_addr}"))?;
    let http_bound = listener.local_addr()?;
    // What the other servers reach this agent's HTTP API at (`server_id=` on monitor and host):
    // `advertise { http }` (a bare host takes the bound port), else the bound address.
    let http_advertised = match cfg
        .advertise
        .as_ref()
        .and_then(|a| a.http.clone())
        .filter(|h| !h.is_empty())
    {
        Some(h)
            if h.parse::<std::net::SocketAddr>().is_ok()
                || h.rsplit_once(':')
                    .is_some_and(|(_, p)| p.parse::<u16>().is_ok()) =>
        {
            h
        }
        Some(h) => format!("{h}:{}", http_bound.port()),
        // Bound to every address: the one the servers reach this one's RPC at, with the HTTP
        // port (0.0.0.0 would lead another server back to itself).
        None if http_bound.ip().is_unspecified() => {
            let rpc_host = server
                .rpc_addr()
                .rsplit_once(':')
                .map_or("127.0.0.1", |(h, _)| h)
                .to_string();
            format!("{rpc_host}:{}", http_bound.port())
        }
        None => http_bound.to_string(),
    };
    server.set_http_addr(http_advertised);
    let info = httpapi::AgentInfo {
        node_name: name.clone(),
        region: region.clone(),
        datacenter: datacenter.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        config: serde_json::to_value(&cfg).unwrap_or_default(),
        enable_debug: cfg.enable_debug.unwrap_or(false),
    };
    let node_client = if client_enabled {
        let mut servers: Vec<String> = cfg
            .client
            .as_ref()
            .and_then(|c| c.servers.clone())
            .unwrap_or_default();
        if !servers.iter().any(|s| s == server.rpc_addr()) {
            servers.insert(0, server.rpc_addr().to_string());
        }
        Some(
            start_client(
                &cfg,
                &opts,
                &data_dir,
                &name,
                &region,
                &datacenter,
                servers,
                http_bound,
                tls.rpc.clone(),
            )
            .await?,
        )
    } else {
        None
    };
    let node_client = node_client.map(|(mut c, conn)| {
        c.spawn_metrics(telemetry.client_settings());
        (Arc::new(c), conn)
    });
    let (stop_http, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let state = httpapi::ApiState {
        server: server.clone(),
        agent: Arc::new(info),
        client: node_client
            .clone()
            .map(|(c, conn)| Arc::new(LocalClientHandle(c, conn)) as Arc<dyn httpapi::LocalClient>),
    };
    if let Some((c, _)) = &node_client {
        c.set_task_api(Arc::new(TaskApi(httpapi::task_api_router(
            httpapi::router(state.clone()),
        ))));
    }
    let http = tokio::spawn(httpapi::serve(
        listener,
        state,
        tls.http_server.clone(),
        ui_enabled(&cfg),
        async move {
            let _ = stop_rx.await;
        },
    ));
    Ok(Agent {
        http_addr: http_bound,
        region,
        datacenter,
        server: Some(server),
        client: node_client,
        http,
        stop_http,
        dev,
        _temp: temp,
    })
}

/// A node call's error as the server sees it, with its gRPC code.
fn volume_error(e: &client::CsiVolumeError) -> model::wire::CsiCallError {
    let code = match e {
        // UNAVAILABLE: the volume may still be mounted here; the server keeps the claim and
        // tries again.
        client::CsiVolumeError::PluginNotFound(_) => 14,
        client::CsiVolumeError::Plugin { source, .. } => source.code() as i32,
        client::CsiVolumeError::Io { .. } => 13,
    };
    model::wire::CsiCallError {
        code,
        message: e.to_string(),
    }
}

/// The HTTP API's view of this agent's client (for `/v1/client/fs/*`).
struct LocalClientHandle(Arc<client::Client>, Arc<client::RpcServerConn>);

impl LocalClientHandle {
    /// PERMISSION_DENIED unless `secret` is this node's: only servers that know the node may
    /// drive its plugins.
    fn check_node_secret(&self, secret: &str) -> Result<(), model::wire::CsiCallError> {
        if secret.is_empty() || secret != self.0.node().secret_id {
            return Err(model::wire::CsiCallError {
                code: 7,
                message: "the node secret does not match this client".into(),
            });
        }
        Ok(())
    }
}

impl httpapi::LocalClient for LocalClientHandle {
    fn host_volume<'a>(
        &'a self,
        node_secret: &'a str,
        req: model::host_volume::ClientHostVolumeRequest,
    ) -> httpapi::HostVolumeFuture<'a> {
        Box::pin(async move {
            self.check_node_secret(node_secret)?;
            self.0.host_volume(req).await
        })
    }

    fn csi_node_expand<'a>(
        &'a self,
        node_secret: &'a str,
        req: model::wire::CsiNodeExpandRequest,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), model::wire::CsiCallError>> + Send + 'a>,
    > {
        Box::pin(async move {
            self.check_node_secret(node_secret)?;
            self.0
                .csi_node_expand(&req)
                .await
                .map_err(|e| volume_error(&e))
        })
    }

    fn csi_node_detach<'a>(
        &'a self,
        node_secret: &'a str,
        req: model::wire::CsiNodeDetachRequest,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), model::wire::CsiCallError>> + Send + 'a>,
    > {
        Box::pin(async move {
            self.check_node_secret(node_secret)?;
            let usage = client::CsiVolumeUsage {
                read_only: req.read_only,
                attachment_mode: req.attachment_mode.clone(),
                access_mode: req.access_mode.clone(),
            };
            self.0
                .csi_node_detach(
                    &req.plugin_id,
                    &req.volume_id,
                    &req.external_id,
                    &req.alloc_id,
                    &usage,
                )
                .await
                .map_err(|e| volume_error(&e))
        })
    }

    fn csi_controller<'a>(
        &'a self,
        node_secret: &'a str,
        req: model::wire::CsiControllerRequest,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<
                    Output = Result<model::wire::CsiControllerReply, model::wire::CsiCallError>,
                > + Send
                + 'a,
        >,
    > {
        Box::pin(async move {
            let refuse = |code: i32, message: String| model::wire::CsiCallError { code, message };
            self.check_node_secret(node_secret)?;
            let Some(plugin) = self.0.csi_controller(&req.plugin_id) else {
                // UNAVAILABLE, so the server tries the next controller instance.
                return Err(refuse(
                    14,
                    format!(
                        "plugin {}: no controller instance runs on this client",
                        req.plugin_id
                    ),
                ));
            };
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
            let left = u64::try_from(req.deadline.saturating_sub(now)).unwrap_or(0);
            if left == 0 {
                return Err(refuse(4, "the call's deadline has passed".into()));
            }
            let plugin = plugin.with_timeout(std::time::Duration::from_nanos(left));
            csi::remote::dispatch(&plugin, req.call)
                .await
                .map_err(|e| csi::remote::wire_error(&e))
        })
    }

    fn alloc_dir(&self, alloc_id: &str) -> Option<PathBuf> {
        Some(self.0.alloc_dir(alloc_id))
    }

    fn node_id(&self) -> String {
        self.0.node_id().to_string()
    }

    fn signal<'a>(
        &'a self,
        alloc_id: &'a str,
        task: &'a str,
        signal: &'a str,
    ) -> httpapi::LocalFuture<'a, ()> {
        let task = (!task.is_empty()).then_some(task);
        Box::pin(async move {
            self.0
                .signal_alloc(alloc_id, task, signal)
                .await
                .map_err(local_error)
        })
    }

    fn restart<'a>(
        &'a self,
        alloc_id: &'a str,
        task: &'a str,
        all_tasks: bool,
    ) -> httpapi::LocalFuture<'a, ()> {
        let task = (!task.is_empty()).then_some(task);
        Box::pin(async move {
            let done = if all_tasks {
                self.0.restart_all_tasks(alloc_id).await
            } else {
                self.0.restart_alloc(alloc_id, task).await
            };
            done.map_err(local_error)
        })
    }

    fn alloc_stats<'a>(
        &'a self,
        alloc_id: &'a str,
    ) -> httpapi::LocalFuture<'a, BTreeMap<String, httpapi::TaskUsage>> {
        Box::pin(async move {
            let stats = self.0.alloc_stats(alloc_id).await.map_err(local_error)?;
            let mut devices = self
                .0
                .alloc_device_stats(alloc_id)
                .await
                .map_err(local_error)?;
            Ok(stats
                .into_iter()
                .map(|(task, s)| {
                    let usage = httpapi::TaskUsage {
                        timestamp_unix_ns: s.timestamp_unix_ns,
                        cpu_percent: s.cpu_percent,
                        cpu_user_seconds: s.cpu_user_seconds,
                        cpu_system_seconds: s.cpu_system_seconds,
                        memory_rss_bytes: s.memory_rss_bytes,
                        memory_swap_bytes: s.memory_swap_bytes,
                        devices: devices.remove(&task).unwrap_or_default(),
                    };
                    (task, usage)
                })
                .collect())
        })
    }

    fn alloc_checks<'a>(
        &'a self,
        alloc_id: &'a str,
    ) -> httpapi::LocalFuture<'a, BTreeMap<String, model::checks::CheckQueryResult>> {
        Box::pin(async move { self.0.alloc_checks(alloc_id).map_err(local_error) })
    }

    fn host_stats(&self) -> httpapi::LocalFuture<'_, httpapi::HostStats> {
        Box::pin(async move { Ok(host_stats_of(self.0.host_stats().await)) })
    }

    fn servers(&self) -> Vec<String> {
        self.1.servers()
    }

    fn set_servers(&self, addrs: &[String]) -> Result<(), String> {
        self.1.set_servers(addrs)
    }

    fn gc_alloc<'a>(&'a self, alloc_id: &'a str) -> httpapi::LocalFuture<'a, ()> {
        Box::pin(async move {
            self.0.gc_alloc(alloc_id).await.map_err(|e| {
                let kind = match e {
                    client::GcError::UnknownAlloc(_) => httpapi::LocalErrorKind::NotFound,
                    // Nomad answers 500 with its message.
                    client::GcError::NotEligible(_) => httpapi::LocalErrorKind::Internal,
                };
                httpapi::LocalClientError {
                    kind,
                    message: e.to_string(),
                }
            })
        })
    }

    fn gc_all(&self) -> httpapi::LocalFuture<'_, ()> {
        Box::pin(async move {
            self.0.gc_all().await;
            Ok(())
        })
    }

    fn node_meta(&self) -> httpapi::LocalFuture<'_, model::node_meta::NodeMetaResponse> {
        Box::pin(async move { Ok(self.0.node_meta().await) })
    }

    fn apply_node_meta(
        &self,
        changes: model::node_meta::DynamicMeta,
    ) -> httpapi::LocalFuture<'_, model::node_meta::NodeMetaResponse> {
        Box::pin(async move {
            self.0.apply_node_meta(&changes).await.map_err(|e| {
                let kind = match e {
                    client::NodeMetaError::Invalid(_) => httpapi::LocalErrorKind::BadRequest,
                    client::NodeMetaError::Persist(_) => httpapi::LocalErrorKind::Internal,
                };
                httpapi::LocalClientError {
                    kind,
                    message: e.to_string(),
                }
            })
        })
    }

    fn exec<'a>(
        &'a self,
        alloc_id: &'a str,
        task: &'a str,
        command: &'a [String],
        tty: bool,
    ) -> httpapi::LocalFuture<'a, httpapi::ExecSession> {
        Box::pin(async move {
            let mut stream = self
                .0
                .exec_alloc(alloc_id, task, command, tty)
                .await
                .map_err(local_error)?;
            // The driver's stream kills the command when dropped: it becomes the session's guard,
            // its parts moved out first.
            let stdout = std::mem::replace(&mut stream.stdout, Box::pin(tokio::io::empty()));
            let stderr = std::mem::replace(&mut stream.stderr, Box::pin(tokio::io::empty()));
            let exit = std::mem::replace(&mut stream.exit, Box::pin(std::future::pending()));
            Ok(httpapi::ExecSession {
                stdin: stream.stdin.take(),
                stdout,
                stderr,
                exit: Box::pin(async move { exit.await.exit_code }),
                resize: stream.resize.take(),
                guard: Box::new(stream),
            })
        })
    }
}

/// The client's action errors as the HTTP API reports them.
fn local_error(e: client::AllocActionError) -> httpapi::LocalClientError {
    use client::AllocActionError as E;
    use httpapi::LocalErrorKind as K;
    let kind = match &e {
        E::UnknownAlloc(_) | E::UnknownTask { .. } => K::NotFound,
        E::NotRunning(_) | E::ShouldNotRun(_) => K::BadRequest,
        E::Driver(drivers::DriverError::NotSupported(_)) => K::NotSupported,
        E::Driver(
            drivers::DriverError::UnknownSignal(_)
            | drivers::DriverError::NotRunning(_)
            | drivers::DriverError::InvalidConfig { .. },
        ) => K::BadRequest,
        E::Driver(drivers::DriverError::Start { .. }) => K::BadRequest,
        E::Driver(_) | E::Timeout(_) => K::Internal,
    };
    httpapi::LocalClientError {
        kind,
        message: e.to_string(),
    }
}

fn host_stats_of(h: client::HostStats) -> httpapi::HostStats {
    let disk = |d: client::HostDiskStats| httpapi::HostDiskStats {
        device: d.device,
        mountpoint: d.mountpoint,
        size: d.size_bytes,
        used: d.used_bytes,
        available: d.available_bytes,
        used_percent: d.used_percent,
        inodes_used_percent: d.inodes_used_percent,
    };
    httpapi::HostStats {
        memory: httpapi::HostMemoryStats {
            total: h.memory.total,
            available: h.memory.available,
            used: h.memory.used,
            free: h.memory.free,
        },
        cpu: h
            .cpus
            .into_iter()
            .map(|c| httpapi::HostCpuStats {
                cpu: c.cpu,
                user: c.user,
                system: c.system,
                idle: c.idle,
                total: c.total,
            })
            .collect(),
        disk_stats: h.disks.into_iter().map(disk).collect(),
        alloc_dir_stats: h.alloc_dir.map(disk),
        device_stats: Vec::new(),
        uptime: h.uptime_s,
        timestamp: h.timestamp_unix_ns,
        cpu_ticks_consumed: h.cpu_ticks_consumed,
    }
}

/// Starts this agent's client: it registers with the server over rpc like any remote client would.
#[allow(clippy::too_many_arguments)]
async fn start_client(
    cfg: &AgentConfig,
    opts: &AgentOptions,
    data_dir: &std::path::Path,
    name: &str,
    region: &str,
    dc: &str,
    servers: Vec<String>,
    http: SocketAddr,
    rpc_tls: Option<Arc<rpc::tls::AgentTls>>,
) -> Result<(client::Client, Arc<client::RpcServerConn>)> {
    let dev = opts.dev;
    let block = cfg.client.clone().unwrap_or_default();
    let mut ccfg = client::ClientConfig::new(data_dir.join("client"));
    ccfg.node_name = name.to_string();
    ccfg.region = region.to_string();
    ccfg.datacenter = dc.to_string();
    ccfg.node_class = block.node_class.clone().unwrap_or_default();
    if let Some(pool) = block.node_pool.clone() {
        ccfg.node_pool = pool;
    }
    ccfg.meta = block.meta.clone().unwrap_or_default().into_iter().collect();
    ccfg.options = block
        .options
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    ccfg.host_volumes = block
        .host_volume
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(name, v)| {
            let cfg = model::node::ClientHostVolumeConfig {
                name: name.clone(),
                path: v.path.unwrap_or_default(),
                read_only: v.read_only.unwrap_or(false),
                id: String::new(),
            };
            (name, cfg)
        })
        .collect();
    ccfg.host_volumes_dir = match block.host_volumes_dir.as_deref().filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => data_dir.join("host_volumes"),
    };
    ccfg.host_volume_plugin_dir = match block
        .host_volume_plugin_dir
        .as_deref()
        .filter(|d| !d.is_empty())
    {
        Some(d) => PathBuf::from(d),
        None => data_dir.join("host_volume_plugins"),
    };
    ccfg.cpu_total_compute_mhz = block.cpu_total_compute;
    ccfg.memory_total_mb = block.memory_total_mb;
    ccfg.host_networks = block
        .host_network
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|(name, n)| {
            let cfg = client::HostNetworkConfig {
                cidr: n.cidr.unwrap_or_default(),
                interface: n.interface.unwrap_or_default(),
                reserved_ports: n.reserved_ports.unwrap_or_default(),
            };
            (name, cfg)
        })
        .collect();
    let net = &mut ccfg.network;
    if let Some(p) = block.cni_path.clone().filter(|p| !p.is_empty()) {
        net.cni_path = p;
    }
    if let Some(d) = block.cni_config_dir.clone().filter(|d| !d.is_empty()) {
        net.cni_config_dir = d.into();
    }
    if let Some(n) = block.bridge_network_name.clone().filter(|n| !n.is_empty()) {
        net.bridge_name = n;
    }
    if let Some(s) = block
        .bridge_network_subnet
        .clone()
        .filter(|s| !s.is_empty())
    {
        net.bridge_subnet = s;
    }
    net.hairpin_mode = block.bridge_network_hairpin_mode.unwrap_or(false);
    // Nomad's `-dev` puts the node on the loopback, so a dev job's ports answer on 127.0.0.1.
    ccfg.network_interface = block
        .network_interface
        .clone()
        .filter(|i| !i.is_empty())
        .or_else(|| dev.then(|| "lo".to_string()));
    ccfg.http_addr = http.to_string();
    ccfg.gc = client_gc_config(&block, dev)?;
    let raw_exec_enabled = dev || plugin_enabled(cfg, "raw_exec");
    // Task logs are rotated by `caravan logmon` helpers (this executable), which outlive us.
    let logmon = match &opts.helper_exe {
        Some(exe) => exe.clone(),
        None => std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("finding this executable for the log helper: {e}"))?,
    };
    let mut drivers: Vec<Arc<dyn drivers::Driver>> = vec![
        Arc::new(
            drivers::RawExecDriver::new(drivers::RawExecConfig {
                enabled: raw_exec_enabled,
            })
            .with_logmon(logmon.clone()),
        ),
        Arc::new(drivers::ExecDriver::new().with_config(exec_plugin_config(cfg)?)),
        // java and qemu: undetected, saying why, where there is no JVM or emulator.
        Arc::new(drivers::JavaDriver::new(java_plugin_config(cfg)?)),
        Arc::new(drivers::QemuDriver::new(qemu_plugin_config(cfg)?).with_logmon(logmon)),
    ];
    // Docker: always registered; without a daemon it fingerprints as undetected.
    let docker = Arc::new(drivers::DockerDriver::new(docker_plugin_config(cfg)?));
    docker.spawn_gc();
    drivers.push(docker);
    // Podman: its REST API on `socket_path`; without one it fingerprints as undetected.
    let (podman, podman_auth) = podman_plugin_config(cfg)?;
    drivers.push(Arc::new(
        drivers::PodmanDriver::new(podman).with_auth_file(podman_auth),
    ));
    // The mock driver (tests, demos): tasks that only pretend to run, only when asked for with
    // `plugin "mock_driver" { config { enabled = true } }`.
    if plugin_enabled(cfg, "mock_driver") {
        drivers.push(Arc::new(drivers::MockDriver::new()));
    }
    let device_plugins = device_plugins(cfg)?;
    let rpc = rpc::Client::with_tls(rpc::limits::CALL_TIMEOUT_DEFAULT, rpc_tls);
    let conn = Arc::new(client::RpcServerConn::new(rpc, servers));
    let client = client::Client::start_with_devices(ccfg, conn.clone(), drivers, device_plugins)
        .await
        .map_err(|e| anyhow::anyhow!("starting the client: {e}"))?;
    Ok((client, conn))
}

/// The `client { gc_* }` keys over Nomad's defaults (a dev agent's: every 10m, at 99 % disk or
/// inode use); a value no collector can run with is refused, naming its key.
fn client_gc_config(block: &jobspec::agent::ClientConfig, dev: bool) -> Result<client::GcConfig> {
    let mut gc = if dev {
        client::GcConfig::dev()
    } else {
        client::GcConfig::default()
    };
    if let Some(d) = block.gc_interval {
        gc.interval = d;
    }
    if let Some(p) = block.gc_disk_usage_threshold {
        gc.disk_usage_threshold = p;
    }
    if let Some(p) = block.gc_inode_usage_threshold {
        gc.inode_usage_threshold = p;
    }
    let count = |key: &str, n: u64| {
        usize::try_from(n).map_err(|_| anyhow::anyhow!("client.{key} = {n}: too large"))
    };
    if let Some(n) = block.gc_max_allocs {
        gc.max_allocs = count("gc_max_allocs", n)?;
    }
    if let Some(n) = block.gc_parallel_destroys {
        gc.parallel_destroys = count("gc_parallel_destroys", n)?;
    }
    gc.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(gc)
}

/// Every key of Nomad's `autopilot { … }` block over Nomad's defaults: what the first leader
/// stores as the cluster's autopilot configuration. Nomad Enterprise's switches may be written
/// `false`; `true` is refused, as is a key Nomad does not know.
fn apply_autopilot(cfg: &AgentConfig, server_cfg: &mut server::ServerConfig) -> Result<()> {
    if let Some(block) = cfg.autopilot.as_ref() {
        server_cfg.autopilot = autopilot_config(block)?;
    }
    Ok(())
}

fn autopilot_config(block: &serde_json::Value) -> Result<model::autopilot::AutopilotConfiguration> {
    const KEYS: [&str; 8] = [
        "cleanup_dead_servers",
        "last_contact_threshold",
        "max_trailing_logs",
        "min_quorum",
        "server_stabilization_time",
        "enable_redundancy_zones",
        "disable_upgrade_migration",
        "enable_custom_upgrades",
    ];
    let mut out = model::autopilot::AutopilotConfiguration::agent_default();
    let Some(map) = block.as_object() else {
        bail!("autopilot: expected a block, got {block}");
    };
    if let Some(unknown) = map.keys().find(|k| !KEYS.contains(&k.as_str())) {
        bail!(
            "autopilot.{unknown}: unknown key (autopilot takes {})",
            KEYS.join(", ")
        );
    }
    let boolean = |key: &str, v: &serde_json::Value| -> Result<bool> {
        match v {
            serde_json::Value::Bool(b) => Ok(*b),
            serde_json::Value::String(s) if s == "true" => Ok(true),
            serde_json::Value::String(s) if s == "false" => Ok(false),
            other => bail!("autopilot.{key}: expected true or false, got {other}"),
        }
    };
    let duration = |key: &str, v: &serde_json::Value| -> Result<model::Duration> {
        let text = v.as_str().ok_or_else(|| {
            anyhow::anyhow!("autopilot.{key}: expected a duration like \"10s\", got {v}")
        })?;
        let d = model::Duration::parse(text)
            .map_err(|e| anyhow::anyhow!("autopilot.{key}: {e} (write a duration like \"10s\")"))?;
        if d.as_nanos() < 0 {
            bail!("autopilot.{key}: must not be negative, got {text:?}");
        }
        Ok(d)
    };
    let count = |key: &str, v: &serde_json::Value| -> Result<u64> {
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
            .ok_or_else(|| anyhow::anyhow!("autopilot.{key}: expected a whole number ≥ 0, got {v}"))
    };
    for (key, v) in map {
        match key.as_str() {
            "cleanup_dead_servers" => out.cleanup_dead_servers = boolean(key, v)?,
            "last_contact_threshold" => out.last_contact_threshold = duration(key, v)?,
            "max_trailing_logs" => out.max_trailing_logs = count(key, v)?,
            "min_quorum" => out.min_quorum = count(key, v)?,
            "server_stabilization_time" => out.server_stabilization_time = duration(key, v)?,
            "enable_redundancy_zones" => out.enable_redundancy_zones = boolean(key, v)?,
            "disable_upgrade_migration" => out.disable_upgrade_migration = boolean(key, v)?,
            "enable_custom_upgrades" => out.enable_custom_upgrades = boolean(key, v)?,
            _ => unreachable!("checked above"),
        }
    }
    if let Some((_, error)) = out.enterprise_key_set() {
        bail!("autopilot.{error}");
    }
    Ok(out)
}

/// The plugins built into Caravan, which `plugin "<name>"` blocks may configure.
const BUILTIN_PLUGINS: [&str; 9] = [
    "raw_exec",
    "exec",
    "java",
    "qemu",
    "docker",
    "podman",
    "mock_driver",
    "mock_device",
    "nvidia",
];

/// The device plugins the agent's `plugin` blocks configure (`nvidia` unless turned off,
/// `mock_device` when given), after refusing a block for a plugin Caravan does not have: such
/// a block would otherwise be ignored without a word.
fn device_plugins(cfg: &AgentConfig) -> Result<Vec<Arc<dyn client::devices::DevicePlugin>>> {
    let mut configs = std::collections::BTreeMap::new();
    check_plugin_blocks(cfg)?;
    for (name, p) in cfg.plugin.iter().flatten() {
        configs.insert(name.clone(), p.config.clone().unwrap_or_default());
    }
    client::devices::from_plugin_configs(&configs).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Every agent (a server-only one too) refuses `plugin` blocks it would ignore: a plugin Caravan
/// does not have, or `args` (which only external plugins take).
fn check_plugin_blocks(cfg: &AgentConfig) -> Result<()> {
    for (name, p) in cfg.plugin.iter().flatten() {
        if !BUILTIN_PLUGINS.contains(&name.as_str()) {
            bail!(
                "plugin {name:?}: Caravan has no such plugin (built in: {}); loading external plugins from plugin_dir is not supported yet",
                BUILTIN_PLUGINS.join(", ")
            );
        }
        if p.args.as_ref().is_some_and(|a| !a.is_empty()) {
            bail!("plugin {name:?}: args are for external plugins; {name} is built in and takes only config");
        }
    }
    Ok(())
}

/// `plugin "docker" { config { … } }`, or the defaults without one.
fn docker_plugin_config(cfg: &AgentConfig) -> Result<drivers::DockerConfig> {
    let config = cfg
        .plugin
        .as_ref()
        .and_then(|plugins| plugins.get("docker"))
        .and_then(|p| p.config.clone())
        .unwrap_or_default();
    drivers::DockerConfig::from_plugin_config(&config).map_err(|e| anyhow::anyhow!("{e}"))
}

/// `plugin "exec" { config { chroot_env { … } } }`, or the defaults without one.
fn exec_plugin_config(cfg: &AgentConfig) -> Result<drivers::ExecConfig> {
    let config = cfg
        .plugin
        .as_ref()
        .and_then(|plugins| plugins.get("exec"))
        .and_then(|p| p.config.clone())
        .unwrap_or_default();
    drivers::ExecConfig::from_plugin_config(&config).map_err(|e| anyhow::anyhow!("{e}"))
}

/// The java driver's isolation: exec's (`chroot_env`, `allow_caps`), with `plugin "java" {
/// config { allow_caps default_pid_mode default_ipc_mode } }` over it (Nomad's java options; the
/// modes can only be `private` here).
fn java_plugin_config(cfg: &AgentConfig) -> Result<drivers::ExecConfig> {
    let mut exec = exec_plugin_config(cfg)?;
    let Some(java) = cfg
        .plugin
        .as_ref()
        .and_then(|plugins| plugins.get("java"))
        .and_then(|p| p.config.clone())
    else {
        return Ok(exec);
    };
    let blocks: Vec<serde_json::Value> = match &java {
        serde_json::Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    };
    let mut caps = None;
    for block in &blocks {
        let Some(map) = block.as_object() else {
            bail!("plugin \"java\" config: expected a block, found {block}");
        };
        for (k, v) in map {
            match k.as_str() {
                "allow_caps" => caps = Some(v.clone()),
                "default_pid_mode" | "default_ipc_mode" => match v.as_str() {
                    Some("private") => {}
                    Some("host") => bail!(
                        "plugin \"java\" config: {k} = \"host\" is not supported yet; java tasks get private namespaces"
                    ),
                    _ => bail!("plugin \"java\" config: {k}: {v} is not \"private\" or \"host\""),
                },
                other => bail!(
                    "plugin \"java\" config: unknown key {other:?}; expected allow_caps, default_pid_mode or default_ipc_mode"
                ),
            }
        }
    }
    if let Some(caps) = caps {
        let parsed =
            drivers::ExecConfig::from_plugin_config(&serde_json::json!({ "allow_caps": caps }))
                .map_err(|e| anyhow::anyhow!("{}", e.to_string().replace("exec", "java")))?;
        exec.allow_caps = parsed.allow_caps;
    }
    Ok(exec)
}

/// `plugin "podman" { config { socket_path volumes gc auth allow_caps } }`.
fn podman_plugin_config(
    cfg: &AgentConfig,
) -> Result<(drivers::DockerConfig, Option<std::path::PathBuf>)> {
    let config = cfg
        .plugin
        .as_ref()
        .and_then(|plugins| plugins.get("podman"))
        .and_then(|p| p.config.clone())
        .unwrap_or_default();
    drivers::podman::plugin_config(&config).map_err(|e| anyhow::anyhow!("{e}"))
}

/// `plugin "qemu" { config { image_paths args_allowlist emulators_allowlist } }`.
fn qemu_plugin_config(cfg: &AgentConfig) -> Result<drivers::QemuConfig> {
    let config = cfg
        .plugin
        .as_ref()
        .and_then(|plugins| plugins.get("qemu"))
        .and_then(|p| p.config.clone())
        .unwrap_or_default();
    drivers::QemuConfig::from_plugin_config(&config).map_err(|e| anyhow::anyhow!("{e}"))
}

/// `plugin "NAME" { config { enabled = true } }`.
fn plugin_enabled(cfg: &AgentConfig, name: &str) -> bool {
    cfg.plugin
        .as_ref()
        .and_then(|plugins| plugins.get(name))
        .and_then(|p| p.config.as_ref())
        .and_then(|c| c.get("enabled"))
        .is_some_and(|v| {
            v.as_bool() == Some(true) || v.as_str() == Some("true") || v.as_str() == Some("1")
        })
}

/// This machine's host name (`caravan` when it has none): the default node name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "caravan".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_plugin_config_from_an_agent_file() {
        let src = r#"
plugin "docker" {
  config {
    allow_privileged = true
    allow_caps       = ["chown", "net_raw"]
    volumes {
      enabled = true
    }
    gc {
      image_delay = "1m"
      container   = false
    }
    pull_activity_timeout = "30s"
  }
}
"#;
        let cfg = jobspec::agent::parse_str(src, "agent.hcl").unwrap();
        let docker = docker_plugin_config(&cfg).unwrap();
        assert!(docker.allow_privileged && docker.volumes_enabled && !docker.gc_container);
        assert_eq!(docker.allow_caps, ["chown", "net_raw"]);
        assert_eq!(docker.gc_image_delay, std::time::Duration::from_secs(60));
        assert_eq!(
            docker.pull_activity_timeout,
            std::time::Duration::from_secs(30)
        );
        let none = jobspec::agent::parse_str("", "agent.hcl").unwrap();
        assert_eq!(
            docker_plugin_config(&none).unwrap(),
            drivers::DockerConfig::default()
        );
    }

    #[test]
    fn exec_plugin_chroot_env_from_an_agent_file() {
        let src = r#"
plugin "exec" {
  config {
    chroot_env {
      "/bin"        = "/bin"
      "/opt/tools"  = "/tools"
    }
  }
}
"#;
        let cfg = jobspec::agent::parse_str(src, "agent.hcl").unwrap();
        let exec = exec_plugin_config(&cfg).unwrap();
        let want: std::collections::BTreeMap<std::path::PathBuf, std::path::PathBuf> =
            [("/bin", "/bin"), ("/opt/tools", "/tools")]
                .into_iter()
                .map(|(h, c)| (h.into(), c.into()))
                .collect();
        assert_eq!(exec.chroot_env, want);
        let none = jobspec::agent::parse_str("", "agent.hcl").unwrap();
        assert_eq!(
            exec_plugin_config(&none).unwrap(),
            drivers::ExecConfig::default()
        );
        let bad = r#"plugin "exec" { config { chroot_env { "/bin" = "bin" } } }"#;
        let bad = jobspec::agent::parse_str(bad, "agent.hcl").unwrap();
        let err = exec_plugin_config(&bad).unwrap_err().to_string();
        assert!(
            err.contains("chroot_env[\"/bin\"]") && err.contains("absolute"),
            "{err}"
        );
    }

    #[test]
    fn client_gc_keys_over_nomads_defaults() {
        let block = |src: &str| {
            jobspec::agent::parse_str(src, "agent.hcl")
                .unwrap()
                .client
                .unwrap_or_default()
        };
        assert_eq!(
            client_gc_config(&block(""), false).unwrap(),
            client::GcConfig::default()
        );
        let dev = client_gc_config(&block(""), true).unwrap();
        assert_eq!(dev.interval, std::time::Duration::from_secs(600));
        assert_eq!(dev.disk_usage_threshold, 99.0);
        let set = block(
            "client {\n  gc_interval = \"5s\"\n  gc_max_allocs = 3\n  gc_parallel_destroys = 1\n  gc_disk_usage_threshold = 95\n}",
        );
        let gc = client_gc_config(&set, true).unwrap();
        assert_eq!(gc.interval, std::time::Duration::from_secs(5));
        assert_eq!((gc.max_allocs, gc.parallel_destroys), (3, 1));
        assert_eq!(
            (gc.disk_usage_threshold, gc.inode_usage_threshold),
            (95.0, 99.0)
        );
        for (src, key) in [
            ("client {\n gc_interval = \"0s\"\n}", "client.gc_interval"),
            (
                "client {\n gc_parallel_destroys = 0\n}",
                "client.gc_parallel_destroys",
            ),
            (
                "client {\n gc_inode_usage_threshold = 101\n}",
                "client.gc_inode_usage_threshold",
            ),
        ] {
            let err = client_gc_config(&block(src), false)
                .unwrap_err()
                .to_string();
            assert!(err.contains(key), "{src}: {err}");
        }
    }

    #[test]
    fn every_autopilot_key_over_nomads_defaults() {
        let parse = |src: &str| {
            let cfg = jobspec::agent::parse_str(src, "agent.hcl").unwrap();
            let mut server_cfg =
                server::ServerConfig::new(PathBuf::from("/tmp"), "127.0.0.1:0".parse().unwrap());
            apply_autopilot(&cfg, &mut server_cfg).map(|()| server_cfg.autopilot)
        };
        assert_eq!(
            parse("").unwrap(),
            model::autopilot::AutopilotConfiguration::agent_default()
        );
        let all = parse(
            "autopilot {\n  cleanup_dead_servers = false\n  last_contact_threshold = \"1s\"\n  \
             max_trailing_logs = 10\n  min_quorum = 3\n  server_stabilization_time = \"30s\"\n  \
             enable_redundancy_zones = false\n  disable_upgrade_migration = false\n  \
             enable_custom_upgrades = false\n}\n",
        )
        .unwrap();
        assert_eq!(
            all,
            model::autopilot::AutopilotConfiguration {
                cleanup_dead_servers: false,
                last_contact_threshold: model::Duration::from_secs(1),
                max_trailing_logs: 10,
                min_quorum: 3,
                server_stabilization_time: model::Duration::from_secs(30),
                ..model::autopilot::AutopilotConfiguration::default()
            }
        );
        for (src, want) in [
            (
                "autopilot {\n enable_redundancy_zones = true\n}",
                "autopilot.enable_redundancy_zones: not supported (Nomad Enterprise feature)",
            ),
            (
                "autopilot {\n disable_upgrade_migration = true\n}",
                "autopilot.disable_upgrade_migration: not supported (Nomad Enterprise feature)",
            ),
            (
                "autopilot {\n enable_custom_upgrades = true\n}",
                "autopilot.enable_custom_upgrades: not supported (Nomad Enterprise feature)",
            ),
            (
                "autopilot {\n last_contact_threshold = \"soon\"\n}",
                "autopilot.last_contact_threshold: invalid duration",
            ),
            (
                "autopilot {\n max_trailing_logs = -1\n}",
                "autopilot.max_trailing_logs: expected a whole number",
            ),
            (
                "autopilot {\n min_quorum = \"x\"\n}",
                "autopilot.min_quorum: expected a whole number",
            ),
            (
                "autopilot {\n cleanup_dead_servers = 1\n}",
                "autopilot.cleanup_dead_servers: expected true or false",
            ),
            (
                "autopilot {\n redundancy_zone_tag = \"zone\"\n}",
                "autopilot.redundancy_zone_tag: unknown key",
            ),
        ] {
            let err = parse(src).unwrap_err().to_string();
            assert!(err.starts_with(want), "{src}: {err}");
        }
    }
}
