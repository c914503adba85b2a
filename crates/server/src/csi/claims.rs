//! Claims on the leader: take one (and have the controller publish the volume), and release
//! one through its checkpoints — the node step, the controller step, the free — as the CSI
//! contract in ARCHITECTURE.md says.

use super::controller::CallAbout;
use super::{
    index_only, namespace_or_default, needs_controller_publish, node_is_gone, wire_capability,
    CsiWriteResponse,
};
use crate::error::ServerError;
use crate::server::Server;
use model::csi::{CSIVolume, CSIVolumeClaim, CSIVolumeClaimMode, CSIVolumeClaimState};
use model::wire::{CsiControllerCall, CsiVolumeClaimRequest, CsiVolumeClaimResponse};
use rpc::ErrorCode;
use state::{Command, StateSnapshot};
use std::collections::BTreeMap;
use std::sync::Arc;

impl Server {
    /// `volume detach`: releases every claim of the volume on the node whose allocation has
    /// stopped or is gone (a running allocation keeps its claim).
    pub(super) async fn volume_detach(
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
    pub(super) async fn volume_claim(
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
        // A node claims for its own allocations, in their namespace, only.
        match snap.alloc(&req.allocation_id) {
            Some(a) if a.node_id == req.node_id && a.namespace == ns => {}
            Some(_) => {
                return Err(ServerError::new(
                    ErrorCode::PermissionDenied,
                    format!(
                        "allocation {} is not this node's in namespace {ns:?}: a node claims volumes for its own allocations only",
                        req.allocation_id
                    ),
                ))
            }
            None => {
                return Err(ServerError::not_found(format!(
                    "allocation not found: {}",
                    req.allocation_id
                )))
            }
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
        // A retry keeps the reason the last attempt failed until a step succeeds, so `volume
        // status` never shows a stuck release without it.
        let mut index = self
            .apply(checkpoint(state, &claim, &held.last_error))
            .await?
            .index;
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
