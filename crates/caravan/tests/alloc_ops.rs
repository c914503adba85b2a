//! `caravan alloc signal|restart|exec|logs -f|stop` and the client stats endpoints against a real
//! `caravan agent -dev` running a raw_exec task that traps SIGUSR1. Every wait has a deadline and
//! polls a condition; the job is stopped at the end so no task outlives the test.

mod common;

use common::{bin, temp_dir, Agent};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn running_alloc(agent: &Agent, except: &str) -> Option<String> {
    let v = agent.get("/v1/job/trap/allocations").ok()?;
    v.as_array()?
        .iter()
        .find(|a| a["ClientStatus"] == "running" && a["ID"] != except)
        .and_then(|a| a["ID"].as_str())
        .map(str::to_string)
}

fn events(agent: &Agent, alloc_id: &str, kind: &str) -> usize {
    agent
        .get(&format!("/v1/allocation/{alloc_id}"))
        .ok()
        .and_then(|a| {
            let list = a["TaskStates"]["t"]["Events"].as_array()?.clone();
            Some(list.iter().filter(|e| e["Type"] == kind).count())
        })
        .unwrap_or(0)
}

/// `caravan alloc logs -f` as a child: reads its stdout until `marker` shows up, then kills it.
fn follow_until(agent: &Agent, alloc_id: &str, marker: &str) -> String {
    let mut child = Command::new(bin())
        .args(["alloc", "logs", "-f", alloc_id])
        .env("NOMAD_ADDR", &agent.http)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("caravan alloc logs -f starts");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // Written after `logs -f` started: the follower must pick it up.
    let (status, body) = agent.raw(
        "POST",
        &format!("/v1/client/allocation/{alloc_id}/signal"),
        Some(&json!({"Task": "t", "Signal": "SIGUSR1"})),
    );
    assert_eq!(status, 200, "{body}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = String::new();
    while !seen.contains(marker) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push_str(&line);
                seen.push('\n');
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("alloc logs -f never showed {marker:?}; it printed {seen:?}");
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    seen
}

#[test]
fn alloc_actions_reach_a_running_raw_exec_task() {
    let dir = temp_dir("allocops");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the dev client is ready", || {
        agent.get("/v1/nodes").ok().is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.len() == 1 && a[0]["Status"] == "ready")
        })
    });
    let script = "trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.1; done";
    let job = json!({"Job": {"ID": "trap", "Type": "service", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", script]},
        "Resources": {"CPU": 100, "MemoryMB": 32}
    }]}]}});
    let (status, body) = agent.raw("PUT", "/v1/jobs", Some(&job));
    assert_eq!(status, 200, "{body}");
    let mut alloc_id = String::new();
    agent.wait_until("the allocation runs", || {
        running_alloc(&agent, "").map(|id| alloc_id = id).is_some()
    });
    agent.wait_until("the task is ready", || {
        agent.run(&["alloc", "logs", &alloc_id]).1.contains("ready")
    });

    // alloc signal: the trap fires and says so in the log; a Signaling event is recorded.
    let (code, _, err) = agent.run(&["alloc", "signal", "-s", "SIGUSR1", &alloc_id, "t"]);
    assert_eq!(code, 0, "{err}");
    agent.wait_until("the trap fired", || {
        agent
            .run(&["alloc", "logs", &alloc_id])
            .1
            .contains("got-usr1")
    });
    agent.wait_until("the Signaling event reaches the servers", || {
        events(&agent, &alloc_id, "Signaling") == 1
    });
    let (code, _, err) = agent.run(&["alloc", "signal", "-s", "SIGNOPE", &alloc_id]);
    assert_eq!(code, 1);
    assert!(err.contains("SIGNOPE"), "{err}");

    // alloc logs -f: shows what the task writes after it started following.
    let seen = follow_until(&agent, &alloc_id, "got-usr1\ngot-usr1");
    assert!(seen.starts_with("ready\n"), "{seen}");

    // alloc exec: output and exit codes come through; a missing command is a clear error.
    let (code, out, err) = agent.run(&["alloc", "exec", &alloc_id, "/bin/echo", "hi"]);
    assert_eq!((code, out.as_str()), (0, "hi\n"), "{err}");
    let (code, _, err) = agent.run(&["alloc", "exec", &alloc_id, "/bin/sh", "-c", "exit 3"]);
    assert_eq!(code, 3, "{err}");
    let (code, out, err) = agent.run(&[
        "alloc",
        "exec",
        "-task",
        "t",
        &alloc_id,
        "/bin/sh",
        "-c",
        "pwd; echo e >&2",
    ]);
    assert_eq!(code, 0, "out: {out} err: {err}");
    assert!(
        out.trim_end().ends_with("/t"),
        "runs in the task dir: {out}"
    );
    let (code, _, err) = agent.run(&["alloc", "exec", &alloc_id, "/no/such/binary"]);
    assert_eq!(code, 1);
    assert!(err.contains("not found"), "{err}");

    // Stats: Nomad's top-level keys.
    let stats = agent
        .get(&format!("/v1/client/allocation/{alloc_id}/stats"))
        .unwrap();
    for key in ["ResourceUsage", "Tasks", "Timestamp"] {
        assert!(stats.get(key).is_some(), "{key} missing: {stats}");
    }
    assert!(stats["Tasks"]["t"]["ResourceUsage"]["MemoryStats"]["RSS"].as_u64() > Some(0));
    let host = agent.get("/v1/client/stats").unwrap();
    for key in [
        "Memory",
        "CPU",
        "DiskStats",
        "AllocDirStats",
        "Uptime",
        "Timestamp",
        "CPUTicksConsumed",
    ] {
        assert!(host.get(key).is_some(), "{key} missing: {host}");
    }
    let (status, body) = agent.raw(
        "GET",
        "/v1/client/allocation/00000000-0000-0000-0000-000000000000/stats",
        None,
    );
    assert_eq!(status, 404, "{body}");
    // Client GC: nothing is terminal yet, so the running allocation stays.
    let (status, body) = agent.raw("PUT", "/v1/client/gc", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        running_alloc(&agent, "").as_deref(),
        Some(alloc_id.as_str())
    );

    // alloc restart: the same allocation, a new Started event, not counted by the policy.
    assert_eq!(events(&agent, &alloc_id, "Started"), 1);
    let (code, _, err) = agent.run(&["alloc", "restart", &alloc_id]);
    assert_eq!(code, 0, "{err}");
    agent.wait_until("the task started again", || {
        events(&agent, &alloc_id, "Started") == 2
    });
    agent.wait_until("the Restart Signaled event", || {
        events(&agent, &alloc_id, "Restart Signaled") == 1
    });
    agent.wait_until("the allocation runs again", || {
        running_alloc(&agent, "").as_deref() == Some(alloc_id.as_str())
    });

    // alloc stop: the scheduler replaces the allocation; the old one stops.
    let (code, out, err) = agent.run(&["alloc", "stop", &alloc_id]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Monitoring evaluation"), "{out}");
    let mut replacement = String::new();
    agent.wait_until("a replacement runs", || {
        running_alloc(&agent, &alloc_id)
            .map(|id| replacement = id)
            .is_some()
    });
    agent.wait_until("the old allocation stopped", || {
        agent
            .get(&format!("/v1/allocation/{alloc_id}"))
            .is_ok_and(|a| a["DesiredStatus"] == "stop" && a["ClientStatus"] != "running")
    });
    let old: Value = agent.get(&format!("/v1/allocation/{alloc_id}")).unwrap();
    assert_eq!(old["NextAllocation"], replacement.as_str());
    let eval = agent.get("/v1/evaluations").unwrap();
    assert!(
        eval.as_array()
            .unwrap()
            .iter()
            .any(|e| e["TriggeredBy"] == "alloc-stop"),
        "{eval}"
    );

    let (status, body) = agent.raw("DELETE", "/v1/job/trap", None);
    assert_eq!(status, 200, "{body}");
    agent.wait_until("every task stopped", || {
        agent.get("/v1/job/trap/allocations").is_ok_and(|v| {
            v.as_array()
                .is_some_and(|a| a.iter().all(|x| x["ClientStatus"] != "running"))
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// `alloc restart -all-tasks` runs a finished prestart task again, and the main task waits for
/// it as on the first start; a plain `alloc restart` restarts only the running task.
#[test]
fn restart_all_tasks_runs_the_prestart_task_again_first() {
    let dir = temp_dir("restartall");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    // init sleeps before it writes, so a main task that did not wait for it would come first.
    let init = "sleep 1; echo init >> \"$NOMAD_ALLOC_DIR/order\"";
    let main = "echo main >> \"$NOMAD_ALLOC_DIR/order\"; while :; do sleep 0.1; done";
    let task = |name: &str, script: &str| {
        json!({"Name": name, "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c", script]},
            "Resources": {"CPU": 50, "MemoryMB": 32}})
    };
    let mut init_task = task("init", init);
    init_task["Lifecycle"] = json!({"Hook": "prestart", "Sidecar": false});
    let job = json!({"Job": {"ID": "order", "Type": "service", "TaskGroups": [{"Name": "g",
        "Tasks": [init_task, task("main", main)]}]}});
    let (status, body) = agent.raw("PUT", "/v1/jobs", Some(&job));
    assert_eq!(status, 200, "{body}");
    let mut alloc_id = String::new();
    agent.wait_until("the allocation runs", || {
        agent
            .get("/v1/job/order/allocations")
            .ok()
            .and_then(|v| {
                v.as_array()?
                    .iter()
                    .find(|a| a["ClientStatus"] == "running")
                    .and_then(|a| a["ID"].as_str())
                    .map(str::to_string)
            })
            .map(|id| alloc_id = id)
            .is_some()
    });
    let order = || {
        agent
            .raw(
                "GET",
                &format!("/v1/client/fs/cat/{alloc_id}?path=alloc/order"),
                None,
            )
            .1
    };
    agent.wait_until("main wrote", || order() == "init\nmain\n");

    // Running tasks only: init stays finished.
    let (code, _, err) = agent.run(&["alloc", "restart", &alloc_id]);
    assert_eq!(code, 0, "{err}");
    agent.wait_until("main ran again", || order() == "init\nmain\nmain\n");

    // Every task, in lifecycle order.
    let (code, _, err) = agent.run(&["alloc", "restart", "-all-tasks", &alloc_id]);
    assert_eq!(code, 0, "{err}");
    agent.wait_until("init, then main, ran again", || {
        order().lines().count() >= 5
    });
    // Give a main that jumped the queue time to show (it would have written first).
    assert_eq!(order(), "init\nmain\nmain\ninit\nmain\n");
    agent.wait_until(
        "the allocation runs with init dead and main running",
        || {
            agent
                .get(&format!("/v1/allocation/{alloc_id}"))
                .is_ok_and(|a| {
                    a["ClientStatus"] == "running"
                        && a["TaskStates"]["init"]["State"] == "dead"
                        && a["TaskStates"]["init"]["Failed"] == false
                        && a["TaskStates"]["main"]["State"] == "running"
                })
        },
    );
    let (code, _, err) = agent.run(&["alloc", "restart", "-all-tasks", &alloc_id, "main"]);
    assert_eq!(code, 1);
    assert!(err.contains("-all-tasks"), "{err}");

    let (status, body) = agent.raw("DELETE", "/v1/job/order", None);
    assert_eq!(status, 200, "{body}");
    agent.wait_until("the allocation stopped", || {
        agent
            .get(&format!("/v1/allocation/{alloc_id}"))
            .is_ok_and(|a| a["ClientStatus"] != "running")
    });
    // A stopped allocation is not restarted.
    let (code, _, err) = agent.run(&["alloc", "restart", "-all-tasks", &alloc_id]);
    assert_eq!(code, 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
