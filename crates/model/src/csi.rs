//! CSI volumes and plugins: a registered [`CSIVolume`] with its claims and its plugin's health, a
//! [`CSIPlugin`] with the nodes that run its controller and node parts, and [`CSIInfo`], the fingerprint a
//! client reports for each plugin it runs. [`CSIVolume::validate`] checks a volume spec before registration.

use crate::alloc::{AllocListStub, Allocation};
use crate::group::CsiMountOptions;
pub use crate::group::{CSI_ACCESS_MODES, CSI_ATTACHMENT_MODES};
use crate::path::Path;
use crate::validate::ValidationErrors;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;
use std::fmt;

pub const ACCESS_MODE_SINGLE_NODE_READER: &str = "single-node-reader-only";
pub const ACCESS_MODE_SINGLE_NODE_WRITER: &str = "single-node-writer";
pub const ACCESS_MODE_MULTI_NODE_READER: &str = "multi-node-reader-only";
pub const ACCESS_MODE_MULTI_NODE_SINGLE_WRITER: &str = "multi-node-single-writer";
pub const ACCESS_MODE_MULTI_NODE_MULTI_WRITER: &str = "multi-node-multi-writer";
pub const ATTACHMENT_MODE_FILE_SYSTEM: &str = "file-system";
pub const ATTACHMENT_MODE_BLOCK_DEVICE: &str = "block-device";
pub const MAX_VOLUME_ID_LEN: usize = 128;

/// Whether an access mode lets a claim write.
pub fn is_writer_access_mode(mode: &str) -> bool {
    matches!(
        mode,
        ACCESS_MODE_SINGLE_NODE_WRITER
            | ACCESS_MODE_MULTI_NODE_SINGLE_WRITER
            | ACCESS_MODE_MULTI_NODE_MULTI_WRITER
    )
}

/// What a claim is for; an integer on the wire, as in Nomad.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct CSIVolumeClaimMode(pub i32);

impl CSIVolumeClaimMode {
    pub const READ: CSIVolumeClaimMode = CSIVolumeClaimMode(0);
    pub const WRITE: CSIVolumeClaimMode = CSIVolumeClaimMode(1);
    /// A pseudo-claim that only wakes the volume watcher to free claims (used by `volume detach`).
    pub const GC: CSIVolumeClaimMode = CSIVolumeClaimMode(2);
}

impl fmt::Display for CSIVolumeClaimMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::READ => f.write_str("read"),
            Self::WRITE => f.write_str("write"),
            Self::GC => f.write_str("gc"),
            Self(n) => write!(f, "unknown claim mode {n}"),
        }
    }
}

/// Where a claim is in its release; an integer on the wire, as in Nomad.
/// Release runs `Taken → Unpublishing → NodeDetached → ReadyToFree`, and reaching `ReadyToFree` deletes it.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct CSIVolumeClaimState(pub i32);

impl CSIVolumeClaimState {
    /// A live claim.
    pub const TAKEN: CSIVolumeClaimState = CSIVolumeClaimState(0);
    /// Node unpublish and unstage are done (or skipped because the node is gone).
    pub const NODE_DETACHED: CSIVolumeClaimState = CSIVolumeClaimState(1);
    /// Reserved for a controller checkpoint; never written.
    pub const CONTROLLER_DETACHED: CSIVolumeClaimState = CSIVolumeClaimState(2);
    /// Controller work is done or not needed; writing this state deletes the claim.
    pub const READY_TO_FREE: CSIVolumeClaimState = CSIVolumeClaimState(3);
    /// Released by the client or by GC; teardown pending.
    pub const UNPUBLISHING: CSIVolumeClaimState = CSIVolumeClaimState(4);
}

impl fmt::Display for CSIVolumeClaimState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::TAKEN => f.write_str("taken"),
            Self::NODE_DETACHED => f.write_str("node-detached"),
            Self::CONTROLLER_DETACHED => f.write_str("controller-detached"),
            Self::READY_TO_FREE => f.write_str("ready-to-free"),
            Self::UNPUBLISHING => f.write_str("unpublishing"),
            Self(n) => write!(f, "unknown claim state {n}"),
        }
    }
}

/// Where a volume (or a node plugin) is reachable: `{"zone": "us-east-1a"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSITopology {
    #[serde(rename = "Segments")]
    pub segments: BTreeMap<String, String>,
}

/// The topologies a volume create asks for (`topology_request`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSITopologyRequest {
    #[serde(rename = "Required")]
    pub required: Vec<CSITopology>,
    #[serde(rename = "Preferred")]
    pub preferred: Vec<CSITopology>,
}

/// One `capability { access_mode, attachment_mode }` block of a volume spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSIVolumeCapability {
    #[serde(rename = "AccessMode")]
    pub access_mode: String,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: String,
}

/// An allocation's claim on a volume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSIVolumeClaim {
    #[serde(rename = "AllocationID")]
    pub allocation_id: String,
    #[serde(rename = "NodeID")]
    pub node_id: String,
    /// The storage provider's ID for the node (e.g. an EC2 instance ID).
    #[serde(rename = "ExternalNodeID")]
    pub external_node_id: String,
    #[serde(rename = "Mode")]
    pub mode: CSIVolumeClaimMode,
    #[serde(rename = "AccessMode")]
    pub access_mode: String,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: String,
    #[serde(rename = "State")]
    pub state: CSIVolumeClaimState,
    /// Caravan: why a release is stuck at this step (the node could not unpublish, the
    /// controller could not detach), for `volume status`; empty while all is well.
    #[serde(rename = "LastError", skip_serializing_if = "String::is_empty")]
    pub last_error: String,
}

/// A registered CSI volume. The plugin-health fields are filled when the volume is read.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSIVolume {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Name")]
    pub name: String,
    /// The provider's ID for the volume; [`CSIVolume::remote_id`] falls back to `ID`.
    #[serde(rename = "ExternalID")]
    pub external_id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Topologies")]
    pub topologies: Vec<CSITopology>,
    #[serde(rename = "RequestedTopologies")]
    pub requested_topologies: Option<CSITopologyRequest>,
    /// The mode of the current claims; empty when there are none.
    #[serde(rename = "AccessMode")]
    pub access_mode: String,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: String,
    #[serde(rename = "MountOptions")]
    pub mount_options: Option<CsiMountOptions>,
    #[serde(rename = "Secrets")]
    pub secrets: BTreeMap<String, String>,
    #[serde(rename = "Parameters")]
    pub parameters: BTreeMap<String, String>,
    #[serde(rename = "Context")]
    pub context: BTreeMap<String, String>,
    /// Bytes.
    #[serde(rename = "Capacity")]
    pub capacity: i64,
    #[serde(rename = "RequestedCapacityMin")]
    pub requested_capacity_min: i64,
    #[serde(rename = "RequestedCapacityMax")]
    pub requested_capacity_max: i64,
    #[serde(rename = "RequestedCapabilities")]
    pub requested_capabilities: Vec<CSIVolumeCapability>,
    #[serde(rename = "CloneID")]
    pub clone_id: String,
    #[serde(rename = "SnapshotID")]
    pub snapshot_id: String,
    /// Alloc ID → the allocation (null when it has been garbage-collected).
    #[serde(rename = "ReadAllocs")]
    pub read_allocs: BTreeMap<String, Option<Allocation>>,
    #[serde(rename = "WriteAllocs")]
    pub write_allocs: BTreeMap<String, Option<Allocation>>,
    #[serde(rename = "ReadClaims")]
    pub read_claims: BTreeMap<String, CSIVolumeClaim>,
    #[serde(rename = "WriteClaims")]
    pub write_claims: BTreeMap<String, CSIVolumeClaim>,
    /// Released claims whose teardown is not finished.
    #[serde(rename = "PastClaims")]
    pub past_claims: BTreeMap<String, CSIVolumeClaim>,
    /// `NodesHealthy > 0` and, if a controller is required, `ControllersHealthy > 0`.
    #[serde(rename = "Schedulable")]
    pub schedulable: bool,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "Provider")]
    pub provider: String,
    #[serde(rename = "ProviderVersion")]
    pub provider_version: String,
    #[serde(rename = "ControllerRequired")]
    pub controller_required: bool,
    #[serde(rename = "ControllersHealthy")]
    pub controllers_healthy: i64,
    #[serde(rename = "ControllersExpected")]
    pub controllers_expected: i64,
    #[serde(rename = "NodesHealthy")]
    pub nodes_healthy: i64,
    #[serde(rename = "NodesExpected")]
    pub nodes_expected: i64,
    /// RFC 3339: when the provider last reported the volume's resources exhausted.
    #[serde(rename = "ResourceExhausted")]
    pub resource_exhausted: Option<String>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// A volume as `GET /v1/volumes?type=csi` lists it.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSIVolumeListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "ExternalID")]
    pub external_id: String,
    #[serde(rename = "Topologies")]
    pub topologies: Vec<CSITopology>,
    #[serde(rename = "AccessMode")]
    pub access_mode: String,
    #[serde(rename = "AttachmentMode")]
    pub attachment_mode: String,
    #[serde(rename = "CurrentReaders")]
    pub current_readers: i64,
    #[serde(rename = "CurrentWriters")]
    pub current_writers: i64,
    #[serde(rename = "Schedulable")]
    pub schedulable: bool,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "Provider")]
    pub provider: String,
    #[serde(rename = "ControllerRequired")]
    pub controller_required: bool,
    #[serde(rename = "ControllersHealthy")]
    pub controllers_healthy: i64,
    #[serde(rename = "ControllersExpected")]
    pub controllers_expected: i64,
    #[serde(rename = "NodesHealthy")]
    pub nodes_healthy: i64,
    #[serde(rename = "NodesExpected")]
    pub nodes_expected: i64,
    #[serde(rename = "ResourceExhausted")]
    pub resource_exhausted: Option<String>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// A CSI plugin: the nodes running its controller and node parts, and how many are healthy.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSIPlugin {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Provider")]
    pub provider: String,
    #[serde(rename = "Version")]
    pub version: String,
    #[serde(rename = "ControllerRequired")]
    pub controller_required: bool,
    /// Node ID → the controller fingerprint there.
    #[serde(rename = "Controllers")]
    pub controllers: BTreeMap<String, CSIInfo>,
    /// Node ID → the node-plugin fingerprint there.
    #[serde(rename = "Nodes")]
    pub nodes: BTreeMap<String, CSIInfo>,
    /// Namespace → job ID → the jobs that run the controller, with how many instances they expect.
    #[serde(rename = "ControllerJobs")]
    pub controller_jobs: BTreeMap<String, BTreeMap<String, CSIJobDescription>>,
    #[serde(rename = "NodeJobs")]
    pub node_jobs: BTreeMap<String, BTreeMap<String, CSIJobDescription>>,
    #[serde(rename = "Allocations")]
    pub allocations: Vec<AllocListStub>,
    #[serde(rename = "ControllersHealthy")]
    pub controllers_healthy: i64,
    #[serde(rename = "ControllersExpected")]
    pub controllers_expected: i64,
    #[serde(rename = "NodesHealthy")]
    pub nodes_healthy: i64,
    #[serde(rename = "NodesExpected")]
    pub nodes_expected: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// A job that runs part of a plugin, and the instance count it expects.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSIJobDescription {
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Version")]
    pub version: u64,
    #[serde(rename = "Expected")]
    pub expected: i64,
}

/// A destructive controller call recorded in Raft before it is sent and cleared after it returns
/// (Caravan's serializer; Nomad keeps this in one server's memory). At most one is in flight per
/// plugin in the whole cluster; a new leader finds it here and resolves it before sending another.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSIControllerOp {
    /// Unique per call (a UUID), so the end of an old call never clears a newer one.
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    /// The CSI method: `ControllerPublishVolume`, `ControllerUnpublishVolume`, `CreateVolume`,
    /// `DeleteVolume`, `CreateSnapshot`, `DeleteSnapshot` or `ControllerExpandVolume`.
    #[serde(rename = "Method")]
    pub method: String,
    /// The node whose controller instance the call was sent to.
    #[serde(rename = "ControllerNodeID")]
    pub controller_node_id: String,
    #[serde(rename = "Namespace")]
    pub namespace: String,
    #[serde(rename = "VolumeID")]
    pub volume_id: String,
    /// What the call needs to be sent again (idempotently) or undone: the request without secrets.
    #[serde(rename = "Request")]
    pub request: serde_json::Value,
    /// Unix nanoseconds.
    #[serde(rename = "StartedAt")]
    pub started_at: i64,
    /// Unix nanoseconds: after this the call is treated as timed out and resolved before the next.
    #[serde(rename = "Deadline")]
    pub deadline: i64,
    /// The Raft index that recorded it.
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    /// The Raft index of its last change (a renewal or a takeover): a takeover or renewal must
    /// name it, so a change made from a stale read is refused.
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
    /// The server (raft node ID) that may send this call now, and the term it led in when it
    /// took the record: only that server, in that term, sends, renews or clears it.
    #[serde(rename = "Owner")]
    pub owner: u64,
    #[serde(rename = "Term")]
    pub term: u64,
    /// Sends of this call so far (the first included).
    #[serde(rename = "Attempts")]
    pub attempts: u32,
    /// Whether an earlier send may have reached the plugin without a definite answer (a lost
    /// reply, `DEADLINE_EXCEEDED`): then the call may still run at the provider, and nothing
    /// else goes to the plugin until a send of this same call gets a definite answer.
    #[serde(rename = "Unresolved")]
    pub unresolved: bool,
    /// Why the last send did not settle it, for `volume status` and the logs.
    #[serde(rename = "LastError")]
    pub last_error: String,
    /// What a resend needs besides the request: for `CreateVolume`, the volume to register with
    /// the plugin's reply (so a resent create never leaves an orphan volume).
    #[serde(rename = "Context")]
    pub context: serde_json::Value,
}

/// A plugin as `GET /v1/plugins?type=csi` lists it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSIPluginListStub {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Provider")]
    pub provider: String,
    #[serde(rename = "ControllerRequired")]
    pub controller_required: bool,
    #[serde(rename = "ControllersHealthy")]
    pub controllers_healthy: i64,
    #[serde(rename = "ControllersExpected")]
    pub controllers_expected: i64,
    #[serde(rename = "NodesHealthy")]
    pub nodes_healthy: i64,
    #[serde(rename = "NodesExpected")]
    pub nodes_expected: i64,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// A client's fingerprint of one plugin it runs: health, capabilities, and the controller or node part.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSIInfo {
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "AllocID")]
    pub alloc_id: String,
    #[serde(rename = "Healthy")]
    pub healthy: bool,
    #[serde(rename = "HealthDescription")]
    pub health_description: String,
    /// RFC 3339.
    #[serde(rename = "UpdateTime")]
    pub update_time: Option<String>,
    #[serde(rename = "Provider")]
    pub provider: String,
    #[serde(rename = "ProviderVersion")]
    pub provider_version: String,
    #[serde(rename = "RequiresControllerPlugin")]
    pub requires_controller_plugin: bool,
    #[serde(rename = "RequiresTopologies")]
    pub requires_topologies: bool,
    /// Set when this is a controller fingerprint.
    #[serde(rename = "ControllerInfo")]
    pub controller_info: Option<CSIControllerInfo>,
    /// Set when this is a node fingerprint.
    #[serde(rename = "NodeInfo")]
    pub node_info: Option<CSINodeInfo>,
}

/// The controller capabilities a plugin reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSIControllerInfo {
    #[serde(rename = "SupportsCreateDelete")]
    pub supports_create_delete: bool,
    #[serde(rename = "SupportsAttachDetach")]
    pub supports_attach_detach: bool,
    #[serde(rename = "SupportsListVolumes")]
    pub supports_list_volumes: bool,
    #[serde(rename = "SupportsGetCapacity")]
    pub supports_get_capacity: bool,
    #[serde(rename = "SupportsCreateDeleteSnapshot")]
    pub supports_create_delete_snapshot: bool,
    #[serde(rename = "SupportsListSnapshots")]
    pub supports_list_snapshots: bool,
    #[serde(rename = "SupportsClone")]
    pub supports_clone: bool,
    #[serde(rename = "SupportsReadOnlyAttach")]
    pub supports_read_only_attach: bool,
    #[serde(rename = "SupportsExpand")]
    pub supports_expand: bool,
    #[serde(rename = "SupportsListVolumesAttachedNodes")]
    pub supports_list_volumes_attached_nodes: bool,
    #[serde(rename = "SupportsCondition")]
    pub supports_condition: bool,
    #[serde(rename = "SupportsGet")]
    pub supports_get: bool,
}

/// What a node plugin reported about the node.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CSINodeInfo {
    /// The provider's ID for this node: the external node ID of claims made here.
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "MaxVolumes")]
    pub max_volumes: i64,
    #[serde(rename = "AccessibleTopology")]
    pub accessible_topology: Option<CSITopology>,
    #[serde(rename = "RequiresNodeStageVolume")]
    pub requires_node_stage_volume: bool,
    #[serde(rename = "SupportsStats")]
    pub supports_stats: bool,
    #[serde(rename = "SupportsExpand")]
    pub supports_expand: bool,
    #[serde(rename = "SupportsCondition")]
    pub supports_condition: bool,
}

impl CSIInfo {
    pub fn is_controller(&self) -> bool {
        self.controller_info.is_some()
    }

    pub fn is_node(&self) -> bool {
        self.node_info.is_some()
    }
}

impl CSIVolume {
    /// The ID the storage provider knows the volume by.
    pub fn remote_id(&self) -> &str {
        if self.external_id.is_empty() {
            &self.id
        } else {
            &self.external_id
        }
    }

    /// Whether any allocation holds a read or write claim.
    pub fn in_use(&self) -> bool {
        !self.read_claims.is_empty() || !self.write_claims.is_empty()
    }

    /// The volume as `GET /v1/volumes?type=csi` lists it.
    pub fn stub(&self) -> CSIVolumeListStub {
        CSIVolumeListStub {
            id: self.id.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            external_id: self.external_id.clone(),
            topologies: self.topologies.clone(),
            access_mode: self.access_mode.clone(),
            attachment_mode: self.attachment_mode.clone(),
            current_readers: count(self.read_claims.len()),
            current_writers: count(self.write_claims.len()),
            schedulable: self.schedulable,
            plugin_id: self.plugin_id.clone(),
            provider: self.provider.clone(),
            controller_required: self.controller_required,
            controllers_healthy: self.controllers_healthy,
            controllers_expected: self.controllers_expected,
            nodes_healthy: self.nodes_healthy,
            nodes_expected: self.nodes_expected,
            resource_exhausted: self.resource_exhausted.clone(),
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }

    /// Checks a volume spec before registration and returns every problem found. Paths use the volume
    /// spec's names (`capability[0].access_mode`).
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = ValidationErrors::new();
        let root = Path::root();
        self.validate_identity(&root, &mut errs);
        errs.check(
            self.snapshot_id.is_empty() || self.clone_id.is_empty(),
            &root.field("snapshot_id"),
            "only one of snapshot_id and clone_id is allowed",
        );
        self.validate_capacity(&root, &mut errs);
        self.validate_capabilities(&root, &mut errs);
        if let Some(req) = &self.requested_topologies {
            let tp = root.field("topology_request");
            for (kind, list) in [("required", &req.required), ("preferred", &req.preferred)] {
                for (i, t) in list.iter().enumerate() {
                    errs.check(
                        !t.segments.is_empty(),
                        &tp.field(kind).field("topology").index(i).field("segments"),
                        "a topology needs at least one segment",
                    );
                }
            }
        }
        errs.into_result()
    }

    fn validate_identity(&self, root: &Path, errs: &mut ValidationErrors) {
        if self.id.is_empty() {
            errs.add(&root.field("id"), "volume ID is required");
        } else {
            errs.check(
                self.id.len() <= MAX_VOLUME_ID_LEN,
                &root.field("id"),
                format!("volume ID is longer than {MAX_VOLUME_ID_LEN} characters"),
            );
            errs.check(
                !self.id.contains(|c: char| c.is_whitespace() || c == '\0'),
                &root.field("id"),
                format!(
                    "volume ID {:?} cannot contain spaces or null characters",
                    self.id
                ),
            );
        }
        errs.check(
            !self.plugin_id.is_empty(),
            &root.field("plugin_id"),
            "plugin ID is required",
        );
    }

    fn validate_capacity(&self, root: &Path, errs: &mut ValidationErrors) {
        let (min, max) = (self.requested_capacity_min, self.requested_capacity_max);
        errs.check(
            min >= 0,
            &root.field("capacity_min"),
            format!("capacity_min cannot be negative, got {min}"),
        );
        errs.check(
            max >= 0,
            &root.field("capacity_max"),
            format!("capacity_max cannot be negative, got {max}"),
        );
        errs.check(
            max == 0 || min <= max,
            &root.field("capacity_max"),
            format!("capacity_max ({max}) must not be less than capacity_min ({min})"),
        );
    }

    fn validate_capabilities(&self, root: &Path, errs: &mut ValidationErrors) {
        errs.check(
            !self.requested_capabilities.is_empty(),
            &root.field("capability"),
            "a volume needs at least one capability block",
        );
        for (i, cap) in self.requested_capabilities.iter().enumerate() {
            let cp = root.field("capability").index(i);
            let am = cap.access_mode.as_str();
            errs.check(
                CSI_ACCESS_MODES.contains(&am),
                &cp.field("access_mode"),
                format!(
                    "access_mode must be one of {}, got {am:?}",
                    CSI_ACCESS_MODES.join(", ")
                ),
            );
            let at = cap.attachment_mode.as_str();
            errs.check(
                CSI_ATTACHMENT_MODES.contains(&at),
                &cp.field("attachment_mode"),
                format!(
                    "attachment_mode must be one of {}, got {at:?}",
                    CSI_ATTACHMENT_MODES.join(", ")
                ),
            );
            errs.check(
                !(at == ATTACHMENT_MODE_BLOCK_DEVICE && self.mount_options.is_some()),
                &root.field("mount_options"),
                "mount_options cannot be used with a block-device capability",
            );
        }
    }
}

impl CSIPlugin {
    /// The plugin as `GET /v1/plugins?type=csi` lists it.
    pub fn stub(&self) -> CSIPluginListStub {
        CSIPluginListStub {
            id: self.id.clone(),
            provider: self.provider.clone(),
            controller_required: self.controller_required,
            controllers_healthy: self.controllers_healthy,
            controllers_expected: self.controllers_expected,
            nodes_healthy: self.nodes_healthy,
            nodes_expected: self.nodes_expected,
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{assert_decodes_lowercased, assert_round_trip};

    impl CSIVolume {
        /// A registered, claimed volume with every block filled in.
        pub(crate) fn example() -> CSIVolume {
            let claim = |alloc: &str, mode| CSIVolumeClaim {
                allocation_id: alloc.into(),
                node_id: "5b2d1c1e-8d3f-4f7a-9f3c-2a1b0c9d8e7f".into(),
                external_node_id: "i-0abc".into(),
                mode,
                access_mode: ACCESS_MODE_SINGLE_NODE_WRITER.into(),
                attachment_mode: ATTACHMENT_MODE_FILE_SYSTEM.into(),
                state: CSIVolumeClaimState::TAKEN,
                last_error: String::new(),
            };
            let zone = CSITopology {
                segments: [("zone".to_string(), "us-east-1a".to_string())].into(),
            };
            let mut past = claim("a-old", CSIVolumeClaimMode::WRITE);
            past.state = CSIVolumeClaimState::UNPUBLISHING;
            CSIVolume {
                id: "db[0]".into(),
                name: "db".into(),
                external_id: "vol-0123".into(),
                namespace: "default".into(),
                topologies: vec![zone.clone()],
                requested_topologies: Some(CSITopologyRequest {
                    required: vec![zone],
                    preferred: Vec::new(),
                }),
                access_mode: ACCESS_MODE_SINGLE_NODE_WRITER.into(),
                attachment_mode: ATTACHMENT_MODE_FILE_SYSTEM.into(),
                mount_options: Some(CsiMountOptions {
                    fs_type: "ext4".into(),
                    mount_flags: vec!["noatime".into()],
                }),
                secrets: [("token".to_string(), "s3cr3t".to_string())].into(),
                parameters: [("type".to_string(), "gp3".to_string())].into(),
                context: [("iops".to_string(), "3000".to_string())].into(),
                capacity: 10 << 30,
                requested_capacity_min: 10 << 30,
                requested_capacity_max: 20 << 30,
                requested_capabilities: vec![CSIVolumeCapability {
                    access_mode: ACCESS_MODE_SINGLE_NODE_WRITER.into(),
                    attachment_mode: ATTACHMENT_MODE_FILE_SYSTEM.into(),
                }],
                clone_id: "".into(),
                snapshot_id: "snap-1".into(),
                read_allocs: BTreeMap::new(),
                write_allocs: [
                    ("a-live".to_string(), Some(Allocation::example())),
                    ("a-gone".to_string(), None),
                ]
                .into(),
                read_claims: BTreeMap::new(),
                write_claims: [(
                    "a-live".to_string(),
                    claim("a-live", CSIVolumeClaimMode::WRITE),
                )]
                .into(),
                past_claims: [("a-old".to_string(), past)].into(),
                schedulable: true,
                plugin_id: "ebs".into(),
                provider: "ebs.csi.aws.com".into(),
                provider_version: "1.2.0".into(),
                controller_required: true,
                controllers_healthy: 1,
                controllers_expected: 1,
                nodes_healthy: 3,
                nodes_expected: 3,
                resource_exhausted: None,
                create_index: 7,
                modify_index: 9,
            }
        }
    }

    fn example_plugin() -> CSIPlugin {
        let node = crate::node::Node::example();
        let job = CSIJobDescription {
            namespace: "default".into(),
            id: "ebs-nodes".into(),
            version: 2,
            expected: 3,
        };
        CSIPlugin {
            id: "ebs".into(),
            provider: "ebs.csi.aws.com".into(),
            version: "1.2.0".into(),
            controller_required: true,
            controllers: [(node.id.clone(), node.csi_controller_plugins["ebs"].clone())].into(),
            nodes: [(node.id.clone(), node.csi_node_plugins["ebs"].clone())].into(),
            controller_jobs: BTreeMap::new(),
            node_jobs: [(
                "default".to_string(),
                [("ebs-nodes".to_string(), job)].into(),
            )]
            .into(),
            allocations: vec![AllocListStub::example()],
            controllers_healthy: 1,
            controllers_expected: 1,
            nodes_healthy: 1,
            nodes_expected: 3,
            create_index: 3,
            modify_index: 11,
        }
    }

    fn errors_of(v: &CSIVolume) -> Vec<String> {
        match v.validate() {
            Ok(()) => Vec::new(),
            Err(e) => e.errors.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn volume_round_trips() {
        let v = CSIVolume::example();
        let text = assert_round_trip(&v);
        assert!(text.contains(r#""a-gone":null"#), "{text}");
        assert!(text.contains(r#""Mode":1,"#), "{text}");
        assert!(text.contains(r#""State":4"#), "{text}");
        assert_decodes_lowercased(&v);
    }

    #[test]
    fn volume_stub_counts_claims() {
        let stub = CSIVolume::example().stub();
        assert_eq!((stub.current_readers, stub.current_writers), (0, 1));
        assert_round_trip(&stub);
        assert_decodes_lowercased(&stub);
    }

    #[test]
    fn plugin_round_trips() {
        let p = example_plugin();
        let text = assert_round_trip(&p);
        assert!(text.contains(r#""SupportsAttachDetach":true"#), "{text}");
        assert!(text.contains(r#""AccessibleTopology":{"Segments":{"zone":"us-east-1a"}}"#));
        assert_decodes_lowercased(&p);
        assert_round_trip(&p.stub());
        assert!(p.controllers.values().all(CSIInfo::is_controller));
        assert!(p.nodes.values().all(CSIInfo::is_node));
    }

    #[test]
    fn named_modes_are_the_ones_validation_accepts() {
        for m in [
            ACCESS_MODE_SINGLE_NODE_READER,
            ACCESS_MODE_SINGLE_NODE_WRITER,
            ACCESS_MODE_MULTI_NODE_READER,
            ACCESS_MODE_MULTI_NODE_SINGLE_WRITER,
            ACCESS_MODE_MULTI_NODE_MULTI_WRITER,
        ] {
            assert!(CSI_ACCESS_MODES.contains(&m), "{m}");
        }
        assert_eq!(
            CSI_ATTACHMENT_MODES,
            [ATTACHMENT_MODE_FILE_SYSTEM, ATTACHMENT_MODE_BLOCK_DEVICE]
        );
        let writers: Vec<_> = CSI_ACCESS_MODES
            .iter()
            .filter(|m| is_writer_access_mode(m))
            .collect();
        assert_eq!(writers.len(), 3);
        assert_eq!(
            CSIVolumeClaimState::READY_TO_FREE.to_string(),
            "ready-to-free"
        );
        assert_eq!(CSIVolumeClaimMode::GC.to_string(), "gc");
    }

    #[test]
    fn a_complete_volume_is_valid() {
        assert_eq!(errors_of(&CSIVolume::example()), Vec::<String>::new());
        let v = CSIVolume::example();
        assert_eq!(v.remote_id(), "vol-0123");
        assert!(v.in_use());
    }

    #[test]
    fn validation_reports_every_problem_at_its_path() {
        assert_eq!(
            errors_of(&CSIVolume::default()),
            vec![
                "id: volume ID is required",
                "plugin_id: plugin ID is required",
                "capability: a volume needs at least one capability block",
            ]
        );
        let mut v = CSIVolume::example();
        v.id = "my vol".into();
        v.clone_id = "vol-9".into();
        v.requested_capacity_min = 30 << 30;
        v.requested_capabilities = vec![
            CSIVolumeCapability {
                access_mode: "single-node".into(),
                attachment_mode: ATTACHMENT_MODE_FILE_SYSTEM.into(),
            },
            CSIVolumeCapability {
                access_mode: ACCESS_MODE_MULTI_NODE_READER.into(),
                attachment_mode: ATTACHMENT_MODE_BLOCK_DEVICE.into(),
            },
        ];
        v.requested_topologies = Some(CSITopologyRequest {
            required: Vec::new(),
            preferred: vec![CSITopology::default()],
        });
        let errs = errors_of(&v);
        assert_eq!(errs.len(), 6, "{errs:#?}");
        assert!(errs[0].starts_with("id: volume ID \"my vol\" cannot contain spaces"));
        assert_eq!(
            errs[1],
            "snapshot_id: only one of snapshot_id and clone_id is allowed"
        );
        assert!(errs[2].starts_with("capacity_max: capacity_max (21474836480) must not be less"));
        assert!(errs[3].starts_with("capability[0].access_mode: access_mode must be one of"));
        assert_eq!(
            errs[4],
            "mount_options: mount_options cannot be used with a block-device capability"
        );
        assert_eq!(
            errs[5],
            "topology_request.preferred.topology[0].segments: a topology needs at least one segment"
        );
    }
}
