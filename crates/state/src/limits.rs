//! Every limit of the state store, in one place.

/// Versions of a job kept in the job-versions table (Nomad's `JobTrackedVersions`). When a new
/// version pushes the count over, the oldest goes — unless it is the newest stable version, which is
/// kept in place of the next-oldest.
pub const JOB_TRACKED_VERSIONS: usize = 6;

/// Events kept on a node (Nomad's `MaxRetainedNodeEvents`); older ones are dropped first.
pub const NODE_EVENTS_MAX: usize = 10;

/// The longest line `restore` accepts (one object of a snapshot), so garbage input cannot make it
/// buffer without bound.
pub const SNAPSHOT_LINE_BYTES_MAX: usize = 256 * 1024 * 1024;
