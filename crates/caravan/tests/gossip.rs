//! Gossip between real server processes on loopback (#22): `server { encrypt }` seals it, so a
//! server with another key never joins; the keyring is changed on every server through
//! `/v1/agent/keyring/*` and `caravan operator gossip keyring`; a server stopped with
//! `leave_on_interrupt` is listed `left`, not `failed`. Every wait has a deadline.

mod common;

use common::{temp_dir, Agent};
use serde_json::Value;

/// A server with `bootstrap_expect` 2, the gossip key `key`, joining `join` (a serf address).
fn server(name: &str, key: &str, join: &str) -> Agent {
    let config = format!(
        "leave_on_interrupt = true\nserver {{\n  encrypt = \"{key}\"\n{}}}\n",
        common::retry_join(join)
    );
    common::agent_with_config(name, &["-server", "-bootstrap-expect", "2"], &config, false).0
}

fn members(a: &Agent) -> Vec<Value> {
    a.get("/v1/agent/members").unwrap()["Members"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn status_of(a: &Agent, serf: &str) -> Option<String> {
    members(a)
        .into_iter()
        .find(|m| format!("{}:{}", m["Addr"].as_str().unwrap_or(""), m["Port"]) == serf)
        .and_then(|m| m["Status"].as_str().map(str::to_string))
}

fn generate(a: &Agent) -> String {
    let (code, out, err) = a.run(&["operator", "gossip", "keyring", "generate"]);
    assert_eq!(code, 0, "{err}");
    out.trim().to_string()
}

#[test]
fn encrypted_gossip_keys_rotate_and_a_leaving_server_is_left() {
    // The key comes from the CLI of a first agent-less run: any agent binary generates.
    let out = std::process::Command::new(common::bin())
        .args(["operator", "gossip", "keyring", "generate"])
        .output()
        .unwrap();
    let k1 = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(k1.len(), 44, "base64 of 32 bytes: {k1}");

    let a = server("gossip-a", &k1, "");
    let b = server("gossip-b", &k1, &a.serf);
    a.wait_until("a leader of two", || {
        a.get("/v1/status/peers")
            .ok()
            .and_then(|p| p.as_array().map(Vec::len))
            == Some(2)
    });

    // Another key: never joins, and `server join` says why.
    let k_other = generate(&a);
    assert_ne!(k_other, k1);
    let wrong = server("gossip-wrong", &k_other, "");
    let (code, _, err) = wrong.run(&["server", "join", &a.serf]);
    assert_ne!(code, 0, "joining with another key fails");
    assert!(err.contains("gossip key"), "{err}");
    assert_eq!(status_of(&a, &wrong.serf), None);
    drop(wrong);

    // The keyring on every server: list, install, use, remove.
    // The refused server may still be a suspect in a's gossip for a moment: wait for two.
    let mut list = serde_json::Value::Null;
    a.wait_until("the keyring answered by both servers", || {
        list = a.get("/v1/agent/keyring/list").unwrap_or_default();
        list["NumNodes"] == 2
    });
    assert_eq!(list["Keys"][&k1], 2, "{list}");
    let k2 = generate(&a);
    let (code, out, err) = a.run(&["operator", "gossip", "keyring", "install", &k2]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = a.run(&["operator", "gossip", "keyring", "remove", &k1]);
    assert_ne!(code, 0, "the primary cannot be removed");
    assert!(err.contains("primary"), "{err}");
    let (code, _, err) = b.run(&["operator", "gossip", "keyring", "use", &k2]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = b.run(&["operator", "gossip", "keyring", "remove", &k1]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = a.run(&["operator", "gossip", "keyring", "list"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("{k2}  [2/2]")), "{out}");
    assert!(!out.contains(&k1), "{out}");
    // Still one cluster under the new key.
    a.wait_until("both alive after the rotation", || {
        status_of(&a, &b.serf).as_deref() == Some("alive")
    });
    let (code, _, err) = a.run(&["operator", "gossip", "keyring", "install", "not-a-key"]);
    assert_ne!(code, 0);
    assert!(err.contains("base64"), "{err}");
    // A key not on every server is not made primary anywhere.
    let k3 = generate(&a);
    let (code, _, err) = a.run(&["operator", "gossip", "keyring", "use", &k3]);
    assert_ne!(code, 0);
    assert!(err.contains("install it on every server first"), "{err}");
    let list = a.get("/v1/agent/keyring/list").unwrap();
    assert_eq!(list["Keys"][&k2], 2, "unchanged: {list}");

    // A new server configured with the rotated-to key joins gossip and raft: server calls
    // carry the secret of the keyring's primary key, which every server accepts.
    let c = server("gossip-c", &k2, &a.serf);
    a.wait_until("the new server is a raft peer", || {
        a.get("/v1/status/peers")
            .ok()
            .and_then(|p| p.as_array().map(Vec::len))
            == Some(3)
    });

    // SIGINT with leave_on_interrupt: out of raft first (through the leader), then left in
    // gossip, not failed; a follower leaves.
    let leader = a.get("/v1/status/leader").unwrap();
    let (stays, goes) = if leader.as_str() == Some(a.rpc.as_str()) {
        (&a, &b)
    } else {
        (&b, &a)
    };
    let ok = std::process::Command::new("kill")
        .args(["-INT", &goes.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    stays.wait_until("the interrupted server listed left", || {
        status_of(stays, &goes.serf).as_deref() == Some("left")
    });
    stays.wait_until("the server that left is out of raft", || {
        stays.get("/v1/status/peers").ok().is_some_and(|p| {
            p.as_array().is_some_and(|p| {
                p.len() == 2 && !p.iter().any(|a| a.as_str() == Some(goes.rpc.as_str()))
            })
        })
    });
    // The third joined through one of the first two: the one that stays may hear of it through
    // gossip a moment after raft holds it, so wait for its gossip view (status and version).
    let mut health = serde_json::Value::Null;
    stays.wait_until(
        "both remaining servers alive in gossip with their build",
        || {
            health = stays
                .get("/v1/operator/autopilot/health")
                .unwrap_or_default();
            health["Servers"].as_array().is_some_and(|servers| {
                servers.len() == 2
                    && servers.iter().all(|s| {
                        s["SerfStatus"] == "alive" && s["Version"] == env!("CARGO_PKG_VERSION")
                    })
            })
        },
    );
    drop(c);
}

/// A `-dev` agent (server and client, mock driver) of `region`, joining `join` (a serf address).
fn region_agent(name: &str, region: &str, join: &str) -> Agent {
    let config = format!(
        "region = \"{region}\"\nname = \"{name}\"\n{}server {{\n{}}}\n",
        common::MOCK_DRIVER_CONFIG,
        common::retry_join(join)
    );
    common::agent_with_config(name, &["-dev"], &config, true).0
}

/// #22's federation: two regions of one server each on loopback, joined through the serf port.
/// Either lists both regions; `job run -region west` through an east server places the job in
/// west (and not in east); `job status -region west` reads it there; with west gone, east keeps
/// working and only the calls for west fail, saying there is no path to that region.
#[test]
fn two_regions_federate_and_requests_are_forwarded_by_region() {
    let east = region_agent("fed-east", "east", "");
    let west = region_agent("fed-west", "west", &east.serf);
    for a in [&east, &west] {
        a.wait_until("both regions listed", || {
            a.get("/v1/regions").ok() == Some(serde_json::json!(["east", "west"]))
        });
    }
    // Still two clusters: each region's raft has its one server.
    for a in [&east, &west] {
        let peers = a.get("/v1/status/peers").unwrap();
        assert_eq!(peers.as_array().map(Vec::len), Some(1), "{peers}");
    }

    let dir = temp_dir("fed-job");
    let file = dir.join("fed.nomad.hcl");
    std::fs::write(
        &file,
        "job \"fed\" {\n  datacenters = [\"*\"]\n  group \"g\" {\n    task \"t\" {\n      driver = \"mock_driver\"\n      config {\n        run_for = \"10m\"\n      }\n      resources {\n        cpu = 10\n        memory = 10\n      }\n    }\n  }\n}\n",
    )
    .unwrap();
    let file = file.display().to_string();
    let (code, out, err) = east.run(&["job", "run", "-detach", "-region", "west", &file]);
    assert_eq!(code, 0, "{out}{err}");
    // In west, not in east.
    west.wait_until("the job runs in west", || {
        west.get("/v1/job/fed/summary")
            .ok()
            .is_some_and(|s| s["Summary"]["g"]["Running"] == 1)
    });
    let job = west.get("/v1/job/fed").unwrap();
    assert_eq!(job["Region"], "west", "{job}");
    assert!(east.get("/v1/job/fed").is_err(), "not registered in east");
    // Read through east with -region (the CLI) and ?region= (the API, a blocking query too).
    let (code, out, err) = east.run(&["job", "status", "-region", "west", "fed"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("running"), "{out}");
    let through = east.get("/v1/job/fed?region=west&index=1&wait=1s").unwrap();
    assert_eq!(through["ID"], "fed", "{through}");

    // The link is cut (west is gone): east works, the calls for west fail by name.
    drop(west);
    east.wait_until("a call for west says there is no path to it", || {
        matches!(
            common::call(&east, "GET", "/v1/jobs?region=west", "", None),
            (500, body) if body.contains("No path to region")
        )
    });
    let (code, _, err) = east.run(&["job", "status", "-region", "west", "fed"]);
    assert_ne!(code, 0);
    assert!(err.contains("No path to region"), "{err}");
    let (s, body) = common::call(&east, "GET", "/v1/jobs", "", None);
    assert_eq!(s, 200, "{body}");
    let (code, _, err) = east.run(&["job", "run", "-detach", &file]);
    assert_eq!(code, 0, "east still takes writes: {err}");
}

/// A `-dev` agent with ACLs on in `region`, replicating ACLs from `east` (the authoritative
/// region) with `token` when it is not east itself.
fn acl_region_agent(name: &str, region: &str, join: &str, token: &str) -> Agent {
    let replication = if token.is_empty() {
        String::new()
    } else {
        format!("  replication_token = \"{token}\"\n")
    };
    let config = format!(
        "region = \"{region}\"\nname = \"{name}\"\nacl {{\n  enabled = true\n{replication}}}\nserver {{\n  authoritative_region = \"east\"\n{}}}\n",
        common::retry_join(join)
    );
    common::agent_with_config(name, &["-dev"], &config, false).0
}

/// #22: ACL policies, roles, global tokens and namespaces made in the authoritative region
/// (east) replicate to west: a global token works there, a local one does not, and a token
/// deleted in east stops working in west.
#[test]
fn acls_replicate_from_the_authoritative_region() {
    use common::call;
    use serde_json::json;
    let east = acl_region_agent("repl-east", "east", "", "");
    east.wait_until("east leads", || {
        call(&east, "GET", "/v1/status/leader", "", None).0 == 200
    });
    let (s, b) = call(&east, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(s, 200, "{b}");
    let root = serde_json::from_str::<Value>(&b).unwrap()["SecretID"]
        .as_str()
        .unwrap()
        .to_string();
    let west = acl_region_agent("repl-west", "west", &east.serf, &root);

    let policy = json!({"Name": "readjobs", "Rules": "namespace \"*\" { policy = \"read\" }"});
    let (s, b) = call(
        &east,
        "POST",
        "/v1/acl/policy/readjobs",
        &root,
        Some(&policy),
    );
    assert_eq!(s, 200, "{b}");
    let token = |global: bool| {
        let body =
            json!({"Name": "t", "Type": "client", "Policies": ["readjobs"], "Global": global});
        let (s, b) = call(&east, "POST", "/v1/acl/token", &root, Some(&body));
        assert_eq!(s, 200, "{b}");
        let v: Value = serde_json::from_str(&b).unwrap();
        (
            v["AccessorID"].as_str().unwrap().to_string(),
            v["SecretID"].as_str().unwrap().to_string(),
        )
    };
    let (global_accessor, global_secret) = token(true);
    let (_, local_secret) = token(false);
    let (s, b) = call(
        &east,
        "POST",
        "/v1/namespace/team",
        &root,
        Some(&json!({"Name": "team"})),
    );
    assert_eq!(s, 200, "{b}");

    west.wait_until("the global token and the namespace in west", || {
        call(&west, "GET", "/v1/jobs", &global_secret, None).0 == 200
            && call(&west, "GET", "/v1/namespace/team", &root, None).0 == 200
    });
    let (s, b) = call(&west, "GET", "/v1/acl/policy/readjobs", &root, None);
    assert_eq!(s, 200, "{b}");
    let (s, _) = call(&west, "GET", "/v1/jobs", &local_secret, None);
    assert_eq!(s, 403, "a local token of east is not known in west");

    // Written through west, a global token and a policy are made in east (where they
    // replicate from) and come back to west.
    let (s, b) = call(
        &west,
        "POST",
        "/v1/acl/policy/west-made",
        &root,
        Some(&json!({"Name": "west-made", "Rules": "node { policy = \"read\" }"})),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        call(&east, "GET", "/v1/acl/policy/west-made", &root, None).0,
        200
    );
    let (s, b) = call(
        &west,
        "POST",
        "/v1/acl/token",
        &root,
        Some(&json!({"Name": "w", "Type": "client", "Policies": ["west-made"], "Global": true})),
    );
    assert_eq!(s, 200, "{b}");
    let made: Value = serde_json::from_str(&b).unwrap();
    let accessor = made["AccessorID"].as_str().unwrap();
    assert_eq!(
        call(
            &east,
            "GET",
            &format!("/v1/acl/token/{accessor}"),
            &root,
            None
        )
        .0,
        200,
        "made in east"
    );
    west.wait_until("the west-made global token replicated back", || {
        call(
            &west,
            "GET",
            "/v1/acl/token/self",
            made["SecretID"].as_str().unwrap(),
            None,
        )
        .0 == 200
    });

    // Deleted in east: gone in west.
    let (s, b) = call(
        &east,
        "DELETE",
        &format!("/v1/acl/token/{global_accessor}"),
        &root,
        None,
    );
    assert_eq!(s, 200, "{b}");
    west.wait_until("the deleted global token stops working in west", || {
        call(&west, "GET", "/v1/jobs", &global_secret, None).0 == 403
    });
}

/// A multiregion job (#22): every region's copy is `version`, and its deployment in each region.
fn mr_deployment(a: &Agent, version: u64) -> Option<Value> {
    let list = a.get("/v1/job/mr/deployments").ok()?;
    list.as_array()?
        .iter()
        .find(|d| d["JobVersion"] == version)
        .cloned()
}

fn mr_status(a: &Agent, version: u64) -> String {
    mr_deployment(a, version)
        .and_then(|d| d["Status"].as_str().map(str::to_string))
        .unwrap_or_default()
}

fn mr_job(run_for_east: &str, run_for_west: &str, on_failure: &str) -> String {
    format!(
        r#"job "mr" {{
  datacenters = ["*"]
  update {{
    max_parallel      = 1
    min_healthy_time  = "2s"
    healthy_deadline  = "1m"
    progress_deadline = "2m"
  }}
  multiregion {{
    strategy {{
      max_parallel = 1
      on_failure   = "{on_failure}"
    }}
    region "east" {{
      count = 1
      meta {{
        run_for = "{run_for_east}"
      }}
    }}
    region "west" {{
      count = 1
      meta {{
        run_for = "{run_for_west}"
      }}
    }}
  }}
  group "g" {{
    count = 0
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    task "t" {{
      driver = "mock_driver"
      config {{
        run_for   = "${{NOMAD_META_run_for}}"
        exit_code = 1
      }}
      resources {{
        cpu    = 10
        memory = 10
      }}
    }}
  }}
}}
"#
    )
}

/// Watches a multiregion rollout of `version` until east is `east_want` and west `west_want`,
/// checking at every look that west never runs before east has finished its own rollout;
/// returns whether east was seen running while west waited, and blocked while west ran.
fn watch_rollout(
    east: &Agent,
    west: &Agent,
    version: u64,
    east_want: &str,
    west_want: &str,
) -> (bool, bool) {
    let mut saw_east_first = false;
    let mut saw_east_wait = false;
    east.wait_until(
        &format!("east's deployment is {east_want}, west's {west_want}"),
        || {
            // West first, then east: east only moves forward, so a west that runs must find east
            // already finished when east is read after it.
            let w = mr_status(west, version);
            let e = mr_status(east, version);
            if matches!(w.as_str(), "running" | "blocked" | "successful") {
                assert!(
                    matches!(e.as_str(), "blocked" | "successful" | "failed"),
                    "west is {w} while east is {e:?}: max_parallel = 1 deploys east first"
                );
            }
            if w == "pending" {
                let allocs = west.get("/v1/job/mr/allocations").unwrap_or_default();
                let live = allocs
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter(|x| x["JobVersion"] == version && x["DesiredStatus"] == "run")
                            .count()
                    })
                    .unwrap_or(0);
                // West may have been unblocked between its status and this list: only a list
                // read while west is still pending after it says anything.
                if mr_status(west, version) == "pending" {
                    assert_eq!(live, 0, "a pending region places nothing: {allocs}");
                }
                if e == "running" {
                    saw_east_first = true;
                }
            }
            if w == "running" && e == "blocked" {
                saw_east_wait = true;
            }
            w == west_want && e == east_want
        },
    );
    (saw_east_first, saw_east_wait)
}

/// #22's multiregion job, beyond Nomad's open-source edition: registered through east, it is
/// stored in both regions at the same version with each region's parameters; with
/// `max_parallel = 1` east deploys first while west waits (pending, nothing placed), then west,
/// then both are successful. A new version that fails in west fails east's finished deployment
/// too (`on_failure = "fail_all"`). `job status` shows every region's deployment.
#[test]
fn a_multiregion_job_deploys_region_by_region() {
    let east = region_agent("mr-east", "east", "");
    let west = region_agent("mr-west", "west", &east.serf);
    for a in [&east, &west] {
        a.wait_until("both regions listed", || {
            a.get("/v1/regions").ok() == Some(serde_json::json!(["east", "west"]))
        });
    }
    let dir = temp_dir("mr-job");
    let file = dir.join("mr.nomad.hcl");
    std::fs::write(&file, mr_job("10m", "10m", "fail_all")).unwrap();
    let file = file.display().to_string();
    let (code, out, err) = east.run(&["job", "run", "-detach", &file]);
    assert_eq!(code, 0, "{out}{err}");
    // One copy per region, the same version, each with its region's parameters.
    for (a, region) in [(&east, "east"), (&west, "west")] {
        let job = a.get("/v1/job/mr").unwrap();
        assert_eq!(job["Region"], region, "{job}");
        assert_eq!(job["Version"], 0, "{job}");
        assert_eq!(job["TaskGroups"][0]["Count"], 1, "{job}");
        assert_eq!(job["Multiregion"]["Regions"][1]["Name"], "west", "{job}");
    }
    let (east_first, east_waited) = watch_rollout(&east, &west, 0, "successful", "successful");
    assert!(east_first, "east was never seen running while west waited");
    assert!(east_waited, "east was never seen blocked while west ran");
    let (code, out, err) = east.run(&["job", "status", "mr"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Multiregion Deployment"), "{out}");
    let table = out.split("Multiregion Deployment").nth(1).unwrap_or("");
    for region in ["east", "west"] {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(region) && l.contains("successful")),
            "{out}"
        );
    }

    // Version 1 fails in west (its task exits at once): east, deployed first and blocked, is
    // failed too.
    std::fs::write(&file, mr_job("10m", "0s", "fail_all")).unwrap();
    let (code, out, err) = east.run(&["job", "run", "-detach", &file]);
    assert_eq!(code, 0, "{out}{err}");
    for a in [&east, &west] {
        assert_eq!(a.get("/v1/job/mr").unwrap()["Version"], 1);
    }
    watch_rollout(&east, &west, 1, "failed", "failed");
    let d = mr_deployment(&east, 1).unwrap();
    assert_eq!(
        d["StatusDescription"], "Failed because of an error in peer region",
        "{d}"
    );
    assert_eq!(d["IsMultiregion"], true, "{d}");

    // Version 2, `fail_local`: west fails alone; east stays blocked until an operator unblocks it.
    std::fs::write(&file, mr_job("20m", "0s", "fail_local")).unwrap();
    let (code, out, err) = east.run(&["job", "run", "-detach", &file]);
    assert_eq!(code, 0, "{out}{err}");
    watch_rollout(&east, &west, 2, "blocked", "failed");
    let id = mr_deployment(&east, 2).unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    // Only a blocked deployment is unblocked (west's is failed).
    let west_id = mr_deployment(&west, 2).unwrap()["ID"]
        .as_str()
        .unwrap()
        .to_string();
    let (code, _, err) = west.run(&["deployment", "unblock", &west_id]);
    assert_ne!(code, 0);
    assert!(err.contains("not blocked"), "{err}");
    let (code, out, err) = east.run(&["deployment", "unblock", &id]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(mr_status(&east, 2), "successful");

    // Registered through a region it does not list: it goes to east, and the answer says so
    // instead of handing out east's evaluation as if it were west's.
    let solo = dir.join("solo.nomad.hcl");
    let solo_text = r#"job "solo" {
  update {
    max_parallel = 1
  }
  multiregion {
    region "east" {
      count = 1
    }
  }
  group "g" {
    count = 0
    task "t" {
      driver = "mock_driver"
      config {
        run_for = "10m"
      }
      resources {
        cpu    = 10
        memory = 10
      }
    }
  }
}
"#;
    std::fs::write(&solo, solo_text).unwrap();
    let (code, out, err) = west.run(&["job", "run", &solo.display().to_string()]);
    assert_eq!(code, 0, "{out}{err}\n{solo_text}");
    assert!(out.contains("not in this region"), "{out}");
    assert_eq!(east.get("/v1/job/solo").unwrap()["Region"], "east");
    assert!(west.get("/v1/job/solo").is_err(), "not registered in west");

    // `job stop -global` stops it in both regions.
    let (code, out, err) = east.run(&["job", "stop", "-global", "-detach", "mr"]);
    assert_eq!(code, 0, "{out}{err}");
    for a in [&east, &west] {
        assert_eq!(a.get("/v1/job/mr").unwrap()["Stop"], true);
    }
}
