//! Garbage collection of the cluster's state, as Nomad's core scheduler does it (`core_sched.go`):
//! finished jobs with their evaluations and allocations, terminal evaluations with their
//! allocations, terminal deployments, down nodes. [`collect`] is pure (a snapshot and the time in,
//! what may go out); the leader's loop runs it every `job_gc_interval` with the thresholds of the
//! `server` block, and `/v1/system/gc` runs it at once with every threshold at zero. What is
//! collected goes through raft like any write, in bounded entries.

use model::alloc::Allocation;
use model::eval::Evaluation;
use model::{ClientStatus, DesiredStatus, Job, JobStatus, JobType};
use state::StateSnapshot;
use std::collections::BTreeSet;
use std::time::Duration;

/// How old each kind must be before it is collected (Nomad's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// `eval_gc_threshold` (1 h).
    pub eval: Duration,
    /// `batch_eval_gc_threshold` (24 h): evaluations of batch jobs.
    pub batch_eval: Duration,
    /// `job_gc_threshold` (4 h).
    pub job: Duration,
    /// `node_gc_threshold` (24 h).
    pub node: Duration,
    /// `deployment_gc_threshold` (1 h).
    pub deployment: Duration,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            eval: Duration::from_secs(3600),
            batch_eval: Duration::from_secs(24 * 3600),
            job: Duration::from_secs(4 * 3600),
            node: Duration::from_secs(24 * 3600),
            deployment: Duration::from_secs(3600),
        }
    }
}

impl Thresholds {
    /// `/v1/system/gc`: everything eligible, whatever its age.
    pub fn forced() -> Thresholds {
        Thresholds {
            eval: Duration::ZERO,
            batch_eval: Duration::ZERO,
            job: Duration::ZERO,
            node: Duration::ZERO,
            deployment: Duration::ZERO,
        }
    }
}

/// What may be removed, each with the modify index it was judged at: the raft entry removes an
/// object only if it is still at that index, so nothing that changed after it was judged (a job
/// registered again, an allocation whose client reconnected) is ever collected.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Garbage {
    pub evals: BTreeSet<(String, u64)>,
    pub allocs: BTreeSet<(String, u64)>,
    /// (namespace, job ID, modify index), purged with their versions and summaries.
    pub jobs: BTreeSet<(String, String, u64)>,
    pub nodes: BTreeSet<(String, u64)>,
    pub deployments: BTreeSet<(String, u64)>,
}

impl Garbage {
    pub fn is_empty(&self) -> bool {
        self.evals.is_empty()
            && self.allocs.is_empty()
            && self.jobs.is_empty()
            && self.nodes.is_empty()
            && self.deployments.is_empty()
    }
}

fn cutoff(now: i64, threshold: Duration) -> i64 {
    now.saturating_sub(i64::try_from(threshold.as_nanos()).unwrap_or(i64::MAX))
}

/// Everything eligible at `now` (Unix nanoseconds) under `t`.
pub fn collect(snap: &StateSnapshot, now: i64, t: &Thresholds) -> Garbage {
    let mut g = Garbage::default();
    job_gc(snap, cutoff(now, t.job), now, &mut g);
    eval_gc(
        snap,
        cutoff(now, t.eval),
        cutoff(now, t.batch_eval),
        now,
        &mut g,
    );
    orphan_gc(snap, cutoff(now, t.eval), now, &mut g);
    deployment_gc(snap, cutoff(now, t.deployment), &mut g);
    node_gc(snap, cutoff(now, t.node), &mut g);
    g
}

/// Nomad's `jobIsGCable`: periodic and parameterized jobs only once stopped; others once dead and
/// stopped, or dead batch and sysbatch jobs.
fn job_gc_able(job: &Job) -> bool {
    let periodic = job
        .periodic
        .as_ref()
        .is_some_and(|p| p.enabled != Some(false));
    // A dispatched child carries its parent's parameterized block but is no template (Nomad's
    // `IsParameterized` is false for it).
    if periodic || (job.parameterized.is_some() && !job.dispatched) {
        return job.stop;
    }
    if job.status != Some(JobStatus::Dead) {
        return false;
    }
    job.stop || matches!(job.job_type, Some(JobType::Batch | JobType::Sysbatch))
}

/// Nomad's `jobGC`: a collectable job submitted before the cutoff whose every evaluation is
/// collectable goes, with its evaluations and their allocations.
fn job_gc(snap: &StateSnapshot, cutoff: i64, now: i64, g: &mut Garbage) {
    for job in snap.jobs(None, "") {
        if !job_gc_able(&job) || job.submit_time.unwrap_or(0) > cutoff {
            continue;
        }
        let ns = job.namespace.clone().unwrap_or_default();
        let mut evals = Vec::new();
        let mut allocs = Vec::new();
        let mut all = true;
        for eval in snap.evals_by_job(&ns, &job.id) {
            match eval_verdict(snap, &eval, Some(&job), cutoff, true, now) {
                (true, ids) => {
                    evals.push((eval.id.clone(), eval.modify_index));
                    allocs.extend(ids);
                }
                (false, _) => {
                    all = false;
                    break;
                }
            }
        }
        if all {
            g.evals.extend(evals);
            g.allocs.extend(allocs);
            g.jobs
                .insert((ns, job.id.clone(), job.modify_index.unwrap_or(0)));
        }
    }
}

/// Nomad's `evalGC`: terminal evaluations older than the cutoff (batch ones, the batch cutoff)
/// whose allocations may all go; allocations that may go are collected either way.
fn eval_gc(snap: &StateSnapshot, cutoff: i64, batch_cutoff: i64, now: i64, g: &mut Garbage) {
    for eval in snap.evals(None, "") {
        let eval_cutoff = if eval.eval_type == JobType::Batch {
            batch_cutoff
        } else {
            cutoff
        };
        let job = snap.job(&eval.namespace, &eval.job_id);
        let (gc, allocs) = eval_verdict(snap, &eval, job.as_deref(), eval_cutoff, false, now);
        if gc {
            g.evals.insert((eval.id.clone(), eval.modify_index));
        }
        g.allocs.extend(allocs);
    }
}

/// Allocations whose evaluation is gone (a collection that skipped one that changed, or one cut
/// short between its entries) are reached through no evaluation: collected on their own when
/// they may go.
fn orphan_gc(snap: &StateSnapshot, cutoff: i64, now: i64, g: &mut Garbage) {
    for a in snap.allocs(None, "") {
        if snap.eval(&a.eval_id).is_some() {
            continue;
        }
        let job = snap.job(&a.namespace, &a.job_id);
        if alloc_gc_able(&a, job.as_deref(), now, cutoff) {
            g.allocs.insert((a.id.clone(), a.modify_index));
        }
    }
}

/// Nomad's `gcEval`: whether the evaluation may go, and which of its allocations may.
fn eval_verdict(
    snap: &StateSnapshot,
    eval: &Evaluation,
    job: Option<&Job>,
    cutoff: i64,
    allow_batch: bool,
    now: i64,
) -> (bool, Vec<(String, u64)>) {
    if !eval.is_terminal() || eval.modify_time > cutoff {
        return (false, Vec::new());
    }
    let allocs = snap.allocs_by_eval(&eval.id);
    if eval.eval_type == JobType::Batch {
        let collect =
            job.is_none_or(|j| j.status == Some(JobStatus::Dead) && (j.stop || allow_batch));
        if !collect {
            // A running batch job keeps its allocations (the scheduler would run them again),
            // but those of earlier versions may go.
            let job_modify_index = job.and_then(|j| j.job_modify_index).unwrap_or(0);
            let old: Vec<(String, u64)> = allocs
                .iter()
                .filter(|a| {
                    a.create_index < job_modify_index && a.modify_time < cutoff && a.is_terminal()
                })
                .map(|a| (a.id.clone(), a.modify_index))
                .collect();
            return (old.len() == allocs.len(), old);
        }
    }
    let mut gc = true;
    let mut ids = Vec::new();
    for a in &allocs {
        if alloc_gc_able(a, job, now, cutoff) {
            ids.push((a.id.clone(), a.modify_index));
        } else {
            gc = false;
        }
    }
    (gc, ids)
}

/// Nomad's `allocGCEligible`: terminal, old enough, and not an allocation whose replacement the
/// reschedule policy may still want to make.
fn alloc_gc_able(a: &Allocation, job: Option<&Job>, now: i64, cutoff: i64) -> bool {
    if !a.is_terminal() || a.modify_time > cutoff || a.client_status == ClientStatus::Running {
        return false;
    }
    let Some(job) = job.filter(|j| !j.stop && j.status != Some(JobStatus::Dead)) else {
        return true;
    };
    if a.desired_status == DesiredStatus::Stop || a.client_status != ClientStatus::Failed {
        return true;
    }
    let policy = job
        .task_groups
        .iter()
        .find(|g| g.name == a.task_group)
        .and_then(|g| g.reschedule_policy.as_ref());
    let Some(policy) = policy else {
        return true;
    };
    let unlimited = policy.unlimited.unwrap_or(false);
    if !unlimited && policy.attempts.unwrap_or(0) == 0 {
        return true;
    }
    if !a.next_allocation.is_empty() {
        return true;
    }
    if unlimited {
        return false;
    }
    let Some(last) = a.reschedule_tracker.as_ref().and_then(|t| t.events.last()) else {
        return false;
    };
    let interval = policy.interval.map_or(0, |d| d.0);
    now - last.reschedule_time > interval
}

/// Nomad's `deploymentGC`: terminal deployments last changed before the cutoff whose allocations
/// are all terminal.
fn deployment_gc(snap: &StateSnapshot, cutoff: i64, g: &mut Garbage) {
    for d in snap.deployments(None, "") {
        if d.is_active() || d.modify_time > cutoff {
            continue;
        }
        if snap
            .allocs_by_deployment(&d.id)
            .iter()
            .all(|a| a.is_terminal())
        {
            g.deployments.insert((d.id.clone(), d.modify_index));
        }
    }
}

/// Nomad's `nodeGC`: nodes down since before the cutoff with no live allocation.
fn node_gc(snap: &StateSnapshot, cutoff: i64, g: &mut Garbage) {
    let cutoff_secs = cutoff.div_euclid(1_000_000_000);
    for node in snap.nodes("") {
        if node.status != model::node::NodeStatus::Down || node.status_updated_at > cutoff_secs {
            continue;
        }
        if snap
            .allocs_by_node(&node.id)
            .iter()
            .all(|a| a.is_terminal())
        {
            g.nodes.insert((node.id.clone(), node.modify_index));
        }
    }
}

/// Objects per `Gc` raft entry.
const GC_ENTRY_OBJECTS_MAX: usize = 1024;

/// The leader's periodic collection, every `job_gc_interval` with the configured thresholds.
pub(crate) async fn run(
    server: crate::server::Server,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let every = server.config().gc_interval;
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        let garbage = collect(
            &server.state().snapshot(),
            crate::endpoints::now_nanos(),
            &server.config().gc,
        );
        if let Err(e) = reap(&server, &garbage).await {
            tracing::warn!(error = %e, "garbage collection stopped early; the next round goes on");
        }
    }
}

/// Removes `g` through raft, evaluations and allocations first, in bounded entries.
pub(crate) async fn reap(
    server: &crate::server::Server,
    g: &Garbage,
) -> Result<(), crate::error::ServerError> {
    if g.is_empty() {
        return Ok(());
    }
    tracing::info!(
        evals = g.evals.len(),
        allocs = g.allocs.len(),
        jobs = g.jobs.len(),
        deployments = g.deployments.len(),
        nodes = g.nodes.len(),
        "garbage collecting"
    );
    let empty = || state::Command::Gc {
        evals: Vec::new(),
        allocs: Vec::new(),
        jobs: Vec::new(),
        deployments: Vec::new(),
        nodes: Vec::new(),
    };
    let evals: Vec<_> = g.evals.iter().cloned().collect();
    let allocs: Vec<_> = g.allocs.iter().cloned().collect();
    // Allocations first: an evaluation never goes while its allocations stay.
    for chunk in allocs.chunks(GC_ENTRY_OBJECTS_MAX) {
        let mut cmd = empty();
        if let state::Command::Gc { allocs, .. } = &mut cmd {
            *allocs = chunk.to_vec();
        }
        server.apply(cmd).await?;
    }
    for chunk in evals.chunks(GC_ENTRY_OBJECTS_MAX) {
        let mut cmd = empty();
        if let state::Command::Gc { evals, .. } = &mut cmd {
            *evals = chunk.to_vec();
        }
        server.apply(cmd).await?;
    }
    let jobs: Vec<_> = g.jobs.iter().cloned().collect();
    for chunk in jobs.chunks(GC_ENTRY_OBJECTS_MAX) {
        let mut cmd = empty();
        if let state::Command::Gc { jobs, .. } = &mut cmd {
            *jobs = chunk.to_vec();
        }
        server.apply(cmd).await?;
    }
    let deployments: Vec<_> = g.deployments.iter().cloned().collect();
    for chunk in deployments.chunks(GC_ENTRY_OBJECTS_MAX) {
        let mut cmd = empty();
        if let state::Command::Gc { deployments, .. } = &mut cmd {
            *deployments = chunk.to_vec();
        }
        server.apply(cmd).await?;
    }
    let nodes: Vec<_> = g.nodes.iter().cloned().collect();
    for chunk in nodes.chunks(GC_ENTRY_OBJECTS_MAX) {
        let mut cmd = empty();
        if let state::Command::Gc { nodes, .. } = &mut cmd {
            *nodes = chunk.to_vec();
        }
        server.apply(cmd).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::testkit::{alloc, eval, job, node, Cluster};
    use model::EvalStatus;
    use state::Command;

    const HOUR: i64 = 3600 * 1_000_000_000;
    const T0: i64 = 1_714_564_800_000_000_000;

    /// A batch job `id` with one evaluation and one allocation, both finished at `T0`.
    fn finished_batch(c: &mut Cluster, id: &str, alloc_status: &str) -> (String, String) {
        let mut j = job(id, 1, 100, 64);
        j.job_type = Some(JobType::Batch);
        c.register(&j, &format!("{id}-e1"));
        let mut e = eval(&format!("{id}-e1"), &j);
        e.status = EvalStatus::Complete;
        e.eval_type = JobType::Batch;
        e.modify_time = T0;
        c.apply(Command::EvalUpsert { evals: vec![e] });
        let mut a = alloc(&format!("{id}-a1"), &j, "n1", 100, 64);
        a.eval_id = format!("{id}-e1");
        a.client_status = alloc_status.into();
        a.modify_time = T0;
        c.apply(Command::AllocUpsert { allocs: vec![a] });
        (format!("{id}-e1"), format!("{id}-a1"))
    }

    fn ids<T: Clone>(set: &BTreeSet<(String, T)>) -> Vec<String> {
        set.iter().map(|(id, _)| id.clone()).collect()
    }

    #[test]
    fn a_finished_batch_job_goes_with_its_evaluation_and_allocation_once_old_enough() {
        let mut c = Cluster::new();
        c.add_node(node("n1", 4000, 4096));
        let (e, a) = finished_batch(&mut c, "etl", "complete");
        let snap = c.snap();
        let job = snap.job("default", "etl").unwrap();
        assert_eq!(job.status, Some(JobStatus::Dead));
        let submit = job.submit_time.unwrap_or(0);
        // Younger than every threshold: nothing.
        let young = collect(&snap, submit.max(T0) + HOUR / 2, &Thresholds::default());
        assert!(young.is_empty(), "{young:?}");
        // Forced: everything.
        let g = collect(&snap, submit.max(T0) + 1, &Thresholds::forced());
        assert_eq!(ids(&g.evals), vec![e]);
        assert_eq!(ids(&g.allocs), vec![a]);
        assert_eq!(
            g.jobs
                .iter()
                .map(|(_, id, _)| id.clone())
                .collect::<Vec<_>>(),
            vec!["etl".to_string()]
        );
    }

    #[test]
    fn a_live_allocation_keeps_its_evaluation_and_job() {
        let mut c = Cluster::new();
        c.add_node(node("n1", 4000, 4096));
        finished_batch(&mut c, "etl", "running");
        let g = collect(&c.snap(), T0 + 100 * HOUR, &Thresholds::forced());
        assert!(
            g.jobs.is_empty() && g.evals.is_empty() && g.allocs.is_empty(),
            "{g:?}"
        );
    }

    #[test]
    fn a_running_service_job_stays_and_its_old_finished_evaluations_go() {
        let mut c = Cluster::new();
        c.add_node(node("n1", 4000, 4096));
        let j = job("web", 1, 100, 64);
        c.register(&j, "web-e1");
        let mut done = eval("web-e1", &j);
        done.status = EvalStatus::Complete;
        done.modify_time = T0;
        c.apply(Command::EvalUpsert { evals: vec![done] });
        let g = collect(&c.snap(), T0 + 2 * HOUR, &Thresholds::default());
        assert_eq!(ids(&g.evals), vec!["web-e1".to_string()]);
        assert!(
            g.jobs.is_empty(),
            "a service job is collected only once stopped"
        );
        let g = collect(&c.snap(), T0 + HOUR / 2, &Thresholds::default());
        assert!(g.evals.is_empty(), "younger than eval_gc_threshold");
    }

    #[test]
    fn a_failed_allocation_its_policy_may_still_replace_stays() {
        let mut c = Cluster::new();
        c.add_node(node("n1", 4000, 4096));
        let mut j = job("web", 1, 100, 64);
        j.task_groups[0].reschedule_policy = Some(model::group::ReschedulePolicy {
            unlimited: Some(true),
            ..Default::default()
        });
        c.register(&j, "web-e1");
        let mut done = eval("web-e1", &j);
        done.status = EvalStatus::Complete;
        done.modify_time = T0;
        c.apply(Command::EvalUpsert { evals: vec![done] });
        let mut a = alloc("web-a1", &j, "n1", 100, 64);
        a.eval_id = "web-e1".into();
        a.client_status = "failed".into();
        a.modify_time = T0;
        // Another allocation runs, so the job is not dead.
        let mut live = alloc("web-a2", &j, "n1", 100, 64);
        live.eval_id = "web-e2".into();
        live.client_status = "running".into();
        c.apply(Command::AllocUpsert {
            allocs: vec![a, live],
        });
        assert_eq!(
            c.snap().job("default", "web").unwrap().status,
            Some(JobStatus::Running)
        );
        let g = collect(&c.snap(), T0 + 100 * HOUR, &Thresholds::forced());
        assert!(g.allocs.is_empty(), "{g:?}");
        assert!(g.evals.is_empty(), "its evaluation stays with it");
    }

    #[test]
    fn down_nodes_without_live_allocations_go() {
        let mut c = Cluster::new();
        let mut gone = node("gone", 4000, 4096);
        gone.status = "down".into();
        gone.status_updated_at = T0 / 1_000_000_000;
        c.add_node(gone);
        let mut busy = node("busy", 4000, 4096);
        busy.status = "down".into();
        busy.status_updated_at = T0 / 1_000_000_000;
        c.add_node(busy);
        c.add_node(node("up", 4000, 4096));
        let j = job("web", 1, 100, 64);
        c.register(&j, "e1");
        let mut a = alloc("a1", &j, "busy", 100, 64);
        a.client_status = "running".into();
        c.apply(Command::AllocUpsert { allocs: vec![a] });
        let g = collect(&c.snap(), T0 + 25 * HOUR, &Thresholds::default());
        assert_eq!(ids(&g.nodes), vec!["gone".to_string()]);
        let g = collect(&c.snap(), T0 + HOUR, &Thresholds::default());
        assert!(g.nodes.is_empty(), "down for less than node_gc_threshold");
    }

    #[test]
    fn the_entry_skips_what_changed_after_it_was_judged() {
        let mut c = Cluster::new();
        c.add_node(node("n1", 4000, 4096));
        finished_batch(&mut c, "etl", "complete");
        let g = collect(&c.snap(), T0 + 100 * HOUR, &Thresholds::forced());
        // The job is registered again (a new version) before the collection commits.
        let mut again = job("etl", 2, 100, 64);
        again.job_type = Some(JobType::Batch);
        c.register(&again, "etl-e2");
        c.apply(Command::Gc {
            evals: g.evals.iter().cloned().collect(),
            allocs: g.allocs.iter().cloned().collect(),
            jobs: g.jobs.iter().cloned().collect(),
            deployments: Vec::new(),
            nodes: Vec::new(),
        });
        let snap = c.snap();
        assert!(
            snap.job("default", "etl").is_some(),
            "the new version is kept"
        );
        assert!(snap.eval("etl-e2").is_some());
        assert!(
            snap.eval("etl-e1").is_none(),
            "the old evaluation still went"
        );
    }

    #[test]
    fn a_finished_dispatched_child_goes_and_its_template_stays() {
        let mut c = Cluster::new();
        c.add_node(node("n1", 4000, 4096));
        let mut parent = job("tmpl", 1, 100, 64);
        parent.job_type = Some(JobType::Batch);
        parent.parameterized = Some(Default::default());
        c.register(&parent, "tmpl-e0");
        let mut child = parent.clone();
        child.id = "tmpl/dispatch-1".into();
        child.parent_id = "tmpl".into();
        child.dispatched = true;
        c.register(&child, "child-e1");
        let mut e = eval("child-e1", &child);
        e.status = EvalStatus::Complete;
        e.eval_type = JobType::Batch;
        e.modify_time = T0;
        c.apply(Command::EvalUpsert { evals: vec![e] });
        let mut a = alloc("child-a1", &child, "n1", 100, 64);
        a.eval_id = "child-e1".into();
        a.client_status = "complete".into();
        a.modify_time = T0;
        c.apply(Command::AllocUpsert { allocs: vec![a] });
        let g = collect(&c.snap(), T0 + 100 * HOUR, &Thresholds::forced());
        let jobs: Vec<String> = g.jobs.iter().map(|(_, id, _)| id.clone()).collect();
        assert_eq!(jobs, vec!["tmpl/dispatch-1".to_string()]);
        assert_eq!(ids(&g.allocs), vec!["child-a1".to_string()]);
    }

    #[test]
    fn an_allocation_whose_evaluation_is_gone_is_still_collected() {
        let mut c = Cluster::new();
        c.add_node(node("n1", 4000, 4096));
        let (e, a) = finished_batch(&mut c, "etl", "complete");
        c.apply(Command::EvalDelete {
            eval_ids: vec![e],
            alloc_ids: Vec::new(),
        });
        let g = collect(&c.snap(), T0 + 100 * HOUR, &Thresholds::forced());
        assert!(ids(&g.allocs).contains(&a), "{g:?}");
    }
}
