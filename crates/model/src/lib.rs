//! Caravan's data model: the job specification (Job, TaskGroup, Task and their blocks) and the cluster's
//! objects (Node, Allocation, Evaluation, Deployment, JobSummary, Plan, CSIVolume, CSIPlugin).
//!
//! Owns: the types, Nomad-compatible JSON (PascalCase keys with Nomad's acronyms, durations as integer
//! nanoseconds, Go's case-insensitive key matching on input via [`json`]), canonicalization (Nomad's
//! defaults) and validation that reports every problem at a [`Path`].
//! Never does: I/O, async, clocks or randomness. Every function here is pure.
//! Invariant: `canonicalize` is idempotent, and a value encoded to JSON and decoded again is equal to itself.

pub mod constraint;
pub mod duration;
pub mod group;
pub mod job;
pub mod json;
pub mod path;
pub mod resources;
pub mod service;
pub mod task;
pub mod validate;
pub mod version;

pub use constraint::{Affinity, Constraint, Operand, Spread, SpreadTarget};
pub use duration::Duration;
pub use group::{
    CsiMountOptions, DisconnectStrategy, EphemeralDisk, MigrateStrategy, ReschedulePolicy,
    RestartPolicy, TaskGroup, UpdateStrategy, VolumeRequest,
};
pub use job::{Job, JobRequest, JobType, ParameterizedJobConfig, PeriodicConfig};
pub use path::Path;
pub use resources::{DnsConfig, NetworkResource, Port, RequestedDevice, Resources};
pub use service::{CheckRestart, Service, ServiceCheck};
pub use task::{
    ChangeScript, DispatchPayloadConfig, LogConfig, Task, TaskArtifact, TaskCsiPluginConfig,
    TaskLifecycle, Template, VolumeMount, WorkloadIdentity,
};
pub use validate::{FieldError, ValidationErrors};
