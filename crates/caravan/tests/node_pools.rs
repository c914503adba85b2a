//! Node pools on a real agent: the built-in `all` and `default`, CRUD through `/v1/node/pools`,
//! `/nodes` and `/jobs`, jobs refused in a pool that does not exist and placed only on their
//! pool's nodes, a pool created for a node that names it, deletion refused while in use, the
//! `node_pool` ACL capabilities, and `caravan node pool ...`.

mod common;

use common::{call, json_of, temp_dir, wait_for, Agent, MOCK_DRIVER_CONFIG};
use serde_json::json;
use std::time::Duration;

fn job(id: &str, pool: &str) -> serde_json::Value {
    json!({"Job": {"ID": id, "Type": "service", "Datacenters": ["dc1"], "NodePool": pool,
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{"Name": "t",
            "Driver": "mock_driver", "Config": {"run_for": "10m"},
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}})
}

#[test]
fn node_pools_through_the_api_and_the_cli() {
    let dir = temp_dir("node-pools");
    let data = dir.join("data").display().to_string();
    let extra = dir.join("extra.hcl");
    // The dev node joins pool "edge", which nobody created: it is made for it.
    std::fs::write(
        &extra,
        format!("{MOCK_DRIVER_CONFIG}client {{\n  node_pool = \"edge\"\n}}\n"),
    )
    .unwrap();
    let extra = extra.display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data, "-config", &extra]);
    wait_for(
        "the edge pool exists",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || call(&agent, "GET", "/v1/node/pool/edge", "", None).0 == 200,
    );
    let names = |agent: &Agent| -> Vec<String> {
        let (_, b) = call(agent, "GET", "/v1/node/pools", "", None);
        json_of(&b)
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["Name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&agent), ["all", "default", "edge"]);

    // Create, read, replace.
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/node/pools",
        "",
        Some(&json!({"Name": "prod", "Description": "Production", "Meta": {"team": "web"}})),
    );
    assert_eq!(s, 200, "{b}");
    let prod = agent.get("/v1/node/pool/prod").unwrap();
    assert_eq!(
        (&prod["Description"], &prod["Meta"]["team"]),
        (&json!("Production"), &json!("web"))
    );
    let created = prod["CreateIndex"].clone();
    let (s, _) = call(
        &agent,
        "PUT",
        "/v1/node/pool/prod",
        "",
        Some(&json!({"Name": "prod", "Description": "Prod"})),
    );
    assert_eq!(s, 200);
    let prod = agent.get("/v1/node/pool/prod").unwrap();
    assert_eq!(
        (&prod["Description"], &prod["CreateIndex"]),
        (&json!("Prod"), &created)
    );

    // Nomad's refusals.
    for (method, path, body, want) in [
        ("PUT", "/v1/node/pools", json!({"Name": "default"}), (400, "modifying node pool \"default\" is not allowed")),
        ("PUT", "/v1/node/pools", json!({"Name": "bad name"}), (400, "invalid node pool \"bad name\": invalid name \"bad name\", must match regex ^[a-zA-Z0-9-_]{1,128}$")),
        ("PUT", "/v1/node/pool/prod", json!({"Name": "other"}), (400, "Node pool name does not match request path")),
    ] {
        let (s, b) = call(&agent, method, path, "", Some(&body));
        assert_eq!((s, b.as_str()), (want.0, want.1), "{body}");
    }
    let (s, b) = call(&agent, "DELETE", "/v1/node/pool/all", "", None);
    assert_eq!(
        (s, b.as_str()),
        (400, "deleting node pool \"all\" is not allowed")
    );
    let (s, _) = call(&agent, "GET", "/v1/node/pool/nope", "", None);
    assert_eq!(s, 404);

    // Jobs: a pool must exist; placement stays in the pool.
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job("lost", "nowhere")));
    assert_eq!(s, 400, "{b}");
    assert!(
        b.contains("job \"lost\" is in nonexistent node pool \"nowhere\""),
        "{b}"
    );
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job("edgy", "edge")));
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job("prodjob", "prod")));
    assert_eq!(s, 200, "{b}");
    wait_for(
        "the edge job runs",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || agent.get("/v1/job/edgy").unwrap()["Status"] == "running",
    );
    let summary = agent.get("/v1/job/prodjob/summary").unwrap();
    assert_eq!(
        summary["Summary"]["g"]["Running"], 0,
        "no node in prod: {summary}"
    );
    let (_, b) = call(&agent, "GET", "/v1/node/pool/edge/nodes", "", None);
    assert_eq!(json_of(&b).as_array().map(Vec::len), Some(1));
    let (_, b) = call(&agent, "GET", "/v1/node/pool/prod/nodes", "", None);
    assert_eq!(json_of(&b), json!([]));
    let (_, b) = call(&agent, "GET", "/v1/node/pool/all/nodes", "", None);
    assert_eq!(json_of(&b).as_array().map(Vec::len), Some(1));
    let (_, b) = call(&agent, "GET", "/v1/node/pool/edge/jobs", "", None);
    let jobs = json_of(&b);
    assert_eq!(jobs.as_array().map(Vec::len), Some(1), "{jobs}");
    assert_eq!(jobs[0]["ID"], "edgy");

    // In use: not deleted.
    let (s, b) = call(&agent, "DELETE", "/v1/node/pool/edge", "", None);
    assert_eq!(s, 409, "{b}");
    assert!(b.contains("has nodes"), "{b}");
    let (s, b) = call(&agent, "DELETE", "/v1/node/pool/prod", "", None);
    assert_eq!(s, 409, "{b}");
    assert!(b.contains("non-terminal jobs"), "{b}");

    // The CLI.
    let spec = dir.join("pool.nomad.hcl");
    let spec_s = spec.display().to_string();
    let (code, out, err) = agent.run(&["node", "pool", "init", &spec_s]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Example node pool specification written to"),
        "{out}"
    );
    let text = std::fs::read_to_string(&spec)
        .unwrap()
        .replace("\"example\"", "\"batch\"");
    std::fs::write(&spec, text).unwrap();
    let (code, out, err) = agent.run(&["node", "pool", "apply", &spec_s]);
    assert_eq!(
        (code, out.trim()),
        (0, "Successfully applied node pool \"batch\"!"),
        "{err}"
    );
    let (code, out, _) = agent.run(&["node", "pool", "list"]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.starts_with("batch") && l.contains("Example node pool")),
        "{out}"
    );
    let (code, out, _) = agent.run(&["node", "pool", "info", "batch"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Name        = batch") && out.contains("owner       = sre"),
        "{out}"
    );
    let (code, out, _) = agent.run(&["node", "pool", "nodes", "edge"]);
    assert_eq!(code, 0);
    assert!(out.contains("edge"), "{out}");
    let (code, out, _) = agent.run(&["node", "pool", "jobs", "edge"]);
    assert_eq!(code, 0);
    assert!(out.contains("edgy"), "{out}");
    let (code, out, _) = agent.run(&["node", "pool", "delete", "batch"]);
    assert_eq!(
        (code, out.trim()),
        (0, "Successfully deleted node pool \"batch\"!")
    );
    std::fs::write(&spec, "node_pool \"x\" {\n  colour = \"red\"\n}\n").unwrap();
    let (code, _, err) = agent.run(&["node", "pool", "apply", &spec_s]);
    assert_eq!(code, 1);
    assert!(
        err.contains("pool.nomad.hcl:2:3: unknown \"colour\""),
        "{err}"
    );
}

#[test]
fn node_pool_acl_capabilities() {
    let dir = temp_dir("node-pools-acl");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-acl-enabled", "-data-dir", &data]);
    let (_, b) = call(&agent, "POST", "/v1/acl/bootstrap", "", None);
    let root = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    for name in ["prod", "dev"] {
        let (s, b) = call(
            &agent,
            "PUT",
            "/v1/node/pools",
            &root,
            Some(&json!({"Name": name})),
        );
        assert_eq!(s, 200, "{b}");
    }
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/acl/policy/dev-only",
        &root,
        Some(&json!({
        "Name": "dev-only", "Rules": "node_pool \"dev\" { capabilities = [\"read\", \"write\"] }"})),
    );
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/acl/token",
        &root,
        Some(&json!({
        "Type": "client", "Policies": ["dev-only"]})),
    );
    assert_eq!(s, 200, "{b}");
    let token = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let (_, b) = call(&agent, "GET", "/v1/node/pools", &token, None);
    let names: Vec<String> = json_of(&b)
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["Name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["dev"]);
    assert_eq!(
        call(&agent, "GET", "/v1/node/pool/prod", &token, None).0,
        403
    );
    assert_eq!(
        call(
            &agent,
            "PUT",
            "/v1/node/pool/prod",
            &token,
            Some(&json!({"Name": "prod"}))
        )
        .0,
        403
    );
    assert_eq!(
        call(
            &agent,
            "PUT",
            "/v1/node/pool/dev",
            &token,
            Some(&json!({"Name": "dev"}))
        )
        .0,
        200
    );
    assert_eq!(
        call(&agent, "DELETE", "/v1/node/pool/dev", &token, None).0,
        403,
        "write without delete"
    );
    assert_eq!(
        call(&agent, "DELETE", "/v1/node/pool/dev", &root, None).0,
        200
    );
}
