//! Snapshot save and restore, and the Raft log's encoding of commands.

mod common;

use common::*;
use proptest::prelude::*;
use state::{AllocStop, Command, StateError, StateStore, Table, SNAPSHOT_FORMAT_VERSION};

// ----- random command sequences -----

fn pick(names: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    proptest::sample::select(names)
}

const JOBS: &[&str] = &["web", "api", "batch"];
const NODES: &[&str] = &["n1", "n2", "n3"];
const EVALS: &[&str] = &["e1", "e2", "e3", "e4"];
const ALLOCS: &[&str] = &["a1", "a2", "a3", "a4"];
const EVAL_STATUSES: &[&str] = &["pending", "blocked", "complete", "failed"];
const CLIENT_STATUSES: &[&str] = &["pending", "running", "complete", "failed", "lost"];

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (pick(JOBS), 0..3u32, pick(EVALS), 0..2u8).prop_map(|(id, change, e, ty)| {
            let mut j = changed(&job(id), change);
            if ty == 1 {
                j.job_type = Some("system".into());
            }
            Command::JobRegister {
                job: j,
                eval: Some(eval(e, id)),
                submit_time: 1_700_000_000_000_000_000,
                submission: None,
            }
        }),
        (pick(JOBS), any::<bool>(), pick(EVALS)).prop_map(|(id, purge, e)| {
            Command::JobDeregister {
                namespace: "default".into(),
                job_id: id.into(),
                purge,
                eval: Some(eval(e, id)),
                submit_time: 0,
            }
        }),
        (pick(EVALS), pick(JOBS), pick(EVAL_STATUSES), 0..3i64).prop_map(
            |(id, j, status, queued)| {
                let mut e = eval(id, j);
                e.status = status.into();
                e.queued_allocations = [("web".to_string(), queued)].into();
                Command::EvalUpsert { evals: vec![e] }
            }
        ),
        (
            proptest::collection::vec(pick(EVALS), 0..2),
            proptest::collection::vec(pick(ALLOCS), 0..2)
        )
            .prop_map(|(evals, allocs)| Command::EvalDelete {
                eval_ids: evals.into_iter().map(String::from).collect(),
                alloc_ids: allocs.into_iter().map(String::from).collect(),
            }),
        (
            pick(ALLOCS),
            pick(JOBS),
            pick(NODES),
            pick(EVALS),
            pick(CLIENT_STATUSES),
            any::<bool>()
        )
            .prop_map(|(id, j, n, e, status, in_deployment)| {
                let mut job = job(j);
                // The alloc's job carries a create index, as the scheduler's copy would.
                job.create_index = Some(1);
                let mut a = alloc(id, &job, n, e);
                a.client_status = status.into();
                if in_deployment {
                    a.deployment_id = format!("d-{j}");
                }
                Command::AllocUpsert { allocs: vec![a] }
            }),
        (pick(NODES), any::<bool>()).prop_map(|(id, down)| {
            let mut n = node(id);
            if down {
                n.status = "down".into();
            }
            Command::NodeRegister { node: n }
        }),
        (pick(NODES), 0..100i64).prop_map(|(id, at)| Command::NodeUpdateStatus {
            node_id: id.into(),
            status: "down".into(),
            updated_at: 1_714_564_800 + at,
        }),
        pick(NODES).prop_map(|id| Command::NodeDeregister {
            node_ids: vec![id.into()]
        }),
        (pick(JOBS), any::<bool>()).prop_map(|(j, ok)| {
            let mut d = deployment(&format!("d-{j}"), &job(j));
            if ok {
                d.status = "successful".into();
            }
            Command::DeploymentUpsert { deployment: d }
        }),
        (
            pick(JOBS),
            pick(EVALS),
            proptest::collection::vec((pick(ALLOCS), pick(NODES)), 0..3),
            proptest::collection::vec(pick(ALLOCS), 0..2),
            pick(EVAL_STATUSES),
        )
            .prop_map(|(j, e, placed, stopped, status)| {
                let mut job = job(j);
                job.create_index = Some(1);
                let mut done = eval(e, j);
                done.status = status.into();
                Command::PlanApply {
                    eval_id: e.into(),
                    job: Some(job.clone()),
                    allocs_upsert: placed
                        .into_iter()
                        .map(|(id, n)| {
                            let mut a = alloc(id, &job, n, e);
                            a.job = None;
                            a
                        })
                        .collect(),
                    allocs_stop: stopped
                        .into_iter()
                        .map(|id| AllocStop {
                            alloc_id: id.into(),
                            desired_status: "stop".into(),
                            desired_description: "alloc not needed".into(),
                            ..AllocStop::default()
                        })
                        .collect(),
                    evals: vec![done],
                    deployment: None,
                    deployment_updates: Vec::new(),
                }
            }),
        // Check-and-set against a small index: some apply, some are refused.
        (
            pick(&["", "binpack", "spread"]),
            any::<bool>(),
            proptest::option::of(0..4u64)
        )
            .prop_map(|(algorithm, pause, cas)| Command::SchedulerConfigSet {
                config: model::scheduler_config::SchedulerConfiguration {
                    scheduler_algorithm: algorithm.into(),
                    pause_eval_broker: pause,
                    ..Default::default()
                },
                cas,
            }),
    ]
}

fn saved(store: &StateStore) -> Vec<u8> {
    let mut out = Vec::new();
    store.save(&mut out).expect("save");
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Save → restore into a fresh store → save gives the same bytes, and the restored store answers
    /// like the original.
    #[test]
    fn restore_gives_back_the_saved_state(cmds in proptest::collection::vec(command(), 0..40)) {
        let store = StateStore::new();
        for (i, cmd) in cmds.iter().enumerate() {
            // Some commands fail (an unknown job); that is part of the sequence.
            let _ = store.apply(i as u64 + 1, cmd);
        }
        let first = saved(&store);
        let restored = StateStore::new();
        restored.restore(&mut first.as_slice()).expect("restore");
        let second = saved(&restored);
        prop_assert_eq!(String::from_utf8_lossy(&second), String::from_utf8_lossy(&first));
        let (a, b) = (store.snapshot(), restored.snapshot());
        prop_assert_eq!(a.index(), b.index());
        prop_assert_eq!(restored.latest_index(), cmds.len() as u64);
        prop_assert_eq!(a.scheduler_config(), b.scheduler_config());
        for t in Table::ALL {
            prop_assert_eq!(a.table_index(t), b.table_index(t));
        }
        for since in 0..=cmds.len() as u64 {
            prop_assert_eq!(a.evals_modified_after(since), b.evals_modified_after(since));
            prop_assert_eq!(a.allocs_modified_after(since), b.allocs_modified_after(since));
            prop_assert_eq!(a.nodes_modified_after(since), b.nodes_modified_after(since));
        }
        for id in ALLOCS.iter().chain(EVALS).chain(NODES) {
            prop_assert_eq!(a.allocs_by_node(id), b.allocs_by_node(id));
            prop_assert_eq!(a.allocs_by_eval(id), b.allocs_by_eval(id));
        }
        for j in JOBS {
            prop_assert_eq!(a.evals_by_job("default", j), b.evals_by_job("default", j));
            prop_assert_eq!(a.allocs_by_job("default", j), b.allocs_by_job("default", j));
            prop_assert_eq!(a.job_versions("default", j), b.job_versions("default", j));
            let d = format!("d-{j}");
            prop_assert_eq!(a.allocs_by_deployment(&d), b.allocs_by_deployment(&d));
            prop_assert_eq!(a.deployments_by_job("default", j), b.deployments_by_job("default", j));
        }
    }

    /// Commands are the Raft log: each decodes from its JSON to itself, and applying the decoded log
    /// gives the same state (determinism).
    #[test]
    fn the_log_replays_to_the_same_state(cmds in proptest::collection::vec(command(), 0..25)) {
        let (original, replayed) = (StateStore::new(), StateStore::new());
        for (i, cmd) in cmds.iter().enumerate() {
            let text = serde_json::to_string(cmd).expect("encode");
            let decoded: Command = serde_json::from_str(&text).expect("decode");
            prop_assert_eq!(&decoded, cmd);
            let index = i as u64 + 1;
            let (a, b) = (original.apply(index, cmd), replayed.apply(index, &decoded));
            prop_assert_eq!(a.ok(), b.ok());
        }
        prop_assert_eq!(saved(&original), saved(&replayed));
    }
}

#[test]
fn a_saved_snapshot_starts_with_its_format_and_ends_with_a_count() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    let text = String::from_utf8(fsm.save()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "{{\"Format\":{SNAPSHOT_FORMAT_VERSION},\"Index\":1,"
        )),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with("{\"Job\":{"), "{}", lines[1]);
    assert_eq!(*lines.last().unwrap(), "{\"End\":{\"Objects\":4}}");
}

fn restore_error(bytes: &[u8]) -> String {
    let store = StateStore::new();
    store
        .apply(1, &Command::NodeRegister { node: node("keep") })
        .unwrap();
    let err = store.restore(&mut &bytes[..]).unwrap_err();
    assert!(matches!(err, StateError::Corrupt(_)), "{err:?}");
    assert!(
        store.snapshot().node("keep").is_some(),
        "a failed restore changes nothing"
    );
    assert_eq!(store.latest_index(), 1);
    err.to_string()
}

#[test]
fn garbage_is_refused_with_a_clear_error() {
    let msg = restore_error(b"\x89PNG\r\n\x1a\n");
    assert!(msg.contains("not a Caravan state snapshot"), "{msg}");
    let msg = restore_error(b"");
    assert!(msg.contains("empty"), "{msg}");
    let msg = restore_error(b"{\"Hello\":1}\n");
    assert!(msg.contains("no \"Format\" field"), "{msg}");
}

#[test]
fn an_unknown_format_version_is_refused_by_number() {
    let msg = restore_error(
        b"{\"Format\":3,\"Index\":1,\"TableIndexes\":{}}\n{\"End\":{\"Objects\":0}}\n",
    );
    assert!(msg.contains("format 3 is not supported"), "{msg}");
    assert!(
        msg.contains(&format!("reads formats 1 to {SNAPSHOT_FORMAT_VERSION}")),
        "{msg}"
    );
}

/// Format 2 writes an allocation that runs a stored job version without the job, and a load
/// gives it back, shared; format 1 (each allocation with its job) still loads; an allocation
/// naming a version the snapshot lacks is refused with its line.
#[test]
fn allocations_are_saved_without_their_shared_job_and_get_it_back() {
    let mut fsm = Fsm::default();
    let j = job("web");
    fsm.register(&j, "e1");
    let stored = fsm.job("web");
    fsm.allocs(vec![alloc("a1", &stored, "n1", "e1")]);
    let saved = fsm.save();
    let text = String::from_utf8(saved.clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("{\"AllocOfVersion\""))
        .expect("the allocation is written by reference");
    assert!(!line.contains("\"TaskGroups\""), "{line}");

    let loaded = StateStore::new();
    loaded.restore(&mut saved.as_slice()).unwrap();
    let snap = loaded.snapshot();
    let a1 = snap.alloc("a1").unwrap();
    let v = snap
        .job_version("default", "web", stored.version.unwrap_or(0))
        .unwrap();
    assert!(std::sync::Arc::ptr_eq(a1.job.as_ref().unwrap(), &v));
    // Saving the loaded state gives the same bytes.
    let mut again = Vec::new();
    loaded.save(&mut again).unwrap();
    assert_eq!(again, saved);

    // Format 1: the allocation carries its own job.
    let full = serde_json::to_string(&*a1).unwrap();
    let v1: String = text
        .lines()
        .map(|l| {
            if l.starts_with("{\"Format\"") {
                l.replacen("\"Format\":2", "\"Format\":1", 1)
            } else if l.starts_with("{\"AllocOfVersion\"") {
                format!("{{\"Alloc\":{full}}}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    let old = StateStore::new();
    old.restore(&mut v1.as_bytes()).unwrap();
    assert_eq!(old.snapshot().alloc("a1").unwrap().job_id, "web");

    // A version the snapshot does not hold.
    let broken = text.replace("\"JobVersion\":0", "\"JobVersion\":9");
    let msg = restore_error(broken.as_bytes());
    assert!(msg.contains("runs version 9 of job \"web\""), "{msg}");
    assert!(msg.contains("line "), "{msg}");
}

#[test]
fn a_truncated_or_damaged_snapshot_is_refused() {
    let mut fsm = Fsm::default();
    fsm.register(&job("web"), "e1");
    fsm.apply(Command::NodeRegister { node: node("n1") });
    let good = fsm.save();
    let text = String::from_utf8(good.clone()).unwrap();
    let without_end = text
        .lines()
        .take(text.lines().count() - 1)
        .collect::<Vec<_>>()
        .join("\n");
    let msg = restore_error(without_end.as_bytes());
    assert!(msg.contains("without its end record"), "{msg}");
    let dropped_line: String = text
        .lines()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    let msg = restore_error(dropped_line.as_bytes());
    assert!(msg.contains("end record counts"), "{msg}");
    let damaged = text.replacen("{\"Node\":{", "{\"Node\":[", 1);
    let msg = restore_error(damaged.as_bytes());
    assert!(msg.contains("line "), "{msg}");
    let mut trailing = good.clone();
    trailing.extend_from_slice(b"{\"Job\":{}}\n");
    let msg = restore_error(&trailing);
    assert!(msg.contains("after the end record"), "{msg}");
}

/// `operator snapshot restore`: a snapshot of a busy cluster restored into a young one keeps every
/// object, with indexes lowered to the restore's, so later writes always look newer.
#[test]
fn a_restore_through_the_log_lowers_indexes_so_later_writes_look_newer() {
    let mut old = Fsm::default();
    for i in 0..30 {
        old.register(&job(&format!("j{i}")), &format!("e{i}"));
    }
    old.apply(Command::NodeRegister { node: node("n1") });
    old.allocs(vec![alloc("a1", &job("j0"), "n1", "e0")]);
    let mut saved = Vec::new();
    old.store.save(&mut saved).unwrap();
    assert!(old.store.latest_index() > 30);

    let mut young = Fsm::default();
    young.register(&job("gone"), "eg");
    young.register(&job("gone2"), "eg2");
    let restored_at = young.apply(Command::StateRestore { snapshot: saved }).index;
    assert_eq!(restored_at, 3);
    let snap = young.store.snapshot();
    assert_eq!(snap.index(), 3);
    assert!(
        snap.job("default", "gone").is_none(),
        "the restore replaces the state"
    );
    assert_eq!(snap.jobs(None, "j").len(), 30);
    assert!(snap.node("n1").is_some());
    for j in snap.jobs(None, "") {
        assert!(j.modify_index.unwrap_or(0) <= 3, "{:?}", j.modify_index);
    }
    assert!(snap.max_table_index(&Table::ALL) <= 3);
    // Every node's allocations changed with the restore: its clients list them again (a client
    // ignores a list older than the last one it acted on).
    assert_eq!(snap.node_alloc_index("n1"), 3);
    let restored = snap.allocs(None, "");
    assert_eq!(restored.len(), 1);
    for a in restored {
        assert_eq!(
            a.alloc_modify_index, 3,
            "clients fetch every restored allocation again"
        );
    }
    young.register(&job("after"), "ea");
    let after = young.store.snapshot().job("default", "after").unwrap();
    assert_eq!(after.modify_index, Some(4));

    // A corrupt snapshot changes nothing (the entry still takes its index).
    let before = young.store.snapshot().jobs(None, "").len();
    assert!(young
        .try_apply(Command::StateRestore {
            snapshot: b"{\"Format\":1}".to_vec()
        })
        .is_err());
    assert_eq!(young.store.snapshot().jobs(None, "").len(), before);
}
