//! The plan applier against a real state store: what commits, what is rejected, and the engine's
//! ordering.

use super::*;
use crate::leader::testkit::{alloc, assert_nothing_overcommitted, job, node, Cluster};
use crate::leader::view::SnapshotView;
use crate::leader::worker::seed_from;
use model::deployment::{Deployment, DeploymentState};
use model::plan::Plan;

const NOW: i64 = 1_714_564_800_000_000_000;

fn commit(cluster: &mut Cluster, evaluated: &Evaluated) -> Option<u64> {
    evaluated
        .command
        .as_ref()
        .map(|cmd| cluster.apply(cmd.clone()))
}

fn submission(
    eval: &Evaluation,
    outcome: scheduler::Outcome,
    snapshot_index: u64,
) -> PlanSubmission {
    let mut plan = outcome.plan;
    plan.eval_id.clone_from(&eval.id);
    plan.snapshot_index = snapshot_index;
    PlanSubmission {
        plan,
        evals: std::iter::once(outcome.eval)
            .chain(outcome.new_evals)
            .collect(),
    }
}

/// One node with room for one of two jobs, both scheduled on the same snapshot: their plans.
fn contested() -> (Cluster, PlanSubmission, PlanSubmission) {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    let (a, b) = (job("a", 1, 600, 256), job("b", 1, 600, 256));
    let eval_a = c.register(&a, "eval-a");
    let eval_b = c.register(&b, "eval-b");
    let s0 = c.snap();
    let view = SnapshotView::new(s0.clone());
    let out_a = scheduler::schedule(&view, &eval_a, NOW, seed_from(&eval_a.id)).unwrap();
    let out_b = scheduler::schedule(&view, &eval_b, NOW, seed_from(&eval_b.id)).unwrap();
    let sub_a = submission(&eval_a, out_a, s0.index());
    let sub_b = submission(&eval_b, out_b, s0.index());
    (c, sub_a, sub_b)
}

fn placed_on(plan: &Plan) -> Vec<String> {
    plan.node_allocation
        .iter()
        .filter(|(_, a)| !a.is_empty())
        .map(|(n, _)| n.clone())
        .collect()
}

/// Two workers schedule different jobs on the same snapshot and both pick the one node with room
/// for only one of them. The applier commits the first; the second is rejected with a refresh
/// index, schedules again on the refreshed state and lands on the node added meanwhile. Nothing is
/// ever overcommitted.
#[test]
fn conflicting_plans_from_two_workers_one_commits_the_other_refreshes_and_retries() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    let (a, b) = (job("a", 1, 600, 256), job("b", 1, 600, 256));
    let eval_a = c.register(&a, "eval-a");
    let eval_b = c.register(&b, "eval-b");

    // Both workers read the same snapshot.
    let s0 = c.snap();
    let view = SnapshotView::new(s0.clone());
    let out_a = scheduler::schedule(&view, &eval_a, NOW, seed_from(&eval_a.id)).unwrap();
    let out_b = scheduler::schedule(&view, &eval_b, NOW, seed_from(&eval_b.id)).unwrap();
    let ids = |o: &scheduler::Outcome| -> Vec<String> {
        o.plan
            .node_allocation
            .values()
            .flatten()
            .map(|a| a.id.clone())
            .collect()
    };
    assert_ne!(
        ids(&out_a),
        ids(&out_b),
        "different evaluations make different allocation IDs"
    );
    assert_eq!(placed_on(&out_a.plan), ["n1"]);
    assert_eq!(placed_on(&out_b.plan), ["n1"], "both want the only node");

    // The applier takes A first: it fits and commits with its evaluation update.
    let sub_a = submission(&eval_a, out_a, s0.index());
    let verdict_a = evaluate_plan(&c.snap(), &sub_a);
    assert_eq!(verdict_a.result.refresh_index, 0);
    assert!(verdict_a.result.is_full_commit(&sub_a.plan));
    commit(&mut c, &verdict_a).expect("A commits");
    assert_eq!(c.snap().eval("eval-a").unwrap().status, "complete");

    // B, checked against the newest state, no longer fits: nothing of it commits, not even its
    // evaluation update, and the worker is told to refresh.
    let sub_b = submission(&eval_b, out_b, s0.index());
    let verdict_b = evaluate_plan(&c.snap(), &sub_b);
    assert_eq!(verdict_b.result.rejected_nodes, ["n1"]);
    assert!(verdict_b.result.node_allocation.is_empty());
    assert!(verdict_b.result.refresh_index >= c.snap().index());
    if let Some(state::Command::PlanApply {
        allocs_upsert,
        allocs_stop,
        evals,
        ..
    }) = &verdict_b.command
    {
        // The deployment may still be written, as in Nomad; no allocation and no evaluation is.
        assert!(allocs_upsert.is_empty() && allocs_stop.is_empty() && evals.is_empty());
        commit(&mut c, &verdict_b);
    }
    assert_eq!(c.snap().eval("eval-b").unwrap().status, "pending");
    assert_nothing_overcommitted(&c.snap());

    // Meanwhile a node joins; B's worker refreshes to at least the refresh index and retries.
    c.add_node(node("n2", 1000, 1024));
    let s1 = c.snap();
    assert!(s1.index() >= verdict_b.result.refresh_index);
    let view = SnapshotView::new(s1.clone());
    let retry = scheduler::schedule(&view, &eval_b, NOW, seed_from(&eval_b.id)).unwrap();
    assert_eq!(placed_on(&retry.plan), ["n2"]);
    let sub_b = submission(&eval_b, retry, s1.index());
    let verdict = evaluate_plan(&c.snap(), &sub_b);
    assert_eq!(verdict.result.refresh_index, 0);
    commit(&mut c, &verdict).expect("B commits on retry");

    let snap = c.snap();
    assert_nothing_overcommitted(&snap);
    assert_eq!(snap.allocs_by_node("n1").len(), 1);
    assert_eq!(snap.allocs_by_node("n2").len(), 1);
    assert_eq!(snap.eval("eval-b").unwrap().status, "complete");
}

/// Without room anywhere the retry places nothing: the evaluation completes with its failure
/// recorded and a blocked evaluation carries the work — still nothing overcommitted.
#[test]
fn a_retry_with_no_room_left_blocks_instead_of_overcommitting() {
    let (mut c, sub_a, sub_b) = contested();
    let verdict_a = evaluate_plan(&c.snap(), &sub_a);
    commit(&mut c, &verdict_a);
    let rejected = evaluate_plan(&c.snap(), &sub_b);
    assert!(rejected.result.refresh_index > 0);

    let eval_b = c.snap().eval("eval-b").unwrap();
    let retry = scheduler::schedule(
        &SnapshotView::new(c.snap()),
        &eval_b,
        NOW,
        seed_from(&eval_b.id),
    )
    .unwrap();
    assert!(
        retry.plan.node_allocation.values().all(Vec::is_empty),
        "no room: nothing to place: {:#?}",
        retry.plan
    );
    assert!(
        retry.new_evals.iter().any(|e| e.status == "blocked"),
        "a blocked evaluation waits for capacity: {:?}",
        retry.new_evals
    );
    assert_nothing_overcommitted(&c.snap());
}

fn plan_for(job_id: &str) -> Plan {
    Plan {
        eval_id: format!("eval-{job_id}"),
        priority: 50,
        job: Some(Box::new(job(job_id, 2, 600, 256))),
        ..Plan::default()
    }
}

#[test]
fn the_nodes_that_still_fit_commit_and_the_rest_is_rejected() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    c.add_node(node("n2", 1000, 1024));
    let other = job("other", 1, 600, 256);
    c.register(&other, "e-other");
    c.apply(state::Command::AllocUpsert {
        allocs: vec![alloc("busy", &other, "n2", 600, 256)],
    });
    let web = job("web", 2, 600, 256);
    c.register(&web, "eval-web");
    let mut plan = plan_for("web");
    plan.push_alloc(alloc("fits", &web, "n1", 600, 256));
    plan.push_alloc(alloc("conflicts", &web, "n2", 600, 256));
    let sub = PlanSubmission {
        plan,
        evals: vec![crate::leader::testkit::eval("eval-web", &web)],
    };
    let v = evaluate_plan(&c.snap(), &sub);
    assert_eq!(v.result.rejected_nodes, ["n2"]);
    assert_eq!(v.result.node_allocation.keys().collect::<Vec<_>>(), ["n1"]);
    assert!(v.result.refresh_index > 0);
    let Some(state::Command::PlanApply {
        allocs_upsert,
        evals,
        job,
        ..
    }) = &v.command
    else {
        panic!("the part that fits is committed: {:?}", v.command);
    };
    assert_eq!(allocs_upsert.len(), 1);
    assert!(
        allocs_upsert[0].job.is_none(),
        "the entry carries the job once"
    );
    assert!(job.is_some());
    assert!(
        evals.is_empty(),
        "a partial commit leaves the evaluation to the retry"
    );
    commit(&mut c, &v);
    assert_nothing_overcommitted(&c.snap());
    assert!(c.snap().alloc("fits").unwrap().job.is_some());

    // All at once: the same plan commits nothing.
    let mut sub = sub.clone();
    sub.plan.all_at_once = true;
    sub.plan.node_allocation.remove("n1");
    sub.plan.push_alloc(alloc("fits-too", &web, "n1", 100, 100));
    let v = evaluate_plan(&c.snap(), &sub);
    assert!(v.result.node_allocation.is_empty() && v.result.node_update.is_empty());
    assert!(v.command.is_none());
}

#[test]
fn stops_in_the_same_plan_make_room_for_its_placements() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    let web = job("web", 1, 600, 256);
    c.register(&web, "eval-web");
    c.apply(state::Command::AllocUpsert {
        allocs: vec![alloc("old", &web, "n1", 600, 256)],
    });
    let mut plan = plan_for("web");
    let mut stop = (*c.snap().alloc("old").unwrap()).clone();
    stop.desired_status = "stop".into();
    stop.desired_description = "alloc is being updated due to job update".into();
    plan.push_update(stop);
    plan.push_alloc(alloc("new", &web, "n1", 600, 256));
    let v = evaluate_plan(
        &c.snap(),
        &PlanSubmission {
            plan,
            evals: vec![],
        },
    );
    assert_eq!(v.result.refresh_index, 0, "{:?}", v.result.rejected_nodes);
    commit(&mut c, &v);
    let snap = c.snap();
    assert_eq!(snap.alloc("old").unwrap().desired_status, "stop");
    assert_eq!(
        snap.alloc("old").unwrap().desired_description,
        "alloc is being updated due to job update"
    );
    assert_nothing_overcommitted(&snap);
}

#[test]
fn nodes_gone_down_ineligible_or_draining_take_no_new_placements() {
    let mut c = Cluster::new();
    let mut down = node("down", 1000, 1024);
    down.status = "down".into();
    c.add_node(down);
    // A new node keeps the eligibility it registers with (later the servers own it).
    let mut inel = node("inel", 1000, 1024);
    inel.scheduling_eligibility = "ineligible".into();
    c.add_node(inel);
    let web = job("web", 1, 100, 100);
    c.register(&web, "eval-web");
    c.apply(state::Command::AllocUpsert {
        allocs: vec![alloc("running", &web, "inel", 100, 100)],
    });

    let mut plan = plan_for("web");
    plan.push_alloc(alloc("on-down", &web, "down", 100, 100));
    plan.push_alloc(alloc("new-on-inel", &web, "inel", 100, 100));
    plan.push_alloc(alloc("ghost", &web, "nowhere", 100, 100));
    let v = evaluate_plan(
        &c.snap(),
        &PlanSubmission {
            plan,
            evals: vec![],
        },
    );
    assert_eq!(v.result.rejected_nodes, ["down", "inel", "nowhere"]);

    // An in-place update of an allocation already on the ineligible node is allowed.
    let mut plan = plan_for("web");
    let mut update = (*c.snap().alloc("running").unwrap()).clone();
    update.eval_id = "eval-web".into();
    plan.push_alloc(update);
    let v = evaluate_plan(
        &c.snap(),
        &PlanSubmission {
            plan,
            evals: vec![],
        },
    );
    assert!(v.result.rejected_nodes.is_empty());
}

#[test]
fn only_committed_canaries_stay_in_the_deployment() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    let web = job("web", 2, 600, 256);
    c.register(&web, "eval-web");
    let mut plan = plan_for("web");
    plan.push_alloc(alloc("c1", &web, "n1", 600, 256));
    plan.push_alloc(alloc("c2", &web, "nowhere", 600, 256));
    plan.deployment = Some(Deployment {
        id: "d1".into(),
        namespace: "default".into(),
        job_id: "web".into(),
        status: "running".into(),
        task_groups: [(
            "web".to_string(),
            DeploymentState {
                placed_canaries: vec!["c1".into(), "c2".into()],
                desired_canaries: 2,
                ..DeploymentState::default()
            },
        )]
        .into(),
        ..Deployment::default()
    });
    let v = evaluate_plan(
        &c.snap(),
        &PlanSubmission {
            plan,
            evals: vec![],
        },
    );
    let d = v.result.deployment.as_ref().unwrap();
    assert_eq!(d.task_groups["web"].placed_canaries, ["c1"]);
}

// ----- the engine -----

fn sub(priority: i32) -> Arc<PlanSubmission> {
    Arc::new(PlanSubmission {
        plan: Plan {
            priority,
            ..Plan::default()
        },
        evals: vec![],
    })
}

fn evaluating(out: &[Command]) -> Vec<(Vec<PlanId>, bool)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Evaluate { batch, over_commit } => {
                Some((batch.iter().map(|(id, _)| *id).collect(), *over_commit))
            }
            _ => None,
        })
        .collect()
}

fn committing(out: &[Command]) -> Vec<&state::Command> {
    out.iter()
        .filter_map(|c| match c {
            Command::Commit { command } => Some(&**command),
            _ => None,
        })
        .collect()
}

fn replies(out: &[Command]) -> Vec<(PlanId, Result<u64, PlanError>)> {
    out.iter()
        .filter_map(|c| match c {
            Command::Reply { id, result } => Some((*id, result.clone().map(|r| r.alloc_index))),
            _ => None,
        })
        .collect()
}

fn commit_outcome() -> Evaluated {
    Evaluated {
        result: PlanResult::default(),
        command: Some(state::Command::EvalUpsert { evals: vec![] }),
    }
}

fn nothing_to_write() -> Evaluated {
    Evaluated {
        result: PlanResult::default(),
        command: None,
    }
}

fn committed(index: u64) -> Event {
    Event::Committed {
        index,
        errors: vec![],
    }
}

/// The pipeline: the first plan is checked alone; the plans that queue meanwhile are checked
/// together, on top of the entry in commit, and go into one entry once it is applied; each plan
/// of a batch gets its own answer (a plan that fails in the entry fails alone).
#[test]
fn plans_queued_during_a_commit_are_checked_on_top_of_it_and_committed_together() {
    let mut e = PlanApplier::new();
    let out = e.handle(Event::Submit {
        id: 1,
        submission: sub(50),
    });
    assert_eq!(evaluating(&out), [(vec![1], false)], "idle: starts at once");
    for (id, priority) in [(2, 10), (3, 90), (4, 90)] {
        let out = e.handle(Event::Submit {
            id,
            submission: sub(priority),
        });
        assert!(out.is_empty(), "one evaluation in flight at a time");
    }
    let out = e.handle(Event::Evaluated {
        verdicts: vec![(1, commit_outcome())],
    });
    assert!(matches!(
        committing(&out)[..],
        [state::Command::EvalUpsert { .. }]
    ));
    assert_eq!(
        evaluating(&out),
        [(vec![3, 4, 2], true)],
        "the rest, by priority then arrival, on top of the entry in commit"
    );
    let out = e.handle(Event::Evaluated {
        verdicts: vec![
            (3, commit_outcome()),
            (4, nothing_to_write()),
            (2, commit_outcome()),
        ],
    });
    assert!(out.is_empty(), "waits for the entry in commit");
    let out = e.handle(committed(42));
    assert_eq!(replies(&out), [(1, Ok(42))]);
    let [state::Command::PlanApplyBatch { plans }] = &committing(&out)[..] else {
        panic!("one entry for the batch: {out:?}");
    };
    assert_eq!(plans.len(), 2, "the plan that writes nothing is not in it");
    let out = e.handle(Event::Committed {
        index: 43,
        errors: vec![None, Some("no such evaluation".into())],
    });
    assert_eq!(
        replies(&out),
        [
            (3, Ok(43)),
            (4, Ok(0)),
            (2, Err(PlanError::Commit("no such evaluation".into())))
        ]
    );
    assert!(e.handle(committed(99)).is_empty(), "no entry in commit");
}

/// What was checked on top of an entry that then failed is void: those plans are checked again
/// against the state as it is (whether their verdicts came back before or after the failure).
#[test]
fn a_failed_commit_voids_the_verdicts_made_on_top_of_it() {
    for verdicts_first in [false, true] {
        let mut e = PlanApplier::new();
        e.handle(Event::Submit {
            id: 1,
            submission: sub(50),
        });
        e.handle(Event::Submit {
            id: 2,
            submission: sub(50),
        });
        let out = e.handle(Event::Evaluated {
            verdicts: vec![(1, commit_outcome())],
        });
        assert_eq!(evaluating(&out), [(vec![2], true)]);
        if verdicts_first {
            let out = e.handle(Event::Evaluated {
                verdicts: vec![(2, commit_outcome())],
            });
            assert!(out.is_empty());
        }
        let out = e.handle(Event::CommitFailed {
            error: "raft: timed out".into(),
        });
        assert_eq!(
            replies(&out),
            [(1, Err(PlanError::Commit("raft: timed out".into())))]
        );
        let out = if verdicts_first {
            out
        } else {
            e.handle(Event::Evaluated {
                verdicts: vec![(2, commit_outcome())],
            })
        };
        assert!(committing(&out).is_empty(), "{out:?}");
        assert_eq!(evaluating(&out), [(vec![2], false)], "checked again");
    }
}

/// A plan that fails inside an applied entry voids what was checked on top of it, like a failed
/// entry: those plans were counted with its stops done.
#[test]
fn a_plan_failing_inside_its_entry_voids_the_verdicts_made_on_top_of_it() {
    let mut e = PlanApplier::new();
    for id in 1..=3 {
        e.handle(Event::Submit {
            id,
            submission: sub(50),
        });
    }
    e.handle(Event::Evaluated {
        verdicts: vec![(1, commit_outcome())],
    });
    let out = e.handle(Event::Evaluated {
        verdicts: vec![(2, commit_outcome()), (3, commit_outcome())],
    });
    assert!(out.is_empty(), "checked on top of 1, waiting for it");
    let out = e.handle(Event::Committed {
        index: 9,
        errors: vec![Some("attempting to upsert allocation without a job".into())],
    });
    assert_eq!(replies(&out).len(), 1);
    assert!(committing(&out).is_empty(), "{out:?}");
    assert_eq!(evaluating(&out), [(vec![2, 3], false)], "checked again");
}

/// Plans that could not be checked (the entry under them does not apply to the state it was
/// made on) go back to the queue, and nothing is checked until that entry is settled.
#[test]
fn unchecked_plans_wait_for_the_entry_under_them() {
    let mut e = PlanApplier::new();
    for id in 1..=3 {
        e.handle(Event::Submit {
            id,
            submission: sub(50),
        });
    }
    e.handle(Event::Evaluated {
        verdicts: vec![(1, commit_outcome())],
    });
    let out = e.handle(Event::Evaluated { verdicts: vec![] });
    assert!(out.is_empty(), "held while 1 commits: {out:?}");
    assert_eq!(e.queued(), 2);
    let out = e.handle(committed(10));
    assert_eq!(replies(&out), [(1, Ok(10))]);
    assert_eq!(evaluating(&out), [(vec![2, 3], false)]);
    // A batch cut short (a plan's entry did not apply): the checked part goes on, the rest waits.
    let out = e.handle(Event::Evaluated {
        verdicts: vec![(2, commit_outcome())],
    });
    assert_eq!(committing(&out).len(), 1);
    assert_eq!(evaluating(&out), [(vec![3], true)]);
}

/// A rejected plan refreshes to at least the entry that committed its batch: the plans before
/// it in the batch (what rejected it) are in the state the worker schedules on next.
#[test]
fn a_rejected_plan_refreshes_to_the_entry_of_its_batch() {
    let mut e = PlanApplier::new();
    e.handle(Event::Submit {
        id: 1,
        submission: sub(50),
    });
    let mut rejected = nothing_to_write();
    rejected.result.refresh_index = 7;
    let out = e.handle(Event::Evaluated {
        verdicts: vec![(1, rejected.clone())],
    });
    let [Command::Reply { result: Ok(r), .. }] = &out[..] else {
        panic!("nothing to write: answered at once: {out:?}");
    };
    assert_eq!(r.refresh_index, 7);

    for id in [2, 3] {
        e.handle(Event::Submit {
            id,
            submission: sub(50),
        });
    }
    let out = e.handle(Event::Evaluated {
        verdicts: vec![(2, commit_outcome()), (3, rejected)],
    });
    assert_eq!(committing(&out).len(), 1);
    let out = e.handle(committed(50));
    let refresh: Vec<_> = out
        .iter()
        .filter_map(|c| match c {
            Command::Reply { id, result: Ok(r) } => Some((*id, r.refresh_index, r.alloc_index)),
            _ => None,
        })
        .collect();
    assert_eq!(refresh, [(2, 0, 50), (3, 50, 0)]);
}

/// A batch is bounded by plans and by the allocations they move; the first plan always goes.
#[test]
fn batches_are_bounded_by_plans_and_allocations() {
    use crate::leader::limits::{PLAN_BATCH_ALLOCS_MAX, PLAN_BATCH_MAX};
    let big = |n: usize| {
        let mut plan = Plan {
            priority: 50,
            ..Plan::default()
        };
        plan.node_allocation
            .insert("n1".into(), vec![Allocation::default(); n]);
        Arc::new(PlanSubmission {
            plan,
            evals: vec![],
        })
    };
    let mut e = PlanApplier::new();
    e.handle(Event::Submit {
        id: 0,
        submission: sub(50),
    });
    for id in 1..=PLAN_BATCH_MAX as u64 + 1 {
        e.handle(Event::Submit {
            id,
            submission: sub(50),
        });
    }
    let out = e.handle(Event::Evaluated {
        verdicts: vec![(0, nothing_to_write())],
    });
    let [(batch, _)] = &evaluating(&out)[..] else {
        panic!("{out:?}");
    };
    assert_eq!(batch.len(), PLAN_BATCH_MAX);
    let out = e.handle(Event::Evaluated {
        verdicts: batch.iter().map(|id| (*id, nothing_to_write())).collect(),
    });
    assert_eq!(evaluating(&out), [(vec![PLAN_BATCH_MAX as u64 + 1], false)]);
    e.handle(Event::Evaluated {
        verdicts: vec![(PLAN_BATCH_MAX as u64 + 1, nothing_to_write())],
    });

    let mut e = PlanApplier::new();
    e.handle(Event::Submit {
        id: 0,
        submission: sub(50),
    });
    for id in 1..=3 {
        e.handle(Event::Submit {
            id,
            submission: big(PLAN_BATCH_ALLOCS_MAX / 2 + 1),
        });
    }
    let out = e.handle(Event::Evaluated {
        verdicts: vec![(0, nothing_to_write())],
    });
    assert_eq!(
        evaluating(&out),
        [(vec![1], false)],
        "two would be too many"
    );
}

#[test]
fn a_flush_answers_every_plan_not_leader() {
    let mut e = PlanApplier::new();
    for id in 1..=3 {
        e.handle(Event::Submit {
            id,
            submission: sub(50),
        });
    }
    // 1 in commit, 2 and 3 under evaluation on top of it.
    e.handle(Event::Evaluated {
        verdicts: vec![(1, commit_outcome())],
    });
    e.handle(Event::Submit {
        id: 4,
        submission: sub(50),
    });
    let out = e.handle(Event::Flush);
    let mut answered = replies(&out);
    answered.sort_by_key(|(id, _)| *id);
    assert_eq!(
        answered,
        (1..=4)
            .map(|id| (id, Err(PlanError::NotLeader)))
            .collect::<Vec<_>>()
    );
    assert_eq!(e.queued(), 0);
    assert!(e
        .handle(Event::Evaluated {
            verdicts: vec![(2, commit_outcome()), (3, commit_outcome())]
        })
        .is_empty());
    assert!(e.handle(committed(5)).is_empty());
}

#[test]
fn a_full_queue_refuses_more() {
    let mut e = PlanApplier::new();
    for id in 0..=PLAN_QUEUE_MAX as u64 {
        assert!(replies(&e.handle(Event::Submit {
            id,
            submission: sub(50)
        }))
        .is_empty());
    }
    let out = e.handle(Event::Submit {
        id: 10_000,
        submission: sub(50),
    });
    assert_eq!(
        replies(&out),
        [(10_000, Err(PlanError::QueueFull(PLAN_QUEUE_MAX)))]
    );
}

/// A stop built on the worker's snapshot carries that snapshot's client status; only the
/// scheduler's own `lost` is written: a stale `unknown` would undo the `running` its client
/// reported since (a reconnect), and a `lost` never overrides a client's `complete`.
#[test]
fn a_stop_writes_no_client_status_older_than_the_stored_one() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    let web = job("web", 2, 100, 64);
    c.register(&web, "eval-web");
    let mut a = alloc("a", &web, "n1", 100, 64);
    a.client_status = "unknown".into();
    let mut b = alloc("b", &web, "n1", 100, 64);
    b.client_status = "running".into();
    c.apply(state::Command::AllocUpsert { allocs: vec![a, b] });
    // The worker's snapshot: a unknown, b running.
    let (stale_a, stale_b) = (c.snap().alloc("a").unwrap(), c.snap().alloc("b").unwrap());
    // Meanwhile a's client came back and says running; b's client finished it.
    c.apply(state::Command::AllocClientUpdate {
        allocs: vec![
            model::wire::AllocClientUpdate {
                id: "a".into(),
                client_status: "running".into(),
                ..Default::default()
            },
            model::wire::AllocClientUpdate {
                id: "b".into(),
                client_status: "complete".into(),
                ..Default::default()
            },
        ],
        evals: vec![],
    });
    let mut plan = plan_for("web");
    let mut stop_a = (*stale_a).clone();
    stop_a.desired_status = "stop".into();
    plan.push_update(stop_a);
    let mut stop_b = (*stale_b).clone();
    stop_b.desired_status = "stop".into();
    stop_b.client_status = "lost".into();
    plan.push_update(stop_b);
    let v = evaluate_plan(
        &c.snap(),
        &PlanSubmission {
            plan,
            evals: vec![],
        },
    );
    commit(&mut c, &v);
    let snap = c.snap();
    assert_eq!(snap.alloc("a").unwrap().desired_status, "stop");
    assert_eq!(snap.alloc("a").unwrap().client_status, "running");
    assert_eq!(snap.alloc("b").unwrap().desired_status, "stop");
    assert_eq!(snap.alloc("b").unwrap().client_status, "complete");
}

/// Two plans that each fit the state alone but not together. Checked in one batch, the second
/// sees the first laid over and is rejected; checked while the first is the entry in commit (not
/// applied yet), likewise. Checked against the state alone it would fit: that is what the
/// optimistic view prevents.
#[test]
fn the_batch_before_a_plan_and_the_entry_in_commit_count_against_it() {
    let (mut c, sub_a, sub_b) = contested();
    let (sub_a, sub_b) = (Arc::new(sub_a), Arc::new(sub_b));

    let alone = evaluate_batch(&c.snap(), None, &vec![(2, sub_b.clone())]);
    assert!(alone[0].1.result.rejected_nodes.is_empty(), "b alone fits");

    let both = evaluate_batch(
        &c.snap(),
        None,
        &vec![(1, sub_a.clone()), (2, sub_b.clone())],
    );
    let (a_verdict, b_verdict) = (&both[0].1, &both[1].1);
    assert!(a_verdict.command.is_some());
    assert_eq!(a_verdict.result.refresh_index, 0);
    assert_eq!(b_verdict.result.rejected_nodes, ["n1"]);
    let places = |v: &Evaluated| match &v.command {
        Some(state::Command::PlanApply { allocs_upsert, .. }) => allocs_upsert.len(),
        _ => 0,
    };
    assert_eq!(places(b_verdict), 0, "nothing of b is placed");
    assert!(
        b_verdict.result.refresh_index <= c.snap().index(),
        "a real index, not the optimistic state's"
    );

    let entry = Arc::new(a_verdict.command.clone().unwrap());
    let over = evaluate_batch(&c.snap(), Some(&entry), &vec![(2, sub_b.clone())]);
    assert_eq!(over[0].1.result.rejected_nodes, ["n1"]);

    c.apply((*entry).clone());
    assert_nothing_overcommitted(&c.snap());
    assert_eq!(c.snap().allocs_by_node("n1").len(), 1);
    // Laying an entry the state already holds changes nothing: b is still rejected.
    let again = evaluate_batch(&c.snap(), Some(&entry), &vec![(2, sub_b.clone())]);
    assert_eq!(again[0].1.result.rejected_nodes, ["n1"]);
}

/// A plan that evicts commits the eviction with who preempted it, and an evaluation of the evicted
/// job (`preemption`) in the same entry, with an ID every check of the plan makes the same.
#[test]
fn a_preempting_plan_evicts_and_evaluates_the_evicted_job() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    let mut low = job("low", 1, 900, 256);
    low.job_type = Some(model::JobType::Batch);
    low.priority = Some(10);
    let eval_low = c.register(&low, "eval-low");
    let s = c.snap();
    let out = scheduler::schedule(&SnapshotView::new(s.clone()), &eval_low, NOW, 1).unwrap();
    let first = evaluate_plan(&s, &submission(&eval_low, out, s.index()));
    commit(&mut c, &first).expect("placed");
    let mut sys = job("agent", 1, 500, 128);
    sys.job_type = Some(model::JobType::System);
    sys.priority = Some(100);
    let eval_sys = c.register(&sys, "eval-sys");
    let s = c.snap();
    let out = scheduler::schedule(&SnapshotView::new(s.clone()), &eval_sys, NOW, 1).unwrap();
    assert_eq!(out.plan.node_preemptions["n1"].len(), 1, "{:?}", out.plan);
    let sub = submission(&eval_sys, out, s.index());
    let verdict = evaluate_plan(&s, &sub);
    assert_eq!(
        evaluate_plan(&s, &sub),
        verdict,
        "the same check, the same entry"
    );
    commit(&mut c, &verdict).expect("committed");
    let snap = c.snap();
    let placed = snap
        .allocs_by_job("default", "agent")
        .pop()
        .expect("placed");
    let victim = snap.allocs_by_job("default", "low").pop().expect("kept");
    assert_eq!(victim.desired_status, DesiredStatus::Evict);
    assert_eq!(victim.preempted_by_allocation, placed.id);
    assert_eq!(placed.preempted_allocations, vec![victim.id.clone()]);
    let evals: Vec<_> = snap
        .evals_by_job("default", "low")
        .into_iter()
        .filter(|e| e.triggered_by == model::eval::EVAL_TRIGGER_PREEMPTION)
        .collect();
    assert_eq!(evals.len(), 1);
    assert_eq!(evals[0].status, model::EvalStatus::Pending);
    assert_eq!(evals[0].priority, 10);
    assert_nothing_overcommitted(&snap);
}

/// An eviction of an allocation that finished after the plan was made is dropped, with its
/// evaluation (Nomad's evaluatePlan keeps only live preemptions); the placement still fits.
#[test]
fn an_eviction_of_an_allocation_that_finished_meanwhile_is_dropped() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    let mut low = job("low", 1, 900, 256);
    low.job_type = Some(model::JobType::Batch);
    low.priority = Some(10);
    let eval_low = c.register(&low, "eval-low");
    let s = c.snap();
    let out = scheduler::schedule(&SnapshotView::new(s.clone()), &eval_low, NOW, 1).unwrap();
    commit(
        &mut c,
        &evaluate_plan(&s, &submission(&eval_low, out, s.index())),
    )
    .expect("placed");
    let mut sys = job("agent", 1, 500, 128);
    sys.job_type = Some(model::JobType::System);
    sys.priority = Some(100);
    let eval_sys = c.register(&sys, "eval-sys");
    let s = c.snap();
    let out = scheduler::schedule(&SnapshotView::new(s.clone()), &eval_sys, NOW, 1).unwrap();
    let sub = submission(&eval_sys, out, s.index());
    // The victim finishes before the plan is applied.
    let mut done = (*c.snap().allocs_by_job("default", "low").pop().unwrap()).clone();
    done.client_status = "complete".into();
    c.apply(state::Command::AllocUpsert { allocs: vec![done] });
    let verdict = evaluate_plan(&c.snap(), &sub);
    assert!(
        verdict.result.node_preemptions.is_empty(),
        "{:?}",
        verdict.result
    );
    assert_eq!(verdict.result.node_allocation.len(), 1);
    commit(&mut c, &verdict).expect("committed");
    let snap = c.snap();
    let victim = snap.allocs_by_job("default", "low").pop().unwrap();
    assert_eq!(
        victim.desired_status,
        DesiredStatus::Run,
        "not rewritten as evicted"
    );
    assert!(snap
        .evals_by_job("default", "low")
        .iter()
        .all(|e| e.triggered_by != model::eval::EVAL_TRIGGER_PREEMPTION));
}
