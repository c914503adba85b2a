//! Deterministic simulation of Caravan's raft (issue #23): three `RaftNode`s, their real log
//! stores and snapshot files, and concurrent clients, all on one thread under virtual time
//! (tokio's paused clock), talking through a simulated network. A seed decides everything: the
//! clients' operations, the faults (crash and restart, partitions both ways and one way, message
//! loss, delay, reordering and duplication) and raft's own election timeouts
//! (`raft::rt::simulate`). So a failing seed replays exactly, and its trace says what happened:
//!
//! ```sh
//! CARAVAN_SIM_SEED=1234 cargo test -p raft --test sim -- replay --nocapture
//! ```
//!
//! prints that seed's trace twice and checks the two are the same. The suite runs
//! `CARAVAN_SIM_SEEDS` seeds (200 by default) and checks in each:
//! - the clients' history (reads, writes and compare-and-sets on two registers, with unknown
//!   outcomes when a call fails without saying) is linearizable (`histcheck`);
//! - no node's term goes back, across crashes and restarts (its vote is durable);
//! - every index applied by two incarnations of any nodes carried the same entry;
//! - after the faults stop, every node converges to the same state.
//!
//! What it does not cover yet: the server's loops (broker, workers, plan applier, heartbeats) on
//! top of raft — they need the narrow context issue #23 describes.

use raft::{RaftConfig, RaftError, RaftNode, SimNet, SnapshotWriter, StateMachine, Transport};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

const NODES: usize = 3;
const CLIENTS: usize = 3;
/// Virtual time with faults, then time for the cluster to heal and converge.
const FAULTY_FOR: Duration = Duration::from_secs(8);
const CONVERGE_WITHIN: Duration = Duration::from_secs(30);

use histcheck::sim::Rng;

// ---- the state machine: registers with compare-and-set ------------------------------------------

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
enum Cmd {
    Put {
        key: String,
        value: String,
    },
    Cas {
        key: String,
        expect: Option<String>,
        new: String,
    },
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, PartialEq)]
enum Answer {
    Done,
    /// A compare-and-set that found this instead.
    Found(Option<String>),
}

#[derive(Default)]
struct Registers {
    state: Mutex<BTreeMap<String, String>>,
    /// (index, entry) for every entry this incarnation applied.
    applied: Mutex<Vec<(u64, String)>>,
}

impl StateMachine for Registers {
    fn apply(&self, index: u64, payload: &[u8]) -> Vec<u8> {
        let cmd: Cmd = serde_json::from_slice(payload).expect("the sim writes only commands");
        self.applied
            .lock()
            .unwrap()
            .push((index, String::from_utf8_lossy(payload).into_owned()));
        let mut state = self.state.lock().unwrap();
        let answer = match cmd {
            Cmd::Put { key, value } => {
                state.insert(key, value);
                Answer::Done
            }
            Cmd::Cas { key, expect, new } => {
                let found = state.get(&key).cloned();
                if found == expect {
                    state.insert(key, new);
                    Answer::Done
                } else {
                    Answer::Found(found)
                }
            }
        };
        serde_json::to_vec(&answer).unwrap()
    }

    fn snapshot(&self) -> SnapshotWriter {
        let state = self.state.lock().unwrap().clone();
        Box::new(move || serde_json::to_vec(&state).unwrap())
    }

    fn restore(&self, data: &[u8]) -> Result<(), String> {
        let state: BTreeMap<String, String> = if data.is_empty() {
            BTreeMap::new()
        } else {
            serde_json::from_slice(data).map_err(|e| e.to_string())?
        };
        *self.state.lock().unwrap() = state;
        Ok(())
    }
}

// ---- the world: nodes, the network, the trace ----------------------------------------------------

#[derive(Clone, Copy, Default)]
struct NetParams {
    loss: u64,
    dup: u64,
    max_delay_ms: u64,
}

struct World {
    rng: Rng,
    start: Instant,
    dir: PathBuf,
    nodes: Mutex<Vec<Option<RaftNode>>>,
    /// Every incarnation's state machine, for the checks at the end.
    machines: Mutex<Vec<(usize, Arc<Registers>)>>,
    /// Directed pairs (from, to) whose messages are lost.
    cut: Mutex<BTreeSet<(usize, usize)>>,
    net: Mutex<NetParams>,
    trace: Mutex<Vec<String>>,
    /// The injected bug: reads answer from the asked node's own state, skipping raft's read
    /// index.
    stale_reads: bool,
    clock: std::sync::atomic::AtomicU64,
    /// (log index, entry) of every write a client was told succeeded.
    acked: Mutex<Vec<(u64, String)>>,
    violations: Mutex<Vec<String>>,
}

fn addr(i: usize) -> String {
    format!("n{}", i + 1)
}

fn index_of(addr: &str) -> Option<usize> {
    addr.strip_prefix('n')
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| n.checked_sub(1))
        .filter(|i| *i < NODES)
}

impl World {
    fn now_ms(&self) -> u128 {
        self.start.elapsed().as_millis()
    }
    fn log(&self, line: String) {
        let line = format!("{:>6}ms {line}", self.now_ms());
        self.trace.lock().unwrap().push(line);
    }
    fn node(&self, i: usize) -> Option<RaftNode> {
        self.nodes.lock().unwrap()[i].clone()
    }
    /// Node `i`'s newest incarnation's state machine.
    fn machine(&self, i: usize) -> Option<Arc<Registers>> {
        let machines = self.machines.lock().unwrap();
        machines
            .iter()
            .rev()
            .find(|(n, _)| *n == i)
            .map(|m| m.1.clone())
    }
    fn config(&self, i: usize) -> RaftConfig {
        RaftConfig {
            node_id: i as u64 + 1,
            rpc_addr: addr(i),
            data_dir: self.dir.join(addr(i)),
            heartbeat_ms: 50,
            election_timeout_ms: (150, 300),
            snapshot_every_entries: 40,
            snapshot_every_bytes: 0,
        }
    }
}

struct Net(Arc<World>);

impl SimNet for Net {
    fn call(
        &self,
        from: u64,
        to: &str,
        method: &str,
        body: Vec<u8>,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<u8>, rpc::RpcError>> + Send>> {
        let world = self.0.clone();
        let method = method.to_string();
        let to = index_of(to);
        let from = from as usize - 1;
        Box::pin(async move {
            let Some(to) = to else {
                return Err(rpc::RpcError::new(
                    rpc::ErrorCode::Unavailable,
                    "no such node",
                ));
            };
            let params = *world.net.lock().unwrap();
            let lost = |w: &World, a, b| w.cut.lock().unwrap().contains(&(a, b));
            if lost(&world, from, to) || world.rng.chance(params.loss) {
                // Lost: the caller's deadline decides what happens.
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(world.rng.millis(0, params.max_delay_ms)).await;
            let Some(node) = world.node(to) else {
                return Err(rpc::RpcError::new(
                    rpc::ErrorCode::Unavailable,
                    "connection refused",
                ));
            };
            if world.rng.chance(params.dup) {
                // Delivered twice: the copy arrives later, its answer goes nowhere.
                // Delivered to whatever runs at the address by then (a restarted node too).
                let (w, dup_body, dup_method) = (world.clone(), body.clone(), method.clone());
                let delay = world.rng.millis(0, params.max_delay_ms * 2);
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    if let Some(copy) = w.node(to) {
                        let _ = copy.handle_rpc(&dup_method, &dup_body).await;
                    }
                });
            }
            world.log(format!(
                "msg {} -> {} {method} {}",
                addr(from),
                addr(to),
                body.len()
            ));
            let answer = node.handle_rpc(&method, &body).await;
            if let Err(e) = &answer {
                world.log(format!(
                    "msg {} -> {} {method} refused: {e}",
                    addr(from),
                    addr(to)
                ));
            }
            tokio::time::sleep(world.rng.millis(0, params.max_delay_ms)).await;
            if lost(&world, to, from) || world.rng.chance(params.loss) {
                std::future::pending::<()>().await;
            }
            answer
        })
    }
}

async fn start_node(world: &Arc<World>, i: usize) -> Result<(), RaftError> {
    let sm = Arc::new(Registers::default());
    let node = RaftNode::open_with(
        world.config(i),
        sm.clone(),
        Transport::Simulated(Arc::new(Net(world.clone()))),
    )
    .await?;
    world.machines.lock().unwrap().push((i, sm));
    world.nodes.lock().unwrap()[i] = Some(node);
    Ok(())
}

// ---- clients ----------------------------------------------------------------------------------------

/// The history's clock: a counter, not virtual time. Disk work takes no virtual time and
/// messages may have no delay, so a whole write and a later read can happen within one virtual
/// instant; with equal stamps the checker would take them for concurrent and accept a stale read.
/// On one thread the counter gives the exact order of invocations and returns.
fn nanos(world: &World) -> u64 {
    world
        .clock
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

/// Sends `cmd` to node `i`, following redirects to the leader; the answer, or `None` when the
/// outcome is unknown, or `Err` when it surely did not happen.
async fn write(world: &World, mut i: usize, cmd: &Cmd) -> Result<Option<Answer>, ()> {
    let payload = serde_json::to_vec(cmd).unwrap();
    for _ in 0..3 {
        let Some(node) = world.node(i) else {
            return Err(());
        };
        match node.write(payload.clone()).await {
            Ok((index, resp)) => {
                world
                    .acked
                    .lock()
                    .unwrap()
                    .push((index, String::from_utf8_lossy(&payload).into_owned()));
                return Ok(Some(serde_json::from_slice(&resp).unwrap()));
            }
            Err(RaftError::ForwardToLeader { leader_addr, .. }) => {
                match leader_addr.as_deref().and_then(index_of) {
                    Some(l) => i = l,
                    None => return Err(()),
                }
            }
            Err(RaftError::TooLarge { .. } | RaftError::NotInitialized) => return Err(()),
            // Timed out, leadership lost, shut down mid-way: it may have happened.
            Err(_) => return Ok(None),
        }
    }
    Err(())
}

async fn read(world: &World, mut i: usize, key: &str) -> Option<Option<String>> {
    if world.stale_reads {
        // The injected bug: the asked node answers from its own state, skipping the read index
        // (what a server would do if it served reads locally without the leader's confirmation).
        world.node(i)?;
        let sm = world.machine(i)?;
        let value = sm.state.lock().unwrap().get(key).cloned();
        return Some(value);
    }
    for _ in 0..3 {
        let node = world.node(i)?;
        match node.read_index().await {
            Ok(index) => {
                node.wait_applied(index, Duration::from_secs(2))
                    .await
                    .ok()?;
                let sm = world.machine(i)?;
                // The node may have been restarted since: only its current machine answers.
                world.node(i)?;
                let value = sm.state.lock().unwrap().get(key).cloned();
                return Some(value);
            }
            Err(RaftError::ForwardToLeader { leader_addr, .. }) => {
                i = leader_addr.as_deref().and_then(index_of)?;
            }
            Err(_) => return None,
        }
    }
    None
}

/// Each client's operation in flight (its call and invocation time), so that clients stopped when
/// the faults end leave it in the history as unknown.
type Pending = Arc<Mutex<BTreeMap<usize, (String, histcheck::Call, u64)>>>;

async fn client(
    world: Arc<World>,
    c: usize,
    until: Instant,
    history: Arc<Mutex<Vec<histcheck::Op>>>,
    pending: Pending,
) {
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        let key = format!("k{}", world.rng.below(2));
        let via = world.rng.below(NODES as u64) as usize;
        let invoke = nanos(&world);
        let pick = world.rng.below(10);
        let (call, ret) = if pick < 4 {
            match read(&world, via, &key).await {
                Some(v) => (histcheck::Call::Read, histcheck::Ret::Ok(v)),
                None => {
                    tokio::time::sleep(world.rng.millis(5, 50)).await;
                    continue;
                }
            }
        } else {
            let value = format!("c{c}-{n}");
            let (call, cmd) = if pick < 7 {
                (
                    histcheck::Call::Write(value.clone()),
                    Cmd::Put {
                        key: key.clone(),
                        value: value.clone(),
                    },
                )
            } else {
                // Expect what this client last read or wrote is unknown here: expect absent or a
                // recent value at random, so some succeed and some are refused.
                let expect = if world.rng.chance(30) {
                    None
                } else {
                    read(&world, via, &key).await.flatten()
                };
                (
                    histcheck::Call::Cas {
                        expect: expect.clone(),
                        new: value.clone(),
                    },
                    Cmd::Cas {
                        key: key.clone(),
                        expect,
                        new: value.clone(),
                    },
                )
            };
            // A compare-and-set's window starts at its write, after the read of what it expects.
            let invoke = nanos(&world);
            pending
                .lock()
                .unwrap()
                .insert(c, (key.clone(), call.clone(), invoke));
            let result = write(&world, via, &cmd).await;
            pending.lock().unwrap().remove(&c);
            match result {
                Ok(Some(Answer::Done)) => (call, histcheck::Ret::Ok(Some(value))),
                Ok(Some(Answer::Found(f))) => (call, histcheck::Ret::CasFailed(f)),
                Ok(None) => (call, histcheck::Ret::Unknown),
                Err(()) => {
                    tokio::time::sleep(world.rng.millis(5, 50)).await;
                    continue;
                }
            }
        };
        let done = if ret == histcheck::Ret::Unknown {
            u64::MAX
        } else {
            nanos(&world)
        };
        world.log(format!("c{c} {key} {call:?} -> {ret:?}"));
        history.lock().unwrap().push(histcheck::Op {
            client: c,
            key,
            call,
            ret,
            invoke,
            done,
        });
        tokio::time::sleep(world.rng.millis(0, 30)).await;
    }
}

// ---- faults -------------------------------------------------------------------------------------------

async fn nemesis(world: Arc<World>, until: Instant) {
    while Instant::now() < until {
        tokio::time::sleep(world.rng.millis(200, 1200)).await;
        let down: Vec<usize> = (0..NODES).filter(|&i| world.node(i).is_none()).collect();
        match world.rng.below(6) {
            0 if down.is_empty() => {
                let i = world.rng.below(NODES as u64) as usize;
                let taken = world.nodes.lock().unwrap()[i].take();
                if let Some(node) = taken {
                    world.log(format!("fault: crash {}", addr(i)));
                    node.crash().await;
                }
            }
            0 | 1 => {
                for i in down {
                    // The old incarnation lets go of its files as its tasks end.
                    let mut tries = 0;
                    loop {
                        match start_node(&world, i).await {
                            Ok(()) => {
                                world.log(format!("fault: restart {}", addr(i)));
                                break;
                            }
                            Err(e) if tries < 50 => {
                                tries += 1;
                                let _ = e;
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Err(e) => {
                                world
                                    .violations
                                    .lock()
                                    .unwrap()
                                    .push(format!("{} cannot restart: {e}", addr(i)));
                                break;
                            }
                        }
                    }
                }
            }
            2 => {
                let i = world.rng.below(NODES as u64) as usize;
                let both = world.rng.chance(50);
                let mut cut = world.cut.lock().unwrap();
                for j in (0..NODES).filter(|&j| j != i) {
                    cut.insert((i, j));
                    if both {
                        cut.insert((j, i));
                    }
                }
                drop(cut);
                world.log(format!(
                    "fault: cut {} from the others ({})",
                    addr(i),
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

/// Watches every node's term and role. openraft lets two candidates of one term both lead (a
/// leader is a term *and* a node ID, ordered), so "one leader per term" is not Raft's rule here;
/// what must hold is that a node's term never goes back, across crashes and restarts too (its vote
/// is durable), and the rest is checked by the history and the state machines.
async fn watch_leaders(world: Arc<World>, until: Instant) {
    let mut last: Vec<(&'static str, u64)> = vec![("", 0); NODES];
    while Instant::now() < until {
        for (i, seen) in last.iter_mut().enumerate() {
            if let Some(node) = world.node(i) {
                let stats = node.stats();
                // A node just opened reports empty metrics until its core has read its store.
                if stats.term == 0 && stats.last_log_index == 0 {
                    continue;
                }
                if *seen != (stats.state, stats.term) {
                    if stats.term < seen.1 {
                        world.violations.lock().unwrap().push(format!(
                            "{}'s term went back from {} to {} (a lost vote)",
                            addr(i),
                            seen.1,
                            stats.term
                        ));
                    }
                    *seen = (stats.state, stats.term.max(seen.1));
                    world.log(format!(
                        "{} is {} in term {} (log {}, committed {})",
                        addr(i),
                        stats.state,
                        stats.term,
                        stats.last_log_index,
                        stats.commit_index
                    ));
                }
            }
        }
        if std::env::var_os("CARAVAN_SIM_DEBUG").is_some()
            && world.start.elapsed().as_millis() % 1000 < 10
        {
            for i in 0..NODES {
                if let Some(node) = world.node(i) {
                    let st = node.stats();
                    world.log(format!(
                        "debug {} {:?} matched {:?} silence {:?}",
                        addr(i),
                        st,
                        node.peer_matched(),
                        node.peer_silence()
                    ));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---- one run --------------------------------------------------------------------------------------------

struct Outcome {
    trace: Vec<String>,
    ops: Vec<histcheck::Op>,
    violations: Vec<String>,
}

fn run(seed: u64) -> Outcome {
    run_with(seed, false)
}

fn run_with(seed: u64, stale_reads: bool) -> Outcome {
    // Tests run seeds concurrently, the same seed too: each run its own dir.
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = histcheck::sim::sim_root("caravan-sim").join(format!("{seed}-{n}"));
    let _ = std::fs::remove_dir_all(&dir);
    raft::rt::simulate(Some(seed));
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    // tokio wakes a watch channel's waiters in an order drawn from its own generator: seeded too.
    #[cfg(tokio_unstable)]
    builder
        .rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()))
        // A panic in any task (openraft's included) ends the run, rather than stalling a node.
        .unhandled_panic(tokio::runtime::UnhandledPanic::ShutdownRuntime);
    #[cfg(not(tokio_unstable))]
    panic!("the simulation needs --cfg tokio_unstable (.cargo/config.toml sets it) to seed tokio");
    #[allow(unreachable_code)]
    let rt = builder.build().expect("a runtime");
    let outcome = rt.block_on(async {
        let world = Arc::new(World {
            rng: Rng::new(seed),
            start: Instant::now(),
            dir: dir.clone(),
            nodes: Mutex::new(vec![None; NODES]),
            machines: Mutex::new(Vec::new()),
            cut: Mutex::new(BTreeSet::new()),
            net: Mutex::new(NetParams::default()),
            trace: Mutex::new(Vec::new()),
            stale_reads,
            clock: std::sync::atomic::AtomicU64::new(1),
            acked: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
        });
        for i in 0..NODES {
            start_node(&world, i).await.expect("a fresh node opens");
        }
        let members: BTreeMap<u64, String> = (0..NODES).map(|i| (i as u64 + 1, addr(i))).collect();
        world
            .node(0)
            .unwrap()
            .bootstrap(members)
            .await
            .expect("bootstrap");
        world.log(format!("seed {seed}: {NODES} nodes, {CLIENTS} clients"));
        let faults_end = Instant::now() + FAULTY_FOR;
        let history = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let pending: Pending = Arc::default();
        let mut clients = Vec::new();
        for c in 0..CLIENTS {
            clients.push(tokio::spawn(client(
                world.clone(),
                c,
                faults_end,
                history.clone(),
                pending.clone(),
            )));
        }
        tasks.push(tokio::spawn(nemesis(world.clone(), faults_end)));
        let watcher = tokio::spawn(watch_leaders(world.clone(), faults_end + CONVERGE_WITHIN));
        for t in tasks {
            let _ = t.await;
        }
        // Clients stop with the faults; a write still in flight may or may not happen.
        tokio::time::sleep_until(faults_end).await;
        for t in clients {
            t.abort();
            let _ = t.await;
        }
        for (c, (key, call, invoke)) in std::mem::take(&mut *pending.lock().unwrap()) {
            world.log(format!("c{c} {key} {call:?} -> Unknown (stopped)"));
            history.lock().unwrap().push(histcheck::Op {
                client: c,
                key,
                call,
                ret: histcheck::Ret::Unknown,
                invoke,
                done: u64::MAX,
            });
        }
        // The faults stop: heal, restart, and wait for every node to hold the same state.
        world.cut.lock().unwrap().clear();
        *world.net.lock().unwrap() = NetParams::default();
        for i in 0..NODES {
            if world.node(i).is_none() {
                for _ in 0..50 {
                    if start_node(&world, i).await.is_ok() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        world.log("faults end: healed, every node up".into());
        // One last write makes every node apply everything before it.
        let deadline = Instant::now() + CONVERGE_WITHIN;
        let mut converged = false;
        while Instant::now() < deadline {
            let _ = write(
                &world,
                0,
                &Cmd::Put {
                    key: "final".into(),
                    value: "x".into(),
                },
            )
            .await;
            let states: Vec<(u64, BTreeMap<String, String>)> = (0..NODES)
                .filter_map(|i| {
                    let node = world.node(i)?;
                    let sm = world.machine(i)?;
                    let state = sm.state.lock().unwrap().clone();
                    Some((node.stats().applied_index, state))
                })
                .collect();
            if states.len() == NODES
                && states.windows(2).all(|w| w[0] == w[1])
                && states[0].1.contains_key("final")
            {
                converged = true;
                world.log(format!("converged at index {}", states[0].0));
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !converged {
            world
                .violations
                .lock()
                .unwrap()
                .push("the nodes did not converge to one state after the faults".into());
        }
        watcher.abort();
        // State machine safety: one entry per index, across every incarnation of every node.
        let mut at: BTreeMap<u64, (usize, String)> = BTreeMap::new();
        for (i, sm) in world.machines.lock().unwrap().iter() {
            let applied = sm.applied.lock().unwrap();
            if let Some(w) = applied.windows(2).find(|w| w[1].0 <= w[0].0) {
                world.violations.lock().unwrap().push(format!(
                    "{} applied index {} after index {}",
                    addr(*i),
                    w[1].0,
                    w[0].0
                ));
            }
            for (index, entry) in applied.iter() {
                match at.get(index) {
                    Some((j, other)) if other != entry => {
                        world.violations.lock().unwrap().push(format!(
                            "index {index}: {} applied {entry}, {} applied {other}",
                            addr(*i),
                            addr(*j)
                        ))
                    }
                    Some(_) => {}
                    None => {
                        at.insert(*index, (*i, entry.clone()));
                    }
                }
            }
        }
        // Every write a client was told succeeded is in the log the nodes agreed on.
        if converged {
            for (index, entry) in world.acked.lock().unwrap().iter() {
                match at.get(index) {
                    Some((_, e)) if e == entry => {}
                    other => world.violations.lock().unwrap().push(format!(
                        "the write acknowledged at index {index} ({entry}) is not there: {other:?}"
                    )),
                }
            }
        }
        for i in 0..NODES {
            let taken = world.nodes.lock().unwrap()[i].take();
            if let Some(node) = taken {
                let _ = node.shutdown().await;
            }
        }
        let ops = history.lock().unwrap().clone();
        let trace = world.trace.lock().unwrap().clone();
        let violations = world.violations.lock().unwrap().clone();
        Outcome {
            trace,
            ops,
            violations,
        }
    });
    raft::rt::simulate(None);
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

const REPLAY: &str = "CARAVAN_SIM_SEED={seed} cargo test -p raft --test sim -- replay --nocapture";

/// Many seeds, every invariant; a failure names the seed and the command that replays it.
#[test]
fn seeds_keep_raft_linearizable_under_random_faults() {
    histcheck::sim::check_seeds("sim", REPLAY, Duration::from_secs(120), |seed| {
        let o = run(seed);
        histcheck::sim::SeedResult {
            ops: o.ops.len(),
            faults: o.trace.iter().filter(|l| l.contains("fault:")).count(),
            failure: verdict(seed, &o).err(),
        }
    });
}

/// The checks can fail: when any node answers reads from its own state, skipping raft's read
/// index (the injected bug), the histories of some seeds are not linearizable. (A deposed leader
/// answering from its own state was tried as the bug too; it broke none of 5 seeds' histories.)
#[test]
fn an_injected_stale_read_bug_is_caught() {
    let caught = (1..=5u64)
        .map(|seed| run_with(seed, true))
        .filter(|o| {
            histcheck::check(&o.ops).is_err_and(|e| e.contains("no order explains the results"))
        })
        .count();
    println!("[sim] the injected stale reads broke {caught} of 5 seeds' histories");
    assert!(caught > 0, "no seed's history showed the stale reads");
}

/// The same seed twice gives the same trace: the run is decided by its seed alone.
#[test]
fn a_seed_replays_exactly() {
    let seed = histcheck::sim::seed_from_env().unwrap_or(42);
    let a = run(seed);
    let b = run(seed);
    assert!(!a.ops.is_empty(), "the clients did something");
    histcheck::sim::same_trace(seed, &a.trace, &b.trace);
}

/// `CARAVAN_SIM_SEED=N cargo test -p raft --test sim -- replay --nocapture`: one seed's trace,
/// twice, and its verdict.
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
    histcheck::sim::replay("[sim]", seed, |seed| {
        let o = run(seed);
        histcheck::sim::Replayed {
            verdict: verdict(seed, &o),
            trace: o.trace,
        }
    });
}
