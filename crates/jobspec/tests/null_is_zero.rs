//! Go's `encoding/json` reads `null` as "leave the zero value", for every field of every type, and
//! clients built on it (python-nomad sends every unset field of a job as `null`) rely on that. For each
//! job fixture, canonicalized so that nearly every field is present, each member of the job's JSON in
//! turn is set to `null`: the job must still decode, and decode exactly as if the member were absent.

use model::Job;
use serde_json::Value;
use std::path::Path;

/// Every path to an object member in `value`, outermost first.
fn member_paths(value: &Value, prefix: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                prefix.push(PathStep::Key(key.clone()));
                out.push(prefix.clone());
                member_paths(v, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                prefix.push(PathStep::Index(i));
                member_paths(v, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

/// The object holding the member `path` ends at, and the member's key.
fn parent_of<'a>(
    root: &'a mut Value,
    path: &[PathStep],
) -> (&'a mut serde_json::Map<String, Value>, String) {
    let (last, within) = path.split_last().expect("a member path is not empty");
    let mut at = root;
    for step in within {
        at = match step {
            PathStep::Key(k) => at.get_mut(k.as_str()).expect("path exists"),
            PathStep::Index(i) => at.get_mut(*i).expect("path exists"),
        };
    }
    let PathStep::Key(key) = last else {
        panic!("a member path ends at a key");
    };
    (
        at.as_object_mut().expect("parent is an object"),
        key.clone(),
    )
}

/// Fields whose JSON is a map with keys the user chooses. An entry of such a map set to `null` is
/// not "absent": Go reads it as the key with the value type's zero (`""` for `Meta`), and a task's
/// `Config` is free-form JSON handed to its driver as written. Those maps themselves, set to null, are
/// still checked; only their entries (and anything inside `Config`) are not.
const MAP_FIELDS: &[&str] = &[
    "Meta",
    "Env",
    "Volumes",
    "GetterOptions",
    "GetterHeaders",
    "CanaryMeta",
    "TaggedAddresses",
    "Header",
];

fn is_struct_member(path: &[PathStep]) -> bool {
    let keys: Vec<&str> = path
        .iter()
        .filter_map(|s| match s {
            PathStep::Key(k) => Some(k.as_str()),
            PathStep::Index(_) => None,
        })
        .collect();
    let Some((_, within)) = keys.split_last() else {
        return false;
    };
    // Anything below a task's Config is the driver's free-form JSON; below a scaling Policy, the
    // autoscaler's.
    if within.contains(&"Config") || within.contains(&"Policy") {
        return false;
    }
    // The direct entries of a user-keyed map (the map's key is the step right before this one).
    match path.len().checked_sub(2).map(|i| &path[i]) {
        Some(PathStep::Key(parent)) => !MAP_FIELDS.contains(&parent.as_str()),
        _ => true,
    }
}

fn show(path: &[PathStep]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            PathStep::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            PathStep::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

#[test]
fn every_field_of_a_job_set_to_null_decodes_as_if_absent() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jobs");
    let mut fixtures: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    fixtures.sort();
    assert!(fixtures.len() > 40, "found {} fixtures", fixtures.len());
    let mut checked = 0usize;
    for fixture in fixtures {
        let text = std::fs::read_to_string(&fixture).expect("fixture reads");
        let wrapped: Value = serde_json::from_str(&text).expect("fixture is JSON");
        let mut job: Job = model::json::from_value(&wrapped["Job"])
            .unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
        job.canonicalize();
        let full = serde_json::to_value(&job).expect("job encodes");
        let mut paths = Vec::new();
        member_paths(&full, &mut Vec::new(), &mut paths);
        for path in paths {
            if !is_struct_member(&path) {
                continue;
            }
            let mut nulled = full.clone();
            let (parent, key) = parent_of(&mut nulled, &path);
            parent.insert(key.clone(), Value::Null);
            let mut absent = full.clone();
            let (parent, key) = parent_of(&mut absent, &path);
            parent.remove(&key);
            let with_null: Job = model::json::from_value(&nulled).unwrap_or_else(|e| {
                panic!(
                    "{}: {} = null does not decode: {e}",
                    fixture.display(),
                    show(&path)
                )
            });
            let without: Job = model::json::from_value(&absent).expect("absent member decodes");
            assert_eq!(
                with_null,
                without,
                "{}: {} = null decodes differently from leaving it out",
                fixture.display(),
                show(&path)
            );
            checked += 1;
        }
    }
    assert!(checked > 5_000, "only {checked} members checked");
}

#[test]
fn a_job_with_every_unset_field_null_registers_as_python_nomad_sends_it() {
    // The shape python-nomad's README and test suite send: the Go api's Job with nil pointers,
    // slices and maps written as null.
    let body = r#"{
        "Job": {
            "Region": null, "Namespace": null, "ID": "example", "Name": "example", "Type": "service",
            "Priority": null, "AllAtOnce": null, "Datacenters": ["dc1"], "NodePool": null,
            "Constraints": null, "Affinities": null, "Spreads": null, "Update": null,
            "Multiregion": null, "Periodic": null, "ParameterizedJob": null, "Stop": null,
            "ParentID": null, "Dispatched": false, "Payload": null, "Meta": null,
            "ConsulToken": null, "VaultToken": null, "Status": null, "StatusDescription": null,
            "Stable": null, "Version": null, "SubmitTime": null, "CreateIndex": null,
            "ModifyIndex": null, "JobModifyIndex": null,
            "TaskGroups": [{
                "Name": "cache", "Count": null, "Constraints": null, "Affinities": null,
                "Tasks": [{
                    "Name": "redis", "Driver": "docker", "User": null, "Lifecycle": null,
                    "Config": {"image": "redis:7"}, "Constraints": null, "Affinities": null,
                    "Env": null, "Services": null, "Resources": {"CPU": null, "MemoryMB": null,
                    "DiskMB": null, "Networks": null, "Devices": null, "IOPS": null},
                    "RestartPolicy": null, "Meta": null, "KillTimeout": null, "LogConfig": null,
                    "Artifacts": null, "Vault": null, "Templates": null, "DispatchPayload": null,
                    "VolumeMounts": null, "Leader": false, "ShutdownDelay": 0, "KillSignal": "",
                    "Kind": "", "ScalingPolicies": null
                }],
                "Spreads": null, "Volumes": null, "RestartPolicy": null, "ReschedulePolicy": null,
                "EphemeralDisk": null, "Update": null, "Migrate": null, "Networks": null,
                "Meta": null, "Services": null, "ShutdownDelay": null, "StopAfterClientDisconnect": null,
                "MaxClientDisconnect": null, "Scaling": null, "Consul": null
            }]
        }
    }"#;
    let value: Value = serde_json::from_str(body).expect("valid JSON");
    let mut job: Job = model::json::from_value(&value["Job"]).expect("decodes");
    job.canonicalize();
    job.validate().expect("valid once canonicalized");
    assert_eq!(job.priority, Some(50));
    assert_eq!(job.task_groups[0].count, Some(1));
    assert_eq!(job.namespace.as_deref(), Some("default"));
}
