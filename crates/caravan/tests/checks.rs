//! Health checks of `provider = "nomad"` services against a real dev agent: a raw_exec task
//! serves HTTP (Python's `http.server`, which the test suite's set-up installs), its http, tcp
//! and script checks turn passing and show at `/v1/client/allocation/:id/checks` and in `caravan alloc
//! checks`; a failing check with `check_restart` restarts its task; and a deployment marks an
//! allocation healthy only once its checks pass (unless `health_check = "task_states"`).

mod common;

use common::*;
use serde_json::Value;

/// A group whose task serves `local/` over HTTP on the `http` port; `$PRE` runs first.
fn job(name: &str, service_and_update: &str, pre: &str) -> String {
    format!(
        r#"
job "{name}" {{
  group "web" {{
    network {{
      port "http" {{}}
    }}
    restart {{
      attempts = 10
      delay    = "1s"
      mode     = "delay"
    }}
{service_and_update}
    task "server" {{
      driver = "raw_exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", "{pre} exec python3 -m http.server $NOMAD_PORT_http --bind $NOMAD_IP_http --directory local"]
      }}
    }}
  }}
}}
"#
    )
}

fn run_job(agent: &Agent, dir: &std::path::Path, name: &str, hcl: &str) -> (i32, String) {
    let file = dir.join(format!("{name}.nomad.hcl"));
    std::fs::write(&file, hcl).unwrap();
    let (code, out, err) = agent.run(&["job", "run", "-detach", &file.display().to_string()]);
    (code, format!("{out}{err}"))
}

fn first_alloc(agent: &Agent, job: &str) -> Option<Value> {
    agent
        .get(&format!("/v1/job/{job}/allocations"))
        .ok()?
        .as_array()?
        .first()
        .cloned()
}

fn checks(agent: &Agent, alloc_id: &str) -> Vec<Value> {
    agent
        .get(&format!("/v1/client/allocation/{alloc_id}/checks"))
        .ok()
        .and_then(|v| v.as_object().map(|m| m.values().cloned().collect()))
        .unwrap_or_default()
}

#[test]
fn http_tcp_and_script_checks_pass_and_show_through_the_api_and_the_cli() {
    let agent = mock_dev_agent("checks-pass");
    let dir = temp_dir("checks-pass-jobs");
    let service = r#"
    service {
      name     = "web"
      provider = "nomad"
      port     = "http"
      check {
        name     = "alive"
        type     = "http"
        path     = "/health"
        interval = "1s"
        timeout  = "2s"
      }
      check {
        name     = "listening"
        type     = "tcp"
        interval = "1s"
        timeout  = "2s"
        on_update = "ignore"
      }
      check {
        name     = "file"
        type     = "script"
        task     = "server"
        command  = "/bin/sh"
        args     = ["-c", "cat local/health"]
        interval = "1s"
        timeout  = "5s"
      }
    }
"#;
    let (code, out) = run_job(
        &agent,
        &dir,
        "web",
        &job("web", service, "echo ok > local/health;"),
    );
    assert_eq!(code, 0, "{out}");
    // Checks re-run every second: a run that fails under load could replace a result between
    // two reads, so the details are asserted on the read where all three passed.
    let mut alloc_id = String::new();
    let mut all = Vec::new();
    agent.wait_until("the three checks pass", || {
        let Some(a) = first_alloc(&agent, "web") else {
            return false;
        };
        alloc_id = a["ID"].as_str().unwrap_or_default().to_string();
        all = checks(&agent, &alloc_id);
        all.len() == 3 && all.iter().all(|c| c["Status"] == "success")
    });
    let http = all.iter().find(|c| c["Check"] == "alive").unwrap();
    assert_eq!(http["StatusCode"], 200, "{http}");
    assert_eq!(http["Output"], "nomad: http ok");
    assert_eq!(http["Mode"], "healthiness");
    assert_eq!(http["Service"], "web");
    assert_eq!(http["Group"], "web.web[0]");
    assert!(
        http.get("Task").is_none(),
        "a group service's check: {http}"
    );
    assert_eq!(http["ID"].as_str().map(str::len), Some(64));
    let tcp = all.iter().find(|c| c["Check"] == "listening").unwrap();
    assert_eq!(tcp["Output"], "nomad: tcp ok");
    assert_eq!(tcp["Mode"], "readiness");
    let script = all.iter().find(|c| c["Check"] == "file").unwrap();
    assert_eq!(
        script["Output"].as_str().map(str::trim),
        Some("ok"),
        "{script}"
    );

    // The service is registered with the port the check reached.
    let regs = agent.get("/v1/service/web").unwrap();
    let alloc = agent.get(&format!("/v1/allocation/{alloc_id}")).unwrap();
    let port = &alloc["AllocatedResources"]["Shared"]["Ports"][0];
    assert_eq!(regs[0]["Port"], port["Value"], "{regs}");
    assert_eq!(regs[0]["Address"], port["HostIP"]);

    // The CLI.
    let (code, out, err) = agent.run(&["alloc", "checks", &alloc_id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("Status of 3 Nomad Service Checks"), "{out}");
    assert!(
        out.contains("nomad: http ok") && out.contains("(group)"),
        "{out}"
    );
    let (code, out, err) = agent.run(&["alloc", "checks", "-json", &alloc_id]);
    assert_eq!(code, 0, "{err}");
    let parsed: Value = serde_json::from_str(&out).expect("alloc checks -json is JSON");
    assert_eq!(parsed.as_object().map(serde_json::Map::len), Some(3));
    let (code, out, err) = agent.run(&["alloc", "status", &alloc_id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Nomad Service Checks:"), "{out}");

    // Stopping the job stops the checks and forgets their results.
    let (code, _, err) = agent.run(&["job", "stop", "-detach", "web"]);
    assert_eq!(code, 0, "{err}");
    agent.wait_until("the checks are gone", || {
        checks(&agent, &alloc_id).is_empty()
    });
}

#[test]
fn a_failing_check_with_check_restart_restarts_its_task() {
    let agent = mock_dev_agent("checks-restart");
    let dir = temp_dir("checks-restart-jobs");
    let service = r#"
    service {
      name     = "flaky"
      provider = "nomad"
      port     = "http"
      task     = "server"
      check {
        name     = "missing"
        type     = "http"
        path     = "/missing"
        interval = "1s"
        timeout  = "2s"
        check_restart {
          limit = 2
          grace = "1s"
        }
      }
    }
"#;
    let (code, out) = run_job(&agent, &dir, "flaky", &job("flaky", service, ""));
    assert_eq!(code, 0, "{out}");
    let mut alloc = Value::Null;
    agent.wait_until("the task restarted for its check", || {
        alloc = first_alloc(&agent, "flaky").unwrap_or(Value::Null);
        alloc["TaskStates"]["server"]["Restarts"]
            .as_u64()
            .is_some_and(|n| n >= 1)
    });
    let id = alloc["ID"].as_str().unwrap().to_string();
    let full = agent.get(&format!("/v1/allocation/{id}")).unwrap();
    let events = full["TaskStates"]["server"]["Events"].as_array().unwrap();
    let signaled = events
        .iter()
        .find(|e| e["Type"] == "Restart Signaled")
        .unwrap_or_else(|| panic!("no Restart Signaled event: {events:?}"));
    assert_eq!(
        signaled["RestartReason"], "healthcheck: check \"missing\" unhealthy",
        "{signaled}"
    );
    // After the restart the task may not be listening yet (a failure with no status code):
    // wait for a run that reached the server and was answered 404.
    agent.wait_until("the failing check's 404", || {
        checks(&agent, &id)
            .iter()
            .any(|c| c["Status"] == "failure" && c["StatusCode"] == 404)
    });
}

#[test]
fn a_deployment_waits_for_checks_unless_told_to_watch_task_states() {
    let agent = mock_dev_agent("checks-deploy");
    let dir = temp_dir("checks-deploy-jobs");
    let service = |health_check: &str| {
        format!(
            r#"
    update {{
      health_check      = "{health_check}"
      min_healthy_time  = "1s"
      healthy_deadline  = "8s"
      progress_deadline = "30s"
    }}
    service {{
      name     = "never"
      provider = "nomad"
      port     = "http"
      check {{
        type     = "http"
        path     = "/missing"
        interval = "1s"
        timeout  = "2s"
      }}
    }}
"#
        )
    };
    let healthy = |job: &str| {
        first_alloc(&agent, job).and_then(|a| a["DeploymentStatus"]["Healthy"].as_bool())
    };

    let (code, out) = run_job(&agent, &dir, "gated", &job("gated", &service("checks"), ""));
    assert_eq!(code, 0, "{out}");
    agent.wait_until("the allocation's health is decided", || {
        healthy("gated").is_some()
    });
    assert_eq!(
        healthy("gated"),
        Some(false),
        "running tasks with a failing check are not healthy"
    );
    let alloc = first_alloc(&agent, "gated").unwrap();
    assert_eq!(alloc["ClientStatus"], "running", "{alloc}");

    let (code, out) = run_job(
        &agent,
        &dir,
        "tasks",
        &job("tasks", &service("task_states"), ""),
    );
    assert_eq!(code, 0, "{out}");
    agent.wait_until("the allocation's health is decided", || {
        healthy("tasks").is_some()
    });
    assert_eq!(healthy("tasks"), Some(true));
}

#[test]
fn checks_a_nomad_service_cannot_run_are_refused_by_field() {
    let agent = mock_dev_agent("checks-refused");
    let dir = temp_dir("checks-refused-jobs");
    let service = r#"
    service {
      name     = "web"
      provider = "nomad"
      port     = "http"
      check {
        type     = "http"
        path     = "/"
        interval = "1s"
        timeout  = "1s"
        address_mode = "driver"
      }
    }
"#;
    let (code, out) = run_job(&agent, &dir, "bad", &job("bad", service, ""));
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("address_mode") && out.contains("not supported yet"),
        "{out}"
    );

    // A Consul service is accepted with a warning that says it is not registered.
    let consul = r#"
    service {
      name = "elsewhere"
      port = "http"
    }
"#;
    let (code, out) = run_job(&agent, &dir, "consul", &job("consul", consul, ""));
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("provider \"consul\", which is not supported yet"),
        "{out}"
    );
}
