//! `Job.Scale` (Nomad's): a group's count changed as a new job version with its evaluation, and a
//! scaling event kept for the group — one raft entry, checked against the job as it was read; and
//! the scaling policies, which are the jobs' group `scaling` blocks, named by a stable ID.

use super::job::{needs_eval, new_eval};
use crate::error::ServerError;
use crate::server::Server;
use model::scaling::{
    ScalingEvent, ScalingPolicy, ScalingRequest, TARGET_GROUP, TARGET_JOB, TARGET_NAMESPACE,
};
use model::wire::JobRegisterResponse;
use model::{Job, JobType};
use state::{Command, StateSnapshot};

impl Server {
    /// Scales `job_id`'s group as `req` says (forwarded to the leader).
    pub async fn job_scale(
        &self,
        namespace: &str,
        job_id: &str,
        req: ScalingRequest,
    ) -> Result<JobRegisterResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::JobScale>(
                    &leader,
                    &crate::methods::InNamespace {
                        namespace: namespace.to_string(),
                        request: (job_id.to_string(), req),
                    },
                )
                .await
            }
            None => self.job_scale_local(namespace, job_id, req).await,
        }
    }

    pub(crate) async fn job_scale_local(
        &self,
        namespace: &str,
        job_id: &str,
        req: ScalingRequest,
    ) -> Result<JobRegisterResponse, ServerError> {
        validate_request(namespace, job_id, &req)?;
        let group = req.target[TARGET_GROUP].clone();
        let snap = self.state().snapshot();
        let job = snap
            .job(namespace, job_id)
            .ok_or_else(|| ServerError::not_found(format!("job {job_id:?} not found")))?;
        if job.is_multiregion() && req.count.is_some() {
            return Err(ServerError::bad_request(format!(
                "job {job_id:?} is a multiregion job: scaling one region's copy alone is not \
                 supported yet (its rollout waits for its peer regions); change the counts in its \
                 multiregion block and run it again"
            )));
        }
        if job.job_type == Some(JobType::System) && req.count.is_some_and(|c| c > 1) {
            return Err(ServerError::bad_request(
                r#"jobs of type "system" can only be scaled between 0 and 1"#,
            ));
        }
        let tg = job
            .task_groups
            .iter()
            .find(|g| g.name == group)
            .ok_or_else(|| {
                ServerError::bad_request(format!(
                    "task group {group:?} specified for scaling does not exist in job"
                ))
            })?;
        let now = super::now_nanos();
        let previous = i64::from(tg.count.unwrap_or(1));
        let event = ScalingEvent {
            time: now,
            count: req.count,
            previous_count: previous,
            message: req.message.clone(),
            error: req.error,
            meta: req.meta.clone(),
            ..ScalingEvent::default()
        };
        let mut eval = None;
        if let Some(count) = req.count {
            if let Some(policy) = &tg.scaling {
                let min = policy.min.unwrap_or(previous);
                let max = policy.max.unwrap_or(i64::MAX);
                if count < min {
                    return Err(ServerError::bad_request(format!(
                        "group count was less than scaling policy minimum: {count} < {min}"
                    )));
                }
                if count > max {
                    return Err(ServerError::bad_request(format!(
                        "group count was greater than scaling policy maximum: {count} > {max}"
                    )));
                }
            }
            let mut scaled = (*job).clone();
            for g in scaled.task_groups.iter_mut().filter(|g| g.name == group) {
                g.count = Some(i32::try_from(count).unwrap_or(i32::MAX));
            }
            self.check_job_limits(&scaled)?;
            if let Some(d) = snap.latest_deployment_by_job(namespace, job_id) {
                if d.is_active() && Some(d.job_create_index) == job.create_index {
                    return Err(ServerError::bad_request(
                        "job scaling blocked due to active deployment",
                    ));
                }
            }
            let current = job.job_modify_index.unwrap_or(0);
            if req.job_modify_index > 0 && req.job_modify_index != current {
                return Err(ServerError::bad_request(format!(
                    "Enforcing job modify index {}: job exists with conflicting job modify index: {current}",
                    req.job_modify_index
                )));
            }
            if needs_eval(&job) {
                eval = Some(new_eval(&job, model::eval::EVAL_TRIGGER_SCALING, 0, now));
            }
        }
        let eval_id = eval.as_ref().map(|e| e.id.clone()).unwrap_or_default();
        let resp = self
            .apply(Command::JobScale {
                namespace: namespace.to_string(),
                job_id: job_id.to_string(),
                group,
                count: req.count,
                job_modify_index: job.job_modify_index.unwrap_or(0),
                eval,
                event,
                submit_time: now,
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

/// Nomad's `JobScaleRequest.Validate`.
fn validate_request(
    namespace: &str,
    job_id: &str,
    req: &ScalingRequest,
) -> Result<(), ServerError> {
    if let Some(ns) = req.target.get(TARGET_NAMESPACE).filter(|ns| !ns.is_empty()) {
        if ns != namespace {
            return Err(ServerError::bad_request(
                "namespace in payload did not match header",
            ));
        }
    }
    if let Some(job) = req.target.get(TARGET_JOB).filter(|j| !j.is_empty()) {
        if job != job_id {
            return Err(ServerError::bad_request(
                "job ID in payload did not match URL",
            ));
        }
    }
    if req.target.get(TARGET_GROUP).is_none_or(String::is_empty) {
        return Err(ServerError::bad_request(
            "missing task group name for scaling action",
        ));
    }
    if let Some(count) = req.count {
        if count < 0 {
            return Err(ServerError::bad_request(
                "scaling action count can't be negative",
            ));
        }
        if req.error {
            return Err(ServerError::bad_request(
                "scaling action should not contain count if error is true",
            ));
        }
        if i32::try_from(count).is_err() {
            return Err(ServerError::bad_request(format!(
                "new scaling count is too large for TaskGroup.Count (int): {count}"
            )));
        }
    }
    Ok(())
}

/// A group's policy ID: the same for every version of the job (Nomad keeps a policy's ID while its
/// target stays), derived from the target so every server names it alike.
pub fn policy_id(namespace: &str, job_id: &str, group: &str) -> String {
    crate::leader::derived_id("scaling-policy", &format!("{namespace}/{job_id}/{group}"))
}

/// The scaling policies of one job, as `/v1/scaling/policy/:id` shows them.
pub fn job_policies(job: &Job) -> Vec<ScalingPolicy> {
    let ns = job
        .namespace
        .clone()
        .unwrap_or_else(|| model::job::DEFAULT_NAMESPACE.into());
    job.task_groups
        .iter()
        .filter_map(|g| {
            let mut p = g.scaling.clone()?;
            p.id = policy_id(&ns, &job.id, &g.name);
            p.namespace.clone_from(&ns);
            p.target = [
                (TARGET_NAMESPACE.to_string(), ns.clone()),
                (TARGET_JOB.to_string(), job.id.clone()),
                (TARGET_GROUP.to_string(), g.name.clone()),
            ]
            .into();
            p.create_index = job.create_index.unwrap_or(0);
            p.modify_index = job.job_modify_index.unwrap_or(0);
            Some(p)
        })
        .collect()
}

/// Every scaling policy in `namespace` (every namespace with `None`).
pub fn policies(snap: &StateSnapshot, namespace: Option<&str>) -> Vec<ScalingPolicy> {
    snap.jobs(namespace, "")
        .iter()
        .flat_map(|j| job_policies(j))
        .collect()
}
