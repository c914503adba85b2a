//! Nodes: a client registers (or re-registers) itself; the evaluations that gives its system jobs and
//! its own allocations follow in a second entry, as in Nomad.

use super::{new_id, now_nanos};
use crate::error::ServerError;
use crate::server::Server;
use model::eval::{EvalStatus, Evaluation, EVAL_TRIGGER_NODE_UPDATE};
use model::node::{Node, NodeStatus};
use model::wire::{
    AllocGetAllocsRequest, AllocGetAllocsResponse, NodeClientAllocsRequest,
    NodeClientAllocsResponse, NodeRegisterRequest, NodeUpdateAllocRequest, NodeUpdateResponse,
    NodeUpdateStatusRequest,
};
use model::JobType;
use state::{Command, StateSnapshot};
use std::collections::BTreeMap;

impl Server {
    /// `Node.Register`: stores the node (forwarded to the leader when this server does not lead),
    /// then creates node-update evaluations for its system jobs and the jobs with allocations on it
    /// when it is new or came back ready.
    pub async fn node_register(&self, node: Node) -> Result<NodeUpdateResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<model::wire::methods::NodeRegister>(
                    &leader,
                    &NodeRegisterRequest { node },
                )
                .await
            }
            None => self.node_register_local(node).await,
        }
    }

    pub(crate) async fn node_register_local(
        &self,
        mut node: Node,
    ) -> Result<NodeUpdateResponse, ServerError> {
        node.canonicalize();
        node.validate()
            .map_err(|errs| ServerError::bad_request(errs.to_string().trim_end().to_string()))?;
        if node.secret_id.is_empty() {
            return Err(ServerError::bad_request("missing node secret ID"));
        }
        let original = self.state().snapshot().node(&node.id);
        // Nomad: a node ID is owned by the secret it first registered with; another secret is
        // someone else trying to take the node over.
        if let Some(o) = &original {
            if o.secret_id != node.secret_id {
                return Err(ServerError::new(
                    rpc::ErrorCode::PermissionDenied,
                    "node secret ID does not match. Not registering node.",
                ));
            }
        }
        let status_changed = original.as_ref().is_none_or(|o| o.status != node.status);
        if status_changed || node.status_updated_at == 0 {
            node.status_updated_at = now_nanos() / 1_000_000_000;
        }
        let wants_evals = should_create_node_evals(original.as_deref(), &node);
        let node_id = node.id.clone();
        let down = node.status == NodeStatus::Down;
        let resp = self.apply(Command::NodeRegister { node }).await?;
        let ttl = self.reset_heartbeat(&node_id, down);
        let mut index = resp.index;
        if wants_evals {
            let snap = self.state().snapshot();
            if let Some(stored) = snap.node(&node_id) {
                let evals = node_evals(&snap, &stored, now_nanos());
                if !evals.is_empty() {
                    index = self.apply(Command::EvalUpsert { evals }).await?.index;
                }
            }
        }
        Ok(self.node_update_response(index, ttl))
    }

    fn node_update_response(&self, index: u64, ttl: std::time::Duration) -> NodeUpdateResponse {
        NodeUpdateResponse {
            heartbeat_ttl: model::Duration::from(ttl),
            servers: self.peers(),
            index,
        }
    }

    /// On the leader: restarts the node's heartbeat timer with a TTL scaled to the cluster size
    /// (Nomad's formula), or stops it for a node that is down. Returns the TTL to hand the node.
    fn reset_heartbeat(&self, node_id: &str, down: bool) -> std::time::Duration {
        tracing::trace!(node_id, down, "heartbeat timer reset");
        let cfg = self.config();
        if down {
            self.leadership().node_forget(node_id);
            return cfg.min_heartbeat_ttl;
        }
        self.leadership().node_heartbeat_scaled(
            node_id,
            cfg.max_heartbeats_per_second,
            cfg.min_heartbeat_ttl,
            || self.state().snapshot().node_count(),
        )
    }

    /// On the leader: writes the node's new status and, when the change calls for it (Nomad's
    /// `ShouldDrainNode` and `nodeStatusTransitionRequiresEval`), the node-update evaluations of its
    /// jobs in a second entry — so a node written down has its allocations marked lost and
    /// replaced. Returns the last index written.
    pub(crate) async fn node_set_status_local(
        &self,
        node: &Node,
        status: &NodeStatus,
    ) -> Result<u64, ServerError> {
        let cmd = Command::NodeUpdateStatus {
            node_id: node.id.clone(),
            status: status.clone(),
            updated_at: now_nanos() / 1_000_000_000,
        };
        let mut index = self.apply(cmd).await?.index;
        if status_change_wants_evals(&node.status, status) {
            let snap = self.state().snapshot();
            if let Some(stored) = snap.node(&node.id) {
                let evals = node_evals(&snap, &stored, now_nanos());
                if !evals.is_empty() {
                    index = self.apply(Command::EvalUpsert { evals }).await?.index;
                }
            }
        }
        Ok(index)
    }

    /// On the leader, when the node's heartbeat deadline passed: writes it down, with evaluations
    /// for its jobs — or `disconnected` first when some of its allocations' groups tolerate a
    /// disconnect (`disconnect.lost_after`, `max_client_disconnect`): then it goes down once the
    /// longest of those has passed without a heartbeat. Nothing when it is gone or already down.
    /// Returns the status written, if any.
    pub(crate) async fn node_mark_down(
        &self,
        node_id: &str,
    ) -> Result<Option<NodeStatus>, ServerError> {
        let snap = self.state().snapshot();
        let Some(node) = snap.node(node_id) else {
            return Ok(None);
        };
        if node.status == NodeStatus::Down {
            return Ok(None);
        }
        if node.status == NodeStatus::Disconnected {
            // Its timer may be a new leader's failover TTL: it goes down only once its
            // `lost_after` has passed since it was written disconnected.
            if let Some(window) = disconnect_window(&snap, node_id) {
                let window_ns = i64::try_from(window.as_nanos()).unwrap_or(i64::MAX);
                let left = node
                    .status_updated_at
                    .saturating_mul(1_000_000_000)
                    .saturating_add(window_ns)
                    .saturating_sub(now_nanos());
                if left > 0 {
                    let left = std::time::Duration::from_nanos(left.unsigned_abs());
                    self.leadership().node_heartbeat(node_id, left);
                    return Ok(None);
                }
            }
        } else if let Some(window) = disconnect_window(&snap, node_id) {
            self.node_set_status_local(&node, &NodeStatus::Disconnected)
                .await?;
            self.leadership().node_heartbeat(node_id, window);
            return Ok(Some(NodeStatus::Disconnected));
        }
        self.node_set_status_local(&node, &NodeStatus::Down).await?;
        Ok(Some(NodeStatus::Down))
    }
}

/// For each reported allocation the servers hold as `unknown` (its node was disconnected) that
/// the client now reports running while its replacement still runs: the copy to stop, marked so.
fn reconnect_losers(
    snap: &state::StateSnapshot,
    updates: &[model::wire::AllocClientUpdate],
    now: i64,
) -> Vec<state::AllocStop> {
    let mut out = Vec::new();
    for u in updates {
        let Some(original) = snap.alloc(&u.id) else {
            continue;
        };
        if original.client_status != model::alloc::ClientStatus::Unknown
            || u.client_status != model::alloc::ClientStatus::Running
            || original.server_terminal()
        {
            continue;
        }
        let Some(replacement) = snap
            .alloc(&original.next_allocation)
            .filter(|r| !r.server_terminal() && !r.client_terminal())
        else {
            continue;
        };
        let strategy = original
            .job
            .as_deref()
            .and_then(|j| j.task_groups.iter().find(|g| g.name == original.task_group))
            .map_or("best_score", |g| g.disconnect_reconcile())
            .to_string();
        let mut reported = (*original).clone();
        reported.client_status.clone_from(&u.client_status);
        let loser = if scheduler::reconnect_keeps_original(&strategy, &reported, &replacement) {
            replacement
        } else {
            original
        };
        // A stop, not a copy: what the loser's client reported since `snap` stays.
        out.push(state::AllocStop {
            alloc_id: loser.id.clone(),
            desired_status: model::alloc::DesiredStatus::Stop,
            desired_description: scheduler::DESC_RECONNECTED.into(),
            client_status: None,
            followup_eval_id: String::new(),
            modify_time: now,
            preempted_by: String::new(),
        });
    }
    out
}

/// The longest `lost_after` among the groups of the node's live allocations, if any tolerates
/// a disconnect.
fn disconnect_window(snap: &state::StateSnapshot, node_id: &str) -> Option<std::time::Duration> {
    snap.allocs_by_node(node_id)
        .iter()
        .filter(|a| !a.server_terminal() && !a.client_terminal())
        .filter_map(|a| {
            let job = a.job.as_deref()?;
            let tg = job.task_groups.iter().find(|g| g.name == a.task_group)?;
            tg.disconnect_lost_after()
        })
        .max()
        .map(|d| std::time::Duration::from_nanos(u64::try_from(d.0).unwrap_or(0)))
}

/// Nomad's `ShouldDrainNode(new)` or `nodeStatusTransitionRequiresEval(new, old)`: a node going down
/// or disconnected, coming back from down or disconnected, or done initializing.
fn status_change_wants_evals(old: &NodeStatus, new: &NodeStatus) -> bool {
    use NodeStatus::{Disconnected, Down, Initializing, Ready};
    if old == new {
        return false;
    }
    matches!(new, Down | Disconnected)
        || *old == Disconnected
        || (matches!(old, Initializing | Down) && *new == Ready)
}

/// Nomad's `shouldCreateNodeEval`: a new node, one whose status changed into ready, or a ready
/// one whose fields the feasibility checks read changed (its dynamic metadata, say).
fn should_create_node_evals(original: Option<&Node>, node: &Node) -> bool {
    let ready = node.status == NodeStatus::Ready;
    match original {
        None => ready,
        Some(o) => ready && (o.status != node.status || feasibility_changed(o, node)),
    }
}

/// Whether what constraints, drivers, host volumes and devices are checked against differs
/// (Nomad's field list; resources are left to blocked evaluations).
fn feasibility_changed(a: &Node, b: &Node) -> bool {
    let devices = |n: &Node| n.node_resources.as_ref().map(|r| r.devices.clone());
    a.datacenter != b.datacenter
        || a.name != b.name
        || a.node_class != b.node_class
        || a.attributes != b.attributes
        || a.meta != b.meta
        || a.drivers != b.drivers
        || a.host_volumes != b.host_volumes
        || devices(a).unwrap_or_default() != devices(b).unwrap_or_default()
}

/// Nomad's `createNodeEvals`: one evaluation per job with allocations on the node, and one per
/// system or sysbatch job that may run in the node's datacenter and pool.
pub(super) fn node_evals(snap: &StateSnapshot, node: &Node, now: i64) -> Vec<Evaluation> {
    let mut jobs: BTreeMap<(String, String), std::sync::Arc<model::Job>> = BTreeMap::new();
    for alloc in snap.allocs_by_node(&node.id) {
        if let Some(job) = snap.job(&alloc.namespace, &alloc.job_id) {
            jobs.insert((alloc.namespace.clone(), alloc.job_id.clone()), job);
        }
    }
    for job in snap.jobs(None, "") {
        let system = matches!(job.kind(), JobType::System | JobType::Sysbatch);
        if system && !job.stop && runs_on(&job, node) {
            let ns = job.namespace.clone().unwrap_or_default();
            jobs.insert((ns, job.id.clone()), job);
        }
    }
    jobs.into_iter()
        .map(|((ns, job_id), job)| Evaluation {
            id: new_id(),
            namespace: ns,
            priority: job.priority.unwrap_or(model::job::DEFAULT_PRIORITY),
            eval_type: job.kind().as_str().into(),
            triggered_by: EVAL_TRIGGER_NODE_UPDATE.into(),
            job_id,
            job_modify_index: job.job_modify_index.unwrap_or(0),
            node_id: node.id.clone(),
            node_modify_index: node.modify_index,
            status: EvalStatus::Pending,
            create_time: now,
            modify_time: now,
            ..Evaluation::default()
        })
        .collect()
}

/// Whether a system job targets the node's datacenter (`*` wildcards) and node pool.
fn runs_on(job: &model::Job, node: &Node) -> bool {
    let pool_ok = job
        .node_pool
        .as_deref()
        .is_none_or(|p| p == model::node::NODE_POOL_ALL || p == node.node_pool);
    let dc_ok = job.datacenters.is_empty()
        || job
            .datacenters
            .iter()
            .any(|pattern| glob_match(pattern, &node.datacenter));
    pool_ok && dc_ok
}

/// `*` matches any run of characters; everything else matches itself.
fn glob_match(pattern: &str, text: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == text,
        Some((head, rest)) => {
            let Some(tail) = text.strip_prefix(head) else {
                return false;
            };
            (0..=tail.len())
                .filter(|i| tail.is_char_boundary(*i))
                .any(|i| glob_match(rest, &tail[i..]))
        }
    }
}

/// What clients call after registering: heartbeats, the blocking query for their allocations, and
/// reports of how their allocations run.
impl Server {
    /// `Node.UpdateStatus`: the heartbeat. A follower forwards it to the leader, whose timer it
    /// resets. An unknown node is `NotFound`, which makes the client register again (after a server
    /// lost its state); a raft write happens only when the status changes — a down node that
    /// heartbeats again is written ready (with evaluations for its jobs).
    pub async fn node_update_status(
        &self,
        req: NodeUpdateStatusRequest,
    ) -> Result<NodeUpdateResponse, ServerError> {
        if let Some(leader) = self.forward_target().await? {
            return self
                .forward::<model::wire::methods::NodeUpdateStatus>(&leader, &req)
                .await;
        }
        let node = self.known_node(&req.node_id, &req.secret_id)?;
        let was_down = node.status == NodeStatus::Down;
        let status = match req.status {
            None if was_down => NodeStatus::Ready,
            None => node.status.clone(),
            Some(s) => s,
        };
        if !status.is_known() {
            return Err(ServerError::bad_request(format!(
                "Status: unknown node status {:?}; expected one of {}",
                status.as_str(),
                NodeStatus::NAMES.join(", ")
            )));
        }
        let down = status == NodeStatus::Down;
        let ttl = self.reset_heartbeat(&node.id, down);
        let mut index = self.state().snapshot().table_index(state::Table::Nodes);
        if node.status != status {
            index = self.node_set_status_local(&node, &status).await?;
        }
        Ok(self.node_update_response(index, ttl))
    }

    /// `Node.GetClientAllocs`: the IDs of every allocation on the node with their
    /// `AllocModifyIndex` (Nomad's shape; the client fetches what changed with `Alloc.GetAllocs`),
    /// answered once an allocation on this node changed after `min_index` or the wait ran out;
    /// the index is the node's own (the last change to its allocations). Never an empty list
    /// for an unknown node: that would tell its client to destroy everything it runs.
    pub async fn node_get_client_allocs(
        &self,
        req: NodeClientAllocsRequest,
    ) -> Result<NodeClientAllocsResponse, ServerError> {
        self.known_node(&req.node_id, &req.secret_id)?;
        let wait = std::time::Duration::from_nanos(u64::try_from(req.wait.as_nanos()).unwrap_or(0))
            .min(CLIENT_QUERY_WAIT_MAX);
        let deadline = tokio::time::Instant::now() + wait;
        // Only a write that touched this node's allocations wakes the query (Nomad's per-node
        // watch), not every allocation change in the cluster.
        let snap = self
            .state()
            .wait_for_node(&req.node_id, req.min_index, deadline)
            .await;
        let allocs = snap
            .allocs_by_node(&req.node_id)
            .iter()
            .map(|a| (a.id.clone(), a.alloc_modify_index))
            .collect();
        Ok(NodeClientAllocsResponse {
            allocs,
            index: snap.node_alloc_index(&req.node_id).max(1),
        })
    }

    /// `Alloc.GetAllocs`: the node's own allocations among `alloc_ids`, in full, from a state at
    /// least as new as `min_index` (a server further behind waits up to
    /// [`ALLOC_FETCH_WAIT_MAX`] and then answers `Unavailable`, so the client asks again). IDs
    /// that are gone or on another node are left out.
    pub async fn alloc_get_allocs(
        &self,
        req: AllocGetAllocsRequest,
    ) -> Result<AllocGetAllocsResponse, ServerError> {
        self.known_node(&req.node_id, &req.secret_id)?;
        if req.alloc_ids.len() > ALLOC_FETCH_IDS_MAX {
            return Err(ServerError::bad_request(format!(
                "AllocIDs names {} allocations; ask for at most {ALLOC_FETCH_IDS_MAX} at a time",
                req.alloc_ids.len()
            )));
        }
        let deadline = tokio::time::Instant::now() + ALLOC_FETCH_WAIT_MAX;
        let snap = self
            .state()
            .wait_for(&[], req.min_index.saturating_sub(1), deadline)
            .await;
        if snap.index() < req.min_index {
            return Err(ServerError::new(
                rpc::ErrorCode::Unavailable,
                format!(
                "this server has applied up to index {}, the allocations were asked for at {}; \
                 ask again",
                snap.index(),
                req.min_index
            ),
            ));
        }
        let allocs = req
            .alloc_ids
            .iter()
            .filter_map(|id| snap.alloc(id))
            .filter(|a| a.node_id == req.node_id)
            .map(|a| (*a).clone())
            .collect();
        Ok(AllocGetAllocsResponse {
            allocs,
            index: snap.index(),
        })
    }

    /// `Node.UpdateAlloc`: the client's report, applied to the allocations that exist; an allocation
    /// that newly failed gets an `alloc-failure` evaluation of its job, so the scheduler can
    /// reschedule it.
    pub async fn node_update_alloc(
        &self,
        mut req: NodeUpdateAllocRequest,
    ) -> Result<u64, ServerError> {
        if let Some(leader) = self.forward_target().await? {
            return self
                .forward::<model::wire::methods::NodeUpdateAlloc>(&leader, &req)
                .await;
        }
        self.known_node(&req.node_id, &req.secret_id)?;
        let snap = self.state().snapshot();
        // A node reports only its own allocations: another node's are dropped, whatever the
        // caller's secret proves.
        for u in &req.allocs {
            tracing::debug!(node = %req.node_id, alloc_id = %u.id, client_status = %u.client_status,
                "allocation update from its client");
        }
        let before = req.allocs.len();
        req.allocs
            .retain(|u| snap.alloc(&u.id).is_none_or(|a| a.node_id == req.node_id));
        if req.allocs.len() < before {
            tracing::warn!(
                node = %req.node_id,
                dropped = before - req.allocs.len(),
                "a node reported allocations that are not its own; ignored"
            );
        }
        let now = now_nanos();
        let mut evals: BTreeMap<(String, String), Evaluation> = BTreeMap::new();
        for update in &req.allocs {
            let Some(existing) = snap.alloc(&update.id) else {
                continue;
            };
            let newly_failed = update.client_status == model::alloc::ClientStatus::Failed
                && existing.client_status != update.client_status;
            let Some(job) = existing.job.as_ref().filter(|_| newly_failed) else {
                continue;
            };
            evals
                .entry((existing.namespace.clone(), existing.job_id.clone()))
                .or_insert_with(|| Evaluation {
                    id: new_id(),
                    namespace: existing.namespace.clone(),
                    priority: job.priority.unwrap_or(model::job::DEFAULT_PRIORITY),
                    eval_type: job.job_type.clone().unwrap_or_default(),
                    triggered_by: model::eval::EVAL_TRIGGER_RETRY_FAILED_ALLOC.into(),
                    job_id: existing.job_id.clone(),
                    status: EvalStatus::Pending,
                    create_time: now,
                    modify_time: now,
                    ..Evaluation::default()
                });
        }
        // A copy coming back from a disconnected client while its replacement runs: the copy
        // the group's `disconnect.reconcile` drops is stopped first, so the two never both read
        // as running copies the servers mean to keep.
        let losers = reconnect_losers(&snap, &req.allocs, now);
        if !losers.is_empty() {
            self.apply(Command::AllocStop { stops: losers }).await?;
        }
        // Folded with other clients' reports into one entry per window (Nomad's 50 ms batch).
        self.alloc_batcher()
            .submit(self, req.allocs, evals.into_values().collect())
            .await
    }

    /// The node, if it exists and the secret matches; an empty secret matches nothing.
    pub(crate) fn known_node(
        &self,
        node_id: &str,
        secret_id: &str,
    ) -> Result<std::sync::Arc<Node>, ServerError> {
        let node = self
            .state()
            .snapshot()
            .node(node_id)
            .ok_or_else(|| ServerError::not_found(format!("node not found: {node_id}")))?;
        if node.secret_id.is_empty() || node.secret_id != secret_id {
            return Err(ServerError::new(
                rpc::ErrorCode::PermissionDenied,
                "Permission denied: the node secret does not match",
            ));
        }
        Ok(node)
    }
}

/// The longest a client's allocation query may wait on the server.
const CLIENT_QUERY_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(300);
/// How long `Alloc.GetAllocs` waits for this server to reach the index asked for.
const ALLOC_FETCH_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(5);
/// The most allocations one `Alloc.GetAllocs` names (the client asks in chunks).
pub const ALLOC_FETCH_IDS_MAX: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datacenter_wildcards() {
        assert!(glob_match("dc1", "dc1"));
        assert!(!glob_match("dc1", "dc2"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("us-*", "us-east-1"));
        assert!(glob_match("*-1", "us-east-1"));
        assert!(glob_match("u*t*1", "us-east-1"));
        assert!(!glob_match("eu-*", "us-east-1"));
    }

    #[test]
    fn node_evals_are_made_for_new_or_newly_ready_nodes() {
        let mut n = Node {
            status: "initializing".into(),
            ..Node::default()
        };
        assert!(!should_create_node_evals(None, &n));
        n.status = "ready".into();
        assert!(should_create_node_evals(None, &n));
        assert!(!should_create_node_evals(Some(&n.clone()), &n));
        let down = Node {
            status: "down".into(),
            ..n.clone()
        };
        assert!(should_create_node_evals(Some(&down), &n));
        let mut with_meta = n.clone();
        with_meta.meta.insert("role".into(), "db".into());
        assert!(
            should_create_node_evals(Some(&n), &with_meta),
            "a ready node's meta changed"
        );
        let mut initializing = with_meta.clone();
        initializing.status = "initializing".into();
        assert!(!should_create_node_evals(Some(&n), &initializing));
    }

    #[test]
    fn status_changes_that_evaluate_the_nodes_jobs() {
        assert!(status_change_wants_evals(&"ready".into(), &"down".into()));
        assert!(status_change_wants_evals(&"down".into(), &"ready".into()));
        assert!(status_change_wants_evals(
            &"initializing".into(),
            &"ready".into()
        ));
        assert!(status_change_wants_evals(
            &"ready".into(),
            &"disconnected".into()
        ));
        assert!(status_change_wants_evals(
            &"disconnected".into(),
            &"ready".into()
        ));
        assert!(!status_change_wants_evals(&"ready".into(), &"ready".into()));
        assert!(!status_change_wants_evals(&"down".into(), &"down".into()));
        assert!(!status_change_wants_evals(
            &"ready".into(),
            &"initializing".into()
        ));
    }
}
