//! Deterministic simulation of whole Caravan servers (issue #23): three real `Server`s — raft
//! and its log on disk, the FSM and state store, the leader's broker, scheduling workers, plan
//! applier, heartbeat timers and the rest of its loops — plus simulated client nodes and
//! concurrent API users, all on one thread under virtual time (tokio's paused clock), the
//! servers talking over a simulated network (`ServerConfig::network`). The server's clock, IDs
//! and CPU work come from the seed (`server::env::simulate`), as do raft's election timeouts
//! and every fault: server crashes and restarts, partitions both ways and one way, message
//! loss, delay and reordering, duplicated raft messages. A failing seed replays exactly:
//!
//! ```sh
//! CARAVAN_SIM_SEED=1234 cargo test -p server --test sim -- replay --nocapture
//! ```
//!
//! prints that seed's trace twice and checks the two are the same. The suite runs
//! `CARAVAN_SIM_SEEDS` seeds (200 by default) and checks in each:
//! - the users' history of job registrations and reads (reads through the read barrier, as
//!   the API's default reads) is linearizable per job (`histcheck`): no acknowledged
//!   registration is lost, no read sees the past;
//! - one user's reads never see the state's index go back;
//! - an allocation stays on the node it was placed on, on every server, at every sample;
//! - no server's state ever holds two live allocations (desired `run`, not finished) with one
//!   name: no group runs over its count;
//! - after the faults stop, every server holds the same state, and the nodes run exactly the
//!   count of every job's group, of the job's latest version, each reported running in the
//!   state (no status report a server took is lost).

use model::group::UpdateStrategy;
use model::node::{DriverInfo, Node, NodeCpuResources, NodeMemoryResources, NodeResources};
use model::wire::{
    AllocClientUpdate, AllocGetAllocsRequest, NodeClientAllocsRequest, NodeUpdateAllocRequest,
    NodeUpdateStatusRequest,
};
use model::{Job, Resources, Task, TaskGroup};
use server::{JobRegisterRequest, Server, ServerConfig, SimNetwork};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

const SERVERS: usize = 3;
const NODES: usize = 3;
const USERS: usize = 2;
const JOBS: u64 = 2;
/// Virtual time with faults, then time for the cluster to heal and converge.
const FAULTY_FOR: Duration = Duration::from_secs(8);
const CONVERGE_WITHIN: Duration = Duration::from_secs(60);

use histcheck::sim::Rng;

// ---- the world: servers, the network, the trace ----------------------------------------------

#[derive(Clone, Copy, Default)]
struct NetParams {
    loss: u64,
    dup: u64,
    max_delay_ms: u64,
}

struct World {
    seed: u64,
    rng: Rng,
    start: Instant,
    dir: PathBuf,
    servers: Mutex<Vec<Option<Server>>>,
    /// Each server's raft ID (fixed across restarts: it lives in its data dir).
    raft_ids: Mutex<BTreeMap<u64, usize>>,
    /// Directed pairs (from, to) whose messages are lost.
    cut: Mutex<BTreeSet<(usize, usize)>>,
    net: Mutex<NetParams>,
    trace: Mutex<Vec<String>>,
    /// The history's clock: a counter, so the order of invocations and returns is exact.
    clock: std::sync::atomic::AtomicU64,
    /// What each simulated node runs: allocation ID → (job, name).
    running: Mutex<Vec<BTreeMap<String, (String, String)>>>,
    /// Every allocation's node as first seen in any server's state.
    placed_on: Mutex<BTreeMap<String, String>>,
    violations: Mutex<Vec<String>>,
    /// The injected bug: users' reads skip the read barrier and answer from the asked
    /// server's own state, as a server serving default reads locally would.
    stale_reads: bool,
}

fn addr(i: usize) -> String {
    format!("10.0.0.{}:4647", i + 1)
}

fn index_of(addr: &str) -> Option<usize> {
    (0..SERVERS).find(|&i| self::addr(i) == addr)
}

impl World {
    fn log(&self, line: String) {
        let t = self.start.elapsed().as_millis();
        self.trace.lock().unwrap().push(format!("{t:>6} {line}"));
    }
    fn server(&self, i: usize) -> Option<Server> {
        self.servers.lock().unwrap()[i].clone()
    }
    fn violation(&self, what: String) {
        self.log(format!("VIOLATION {what}"));
        self.violations.lock().unwrap().push(what);
    }
    fn config(&self, i: usize, net: Arc<Net>) -> ServerConfig {
        let mut cfg = ServerConfig::new(
            self.dir.join(format!("s{i}")),
            "127.0.0.1:0".parse().unwrap(),
        );
        cfg.name = format!("s{i}");
        cfg.rpc_advertise = Some(addr(i));
        cfg.bootstrap_expect = SERVERS as u32;
        cfg.retry_join = (0..SERVERS).filter(|&j| j != i).map(addr).collect();
        cfg.raft_heartbeat_ms = 50;
        cfg.raft_election_timeout_ms = (150, 300);
        // Small enough that snapshots and log compaction happen within a run.
        cfg.raft_snapshot_every = 64;
        // Fixed, not the machine's core count: the run must not depend on the machine.
        cfg.num_schedulers = 2;
        cfg.rpc_secret = Some("sim".into());
        cfg.network = Some(SimNetwork(net));
        cfg
    }
}

/// The simulated network between servers: loss, delay, duplication (of raft messages only:
/// TCP never repeats a request, raft must survive a resent one) and directed cuts.
struct Net(Arc<World>);

impl raft::SimNet for Net {
    fn call(
        &self,
        from: u64,
        to: &str,
        method: &str,
        body: Vec<u8>,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, rpc::RpcError>> + Send>> {
        let world = self.0.clone();
        let to = to.to_string();
        let method = method.to_string();
        Box::pin(async move {
            let unreachable = || rpc::RpcError::unavailable(format!("{to} is unreachable"));
            let j = index_of(&to).ok_or_else(unreachable)?;
            let i = world.raft_ids.lock().unwrap().get(&from).copied();
            let p = *world.net.lock().unwrap();
            let delay = |w: &World| w.rng.millis(0, p.max_delay_ms);
            if let Some(i) = i {
                if world.cut.lock().unwrap().contains(&(i, j)) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    return Err(unreachable());
                }
            }
            if world.rng.chance(p.loss) {
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Err(unreachable());
            }
            tokio::time::sleep(delay(&world)).await;
            let server = world.server(j).ok_or_else(unreachable)?;
            if method.starts_with("Raft.") && world.rng.chance(p.dup) {
                let (s, m, b, d) = (server.clone(), method.clone(), body.clone(), delay(&world));
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    let _ = s.handle_simulated(m, b).await;
                });
            }
            let answer = server.handle_simulated(method, body).await;
            // The answer travels back: it may be lost too, after the call took effect.
            if let Some(i) = i {
                if world.cut.lock().unwrap().contains(&(j, i)) || world.rng.chance(p.loss) {
                    return Err(rpc::RpcError::timeout(format!("{to}: the answer was lost")));
                }
            }
            tokio::time::sleep(delay(&world)).await;
            answer
        })
    }
}

async fn start_server(world: &Arc<World>, net: &Arc<Net>, i: usize) -> Result<(), String> {
    let server = Server::start(world.config(i, net.clone()))
        .await
        .map_err(|e| e.message)?;
    world.raft_ids.lock().unwrap().insert(server.raft_id(), i);
    world.servers.lock().unwrap()[i] = Some(server);
    Ok(())
}

/// Starts server `i` again, waiting while its crashed incarnation lets go of its files.
async fn restart(world: &Arc<World>, net: &Arc<Net>, i: usize) {
    for _ in 0..50 {
        match start_server(world, net, i).await {
            Ok(()) => {
                world.log(format!("fault: restart s{i}"));
                return;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    world.violation(format!("s{i} cannot restart"));
}

// ---- the cluster's objects -----------------------------------------------------------------------

fn node(n: usize) -> Node {
    let mut node = Node {
        id: format!("00000000-0000-4000-8000-{n:012}"),
        secret_id: format!("secret-{n}"),
        name: format!("n{n}"),
        datacenter: "dc1".into(),
        status: "ready".into(),
        computed_class: "v1:sim".into(),
        node_resources: Some(NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: 4000,
                ..NodeCpuResources::default()
            },
            memory: NodeMemoryResources { memory_mb: 8192 },
            ..NodeResources::default()
        }),
        ..Node::default()
    };
    if let Some(r) = node.node_resources.as_mut() {
        r.disk.disk_mb = 100_000;
    }
    node.drivers.insert(
        "mock_driver".into(),
        DriverInfo {
            detected: true,
            healthy: true,
            ..DriverInfo::default()
        },
    );
    node
}

/// A version of job `id` whose meta carries `value` (a destructive update each time) and whose
/// group runs `count` allocations, replaced all at once (no deployment to wait on).
fn job(id: &str, value: &str, count: i32) -> Job {
    Job {
        id: id.into(),
        datacenters: vec!["dc1".into()],
        meta: [("v".to_string(), value.to_string())].into(),
        update: Some(UpdateStrategy {
            max_parallel: Some(0),
            ..UpdateStrategy::default()
        }),
        task_groups: vec![TaskGroup {
            name: "g".into(),
            count: Some(count),
            tasks: vec![Task {
                name: "t".into(),
                driver: "mock_driver".into(),
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

// ---- users: job registrations and reads, recorded as a history ---------------------------------

fn tick(world: &World) -> u64 {
    world
        .clock
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

/// Each user's operation in flight, so users stopped when the faults end leave it as unknown.
type Pending = Arc<Mutex<BTreeMap<usize, (String, histcheck::Call, u64)>>>;

async fn user(
    world: Arc<World>,
    u: usize,
    until: Instant,
    history: Arc<Mutex<Vec<histcheck::Op>>>,
    pending: Pending,
) {
    let mut n = 0;
    let mut last_index = 0u64;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
        n += 1;
        let key = format!("j{}", world.rng.below(JOBS));
        let via = world.rng.below(SERVERS as u64) as usize;
        let Some(server) = world.server(via) else {
            tokio::time::sleep(world.rng.millis(10, 50)).await;
            continue;
        };
        let (call, ret, invoke) = if world.rng.chance(40) {
            let invoke = tick(&world);
            if !world.stale_reads && server.read_barrier().await.is_err() {
                tokio::time::sleep(world.rng.millis(10, 50)).await;
                continue;
            }
            // The server may have crashed meanwhile: only a live one answers.
            if world.server(via).is_none() {
                continue;
            }
            let snap = server.state().snapshot();
            let index = snap.index();
            if index < last_index {
                world.violation(format!(
                    "u{u} read index {index} through s{via} after index {last_index}"
                ));
            }
            last_index = last_index.max(index);
            let value = snap
                .job("default", &key)
                .and_then(|j| j.meta.get("v").cloned());
            (histcheck::Call::Read, histcheck::Ret::Ok(value), invoke)
        } else {
            let value = format!("u{u}-{n}");
            let count = 1 + world.rng.below(2) as i32;
            let call = histcheck::Call::Write(value.clone());
            let invoke = tick(&world);
            pending
                .lock()
                .unwrap()
                .insert(u, (key.clone(), call.clone(), invoke));
            let result = server
                .job_register(registration(job(&key, &value, count), None))
                .await;
            pending.lock().unwrap().remove(&u);
            match result {
                Ok(r) => {
                    if r.index < last_index {
                        world.violation(format!(
                            "u{u} wrote at index {} after reading index {last_index}",
                            r.index
                        ));
                    }
                    last_index = last_index.max(r.index);
                    (call, histcheck::Ret::Ok(Some(value)), invoke)
                }
                // Refused before it reached a leader, or lost on the way: it may have happened.
                Err(_) => (call, histcheck::Ret::Unknown, invoke),
            }
        };
        let done = if ret == histcheck::Ret::Unknown {
            u64::MAX
        } else {
            tick(&world)
        };
        world.log(format!("u{u} {key} via s{via} {call:?} -> {ret:?}"));
        history.lock().unwrap().push(histcheck::Op {
            client: u,
            key,
            call,
            ret,
            invoke,
            done,
        });
        tokio::time::sleep(world.rng.millis(0, 200)).await;
    }
}

// ---- simulated client nodes ------------------------------------------------------------------------

/// A third of the TTL the servers handed out: when a node heartbeats next.
fn ttl_third(ttl: model::Duration) -> Duration {
    Duration::from_nanos(u64::try_from(ttl.0 / 3).unwrap_or(0)).max(Duration::from_millis(100))
}

/// A client node: registers, heartbeats, watches its allocations and "runs" them (reports them
/// running; stops them when the servers say so), through one server, moving to another when
/// that one fails it.
async fn client_node(world: Arc<World>, n: usize, until: Instant) {
    let me = node(n);
    let mut home = n % SERVERS;
    let mut registered = false;
    let mut next_heartbeat = Instant::now();
    let mut index = 0u64;
    let mut known: BTreeMap<String, u64> = BTreeMap::new();
    let mut unreported: BTreeMap<String, model::alloc::ClientStatus> = BTreeMap::new();
    let mut stopped: BTreeSet<String> = BTreeSet::new();
    while Instant::now() < until {
        // Every round takes some virtual time, so an answer that comes back at once (an error,
        // a blocking query that does not block) cannot spin the clock to a standstill.
        tokio::time::sleep(Duration::from_millis(1)).await;
        let Some(server) = world.server(home) else {
            home = (home + 1) % SERVERS;
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let failed = |world: &World, home: &mut usize| {
            *home = world.rng.below(SERVERS as u64) as usize;
        };
        if !registered {
            match server.node_register(me.clone()).await {
                Ok(r) => {
                    registered = true;
                    next_heartbeat = Instant::now() + ttl_third(r.heartbeat_ttl);
                    world.log(format!("n{n} registered through s{home}"));
                }
                Err(_) => {
                    failed(&world, &mut home);
                    tokio::time::sleep(world.rng.millis(50, 200)).await;
                }
            }
            continue;
        }
        if Instant::now() >= next_heartbeat {
            match server
                .node_update_status(NodeUpdateStatusRequest {
                    node_id: me.id.clone(),
                    secret_id: me.secret_id.clone(),
                    status: Some("ready".into()),
                })
                .await
            {
                Ok(r) => next_heartbeat = Instant::now() + ttl_third(r.heartbeat_ttl),
                Err(_) => {
                    failed(&world, &mut home);
                    tokio::time::sleep(world.rng.millis(20, 100)).await;
                    continue;
                }
            }
        }
        let watched = server
            .node_get_client_allocs(NodeClientAllocsRequest {
                node_id: me.id.clone(),
                secret_id: me.secret_id.clone(),
                min_index: index,
                wait: model::Duration(500_000_000),
            })
            .await;
        let Ok(watched) = watched else {
            failed(&world, &mut home);
            tokio::time::sleep(world.rng.millis(20, 100)).await;
            continue;
        };
        if watched.index < index {
            // A server behind the last one: its older list is ignored, as the real client does
            // (acting on it would start again what this node was told to stop).
            world.log(format!(
                "n{n} ignores an older list from s{home} (index {} < {index})",
                watched.index
            ));
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        // Allocations the servers no longer list are gone: the node stops them (Nomad's
        // client destroys removed allocations).
        {
            let mut running = world.running.lock().unwrap();
            let gone: Vec<String> = running[n]
                .keys()
                .filter(|id| !watched.allocs.contains_key(*id))
                .cloned()
                .collect();
            for id in gone {
                if let Some((_, name)) = running[n].remove(&id) {
                    world.log(format!(
                        "n{n} drops {name} ({}), no longer listed",
                        &id[..8]
                    ));
                }
            }
        }
        known.retain(|id, _| watched.allocs.contains_key(id));
        let changed: Vec<String> = watched
            .allocs
            .iter()
            .filter(|(id, modify)| known.get(*id).is_none_or(|k| k < *modify))
            .map(|(id, _)| id.clone())
            .collect();
        if !changed.is_empty() {
            let got = server
                .alloc_get_allocs(AllocGetAllocsRequest {
                    node_id: me.id.clone(),
                    secret_id: me.secret_id.clone(),
                    alloc_ids: changed,
                    min_index: watched.index,
                })
                .await;
            let Ok(got) = got else {
                failed(&world, &mut home);
                tokio::time::sleep(world.rng.millis(20, 100)).await;
                continue;
            };
            let mut running = world.running.lock().unwrap();
            for a in &got.allocs {
                known.insert(a.id.clone(), a.alloc_modify_index);
                let runs = running[n].contains_key(&a.id);
                // The node starts and stops what it was told before it reports it; a report
                // waits in `unreported` until a server took it.
                if a.desired_status.is_terminal() {
                    if let Some((_, name)) = running[n].remove(&a.id) {
                        world.log(format!("n{n} stops {name} ({})", &a.id[..8]));
                        unreported.insert(a.id.clone(), model::alloc::ClientStatus::Complete);
                    }
                } else if !runs && !a.client_status.is_terminal() && !stopped.contains(&a.id) {
                    world.log(format!("n{n} runs {} ({})", a.name, &a.id[..8]));
                    running[n].insert(a.id.clone(), (a.job_id.clone(), a.name.clone()));
                    unreported.insert(a.id.clone(), model::alloc::ClientStatus::Running);
                }
                if a.desired_status.is_terminal() {
                    // A client never runs an allocation again once it stopped it.
                    stopped.insert(a.id.clone());
                }
            }
        }
        index = index.max(watched.index);
        if !unreported.is_empty() {
            let updates: Vec<AllocClientUpdate> = unreported
                .iter()
                .map(|(id, status)| AllocClientUpdate {
                    id: id.clone(),
                    client_status: status.clone(),
                    modify_time: server::env::now_nanos(),
                    ..AllocClientUpdate::default()
                })
                .collect();
            let reported = server
                .node_update_alloc(NodeUpdateAllocRequest {
                    node_id: me.id.clone(),
                    secret_id: me.secret_id.clone(),
                    allocs: updates,
                })
                .await;
            if reported.is_ok() {
                unreported.clear();
            } else {
                failed(&world, &mut home);
            }
        }
    }
}

// ---- faults and invariant samples ------------------------------------------------------------------

async fn nemesis(world: Arc<World>, net: Arc<Net>, until: Instant) {
    while Instant::now() < until {
        tokio::time::sleep(world.rng.millis(300, 1500)).await;
        let down: Vec<usize> = (0..SERVERS)
            .filter(|&i| world.server(i).is_none())
            .collect();
        match world.rng.below(6) {
            0 if down.is_empty() => {
                let i = world.rng.below(SERVERS as u64) as usize;
                let taken = world.servers.lock().unwrap()[i].take();
                if let Some(s) = taken {
                    world.log(format!("fault: crash s{i}"));
                    s.crash().await;
                }
            }
            0 | 1 => {
                for i in down {
                    restart(&world, &net, i).await;
                }
            }
            2 => {
                let i = world.rng.below(SERVERS as u64) as usize;
                let both = world.rng.chance(50);
                let mut cut = world.cut.lock().unwrap();
                for j in (0..SERVERS).filter(|&j| j != i) {
                    cut.insert((i, j));
                    if both {
                        cut.insert((j, i));
                    }
                }
                drop(cut);
                world.log(format!(
                    "fault: cut s{i} from the others ({})",
                    if both { "both ways" } else { "its sends only" }
                ));
            }
            3 => {
                world.cut.lock().unwrap().clear();
                world.log("fault: heal partitions".into());
            }
            _ => {
                let p = NetParams {
                    loss: world.rng.below(15),
                    dup: world.rng.below(10),
                    max_delay_ms: world.rng.below(60),
                };
                *world.net.lock().unwrap() = p;
                world.log(format!(
                    "fault: network loss {}% dup {}% delay up to {} ms",
                    p.loss, p.dup, p.max_delay_ms
                ));
            }
        }
    }
}

/// Samples every live server's state: allocations never move between nodes, and no state
/// holds two live allocations of one name. Logs who leads.
async fn watch(world: Arc<World>, until: Instant) {
    let mut leaders: Vec<bool> = vec![false; SERVERS];
    while Instant::now() < until {
        for (i, was) in leaders.iter_mut().enumerate() {
            let Some(s) = world.server(i) else {
                *was = false;
                continue;
            };
            if s.is_leader() != *was {
                *was = s.is_leader();
                world.log(format!("s{i} {}", if *was { "leads" } else { "follows" }));
            }
            let snap = s.state().snapshot();
            let mut live: BTreeMap<(String, String), String> = BTreeMap::new();
            for a in snap.allocs(None, "") {
                {
                    let mut placed = world.placed_on.lock().unwrap();
                    match placed.get(&a.id) {
                        Some(n) if *n != a.node_id => {
                            let was = n.clone();
                            drop(placed);
                            world.violation(format!(
                                "allocation {} is on node {} in s{i}'s state, was on {was}",
                                a.name, a.node_id
                            ));
                        }
                        Some(_) => {}
                        None => {
                            placed.insert(a.id.clone(), a.node_id.clone());
                        }
                    }
                }
                if a.desired_status.is_terminal() || a.client_status.is_terminal() {
                    continue;
                }
                if let Some(other) = live.insert((a.job_id.clone(), a.name.clone()), a.id.clone()) {
                    world.violation(format!(
                        "s{i}'s state at index {} has two live allocations named {}: {other} and {}",
                        snap.index(),
                        a.name,
                        a.id
                    ));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---- one run ----------------------------------------------------------------------------------------

struct Outcome {
    trace: Vec<String>,
    ops: Vec<histcheck::Op>,
    violations: Vec<String>,
}

/// Each job's latest value and count, by job ID.
type Jobs = BTreeMap<String, (String, i32)>;

/// What the cluster should have settled on: one index and every job's latest version, the same
/// on every server.
fn settled(world: &World) -> Option<(u64, Jobs)> {
    let mut seen: Option<(u64, Jobs)> = None;
    for i in 0..SERVERS {
        let s = world.server(i)?;
        let snap = s.state().snapshot();
        let jobs: Jobs = snap
            .jobs(None, "")
            .iter()
            .map(|j| {
                let count = j.task_groups.first().and_then(|g| g.count).unwrap_or(0);
                (
                    j.id.clone(),
                    (j.meta.get("v").cloned().unwrap_or_default(), count),
                )
            })
            .collect();
        let this = (snap.index(), jobs);
        match &seen {
            Some(other) if *other != this => return None,
            _ => seen = Some(this),
        }
    }
    seen
}

/// Every server's state, for a trace that ends badly: jobs, allocations not finished,
/// evaluations not finished.
fn describe(world: &World) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..SERVERS {
        let Some(s) = world.server(i) else {
            out.push(format!("s{i} is down"));
            continue;
        };
        let snap = s.state().snapshot();
        out.push(format!(
            "s{i} (leader: {}) at index {}",
            s.is_leader(),
            snap.index()
        ));
        for j in snap.jobs(None, "") {
            let count = j.task_groups.first().and_then(|g| g.count).unwrap_or(0);
            out.push(format!(
                "  job {} v{:?} {:?} count {count} stop {:?} status {:?}",
                j.id,
                j.version,
                j.meta.get("v"),
                j.stop,
                j.status
            ));
        }
        for a in snap.allocs(None, "") {
            if a.client_status.is_terminal() && a.desired_status.is_terminal() {
                continue;
            }
            out.push(format!(
                "  alloc {} {} on {} desired {:?} client {:?} job v{:?} modify {}",
                &a.id[..8],
                a.name,
                a.node_id,
                a.desired_status,
                a.client_status,
                a.job.as_ref().and_then(|j| j.version),
                a.modify_index
            ));
        }
        for e in snap.evals(None, "") {
            if e.status.is_terminal() {
                continue;
            }
            out.push(format!(
                "  eval {} {} {:?} by {} modify {}",
                &e.id[..8],
                e.job_id,
                e.status,
                e.triggered_by,
                e.modify_index
            ));
        }
    }
    out
}

/// Whether the nodes run exactly the count of each job's latest version, each reported running,
/// and nothing else.
fn nodes_run(world: &World, jobs: &Jobs, s: &Server) -> bool {
    let snap = s.state().snapshot();
    let running = world.running.lock().unwrap();
    let mut per_job: BTreeMap<String, i32> = BTreeMap::new();
    for node in running.iter() {
        for (id, (job, _)) in node {
            // Of the job's latest version, and reported running: a report a server took is
            // never dropped (a node sends each status once; a leader whose state lagged and
            // skipped an update for an allocation it did not hold yet would lose it).
            let current = snap.alloc(id).is_some_and(|a| {
                a.client_status == model::alloc::ClientStatus::Running
                    && snap
                        .job(&a.namespace, &a.job_id)
                        .is_some_and(|j| j.version == a.job.as_ref().and_then(|aj| aj.version))
            });
            if !current {
                return false;
            }
            *per_job.entry(job.clone()).or_default() += 1;
        }
    }
    jobs.iter()
        .all(|(id, (_, count))| per_job.get(id).copied().unwrap_or(0) == *count)
        && per_job.keys().all(|j| jobs.contains_key(j))
}

/// One thread, tokio's clock paused (time jumps to the next timer), tokio's own choices seeded.
fn runtime(seed: u64) -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder
        .rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()))
        .unhandled_panic(tokio::runtime::UnhandledPanic::ShutdownRuntime);
    #[cfg(not(tokio_unstable))]
    panic!("the simulation needs --cfg tokio_unstable (.cargo/config.toml sets it) to seed tokio");
    #[allow(unreachable_code)]
    builder.build().expect("a runtime")
}

/// Inside the simulation's runtime: the world of `seed` with its three servers started on the
/// simulated network, once they found each other and elected (a violation if they never do).
async fn form_cluster(
    seed: u64,
    dir: &std::path::Path,
    stale_reads: bool,
) -> (Arc<World>, Arc<Net>) {
    server::env::simulate(Some(seed));
    let world = Arc::new(World {
        seed,
        rng: Rng::new(seed),
        start: Instant::now(),
        dir: dir.to_path_buf(),
        servers: Mutex::new(vec![None; SERVERS]),
        raft_ids: Mutex::new(BTreeMap::new()),
        cut: Mutex::new(BTreeSet::new()),
        net: Mutex::new(NetParams::default()),
        trace: Mutex::new(Vec::new()),
        clock: std::sync::atomic::AtomicU64::new(1),
        running: Mutex::new(vec![BTreeMap::new(); NODES]),
        placed_on: Mutex::new(BTreeMap::new()),
        violations: Mutex::new(Vec::new()),
        stale_reads,
    });
    let net = Arc::new(Net(world.clone()));
    world.log(format!(
        "seed {}: {SERVERS} servers, {NODES} nodes, {USERS} users",
        world.seed
    ));
    for i in 0..SERVERS {
        start_server(&world, &net, i)
            .await
            .expect("a fresh server starts");
    }
    // The servers find each other (RPC join) and elect.
    let formed = Instant::now() + Duration::from_secs(30);
    while !(0..SERVERS).any(|i| world.server(i).is_some_and(|s| s.schedulers_running())) {
        if Instant::now() > formed {
            world.violation("the servers never formed a cluster".into());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    world.log("cluster formed".into());
    (world, net)
}

async fn shut_down(world: &World) {
    for i in 0..SERVERS {
        let taken = world.servers.lock().unwrap()[i].take();
        if let Some(s) = taken {
            s.shutdown().await;
        }
    }
}

/// A registration of `job`; with `Some(index)`, only if the job's modify index is `index`.
fn registration(job: Job, enforce: Option<u64>) -> JobRegisterRequest {
    JobRegisterRequest {
        job,
        enforce_index: enforce.is_some(),
        job_modify_index: enforce.unwrap_or(0),
        preserve_counts: false,
        eval_priority: 0,
        submission: None,
        multiregion_version: None,
    }
}

/// `req` delivered to `server` as another server forwards it (method `M`, over the simulated
/// network's handler).
async fn forwarded<M: rpc::Method>(
    server: &Server,
    req: &M::Request,
) -> Result<M::Response, rpc::RpcError> {
    let body = rpc::encode_request::<M>(req)?;
    let answer = server.handle_simulated(M::NAME.into(), body).await?;
    rpc::decode_response::<M>(&answer)
}

fn run(seed: u64) -> Outcome {
    run_with(seed, false)
}

fn run_with(seed: u64, stale_reads: bool) -> Outcome {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = histcheck::sim::sim_root("caravan-server-sim").join(format!("{seed}-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    let rt = runtime(seed);
    let outcome = rt.block_on(async {
        let (world, net) = form_cluster(seed, &dir, stale_reads).await;
        let faults_end = Instant::now() + FAULTY_FOR;
        let end = faults_end + CONVERGE_WITHIN;
        let history = Arc::new(Mutex::new(Vec::new()));
        let pending: Pending = Arc::default();
        let mut nodes = Vec::new();
        for n in 0..NODES {
            nodes.push(tokio::spawn(client_node(world.clone(), n, end)));
        }
        let mut users = Vec::new();
        for u in 0..USERS {
            users.push(tokio::spawn(user(
                world.clone(),
                u,
                faults_end,
                history.clone(),
                pending.clone(),
            )));
        }
        let watcher = tokio::spawn(watch(world.clone(), end));
        let _ = tokio::spawn(nemesis(world.clone(), net.clone(), faults_end)).await;
        tokio::time::sleep_until(faults_end).await;
        for t in users {
            t.abort();
            let _ = t.await;
        }
        for (u, (key, call, invoke)) in std::mem::take(&mut *pending.lock().unwrap()) {
            world.log(format!("u{u} {key} {call:?} -> Unknown (stopped)"));
            history.lock().unwrap().push(histcheck::Op {
                client: u,
                key,
                call,
                ret: histcheck::Ret::Unknown,
                invoke,
                done: u64::MAX,
            });
        }
        // The faults stop: heal, restart, and wait for one state everywhere and the nodes
        // running exactly what it says.
        world.cut.lock().unwrap().clear();
        *world.net.lock().unwrap() = NetParams::default();
        for i in 0..SERVERS {
            if world.server(i).is_none() {
                restart(&world, &net, i).await;
            }
        }
        world.log("faults end: healed, every server up".into());
        let mut converged = false;
        while Instant::now() < end {
            if let Some((index, jobs)) = settled(&world) {
                let leader = (0..SERVERS).find_map(|i| world.server(i).filter(|s| s.is_leader()));
                if let Some(leader) = leader {
                    if nodes_run(&world, &jobs, &leader) {
                        world.log(format!("converged at index {index}: {jobs:?}"));
                        converged = true;
                        break;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !converged {
            let running = world.running.lock().unwrap().clone();
            for line in describe(&world) {
                world.log(line);
            }
            world.violation(format!(
                "the cluster did not settle within {CONVERGE_WITHIN:?} after the faults (one \
                 state on every server, the nodes running each job's count): nodes run {running:?}"
            ));
        }
        watcher.abort();
        for t in nodes {
            t.abort();
            let _ = t.await;
        }
        shut_down(&world).await;
        let ops = history.lock().unwrap().clone();
        let trace = world.trace.lock().unwrap().clone();
        let violations = world.violations.lock().unwrap().clone();
        server::env::simulate(None);
        Outcome {
            trace,
            ops,
            violations,
        }
    });
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn verdict(seed: u64, o: &Outcome) -> Result<(), String> {
    let mut problems = o.violations.clone();
    if let Err(e) = histcheck::check(&o.ops) {
        problems.push(format!("the history is not linearizable: {e}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "seed {seed}: {}\nreplay: {}",
            problems.join("; "),
            REPLAY.replace("{seed}", &seed.to_string())
        ))
    }
}

const REPLAY: &str =
    "CARAVAN_SIM_SEED={seed} cargo test -p server --test sim -- replay --nocapture";

/// Many seeds, every invariant; a failure names the seed and the command that replays it.
#[test]
fn seeds_keep_the_servers_correct_under_random_faults() {
    histcheck::sim::check_seeds("server sim", REPLAY, Duration::from_secs(120), |seed| {
        let o = run(seed);
        histcheck::sim::SeedResult {
            ops: o.ops.len(),
            faults: o.trace.iter().filter(|l| l.contains("fault:")).count(),
            failure: verdict(seed, &o).err(),
        }
    });
}

/// The checks can fail: when users' reads skip the read barrier (the injected bug), the
/// histories of some seeds are not linearizable.
#[test]
fn an_injected_stale_read_bug_is_caught() {
    let caught = (1..=5u64)
        .map(|seed| run_with(seed, true))
        .filter(|o| histcheck::check(&o.ops).is_err())
        .count();
    println!("[server sim] the injected stale reads broke {caught} of 5 seeds' histories");
    assert!(caught > 0, "no seed's history showed the stale reads");
}

/// A write forwarded to a server that does not lead — the forwarder's view of the leader was
/// out of date (leadership moved while the call travelled, or the target was just elected and
/// has not applied what it inherited) — is answered "No cluster leader", so the caller retries
/// on the leader; it is never checked against that server's older state. Found by
/// `csi_serializer`'s leadership-transfer case: a client's claim for an allocation it already
/// ran reached such a server and was refused "allocation not found", failing the task. Here a
/// follower cut off from the others has missed a node's registration and a job's; writes about
/// them, delivered to it as forwarded calls, must not be refused as unknown.
#[test]
fn a_write_forwarded_to_a_server_that_does_not_lead_is_refused_not_checked_against_its_state() {
    let seed = 7;
    let dir = histcheck::sim::sim_root("caravan-server-sim").join("forwarded");
    let _ = std::fs::remove_dir_all(&dir);
    let rt = runtime(seed);
    rt.block_on(async {
        let (world, _net) = form_cluster(seed, &dir, false).await;
        let leader = (0..SERVERS)
            .find(|&i| world.server(i).is_some_and(|s| s.is_leader()))
            .expect("a leader");
        let behind = (leader + 1) % SERVERS;
        for other in (0..SERVERS).filter(|&j| j != behind) {
            world.cut.lock().unwrap().insert((behind, other));
            world.cut.lock().unwrap().insert((other, behind));
        }
        let lead = world.server(leader).expect("the leader runs");
        let me = node(0);
        lead.node_register(me.clone())
            .await
            .expect("the node registers on the leader");
        let registered = lead
            .job_register(registration(job("known-on-the-leader", "v1", 1), None))
            .await
            .expect("the job registers on the leader");
        let stale = world.server(behind).expect("the follower runs");
        assert!(!stale.is_leader());
        assert!(
            stale.state().snapshot().node(&me.id).is_none(),
            "the follower missed the node"
        );

        let claim = server::csi::CsiWrite::Claim(model::wire::CsiVolumeClaimRequest {
            namespace: "default".into(),
            volume_id: "vol".into(),
            allocation_id: "an-allocation-the-follower-never-saw".into(),
            node_id: me.id.clone(),
            secret_id: me.secret_id.clone(),
            ..Default::default()
        });
        let err = forwarded::<server::methods::CsiWriteMethod>(&stale, &claim)
            .await
            .expect_err("a follower serves no forwarded write");
        assert_eq!(err.code, rpc::ErrorCode::NoLeader, "{err:?}");

        // A check-and-set registration the leader would take: the follower, which never saw
        // the job, must not answer "job does not exist".
        let cas = registration(
            job("known-on-the-leader", "v2", 1),
            Some(registered.job_modify_index),
        );
        let err = forwarded::<server::methods::JobRegister>(&stale, &cas)
            .await
            .expect_err("a follower serves no forwarded write");
        assert_eq!(err.code, rpc::ErrorCode::NoLeader, "{err:?}");

        shut_down(&world).await;
        server::env::simulate(None);
    });
    drop(rt);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The same seed twice gives the same trace: the run is decided by its seed alone.
#[test]
fn a_seed_replays_exactly() {
    let seed = histcheck::sim::seed_from_env().unwrap_or(42);
    let a = run(seed);
    let b = run(seed);
    assert!(!a.ops.is_empty(), "the users did something");
    histcheck::sim::same_trace(seed, &a.trace, &b.trace);
}

/// `CARAVAN_SIM_SEED=N cargo test -p server --test sim -- replay --nocapture`: one seed's
/// trace, twice, and its verdict.
#[test]
fn replay() {
    let Some(seed) = histcheck::sim::seed_from_env() else {
        return;
    };
    if let Ok(filter) = std::env::var("CARAVAN_SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(std::io::stderr)
            .try_init();
    }
    histcheck::sim::replay("[server sim]", seed, |seed| {
        let o = run(seed);
        histcheck::sim::Replayed {
            verdict: verdict(seed, &o),
            trace: o.trace,
        }
    });
}
