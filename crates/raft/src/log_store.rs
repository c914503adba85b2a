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
use std::path::Path;
use std::sync::Arc;

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
    db: Arc<Database>,
    /// Bytes of entries appended since the store was opened.
    appended: Arc<std::sync::atomic::AtomicU64>,
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
    pub fn open(path: &Path) -> io::Result<LogStore> {
        let db = Database::builder()
            .set_cache_size(LOG_CACHE_BYTES)
            .create(path)
            .map_err(|e| io_err(&format!("opening {}", path.display()), e))?;
        let store = LogStore {
            db: Arc::new(db),
            appended: Arc::default(),
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
            None => store.write_blocking(Durability::Immediate, |txn| {
                txn.open_table(LOG)?;
                put_schema(txn)
            })?,
        }
        Ok(store)
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
        let Some(raw) = self.read_meta_raw(KEY_SCHEMA)? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&raw).into_owned();
        text.trim()
            .parse()
            .map(Some)
            .map_err(|_| io_err("schema", format!("unreadable schema version {text:?}")))
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &str) -> io::Result<Option<T>> {
        let Some(raw) = self.read_meta_raw(key)? else {
            return Ok(None);
        };
        decode_stored(&raw)
            .map(Some)
            .map_err(|e| io_err(&format!("decoding {key}"), e))
    }

    /// A meta value's stored bytes.
    fn read_meta_raw(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        let txn = self.db.begin_read().map_err(|e| io_err("begin read", e))?;
        let table = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(io_err("open meta", e)),
        };
        let value = table.get(key).map_err(|e| io_err("read meta", e))?;
        Ok(value.map(|v| v.value().to_vec()))
    }

    /// One write transaction, committed with `durability`. Blocking.
    fn write_blocking(
        &self,
        durability: Durability,
        f: impl FnOnce(&WriteTransaction) -> Result<(), redb::Error>,
    ) -> io::Result<()> {
        let mut txn = self
            .db
            .begin_write()
            .map_err(|e| io_err("begin write", e))?;
        txn.set_durability(durability)
            .map_err(|e| io_err("set durability", e))?;
        f(&txn).map_err(|e| io_err("write", e))?;
        txn.commit().map_err(|e| io_err("commit", e))
    }

    /// `write_blocking` off the async threads.
    async fn write(
        &self,
        durability: Durability,
        f: impl FnOnce(&WriteTransaction) -> Result<(), redb::Error> + Send + 'static,
    ) -> io::Result<()> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.write_blocking(durability, f))
            .await
            .map_err(|e| io_err("write task", e))?
    }

    fn last_log_id(&self) -> io::Result<Option<LogId>> {
        let txn = self.db.begin_read().map_err(|e| io_err("begin read", e))?;
        let table = txn.open_table(LOG).map_err(|e| io_err("open log", e))?;
        let Some((_, value)) = table.last().map_err(|e| io_err("read last", e))? else {
            return Ok(None);
        };
        let only: LogIdOnly =
            decode_stored(value.value()).map_err(|e| io_err("decoding entry", e))?;
        Ok(Some(only.log_id))
    }
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
        let txn = self.db.begin_read().map_err(|e| io_err("begin read", e))?;
        let table = txn.open_table(LOG).map_err(|e| io_err("open log", e))?;
        let mut entries = Vec::new();
        for item in table.range(bounds).map_err(|e| io_err("read range", e))? {
            let (_, value) = item.map_err(|e| io_err("read entry", e))?;
            entries.push(decode_stored(value.value()).map_err(|e| io_err("decoding entry", e))?);
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        self.read_meta(KEY_VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let last_purged_log_id: Option<LogId> = self.read_meta(KEY_LAST_PURGED)?;
        let last_log_id = self.last_log_id()?.or(last_purged_log_id);
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
        Ok(self.read_meta::<Option<LogId>>(KEY_COMMITTED)?.flatten())
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
        let mut store = LogStore::open(&path).unwrap();
        assert_eq!(store.read_schema().unwrap(), Some(SCHEMA_VERSION));
        assert_eq!(store.read_committed().await.unwrap(), Some(log_id(1, 1)));
        assert_eq!(store.last_log_id().unwrap(), Some(log_id(1, 1)));
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
        let err = LogStore::open(&path).err().expect("schema 3 is refused");
        assert!(err.to_string().contains("schema version 3"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
