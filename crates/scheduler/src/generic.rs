//! The service and batch schedulers (Nomad's `GenericScheduler`): reconcile, then place what the
//! reconciler asks for on nodes the [`Stack`] samples.

use crate::builder::{candidates, sorted_nodes, Builder};
use crate::outcome::Outcome;
use crate::reconcile::{self, reschedule, Input, NodeMap, Place, Results, DESC_UPDATING};
use crate::rng::{Rng, STREAM_IDS, STREAM_SAMPLING};
use crate::stack::{SelectOpts, Stack};
use crate::view::StateView;
use model::deployment::Deployment;
use model::eval::Evaluation;
use model::job::Job;
use model::plan::PlanAnnotations;
use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) fn run(
    view: &dyn StateView,
    eval: &Evaluation,
    now: i64,
    seed: u64,
    batch: bool,
) -> Outcome {
    let ns = eval.namespace.as_str();
    let job = view.job(ns, &eval.job_id);
    let allocs = view.allocs_by_job(ns, &eval.job_id);
    let nodes = alloc_nodes(view, &allocs);
    let latest = view.latest_deployment(ns, &eval.job_id);
    let mut ids = Rng::new(seed, STREAM_IDS);
    let input = Input {
        job: job.as_deref(),
        batch,
        allocs: &allocs,
        nodes: &nodes,
        deployment: latest.as_deref(),
        eval,
        now,
    };
    let results = reconcile::reconcile(&input, &mut ids);
    let mut b = Builder::new(view, eval, now, job.clone(), ids);
    b.deployment_id.clone_from(&results.deployment_id);
    if let (Some(job), false) = (&job, results.places.is_empty()) {
        let (nodes, base) = candidates(&sorted_nodes(view), job);
        let mut rng = Rng::new(seed, STREAM_SAMPLING);
        let mut nodes = nodes;
        rng.shuffle(&mut nodes);
        b.stack = Some(Stack::new(view, job.clone(), nodes, base, rng, batch));
    }
    apply(&mut b, &results, latest.as_deref());
    b.new_evals.extend(results.followup_evals.iter().cloned());
    b.plan
        .deployment_updates
        .clone_from(&results.deployment_updates);
    if eval.annotate_plan {
        b.plan.annotations = Some(PlanAnnotations {
            desired_tg_updates: results.desired.clone(),
            ..PlanAnnotations::default()
        });
    }
    b.finish(true)
}

/// The nodes the job's allocations are on (`None` for nodes gone from the state).
fn alloc_nodes(view: &dyn StateView, allocs: &[Arc<model::alloc::Allocation>]) -> NodeMap {
    let mut nodes = NodeMap::new();
    for a in allocs {
        if !nodes.contains_key(&a.node_id) {
            nodes.insert(a.node_id.clone(), view.node(&a.node_id));
        }
    }
    nodes
}

/// Stops, in-place updates and follow-up markers first (so freed resources count), then
/// destructive updates, then fresh placements; canaries placed are recorded in the deployment.
fn apply(b: &mut Builder, results: &Results, latest: Option<&Deployment>) {
    for s in &results.stops {
        b.stop(&s.alloc, s.desc, s.client_status.as_ref());
    }
    for a in &results.inplace {
        b.update_in_place(a);
    }
    for a in &results.attribute_updates {
        b.plan.push_alloc(a.clone());
    }
    let mut canaries: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let destructive = results.places.iter().filter(|p| p.destructive);
    let fresh = results.places.iter().filter(|p| !p.destructive);
    for p in destructive.chain(fresh) {
        if let Some(id) = place(b, p) {
            if p.canary && !b.deployment_id.is_empty() {
                canaries.entry(p.tg.clone()).or_default().push(id);
            }
        }
    }
    let mut deployment = results.deployment.clone();
    if !canaries.is_empty() {
        let mut d = deployment
            .take()
            .or_else(|| latest.cloned())
            .unwrap_or_default();
        for (tg, ids) in canaries {
            if let Some(state) = d.task_groups.get_mut(&tg) {
                state.placed_canaries.extend(ids);
            }
        }
        d.modify_time = b.now;
        deployment = Some(d);
    }
    b.plan.deployment = deployment;
}

/// Places one allocation; returns its ID, or `None` when no node took it.
///
/// Destructive updates go first and are each tried even after a failure: stopping the old
/// allocation frees room that no fresh placement has, so they may succeed where others failed.
/// Fresh placements of a group that already failed are coalesced without trying (all ask the same
/// and room only shrinks). Together this makes a second pass over the applied plan place nothing.
fn place(b: &mut Builder, p: &Place) -> Option<String> {
    if !p.destructive && b.coalesce(&p.tg) {
        return None;
    }
    let prev = p.previous.as_deref();
    if let (true, Some(prev)) = (p.destructive, prev) {
        b.stop(prev, DESC_UPDATING, None);
    }
    let job: Arc<Job> = b.job.clone()?;
    let group = job.task_groups.iter().find(|g| g.name == p.tg)?;
    let penalty = match (p.reschedule, prev) {
        (true, Some(prev)) => reschedule::penalty_nodes(prev),
        _ => Vec::new(),
    };
    let sticky = group
        .ephemeral_disk
        .as_ref()
        .is_some_and(|d| d.sticky == Some(true) || d.migrate == Some(true));
    let opts = SelectOpts {
        penalty_nodes: &penalty,
        preferred_node: prev.filter(|_| sticky).map(|a| a.node_id.as_str()),
    };
    let choice = b.stack.as_mut()?.select(&p.tg, &opts);
    match choice {
        Ok(choice) => {
            let mut alloc = b.new_alloc(&p.tg, &p.name, p.canary, choice);
            if let Some(prev) = prev {
                alloc.previous_allocation.clone_from(&prev.id);
                if p.reschedule {
                    let policy = reschedule::policy_of(prev, group.reschedule_policy.as_ref());
                    alloc.reschedule_tracker = Some(reschedule::tracker_for(prev, policy, b.now));
                }
            }
            let id = alloc.id.clone();
            b.plan.push_alloc(alloc);
            Some(id)
        }
        Err(metric) => {
            b.fail(&p.tg, metric);
            if let (true, Some(prev)) = (p.destructive, prev) {
                b.unstop(prev);
            }
            None
        }
    }
}
