//! Autopilot end to end on real agents: the configuration the leader stores from its agent's
//! `autopilot` block, read and changed at `/v1/operator/autopilot/configuration` (plain writes,
//! check-and-set, refusals that name the bad member or the Enterprise feature) and with `caravan
//! operator autopilot get-config|set-config`; `/v1/operator/autopilot/health` and `caravan
//! operator autopilot health` on a dev agent (one healthy voter, failure tolerance 0) and on
//! three servers (three healthy voters, failure tolerance 1, asked through a follower too);
//! operator read and write with ACLs on. Every wait has a deadline and polls a condition.

mod common;

use common::{call, header, json_of, temp_dir, Agent};
use serde_json::{json, Value};

const CONFIG: &str = "/v1/operator/autopilot/configuration";
const HEALTH: &str = "/v1/operator/autopilot/health";

/// The stored configuration, once the leader has stored one (`ModifyIndex` > 0).
fn stored_config(agent: &Agent) -> Value {
    let mut config = Value::Null;
    agent.wait_until("the leader stored the autopilot configuration", || {
        config = agent.get(CONFIG).unwrap_or(Value::Null);
        config["ModifyIndex"].as_u64().is_some_and(|i| i > 0)
    });
    config
}

#[test]
fn configuration_and_health_on_a_dev_agent() {
    let dir = temp_dir("autopilot-dev");
    let data = dir.join("data").display().to_string();
    let extra = dir.join("autopilot.hcl");
    std::fs::write(
        &extra,
        "autopilot {\n  last_contact_threshold = \"300ms\"\n  max_trailing_logs = 100\n  \
         server_stabilization_time = \"15s\"\n  enable_redundancy_zones = false\n}\n",
    )
    .unwrap();
    let extra = extra.display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data, "-config", &extra]);

    // The first leader stores its agent's block, Nomad's defaults for what it leaves out.
    let config = stored_config(&agent);
    let created = config["CreateIndex"].as_u64().unwrap();
    assert_eq!(
        config,
        json!({
            "CleanupDeadServers": true,
            "LastContactThreshold": "300ms",
            "MaxTrailingLogs": 100,
            "MinQuorum": 0,
            "ServerStabilizationTime": "15s",
            "EnableRedundancyZones": false,
            "DisableUpgradeMigration": false,
            "EnableCustomUpgrades": false,
            "CreateIndex": created,
            "ModifyIndex": created
        })
    );
    let (status, _, headers) = agent.request("GET", CONFIG, None).expect("sent");
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, "x-nomad-index").as_deref(),
        Some(created.to_string().as_str())
    );

    let (code, out, err) = agent.run(&["operator", "autopilot", "get-config"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "CleanupDeadServers = true\nLastContactThreshold = 300ms\nMaxTrailingLogs = 100\n\
         MinQuorum = 0\nServerStabilizationTime = 15s\nEnableRedundancyZones = false\n\
         DisableUpgradeMigration = false\nEnableCustomUpgrades = false\n"
    );

    // A plain write answers `true`; keys in any case, a missing member is its zero.
    let (status, body, headers) = agent
        .request(
            "PUT",
            CONFIG,
            Some(
                &json!({"cleanupDeadServers": false, "LastContactThreshold": "1s",
                         "MaxTrailingLogs": 50, "MinQuorum": 1,
                         "ServerStabilizationTime": "20s"}),
            ),
        )
        .expect("sent");
    assert_eq!((status, body.as_str()), (200, "true"));
    let written: u64 = header(&headers, "x-nomad-index").unwrap().parse().unwrap();
    let config = agent.get(CONFIG).unwrap();
    assert_eq!(config["CleanupDeadServers"], false);
    assert_eq!(config["LastContactThreshold"], "1s");
    assert_eq!(config["MaxTrailingLogs"], 50);
    assert_eq!(config["MinQuorum"], 1);
    assert_eq!(config["ServerStabilizationTime"], "20s");
    assert_eq!(
        (
            config["CreateIndex"].as_u64(),
            config["ModifyIndex"].as_u64()
        ),
        (Some(created), Some(written))
    );

    // Check-and-set: a stale index answers `false` and changes nothing; the current one writes.
    let mut next = config.clone();
    next["MaxTrailingLogs"] = json!(60);
    let (status, body) = agent.put(&format!("{CONFIG}?cas={created}"), &next);
    assert_eq!((status, body.as_str()), (200, "false"));
    assert_eq!(agent.get(CONFIG).unwrap()["MaxTrailingLogs"], 50);
    let (status, body) = agent.put(&format!("{CONFIG}?cas={written}"), &next);
    assert_eq!((status, body.as_str()), (200, "true"));
    assert_eq!(agent.get(CONFIG).unwrap()["MaxTrailingLogs"], 60);
    // POST is a write too.
    let (status, body) = agent.raw("POST", CONFIG, Some(&next));
    assert_eq!((status, body.as_str()), (200, "true"));

    // Refusals name what is wrong and change nothing.
    let before = agent.get(CONFIG).unwrap();
    for (body, want) in [
        (
            json!({"LastContactThreshold": "soon"}),
            "Error parsing autopilot config: LastContactThreshold: invalid duration",
        ),
        (
            json!({"ServerStabilizationTime": true}),
            "Error parsing autopilot config: ServerStabilizationTime: ",
        ),
        (
            json!({"MaxTrailingLogs": "many"}),
            "Error parsing autopilot config: MaxTrailingLogs: ",
        ),
        (
            json!({"MinQuorum": -1}),
            "Error parsing autopilot config: MinQuorum: ",
        ),
        (
            json!({"LastContactThreshold": "-1s"}),
            "LastContactThreshold: must not be negative",
        ),
        (
            json!({"EnableRedundancyZones": true}),
            "EnableRedundancyZones: not supported (Nomad Enterprise feature)",
        ),
        (
            json!({"DisableUpgradeMigration": true}),
            "DisableUpgradeMigration: not supported (Nomad Enterprise feature)",
        ),
        (
            json!({"EnableCustomUpgrades": true}),
            "EnableCustomUpgrades: not supported (Nomad Enterprise feature)",
        ),
    ] {
        let (status, text) = agent.put(CONFIG, &body);
        assert_eq!(status, 400, "{body}: {text}");
        assert!(text.starts_with(want), "{body}: {text}");
    }
    let (status, text, _) = common::http("PUT", &format!("{}{CONFIG}", agent.http), None).unwrap();
    assert_eq!(
        (status, text.as_str()),
        (400, "Error parsing autopilot config: EOF")
    );
    let (status, text) = agent.put(&format!("{CONFIG}?cas=abc"), &before);
    assert_eq!(status, 400, "{text}");
    assert!(text.starts_with("Error parsing cas value"), "{text}");
    let (status, _) = agent.raw("DELETE", CONFIG, None);
    assert_eq!(status, 405);
    assert_eq!(agent.get(CONFIG).unwrap(), before, "nothing changed");

    // The CLI: set-config changes only the flags given, as a check-and-set.
    let (code, out, err) = agent.run(&[
        "operator",
        "autopilot",
        "set-config",
        "-cleanup-dead-servers=true",
        "-max-trailing-logs=77",
        "-last-contact-threshold=750ms",
        "-server-stabilization-time",
        "12s",
    ]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Configuration updated!\n"),
        "{err}"
    );
    let (code, out, err) = agent.run(&["operator", "autopilot", "get-config", "-json"]);
    assert_eq!(code, 0, "{err}");
    let config = json_of(&out);
    assert_eq!(config["CleanupDeadServers"], true);
    assert_eq!(config["MaxTrailingLogs"], 77);
    assert_eq!(config["LastContactThreshold"], "750ms");
    assert_eq!(config["ServerStabilizationTime"], "12s");
    assert_eq!(config["MinQuorum"], 1, "left as it was");
    let (code, _, err) = agent.run(&[
        "operator",
        "autopilot",
        "set-config",
        "-enable-custom-upgrades=true",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("EnableCustomUpgrades: not supported (Nomad Enterprise feature)"),
        "{err}"
    );
    let (code, _, err) = agent.run(&[
        "operator",
        "autopilot",
        "set-config",
        "-last-contact-threshold=soon",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("last-contact-threshold"), "{err}");
    assert_eq!(agent.get(CONFIG).unwrap(), config, "nothing changed");

    // Health: one healthy voter, the leader; no failure tolerance.
    let health = agent.get(HEALTH).expect("healthy: 200");
    assert_eq!(health["Healthy"], true, "{health}");
    assert_eq!(health["FailureTolerance"], 0);
    let leader = health["Leader"].as_str().unwrap().to_string();
    assert_eq!(health["Voters"], json!([leader]));
    let servers = health["Servers"].as_array().unwrap();
    assert_eq!(servers.len(), 1, "{health}");
    let s = &servers[0];
    assert_eq!(s["ID"], leader.as_str());
    assert_eq!(s["Address"], agent.rpc.as_str());
    assert_eq!(s["SerfStatus"], "alive");
    assert_eq!(s["Version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        (&s["Leader"], &s["Voter"], &s["Healthy"]),
        (&json!(true), &json!(true), &json!(true))
    );
    assert_eq!(s["LastContact"], "0s");
    assert!(s["LastIndex"].as_u64().unwrap() >= written);
    assert!(s["LastTerm"].as_u64().unwrap() >= 1);
    let since = s["StableSince"].as_str().unwrap();
    assert!(
        since.ends_with('Z') && since.len() == "2026-01-01T00:00:00Z".len(),
        "{since}"
    );
    let (status, _) = agent.raw("PUT", HEALTH, Some(&json!({})));
    assert_eq!(status, 405);

    let (code, out, err) = agent.run(&["operator", "autopilot", "health"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        &lines[..6],
        [
            "Healthy: true",
            "FailureTolerance: 0",
            &format!("Leader: {leader}"),
            "Voters:  ",
            &format!("\t{leader}"),
            "Servers: "
        ],
        "{out}"
    );
    assert!(
        lines[6].starts_with("ID ") && lines[6].ends_with("StableSince"),
        "{out}"
    );
    assert!(lines[7].starts_with(&format!("{leader} ")), "{out}");
    assert!(
        lines[7].contains(" alive ") && lines[7].ends_with(" +0000 UTC"),
        "{out}"
    );
    let (code, out, err) = agent.run(&["operator", "autopilot", "health", "-json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert_eq!(json_of(&out)["Healthy"], true);
}

#[test]
fn operator_read_reads_and_operator_write_writes() {
    let dir = temp_dir("autopilot-acl");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-acl-enabled", "-data-dir", &data]);
    let (s, b) = call(&agent, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(s, 200, "{b}");
    let root = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let token = |name: &str, rules: &str| {
        let (s, b) = call(
            &agent,
            "PUT",
            &format!("/v1/acl/policy/{name}"),
            &root,
            Some(&json!({"Name": name, "Rules": rules})),
        );
        assert_eq!(s, 200, "{b}");
        let (s, b) = call(
            &agent,
            "POST",
            "/v1/acl/token",
            &root,
            Some(&json!({"Name": name, "Type": "client", "Policies": [name]})),
        );
        assert_eq!(s, 200, "{b}");
        json_of(&b)["SecretID"].as_str().unwrap().to_string()
    };
    let reader = token("op-read", "operator { policy = \"read\" }");
    let writer = token("op-write", "operator { policy = \"write\" }");
    let body = json!({"CleanupDeadServers": true, "LastContactThreshold": "200ms",
                      "MaxTrailingLogs": 250, "ServerStabilizationTime": "10s"});
    for path in [CONFIG, HEALTH] {
        assert_eq!(call(&agent, "GET", path, "", None).0, 403, "{path}");
        let (s, b) = call(&agent, "GET", path, &reader, None);
        assert_eq!(s, 200, "{path}: {b}");
    }
    let (s, b) = call(&agent, "PUT", CONFIG, &reader, Some(&body));
    assert_eq!((s, b.as_str()), (403, "Permission denied"));
    let (s, b) = call(&agent, "PUT", CONFIG, &writer, Some(&body));
    assert_eq!((s, b.as_str()), (200, "true"));
    // The CLI with the token.
    let (code, out, err) = agent.run(&[
        "operator",
        "autopilot",
        "set-config",
        "-min-quorum=1",
        "-token",
        &reader,
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(err.contains("Permission denied"), "{err}");
    let (code, out, err) = agent.run(&[
        "operator",
        "autopilot",
        "set-config",
        "-min-quorum=1",
        "-token",
        &writer,
    ]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Configuration updated!\n"),
        "{err}"
    );
}

fn leader_of(a: &Agent) -> String {
    a.get("/v1/status/leader")
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

#[test]
fn three_servers_are_three_healthy_voters_with_a_failure_tolerance_of_one() {
    let mut servers: Vec<Agent> = (0..3)
        .map(|i| {
            let dir = temp_dir(&format!("autopilot-s{i}"));
            let data = dir.join("data").display().to_string();
            Agent::spawn(
                &dir,
                &["-server", "-bootstrap-expect", "3", "-data-dir", &data],
            )
        })
        .collect();
    let (code, out, err) = servers[0].run(&["server", "join", &servers[1].rpc, &servers[2].rpc]);
    assert_eq!(code, 0, "{out}{err}");
    for s in &servers {
        s.wait_until("the cluster elected a leader", || !leader_of(s).is_empty());
    }
    let leader_rpc = leader_of(&servers[0]);
    let follower = servers
        .iter()
        .find(|s| s.rpc != leader_rpc)
        .expect("a follower");

    // Through a follower, stale or not: the leader's view.
    for path in [HEALTH.to_string(), format!("{HEALTH}?stale")] {
        let mut health = Value::Null;
        follower.wait_until("three healthy voters", || {
            health = follower
                .request("GET", &path, None)
                .map(|(_, body, _)| serde_json::from_str(&body).unwrap_or(Value::Null))
                .unwrap_or(Value::Null);
            health["Healthy"] == true
        });
        assert_eq!(health["FailureTolerance"], 1, "{health}");
        assert_eq!(
            health["Voters"].as_array().map(Vec::len),
            Some(3),
            "{health}"
        );
        let listed = health["Servers"].as_array().unwrap();
        assert_eq!(listed.len(), 3, "{health}");
        assert!(
            listed
                .iter()
                .all(|s| s["Healthy"] == true && s["Voter"] == true && s["SerfStatus"] == "alive"),
            "{health}"
        );
        let leaders: Vec<&Value> = listed.iter().filter(|s| s["Leader"] == true).collect();
        assert_eq!(leaders.len(), 1, "{health}");
        assert_eq!(leaders[0]["Address"], leader_rpc.as_str());
        assert_eq!(leaders[0]["ID"], health["Leader"]);
    }

    // A write through a follower reaches the leader and every server's state.
    let (code, out, err) = follower.run(&["operator", "autopilot", "set-config", "-min-quorum=3"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "Configuration updated!\n"),
        "{err}"
    );
    for s in &servers {
        s.wait_until("the new configuration on every server", || {
            s.get(&format!("{CONFIG}?stale"))
                .is_ok_and(|c| c["MinQuorum"] == 3)
        });
    }

    // Read your writes through any server: a variable written through one follower is read at
    // once through the other, which serves `/v1/var` itself after a read barrier.
    let followers: Vec<&Agent> = servers.iter().filter(|s| s.rpc != leader_rpc).collect();
    for round in 0..5 {
        let path = format!("/v1/var/barrier/{round}");
        let body = serde_json::json!({"Items": {"round": round.to_string()}});
        let (status, reply, _) = followers[round % 2]
            .request("PUT", &path, Some(&body))
            .expect("a variable written");
        assert_eq!(status, 200, "{reply}");
        let (status, reply, _) = followers[(round + 1) % 2]
            .request("GET", &path, None)
            .expect("a variable read");
        assert_eq!(status, 200, "round {round}: {reply}");
    }

    // A follower dies: the leader answers 429, the dead one failed and unhealthy, no tolerance
    // left; it stays a voter (the cluster was built for three).
    let at = servers
        .iter()
        .position(|s| s.rpc != leader_rpc)
        .expect("a follower");
    let dead = servers.remove(at);
    let dead_rpc = dead.rpc.clone();
    dead.kill();
    let leader = servers
        .iter()
        .find(|s| s.rpc == leader_rpc)
        .expect("the leader");
    let mut reply = (0, Value::Null);
    // Unhealthy as soon as raft has not heard from it; `failed` once gossip declared it down
    // (its probes take a few seconds more), as serf's status in Nomad's answer.
    leader.wait_until("the dead server is unhealthy and failed in gossip", || {
        let (status, body, _) = leader.request("GET", HEALTH, None).expect("sent");
        reply = (status, serde_json::from_str(&body).unwrap_or(Value::Null));
        // The live ones healthy in the same answer: a stall on a busy machine can leave the
        // leader a moment without word from the live follower too.
        reply.0 == 429
            && reply.1["Servers"].as_array().is_some_and(|s| {
                s.iter()
                    .any(|s| s["Address"] == dead_rpc.as_str() && s["SerfStatus"] == "failed")
                    && s.iter()
                        .filter(|s| s["Address"] != dead_rpc.as_str())
                        .all(|s| s["Healthy"] == true && s["SerfStatus"] == "alive")
            })
    });
    let health = &reply.1;
    assert_eq!(health["Healthy"], false, "{health}");
    assert_eq!(health["FailureTolerance"], 0, "{health}");
    assert_eq!(
        health["Voters"].as_array().map(Vec::len),
        Some(3),
        "{health}"
    );
    for s in health["Servers"].as_array().unwrap() {
        let dead = s["Address"] == dead_rpc.as_str();
        assert_eq!(s["Healthy"], !dead, "{health}");
        assert_eq!(
            s["SerfStatus"],
            if dead { "failed" } else { "alive" },
            "{health}"
        );
    }
    let (code, out, _) = leader.run(&["operator", "autopilot", "health"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with("Healthy: false\nFailureTolerance: 0\n"),
        "{out}"
    );
}
