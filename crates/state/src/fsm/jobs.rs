//! Jobs, their versions, summaries and statuses (Nomad's `upsertJobImpl`, `DeleteJobTxn`,
//! `setJobStatus`, `getJobStatus`, `updateSummaryWithJob`, `upsertJobVersion`).

use super::{evals, Txn};
use crate::command::{ApplyResponse, Table};
use crate::error::StateError;
use crate::limits::JOB_TRACKED_VERSIONS;
use crate::tables::{job_namespace, NsKey, Root};
use model::eval::Evaluation;
use model::summary::{JobChildrenSummary, JobSummary, TaskGroupSummary};
use model::{Job, JobStatus, JobType};
use std::collections::BTreeMap;
use std::sync::Arc;

const JOB_NOT_FOUND: &str = "job not found";

/// Jobs whose status to recompute after a write, each with a status to force (`Some("running")` when a
/// live allocation was written) or `None` to compute it. Ordered, so the result never depends on
/// iteration order.
pub(super) type StatusUpdates = BTreeMap<NsKey, Option<JobStatus>>;

/// `JobRegister`. An unchanged spec leaves the stored job alone (same version and JobModifyIndex);
/// the evaluation is written either way, carrying the job's JobModifyIndex.
pub(super) fn register(
    tx: &mut Txn,
    job: &Job,
    eval: Option<&Evaluation>,
    submit_time: i64,
    submission: Option<&model::job::JobSubmission>,
) -> Result<ApplyResponse, StateError> {
    if job.id.is_empty() {
        return Err(StateError::invalid("job ID is required"));
    }
    let ns = job_namespace(job).to_owned();
    let existing = tx.job(&ns, &job.id).cloned();
    let unchanged = existing.as_ref().is_some_and(|old| !spec_changed(old, job));
    // A revert (an older version registered again) brings that version's source along.
    let reverted_source = match (&existing, job.version, submission) {
        (Some(old), Some(v), None) if v < old.version.unwrap_or(0) => {
            tx.job_submission(&ns, &job.id, v).map(|s| (**s).clone())
        }
        _ => None,
    };
    let submission = submission.or(reverted_source.as_ref());
    if !unchanged {
        let mut new = job.clone();
        new.submit_time = Some(submit_time);
        new.stable = Some(false);
        new.version_tag = None;
        upsert_job(tx, new, false);
    }
    let stored = tx
        .job(&ns, &job.id)
        .cloned()
        .expect("just written or found");
    if let Some(sub) = submission {
        // Nomad's `updateJobSubmission`: the servers say which version it belongs to.
        let mut sub = sub.clone();
        sub.namespace.clone_from(&ns);
        sub.job_id.clone_from(&job.id);
        sub.version = stored.version.unwrap_or(0);
        sub.job_modify_index = stored.job_modify_index.unwrap_or(0);
        tx.put_job_submission(sub);
    }
    finish(tx, &ns, &job.id, stored.job_modify_index.unwrap_or(0), eval)
}

/// `JobRegisterAtVersion`: one region's copy of a multiregion job, stored as `version`.
pub(super) fn register_at_version(
    tx: &mut Txn,
    job: &Job,
    eval: Option<&Evaluation>,
    submit_time: i64,
    version: u64,
    submission: Option<&model::job::JobSubmission>,
) -> Result<ApplyResponse, StateError> {
    if job.id.is_empty() {
        return Err(StateError::invalid("job ID is required"));
    }
    let ns = job_namespace(job).to_owned();
    if let Some(old) = tx.job(&ns, &job.id) {
        let have = old.version.unwrap_or(0);
        if have >= version {
            return Err(StateError::Conflict(format!(
                "job {:?} is already at version {have} in this region, not below {version}: \
                 another registration came first; register the multiregion job again",
                job.id
            )));
        }
    }
    let mut new = job.clone();
    new.submit_time = Some(submit_time);
    new.stable = Some(false);
    new.version_tag = None;
    new.version = Some(version);
    upsert_job_at(tx, new, false, Some(version));
    let stored = tx.job(&ns, &job.id).cloned().expect("just written");
    if let Some(sub) = submission {
        let mut sub = sub.clone();
        sub.namespace.clone_from(&ns);
        sub.job_id.clone_from(&job.id);
        sub.version = version;
        sub.job_modify_index = stored.job_modify_index.unwrap_or(0);
        tx.put_job_submission(sub);
    }
    finish(tx, &ns, &job.id, stored.job_modify_index.unwrap_or(0), eval)
}

/// What [`tag_version`] is asked.
pub(super) struct TagVersion<'a> {
    pub ns: &'a str,
    pub job_id: &'a str,
    pub name: &'a str,
    pub version: u64,
    pub latest: bool,
    pub tag: Option<&'a model::job::JobVersionTag>,
}

/// `JobVersionTag` (Nomad's `UpdateJobVersionTag`): names a version, or removes a name. A name
/// is on at most one version of a job; retagging the same version replaces its description.
pub(super) fn tag_version(tx: &mut Txn, req: &TagVersion<'_>) -> Result<(), StateError> {
    let Some(current) = tx.job(req.ns, req.job_id).cloned() else {
        return Err(StateError::NotFound(format!(
            "job {:?} not found in namespace {:?}",
            req.job_id, req.ns
        )));
    };
    let versions = tx.versions_of(req.ns, req.job_id);
    let (target, tag) = match req.tag {
        Some(tag) => {
            let version = if req.latest {
                current.version.unwrap_or(0)
            } else {
                req.version
            };
            if let Some(other) = versions.iter().find(|v| {
                v.version_tag.as_ref().is_some_and(|t| t.name == tag.name)
                    && v.version.unwrap_or(0) != version
            }) {
                return Err(StateError::invalid(format!(
                    "tag {:?} already exists on a different version ({}) of job {:?}",
                    tag.name,
                    other.version.unwrap_or(0),
                    req.job_id
                )));
            }
            let Some(target) = versions
                .iter()
                .find(|v| v.version.unwrap_or(0) == version)
                .cloned()
            else {
                return Err(StateError::NotFound(format!(
                    "job {:?} version {version} not found",
                    req.job_id
                )));
            };
            (target, Some(tag.clone()))
        }
        None => {
            let Some(target) = versions
                .iter()
                .find(|v| v.version_tag.as_ref().is_some_and(|t| t.name == req.name))
                .cloned()
            else {
                return Err(StateError::NotFound(format!(
                    "tag {:?} not found on job {:?}",
                    req.name, req.job_id
                )));
            };
            (target, None)
        }
    };
    let index = tx.index();
    let mut tagged = (*target).clone();
    tagged.version_tag = tag;
    tagged.modify_index = Some(index);
    if current.version == tagged.version {
        let mut cur = (*current).clone();
        cur.version_tag.clone_from(&tagged.version_tag);
        cur.modify_index = Some(index);
        tx.put_job(Arc::new(cur));
    }
    // Replacing a stored version in place: it keeps its submission, and nothing is pruned.
    tx.put_job_version(Arc::new(tagged));
    Ok(())
}

/// What [`scale`] is asked.
pub(super) struct Scale<'a> {
    pub ns: &'a str,
    pub job_id: &'a str,
    pub group: &'a str,
    pub count: Option<i64>,
    pub job_modify_index: u64,
    pub eval: Option<&'a Evaluation>,
    pub event: &'a model::scaling::ScalingEvent,
    pub submit_time: i64,
}

/// `JobScale`: the group's new count as a new job version with its evaluation (refused when the
/// job changed since the request read it), then the scaling event, in one step.
pub(super) fn scale(tx: &mut Txn, req: Scale<'_>) -> Result<ApplyResponse, StateError> {
    let current = tx
        .job(req.ns, req.job_id)
        .cloned()
        .ok_or_else(|| StateError::NotFound(JOB_NOT_FOUND.into()))?;
    if !current.task_groups.iter().any(|g| g.name == req.group) {
        return Err(StateError::invalid(format!(
            "task group {:?} specified for scaling does not exist in job",
            req.group
        )));
    }
    let mut event = req.event.clone();
    let mut response = ApplyResponse {
        index: tx.index(),
        job_modify_index: current.modify_index,
        ..ApplyResponse::default()
    };
    if let Some(count) = req.count {
        let stored = current.job_modify_index.unwrap_or(0);
        if stored != req.job_modify_index {
            return Err(StateError::Conflict(format!(
                "job {:?} changed while it was being scaled (job modify index {stored}, expected {}); try again",
                req.job_id, req.job_modify_index
            )));
        }
        let mut job = (*current).clone();
        for g in job.task_groups.iter_mut().filter(|g| g.name == req.group) {
            g.count = Some(i32::try_from(count).map_err(|_| {
                StateError::invalid(format!("count {count} is too large for a task group"))
            })?);
        }
        job.submit_time = Some(req.submit_time);
        job.stable = Some(false);
        upsert_job(tx, job, false);
        let job_modify_index = tx
            .job(req.ns, req.job_id)
            .and_then(|j| j.job_modify_index)
            .unwrap_or(0);
        response = finish(tx, req.ns, req.job_id, job_modify_index, req.eval)?;
        event.eval_id = req.eval.map(|e| e.id.clone());
    }
    event.create_index = tx.index();
    let mut events = tx
        .scaling_events_of(req.ns, req.job_id)
        .map(|e| (**e).clone())
        .unwrap_or_else(|| model::scaling::JobScalingEvents {
            namespace: req.ns.to_string(),
            job_id: req.job_id.to_string(),
            ..model::scaling::JobScalingEvents::default()
        });
    let list = events
        .scaling_events
        .entry(req.group.to_string())
        .or_default();
    list.insert(0, event);
    list.truncate(model::scaling::SCALING_EVENTS_KEPT);
    events.modify_index = tx.index();
    tx.put_scaling_events(events);
    response.index = tx.index();
    Ok(response)
}

/// `JobDeregister`: with `purge` the job, its versions and summary go; otherwise the job is stopped,
/// which (as in Nomad) makes a new version with `Stop = true`.
pub(super) fn deregister(
    tx: &mut Txn,
    ns: &str,
    job_id: &str,
    purge: bool,
    eval: Option<&Evaluation>,
    submit_time: i64,
) -> Result<ApplyResponse, StateError> {
    if purge {
        delete_job(tx, ns, job_id)?;
    } else {
        let current = tx
            .job(ns, job_id)
            .cloned()
            .ok_or_else(|| StateError::NotFound(JOB_NOT_FOUND.into()))?;
        let mut stopped = (*current).clone();
        stopped.stop = true;
        if submit_time != 0 {
            stopped.submit_time = Some(submit_time);
        }
        upsert_job(tx, stopped, false);
    }
    let index = tx.index();
    finish(tx, ns, job_id, index, eval)
}

/// Writes the command's evaluation (with the job's modify index) and builds the response.
fn finish(
    tx: &mut Txn,
    ns: &str,
    job_id: &str,
    job_modify_index: u64,
    eval: Option<&Evaluation>,
) -> Result<ApplyResponse, StateError> {
    if let Some(eval) = eval {
        let mut eval = eval.clone();
        eval.job_modify_index = job_modify_index;
        evals::upsert(tx, std::slice::from_ref(&eval))?;
    }
    let job = tx.job(ns, job_id);
    Ok(ApplyResponse {
        index: tx.index(),
        job_version: job.map(|j| j.version.unwrap_or(0)),
        job_modify_index: Some(job_modify_index),
        eval_id: eval.map(|e| e.id.clone()),
        eval_create_index: eval.map(|_| tx.index()),
        ..ApplyResponse::default()
    })
}

/// Nomad's `Job.SpecChanged`: equal after copying the server-set fields over.
pub fn spec_changed(old: &Job, new: &Job) -> bool {
    let mut c = new.clone();
    c.namespace.clone_from(&old.namespace);
    c.status.clone_from(&old.status);
    c.status_description.clone_from(&old.status_description);
    c.stable = old.stable;
    c.version = old.version;
    c.submit_time = old.submit_time;
    c.create_index = old.create_index;
    c.modify_index = old.modify_index;
    c.job_modify_index = old.job_modify_index;
    c.version_tag.clone_from(&old.version_tag);
    *old != c
}

/// Nomad's `upsertJobImpl`. Stores `job` with its indexes, version (previous + 1, or 0 for a new job,
/// unless `keep_version`) and status set, creates or extends its summary and adds it to the versions.
fn upsert_job(tx: &mut Txn, job: Job, keep_version: bool) {
    upsert_job_at(tx, job, keep_version, None);
}

/// Stores `job` as the current version: the one it says (`keep_version`), `at` when given, or
/// the next one.
fn upsert_job_at(tx: &mut Txn, mut job: Job, keep_version: bool, at: Option<u64>) {
    let index = tx.index();
    let ns = job_namespace(&job).to_owned();
    job.namespace = Some(ns.clone());
    match tx.job(&ns, &job.id).cloned() {
        Some(existing) => {
            job.create_index = existing.create_index;
            job.modify_index = Some(index);
            if !keep_version {
                job.job_modify_index = Some(index);
                job.version = Some(at.unwrap_or(existing.version.unwrap_or(0).saturating_add(1)));
                // A tag names the version it was given to, never a later one.
                job.version_tag = None;
            }
            job.status = Some(job_status(tx, &job, false));
        }
        None => {
            job.create_index = Some(index);
            job.modify_index = Some(index);
            job.job_modify_index = Some(index);
            if !keep_version {
                job.version = Some(at.unwrap_or(0));
            }
            let status = job_status(tx, &job, false);
            update_parent_children(tx, &job, None, &status);
            job.status = Some(status);
        }
    }
    update_summary_with_job(tx, &job);
    let job = Arc::new(job);
    upsert_job_version(tx, job.clone());
    tx.put_job(job);
}

/// Nomad's `DeleteJobTxn` (purge): the job, its versions and its summary.
fn delete_job(tx: &mut Txn, ns: &str, id: &str) -> Result<(), StateError> {
    let job = tx
        .job(ns, id)
        .cloned()
        .ok_or_else(|| StateError::NotFound(JOB_NOT_FOUND.into()))?;
    if !job.parent_id.is_empty() {
        if let Some(parent) = tx.job_summary(ns, &job.parent_id).cloned() {
            if let Some(children) = parent.children {
                let mut children = children;
                let moved = match job.status {
                    Some(JobStatus::Pending) => Some(&mut children.pending),
                    Some(JobStatus::Running) => Some(&mut children.running),
                    _ => None,
                };
                if let Some(count) = moved {
                    *count -= 1;
                    children.dead += 1;
                    let mut parent = (*parent).clone();
                    parent.children = Some(children);
                    parent.modify_index = tx.index();
                    tx.put_job_summary(parent);
                }
            }
        }
    }
    tx.delete_job(ns, id);
    for version in tx.versions_of(ns, id) {
        tx.delete_job_version(ns, id, version.version.unwrap_or(0));
    }
    tx.touch(Table::JobVersions);
    tx.delete_job_summary(ns, id);
    tx.delete_scaling_events(ns, id);
    super::host_volumes::delete_claims_of_job(tx, ns, id);
    Ok(())
}

/// Nomad's `upsertJobVersion`: adds the version, then while more than [`JOB_TRACKED_VERSIONS`]
/// untagged ones are kept drops the oldest — keeping the newest stable version in place of the
/// youngest of those dropped.
fn upsert_job_version(tx: &mut Txn, job: Arc<Job>) {
    let ns = job_namespace(&job).to_owned();
    let id = job.id.clone();
    tx.put_job_version(job);
    // Tagged versions are always kept and do not count (Nomad 1.9).
    let mut all: Vec<Arc<Job>> = tx
        .versions_of(&ns, &id)
        .into_iter()
        .filter(|j| j.version_tag.is_none())
        .collect();
    if all.len() <= JOB_TRACKED_VERSIONS {
        return;
    }
    let max = JOB_TRACKED_VERSIONS;
    // The newest stable version is kept in place of the oldest kept one.
    if let Some(stable) = all.iter().position(|j| j.stable == Some(true)) {
        if stable >= max {
            all.swap(max - 1, stable);
        }
    }
    // Usually one; more when a version just lost its tag and counts again.
    for old in &all[max..] {
        tx.delete_job_version(&ns, &id, old.version.unwrap_or(0));
    }
}

/// Nomad's `updateSummaryWithJob`: a zeroed entry for each task group not yet in the summary.
fn update_summary_with_job(tx: &mut Txn, job: &Job) {
    let ns = job_namespace(job);
    let (mut summary, mut changed) = match tx.job_summary(ns, &job.id) {
        Some(existing) => ((**existing).clone(), false),
        None => (
            JobSummary {
                job_id: job.id.clone(),
                namespace: ns.to_owned(),
                summary: BTreeMap::new(),
                children: Some(JobChildrenSummary::default()),
                create_index: tx.index(),
                modify_index: 0,
            },
            true,
        ),
    };
    for group in &job.task_groups {
        if !summary.summary.contains_key(&group.name) {
            summary
                .summary
                .insert(group.name.clone(), TaskGroupSummary::default());
            changed = true;
        }
    }
    if changed {
        summary.modify_index = tx.index();
        tx.put_job_summary(summary);
    }
}

/// Nomad's `getJobStatus`. System, periodic and parameterized jobs run until stopped; others are
/// running with a live allocation, pending with a live evaluation, dead once everything they had is
/// finished (or an evaluation was garbage-collected), and pending when they have nothing yet.
pub(super) fn job_status(root: &Root, job: &Job, eval_delete: bool) -> JobStatus {
    let parameterized = job.parameterized.is_some() && !job.dispatched;
    if job.kind() == JobType::System || parameterized || job.periodic.is_some() {
        return if job.stop {
            JobStatus::Dead
        } else {
            JobStatus::Running
        };
    }
    let ns = job_namespace(job);
    let allocs = root.allocs_by_job(ns, &job.id);
    if allocs.iter().any(|a| !a.is_terminal()) {
        return JobStatus::Running;
    }
    let evals = root.evals_by_job(ns, &job.id);
    if evals.iter().any(|e| !e.is_terminal()) {
        return JobStatus::Pending;
    }
    if eval_delete || !evals.is_empty() || !allocs.is_empty() {
        JobStatus::Dead
    } else {
        JobStatus::Pending
    }
}

/// Nomad's `setJobStatuses`: recomputes (or forces) the status of each job that still exists; a
/// changed status rewrites the job with `ModifyIndex` = this index (its JobModifyIndex and version
/// stay).
pub(super) fn set_job_statuses(tx: &mut Txn, jobs: &StatusUpdates, eval_delete: bool) {
    for ((ns, id), force) in jobs {
        let Some(job) = tx.job(ns, id).cloned() else {
            continue;
        };
        let new = force
            .clone()
            .unwrap_or_else(|| job_status(tx, &job, eval_delete));
        if job.status.as_ref() == Some(&new) {
            continue;
        }
        let mut updated = (*job).clone();
        updated.status = Some(new.clone());
        updated.modify_index = Some(tx.index());
        update_parent_children(tx, &updated, job.status.as_ref(), &new);
        tx.put_job(Arc::new(updated));
    }
}

/// Nomad's `setJobSummary`: a child job's status moved from `old` (`None` for a new job) to `new`, so
/// its parent's children counts move with it.
fn update_parent_children(tx: &mut Txn, job: &Job, old: Option<&JobStatus>, new: &JobStatus) {
    if job.parent_id.is_empty() {
        return;
    }
    let Some(parent) = tx.job_summary(job_namespace(job), &job.parent_id).cloned() else {
        return;
    };
    let mut parent = (*parent).clone();
    let children = parent.children.get_or_insert_with(Default::default);
    for (status, delta) in [(old, -1), (Some(new), 1)] {
        match status {
            Some(JobStatus::Pending) => children.pending += delta,
            Some(JobStatus::Running) => children.running += delta,
            Some(JobStatus::Dead) => children.dead += delta,
            _ => {}
        }
    }
    parent.modify_index = tx.index();
    tx.put_job_summary(parent);
}

/// Nomad's `UpdateJobStability`: sets one version's stability, by request. Unlike the deployment
/// watcher's [`update_job_stability`] it can also clear it, and an unknown version is an error.
pub(crate) fn set_job_stability(
    tx: &mut Txn,
    ns: &str,
    job_id: &str,
    version: u64,
    stable: bool,
) -> Result<(), StateError> {
    let Some(tracked) = tx.job_version(ns, job_id, version).cloned() else {
        return Err(StateError::NotFound(format!(
            "job {job_id:?} has no version {version}"
        )));
    };
    let index = tx.index();
    let mut tracked = (*tracked).clone();
    tracked.stable = Some(stable);
    tracked.modify_index = Some(index);
    tx.put_job_version(Arc::new(tracked));
    if let Some(current) = tx.job(ns, job_id).cloned() {
        if current.version == Some(version) {
            let mut current = (*current).clone();
            current.stable = Some(stable);
            current.modify_index = Some(index);
            tx.put_job(Arc::new(current));
        }
    }
    Ok(())
}

/// Nomad's `updateJobStabilityImpl`: marks one version of a job stable (a deployment succeeded). The
/// version keeps its number; the current job is updated too when it is that version.
pub(super) fn update_job_stability(tx: &mut Txn, ns: &str, job_id: &str, version: u64) {
    let Some(tracked) = tx.job_version(ns, job_id, version).cloned() else {
        return;
    };
    if tracked.stable == Some(true) {
        return;
    }
    let index = tx.index();
    let mut tracked = (*tracked).clone();
    tracked.stable = Some(true);
    tracked.modify_index = Some(index);
    tx.put_job_version(Arc::new(tracked));
    if let Some(current) = tx.job(ns, job_id).cloned() {
        if current.version == Some(version) {
            let mut current = (*current).clone();
            current.stable = Some(true);
            current.modify_index = Some(index);
            current.status = Some(job_status(tx, &current, false));
            tx.put_job(Arc::new(current));
        }
    }
}

/// `JobSummariesReconcile` (Nomad's `ReconcileJobSummaries`): every job's summary rebuilt from
/// its allocations of the current job instance (queued counts start over at zero); a periodic or
/// parameterized job's from its children's statuses.
pub(super) fn reconcile_summaries(tx: &mut Txn) {
    let jobs: Vec<Arc<Job>> = tx.jobs().values().cloned().collect();
    let mut children: BTreeMap<(String, String), JobChildrenSummary> = BTreeMap::new();
    for job in &jobs {
        if job.parent_id.is_empty() {
            continue;
        }
        let counts = children
            .entry((job_namespace(job).to_owned(), job.parent_id.clone()))
            .or_default();
        match job.status {
            Some(JobStatus::Pending) => counts.pending += 1,
            Some(JobStatus::Running) => counts.running += 1,
            Some(JobStatus::Dead) => counts.dead += 1,
            _ => {}
        }
    }
    let index = tx.index();
    for job in jobs {
        let ns = job_namespace(&job).to_owned();
        let template = job
            .periodic
            .as_ref()
            .is_some_and(|p| p.enabled != Some(false))
            || job.parameterized.is_some();
        let mut summary = JobSummary {
            job_id: job.id.clone(),
            namespace: ns.clone(),
            create_index: job.create_index.unwrap_or(0),
            modify_index: index,
            ..JobSummary::default()
        };
        if template {
            if tx.job_summary(&ns, &job.id).is_none() {
                continue;
            }
            summary.children = Some(
                children
                    .get(&(ns.clone(), job.id.clone()))
                    .copied()
                    .unwrap_or_default(),
            );
        } else {
            for g in &job.task_groups {
                summary
                    .summary
                    .insert(g.name.clone(), TaskGroupSummary::default());
            }
            for a in tx.allocs_by_job(&ns, &job.id) {
                if a.job
                    .as_ref()
                    .is_some_and(|j| j.create_index != job.create_index)
                {
                    continue;
                }
                let Some(tg) = summary.summary.get_mut(&a.task_group) else {
                    continue;
                };
                match a.client_status {
                    model::ClientStatus::Failed => tg.failed += 1,
                    model::ClientStatus::Lost => tg.lost += 1,
                    model::ClientStatus::Unknown => tg.unknown += 1,
                    model::ClientStatus::Complete => tg.complete += 1,
                    model::ClientStatus::Running => tg.running += 1,
                    model::ClientStatus::Pending => tg.starting += 1,
                    _ => {}
                }
            }
        }
        tx.put_job_summary(summary);
    }
    tx.touch(Table::JobSummaries);
}
