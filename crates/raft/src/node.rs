//! `RaftNode`: one server's raft, opened on a data dir and reached by peers through `rpc`.

use crate::disk::DiskGuard;
use crate::limits::{
    APPEND_ENTRIES_MAX, ENTRY_BYTES_MAX, LOGS_KEPT_BEHIND_SNAPSHOT_MIN, MEMBERSHIP_TIMEOUT,
    READ_INDEX_TIMEOUT, SNAPSHOT_INSTALL_TIMEOUT, WRITE_TIMEOUT,
};
use crate::log_store::LogStore;
use crate::network::Transport;
use crate::network::{
    Addressed, Network, SnapshotChunk, APPEND_ENTRIES, SNAPSHOT, TRANSFER_LEADER, VOTE,
};
use crate::state_machine::{SmStore, StateMachine};
use crate::types::{Bytes, Snapshot, TypeConfig};
use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::{ClientWriteError, Fatal, ForwardToLeader, InitializeError};
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse, VoteRequest};
use openraft::{BasicNode, RaftMetrics, ServerState, SnapshotPolicy};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// How to run one node.
#[derive(Debug, Clone)]
pub struct RaftConfig {
    /// This node's id; stable for the life of its data dir, never reused by another node.
    pub node_id: u64,
    /// The rpc address peers reach this node at.
    pub rpc_addr: String,
    /// Where the log (`raft.redb`) and snapshots (`snapshots/`) live.
    pub data_dir: PathBuf,
    pub heartbeat_ms: u64,
    /// A follower that hears nothing for a random time in this range starts an election.
    pub election_timeout_ms: (u64, u64),
    /// Build a snapshot after this many applied entries (0: never) and purge the log behind it.
    pub snapshot_every_entries: u64,
    /// ...and after this many bytes written to the log since the last one this triggered (0:
    /// never): a few large entries (plans of thousands of allocations) fill the disk long before
    /// the count is reached.
    pub snapshot_every_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum RaftError {
    /// Only the leader writes. `leader_*` name it when this node knows it.
    #[error("not the leader; the leader is {}", describe_leader(*.leader_id, .leader_addr.as_deref()))]
    ForwardToLeader {
        leader_id: Option<u64>,
        leader_addr: Option<String>,
    },
    #[error("the cluster has no members yet; bootstrap it")]
    NotInitialized,
    #[error("timed out")]
    Timeout,
    /// Leadership changed after the entry was proposed: it may or may not be applied.
    #[error("leadership changed before the entry committed; it may or may not be applied")]
    LeadershipLost,
    #[error("entry of {bytes} bytes exceeds the {max}-byte limit")]
    TooLarge { bytes: usize, max: usize },
    #[error("invalid raft configuration: {0}")]
    Config(String),
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    #[error("raft storage: {0}")]
    Storage(String),
    /// The raft store cannot be trusted (damaged, or missing after it was written): the node
    /// refuses to start rather than start from less than it had.
    #[error("the raft data in {dir} cannot be trusted: {what}. This server refuses to start from it. \
             To recover, with the agent stopped: `caravan operator raft recover -data-dir DIR`, DIR being the agent's data dir, \
             moves it aside and gives the server a new raft identity, so it rejoins its peers and copies the \
             state from the leader (joining on its old address retires the old identity); a server without \
             peers starts a new cluster and restores a snapshot saved with `caravan operator snapshot save`")]
    Damaged { dir: String, what: String },
    /// The data dir's disk is full: the node waits for space and takes no writes meanwhile.
    #[error("this server's disk is full ({0}); it takes no writes until space is freed, then carries on by itself; nothing acknowledged is lost")]
    DiskFull(String),
    #[error("raft is shut down")]
    Shutdown,
    /// A leadership transfer named a server that is not a voter.
    #[error("server {0} is not a voter of this cluster")]
    NotVoter(u64),
    /// The raft core stopped unexpectedly; the node must be taken out of service.
    #[error("raft stopped: {0}")]
    Fatal(String),
    /// A read's leadership check reached no quorum: this node may no longer lead.
    #[error("could not confirm leadership with a quorum: {0}")]
    NoQuorum(String),
}

fn describe_leader(id: Option<u64>, addr: Option<&str>) -> String {
    match (id, addr) {
        (Some(id), Some(addr)) => format!("node {id} at {addr}"),
        (Some(id), None) => format!("node {id}"),
        _ => "unknown".to_string(),
    }
}

impl From<RaftError> for rpc::RpcError {
    fn from(e: RaftError) -> Self {
        let code = match &e {
            RaftError::ForwardToLeader { .. }
            | RaftError::NotInitialized
            | RaftError::NoQuorum(_) => rpc::ErrorCode::NoLeader,
            RaftError::Timeout | RaftError::LeadershipLost => rpc::ErrorCode::Timeout,
            RaftError::TooLarge { .. } => rpc::ErrorCode::BadRequest,
            RaftError::NotVoter(_) => rpc::ErrorCode::NotFound,
            RaftError::Shutdown | RaftError::DiskFull(_) => rpc::ErrorCode::Unavailable,
            RaftError::Config(_)
            | RaftError::Bootstrap(_)
            | RaftError::Storage(_)
            | RaftError::Damaged { .. }
            | RaftError::Fatal(_) => rpc::ErrorCode::Internal,
        };
        rpc::RpcError::new(code, e.to_string())
    }
}

fn from_fatal(f: Fatal<TypeConfig>) -> RaftError {
    match f {
        Fatal::Stopped => RaftError::Shutdown,
        Fatal::StorageError(e) => RaftError::Storage(e.to_string()),
        Fatal::Panicked => RaftError::Fatal("the raft core panicked".to_string()),
    }
}

/// Where this node's log stands, for status pages and tests (Nomad's raft stats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftStats {
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub state: &'static str,
    pub term: u64,
    pub last_log_index: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    /// The last entry in the current snapshot (0: none).
    pub last_snapshot_index: u64,
    /// The last entry removed from the log (0: none).
    pub purged_index: u64,
}

type Raft = openraft::Raft<TypeConfig, SmStore>;

/// One node of the cluster. Cheap to clone; clones share the node.
#[derive(Clone)]
pub struct RaftNode {
    inner: Arc<Inner>,
}

struct Inner {
    id: u64,
    rpc_addr: String,
    raft: Raft,
    /// The log store, kept to make the last commits durable at shutdown; taken then. Never held
    /// across `.await`.
    log: Mutex<Option<LogStore>>,
    /// When this node last accepted entries or a heartbeat from a leader. Never held across
    /// `.await`.
    last_contact: Mutex<Option<Instant>>,
    /// The full snapshot being received, chunk by chunk. Never held across `.await`.
    incoming: Mutex<Option<Incoming>>,
    stopped: AtomicBool,
    /// Says why writes wait for disk space, while they do.
    disk: Arc<DiskGuard>,
    /// The raft dir's lock, held while the node runs; released when it stops.
    lock: Mutex<Option<crate::integrity::DirLock>>,
}

struct Incoming {
    transfer: String,
    data: Vec<u8>,
}

impl RaftNode {
    /// Opens the node on `cfg.data_dir`: the log and vote from disk, the latest snapshot
    /// restored into `sm`, and the committed log after it applied again.
    pub async fn open(
        cfg: RaftConfig,
        sm: Arc<dyn StateMachine>,
        client: rpc::Client,
    ) -> Result<RaftNode, RaftError> {
        RaftNode::open_with(cfg, sm, Transport::Rpc(client)).await
    }

    /// [`RaftNode::open`] with messages sent through `transport` (a simulation's network).
    pub async fn open_with(
        cfg: RaftConfig,
        sm: Arc<dyn StateMachine>,
        transport: Transport,
    ) -> Result<RaftNode, RaftError> {
        let config = openraft_config(&cfg)?;
        let dir = cfg.data_dir.clone();
        let (log, files, disk, lock) = crate::rt::blocking(move || {
            let disk = Arc::new(DiskGuard::new(&dir, crate::limits::MIN_FREE_BYTES));
            std::fs::create_dir_all(&dir).map_err(|e| RaftError::Storage(e.to_string()))?;
            let (log, files, lock) = crate::integrity::open_storage(&dir, disk.clone())?;
            Ok::<_, RaftError>((log, files, disk, lock))
        })
        .await
        .map_err(|e| RaftError::Storage(e.to_string()))??;
        let network = Network {
            id: cfg.node_id,
            transport,
        };
        let sm = SmStore::new(sm, Arc::new(files));
        let raft = Raft::new(cfg.node_id, Arc::new(config), network, log.clone(), sm)
            .await
            .map_err(from_fatal)?;
        let inner = Arc::new(Inner {
            id: cfg.node_id,
            rpc_addr: cfg.rpc_addr,
            raft,
            log: Mutex::new(Some(log.clone())),
            last_contact: Mutex::new(None),
            incoming: Mutex::new(None),
            stopped: AtomicBool::new(false),
            disk,
            lock: Mutex::new(Some(lock)),
        });
        if cfg.snapshot_every_bytes > 0 {
            tokio::spawn(snapshot_by_log_bytes(
                Arc::downgrade(&inner),
                log.appended_bytes(),
                cfg.snapshot_every_bytes,
            ));
        }
        Ok(RaftNode { inner })
    }

    /// Forms the cluster from `members` (id -> rpc address) if this node has never been part
    /// of one; otherwise does nothing, so it is safe to call on every start. Every node given
    /// the same `members` may call it. `members` must name this node at its `rpc_addr`.
    pub async fn bootstrap(&self, members: BTreeMap<u64, String>) -> Result<(), RaftError> {
        match members.get(&self.inner.id) {
            Some(addr) if *addr == self.inner.rpc_addr => {}
            Some(addr) => {
                return Err(RaftError::Bootstrap(format!(
                    "the members name node {} at {addr}, but it serves at {}",
                    self.inner.id, self.inner.rpc_addr
                )))
            }
            None => {
                return Err(RaftError::Bootstrap(format!(
                    "node {} is not among the members",
                    self.inner.id
                )))
            }
        }
        let raft = &self.inner.raft;
        if raft.is_initialized().await.map_err(from_fatal)? {
            return Ok(());
        }
        let nodes: BTreeMap<u64, BasicNode> = members
            .into_iter()
            .map(|(id, addr)| (id, BasicNode::new(addr)))
            .collect();
        match raft.initialize(nodes).await {
            Ok(()) => Ok(()),
            Err(openraft::errors::RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
            Err(openraft::errors::RaftError::APIError(InitializeError::NotInMembers(e))) => {
                Err(RaftError::Bootstrap(e.to_string()))
            }
            Err(openraft::errors::RaftError::Fatal(f)) => Err(from_fatal(f)),
        }
    }

    /// Whether this node belongs to a cluster (bootstrapped, or joined by a leader).
    pub async fn is_initialized(&self) -> Result<bool, RaftError> {
        self.inner.raft.is_initialized().await.map_err(from_fatal)
    }

    /// On the leader: adds node `id` at `addr` as a non-voter (a learner), blocking until it has
    /// caught up; [`RaftNode::promote`] makes it a voter. A member already present is left as it is.
    pub async fn add_nonvoter(&self, id: u64, addr: &str) -> Result<(), RaftError> {
        if self.members().iter().any(|(m, _)| *m == id) {
            return Ok(());
        }
        let added = tokio::time::timeout(
            MEMBERSHIP_TIMEOUT,
            self.inner.raft.add_learner(id, BasicNode::new(addr), true),
        )
        .await
        .map_err(|_| RaftError::Timeout)?;
        match added {
            Ok(_) => Ok(()),
            Err(openraft::errors::RaftError::APIError(e)) => Err(self.write_error(e)),
            Err(openraft::errors::RaftError::Fatal(f)) => Err(from_fatal(f)),
        }
    }

    /// On the leader: makes non-voter `id` a voter (nothing when it is one already).
    pub async fn promote(&self, id: u64) -> Result<(), RaftError> {
        if self.voters().contains(&id) {
            return Ok(());
        }
        let ids = std::collections::BTreeSet::from([id]);
        self.change(openraft::ChangeMembers::AddVoterIds(ids)).await
    }

    /// On the leader: removes node `id` from the cluster (voter or learner).
    pub async fn remove_member(&self, id: u64) -> Result<(), RaftError> {
        let (voter, known) = self.with_metrics(|m| {
            let membership = m.membership_config.membership();
            (
                membership.voter_ids().any(|v| v == id),
                membership.get_node(&id).is_some(),
            )
        });
        if !known {
            return Err(RaftError::Bootstrap(format!(
                "node {id} is not a member of the cluster"
            )));
        }
        let ids = std::collections::BTreeSet::from([id]);
        if voter {
            self.change(openraft::ChangeMembers::RemoveVoters(ids.clone()))
                .await?;
        }
        self.change(openraft::ChangeMembers::RemoveNodes(ids)).await
    }

    async fn change(
        &self,
        change: openraft::ChangeMembers<u64, BasicNode>,
    ) -> Result<(), RaftError> {
        let changed = tokio::time::timeout(
            MEMBERSHIP_TIMEOUT,
            self.inner.raft.change_membership(change, false),
        )
        .await
        .map_err(|_| RaftError::Timeout)?;
        match changed {
            Ok(_) => Ok(()),
            Err(openraft::errors::RaftError::APIError(e)) => Err(self.write_error(e)),
            Err(openraft::errors::RaftError::Fatal(f)) => Err(from_fatal(f)),
        }
    }

    /// On the leader: how long since each other member last acknowledged it (`None`: never).
    /// Empty on a follower.
    pub fn peer_silence(&self) -> std::collections::BTreeMap<u64, Option<Duration>> {
        use openraft::Instant as _;
        let me = self.inner.id;
        self.with_metrics(|m| {
            m.heartbeat
                .as_ref()
                .map(|beats| {
                    beats
                        .iter()
                        .filter(|(id, _)| **id != me)
                        .map(|(id, at)| (*id, at.as_ref().map(|at| at.elapsed())))
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// On the leader: the last log entry each other member is known to hold, as `(term, index)`
    /// (`None`: nothing matched yet). Empty on a follower.
    pub fn peer_matched(&self) -> std::collections::BTreeMap<u64, Option<(u64, u64)>> {
        let me = self.inner.id;
        self.with_metrics(|m| {
            m.replication
                .as_ref()
                .map(|peers| {
                    peers
                        .iter()
                        .filter(|(id, _)| **id != me)
                        .map(|(id, matched)| {
                            let at = matched
                                .as_ref()
                                .map(|l| (l.committed_leader_id().term, l.index()));
                            (*id, at)
                        })
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// On the leader: hands leadership to voter `to` (Nomad's `transfer-leadership`) and waits
    /// until `to` leads. The old leader steps down at once; it stays a voter.
    pub async fn transfer_leader(&self, to: u64, timeout: Duration) -> Result<(), RaftError> {
        if !self.is_leader() {
            return Err(self.forward_error());
        }
        if to == self.inner.id {
            return Ok(());
        }
        if !self.voters().contains(&to) {
            return Err(RaftError::NotVoter(to));
        }
        self.inner
            .raft
            .trigger()
            .transfer_leader(to)
            .await
            .map_err(from_fatal)?;
        let mut rx = self.inner.raft.metrics();
        let wait = async {
            loop {
                if rx.borrow_watched().current_leader == Some(to) {
                    return Ok(());
                }
                if rx.changed().await.is_err() {
                    return Err(RaftError::Shutdown);
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| RaftError::Timeout)?
    }

    fn forward_error(&self) -> RaftError {
        let leader = self.leader();
        RaftError::ForwardToLeader {
            leader_id: leader.as_ref().map(|l| l.0),
            leader_addr: leader.map(|l| l.1),
        }
    }

    /// The voters' ids.
    pub fn voters(&self) -> Vec<u64> {
        self.with_metrics(|m| m.membership_config.membership().voter_ids().collect())
    }

    /// Appends `payload` to the log and waits until it is committed and applied here. Returns
    /// its log index and the state machine's response. `Ok` means the entry is on disk on a
    /// quorum and survives any minority of crashes, this node's included.
    pub async fn write(&self, payload: Vec<u8>) -> Result<(u64, Vec<u8>), RaftError> {
        if let Some(why) = self.disk_stalled() {
            return Err(RaftError::DiskFull(why));
        }
        if payload.len() > ENTRY_BYTES_MAX {
            return Err(RaftError::TooLarge {
                bytes: payload.len(),
                max: ENTRY_BYTES_MAX,
            });
        }
        let written =
            tokio::time::timeout(WRITE_TIMEOUT, self.inner.raft.client_write(Bytes(payload)))
                .await
                .map_err(|_| RaftError::Timeout)?;
        match written {
            Ok(resp) => Ok((resp.log_id.index(), resp.data.0)),
            Err(openraft::errors::RaftError::APIError(e)) => Err(self.write_error(e)),
            Err(openraft::errors::RaftError::Fatal(f)) => Err(from_fatal(f)),
        }
    }

    /// Raft's ReadIndex: confirms with a quorum that this node still leads, and waits to have
    /// applied everything committed before the confirmation; returns that index. A read served
    /// after it sees every write acknowledged before the read was asked — never the state of a
    /// leader that was cut off or paused and replaced meanwhile.
    pub async fn read_index(&self) -> Result<u64, RaftError> {
        use openraft::errors::LinearizableReadError;
        // A leader whose log cannot grow does not answer its peers either; it cannot vouch for
        // being the leader.
        if let Some(why) = self.disk_stalled() {
            return Err(RaftError::DiskFull(why));
        }
        let read = tokio::time::timeout(
            READ_INDEX_TIMEOUT,
            self.inner
                .raft
                .ensure_linearizable(openraft::ReadPolicy::ReadIndex),
        )
        .await
        .map_err(|_| RaftError::Timeout)?;
        match read {
            Ok(id) => Ok(id.log_id().index()),
            Err(openraft::errors::RaftError::APIError(LinearizableReadError::ForwardToLeader(
                f,
            ))) => Err(self.forward(f)),
            Err(openraft::errors::RaftError::APIError(e)) => {
                Err(RaftError::NoQuorum(e.to_string()))
            }
            Err(openraft::errors::RaftError::Fatal(f)) => Err(from_fatal(f)),
        }
    }

    /// Why this node's raft store waits for disk space, while it does: it takes no new writes
    /// until space returns (then it carries on by itself).
    pub fn disk_stalled(&self) -> Option<String> {
        self.inner.disk.stalled()
    }

    /// Waits until this node has applied the log through `index` (a leader's read index),
    /// blank and membership entries included; at most `timeout`.
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<(), RaftError> {
        self.inner
            .raft
            .wait(Some(timeout))
            .applied_index_at_least(Some(index), "read barrier")
            .await
            .map(|_| ())
            .map_err(|_| RaftError::Timeout)
    }

    fn write_error(&self, e: ClientWriteError<TypeConfig>) -> RaftError {
        match e {
            ClientWriteError::ForwardToLeader(f) => self.forward(f),
            ClientWriteError::LogEntryDiscarded(_) => RaftError::LeadershipLost,
            other => RaftError::Fatal(other.to_string()),
        }
    }

    fn forward(&self, f: ForwardToLeader<TypeConfig>) -> RaftError {
        if f.leader_id.is_none() && self.members().is_empty() {
            return RaftError::NotInitialized;
        }
        RaftError::ForwardToLeader {
            leader_id: f.leader_id,
            leader_addr: f.leader_node.map(|n| n.addr),
        }
    }

    /// Reads the latest metrics without copying them. The watch guard lives only inside `f`.
    fn with_metrics<T>(&self, f: impl FnOnce(&RaftMetrics<TypeConfig>) -> T) -> T {
        let rx = self.inner.raft.metrics();
        let metrics = rx.borrow_watched();
        f(&metrics)
    }

    pub fn is_leader(&self) -> bool {
        self.with_metrics(|m| {
            m.state == ServerState::Leader && m.current_leader == Some(self.inner.id)
        })
    }

    /// Whether this node leads and its state holds everything it knows committed: an entry of
    /// its own term applied (the blank entry each new leader writes first, so every entry an
    /// earlier leader committed is in its state too), and nothing committed left to apply.
    /// Until then its state may lack writes that were acknowledged — or that a follower, which
    /// applies what the leader committed on its own schedule, already showed a client — so it
    /// must not check a write against it (a client's claim for an allocation a follower handed
    /// it would find no allocation).
    pub fn leader_caught_up(&self) -> bool {
        self.with_metrics(|m| leader_caught_up(m, committed_index(m)))
    }

    /// Waits until this node leads with its own term applied and has applied everything it
    /// knew committed when the wait began, at most `timeout`; false when it stopped leading or
    /// the time ran out.
    pub async fn wait_leader_caught_up(&self, timeout: Duration) -> bool {
        let mut rx = self.inner.raft.metrics();
        let target = committed_index(&rx.borrow_watched());
        let wait = async {
            loop {
                {
                    let m = rx.borrow_watched();
                    if leader_caught_up(&m, target) {
                        return true;
                    }
                    if m.state != ServerState::Leader {
                        return false;
                    }
                }
                if rx.changed().await.is_err() {
                    return false;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.unwrap_or(false)
    }

    /// The leader's id and rpc address, when this node knows them.
    pub fn leader(&self) -> Option<(u64, String)> {
        self.with_metrics(leader_of)
    }

    /// Milliseconds since this node last heard from a leader: 0 on the leader, `None` if never.
    pub fn last_contact_ms(&self) -> Option<u64> {
        if self.is_leader() {
            return Some(0);
        }
        let last = *self.inner.last_contact.lock().expect("last_contact lock");
        last.map(|t| u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    /// Every node in the current membership (voters and learners), by id, with its rpc address.
    pub fn members(&self) -> Vec<(u64, String)> {
        self.with_metrics(|m| {
            m.membership_config
                .membership()
                .nodes()
                .map(|(id, node)| (*id, node.addr.clone()))
                .collect()
        })
    }

    /// Where this node's log stands.
    pub fn stats(&self) -> RaftStats {
        self.with_metrics(stats_of)
    }

    /// Waits until some node is known to lead (this one included).
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<(u64, String), RaftError> {
        let mut rx = self.inner.raft.metrics();
        let wait = async {
            loop {
                if let Some(leader) = leader_of(&rx.borrow_watched()) {
                    return Ok(leader);
                }
                if rx.changed().await.is_err() {
                    return Err(RaftError::Shutdown);
                }
            }
        };
        tokio::time::timeout(timeout, wait)
            .await
            .map_err(|_| RaftError::Timeout)?
    }

    /// Serves a peer's raft message. The server routes every rpc method starting with `Raft.`
    /// here.
    pub async fn handle_rpc(&self, method: &str, body: &[u8]) -> Result<Vec<u8>, rpc::RpcError> {
        if self.inner.stopped.load(Ordering::SeqCst) {
            return Err(rpc::RpcError::unavailable(format!(
                "raft on node {} is shut down",
                self.inner.id
            )));
        }
        match method {
            APPEND_ENTRIES => {
                let req: AppendEntriesRequest<TypeConfig> = self.addressed(method, body)?;
                let resp = self
                    .inner
                    .raft
                    .append_entries(req)
                    .await
                    .map_err(|e| self.stopped_error(e))?;
                if matches!(
                    resp,
                    AppendEntriesResponse::Success | AppendEntriesResponse::PartialSuccess(_)
                ) {
                    *self.inner.last_contact.lock().expect("last_contact lock") =
                        Some(Instant::now());
                }
                encode(&resp)
            }
            VOTE => {
                let req: VoteRequest<TypeConfig> = self.addressed(method, body)?;
                let resp = self
                    .inner
                    .raft
                    .vote(req)
                    .await
                    .map_err(|e| self.stopped_error(e))?;
                encode(&resp)
            }
            TRANSFER_LEADER => {
                let req: openraft::raft::TransferLeaderRequest<TypeConfig> =
                    self.addressed(method, body)?;
                let resp = self
                    .inner
                    .raft
                    .handle_transfer_leader(req)
                    .await
                    .map_err(|e| {
                        rpc::RpcError::unavailable(format!("raft on node {}: {e}", self.inner.id))
                    })?;
                encode(&resp)
            }
            SNAPSHOT => {
                let chunk: SnapshotChunk = decode(method, body)?;
                self.check_target(chunk.target)?;
                self.receive_snapshot_chunk(chunk).await
            }
            other => Err(rpc::RpcError::not_found(format!("no raft method {other}"))),
        }
    }

    fn addressed<T: serde::de::DeserializeOwned>(
        &self,
        method: &str,
        body: &[u8],
    ) -> Result<T, rpc::RpcError> {
        let req: Addressed<T> = decode(method, body)?;
        self.check_target(req.target)?;
        Ok(req.rpc)
    }

    fn check_target(&self, target: u64) -> Result<(), rpc::RpcError> {
        if target == self.inner.id {
            return Ok(());
        }
        Err(rpc::RpcError::bad_request(format!(
            "raft message for node {target} reached node {}",
            self.inner.id
        )))
    }

    fn stopped_error(&self, e: openraft::errors::RaftError<TypeConfig>) -> rpc::RpcError {
        rpc::RpcError::unavailable(format!("raft on node {}: {e}", self.inner.id))
    }

    async fn receive_snapshot_chunk(&self, chunk: SnapshotChunk) -> Result<Vec<u8>, rpc::RpcError> {
        let data = {
            let mut incoming = self.inner.incoming.lock().expect("incoming lock");
            if chunk.offset == 0 {
                *incoming = Some(Incoming {
                    transfer: chunk.transfer.clone(),
                    data: Vec::new(),
                });
            }
            let Some(current) = incoming.as_mut().filter(|i| i.transfer == chunk.transfer) else {
                return Err(rpc::RpcError::bad_request(
                    "snapshot chunk of an unknown transfer",
                ));
            };
            if current.data.len() as u64 != chunk.offset {
                *incoming = None;
                return Err(rpc::RpcError::bad_request(
                    "snapshot chunk out of order; start over",
                ));
            }
            if current.data.len().saturating_add(chunk.data.0.len())
                > crate::limits::SNAPSHOT_RECEIVE_BYTES_MAX
            {
                *incoming = None;
                return Err(rpc::RpcError::bad_request(format!(
                    "snapshot larger than {} bytes; refused",
                    crate::limits::SNAPSHOT_RECEIVE_BYTES_MAX
                )));
            }
            current.data.extend_from_slice(&chunk.data.0);
            if !chunk.done {
                return encode(&None::<()>);
            }
            incoming.take().expect("checked above").data
        };
        let snapshot = Snapshot {
            meta: chunk.meta,
            snapshot: Bytes(data),
        };
        let resp = self
            .inner
            .raft
            .install_full_snapshot(chunk.vote, snapshot)
            .await
            .map_err(|e| {
                rpc::RpcError::unavailable(format!("raft on node {}: {e}", self.inner.id))
            })?;
        *self.inner.last_contact.lock().expect("last_contact lock") = Some(Instant::now());
        encode(&Some(resp))
    }

    /// Stops the node as a crash would (a simulation's fault): peers' messages are refused and the
    /// raft core stops, but what was written without durability (the committed index) is not made
    /// durable first.
    pub async fn crash(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        let _ = self.inner.raft.shutdown().await;
        drop(self.inner.log.lock().expect("log lock").take());
        drop(self.inner.lock.lock().expect("dir lock").take());
    }

    /// Stops the node: (1) refuse peers' messages; (2) stop the raft core and wait for it;
    /// (3) make the last commits durable and close the log. Later calls do nothing.
    pub async fn shutdown(&self) -> Result<(), RaftError> {
        self.inner.stopped.store(true, Ordering::SeqCst);
        // A write waiting for disk space would hold the raft core, and shutdown with it.
        self.inner.disk.stop();
        self.inner
            .raft
            .shutdown()
            .await
            .map_err(|e| RaftError::Fatal(format!("joining the raft core: {e}")))?;
        let log = self.inner.log.lock().expect("log lock").take();
        if let Some(log) = log {
            crate::rt::blocking(move || log.flush())
                .await
                .map_err(|e| RaftError::Storage(e.to_string()))?
                .map_err(|e| RaftError::Storage(e.to_string()))?;
        }
        drop(self.inner.lock.lock().expect("dir lock").take());
        Ok(())
    }
}

/// Triggers a snapshot whenever `every` more bytes were written to the log, until the node stops.
async fn snapshot_by_log_bytes(
    node: std::sync::Weak<Inner>,
    appended: Arc<std::sync::atomic::AtomicU64>,
    every: u64,
) {
    let mut mark = 0u64;
    let mut tick = tokio::time::interval(crate::limits::LOG_BYTES_CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(inner) = node.upgrade() else {
            return;
        };
        if inner.stopped.load(Ordering::SeqCst) {
            return;
        }
        let written = appended.load(Ordering::Relaxed);
        if written.saturating_sub(mark) < every {
            continue;
        }
        mark = written;
        tracing::debug!(
            bytes = written,
            "the raft log grew past its snapshot threshold; snapshotting"
        );
        if let Err(e) = inner.raft.trigger().snapshot().await {
            tracing::warn!(error = %e, "could not trigger a raft snapshot");
        }
        // Not held while sleeping: a node shut down and opened again on its data dir in the
        // same process must find nothing of the old one left.
        drop(inner);
    }
}

fn stats_of(m: &RaftMetrics<TypeConfig>) -> RaftStats {
    let index = |id: &Option<crate::types::LogId>| id.as_ref().map_or(0, |id| id.index());
    RaftStats {
        state: match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        },
        term: m.current_term,
        last_log_index: m.last_log_index.unwrap_or(0),
        commit_index: index(&m.local_committed),
        applied_index: index(&m.last_applied),
        last_snapshot_index: index(&m.snapshot),
        purged_index: index(&m.purged),
    }
}

fn leader_of(m: &RaftMetrics<TypeConfig>) -> Option<(u64, String)> {
    let id = m.current_leader?;
    let node = m.membership_config.membership().get_node(&id)?;
    Some((id, node.addr.clone()))
}

fn decode<T: serde::de::DeserializeOwned>(method: &str, body: &[u8]) -> Result<T, rpc::RpcError> {
    rpc::codec::decode(body).map_err(|e| rpc::RpcError::bad_request(format!("{method}: {e}")))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, rpc::RpcError> {
    rpc::codec::encode(value)
        .map_err(|e| rpc::RpcError::internal(format!("encoding raft response: {e}")))
}

fn openraft_config(cfg: &RaftConfig) -> Result<openraft::Config, RaftError> {
    let every = cfg.snapshot_every_entries;
    let config = openraft::Config {
        cluster_name: "caravan".to_string(),
        heartbeat_interval: cfg.heartbeat_ms,
        election_timeout_min: cfg.election_timeout_ms.0,
        election_timeout_max: cfg.election_timeout_ms.1,
        install_snapshot_timeout: u64::try_from(SNAPSHOT_INSTALL_TIMEOUT.as_millis())
            .expect("fits"),
        max_payload_entries: APPEND_ENTRIES_MAX,
        snapshot_policy: if every == 0 {
            SnapshotPolicy::Never
        } else {
            SnapshotPolicy::LogsSinceLast(every)
        },
        // Generous on purpose: see LOGS_KEPT_BEHIND_SNAPSHOT_MIN (openraft issue #2116).
        max_in_snapshot_log_to_keep: every.saturating_mul(2).max(LOGS_KEPT_BEHIND_SNAPSHOT_MIN),
        ..Default::default()
    };
    config
        .validate()
        .map_err(|e| RaftError::Config(e.to_string()))
}

/// The last index this node knows committed (on the leader: the cluster's).
fn committed_index(m: &RaftMetrics<TypeConfig>) -> u64 {
    m.local_committed.as_ref().map_or(0, |l| l.index())
}

fn leader_caught_up(m: &RaftMetrics<TypeConfig>, committed: u64) -> bool {
    m.state == ServerState::Leader
        && m.last_applied.as_ref().is_some_and(|l| {
            l.committed_leader_id().term == m.current_term && l.index() >= committed
        })
}
