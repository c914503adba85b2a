//! Dynamic host volumes (Nomad's `HostVolume.Create`, `Register`, `Delete`): written on the
//! leader, which places a create on a node, asks that node's client agent to make (or check) the
//! volume, and stores what the client answered through raft; reads come from any server's state.
//!
//! **Invariant:** a new volume is stored (pending) before its client is asked to make it, and
//! removed only after its client deleted it, refused to make it, or (with `force`) cannot be
//! reached, so no volume a client made is ever untracked; no two of
//! these writes run at once on a leader, so two creates of one name cannot both pick a node, and
//! a volume in use by an allocation that is not terminal is never deleted.

use crate::csi::CallFailure;
use crate::error::ServerError;
use crate::server::Server;
use model::alloc::{AllocListStub, Allocation};
use model::host_volume::{
    ClientHostVolumeRequest, HostVolume, HostVolumeCreateResponse, HostVolumeState, DEFAULT_PLUGIN,
};
use model::node::{Node, NodeStatus};
use rpc::ErrorCode;
use serde::{Deserialize, Serialize};
use state::{Command, StateSnapshot};

/// `HostVolume.Create` and `HostVolume.Register`'s request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostVolumeWriteRequest {
    pub volume: HostVolume,
    /// The request's namespace, for a volume that names none.
    pub namespace: String,
    /// A register (an existing directory) rather than a create (the plugin makes one).
    pub register: bool,
}

/// `HostVolume.Delete`'s request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostVolumeDeleteRequest {
    pub namespace: String,
    pub id: String,
    /// Remove it from the state even when its node's client cannot be reached.
    pub force: bool,
}

/// What a delete answers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostVolumeDeleteResponse {
    #[serde(rename = "Index")]
    pub index: u64,
}

/// The allocations that use `vol`: not terminal, on its node, in its namespace, with a group
/// that mounts a host volume of its name (Nomad's `HostVolume.Allocations`).
pub fn host_volume_allocs(snap: &StateSnapshot, vol: &HostVolume) -> Vec<AllocListStub> {
    snap.allocs_by_node(&vol.node_id)
        .into_iter()
        .filter(|a| !a.is_terminal() && a.namespace == vol.namespace && uses(a, &vol.name))
        .map(|a| a.stub(false))
        .collect()
}

fn uses(alloc: &Allocation, name: &str) -> bool {
    let Some(group) = alloc
        .job
        .as_ref()
        .and_then(|j| j.task_groups.iter().find(|g| g.name == alloc.task_group))
    else {
        return false;
    };
    group.volumes.values().any(|req| {
        req.volume_type == "host"
            && if req.per_alloc {
                alloc
                    .index()
                    .is_some_and(|i| format!("{}[{i}]", req.source) == name)
            } else {
                req.source == name
            }
    })
}

fn now_nanos() -> i64 {
    crate::env::now_nanos()
}

fn failure(what: &str, f: CallFailure) -> ServerError {
    match f {
        CallFailure::Plugin(e) => ServerError::bad_request(format!("{what}: {}", e.message)),
        other => ServerError::new(ErrorCode::Unavailable, format!("{what}: {other}")),
    }
}

impl Server {
    /// Creates (or, with `register`, registers) a host volume; forwarded to the leader.
    pub async fn host_volume_write(
        &self,
        req: HostVolumeWriteRequest,
    ) -> Result<HostVolumeCreateResponse, ServerError> {
        req.volume
            .validate()
            .map_err(|e| ServerError::bad_request(format!("volume validation failed: {e}")))?;
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::HostVolumeWrite>(&leader, &req)
                    .await
            }
            None => self.host_volume_write_local(req).await,
        }
    }

    /// Deletes a host volume (its client first); forwarded to the leader.
    pub async fn host_volume_delete(
        &self,
        req: HostVolumeDeleteRequest,
    ) -> Result<HostVolumeDeleteResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::HostVolumeDeleteMethod>(&leader, &req)
                    .await
            }
            None => self.host_volume_delete_local(req).await,
        }
    }

    pub(crate) async fn host_volume_write_local(
        &self,
        req: HostVolumeWriteRequest,
    ) -> Result<HostVolumeCreateResponse, ServerError> {
        let _one_at_a_time = self.host_volume_lock().lock().await;
        let mut vol = req.volume;
        vol.validate()
            .map_err(|e| ServerError::bad_request(format!("volume validation failed: {e}")))?;
        if vol.namespace.is_empty() {
            vol.namespace = if req.namespace.is_empty() {
                "default".into()
            } else {
                req.namespace
            };
        }
        let snap = self.state().snapshot();
        if snap.namespace(&vol.namespace).is_none() {
            return Err(ServerError::bad_request(format!(
                "volume validation failed: no such namespace {:?}",
                vol.namespace
            )));
        }
        let existing = if vol.id.is_empty() {
            None
        } else {
            let Some(old) = snap.host_volume(&vol.namespace, &vol.id) else {
                return Err(ServerError::bad_request(format!(
                    "cannot update volume {:?}: volume does not exist",
                    vol.id
                )));
            };
            validate_update(&snap, &vol, &old)?;
            Some(old)
        };
        if req.register {
            if vol.node_id.is_empty() {
                return Err(ServerError::bad_request(
                    "cannot register volume: node ID is required",
                ));
            }
            if vol.host_path.is_empty() {
                return Err(ServerError::bad_request(
                    "cannot register volume: host path is required",
                ));
            }
        }
        let now = now_nanos();
        match &existing {
            None => {
                vol.id = crate::env::new_id();
                vol.create_time = now;
                if !req.register {
                    if vol.plugin_id.is_empty() {
                        vol.plugin_id = DEFAULT_PLUGIN.into();
                    }
                    vol.capacity_bytes = 0;
                    vol.host_path = String::new();
                }
                if vol.requested_capabilities.is_empty() {
                    vol.requested_capabilities = HostVolume::default_capabilities();
                }
            }
            Some(old) => {
                if vol.plugin_id.is_empty() {
                    vol.plugin_id.clone_from(&old.plugin_id);
                }
                if vol.node_pool.is_empty() {
                    vol.node_pool.clone_from(&old.node_pool);
                }
                vol.node_id.clone_from(&old.node_id);
                vol.constraints.clone_from(&old.constraints);
                vol.create_time = old.create_time;
                if !req.register {
                    vol.capacity_bytes = old.capacity_bytes;
                    vol.host_path.clone_from(&old.host_path);
                }
            }
        }
        vol.state = HostVolumeState::Pending;
        vol.modify_time = now;
        vol.allocations = None;
        if !vol.node_pool.is_empty() && snap.node_pool(&vol.node_pool).is_none() {
            return Err(ServerError::bad_request(format!(
                "validating volume {:?} against state failed: node pool {:?} does not exist",
                vol.name, vol.node_pool
            )));
        }
        let node = if req.register {
            let node = snap.node(&vol.node_id).ok_or_else(|| {
                ServerError::bad_request(format!(
                    "validating volume {:?} against state failed: node {:?} does not exist",
                    vol.name, vol.node_id
                ))
            })?;
            if !vol.node_pool.is_empty() && node.node_pool != vol.node_pool {
                return Err(ServerError::bad_request(format!(
                    "node ID {:?} is not in pool {:?}",
                    vol.node_id, vol.node_pool
                )));
            }
            node
        } else {
            place(&snap, &vol, existing.is_some()).map_err(|e| {
                ServerError::bad_request(format!("could not place volume {:?}: {e}", vol.name))
            })?
        };
        vol.node_id.clone_from(&node.id);
        vol.node_pool.clone_from(&node.node_pool);

        let transport = self.csi_transport()?;
        let call = ClientHostVolumeRequest {
            op: if req.register { "register" } else { "create" }.into(),
            id: vol.id.clone(),
            name: vol.name.clone(),
            plugin_id: vol.plugin_id.clone(),
            namespace: vol.namespace.clone(),
            node_id: node.id.clone(),
            node_pool: node.node_pool.clone(),
            capacity_min_bytes: vol.requested_capacity_min_bytes,
            capacity_max_bytes: vol.requested_capacity_max_bytes,
            host_path: vol.host_path.clone(),
            parameters: vol.parameters.clone().unwrap_or_default(),
        };
        let what = format!(
            "{} volume {:?} on node {}",
            if req.register {
                "registering"
            } else {
                "creating"
            },
            vol.name,
            node.id
        );
        // A new volume is recorded (pending) before its client is asked: should the answer be
        // lost after the client made it, or this server lose leadership meanwhile, the volume
        // is still tracked (the node's fingerprint makes it ready, and a delete removes it from
        // the node), never a directory no server knows of.
        let fresh = existing.is_none();
        if fresh {
            self.apply(Command::HostVolumeUpsert {
                volume: vol.clone(),
            })
            .await?;
        }
        let reply = match transport.host_volume(&node, call).await {
            Ok(reply) => reply,
            Err(CallFailure::Lost(m)) if fresh => {
                return Err(ServerError::new(
                    ErrorCode::Unavailable,
                    format!(
                        "{what}: no definite answer from the client: {m}; the volume is kept as \
                         pending with ID {id}: it turns ready if the node made it; create it \
                         again with id = \"{id}\" to retry, or delete it with `caravan volume \
                         delete -type host {id}`",
                        id = vol.id
                    ),
                ));
            }
            Err(f) => {
                if fresh {
                    // The client made nothing (it refused, or was never reached).
                    self.forget_pending_volume(&vol).await;
                }
                return Err(failure(&what, f));
            }
        };
        if !req.register {
            vol.host_path = reply.host_path;
            vol.capacity_bytes = reply.capacity_bytes;
        }
        let applied = self
            .apply(Command::HostVolumeUpsert {
                volume: vol.clone(),
            })
            .await?;
        let stored = self
            .state()
            .snapshot()
            .host_volume(&vol.namespace, &vol.id)
            .map_or(vol, |v| (*v).clone());
        tracing::info!(volume = %stored.id, name = %stored.name, node = %stored.node_id, "host volume stored");
        Ok(HostVolumeCreateResponse {
            volume: Some(stored),
            warnings: String::new(),
            index: applied.index,
        })
    }

    /// Deletes a sticky claim (`id` in the request; `force` unused); forwarded to the leader.
    /// Its index.
    pub async fn host_volume_claim_delete(
        &self,
        req: HostVolumeDeleteRequest,
    ) -> Result<u64, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::HostVolumeClaimDeleteMethod>(&leader, &req)
                    .await
            }
            None => self.host_volume_claim_delete_local(req).await,
        }
    }

    pub(crate) async fn host_volume_claim_delete_local(
        &self,
        req: HostVolumeDeleteRequest,
    ) -> Result<u64, ServerError> {
        let snap = self.state().snapshot();
        let Some(claim) = snap
            .host_volume_claim(&req.id)
            .filter(|c| c.namespace == req.namespace)
        else {
            return Err(ServerError::not_found(format!(
                "task group volume claim {} does not exist in namespace {}",
                req.id, req.namespace
            )));
        };
        let applied = self
            .apply(Command::HostVolumeClaimDelete {
                namespace: req.namespace,
                id: req.id,
            })
            .await?;
        // A group held back by the claim (its volume's node down) may be placed elsewhere now:
        // the job is evaluated again, as after a node change (a blocked evaluation would
        // otherwise wait for unrelated capacity).
        let running = snap
            .job(&claim.namespace, &claim.job_id)
            .is_some_and(|j| !j.stop);
        if running {
            if let Err(e) = self
                .job_evaluate_local(&claim.namespace, &claim.job_id, false)
                .await
            {
                tracing::warn!(job = %claim.job_id, error = %e, "evaluating the job after its volume claim was deleted failed");
            }
        }
        Ok(applied.index)
    }

    /// Removes the pending record of a create the client refused; if that fails the volume stays
    /// pending, for the user to delete.
    async fn forget_pending_volume(&self, vol: &HostVolume) {
        let removed = self
            .apply(Command::HostVolumeDelete {
                namespace: vol.namespace.clone(),
                id: vol.id.clone(),
            })
            .await;
        if let Err(e) = removed {
            tracing::warn!(volume = %vol.id, error = %e, "cannot remove the record of a refused host volume create; it stays pending");
        }
    }

    pub(crate) async fn host_volume_delete_local(
        &self,
        req: HostVolumeDeleteRequest,
    ) -> Result<HostVolumeDeleteResponse, ServerError> {
        let _one_at_a_time = self.host_volume_lock().lock().await;
        if req.id.is_empty() {
            return Err(ServerError::bad_request("missing volume ID to delete"));
        }
        let ns = if req.namespace.is_empty() {
            "default"
        } else {
            req.namespace.as_str()
        };
        let snap = self.state().snapshot();
        let Some(vol) = snap.host_volume(ns, &req.id) else {
            return Err(ServerError::not_found(format!(
                "no such volume: {}",
                req.id
            )));
        };
        let users = host_volume_allocs(&snap, &vol);
        if !users.is_empty() {
            let ids: Vec<&str> = users.iter().map(|a| a.id.as_str()).collect();
            return Err(ServerError::bad_request(format!(
                "volume {} in use by allocations: [{}]",
                vol.id,
                ids.join(" ")
            )));
        }
        match snap.node(&vol.node_id) {
            Some(node) if node.status != NodeStatus::Down => {
                let transport = self.csi_transport()?;
                let call = ClientHostVolumeRequest {
                    op: "delete".into(),
                    id: vol.id.clone(),
                    name: vol.name.clone(),
                    plugin_id: vol.plugin_id.clone(),
                    namespace: vol.namespace.clone(),
                    node_id: vol.node_id.clone(),
                    node_pool: node.node_pool.clone(),
                    host_path: vol.host_path.clone(),
                    parameters: vol.parameters.clone().unwrap_or_default(),
                    ..ClientHostVolumeRequest::default()
                };
                match transport.host_volume(&node, call).await {
                    Ok(_) => {}
                    Err(CallFailure::NotDelivered(m)) if req.force => {
                        tracing::warn!(volume = %vol.id, error = %m, "client unreachable; host volume removed by force");
                    }
                    Err(CallFailure::NotDelivered(m)) => {
                        return Err(ServerError::new(
                            ErrorCode::Unavailable,
                            format!(
                                "volume cannot be removed from an unreachable node without force=true: {m}"
                            ),
                        ))
                    }
                    Err(f) => return Err(failure(&format!("deleting volume {}", vol.id), f)),
                }
            }
            _ if req.force => {}
            _ => {
                return Err(ServerError::bad_request(
                    "volume cannot be removed from unknown node without force=true",
                ))
            }
        }
        let applied = self
            .apply(Command::HostVolumeDelete {
                namespace: vol.namespace.clone(),
                id: vol.id.clone(),
            })
            .await?;
        Ok(HostVolumeDeleteResponse {
            index: applied.index,
        })
    }
}

/// Nomad's `ValidateUpdate`: a volume in use is not changed, nor moved.
fn validate_update(
    snap: &StateSnapshot,
    vol: &HostVolume,
    old: &HostVolume,
) -> Result<(), ServerError> {
    let mut errs = Vec::new();
    let users = host_volume_allocs(snap, old);
    if !users.is_empty() {
        let ids: Vec<&str> = users.iter().map(|a| a.id.as_str()).collect();
        errs.push(format!(
            "cannot update a volume in use: claimed by allocs ({})",
            ids.join(", ")
        ));
    }
    if !vol.node_id.is_empty() && vol.node_id != old.node_id {
        errs.push("node ID cannot be updated".to_string());
    }
    if !vol.node_pool.is_empty() && vol.node_pool != old.node_pool {
        errs.push("node pool cannot be updated".to_string());
    }
    if vol.requested_capacity_max_bytes > 0 && vol.requested_capacity_max_bytes < old.capacity_bytes
    {
        errs.push(format!(
            "capacity_max ({}) cannot be less than existing provisioned capacity ({})",
            vol.requested_capacity_max_bytes, old.capacity_bytes
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ServerError::bad_request(format!(
            "validating volume {:?} update failed: {}",
            vol.id,
            errs.join("; ")
        )))
    }
}

/// Nomad's `placeHostVolume`: the node named, if it has the plugin and meets the constraints;
/// else a ready node of the pool that has the plugin, meets the constraints and holds no host
/// volume of this name yet (the one with the fewest dynamic volumes).
fn place(
    snap: &StateSnapshot,
    vol: &HostVolume,
    update: bool,
) -> Result<std::sync::Arc<Node>, String> {
    let mut constraints = vec![model::Constraint::new(
        &format!(
            "${{attr.{}}}",
            model::host_volume::plugin_attribute(&vol.plugin_id)
        ),
        "is_set",
        "",
    )];
    constraints.extend(vol.constraints.iter().flatten().cloned());
    if !vol.node_id.is_empty() {
        let node = snap
            .node(&vol.node_id)
            .ok_or_else(|| format!("no such node {}", vol.node_id))?;
        if !scheduler::node_meets_constraints(&constraints, &node) {
            return Err(format!(
                "node {} is not feasible for volume (does it have the {:?} host volume plugin?)",
                vol.node_id, vol.plugin_id
            ));
        }
        if !update
            && (node.host_volumes.contains_key(&vol.name)
                || snap
                    .host_volumes_on_node(&node.id)
                    .iter()
                    .any(|v| v.name == vol.name))
        {
            return Err(format!(
                "node {} already has a host volume named {:?}",
                node.id, vol.name
            ));
        }
        return Ok(node);
    }
    let (mut existing, mut infeasible) = (0, 0);
    let mut best: Option<(usize, std::sync::Arc<Node>)> = None;
    for node in snap.nodes("") {
        if node.status != NodeStatus::Ready {
            continue;
        }
        if !vol.node_pool.is_empty() && node.node_pool != vol.node_pool {
            continue;
        }
        let on_node = snap.host_volumes_on_node(&node.id);
        if node.host_volumes.contains_key(&vol.name) || on_node.iter().any(|v| v.name == vol.name) {
            existing += 1;
            continue;
        }
        if !scheduler::node_meets_constraints(&constraints, &node) {
            infeasible += 1;
            continue;
        }
        if best.as_ref().is_none_or(|(n, _)| on_node.len() < *n) {
            best = Some((on_node.len(), node));
        }
    }
    best.map(|(_, n)| n).ok_or_else(|| {
        format!(
            "no node meets constraints: {existing} nodes already have a volume of this name, \
             {infeasible} lack the {:?} plugin or fail a constraint",
            vol.plugin_id
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::group::{TaskGroup, VolumeRequest};

    #[test]
    fn an_allocation_uses_a_volume_by_source_or_per_alloc_name() {
        let mut group = TaskGroup {
            name: "g".into(),
            ..TaskGroup::default()
        };
        group.volumes.insert(
            "v".into(),
            VolumeRequest {
                volume_type: "host".into(),
                source: "data".into(),
                ..VolumeRequest::default()
            },
        );
        let job = model::Job {
            task_groups: vec![group.clone()],
            ..model::Job::default()
        };
        let alloc = Allocation {
            name: "j.g[2]".into(),
            task_group: "g".into(),
            job: Some(std::sync::Arc::new(job)),
            ..Allocation::default()
        };
        assert!(uses(&alloc, "data"));
        assert!(!uses(&alloc, "other"));
        let mut per = group;
        per.volumes.get_mut("v").expect("v").per_alloc = true;
        let alloc = Allocation {
            job: Some(std::sync::Arc::new(model::Job {
                task_groups: vec![per],
                ..model::Job::default()
            })),
            ..alloc
        };
        assert!(uses(&alloc, "data[2]"));
        assert!(!uses(&alloc, "data"));
    }
}
