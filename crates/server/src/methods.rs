//! The servers' own rpc methods: writes a follower forwards to the leader, and the calls servers
//! make to join, bootstrap and manage each other. One type per method with named request and
//! answer types ([`rpc::Method`]); the clients' methods are in `model::wire::methods`. The handler
//! table (`handler.rs`) routes every one of them, and callers name the type, never the string.

use crate::acl::{AclWrite, AclWriteResponse};
use crate::csi::{CsiWrite, CsiWriteResponse};
use crate::endpoints::autopilot::{AutopilotSetConfigRequest, AutopilotSetConfigResponse};
use crate::endpoints::deployment::DeploymentAction;
use crate::endpoints::job::JobRegisterRequest;
use crate::endpoints::plan::JobPlanRequest;
use crate::endpoints::scheduler_config::{SchedulerSetConfigRequest, SchedulerSetConfigResponse};
use crate::join::{JoinRequest, ServerInfo};
use crate::variables::{KeyringWrite, KeyringWriteResponse, VarWrite, VarWriteResponse};
use model::rpc_method;
use model::wire::{
    AllocStopResponse, DeploymentUpdateResponse, JobDeregisterResponse, JobDispatchRequest,
    JobDispatchResponse, JobPlanResponse, JobRegisterResponse, JobRevertRequest,
    NodeUpdateDrainRequest, NodeUpdateEligibilityRequest, NodeWriteResponse, PeriodicForceResponse,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A job named within its namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRef {
    pub namespace: String,
    pub job_id: String,
}

/// `Job.Evaluate`'s request (a `JobRef` as earlier builds sent it still reads: no forcing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobEvaluateArgs {
    pub namespace: String,
    pub job_id: String,
    /// Nomad's `EvalOptions.ForceReschedule`: failed allocations are replaced now.
    #[serde(default)]
    pub force_reschedule: bool,
}

/// `Job.Deregister`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDeregisterArgs {
    pub namespace: String,
    pub job_id: String,
    /// Remove the job from state at once instead of marking it stopped.
    pub purge: bool,
}

/// `Alloc.Stop`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AllocStopArgs {
    pub alloc_id: String,
    pub no_shutdown_delay: bool,
}

/// A request about a job in a namespace (`Job.Revert`, `Job.Dispatch`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InNamespace<T> {
    pub namespace: String,
    pub request: T,
}

/// `Node.Evaluate`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRef {
    pub node_id: String,
}

/// `Server.Remove`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerRemoveArgs {
    pub id: u64,
}

/// `Server.ForceLeave`'s request: the server's raft ID, RPC address or listed name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForceLeaveArgs {
    pub node: String,
    /// Gossip forgets it at once (`-prune`).
    #[serde(default)]
    pub prune: bool,
}

/// `Server.GossipKeyring`'s request: `list`, `install`, `use` or `remove`, and the key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GossipKeyringArgs {
    pub op: String,
    pub key: String,
}

/// `Server.TransferLeadership`'s request: to this server, or (none) to any up-to-date voter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransferLeadershipArgs {
    pub to: Option<u64>,
}

/// `Server.Bootstrap`'s request: the first voters, raft id → rpc address.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootstrapArgs {
    pub members: BTreeMap<u64, String>,
}

/// `Operator.SnapshotRestore`'s request: the snapshot file as it was saved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRestoreArgs {
    #[serde(with = "serde_bytes")]
    pub snapshot: Vec<u8>,
}

rpc_method!(pub JobRegister = "Job.Register": JobRegisterRequest => JobRegisterResponse);
rpc_method!(pub JobPlan = "Job.Plan": JobPlanRequest => JobPlanResponse);
rpc_method!(pub JobDeregister = "Job.Deregister": JobDeregisterArgs => JobDeregisterResponse);
rpc_method!(pub JobEvaluate = "Job.Evaluate": JobEvaluateArgs => JobRegisterResponse);
rpc_method!(pub JobStability = "Job.Stable": JobStabilityArgs => u64);
rpc_method!(pub JobTagVersion = "Job.TagVersion": JobTagArgs => JobTagResponse);

/// `Job.TagVersion`: name a version (`description` set) or remove a name (`None`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobTagArgs {
    pub namespace: String,
    pub job_id: String,
    pub name: String,
    pub version: u64,
    pub latest: bool,
    pub description: Option<String>,
}

/// Nomad's `JobTagResponse`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JobTagResponse {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Description")]
    pub description: String,
    #[serde(rename = "TaggedTime")]
    pub tagged_time: i64,
    #[serde(rename = "Index")]
    pub index: u64,
}

/// `Job.Stable`: one version of a job marked stable or not.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobStabilityArgs {
    pub namespace: String,
    pub job_id: String,
    pub version: u64,
    pub stable: bool,
}
rpc_method!(
    pub JobRevert = "Job.Revert": InNamespace<JobRevertRequest> => JobRegisterResponse
);
rpc_method!(
    pub JobDispatch = "Job.Dispatch": InNamespace<JobDispatchRequest> => JobDispatchResponse
);
rpc_method!(
    /// The job ID and the request.
    pub JobScale = "Job.Scale":
        InNamespace<(String, model::scaling::ScalingRequest)> => JobRegisterResponse
);
rpc_method!(
    pub NodePoolWriteMethod = "NodePool.Write":
        crate::endpoints::node_pool::NodePoolWrite => u64
);
rpc_method!(pub EvalDeleteMethod = "Eval.Delete": Vec<String> => (u64, u64));
rpc_method!(pub SystemGc = "System.GarbageCollect": () => ());
rpc_method!(
    pub SystemReconcileSummaries = "System.ReconcileJobSummaries": () => ()
);
rpc_method!(pub PeriodicForce = "Periodic.Force": JobRef => PeriodicForceResponse);
rpc_method!(pub AllocStop = "Alloc.Stop": AllocStopArgs => AllocStopResponse);
rpc_method!(pub AclWriteMethod = "ACL.Write": AclWrite => AclWriteResponse);
rpc_method!(pub VarWriteMethod = "Variables.Apply": VarWrite => VarWriteResponse);
rpc_method!(
    pub KeyringWriteMethod = "Keyring.Write": KeyringWrite => KeyringWriteResponse
);
rpc_method!(pub CsiWriteMethod = "CSI.Write": CsiWrite => CsiWriteResponse);
rpc_method!(
    pub DeploymentActionMethod = "Deployment.Action": DeploymentAction => DeploymentUpdateResponse
);
rpc_method!(
    pub NodeUpdateDrain = "Node.UpdateDrain": NodeUpdateDrainRequest => NodeWriteResponse
);
rpc_method!(
    pub NodeUpdateEligibility = "Node.UpdateEligibility":
        NodeUpdateEligibilityRequest => NodeWriteResponse
);
rpc_method!(pub NodeEvaluate = "Node.Evaluate": NodeRef => NodeWriteResponse);
rpc_method!(pub NodePurge = "Node.Purge": NodeRef => NodeWriteResponse);
rpc_method!(
    /// What a server says about itself; answers anyone.
    pub ServerInfoMethod = "Server.Info": () => ServerInfo
);
rpc_method!(pub ServerJoin = "Server.Join": JoinRequest => ());
rpc_method!(pub ServerBootstrap = "Server.Bootstrap": BootstrapArgs => ());
rpc_method!(pub ServerRemove = "Server.Remove": ServerRemoveArgs => ());
rpc_method!(
    /// `force-leave`: removes a failed server (on the leader); whether one was removed.
    pub ServerForceLeave = "Server.ForceLeave": ForceLeaveArgs => bool
);
rpc_method!(
    /// The authoritative region's ACL objects, for a region that replicates them.
    pub AclReplicationState = "ACL.ReplicationState":
        crate::replication::ReplicationArgs => crate::replication::ReplicationState
);
rpc_method!(
    /// One gossip keyring operation on the receiving server; its keys after it.
    pub ServerGossipKeyring = "Server.GossipKeyring": GossipKeyringArgs => Vec<String>
);
rpc_method!(
    /// A region's deployment of a multiregion job at a version, for its peer regions' leaders.
    pub DeploymentMultiregionPeek = "Deployment.MultiregionPeek":
        crate::leader::multiregion::PeekArgs => crate::leader::multiregion::PeekReply
);
rpc_method!(
    /// Answers the raft id of the new leader.
    pub ServerTransferLeadership = "Server.TransferLeadership": TransferLeadershipArgs => u64
);
rpc_method!(pub SnapshotRestore = "Operator.SnapshotRestore": SnapshotRestoreArgs => u64);
rpc_method!(
    pub SchedulerSetConfig = "Operator.SchedulerSetConfiguration":
        SchedulerSetConfigRequest => SchedulerSetConfigResponse
);
rpc_method!(
    /// Creates or registers a dynamic host volume (on the leader).
    pub HostVolumeWrite = "HostVolume.Create":
        crate::endpoints::host_volume::HostVolumeWriteRequest
            => model::host_volume::HostVolumeCreateResponse
);
rpc_method!(
    /// Deletes one native service registration (on the leader).
    pub ServiceDeleteMethod = "ServiceRegistration.DeleteByID":
        crate::endpoints::service::ServiceDeleteRequest => u64
);
rpc_method!(
    /// Deletes a sticky host volume claim (on the leader).
    pub HostVolumeClaimDeleteMethod = "TaskGroupHostVolumeClaim.Delete":
        crate::endpoints::host_volume::HostVolumeDeleteRequest => u64
);
rpc_method!(
    /// Deletes a dynamic host volume (on the leader).
    pub HostVolumeDeleteMethod = "HostVolume.Delete":
        crate::endpoints::host_volume::HostVolumeDeleteRequest
            => crate::endpoints::host_volume::HostVolumeDeleteResponse
);
rpc_method!(
    pub AutopilotSetConfig = "Operator.AutopilotSetConfiguration":
        AutopilotSetConfigRequest => AutopilotSetConfigResponse
);
rpc_method!(
    /// The leader's applied index: a follower waits to have applied as much before it serves a
    /// read that is not `?stale` (a read barrier, cheaper than forwarding the read).
    pub ReadIndex = "Status.ReadIndex": () => u64
);
rpc_method!(
    /// The servers' health as the leader sees it.
    pub AutopilotServerHealth = "Operator.ServerHealth":
        () => model::autopilot::OperatorHealthReply
);

/// `Agent.Http` is a client method too (client agents and task templates send it).
pub use model::wire::methods::AgentHttp;
