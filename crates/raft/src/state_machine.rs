//! The application's state machine behind openraft's `RaftStateMachine`.
//!
//! The application state lives in memory; what makes it durable is the snapshot file plus the
//! log. On open openraft installs the current snapshot and re-applies the committed log after it.

use crate::snapshot::SnapshotFiles;
use crate::types::{Bytes, Entry, LogId, Snapshot, SnapshotMeta, StoredMembership, TypeConfig};
use futures::{Stream, StreamExt};
use openraft::storage::{EntryResponder, RaftSnapshotBuilder, RaftStateMachine};
use openraft::{EntryPayload, OptionalSend};
use std::io;
use std::sync::Arc;

/// The application's state machine, applied in log order; must be deterministic.
///
/// `apply` sees every entry's payload exactly once per incarnation of the state (after a restart
/// the state is rebuilt with `restore` and the entries after the snapshot are applied again).
pub trait StateMachine: Send + Sync + 'static {
    /// Applies the entry at `index`; returns the response bytes the writer receives.
    fn apply(&self, index: u64, payload: &[u8]) -> Vec<u8>;
    /// The full state as of the last applied entry, as `restore` reads it. Called on the state
    /// machine's task, so it must only capture (O(1) for an immutable state); the returned
    /// writer serializes it later on a blocking thread, while entries go on being applied.
    fn snapshot(&self) -> SnapshotWriter;
    /// Replaces the whole state with a snapshot's.
    fn restore(&self, data: &[u8]) -> Result<(), String>;
}

/// Serializes a captured state; runs off the state machine's task.
pub type SnapshotWriter = Box<dyn FnOnce() -> Vec<u8> + Send + Sync>;

pub(crate) struct SmStore {
    app: Arc<dyn StateMachine>,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    files: Arc<SnapshotFiles>,
}

impl SmStore {
    pub fn new(app: Arc<dyn StateMachine>, files: Arc<SnapshotFiles>) -> SmStore {
        SmStore {
            app,
            last_applied: None,
            membership: StoredMembership::default(),
            files,
        }
    }
}

/// A snapshot captured in the state machine's task (so it matches `last_applied` exactly),
/// serialized and written to disk by openraft's snapshot task on a blocking thread: applies
/// never wait for it.
pub(crate) struct SnapshotBuilder {
    meta: SnapshotMeta,
    writer: Option<SnapshotWriter>,
    files: Arc<SnapshotFiles>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    type SnapshotData = Bytes;

    async fn build_snapshot(&mut self) -> io::Result<Snapshot> {
        let meta = self.meta.clone();
        let writer = self.writer.take();
        let files = self.files.clone();
        let (meta, data) = crate::rt::blocking(move || {
            let data = writer.map(|w| w()).unwrap_or_default();
            files.save(&meta, &data)?;
            Ok::<_, io::Error>((meta, data))
        })
        .await
        .map_err(io::Error::other)??;
        tracing::debug!(last = ?meta.last_log_id, bytes = data.len(), "raft: snapshot built");
        Ok(Snapshot {
            meta,
            snapshot: Bytes(data),
        })
    }
}

impl RaftStateMachine<TypeConfig> for SmStore {
    type SnapshotData = Bytes;
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> io::Result<(Option<LogId>, StoredMembership)> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> io::Result<()>
    where
        Strm: Stream<Item = io::Result<EntryResponder<TypeConfig>>> + Unpin + OptionalSend,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder): (Entry, _) = item?;
            let log_id = entry.log_id;
            let response = match entry.payload {
                EntryPayload::Blank => Vec::new(),
                EntryPayload::Normal(payload) => self.app.apply(log_id.index(), &payload.0),
                EntryPayload::Membership(membership) => {
                    self.membership = StoredMembership::new(Some(log_id), membership);
                    Vec::new()
                }
            };
            self.last_applied = Some(log_id);
            if let Some(responder) = responder {
                responder.send(Bytes(response));
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            meta: SnapshotMeta {
                last_log_id: self.last_applied,
                last_membership: self.membership.clone(),
            },
            writer: Some(self.app.snapshot()),
            files: self.files.clone(),
        }
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: Bytes) -> io::Result<()> {
        self.app.restore(&snapshot.0).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("restoring snapshot: {e}"),
            )
        })?;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        // At start (the node's own snapshot) or from the leader (a follower too far behind).
        tracing::info!(
            index = meta.last_log_id.as_ref().map_or(0, |l| l.index()),
            bytes = snapshot.0.len(),
            "raft: snapshot installed"
        );
        if self.files.current_meta().as_ref() != Some(meta) {
            let files = self.files.clone();
            let meta = meta.clone();
            crate::rt::blocking(move || files.save(&meta, &snapshot.0))
                .await
                .map_err(io::Error::other)??;
        }
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> io::Result<Option<Snapshot>> {
        let files = self.files.clone();
        let loaded = crate::rt::blocking(move || files.load())
            .await
            .map_err(io::Error::other)??;
        Ok(loaded.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Bytes(data),
        }))
    }
}
