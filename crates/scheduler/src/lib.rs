//! Caravan's scheduler: turns an evaluation into a plan.
//!
//! Owns: feasibility (datacenters, node pool, node status, drivers, constraints, resources, ports,
//! devices, host volumes; a hook for CSI volumes), ranking (bin-pack, spread, job anti-affinity,
//! affinities, spread blocks) over a seeded sample of nodes, the reconciler (what to place, stop,
//! update in place or destructively, migrate, reschedule), the plan side of deployments, and the
//! explanation of failed placements — for the `service`, `batch`, `system` and `sysbatch` types.
//! Never does: I/O, clocks (`now` is an input), unseeded randomness, async; it reads state only
//! through [`StateView`], which it defines, and never depends on the `state` crate.
//! Invariant: `schedule` is a pure function of `(view, eval, now, seed)` — the same inputs give the
//! same [`Outcome`]; and no plan it returns overcommits a node ([`allocs_fit`] holds for every
//! node's resulting allocation set).
//!
//! The plan's shape, for its applier: `NodeUpdate` holds whole allocations with `DesiredStatus`
//! `stop` (and `ClientStatus` `lost` for allocations on down nodes); `NodeAllocation` holds new
//! allocations (with their `Job`), in-place updates (an existing ID with the new `Job`) and failed
//! allocations marked with their `FollowupEvalID` (an existing ID). A node's allocations after the
//! plan are its live ones, less those stopped, with same-ID updates replaced, plus the new ones;
//! [`allocs_fit`] checks that set. Replacements name the allocation they replace in
//! `PreviousAllocation`; the state store links `NextAllocation` back.
//!
//! Code map: `reconcile/` decides what changes (service and batch), `system` does the same for
//! system and sysbatch jobs, `stack` picks nodes (`feasible/` filters, `offer` assigns resources,
//! `rank` scores), `builder` turns decisions into the plan and the evaluation's outcome, `fit` is
//! the applier's re-check, `limits` holds every limit, `testing` an in-memory `StateView`.

mod builder;
mod feasible;
mod fit;
mod generic;
mod limits;
mod offer;
mod outcome;
mod rank;
mod reconcile;
mod resources;
mod rng;
mod stack;
mod system;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod time;
mod view;

pub use fit::{allocs_fit, FitError};
pub use outcome::{Outcome, SchedulerError};
pub use reconcile::{keep_original as reconnect_keeps_original, DESC_RECONNECTED};
pub use view::{Algorithm, Preemption, SchedulerConfig, StateView};

/// Whether `node` meets every constraint, checked as the scheduler checks a job's (where a
/// dynamic host volume may be placed, say).
pub fn node_meets_constraints(constraints: &[model::Constraint], node: &model::Node) -> bool {
    constraints
        .iter()
        .all(|c| feasible::constraint::Rule::compile(c).holds(node))
}

use model::job::JobType;

/// Runs the scheduler the evaluation's type asks for (`service`, `batch`, `system`, `sysbatch`).
/// `now` is Unix nanoseconds; `seed` drives node sampling and the IDs of new allocations,
/// evaluations and deployments (UUID strings), so the same inputs always give the same outcome.
/// The seed is mixed with the evaluation's ID and the view's index, so a fixed seed still gives
/// each evaluation, and each retry of one on newer state, its own IDs.
pub fn schedule(
    view: &dyn StateView,
    eval: &model::eval::Evaluation,
    now: i64,
    seed: u64,
) -> Result<Outcome, SchedulerError> {
    if eval.job_id.is_empty() {
        return Err(SchedulerError::Invalid(format!(
            "evaluation {:?} names no job",
            eval.id
        )));
    }
    let seed = rng::mix(seed, &eval.id, view.index());
    match &eval.eval_type {
        JobType::Service => Ok(generic::run(view, eval, now, seed, false)),
        JobType::Batch => Ok(generic::run(view, eval, now, seed, true)),
        JobType::System => Ok(system::run(view, eval, now, seed, false)),
        JobType::Sysbatch => Ok(system::run(view, eval, now, seed, true)),
        JobType::Core | JobType::Other(_) => Err(SchedulerError::UnknownType(
            eval.eval_type.as_str().to_owned(),
        )),
    }
}
