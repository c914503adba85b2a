//! `caravan nodesim` against a real server agent: 500 simulated nodes register and stay ready, a
//! service job and a batch job of mock-driver tasks are placed on them, every allocation runs
//! (the batch one completes), none is placed twice, and the simulator stops cleanly on SIGTERM.
//! Every wait has a deadline and polls a condition.

mod common;

use common::{bin, wait_for, Agent};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const NODES: usize = 500;
const SERVICE_COUNT: u64 = 1000;
const BATCH_COUNT: u64 = 200;
const MS: u64 = 1_000_000;

/// The simulator's process, with its output lines gathered; killed when dropped.
struct Nodesim {
    child: Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Nodesim {
    fn start(servers: &str, nodes: usize, seed: u64) -> Nodesim {
        let mut child = Command::new(bin())
            .args(["nodesim", "-servers", servers, "-nodes"])
            .arg(nodes.to_string())
            .args(["-seed", &seed.to_string(), "-progress-every", "1"])
            .args(["-cpu", "2000", "-memory", "4096"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("caravan nodesim starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                keep.lock().unwrap().push(line);
            }
        });
        Nodesim { child, lines }
    }

    fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// SIGTERM, then the exit code (within a deadline).
    fn terminate(&mut self) -> i32 {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let mut code = None;
        wait_for(
            "nodesim to exit after SIGTERM",
            Duration::from_secs(30),
            Duration::from_millis(50),
            || {
                code = self
                    .child
                    .try_wait()
                    .unwrap()
                    .map(|s| s.code().unwrap_or(-1));
                code.is_some()
            },
        );
        code.unwrap_or(-1)
    }
}

impl Drop for Nodesim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn job(id: &str, kind: &str, count: u64, config: Value) -> Value {
    json!({"Job": {"ID": id, "Type": kind, "TaskGroups": [{
        "Name": "g", "Count": count,
        "RestartPolicy": {"Attempts": 0, "Mode": "fail", "Interval": 60_000 * MS, "Delay": 10 * MS},
        "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": config,
            "Resources": {"CPU": 50, "MemoryMB": 30}
        }]
    }]}})
}

fn allocs(agent: &Agent, job: &str) -> Vec<Value> {
    agent
        .get(&format!("/v1/job/{job}/allocations"))
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn count_status(list: &[Value], status: &str) -> u64 {
    list.iter().filter(|a| a["ClientStatus"] == status).count() as u64
}

#[test]
fn five_hundred_simulated_nodes_run_every_allocation_once() {
    let (agent, rpc) = common::server_agent("nodesim", "");
    let mut sim = Nodesim::start(&rpc, NODES, 7);

    wait_for(
        "500 simulated nodes ready",
        Duration::from_secs(180),
        Duration::from_millis(250),
        || {
            agent.get("/v1/nodes").ok().is_some_and(|v| {
                v.as_array().is_some_and(|a| {
                    a.iter()
                        .filter(|n| {
                            n["Status"] == "ready" && n["Drivers"]["mock_driver"]["Healthy"] == true
                        })
                        .count()
                        == NODES
                })
            })
        },
    );
    let nodes = agent.get("/v1/nodes").unwrap();
    let names: BTreeSet<String> = nodes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["Name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names.contains("sim-0") && names.contains("sim-499"),
        "{names:?}"
    );

    let (status, body) = agent.put(
        "/v1/jobs",
        &job("svc", "service", SERVICE_COUNT, json!({"run_for": "1h"})),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = agent.put(
        "/v1/jobs",
        &job("bat", "batch", BATCH_COUNT, json!({"run_for": "500ms"})),
    );
    assert_eq!(status, 200, "{body}");

    wait_for(
        "every service allocation running and every batch one complete",
        Duration::from_secs(300),
        Duration::from_millis(500),
        || {
            count_status(&allocs(&agent, "svc"), "running") == SERVICE_COUNT
                && count_status(&allocs(&agent, "bat"), "complete") == BATCH_COUNT
        },
    );

    // None placed twice: exactly `count` allocations, one per name, each on a simulated node
    // that reported it (its task states say so).
    for (id, count) in [("svc", SERVICE_COUNT), ("bat", BATCH_COUNT)] {
        let list = allocs(&agent, id);
        assert_eq!(list.len() as u64, count, "{id}: {} allocations", list.len());
        let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
        for a in &list {
            *by_name
                .entry(a["Name"].as_str().unwrap().to_string())
                .or_default() += 1;
            assert!(!a["NodeID"].as_str().unwrap_or("").is_empty());
            let events: Vec<&str> = a["TaskStates"]["t"]["Events"]
                .as_array()
                .map(|e| e.iter().filter_map(|x| x["Type"].as_str()).collect())
                .unwrap_or_default();
            assert!(events.contains(&"Started"), "{id}: {a}");
        }
        assert_eq!(by_name.len() as u64, count, "{id}: names {by_name:?}");
        assert!(by_name.values().all(|n| *n == 1));
    }
    let summary = agent.get("/v1/job/svc/summary").unwrap();
    assert_eq!(
        summary["Summary"]["g"]["Running"], SERVICE_COUNT,
        "{summary}"
    );

    let code = sim.terminate();
    let out = sim.output();
    assert_eq!(code, 0, "nodesim output:\n{out}");
    assert!(out.contains("500/500 nodes ready"), "{out}");
    assert!(!out.contains("PLACED TWICE"), "{out}");
}
