//! Snapshot isolation, secondary indexes, nodes and deployments.

mod common;

use common::*;
use model::alloc::Allocation;
use proptest::prelude::*;
use state::{Command, StateError, StateSnapshot, Table};

fn alloc_ids(allocs: Vec<std::sync::Arc<Allocation>>) -> Vec<String> {
    ids(&allocs, |a| &a.id)
}

#[test]
fn a_snapshot_never_sees_later_writes() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let before = fsm.snap();
    fsm.register(&changed(&job("web"), 1), "e2");
    fsm.apply(Command::NodeRegister { node: node("n1") });
    assert_eq!(before.index(), 1);
    assert_eq!(before.job("default", "web").unwrap().version, Some(0));
    assert_eq!(before.job_versions("default", "web").len(), 1);
    assert!(before.eval("e2").is_none());
    assert!(before.node("n1").is_none());
    assert_eq!(before.table_index(Table::Nodes), 0);
    let after = fsm.snap();
    assert_eq!(after.index(), 3);
    assert_eq!(after.job("default", "web").unwrap().version, Some(1));
}

#[test]
fn alloc_indexes_follow_an_alloc_moved_between_nodes() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let j = fsm.job("web");
    let mut a1 = alloc("a1", &j, "n1", "e1");
    a1.deployment_id = "d1".into();
    fsm.allocs(vec![a1.clone(), alloc("a2", &j, "n1", "e1")]);
    let snap = fsm.snap();
    assert_eq!(alloc_ids(snap.allocs_by_node("n1")), ["a1", "a2"]);
    assert_eq!(alloc_ids(snap.allocs_by_deployment("d1")), ["a1"]);

    fsm.register(&changed(&j, 1), "e2");
    a1.node_id = "n2".into();
    a1.eval_id = "e2".into();
    a1.deployment_id = "d2".into();
    fsm.allocs(vec![a1]);
    let snap = fsm.snap();
    assert_eq!(alloc_ids(snap.allocs_by_node("n1")), ["a2"]);
    assert_eq!(alloc_ids(snap.allocs_by_node("n2")), ["a1"]);
    assert_eq!(alloc_ids(snap.allocs_by_eval("e1")), ["a2"]);
    assert_eq!(alloc_ids(snap.allocs_by_eval("e2")), ["a1"]);
    assert!(snap.allocs_by_deployment("d1").is_empty());
    assert_eq!(alloc_ids(snap.allocs_by_deployment("d2")), ["a1"]);
    assert_eq!(
        alloc_ids(snap.allocs_by_job("default", "web")),
        ["a1", "a2"]
    );
    let a1 = snap.alloc("a1").unwrap();
    assert_eq!(
        (a1.create_index, a1.modify_index, a1.alloc_modify_index),
        (2, 4, 4)
    );
    assert_eq!(
        ids(&snap.evals_by_job("default", "web"), |e| &e.id),
        ["e1", "e2"]
    );
    assert_eq!(snap.table_index(Table::Allocs), 4);

    fsm.apply(Command::EvalDelete {
        eval_ids: vec!["e1".into()],
        alloc_ids: vec!["a2".into(), "gone".into()],
    });
    let snap = fsm.snap();
    assert!(snap.allocs_by_node("n1").is_empty());
    assert_eq!(ids(&snap.evals_by_job("default", "web"), |e| &e.id), ["e2"]);
    assert_eq!(snap.table_index(Table::Allocs), 5);
}

#[test]
fn a_new_alloc_must_carry_its_job_and_an_update_keeps_it() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let mut bare = alloc("a1", &fsm.job("web"), "n1", "e1");
    bare.job = None;
    let err = fsm
        .try_apply(Command::AllocUpsert {
            allocs: vec![bare.clone()],
        })
        .unwrap_err();
    assert!(matches!(err, StateError::Invalid(_)), "{err}");
    assert!(fsm.snap().alloc("a1").is_none());
    fsm.allocs(vec![alloc("a1", &fsm.job("web"), "n1", "e1")]);
    bare.client_status = "running".into();
    fsm.allocs(vec![bare]);
    let a1 = fsm.snap().alloc("a1").unwrap();
    assert!(a1.job.is_some());
    assert_eq!(a1.client_status, "running");
}

#[test]
fn a_replacement_alloc_links_its_predecessor() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let j = fsm.job("web");
    fsm.allocs(vec![alloc("a1", &j, "n1", "e1")]);
    let mut a2 = alloc("a2", &j, "n2", "e1");
    a2.previous_allocation = "a1".into();
    fsm.allocs(vec![a2]);
    let a1 = fsm.snap().alloc("a1").unwrap();
    assert_eq!(a1.next_allocation, "a2");
    assert_eq!(a1.modify_index, 3);
}

#[test]
fn a_desired_transition_merges_and_keeps_the_alloc_modify_index() {
    // `alloc stop` marks the allocation for migration with its eval in one entry; the client must
    // not see a server change (AllocModifyIndex) until the scheduler stops the allocation.
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let mut a1 = alloc("a1", &fsm.job("web"), "n1", "e1");
    a1.desired_transition.reschedule = Some(true);
    fsm.allocs(vec![a1]);
    let before = fsm.snap().alloc("a1").unwrap();
    let transition = model::alloc::DesiredTransition {
        migrate: Some(true),
        ..Default::default()
    };
    let resp = fsm.apply(Command::AllocUpdateDesiredTransition {
        transitions: [
            ("a1".to_string(), transition),
            ("gone".to_string(), Default::default()),
        ]
        .into_iter()
        .collect(),
        evals: vec![eval("e2", "web")],
    });
    let a1 = fsm.snap().alloc("a1").unwrap();
    assert!(a1.desired_transition.should_migrate());
    assert!(
        a1.desired_transition.should_reschedule(),
        "merged, not replaced"
    );
    assert_eq!(a1.modify_index, resp.index);
    assert_eq!(a1.alloc_modify_index, before.alloc_modify_index);
    assert!(fsm.snap().eval("e2").is_some());
    assert!(fsm.snap().alloc("gone").is_none());
}

#[test]
fn applying_an_old_index_is_refused() {
    let store = state::StateStore::new();
    store
        .apply(5, &Command::NodeRegister { node: node("n1") })
        .unwrap();
    for index in [5, 4, 0] {
        let err = store
            .apply(index, &Command::NodeRegister { node: node("n2") })
            .unwrap_err();
        assert!(matches!(err, StateError::Invalid(_)), "{err}");
    }
    assert!(store.snapshot().node("n2").is_none());
    assert_eq!(store.latest_index(), 5);
}

#[test]
fn a_reregistering_node_keeps_what_the_servers_own() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister { node: node("n1") });
    let n1 = fsm.snap().node("n1").unwrap();
    assert_eq!((n1.create_index, n1.modify_index), (1, 1));
    assert_eq!(n1.events.len(), 1);
    assert_eq!(n1.events[0].message, "Node registered");
    assert_eq!(
        n1.events[0].timestamp.as_deref(),
        Some("2024-05-01T12:00:00Z")
    );

    fsm.apply(Command::NodeUpdateStatus {
        node_id: "n1".into(),
        status: "down".into(),
        updated_at: 1_714_564_900,
    });
    let n1 = fsm.snap().node("n1").unwrap();
    assert_eq!(
        (n1.status.as_str(), n1.status_updated_at),
        ("down", 1_714_564_900)
    );

    let mut again = node("n1");
    again.scheduling_eligibility = "ineligible".into();
    again.status_updated_at = 1_714_565_000;
    fsm.apply(Command::NodeRegister { node: again });
    let n1 = fsm.snap().node("n1").unwrap();
    assert_eq!((n1.create_index, n1.modify_index), (1, 3));
    assert_eq!(
        n1.scheduling_eligibility, "eligible",
        "eligibility is the servers'"
    );
    let messages: Vec<&str> = n1.events.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(messages, ["Node registered", "Node re-registered"]);
    assert_eq!(n1.events[1].create_index, 3);
    assert_eq!(fsm.snap().nodes("n").len(), 1);
}

#[test]
fn deregistering_nodes_is_all_or_nothing() {
    let mut fsm = Fsm::default();
    fsm.apply(Command::NodeRegister { node: node("n1") });
    let err = fsm
        .try_apply(Command::NodeDeregister {
            node_ids: vec!["n1".into(), "n9".into()],
        })
        .unwrap_err();
    assert!(
        matches!(&err, StateError::NotFound(m) if m == "node not found: n9"),
        "{err}"
    );
    assert!(fsm.snap().node("n1").is_some());
    let err = fsm
        .try_apply(Command::NodeUpdateStatus {
            node_id: "n9".into(),
            status: "ready".into(),
            updated_at: 0,
        })
        .unwrap_err();
    assert!(matches!(err, StateError::NotFound(_)), "{err}");
    fsm.apply(Command::NodeDeregister {
        node_ids: vec!["n1".into()],
    });
    assert!(fsm.snap().node("n1").is_none());
    assert_eq!(fsm.snap().table_index(Table::Nodes), 4);
}

#[test]
fn deployments_count_placements_and_health() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let j = fsm.job("web");
    let mut d = deployment("d1", &j);
    d.task_groups.get_mut("web").unwrap().progress_deadline = model::Duration::from_mins(10);
    fsm.apply(Command::DeploymentUpsert { deployment: d });
    let mut a1 = alloc("a1", &j, "n1", "e1");
    a1.deployment_id = "d1".into();
    a1.modify_time = 1_714_564_800_000_000_000;
    a1.deployment_status = Some(model::AllocDeploymentStatus {
        canary: true,
        ..Default::default()
    });
    fsm.allocs(vec![a1.clone()]);
    let d1 = fsm.snap().deployment("d1").unwrap();
    let s = &d1.task_groups["web"];
    assert_eq!((s.placed_allocs, s.healthy_allocs), (1, 0));
    assert_eq!(s.placed_canaries, ["a1"]);
    assert_eq!(
        s.require_progress_by.as_deref(),
        Some("2024-05-01T12:10:00Z")
    );
    assert_eq!((d1.create_index, d1.modify_index), (2, 3));

    let status = a1.deployment_status.as_mut().unwrap();
    status.healthy = Some(true);
    status.timestamp = Some("2024-05-01T12:05:00Z".into());
    fsm.allocs(vec![a1]);
    let d1 = fsm.snap().deployment("d1").unwrap();
    let s = &d1.task_groups["web"];
    assert_eq!((s.placed_allocs, s.healthy_allocs), (1, 1));
    assert_eq!(
        s.require_progress_by.as_deref(),
        Some("2024-05-01T12:15:00Z")
    );
    assert_eq!(
        fsm.snap()
            .alloc("a1")
            .unwrap()
            .deployment_status
            .as_ref()
            .unwrap()
            .modify_index,
        4
    );
    assert_eq!(
        ids(&fsm.snap().deployments_by_job("default", "web"), |d| &d.id),
        ["d1"]
    );
    assert_eq!(
        fsm.snap()
            .latest_deployment_by_job("default", "web")
            .unwrap()
            .id,
        "d1"
    );
}

// ----- the indexes agree with the tables, whatever happens -----

#[derive(Debug, Clone)]
enum Op {
    Upsert {
        alloc: u8,
        node: u8,
        eval: u8,
        deployment: u8,
        job: u8,
    },
    Delete {
        alloc: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..6u8, 0..3u8, 0..3u8, 0..3u8, 0..2u8).prop_map(|(alloc, node, eval, deployment, job)| {
            Op::Upsert { alloc, node, eval, deployment, job }
        }),
        1 => (0..6u8).prop_map(|alloc| Op::Delete { alloc }),
    ]
}

/// Every index query equals a scan of the allocations table.
fn check_indexes(snap: &StateSnapshot) {
    let all = snap.allocs(None, "");
    let scan = |keep: &dyn Fn(&Allocation) -> bool| -> Vec<String> {
        all.iter()
            .filter(|a| keep(a))
            .map(|a| a.id.clone())
            .collect()
    };
    for n in 0..3 {
        let key = format!("n{n}");
        assert_eq!(
            alloc_ids(snap.allocs_by_node(&key)),
            scan(&|a| a.node_id == key)
        );
        let key = format!("e{n}");
        assert_eq!(
            alloc_ids(snap.allocs_by_eval(&key)),
            scan(&|a| a.eval_id == key)
        );
        let key = format!("d{n}");
        assert_eq!(
            alloc_ids(snap.allocs_by_deployment(&key)),
            scan(&|a| a.deployment_id == key)
        );
    }
    assert!(snap.allocs_by_deployment("").is_empty());
    for since in [0, 1, 2, 5, 20] {
        let mut changed: Vec<&Allocation> = all
            .iter()
            .map(|a| &**a)
            .filter(|a| a.modify_index > since)
            .collect();
        changed.sort_by(|a, b| (a.modify_index, &a.id).cmp(&(b.modify_index, &b.id)));
        let changed: Vec<String> = changed.iter().map(|a| a.id.clone()).collect();
        assert_eq!(
            alloc_ids(snap.allocs_modified_after(since)),
            changed,
            "since {since}"
        );
    }
    for j in ["j0", "j1"] {
        assert_eq!(
            alloc_ids(snap.allocs_by_job("default", j)),
            scan(&|a| a.job_id == j)
        );
    }
}

proptest! {
    #[test]
    fn alloc_indexes_agree_with_the_table(ops in proptest::collection::vec(op(), 1..40)) {
        let mut fsm = Fsm::default();
        let jobs = [job("j0"), job("j1")];
        for j in &jobs {
            fsm.register(j, &format!("reg-{}", j.id));
        }
        for op in ops {
            let cmd = match op {
                Op::Upsert { alloc: a, node, eval, deployment, job: j } => {
                    let mut a = alloc(&format!("a{a}"), &jobs[j as usize], &format!("n{node}"), &format!("e{eval}"));
                    // "d0" stands for "no deployment".
                    a.deployment_id = if deployment == 0 { String::new() } else { format!("d{deployment}") };
                    Command::AllocUpsert { allocs: vec![a] }
                }
                Op::Delete { alloc } => Command::EvalDelete { eval_ids: vec![], alloc_ids: vec![format!("a{alloc}")] },
            };
            fsm.apply(cmd);
            check_indexes(&fsm.snap());
        }
    }
}

/// A deployment's status only moves forward: a plan's `blocked` (decided on an older state)
/// never revives a deployment failed since, and is taken only from `running`; a pending region
/// that starts begins its progress deadlines afresh.
#[test]
fn deployment_status_updates_never_revive_or_skip() {
    use model::deployment::{DeploymentStatus, DeploymentStatusUpdate};
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let j = fsm.job("web");
    let mut d = deployment("d1", &j);
    d.status = DeploymentStatus::Pending;
    d.task_groups.get_mut("web").unwrap().require_progress_by = Some("2024-05-01T12:10:00Z".into());
    fsm.apply(Command::DeploymentUpsert { deployment: d });
    let update = |status: DeploymentStatus| DeploymentStatusUpdate {
        deployment_id: "d1".into(),
        status,
        status_description: String::new(),
    };
    let plan = |updates: Vec<DeploymentStatusUpdate>| Command::PlanApply {
        eval_id: "e1".into(),
        job: None,
        allocs_upsert: Vec::new(),
        allocs_stop: Vec::new(),
        evals: Vec::new(),
        deployment: None,
        deployment_updates: updates,
    };
    let status = |fsm: &Fsm| fsm.snap().deployment("d1").unwrap().status.clone();
    // Blocked only from running.
    fsm.apply(plan(vec![update(DeploymentStatus::Blocked)]));
    assert_eq!(status(&fsm), DeploymentStatus::Pending);
    fsm.apply(Command::DeploymentStatus {
        update: update(DeploymentStatus::Running),
        job: None,
        eval: None,
        submit_time: 0,
    });
    assert_eq!(status(&fsm), DeploymentStatus::Running);
    let d1 = fsm.snap().deployment("d1").unwrap();
    assert_eq!(d1.task_groups["web"].require_progress_by, None);
    // Failed by someone; a plan's late "blocked" does not bring it back.
    fsm.apply(Command::DeploymentStatus {
        update: update(DeploymentStatus::Failed),
        job: None,
        eval: None,
        submit_time: 0,
    });
    fsm.apply(plan(vec![update(DeploymentStatus::Blocked)]));
    assert_eq!(status(&fsm), DeploymentStatus::Failed);
    assert!(fsm
        .try_apply(Command::DeploymentStatus {
            update: update(DeploymentStatus::Successful),
            job: None,
            eval: None,
            submit_time: 0,
        })
        .is_err());
    assert_eq!(status(&fsm), DeploymentStatus::Failed);
}
