//! Dynamic host volumes (Nomad 1.10) against a real dev agent, through the CLI and the HTTP API:
//! `volume create` with the built-in `mkdir` plugin (a directory under
//! `<data_dir>/host_volumes/<id>`, watched until ready, offered by the node under its name), a job
//! asking for it by name placed on the node, `volume delete` refused while an allocation uses it
//! and done once the job is gone, an external plugin in the client's `host_volume_plugin_dir`
//! (its reported size kept), `volume register` of a directory that exists, and bad spec files
//! refused with the field named. Every wait has a deadline and polls a condition.

mod common;

use common::{temp_dir, wait_for, Agent, Leftovers};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
/// The external plugin's name (its file name in the plugin dir, and its `plugin_id`).
const PLUGIN: &str = "ext-plugin";

/// A host volume plugin as Nomad runs one: the operation as its argument, `DHV_*` variables in,
/// JSON out.
const PLUGIN_SCRIPT: &str = r#"#!/bin/sh
case "$1" in
  fingerprint)
    echo '{"version":"0.1.0"}'
    ;;
  create)
    mkdir -p "$DHV_VOLUMES_DIR/$DHV_VOLUME_ID" || exit 1
    echo "{\"path\": \"$DHV_VOLUMES_DIR/$DHV_VOLUME_ID\", \"bytes\": 1234}"
    ;;
  delete)
    rm -rf "$DHV_CREATED_PATH"
    ;;
  *)
    echo "unknown operation $1" >&2
    exit 1
    ;;
esac
"#;

fn write(path: &Path, text: &str) -> String {
    std::fs::write(path, text).unwrap();
    path.display().to_string()
}

/// A dev agent whose client runs external plugins from `plugins`, once its node is ready with
/// raw_exec and the external plugin fingerprinted.
fn start(dir: &Path, plugins: &Path) -> (Agent, String) {
    let data = dir.join("data").display().to_string();
    let cfg = write(
        &dir.join("host-volumes.hcl"),
        &format!(
            "client {{\n  host_volume_plugin_dir = \"{}\"\n}}\n",
            plugins.display()
        ),
    );
    let agent = Agent::start(dir, &["-dev", "-data-dir", &data, "-config", &cfg]);
    let attr = format!("plugins.host_volume.{PLUGIN}.version");
    let mut node_id = String::new();
    agent.wait_until("the dev node is ready with raw_exec and the plugin", || {
        let Some(stub) = agent
            .get("/v1/nodes")
            .ok()
            .and_then(|v| v.as_array().and_then(|a| a.first().cloned()))
        else {
            return false;
        };
        let Some(id) = stub["ID"].as_str() else {
            return false;
        };
        node_id = id.to_string();
        agent.get(&format!("/v1/node/{id}")).is_ok_and(|n| {
            n["Status"] == "ready"
                && n["Drivers"]["raw_exec"]["Healthy"] == true
                && n["Attributes"][&attr] == "0.1.0"
        })
    });
    (agent, node_id)
}

/// The ID from `Created host volume NAME with ID ID` (with or without `==> `).
fn created_id(out: &str, verb: &str) -> String {
    out.lines()
        .find_map(|l| {
            l.trim_start_matches("==> ")
                .strip_prefix(verb)
                .and_then(|rest| rest.split(" with ID ").nth(1))
        })
        .unwrap_or_else(|| panic!("no \"{verb} … with ID\" line in:\n{out}"))
        .trim()
        .to_string()
}

fn volume(agent: &Agent, id: &str) -> Value {
    agent
        .get(&format!("/v1/volume/host/{id}"))
        .unwrap_or_else(|e| panic!("GET volume {id}: {e}"))
}

fn node_host_volume(agent: &Agent, node: &str, name: &str) -> Value {
    agent
        .get(&format!("/v1/node/{node}"))
        .map(|n| n["HostVolumes"][name].clone())
        .unwrap_or(Value::Null)
}

fn running_alloc(agent: &Agent, job: &str) -> Option<Value> {
    agent
        .get(&format!("/v1/job/{job}/allocations"))
        .ok()?
        .as_array()?
        .iter()
        .find(|a| a["ClientStatus"] == "running")
        .cloned()
}

#[test]
fn dynamic_host_volumes_through_the_cli_and_the_api() {
    let dir = temp_dir("host-volumes");
    let leftovers = Leftovers::new(&dir);
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let script = plugins.join(PLUGIN);
    std::fs::write(&script, PLUGIN_SCRIPT).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (agent, node) = start(&dir, &plugins);
    let volumes_dir = dir.join("data").join("host_volumes");

    // Bad specs are refused before anything is sent, naming the field at file:line:col.
    let bad = write(
        &dir.join("bad.volume.hcl"),
        "name = \"x\"\ntype = \"host\"\nplugin_id = \"mkdir\"\ncapcity_min = \"1GiB\"\n",
    );
    let (code, _, err) = agent.run(&["volume", "create", &bad]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("bad.volume.hcl:4:1: capcity_min: unknown attribute \"capcity_min\""),
        "{err}"
    );
    let inverted = write(
        &dir.join("inverted.volume.hcl"),
        "name = \"x\"\ntype = \"host\"\ncapacity_min = \"2GiB\"\ncapacity_max = \"1GiB\"\n",
    );
    let (code, _, err) = agent.run(&["volume", "create", &inverted]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("inverted.volume.hcl:4:1: capacity_max: capacity_min \"2GiB\""),
        "{err}"
    );
    let (code, out, err) = agent.run(&["volume", "status", "-type", "host"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "Dynamic Host Volumes", "{out}");
    assert!(err.contains("No dynamic host volumes"), "{err}");

    // mkdir: created, watched until ready, a directory with the asked mode.
    let spec = write(
        &dir.join("data.volume.hcl"),
        "name      = \"data\"\ntype      = \"host\"\nplugin_id = \"mkdir\"\n\nparameters {\n  mode = \"0755\"\n}\n",
    );
    let (code, out, err) = agent.run(&["volume", "create", &spec]);
    assert_eq!(code, 0, "{out}{err}");
    let id = created_id(&out, "Created host volume data");
    if out.starts_with("==> ") {
        assert!(
            out.contains(&format!("✓ Host volume \"{}\" ready", &id[..8])),
            "{out}"
        );
    }
    let v = volume(&agent, &id);
    assert_eq!(v["State"], "ready", "{v}");
    assert_eq!(v["Name"], "data", "{v}");
    assert_eq!(v["PluginID"], "mkdir", "{v}");
    assert_eq!(v["NodeID"], node.as_str(), "{v}");
    let path = volumes_dir.join(&id);
    assert_eq!(v["HostPath"], path.display().to_string(), "{v}");
    let meta = std::fs::metadata(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(meta.is_dir());
    assert_eq!(meta.permissions().mode() & 0o777, 0o755);

    // Listed by the CLI and the API; one volume in full.
    let (code, out, err) = agent.run(&["volume", "status", "-type", "host"]);
    assert_eq!(code, 0, "{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with(&id[..8]))
        .unwrap_or_else(|| panic!("{out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            &id[..8],
            "data",
            "default",
            "mkdir",
            &node[..8],
            "default",
            "ready"
        ],
        "{out}"
    );
    assert!(out.starts_with("Dynamic Host Volumes\nID "), "{out}");
    let (code, out, err) = agent.run(&["volume", "status", "-type", "host", "-verbose"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&id) && out.contains(&node), "{out}");
    let (code, out, err) = agent.run(&["volume", "status", "-type", "host", "-json"]);
    assert_eq!(code, 0, "{err}");
    let list: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(list[0]["ID"], id.as_str(), "{list}");
    let (code, out, err) = agent.run(&["volume", "status", "-type", "host", "-node", &node]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&id[..8]), "{out}");
    let listed = agent
        .get(&format!("/v1/volumes?type=host&node_id={node}"))
        .unwrap();
    assert_eq!(listed[0]["ID"], id.as_str(), "{listed}");
    let (code, out, err) = agent.run(&["volume", "status", "-type", "host", &id[..8]]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("ID        = {id}")), "{out}");
    assert!(
        out.contains(&format!("Host Path = {}", path.display())),
        "{out}"
    );
    assert!(out.contains("State     = ready"), "{out}");
    assert!(out.contains("\nCapabilities\n"), "{out}");
    assert!(
        out.contains("\nAllocations\nNo allocations placed"),
        "{out}"
    );

    // The node offers it under its name.
    wait_for("the node offers the volume", DEADLINE, POLL, || {
        node_host_volume(&agent, &node, "data")["Path"] == path.display().to_string()
    });

    // A job that asks for it by name is placed on the node.
    let job = write(
        &dir.join("hv.nomad.hcl"),
        "job \"hv\" {\n  group \"g\" {\n    volume \"v\" {\n      type   = \"host\"\n      source = \"data\"\n      sticky = true\n    }\n    task \"t\" {\n      driver = \"raw_exec\"\n      config {\n        command = \"/bin/sh\"\n        args    = [\"-c\", \"exec sleep 600\"]\n      }\n      resources {\n        cpu    = 50\n        memory = 32\n      }\n    }\n  }\n}\n",
    );
    let (code, out, err) = agent.run(&["job", "run", "-detach", &job]);
    assert_eq!(code, 0, "{out}{err}");
    let mut alloc = Value::Null;
    wait_for("the job's allocation runs", DEADLINE, POLL, || {
        running_alloc(&agent, "hv").is_some_and(|a| {
            alloc = a;
            true
        })
    });
    assert_eq!(alloc["NodeID"], node.as_str(), "{alloc}");
    let alloc_id = alloc["ID"].as_str().unwrap().to_string();
    wait_for("the volume lists the allocation", DEADLINE, POLL, || {
        volume(&agent, &id)["Allocations"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x["ID"] == alloc_id.as_str()))
    });
    let (code, out, err) = agent.run(&["volume", "status", "-type", "host", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&alloc_id[..8]), "{out}");

    // `sticky = true`: the group claims the volume (Nomad's task group host volume claims).
    assert_eq!(node_host_volume(&agent, &node, "data")["ID"], id.as_str());
    let claims = agent.get("/v1/volumes/claims?job_id=hv").unwrap();
    assert_eq!(claims.as_array().map(Vec::len), Some(1), "{claims}");
    let claim = &claims[0];
    assert_eq!(
        (
            &claim["JobID"],
            &claim["TaskGroupName"],
            &claim["VolumeID"],
            &claim["VolumeName"],
            &claim["AllocID"]
        ),
        (
            &Value::from("hv"),
            &Value::from("g"),
            &Value::from(id.as_str()),
            &Value::from("data"),
            &Value::from(alloc_id.as_str())
        ),
        "{claim}"
    );
    let claim_id = claim["ID"].as_str().unwrap().to_string();
    let none = agent.get("/v1/volumes/claims?job_id=other").unwrap();
    assert_eq!(none, serde_json::json!([]), "{none}");
    let (code, out, err) = agent.run(&["volume", "claim", "list"]);
    assert_eq!(code, 0, "{err}");
    let cells: Vec<&str> = out
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("{out}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        cells,
        [&claim_id[..8], "default", "hv", &id[..8], "data"],
        "{out}"
    );
    assert!(out.starts_with("ID "), "{out}");
    let (code, out, err) = agent.run(&["volume", "claim", "delete", &claim_id[..8]]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("requires -y"), "{err}");
    let (code, out, err) = agent.run(&["volume", "claim", "delete", "-y", &claim_id[..8]]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        format!("Task group host volume claim {claim_id} successfully deleted")
    );
    let (code, out, _) = agent.run(&["volume", "claim", "list", "-json"]);
    assert_eq!((code, out.trim()), (0, "[]"));
    let (code, _, err) = agent.run(&["volume", "claim", "delete", "-y", &claim_id]);
    assert_eq!(code, 1);
    assert!(err.contains("No claim(s) with prefix"), "{err}");

    // Not deleted while the allocation uses it; the error names the allocation.
    let (code, out, err) = agent.run(&["volume", "delete", "-type", "host", &id]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("Error deleting volume:"), "{err}");
    assert!(err.contains(&alloc_id[..8]), "{err}");
    assert!(path.is_dir());

    // Once the job is stopped and purged, the delete goes through and the directory goes.
    let (status, body) = agent.raw("DELETE", "/v1/job/hv?purge=true", None);
    assert_eq!(status, 200, "{body}");
    let mut last = (0, String::new(), String::new());
    wait_for(
        "the volume is deleted once its allocation stopped",
        DEADLINE,
        Duration::from_millis(250),
        || {
            last = agent.run(&["volume", "delete", "-type", "host", &id]);
            last.0 == 0
        },
    );
    assert_eq!(
        last.1.trim(),
        format!("Successfully deleted volume {id:?}!"),
        "{last:?}"
    );
    assert!(!path.exists(), "{} is still there", path.display());
    let (status, _) = agent.raw("GET", &format!("/v1/volume/host/{id}"), None);
    assert_eq!(status, 404);
    wait_for("the node no longer offers it", DEADLINE, POLL, || {
        node_host_volume(&agent, &node, "data").is_null()
    });

    // An external plugin: its path and the size it reports.
    let spec = write(
        &dir.join("ext.volume.hcl"),
        &format!(
            "name      = \"ext\"\ntype      = \"host\"\nplugin_id = \"{PLUGIN}\"\ncapacity_min = \"1KiB\"\ncapacity_max = \"1MiB\"\n"
        ),
    );
    let (code, out, err) = agent.run(&["volume", "create", "-verbose", &spec]);
    assert_eq!(code, 0, "{out}{err}");
    let ext = created_id(&out, "Created host volume ext");
    if out.starts_with("==> ") {
        assert!(
            out.contains(&format!("✓ Host volume \"{ext}\" ready")),
            "{out}"
        );
    }
    let v = volume(&agent, &ext);
    assert_eq!(v["CapacityBytes"], 1234, "{v}");
    assert_eq!(v["PluginID"], PLUGIN, "{v}");
    let ext_path = volumes_dir.join(&ext);
    assert_eq!(v["HostPath"], ext_path.display().to_string(), "{v}");
    assert!(ext_path.is_dir());
    let (code, out, err) = agent.run(&["volume", "status", "-type", "host", &ext]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Capacity  = 1.2 KiB"), "{out}");
    let (code, out, err) = agent.run(&["volume", "delete", "-type", "host", &ext[..8]]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!ext_path.exists(), "the plugin's delete did not run");

    // Register: a directory that exists, on a named node; deleting forgets it and leaves the
    // directory.
    let existing: PathBuf = dir.join("existing");
    std::fs::create_dir_all(&existing).unwrap();
    let spec = write(
        &dir.join("existing.volume.hcl"),
        &format!(
            "name      = \"existing\"\ntype      = \"host\"\nnode_id   = \"{node}\"\nhost_path = \"{}\"\n",
            existing.display()
        ),
    );
    let no_node = write(
        &dir.join("no-node.volume.hcl"),
        "name = \"existing\"\ntype = \"host\"\nhost_path = \"/tmp\"\n",
    );
    let (code, _, err) = agent.run(&["volume", "register", &no_node]);
    assert_eq!(code, 1);
    assert!(err.contains("Node ID is required for registering"), "{err}");
    let (code, out, err) = agent.run(&["volume", "register", &spec]);
    assert_eq!(code, 0, "{out}{err}");
    let reg = created_id(&out, "Registered host volume existing");
    wait_for("the registered volume is ready", DEADLINE, POLL, || {
        volume(&agent, &reg)["State"] == "ready"
    });
    let v = volume(&agent, &reg);
    assert_eq!(v["HostPath"], existing.display().to_string(), "{v}");
    assert_eq!(v["NodeID"], node.as_str(), "{v}");
    wait_for(
        "the node offers the registered volume",
        DEADLINE,
        POLL,
        || node_host_volume(&agent, &node, "existing")["Path"] == existing.display().to_string(),
    );
    let (code, out, err) = agent.run(&["volume", "delete", "-type", "host", "existing"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(existing.is_dir(), "a registered volume's directory is kept");

    let (code, _, err) = agent.run(&["volume", "delete", "-type", "host", "nope"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Could not find existing host volume to delete: no volumes with prefix or ID \"nope\" found"),
        "{err}"
    );
    drop(agent);
    drop(leftovers);
}
