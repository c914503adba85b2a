//! Caravan's server: the endpoints Nomad calls `Job.Register`, `Job.Deregister`, …, the raft-replicated
//! state store behind them, and the leader-only loops (eval broker, plan applier, scheduling workers).
//!
//! Owns: validating and canonicalizing what clients submit, turning it into one raft command, forwarding
//! writes to the leader over `rpc`, serving reads from state snapshots.
//! Never does: driver calls, HTTP (the `httpapi` crate speaks HTTP and calls in here).
//! Invariant: state changes only through a raft entry applied by the FSM; IDs and timestamps are made
//! here, before the entry, so every server applies the same bytes to the same result.

pub mod acl;
mod alloc_batch;
mod config;
pub mod cron;
pub mod csi;
mod endpoints;
pub mod env;
mod error;
pub mod events;
mod fsm;
mod handler;
pub mod http_forward;
pub mod identity;
pub mod join;
mod leader;
pub mod offline;
pub mod replication;
pub use leader::pool;
pub mod methods;
pub mod peers; // #4: the leader's loops (eval broker, plan applier, workers)
mod server;
pub mod variables;

pub use config::{ServerConfig, SimNetwork};
pub use endpoints::deployment::DeploymentAction;
pub use endpoints::job::JobRegisterRequest;
pub use endpoints::node_pool::NodePoolWrite;
pub use endpoints::plan::JobPlanRequest;
/// Scaling policies: the jobs' group `scaling` blocks with their stable IDs.
pub mod scaling_policies {
    pub use crate::endpoints::scaling::{job_policies, policies, policy_id};
}
pub use endpoints::autopilot::{AutopilotSetConfigRequest, AutopilotSetConfigResponse};
pub use endpoints::host_volume::{
    host_volume_allocs, HostVolumeDeleteRequest, HostVolumeDeleteResponse, HostVolumeWriteRequest,
};
pub use endpoints::scheduler_config::{
    SchedulerSetConfigRequest, SchedulerSetConfigResponse, REGISTRATION_DISABLED,
};
pub use endpoints::service::ServiceDeleteRequest;
pub use error::ServerError;
pub use leader::gc::Thresholds as GcThresholds;
pub use leader::{evaluate_plan, seed_from, BrokerStats, Evaluated, PlanSubmission, SnapshotView};
pub use rpc::ErrorCode;
pub use server::{Member, Server};
