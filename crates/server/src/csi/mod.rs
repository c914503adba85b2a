//! CSI on the servers: volume register/deregister/create/delete/detach, claims and their release,
//! plugin and volume reads with their health filled in, and (in [`controller`]) the serialized
//! controller calls. Writes run on the leader; a follower forwards them as one `CSI.Write` rpc.

pub mod controller;

pub mod plan;

pub use controller::{
    CallFailure, CsiTransport, DEFAULT_CONTROLLER_CALL_TIMEOUT, DEFAULT_MAX_QUEUED,
};

use controller::CallAbout;

use crate::error::ServerError;
use crate::server::Server;
use model::alloc::Allocation;
use model::csi::{
    CSIJobDescription, CSIPlugin, CSIVolume, CSIVolumeClaim, CSIVolumeClaimMode,
    CSIVolumeClaimState,
};
use model::node::NodeStatus;
use model::wire::{
    CsiCapability, CsiControllerCall, CsiVolumeClaimRequest, CsiVolumeClaimResponse,
    CsiVolumeUnpublishRequest,
};
use rpc::ErrorCode;
use serde::{Deserialize, Serialize};
use state::{Command, StateSnapshot};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The rpc method a follower forwards CSI writes with.
pub const CSI_WRITE: &str = "CSI.Write";

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
                self.forward_timeout(&leader, CSI_WRITE, &write, CSI_FORWARD_TIMEOUT)
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
                let index = self
                    .release_claim(&ns, &vol, req.claim, ReleaseBy::Client)
                    .await?;
                Ok(index_only(index))
            }
        }
    }

    async fn volume_register(
        &self,
        namespace: &str,
        volumes: Vec<CSIVolume>,
    ) -> Result<CsiWriteResponse, ServerError> {
        let snap = self.state().snapshot();
        let mut out = Vec::new();
        for mut v in volumes {
            prepare(&mut v, namespace)?;
            let plugin = snap.csi_plugin(&v.plugin_id).ok_or_else(|| {
                ServerError::bad_request(format!(
                    "volume {}: plugin {:?} not found: run the plugin's job first (caravan plugin status lists the plugins)",
                    v.id, v.plugin_id
                ))
            })?;
            if let Some(old) = snap.csi_volume(&v.namespace, &v.id) {
                merge_into(&old, &mut v)?;
            } else if v.topologies.is_empty() {
                if let Some(req) = &v.requested_topologies {
                    v.topologies.clone_from(&req.required);
                }
            }
            if plugin.controller_required && plugin.controllers_healthy > 0 {
                let reply = self
                    .csi_controller_call(
                        &v.plugin_id,
                        CallAbout::volume(&v.namespace, &v.id),
                        CsiControllerCall::ValidateVolumeCapabilities {
                            volume_id: v.remote_id().to_string(),
                            capabilities: wire_capabilities(&v),
                            volume_context: v.context.clone(),
                            parameters: v.parameters.clone(),
                            secrets: v.secrets.clone(),
                        },
                    )
                    .await?;
                if !reply.confirmed {
                    return Err(ServerError::bad_request(format!(
                        "volume {}: the plugin does not support the requested capabilities: {}",
                        v.id,
                        if reply.message.is_empty() {
                            "no reason given"
                        } else {
                            &reply.message
                        }
                    )));
                }
            }
            out.push(v);
        }
        let r = self
            .apply(Command::CsiVolumeRegister {
                volumes: out.clone(),
            })
            .await?;
        Ok(CsiWriteResponse {
            index: r.index,
            volumes: out,
            claim: None,
            reply: None,
        })
    }

    async fn volume_create(
        &self,
        namespace: &str,
        volumes: Vec<CSIVolume>,
    ) -> Result<CsiWriteResponse, ServerError> {
        let mut created = Vec::new();
        let mut index = 0;
        for mut v in volumes {
            prepare(&mut v, namespace)?;
            let snap = self.state().snapshot();
            let plugin = snap.csi_plugin(&v.plugin_id).ok_or_else(|| {
                ServerError::bad_request(format!(
                    "volume {}: plugin {:?} not found: run the plugin's job first",
                    v.id, v.plugin_id
                ))
            })?;
            let can_create = plugin.controllers.values().any(|c| {
                c.controller_info
                    .as_ref()
                    .is_some_and(|i| i.supports_create_delete)
            });
            if !can_create {
                return Err(ServerError::bad_request(format!(
                    "volume {}: plugin {} has no controller that can create volumes (CREATE_DELETE_VOLUME)",
                    v.id, v.plugin_id
                )));
            }
            if let Some(old) = snap.csi_volume(&v.namespace, &v.id) {
                if !old.external_id.is_empty() {
                    return Err(ServerError::bad_request(format!(
                        "volume {} already exists (external ID {}): use volume register to update it",
                        v.id, old.external_id
                    )));
                }
            }
            let reply = self
                .csi_controller_call(
                    &v.plugin_id,
                    CallAbout {
                        context: serde_json::to_value(&v).unwrap_or_default(),
                        ..CallAbout::volume(&v.namespace, &v.id)
                    },
                    CsiControllerCall::CreateVolume {
                        name: if v.name.is_empty() {
                            v.id.clone()
                        } else {
                            v.name.clone()
                        },
                        capacity_min: v.requested_capacity_min,
                        capacity_max: v.requested_capacity_max,
                        capabilities: wire_capabilities(&v),
                        parameters: v.parameters.clone(),
                        secrets: v.secrets.clone(),
                        snapshot_id: v.snapshot_id.clone(),
                        clone_id: v.clone_id.clone(),
                    },
                )
                .await?;
            v.external_id = reply.external_id;
            v.capacity = reply.capacity;
            v.context.extend(reply.volume_context);
            v.topologies = reply.topologies;
            let r = self
                .apply(Command::CsiVolumeRegister {
                    volumes: vec![v.clone()],
                })
                .await?;
            index = r.index;
            created.push(v);
        }
        Ok(CsiWriteResponse {
            index,
            volumes: created,
            claim: None,
            reply: None,
        })
    }

    async fn volume_delete(
        &self,
        namespace: &str,
        id: &str,
        secrets: BTreeMap<String, String>,
    ) -> Result<CsiWriteResponse, ServerError> {
        let snap = self.state().snapshot();
        let v = snap
            .csi_volume(namespace, id)
            .ok_or_else(|| ServerError::not_found(format!("volume not found: {id}")))?;
        if v.in_use() {
            return Err(ServerError::new(
                ErrorCode::Conflict,
                format!("volume {id} is in use: stop the allocations that claim it first"),
            ));
        }
        let mut all = v.secrets.clone();
        all.extend(secrets);
        match self
            .csi_controller_call(
                &v.plugin_id,
                CallAbout::volume(namespace, id),
                CsiControllerCall::DeleteVolume {
                    volume_id: v.remote_id().to_string(),
                    secrets: all,
                },
            )
            .await
        {
            Ok(_) => {}
            // Already gone at the provider: deregistering is all that is left.
            Err(e) if e.code == ErrorCode::NotFound => {}
            Err(e) => return Err(e),
        }
        let r = self
            .apply(Command::CsiVolumeDeregister {
                namespace: namespace.to_string(),
                volume_ids: vec![id.to_string()],
                force: false,
            })
            .await?;
        Ok(index_only(r.index))
    }

    /// `volume snapshot create`: each snapshot of a registered volume, through its plugin.
    async fn snapshot_create(
        &self,
        namespace: &str,
        requests: Vec<SnapshotRequest>,
    ) -> Result<CsiWriteResponse, ServerError> {
        let mut all = model::wire::CsiControllerReply::default();
        for req in requests {
            let snap = self.state().snapshot();
            let ns = namespace_or_default(namespace);
            let v = snap.csi_volume(&ns, &req.source_volume_id).ok_or_else(|| {
                ServerError::not_found(format!("volume not found: {}", req.source_volume_id))
            })?;
            if !req.plugin_id.is_empty() && req.plugin_id != v.plugin_id {
                return Err(ServerError::bad_request(format!(
                    "volume {} belongs to plugin {}, not {}",
                    v.id, v.plugin_id, req.plugin_id
                )));
            }
            let mut secrets = v.secrets.clone();
            secrets.extend(req.secrets);
            let reply = self
                .csi_controller_call(
                    &v.plugin_id,
                    CallAbout::volume(&ns, &v.id),
                    CsiControllerCall::CreateSnapshot {
                        source_volume_id: v.remote_id().to_string(),
                        name: req.name,
                        parameters: req.parameters,
                        secrets,
                    },
                )
                .await?;
            for mut s in reply.snapshots {
                s.source_volume_id.clone_from(&v.id);
                s.plugin_id.clone_from(&v.plugin_id);
                all.snapshots.push(s);
            }
        }
        Ok(with_reply(all))
    }

    /// `volume detach`: releases every claim of the volume on the node whose allocation has
    /// stopped or is gone (a running allocation keeps its claim).
    async fn volume_detach(
        &self,
        namespace: &str,
        id: &str,
        node_id: &str,
    ) -> Result<CsiWriteResponse, ServerError> {
        let snap = self.state().snapshot();
        let v = snap
            .csi_volume(namespace, id)
            .ok_or_else(|| ServerError::not_found(format!("volume not found: {id}")))?;
        let on_node: Vec<CSIVolumeClaim> = v
            .read_claims
            .values()
            .chain(v.write_claims.values())
            .chain(v.past_claims.values())
            .filter(|c| c.node_id == node_id)
            .cloned()
            .collect();
        if on_node.is_empty() {
            return Err(ServerError::bad_request(format!(
                "volume {id} has no claim on node {node_id}"
            )));
        }
        let mut index = 0;
        for claim in on_node {
            if let Some(a) = snap.alloc(&claim.allocation_id) {
                if !a.client_terminal() && !node_is_gone(&snap, node_id) {
                    return Err(ServerError::new(
                        ErrorCode::Conflict,
                        format!(
                            "volume {id} is still used by running allocation {} on node {node_id}: stop it first",
                            claim.allocation_id
                        ),
                    ));
                }
            }
            let mut c = claim.clone();
            if c.state == CSIVolumeClaimState::TAKEN {
                c.state = CSIVolumeClaimState::UNPUBLISHING;
            }
            index = self
                .release_claim(namespace, id, c, ReleaseBy::Server)
                .await?;
        }
        Ok(index_only(index))
    }

    /// `CSIVolume.Claim`: commits the claim, then has a controller publish the volume to the
    /// node when the plugin attaches volumes.
    async fn volume_claim(
        &self,
        req: CsiVolumeClaimRequest,
    ) -> Result<CsiWriteResponse, ServerError> {
        let ns = namespace_or_default(&req.namespace);
        let snap = self.state().snapshot();
        let node = snap
            .node(&req.node_id)
            .ok_or_else(|| ServerError::not_found(format!("node not found: {}", req.node_id)))?;
        if node.secret_id != req.secret_id {
            return Err(ServerError::new(
                ErrorCode::PermissionDenied,
                "the node's secret does not match",
            ));
        }
        // The node plugin's ID for this node, as the node fingerprinted it, when the client did
        // not send one.
        let external_node_id = if req.external_node_id.is_empty() {
            snap.csi_volume(&ns, &req.volume_id)
                .and_then(|v| node.csi_node_plugins.get(&v.plugin_id).cloned())
                .and_then(|i| i.node_info.map(|n| n.id))
                .unwrap_or_default()
        } else {
            req.external_node_id.clone()
        };
        let claim = CSIVolumeClaim {
            allocation_id: req.allocation_id.clone(),
            node_id: req.node_id.clone(),
            external_node_id: external_node_id.clone(),
            mode: req.claim,
            access_mode: req.access_mode.clone(),
            attachment_mode: req.attachment_mode.clone(),
            state: CSIVolumeClaimState::TAKEN,
            last_error: String::new(),
        };
        if external_node_id.is_empty() {
            if let Some(v) = snap.csi_volume(&ns, &req.volume_id) {
                if needs_controller_publish(&snap, &v.plugin_id) {
                    // Publishing to "" would never work, and retrying would loop forever.
                    return Err(ServerError::bad_request(format!(
                        "volume {}: the node plugin {} on node {} reported no node ID (NodeGetInfo), so the controller cannot attach the volume there; fix the plugin's node configuration",
                        req.volume_id, v.plugin_id, req.node_id
                    )));
                }
            }
        }
        let r = self
            .apply(Command::CsiVolumeClaim {
                namespace: ns.clone(),
                volume_id: req.volume_id.clone(),
                claim: claim.clone(),
            })
            .await?;
        let snap = self.state().snapshot();
        let v = snap.csi_volume(&ns, &req.volume_id).ok_or_else(|| {
            ServerError::not_found(format!("volume not found: {}", req.volume_id))
        })?;
        let mut publish_context = BTreeMap::new();
        if needs_controller_publish(&snap, &v.plugin_id) {
            let reply = self
                .csi_controller_call(
                    &v.plugin_id,
                    CallAbout::volume(&ns, &v.id),
                    CsiControllerCall::ControllerPublishVolume {
                        volume_id: v.remote_id().to_string(),
                        node_id: external_node_id.clone(),
                        capability: wire_capability(&v, &req.access_mode, &req.attachment_mode),
                        read_only: req.claim == CSIVolumeClaimMode::READ,
                        secrets: v.secrets.clone(),
                        volume_context: v.context.clone(),
                    },
                )
                .await?;
            publish_context = reply.publish_context;
        }
        Ok(CsiWriteResponse {
            index: r.index,
            volumes: Vec::new(),
            claim: Some(CsiVolumeClaimResponse {
                publish_context,
                volume: Some((*v).clone()),
                index: r.index,
            }),
            reply: None,
        })
    }

    /// Moves a claim through its release: a checkpoint for the state it is in, the node step
    /// (the client did it, the node is gone, or the node is asked to unpublish and unstage and
    /// answers), the controller unpublish (when the plugin attaches and no other claim on that
    /// node still needs it, checked again in the plugin's turn), and the free. Each step is a
    /// Raft checkpoint, so whoever leads next carries on from the last one; a step that fails
    /// leaves the claim where it is, with the reason (`volume status` shows it).
    pub(crate) async fn release_claim(
        &self,
        namespace: &str,
        volume_id: &str,
        claim: CSIVolumeClaim,
        by: ReleaseBy,
    ) -> Result<u64, ServerError> {
        let checkpoint = |state: CSIVolumeClaimState, base: &CSIVolumeClaim, why: &str| {
            let mut c = base.clone();
            c.state = state;
            c.last_error = why.to_string();
            Command::CsiVolumeClaim {
                namespace: namespace.to_string(),
                volume_id: volume_id.to_string(),
                claim: c,
            }
        };
        let _turn = self
            .csi_locks()
            .claim_turn(namespace, volume_id, &claim.allocation_id)
            .await;
        let before = self.state().snapshot();
        let held = before.csi_volume(namespace, volume_id).and_then(|v| {
            v.read_claims
                .get(&claim.allocation_id)
                .or_else(|| v.write_claims.get(&claim.allocation_id))
                .or_else(|| v.past_claims.get(&claim.allocation_id))
                .cloned()
        });
        let Some(held) = held else {
            // Released already (by the client, or by the watcher while this waited its turn).
            return Ok(before.index());
        };
        // Carry on from the furthest step either side knows of.
        let mut state = if held.state == CSIVolumeClaimState::TAKEN {
            claim.state
        } else {
            held.state
        };
        if state == CSIVolumeClaimState::TAKEN {
            state = CSIVolumeClaimState::UNPUBLISHING;
        }
        let mut index = self.apply(checkpoint(state, &claim, "")).await?.index;
        let snap = self.state().snapshot();
        let Some(v) = snap.csi_volume(namespace, volume_id) else {
            return Ok(index);
        };
        let Some(known) = v.past_claims.get(&claim.allocation_id).cloned() else {
            return Ok(index);
        };
        if state == CSIVolumeClaimState::UNPUBLISHING {
            if let Err(e) = self.node_step(&snap, &v, &known, by).await {
                let _ = self
                    .apply(checkpoint(
                        CSIVolumeClaimState::UNPUBLISHING,
                        &known,
                        &e.message,
                    ))
                    .await;
                return Err(e);
            }
            self.apply(checkpoint(CSIVolumeClaimState::NODE_DETACHED, &known, ""))
                .await?;
            state = CSIVolumeClaimState::NODE_DETACHED;
        }
        if state == CSIVolumeClaimState::NODE_DETACHED {
            if let Err(e) = self.controller_step(namespace, &v, &known).await {
                let _ = self
                    .apply(checkpoint(
                        CSIVolumeClaimState::NODE_DETACHED,
                        &known,
                        &e.message,
                    ))
                    .await;
                return Err(e);
            }
        }
        index = self
            .apply(checkpoint(CSIVolumeClaimState::READY_TO_FREE, &known, ""))
            .await?
            .index;
        Ok(index)
    }

    /// The node step of a release: nothing to do when the client itself released the claim
    /// after unmounting, or when the node is down or gone; else the node is asked to unpublish
    /// and unstage the volume for the allocation, and only its answer lets the release go on.
    async fn node_step(
        &self,
        snap: &StateSnapshot,
        v: &CSIVolume,
        known: &CSIVolumeClaim,
        by: ReleaseBy,
    ) -> Result<(), ServerError> {
        if by == ReleaseBy::Client || node_is_gone(snap, &known.node_id) {
            return Ok(());
        }
        if snap
            .alloc(&known.allocation_id)
            .is_some_and(|a| !a.client_terminal())
        {
            return Err(ServerError::new(
                ErrorCode::Conflict,
                format!(
                    "volume {}: allocation {} on node {} still runs and uses it",
                    v.id, known.allocation_id, known.node_id
                ),
            ));
        }
        let Some(node) = snap.node(&known.node_id) else {
            return Ok(());
        };
        let transport = self.csi_transport()?;
        let req = model::wire::CsiNodeDetachRequest {
            plugin_id: v.plugin_id.clone(),
            volume_id: v.id.clone(),
            external_id: v.external_id.clone(),
            alloc_id: known.allocation_id.clone(),
            read_only: known.mode == CSIVolumeClaimMode::READ,
            attachment_mode: if known.attachment_mode.is_empty() {
                v.attachment_mode.clone()
            } else {
                known.attachment_mode.clone()
            },
            access_mode: if known.access_mode.is_empty() {
                v.access_mode.clone()
            } else {
                known.access_mode.clone()
            },
        };
        transport.node_detach(&node, req).await.map_err(|f| {
            ServerError::new(
                ErrorCode::Unavailable,
                format!(
                    "volume {}: node {} has not unpublished it for allocation {} yet ({f}); the controller will not detach it until it has",
                    v.id, known.node_id, known.allocation_id
                ),
            )
        })
    }

    /// The controller step of a release: `ControllerUnpublishVolume` when the plugin attaches
    /// volumes, unless another claim on the same node still needs the volume — checked in the
    /// plugin's turn, right before the call, not before waiting for it.
    async fn controller_step(
        &self,
        namespace: &str,
        v: &CSIVolume,
        known: &CSIVolumeClaim,
    ) -> Result<(), ServerError> {
        let snap = self.state().snapshot();
        if !needs_controller_publish(&snap, &v.plugin_id) {
            return Ok(());
        }
        let external = if known.external_node_id.is_empty() {
            snap.node(&known.node_id)
                .and_then(|n| n.csi_node_plugins.get(&v.plugin_id).cloned())
                .and_then(|i| i.node_info.map(|n| n.id))
                .unwrap_or_default()
        } else {
            known.external_node_id.clone()
        };
        if external.is_empty() {
            return Err(ServerError::bad_request(format!(
                "volume {}: the node plugin on node {} reported no node ID, so the controller cannot be told which node to detach it from",
                v.id, known.node_id
            )));
        }
        let (ns, vol, node, alloc) = (
            namespace.to_string(),
            v.id.clone(),
            known.node_id.clone(),
            known.allocation_id.clone(),
        );
        let about = CallAbout {
            precondition: Some(Arc::new(move |snap: &StateSnapshot| {
                still_used_on_node(snap, &ns, &vol, &node, &alloc)
            })),
            ..CallAbout::volume(namespace, &v.id)
        };
        let result = self
            .csi_controller_call(
                &v.plugin_id,
                about,
                CsiControllerCall::ControllerUnpublishVolume {
                    volume_id: v.remote_id().to_string(),
                    node_id: external,
                    secrets: v.secrets.clone(),
                },
            )
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) if e.code == ErrorCode::NotFound => Ok(()),
            Err(e) if e.message.contains(STILL_USED) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Who releases a claim: its own client after it unmounted the volume (no node step left), or
/// the servers (the volume watcher, `volume detach`: the node must be asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseBy {
    Client,
    Server,
}

/// The skip reason when another claim on the node still needs the volume attached.
const STILL_USED: &str = "still used on the node by another claim; not detaching";

/// Errors (skipping the call) when another live claim on `node_id` needs the volume attached.
fn still_used_on_node(
    snap: &StateSnapshot,
    namespace: &str,
    volume_id: &str,
    node_id: &str,
    alloc_id: &str,
) -> Result<(), ServerError> {
    let Some(v) = snap.csi_volume(namespace, volume_id) else {
        return Ok(());
    };
    let used = v
        .read_claims
        .values()
        .chain(v.write_claims.values())
        .any(|c| c.node_id == node_id && c.allocation_id != alloc_id);
    if used {
        return Err(ServerError::new(
            ErrorCode::Conflict,
            format!("volume {volume_id}: {STILL_USED}"),
        ));
    }
    Ok(())
}

fn with_reply(reply: model::wire::CsiControllerReply) -> CsiWriteResponse {
    CsiWriteResponse {
        reply: Some(reply),
        ..CsiWriteResponse::default()
    }
}

fn index_only(index: u64) -> CsiWriteResponse {
    CsiWriteResponse {
        index,
        ..CsiWriteResponse::default()
    }
}

fn namespace_or_default(ns: &str) -> String {
    if ns.is_empty() {
        "default".into()
    } else {
        ns.to_string()
    }
}

/// Down, disconnected or garbage-collected: nothing can be undone on that node.
pub(crate) fn node_is_gone(snap: &StateSnapshot, node_id: &str) -> bool {
    snap.node(node_id).is_none_or(|n| {
        n.status == NodeStatus::Down.as_str() || n.status == NodeStatus::Disconnected.as_str()
    })
}

/// Whether the plugin has a controller that attaches volumes (PUBLISH_UNPUBLISH_VOLUME).
fn needs_controller_publish(snap: &StateSnapshot, plugin_id: &str) -> bool {
    snap.csi_plugin(plugin_id).is_some_and(|p| {
        p.controller_required
            && p.controllers.values().any(|c| {
                c.controller_info
                    .as_ref()
                    .is_some_and(|i| i.supports_attach_detach)
            })
    })
}

fn wire_capabilities(v: &CSIVolume) -> Vec<CsiCapability> {
    v.requested_capabilities
        .iter()
        .map(|c| wire_capability(v, &c.access_mode, &c.attachment_mode))
        .collect()
}

/// A capability with the volume's mount options (file system type, mount flags).
fn wire_capability(v: &CSIVolume, access_mode: &str, attachment_mode: &str) -> CsiCapability {
    let options = v.mount_options.clone().unwrap_or_default();
    CsiCapability {
        access_mode: access_mode.to_string(),
        attachment_mode: attachment_mode.to_string(),
        fs_type: options.fs_type,
        mount_flags: options.mount_flags,
    }
}

/// Namespace default, then the volume's own validation (every error, each naming its field).
fn prepare(v: &mut CSIVolume, namespace: &str) -> Result<(), ServerError> {
    if v.namespace.is_empty() {
        v.namespace = namespace_or_default(namespace);
    }
    if v.name.is_empty() {
        v.name.clone_from(&v.id);
    }
    v.validate()
        .map_err(|e| ServerError::bad_request(format!("volume {:?}: {e}", v.id)))
}

/// Nomad's `CSIVolume.Merge` for a re-register: identity, plugin, parameters and topology are
/// fixed once registered; mount options, secrets, context and capabilities may change.
fn merge_into(old: &CSIVolume, new: &mut CSIVolume) -> Result<(), ServerError> {
    let fixed = [
        ("plugin_id", &old.plugin_id, &new.plugin_id),
        ("external_id", &old.external_id, &new.external_id),
    ];
    for (field, was, now) in fixed {
        if !now.is_empty() && was != now {
            return Err(ServerError::bad_request(format!(
                "volume {}: {field} cannot be changed from {was:?} to {now:?}; deregister and register it again",
                new.id
            )));
        }
    }
    if new.external_id.is_empty() {
        new.external_id.clone_from(&old.external_id);
    }
    if new.parameters.is_empty() {
        new.parameters.clone_from(&old.parameters);
    } else if new.parameters != old.parameters {
        return Err(ServerError::bad_request(format!(
            "volume {}: parameters cannot be changed once registered",
            new.id
        )));
    }
    if new.topologies.is_empty() {
        new.topologies.clone_from(&old.topologies);
    }
    if new.capacity == 0 {
        new.capacity = old.capacity;
    }
    Ok(())
}

/// A volume as reads show it: its plugin's health and its allocations filled in (Nomad's
/// denormalized volume).
pub fn fill_volume(snap: &StateSnapshot, v: &CSIVolume) -> CSIVolume {
    let mut out = v.clone();
    if let Some(p) = snap.csi_plugin(&v.plugin_id) {
        let p = fill_plugin(snap, &p);
        out.provider = p.provider.clone();
        out.provider_version = p.version.clone();
        out.controller_required = p.controller_required;
        out.controllers_healthy = p.controllers_healthy;
        out.controllers_expected = p.controllers_expected;
        out.nodes_healthy = p.nodes_healthy;
        out.nodes_expected = p.nodes_expected;
        out.schedulable = state::csi_schedulable(Some(&p));
    }
    let allocs = |claims: &BTreeMap<String, CSIVolumeClaim>| {
        claims
            .keys()
            .map(|id| (id.clone(), snap.alloc(id).map(|a| strip_alloc(&a))))
            .collect::<BTreeMap<_, _>>()
    };
    out.read_allocs = allocs(&v.read_claims);
    out.write_allocs = allocs(&v.write_claims);
    out
}

fn strip_alloc(a: &Allocation) -> Allocation {
    let mut a = a.clone();
    a.job = None;
    a
}

/// A plugin as reads show it: expected counts from the jobs that run it, and its allocations.
pub fn fill_plugin(snap: &StateSnapshot, p: &CSIPlugin) -> CSIPlugin {
    let mut out = p.clone();
    out.controller_jobs.clear();
    out.node_jobs.clear();
    out.allocations.clear();
    let mut controllers_expected = 0;
    let mut nodes_expected = 0;
    for job in snap.jobs(None, "") {
        if job.stop {
            continue;
        }
        for g in &job.task_groups {
            for t in &g.tasks {
                let Some(cfg) = &t.csi_plugin_config else {
                    continue;
                };
                if cfg.id != p.id {
                    continue;
                }
                let ns = job.namespace.clone().unwrap_or_else(|| "default".into());
                let expected = if job.job_type.as_deref() == Some("system") {
                    i64::try_from(
                        snap.allocs_by_job(&ns, &job.id)
                            .iter()
                            .filter(|a| !a.is_terminal())
                            .count(),
                    )
                    .unwrap_or(0)
                } else {
                    i64::from(g.count.unwrap_or(1))
                };
                let desc = CSIJobDescription {
                    namespace: ns.clone(),
                    id: job.id.clone(),
                    version: job.version.unwrap_or(0),
                    expected,
                };
                let kind = cfg.plugin_type.as_str();
                if kind == "controller" || kind == "monolith" {
                    controllers_expected += expected;
                    out.controller_jobs
                        .entry(ns.clone())
                        .or_default()
                        .insert(job.id.clone(), desc.clone());
                }
                if kind == "node" || kind == "monolith" {
                    nodes_expected += expected;
                    out.node_jobs
                        .entry(ns.clone())
                        .or_default()
                        .insert(job.id.clone(), desc);
                }
            }
        }
    }
    out.controllers_expected = controllers_expected;
    out.nodes_expected = nodes_expected;
    let mut alloc_ids: Vec<&String> = p
        .controllers
        .values()
        .chain(p.nodes.values())
        .map(|i| &i.alloc_id)
        .filter(|id| !id.is_empty())
        .collect();
    alloc_ids.sort();
    alloc_ids.dedup();
    out.allocations = alloc_ids
        .into_iter()
        .filter_map(|id| snap.alloc(id))
        .map(|a| a.stub(false))
        .collect();
    out
}
