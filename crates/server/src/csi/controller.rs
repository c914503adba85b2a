//! Controller calls, on the leader: which controller instance gets a call, and the serializer that
//! keeps destructive calls for one plugin from ever overlapping anywhere in the cluster.
//!
//! The serializer has two halves:
//! - in memory, one FIFO lock per plugin ([`tokio::sync::Mutex`] queues waiters in arrival order,
//!   and a waiter that gives up — its request was cancelled — simply leaves the queue);
//! - in Raft, the call itself ([`Command::CsiControllerOpBegin`] before it is sent,
//!   [`Command::CsiControllerOpEnd`] after it returned). The FSM refuses a second begin for the
//!   plugin, so even two servers that both believe they lead cannot both send. A leader that finds
//!   a recorded call (its predecessor died or lost leadership mid-call) first waits out that call's
//!   deadline — by then the client that carried it has given up on it — and sends it again (CSI
//!   calls are idempotent) before anything else goes to that plugin.
//!
//! Instances: the controller on the lowest node ID (sorted as strings, which is how Nomad's IDs
//! compare) among those whose last probe succeeded and whose node is `ready` — draining and
//! ineligible nodes still serve. Only an unreachable instance or `UNAVAILABLE` moves a call on to
//! the next one; `ABORTED` is retried on the same instance with exponential backoff.

use crate::endpoints::now_nanos;
use crate::error::ServerError;
use crate::server::Server;
use futures::future::BoxFuture;
use model::csi::CSIControllerOp;
use model::node::{Node, NodeStatus};
use model::wire::{CsiCallError, CsiControllerCall, CsiControllerReply, CsiControllerRequest};
use rpc::ErrorCode;
use state::{Command, StateSnapshot};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// gRPC codes (tonic's numbering), for deciding retries.
pub(crate) const CODE_NOT_FOUND: i32 = 5;
pub(crate) const CODE_FAILED_PRECONDITION: i32 = 9;
pub(crate) const CODE_ABORTED: i32 = 10;
pub(crate) const CODE_UNAVAILABLE: i32 = 14;
pub(crate) const CODE_DEADLINE_EXCEEDED: i32 = 4;

/// How long one controller call may take before the client gives up on it.
pub const CONTROLLER_CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// Slack on top of a recorded call's deadline before a new leader sends it again (clocks of the
/// servers and clients are not perfectly in step).
const DEADLINE_SLACK: Duration = Duration::from_secs(1);
/// `ABORTED` answers: first retry delay, its cap, and how many tries in all.
const ABORTED_BACKOFF_FIRST: Duration = Duration::from_millis(100);
const ABORTED_BACKOFF_MAX: Duration = Duration::from_secs(5);
const ABORTED_TRIES: u32 = 8;

/// Why a controller call failed.
#[derive(Debug, Clone)]
pub enum CallFailure {
    /// The client agent could not be reached, or did not answer in time.
    Unreachable(String),
    /// The plugin (or the client agent on its behalf) answered with an error.
    Plugin(CsiCallError),
}

impl std::fmt::Display for CallFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallFailure::Unreachable(m) => write!(f, "client unreachable: {m}"),
            CallFailure::Plugin(e) => write!(f, "{} (gRPC code {})", e.message, e.code),
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
}

/// The per-plugin FIFO locks of this server (meaningful only while it leads).
#[derive(Default)]
pub(crate) struct ControllerLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl ControllerLocks {
    fn of(&self, plugin_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(map.entry(plugin_id.to_string()).or_default())
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
                Some(n) if n.status != NodeStatus::Ready.as_str() => {
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

fn is_retryable_elsewhere(f: &CallFailure) -> bool {
    match f {
        CallFailure::Unreachable(_) => true,
        CallFailure::Plugin(e) => e.code == CODE_UNAVAILABLE,
    }
}

/// The server error for a failed call, keeping whether retrying later may help.
pub(crate) fn failure_error(plugin_id: &str, method: &str, f: &CallFailure) -> ServerError {
    let code = match f {
        CallFailure::Unreachable(_) => ErrorCode::Unavailable,
        CallFailure::Plugin(e) => match e.code {
            CODE_ABORTED | CODE_UNAVAILABLE | CODE_DEADLINE_EXCEEDED => ErrorCode::Unavailable,
            CODE_FAILED_PRECONDITION => ErrorCode::Conflict,
            CODE_NOT_FOUND => ErrorCode::NotFound,
            _ => ErrorCode::BadRequest,
        },
    };
    ServerError::new(code, format!("plugin {plugin_id}: {method} failed: {f}"))
}

impl Server {
    /// Makes a controller call for `plugin_id` (on the leader; callers forward first). Destructive
    /// calls wait their turn behind the plugin's FIFO lock and are recorded in Raft while in
    /// flight; `namespace`/`volume_id` say which volume the call is about (for the record and
    /// for the secrets a later resend needs).
    pub(crate) async fn csi_controller_call(
        &self,
        plugin_id: &str,
        namespace: &str,
        volume_id: &str,
        call: CsiControllerCall,
    ) -> Result<CsiControllerReply, ServerError> {
        let transport = self.csi_transport()?;
        if !call.is_destructive() {
            let snap = self.state().snapshot();
            return send_to_first(&*transport, &snap, plugin_id, &call, deadline_from_now())
                .await
                .map(|(r, _)| r);
        }
        let lock = self.csi_locks().of(plugin_id);
        let _turn = lock.lock().await;
        self.resolve_recorded(&*transport, plugin_id).await?;
        let snap = self.state().snapshot();
        let all = candidates(&snap, plugin_id);
        let Some(first) = all.iter().find(|c| c.skipped.is_none()) else {
            return Err(none_usable(plugin_id, &all));
        };
        let deadline = deadline_from_now();
        let op = CSIControllerOp {
            id: uuid::Uuid::new_v4().to_string(),
            plugin_id: plugin_id.to_string(),
            method: call.method().to_string(),
            controller_node_id: first.node.id.clone(),
            namespace: namespace.to_string(),
            volume_id: volume_id.to_string(),
            request: serde_json::to_value(call.without_secrets()).unwrap_or_default(),
            started_at: now_nanos(),
            deadline,
            create_index: 0,
        };
        self.apply(Command::CsiControllerOpBegin { op: op.clone() })
            .await?;
        let result = send_to_first(&*transport, &snap, plugin_id, &call, deadline).await;
        // If this fails the call stays recorded and the next leader (or the next call here)
        // resolves it; the answer we have is still the truth about this call.
        if let Err(e) = self
            .apply(Command::CsiControllerOpEnd {
                plugin_id: plugin_id.to_string(),
                op_id: op.id.clone(),
            })
            .await
        {
            tracing::warn!(plugin_id, op = %op.id, error = %e, "cannot clear a finished controller call; the next leader resolves it");
        }
        result.map(|(r, _)| r)
    }

    /// Resolves the plugin's recorded call, if any, in its turn (the volume watcher calls this
    /// on a new leader, so a call left in flight is settled even if nothing else comes for it).
    pub(crate) async fn csi_resolve_plugin(&self, plugin_id: &str) -> Result<(), ServerError> {
        let transport = self.csi_transport()?;
        let lock = self.csi_locks().of(plugin_id);
        let _turn = lock.lock().await;
        self.resolve_recorded(&*transport, plugin_id).await
    }

    /// Resolves a call recorded for the plugin by an earlier leader (or an earlier failed clear):
    /// waits out its deadline, sends it again, and clears it. Errors while it stays unresolved.
    async fn resolve_recorded(
        &self,
        transport: &dyn CsiTransport,
        plugin_id: &str,
    ) -> Result<(), ServerError> {
        let Some(op) = self.state().snapshot().csi_controller_op(plugin_id) else {
            return Ok(());
        };
        let wait_until = op.deadline.saturating_add(nanos(DEADLINE_SLACK));
        let left = wait_until.saturating_sub(now_nanos());
        if left > 0 {
            tracing::info!(plugin_id, op = %op.id, method = %op.method, wait_ms = left / 1_000_000,
                "a controller call recorded by an earlier leader may still be in flight; waiting out its deadline");
            tokio::time::sleep(Duration::from_nanos(u64::try_from(left).unwrap_or(0))).await;
        }
        let mut call: CsiControllerCall =
            serde_json::from_value(op.request.clone()).map_err(|e| {
                ServerError::internal(format!("recorded controller call {}: {e}", op.id))
            })?;
        let snap = self.state().snapshot();
        if let Some(v) = snap.csi_volume(&op.namespace, &op.volume_id) {
            call.set_secrets(v.secrets.clone());
        }
        match send_to_first(transport, &snap, plugin_id, &call, deadline_from_now()).await {
            Ok(_) => {
                tracing::info!(plugin_id, op = %op.id, method = %op.method, "resent an unfinished controller call");
            }
            Err(e) if e.code == ErrorCode::Unavailable => return Err(e),
            // A final answer (e.g. NotFound for a delete that had happened): resolved either way.
            Err(e) => {
                tracing::info!(plugin_id, op = %op.id, error = %e, "an unfinished controller call resolved with an error")
            }
        }
        self.apply(Command::CsiControllerOpEnd {
            plugin_id: plugin_id.to_string(),
            op_id: op.id.clone(),
        })
        .await?;
        Ok(())
    }
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn deadline_from_now() -> i64 {
    now_nanos().saturating_add(nanos(CONTROLLER_CALL_TIMEOUT))
}

/// Sends the call to the first usable instance, moving on only when an instance is unreachable
/// or unavailable, and retrying `ABORTED` with backoff. Returns the reply and the node that gave it.
async fn send_to_first(
    transport: &dyn CsiTransport,
    snap: &StateSnapshot,
    plugin_id: &str,
    call: &CsiControllerCall,
    deadline: i64,
) -> Result<(CsiControllerReply, String), ServerError> {
    let mut all = candidates(snap, plugin_id);
    if !all.iter().any(|c| c.skipped.is_none()) {
        return Err(none_usable(plugin_id, &all));
    }
    let method = call.method();
    let usable: Vec<usize> = (0..all.len())
        .filter(|&i| all[i].skipped.is_none())
        .collect();
    for i in usable {
        let node = Arc::clone(&all[i].node);
        let req = CsiControllerRequest {
            plugin_id: plugin_id.to_string(),
            deadline,
            call: call.clone(),
        };
        let mut delay = ABORTED_BACKOFF_FIRST;
        let mut tries = 0;
        let failure = loop {
            tries += 1;
            match transport.call(&node, req.clone()).await {
                Ok(reply) => return Ok((reply, node.id.clone())),
                Err(CallFailure::Plugin(e))
                    if e.code == CODE_ABORTED
                        && tries < ABORTED_TRIES
                        && now_nanos().saturating_add(nanos(delay)) < deadline =>
                {
                    tracing::debug!(plugin_id, method, node = %node.id, ?delay, "ABORTED; retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(ABORTED_BACKOFF_MAX);
                }
                Err(f) => break f,
            }
        };
        if !is_retryable_elsewhere(&failure) {
            return Err(failure_error(plugin_id, method, &failure));
        }
        tracing::warn!(plugin_id, method, node = %node.id, error = %failure, "controller instance failed; trying the next one");
        all[i].skipped = Some(failure.to_string());
    }
    Err(none_usable(plugin_id, &all))
}
