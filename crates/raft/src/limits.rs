//! Every limit of the raft glue, in one place.

use std::time::Duration;

/// The largest payload `RaftNode::write` accepts. Keeps one entry well inside one rpc frame
/// (64 MiB, and base64 grows bytes by a third).
pub const ENTRY_BYTES_MAX: usize = 16 * 1024 * 1024;

/// Payload bytes one AppendEntries carries at most; the network sends fewer entries (and
/// reports a partial success) rather than build a frame the transport refuses.
pub const APPEND_PAYLOAD_BYTES_MAX: usize = 24 * 1024 * 1024;

/// Entries one AppendEntries carries at most (openraft's `max_payload_entries`).
pub const APPEND_ENTRIES_MAX: u64 = 256;

/// The least time an AppendEntries that carries entries gets. Openraft's deadline is one
/// heartbeat interval, too short for a large batch on a busy machine, and a batch that always
/// times out is retried forever. (An empty AppendEntries, a heartbeat, keeps openraft's.)
pub const APPEND_TIMEOUT_MIN: Duration = Duration::from_secs(5);

/// The largest snapshot a follower buffers while receiving it (one transfer at a time); a
/// transfer past it is dropped with an error instead of growing without end.
pub const SNAPSHOT_RECEIVE_BYTES_MAX: usize = 2 * 1024 * 1024 * 1024;

/// Snapshot bytes per `Raft.Snapshot` chunk.
pub const SNAPSHOT_CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// Sending and installing a whole snapshot on a follower (openraft's `install_snapshot_timeout`).
pub const SNAPSHOT_INSTALL_TIMEOUT: Duration = Duration::from_secs(120);

/// One snapshot chunk's answer, within the whole install's limit. A chunk lost on the way (a
/// connection dead without a reset) used to wait out the whole [`SNAPSHOT_INSTALL_TIMEOUT`] before
/// openraft sent the snapshot again, and the follower stayed behind that long (the simulation
/// found it). The last chunk's answer comes after the follower installed the snapshot, so it
/// also gets [`SNAPSHOT_INSTALL_PER_MIB`] per MiB of the whole snapshot.
pub const SNAPSHOT_CHUNK_TIMEOUT: Duration = Duration::from_secs(15);

/// What the last chunk may wait, per MiB of snapshot, for the follower to install it.
pub const SNAPSHOT_INSTALL_PER_MIB: Duration = Duration::from_secs(1);

/// The least number of already-snapshotted entries kept in the log. Openraft purges the log
/// behind each snapshot; a small tail lets a queued apply race the purge and panic the core
/// (upstream openraft issue #2116), so the tail is at least this, and at least two snapshot
/// intervals.
pub const LOGS_KEPT_BEHIND_SNAPSHOT_MIN: u64 = 64;

/// How long `RaftNode::read_index` waits for a quorum to confirm the leadership.
pub const READ_INDEX_TIMEOUT: Duration = Duration::from_secs(2);

/// How long `RaftNode::write` waits for its entry to commit and apply.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a membership change (a learner catching up, then its promotion) may take.
pub const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(60);

/// How often the log's size is looked at for the byte-count snapshot trigger.
pub const LOG_BYTES_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Free space the raft store keeps on its data dir's file system: below it, writes wait for space
/// (and the node refuses new ones) rather than fail, so a full disk never stops raft for good.
/// Above the largest entry ([`ENTRY_BYTES_MAX`]), so one write never takes the last of it.
pub const MIN_FREE_BYTES: u64 = 32 * 1024 * 1024;
