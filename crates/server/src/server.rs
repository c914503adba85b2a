//! Starting a server: the state store, raft over it, the rpc listener; and the plumbing every endpoint
//! shares (applying a command through raft, forwarding to the leader).

use crate::config::ServerConfig;
use crate::error::ServerError;
use crate::fsm::{Fsm, FsmResult};
use crate::handler::RpcHandler;
use state::{ApplyResponse, Command, StateStore};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a write waits for a leader to exist before it fails with "No cluster leader".
const LEADER_WAIT: Duration = Duration::from_secs(10);
/// How long a starting single server waits to re-apply its log before serving reads anyway.
const STARTUP_CATCH_UP: Duration = Duration::from_secs(30);
/// The deadline of one rpc call between servers.
const RPC_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a follower waits for the leader's read index, and then to have applied up to it.
const READ_BARRIER_WAIT: Duration = Duration::from_secs(2);
/// How soon a read barrier that could not be passed is tried again (within its wait).
const READ_BARRIER_RETRY: Duration = Duration::from_millis(50);

/// A running server. Cheap to clone; every clone is the same server.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: ServerConfig,
    store: StateStore,
    raft: raft::RaftNode,
    rpc_client: rpc::Client,
    rpc_addr: String,
    node_id: u64,
    /// Dropping the sender (or sending `true`) stops the rpc listener (and, #4, the leader loops).
    shutdown: watch::Sender<bool>,
    /// #4: the leader loops' state (`leader::supervise` starts and stops them).
    leadership: crate::leader::Leadership,
    /// The HTTP API that requests forwarded by client-only agents run through.
    http: std::sync::OnceLock<Arc<dyn crate::http_forward::HttpHandler>>,
    /// The agent's advertised HTTP address, once its listener is bound (`Server.Info` tells the
    /// other servers, for `server_id=` on monitor and host).
    http_addr: std::sync::OnceLock<String>,
    /// Other servers' rpc addresses the join loop talks to (`retry_join`, `server join`).
    join_addrs: std::sync::Mutex<Vec<String>>,
    /// Membership on the serf port, when configured; the join loop also talks to the RPC
    /// address of every live member of this region it reports.
    gossip: Option<gossip::Gossip>,
    /// How controller calls reach client agents (installed by the agent).
    csi_transport: std::sync::OnceLock<Arc<dyn crate::csi::CsiTransport>>,
    /// The per-plugin FIFO locks of the controller-call serializer.
    csi_locks: crate::csi::controller::ControllerLocks,
    /// Host volume writes run one at a time (Nomad serializes them per volume).
    host_volume_lock: tokio::sync::Mutex<()>,
    /// Compiled ACLs by token secret.
    acl_cache: crate::acl::AclCache,
    /// The leader's variable lock clocks.
    lock_timers: std::sync::Mutex<crate::variables::LockTimers>,
    /// The gossip keys last seen and the server-call secrets derived from them: every
    /// servers-only call (raft's included) is checked against them, so they are derived once
    /// per keyring change, not per call.
    keyring_secrets: std::sync::Mutex<KeyringSecrets>,
    /// The event stream's ring of applied entries.
    events: Arc<crate::events::EventBroker>,
    /// Clients' allocation updates, folded into one Raft entry per window.
    alloc_batcher: crate::alloc_batch::AllocUpdateBatcher,
    /// How many scheduling workers this server runs when it leads, and what they are doing.
    worker_pool: Arc<crate::leader::pool::WorkerPool>,
}

/// Gossip keys (as last seen) and the server-call secrets derived from them.
type KeyringSecrets = (Arc<Vec<String>>, Arc<Vec<String>>);

/// A server as `/v1/agent/members` and `server members` show it.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    /// Its RPC address.
    pub addr: String,
    pub raft_id: u64,
    pub leader: bool,
    /// Gossip's word (`alive`, `leaving`, `left`, `failed`); `alive` for a raft member
    /// gossip does not know.
    pub status: String,
    /// Its serf address; empty for a raft member gossip does not know.
    pub serf_addr: String,
    pub datacenter: String,
    pub region: String,
    pub build: String,
}

impl Server {
    /// Opens (or creates) the server's data dir, restores state from raft, starts serving rpc and,
    /// when `bootstrap_expect` is 1, bootstraps a single-server cluster (a no-op on later starts).
    pub async fn start(cfg: ServerConfig) -> Result<Server, ServerError> {
        std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
            ServerError::internal(format!(
                "cannot create the data dir {}: {e}",
                cfg.data_dir.display()
            ))
        })?;
        let had_identity = cfg.data_dir.join("server-id").exists();
        let node_id = load_or_create_node_id(&cfg.data_dir)?;
        // The raft store's own marker lives inside it; a server that has an identity but whose
        // whole raft dir is gone (deleted, or a volume that did not mount) would otherwise start
        // empty under its old ID, free to vote twice.
        let raft_dir = cfg.data_dir.join("raft");
        if had_identity && !raft_dir.join("raft.redb").exists() {
            return Err(damaged_store(
                &cfg.data_dir,
                raft::RaftError::Damaged {
                    dir: raft_dir.display().to_string(),
                    what: format!(
                        "this server has a raft ID ({node_id}, in server-id) but no raft log: \
                         starting from an empty one would lose the cluster's state and this server's vote"
                    ),
                },
            ));
        }
        let (listener, bound) = match &cfg.network {
            // A simulated server listens on no port: its address is the one the simulation
            // gave it.
            Some(_) => {
                if cfg.rpc_advertise.is_none() {
                    return Err(ServerError::internal(
                        "a server on a simulated network needs rpc_advertise (its address there)",
                    ));
                }
                (None, cfg.rpc_bind)
            }
            None => {
                let listener = tokio::net::TcpListener::bind(cfg.rpc_bind)
                    .await
                    .map_err(|e| {
                        ServerError::internal(format!(
                            "cannot bind the rpc port {}: {e}",
                            cfg.rpc_bind
                        ))
                    })?;
                let bound = listener
                    .local_addr()
                    .map_err(|e| ServerError::internal(e.to_string()))?;
                (Some(listener), bound)
            }
        };
        // An unspecified bind address (0.0.0.0) is not something peers can dial: advertise loopback
        // with the bound port unless the operator set an address to advertise.
        let dialable = if bound.ip().is_unspecified() {
            std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), bound.port())
        } else {
            bound
        };
        let rpc_addr = cfg
            .rpc_advertise
            .clone()
            .unwrap_or_else(|| dialable.to_string());
        let store = StateStore::new();
        let rpc_client =
            rpc::Client::with_auth(RPC_TIMEOUT, cfg.tls.clone(), cfg.rpc_secret.clone());
        let raft_cfg = raft::RaftConfig {
            node_id,
            rpc_addr: rpc_addr.clone(),
            data_dir: cfg.data_dir.join("raft"),
            heartbeat_ms: cfg.raft_heartbeat_ms,
            election_timeout_ms: cfg.raft_election_timeout_ms,
            snapshot_every_entries: cfg.raft_snapshot_every,
            snapshot_every_bytes: cfg.raft_snapshot_every_bytes,
        };
        let events = Arc::new(crate::events::EventBroker::new(
            crate::events::DEFAULT_EVENT_BUFFER,
        ));
        let fsm = Arc::new(Fsm {
            store: store.clone(),
            events: Arc::clone(&events),
        });
        let transport = match &cfg.network {
            Some(net) => raft::Transport::Simulated(net.0.clone()),
            None => raft::Transport::Rpc(rpc_client.clone()),
        };
        let raft = raft::RaftNode::open_with(raft_cfg, fsm, transport)
            .await
            .map_err(|e| damaged_store(&cfg.data_dir, e))?;
        let gossip = match cfg.serf_bind {
            Some(bind) => {
                let mut g = gossip::GossipConfig::new(
                    bind,
                    gossip::Meta {
                        name: format!("{}.{}", cfg.name, cfg.region),
                        region: cfg.region.clone(),
                        datacenter: cfg.datacenter.clone(),
                        rpc_addr: rpc_addr.clone(),
                        raft_id: node_id,
                        build: env!("CARGO_PKG_VERSION").to_string(),
                        expect: cfg.bootstrap_expect,
                    },
                );
                g.advertise = cfg.serf_advertise.or_else(|| {
                    // Bound to every address: advertise the RPC host (what peers dial already).
                    // A host name is resolved; one that resolves to nothing falls back to the
                    // RPC listener's own address.
                    bind.ip().is_unspecified().then(|| {
                        let host = rpc_addr
                            .rsplit_once(':')
                            .and_then(|(h, _)| {
                                let h = h.trim_matches(['[', ']']);
                                h.parse().ok().or_else(|| {
                                    use std::net::ToSocketAddrs;
                                    (h, 0).to_socket_addrs().ok()?.next().map(|a| a.ip())
                                })
                            })
                            .unwrap_or(dialable.ip());
                        std::net::SocketAddr::new(host, 0)
                    })
                });
                g.timing = cfg.gossip_timing;
                g.keys = cfg.gossip_keys.clone();
                g.keyring_file = Some(cfg.data_dir.join("serf.keyring"));
                g.generation_file = Some(cfg.data_dir.join("serf.generation"));
                Some(
                    gossip::Gossip::start(g)
                        .await
                        .map_err(|e| ServerError::internal(e.to_string()))?,
                )
            }
            None => None,
        };
        let (shutdown, shutdown_rx) = watch::channel(false);
        let worker_pool = Arc::new(crate::leader::pool::WorkerPool::new(
            crate::leader::pool::PoolConfig {
                num_schedulers: cfg.num_schedulers,
                enabled_schedulers: cfg.enabled_schedulers.clone(),
            },
        ));
        let server = Server {
            inner: Arc::new(Inner {
                cfg,
                store,
                raft,
                rpc_client,
                rpc_addr,
                node_id,
                shutdown,
                leadership: crate::leader::Leadership::default(),
                http: std::sync::OnceLock::new(),
                http_addr: std::sync::OnceLock::new(),
                join_addrs: std::sync::Mutex::new(Vec::new()),
                gossip,
                csi_transport: std::sync::OnceLock::new(),
                csi_locks: Default::default(),
                host_volume_lock: tokio::sync::Mutex::new(()),
                acl_cache: Default::default(),
                lock_timers: Default::default(),
                keyring_secrets: Default::default(),
                events,
                alloc_batcher: Default::default(),
                worker_pool,
            }),
        };
        let handler = Arc::new(RpcHandler {
            server: server.clone(),
        });
        if let Some(listener) = listener {
            let tls = server.config().tls.clone();
            tokio::spawn(rpc::serve_with(
                listener,
                handler,
                tls,
                wait_for_true(shutdown_rx),
            ));
        }
        // #4: start the leader loops whenever this server leads.
        tokio::spawn(crate::leader::supervise(
            server.clone(),
            server.inner.shutdown.subscribe(),
        ));
        {
            let own = server.inner.rpc_addr.clone();
            let mut addrs = server.join_addrs().lock().expect("join addrs lock");
            for a in &server.inner.cfg.retry_join {
                let a = crate::join::with_port(a);
                if a != own && !addrs.contains(&a) {
                    addrs.push(a);
                }
            }
        }
        server.follow_keyring_secret();
        if let Some(g) = &server.inner.gossip {
            tokio::spawn(crate::join::gossip_join_loop(
                g.clone(),
                server.inner.cfg.retry_join.clone(),
                server.inner.shutdown.subscribe(),
            ));
        }
        tokio::spawn(crate::join::join_loop(
            server.clone(),
            server.inner.shutdown.subscribe(),
        ));
        if server.inner.cfg.bootstrap_expect <= 1 {
            let members = BTreeMap::from([(node_id, server.inner.rpc_addr.clone())]);
            server.inner.raft.bootstrap(members).await?;
            server.catch_up(STARTUP_CATCH_UP).await;
        } else if server.inner.raft.is_initialized().await.unwrap_or(false) {
            // A member restarting: serve reads once its log is applied again.
            server.catch_up(STARTUP_CATCH_UP).await;
        }
        Ok(server)
    }

    pub(crate) fn http_handler_cell(
        &self,
    ) -> &std::sync::OnceLock<Arc<dyn crate::http_forward::HttpHandler>> {
        &self.inner.http
    }

    /// Installs how controller calls reach client agents; the first call wins.
    pub fn set_csi_transport(&self, transport: Arc<dyn crate::csi::CsiTransport>) {
        let _ = self.inner.csi_transport.set(transport);
    }

    pub(crate) fn csi_transport(&self) -> Result<Arc<dyn crate::csi::CsiTransport>, ServerError> {
        self.inner.csi_transport.get().cloned().ok_or_else(|| {
            ServerError::internal(
                "this server has no way to reach client agents for CSI controller calls",
            )
        })
    }

    pub(crate) fn host_volume_lock(&self) -> &tokio::sync::Mutex<()> {
        &self.inner.host_volume_lock
    }

    pub(crate) fn csi_locks(&self) -> &crate::csi::controller::ControllerLocks {
        &self.inner.csi_locks
    }

    pub(crate) fn node_id(&self) -> u64 {
        self.inner.node_id
    }

    /// A server call's secret: the one derived from the configured `encrypt` key, or from any
    /// key installed in the gossip keyring (a rotation installs the new key everywhere before
    /// it is used, so every server accepts what the others send throughout).
    pub(crate) fn accepts_rpc_secret(&self, given: Option<&str>) -> bool {
        if let Some(secret) = &self.inner.cfg.rpc_secret {
            if crate::peers::secret_matches(secret, given) {
                return true;
            }
        }
        self.keyring_secrets()
            .iter()
            .any(|s| crate::peers::secret_matches(s, given))
    }

    /// The secrets of the installed gossip keys, derived again only when the keyring changed.
    fn keyring_secrets(&self) -> Arc<Vec<String>> {
        let Some(g) = &self.inner.gossip else {
            return Arc::default();
        };
        let keys = g.keys();
        let Ok(mut cached) = self.inner.keyring_secrets.lock() else {
            return Arc::default();
        };
        if !Arc::ptr_eq(&cached.0, &keys) {
            let secrets = keys
                .iter()
                .filter_map(|k| crate::peers::rpc_secret_from_key(k).ok())
                .collect();
            *cached = (keys, Arc::new(secrets));
        }
        cached.1.clone()
    }

    /// Server calls carry the secret of the gossip keyring's primary key (when the cluster
    /// proves itself by secret), so a rotated-to key is what new servers configure.
    pub(crate) fn follow_keyring_secret(&self) {
        if self.inner.cfg.rpc_secret.is_none() {
            return;
        }
        let primary = self
            .inner
            .gossip
            .as_ref()
            .and_then(|g| g.keys().first().cloned());
        if let Some(secret) = primary.and_then(|k| crate::peers::rpc_secret_from_key(&k).ok()) {
            self.inner.rpc_client.set_auth(Some(secret));
        }
    }

    /// Gossip membership, when the server has a serf port.
    pub fn gossip(&self) -> Option<&gossip::Gossip> {
        self.inner.gossip.as_ref()
    }

    pub(crate) fn join_addrs(&self) -> &std::sync::Mutex<Vec<String>> {
        &self.inner.join_addrs
    }

    /// The event stream's source.
    pub fn events(&self) -> &crate::events::EventBroker {
        &self.inner.events
    }

    pub(crate) fn lock_timers(&self) -> &std::sync::Mutex<crate::variables::LockTimers> {
        &self.inner.lock_timers
    }

    pub(crate) fn acl_cache(&self) -> &crate::acl::AclCache {
        &self.inner.acl_cache
    }

    pub fn config(&self) -> &ServerConfig {
        &self.inner.cfg
    }

    pub fn state(&self) -> &StateStore {
        &self.inner.store
    }

    pub(crate) fn raft(&self) -> &raft::RaftNode {
        &self.inner.raft
    }

    /// This server's rpc address as other agents reach it.
    pub fn rpc_addr(&self) -> &str {
        &self.inner.rpc_addr
    }

    pub fn is_leader(&self) -> bool {
        self.inner.raft.is_leader()
    }

    // ----- #4: the leader loops -----

    /// Whether this server's scheduling workers run (it leads and its loops are up): the agent's
    /// `stats.nomad.schedulers_running`.
    pub fn schedulers_running(&self) -> bool {
        self.inner.leadership.running()
    }

    /// The eval broker's counts while this server leads.
    pub async fn eval_broker_stats(&self) -> Option<crate::leader::BrokerStats> {
        self.inner.leadership.broker_stats().await
    }

    /// The scheduling workers' pool (`/v1/agent/schedulers`).
    pub fn worker_pool(&self) -> &Arc<crate::leader::pool::WorkerPool> {
        &self.inner.worker_pool
    }

    pub(crate) fn leadership(&self) -> &crate::leader::Leadership {
        &self.inner.leadership
    }

    // ----- end #4 -----

    /// The leader's rpc address, when one is known.
    pub fn leader_addr(&self) -> Option<String> {
        self.inner
            .raft
            .leader()
            .map(|(id, addr)| self.current_addr(id, addr))
    }

    /// Milliseconds since this server last heard from the leader (0 on the leader itself).
    pub fn last_contact_ms(&self) -> u64 {
        if self.is_leader() {
            return 0;
        }
        self.inner.raft.last_contact_ms().unwrap_or(0)
    }

    /// The voters' raft ids.
    pub fn voters(&self) -> Vec<u64> {
        self.inner.raft.voters()
    }

    /// The raft peers' rpc addresses.
    pub fn peers(&self) -> Vec<String> {
        self.inner
            .raft
            .members()
            .into_iter()
            .map(|(id, addr)| self.current_addr(id, addr))
            .collect()
    }

    /// A member's rpc address; for this server, the address it serves on now. Raft's membership
    /// keeps the address a server had when it joined, which is stale after a restart on another port.
    fn current_addr(&self, id: u64, recorded: String) -> String {
        if id == self.inner.node_id {
            self.inner.rpc_addr.clone()
        } else {
            recorded
        }
    }

    /// Records the agent's advertised HTTP address (once; later calls are ignored).
    pub fn set_http_addr(&self, addr: String) {
        let _ = self.inner.http_addr.set(addr);
    }

    /// The agent's advertised HTTP address; empty until set.
    pub fn http_addr(&self) -> &str {
        self.inner.http_addr.get().map_or("", String::as_str)
    }

    /// The raft members, named and described as gossip knows them (a member gossip does not
    /// know is `server-<raft id>.<region>`).
    pub fn members(&self) -> Vec<Member> {
        let known = self.serf_members();
        self.inner
            .raft
            .members()
            .into_iter()
            .filter_map(|(id, addr)| {
                // Gossip may list a server twice (an old failed entry); the live one first.
                let mut m = known
                    .iter()
                    .filter(|m| m.raft_id == id)
                    .min_by_key(|m| m.status != "alive")?
                    .clone();
                m.addr = self.current_addr(id, addr);
                Some(m)
            })
            .collect()
    }

    /// The servers this one knows, as `/v1/agent/members` lists them: every gossip member
    /// (with its status), then any raft member gossip has not reported (a cluster joined by
    /// RPC, or no serf port).
    pub fn serf_members(&self) -> Vec<Member> {
        let leader = self.inner.raft.leader().map(|(id, _)| id);
        let mut out: Vec<Member> = self
            .inner
            .gossip
            .iter()
            .flat_map(|g| g.members().iter().cloned().collect::<Vec<_>>())
            .map(|m| Member {
                name: m.id.meta.name.clone(),
                addr: m.id.meta.rpc_addr.clone(),
                raft_id: m.id.meta.raft_id,
                leader: Some(m.id.meta.raft_id) == leader && m.status == gossip::Status::Alive,
                status: m.status.as_str().to_string(),
                serf_addr: m.id.addr.to_string(),
                datacenter: m.id.meta.datacenter.clone(),
                region: m.id.meta.region.clone(),
                build: m.id.meta.build.clone(),
            })
            .collect();
        for (id, addr) in self.inner.raft.members() {
            if out.iter().any(|m| m.raft_id == id) {
                continue;
            }
            let me = id == self.inner.node_id;
            out.push(Member {
                name: if me {
                    format!("{}.{}", self.inner.cfg.name, self.inner.cfg.region)
                } else {
                    format!("server-{id}.{}", self.inner.cfg.region)
                },
                addr: self.current_addr(id, addr),
                raft_id: id,
                leader: Some(id) == leader,
                status: "alive".into(),
                serf_addr: String::new(),
                datacenter: if me {
                    self.inner.cfg.datacenter.clone()
                } else {
                    String::new()
                },
                region: self.inner.cfg.region.clone(),
                build: if me {
                    env!("CARGO_PKG_VERSION").to_string()
                } else {
                    String::new()
                },
            });
        }
        out
    }

    /// Waits until the cluster has a leader.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<String, ServerError> {
        self.inner
            .raft
            .wait_for_leader(timeout)
            .await
            .map(|(_, addr)| addr)
            .map_err(ServerError::from)
    }

    /// Waits (bounded) until this server leads and has applied its whole log, so that reads served
    /// right after a restart are not stale: after a SIGKILL the durable commit index can lag the log,
    /// and only the new term's first commit re-applies the tail.
    pub(crate) async fn catch_up(&self, timeout: Duration) {
        let deadline = tokio::time::Instant::now() + timeout;
        if let Err(e) = self.inner.raft.wait_for_leader(timeout).await {
            tracing::warn!(error = %e, "no leader yet; serving reads that may be stale");
            return;
        }
        let mut pause = Duration::from_millis(5);
        loop {
            let stats = self.inner.raft.stats();
            if stats.applied_index >= stats.last_log_index {
                return;
            }
            if tokio::time::Instant::now() >= deadline {
                tracing::warn!(
                    applied = stats.applied_index,
                    last = stats.last_log_index,
                    "the log is not fully applied yet; reads may be stale"
                );
                return;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Stops the server as a crash would (a simulation's fault): its loops are told to stop and
    /// raft stops at once, without making its last commits durable first
    /// ([`raft::RaftNode::crash`]).
    pub async fn crash(&self) {
        let _ = self.inner.shutdown.send(true);
        if let Some(g) = &self.inner.gossip {
            g.shutdown();
        }
        self.inner.raft.crash().await;
    }

    /// This server's raft ID.
    pub fn raft_id(&self) -> u64 {
        self.inner.node_id
    }

    /// Stops serving rpc and shuts raft down.
    pub async fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
        if let Some(g) = &self.inner.gossip {
            g.shutdown();
        }
        // #4: the leader loops stop on the same signal; let them finish their raft writes first.
        self.inner.leadership.wait_stopped().await;
        if let Err(e) = self.inner.raft.shutdown().await {
            tracing::warn!(error = %e, "raft did not shut down cleanly");
        }
    }

    /// Applies one command through raft on this (leader) server and returns what the FSM answered.
    pub(crate) fn alloc_batcher(&self) -> &crate::alloc_batch::AllocUpdateBatcher {
        &self.inner.alloc_batcher
    }

    pub(crate) async fn apply(&self, cmd: Command) -> Result<ApplyResponse, ServerError> {
        self.apply_ref(&cmd).await
    }

    /// [`Server::apply`] of a borrowed command (the plan applier keeps its entries).
    pub(crate) async fn apply_ref(&self, cmd: &Command) -> Result<ApplyResponse, ServerError> {
        let payload = crate::fsm::encode_command(cmd)
            .map_err(|e| ServerError::internal(format!("encoding a raft command: {e}")))?;
        let started = std::time::Instant::now();
        let (_index, response) = self.inner.raft.write(payload).await?;
        metrics::counter!("nomad.raft.apply").increment(1);
        metrics::histogram!("nomad.raft.commitTime")
            .record(started.elapsed().as_secs_f64() * 1000.0);
        match rpc::codec::decode::<FsmResult>(&response) {
            Ok(FsmResult::Ok(r)) => Ok(r),
            Ok(FsmResult::NotFound(m)) => Err(ServerError::not_found(m)),
            Ok(FsmResult::Failed(m)) => Err(ServerError::internal(m)),
            Ok(FsmResult::Conflict(m)) => Err(ServerError::new(rpc::ErrorCode::Conflict, m)),
            Err(e) => Err(ServerError::internal(format!(
                "undecodable FSM response: {e}"
            ))),
        }
    }

    /// Where a write must go: `None` when this server leads, else the leader's rpc address.
    /// Waits (bounded) for an election when there is no leader yet.
    pub(crate) async fn forward_target(&self) -> Result<Option<String>, ServerError> {
        if self.is_leader() {
            // Its state may lag what is committed (see `caught_up_leader`): it answers once it
            // caught up, or forwards if it lost the election meanwhile.
            if self.caught_up_leader().await {
                return Ok(None);
            }
            if self.is_leader() {
                return Err(ServerError::new(
                    rpc::ErrorCode::NoLeader,
                    "this server leads but has not yet applied the log it holds; retry",
                ));
            }
        }
        let leader = match self.leader_addr() {
            Some(addr) => addr,
            None => self.wait_for_leader(LEADER_WAIT).await?,
        };
        Ok((!self.is_leader()).then_some(leader))
    }

    /// Whether this server leads with a state fit to check a write against, waiting (at most
    /// `LEADER_WAIT`) until it does: its own term applied and everything it knew committed. A
    /// leader's state can lag what is committed — just elected, it has not applied what
    /// earlier leaders committed; busy, its state machine is behind a follower's that already
    /// showed a client the result — and a write checked against it would be refused (a claim
    /// for an allocation the client already runs finds none). False once it stops leading.
    async fn caught_up_leader(&self) -> bool {
        self.inner.raft.leader_caught_up()
            || self.inner.raft.wait_leader_caught_up(LEADER_WAIT).await
    }

    /// Before serving a write another server forwarded here: as `forward_target` demands of a
    /// write this server receives itself, it must be a caught-up leader. The forwarder's view
    /// of the leader can also be out of date (leadership moved while the call travelled).
    /// Either way the call is answered "No cluster leader" (callers retry), never served from a
    /// state older than what the caller has seen.
    pub(crate) async fn serve_forwarded(&self) -> Result<(), ServerError> {
        if self.caught_up_leader().await {
            return Ok(());
        }
        Err(ServerError::new(
            rpc::ErrorCode::NoLeader,
            "No cluster leader (the write was forwarded to a server that no longer leads, or that has not yet applied the log it holds); retry",
        ))
    }

    /// On the leader: the index its state has applied, which covers every write it acknowledged.
    pub(crate) async fn read_index_local(&self) -> Result<u64, ServerError> {
        if !self.is_leader() {
            return Err(ServerError::new(
                rpc::ErrorCode::NoLeader,
                "not the leader: ask the leader for its read index",
            ));
        }
        self.raft()
            .read_index()
            .await
            .map_err(|e| ServerError::new(rpc::ErrorCode::NoLeader, e.to_string()))
    }

    /// A read barrier for reads that are not `?stale`: afterwards this server has applied
    /// every write acknowledged before the barrier began, anywhere in the cluster. The leader
    /// confirms with a quorum that it still leads (Raft's ReadIndex); a follower asks the leader
    /// for that index and waits to have applied as much. When neither can be done — no leader
    /// known, or it cannot confirm — the read fails ("No cluster leader", as Nomad's) rather
    /// than answer from a state that may have been overtaken (a leader cut off from its peers
    /// would otherwise keep answering from its own).
    pub async fn read_barrier(&self) -> Result<(), ServerError> {
        let no_leader = |why: String| {
            ServerError::new(
                rpc::ErrorCode::NoLeader,
                format!("No cluster leader ({why}); add ?stale to read this server's own state"),
            )
        };
        // A server whose log cannot grow falls behind (and, leading, cannot vouch for itself).
        if let Some(why) = self.raft().disk_stalled() {
            return Err(ServerError::new(
                rpc::ErrorCode::Unavailable,
                format!(
                    "this server's disk is full ({why}), so it may be behind; read through \
                     another server, or add ?stale to read this server's own state"
                ),
            ));
        }
        // Right after an election the leader cannot confirm until it has committed an entry of
        // its term, and a follower may learn the leader a moment late: both are retried briefly.
        let deadline = tokio::time::Instant::now() + READ_BARRIER_WAIT;
        let index = loop {
            let attempt = if self.is_leader() {
                self.raft()
                    .read_index()
                    .await
                    .map_err(|e| no_leader(e.to_string()))
            } else if let Some(leader) = self.leader_addr() {
                self.forward_timeout::<crate::methods::ReadIndex>(&leader, &(), READ_BARRIER_WAIT)
                    .await
                    .map_err(|e| no_leader(format!("the leader's read index: {e}")))
            } else {
                Err(no_leader("this server knows no leader".into()))
            };
            match attempt {
                Ok(index) => break index,
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(READ_BARRIER_RETRY).await,
            }
        };
        // Raft's applied index counts every entry, the blank one each new leader writes too.
        self.raft()
            .wait_applied(index, READ_BARRIER_WAIT)
            .await
            .map_err(|_| {
                no_leader(format!(
                    "this server has not applied the leader's index {index} yet"
                ))
            })
    }

    /// Sends a request to the leader's rpc endpoint `M`.
    pub(crate) async fn forward<M: rpc::Method>(
        &self,
        addr: &str,
        req: &M::Request,
    ) -> Result<M::Response, ServerError> {
        self.forward_timeout::<M>(addr, req, self.inner.rpc_client.timeout())
            .await
    }

    /// [`Server::forward`] with a wait of its own (the leader cancels the request past it).
    pub(crate) async fn forward_timeout<M: rpc::Method>(
        &self,
        addr: &str,
        req: &M::Request,
        timeout: std::time::Duration,
    ) -> Result<M::Response, ServerError> {
        tracing::trace!(method = M::NAME, to = %addr, "forwarding a request to another server");
        if let Some(net) = &self.inner.cfg.network {
            let body = rpc::encode_request::<M>(req)?;
            let call = net.0.call(self.inner.node_id, addr, M::NAME, body);
            let answer = tokio::time::timeout(timeout, call).await.map_err(|_| {
                rpc::RpcError::timeout(format!(
                    "{} to {addr}: no answer within {timeout:?}",
                    M::NAME
                ))
            })??;
            return Ok(rpc::decode_response::<M>(&answer)?);
        }
        Ok(self
            .inner
            .rpc_client
            .call_timeout::<M>(addr, req, timeout)
            .await?)
    }

    /// Serves one call that came over the simulated network ([`ServerConfig::network`]), as
    /// the rpc listener serves a TCP one. The network is the simulation's own, so the call
    /// counts as coming from a server of this cluster.
    pub async fn handle_simulated(
        &self,
        method: String,
        body: Vec<u8>,
    ) -> Result<Vec<u8>, rpc::RpcError> {
        crate::handler::handle_simulated(self.clone(), method, body).await
    }
}

async fn wait_for_true(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// A raft store that cannot be trusted, said with the recovery command for this data dir.
fn damaged_store(server_dir: &std::path::Path, e: raft::RaftError) -> ServerError {
    match e {
        e @ raft::RaftError::Damaged { .. } => {
            let agent_dir = server_dir.parent().unwrap_or(server_dir);
            ServerError::internal(format!(
                "raft: {e} (here: caravan operator raft recover -data-dir {})",
                agent_dir.display()
            ))
        }
        other => ServerError::from(other),
    }
}

/// The server's raft node id, made once and kept in the data dir so restarts keep their identity.
fn load_or_create_node_id(data_dir: &std::path::Path) -> Result<u64, ServerError> {
    let path = data_dir.join("server-id");
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| {
            ServerError::internal(format!(
                "{} holds {:?}, not a server id; remove the file to make a new identity",
                path.display(),
                text.trim()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = crate::env::random_u64() >> 1 | 1;
            let tmp = data_dir.join("server-id.tmp");
            std::fs::write(&tmp, id.to_string())
                .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
                .and_then(|_| std::fs::rename(&tmp, &path))
                .map_err(|e| {
                    ServerError::internal(format!("cannot write {}: {e}", path.display()))
                })?;
            Ok(id)
        }
        Err(e) => Err(ServerError::internal(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}
