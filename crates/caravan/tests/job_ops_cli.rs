//! `caravan job allocs|deployments|eval|restart` against a real dev agent with mock_driver tasks
//! (nothing outlives the agent): the output and exit codes Nomad's CLI gives, and what each command
//! does to the cluster — a forced reschedule replaces a failed allocation its policy would delay,
//! an in-place restart shows in the tasks' restart counts and events, `-reschedule` replaces
//! allocations. Every wait has a deadline and polls a condition.

mod common;

use common::{call, json_of, mock_dev_agent, wait_for, Agent};
use serde_json::{json, Value};
use std::time::Duration;

const MS: u64 = 1_000_000;
const DEADLINE: Duration = Duration::from_secs(40);
const POLL: Duration = Duration::from_millis(100);

fn task(name: &str, config: Value) -> Value {
    json!({"Name": name, "Driver": "mock_driver", "Config": config,
        "Resources": {"CPU": 20, "MemoryMB": 16}})
}

fn register(agent: &Agent, job: Value) {
    let (s, b) = call(agent, "PUT", "/v1/jobs", "", Some(&json!({ "Job": job })));
    assert_eq!(s, 200, "{b}");
}

fn allocs(agent: &Agent, job: &str) -> Vec<Value> {
    let (_, b) = call(
        agent,
        "GET",
        &format!("/v1/job/{job}/allocations"),
        "",
        None,
    );
    serde_json::from_str::<Value>(&b)
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn alloc(agent: &Agent, id: &str) -> Value {
    agent.get(&format!("/v1/allocation/{id}")).unwrap()
}

/// The job's allocations running (and meant to), sorted by ID.
fn running(agent: &Agent, job: &str) -> Vec<Value> {
    let mut out: Vec<Value> = allocs(agent, job)
        .into_iter()
        .filter(|a| a["ClientStatus"] == "running" && a["DesiredStatus"] == "run")
        .collect();
    out.sort_by_key(|a| a["ID"].as_str().unwrap_or_default().to_string());
    out
}

fn wait_running(agent: &Agent, job: &str, n: usize) -> Vec<Value> {
    let mut found = Vec::new();
    wait_for(
        &format!("{n} allocations of {job} running"),
        DEADLINE,
        POLL,
        || {
            found = running(agent, job);
            found.len() == n
        },
    );
    found
}

fn id_of(v: &Value) -> String {
    v["ID"].as_str().unwrap().to_string()
}

/// Runs the CLI; panics with its output unless it exits `code`.
fn expect(agent: &Agent, code: i32, args: &[&str]) -> (String, String) {
    let (c, out, err) = agent.run(args);
    assert_eq!(c, code, "caravan {args:?}\nstdout:\n{out}\nstderr:\n{err}");
    (out, err)
}

#[test]
fn allocs_deployments_and_eval() {
    let agent = mock_dev_agent("job-ops-read");
    // A service job with an update block: its registration starts a deployment.
    register(
        &agent,
        json!({"ID": "svc", "Type": "service", "TaskGroups": [{"Name": "web", "Count": 2,
            "Update": {"MaxParallel": 2, "MinHealthyTime": 200 * MS,
                "HealthyDeadline": 30_000 * MS, "ProgressDeadline": 60_000 * MS,
                "HealthCheck": "task_states"},
            "Tasks": [task("t", json!({"run_for": "10m"}))]}]}),
    );
    // A batch job whose task fails at once; its policy would replace it only after an hour.
    register(
        &agent,
        json!({"ID": "flaky", "Type": "batch", "TaskGroups": [{"Name": "f", "Count": 1,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail", "Interval": 60_000 * MS, "Delay": 10 * MS},
            "ReschedulePolicy": {"Attempts": 1, "Interval": 7_200_000 * MS, "Delay": 3_600_000 * MS,
                "DelayFunction": "constant", "Unlimited": false},
            "Tasks": [task("t", json!({"run_for": "20ms", "exit_code": 1}))]}]}),
    );
    let svc = wait_running(&agent, "svc", 2);
    wait_for("svc's deployment to succeed", DEADLINE, POLL, || {
        agent
            .get("/v1/job/svc/deployment")
            .is_ok_and(|d| d["Status"] == "successful")
    });

    // job allocs: Nomad's table, JSON, and full IDs with -verbose (the job named by a prefix).
    let (out, _) = expect(&agent, 0, &["job", "allocs", "svc"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "ID", "Node", "ID", "Task", "Group", "Version", "Desired", "Status", "Created",
            "Modified"
        ]
    );
    for a in &svc {
        let short = &a["ID"].as_str().unwrap()[..8];
        assert!(
            lines.iter().any(|l| l.starts_with(&format!("{short}  "))
                && l.contains("  web  ")
                && l.contains("run")
                && l.contains("running")),
            "{out}"
        );
    }
    let (out, _) = expect(&agent, 0, &["job", "allocs", "-json", "svc"]);
    let listed = json_of(&out);
    let mut ids: Vec<String> = listed.as_array().unwrap().iter().map(id_of).collect();
    ids.sort();
    assert_eq!(ids, svc.iter().map(id_of).collect::<Vec<_>>());
    let (out, _) = expect(&agent, 0, &["job", "allocs", "-verbose", "sv"]);
    assert!(out.lines().next().unwrap().contains("Eval ID"), "{out}");
    for a in &svc {
        assert!(out.contains(a["ID"].as_str().unwrap()), "{out}");
        assert!(out.contains(a["EvalID"].as_str().unwrap()), "{out}");
    }
    let (_, err) = expect(&agent, 1, &["job", "allocs", "nope"]);
    assert!(
        err.contains("No job(s) with prefix or ID \"nope\" found"),
        "{err}"
    );

    // job deployments: the list, -latest in full, -json; a job without any says so.
    let d = agent.get("/v1/job/svc/deployment").unwrap();
    let d_id = d["ID"].as_str().unwrap();
    let (out, _) = expect(&agent, 0, &["job", "deployments", "svc"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("Job Version"),
        "{out}"
    );
    assert!(
        lines[1].starts_with(&d_id[..8])
            && lines[1].contains("svc")
            && lines[1].contains("successful"),
        "{out}"
    );
    let (out, _) = expect(
        &agent,
        0,
        &["job", "deployments", "-latest", "-verbose", "svc"],
    );
    assert!(out.contains(&format!("ID          = {d_id}")), "{out}");
    assert!(out.contains("Job ID      = svc"), "{out}");
    assert!(out.contains("Status      = successful"), "{out}");
    assert!(out.contains("Deployed"), "{out}");
    let (out, _) = expect(&agent, 0, &["job", "deployments", "-json", "-all", "svc"]);
    assert_eq!(json_of(&out)[0]["ID"], d["ID"], "{out}");
    let (out, _) = expect(
        &agent,
        0,
        &["job", "deployments", "-latest", "-json", "svc"],
    );
    assert_eq!(json_of(&out)["ID"], d["ID"], "{out}");
    let (out, _) = expect(&agent, 0, &["job", "deployments", "flaky"]);
    assert_eq!(out.trim(), "No deployments found");
    let (out, _) = expect(&agent, 0, &["job", "deployments", "-latest", "flaky"]);
    assert_eq!(out.trim(), "No deployment found");

    // job eval -detach: Nomad's line; the evaluation exists and was triggered as a registration.
    let (out, _) = expect(&agent, 0, &["job", "eval", "-detach", "svc"]);
    let short = out
        .strip_prefix("Created eval ID: \"")
        .and_then(|r| r.strip_suffix("\" \n"))
        .unwrap_or_else(|| panic!("{out:?}"));
    assert_eq!(short.len(), 8, "{out:?}");
    let (_, b) = call(
        &agent,
        "GET",
        &format!("/v1/evaluations?prefix={short}"),
        "",
        None,
    );
    let evals = json_of(&b);
    assert_eq!(evals[0]["JobID"], "svc", "{evals}");
    assert_eq!(evals[0]["TriggeredBy"], "job-register", "{evals}");
    // Monitored: the evaluation to its end, nothing changed.
    let (out, _) = expect(&agent, 0, &["job", "eval", "svc"]);
    assert!(out.contains("Monitoring evaluation"), "{out}");
    assert!(out.contains("finished with status \"complete\""), "{out}");
    assert_eq!(running(&agent, "svc").len(), 2);

    // The API keeps Nomad's checks on the body.
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/job/svc/evaluate",
        "",
        Some(&json!({"JobID": "other"})),
    );
    assert_eq!((s, b.trim()), (400, "JobID not same as job name"));
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/job/svc/evaluate",
        "",
        Some(&json!({"EvalOptions": {"ForceReschedule": true}})),
    );
    assert_eq!((s, b.trim()), (400, "Job ID must be specified"));

    // -force-reschedule: the failed allocation its policy would replace in an hour is replaced
    // now; a plain evaluation leaves it alone.
    let mut failed = String::new();
    wait_for("flaky's allocation to fail", DEADLINE, POLL, || {
        let a = allocs(&agent, "flaky");
        if let [one] = a.as_slice() {
            if one["ClientStatus"] == "failed" {
                failed = id_of(one);
                return true;
            }
        }
        false
    });
    expect(&agent, 0, &["job", "eval", "flaky"]);
    assert_eq!(
        allocs(&agent, "flaky").len(),
        1,
        "a plain evaluation waits for the delay"
    );
    let old = alloc(&agent, &failed);
    assert_eq!(old["NextAllocation"].as_str().unwrap_or(""), "", "{old}");
    let (out, _) = expect(&agent, 0, &["job", "eval", "-force-reschedule", "flaky"]);
    assert!(out.contains("finished with status \"complete\""), "{out}");
    let old = alloc(&agent, &failed);
    let next = old["NextAllocation"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!next.is_empty(), "{old}");
    assert_eq!(old["DesiredTransition"]["ForceReschedule"], true, "{old}");
    assert_eq!(alloc(&agent, &next)["PreviousAllocation"], json!(failed));
    assert_eq!(allocs(&agent, "flaky").len(), 2);
}

#[test]
fn restart_in_place_and_by_rescheduling() {
    let agent = mock_dev_agent("job-ops-restart");
    // A restart waits for deployments to end; this one's allocations are healthy quickly.
    register(
        &agent,
        json!({"ID": "r", "Type": "service",
            "Update": {"MaxParallel": 4, "MinHealthyTime": 100 * MS,
                "HealthyDeadline": 30_000 * MS, "ProgressDeadline": 60_000 * MS,
                "HealthCheck": "task_states"},
            "TaskGroups": [
            {"Name": "web", "Count": 3, "Tasks": [
                task("main", json!({"run_for": "10m"})),
                task("side", json!({"run_for": "10m"}))]},
            {"Name": "db", "Count": 1, "Tasks": [task("main", json!({"run_for": "10m"}))]}]}),
    );
    wait_running(&agent, "r", 4);
    wait_for("r's deployment to succeed", DEADLINE, POLL, || {
        agent
            .get("/v1/job/r/deployment")
            .is_ok_and(|d| d["Status"] == "successful")
    });
    // A task's restarts, once it runs again (0 while it does not).
    let restarts = |id: &str, task: &str| {
        let state = &alloc(&agent, id)["TaskStates"][task];
        match state["State"] == "running" {
            true => state["Restarts"].as_u64().unwrap_or(0),
            false => 0,
        }
    };
    // Every task started (a restart needs running tasks to restart).
    wait_for("every task of r running", DEADLINE, POLL, || {
        running(&agent, "r").iter().all(|a| {
            a["TaskStates"]
                .as_object()
                .is_some_and(|t| t.values().all(|s| s["State"] == "running"))
        })
    });

    // Questions need a terminal: without one, and without -yes, nothing is done.
    let (_, err) = expect(&agent, 1, &["job", "restart", "r"]);
    assert!(
        err.contains(
            "Invalid -on-error value \"ask\": \"ask\" cannot be used when terminal is not interactive"
        ),
        "{err}"
    );
    let (_, err) = expect(
        &agent,
        1,
        &["job", "restart", "-yes", "-batch-size", "0", "r"],
    );
    assert!(err.contains("Invalid -batch-size value \"0\""), "{err}");

    // In place, the web group only, two at a time: 3 allocations make 2 batches.
    let web: Vec<String> = running(&agent, "r")
        .iter()
        .filter(|a| a["TaskGroup"] == "web")
        .map(id_of)
        .collect();
    let db = running(&agent, "r")
        .iter()
        .find(|a| a["TaskGroup"] == "db")
        .map(id_of)
        .unwrap();
    let (out, _) = expect(
        &agent,
        0,
        &[
            "job",
            "restart",
            "-yes",
            "-group",
            "web",
            "-batch-size",
            "2",
            "r",
        ],
    );
    assert!(out.contains(": Restarting 3 allocations\n"), "{out}");
    assert!(
        out.contains(": Restarting 1st batch of 2 allocations\n"),
        "{out}"
    );
    assert!(
        out.contains(": Restarting 2nd batch of 1 allocations\n"),
        "{out}"
    );
    assert!(!out.contains("3rd batch"), "{out}");
    assert_eq!(
        out.matches(": Restarting running tasks in allocation")
            .count(),
        3,
        "{out}"
    );
    for id in &web {
        assert!(
            out.contains(&format!("allocation \"{}\" for group \"web\"", &id[..8])),
            "{out}"
        );
    }
    assert!(out.contains(": Job restart finished\n"), "{out}");
    assert!(out.ends_with("\nJob restarted successfully!\n"), "{out}");
    wait_for("the web tasks restarted", DEADLINE, POLL, || {
        web.iter()
            .all(|id| restarts(id, "main") >= 1 && restarts(id, "side") >= 1)
    });
    let events = alloc(&agent, &web[0])["TaskStates"]["main"]["Events"].clone();
    assert!(
        events
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["Type"] == "Restart Signaled"),
        "{events}"
    );
    assert_eq!(restarts(&db, "main"), 0, "the db group was not asked for");
    // The allocations themselves stay.
    assert_eq!(
        running(&agent, "r")
            .iter()
            .map(id_of)
            .filter(|id| web.contains(id))
            .count(),
        3
    );

    // One task by name, all at once.
    let before: Vec<u64> = web.iter().map(|id| restarts(id, "main")).collect();
    let (out, _) = expect(
        &agent,
        0,
        &[
            "job",
            "restart",
            "-yes",
            "-task",
            "side",
            "-batch-size",
            "100%",
            "r",
        ],
    );
    assert_eq!(
        out.matches(": Restarting task \"side\" in allocation")
            .count(),
        3,
        "{out}"
    );
    wait_for("the side tasks restarted again", DEADLINE, POLL, || {
        web.iter().all(|id| restarts(id, "side") >= 2)
    });
    let after: Vec<u64> = web.iter().map(|id| restarts(id, "main")).collect();
    assert_eq!(before, after, "main was not asked for");

    // -reschedule: the db allocation is stopped and replaced by a new one, which runs.
    let (out, _) = expect(
        &agent,
        0,
        &["job", "restart", "-yes", "-reschedule", "-group", "db", "r"],
    );
    let short = &db[..8];
    assert!(
        out.contains(&format!(
            ": Rescheduling allocation \"{short}\" for group \"db\""
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("Allocation \"{short}\" replaced by")),
        "{out}"
    );
    assert!(out.contains("is \"running\""), "{out}");
    assert!(out.contains("Job restarted successfully!"), "{out}");
    let old = alloc(&agent, &db);
    assert_eq!(old["DesiredStatus"], "stop", "{old}");
    let next = old["NextAllocation"].as_str().unwrap().to_string();
    assert!(!next.is_empty(), "{old}");
    let now: Vec<Value> = running(&agent, "r")
        .into_iter()
        .filter(|a| a["TaskGroup"] == "db")
        .collect();
    assert_eq!(now.len(), 1);
    assert_eq!(id_of(&now[0]), next);

    // A system job's stopped allocation is placed again by the evaluation the restart forces.
    register(
        &agent,
        json!({"ID": "sys", "Type": "system", "TaskGroups": [{"Name": "s",
            "Tasks": [task("main", json!({"run_for": "10m"}))]}]}),
    );
    let sys = id_of(&wait_running(&agent, "sys", 1)[0]);
    let (out, _) = expect(&agent, 0, &["job", "restart", "-yes", "-reschedule", "sys"]);
    assert!(out.contains("Job restarted successfully!"), "{out}");
    let now = wait_running(&agent, "sys", 1);
    assert_eq!(alloc(&agent, &sys)["NextAllocation"], now[0]["ID"]);
    register(
        &agent,
        json!({"ID": "sb", "Type": "sysbatch", "TaskGroups": [{"Name": "s",
            "Tasks": [task("main", json!({"run_for": "10m"}))]}]}),
    );
    let (_, err) = expect(&agent, 1, &["job", "restart", "-yes", "-reschedule", "sb"]);
    assert_eq!(
        err.trim(),
        "Jobs of type \"sysbatch\" are not allowed to be rescheduled."
    );

    // Nothing left to restart in a group that has none.
    let (out, _) = expect(
        &agent,
        0,
        &["job", "restart", "-yes", "-group", "none", "r"],
    );
    assert_eq!(out.trim(), "No allocations to restart");
}
