//! CSI on the servers. Writes run on the leader; a follower forwards them as one `CSI.Write` rpc,
//! dispatched here. By concern: `volumes` (register, create, delete, snapshots), `claims` (claim
//! and publish, detach, the release through its checkpoints), `reads` (volumes and plugins as
//! the API shows them), [`controller`] (the serializer every destructive controller call goes
//! through) driven by [`plan`] (its engine, pure).

pub mod controller;

mod claims;
pub mod plan;
mod reads;
mod volumes;

pub(crate) use claims::ReleaseBy;
pub use reads::{fill_plugin, fill_volume};

pub use controller::{
    CallFailure, CsiTransport, DEFAULT_CONTROLLER_CALL_TIMEOUT, DEFAULT_MAX_QUEUED,
};

use controller::CallAbout;

use crate::error::ServerError;
use crate::server::Server;
use model::csi::CSIVolume;
use model::node::NodeStatus;
use model::wire::{
    CsiCapability, CsiControllerCall, CsiVolumeClaimRequest, CsiVolumeClaimResponse,
    CsiVolumeUnpublishRequest,
};
use rpc::ErrorCode;
use serde::{Deserialize, Serialize};
use state::{Command, StateSnapshot};
use std::collections::BTreeMap;

/// How long a follower waits for the leader's answer to a forwarded CSI write: as long as a
/// client waits for `CSIVolume.Claim` (a controller call may wait its turn, then take minutes).
const CSI_FORWARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// A CSI write as forwarded to the leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum CsiWrite {
    Register {
        namespace: String,
        volumes: Vec<CSIVolume>,
    },
    Deregister {
        namespace: String,
        id: String,
        force: bool,
    },
    Create {
        namespace: String,
        volumes: Vec<CSIVolume>,
    },
    Delete {
        namespace: String,
        id: String,
        secrets: BTreeMap<String, String>,
    },
    Detach {
        namespace: String,
        id: String,
        node_id: String,
    },
    Claim(CsiVolumeClaimRequest),
    Unpublish(CsiVolumeUnpublishRequest),
    /// `volume snapshot create`: one serialized CreateSnapshot per request.
    SnapshotCreate {
        namespace: String,
        snapshots: Vec<SnapshotRequest>,
    },
    /// `volume snapshot delete`.
    SnapshotDelete {
        plugin_id: String,
        snapshot_id: String,
        secrets: BTreeMap<String, String>,
    },
    /// `volume snapshot list` (a read, but it goes to a controller like the writes).
    SnapshotList {
        plugin_id: String,
        per_page: i32,
        next_token: String,
        secrets: BTreeMap<String, String>,
    },
    /// `GET /v1/volumes/external`.
    ExternalList {
        plugin_id: String,
        per_page: i32,
        next_token: String,
    },
}

/// One snapshot to take (Nomad's `CSISnapshot` in a create request).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SnapshotRequest {
    #[serde(rename = "SourceVolumeID")]
    pub source_volume_id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "PluginID")]
    pub plugin_id: String,
    #[serde(rename = "Secrets")]
    pub secrets: BTreeMap<String, String>,
    #[serde(rename = "Parameters")]
    pub parameters: BTreeMap<String, String>,
}

/// What a CSI write answers: the raft index, and the volumes or claim it produced.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CsiWriteResponse {
    pub index: u64,
    pub volumes: Vec<CSIVolume>,
    pub claim: Option<CsiVolumeClaimResponse>,
    /// Snapshot and external-volume calls: the controller's answer.
    pub reply: Option<model::wire::CsiControllerReply>,
}

impl Server {
    /// Runs a CSI write on the leader (forwarding when this server does not lead).
    pub async fn csi_write(&self, write: CsiWrite) -> Result<CsiWriteResponse, ServerError> {
        match self.forward_target().await? {
            // As long as the client waits (its own deadline cancels this sooner): a forward that
            // gave up earlier would take the request out of the plugin's queue while the client
            // still waits, and its retry would queue at the back.
            Some(leader) => {
                self.forward_timeout::<crate::methods::CsiWriteMethod>(
                    &leader,
                    &write,
                    CSI_FORWARD_TIMEOUT,
                )
                .await
            }
            None => self.csi_write_local(write).await,
        }
    }

    pub(crate) async fn csi_write_local(
        &self,
        write: CsiWrite,
    ) -> Result<CsiWriteResponse, ServerError> {
        match write {
            CsiWrite::Register { namespace, volumes } => {
                self.volume_register(&namespace, volumes).await
            }
            CsiWrite::Deregister {
                namespace,
                id,
                force,
            } => {
                let r = self
                    .apply(Command::CsiVolumeDeregister {
                        namespace,
                        volume_ids: vec![id],
                        force,
                    })
                    .await?;
                Ok(index_only(r.index))
            }
            CsiWrite::Create { namespace, volumes } => {
                self.volume_create(&namespace, volumes).await
            }
            CsiWrite::Delete {
                namespace,
                id,
                secrets,
            } => self.volume_delete(&namespace, &id, secrets).await,
            CsiWrite::Detach {
                namespace,
                id,
                node_id,
            } => self.volume_detach(&namespace, &id, &node_id).await,
            CsiWrite::Claim(req) => self.volume_claim(req).await,
            CsiWrite::SnapshotCreate {
                namespace,
                snapshots,
            } => self.snapshot_create(&namespace, snapshots).await,
            CsiWrite::SnapshotDelete {
                plugin_id,
                snapshot_id,
                secrets,
            } => {
                let reply = self
                    .csi_controller_call(
                        &plugin_id,
                        CallAbout::default(),
                        CsiControllerCall::DeleteSnapshot {
                            snapshot_id,
                            secrets,
                        },
                    )
                    .await?;
                Ok(with_reply(reply))
            }
            CsiWrite::SnapshotList {
                plugin_id,
                per_page,
                next_token,
                secrets,
            } => {
                let mut reply = self
                    .csi_controller_call(
                        &plugin_id,
                        CallAbout::default(),
                        CsiControllerCall::ListSnapshots {
                            max_entries: per_page,
                            starting_token: next_token,
                            secrets,
                        },
                    )
                    .await?;
                for s in &mut reply.snapshots {
                    s.plugin_id.clone_from(&plugin_id);
                }
                Ok(with_reply(reply))
            }
            CsiWrite::ExternalList {
                plugin_id,
                per_page,
                next_token,
            } => {
                let reply = self
                    .csi_controller_call(
                        &plugin_id,
                        CallAbout::default(),
                        CsiControllerCall::ListVolumes {
                            max_entries: per_page,
                            starting_token: next_token,
                        },
                    )
                    .await?;
                Ok(with_reply(reply))
            }
            CsiWrite::Unpublish(req) => {
                let vol = req.volume_id.clone();
                let ns = namespace_or_default(&req.namespace);
                let snap = self.state().snapshot();
                let node = snap.node(&req.claim.node_id).ok_or_else(|| {
                    ServerError::not_found(format!("node not found: {}", req.claim.node_id))
                })?;
                if node.secret_id != req.secret_id {
                    return Err(ServerError::new(
                        ErrorCode::PermissionDenied,
                        "the node's secret does not match: only the claim's own client releases it this way",
                    ));
                }
                // Only the node that holds the claim releases it this way.
                let stored = snap.csi_volume(&ns, &vol).and_then(|v| {
                    v.read_claims
                        .get(&req.claim.allocation_id)
                        .or_else(|| v.write_claims.get(&req.claim.allocation_id))
                        .or_else(|| v.past_claims.get(&req.claim.allocation_id))
                        .map(|c| c.node_id.clone())
                });
                if stored.as_ref().is_some_and(|n| *n != req.claim.node_id) {
                    return Err(ServerError::new(
                        ErrorCode::PermissionDenied,
                        format!(
                            "the claim of allocation {} belongs to another node",
                            req.claim.allocation_id
                        ),
                    ));
                }
                let index = self
                    .release_claim(&ns, &vol, req.claim, ReleaseBy::Client)
                    .await?;
                Ok(index_only(index))
            }
        }
    }
}

pub(crate) fn with_reply(reply: model::wire::CsiControllerReply) -> CsiWriteResponse {
    CsiWriteResponse {
        reply: Some(reply),
        ..CsiWriteResponse::default()
    }
}

pub(crate) fn index_only(index: u64) -> CsiWriteResponse {
    CsiWriteResponse {
        index,
        ..CsiWriteResponse::default()
    }
}

pub(crate) fn namespace_or_default(ns: &str) -> String {
    if ns.is_empty() {
        "default".into()
    } else {
        ns.to_string()
    }
}

/// Down, disconnected or garbage-collected: nothing can be undone on that node.
pub(crate) fn node_is_gone(snap: &StateSnapshot, node_id: &str) -> bool {
    snap.node(node_id)
        .is_none_or(|n| matches!(n.status, NodeStatus::Down | NodeStatus::Disconnected))
}

/// Whether the plugin has a controller that attaches volumes (PUBLISH_UNPUBLISH_VOLUME).
pub(crate) fn needs_controller_publish(snap: &StateSnapshot, plugin_id: &str) -> bool {
    snap.csi_plugin(plugin_id).is_some_and(|p| {
        p.controller_required
            && p.controllers.values().any(|c| {
                c.controller_info
                    .as_ref()
                    .is_some_and(|i| i.supports_attach_detach)
            })
    })
}

pub(crate) fn wire_capabilities(v: &CSIVolume) -> Vec<CsiCapability> {
    v.requested_capabilities
        .iter()
        .map(|c| wire_capability(v, &c.access_mode, &c.attachment_mode))
        .collect()
}

/// A capability with the volume's mount options (file system type, mount flags).
pub(crate) fn wire_capability(
    v: &CSIVolume,
    access_mode: &str,
    attachment_mode: &str,
) -> CsiCapability {
    let options = v.mount_options.clone().unwrap_or_default();
    CsiCapability {
        access_mode: access_mode.to_string(),
        attachment_mode: attachment_mode.to_string(),
        fs_type: options.fs_type,
        mount_flags: options.mount_flags,
    }
}
