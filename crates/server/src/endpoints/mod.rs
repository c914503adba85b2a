//! Server endpoints, one module per resource. Each public endpoint forwards to the leader when this
//! server does not lead; its `_local` twin runs on the leader.

pub mod alloc;
pub mod autopilot;
pub mod deployment;
pub mod eval_delete;
pub mod host_volume;
pub mod job;
pub mod launch;
pub mod multiregion;
pub mod node;
pub mod node_drain;
pub mod node_pool;
pub mod operator;
pub mod plan;
pub mod scaling;
pub mod scheduler_config;
pub mod service;
pub mod system;

pub(crate) use job::{needs_eval, new_eval};

/// Now, in Unix nanoseconds: the server stamps times before the raft entry, never inside the FSM.
pub(crate) fn now_nanos() -> i64 {
    crate::env::now_nanos()
}

pub(crate) fn new_id() -> String {
    crate::env::new_id()
}
