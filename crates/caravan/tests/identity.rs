//! Workload identities on a `caravan agent -dev -acl-enabled`: a task's `identity { env file }`
//! gets a JWT signed by the servers in `NOMAD_TOKEN` and `secrets/nomad_token`, with Nomad's
//! claims, whose key is published at `/.well-known/jwks.json`; the token reads the task's own
//! variables and its namespace's services and nothing else, and stops working once its
//! allocation stops.

mod common;

use base64::Engine;
use common::{call, json_of, Agent};
use serde_json::{json, Value};

fn start(name: &str) -> (Agent, String) {
    let dir = common::short_temp_dir(name);
    let data = dir.join("data");
    let agent = Agent::start(
        &dir,
        &[
            "-dev",
            "-acl-enabled",
            "-data-dir",
            &data.display().to_string(),
        ],
    );
    let (status, body) = call(&agent, "POST", "/v1/acl/bootstrap", "", None);
    assert_eq!(status, 200, "{body}");
    let root = json_of(&body)["SecretID"].as_str().unwrap().to_string();
    agent.wait_until("the dev node is ready", || {
        let (s, b) = call(&agent, "GET", "/v1/nodes", &root, None);
        s == 200 && b.contains("\"ready\"")
    });
    (agent, root)
}

/// A raw_exec task that copies its token from the environment and from `secrets/` into
/// `local/`, then waits.
fn job(id: &str) -> Value {
    json!({"Job": {"ID": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "web", "Count": 1,
            "Services": [{"Name": format!("{}-svc", id.replace('*', "x")), "Provider": "nomad"}],
            "Tasks": [{
            "Name": "server", "Driver": "raw_exec",
            "Config": {"command": "/bin/sh", "args": ["-c",
                "printf %s \"$NOMAD_TOKEN\" > local/env_token; cp secrets/nomad_token local/file_token; exec sleep 600"]},
            "Identity": {"Env": true, "File": true},
            "Resources": {"CPU": 20, "MemoryMB": 20}}]}]}})
}

fn claims_of(jwt: &str) -> Value {
    let body = jwt.split('.').nth(1).expect("a JWT has three parts");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(body)
        .expect("base64url claims");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

fn header_of(jwt: &str) -> Value {
    let head = jwt.split('.').next().unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head)
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_tasks_identity_is_a_signed_token_that_reads_only_its_own_variables() {
    let (agent, root) = start("identity");
    for id in ["web", "other"] {
        let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&job(id)));
        assert_eq!(s, 200, "{b}");
    }
    for (path, value) in [
        ("nomad/jobs/web", "job"),
        ("nomad/jobs/web/web/server", "task"),
        ("nomad/jobs/other", "not yours"),
    ] {
        let body = json!({"Items": {"v": value}});
        let (s, b) = call(
            &agent,
            "PUT",
            &format!("/v1/var/{path}"),
            &root,
            Some(&body),
        );
        assert_eq!(s, 200, "{b}");
    }

    // The token, as the task sees it.
    let mut alloc_id = String::new();
    let mut tokens = (String::new(), String::new());
    agent.wait_until("the task wrote its tokens", || {
        let (s, b) = call(&agent, "GET", "/v1/job/web/allocations", &root, None);
        if s != 200 {
            return false;
        }
        let Some(id) = json_of(&b)[0]["ID"].as_str().map(String::from) else {
            return false;
        };
        alloc_id = id;
        let cat = |file: &str| {
            let path = format!("/v1/client/fs/cat/{alloc_id}?path=server/local/{file}");
            let (s, b) = call(&agent, "GET", &path, &root, None);
            (s == 200 && !b.is_empty()).then_some(b)
        };
        match (cat("env_token"), cat("file_token")) {
            (Some(e), Some(f)) => {
                tokens = (e, f);
                true
            }
            _ => false,
        }
    });
    let (env_token, file_token) = tokens;
    assert_eq!(env_token, file_token, "NOMAD_TOKEN and secrets/nomad_token");
    let claims = claims_of(&env_token);
    assert_eq!(claims["nomad_namespace"], "default");
    assert_eq!(claims["nomad_job_id"], "web");
    assert_eq!(claims["nomad_allocation_id"], alloc_id.as_str());
    assert_eq!(claims["nomad_task"], "server");
    assert_eq!(claims["sub"], "global:default:web:web:server:default");
    assert_eq!(claims["aud"], json!(["nomad.io"]));

    // Its key is published.
    let (s, b) = call(&agent, "GET", "/.well-known/jwks.json", "", None);
    assert_eq!(s, 200, "{b}");
    let jwks = json_of(&b);
    let kid = header_of(&env_token)["kid"].clone();
    let key = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["kid"] == kid)
        .unwrap_or_else(|| panic!("no key {kid} in {jwks}"));
    assert_eq!(
        (key["kty"].as_str(), key["crv"].as_str()),
        (Some("OKP"), Some("Ed25519"))
    );
    let (s, b) = call(&agent, "GET", "/.well-known/openid-configuration", "", None);
    assert_eq!(s, 200, "{b}");
    assert!(json_of(&b)["jwks_uri"]
        .as_str()
        .unwrap()
        .ends_with("/.well-known/jwks.json"));

    // What it may do: its own variables and its namespace's services; nothing else.
    let token = env_token.as_str();
    for path in ["nomad/jobs/web", "nomad/jobs/web/web/server"] {
        let (s, b) = call(&agent, "GET", &format!("/v1/var/{path}"), token, None);
        assert_eq!(s, 200, "{path}: {b}");
    }
    let (s, _) = call(&agent, "GET", "/v1/var/nomad/jobs/other", token, None);
    assert_eq!(s, 403, "another job's variable");
    let (s, _) = call(&agent, "GET", "/v1/jobs", token, None);
    assert_eq!(s, 403, "jobs are not the identity's to read");
    agent.wait_until("the service is registered", || {
        let (s, b) = call(&agent, "GET", "/v1/service/web-svc", token, None);
        s == 200 && json_of(&b).as_array().is_some_and(|a| a.len() == 1)
    });

    // The services list shows the namespace's services to it; it makes no one-time tokens.
    let (s, b) = call(&agent, "GET", "/v1/services", token, None);
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("web-svc"), "{b}");
    let (s, _) = call(&agent, "POST", "/v1/acl/token/onetime", token, None);
    assert_eq!(s, 403, "an identity makes no one-time tokens");

    // A job whose ID is a glob gets no more than its own paths.
    let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&job("web*")));
    assert_eq!(s, 200, "{b}");
    let mut glob_token = String::new();
    agent.wait_until("the glob job's task wrote its token", || {
        let (s, b) = call(&agent, "GET", "/v1/job/web*/allocations", &root, None);
        let Some(id) = (s == 200)
            .then(|| json_of(&b)[0]["ID"].as_str().map(String::from))
            .flatten()
        else {
            return false;
        };
        let path = format!("/v1/client/fs/cat/{id}?path=server/local/env_token");
        let (s, b) = call(&agent, "GET", &path, &root, None);
        glob_token = b;
        s == 200 && !glob_token.is_empty()
    });
    for path in [
        "nomad/jobs/web",
        "nomad/jobs/web/web/server",
        "nomad/jobs/other",
    ] {
        let (s, _) = call(&agent, "GET", &format!("/v1/var/{path}"), &glob_token, None);
        assert_eq!(s, 403, "job \"web*\" reading {path}");
    }

    // A token changed by one character is nobody's.
    let mut forged: Vec<u8> = env_token.clone().into_bytes();
    let at = forged.len() - 5;
    forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let (s, b) = call(&agent, "GET", "/v1/var/nomad/jobs/web", &forged, None);
    assert_eq!(s, 403, "{b}");

    // Once the allocation stops, the token is refused.
    let (s, b) = call(&agent, "DELETE", "/v1/job/web", &root, None);
    assert_eq!(s, 200, "{b}");
    agent.wait_until("the stopped allocation's identity is refused", || {
        call(&agent, "GET", "/v1/var/nomad/jobs/web", token, None).0 == 403
    });
}

#[test]
fn identity_settings_that_cannot_work_are_refused_by_field() {
    let (agent, root) = start("identity-refused");
    let mut j = job("consul");
    j["Job"]["TaskGroups"][0]["Tasks"][0]["Identity"]["ServiceName"] = json!("web");
    let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&j));
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("service_name") && b.contains("Consul"), "{b}");
    let mut j = job("nosignal");
    j["Job"]["TaskGroups"][0]["Tasks"][0]["Identity"]["ChangeMode"] = json!("signal");
    let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&j));
    assert_eq!(s, 400, "{b}");
    assert!(b.contains("change_signal"), "{b}");
}

/// A raw_exec task that only waits, with `extra` merged into its group.
fn sleeper(id: &str, group: Value, task: Value) -> Value {
    let mut j = json!({"Job": {"ID": id, "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": [{
            "Name": "t", "Driver": "raw_exec",
            "Config": {"command": "/bin/sleep", "args": ["600"]},
            "Resources": {"CPU": 20, "MemoryMB": 20}}]}]}});
    for (k, v) in group.as_object().unwrap() {
        j["Job"]["TaskGroups"][0][k] = v.clone();
    }
    for (k, v) in task.as_object().unwrap() {
        j["Job"]["TaskGroups"][0]["Tasks"][0][k] = v.clone();
    }
    j
}

fn first_alloc(agent: &Agent, token: &str, job: &str) -> Option<Value> {
    let (s, b) = call(
        agent,
        "GET",
        &format!("/v1/job/{job}/allocations"),
        token,
        None,
    );
    (s == 200)
        .then(|| json_of(&b)[0].clone())
        .filter(|a| a.is_object())
}

#[test]
fn templates_read_services_and_the_tasks_own_variables_through_its_identity() {
    let (agent, root) = start("identity-templates");
    let db = sleeper(
        "db",
        json!({"Networks": [{"DynamicPorts": [{"Label": "db"}]}],
               "Services": [{"Name": "db-svc", "Provider": "nomad", "PortLabel": "db"}]}),
        json!({}),
    );
    let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&db));
    assert_eq!(s, 200, "{b}");
    let body = json!({"Items": {"secret": "s3cr3t"}});
    let (s, b) = call(&agent, "PUT", "/v1/var/nomad/jobs/app", &root, Some(&body));
    assert_eq!(s, 200, "{b}");
    let (s, b) = call(&agent, "PUT", "/v1/var/nomad/jobs/db", &root, Some(&body));
    assert_eq!(s, 200, "{b}");

    let tmpl = "{{ range nomadService \"db-svc\" }}{{ .Address }}:{{ .Port }}{{ end }}\n\
                {{ with nomadVar \"nomad/jobs/app\" }}{{ .secret }}{{ end }}\n";
    let app = sleeper(
        "app",
        json!({}),
        json!({"Templates": [{"EmbeddedTmpl": tmpl, "DestPath": "local/out.txt", "ChangeMode": "noop"}]}),
    );
    let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&app));
    assert_eq!(s, 200, "{b}");

    let db_addr = || -> Option<String> {
        let (s, b) = call(&agent, "GET", "/v1/service/db-svc", &root, None);
        let regs = json_of(&b);
        (s == 200)
            .then(|| regs.as_array().and_then(|a| a.first().cloned()))
            .flatten()
            .map(|r| format!("{}:{}", r["Address"].as_str().unwrap_or(""), r["Port"]))
    };
    let out = |alloc: &str| {
        let path = format!("/v1/client/fs/cat/{alloc}?path=t/local/out.txt");
        let (s, b) = call(&agent, "GET", &path, &root, None);
        (s == 200).then_some(b)
    };
    let mut app_alloc = String::new();
    let mut expected = String::new();
    agent.wait_until("the template rendered the service and the variable", || {
        let Some(a) = first_alloc(&agent, &root, "app") else {
            return false;
        };
        app_alloc = a["ID"].as_str().unwrap_or_default().to_string();
        let Some(addr) = db_addr() else { return false };
        expected = format!("{addr}\ns3cr3t\n");
        out(&app_alloc).as_deref() == Some(expected.as_str())
    });

    // The service goes: the template renders again without it.
    let (s, b) = call(&agent, "DELETE", "/v1/job/db", &root, None);
    assert_eq!(s, 200, "{b}");
    agent.wait_until("the template re-rendered without the service", || {
        out(&app_alloc).as_deref() == Some("\ns3cr3t\n")
    });

    // Another job's variable is not the task's to read: the template fails with the refusal.
    let spy = sleeper(
        "spy",
        json!({"RestartPolicy": {"Attempts": 0, "Mode": "fail"}}),
        json!({"Templates": [{"EmbeddedTmpl": "{{ with nomadVar \"nomad/jobs/db\" }}{{ .secret }}{{ end }}",
                              "DestPath": "local/stolen.txt"}]}),
    );
    let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&spy));
    assert_eq!(s, 200, "{b}");
    agent.wait_until("the spy's template is refused", || {
        first_alloc(&agent, &root, "spy").is_some_and(|a| {
            a["TaskStates"]["t"]["Events"]
                .as_array()
                .is_some_and(|evs| {
                    evs.iter().any(|e| {
                        e["DisplayMessage"]
                            .as_str()
                            .is_some_and(|m| m.contains("403"))
                    })
                })
        })
    });
}

#[test]
fn an_identity_with_a_ttl_expires_and_is_renewed_in_its_file() {
    let (agent, root) = start("identity-ttl");
    let j = sleeper(
        "short",
        json!({}),
        json!({"Identities": [{"Name": "short", "Audience": ["example"], "File": true,
                               "TTL": 4_000_000_000i64, "ChangeMode": "noop"}]}),
    );
    let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&j));
    assert_eq!(s, 200, "{b}");
    let token = || -> Option<String> {
        let alloc = first_alloc(&agent, &root, "short")?;
        let id = alloc["ID"].as_str()?;
        let path = format!("/v1/client/fs/cat/{id}?path=t/secrets/nomad_short.jwt");
        let (s, b) = call(&agent, "GET", &path, &root, None);
        (s == 200 && !b.is_empty()).then_some(b)
    };
    let mut first = String::new();
    agent.wait_until("the named identity is in secrets/", || {
        first = token().unwrap_or_default();
        !first.is_empty()
    });
    let claims = claims_of(&first);
    assert_eq!(claims["aud"], json!(["example"]));
    assert_eq!(claims["sub"], "global:default:short:g:t:short");
    let exp = claims["exp"].as_i64().expect("a ttl gives an exp claim");
    assert_eq!(exp - claims["iat"].as_i64().unwrap(), 4);
    agent.wait_until("the token was renewed before it expired", || {
        token().is_some_and(|t| t != first && claims_of(&t)["exp"].as_i64() > Some(exp))
    });
}

/// `GET path` over the Task API socket at `sock`, with `token` (empty: none): the status and body.
fn over_socket(sock: &str, path: &str, token: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(sock).expect("the Task API socket");
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let auth = if token.is_empty() {
        String::new()
    } else {
        format!("X-Nomad-Token: {token}\r\n")
    };
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n{auth}\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
    (status, body)
}

/// The task's socket path (from `NOMAD_UNIX_ADDR`) and token, once the task wrote them.
fn task_api_of(agent: &Agent, root: &str, job: &str) -> (String, String, String) {
    let mut found = (String::new(), String::new(), String::new());
    agent.wait_until("the task wrote its Task API address and token", || {
        let Some(alloc) = first_alloc(agent, root, job) else {
            return false;
        };
        let id = alloc["ID"].as_str().unwrap_or_default().to_string();
        let cat = |file: &str| {
            let path = format!("/v1/client/fs/cat/{id}?path=t/local/{file}");
            let (s, b) = call(agent, "GET", &path, root, None);
            (s == 200 && !b.trim().is_empty()).then(|| b.trim().to_string())
        };
        match (cat("addr"), cat("token")) {
            (Some(addr), Some(token)) => {
                let sock = addr.strip_prefix("unix://").unwrap_or(&addr).to_string();
                found = (id, sock, token);
                std::path::Path::new(&found.1).exists()
            }
            _ => false,
        }
    });
    found
}

fn task_api_job(id: &str) -> Value {
    sleeper(
        id,
        json!({}),
        json!({
            "Config": {"command": "/bin/sh", "args": ["-c",
                "echo \"$NOMAD_UNIX_ADDR\" > local/addr; printf %s \"$NOMAD_TOKEN\" > local/token; exec sleep 600"]},
            "Identity": {"Env": true},
        }),
    )
}

/// The Task API (`secrets/api.sock`) serves the agent's API to a caller with the task's
/// identity (or an ACL token), as far as that credential goes, and to no one without one.
#[test]
fn the_task_api_socket_serves_the_api_to_the_tasks_identity_only() {
    let (agent, root) = start("task-api");
    for id in ["tapi", "other"] {
        let (s, b) = call(&agent, "PUT", "/v1/jobs", &root, Some(&task_api_job(id)));
        assert_eq!(s, 200, "{b}");
    }
    for path in ["nomad/jobs/tapi", "nomad/jobs/other"] {
        let body = json!({"Items": {"k": path}});
        let (s, b) = call(
            &agent,
            "PUT",
            &format!("/v1/var/{path}"),
            &root,
            Some(&body),
        );
        assert_eq!(s, 200, "{b}");
    }
    let (alloc_id, sock, token) = task_api_of(&agent, &root, "tapi");
    assert!(sock.ends_with("/t/secrets/api.sock"), "{sock}");

    let (s, b) = over_socket(&sock, "/v1/var/nomad/jobs/tapi", &token);
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("nomad/jobs/tapi"), "{b}");
    let (s, b) = over_socket(&sock, "/v1/var/nomad/jobs/other", &token);
    assert_eq!(s, 403, "another job's variable: {b}");
    let (s, b) = over_socket(&sock, "/v1/var/nomad/jobs/tapi", "");
    assert_eq!(s, 403, "no credential: {b}");
    assert!(b.contains("workload identity"), "{b}");
    let (s, _) = over_socket(&sock, "/v1/var/nomad/jobs/tapi", "not-a-token");
    assert_eq!(s, 403);
    // An ACL token is a credential too, with its own rights.
    let (s, b) = over_socket(&sock, "/v1/var/nomad/jobs/other", &root);
    assert_eq!(s, 200, "{b}");

    // The socket goes with the task.
    let (s, b) = call(&agent, "DELETE", "/v1/job/tapi", &root, None);
    assert_eq!(s, 200, "{b}");
    agent.wait_until("the socket is removed once the task stops", || {
        !std::path::Path::new(&sock).exists()
    });
    let _ = alloc_id;
}

/// With ACLs off a credential is still needed: the task's identity.
#[test]
fn the_task_api_needs_a_credential_even_without_acls() {
    // Short: the test connects by the socket's host path, which must fit a socket address.
    let dir = common::short_temp_dir("tao");
    let _leftovers = common::Leftovers::new(&dir);
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data]);
    agent.wait_until("the dev node is ready", || {
        let (s, b) = call(&agent, "GET", "/v1/nodes", "", None);
        s == 200 && b.contains("\"ready\"")
    });
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&task_api_job("open")));
    assert_eq!(s, 200, "{b}");
    let (_, sock, token) = task_api_of(&agent, "", "open");
    let (s, b) = over_socket(&sock, "/v1/job/open", &token);
    assert_eq!(s, 200, "{b}");
    assert!(b.contains("\"ID\":\"open\""), "{b}");
    let (s, _) = over_socket(&sock, "/v1/job/open", "");
    assert_eq!(s, 403);
    let (s, _) = over_socket(&sock, "/v1/job/open", "made-up");
    assert_eq!(s, 403);
}
