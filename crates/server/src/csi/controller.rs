//! Controller calls, on the leader: which controller instance gets a call, and the serializer that
//! keeps destructive calls for one plugin from ever overlapping anywhere in the cluster.
//!
//! The contract (ARCHITECTURE.md, "CSI"): no two destructive controller calls for one plugin are
//! ever in flight at once, in any failure — a leader killed or stepping down while alive, the
//! executing agent restarting, a reply lost after the call ran, a call timing out, a caller
//! giving up. It holds by three rules:
//! - **One turn at a time, on the leader.** One FIFO queue per plugin ([`ControllerLocks`]),
//!   bounded (past [`ServerConfig::csi_max_queued`] waiters a call is refused as busy); identical
//!   requests (same method, volume, node and arguments) join the one already queued or running; a
//!   caller that gives up while queued leaves the queue, and once its turn came the call runs to
//!   its end in its own task whatever the caller does.
//! - **Recorded before it is sent.** [`Command::CsiControllerOpBegin`] before the first send,
//!   [`Command::CsiControllerOpRenew`] (compare-and-set on the record's version, owner and term)
//!   before every resend, [`Command::CsiControllerOpEnd`] (only by the owner, in its term) after a
//!   definite answer. So every send is covered by a record whose deadline is at least the send's
//!   own, written by the current leader; a server that is not (or no longer) the owner cannot
//!   renew or clear it, and a new leader can take it over only after its deadline has passed.
//! - **No answer is not an answer.** A send that may have reached the plugin without a definite
//!   answer (lost reply, agent restart, undecodable answer, `DEADLINE_EXCEEDED`) is assumed to run
//!   until its deadline: nothing goes to the plugin before then, and the same call is sent again
//!   (idempotently) until a definite answer resolves it ([`super::plan`] decides).
//!
//! Instances: the controller on the lowest node ID (sorted as strings, which is how Nomad's IDs
//! compare) among those whose last probe succeeded and whose node is `ready` — draining and
//! ineligible nodes still serve. Only an instance known not to have received the call (connection
//! refused, no instance on that agent, `UNAVAILABLE`) moves it on to the next one; `ABORTED` is
//! retried on the same instance with exponential backoff.
//!
//! [`ServerConfig::csi_max_queued`]: crate::ServerConfig::csi_max_queued

use super::plan::{nanos, CallPlan, Next, Outcome};
use crate::endpoints::now_nanos;
use crate::error::ServerError;
use crate::server::Server;
use futures::future::{BoxFuture, FutureExt, WeakShared};
use model::csi::CSIControllerOp;
use model::node::{Node, NodeStatus};
use model::wire::{CsiCallError, CsiControllerCall, CsiControllerReply, CsiControllerRequest};
use rpc::ErrorCode;
use state::{Command, StateSnapshot};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// gRPC codes (tonic's numbering), for deciding retries.
pub(crate) const CODE_NOT_FOUND: i32 = 5;
pub(crate) const CODE_FAILED_PRECONDITION: i32 = 9;
pub(crate) const CODE_ABORTED: i32 = 10;
pub(crate) const CODE_UNAVAILABLE: i32 = 14;
pub(crate) const CODE_DEADLINE_EXCEEDED: i32 = 4;

/// How long one controller call may take before the client gives up on it, unless the server
/// config says otherwise (`server { csi_controller_timeout }`): cloud attaches take minutes.
pub const DEFAULT_CONTROLLER_CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How many calls may wait for one plugin's turn before more are refused as busy.
pub const DEFAULT_MAX_QUEUED: usize = 50;

/// Why a controller call failed.
#[derive(Debug, Clone)]
pub enum CallFailure {
    /// Known not to have reached the client agent (the connection was refused): the call did
    /// not run.
    NotDelivered(String),
    /// Sent, but no definite answer came back (the connection broke, the answer was undecodable,
    /// no answer in time): the call may have run, and may still be running.
    Lost(String),
    /// The plugin (or the client agent on its behalf) answered with an error.
    Plugin(CsiCallError),
}

impl std::fmt::Display for CallFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallFailure::NotDelivered(m) => write!(f, "client unreachable: {m}"),
            CallFailure::Lost(m) => write!(f, "no definite answer from the client: {m}"),
            CallFailure::Plugin(e) => write!(f, "{} (gRPC code {})", e.message, e.code),
        }
    }
}

impl CallFailure {
    fn outcome(&self) -> Outcome {
        match self {
            CallFailure::NotDelivered(m) => Outcome::NotDelivered(m.clone()),
            CallFailure::Lost(m) => Outcome::Lost(m.clone()),
            CallFailure::Plugin(e) => Outcome::Plugin(e.clone()),
        }
    }
}

/// How a server reaches the client agent that runs a controller instance. The agent wires in an
/// HTTP implementation; tests put a recording plugin behind it.
pub trait CsiTransport: Send + Sync + 'static {
    fn call(
        &self,
        node: &Node,
        req: CsiControllerRequest,
    ) -> BoxFuture<'static, Result<CsiControllerReply, CallFailure>>;

    /// Asks the client agent of `node` to unpublish and unstage a volume for an allocation (the
    /// node step of a claim release), and waits for its answer.
    fn node_detach(
        &self,
        node: &Node,
        req: model::wire::CsiNodeDetachRequest,
    ) -> BoxFuture<'static, Result<(), CallFailure>> {
        let _ = (node, req);
        Box::pin(async {
            Err(CallFailure::NotDelivered(
                "this server cannot reach client agents for node calls".into(),
            ))
        })
    }

    /// Asks the client agent of `node` to create, register or delete a dynamic host volume, and
    /// waits for its answer.
    fn host_volume(
        &self,
        node: &Node,
        req: model::host_volume::ClientHostVolumeRequest,
    ) -> BoxFuture<'static, Result<model::host_volume::ClientHostVolumeReply, CallFailure>> {
        let _ = (node, req);
        Box::pin(async {
            Err(CallFailure::NotDelivered(
                "this server cannot reach client agents for node calls".into(),
            ))
        })
    }

    /// Asks the client agent of `node` to grow a volume it has published for an allocation
    /// (NodeExpandVolume), and waits for its answer.
    fn node_expand(
        &self,
        node: &Node,
        req: model::wire::CsiNodeExpandRequest,
    ) -> BoxFuture<'static, Result<(), CallFailure>> {
        let _ = (node, req);
        Box::pin(async {
            Err(CallFailure::NotDelivered(
                "this server cannot reach client agents for node calls".into(),
            ))
        })
    }
}

type ReplyFuture = BoxFuture<'static, Result<CsiControllerReply, ServerError>>;

/// One plugin's queue on this server (meaningful only while it leads).
#[derive(Default)]
struct PluginQueue {
    /// The turn: a fair (FIFO) lock; a waiter that is dropped leaves the queue.
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Calls waiting for the turn (not the one holding it).
    waiting: AtomicUsize,
    /// Calls queued or running, by request: an identical request joins instead of queueing.
    /// Weak, so a call whose callers all gave up while it waited is dropped (and leaves the
    /// queue) rather than kept alive by this map.
    joinable: Mutex<HashMap<String, WeakShared<ReplyFuture>>>,
}

/// The per-plugin queues of this server, and one lock per claim being released.
#[derive(Default)]
pub(crate) struct ControllerLocks {
    plugins: Mutex<HashMap<String, Arc<PluginQueue>>>,
    claims: Arc<Mutex<HashMap<ClaimKey, Arc<tokio::sync::Mutex<()>>>>>,
}

type ClaimKey = (String, String, String);

/// A claim's release turn: a client's release and the watcher's never run at once for one
/// claim. Dropping it forgets the lock when nobody else waits for it.
pub(crate) struct ClaimTurn {
    map: Arc<Mutex<HashMap<ClaimKey, Arc<tokio::sync::Mutex<()>>>>>,
    key: ClaimKey,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for ClaimTurn {
    fn drop(&mut self) {
        self.guard.take();
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        // The map's Arc and ours: nobody waits.
        if Arc::strong_count(&self.lock) == 2 {
            map.remove(&self.key);
        }
    }
}

impl ControllerLocks {
    /// Waits for the release turn of one claim.
    pub(crate) async fn claim_turn(
        &self,
        namespace: &str,
        volume_id: &str,
        alloc_id: &str,
    ) -> ClaimTurn {
        let key = (
            namespace.to_string(),
            volume_id.to_string(),
            alloc_id.to_string(),
        );
        let lock = {
            let mut map = self.claims.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(map.entry(key.clone()).or_default())
        };
        let guard = Arc::clone(&lock).lock_owned().await;
        ClaimTurn {
            map: Arc::clone(&self.claims),
            key,
            lock,
            guard: Some(guard),
        }
    }

    fn of(&self, plugin_id: &str) -> Arc<PluginQueue> {
        let mut map = self.plugins.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(map.entry(plugin_id.to_string()).or_default())
    }

    /// How many calls wait for `plugin_id`'s turn now.
    pub(crate) fn waiting(&self, plugin_id: &str) -> usize {
        self.of(plugin_id).waiting.load(Ordering::SeqCst)
    }
}

/// Counts a waiter from when it is admitted until its turn comes or it is dropped (also when its
/// future is dropped before it ever ran: the count lives in the future).
struct Waiting(Arc<PluginQueue>);

impl Waiting {
    fn new(q: &Arc<PluginQueue>) -> Waiting {
        q.waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(Arc::clone(q))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One controller instance and whether it may take calls.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub node: Arc<Node>,
    /// `None`: usable; else why it is skipped.
    pub skipped: Option<String>,
}

/// The plugin's controller instances, lowest node ID first, each usable or with its reason.
pub(crate) fn candidates(snap: &StateSnapshot, plugin_id: &str) -> Vec<Candidate> {
    let Some(plugin) = snap.csi_plugin(plugin_id) else {
        return Vec::new();
    };
    // BTreeMap keys: already sorted by node ID.
    plugin
        .controllers
        .iter()
        .map(|(node_id, info)| {
            let node = snap.node(node_id);
            let skipped = match &node {
                None => Some("its node is gone".to_string()),
                Some(n) if n.status != NodeStatus::Ready => {
                    Some(format!("its node is {}", n.status))
                }
                Some(_) if !info.healthy => Some(format!(
                    "its last probe failed: {}",
                    if info.health_description.is_empty() {
                        "unhealthy"
                    } else {
                        &info.health_description
                    }
                )),
                Some(n) if n.http_addr.is_empty() => {
                    Some("its node has no HTTP address".to_string())
                }
                Some(_) => None,
            };
            Candidate {
                node: node.unwrap_or_else(|| {
                    Arc::new(Node {
                        id: node_id.clone(),
                        ..Node::default()
                    })
                }),
                skipped,
            }
        })
        .collect()
}

/// The error when no instance qualifies: each one and why it was skipped.
fn none_usable(plugin_id: &str, all: &[Candidate]) -> ServerError {
    if all.is_empty() {
        return ServerError::new(
            ErrorCode::Unavailable,
            format!("plugin {plugin_id}: no controller instance is registered; run the plugin's controller (or monolith) job"),
        );
    }
    let reasons: Vec<String> = all
        .iter()
        .map(|c| {
            format!(
                "node {}: {}",
                c.node.id,
                c.skipped.as_deref().unwrap_or("failed")
            )
        })
        .collect();
    ServerError::new(
        ErrorCode::Unavailable,
        format!(
            "plugin {plugin_id}: no healthy controller on a ready node ({})",
            reasons.join("; ")
        ),
    )
}

/// The server error for a failed call, keeping whether retrying later may help.
pub(crate) fn failure_error(plugin_id: &str, method: &str, f: &CallFailure) -> ServerError {
    let code = match f {
        CallFailure::NotDelivered(_) | CallFailure::Lost(_) => ErrorCode::Unavailable,
        CallFailure::Plugin(e) => match e.code {
            CODE_ABORTED | CODE_UNAVAILABLE | CODE_DEADLINE_EXCEEDED => ErrorCode::Unavailable,
            CODE_FAILED_PRECONDITION => ErrorCode::Conflict,
            CODE_NOT_FOUND => ErrorCode::NotFound,
            _ => ErrorCode::BadRequest,
        },
    };
    ServerError::new(code, format!("plugin {plugin_id}: {method} failed: {f}"))
}

/// A check made in the plugin's turn, right before a call is first sent: an error skips the
/// call (and is returned).
pub(crate) type Precondition = Arc<dyn Fn(&StateSnapshot) -> Result<(), ServerError> + Send + Sync>;

/// What a destructive call is about, for its record (and for what a resend needs).
#[derive(Clone, Default)]
pub(crate) struct CallAbout {
    pub namespace: String,
    pub volume_id: String,
    /// Kept in the record for a resend: for `CreateVolume`, the volume to register with the reply.
    pub context: serde_json::Value,
    /// Checked in the call's turn, after any recorded call was resolved.
    pub precondition: Option<Precondition>,
}

impl CallAbout {
    pub(crate) fn volume(namespace: &str, volume_id: &str) -> CallAbout {
        CallAbout {
            namespace: namespace.to_string(),
            volume_id: volume_id.to_string(),
            context: serde_json::Value::Null,
            precondition: None,
        }
    }
}

/// What the driver carries between sends of one call.
struct Flight {
    plugin_id: String,
    method: &'static str,
    call: CsiControllerCall,
    /// The record as last written (by this server) or found.
    record: Option<Arc<CSIControllerOp>>,
    plan: CallPlan,
}

impl Server {
    /// How many destructive controller calls wait for `plugin_id`'s turn on this server now.
    pub fn csi_queued(&self, plugin_id: &str) -> usize {
        self.csi_locks().waiting(plugin_id)
    }

    /// Makes a controller call for `plugin_id` (on the leader; callers forward first). Destructive
    /// calls wait their turn in the plugin's queue and are recorded in Raft while in flight;
    /// `about` says which volume the call is about (for the record, and for a resend).
    pub(crate) async fn csi_controller_call(
        &self,
        plugin_id: &str,
        about: CallAbout,
        call: CsiControllerCall,
    ) -> Result<CsiControllerReply, ServerError> {
        let transport = self.csi_transport()?;
        if !call.is_destructive() {
            let snap = self.state().snapshot();
            return send_read(&*transport, &snap, plugin_id, &call, self.csi_deadline()).await;
        }
        let method = call.method();
        let key = format!(
            "{}\u{0}{}\u{0}{}",
            about.namespace,
            about.volume_id,
            serde_json::to_string(&call.without_secrets()).unwrap_or_default()
        );
        let queue = self.csi_locks().of(plugin_id);
        let fut = {
            let mut map = queue.joinable.lock().unwrap_or_else(|p| p.into_inner());
            map.retain(|_, w| w.upgrade().is_some());
            if let Some(running) = map.get(&key).and_then(WeakShared::upgrade) {
                tracing::debug!(
                    plugin_id,
                    method,
                    "joining an identical queued controller call"
                );
                running
            } else {
                let queued = queue.waiting.load(Ordering::SeqCst);
                let max = self.config().csi_max_queued;
                if queued >= max {
                    return Err(ServerError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "plugin {plugin_id} busy: {queued} calls queued (at most {max}); retry later"
                        ),
                    ));
                }
                let ours = self
                    .in_turn(
                        Waiting::new(&queue),
                        transport,
                        plugin_id,
                        Some((about, call)),
                    )
                    .shared();
                if let Some(weak) = ours.downgrade() {
                    map.insert(key, weak);
                }
                ours
            }
        };
        fut.await
    }

    /// Resolves the plugin's recorded call, if any, in its turn (the volume watcher calls this
    /// on a new leader, so a call left in flight is settled even if nothing else comes for it).
    pub(crate) async fn csi_resolve_plugin(&self, plugin_id: &str) -> Result<(), ServerError> {
        if self
            .state()
            .snapshot()
            .csi_controller_op(plugin_id)
            .is_none()
        {
            return Ok(());
        }
        let transport = self.csi_transport()?;
        let queue = self.csi_locks().of(plugin_id);
        self.in_turn(Waiting::new(&queue), transport, plugin_id, None)
            .await
            .map(|_| ())
    }

    /// Waits for the plugin's turn (counted as `waiting` until it comes, or until the future is
    /// dropped: then it leaves the queue), then runs [`Server::run_destructive`] in a task of its
    /// own: from there the call runs to its end even if every caller gives up, since a call cut
    /// off mid-flight would leave its record for a later leader to wait out.
    fn in_turn(
        &self,
        waiting: Waiting,
        transport: Arc<dyn CsiTransport>,
        plugin_id: &str,
        new: Option<(CallAbout, CsiControllerCall)>,
    ) -> ReplyFuture {
        let server = self.clone();
        let plugin = plugin_id.to_string();
        let turn = Arc::clone(&waiting.0.turn);
        async move {
            let guard = {
                let _waiting = waiting;
                turn.lock_owned().await
            };
            tokio::spawn(async move {
                let _turn = guard;
                server.run_destructive(&*transport, &plugin, new).await
            })
            .await
            .unwrap_or_else(|e| Err(ServerError::internal(format!("controller call task: {e}"))))
        }
        .boxed()
    }

    /// The controller call deadline from now.
    fn csi_deadline(&self) -> i64 {
        now_nanos().saturating_add(nanos(self.config().csi_controller_timeout))
    }

    /// In the plugin's turn: first resolves a call recorded earlier (by an earlier leader, or one
    /// given up on), then makes `new` (if any). Returns `new`'s reply (or, without one, the
    /// recorded call's).
    async fn run_destructive(
        &self,
        transport: &dyn CsiTransport,
        plugin_id: &str,
        new: Option<(CallAbout, CsiControllerCall)>,
    ) -> Result<CsiControllerReply, ServerError> {
        let mut last = CsiControllerReply::default();
        if let Some(op) = self.state().snapshot().csi_controller_op(plugin_id) {
            last = self.resolve_recorded(transport, &op).await?;
        }
        let Some((about, call)) = new else {
            return Ok(last);
        };
        if let Some(check) = &about.precondition {
            check(&self.state().snapshot())?;
        }
        let mut flight = Flight {
            plugin_id: plugin_id.to_string(),
            method: call.method(),
            call,
            record: None,
            plan: CallPlan::new(),
        };
        self.fly(transport, &mut flight, Some(about)).await
    }

    /// Sends a call recorded earlier again until it has a definite answer, taking its record over
    /// once its deadline has passed. A resent `CreateVolume` registers its volume with the reply.
    async fn resolve_recorded(
        &self,
        transport: &dyn CsiTransport,
        op: &Arc<CSIControllerOp>,
    ) -> Result<CsiControllerReply, ServerError> {
        let mut call: CsiControllerCall =
            serde_json::from_value(op.request.clone()).map_err(|e| {
                ServerError::internal(format!("recorded controller call {}: {e}", op.id))
            })?;
        let snap = self.state().snapshot();
        if let Some(v) = snap.csi_volume(&op.namespace, &op.volume_id) {
            call.set_secrets(v.secrets.clone());
        } else if let Ok(v) = serde_json::from_value::<model::csi::CSIVolume>(op.context.clone()) {
            call.set_secrets(v.secrets.clone());
        }
        tracing::info!(plugin_id = %op.plugin_id, op = %op.id, method = %op.method, owner = op.owner, term = op.term,
            "a recorded controller call may still be in flight; resolving it before anything else goes to the plugin");
        let mut flight = Flight {
            plugin_id: op.plugin_id.clone(),
            method: call.method(),
            call,
            record: Some(Arc::clone(op)),
            plan: CallPlan::inherited(op.attempts, op.deadline, &op.last_error),
        };
        let result = self.fly(transport, &mut flight, None).await;
        match &result {
            Ok(reply) => {
                tracing::info!(plugin_id = %op.plugin_id, op = %op.id, method = %op.method, "resent an unfinished controller call");
                if op.method == "CreateVolume" {
                    self.register_created(op, reply).await?;
                }
            }
            Err(e) if e.code == ErrorCode::Unavailable => {}
            // A final answer (e.g. NotFound for a delete that had happened): resolved either way.
            Err(e) => {
                tracing::info!(plugin_id = %op.plugin_id, op = %op.id, error = %e, "an unfinished controller call resolved with an error");
                return Ok(CsiControllerReply::default());
            }
        }
        result
    }

    /// Registers the volume a resent `CreateVolume` made (its reply would be lost otherwise,
    /// leaving a volume at the provider that nothing knows of).
    async fn register_created(
        &self,
        op: &CSIControllerOp,
        reply: &CsiControllerReply,
    ) -> Result<(), ServerError> {
        let Ok(mut v) = serde_json::from_value::<model::csi::CSIVolume>(op.context.clone()) else {
            tracing::warn!(plugin_id = %op.plugin_id, volume = %op.volume_id, external_id = %reply.external_id,
                "a resent CreateVolume made a volume, but its record has no volume to register; register it by hand");
            return Ok(());
        };
        if let Some(old) = self.state().snapshot().csi_volume(&v.namespace, &v.id) {
            if !old.external_id.is_empty() {
                return Ok(());
            }
        }
        v.external_id.clone_from(&reply.external_id);
        v.capacity = reply.capacity;
        v.context.extend(reply.volume_context.clone());
        v.topologies.clone_from(&reply.topologies);
        self.apply(Command::CsiVolumeRegister { volumes: vec![v] })
            .await?;
        Ok(())
    }

    /// Sends the flight's call until the plan says it is settled or given up, writing the record
    /// before each send. `about` is given for a new call (no record yet).
    async fn fly(
        &self,
        transport: &dyn CsiTransport,
        flight: &mut Flight,
        about: Option<CallAbout>,
    ) -> Result<CsiControllerReply, ServerError> {
        let me = self.node_id();
        let term = self.raft().stats().term;
        let plugin_id = flight.plugin_id.clone();
        let method = flight.method;
        let mut same: Option<String> = None;
        let mut not_before = flight.plan.not_before(now_nanos());
        loop {
            let wait = not_before.saturating_sub(now_nanos());
            if wait > 0 {
                tracing::info!(plugin_id, method, wait_ms = wait / 1_000_000,
                    "a send of this controller call may still be in flight; waiting out its deadline");
                tokio::time::sleep(Duration::from_nanos(u64::try_from(wait).unwrap_or(0))).await;
            }
            // Where to send: the same instance (ABORTED, DEADLINE_EXCEEDED) if it is still
            // usable, else the lowest usable one that has not failed for this call.
            let snap = self.state().snapshot();
            let all = candidates(&snap, &plugin_id);
            let usable =
                |c: &&Candidate| c.skipped.is_none() && !flight.plan.has_failed(&c.node.id);
            let target = same
                .as_deref()
                .and_then(|id| all.iter().filter(usable).find(|c| c.node.id == id))
                .or_else(|| all.iter().find(usable))
                .map(|c| Arc::clone(&c.node));
            let Some(node) = target else {
                let keep = matches!(flight.plan.exhausted(), Next::GiveUp { keep_record: true });
                return Err(self
                    .give_up(
                        flight,
                        keep,
                        none_usable_after(&plugin_id, &all, &flight.plan),
                    )
                    .await);
            };
            let deadline = self.csi_deadline();
            flight.plan.sent();
            self.record_send(flight, me, term, &node.id, deadline, about.as_ref())
                .await?;
            if !self.is_leader() || self.raft().stats().term != term {
                return Err(ServerError::new(
                    ErrorCode::Unavailable,
                    format!("plugin {plugin_id}: {method}: this server no longer leads; the new leader resolves the call"),
                ));
            }
            let req = CsiControllerRequest {
                plugin_id: plugin_id.clone(),
                deadline,
                call: flight.call.clone(),
            };
            let answer = transport.call(&node, req).await;
            let outcome = match &answer {
                Ok(_) => Outcome::Ok,
                Err(f) => f.outcome(),
            };
            let next = flight
                .plan
                .on_outcome(&node.id, deadline, &outcome, now_nanos());
            match next {
                Next::Done => {
                    self.end_record(flight, me, term).await;
                    return answer.map_err(|f| failure_error(&plugin_id, method, &f));
                }
                Next::Send {
                    same: s,
                    not_before: nb,
                } => {
                    if let Err(f) = &answer {
                        tracing::warn!(plugin_id, method, node = %node.id, error = %f,
                            unresolved = flight.plan.unresolved, "controller call not settled; sending it again");
                    }
                    same = s.then(|| node.id.clone());
                    not_before = nb;
                }
                Next::GiveUp { keep_record } => {
                    let f = answer
                        .err()
                        .unwrap_or(CallFailure::Lost("no answer".into()));
                    let err = failure_error(&plugin_id, method, &f);
                    return Err(self.give_up(flight, keep_record, err).await);
                }
            }
        }
    }

    /// Writes the record before a send: a begin for a new call, else a renewal (or takeover) by
    /// compare-and-set on the version last seen.
    async fn record_send(
        &self,
        flight: &mut Flight,
        me: u64,
        term: u64,
        node_id: &str,
        deadline: i64,
        about: Option<&CallAbout>,
    ) -> Result<(), ServerError> {
        let plugin_id = flight.plugin_id.clone();
        match &flight.record {
            None => {
                let about = about.cloned().unwrap_or_default();
                let op = CSIControllerOp {
                    id: crate::env::new_id(),
                    plugin_id: plugin_id.clone(),
                    method: flight.method.to_string(),
                    controller_node_id: node_id.to_string(),
                    namespace: about.namespace,
                    volume_id: about.volume_id,
                    request: serde_json::to_value(flight.call.without_secrets())
                        .unwrap_or_default(),
                    started_at: now_nanos(),
                    deadline,
                    owner: me,
                    term,
                    attempts: flight.plan.attempts,
                    context: about.context,
                    ..CSIControllerOp::default()
                };
                self.apply(Command::CsiControllerOpBegin { op: op.clone() })
                    .await?;
            }
            Some(rec) => {
                self.apply(Command::CsiControllerOpRenew {
                    plugin_id: plugin_id.clone(),
                    op_id: rec.id.clone(),
                    expect_index: rec.modify_index,
                    owner: me,
                    term,
                    now: now_nanos(),
                    deadline,
                    controller_node_id: node_id.to_string(),
                    attempts: flight.plan.attempts,
                    unresolved: flight.plan.unresolved,
                    last_error: flight.plan.last_error.clone(),
                })
                .await
                .map_err(|e| {
                    ServerError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "plugin {plugin_id}: cannot take over the recorded {} call: {e}",
                            flight.method
                        ),
                    )
                })?;
            }
        }
        flight.record = self.state().snapshot().csi_controller_op(&plugin_id);
        match &flight.record {
            Some(r) if r.owner == me && r.term == term && r.deadline == deadline => Ok(()),
            _ => Err(ServerError::new(
                ErrorCode::Unavailable,
                format!("plugin {plugin_id}: the {} call's record changed under this server; not sending", flight.method),
            )),
        }
    }

    /// Clears the record after a definite answer (only ours, in our term).
    async fn end_record(&self, flight: &Flight, me: u64, term: u64) {
        let Some(rec) = &flight.record else { return };
        if let Err(e) = self
            .apply(Command::CsiControllerOpEnd {
                plugin_id: flight.plugin_id.clone(),
                op_id: rec.id.clone(),
                owner: me,
                term,
            })
            .await
        {
            tracing::warn!(plugin_id = %flight.plugin_id, op = %rec.id, error = %e,
                "cannot clear a finished controller call; the next leader resolves it");
        }
    }

    /// Gives up on the flight: clears its record unless a send may still be running (or its
    /// effect is unknown), in which case the record keeps why, for `volume status`.
    async fn give_up(&self, flight: &Flight, keep_record: bool, err: ServerError) -> ServerError {
        let me = self.node_id();
        let term = self.raft().stats().term;
        if !keep_record {
            self.end_record(flight, me, term).await;
            return err;
        }
        if let Some(rec) = flight
            .record
            .as_ref()
            .filter(|r| r.owner == me && r.term == term)
        {
            // Keep the deadline: only the reason changes.
            let _ = self
                .apply(Command::CsiControllerOpRenew {
                    plugin_id: flight.plugin_id.clone(),
                    op_id: rec.id.clone(),
                    expect_index: rec.modify_index,
                    owner: rec.owner,
                    term: rec.term,
                    now: now_nanos(),
                    deadline: rec.deadline,
                    controller_node_id: rec.controller_node_id.clone(),
                    attempts: flight.plan.attempts,
                    unresolved: true,
                    last_error: flight.plan.last_error.clone(),
                })
                .await;
        }
        ServerError::new(
            err.code,
            format!(
                "{}; the call may still be in flight at the plugin, so it stays recorded and is sent again before the plugin's next call",
                err.message
            ),
        )
    }
}

/// The error when no instance is left: each instance and why it was skipped or failed.
fn none_usable_after(plugin_id: &str, all: &[Candidate], plan: &CallPlan) -> ServerError {
    let marked: Vec<Candidate> = all
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if c.skipped.is_none() {
                c.skipped = plan
                    .failed
                    .iter()
                    .find(|(n, _)| *n == c.node.id)
                    .map(|(_, why)| why.clone());
            }
            c
        })
        .collect();
    none_usable(plugin_id, &marked)
}

/// A non-destructive call (validate, list): no record, no queue; the first usable instance
/// that answers (moving on when one fails to).
async fn send_read(
    transport: &dyn CsiTransport,
    snap: &StateSnapshot,
    plugin_id: &str,
    call: &CsiControllerCall,
    deadline: i64,
) -> Result<CsiControllerReply, ServerError> {
    let mut all = candidates(snap, plugin_id);
    let method = call.method();
    for candidate in &mut all {
        if candidate.skipped.is_some() {
            continue;
        }
        let node = Arc::clone(&candidate.node);
        let req = CsiControllerRequest {
            plugin_id: plugin_id.to_string(),
            deadline,
            call: call.clone(),
        };
        match transport.call(&node, req).await {
            Ok(reply) => return Ok(reply),
            Err(CallFailure::Plugin(e))
                if !matches!(
                    e.code,
                    CODE_UNAVAILABLE | CODE_ABORTED | CODE_DEADLINE_EXCEEDED
                ) =>
            {
                return Err(failure_error(plugin_id, method, &CallFailure::Plugin(e)));
            }
            Err(f) => {
                tracing::warn!(plugin_id, method, node = %node.id, error = %f, "controller instance failed a read; trying the next one");
                candidate.skipped = Some(f.to_string());
            }
        }
    }
    Err(none_usable(plugin_id, &all))
}
