//! The client end to end against an in-memory server: real processes through raw_exec (and the
//! mock driver where no process is needed). Every wait has a deadline; nothing sleeps blindly.

use client::testing::{alloc, job, task, FakeServer};
use client::{Client, ClientConfig, GcConfig};
use drivers::testing::{eventually, TestDir};
use drivers::{Driver, MockDriver, RawExecConfig, RawExecDriver};
use model::alloc::{AllocatedPortMapping, Allocation, TaskState};
use model::group::RestartPolicy;
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LIMIT: Duration = Duration::from_secs(20);

fn config(dir: &Path) -> ClientConfig {
    let mut cfg = ClientConfig::new(dir);
    cfg.node_name = "test-node".into();
    cfg.meta.insert("rack".into(), "r1".into());
    cfg.timing.alloc_update_interval = Duration::from_millis(50);
    cfg.timing.alloc_query_wait = Duration::from_secs(5);
    // The collector runs when an allocation turns terminal and removes it at once if the
    // host's disk is fuller than the threshold (80 % by default); tests read a finished
    // allocation's files, so how full the machine's disk is must not decide them.
    cfg.gc = GcConfig {
        disk_usage_threshold: 100.0,
        inode_usage_threshold: 100.0,
        ..GcConfig::default()
    };
    cfg
}

fn drivers() -> Vec<Arc<dyn Driver>> {
    vec![
        Arc::new(RawExecDriver::new(RawExecConfig::dev())),
        Arc::new(MockDriver::new()),
    ]
}

async fn start(dir: &Path, server: &Arc<FakeServer>) -> Client {
    Client::start(config(dir), server.clone(), drivers())
        .await
        .expect("client starts")
}

fn sh(name: &str, script: &str) -> model::Task {
    task(
        name,
        "raw_exec",
        json!({"command": "/bin/sh", "args": ["-c", script]}),
    )
}

fn fast_restarts(attempts: i32) -> RestartPolicy {
    RestartPolicy {
        attempts: Some(attempts),
        interval: Some(model::Duration::from_mins(1)),
        delay: Some(model::Duration::from_millis(50)),
        mode: Some("fail".into()),
        render_templates: None,
    }
}

async fn wait_status(server: &FakeServer, id: &str, status: &str) -> Allocation {
    eventually(&format!("allocation {status}"), LIMIT, || {
        server.alloc(id).filter(|a| a.client_status == status)
    })
    .await
}

fn task_state(server: &FakeServer, alloc_id: &str, task: &str) -> TaskState {
    server.alloc(alloc_id).expect("alloc").task_states[task].clone()
}

fn event_types(state: &TaskState) -> Vec<String> {
    state.events.iter().map(|e| e.event_type.clone()).collect()
}

/// The pid in the persisted driver handle of a task.
fn persisted_pid(dir: &Path, alloc_id: &str, task: &str) -> Option<u32> {
    let path = dir.join(format!("client/state/allocs/{alloc_id}.json"));
    let record: client::AllocRecord = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    record.tasks.get(task)?.handle.as_ref()?.pid
}

fn alive(pid: u32) -> bool {
    drivers::procfs::read_stat(pid).is_some_and(|s| !s.is_dead())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_heartbeats_and_keeps_its_identity() {
    let dir = TestDir::new("client-register");
    let server = FakeServer::new(Duration::from_millis(200));
    let client = start(dir.path(), &server).await;
    let id = client.node_id().to_string();
    eventually("ready after heartbeats", LIMIT, || {
        let node = server.node(&id)?;
        (node.status == "ready" && server.heartbeats(&id) >= 3).then_some(())
    })
    .await;
    let node = server.node(&id).unwrap();
    assert_eq!(node.name, "test-node");
    assert_eq!(node.datacenter, "dc1");
    assert_eq!(node.meta["rack"], "r1");
    let attr = |k: &str| node.attributes.get(k).cloned().unwrap_or_default();
    assert!(attr("cpu.numcores").parse::<u32>().unwrap() >= 1);
    assert!(attr("cpu.totalcompute").parse::<u64>().unwrap() >= 1);
    assert!(attr("memory.totalbytes").parse::<u64>().unwrap() > 0);
    assert_eq!(attr("kernel.name"), "linux");
    assert!(!attr("unique.hostname").is_empty());
    assert!(!attr("unique.network.ip-address").is_empty());
    assert_eq!(attr("driver.raw_exec"), "1");
    assert!(node.drivers["raw_exec"].healthy);
    assert!(node.drivers.contains_key("mock_driver"));
    assert!(node.node_resources.as_ref().unwrap().memory.memory_mb > 0);
    assert_eq!(client.node().status, "ready");
    assert!(client.is_registered());
    client.shutdown().await;

    let again = start(dir.path(), &server).await;
    assert_eq!(again.node_id(), id, "the identity is kept in the data dir");
    again.shutdown().await;
}

/// A server that lost its state answers heartbeats with NotFound; the client registers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_again_when_the_server_forgets_the_node() {
    let dir = TestDir::new("client-reregister");
    let server = FakeServer::new(Duration::from_millis(200));
    let client = start(dir.path(), &server).await;
    let id = client.node_id().to_string();
    eventually("registered", LIMIT, || server.node(&id)).await;
    server.forget_nodes();
    eventually("registered again", LIMIT, || {
        (server.registrations() >= 2)
            .then(|| server.node(&id))
            .flatten()
    })
    .await;
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_exec_task_runs_logs_and_completes() {
    let dir = TestDir::new("client-run");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let t = sh("hello", "echo hello from ${NOMAD_TASK_NAME}; sleep 0.5");
    let a = alloc(client.node_id(), job("hello", "batch", vec![t]));
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "complete").await;
    let statuses = server.client_statuses(&a.id);
    assert_eq!(statuses.last().map(|s| s.as_str()), Some("complete"));
    assert!(statuses.contains(&"running".into()), "{statuses:?}");
    let log = std::fs::read_to_string(client.alloc_dir(&a.id).join("alloc/logs/hello.stdout.0"))
        .expect("stdout log");
    assert_eq!(log, "hello from hello\n");
    let state = task_state(&server, &a.id, "hello");
    assert_eq!(state.state, "dead");
    assert!(!state.failed);
    assert_eq!(
        event_types(&state),
        ["Received", "Task Setup", "Started", "Terminated"]
    );
    assert!(state.started_at.is_some() && state.finished_at.is_some());
    for sub in [
        "alloc/data",
        "alloc/tmp",
        "hello/local",
        "hello/secrets",
        "hello/tmp",
    ] {
        assert!(client.alloc_dir(&a.id).join(sub).is_dir(), "{sub}");
    }
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_get_nomads_environment_and_interpolation() {
    let dir = TestDir::new("client-env");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let mut t = sh(
        "envtask",
        "env > ${NOMAD_TASK_DIR}/env.txt; echo ${attr.kernel.name} ${meta.rack} ${node.unique.name} ${env[\"FROM_ENV\"]} > ${NOMAD_ALLOC_DIR}/data/interp.txt",
    );
    t.env.insert(
        "FROM_ENV".into(),
        "${node.datacenter}-${NOMAD_GROUP_NAME}".into(),
    );
    t.meta.insert("owner".into(), "ops".into());
    let mut a = alloc(client.node_id(), job("envjob", "batch", vec![t]));
    a.allocated_resources.as_mut().unwrap().shared.ports = vec![AllocatedPortMapping {
        label: "http".into(),
        value: 23456,
        to: 0,
        host_ip: "127.0.0.1".into(),
    }];
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "complete").await;
    let root = client.alloc_dir(&a.id);
    let env = std::fs::read_to_string(root.join("envtask/local/env.txt")).unwrap();
    let want = [
        format!("NOMAD_ALLOC_ID={}", a.id),
        "NOMAD_ALLOC_NAME=envjob.group[0]".into(),
        "NOMAD_ALLOC_INDEX=0".into(),
        "NOMAD_TASK_NAME=envtask".into(),
        "NOMAD_GROUP_NAME=group".into(),
        "NOMAD_JOB_NAME=envjob".into(),
        "NOMAD_JOB_ID=envjob".into(),
        format!("NOMAD_ALLOC_DIR={}", root.join("alloc").display()),
        format!("NOMAD_TASK_DIR={}", root.join("envtask/local").display()),
        format!(
            "NOMAD_SECRETS_DIR={}",
            root.join("envtask/secrets").display()
        ),
        "NOMAD_CPU_LIMIT=100".into(),
        "NOMAD_MEMORY_LIMIT=300".into(),
        "NOMAD_PORT_http=23456".into(),
        "NOMAD_IP_http=127.0.0.1".into(),
        "NOMAD_ADDR_http=127.0.0.1:23456".into(),
        "NOMAD_HOST_PORT_http=23456".into(),
        "NOMAD_META_owner=ops".into(),
        "NOMAD_DC=dc1".into(),
        "NOMAD_REGION=global".into(),
        "NOMAD_NAMESPACE=default".into(),
        "FROM_ENV=dc1-group".into(),
    ];
    let lines: Vec<&str> = env.lines().collect();
    for w in &want {
        assert!(lines.contains(&w.as_str()), "{w} missing from\n{env}");
    }
    assert!(
        lines.iter().any(|l| l.starts_with("PATH=")),
        "host env passes through"
    );
    let interp = std::fs::read_to_string(root.join("alloc/data/interp.txt")).unwrap();
    assert_eq!(interp, "linux r1 test-node dc1-group\n");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_task_restarts_per_policy_then_the_alloc_fails() {
    let dir = TestDir::new("client-restart");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let mut t = sh("flaky", "echo run >> ${NOMAD_ALLOC_DIR}/data/runs; exit 3");
    t.restart_policy = Some(fast_restarts(2));
    let a = alloc(client.node_id(), job("flaky", "batch", vec![t]));
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "failed").await;
    let runs = std::fs::read_to_string(client.alloc_dir(&a.id).join("alloc/data/runs")).unwrap();
    assert_eq!(runs.lines().count(), 3, "the first run and 2 restarts");
    let state = task_state(&server, &a.id, "flaky");
    assert_eq!(state.restarts, 2);
    assert!(state.failed);
    assert_eq!(state.state, "dead");
    let types = event_types(&state);
    assert_eq!(
        types.iter().filter(|t| *t == "Restarting").count(),
        2,
        "{types:?}"
    );
    assert_eq!(types.last().map(String::as_str), Some("Not Restarting"));
    let terminated = state
        .events
        .iter()
        .find(|e| e.event_type == "Terminated")
        .unwrap();
    assert_eq!(terminated.exit_code, 3);
    client.shutdown().await;
}

/// `job stop` of a task that ignores its kill signal: it is killed after `kill_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_kills_after_the_kill_timeout() {
    let dir = TestDir::new("client-stop");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let mut t = sh(
        "stubborn",
        "trap '' INT TERM; sleep 1000 & wait; sleep 1000",
    );
    t.kill_timeout = Some(model::Duration::from_millis(800));
    let a = alloc(client.node_id(), job("stubborn", "service", vec![t]));
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "running").await;
    let pid = eventually("persisted pid", LIMIT, || {
        persisted_pid(dir.path(), &a.id, "stubborn")
    })
    .await;
    let stopped_at = Instant::now();
    server.stop_alloc(&a.id);
    wait_status(&server, &a.id, "complete").await;
    let took = stopped_at.elapsed();
    assert!(
        took >= Duration::from_millis(800),
        "killed before the timeout: {took:?}"
    );
    assert!(took < Duration::from_secs(8), "{took:?}");
    assert!(!alive(pid));
    let state = task_state(&server, &a.id, "stubborn");
    let types = event_types(&state);
    for want in ["Killing", "Killed"] {
        assert!(types.iter().any(|t| t == want), "{want} in {types:?}");
    }
    assert!(!state.failed);
    let killing = state
        .events
        .iter()
        .find(|e| e.event_type == "Killing")
        .unwrap();
    assert_eq!(killing.kill_timeout, model::Duration::from_millis(800));
    client.shutdown().await;
}

/// Shared by the two restart tests: a running task, a client that goes away, a new client.
async fn reattach_after(dir: &TestDir, server: &Arc<FakeServer>, how: &str) {
    let client = start(dir.path(), server).await;
    let t = task(
        "sleeper",
        "raw_exec",
        json!({"command": "/bin/sleep", "args": ["1000"]}),
    );
    let a = alloc(client.node_id(), job("sleeper", "service", vec![t]));
    server.add_alloc(a.clone());
    wait_status(server, &a.id, "running").await;
    let pid = eventually("persisted pid", LIMIT, || {
        persisted_pid(dir.path(), &a.id, "sleeper")
    })
    .await;
    match how {
        "shutdown" => client.shutdown().await,
        _ => drop(client),
    }
    assert!(alive(pid), "the task outlives its client");

    let client = start(dir.path(), server).await;
    eventually("recovered runner", LIMIT, || {
        client
            .alloc_status(&a.id)
            .filter(|s| s.client_status == "running")
    })
    .await;
    // The recovered task is watched: it is still the same process, and was not started again.
    let status = client.alloc_status(&a.id).unwrap();
    let state = &status.task_states["sleeper"];
    assert_eq!(state.restarts, 0);
    assert_eq!(
        event_types(state)
            .iter()
            .filter(|t| *t == "Started")
            .count(),
        1,
        "{:?}",
        event_types(state)
    );
    assert_eq!(persisted_pid(dir.path(), &a.id, "sleeper"), Some(pid));
    assert!(alive(pid));
    // And the new client controls it.
    server.stop_alloc(&a.id);
    wait_status(server, &a.id, "complete").await;
    eventually("the task is gone", LIMIT, || (!alive(pid)).then_some(())).await;
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_client_reattaches_to_its_task() {
    let dir = TestDir::new("client-reattach");
    let server = FakeServer::new(Duration::from_secs(5));
    reattach_after(&dir, &server, "shutdown").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_leaves_its_task_to_the_next_one() {
    let dir = TestDir::new("client-reattach-drop");
    let server = FakeServer::new(Duration::from_secs(5));
    reattach_after(&dir, &server, "drop").await;
}

/// A task that exited while no client was running is recorded as exited and restarted by
/// its policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_exited_meanwhile_is_recorded_and_restarted() {
    let dir = TestDir::new("client-exited-meanwhile");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let mut t = sh("short", "echo run >> ${NOMAD_ALLOC_DIR}/data/runs; sleep 1");
    t.restart_policy = Some(fast_restarts(5));
    let a = alloc(client.node_id(), job("short", "service", vec![t]));
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "running").await;
    let pid = eventually("persisted pid", LIMIT, || {
        persisted_pid(dir.path(), &a.id, "short")
    })
    .await;
    client.shutdown().await;
    eventually("the task exits on its own", LIMIT, || {
        (!alive(pid)).then_some(())
    })
    .await;

    let client = start(dir.path(), &server).await;
    let status = eventually("restarted after recovery", LIMIT, || {
        client
            .alloc_status(&a.id)
            .filter(|s| s.task_states["short"].restarts >= 1)
    })
    .await;
    let state = &status.task_states["short"];
    let terminated = state
        .events
        .iter()
        .find(|e| e.event_type == "Terminated" && e.message.contains("unknown"))
        .expect("an exit recorded with an unknown status");
    assert_eq!(terminated.exit_code, 0);
    client.shutdown().await;
}

/// Tasks keep running while the servers are unreachable; their status reaches the servers later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_run_through_a_server_outage() {
    let dir = TestDir::new("client-outage");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let t = sh(
        "worker",
        "sleep 0.5; echo done > ${NOMAD_ALLOC_DIR}/data/out",
    );
    let a = alloc(client.node_id(), job("worker", "batch", vec![t]));
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "running").await;
    server.set_unreachable(true);
    eventually("the task finishes without servers", LIMIT, || {
        client
            .alloc_status(&a.id)
            .filter(|s| s.client_status == "complete")
    })
    .await;
    assert_eq!(server.alloc(&a.id).unwrap().client_status, "running");
    let out = std::fs::read_to_string(client.alloc_dir(&a.id).join("alloc/data/out")).unwrap();
    assert_eq!(out, "done\n");
    server.set_unreachable(false);
    wait_status(&server, &a.id, "complete").await;
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_hooks_run_in_order() {
    let dir = TestDir::new("client-lifecycle");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let order = "${NOMAD_ALLOC_DIR}/data/order";
    let mut pre = sh("pre", &format!("echo pre >> {order}"));
    pre.lifecycle = Some(model::TaskLifecycle {
        hook: "prestart".into(),
        sidecar: false,
    });
    let main = sh("main", &format!("sleep 0.2; echo main >> {order}"));
    let mut post = sh("post", &format!("echo post >> {order}"));
    post.lifecycle = Some(model::TaskLifecycle {
        hook: "poststop".into(),
        sidecar: false,
    });
    let mut side = task("side", "mock_driver", json!({"run_for": "1h"}));
    side.lifecycle = Some(model::TaskLifecycle {
        hook: "prestart".into(),
        sidecar: true,
    });
    let a = alloc(
        client.node_id(),
        job("hooks", "batch", vec![pre, main, post, side]),
    );
    server.add_alloc(a.clone());
    let done = wait_status(&server, &a.id, "complete").await;
    let order = std::fs::read_to_string(client.alloc_dir(&a.id).join("alloc/data/order")).unwrap();
    assert_eq!(order, "pre\nmain\npost\n");
    let side = &done.task_states["side"];
    assert_eq!(side.state, "dead");
    assert!(
        event_types(side).iter().any(|t| t == "Killed"),
        "the sidecar is stopped"
    );
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_stops_its_siblings() {
    let dir = TestDir::new("client-sibling");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let mut bad = sh("bad", "sleep 0.3; exit 1");
    bad.restart_policy = Some(fast_restarts(0));
    let good = task("good", "mock_driver", json!({"run_for": "1h"}));
    let a = alloc(
        client.node_id(),
        job("siblings", "service", vec![bad, good]),
    );
    server.add_alloc(a.clone());
    let failed = wait_status(&server, &a.id, "failed").await;
    let good = &failed.task_states["good"];
    eventually("the sibling is killed", LIMIT, || {
        let s = task_state(&server, &a.id, "good");
        (s.state == "dead").then_some(())
    })
    .await;
    let good_now = task_state(&server, &a.id, "good");
    assert!(
        event_types(&good_now)
            .iter()
            .any(|t| t == "Sibling Task Failed"),
        "{:?} / {:?}",
        event_types(good),
        event_types(&good_now)
    );
    assert!(!good_now.failed);
    client.shutdown().await;
}

/// An allocation the servers forgot (garbage collected) is stopped and its files removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_allocation_is_destroyed() {
    let dir = TestDir::new("client-gc");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let t = task("idle", "mock_driver", json!({"run_for": "1h"}));
    let a = alloc(client.node_id(), job("idle", "service", vec![t]));
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "running").await;
    let root = client.alloc_dir(&a.id);
    assert!(root.is_dir());
    server.remove_alloc(&a.id);
    eventually("alloc dir and state removed", LIMIT, || {
        let state = dir
            .path()
            .join(format!("client/state/allocs/{}.json", a.id));
        (!root.exists() && !state.exists()).then_some(())
    })
    .await;
    assert!(client.alloc_ids().is_empty());
    client.shutdown().await;
}

/// An allocation of a deployment reports itself healthy once its tasks ran for
/// `min_healthy_time`, so the servers' deployment can progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_allocation_reports_its_health() {
    let dir = TestDir::new("client-health");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let t = task("svc", "mock_driver", json!({"run_for": "1h"}));
    let mut a = alloc(client.node_id(), job("svc", "service", vec![t]));
    a.deployment_id = "d1".into();
    let group = &mut std::sync::Arc::make_mut(a.job.as_mut().unwrap()).task_groups[0];
    let update = group.update.get_or_insert_with(Default::default);
    update.min_healthy_time = Some(model::Duration::from_millis(300));
    update.healthy_deadline = Some(model::Duration::from_secs(30));
    server.add_alloc(a.clone());
    let started = Instant::now();
    let healthy = eventually("healthy", LIMIT, || {
        server
            .updates_for(&a.id)
            .into_iter()
            .find_map(|u| u.deployment_status.and_then(|d| d.healthy))
    })
    .await;
    assert!(healthy);
    assert!(started.elapsed() >= Duration::from_millis(300));
    client.shutdown().await;
}

/// A group with `disconnect { stop_on_client_after }`: cut off from every server for that long,
/// the client stops its tasks itself (and says why); the servers hear it once they are back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_on_client_after_stops_tasks_while_no_server_answers() {
    let dir = TestDir::new("client-stop-after");
    let server = FakeServer::new(Duration::from_millis(400));
    let client = start(dir.path(), &server).await;
    let mut j = job("cut", "service", vec![sh("t", "exec sleep 600")]);
    j.task_groups[0].disconnect = Some(model::group::DisconnectStrategy {
        stop_on_client_after: Some(model::Duration(1_000_000_000)),
        ..Default::default()
    });
    let a = alloc(client.node_id(), j);
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "running").await;
    server.set_unreachable(true);
    let cut = Instant::now();
    let status = eventually("the task is stopped by the client", LIMIT, || {
        client
            .alloc_status(&a.id)
            .filter(|s| s.task_states.get("t").is_some_and(|t| t.state == "dead"))
    })
    .await;
    assert!(
        cut.elapsed() >= Duration::from_secs(1),
        "{:?}",
        cut.elapsed()
    );
    let events = &status.task_states["t"].events;
    assert!(
        events.iter().any(
            |e| e.event_type == "Killing" && e.display_message.contains("stop_on_client_after")
        ),
        "{events:?}"
    );
    server.set_unreachable(false);
    eventually("the servers hear it", LIMIT, || {
        server.alloc(&a.id).filter(|x| x.client_status != "running")
    })
    .await;
    client.shutdown().await;
}

/// `user = "root"` under exec is refused by Nomad's default `user.denylist` before anything
/// starts (validate hook, not restarted); a configured denylist and `user.checked_drivers` apply
/// to the drivers they name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_user_fails_the_task_before_it_starts() {
    let dir = TestDir::new("client-denylist");
    let server = FakeServer::new(Duration::from_secs(5));
    let mut cfg = config(dir.path());
    cfg.options.insert(
        client::OPTION_USER_CHECKED_DRIVERS.into(),
        "exec,raw_exec".into(),
    );
    cfg.options
        .insert(client::OPTION_USER_DENYLIST.into(), "root,svc".into());
    let mut all = drivers();
    all.push(Arc::new(drivers::ExecDriver::new()));
    let client = Client::start(cfg, server.clone(), all)
        .await
        .expect("client starts");
    let cases = [
        ("exec", "root", true),
        ("raw_exec", "svc", true),
        ("raw_exec", "", false),
    ];
    for (i, (driver, user, denied)) in cases.into_iter().enumerate() {
        let mut t = task("t", driver, json!({"command": "/bin/true"}));
        t.user = user.into();
        let mut j = job(&format!("deny-{i}"), "batch", vec![t]);
        j.task_groups[0].restart_policy = Some(fast_restarts(0));
        let a = alloc(client.node_id(), j);
        server.add_alloc(a.clone());
        if !denied {
            wait_status(&server, &a.id, "complete").await;
            continue;
        }
        wait_status(&server, &a.id, "failed").await;
        let state = task_state(&server, &a.id, "t");
        let want = format!("validate: running as user {user:?} is disallowed");
        assert!(
            state
                .events
                .iter()
                .any(|e| e.event_type == "Task hook failed" && e.display_message == want),
            "{driver}/{user}: {:?}",
            state.events
        );
        assert!(
            !event_types(&state).contains(&"Started".to_string()),
            "{:?}",
            state.events
        );
        assert_eq!(state.restarts, 0);
    }
    client.shutdown().await;
}

/// `Node.GetClientAllocs` lists IDs with their `AllocModifyIndex`; the client fetches in full
/// only the allocations new to it or changed since — not every allocation on every wake (its
/// own reports wake it here, as the fake server has one index for everything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_new_or_changed_allocations_are_fetched() {
    let dir = TestDir::new("client-fetch");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let idle = || task("idle", "mock_driver", json!({"run_for": "1h"}));
    let a = alloc(client.node_id(), job("a", "service", vec![idle()]));
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "running").await;
    assert_eq!(server.fetched(), 1);
    let b = alloc(client.node_id(), job("b", "service", vec![idle()]));
    server.add_alloc(b.clone());
    wait_status(&server, &b.id, "running").await;
    assert_eq!(server.fetched(), 2, "a, unchanged, is not fetched again");
    server.stop_alloc(&a.id);
    wait_status(&server, &a.id, "complete").await;
    assert_eq!(server.fetched(), 3, "only the stopped one is fetched");
    server.remove_alloc(&a.id);
    eventually("a is forgotten", LIMIT, || {
        (client.alloc_ids() == vec![b.id.clone()]).then_some(())
    })
    .await;
    assert_eq!(server.fetched(), 3, "a removal needs no fetch");
    client.shutdown().await;
}

/// An allocation the servers call `unknown` gets its real status sent once per `unknown` copy:
/// the answer changes only client fields (no new `AllocModifyIndex`), so the client's copy stays
/// `unknown`, and later wakes must not send it again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_allocation_is_answered_once_per_copy() {
    let dir = TestDir::new("client-unknown");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let idle = || task("idle", "mock_driver", json!({"run_for": "1h"}));
    let a = alloc(client.node_id(), job("a", "service", vec![idle()]));
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "running").await;
    let before = server.updates_for(&a.id).len();
    server.mark_unknown(&a.id);
    wait_status(&server, &a.id, "running").await;
    assert_eq!(server.updates_for(&a.id).len(), before + 1, "answered once");
    // Other changes on the node wake the client's query again and again.
    for job_id in ["b", "c", "d"] {
        let other = alloc(client.node_id(), job(job_id, "service", vec![idle()]));
        server.add_alloc(other.clone());
        wait_status(&server, &other.id, "running").await;
    }
    assert_eq!(
        server.updates_for(&a.id).len(),
        before + 1,
        "the same unknown copy is not answered again"
    );
    // A newer unknown copy (another disconnect) is answered again.
    server.mark_unknown(&a.id);
    wait_status(&server, &a.id, "running").await;
    assert_eq!(server.updates_for(&a.id).len(), before + 2);
    client.shutdown().await;
}

/// A server behind the one the client asked before (a lagging follower, one cut off from the
/// leader) answers with an older list: the client ignores it, as Nomad's does
/// (hashicorp/nomad#18267), rather than act on the past. Before, a lower index made this client
/// take the older list as the truth: an allocation placed since, missing from it, was destroyed
/// as removed. The server simulation (`server/tests/sim.rs`, seed 32) showed the harm of acting
/// on older lists: its node started again an allocation it had been told to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_list_from_a_server_behind_is_ignored() {
    let dir = TestDir::new("client-behind");
    let server = FakeServer::new(Duration::from_secs(5));
    let client = start(dir.path(), &server).await;
    let idle = || task("idle", "mock_driver", json!({"run_for": "1h"}));
    let a = alloc(client.node_id(), job("a", "service", vec![idle()]));
    server.add_alloc(a.clone());
    wait_status(&server, &a.id, "running").await;
    let before = server.copy_allocs();
    let b = alloc(client.node_id(), job("b", "service", vec![idle()]));
    server.add_alloc(b.clone());
    wait_status(&server, &b.id, "running").await;
    // The client now asks a server that has not seen `b` placed yet.
    server.answer_from(Some(before));
    eventually("a few lists answered from behind", LIMIT, || {
        (server.behind_answers() >= 3).then_some(())
    })
    .await;
    for id in [&a.id, &b.id] {
        let status = client.alloc_status(id).map(|u| u.client_status.to_string());
        assert_eq!(
            status.as_deref(),
            Some("running"),
            "allocation {id} after older lists: {status:?}"
        );
    }
    server.answer_from(None);
    client.shutdown().await;
}

/// Servers that lost their state (a cluster rebuilt from empty data dirs) start their indexes
/// over: the client, told its node is unknown, registers again and follows the new history
/// rather than ignore every list as older than the last one it acted on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_servers_start_over_the_client_follows_their_new_history() {
    let dir = TestDir::new("client-start-over");
    let server = FakeServer::new(Duration::from_secs(1));
    let client = start(dir.path(), &server).await;
    let idle = || task("idle", "mock_driver", json!({"run_for": "1h"}));
    for job_id in ["a", "b", "c", "d"] {
        let a = alloc(client.node_id(), job(job_id, "service", vec![idle()]));
        server.add_alloc(a.clone());
        wait_status(&server, &a.id, "running").await;
    }
    let registrations = server.registrations();
    server.start_over();
    eventually("the node registers again", LIMIT, || {
        (server.registrations() > registrations).then_some(())
    })
    .await;
    let fresh = alloc(client.node_id(), job("fresh", "service", vec![idle()]));
    server.add_alloc(fresh.clone());
    wait_status(&server, &fresh.id, "running").await;
    client.shutdown().await;
}
