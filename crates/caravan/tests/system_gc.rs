//! `/v1/system/gc`, `/v1/system/reconcile/summaries` and `caravan system gc|reconcile summaries`
//! on a real dev agent: a finished batch job goes with its evaluations and allocations, a running
//! job and its allocations stay; only management tokens may ask.

mod common;

use common::{call, json_of, mock_dev_agent, temp_dir, wait_for, Agent};
use serde_json::json;
use std::time::Duration;

fn batch(id: &str, run_for: &str) -> serde_json::Value {
    json!({"Job": {"ID": id, "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t",
            "Driver": "mock_driver", "Config": {"run_for": run_for},
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}})
}

fn job_status(agent: &Agent, id: &str) -> Option<String> {
    let (s, b) = call(agent, "GET", &format!("/v1/job/{id}"), "", None);
    (s == 200).then(|| json_of(&b)["Status"].as_str().unwrap_or("").to_string())
}

#[test]
fn system_gc_collects_finished_work_and_keeps_running_work() {
    let agent = mock_dev_agent("system-gc");
    for (id, run_for) in [("done", "10ms"), ("busy", "10m")] {
        let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&batch(id, run_for)));
        assert_eq!(s, 200, "{b}");
    }
    wait_for(
        "the short job is dead",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || job_status(&agent, "done").as_deref() == Some("dead"),
    );
    wait_for(
        "the long job runs",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || job_status(&agent, "busy").as_deref() == Some("running"),
    );
    let (_, b) = call(&agent, "GET", "/v1/job/done/allocations", "", None);
    let done_alloc = json_of(&b)[0]["ID"].as_str().unwrap().to_string();
    let (_, b) = call(&agent, "GET", "/v1/job/done/evaluations", "", None);
    let done_eval = json_of(&b)[0]["ID"].as_str().unwrap().to_string();

    let (s, b) = call(&agent, "PUT", "/v1/system/gc", "", None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(job_status(&agent, "done"), None, "the finished job is gone");
    let (s, _) = call(
        &agent,
        "GET",
        &format!("/v1/allocation/{done_alloc}"),
        "",
        None,
    );
    assert_eq!(s, 404);
    let (s, _) = call(
        &agent,
        "GET",
        &format!("/v1/evaluation/{done_eval}"),
        "",
        None,
    );
    assert_eq!(s, 404);
    assert_eq!(job_status(&agent, "busy").as_deref(), Some("running"));
    let (_, b) = call(&agent, "GET", "/v1/job/busy/allocations", "", None);
    assert_eq!(json_of(&b).as_array().map(Vec::len), Some(1));

    let (s, b) = call(&agent, "GET", "/v1/system/gc", "", None);
    assert_eq!((s, b.as_str()), (405, "Invalid method"));

    // Summaries rebuilt from the allocations say the same.
    let before = agent.get("/v1/job/busy/summary").unwrap();
    let (s, b) = call(&agent, "PUT", "/v1/system/reconcile/summaries", "", None);
    assert_eq!(s, 200, "{b}");
    let after = agent.get("/v1/job/busy/summary").unwrap();
    assert_eq!(after["Summary"], before["Summary"]);
    assert_eq!(after["Summary"]["g"]["Running"], 1, "{after}");

    // The CLI.
    let (code, out, err) = agent.run(&["system", "gc"]);
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    let (code, _, err) = agent.run(&["system", "reconcile", "summaries"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn only_management_tokens_may_collect() {
    let dir = temp_dir("system-gc-acl");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-acl-enabled", "-data-dir", &data]);
    let (s, b) = call(&agent, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(s, 200, "{b}");
    let root = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let (s, _) = call(&agent, "PUT", "/v1/system/gc", "", None);
    assert_eq!(s, 403);
    let (s, _) = call(&agent, "PUT", "/v1/system/reconcile/summaries", "", None);
    assert_eq!(s, 403);
    let (s, b) = call(&agent, "PUT", "/v1/system/gc", &root, None);
    assert_eq!(s, 200, "{b}");
    let (code, _, err) = agent.run(&["system", "gc"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Error running system garbage-collection"),
        "{err}"
    );
}
