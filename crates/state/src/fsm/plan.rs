//! Plan results (Nomad's `UpsertPlanResults`): one evaluation's committed plan, applied as one.

use super::{allocs, deployments, evals, Txn};
use crate::command::{AllocStop, ApplyResponse};
use crate::error::StateError;
use model::alloc::Allocation;
use model::deployment::{Deployment, DeploymentStatusUpdate};
use model::eval::Evaluation;
use model::Job;

/// What a `PlanApply` command carries, borrowed.
pub(super) struct PlanResults<'a> {
    pub eval_id: &'a str,
    pub job: Option<&'a Job>,
    pub allocs_upsert: &'a [Allocation],
    pub allocs_stop: &'a [AllocStop],
    pub evals: &'a [Evaluation],
    pub deployment: Option<&'a Deployment>,
    pub deployment_updates: &'a [DeploymentStatusUpdate],
}

/// `PlanApply`: the deployment and its updates first (allocation writes count towards it), then
/// the stops and placements through the allocation upsert (summaries, deployment counters and job
/// statuses follow), then the evaluations. Any error fails the whole command.
pub(super) fn apply(tx: &mut Txn, plan: &PlanResults<'_>) -> Result<ApplyResponse, StateError> {
    if plan.eval_id.is_empty() {
        return Err(StateError::invalid("plan results name no evaluation"));
    }
    if let Some(deployment) = plan.deployment {
        deployments::upsert(tx, deployment)?;
    }
    for update in plan.deployment_updates {
        deployments::update_status(tx, update);
    }
    let mut writes = stopped(tx, plan.allocs_stop);
    // One job for every placement that came without its own: shared, not copied per allocation
    // (the store shares it further with the stored version, see `Root::put_alloc`).
    let shared = plan.job.map(|j| std::sync::Arc::new(j.clone()));
    writes.extend(plan.allocs_upsert.iter().map(|a| {
        let mut a = a.clone();
        if a.job.is_none() {
            a.job.clone_from(&shared);
        }
        a
    }));
    if !writes.is_empty() {
        allocs::upsert(tx, &writes, allocs::Writer::Server)?;
    }
    for alloc in writes.iter().filter(|a| !a.is_terminal()) {
        super::host_volumes::claim_sticky(tx, alloc);
    }
    if !plan.evals.is_empty() {
        evals::upsert(tx, plan.evals)?;
    }
    Ok(ApplyResponse {
        index: tx.index(),
        eval_id: Some(plan.eval_id.to_owned()),
        ..ApplyResponse::default()
    })
}

/// `AllocStop`: allocations stopped outside a plan (a reconnect's losing copy), written like a
/// plan's stops: the stored allocation with the stop's fields, never a caller's older copy.
pub(super) fn stop(tx: &mut Txn, stops: &[AllocStop]) -> Result<(), StateError> {
    let writes = stopped(tx, stops);
    if writes.is_empty() {
        return Ok(());
    }
    allocs::upsert(tx, &writes, allocs::Writer::Server)
}

/// The stopped allocations as they will be stored: Nomad's `denormalizeAllocationDiffSlice`.
/// Unknown IDs are skipped (the allocation was garbage-collected after the plan was made).
fn stopped(tx: &Txn, stops: &[AllocStop]) -> Vec<Allocation> {
    stops
        .iter()
        .filter_map(|stop| {
            let current = tx.allocs().get(&stop.alloc_id)?;
            let mut alloc = (**current).clone();
            alloc.desired_status.clone_from(&stop.desired_status);
            alloc
                .desired_description
                .clone_from(&stop.desired_description);
            if let Some(status) = &stop.client_status {
                alloc.client_status.clone_from(status);
            }
            if !stop.followup_eval_id.is_empty() {
                alloc.followup_eval_id.clone_from(&stop.followup_eval_id);
            }
            if stop.modify_time != 0 {
                alloc.modify_time = stop.modify_time;
            }
            if !stop.preempted_by.is_empty() {
                alloc.preempted_by_allocation.clone_from(&stop.preempted_by);
            }
            Some(alloc)
        })
        .collect()
}
