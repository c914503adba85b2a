//! `caravan alloc status|logs|fs` and `caravan node status` against a real `caravan agent -dev` on
//! loopback with free ports, running a raw_exec job. Every wait has a deadline and polls a condition.

mod common;

use common::{temp_dir, Agent};
use serde_json::{json, Value};

#[test]
fn alloc_and_node_commands_show_a_running_raw_exec_job() {
    let dir = temp_dir("cli");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the dev client is ready", || {
        agent.get("/v1/nodes").ok().is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.len() == 1 && a[0]["Status"] == "ready")
        })
    });
    let job = json!({"Job": {"ID": "echo", "Type": "service", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", "echo hello-from-caravan-logs; echo oops-on-stderr >&2; exec sleep 600"]},
        "Resources": {"CPU": 100, "MemoryMB": 32}
    }]}]}});
    let (status, body) = agent.raw("PUT", "/v1/jobs", Some(&job));
    assert_eq!(status, 200, "{body}");
    let mut alloc_id = String::new();
    agent.wait_until("the allocation runs", || {
        let Ok(v) = agent.get("/v1/job/echo/allocations") else {
            return false;
        };
        let running = v.as_array().and_then(|a| {
            a.iter()
                .find(|x| x["ClientStatus"] == "running")
                .and_then(|x| x["ID"].as_str())
        });
        if let Some(id) = running {
            alloc_id = id.to_string();
        }
        running.is_some()
    });
    let short = &alloc_id[..8];

    // alloc logs: stdout by default (the only task is picked), stderr with -stderr.
    let mut last = (0, String::new(), String::new());
    agent.wait_until("the task wrote its log", || {
        last = agent.run(&["alloc", "logs", short]);
        last.1.contains("hello-from-caravan-logs")
    });
    assert_eq!(last.0, 0, "{last:?}");
    // stdout and stderr are copied on their own threads: stdout there says nothing of stderr.
    agent.wait_until("the task's stderr", || {
        last = agent.run(&["alloc", "logs", "-stderr", &alloc_id, "t"]);
        last.1.contains("oops-on-stderr")
    });
    assert_eq!(last.0, 0, "{last:?}");
    let (code, out, _) = agent.run(&["alloc", "logs", "-tail", "-n", "1", short]);
    assert_eq!((code, out.as_str()), (0, "hello-from-caravan-logs\n"));
    let (code, _, err) = agent.run(&["alloc", "logs", short, "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("Could not find task named: nope"), "{err}");

    // alloc status: Nomad's block, the task's state and its Started event.
    let (code, out, err) = agent.run(&["alloc", "status", short]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(&format!("ID                  = {short}")),
        "{out}"
    );
    assert!(out.contains("Client Status       = running"), "{out}");
    assert!(out.contains("Job ID              = echo"), "{out}");
    assert!(out.contains("Task \"t\" is \"running\""), "{out}");
    assert!(out.contains("Recent Events:"), "{out}");
    assert!(
        out.lines().any(|l| l.contains("  Started  ")),
        "no Started event: {out}"
    );
    let (code, out, _) = agent.run(&["alloc", "status", "-json", short]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ID"], alloc_id.as_str());

    // node status: one ready node; its detail lists the allocation.
    let (code, out, err) = agent.run(&["node", "status"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with("ID  ") && lines[0].ends_with("Eligibility  Status"),
        "{out}"
    );
    assert!(lines[1].ends_with("ready"), "{out}");
    let node_id = lines[1].split_whitespace().next().unwrap().to_string();
    for args in [
        vec!["node", "status", "-self"],
        vec!["node", "status", &node_id],
    ] {
        let (code, out, err) = agent.run(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(out.contains(&format!("ID            = {node_id}")), "{out}");
        assert!(out.contains("raw_exec"), "{out}");
        assert!(out.contains("Allocations\nID"), "{out}");
        assert!(out.contains(short), "{out}");
    }

    // alloc fs: a directory lists, a file prints.
    let (code, out, err) = agent.run(&["alloc", "fs", short, "alloc/logs"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("Mode"), "{out}");
    assert!(out.contains("t.stdout.0"), "{out}");
    let (code, out, err) = agent.run(&["alloc", "fs", short, "alloc/logs/t.stdout.0"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hello-from-caravan-logs\n");
    let (code, _, err) = agent.run(&["alloc", "fs", short, "../../.."]);
    assert_eq!(code, 1);
    assert!(err.contains("400") && err.contains("outside"), "{err}");

    // The HTTP API directly: framed logs, confinement, unknown allocations (follow: alloc_ops.rs).
    let base = format!("/v1/client/fs/logs/{alloc_id}?task=t&type=stdout");
    let (status, body) = agent.raw("GET", &base, None);
    assert_eq!(status, 200, "{body}");
    let frame: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(frame["File"], "alloc/logs/t.stdout.0");
    assert_eq!(frame["Data"], "aGVsbG8tZnJvbS1jYXJhdmFuLWxvZ3MK");
    assert_eq!(frame["Offset"], 24);
    let (status, body) = agent.raw(
        "GET",
        &format!("{base}&plain=true&origin=end&offset=5"),
        None,
    );
    assert_eq!((status, body.as_str()), (200, "logs\n"));
    let (status, body) = agent.raw(
        "GET",
        &format!("/v1/client/fs/cat/{alloc_id}?path=alloc/../../../etc/passwd"),
        None,
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = agent.raw(
        "GET",
        "/v1/client/fs/ls/00000000-0000-0000-0000-000000000000?path=/",
        None,
    );
    assert_eq!((status, body.as_str()), (404, "alloc not found"));
    let ls = agent
        .get(&format!("/v1/client/fs/ls/{alloc_id}?path=alloc/logs"))
        .unwrap();
    let entry = ls
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["Name"] == "t.stdout.0")
        .expect("the stdout log is listed");
    assert_eq!(
        (entry["IsDir"].clone(), entry["Size"].clone()),
        (json!(false), json!(24))
    );

    // Stop the job so its task does not outlive the test (a killed agent leaves tasks running).
    let (status, body) = agent.raw("DELETE", "/v1/job/echo", None);
    assert_eq!(status, 200, "{body}");
    agent.wait_until("the task stopped", || {
        agent
            .get(&format!("/v1/allocation/{alloc_id}"))
            .is_ok_and(|a| a["ClientStatus"] != "running")
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_server_only_agent_answers_501_for_client_files() {
    let dir = temp_dir("server");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data]);
    let (status, body) = agent.raw("GET", "/v1/client/fs/ls/abc?path=/", None);
    assert_eq!(status, 501, "{body}");
    assert!(body.starts_with("this agent runs no client"), "{body}");
    let (code, _, err) = agent.run(&["node", "status", "-self"]);
    assert_eq!(code, 1);
    assert!(err.contains("runs no client"), "{err}");
    let (code, out, _) = agent.run(&["node", "status"]);
    assert_eq!((code, out.trim()), (0, "No nodes registered"));
    let _ = std::fs::remove_dir_all(&dir);
}
