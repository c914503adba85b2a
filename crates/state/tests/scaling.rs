//! `JobScale`: a group's count as a new job version with its evaluation, checked against the job
//! the request read, and the scaling events kept per group (newest first, 20 at most), in
//! snapshots, gone with a purged job.

mod common;

use common::*;
use model::scaling::ScalingEvent;
use state::{Command, StateError, StateStore, Table};

fn scale(count: Option<i64>, job_modify_index: u64, eval_id: Option<&str>, time: i64) -> Command {
    Command::JobScale {
        namespace: "default".into(),
        job_id: "web".into(),
        group: "web".into(),
        count,
        job_modify_index,
        eval: eval_id.map(|id| eval(id, "web")),
        event: ScalingEvent {
            time,
            count,
            previous_count: 1,
            message: format!("at {time}"),
            ..ScalingEvent::default()
        },
        submit_time: time,
    }
}

#[test]
fn a_count_makes_a_new_version_with_its_eval_and_an_event() {
    let mut fsm = Fsm::default();
    fsm.register(&job_with_groups("web", &["web"]), "e1");
    let before = fsm.job("web");
    let r = fsm.apply(scale(
        Some(3),
        before.job_modify_index.unwrap(),
        Some("e2"),
        50,
    ));
    let after = fsm.job("web");
    assert_eq!(after.version, Some(1));
    assert_eq!(after.task_groups[0].count, Some(3));
    assert_eq!(after.submit_time, Some(50));
    assert_eq!(r.eval_id.as_deref(), Some("e2"));
    let e2 = fsm.snap().eval("e2").expect("written");
    assert_eq!(e2.job_modify_index, after.job_modify_index.unwrap());
    let events = fsm.snap().scaling_events("default", "web").expect("kept");
    let list = &events.scaling_events["web"];
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].eval_id.as_deref(), Some("e2"));
    assert_eq!(list[0].create_index, r.index);
    assert_eq!(fsm.snap().table_index(Table::ScalingEvents), r.index);
}

#[test]
fn a_job_changed_since_it_was_read_is_not_scaled() {
    let mut fsm = Fsm::default();
    fsm.register(&job_with_groups("web", &["web"]), "e1");
    let stale = fsm.job("web").job_modify_index.unwrap();
    fsm.register(&changed(&job_with_groups("web", &["web"]), 1), "e2");
    let err = fsm
        .try_apply(scale(Some(5), stale, Some("e3"), 60))
        .unwrap_err();
    assert!(matches!(err, StateError::Conflict(_)), "{err}");
    assert_eq!(fsm.job("web").version, Some(1), "nothing written");
    assert!(fsm.snap().eval("e3").is_none());
    assert!(fsm.snap().scaling_events("default", "web").is_none());
}

#[test]
fn an_event_without_a_count_changes_no_job_and_the_newest_20_are_kept() {
    let mut fsm = Fsm::default();
    fsm.register(&job_with_groups("web", &["web"]), "e1");
    for t in 0..25 {
        fsm.apply(scale(None, 0, None, t));
    }
    assert_eq!(fsm.job("web").version, Some(0));
    let events = fsm.snap().scaling_events("default", "web").unwrap();
    let list = &events.scaling_events["web"];
    assert_eq!(list.len(), 20);
    assert_eq!(list[0].time, 24, "newest first");
    assert_eq!(list[19].time, 5);
    assert!(list.iter().all(|e| e.eval_id.is_none()));
}

#[test]
fn events_survive_a_snapshot_and_go_with_a_purged_job() {
    let mut fsm = Fsm::default();
    fsm.register(&job_with_groups("web", &["web"]), "e1");
    fsm.apply(scale(None, 0, None, 7));
    let saved = fsm.save();
    let restored = StateStore::new();
    restored.restore(&mut &saved[..]).expect("loads");
    assert_eq!(
        restored.snapshot().scaling_events("default", "web"),
        fsm.snap().scaling_events("default", "web")
    );
    fsm.apply(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: true,
        eval: None,
        submit_time: 0,
    });
    assert!(fsm.snap().scaling_events("default", "web").is_none());
}

#[test]
fn an_unknown_group_or_job_is_refused() {
    let mut fsm = Fsm::default();
    assert!(matches!(
        fsm.try_apply(scale(Some(2), 0, None, 1)),
        Err(StateError::NotFound(_))
    ));
    fsm.register(&job_with_groups("web", &["api"]), "e1");
    let err = fsm.try_apply(scale(Some(2), 1, None, 1)).unwrap_err();
    assert!(err.to_string().contains("does not exist in job"), "{err}");
}
