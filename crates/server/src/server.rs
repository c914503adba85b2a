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
    /// The event stream's ring of applied entries.
    events: Arc<crate::events::EventBroker>,
    /// Clients' allocation updates, folded into one Raft entry per window.
    alloc_batcher: crate::alloc_batch::AllocUpdateBatcher,
    /// How many scheduling workers this server runs when it leads, and what they are doing.
    worker_pool: Arc<crate::leader::pool::WorkerPool>,
}

/// A server as `/v1/agent/members` and `server members` show it.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub addr: String,
    pub raft_id: u64,
    pub leader: bool,
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
        let node_id = load_or_create_node_id(&cfg.data_dir)?;
        let listener = tokio::net::TcpListener::bind(cfg.rpc_bind)
            .await
            .map_err(|e| {
                ServerError::internal(format!("cannot bind the rpc port {}: {e}", cfg.rpc_bind))
            })?;
        let bound = listener
            .local_addr()
            .map_err(|e| ServerError::internal(e.to_string()))?;
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
        let raft = raft::RaftNode::open(raft_cfg, fsm, rpc_client.clone()).await?;
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
                csi_transport: std::sync::OnceLock::new(),
                csi_locks: Default::default(),
                host_volume_lock: tokio::sync::Mutex::new(()),
                acl_cache: Default::default(),
                lock_timers: Default::default(),
                events,
                alloc_batcher: Default::default(),
                worker_pool,
            }),
        };
        let handler = Arc::new(RpcHandler {
            server: server.clone(),
        });
        let tls = server.config().tls.clone();
        tokio::spawn(rpc::serve_with(
            listener,
            handler,
            tls,
            wait_for_true(shutdown_rx),
        ));
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

    pub fn members(&self) -> Vec<Member> {
        let leader = self.inner.raft.leader().map(|(id, _)| id);
        self.inner
            .raft
            .members()
            .into_iter()
            .map(|(id, addr)| Member {
                name: if id == self.inner.node_id {
                    format!("{}.{}", self.inner.cfg.name, self.inner.cfg.region)
                } else {
                    format!("server-{id}.{}", self.inner.cfg.region)
                },
                addr: self.current_addr(id, addr),
                raft_id: id,
                leader: Some(id) == leader,
            })
            .collect()
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

    /// Stops serving rpc and shuts raft down.
    pub async fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
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
            return Ok(None);
        }
        let leader = match self.leader_addr() {
            Some(addr) => addr,
            None => self.wait_for_leader(LEADER_WAIT).await?,
        };
        Ok((!self.is_leader()).then_some(leader))
    }

    /// On the leader: the index its state has applied, which covers every write it acknowledged.
    pub(crate) fn read_index_local(&self) -> Result<u64, ServerError> {
        if !self.is_leader() {
            return Err(ServerError::new(
                rpc::ErrorCode::NoLeader,
                "not the leader: ask the leader for its read index",
            ));
        }
        Ok(self.state().latest_index())
    }

    /// A read barrier for reads that are not `?stale` (Nomad forwards those to the leader): a
    /// follower asks the leader for its applied index and waits, bounded, to have applied as
    /// much, so a write acknowledged anywhere is visible to a read served here afterwards. The
    /// leader itself, or a follower that knows no leader or cannot reach it in time, serves what
    /// it has (the reply's `X-Nomad-KnownLeader` and `LastContact` tell how fresh that is).
    pub async fn read_barrier(&self) {
        if self.is_leader() {
            return;
        }
        let Some(leader) = self.leader_addr() else {
            return;
        };
        let index = match self
            .forward_timeout::<crate::methods::ReadIndex>(&leader, &(), READ_BARRIER_WAIT)
            .await
        {
            Ok(index) => index,
            Err(e) => {
                tracing::debug!(error = %e, "read barrier: the leader's index is unknown; serving a local read");
                return;
            }
        };
        if self.state().latest_index() >= index {
            return;
        }
        let deadline = tokio::time::Instant::now() + READ_BARRIER_WAIT;
        self.state()
            .wait_for(&[], index.saturating_sub(1), deadline)
            .await;
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
        Ok(self
            .inner
            .rpc_client
            .call_timeout::<M>(addr, req, timeout)
            .await?)
    }
}

async fn wait_for_true(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow() {
        if rx.changed().await.is_err() {
            return;
        }
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
            let id = uuid::Uuid::new_v4().as_u64_pair().0 >> 1 | 1;
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
