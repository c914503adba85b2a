//! Agent configuration files: the same configuration in HCL2, HCL1 and JSON, directory merges,
//! and errors that name file:line:col and the key.

use std::path::PathBuf;
use std::time::Duration;

use jobspec::agent::{load_file, load_paths, parse_str, AgentConfig, AgentConfigError};
use serde_json::json;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agent")
        .join(name)
}

fn load(name: &str) -> AgentConfig {
    load_file(&fixture(name)).unwrap_or_else(|e| panic!("{name}:\n{e}"))
}

/// The error's lines with the fixture directory stripped, so they read `file.hcl:3:5: …`.
fn error_lines(err: &AgentConfigError) -> Vec<String> {
    let dir = format!(
        "{}/",
        fixture("").display().to_string().trim_end_matches('/')
    );
    err.to_string()
        .lines()
        .map(|line| line.replace(&dir, ""))
        .collect()
}

fn load_err(name: &str) -> Vec<String> {
    match load_file(&fixture(name)) {
        Ok(config) => panic!("{name} should not load, got {config:#?}"),
        Err(e) => error_lines(&e),
    }
}

#[test]
fn full_config_reads_the_same_in_hcl2_hcl1_and_json() {
    let hcl2 = load("full.hcl");
    let hcl1 = load("full-hcl1.hcl");
    let json = load("full.json");
    assert_eq!(hcl2, hcl1, "HCL1 differs from HCL2");
    assert_eq!(hcl2, json, "JSON differs from HCL2");
    assert_eq!(
        serde_json::to_value(&hcl2).unwrap(),
        serde_json::to_value(&json).unwrap()
    );
}

#[test]
fn full_config_has_every_value() {
    let config = load("full.hcl");
    assert_eq!(config.region.as_deref(), Some("europe"));
    assert_eq!(config.log_json, Some(true));
    assert_eq!(config.disable_update_check, Some(true));
    let ports = config.ports.as_ref().unwrap();
    assert_eq!(
        (ports.http, ports.rpc, ports.serf),
        (Some(5646), Some(5647), Some(5648))
    );
    assert_eq!(
        config.advertise.as_ref().unwrap().rpc.as_deref(),
        Some("10.0.0.5:5647")
    );

    let server = config.server.as_ref().unwrap();
    assert_eq!(server.bootstrap_expect, Some(3));
    assert_eq!(server.heartbeat_grace, Some(Duration::from_secs(30)));
    assert_eq!(
        server.failover_heartbeat_ttl,
        Some(Duration::from_secs(120))
    );
    assert_eq!(server.raft_snapshot_threshold, Some(4096));
    let join = server.server_join.as_ref().unwrap();
    assert_eq!(join.retry_join.as_ref().unwrap().len(), 3);
    assert_eq!(join.retry_interval, Some(Duration::from_secs(90)));

    let client = config.client.as_ref().unwrap();
    assert_eq!(client.meta.as_ref().unwrap()["owner.team"], "infra");
    assert_eq!(
        client.options.as_ref().unwrap()["driver.raw_exec.enable"],
        "1"
    );
    let volumes = client.host_volume.as_ref().unwrap();
    assert_eq!(volumes["certs"].path.as_deref(), Some("/etc/ssl/certs"));
    assert_eq!(volumes["certs"].read_only, Some(true));
    assert_eq!(
        client.reserved.as_ref().unwrap().reserved_ports.as_deref(),
        Some("22,80,8500-8600")
    );

    let plugins = config.plugin.as_ref().unwrap();
    assert_eq!(plugins["raw_exec"].config, Some(json!({"enabled": true})));
    assert_eq!(
        plugins["docker"].config,
        Some(json!({"allow_privileged": true, "volumes": {"enabled": true}}))
    );
    assert_eq!(
        config.acl.as_ref().unwrap().token_ttl,
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        config.tls.as_ref().unwrap().verify_server_hostname,
        Some(true)
    );
    assert_eq!(
        config.telemetry,
        Some(json!({"publish_allocation_metrics": true, "collection_interval": "1s"}))
    );
}

#[test]
fn serialized_config_reads_back() {
    let config = load("full.hcl");
    let text = serde_json::to_string_pretty(&config).unwrap();
    assert!(text.contains("\"retry_interval\": \"1m30s\""), "{text}");
    assert_eq!(parse_str(&text, "roundtrip.json").unwrap(), config);
    assert_eq!(serde_json::from_str::<AgentConfig>(&text).unwrap(), config);
}

#[test]
fn directory_merges_files_in_lexical_order() {
    let config = load_paths(&[fixture("merge.d")]).unwrap();
    assert_eq!(config.region.as_deref(), Some("global"));
    assert_eq!(
        config.datacenter.as_deref(),
        Some("dc2"),
        "10-client.json overrides 00-base.hcl"
    );
    assert_eq!(
        config.log_level.as_deref(),
        Some("DEBUG"),
        "20-override.hcl is read last"
    );

    let client = config.client.as_ref().unwrap();
    assert_eq!(client.enabled, Some(true));
    assert_eq!(
        client.servers,
        Some(vec!["10.0.0.1:4647".to_string()]),
        "an empty list does not replace"
    );
    let meta = client.meta.as_ref().unwrap();
    assert_eq!(
        (
            meta["rack"].as_str(),
            meta["zone"].as_str(),
            meta["ssd"].as_str()
        ),
        ("r1", "b", "true")
    );
    let data = &client.host_volume.as_ref().unwrap()["data"];
    assert_eq!(
        (data.path.as_deref(), data.read_only),
        (Some("/mnt/data"), Some(true))
    );

    let plugins = config.plugin.as_ref().unwrap();
    assert_eq!(
        plugins["docker"].config,
        Some(json!({"allow_privileged": true})),
        "later plugin config replaces"
    );
    assert_eq!(plugins["raw_exec"].config, Some(json!({"enabled": true})));
}

#[test]
fn paths_merge_in_the_order_given() {
    let dir = fixture("merge.d");
    let forward = load_paths(&[dir.join("00-base.hcl"), dir.join("20-override.hcl")]).unwrap();
    let backward = load_paths(&[dir.join("20-override.hcl"), dir.join("00-base.hcl")]).unwrap();
    assert_eq!(forward.log_level.as_deref(), Some("DEBUG"));
    assert_eq!(backward.log_level.as_deref(), Some("INFO"));
    let with_file = load_paths(&[dir, fixture("full.hcl")]).unwrap();
    assert_eq!(with_file.region.as_deref(), Some("europe"));
    assert_eq!(with_file.datacenter.as_deref(), Some("eu-west-1"));
}

#[test]
fn defaults_apply_under_loaded_values() {
    let config = AgentConfig::default_values().merge(load("merge.d/20-override.hcl"));
    assert_eq!(config.log_level.as_deref(), Some("DEBUG"));
    assert_eq!(config.bind_addr.as_deref(), Some("0.0.0.0"));
    assert_eq!(config.ports.unwrap().http, Some(4646));
}

#[test]
fn hcl_syntax_error_shows_the_line() {
    let lines = load_err("bad-syntax.hcl");
    assert!(
        lines[0].starts_with("bad-syntax.hcl:5:21: syntax error: "),
        "{lines:#?}"
    );
    assert_eq!(lines[1], " 5 |   bootstrap_expect =");
    assert_eq!(lines[2], "   |                     ^");
}

#[test]
fn json_syntax_error_shows_the_line() {
    let lines = load_err("bad-syntax.json");
    assert_eq!(
        lines[0], "bad-syntax.json:5:5: syntax error: expected `,` or `}`",
        "{lines:#?}"
    );
    assert_eq!(lines[1], " 5 |     \"bootstrap_expect\": 1");
    assert_eq!(lines[2], "   |     ^");
}

#[test]
fn unknown_keys_name_the_path_and_the_valid_keys() {
    let lines = load_err("unknown-key.hcl");
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert_eq!(
        lines[0],
        "unknown-key.hcl:5:15: client.host_volume.data: missing required key \"path\""
    );
    assert_eq!(
        lines[1],
        "unknown-key.hcl:6:5: client.host_volume.data.pathh: unexpected key \"pathh\" (did you mean \"path\"?); valid keys here: path, read_only"
    );
    assert!(lines[2].starts_with("unknown-key.hcl:10:1: servr: unexpected key \"servr\" (did you mean \"server\"?); valid keys here: region, "));
}

#[test]
fn wrong_types_are_all_reported() {
    let lines = load_err("wrong-type.hcl");
    assert_eq!(
        lines,
        vec![
            "wrong-type.hcl:2:3: ports.http: expected a whole number, got the string \"forty\"",
            "wrong-type.hcl:6:3: client.enabled: expected a bool, got the string \"maybe\"",
            "wrong-type.hcl:7:3: client.meta: expected a map of strings, got the string \"rack-1\"",
            "wrong-type.hcl:9:5: client.options.rack: expected a string, got a block",
            "wrong-type.hcl:16:3: server.heartbeat_grace: invalid duration \"10\": missing unit (ns, us, ms, s, m or h)",
        ]
    );
}

#[test]
fn json_errors_have_positions_too() {
    let lines = load_err("wrong-type.json");
    assert_eq!(
        lines,
        vec![
            "wrong-type.json:2:13: ports.http: 70000 is out of range (at most 65535)",
            "wrong-type.json:4:5: client.servers: expected a list of strings, got a block",
            "wrong-type.json:5:32: client.host_volume.data.read_only: expected a bool, got the string \"yes\"",
        ]
    );
}

#[test]
fn hcl1_errors_point_into_the_original_line() {
    let lines = load_err("hcl1-errors.hcl");
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].starts_with(
            "hcl1-errors.hcl:2:21: ports.rcp: unexpected key \"rcp\" (did you mean \"rpc\"?)"
        ),
        "{lines:#?}"
    );
    assert_eq!(
        lines[1],
        "hcl1-errors.hcl:4:24: client.meta.zone: expected a string, got a block"
    );
}

#[test]
fn errors_from_several_files_are_collected() {
    let err = load_paths(&[
        fixture("unknown-key.hcl"),
        fixture("full.hcl"),
        fixture("wrong-type.json"),
    ])
    .unwrap_err();
    let lines = error_lines(&err);
    assert_eq!(err.diagnostics().len(), 6);
    assert!(lines[0].starts_with("unknown-key.hcl:"), "{lines:#?}");
    assert!(lines[5].starts_with("wrong-type.json:"), "{lines:#?}");
}

#[test]
fn missing_paths_are_io_errors() {
    let err = load_paths(&[fixture("no-such-dir")]).unwrap_err();
    assert!(matches!(err, AgentConfigError::Io { .. }), "{err}");
    assert!(err.to_string().contains("no-such-dir"), "{err}");
}

#[test]
fn hcl1_json_list_forms() {
    let src = r#"{
        "server": [{"enabled": "true", "server_join": [{"retry_join": ["a"]}]}],
        "plugin": [{"raw_exec": [{"config": [{"enabled": true}]}]}],
        "client": [{"host_volume": [{"x": [{"path": "/a"}]}], "meta": [{"a": 1}]}]
    }"#;
    let config = parse_str(src, "agent.json").unwrap();
    assert_eq!(
        serde_json::to_value(&config).unwrap(),
        json!({
            "server": {"enabled": true, "server_join": {"retry_join": ["a"]}},
            "client": {"meta": {"a": "1"}, "host_volume": {"x": {"path": "/a"}}},
            "plugin": {"raw_exec": {"config": {"enabled": true}}},
        })
    );
}

#[test]
fn dev_mode_config() {
    let dev = AgentConfig::dev();
    assert_eq!(dev.bind_addr.as_deref(), Some("127.0.0.1"));
    assert_eq!(dev.datacenter.as_deref(), Some("dc1"));
    assert_eq!(dev.server.as_ref().unwrap().enabled, Some(true));
    assert_eq!(
        dev.plugin.as_ref().unwrap()["raw_exec"].config,
        Some(json!({"enabled": true}))
    );
}

#[test]
fn hcl1_snippets_from_older_nomad_docs() {
    let src = r#"
data_dir = "/opt/nomad"   bind_addr = "0.0.0.0"
client {
  enabled = true
  options {
    "driver.whitelist" = "docker,exec"
  }
  meta {
    "foo" = "bar"
  }
  reserved { cpu = 500 memory = 512 }
}
server {
  enabled = true
  retry_join = [ "1.1.1.1", "2.2.2.2" ]
}
addresses { http = "0.0.0.0" }
vault { enabled = true address = "https://vault.service.consul:8200" }
tls { http = true rpc = true }
"#;
    let config = parse_str(src, "old.hcl").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        serde_json::to_value(&config).unwrap(),
        json!({
            "data_dir": "/opt/nomad",
            "bind_addr": "0.0.0.0",
            "addresses": {"http": "0.0.0.0"},
            "server": {"enabled": true, "retry_join": ["1.1.1.1", "2.2.2.2"]},
            "client": {
                "enabled": true,
                "meta": {"foo": "bar"},
                "options": {"driver.whitelist": "docker,exec"},
                "reserved": {"cpu": 500, "memory": 512},
            },
            "tls": {"http": true, "rpc": true},
            "vault": {"enabled": true, "address": "https://vault.service.consul:8200"},
        })
    );
}

#[test]
fn client_gc_keys_read_and_bad_ones_name_the_key() {
    let src = r#"
client {
  gc_interval              = "30s"
  gc_disk_usage_threshold  = 90
  gc_inode_usage_threshold = 75.5
  gc_max_allocs            = 100
  gc_parallel_destroys     = 4
}
"#;
    let config = parse_str(src, "gc.hcl").unwrap_or_else(|e| panic!("{e}"));
    let client = config.client.expect("client block");
    assert_eq!(client.gc_interval, Some(Duration::from_secs(30)));
    assert_eq!(client.gc_disk_usage_threshold, Some(90.0));
    assert_eq!(client.gc_inode_usage_threshold, Some(75.5));
    assert_eq!(client.gc_max_allocs, Some(100));
    assert_eq!(client.gc_parallel_destroys, Some(4));

    let bad = "client {\n  gc_max_allocs = -1\n  gc_disk_usage_threshold = \"lots\"\n}\n";
    let err = parse_str(bad, "bad.hcl").expect_err("bad values are refused");
    let text = err.to_string();
    assert!(text.contains("client.gc_max_allocs"), "{text}");
    assert!(text.contains("client.gc_disk_usage_threshold"), "{text}");
}
