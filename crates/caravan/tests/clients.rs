//! Client-only agents against a server agent, all real processes on loopback with free ports: two
//! clients register through `-servers`, their HTTP APIs forward to the server, and when one client
//! dies its node is marked down after TTL + grace and its allocation is replaced on the other.
//! Mock-driver tasks there, so nothing outlives the agents; `alloc exec` through every agent runs
//! a raw_exec task that is stopped before the agents go. Every wait has a deadline.

mod common;

use common::{temp_dir, Agent};
use serde_json::{json, Value};

const MOCK: &str = common::MOCK_DRIVER_CONFIG;

fn server(name: &str) -> (Agent, String) {
    // Short heartbeats, so a lost client is noticed in seconds. A client that registered while the
    // leader loops were still starting gets the failover TTL, so that is short too.
    common::server_agent(
        name,
        "log_level = \"INFO\"\nserver {\n  heartbeat_grace = \"1s\"\n  min_heartbeat_ttl = \"1s\"\n  failover_heartbeat_ttl = \"3s\"\n}\n",
    )
}

fn client(name: &str, servers: &str) -> Agent {
    client_with(name, servers, "")
}

/// A client-only agent with the mock driver and `extra` agent configuration.
fn client_with(name: &str, servers: &str, extra: &str) -> Agent {
    let dir = temp_dir(name);
    let data = dir.join("data").display().to_string();
    let mock = dir.join("mock.hcl");
    std::fs::write(&mock, format!("{MOCK}{extra}")).unwrap();
    let mock = mock.display().to_string();
    Agent::start(
        &dir,
        &[
            "-client",
            "-servers",
            servers,
            "-node",
            name,
            "-data-dir",
            &data,
            "-config",
            &mock,
        ],
    )
}

fn nodes(agent: &Agent) -> Vec<Value> {
    agent
        .get("/v1/nodes")
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

/// The job's running allocation, once there is one, and the name of its node, once listed.
fn running_alloc(server: &Agent, job: &str) -> (Value, String) {
    let mut alloc = Value::Null;
    server.wait_until(&format!("an allocation of {job} runs"), || {
        let allocs = server
            .get(&format!("/v1/job/{job}/allocations"))
            .unwrap_or(Value::Null);
        alloc = allocs
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["ClientStatus"] == "running")
            .cloned()
            .unwrap_or(Value::Null);
        !alloc.is_null()
    });
    let node_id = alloc["NodeID"].as_str().unwrap_or_default().to_string();
    let mut name = String::new();
    server.wait_until(&format!("the node of {job}'s allocation is listed"), || {
        name = nodes(server)
            .into_iter()
            .find(|n| n["ID"] == node_id.as_str())
            .and_then(|n| n["Name"].as_str().map(String::from))
            .unwrap_or_default();
        !name.is_empty()
    });
    (alloc, name)
}

#[test]
fn a_lost_client_is_marked_down_and_its_allocation_replaced_on_the_other() {
    let (server, rpc) = server("clients-server");
    let c1 = client("clients-c1", &rpc);
    let c2 = client("clients-c2", &rpc);
    server.wait_until("both clients ready", || {
        let n = nodes(&server);
        n.len() == 2 && n.iter().all(|x| x["Status"] == "ready")
    });
    // A client agent's API forwards to the server: it sees the same cluster.
    assert_eq!(nodes(&c1).len(), 2);

    let job = json!({"Job": {"ID": "one", "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": 1,
        "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
                   "Resources": {"CPU": 20, "MemoryMB": 16}}]
    }]}});
    // Submitted through a client agent, forwarded to the server.
    let (status, body) = c2.put("/v1/jobs", &job);
    assert_eq!(status, 200, "{body}");
    // Which client runs it, by the node's name. A failed read must never pick the wrong one:
    // killing the other client would leave this node alive and the wait below would never end.
    let (first, name) = running_alloc(&server, "one");
    let lost_node = first["NodeID"].as_str().unwrap().to_string();
    let (doomed, survivor) = match name.as_str() {
        "clients-c1" => (c1, c2),
        "clients-c2" => (c2, c1),
        other => panic!("the allocation runs on an unexpected node {other:?}"),
    };
    // The allocation's files and stats are reachable from every agent: its own client's API
    // answers, the server's sends the request on to that client, and so does the other client's.
    let alloc_id = first["ID"].as_str().unwrap().to_string();
    for agent in [&doomed, &server, &survivor] {
        let (status, body) = agent.raw(
            "GET",
            &format!("/v1/client/fs/ls/{alloc_id}?path=/alloc"),
            None,
        );
        assert_eq!(status, 200, "{}: {body}", agent.http);
        assert!(body.contains("\"Name\":\"data\""), "{body}");
        let (status, body) = agent.raw(
            "GET",
            &format!("/v1/client/allocation/{alloc_id}/stats"),
            None,
        );
        assert_eq!(status, 200, "{}: {body}", agent.http);
    }

    doomed.kill();
    server.wait_until("the dead client's node is down", || {
        nodes(&server)
            .iter()
            .any(|n| n["ID"] == lost_node.as_str() && n["Status"] == "down")
    });
    server.wait_until(
        "the allocation is lost and replaced on the other client",
        || {
            let allocs = server.get("/v1/job/one/allocations").unwrap_or(Value::Null);
            let list = allocs.as_array().cloned().unwrap_or_default();
            let old_lost = list
                .iter()
                .any(|a| a["ID"] == first["ID"] && a["ClientStatus"] == "lost");
            let replaced = list.iter().any(|a| {
                a["ID"] != first["ID"]
                    && a["ClientStatus"] == "running"
                    && a["NodeID"] != lost_node.as_str()
            });
            old_lost && replaced
        },
    );
    let (code, _, err) = survivor.run(&["job", "stop", "-detach", "one"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_client_without_servers_is_refused_with_what_to_set() {
    let dir = temp_dir("clients-noservers");
    let out = std::process::Command::new(common::bin())
        .args(["agent", "-client", "-data-dir"])
        .arg(dir.join("data"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("-servers"), "{err}");
}

/// `alloc exec` works through any agent, as Nomad's: the allocation's own client answers, the
/// server relays the stream to it, and so does the other client (which asks the servers where the
/// allocation runs).
#[test]
fn alloc_exec_reaches_the_allocation_through_any_agent() {
    let (server, rpc) = server("exec-server");
    let raw_exec = "plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n";
    let c1 = client_with("exec-c1", &rpc, raw_exec);
    let c2 = client_with("exec-c2", &rpc, raw_exec);
    server.wait_until("both clients ready", || {
        let n = nodes(&server);
        n.len() == 2 && n.iter().all(|x| x["Status"] == "ready")
    });
    let job = json!({"Job": {"ID": "sleeper", "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": 1,
        "Tasks": [{"Name": "t", "Driver": "raw_exec",
                   "Config": {"command": "/bin/sleep", "args": ["300"]},
                   "KillTimeout": 1_000_000_000_i64,
                   "Resources": {"CPU": 20, "MemoryMB": 16}}]
    }]}});
    let (status, body) = server.put("/v1/jobs", &job);
    assert_eq!(status, 200, "{body}");
    let (alloc, owner_name) = running_alloc(&server, "sleeper");
    let alloc_id = alloc["ID"].as_str().unwrap().to_string();
    let (owner, other) = match owner_name.as_str() {
        "exec-c1" => (&c1, &c2),
        "exec-c2" => (&c2, &c1),
        name => panic!("the sleeper runs on an unexpected node {name:?}"),
    };
    for (agent, what) in [
        (owner, "its own client"),
        (&server, "the server"),
        (other, "the other client"),
    ] {
        let (code, out, err) = agent.run(&[
            "alloc",
            "exec",
            "-i=false",
            "-t=false",
            &alloc_id,
            "/bin/echo",
            "hi",
        ]);
        assert_eq!((code, out.as_str()), (0, "hi\n"), "through {what}: {err}");
        let (code, _, err) = agent.run(&[
            "alloc", "exec", "-i=false", "-t=false", &alloc_id, "/bin/sh", "-c", "exit 3",
        ]);
        assert_eq!(code, 3, "through {what}, the command's exit code: {err}");
    }
    let (code, _, err) = server.run(&["job", "stop", "sleeper"]);
    assert_eq!(code, 0, "{err}");
    server.wait_until("the sleeper is stopped", || {
        server
            .get(&format!("/v1/allocation/{alloc_id}"))
            .is_ok_and(|a| a["ClientStatus"] == "complete")
    });
}
