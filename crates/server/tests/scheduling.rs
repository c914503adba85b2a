//! A real single-server cluster schedules: nodes register, jobs register, the leader's broker, workers
//! and plan applier turn evaluations into allocations — waited on with deadlines, never blind sleeps.

use model::node::{DriverInfo, Node, NodeCpuResources, NodeMemoryResources, NodeResources};
use model::{Job, Resources, Task, TaskGroup};
use server::{JobRegisterRequest, Server, ServerConfig};
use state::{StateSnapshot, Table};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(30);

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "caravan-server-it-{tag}-{}-{seq}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn start(dir: &TempDir) -> Server {
    let mut cfg = ServerConfig::new(dir.0.join("server"), "127.0.0.1:0".parse().unwrap());
    cfg.raft_heartbeat_ms = 50;
    cfg.raft_election_timeout_ms = (150, 300);
    cfg.num_schedulers = 2;
    let deadline = Instant::now() + DEADLINE;
    // A server shut down on the same data dir may still be releasing its raft log: wait for the
    // lock, not fail on it.
    let server = loop {
        match Server::start(cfg.clone()).await {
            Ok(s) => break s,
            Err(e) if e.message.contains("already open") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("server starts: {e:?}"),
        }
    };
    while !server.schedulers_running() {
        assert!(Instant::now() < deadline, "the leader loops never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server
}

fn node(id: &str, cpu: i64, memory_mb: i64) -> Node {
    let mut n = Node {
        id: id.into(),
        secret_id: format!("secret-{id}"),
        name: format!("node-{id}"),
        datacenter: "dc1".into(),
        status: "ready".into(),
        computed_class: "v1:it".into(),
        node_resources: Some(NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: cpu,
                ..NodeCpuResources::default()
            },
            memory: NodeMemoryResources { memory_mb },
            ..NodeResources::default()
        }),
        ..Node::default()
    };
    n.node_resources.as_mut().unwrap().disk.disk_mb = 100_000;
    n.drivers.insert(
        "raw_exec".into(),
        DriverInfo {
            detected: true,
            healthy: true,
            ..DriverInfo::default()
        },
    );
    n
}

fn job(id: &str, count: i32, cpu: i32, memory_mb: i32) -> Job {
    Job {
        id: id.into(),
        datacenters: vec!["dc1".into()],
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count: Some(count),
            tasks: vec![Task {
                name: "server".into(),
                driver: "raw_exec".into(),
                config: [("command".to_string(), serde_json::json!("/bin/true"))].into(),
                resources: Some(Resources {
                    cpu: Some(cpu),
                    memory_mb: Some(memory_mb),
                    ..Resources::default()
                }),
                ..Task::default()
            }],
            ..TaskGroup::default()
        }],
        ..Job::default()
    }
}

async fn register(server: &Server, job: Job) -> String {
    let resp = server
        .job_register(JobRegisterRequest {
            job,
            enforce_index: false,
            job_modify_index: 0,
            preserve_counts: false,
            eval_priority: 0,
            submission: None,
            multiregion_version: None,
        })
        .await
        .expect("job registers");
    assert!(!resp.eval_id.is_empty());
    resp.eval_id
}

/// Waits (blocking queries on evals and allocs) until `done` holds, or panics at the deadline
/// with `what`.
async fn wait_until(
    server: &Server,
    what: &str,
    done: impl Fn(&StateSnapshot) -> bool,
) -> StateSnapshot {
    let deadline = Instant::now() + DEADLINE;
    let tables = [Table::Evals, Table::Allocs];
    let mut snap = server.state().snapshot();
    loop {
        if done(&snap) {
            return snap;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting until {what}: {snap:?}"
        );
        let index = snap.max_table_index(&tables).max(1);
        snap = server.state().wait_for(&tables, index, deadline).await;
    }
}

fn live_allocs(snap: &StateSnapshot, job_id: &str) -> usize {
    snap.allocs_by_job("default", job_id)
        .iter()
        .filter(|a| !a.is_terminal())
        .count()
}

fn eval_status(snap: &StateSnapshot, id: &str) -> String {
    snap.eval(id)
        .map(|e| e.status.to_string())
        .unwrap_or_default()
}

fn assert_nothing_overcommitted(snap: &StateSnapshot) {
    for node in snap.nodes("") {
        let allocs = snap.allocs_by_node(&node.id);
        let live: Vec<_> = allocs
            .iter()
            .map(|a| &**a)
            .filter(|a| !a.is_terminal())
            .collect();
        scheduler::allocs_fit(&node, &live)
            .unwrap_or_else(|e| panic!("node {} is overcommitted: {e}", node.id));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_job_gets_its_allocations_and_its_eval_completes() {
    let dir = TempDir::new("place");
    let server = start(&dir).await;
    for id in ["n1", "n2"] {
        let resp = server
            .node_register(node(id, 2000, 2048))
            .await
            .expect("node registers");
        assert!(resp.heartbeat_ttl.0 > 0);
    }
    let eval_id = register(&server, job("web", 3, 500, 256)).await;
    let snap = wait_until(
        &server,
        "3 allocations exist and the eval is complete",
        |s| live_allocs(s, "web") == 3 && eval_status(s, &eval_id) == "complete",
    )
    .await;
    assert_nothing_overcommitted(&snap);
    let allocs = snap.allocs_by_job("default", "web");
    assert!(allocs
        .iter()
        .all(|a| a.eval_id == eval_id && a.job.is_some()));
    let job = snap.job("default", "web").unwrap();
    assert_eq!(job.status.as_ref().map(|s| s.as_str()), Some("running"));
    let summary = snap.job_summary("default", "web").unwrap();
    assert_eq!(summary.summary["web"].starting, 3);
    assert_eq!(summary.summary["web"].queued, 0);

    // Re-evaluating with nothing changed places nothing new.
    let again = server.job_evaluate("default", "web").await.unwrap().eval_id;
    let snap = wait_until(&server, "the second eval completes", |s| {
        eval_status(s, &again) == "complete"
    })
    .await;
    assert_eq!(snap.allocs_by_job("default", "web").len(), 3);

    // Stopping the job stops its allocations.
    server
        .job_deregister("default", "web", false)
        .await
        .unwrap();
    wait_until(&server, "every allocation is stopped", |s| {
        live_allocs(s, "web") == 0
    })
    .await;
    server.shutdown().await;
    assert!(!server.schedulers_running());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_does_not_fit_blocks_and_runs_when_a_node_joins() {
    let dir = TempDir::new("blocked");
    let server = start(&dir).await;
    server
        .node_register(node("small", 1000, 1024))
        .await
        .unwrap();
    let eval_id = register(&server, job("big", 2, 800, 512)).await;
    let snap = wait_until(
        &server,
        "the eval completes with a blocked follow-up",
        |s| {
            let e = s.eval(&eval_id);
            e.is_some_and(|e| e.status == "complete" && !e.blocked_eval.is_empty())
        },
    )
    .await;
    assert_eq!(live_allocs(&snap, "big"), 1, "one fits on the small node");
    let e = snap.eval(&eval_id).unwrap();
    assert!(e.failed_tg_allocs.contains_key("web"));
    let blocked = e.blocked_eval.clone();
    assert_eq!(eval_status(&snap, &blocked), "blocked");

    server
        .node_register(node("large", 4000, 4096))
        .await
        .unwrap();
    let snap = wait_until(
        &server,
        "the blocked eval places the second allocation",
        |s| live_allocs(s, "big") == 2 && eval_status(s, &blocked) == "complete",
    )
    .await;
    assert_nothing_overcommitted(&snap);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_jobs_at_once_never_overcommit() {
    let dir = TempDir::new("many");
    let server = start(&dir).await;
    for i in 0..3 {
        server
            .node_register(node(&format!("n{i}"), 1000, 1024))
            .await
            .unwrap();
    }
    // Twelve single-allocation jobs of 500 MHz compete for 3 × 1000 MHz: six fit.
    let mut evals = Vec::new();
    for i in 0..12 {
        evals.push(register(&server, job(&format!("j{i}"), 1, 500, 128)).await);
    }
    let snap = wait_until(&server, "every eval is done", |s| {
        evals.iter().all(|e| {
            let status = eval_status(s, e);
            status == "complete" || status == "failed"
        })
    })
    .await;
    assert_nothing_overcommitted(&snap);
    let placed: usize = (0..12).map(|i| live_allocs(&snap, &format!("j{i}"))).sum();
    assert_eq!(placed, 6, "exactly the capacity");
    server.shutdown().await;
}

/// Two schedulers plan at once against the same GPUs: the plan applier's fit check (an instance
/// never held twice) is what keeps a losing plan from taking a GPU a winning one just took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_plans_never_give_a_gpu_twice() {
    let dir = TempDir::new("gpus");
    let server = start(&dir).await;
    for i in 0..3 {
        let mut n = node(&format!("n{i}"), 100_000, 100_000);
        n.node_resources.as_mut().unwrap().devices = vec![model::node::NodeDeviceResource {
            vendor: "nvidia".into(),
            device_type: "gpu".into(),
            name: "t4".into(),
            instances: (0..2)
                .map(|k| model::node::NodeDevice {
                    id: format!("n{i}-g{k}"),
                    healthy: true,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }];
        server.node_register(n).await.unwrap();
    }
    // Twelve one-GPU jobs for six GPUs, registered back to back so both workers plan at once.
    let mut evals = Vec::new();
    for i in 0..12 {
        let mut j = job(&format!("g{i}"), 1, 100, 64);
        j.task_groups[0].tasks[0]
            .resources
            .as_mut()
            .unwrap()
            .devices = vec![model::resources::RequestedDevice {
            name: "nvidia/gpu".into(),
            count: Some(1),
            ..Default::default()
        }];
        evals.push(register(&server, j).await);
    }
    let snap = wait_until(&server, "every eval is done", |s| {
        evals.iter().all(|e| {
            let status = eval_status(s, e);
            status == "complete" || status == "failed"
        })
    })
    .await;
    assert_nothing_overcommitted(&snap);
    let mut given = Vec::new();
    for i in 0..12 {
        for a in snap.allocs_by_job("default", &format!("g{i}")) {
            if a.is_terminal() {
                continue;
            }
            for t in a.allocated_resources.as_ref().unwrap().tasks.values() {
                given.extend(t.devices.iter().flat_map(|d| d.device_ids.clone()));
            }
        }
    }
    given.sort();
    let distinct: std::collections::BTreeSet<_> = given.iter().collect();
    assert_eq!(given.len(), 6, "exactly the six GPUs: {given:?}");
    assert_eq!(distinct.len(), 6, "none given twice: {given:?}");
    server.shutdown().await;
}

/// The broker keeps nothing of its own: a restarted server (a new leadership) rebuilds it from the
/// evaluations in state, so a blocked evaluation made before the restart still wakes after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_rebuilds_the_broker_from_state() {
    let dir = TempDir::new("restart");
    let server = start(&dir).await;
    let eval_id = register(&server, job("early", 1, 500, 256)).await;
    let snap = wait_until(&server, "the eval completes blocked (no nodes yet)", |s| {
        s.eval(&eval_id)
            .is_some_and(|e| e.status == "complete" && !e.blocked_eval.is_empty())
    })
    .await;
    let blocked = snap.eval(&eval_id).unwrap().blocked_eval.clone();
    server.shutdown().await;
    drop(server);

    let server = start(&dir).await;
    assert_eq!(
        server.eval_broker_stats().await.map(|s| s.blocked),
        Some(1),
        "rebuilt with the blocked evaluation"
    );
    server.node_register(node("n1", 2000, 2048)).await.unwrap();
    wait_until(&server, "the blocked eval places the job", |s| {
        live_allocs(s, "early") == 1 && eval_status(s, &blocked) == "complete"
    })
    .await;
    server.shutdown().await;
}
