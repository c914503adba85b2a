//! ACLs and namespaces end to end on one `caravan agent -dev -acl-enabled` (mock driver): the
//! anonymous caller is refused, bootstrap works once (and again after an operator's reset),
//! a read-only token reads and cannot write, namespace globs and lists follow Nomad's rules,
//! roles, one-time tokens, the CLI, and the limits on what a job may ask for.

mod common;

use common::{call, http_with, json_of, Agent};
use serde_json::{json, Value};

struct Acl {
    agent: Agent,
    data: std::path::PathBuf,
    root: String,
}

fn start(name: &str) -> Acl {
    let dir = common::temp_dir(name);
    let data = dir.join("data");
    let plugin = dir.join("mock.hcl");
    // Short token TTLs are allowed so that expiry can be watched.
    std::fs::write(
        &plugin,
        format!(
            "{}acl {{\n  token_min_expiration_ttl = \"1s\"\n}}\n",
            common::MOCK_DRIVER_CONFIG
        ),
    )
    .unwrap();
    let agent = Agent::start(
        &dir,
        &[
            "-dev",
            "-acl-enabled",
            "-data-dir",
            &data.display().to_string(),
            "-config",
            &plugin.display().to_string(),
        ],
    );
    let (status, body) = call(&agent, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(status, 200, "{body}");
    let root = json_of(&body)["SecretID"].as_str().unwrap().to_string();
    agent.wait_until("the dev node is ready", || {
        let (s, b) = call(&agent, "GET", "/v1/nodes", &root, None);
        s == 200 && b.contains("\"ready\"")
    });
    Acl { agent, data, root }
}

fn mock_job(id: &str, ns: &str) -> Value {
    json!({"Job": {"ID": id, "Namespace": ns, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "10m"},
            "Resources": {"CPU": 10, "MemoryMB": 10}}]}]}})
}

fn policy(acl: &Acl, name: &str, rules: &str) {
    let body = json!({"Name": name, "Rules": rules});
    let (s, b) = call(
        &acl.agent,
        "PUT",
        &format!("/v1/acl/policy/{name}"),
        &acl.root,
        Some(&body),
    );
    assert_eq!(s, 200, "policy {name}: {b}");
}

fn token(acl: &Acl, body: Value) -> String {
    let (s, b) = call(&acl.agent, "POST", "/v1/acl/token", &acl.root, Some(&body));
    assert_eq!(s, 200, "token: {b}");
    json_of(&b)["SecretID"].as_str().unwrap().to_string()
}

fn ids(text: &str, key: &str) -> Vec<String> {
    let mut v: Vec<String> = json_of(text)
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|o| o[key].as_str().unwrap_or_default().to_string())
        .collect();
    v.sort();
    v
}

#[test]
fn acls_protect_every_route_and_filter_lists() {
    let acl = start("acl-main");
    let a = &acl.agent;

    // Anonymous and unknown tokens.
    let (s, b) = call(a, "GET", "/v1/jobs", "", None);
    assert_eq!((s, b.as_str()), (403, "Permission denied"));
    let (s, b) = call(
        a,
        "GET",
        "/v1/jobs",
        "00000000-0000-0000-0000-000000000000",
        None,
    );
    assert_eq!((s, b.as_str()), (403, "ACL token not found"));
    let (s, _) = call(a, "PUT", "/v1/jobs", "", Some(&mock_job("x", "default")));
    assert_eq!(s, 403, "anonymous cannot register");
    let (s, _) = call(a, "GET", "/v1/status/leader", "", None);
    assert_eq!(s, 200, "status is open, as in Nomad");

    // Bootstrap once; again only with the reset index written into the data dir.
    let (s, b) = call(a, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(s, 400, "{b}");
    let reset: u64 = b
        .rsplit("reset index: ")
        .next()
        .and_then(|r| r.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no reset index in {b:?}"));
    std::fs::write(
        acl.data.join("server").join("acl-bootstrap-reset"),
        reset.to_string(),
    )
    .unwrap();
    let secret = "6a1c3c6e-3b7e-4a43-9b1a-8f0e2d7c5b11";
    let (s, b) = call(
        a,
        "POST",
        "/v1/acl/bootstrap",
        "",
        Some(&json!({"BootstrapSecret": secret})),
    );
    assert_eq!(s, 200, "bootstrap after reset: {b}");
    assert_eq!(
        json_of(&b)["SecretID"],
        secret,
        "the operator's secret is used"
    );
    let (s, _) = call(a, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(s, 400, "the reset index is spent");

    // Namespaces: jobs only in namespaces that exist; `default` cannot go.
    for ns in ["prod-web", "prod-db", "dev"] {
        let (s, b) = call(
            a,
            "PUT",
            &format!("/v1/namespace/{ns}"),
            &acl.root,
            Some(&json!({"Description": ns})),
        );
        assert_eq!(s, 200, "{b}");
    }
    let (s, b) = call(
        a,
        "PUT",
        "/v1/jobs",
        &acl.root,
        Some(&mock_job("ghost", "nowhere")),
    );
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("does not exist"), "{b}");
    for (id, ns) in [
        ("web", "prod-web"),
        ("db", "prod-db"),
        ("tool", "dev"),
        ("base", "default"),
    ] {
        let (s, b) = call(a, "PUT", "/v1/jobs", &acl.root, Some(&mock_job(id, ns)));
        assert_eq!(s, 200, "{b}");
    }
    let (s, b) = call(a, "DELETE", "/v1/namespace/dev", &acl.root, None);
    assert_eq!(s, 409, "a namespace with a live job stays: {b}");
    let (s, _) = call(a, "DELETE", "/v1/namespace/default", &acl.root, None);
    assert_eq!(s, 409);

    // A read-only token over a glob, with an exact deny winning over it.
    policy(
        &acl,
        "prod-read",
        r#"
namespace "prod-*" { policy = "read" }
namespace "prod-db" { policy = "deny" }
node { policy = "read" }
"#,
    );
    let ro = token(
        &acl,
        json!({"Name": "ro", "Type": "client", "Policies": ["prod-read"]}),
    );
    let (s, b) = call(a, "GET", "/v1/jobs?namespace=*", &ro, None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        ids(&b, "ID"),
        ["web"],
        "lists filter what the token may not see"
    );
    let (s, _) = call(a, "GET", "/v1/jobs?namespace=prod-web", &ro, None);
    assert_eq!(s, 200);
    let (s, _) = call(a, "GET", "/v1/jobs?namespace=prod-db", &ro, None);
    assert_eq!(s, 403, "the exact deny beats the glob");
    let (s, _) = call(a, "GET", "/v1/job/web?namespace=prod-web", &ro, None);
    assert_eq!(s, 200);
    let (s, _) = call(a, "GET", "/v1/job/base", &ro, None);
    assert_eq!(s, 403, "no rule for default");
    let (s, _) = call(
        a,
        "PUT",
        "/v1/jobs",
        &ro,
        Some(&mock_job("web", "prod-web")),
    );
    assert_eq!(s, 403, "read cannot write");
    let (s, _) = call(a, "DELETE", "/v1/job/web?namespace=prod-web", &ro, None);
    assert_eq!(s, 403);
    let (s, _) = call(a, "GET", "/v1/nodes", &ro, None);
    assert_eq!(s, 200, "node read");
    let (s, _) = call(a, "PUT", "/v1/node/x/eligibility", &ro, Some(&json!({})));
    assert_eq!(s, 403, "node write");
    let (s, _) = call(a, "GET", "/v1/agent/self", &ro, None);
    assert_eq!(s, 403, "agent:read is needed");
    let (s, b) = call(a, "GET", "/v1/namespaces", &ro, None);
    assert_eq!(s, 200);
    assert_eq!(
        ids(&b, "Name"),
        ["prod-web"],
        "namespaces the token may use"
    );
    let (s, b) = call(a, "GET", "/v1/allocations?namespace=*", &ro, None);
    assert_eq!(s, 200);
    for alloc in json_of(&b).as_array().unwrap() {
        assert_eq!(alloc["Namespace"], "prod-web", "{alloc}");
    }
    let (s, b) = call(a, "GET", "/v1/acl/policies", &ro, None);
    assert_eq!(
        (s, ids(&b, "Name")),
        (200, vec!["prod-read".to_string()]),
        "own policies only"
    );
    let (s, _) = call(a, "GET", "/v1/acl/tokens", &ro, None);
    assert_eq!(s, 403);
    let (s, _) = call(
        a,
        "PUT",
        "/v1/acl/policy/mine",
        &ro,
        Some(&json!({"Rules": "node { policy = \"write\" }"})),
    );
    assert_eq!(s, 403, "only management writes policies");
    let (s, b) = call(a, "GET", "/v1/acl/token/self", &ro, None);
    assert_eq!((s, json_of(&b)["Name"].clone()), (200, json!("ro")));

    // The path is checked as the handlers read it: encoded slashes, trailing slashes and repeated
    // namespaces do not change what is checked.
    // The db job's evaluation may still be queued on a busy machine: wait for its allocation.
    let db_allocation = || {
        let allocs = json_of(&call(a, "GET", "/v1/allocations?namespace=*", &acl.root, None).1);
        allocs.as_array().and_then(|all| {
            all.iter()
                .find(|x| x["Namespace"] == "prod-db")
                .and_then(|x| x["ID"].as_str().map(str::to_string))
        })
    };
    a.wait_until("the db job's allocation", || db_allocation().is_some());
    let db_alloc = db_allocation().expect("the db allocation");
    let (s, _) = call(a, "GET", &format!("/v1/allocation/{db_alloc}"), &ro, None);
    assert_eq!(s, 403, "denied namespace");
    let encoded: String = db_alloc.replace('-', "%2D");
    let (s, _) = call(a, "GET", &format!("/v1/allocation/{encoded}"), &ro, None);
    assert_eq!(s, 403, "percent-encoding does not hide the allocation");
    let (s, _) = call(
        a,
        "PUT",
        &format!("/v1/allocation/{db_alloc}%2Fstop"),
        "",
        None,
    );
    assert_eq!(s, 403, "an encoded action is still the action");
    let (s, _) = call(
        a,
        "GET",
        "/v1/allocation/00000000-0000-0000-0000-000000000000",
        &ro,
        None,
    );
    assert_eq!(s, 404, "an unknown allocation is not a pass");
    let (s, _) = call(
        a,
        "PUT",
        "/v1/job/pwn/summary/",
        &ro,
        Some(&mock_job("pwn/summary/", "prod-web")),
    );
    assert_eq!(s, 404, "a trailing slash is no route");
    let (s, _) = call(
        a,
        "PUT",
        "/v1/jobs?namespace=prod-web&namespace=prod-db",
        &ro,
        Some(&mock_job("x", "prod-web")),
    );
    assert_eq!(s, 400, "a repeated namespace is refused");

    // Authorization: Bearer works too.
    let url = format!("{}/v1/jobs?namespace=prod-web", a.http);
    let bearer = format!("Bearer {ro}");
    let (s, _, _) = http_with("GET", &url, None, &[("Authorization", &bearer)]).unwrap();
    assert_eq!(s, 200);

    // A write token on one namespace, through a role.
    policy(&acl, "dev-write", r#"namespace "dev" { policy = "write" }"#);
    let (s, b) = call(
        a,
        "POST",
        "/v1/acl/role",
        &acl.root,
        Some(&json!({"Name": "devs", "Policies": [{"Name": "dev-write"}]})),
    );
    assert_eq!(s, 200, "{b}");
    let dev = token(&acl, json!({"Type": "client", "Roles": [{"Name": "devs"}]}));
    let (s, b) = call(a, "PUT", "/v1/jobs", &dev, Some(&mock_job("tool", "dev")));
    assert_eq!(s, 200, "write through the role: {b}");
    let (s, _) = call(
        a,
        "PUT",
        "/v1/jobs?namespace=prod-web",
        &dev,
        Some(&mock_job("tool", "dev")),
    );
    assert_eq!(
        s, 403,
        "the query's namespace is where the job lands, and it is not dev"
    );
    let (s, _) = call(
        a,
        "PUT",
        "/v1/jobs",
        &dev,
        Some(&mock_job("tool", "prod-web")),
    );
    assert_eq!(s, 403);

    // The anonymous policy opens what it names, and only that.
    policy(&acl, "anonymous", r#"node { policy = "read" }"#);
    let (s, _) = call(a, "GET", "/v1/nodes", "", None);
    assert_eq!(s, 200);
    let (s, _) = call(a, "GET", "/v1/jobs", "", None);
    assert_eq!(s, 403);

    // One-time tokens: exchanged once.
    let (s, b) = call(a, "POST", "/v1/acl/token/onetime", &ro, None);
    assert_eq!(s, 200, "{b}");
    let ott = json_of(&b)["OneTimeToken"]["OneTimeSecretID"]
        .as_str()
        .unwrap()
        .to_string();
    let body = json!({"OneTimeSecretID": ott});
    let (s, b) = call(a, "POST", "/v1/acl/token/onetime/exchange", "", Some(&body));
    assert_eq!(s, 200, "{b}");
    assert_eq!(json_of(&b)["Token"]["SecretID"], ro.as_str());
    let (s, _) = call(a, "POST", "/v1/acl/token/onetime/exchange", "", Some(&body));
    assert_eq!(s, 403, "used up");

    // A deleted token stops working at once.
    let (s, b) = call(a, "GET", "/v1/acl/token/self", &dev, None);
    assert_eq!(s, 200);
    let accessor = json_of(&b)["AccessorID"].as_str().unwrap().to_string();
    let (s, _) = call(
        a,
        "DELETE",
        &format!("/v1/acl/token/{accessor}"),
        &acl.root,
        None,
    );
    assert_eq!(s, 200);
    let (s, b) = call(a, "GET", "/v1/jobs?namespace=dev", &dev, None);
    assert_eq!((s, b.as_str()), (403, "ACL token not found"));

    // A token's TTL must be within the server's bounds.
    let (s, b) = call(
        a,
        "POST",
        "/v1/acl/token",
        &acl.root,
        Some(&json!({"Type": "client", "Policies": ["prod-read"], "ExpirationTTL": 1_000_000u64})),
    );
    assert_eq!(s, 400, "below the 1s minimum: {b}");
    let (s, b) = call(
        a,
        "POST",
        "/v1/acl/token",
        &acl.root,
        Some(
            &json!({"Type": "client", "Policies": ["prod-read"], "ExpirationTTL": 3_600_000_000_000u64}),
        ),
    );
    assert_eq!(s, 200, "{b}");
    assert!(json_of(&b)["ExpirationTime"].is_string(), "{b}");

    // A token past its expiry is refused at once, and collected by the leader.
    let (s, b) = call(
        a,
        "POST",
        "/v1/acl/token",
        &acl.root,
        Some(
            &json!({"Name": "brief", "Type": "client", "Policies": ["prod-read"],
            "ExpirationTTL": 2_000_000_000u64}),
        ),
    );
    assert_eq!(s, 200, "{b}");
    let brief = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let (s, _) = call(a, "GET", "/v1/jobs?namespace=prod-web", &brief, None);
    assert_eq!(s, 200, "live before its expiry");
    a.wait_until("the brief token to expire", || {
        call(a, "GET", "/v1/jobs?namespace=prod-web", &brief, None)
            == (403, "ACL token expired".to_string())
    });
    common::wait_for(
        "the expired token to be collected",
        std::time::Duration::from_secs(90),
        std::time::Duration::from_millis(500),
        || {
            let (_, b) = call(a, "GET", "/v1/acl/tokens", &acl.root, None);
            !b.contains("\"brief\"")
        },
    );
}

#[test]
fn the_cli_speaks_acl_and_namespace_and_limits_hold() {
    let acl = start("acl-cli");
    let a = &acl.agent;
    let run = |token: &str, args: &[&str]| {
        let out = std::process::Command::new(common::bin())
            .args(args)
            .env("NOMAD_ADDR", &a.http)
            .env("NOMAD_TOKEN", token)
            .output()
            .expect("caravan runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let dir = common::temp_dir("acl-cli-files");
    let rules = dir.join("ro.hcl");
    std::fs::write(&rules, "namespace \"default\" {\n  policy = \"read\"\n}\n").unwrap();
    let (c, o, e) = run(
        &acl.root,
        &[
            "acl",
            "policy",
            "apply",
            "-description",
            "read only",
            "ro",
            &rules.display().to_string(),
        ],
    );
    assert_eq!(c, 0, "{o}{e}");
    let (c, o, _) = run(&acl.root, &["acl", "policy", "list"]);
    assert_eq!(c, 0);
    assert!(o.contains("ro") && o.contains("read only"), "{o}");
    let (c, o, e) = run(
        &acl.root,
        &["acl", "token", "create", "-name", "reader", "-policy", "ro"],
    );
    assert_eq!(c, 0, "{e}");
    let secret = o
        .lines()
        .find(|l| l.starts_with("Secret ID"))
        .and_then(|l| l.split('=').nth(1))
        .map(|s| s.trim().to_string())
        .expect("a secret");
    let (c, o, _) = run(&secret, &["acl", "token", "self"]);
    assert_eq!(c, 0);
    assert!(
        o.contains("reader") && o.contains("Policies     = ro"),
        "{o}"
    );
    let (c, _, e) = run(&secret, &["acl", "token", "list"]);
    assert_eq!(c, 1, "a client token cannot list tokens");
    assert!(e.contains("Permission denied"), "{e}");
    let (c, _, e) = run("", &["job", "status"]);
    assert_eq!(c, 1);
    assert!(e.contains("403") && e.contains("Permission denied"), "{e}");

    let (c, o, e) = run(
        &acl.root,
        &["namespace", "apply", "-description", "team a", "team-a"],
    );
    assert_eq!(c, 0, "{o}{e}");
    let (c, o, _) = run(&acl.root, &["namespace", "list"]);
    assert_eq!(c, 0);
    assert!(
        o.contains("team-a") && o.contains("team a") && o.contains("default"),
        "{o}"
    );
    let (c, o, _) = run(&acl.root, &["namespace", "status", "team-a"]);
    assert!(c == 0 && o.contains("Description = team a"), "{o}");
    let (c, _, _) = run(&acl.root, &["namespace", "delete", "team-a"]);
    assert_eq!(c, 0);
    let (c, _, e) = run(&acl.root, &["namespace", "inspect", "team-a"]);
    assert_eq!(c, 1, "{e}");

    // job_max_count: a billion allocations is refused at register, as Nomad words it.
    let mut job = mock_job("huge", "default");
    job["Job"]["TaskGroups"][0]["Count"] = json!(1_000_000_000);
    let (s, b) = call(a, "PUT", "/v1/jobs", &acl.root, Some(&job));
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("job_max_count: 1000000000 > 50000"), "{b}");
    let (s, _) = call(a, "GET", "/v1/job/huge", &acl.root, None);
    assert_eq!(s, 404, "nothing was written");

    // agent/self shows its config to agent:read, without secrets.
    let (s, b) = call(a, "GET", "/v1/agent/self", &acl.root, None);
    assert_eq!(s, 200);
    assert!(json_of(&b)["config"].is_object(), "{b}");
}
