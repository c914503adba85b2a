//! Deployments end to end on a real `caravan agent -dev` (mock driver tasks, so nothing outlives
//! the agent): a rolling update, canaries promoted by hand and automatically, an auto-revert after
//! a failing version, and `job revert`. Every wait has a deadline and polls a condition.

mod common;

use common::Agent;
use serde_json::{json, Value};

fn dev_agent(name: &str) -> Agent {
    common::mock_dev_agent(name)
}

const MS: u64 = 1_000_000;

/// A service job of `count` mock tasks; `version` goes into the task's environment, so each new
/// value is a destructive update. `failing` tasks exit 1 at once and are not restarted.
fn job(id: &str, count: u32, version: u32, update: Value, failing: bool) -> Value {
    let config = if failing {
        json!({"run_for": "50ms", "exit_code": 1})
    } else {
        json!({"run_for": "10m"})
    };
    json!({"Job": {"ID": id, "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": count,
        "Update": update,
        "RestartPolicy": {"Attempts": 0, "Mode": "fail", "Interval": 60_000 * MS, "Delay": 10 * MS},
        "ReschedulePolicy": {"Attempts": 0, "Unlimited": false},
        "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": config,
            "Env": {"VERSION": version.to_string()},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]
    }]}})
}

fn update(max_parallel: u32, canary: u32, auto_promote: bool, auto_revert: bool) -> Value {
    json!({
        "MaxParallel": max_parallel, "Canary": canary, "AutoPromote": auto_promote,
        "AutoRevert": auto_revert, "MinHealthyTime": 300 * MS, "HealthyDeadline": 60_000 * MS,
        "ProgressDeadline": 120_000 * MS, "HealthCheck": "task_states"
    })
}

fn register(agent: &Agent, job: &Value) {
    let (status, body) = agent.put("/v1/jobs", job);
    assert_eq!(status, 200, "{body}");
}

/// Waits until the job's deployment of `version` has `status`; returns it. (Not the latest
/// deployment: a rollback may already have started the next one.)
fn wait_deployment(agent: &Agent, job: &str, version: u64, status: &str) -> Value {
    let mut found = Value::Null;
    agent.wait_until(&format!("deployment of {job} v{version} {status}"), || {
        let list = agent
            .get(&format!("/v1/job/{job}/deployments"))
            .unwrap_or(Value::Null);
        let hit = list
            .as_array()
            .into_iter()
            .flatten()
            .find(|d| d["JobVersion"] == version && d["Status"] == status);
        if let Some(d) = hit {
            found = d.clone();
        }
        hit.is_some()
    });
    found
}

/// The job's running allocations: (ID, job version).
fn running(agent: &Agent, job: &str) -> Vec<(String, u64)> {
    let allocs = agent
        .get(&format!("/v1/job/{job}/allocations"))
        .unwrap_or(Value::Null);
    allocs
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["ClientStatus"] == "running" && a["DesiredStatus"] == "run")
        .map(|a| {
            (
                a["ID"].as_str().unwrap_or_default().to_string(),
                a["JobVersion"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

fn wait_running_version(agent: &Agent, job: &str, count: usize, version: u64) {
    agent.wait_until(
        &format!("{count} allocations of {job} v{version} running"),
        || {
            let r = running(agent, job);
            r.len() == count && r.iter().all(|(_, v)| *v == version)
        },
    );
}

fn stop(agent: &Agent, job: &str) {
    let (code, _, err) = agent.run(&["job", "stop", "-detach", job]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_rolling_update_replaces_every_allocation_then_job_revert_goes_back() {
    let agent = dev_agent("deploy-rolling");
    register(
        &agent,
        &job("roll", 3, 0, update(1, 0, false, false), false),
    );
    wait_deployment(&agent, "roll", 0, "successful");
    wait_running_version(&agent, "roll", 3, 0);

    register(
        &agent,
        &job("roll", 3, 1, update(1, 0, false, false), false),
    );
    let d = wait_deployment(&agent, "roll", 1, "successful");
    assert_eq!(d["TaskGroups"]["g"]["HealthyAllocs"], 3, "{d}");
    assert_eq!(d["StatusDescription"], "Deployment completed successfully");
    wait_running_version(&agent, "roll", 3, 1);

    // The CLI shows the deployment as Nomad's does.
    let id = d["ID"].as_str().unwrap();
    let (code, out, err) = agent.run(&["deployment", "status", &id[..8]]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Status      = successful"), "{out}");
    assert!(
        out.contains(
            "Deployed\nTask Group  Desired  Placed  Healthy  Unhealthy  Progress Deadline"
        ),
        "{out}"
    );
    let (code, out, _) = agent.run(&["deployment", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with(&id[..8]) && l.contains("successful")),
        "{out}"
    );
    let list = agent.get("/v1/job/roll/deployments").unwrap();
    assert_eq!(list.as_array().map(Vec::len), Some(2), "{list}");
    let allocs = agent
        .get(&format!("/v1/deployment/allocations/{id}"))
        .unwrap();
    assert_eq!(allocs.as_array().map(Vec::len), Some(3), "{allocs}");

    // job revert 0: version 2 carries version 0's spec and rolls out again.
    let (code, out, err) = agent.run(&["job", "revert", "-detach", "roll", "0"]);
    assert_eq!(code, 0, "{out}{err}");
    let v = agent.get("/v1/job/roll").unwrap();
    assert_eq!(v["Version"], 2);
    assert_eq!(v["TaskGroups"][0]["Tasks"][0]["Env"]["VERSION"], "0");
    wait_deployment(&agent, "roll", 2, "successful");
    wait_running_version(&agent, "roll", 3, 2);
    let (code, _, err) = agent.run(&["job", "revert", "roll", "2"]);
    assert_eq!(code, 1);
    assert!(err.contains("can't revert to current version"), "{err}");
    stop(&agent, "roll");
}

#[test]
fn canaries_wait_for_promotion_by_hand_or_are_promoted_automatically() {
    let agent = dev_agent("deploy-canary");
    register(
        &agent,
        &job("canary", 2, 0, update(1, 1, false, false), false),
    );
    register(&agent, &job("auto", 2, 0, update(1, 1, true, false), false));
    wait_deployment(&agent, "canary", 0, "successful");
    wait_deployment(&agent, "auto", 0, "successful");

    register(
        &agent,
        &job("canary", 2, 1, update(1, 1, false, false), false),
    );
    register(&agent, &job("auto", 2, 1, update(1, 1, true, false), false));

    // auto_promote: the healthy canary is promoted and the rollout finishes by itself.
    let d = wait_deployment(&agent, "auto", 1, "successful");
    assert_eq!(d["TaskGroups"]["g"]["Promoted"], true, "{d}");
    wait_running_version(&agent, "auto", 2, 1);

    // Manual: the canary runs beside the old allocations until promoted.
    let mut d = Value::Null;
    agent.wait_until("the canary is healthy", || {
        d = agent
            .get("/v1/job/canary/deployment")
            .unwrap_or(Value::Null);
        d["JobVersion"] == 1 && d["TaskGroups"]["g"]["HealthyAllocs"] == 1
    });
    assert_eq!(d["Status"], "running");
    assert_eq!(
        d["StatusDescription"],
        "Deployment is running but requires manual promotion"
    );
    let r = running(&agent, "canary");
    assert_eq!(r.iter().filter(|(_, v)| *v == 0).count(), 2, "{r:?}");
    assert_eq!(r.iter().filter(|(_, v)| *v == 1).count(), 1, "{r:?}");
    let (code, out, _) = agent.run(&["deployment", "status", d["ID"].as_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(out.contains("Promoted  Desired  Canaries"), "{out}");

    let (code, out, err) = agent.run(&["job", "promote", "canary"]);
    assert_eq!(code, 0, "{out}{err}");
    let d = wait_deployment(&agent, "canary", 1, "successful");
    assert_eq!(d["TaskGroups"]["g"]["Promoted"], true);
    wait_running_version(&agent, "canary", 2, 1);

    // Promoting a finished deployment is refused with a reason.
    let (status, body) = agent.put(
        &format!("/v1/deployment/promote/{}", d["ID"].as_str().unwrap()),
        &json!({"All": true}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("terminal deployment"), "{body}");
    stop(&agent, "canary");
    stop(&agent, "auto");
}

#[test]
fn a_failing_version_fails_its_deployment_and_auto_revert_restores_the_stable_one() {
    let agent = dev_agent("deploy-revert");
    register(&agent, &job("rev", 2, 0, update(1, 0, false, true), false));
    wait_deployment(&agent, "rev", 0, "successful");
    assert_eq!(agent.get("/v1/job/rev").unwrap()["Stable"], true);

    register(&agent, &job("rev", 2, 1, update(1, 0, false, true), true));
    let d = wait_deployment(&agent, "rev", 1, "failed");
    assert_eq!(
        d["StatusDescription"],
        "Failed due to unhealthy allocations - rolling back to job version 0"
    );
    let v = agent.get("/v1/job/rev").unwrap();
    assert_eq!(v["Version"], 2, "{v}");
    assert_eq!(v["TaskGroups"][0]["Tasks"][0]["Env"]["VERSION"], "0");
    wait_deployment(&agent, "rev", 2, "successful");
    wait_running_version(&agent, "rev", 2, 2);

    // A user can fail a running deployment too; pause and resume answer as Nomad's.
    register(&agent, &job("rev", 2, 3, update(1, 1, false, false), false));
    let mut id = String::new();
    agent.wait_until("a deployment of v3", || {
        let d = agent.get("/v1/job/rev/deployment").unwrap_or(Value::Null);
        id = d["ID"].as_str().unwrap_or_default().to_string();
        d["JobVersion"] == 3
    });
    let (code, out, err) = agent.run(&["deployment", "pause", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("paused"), "{out}");
    assert_eq!(
        agent.get(&format!("/v1/deployment/{id}")).unwrap()["Status"],
        "paused"
    );
    let (code, _, err) = agent.run(&["deployment", "resume", "-detach", &id]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = agent.run(&["deployment", "fail", "-detach", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("failed"), "{out}");
    let d = agent.get(&format!("/v1/deployment/{id}")).unwrap();
    assert_eq!(d["Status"], "failed");
    assert_eq!(d["StatusDescription"], "Deployment marked as failed");
    stop(&agent, "rev");
}

#[test]
fn a_failing_canary_is_rolled_back_without_touching_the_stable_allocations() {
    let agent = dev_agent("deploy-canary-revert");
    register(&agent, &job("cr", 2, 0, update(1, 1, false, true), false));
    wait_deployment(&agent, "cr", 0, "successful");
    let stable: Vec<String> = running(&agent, "cr")
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(stable.len(), 2);

    register(&agent, &job("cr", 2, 1, update(1, 1, false, true), true));
    let d = wait_deployment(&agent, "cr", 1, "failed");
    assert_eq!(
        d["StatusDescription"],
        "Failed due to unhealthy allocations - rolling back to job version 0"
    );
    assert_eq!(d["TaskGroups"]["g"]["Promoted"], false);
    assert_eq!(agent.get("/v1/job/cr").unwrap()["Version"], 2);
    // The stable allocations kept running: only the canary was ever replaced.
    wait_running_version(&agent, "cr", 2, 2);
    let mut now: Vec<String> = running(&agent, "cr")
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    now.sort();
    let mut stable = stable;
    stable.sort();
    assert_eq!(now, stable, "the same allocations, updated in place");
    stop(&agent, "cr");
}
