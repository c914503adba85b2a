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
    let req = serde_json::to_vec(&json!({"id": 1, "method": method, "body": body})).unwrap();
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
    let v: Value = serde_json::from_slice(&buf).unwrap();
    v["result"].clone()
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
