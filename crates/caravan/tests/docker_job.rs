//! A docker job through a real `caravan agent -dev`: the node advertises the docker driver, the
//! task's output reaches `alloc logs`, and `job stop` removes the container. Needs a Docker
//! daemon (CI has one); the image is built locally from a static busybox.

mod common;

use common::{http_get, temp_dir, Agent};
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

/// The job's allocation that runs, once it does.
fn running_alloc(agent: &Agent, job: &str) -> String {
    let mut alloc_id = String::new();
    agent.wait_until(&format!("an allocation of {job} runs"), || {
        let Ok(v) = agent.get(&format!("/v1/job/{job}/allocations")) else {
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
    alloc_id
}

struct RemoveContainers(String);

impl Drop for RemoveContainers {
    fn drop(&mut self) {
        for id in containers_of(&self.0) {
            let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        }
    }
}

#[test]
fn a_port_mapped_container_is_reachable_shares_alloc_and_outlives_a_client_restart() {
    let image = drivers::testing::docker_test_image();
    let dir = temp_dir("docker-ports");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    let script = "mkdir -p /local/www && echo served-by-caravan > /local/www/index.html \
                  && echo from-the-container > /alloc/data/shared.txt \
                  && exec httpd -f -p 8080 -h /local/www";
    let job = json!({"Job": {"ID": "dockerweb", "Type": "service", "TaskGroups": [{"Name": "g",
    "Networks": [{"DynamicPorts": [{"Label": "http", "To": 8080}]}],
    "Tasks": [{
        "Name": "t", "Driver": "docker",
        "Config": {"image": image, "command": "sh", "args": ["-c", script], "ports": ["http"]},
        "KillTimeout": 1_000_000_000i64,
        "Resources": {"CPU": 100, "MemoryMB": 32}
    }]}]}});
    let (status, body) = agent.raw("PUT", "/v1/jobs", Some(&job));
    assert_eq!(status, 200, "{body}");
    let alloc_id = running_alloc(&agent, "dockerweb");
    let _cleanup = RemoveContainers(alloc_id.clone());
    let alloc = agent.get(&format!("/v1/allocation/{alloc_id}")).unwrap();
    let port = &alloc["AllocatedResources"]["Shared"]["Ports"][0];
    let addr = format!(
        "{}:{}",
        port["HostIP"].as_str().unwrap_or("127.0.0.1"),
        port["Value"]
    );
    assert_eq!(port["To"], 8080, "{alloc}");
    agent.wait_until("the container answers on its allocated host port", || {
        http_get(&addr).is_some_and(|b| b.contains("served-by-caravan"))
    });
    // /alloc in the container is the allocation directory on the host.
    agent.wait_until("the container's file in the shared alloc dir", || {
        agent
            .raw(
                "GET",
                &format!("/v1/client/fs/cat/{alloc_id}?path=alloc/data/shared.txt"),
                None,
            )
            .1
            .contains("from-the-container")
    });
    // …and /local is the task's local dir on the host.
    let (status, body) = agent.raw(
        "GET",
        &format!("/v1/client/fs/cat/{alloc_id}?path=t/local/www/index.html"),
        None,
    );
    assert_eq!((status, body.trim()), (200, "served-by-caravan"));
    // alloc exec runs inside the container and returns its exit code.
    let (code, out, err) = agent.run(&[
        "alloc",
        "exec",
        "-i=false",
        &alloc_id,
        "cat",
        "/local/www/index.html",
    ]);
    assert_eq!((code, out.trim()), (0, "served-by-caravan"), "{err}");
    let (code, _, _) = agent.run(&["alloc", "exec", "-i=false", &alloc_id, "sh", "-c", "exit 3"]);
    assert_eq!(code, 3);
    let before = containers_of(&alloc_id);
    assert_eq!(before.len(), 1);

    // SIGKILL the agent (client included): the container keeps serving; a new agent on the same
    // data dir reattaches to the same container instead of starting another.
    agent.kill();
    assert!(http_get(&addr).is_some_and(|b| b.contains("served-by-caravan")));
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the allocation runs again after the restart", || {
        agent
            .get(&format!("/v1/allocation/{alloc_id}"))
            .is_ok_and(|a| a["ClientStatus"] == "running")
    });
    assert_eq!(containers_of(&alloc_id), before, "the same container");
    assert!(http_get(&addr).is_some_and(|b| b.contains("served-by-caravan")));

    let (code, out, err) = agent.run(&["job", "stop", "dockerweb"]);
    assert_eq!(code, 0, "{out}{err}");
    agent.wait_until("the container is removed", || {
        containers_of(&alloc_id).is_empty()
    });
}

#[test]
fn an_image_loads_from_a_tarball_and_a_missing_image_fails_clearly() {
    let image = drivers::testing::docker_test_image();
    let dir = temp_dir("docker-load");
    let data = dir.join("data").display().to_string();
    // An image known only from a tarball: tag the test image, save the tag, remove the tag.
    let tag = format!("caravan-load-{}:1", std::process::id());
    let tar = dir.join("image.tar");
    for args in [
        vec!["tag", image, tag.as_str()],
        vec!["save", "-o", tar.to_str().unwrap(), tag.as_str()],
        vec!["rmi", tag.as_str()],
    ] {
        let out = Command::new("docker").args(&args).output().unwrap();
        assert!(out.status.success(), "docker {args:?}: {out:?}");
    }
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    let job = json!({"Job": {"ID": "dockerload", "Type": "batch", "TaskGroups": [{"Name": "g", "Tasks": [{
        "Name": "t", "Driver": "docker",
        "Artifacts": [{"GetterSource": format!("{}/image.tar", common::serve(std::fs::read(&tar).unwrap())), "RelativeDest": "local/image.tar",
                       "GetterMode": "file"}],
        "Config": {"image": tag, "load": "image.tar", "command": "sh", "args": ["-c", "echo loaded-and-ran"]},
        "Resources": {"CPU": 100, "MemoryMB": 32}
    }]}]}});
    let (status, body) = agent.raw("PUT", "/v1/jobs", Some(&job));
    assert_eq!(status, 200, "{body}");
    let mut alloc_id = String::new();
    agent.wait_until("the loaded image ran to completion", || {
        let v = agent
            .get("/v1/job/dockerload/allocations")
            .unwrap_or_default();
        v.as_array().into_iter().flatten().any(|a| {
            alloc_id = a["ID"].as_str().unwrap_or_default().to_string();
            a["ClientStatus"] == "complete"
        })
    });
    let _cleanup = RemoveContainers(alloc_id.clone());
    let (_, out, _) = agent.run(&["alloc", "logs", &alloc_id]);
    assert!(out.contains("loaded-and-ran"), "{out}");

    let job = json!({"Job": {"ID": "dockermissing", "Type": "batch", "TaskGroups": [{"Name": "g",
    "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
    "ReschedulePolicy": {"Attempts": 0, "Unlimited": false},
    "Tasks": [{
        "Name": "t", "Driver": "docker",
        "Config": {"image": "caravan-no-such-image:404"},
        "Resources": {"CPU": 100, "MemoryMB": 32}
    }]}]}});
    let (status, body) = agent.raw("PUT", "/v1/jobs", Some(&job));
    assert_eq!(status, 200, "{body}");
    let mut events = String::new();
    agent.wait_until("the task fails saying the image is missing", || {
        let v = agent
            .get("/v1/job/dockermissing/allocations")
            .unwrap_or_default();
        v.as_array().into_iter().flatten().any(|a| {
            events = a["TaskStates"]["t"]["Events"].to_string();
            a["ClientStatus"] == "failed"
        })
    });
    assert!(
        events.contains("is not present locally and pulling it failed"),
        "{events}"
    );
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
}
