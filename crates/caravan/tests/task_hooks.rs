//! Task prestart hooks on a real `caravan agent -dev` running raw_exec batch jobs: templates
//! (`env`, `file`, pipes, `env = true`), artifacts from a tiny HTTP server (a tar.gz unpacked,
//! checksums verified) and from a local path inside the allocation directory (one an earlier
//! artifact downloaded; a path outside it fails the task), a dispatched job's payload file, and
//! the events of a wrong checksum and of a template function that needs Consul; templates rendered again
//! while the task runs (`change_mode` signal, restart and script). Every wait has a deadline.

mod common;

use common::serve;

use common::{temp_dir, Agent};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::Path;

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A one-task raw_exec batch job that fails at once instead of restarting or rescheduling.
fn batch(id: &str, script: &str, task: Value, group: Value) -> Value {
    let mut t = json!({
        "Name": "t", "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", script]},
        "Resources": {"CPU": 100, "MemoryMB": 32}
    });
    for (k, v) in task.as_object().into_iter().flatten() {
        t[k] = v.clone();
    }
    let mut g = json!({
        "Name": "g", "Tasks": [t],
        "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
        "ReschedulePolicy": {"Attempts": 0, "Unlimited": false}
    });
    for (k, v) in group.as_object().into_iter().flatten() {
        g[k] = v.clone();
    }
    json!({"Job": {"ID": id, "Type": "batch", "TaskGroups": [g]}})
}

/// Waits until `job` has an allocation in a terminal client status; returns it.
fn finished_alloc(agent: &Agent, job: &str) -> Value {
    let mut alloc = Value::Null;
    agent.wait_until(&format!("an allocation of {job} to finish"), || {
        let Ok(list) = agent.get(&format!("/v1/job/{job}/allocations")) else {
            return false;
        };
        let done = list.as_array().and_then(|a| {
            a.iter()
                .find(|x| matches!(x["ClientStatus"].as_str(), Some("complete" | "failed")))
                .cloned()
        });
        if let Some(a) = done {
            alloc = agent
                .get(&format!(
                    "/v1/allocation/{}",
                    a["ID"].as_str().unwrap_or_default()
                ))
                .unwrap_or(a);
        }
        !alloc.is_null()
    });
    alloc
}

fn events(alloc: &Value) -> Vec<(String, String)> {
    alloc["TaskStates"]["t"]["Events"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            (
                e["Type"].as_str().unwrap_or_default().to_string(),
                e["DisplayMessage"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn register(agent: &Agent, job: &Value) {
    let (status, body) = agent.raw("PUT", "/v1/jobs", Some(job));
    assert_eq!(status, 200, "{body}");
}

fn stop(agent: &Agent, job: &str) {
    let (status, body) = agent.raw("DELETE", &format!("/v1/job/{job}?purge=true"), None);
    assert_eq!(status, 200, "{body}");
}

fn make_tar_gz(dir: &Path) -> Vec<u8> {
    let src = dir.join("app-src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("data.txt"), "from-the-tarball\n").unwrap();
    let out = dir.join("app.tar.gz");
    let status = std::process::Command::new("tar")
        .arg("czf")
        .arg(&out)
        .arg("-C")
        .arg(&src)
        .arg("data.txt")
        .status()
        .expect("tar runs");
    assert!(status.success());
    std::fs::read(out).unwrap()
}

#[test]
fn prestart_hooks_write_templates_artifacts_and_payloads() {
    let dir = temp_dir("task-hooks");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the dev client is ready", || {
        agent.get("/v1/nodes").ok().is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.len() == 1 && a[0]["Status"] == "ready")
        })
    });
    // Outside the allocation directory: a local artifact may not read it.
    let outside = dir.join("input.txt");
    std::fs::write(&outside, "local-artifact-input\n").unwrap();
    let input_sum = sha256_hex(b"local-artifact-input\n");
    let input_base = serve(b"local-artifact-input\n".to_vec());
    let tgz = make_tar_gz(&dir);
    let tgz_sum = sha256_hex(&tgz);
    let base = serve(tgz);

    templates_and_artifacts(&agent, &input_base, &input_sum, &base, &tgz_sum);
    a_wrong_checksum_fails_the_task(&agent, &input_base);
    a_local_artifact_outside_the_allocation_fails_the_task(&agent, &outside);
    a_consul_function_fails_the_task(&agent);
    a_dispatched_payload_is_written(&agent);
    changed_templates_signal_and_restart(&agent, &dir.join("data"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn templates_and_artifacts(
    agent: &Agent,
    input_base: &str,
    input_sum: &str,
    base: &str,
    sum: &str,
) {
    let script = "cat local/out.txt; echo \"env=$FROM_TEMPLATE\"; cat local/input.txt";
    // The local artifact reads a file inside the allocation directory: the one the first
    // artifact downloaded (relative sources start at the task directory, as go-getter's Pwd).
    let task = json!({
        "Artifacts": [
            {"GetterSource": format!("{input_base}/input.txt"), "RelativeDest": "local/dl"},
            {"GetterSource": "local/dl/input.txt",
             "GetterOptions": {"checksum": format!("sha256:{input_sum}")}},
            {"GetterSource": format!("{base}/dl/app.tar.gz"), "RelativeDest": "local/app",
             "GetterOptions": {"checksum": format!("sha256:{sum}")}}
        ],
        "Templates": [
            {"EmbeddedTmpl": "task={{ env \"NOMAD_TASK_NAME\" | toUpper }} tar={{ file \"local/app/data.txt\" | trimSpace }}\n",
             "DestPath": "local/out.txt"},
            {"EmbeddedTmpl": "FROM_TEMPLATE={{ env \"NOMAD_JOB_ID\" }}-{{ \"rendered\" | base64Encode | base64Decode }}\n",
             "DestPath": "secrets/vars.env", "Envvars": true}
        ]
    });
    register(agent, &batch("hooks", script, task, json!({})));
    let alloc = finished_alloc(agent, "hooks");
    let id = alloc["ID"].as_str().unwrap_or_default().to_string();
    assert_eq!(alloc["ClientStatus"], "complete", "{:?}", events(&alloc));
    let evs = events(&alloc);
    assert!(
        evs.iter()
            .any(|(t, m)| t == "Downloading Artifacts" && m == "Client is downloading artifacts"),
        "{evs:?}"
    );
    let (code, out, err) = agent.run(&["alloc", "logs", &id, "t"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "task=T tar=from-the-tarball\nenv=hooks-rendered\nlocal-artifact-input\n"
    );
    stop(agent, "hooks");
}

fn a_wrong_checksum_fails_the_task(agent: &Agent, input_base: &str) {
    let zeros = "0".repeat(64);
    let task = json!({"Artifacts": [{"GetterSource": format!("{input_base}/input.txt"),
        "GetterOptions": {"checksum": format!("sha256:{zeros}")}}]});
    register(agent, &batch("badsum", "echo never", task, json!({})));
    let alloc = finished_alloc(agent, "badsum");
    assert_eq!(alloc["ClientStatus"], "failed");
    let evs = events(&alloc);
    let failed = evs
        .iter()
        .find(|(t, _)| t == "Failed Artifact Download")
        .unwrap_or_else(|| panic!("no Failed Artifact Download event: {evs:?}"));
    assert!(
        failed
            .1
            .starts_with("Failed to download artifacts: artifact ")
            && failed.1.contains(&format!(
                "checksum mismatch: expected sha256:{zeros}, got sha256:"
            )),
        "{failed:?}"
    );
    assert!(!evs.iter().any(|(t, _)| t == "Started"), "{evs:?}");
    stop(agent, "badsum");
}

/// A local source outside the allocation directory (a host file) fails the task naming it.
fn a_local_artifact_outside_the_allocation_fails_the_task(agent: &Agent, outside: &Path) {
    let source = outside.display().to_string();
    let task = json!({"Artifacts": [{"GetterSource": source}]});
    register(agent, &batch("outside", "echo never", task, json!({})));
    let alloc = finished_alloc(agent, "outside");
    assert_eq!(alloc["ClientStatus"], "failed");
    let evs = events(&alloc);
    let failed = evs
        .iter()
        .find(|(t, _)| t == "Failed Artifact Download")
        .unwrap_or_else(|| panic!("no Failed Artifact Download event: {evs:?}"));
    assert!(
        failed.1.starts_with(&format!(
            "Failed to download artifacts: artifact {source:?}: local artifacts must be inside the allocation directory"
        )),
        "{failed:?}"
    );
    assert!(!evs.iter().any(|(t, _)| t == "Started"), "{evs:?}");
    stop(agent, "outside");
}

fn a_consul_function_fails_the_task(agent: &Agent) {
    let task = json!({"Templates": [{"EmbeddedTmpl": "{{ key \"app/config\" }}", "DestPath": "local/conf"}]});
    register(agent, &batch("needsconsul", "echo never", task, json!({})));
    let alloc = finished_alloc(agent, "needsconsul");
    assert_eq!(alloc["ClientStatus"], "failed");
    let evs = events(&alloc);
    let failed = evs
        .iter()
        .find(|(t, _)| t == "Template")
        .unwrap_or_else(|| panic!("no Template event: {evs:?}"));
    assert!(
        failed.1.starts_with("Template failed: template \"local/conf\": line 1: function \"key\" is not supported yet (needs Consul"),
        "{failed:?}"
    );
    stop(agent, "needsconsul");
}

fn a_dispatched_payload_is_written(agent: &Agent) {
    let task = json!({"DispatchPayload": {"File": "input.txt"}});
    let mut job = batch("param", "cat local/input.txt", task, json!({}));
    job["Job"]["ParameterizedJob"] = json!({"Payload": "required"});
    register(agent, &job);
    let (status, text) = agent.raw(
        "POST",
        "/v1/job/param/dispatch",
        Some(&json!({"Payload": "cGF5bG9hZC1ieXRlcw=="})),
    );
    assert_eq!(status, 200, "{text}");
    let resp: Value = serde_json::from_str(&text).expect("JSON");
    let child = resp["DispatchedJobID"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let alloc = finished_alloc(agent, &child);
    assert_eq!(alloc["ClientStatus"], "complete", "{:?}", events(&alloc));
    let id = alloc["ID"].as_str().unwrap_or_default().to_string();
    let (code, out, err) = agent.run(&["alloc", "logs", &id, "t"]);
    assert_eq!((code, out.as_str()), (0, "payload-bytes"), "{err}");
    stop(agent, &child);
    stop(agent, "param");
}

/// A long-running service task whose template reads `local/input` (written by a `noop`
/// template first); returns its task JSON.
fn watched_task(name: &str, script: &str, template: Value) -> Value {
    json!({
        "Name": name, "Driver": "raw_exec",
        "Config": {"command": "/bin/sh", "args": ["-c", script]},
        "Resources": {"CPU": 50, "MemoryMB": 32},
        "KillTimeout": 1_000_000_000_i64,
        "Templates": [
            {"EmbeddedTmpl": "one", "DestPath": "local/input", "ChangeMode": "noop"},
            template
        ]
    })
}

fn task_events(alloc: &Value, task: &str) -> Vec<(String, String)> {
    let mut a = alloc.clone();
    a["TaskStates"]["t"] = alloc["TaskStates"][task].clone();
    events(&a)
}

/// A file a template reads changes under a running task: the `signal` template's task gets
/// SIGHUP (and reads the new file), the `restart` one is restarted with the new `env = true`
/// variable, the `script` one runs its change script inside the task; with Nomad's events.
fn changed_templates_signal_and_restart(agent: &Agent, data: &Path) {
    let sig = watched_task(
        "sig",
        "trap 'echo \"hup $(cat local/sig.txt)\"' HUP; echo started; while :; do sleep 0.1; done",
        json!({"EmbeddedTmpl": "{{ file \"local/input\" }}", "DestPath": "local/sig.txt",
               "ChangeMode": "signal", "ChangeSignal": "SIGHUP", "Splay": 0}),
    );
    let rs = watched_task(
        "rs",
        "echo \"value=$VALUE\"; while :; do sleep 0.1; done",
        json!({"EmbeddedTmpl": "VALUE={{ file \"local/input\" }}\n", "DestPath": "local/vars.env",
               "Envvars": true, "ChangeMode": "restart", "Splay": 0}),
    );
    let sc = watched_task(
        "sc",
        "while :; do sleep 0.1; done",
        json!({"EmbeddedTmpl": "{{ file \"local/input\" }}", "DestPath": "local/sc.txt",
               "ChangeMode": "script", "Splay": 0,
               "ChangeScript": {"Command": "/bin/sh",
                                "Args": ["-c", "cp local/sc.txt local/reloaded"],
                                "Timeout": 5_000_000_000_i64, "FailOnError": true}}),
    );
    let job = json!({"Job": {"ID": "watched", "Type": "service", "TaskGroups": [{
        "Name": "g", "Count": 1, "Tasks": [sig, rs, sc]
    }]}});
    register(agent, &job);
    let mut id = String::new();
    agent.wait_until("both watched tasks run", || {
        let Ok(list) = agent.get("/v1/job/watched/allocations") else {
            return false;
        };
        let Some(a) = list.as_array().and_then(|l| l.first()).cloned() else {
            return false;
        };
        id = a["ID"].as_str().unwrap_or_default().to_string();
        ["sig", "rs", "sc"]
            .iter()
            .all(|t| a["TaskStates"][t]["State"] == "running")
    });
    let logs = |task: &str| agent.run(&["alloc", "logs", &id, task]).1;
    agent.wait_until("both tasks printed their start", || {
        logs("sig").contains("started") && logs("rs").contains("value=one")
    });
    let alloc_dir = ["client/alloc", "alloc"]
        .iter()
        .map(|d| data.join(d).join(&id))
        .find(|p| p.is_dir())
        .expect("the allocation's directory under the data dir");
    for task in ["sig", "rs", "sc"] {
        std::fs::write(alloc_dir.join(task).join("local/input"), "two").unwrap();
    }

    let mut alloc = Value::Null;
    agent.wait_until(
        "the signal task hears SIGHUP and reads the new file",
        || {
            alloc = agent
                .get(&format!("/v1/allocation/{id}"))
                .unwrap_or(Value::Null);
            task_events(&alloc, "sig")
                .iter()
                .any(|(t, m)| t == "Signaling" && m == "Template re-rendered")
                && logs("sig").contains("hup two")
        },
    );
    assert_eq!(
        alloc["TaskStates"]["sig"]["Restarts"], 0,
        "a signal is no restart"
    );
    agent.wait_until(
        "the restart task starts again with the new variable",
        || {
            alloc = agent
                .get(&format!("/v1/allocation/{id}"))
                .unwrap_or(Value::Null);
            alloc["TaskStates"]["rs"]["Restarts"] == 1
                && alloc["TaskStates"]["rs"]["State"] == "running"
                && logs("rs").contains("value=two")
        },
    );
    let evs = task_events(&alloc, "rs");
    assert!(
        evs.iter().any(|(t, m)| t == "Restart Signaled"
            && m == "Template with change_mode restart re-rendered"),
        "{evs:?}"
    );
    agent.wait_until("the script task's change script ran in it", || {
        alloc = agent
            .get(&format!("/v1/allocation/{id}"))
            .unwrap_or(Value::Null);
        task_events(&alloc, "sc").iter().any(|(t, m)| {
            t == "Task hook message" && m.starts_with("Template successfully ran script /bin/sh")
        })
    });
    assert_eq!(
        std::fs::read_to_string(alloc_dir.join("sc/local/reloaded")).unwrap(),
        "two"
    );
    assert_eq!(alloc["TaskStates"]["sc"]["Restarts"], 0);
    assert_eq!(alloc["ClientStatus"], "running");
    assert_eq!(
        std::fs::read_to_string(alloc_dir.join("rs/local/input")).unwrap(),
        "two",
        "the noop template's unchanged output is not written over the new file"
    );
    // raw_exec tasks outlive a killed agent: they must be gone before the test drops it.
    let (status, body) = agent.raw("DELETE", "/v1/job/watched", None);
    assert_eq!(status, 200, "{body}");
    agent.wait_until("the watched tasks are stopped", || {
        agent
            .get(&format!("/v1/allocation/{id}"))
            .is_ok_and(|a| a["ClientStatus"] == "complete")
    });
    stop(agent, "watched");
}
