//! The store handle: publishing roots, the single writer, and blocking-query waits.

use crate::command::{ApplyResponse, Command, Table};
use crate::error::StateError;
use crate::snapshot::StateSnapshot;
use crate::tables::Root;
use crate::{fsm, persist};
use arc_swap::ArcSwap;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;
use tokio::time::Instant;

/// A cheap-to-clone handle on one state store. Readers take snapshots without locking; the FSM
/// (one writer at a time) applies commands.
#[derive(Clone)]
pub struct StateStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The current root. Loaded lock-free by readers; replaced (never mutated) only by a holder of
    /// `writer`, so a loaded root is immutable for as long as anyone holds it.
    root: ArcSwap<Root>,
    /// Serializes writers (`apply`, `restore`): each reads the current root, builds the next from it
    /// and publishes it, which must not interleave. Guards no data of its own; held only for that
    /// synchronous build-and-publish, never across an `.await`. A writer that panics publishes
    /// nothing, so a poisoned lock is safe to take over.
    writer: Mutex<()>,
    /// The latest applied index, sent after every publish (including failed commands, which advance
    /// the index but change no table, and restores). Waiters re-check the tables they watch, so the
    /// wakeup is for the whole store but a `wait_for` returns only when one of its tables moved.
    published: watch::Sender<u64>,
}

impl Default for StateStore {
    fn default() -> Self {
        StateStore::new()
    }
}

impl StateStore {
    pub fn new() -> StateStore {
        let (published, _) = watch::channel(0);
        StateStore {
            inner: Arc::new(Inner {
                root: ArcSwap::from_pointee(Root::default()),
                writer: Mutex::new(()),
                published,
            }),
        }
    }

    /// The current state, O(1). It never changes afterwards.
    pub fn snapshot(&self) -> StateSnapshot {
        StateSnapshot::new(self.inner.root.load_full())
    }

    /// The highest Raft index applied (or restored).
    pub fn latest_index(&self) -> u64 {
        self.inner.root.load().index()
    }

    fn lock_writer(&self) -> MutexGuard<'_, ()> {
        self.inner
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn publish(&self, root: Root) {
        let index = root.index();
        self.inner.root.store(Arc::new(root));
        self.inner.published.send_replace(index);
    }

    /// The FSM: applies `cmd` at Raft `index`, atomically. Indexes must strictly increase
    /// ([`StateError::Invalid`] otherwise, and nothing changes).
    ///
    /// A command that fails (an unknown job, say) changes no table, but its index still becomes
    /// [`latest_index`](Self::latest_index): the entry was applied, with an error as its result,
    /// exactly as on every other server.
    ///
    /// One writer at a time: concurrent calls are serialized by a lock (the FSM calls this from one
    /// task anyway).
    pub fn apply(&self, index: u64, cmd: &Command) -> Result<ApplyResponse, StateError> {
        let _writer = self.lock_writer();
        let current = self.inner.root.load_full();
        if index <= current.index() {
            return Err(StateError::invalid(format!(
                "{} at Raft index {index}, but index {} is already applied",
                cmd.name(),
                current.index()
            )));
        }
        if let Command::StateRestore { snapshot } = cmd {
            return match persist::load_rebased(&mut snapshot.as_bytes(), index) {
                Ok(mut root) => {
                    root.set_restores(current.restores() + 1);
                    self.publish(root);
                    Ok(ApplyResponse {
                        index,
                        ..ApplyResponse::default()
                    })
                }
                Err(err) => {
                    let mut next = (*current).clone();
                    next.set_index(index);
                    self.publish(next);
                    Err(err)
                }
            };
        }
        match fsm::apply(&current, index, cmd) {
            Ok((next, response)) => {
                self.publish(next);
                Ok(response)
            }
            Err(err) => {
                let mut next = (*current).clone();
                next.set_index(index);
                self.publish(next);
                Err(err)
            }
        }
    }

    /// Waits until any of `tables` has changed after `min_index` (its table index is greater), or
    /// `deadline` passes, and returns the snapshot it saw last: on a timeout that is the current
    /// state, unchanged in the watched tables. An empty `tables` watches the whole store.
    ///
    /// Returns at once when `min_index` is 0 (Nomad never blocks on index 0) and whenever a restore
    /// replaced the state, since the tables' indexes may then have moved either way.
    ///
    /// Wakeups are per store, checks are per table: any apply wakes every waiter, each re-checks its
    /// own tables and goes back to sleep if they did not move.
    pub async fn wait_for(
        &self,
        tables: &[Table],
        min_index: u64,
        deadline: Instant,
    ) -> StateSnapshot {
        // Subscribe before the first look, so a publish between the look and the wait is not lost.
        let mut published = self.inner.published.subscribe();
        let mut snap = self.snapshot();
        let restores = snap.root().restores();
        loop {
            let moved = if tables.is_empty() {
                snap.index() > min_index
            } else {
                snap.max_table_index(tables) > min_index
            };
            if min_index == 0 || moved || snap.root().restores() != restores {
                return snap;
            }
            match tokio::time::timeout_at(deadline, published.changed()).await {
                // The sender lives in `inner`, which `self` keeps alive: `changed` cannot fail.
                Ok(_) => snap = self.snapshot(),
                Err(_elapsed) => return self.snapshot(),
            }
        }
    }

    /// Writes the whole state and the latest index (see [`crate::SNAPSHOT_FORMAT_VERSION`]).
    pub fn save(&self, w: &mut dyn std::io::Write) -> Result<(), StateError> {
        persist::save(self.snapshot().root(), w)
    }

    /// Replaces the whole state with a saved one and wakes every waiter. On error the state is left
    /// as it was.
    pub fn restore(&self, r: &mut dyn std::io::Read) -> Result<(), StateError> {
        let mut root = persist::load(r)?;
        let _writer = self.lock_writer();
        root.set_restores(self.inner.root.load().restores() + 1);
        self.publish(root);
        Ok(())
    }
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("latest_index", &self.latest_index())
            .finish()
    }
}
