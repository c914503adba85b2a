//! The agent's own tools on a real dev agent: `/v1/agent/monitor` and `caravan monitor` (log lines
//! as the agent writes them), `/v1/agent/host`, `caravan agent-info`, and `/v1/jobs/statuses`.

mod common;

use common::{bin, call, header, http_with, json_of, mock_dev_agent, wait_for};
use serde_json::json;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn batch_job(id: &str) -> serde_json::Value {
    json!({"Job": {"ID": id, "Type": "batch", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 2,
            "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
                "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}})
}

#[test]
fn monitor_host_agent_info_and_job_statuses() {
    let agent = mock_dev_agent("agent-tools");

    // `caravan monitor` streams the agent's lines, hclog-style, while things happen.
    let mut child = Command::new(bin())
        .args(["monitor", "-log-level", "debug"])
        .env("NOMAD_ADDR", &agent.http)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("caravan monitor runs");
    let stdout = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    wait_for(
        "a debug or info line from caravan monitor",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || {
            // Something to log about: a job registered and scheduled.
            let _ = call(&agent, "PUT", "/v1/jobs", "", Some(&batch_job("web")));
            while let Ok(line) = rx.try_recv() {
                seen.push(line);
            }
            seen.iter().any(|l| {
                l.len() > 25
                    && l.as_bytes()[4] == b'-'
                    && l[..24].ends_with('Z')
                    && (l[24..].starts_with(" [DEBUG] ") || l[24..].starts_with(" [INFO]  "))
            })
        },
    );
    let _ = child.kill();
    let _ = child.wait();

    // Through the API: frames of base64 lines; a bad level is refused.
    let (s, b) = call(
        &agent,
        "GET",
        "/v1/agent/monitor?log_level=verbose",
        "",
        None,
    );
    assert_eq!((s, b.trim()), (400, "Unknown log level: verbose"));
    let (s, b) = call(&agent, "GET", "/v1/agent/monitor?log_json=maybe", "", None);
    assert_eq!(s, 400, "{b}");

    // The host, as `nomad operator debug` reads it (-dev turns on enable_debug).
    let (s, b) = call(&agent, "GET", "/v1/agent/host", "", None);
    assert_eq!(s, 200, "{b}");
    let host = json_of(&b);
    assert!(
        host["OS"].as_str().is_some_and(|o| o.contains("Linux")),
        "{host}"
    );
    assert!(
        host["Network"]
            .as_array()
            .is_some_and(|a| a.iter().any(|i| i["address"] == "127.0.0.1")),
        "{host}"
    );
    assert!(host["Environment"]["PATH"].is_string(), "{host}");
    assert!(
        host["Disk"].as_object().is_some_and(|d| !d.is_empty()),
        "{host}"
    );

    // agent-info: sections and keys, sorted.
    let (code, out, err) = agent.run(&["agent-info"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().any(|l| l == "nomad"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("  leader = ")), "{out}");
    let (code, out, _) = agent.run(&["agent-info", "-json"]);
    assert_eq!(code, 0);
    assert!(json_of(&out)["stats"].is_object());

    // /v1/jobs/statuses: newest change first, with allocations; paged by modify index.
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&batch_job("api")));
    assert_eq!(s, 200, "{b}");
    wait_for(
        "both jobs' allocations listed by /v1/jobs/statuses",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let (_, b) = call(&agent, "GET", "/v1/jobs/statuses", "", None);
            let v = json_of(&b);
            v.as_array().is_some_and(|a| {
                a.len() == 2
                    && a.iter()
                        .all(|j| j["Allocs"].as_array().is_some_and(|x| x.len() == 2))
            })
        },
    );
    let (_, b) = call(&agent, "GET", "/v1/jobs/statuses", "", None);
    let all = json_of(&b);
    assert_eq!(all[0]["ID"], "api", "{all}");
    assert_eq!(all[1]["ID"], "web");
    assert_eq!(all[0]["GroupCountSum"], 2);
    assert_eq!(all[0]["Type"], "batch");
    assert!(all[0]["Allocs"][0]["ClientStatus"].is_string());
    let url = format!("{}/v1/jobs/statuses?per_page=1", agent.http);
    let (s, b, headers) = http_with("GET", &url, None, &[]).unwrap();
    assert_eq!(s, 200, "{b}");
    let page = json_of(&b);
    assert_eq!(page.as_array().map(Vec::len), Some(1));
    let next = header(&headers, "x-nomad-nexttoken").expect("a next page");
    assert_eq!(next, all[1]["ModifyIndex"].to_string());
    let (_, b) = call(
        &agent,
        "GET",
        &format!("/v1/jobs/statuses?per_page=1&next_token={next}"),
        "",
        None,
    );
    assert_eq!(json_of(&b)[0]["ID"], "web");
    // Only the named jobs.
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/jobs/statuses",
        "",
        Some(&json!({"Jobs": [{"ID": "web"}]})),
    );
    assert_eq!(s, 200, "{b}");
    let named = json_of(&b);
    assert_eq!(named.as_array().map(Vec::len), Some(1), "{named}");
    assert_eq!(named[0]["ID"], "web");
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/jobs/statuses",
        "",
        Some(&json!({"Jobs": []})),
    );
    assert_eq!((s, b.trim()), (400, "no jobs in request"));

    // A job purged and registered again: its allocations and deployments are the new job's;
    // `all=true` shows the earlier job's too (Nomad's `anyCreateIndex`).
    let (s, b) = call(&agent, "DELETE", "/v1/job/web?purge=true", "", None);
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&batch_job("web")));
    assert_eq!(s, 200, "{b}");
    let count = |path: &str| {
        let (_, b) = call(&agent, "GET", path, "", None);
        json_of(&b).as_array().map_or(0, Vec::len)
    };
    wait_for(
        "the new web job's two allocations",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || count("/v1/job/web/allocations") == 2 && count("/v1/job/web/allocations?all=true") == 4,
    );

    // The scheduling workers: listed, and reconfigured while the agent runs.
    let (s, b) = call(&agent, "GET", "/v1/agent/schedulers", "", None);
    assert_eq!(s, 200, "{b}");
    let info = json_of(&b);
    assert!(
        info["server_id"]
            .as_str()
            .is_some_and(|id| id.ends_with(".global")),
        "{info}"
    );
    let workers = info["schedulers"].as_array().cloned().unwrap_or_default();
    assert!(!workers.is_empty(), "{info}");
    assert!(workers.iter().all(|w| w["status"] == "Started"), "{info}");
    let (s, b) = call(&agent, "GET", "/v1/agent/schedulers/config", "", None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        json_of(&b)["num_schedulers"].as_u64(),
        Some(workers.len() as u64)
    );
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/agent/schedulers/config",
        "",
        Some(&json!({"num_schedulers": 1, "enabled_schedulers": ["batch"]})),
    );
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("_core"), "{b}");
    // Only `_core` enabled: nothing is scheduled...
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/agent/schedulers/config",
        "",
        Some(&json!({"num_schedulers": 1, "enabled_schedulers": ["_core"]})),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(json_of(&b)["num_schedulers"], 1);
    let (_, b) = call(&agent, "GET", "/v1/agent/schedulers", "", None);
    assert_eq!(json_of(&b)["schedulers"].as_array().map(Vec::len), Some(1));
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&batch_job("later")));
    assert_eq!(s, 200, "{b}");
    let eval_id = json_of(&b)["EvalID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let eval_status = || {
        let (_, b) = call(
            &agent,
            "GET",
            &format!("/v1/evaluation/{eval_id}"),
            "",
            None,
        );
        json_of(&b)["Status"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    // (Two more rounds of the eval broker's loop would have scheduled it.)
    for _ in 0..3 {
        let (_, b) = call(&agent, "GET", "/v1/agent/schedulers", "", None);
        assert_eq!(
            json_of(&b)["schedulers"][0]["workload_status"],
            "WaitingToDequeue"
        );
    }
    assert_eq!(eval_status(), "pending");
    // ...until batch is enabled again.
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/agent/schedulers/config",
        "",
        Some(
            &json!({"num_schedulers": 2, "enabled_schedulers": ["_core", "batch", "service", "system", "sysbatch"]}),
        ),
    );
    assert_eq!(s, 200, "{b}");
    wait_for(
        "the evaluation scheduled once batch is enabled",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || eval_status() == "complete",
    );
}
