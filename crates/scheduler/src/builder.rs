//! Turning decisions into the plan and the evaluation's outcome, shared by the schedulers: the
//! candidate nodes and base metrics, stopped and updated copies of allocations, new allocations,
//! failure bookkeeping, and the evaluation's final state with its blocked evaluation.

use crate::feasible::{in_datacenters, in_pool, in_scope};
use crate::outcome::Outcome;
use crate::rng::Rng;
use crate::stack::{Choice, Stack};
use crate::view::StateView;
use model::alloc::{AllocDeploymentStatus, AllocMetric, Allocation, ClientStatus, DesiredStatus};
use model::eval::{EvalStatus, Evaluation, EVAL_TRIGGER_QUEUED_ALLOCS};
use model::job::Job;
use model::node::Node;
use model::plan::Plan;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `StatusDescription` of a blocked evaluation (Nomad's `blockedEvalFailedPlacements`).
pub(crate) const DESC_BLOCKED: &str = "created to place remaining allocations";

/// Every node, sorted by ID so the sampling order depends only on the seed.
pub(crate) fn sorted_nodes(view: &dyn StateView) -> Vec<Arc<Node>> {
    let mut nodes = view.nodes();
    if !nodes.is_sorted_by(|a, b| a.id <= b.id) {
        nodes.sort_by(|a, b| a.id.cmp(&b.id));
    }
    nodes
}

/// The job's candidate nodes (ready, in its datacenters and pool) and the metric every placement
/// starts from (`NodesInPool`, `NodesAvailable` per datacenter).
pub(crate) fn candidates(nodes: &[Arc<Node>], job: &Job) -> (Vec<Arc<Node>>, AllocMetric) {
    let mut base = AllocMetric::default();
    let mut out = Vec::new();
    for n in nodes {
        if !in_pool(job, n) {
            continue;
        }
        base.nodes_in_pool += 1;
        if !in_datacenters(&job.datacenters, n) {
            continue;
        }
        if in_scope(job, n) {
            *base
                .nodes_available
                .entry(n.datacenter.clone())
                .or_default() += 1;
            out.push(n.clone());
        }
    }
    (out, base)
}

/// The allocation as the plan stops it.
pub(crate) fn stopped(
    alloc: &Allocation,
    desc: &str,
    client_status: Option<&ClientStatus>,
    now: i64,
) -> Allocation {
    let mut a = alloc.clone();
    a.desired_status = DesiredStatus::Stop;
    a.desired_description = desc.into();
    if let Some(status) = client_status {
        a.client_status = status.clone();
    }
    a.modify_time = now;
    a
}

/// Builds the plan of one evaluation.
pub(crate) struct Builder<'v> {
    pub(crate) view: &'v dyn StateView,
    pub(crate) eval: &'v Evaluation,
    pub(crate) now: i64,
    pub(crate) job: Option<Arc<Job>>,
    pub(crate) plan: Plan,
    pub(crate) ids: Rng,
    pub(crate) stack: Option<Stack<'v>>,
    pub(crate) failed: BTreeMap<String, AllocMetric>,
    pub(crate) queued: BTreeMap<String, i64>,
    pub(crate) new_evals: Vec<Evaluation>,
    /// The deployment new and updated allocations join; empty when none.
    pub(crate) deployment_id: String,
    /// Allocations preempted by each group's placements (plan annotations).
    preemptions: BTreeMap<String, u64>,
}

impl<'v> Builder<'v> {
    pub(crate) fn new(
        view: &'v dyn StateView,
        eval: &'v Evaluation,
        now: i64,
        job: Option<Arc<Job>>,
        ids: Rng,
    ) -> Builder<'v> {
        let plan = Plan {
            eval_id: eval.id.clone(),
            priority: eval.priority,
            all_at_once: job.as_ref().is_some_and(|j| j.all_at_once),
            job: job.as_ref().map(|j| Box::new((**j).clone())),
            snapshot_index: view.index(),
            ..Plan::default()
        };
        let queued = job
            .iter()
            .flat_map(|j| &j.task_groups)
            .map(|g| (g.name.clone(), 0))
            .collect();
        Builder {
            view,
            eval,
            now,
            job,
            plan,
            ids,
            stack: None,
            failed: BTreeMap::new(),
            queued,
            new_evals: Vec::new(),
            deployment_id: String::new(),
            preemptions: BTreeMap::new(),
        }
    }

    /// Stops `alloc` in the plan and frees what it held for later placements.
    pub(crate) fn stop(
        &mut self,
        alloc: &Allocation,
        desc: &str,
        client_status: Option<&ClientStatus>,
    ) {
        self.plan
            .push_update(stopped(alloc, desc, client_status, self.now));
        if let Some(stack) = self.stack.as_mut() {
            stack.note_stop(alloc);
        }
    }

    /// Takes back a stop (the replacement of a destructive update found no node).
    pub(crate) fn unstop(&mut self, alloc: &Allocation) {
        if let Some(list) = self.plan.node_update.get_mut(&alloc.node_id) {
            list.retain(|a| a.id != alloc.id);
            if list.is_empty() {
                self.plan.node_update.remove(&alloc.node_id);
            }
        }
        if let Some(stack) = self.stack.as_mut() {
            stack.note_unstop(alloc);
        }
    }

    /// The allocation moved to the current job version where it runs.
    pub(crate) fn update_in_place(&mut self, alloc: &Allocation) {
        let Some(job) = &self.job else {
            return;
        };
        let mut a = alloc.clone();
        a.job = Some(job.clone());
        a.eval_id.clone_from(&self.eval.id);
        // Moving to another deployment starts its health over (Nomad's computeJobAllocs): the
        // new deployment counts the allocation only once the client finds it healthy again.
        if !self.deployment_id.is_empty() && a.deployment_id != self.deployment_id {
            a.deployment_id.clone_from(&self.deployment_id);
            a.deployment_status = None;
        }
        a.modify_time = self.now;
        self.plan.push_alloc(a);
    }

    /// A new allocation named `name` of group `tg` on the chosen node.
    pub(crate) fn new_alloc(
        &mut self,
        tg: &str,
        name: &str,
        canary: bool,
        c: Choice,
    ) -> Allocation {
        let job = self.job.clone();
        let canary = canary && !self.deployment_id.is_empty();
        let id = self.ids.uuid();
        let preempted_allocations = c.preempted.iter().map(|a| a.id.clone()).collect();
        if !c.preempted.is_empty() {
            *self.preemptions.entry(tg.to_string()).or_default() += c.preempted.len() as u64;
        }
        for victim in &c.preempted {
            let mut evicted = (**victim).clone();
            evicted.desired_status = DesiredStatus::Evict;
            evicted.desired_description = format!("Preempted by alloc ID {id}");
            evicted.preempted_by_allocation.clone_from(&id);
            evicted.modify_time = self.now;
            self.plan
                .node_preemptions
                .entry(c.node.id.clone())
                .or_default()
                .push(evicted);
        }
        Allocation {
            id,
            preempted_allocations,
            namespace: self.eval.namespace.clone(),
            eval_id: self.eval.id.clone(),
            name: name.into(),
            node_id: c.node.id.clone(),
            node_name: c.node.name.clone(),
            job_id: self.eval.job_id.clone(),
            job,
            task_group: tg.into(),
            allocated_resources: Some(c.resources),
            metrics: Some(c.metric),
            desired_status: DesiredStatus::Run,
            client_status: ClientStatus::Pending,
            deployment_id: self.deployment_id.clone(),
            deployment_status: canary.then(|| AllocDeploymentStatus {
                canary: true,
                ..AllocDeploymentStatus::default()
            }),
            create_time: self.now,
            modify_time: self.now,
            ..Allocation::default()
        }
    }

    /// Records a failed placement of group `tg`: the first failure's metric, later ones coalesced.
    pub(crate) fn fail(&mut self, tg: &str, metric: Box<AllocMetric>) {
        *self.queued.entry(tg.to_string()).or_default() += 1;
        match self.failed.get_mut(tg) {
            Some(m) => m.coalesced_failures += 1,
            None => {
                self.failed.insert(tg.to_string(), *metric);
            }
        }
    }

    /// Whether group `tg` already failed (later placements are coalesced without trying).
    pub(crate) fn coalesce(&mut self, tg: &str) -> bool {
        if !self.failed.contains_key(tg) {
            return false;
        }
        self.fail(tg, Box::default());
        true
    }

    /// The evaluation's new state and, when `block` and something could not be placed, a blocked
    /// evaluation that retries when capacity changes.
    pub(crate) fn finish(mut self, block: bool) -> Outcome {
        let eval = self.eval;
        let mut out = eval.clone();
        out.status = EvalStatus::Complete;
        out.status_description.clear();
        out.snapshot_index = self.view.index();
        out.modify_time = self.now;
        out.queued_allocations = std::mem::take(&mut self.queued);
        if !self.deployment_id.is_empty() {
            out.deployment_id.clone_from(&self.deployment_id);
        }
        let (classes, escaped) = match &self.stack {
            Some(s) => (s.class_eligibility().clone(), s.escaped()),
            None => (BTreeMap::new(), false),
        };
        if block && !self.failed.is_empty() {
            if eval.status == EvalStatus::Blocked {
                out.status = EvalStatus::Blocked;
                out.status_description.clone_from(&eval.status_description);
                out.class_eligibility = classes;
                out.escaped_computed_class = escaped;
            } else {
                let blocked = self.blocked_eval(classes, escaped);
                out.blocked_eval.clone_from(&blocked.id);
                self.new_evals.push(blocked);
            }
        }
        out.failed_tg_allocs = self.failed;
        if eval.annotate_plan && !self.plan.node_preemptions.is_empty() {
            let annotations = self.plan.annotations.get_or_insert_with(Default::default);
            for (tg, n) in std::mem::take(&mut self.preemptions) {
                annotations
                    .desired_tg_updates
                    .entry(tg)
                    .or_default()
                    .preemptions += n;
            }
            annotations.preempted_allocs = self
                .plan
                .node_preemptions
                .values()
                .flatten()
                .map(|a| a.stub(false))
                .collect();
        }
        Outcome {
            plan: self.plan,
            eval: out,
            new_evals: self.new_evals,
        }
    }

    fn blocked_eval(&mut self, classes: BTreeMap<String, bool>, escaped: bool) -> Evaluation {
        let eval = self.eval;
        Evaluation {
            id: self.ids.uuid(),
            namespace: eval.namespace.clone(),
            priority: eval.priority,
            eval_type: eval.eval_type.clone(),
            triggered_by: EVAL_TRIGGER_QUEUED_ALLOCS.into(),
            job_id: eval.job_id.clone(),
            job_modify_index: self
                .job
                .as_ref()
                .and_then(|j| j.modify_index)
                .unwrap_or(eval.job_modify_index),
            status: EvalStatus::Blocked,
            status_description: DESC_BLOCKED.into(),
            previous_eval: eval.id.clone(),
            class_eligibility: classes,
            escaped_computed_class: escaped,
            failed_tg_allocs: self.failed.clone(),
            create_time: self.now,
            modify_time: self.now,
            ..Evaluation::default()
        }
    }
}
