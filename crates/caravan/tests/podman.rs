//! The podman driver against Podman's API socket (`podman system service`, which the test command
//! starts): a job's container runs from a locally imported image, its log and mapped port answer,
//! it keeps running through a SIGKILLed and restarted client (the same container, not started
//! again), `alloc exec` reaches it, and `job stop` removes it. Needs root and Debian's podman.

mod common;

use common::{temp_dir, Agent};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const IMAGE: &str = "localhost/caravan-podman-test:1";

fn podman(args: &[&str]) -> std::process::Output {
    Command::new("podman")
        .args(args)
        .output()
        .expect("the podman tests need Debian's podman (the test command installs it)")
}

/// A busybox image imported from a root file system the test makes (no registry here).
fn build_image(dir: &Path) {
    if podman(&["image", "exists", IMAGE]).status.success() {
        return;
    }
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.exists(),
        "a static /bin/busybox is needed: apt-get install -y busybox-static"
    );
    let root = dir.join("rootfs");
    for d in ["bin", "tmp", "etc", "proc", "sys", "dev"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    let list = Command::new(busybox).arg("--list").output().unwrap();
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if applet != "busybox" && !applet.is_empty() {
            let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
        }
    }
    let tar = dir.join("rootfs.tar");
    let ok = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(ok.success());
    let out = podman(&["import", &tar.display().to_string(), IMAGE]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn start_dev(dir: &Path) -> Agent {
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the dev client ready with podman", || {
        agent.get("/v1/nodes").ok().is_some_and(|v| {
            v[0]["Status"] == "ready" && v[0]["Drivers"]["podman"]["Healthy"] == true
        })
    });
    agent
}

fn alloc(agent: &Agent, id: &str) -> Value {
    agent
        .get(&format!("/v1/allocation/{id}"))
        .unwrap_or(Value::Null)
}

fn container_id(name: &str) -> Option<String> {
    let out = podman(&["inspect", "--format", "{{.Id}}", name]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn a_podman_job_runs_reattaches_and_stops() {
    let dir = temp_dir("podman");
    build_image(&dir);
    let agent = start_dev(&dir);
    let (_, verbose, _) = agent.run(&["node", "status", "-self", "-verbose"]);
    assert!(verbose.contains("driver.podman.version"), "{verbose}");
    let spec = dir.join("pm.hcl");
    std::fs::write(
        &spec,
        format!(
            r#"job "pm" {{
  datacenters = ["dc1"]
  group "g" {{
    network {{
      port "http" {{
        to = 8080
      }}
    }}
    task "t" {{
      driver = "podman"
      config {{
        image       = "{IMAGE}"
        command     = "/bin/sh"
        args        = ["-c", "echo hello from podman in $(pwd); mkdir -p /www; echo served > /www/index.html; exec httpd -f -p 8080 -h /www"]
        ports       = ["http"]
        working_dir = "/tmp"
      }}
      resources {{
        memory = 64
      }}
    }}
  }}
}}
"#
        ),
    )
    .unwrap();
    let (code, out, err) = agent.run(&["job", "run", "-detach", &spec.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let mut id = String::new();
    agent.wait_until("the podman allocation running", || {
        let Ok(list) = agent.get("/v1/job/pm/allocations") else {
            return false;
        };
        match list
            .as_array()
            .and_then(|l| l.iter().find(|a| a["ClientStatus"] == "running"))
        {
            Some(a) => {
                id = a["ID"].as_str().unwrap_or_default().to_string();
                true
            }
            None => false,
        }
    });
    agent.wait_until("the container's greeting in the task log", || {
        let (_, out, _) = agent.run(&["alloc", "logs", &id, "t"]);
        out.contains("hello from podman in /tmp")
    });
    let port = alloc(&agent, &id)["AllocatedResources"]["Shared"]["Ports"][0]["Value"]
        .as_u64()
        .expect("a host port");
    agent.wait_until("the mapped port answers", || {
        common::http_get(&format!("127.0.0.1:{port}")).is_some_and(|b| b.contains("served"))
    });
    let name = format!("t-{id}");
    let before = container_id(&name).expect("the task's container");
    let (code, out, err) = agent.run(&[
        "alloc",
        "exec",
        "-task",
        "t",
        &id,
        "/bin/sh",
        "-c",
        "echo in=$NOMAD_ALLOC_ID",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("in={id}")), "{out}");

    agent.kill();
    assert_eq!(
        container_id(&name).as_deref(),
        Some(before.as_str()),
        "the container outlives its client"
    );
    let agent = start_dev(&dir);
    agent.wait_until("the allocation running again with stats", || {
        alloc(&agent, &id)["ClientStatus"] == "running"
            && agent
                .get(&format!("/v1/client/allocation/{id}/stats"))
                .is_ok()
    });
    let a = alloc(&agent, &id);
    let started = a["TaskStates"]["t"]["Events"]
        .as_array()
        .map(|e| e.iter().filter(|e| e["Type"] == "Started").count());
    assert_eq!(started, Some(1), "{a}");
    assert_eq!(container_id(&name).as_deref(), Some(before.as_str()));

    let (code, out, err) = agent.run(&["job", "stop", "pm"]);
    assert_eq!(code, 0, "{out}{err}");
    agent.wait_until("the container removed and the allocation complete", || {
        container_id(&name).is_none() && alloc(&agent, &id)["ClientStatus"] == "complete"
    });
}
