//! What the FSM applies ([`Command`]), what applying returns ([`ApplyResponse`]), and the tables a
//! blocking query can wait on ([`Table`]).

use model::alloc::Allocation;
use model::deployment::{Deployment, DeploymentStatusUpdate};
use model::eval::Evaluation;
use model::node::Node;
use model::Job;
use serde::{Deserialize, Serialize};

/// A table of the store. Each has the Raft index at which it last changed
/// ([`crate::StateSnapshot::table_index`]); blocking queries wait on those.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Table {
    Jobs,
    JobVersions,
    JobSummaries,
    Evals,
    Allocs,
    Nodes,
    Deployments,
    CsiVolumes,
    CsiPlugins,
    /// In-flight destructive controller calls, one per plugin at most.
    CsiControllerOps,
    AclPolicies,
    AclTokens,
    AclRoles,
    OneTimeTokens,
    Namespaces,
    Variables,
    RootKeys,
    /// The one scheduler configuration (`/v1/operator/scheduler/configuration`).
    SchedulerConfig,
    /// Each job's scaling events per group.
    ScalingEvents,
    /// Node pools (besides the built-in `all` and `default`).
    NodePools,
    /// The one autopilot configuration (`/v1/operator/autopilot/configuration`).
    AutopilotConfig,
    /// Dynamic host volumes.
    HostVolumes,
    /// Native service registrations.
    Services,
    /// Sticky host volume claims of task groups.
    HostVolumeClaims,
}

impl Table {
    pub const COUNT: usize = 24;
    pub const ALL: [Table; Table::COUNT] = [
        Table::Jobs,
        Table::JobVersions,
        Table::JobSummaries,
        Table::Evals,
        Table::Allocs,
        Table::Nodes,
        Table::Deployments,
        Table::CsiVolumes,
        Table::CsiPlugins,
        Table::CsiControllerOps,
        Table::AclPolicies,
        Table::AclTokens,
        Table::AclRoles,
        Table::OneTimeTokens,
        Table::Namespaces,
        Table::Variables,
        Table::RootKeys,
        Table::SchedulerConfig,
        Table::ScalingEvents,
        Table::NodePools,
        Table::AutopilotConfig,
        Table::HostVolumes,
        Table::Services,
        Table::HostVolumeClaims,
    ];

    pub(crate) fn slot(self) -> usize {
        self as usize
    }
}

/// Commands the FSM applies. Serde-tagged (`{"type": "JobRegister", …}`); they are written to the
/// Raft log, so variants and their fields are append-only: never renumber, rename or remove one.
///
/// Every ID and timestamp the command needs is in it: applying never reads the clock or makes IDs.
// Commands are built, encoded and applied one at a time; boxing the job would only cost callers.
#[allow(clippy::large_enum_variant)]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "type")]
pub enum Command {
    /// Register or update a job (canonicalized by the server), with the evaluation that schedules it.
    JobRegister {
        job: Job,
        eval: Option<Evaluation>,
        /// Unix nanoseconds; becomes the job's `SubmitTime` when the spec changed.
        submit_time: i64,
        /// The source the job was written in, kept with the version this register leaves
        /// (unless that version already has one: the first submission of a version stays).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        submission: Option<model::job::JobSubmission>,
    },
    /// Register one region's copy of a multiregion job at exactly `version`, the same in every
    /// region, so the regions' deployments of one registration find each other. Written even
    /// when the spec is unchanged; refused when the stored job is already at `version` or later
    /// (a concurrent registration: the caller registers again).
    JobRegisterAtVersion {
        job: Job,
        eval: Option<Evaluation>,
        submit_time: i64,
        version: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        submission: Option<model::job::JobSubmission>,
    },
    /// Stop a job (a new version with `Stop = true`), or with `purge` remove it with its versions and
    /// summary. Its evaluations and allocations stay.
    JobDeregister {
        namespace: String,
        job_id: String,
        purge: bool,
        eval: Option<Evaluation>,
        /// Unix nanoseconds; 0 keeps the job's submit time.
        submit_time: i64,
    },
    EvalUpsert {
        evals: Vec<Evaluation>,
    },
    /// Garbage collection: removes evaluations and allocations by ID; unknown IDs are skipped.
    EvalDelete {
        eval_ids: Vec<String>,
        alloc_ids: Vec<String>,
    },
    NodeRegister {
        node: Node,
    },
    NodeDeregister {
        node_ids: Vec<String>,
    },
    NodeUpdateStatus {
        node_id: String,
        status: model::node::NodeStatus,
        /// Unix seconds, as Nomad's `StatusUpdatedAt`.
        updated_at: i64,
    },
    AllocUpsert {
        allocs: Vec<Allocation>,
    },
    /// Allocations stopped outside a plan (the copy a reconnect drops): each stored allocation
    /// gets the stop's fields; its client's fields stay as stored; unknown IDs are skipped.
    AllocStop {
        stops: Vec<AllocStop>,
    },
    DeploymentUpsert {
        deployment: Deployment,
    },
    /// The plan applier's commit: the part of one evaluation's plan that still fit the newest state,
    /// with the evaluation updates that go with it (Nomad's `ApplyPlanResultsRequest`), applied as
    /// one. Order inside the command: the deployment and its status updates, then the stops, then the
    /// placements, then the evaluations, so allocation writes see the deployment they count towards.
    PlanApply {
        /// The evaluation whose plan this is.
        eval_id: String,
        /// The job the placements run. A placement sent without its job gets this one, so the entry
        /// carries the job once instead of once per allocation (an in-place update moves the
        /// allocation to this version). `None`: placements carry their own jobs.
        job: Option<Job>,
        /// New allocations and in-place updates, stored as given (plus the job above).
        allocs_upsert: Vec<Allocation>,
        /// Allocations to stop or evict; unknown IDs are skipped.
        allocs_stop: Vec<AllocStop>,
        /// The evaluation's own update and the evaluations it created (blocked, delayed, follow-ups).
        evals: Vec<Evaluation>,
        /// A deployment to create or update.
        deployment: Option<Deployment>,
        /// Status changes of other deployments (cancelled by a newer job version, …); unknown IDs
        /// are skipped.
        deployment_updates: Vec<DeploymentStatusUpdate>,
    },
    /// Several plans' commits in one entry: the plan applier batches the plans that queued up
    /// while a commit was in flight. Each is applied in order as its own `PlanApply`; one that
    /// fails changes nothing, and the plans after it are not applied either (each was checked
    /// with the ones before it applied), while those before it stay
    /// ([`ApplyResponse::batch_errors`]). Only `PlanApply` commands may be inside.
    PlanApplyBatch {
        plans: Vec<Command>,
    },
    /// What clients report about their allocations (`Node.UpdateAlloc`): only the client's fields
    /// change (status, description, task states, deployment health, modify time); unknown IDs are
    /// skipped; `AllocModifyIndex` stays, so clients do not mistake their own reports for server
    /// changes. `evals` are the follow-ups the server made for allocations that failed.
    AllocClientUpdate {
        allocs: Vec<model::wire::AllocClientUpdate>,
        evals: Vec<Evaluation>,
    },
    /// A deployment's status changes (pause, resume, fail — by a user or the deployment watcher),
    /// with the job to roll back to when it fails with `auto_revert`, and the evaluation that
    /// follows (Nomad's `DeploymentStatusUpdateRequest`). The job is registered as a new version.
    DeploymentStatus {
        update: DeploymentStatusUpdate,
        job: Option<Job>,
        eval: Option<Evaluation>,
        /// Unix nanoseconds: the reverted job's submit time.
        submit_time: i64,
    },
    /// Promotes the canaries of some (or `all`) task groups of a deployment; fails unless each
    /// group's canaries are healthy (Nomad's `ApplyDeploymentPromoteRequest`).
    DeploymentPromote {
        deployment_id: String,
        all: bool,
        groups: Vec<String>,
        eval: Option<Evaluation>,
    },
    /// Sets the deployment health of allocations by hand (`/v1/deployment/allocation-health`),
    /// with an optional status change and revert, as [`Command::DeploymentStatus`].
    DeploymentAllocHealth {
        deployment_id: String,
        healthy: Vec<String>,
        unhealthy: Vec<String>,
        /// Unix nanoseconds: when health was decided.
        timestamp: i64,
        update: Option<DeploymentStatusUpdate>,
        job: Option<Job>,
        eval: Option<Evaluation>,
    },
    /// Merges desired transitions into allocations (`alloc stop` asks for a migration; Nomad's
    /// `AllocUpdateDesiredTransitionRequest`), with the evaluations that act on them. Unknown IDs
    /// are skipped; `AllocModifyIndex` stays (the client has nothing new to run).
    AllocUpdateDesiredTransition {
        transitions: std::collections::BTreeMap<String, model::alloc::DesiredTransition>,
        evals: Vec<Evaluation>,
    },
    /// Starts, changes or ends a node's drain (Nomad's `NodeUpdateDrainRequest`; the drainer's
    /// `BatchNodeUpdateDrain` when a drain is done). A strategy makes the node ineligible; ending one
    /// with `mark_eligible` makes it eligible again. `LastDrain` follows: a new drain starts it, an
    /// end says `complete` (with `complete`, the drainer) or `canceled` (an operator).
    NodeUpdateDrain {
        node_id: String,
        drain_strategy: Option<model::node::DrainStrategy>,
        mark_eligible: bool,
        complete: bool,
        event: Option<model::node::NodeEvent>,
        /// Replaces `LastDrain.Meta` when not empty.
        meta: std::collections::BTreeMap<String, String>,
        /// Unix seconds.
        updated_at: i64,
    },
    /// Sets a node's scheduling eligibility (Nomad's `NodeUpdateEligibilityRequest`); a draining
    /// node cannot be made eligible.
    NodeUpdateEligibility {
        node_id: String,
        /// `eligible` or `ineligible`.
        eligibility: model::node::SchedulingEligibility,
        event: Option<model::node::NodeEvent>,
        /// Unix seconds.
        updated_at: i64,
    },
    /// Replaces the whole state with a snapshot taken by `operator snapshot save` (the JSON-lines
    /// format of [`crate::StateStore::save`]), its indexes lowered to this entry's index.
    StateRestore {
        #[serde(with = "serde_bytes")]
        snapshot: Vec<u8>,
    },
    /// Register CSI volumes, or update registered ones (the endpoint merged the changes in; claims
    /// and the create index are kept from the stored volume).
    CsiVolumeRegister {
        volumes: Vec<model::csi::CSIVolume>,
    },
    /// Deregister volumes. In use is refused unless `force` and every claiming allocation is
    /// terminal or gone.
    CsiVolumeDeregister {
        namespace: String,
        volume_ids: Vec<String>,
        force: bool,
    },
    /// A claim or one checkpoint of its release (Nomad's `CSIVolumeClaim` apply): `Taken` claims,
    /// `Unpublishing`/`NodeDetached`/`ControllerDetached` move it to the past claims, `ReadyToFree`
    /// deletes it, a `GC` mode claim only marks the volume changed to wake the volume watcher.
    CsiVolumeClaim {
        namespace: String,
        volume_id: String,
        claim: model::csi::CSIVolumeClaim,
    },
    /// Records a destructive controller call before it is sent. Refused while another is in flight
    /// for the same plugin.
    CsiControllerOpBegin {
        op: model::csi::CSIControllerOp,
    },
    /// Clears the plugin's in-flight call if it is still `op_id`, owned by `owner` in `term`
    /// (`owner` 0: any owner, as older entries in the log were written).
    CsiControllerOpEnd {
        plugin_id: String,
        op_id: String,
        #[serde(default)]
        owner: u64,
        #[serde(default)]
        term: u64,
    },
    /// Renews the plugin's recorded call before it is sent again, or hands it to a new leader
    /// (compare-and-set): refused unless the record is still `op_id` at `expect_index`, and a
    /// change of owner is refused until the recorded deadline (plus slack) has passed at `now`
    /// and from an older term.
    CsiControllerOpRenew {
        plugin_id: String,
        op_id: String,
        expect_index: u64,
        owner: u64,
        term: u64,
        /// Unix nanoseconds, as the proposing leader's clock read it.
        now: i64,
        deadline: i64,
        controller_node_id: String,
        attempts: u32,
        unresolved: bool,
        last_error: String,
    },
    /// The first management token (`/v1/acl/bootstrap`). Refused once bootstrapped unless
    /// `reset_index` is the index of the last bootstrap (Nomad's bootstrap reset).
    AclBootstrap {
        token: model::acl::AclToken,
        reset_index: u64,
    },
    /// Creates or replaces policies by name (create index kept).
    AclPolicyUpsert {
        policies: Vec<model::acl::AclPolicy>,
    },
    /// Deletes policies by name; refused if one does not exist (nothing is deleted).
    AclPolicyDelete {
        names: Vec<String>,
    },
    /// Creates or updates tokens by accessor ID (create index and time kept).
    AclTokenUpsert {
        tokens: Vec<model::acl::AclToken>,
    },
    /// Deletes tokens by accessor ID, with their one-time tokens; refused if one does not exist.
    AclTokenDelete {
        accessor_ids: Vec<String>,
    },
    /// Creates or updates roles by ID; a name another role has, or a policy that does not exist,
    /// is refused.
    AclRoleUpsert {
        roles: Vec<model::acl::AclRole>,
    },
    AclRoleDelete {
        ids: Vec<String>,
    },
    AclOneTimeTokenUpsert {
        token: model::acl::OneTimeToken,
    },
    /// Consumes a one-time token; refused if it does not exist or expired at `now` (unix ns).
    AclOneTimeTokenExchange {
        one_time_secret_id: String,
        now: i64,
    },
    /// Deletes the one-time tokens expired at `now`, and the tokens expired at `now` (garbage
    /// collection).
    AclExpire {
        now: i64,
    },
    NamespaceUpsert {
        namespaces: Vec<model::acl::Namespace>,
    },
    /// Deletes namespaces; `default`, or one that still holds non-dead jobs or volumes, is refused.
    NamespaceDelete {
        names: Vec<String>,
    },
    /// A variable write, its items already sealed by the server (Nomad's `VarApplyStateRequest`).
    /// Conflicts (a check-and-set index that does not match, a lock held by someone else) are
    /// refused with a [`crate::StateError::Conflict`] whose text starts `cas error:` or
    /// `lock error:`; the state is unchanged.
    VarApply {
        op: VarOp,
        var: model::variable::VariableEncrypted,
        /// Unix nanoseconds: the variable's create or modify time.
        now: i64,
    },
    /// Adds a root key, or updates one's state; a key written `active` makes every other key
    /// `inactive`.
    RootKeyUpsert {
        key: model::variable::RootKey,
    },
    /// Deletes an inactive root key that no variable uses.
    RootKeyDelete {
        key_id: String,
    },
    /// Marks one version of a job stable or not (`/v1/job/:id/stable`); the current job too when it
    /// is that version. An unknown job or version is `NotFound`.
    JobStability {
        namespace: String,
        job_id: String,
        version: u64,
        stable: bool,
    },
    /// Replaces the cluster's autopilot configuration (Nomad's `AutopilotRequestType`), as
    /// [`Command::SchedulerConfigSet`] does the scheduler's: create index kept, modify index this
    /// entry's; with `cas`, only if the stored `ModifyIndex` (0 when none is stored) is `cas`,
    /// else a [`crate::StateError::Conflict`] starting `cas error:` and nothing changes. A
    /// configuration that does not validate (an Enterprise switch on) is refused.
    AutopilotConfigSet {
        config: model::autopilot::AutopilotConfiguration,
        cas: Option<u64>,
    },
    /// Stores a dynamic host volume as its node's client made or registered it (Nomad's
    /// `HostVolumeRegisterRequestType`): its create index and time are kept when it exists, its
    /// node pool is its node's, and it is `ready` when its node already fingerprints a host
    /// volume of its name. Refused when its node or namespace does not exist.
    HostVolumeUpsert {
        volume: model::host_volume::HostVolume,
    },
    /// Removes a dynamic host volume (Nomad's `HostVolumeDeleteRequestType`); one that is gone
    /// already is not an error.
    HostVolumeDelete {
        namespace: String,
        id: String,
    },
    /// Removes a sticky host volume claim (`DELETE /v1/volumes/claim/:id`), so the group's next
    /// placements may go elsewhere; one that is gone already is not an error.
    HostVolumeClaimDelete {
        namespace: String,
        id: String,
    },
    /// Removes one native service registration (`DELETE /v1/service/:name/:id`); one that is
    /// gone already is not an error. The allocation's next change registers it again if it still
    /// runs the service.
    ServiceRegistrationDelete {
        namespace: String,
        id: String,
    },
    /// Replaces the cluster's scheduler configuration (Nomad's `SchedulerConfigRequestType`); its
    /// create index is kept, its modify index becomes this entry's. With `cas`, only if the stored
    /// `ModifyIndex` (0 when none is stored) is `cas`: otherwise refused with a
    /// [`crate::StateError::Conflict`] whose text starts `cas error:`, the state unchanged.
    SchedulerConfigSet {
        config: model::scheduler_config::SchedulerConfiguration,
        cas: Option<u64>,
    },
    /// `/v1/system/reconcile/summaries`: every job summary rebuilt from the allocations.
    JobSummariesReconcile,
    /// `/v1/node/:id/purge`: the node removed and its jobs' evaluations written, in one step.
    NodePurge {
        node_id: String,
        evals: Vec<Evaluation>,
    },
    /// Create or replace node pools (never `all` or `default`).
    NodePoolUpsert {
        pools: Vec<model::node_pool::NodePool>,
    },
    /// Delete node pools: every one must exist and be neither built in nor used by a node or a
    /// job that is not dead, or nothing is deleted.
    NodePoolDelete {
        names: Vec<String>,
    },
    /// Garbage collection: each object is removed only if it is still at the modify index it was
    /// judged garbage at (unknown or changed ones are skipped); jobs are purged with their
    /// versions, summaries and scaling events.
    Gc {
        evals: Vec<(String, u64)>,
        allocs: Vec<(String, u64)>,
        jobs: Vec<(String, String, u64)>,
        deployments: Vec<(String, u64)>,
        nodes: Vec<(String, u64)>,
    },
    /// `POST /v1/job/:id/scale`: with `count`, the job's group set to it as a new job version (only
    /// while the job's `JobModifyIndex` is still `job_modify_index`, else a `Conflict` and nothing
    /// changes) with `eval`; then, with or without a count, `event` recorded for the group (its
    /// `EvalID` and `CreateIndex` filled in), the newest 20 kept.
    JobScale {
        namespace: String,
        job_id: String,
        group: String,
        count: Option<i64>,
        job_modify_index: u64,
        eval: Option<Evaluation>,
        event: model::scaling::ScalingEvent,
        /// Unix nanoseconds; the new version's `SubmitTime`.
        submit_time: i64,
    },
    /// `PUT|DELETE /v1/job/:id/versions/:name/tag`: with `tag`, names version `version` (the
    /// current one with `latest`) — a name already on another version of the job is refused;
    /// without, removes the tag called `name`. Tagged versions are never pruned.
    JobVersionTag {
        namespace: String,
        job_id: String,
        name: String,
        version: u64,
        latest: bool,
        tag: Option<model::job::JobVersionTag>,
    },
}

/// What a [`Command::VarApply`] does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarOp {
    Set,
    /// Set only if the stored modify index is the variable's `ModifyIndex` (0: does not exist).
    Cas,
    Delete,
    /// Delete only if the stored modify index is the variable's `ModifyIndex` (0: does not exist).
    DeleteCas,
    /// Take the variable's lock (creating the variable when it does not exist).
    LockAcquire,
    /// Drop the lock; its ID must match unless the request carries no lock (the leader expiring it).
    LockRelease,
}

/// One allocation a plan stops (Nomad's `AllocationDiff` for stopped and preempted allocations):
/// only what changes travels, the allocation itself is in the state already.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct AllocStop {
    pub alloc_id: String,
    /// `stop` or `evict`.
    pub desired_status: model::alloc::DesiredStatus,
    pub desired_description: String,
    /// A client status to set as well (`lost` for an allocation on a down node); `None` keeps it.
    #[serde(default, with = "model::status::empty_as_none")]
    pub client_status: Option<model::alloc::ClientStatus>,
    /// The evaluation that will place its replacement later (a delayed reschedule); empty: none.
    #[serde(default)]
    pub followup_eval_id: String,
    /// Unix nanoseconds, the allocation's new `ModifyTime`; 0 keeps it.
    #[serde(default)]
    pub modify_time: i64,
    /// An eviction: the allocation that preempted this one (`PreemptedByAllocation`); empty: none.
    #[serde(default)]
    pub preempted_by: String,
}

impl Command {
    /// The variant's name, for logs and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Command::JobRegister { .. } => "JobRegister",
            Command::JobRegisterAtVersion { .. } => "JobRegisterAtVersion",
            Command::JobDeregister { .. } => "JobDeregister",
            Command::EvalUpsert { .. } => "EvalUpsert",
            Command::EvalDelete { .. } => "EvalDelete",
            Command::NodeRegister { .. } => "NodeRegister",
            Command::NodeDeregister { .. } => "NodeDeregister",
            Command::NodeUpdateStatus { .. } => "NodeUpdateStatus",
            Command::AllocUpsert { .. } => "AllocUpsert",
            Command::AllocStop { .. } => "AllocStop",
            Command::DeploymentUpsert { .. } => "DeploymentUpsert",
            Command::PlanApply { .. } => "PlanApply",
            Command::PlanApplyBatch { .. } => "PlanApplyBatch",
            Command::AllocClientUpdate { .. } => "AllocClientUpdate",
            Command::DeploymentStatus { .. } => "DeploymentStatus",
            Command::StateRestore { .. } => "StateRestore",
            Command::DeploymentPromote { .. } => "DeploymentPromote",
            Command::DeploymentAllocHealth { .. } => "DeploymentAllocHealth",
            Command::AllocUpdateDesiredTransition { .. } => "AllocUpdateDesiredTransition",
            Command::NodeUpdateDrain { .. } => "NodeUpdateDrain",
            Command::NodeUpdateEligibility { .. } => "NodeUpdateEligibility",
            Command::CsiVolumeRegister { .. } => "CsiVolumeRegister",
            Command::CsiVolumeDeregister { .. } => "CsiVolumeDeregister",
            Command::CsiVolumeClaim { .. } => "CsiVolumeClaim",
            Command::CsiControllerOpBegin { .. } => "CsiControllerOpBegin",
            Command::CsiControllerOpEnd { .. } => "CsiControllerOpEnd",
            Command::CsiControllerOpRenew { .. } => "CsiControllerOpRenew",
            Command::AclBootstrap { .. } => "AclBootstrap",
            Command::AclPolicyUpsert { .. } => "AclPolicyUpsert",
            Command::AclPolicyDelete { .. } => "AclPolicyDelete",
            Command::AclTokenUpsert { .. } => "AclTokenUpsert",
            Command::AclTokenDelete { .. } => "AclTokenDelete",
            Command::AclRoleUpsert { .. } => "AclRoleUpsert",
            Command::AclRoleDelete { .. } => "AclRoleDelete",
            Command::AclOneTimeTokenUpsert { .. } => "AclOneTimeTokenUpsert",
            Command::AclOneTimeTokenExchange { .. } => "AclOneTimeTokenExchange",
            Command::AclExpire { .. } => "AclExpire",
            Command::NamespaceUpsert { .. } => "NamespaceUpsert",
            Command::NamespaceDelete { .. } => "NamespaceDelete",
            Command::VarApply { .. } => "VarApply",
            Command::RootKeyUpsert { .. } => "RootKeyUpsert",
            Command::RootKeyDelete { .. } => "RootKeyDelete",
            Command::JobStability { .. } => "JobStability",
            Command::AutopilotConfigSet { .. } => "AutopilotConfigSet",
            Command::HostVolumeUpsert { .. } => "HostVolumeUpsert",
            Command::HostVolumeDelete { .. } => "HostVolumeDelete",
            Command::HostVolumeClaimDelete { .. } => "HostVolumeClaimDelete",
            Command::ServiceRegistrationDelete { .. } => "ServiceRegistrationDelete",
            Command::SchedulerConfigSet { .. } => "SchedulerConfigSet",
            Command::JobScale { .. } => "JobScale",
            Command::Gc { .. } => "Gc",
            Command::JobSummariesReconcile => "JobSummariesReconcile",
            Command::NodePoolUpsert { .. } => "NodePoolUpsert",
            Command::NodePurge { .. } => "NodePurge",
            Command::NodePoolDelete { .. } => "NodePoolDelete",
            Command::JobVersionTag { .. } => "JobVersionTag",
        }
    }
}

/// What applying a command produced (the server returns parts of it to API callers).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyResponse {
    /// The Raft index of the command.
    pub index: u64,
    /// The job's version after the command (job commands that leave a job behind).
    pub job_version: Option<u64>,
    /// The job's `JobModifyIndex` after the command; unchanged when a register changed nothing.
    pub job_modify_index: Option<u64>,
    /// The ID of the evaluation the command carried.
    pub eval_id: Option<String>,
    /// The index at which that evaluation was written (the command's index).
    pub eval_create_index: Option<u64>,
    /// `PlanApplyBatch`: each plan's error, in the batch's order (`None`: applied).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch_errors: Vec<Option<String>>,
}
