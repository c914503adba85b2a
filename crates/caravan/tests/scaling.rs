//! Scaling on a real dev agent: the group `scaling` block as a policy (`/v1/scaling/policies`,
//! `/v1/scaling/policy/:id`), `/v1/job/:id/scale` (a new count as a new version with its evaluation,
//! bounded by the policy; an event without a count; Nomad's refusals), the events in
//! `GET /v1/job/:id/scale`, and the CLI: `job scale`, `job scaling-events`, `scaling policy`.

mod common;

use common::{call, json_of, mock_dev_agent, wait_for, Agent};
use serde_json::{json, Value};
use std::time::Duration;

fn running(agent: &Agent, job: &str) -> usize {
    let (_, b) = call(
        agent,
        "GET",
        &format!("/v1/job/{job}/allocations"),
        "",
        None,
    );
    json_of(&b).as_array().map_or(0, |a| {
        a.iter()
            .filter(|a| a["ClientStatus"] == "running" && a["DesiredStatus"] == "run")
            .count()
    })
}

fn wait_running(agent: &Agent, job: &str, n: usize) {
    wait_for(
        &format!("{n} allocations of {job} running"),
        Duration::from_secs(60),
        Duration::from_millis(200),
        || running(agent, job) == n,
    );
}

#[test]
fn scaling_a_group_through_the_api_and_the_cli() {
    let agent = mock_dev_agent("scaling");
    let job = json!({"Job": {"ID": "web", "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "web", "Count": 1,
            "Scaling": {"Min": 1, "Max": 3, "Policy": {"cooldown": "1m"}},
            "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
                "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}});
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job));
    assert_eq!(s, 200, "{b}");
    wait_running(&agent, "web", 1);

    // The policy.
    let (s, b) = call(&agent, "GET", "/v1/scaling/policies", "", None);
    assert_eq!(s, 200, "{b}");
    let stubs = json_of(&b);
    assert_eq!(stubs.as_array().map(Vec::len), Some(1), "{stubs}");
    assert_eq!(
        stubs[0]["Target"],
        json!({"Namespace": "default", "Job": "web", "Group": "web"})
    );
    assert_eq!(
        (&stubs[0]["Enabled"], &stubs[0]["Type"]),
        (&json!(true), &json!("horizontal"))
    );
    let id = stubs[0]["ID"].as_str().unwrap().to_string();
    let policy = agent.get(&format!("/v1/scaling/policy/{id}")).unwrap();
    assert_eq!(
        (&policy["Min"], &policy["Max"]),
        (&json!(1), &json!(3)),
        "{policy}"
    );
    assert_eq!(policy["Policy"], json!({"cooldown": "1m"}));
    let (s, _) = call(
        &agent,
        "GET",
        "/v1/scaling/policy/00000000-0000-0000-0000-000000000000",
        "",
        None,
    );
    assert_eq!(s, 404);
    let (_, b) = call(&agent, "GET", "/v1/scaling/policies?job=other", "", None);
    assert_eq!(json_of(&b), json!([]));

    // Scale up through the API.
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/job/web/scale",
        "",
        Some(
            &json!({"Count": 3, "Target": {"Group": "web"}, "Message": "up", "Meta": {"by": "test"}}),
        ),
    );
    assert_eq!(s, 200, "{b}");
    let resp = json_of(&b);
    let eval_id = resp["EvalID"].as_str().unwrap().to_string();
    assert!(!eval_id.is_empty(), "{resp}");
    wait_running(&agent, "web", 3);
    let job_now = agent.get("/v1/job/web").unwrap();
    assert_eq!(job_now["Version"], 1);
    assert_eq!(job_now["TaskGroups"][0]["Count"], 3);
    let eval = agent.get(&format!("/v1/evaluation/{eval_id}")).unwrap();
    assert_eq!(eval["TriggeredBy"], "job-scaling");

    // Bounded by the policy; refused with Nomad's texts.
    for (body, want) in [
        (
            json!({"Count": 4, "Target": {"Group": "web"}}),
            "group count was greater than scaling policy maximum: 4 > 3",
        ),
        (
            json!({"Count": 0, "Target": {"Group": "web"}}),
            "group count was less than scaling policy minimum: 0 < 1",
        ),
        (
            json!({"Count": 2}),
            "missing task group name for scaling action",
        ),
        (
            json!({"Count": 2, "Target": {"Group": "nope"}}),
            "task group \"nope\" specified for scaling does not exist in job",
        ),
        (
            json!({"Count": -1, "Target": {"Group": "web"}}),
            "scaling action count can't be negative",
        ),
        (
            json!({"Count": 2, "Error": true, "Target": {"Group": "web"}}),
            "scaling action should not contain count if error is true",
        ),
        (
            json!({"Count": 2, "Target": {"Group": "web", "Job": "other"}}),
            "job ID in payload did not match URL",
        ),
    ] {
        let (s, b) = call(&agent, "POST", "/v1/job/web/scale", "", Some(&body));
        assert_eq!((s, b.as_str()), (400, want), "{body}");
    }
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/job/missing/scale",
        "",
        Some(&json!({"Count": 1, "Target": {"Group": "web"}})),
    );
    assert_eq!(s, 404, "{b}");

    // An event without a count: recorded, nothing scaled.
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/job/web/scale",
        "",
        Some(
            &json!({"Error": true, "Message": "autoscaler: no metrics", "Target": {"Group": "web"}}),
        ),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(json_of(&b)["EvalID"], "");
    assert_eq!(agent.get("/v1/job/web").unwrap()["Version"], 1);
    let status = agent.get("/v1/job/web/scale").unwrap();
    let g = &status["TaskGroups"]["web"];
    assert_eq!(
        (&g["Desired"], &g["Running"], &g["Placed"]),
        (&json!(3), &json!(3), &json!(3)),
        "{status}"
    );
    let events = g["Events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["Error"], true);
    assert_eq!(events[0]["Count"], Value::Null);
    assert_eq!(events[1]["Count"], 3);
    assert_eq!(events[1]["PreviousCount"], 1);
    assert_eq!(events[1]["Message"], "up");
    assert_eq!(events[1]["Meta"], json!({"by": "test"}));
    assert_eq!(events[1]["EvalID"], eval_id.as_str());

    // The CLI.
    let (code, out, err) = agent.run(&["job", "scale", "web", "2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("finished with status \"complete\""), "{out}");
    wait_running(&agent, "web", 2);
    let (code, _, err) = agent.run(&["job", "scale", "web", "web", "7"]);
    assert_eq!(code, 1);
    assert!(err.contains("maximum: 7 > 3"), "{err}");
    let (code, _, err) = agent.run(&["job", "scale", "web", "lots"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Failed to convert count string to int"),
        "{err}"
    );
    let (code, out, err) = agent.run(&["job", "scaling-events", "web"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let cells = |l: &str| l.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        cells(lines[0]),
        ["Task", "Group", "Count", "PrevCount", "Date"],
        "{out}"
    );
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(cells(lines[1])[..3], ["web", "2", "3"], "{out}");
    assert_eq!(cells(lines[2])[..3], ["web", "<none>", "3"], "{out}");
    let (code, out, _) = agent.run(&["job", "scaling-events", "-verbose", "web"]);
    assert_eq!(code, 0);
    assert!(out.contains("autoscaler: no metrics"), "{out}");
    let (code, out, _) = agent.run(&["scaling", "policy", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("horizontal  Namespace:default,Job:web,Group:web"),
        "{out}"
    );
    let (code, out, err) = agent.run(&["scaling", "policy", "info", &id[..6]]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Max     = 3"), "{out}");
    assert!(out.contains("\"cooldown\": \"1m\""), "{out}");
}
