//! Evaluations (Nomad's `UpsertEvalsTxn`, `nestedUpsertEval`, `DeleteEval`).

use super::jobs::{set_job_statuses, StatusUpdates};
use super::Txn;
use crate::command::Table;
use crate::error::StateError;
use crate::tables::ns_key;
use model::eval::{EvalStatus, Evaluation};

/// `EvalUpsert`: writes each evaluation, then recomputes the status of their jobs.
pub(super) fn upsert(tx: &mut Txn, evals: &[Evaluation]) -> Result<(), StateError> {
    if let Some(i) = evals.iter().position(|e| e.id.is_empty()) {
        return Err(StateError::invalid(format!(
            "evaluation {i} of {} has no ID",
            evals.len()
        )));
    }
    let mut jobs = StatusUpdates::new();
    for eval in evals {
        upsert_one(tx, eval.clone());
        jobs.insert(ns_key(&eval.namespace, &eval.job_id), None);
    }
    set_job_statuses(tx, &jobs, false);
    Ok(())
}

/// Nomad's `nestedUpsertEval`: keeps the create index of an existing evaluation, copies the queued
/// counts into the job summary, and when the evaluation completed without failed placements cancels
/// the job's blocked evaluations.
fn upsert_one(tx: &mut Txn, mut eval: Evaluation) {
    let index = tx.index();
    eval.create_index = tx.evals().get(&eval.id).map_or(index, |e| e.create_index);
    eval.modify_index = index;
    copy_queued_into_summary(tx, &eval);
    if eval.status == EvalStatus::Complete && eval.failed_tg_allocs.is_empty() {
        let blocked = tx.evals_by_job(&eval.namespace, &eval.job_id);
        for other in blocked.iter().filter(|e| e.status == EvalStatus::Blocked) {
            let mut canceled = (**other).clone();
            canceled.status = EvalStatus::Canceled;
            // Nomad's text names the canceled evaluation itself, not the successful one.
            canceled.status_description = format!("evaluation {:?} successful", canceled.id);
            canceled.modify_index = index;
            tx.put_eval(canceled);
        }
    }
    tx.put_eval(eval);
}

/// The evaluation's `QueuedAllocations` become its job summary's `Queued` counts (task groups the
/// summary lacks are skipped).
fn copy_queued_into_summary(tx: &mut Txn, eval: &Evaluation) {
    let Some(summary) = tx.job_summary(&eval.namespace, &eval.job_id).cloned() else {
        return;
    };
    let mut summary = (*summary).clone();
    let mut changed = false;
    for (group, queued) in &eval.queued_allocations {
        if let Some(tg) = summary.summary.get_mut(group) {
            if tg.queued != *queued {
                tg.queued = *queued;
                changed = true;
            }
        }
    }
    if changed {
        summary.modify_index = tx.index();
        tx.put_job_summary(summary);
    }
}

/// `EvalDelete` (garbage collection): unknown IDs are skipped; both the evals and allocs tables
/// count as changed; the jobs of deleted evaluations get their status recomputed as after a delete
/// (a job with nothing left is dead, not pending).
pub(super) fn delete(tx: &mut Txn, eval_ids: &[String], alloc_ids: &[String]) {
    let mut jobs = StatusUpdates::new();
    for id in eval_ids {
        if let Some(eval) = tx.delete_eval(id) {
            jobs.insert(ns_key(&eval.namespace, &eval.job_id), None);
        }
    }
    for id in alloc_ids {
        tx.delete_alloc(id);
    }
    tx.touch(Table::Evals);
    tx.touch(Table::Allocs);
    set_job_statuses(tx, &jobs, true);
}
