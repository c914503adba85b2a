//! Controller calls that servers ask a client agent to make ([`model::wire::CsiControllerCall`]):
//! Nomad's names and modes in, CSI's gRPC messages out, and the answer back in the wire shape.

use crate::client::PluginClient;
use crate::error::CsiError;
use crate::v1;
use crate::v1::volume_capability::access_mode::Mode;
use model::csi::CSITopology;
use model::wire::{
    CsiCapability, CsiControllerCall, CsiControllerReply, CsiExternalVolume, CsiSnapshot,
};
use std::collections::{BTreeMap, HashMap};
use tonic::Code;

/// Nomad's access mode name as CSI's enum (`Unknown` for anything else).
pub fn access_mode(mode: &str) -> Mode {
    match mode {
        "single-node-reader-only" => Mode::SingleNodeReaderOnly,
        "single-node-writer" => Mode::SingleNodeWriter,
        "multi-node-reader-only" => Mode::MultiNodeReaderOnly,
        "multi-node-single-writer" => Mode::MultiNodeSingleWriter,
        "multi-node-multi-writer" => Mode::MultiNodeMultiWriter,
        _ => Mode::Unknown,
    }
}

/// A capability in CSI's shape: `block-device` is a block volume, anything else a mount.
pub fn capability(cap: &CsiCapability) -> Result<v1::VolumeCapability, CsiError> {
    let mode = access_mode(&cap.access_mode);
    if mode == Mode::Unknown {
        return Err(CsiError::new(
            Code::InvalidArgument,
            format!(
                "unknown access mode {:?}: use single-node-reader-only, single-node-writer, multi-node-reader-only, multi-node-single-writer or multi-node-multi-writer",
                cap.access_mode
            ),
        ));
    }
    let access_type = if cap.attachment_mode == "block-device" {
        v1::volume_capability::AccessType::Block(v1::volume_capability::BlockVolume {})
    } else {
        v1::volume_capability::AccessType::Mount(v1::volume_capability::MountVolume {
            fs_type: cap.fs_type.clone(),
            mount_flags: cap.mount_flags.clone(),
            ..Default::default()
        })
    };
    Ok(v1::VolumeCapability {
        access_mode: Some(v1::volume_capability::AccessMode { mode: mode as i32 }),
        access_type: Some(access_type),
    })
}

fn hash(m: &BTreeMap<String, String>) -> HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn tree(m: HashMap<String, String>) -> BTreeMap<String, String> {
    m.into_iter().collect()
}

fn capabilities(caps: &[CsiCapability]) -> Result<Vec<v1::VolumeCapability>, CsiError> {
    caps.iter().map(capability).collect()
}

/// Makes `call` to the plugin and answers in the wire shape.
pub async fn dispatch(
    client: &PluginClient,
    call: CsiControllerCall,
) -> Result<CsiControllerReply, CsiError> {
    let mut reply = CsiControllerReply::default();
    match call {
        CsiControllerCall::ControllerPublishVolume {
            volume_id,
            node_id,
            capability: cap,
            read_only,
            secrets,
            volume_context,
        } => {
            let r = client
                .controller_publish_volume(v1::ControllerPublishVolumeRequest {
                    volume_id,
                    node_id,
                    volume_capability: Some(capability(&cap)?),
                    readonly: read_only,
                    secrets: hash(&secrets),
                    volume_context: hash(&volume_context),
                })
                .await?;
            reply.publish_context = tree(r.publish_context);
        }
        CsiControllerCall::ControllerUnpublishVolume {
            volume_id,
            node_id,
            secrets,
        } => {
            client
                .controller_unpublish_volume(v1::ControllerUnpublishVolumeRequest {
                    volume_id,
                    node_id,
                    secrets: hash(&secrets),
                })
                .await?;
        }
        CsiControllerCall::CreateVolume {
            name,
            capacity_min,
            capacity_max,
            capabilities: caps,
            parameters,
            secrets,
            snapshot_id,
            clone_id,
        } => {
            let source = if !snapshot_id.is_empty() {
                Some(v1::VolumeContentSource {
                    r#type: Some(v1::volume_content_source::Type::Snapshot(
                        v1::volume_content_source::SnapshotSource { snapshot_id },
                    )),
                })
            } else if !clone_id.is_empty() {
                Some(v1::VolumeContentSource {
                    r#type: Some(v1::volume_content_source::Type::Volume(
                        v1::volume_content_source::VolumeSource {
                            volume_id: clone_id,
                        },
                    )),
                })
            } else {
                None
            };
            let r = client
                .create_volume(v1::CreateVolumeRequest {
                    name,
                    capacity_range: (capacity_min > 0 || capacity_max > 0).then_some(
                        v1::CapacityRange {
                            required_bytes: capacity_min,
                            limit_bytes: capacity_max,
                        },
                    ),
                    volume_capabilities: capabilities(&caps)?,
                    parameters: hash(&parameters),
                    secrets: hash(&secrets),
                    volume_content_source: source,
                    ..Default::default()
                })
                .await?;
            let v = r.volume.unwrap_or_default();
            reply.external_id = v.volume_id;
            reply.capacity = v.capacity_bytes;
            reply.volume_context = tree(v.volume_context);
            reply.topologies = v
                .accessible_topology
                .into_iter()
                .map(|t| CSITopology {
                    segments: tree(t.segments),
                })
                .collect();
        }
        CsiControllerCall::DeleteVolume { volume_id, secrets } => {
            client
                .delete_volume(v1::DeleteVolumeRequest {
                    volume_id,
                    secrets: hash(&secrets),
                })
                .await?;
        }
        CsiControllerCall::ValidateVolumeCapabilities {
            volume_id,
            capabilities: caps,
            volume_context,
            parameters,
            secrets,
        } => {
            let r = client
                .validate_volume_capabilities(v1::ValidateVolumeCapabilitiesRequest {
                    volume_id,
                    volume_context: hash(&volume_context),
                    volume_capabilities: capabilities(&caps)?,
                    parameters: hash(&parameters),
                    secrets: hash(&secrets),
                    ..Default::default()
                })
                .await?;
            reply.confirmed = r.confirmed.is_some();
            reply.message = r.message;
        }
        CsiControllerCall::CreateSnapshot {
            source_volume_id,
            name,
            parameters,
            secrets,
        } => {
            let r = client
                .create_snapshot(v1::CreateSnapshotRequest {
                    source_volume_id,
                    name,
                    secrets: hash(&secrets),
                    parameters: hash(&parameters),
                })
                .await?;
            reply.snapshots = r.snapshot.into_iter().map(snapshot).collect();
        }
        CsiControllerCall::DeleteSnapshot {
            snapshot_id,
            secrets,
        } => {
            client
                .delete_snapshot(v1::DeleteSnapshotRequest {
                    snapshot_id,
                    secrets: hash(&secrets),
                })
                .await?;
        }
        CsiControllerCall::ListSnapshots {
            max_entries,
            starting_token,
            secrets,
        } => {
            let r = client
                .list_snapshots(v1::ListSnapshotsRequest {
                    max_entries,
                    starting_token,
                    secrets: hash(&secrets),
                    ..Default::default()
                })
                .await?;
            reply.snapshots = r
                .entries
                .into_iter()
                .filter_map(|e| e.snapshot)
                .map(snapshot)
                .collect();
            reply.next_token = r.next_token;
        }
        CsiControllerCall::ListVolumes {
            max_entries,
            starting_token,
        } => {
            let r = client
                .list_volumes(v1::ListVolumesRequest {
                    max_entries,
                    starting_token,
                })
                .await?;
            reply.volumes = r
                .entries
                .into_iter()
                .map(|e| {
                    let v = e.volume.unwrap_or_default();
                    CsiExternalVolume {
                        external_id: v.volume_id,
                        capacity_bytes: v.capacity_bytes,
                        volume_context: tree(v.volume_context),
                        published_external_node_ids: e
                            .status
                            .map(|s| s.published_node_ids)
                            .unwrap_or_default(),
                    }
                })
                .collect();
            reply.next_token = r.next_token;
        }
        CsiControllerCall::ControllerExpandVolume {
            volume_id,
            capacity_min,
            capacity_max,
            capability: cap,
            secrets,
        } => {
            let r = client
                .controller_expand_volume(v1::ControllerExpandVolumeRequest {
                    volume_id,
                    capacity_range: Some(v1::CapacityRange {
                        required_bytes: capacity_min,
                        limit_bytes: capacity_max,
                    }),
                    secrets: hash(&secrets),
                    volume_capability: cap.as_ref().map(capability).transpose()?,
                })
                .await?;
            reply.capacity = r.capacity_bytes;
            reply.node_expansion_required = r.node_expansion_required;
        }
    }
    Ok(reply)
}

fn snapshot(s: v1::Snapshot) -> CsiSnapshot {
    CsiSnapshot {
        id: s.snapshot_id,
        external_source_volume_id: s.source_volume_id,
        size_bytes: s.size_bytes,
        create_time: s.creation_time.map(|t| t.seconds).unwrap_or(0),
        is_ready: s.ready_to_use,
        ..CsiSnapshot::default()
    }
}

/// A call's error in the wire shape.
pub fn wire_error(e: &CsiError) -> model::wire::CsiCallError {
    model::wire::CsiCallError {
        code: e.code() as i32,
        message: e.message().to_string(),
    }
}

/// The wire shape back into a [`CsiError`].
pub fn from_wire_error(e: &model::wire::CsiCallError) -> CsiError {
    CsiError::new(Code::from_i32(e.code), e.message.clone())
}
