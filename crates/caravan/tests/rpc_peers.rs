//! The rpc port against a peer that is not a server: a process on another loopback address
//! (127.0.0.2, which no server uses) gets nothing from raft, join, bootstrap or the leader's
//! forwarded writes, cannot take over a registered node, and an empty node secret proves
//! nothing.

mod common;

use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request from `from`, as the rpc frame format has it; the `result` of the answer.
async fn call_from(from: &str, to: &str, method: &str, body: Value) -> Value {
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.bind(format!("{from}:0").parse().expect("addr"))
        .expect("bind the rogue address");
    let mut stream = sock
        .connect(to.parse().expect("rpc addr"))
        .await
        .expect("connect");
    #[derive(serde::Serialize)]
    struct Request<'a> {
        id: u64,
        method: &'a str,
        body: serde_bytes::ByteBuf,
    }
    #[derive(serde::Deserialize)]
    struct Response {
        result: Result<serde_bytes::ByteBuf, rpc::RpcError>,
    }
    let body = serde_bytes::ByteBuf::from(rpc::codec::encode(&body).unwrap());
    let req = rpc::codec::encode(&Request {
        id: 1,
        method,
        body,
    })
    .unwrap();
    let len = u32::try_from(req.len()).unwrap().to_be_bytes();
    stream.write_all(&len).await.unwrap();
    stream.write_all(&req).await.unwrap();
    let mut len = [0u8; 4];
    tokio::time::timeout(Duration::from_secs(30), stream.read_exact(&mut len))
        .await
        .expect("an answer in time")
        .expect("an answer");
    let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut buf).await.unwrap();
    let resp: Response = rpc::codec::decode(&buf).unwrap();
    match resp.result {
        Ok(answer) => json!({"Ok": rpc::codec::decode::<Value>(&answer).unwrap()}),
        Err(e) => json!({"Err": {"code": e.code, "message": e.message}}),
    }
}

fn denied(result: &Value) -> String {
    let err = &result["Err"];
    assert!(err.is_object(), "expected a refusal, got {result}");
    format!("{} {}", err["code"], err["message"])
}

#[test]
fn an_unknown_peer_gets_nothing_from_server_calls_and_cannot_hijack_a_node() {
    let agent = common::mock_dev_agent("rpc-peers");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rpc = agent.rpc.clone();
    let nodes = agent.get("/v1/nodes").unwrap();
    let node_id = nodes[0]["ID"].as_str().unwrap().to_string();
    rt.block_on(async {
        for (method, body) in [
            ("Raft.AppendEntries", json!({})),
            ("Raft.Vote", json!({})),
            ("Server.Join", json!({"id": 99, "addr": "127.0.0.2:4647"})),
            ("Server.Bootstrap", json!([])),
            ("Server.Remove", json!(1)),
            ("Job.Register", json!({})),
            ("ACL.Write", json!({})),
        ] {
            let r = call_from("127.0.0.2", &rpc, method, body).await;
            let why = denied(&r);
            assert!(why.contains("not a known server"), "{method}: {why}");
        }
        // Server.Info answers anyone (it is how servers find each other).
        let r = call_from("127.0.0.2", &rpc, "Server.Info", Value::Null).await;
        assert!(r["Ok"].is_object(), "{r}");

        // Node.Register with a live node's ID and another secret: refused, node unchanged.
        let mut node = agent.get(&format!("/v1/node/{node_id}")).unwrap();
        node["SecretID"] = json!("00000000-0000-0000-0000-00000000dead");
        node["Name"] = json!("hijacked");
        let r = call_from("127.0.0.2", &rpc, "Node.Register", json!({"Node": node})).await;
        let why = denied(&r);
        assert!(why.contains("node secret ID does not match"), "{why}");
        // No secret at all proves nothing either.
        let r = call_from(
            "127.0.0.2",
            &rpc,
            "Node.UpdateStatus",
            json!({"NodeID": node_id, "Status": "down", "SecretID": ""}),
        )
        .await;
        assert!(r["Err"].is_object(), "an empty secret is refused: {r}");
    });
    let node = agent.get(&format!("/v1/node/{node_id}")).unwrap();
    assert_ne!(node["Name"], "hijacked");
    assert_eq!(node["Status"], "ready");
}

/// With `server { encrypt }` a server call must carry the cluster's secret: a process on the
/// server's own address (a task on the host, say) without it gets nothing, while client calls
/// still work for it.
#[test]
fn with_an_encrypt_key_server_calls_need_the_cluster_secret() {
    let dir = common::temp_dir("rpc-secret");
    let cfg = dir.join("secret.hcl");
    std::fs::write(
        &cfg,
        format!(
            "{}server {{\n  encrypt = \"Ym9ndXNrZXlib2d1c2tleWJvZ3Vza2V5Ym9ndXNrZXk=\"\n}}\n",
            common::MOCK_DRIVER_CONFIG
        ),
    )
    .unwrap();
    let data = dir.join("data").display().to_string();
    let agent = common::Agent::start(
        &dir,
        &[
            "-dev",
            "-data-dir",
            &data,
            "-config",
            &cfg.display().to_string(),
        ],
    );
    agent.wait_until("the dev node is ready", || {
        agent
            .get("/v1/nodes")
            .ok()
            .is_some_and(|v| v.to_string().contains("\"ready\""))
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for method in [
            "Raft.AppendEntries",
            "Server.Join",
            "ACL.Write",
            "Job.Register",
        ] {
            let r = call_from("127.0.0.1", &agent.rpc, method, json!({})).await;
            let why = denied(&r);
            assert!(why.contains("cluster's secret"), "{method}: {why}");
        }
        let r = call_from("127.0.0.1", &agent.rpc, "Server.Info", Value::Null).await;
        assert!(r["Ok"].is_object(), "{r}");
    });
    // The agent's own client and raft still work: a job runs.
    let job = json!({"Job": {"ID": "j", "Type": "service", "TaskGroups": [{"Name": "g",
        "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "5m"},
        "Resources": {"CPU": 10, "MemoryMB": 10}}]}]}});
    let (s, b) = agent.put("/v1/jobs", &job);
    assert_eq!(s, 200, "{b}");
    agent.wait_until("the job runs", || {
        agent
            .get("/v1/job/j/allocations")
            .ok()
            .is_some_and(|v| v.to_string().contains("\"running\""))
    });
}

/// A node may report only its own allocations: a second node registered by a rogue peer cannot
/// fail the first node's allocation.
#[test]
fn a_node_cannot_report_another_nodes_allocations() {
    let agent = common::mock_dev_agent("rpc-other-node");
    let job = json!({"Job": {"ID": "victim", "Type": "service", "TaskGroups": [{"Name": "g",
        "Tasks": [{"Name": "t", "Driver": "mock_driver", "Config": {"run_for": "5m"},
        "Resources": {"CPU": 10, "MemoryMB": 10}}]}]}});
    let (s, b) = agent.put("/v1/jobs", &job);
    assert_eq!(s, 200, "{b}");
    let mut alloc_id = String::new();
    agent.wait_until("the victim runs", || {
        let v = agent
            .get("/v1/job/victim/allocations")
            .unwrap_or(Value::Null);
        let running = v
            .as_array()
            .and_then(|a| a.iter().find(|x| x["ClientStatus"] == "running"))
            .cloned();
        if let Some(a) = running {
            alloc_id = a["ID"].as_str().unwrap_or_default().to_string();
            true
        } else {
            false
        }
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let rpc = agent.rpc.clone();
    let nodes = agent.get("/v1/nodes").unwrap();
    let mut rogue = agent
        .get(&format!("/v1/node/{}", nodes[0]["ID"].as_str().unwrap()))
        .unwrap();
    rogue["ID"] = json!("11111111-2222-3333-4444-555555555555");
    rogue["SecretID"] = json!("aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee");
    rogue["Name"] = json!("rogue");
    rt.block_on(async {
        let r = call_from("127.0.0.2", &rpc, "Node.Register", json!({"Node": rogue})).await;
        assert!(r["Ok"].is_object(), "a new node may register: {r}");
        let r = call_from(
            "127.0.0.2",
            &rpc,
            "Node.UpdateAlloc",
            json!({"NodeID": "11111111-2222-3333-4444-555555555555",
                "SecretID": "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
                "Allocs": [{"ID": alloc_id, "ClientStatus": "failed"}]}),
        )
        .await;
        assert!(
            r["Ok"].is_number() || r["Ok"].is_object() || r["Ok"].is_null(),
            "{r}"
        );
    });
    let a = agent.get(&format!("/v1/allocation/{alloc_id}")).unwrap();
    assert_eq!(
        a["ClientStatus"], "running",
        "another node's report is ignored"
    );
}
