//! The system and sysbatch schedulers: one allocation of each task group on every feasible node;
//! allocations on nodes that are gone, down, or no longer feasible are stopped. Sysbatch
//! allocations that finished on a node are not run again there until the job changes.

use crate::builder::{candidates, sorted_nodes, Builder};
use crate::outcome::Outcome;
use crate::reconcile::update::{update_kind, UpdateKind};
use crate::reconcile::{
    self, alloc_name, Input, NodeMap, DESC_LOST, DESC_MIGRATING, DESC_NODE_TAINTED,
    DESC_NOT_NEEDED, DESC_UPDATING,
};
use crate::rng::{Rng, STREAM_IDS, STREAM_SAMPLING};
use crate::stack::{Miss, Stack};
use crate::view::StateView;
use model::alloc::{Allocation, ClientStatus};
use model::eval::Evaluation;
use model::group::TaskGroup;
use model::job::Job;
use model::node::{Node, NodeStatus};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

pub(crate) fn run(
    view: &dyn StateView,
    eval: &Evaluation,
    now: i64,
    seed: u64,
    sysbatch: bool,
) -> Outcome {
    let ns = eval.namespace.as_str();
    let job = view.job(ns, &eval.job_id);
    let allocs = view.allocs_by_job(ns, &eval.job_id);
    let ids = Rng::new(seed, STREAM_IDS);
    let job = match job {
        Some(job) if !job.stop => job,
        other => return stop_all(view, eval, now, other, &allocs, ids),
    };
    let all_nodes = sorted_nodes(view);
    let (nodes, base) = candidates(&all_nodes, &job);
    let rng = Rng::new(seed, STREAM_SAMPLING);
    let mut b = Builder::new(view, eval, now, Some(job.clone()), ids);
    b.stack = Some(Stack::new(
        view,
        job.clone(),
        nodes.clone(),
        base,
        rng,
        false,
    ));
    let by_id: HashMap<&str, &Arc<Node>> = all_nodes.iter().map(|n| (n.id.as_str(), n)).collect();
    let mut sys = System {
        b,
        job: &job,
        sysbatch,
        by_id,
        candidates: nodes.iter().map(|n| n.id.clone()).collect(),
    };
    for tg in &job.task_groups {
        sys.group(tg, &allocs);
    }
    sys.stop_removed_groups(&allocs);
    if eval.annotate_plan {
        let updates = desired_updates(&sys.b.plan, &allocs);
        sys.b.plan.annotations = Some(model::plan::PlanAnnotations {
            desired_tg_updates: updates,
            ..Default::default()
        });
    }
    sys.b.finish(false)
}

/// Nomad's `desiredUpdates` for a system job, read off the plan: per group, placements (new
/// allocations), destructive updates (new ones replacing a stopped one), in-place updates
/// (existing ones changed), stops, and the live allocations left alone.
fn desired_updates(
    plan: &model::plan::Plan,
    allocs: &[Arc<Allocation>],
) -> std::collections::BTreeMap<String, model::plan::DesiredUpdates> {
    let mut out: std::collections::BTreeMap<String, model::plan::DesiredUpdates> =
        std::collections::BTreeMap::new();
    let existing: HashMap<&str, &Arc<Allocation>> =
        allocs.iter().map(|a| (a.id.as_str(), a)).collect();
    let stopped: std::collections::HashSet<&str> = plan
        .node_update
        .values()
        .flatten()
        .map(|a| a.id.as_str())
        .collect();
    let mut touched: std::collections::HashSet<&str> = stopped.clone();
    let mut replaced: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for a in plan.node_allocation.values().flatten() {
        let u = out.entry(a.task_group.clone()).or_default();
        touched.insert(a.id.as_str());
        if existing.contains_key(a.id.as_str()) {
            u.in_place_update += 1;
        } else if stopped.contains(a.previous_allocation.as_str()) {
            u.destructive_update += 1;
            replaced.insert(a.previous_allocation.as_str());
        } else {
            u.place += 1;
        }
    }
    for a in plan.node_update.values().flatten() {
        if !replaced.contains(a.id.as_str()) {
            out.entry(a.task_group.clone()).or_default().stop += 1;
        }
    }
    for a in allocs {
        if !a.server_terminal() && !touched.contains(a.id.as_str()) {
            out.entry(a.task_group.clone()).or_default().ignore += 1;
        }
    }
    out
}

/// The job is stopped or gone: the reconciler stops everything.
fn stop_all(
    view: &dyn StateView,
    eval: &Evaluation,
    now: i64,
    job: Option<Arc<Job>>,
    allocs: &[Arc<Allocation>],
    mut ids: Rng,
) -> Outcome {
    let mut nodes = NodeMap::new();
    for a in allocs {
        if !nodes.contains_key(&a.node_id) {
            nodes.insert(a.node_id.clone(), view.node(&a.node_id));
        }
    }
    let latest = view.latest_deployment(&eval.namespace, &eval.job_id);
    let input = Input {
        job: job.as_deref(),
        batch: false,
        allocs,
        nodes: &nodes,
        deployment: latest.as_deref(),
        eval,
        now,
    };
    let results = reconcile::reconcile(&input, &mut ids);
    let mut b = Builder::new(view, eval, now, job, ids);
    for s in &results.stops {
        b.stop(&s.alloc, s.desc, s.client_status.as_ref());
    }
    b.plan.deployment_updates = results.deployment_updates;
    b.finish(false)
}

struct System<'a, 'v> {
    b: Builder<'v>,
    job: &'a Job,
    sysbatch: bool,
    by_id: HashMap<&'a str, &'a Arc<Node>>,
    /// Nodes new allocations may go to (ready, in the job's datacenters and pool).
    candidates: BTreeSet<String>,
}

impl System<'_, '_> {
    fn group(&mut self, tg: &TaskGroup, allocs: &[Arc<Allocation>]) {
        let mut on_node: BTreeMap<&str, Vec<&Arc<Allocation>>> = BTreeMap::new();
        for a in allocs
            .iter()
            .filter(|a| a.task_group == tg.name && !a.server_terminal())
        {
            on_node.entry(&a.node_id).or_default().push(a);
        }
        let limit = tg
            .update
            .as_ref()
            .and_then(|u| u.max_parallel)
            .filter(|m| *m > 0)
            .map_or(usize::MAX, |m| m as usize);
        let mut destructive = Vec::new();
        let mut covered = BTreeSet::new();
        for (node_id, here) in &on_node {
            if self.keep_on_node(tg, node_id, here, &mut destructive) {
                covered.insert(node_id.to_string());
            }
        }
        destructive.sort_by(|a: &Arc<Allocation>, b| a.node_id.cmp(&b.node_id));
        for (i, a) in destructive.iter().enumerate() {
            if i < limit {
                self.replace(tg, a);
            }
        }
        let missing: Vec<String> = self
            .candidates
            .iter()
            .filter(|id| !covered.contains(*id))
            .cloned()
            .collect();
        for node_id in missing {
            // As Nomad's, a new allocation follows the group's newest finished one on the node
            // (whose `NextAllocation` then names it; `job restart -reschedule` follows that).
            let previous = allocs
                .iter()
                .filter(|a| a.task_group == tg.name && a.node_id == node_id)
                .filter(|a| a.server_terminal() || a.client_terminal())
                .max_by_key(|a| a.create_index)
                .cloned();
            self.place(tg, &node_id, previous.as_deref());
        }
    }

    /// Decides about the group's allocations on one node; returns whether the node is covered
    /// (needs no new allocation).
    fn keep_on_node(
        &mut self,
        tg: &TaskGroup,
        node_id: &str,
        here: &[&Arc<Allocation>],
        destructive: &mut Vec<Arc<Allocation>>,
    ) -> bool {
        let node = self.by_id.get(node_id).copied();
        let gone = node.is_none_or(|n| n.status == NodeStatus::Down);
        let (live, done): (Vec<&Arc<Allocation>>, Vec<&Arc<Allocation>>) =
            here.iter().partition(|a| !a.client_terminal());
        if gone {
            for a in &live {
                self.b.stop(a, DESC_LOST, Some(&ClientStatus::Lost));
            }
            return true;
        }
        let node = node.expect("checked above");
        if !self.wants_node(tg, node) {
            for a in &live {
                self.b.stop(a, DESC_NOT_NEEDED, None);
            }
            return true;
        }
        // A drain that reached its deadline completes (clearing the strategy) before the
        // scheduler stops what it marked; the node stays ineligible, so the marks still count.
        let marked = live.iter().any(|a| a.desired_transition.should_migrate());
        if node.drain_strategy.is_some() || (marked && !crate::feasible::is_ready(node)) {
            for a in live
                .iter()
                .filter(|a| a.desired_transition.should_migrate())
            {
                self.b.stop(a, DESC_NODE_TAINTED, None);
            }
            return true;
        }
        // One marked on a node that keeps the group (`alloc stop`) is stopped, and as in Nomad
        // not replaced by this evaluation: the next one places the group there again.
        let (marked, live): (Vec<&Arc<Allocation>>, Vec<&Arc<Allocation>>) = live
            .into_iter()
            .partition(|a| a.desired_transition.should_migrate());
        for a in &marked {
            self.b.stop(a, DESC_MIGRATING, None);
        }
        if !marked.is_empty() && live.is_empty() {
            return true;
        }
        for extra in live.iter().skip(1) {
            self.b.stop(extra, DESC_NOT_NEEDED, None);
        }
        match live.first() {
            Some(a) => self.update(tg, a, destructive),
            None => self.sysbatch && done.iter().any(|a| !changed(a, self.job, &tg.name)),
        }
    }

    /// Whether the job still wants group `tg` on `node` (datacenters, pool, node checks). Nodes
    /// that are merely not ready (ineligible, initializing) keep what they run.
    fn wants_node(&mut self, tg: &TaskGroup, node: &Node) -> bool {
        if !crate::feasible::in_pool(self.job, node)
            || !crate::feasible::in_datacenters(&self.job.datacenters, node)
        {
            return false;
        }
        if !self.candidates.contains(&node.id) {
            return true;
        }
        match self.b.stack.as_mut() {
            Some(stack) => stack.feasible_on(&node.id, &tg.name),
            None => true,
        }
    }

    /// A live allocation on a wanted node: keep it, update it in place, or queue it for a
    /// destructive update. The node stays covered either way.
    fn update(
        &mut self,
        tg: &TaskGroup,
        a: &Arc<Allocation>,
        destructive: &mut Vec<Arc<Allocation>>,
    ) -> bool {
        match update_kind(a.job.as_deref(), self.job, &tg.name) {
            UpdateKind::Ignore => {}
            UpdateKind::InPlace => self.b.update_in_place(a),
            UpdateKind::Destructive => destructive.push(a.clone()),
        }
        true
    }

    /// Destructive update: stop and place anew on the same node (kept when it no longer fits).
    fn replace(&mut self, tg: &TaskGroup, a: &Arc<Allocation>) {
        self.b.stop(a, DESC_UPDATING, None);
        if !self.place(tg, &a.node_id, Some(a)) {
            self.b.unstop(a);
        }
    }

    /// Places group `tg` on `node_id` (replacing `previous`); returns whether it went there.
    /// Infeasible nodes are skipped silently; nodes short of resources are failures.
    fn place(&mut self, tg: &TaskGroup, node_id: &str, previous: Option<&Allocation>) -> bool {
        let Some(stack) = self.b.stack.as_mut() else {
            return false;
        };
        match stack.select_on(node_id, &tg.name) {
            Ok(choice) => {
                let name = alloc_name(&self.job.id, &tg.name, 0);
                let mut alloc = self.b.new_alloc(&tg.name, &name, false, choice);
                if let Some(prev) = previous {
                    alloc.previous_allocation.clone_from(&prev.id);
                }
                self.b.plan.push_alloc(alloc);
                true
            }
            Err((_, Miss::Filtered)) => false,
            Err((metric, Miss::Exhausted)) => {
                self.b.fail(&tg.name, metric);
                false
            }
        }
    }

    fn stop_removed_groups(&mut self, allocs: &[Arc<Allocation>]) {
        for a in allocs {
            let known = self.job.task_groups.iter().any(|g| g.name == a.task_group);
            if !known && !a.server_terminal() {
                self.b.stop(a, DESC_NOT_NEEDED, None);
            }
        }
    }
}

fn changed(a: &Allocation, job: &Job, tg: &str) -> bool {
    update_kind(a.job.as_deref(), job, tg) != UpdateKind::Ignore
}
