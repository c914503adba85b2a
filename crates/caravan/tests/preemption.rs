//! Preemption on a real dev agent (system jobs preempt by default, as Nomad): `job plan` names the
//! allocation a high-priority system job would evict, `job run` evicts it (DesiredStatus `evict`,
//! `PreemptedByAllocation`, the new allocation's `PreemptedAllocations`), the client stops it, and
//! the evicted job gets a `preemption` evaluation to place it again.

mod common;

use common::{call, json_of, temp_dir, wait_for, Agent, MOCK_DRIVER_CONFIG};
use serde_json::{json, Value};
use std::time::Duration;

const SYSTEM_JOB: &str = r#"job "agent" {
  type     = "system"
  priority = 100
  group "agent" {
    task "agent" {
      driver = "mock_driver"
      config {
        run_for = "10m"
      }
      resources {
        cpu    = 1000
        memory = 64
      }
    }
  }
}
"#;

fn allocs_of(agent: &Agent, job: &str) -> Vec<Value> {
    let (s, b) = call(
        agent,
        "GET",
        &format!("/v1/job/{job}/allocations"),
        "",
        None,
    );
    assert_eq!(s, 200, "{b}");
    json_of(&b).as_array().cloned().unwrap_or_default()
}

#[test]
fn a_high_priority_system_job_evicts_a_low_priority_batch_allocation() {
    let dir = temp_dir("preemption");
    let data = dir.join("data").display().to_string();
    let extra = dir.join("extra.hcl");
    std::fs::write(
        &extra,
        format!("{MOCK_DRIVER_CONFIG}client {{\n  cpu_total_compute = 4000\n}}\n"),
    )
    .unwrap();
    let extra = extra.display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data, "-config", &extra]);
    agent.wait_until("the dev node is ready", || {
        agent.get("/v1/nodes").ok().is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.len() == 1 && a[0]["Status"] == "ready")
        })
    });
    let batch = json!({"Job": {"ID": "etl", "Type": "batch", "Priority": 10,
        "Datacenters": ["dc1"], "TaskGroups": [{"Name": "etl", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
            "Resources": {"CPU": 3500, "MemoryMB": 64}}]}]}});
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&batch));
    assert_eq!(s, 200, "{b}");
    wait_for(
        "the batch allocation runs",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            allocs_of(&agent, "etl")
                .iter()
                .any(|a| a["ClientStatus"] == "running")
        },
    );
    let victim = allocs_of(&agent, "etl")[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();

    // The plan says what would go.
    let file = dir.join("agent.nomad.hcl");
    std::fs::write(&file, SYSTEM_JOB).unwrap();
    let file = file.display().to_string();
    let (code, out, err) = agent.run(&["job", "plan", &file]);
    assert_eq!(code, 1, "changes planned: {out}{err}");
    assert!(out.contains("Preemptions:"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with(&victim))
        .unwrap_or_else(|| panic!("the victim listed: {out}"));
    assert!(row.contains("etl"), "{row}");
    assert!(out.contains("- All tasks successfully allocated."), "{out}");

    // Running it evicts the batch allocation.
    let (code, out, err) = agent.run(&["job", "run", &file]);
    assert_eq!(code, 0, "{out}{err}");
    let mut placed = Value::Null;
    wait_for(
        "the system job runs",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            placed = allocs_of(&agent, "agent")
                .into_iter()
                .find(|a| a["ClientStatus"] == "running")
                .unwrap_or(Value::Null);
            !placed.is_null()
        },
    );
    let placed_id = placed["ID"].as_str().unwrap().to_string();
    let full = agent.get(&format!("/v1/allocation/{placed_id}")).unwrap();
    assert_eq!(full["PreemptedAllocations"], json!([victim]), "{full}");
    wait_for(
        "the victim is evicted and stopped",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let v = agent.get(&format!("/v1/allocation/{victim}")).unwrap();
            v["DesiredStatus"] == "evict" && v["ClientStatus"] == "complete"
        },
    );
    let v = agent.get(&format!("/v1/allocation/{victim}")).unwrap();
    assert_eq!(v["PreemptedByAllocation"], placed_id.as_str(), "{v}");
    assert_eq!(
        v["DesiredDescription"],
        format!("Preempted by alloc ID {placed_id}"),
        "{v}"
    );
    // The batch job is evaluated again (and waits for room: blocked).
    wait_for(
        "a preemption evaluation of the batch job",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let (_, b) = call(&agent, "GET", "/v1/job/etl/evaluations", "", None);
            json_of(&b)
                .as_array()
                .is_some_and(|evals| evals.iter().any(|e| e["TriggeredBy"] == "preemption"))
        },
    );
}
