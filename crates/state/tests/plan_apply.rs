//! `PlanApply`: the plan applier's commit, applied as one entry with Nomad's `UpsertPlanResults`
//! semantics, and the modify-index reads the leader's eval broker follows the store with.

mod common;

use common::*;
use model::alloc::Allocation;
use model::deployment::DeploymentStatusUpdate;
use model::eval::Evaluation;
use model::Job;
use model::JobStatus;
use state::{AllocStop, Command, StateError, Table};

fn placed(id: &str, node: &str, eval: &str) -> Allocation {
    let mut a = alloc(id, &job("web"), node, eval);
    // The applier leaves the job out of each placement; the command carries it once.
    a.job = None;
    a
}

fn stop(id: &str) -> AllocStop {
    AllocStop {
        alloc_id: id.into(),
        desired_status: "stop".into(),
        desired_description: "alloc not needed due to job update".into(),
        modify_time: 7_000,
        ..AllocStop::default()
    }
}

fn plan(eval_id: &str, job: &Job) -> Command {
    Command::PlanApply {
        eval_id: eval_id.into(),
        job: Some(job.clone()),
        allocs_upsert: Vec::new(),
        allocs_stop: Vec::new(),
        evals: Vec::new(),
        deployment: None,
        deployment_updates: Vec::new(),
    }
}

fn with(
    cmd: Command,
    upsert: Vec<Allocation>,
    stops: Vec<AllocStop>,
    new_evals: Vec<Evaluation>,
) -> Command {
    match cmd {
        Command::PlanApply {
            eval_id,
            job,
            deployment,
            deployment_updates,
            ..
        } => Command::PlanApply {
            eval_id,
            job,
            allocs_upsert: upsert,
            allocs_stop: stops,
            evals: new_evals,
            deployment,
            deployment_updates,
        },
        other => other,
    }
}

fn completed(id: &str, queued: i64) -> Evaluation {
    let mut e = eval(id, "web");
    e.status = "complete".into();
    e.queued_allocations = [("web".to_string(), queued)].into();
    e
}

#[test]
fn placements_stops_and_evals_commit_at_one_index() {
    let mut fsm = Fsm::default();
    let mut j = job("web");
    j.task_groups[0].count = Some(3);
    fsm.register(&j, "e1");
    let stored = fsm.job("web");
    fsm.allocs(vec![alloc("old", &stored, "n1", "e0")]);
    let mut blocked = eval("e2", "web");
    blocked.status = "blocked".into();
    blocked.previous_eval = "e1".into();
    let cmd = with(
        plan("e1", &stored),
        vec![placed("a1", "n1", "e1"), placed("a2", "n2", "e1")],
        vec![stop("old"), stop("never-existed")],
        vec![completed("e1", 1), blocked],
    );
    let r = fsm.apply(cmd);
    assert_eq!((r.index, r.eval_id.as_deref()), (3, Some("e1")));

    let snap = fsm.snap();
    for id in ["a1", "a2"] {
        let a = snap.alloc(id).expect("placed");
        assert_eq!((a.create_index, a.modify_index), (3, 3));
        assert_eq!(
            a.job.as_deref().map(|j| j.version),
            Some(stored.version),
            "the command's job is denormalized into each placement"
        );
    }
    // Shared, not copied: every placement holds the stored version's job itself.
    let version = snap
        .job_version("default", "web", stored.version.unwrap_or(0))
        .expect("the stored version");
    for id in ["a1", "a2", "old"] {
        let a = snap.alloc(id).unwrap();
        assert!(
            std::sync::Arc::ptr_eq(a.job.as_ref().unwrap(), &version),
            "{id} shares the stored job version"
        );
    }
    // And so after a save and a load.
    let loaded = state::StateStore::new();
    loaded.restore(&mut fsm.save().as_slice()).unwrap();
    let snap2 = loaded.snapshot();
    let v2 = snap2
        .job_version("default", "web", stored.version.unwrap_or(0))
        .unwrap();
    assert!(std::sync::Arc::ptr_eq(
        snap2.alloc("a1").unwrap().job.as_ref().unwrap(),
        &v2
    ));
    let old = snap.alloc("old").expect("stopped, not removed");
    assert_eq!(old.desired_status, "stop");
    assert_eq!(
        old.desired_description,
        "alloc not needed due to job update"
    );
    assert_eq!((old.create_index, old.modify_index), (2, 3));
    assert_eq!(old.modify_time, 7_000);
    assert!(old.job.is_some(), "a stopped allocation keeps its job");
    assert!(snap.alloc("never-existed").is_none());

    let e1 = snap.eval("e1").unwrap();
    assert_eq!(
        (e1.status.as_str(), e1.create_index, e1.modify_index),
        ("complete", 1, 3)
    );
    let e2 = snap.eval("e2").unwrap();
    assert_eq!((e2.status.as_str(), e2.create_index), ("blocked", 3));

    let summary = snap.job_summary("default", "web").unwrap();
    let web = &summary.summary["web"];
    assert_eq!(
        (web.starting, web.queued),
        (3, 1),
        "three pending allocs; the eval's queued count"
    );
    assert_eq!(fsm.job("web").status, Some(JobStatus::Running));
    for t in [Table::Allocs, Table::Evals, Table::JobSummaries] {
        assert_eq!(snap.table_index(t), 3, "{t:?}");
    }
}

#[test]
fn a_lost_allocation_moves_its_summary_counter() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let stored = fsm.job("web");
    let mut running = alloc("a1", &stored, "n1", "e1");
    running.client_status = "running".into();
    fsm.allocs(vec![alloc("a1", &stored, "n1", "e1")]);
    fsm.allocs(vec![running]);
    let mut lost = stop("a1");
    lost.client_status = Some("lost".into());
    lost.followup_eval_id = "e9".into();
    fsm.apply(with(plan("e2", &stored), vec![], vec![lost], vec![]));
    let snap = fsm.snap();
    let a1 = snap.alloc("a1").unwrap();
    assert_eq!(
        (
            a1.desired_status.as_str(),
            a1.client_status.as_str(),
            a1.followup_eval_id.as_str()
        ),
        ("stop", "lost", "e9")
    );
    let web = &snap.job_summary("default", "web").unwrap().summary["web"];
    assert_eq!((web.running, web.lost), (0, 1));
}

#[test]
fn a_failing_plan_changes_nothing() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let stored = fsm.job("web");
    let before = fsm.save();
    let mut cmd = with(
        plan("e1", &stored),
        vec![placed("a1", "n1", "e1")],
        vec![],
        vec![completed("e1", 0)],
    );
    if let Command::PlanApply {
        job, deployment, ..
    } = &mut cmd
    {
        *job = None;
        *deployment = Some(common::deployment("d1", &stored));
    }
    let err = fsm
        .try_apply(cmd)
        .expect_err("a new allocation needs a job");
    assert!(matches!(err, StateError::Invalid(_)), "{err}");
    let mut after = fsm.save();
    // Only the header's applied index moved; no table did.
    let first_line = |b: &[u8]| b.iter().position(|c| *c == b'\n').unwrap();
    after.drain(..first_line(&after));
    let mut before = before;
    before.drain(..first_line(&before));
    assert_eq!(
        String::from_utf8_lossy(&after),
        String::from_utf8_lossy(&before)
    );
    assert!(fsm.snap().deployment("d1").is_none());
    assert_eq!(fsm.snap().eval("e1").unwrap().status, "pending");

    let err = fsm
        .try_apply(with(plan("", &stored), vec![], vec![], vec![]))
        .expect_err("plan results name their evaluation");
    assert!(matches!(err, StateError::Invalid(_)), "{err}");
}

#[test]
fn the_deployment_is_written_before_the_placements_that_count_towards_it() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let stored = fsm.job("web");
    fsm.apply(Command::DeploymentUpsert {
        deployment: common::deployment("d-old", &stored),
    });
    let mut a1 = placed("a1", "n1", "e1");
    a1.deployment_id = "d1".into();
    let mut cmd = with(plan("e1", &stored), vec![a1], vec![], vec![]);
    if let Command::PlanApply {
        deployment,
        deployment_updates,
        ..
    } = &mut cmd
    {
        *deployment = Some(common::deployment("d1", &stored));
        *deployment_updates = vec![
            DeploymentStatusUpdate {
                deployment_id: "d-old".into(),
                status: "cancelled".into(),
                status_description: "Cancelled due to newer version of job".into(),
            },
            DeploymentStatusUpdate {
                deployment_id: "d-gone".into(),
                status: "cancelled".into(),
                status_description: "skipped".into(),
            },
        ];
    }
    let r = fsm.apply(cmd);
    let snap = fsm.snap();
    let d1 = snap.deployment("d1").unwrap();
    assert_eq!(d1.create_index, r.index);
    assert_eq!(d1.task_groups["web"].placed_allocs, 1);
    let old = snap.deployment("d-old").unwrap();
    assert_eq!(
        (
            old.status.as_str(),
            old.status_description.as_str(),
            old.modify_index
        ),
        (
            "cancelled",
            "Cancelled due to newer version of job",
            r.index
        )
    );
    assert!(snap.deployment("d-gone").is_none());
}

#[test]
fn an_in_place_update_moves_the_allocation_to_the_plans_job_version() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let v0 = fsm.job("web");
    fsm.allocs(vec![alloc("a1", &v0, "n1", "e1")]);
    fsm.register(&changed(&v0, 1), "e2");
    let v1 = fsm.job("web");
    let mut update = (*fsm.snap().alloc("a1").unwrap()).clone();
    update.job = None;
    update.eval_id = "e2".into();
    fsm.apply(with(plan("e2", &v1), vec![update], vec![], vec![]));
    let a1 = fsm.snap().alloc("a1").unwrap();
    assert_eq!(a1.job.as_deref().unwrap().version, Some(1));
    assert_eq!(a1.create_index, 2, "an update keeps its create index");
}

#[test]
fn followers_read_what_changed_after_an_index_in_change_order() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1"); // 1
    fsm.apply(Command::NodeRegister { node: node("n2") }); // 2
    fsm.apply(Command::NodeRegister { node: node("n1") }); // 3
    let stored = fsm.job("web");
    fsm.apply(with(
        plan("e1", &stored),
        vec![placed("a2", "n1", "e1"), placed("a1", "n2", "e1")],
        vec![],
        vec![completed("e1", 0), eval("e3", "web")],
    )); // 4
    fsm.apply(Command::NodeUpdateStatus {
        node_id: "n2".into(),
        status: "down".into(),
        updated_at: 1,
    }); // 5
    let snap = fsm.snap();
    let ids = |v: Vec<String>| v;
    assert_eq!(
        ids(snap
            .evals_modified_after(0)
            .iter()
            .map(|e| e.id.clone())
            .collect()),
        ["e1", "e3"]
    );
    assert!(snap.evals_modified_after(4).is_empty());
    assert_eq!(
        ids(snap
            .allocs_modified_after(3)
            .iter()
            .map(|a| a.id.clone())
            .collect()),
        ["a1", "a2"],
        "same index: by ID"
    );
    assert_eq!(
        ids(snap
            .nodes_modified_after(0)
            .iter()
            .map(|n| n.id.clone())
            .collect()),
        ["n1", "n2"],
        "n1 changed at 3, n2 last at 5"
    );
    assert_eq!(
        ids(snap
            .nodes_modified_after(3)
            .iter()
            .map(|n| n.id.clone())
            .collect()),
        ["n2"]
    );
    assert!(snap.nodes_modified_after(u64::MAX).is_empty());
    fsm.apply(Command::EvalDelete {
        eval_ids: vec!["e1".into()],
        alloc_ids: vec!["a1".into()],
    });
    let snap = fsm.snap();
    assert_eq!(
        ids(snap
            .evals_modified_after(0)
            .iter()
            .map(|e| e.id.clone())
            .collect()),
        ["e3"],
        "a deleted evaluation leaves the index"
    );
    assert_eq!(
        ids(snap
            .allocs_modified_after(0)
            .iter()
            .map(|a| a.id.clone())
            .collect()),
        ["a2"]
    );
}

#[test]
fn plan_apply_round_trips_through_the_log_encoding() {
    let stored = {
        let mut fsm = Fsm::default();
        fsm.register(&job("web"), "e1");
        fsm.job("web")
    };
    let cmd = with(
        plan("e1", &stored),
        vec![placed("a1", "n1", "e1")],
        vec![stop("a0")],
        vec![completed("e1", 0)],
    );
    let text = serde_json::to_string(&cmd).unwrap();
    assert!(text.starts_with(r#"{"type":"PlanApply""#), "{text}");
    let back: Command = serde_json::from_str(&text).unwrap();
    assert_eq!(back, cmd);
    // Fields added later default, so old entries still decode.
    let minimal = r#"{"alloc_id":"a1","desired_status":"stop","desired_description":"x"}"#;
    let decoded: AllocStop = serde_json::from_str(minimal).unwrap();
    assert_eq!(decoded.alloc_id, "a1");
}

/// A plan's copy of an existing allocation is older than the client's last report: the client's
/// fields stay as stored (Nomad's `upsertAllocsImpl`), unless the plan marks it lost or unknown.
/// Otherwise a client that said `complete` would read as `running` forever (it never says again).
#[test]
fn a_plan_never_writes_back_a_client_status_older_than_the_stored_one() {
    let mut fsm = Fsm::default();
    let j = job("web");
    fsm.register(&j, "e1");
    let mut a = alloc("a1", &j, "n1", "e1");
    a.client_status = "running".into();
    fsm.allocs(vec![a.clone()]);
    // The scheduler's snapshot still has it running; its client reports it complete.
    let stale = fsm.snap().alloc("a1").unwrap();
    fsm.apply(Command::AllocClientUpdate {
        allocs: vec![model::wire::AllocClientUpdate {
            id: "a1".into(),
            client_status: "complete".into(),
            client_description: "All tasks have completed".into(),
            task_states: [("t".to_string(), model::alloc::TaskState::default())].into(),
            ..Default::default()
        }],
        evals: vec![],
    });
    // A plan made on that snapshot writes its copy back (a follow-up marker, say).
    let mut update = (*stale).clone();
    update.followup_eval_id = "e9".into();
    update.job = None;
    fsm.apply(with(plan("e2", &j), vec![update], vec![], vec![]));
    let now = fsm.snap().alloc("a1").unwrap();
    assert_eq!(
        now.followup_eval_id, "e9",
        "the plan's own field is written"
    );
    assert_eq!(now.client_status, "complete");
    assert_eq!(now.client_description, "All tasks have completed");
    assert!(
        now.task_states.contains_key("t"),
        "task states stay the client's"
    );
    // Not even `unknown` or `lost` overrides what the client said last, `complete`: the servers
    // judged on an older view of it.
    let mut unknown = (*now).clone();
    unknown.client_status = "unknown".into();
    unknown.job = None;
    fsm.apply(with(plan("e3", &j), vec![unknown], vec![], vec![]));
    assert_eq!(fsm.snap().alloc("a1").unwrap().client_status, "complete");
    // On an allocation still running, marking it unknown is the scheduler's to say.
    let mut b = alloc("b1", &j, "n1", "e1");
    b.client_status = "running".into();
    fsm.allocs(vec![b.clone()]);
    b.client_status = "unknown".into();
    b.job = None;
    fsm.apply(with(plan("e4", &j), vec![b], vec![], vec![]));
    assert_eq!(fsm.snap().alloc("b1").unwrap().client_status, "unknown");
}

/// `AllocStop` (a reconnect's losing copy) writes the stop's fields onto the stored allocation:
/// what its client reported stays; unknown IDs are skipped.
#[test]
fn alloc_stop_changes_only_the_desired_fields() {
    let mut fsm = Fsm::default();
    let j = job("web");
    fsm.register(&j, "e1");
    let mut a = alloc("a1", &j, "n1", "e1");
    a.client_status = "running".into();
    fsm.allocs(vec![a]);
    let mut s = stop("a1");
    s.desired_description = "alloc not needed as node is reconnected".into();
    let r = fsm.apply(Command::AllocStop {
        stops: vec![s, stop("gone")],
    });
    let now = fsm.snap().alloc("a1").unwrap();
    assert_eq!(now.desired_status, "stop");
    assert_eq!(
        now.desired_description,
        "alloc not needed as node is reconnected"
    );
    assert_eq!(now.client_status, "running");
    assert_eq!(now.modify_index, r.index);
    assert_eq!(now.modify_time, 7_000);
    assert!(fsm.snap().alloc("gone").is_none());
}

/// A client's report that came late (a call it gave up on while cut off, delivered after the
/// report that superseded it) cannot bring a finished allocation back to running.
#[test]
fn a_late_report_never_revives_a_finished_allocation() {
    let mut fsm = Fsm::default();
    let j = job("web");
    fsm.register(&j, "e1");
    fsm.allocs(vec![alloc("a1", &j, "n1", "e1")]);
    let report = |status: &str| Command::AllocClientUpdate {
        allocs: vec![model::wire::AllocClientUpdate {
            id: "a1".into(),
            client_status: status.into(),
            ..Default::default()
        }],
        evals: vec![],
    };
    fsm.apply(report("running"));
    fsm.apply(report("complete"));
    fsm.apply(report("running"));
    assert_eq!(fsm.snap().alloc("a1").unwrap().client_status, "complete");
    fsm.apply(report("pending"));
    assert_eq!(fsm.snap().alloc("a1").unwrap().client_status, "complete");
    // The servers' `lost` is not the client's last word: a reconnecting client's `running` is.
    let mut lost = (*fsm.snap().alloc("a1").unwrap()).clone();
    lost.client_status = "lost".into();
    fsm.allocs(vec![lost]);
    fsm.apply(report("running"));
    assert_eq!(fsm.snap().alloc("a1").unwrap().client_status, "running");
}

/// Several plans in one entry: each applies as its own `PlanApply`, at the entry's index; one that
/// fails leaves no trace, those before it stay, and those after it (checked with it applied) are
/// not applied; nothing but plans may be inside.
#[test]
fn a_plan_batch_applies_each_plan_until_one_fails() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    fsm.register(&job("api"), "e2");
    let (web, api) = (fsm.job("web"), fsm.job("api"));
    let mut broken = with(
        plan("e3", &web),
        vec![placed("b1", "n1", "e3")],
        vec![],
        vec![],
    );
    if let Command::PlanApply {
        job, deployment, ..
    } = &mut broken
    {
        // A new allocation without a job fails, after its deployment was written.
        *job = None;
        *deployment = Some(common::deployment("d-broken", &web));
    }
    let mut api_alloc = alloc("c1", &api, "n2", "e2");
    api_alloc.job = None;
    let resp = fsm.apply(Command::PlanApplyBatch {
        plans: vec![
            with(
                plan("e1", &web),
                vec![placed("a1", "n1", "e1")],
                vec![],
                vec![completed("e1", 0)],
            ),
            broken,
            with(plan("e2", &api), vec![api_alloc.clone()], vec![], vec![]),
        ],
    });
    let errors: Vec<bool> = resp.batch_errors.iter().map(Option::is_some).collect();
    assert_eq!(errors, [false, true, true], "{:?}", resp.batch_errors);
    assert!(resp.batch_errors[2]
        .as_deref()
        .is_some_and(|e| e.contains("an earlier plan of its batch failed")));
    let snap = fsm.snap();
    let a1 = snap.alloc("a1").expect("the plan before the failure stays");
    assert_eq!(a1.create_index, resp.index);
    assert!(a1.job.is_some(), "a1 has the plan's job");
    assert_eq!(snap.eval("e1").unwrap().status, "complete");
    assert!(snap.alloc("b1").is_none());
    assert!(
        snap.deployment("d-broken").is_none(),
        "the failed plan left nothing"
    );
    assert!(
        snap.alloc("c1").is_none(),
        "the plan after the failure is not applied"
    );

    let resp = fsm.apply(Command::PlanApplyBatch {
        plans: vec![
            Command::EvalUpsert { evals: vec![] },
            with(plan("e2", &api), vec![api_alloc], vec![], vec![]),
        ],
    });
    assert!(resp.batch_errors[0]
        .as_deref()
        .is_some_and(|e| e.contains("EvalUpsert inside a plan batch")));
    assert!(resp.batch_errors[1].is_some());
    assert!(fsm.snap().alloc("c1").is_none());

    // The log encoding carries batches too.
    let text = serde_json::to_string(&Command::PlanApplyBatch { plans: vec![] }).unwrap();
    assert_eq!(text, r#"{"type":"PlanApplyBatch","plans":[]}"#);
}
