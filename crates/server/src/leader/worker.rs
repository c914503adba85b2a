//! Scheduling workers: `num_schedulers` tasks on the leader, each dequeuing an evaluation, running
//! the scheduler on a state snapshot, and handing the plan to the applier.
//!
//! One delivery: take a snapshot at least as new as the evaluation → `scheduler::schedule` (on the
//! blocking pool: it is CPU work) → an empty plan writes the evaluation update with `EvalUpsert`;
//! otherwise touch the delivery (a stale token means the broker gave the evaluation to someone else:
//! stop) and submit the plan with the evaluation updates → a full commit wrote everything; a partial
//! one means: refresh to the result's index and schedule again, up to the attempt limit, after which
//! the evaluation fails with a blocked `max-plan-attempts` follow-up → ack. Any error nacks, so the
//! broker redelivers (and fails the evaluation at its delivery limit).
//!
//! On leadership loss the broker releases the worker's dequeue (it exits) or refuses its ack or
//! submit (the delivery is abandoned; the next leader runs the evaluation again from state).

use super::broker::fnv1a;
use super::derived_id;
use super::limits::{
    PLAN_ATTEMPTS_BATCH, PLAN_ATTEMPTS_SERVICE, PLAN_ATTEMPTS_TOTAL_MAX, SNAPSHOT_WAIT,
};
use super::plan_apply::{PlanError, PlanSubmission};
use super::tasks::{ApplierHandle, BrokerHandle, Delivery};
use super::view::SnapshotView;
use crate::endpoints::now_nanos;
use crate::server::Server;
use model::eval::{EvalStatus, Evaluation, EVAL_TRIGGER_MAX_PLANS};
use model::JobType;
use state::{Command, StateSnapshot, StateStore};
use std::sync::Arc;

/// The scheduler types workers take.
pub const SCHEDULER_TYPES: [&str; 4] = ["service", "batch", "system", "sysbatch"];

/// Nomad's description of the blocked evaluation made after too many plan attempts.
pub const BLOCKED_MAX_PLANS_DESC: &str = "created due to placement conflicts";

/// The scheduler's seed for an evaluation: the same on every server and every run. Salted, so it
/// is not the plain FNV-1a of the ID that the scheduler itself mixes in (XOR-ing the two would
/// give every evaluation the same seed, and so the same allocation IDs).
pub fn seed_from(eval_id: &str) -> u64 {
    let mut z = fnv1a(&format!("caravan-scheduler-seed/{eval_id}"));
    // SplitMix64's finalizer spreads the bits.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// What every worker shares.
pub(crate) struct WorkerContext {
    pub store: StateStore,
    pub broker: BrokerHandle,
    pub applier: ApplierHandle,
    /// Writes evaluation updates through raft.
    pub server: Server,
}

#[derive(Debug, thiserror::Error)]
enum WorkError {
    #[error("the delivery's token is stale; another worker has the evaluation")]
    Stale,
    #[error("state did not reach index {0} in time")]
    SnapshotTimeout(u64),
    #[error("scheduler: {0}")]
    Scheduler(#[from] scheduler::SchedulerError),
    #[error("the scheduler panicked: {0}")]
    Panicked(String),
    #[error("plan: {0}")]
    Plan(#[from] PlanError),
    #[error("writing the evaluation: {0}")]
    Write(#[from] crate::ServerError),
}

/// One worker: runs until the broker stops handing out evaluations (leadership lost) or the
/// pool no longer wants slot `worker`; takes the types the pool enables, as they change.
/// Why a worker stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// Its slot is past the pool's count.
    NotWanted,
    /// The broker stopped (leadership lost).
    BrokerGone,
}

pub(crate) async fn run(ctx: Arc<WorkerContext>, worker: usize) -> Exit {
    let pool = ctx.server.worker_pool();
    let mut config = pool.watch();
    pool.started(worker);
    loop {
        let cfg = config.borrow_and_update().clone();
        if worker >= cfg.num_schedulers {
            return Exit::NotWanted;
        }
        let types = cfg.types();
        pool.workload(worker, super::pool::Workload::WaitingToDequeue);
        let delivery = if types.is_empty() {
            // Nothing to take until the configuration changes.
            if config.changed().await.is_err() {
                return Exit::BrokerGone;
            }
            continue;
        } else {
            let Some(mut waiter) = ctx.broker.dequeue_waiter(types).await else {
                return Exit::BrokerGone;
            };
            tokio::select! {
                d = &mut waiter => d.ok().flatten(),
                changed = config.changed() => {
                    // Give the dequeue up, keeping a delivery already sent.
                    waiter.close();
                    match waiter.try_recv() {
                        Ok(Some(d)) => Some(d),
                        _ if changed.is_err() => return Exit::BrokerGone,
                        _ => continue,
                    }
                }
            }
        };
        let Some(delivery) = delivery else {
            return Exit::BrokerGone;
        };
        pool.workload(worker, super::pool::Workload::Scheduling);
        let eval_id = delivery.eval.id.clone();
        match process(&ctx, &delivery).await {
            Ok(()) => {
                if let Err(e) = ctx.broker.ack(&delivery).await {
                    tracing::debug!(worker, eval_id = %eval_id, error = %e, "ack refused");
                }
            }
            Err(WorkError::Stale) => {
                tracing::debug!(worker, eval_id = %eval_id, "delivery went stale; dropping it");
            }
            Err(e) => {
                tracing::warn!(worker, eval_id = %eval_id, error = %e, "evaluation failed; nacking it");
                if let Err(e) = ctx.broker.nack(&delivery).await {
                    tracing::debug!(worker, eval_id = %eval_id, error = %e, "nack refused");
                }
            }
        }
    }
}

async fn process(ctx: &WorkerContext, d: &Delivery) -> Result<(), WorkError> {
    let eval = &d.eval;
    let limit = if matches!(eval.eval_type, JobType::Batch | JobType::Sysbatch) {
        PLAN_ATTEMPTS_BATCH
    } else {
        PLAN_ATTEMPTS_SERVICE
    };
    let mut snap =
        snapshot_at_least(&ctx.store, eval.modify_index.max(eval.snapshot_index)).await?;
    let (mut stalled, mut total) = (0, 0);
    loop {
        let now = now_nanos();
        let mut outcome = schedule(&snap, eval, now).await?;
        let evals = stamp_evals(&mut outcome, &snap, now);
        if outcome.plan.is_no_op() {
            ctx.server.apply(Command::EvalUpsert { evals }).await?;
            return Ok(());
        }
        ctx.broker.touch(d).await.map_err(|_| WorkError::Stale)?;
        let mut plan = outcome.plan;
        plan.eval_id.clone_from(&eval.id);
        plan.eval_token.clone_from(&d.token);
        plan.snapshot_index = snap.index();
        if plan.priority == 0 {
            plan.priority = eval.priority;
        }
        let submitted = std::time::Instant::now();
        let result = ctx.applier.submit(PlanSubmission { plan, evals }).await?;
        metrics::histogram!("nomad.nomad.plan.submit")
            .record(submitted.elapsed().as_secs_f64() * 1000.0);
        if result.refresh_index == 0 {
            return Ok(());
        }
        total += 1;
        stalled = if result.is_no_op() { stalled + 1 } else { 0 };
        if stalled >= limit || total >= PLAN_ATTEMPTS_TOTAL_MAX {
            let evals = max_plan_attempts(eval, total, snap.index(), now);
            ctx.server.apply(Command::EvalUpsert { evals }).await?;
            return Ok(());
        }
        tracing::debug!(eval_id = %eval.id, refresh_index = result.refresh_index, "plan partly rejected; scheduling again");
        snap = snapshot_at_least(&ctx.store, result.refresh_index).await?;
    }
}

/// Runs the scheduler on the blocking pool.
async fn schedule(
    snap: &StateSnapshot,
    eval: &Arc<Evaluation>,
    now: i64,
) -> Result<scheduler::Outcome, WorkError> {
    let view = SnapshotView::new(snap.clone());
    let eval = eval.clone();
    let seed = seed_from(&eval.id);
    let metric = format!("nomad.nomad.worker.invoke_scheduler.{}", eval.eval_type);
    let started = std::time::Instant::now();
    let outcome = crate::env::blocking(move || scheduler::schedule(&view, &eval, now, seed)).await;
    metrics::histogram!(metric).record(started.elapsed().as_secs_f64() * 1000.0);
    outcome
        .map_err(|e| WorkError::Panicked(e.to_string()))?
        .map_err(WorkError::from)
}

/// The evaluation update and new evaluations as they will be written: stamped with the snapshot
/// they were made on (blocked evaluations wake on capacity newer than that) and the time.
fn stamp_evals(
    outcome: &mut scheduler::Outcome,
    snap: &StateSnapshot,
    now: i64,
) -> Vec<Evaluation> {
    let mut evals = Vec::with_capacity(1 + outcome.new_evals.len());
    let mut update = outcome.eval.clone();
    update.snapshot_index = snap.index();
    update.modify_time = now;
    evals.push(update);
    for e in &outcome.new_evals {
        let mut e = e.clone();
        if e.snapshot_index == 0 {
            e.snapshot_index = snap.index();
        }
        if e.create_time == 0 {
            e.create_time = now;
        }
        e.modify_time = now;
        evals.push(e);
    }
    evals
}

/// Nomad's answer to too many plan attempts: the evaluation fails, and a blocked follow-up (which
/// any capacity change wakes) carries the work on.
pub(crate) fn max_plan_attempts(
    eval: &Evaluation,
    attempts: u32,
    snapshot_index: u64,
    now: i64,
) -> Vec<Evaluation> {
    let blocked = Evaluation {
        id: derived_id(&eval.id, EVAL_TRIGGER_MAX_PLANS),
        namespace: eval.namespace.clone(),
        priority: eval.priority,
        eval_type: eval.eval_type.clone(),
        triggered_by: EVAL_TRIGGER_MAX_PLANS.into(),
        job_id: eval.job_id.clone(),
        job_modify_index: eval.job_modify_index,
        status: EvalStatus::Blocked,
        status_description: BLOCKED_MAX_PLANS_DESC.into(),
        previous_eval: eval.id.clone(),
        escaped_computed_class: true,
        snapshot_index,
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    };
    let mut failed = eval.clone();
    failed.status = EvalStatus::Failed;
    failed.status_description = format!("maximum attempts reached ({attempts})");
    failed.blocked_eval.clone_from(&blocked.id);
    failed.modify_time = now;
    vec![failed, blocked]
}

/// A snapshot at `index` or newer, waiting (bounded) for the local state store to get there.
async fn snapshot_at_least(store: &StateStore, index: u64) -> Result<StateSnapshot, WorkError> {
    let snap = store.snapshot();
    if snap.index() >= index {
        return Ok(snap);
    }
    let deadline = tokio::time::Instant::now() + SNAPSHOT_WAIT;
    loop {
        let snap = store.wait_for(&[], index - 1, deadline).await;
        if snap.index() >= index {
            return Ok(snap);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(WorkError::SnapshotTimeout(index));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_stable_and_differ_by_evaluation() {
        assert_eq!(seed_from("e1"), seed_from("e1"));
        assert_ne!(seed_from("e1"), seed_from("e2"));
        assert_ne!(
            seed_from("e1"),
            fnv1a("e1"),
            "not the hash the scheduler mixes in itself"
        );
    }

    #[test]
    fn too_many_plan_attempts_fail_the_evaluation_with_a_blocked_follow_up() {
        let eval = Evaluation {
            id: "e1".into(),
            namespace: "default".into(),
            priority: 70,
            eval_type: "service".into(),
            job_id: "web".into(),
            status: "pending".into(),
            ..Evaluation::default()
        };
        let [failed, blocked] = &max_plan_attempts(&eval, 5, 42, 7)[..] else {
            panic!("two evaluations");
        };
        assert_eq!(
            (failed.status.as_str(), failed.status_description.as_str()),
            ("failed", "maximum attempts reached (5)")
        );
        assert_eq!(failed.blocked_eval, blocked.id);
        assert_eq!(
            (blocked.status.as_str(), blocked.triggered_by.as_str()),
            ("blocked", "max-plan-attempts")
        );
        assert_eq!(blocked.status_description, BLOCKED_MAX_PLANS_DESC);
        assert!(blocked.escaped_computed_class, "any capacity wakes it");
        assert_eq!(
            (
                blocked.snapshot_index,
                blocked.priority,
                blocked.previous_eval.as_str()
            ),
            (42, 70, "e1")
        );
        assert_eq!(
            max_plan_attempts(&eval, 5, 42, 7),
            max_plan_attempts(&eval, 5, 42, 7),
            "the same on every run"
        );
    }
}
