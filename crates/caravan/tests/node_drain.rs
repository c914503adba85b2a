//! Node drain and eligibility end to end on one `caravan agent -dev` (mock driver tasks, so nothing
//! outlives the agent). With a single node the replacements have nowhere to go: they stay blocked
//! until the node is eligible again. Every wait has a deadline and polls a condition.

mod common;

use common::{bin, Agent};
use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MS: u64 = 1_000_000;
/// The longest `node drain` may monitor: the 5 s deadline plus the stops.
const DRAIN_CLI_DEADLINE: Duration = Duration::from_secs(60);

fn dev_agent(name: &str) -> Agent {
    common::mock_dev_agent(name)
}

fn job(id: &str, count: u32) -> Value {
    json!({"Job": {"ID": id, "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": count,
        "RestartPolicy": {"Attempts": 0, "Mode": "fail", "Interval": 60_000 * MS, "Delay": 10 * MS},
        "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
            "Resources": {"CPU": 20, "MemoryMB": 16}
        }]
    }]}})
}

/// The job's allocations that run on their client and are meant to.
fn running(agent: &Agent, job: &str) -> Vec<Value> {
    let allocs = agent
        .get(&format!("/v1/job/{job}/allocations"))
        .unwrap_or(Value::Null);
    allocs
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["ClientStatus"] == "running" && a["DesiredStatus"] == "run")
        .cloned()
        .collect()
}

/// Runs `caravan ARGS`, killed if it outlives `deadline`: exit code, stdout, stderr.
fn run_bounded(agent: &Agent, args: &[&str], deadline: Duration) -> (i32, String, String) {
    let mut child = Command::new(bin())
        .args(args)
        .env("NOMAD_ADDR", &agent.http)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("caravan runs");
    let until = Instant::now() + deadline;
    while child.try_wait().expect("waitable").is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "caravan {args:?} ran past {deadline:?}; stdout:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_drain_stops_the_allocations_and_eligibility_brings_them_back() {
    let agent = dev_agent("node-drain");
    let (status, body) = agent.put("/v1/jobs", &job("web", 2));
    assert_eq!(status, 200, "{body}");
    agent.wait_until("two running allocations", || {
        running(&agent, "web").len() == 2
    });
    let node = agent.get("/v1/nodes").unwrap()[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();

    let (code, out, err) = run_bounded(
        &agent,
        &[
            "node",
            "drain",
            "-enable",
            "-yes",
            "-deadline",
            "5s",
            &node[..8],
        ],
        DRAIN_CLI_DEADLINE,
    );
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(
        out.contains("Ctrl-C to stop monitoring: will not cancel the node drain"),
        "{out}"
    );
    assert!(
        out.contains(&format!("Node {node:?} drain strategy set")),
        "{out}"
    );
    assert_eq!(out.matches("marked for migration").count(), 2, "{out}");
    assert!(
        out.contains(&format!("Drain complete for node {node}")),
        "{out}"
    );
    assert!(out.contains("have stopped"), "{out}");

    let n = agent.get(&format!("/v1/node/{node}")).unwrap();
    assert_eq!(n["Drain"], false);
    assert_eq!(n["SchedulingEligibility"], "ineligible");
    assert_eq!(n["Status"], "ready");
    assert_eq!(n["LastDrain"]["Status"], "complete");
    let events: Vec<&str> = n["Events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["Message"].as_str())
        .collect();
    assert!(events.contains(&"Node drain strategy set"), "{events:?}");
    assert!(events.contains(&"Node drain complete"), "{events:?}");
    assert!(running(&agent, "web").is_empty());
    agent.wait_until("a blocked evaluation for the replacements", || {
        agent.get("/v1/job/web/evaluations").ok().is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.iter().any(|e| e["Status"] == "blocked"))
        })
    });
    let (code, out, err) = agent.run(&["node", "eligibility", "-enable", &node]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.trim(),
        format!("Node {node:?} scheduling eligibility set: eligible for scheduling")
    );
    agent.wait_until("the job placed again", || running(&agent, "web").len() == 2);
}

#[test]
fn drain_and_eligibility_refuse_what_nomad_refuses() {
    let agent = dev_agent("node-drain-errors");
    let node = agent.get("/v1/nodes").unwrap()[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _, err) = agent.run(&["node", "drain", &node]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Either the '-enable' or '-disable' flag must be set"),
        "{err}"
    );
    let (code, _, err) = agent.run(&["node", "eligibility", "-enable"]);
    assert_eq!(code, 1);
    assert!(err.contains("Node ID must be specified"), "{err}");

    // A batch allocation is left to finish, so the drain (without a deadline) stays on.
    let mut batch = job("b", 1);
    batch["Job"]["Type"] = json!("batch");
    let (status, body) = agent.put("/v1/jobs", &batch);
    assert_eq!(status, 200, "{body}");
    agent.wait_until("the batch allocation running", || {
        running(&agent, "b").len() == 1
    });
    let (code, out, err) = agent.run(&[
        "node",
        "drain",
        "-enable",
        "-yes",
        "-no-deadline",
        "-detach",
        &node,
    ]);
    assert_eq!(
        (code, out.trim()),
        (0, format!("Node {node:?} drain strategy set").as_str()),
        "{err}"
    );
    let (code, _, err) = agent.run(&["node", "eligibility", "-enable", &node]);
    assert_eq!(code, 1);
    assert!(err.contains("while it is draining"), "{err}");
    let (status, body) = agent.raw(
        "POST",
        &format!("/v1/node/{node}/eligibility"),
        Some(&json!({"Eligibility": "sometimes"})),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("Eligibility"), "{body}");

    let (code, out, err) = agent.run(&["node", "drain", "-disable", "-yes", &node]);
    assert_eq!(
        (code, out.trim()),
        (0, format!("Node {node:?} drain strategy unset").as_str()),
        "{err}"
    );
    let n = agent.get(&format!("/v1/node/{node}")).unwrap();
    assert_eq!(
        (n["Drain"].clone(), n["SchedulingEligibility"].clone()),
        (json!(false), json!("eligible"))
    );
    assert_eq!(n["LastDrain"]["Status"], "canceled");

    let (status, body) = agent.raw("POST", &format!("/v1/node/{node}/evaluate"), None);
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert!(
        v["NodeModifyIndex"].as_u64().is_some_and(|i| i > 0),
        "{body}"
    );
}
