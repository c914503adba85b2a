//! Each job type end to end on a real `caravan agent -dev` with mock-driver tasks (nothing outlives
//! the agent): service, batch, system and sysbatch jobs reach their expected states; a failing
//! allocation is rescheduled after its delay; a periodic job's children and a dispatched job run.
//! Every wait has a deadline and polls a condition.

mod common;

use common::Agent;
use serde_json::{json, Value};

const MS: i64 = 1_000_000;

fn dev_agent(name: &str) -> Agent {
    common::mock_dev_agent(name)
}

/// A job of one group of `count` mock tasks configured by `config`, with `extra` job fields.
fn job(id: &str, job_type: &str, count: u32, config: Value, extra: Value) -> Value {
    let mut job = json!({
        "ID": id, "Type": job_type,
        "TaskGroups": [{
            "Name": "g", "Count": count,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail", "Interval": 60_000 * MS, "Delay": 10 * MS},
            "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": config,
                       "Resources": {"CPU": 20, "MemoryMB": 16}}]
        }]
    });
    for (k, v) in extra.as_object().into_iter().flatten() {
        if k == "Group" {
            for (gk, gv) in v.as_object().into_iter().flatten() {
                job["TaskGroups"][0][gk] = gv.clone();
            }
        } else {
            job[k] = v.clone();
        }
    }
    json!({ "Job": job })
}

fn register(agent: &Agent, job: &Value) {
    let (status, body) = agent.put("/v1/jobs", job);
    assert_eq!(status, 200, "{body}");
}

fn allocs(agent: &Agent, job: &str) -> Vec<Value> {
    agent
        .get(&format!("/v1/job/{}/allocations", urlencode(job)))
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn urlencode(s: &str) -> String {
    s.replace('/', "%2F")
}

fn count_status(allocs: &[Value], status: &str) -> usize {
    allocs
        .iter()
        .filter(|a| a["ClientStatus"] == status)
        .count()
}

fn job_status(agent: &Agent, job: &str) -> String {
    agent
        .get(&format!("/v1/job/{}", urlencode(job)))
        .ok()
        .and_then(|v| v["Status"].as_str().map(String::from))
        .unwrap_or_default()
}

fn stop(agent: &Agent, job: &str) {
    let (code, _, err) = agent.run(&["job", "stop", "-detach", job]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn every_job_type_reaches_its_expected_state() {
    let agent = dev_agent("job-types");
    let long = json!({"run_for": "10m"});
    let short = json!({"run_for": "100ms"});
    register(&agent, &job("svc", "service", 2, long.clone(), json!({})));
    register(&agent, &job("bat", "batch", 2, short.clone(), json!({})));
    // System jobs run one allocation per eligible node (count may only be 0 or 1).
    register(&agent, &job("sys", "system", 1, long, json!({})));
    register(&agent, &job("sysb", "sysbatch", 1, short, json!({})));

    agent.wait_until("service allocations running", || {
        count_status(&allocs(&agent, "svc"), "running") == 2
    });
    agent.wait_until("batch allocations complete and the job dead", || {
        count_status(&allocs(&agent, "bat"), "complete") == 2 && job_status(&agent, "bat") == "dead"
    });
    agent.wait_until("one system allocation running on the one node", || {
        let a = allocs(&agent, "sys");
        a.len() == 1 && count_status(&a, "running") == 1
    });
    agent.wait_until("the sysbatch allocation complete and the job dead", || {
        let a = allocs(&agent, "sysb");
        a.len() == 1 && count_status(&a, "complete") == 1 && job_status(&agent, "sysb") == "dead"
    });
    assert_eq!(job_status(&agent, "svc"), "running");
    assert_eq!(job_status(&agent, "sys"), "running");
    let summary = agent.get("/v1/job/bat/summary").unwrap();
    assert_eq!(summary["Summary"]["g"]["Complete"], 2, "{summary}");
    stop(&agent, "svc");
    stop(&agent, "sys");
    agent.wait_until("stopped jobs' allocations complete", || {
        count_status(&allocs(&agent, "svc"), "running") == 0
            && count_status(&allocs(&agent, "sys"), "running") == 0
    });
}

#[test]
fn a_failed_allocation_is_rescheduled_after_its_delay_until_attempts_run_out() {
    let agent = dev_agent("reschedule");
    let failing = json!({"run_for": "50ms", "exit_code": 1});
    let policy = json!({"Group": {"ReschedulePolicy": {
        "Attempts": 1, "Interval": 3_600_000 * MS, "Delay": 2_000 * MS,
        "DelayFunction": "constant", "Unlimited": false
    }}});
    register(&agent, &job("resched", "service", 1, failing, policy));

    let mut list = Vec::new();
    agent.wait_until("the replacement fails too", || {
        list = allocs(&agent, "resched");
        count_status(&list, "failed") == 2
    });
    // The list stubs link forwards (NextAllocation); the full allocation links back.
    let (first, second): (Vec<&Value>, Vec<&Value>) = list
        .iter()
        .partition(|a| !a["NextAllocation"].as_str().unwrap_or("").is_empty());
    assert_eq!((first.len(), second.len()), (1, 1), "{list:#?}");
    let (first, second) = (first[0], second[0]);
    assert_eq!(first["NextAllocation"], second["ID"]);
    let second_full = agent
        .get(&format!(
            "/v1/allocation/{}",
            second["ID"].as_str().unwrap()
        ))
        .unwrap();
    assert_eq!(second_full["PreviousAllocation"], first["ID"]);
    let events = &second["RescheduleTracker"]["Events"];
    assert_eq!(events.as_array().map(Vec::len), Some(1), "{second}");
    assert_eq!(events[0]["PrevAllocID"], first["ID"]);
    assert_eq!(events[0]["Delay"], 2_000 * MS);
    // The replacement was made no earlier than the delay after the failure.
    let finished = first["TaskStates"]["t"]["FinishedAt"]
        .as_str()
        .unwrap_or_default();
    let failed_at = rfc3339_nanos(finished).unwrap_or_else(|| panic!("FinishedAt {finished:?}"));
    let created = second["CreateTime"].as_i64().unwrap();
    assert!(
        created - failed_at >= 1_900 * MS,
        "replacement after {} ms",
        (created - failed_at) / MS
    );
    // The delayed evaluation waited for its time.
    let evals = agent.get("/v1/job/resched/evaluations").unwrap();
    assert!(
        evals
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["WaitUntil"].as_str().is_some_and(|w| !w.is_empty())
                && e["Status"] == "complete"),
        "{evals:#}"
    );
    // With the one attempt used, the job stays failed: the second failure gets no follow-up.
    assert_eq!(
        second_full["FollowupEvalID"].as_str().unwrap_or(""),
        "",
        "{second_full}"
    );
    stop(&agent, "resched");
}

#[test]
fn periodic_children_and_dispatched_jobs_run_on_the_client() {
    let agent = dev_agent("launch");
    let short = json!({"run_for": "100ms"});
    register(
        &agent,
        &job(
            "every",
            "batch",
            1,
            short.clone(),
            json!({"Periodic": {"Specs": ["* * * * * *"], "ProhibitOverlap": true}}),
        ),
    );
    let mut child = String::new();
    agent.wait_until("a periodic child ran to completion", || {
        let jobs = agent
            .get("/v1/jobs?prefix=every/periodic-")
            .unwrap_or(Value::Null);
        jobs.as_array().into_iter().flatten().any(|j| {
            let id = j["ID"].as_str().unwrap_or_default();
            let done = count_status(&allocs(&agent, id), "complete") == 1;
            if done {
                child = id.to_string();
            }
            done
        })
    });
    assert_eq!(
        agent
            .get(&format!("/v1/job/{}", urlencode(&child)))
            .unwrap()["ParentID"],
        "every"
    );
    stop(&agent, "every");

    register(
        &agent,
        &job(
            "work",
            "batch",
            1,
            short,
            json!({"ParameterizedJob": {"Payload": "optional", "MetaRequired": ["who"]}}),
        ),
    );
    let (code, out, err) = agent.run(&["job", "dispatch", "-detach", "-meta", "who=tests", "work"]);
    assert_eq!(code, 0, "{out}{err}");
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("Dispatched Job ID = "))
        .unwrap_or_else(|| panic!("no dispatched ID in {out}"))
        .trim()
        .to_string();
    assert!(id.starts_with("work/dispatch-"), "{id}");
    agent.wait_until("the dispatched job ran to completion", || {
        count_status(&allocs(&agent, &id), "complete") == 1
    });
    let v = agent.get(&format!("/v1/job/{}", urlencode(&id))).unwrap();
    assert_eq!(v["Meta"]["who"], "tests", "{v}");
    assert_eq!(v["ParentID"], "work");
    let (code, _, err) = agent.run(&["job", "dispatch", "-detach", "work"]);
    assert_eq!(code, 1);
    assert!(err.contains("who"), "{err}");
}

/// `2026-11-30T07:47:37.306860309Z` → Unix nanoseconds (UTC only, as the agent writes them).
fn rfc3339_nanos(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|x| x.parse::<i64>().ok());
    let (h, mi, sec) = (t.next()??, t.next()??, t.next()??);
    let nanos: i64 = format!("{frac:0<9}")[..9].parse().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + mi * 60 + sec) * 1_000_000_000) + nanos)
}
