//! The node simulator behind `caravan nodesim`: many client nodes in one process that speak the
//! real client protocol ([`ServerConn`]: register, heartbeat, the blocking allocation query,
//! batched status reports) and run every allocation as the `mock_driver` would (`run_for`,
//! `exit_code`, `start_error`, `start_block_for`), with task states and events as a real client
//! reports them.
//!
//! It exists to measure the servers, so a node must stay cheap: per node three small tasks
//! (heartbeat, allocation watch, status reporter) and a compact record per allocation (its task
//! phases and times, turned into Nomad's task states only when a report is sent). Nodes share
//! rpc connections ([`SimConfig::nodes_per_conn`] to a connection; servers accept a bounded
//! number of connections and calls per connection).
//!
//! What it does not do, and says so here: restart policies (a task that fails fails its
//! allocation, as with `attempts = 0`; the servers reschedule it), lifecycle hooks, templates,
//! artifacts, volumes, networks and any driver but `mock_driver` (a task of another driver fails
//! with "driver not supported by the node simulator").

use crate::conn::{is_failover, ServerConn};
use crate::events;
use crate::fingerprint::{build_node, CpuFacts, DiskFacts, HostFacts, NetFacts};
use crate::identity::NodeIdentity;
use crate::node_loop::{heartbeat_interval, to_std};
use crate::rng::{Backoff, Rng};
use crate::time::{now_rfc3339, now_unix_ns};
use crate::{ClientConfig, RpcServerConn};
use model::alloc::{
    AllocDeploymentStatus, Allocation, ClientStatus, DesiredStatus, TaskState, TaskStatus,
};
use model::node::{Node, NodeStatus};
use model::wire::{
    AllocClientUpdate, NodeClientAllocsRequest, NodeClientAllocsResponse, NodeRegisterRequest,
    NodeUpdateAllocRequest, NodeUpdateStatusRequest,
};
use rpc::ErrorCode;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

/// The one driver simulated nodes have.
pub const SIM_DRIVER: &str = "mock_driver";
/// How long a node's status reporter gathers changes before one `Node.UpdateAlloc` (as the
/// client's updater).
const REPORT_BATCH_WINDOW: Duration = Duration::from_millis(200);
/// How long one allocation query waits on the server.
const ALLOC_QUERY_WAIT: Duration = Duration::from_secs(300);
/// A group's `min_healthy_time` when it has no update block.
const MIN_HEALTHY_TIME_DEFAULT: Duration = Duration::from_secs(10);

/// What `caravan nodesim` was asked for.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Server rpc addresses.
    pub servers: Vec<String>,
    pub nodes: usize,
    pub datacenter: String,
    pub node_class: String,
    pub node_pool: String,
    /// Each node's total CPU (MHz) and memory (MB).
    pub cpu_mhz: u64,
    pub memory_mb: u64,
    /// Node IDs and secrets are drawn from this seed: the same seed gives the same nodes.
    pub seed: u64,
    /// Node `i` is named `<prefix><i>`.
    pub name_prefix: String,
    pub region: String,
    /// Nodes sharing one rpc connection.
    pub nodes_per_conn: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            servers: Vec::new(),
            nodes: 1,
            datacenter: "dc1".into(),
            node_class: String::new(),
            node_pool: String::new(),
            cpu_mhz: 4000,
            memory_mb: 8192,
            seed: 1,
            name_prefix: "sim-".into(),
            region: "global".into(),
            nodes_per_conn: 64,
        }
    }
}

/// Counters the simulator keeps; [`Sim::progress`] reads them.
#[derive(Debug, Default)]
struct Counters {
    registered: AtomicU64,
    ready: AtomicU64,
    running: AtomicU64,
    started: AtomicU64,
    complete: AtomicU64,
    failed: AtomicU64,
    reports: AtomicU64,
    errors: AtomicU64,
    /// Allocations a node saw that another simulated node had already been given.
    doubly_placed: AtomicU64,
}

/// A reading of the counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimProgress {
    pub nodes: u64,
    /// Nodes registered at least once.
    pub registered: u64,
    /// Nodes whose last heartbeat was answered.
    pub ready: u64,
    /// Allocations running now.
    pub running: u64,
    /// Allocations ever started (each counted once).
    pub started: u64,
    pub complete: u64,
    pub failed: u64,
    /// `Node.UpdateAlloc` calls answered.
    pub reports: u64,
    /// Server calls that failed (retried).
    pub errors: u64,
    /// Allocations seen on two simulated nodes (must stay 0).
    pub doubly_placed: u64,
}

impl std::fmt::Display for SimProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} nodes ready, {} allocations running ({} started, {} complete, {} failed), {} reports, {} errors",
            self.ready,
            self.nodes,
            self.running,
            self.started,
            self.complete,
            self.failed,
            self.reports,
            self.errors
        )?;
        if self.doubly_placed > 0 {
            write!(f, ", {} PLACED TWICE", self.doubly_placed)?;
        }
        Ok(())
    }
}

/// A running simulation. Dropping it does not stop it; call [`Sim::stop`].
pub struct Sim {
    nodes: Vec<Arc<SimNode>>,
    counters: Arc<Counters>,
    shutdown: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Sim {
    /// Starts every node's loops. Must be called inside a tokio runtime.
    pub fn start(cfg: &SimConfig) -> Sim {
        let counters = Arc::new(Counters::default());
        let (shutdown, _) = watch::channel(false);
        let seen: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let mut rng = Rng::new(cfg.seed);
        let per_conn = cfg.nodes_per_conn.max(1);
        let mut conns: Vec<Arc<RpcServerConn>> = Vec::new();
        let mut nodes = Vec::with_capacity(cfg.nodes);
        for i in 0..cfg.nodes {
            if i % per_conn == 0 {
                let rpc = rpc::Client::new(rpc::limits::CALL_TIMEOUT_DEFAULT);
                conns.push(Arc::new(RpcServerConn::new(rpc, cfg.servers.clone())));
            }
            let identity = sim_identity(&mut rng);
            let conn: Arc<dyn ServerConn> = conns[conns.len() - 1].clone();
            nodes.push(Arc::new(SimNode {
                index: i,
                identity,
                name: format!("{}{i}", cfg.name_prefix),
                conn,
                cfg: NodeShape::from(cfg),
                counters: counters.clone(),
                seen: seen.clone(),
                registered: Notify::new(),
                is_registered: AtomicBool::new(false),
                registrations: AtomicU64::new(0),
                report: Notify::new(),
                state: Mutex::new(NodeState::default()),
            }));
        }
        let mut tasks = JoinSet::new();
        for node in &nodes {
            let seed = cfg.seed ^ (node.index as u64).wrapping_mul(0x9e37_79b9);
            tasks.spawn(node.clone().heartbeat_loop(shutdown.subscribe(), seed));
            tasks.spawn(node.clone().alloc_loop(shutdown.subscribe(), seed ^ 1));
            tasks.spawn(node.clone().report_loop(shutdown.subscribe(), seed ^ 2));
        }
        Sim {
            nodes,
            counters,
            shutdown,
            tasks,
        }
    }

    /// The simulated nodes' IDs, in order.
    pub fn node_ids(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.identity.id.clone()).collect()
    }

    pub fn progress(&self) -> SimProgress {
        let c = &self.counters;
        SimProgress {
            nodes: self.nodes.len() as u64,
            registered: c.registered.load(Ordering::Relaxed),
            ready: c.ready.load(Ordering::Relaxed),
            running: c.running.load(Ordering::Relaxed),
            started: c.started.load(Ordering::Relaxed),
            complete: c.complete.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            reports: c.reports.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            doubly_placed: c.doubly_placed.load(Ordering::Relaxed),
        }
    }

    /// Stops every node's loops (pending reports are sent first, within a bounded time). The
    /// servers see the nodes stop heartbeating, as when client agents are killed.
    pub async fn stop(mut self) {
        self.shutdown.send_replace(true);
        let drained = tokio::time::timeout(Duration::from_secs(10), async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        if drained.is_err() {
            self.tasks.abort_all();
        }
    }
}

/// Node `i`'s identity: the `i`-th pair of draws from the seeded generator.
fn sim_identity(rng: &mut Rng) -> NodeIdentity {
    let mut uuid = || {
        let hi = u128::from(rng.next_u64()) << 64;
        let lo = u128::from(rng.next_u64());
        uuid::Builder::from_random_bytes((hi | lo).to_be_bytes())
            .into_uuid()
            .to_string()
    };
    NodeIdentity {
        id: uuid(),
        secret_id: uuid(),
    }
}

/// What every simulated node looks like.
#[derive(Debug, Clone)]
struct NodeShape {
    datacenter: String,
    node_class: String,
    node_pool: String,
    cpu_mhz: u64,
    memory_mb: u64,
    region: String,
}

impl From<&SimConfig> for NodeShape {
    fn from(c: &SimConfig) -> Self {
        NodeShape {
            datacenter: c.datacenter.clone(),
            node_class: c.node_class.clone(),
            node_pool: c.node_pool.clone(),
            cpu_mhz: c.cpu_mhz,
            memory_mb: c.memory_mb,
            region: c.region.clone(),
        }
    }
}

struct SimNode {
    index: usize,
    identity: NodeIdentity,
    name: String,
    conn: Arc<dyn ServerConn>,
    cfg: NodeShape,
    counters: Arc<Counters>,
    /// Allocation ID → the simulated node that first got it (to catch double placements).
    seen: Arc<Mutex<HashMap<String, usize>>>,
    /// Wakes the allocation watch once the node is registered.
    registered: Notify,
    is_registered: AtomicBool,
    /// Successful registrations so far: the allocation loop starts its index over after each.
    registrations: AtomicU64,
    /// Wakes the status reporter when an allocation changed.
    report: Notify,
    state: Mutex<NodeState>,
}

#[derive(Default)]
struct NodeState {
    allocs: HashMap<String, SimAlloc>,
    /// Every allocation the servers list for this node → the `AllocModifyIndex` last fetched
    /// (including those it does not run): what changed is fetched, the rest is not.
    known: HashMap<String, u64>,
    /// The index of the last listing acted on (a lower one is an older list, ignored).
    listed_at: u64,
    /// Allocations whose state changed since the last report.
    dirty: Vec<String>,
    ready: bool,
}

/// One allocation, compactly: its tasks' phases and times.
struct SimAlloc {
    deployment: bool,
    min_healthy: Duration,
    healthy_reported: bool,
    tasks: Vec<SimTask>,
    /// The status last counted in the counters.
    counted: ClientStatus,
    stopping: bool,
    /// Bumped on every stop, so timers of an earlier life do nothing.
    generation: u64,
}

#[derive(Debug, Clone)]
struct SimTask {
    name: String,
    received_at: i64,
    started_at: Option<i64>,
    finished_at: Option<i64>,
    exit_code: i32,
    /// The driver refused the task (`start_error`, a bad config, another driver).
    error: Option<String>,
    killed: bool,
    /// The config's timings.
    block_for: Duration,
    run_for: Duration,
}

impl SimTask {
    fn phase(&self) -> TaskStatus {
        if self.finished_at.is_some() || self.error.is_some() {
            TaskStatus::Dead
        } else if self.started_at.is_some() {
            TaskStatus::Running
        } else {
            TaskStatus::Pending
        }
    }

    fn failed(&self) -> bool {
        self.error.is_some() || (self.finished_at.is_some() && !self.killed && self.exit_code != 0)
    }

    /// Nomad's task state with the events a real client records for the same life.
    fn state(&self) -> TaskState {
        let mut s = TaskState {
            state: self.phase(),
            failed: self.failed(),
            ..TaskState::default()
        };
        let at = |mut e: model::alloc::TaskEvent, t: i64| {
            e.time = t;
            e
        };
        s.events.push(at(events::received(), self.received_at));
        s.events.push(at(events::setup(), self.received_at));
        if let Some(err) = &self.error {
            let mut e = at(events::driver_failure(err), self.received_at);
            e.fails_task = true;
            s.events.push(e);
            s.finished_at = Some(model::time::format_unix_nanos(self.received_at));
        }
        if let Some(t) = self.started_at {
            s.events.push(at(events::started(), t));
            s.started_at = Some(model::time::format_unix_nanos(t));
        }
        if let Some(t) = self.finished_at {
            if self.killed {
                s.events
                    .push(at(events::killing(Duration::from_secs(5)), t));
                s.events.push(at(events::killed(None), t));
            } else {
                let exit = drivers::ExitResult {
                    exit_code: self.exit_code,
                    ..drivers::ExitResult::default()
                };
                s.events.push(at(events::terminated(&exit), t));
            }
            s.finished_at = Some(model::time::format_unix_nanos(t));
        }
        s
    }
}

impl SimAlloc {
    fn new(alloc: &Allocation, now: i64) -> SimAlloc {
        let group = alloc
            .job
            .as_deref()
            .and_then(|j| j.task_groups.iter().find(|g| g.name == alloc.task_group));
        let tasks = group
            .map(|g| g.tasks.iter().map(|t| sim_task(t, now)).collect())
            .unwrap_or_default();
        let min_healthy = group
            .and_then(|g| g.update.as_ref())
            .and_then(|u| u.min_healthy_time)
            .map_or(MIN_HEALTHY_TIME_DEFAULT, |d| {
                Duration::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(0))
            });
        SimAlloc {
            deployment: !alloc.deployment_id.is_empty(),
            min_healthy,
            healthy_reported: false,
            tasks,
            counted: ClientStatus::Pending,
            stopping: false,
            generation: 0,
        }
    }

    /// Nomad's `getClientStatus` over the tasks.
    fn client_status(&self) -> (ClientStatus, &'static str) {
        let states: Vec<TaskState> = self
            .tasks
            .iter()
            .map(|t| TaskState {
                state: t.phase(),
                failed: t.failed(),
                ..TaskState::default()
            })
            .collect();
        crate::alloc_runner::client_status(states.iter())
    }

    fn update(&self, id: &str) -> AllocClientUpdate {
        let (status, description) = self.client_status();
        AllocClientUpdate {
            id: id.to_string(),
            client_status: status,
            client_description: description.into(),
            task_states: self
                .tasks
                .iter()
                .map(|t| (t.name.clone(), t.state()))
                .collect(),
            deployment_status: self.healthy_reported.then(|| AllocDeploymentStatus {
                healthy: Some(true),
                timestamp: Some(now_rfc3339()),
                ..AllocDeploymentStatus::default()
            }),
            network_status: None,
            modify_time: now_unix_ns(),
        }
    }
}

fn sim_task(task: &model::task::Task, now: i64) -> SimTask {
    let mut t = SimTask {
        name: task.name.clone(),
        received_at: now,
        started_at: None,
        finished_at: None,
        exit_code: 0,
        error: None,
        killed: false,
        block_for: Duration::ZERO,
        run_for: Duration::ZERO,
    };
    if task.driver != SIM_DRIVER {
        t.error = Some(format!(
            "driver {:?} is not supported by the node simulator (only {SIM_DRIVER})",
            task.driver
        ));
        return t;
    }
    let map: serde_json::Map<String, serde_json::Value> = task.config.clone().into_iter().collect();
    match drivers::mock::MockTaskConfig::parse(&map) {
        Ok(cfg) => {
            t.error = cfg.start_error;
            t.exit_code = cfg.exit_code;
            t.block_for = cfg.start_block_for;
            t.run_for = cfg.run_for;
        }
        Err(e) => t.error = Some(e.to_string()),
    }
    t
}

impl SimNode {
    fn node(&self) -> Node {
        let cfg = ClientConfig {
            node_name: self.name.clone(),
            datacenter: self.cfg.datacenter.clone(),
            region: self.cfg.region.clone(),
            node_class: self.cfg.node_class.clone(),
            node_pool: self.cfg.node_pool.clone(),
            cpu_total_compute_mhz: Some(self.cfg.cpu_mhz),
            memory_total_mb: Some(self.cfg.memory_mb),
            ..ClientConfig::new("")
        };
        let facts = HostFacts {
            cpu: CpuFacts {
                cores: 4,
                mhz: self.cfg.cpu_mhz / 4,
                model: "simulated".into(),
            },
            memory_bytes: self.cfg.memory_mb << 20,
            disk: Some(DiskFacts {
                total_bytes: 100 << 30,
                free_bytes: 100 << 30,
            }),
            hostname: self.name.clone(),
            net: NetFacts {
                device: "lo".into(),
                ip: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            },
            kernel_version: "6.1.0".into(),
            kernel_arch: "x86_64".into(),
            os_name: "debian".into(),
            os_version: "12".into(),
            interfaces: Vec::new(),
            network_modes: Vec::new(),
        };
        let fp = drivers::Fingerprint::healthy(SIM_DRIVER, BTreeMap::new());
        build_node(
            &self.identity,
            &cfg,
            &facts,
            &[(SIM_DRIVER.to_string(), fp)],
            &now_rfc3339(),
        )
    }

    fn set_ready(&self, ready: bool) {
        let mut st = self.state.lock().expect("sim node lock");
        if st.ready != ready {
            st.ready = ready;
            let c = &self.counters.ready;
            if ready {
                c.fetch_add(1, Ordering::Relaxed);
            } else {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }

    fn error(&self, what: &str, e: &rpc::RpcError) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(node = %self.name, error = %e, "{what} failed");
    }

    /// Register, then heartbeat at about half the TTL the servers hand out; register again
    /// when the servers no longer know the node.
    async fn heartbeat_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>, seed: u64) {
        let mut rng = Rng::new(seed);
        let mut backoff = Backoff::new(Rng::new(seed ^ 7));
        'register: loop {
            let mut ttl = loop {
                let req = NodeRegisterRequest { node: self.node() };
                match self.conn.register(req).await {
                    Ok(resp) => {
                        backoff.reset();
                        break to_std(resp.heartbeat_ttl);
                    }
                    Err(e) => {
                        self.error("register", &e);
                        if sleep_or_stop(backoff.next_delay(), &mut shutdown).await {
                            return;
                        }
                    }
                }
            };
            self.registrations.fetch_add(1, Ordering::SeqCst);
            if !self.is_registered.swap(true, Ordering::SeqCst) {
                self.counters.registered.fetch_add(1, Ordering::Relaxed);
            }
            self.registered.notify_waiters();
            // The first heartbeat comes at once: it makes the node ready.
            let mut delay = Duration::ZERO;
            loop {
                if sleep_or_stop(delay, &mut shutdown).await {
                    return;
                }
                let req = NodeUpdateStatusRequest {
                    node_id: self.identity.id.clone(),
                    secret_id: self.identity.secret_id.clone(),
                    status: Some(NodeStatus::Ready),
                };
                match self.conn.update_status(req).await {
                    Ok(resp) => {
                        backoff.reset();
                        self.set_ready(true);
                        ttl = to_std(resp.heartbeat_ttl);
                        delay = heartbeat_interval(ttl, &mut rng);
                    }
                    Err(e) if e.code == ErrorCode::NotFound => {
                        self.set_ready(false);
                        continue 'register;
                    }
                    Err(e) => {
                        self.error("heartbeat", &e);
                        delay = backoff.next_delay().min(heartbeat_interval(ttl, &mut rng));
                    }
                }
            }
        }
    }

    /// Follows the node's allocations with the blocking query and runs what is new.
    async fn alloc_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>, seed: u64) {
        let mut backoff = Backoff::new(Rng::new(seed));
        let mut index = 0;
        let mut seen_generation = 0;
        loop {
            if !self.is_registered.load(Ordering::SeqCst) {
                let registered = self.registered.notified();
                tokio::pin!(registered);
                registered.as_mut().enable();
                if !self.is_registered.load(Ordering::SeqCst) {
                    tokio::select! {
                        () = registered => {}
                        _ = shutdown.changed() => return,
                    }
                }
            }
            // Registered again (the servers did not know the node): their history may have
            // started over, so the next list is taken whatever its index.
            let generation = self.registrations.load(Ordering::SeqCst);
            if generation != seen_generation {
                seen_generation = generation;
                index = 0;
                let mut st = self.state.lock().expect("sim node lock");
                st.listed_at = 0;
                st.known.clear();
            }
            let req = NodeClientAllocsRequest {
                node_id: self.identity.id.clone(),
                secret_id: self.identity.secret_id.clone(),
                min_index: index,
                wait: model::Duration::from(ALLOC_QUERY_WAIT),
            };
            let resp = tokio::select! {
                r = self.conn.get_client_allocs(req) => r,
                _ = shutdown.changed() => return,
            };
            let resp = match resp {
                Ok(resp) => {
                    let fetched = tokio::select! {
                        r = self.fetch_changed(&resp) => r,
                        _ = shutdown.changed() => return,
                    };
                    fetched.map(|allocs| (resp, allocs))
                }
                Err(e) => Err(e),
            };
            match resp {
                Ok((resp, _)) if resp.index < index => {
                    // A server behind the last one (see `alloc_sync`): its older list is ignored.
                    if sleep_or_stop(crate::limits::ALLOC_QUERY_IDLE_DELAY, &mut shutdown).await {
                        return;
                    }
                }
                Ok((resp, fetched)) => {
                    backoff.reset();
                    index = resp.index;
                    self.state.lock().expect("sim node lock").listed_at = resp.index;
                    self.sync(&resp.allocs, fetched);
                }
                Err(e) => {
                    if !is_failover(&e) && e.code != ErrorCode::NotFound {
                        tracing::warn!(node = %self.name, error = %e, "allocation query refused");
                    }
                    self.error("allocation query", &e);
                    if sleep_or_stop(backoff.next_delay(), &mut shutdown).await {
                        return;
                    }
                }
            }
        }
    }

    /// The listed allocations that are new to this node or changed since it fetched them, in
    /// full (`Alloc.GetAllocs`, in chunks).
    async fn fetch_changed(
        &self,
        resp: &NodeClientAllocsResponse,
    ) -> Result<Vec<Allocation>, rpc::RpcError> {
        let changed: Vec<String> = {
            let st = self.state.lock().expect("sim node lock");
            if resp.index < st.listed_at {
                // An older list than the last one: nothing to fetch, it is ignored.
                return Ok(Vec::new());
            }
            resp.allocs
                .iter()
                .filter(|(id, at)| st.known.get(*id).is_none_or(|k| k < *at))
                .map(|(id, _)| id.clone())
                .collect()
        };
        crate::alloc_sync::fetch_allocs(&*self.conn, &self.identity, &changed, resp.index).await
    }

    /// Starts allocations that are new here, stops those the servers stopped, forgets those
    /// they no longer list. `fetched` are the listed allocations that changed.
    fn sync(self: &Arc<Self>, listed: &BTreeMap<String, u64>, fetched: Vec<Allocation>) {
        let now = now_unix_ns();
        let mut timers: Vec<(String, u64)> = Vec::new();
        {
            let mut st = self.state.lock().expect("sim node lock");
            st.known.retain(|id, _| listed.contains_key(id));
            let gone: Vec<String> = st
                .allocs
                .keys()
                .filter(|id| !listed.contains_key(id.as_str()))
                .cloned()
                .collect();
            for id in gone {
                if let Some(a) = st.allocs.remove(&id) {
                    self.recount(&a.counted, None);
                }
            }
            for alloc in &fetched {
                st.known.insert(alloc.id.clone(), alloc.alloc_modify_index);
            }
            for alloc in &fetched {
                let wants_run = alloc.desired_status == DesiredStatus::Run;
                match st.allocs.get_mut(&alloc.id) {
                    None => {
                        if !wants_run || alloc.client_terminal() {
                            continue;
                        }
                        self.check_not_seen(&alloc.id);
                        let a = SimAlloc::new(alloc, now);
                        self.counters.started.fetch_add(1, Ordering::Relaxed);
                        st.allocs.insert(alloc.id.clone(), a);
                        timers.push((alloc.id.clone(), 0));
                    }
                    Some(a) => {
                        if !wants_run && !a.stopping {
                            a.stopping = true;
                            a.generation += 1;
                            for t in a.tasks.iter_mut() {
                                if t.phase() != TaskStatus::Dead {
                                    t.finished_at = Some(now);
                                    t.killed = true;
                                }
                            }
                            st.dirty.push(alloc.id.clone());
                        }
                    }
                }
            }
        }
        for (id, _) in timers {
            self.clone().advance(id, 0);
        }
        self.report.notify_one();
    }

    /// Records that this node got `id`; counts a double placement when another node had it.
    fn check_not_seen(&self, id: &str) {
        let mut seen = self.seen.lock().expect("sim seen lock");
        match seen.get(id) {
            Some(owner) if *owner != self.index => {
                self.counters.doubly_placed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(alloc = id, node = %self.name, "allocation placed on two simulated nodes");
            }
            _ => {
                seen.insert(id.to_string(), self.index);
            }
        }
    }

    /// Moves an allocation's tasks along their timeline (start after `start_block_for`, exit
    /// after `run_for`, healthy after `min_healthy_time`), one timer task at a time.
    fn advance(self: Arc<Self>, id: String, generation: u64) {
        let next = {
            let mut st = self.state.lock().expect("sim node lock");
            let Some(a) = st.allocs.get_mut(&id) else {
                return;
            };
            if a.generation != generation || a.stopping {
                return;
            }
            let now = now_unix_ns();
            let mut next: Option<Duration> = None;
            let mut changed = false;
            for t in a.tasks.iter_mut() {
                match t.phase() {
                    TaskStatus::Pending => {
                        let due = t.received_at + nanos(t.block_for);
                        if now >= due {
                            t.started_at = Some(now);
                            changed = true;
                            if !t.run_for.is_zero() {
                                next = min_opt(next, t.run_for);
                            }
                        } else {
                            next = min_opt(next, ns_to_duration(due - now));
                        }
                    }
                    TaskStatus::Running if !t.run_for.is_zero() => {
                        let due = t.started_at.unwrap_or(now) + nanos(t.run_for);
                        if now >= due {
                            t.finished_at = Some(now);
                            changed = true;
                        } else {
                            next = min_opt(next, ns_to_duration(due - now));
                        }
                    }
                    _ => {}
                }
            }
            let running = a.tasks.iter().all(|t| t.phase() == TaskStatus::Running);
            if a.deployment && !a.healthy_reported && running && !a.tasks.is_empty() {
                let since = a
                    .tasks
                    .iter()
                    .filter_map(|t| t.started_at)
                    .max()
                    .unwrap_or(now);
                let due = since + nanos(a.min_healthy);
                if now >= due {
                    a.healthy_reported = true;
                    changed = true;
                } else {
                    next = min_opt(next, ns_to_duration(due - now));
                }
            }
            let status = a.client_status().0;
            let counted = std::mem::replace(&mut a.counted, status.clone());
            if changed {
                st.dirty.push(id.clone());
            }
            if status != counted {
                self.recount(&counted, Some(&status));
            }
            next
        };
        self.report.notify_one();
        if let Some(delay) = next {
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                self.advance(id, generation);
            });
        }
    }

    /// Moves one allocation between the counters.
    /// `to` is `None` for an allocation the servers no longer list.
    fn recount(&self, from: &ClientStatus, to: Option<&ClientStatus>) {
        let c = &self.counters;
        if *from == ClientStatus::Running {
            c.running.fetch_sub(1, Ordering::Relaxed);
        }
        let Some(to) = to else {
            return;
        };
        match to {
            ClientStatus::Running => {
                c.running.fetch_add(1, Ordering::Relaxed);
            }
            ClientStatus::Complete => {
                c.complete.fetch_add(1, Ordering::Relaxed);
            }
            ClientStatus::Failed => {
                c.failed.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// Sends what changed, at most once per batch window, as the client's updater does.
    async fn report_loop(self: Arc<Self>, mut shutdown: watch::Receiver<bool>, seed: u64) {
        let mut backoff = Backoff::new(Rng::new(seed));
        loop {
            let stopping = tokio::select! {
                () = self.report.notified() => false,
                _ = shutdown.changed() => true,
            };
            if !stopping && sleep_or_stop(REPORT_BATCH_WINDOW, &mut shutdown).await {
                return;
            }
            let updates = {
                let mut st = self.state.lock().expect("sim node lock");
                let mut ids = std::mem::take(&mut st.dirty);
                ids.sort();
                ids.dedup();
                // Stopped allocations are reported complete: count them as they leave.
                let mut out = Vec::with_capacity(ids.len());
                for id in ids {
                    let Some(a) = st.allocs.get_mut(&id) else {
                        continue;
                    };
                    let status = a.client_status().0;
                    if status != a.counted {
                        let from = std::mem::replace(&mut a.counted, status.clone());
                        self.recount(&from, Some(&status));
                    }
                    out.push(a.update(&id));
                }
                out
            };
            if updates.is_empty() {
                if stopping {
                    return;
                }
                continue;
            }
            let ids: Vec<String> = updates.iter().map(|u| u.id.clone()).collect();
            let req = NodeUpdateAllocRequest {
                node_id: self.identity.id.clone(),
                secret_id: self.identity.secret_id.clone(),
                allocs: updates,
            };
            match self.conn.update_allocs(req).await {
                Ok(()) => {
                    backoff.reset();
                    self.counters.reports.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.error("status report", &e);
                    self.state.lock().expect("sim node lock").dirty.extend(ids);
                    if stopping || sleep_or_stop(backoff.next_delay(), &mut shutdown).await {
                        return;
                    }
                    self.report.notify_one();
                }
            }
            if stopping {
                return;
            }
        }
    }
}

/// Sleeps `d`; true when the simulation is stopping instead.
async fn sleep_or_stop(d: Duration, shutdown: &mut watch::Receiver<bool>) -> bool {
    if *shutdown.borrow() {
        return true;
    }
    tokio::select! {
        () = tokio::time::sleep(d) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}

fn nanos(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

fn ns_to_duration(ns: i64) -> Duration {
    Duration::from_nanos(u64::try_from(ns).unwrap_or(0))
}

fn min_opt(a: Option<Duration>, b: Duration) -> Option<Duration> {
    Some(a.map_or(b, |a| a.min(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_stable_per_seed() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let first: Vec<NodeIdentity> = (0..3).map(|_| sim_identity(&mut a)).collect();
        let again: Vec<NodeIdentity> = (0..3).map(|_| sim_identity(&mut b)).collect();
        assert_eq!(first, again);
        assert_ne!(first[0].id, first[1].id);
        assert_ne!(first[0].id, first[0].secret_id);
        let mut c = Rng::new(43);
        assert_ne!(sim_identity(&mut c).id, first[0].id);
        assert!(uuid::Uuid::parse_str(&first[0].id).is_ok());
    }

    fn task(cfg: serde_json::Value) -> model::task::Task {
        model::task::Task {
            name: "t".into(),
            driver: SIM_DRIVER.into(),
            config: serde_json::from_value(cfg).unwrap(),
            ..model::task::Task::default()
        }
    }

    #[test]
    fn mock_config_drives_the_task() {
        let t = sim_task(
            &task(serde_json::json!({"run_for": "2s", "exit_code": 3, "start_block_for": "1s"})),
            0,
        );
        assert_eq!(t.run_for, Duration::from_secs(2));
        assert_eq!(t.block_for, Duration::from_secs(1));
        assert_eq!(t.phase(), TaskStatus::Pending);
        let failed = sim_task(&task(serde_json::json!({"start_error": "no"})), 0);
        assert_eq!((failed.phase(), failed.failed()), (TaskStatus::Dead, true));
        let s = failed.state();
        assert!(s.failed);
        assert!(s.events.iter().any(|e| e.event_type == "Driver Failure"));
        let mut other = task(serde_json::json!({}));
        other.driver = "docker".into();
        let t = sim_task(&other, 0);
        assert!(t.error.as_deref().unwrap_or("").contains("not supported"));
    }

    #[test]
    fn task_states_follow_the_life() {
        let mut t = sim_task(&task(serde_json::json!({"exit_code": 1})), 10);
        t.started_at = Some(20);
        assert_eq!(t.state().state, TaskStatus::Running);
        t.finished_at = Some(30);
        let s = t.state();
        assert_eq!((&s.state, s.failed), (&TaskStatus::Dead, true));
        let types: Vec<&str> = s.events.iter().map(|e| e.event_type.as_str()).collect();
        assert_eq!(types, ["Received", "Task Setup", "Started", "Terminated"]);
        t.killed = true;
        assert!(!t.state().failed, "a killed task did not fail");
    }
}
