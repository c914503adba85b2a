//! The agent as users run it: a real `caravan agent` process on loopback with free ports, driven through
//! the HTTP API and the CLI. Every wait has a deadline and polls a condition; nothing sleeps blindly.

mod common;

use common::{bin, header, http, temp_dir, Agent, START_DEADLINE};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../jobspec/tests/fixtures/jobs")
}

/// The CLI flags a fixture needs (its var file and -var/env lines), as the jobspec harness reads them.
fn fixture_flags(path: &Path) -> (Vec<String>, Vec<(String, String)>) {
    let stem = path
        .file_name()
        .unwrap()
        .to_string_lossy()
        .replace(".nomad.hcl", "");
    let mut flags = Vec::new();
    let mut env = Vec::new();
    let var_file = path.with_file_name(format!("{stem}.vars.hcl"));
    if var_file.exists() {
        flags.push(format!("-var-file={}", var_file.display()));
    }
    if let Ok(args) = std::fs::read_to_string(path.with_file_name(format!("{stem}.args"))) {
        for line in args
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            match line.split_once(' ') {
                Some(("var", kv)) => flags.push(format!("-var={kv}")),
                Some(("env", kv)) => {
                    let (k, v) = kv.split_once('=').unwrap();
                    env.push((k.to_string(), v.to_string()));
                }
                _ => {}
            }
        }
    }
    (flags, env)
}

fn minimal_job(id: &str, command: &str) -> Value {
    json!({"Job": {"ID": id, "Type": "batch", "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "t", "Driver": "raw_exec", "Config": {"command": command}}]}]}})
}

#[test]
fn job_run_registers_every_fixture_and_inspect_returns_it() {
    let dir = temp_dir("fixtures");
    // A server without a client: nothing here needs tasks to run (and none may outlive the test).
    let data = dir.join("data").display().to_string();
    let global = Agent::start(&dir, &["-server", "-data-dir", &data]);
    // A job that names a region is sent there (as Nomad's CLI does; a region no server serves
    // is "No path to region"): fixtures of other regions go to a server of their own region.
    let mut regions: std::collections::BTreeMap<String, Agent> = Default::default();
    regions.insert("global".into(), global);
    let mut count = 0;
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".nomad.hcl"))
        .collect();
    paths.sort();
    for path in &paths {
        let expected: Value = serde_json::from_str(
            &std::fs::read_to_string(
                path.with_file_name(
                    path.file_name()
                        .unwrap()
                        .to_string_lossy()
                        .replace(".nomad.hcl", ".json"),
                ),
            )
            .unwrap(),
        )
        .unwrap();
        let region = expected["Job"]["Region"]
            .as_str()
            .unwrap_or("global")
            .to_string();
        if !expected["Job"]["Multiregion"].is_null() {
            // Its regions are federated clusters of their own (gossip.rs runs one); here it is
            // refused, naming the region this cluster does not know.
            let out = Command::new(bin())
                .current_dir(fixtures_dir())
                .env("NOMAD_ADDR", &regions["global"].http)
                .args(["job", "run", "-detach"])
                .arg(path)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{err}");
            assert!(err.contains("is not a region this cluster knows"), "{err}");
            count += 1;
            continue;
        }
        let agent = regions.entry(region.clone()).or_insert_with(|| {
            let rdir = temp_dir(&format!("fixtures-{region}"));
            let cfg = rdir.join("region.hcl");
            std::fs::write(&cfg, format!("region = \"{region}\"\n")).unwrap();
            let data = rdir.join("data").display().to_string();
            Agent::start(
                &rdir,
                &[
                    "-server",
                    "-data-dir",
                    &data,
                    "-config",
                    &cfg.display().to_string(),
                ],
            )
        });
        let id = expected["Job"]["ID"].as_str().unwrap().to_string();
        let ns = expected["Job"]["Namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        // Jobs go only into namespaces and node pools that exist.
        if ns != "default" {
            let (status, body) = agent.put(&format!("/v1/namespace/{ns}"), &serde_json::json!({}));
            assert_eq!(status, 200, "creating namespace {ns}: {body}");
        }
        if let Some(pool) = expected["Job"]["NodePool"]
            .as_str()
            .filter(|p| !["all", "default"].contains(p))
        {
            let (status, body) = agent.put("/v1/node/pools", &serde_json::json!({"Name": pool}));
            assert_eq!(status, 200, "creating node pool {pool}: {body}");
        }
        let (flags, env) = fixture_flags(path);
        let mut cmd = Command::new(bin());
        cmd.current_dir(fixtures_dir())
            .env("NOMAD_ADDR", &agent.http)
            .args(["job", "run", "-detach"])
            .args(&flags)
            .arg(path);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "job run {}: {}{}",
            path.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let out = agent.caravan(&["job", "inspect", "-namespace", &ns, &id]);
        assert!(
            out.status.success(),
            "job inspect {id}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let inspected: Value = serde_json::from_slice(&out.stdout).expect("inspect prints JSON");
        assert_eq!(inspected["Job"]["ID"], id.as_str());
        assert_eq!(inspected["Job"]["Version"], 0, "{id}");
        assert_eq!(
            inspected["Job"]["TaskGroups"].as_array().map(Vec::len),
            expected["Job"]["TaskGroups"].as_array().map(Vec::len),
            "{id}"
        );
        count += 1;
    }
    assert!(count >= 30, "only {count} fixtures registered");
}

#[test]
fn a_changed_job_is_a_new_version_and_an_unchanged_one_only_a_new_evaluation() {
    let dir = temp_dir("versions");
    // A server without a client: nothing here needs tasks to run (and none may outlive the test).
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data]);
    let (status, body) = agent.put("/v1/jobs", &minimal_job("v", "/bin/true"));
    assert_eq!(status, 200, "{body}");
    let first: Value = serde_json::from_str(&body).unwrap();
    let (status, body) = agent.put("/v1/jobs", &minimal_job("v", "/bin/true"));
    assert_eq!(status, 200, "{body}");
    let again: Value = serde_json::from_str(&body).unwrap();
    assert_ne!(
        first["EvalID"], again["EvalID"],
        "re-registering makes a new evaluation"
    );
    assert_eq!(
        first["JobModifyIndex"], again["JobModifyIndex"],
        "an unchanged job keeps its modify index"
    );
    assert_eq!(agent.get("/v1/job/v").unwrap()["Version"], 0);
    let (status, _) = agent.put("/v1/job/v", &minimal_job("v", "/bin/false"));
    assert_eq!(status, 200);
    assert_eq!(agent.get("/v1/job/v").unwrap()["Version"], 1);
    let versions = agent.get("/v1/job/v/versions").unwrap();
    let numbers: Vec<i64> = versions["Versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["Version"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, vec![1, 0]);
    // Three registrations, three register evaluations (the scheduler may add its own follow-ups).
    let evals = agent.get("/v1/job/v/evaluations").unwrap();
    let registers = evals
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["TriggeredBy"] == "job-register")
        .count();
    assert_eq!(registers, 3, "{evals}");
    // Stopping makes a new version with Stop set; purging removes the job.
    let (status, _, _) = agent.request("DELETE", "/v1/job/v", None).unwrap();
    assert_eq!(status, 200);
    let stopped = agent.get("/v1/job/v").unwrap();
    assert_eq!(
        (stopped["Stop"].as_bool(), stopped["Version"].as_i64()),
        (Some(true), Some(2))
    );
    let (status, _, _) = agent
        .request("DELETE", "/v1/job/v?purge=true", None)
        .unwrap();
    assert_eq!(status, 200);
    let (status, body, _) = agent.request("GET", "/v1/job/v", None).unwrap();
    assert_eq!((status, body.as_str()), (404, "job not found"));
}

#[test]
fn a_blocking_list_returns_when_a_job_is_registered() {
    let dir = temp_dir("blocking");
    // A server without a client: nothing here needs tasks to run (and none may outlive the test).
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data]);
    let (_, _, headers) = agent.request("GET", "/v1/jobs", None).unwrap();
    let index: u64 = header(&headers, "x-nomad-index").unwrap().parse().unwrap();
    let url = format!("{}/v1/jobs?index={index}&wait=300s", agent.http);
    let started = Instant::now();
    let waiter = std::thread::spawn(move || http("GET", &url, None).unwrap());
    // Only register once the query is parked on the server: poll the waiter thread, not the clock.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !waiter.is_finished(),
        "the blocking query returned before anything changed"
    );
    let (status, _) = agent.put("/v1/jobs", &minimal_job("blocker", "/bin/true"));
    assert_eq!(status, 200);
    let (status, body, headers) = waiter.join().unwrap();
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(250),
        "it returned at the wait timeout, not on the change"
    );
    assert!(body.contains("\"blocker\""), "{body}");
    let new_index: u64 = header(&headers, "x-nomad-index").unwrap().parse().unwrap();
    assert!(new_index > index);
}

#[test]
fn job_json_round_trips_and_parse_canonicalizes_on_request() {
    let dir = temp_dir("json");
    // A server without a client: nothing here needs tasks to run (and none may outlive the test).
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data]);
    let hcl = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/example.nomad.hcl"),
    )
    .unwrap();
    let (status, raw) = agent.put(
        "/v1/jobs/parse",
        &json!({"JobHCL": hcl, "Canonicalize": false}),
    );
    assert_eq!(status, 200, "{raw}");
    let parsed: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(parsed["ID"], "example");
    assert!(
        parsed.get("Priority").is_none() || parsed["Priority"].is_null(),
        "not canonicalized: no defaults filled"
    );
    let (status, canon) = agent.put(
        "/v1/jobs/parse",
        &json!({"JobHCL": hcl, "Canonicalize": true}),
    );
    assert_eq!(status, 200);
    let canon: Value = serde_json::from_str(&canon).unwrap();
    assert_eq!(
        (
            canon["Priority"].as_i64(),
            canon["Region"].as_str(),
            canon["Namespace"].as_str(),
            canon["Type"].as_str()
        ),
        (Some(50), Some("global"), Some("default"), Some("service"))
    );
    let (status, empty) = agent.put("/v1/jobs/parse", &json!({"JobHCL": ""}));
    assert_eq!((status, empty.as_str()), (400, "Job spec is empty"));
    let (status, bad) = agent.put("/v1/jobs/parse", &json!({"JobHCL": "job \"x\" {"}));
    assert_eq!(status, 400);
    assert!(
        bad.starts_with("Failed to parse job: input.hcl:1:"),
        "{bad}"
    );

    let (status, _) = agent.put("/v1/jobs", &json!({"Job": canon}));
    assert_eq!(status, 200);
    let (_, text, _) = agent.request("GET", "/v1/job/example", None).unwrap();
    let job: model::Job = model::json::from_str(&text).unwrap();
    assert_eq!(
        serde_json::to_string(&job).unwrap(),
        text,
        "GET /v1/job/:id decodes and encodes to the same JSON"
    );
}

#[test]
fn errors_are_plain_text_with_nomads_codes() {
    let dir = temp_dir("errors");
    // A server without a client, so the node and allocation lists are empty.
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data]);
    let (status, body, headers) = agent.request("GET", "/v1/job/nope", None).unwrap();
    assert_eq!((status, body.as_str()), (404, "job not found"));
    assert!(header(&headers, "content-type")
        .unwrap()
        .starts_with("text/plain"));
    let (status, body) = agent.put(
        "/v1/jobs",
        &json!({"Job": {"ID": "bad", "Priority": 500, "TaskGroups": []}}),
    );
    assert_eq!(status, 400);
    assert!(
        body.contains("priority must be between 1 and 100"),
        "{body}"
    );
    let (status, body) = agent.put("/v1/job/other", &minimal_job("bad2", "/bin/true"));
    assert_eq!((status, body.as_str()), (400, "Job ID does not match name"));
    let (status, _, _) = agent.request("GET", "/v1/no/such/path", None).unwrap();
    assert_eq!(status, 404);
    assert_eq!(agent.get("/v1/nodes").unwrap(), json!([]));
    assert_eq!(agent.get("/v1/allocations").unwrap(), json!([]));
    let (status, body, _) = agent.request("GET", "/v1/node/f00d", None).unwrap();
    assert_eq!((status, body.as_str()), (404, "node not found"));
    let (status, body, _) = agent.request("GET", "/v1/allocation/f00d", None).unwrap();
    assert_eq!((status, body.as_str()), (404, "alloc not found"));
    let (status, body, _) = agent
        .request("PUT", "/v1/node/f00d/drain", Some(&json!({})))
        .unwrap();
    assert_eq!(status, 404, "{body}");
    let (status, body, _) = agent
        .request("PUT", "/v1/node/f00d/purge", Some(&json!({})))
        .unwrap();
    assert_eq!(status, 404, "{body}");
    let (status, body, _) = agent
        .request("PUT", "/v1/node/f00d/meta", Some(&json!({})))
        .unwrap();
    assert_eq!(status, 501);
    assert!(body.contains("not supported yet"), "{body}");
}

#[test]
fn a_killed_server_keeps_every_acknowledged_job() {
    let dir = temp_dir("sigkill");
    let data = dir.join("data");
    let data_arg = data.display().to_string();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data_arg]);
    let base = agent.http.clone();
    let (tx, rx) = mpsc::channel::<(String, i64)>();
    // Register jobs as fast as the server takes them; every 200 is an acknowledged write.
    let writer = std::thread::spawn(move || {
        for i in 0.. {
            let id = format!("job-{i}");
            let body = minimal_job(&id, &format!("/bin/echo {i}"));
            match http("PUT", &format!("{base}/v1/jobs"), Some(body.to_string())) {
                Ok((200, text, _)) => {
                    let v: Value = serde_json::from_str(&text).unwrap();
                    if tx
                        .send((id, v["JobModifyIndex"].as_i64().unwrap_or(0)))
                        .is_err()
                    {
                        return;
                    }
                }
                _ => return,
            }
        }
    });
    let mut acked = Vec::new();
    while acked.len() < 40 {
        acked.push(
            rx.recv_timeout(START_DEADLINE)
                .expect("registrations are acknowledged"),
        );
    }
    agent.kill();
    acked.extend(rx.try_iter());
    let _ = writer.join();
    let agent = Agent::start(&dir, &["-server", "-data-dir", &data_arg]);
    for (id, modify_index) in &acked {
        let job = agent
            .get(&format!("/v1/job/{id}"))
            .unwrap_or_else(|e| panic!("acknowledged job {id} is gone after SIGKILL: {e}"));
        assert_eq!(job["JobModifyIndex"].as_i64(), Some(*modify_index), "{id}");
    }
}

#[test]
fn a_dev_agent_runs_a_raw_exec_job_and_stop_ends_it() {
    let dir = temp_dir("run");
    let agent = Agent::start(&dir, &["-dev"]);
    agent.wait_until("the dev client registered", || {
        agent
            .get("/v1/nodes")
            .ok()
            .and_then(|v| v.as_array().map(|a| a.len()))
            == Some(1)
    });
    let marker = dir.join("marker");
    let job = json!({"Job": {"ID": "echo", "Type": "service", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", format!("echo hello-from-${{NOMAD_TASK_NAME}}; touch {}; exec sleep 600", marker.display())]},
        "Resources": {"CPU": 100, "MemoryMB": 32}
    }]}]}});
    let (status, body) = agent.put("/v1/jobs", &job);
    assert_eq!(status, 200, "{body}");
    agent.wait_until("the allocation runs", || {
        agent.get("/v1/job/echo/allocations").ok().is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.iter().any(|x| x["ClientStatus"] == "running"))
        })
    });
    agent.wait_until("the task ran its command", || marker.exists());
    let allocs = agent.get("/v1/job/echo/allocations").unwrap();
    let alloc_id = allocs[0]["ID"].as_str().unwrap().to_string();
    let full = agent.get(&format!("/v1/allocation/{alloc_id}")).unwrap();
    let events: Vec<&str> = full["TaskStates"]["t"]["Events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["Type"].as_str())
        .collect();
    assert!(events.contains(&"Started"), "{events:?}");

    let out = agent.caravan(&["job", "stop", "echo"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    agent.wait_until("the allocation is stopped and complete", || {
        agent
            .get(&format!("/v1/allocation/{alloc_id}"))
            .ok()
            .is_some_and(|a| a["DesiredStatus"] == "stop" && a["ClientStatus"] == "complete")
    });
}
