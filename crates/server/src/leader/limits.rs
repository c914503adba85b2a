//! Every limit and timing of the leader's loops, in one place. Durations are Unix-nanosecond counts
//! (`_ns`) where the engines compute with them, `Duration`s where only the async shells use them.

use std::time::Duration;

const SECOND_NS: i64 = 1_000_000_000;

// ----- eval broker -----

/// Deliveries of one evaluation before it is failed with a follow-up (Nomad's `EvalDeliveryLimit`).
pub const EVAL_DELIVERY_LIMIT: u32 = 3;
/// The wait before a nacked evaluation is delivered again, after its first delivery (Nomad's
/// `EvalNackInitialReenqueueDelay`).
pub const NACK_DELAY_INITIAL_NS: i64 = SECOND_NS;
/// The wait before later redeliveries (Nomad's `EvalNackSubsequentReenqueueDelay`).
pub const NACK_DELAY_SUBSEQUENT_NS: i64 = 20 * SECOND_NS;
/// A delivered evaluation not acked, nacked or touched within this is nacked for the worker (Nomad's
/// `EvalNackTimeout`).
pub const UNACK_TIMEOUT_NS: i64 = 60 * SECOND_NS;
/// The least wait of a failed evaluation's follow-up (Nomad's `EvalFailedFollowupBaselineDelay`)…
pub const FAILED_FOLLOW_UP_DELAY_MIN_NS: i64 = 60 * SECOND_NS;
/// …plus up to this much, spread by the evaluation's ID (Nomad's `EvalFailedFollowupDelayRange`).
pub const FAILED_FOLLOW_UP_DELAY_RANGE_NS: i64 = 5 * 60 * SECOND_NS;
/// Evaluations the broker tracks at most (ready, unacked, pending per job, delayed, blocked). Past
/// it new ones stay pending in the state store, unscheduled until the next leadership change, and an
/// error is logged: far above any real backlog, it keeps a runaway producer from exhausting memory.
pub const BROKER_EVALS_MAX: usize = 500_000;
/// Node classes whose latest capacity change the broker remembers (to unblock evaluations that were
/// blocked on an older snapshot); the oldest is forgotten first.
pub const UNBLOCK_CLASSES_MAX: usize = 4_096;
/// Requests (dequeue, ack, nack, state changes) queued for the broker task.
pub const BROKER_REQUESTS_MAX: usize = 1_024;
/// Evaluation writes (failed evaluations with follow-ups, cancellations) queued for raft.
pub const BROKER_WRITES_MAX: usize = 64;
/// Evaluations written by one broker write at most; larger batches are split.
pub const BROKER_WRITE_EVALS_MAX: usize = 512;
/// The longest the broker task sleeps without a request, so timers never drift far.
pub const BROKER_TICK_MAX: Duration = Duration::from_secs(1);

// ----- state follower -----

/// How long one wait on the state store lasts before the follower checks that it should go on.
pub const FOLLOW_WAIT: Duration = Duration::from_secs(1);
/// How often the follower looks at a store that has applied nothing yet (waits never block on
/// index 0).
pub const FOLLOW_EMPTY_POLL: Duration = Duration::from_millis(20);

// ----- plan queue and applier -----

/// Plans waiting for the applier at most; a worker submitting to a full queue gets an error and
/// nacks its evaluation.
pub const PLAN_QUEUE_MAX: usize = 1_024;
/// The most plans the applier evaluates together and commits in one Raft entry...
pub const PLAN_BATCH_MAX: usize = 16;
/// ...and the most allocations they place and stop together (the first plan always goes): an
/// entry stays a few MiB, well under raft's `ENTRY_BYTES_MAX`.
pub const PLAN_BATCH_ALLOCS_MAX: usize = 4_096;

// ----- workers -----

/// Scheduling attempts without progress (a partial commit that committed nothing new) before the
/// evaluation fails with a blocked `max-plan-attempts` follow-up (Nomad's `maxServiceScheduleAttempts`
/// and `maxSystemScheduleAttempts`)…
pub const PLAN_ATTEMPTS_SERVICE: u32 = 5;
/// …and for batch jobs (Nomad's `maxBatchScheduleAttempts`).
pub const PLAN_ATTEMPTS_BATCH: u32 = 2;
/// Attempts for one delivery in all, progress or not.
pub const PLAN_ATTEMPTS_TOTAL_MAX: u32 = 20;
/// How long a worker waits for the state store to reach an evaluation's index (or a plan result's
/// refresh index) before it nacks.
pub const SNAPSHOT_WAIT: Duration = Duration::from_secs(5);
/// Workers at most, whatever the configuration asks.
pub const WORKERS_MAX: usize = 256;

// ----- periodic launcher -----

/// The longest the periodic launcher waits without a look at state, so a clock step is noticed.
pub const PERIODIC_WAIT_MAX: Duration = Duration::from_secs(5);
/// How often the launcher looks at a store that has applied no job yet (waits never block on index 0).
pub const PERIODIC_EMPTY_POLL: Duration = Duration::from_millis(100);
/// The wait after a failed launch before trying again.
pub const PERIODIC_RETRY: Duration = Duration::from_secs(1);

// ----- leadership -----

/// How often the supervisor looks at raft's leadership (raft offers no change notification).
pub const LEADERSHIP_POLL: Duration = Duration::from_millis(50);
/// How long a new leader waits to apply the log it has before it rebuilds the broker from state.
pub const LEADER_CATCH_UP: Duration = Duration::from_secs(10);
/// How long stopping the leader's loops waits for them to finish before aborting them.
pub const LEADER_STOP_WAIT: Duration = Duration::from_secs(5);

// ----- heartbeats -----

/// The heartbeat TTL handed to clients by default (Nomad's `min_heartbeat_ttl`).
pub const DEFAULT_MIN_HEARTBEAT_TTL: Duration = Duration::from_secs(10);
/// Added to a node's TTL before it is marked down, by default (Nomad's `heartbeat_grace`).
pub const DEFAULT_HEARTBEAT_GRACE: Duration = Duration::from_secs(10);
/// How long a new leader gives every ready node to heartbeat, by default (Nomad's
/// `failover_heartbeat_ttl`).
/// Nomad's `max_heartbeats_per_second` default.
pub const DEFAULT_MAX_HEARTBEATS_PER_SECOND: f64 = 50.0;
pub const DEFAULT_FAILOVER_HEARTBEAT_TTL: Duration = Duration::from_secs(5 * 60);
/// The wait before a failed down write is tried again.
pub const HEARTBEAT_RETRY_NS: i64 = SECOND_NS;
/// The longest the heartbeat task sleeps between looks at its deadlines.
pub const HEARTBEAT_TICK_MAX: Duration = Duration::from_millis(500);
