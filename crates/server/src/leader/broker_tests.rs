//! The broker engine driven synchronously: one event at a time, time as a number.

use super::*;
use model::eval::EvalStatus;

const T0: i64 = 1_714_564_800_000_000_000;
const SEC: i64 = 1_000_000_000;
const SERVICE: &str = "service";

fn eval(id: &str, job: &str, priority: i32, create_index: u64) -> Evaluation {
    Evaluation {
        id: id.into(),
        namespace: "default".into(),
        priority,
        eval_type: SERVICE.into(),
        triggered_by: "job-register".into(),
        job_id: job.into(),
        status: EvalStatus::Pending,
        create_index,
        modify_index: create_index,
        ..Evaluation::default()
    }
}

fn blocked(id: &str, job: &str, create_index: u64, classes: &[(&str, bool)]) -> Evaluation {
    let mut e = eval(id, job, 50, create_index);
    e.status = EvalStatus::Blocked;
    e.snapshot_index = create_index;
    e.class_eligibility = classes.iter().map(|(c, ok)| ((*c).into(), *ok)).collect();
    e
}

fn arcs(evals: Vec<Evaluation>) -> Vec<Arc<Evaluation>> {
    evals.into_iter().map(Arc::new).collect()
}

/// A broker rebuilt from `evals` at T0.
fn broker(evals: Vec<Evaluation>) -> EvalBroker {
    let mut b = EvalBroker::new("t");
    b.handle(Event::Rebuild(arcs(evals)), T0).unwrap();
    b
}

struct Harness {
    b: EvalBroker,
    next_waiter: WaiterId,
    /// Evaluations the broker asked to have written.
    written: Vec<Evaluation>,
}

impl Harness {
    fn new(evals: Vec<Evaluation>) -> Harness {
        Harness {
            b: broker(evals),
            next_waiter: 0,
            written: Vec::new(),
        }
    }

    fn run(&mut self, event: Event, now: i64) -> Vec<Command> {
        let out = self.b.handle(event, now).expect("event accepted");
        for c in &out {
            if let Command::WriteEvals(evals) = c {
                self.written.extend(evals.iter().cloned());
            }
        }
        out
    }

    /// Dequeues for `types`: the delivery, or `None` (the waiter stays parked).
    fn dequeue_types(&mut self, types: &[&str], now: i64) -> Option<(String, String)> {
        self.next_waiter += 1;
        let waiter = self.next_waiter;
        let types = types.iter().map(|t| (*t).to_owned()).collect();
        let out = self.run(Event::Dequeue { waiter, types }, now);
        delivered(&out, waiter)
    }

    fn dequeue(&mut self, now: i64) -> Option<(String, String)> {
        self.dequeue_types(&[SERVICE], now)
    }

    fn ack(&mut self, (id, token): &(String, String), now: i64) -> Vec<Command> {
        self.run(
            Event::Ack {
                eval_id: id.clone(),
                token: token.clone(),
            },
            now,
        )
    }

    fn nack(&mut self, (id, token): &(String, String), now: i64) -> Vec<Command> {
        self.run(
            Event::Nack {
                eval_id: id.clone(),
                token: token.clone(),
            },
            now,
        )
    }

    fn changed(&mut self, evals: Vec<Evaluation>, now: i64) -> Vec<Command> {
        self.run(Event::EvalsChanged(arcs(evals)), now)
    }

    fn capacity(&mut self, class: &str, index: u64) -> Vec<Command> {
        self.run(
            Event::CapacityChanged {
                class: class.into(),
                index,
            },
            T0,
        )
    }

    /// Drains everything ready now, in delivery order.
    fn drain(&mut self, now: i64) -> Vec<String> {
        let mut ids = Vec::new();
        while let Some((id, token)) = self.dequeue(now) {
            ids.push(id.clone());
            self.ack(&(id, token), now);
        }
        let parked = self.next_waiter;
        self.run(Event::CancelDequeue { waiter: parked }, now);
        ids
    }
}

fn delivered(out: &[Command], waiter: WaiterId) -> Option<(String, String)> {
    out.iter().find_map(|c| match c {
        Command::Deliver {
            waiter: w,
            eval,
            token,
        } if *w == waiter => Some((eval.id.clone(), token.clone())),
        _ => None,
    })
}

#[test]
fn higher_priority_first_then_older_across_the_types_asked_for() {
    let mut batch = eval("b60", "j-b", 60, 4);
    batch.eval_type = "batch".into();
    let mut h = Harness::new(vec![
        eval("s50-old", "j1", 50, 1),
        eval("s70", "j2", 70, 3),
        eval("s50-new", "j3", 50, 2),
        batch,
    ]);
    let mut order = Vec::new();
    while let Some(d) = h.dequeue_types(&[SERVICE, "batch"], T0) {
        order.push(d.0.clone());
        h.ack(&d, T0);
    }
    assert_eq!(order, ["s70", "b60", "s50-old", "s50-new"]);
    assert_eq!(
        h.dequeue_types(&["system"], T0),
        None,
        "nothing of that type"
    );
}

#[test]
fn a_job_has_one_outstanding_evaluation_and_the_newest_pending_one_runs_next() {
    let mut h = Harness::new(vec![
        eval("e1", "web", 50, 1),
        eval("e2", "web", 50, 2),
        eval("e3", "web", 50, 3),
        eval("other", "api", 50, 4),
    ]);
    assert_eq!(
        h.b.stats(),
        BrokerStats {
            ready: 2,
            pending: 2,
            ..BrokerStats::default()
        }
    );
    let first = h.dequeue(T0).unwrap();
    assert_eq!(first.0, "e1");
    let other = h.dequeue(T0).unwrap();
    assert_eq!(other.0, "other", "web's other evaluations wait");
    assert_eq!(h.dequeue(T0), None, "parked");
    let parked = h.next_waiter;

    let out = h.ack(&first, T0);
    assert_eq!(
        delivered(&out, parked).map(|d| d.0),
        Some("e3".into()),
        "the newest pending evaluation goes to the parked worker"
    );
    assert_eq!(h.written.len(), 1);
    assert_eq!(
        (h.written[0].id.as_str(), h.written[0].status.as_str()),
        ("e2", "canceled")
    );
    assert_eq!(h.written[0].status_description, CANCELED_NEWER_DESC);
}

#[test]
fn nacked_evaluations_come_back_after_the_nack_delay_until_the_delivery_limit() {
    let mut h = Harness::new(vec![eval("e1", "web", 50, 1), eval("e2", "web", 50, 2)]);
    let d1 = h.dequeue(T0).unwrap();
    h.nack(&d1, T0);
    assert_eq!(h.b.stats().nack_wait, 1);
    assert_eq!(h.b.next_timer(), Some(T0 + NACK_DELAY_INITIAL_NS));
    assert_eq!(h.dequeue(T0), None, "not before the initial nack delay");
    let parked = h.next_waiter;
    let out = h.run(Event::Tick, T0 + NACK_DELAY_INITIAL_NS);
    let d2 = delivered(&out, parked).expect("redelivered to the parked worker");
    assert_eq!(d2.0, "e1", "the job's slot stayed with e1");
    assert_ne!(d2.1, d1.1, "each delivery has its own token");

    let t = T0 + NACK_DELAY_INITIAL_NS;
    h.nack(&d2, t);
    assert_eq!(h.b.next_timer(), Some(t + NACK_DELAY_SUBSEQUENT_NS));
    h.run(Event::Tick, t + NACK_DELAY_SUBSEQUENT_NS - 1);
    assert_eq!(h.b.stats().nack_wait, 1);
    let t = t + NACK_DELAY_SUBSEQUENT_NS;
    let d3 = h.dequeue(t).expect("third delivery");
    assert!(h.written.is_empty());
    h.nack(&d3, t);

    let [failed, follow_up] = &h.written[..] else {
        panic!("a failed evaluation and its follow-up: {:?}", h.written);
    };
    assert_eq!(
        (failed.id.as_str(), failed.status.as_str()),
        ("e1", "failed")
    );
    assert_eq!(
        failed.status_description,
        format!("evaluation reached delivery limit ({EVAL_DELIVERY_LIMIT})")
    );
    assert_eq!(failed.next_eval, follow_up.id);
    assert_eq!(follow_up.triggered_by, "failed-follow-up");
    assert_eq!(
        (follow_up.status.as_str(), follow_up.previous_eval.as_str()),
        ("pending", "e1")
    );
    let due = state::parse_unix_nanos(follow_up.wait_until.as_deref().unwrap()).unwrap();
    assert!((t + FAILED_FOLLOW_UP_DELAY_MIN_NS
        ..t + FAILED_FOLLOW_UP_DELAY_MIN_NS + FAILED_FOLLOW_UP_DELAY_RANGE_NS)
        .contains(&due));
    assert_eq!(
        h.dequeue(t).map(|d| d.0),
        Some("e2".into()),
        "the job's next evaluation runs"
    );
}

#[test]
fn an_evaluation_not_acked_in_time_is_nacked_unless_touched() {
    let mut h = Harness::new(vec![eval("e1", "web", 50, 1)]);
    let d = h.dequeue(T0).unwrap();
    let touched_at = T0 + UNACK_TIMEOUT_NS / 2;
    h.run(
        Event::Touch {
            eval_id: d.0.clone(),
            token: d.1.clone(),
        },
        touched_at,
    );
    h.run(Event::Tick, T0 + UNACK_TIMEOUT_NS);
    assert_eq!(h.b.stats().unacked, 1, "the touch restarted the timer");
    h.run(Event::Tick, touched_at + UNACK_TIMEOUT_NS);
    assert_eq!(h.b.stats().nack_wait, 1, "nacked for the silent worker");
    let err =
        h.b.handle(
            Event::Ack {
                eval_id: d.0.clone(),
                token: d.1.clone(),
            },
            touched_at + UNACK_TIMEOUT_NS,
        )
        .unwrap_err();
    assert_eq!(err, BrokerError::NotOutstanding("e1".into()));
}

#[test]
fn stale_tokens_are_refused_and_change_nothing() {
    let mut h = Harness::new(vec![eval("e1", "web", 50, 1)]);
    let d = h.dequeue(T0).unwrap();
    for event in [
        Event::Ack {
            eval_id: "e1".into(),
            token: "t-999".into(),
        },
        Event::Touch {
            eval_id: "e1".into(),
            token: "t-999".into(),
        },
    ] {
        assert_eq!(
            h.b.handle(event, T0),
            Err(BrokerError::TokenMismatch("e1".into()))
        );
    }
    assert_eq!(
        h.b.handle(
            Event::Nack {
                eval_id: "nope".into(),
                token: d.1.clone()
            },
            T0
        ),
        Err(BrokerError::NotOutstanding("nope".into()))
    );
    assert_eq!(h.b.stats().unacked, 1);
    h.ack(&d, T0);
    assert_eq!(h.b.stats(), BrokerStats::default());
}

#[test]
fn evaluations_wait_until_their_wait_until() {
    let mut later = eval("later", "web", 50, 1);
    later.wait_until = Some(state::format_unix_nanos(T0 + 30 * SEC));
    let mut past = eval("past", "api", 50, 2);
    past.wait_until = Some(state::format_unix_nanos(T0 - SEC));
    let mut h = Harness::new(vec![later, past]);
    assert_eq!(h.b.stats().delayed, 1);
    assert_eq!(h.b.next_timer(), Some(T0 + 30 * SEC));
    assert_eq!(h.drain(T0), ["past"]);
    assert_eq!(h.drain(T0 + 30 * SEC - 1), Vec::<String>::new());
    assert_eq!(h.drain(T0 + 30 * SEC), ["later"]);
}

#[test]
fn a_delayed_evaluation_that_becomes_terminal_in_state_is_dropped() {
    let mut later = eval("later", "web", 50, 1);
    later.wait_until = Some(state::format_unix_nanos(T0 + 30 * SEC));
    let mut h = Harness::new(vec![later.clone()]);
    later.status = EvalStatus::Canceled;
    later.modify_index = 2;
    h.changed(vec![later], T0);
    assert_eq!(h.b.stats(), BrokerStats::default());
    assert_eq!(h.b.next_timer(), None);
}

#[test]
fn blocked_evaluations_wake_when_capacity_appears_on_a_class_they_may_use() {
    let mut h = Harness::new(vec![
        blocked("b-web", "web", 5, &[("c1", true), ("c2", false)]),
        blocked("b-api", "api", 5, &[("c1", false), ("c2", true)]),
    ]);
    let mut escaped = blocked("b-esc", "esc", 5, &[("c1", false), ("c2", false)]);
    escaped.escaped_computed_class = true;
    h.changed(vec![escaped], T0);
    assert_eq!(h.b.stats().blocked, 3);

    h.capacity("c1", 10);
    assert_eq!(
        h.drain(T0),
        ["b-esc", "b-web"],
        "eligible and escaped ones wake"
    );
    assert_eq!(h.b.stats().blocked, 1);
    h.capacity("c1", 11);
    assert_eq!(h.b.stats().blocked, 1, "b-api is ineligible on c1");
    h.capacity("c3", 12);
    assert_eq!(h.drain(T0), ["b-api"], "a class it has never seen may fit");
}

#[test]
fn capacity_seen_after_the_blocked_snapshot_unblocks_at_once() {
    let mut h = Harness::new(vec![]);
    h.capacity("c1", 10);
    h.changed(vec![blocked("old-snap", "web", 5, &[("c1", true)])], T0);
    assert_eq!(
        h.b.stats().ready,
        1,
        "capacity came at 10, after its snapshot at 5"
    );
    h.changed(vec![blocked("new-snap", "api", 12, &[("c1", true)])], T0);
    assert_eq!(
        h.b.stats().blocked,
        1,
        "its snapshot already saw that capacity"
    );
}

#[test]
fn a_newer_blocked_evaluation_of_a_job_cancels_the_older() {
    let mut h = Harness::new(vec![blocked("b1", "web", 5, &[])]);
    h.changed(vec![blocked("b2", "web", 7, &[])], T0);
    h.changed(vec![blocked("b0", "web", 3, &[])], T0);
    let canceled: Vec<&str> = h.written.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(canceled, ["b1", "b0"]);
    assert!(
        h.written
            .iter()
            .all(|e| e.status == "canceled"
                && e.status_description == CANCELED_DUPLICATE_BLOCKED_DESC)
    );
    assert_eq!(h.b.stats().blocked, 1);
    h.capacity("any", 100);
    assert_eq!(h.drain(T0), ["b2"]);
}

#[test]
fn what_the_worker_wrote_decides_after_the_ack_a_reblocked_evaluation_blocks_again() {
    let mut h = Harness::new(vec![blocked("b1", "web", 5, &[("c1", true)])]);
    h.capacity("c1", 6);
    let d = h.dequeue(T0).unwrap();
    // The worker's scheduler still could not place: it wrote the evaluation back as blocked.
    let mut reblocked = blocked("b1", "web", 5, &[("c1", true)]);
    reblocked.modify_index = 8;
    reblocked.snapshot_index = 7;
    h.changed(vec![reblocked], T0);
    assert_eq!(h.b.stats().unacked, 1, "still the worker's until it acks");
    h.ack(&d, T0);
    assert_eq!(h.b.stats().blocked, 1);

    // A completed one is simply gone after the ack, whichever comes first.
    h.capacity("c1", 9);
    let d = h.dequeue(T0).unwrap();
    h.ack(&d, T0);
    let mut done = blocked("b1", "web", 5, &[]);
    done.status = EvalStatus::Complete;
    done.modify_index = 10;
    h.changed(vec![done], T0);
    assert_eq!(h.b.stats(), BrokerStats::default());
}

#[test]
fn a_ready_evaluation_completed_elsewhere_passes_its_jobs_slot_on() {
    let mut h = Harness::new(vec![eval("e1", "web", 50, 1), eval("e2", "web", 50, 2)]);
    let mut done = eval("e1", "web", 50, 1);
    done.status = EvalStatus::Complete;
    done.modify_index = 3;
    h.changed(vec![done], T0);
    assert_eq!(h.drain(T0), ["e2"]);
    assert!(h.written.is_empty(), "nothing cancelled: e1 never ran here");
}

#[test]
fn rebuild_tracks_every_live_evaluation_and_flush_drops_them() {
    let mut done = eval("done", "x", 50, 1);
    done.status = EvalStatus::Complete;
    let mut h = Harness::new(vec![
        eval("e1", "web", 50, 2),
        blocked("b1", "api", 3, &[]),
        done,
    ]);
    assert_eq!(
        h.b.stats(),
        BrokerStats {
            ready: 1,
            blocked: 1,
            ..BrokerStats::default()
        }
    );
    let d = h.dequeue(T0).unwrap();
    assert_eq!(h.dequeue(T0), None);
    let parked = h.next_waiter;
    let out = h.run(Event::Flush, T0);
    assert_eq!(out, vec![Command::Release { waiter: parked }]);
    assert!(!h.b.enabled());
    assert_eq!(h.b.stats(), BrokerStats::default());
    assert_eq!(
        h.b.handle(
            Event::Ack {
                eval_id: d.0,
                token: d.1
            },
            T0
        ),
        Err(BrokerError::Disabled)
    );
    let out = h.run(
        Event::Dequeue {
            waiter: 77,
            types: vec![SERVICE.into()],
        },
        T0,
    );
    assert_eq!(out, vec![Command::Release { waiter: 77 }]);
    h.changed(vec![eval("e9", "web", 50, 9)], T0);
    assert_eq!(
        h.b.stats(),
        BrokerStats::default(),
        "ignored while disabled"
    );

    // Leadership again: a new broker (new token prefix) rebuilt from state.
    let mut again = EvalBroker::new("u");
    again
        .handle(Event::Rebuild(arcs(vec![eval("e1", "web", 50, 2)])), T0)
        .unwrap();
    let out = again
        .handle(
            Event::Dequeue {
                waiter: 1,
                types: vec![SERVICE.into()],
            },
            T0,
        )
        .unwrap();
    assert!(delivered(&out, 1).is_some_and(|(_, token)| token.starts_with("u-")));
}

#[test]
fn failed_follow_ups_are_deterministic() {
    let e = eval("e1", "web", 50, 1);
    let (a_failed, a_next) = failed_with_follow_up(&e, T0);
    let (b_failed, b_next) = failed_with_follow_up(&e, T0);
    assert_eq!((a_failed, a_next.clone()), (b_failed, b_next));
    assert_ne!(a_next.id, e.id);
    assert_eq!(a_next.id.len(), 36, "a UUID");
}

#[test]
fn a_paused_broker_delivers_nothing_and_loses_nothing() {
    let mut h = Harness::new(vec![eval("e1", "web", 50, 1)]);
    let first = h.dequeue(T0).expect("delivered before the pause");
    h.run(Event::Pause(true), T0);
    assert!(h.b.paused());
    // New work arrives and is tracked, but no worker gets it.
    h.changed(vec![eval("e2", "api", 50, 2)], T0);
    assert_eq!(h.dequeue(T0), None, "parked while paused");
    assert_eq!(h.b.stats().ready, 1);
    // A delivery made before the pause ends as usual.
    h.ack(&first, T0);
    assert_eq!(h.b.stats().unacked, 0);
    // A rebuild (leadership regained) keeps the pause until the follower says otherwise.
    h.run(
        Event::Rebuild(arcs(vec![
            eval("e2", "api", 50, 2),
            eval("e3", "db", 50, 3),
        ])),
        T0,
    );
    assert_eq!(h.dequeue(T0), None);
    // Resuming serves the parked dequeues at once, in order.
    let parked = h.next_waiter;
    let out = h.run(Event::Pause(false), T0);
    assert_eq!(
        delivered(&out, parked).map(|(id, _)| id).as_deref(),
        Some("e2")
    );
    assert_eq!(h.dequeue(T0).map(|(id, _)| id).as_deref(), Some("e3"));
}
