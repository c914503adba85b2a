//! The reconciler of service and batch jobs: compares the job with its allocations and decides
//! what to stop, place, update in place or destructively, migrate and reschedule, and what
//! deployment the changes belong to (Nomad's `allocReconciler`). It picks no nodes: placements are
//! names waiting for the [`crate::stack::Stack`].
//!
//! Per task group: classify the allocations (untainted, lost with their node, migrating off a
//! draining node, failed and due for rescheduling now or later); stop old canaries; create the
//! deployment if the group changes under an `update` block; place canaries; stop what exceeds the
//! count (highest indexes first, so the lowest are kept); replace lost, migrating and
//! rescheduled allocations under the same name; update in place or destructively (at most
//! `max_parallel` unhealthy-or-pending at a time while a deployment runs); place what is missing
//! at the lowest free indexes.

pub(crate) mod reschedule;
pub(crate) mod update;

mod group;
pub use group::keep_original;

use crate::rng::Rng;
use crate::time::format_unix_nanos;
use model::alloc::{Allocation, ClientStatus};
use model::deployment::{
    Deployment, DeploymentStatus, DeploymentStatusUpdate, DEPLOYMENT_DESC_NEWER_JOB,
    DEPLOYMENT_DESC_STOPPED_JOB,
};
use model::eval::{EvalStatus, Evaluation, EVAL_TRIGGER_RETRY_FAILED_ALLOC};
use model::job::Job;
use model::node::{Node, NodeStatus};
use model::plan::DesiredUpdates;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

pub(crate) const DESC_NOT_NEEDED: &str = "alloc not needed due to job update";
pub(crate) const DESC_MIGRATING: &str = "alloc is being migrated";
pub(crate) const DESC_UPDATING: &str = "alloc is being updated due to job update";
pub(crate) const DESC_LOST: &str = "alloc is lost since its node is down";
/// Nomad's text for the copy a reconnect makes redundant.
pub const DESC_RECONNECTED: &str = "alloc not needed due to disconnected client reconnect";
pub(crate) const DESC_RESCHEDULED: &str = "alloc was rescheduled because it failed";
pub(crate) const DESC_NODE_TAINTED: &str = "alloc not needed as node is tainted";
pub(crate) const DESC_FOLLOWUP_EVAL: &str = "created for delayed rescheduling";

/// Node ID → the node, `None` when it is gone.
pub(crate) type NodeMap = HashMap<String, Option<Arc<Node>>>;

/// What the reconciler reads.
pub(crate) struct Input<'a> {
    /// `None` when the job is gone (deregistered and purged).
    pub(crate) job: Option<&'a Job>,
    pub(crate) batch: bool,
    /// Every allocation of the job, terminal ones included.
    pub(crate) allocs: &'a [Arc<Allocation>],
    /// The nodes of those allocations.
    pub(crate) nodes: &'a NodeMap,
    pub(crate) deployment: Option<&'a Deployment>,
    pub(crate) eval: &'a Evaluation,
    pub(crate) now: i64,
}

/// An allocation to stop.
#[derive(Debug, Clone)]
pub(crate) struct Stop {
    pub(crate) alloc: Arc<Allocation>,
    pub(crate) desc: &'static str,
    /// Set to `lost` for allocations on down nodes.
    pub(crate) client_status: Option<ClientStatus>,
}

/// An allocation to place.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    pub(crate) tg: String,
    pub(crate) name: String,
    /// The allocation this one replaces.
    pub(crate) previous: Option<Arc<Allocation>>,
    /// A reschedule of a failed allocation (carries its tracker, avoids its node).
    pub(crate) reschedule: bool,
    pub(crate) canary: bool,
    /// A destructive update: `previous` is stopped with it, and kept if no node takes this one.
    pub(crate) destructive: bool,
}

/// What the reconciler decided.
#[derive(Debug, Default)]
pub(crate) struct Results {
    pub(crate) stops: Vec<Stop>,
    pub(crate) places: Vec<Place>,
    pub(crate) inplace: Vec<Arc<Allocation>>,
    /// Failed allocations marked with their follow-up evaluation.
    pub(crate) attribute_updates: Vec<Allocation>,
    /// Delayed reschedules (`WaitUntil`).
    pub(crate) followup_evals: Vec<Evaluation>,
    /// A deployment the plan creates or changes.
    pub(crate) deployment: Option<Deployment>,
    /// The active deployment new and updated allocations join; empty when none.
    pub(crate) deployment_id: String,
    pub(crate) deployment_updates: Vec<DeploymentStatusUpdate>,
    pub(crate) desired: BTreeMap<String, DesiredUpdates>,
}

/// Reconciles the job with its allocations. `ids` makes deployment and evaluation IDs.
pub(crate) fn reconcile(input: &Input, ids: &mut Rng) -> Results {
    let mut r = Reconciler::new(input);
    match input.job {
        Some(job) if !job.stop => {
            r.pick_deployment(job);
            let mut by_group: BTreeMap<&str, Vec<Arc<Allocation>>> = BTreeMap::new();
            for a in input.allocs {
                by_group.entry(&a.task_group).or_default().push(a.clone());
            }
            for tg in &job.task_groups {
                let allocs = by_group.remove(tg.name.as_str()).unwrap_or_default();
                r.compute_group(job, tg, &allocs, ids);
            }
            for (name, allocs) in by_group {
                r.stop_group(name, &allocs);
            }
            r.finish_deployment();
        }
        _ => r.stop_everything(),
    }
    r.results
}

pub(crate) struct Reconciler<'a> {
    input: &'a Input<'a>,
    /// The deployment of the current job version (existing or created here).
    current: Option<Deployment>,
    /// `current` is new, or changed, and goes into the plan.
    current_written: bool,
    created: bool,
    /// A deployment of an older version cancelled here.
    old: Option<Deployment>,
    paused: bool,
    failed: bool,
    complete: bool,
    pub(crate) results: Results,
}

impl<'a> Reconciler<'a> {
    fn new(input: &'a Input<'a>) -> Reconciler<'a> {
        Reconciler {
            input,
            current: None,
            current_written: false,
            created: false,
            old: None,
            paused: false,
            failed: false,
            complete: true,
            results: Results::default(),
        }
    }

    /// Nomad's `cancelUnneededDeployments`: a deployment of another job version is cancelled; a
    /// successful one is done with.
    fn pick_deployment(&mut self, job: &Job) {
        // A multiregion job's version with no deployment yet gets a pending one: nothing is
        // placed, in any group, until its peer regions let it run.
        let same = |d: &Deployment| {
            d.job_create_index == job.create_index.unwrap_or(0)
                && d.job_version == job.version.unwrap_or(0)
        };
        if job.is_multiregion() && !self.input.deployment.is_some_and(&same) {
            self.paused = true;
        }
        let Some(d) = self.input.deployment.cloned() else {
            return;
        };
        let same = same(&d);
        if !same {
            if d.is_active() {
                self.cancel(&d, DEPLOYMENT_DESC_NEWER_JOB);
            }
            // Active or not (a failed rollout's canaries too): its unpromoted canaries go.
            self.old = Some(d);
            return;
        }
        if d.status == DeploymentStatus::Successful {
            return;
        }
        self.paused = matches!(
            d.status,
            DeploymentStatus::Paused | DeploymentStatus::Pending
        );
        self.failed = d.status == DeploymentStatus::Failed;
        self.current = Some(d);
    }

    fn cancel(&mut self, d: &Deployment, desc: &str) {
        self.results
            .deployment_updates
            .push(DeploymentStatusUpdate {
                deployment_id: d.id.clone(),
                status: DeploymentStatus::Cancelled,
                status_description: desc.into(),
            });
    }

    fn current_id(&self) -> &str {
        match &self.current {
            Some(d) if d.is_active() => &d.id,
            _ => "",
        }
    }

    fn stop(&mut self, alloc: &Arc<Allocation>, desc: &'static str, lost: bool) {
        if alloc.server_terminal() {
            return;
        }
        self.results.stops.push(Stop {
            alloc: alloc.clone(),
            desc,
            client_status: lost.then_some(ClientStatus::Lost),
        });
        self.desired(&alloc.task_group).stop += 1;
    }

    fn desired(&mut self, tg: &str) -> &mut DesiredUpdates {
        self.results.desired.entry(tg.to_string()).or_default()
    }

    /// The job is stopped or gone: stop every allocation (lost ones as lost).
    fn stop_everything(&mut self) {
        if let Some(d) = self.input.deployment {
            if d.is_active() {
                self.cancel(d, DEPLOYMENT_DESC_STOPPED_JOB);
            }
        }
        for a in self.input.allocs {
            let lost = !a.client_terminal()
                && node_taint(self.input.nodes, &a.node_id, false) == Taint::Lost;
            self.stop(a, if lost { DESC_LOST } else { DESC_NOT_NEEDED }, lost);
        }
    }

    /// A task group the job no longer has: stop its allocations.
    fn stop_group(&mut self, _name: &str, allocs: &[Arc<Allocation>]) {
        for a in allocs {
            let lost = !a.client_terminal()
                && node_taint(self.input.nodes, &a.node_id, false) == Taint::Lost;
            self.stop(a, if lost { DESC_LOST } else { DESC_NOT_NEEDED }, lost);
        }
    }

    /// Marks the deployment successful when every group is done, and describes a new one.
    fn finish_deployment(&mut self) {
        if let Some(d) = &mut self.current {
            if self.created && d.status == DeploymentStatus::Running {
                d.status_description = d.running_description().into();
            }
        }
        match &self.current {
            // A multiregion region that is done waits, blocked, until its peers are too.
            Some(d)
                if !self.created
                    && self.complete
                    && d.status == model::deployment::DeploymentStatus::Running =>
            {
                let (status, desc) = if d.is_multiregion {
                    (
                        DeploymentStatus::Blocked,
                        model::deployment::DEPLOYMENT_DESC_BLOCKED,
                    )
                } else {
                    (
                        DeploymentStatus::Successful,
                        model::deployment::DEPLOYMENT_DESC_SUCCESSFUL,
                    )
                };
                self.results
                    .deployment_updates
                    .push(DeploymentStatusUpdate {
                        deployment_id: d.id.clone(),
                        status,
                        status_description: desc.into(),
                    });
            }
            _ => {}
        }
        self.results.deployment_id = self.current_id().to_string();
        if self.current_written {
            self.results.deployment = self.current.clone();
        }
    }

    /// Follow-up evaluations for failed allocations due later, one per window of due times; the
    /// allocations learn their evaluation's ID.
    fn schedule_later(&mut self, job: &Job, mut later: Vec<(Arc<Allocation>, i64)>, ids: &mut Rng) {
        later.sort_by(|(a, x), (b, y)| x.cmp(y).then_with(|| a.id.cmp(&b.id)));
        let mut window_start: Option<i64> = None;
        let mut eval_id = String::new();
        for (alloc, at) in later {
            if window_start.is_none_or(|s| at - s >= crate::limits::RESCHEDULE_BATCH_WINDOW_NS) {
                window_start = Some(at);
                let eval = self.followup_eval(job, at, ids);
                eval_id.clone_from(&eval.id);
                self.results.followup_evals.push(eval);
            }
            let mut updated = (*alloc).clone();
            updated.followup_eval_id.clone_from(&eval_id);
            updated.modify_time = self.input.now;
            self.results.attribute_updates.push(updated);
        }
    }

    fn followup_eval(&self, job: &Job, at: i64, ids: &mut Rng) -> Evaluation {
        let eval = self.input.eval;
        Evaluation {
            id: ids.uuid(),
            namespace: eval.namespace.clone(),
            priority: eval.priority,
            eval_type: eval.eval_type.clone(),
            triggered_by: EVAL_TRIGGER_RETRY_FAILED_ALLOC.into(),
            job_id: job.id.clone(),
            job_modify_index: job.modify_index.unwrap_or(0),
            status: EvalStatus::Pending,
            status_description: DESC_FOLLOWUP_EVAL.into(),
            wait_until: Some(format_unix_nanos(at)),
            previous_eval: eval.id.clone(),
            create_time: self.input.now,
            modify_time: self.input.now,
            ..Evaluation::default()
        }
    }

    /// Canaries of a cancelled deployment, or of a failed one, that were never promoted.
    fn unneeded_canaries(&self) -> HashSet<String> {
        let mut ids = HashSet::new();
        let failed = self
            .current
            .as_ref()
            .filter(|d| d.status == DeploymentStatus::Failed);
        for d in self.old.iter().chain(failed) {
            for s in d.task_groups.values().filter(|s| !s.promoted) {
                ids.extend(s.placed_canaries.iter().cloned());
            }
        }
        ids
    }
}

/// What an allocation's node means for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taint {
    Fine,
    /// Down, gone, or disconnected with no tolerance for it: replace the allocation.
    Lost,
    Draining,
    /// Disconnected, and the group tolerates it for a while (`disconnect.lost_after`).
    Disconnected,
}

/// `tolerates_disconnect`: the group keeps allocations on disconnected nodes
/// (`max_client_disconnect` or `disconnect.lost_after`).
pub(crate) fn node_taint(nodes: &NodeMap, node_id: &str, tolerates_disconnect: bool) -> Taint {
    let Some(Some(node)) = nodes.get(node_id) else {
        return Taint::Lost;
    };
    match node.status {
        NodeStatus::Down => Taint::Lost,
        NodeStatus::Disconnected if !tolerates_disconnect => Taint::Lost,
        NodeStatus::Disconnected => Taint::Disconnected,
        _ if node.drain_strategy.is_some() => Taint::Draining,
        _ => Taint::Fine,
    }
}

/// The client finished it without failure (all tasks dead and not failed).
pub(crate) fn ran_successfully(a: &Allocation) -> bool {
    a.client_status == ClientStatus::Complete
        || (!a.task_states.is_empty() && a.task_states.values().all(|s| s.successful()))
}

/// `<job>.<group>[<index>]`.
pub(crate) fn alloc_name(job_id: &str, tg: &str, index: u32) -> String {
    format!("{job_id}.{tg}[{index}]")
}
