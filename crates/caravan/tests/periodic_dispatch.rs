//! Template jobs on a real agent: a periodic job launches children on its schedule, `job periodic
//! force` launches one now, `job dispatch` runs a parameterized job with meta and a payload, and bad
//! input is refused naming what is wrong. A server-only agent suffices: each child only needs its
//! job and evaluation written, no task runs. Every wait polls a condition with a deadline.

mod common;

use common::{temp_dir, Agent};
use serde_json::{json, Value};

fn batch_job(id: &str, extra: Value) -> Value {
    let mut job = json!({
        "ID": id,
        "Type": "batch",
        "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": "/bin/true"}}]}]
    });
    for (k, v) in extra.as_object().expect("an object") {
        job[k] = v.clone();
    }
    json!({ "Job": job })
}

/// The jobs whose ID starts with `prefix`.
fn jobs_with_prefix(agent: &Agent, prefix: &str) -> Vec<Value> {
    agent
        .get(&format!("/v1/jobs?prefix={prefix}"))
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn register(agent: &Agent, body: &Value) {
    let (status, text) = agent.put("/v1/jobs", body);
    assert_eq!(status, 200, "registering {body}: {text}");
}

#[test]
fn periodic_launches_force_and_dispatch_make_children() {
    let dir = temp_dir("periodic-dispatch");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data]);

    launches_on_schedule(&agent);
    force_launches_now(&agent);
    dispatch_runs_a_parameterized_job(&agent);
    bad_schedules_are_refused_at_registration(&agent);
    agent.kill();
}

/// Every second (six fields: seconds first): a child `tick/periodic-<unix seconds>` appears.
fn launches_on_schedule(agent: &Agent) {
    let periodic = json!({"Periodic": {"Specs": ["* * * * * *"], "TimeZone": "Europe/Paris"}});
    register(agent, &batch_job("tick", periodic));
    agent.wait_until("a periodic child of tick", || {
        !jobs_with_prefix(agent, "tick/periodic-").is_empty()
    });
    let child = &jobs_with_prefix(agent, "tick/periodic-")[0];
    assert_eq!(child["ParentID"], "tick", "{child}");
    let id = child["ID"].as_str().expect("an ID");
    let launched: i64 = id
        .strip_prefix("tick/periodic-")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{id} ends in unix seconds"));
    assert!(launched > 1_700_000_000, "{id}");
    let full = agent
        .get(&format!("/v1/job/{id}"))
        .expect("the child reads");
    assert!(
        full["Periodic"].is_null(),
        "the child has no schedule: {full}"
    );
    let evals = agent
        .get(&format!("/v1/job/{id}/evaluations"))
        .expect("the child's evaluations");
    // Its registration's evaluation (and, with no client to place on, the blocked one it hands to).
    let triggers: Vec<&str> = evals
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["TriggeredBy"].as_str())
        .collect();
    assert!(triggers.contains(&"job-register"), "{evals}");

    // Stopped, the job launches no more.
    let (code, out, err) = agent.run(&["job", "stop", "-detach", "tick"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = agent.run(&["job", "periodic", "force", "-detach", "tick"]);
    assert_eq!(code, 1);
    assert!(err.contains("stopped"), "{err}");
}

fn force_launches_now(agent: &Agent) {
    // New Year's only: nothing launches on its own during the test.
    let periodic = json!({"Periodic": {"Specs": ["0 0 1 1 *"], "ProhibitOverlap": true}});
    register(agent, &batch_job("report", periodic));
    let (code, out, err) = agent.run(&["job", "periodic", "force", "-detach", "report"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("Force periodic successful\nEvaluation ID: "),
        "{out}"
    );
    let children = jobs_with_prefix(agent, "report/periodic-");
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!(children[0]["ParentID"], "report");

    let (code, out, err) = agent.run(&["job", "status", "report"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Next Periodic Launch = "), "{out}");
    assert!(out.contains("Previously Launched Jobs"), "{out}");
    assert!(out.contains("report/periodic-"), "{out}");

    // A job without a schedule cannot be forced.
    register(agent, &batch_job("plain", json!({})));
    let (code, _, err) = agent.run(&["job", "periodic", "force", "plain"]);
    assert_eq!(code, 1);
    assert!(err.contains("job is not periodic"), "{err}");
    let (code, _, _) = agent.run(&["job", "stop", "-detach", "-purge", "plain"]);
    assert_eq!(code, 0);
}

fn dispatch_runs_a_parameterized_job(agent: &Agent) {
    let params = json!({"ParameterizedJob": {"Payload": "optional", "MetaRequired": ["input"], "MetaOptional": ["speed"]}});
    register(agent, &batch_job("encode", params));
    let input = temp_dir("dispatch-input").join("payload.txt");
    std::fs::write(&input, "frames 1-100").expect("the payload file is written");
    let input = input.display().to_string();
    let (code, out, err) = agent.run(&[
        "job",
        "dispatch",
        "-detach",
        "-meta",
        "input=a.mp4",
        "-meta",
        "speed=fast",
        "encode",
        &input,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("Dispatched Job ID = "))
        .unwrap_or_else(|| panic!("no dispatched job ID in {out}"))
        .to_string();
    assert!(id.starts_with("encode/dispatch-"), "{id}");
    assert!(out.contains("Evaluation ID     = "), "{out}");
    let child = agent
        .get(&format!("/v1/job/{id}"))
        .expect("the child reads");
    assert_eq!(child["Dispatched"], true, "{child}");
    assert_eq!(child["ParentID"], "encode");
    assert_eq!(child["Meta"]["input"], "a.mp4");
    assert_eq!(child["Meta"]["speed"], "fast");
    assert_eq!(child["Payload"], "ZnJhbWVzIDEtMTAw", "base64 of the file");

    // A key the parameterized block does not name is refused, naming it.
    let (code, out, err) = agent.run(&[
        "job",
        "dispatch",
        "-detach",
        "-meta",
        "input=a",
        "-meta",
        "color=red",
        "encode",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("unpermitted meta keys: color"), "{err}");
    // A required key missing is refused too.
    let (code, _, err) = agent.run(&["job", "dispatch", "-detach", "encode"]);
    assert_eq!(code, 1);
    assert!(err.contains("required meta keys: input"), "{err}");

    // Over HTTP, with the API's own shapes.
    let (status, text) = agent.raw(
        "POST",
        "/v1/job/encode/dispatch",
        Some(&json!({"Meta": {"input": "b"}, "Payload": "aGk="})),
    );
    assert_eq!(status, 200, "{text}");
    let resp: Value = serde_json::from_str(&text).expect("JSON");
    for key in [
        "DispatchedJobID",
        "EvalID",
        "EvalCreateIndex",
        "JobCreateIndex",
        "Index",
    ] {
        assert!(!resp[key].is_null(), "{key} missing from {resp}");
    }

    let (code, out, err) = agent.run(&["job", "status", "encode"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Parameterized Job"), "{out}");
    assert!(out.contains("Dispatched Jobs"), "{out}");
    assert!(out.contains(&id), "{out}");
}

fn bad_schedules_are_refused_at_registration(agent: &Agent) {
    let periodic =
        json!({"Periodic": {"Specs": ["*/5 * * * *", "61 * * * *"], "TimeZone": "Mars/Olympus"}});
    let (status, text) = agent.put("/v1/jobs", &batch_job("bad", periodic));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("periodic.crons[1]"), "{text}");
    assert!(text.contains("periodic.time_zone"), "{text}");
}
