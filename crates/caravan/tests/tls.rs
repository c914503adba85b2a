//! Mutual TLS end to end: certificates made by `caravan tls`, three servers and a client agent
//! with `tls { http = true rpc = true verify_server_hostname = true }`, the CLI over https, and
//! what a wrong peer gets — a client certificate cannot act as a server, a plain-TCP peer gets
//! nothing, an https API without a client certificate refuses the CLI.

mod common;

use common::Agent;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

fn caravan_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(common::bin())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("caravan runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn make(dir: &Path) -> Certs {
        std::fs::create_dir_all(dir).unwrap();
        for args in [
            &["tls", "ca", "create"][..],
            &["tls", "cert", "create", "-server"],
            &["tls", "cert", "create", "-client"],
            &["tls", "cert", "create", "-cli"],
        ] {
            let (code, out, err) = caravan_in(dir, args);
            assert_eq!(code, 0, "{args:?}: {out}{err}");
        }
        Certs {
            dir: dir.to_path_buf(),
        }
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn agent_tls(&self, kind: &str) -> String {
        format!(
            "tls {{\n  http = true\n  rpc = true\n  ca_file = \"{}\"\n  cert_file = \"{}\"\n  key_file = \"{}\"\n  verify_server_hostname = true\n  verify_https_client = true\n}}\n",
            self.path("nomad-agent-ca.pem"),
            self.path(&format!("global-{kind}-nomad.pem")),
            self.path(&format!("global-{kind}-nomad-key.pem")),
        )
    }
}

/// `caravan ARGS` against `agent` over https with the CLI certificate.
fn cli(certs: &Certs, agent: &Agent, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(common::bin())
        .args(args)
        .env("NOMAD_ADDR", https(agent))
        .env("NOMAD_CACERT", certs.path("nomad-agent-ca.pem"))
        .env("NOMAD_CLIENT_CERT", certs.path("global-cli-nomad.pem"))
        .env("NOMAD_CLIENT_KEY", certs.path("global-cli-nomad-key.pem"))
        .output()
        .expect("caravan runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn https(agent: &Agent) -> String {
    agent.http.replacen("http://", "https://", 1)
}

fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    common::wait_for(
        what,
        Duration::from_secs(120),
        Duration::from_millis(200),
        &mut cond,
    );
}

#[test]
fn a_tls_cluster_works_and_refuses_the_wrong_peers() {
    let root = common::temp_dir("tls-cluster");
    let certs = Certs::make(&root.join("certs"));
    let server_tls = root.join("server-tls.hcl");
    std::fs::write(
        &server_tls,
        format!(
            "{}server {{\n  enabled = true\n  bootstrap_expect = 3\n}}\n",
            certs.agent_tls("server")
        ),
    )
    .unwrap();
    let servers: Vec<Agent> = (0..3)
        .map(|i| {
            let dir = root.join(format!("s{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let data = dir.join("data").display().to_string();
            Agent::spawn(
                &dir,
                &[
                    "-config",
                    &server_tls.display().to_string(),
                    "-data-dir",
                    &data,
                    "-node",
                    &format!("s{i}"),
                ],
            )
        })
        .collect();
    let (code, out, err) = cli(
        &certs,
        &servers[0],
        &["server", "join", &servers[1].rpc, &servers[2].rpc],
    );
    assert_eq!(code, 0, "join over TLS: {out}{err}");
    wait("three servers with a leader", || {
        let (code, out, _) = cli(&certs, &servers[0], &["server", "members"]);
        code == 0 && out.matches("alive").count() == 3 && out.contains("true")
    });

    // A client agent with its client certificate, running a job.
    let cdir = root.join("c0");
    std::fs::create_dir_all(&cdir).unwrap();
    let client_cfg = cdir.join("client.hcl");
    std::fs::write(
        &client_cfg,
        format!(
            "{}{}",
            certs.agent_tls("client"),
            common::MOCK_DRIVER_CONFIG
        ),
    )
    .unwrap();
    let client = Agent::spawn(
        &cdir,
        &[
            "-client",
            "-config",
            &client_cfg.display().to_string(),
            "-data-dir",
            &cdir.join("data").display().to_string(),
            "-servers",
            &servers[0].rpc,
            "-node",
            "c0",
        ],
    );
    wait("the client's node is ready", || {
        let (code, out, _) = cli(&certs, &servers[1], &["node", "status"]);
        code == 0 && out.contains("ready")
    });
    let job = root.join("job.hcl");
    std::fs::write(
        &job,
        "job \"tlsjob\" {\n  group \"g\" {\n    task \"t\" {\n      driver = \"mock_driver\"\n      config {\n        run_for = \"10m\"\n      }\n      resources {\n        cpu = 10\n        memory = 10\n      }\n    }\n  }\n}\n",
    )
    .unwrap();
    let (code, out, err) = cli(
        &certs,
        &servers[2],
        &["job", "run", &job.display().to_string()],
    );
    assert_eq!(code, 0, "job run over https: {out}{err}");
    wait("the job runs", || {
        let (_, out, _) = cli(&certs, &client, &["job", "status", "tlsjob"]);
        out.contains("running")
    });

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // A client certificate is a client: no raft, no join.
        let files = rpc::tls::TlsFiles {
            ca_file: certs.path("nomad-agent-ca.pem").into(),
            cert_file: certs.path("global-client-nomad.pem").into(),
            key_file: certs.path("global-client-nomad-key.pem").into(),
            region: "global".into(),
            verify_server_hostname: true,
            tls13_only: false,
        };
        let tls = std::sync::Arc::new(rpc::tls::AgentTls::load(&files).expect("client tls"));
        let as_client = rpc::Client::with_tls(Duration::from_secs(10), Some(tls));
        for (method, body) in [
            ("Raft.AppendEntries", serde_json::json!({})),
            ("Raft.Vote", serde_json::json!({})),
            (
                "Server.Join",
                serde_json::json!({"id": 77, "addr": "127.0.0.1:1"}),
            ),
        ] {
            let err = as_client
                .call_raw(&servers[0].rpc, method, &rpc::codec::encode(&body).unwrap())
                .await
                .expect_err("refused");
            assert_eq!(
                err.code,
                rpc::ErrorCode::PermissionDenied,
                "{method}: {err:?}"
            );
            assert!(err.message.contains("client certificate"), "{err:?}");
        }
        // ...while client calls work with it (the node endpoints check their own secret).
        let r = as_client
            .call_raw(
                &servers[0].rpc,
                "Server.Info",
                &rpc::codec::encode(&()).unwrap(),
            )
            .await;
        assert!(r.is_ok(), "{r:?}");

        // Plain TCP gets nothing: the handshake never happens, the call fails.
        let plain = rpc::Client::new(Duration::from_secs(5));
        let err = plain
            .call_raw(
                &servers[0].rpc,
                "Server.Info",
                &rpc::codec::encode(&()).unwrap(),
            )
            .await
            .expect_err("plain TCP is refused");
        assert!(
            matches!(
                err.code,
                rpc::ErrorCode::Unavailable | rpc::ErrorCode::Timeout
            ),
            "{err:?}"
        );
    });

    // The https API: plain http gets no answer, a CLI without a client certificate is refused.
    let plain = common::http("GET", &format!("{}/v1/nodes", servers[0].http), None);
    assert!(
        plain.as_ref().map_or(true, |(status, _, _)| *status != 200),
        "{plain:?}"
    );
    let out = Command::new(common::bin())
        .args(["node", "status"])
        .env("NOMAD_ADDR", &servers[0].http)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("may be serving https"),
        "plain http to https says so: {err}"
    );
    let out = Command::new(common::bin())
        .args(["node", "status"])
        .env("NOMAD_ADDR", https(&servers[0]))
        .env("NOMAD_CACERT", certs.path("nomad-agent-ca.pem"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CertificateRequired") || err.contains("certificate"),
        "{err}"
    );
    let out = Command::new(common::bin())
        .args(["node", "status"])
        .env("NOMAD_ADDR", https(&servers[0]))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NOMAD_CACERT"),
        "https without a CA says what to set: {err}"
    );
    drop(client);
    drop(servers);
}

#[test]
fn a_tls_block_that_cannot_load_names_its_file() {
    let dir = common::temp_dir("tls-bad");
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("tls.hcl");
    std::fs::write(
        &cfg,
        "tls {\n  http = true\n  rpc = true\n  ca_file = \"/nonexistent/ca.pem\"\n  cert_file = \"/nonexistent/c.pem\"\n  key_file = \"/nonexistent/k.pem\"\n}\n",
    )
    .unwrap();
    let out = Command::new(common::bin())
        .args(["agent", "-dev", "-config", &cfg.display().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/c.pem"), "{err}");
    std::fs::write(&cfg, "tls {\n  http = true\n}\n").unwrap();
    let out = Command::new(common::bin())
        .args(["agent", "-dev", "-config", &cfg.display().to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tls.ca_file is required"), "{err}");
}
