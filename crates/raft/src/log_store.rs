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
const SCHEMA_VERSION: u64 = 1;

/// The log store; clones share the database and serve as openraft's log readers.
#[derive(Clone)]
pub(crate) struct LogStore {
    db: Arc<Database>,
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
        let store = LogStore { db: Arc::new(db) };
        let found: Option<u64> = store.read_meta(KEY_SCHEMA)?;
        match found {
            Some(SCHEMA_VERSION) => {}
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
                put_meta(txn, KEY_SCHEMA, &SCHEMA_VERSION)
            })?,
        }
        Ok(store)
    }

    /// Makes every earlier non-durable commit durable. Blocking.
    pub fn flush(&self) -> io::Result<()> {
        self.write_blocking(Durability::Immediate, |_| Ok(()))
    }

    fn read_meta<T: DeserializeOwned>(&self, key: &str) -> io::Result<Option<T>> {
        let txn = self.db.begin_read().map_err(|e| io_err("begin read", e))?;
        let table = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(io_err("open meta", e)),
        };
        let Some(value) = table.get(key).map_err(|e| io_err("read meta", e))? else {
            return Ok(None);
        };
        serde_json::from_slice(value.value())
            .map(Some)
            .map_err(|e| io_err(&format!("decoding {key}"), e))
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
            serde_json::from_slice(value.value()).map_err(|e| io_err("decoding entry", e))?;
        Ok(Some(only.log_id))
    }
}

fn put_meta<T: Serialize>(txn: &WriteTransaction, key: &str, value: &T) -> Result<(), redb::Error> {
    let bytes = serde_json::to_vec(value).expect("log ids and votes always encode");
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
            entries.push(
                serde_json::from_slice(value.value()).map_err(|e| io_err("decoding entry", e))?,
            );
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
            let bytes = serde_json::to_vec(&entry).map_err(|e| io_err("encoding entry", e))?;
            rows.push((entry.log_id.index(), bytes));
        }
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
