//! `/v1/search` and `/v1/search/fuzzy` on a real `caravan agent -server -acl-enabled`: matches per
//! context, truncation at 20, ACL filtering, Nomad's refusals; and `/v1/job/:id/stable`.

mod common;

use common::{call, json_of, temp_dir, Agent};
use serde_json::{json, Value};

/// What `/v1/event/stream?query` sends within the first quiet second after its buffered events
/// (the stream stays open; a read that waits a second ends the sample).
fn stream_sample(agent: &Agent, query: &str, token: &str) -> String {
    use std::io::{Read, Write};
    let host = agent.http.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(host).expect("connect");
    conn.set_read_timeout(Some(std::time::Duration::from_secs(1)))
        .unwrap();
    write!(
        conn,
        "GET /v1/event/stream?{query} HTTP/1.1\r\nHost: {host}\r\nX-Nomad-Token: {token}\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) if !got.is_empty() => break,
            Err(_) => assert!(
                std::time::Instant::now() < deadline,
                "no answer from the stream"
            ),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

fn job(id: &str, ns: &str) -> Value {
    json!({"Job": {"ID": id, "Namespace": ns, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": format!("{id}-group"), "Count": 1, "Tasks": [{
            "Name": "server", "Driver": "raw_exec", "Config": {"command": "/usr/bin/searchable"},
            "Resources": {"CPU": 10, "MemoryMB": 10}}]}]}})
}

#[test]
fn search_finds_by_prefix_and_substring_only_what_the_token_may_read() {
    let dir = temp_dir("search");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-acl-enabled", "-data-dir", &data]);
    let (s, b) = call(&agent, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(s, 200, "{b}");
    let root = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let root = root.as_str();
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/namespace/team",
        root,
        Some(&json!({"Name": "team"})),
    );
    assert_eq!(s, 200, "{b}");
    for i in 0..25 {
        let (s, b) = call(
            &agent,
            "PUT",
            "/v1/jobs",
            root,
            Some(&job(&format!("web-{i:02}"), "default")),
        );
        assert_eq!(s, 200, "{b}");
    }
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/jobs",
        root,
        Some(&job("secret-web", "team")),
    );
    assert_eq!(s, 200, "{b}");

    // Prefix: 20 at most, truncation flagged, sorted.
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/search",
        root,
        Some(&json!({"Prefix": "web-", "Context": "jobs"})),
    );
    assert_eq!(s, 200, "{b}");
    let v = json_of(&b);
    let jobs = v["Matches"]["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 20, "{b}");
    assert_eq!(jobs[0], "web-00");
    assert_eq!(v["Truncations"]["jobs"], true);
    assert!(v["Index"].as_u64().unwrap() > 0);
    // `all` answers every context; other namespaces only with ?namespace=.
    let (_, b) = call(
        &agent,
        "POST",
        "/v1/search",
        root,
        Some(&json!({"Prefix": "secret", "Context": "all"})),
    );
    let v = json_of(&b);
    assert_eq!(v["Matches"]["jobs"], json!([]), "{b}");
    assert!(
        v["Matches"].get("evals").is_some() && v["Matches"].get("vars").is_some(),
        "{b}"
    );
    let (_, b) = call(
        &agent,
        "POST",
        "/v1/search?namespace=*",
        root,
        Some(&json!({"Prefix": "secret", "Context": "jobs"})),
    );
    assert_eq!(json_of(&b)["Matches"]["jobs"], json!(["secret-web"]), "{b}");
    // Refusals as Nomad's.
    assert_eq!(call(&agent, "GET", "/v1/search", root, None).0, 405);
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/search",
        root,
        Some(&json!({"Prefix": "x", "Context": "job"})),
    );
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("invalid search context"), "{b}");
    let (s, _) = call(
        &agent,
        "POST",
        "/v1/search",
        root,
        Some(&json!({"Prefix": "x", "Context": "node_pools"})),
    );
    assert_eq!(s, 501);

    // Fuzzy: names, groups and commands, by position then length.
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/search/fuzzy?namespace=*",
        root,
        Some(&json!({"Text": "WEB", "Context": "jobs"})),
    );
    assert_eq!(s, 200, "{b}");
    let v = json_of(&b);
    let jobs = v["Matches"]["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 26, "{b}");
    assert_eq!(jobs[0]["ID"], "web-00", "a match at 0 comes first: {b}");
    assert_eq!(jobs.last().unwrap()["ID"], "secret-web");
    assert_eq!(jobs.last().unwrap()["Scope"], json!(["team", "secret-web"]));
    let (_, b) = call(
        &agent,
        "POST",
        "/v1/search/fuzzy",
        root,
        Some(&json!({"Text": "searchab", "Context": "all"})),
    );
    let v = json_of(&b);
    assert_eq!(
        v["Matches"]["commands"][0]["ID"], "/usr/bin/searchable",
        "{b}"
    );
    assert_eq!(
        v["Matches"]["commands"][0]["Scope"][2], "web-00-group",
        "{b}"
    );
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/search/fuzzy",
        root,
        Some(&json!({"Text": "w"})),
    );
    assert_eq!(s, 400, "{b}");

    // A token that reads jobs in `default` only sees those.
    let rules = r#"namespace "default" { policy = "read" }"#;
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/acl/policy/default-read",
        root,
        Some(&json!({"Name": "default-read", "Rules": rules})),
    );
    assert_eq!(s, 200, "{b}");
    let (_, b) = call(
        &agent,
        "POST",
        "/v1/acl/token",
        root,
        Some(&json!({"Name": "r", "Type": "client", "Policies": ["default-read"]})),
    );
    let reader = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/search/fuzzy?namespace=*",
        &reader,
        Some(&json!({"Text": "web", "Context": "jobs"})),
    );
    assert_eq!(s, 200, "{b}");
    assert!(!b.contains("secret-web") && b.contains("web-03"), "{b}");
    let (_, b) = call(
        &agent,
        "POST",
        "/v1/search",
        &reader,
        Some(&json!({"Prefix": "", "Context": "nodes"})),
    );
    assert_eq!(
        json_of(&b)["Matches"]["nodes"],
        json!([]),
        "no node:read: {b}"
    );
    let (_, b) = call(
        &agent,
        "POST",
        "/v1/search",
        "",
        Some(&json!({"Prefix": "web", "Context": "jobs"})),
    );
    assert_eq!(
        json_of(&b)["Matches"]["jobs"],
        json!([]),
        "anonymous sees nothing: {b}"
    );

    // The event stream: buffered entries as NDJSON batches, filtered by topic, namespace and token.
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/jobs",
        root,
        Some(&job("streamed", "default")),
    );
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/jobs",
        root,
        Some(&job("streamed-team", "team")),
    );
    assert_eq!(s, 200, "{b}");
    let all = stream_sample(&agent, "topic=Job:*&namespace=*", root);
    assert!(all.starts_with("HTTP/1.1 200"), "{all}");
    assert!(
        all.contains("\"Type\":\"JobRegistered\"") && all.contains("\"Key\":\"streamed\""),
        "{all}"
    );
    assert!(all.contains("\"Key\":\"streamed-team\""), "{all}");
    assert!(
        !all.contains("\"Topic\":\"Evaluation\""),
        "only the Job topic: {all}"
    );
    let one = stream_sample(&agent, "topic=Job:streamed", root);
    assert!(
        one.contains("\"Key\":\"streamed\"") && !one.contains("streamed-team"),
        "{one}"
    );
    let reader_view = stream_sample(&agent, "namespace=*", &reader);
    assert!(
        reader_view.contains("\"Key\":\"streamed\""),
        "{reader_view}"
    );
    assert!(
        !reader_view.contains("streamed-team"),
        "another namespace: {reader_view}"
    );
    assert!(
        !reader_view.contains("ACLToken"),
        "ACL events are for management: {reader_view}"
    );
    let (s, b) = call(&agent, "GET", "/v1/event/stream?topic=:web", root, None);
    assert_eq!(s, 400, "{b}");

    // Stability, set and cleared by request.
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/job/web-00/stable",
        root,
        Some(&json!({"JobVersion": 0, "Stable": true})),
    );
    assert_eq!(s, 200, "{b}");
    assert!(json_of(&b)["Index"].as_u64().unwrap() > 0);
    let (_, b) = call(&agent, "GET", "/v1/job/web-00", root, None);
    assert_eq!(json_of(&b)["Stable"], true, "{b}");
    let (s, _) = call(
        &agent,
        "PUT",
        "/v1/job/web-00/stable",
        root,
        Some(&json!({"JobVersion": 0, "Stable": false})),
    );
    assert_eq!(s, 200);
    let (_, b) = call(&agent, "GET", "/v1/job/web-00/versions", root, None);
    assert_eq!(json_of(&b)["Versions"][0]["Stable"], false, "{b}");
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/job/web-00/stable",
        root,
        Some(&json!({"JobVersion": 7, "Stable": true})),
    );
    assert_eq!(s, 404, "{b}");
    let (s, _) = call(
        &agent,
        "PUT",
        "/v1/job/web-00/stable",
        &reader,
        Some(&json!({"JobVersion": 0, "Stable": true})),
    );
    assert_eq!(s, 403);
}
