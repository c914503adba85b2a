//! CSI volumes end to end with real processes: one server and two client-only agents, the hostpath
//! plugin (this binary's `csi-hostpath`, a raw_exec task) run as a SYSTEM job on both clients with
//! one shared `--root` (so a volume's data is there for both, as with network storage) and each
//! client's own `--node-id`. `caravan volume create` makes a single-node-writer volume; an exec job
//! pinned to client 1 writes to it; once that job is stopped and the claim freed, an exec job
//! pinned to client 2 reads the data back. `caravan volume status` and `caravan plugin status` are
//! checked line by line as Nomad prints them.
//!
//! Needs root (bind mounts, exec's chroot); skipped loudly otherwise. Every wait has a deadline; the
//! `Leftovers` guard kills every process and unmounts everything under the test's dir.

mod common;

use common::{short_temp_dir, wait_for, Agent, Leftovers};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const DRIVERS: &str = "plugin \"raw_exec\" {\n  config {\n    enabled = true\n  }\n}\n";

const VOLUME_SPEC: &str = r#"id        = "shared"
name      = "shared"
type      = "csi"
plugin_id = "hostpath"

capacity_min = "1MiB"
capacity_max = "10MiB"

capability {
  access_mode     = "single-node-writer"
  attachment_mode = "file-system"
}
"#;

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn plugin_job(root: &Path) -> Value {
    json!({"Job": {"ID": "hostpath-plugin", "Type": "system", "TaskGroups": [{"Name": "plugin", "Tasks": [{
        "Name": "plugin", "Driver": "raw_exec",
        "Config": {"command": common::bin().display().to_string(),
                   "args": ["csi-hostpath", "--root", root.display().to_string(), "--node-id", "${node.unique.name}", "--shared"]},
        "CSIPluginConfig": {"ID": "hostpath", "Type": "monolith", "MountDir": "/csi"},
        "Resources": {"CPU": 50, "MemoryMB": 32}
    }]}]}})
}

/// An exec job on node `node` (its name) with the volume at /vol, running `script`.
fn exec_job(id: &str, node: &str, script: &str) -> Value {
    json!({"Job": {"ID": id, "Type": "service",
        "Constraints": [{"LTarget": "${node.unique.name}", "RTarget": node, "Operand": "="}],
        "TaskGroups": [{"Name": "g", "Count": 1,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail"},
            "ReschedulePolicy": {"Attempts": 0, "Unlimited": false},
            "Volumes": {"vol": {"Type": "csi", "Source": "shared", "AccessMode": "single-node-writer",
                                "AttachmentMode": "file-system"}},
            "Tasks": [{"Name": "t", "Driver": "exec",
                // The task is PID 1 of its namespace, which ignores the stop signal: SIGKILL soon.
                "KillTimeout": 1_000_000_000u64,
                "Config": {"command": "/bin/sh", "args": ["-c", script]},
                "VolumeMounts": [{"Volume": "vol", "Destination": "/vol"}],
                "Resources": {"CPU": 50, "MemoryMB": 32}}]}]}})
}

/// `Key = value` lines of a CLI report, trimmed.
fn kv(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once(" = "))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

fn assert_kv(out: &str, want: &[(&str, &str)]) {
    let got = kv(out);
    for (k, v) in want {
        assert_eq!(got.get(*k).map(String::as_str), Some(*v), "{k} in:\n{out}");
    }
}

/// A table row whose cells are exactly `cells` (whitespace-separated).
fn has_row(out: &str, cells: &[&str]) -> bool {
    out.lines()
        .any(|l| l.split_whitespace().collect::<Vec<_>>() == cells)
}

fn running_alloc(api: &Agent, job: &str) -> Value {
    let mut found = Value::Null;
    wait_for(
        &format!("{job} running"),
        Duration::from_secs(90),
        Duration::from_millis(200),
        || {
            let allocs = api
                .get(&format!("/v1/job/{job}/allocations"))
                .ok()
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            if let Some(failed) = allocs.iter().find(|a| a["ClientStatus"] == "failed") {
                panic!("{job} failed: {}", failed["TaskStates"]);
            }
            found = allocs
                .into_iter()
                .find(|a| a["ClientStatus"] == "running")
                .unwrap_or(Value::Null);
            !found.is_null()
        },
    );
    found
}

fn claims_freed(api: &Agent) -> bool {
    api.get("/v1/volume/csi/shared").is_ok_and(|v| {
        [
            "ReadAllocs",
            "WriteAllocs",
            "ReadClaims",
            "WriteClaims",
            "PastClaims",
        ]
        .iter()
        .all(|k| v[k].as_object().is_none_or(|m| m.is_empty()))
    })
}

#[test]
fn a_volume_written_on_one_client_is_read_back_on_the_other() {
    if !is_root() {
        eprintln!("SKIPPED: the CSI end-to-end test needs root (bind mounts, exec chroots)");
        return;
    }
    let top = short_temp_dir("e2e");
    let leftovers = Leftovers::new(&top);
    // Agents a few folders deep, as people lay them out: the plugins' sockets must still fit
    // the 107 bytes of a unix socket path (they once did not, and the plugin never got healthy).
    let base = top
        .join("agents-each-in-its-own-folder")
        .join("under-a-deeper-tree");
    std::fs::create_dir_all(&base).unwrap();
    let root = base.join("hp");

    let sdir = base.join("s");
    std::fs::create_dir_all(&sdir).unwrap();
    let sdata = sdir.join("d").display().to_string();
    let server = Agent::start(&sdir, &["-server", "-data-dir", &sdata]);
    let rpc = server
        .get("/v1/status/leader")
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .expect("the server's rpc address");
    let mut clients = Vec::new();
    for name in ["c1", "c2"] {
        let dir = base.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let data = dir.join("d").display().to_string();
        let drivers = dir.join("drivers.hcl");
        std::fs::write(&drivers, DRIVERS).unwrap();
        let drivers = drivers.display().to_string();
        clients.push(Agent::start(
            &dir,
            &[
                "-client",
                "-servers",
                &rpc,
                "-node",
                name,
                "-data-dir",
                &data,
                "-config",
                &drivers,
            ],
        ));
    }
    server.wait_until("both clients ready with exec and raw_exec", || {
        let nodes = server
            .get("/v1/nodes")
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
        nodes.len() == 2
            && nodes.iter().all(|n| {
                n["Status"] == "ready"
                    && n["Drivers"]["exec"]["Healthy"] == true
                    && n["Drivers"]["raw_exec"]["Healthy"] == true
            })
    });

    // The plugin, on every client.
    let (status, body) = server.put("/v1/jobs", &plugin_job(&root));
    assert_eq!(status, 200, "{body}");
    server.wait_until("the plugin is healthy on both clients", || {
        server
            .get("/v1/plugin/csi/hostpath")
            .is_ok_and(|p| p["ControllersHealthy"] == 2 && p["NodesHealthy"] == 2)
    });
    // The plugin made each client register its node again, as `initializing` until its next
    // heartbeat; controller calls skip nodes that are not ready.
    server.wait_until("both nodes ready again", || {
        server
            .get("/v1/nodes")
            .ok()
            .and_then(|v| v.as_array().cloned())
            .is_some_and(|n| n.len() == 2 && n.iter().all(|n| n["Status"] == "ready"))
    });
    let (code, out, err) = server.run(&["plugin", "status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("Container Storage Interface\n"), "{out}");
    assert!(
        has_row(
            &out,
            &[
                "ID",
                "Provider",
                "Controllers",
                "Healthy/Expected",
                "Nodes",
                "Healthy/Expected"
            ]
        ),
        "{out}"
    );
    assert!(
        has_row(&out, &["hostpath", "hostpath.csi.caravan", "2/2", "2/2"]),
        "{out}"
    );
    let (code, out, err) = server.run(&["plugin", "status", "hostpath"]);
    assert_eq!(code, 0, "{err}");
    assert_kv(
        &out,
        &[
            ("ID", "hostpath"),
            ("Provider", "hostpath.csi.caravan"),
            ("Controllers Healthy", "2"),
            ("Controllers Expected", "2"),
            ("Nodes Healthy", "2"),
            ("Nodes Expected", "2"),
        ],
    );
    assert!(out.contains("\n\nAllocations\n"), "{out}");

    // The volume.
    let spec = base.join("shared.volume.hcl");
    std::fs::write(&spec, VOLUME_SPEC).unwrap();
    let (code, out, err) = server.run(&["volume", "create", &spec.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}");
    let external = out
        .trim()
        .strip_prefix("Created external volume ")
        .and_then(|r| r.strip_suffix(" with ID shared"))
        .unwrap_or_else(|| panic!("unexpected output: {out}"))
        .to_string();
    let (code, out, err) = server.run(&["volume", "status", "shared"]);
    assert_eq!(code, 0, "{err}");
    assert_kv(
        &out,
        &[
            ("ID", "shared"),
            ("Name", "shared"),
            ("Namespace", "default"),
            ("External ID", &external),
            ("Plugin ID", "hostpath"),
            ("Provider", "hostpath.csi.caravan"),
            ("Capacity", "1.0 MiB"),
            ("Schedulable", "true"),
            ("Controllers Healthy", "2"),
            ("Controllers Expected", "2"),
            ("Nodes Healthy", "2"),
            ("Nodes Expected", "2"),
            ("Access Mode", "<none>"),
            ("Attachment Mode", "<none>"),
        ],
    );
    assert!(
        out.ends_with("Allocations\nNo allocations placed\n"),
        "{out}"
    );
    let (code, out, err) = server.run(&["volume", "status"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        has_row(
            &out,
            &["shared", "shared", "default", "hostpath", "true", "<none>"]
        ),
        "{out}"
    );

    // Client 1 writes.
    let script = "echo written-on-c1 > /vol/f && exec sleep 600";
    let (status, body) = server.put("/v1/jobs", &exec_job("writer", "c1", script));
    assert_eq!(status, 200, "{body}");
    let writer = running_alloc(&server, "writer");
    let on_disk = root.join("volumes").join(&external).join("f");
    wait_for(
        "the writer's file in the volume",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || std::fs::read_to_string(&on_disk).is_ok_and(|s| s == "written-on-c1\n"),
    );
    let writer_id = writer["ID"].as_str().unwrap();
    let (code, out, err) = server.run(&["volume", "status", "shared"]);
    assert_eq!(code, 0, "{err}");
    assert_kv(
        &out,
        &[
            ("Access Mode", "single-node-writer"),
            ("Attachment Mode", "file-system"),
        ],
    );
    assert!(
        has_row(
            &out,
            &[
                &writer_id[..8],
                &writer["NodeID"].as_str().unwrap()[..8],
                "g",
                "0",
                "run",
                "running",
                "write"
            ]
        ),
        "{out}"
    );

    let (code, out, err) = server.run(&["job", "stop", "-detach", "writer"]);
    assert_eq!(code, 0, "{out}{err}");
    let took = wait_for(
        "the writer's claim freed",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || claims_freed(&server),
    );
    println!(
        "writer's claim freed {} ms after job stop",
        took.as_millis()
    );

    // Client 2 reads it back.
    let script = "cat /vol/f && exec sleep 600";
    let (status, body) = server.put("/v1/jobs", &exec_job("reader", "c2", script));
    assert_eq!(status, 200, "{body}");
    let reader = running_alloc(&server, "reader");
    let reader_id = reader["ID"].as_str().unwrap().to_string();
    let c2 = server
        .get("/v1/nodes")
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["Name"] == "c2")
        .map(|n| n["ID"].as_str().unwrap().to_string())
        .unwrap();
    assert_eq!(reader["NodeID"], c2.as_str());
    let mut logs = String::new();
    wait_for(
        "the reader's output",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || {
            let (code, out, _) = server.run(&["alloc", "logs", &reader_id, "t"]);
            logs = out;
            code == 0 && logs.contains("written-on-c1")
        },
    );
    assert_eq!(logs, "written-on-c1\n");
    let v = server.get("/v1/volume/csi/shared").unwrap();
    let claim = &v["WriteClaims"][&reader_id];
    assert_eq!(claim["NodeID"], c2.as_str(), "{v}");
    assert_eq!(claim["ExternalNodeID"], "c2", "{v}");

    // Stop everything: the claim is freed and nothing stays mounted.
    let (code, out, err) = server.run(&["job", "stop", "-detach", "reader"]);
    assert_eq!(code, 0, "{out}{err}");
    wait_for(
        "the reader's claim freed",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || claims_freed(&server),
    );
    let (code, out, err) = server.run(&["volume", "status", "shared"]);
    assert_eq!(code, 0, "{err}");
    assert_kv(&out, &[("Access Mode", "<none>"), ("Schedulable", "true")]);
    assert!(
        out.ends_with("Allocations\nNo allocations placed\n"),
        "{out}"
    );
    wait_for(
        "the clients unmounted the volume",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || leftovers.mounts().is_empty(),
    );
    let (code, out, err) = server.run(&["volume", "delete", "shared"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!root.join("volumes").join(&external).exists());
    let (code, out, err) = server.run(&["job", "stop", "-detach", "hostpath-plugin"]);
    assert_eq!(code, 0, "{out}{err}");
    server.wait_until("the plugin is gone", || {
        server.get("/v1/plugin/csi/hostpath").is_err()
    });
    drop(clients);
    drop(server);
}
