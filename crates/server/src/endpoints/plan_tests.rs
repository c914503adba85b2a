use super::*;
use model::diff::DiffType;

use crate::leader::testkit::{alloc, job, node, Cluster};

fn planned(c: &Cluster, job: &Job) -> JobPlanResponse {
    let mut job = job.clone();
    job.namespace = Some("default".into());
    plan(&c.snap(), job, true, 1).expect("plan")
}

fn desired(resp: &JobPlanResponse) -> model::DesiredUpdates {
    resp.annotations
        .as_ref()
        .expect("annotations")
        .desired_tg_updates["web"]
}

#[test]
fn a_new_job_would_be_placed_and_is_added() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    let before = c.snap().index();
    let resp = planned(&c, &job("web", 2, 100, 64));
    assert_eq!(desired(&resp).place, 2);
    assert!(resp.failed_tg_allocs.is_empty());
    assert_eq!(resp.job_modify_index, 0);
    let diff = resp.diff.expect("diff");
    assert_eq!(diff.diff_type, DiffType::Added);
    assert_eq!(diff.task_groups[0].updates.get("create"), Some(&2));
    assert_eq!(c.snap().index(), before, "a plan writes nothing");
    assert!(c.snap().job("default", "web").is_none());
}

#[test]
fn an_unchanged_job_is_ignored_and_a_count_change_places_more() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    let web = job("web", 1, 100, 64);
    c.register(&web, "e1");
    let stored = (*c.snap().job("default", "web").unwrap()).clone();
    c.apply(state::Command::AllocUpsert {
        allocs: vec![alloc("a1", &stored, "n1", 100, 64)],
    });
    let resp = planned(&c, &web);
    assert_eq!(desired(&resp).ignore, 1);
    assert_eq!(desired(&resp).place, 0);
    assert_eq!(resp.job_modify_index, stored.job_modify_index.unwrap());
    assert_eq!(resp.diff.unwrap().diff_type, DiffType::None);

    let resp = planned(&c, &job("web", 3, 100, 64));
    assert_eq!(desired(&resp).place, 2);
    let diff = resp.diff.unwrap();
    let count = diff.task_groups[0]
        .fields
        .iter()
        .find(|f| f.name == "Count")
        .expect("Count");
    assert_eq!((count.old.as_str(), count.new.as_str()), ("1", "3"));
    assert_eq!(count.annotations, vec![model::diff::FORCES_CREATE]);
}

#[test]
fn no_room_shows_the_failed_group_and_a_blocked_eval() {
    let mut c = Cluster::new();
    c.add_node(node("n1", 1000, 1024));
    let resp = planned(&c, &job("big", 1, 5000, 64));
    assert!(resp.failed_tg_allocs.contains_key("web"), "{resp:#?}");
    assert_eq!(resp.created_evals.len(), 1, "the blocked evaluation");
}

#[test]
fn an_invalid_job_is_refused_naming_the_field() {
    let mut j = job("web", 1, 100, 64);
    j.task_groups[0].count = Some(-1);
    let err = prepare_job(&mut j).unwrap_err();
    assert!(err.to_string().contains("count"), "{err}");
}
