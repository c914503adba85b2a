//! The drainer's decisions, on a real state store; each tick's commands are applied through the FSM
//! so the next tick sees them, as the loop does.

use super::*;
use crate::leader::testkit::{alloc, job, node, Cluster};
use model::alloc::{ClientStatus, DesiredStatus};
use model::node::{DrainStatus, DrainStrategy};

const SEC: i64 = 1_000_000_000;
const NOW: i64 = 1_700_000_000 * SEC;

/// Drains `node_id` with a deadline of `deadline_s` seconds from `NOW` (0: none, negative: force).
fn start_drain(c: &mut Cluster, node_id: &str, deadline_s: i64, ignore_system: bool) {
    let strategy = DrainStrategy {
        deadline: model::Duration(deadline_s * SEC),
        ignore_system_jobs: ignore_system,
        force_deadline: (deadline_s > 0)
            .then(|| model::time::format_unix_nanos(NOW + deadline_s * SEC)),
        started_at: Some(model::time::format_unix_nanos(NOW)),
    };
    c.apply(Command::NodeUpdateDrain {
        node_id: node_id.into(),
        drain_strategy: Some(strategy),
        mark_eligible: false,
        complete: false,
        event: None,
        meta: BTreeMap::new(),
        updated_at: NOW / SEC,
    });
}

fn running(id: &str, job: &Job, node: &str) -> Allocation {
    let mut a = alloc(id, job, node, 100, 64);
    a.client_status = ClientStatus::Running;
    a
}

/// A cluster: n1 (to drain) and n2, job `web` (service, `count`, `max_parallel`) registered with
/// `count` running allocations w0.. on n1.
fn cluster(count: i32, max_parallel: i32) -> (Cluster, Job) {
    let mut c = Cluster::new();
    c.add_node(node("n1", 10_000, 10_000));
    c.add_node(node("n2", 10_000, 10_000));
    let mut j = job("web", count, 100, 64);
    j.task_groups[0]
        .migrate
        .as_mut()
        .expect("service default")
        .max_parallel = Some(max_parallel);
    c.register(&j, "e0");
    let stored = (*c.snap().job("default", "web").unwrap()).clone();
    let allocs = (0..count)
        .map(|i| running(&format!("w{i}"), &stored, "n1"))
        .collect();
    c.apply(Command::AllocUpsert { allocs });
    (c, stored)
}

fn typed_job(id: &str, kind: &str) -> Job {
    let mut j = job(id, 1, 100, 64);
    j.job_type = Some(kind.into());
    j.task_groups[0].migrate = None;
    j.canonicalize();
    j
}

/// Applies one tick at `now`; returns (allocations marked, evaluations made, nodes completed).
fn step(c: &mut Cluster, now: i64) -> (Vec<String>, Vec<String>, Vec<String>) {
    let decided = tick(&c.snap(), now);
    let (mut marked, mut evals, mut completed) = (Vec::new(), Vec::new(), Vec::new());
    for cmd in decided.commands {
        match &cmd {
            Command::AllocUpdateDesiredTransition {
                transitions,
                evals: made,
            } => {
                marked.extend(transitions.keys().cloned());
                evals.extend(
                    made.iter()
                        .map(|e| format!("{} {}", e.job_id, e.triggered_by)),
                );
            }
            Command::NodeUpdateDrain { node_id, .. } => completed.push(node_id.clone()),
            other => panic!("unexpected {}", other.name()),
        }
        c.apply(cmd);
    }
    (marked, evals, completed)
}

/// What the scheduler and client do with a marked allocation: it is stopped, and its replacement
/// runs on n2.
fn replace(c: &mut Cluster, id: &str, replacement: &str) {
    let mut old = (*c.snap().alloc(id).unwrap()).clone();
    old.desired_status = DesiredStatus::Stop;
    old.client_status = ClientStatus::Complete;
    let job = (*c.snap().job(&old.namespace, &old.job_id).unwrap()).clone();
    let new = running(replacement, &job, "n2");
    c.apply(Command::AllocUpsert {
        allocs: vec![old, new],
    });
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn service_allocations_leave_in_batches_of_max_parallel() {
    let (mut c, _) = cluster(3, 1);
    start_drain(&mut c, "n1", 3600, false);
    let (marked, evals, done) = step(&mut c, NOW);
    assert_eq!(marked, strs(&["w0"]));
    assert_eq!(evals, strs(&["web node-drain"]));
    assert!(done.is_empty());
    assert_eq!(
        step(&mut c, NOW),
        (vec![], vec![], vec![]),
        "waits for the replacement"
    );
    replace(&mut c, "w0", "r0");
    assert_eq!(step(&mut c, NOW).0, strs(&["w1"]));
    replace(&mut c, "w1", "r1");
    assert_eq!(step(&mut c, NOW).0, strs(&["w2"]));
    replace(&mut c, "w2", "r2");
    let (marked, _, done) = step(&mut c, NOW);
    assert!(marked.is_empty());
    assert_eq!(done, strs(&["n1"]));
    let n1 = c.snap().node("n1").unwrap();
    assert!(n1.drain_strategy.is_none());
    assert_eq!(n1.scheduling_eligibility, "ineligible");
    assert_eq!(
        n1.last_drain.as_ref().unwrap().status,
        DrainStatus::Complete
    );
    assert_eq!(n1.events.last().unwrap().message, "Node drain complete");
}

#[test]
fn max_parallel_two_marks_two_at_a_time() {
    let (mut c, _) = cluster(3, 2);
    start_drain(&mut c, "n1", 0, false);
    assert_eq!(step(&mut c, NOW).0, strs(&["w0", "w1"]));
    assert!(step(&mut c, NOW).0.is_empty());
}

#[test]
fn an_unhealthy_replacement_holds_the_next_batch() {
    let (mut c, _) = cluster(2, 1);
    start_drain(&mut c, "n1", 0, false);
    assert_eq!(step(&mut c, NOW).0, strs(&["w0"]));
    replace(&mut c, "w0", "r0");
    let mut r0 = (*c.snap().alloc("r0").unwrap()).clone();
    r0.deployment_status = Some(model::alloc::AllocDeploymentStatus {
        healthy: Some(false),
        ..Default::default()
    });
    c.apply(Command::AllocUpsert { allocs: vec![r0] });
    assert!(step(&mut c, NOW).0.is_empty());
}

#[test]
fn the_deadline_marks_everything_left_and_completes_the_drain() {
    let (mut c, _) = cluster(2, 1);
    let batch = typed_job("b", "batch");
    c.register(&batch, "eb");
    let b = (*c.snap().job("default", "b").unwrap()).clone();
    c.apply(Command::AllocUpsert {
        allocs: vec![running("b0", &b, "n1")],
    });
    start_drain(&mut c, "n1", 5, false);
    let decided = tick(&c.snap(), NOW);
    assert_eq!(decided.next_deadline, Some(NOW + 5 * SEC));
    assert_eq!(step(&mut c, NOW).0, strs(&["w0"]), "before: one batch");
    let (marked, evals, done) = step(&mut c, NOW + 5 * SEC);
    assert_eq!(marked, strs(&["b0", "w1"]));
    assert_eq!(evals, strs(&["b node-drain", "web node-drain"]));
    assert_eq!(done, strs(&["n1"]));
    let event = c.snap().node("n1").unwrap().events.last().unwrap().clone();
    assert_eq!(event.details["deadline_reached"], "true");
}

#[test]
fn a_forced_drain_marks_everything_at_once() {
    let (mut c, _) = cluster(3, 1);
    start_drain(&mut c, "n1", -1, false);
    let (marked, _, done) = step(&mut c, NOW);
    assert_eq!(marked, strs(&["w0", "w1", "w2"]));
    assert_eq!(done, strs(&["n1"]));
}

#[test]
fn batch_allocations_are_left_to_finish() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 10_000, 10_000));
    let batch = typed_job("b", "batch");
    c.register(&batch, "eb");
    let b = (*c.snap().job("default", "b").unwrap()).clone();
    c.apply(Command::AllocUpsert {
        allocs: vec![running("b0", &b, "n1")],
    });
    start_drain(&mut c, "n1", 0, false);
    assert_eq!(step(&mut c, NOW), (vec![], vec![], vec![]));
    let mut b0 = (*c.snap().alloc("b0").unwrap()).clone();
    b0.client_status = ClientStatus::Complete;
    c.apply(Command::AllocUpsert { allocs: vec![b0] });
    assert_eq!(step(&mut c, NOW).2, strs(&["n1"]));
}

#[test]
fn system_allocations_are_stopped_last() {
    let (mut c, _) = cluster(1, 1);
    let sys = typed_job("s", "system");
    c.register(&sys, "es");
    let s = (*c.snap().job("default", "s").unwrap()).clone();
    c.apply(Command::AllocUpsert {
        allocs: vec![running("s0", &s, "n1")],
    });
    start_drain(&mut c, "n1", 0, false);
    assert_eq!(step(&mut c, NOW).0, strs(&["w0"]));
    assert!(
        step(&mut c, NOW).0.is_empty(),
        "w0 still runs on its client"
    );
    replace(&mut c, "w0", "r0");
    let (marked, evals, done) = step(&mut c, NOW);
    assert_eq!((marked, evals), (strs(&["s0"]), strs(&["s node-drain"])));
    assert!(done.is_empty());
    let mut s0 = (*c.snap().alloc("s0").unwrap()).clone();
    s0.desired_status = DesiredStatus::Stop;
    c.apply(Command::AllocUpsert { allocs: vec![s0] });
    assert_eq!(step(&mut c, NOW).2, strs(&["n1"]));
}

#[test]
fn ignored_system_allocations_stay_and_the_drain_completes() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 10_000, 10_000));
    let sys = typed_job("s", "system");
    c.register(&sys, "es");
    let s = (*c.snap().job("default", "s").unwrap()).clone();
    c.apply(Command::AllocUpsert {
        allocs: vec![running("s0", &s, "n1")],
    });
    start_drain(&mut c, "n1", -1, true);
    let (marked, _, done) = step(&mut c, NOW);
    assert!(marked.is_empty());
    assert_eq!(done, strs(&["n1"]));
}

#[test]
fn nodes_that_do_not_drain_are_left_alone() {
    let (mut c, _) = cluster(2, 1);
    let decided = tick(&c.snap(), NOW);
    assert!(decided.commands.is_empty() && decided.next_deadline.is_none());
    assert_eq!(step(&mut c, NOW), (vec![], vec![], vec![]));
}
