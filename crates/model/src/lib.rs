//! Caravan's data model: the job specification (Job, TaskGroup, Task and their blocks) and the cluster's
//! objects (Node, Allocation, Evaluation, Deployment, JobSummary, Plan, CSIVolume, CSIPlugin).
//!
//! Owns: the types, Nomad-compatible JSON (PascalCase keys with Nomad's acronyms, durations as integer
//! nanoseconds, Go's case-insensitive key matching on input via [`json`]), canonicalization (Nomad's
//! defaults) and validation that reports every problem at a [`Path`].
//! Never does: I/O, async, clocks or randomness. Every function here is pure.
//! Invariant: `canonicalize` is idempotent, and a value encoded to JSON and decoded again is equal to itself.

pub mod acl;
pub mod acl_policy;
pub mod alloc;
pub mod autopilot;
pub mod checks;
pub mod constraint;
pub mod csi;
pub mod deployment;
pub mod device;
pub mod diff;
pub mod duration;
pub mod eval;
pub mod group;
pub mod host_volume;
pub mod job;
pub mod json;
pub mod node;
pub mod node_meta;
pub mod node_pool;
pub mod path;
pub mod plan;
pub mod resources;
pub mod scaling;
pub mod scheduler_config;
pub mod service;
pub mod service_registration;
pub mod status;
pub mod summary;
pub mod task;
#[cfg(test)]
mod testutil;
pub mod time;
pub mod validate;
pub mod variable;
pub mod version;
pub mod wire;

pub use alloc::{
    AllocDeploymentStatus, AllocListStub, AllocMetric, AllocatedResources, Allocation,
    DesiredTransition, RescheduleTracker, TaskEvent, TaskState,
};
pub use constraint::{Affinity, Constraint, Operand, Spread, SpreadTarget};
pub use csi::{
    CSIInfo, CSIPlugin, CSIPluginListStub, CSITopology, CSIVolume, CSIVolumeClaim,
    CSIVolumeListStub,
};
pub use deployment::{Deployment, DeploymentState, DeploymentStatusUpdate};
pub use duration::Duration;
pub use eval::{Evaluation, EvaluationStub};
pub use group::{
    CsiMountOptions, DisconnectStrategy, EphemeralDisk, MigrateStrategy, ReschedulePolicy,
    RestartPolicy, TaskGroup, UpdateStrategy, VolumeRequest,
};
pub use job::{
    Job, JobRequest, JobType, Multiregion, MultiregionRegion, MultiregionStrategy,
    ParameterizedJobConfig, PeriodicConfig,
};
pub use node::{
    Node, NodeAllocated, NodeListStub, NodeResources, NodeStatus, SchedulingEligibility,
};
pub use path::Path;
pub use plan::{DesiredUpdates, Plan, PlanAnnotations, PlanResult};
pub use resources::{DnsConfig, NetworkResource, Port, RequestedDevice, Resources};
pub use service::{CheckRestart, Service, ServiceCheck};
pub use status::{
    ClientStatus, DeploymentStatus, DesiredStatus, DrainStatus, EvalStatus, JobStatus, TaskStatus,
};
pub use summary::{JobChildrenSummary, JobSummary, TaskGroupSummary};
pub use task::{
    ChangeScript, DispatchPayloadConfig, LogConfig, Task, TaskArtifact, TaskCsiPluginConfig,
    TaskLifecycle, Template, VolumeMount, WorkloadIdentity,
};
pub use validate::{FieldError, ValidationErrors};
