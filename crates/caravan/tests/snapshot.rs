//! `caravan operator snapshot save` on a running agent and `restore` onto a fresh one: every job,
//! allocation and node comes back. Mock-driver tasks, so nothing outlives the agents.

mod common;

use common::{temp_dir, Agent};
use serde_json::{json, Value};
use std::collections::BTreeMap;

fn ids(agent: &Agent, path: &str) -> BTreeMap<String, Value> {
    agent
        .get(path)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
        .into_iter()
        .map(|x| (x["ID"].as_str().unwrap_or_default().to_string(), x))
        .collect()
}

#[test]
fn a_saved_snapshot_restored_onto_a_fresh_server_reproduces_jobs_allocations_and_nodes() {
    let dir = temp_dir("snapshot-src");
    let data = dir.join("data").display().to_string();
    let mock = dir.join("mock.hcl");
    std::fs::write(&mock, common::MOCK_DRIVER_CONFIG).unwrap();
    let mock = mock.display().to_string();
    let src = Agent::start(&dir, &["-dev", "-data-dir", &data, "-config", &mock]);
    for (id, count) in [("web", 2), ("api", 1)] {
        let job = json!({"Job": {"ID": id, "Type": "service", "TaskGroups": [{
            "Name": "g", "Count": count,
            "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
                       "Resources": {"CPU": 20, "MemoryMB": 16}}]
        }]}});
        let (status, body) = src.put("/v1/jobs", &job);
        assert_eq!(status, 200, "{body}");
    }
    src.wait_until("three allocations running", || {
        ids(&src, "/v1/allocations")
            .values()
            .filter(|a| a["ClientStatus"] == "running")
            .count()
            == 3
    });

    let file = dir.join("state.snap");
    let file_s = file.display().to_string();
    let (code, out, err) = src.run(&["operator", "snapshot", "save", &file_s]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("State file written to"), "{out}");

    let fresh_dir = temp_dir("snapshot-dst");
    let fresh_data = fresh_dir.join("data").display().to_string();
    let fresh = Agent::start(&fresh_dir, &["-server", "-data-dir", &fresh_data]);
    let (code, out, err) = fresh.run(&["operator", "snapshot", "restore", &file_s]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Snapshot Restored"), "{out}");

    let (a, b) = (ids(&src, "/v1/jobs"), ids(&fresh, "/v1/jobs"));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (id, j) in &a {
        assert_eq!(j["Version"], b[id]["Version"], "{id}");
        assert_eq!(j["Status"], b[id]["Status"], "{id}");
    }
    let (a, b) = (ids(&src, "/v1/allocations"), ids(&fresh, "/v1/allocations"));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
    for (id, x) in &a {
        for field in ["JobID", "NodeID", "ClientStatus", "DesiredStatus", "Name"] {
            assert_eq!(x[field], b[id][field], "{id} {field}");
        }
    }
    let (a, b) = (ids(&src, "/v1/nodes"), ids(&fresh, "/v1/nodes"));
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());

    // The restored server keeps working: a new job is a new write after everything restored.
    let job = json!({"Job": {"ID": "after", "Type": "batch", "TaskGroups": [{"Name": "g",
        "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {}}]}]}});
    let (status, body) = fresh.put("/v1/jobs", &job);
    assert_eq!(status, 200, "{body}");
    let restored_max = b
        .values()
        .map(|n| n["ModifyIndex"].as_u64().unwrap_or(0))
        .max()
        .unwrap_or(0);
    let after = fresh.get("/v1/job/after").unwrap();
    assert!(after["ModifyIndex"].as_u64().unwrap() > restored_max);

    // Not a snapshot: refused, nothing changes.
    let bogus = fresh_dir.join("bogus");
    std::fs::write(&bogus, "hello").unwrap();
    let (code, _, err) = fresh.run(&[
        "operator",
        "snapshot",
        "restore",
        &bogus.display().to_string(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("not a Caravan snapshot"), "{err}");
    assert!(fresh.get("/v1/job/after").is_ok());

    for id in ["web", "api"] {
        let (code, _, err) = src.run(&["job", "stop", "-detach", id]);
        assert_eq!(code, 0, "{err}");
    }
}
