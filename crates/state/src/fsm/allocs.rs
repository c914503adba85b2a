//! Allocations (Nomad's `upsertAllocsImpl`, `updateSummaryWithAlloc`, `updateDeploymentWithAlloc`).
//!
//! Unlike Nomad's scheduler-side upsert, `AllocUpsert` stores the allocation as given (client status
//! and task states included), so it also serves client updates until the log gets a dedicated
//! client-update command.

use super::deployments;
use super::jobs::{set_job_statuses, StatusUpdates};
use super::Txn;
use crate::command::Table;
use crate::error::StateError;
use crate::tables::ns_key;
use crate::time::{format_unix_nanos, parse_unix_nanos};
use model::alloc::{Allocation, ClientStatus};
use model::deployment::DeploymentState;
use model::summary::TaskGroupSummary;
use model::JobStatus;

/// Who writes an allocation through [`upsert`], and so which fields of a stored one it may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Writer {
    /// `AllocUpsert`: every field as given.
    AsGiven,
    /// The servers (plans, stops): their copy may be older than the client's last report, so an
    /// existing allocation keeps its task states, and its client status and description unless
    /// the write marks it `lost` or `unknown` (Nomad's `upsertAllocsImpl`) — and even then when
    /// the client already said `complete` or `failed`. Without this a plan
    /// made on a snapshot taken before a client said `complete` would write `running` back, and
    /// no later report would correct it (the client already said it).
    Server,
}

/// `AllocUpsert`: a new allocation gets create, modify and alloc-modify index = this index and must
/// carry its job; an existing one keeps its create index (and its job when the update leaves it out;
/// with [`Writer::Server`], the client's fields too). Deployment counts, job summaries, the previous
/// allocation's `NextAllocation` and the job's status follow.
pub(super) fn upsert(
    tx: &mut Txn,
    allocs: &[Allocation],
    writer: Writer,
) -> Result<(), StateError> {
    let index = tx.index();
    let mut jobs = StatusUpdates::new();
    for alloc in allocs {
        if alloc.id.is_empty() {
            return Err(StateError::invalid("allocation has no ID"));
        }
        let existing = tx.allocs().get(&alloc.id).cloned();
        let mut alloc = alloc.clone();
        alloc.modify_index = index;
        alloc.alloc_modify_index = index;
        match &existing {
            None => {
                if alloc.job.is_none() {
                    return Err(StateError::invalid(format!(
                        "attempting to upsert allocation {:?} without a job",
                        alloc.id
                    )));
                }
                alloc.create_index = index;
                if let Some(status) = alloc.deployment_status.as_mut() {
                    status.modify_index = index;
                }
            }
            Some(old) => {
                alloc.create_index = old.create_index;
                if alloc.job.is_none() {
                    alloc.job.clone_from(&old.job);
                }
                // Only a replacement's upsert sets it (`link_previous`); an update of the
                // original in the same plan, written after it, must not erase it.
                if alloc.next_allocation.is_empty() {
                    alloc.next_allocation.clone_from(&old.next_allocation);
                }
                if writer == Writer::Server {
                    alloc.task_states.clone_from(&old.task_states);
                    // The client's own last word (`complete`, `failed`) stands even against the
                    // servers' `lost`/`unknown`, which were judged on an older view of it.
                    let client_finished = matches!(
                        old.client_status,
                        ClientStatus::Complete | ClientStatus::Failed
                    );
                    if client_finished
                        || (alloc.client_status != ClientStatus::Lost
                            && alloc.client_status != ClientStatus::Unknown)
                    {
                        alloc.client_status.clone_from(&old.client_status);
                        alloc.client_description.clone_from(&old.client_description);
                    }
                }
            }
        }
        update_deployment_with_alloc(tx, &mut alloc, existing.as_deref());
        update_summary_with_alloc(tx, &alloc, existing.as_deref());
        link_previous(tx, &alloc);
        let force = (!alloc.is_terminal()).then_some(JobStatus::Running);
        jobs.insert(ns_key(&alloc.namespace, &alloc.job_id), force);
        tx.put_alloc(alloc);
    }
    tx.touch(Table::Allocs);
    set_job_statuses(tx, &jobs, false);
    Ok(())
}

/// `AllocClientUpdate`: the client's own fields of existing allocations. The server-side fields and
/// `AllocModifyIndex` stay as they are, so a client never reads its own report as a server change.
pub(super) fn client_update(
    tx: &mut Txn,
    updates: &[model::wire::AllocClientUpdate],
) -> Result<(), StateError> {
    let index = tx.index();
    let mut jobs = StatusUpdates::new();
    for update in updates {
        let Some(existing) = tx.allocs().get(&update.id).cloned() else {
            continue;
        };
        if reverts_a_finished_allocation(&existing, update) {
            continue;
        }
        let mut alloc = (*existing).clone();
        alloc.client_status.clone_from(&update.client_status);
        alloc
            .client_description
            .clone_from(&update.client_description);
        alloc.task_states.clone_from(&update.task_states);
        if let Some(mut status) = update.deployment_status.clone() {
            status.modify_index = index;
            alloc.deployment_status = Some(status);
        }
        if update.network_status.is_some() {
            alloc.network_status.clone_from(&update.network_status);
        }
        alloc.modify_time = update.modify_time;
        alloc.modify_index = index;
        update_deployment_with_alloc(tx, &mut alloc, Some(&existing));
        update_summary_with_alloc(tx, &alloc, Some(&existing));
        let force = (!alloc.is_terminal()).then_some(JobStatus::Running);
        jobs.insert(ns_key(&alloc.namespace, &alloc.job_id), force);
        tx.put_alloc_client_fields(alloc);
    }
    tx.touch(Table::Allocs);
    set_job_statuses(tx, &jobs, false);
    Ok(())
}

/// A report that an allocation its client already finished (`complete` or `failed`) is pending
/// or running again is stale, never news: a client's allocation runner does not come back from
/// either. Such a report arrives when a call the client gave up on (a timeout while it was cut
/// off) is delivered after the report that superseded it; applied, it would show a stopped
/// allocation running for good, since the client has nothing newer to say. `lost` and `unknown`
/// are the servers' words, not the client's: a reconnecting client's `running` overrides them.
fn reverts_a_finished_allocation(
    existing: &Allocation,
    update: &model::wire::AllocClientUpdate,
) -> bool {
    let finished = matches!(
        existing.client_status,
        ClientStatus::Complete | ClientStatus::Failed
    );
    let live = matches!(
        update.client_status,
        ClientStatus::Pending | ClientStatus::Running
    );
    finished && live
}

/// `AllocUpdateDesiredTransition` (Nomad's `updateAllocDesiredTransitionTxn`): each transition's set
/// fields are merged into the allocation; its `ModifyIndex` moves, its `AllocModifyIndex` stays.
pub(super) fn update_desired_transitions(
    tx: &mut Txn,
    transitions: &std::collections::BTreeMap<String, model::alloc::DesiredTransition>,
) {
    let index = tx.index();
    for (id, t) in transitions {
        let Some(existing) = tx.allocs().get(id).cloned() else {
            continue;
        };
        let mut alloc = (*existing).clone();
        let d = &mut alloc.desired_transition;
        d.migrate = t.migrate.or(d.migrate);
        d.reschedule = t.reschedule.or(d.reschedule);
        d.force_reschedule = t.force_reschedule.or(d.force_reschedule);
        d.no_shutdown_delay = t.no_shutdown_delay.or(d.no_shutdown_delay);
        alloc.modify_index = index;
        tx.put_alloc(alloc);
    }
    tx.touch(Table::Allocs);
}

/// The allocation this one replaces learns its successor.
fn link_previous(tx: &mut Txn, alloc: &Allocation) {
    if alloc.previous_allocation.is_empty() {
        return;
    }
    let Some(prev) = tx.allocs().get(&alloc.previous_allocation).cloned() else {
        return;
    };
    let mut prev = (*prev).clone();
    prev.next_allocation.clone_from(&alloc.id);
    prev.modify_index = tx.index();
    tx.put_alloc(prev);
}

/// The summary counter of a client status, if it has one.
fn counter<'a>(tg: &'a mut TaskGroupSummary, client_status: &ClientStatus) -> Option<&'a mut i64> {
    Some(match client_status {
        ClientStatus::Pending => &mut tg.starting,
        ClientStatus::Running => &mut tg.running,
        ClientStatus::Complete => &mut tg.complete,
        ClientStatus::Failed => &mut tg.failed,
        ClientStatus::Lost => &mut tg.lost,
        ClientStatus::Unknown => &mut tg.unknown,
        _ => return None,
    })
}

/// Nomad's `updateSummaryWithAlloc`: a new pending allocation moves one from queued to starting; a
/// changed client status moves one between counters (never below zero). Allocations of an earlier
/// incarnation of the job (another create index) and unknown task groups are ignored.
fn update_summary_with_alloc(tx: &mut Txn, alloc: &Allocation, existing: Option<&Allocation>) {
    let Some(job) = &alloc.job else {
        return;
    };
    let Some(summary) = tx.job_summary(&alloc.namespace, &alloc.job_id).cloned() else {
        return;
    };
    if Some(summary.create_index) != job.create_index {
        return;
    }
    let mut summary = (*summary).clone();
    let Some(tg) = summary.summary.get_mut(&alloc.task_group) else {
        return;
    };
    match existing {
        None => {
            if alloc.client_status != ClientStatus::Pending {
                return;
            }
            tg.starting += 1;
            tg.queued = (tg.queued - 1).max(0);
        }
        Some(old) if old.client_status != alloc.client_status => {
            if let Some(count) = counter(tg, &alloc.client_status) {
                *count += 1;
            }
            if let Some(count) = counter(tg, &old.client_status) {
                *count = (*count - 1).max(0);
            }
        }
        Some(_) => return,
    }
    summary.modify_index = tx.index();
    tx.put_job_summary(summary);
}

/// How an allocation write moves a deployment's counters: (placed, healthy, unhealthy).
#[derive(Clone, Copy, PartialEq, Eq)]
struct DeploymentDeltas {
    placed: i64,
    healthy: i64,
    unhealthy: i64,
}

/// A placement when the allocation is new to the deployment; otherwise its first health report, or
/// a fall from healthy to unhealthy.
fn deployment_deltas(alloc: &Allocation, existing: Option<&Allocation>) -> DeploymentDeltas {
    let health = |a: &Allocation| a.deployment_status.as_ref().and_then(|s| s.healthy);
    let mut d = DeploymentDeltas {
        placed: 0,
        healthy: 0,
        unhealthy: 0,
    };
    match existing {
        Some(old) if old.deployment_id == alloc.deployment_id => {
            match (health(old), health(alloc)) {
                (None, Some(true)) => d.healthy += 1,
                (None, Some(false)) => d.unhealthy += 1,
                (Some(true), Some(false)) => {
                    d.healthy -= 1;
                    d.unhealthy += 1;
                }
                _ => {}
            }
        }
        _ => d.placed += 1,
    }
    d
}

/// Nomad's `updateDeploymentWithAlloc`: a placement or a health report updates the counters,
/// canaries and progress deadline of the allocation's deployment.
pub(super) fn update_deployment_with_alloc(
    tx: &mut Txn,
    alloc: &mut Allocation,
    existing: Option<&Allocation>,
) {
    if alloc.deployment_id.is_empty() {
        return;
    }
    let Some(deployment) = tx.deployments().get(&alloc.deployment_id).cloned() else {
        return;
    };
    if !deployment.task_groups.contains_key(&alloc.task_group) {
        return;
    }
    let d = deployment_deltas(alloc, existing);
    if d.placed == 0 && d.healthy == 0 && d.unhealthy == 0 {
        return;
    }
    if d.healthy + d.unhealthy != 0 {
        if let Some(status) = alloc.deployment_status.as_mut() {
            status.modify_index = tx.index();
        }
    }
    let mut deployment = (*deployment).clone();
    let state = deployment
        .task_groups
        .get_mut(&alloc.task_group)
        .expect("checked above");
    state.placed_allocs += d.placed;
    state.healthy_allocs += d.healthy;
    state.unhealthy_allocs += d.unhealthy;
    let canary = alloc.deployment_status.as_ref().is_some_and(|s| s.canary);
    if canary && !state.placed_canaries.contains(&alloc.id) {
        state.placed_canaries.push(alloc.id.clone());
    }
    extend_progress_deadline(state, alloc, d);
    deployments::upsert_deployment(tx, deployment);
}

/// The first placement starts the progress deadline (from the allocation's modify time); a healthy
/// report pushes it out to (report time + deadline) when that is later.
fn extend_progress_deadline(state: &mut DeploymentState, alloc: &Allocation, d: DeploymentDeltas) {
    let deadline = state.progress_deadline.0;
    if deadline == 0 {
        return;
    }
    let current = state
        .require_progress_by
        .as_deref()
        .and_then(parse_unix_nanos);
    let by = if d.placed != 0 && current.is_none() {
        Some(alloc.modify_time.saturating_add(deadline))
    } else if d.healthy != 0 {
        alloc
            .deployment_status
            .as_ref()
            .and_then(|s| s.timestamp.as_deref())
            .and_then(parse_unix_nanos)
            .map(|at| at.saturating_add(deadline))
            .filter(|by| current.is_none_or(|c| *by > c))
    } else {
        None
    };
    if let Some(by) = by {
        state.require_progress_by = Some(format_unix_nanos(by));
    }
}
