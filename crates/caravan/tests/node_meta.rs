//! Dynamic node metadata against a real dev agent: `caravan node meta apply|read` and
//! `GET|POST /v1/client/metadata` — static config meta merged with dynamic, a `null` hiding a
//! static key, the node the servers schedule with following the change (a job constrained on
//! `${meta.role}` is placed only once it is applied), bad input answered 400, and the dynamic meta
//! surviving an agent restart on the same data dir.

mod common;

use common::{call, json_of, wait_for, Agent, MOCK_DRIVER_CONFIG};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Duration;

/// A dev agent with the mock driver and static meta `rack = "r1"`, `zone = "z1"`, on `dir`'s
/// data dir (kept across restarts); returns once its node is ready.
fn start(dir: &Path) -> Agent {
    let data = dir.join("data").display().to_string();
    let cfg = dir.join("meta.hcl");
    std::fs::write(
        &cfg,
        format!("{MOCK_DRIVER_CONFIG}client {{\n  meta {{\n    rack = \"r1\"\n    zone = \"z1\"\n  }}\n}}\n"),
    )
    .unwrap();
    let cfg = cfg.display().to_string();
    let agent = Agent::start(dir, &["-dev", "-data-dir", &data, "-config", &cfg]);
    agent.wait_until("the dev node is ready", || {
        agent.get("/v1/nodes").ok().is_some_and(|v| {
            v.as_array().is_some_and(|a| {
                a.len() == 1
                    && a[0]["Status"] == "ready"
                    && a[0]["Drivers"]["mock_driver"]["Healthy"] == true
            })
        })
    });
    agent
}

fn node_id(agent: &Agent) -> String {
    agent.get("/v1/nodes").unwrap()[0]["ID"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The node's `Meta` as the servers hold it.
fn server_meta(agent: &Agent, id: &str) -> Value {
    agent.get(&format!("/v1/node/{id}")).unwrap()["Meta"].clone()
}

fn wait_server_meta(agent: &Agent, id: &str, what: &str, cond: impl Fn(&Value) -> bool) {
    wait_for(
        what,
        Duration::from_secs(20),
        Duration::from_millis(100),
        || cond(&server_meta(agent, id)),
    );
}

fn allocs(agent: &Agent, job: &str) -> Vec<Value> {
    agent
        .get(&format!("/v1/job/{job}/allocations"))
        .ok()
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

#[test]
fn dynamic_node_meta_through_the_cli_and_the_api_survives_a_restart() {
    let dir = common::temp_dir("node-meta");
    let agent = start(&dir);
    let id = node_id(&agent);

    // Nothing dynamic yet: the static meta is the node's.
    let (s, b) = call(&agent, "GET", "/v1/client/metadata", "", None);
    assert_eq!(s, 200, "{b}");
    let m = json_of(&b);
    assert_eq!(m["Dynamic"], json!({}), "{m}");
    assert_eq!(m["Static"]["rack"], "r1", "{m}");
    assert_eq!(m["Meta"]["zone"], "z1", "{m}");

    // A job that needs `role = db` waits: its evaluation is blocked, nothing is placed.
    let job = json!({"Job": {"ID": "db", "Type": "service", "Datacenters": ["dc1"],
        "Constraints": [{"LTarget": "${meta.role}", "RTarget": "db", "Operand": "="}],
        "TaskGroups": [{"Name": "g", "Count": 1,
            "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
                "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}});
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job));
    assert_eq!(s, 200, "{b}");
    wait_for(
        "the job's evaluation is blocked",
        Duration::from_secs(20),
        Duration::from_millis(100),
        || {
            agent
                .get("/v1/job/db/evaluations")
                .ok()
                .and_then(|v| v.as_array().cloned())
                .is_some_and(|evals| evals.iter().any(|e| e["Status"] == "blocked"))
        },
    );
    assert!(allocs(&agent, "db").is_empty(), "placed before its meta");

    // `node meta apply` sets dynamic keys (quietly, as Nomad's).
    let (code, out, err) = agent.run(&["node", "meta", "apply", "role=db", "ready=1"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, "", "{err}");
    let m = agent.get("/v1/client/metadata").unwrap();
    assert_eq!(m["Dynamic"], json!({"ready": "1", "role": "db"}), "{m}");
    assert_eq!(
        m["Meta"],
        json!({"rack": "r1", "ready": "1", "role": "db", "zone": "z1"}),
        "{m}"
    );
    assert_eq!(m["Static"], json!({"rack": "r1", "zone": "z1"}), "{m}");
    wait_server_meta(&agent, &id, "the servers see role = db", |meta| {
        meta["role"] == "db"
    });
    wait_for(
        "the constrained job is placed once its meta is applied",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || {
            allocs(&agent, "db")
                .iter()
                .any(|a| a["ClientStatus"] == "running")
        },
    );

    // The API: a null hides the static `zone`, by the body's NodeID.
    let body = json!({"NodeID": id, "Meta": {"zone": null, "tier": "gold"}});
    let (s, b) = call(&agent, "POST", "/v1/client/metadata", "", Some(&body));
    assert_eq!(s, 200, "{b}");
    let m = json_of(&b);
    assert_eq!(m["Dynamic"]["zone"], Value::Null, "{m}");
    assert!(
        m["Dynamic"].as_object().unwrap().contains_key("zone"),
        "kept as a tombstone: {m}"
    );
    assert!(m["Meta"].get("zone").is_none(), "{m}");
    assert_eq!(m["Meta"]["tier"], "gold", "{m}");
    assert_eq!(m["Static"]["zone"], "z1", "{m}");
    wait_server_meta(&agent, &id, "the servers see zone unset", |meta| {
        meta.get("zone").is_none() && meta["tier"] == "gold"
    });

    // `node meta read`: Nomad's sections, and -json; -node-id takes a prefix.
    let prefix = &id[..8];
    let (code, out, err) = agent.run(&["node", "meta", "read", "-node-id", prefix]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "All Meta\nrack  = r1\nready = 1\nrole  = db\ntier  = gold\n\n\
         Dynamic Meta\nready = 1\nrole  = db\ntier  = gold\nzone  = <unset>\n\n\
         Static Meta\nrack = r1\nzone = z1\n"
    );
    let (code, out, err) = agent.run(&["node", "meta", "read", "-json"]);
    assert_eq!(code, 0, "{err}");
    let m = json_of(&out);
    assert_eq!(m["Dynamic"]["zone"], Value::Null, "{m}");
    assert_eq!(m["Meta"]["role"], "db", "{m}");

    // -unset forgets a dynamic key.
    let (code, out, err) = agent.run(&["node", "meta", "apply", "-node-id", &id, "-unset", "tier"]);
    assert_eq!(code, 0, "{out}{err}");
    let m = agent.get("/v1/client/metadata").unwrap();
    assert!(m["Dynamic"].get("tier").is_none(), "{m}");
    assert!(m["Meta"].get("tier").is_none(), "{m}");

    // Bad input: 400s naming the problem, never a panic.
    let (s, b) = common::http(
        "POST",
        &format!("{}/v1/client/metadata", agent.http),
        Some("{not json".into()),
    )
    .map(|(s, b, _)| (s, b))
    .unwrap();
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("invalid request body"), "{b}");
    let bad = json!({"Meta": {"a b": "1", "ok": "2"}});
    let (s, b) = call(&agent, "POST", "/v1/client/metadata", "", Some(&bad));
    assert_eq!(s, 400, "{b}");
    assert!(
        b.contains("\"a b\" is invalid; metadata keys must be valid dotted hcl identifiers"),
        "{b}"
    );
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/client/metadata",
        "",
        Some(&json!({"Meta": {}})),
    );
    assert_eq!((s, b.as_str()), (400, "missing required Meta object"));
    let (s, _) = call(&agent, "PUT", "/v1/client/metadata", "", Some(&bad));
    assert_eq!(s, 405);
    let (s, b) = call(
        &agent,
        "GET",
        "/v1/client/metadata?node_id=00000000-0000-0000-0000-000000000000",
        "",
        None,
    );
    assert_eq!(s, 404, "{b}");
    assert!(b.contains("Unknown node"), "{b}");
    let (code, _, err) = agent.run(&["node", "meta", "apply"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Must specify -unset or at least 1 key=value pair"),
        "{err}"
    );
    let (code, _, err) = agent.run(&["node", "meta", "apply", "9x=1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("Error applying dynamic node metadata: Unexpected response code: 400"),
        "{err}"
    );
    let m = agent.get("/v1/client/metadata").unwrap();
    assert!(
        m["Dynamic"].get("9x").is_none(),
        "a refused apply changes nothing: {m}"
    );

    // A restart on the same data dir keeps the dynamic meta, tombstone included.
    agent.kill();
    let agent = start(&dir);
    assert_eq!(node_id(&agent), id, "the same node");
    let m = agent.get("/v1/client/metadata").unwrap();
    assert_eq!(
        m["Dynamic"],
        json!({"ready": "1", "role": "db", "zone": null}),
        "{m}"
    );
    assert_eq!(
        m["Meta"],
        json!({"rack": "r1", "ready": "1", "role": "db"}),
        "{m}"
    );
    wait_server_meta(
        &agent,
        &id,
        "the restarted node registers its dynamic meta",
        |meta| meta["role"] == "db" && meta.get("zone").is_none(),
    );
}

/// A server agent (no client of its own) sends a node's metadata requests to the node's
/// client-only agent — by `?node_id=` or by the body's `NodeID` — and that agent answers its
/// own node's and sends other nodes' to a server.
#[test]
fn a_server_forwards_metadata_requests_to_the_nodes_agent() {
    let (server, rpc) = common::server_agent("node-meta-srv", "");
    let name = "node-meta-cli";
    let dir = common::temp_dir(name);
    let data = dir.join("data").display().to_string();
    let mock = dir.join("mock.hcl");
    // enable_debug: the client answers /v1/agent/host without ACLs.
    std::fs::write(
        &mock,
        format!("{MOCK_DRIVER_CONFIG}\nenable_debug = true\n"),
    )
    .unwrap();
    let mock = mock.display().to_string();
    let client = Agent::start(
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
            &mock,
        ],
    );
    let mut id = String::new();
    server.wait_until("the client's node is ready", || {
        let nodes = server.get("/v1/nodes").unwrap_or(Value::Null);
        nodes
            .as_array()
            .and_then(|a| a.iter().find(|n| n["Status"] == "ready"))
            .and_then(|n| n["ID"].as_str())
            .map(|n| id = n.to_string())
            .is_some()
    });

    let (s, b) = call(&server, "GET", "/v1/client/metadata", "", None);
    assert_eq!(
        (s, b.as_str()),
        (400, "No local Node and node_id not provided")
    );
    let (s, b) = call(
        &server,
        "GET",
        &format!("/v1/client/metadata?node_id={id}"),
        "",
        None,
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(json_of(&b)["Dynamic"], json!({}), "{b}");

    let body = json!({"NodeID": id, "Meta": {"role": "web"}});
    let (s, b) = call(&server, "POST", "/v1/client/metadata", "", Some(&body));
    assert_eq!(s, 200, "{b}");
    assert_eq!(json_of(&b)["Meta"]["role"], "web", "{b}");
    let own = client.get("/v1/client/metadata").unwrap();
    assert_eq!(own["Dynamic"], json!({"role": "web"}), "{own}");
    wait_server_meta(&server, &id, "the servers see role = web", |meta| {
        meta["role"] == "web"
    });

    // The CLI against the server, naming the node.
    let (code, out, err) = server.run(&["node", "meta", "apply", "-node-id", &id, "tier=1"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = server.run(&["node", "meta", "read", "-node-id", &id, "-json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        json_of(&out)["Dynamic"],
        json!({"role": "web", "tier": "1"}),
        "{out}"
    );

    // `/v1/agent/host?node_id=` at the server: the node's agent answers, through it.
    let (s, b) = call(
        &server,
        "GET",
        &format!("/v1/agent/host?node_id={id}"),
        "",
        None,
    );
    assert_eq!(s, 200, "{b}");
    let host = json_of(&b);
    assert_eq!(host["AgentID"], id.as_str(), "{b}");
    assert!(host["HostData"]["OS"].is_string(), "{b}");

    // Another node's request at the client-only agent goes to a server.
    let other = "00000000-0000-0000-0000-000000000000";
    let (s, b) = call(
        &client,
        "GET",
        &format!("/v1/client/metadata?node_id={other}"),
        "",
        None,
    );
    assert_eq!(s, 404, "{b}");
    assert!(b.contains("Unknown node"), "{b}");
}
