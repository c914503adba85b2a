//! Every limit of the crate, in one place. Names carry their unit.

use std::time::Duration;

/// How long `stop` waits for the task to be gone after SIGKILL before reporting a timeout.
pub const KILL_REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// How long opening the task's stdout/stderr may wait for a fifo's reader to appear.
pub const OUTPUT_OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// After a task exits, how long its driver waits for the log writer (`logmon`) to copy the last
/// of its output before reporting the exit anyway (a leftover process may still hold the output).
pub const LOGMON_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the log helper waits for the task's side to open its fifos before it gives up and
/// exits (the driver died or failed between starting it and starting the task). Longer than the
/// driver's own wait for the two opens (2 × [`OUTPUT_OPEN_TIMEOUT`]).
pub const LOGMON_OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// First and last delay between two looks at /proc while waiting on a process that is not our
/// child (after `recover`) or on a process group to empty. Doubles from min to max.
pub const PROC_POLL_DELAY_MIN: Duration = Duration::from_millis(10);
pub const PROC_POLL_DELAY_MAX: Duration = Duration::from_secs(1);

/// While stopping, poll no slower than this, so a stop is not late by a whole poll interval.
pub const STOP_POLL_DELAY_MAX: Duration = Duration::from_millis(50);

/// The most of each of stdout and stderr that `exec` keeps; the rest is read and dropped.
pub const EXEC_OUTPUT_BYTES_MAX: usize = 1 << 20;

/// The most processes a task's process tree is followed through (stats, tree kill).
pub const PROCESS_TREE_MAX: usize = 4096;

/// The longest `kill_after` or `run_for` the mock driver accepts, so a test cannot hang forever.
pub const MOCK_DURATION_MAX: Duration = Duration::from_secs(24 * 3600);

/// The most repeats of `stdout_repeat` / `stderr_repeat` the mock driver performs.
pub const MOCK_REPEAT_MAX: u64 = 1_000_000;

/// How long removing a cgroup retries while its last processes are being reaped.
pub const CGROUP_REMOVE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the exec driver waits for its helper to report that the task started (building the
/// chroot included).
pub const EXECUTOR_START_TIMEOUT: Duration = Duration::from_secs(30);

/// The docker driver's bound on one ordinary Docker API call (inspect, create, kill, remove).
pub const DOCKER_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The bollard client's own limit on waiting for a response's headers; calls that legitimately
/// take longer (loading an image) are bounded by their own limits below it.
pub const DOCKER_CLIENT_TIMEOUT_S: u64 = 600;

/// How long the docker driver's fingerprint waits for the daemon's `/version`.
pub const DOCKER_FINGERPRINT_TIMEOUT: Duration = Duration::from_secs(2);

/// The most bytes of the daemon's `/version` answer the fingerprint reads.
pub const DOCKER_FINGERPRINT_BYTES_MAX: u64 = 64 * 1024;

/// How long loading an image tarball (`load`) may take.
pub const DOCKER_LOAD_TIMEOUT: Duration = Duration::from_secs(600);

/// After a container exits, how long its log stream may take to drain into the task's files
/// before the exit is reported anyway.
pub const DOCKER_LOG_DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// First and last delay between retries of a container wait that lost its connection.
pub const DOCKER_WAIT_RETRY_DELAY_MIN: Duration = Duration::from_millis(100);
pub const DOCKER_WAIT_RETRY_DELAY_MAX: Duration = Duration::from_secs(10);

/// Bytes read from an image tarball per chunk sent to the daemon.
pub const DOCKER_LOAD_CHUNK_BYTES: usize = 1 << 20;
