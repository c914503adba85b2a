//! The web UI through a real `caravan agent -dev -acl-enabled`: `/` leads to `/ui/`, every page
//! loads one shell, and each page's content (its fragment) is rendered from the API as the
//! caller's token allows, live through blocking queries.

mod common;

use common::{call, http_with, json_of, Agent};
use serde_json::json;

fn header(headers: &[(String, String)], name: &str) -> Option<String> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

#[test]
fn pages_show_what_the_token_may_read_and_follow_changes() {
    let dir = common::temp_dir("ui");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-acl-enabled", "-data-dir", &data]);
    let (s, b) = call(&agent, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(s, 200, "{b}");
    let root = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let job = json!({"Job": {"ID": "shop", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "web", "Count": 1, "Tasks": [{
            "Name": "server", "Driver": "raw_exec",
            "Config": {"command": "/bin/sleep", "args": ["600"]},
            "Resources": {"CPU": 20, "MemoryMB": 20}}]}]}});
    let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&job));
    assert_eq!(s, 200, "{b}");

    // `/` and `/ui/` lead to the jobs page; any UI path loads the shell and its assets.
    let (s, _, h) = http_with("GET", &format!("{}/", agent.http), None, &[]).unwrap();
    assert_eq!((s, header(&h, "location").as_deref()), (307, Some("/ui/")));
    let (s, shell, h) =
        http_with("GET", &format!("{}/ui/jobs/shop", agent.http), None, &[]).unwrap();
    assert_eq!(s, 200);
    assert!(header(&h, "content-type")
        .unwrap_or_default()
        .starts_with("text/html"));
    assert!(
        shell.contains("/ui/assets/app.js") && shell.contains("id=\"view\""),
        "{shell}"
    );
    for asset in ["app.js", "app.css"] {
        let (s, body) = call(&agent, "GET", &format!("/ui/assets/{asset}"), "", None);
        assert_eq!(s, 200);
        assert!(!body.is_empty());
    }

    // Without a token: the anonymous policy reads nothing, and the pages say how to sign in.
    let (s, body) = call(&agent, "GET", "/ui/_/jobs", "", None);
    assert_eq!(s, 200, "{body}");
    assert!(
        body.contains("sign in with a token") && !body.contains("shop"),
        "{body}"
    );
    let (s, body) = call(&agent, "GET", "/ui/_/jobs/shop?namespace=default", "", None);
    assert_eq!(s, 403, "{body}");
    assert!(body.contains("Sign in with a token"), "{body}");

    // With the management token: the job, linked, with its allocations' bar.
    let mut index = 0u64;
    agent.wait_until("the jobs page lists the running job", || {
        let (s, body, h) = http_with(
            "GET",
            &format!("{}/ui/_/jobs", agent.http),
            None,
            &[("X-Nomad-Token", &root)],
        )
        .unwrap();
        index = header(&h, "x-nomad-index")
            .and_then(|i| i.parse().ok())
            .unwrap_or(0);
        s == 200 && body.contains("/ui/jobs/shop?namespace=default") && body.contains("1 running")
    });
    assert!(index > 0, "a live page gives its index");

    // The job page links its allocation; the allocation page shows its task's events.
    let (s, body) = call(
        &agent,
        "GET",
        "/ui/_/jobs/shop?namespace=default",
        &root,
        None,
    );
    assert_eq!(s, 200, "{body}");
    let alloc = body
        .split("/ui/allocations/")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("an allocation link")
        .to_string();
    let (s, body) = call(
        &agent,
        "GET",
        &format!("/ui/_/allocations/{alloc}"),
        &root,
        None,
    );
    assert_eq!(s, 200, "{body}");
    assert!(
        body.contains("Task server") && body.contains("Task started by client"),
        "{body}"
    );
    // The clients and topology pages draw from each node's sums, which the node list carries
    // with `allocated=true` (and only then): the running job reserves CPU 20 and memory 20.
    let (s, b) = call(&agent, "GET", "/v1/nodes?allocated=true", &root, None);
    assert_eq!(s, 200, "{b}");
    let used = &json_of(&b)[0]["Allocated"];
    assert_eq!(
        (&used["Allocs"], &used["CpuShares"], &used["MemoryMB"]),
        (&json!(1), &json!(20), &json!(20)),
        "{b}"
    );
    let (_, b) = call(&agent, "GET", "/v1/nodes", &root, None);
    assert!(json_of(&b)[0].get("Allocated").is_none(), "{b}");
    let (s, body) = call(&agent, "GET", "/ui/_/clients", &root, None);
    assert_eq!(s, 200, "{body}");
    assert!(body.contains("20 of "), "{body}");
    for page in [
        "clients",
        "servers",
        "topology",
        "settings/tokens",
        "storage/volumes",
        "storage/plugins",
        "variables",
    ] {
        let (s, body) = call(&agent, "GET", &format!("/ui/_/{page}"), &root, None);
        assert_eq!(s, 200, "{page}: {body}");
    }
    // A variable: its keys listed, its values only behind "Show values".
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/var/app/config",
        &root,
        Some(&json!({"Items": {"db_host": "10.0.0.9"}})),
    );
    assert_eq!(s, 200, "{b}");
    let (s, body) = call(&agent, "GET", "/ui/_/variables", &root, None);
    assert_eq!(s, 200, "{body}");
    assert!(
        body.contains("/ui/variables/app/config?namespace=default"),
        "{body}"
    );
    let (s, body) = call(
        &agent,
        "GET",
        "/ui/_/variables/app/config?namespace=default",
        &root,
        None,
    );
    assert_eq!(s, 200, "{body}");
    let shown = body
        .find("Show values")
        .expect("a disclosure for the values");
    assert!(body.contains("db_host"), "{body}");
    assert!(body.find("10.0.0.9").is_some_and(|at| at > shown), "{body}");
    let (s, _) = call(&agent, "GET", "/ui/_/no/such/page", &root, None);
    assert_eq!(s, 404);

    // Live: a blocking read of the jobs page returns when the jobs change.
    let url = format!("{}/ui/_/jobs?index={index}&wait=20s", agent.http);
    let reader = root.clone();
    let waiter = std::thread::spawn(move || {
        let started = std::time::Instant::now();
        let (s, body, _) = http_with("GET", &url, None, &[("X-Nomad-Token", &reader)]).unwrap();
        (s, body, started.elapsed())
    });
    let mut second = job.clone();
    second["Job"]["ID"] = json!("cart");
    let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&second));
    assert_eq!(s, 200, "{b}");
    let (s, body, took) = waiter.join().unwrap();
    assert_eq!(s, 200, "{body}");
    assert!(body.contains("/ui/jobs/cart?namespace=default"), "{body}");
    assert!(
        took < std::time::Duration::from_secs(20),
        "answered by the change, not by the wait running out"
    );
}

/// `ui { enabled = false }` turns the UI off, as Nomad's; the API stays.
#[test]
fn the_ui_can_be_turned_off() {
    let dir = common::temp_dir("ui-off");
    let data = dir.join("data").display().to_string();
    let cfg = dir.join("ui.hcl");
    std::fs::write(&cfg, "ui {\n  enabled = false\n}\n").unwrap();
    let cfg = cfg.display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data, "-config", &cfg]);
    let (s, _) = call(&agent, "GET", "/ui/jobs", "", None);
    assert_eq!(s, 404);
    let (s, _) = call(&agent, "GET", "/v1/jobs", "", None);
    assert_eq!(s, 200);
}
