//! Jobs: register (with its evaluation, in one raft entry), deregister (stop or purge), evaluate.

use super::{new_id, now_nanos};
use crate::error::ServerError;
use crate::server::Server;
use model::eval::{EvalStatus, Evaluation, EVAL_TRIGGER_JOB_DEREGISTER, EVAL_TRIGGER_JOB_REGISTER};
use model::wire::{JobDeregisterResponse, JobRegisterResponse};
use model::Job;
use serde::{Deserialize, Serialize};
use state::Command;

/// A job registration, as forwarded between servers. The HTTP layer has already settled the namespace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRegisterRequest {
    pub job: Job,
    /// Only register if the job's current JobModifyIndex is `job_modify_index` (0: the job must not exist).
    pub enforce_index: bool,
    pub job_modify_index: u64,
    /// Keep the counts of existing groups (`job run -preserve-counts`).
    pub preserve_counts: bool,
    /// The evaluation's priority; 0 uses the job's.
    pub eval_priority: i32,
}

/// Canonicalizes and validates a submitted job; the message lists every problem, as Nomad's does.
impl Server {
    /// What a job may not exceed on this cluster: its namespace must exist, and its groups'
    /// counts add up to at most `job_max_count` (Nomad's message).
    pub(crate) fn check_job_limits(&self, job: &Job) -> Result<(), ServerError> {
        let ns = job
            .namespace
            .as_deref()
            .unwrap_or(model::job::DEFAULT_NAMESPACE);
        let pool = job
            .node_pool
            .as_deref()
            .unwrap_or(model::node_pool::NODE_POOL_DEFAULT);
        if self.state().snapshot().node_pool(pool).is_none() {
            return Err(ServerError::bad_request(format!(
                "job {:?} is in nonexistent node pool {pool:?}: create it with `caravan node pool apply`",
                job.id
            )));
        }
        if self.state().snapshot().namespace(ns).is_none() {
            return Err(ServerError::bad_request(format!(
                "job {:?} is in namespace {ns:?}, which does not exist: create it with `caravan namespace apply {ns}`",
                job.id
            )));
        }
        let total: u64 = job
            .task_groups
            .iter()
            .map(|g| u64::try_from(g.count.unwrap_or(1)).unwrap_or(0))
            .sum();
        let max = self.config().job_max_count;
        if total > max {
            return Err(ServerError::bad_request(format!(
                "total count was greater than configured job_max_count: {total} > {max}"
            )));
        }
        Ok(())
    }
}

pub fn prepare_job(job: &mut Job) -> Result<(), ServerError> {
    job.canonicalize();
    let mut errs = job.validate().err().unwrap_or_default();
    // Cron specs and time zones need the cron and tz tables, which the model does not carry.
    crate::cron::check_job(job, &mut errs);
    errs.into_result()
        .map_err(|errs| ServerError::bad_request(errs.to_string().trim_end().to_string()))
}

/// The register `Warnings` (one per line; `job run` prints them): settings Nomad is deprecating,
/// as Nomad warns about them.
pub(crate) fn register_warnings(job: &Job) -> String {
    let mut out = Vec::new();
    for g in &job.task_groups {
        if g.max_client_disconnect.is_some() {
            out.push(format!(
                "* Group {:?}: max_client_disconnect will be deprecated in favor of disconnect.lost_after",
                g.name
            ));
        }
        if g.stop_after_client_disconnect.is_some() {
            out.push(format!(
                "* Group {:?}: stop_after_client_disconnect will be deprecated in favor of disconnect.stop_on_client_after",
                g.name
            ));
        }
    }
    out.join("\n")
}

/// Periodic and parameterized jobs are templates: registering them creates no evaluation.
pub(crate) fn needs_eval(job: &Job) -> bool {
    if job.dispatched {
        return true;
    }
    let periodic = job
        .periodic
        .as_ref()
        .is_some_and(|p| p.enabled != Some(false));
    !periodic && job.parameterized.is_none()
}

pub(crate) fn new_eval(job: &Job, trigger: &str, priority: i32, now: i64) -> Evaluation {
    Evaluation {
        id: new_id(),
        namespace: job
            .namespace
            .clone()
            .unwrap_or_else(|| model::job::DEFAULT_NAMESPACE.into()),
        priority: if priority > 0 {
            priority
        } else {
            job.priority.unwrap_or(model::job::DEFAULT_PRIORITY)
        },
        eval_type: job.job_type.clone().unwrap_or_else(|| "service".into()),
        triggered_by: trigger.into(),
        job_id: job.id.clone(),
        status: EvalStatus::Pending,
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    }
}

impl Server {
    pub async fn job_register(
        &self,
        req: JobRegisterRequest,
    ) -> Result<JobRegisterResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::JobRegister>(&leader, &req)
                    .await
            }
            None => self.job_register_local(req).await,
        }
    }

    pub(crate) async fn job_register_local(
        &self,
        mut req: JobRegisterRequest,
    ) -> Result<JobRegisterResponse, ServerError> {
        prepare_job(&mut req.job)?;
        self.check_job_limits(&req.job)?;
        let ns = req.job.namespace.clone().unwrap_or_default();
        let snap = self.state().snapshot();
        let existing = snap.job(&ns, &req.job.id);
        if req.enforce_index {
            let current = existing
                .as_ref()
                .and_then(|j| j.job_modify_index)
                .unwrap_or(0);
            if current != req.job_modify_index {
                let why = if req.job_modify_index == 0 {
                    "job already exists".to_string()
                } else if existing.is_none() {
                    "job does not exist".to_string()
                } else {
                    format!("job exists with conflicting job modify index: {current}")
                };
                return Err(ServerError::bad_request(format!(
                    "Enforcing job modify index {}: {why}",
                    req.job_modify_index
                )));
            }
        }
        if req.preserve_counts {
            if let Some(old) = &existing {
                for g in &mut req.job.task_groups {
                    if let Some(prev) = old.task_groups.iter().find(|p| p.name == g.name) {
                        g.count = prev.count;
                    }
                }
            }
        }
        let now = now_nanos();
        let warnings = register_warnings(&req.job);
        let eval = needs_eval(&req.job)
            .then(|| new_eval(&req.job, EVAL_TRIGGER_JOB_REGISTER, req.eval_priority, now));
        let resp = self
            .apply(Command::JobRegister {
                job: req.job,
                eval,
                submit_time: now,
            })
            .await?;
        Ok(JobRegisterResponse {
            eval_id: resp.eval_id.unwrap_or_default(),
            eval_create_index: resp.eval_create_index.unwrap_or(0),
            job_modify_index: resp.job_modify_index.unwrap_or(0),
            warnings,
            index: resp.index,
        })
    }

    /// Stops a job (a new version with `Stop` set) or, with `purge`, removes it.
    pub async fn job_deregister(
        &self,
        namespace: &str,
        job_id: &str,
        purge: bool,
    ) -> Result<JobDeregisterResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::JobDeregister>(
                    &leader,
                    &crate::methods::JobDeregisterArgs {
                        namespace: namespace.to_string(),
                        job_id: job_id.to_string(),
                        purge,
                    },
                )
                .await
            }
            None => self.job_deregister_local(namespace, job_id, purge).await,
        }
    }

    pub(crate) async fn job_deregister_local(
        &self,
        namespace: &str,
        job_id: &str,
        purge: bool,
    ) -> Result<JobDeregisterResponse, ServerError> {
        let job = self
            .state()
            .snapshot()
            .job(namespace, job_id)
            .ok_or_else(|| ServerError::not_found("job not found"))?;
        let now = now_nanos();
        let eval = needs_eval(&job).then(|| new_eval(&job, EVAL_TRIGGER_JOB_DEREGISTER, 0, now));
        let resp = self
            .apply(Command::JobDeregister {
                namespace: namespace.into(),
                job_id: job_id.into(),
                purge,
                eval,
                submit_time: now,
            })
            .await?;
        Ok(JobDeregisterResponse {
            eval_id: resp.eval_id.unwrap_or_default(),
            eval_create_index: resp.eval_create_index.unwrap_or(0),
            job_modify_index: resp.job_modify_index.unwrap_or(resp.index),
            index: resp.index,
            ..JobDeregisterResponse::default()
        })
    }

    /// Sets one version's stability (`PUT /v1/job/:id/stable`); returns the raft index.
    pub async fn job_stability(
        &self,
        args: crate::methods::JobStabilityArgs,
    ) -> Result<u64, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::JobStability>(&leader, &args)
                    .await
            }
            None => self.job_stability_local(args).await,
        }
    }

    pub(crate) async fn job_stability_local(
        &self,
        args: crate::methods::JobStabilityArgs,
    ) -> Result<u64, ServerError> {
        if self
            .state()
            .snapshot()
            .job(&args.namespace, &args.job_id)
            .is_none()
        {
            return Err(ServerError::not_found("job not found"));
        }
        let resp = self
            .apply(Command::JobStability {
                namespace: args.namespace,
                job_id: args.job_id,
                version: args.version,
                stable: args.stable,
            })
            .await?;
        Ok(resp.index)
    }

    /// Creates a new evaluation of a job (`POST /v1/job/:id/evaluate`).
    pub async fn job_evaluate(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Result<JobRegisterResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::JobEvaluate>(
                    &leader,
                    &crate::methods::JobRef {
                        namespace: namespace.to_string(),
                        job_id: job_id.to_string(),
                    },
                )
                .await
            }
            None => self.job_evaluate_local(namespace, job_id).await,
        }
    }

    pub(crate) async fn job_evaluate_local(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Result<JobRegisterResponse, ServerError> {
        let job = self
            .state()
            .snapshot()
            .job(namespace, job_id)
            .ok_or_else(|| ServerError::not_found("job not found"))?;
        if job
            .periodic
            .as_ref()
            .is_some_and(|p| p.enabled != Some(false))
        {
            return Err(ServerError::bad_request("can't evaluate periodic job"));
        }
        if job.parameterized.is_some() {
            return Err(ServerError::bad_request("can't evaluate parameterized job"));
        }
        let mut eval = new_eval(&job, model::eval::EVAL_TRIGGER_JOB_REGISTER, 0, now_nanos());
        eval.job_modify_index = job.job_modify_index.unwrap_or(0);
        let eval_id = eval.id.clone();
        let resp = self
            .apply(Command::EvalUpsert { evals: vec![eval] })
            .await?;
        Ok(JobRegisterResponse {
            eval_id,
            eval_create_index: resp.index,
            job_modify_index: job.job_modify_index.unwrap_or(0),
            warnings: String::new(),
            index: resp.index,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_get_no_evaluation() {
        let mut job = Job {
            id: "j".into(),
            ..Job::default()
        };
        assert!(needs_eval(&job));
        job.periodic = Some(model::PeriodicConfig {
            enabled: Some(true),
            ..Default::default()
        });
        assert!(!needs_eval(&job));
        job.periodic = None;
        job.parameterized = Some(model::ParameterizedJobConfig::default());
        assert!(!needs_eval(&job));
        job.dispatched = true;
        assert!(needs_eval(&job), "a dispatched child runs");
    }

    #[test]
    fn the_older_disconnect_settings_are_accepted_with_a_deprecation_warning() {
        let mut job = Job {
            id: "j".into(),
            task_groups: vec![model::TaskGroup {
                name: "web".into(),
                disconnect: Some(model::group::DisconnectStrategy {
                    lost_after: Some(model::Duration(60_000_000_000)),
                    stop_on_client_after: Some(model::Duration(30_000_000_000)),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Job::default()
        };
        assert_eq!(
            register_warnings(&job),
            "",
            "the disconnect block is current"
        );
        job.task_groups[0].disconnect = None;
        job.task_groups[0].max_client_disconnect = Some(model::Duration(60_000_000_000));
        let w = register_warnings(&job);
        assert!(
            w.contains("Group \"web\"") && w.contains("disconnect.lost_after"),
            "{w}"
        );
    }
}
