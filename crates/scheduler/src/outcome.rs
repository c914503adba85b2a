//! What one scheduling pass returns.

use model::eval::Evaluation;
use model::plan::Plan;

/// The result of one scheduling pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// Placements (`NodeAllocation`, in-place updates included), stops and evictions
    /// (`NodeUpdate`), and deployment changes.
    pub plan: Plan,
    /// The evaluation's new state: `Status` complete, failed or blocked, `StatusDescription`,
    /// `FailedTGAllocs`, `QueuedAllocations`, `BlockedEval`, `NextEval`.
    pub eval: Evaluation,
    /// Evaluations to create: a blocked one for unplaceable work, delayed follow-ups for
    /// rescheduling (`WaitUntil`).
    pub new_evals: Vec<Evaluation>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchedulerError {
    /// The evaluation's type names no scheduler.
    #[error("unknown scheduler type {0:?}; expected service, batch, system or sysbatch")]
    UnknownType(String),
    /// The evaluation cannot be processed as given.
    #[error("invalid evaluation: {0}")]
    Invalid(String),
}
