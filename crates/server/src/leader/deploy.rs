//! The deployment watcher (Nomad's `deploymentwatcher`), a leader loop: it turns what clients report
//! about allocation health into deployment decisions.
//!
//! For each running deployment, in this order: an unhealthy allocation fails it; a group that missed
//! its progress deadline fails it; canaries that are all healthy are promoted when every canaried
//! group has `auto_promote`; otherwise any change in its progress (health counters, promotion)
//! creates an evaluation, so the scheduler places the next batch of a rolling update or marks the
//! deployment successful. A failure with `auto_revert` registers the latest stable job version
//! again, in the same Raft entry.
//!
//! The decisions are a pure function of a state snapshot and the time ([`Watcher::tick`]); the
//! loop ([`run`]) only applies them. Everything the watcher knows is in state, so a new leader
//! starts from scratch: its first tick creates one evaluation per running deployment that has
//! health reported, which costs nothing when there is nothing to do and restarts any rollout the
//! old leader left mid-way.

use crate::endpoints::{new_eval, now_nanos};
use crate::server::Server;
use model::deployment::{
    Deployment, DeploymentStatus, DeploymentStatusUpdate, DEPLOYMENT_DESC_FAILED_ALLOCATIONS,
    DEPLOYMENT_DESC_PROGRESS_DEADLINE,
};
use model::eval::{Evaluation, EVAL_TRIGGER_DEPLOYMENT_WATCHER};
use model::Job;
use state::{Command, StateSnapshot, Table};
use std::collections::HashMap;
use tokio::sync::watch;

/// The longest the loop sleeps without a state change (a backstop; deadlines wake it sooner).
const IDLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// What a deployment's progress looked like at the last tick: any change is worth an evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Progress {
    placed: i64,
    healthy: i64,
    unhealthy: i64,
    promoted: usize,
    status: model::DeploymentStatus,
}

impl Progress {
    fn of(d: &Deployment) -> Progress {
        let mut p = Progress {
            placed: 0,
            healthy: 0,
            unhealthy: 0,
            promoted: 0,
            status: d.status.clone(),
        };
        for s in d.task_groups.values() {
            p.placed += s.placed_allocs;
            p.healthy += s.healthy_allocs;
            p.unhealthy += s.unhealthy_allocs;
            p.promoted += usize::from(s.promoted);
        }
        p
    }
}

/// The watcher's memory: the progress seen per deployment. Bounded by the running deployments
/// (entries of deployments that stopped running are dropped each tick).
#[derive(Debug, Default)]
pub(crate) struct Watcher {
    seen: HashMap<String, Progress>,
}

/// One decision, ready to apply.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub deployment_id: String,
    pub command: Command,
}

impl Watcher {
    pub(crate) fn new() -> Watcher {
        Watcher::default()
    }

    /// A decision about `deployment_id` did not apply: decide again next tick.
    pub(crate) fn forget(&mut self, deployment_id: &str) {
        self.seen.remove(deployment_id);
    }

    /// The decisions for the running deployments in `snap` at `now` (Unix nanoseconds), and the
    /// earliest future progress deadline, when to look again without a state change.
    pub(crate) fn tick(&mut self, snap: &StateSnapshot, now: i64) -> (Vec<Decision>, Option<i64>) {
        let mut out = Vec::new();
        let mut next: Option<i64> = None;
        let mut running = Vec::new();
        for d in snap.deployments(None, "") {
            // A blocked (multiregion) region finished its rollout but is still watched: an
            // allocation that turns unhealthy fails it, and with it its peers' rollout.
            let blocked = d.status == DeploymentStatus::Blocked;
            if d.status != DeploymentStatus::Running && !blocked {
                continue;
            }
            running.push(d.id.clone());
            let Some(job) = snap.job(&d.namespace, &d.job_id) else {
                continue;
            };
            // A stopped job or a newer version: the scheduler cancels the deployment.
            if job.stop
                || job.version.unwrap_or(0) != d.job_version
                || job.create_index.unwrap_or(0) != d.job_create_index
            {
                continue;
            }
            let decision = if blocked {
                unhealthy_command(snap, &d, &job, now)
            } else {
                self.decide(snap, &d, &job, now, &mut next)
            };
            if let Some(command) = decision {
                out.push(Decision {
                    deployment_id: d.id.clone(),
                    command,
                });
            }
        }
        self.seen.retain(|id, _| running.contains(id));
        (out, next)
    }

    fn decide(
        &mut self,
        snap: &StateSnapshot,
        d: &Deployment,
        job: &Job,
        now: i64,
        next: &mut Option<i64>,
    ) -> Option<Command> {
        if let Some(fail) = unhealthy_command(snap, d, job, now) {
            return Some(fail);
        }
        for (name, s) in &d.task_groups {
            if group_done(d, name) {
                continue;
            }
            let Some(by) = s
                .require_progress_by
                .as_deref()
                .and_then(model::time::parse_unix_nanos)
            else {
                continue;
            };
            if by <= now {
                return Some(fail_command(
                    snap,
                    d,
                    job,
                    DEPLOYMENT_DESC_PROGRESS_DEADLINE,
                    s.auto_revert,
                    now,
                ));
            }
            *next = Some(next.map_or(by, |n: i64| n.min(by)));
        }
        if d.requires_promotion() && d.has_auto_promote() && canaries_healthy(snap, d) {
            return Some(Command::DeploymentPromote {
                deployment_id: d.id.clone(),
                all: true,
                groups: Vec::new(),
                eval: Some(watcher_eval(job, d, now)),
            });
        }
        let progress = Progress::of(d);
        let before = self.seen.insert(d.id.clone(), progress.clone());
        let changed = match before {
            Some(before) => before != progress,
            // First sight (a new leader, a new deployment): only health already reported can have
            // left work undone; the placements themselves came with the evaluation that made it.
            None => progress.healthy + progress.unhealthy + progress.promoted as i64 > 0,
        };
        if !changed {
            return None;
        }
        Some(Command::EvalUpsert {
            evals: vec![watcher_eval(job, d, now)],
        })
    }
}

/// A deployment with an unhealthy allocation fails (rolling back where a group says
/// `auto_revert`).
fn unhealthy_command(snap: &StateSnapshot, d: &Deployment, job: &Job, now: i64) -> Option<Command> {
    let unhealthy: Vec<&String> = d
        .task_groups
        .iter()
        .filter(|(_, s)| s.unhealthy_allocs > 0)
        .map(|(name, _)| name)
        .collect();
    if unhealthy.is_empty() {
        return None;
    }
    let revert = unhealthy.iter().any(|g| d.task_groups[*g].auto_revert);
    Some(fail_command(
        snap,
        d,
        job,
        DEPLOYMENT_DESC_FAILED_ALLOCATIONS,
        revert,
        now,
    ))
}

/// Nomad's `doneGroups`: a group is done when it has as many healthy allocations as it wants —
/// its canaries while they await promotion, its count after.
fn group_done(d: &Deployment, name: &str) -> bool {
    let Some(s) = d.task_groups.get(name) else {
        return true;
    };
    let want = if s.desired_canaries > 0 && !s.promoted {
        s.desired_canaries
    } else {
        s.desired_total
    };
    s.healthy_allocs >= want
}

/// Every group awaiting promotion has all its canaries placed, live and healthy.
fn canaries_healthy(snap: &StateSnapshot, d: &Deployment) -> bool {
    d.task_groups
        .values()
        .filter(|s| s.desired_canaries > 0 && !s.promoted)
        .all(|s| s.healthy_canaries(|id| snap.alloc(id)).len() as i64 >= s.desired_canaries)
}

/// An evaluation of the deployment's job by the watcher.
pub(crate) fn watcher_eval(job: &Job, d: &Deployment, now: i64) -> Evaluation {
    let mut eval = new_eval(job, EVAL_TRIGGER_DEPLOYMENT_WATCHER, 0, now);
    eval.deployment_id.clone_from(&d.id);
    eval.job_modify_index = job.job_modify_index.unwrap_or(0);
    eval
}

/// Nomad's `Job.SpecChanged` for two stored versions.
fn same_spec(a: &Job, b: &Job) -> bool {
    let strip = |j: &Job| {
        let mut c = j.clone();
        c.version = None;
        c.stable = None;
        c.submit_time = None;
        c.create_index = None;
        c.modify_index = None;
        c.job_modify_index = None;
        c.status = None;
        c.status_description = None;
        c
    };
    strip(a) == strip(b)
}

/// Fails deployment `d` with `desc`; with `revert`, rolls back to the latest stable version of the
/// job older than the deployment's (Nomad's `handleRollbackValidity`), in the same command, with the
/// evaluation that follows either way.
pub(crate) fn fail_command(
    snap: &StateSnapshot,
    d: &Deployment,
    job: &Job,
    desc: &str,
    revert: bool,
    now: i64,
) -> Command {
    let mut status_description = desc.to_string();
    let mut revert_to = None;
    if revert && job.is_multiregion() {
        // Rolling one region back alone would leave its peers waiting on a version it no
        // longer runs; the registration warned about this.
        status_description = format!(
            "{desc} - auto revert of multiregion jobs is not supported yet: run the previous version's job file again"
        );
    } else if revert {
        let stable = snap
            .job_versions(&d.namespace, &d.job_id)
            .into_iter()
            .filter(|j| j.stable == Some(true) && j.version.unwrap_or(0) < d.job_version)
            .max_by_key(|j| j.version.unwrap_or(0));
        match stable {
            None => {
                status_description = format!("{desc} - no stable job version to auto revert to")
            }
            Some(s) if same_spec(&s, job) => {
                status_description = format!(
                    "{desc} - not rolling back to stable job version {} as current job has same specification",
                    s.version.unwrap_or(0)
                );
            }
            Some(s) => {
                status_description = format!(
                    "{desc} - rolling back to job version {}",
                    s.version.unwrap_or(0)
                );
                revert_to = Some((*s).clone());
            }
        }
    }
    let eval = match &revert_to {
        // The register writes the evaluation with the new version's modify index.
        Some(j) => new_eval(j, EVAL_TRIGGER_DEPLOYMENT_WATCHER, 0, now),
        None => watcher_eval(job, d, now),
    };
    Command::DeploymentStatus {
        update: DeploymentStatusUpdate {
            deployment_id: d.id.clone(),
            status: DeploymentStatus::Failed,
            status_description,
        },
        job: revert_to,
        eval: Some(eval),
        submit_time: now,
    }
}

/// The watcher's loop: tick after every change to deployments or jobs, at the next progress
/// deadline, and at least every [`IDLE_WAIT`]; apply what it decides, one command at a time.
pub(crate) async fn run(server: Server, mut stop: watch::Receiver<bool>) {
    let mut watcher = Watcher::new();
    let store = server.state().clone();
    let tables = [Table::Deployments, Table::Jobs];
    let mut snap = store.snapshot();
    loop {
        let now = now_nanos();
        let (decisions, next) = watcher.tick(&snap, now);
        for decision in decisions {
            if *stop.borrow() {
                return;
            }
            if let Err(e) = server.apply(decision.command).await {
                tracing::warn!(deployment = %decision.deployment_id, error = %e,
                    "deployment watcher: applying a decision failed; trying again on the next change");
                watcher.forget(&decision.deployment_id);
            }
        }
        let mut wait = IDLE_WAIT;
        if let Some(at) = next {
            let ns = u64::try_from(at.saturating_sub(now_nanos())).unwrap_or(0);
            wait = wait.min(std::time::Duration::from_nanos(ns));
        }
        let deadline = tokio::time::Instant::now() + wait;
        let last = snap.index().max(1);
        snap = tokio::select! {
            () = super::tasks::stopped(&mut stop) => return,
            s = store.wait_for(&tables, last, deadline) => s,
        };
    }
}

#[cfg(test)]
#[path = "deploy_tests.rs"]
mod tests;
