//! A dev agent cleans up after itself, as Nomad's does: stopped with SIGTERM (or Ctrl-C), it
//! destroys its allocations, so no task it started outlives it. (A non-dev client keeps its tasks to
//! reattach to them; `clients.rs` covers that.)

mod common;

use common::{temp_dir, wait_for, Agent};
use serde_json::json;
use std::time::Duration;

/// PIDs of live processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(e.path().join("stat"))
            .ok()
            .and_then(|s| {
                s.rsplit(')')
                    .next()
                    .map(|r| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true);
        if text.contains(needle) && !zombie {
            out.push(pid);
        }
    }
    out
}

fn gone(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

#[test]
fn a_dev_agent_stopped_with_sigterm_leaves_no_task_running() {
    let dir = temp_dir("dev-cleanup");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    // A marker no other process has: this test's PID in the sleep's argument.
    let marker = format!("{}", 100_000 + std::process::id() % 100_000);
    let job = json!({"Job": {"ID": "left-behind", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 2, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sleep", "args": [marker.clone()]},
            "KillTimeout": 1_000_000_000u64,
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}});
    let (status, body) = agent.put("/v1/jobs", &job);
    assert_eq!(status, 200, "{body}");
    wait_for(
        "both tasks running",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || processes_with(&format!("/bin/sleep {marker}")).len() == 2,
    );

    let pid = agent.pid();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    wait_for(
        "the agent to exit",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || gone(pid),
    );
    assert_eq!(
        processes_with(&format!("/bin/sleep {marker}")),
        Vec::<u32>::new(),
        "the dev agent's tasks outlived it; its log:\n{}",
        agent.recent_logs()
    );
    drop(agent);
}
