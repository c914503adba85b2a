//! Agents started in the test's own process through the library (`caravan::agent::Agent`), not
//! as child processes: three servers that find each other through gossip and a client, one
//! runtime. This is what lets a test (and, next, a simulation) hold agents directly: stop one
//! without a signal, read its server's state, start it again.

mod common;

use caravan::agent::{Agent, AgentOptions};
use common::{json_of, temp_dir, wait_for};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
const EVERY: Duration = Duration::from_millis(50);

fn config(dir: &Path, hcl: &str) -> jobspec::agent::AgentConfig {
    let text = format!(
        "data_dir = \"{}\"\nbind_addr = \"127.0.0.1\"\nlog_level = \"WARN\"\nports {{\n  http = 0\n  rpc = 0\n  serf = 0\n}}\n{hcl}",
        dir.display()
    );
    let file =
        jobspec::agent::parse_str(&text, "agent.hcl").expect("the test's agent config parses");
    jobspec::agent::AgentConfig::default_values().merge(file)
}

fn opts() -> AgentOptions {
    AgentOptions {
        dev: false,
        helper_exe: Some(common::bin()),
    }
}

fn get(agent: &Agent, path: &str) -> Option<Value> {
    let url = format!("http://{}{path}", agent.http_addr());
    match common::http("GET", &url, None) {
        Ok((200, body, _)) => Some(json_of(&body)),
        _ => None,
    }
}

fn leader(agent: &Agent) -> Option<String> {
    get(agent, "/v1/status/leader")
        .and_then(|v| v.as_str().map(String::from))
        .filter(|l| !l.is_empty())
}

#[test]
fn three_servers_and_a_client_run_in_one_process() {
    let root = temp_dir("in-process");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");

    // Three servers: the first bootstraps the gossip pool, the others join its serf address.
    let server_hcl = |join: &str| {
        format!(
            "server {{\n  enabled = true\n  bootstrap_expect = 3\n{}}}\n",
            common::retry_join(join)
        )
    };
    let first = rt
        .block_on(Agent::start(
            config(&root.join("s1"), &server_hcl("")),
            opts(),
        ))
        .expect("the first server starts");
    let serf = first
        .server()
        .and_then(|s| s.gossip())
        .map(|g| g.local().addr.to_string())
        .expect("the first server gossips");
    let mut servers = vec![first];
    for n in 2..=3 {
        let dir = root.join(format!("s{n}"));
        let agent = rt
            .block_on(Agent::start(config(&dir, &server_hcl(&serf)), opts()))
            .expect("a joining server starts");
        servers.push(agent);
    }
    wait_for(
        "one leader all three servers agree on",
        LIMIT,
        EVERY,
        || {
            let seen: Vec<Option<String>> = servers.iter().map(leader).collect();
            seen[0].is_some() && seen.iter().all(|l| *l == seen[0])
        },
    );
    let rpc: Vec<String> = servers
        .iter()
        .map(|a| a.server().expect("a server").rpc_addr().to_string())
        .collect();

    // A client-only agent that knows all three.
    let client_hcl = format!(
        "client {{\n  enabled = true\n  servers = [{}]\n  gc_disk_usage_threshold = 99\n}}\n{}",
        rpc.iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", "),
        common::MOCK_DRIVER_CONFIG
    );
    let client = rt
        .block_on(Agent::start(config(&root.join("c1"), &client_hcl), opts()))
        .expect("the client starts");
    assert!(client.server().is_none() && client.client().is_some());
    wait_for("the client's node is ready", LIMIT, EVERY, || {
        get(&servers[0], "/v1/nodes").is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.len() == 1 && a[0]["Status"] == "ready")
        })
    });

    // A job through one server's HTTP API runs on the client.
    let job = json!({"Job": {
        "ID": "inproc", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 2, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
            "Resources": {"CPU": 10, "MemoryMB": 10}}]}]
    }});
    let url = format!("http://{}/v1/jobs", servers[1].http_addr());
    let (status, body, _) = common::http("PUT", &url, Some(job.to_string())).expect("sent");
    assert_eq!(status, 200, "{body}");
    let running = |agent: &Agent| {
        get(agent, "/v1/job/inproc/allocations").is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.iter().filter(|x| x["ClientStatus"] == "running").count() == 2)
        })
    };
    wait_for("both allocations running", LIMIT, EVERY, || {
        running(&servers[2])
    });

    // Stop the leader in the process (no signal, no leave): the other two elect one of
    // themselves, keep the job, and take a write.
    let old = leader(&servers[0]).expect("a leader");
    let at = rpc
        .iter()
        .position(|a| *a == old)
        .expect("the leader is one of ours");
    let stopped = servers.remove(at);
    rt.block_on(stopped.shutdown(false));
    wait_for("a new leader among the other two", LIMIT, EVERY, || {
        let seen: Vec<Option<String>> = servers.iter().map(leader).collect();
        seen[0].as_ref().is_some_and(|l| *l != old) && seen.iter().all(|l| *l == seen[0])
    });
    assert!(
        running(&servers[0]),
        "the job's allocations are still running"
    );
    let mut scaled = job.clone();
    scaled["Job"]["TaskGroups"][0]["Count"] = json!(3);
    let url = format!("http://{}/v1/jobs", servers[0].http_addr());
    let (status, body, _) = common::http("PUT", &url, Some(scaled.to_string())).expect("sent");
    assert_eq!(status, 200, "a write after the leader stopped: {body}");
    wait_for("three allocations running", LIMIT, EVERY, || {
        get(&servers[1], "/v1/job/inproc/allocations").is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.iter().filter(|x| x["ClientStatus"] == "running").count() == 3)
        })
    });

    rt.block_on(async {
        client.shutdown(false).await;
        for s in servers {
            s.shutdown(false).await;
        }
    });
    let _ = std::fs::remove_dir_all(&root);
}
