//! What a server needs to start, resolved by the agent from its configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::leader::limits;

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub region: String,
    pub datacenter: String,
    /// This server's name (Nomad: `<node name>.<region>`).
    pub name: String,
    /// Where raft keeps its log, vote and snapshots, and the server its identity.
    pub data_dir: PathBuf,
    /// The address the rpc listener binds (port 0 picks a free port).
    pub rpc_bind: SocketAddr,
    /// How other agents reach this server's rpc port; `None` uses the bound address.
    pub rpc_advertise: Option<String>,
    /// Servers to wait for before bootstrapping; 1 bootstraps alone (`-dev`).
    pub bootstrap_expect: u32,
    /// Other servers to join (`server_join { retry_join }`): serf addresses, as Nomad's (a
    /// bare host gets :4648). An address that answers Caravan's RPC instead is joined by RPC.
    pub retry_join: Vec<String>,
    /// The UDP address gossip binds (Nomad's serf port, 4648; port 0: any free one); `None`:
    /// no gossip (servers then find each other by RPC only).
    pub serf_bind: Option<SocketAddr>,
    /// How the other servers reach this one's serf port; `None`: the bound address.
    pub serf_advertise: Option<SocketAddr>,
    /// Gossip keys (base64), the first primary (`server { encrypt }`); empty: not encrypted.
    pub gossip_keys: Vec<String>,
    /// How fast gossip finds a failed server.
    pub gossip_timing: gossip::Timing,
    /// The region whose ACL policies, roles, global tokens and namespaces this one replicates
    /// (`server { authoritative_region }`); `None` or this region: none.
    pub authoritative_region: Option<String>,
    /// The management token of the authoritative region replication reads with
    /// (`acl { replication_token }`).
    pub replication_token: Option<String>,
    /// Raft timing, in milliseconds.
    pub raft_heartbeat_ms: u64,
    pub raft_election_timeout_ms: (u64, u64),
    /// Take a state snapshot (and compact the log) after this many entries...
    pub raft_snapshot_every: u64,
    /// ...or after this many bytes of log (0: only by count).
    pub raft_snapshot_every_bytes: u64,
    /// Scheduling workers the leader runs (Nomad's `num_schedulers`); default: the cores.
    pub num_schedulers: usize,
    /// The scheduler types the workers take (Nomad's `enabled_schedulers`, with `_core`).
    pub enabled_schedulers: Vec<String>,
    /// The heartbeat TTL handed to clients (Nomad's `min_heartbeat_ttl`); default 10 s.
    pub min_heartbeat_ttl: Duration,
    /// How long past its TTL the leader waits for a node's heartbeat before marking it down
    /// (Nomad's `heartbeat_grace`); default 10 s.
    pub heartbeat_grace: Duration,
    /// How long a new leader gives every ready node to heartbeat before marking it down (Nomad's
    /// `failover_heartbeat_ttl`); default 5 min.
    pub failover_heartbeat_ttl: Duration,
    /// The heartbeats per second the leader aims at: TTLs grow with the number of nodes so
    /// the total rate stays under it (Nomad's `max_heartbeats_per_second`, default 50; 0: no
    /// scaling).
    pub max_heartbeats_per_second: f64,
    /// The agent's `autopilot { … }` block (Nomad's defaults where it sets nothing): what the
    /// first leader stores as the cluster's autopilot configuration, which then rules
    /// (`/v1/operator/autopilot/configuration`); used as it is while none is stored.
    pub autopilot: model::autopilot::AutopilotConfiguration,
    /// How long one CSI controller call may take before its client gives up on it
    /// (`server { csi_controller_timeout }`); default 2 min, as cloud attaches take minutes.
    pub csi_controller_timeout: Duration,
    /// How many CSI controller calls may wait for one plugin's turn before more are refused as
    /// busy; default 50.
    pub csi_max_queued: usize,
    /// Enforce ACLs (`acl { enabled }`, `-acl-enabled`).
    pub acl_enabled: bool,
    /// The shortest and longest `ExpirationTTL` a token may ask for (Nomad's
    /// `token_min_expiration_ttl`, 1 min, and `token_max_expiration_ttl`, 24 h).
    pub acl_token_min_ttl: Duration,
    pub acl_token_max_ttl: Duration,
    /// Derived from `server { encrypt }`: servers send it with every call, and server calls
    /// without it are refused (without TLS, how a server tells a server from a process that
    /// shares its address).
    pub rpc_secret: Option<String>,
    /// `tls { rpc = true }`: rpc and raft only over mutual TLS.
    pub tls: Option<std::sync::Arc<rpc::tls::AgentTls>>,
    /// The largest `Count` a task group may have (Nomad's `job_max_count`, 50,000).
    pub job_max_count: u64,
    /// The most bytes of source kept with a job version (Nomad's `job_max_source_size`, 1 MB).
    pub job_max_source_size: usize,
    /// How often the leader publishes its gauges (job summaries, broker, heartbeats): the agent's
    /// `telemetry { collection_interval }`, 1 s.
    pub stats_interval: Duration,
    /// `telemetry { disable_dispatched_job_summary_metrics }`.
    pub disable_dispatched_job_summary_metrics: bool,
    /// How often the leader collects garbage (`job_gc_interval`, 5 min).
    pub gc_interval: Duration,
    /// How old finished objects must be before they are collected (`*_gc_threshold`).
    pub gc: crate::leader::gc::Thresholds,
    /// A simulated network (issue #23's deterministic simulation): every call this server makes
    /// goes through it, it listens on no port, and `rpc_advertise` is its address there; the
    /// simulation delivers calls to it with [`crate::Server::handle_simulated`]. `None`: TCP.
    pub network: Option<SimNetwork>,
}

/// A simulated network a server's calls go through ([`ServerConfig::network`]).
#[derive(Clone)]
pub struct SimNetwork(pub std::sync::Arc<dyn raft::SimNet>);

impl std::fmt::Debug for SimNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SimNetwork")
    }
}

impl ServerConfig {
    /// Defaults for a server with a data dir; the agent overrides what its config sets.
    pub fn new(data_dir: PathBuf, rpc_bind: SocketAddr) -> ServerConfig {
        ServerConfig {
            region: "global".into(),
            datacenter: "dc1".into(),
            name: "caravan".into(),
            data_dir,
            rpc_bind,
            rpc_advertise: None,
            bootstrap_expect: 1,
            retry_join: Vec::new(),
            serf_bind: None,
            serf_advertise: None,
            gossip_keys: Vec::new(),
            gossip_timing: gossip::Timing::Wan,
            authoritative_region: None,
            replication_token: None,
            raft_heartbeat_ms: 250,
            raft_election_timeout_ms: (1000, 2000),
            raft_snapshot_every: 8192,
            raft_snapshot_every_bytes: 256 * 1024 * 1024,
            num_schedulers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            enabled_schedulers: crate::leader::pool::PoolConfig::all(0).enabled_schedulers,
            min_heartbeat_ttl: limits::DEFAULT_MIN_HEARTBEAT_TTL,
            heartbeat_grace: limits::DEFAULT_HEARTBEAT_GRACE,
            failover_heartbeat_ttl: limits::DEFAULT_FAILOVER_HEARTBEAT_TTL,
            max_heartbeats_per_second: limits::DEFAULT_MAX_HEARTBEATS_PER_SECOND,
            autopilot: model::autopilot::AutopilotConfiguration::agent_default(),
            csi_controller_timeout: crate::csi::DEFAULT_CONTROLLER_CALL_TIMEOUT,
            csi_max_queued: crate::csi::DEFAULT_MAX_QUEUED,
            acl_enabled: false,
            acl_token_min_ttl: Duration::from_secs(60),
            acl_token_max_ttl: Duration::from_secs(24 * 3600),
            job_max_count: 50_000,
            job_max_source_size: 1_000_000,
            stats_interval: Duration::from_secs(1),
            disable_dispatched_job_summary_metrics: false,
            gc_interval: Duration::from_secs(300),
            gc: crate::leader::gc::Thresholds::default(),
            tls: None,
            rpc_secret: None,
            network: None,
        }
    }
}
