//! `Job.Plan` (`job plan`): a dry run of a registration. The submitted job is put in place of the
//! current one in a read-only overlay of a state snapshot, the scheduler runs on it with an
//! evaluation that asks for annotations, and what it would do comes back. Nothing is written
//! through raft and nothing reaches the eval broker or the plan applier.

use super::job::{needs_eval, new_eval, prepare_job};
use super::now_nanos;
use crate::error::ServerError;
use crate::leader::{seed_from, SnapshotView};
use crate::server::Server;
use model::alloc::Allocation;
use model::deployment::Deployment;
use model::eval::EVAL_TRIGGER_JOB_REGISTER;
use model::node::Node;
use model::wire::JobPlanResponse;
use model::Job;
use scheduler::StateView;
use serde::{Deserialize, Serialize};
use state::StateSnapshot;
use std::sync::Arc;

/// Go's zero `time.Time`, which Nomad sends as `NextPeriodicLaunch` for jobs that are not periodic.
pub const GO_ZERO_TIME: &str = "0001-01-01T00:00:00Z";

/// A plan request, as forwarded between servers. The HTTP layer has already settled the namespace.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobPlanRequest {
    pub job: Job,
    /// Include the diff against the current job.
    pub diff: bool,
}

impl Server {
    pub async fn job_plan(&self, req: JobPlanRequest) -> Result<JobPlanResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => self.forward::<crate::methods::JobPlan>(&leader, &req).await,
            None => self.job_plan_local(req).await,
        }
    }

    pub(crate) async fn job_plan_local(
        &self,
        mut req: JobPlanRequest,
    ) -> Result<JobPlanResponse, ServerError> {
        prepare_job(&mut req.job)?;
        self.check_job_limits(&req.job)?;
        let snap = self.state().snapshot();
        let now = now_nanos();
        crate::env::blocking(move || plan(&snap, req.job, req.diff, now))
            .await
            .map_err(|e| ServerError::internal(format!("job plan panicked: {e}")))?
    }
}

/// The dry run itself: pure but for the evaluation's random ID.
pub(crate) fn plan(
    snap: &StateSnapshot,
    job: Job,
    with_diff: bool,
    now: i64,
) -> Result<JobPlanResponse, ServerError> {
    let ns = job.namespace.clone().unwrap_or_default();
    let existing = snap.job(&ns, &job.id);
    let current_index = existing
        .as_ref()
        .and_then(|j| j.job_modify_index)
        .unwrap_or(0);
    let planned = Arc::new(would_be(existing.as_deref(), job, snap.index()));
    let mut resp = JobPlanResponse {
        job_modify_index: current_index,
        next_periodic_launch: GO_ZERO_TIME.into(),
        index: current_index,
        ..JobPlanResponse::default()
    };
    if needs_eval(&planned) {
        let mut eval = new_eval(&planned, EVAL_TRIGGER_JOB_REGISTER, 0, now);
        eval.annotate_plan = true;
        eval.job_modify_index = planned.job_modify_index.unwrap_or(0);
        let view = PlanView {
            base: SnapshotView::new(snap.clone()),
            job: planned.clone(),
        };
        let outcome = scheduler::schedule(&view, &eval, now, seed_from(&eval.id))
            .map_err(|e| ServerError::internal(format!("job plan: {e}")))?;
        resp.annotations = outcome.plan.annotations;
        resp.failed_tg_allocs = outcome.eval.failed_tg_allocs;
        resp.created_evals = outcome.new_evals;
    }
    if with_diff {
        let mut diff = model::diff::job_diff(existing.as_deref(), Some(&planned), true)
            .map_err(|e| ServerError::internal(format!("failed to create job diff: {e}")))?;
        model::diff::annotate(&mut diff, resp.annotations.as_ref());
        resp.diff = Some(diff);
    }
    Ok(resp)
}

/// The job as registering it would store it: the current one when the spec is unchanged (so
/// nothing is updated), else a new version with a newer JobModifyIndex.
fn would_be(existing: Option<&Job>, mut job: Job, index: u64) -> Job {
    match existing {
        Some(old) if !state::spec_changed(old, &job) => old.clone(),
        Some(old) => {
            job.create_index = old.create_index;
            job.modify_index = Some(index + 1);
            job.job_modify_index = Some(index + 1);
            job.version = Some(old.version.unwrap_or(0) + 1);
            job.status.clone_from(&old.status);
            job
        }
        None => {
            job.create_index = Some(index + 1);
            job.modify_index = Some(index + 1);
            job.job_modify_index = Some(index + 1);
            job.version = Some(0);
            job.status = Some(model::JobStatus::Pending);
            job
        }
    }
}

/// A snapshot with one job replaced by the planned version.
struct PlanView {
    base: SnapshotView,
    job: Arc<Job>,
}

impl PlanView {
    fn is_planned(&self, namespace: &str, id: &str) -> bool {
        self.job.id == id && self.job.namespace.as_deref().unwrap_or_default() == namespace
    }
}

impl StateView for PlanView {
    fn index(&self) -> u64 {
        self.base.index()
    }

    fn job(&self, namespace: &str, id: &str) -> Option<Arc<Job>> {
        if self.is_planned(namespace, id) {
            return Some(self.job.clone());
        }
        self.base.job(namespace, id)
    }

    fn nodes(&self) -> Vec<Arc<Node>> {
        self.base.nodes()
    }

    fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.base.node(id)
    }

    fn csi_volume(&self, namespace: &str, id: &str) -> Option<Arc<model::csi::CSIVolume>> {
        self.base.csi_volume(namespace, id)
    }

    fn csi_volumes_of_plugin(&self, plugin_id: &str) -> Vec<Arc<model::csi::CSIVolume>> {
        self.base.csi_volumes_of_plugin(plugin_id)
    }

    fn host_volume(
        &self,
        namespace: &str,
        id: &str,
    ) -> Option<Arc<model::host_volume::HostVolume>> {
        self.base.host_volume(namespace, id)
    }

    fn host_volume_claims(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Vec<Arc<model::host_volume::TaskGroupHostVolumeClaim>> {
        self.base.host_volume_claims(namespace, job_id)
    }

    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        self.base.allocs_by_job(namespace, job_id)
    }

    fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        self.base.allocs_by_node(node_id)
    }

    fn latest_deployment(&self, namespace: &str, job_id: &str) -> Option<Arc<Deployment>> {
        self.base.latest_deployment(namespace, job_id)
    }

    fn scheduler_config(&self) -> scheduler::SchedulerConfig {
        self.base.scheduler_config()
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
