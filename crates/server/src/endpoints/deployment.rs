//! Deployments: promote, fail, pause/resume, set allocation health; and `job revert`, which shares
//! the rollback path. Each checks what it can against the newest state first, so a user's mistake is
//! a 400 that says what to do; the FSM checks again (the state may move before the entry applies).

use super::{needs_eval, new_eval, now_nanos};
use crate::error::ServerError;
use crate::leader::deploy::{fail_command, watcher_eval};
use crate::server::Server;
use model::deployment::{
    Deployment, DeploymentStatus, DeploymentStatusUpdate, DEPLOYMENT_DESC_FAILED_ALLOCATIONS,
    DEPLOYMENT_DESC_FAILED_BY_USER, DEPLOYMENT_DESC_PAUSED,
};
use model::eval::EVAL_TRIGGER_JOB_REGISTER;
use model::wire::{
    DeploymentAllocHealthRequest, DeploymentPromoteRequest, DeploymentUpdateResponse,
    JobRegisterResponse, JobRevertRequest,
};
use model::Job;
use serde::{Deserialize, Serialize};
use state::{ApplyResponse, Command, StateSnapshot};
use std::sync::Arc;

/// A deployment action as forwarded to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum DeploymentAction {
    Promote(DeploymentPromoteRequest),
    Fail(String),
    Pause {
        id: String,
        pause: bool,
    },
    AllocHealth(DeploymentAllocHealthRequest),
    /// A blocked multiregion deployment marked successful by an operator.
    Unblock(String),
}

impl DeploymentAction {
    fn id(&self) -> &str {
        match self {
            DeploymentAction::Promote(r) => &r.deployment_id,
            DeploymentAction::Fail(id) => id,
            DeploymentAction::Pause { id, .. } => id,
            DeploymentAction::AllocHealth(r) => &r.deployment_id,
            DeploymentAction::Unblock(id) => id,
        }
    }
}

/// The deployment and its job, or a 404 / 400 naming what is wrong.
fn load(snap: &StateSnapshot, id: &str) -> Result<(Arc<Deployment>, Arc<Job>), ServerError> {
    let d = snap
        .deployment(id)
        .ok_or_else(|| ServerError::not_found(format!("deployment {id:?} not found")))?;
    let job = snap.job(&d.namespace, &d.job_id).ok_or_else(|| {
        ServerError::bad_request(format!(
            "deployment {id:?} belongs to job {:?}, which no longer exists",
            d.job_id
        ))
    })?;
    Ok((d, job))
}

fn answer(resp: ApplyResponse, reverted: Option<u64>) -> DeploymentUpdateResponse {
    DeploymentUpdateResponse {
        eval_id: resp.eval_id.unwrap_or_default(),
        eval_create_index: resp.eval_create_index.unwrap_or(0),
        deployment_modify_index: resp.index,
        reverted_job_version: reverted,
        index: resp.index,
    }
}

/// The version a status command rolls back to, for the response.
fn reverted_version(cmd: &Command) -> Option<u64> {
    match cmd {
        Command::DeploymentStatus { job: Some(j), .. } => j.version,
        _ => None,
    }
}

impl Server {
    pub async fn deployment_action(
        &self,
        action: DeploymentAction,
    ) -> Result<DeploymentUpdateResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::DeploymentActionMethod>(&leader, &action)
                    .await
            }
            None => self.deployment_action_local(action).await,
        }
    }

    pub(crate) async fn deployment_action_local(
        &self,
        action: DeploymentAction,
    ) -> Result<DeploymentUpdateResponse, ServerError> {
        let snap = self.state().snapshot();
        let (d, job) = load(&snap, action.id())?;
        let now = now_nanos();
        let cmd = match action {
            DeploymentAction::Promote(req) => promote_command(&snap, &d, &job, &req, now)?,
            DeploymentAction::Fail(_) => {
                if !d.is_active() {
                    return Err(ServerError::bad_request("can't fail terminal deployment"));
                }
                let revert = d.task_groups.values().any(|s| s.auto_revert);
                fail_command(&snap, &d, &job, DEPLOYMENT_DESC_FAILED_BY_USER, revert, now)
            }
            DeploymentAction::Pause { pause, .. } => pause_command(&d, &job, pause, now)?,
            DeploymentAction::AllocHealth(req) => health_command(&snap, &d, &job, &req, now)?,
            DeploymentAction::Unblock(_) => {
                if d.status != DeploymentStatus::Blocked {
                    return Err(ServerError::bad_request(format!(
                        "deployment {:?} is {}, not blocked: only a multiregion deployment that \
                         finished its own rollout and waits for its peer regions can be unblocked",
                        d.id,
                        d.status.as_str()
                    )));
                }
                crate::leader::multiregion::command_for(
                    &snap,
                    &d,
                    &job,
                    crate::leader::multiregion::Step::Succeed,
                    now,
                )
            }
        };
        let reverted = reverted_version(&cmd);
        let resp = self.apply(cmd).await?;
        Ok(answer(resp, reverted))
    }

    /// `PUT /v1/job/:id/revert`: registers an earlier version's spec as the newest version.
    pub async fn job_revert(
        &self,
        namespace: &str,
        req: JobRevertRequest,
    ) -> Result<JobRegisterResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::JobRevert>(
                    &leader,
                    &crate::methods::InNamespace {
                        namespace: namespace.to_string(),
                        request: req,
                    },
                )
                .await
            }
            None => self.job_revert_local(namespace, req).await,
        }
    }

    pub(crate) async fn job_revert_local(
        &self,
        namespace: &str,
        req: JobRevertRequest,
    ) -> Result<JobRegisterResponse, ServerError> {
        let snap = self.state().snapshot();
        let current = snap
            .job(namespace, &req.job_id)
            .ok_or_else(|| ServerError::not_found("job not found"))?;
        let current_version = current.version.unwrap_or(0);
        if current.is_multiregion() {
            return Err(ServerError::bad_request(format!(
                "job {:?} is a multiregion job: reverting one region's copy alone is not supported \
                 yet; run the earlier version's job file again (`caravan job inspect -version N`) so \
                 every region gets it",
                req.job_id
            )));
        }
        if let Some(prior) = req.enforce_prior_version {
            if prior != current_version {
                return Err(ServerError::bad_request(format!(
                    "current job has version {current_version}; enforcing version {prior}"
                )));
            }
        }
        if req.job_version == current_version {
            return Err(ServerError::bad_request(format!(
                "can't revert to current version {current_version}"
            )));
        }
        let target = snap
            .job_version(namespace, &req.job_id, req.job_version)
            .ok_or_else(|| {
                ServerError::not_found(format!(
                    "job {:?} has no version {}",
                    req.job_id, req.job_version
                ))
            })?;
        let job = (*target).clone();
        let now = now_nanos();
        let eval = needs_eval(&job).then(|| new_eval(&job, EVAL_TRIGGER_JOB_REGISTER, 0, now));
        let eval_id = eval.as_ref().map(|e| e.id.clone()).unwrap_or_default();
        let resp = self
            .apply(Command::JobRegister {
                job,
                eval,
                submit_time: now,
                submission: None,
            })
            .await?;
        Ok(JobRegisterResponse {
            eval_id,
            eval_create_index: resp.eval_create_index.unwrap_or(0),
            job_modify_index: resp.job_modify_index.unwrap_or(resp.index),
            warnings: String::new(),
            index: resp.index,
        })
    }
}

fn promote_command(
    snap: &StateSnapshot,
    d: &Deployment,
    job: &Job,
    req: &DeploymentPromoteRequest,
    now: i64,
) -> Result<Command, ServerError> {
    if !d.is_active() {
        return Err(ServerError::bad_request(
            "can't promote terminal deployment",
        ));
    }
    if d.status == DeploymentStatus::Paused {
        return Err(ServerError::bad_request(
            "can't promote a paused deployment; resume it first (deployment resume)",
        ));
    }
    let groups = req.groups.clone().unwrap_or_default();
    if !req.all && groups.is_empty() {
        return Err(ServerError::bad_request(
            "nothing to promote: set All, or list the Groups to promote",
        ));
    }
    let mut problems = Vec::new();
    let mut any = false;
    for (name, s) in &d.task_groups {
        if !(req.all || groups.contains(name)) || s.desired_canaries == 0 {
            continue;
        }
        any = true;
        let healthy = s.healthy_canaries(|id| snap.alloc(id)).len();
        if (healthy as i64) < s.desired_canaries {
            problems.push(format!(
                "task group {name:?} has {healthy}/{} healthy allocations",
                s.desired_canaries
            ));
        }
    }
    for g in &groups {
        if !d.task_groups.contains_key(g) {
            problems.push(format!("deployment has no task group {g:?}"));
        }
    }
    if !problems.is_empty() {
        return Err(ServerError::bad_request(format!(
            "can't promote: {}",
            problems.join("; ")
        )));
    }
    if !any {
        return Err(ServerError::bad_request(
            "no canaries to promote: the deployment's task groups place none",
        ));
    }
    Ok(Command::DeploymentPromote {
        deployment_id: d.id.clone(),
        all: req.all,
        groups,
        eval: Some(watcher_eval(job, d, now)),
    })
}

fn pause_command(d: &Deployment, job: &Job, pause: bool, now: i64) -> Result<Command, ServerError> {
    if !d.is_active() {
        let verb = if pause { "pause" } else { "resume" };
        return Err(ServerError::bad_request(format!(
            "can't {verb} terminal deployment"
        )));
    }
    if matches!(
        d.status,
        DeploymentStatus::Pending | DeploymentStatus::Blocked
    ) {
        let verb = if pause { "pause" } else { "resume" };
        return Err(ServerError::bad_request(format!(
            "can't {verb} a {} multiregion deployment: it waits for its peer regions (use \
             `deployment unblock` for a blocked one, `deployment fail` to stop the rollout)",
            d.status.as_str()
        )));
    }
    let (status, desc, eval) = if pause {
        (DeploymentStatus::Paused, DEPLOYMENT_DESC_PAUSED, None)
    } else {
        (
            DeploymentStatus::Running,
            d.running_description(),
            Some(watcher_eval(job, d, now)),
        )
    };
    Ok(status_command(d, status, desc, eval, now))
}

/// Deployment `d` moves to `status` (described as `desc`), with `eval` to follow.
pub(crate) fn status_command(
    d: &Deployment,
    status: DeploymentStatus,
    desc: &str,
    eval: Option<model::eval::Evaluation>,
    now: i64,
) -> Command {
    Command::DeploymentStatus {
        update: DeploymentStatusUpdate {
            deployment_id: d.id.clone(),
            status,
            status_description: desc.into(),
        },
        job: None,
        eval,
        submit_time: now,
    }
}

fn health_command(
    snap: &StateSnapshot,
    d: &Deployment,
    job: &Job,
    req: &DeploymentAllocHealthRequest,
    now: i64,
) -> Result<Command, ServerError> {
    if !d.is_active() {
        return Err(ServerError::bad_request(
            "can't set health of allocations for a terminal deployment",
        ));
    }
    let healthy = req.healthy_allocation_ids.clone().unwrap_or_default();
    let unhealthy = req.unhealthy_allocation_ids.clone().unwrap_or_default();
    if healthy.is_empty() && unhealthy.is_empty() {
        return Err(ServerError::bad_request(
            "no allocations given: set HealthyAllocationIDs or UnhealthyAllocationIDs",
        ));
    }
    let mut revert = false;
    for id in healthy.iter().chain(&unhealthy) {
        let a = snap
            .alloc(id)
            .ok_or_else(|| ServerError::bad_request(format!("unknown allocation {id:?}")))?;
        if a.deployment_id != d.id {
            return Err(ServerError::bad_request(format!(
                "allocation {id:?} is not part of deployment {:?}",
                d.id
            )));
        }
        if unhealthy.contains(id) {
            revert |= d
                .task_groups
                .get(&a.task_group)
                .is_some_and(|s| s.auto_revert);
        }
    }
    // Unhealthy allocations fail the deployment at once (rolling back with auto_revert).
    let (update, revert_job, eval) = if unhealthy.is_empty() {
        (None, None, Some(watcher_eval(job, d, now)))
    } else {
        match fail_command(
            snap,
            d,
            job,
            DEPLOYMENT_DESC_FAILED_ALLOCATIONS,
            revert,
            now,
        ) {
            Command::DeploymentStatus {
                update, job, eval, ..
            } => (Some(update), job, eval),
            _ => (None, None, Some(watcher_eval(job, d, now))),
        }
    };
    Ok(Command::DeploymentAllocHealth {
        deployment_id: d.id.clone(),
        healthy,
        unhealthy,
        timestamp: now,
        update,
        job: revert_job,
        eval,
    })
}
