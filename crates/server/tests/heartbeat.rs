//! Heartbeat expiry on a real single-server cluster: a node that stops heartbeating is marked down
//! after its TTL plus the grace, its allocation is lost and replaced on a node that still
//! heartbeats, and it becomes ready again when it heartbeats again. Waits are deadlines on blocking
//! queries, never blind sleeps.

use model::node::{DriverInfo, Node, NodeCpuResources, NodeMemoryResources, NodeResources};
use model::wire::NodeUpdateStatusRequest;
use model::{Job, Resources, Task, TaskGroup};
use server::{JobRegisterRequest, Server, ServerConfig};
use state::{StateSnapshot, Table};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

const DEADLINE: Duration = Duration::from_secs(30);

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("caravan-server-hb-{tag}-{}", std::process::id()));
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

fn node(id: &str) -> Node {
    let mut n = Node {
        id: id.into(),
        secret_id: format!("secret-{id}"),
        name: format!("node-{id}"),
        datacenter: "dc1".into(),
        status: "ready".into(),
        computed_class: "v1:hb".into(),
        node_resources: Some(NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: 2000,
                ..NodeCpuResources::default()
            },
            memory: NodeMemoryResources { memory_mb: 2048 },
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

fn job(id: &str) -> Job {
    Job {
        id: id.into(),
        datacenters: vec!["dc1".into()],
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count: Some(1),
            tasks: vec![Task {
                name: "server".into(),
                driver: "raw_exec".into(),
                config: [("command".to_string(), serde_json::json!("/bin/sleep"))].into(),
                resources: Some(Resources {
                    cpu: Some(100),
                    memory_mb: Some(64),
                    ..Resources::default()
                }),
                ..Task::default()
            }],
            ..TaskGroup::default()
        }],
        ..Job::default()
    }
}

/// A single server with short heartbeat timings, its leader loops running.
async fn start_server(tag: &str) -> (Server, TempDir) {
    let dir = TempDir::new(tag);
    let server = start_in(&dir, Duration::from_millis(400)).await;
    (server, dir)
}

/// A server on `dir`'s data handing out `ttl` (grace 400 ms, failover TTL 2 s), its leader loops
/// running.
async fn start_in(dir: &TempDir, ttl: Duration) -> Server {
    let mut cfg = ServerConfig::new(dir.0.join("server"), "127.0.0.1:0".parse().unwrap());
    cfg.raft_heartbeat_ms = 50;
    cfg.raft_election_timeout_ms = (150, 300);
    cfg.num_schedulers = 2;
    cfg.min_heartbeat_ttl = ttl;
    cfg.heartbeat_grace = Duration::from_millis(400);
    cfg.failover_heartbeat_ttl = Duration::from_secs(2);
    let deadline = Instant::now() + DEADLINE;
    // A server shut down on the same data dir may still be releasing its raft log (tasks that
    // held the store finish after `shutdown` returns): wait for the lock, not fail on it.
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

/// The test's clients: every node in `alive` heartbeats every 100 ms. `strict`: every heartbeat
/// must be answered, with the configured TTL.
fn heartbeat_while_alive(
    server: &Server,
    alive: &Arc<Mutex<BTreeSet<String>>>,
    strict: bool,
) -> tokio::task::JoinHandle<()> {
    let (server, alive) = (server.clone(), alive.clone());
    tokio::spawn(async move {
        loop {
            let ids: Vec<String> = alive.lock().unwrap().iter().cloned().collect();
            for id in ids {
                let req = NodeUpdateStatusRequest {
                    node_id: id.clone(),
                    secret_id: format!("secret-{id}"),
                    status: Some(model::NodeStatus::Ready),
                };
                let resp = server.node_update_status(req).await;
                if strict {
                    let ttl = resp.expect("heartbeat").heartbeat_ttl.0;
                    assert!((400_000_000..800_000_000).contains(&ttl), "{ttl}");
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

async fn wait_until(
    server: &Server,
    what: &str,
    done: impl Fn(&StateSnapshot) -> bool,
) -> StateSnapshot {
    let deadline = Instant::now() + DEADLINE;
    let tables = [Table::Evals, Table::Allocs, Table::Nodes];
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

/// Registers `job` (one group of count 1) and returns its allocation once placed.
async fn place_one(server: &Server, job: Job) -> model::alloc::Allocation {
    let id = job.id.clone();
    server
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
    let snap = wait_until(server, "the job is placed", |s| {
        s.allocs_by_job("default", &id).len() == 1
    })
    .await;
    (*snap.allocs_by_job("default", &id)[0]).clone()
}

fn node_status(snap: &StateSnapshot, id: &str) -> String {
    snap.node(id)
        .map(|n| n.status.to_string())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_heartbeating_is_marked_down_and_its_alloc_replaced() {
    let (server, _dir) = start_server("expiry").await;

    for id in ["a", "b"] {
        let resp = server.node_register(node(id)).await.unwrap();
        // The configured TTL plus Nomad's random stagger of up to as much again.
        let ttl = resp.heartbeat_ttl.0;
        assert!(
            (400_000_000..800_000_000).contains(&ttl),
            "the configured TTL, staggered: {ttl}"
        );
    }
    // The test's clients: every node in `alive` heartbeats every 100 ms.
    let alive: Arc<Mutex<BTreeSet<String>>> =
        Arc::new(Mutex::new(["a", "b"].map(String::from).into()));
    let beating = heartbeat_while_alive(&server, &alive, true);

    let first = place_one(&server, job("web")).await;
    let (silent, survivor) = if first.node_id == "a" {
        ("a", "b")
    } else {
        ("b", "a")
    };
    // Both heartbeat past a TTL plus grace: neither is marked down.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let snap = server.state().snapshot();
    assert_eq!(node_status(&snap, "a"), "ready");
    assert_eq!(node_status(&snap, "b"), "ready");

    alive.lock().unwrap().remove(silent);
    let snap = wait_until(
        &server,
        "the silent node is down and its allocation replaced",
        |s| {
            let allocs = s.allocs_by_job("default", "web");
            node_status(s, silent) == "down"
                && allocs
                    .iter()
                    .any(|a| a.id == first.id && a.client_status == "lost")
                && allocs.iter().any(|a| {
                    a.node_id == survivor
                        && a.desired_status == "run"
                        && matches!(a.client_status.as_str(), "pending" | "running")
                })
        },
    )
    .await;
    assert_eq!(node_status(&snap, survivor), "ready");

    // The silent node heartbeats again: it is ready again.
    alive.lock().unwrap().insert(silent.to_owned());
    wait_until(&server, "the node is ready again", |s| {
        node_status(s, silent) == "ready"
    })
    .await;

    beating.abort();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_with_a_disconnect_block_is_disconnected_first_then_down() {
    let (server, _dir) = start_server("disconnect").await;
    for id in ["a", "b"] {
        server.node_register(node(id)).await.unwrap();
    }
    let alive: Arc<Mutex<BTreeSet<String>>> =
        Arc::new(Mutex::new(["a", "b"].map(String::from).into()));
    let beating = heartbeat_while_alive(&server, &alive, false);
    let mut j = job("web");
    j.task_groups[0].disconnect = Some(model::group::DisconnectStrategy {
        lost_after: Some(model::Duration(3_000_000_000)),
        ..Default::default()
    });
    let first = place_one(&server, j).await;
    let (silent, survivor) = if first.node_id == "a" {
        ("a", "b")
    } else {
        ("b", "a")
    };
    let silent_at = Instant::now();
    alive.lock().unwrap().remove(silent);
    wait_until(
        &server,
        "the silent node is disconnected, its allocation unknown and replaced",
        |s| {
            let allocs = s.allocs_by_job("default", "web");
            node_status(s, silent) == "disconnected"
                && allocs.iter().any(|a| {
                    a.id == first.id && a.client_status == "unknown" && a.desired_status == "run"
                })
                && allocs
                    .iter()
                    .any(|a| a.node_id == survivor && a.previous_allocation == first.id)
        },
    )
    .await;
    let snap = wait_until(&server, "the node is down after lost_after", |s| {
        node_status(s, silent) == "down"
            && s.allocs_by_job("default", "web")
                .iter()
                .any(|a| a.id == first.id && a.client_status == "lost")
    })
    .await;
    assert!(
        silent_at.elapsed() >= Duration::from_secs(3),
        "down only after lost_after: {:?}",
        silent_at.elapsed()
    );
    // Its replacement is the only one left running, and none more was placed.
    let live: Vec<_> = snap
        .allocs_by_job("default", "web")
        .into_iter()
        .filter(|a| a.desired_status == "run")
        .collect();
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].node_id, survivor);
    beating.abort();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returning_copy_is_settled_before_it_counts_as_running() {
    let (server, _dir) = start_server("reconnect").await;
    for id in ["a", "b"] {
        server.node_register(node(id)).await.unwrap();
    }
    let alive: Arc<Mutex<BTreeSet<String>>> =
        Arc::new(Mutex::new(["a", "b"].map(String::from).into()));
    let beating = heartbeat_while_alive(&server, &alive, false);
    let mut j = job("web");
    j.task_groups[0].disconnect = Some(model::group::DisconnectStrategy {
        lost_after: Some(model::Duration(60_000_000_000)),
        reconcile: Some("keep_original".into()),
        ..Default::default()
    });
    let first = place_one(&server, j).await;
    let silent = first.node_id.clone();
    alive.lock().unwrap().remove(&silent);
    let snap = wait_until(&server, "unknown and replaced", |s| {
        s.allocs_by_job("default", "web")
            .iter()
            .any(|a| a.previous_allocation == first.id)
            && s.alloc(&first.id)
                .is_some_and(|a| a.client_status == "unknown")
    })
    .await;
    let replacement = snap
        .allocs_by_job("default", "web")
        .into_iter()
        .find(|a| a.previous_allocation == first.id)
        .unwrap();
    // The client comes back and says its copy runs; the replacement runs too.
    alive.lock().unwrap().insert(silent.clone());
    let running = |id: &str, node: &str| model::wire::NodeUpdateAllocRequest {
        node_id: node.into(),
        secret_id: format!("secret-{node}"),
        allocs: vec![model::wire::AllocClientUpdate {
            id: id.into(),
            client_status: "running".into(),
            ..Default::default()
        }],
    };
    server
        .node_update_alloc(running(&replacement.id, &replacement.node_id))
        .await
        .unwrap();
    server
        .node_update_alloc(running(&first.id, &silent))
        .await
        .unwrap();
    // Right after that report: keep_original stopped the replacement first.
    let snap = server.state().snapshot();
    let kept: Vec<_> = snap
        .allocs_by_job("default", "web")
        .into_iter()
        .filter(|a| a.desired_status == "run" && a.client_status == "running")
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].id, first.id);
    let stopped = snap.alloc(&replacement.id).unwrap();
    assert_eq!(stopped.desired_status, "stop");
    assert_eq!(
        stopped.desired_description,
        "alloc not needed due to disconnected client reconnect"
    );
    beating.abort();
    server.shutdown().await;
}

/// A new leader times every node that is not down, whatever its status — Nomad's
/// `initializeHeartbeatTimers`. A client that registered (`initializing`) while the leader loops
/// were starting had its own timer dropped; before this it was never marked down, even once dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_times_initializing_nodes_too() {
    let dir = TempDir::new("failover-all");
    // A long TTL, so no timer of this leadership fires before the restart.
    let server = start_in(&dir, Duration::from_secs(600)).await;
    let mut early = node("early");
    early.status = "initializing".into();
    server.node_register(early).await.unwrap();
    server.node_register(node("ready")).await.unwrap();
    let snap = server.state().snapshot();
    assert_eq!(node_status(&snap, "early"), "initializing");
    assert_eq!(node_status(&snap, "ready"), "ready");
    server.shutdown().await;
    drop(server);

    // The new leadership: neither node ever heartbeats to it.
    let server = start_in(&dir, Duration::from_millis(400)).await;
    wait_until(&server, "both silent nodes are down", |s| {
        node_status(s, "early") == "down" && node_status(s, "ready") == "down"
    })
    .await;
    server.shutdown().await;
}

/// Clients' reports are folded into shared entries (`Node.UpdateAlloc`'s 50 ms batch): each caller
/// is answered only once its own update is applied (it reads it back at once), and no concurrent
/// report is lost. How many entries they took is printed, not asserted (it depends on timing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_alloc_reports_are_each_applied_before_their_answer() {
    let (server, _dir) = start_server("batch").await;
    server.node_register(node("a")).await.unwrap();
    let mut j = job("many");
    j.task_groups[0].count = Some(8);
    server
        .job_register(JobRegisterRequest {
            job: j,
            enforce_index: false,
            job_modify_index: 0,
            preserve_counts: false,
            eval_priority: 0,
            submission: None,
            multiregion_version: None,
        })
        .await
        .expect("job registers");
    let snap = wait_until(&server, "8 allocations placed", |s| {
        s.allocs_by_job("default", "many").len() == 8
    })
    .await;
    let ids: Vec<String> = snap
        .allocs_by_job("default", "many")
        .iter()
        .map(|a| a.id.clone())
        .collect();
    let mut calls = tokio::task::JoinSet::new();
    for id in ids.clone() {
        let server = server.clone();
        calls.spawn(async move {
            let req = model::wire::NodeUpdateAllocRequest {
                node_id: "a".into(),
                secret_id: "secret-a".into(),
                allocs: vec![model::wire::AllocClientUpdate {
                    id: id.clone(),
                    client_status: "running".into(),
                    ..Default::default()
                }],
            };
            let index = server.node_update_alloc(req).await.expect("report applied");
            let seen = server
                .state()
                .snapshot()
                .alloc(&id)
                .unwrap()
                .client_status
                .clone();
            assert_eq!(seen, "running", "{id} answered before its entry applied");
            index
        });
    }
    let mut indexes = BTreeSet::new();
    while let Some(r) = calls.join_next().await {
        indexes.insert(r.unwrap());
    }
    println!(
        "8 concurrent reports committed in {} entries",
        indexes.len()
    );
    let snap = server.state().snapshot();
    for id in &ids {
        assert_eq!(snap.alloc(id).unwrap().client_status, "running", "{id}");
    }
}

/// `Node.GetClientAllocs` answers IDs with their `AllocModifyIndex`; `Alloc.GetAllocs` answers
/// only the asking node's own allocations, needs its secret, leaves out IDs that do not exist,
/// refuses an oversized request, and says `Unavailable` when asked for a state it has not reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lists_its_allocations_and_fetches_only_its_own() {
    let (server, _dir) = start_server("fetch").await;
    server.node_register(node("a")).await.unwrap();
    server.node_register(node("b")).await.unwrap();
    let alloc = place_one(&server, job("web")).await;
    let (mine, other) = if alloc.node_id == "a" {
        ("a", "b")
    } else {
        ("b", "a")
    };
    let listed = server
        .node_get_client_allocs(model::wire::NodeClientAllocsRequest {
            node_id: mine.into(),
            secret_id: format!("secret-{mine}"),
            min_index: 0,
            wait: model::Duration::from_secs(1),
        })
        .await
        .unwrap();
    assert_eq!(
        listed.allocs,
        [(alloc.id.clone(), alloc.alloc_modify_index)].into()
    );
    let ask = |node: &str, secret: &str, ids: Vec<String>, min_index: u64| {
        server.alloc_get_allocs(model::wire::AllocGetAllocsRequest {
            node_id: node.into(),
            secret_id: secret.into(),
            alloc_ids: ids,
            min_index,
        })
    };
    let got = ask(
        mine,
        &format!("secret-{mine}"),
        vec![alloc.id.clone(), "no-such-alloc".into()],
        listed.index,
    )
    .await
    .unwrap();
    assert_eq!(got.allocs.len(), 1);
    assert_eq!(got.allocs[0].id, alloc.id);
    assert!(
        got.allocs[0].job.is_some(),
        "a fetched allocation carries its job"
    );
    // Another node, with its own valid secret, gets nothing of it.
    let theirs = ask(other, &format!("secret-{other}"), vec![alloc.id.clone()], 0)
        .await
        .unwrap();
    assert!(theirs.allocs.is_empty());
    // A wrong secret is refused.
    assert!(ask(mine, "wrong", vec![alloc.id.clone()], 0).await.is_err());
    // Too many IDs at once is a bad request that says how many are allowed.
    let many: Vec<String> = (0..2000).map(|i| format!("id-{i}")).collect();
    let err = ask(mine, &format!("secret-{mine}"), many, 0)
        .await
        .unwrap_err();
    assert_eq!(err.code, rpc::ErrorCode::BadRequest, "{err}");
    assert!(err.message.contains("at most"), "{err}");
    // A state this server has not reached: it waits briefly, then says to ask again.
    let ahead = server.state().latest_index() + 1_000;
    let err = ask(
        mine,
        &format!("secret-{mine}"),
        vec![alloc.id.clone()],
        ahead,
    )
    .await
    .unwrap_err();
    assert_eq!(err.code, rpc::ErrorCode::Unavailable, "{err}");
}
