//! The durable raft log and vote, in one redb file.
//!
//! Tables: `log` (index -> entry JSON) and `meta` (`schema_version`, `vote`, `committed`,
//! `last_purged`, each JSON). Every write is one transaction; all but `committed` commit with
//! `Durability::Immediate` (fsync before `commit` returns). `committed` is optional for openraft
//! and written often, so it commits non-durably; the next durable commit (or `flush` at
//! shutdown) persists it. Losing it in a crash only means re-applying from the snapshot waits
//! for the next commit from the leader.
//!
//! The log is always contiguous: appends extend the tail, `truncate_after` cuts the tail,
//! `purge` cuts the head and records `last_purged` in the same transaction.
//!
//! A full disk is waited out, not failed ([`DiskGuard`]): a write first waits for the reserve; one
//! that fails for lack of space anyway leaves redb refusing everything, so the database is closed
//! and opened again (readers meanwhile wait and retry) and the write is tried again.

use crate::disk::DiskGuard;
use crate::types::{Entry, LogId, TypeConfig, Vote};
use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, TableDefinition, WriteTransaction,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

const KEY_SCHEMA: &str = "schema_version";
const KEY_VOTE: &str = "vote";
const KEY_COMMITTED: &str = "committed";
const KEY_LAST_PURGED: &str = "last_purged";

/// Bump when the layout of either table changes; `open` refuses other versions.
/// 1: entries and meta in JSON. 2: in MessagePack; a store still holding JSON from version 1 reads
/// on ([`decode_stored`]), so opening one only raises its number, and a build that reads only 1
/// refuses the store instead of misreading it. The number itself is decimal text in every version.
const SCHEMA_VERSION: u64 = 2;

/// The log store; clones share the database and serve as openraft's log readers.
#[derive(Clone)]
pub(crate) struct LogStore {
    db: Arc<Slot>,
    /// Bytes of entries appended since the store was opened.
    appended: Arc<std::sync::atomic::AtomicU64>,
    guard: Arc<DiskGuard>,
    /// Whether `open` found no log and made a new one.
    created: bool,
}

/// The open database, or none while it is being opened again after a failed write.
struct Slot {
    path: PathBuf,
    current: Mutex<Option<Arc<Database>>>,
}

/// How long a reader that found the database closed (being opened again) waits before it looks
/// again.
const REOPEN_WAIT: Duration = Duration::from_millis(20);

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Database>>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self) -> Option<Arc<Database>> {
        self.lock().clone()
    }

    /// Closes the database after a failed write: redb refuses every operation after one failed
    /// I/O until it is opened again. Waits for readers holding it to let go (they hold it only
    /// for one read). Blocking.
    fn close(&self) {
        let mut slot = self.lock();
        let Some(mut old) = slot.take() else {
            return;
        };
        loop {
            match Arc::try_unwrap(old) {
                Ok(db) => {
                    drop(db);
                    return;
                }
                Err(still_shared) => {
                    old = still_shared;
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
        }
    }

    /// The database, opened again if it was closed. Blocking.
    fn reopen(&self) -> io::Result<Arc<Database>> {
        let mut slot = self.lock();
        if let Some(db) = &*slot {
            return Ok(db.clone());
        }
        let db = Arc::new(
            Database::builder()
                .set_cache_size(LOG_CACHE_BYTES)
                .create(&self.path)
                .map_err(|e| redb_err("opening again", e))?,
        );
        tracing::info!(path = %self.path.display(), "raft: log store opened again");
        *slot = Some(db.clone());
        Ok(db)
    }
}

/// Opens the log at start, checking every page's checksum first: a file damaged outside redb is
/// an `InvalidData` error naming what redb found, never trusted (a plain open of one may panic
/// inside redb; that is caught and reported the same way).
fn open_db(path: &Path) -> io::Result<Database> {
    let opened = std::panic::catch_unwind(|| {
        Database::builder()
            .set_cache_size(LOG_CACHE_BYTES)
            .set_check_integrity_on_open(true)
            .create(path)
    });
    let damaged = |what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the raft log {} is damaged: {what}", path.display()),
        )
    };
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(redb::DatabaseError::Storage(redb::StorageError::Corrupted(what)))) => {
            Err(damaged(what))
        }
        Ok(Err(redb::DatabaseError::DatabaseAlreadyOpen)) => Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!(
                "the raft log {} is in use by another process (a running agent?)",
                path.display()
            ),
        )),
        Ok(Err(e)) => Err(io_err(&format!("opening {}", path.display()), e)),
        Err(panic) => Err(damaged(format!(
            "reading it failed inside redb: {}",
            panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default()
        ))),
    }
}

/// A redb failure as an `io::Error` that keeps the OS error, so a full disk is recognized.
fn redb_err(context: &str, e: impl Into<redb::Error>) -> io::Error {
    match e.into() {
        redb::Error::Io(inner) => match inner.raw_os_error() {
            Some(code) => io::Error::from_raw_os_error(code),
            None => io::Error::new(inner.kind(), format!("raft log store: {context}: {inner}")),
        },
        other => io_err(context, other),
    }
}

/// Whether a failed read means the database awaits reopening (a write failed meanwhile).
fn awaits_reopen(e: &redb::Error) -> bool {
    matches!(e, redb::Error::PreviousIo | redb::Error::DatabaseClosed)
}

/// What [`LogStore::verify_blocking`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LogSummary {
    /// The first and last index held, and the last one's term.
    pub first: Option<u64>,
    pub last: Option<(u64, u64)>,
    pub entries: u64,
    pub last_purged: Option<u64>,
    /// The term of the last vote this node saved.
    pub vote_term: Option<u64>,
    pub committed: Option<u64>,
}

/// Just the log id of a stored entry, without decoding its payload.
#[derive(Deserialize)]
struct LogIdOnly {
    log_id: LogId,
}

/// redb's page cache for the log. Its default (1 GiB) filled with log pages as entries were
/// written and stayed in the server's memory (most of its RSS in the placements benchmark); the
/// log is written once and read back only by a lagging follower or a restart, both sequential.
const LOG_CACHE_BYTES: usize = 64 * 1024 * 1024;

fn io_err(context: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("raft log store: {context}: {e}"))
}

impl LogStore {
    /// Opens (or creates) the store at `path`. Blocking.
    pub fn open(path: &Path, guard: Arc<DiskGuard>) -> io::Result<LogStore> {
        let db = open_db(path)?;
        let store = LogStore {
            db: Arc::new(Slot {
                path: path.to_path_buf(),
                current: Mutex::new(Some(Arc::new(db))),
            }),
            appended: Arc::default(),
            guard,
            created: false,
        };
        let found = store.read_schema()?;
        match found {
            Some(SCHEMA_VERSION) => {}
            Some(1) => store.write_blocking(Durability::Immediate, put_schema)?,
            Some(other) => {
                return Err(io_err(
                    "schema",
                    format!(
                        "{} has schema version {other}, this build reads {SCHEMA_VERSION}",
                        path.display()
                    ),
                ))
            }
            None => {
                store.write_blocking(Durability::Immediate, |txn| {
                    txn.open_table(LOG)?;
                    put_schema(txn)
                })?;
                return Ok(LogStore {
                    created: true,
                    ..store
                });
            }
        }
        Ok(store)
    }

    /// Whether `open` found no log (a missing or empty file) and made a new one.
    pub fn created(&self) -> bool {
        self.created
    }

    /// Reads every entry and checks it: it decodes, its index is its key, indexes run without a
    /// gap from just after the last purged one, and terms never go down. Blocking.
    pub fn verify_blocking(&self) -> io::Result<LogSummary> {
        let bad = |what: String| io::Error::new(io::ErrorKind::InvalidData, what);
        let last_purged = self.last_purged_blocking()?;
        let vote: Option<Vote> = match self.read_meta_raw_blocking(KEY_VOTE)? {
            Some(raw) => Some(decode_stored(&raw).map_err(|e| bad(format!("the vote: {e}")))?),
            None => None,
        };
        let committed: Option<LogId> = match self.read_meta_raw_blocking(KEY_COMMITTED)? {
            Some(raw) => decode_stored::<Option<LogId>>(&raw)
                .map_err(|e| bad(format!("the committed index: {e}")))?,
            None => None,
        };
        let db = self
            .db
            .get()
            .ok_or_else(|| io_err("verify", "the database is closed"))?;
        let txn = db.begin_read().map_err(|e| io_err("begin read", e))?;
        let table = txn.open_table(LOG).map_err(|e| io_err("open log", e))?;
        let mut summary = LogSummary {
            last_purged: last_purged.map(|l| l.index()),
            vote_term: vote.map(|v| v.leader_id().term),
            committed: committed.map(|l| l.index()),
            ..LogSummary::default()
        };
        let mut expected = last_purged.map(|l| l.index() + 1);
        let mut last_term = 0;
        for item in table.iter().map_err(|e| io_err("read log", e))? {
            let (key, value) = item.map_err(|e| bad(format!("reading the log: {e}")))?;
            let index = key.value();
            let entry: LogIdOnly = decode_stored(value.value())
                .map_err(|e| bad(format!("the entry at index {index} does not decode: {e}")))?;
            if entry.log_id.index() != index {
                return Err(bad(format!(
                    "the entry stored at index {index} says it is {}",
                    entry.log_id.index()
                )));
            }
            if let Some(want) = expected {
                if index != want {
                    return Err(bad(format!(
                        "the log jumps from index {} to {index}",
                        want.saturating_sub(1)
                    )));
                }
            }
            let term = entry.log_id.committed_leader_id().term;
            if term < last_term {
                return Err(bad(format!(
                    "the term goes down at index {index} ({last_term} to {term})"
                )));
            }
            last_term = term;
            summary.first.get_or_insert(index);
            summary.last = Some((index, term));
            summary.entries += 1;
            expected = Some(index + 1);
        }
        Ok(summary)
    }

    /// The last entry purged from the log (the log starts after it). Blocking.
    pub fn last_purged_blocking(&self) -> io::Result<Option<LogId>> {
        let Some(raw) = self.read_meta_raw_blocking(KEY_LAST_PURGED)? else {
            return Ok(None);
        };
        decode_stored(&raw).map_err(|e| io_err("decoding last_purged", e))
    }

    /// The count of bytes of entries appended since the store was opened. Shared, so a watcher
    /// can read it without holding the store (and its database lock) open.
    pub fn appended_bytes(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.appended.clone()
    }

    /// Makes every earlier non-durable commit durable. Blocking.
    pub fn flush(&self) -> io::Result<()> {
        self.write_blocking(Durability::Immediate, |_| Ok(()))
    }

    fn read_schema(&self) -> io::Result<Option<u64>> {
        let Some(raw) = self.read_meta_raw_blocking(KEY_SCHEMA)? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&raw).into_owned();
        text.trim()
            .parse()
            .map(Some)
            .map_err(|_| io_err("schema", format!("unreadable schema version {text:?}")))
    }

    async fn read_meta<T: DeserializeOwned>(&self, key: &str) -> io::Result<Option<T>> {
        let key = key.to_string();
        let Some(raw) = self.read(move |db| meta_raw(db, &key)).await? else {
            return Ok(None);
        };
        decode_stored(&raw)
            .map(Some)
            .map_err(|e| io_err("decoding meta", e))
    }

    fn read_meta_raw_blocking(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(read) = self.try_read(&|db: &Database| meta_raw(db, key)) {
                return read;
            }
            std::thread::sleep(REOPEN_WAIT);
        }
    }

    /// Runs `f` on the open database; `None` while the database awaits opening again after a
    /// failed write (the writer does that).
    fn try_read<T>(
        &self,
        f: &impl Fn(&Database) -> Result<T, redb::Error>,
    ) -> Option<io::Result<T>> {
        let db = self.db.get()?;
        match f(&db) {
            Err(e) if awaits_reopen(&e) => None,
            Err(e) => Some(Err(io_err("read", e))),
            Ok(v) => Some(Ok(v)),
        }
    }

    /// `try_read` until the database is open.
    async fn read<T>(&self, f: impl Fn(&Database) -> Result<T, redb::Error>) -> io::Result<T> {
        loop {
            if let Some(read) = self.try_read(&f) {
                return read;
            }
            tokio::time::sleep(REOPEN_WAIT).await;
        }
    }

    /// One write transaction, committed with `durability`; waits out a full disk (see the
    /// module doc). Blocking.
    fn write_blocking(
        &self,
        durability: Durability,
        f: impl Fn(&WriteTransaction) -> Result<(), redb::Error>,
    ) -> io::Result<()> {
        loop {
            self.guard.wait_for_room()?;
            let db = match self.db.get() {
                Some(db) => db,
                None => match self.db.reopen() {
                    Ok(db) => db,
                    Err(e) if crate::disk::is_out_of_space(&e) => {
                        self.guard.stall("opening the raft log again", &e);
                        continue;
                    }
                    Err(e) => return Err(e),
                },
            };
            let result = (|| {
                let mut txn = db.begin_write()?;
                txn.set_durability(durability)?;
                f(&txn)?;
                txn.commit()?;
                Ok::<(), redb::Error>(())
            })();
            drop(db);
            match result {
                Ok(()) => {
                    self.guard.clear();
                    return Ok(());
                }
                // Another write failed meanwhile and left the database refusing everything.
                Err(e) if awaits_reopen(&e) => self.db.close(),
                Err(e) => {
                    let e = redb_err("write", e);
                    if !crate::disk::is_out_of_space(&e) {
                        return Err(e);
                    }
                    self.db.close();
                    if self.guard.stopping() {
                        return Err(e);
                    }
                    self.guard.stall("writing the raft log", &e);
                }
            }
        }
    }

    /// `write_blocking` off the async threads.
    async fn write(
        &self,
        durability: Durability,
        f: impl Fn(&WriteTransaction) -> Result<(), redb::Error> + Send + 'static,
    ) -> io::Result<()> {
        let store = self.clone();
        crate::rt::blocking(move || store.write_blocking(durability, f))
            .await
            .map_err(|e| io_err("write task", e))?
    }

    async fn last_log_id(&self) -> io::Result<Option<LogId>> {
        let raw = self
            .read(|db| {
                let txn = db.begin_read()?;
                let table = txn.open_table(LOG)?;
                let last = table.last()?.map(|(_, value)| value.value().to_vec());
                Ok(last)
            })
            .await?;
        let Some(raw) = raw else {
            return Ok(None);
        };
        let only: LogIdOnly = decode_stored(&raw).map_err(|e| io_err("decoding entry", e))?;
        Ok(Some(only.log_id))
    }
}

/// A meta value's stored bytes.
fn meta_raw(db: &Database, key: &str) -> Result<Option<Vec<u8>>, redb::Error> {
    let txn = db.begin_read()?;
    let table = match txn.open_table(META) {
        Ok(t) => t,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let value = table.get(key)?;
    Ok(value.map(|v| v.value().to_vec()))
}

fn put_schema(txn: &WriteTransaction) -> Result<(), redb::Error> {
    let text = SCHEMA_VERSION.to_string();
    txn.open_table(META)?.insert(KEY_SCHEMA, text.as_bytes())?;
    Ok(())
}

/// A stored entry or meta value. They are MessagePack; a log written by an earlier version holds
/// JSON, whose values here (objects, `null`, arrays, strings) start with a byte that no stored
/// MessagePack value starts with (MessagePack would read it as a small integer).
fn decode_stored<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    match bytes.first() {
        Some(b'{' | b'n' | b'[' | b'"') => serde_json::from_slice(bytes).map_err(|e| e.to_string()),
        _ => rpc::codec::decode(bytes).map_err(|e| e.to_string()),
    }
}

fn put_meta<T: Serialize>(txn: &WriteTransaction, key: &str, value: &T) -> Result<(), redb::Error> {
    let bytes = rpc::codec::encode(value).expect("log ids and votes always encode");
    txn.open_table(META)?.insert(key, bytes.as_slice())?;
    Ok(())
}

/// Removes every entry whose index lies in `range`.
fn remove_range(
    txn: &WriteTransaction,
    range: (Bound<u64>, Bound<u64>),
) -> Result<(), redb::Error> {
    txn.open_table(LOG)?.retain_in(range, |_, _| false)?;
    Ok(())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> io::Result<Vec<Entry>> {
        let bounds = (range.start_bound().cloned(), range.end_bound().cloned());
        let rows = self
            .read(move |db| {
                let txn = db.begin_read()?;
                let table = txn.open_table(LOG)?;
                let mut rows = Vec::new();
                for item in table.range(bounds)? {
                    rows.push(item?.1.value().to_vec());
                }
                Ok(rows)
            })
            .await?;
        rows.iter()
            .map(|row| decode_stored(row).map_err(|e| io_err("decoding entry", e)))
            .collect()
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        self.read_meta(KEY_VOTE).await
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId> = self.read_meta(KEY_LAST_PURGED).await?;
        let last_log_id = self.last_log_id().await?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        let vote = *vote;
        self.write(Durability::Immediate, move |txn| {
            put_meta(txn, KEY_VOTE, &vote)
        })
        .await
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        self.write(Durability::None, move |txn| {
            put_meta(txn, KEY_COMMITTED, &committed)
        })
        .await
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        Ok(self
            .read_meta::<Option<LogId>>(KEY_COMMITTED)
            .await?
            .flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut rows = Vec::new();
        for entry in entries {
            let bytes = rpc::codec::encode(&entry).map_err(|e| io_err("encoding entry", e))?;
            rows.push((entry.log_id.index(), bytes));
        }
        let bytes: usize = rows.iter().map(|(_, b)| b.len()).sum();
        self.appended
            .fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
        let result = self
            .write(Durability::Immediate, move |txn| {
                let mut table = txn.open_table(LOG)?;
                for (index, bytes) in &rows {
                    table.insert(index, bytes.as_slice())?;
                }
                Ok(())
            })
            .await;
        // Only now is the batch on disk.
        match result {
            Ok(()) => {
                callback.io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.io_completed(Err(io::Error::new(e.kind(), e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> io::Result<()> {
        let from = match &last_log_id {
            Some(id) => Bound::Excluded(id.index()),
            None => Bound::Unbounded,
        };
        self.write(Durability::Immediate, move |txn| {
            remove_range(txn, (from, Bound::Unbounded))
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> io::Result<()> {
        self.write(Durability::Immediate, move |txn| {
            put_meta(txn, KEY_LAST_PURGED, &log_id)?;
            remove_range(txn, (Bound::Unbounded, Bound::Included(log_id.index())))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Bytes, TypeConfig};
    use openraft::entry::RaftEntry;
    use openraft::type_config::alias::{LeaderIdOf, LogIdOf};
    use openraft::vote::RaftLeaderIdExt;

    fn log_id(term: u64, index: u64) -> LogId {
        LogIdOf::<TypeConfig>::new(LeaderIdOf::<TypeConfig>::new_committed(term, 1), index)
    }

    /// A data dir written before MessagePack (schema 1, JSON rows) opens, reads, and takes new
    /// entries; a schema this build does not know is refused.
    #[tokio::test]
    async fn a_json_log_from_an_earlier_version_still_reads() {
        let dir = std::env::temp_dir().join(format!("caravan-log-json-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("raft.db");
        let old = Entry::new_normal(log_id(1, 1), Bytes(b"first".to_vec()));
        {
            let db = Database::create(&path).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut meta = txn.open_table(META).unwrap();
                meta.insert(KEY_SCHEMA, b"1".as_slice()).unwrap();
                let committed = serde_json::to_vec(&Some(log_id(1, 1))).unwrap();
                meta.insert(KEY_COMMITTED, committed.as_slice()).unwrap();
                let mut log = txn.open_table(LOG).unwrap();
                let row = serde_json::to_vec(&old).unwrap();
                assert_eq!(row.first(), Some(&b'{'));
                log.insert(1, row.as_slice()).unwrap();
            }
            txn.commit().unwrap();
        }
        let mut store = LogStore::open(&path, Arc::new(DiskGuard::new(&dir, 0))).unwrap();
        assert_eq!(store.read_schema().unwrap(), Some(SCHEMA_VERSION));
        assert_eq!(store.read_committed().await.unwrap(), Some(log_id(1, 1)));
        assert_eq!(store.last_log_id().await.unwrap(), Some(log_id(1, 1)));
        let newer = Entry::new_normal(log_id(1, 2), Bytes(b"second".to_vec()));
        let row = rpc::codec::encode(&newer).unwrap();
        store
            .write_blocking(Durability::Immediate, move |txn| {
                txn.open_table(LOG)?.insert(2, row.as_slice())?;
                Ok(())
            })
            .unwrap();
        let entries = store.try_get_log_entries(1..3).await.unwrap();
        assert_eq!(entries, vec![old, newer]);
        drop(store);

        let db = Database::open(&path).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META)
            .unwrap()
            .insert(KEY_SCHEMA, b"3".as_slice())
            .unwrap();
        txn.commit().unwrap();
        drop(db);
        let err = LogStore::open(&path, Arc::new(DiskGuard::new(&dir, 0)))
            .err()
            .expect("schema 3 is refused");
        assert!(err.to_string().contains("schema version 3"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Mounts a tmpfs of `mib` MiB at `dir`; `false` where that is not allowed (not root).
    fn mount_tmpfs(dir: &Path, mib: u32) -> bool {
        std::fs::create_dir_all(dir).unwrap();
        std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Writes zeros to `path` until the file system is full.
    fn fill(path: &Path) {
        let mut file = std::fs::File::create(path).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while std::io::Write::write_all(&mut file, &chunk).is_ok() {}
        let _ = file.sync_all();
    }

    /// With no reserve, an append that runs out of space fails inside redb, which then refuses
    /// every read and write until it is opened again: the store opens it again, readers wait
    /// rather than fail, and the append completes once space returns; nothing before it is lost.
    /// Needs root (it mounts a small tmpfs); says so and passes elsewhere.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_append_that_finds_the_disk_full_completes_when_space_returns() {
        let dir = std::env::temp_dir().join(format!("caravan-log-full-{}", std::process::id()));
        if !mount_tmpfs(&dir, 8) {
            eprintln!("SKIPPING: mounting a tmpfs needs root");
            return;
        }
        struct Unmount(PathBuf);
        impl Drop for Unmount {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(&self.0).status();
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let _unmount = Unmount(dir.clone());
        let guard = Arc::new(DiskGuard::new(&dir, 0));
        let path = dir.join("raft.redb");
        let mut store = LogStore::open(&path, guard.clone()).unwrap();
        let entry =
            |i: u64, bytes: usize| Entry::new_normal(log_id(1, i), Bytes(vec![i as u8; bytes]));
        for i in 1..=3 {
            store
                .append([entry(i, 100)], IOFlushed::noop())
                .await
                .unwrap();
        }
        fill(&dir.join("filler"));

        // Bigger than anything redb has free inside its file: it must grow, and cannot.
        let mut writer = store.clone();
        let big = entry(4, 2 * 1024 * 1024);
        let pending = tokio::spawn(async move { writer.append([big], IOFlushed::noop()).await });
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while guard.stalled().is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "the append never stalled"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(
            guard.stalled().unwrap().contains("No space left"),
            "{:?}",
            guard.stalled()
        );
        assert!(
            !pending.is_finished(),
            "the append returned while the disk was full"
        );
        // Readers are not failed by the store's refusing state: they wait for the reopen.
        let read = store.try_get_log_entries(1..4).await.unwrap();
        assert_eq!(read.len(), 3);

        std::fs::remove_file(dir.join("filler")).unwrap();
        tokio::time::timeout(Duration::from_secs(30), pending)
            .await
            .expect("the append completes once space returns")
            .unwrap()
            .unwrap();
        assert_eq!(guard.stalled(), None);
        drop(store);
        let mut again = LogStore::open(&path, guard).unwrap();
        let all = again.try_get_log_entries(1..5).await.unwrap();
        assert_eq!(all.len(), 4);
        assert_eq!(all[3], entry(4, 2 * 1024 * 1024));
    }
}
