//! The state follower's engine: turns what changed in the state store into broker events.
//!
//! The broker learns about evaluations only from here — the endpoints write evaluations through raft
//! and never call the broker — so every server that becomes leader sees exactly what is in state.
//! Capacity changes come from the same reads: a node that became ready (or is new and ready), and
//! an allocation that stopped or finished, wake blocked evaluations of the node's computed class.
//! The scheduler configuration's `PauseEvalBroker` comes the same way: a change is one
//! [`Event::Pause`], ahead of the evaluations read with it.

use super::broker::Event;
use state::{StateSnapshot, Table};
use std::collections::{BTreeMap, HashMap};

/// What the follower has seen. Bounded by the nodes in state (plus deleted ones until a delete is
/// noticed, which prunes them).
#[derive(Debug, Default)]
pub struct Follower {
    /// The state index read up to.
    last: u64,
    /// The store's restore count when last read: a restore replaces everything, so it rebuilds.
    restores: u64,
    /// Node ID → (its create index, whether it was ready — and eligible, not draining — when last
    /// seen, its computed class then). A node registered again after a delete has a new create
    /// index: new capacity; a ready node whose class changed (its meta or attributes did) is new
    /// capacity for its new class, as Nomad unblocks a ready node's class on every upsert.
    ready_nodes: HashMap<String, (u64, bool, String)>,
    /// `PauseEvalBroker` as last read.
    paused: bool,
}

impl Follower {
    pub fn new() -> Follower {
        Follower::default()
    }

    /// The state index everything up to which has been reported.
    pub fn last_index(&self) -> u64 {
        self.last
    }

    /// Whether the broker should be paused, as of the last read (send it after a rebuild).
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Leadership gained: every live evaluation, and where to follow on from. The pause read
    /// with it is [`Follower::paused`].
    pub fn rebuild(&mut self, snap: &StateSnapshot) -> Event {
        self.last = snap.index();
        self.restores = snap.restores();
        self.paused = snap.scheduler_config().pause_eval_broker;
        self.ready_nodes = snap
            .nodes("")
            .iter()
            .map(|n| {
                let seen = (n.create_index, n.is_ready(), n.computed_class.clone());
                (n.id.clone(), seen)
            })
            .collect();
        let live = snap
            .evals(None, "")
            .into_iter()
            .filter(|e| !e.is_terminal())
            .collect();
        Event::Rebuild(live)
    }

    /// What changed after the last read, as events in order: evaluations first (so a blocked one
    /// written with capacity in the same batch is tracked before the capacity wakes it), then one
    /// capacity change per class.
    pub fn changes(&mut self, snap: &StateSnapshot) -> Vec<Event> {
        if snap.restores() != self.restores {
            return vec![self.rebuild(snap), Event::Pause(self.paused)];
        }
        let since = self.last;
        if snap.index() <= since {
            return Vec::new();
        }
        let mut out = Vec::new();
        if snap.table_index(Table::SchedulerConfig) > since {
            let paused = snap.scheduler_config().pause_eval_broker;
            if paused != self.paused {
                self.paused = paused;
                out.push(Event::Pause(paused));
            }
        }
        let evals = snap.evals_modified_after(since);
        if !evals.is_empty() {
            out.push(Event::EvalsChanged(evals));
        }
        let mut classes: BTreeMap<String, u64> = BTreeMap::new();
        let mut raise = |class: &str, index: u64| {
            let at = classes.entry(class.to_owned()).or_insert(0);
            *at = (*at).max(index);
        };
        let nodes = snap.nodes_modified_after(since);
        let deleted_some = snap.table_index(Table::Nodes) > since
            && nodes
                .last()
                .is_none_or(|n| n.modify_index < snap.table_index(Table::Nodes));
        for node in &nodes {
            let seen = (
                node.create_index,
                node.is_ready(),
                node.computed_class.clone(),
            );
            let ready = seen.1;
            let was = self.ready_nodes.insert(node.id.clone(), seen.clone());
            if ready && was.as_ref() != Some(&seen) {
                raise(&node.computed_class, node.modify_index);
            }
        }
        if deleted_some {
            self.ready_nodes.retain(|id, _| snap.node(id).is_some());
        }
        for alloc in snap.allocs_modified_after(since) {
            if !alloc.is_terminal() {
                continue;
            }
            if let Some(node) = snap.node(&alloc.node_id) {
                raise(&node.computed_class, alloc.modify_index);
            }
        }
        out.extend(
            classes
                .into_iter()
                .map(|(class, index)| Event::CapacityChanged { class, index }),
        );
        self.last = snap.index();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::node::Node;
    use state::{AllocStop, Command, StateStore};

    fn node(id: &str, class: &str, status: &str) -> Node {
        let mut n = Node {
            id: id.into(),
            name: id.into(),
            datacenter: "dc1".into(),
            computed_class: class.into(),
            status: status.into(),
            ..Node::default()
        };
        n.canonicalize();
        n
    }

    struct Fsm {
        store: StateStore,
        next: u64,
    }

    impl Fsm {
        fn apply(&mut self, cmd: Command) {
            self.next += 1;
            self.store.apply(self.next, &cmd).expect("applies");
        }
    }

    fn capacity(events: &[Event]) -> Vec<(String, u64)> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::CapacityChanged { class, index } => Some((class.clone(), *index)),
                _ => None,
            })
            .collect()
    }

    fn eval_ids(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::EvalsChanged(v) | Event::Rebuild(v) => {
                    Some(v.iter().map(|e| e.id.clone()).collect::<Vec<_>>())
                }
                _ => None,
            })
            .flatten()
            .collect()
    }

    #[test]
    fn reports_new_evaluations_and_capacity_once_each() {
        let mut fsm = Fsm {
            store: StateStore::new(),
            next: 0,
        };
        let mut f = Follower::new();
        fsm.apply(Command::NodeRegister {
            node: node("n0", "c0", "ready"),
        });
        let mut done = model::eval::Evaluation {
            id: "done".into(),
            job_id: "j".into(),
            status: "complete".into(),
            ..Default::default()
        };
        fsm.apply(Command::EvalUpsert {
            evals: vec![
                done.clone(),
                model::eval::Evaluation {
                    id: "e1".into(),
                    job_id: "j".into(),
                    status: "pending".into(),
                    ..Default::default()
                },
            ],
        });
        let rebuilt = f.rebuild(&fsm.store.snapshot());
        assert_eq!(eval_ids(&[rebuilt]), ["e1"], "only live evaluations");
        assert!(f.changes(&fsm.store.snapshot()).is_empty(), "nothing new");

        fsm.apply(Command::NodeRegister {
            node: node("n1", "c1", "initializing"),
        });
        assert!(
            capacity(&f.changes(&fsm.store.snapshot())).is_empty(),
            "not ready yet"
        );
        fsm.apply(Command::NodeUpdateStatus {
            node_id: "n1".into(),
            status: "ready".into(),
            updated_at: 1,
        });
        assert_eq!(
            capacity(&f.changes(&fsm.store.snapshot())),
            [("c1".to_string(), 4)]
        );
        fsm.apply(Command::NodeUpdateStatus {
            node_id: "n1".into(),
            status: "ready".into(),
            updated_at: 2,
        });
        assert!(
            capacity(&f.changes(&fsm.store.snapshot())).is_empty(),
            "still ready: a heartbeat is not new capacity"
        );

        done.status = "complete".into();
        done.modify_time = 9;
        fsm.apply(Command::EvalUpsert { evals: vec![done] });
        assert_eq!(eval_ids(&f.changes(&fsm.store.snapshot())), ["done"]);

        fsm.apply(Command::NodeDeregister {
            node_ids: vec!["n1".into()],
        });
        f.changes(&fsm.store.snapshot());
        fsm.apply(Command::NodeRegister {
            node: node("n1", "c1", "ready"),
        });
        assert_eq!(
            capacity(&f.changes(&fsm.store.snapshot())),
            [("c1".to_string(), 8)],
            "a node deleted and registered again is new capacity"
        );
        assert_eq!(f.last_index(), 8);

        // Its meta changed (dynamic node metadata): the same ready node in a new class.
        fsm.apply(Command::NodeRegister {
            node: node("n1", "c2", "ready"),
        });
        assert_eq!(
            capacity(&f.changes(&fsm.store.snapshot())),
            [("c2".to_string(), 9)],
            "a ready node whose class changed is capacity for its new class"
        );
        fsm.apply(Command::NodeRegister {
            node: node("n1", "c2", "ready"),
        });
        assert!(
            capacity(&f.changes(&fsm.store.snapshot())).is_empty(),
            "registered again unchanged: no new capacity"
        );
    }

    #[test]
    fn a_stopped_allocation_is_capacity_on_its_nodes_class() {
        let mut fsm = Fsm {
            store: StateStore::new(),
            next: 0,
        };
        fsm.apply(Command::NodeRegister {
            node: node("n1", "c1", "ready"),
        });
        let mut job = model::Job {
            id: "web".into(),
            ..Default::default()
        };
        job.canonicalize();
        fsm.apply(Command::JobRegister {
            job: job.clone(),
            eval: None,
            submit_time: 1,
            submission: None,
        });
        let alloc = model::alloc::Allocation {
            id: "a1".into(),
            namespace: "default".into(),
            job_id: "web".into(),
            job: Some(std::sync::Arc::new(job)),
            node_id: "n1".into(),
            desired_status: "run".into(),
            client_status: "pending".into(),
            ..Default::default()
        };
        fsm.apply(Command::AllocUpsert {
            allocs: vec![alloc],
        });
        let mut f = Follower::new();
        f.rebuild(&fsm.store.snapshot());
        fsm.apply(Command::PlanApply {
            eval_id: "e2".into(),
            job: None,
            allocs_upsert: vec![],
            allocs_stop: vec![AllocStop {
                alloc_id: "a1".into(),
                desired_status: "stop".into(),
                ..AllocStop::default()
            }],
            evals: vec![],
            deployment: None,
            deployment_updates: vec![],
        });
        assert_eq!(
            capacity(&f.changes(&fsm.store.snapshot())),
            [("c1".to_string(), 4)]
        );
    }

    #[test]
    fn a_change_of_pause_eval_broker_is_one_pause_event_ahead_of_the_evaluations() {
        let mut fsm = Fsm {
            store: StateStore::new(),
            next: 0,
        };
        let mut f = Follower::new();
        let pause = |on: bool| Command::SchedulerConfigSet {
            config: model::scheduler_config::SchedulerConfiguration {
                pause_eval_broker: on,
                ..Default::default()
            },
            cas: None,
        };
        fsm.apply(pause(true));
        f.rebuild(&fsm.store.snapshot());
        assert!(f.paused(), "read with the rebuild");
        fsm.apply(Command::EvalUpsert {
            evals: vec![model::eval::Evaluation {
                id: "e1".into(),
                job_id: "j".into(),
                status: "pending".into(),
                ..Default::default()
            }],
        });
        fsm.apply(pause(false));
        let events = f.changes(&fsm.store.snapshot());
        assert!(matches!(events[0], Event::Pause(false)), "{events:?}");
        assert_eq!(eval_ids(&events), ["e1"]);
        assert!(!f.paused());
        // Written again unchanged: nothing to say.
        fsm.apply(pause(false));
        assert!(f.changes(&fsm.store.snapshot()).is_empty());
    }
}
