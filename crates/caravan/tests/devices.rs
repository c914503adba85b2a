//! Device plugins end to end with `mock_device` against a real dev agent: the node advertises the
//! configured instances; two jobs asking for devices get disjoint instances (a raw_exec task sees
//! its IDs in the plugin's variable; an exec task also finds its instance's device node in its
//! chroot); a third waits with the failure naming devices and is placed once one is freed; the
//! CLI and the stats endpoint show the instances; configs naming unknown plugins or bad device
//! fields are refused at start, naming them. Needs root (the exec driver), as CI runs.

mod common;

use common::{temp_dir, Agent};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

const DEVICES: &str = r#"
plugin "mock_device" {
  config {
    device "mock" {
      type       = "gpu"
      count      = 3
      attributes = { memory = "16 GiB" }
      env        = "MOCK_VISIBLE_DEVICES"
      host_path  = "/dev/zero"
    }
  }
}
"#;

fn job(id: &str, driver: &str, count: u32, script: &str) -> String {
    format!(
        r#"job "{id}" {{
  datacenters = ["dc1"]
  group "g" {{
    task "t" {{
      driver = "{driver}"
      config {{
        command = "/bin/sh"
        args    = ["-c", "{script}"]
      }}
      resources {{
        cpu    = 50
        memory = 32
        device "caravan/gpu" {{
          count = {count}
          constraint {{
            attribute = "${{device.attr.memory}}"
            operator  = ">="
            value     = "8 GiB"
          }}
        }}
      }}
    }}
  }}
}}
"#
    )
}

fn allocs(agent: &Agent, job: &str) -> Vec<Value> {
    agent
        .get(&format!("/v1/job/{job}/allocations"))
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

fn running_alloc(agent: &Agent, job: &str) -> Value {
    let mut found = Value::Null;
    agent.wait_until(&format!("{job}'s allocation running"), || {
        match allocs(agent, job)
            .into_iter()
            .find(|a| a["ClientStatus"] == "running")
        {
            Some(a) => {
                found = a;
                true
            }
            None => false,
        }
    });
    let id = found["ID"].as_str().expect("alloc id").to_string();
    agent.get(&format!("/v1/allocation/{id}")).expect("alloc")
}

fn device_ids(alloc: &Value) -> Vec<String> {
    alloc["AllocatedResources"]["Tasks"]["t"]["Devices"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["DeviceIDs"].as_array().cloned().unwrap_or_default())
        .filter_map(|id| id.as_str().map(str::to_string))
        .collect()
}

fn logs_contain(agent: &Agent, alloc: &str, text: &str) -> bool {
    let (_, out, _) = agent.run(&["alloc", "logs", alloc, "t"]);
    out.contains(text)
}

fn run_job(agent: &Agent, dir: &Path, id: &str, spec: &str) {
    let path = dir.join(format!("{id}.hcl"));
    std::fs::write(&path, spec).unwrap();
    let (code, out, err) = agent.run(&["job", "run", "-detach", &path.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
}

#[test]
fn mock_devices_are_given_once_each_and_reach_the_tasks() {
    let dir = temp_dir("devices");
    let data = dir.join("data").display().to_string();
    let cfg = dir.join("devices.hcl");
    std::fs::write(&cfg, DEVICES).unwrap();
    let agent = Agent::start(
        &dir,
        &[
            "-dev",
            "-data-dir",
            &data,
            "-config",
            &cfg.display().to_string(),
        ],
    );
    agent.wait_until("the node with three mock GPUs", || {
        let Some(id) = agent
            .get("/v1/nodes")
            .ok()
            .and_then(|v| v[0]["ID"].as_str().map(str::to_string))
        else {
            return false;
        };
        agent.get(&format!("/v1/node/{id}")).ok().is_some_and(|n| {
            n["Status"] == "ready"
                && n["NodeResources"]["Devices"][0]["Instances"]
                    .as_array()
                    .is_some_and(|i| i.len() == 3)
        })
    });
    let (code, out, _) = agent.run(&["node", "status", "-self", "-verbose"]);
    assert_eq!(code, 0);
    assert!(out.contains("Device Resource Utilization"), "{out}");
    assert!(out.contains("caravan/gpu/mock[mock-1]  healthy"), "{out}");
    assert!(out.contains("memory") && out.contains("16 GiB"), "{out}");

    // Two instances to a raw_exec task, one to an exec task (chroot: its node under /dev).
    run_job(
        &agent,
        &dir,
        "pair",
        &job(
            "pair",
            "raw_exec",
            2,
            "echo visible=$MOCK_VISIBLE_DEVICES; sleep 120",
        ),
    );
    run_job(
        &agent,
        &dir,
        "solo",
        &job(
            "solo",
            "exec",
            1,
            "echo visible=$MOCK_VISIBLE_DEVICES; test -c /dev/$MOCK_VISIBLE_DEVICES && echo node=char; sleep 120",
        ),
    );
    let pair = running_alloc(&agent, "pair");
    let solo = running_alloc(&agent, "solo");
    let (p, s) = (device_ids(&pair), device_ids(&solo));
    assert_eq!((p.len(), s.len()), (2, 1), "{p:?} {s:?}");
    let all: BTreeSet<&String> = p.iter().chain(&s).collect();
    assert_eq!(all.len(), 3, "no instance given twice: {p:?} {s:?}");
    let pair_id = pair["ID"].as_str().unwrap().to_string();
    let solo_id = solo["ID"].as_str().unwrap().to_string();
    let want_pair = format!("visible={}", p.join(","));
    agent.wait_until("the raw_exec task printed its devices", || {
        logs_contain(&agent, &pair_id, &want_pair)
    });
    let want_solo = format!("visible={}", s[0]);
    agent.wait_until("the exec task printed its device and node", || {
        logs_contain(&agent, &solo_id, &want_solo) && logs_contain(&agent, &solo_id, "node=char")
    });
    let (_, status, _) = agent.run(&["alloc", "status", &solo_id]);
    assert!(
        status.contains(&format!("caravan/gpu/mock[{}]", s[0])),
        "{status}"
    );
    let stats = agent
        .get(&format!("/v1/client/allocation/{solo_id}/stats"))
        .expect("stats");
    let groups = &stats["Tasks"]["t"]["ResourceUsage"]["DeviceStats"];
    assert_eq!(groups[0]["Name"], "mock", "{stats}");
    assert!(
        groups[0]["InstanceStats"][&s[0]]["Summary"].is_object(),
        "{stats}"
    );

    // Every instance is held: a third job waits, and says why.
    run_job(
        &agent,
        &dir,
        "third",
        &job(
            "third",
            "raw_exec",
            1,
            "echo visible=$MOCK_VISIBLE_DEVICES; sleep 120",
        ),
    );
    agent.wait_until("the third job's placement failure", || {
        let (_, out, _) = agent.run(&["job", "status", "third"]);
        out.contains("devices")
    });
    assert!(allocs(&agent, "third").is_empty());
    // Freeing the pair's two instances places it, on one of them.
    let (code, out, err) = agent.run(&["job", "stop", "-detach", "pair"]);
    assert_eq!(code, 0, "{out}{err}");
    let third = running_alloc(&agent, "third");
    let t = device_ids(&third);
    assert_eq!(t.len(), 1);
    assert!(p.contains(&t[0]), "{t:?} comes from the freed {p:?}");
    for j in ["solo", "third"] {
        let (code, out, err) = agent.run(&["job", "stop", j]);
        assert_eq!(code, 0, "{out}{err}");
    }
}

#[test]
fn unknown_plugins_and_bad_device_configs_are_refused_at_start() {
    for (name, text, want) in [
        (
            "unknown",
            "plugin \"gpu_magic\" {\n  config {}\n}\n",
            "plugin \"gpu_magic\": Caravan has no such plugin",
        ),
        (
            "badfield",
            "plugin \"mock_device\" {\n  config {\n    device \"x\" {\n      type = \"gpu\"\n      colour = \"red\"\n    }\n  }\n}\n",
            "unknown field `colour`",
        ),
        (
            "args",
            "plugin \"raw_exec\" {\n  args = [\"-x\"]\n}\n",
            "args are for external plugins",
        ),
        (
            "nvidia",
            "plugin \"nvidia\" {\n  config {\n    fingerprint_period = \"soon\"\n  }\n}\n",
            "fingerprint_period",
        ),
    ] {
        let dir = temp_dir(&format!("devices-{name}"));
        let cfg = dir.join("bad.hcl");
        std::fs::write(&cfg, text).unwrap();
        // Free ports for this agent, so it never collides with another test's.
        std::fs::write(
            dir.join("ports.hcl"),
            "bind_addr = \"127.0.0.1\"\nports {\n  http = 0\n  rpc = 0\n  serf = 0\n}\n",
        )
        .unwrap();
        let out = std::process::Command::new(common::bin())
            .args(["agent", "-dev", "-data-dir"])
            .arg(dir.join("data"))
            .arg("-config")
            .arg(dir.join("ports.hcl"))
            .arg("-config")
            .arg(&cfg)
            .output()
            .expect("the agent runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{name}: {text}");
        assert!(text.contains(want), "{name}: {text}");
    }
}
