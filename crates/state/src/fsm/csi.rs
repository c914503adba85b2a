//! CSI volumes, plugins and the controller-call serializer (Nomad's `CSIVolumeRegister`,
//! `CSIVolumeDeregister`, `CSIVolumeClaim`, `upsertCSIPluginsForNode`; the serializer's
//! begin/end records are Caravan's).
//!
//! Plugins are not registered by anyone: the table follows what nodes fingerprint. Every node
//! register rewrites that node's entries in every plugin, a node going down marks its entries
//! unhealthy, and a plugin with no entries left is deleted.

use super::Txn;
use crate::error::StateError;
use model::alloc::Allocation;
use model::csi::{
    is_writer_access_mode, CSIControllerOp, CSIInfo, CSIPlugin, CSIVolume, CSIVolumeClaim,
    CSIVolumeClaimMode, CSIVolumeClaimState, ACCESS_MODE_MULTI_NODE_SINGLE_WRITER,
    ACCESS_MODE_SINGLE_NODE_READER, ACCESS_MODE_SINGLE_NODE_WRITER,
};
use model::node::Node;
use std::collections::BTreeSet;

/// `CsiVolumeRegister`. A new volume gets this index as its create index; an existing one keeps
/// its create index and its claims (the endpoint already refused changes to identity fields).
pub(super) fn register(tx: &mut Txn, volumes: &[CSIVolume]) -> Result<(), StateError> {
    if volumes.is_empty() {
        return Err(StateError::invalid("no volumes to register"));
    }
    for v in volumes {
        if v.id.is_empty() || v.namespace.is_empty() || v.plugin_id.is_empty() {
            return Err(StateError::invalid(
                "a volume needs an ID, a namespace and a plugin ID",
            ));
        }
        let mut volume = v.clone();
        volume.modify_index = tx.index();
        match tx.csi_volumes().get(&(v.namespace.clone(), v.id.clone())) {
            Some(old) => {
                volume.create_index = old.create_index;
                volume.read_claims.clone_from(&old.read_claims);
                volume.write_claims.clone_from(&old.write_claims);
                volume.past_claims.clone_from(&old.past_claims);
                volume.access_mode.clone_from(&old.access_mode);
                volume.attachment_mode.clone_from(&old.attachment_mode);
            }
            None => {
                volume.create_index = tx.index();
                volume.read_claims.clear();
                volume.write_claims.clear();
                volume.past_claims.clear();
            }
        }
        strip_read_fields(&mut volume);
        tx.put_csi_volume(volume);
    }
    Ok(())
}

/// The fields a read fills in (plugin health, allocations) are never stored.
fn strip_read_fields(v: &mut CSIVolume) {
    v.read_allocs.clear();
    v.write_allocs.clear();
    v.schedulable = false;
    v.provider.clear();
    v.provider_version.clear();
    v.controller_required = false;
    v.controllers_healthy = 0;
    v.controllers_expected = 0;
    v.nodes_healthy = 0;
    v.nodes_expected = 0;
}

/// `CsiVolumeDeregister`: all or nothing.
pub(super) fn deregister(
    tx: &mut Txn,
    namespace: &str,
    ids: &[String],
    force: bool,
) -> Result<(), StateError> {
    if ids.is_empty() {
        return Err(StateError::invalid("no volume IDs to deregister"));
    }
    for id in ids {
        let Some(volume) = tx
            .csi_volumes()
            .get(&(namespace.to_string(), id.clone()))
            .cloned()
        else {
            return Err(StateError::NotFound(format!("volume not found: {id}")));
        };
        if volume.in_use() {
            let live: Vec<&String> = volume
                .read_claims
                .keys()
                .chain(volume.write_claims.keys())
                .filter(|alloc| {
                    tx.allocs()
                        .get(alloc.as_str())
                        .is_some_and(|a| !a.is_terminal())
                })
                .collect();
            if !force || !live.is_empty() {
                let why = if live.is_empty() {
                    "its claims belong to stopped allocations: use -force to drop them".to_string()
                } else {
                    format!(
                        "allocation(s) {} still use it: stop them first",
                        live.iter().map(|s| short(s)).collect::<Vec<_>>().join(", ")
                    )
                };
                return Err(StateError::Conflict(format!(
                    "volume {id} is in use: {why}"
                )));
            }
        }
        tx.delete_csi_volume(namespace, id);
    }
    Ok(())
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Whether the volume's plugin can serve it now: a healthy node plugin somewhere and, when the
/// plugin needs one, a healthy controller (Nomad's `Schedulable`).
pub fn volume_schedulable(plugin: Option<&CSIPlugin>) -> bool {
    plugin.is_some_and(|p| {
        p.nodes_healthy > 0 && (!p.controller_required || p.controllers_healthy > 0)
    })
}

/// `CsiVolumeClaim`: take a claim, move a released one through its checkpoints, or (a `GC` claim)
/// only mark the volume changed so the leader's volume watcher looks at it again.
pub(super) fn claim(
    tx: &mut Txn,
    namespace: &str,
    volume_id: &str,
    claim: &CSIVolumeClaim,
) -> Result<(), StateError> {
    let Some(old) = tx
        .csi_volumes()
        .get(&(namespace.to_string(), volume_id.to_string()))
        .cloned()
    else {
        return Err(StateError::NotFound(format!(
            "volume not found: {volume_id}"
        )));
    };
    let mut volume = (*old).clone();
    volume.modify_index = tx.index();
    if claim.mode == CSIVolumeClaimMode::GC {
        tx.put_csi_volume(volume);
        return Ok(());
    }
    if claim.allocation_id.is_empty() {
        return Err(StateError::invalid("a claim needs an allocation ID"));
    }
    match claim.state {
        CSIVolumeClaimState::TAKEN => {
            let alloc = tx.allocs().get(&claim.allocation_id).cloned();
            let Some(alloc) = alloc else {
                return Err(StateError::NotFound(format!(
                    "allocation not found: {}",
                    claim.allocation_id
                )));
            };
            let plugin = tx.csi_plugins().get(&volume.plugin_id).cloned();
            take(&mut volume, claim, &alloc, plugin.as_deref())?;
        }
        CSIVolumeClaimState::READY_TO_FREE => free(&mut volume, &claim.allocation_id),
        _ => {
            // A release checkpoint: the claim becomes a past claim in that state, keeping what the
            // live claim knew (the client's release carries no modes or external node ID).
            let known = volume
                .read_claims
                .remove(&claim.allocation_id)
                .or_else(|| volume.write_claims.remove(&claim.allocation_id))
                .or_else(|| volume.past_claims.get(&claim.allocation_id).cloned());
            // A claim already freed stays freed: a late checkpoint of a second release (the
            // client's and the watcher's can cross) must not bring it back.
            let Some(mut past) = known else {
                return Ok(());
            };
            past.state = claim.state;
            past.last_error.clone_from(&claim.last_error);
            if past.node_id.is_empty() {
                past.node_id.clone_from(&claim.node_id);
            }
            if past.external_node_id.is_empty() {
                past.external_node_id.clone_from(&claim.external_node_id);
            }
            volume.past_claims.insert(claim.allocation_id.clone(), past);
        }
    }
    tx.put_csi_volume(volume);
    Ok(())
}

/// Nomad's `CSIVolume.Claim` for a new claim: modes must agree, the plugin must be able to serve
/// the volume, and a free claim of the kind asked for must be left.
fn take(
    volume: &mut CSIVolume,
    claim: &CSIVolumeClaim,
    alloc: &Allocation,
    plugin: Option<&CSIPlugin>,
) -> Result<(), StateError> {
    let id = &volume.id;
    if !volume.attachment_mode.is_empty()
        && !claim.attachment_mode.is_empty()
        && volume.attachment_mode != claim.attachment_mode
    {
        return Err(StateError::Conflict(format!(
            "volume {id} is attached as {}; this claim asks for {}",
            volume.attachment_mode, claim.attachment_mode
        )));
    }
    if !volume_schedulable(plugin) {
        return Err(StateError::Conflict(format!(
            "volume {id} is not schedulable: plugin {} has no healthy node plugin{}",
            volume.plugin_id,
            if plugin.is_some_and(|p| p.controller_required) {
                " or controller"
            } else {
                ""
            }
        )));
    }
    let access = if volume.access_mode.is_empty() {
        claim.access_mode.as_str()
    } else {
        volume.access_mode.as_str()
    };
    // An allocation already holding this claim keeps it (a retried claim is idempotent).
    let mine = |c: &CSIVolumeClaim| c.allocation_id == alloc.id;
    let others = |m: &std::collections::BTreeMap<String, CSIVolumeClaim>| {
        m.values().filter(|c| !mine(c)).count()
    };
    if claim.mode == CSIVolumeClaimMode::WRITE {
        let writer = is_writer_access_mode(access)
            || (access.is_empty()
                && volume
                    .requested_capabilities
                    .iter()
                    .any(|c| is_writer_access_mode(&c.access_mode)));
        if !writer {
            return Err(StateError::Conflict(format!(
                "volume {id} is not writable: its access mode is {access}"
            )));
        }
        let single = access == ACCESS_MODE_SINGLE_NODE_WRITER
            || access == ACCESS_MODE_MULTI_NODE_SINGLE_WRITER;
        let busy = if access == ACCESS_MODE_SINGLE_NODE_WRITER {
            others(&volume.write_claims) + others(&volume.read_claims) > 0
        } else {
            single && others(&volume.write_claims) > 0
        };
        if busy {
            return Err(StateError::Conflict(format!(
                "volume max claims reached: volume {id} has exhausted its available writer claims"
            )));
        }
        volume.read_claims.remove(&alloc.id);
        volume.write_claims.insert(alloc.id.clone(), taken(claim));
    } else {
        let busy = match access {
            ACCESS_MODE_SINGLE_NODE_READER => others(&volume.read_claims) > 0,
            ACCESS_MODE_SINGLE_NODE_WRITER => {
                others(&volume.read_claims) + others(&volume.write_claims) > 0
            }
            _ => false,
        };
        if busy {
            return Err(StateError::Conflict(format!(
                "volume max claims reached: volume {id} has exhausted its available reader claims"
            )));
        }
        volume.write_claims.remove(&alloc.id);
        volume.read_claims.insert(alloc.id.clone(), taken(claim));
    }
    volume.past_claims.remove(&alloc.id);
    if volume.access_mode.is_empty() {
        volume.access_mode.clone_from(&claim.access_mode);
    }
    if volume.attachment_mode.is_empty() {
        volume.attachment_mode.clone_from(&claim.attachment_mode);
    }
    Ok(())
}

fn taken(claim: &CSIVolumeClaim) -> CSIVolumeClaim {
    CSIVolumeClaim {
        state: CSIVolumeClaimState::TAKEN,
        ..claim.clone()
    }
}

/// Nomad's `claimRelease` at `ReadyToFree`: the claim is gone from every map; the last one gone
/// resets the volume's modes.
fn free(volume: &mut CSIVolume, alloc_id: &str) {
    volume.read_claims.remove(alloc_id);
    volume.write_claims.remove(alloc_id);
    volume.past_claims.remove(alloc_id);
    if volume.read_claims.is_empty() && volume.write_claims.is_empty() {
        volume.access_mode.clear();
        volume.attachment_mode.clear();
    }
}

/// `CsiControllerOpBegin`: at most one destructive controller call in flight per plugin.
pub(super) fn op_begin(tx: &mut Txn, op: &CSIControllerOp) -> Result<(), StateError> {
    if op.id.is_empty() || op.plugin_id.is_empty() {
        return Err(StateError::invalid(
            "a controller call needs an ID and a plugin ID",
        ));
    }
    if let Some(current) = tx.csi_controller_ops().get(&op.plugin_id) {
        if current.id != op.id {
            return Err(StateError::Conflict(format!(
                "plugin {}: controller call {} ({} of volume {}) is still in flight",
                op.plugin_id, current.id, current.method, current.volume_id
            )));
        }
        return Ok(());
    }
    let mut op = op.clone();
    op.create_index = tx.index();
    op.modify_index = tx.index();
    op.attempts = op.attempts.max(1);
    tx.put_csi_controller_op(op);
    Ok(())
}

/// How long past a recorded call's deadline another server must wait before it takes the call
/// over (the clocks of servers and clients are not perfectly in step).
pub const CONTROLLER_OP_DEADLINE_SLACK_NS: i64 = 1_000_000_000;

/// `CsiControllerOpRenew`: compare-and-set on the record's version. The owner renews before
/// each resend; a new leader takes the record over only once its deadline has passed.
pub(super) fn op_renew(tx: &mut Txn, cmd: &crate::Command) -> Result<(), StateError> {
    let crate::Command::CsiControllerOpRenew {
        plugin_id,
        op_id,
        expect_index,
        owner,
        term,
        now,
        deadline,
        controller_node_id,
        attempts,
        unresolved,
        last_error,
    } = cmd
    else {
        return Err(StateError::invalid("not a controller call renewal"));
    };
    let Some(current) = tx.csi_controller_ops().get(plugin_id).cloned() else {
        return Err(StateError::Conflict(format!(
            "plugin {plugin_id}: controller call {op_id} is no longer recorded"
        )));
    };
    if current.id != *op_id || current.modify_index != *expect_index {
        return Err(StateError::Conflict(format!(
            "plugin {plugin_id}: controller call {} changed at index {} (expected {op_id} at {expect_index})",
            current.id, current.modify_index
        )));
    }
    if *term < current.term {
        return Err(StateError::Conflict(format!(
            "plugin {plugin_id}: controller call {op_id} is owned in term {}, not {term}",
            current.term
        )));
    }
    let takeover = current.owner != *owner || current.term != *term;
    if takeover
        && *now
            < current
                .deadline
                .saturating_add(CONTROLLER_OP_DEADLINE_SLACK_NS)
    {
        return Err(StateError::Conflict(format!(
            "plugin {plugin_id}: controller call {op_id} may still be in flight until its deadline"
        )));
    }
    let mut op = (*current).clone();
    op.owner = *owner;
    op.term = *term;
    op.deadline = *deadline;
    op.controller_node_id.clone_from(controller_node_id);
    op.attempts = *attempts;
    op.unresolved = *unresolved;
    op.last_error.clone_from(last_error);
    op.modify_index = tx.index();
    tx.put_csi_controller_op(op);
    Ok(())
}

/// `CsiControllerOpEnd`: clears the plugin's call only if it is still this one, and (when the
/// command names an owner) still owned by that server in that term.
pub(super) fn op_end(
    tx: &mut Txn,
    plugin_id: &str,
    op_id: &str,
    owner: u64,
    term: u64,
) -> Result<(), StateError> {
    let Some(current) = tx.csi_controller_ops().get(plugin_id).cloned() else {
        return Ok(());
    };
    if current.id != op_id {
        return Ok(());
    }
    if owner != 0 && (current.owner != owner || current.term != term) {
        return Err(StateError::Conflict(format!(
            "plugin {plugin_id}: controller call {op_id} was taken over by server {} in term {}",
            current.owner, current.term
        )));
    }
    tx.delete_csi_controller_op(plugin_id);
    Ok(())
}

/// The node's plugin entries after it registered (Nomad's `upsertCSIPluginsForNode`, and the
/// removal of entries the node no longer reports).
pub(super) fn node_plugins_changed(tx: &mut Txn, node: &Node) {
    let mut ids: BTreeSet<String> = node
        .csi_controller_plugins
        .keys()
        .chain(node.csi_node_plugins.keys())
        .cloned()
        .collect();
    ids.extend(
        tx.csi_plugins()
            .values()
            .filter(|p| p.controllers.contains_key(&node.id) || p.nodes.contains_key(&node.id))
            .map(|p| p.id.clone()),
    );
    for id in ids {
        let mut plugin = tx
            .csi_plugins()
            .get(&id)
            .map(|p| (**p).clone())
            .unwrap_or_else(|| CSIPlugin {
                id: id.clone(),
                create_index: tx.index(),
                ..CSIPlugin::default()
            });
        set_entry(
            &mut plugin.controllers,
            &node.id,
            node.csi_controller_plugins.get(&id),
        );
        set_entry(&mut plugin.nodes, &node.id, node.csi_node_plugins.get(&id));
        save_plugin(tx, plugin);
    }
}

fn set_entry(
    map: &mut std::collections::BTreeMap<String, CSIInfo>,
    node_id: &str,
    info: Option<&CSIInfo>,
) {
    match info {
        Some(info) => {
            map.insert(node_id.to_string(), info.clone());
        }
        None => {
            map.remove(node_id);
        }
    }
}

/// A node went down or was removed: its entries stop counting as healthy (down) or go (removed).
pub(super) fn node_gone(tx: &mut Txn, node_id: &str, removed: bool) {
    let touched: Vec<CSIPlugin> = tx
        .csi_plugins()
        .values()
        .filter(|p| p.controllers.contains_key(node_id) || p.nodes.contains_key(node_id))
        .map(|p| (**p).clone())
        .collect();
    for mut plugin in touched {
        for map in [&mut plugin.controllers, &mut plugin.nodes] {
            if removed {
                map.remove(node_id);
            } else if let Some(info) = map.get_mut(node_id) {
                info.healthy = false;
                info.health_description = "the node is down".into();
            }
        }
        save_plugin(tx, plugin);
    }
}

/// Recounts, takes provider facts from the entries, and deletes a plugin nobody runs.
fn save_plugin(tx: &mut Txn, mut plugin: CSIPlugin) {
    if plugin.controllers.is_empty() && plugin.nodes.is_empty() {
        if tx.csi_plugins().contains_key(&plugin.id) {
            tx.delete_csi_plugin(&plugin.id);
        }
        return;
    }
    let healthy = |m: &std::collections::BTreeMap<String, CSIInfo>| {
        i64::try_from(m.values().filter(|i| i.healthy).count()).unwrap_or(i64::MAX)
    };
    plugin.controllers_healthy = healthy(&plugin.controllers);
    plugin.nodes_healthy = healthy(&plugin.nodes);
    if let Some(info) = plugin
        .controllers
        .values()
        .chain(plugin.nodes.values())
        .find(|i| !i.provider.is_empty())
    {
        plugin.provider.clone_from(&info.provider);
        plugin.version.clone_from(&info.provider_version);
    }
    plugin.controller_required = plugin
        .controllers
        .values()
        .chain(plugin.nodes.values())
        .any(|i| i.requires_controller_plugin);
    if tx.csi_plugins().get(&plugin.id).map(|p| &**p) == Some(&plugin) {
        return;
    }
    plugin.modify_index = tx.index();
    tx.put_csi_plugin(plugin);
}
