//! The scheduler configuration end to end on real agents: `/v1/operator/scheduler/configuration`
//! (Nomad's defaults, an update, blocking reads, check-and-set, refusals), `caravan operator
//! scheduler get-config|set-config`, `RejectJobRegistration` against a non-management token
//! with ACLs on, and `PauseEvalBroker` holding a new job's evaluation until it is cleared.
//! Every wait has a deadline and polls a condition.

mod common;

use common::{call, header, json_of, temp_dir, wait_for, Agent};
use serde_json::{json, Value};
use std::time::Duration;

const PATH: &str = "/v1/operator/scheduler/configuration";

fn defaults() -> Value {
    json!({
        "SchedulerAlgorithm": "binpack",
        "PreemptionConfig": {
            "SystemSchedulerEnabled": true,
            "SysBatchSchedulerEnabled": false,
            "BatchSchedulerEnabled": false,
            "ServiceSchedulerEnabled": false
        },
        "MemoryOversubscriptionEnabled": false,
        "RejectJobRegistration": false,
        "PauseEvalBroker": false,
        "CreateIndex": 0,
        "ModifyIndex": 0
    })
}

fn get_config(agent: &Agent) -> Value {
    let v = agent.get(PATH).expect("the configuration reads");
    v["SchedulerConfig"].clone()
}

/// A PUT of `body` (with `query`, e.g. `?cas=3`): status and answer.
fn put_config(agent: &Agent, query: &str, body: &Value) -> (u16, String) {
    agent.put(&format!("{PATH}{query}"), body)
}

fn mock_job(id: &str, extra: Value) -> Value {
    let mut job = json!({
        "ID": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
            "Resources": {"CPU": 10, "MemoryMB": 10}}]}]
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        job[k] = v.clone();
    }
    json!({ "Job": job })
}

#[test]
fn the_configuration_reads_writes_and_checks_and_sets_over_http_and_the_cli() {
    let (agent, _) = common::server_agent("sched-config", "");

    // Nothing stored: Nomad's defaults, with Nomad's query meta.
    let (status, body, headers) = agent.request("GET", PATH, None).expect("sent");
    assert_eq!(status, 200, "{body}");
    let v = json_of(&body);
    assert_eq!(v["SchedulerConfig"], defaults());
    assert_eq!(v["KnownLeader"], true);
    assert_eq!(v["LastContact"], 0);
    assert_eq!(v["NextToken"], "");
    let first_index = v["Index"].as_u64().expect("an index");
    assert!(first_index >= 1);
    assert_eq!(
        header(&headers, "x-nomad-index").as_deref(),
        Some(first_index.to_string().as_str())
    );
    assert_eq!(
        header(&headers, "x-nomad-knownleader").as_deref(),
        Some("true")
    );

    let (code, out, err) = agent.run(&["operator", "scheduler", "get-config"]);
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split(" = ").map(str::trim).collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["Scheduler Algorithm", "binpack"],
            ["Memory Oversubscription", "false"],
            ["Reject Job Registration", "false"],
            ["Pause Eval Broker", "false"],
            ["Preemption System Scheduler", "true"],
            ["Preemption Service Scheduler", "false"],
            ["Preemption Batch Scheduler", "false"],
            ["Preemption SysBatch Scheduler", "false"],
            ["Modify Index", "0"],
        ],
        "{out}"
    );

    // A blocking read waits for the update below and returns with it.
    let blocked = {
        let url = format!("{}{PATH}?index={first_index}&wait=60s", agent.http);
        std::thread::spawn(move || common::http("GET", &url, None))
    };

    // An update (keys in any case, as Go reads them; a missing member is its zero).
    let (status, body) = put_config(
        &agent,
        "",
        &json!({"scheduleralgorithm": "spread", "MemoryOversubscriptionEnabled": true,
                "PreemptionConfig": {"ServiceSchedulerEnabled": true}}),
    );
    assert_eq!(status, 200, "{body}");
    let answer = json_of(&body);
    assert_eq!(answer["Updated"], true, "{body}");
    let set_at = answer["Index"].as_u64().expect("the write's index");
    let stored = get_config(&agent);
    assert_eq!(stored["SchedulerAlgorithm"], "spread");
    assert_eq!(stored["MemoryOversubscriptionEnabled"], true);
    assert_eq!(
        stored["PreemptionConfig"],
        json!({"SystemSchedulerEnabled": false, "SysBatchSchedulerEnabled": false,
               "BatchSchedulerEnabled": false, "ServiceSchedulerEnabled": true})
    );
    assert_eq!(
        (
            stored["CreateIndex"].as_u64(),
            stored["ModifyIndex"].as_u64()
        ),
        (Some(set_at), Some(set_at))
    );
    let (status, body, _) = blocked
        .join()
        .expect("the blocking read ends")
        .expect("sent");
    assert_eq!(status, 200, "{body}");
    let woke = json_of(&body);
    assert_eq!(woke["Index"].as_u64(), Some(set_at), "{body}");
    assert_eq!(woke["SchedulerConfig"]["SchedulerAlgorithm"], "spread");

    // Check-and-set: a stale index answers Updated:false and changes nothing.
    let (status, body) = put_config(
        &agent,
        &format!("?cas={}", set_at - 1),
        &json!({"SchedulerAlgorithm": "binpack"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["Updated"], false, "{body}");
    assert_eq!(
        get_config(&agent),
        stored,
        "a refused write changes nothing"
    );
    // The current index goes through (POST as well as PUT).
    let (status, body, _) = agent
        .request(
            "POST",
            &format!("{PATH}?cas={set_at}"),
            Some(&json!({"SchedulerAlgorithm": "spread",
                         "PreemptionConfig": {"SystemSchedulerEnabled": true}})),
        )
        .expect("sent");
    assert_eq!(status, 200, "{body}");
    assert_eq!(json_of(&body)["Updated"], true, "{body}");
    let stored = get_config(&agent);
    assert_eq!(stored["CreateIndex"].as_u64(), Some(set_at), "kept");
    assert!(stored["ModifyIndex"].as_u64() > Some(set_at));

    // Refusals: a bad algorithm, a value of the wrong type, a bad cas.
    let (status, body) = put_config(&agent, "", &json!({"SchedulerAlgorithm": "random"}));
    assert_eq!(
        (status, body.as_str()),
        (400, "invalid scheduler algorithm: random")
    );
    let (status, body) = put_config(&agent, "", &json!({"PauseEvalBroker": "yes"}));
    assert_eq!(status, 400, "{body}");
    assert!(
        body.starts_with("Error parsing scheduler config: PauseEvalBroker"),
        "{body}"
    );
    let (status, body) = put_config(&agent, "?cas=x", &json!({}));
    assert_eq!(status, 400, "{body}");
    assert_eq!(get_config(&agent), stored, "nothing refused was stored");

    // The CLI: only the flags given change; the write is a check-and-set.
    let (code, out, err) = agent.run(&[
        "operator",
        "scheduler",
        "set-config",
        "-scheduler-algorithm",
        "binpack",
        "-memory-oversubscription=false",
        "-preempt-batch-scheduler",
        "true",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.trim(), "Scheduler configuration updated!");
    let (code, out, err) = agent.run(&["operator", "scheduler", "get-config", "-json"]);
    assert_eq!(code, 0, "{err}");
    let shown = json_of(&out);
    let now = shown["SchedulerConfig"].clone();
    assert_eq!(now, get_config(&agent));
    assert_eq!(now["SchedulerAlgorithm"], "binpack");
    assert_eq!(now["MemoryOversubscriptionEnabled"], false);
    assert_eq!(
        now["PreemptionConfig"],
        json!({"SystemSchedulerEnabled": true, "SysBatchSchedulerEnabled": false,
               "BatchSchedulerEnabled": true, "ServiceSchedulerEnabled": false}),
        "the flags given changed, the rest stayed"
    );
    let (code, _, err) = agent.run(&[
        "operator",
        "scheduler",
        "set-config",
        "-check-index",
        "1",
        "-pause-eval-broker=true",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("does not match current state value"), "{err}");
    assert_eq!(get_config(&agent), now, "nothing written");
    let (code, _, err) = agent.run(&[
        "operator",
        "scheduler",
        "set-config",
        "-scheduler-algorithm",
        "random",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Error setting scheduler configuration")
            && err.contains("invalid scheduler algorithm: random"),
        "{err}"
    );
}

#[test]
fn reject_job_registration_refuses_all_but_management_tokens() {
    let dir = temp_dir("sched-config-acl");
    let data = dir.join("data");
    let agent = Agent::start(
        &dir,
        &[
            "-server",
            "-acl-enabled",
            "-data-dir",
            &data.display().to_string(),
        ],
    );
    let (s, b) = call(&agent, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(s, 200, "{b}");
    let root = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/acl/policy/deployer",
        &root,
        Some(&json!({"Name": "deployer",
                     "Rules": "namespace \"default\" { policy = \"write\" }\noperator { policy = \"read\" }"})),
    );
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/acl/token",
        &root,
        Some(&json!({"Name": "deployer", "Type": "client", "Policies": ["deployer"]})),
    );
    assert_eq!(s, 200, "{b}");
    let deployer = json_of(&b)["SecretID"].as_str().unwrap().to_string();

    // operator:read reads, operator:write writes; anonymous does neither.
    let (s, _) = call(&agent, "GET", PATH, "", None);
    assert_eq!(s, 403);
    let (s, b) = call(&agent, "GET", PATH, &deployer, None);
    assert_eq!(s, 200, "{b}");
    let reject = json!({"SchedulerAlgorithm": "binpack", "RejectJobRegistration": true,
                        "PreemptionConfig": {"SystemSchedulerEnabled": true}});
    let (s, b) = call(&agent, "PUT", PATH, &deployer, Some(&reject));
    assert_eq!((s, b.as_str()), (403, "Permission denied"));

    // Before: the deployer registers.
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/jobs",
        &deployer,
        Some(&mock_job("before", json!({}))),
    );
    assert_eq!(s, 200, "{b}");
    let template = mock_job("template", json!({"Type": "batch", "ParameterizedJob": {}}));
    let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&template));
    assert_eq!(s, 200, "{b}");

    let (s, b) = call(&agent, "PUT", PATH, &root, Some(&reject));
    assert_eq!(s, 200, "{b}");
    assert_eq!(json_of(&b)["Updated"], true);

    // After: registration, dispatch and revert are refused to the deployer, with Nomad's text.
    const REFUSED: &str =
        "Job registration, dispatch, and scale are disabled by the scheduler configuration";
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/jobs",
        &deployer,
        Some(&mock_job("after", json!({}))),
    );
    assert_eq!((s, b.as_str()), (403, REFUSED));
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/job/template/dispatch",
        &deployer,
        Some(&json!({})),
    );
    assert_eq!((s, b.as_str()), (403, REFUSED));
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/job/before/revert",
        &deployer,
        Some(&json!({"JobID": "before", "JobVersion": 0})),
    );
    assert_eq!((s, b.as_str()), (403, REFUSED));
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/jobs",
        "",
        Some(&mock_job("anon", json!({}))),
    );
    assert_eq!(s, 403, "anonymous is refused too: {b}");
    let (s, _) = call(&agent, "GET", "/v1/job/after", &root, None);
    assert_eq!(s, 404, "nothing was registered");
    // Reads go on.
    let (s, b) = call(&agent, "GET", "/v1/job/before", &deployer, None);
    assert_eq!(s, 200, "{b}");

    // The management token still registers and dispatches.
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/jobs",
        &root,
        Some(&mock_job("by-root", json!({}))),
    );
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/job/template/dispatch",
        &root,
        Some(&json!({})),
    );
    assert_eq!(s, 200, "{b}");

    // Cleared through the CLI (a check-and-set as Nomad's): the deployer registers again.
    let out = agent.caravan(&[
        "operator",
        "scheduler",
        "set-config",
        "-token",
        &root,
        "-reject-job-registration=false",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/jobs",
        &deployer,
        Some(&mock_job("after", json!({}))),
    );
    assert_eq!(s, 200, "{b}");
}

#[test]
fn pause_eval_broker_holds_a_new_evaluation_until_cleared() {
    let agent = common::mock_dev_agent("sched-config-pause");
    let (code, out, err) = agent.run(&[
        "operator",
        "scheduler",
        "set-config",
        "-pause-eval-broker=true",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(get_config(&agent)["PauseEvalBroker"], true);

    let (s, b) = agent.put("/v1/jobs", &mock_job("held", json!({})));
    assert_eq!(s, 200, "{b}");
    let eval_id = json_of(&b)["EvalID"].as_str().unwrap().to_string();
    let eval = agent
        .get(&format!("/v1/evaluation/{eval_id}"))
        .expect("the evaluation");
    assert_eq!(eval["Status"], "pending");
    let modify = eval["ModifyIndex"].as_u64().unwrap();

    // Nothing touches it while paused: a blocking read on it runs out its wait unchanged.
    let (status, body) = agent.raw(
        "GET",
        &format!("/v1/evaluation/{eval_id}?index={modify}&wait=3s"),
        None,
    );
    assert_eq!(status, 200, "{body}");
    let still = json_of(&body);
    assert_eq!(still["Status"], "pending", "{body}");
    assert_eq!(still["ModifyIndex"].as_u64(), Some(modify));
    let allocs = agent.get("/v1/job/held/allocations").expect("allocations");
    assert_eq!(allocs, json!([]), "nothing placed while paused");

    // Cleared: the evaluation runs and the job places.
    let (code, out, err) = agent.run(&[
        "operator",
        "scheduler",
        "set-config",
        "-pause-eval-broker=false",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    wait_for(
        "the held evaluation to complete",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            agent
                .get(&format!("/v1/evaluation/{eval_id}"))
                .is_ok_and(|e| e["Status"] == "complete")
        },
    );
    wait_for(
        "the job's allocation to run",
        Duration::from_secs(60),
        Duration::from_millis(50),
        || {
            agent
                .get("/v1/job/held/allocations")
                .ok()
                .and_then(|v| v.as_array().cloned())
                .is_some_and(|a| a.len() == 1 && a[0]["ClientStatus"] == "running")
        },
    );
}
