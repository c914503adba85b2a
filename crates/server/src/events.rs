//! The event stream's source (Nomad's `event_broker`): every applied raft entry, with the state
//! right after it, kept in a bounded ring and turned into Nomad's events (`Job`, `Evaluation`,
//! `Allocation`, `Deployment`, `Node`, `ACLToken`, `ACLPolicy`, `Variables`) when a subscriber
//! reads it.
//!
//! Invariant: applying an entry never waits on a subscriber and never builds an event (it stores
//! the decoded command, and an O(1) state snapshot only while a stream is open); the ring holds at
//! most `capacity` entries, so a slow reader costs nothing but missing the oldest ones. With no
//! reader no old state version is kept alive (at 100,000 allocations each pinned version could
//! hold thousands of replaced allocations): entries recorded then show the state as it is when read.

use model::acl_policy::{variables_cap, Acl};
use serde_json::{json, Value};
use state::{Command, StateSnapshot};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Raft entries kept (Nomad's `event_buffer_size` default is 100 events).
pub const DEFAULT_EVENT_BUFFER: usize = 100;

struct Applied {
    index: u64,
    cmd: Arc<Command>,
    /// The state right after the entry, kept only while a stream is open.
    snap: Option<StateSnapshot>,
}

/// The ring of applied entries and a signal of the newest index.
pub struct EventBroker {
    ring: Mutex<VecDeque<Applied>>,
    capacity: usize,
    newest: watch::Sender<u64>,
}

/// One event, as Nomad writes it.
#[derive(Debug, Clone)]
pub struct Event {
    pub topic: &'static str,
    pub kind: &'static str,
    pub key: String,
    pub namespace: String,
    pub index: u64,
    pub payload: Value,
}

impl Event {
    pub fn to_json(&self) -> Value {
        json!({
            "Topic": self.topic,
            "Type": self.kind,
            "Key": self.key,
            "Namespace": self.namespace,
            "FilterKeys": Value::Null,
            "Index": self.index,
            "Payload": self.payload,
        })
    }

    /// Whether `acl` may see this event (Nomad's per-topic rules).
    pub fn allowed(&self, acl: &Acl) -> bool {
        match self.topic {
            "Job" | "Evaluation" | "Allocation" | "Deployment" => {
                acl.allow_namespace_operation(&self.namespace, "read-job")
            }
            "Node" => acl.allow_node_read(),
            "Variables" => {
                acl.allow_variable_operation(&self.namespace, &self.key, variables_cap::LIST, None)
            }
            _ => acl.is_management(),
        }
    }
}

impl EventBroker {
    pub fn new(capacity: usize) -> EventBroker {
        EventBroker {
            ring: Mutex::new(VecDeque::with_capacity(capacity.min(4096))),
            capacity: capacity.max(1),
            newest: watch::channel(0).0,
        }
    }

    /// Records an applied entry (the FSM calls this after each successful apply); `snap` is asked
    /// for only while a stream is open.
    pub fn publish(&self, index: u64, cmd: Arc<Command>, snap: impl FnOnce() -> StateSnapshot) {
        let snap = (self.newest.receiver_count() > 0).then(snap);
        if let Ok(mut ring) = self.ring.lock() {
            while ring.len() >= self.capacity {
                ring.pop_front();
            }
            ring.push_back(Applied { index, cmd, snap });
        }
        self.newest.send_replace(index);
    }

    /// Wakes when an entry newer than what the receiver saw is published.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.newest.subscribe()
    }

    /// The events of entries at or above `from`, one batch per raft index, oldest first; an entry
    /// recorded while no stream was open shows `current`.
    pub fn since(&self, from: u64, current: &StateSnapshot) -> Vec<(u64, Vec<Event>)> {
        let entries: Vec<(u64, Arc<Command>, StateSnapshot)> = match self.ring.lock() {
            Ok(ring) => ring
                .iter()
                .filter(|a| a.index >= from)
                .map(|a| {
                    let snap = a.snap.clone().unwrap_or_else(|| current.clone());
                    (a.index, Arc::clone(&a.cmd), snap)
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        entries
            .into_iter()
            .map(|(index, cmd, snap)| (index, events_of(index, &cmd, &snap)))
            .filter(|(_, events)| !events.is_empty())
            .collect()
    }
}

fn ev(
    topic: &'static str,
    kind: &'static str,
    key: &str,
    ns: &str,
    index: u64,
    payload: Value,
) -> Event {
    Event {
        topic,
        kind,
        key: key.to_string(),
        namespace: ns.to_string(),
        index,
        payload,
    }
}

fn job_event(kind: &'static str, ns: &str, id: &str, snap: &StateSnapshot, index: u64) -> Event {
    let job = snap.job(ns, id).map_or(Value::Null, |j| {
        serde_json::to_value(&*j).unwrap_or(Value::Null)
    });
    ev("Job", kind, id, ns, index, json!({ "Job": job }))
}

fn eval_events(
    evals: &[model::eval::Evaluation],
    snap: &StateSnapshot,
    index: u64,
    out: &mut Vec<Event>,
) {
    for e in evals {
        let stored = snap.eval(&e.id).map_or(Value::Null, |e| {
            serde_json::to_value(&*e).unwrap_or(Value::Null)
        });
        out.push(ev(
            "Evaluation",
            "EvaluationUpdated",
            &e.id,
            &e.namespace,
            index,
            json!({ "Evaluation": stored }),
        ));
    }
}

fn alloc_event(kind: &'static str, id: &str, snap: &StateSnapshot, index: u64) -> Option<Event> {
    let alloc = snap.alloc(id)?;
    // Nomad's allocation events carry the allocation without its job.
    let mut shown = (*alloc).clone();
    shown.job = None;
    Some(ev(
        "Allocation",
        kind,
        id,
        &alloc.namespace,
        index,
        json!({ "Allocation": serde_json::to_value(&shown).unwrap_or(Value::Null) }),
    ))
}

fn deployment_event(
    kind: &'static str,
    id: &str,
    snap: &StateSnapshot,
    index: u64,
) -> Option<Event> {
    let d = snap.deployment(id)?;
    Some(ev(
        "Deployment",
        kind,
        id,
        &d.namespace,
        index,
        json!({ "Deployment": serde_json::to_value(&*d).unwrap_or(Value::Null) }),
    ))
}

fn node_event(kind: &'static str, id: &str, snap: &StateSnapshot, index: u64) -> Event {
    let node = snap.node(id).map_or(Value::Null, |n| {
        let mut shown = (*n).clone();
        shown.secret_id = String::new();
        serde_json::to_value(&shown).unwrap_or(Value::Null)
    });
    ev("Node", kind, id, "", index, json!({ "Node": node }))
}

/// Nomad's events for one applied entry.
pub fn events_of(index: u64, cmd: &Command, snap: &StateSnapshot) -> Vec<Event> {
    let mut out = Vec::new();
    match cmd {
        Command::JobRegister { job, eval, .. } => {
            let ns = job.namespace.as_deref().unwrap_or("default");
            out.push(job_event("JobRegistered", ns, &job.id, snap, index));
            eval_events(eval.as_slice(), snap, index, &mut out);
        }
        Command::JobDeregister {
            namespace,
            job_id,
            eval,
            ..
        } => {
            out.push(job_event("JobDeregistered", namespace, job_id, snap, index));
            eval_events(eval.as_slice(), snap, index, &mut out);
        }
        Command::EvalUpsert { evals } => eval_events(evals, snap, index, &mut out),
        Command::PlanApply {
            allocs_upsert,
            allocs_stop,
            evals,
            deployment,
            deployment_updates,
            ..
        } => {
            for a in allocs_upsert {
                out.extend(alloc_event("PlanResult", &a.id, snap, index));
            }
            for s in allocs_stop {
                out.extend(alloc_event("PlanResult", &s.alloc_id, snap, index));
            }
            eval_events(evals, snap, index, &mut out);
            if let Some(d) = deployment {
                out.extend(deployment_event(
                    "DeploymentStatusUpdate",
                    &d.id,
                    snap,
                    index,
                ));
            }
            for u in deployment_updates {
                out.extend(deployment_event(
                    "DeploymentStatusUpdate",
                    &u.deployment_id,
                    snap,
                    index,
                ));
            }
        }
        Command::PlanApplyBatch { plans } => {
            for p in plans {
                out.extend(events_of(index, p, snap));
            }
        }
        Command::AllocUpsert { allocs } => {
            for a in allocs {
                out.extend(alloc_event("AllocationUpdated", &a.id, snap, index));
            }
        }
        Command::AllocClientUpdate { allocs, evals } => {
            for a in allocs {
                out.extend(alloc_event("AllocationUpdated", &a.id, snap, index));
            }
            eval_events(evals, snap, index, &mut out);
        }
        Command::AllocUpdateDesiredTransition { transitions, evals } => {
            for id in transitions.keys() {
                out.extend(alloc_event(
                    "AllocationUpdateDesiredStatus",
                    id,
                    snap,
                    index,
                ));
            }
            eval_events(evals, snap, index, &mut out);
        }
        Command::DeploymentUpsert { deployment } => {
            out.extend(deployment_event(
                "DeploymentStatusUpdate",
                &deployment.id,
                snap,
                index,
            ));
        }
        Command::DeploymentStatus { update, eval, .. } => {
            out.extend(deployment_event(
                "DeploymentStatusUpdate",
                &update.deployment_id,
                snap,
                index,
            ));
            eval_events(eval.as_slice(), snap, index, &mut out);
        }
        Command::DeploymentPromote {
            deployment_id,
            eval,
            ..
        } => {
            out.extend(deployment_event(
                "DeploymentPromotion",
                deployment_id,
                snap,
                index,
            ));
            eval_events(eval.as_slice(), snap, index, &mut out);
        }
        Command::DeploymentAllocHealth {
            deployment_id,
            eval,
            ..
        } => {
            out.extend(deployment_event(
                "DeploymentAllocHealth",
                deployment_id,
                snap,
                index,
            ));
            eval_events(eval.as_slice(), snap, index, &mut out);
        }
        Command::NodeRegister { node } => {
            out.push(node_event("NodeRegistration", &node.id, snap, index));
        }
        Command::NodeDeregister { node_ids } => {
            for id in node_ids {
                out.push(ev(
                    "Node",
                    "NodeDeregistration",
                    id,
                    "",
                    index,
                    json!({"Node": {"ID": id}}),
                ));
            }
        }
        Command::NodeUpdateStatus { node_id, .. } => {
            out.push(node_event("NodeEvent", node_id, snap, index));
        }
        Command::NodeUpdateDrain { node_id, .. } => {
            out.push(node_event("NodeDrain", node_id, snap, index));
        }
        Command::NodeUpdateEligibility { node_id, .. } => {
            out.push(node_event("NodeEligibility", node_id, snap, index));
        }
        Command::AclTokenUpsert { tokens } => {
            for t in tokens {
                let mut shown = t.clone();
                shown.secret_id = String::new();
                out.push(ev(
                    "ACLToken",
                    "ACLTokenUpserted",
                    &t.accessor_id,
                    "",
                    index,
                    json!({ "ACLToken": serde_json::to_value(&shown).unwrap_or(Value::Null) }),
                ));
            }
        }
        Command::AclTokenDelete { accessor_ids } => {
            for id in accessor_ids {
                out.push(ev(
                    "ACLToken",
                    "ACLTokenDeleted",
                    id,
                    "",
                    index,
                    json!({"ACLToken": {"AccessorID": id}}),
                ));
            }
        }
        Command::AclPolicyUpsert { policies } => {
            for p in policies {
                out.push(ev(
                    "ACLPolicy",
                    "ACLPolicyUpserted",
                    &p.name,
                    "",
                    index,
                    json!({ "ACLPolicy": serde_json::to_value(p).unwrap_or(Value::Null) }),
                ));
            }
        }
        Command::AclPolicyDelete { names } => {
            for n in names {
                out.push(ev(
                    "ACLPolicy",
                    "ACLPolicyDeleted",
                    n,
                    "",
                    index,
                    json!({"ACLPolicy": {"Name": n}}),
                ));
            }
        }
        Command::VarApply { var, .. } => {
            let (ns, path) = (&var.meta.namespace, &var.meta.path);
            // Metadata only: items never leave the server in an event.
            match snap.variable(ns, path) {
                Some(stored) => out.push(ev(
                    "Variables",
                    "VariableUpserted",
                    path,
                    ns,
                    index,
                    json!({ "Variable": serde_json::to_value(&stored.meta).unwrap_or(Value::Null) }),
                )),
                None => out.push(ev(
                    "Variables",
                    "VariableDeleted",
                    path,
                    ns,
                    index,
                    json!({"Variable": {"Namespace": ns, "Path": path}}),
                )),
            }
        }
        _ => {}
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use state::StateStore;

    #[test]
    fn the_ring_keeps_the_newest_entries_and_builds_events_on_read() {
        let store = StateStore::new();
        let broker = EventBroker::new(2);
        for (i, id) in ["a", "b", "c"].iter().enumerate() {
            let job: model::Job =
                model::json::from_str(&format!(r#"{{"ID":"{id}","Name":"{id}","Type":"batch"}}"#))
                    .unwrap();
            let cmd = Command::JobRegister {
                job,
                eval: None,
                submit_time: 0,
                submission: None,
            };
            let index = i as u64 + 1;
            store.apply(index, &cmd).unwrap();
            broker.publish(index, Arc::new(cmd), || store.snapshot());
        }
        let all = broker.since(0, &store.snapshot());
        assert_eq!(all.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(all[0].1[0].topic, "Job");
        assert_eq!(all[0].1[0].kind, "JobRegistered");
        assert_eq!(all[0].1[0].key, "b");
        assert_eq!(all[0].1[0].payload["Job"]["ID"], "b");
        assert_eq!(broker.since(3, &store.snapshot()).len(), 1);
        assert_eq!(*broker.subscribe().borrow(), 3);
    }

    #[test]
    fn while_a_stream_is_open_each_entry_shows_the_state_right_after_it() {
        let store = StateStore::new();
        let broker = EventBroker::new(10);
        let _reader = broker.subscribe();
        for (index, priority) in [(1u64, 10), (2, 20)] {
            let job: model::Job = model::json::from_str(&format!(
                r#"{{"ID":"x","Name":"x","Type":"batch","Priority":{priority}}}"#
            ))
            .unwrap();
            let cmd = Command::JobRegister {
                job,
                eval: None,
                submit_time: 0,
                submission: None,
            };
            store.apply(index, &cmd).unwrap();
            broker.publish(index, Arc::new(cmd), || store.snapshot());
        }
        let all = broker.since(0, &store.snapshot());
        assert_eq!(all[0].1[0].payload["Job"]["Priority"], 10);
        assert_eq!(all[1].1[0].payload["Job"]["Priority"], 20);
    }

    #[test]
    fn events_are_shown_only_to_tokens_that_may_read_them() {
        let e = ev("Job", "JobRegistered", "web", "prod", 1, Value::Null);
        assert!(e.allowed(&Acl::management()));
        let none = Acl::from_policies(&[]);
        assert!(!e.allowed(&none));
        let acl_event = ev("ACLToken", "ACLTokenUpserted", "x", "", 1, Value::Null);
        assert!(!acl_event.allowed(&none));
    }
}
