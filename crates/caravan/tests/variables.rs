//! Variables end to end on one `caravan agent -server -acl-enabled`: the API (check-and-set with
//! 409 and the conflicting variable, locks, lists with prefixes and pages, ACL path rules), the
//! CLI (`var put|get|list|purge|lock`, `operator root keyring`), and encryption at rest: a secret
//! written as a variable appears in no file under the data dir nor in a saved snapshot, and comes
//! back after a restore onto a fresh server.

mod common;

use common::{call, http_with, json_of, temp_dir, Agent};
use serde_json::json;
use std::path::Path;

const SECRET: &str = "correct-horse-battery-staple-7f3a";

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                if bytes.windows(needle.len()).any(|w| w == needle) {
                    hits.push(p.display().to_string());
                }
            }
        }
    }
    hits
}

fn run(agent: &Agent, token: &str, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(common::bin())
        .args(args)
        .env("NOMAD_ADDR", &agent.http)
        .env("NOMAD_TOKEN", token)
        .output()
        .expect("caravan runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn variables_are_encrypted_at_rest_checked_and_set_locked_and_acl_filtered() {
    let dir = temp_dir("variables");
    let data = dir.join("data");
    let agent = Agent::start(
        &dir,
        &[
            "-server",
            "-acl-enabled",
            "-data-dir",
            &data.display().to_string(),
        ],
    );
    let (s, b) = call(&agent, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(s, 200, "{b}");
    let root = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let root = root.as_str();

    // The leader made the first root key.
    agent.wait_until("an active root key", || {
        let (s, b) = call(&agent, "GET", "/v1/operator/keyring/keys", root, None);
        s == 200 && b.contains("\"active\"")
    });

    // Create, read back, list.
    let body = json!({"Items": {"user": "app", "password": SECRET}});
    let (s, b) = call(&agent, "PUT", "/v1/var/app/db", root, Some(&body));
    assert_eq!(s, 200, "{b}");
    let created = json_of(&b);
    assert_eq!(created["Items"]["password"], SECRET);
    let index = created["ModifyIndex"].as_u64().unwrap();
    assert!(
        index > 0 && created["CreateIndex"] == created["ModifyIndex"],
        "{b}"
    );
    let (s, b) = call(&agent, "GET", "/v1/var/app/db", root, None);
    assert_eq!(
        (s, json_of(&b)["Items"]["user"].clone()),
        (200, json!("app")),
        "{b}"
    );
    let (s, b) = call(&agent, "GET", "/v1/var/app/missing", root, None);
    assert_eq!(s, 404, "{b}");
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/var/app/empty",
        root,
        Some(&json!({"Items": {}})),
    );
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("Items"), "{b}");
    let (s, b) = call(&agent, "PUT", "/v1/var/bad.path", root, Some(&body));
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("invalid path"), "{b}");

    // Check-and-set: a stale index is a 409 with the variable as it stands; the right one writes.
    let (s, b) = call(&agent, "PUT", "/v1/var/app/db?cas=0", root, Some(&body));
    assert_eq!(s, 409, "create-only on an existing variable: {b}");
    assert_eq!(json_of(&b)["ModifyIndex"].as_u64(), Some(index), "{b}");
    let stale = format!("/v1/var/app/db?cas={}", index + 100);
    let (s, _) = call(&agent, "PUT", &stale, root, Some(&body));
    assert_eq!(s, 409);
    let fresh = format!("/v1/var/app/db?cas={index}");
    let (s, b) = call(
        &agent,
        "PUT",
        &fresh,
        root,
        Some(&json!({"Items": {"user": "app2", "password": SECRET}})),
    );
    assert_eq!(s, 200, "{b}");
    let index2 = json_of(&b)["ModifyIndex"].as_u64().unwrap();
    assert!(index2 > index);
    let (s, _) = call(
        &agent,
        "DELETE",
        &format!("/v1/var/app/db?cas={index}"),
        root,
        None,
    );
    assert_eq!(s, 409, "a delete with a stale index is refused");

    // Lists: prefix, pages, metadata only.
    for p in ["app/a", "app/b", "app/c", "other/x"] {
        let (s, b) = call(
            &agent,
            "PUT",
            &format!("/v1/var/{p}"),
            root,
            Some(&json!({"Items": {"k": "v"}})),
        );
        assert_eq!(s, 200, "{b}");
    }
    let (s, b) = call(&agent, "GET", "/v1/vars?prefix=app/", root, None);
    assert_eq!(s, 200, "{b}");
    let paths: Vec<String> = json_of(&b)
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["Path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(paths, ["app/a", "app/b", "app/c", "app/db"]);
    assert!(!b.contains("Items"), "a list never carries items: {b}");
    let url = format!("{}/v1/vars?prefix=app/&per_page=3", agent.http);
    let (s, b, headers) = http_with("GET", &url, None, &[("X-Nomad-Token", root)]).unwrap();
    assert_eq!((s, json_of(&b).as_array().unwrap().len()), (200, 3), "{b}");
    assert_eq!(
        common::header(&headers, "x-nomad-nexttoken").as_deref(),
        Some("app/db")
    );

    // ACLs: a token that may read and list app/* only.
    let rules =
        r#"namespace "default" { variables { path "app/*" { capabilities = ["read", "list"] } } }"#;
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/acl/policy/app-read",
        root,
        Some(&json!({"Name": "app-read", "Rules": rules})),
    );
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(
        &agent,
        "POST",
        "/v1/acl/token",
        root,
        Some(&json!({"Name": "r", "Type": "client", "Policies": ["app-read"]})),
    );
    assert_eq!(s, 200, "{b}");
    let reader = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let reader = reader.as_str();
    assert_eq!(call(&agent, "GET", "/v1/var/app/db", reader, None).0, 200);
    assert_eq!(call(&agent, "GET", "/v1/var/other/x", reader, None).0, 403);
    assert_eq!(
        call(&agent, "PUT", "/v1/var/app/db", reader, Some(&body)).0,
        403
    );
    assert_eq!(
        call(&agent, "DELETE", "/v1/var/app/db", reader, None).0,
        403
    );
    let (_, b) = call(&agent, "GET", "/v1/vars", reader, None);
    assert!(
        b.contains("app/db") && !b.contains("other/x"),
        "the list is filtered: {b}"
    );
    assert_eq!(
        call(&agent, "GET", "/v1/var/app/db", "", None).0,
        403,
        "anonymous"
    );

    // Locks: acquire, a second acquire conflicts, writes without the lock ID conflict, renew and
    // release by ID; the items stay.
    let lock_req = json!({"Lock": {"TTL": "15s", "LockDelay": "15s"}});
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/var/locks/leader?lock-acquire",
        root,
        Some(&lock_req),
    );
    assert_eq!(s, 200, "{b}");
    let lock_id = json_of(&b)["Lock"]["ID"].as_str().unwrap().to_string();
    assert_eq!(json_of(&b)["Lock"]["TTL"], "15s", "{b}");
    let (s, _) = call(
        &agent,
        "PUT",
        "/v1/var/locks/leader?lock-acquire",
        root,
        Some(&lock_req),
    );
    assert_eq!(s, 409, "the lock is held");
    let (s, _) = call(
        &agent,
        "PUT",
        "/v1/var/locks/leader",
        root,
        Some(&json!({"Items": {"a": "b"}})),
    );
    assert_eq!(s, 409, "a write without the lock ID");
    let (s, _) = call(&agent, "DELETE", "/v1/var/locks/leader", root, None);
    assert_eq!(s, 409, "a delete without the lock ID");
    let with_id = json!({"Lock": {"ID": lock_id}});
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/var/locks/leader?lock-renew",
        root,
        Some(&with_id),
    );
    assert_eq!(s, 200, "{b}");
    let (s, _) = call(
        &agent,
        "PUT",
        "/v1/var/locks/leader?lock-renew",
        root,
        Some(&json!({"Lock": {"ID": "not-it"}})),
    );
    assert_eq!(s, 409);
    // The holder writes by naming the lock's ID (a TTL in a write is refused: locks are made by
    // lock-acquire only).
    let holder_write = json!({"Items": {"owner": "me"}, "Lock": {"ID": lock_id}});
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/var/locks/leader",
        root,
        Some(&holder_write),
    );
    assert_eq!(s, 200, "the holder writes: {b}");
    let with_ttl = json!({"Items": {"a": "b"}, "Lock": {"ID": lock_id, "TTL": "20s"}});
    let (s, b) = call(&agent, "PUT", "/v1/var/locks/leader", root, Some(&with_ttl));
    assert_eq!(s, 400, "{b}");
    // Only management tokens and the holder see the lock's ID: a token that may read, list and
    // write every path does not get it from a read, a list or a conflict.
    let rules = r#"namespace "default" { variables { path "*" { capabilities = ["read", "list", "write"] } } }"#;
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/acl/policy/rw",
        root,
        Some(&json!({"Name": "rw", "Rules": rules})),
    );
    assert_eq!(s, 200, "{b}");
    let (_, b) = call(
        &agent,
        "POST",
        "/v1/acl/token",
        root,
        Some(&json!({"Name": "rw", "Type": "client", "Policies": ["rw"]})),
    );
    let rw = json_of(&b)["SecretID"].as_str().unwrap().to_string();
    let (s, b) = call(&agent, "GET", "/v1/var/locks/leader", &rw, None);
    assert_eq!(s, 200, "{b}");
    assert!(
        !b.contains(&lock_id) && json_of(&b).get("Lock").is_none(),
        "{b}"
    );
    let (_, b) = call(&agent, "GET", "/v1/vars?prefix=locks", &rw, None);
    assert!(!b.contains(&lock_id), "{b}");
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/var/locks/leader?lock-acquire",
        &rw,
        Some(&lock_req),
    );
    assert_eq!(s, 409, "{b}");
    assert!(!b.contains(&lock_id), "{b}");
    let (_, b) = call(&agent, "GET", "/v1/var/locks/leader", root, None);
    assert_eq!(
        json_of(&b)["Lock"]["ID"],
        json!(lock_id),
        "management sees it: {b}"
    );
    let release_with_items = json!({"Lock": {"ID": lock_id}, "Items": {"x": "y"}});
    let (s, _) = call(
        &agent,
        "PUT",
        "/v1/var/locks/leader?lock-release",
        root,
        Some(&release_with_items),
    );
    assert_eq!(s, 400, "a release carries no items");
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/var/locks/leader?lock-release",
        root,
        Some(&with_id),
    );
    assert_eq!(s, 200, "{b}");
    assert!(json_of(&b).get("Lock").is_none(), "{b}");
    let (s, _) = call(
        &agent,
        "PUT",
        "/v1/var/locks/leader?lock-acquire&cas=1",
        root,
        Some(&lock_req),
    );
    assert_eq!(s, 400, "cas with a lock operation");
    let (s, b) = call(&agent, "PUT", "/v1/var/nomad/other", root, Some(&body));
    assert_eq!(s, 400, "the reserved nomad/ directory: {b}");
    assert_eq!(
        call(&agent, "PUT", "/v1/var/nomad/jobs/web", root, Some(&body)).0,
        200
    );
    assert_eq!(
        call(&agent, "DELETE", "/v1/var/nomad/jobs/web", root, None).0,
        204
    );

    // A lock nobody renews expires after its TTL, is held through its delay, then released with
    // its items kept; the lost holder's renewal is refused.
    let short = json!({"Lock": {"TTL": "10s", "LockDelay": "1s"}, "Items": {"kept": "yes"}});
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/var/locks/short?lock-acquire",
        root,
        Some(&short),
    );
    assert_eq!(s, 200, "{b}");
    let short_id = json_of(&b)["Lock"]["ID"].as_str().unwrap().to_string();
    common::wait_for(
        "the unrenewed lock to be released",
        std::time::Duration::from_secs(60),
        std::time::Duration::from_millis(250),
        || {
            let (_, b) = call(&agent, "GET", "/v1/var/locks/short", root, None);
            json_of(&b).get("Lock").is_none()
        },
    );
    let (_, b) = call(&agent, "GET", "/v1/var/locks/short", root, None);
    assert_eq!(json_of(&b)["Items"]["kept"], "yes", "{b}");
    let renew_lost = json!({"Lock": {"ID": short_id}});
    let (s, _) = call(
        &agent,
        "PUT",
        "/v1/var/locks/short?lock-renew",
        root,
        Some(&renew_lost),
    );
    assert_eq!(s, 409, "a lost lock is not renewed");
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/var/locks/short?lock-acquire",
        root,
        Some(&short),
    );
    assert_eq!(s, 200, "free again: {b}");

    // A namespace holding variables cannot be deleted (a namespace made again later must not
    // inherit them).
    let (s, b) = call(
        &agent,
        "PUT",
        "/v1/namespace/team",
        root,
        Some(&json!({"Name": "team"})),
    );
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        call(&agent, "PUT", "/v1/var/x?namespace=team", root, Some(&body)).0,
        200
    );
    let (s, b) = call(&agent, "DELETE", "/v1/namespace/team", root, None);
    assert_eq!(s, 409, "{b}");
    assert!(b.contains("variable"), "{b}");
    assert_eq!(
        call(&agent, "DELETE", "/v1/var/x?namespace=team", root, None).0,
        204
    );
    assert_eq!(
        call(&agent, "DELETE", "/v1/namespace/team", root, None).0,
        200
    );

    // The CLI.
    let (code, out, err) = run(&agent, root, &["var", "put", "cli/one", "a=1", "b=2"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Created variable \"cli/one\""), "{out}");
    let (code, _, err) = run(&agent, root, &["var", "put", "cli/one", "a=3"]);
    assert_eq!(
        code, 1,
        "an existing variable is not overwritten without -force"
    );
    assert!(err.contains("Check-and-Set conflict"), "{err}");
    let (code, out, err) = run(&agent, root, &["var", "put", "-force", "cli/one", "a=3"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = run(&agent, root, &["var", "get", "-item", "a", "cli/one"]);
    assert_eq!((code, out.trim()), (0, "3"));
    let (code, out, _) = run(&agent, root, &["var", "get", "-out", "table", "cli/one"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Path") && out.contains("cli/one") && out.contains("Items"),
        "{out}"
    );
    let (code, out, _) = run(&agent, root, &["var", "list", "cli/"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("Namespace") && out.contains("cli/one"),
        "{out}"
    );
    assert!(out.ends_with('\n'), "the table ends its last line: {out:?}");
    let (code, out, err) = run(&agent, root, &["var", "lock", "cli/lock", "true"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = run(&agent, root, &["var", "purge", "cli/one"]);
    assert_eq!(code, 0);
    assert!(out.contains("Successfully purged"), "{out}");
    assert_eq!(call(&agent, "GET", "/v1/var/cli/one", root, None).0, 404);

    // At rest: the secret is in no file of the data dir (Raft log, state) nor in a snapshot.
    let snap = dir.join("state.snap");
    let (code, out, err) = run(
        &agent,
        root,
        &["operator", "snapshot", "save", &snap.display().to_string()],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(snap.metadata().unwrap().len() > 0);
    assert_eq!(
        files_containing(&data, SECRET.as_bytes()),
        Vec::<String>::new()
    );
    assert_eq!(
        files_containing(&dir, SECRET.as_bytes()),
        Vec::<String>::new()
    );

    // Keyring: rotate, the old key cannot go while it seals variables; -full re-encrypts them and
    // then it can; every variable still reads.
    let (code, out, err) = run(
        &agent,
        root,
        &["operator", "root", "keyring", "list", "-json"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let old = json_of(&out)[0]["KeyID"].as_str().unwrap().to_string();
    let (code, out, err) = run(&agent, root, &["operator", "root", "keyring", "rotate"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, _, err) = run(
        &agent,
        root,
        &["operator", "root", "keyring", "remove", &old],
    );
    assert_eq!(code, 1, "the old key still seals variables");
    assert!(err.contains("still seals"), "{err}");
    let (code, out, err) = run(
        &agent,
        root,
        &["operator", "root", "keyring", "rotate", "-full"],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run(
        &agent,
        root,
        &["operator", "root", "keyring", "remove", &old],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (s, b) = call(&agent, "GET", "/v1/var/app/db", root, None);
    assert_eq!(
        (s, json_of(&b)["Items"]["password"].clone()),
        (200, json!(SECRET)),
        "{b}"
    );

    // A restore onto a fresh server brings variables and their keys.
    let snap2 = dir.join("state2.snap");
    let (code, out, err) = run(
        &agent,
        root,
        &["operator", "snapshot", "save", &snap2.display().to_string()],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        files_containing(&dir, SECRET.as_bytes()),
        Vec::<String>::new()
    );
    let fresh_dir = temp_dir("variables-restore");
    let fresh_data = fresh_dir.join("data").display().to_string();
    let fresh = Agent::start(&fresh_dir, &["-server", "-data-dir", &fresh_data]);
    let (code, out, err) = run(
        &fresh,
        "",
        &[
            "operator",
            "snapshot",
            "restore",
            &snap2.display().to_string(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (s, b) = call(&fresh, "GET", "/v1/var/app/db", "", None);
    assert_eq!(
        (s, json_of(&b)["Items"]["password"].clone()),
        (200, json!(SECRET)),
        "{b}"
    );
}
