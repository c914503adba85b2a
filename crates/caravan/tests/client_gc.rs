//! Client garbage collection over HTTP on a real dev agent with the mock driver:
//! `/v1/client/allocation/:id/gc` and `/v1/client/gc` (Nomad's `ClientAllocations.GarbageCollect`
//! and `GarbageCollectAll`). Waits on conditions, never sleeps.

mod common;

use common::{call, json_of, mock_dev_agent, wait_for, Agent};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const EVERY: Duration = Duration::from_millis(50);

/// One mock task that runs for `run_for`.
fn job(id: &str, job_type: &str, run_for: &str) -> Value {
    json!({"Job": {"ID": id, "Type": job_type, "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {"run_for": run_for},
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}})
}

/// Registers the job and waits until its one allocation has `status`; its ID.
fn run_until(agent: &Agent, job_id: &str, job_type: &str, run_for: &str, status: &str) -> String {
    let (code, body) = agent.put("/v1/jobs", &job(job_id, job_type, run_for));
    assert_eq!(code, 200, "{body}");
    let mut id = String::new();
    wait_for(
        &format!("{job_id}'s allocation {status}"),
        LIMIT,
        EVERY,
        || {
            let Ok(allocs) = agent.get(&format!("/v1/job/{job_id}/allocations")) else {
                return false;
            };
            let found = allocs
                .as_array()
                .and_then(|a| a.iter().find(|a| a["ClientStatus"] == status))
                .and_then(|a| a["ID"].as_str())
                .map(str::to_string);
            found.map(|f| id = f).is_some()
        },
    );
    id
}

fn client_status(agent: &Agent, alloc_id: &str) -> String {
    agent.get(&format!("/v1/allocation/{alloc_id}")).unwrap()["ClientStatus"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn terminal_allocations_are_collected_over_http_and_running_ones_stay() {
    let name = "client-gc";
    let agent = mock_dev_agent(name);
    // mock_dev_agent's data dir; the agent's client keeps `client/alloc/<id>` in it.
    let alloc_root = std::env::temp_dir()
        .join(format!("caravan-agent-{name}-{}", std::process::id()))
        .join("data/client/alloc");
    let dir = |id: &str| -> PathBuf { alloc_root.join(id) };

    let done = run_until(&agent, "short", "batch", "50ms", "complete");
    let running = run_until(&agent, "long", "service", "1h", "running");
    assert!(dir(&done).is_dir(), "{} is missing", dir(&done).display());
    assert!(dir(&running).is_dir());
    let (s, b) = call(
        &agent,
        "GET",
        &format!("/v1/client/fs/ls/{done}?path=/"),
        "",
        None,
    );
    assert_eq!(s, 200, "{b}");

    // A running allocation is refused, in Nomad's words.
    let (s, b) = call(
        &agent,
        "GET",
        &format!("/v1/client/allocation/{running}/gc"),
        "",
        None,
    );
    assert_eq!(s, 500, "{b}");
    assert!(
        b.contains("No such allocation on client, or allocation not eligible for GC"),
        "{b}"
    );
    assert!(dir(&running).is_dir());
    let unknown = "00000000-0000-0000-0000-000000000000";
    let (s, b) = call(
        &agent,
        "GET",
        &format!("/v1/client/allocation/{unknown}/gc"),
        "",
        None,
    );
    assert_eq!(s, 404, "{b}");

    // A complete one is collected: its directory is gone once the call returns.
    let (s, b) = call(
        &agent,
        "GET",
        &format!("/v1/client/allocation/{done}/gc"),
        "",
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(json_of(&b), json!({}));
    assert!(
        !dir(&done).exists(),
        "{} is still there",
        dir(&done).display()
    );
    let (s, b) = call(
        &agent,
        "GET",
        &format!("/v1/client/fs/ls/{done}?path=/"),
        "",
        None,
    );
    assert_eq!(s, 404, "{b}");
    let (s, b) = call(
        &agent,
        "GET",
        &format!("/v1/client/allocation/{done}/gc"),
        "",
        None,
    );
    assert_eq!(s, 500, "collected already: {b}");

    // /v1/client/gc: every terminal allocation of the node; the running one stays.
    let done2 = run_until(&agent, "short2", "batch", "50ms", "complete");
    assert!(dir(&done2).is_dir());
    let (s, b) = call(&agent, "GET", "/v1/client/gc", "", None);
    assert_eq!(s, 200, "{b}");
    assert!(!dir(&done2).exists());
    assert!(dir(&running).is_dir());
    assert_eq!(client_status(&agent, &running), "running");
    // Collected allocations are not started again.
    assert_eq!(client_status(&agent, &done), "complete");
    assert_eq!(client_status(&agent, &done2), "complete");
    assert!(!dir(&done).exists());

    // node_id: this agent's own node is served here; an unknown one is a 404.
    let node_id = agent.get("/v1/nodes").unwrap()[0]["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let done3 = run_until(&agent, "short3", "batch", "50ms", "complete");
    let (s, b) = call(
        &agent,
        "PUT",
        &format!("/v1/client/gc?node_id={node_id}"),
        "",
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert!(!dir(&done3).exists());
    let (s, b) = call(
        &agent,
        "GET",
        &format!("/v1/client/gc?node_id={unknown}"),
        "",
        None,
    );
    assert_eq!(s, 404, "{b}");
    assert!(b.contains("Unknown node"), "{b}");
    let (s, _) = call(&agent, "DELETE", "/v1/client/gc", "", None);
    assert_eq!(s, 405);
    assert!(dir(&running).is_dir());
    assert_eq!(client_status(&agent, &running), "running");
}

/// Through a server agent (which runs no client), a client-only agent's allocations are collected:
/// `/v1/client/allocation/:id/gc` and `/v1/client/gc?node_id=` are forwarded to its agent.
#[test]
fn a_server_forwards_gc_requests_to_the_clients_agent() {
    let (server, rpc) = common::server_agent("client-gc-srv", "");
    let name = "client-gc-cli";
    let dir = common::temp_dir(name);
    let data = dir.join("data");
    let mock = dir.join("mock.hcl");
    // A client agent collects at 80 % disk (70 % inode) use by default, which a busy CI disk can
    // pass: it would collect the finished allocations before the test asks for it.
    let config = format!(
        "{}client {{\n  gc_disk_usage_threshold = 99\n  gc_inode_usage_threshold = 99\n}}\n",
        common::MOCK_DRIVER_CONFIG
    );
    std::fs::write(&mock, config).unwrap();
    let client = Agent::start(
        &dir,
        &[
            "-client",
            "-servers",
            &rpc,
            "-node",
            name,
            "-data-dir",
            &data.display().to_string(),
            "-config",
            &mock.display().to_string(),
        ],
    );
    let mut node_id = String::new();
    server.wait_until("the client's node is ready with the mock driver", || {
        let nodes = server.get("/v1/nodes").unwrap_or(Value::Null);
        let ready = nodes.as_array().and_then(|a| {
            a.iter()
                .find(|n| n["Status"] == "ready" && n["Drivers"]["mock_driver"]["Healthy"] == true)
        });
        ready
            .and_then(|n| n["ID"].as_str())
            .map(|id| node_id = id.to_string())
            .is_some()
    });
    let dir = |id: &str| data.join("client/alloc").join(id);

    // The server agent has no client of its own.
    let (s, b) = call(&server, "GET", "/v1/client/gc", "", None);
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("No local Node and node_id not provided"), "{b}");

    let running = run_until(&server, "long", "service", "1h", "running");
    let done = run_until(&server, "short", "batch", "50ms", "complete");
    assert!(dir(&done).is_dir());
    let (s, b) = call(
        &server,
        "GET",
        &format!("/v1/client/allocation/{running}/gc"),
        "",
        None,
    );
    assert_eq!(s, 500, "{b}");
    assert!(b.contains("not eligible for GC"), "{b}");
    let (s, b) = call(
        &server,
        "GET",
        &format!("/v1/client/allocation/{done}/gc"),
        "",
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert!(!dir(&done).exists());

    let done2 = run_until(&server, "short2", "batch", "50ms", "complete");
    assert!(dir(&done2).is_dir());
    let path = format!("/v1/client/gc?node_id={node_id}");
    let (s, b) = call(&server, "GET", &path, "", None);
    assert_eq!(s, 200, "{b}");
    assert!(!dir(&done2).exists());

    // The client's own agent serves /v1/client/gc itself.
    let done3 = run_until(&server, "short3", "batch", "50ms", "complete");
    let (s, b) = call(&client, "GET", "/v1/client/gc", "", None);
    assert_eq!(s, 200, "{b}");
    assert!(!dir(&done3).exists());
    assert!(dir(&running).is_dir());
    assert_eq!(client_status(&server, &running), "running");
}
