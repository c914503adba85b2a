//! `/v1/agent/servers`: the servers an agent's client talks to (GET, sorted) and replacing them
//! (PUT `?address=`), on a dev agent and a client-only agent; a server-only agent answers 501,
//! as Nomad's.

mod common;

use common::{call, json_of, mock_dev_agent, server_agent, temp_dir, Agent};
use serde_json::json;

#[test]
fn an_agents_client_lists_and_replaces_its_servers() {
    let agent = mock_dev_agent("agent-servers");
    let (s, b) = call(&agent, "GET", "/v1/agent/servers", "", None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(
        json_of(&b),
        json!([agent.rpc]),
        "the dev client talks to its own server"
    );
    // Replace: several addresses, a bare host gets Nomad's port. The client's heartbeat answers
    // bring the servers' own list (as Nomad's), which may replace a set list at any moment, so
    // the set and the read back are tried together until no heartbeat fell between them.
    let own = agent.rpc.clone();
    let mut want = vec![own.clone(), "10.0.0.9:4647".to_string()];
    want.sort();
    let set = || {
        let (s, b) = call(
            &agent,
            "PUT",
            &format!("/v1/agent/servers?address={own}&address=10.0.0.9"),
            "",
            None,
        );
        assert_eq!(s, 200, "{b}");
    };
    let read = || json_of(&call(&agent, "GET", "/v1/agent/servers", "", None).1);
    agent.wait_until("the set list read back", || {
        set();
        read() == json!(want)
    });
    let refuse = || {
        for (query, err) in [
            ("", "missing server address"),
            (
                "?address=host:notaport",
                "invalid server address \"host:notaport\": expected host:port",
            ),
        ] {
            let (s, b) = call(
                &agent,
                "PUT",
                &format!("/v1/agent/servers{query}"),
                "",
                None,
            );
            assert_eq!((s, b.as_str()), (400, err));
        }
    };
    agent.wait_until("a refused change changes nothing", || {
        set();
        refuse();
        read() == json!(want)
    });
}

#[test]
fn a_server_only_agent_has_no_client_servers_and_a_client_agent_serves_its_own() {
    let (server, rpc) = server_agent("agent-servers-srv", "");
    let (s, b) = call(&server, "GET", "/v1/agent/servers", "", None);
    assert_eq!((s, b.as_str()), (501, "Invalid method"));
    let dir = temp_dir("agent-servers-cli");
    let data = dir.join("data").display().to_string();
    let client = Agent::spawn(&dir, &["-client", "-servers", &rpc, "-data-dir", &data]);
    let (s, b) = call(&client, "GET", "/v1/agent/servers", "", None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(json_of(&b), json!([rpc]));
}
