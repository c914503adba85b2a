//! Every limit and tuning constant of the scheduler, in one place. Names carry their units.

/// Nomad's default dynamic port range, used when a node does not say its own.
pub const DYNAMIC_PORT_MIN_DEFAULT: u16 = 20_000;
pub const DYNAMIC_PORT_MAX_DEFAULT: u16 = 32_000;
/// Random tries for a free dynamic port before scanning the range in order (Nomad's
/// `maxRandPortAttempts`).
pub const DYNAMIC_PORT_RANDOM_ATTEMPTS_MAX: usize = 20;

/// Nodes ranked per placement: at least this many (batch jobs use exactly this many) …
pub const SAMPLE_NODES_MIN: usize = 2;
/// … while service jobs rank about log2(nodes); with spreads or affinities every feasible node is
/// ranked, as Nomad does.
/// Low-scoring nodes (score at most the threshold) set aside before taking them anyway (Nomad's
/// `LimitIterator`).
pub const SAMPLE_SKIP_MAX: usize = 3;
pub const SAMPLE_SKIP_SCORE_THRESHOLD: f64 = 0.0;

/// Node scores kept in an allocation's metrics (`ScoreMetaData`), best first.
pub const SCORES_RETAINED_MAX: usize = 5;
/// The best bin-pack fitness; scores are normalised by it.
pub const BINPACK_FITNESS_MAX: f64 = 18.0;

/// A failed allocation due within this window is rescheduled now rather than later.
pub const RESCHEDULE_WINDOW_NS: i64 = 1_000_000_000;
/// Delayed reschedules due within this window of each other share one follow-up evaluation.
pub const RESCHEDULE_BATCH_WINDOW_NS: i64 = 5_000_000_000;
/// Reschedule events carried forward when the policy is unlimited.
pub const RESCHEDULE_EVENTS_KEPT_MAX: usize = 5;

/// Compiled size limit of a `regexp` constraint's pattern.
pub const REGEX_SIZE_BYTES_MAX: usize = 1 << 20;

/// An allocation may be preempted only by a job at least this much higher in priority (Nomad's
/// preemption delta).
pub const PREEMPTION_PRIORITY_DELTA: i32 = 10;
/// Subtracted from the score of a node that takes the allocation only by preempting, so any node
/// where it fits as things are wins over one where something must be evicted.
pub const PREEMPTION_SCORE_PENALTY: f64 = 2.0;
