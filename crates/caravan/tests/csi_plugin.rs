//! A CSI plugin as a job on a real `caravan agent -dev`: a raw_exec task runs this binary's
//! hidden `csi-hostpath` with a `csi_plugin { id = "hostpath" type = "monolith" }` block. The
//! client probes it, registers it, and the node shows it as a healthy controller and node plugin;
//! stopping the job removes both and the plugin process ends. Every wait has a deadline.

mod common;

use common::{temp_dir, Agent};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Kills (by pid) any plugin process of this test still alive when the test ends, so a failed
/// assertion cannot leak one: the agent is SIGKILLed on drop and raw_exec tasks outlive it.
struct PluginReaper {
    /// The plugin's `--root`: unique to this test run, it names the test's plugin processes.
    root: PathBuf,
}

impl PluginReaper {
    fn pids(&self) -> Vec<u32> {
        let needle = self.root.display().to_string();
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains(&needle))
                    .unwrap_or(false)
            })
            .collect()
    }
}

impl Drop for PluginReaper {
    fn drop(&mut self) {
        for pid in self.pids() {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
    }
}

fn plugin_job(bin: &Path, root: &Path) -> Value {
    json!({"Job": {"ID": "csi-hostpath", "Type": "service", "TaskGroups": [{"Name": "plugin", "Tasks": [{
        "Name": "plugin", "Driver": "raw_exec",
        "Config": {"command": bin.display().to_string(),
                   "args": ["csi-hostpath", "--root", root.display().to_string(), "--node-id", "caravan-dev"]},
        "CSIPluginConfig": {"ID": "hostpath", "Type": "monolith", "MountDir": "/csi", "HealthTimeout": 30_000_000_000u64},
        "Resources": {"CPU": 100, "MemoryMB": 64}
    }]}]}})
}

#[test]
fn a_plugin_job_registers_on_the_node_and_leaves_when_stopped() {
    // A short name: the plugin's socket path (<data>/client/csi/plugins/<alloc id>/csi.sock)
    // must fit a unix socket address.
    let dir = temp_dir("csi");
    let root = dir.join("hp");
    let reaper = PluginReaper { root: root.clone() };
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    let mut node_id = String::new();
    agent.wait_until("the dev client is ready", || {
        let Ok(v) = agent.get("/v1/nodes") else {
            return false;
        };
        let ready = v
            .as_array()
            .and_then(|a| a.first())
            .filter(|n| n["Status"] == "ready");
        if let Some(n) = ready {
            node_id = n["ID"].as_str().unwrap_or_default().to_string();
        }
        ready.is_some()
    });
    let (status, body) = agent.raw("PUT", "/v1/jobs", Some(&plugin_job(&common::bin(), &root)));
    assert_eq!(status, 200, "{body}");

    let mut node = Value::Null;
    agent.wait_until("the node shows the healthy plugin", || {
        let Ok(n) = agent.get(&format!("/v1/node/{node_id}")) else {
            return false;
        };
        node = n;
        node["CSINodePlugins"]["hostpath"]["Healthy"] == true
            && node["CSIControllerPlugins"]["hostpath"]["Healthy"] == true
    });
    let plugin = &node["CSINodePlugins"]["hostpath"];
    assert_eq!(plugin["Provider"], "hostpath.csi.caravan", "{plugin}");
    assert_eq!(plugin["NodeInfo"]["ID"], "caravan-dev", "{plugin}");
    assert_eq!(
        plugin["NodeInfo"]["RequiresNodeStageVolume"], true,
        "{plugin}"
    );
    let controller = &node["CSIControllerPlugins"]["hostpath"];
    assert_eq!(
        controller["ControllerInfo"]["SupportsAttachDetach"], true,
        "{controller}"
    );
    assert!(!reaper.pids().is_empty(), "the plugin process runs");

    let (status, body) = agent.raw("DELETE", "/v1/job/csi-hostpath", None);
    assert_eq!(status, 200, "{body}");
    agent.wait_until("the plugin leaves the node", || {
        agent.get(&format!("/v1/node/{node_id}")).is_ok_and(|n| {
            n["CSINodePlugins"].as_object().is_none_or(|m| m.is_empty())
                && n["CSIControllerPlugins"]
                    .as_object()
                    .is_none_or(|m| m.is_empty())
        })
    });
    agent.wait_until("the plugin process ends", || reaper.pids().is_empty());
    drop(agent);
}
