//! Deployments (Nomad's `upsertDeploymentImpl`).

use super::jobs::update_job_stability;
use super::Txn;
use crate::command::ApplyResponse;
use crate::error::StateError;
use model::deployment::{Deployment, DeploymentStatus, DeploymentStatusUpdate};
use model::eval::Evaluation;
use model::Job;

/// `DeploymentUpsert`.
pub(super) fn upsert(tx: &mut Txn, deployment: &Deployment) -> Result<(), StateError> {
    if deployment.id.is_empty() {
        return Err(StateError::invalid("deployment has no ID"));
    }
    upsert_deployment(tx, deployment.clone());
    Ok(())
}

/// Keeps the create index of an existing deployment; a successful deployment marks its job version
/// stable.
pub(super) fn upsert_deployment(tx: &mut Txn, mut deployment: Deployment) {
    let index = tx.index();
    deployment.create_index = tx
        .deployments()
        .get(&deployment.id)
        .map_or(index, |d| d.create_index);
    deployment.modify_index = index;
    let successful = deployment.status == DeploymentStatus::Successful;
    let (ns, job_id, version) = (
        deployment.namespace.clone(),
        deployment.job_id.clone(),
        deployment.job_version,
    );
    tx.put_deployment(deployment);
    if successful {
        update_job_stability(tx, &ns, &job_id, version);
    }
}

/// Nomad's `updateDeploymentStatusImpl`: a plan's status change for a deployment. An unknown
/// deployment (garbage-collected since the plan was made) is skipped rather than failing the plan.
pub(super) fn update_status(tx: &mut Txn, update: &DeploymentStatusUpdate) {
    let Some(current) = tx.deployments().get(&update.deployment_id).cloned() else {
        return;
    };
    // A finished deployment stays finished, and only a running one finishes its own rollout
    // (blocked): an update decided on an older state (a plan's, a leader loop's) that lands
    // after another decision never revives or overrides it.
    if !current.is_active()
        || (update.status == DeploymentStatus::Blocked
            && current.status != DeploymentStatus::Running)
    {
        return;
    }
    let mut deployment = (*current).clone();
    deployment.status.clone_from(&update.status);
    deployment
        .status_description
        .clone_from(&update.status_description);
    upsert_deployment(tx, deployment);
}

/// The deployment, or `NotFound`.
fn existing(tx: &Txn, id: &str) -> Result<Deployment, StateError> {
    tx.deployments()
        .get(id)
        .map(|d| (**d).clone())
        .ok_or_else(|| StateError::NotFound(format!("deployment {id:?} not found")))
}

/// Registers the job a failed deployment rolls back to, then writes the evaluation that follows.
fn revert_and_evaluate(
    tx: &mut Txn,
    job: Option<&Job>,
    eval: Option<&Evaluation>,
    submit_time: i64,
) -> Result<ApplyResponse, StateError> {
    if let Some(job) = job {
        return super::jobs::register(tx, job, eval, submit_time, None);
    }
    if let Some(eval) = eval {
        super::evals::upsert(tx, std::slice::from_ref(eval))?;
    }
    Ok(ApplyResponse {
        index: tx.index(),
        eval_id: eval.map(|e| e.id.clone()),
        eval_create_index: eval.map(|_| tx.index()),
        ..ApplyResponse::default()
    })
}

/// `DeploymentStatus` (Nomad's `UpdateDeploymentStatus`). Only an active deployment changes: a
/// deployment that already ended stays as it ended.
pub(super) fn status(
    tx: &mut Txn,
    update: &DeploymentStatusUpdate,
    job: Option<&Job>,
    eval: Option<&Evaluation>,
    submit_time: i64,
) -> Result<ApplyResponse, StateError> {
    let mut deployment = existing(tx, &update.deployment_id)?;
    if !deployment.is_active() {
        return Err(StateError::invalid(format!(
            "deployment {:?} has already ended ({}); only a running or paused deployment changes",
            deployment.id, deployment.status
        )));
    }
    // A region that waited its turn starts its progress deadlines when it starts.
    if deployment.status == DeploymentStatus::Pending && update.status == DeploymentStatus::Running
    {
        for s in deployment.task_groups.values_mut() {
            s.require_progress_by = None;
        }
    }
    deployment.status.clone_from(&update.status);
    deployment
        .status_description
        .clone_from(&update.status_description);
    upsert_deployment(tx, deployment);
    revert_and_evaluate(tx, job, eval, submit_time)
}

/// `DeploymentPromote` (Nomad's `UpdateDeploymentPromotion`): every group promoted must have as many
/// healthy canaries as it wants; the promoted canaries stop being canaries.
pub(super) fn promote(
    tx: &mut Txn,
    deployment_id: &str,
    all: bool,
    groups: &[String],
    eval: Option<&Evaluation>,
) -> Result<ApplyResponse, StateError> {
    let mut deployment = existing(tx, deployment_id)?;
    if !deployment.is_active() {
        return Err(StateError::invalid("can't promote terminal deployment"));
    }
    for g in groups {
        if !deployment.task_groups.contains_key(g) {
            return Err(StateError::invalid(format!(
                "deployment has no task group {g:?}"
            )));
        }
    }
    let chosen: Vec<String> = deployment
        .task_groups
        .iter()
        .filter(|(name, s)| (all || groups.contains(name)) && s.desired_canaries > 0)
        .map(|(name, _)| name.clone())
        .collect();
    if chosen.is_empty() {
        return Err(StateError::invalid(
            "no canaries to promote: the deployment's task groups place none",
        ));
    }
    let mut promotable = Vec::new();
    let mut problems = Vec::new();
    for name in &chosen {
        let state = &deployment.task_groups[name];
        let healthy = state.healthy_canaries(|id| tx.allocs().get(id).cloned());
        if (healthy.len() as i64) < state.desired_canaries {
            problems.push(format!(
                "task group {name:?} has {}/{} healthy allocations",
                healthy.len(),
                state.desired_canaries
            ));
        }
        promotable.extend(healthy);
    }
    if !problems.is_empty() {
        return Err(StateError::invalid(problems.join("; ")));
    }
    for name in &chosen {
        if let Some(state) = deployment.task_groups.get_mut(name) {
            state.promoted = true;
        }
    }
    if deployment.status == model::deployment::DeploymentStatus::Running {
        model::deployment::DEPLOYMENT_DESC_RUNNING.clone_into(&mut deployment.status_description);
    }
    upsert_deployment(tx, deployment);
    let index = tx.index();
    for id in promotable {
        let Some(alloc) = tx.allocs().get(&id).cloned() else {
            continue;
        };
        let mut alloc = (*alloc).clone();
        if let Some(s) = alloc.deployment_status.as_mut() {
            s.canary = false;
            s.modify_index = index;
        }
        alloc.modify_index = index;
        tx.put_alloc(alloc);
    }
    revert_and_evaluate(tx, None, eval, 0)
}

/// `DeploymentAllocHealth` (Nomad's `UpdateDeploymentAllocHealth`): allocations of the deployment
/// get their health set; the counters follow as for a client's report.
#[allow(clippy::too_many_arguments)]
pub(super) fn alloc_health(
    tx: &mut Txn,
    deployment_id: &str,
    healthy: &[String],
    unhealthy: &[String],
    timestamp: i64,
    update: Option<&DeploymentStatusUpdate>,
    job: Option<&Job>,
    eval: Option<&Evaluation>,
) -> Result<ApplyResponse, StateError> {
    let deployment = existing(tx, deployment_id)?;
    if !deployment.is_active() {
        return Err(StateError::invalid(
            "can't set health of allocations for a terminal deployment",
        ));
    }
    let index = tx.index();
    let stamp = crate::time::format_unix_nanos(timestamp);
    for (ids, is_healthy) in [(healthy, true), (unhealthy, false)] {
        for id in ids {
            let existing_alloc = tx
                .allocs()
                .get(id)
                .cloned()
                .ok_or_else(|| StateError::NotFound(format!("allocation {id:?} not found")))?;
            if existing_alloc.deployment_id != deployment_id {
                return Err(StateError::invalid(format!(
                    "allocation {id:?} is not part of deployment {deployment_id:?}"
                )));
            }
            let mut alloc = (*existing_alloc).clone();
            let status = alloc.deployment_status.get_or_insert_with(Default::default);
            status.healthy = Some(is_healthy);
            status.timestamp = Some(stamp.clone());
            status.modify_index = index;
            alloc.modify_index = index;
            super::allocs::update_deployment_with_alloc(tx, &mut alloc, Some(&existing_alloc));
            tx.put_alloc(alloc);
        }
    }
    if let Some(update) = update {
        let mut d = existing(tx, deployment_id)?;
        d.status.clone_from(&update.status);
        d.status_description.clone_from(&update.status_description);
        upsert_deployment(tx, d);
    }
    revert_and_evaluate(tx, job, eval, timestamp)
}
