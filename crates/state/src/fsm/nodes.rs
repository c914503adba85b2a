//! Nodes (Nomad's `upsertNodeTxn`, `deleteNodeTxn`, `updateNodeStatusTxn`, `updateNodeDrainImpl`,
//! `updateNodeEligibilityImpl`).

use super::Txn;
use crate::error::StateError;
use crate::limits::NODE_EVENTS_MAX;
use crate::time::format_unix_secs;
use model::node::{
    DrainMetadata, DrainStatus, DrainStrategy, Node, NodeEvent, NodeStatus, SchedulingEligibility,
};
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
    tx.put_node(node);
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
    }
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
