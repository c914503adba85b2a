//! Bodies of Nomad's HTTP API that are not cluster objects themselves: register, deregister and
//! validate answers, and the job list stub. One definition serves the server that writes them and the
//! client that reads them.

use crate::job::Job;
use crate::summary::JobSummary;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

/// The answer to a register and to `POST /v1/job/:id/evaluate` (Nomad's JobRegisterResponse).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobRegisterResponse {
    /// Empty for periodic and parameterized jobs, which get no evaluation.
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    #[serde(rename = "EvalCreateIndex")]
    pub eval_create_index: u64,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
    #[serde(rename = "Warnings")]
    pub warnings: String,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// The body of `POST /v1/job/:id/dispatch` (Nomad's JobDispatchRequest).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobDispatchRequest {
    #[serde(rename = "JobID")]
    pub job_id: String,
    /// The input, base64 as Go encodes `[]byte`; empty for none.
    #[serde(rename = "Payload")]
    pub payload: Option<String>,
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    /// Put into the child's ID: `<parent>/dispatch-<template>-<unix seconds>-<8 hex>`.
    #[serde(rename = "IdPrefixTemplate")]
    pub id_prefix_template: String,
}

/// The answer to `POST /v1/job/:id/dispatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobDispatchResponse {
    #[serde(rename = "DispatchedJobID")]
    pub dispatched_job_id: String,
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    #[serde(rename = "EvalCreateIndex")]
    pub eval_create_index: u64,
    #[serde(rename = "JobCreateIndex")]
    pub job_create_index: u64,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// The answer to `POST /v1/job/:id/periodic/force`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PeriodicForceResponse {
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    #[serde(rename = "EvalCreateIndex")]
    pub eval_create_index: u64,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// The answer to `DELETE /v1/job/:id`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobDeregisterResponse {
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    #[serde(rename = "EvalCreateIndex")]
    pub eval_create_index: u64,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
    #[serde(rename = "VolumeEvalID")]
    pub volume_eval_id: String,
    #[serde(rename = "VolumeEvalIndex")]
    pub volume_eval_index: u64,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// The answer to `POST /v1/validate/job`. A job that fails validation is still a 200: the problems
/// are in `ValidationErrors` and `Error`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobValidateResponse {
    #[serde(rename = "DriverConfigValidated")]
    pub driver_config_validated: bool,
    #[serde(rename = "ValidationErrors")]
    pub validation_errors: Vec<String>,
    /// All the validation errors in one text.
    #[serde(rename = "Error")]
    pub error: String,
    #[serde(rename = "Warnings")]
    pub warnings: String,
}

/// A job in `GET /v1/jobs`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "ParentID")]
    pub parent_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Datacenters")]
    pub datacenters: Vec<String>,
    #[serde(rename = "NodePool")]
    pub node_pool: String,
    #[serde(rename = "Multiregion")]
    pub multiregion: Option<serde_json::Value>,
    #[serde(rename = "Type")]
    pub job_type: crate::job::JobType,
    #[serde(rename = "Priority")]
    pub priority: i32,
    /// Whether the job is periodic.
    #[serde(rename = "Periodic")]
    pub periodic: bool,
    /// Whether the job is parameterized.
    #[serde(rename = "ParameterizedJob")]
    pub parameterized_job: bool,
    #[serde(rename = "Stop")]
    pub stop: bool,
    #[serde(rename = "Status")]
    pub status: crate::status::JobStatus,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
    #[serde(rename = "JobSummary")]
    pub job_summary: Option<JobSummary>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
    /// Unix nanoseconds.
    #[serde(rename = "SubmitTime")]
    pub submit_time: i64,
    /// Only with `?meta=true`.
    #[serde(rename = "Meta", skip_serializing_if = "Option::is_none")]
    pub meta: Option<BTreeMap<String, String>>,
}

impl JobListStub {
    /// The stub of a stored job; `meta` is included only when asked for, as Nomad's `?meta=true`.
    pub fn new(job: &Job, summary: Option<JobSummary>, with_meta: bool) -> JobListStub {
        JobListStub {
            id: job.id.clone(),
            parent_id: job.parent_id.clone(),
            name: job.name.clone(),
            namespace: job.namespace.clone().unwrap_or_default(),
            datacenters: job.datacenters.clone(),
            node_pool: job.node_pool.clone().unwrap_or_default(),
            multiregion: job
                .multiregion
                .as_ref()
                .and_then(|m| serde_json::to_value(m).ok()),
            job_type: job.job_type.clone().unwrap_or_default(),
            priority: job.priority.unwrap_or(0),
            periodic: job.periodic.is_some(),
            parameterized_job: job.parameterized.is_some(),
            stop: job.stop,
            status: job.status.clone().unwrap_or_default(),
            status_description: job.status_description.clone().unwrap_or_default(),
            job_summary: summary,
            create_index: job.create_index.unwrap_or(0),
            modify_index: job.modify_index.unwrap_or(0),
            job_modify_index: job.job_modify_index.unwrap_or(0),
            submit_time: job.submit_time.unwrap_or(0),
            meta: with_meta.then(|| job.meta.clone()),
        }
    }
}

/// `Node.Register` (client → server, over rpc): a client announces itself with its fingerprint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeRegisterRequest {
    #[serde(rename = "Node")]
    pub node: crate::node::Node,
}

/// The answer to `Node.Register` and `Node.UpdateStatus`: how soon the next heartbeat must come.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeUpdateResponse {
    /// The heartbeat TTL in nanoseconds (Go duration); the client heartbeats well within it.
    #[serde(rename = "HeartbeatTTL")]
    pub heartbeat_ttl: crate::Duration,
    /// The servers' rpc addresses, so a client learns every server from any one of them.
    #[serde(rename = "Servers")]
    pub servers: Vec<String>,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// `Node.UpdateStatus` (the heartbeat): the node is alive and in `status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeUpdateStatusRequest {
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "SecretID")]
    pub secret_id: String,
    /// `ready` (or `initializing` while fingerprinting); absent (`""`): keep the node's status, or
    /// `ready` for a node that was down.
    #[serde(rename = "Status", with = "crate::status::empty_as_none")]
    pub status: Option<crate::node::NodeStatus>,
}

/// `Node.GetClientAllocs`: a blocking query for every allocation placed on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeClientAllocsRequest {
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "SecretID")]
    pub secret_id: String,
    /// Answer once the node's allocations changed after this index (0: at once).
    #[serde(rename = "MinQueryIndex")]
    pub min_index: u64,
    /// How long to wait for a change, in nanoseconds.
    #[serde(rename = "MaxQueryTime")]
    pub wait: crate::Duration,
}

/// Nomad's shape: which allocations the node has and each one's `AllocModifyIndex`, not the
/// allocations themselves. The client fetches only those new to it or changed since it last
/// fetched them ([`AllocGetAllocsRequest`]): a node with twenty allocations, one of which changed,
/// gets twenty IDs and one allocation instead of twenty allocations with their jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeClientAllocsResponse {
    /// Allocation ID → its `AllocModifyIndex`.
    #[serde(rename = "Allocs")]
    pub allocs: std::collections::BTreeMap<String, u64>,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// `Alloc.GetAllocs` (Nomad's `AllocsGetRequest`): a node's client fetches some of its allocations
/// in full. Only the node's own allocations are answered; IDs that no longer exist are left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocGetAllocsRequest {
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "SecretID")]
    pub secret_id: String,
    #[serde(rename = "AllocIDs")]
    pub alloc_ids: Vec<String>,
    /// The answer reflects at least this index (the `Index` of the `Node.GetClientAllocs` answer
    /// that listed them): a server that is further behind waits for it, briefly.
    #[serde(rename = "MinQueryIndex")]
    pub min_index: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocGetAllocsResponse {
    /// Full allocations (with their job), as the client needs to run them.
    #[serde(rename = "Allocs")]
    pub allocs: Vec<crate::alloc::Allocation>,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// What a client reports about one allocation: its status and its tasks' states.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocClientUpdate {
    #[serde(rename = "ID")]
    pub id: String,
    /// `pending`, `running`, `complete`, `failed`.
    #[serde(rename = "ClientStatus")]
    pub client_status: crate::alloc::ClientStatus,
    #[serde(rename = "ClientDescription")]
    pub client_description: String,
    #[serde(rename = "TaskStates")]
    pub task_states: BTreeMap<String, crate::alloc::TaskState>,
    #[serde(rename = "DeploymentStatus")]
    pub deployment_status: Option<crate::alloc::AllocDeploymentStatus>,
    /// The address of the group's network namespace, once made (bridge and CNI modes).
    #[serde(rename = "NetworkStatus", skip_serializing_if = "Option::is_none")]
    pub network_status: Option<crate::alloc::AllocNetworkStatus>,
    /// Unix nanoseconds when the client made this update.
    #[serde(rename = "ModifyTime")]
    pub modify_time: i64,
}

/// `Node.UpdateAlloc`: a batch of allocation updates from one client.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeUpdateAllocRequest {
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "SecretID")]
    pub secret_id: String,
    #[serde(rename = "Allocs")]
    pub allocs: Vec<AllocClientUpdate>,
}

/// The answer to the deployment actions (promote, fail, pause, allocation health) and carried by
/// them (Nomad's `DeploymentUpdateResponse`).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeploymentUpdateResponse {
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    #[serde(rename = "EvalCreateIndex")]
    pub eval_create_index: u64,
    #[serde(rename = "DeploymentModifyIndex")]
    pub deployment_modify_index: u64,
    /// Set when the action rolled the job back.
    #[serde(rename = "RevertedJobVersion")]
    pub reverted_job_version: Option<u64>,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// `PUT /v1/deployment/promote/:id`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeploymentPromoteRequest {
    #[serde(rename = "DeploymentID")]
    pub deployment_id: String,
    #[serde(rename = "All")]
    pub all: bool,
    #[serde(rename = "Groups")]
    pub groups: Option<Vec<String>>,
}

/// `PUT /v1/deployment/pause/:id`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeploymentPauseRequest {
    #[serde(rename = "DeploymentID")]
    pub deployment_id: String,
    #[serde(rename = "Pause")]
    pub pause: bool,
}

/// `PUT /v1/deployment/allocation-health/:id`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeploymentAllocHealthRequest {
    #[serde(rename = "DeploymentID")]
    pub deployment_id: String,
    #[serde(rename = "HealthyAllocationIDs")]
    pub healthy_allocation_ids: Option<Vec<String>>,
    #[serde(rename = "UnhealthyAllocationIDs")]
    pub unhealthy_allocation_ids: Option<Vec<String>>,
}

/// `PUT /v1/job/:id/revert`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobRevertRequest {
    #[serde(rename = "JobID")]
    pub job_id: String,
    #[serde(rename = "JobVersion")]
    pub job_version: u64,
    /// Revert only if the job's current version is this one.
    #[serde(rename = "EnforcePriorVersion")]
    pub enforce_prior_version: Option<u64>,
}

/// The rpc methods clients call on servers (Nomad's names), each with its request and answer.
/// The servers' own methods (forwarding to the leader, joining) live in the `server` crate.
pub mod methods {
    use super::*;

    /// Declares a unit type per method and its [`rpc::Method`] implementation.
    #[macro_export]
    macro_rules! rpc_method {
        ($(#[$doc:meta])* $vis:vis $ty:ident = $name:literal: $req:ty => $resp:ty) => {
            $(#[$doc])*
            #[derive(Debug, Clone, Copy)]
            $vis struct $ty;
            impl rpc::Method for $ty {
                const NAME: &'static str = $name;
                type Request = $req;
                type Response = $resp;
            }
        };
    }

    rpc_method!(
        /// A client registers its node (and re-registers after a server lost it).
        pub NodeRegister = "Node.Register": NodeRegisterRequest => NodeUpdateResponse
    );
    rpc_method!(
        /// The heartbeat.
        pub NodeUpdateStatus = "Node.UpdateStatus": NodeUpdateStatusRequest => NodeUpdateResponse
    );
    rpc_method!(
        /// A blocking query: the node's allocation IDs with their modify indexes.
        pub NodeGetClientAllocs = "Node.GetClientAllocs":
            NodeClientAllocsRequest => NodeClientAllocsResponse
    );
    rpc_method!(
        /// A batch of allocation status updates; answers the index of the write.
        pub NodeUpdateAlloc = "Node.UpdateAlloc": NodeUpdateAllocRequest => u64
    );
    rpc_method!(
        /// Some of the node's allocations in full.
        pub AllocGetAllocs = "Alloc.GetAllocs": AllocGetAllocsRequest => AllocGetAllocsResponse
    );
    rpc_method!(
        /// An allocation claims a CSI volume before its tasks start.
        pub CsiVolumeClaim = "CSIVolume.Claim": CsiVolumeClaimRequest => CsiVolumeClaimResponse
    );
    rpc_method!(
        /// An allocation's claim is released once the node unmounted the volume.
        pub CsiVolumeUnpublish = "CSIVolume.Unpublish": CsiVolumeUnpublishRequest => ()
    );
    rpc_method!(
        /// An HTTP request a client agent (or a follower's HTTP layer, or a task's template
        /// through the client) hands a server to answer through its own HTTP API.
        pub AgentHttp = "Agent.Http": super::HttpForwardRequest => super::HttpForwardResponse
    );
    rpc_method!(
        /// A client asks for its tasks' workload identities, signed (Nomad's
        /// `Alloc.SignIdentities`).
        pub AllocSignIdentities = "Alloc.SignIdentities":
            AllocSignIdentitiesRequest => AllocSignIdentitiesResponse
    );
}

/// One identity a task needs signed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadIdentityRequest {
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    #[serde(rename = "TaskName")]
    pub task_name: String,
    /// `default`, or the name of one of the task's `identity` blocks.
    #[serde(rename = "IdentityName")]
    pub identity_name: String,
}

/// `Alloc.SignIdentities`: a node's request, checked against its secret; only allocations placed
/// on that node, not terminal, are signed for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocSignIdentitiesRequest {
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "SecretID")]
    pub secret_id: String,
    #[serde(rename = "Identities")]
    pub identities: Vec<WorkloadIdentityRequest>,
    /// The answer reflects at least this index (the allocations' modify index as the client
    /// got them): a server that is further behind waits for it, briefly.
    #[serde(rename = "MinQueryIndex")]
    pub min_index: u64,
}

/// One signed identity: the JWT, and when it expires (unix seconds; 0: never).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SignedWorkloadIdentity {
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    #[serde(rename = "TaskName")]
    pub task_name: String,
    #[serde(rename = "IdentityName")]
    pub identity_name: String,
    #[serde(rename = "JWT")]
    pub jwt: String,
    #[serde(rename = "Expiration")]
    pub expiration: i64,
}

/// An identity the servers would not sign, and why (the allocation is gone or terminal, the task
/// or identity is unknown).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WorkloadIdentityRejection {
    #[serde(rename = "Request")]
    pub request: WorkloadIdentityRequest,
    #[serde(rename = "Reason")]
    pub reason: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocSignIdentitiesResponse {
    #[serde(rename = "SignedIdentities")]
    pub signed: Vec<SignedWorkloadIdentity>,
    #[serde(rename = "Rejections")]
    pub rejections: Vec<WorkloadIdentityRejection>,
}

/// `CSIVolume.Claim` (Nomad's `CSIVolumeClaimRequest`): a client's allocation claims a volume before
/// its tasks start. The server commits the claim, has a controller publish the volume to the node
/// when the plugin needs that, and answers with the publish context the node plugin needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolumeClaimRequest {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    /// The volume's ID (with the `[N]` suffix of a `per_alloc` request already applied).
    #[serde(rename = "VolumeID")]
    pub volume_id: String,
    #[serde(rename = "AllocationID")]
    pub allocation_id: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    /// The node plugin's ID for this node (`NodeGetInfo.node_id`).
    #[serde(rename = "ExternalNodeID")]
    pub external_node_id: String,
    #[serde(rename = "Claim")]
    pub claim: crate::csi::CSIVolumeClaimMode,
    #[serde(rename = "AccessMode")]
    pub access_mode: String,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: String,
    #[serde(rename = "State")]
    pub state: crate::csi::CSIVolumeClaimState,
    /// The client's node secret (Nomad accepts it in place of an ACL token).
    #[serde(rename = "SecretID")]
    pub secret_id: String,
}

/// The answer to `CSIVolume.Claim`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolumeClaimResponse {
    /// From ControllerPublishVolume; empty when the plugin has no controller publish step.
    #[serde(rename = "PublishContext")]
    pub publish_context: BTreeMap<String, String>,
    /// The volume as claimed (its context, mount options and secrets are needed to stage it).
    #[serde(rename = "Volume")]
    pub volume: Option<crate::csi::CSIVolume>,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// `CSIVolume.Unpublish` (Nomad's `CSIVolumeUnpublishRequest`): release a claim. A client sends it
/// after it unpublished and unstaged the volume on its node (claim state `Unpublishing`, no access
/// mode, so the server skips the node step); `volume detach` sends a `GC` claim with only a node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiVolumeUnpublishRequest {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "VolumeID")]
    pub volume_id: String,
    #[serde(rename = "Claim")]
    pub claim: crate::csi::CSIVolumeClaim,
    #[serde(rename = "SecretID")]
    pub secret_id: String,
}

/// The answer to `POST /v1/job/:id/plan` (Nomad's JobPlanResponse): what registering the job would
/// do, from a scheduler run that changes nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JobPlanResponse {
    /// Task group → what would happen to its allocations.
    #[serde(rename = "Annotations")]
    pub annotations: Option<crate::plan::PlanAnnotations>,
    /// Task group → why some of its allocations could not be placed.
    #[serde(rename = "FailedTGAllocs")]
    pub failed_tg_allocs: BTreeMap<String, crate::alloc::AllocMetric>,
    /// The current job's JobModifyIndex (0 when the job does not exist): `job run -check-index`.
    #[serde(rename = "JobModifyIndex")]
    pub job_modify_index: u64,
    /// Evaluations the scheduler would create (blocked, delayed follow-ups).
    #[serde(rename = "CreatedEvals")]
    pub created_evals: Vec<crate::eval::Evaluation>,
    /// With `Diff`: the change from the current job, annotated with the planned updates.
    #[serde(rename = "Diff")]
    pub diff: Option<crate::diff::JobDiff>,
    /// RFC 3339; Go's zero time when the job is not periodic.
    #[serde(rename = "NextPeriodicLaunch")]
    pub next_periodic_launch: String,
    #[serde(rename = "Warnings")]
    pub warnings: String,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// What `POST /v1/node/:id/drain` asks for (Nomad's api `DrainSpec`): `null` disables the drain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DrainSpec {
    /// Nanoseconds: after this the remaining allocations are migrated at once; 0 means no deadline,
    /// negative forces the drain now.
    #[serde(rename = "Deadline")]
    pub deadline: crate::Duration,
    /// Leave system jobs' allocations running.
    #[serde(rename = "IgnoreSystemJobs")]
    pub ignore_system_jobs: bool,
}

/// `Node.UpdateDrain` and the body of `POST /v1/node/:id/drain`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeUpdateDrainRequest {
    #[serde(rename = "NodeID")]
    pub node_id: String,
    #[serde(rename = "DrainSpec")]
    pub drain_spec: Option<DrainSpec>,
    /// With the drain disabled: make the node eligible again.
    #[serde(rename = "MarkEligible")]
    pub mark_eligible: bool,
    /// Kept in the node's `LastDrain`.
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
}

/// `Node.UpdateEligibility` and the body of `POST /v1/node/:id/eligibility`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeUpdateEligibilityRequest {
    #[serde(rename = "NodeID")]
    pub node_id: String,
    /// `eligible` or `ineligible`.
    #[serde(rename = "Eligibility")]
    pub eligibility: String,
}

/// The answer to the node writes (drain, eligibility, evaluate): Nomad's `NodeDrainUpdateResponse`,
/// `NodeEligibilityUpdateResponse` and, for evaluate, the same fields of `NodeUpdateResponse`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeWriteResponse {
    #[serde(rename = "NodeModifyIndex")]
    pub node_modify_index: u64,
    /// The evaluations the write created (the node's jobs, when it became eligible).
    #[serde(rename = "EvalIDs")]
    pub eval_ids: Vec<String>,
    #[serde(rename = "EvalCreateIndex")]
    pub eval_create_index: u64,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// The answer to `PUT /v1/allocation/:id/stop` (Nomad's AllocStopResponse).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct AllocStopResponse {
    /// The evaluation that replaces the allocation.
    #[serde(rename = "EvalID")]
    pub eval_id: String,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// Where a server sends a controller call to the client agent that runs the controller plugin
/// (Nomad's `ClientCSI.*` over its client connection; Caravan's client agents answer on HTTP).
pub const CSI_CONTROLLER_PATH: &str = "/v1/client/csi/controller";
/// Where a server asks a client agent to unpublish and unstage a volume for an allocation before
/// the controller detaches it (Nomad's `ClientCSI.NodeDetachVolume`).
pub const CSI_NODE_DETACH_PATH: &str = "/v1/client/csi/node/detach";
/// Where a server asks the client agent of a node to create, register or delete a dynamic host
/// volume ([`crate::host_volume::ClientHostVolumeRequest`]).
pub const HOST_VOLUME_CLIENT_PATH: &str = "/v1/client/host-volume";

/// What a server sends to `CSI_NODE_DETACH_PATH`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiNodeDetachRequest {
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "VolumeID")]
    pub volume_id: String,
    /// The provider's ID of the volume (empty: the same as `VolumeID`).
    #[serde(rename = "ExternalID")]
    pub external_id: String,
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    #[serde(rename = "ReadOnly")]
    pub read_only: bool,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: String,
    #[serde(rename = "AccessMode")]
    pub access_mode: String,
}

/// Where a server asks a client agent to grow a volume it has published for an allocation
/// (NodeExpandVolume), after the controller expanded it.
pub const CSI_NODE_EXPAND_PATH: &str = "/v1/client/csi/node/expand";

/// What a server sends to `CSI_NODE_EXPAND_PATH`: the volume and allocation, as for a detach,
/// and the size asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiNodeExpandRequest {
    #[serde(flatten)]
    pub target: CsiNodeDetachRequest,
    #[serde(rename = "CapacityMin")]
    pub capacity_min: i64,
    #[serde(rename = "CapacityMax")]
    pub capacity_max: i64,
}

/// The header with the target node's secret: a client agent runs controller calls only for
/// servers that know it.
pub const CSI_NODE_SECRET_HEADER: &str = "x-caravan-node-secret";

/// One volume capability as a CSI call carries it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiCapability {
    #[serde(rename = "AccessMode")]
    pub access_mode: String,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: String,
    #[serde(rename = "FSType")]
    pub fs_type: String,
    #[serde(rename = "MountFlags")]
    pub mount_flags: Vec<String>,
}

/// A controller call a server asks a client agent to make to its controller plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "Method")]
pub enum CsiControllerCall {
    ControllerPublishVolume {
        #[serde(rename = "VolumeID")]
        volume_id: String,
        #[serde(rename = "NodeID")]
        node_id: String,
        #[serde(rename = "Capability")]
        capability: CsiCapability,
        #[serde(rename = "ReadOnly", default)]
        read_only: bool,
        #[serde(rename = "Secrets", default)]
        secrets: BTreeMap<String, String>,
        #[serde(rename = "VolumeContext", default)]
        volume_context: BTreeMap<String, String>,
    },
    ControllerUnpublishVolume {
        #[serde(rename = "VolumeID")]
        volume_id: String,
        #[serde(rename = "NodeID")]
        node_id: String,
        #[serde(rename = "Secrets", default)]
        secrets: BTreeMap<String, String>,
    },
    CreateVolume {
        #[serde(rename = "Name")]
        name: String,
        #[serde(rename = "CapacityMin", default)]
        capacity_min: i64,
        #[serde(rename = "CapacityMax", default)]
        capacity_max: i64,
        #[serde(rename = "Capabilities", default)]
        capabilities: Vec<CsiCapability>,
        #[serde(rename = "Parameters", default)]
        parameters: BTreeMap<String, String>,
        #[serde(rename = "Secrets", default)]
        secrets: BTreeMap<String, String>,
        #[serde(rename = "SnapshotID", default)]
        snapshot_id: String,
        #[serde(rename = "CloneID", default)]
        clone_id: String,
    },
    DeleteVolume {
        #[serde(rename = "VolumeID")]
        volume_id: String,
        #[serde(rename = "Secrets", default)]
        secrets: BTreeMap<String, String>,
    },
    ValidateVolumeCapabilities {
        #[serde(rename = "VolumeID")]
        volume_id: String,
        #[serde(rename = "Capabilities", default)]
        capabilities: Vec<CsiCapability>,
        #[serde(rename = "VolumeContext", default)]
        volume_context: BTreeMap<String, String>,
        #[serde(rename = "Parameters", default)]
        parameters: BTreeMap<String, String>,
        #[serde(rename = "Secrets", default)]
        secrets: BTreeMap<String, String>,
    },
    CreateSnapshot {
        #[serde(rename = "SourceVolumeID")]
        source_volume_id: String,
        #[serde(rename = "Name")]
        name: String,
        #[serde(rename = "Parameters", default)]
        parameters: BTreeMap<String, String>,
        #[serde(rename = "Secrets", default)]
        secrets: BTreeMap<String, String>,
    },
    DeleteSnapshot {
        #[serde(rename = "SnapshotID")]
        snapshot_id: String,
        #[serde(rename = "Secrets", default)]
        secrets: BTreeMap<String, String>,
    },
    ListSnapshots {
        #[serde(rename = "MaxEntries", default)]
        max_entries: i32,
        #[serde(rename = "StartingToken", default)]
        starting_token: String,
        #[serde(rename = "Secrets", default)]
        secrets: BTreeMap<String, String>,
    },
    ListVolumes {
        #[serde(rename = "MaxEntries", default)]
        max_entries: i32,
        #[serde(rename = "StartingToken", default)]
        starting_token: String,
    },
    ControllerExpandVolume {
        #[serde(rename = "VolumeID")]
        volume_id: String,
        #[serde(rename = "CapacityMin", default)]
        capacity_min: i64,
        #[serde(rename = "CapacityMax", default)]
        capacity_max: i64,
        /// The capability the volume is used with, when it is in use.
        #[serde(rename = "Capability", default)]
        capability: Option<CsiCapability>,
        #[serde(rename = "Secrets", default)]
        secrets: BTreeMap<String, String>,
    },
}

impl CsiControllerCall {
    /// The CSI method's name.
    pub fn method(&self) -> &'static str {
        match self {
            CsiControllerCall::ControllerPublishVolume { .. } => "ControllerPublishVolume",
            CsiControllerCall::ControllerUnpublishVolume { .. } => "ControllerUnpublishVolume",
            CsiControllerCall::CreateVolume { .. } => "CreateVolume",
            CsiControllerCall::DeleteVolume { .. } => "DeleteVolume",
            CsiControllerCall::ValidateVolumeCapabilities { .. } => "ValidateVolumeCapabilities",
            CsiControllerCall::CreateSnapshot { .. } => "CreateSnapshot",
            CsiControllerCall::DeleteSnapshot { .. } => "DeleteSnapshot",
            CsiControllerCall::ListSnapshots { .. } => "ListSnapshots",
            CsiControllerCall::ListVolumes { .. } => "ListVolumes",
            CsiControllerCall::ControllerExpandVolume { .. } => "ControllerExpandVolume",
        }
    }

    /// Whether the call changes the provider's state: these are serialized per plugin.
    pub fn is_destructive(&self) -> bool {
        !matches!(
            self,
            CsiControllerCall::ValidateVolumeCapabilities { .. }
                | CsiControllerCall::ListSnapshots { .. }
                | CsiControllerCall::ListVolumes { .. }
        )
    }

    /// The call without its secrets (what Raft records; secrets are merged back from the volume
    /// when a recorded call is resolved).
    pub fn without_secrets(&self) -> CsiControllerCall {
        let mut c = self.clone();
        c.set_secrets(BTreeMap::new());
        c
    }

    /// Sets the call's secrets (where it has any).
    pub fn set_secrets(&mut self, value: BTreeMap<String, String>) {
        match self {
            CsiControllerCall::ControllerPublishVolume { secrets, .. }
            | CsiControllerCall::ControllerUnpublishVolume { secrets, .. }
            | CsiControllerCall::CreateVolume { secrets, .. }
            | CsiControllerCall::DeleteVolume { secrets, .. }
            | CsiControllerCall::ValidateVolumeCapabilities { secrets, .. }
            | CsiControllerCall::CreateSnapshot { secrets, .. }
            | CsiControllerCall::DeleteSnapshot { secrets, .. }
            | CsiControllerCall::ListSnapshots { secrets, .. }
            | CsiControllerCall::ControllerExpandVolume { secrets, .. } => *secrets = value,
            CsiControllerCall::ListVolumes { .. } => {}
        }
    }
}

/// What a server sends to `CSI_CONTROLLER_PATH`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CsiControllerRequest {
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    /// Unix nanoseconds: the client gives up (and cancels the gRPC call) at this time.
    #[serde(rename = "Deadline")]
    pub deadline: i64,
    #[serde(rename = "Call")]
    pub call: CsiControllerCall,
}

/// A controller call's answer: the fields its method fills.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiControllerReply {
    #[serde(rename = "PublishContext")]
    pub publish_context: BTreeMap<String, String>,
    /// CreateVolume: the provider's volume ID.
    #[serde(rename = "ExternalID")]
    pub external_id: String,
    /// CreateVolume, ControllerExpandVolume: the volume's size now.
    #[serde(rename = "Capacity")]
    pub capacity: i64,
    /// ControllerExpandVolume: the nodes that mount it must grow it too (NodeExpandVolume).
    #[serde(rename = "NodeExpansionRequired")]
    pub node_expansion_required: bool,
    #[serde(rename = "VolumeContext")]
    pub volume_context: BTreeMap<String, String>,
    #[serde(rename = "Topologies")]
    pub topologies: Vec<crate::csi::CSITopology>,
    /// ValidateVolumeCapabilities: whether the capabilities were confirmed, and why not.
    #[serde(rename = "Confirmed")]
    pub confirmed: bool,
    #[serde(rename = "Message")]
    pub message: String,
    /// CreateSnapshot / ListSnapshots.
    #[serde(rename = "Snapshots")]
    pub snapshots: Vec<CsiSnapshot>,
    /// ListVolumes.
    #[serde(rename = "Volumes")]
    pub volumes: Vec<CsiExternalVolume>,
    #[serde(rename = "NextToken")]
    pub next_token: String,
}

/// A snapshot as Nomad's API shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiSnapshot {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "ExternalSourceVolumeID")]
    pub external_source_volume_id: String,
    #[serde(rename = "SizeBytes")]
    pub size_bytes: i64,
    /// Unix seconds.
    #[serde(rename = "CreateTime")]
    pub create_time: i64,
    #[serde(rename = "IsReady")]
    pub is_ready: bool,
    #[serde(rename = "SourceVolumeID")]
    pub source_volume_id: String,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
}

/// A volume the provider knows (`GET /v1/volumes/external`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiExternalVolume {
    #[serde(rename = "ExternalID")]
    pub external_id: String,
    #[serde(rename = "CapacityBytes")]
    pub capacity_bytes: i64,
    #[serde(rename = "VolumeContext")]
    pub volume_context: BTreeMap<String, String>,
    #[serde(rename = "PublishedExternalNodeIDs")]
    pub published_external_node_ids: Vec<String>,
}

/// A failed controller call as a client agent reports it: the plugin's gRPC code (numeric, as
/// tonic's `Code`) and message, so the server decides retries from the code.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CsiCallError {
    #[serde(rename = "Code")]
    pub code: i32,
    #[serde(rename = "Message")]
    pub message: String,
}

/// One HTTP request, as forwarded over `Agent.Http`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HttpForwardRequest {
    pub method: String,
    /// Path and query: `/v1/jobs?prefix=web`.
    pub uri: String,
    pub headers: Vec<(String, String)>,
    /// The body, base64.
    pub body: String,
}

/// Its answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HttpForwardResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body, base64.
    pub body: String,
}

impl HttpForwardRequest {
    pub fn new(method: &str, uri: &str, headers: Vec<(String, String)>, body: &[u8]) -> Self {
        use base64::Engine as _;
        HttpForwardRequest {
            method: method.into(),
            uri: uri.into(),
            headers,
            body: base64::engine::general_purpose::STANDARD.encode(body),
        }
    }

    pub fn body_bytes(&self) -> Result<Vec<u8>, String> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(&self.body)
            .map_err(|e| format!("forwarded body is not base64: {e}"))
    }
}

impl HttpForwardResponse {
    pub fn new(status: u16, headers: Vec<(String, String)>, body: &[u8]) -> Self {
        use base64::Engine as _;
        HttpForwardResponse {
            status,
            headers,
            body: base64::engine::general_purpose::STANDARD.encode(body),
        }
    }

    pub fn body_bytes(&self) -> Vec<u8> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(&self.body)
            .unwrap_or_default()
    }
}
