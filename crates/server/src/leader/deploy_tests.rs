//! The deployment watcher's decisions, on a real state store; the decisions are applied through the
//! FSM to check what they do.

use super::*;
use crate::leader::testkit::{alloc, job, node, Cluster};
use model::alloc::AllocDeploymentStatus;
use model::deployment::{DeploymentState, DeploymentStatus};
use model::wire::AllocClientUpdate;

const SEC: i64 = 1_000_000_000;
const NOW: i64 = 1_700_000_000 * SEC;

/// A cluster with job `web` registered twice: version 0 stable (its deployment succeeded), version 1
/// (a different spec) the current one, with a running deployment `d1` of `count` allocations.
fn rollout(auto_revert: bool, canaries: i64, auto_promote: bool) -> Cluster {
    let mut c = Cluster::new();
    c.add_node(node("n1", 10_000, 10_000));
    let v0 = job("web", 2, 100, 64);
    c.register(&v0, "e0");
    let snap = c.snap();
    let stored = snap.job("default", "web").unwrap();
    c.apply(Command::DeploymentUpsert {
        deployment: deployment(
            "d0",
            &stored,
            DeploymentStatus::Successful,
            auto_revert,
            0,
            false,
        ),
    });
    let v1 = job("web", 2, 200, 64);
    c.register(&v1, "e1");
    let stored = c.snap().job("default", "web").unwrap();
    assert_eq!(stored.version, Some(1));
    c.apply(Command::DeploymentUpsert {
        deployment: deployment(
            "d1",
            &stored,
            DeploymentStatus::Running,
            auto_revert,
            canaries,
            auto_promote,
        ),
    });
    let mut allocs = Vec::new();
    for i in 0..2 {
        let mut a = alloc(&format!("a{i}"), &stored, "n1", 200, 64);
        a.deployment_id = "d1".into();
        a.modify_time = NOW;
        a.deployment_status = Some(AllocDeploymentStatus {
            canary: canaries > 0,
            ..AllocDeploymentStatus::default()
        });
        allocs.push(a);
    }
    c.apply(Command::AllocUpsert { allocs });
    c
}

fn deployment(
    id: &str,
    job: &Job,
    status: DeploymentStatus,
    auto_revert: bool,
    canaries: i64,
    auto_promote: bool,
) -> Deployment {
    let mut d = Deployment {
        id: id.into(),
        namespace: "default".into(),
        job_id: job.id.clone(),
        job_version: job.version.unwrap_or(0),
        job_create_index: job.create_index.unwrap_or(0),
        job_modify_index: job.job_modify_index.unwrap_or(0),
        status,
        ..Deployment::default()
    };
    d.task_groups.insert(
        "web".into(),
        DeploymentState {
            auto_revert,
            auto_promote,
            desired_total: 2,
            desired_canaries: canaries,
            progress_deadline: model::duration::Duration(600 * SEC),
            ..DeploymentState::default()
        },
    );
    d
}

fn report(c: &mut Cluster, alloc_id: &str, healthy: bool) {
    let a = c.snap().alloc(alloc_id).unwrap();
    let mut status = a.deployment_status.clone().unwrap_or_default();
    status.healthy = Some(healthy);
    c.apply(Command::AllocClientUpdate {
        allocs: vec![AllocClientUpdate {
            id: alloc_id.into(),
            client_status: "running".into(),
            deployment_status: Some(status),
            modify_time: NOW,
            ..AllocClientUpdate::default()
        }],
        evals: Vec::new(),
    });
}

fn only(decisions: Vec<Decision>) -> Command {
    assert_eq!(decisions.len(), 1, "{decisions:#?}");
    decisions.into_iter().next().unwrap().command
}

#[test]
fn a_health_change_makes_one_evaluation_and_nothing_more_until_the_next_change() {
    let mut c = rollout(false, 0, false);
    let mut w = Watcher::new();
    // Nothing reported yet: the registration's evaluation placed what there is to place.
    assert!(w.tick(&c.snap(), NOW).0.is_empty());
    report(&mut c, "a0", true);
    let cmd = only(w.tick(&c.snap(), NOW).0);
    let Command::EvalUpsert { evals } = cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(evals[0].triggered_by, EVAL_TRIGGER_DEPLOYMENT_WATCHER);
    assert_eq!(evals[0].deployment_id, "d1");
    assert_eq!(evals[0].job_id, "web");
    assert!(w.tick(&c.snap(), NOW).0.is_empty());
    // A new leader evaluates a deployment with health reported once, in case the old one died
    // before writing its evaluation.
    let mut fresh = Watcher::new();
    assert!(matches!(
        only(fresh.tick(&c.snap(), NOW).0),
        Command::EvalUpsert { .. }
    ));
    assert!(fresh.tick(&c.snap(), NOW).0.is_empty());
}

#[test]
fn an_unhealthy_allocation_fails_the_deployment_and_auto_revert_rolls_back_to_the_stable_version() {
    let mut c = rollout(true, 0, false);
    let mut w = Watcher::new();
    w.tick(&c.snap(), NOW);
    report(&mut c, "a1", false);
    let cmd = only(w.tick(&c.snap(), NOW).0);
    let Command::DeploymentStatus { update, job, .. } = &cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(update.status, DeploymentStatus::Failed);
    assert_eq!(
        update.status_description,
        "Failed due to unhealthy allocations - rolling back to job version 0"
    );
    assert_eq!(job.as_ref().and_then(|j| j.version), Some(0));
    c.apply(cmd);
    let snap = c.snap();
    let d = snap.deployment("d1").unwrap();
    assert_eq!(d.status, DeploymentStatus::Failed);
    let current = snap.job("default", "web").unwrap();
    assert_eq!(current.version, Some(2), "the rollback is a new version");
    let cpu = |j: &Job| j.task_groups[0].tasks[0].resources.as_ref().unwrap().cpu;
    assert_eq!(cpu(&current), Some(100), "with version 0's spec");
    let evals = snap.evals_by_job("default", "web");
    assert!(evals
        .iter()
        .any(|e| e.triggered_by == EVAL_TRIGGER_DEPLOYMENT_WATCHER
            && e.job_modify_index == current.job_modify_index.unwrap()));
    // A failed deployment is no longer watched.
    assert!(w.tick(&snap, NOW).0.is_empty());
}

#[test]
fn without_auto_revert_a_failure_keeps_the_job_version() {
    let mut c = rollout(false, 0, false);
    let mut w = Watcher::new();
    report(&mut c, "a0", false);
    let cmd = only(w.tick(&c.snap(), NOW).0);
    let Command::DeploymentStatus { update, job, .. } = &cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(
        update.status_description,
        DEPLOYMENT_DESC_FAILED_ALLOCATIONS
    );
    assert!(job.is_none());
    c.apply(cmd);
    assert_eq!(c.snap().job("default", "web").unwrap().version, Some(1));
}

#[test]
fn a_missed_progress_deadline_fails_the_deployment_and_an_early_tick_reports_when_to_look_again() {
    let c = rollout(false, 0, false);
    let snap = c.snap();
    let by = snap.deployment("d1").unwrap().task_groups["web"]
        .require_progress_by
        .clone()
        .expect("the first placement starts the progress deadline");
    let by = model::time::parse_unix_nanos(&by).unwrap();
    let mut w = Watcher::new();
    let (_, next) = w.tick(&snap, by - SEC);
    assert_eq!(next, Some(by));
    let cmd = only(w.tick(&snap, by + 1).0);
    let Command::DeploymentStatus { update, .. } = &cmd else {
        panic!("{cmd:?}")
    };
    assert_eq!(update.status_description, DEPLOYMENT_DESC_PROGRESS_DEADLINE);
}

#[test]
fn healthy_canaries_are_promoted_automatically_only_with_auto_promote() {
    for auto in [false, true] {
        let mut c = rollout(false, 2, auto);
        let mut w = Watcher::new();
        w.tick(&c.snap(), NOW);
        report(&mut c, "a0", true);
        // One of two canaries healthy: not yet.
        let cmd = only(w.tick(&c.snap(), NOW).0);
        assert!(matches!(cmd, Command::EvalUpsert { .. }), "{cmd:?}");
        report(&mut c, "a1", true);
        let cmd = only(w.tick(&c.snap(), NOW).0);
        if !auto {
            assert!(matches!(cmd, Command::EvalUpsert { .. }), "{cmd:?}");
            continue;
        }
        assert!(
            matches!(cmd, Command::DeploymentPromote { all: true, .. }),
            "{cmd:?}"
        );
        c.apply(cmd);
        let snap = c.snap();
        assert!(snap.deployment("d1").unwrap().task_groups["web"].promoted);
        let a0 = snap.alloc("a0").unwrap();
        assert!(!a0.deployment_status.as_ref().unwrap().canary);
    }
}

#[test]
fn promoting_unhealthy_canaries_is_refused_by_the_fsm() {
    let mut c = rollout(false, 2, false);
    report(&mut c, "a0", true);
    let err = c
        .store
        .apply(
            100,
            &Command::DeploymentPromote {
                deployment_id: "d1".into(),
                all: true,
                groups: Vec::new(),
                eval: None,
            },
        )
        .unwrap_err();
    assert!(err.to_string().contains("1/2 healthy"), "{err}");
    assert!(!c.snap().deployment("d1").unwrap().task_groups["web"].promoted);
}
