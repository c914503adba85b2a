//! `/v1/metrics` and `caravan operator metrics` on real agents: Nomad's JSON summary with the
//! leader's, the client's and the allocations' metrics under Nomad's names; Prometheus' text format
//! (parsed with the Python `prometheus_client` parser when one is there — `scripts/test` makes sure
//! it is, and sets CARAVAN_REQUIRE_PROMETHEUS_PARSER so its absence fails); Nomad's refusals; a
//! `telemetry` sink Caravan lacks refused at start.

mod common;

use common::{bin, call, json_of, temp_dir, wait_for, Agent, MOCK_DRIVER_CONFIG};
use serde_json::{json, Value};
use std::time::Duration;

const FAST_TELEMETRY: &str = "telemetry {\n  in_memory_collection_interval = \"1s\"\n  in_memory_retention_period = \"2m\"\n}\n";

fn dev_agent_with_metrics(name: &str) -> Agent {
    let dir = temp_dir(name);
    let data = dir.join("data").display().to_string();
    let extra = dir.join("extra.hcl");
    std::fs::write(&extra, format!("{MOCK_DRIVER_CONFIG}{FAST_TELEMETRY}")).unwrap();
    let extra = extra.display().to_string();
    let agent = Agent::start(&dir, &["-dev", "-data-dir", &data, "-config", &extra]);
    agent.wait_until("the dev node is ready", || {
        agent.get("/v1/nodes").ok().is_some_and(|v| {
            v.as_array()
                .is_some_and(|a| a.len() == 1 && a[0]["Status"] == "ready")
        })
    });
    agent
}

fn find<'a>(list: &'a Value, name: &str, label: Option<(&str, &str)>) -> Option<&'a Value> {
    list.as_array()?
        .iter()
        .find(|m| m["Name"] == name && label.is_none_or(|(k, v)| m["Labels"][k] == v))
}

/// Every sample line is `name{labels} value` of a family declared by a `# TYPE` line.
fn check_prometheus_text(text: &str) {
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !n.starts_with(|c: char| c.is_ascii_digit())
    };
    let mut families = std::collections::HashSet::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split(' ');
            let family = parts.next().unwrap();
            assert!(name_ok(family), "bad family name in {line:?}");
            assert!(
                matches!(
                    parts.next(),
                    Some("counter" | "gauge" | "summary" | "histogram")
                ),
                "{line:?}"
            );
            families.insert(family.to_string());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line:?}"));
        assert!(
            value.parse::<f64>().is_ok() || ["NaN", "+Inf", "-Inf"].contains(&value),
            "{line:?}"
        );
        let name = series.split('{').next().unwrap();
        assert!(name_ok(name), "bad metric name in {line:?}");
        let family = ["_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| families.contains(*f)))
            .unwrap_or(name);
        assert!(families.contains(family), "no # TYPE for {line:?}");
    }
}

/// A Python with `prometheus_client`, if this machine has one.
fn prometheus_python() -> Option<String> {
    let candidates = [
        std::env::var("CARAVAN_PROMETHEUS_PYTHON").ok(),
        Some(
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../target/python-nomad/venv/bin/python"
            )
            .to_string(),
        ),
        Some("python3".to_string()),
    ];
    candidates.into_iter().flatten().find(|py| {
        std::process::Command::new(py)
            .args(["-c", "import prometheus_client.parser"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Gauges a dev agent publishes every collection interval: the leader's, the client's, the runtime's.
const LEADER_AND_CLIENT_GAUGES: [&str; 5] = [
    "nomad.nomad.broker.total_ready",
    "nomad.nomad.heartbeat.active",
    "nomad.client.host.memory.total",
    "nomad.client.unallocated.memory",
    "nomad.runtime.num_goroutines",
];

#[test]
fn dev_agent_serves_nomads_metrics_in_json_and_prometheus() {
    let agent = dev_agent_with_metrics("metrics-dev");
    let job = json!({"Job": {"ID": "counted", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{"Name": "web", "Count": 2, "Tasks": [{"Name": "t",
            "Driver": "mock_driver", "Config": {"run_for": "10m"},
            "Resources": {"CPU": 20, "MemoryMB": 16}}]}]}});
    let (s, b) = call(&agent, "PUT", "/v1/jobs", "", Some(&job));
    assert_eq!(s, 200, "{b}");

    // The leader's gauges, the client's and the allocations' (a dev agent publishes both), and
    // the rpc and plan samples, all in one finished interval.
    let mut summary = Value::Null;
    wait_for(
        "the JSON metrics show both allocations running",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let (s, b) = call(&agent, "GET", "/v1/metrics", "", None);
            assert_eq!(s, 200, "{b}");
            summary = json_of(&b);
            let running = find(
                &summary["Gauges"],
                "nomad.nomad.job_summary.running",
                Some(("job", "counted")),
            );
            running.is_some_and(|g| g["Value"] == 2.0)
                && find(&summary["Gauges"], "nomad.client.allocations.running", None)
                    .is_some_and(|g| g["Value"] == 2.0)
                && find(
                    &summary["Gauges"],
                    "nomad.client.allocs.cpu.allocated",
                    None,
                )
                .is_some()
                // Every gauge below, in the same summary: the sink shows one interval, and the
                // leader's loop sets its broker and heartbeat gauges just before the job
                // summaries, so an interval can turn between them.
                && LEADER_AND_CLIENT_GAUGES
                    .iter()
                    .all(|g| find(&summary["Gauges"], g, None).is_some())
        },
    );
    let running = find(
        &summary["Gauges"],
        "nomad.nomad.job_summary.running",
        Some(("job", "counted")),
    )
    .unwrap();
    assert_eq!(running["Labels"]["task_group"], "web");
    assert_eq!(running["Labels"]["namespace"], "default");
    assert!(running["Labels"]["host"].is_string(), "{running}");
    for gauge in LEADER_AND_CLIENT_GAUGES {
        assert!(
            find(&summary["Gauges"], gauge, None).is_some(),
            "{gauge} in {summary}"
        );
    }
    let alloc_cpu = find(
        &summary["Gauges"],
        "nomad.client.allocs.cpu.allocated",
        None,
    )
    .unwrap();
    assert_eq!(alloc_cpu["Value"], 20.0, "{alloc_cpu}");
    assert_eq!(alloc_cpu["Labels"]["job"], "counted");
    assert_eq!(alloc_cpu["Labels"]["task"], "t");
    assert!(summary["Timestamp"]
        .as_str()
        .is_some_and(|t| t.ends_with(" +0000 UTC")));
    assert!(summary["Points"].is_array());

    // Counters and samples come and go with their interval: wait for one that has them.
    wait_for(
        "rpc and raft counters in an interval",
        Duration::from_secs(30),
        Duration::from_millis(250),
        || {
            let summary = agent.get("/v1/metrics").unwrap();
            find(&summary["Counters"], "nomad.nomad.rpc.request", None)
                .is_some_and(|c| c["Count"].as_u64() > Some(0) && c["Rate"].as_f64() > Some(0.0))
        },
    );

    // Prometheus: the same series under Prometheus' names, in a text any parser reads.
    let (s, text) = call(&agent, "GET", "/v1/metrics?format=prometheus", "", None);
    assert_eq!(s, 200, "{text}");
    check_prometheus_text(&text);
    assert!(
        text.lines()
            .any(|l| l.starts_with("nomad_nomad_job_summary_running{")
                && l.contains("job=\"counted\"")
                && l.ends_with(" 2")),
        "{text}"
    );
    assert!(
        text.contains("# TYPE nomad_nomad_rpc_request counter"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE nomad_nomad_plan_submit summary"),
        "{text}"
    );
    match prometheus_python() {
        Some(py) => {
            let script = "import sys\nfrom prometheus_client.parser import text_string_to_metric_families as parse\nfams = list(parse(sys.stdin.read()))\nprint(len(fams), sum(len(f.samples) for f in fams))\n";
            let mut child = std::process::Command::new(&py)
                .args(["-c", script])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "prometheus_client refused the scrape: {}\n{text}",
                String::from_utf8_lossy(&out.stderr)
            );
            let counts = String::from_utf8_lossy(&out.stdout);
            let families: usize = counts.split(' ').next().unwrap().parse().unwrap();
            assert!(families > 20, "{counts}");
        }
        None => assert!(
            std::env::var_os("CARAVAN_REQUIRE_PROMETHEUS_PARSER").is_none(),
            "no python with prometheus_client (scripts/test installs it into target/python-nomad)"
        ),
    }

    // The CLI.
    let (code, out, err) = agent.run(&["operator", "metrics", "-format", "prometheus"]);
    assert_eq!(code, 0, "{err}");
    check_prometheus_text(&out);
    assert!(out.contains("nomad_nomad_broker_total_ready"), "{out}");
    let (code, out, err) = agent.run(&["operator", "metrics", "-pretty"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("{\n"), "{out}");
    assert!(json_of(&out)["Gauges"].is_array());
    let (code, _, err) = agent.run(&["operator", "metrics", "-format", "statsd"]);
    assert_eq!(code, 1);
    assert!(err.contains("prometheus"), "{err}");
}

#[test]
fn metrics_are_open_json_by_default_and_prometheus_only_when_enabled() {
    let dir = temp_dir("metrics-server");
    let data = dir.join("data").display().to_string();
    let agent = Agent::start(&dir, &["-server", "-acl-enabled", "-data-dir", &data]);
    // Open to anyone, ACLs or not, as Nomad's.
    let (s, b) = call(&agent, "GET", "/v1/metrics", "", None);
    assert_eq!(s, 200, "{b}");
    assert!(json_of(&b)["Gauges"].is_array(), "{b}");
    let (s, b) = call(&agent, "GET", "/v1/metrics?format=prometheus", "", None);
    assert_eq!((s, b.as_str()), (415, "Prometheus is not enabled"));
    let (s, b) = call(&agent, "PUT", "/v1/metrics", "", None);
    assert_eq!((s, b.as_str()), (405, "Invalid method"));
    let (code, _, err) = agent.run(&["operator", "metrics", "-format", "prometheus"]);
    assert_eq!(code, 1);
    assert!(err.contains("Prometheus is not enabled"), "{err}");
}

#[test]
fn a_sink_caravan_lacks_is_refused_at_start_by_name() {
    let dir = temp_dir("metrics-statsd");
    let cfg = dir.join("agent.hcl");
    std::fs::write(
        &cfg,
        "bind_addr = \"127.0.0.1\"\nports {\n  http = 0\n  rpc = 0\n  serf = 0\n}\ntelemetry {\n  statsd_address = \"127.0.0.1:8125\"\n}\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(bin())
        .args(["agent", "-dev", "-config"])
        .arg(&cfg)
        .arg("-data-dir")
        .arg(dir.join("data"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent started with a statsd sink it does not have");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!status.success(), "{text}");
    assert!(
        text.contains("telemetry.statsd_address: not supported yet"),
        "{text}"
    );
}
