//! Job registration, versions, stop and purge, statuses and summaries, with Nomad's semantics.

mod common;

use common::*;
use model::eval::Evaluation;
use model::JobStatus;
use state::{Command, StateError, Table};

fn versions(fsm: &Fsm, id: &str) -> Vec<u64> {
    fsm.snap()
        .job_versions("default", id)
        .iter()
        .map(|j| j.version.unwrap())
        .collect()
}

fn complete(mut eval: Evaluation) -> Evaluation {
    eval.status = "complete".into();
    eval
}

#[test]
fn a_new_job_is_version_0_with_its_summary_and_eval() {
    let mut fsm = Fsm::default();
    let r = fsm.register(&job("web"), "e1");
    assert_eq!(r.index, 1);
    assert_eq!(r.job_version, Some(0));
    assert_eq!(r.job_modify_index, Some(1));
    assert_eq!(r.eval_id.as_deref(), Some("e1"));
    assert_eq!(r.eval_create_index, Some(1));

    let j = fsm.job("web");
    assert_eq!(j.version, Some(0));
    assert_eq!(
        (j.create_index, j.modify_index, j.job_modify_index),
        (Some(1), Some(1), Some(1))
    );
    assert_eq!(j.status, Some(JobStatus::Pending));
    assert_eq!(j.stable, Some(false));
    assert_eq!(j.submit_time, Some(1_001));
    assert_eq!(versions(&fsm, "web"), [0]);

    let snap = fsm.snap();
    let summary = snap.job_summary("default", "web").expect("summary");
    assert_eq!(summary.summary.keys().collect::<Vec<_>>(), ["web"]);
    assert_eq!(summary.summary["web"], Default::default());
    assert_eq!(summary.children, Some(Default::default()));
    assert_eq!((summary.create_index, summary.modify_index), (1, 1));

    let e = snap.eval("e1").expect("eval");
    assert_eq!(
        (e.job_modify_index, e.create_index, e.modify_index),
        (1, 1, 1)
    );
    for t in [
        Table::Jobs,
        Table::JobVersions,
        Table::JobSummaries,
        Table::Evals,
    ] {
        assert_eq!(snap.table_index(t), 1, "{t:?}");
    }
    assert_eq!(snap.table_index(Table::Allocs), 0);
}

#[test]
fn a_changed_spec_is_a_new_version() {
    let mut fsm = Fsm::default();
    let web = job("web");
    fsm.register(&web, "e1");
    let r = fsm.register(&changed(&web, 1), "e2");
    assert_eq!((r.job_version, r.job_modify_index), (Some(1), Some(2)));
    let j = fsm.job("web");
    assert_eq!(j.version, Some(1));
    assert_eq!(
        (j.create_index, j.modify_index, j.job_modify_index),
        (Some(1), Some(2), Some(2))
    );
    assert_eq!(versions(&fsm, "web"), [1, 0]);
    let v0 = fsm
        .snap()
        .job_version("default", "web", 0)
        .expect("v0 kept");
    assert!(!v0.meta.contains_key("change"));
    assert_eq!(fsm.snap().eval("e2").unwrap().job_modify_index, 2);
}

#[test]
fn an_unchanged_spec_keeps_version_and_job_modify_index_but_writes_the_eval() {
    let mut fsm = Fsm::default();
    let web = job("web");
    fsm.register(&web, "e1");
    let before = fsm.snap();
    // What a client sends back after reading the job: server-set fields filled in.
    let resubmitted = (*fsm.job("web")).clone();
    let r = fsm.register(&resubmitted, "e2");
    assert_eq!(r.index, 2);
    assert_eq!((r.job_version, r.job_modify_index), (Some(0), Some(1)));
    assert_eq!(r.eval_id.as_deref(), Some("e2"));
    let after = fsm.snap();
    assert_eq!(after.job("default", "web"), before.job("default", "web"));
    assert_eq!(
        after.table_index(Table::Jobs),
        1,
        "the job was not rewritten"
    );
    assert_eq!(after.table_index(Table::JobVersions), 1);
    let e2 = after.eval("e2").expect("the eval is written anyway");
    assert_eq!((e2.job_modify_index, e2.create_index), (1, 2));
    assert_eq!(versions(&fsm, "web"), [0]);
    // Re-registering the plain spec (no server fields) is just as unchanged.
    assert_eq!(fsm.register(&web, "e3").job_version, Some(0));
}

#[test]
fn stopping_a_job_makes_a_stopped_new_version() {
    let mut fsm = Fsm::default();
    let web = job("web");
    fsm.register(&web, "e1");
    fsm.evals(vec![complete(eval("e1", "web"))]);
    let r = fsm.apply(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: false,
        eval: Some(eval("e2", "web")),
        submit_time: 9_999,
    });
    assert_eq!((r.job_version, r.job_modify_index), (Some(1), Some(3)));
    let j = fsm.job("web");
    assert!(j.stop);
    assert_eq!(j.version, Some(1));
    assert_eq!(j.submit_time, Some(9_999));
    assert_eq!(j.job_modify_index, Some(3));
    assert_eq!(versions(&fsm, "web"), [1, 0]);
    assert!(!fsm.snap().job_version("default", "web", 0).unwrap().stop);
    assert_eq!(fsm.snap().eval("e2").unwrap().job_modify_index, 3);
    // Nomad: pending while the deregistration's eval is, dead once everything is terminal.
    assert_eq!(j.status, Some(JobStatus::Pending));
    fsm.evals(vec![complete(eval("e2", "web"))]);
    let j = fsm.job("web");
    assert_eq!(j.status, Some(JobStatus::Dead));
    assert_eq!(j.modify_index, Some(4), "a status change rewrites the job");
    assert_eq!(j.job_modify_index, Some(3), "but is not a spec change");
}

#[test]
fn deregistering_an_unknown_job_is_not_found_and_changes_nothing() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let saved = fsm.save();
    for purge in [false, true] {
        let err = fsm
            .try_apply(Command::JobDeregister {
                namespace: "default".into(),
                job_id: "nope".into(),
                purge,
                eval: Some(eval("e9", "nope")),
                submit_time: 0,
            })
            .unwrap_err();
        assert!(
            matches!(&err, StateError::NotFound(m) if m == "job not found"),
            "{err}"
        );
    }
    assert!(fsm.snap().eval("e9").is_none());
    assert_eq!(
        fsm.store.latest_index(),
        3,
        "failed entries still count as applied"
    );
    let mut expected = saved.clone();
    let mut now = fsm.save();
    // Only the header's latest index differs.
    let header_end = |b: &[u8]| b.iter().position(|c| *c == b'\n').unwrap();
    expected.drain(..header_end(&saved));
    now.drain(..header_end(&fsm.save()));
    assert_eq!(expected, now);
}

#[test]
fn purging_removes_the_job_its_versions_and_summary_but_not_its_evals_and_allocs() {
    let mut fsm = Fsm::default();
    let web = job("web");
    fsm.register(&web, "e1");
    fsm.register(&changed(&web, 1), "e2");
    fsm.allocs(vec![alloc("a1", &fsm.job("web"), "n1", "e2")]);
    let r = fsm.apply(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: true,
        eval: Some(eval("e3", "web")),
        submit_time: 0,
    });
    assert_eq!(r.job_version, None);
    let snap = fsm.snap();
    assert!(snap.job("default", "web").is_none());
    assert!(snap.job_versions("default", "web").is_empty());
    assert!(snap.job_summary("default", "web").is_none());
    assert_eq!(snap.evals_by_job("default", "web").len(), 3);
    assert_eq!(snap.allocs_by_job("default", "web").len(), 1);
    for t in [
        Table::Jobs,
        Table::JobVersions,
        Table::JobSummaries,
        Table::Evals,
    ] {
        assert_eq!(snap.table_index(t), 4, "{t:?}");
    }
}

#[test]
fn six_versions_are_kept() {
    let mut fsm = Fsm::default();
    let web = job("web");
    for n in 0..9 {
        fsm.register(&changed(&web, n), &format!("e{n}"));
    }
    assert_eq!(versions(&fsm, "web"), [8, 7, 6, 5, 4, 3]);
    assert_eq!(fsm.job("web").version, Some(8));
}

#[test]
fn the_newest_stable_version_outlives_trimming() {
    let mut fsm = Fsm::default();
    let web = job("web");
    fsm.register(&web, "e0");
    let mut d = deployment("d0", &fsm.job("web"));
    d.status = "successful".into();
    fsm.apply(Command::DeploymentUpsert { deployment: d });
    let j = fsm.job("web");
    assert_eq!((j.stable, j.version), (Some(true), Some(0)));
    assert_eq!(
        j.job_modify_index,
        Some(1),
        "stability is not a spec change"
    );
    for n in 1..=7 {
        fsm.register(&changed(&web, n), &format!("e{n}"));
    }
    assert_eq!(versions(&fsm, "web"), [7, 6, 5, 4, 3, 0]);
    let v0 = fsm.snap().job_version("default", "web", 0).unwrap();
    assert_eq!(v0.stable, Some(true));
    assert_eq!(fsm.job("web").stable, Some(false));
}

#[test]
fn status_follows_allocations_and_evaluations() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    assert_eq!(fsm.job("web").status, Some(JobStatus::Pending));
    let a = alloc("a1", &fsm.job("web"), "n1", "e1");
    fsm.allocs(vec![a.clone()]);
    assert_eq!(fsm.job("web").status, Some(JobStatus::Running));
    fsm.evals(vec![complete(eval("e1", "web"))]);
    assert_eq!(fsm.job("web").status, Some(JobStatus::Running));
    let mut done = a;
    done.client_status = "complete".into();
    fsm.allocs(vec![done]);
    assert_eq!(fsm.job("web").status, Some(JobStatus::Dead));
    // Garbage-collecting the eval keeps it dead; a job with nothing at all left is dead after a delete.
    fsm.apply(Command::EvalDelete {
        eval_ids: vec!["e1".into()],
        alloc_ids: vec!["a1".into()],
    });
    assert_eq!(fsm.job("web").status, Some(JobStatus::Dead));
}

#[test]
fn system_periodic_and_parameterized_jobs_run_until_stopped() {
    let mut fsm = Fsm::default();
    let mut system = job("sys");
    system.job_type = Some("system".into());
    fsm.register(&system, "e1");
    assert_eq!(fsm.job("sys").status, Some(JobStatus::Running));
    let mut batch = job("param");
    batch.job_type = Some("batch".into());
    batch.parameterized = Some(Default::default());
    fsm.apply(Command::JobRegister {
        job: batch,
        eval: None,
        submit_time: 1,
        submission: None,
    });
    assert_eq!(fsm.job("param").status, Some(JobStatus::Running));
    fsm.apply(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "sys".into(),
        purge: false,
        eval: None,
        submit_time: 0,
    });
    assert_eq!(fsm.job("sys").status, Some(JobStatus::Dead));
}

#[test]
fn summary_counts_follow_client_status_and_queued_evals() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let mut e1 = complete(eval("e1", "web"));
    e1.queued_allocations = [("web".to_string(), 2)].into();
    fsm.evals(vec![e1]);
    let counts = |fsm: &Fsm| fsm.snap().job_summary("default", "web").unwrap().summary["web"];
    assert_eq!(counts(&fsm).queued, 2);
    let j = fsm.job("web");
    fsm.allocs(vec![
        alloc("a1", &j, "n1", "e1"),
        alloc("a2", &j, "n1", "e1"),
    ]);
    let c = counts(&fsm);
    assert_eq!((c.queued, c.starting), (0, 2));
    let mut a1 = alloc("a1", &j, "n1", "e1");
    a1.client_status = "running".into();
    fsm.allocs(vec![a1.clone()]);
    let c = counts(&fsm);
    assert_eq!((c.starting, c.running), (1, 1));
    a1.client_status = "failed".into();
    fsm.allocs(vec![a1]);
    let c = counts(&fsm);
    assert_eq!((c.starting, c.running, c.failed), (1, 0, 1));
    assert_eq!(fsm.snap().table_index(Table::JobSummaries), 5);
}

#[test]
fn a_complete_eval_cancels_the_jobs_blocked_evals() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let mut blocked = eval("b1", "web");
    blocked.status = "blocked".into();
    fsm.evals(vec![blocked]);
    fsm.evals(vec![complete(eval("e1", "web"))]);
    let b1 = fsm.snap().eval("b1").unwrap();
    assert_eq!(b1.status, "canceled");
    assert_eq!(b1.status_description, "evaluation \"b1\" successful");
    assert_eq!((b1.create_index, b1.modify_index), (2, 3));
}

#[test]
fn a_job_without_an_id_is_invalid() {
    let mut fsm = Fsm::default();
    let err = fsm
        .try_apply(Command::JobRegister {
            job: job(""),
            eval: None,
            submit_time: 0,
            submission: None,
        })
        .unwrap_err();
    assert!(matches!(err, StateError::Invalid(_)), "{err}");
    assert!(fsm.snap().jobs(None, "").is_empty());
}

#[test]
fn jobs_list_by_namespace_and_prefix_in_order() {
    let mut fsm = Fsm::default();
    for (ns, id) in [
        ("default", "web-b"),
        ("prod", "web-a"),
        ("default", "web-a"),
        ("default", "api"),
    ] {
        let mut j = job(id);
        j.namespace = Some(ns.into());
        fsm.apply(Command::JobRegister {
            job: j,
            eval: None,
            submit_time: 0,
            submission: None,
        });
    }
    let listed = |ns: Option<&str>, prefix: &str| -> Vec<String> {
        fsm.snap()
            .jobs(ns, prefix)
            .iter()
            .map(|j| format!("{}/{}", j.namespace.as_deref().unwrap(), j.id))
            .collect()
    };
    assert_eq!(
        listed(Some("default"), "web"),
        ["default/web-a", "default/web-b"]
    );
    assert_eq!(
        listed(None, "web"),
        ["default/web-a", "default/web-b", "prod/web-a"]
    );
    assert_eq!(listed(None, "").len(), 4);
    assert!(listed(Some("dev"), "").is_empty());
}

fn submission(source: &str) -> model::job::JobSubmission {
    model::job::JobSubmission {
        source: source.into(),
        format: "hcl2".into(),
        variable_flags: [("region".to_string(), "eu".to_string())].into(),
        ..Default::default()
    }
}

fn register_with_source(fsm: &mut Fsm, job: &model::Job, source: Option<&str>) -> u64 {
    fsm.apply(Command::JobRegister {
        job: job.clone(),
        eval: None,
        submit_time: 7,
        submission: source.map(submission),
    })
    .job_version
    .unwrap()
}

#[test]
fn each_version_keeps_the_source_it_was_registered_from_until_it_is_pruned() {
    let mut fsm = Fsm::default();
    let v0 = register_with_source(&mut fsm, &job("web"), Some("job \"web\" {}"));
    let v1 = register_with_source(&mut fsm, &changed(&job("web"), 1), Some("v1"));
    assert_eq!((v0, v1), (0, 1));
    let sub = fsm.snap().job_submission("default", "web", 0).unwrap();
    assert_eq!(sub.source, "job \"web\" {}");
    assert_eq!(
        (sub.namespace.as_str(), sub.job_id.as_str(), sub.version),
        ("default", "web", 0)
    );
    assert_eq!(sub.job_modify_index, 1);
    assert_eq!(sub.variable_flags["region"], "eu");
    // The same spec again leaves version 1 and its first source alone.
    register_with_source(&mut fsm, &changed(&job("web"), 1), Some("later"));
    assert_eq!(
        fsm.snap()
            .job_submission("default", "web", 1)
            .unwrap()
            .source,
        "v1"
    );
    // A version registered without a source has none.
    let v2 = register_with_source(&mut fsm, &changed(&job("web"), 2), None);
    assert!(fsm.snap().job_submission("default", "web", v2).is_none());
    // Pruned with its version.
    for n in 3..10 {
        register_with_source(&mut fsm, &changed(&job("web"), n), Some("n"));
    }
    assert!(!versions(&fsm, "web").contains(&0));
    assert!(fsm.snap().job_submission("default", "web", 0).is_none());
    // Kept across a snapshot, and gone with a purge.
    let restored = state::StateStore::new();
    restored.restore(&mut fsm.save().as_slice()).unwrap();
    let last = fsm.job("web").version.unwrap();
    assert_eq!(
        restored
            .snapshot()
            .job_submission("default", "web", last)
            .unwrap()
            .source,
        "n"
    );
    fsm.apply(Command::JobDeregister {
        namespace: "default".into(),
        job_id: "web".into(),
        purge: true,
        eval: None,
        submit_time: 0,
    });
    assert!(fsm.snap().job_submission("default", "web", last).is_none());
}

#[test]
fn a_revert_brings_the_old_versions_source() {
    let mut fsm = Fsm::default();
    register_with_source(&mut fsm, &job("web"), Some("first"));
    register_with_source(&mut fsm, &changed(&job("web"), 1), Some("second"));
    let old = fsm.snap().job_version("default", "web", 0).unwrap();
    let v = register_with_source(&mut fsm, &old, None);
    assert_eq!(v, 2);
    assert_eq!(
        fsm.snap()
            .job_submission("default", "web", 2)
            .unwrap()
            .source,
        "first"
    );
}

fn tag(fsm: &mut Fsm, name: &str, version: u64, latest: bool) -> Result<(), StateError> {
    fsm.try_apply(Command::JobVersionTag {
        namespace: "default".into(),
        job_id: "web".into(),
        name: name.into(),
        version,
        latest,
        tag: Some(model::job::JobVersionTag {
            name: name.into(),
            description: format!("{name} desc"),
            tagged_time: 5,
        }),
    })
    .map(|_| ())
}

#[test]
fn tagged_versions_are_kept_and_a_name_names_one_version() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e0");
    tag(&mut fsm, "golden", 0, false).unwrap();
    assert_eq!(
        fsm.job("web").version_tag.as_ref().unwrap().name,
        "golden",
        "the current job carries its version's tag"
    );
    // The same spec again is not a new version; a changed one starts untagged.
    fsm.register(&job("web"), "e1");
    assert_eq!(fsm.job("web").version, Some(0));
    fsm.register(&changed(&job("web"), 1), "e2");
    assert!(fsm.job("web").version_tag.is_none());
    // The name is on version 0: not on another version too.
    let err = tag(&mut fsm, "golden", 1, false).unwrap_err();
    assert!(err.to_string().contains("already exists"), "{err}");
    tag(&mut fsm, "latest-one", 0, true).unwrap();
    assert_eq!(
        fsm.snap()
            .job_version("default", "web", 1)
            .unwrap()
            .version_tag
            .as_ref()
            .unwrap()
            .name,
        "latest-one"
    );
    let err = tag(&mut fsm, "x", 99, false).unwrap_err();
    assert!(matches!(err, StateError::NotFound(_)), "{err}");
    // Many versions later, version 0 is still there, and untagged versions are pruned as ever.
    for n in 2..20 {
        fsm.register(&changed(&job("web"), n), &format!("e{n}x"));
    }
    let kept = versions(&fsm, "web");
    assert!(kept.contains(&0) && kept.contains(&1), "{kept:?}");
    assert_eq!(kept.len(), 6 + 2, "{kept:?}");
    // Unset by name: the version stays until pruning reaches it.
    fsm.apply(Command::JobVersionTag {
        namespace: "default".into(),
        job_id: "web".into(),
        name: "golden".into(),
        version: 0,
        latest: false,
        tag: None,
    });
    assert!(fsm
        .snap()
        .job_version("default", "web", 0)
        .unwrap()
        .version_tag
        .is_none());
    let err = fsm
        .try_apply(Command::JobVersionTag {
            namespace: "default".into(),
            job_id: "web".into(),
            name: "golden".into(),
            version: 0,
            latest: false,
            tag: None,
        })
        .unwrap_err();
    assert!(err.to_string().contains("not found"), "{err}");
    fsm.register(&changed(&job("web"), 30), "e30");
    assert!(!versions(&fsm, "web").contains(&0));
}
