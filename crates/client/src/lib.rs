//! The Caravan client: the node agent that runs allocations.
//!
//! **Owns:** the node's identity and fingerprint (CPU, memory, disk, network, kernel and OS,
//! drivers, host volumes, meta — static from the configuration, dynamic set over the API and kept
//! in the data dir: `node_meta`); registering and heartbeating with the servers; following the
//! node's allocations with a blocking query; alloc and task runners (alloc directory, task
//! environment and interpolation, lifecycle hooks, restart policy, kill timeout and signal,
//! task events as Nomad names them); batching status updates back to the servers; and its own
//! durable state, so that after a restart it reattaches to the tasks it started.
//!
//! **Never does:** scheduling (it runs what the servers placed on it, nothing else), changing
//! cluster state other than through the rpc calls of [`ServerConn`] (four node calls, two CSI
//! claim calls), or running a process itself — every task goes through a [`drivers::Driver`].
//! CSI plugins are tasks too; the client only probes them and calls them over their sockets.
//!
//! **Invariants:** task supervision never waits on the servers: unreachable servers delay
//! registration and status updates (retried with bounded backoff), never a task; a task's
//! driver handle is persisted (temp file, fsync, rename) after every start, and a client
//! started on the same data dir reattaches to it through `Driver::recover` instead of starting
//! it again; stopping the client (or dropping it) leaves tasks running.
//!
//! Layout: [`Client`] (`client.rs`) starts four loops — `node_loop` (register, heartbeat),
//! `alloc_sync` (blocking query, diff against runners), `updater` (batched `Node.UpdateAlloc`),
//! `gc` (garbage collection of terminal allocations, Nomad's `gc_*` thresholds) — and one `alloc_runner` per allocation, which runs one `task_runner` per task and tracks
//! deployment health (`health`). Pure parts: `fingerprint::build_node`, `taskenv`, `restart`,
//! `health`, `alloc_runner::client_status`. Limits and fixed timings: [`limits`].

mod actions;
mod alloc_fs;
mod alloc_runner;
mod alloc_sync;
mod allocdir;
mod checks;
mod client;
mod config;
mod conn;
mod context;
mod csi;
pub mod devices;
mod error;
mod events;
mod fingerprint;
mod gc;
mod health;
mod host_stats;
mod host_volumes;
mod identity;
pub mod limits;
mod network;
mod node_loop;
mod node_meta;
mod persist;
mod restart;
mod rng;
pub mod sim;
mod state_db;
mod task_api;
mod task_hooks;
mod task_runner;
mod taskenv;
mod telemetry;
pub mod testing;
mod time;
mod updater;

pub use actions::AllocActionError;
pub use allocdir::AllocDir;
pub use client::Client;
pub use config::{
    ClientConfig, ClientTiming, GcConfig, HostNetworkConfig, ReservedResources, UserPolicy,
    DEFAULT_ENV_DENYLIST, DEFAULT_USER_CHECKED_DRIVERS, DEFAULT_USER_DENYLIST, OPTION_ENV_DENYLIST,
    OPTION_USER_CHECKED_DRIVERS, OPTION_USER_DENYLIST,
};
pub use conn::{ConnFuture, RpcServerConn, ServerConn};
pub use csi::hook::MountedVolume;
pub use csi::registry::{CsiPluginInstance, CsiPluginKind};
pub use csi::volumes::{CsiVolumeError, CsiVolumeUsage};
pub use error::ClientError;
pub use fingerprint::{
    build_node, computed_class, CpuFacts, DiskFacts, HostFacts, NetFacts, NOMAD_COMPAT_VERSION,
};
pub use gc::GcError;
pub use host_stats::{HostCpuStats, HostDiskStats, HostMemoryStats, HostStats};
pub use host_volumes::HOST_VOLUMES_FILE;
pub use identity::{NodeIdentity, NODE_ID_FILE};
pub use network::NetworkConfig;
pub use node_meta::{NodeMetaError, NODE_META_FILE};
pub use restart::{Decision, RestartTracker};
pub use state_db::{AllocRecord, StateDb, TaskRecord};
pub use task_api::TaskApiServer;
pub use taskenv::{EnvInputs, TaskEnv, TaskPaths};
pub use telemetry::MetricsSettings;
