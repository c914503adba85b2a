//! Dynamic host volumes: stored as their node's client made or registered them, and following
//! their node (Nomad's `UpsertHostVolume` and `upsertHostVolumeForNode`).
//!
//! **Invariant:** a stored volume's node exists when it is stored, its `NodePool` is its node's,
//! and its state is `ready` exactly while its node is not down and fingerprints a host volume of
//! its name at its path (`pending` before the first fingerprint, `unavailable` after one is
//! lost); a volume stored before its path was known takes the fingerprinted one.

use super::Txn;
use crate::error::StateError;
use model::alloc::Allocation;
use model::host_volume::{HostVolume, HostVolumeState, TaskGroupHostVolumeClaim};
use model::node::{Node, NodeStatus};

pub(super) fn upsert(tx: &mut Txn, volume: &HostVolume) -> Result<(), StateError> {
    if volume.id.is_empty() {
        return Err(StateError::invalid("host volume has no ID"));
    }
    if volume.namespace != model::job::DEFAULT_NAMESPACE
        && !tx.namespaces().contains_key(&volume.namespace)
    {
        return Err(StateError::invalid(format!(
            "host volume {} is in nonexistent namespace {}",
            volume.id, volume.namespace
        )));
    }
    let Some(node) = tx.nodes().get(&volume.node_id).cloned() else {
        return Err(StateError::invalid(format!(
            "host volume {} has nonexistent node ID {}",
            volume.id, volume.node_id
        )));
    };
    let index = tx.index();
    let mut v = volume.clone();
    match tx
        .host_volumes()
        .get(&(volume.namespace.clone(), volume.id.clone()))
    {
        Some(old) => {
            v.create_index = old.create_index;
            v.create_time = old.create_time;
        }
        None => v.create_index = index,
    }
    if let Some(path) = fingerprinted(&node, &v) {
        if node.status != NodeStatus::Down {
            v.state = HostVolumeState::Ready;
            v.host_path = path;
        }
    }
    v.node_pool.clone_from(&node.node_pool);
    v.allocations = None;
    v.modify_index = index;
    tx.put_host_volume(v);
    Ok(())
}

/// The path under which `node` fingerprints `v`: a host volume of its name, at its path once
/// its path is known (a create whose answer was lost knows none yet, and takes the node's).
fn fingerprinted(node: &Node, v: &HostVolume) -> Option<String> {
    node.host_volumes
        .get(&v.name)
        // A node that reports the volume's ID must report this one (not a static volume or
        // another dynamic one of the same name).
        .filter(|hv| hv.id.is_empty() || hv.id == v.id)
        .filter(|hv| v.host_path.is_empty() || hv.path == v.host_path)
        .map(|hv| hv.path.clone())
}

pub(super) fn delete(tx: &mut Txn, ns: &str, id: &str) {
    if tx
        .host_volumes()
        .contains_key(&(ns.to_owned(), id.to_owned()))
    {
        tx.delete_host_volume(ns, id);
    }
}

/// After `node` is stored (registered, or its status changed): its volumes' states and pools.
pub(super) fn follow_node(tx: &mut Txn, node: &Node) {
    let index = tx.index();
    let changed: Vec<HostVolume> = tx
        .host_volumes()
        .values()
        .filter(|v| v.node_id == node.id)
        .filter_map(|v| {
            let path = fingerprinted(node, v);
            let fingerprinted = path.is_some();
            let state = if node.status == NodeStatus::Down {
                if fingerprinted || v.state == HostVolumeState::Ready {
                    HostVolumeState::Unavailable
                } else {
                    v.state
                }
            } else if fingerprinted && node.status == NodeStatus::Ready {
                HostVolumeState::Ready
            } else if !fingerprinted && v.state == HostVolumeState::Ready {
                HostVolumeState::Unavailable
            } else {
                v.state
            };
            let path = path.filter(|p| v.host_path.is_empty() && !p.is_empty());
            if state == v.state && v.node_pool == node.node_pool && path.is_none() {
                return None;
            }
            let mut v = (**v).clone();
            v.state = state;
            if let Some(path) = path {
                v.host_path = path;
            }
            v.node_pool.clone_from(&node.node_pool);
            v.modify_index = index;
            Some(v)
        })
        .collect();
    for v in changed {
        tx.put_host_volume(v);
    }
}

/// Removes a sticky claim by ID, in its namespace only.
pub(super) fn delete_claim(tx: &mut Txn, ns: &str, id: &str) {
    if tx
        .host_volume_claims()
        .get(id)
        .is_some_and(|c| c.namespace == ns)
    {
        tx.delete_host_volume_claim(id);
    }
}

/// Removes every sticky claim of a purged job.
pub(super) fn delete_claims_of_job(tx: &mut Txn, ns: &str, job_id: &str) {
    let ids: Vec<String> = tx
        .host_volume_claims()
        .values()
        .filter(|c| c.namespace == ns && c.job_id == job_id)
        .map(|c| c.id.clone())
        .collect();
    for id in ids {
        tx.delete_host_volume_claim(&id);
    }
}

/// After a plan placed `alloc`: its group claims each dynamic host volume it mounts with
/// `sticky = true` on the allocation's node (Nomad's `updateStickyVolumeClaimsFromAlloc`). One
/// claim per (namespace, job, group, volume), its ID derived from those (the FSM must give every
/// server the same one); a replacement takes the claim over.
pub(super) fn claim_sticky(tx: &mut Txn, alloc: &Allocation) {
    let Some(group) = alloc
        .job
        .as_deref()
        .and_then(|j| j.task_groups.iter().find(|g| g.name == alloc.task_group))
    else {
        return;
    };
    let sources: Vec<String> = group
        .volumes
        .values()
        .filter(|v| v.sticky && v.volume_type == "host")
        .map(|v| v.source.clone())
        .collect();
    if sources.is_empty() {
        return;
    }
    let Some(node) = tx.nodes().get(&alloc.node_id).cloned() else {
        return;
    };
    let index = tx.index();
    for source in sources {
        let Some(hv) = node
            .host_volumes
            .get(&source)
            .filter(|hv| !hv.id.is_empty())
        else {
            continue;
        };
        // Only a volume of the allocation's namespace, on its node, as stored.
        let stored = tx
            .host_volumes()
            .get(&(alloc.namespace.clone(), hv.id.clone()))
            .is_some_and(|v| v.node_id == alloc.node_id);
        if !stored {
            continue;
        }
        let key = format!(
            "{}\0{}\0{}\0{}",
            alloc.namespace, alloc.job_id, alloc.task_group, hv.id
        );
        let id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, key.as_bytes()).to_string();
        let claim = match tx.host_volume_claims().get(&id) {
            Some(old) if old.alloc_id == alloc.id => continue,
            Some(old) => TaskGroupHostVolumeClaim {
                alloc_id: alloc.id.clone(),
                modify_index: index,
                ..(**old).clone()
            },
            None => TaskGroupHostVolumeClaim {
                id,
                namespace: alloc.namespace.clone(),
                job_id: alloc.job_id.clone(),
                task_group_name: alloc.task_group.clone(),
                alloc_id: alloc.id.clone(),
                volume_id: hv.id.clone(),
                volume_name: source,
                create_index: index,
                modify_index: index,
            },
        };
        tx.put_host_volume_claim(claim);
    }
}
