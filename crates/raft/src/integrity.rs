//! Opening the raft store only when it can be trusted, and the offline tools that inspect it and
//! set a damaged one aside.
//!
//! A node must never start from less than it had: an empty log would forget the cluster's state
//! (a one-server cluster comes back empty, silently) and this node's vote (it could vote twice in
//! one term, which breaks Raft's safety). So [`open_storage`] refuses, naming the file and the
//! recovery, when:
//! - the log file is missing or empty but this node wrote one before (the marker file
//!   `raft.redb.written`, made beside it when the log is first created, says so);
//! - redb's checksums find a damaged page (every page is checked at open);
//! - an entry does not decode, indexes have a gap, or terms go down;
//! - the log was compacted behind a snapshot that is missing or older, or the snapshot file's
//!   SHA-256 does not match.
//!
//! The recovery ([`move_aside`], `caravan operator raft recover`): the raft dir is renamed aside
//! and the server starts with a new raft identity, so it joins its peers as a new member and
//! copies the state from the leader; the old identity is removed from the cluster. A server that
//! had no peers starts a new cluster and restores a snapshot taken with `operator snapshot save`.

use crate::disk::DiskGuard;
use crate::log_store::{LogStore, LogSummary};
use crate::snapshot::SnapshotFiles;
use crate::RaftError;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const LOG_FILE: &str = "raft.redb";
/// Made (and fsynced) beside the log when the log is first created.
const WRITTEN_MARKER: &str = "raft.redb.written";
const SNAPSHOTS: &str = "snapshots";
/// Locked (flock, exclusive) by the node that has the store open, for its whole life: offline
/// tools refuse a store in use even while its database is closed (a full disk), and two agents
/// never share one data dir.
const LOCK_FILE: &str = "lock";

/// The held lock on a raft dir; released when dropped (or when the process dies).
pub(crate) struct DirLock(#[allow(dead_code)] nix::fcntl::Flock<std::fs::File>);

/// Takes the raft dir's lock, or says who holds it.
pub(crate) fn lock_dir(dir: &Path) -> Result<DirLock, RaftError> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| RaftError::Storage(format!("opening {}: {e}", path.display())))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map(DirLock)
        .map_err(|(_, errno)| match errno {
            nix::errno::Errno::EWOULDBLOCK => RaftError::Storage(format!(
                "{} is in use by another process (a running agent?); stop it first",
                dir.display()
            )),
            other => RaftError::Storage(format!("locking {}: {other}", path.display())),
        })
}

/// The refusal for a damaged or missing store, with the way out.
fn damaged(dir: &Path, what: impl std::fmt::Display) -> RaftError {
    RaftError::Damaged {
        dir: dir.display().to_string(),
        what: what.to_string(),
    }
}

fn storage(e: io::Error, dir: &Path) -> RaftError {
    match e.kind() {
        io::ErrorKind::InvalidData => damaged(dir, e),
        _ => RaftError::Storage(e.to_string()),
    }
}

/// Opens the log and snapshots in `dir` for a node, refusing any store that cannot be trusted
/// (see the module doc). Blocking.
pub(crate) fn open_storage(
    dir: &Path,
    guard: Arc<DiskGuard>,
) -> Result<(LogStore, SnapshotFiles, DirLock), RaftError> {
    std::fs::create_dir_all(dir).map_err(|e| RaftError::Storage(e.to_string()))?;
    let lock = lock_dir(dir)?;
    let marker = dir.join(WRITTEN_MARKER);
    let written_before = marker.exists();
    let log_path = dir.join(LOG_FILE);
    // Checked before opening: opening creates a log where there is none, and the next start
    // would find that one and trust it.
    let absent = !log_path.exists() || log_path.metadata().is_ok_and(|m| m.len() == 0);
    let log = if absent && written_before {
        None
    } else {
        Some(LogStore::open(&log_path, guard.clone()).map_err(|e| storage(e, dir))?)
    };
    let Some(log) = log.filter(|log| !(log.created() && written_before)) else {
        return Err(damaged(
            dir,
            format!(
                "{LOG_FILE} is missing or empty, but this server wrote one before ({WRITTEN_MARKER} \
                 is there): starting from an empty log would lose the cluster's state and this \
                 server's vote"
            ),
        ));
    };
    if !written_before {
        write_marker(dir, &marker).map_err(|e| RaftError::Storage(e.to_string()))?;
    }
    let summary = log.verify_blocking().map_err(|e| storage(e, dir))?;
    let snapshots = Arc::new(guard.sibling());
    let files =
        SnapshotFiles::open(&dir.join(SNAPSHOTS), snapshots).map_err(|e| storage(e, dir))?;
    check_snapshot_covers(dir, &summary, &files)?;
    Ok((log, files, lock))
}

/// The log, its vote and its snapshot agree: the vote is no older than the last entry's term (a
/// node votes before it takes entries of a term), the committed index lies within what the log
/// and snapshot hold, and the log starts after its last purged entry, whose state lives only in
/// the snapshot.
fn check_snapshot_covers(
    dir: &Path,
    summary: &LogSummary,
    files: &SnapshotFiles,
) -> Result<(), RaftError> {
    let snapshot = files
        .current_meta()
        .and_then(|m| m.last_log_id.map(|l| l.index()));
    if let Some((_, last_term)) = summary.last {
        if summary.vote_term.unwrap_or(0) < last_term {
            return Err(damaged(
                dir,
                format!(
                    "the saved vote (term {}) is older than the log's last entry (term {last_term}): the vote was lost",
                    summary.vote_term.unwrap_or(0)
                ),
            ));
        }
    }
    if let Some(committed) = summary.committed {
        let held = summary.last.map(|l| l.0).max(snapshot).unwrap_or(0);
        if committed > held {
            return Err(damaged(
                dir,
                format!("the committed index {committed} is past everything the log and snapshot hold ({held})"),
            ));
        }
    }
    let Some(purged) = summary.last_purged else {
        return Ok(());
    };
    if snapshot.is_none_or(|s| s < purged) {
        return Err(damaged(
            dir,
            format!(
                "the log was compacted through index {purged}, but the snapshot that holds the \
                 state up to there ({SNAPSHOTS}/current.snap) is {}",
                snapshot.map_or("missing".to_string(), |s| format!("older (index {s})"))
            ),
        ));
    }
    Ok(())
}

fn write_marker(dir: &Path, marker: &Path) -> io::Result<()> {
    std::fs::write(
        marker,
        "This server has written its raft log here; it refuses to start without it.\n",
    )?;
    std::fs::File::open(marker)?.sync_all()?;
    std::fs::File::open(dir)?.sync_all()
}

/// What `caravan operator raft info` prints about a stopped server's raft store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    pub dir: String,
    pub log_bytes: u64,
    /// First and last index held (none: the log holds no entries).
    pub first_index: Option<u64>,
    pub last_index: Option<u64>,
    pub last_term: Option<u64>,
    pub entries: u64,
    pub last_purged: Option<u64>,
    pub committed: Option<u64>,
    pub vote_term: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub snapshot_term: Option<u64>,
    pub snapshot_bytes: Option<u64>,
}

/// Checks a stopped server's raft store as a start would (without creating anything) and
/// describes it. A damaged store is `RaftError::Damaged`; a store in use is refused. Blocking.
pub fn inspect(dir: &Path) -> Result<Inspection, RaftError> {
    let log_path = dir.join(LOG_FILE);
    if !log_path.exists() || log_path.metadata().is_ok_and(|m| m.len() == 0) {
        let why = if dir.join(WRITTEN_MARKER).exists() {
            format!("{LOG_FILE} is missing or empty, but this server wrote one before")
        } else {
            format!("there is no raft log ({LOG_FILE}) here")
        };
        return Err(damaged(dir, why));
    }
    let _lock = lock_dir(dir)?;
    // The guard never waits here: nothing is written unless redb repairs the file.
    let guard = Arc::new(DiskGuard::new(dir, 0));
    let log = LogStore::open(&log_path, guard.clone()).map_err(|e| storage(e, dir))?;
    let summary = log.verify_blocking().map_err(|e| storage(e, dir))?;
    let files =
        SnapshotFiles::open_existing(&dir.join(SNAPSHOTS), guard).map_err(|e| storage(e, dir))?;
    check_snapshot_covers(dir, &summary, &files)?;
    let snapshot = files.current_meta().and_then(|m| m.last_log_id);
    Ok(Inspection {
        dir: dir.display().to_string(),
        log_bytes: log_path.metadata().map(|m| m.len()).unwrap_or(0),
        first_index: summary.first,
        last_index: summary.last.map(|l| l.0),
        last_term: summary.last.map(|l| l.1),
        entries: summary.entries,
        last_purged: summary.last_purged,
        committed: summary.committed,
        vote_term: summary.vote_term,
        snapshot_index: snapshot.map(|l| l.index()),
        snapshot_term: snapshot.map(|l| l.committed_leader_id().term),
        snapshot_bytes: files.current_bytes(),
    })
}

/// Where a damaged raft dir goes: `<dir>.damaged-<unix seconds>` beside it.
pub fn aside_path(dir: &Path) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "raft".into());
    dir.with_file_name(format!("{name}.damaged-{secs}"))
}

/// Renames a stopped server's raft dir to `<dir>.damaged-<unix seconds>` and returns the new
/// path; refused while an agent holds the log open. Blocking.
pub fn move_aside(dir: &Path) -> Result<PathBuf, RaftError> {
    if !dir.exists() {
        return Err(RaftError::Storage(format!(
            "{} does not exist: is this the agent's data dir?",
            dir.display()
        )));
    }
    // Held through the rename: no agent can open the store meanwhile.
    let _lock = lock_dir(dir)?;
    let aside = aside_path(dir);
    std::fs::rename(dir, &aside).map_err(|e| {
        RaftError::Storage(format!(
            "moving {} to {}: {e}",
            dir.display(),
            aside.display()
        ))
    })?;
    Ok(aside)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Bytes, Entry, LogId, StoredMembership, TypeConfig};
    use openraft::entry::RaftEntry;
    use openraft::storage::{IOFlushed, RaftLogStorage};
    use openraft::type_config::alias::{LeaderIdOf, LogIdOf};
    use openraft::vote::RaftLeaderIdExt;

    fn log_id(term: u64, index: u64) -> LogId {
        LogIdOf::<TypeConfig>::new(LeaderIdOf::<TypeConfig>::new_committed(term, 1), index)
    }

    fn fresh(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("caravan-integrity-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn guard(dir: &Path) -> Arc<DiskGuard> {
        Arc::new(DiskGuard::new(dir, 0))
    }

    /// A store with entries 1..=n of term 1 (and the vote for it, as raft saves it first),
    /// opened and closed.
    async fn written(dir: &Path, n: u64) {
        let (mut log, _files, _lock) = open_storage(dir, guard(dir)).unwrap();
        log.save_vote(&crate::types::Vote::new_committed(1, 1))
            .await
            .unwrap();
        for i in 1..=n {
            let e = Entry::new_normal(log_id(1, i), Bytes(vec![i as u8]));
            log.append([e], IOFlushed::noop()).await.unwrap();
        }
    }

    fn refusal(r: Result<(LogStore, SnapshotFiles, DirLock), RaftError>) -> String {
        match r {
            Err(e @ RaftError::Damaged { .. }) => e.to_string(),
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("the store was accepted"),
        }
    }

    #[tokio::test]
    async fn a_log_removed_or_emptied_after_it_was_written_is_refused_not_recreated() {
        for how in ["removed", "emptied"] {
            let dir = fresh(how);
            written(&dir, 3).await;
            let log = dir.join(LOG_FILE);
            if how == "removed" {
                std::fs::remove_file(&log).unwrap();
            } else {
                std::fs::write(&log, b"").unwrap();
            }
            let why = refusal(open_storage(&dir, guard(&dir)));
            assert!(why.contains("missing or empty"), "{why}");
            assert!(why.contains("operator raft recover"), "{why}");
            // The refusal created nothing the next start would trust.
            refusal(open_storage(&dir, guard(&dir)));
            assert!(inspect(&dir).is_err());
            let _ = std::fs::remove_dir_all(&dir);
        }
        // A first start (no marker yet) creates the log, and the next start opens it.
        let dir = fresh("first");
        written(&dir, 2).await;
        let info = inspect(&dir).unwrap();
        assert_eq!((info.first_index, info.last_index), (Some(1), Some(2)));
        assert!(open_storage(&dir, guard(&dir)).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_vote_older_than_the_log_is_refused() {
        let dir = fresh("vote");
        written(&dir, 2).await;
        {
            let (mut log, _files, _lock) = open_storage(&dir, guard(&dir)).unwrap();
            // As if the vote had been lost: an older one in its place.
            log.save_vote(&crate::types::Vote::new(0, 1)).await.unwrap();
        }
        let why = refusal(open_storage(&dir, guard(&dir)));
        assert!(why.contains("the vote was lost"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_log_compacted_behind_a_missing_snapshot_is_refused() {
        let dir = fresh("purged");
        written(&dir, 4).await;
        {
            let (mut log, files, _lock) = open_storage(&dir, guard(&dir)).unwrap();
            let meta = crate::types::SnapshotMeta {
                last_log_id: Some(log_id(1, 2)),
                last_membership: StoredMembership::default(),
            };
            files.save(&meta, b"state").unwrap();
            log.purge(log_id(1, 2)).await.unwrap();
        }
        let info = inspect(&dir).unwrap();
        assert_eq!(info.last_purged, Some(2));
        assert_eq!(info.first_index, Some(3));
        assert_eq!(info.snapshot_index, Some(2));
        std::fs::remove_file(dir.join(SNAPSHOTS).join("current.snap")).unwrap();
        let why = refusal(open_storage(&dir, guard(&dir)));
        assert!(why.contains("compacted through index 2"), "{why}");
        assert!(why.contains("missing"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_damaged_snapshot_file_is_refused_by_its_checksum() {
        let dir = fresh("snap");
        written(&dir, 1).await;
        {
            let (_log, files, _lock) = open_storage(&dir, guard(&dir)).unwrap();
            let meta = crate::types::SnapshotMeta {
                last_log_id: Some(log_id(1, 1)),
                last_membership: StoredMembership::default(),
            };
            files.save(&meta, b"the state of the cluster").unwrap();
        }
        let path = dir.join(SNAPSHOTS).join("current.snap");
        let mut bytes = std::fs::read(&path).unwrap();
        let at = bytes.len() - 40;
        bytes[at] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let why = refusal(open_storage(&dir, guard(&dir)));
        assert!(why.contains("SHA-256 does not match"), "{why}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn move_aside_renames_the_store_and_refuses_one_in_use() {
        let dir = fresh("aside");
        written(&dir, 1).await;
        let (held, _files, lock) = open_storage(&dir, guard(&dir)).unwrap();
        let err = move_aside(&dir).unwrap_err().to_string();
        assert!(err.contains("in use by another process"), "{err}");
        drop(held);
        drop(lock);
        let aside = move_aside(&dir).unwrap();
        assert!(!dir.exists());
        assert!(aside.join(LOG_FILE).exists());
        let _ = std::fs::remove_dir_all(&aside);
    }
}
