//! Caravan's state store: the cluster's objects in memory, versioned by Raft index.
//!
//! Owns: the tables (jobs, job versions, job summaries, evaluations, allocations, nodes, deployments,
//! CSI volumes and plugins) as persistent maps, their secondary indexes (allocations by job, node,
//! evaluation and deployment; evaluations and deployments by job; evaluations, allocations and nodes
//! by modify index, so a follower reads only what changed), the Raft index at which each table
//! last changed, the FSM's apply functions ([`Command`] → [`ApplyResponse`], with Nomad's semantics),
//! blocking-query waits ([`StateStore::wait_for`]), and snapshot save/restore.
//!
//! Never does: network, scheduling, clocks, randomness or ID generation. Every timestamp and ID that
//! ends up in state comes from the command being applied, so applying the same log gives the same
//! state on every server.
//!
//! Invariants:
//! - State changes only through [`StateStore::apply`] (and wholesale through [`StateStore::restore`]).
//!   A command is applied atomically: it changes everything it should or, on error, nothing.
//! - A [`StateSnapshot`] never changes after it is taken. Taking one is O(1) (an `Arc` of the root);
//!   applying a command clones the root in O(1) (persistent maps share structure), mutates the clone and
//!   publishes it.
//! - Secondary indexes always agree with their tables: the tables are private to the `tables` module,
//!   whose `put_*`/`delete_*` methods are the only writers and maintain both. Inside a command every
//!   write goes through the FSM's transaction, which records the table's index with it.
//! - Raft indexes given to `apply` strictly increase.

mod command;
mod error;
mod fsm;
pub mod limits;
mod persist;
mod snapshot;
mod store;
mod tables;
mod time;

pub use command::{AllocStop, ApplyResponse, Command, Table, VarOp};
pub use error::StateError;
pub use fsm::csi::volume_schedulable as csi_schedulable;
pub use fsm::csi::CONTROLLER_OP_DEADLINE_SLACK_NS;
pub use fsm::jobs::spec_changed;
pub use persist::SNAPSHOT_FORMAT_VERSION;
pub use snapshot::StateSnapshot;
pub use store::StateStore;
pub use time::{format_unix_nanos, parse_unix_nanos};
