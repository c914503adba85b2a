//! The store handle: publishing roots, the single writer, and blocking-query waits.

use crate::command::{ApplyResponse, Command, Table};
use crate::error::StateError;
use crate::snapshot::StateSnapshot;
use crate::tables::Root;
use crate::{fsm, persist};
use arc_swap::ArcSwap;
use std::collections::HashMap;
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
    /// Per-node wakeups for clients' allocation queries: node ID → a channel sent to after every
    /// publish that touched an allocation on that node. An entry lives while someone waits on it.
    /// Never held across `.await`.
    node_waiters: Mutex<HashMap<String, watch::Sender<u64>>>,
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
                node_waiters: Mutex::new(HashMap::new()),
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

    /// Publishes `root` and wakes the waiters: every store-wide waiter, and the node waiters of
    /// the nodes `touched` (all of them when the whole state was replaced).
    fn publish(&self, root: Root, touched: Touched) {
        let index = root.index();
        let root = Arc::new(root);
        self.inner.root.store(root.clone());
        self.inner.published.send_replace(index);
        let waiters = self.lock_node_waiters();
        match touched {
            Touched::None => {}
            Touched::Nodes if waiters.is_empty() => {}
            Touched::Nodes => {
                for node in root.touched_nodes() {
                    if let Some(tx) = waiters.get(node) {
                        tx.send_replace(index);
                    }
                }
            }
            Touched::All => {
                for tx in waiters.values() {
                    tx.send_replace(index);
                }
            }
        }
    }

    fn lock_node_waiters(&self) -> MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        self.inner
            .node_waiters
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
            return match persist::load_rebased(&mut snapshot.as_slice(), index) {
                Ok(mut root) => {
                    root.set_restores(current.restores() + 1);
                    self.publish(root, Touched::All);
                    Ok(ApplyResponse {
                        index,
                        ..ApplyResponse::default()
                    })
                }
                Err(err) => {
                    let mut next = (*current).clone();
                    next.set_index(index);
                    self.publish(next, Touched::None);
                    Err(err)
                }
            };
        }
        match fsm::apply(&current, index, cmd) {
            Ok((next, response)) => {
                self.publish(next, Touched::Nodes);
                Ok(response)
            }
            Err(err) => {
                let mut next = (*current).clone();
                next.set_index(index);
                self.publish(next, Touched::None);
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
        let restores = self.inner.root.load().restores();
        loop {
            // A look takes the current version and lets it go before sleeping: a waiter holding
            // the version it went to sleep on keeps that version's copied paths alive, and
            // thousands of waiters (one per node) held thousands of versions of a changing state.
            let snap = self.snapshot();
            let moved = if tables.is_empty() {
                snap.index() > min_index
            } else {
                snap.max_table_index(tables) > min_index
            };
            if min_index == 0 || moved || snap.root().restores() != restores {
                return snap;
            }
            drop(snap);
            match tokio::time::timeout_at(deadline, published.changed()).await {
                // The sender lives in `inner`, which `self` keeps alive: `changed` cannot fail.
                Ok(_) => {}
                Err(_elapsed) => return self.snapshot(),
            }
        }
    }

    /// Waits until an allocation on `node_id` changed after `min_index`
    /// ([`StateSnapshot::node_alloc_index`] is greater), or `deadline` passes, and returns the
    /// snapshot it saw last. Unlike [`wait_for`](Self::wait_for), only a write that touched an
    /// allocation on this node (or a restore) wakes it: a cluster placing thousands of
    /// allocations elsewhere costs this waiter nothing.
    ///
    /// Returns at once when `min_index` is 0 and whenever a restore replaced the state.
    pub async fn wait_for_node(
        &self,
        node_id: &str,
        min_index: u64,
        deadline: Instant,
    ) -> StateSnapshot {
        let snap = self.snapshot();
        if min_index == 0 || snap.node_alloc_index(node_id) > min_index {
            return snap;
        }
        // Subscribe before the next look, so a publish between the look and the wait is seen.
        let mut rx = self
            .lock_node_waiters()
            .entry(node_id.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        let _leave = LeaveNodeWaiters {
            store: self,
            node_id,
        };
        let restores = snap.root().restores();
        drop(snap);
        loop {
            // The version looked at is let go before sleeping (see `wait_for`).
            let snap = self.snapshot();
            if snap.node_alloc_index(node_id) > min_index || snap.root().restores() != restores {
                return snap;
            }
            drop(snap);
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                // The sender stays in the map while this receiver lives (see LeaveNodeWaiters).
                Ok(_) => {}
                Err(_elapsed) => return self.snapshot(),
            }
        }
    }

    /// How many nodes have a waiter now (for tests and metrics).
    pub fn node_waiter_count(&self) -> usize {
        self.lock_node_waiters().len()
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
        self.publish(root, Touched::All);
        Ok(())
    }
}

/// Which node waiters a publish wakes.
#[derive(Clone, Copy)]
enum Touched {
    /// A failed command: nothing changed.
    None,
    /// The nodes the applied command touched.
    Nodes,
    /// A restore: the whole state changed.
    All,
}

/// Removes a node's entry from the waiters when its last waiter leaves (returns, times out or is
/// cancelled), so the map holds only nodes someone waits on.
struct LeaveNodeWaiters<'a> {
    store: &'a StateStore,
    node_id: &'a str,
}

impl Drop for LeaveNodeWaiters<'_> {
    fn drop(&mut self) {
        let mut waiters = self.store.lock_node_waiters();
        // The receiver of the waiter being dropped is dropped after this guard (declared
        // before it), so one receiver left means only that one.
        if waiters
            .get(self.node_id)
            .is_some_and(|tx| tx.receiver_count() <= 1)
        {
            waiters.remove(self.node_id);
        }
    }
}

impl std::fmt::Debug for StateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateStore")
            .field("latest_index", &self.latest_index())
            .finish()
    }
}
