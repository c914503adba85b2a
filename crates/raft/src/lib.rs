//! Caravan's raft: openraft glue that makes one replicated, durable log of opaque entries.
//!
//! **Owns:** the durable log and vote (one redb file: `raft.redb`), snapshots as files
//! (`snapshots/current.snap`), driving the application's [`StateMachine`] in log order, and
//! the raft messages between servers over `rpc` (`Raft.AppendEntries`, `Raft.Vote`,
//! `Raft.Snapshot`, served by [`RaftNode::handle_rpc`]).
//!
//! **Never does:** business logic — entries are opaque bytes, it knows nothing of Caravan's
//! commands; nor does it leak openraft: every openraft type stays inside this crate (its API
//! moves between alphas).
//!
//! **Invariant:** when [`RaftNode::write`] returns `Ok`, the entry is fsynced on a quorum and
//! survives SIGKILL of any minority (this process included); the log is contiguous from the
//! last purged entry (recorded durably, with the purge) to its tail; a snapshot file is whole
//! or absent, never torn. All limits live in [`limits`].

mod disk;
mod integrity;
pub mod limits;
mod log_store;
mod network;
mod node;
pub mod rt;
mod snapshot;
mod state_machine;
mod types;

#[cfg(test)]
mod conformance;

pub use integrity::{aside_path, inspect, move_aside, Inspection};
pub use network::{SimNet, Transport};
pub use node::{RaftConfig, RaftError, RaftNode, RaftStats};
pub use state_machine::{SnapshotWriter, StateMachine};
