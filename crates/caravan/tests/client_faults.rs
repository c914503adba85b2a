//! The client under faults, with real agent processes: a client killed with SIGKILL comes back to the
//! same running task, a task that keeps failing is rescheduled as its job asks, and `job stop`
//! ends a task's whole process tree, a grandchild that ignores the stop signal included.

mod common;

use common::{temp_dir, Agent};
use serde_json::{json, Value};

fn alloc_of(agent: &Agent, job: &str) -> Option<Value> {
    agent
        .get(&format!("/v1/job/{job}/allocations"))
        .ok()?
        .as_array()?
        .first()
        .cloned()
}

/// Whether the process exists and is not a zombie (a killed orphan waits for init to reap it).
fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name, which is in parentheses and may hold spaces.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z")
    })
}

/// `caravan agent -dev` on `dir`'s data, once its client is registered.
fn start_dev(dir: &std::path::Path) -> Agent {
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the dev client registered", || {
        agent
            .get("/v1/nodes")
            .ok()
            .and_then(|v| v.as_array().map(Vec::len))
            == Some(1)
    });
    agent
}

/// Reads a pid the task wrote into `path`, once it is there.
fn pid_in(agent: &Agent, path: &std::path::Path) -> u32 {
    let mut pid = 0;
    agent.wait_until(&format!("{} is written", path.display()), || {
        pid = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid != 0
    });
    pid
}

/// Regression guard for the client's durable state: after SIGKILL and restart the task was neither
/// restarted nor lost.
#[test]
fn a_client_killed_with_sigkill_reattaches_to_the_same_running_task() {
    let dir = temp_dir("reattach");
    let pid_file = dir.join("task.pid");
    let agent = start_dev(&dir);
    // Its template reads a file an artifact put in `local/`; SIGCONT leaves `sleep` running.
    let input = format!("{}/input.txt", common::serve(b"one".to_vec()));
    let job = json!({"Job": {"ID": "sleeper", "Type": "service", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", format!("echo $$ > {}; exec sleep 600", pid_file.display())]},
        "Resources": {"CPU": 50, "MemoryMB": 16},
        "Artifacts": [{"GetterSource": input}],
        "Templates": [
            {"EmbeddedTmpl": "{{ file \"local/input.txt\" }}", "DestPath": "local/copy",
             "ChangeMode": "signal", "ChangeSignal": "SIGCONT", "Splay": 0}
        ]
    }]}]}});
    let (status, body) = agent.put("/v1/jobs", &job);
    assert_eq!(status, 200, "{body}");
    agent.wait_until("the task runs and wrote its pid", || {
        alloc_of(&agent, "sleeper").is_some_and(|a| a["ClientStatus"] == "running")
            && std::fs::read_to_string(&pid_file).is_ok_and(|s| s.trim().parse::<u32>().is_ok())
    });
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alloc_id = alloc_of(&agent, "sleeper").unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();

    agent.kill();
    assert!(pid_alive(pid), "the task must outlive its client");

    let agent = start_dev(&dir);
    agent.wait_until(
        "the client reports the same allocation running again",
        || {
            agent
                .get(&format!("/v1/allocation/{alloc_id}"))
                .ok()
                .is_some_and(|a| a["ClientStatus"] == "running" && a["NodeID"].is_string())
        },
    );
    assert!(pid_alive(pid), "the task is still the same process");
    let now: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(now, pid, "the task was started again");
    let alloc = agent.get(&format!("/v1/allocation/{alloc_id}")).unwrap();
    let started = alloc["TaskStates"]["t"]["Events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["Type"] == "Started")
        .count();
    assert_eq!(started, 1, "{alloc}");
    assert_eq!(
        alloc_of(&agent, "sleeper").map(|a| a["ID"].clone()),
        Some(json!(alloc_id)),
        "no replacement allocation"
    );

    // The reattached task's templates are watched again.
    let task_dir = ["client/alloc", "alloc"]
        .iter()
        .map(|d| dir.join("data").join(d).join(&alloc_id).join("t"))
        .find(|p| p.is_dir())
        .expect("the task's directory under the data dir");
    std::fs::write(task_dir.join("local/input.txt"), "two").unwrap();
    agent.wait_until(
        "the re-rendered template signals the reattached task",
        || {
            agent
                .get(&format!("/v1/allocation/{alloc_id}"))
                .ok()
                .and_then(|a| a["TaskStates"]["t"]["Events"].as_array().cloned())
                .is_some_and(|evs| {
                    evs.iter().any(|e| {
                        e["Type"] == "Signaling" && e["DisplayMessage"] == "Template re-rendered"
                    })
                })
        },
    );
    assert_eq!(
        std::fs::read_to_string(task_dir.join("local/copy")).unwrap(),
        "two"
    );
    assert!(pid_alive(pid), "a signal is no restart");

    let out = agent.caravan(&["job", "stop", "sleeper"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    agent.wait_until("the task is gone", || !pid_alive(pid));
}

#[test]
fn a_task_that_keeps_failing_fails_its_allocation_and_is_rescheduled() {
    let dir = temp_dir("reschedule");
    let agent = start_dev(&dir);
    let job = json!({"Job": {"ID": "flaky", "Type": "batch", "TaskGroups": [{
        "Name": "g",
        "RestartPolicy": {"Attempts": 1, "Interval": 3_600_000_000_000_i64, "Delay": 100_000_000, "Mode": "fail"},
        "ReschedulePolicy": {"Attempts": 1, "Interval": 3_600_000_000_000_i64, "Delay": 1_000_000_000, "DelayFunction": "constant", "Unlimited": false},
        "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/sh", "args": ["-c", "exit 3"]}, "Resources": {"CPU": 50, "MemoryMB": 16}}]
    }]}});
    let (status, body) = agent.put("/v1/jobs", &job);
    assert_eq!(status, 200, "{body}");
    agent.wait_until("a replacement allocation follows the failed one", || {
        let Ok(allocs) = agent.get("/v1/job/flaky/allocations") else {
            return false;
        };
        let allocs = allocs.as_array().cloned().unwrap_or_default();
        let failed = allocs.iter().find(|a| a["ClientStatus"] == "failed");
        failed.is_some_and(|f| {
            allocs
                .iter()
                .any(|a| a["ID"] != f["ID"] && a["Name"] == f["Name"])
        })
    });
    let allocs = agent.get("/v1/job/flaky/allocations").unwrap();
    let first = allocs
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["ClientStatus"] == "failed")
        .unwrap()
        .clone();
    let first_full = agent
        .get(&format!("/v1/allocation/{}", first["ID"].as_str().unwrap()))
        .unwrap();
    assert_eq!(
        first_full["TaskStates"]["t"]["Restarts"], 1,
        "restarted once per its policy before failing"
    );
}

/// `job stop` ends the whole process tree of a raw_exec task within its `kill_timeout`: the
/// background `sleep` ignores SIGINT (sh makes asynchronous commands ignore it), so only the kill of
/// the task's whole process group ends it. The task's events say what happened, as Nomad's.
#[test]
fn job_stop_ends_the_whole_process_tree_within_kill_timeout() {
    let dir = temp_dir("stop-tree");
    let agent = start_dev(&dir);
    let (leader_file, grandchild_file) = (dir.join("leader.pid"), dir.join("grandchild.pid"));
    let script = format!(
        "sleep 1000 & echo $! > {}; echo $$ > {}; wait",
        grandchild_file.display(),
        leader_file.display()
    );
    let kill_timeout = std::time::Duration::from_secs(2);
    let job = json!({"Job": {"ID": "tree", "Type": "service", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", script]},
        "KillTimeout": 2_000_000_000_i64,
        "Resources": {"CPU": 50, "MemoryMB": 16}
    }]}]}});
    let (status, body) = agent.put("/v1/jobs", &job);
    assert_eq!(status, 200, "{body}");
    let leader = pid_in(&agent, &leader_file);
    let grandchild = pid_in(&agent, &grandchild_file);
    assert!(pid_alive(leader) && pid_alive(grandchild));
    let alloc_id = alloc_of(&agent, "tree").unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();

    let began = std::time::Instant::now();
    let (code, _, err) = agent.run(&["job", "stop", "tree"]);
    assert_eq!(code, 0, "{err}");
    agent.wait_until("the whole process tree is gone", || {
        !pid_alive(leader) && !pid_alive(grandchild)
    });
    let took = began.elapsed();
    // A bound on correctness, not speed: the group is killed at the timeout; the rest is the
    // stop's evaluation, the client's next allocation query and this poll.
    assert!(
        took < kill_timeout + std::time::Duration::from_secs(15),
        "the tree outlived kill_timeout: {took:?}"
    );
    let mut kinds = Vec::new();
    agent.wait_until("the allocation reports the kill", || {
        kinds = agent
            .get(&format!("/v1/allocation/{alloc_id}"))
            .ok()
            .and_then(|a| a["TaskStates"]["t"]["Events"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .map(|e| {
                format!(
                    "{}: {}",
                    e["Type"].as_str().unwrap_or_default(),
                    e["DisplayMessage"].as_str().unwrap_or_default()
                )
            })
            .collect();
        kinds.iter().any(|k| k.starts_with("Killed:"))
    });
    assert!(
        kinds
            .iter()
            .any(|k| k == "Killing: Sent interrupt. Waiting 2s before force killing"),
        "{kinds:?}"
    );
}

/// A reattached task's identity is signed again: its templates still read the servers, so a
/// service that goes after the restart leaves its rendered file.
#[test]
fn a_reattached_tasks_templates_still_read_the_servers() {
    let dir = temp_dir("reattach-identity");
    let agent = start_dev(&dir);
    let sleeper = |id: &str, extra: serde_json::Value| {
        let mut j = json!({"Job": {"ID": id, "Type": "service", "TaskGroups": [{"Name": "g", "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sleep", "args": ["600"]},
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}});
        for (k, v) in extra.as_object().unwrap() {
            j["Job"]["TaskGroups"][0][k] = v.clone();
        }
        j
    };
    let db = sleeper(
        "db",
        json!({"Services": [{"Name": "db-svc", "Provider": "nomad"}]}),
    );
    let (status, body) = agent.put("/v1/jobs", &db);
    assert_eq!(status, 200, "{body}");
    let mut app = sleeper("app", json!({}));
    app["Job"]["TaskGroups"][0]["Tasks"][0]["Templates"] = json!([{
        "EmbeddedTmpl": "[{{ range nomadService \"db-svc\" }}{{ .Name }}{{ end }}]",
        "DestPath": "local/out", "ChangeMode": "noop"}]);
    let (status, body) = agent.put("/v1/jobs", &app);
    assert_eq!(status, 200, "{body}");
    let out = |agent: &Agent| -> Option<String> {
        let id = alloc_of(agent, "app")?["ID"].as_str()?.to_string();
        let (s, b) = agent.raw(
            "GET",
            &format!("/v1/client/fs/cat/{id}?path=t/local/out"),
            None,
        );
        (s == 200).then_some(b)
    };
    agent.wait_until("the template rendered the service", || {
        out(&agent).as_deref() == Some("[db-svc]")
    });

    agent.kill();
    let agent = start_dev(&dir);
    agent.wait_until("the app runs again after the restart", || {
        alloc_of(&agent, "app").is_some_and(|a| a["ClientStatus"] == "running")
    });
    let (status, body) = agent.raw("DELETE", "/v1/job/db", None);
    assert_eq!(status, 200, "{body}");
    agent.wait_until("the template re-rendered without the service", || {
        out(&agent).as_deref() == Some("[]")
    });
}
