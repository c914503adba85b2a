//! A typed async client of Caravan's HTTP API, which is Nomad's `/v1` API: the CLI and tests use it.
//!
//! Owns: addresses and Nomad's environment variables (`NOMAD_ADDR`, `NOMAD_TOKEN`, `NOMAD_REGION`,
//! `NOMAD_NAMESPACE`), request options (blocking queries, paging, prefixes), the `X-Nomad-*` headers,
//! Nomad's error statuses, and the request/response shapes that are not cluster objects ([`types`]).
//! Never does: retries, sleeps, printing, or anything a server does. Cluster objects come from `model`.
//! Invariant: every request has a time limit (a blocking query's is its wait plus slack), and every
//! error names the address or URL it was talking to.
//!
//! ```no_run
//! # async fn demo() -> Result<(), api::Error> {
//! let client = api::Client::from_env()?;
//! let (jobs, meta) = client.list_jobs(&api::QueryOptions::default()).await?;
//! // Block until something changes (or five minutes pass).
//! let q = api::QueryOptions::blocking(meta.last_index, std::time::Duration::from_secs(300));
//! let (jobs_now, _) = client.list_jobs(&q).await?;
//! # let _ = (jobs, jobs_now); Ok(()) }
//! ```

mod acl;
mod agent;
mod alloc_ops;
pub mod autopilot;
mod client;
mod deployments;
mod error;
mod evals;
mod host_volumes;
mod jobs;
mod launch;
mod node_pools;
mod nodes;
pub mod operator;
mod scaling;
mod services;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod types;
mod variables;
mod volumes;
pub use host_volumes::{HostVolumeClaimFilter, HostVolumeListFilter};
pub use variables::VarWriteOutcome;
pub use volumes::SnapshotPage;

pub use agent::PrefixSearchResponse;
pub use alloc_ops::LogFollow;
pub use client::{
    Client, Config, QueryMeta, QueryOptions, TlsConfig, WriteOptions, BLOCKING_WAIT_MAX,
    CONNECT_TIMEOUT, DEFAULT_ADDRESS, REQUEST_TIMEOUT_DEFAULT, RESPONSE_BYTES_MAX,
};
pub use error::{ApiError, Error, Result};
pub use nodes::LogOptions;
pub use types::{
    AgentHealth, AgentHealthResponse, AgentMember, AllocFileInfo, JobDeregisterResponse, JobDiff,
    JobListStub, JobPlanResponse, JobSubmission, JobTagResponse, JobValidateResponse,
    JobVersionsResponse, RegisterOptions, RegisterResponse, ServerMembers,
};

#[cfg(test)]
mod tests;
