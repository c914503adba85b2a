//! Volume writes on the leader: register (with ValidateVolumeCapabilities), create, delete,
//! and snapshots, each destructive controller call through the serializer.

use super::controller::CallAbout;
use super::{
    index_only, namespace_or_default, wire_capabilities, with_reply, CsiWriteResponse,
    SnapshotRequest,
};
use crate::error::ServerError;
use crate::server::Server;
use model::csi::CSIVolume;
use model::wire::CsiControllerCall;
use rpc::ErrorCode;
use state::Command;
use std::collections::BTreeMap;

impl Server {
    pub(super) async fn volume_register(
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
                if v.requested_capacity_min > 0 && v.requested_capacity_min > old.capacity {
                    self.volume_expand(&snap, &old, &mut v).await?;
                }
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

    /// A re-register asking for more than the volume's capacity (Nomad's expansion): one
    /// serialized ControllerExpandVolume, then (when the plugin asks for it) NodeExpandVolume on
    /// every node that has it published; the capacity the controller answers with is recorded.
    async fn volume_expand(
        &self,
        snap: &state::StateSnapshot,
        old: &CSIVolume,
        v: &mut CSIVolume,
    ) -> Result<(), ServerError> {
        let plugin = snap.csi_plugin(&v.plugin_id);
        let can_expand = plugin.as_ref().is_some_and(|p| {
            p.controllers.values().any(|c| {
                c.controller_info
                    .as_ref()
                    .is_some_and(|i| i.supports_expand)
            })
        });
        let node_expands = plugin.as_ref().is_some_and(|p| {
            p.nodes
                .values()
                .any(|n| n.node_info.as_ref().is_some_and(|i| i.supports_expand))
        });
        if !can_expand && !node_expands {
            return Err(ServerError::bad_request(format!(
                "volume {}: capacity_min {} is more than its capacity {}, but plugin {} cannot expand volumes (no EXPAND_VOLUME on its controller or nodes); register it with its current size",
                v.id, v.requested_capacity_min, old.capacity, v.plugin_id
            )));
        }
        // A plugin that expands only on the nodes (no controller step) grows it there alone.
        let (capacity, on_nodes) = if can_expand {
            let capability = old
                .write_claims
                .values()
                .chain(old.read_claims.values())
                .next()
                .map(|c| super::wire_capability(v, &c.access_mode, &c.attachment_mode));
            let reply = self
                .csi_controller_call(
                    &v.plugin_id,
                    CallAbout::volume(&v.namespace, &v.id),
                    CsiControllerCall::ControllerExpandVolume {
                        volume_id: v.remote_id().to_string(),
                        capacity_min: v.requested_capacity_min,
                        capacity_max: v.requested_capacity_max,
                        capability,
                        secrets: v.secrets.clone(),
                    },
                )
                .await?;
            (reply.capacity, reply.node_expansion_required)
        } else {
            (v.requested_capacity_min, true)
        };
        if on_nodes && node_expands {
            self.node_expand(snap, old, v).await?;
        }
        v.capacity = capacity.max(v.requested_capacity_min);
        Ok(())
    }

    /// NodeExpandVolume on every live node that has the volume published: the controller grew
    /// the disk, each node grows what it mounted. A node that is down or gone is skipped (its
    /// mount goes with it); any other failure fails the expansion, to be registered again.
    async fn node_expand(
        &self,
        snap: &state::StateSnapshot,
        old: &CSIVolume,
        v: &CSIVolume,
    ) -> Result<(), ServerError> {
        let transport = self.csi_transport()?;
        for c in old.write_claims.values().chain(old.read_claims.values()) {
            if super::node_is_gone(snap, &c.node_id) {
                continue;
            }
            let Some(node) = snap.node(&c.node_id) else {
                continue;
            };
            let req = model::wire::CsiNodeExpandRequest {
                target: model::wire::CsiNodeDetachRequest {
                    plugin_id: v.plugin_id.clone(),
                    volume_id: v.id.clone(),
                    external_id: v.external_id.clone(),
                    alloc_id: c.allocation_id.clone(),
                    read_only: c.mode == model::csi::CSIVolumeClaimMode::READ,
                    attachment_mode: c.attachment_mode.clone(),
                    access_mode: c.access_mode.clone(),
                },
                capacity_min: v.requested_capacity_min,
                capacity_max: v.requested_capacity_max,
            };
            transport.node_expand(&node, req).await.map_err(|f| {
                ServerError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "volume {}: the controller expanded it, but node {} could not grow it for allocation {} ({f}); register it again to retry",
                        v.id, c.node_id, c.allocation_id
                    ),
                )
            })?;
        }
        Ok(())
    }

    pub(super) async fn volume_create(
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

    pub(super) async fn volume_delete(
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
    pub(super) async fn snapshot_create(
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
}

/// Namespace default, then the volume's own validation (every error, each naming its field).
/// A volume naming another namespace than the request's is refused: the request's namespace is
/// the one its ACL check was made for.
fn prepare(v: &mut CSIVolume, namespace: &str) -> Result<(), ServerError> {
    let request_ns = namespace_or_default(namespace);
    if v.namespace.is_empty() {
        v.namespace = request_ns;
    } else if v.namespace != request_ns {
        return Err(ServerError::bad_request(format!(
            "volume {:?} names namespace {:?} but the request is for {:?}: send it with -namespace {:?}",
            v.id, v.namespace, request_ns, v.namespace
        )));
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
