//! Nodes (Nomad's `upsertNodeTxn`, `deleteNodeTxn`, `updateNodeStatusTxn`, `updateNodeDrainImpl`,
//! `updateNodeEligibilityImpl`).

use super::Txn;
use crate::error::StateError;
use crate::limits::NODE_EVENTS_MAX;
use crate::time::format_unix_secs;
use model::node::{
    DrainMetadata, DrainStatus, DrainStrategy, Node, NodeEvent, NodeStatus, SchedulingEligibility,
};
use model::node_pool::NodePool;
use std::collections::BTreeMap;

const NODE_EVENT_REGISTERED: &str = "Node registered";
const NODE_EVENT_REREGISTERED: &str = "Node re-registered";
const NODE_EVENT_SUBSYSTEM_CLUSTER: &str = "Cluster";

fn cluster_event(message: &str, node: &Node) -> NodeEvent {
    NodeEvent {
        message: message.into(),
        subsystem: NODE_EVENT_SUBSYSTEM_CLUSTER.into(),
        timestamp: Some(format_unix_secs(node.status_updated_at)),
        ..NodeEvent::default()
    }
}

/// Nomad's `appendNodeEvents`: stamps the event with this index and keeps the newest
/// [`NODE_EVENTS_MAX`].
fn append_event(index: u64, node: &mut Node, mut event: NodeEvent) {
    event.create_index = index;
    node.events.push(event);
    let excess = node.events.len().saturating_sub(NODE_EVENTS_MAX);
    node.events.drain(..excess);
}

/// `NodeRegister`. A new node gets a "Node registered" event. A re-registering node keeps its create
/// index, events, scheduling eligibility and drain (the servers own those, not the client), and gets a
/// "Node re-registered" event when it comes back from `down`.
pub(super) fn register(tx: &mut Txn, node: &Node) -> Result<(), StateError> {
    if node.id.is_empty() {
        return Err(StateError::invalid("node has no ID"));
    }
    let index = tx.index();
    let mut node = node.clone();
    node.modify_index = index;
    match tx.nodes().get(&node.id).cloned() {
        Some(old) => {
            node.create_index = old.create_index;
            node.events.clone_from(&old.events);
            if old.status == NodeStatus::Down && node.status != NodeStatus::Down {
                let event = cluster_event(NODE_EVENT_REREGISTERED, &node);
                append_event(index, &mut node, event);
            }
            node.scheduling_eligibility
                .clone_from(&old.scheduling_eligibility);
            node.drain_strategy.clone_from(&old.drain_strategy);
            node.last_drain.clone_from(&old.last_drain);
            node.drain = node.drain_strategy.is_some();
        }
        None => {
            node.create_index = index;
            // As in Nomad, the first event is not stamped with an index.
            node.events = vec![cluster_event(NODE_EVENT_REGISTERED, &node)];
        }
    }
    super::csi::node_plugins_changed(tx, &node);
    super::host_volumes::follow_node(tx, &node);
    // A node may name a pool nobody created: it is created for it, as Nomad's servers do.
    let pool = node.node_pool.clone();
    if !pool.is_empty() && !NodePool::is_built_in(&pool) && !tx.node_pools().contains_key(&pool) {
        tx.put_node_pool(NodePool {
            name: pool,
            create_index: index,
            modify_index: index,
            ..NodePool::default()
        });
    }
    tx.put_node(node);
    Ok(())
}

/// `NodePoolUpsert`: each pool valid and not built in, or nothing changes; a replaced pool keeps
/// its create index.
pub(super) fn upsert_pools(tx: &mut Txn, pools: &[NodePool]) -> Result<(), StateError> {
    if pools.is_empty() {
        return Err(StateError::invalid("must specify at least one node pool"));
    }
    for pool in pools {
        pool.validate()
            .map_err(|e| StateError::invalid(format!("invalid node pool {:?}: {e}", pool.name)))?;
        if NodePool::is_built_in(&pool.name) {
            return Err(StateError::invalid(format!(
                "modifying node pool {:?} is not allowed",
                pool.name
            )));
        }
    }
    let index = tx.index();
    for pool in pools {
        let mut pool = pool.clone();
        pool.create_index = tx
            .node_pools()
            .get(&pool.name)
            .map_or(index, |old| old.create_index);
        pool.modify_index = index;
        tx.put_node_pool(pool);
    }
    Ok(())
}

/// `NodePoolDelete`: all or nothing (see [`crate::Command::NodePoolDelete`]).
pub(super) fn delete_pools(tx: &mut Txn, names: &[String]) -> Result<(), StateError> {
    if names.is_empty() {
        return Err(StateError::invalid(
            "must specify at least one node pool to delete",
        ));
    }
    for name in names {
        if NodePool::is_built_in(name) {
            return Err(StateError::invalid(format!(
                "deleting node pool {name:?} is not allowed"
            )));
        }
        if !tx.node_pools().contains_key(name) {
            return Err(StateError::NotFound(format!("node pool {name} not found")));
        }
        if tx.nodes().values().any(|n| &n.node_pool == name) {
            return Err(StateError::Conflict(format!(
                "node pool {name:?} has nodes; move them to another pool first"
            )));
        }
        if tx.jobs().values().any(|j| {
            j.node_pool.as_deref() == Some(name.as_str())
                && j.status != Some(model::JobStatus::Dead)
        }) {
            return Err(StateError::Conflict(format!(
                "node pool {name:?} has non-terminal jobs; stop them first"
            )));
        }
    }
    for name in names {
        tx.delete_node_pool(name);
    }
    Ok(())
}

/// `NodeDeregister`: every ID must exist, or nothing is removed.
pub(super) fn deregister(tx: &mut Txn, node_ids: &[String]) -> Result<(), StateError> {
    if node_ids.is_empty() {
        return Err(StateError::invalid("node ids missing"));
    }
    for id in node_ids {
        if tx.delete_node(id).is_none() {
            return Err(StateError::NotFound(format!("node not found: {id}")));
        }
        super::csi::node_gone(tx, id, true);
    }
    Ok(())
}

/// `NodeUpdateStatus` (heartbeats, missed heartbeats).
pub(super) fn update_status(
    tx: &mut Txn,
    node_id: &str,
    status: &NodeStatus,
    updated_at: i64,
) -> Result<(), StateError> {
    let Some(node) = tx.nodes().get(node_id).cloned() else {
        return Err(StateError::NotFound("node not found".into()));
    };
    let mut node = (*node).clone();
    node.status = status.clone();
    node.status_updated_at = updated_at;
    node.modify_index = tx.index();
    if *status == NodeStatus::Down {
        super::csi::node_gone(tx, node_id, false);
        super::services::node_down(tx, node_id);
    }
    super::host_volumes::follow_node(tx, &node);
    tx.put_node(node);
    Ok(())
}

/// What `NodeUpdateDrain` changes.
pub(super) struct DrainUpdate<'a> {
    pub strategy: Option<&'a DrainStrategy>,
    pub mark_eligible: bool,
    pub complete: bool,
    pub event: Option<&'a NodeEvent>,
    pub meta: &'a BTreeMap<String, String>,
    pub updated_at: i64,
}

/// `NodeUpdateDrain` (Nomad's `updateNodeDrainImpl`): the strategy, the eligibility it implies, the
/// event, and `LastDrain` — started by a new drain, updated by a change, closed by an end. Setting
/// no strategy on a node that has none changes only the eligibility.
pub(super) fn update_drain(
    tx: &mut Txn,
    node_id: &str,
    update: &DrainUpdate<'_>,
) -> Result<(), StateError> {
    let Some(old) = tx.nodes().get(node_id).cloned() else {
        return Err(StateError::NotFound(format!("node not found: {node_id}")));
    };
    let index = tx.index();
    let mut node = (*old).clone();
    if let Some(event) = update.event {
        append_event(index, &mut node, event.clone());
    }
    node.drain_strategy = update.strategy.cloned();
    node.drain = node.drain_strategy.is_some();
    if node.drain {
        node.scheduling_eligibility = SchedulingEligibility::Ineligible.as_str().into();
    } else if update.mark_eligible {
        node.scheduling_eligibility = SchedulingEligibility::Eligible.as_str().into();
    }
    if old.drain_strategy.is_some() || node.drain {
        let at = format_unix_secs(update.updated_at);
        let mut last = match (&old.drain_strategy, &node.last_drain) {
            (None, _) | (Some(_), None) => DrainMetadata {
                started_at: Some(at.clone()),
                meta: update.meta.clone(),
                ..DrainMetadata::default()
            },
            (Some(_), Some(last)) => last.clone(),
        };
        last.updated_at = Some(at);
        if !update.meta.is_empty() {
            last.meta.clone_from(update.meta);
        }
        last.status = match (node.drain, update.complete) {
            (true, _) => DrainStatus::Draining,
            (false, true) => DrainStatus::Complete,
            (false, false) => DrainStatus::Canceled,
        };
        node.last_drain = Some(last);
    }
    node.modify_index = index;
    tx.put_node(node);
    Ok(())
}

/// `NodeUpdateEligibility` (Nomad's `updateNodeEligibilityImpl`): refuses to make a draining node
/// eligible.
pub(super) fn update_eligibility(
    tx: &mut Txn,
    node_id: &str,
    eligibility: &SchedulingEligibility,
    event: Option<&NodeEvent>,
) -> Result<(), StateError> {
    if !eligibility.is_known() {
        return Err(StateError::invalid(format!(
            "Eligibility: unknown scheduling eligibility {:?}; expected one of {}",
            eligibility.as_str(),
            SchedulingEligibility::NAMES.join(", ")
        )));
    }
    let Some(old) = tx.nodes().get(node_id).cloned() else {
        return Err(StateError::NotFound(format!("node not found: {node_id}")));
    };
    if old.drain_strategy.is_some() && *eligibility == SchedulingEligibility::Eligible {
        return Err(StateError::invalid(
            "can not set node's scheduling eligibility to eligible while it is draining",
        ));
    }
    let index = tx.index();
    let mut node = (*old).clone();
    if let Some(event) = event {
        append_event(index, &mut node, event.clone());
    }
    node.scheduling_eligibility = eligibility.clone();
    node.modify_index = index;
    tx.put_node(node);
    Ok(())
}
