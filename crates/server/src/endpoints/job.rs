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
    /// The job's source as its submitter wrote it, kept with the version (`job inspect -hcl`).
    #[serde(default)]
    pub submission: Option<model::job::JobSubmission>,
    /// One region's copy of a multiregion job, stored at exactly this version (the same in every
    /// region; the registration that fanned out chose it).
    #[serde(default)]
    pub multiregion_version: Option<u64>,
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
        let revert = g
            .update
            .as_ref()
            .or(job.update.as_ref())
            .and_then(|u| u.auto_revert)
            .unwrap_or(false);
        if revert && job.is_multiregion() {
            out.push(format!(
                "* Group {:?}: auto_revert is not supported yet for multiregion jobs: a failed deployment is not rolled back",
                g.name
            ));
        }
        if g.max_client_disconnect.is_some() {
            out.push(format!(
                "* Group {:?}: max_client_disconnect will be deprecated in favor of disconnect.lost_after",
                g.name
            ));
        }
        let services = g.services.iter().map(|s| (None, s)).chain(
            g.tasks
                .iter()
                .flat_map(|t| t.services.iter().map(move |s| (Some(&t.name), s))),
        );
        for (task, s) in services {
            if s.provider.as_deref() == Some(model::service_registration::PROVIDER_NOMAD) {
                continue;
            }
            let owner = match task {
                Some(t) => format!("Task {t:?}"),
                None => format!("Group {:?}", g.name),
            };
            out.push(format!(
                "* {owner}: service {:?} uses provider \"consul\", which is not supported yet: it is not registered and its checks do not run (set provider = \"nomad\")",
                s.name
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

/// go-humanize's `Bytes` (SI units), as Nomad's warning prints sizes: `1.0 MB`, `900 B`.
fn human_bytes(n: usize) -> String {
    const UNITS: [&str; 6] = ["B", "kB", "MB", "GB", "TB", "PB"];
    if n < 10 {
        return format!("{n} B");
    }
    #[allow(clippy::cast_precision_loss)]
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if v < 10.0 {
        format!("{v:.1} {}", UNITS[unit])
    } else {
        format!("{v:.0} {}", UNITS[unit])
    }
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
        let mut warnings = register_warnings(&req.job);
        let submission = req.submission.take().and_then(|sub| {
            // Nomad's `submissionController`: too big a source is dropped, the job still runs.
            let max = self.config().job_max_source_size;
            if sub.size() <= max {
                return Some(sub);
            }
            let note = format!(
                "job source size of {} exceeds maximum of {} and will be discarded",
                human_bytes(sub.size()),
                human_bytes(max)
            );
            if !warnings.is_empty() {
                warnings.push('\n');
            }
            warnings.push_str(&note);
            None
        });
        let eval = needs_eval(&req.job)
            .then(|| new_eval(&req.job, EVAL_TRIGGER_JOB_REGISTER, req.eval_priority, now));
        let cmd = match req.multiregion_version {
            Some(version) => Command::JobRegisterAtVersion {
                job: req.job,
                eval,
                submit_time: now,
                version,
                submission,
            },
            None => Command::JobRegister {
                job: req.job,
                eval,
                submit_time: now,
                submission,
            },
        };
        let resp = self.apply(cmd).await?;
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

    /// Names a version of a job, or removes a name (`/v1/job/:id/versions/:name/tag`).
    pub async fn job_tag_version(
        &self,
        args: crate::methods::JobTagArgs,
    ) -> Result<crate::methods::JobTagResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::JobTagVersion>(&leader, &args)
                    .await
            }
            None => self.job_tag_version_local(args).await,
        }
    }

    pub(crate) async fn job_tag_version_local(
        &self,
        args: crate::methods::JobTagArgs,
    ) -> Result<crate::methods::JobTagResponse, ServerError> {
        if args.name.trim().is_empty() {
            return Err(ServerError::bad_request(
                "a version tag needs a name (job tag apply -name NAME)",
            ));
        }
        if args.latest && args.version > 0 {
            return Err(ServerError::bad_request(format!(
                "version must be zero when tagging latest, got: {}",
                args.version
            )));
        }
        // The FSM refuses these too; checked here first so the caller gets a 400, not a failed
        // write.
        if args.description.is_some() {
            let snap = self.state().snapshot();
            let versions = snap.job_versions(&args.namespace, &args.job_id);
            let target = match (args.latest, snap.job(&args.namespace, &args.job_id)) {
                (true, Some(cur)) => cur.version.unwrap_or(0),
                _ => args.version,
            };
            if let Some(other) = versions.iter().find(|v| {
                v.version_tag.as_ref().is_some_and(|t| t.name == args.name)
                    && v.version.unwrap_or(0) != target
            }) {
                return Err(ServerError::bad_request(format!(
                    "tag {:?} already exists on a different version ({}) of job {:?}",
                    args.name,
                    other.version.unwrap_or(0),
                    args.job_id
                )));
            }
        }
        let tag = args
            .description
            .map(|description| model::job::JobVersionTag {
                name: args.name.clone(),
                description,
                tagged_time: now_nanos(),
            });
        if let Some(t) = &tag {
            let chars = t.description.chars().count();
            if chars > model::job::VERSION_TAG_DESCRIPTION_MAX {
                return Err(ServerError::bad_request(format!(
                    "Tagged version description must be under {} characters, currently {chars}",
                    model::job::VERSION_TAG_DESCRIPTION_MAX
                )));
            }
        }
        let resp = self
            .apply(Command::JobVersionTag {
                namespace: args.namespace,
                job_id: args.job_id,
                name: args.name,
                version: args.version,
                latest: args.latest,
                tag: tag.clone(),
            })
            .await?;
        let tag = tag.unwrap_or_default();
        Ok(crate::methods::JobTagResponse {
            name: tag.name,
            description: tag.description,
            tagged_time: tag.tagged_time,
            index: resp.index,
        })
    }

    /// Creates a new evaluation of a job (`POST /v1/job/:id/evaluate`).
    pub async fn job_evaluate(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Result<JobRegisterResponse, ServerError> {
        self.job_evaluate_with(namespace, job_id, false).await
    }

    /// [`Self::job_evaluate`]; with `force_reschedule` (Nomad's `EvalOptions.ForceReschedule`),
    /// the job's failed, not yet replaced allocations of groups that may be rescheduled are
    /// marked to be replaced now, whatever their policy's delay and attempts left.
    pub async fn job_evaluate_with(
        &self,
        namespace: &str,
        job_id: &str,
        force_reschedule: bool,
    ) -> Result<JobRegisterResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::JobEvaluate>(
                    &leader,
                    &crate::methods::JobEvaluateArgs {
                        namespace: namespace.to_string(),
                        job_id: job_id.to_string(),
                        force_reschedule,
                    },
                )
                .await
            }
            None => {
                self.job_evaluate_local(namespace, job_id, force_reschedule)
                    .await
            }
        }
    }

    pub(crate) async fn job_evaluate_local(
        &self,
        namespace: &str,
        job_id: &str,
        force_reschedule: bool,
    ) -> Result<JobRegisterResponse, ServerError> {
        let snap = self.state().snapshot();
        let job = snap
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
        let forced = if force_reschedule {
            force_reschedule_transitions(&job, &snap.allocs_by_job(namespace, job_id))
        } else {
            Default::default()
        };
        // With allocations to force, they and the evaluation go in one entry (Nomad's
        // `AllocUpdateDesiredTransitionRequest`), so the scheduler sees them marked.
        let command = if forced.is_empty() {
            Command::EvalUpsert { evals: vec![eval] }
        } else {
            Command::AllocUpdateDesiredTransition {
                transitions: forced,
                evals: vec![eval],
            }
        };
        let resp = self.apply(command).await?;
        Ok(JobRegisterResponse {
            eval_id,
            eval_create_index: resp.index,
            job_modify_index: job.job_modify_index.unwrap_or(0),
            warnings: String::new(),
            index: resp.index,
        })
    }
}

/// Nomad's `Job.Evaluate` with `ForceReschedule`: each failed allocation not replaced yet (nor
/// already forced) whose group's reschedule policy is enabled (attempts or unlimited) is marked
/// `Reschedule` and `ForceReschedule`, which the reconciler replaces at once.
fn force_reschedule_transitions(
    job: &Job,
    allocs: &[std::sync::Arc<model::Allocation>],
) -> std::collections::BTreeMap<String, model::alloc::DesiredTransition> {
    allocs
        .iter()
        .filter(|a| {
            let enabled = job
                .task_groups
                .iter()
                .find(|g| g.name == a.task_group)
                .and_then(|g| g.reschedule_policy.as_ref())
                .is_some_and(|p| p.attempts.unwrap_or(0) > 0 || p.unlimited == Some(true));
            enabled
                && a.next_allocation.is_empty()
                && a.client_status == "failed"
                && !a.desired_transition.should_force_reschedule()
        })
        .map(|a| {
            let t = model::alloc::DesiredTransition {
                reschedule: Some(true),
                force_reschedule: Some(true),
                ..Default::default()
            };
            (a.id.clone(), t)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn force_reschedule_marks_failed_unreplaced_allocations_of_reschedulable_groups() {
        let policy = |attempts, unlimited| model::group::ReschedulePolicy {
            attempts: Some(attempts),
            unlimited: Some(unlimited),
            ..Default::default()
        };
        let group = |name: &str, p| model::TaskGroup {
            name: name.into(),
            reschedule_policy: p,
            ..Default::default()
        };
        let job = Job {
            id: "j".into(),
            task_groups: vec![
                group("once", Some(policy(1, false))),
                group("always", Some(policy(0, true))),
                group("never", Some(policy(0, false))),
                group("none", None),
            ],
            ..Job::default()
        };
        let alloc = |id: &str, tg: &str, status: &str| model::Allocation {
            id: id.into(),
            task_group: tg.into(),
            client_status: status.into(),
            ..Default::default()
        };
        let mut replaced = alloc("replaced", "once", "failed");
        replaced.next_allocation = "next".into();
        let mut forced = alloc("forced", "once", "failed");
        forced.desired_transition.force_reschedule = Some(true);
        let allocs: Vec<std::sync::Arc<model::Allocation>> = vec![
            alloc("a", "once", "failed"),
            alloc("b", "always", "failed"),
            alloc("c", "never", "failed"),
            alloc("d", "none", "failed"),
            alloc("e", "once", "running"),
            alloc("f", "gone", "failed"),
            replaced,
            forced,
        ]
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
        let marked = force_reschedule_transitions(&job, &allocs);
        assert_eq!(marked.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert!(marked
            .values()
            .all(|t| t.should_reschedule() && t.should_force_reschedule()));
    }

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
