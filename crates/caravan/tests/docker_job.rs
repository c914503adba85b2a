//! A docker job through a real `caravan agent -dev`: the node advertises the docker driver, the
//! task's output reaches `alloc logs`, and `job stop` removes the container. Needs a Docker
//! daemon (CI has one); the image is built locally from a static busybox.

mod common;

use common::{temp_dir, Agent};
use serde_json::json;
use std::process::Command;

fn containers_of(alloc_id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=com.hashicorp.nomad.alloc_id={alloc_id}"),
        ])
        .output()
        .expect("docker ps runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_docker_job_logs_and_stops() {
    let image = drivers::testing::docker_test_image();
    let dir = temp_dir("docker-job");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the node advertises a healthy docker driver", || {
        let Ok(nodes) = agent.get("/v1/nodes") else {
            return false;
        };
        let Some(id) = nodes[0]["ID"].as_str() else {
            return false;
        };
        agent.get(&format!("/v1/node/{id}")).is_ok_and(|n| {
            n["Drivers"]["docker"]["Healthy"] == true
                && n["Attributes"]["driver.docker.version"].is_string()
        })
    });
    let job = json!({"Job": {"ID": "dockerecho", "Type": "service", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "docker",
        "Config": {"image": image, "command": "sh", "args": ["-c", "echo hello-from-docker; exec sleep 600"]},
        "KillTimeout": 1_000_000_000i64,
        "Resources": {"CPU": 100, "MemoryMB": 32}
    }]}]}});
    let (status, body) = agent.raw("PUT", "/v1/jobs", Some(&job));
    assert_eq!(status, 200, "{body}");
    let mut alloc_id = String::new();
    agent.wait_until("the allocation runs", || {
        let Ok(v) = agent.get("/v1/job/dockerecho/allocations") else {
            return false;
        };
        let running = v.as_array().and_then(|a| {
            a.iter()
                .find(|x| x["ClientStatus"] == "running")
                .and_then(|x| x["ID"].as_str())
        });
        if let Some(id) = running {
            alloc_id = id.to_string();
        }
        running.is_some()
    });
    struct Cleanup(String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            for id in containers_of(&self.0) {
                let _ = Command::new("docker").args(["rm", "-f", &id]).output();
            }
        }
    }
    let _cleanup = Cleanup(alloc_id.clone());
    assert_eq!(containers_of(&alloc_id).len(), 1);

    let mut last = (0, String::new(), String::new());
    agent.wait_until("the container's output in alloc logs", || {
        last = agent.run(&["alloc", "logs", &alloc_id]);
        last.1.contains("hello-from-docker")
    });
    assert_eq!(last.0, 0, "{last:?}");

    let (code, out, err) = agent.run(&["job", "stop", "dockerecho"]);
    assert_eq!(code, 0, "{out}{err}");
    agent.wait_until("the container is removed", || {
        containers_of(&alloc_id).is_empty()
    });
}
