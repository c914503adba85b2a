//! `GET /v1/evaluations/count`, `DELETE /v1/evaluations` (only while the eval broker is paused,
//! only safe evaluations), `caravan eval list|delete`, and `/v1/node/:id/purge` (the node gone,
//! its jobs evaluated again in the same step).

mod common;

use common::{call, json_of, mock_dev_agent, wait_for};
use serde_json::json;
use std::time::Duration;

#[test]
fn evaluations_are_counted_and_deleted_only_when_safe() {
    let agent = mock_dev_agent("eval-delete");
    let job = |id: &str, run_for: &str| {
        json!({"Job": {"ID": id, "Type": "batch", "Datacenters": ["dc1"],
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t",
                "Driver": "mock_driver", "Config": {"run_for": run_for},
                "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}})
    };
    let (_, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job("done", "10ms")));
    let done_eval = json_of(&b)["EvalID"].as_str().unwrap().to_string();
    let (_, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job("busy", "10m")));
    let busy_eval = json_of(&b)["EvalID"].as_str().unwrap().to_string();
    wait_for(
        "both jobs placed and the short one done",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            agent.get("/v1/job/done").unwrap()["Status"] == "dead"
                && agent.get("/v1/job/busy").unwrap()["Status"] == "running"
        },
    );
    // Two reads: an evaluation written between them (a follow-up the jobs' last updates made)
    // would tell them apart, so they are read until one pair agrees; a count that never matches
    // the list still fails.
    let mut count = serde_json::Value::Null;
    agent.wait_until("the count and the list agree", || {
        count = agent.get("/v1/evaluations/count").unwrap();
        let (_, b) = call(&agent, "GET", "/v1/evaluations", "", None);
        count["Count"].as_u64() == json_of(&b).as_array().map(|a| a.len() as u64)
    });
    assert!(count["Count"].as_u64() >= Some(2), "{count}");

    // Refused while the broker runs.
    let body = json!({"EvalIDs": [done_eval]});
    let (s, b) = call(&agent, "DELETE", "/v1/evaluations", "", Some(&body));
    assert_eq!(s, 400);
    assert!(
        b.starts_with("eval broker is enabled; eval broker must be paused to delete evals"),
        "{b}"
    );
    let (s, _) = call(
        &agent,
        "PUT",
        "/v1/operator/scheduler/configuration",
        "",
        Some(
            &json!({"PauseEvalBroker": true, "PreemptionConfig": {"SystemSchedulerEnabled": true}}),
        ),
    );
    assert_eq!(s, 200);
    // An evaluation with a running allocation is not safe to delete.
    let (s, b) = call(
        &agent,
        "DELETE",
        "/v1/evaluations",
        "",
        Some(&json!({"EvalIDs": [busy_eval]})),
    );
    assert_eq!(
        (s, b),
        (400, format!("eval {busy_eval} is not safe to delete"))
    );
    let (s, b) = call(
        &agent,
        "DELETE",
        "/v1/evaluations",
        "",
        Some(&json!({"EvalIDs": ["nope"]})),
    );
    assert_eq!((s, b.as_str()), (404, "eval not found"));
    let (s, b) = call(&agent, "DELETE", "/v1/evaluations", "", Some(&json!({})));
    assert_eq!(
        (s, b.as_str()),
        (400, "evals must be deleted by either ID or filter")
    );
    // The CLI.
    let (code, out, err) = agent.run(&["eval", "list", "-job", "done"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&done_eval[..8]), "{out}");
    let (code, out, err) = agent.run(&["eval", "delete", &done_eval]);
    assert_eq!(
        (code, out.trim()),
        (0, "Successfully deleted 1 evaluation"),
        "{err}"
    );
    let (s, _) = call(
        &agent,
        "GET",
        &format!("/v1/evaluation/{done_eval}"),
        "",
        None,
    );
    assert_eq!(s, 404);
}

#[test]
fn a_purged_node_is_gone_and_its_jobs_are_evaluated() {
    let agent = mock_dev_agent("node-purge");
    let job = json!({"Job": {"ID": "web", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t",
            "Driver": "mock_driver", "Config": {"run_for": "10m"},
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}});
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job));
    assert_eq!(s, 200, "{b}");
    wait_for(
        "the job runs",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || agent.get("/v1/job/web").unwrap()["Status"] == "running",
    );
    let node = agent.get("/v1/nodes").unwrap()[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, b) = call(&agent, "PUT", &format!("/v1/node/{node}/purge"), "", None);
    assert_eq!(s, 200, "{b}");
    let resp = json_of(&b);
    let evals = resp["EvalIDs"].as_array().unwrap();
    assert_eq!(evals.len(), 1, "{resp}");
    let eval = agent
        .get(&format!("/v1/evaluation/{}", evals[0].as_str().unwrap()))
        .unwrap();
    assert_eq!(
        (&eval["JobID"], &eval["TriggeredBy"]),
        (&json!("web"), &json!("node-update"))
    );
    let (s, _) = call(&agent, "PUT", "/v1/node/nope/purge", "", None);
    assert_eq!(s, 404);
}

#[test]
fn status_finds_any_object_by_prefix() {
    let agent = mock_dev_agent("status-anything");
    let job = json!({"Job": {"ID": "finder", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t",
            "Driver": "mock_driver", "Config": {"run_for": "10m"},
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}});
    let (_, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job));
    let eval = json_of(&b)["EvalID"].as_str().unwrap().to_string();
    wait_for(
        "the job runs",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || agent.get("/v1/job/finder").unwrap()["Status"] == "running",
    );
    let node = agent.get("/v1/nodes").unwrap()[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, out, err) = agent.run(&["status", &node[..8]]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Node Pool"), "a node's status: {out}");
    let (code, out, err) = agent.run(&["status", &eval[..8]]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Triggered By") || out.contains("Create Time"),
        "an evaluation's status: {out}"
    );
    let (code, out, _) = agent.run(&["status", "finder"]);
    assert_eq!(code, 0);
    assert!(out.contains("ID            = finder"), "{out}");
    let (code, _, err) = agent.run(&["status", "zzzz"]);
    assert_eq!(code, 1);
    assert!(err.contains("No matches returned for query"), "{err}");
}
