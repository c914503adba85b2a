//! One allocation's life on this node (Nomad's `allocRunner`): its directory, one task runner
//! per task started in lifecycle order, the allocation's client status derived from its tasks,
//! persistence of every change, and status updates for the servers.
//!
//! Lifecycle order: prestart tasks first (a non-sidecar must finish successfully, a sidecar must
//! be running), then the main tasks, then poststart tasks once a main task runs; when every main
//! task is dead the sidecars are stopped, and once everything else is dead the poststop tasks
//! run. A failed task (or a dead leader) stops its siblings, as Nomad does.

use crate::actions::AllocActionError;
use crate::allocdir::AllocDir;
use crate::checks::{CheckResults, Checks, RestartTarget};
use crate::context::shutting_down;
use crate::context::{find_group, RunnerContext};
use crate::csi::hook::{self, Volumes};
use crate::events;
use crate::health::{HealthTracker, TaskView};
use crate::limits::{RUNNER_QUEUE_CAPACITY, SHUTDOWN_GRACE, STATE_VERSION};
use crate::network::{self, NetworkRecord};
use crate::state_db::{AllocRecord, TaskRecord};
use crate::task_runner::{AllocView, TaskCommand, TaskReport, TaskRunner, TaskRunnerHandle};
use crate::time::now_unix_ns;
use model::alloc::{
    AllocDeploymentStatus, Allocation, ClientStatus, TaskEvent, TaskState, TaskStatus,
};
use model::wire::AllocClientUpdate;
use model::Task;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// What the client tells an alloc runner.
#[derive(Debug)]
pub(crate) enum AllocCommand {
    /// A newer copy of the allocation from the servers (desired status, job, resources).
    Update(Box<Allocation>),
    /// The servers forgot the allocation: stop its tasks, remove its directory and state.
    Destroy,
    /// The allocation is terminal and the client garbage collects it: as `Destroy` (its
    /// tasks are dead already).
    GarbageCollect,
    /// The client has not reached the servers for the group's `stop_on_client_after` (the
    /// duration): stop the tasks; the allocation stays, for the servers to hear about.
    StopDisconnected(std::time::Duration),
    /// `alloc restart -all-tasks` (Nomad's `RestartAll`): every task runs again in lifecycle
    /// order, the dead ones (a finished prestart task) included. The reply comes once the
    /// running tasks have stopped.
    RestartAll(oneshot::Sender<Result<(), AllocActionError>>),
}

pub(crate) struct AllocRunnerHandle {
    pub cmds: mpsc::Sender<AllocCommand>,
    /// The latest status, as last sent to the servers. Never held across `.await`.
    pub status: Arc<Mutex<AllocClientUpdate>>,
    /// The `AllocModifyIndex` of the newest copy handed to the runner.
    pub alloc_modify_index: u64,
    pub join: JoinHandle<()>,
    /// How to reach each task (`alloc signal|restart|exec`, stats), as of the runner's last
    /// change. Never held across `.await`.
    pub tasks: SharedTasks,
    /// The group's `stop_on_client_after` (or `stop_after_client_disconnect`), if any.
    pub stop_on_client_after: Option<std::time::Duration>,
    /// Already told to stop for being disconnected.
    pub stopped_disconnected: bool,
    /// The `AllocModifyIndex` of the servers' `unknown` copy this client already answered with
    /// its real status (0: none). The answer changes only the client's fields, so the copy the
    /// client holds stays `unknown` until the servers change it again: one answer per copy.
    pub unknown_answered: u64,
    /// What the allocation's metrics are labelled with.
    pub labels: Arc<AllocLabels>,
    /// The latest result of each of its nomad services' checks.
    pub checks: CheckResults,
}

/// `job`, `task_group`, `namespace` of an allocation (Nomad's allocation metric labels).
#[derive(Debug, Clone, Default)]
pub(crate) struct AllocLabels {
    pub job: String,
    pub task_group: String,
    pub namespace: String,
    /// Each task's reserved CPU (MHz) and memory (MB).
    pub tasks: BTreeMap<String, (i64, i64)>,
    /// The group's ephemeral disk (MB).
    pub disk_mb: i64,
    /// Each task's device instances (for their statistics).
    pub devices: BTreeMap<String, Vec<model::alloc::AllocatedDeviceResource>>,
}

/// Each task's runner and running process, shared with the client's user actions.
pub(crate) type SharedTasks = Arc<Mutex<BTreeMap<String, TaskAccess>>>;

/// How the client reaches one task outside its runner.
#[derive(Clone)]
pub(crate) struct TaskAccess {
    /// The task runner's commands; `None` before it starts.
    pub cmds: Option<mpsc::Sender<TaskCommand>>,
    /// The driver handle of the running process; `None` when none runs.
    pub handle: Option<drivers::TaskHandle>,
}

/// When a task runs, from its `lifecycle` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Prestart { sidecar: bool },
    Main,
    Poststart,
    Poststop,
}

impl Role {
    fn of(task: &Task) -> Role {
        match task.lifecycle.as_ref() {
            None => Role::Main,
            Some(lc) => match lc.hook.as_str() {
                "prestart" => Role::Prestart {
                    sidecar: lc.sidecar,
                },
                "poststart" => Role::Poststart,
                "poststop" => Role::Poststop,
                _ => Role::Main,
            },
        }
    }
}

struct Slot {
    role: Role,
    leader: bool,
    record: TaskRecord,
    runner: Option<TaskRunnerHandle>,
}

impl Slot {
    fn state(&self) -> &TaskStatus {
        &self.record.state.state
    }

    fn is_dead(&self) -> bool {
        *self.state() == TaskStatus::Dead
    }

    fn can_start(&self) -> bool {
        self.runner.is_none() && !self.is_dead()
    }
}

pub(crate) struct AllocRunner {
    ctx: Arc<RunnerContext>,
    alloc: watch::Sender<Arc<Allocation>>,
    dir: AllocDir,
    slots: BTreeMap<String, Slot>,
    client_status: ClientStatus,
    client_description: String,
    status: Arc<Mutex<AllocClientUpdate>>,
    reports_tx: mpsc::Sender<TaskReport>,
    reports: mpsc::Receiver<TaskReport>,
    cmds: mpsc::Receiver<AllocCommand>,
    /// Every task is being stopped; nothing but poststop tasks starts any more.
    killing: bool,
    /// Stopping to remove the allocation: poststop tasks do not run.
    destroying: bool,
    /// Deployment health, while the allocation belongs to a deployment.
    health: Option<HealthTracker>,
    /// The health decision as reported to the servers.
    deployment_status: Option<AllocDeploymentStatus>,
    tasks: SharedTasks,
    /// The allocation's CSI volumes as the task runners mount them.
    volumes: watch::Sender<Arc<Volumes>>,
    volume_phase: VolumePhase,
    /// The group's network namespace as made so far; `None`: the host's network (or torn down).
    network: Option<NetworkRecord>,
    /// The namespace the task runners join, once ready.
    network_spec: watch::Sender<Option<drivers::NetworkIsolation>>,
    /// The running observers of the nomad services' checks, until the allocation stops.
    checks: Option<Checks>,
    check_results: CheckResults,
    /// An observer ran a check (coalesced).
    checks_changed: mpsc::Receiver<()>,
    checks_changed_tx: mpsc::Sender<()>,
    /// The checks with a `check_restart`, watched after each run.
    restarters: Vec<WatchedCheck>,
    /// Where the restarters' monotonic clock starts.
    clock_base: tokio::time::Instant,
}

/// A check whose `check_restart` may restart its task (Nomad's check watcher).
struct WatchedCheck {
    id: String,
    name: String,
    target: RestartTarget,
    restarter: model::checks::Restarter,
    /// When its task last started: results from before do not count.
    started: tokio::time::Instant,
}

/// Where the allocation's CSI volumes are (Nomad's csi_hook prerun and postrun).
enum VolumePhase {
    /// Mounted (or none wanted): tasks may start.
    Ready,
    /// Being claimed and mounted; no task starts until this ends. The progress says what was
    /// claimed so far, should the mounting be aborted.
    Mounting(JoinHandle<(Volumes, Result<(), String>)>, hook::Progress),
    /// Every task is dead and the volumes are being unmounted and released in the background;
    /// they stay in the allocation's record until that ends.
    Releasing(JoinHandle<()>),
    /// Released.
    Released,
}

/// What ended: the mounting, or the release.
enum VolumeStep {
    Mounted((Volumes, Result<(), String>)),
    Released,
}

/// The end of the mounting step or of the release; pending for ever in any other phase.
async fn volume_step(phase: &mut VolumePhase) -> VolumeStep {
    if let VolumePhase::Releasing(join) = phase {
        let _ = join.await;
        return VolumeStep::Released;
    }
    VolumeStep::Mounted(mounting(phase).await)
}

/// The end of the mounting step; pending for ever in any other phase.
async fn mounting(phase: &mut VolumePhase) -> (Volumes, Result<(), String>) {
    match phase {
        VolumePhase::Mounting(join, _) => match join.await {
            Ok(done) => done,
            Err(e) => (Volumes::new(), Err(format!("the CSI hook failed: {e}"))),
        },
        _ => std::future::pending().await,
    }
}

impl AllocRunner {
    /// A runner for an allocation new to this node.
    pub fn spawn_new(ctx: Arc<RunnerContext>, alloc: Allocation) -> AllocRunnerHandle {
        let mut tasks = BTreeMap::new();
        if let Some((_, group)) = find_group(&alloc) {
            for task in &group.tasks {
                let mut state = TaskState {
                    state: TaskStatus::Pending,
                    ..TaskState::default()
                };
                events::push(&mut state, events::received());
                tasks.insert(
                    task.name.clone(),
                    TaskRecord {
                        state,
                        handle: None,
                    },
                );
            }
        }
        let record = AllocRecord {
            version: STATE_VERSION,
            alloc,
            client_status: ClientStatus::Pending,
            client_description: String::new(),
            tasks,
            csi_volumes: BTreeMap::new(),
            network: None,
        };
        Self::spawn(ctx, record, false)
    }

    /// A runner for an allocation recovered from the client's state: tasks with a handle are
    /// reattached, not restarted.
    pub fn spawn_recovered(ctx: Arc<RunnerContext>, record: AllocRecord) -> AllocRunnerHandle {
        Self::spawn(ctx, record, true)
    }

    fn spawn(ctx: Arc<RunnerContext>, record: AllocRecord, recovered: bool) -> AllocRunnerHandle {
        let (cmd_tx, cmd_rx) = mpsc::channel(RUNNER_QUEUE_CAPACITY);
        let (reports_tx, reports) = mpsc::channel(RUNNER_QUEUE_CAPACITY);
        let alloc_modify_index = record.alloc.alloc_modify_index;
        let dir = AllocDir::new(&ctx.alloc_root, &record.alloc.id);
        let slots = slots_of(&record);
        let status = Arc::new(Mutex::new(AllocClientUpdate {
            id: record.alloc.id.clone(),
            client_status: record.client_status.clone(),
            client_description: record.client_description.clone(),
            task_states: record
                .tasks
                .iter()
                .map(|(k, t)| (k.clone(), t.state.clone()))
                .collect(),
            ..AllocClientUpdate::default()
        }));
        let health = HealthTracker::for_alloc(
            &record.alloc,
            find_group(&record.alloc).map(|(_, g)| g),
            tokio::time::Instant::now(),
        );
        let stop_on_client_after = find_group(&record.alloc).and_then(|(_, g)| {
            g.disconnect
                .as_ref()
                .and_then(|d| d.stop_on_client_after)
                .or(g.stop_after_client_disconnect)
                .filter(|d| d.0 > 0)
                .map(|d| std::time::Duration::from_nanos(u64::try_from(d.0).unwrap_or(0)))
        });
        let (volumes, _) = watch::channel(Arc::new(record.csi_volumes));
        let network = record.network;
        let (network_spec, _) = watch::channel(
            network
                .as_ref()
                .filter(|n| n.ready())
                .and_then(|n| n.spec.clone()),
        );
        let labels = Arc::new(AllocLabels {
            job: record.alloc.job_id.clone(),
            task_group: record.alloc.task_group.clone(),
            namespace: record.alloc.namespace.clone(),
            tasks: record
                .alloc
                .allocated_resources
                .as_ref()
                .map(|r| {
                    r.tasks
                        .iter()
                        .map(|(name, t)| (name.clone(), (t.cpu.cpu_shares, t.memory.memory_mb)))
                        .collect()
                })
                .unwrap_or_default(),
            devices: record
                .alloc
                .allocated_resources
                .as_ref()
                .map(|r| {
                    r.tasks
                        .iter()
                        .filter(|(_, t)| !t.devices.is_empty())
                        .map(|(name, t)| (name.clone(), t.devices.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            disk_mb: record
                .alloc
                .allocated_resources
                .as_ref()
                .map_or(0, |r| r.shared.disk_mb),
        });
        let (alloc_tx, _) = watch::channel(Arc::new(record.alloc));
        let tasks = SharedTasks::default();
        let check_results = CheckResults::default();
        let (checks_changed_tx, checks_changed) = mpsc::channel(1);
        let runner = AllocRunner {
            ctx,
            alloc: alloc_tx,
            dir,
            slots,
            client_status: record.client_status,
            client_description: record.client_description,
            status: Arc::clone(&status),
            reports_tx,
            reports,
            cmds: cmd_rx,
            killing: false,
            destroying: false,
            health,
            deployment_status: None,
            tasks: Arc::clone(&tasks),
            volumes,
            volume_phase: VolumePhase::Ready,
            network,
            network_spec,
            checks: None,
            check_results: Arc::clone(&check_results),
            checks_changed,
            checks_changed_tx,
            restarters: Vec::new(),
            clock_base: tokio::time::Instant::now(),
        };
        let join = tokio::spawn(runner.run(recovered));
        AllocRunnerHandle {
            cmds: cmd_tx,
            status,
            alloc_modify_index,
            join,
            tasks,
            stop_on_client_after,
            stopped_disconnected: false,
            unknown_answered: 0,
            labels,
            checks: check_results,
        }
    }

    fn alloc_id(&self) -> String {
        self.alloc.borrow().id.clone()
    }

    async fn run(mut self, recovered: bool) {
        if let Err(e) = self.dir.build() {
            tracing::warn!(alloc_id = %self.alloc_id(), error = %e, "cannot build the alloc dir");
        }
        if recovered {
            self.verify_network().await;
            self.reattach_tasks();
        }
        self.begin_volumes();
        self.start_checks();
        if self.slots.is_empty() {
            self.client_status = ClientStatus::Failed;
            self.client_description = "the allocation has no job or task group".into();
        }
        self.advance().await;
        let mut shutdown = self.ctx.shutdown.clone();
        loop {
            if self.destroying && self.settled() {
                self.cleanup().await;
                return;
            }
            let health_check = self.health.as_ref().and_then(HealthTracker::next_check);
            tokio::select! {
                Some(report) = self.reports.recv() => self.on_report(report).await,
                () = sleep_until_some(health_check) => self.advance().await,
                Some(()) = self.checks_changed.recv() => self.on_checks().await,
                step = volume_step(&mut self.volume_phase) => match step {
                    VolumeStep::Mounted(done) => self.on_volumes(done).await,
                    VolumeStep::Released => self.on_released().await,
                },
                // Once destroying, the client has let go of this runner (its command channel
                // closes); the runner finishes the destroy on its own.
                cmd = self.cmds.recv(), if !self.destroying => match cmd {
                    Some(AllocCommand::Update(alloc)) => self.on_update(*alloc).await,
                    Some(AllocCommand::Destroy) => {
                        self.on_destroy("allocation removed by the servers; destroying").await
                    }
                    Some(AllocCommand::GarbageCollect) => {
                        self.on_destroy("garbage collecting the allocation").await
                    }
                    Some(AllocCommand::StopDisconnected(after)) => {
                        if !self.killing {
                            tracing::warn!(alloc_id = %self.alloc_id(), ?after,
                                "no server reached for stop_on_client_after; stopping the allocation");
                            self.kill_all(Some(events::killing_disconnected(after)));
                            self.advance().await;
                        }
                    }
                    Some(AllocCommand::RestartAll(reply)) => self.restart_all(reply).await,
                    None => return self.detach().await,
                },
                () = shutting_down(&mut shutdown) => return self.detach().await,
            }
        }
    }

    /// Starts claiming and mounting the group's CSI volumes, unless it has none or nothing
    /// will run any more.
    fn begin_volumes(&mut self) {
        let alloc = self.alloc.borrow().clone();
        let all_dead = !self.slots.is_empty() && self.slots.values().all(Slot::is_dead);
        if !hook::wants_volumes(&alloc) || alloc.server_terminal() || all_dead {
            return;
        }
        let restored = (**self.volumes.borrow()).clone();
        let ctx = Arc::clone(&self.ctx);
        let progress = hook::Progress::default();
        self.volume_phase = VolumePhase::Mounting(
            tokio::spawn(hook::prerun(ctx, alloc, restored, Arc::clone(&progress))),
            progress,
        );
    }

    /// The volumes are claimed and mounted, or the hook failed: then no task starts and each
    /// records why, failing the allocation (the claims taken are released as usual).
    async fn on_volumes(&mut self, (volumes, result): (Volumes, Result<(), String>)) {
        self.volume_phase = VolumePhase::Ready;
        self.volumes.send_replace(Arc::new(volumes));
        if let Err(msg) = result {
            let msg = format!("pre-run hook \"csi_hook\" failed: {msg}");
            tracing::warn!(alloc_id = %self.alloc_id(), "{msg}");
            for slot in self.slots.values_mut().filter(|s| s.can_start()) {
                events::push(&mut slot.record.state, events::setup_failure(&msg));
                events::transition(&mut slot.record.state, TaskStatus::Dead);
            }
        }
        self.persist().await;
        self.advance().await;
    }

    /// Once every task is dead: unmount and release the volumes in the background.
    async fn release_volumes(&mut self) {
        if self.killing {
            if let VolumePhase::Mounting(join, progress) = &self.volume_phase {
                // Stopped before its volumes were ready: nothing will use them. What it had
                // claimed (or started mounting) so far is released like the rest.
                join.abort();
                let mut volumes = (**self.volumes.borrow()).clone();
                volumes.extend(progress.lock().unwrap_or_else(|p| p.into_inner()).clone());
                self.volumes.send_replace(Arc::new(volumes));
                self.volume_phase = VolumePhase::Ready;
            }
        }
        let all_dead = self.slots.values().all(Slot::is_dead);
        if !all_dead || !matches!(self.volume_phase, VolumePhase::Ready) {
            return;
        }
        let volumes = (**self.volumes.borrow()).clone();
        if volumes.is_empty() {
            return;
        }
        let join = hook::spawn_release(Arc::clone(&self.ctx), self.alloc_id(), volumes);
        self.volume_phase = VolumePhase::Releasing(join);
        self.persist().await;
    }

    /// The background release ended: the volumes leave the allocation's record.
    async fn on_released(&mut self) {
        self.volumes.send_replace(Arc::default());
        self.volume_phase = VolumePhase::Released;
        self.persist().await;
    }

    /// Spawns a runner for every task that has a driver handle; it reattaches.
    fn reattach_tasks(&mut self) {
        let names: Vec<String> = self
            .slots
            .iter()
            .filter(|(_, s)| s.record.handle.is_some() && !s.is_dead())
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            let handle = self.slots[&name].record.handle.clone();
            self.spawn_task(&name, handle);
        }
    }

    fn spawn_task(&mut self, name: &str, recover: Option<drivers::TaskHandle>) {
        let Some(slot) = self.slots.get_mut(name) else {
            return;
        };
        slot.runner = Some(TaskRunner::spawn(
            Arc::clone(&self.ctx),
            name.to_string(),
            AllocView {
                alloc: self.alloc.subscribe(),
                volumes: self.volumes.subscribe(),
                network: self.network_spec.subscribe(),
            },
            self.dir.clone(),
            slot.record.clone(),
            self.reports_tx.clone(),
            recover,
        ));
    }

    async fn on_report(&mut self, report: TaskReport) {
        let mut started = false;
        if let Some(slot) = self.slots.get_mut(&report.name) {
            started = *slot.state() != TaskStatus::Running
                && report.record.state.state == TaskStatus::Running;
            slot.record = report.record;
            if report.released {
                slot.runner = None;
            }
        }
        if started {
            self.task_started(&report.name);
        }
        self.advance().await;
    }

    /// `alloc restart -all-tasks`: running tasks stop and run again, dead ones run again, in
    /// lifecycle order: when a prestart task that had finished runs again, the main and
    /// poststart tasks wait for it, as on the first start. Poststop tasks are left to the
    /// allocation's end. Refused once the allocation is stopping or has ended (Nomad: "restart
    /// of an alloc that should not run").
    async fn restart_all(&mut self, reply: oneshot::Sender<Result<(), AllocActionError>>) {
        let ended = matches!(
            self.client_status,
            ClientStatus::Complete | ClientStatus::Failed | ClientStatus::Lost
        );
        if self.alloc.borrow().server_terminal() || self.killing || self.destroying || ended {
            let _ = reply.send(Err(AllocActionError::ShouldNotRun(self.alloc_id())));
            return;
        }
        let rerun_prestart = self
            .slots
            .values()
            .any(|s| s.role == (Role::Prestart { sidecar: false }) && s.is_dead());
        let mut stopping = Vec::new();
        for (name, slot) in &mut self.slots {
            if slot.role == Role::Poststop {
                continue;
            }
            if slot.is_dead() {
                // Its runner has ended: a new one starts it when the lifecycle allows.
                slot.runner = None;
                slot.record.state.failed = false;
                events::push(
                    &mut slot.record.state,
                    events::restart_signaled(events::REASON_USER_RESTART),
                );
                events::transition(&mut slot.record.state, TaskStatus::Pending);
                continue;
            }
            let Some(runner) = slot
                .runner
                .as_ref()
                .filter(|_| slot.record.handle.is_some())
            else {
                // Not started yet, or between restarts: it starts on its own.
                continue;
            };
            let hold = rerun_prestart && matches!(slot.role, Role::Main | Role::Poststart);
            let (tx, rx) = oneshot::channel();
            if runner
                .cmds
                .try_send(TaskCommand::Restart { reply: tx, hold })
                .is_ok()
            {
                stopping.push((name.clone(), rx));
            }
        }
        tokio::spawn(async move {
            let mut result = Ok(());
            for (name, rx) in stopping {
                match tokio::time::timeout(crate::limits::USER_ACTION_TIMEOUT, rx).await {
                    // Stopped meanwhile on its own: nothing to restart, as Nomad ignores it.
                    Ok(Ok(Ok(())) | Ok(Err(AllocActionError::NotRunning(_))) | Err(_)) => {}
                    Ok(Ok(Err(e))) => result = Err(e),
                    Err(_) => result = Err(AllocActionError::Timeout(name)),
                }
            }
            let _ = reply.send(result);
        });
        self.advance().await;
    }

    /// Starts observing the nomad services' checks (Nomad's checks hook, at the allocation's
    /// pre-run), unless nothing will run.
    fn start_checks(&mut self) {
        let alloc = self.alloc.borrow().clone();
        let all_dead = self.slots.values().all(Slot::is_dead);
        if alloc.server_terminal() || all_dead || self.checks.is_some() {
            return;
        }
        let specs = crate::checks::specs_of(&alloc, &self.node_addr());
        if specs.is_empty() {
            return;
        }
        let now = self.clock_ns();
        self.restarters = specs
            .iter()
            .filter_map(|spec| {
                let restarter =
                    model::checks::Restarter::new(&spec.check, spec.restart.as_ref(), now)?;
                Some(WatchedCheck {
                    id: spec.id.clone(),
                    name: spec.check.name.clone(),
                    target: spec.restart_target.clone(),
                    restarter,
                    started: tokio::time::Instant::now(),
                })
            })
            .collect();
        self.checks = Some(Checks::start(
            specs,
            Arc::clone(&self.check_results),
            Arc::clone(&self.tasks),
            self.ctx.drivers.clone(),
            self.checks_changed_tx.clone(),
        ));
    }

    /// The node's address, as services and their checks use it.
    fn node_addr(&self) -> String {
        self.ctx
            .node
            .get()
            .attributes
            .get("unique.network.ip-address")
            .cloned()
            .unwrap_or_default()
    }

    /// Nanoseconds on the runner's monotonic clock.
    fn clock_ns(&self) -> i64 {
        i64::try_from(self.clock_base.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }

    /// A task began running: its checks' `check_restart` grace starts again.
    fn task_started(&mut self, task: &str) {
        let now = self.clock_ns();
        for w in &mut self.restarters {
            let ours = match &w.target {
                RestartTarget::Task(t) => t == task,
                RestartTarget::Group => true,
            };
            if ours {
                w.restarter.task_started(now);
                w.started = tokio::time::Instant::now();
            }
        }
    }

    /// A check ran: restart what an unhealthy check asks to, then move health along.
    async fn on_checks(&mut self) {
        if self.killing || self.checks.is_none() {
            return;
        }
        let now = self.clock_ns();
        let statuses: BTreeMap<String, String> = self
            .check_results
            .lock()
            .expect("check results lock")
            .iter()
            .map(|(id, r)| (id.clone(), r.status.clone()))
            .collect();
        let mut restart: Vec<(String, String)> = Vec::new();
        let Some(checks) = self.checks.as_ref() else {
            return;
        };
        for w in &mut self.restarters {
            // Only a result from since the task (re)started counts.
            let Some(status) = statuses
                .get(&w.id)
                .filter(|_| checks.ran_since(&w.id, w.started))
            else {
                continue;
            };
            if !w.restarter.apply(status, now) {
                continue;
            }
            let reason = format!("healthcheck: check {:?} unhealthy", w.name);
            let running = |t: &str| {
                self.slots
                    .get(t)
                    .is_some_and(|s| *s.state() == TaskStatus::Running)
            };
            match &w.target {
                RestartTarget::Task(t) if running(t) => restart.push((t.clone(), reason)),
                RestartTarget::Task(_) => {}
                RestartTarget::Group => restart.extend(
                    self.slots
                        .iter()
                        .filter(|(_, s)| *s.state() == TaskStatus::Running)
                        .map(|(n, _)| (n.clone(), reason.clone())),
                ),
            }
        }
        restart.sort();
        restart.dedup_by(|a, b| a.0 == b.0);
        for (task, reason) in restart {
            tracing::info!(alloc_id = %self.alloc_id(), task = %task, %reason, "check_restart: restarting the task");
            if let Some(runner) = self.slots.get(&task).and_then(|s| s.runner.as_ref()) {
                if runner
                    .cmds
                    .try_send(TaskCommand::CheckRestart { reason })
                    .is_err()
                {
                    tracing::warn!(task = %task, "task runner did not take the check restart");
                }
            }
        }
        self.advance().await;
    }

    /// An in-place update changed the checks (added, removed, redefined, another
    /// `check_restart`): they start again from the new job (Nomad's checks hook `Update`).
    fn update_checks(&mut self) {
        let alloc = self.alloc.borrow().clone();
        let wanted: Vec<(String, Option<model::service::CheckRestart>)> =
            crate::checks::specs_of(&alloc, &self.node_addr())
                .into_iter()
                .map(|s| (s.id, s.restart))
                .collect();
        let current = self
            .checks
            .as_ref()
            .map(|c| c.fingerprint.clone())
            .unwrap_or_default();
        if wanted != current {
            self.stop_checks();
            self.start_checks();
        }
    }

    /// The allocation is stopping: its checks stop and their results go (Nomad's pre-kill).
    fn stop_checks(&mut self) {
        if let Some(mut checks) = self.checks.take() {
            checks.stop();
        }
        self.restarters.clear();
    }

    async fn on_update(&mut self, alloc: Allocation) {
        let server_terminal = alloc.server_terminal();
        let new_deployment = !alloc.deployment_id.is_empty()
            && self.health.as_ref().map(HealthTracker::deployment_id)
                != Some(alloc.deployment_id.as_str())
            && alloc
                .deployment_status
                .as_ref()
                .is_none_or(|d| d.healthy.is_none());
        if new_deployment {
            let group = find_group(&alloc).map(|(_, g)| g);
            self.health = HealthTracker::for_alloc(&alloc, group, tokio::time::Instant::now());
            self.deployment_status = None;
        }
        self.alloc.send_replace(Arc::new(alloc));
        self.persist().await;
        if !server_terminal && !self.killing {
            self.update_checks();
        }
        if server_terminal && !self.killing {
            tracing::info!(alloc_id = %self.alloc_id(), "allocation stopped by the servers");
            self.kill_all(None);
        }
        self.advance().await;
    }

    async fn on_destroy(&mut self, why: &str) {
        tracing::info!(alloc_id = %self.alloc_id(), "{why}");
        self.destroying = true;
        self.kill_all(None);
        self.advance().await;
    }

    /// Every task is dead or its runner has ended.
    fn settled(&self) -> bool {
        // A release under way keeps the record (and its volumes) until it ended.
        !matches!(self.volume_phase, VolumePhase::Releasing(_))
            && self
                .slots
                .values()
                .all(|s| s.is_dead() || s.runner.as_ref().is_none_or(|r| r.join.is_finished()))
    }

    /// Moves the allocation forward after any change: failure handling, lifecycle starts,
    /// then persisting and publishing the new status.
    async fn advance(&mut self) {
        if !self.killing {
            self.check_failures();
        }
        if self.killing {
            self.bury_unstarted();
        } else {
            self.prepare_network().await;
            self.start_ready_tasks();
        }
        let others_dead = self
            .slots
            .values()
            .filter(|s| s.role != Role::Poststop)
            .all(Slot::is_dead);
        if others_dead && !self.destroying {
            self.start_where(|s| s.role == Role::Poststop);
        }
        self.release_volumes().await;
        self.release_network().await;
        self.publish().await;
    }

    /// Before a task starts: the group's network namespace, made or finished (after a crash
    /// mid-setup). A failure fails every task that was to start, as a failed pre-run hook.
    async fn prepare_network(&mut self) {
        let waiting = self.slots.values().any(Slot::can_start);
        if !waiting || self.network.as_ref().is_some_and(NetworkRecord::ready) {
            return;
        }
        if let Err(msg) = self.ensure_network().await {
            let msg = format!("pre-run hook \"network\" failed: {msg}");
            tracing::warn!(alloc_id = %self.alloc_id(), "{msg}");
            for slot in self.slots.values_mut().filter(|s| s.can_start()) {
                events::push(&mut slot.record.state, events::setup_failure(&msg));
                events::transition(&mut slot.record.state, TaskStatus::Dead);
            }
            self.persist().await;
        }
    }

    /// Each step is recorded before it is taken, so a crash at any point leaves a record that
    /// [`network::teardown`] (or the next call here) finishes from.
    async fn ensure_network(&mut self) -> Result<(), String> {
        let alloc = self.alloc.borrow().clone();
        let mut rec = match self.network.clone() {
            Some(rec) => rec,
            // Tasks that run without one (started before this client made group networks)
            // keep the host's network: a namespace now would take their ports away.
            None if self
                .slots
                .values()
                .any(|s| s.record.handle.is_some() || *s.state() == TaskStatus::Running) =>
            {
                return Ok(())
            }
            None => match network::plan(&self.ctx, &alloc)? {
                Some(rec) => rec,
                None => return Ok(()),
            },
        };
        if rec.spec.is_none() {
            self.network = Some(rec.clone());
            self.persist().await;
            let spec = network::create_namespace(&self.ctx, &alloc.id, &rec).await?;
            rec.spec = Some(spec);
        }
        if rec.cni_list.is_some() {
            // An ADD that a crash may have cut short: undone before it runs again.
            if let Err(e) = network::teardown_cni(&self.ctx, &alloc, &rec).await {
                tracing::warn!(alloc_id = %alloc.id, error = %e, "undoing an interrupted CNI ADD");
            }
        }
        let list = network::cni_list(&self.ctx, &rec.mode)?;
        rec.cni_list = Some(list.to_json());
        rec.cni_result = None;
        rec.cni_runtime = None;
        rec.cni_runtime = Some(network::runtime(&alloc, &rec));
        self.network = Some(rec.clone());
        self.persist().await;
        let (result, status) = network::configure(&self.ctx, &alloc, &rec, &list).await?;
        rec.cni_result = Some(result);
        rec.status = Some(status);
        self.network_spec.send_replace(rec.spec.clone());
        self.network = Some(rec);
        self.persist().await;
        Ok(())
    }

    /// After a client restart: a namespace the record calls ready must still be there (a host
    /// reboot empties /var/run/netns; a docker daemon restart gives the pause container a new,
    /// unconfigured one). A stale one is torn down and made again before any task reattaches or
    /// restarts, so the group's tasks never end up in different namespaces.
    async fn verify_network(&mut self) {
        let Some(rec) = self.network.clone().filter(NetworkRecord::ready) else {
            return;
        };
        let alloc = self.alloc.borrow().clone();
        if network::still_there(&self.ctx, &alloc.id, &rec).await {
            return;
        }
        tracing::warn!(alloc_id = %alloc.id, "the group's network namespace is gone or changed; making it again");
        self.network_spec.send_replace(None);
        if let Err(e) = network::teardown(&self.ctx, &alloc, &rec).await {
            tracing::warn!(alloc_id = %alloc.id, error = %e, "removing the stale network namespace");
        }
        self.network = Some(NetworkRecord {
            mode: rec.mode.clone(),
            initiator: rec.initiator.clone(),
            ..NetworkRecord::default()
        });
        self.persist().await;
        if self.slots.values().all(Slot::is_dead) || alloc.server_terminal() {
            return;
        }
        if let Err(msg) = self.ensure_network().await {
            let msg = format!("pre-run hook \"network\" failed: {msg}");
            tracing::warn!(alloc_id = %alloc.id, "{msg}");
            for slot in self.slots.values_mut().filter(|s| !s.is_dead()) {
                events::push(&mut slot.record.state, events::setup_failure(&msg));
            }
        }
    }

    /// Once every task is dead: the namespace is removed (CNI DEL first). A failure keeps the
    /// record, so the next state change, or the allocation's destroy, tries again.
    async fn release_network(&mut self) {
        let Some(rec) = self.network.clone() else {
            return;
        };
        if !self.slots.values().all(Slot::is_dead) {
            return;
        }
        self.network_spec.send_replace(None);
        let alloc = self.alloc.borrow().clone();
        match network::teardown(&self.ctx, &alloc, &rec).await {
            Ok(()) => {
                self.network = None;
                self.persist().await;
            }
            Err(e) => {
                tracing::warn!(alloc_id = %alloc.id, error = %e, "cannot remove the group's network namespace; will retry");
            }
        }
    }

    /// A failed task or a dead leader stops the others; dead main tasks stop the sidecars.
    fn check_failures(&mut self) {
        if self.alloc.borrow().server_terminal() {
            return self.kill_all(None);
        }
        let failed = self
            .slots
            .iter()
            .find(|(_, s)| s.role != Role::Poststop && s.is_dead() && s.record.state.failed)
            .map(|(n, _)| n.clone());
        if let Some(name) = failed {
            return self.kill_all(Some(events::sibling_failed(&name)));
        }
        if self.slots.values().any(|s| s.leader && s.is_dead()) {
            return self.kill_all(Some(events::leader_dead()));
        }
        let mains: Vec<&Slot> = self
            .slots
            .values()
            .filter(|s| s.role == Role::Main)
            .collect();
        if !mains.is_empty() && mains.iter().all(|s| s.is_dead()) {
            self.kill_all(None);
        }
    }

    /// Starts what the lifecycle allows now (nothing while volumes are being mounted).
    fn start_ready_tasks(&mut self) {
        if matches!(self.volume_phase, VolumePhase::Mounting(..)) {
            return;
        }
        self.start_where(|s| matches!(s.role, Role::Prestart { .. }));
        let prestart_done = self.slots.values().all(|s| match s.role {
            Role::Prestart { sidecar: false } => s.is_dead() && !s.record.state.failed,
            Role::Prestart { sidecar: true } => *s.state() == TaskStatus::Running,
            _ => true,
        });
        if !prestart_done {
            return;
        }
        self.start_where(|s| s.role == Role::Main);
        let main_running = self
            .slots
            .values()
            .any(|s| s.role == Role::Main && *s.state() == TaskStatus::Running);
        if main_running {
            self.start_where(|s| s.role == Role::Poststart);
        }
    }

    fn start_where(&mut self, pick: impl Fn(&Slot) -> bool) {
        let names: Vec<String> = self
            .slots
            .iter()
            .filter(|(_, s)| s.can_start() && pick(s))
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            self.spawn_task(&name, None);
        }
    }

    /// Tells every running task (but poststop tasks) to stop; `event` says why.
    fn kill_all(&mut self, event: Option<TaskEvent>) {
        let event = event.map(Box::new);
        self.killing = true;
        self.stop_checks();
        for (name, slot) in &self.slots {
            if slot.is_dead() || (slot.role == Role::Poststop && !self.destroying) {
                continue;
            }
            if let Some(runner) = &slot.runner {
                let cmd = TaskCommand::Kill {
                    event: event.clone(),
                };
                if runner.cmds.try_send(cmd).is_err() {
                    tracing::warn!(task = %name, "task runner did not take the kill; it is ending");
                }
            }
        }
    }

    /// Tasks that never started are dead once the allocation is being stopped.
    fn bury_unstarted(&mut self) {
        let destroying = self.destroying;
        for slot in self.slots.values_mut() {
            let skip = slot.role == Role::Poststop && !destroying;
            if slot.can_start() && !skip {
                events::transition(&mut slot.record.state, TaskStatus::Dead);
            }
        }
    }

    /// Feeds the task states to the health tracker; records its decision once made.
    fn observe_health(&mut self) {
        let Some(health) = self.health.as_mut() else {
            return;
        };
        let views = self.slots.values().map(|s| TaskView {
            must_run: matches!(s.role, Role::Main | Role::Prestart { sidecar: true }),
            state: s.state(),
            failed: s.record.state.failed,
        });
        let checks_ok = self.checks.as_ref().is_some_and(Checks::all_ran)
            && crate::checks::all_passing(&self.check_results.lock().expect("check results lock"));
        health.observe(views, checks_ok, tokio::time::Instant::now());
        if let (Some(healthy), None) = (health.decided(), &self.deployment_status) {
            let canary = self
                .alloc
                .borrow()
                .deployment_status
                .as_ref()
                .is_some_and(|d| d.canary);
            self.deployment_status = Some(AllocDeploymentStatus {
                healthy: Some(healthy),
                timestamp: Some(crate::time::now_rfc3339()),
                canary,
                modify_index: 0,
            });
        }
    }

    /// Derives the client status, persists the record, and queues an update when it changed.
    async fn publish(&mut self) {
        self.share_tasks();
        self.observe_health();
        if !self.slots.is_empty() {
            let (status, description) = client_status(self.slots.values().map(|s| &s.record.state));
            self.client_status = status;
            self.client_description = description.into();
        }
        let update = AllocClientUpdate {
            id: self.alloc_id(),
            client_status: self.client_status.clone(),
            client_description: self.client_description.clone(),
            task_states: self
                .slots
                .iter()
                .map(|(n, s)| (n.clone(), s.record.state.clone()))
                .collect(),
            deployment_status: self.deployment_status.clone(),
            network_status: self.network.as_ref().and_then(|n| n.status.clone()),
            modify_time: now_unix_ns(),
        };
        let changed = {
            let mut last = self.status.lock().expect("status lock");
            let changed = last.client_status != update.client_status
                || last.client_description != update.client_description
                || last.task_states != update.task_states
                || last.deployment_status != update.deployment_status
                || last.network_status != update.network_status;
            if changed {
                *last = update.clone();
            }
            changed
        };
        if !changed {
            return;
        }
        self.persist().await;
        let _ = self.ctx.updates.send(update).await;
    }

    /// Publishes how to reach each task for the client's user actions.
    fn share_tasks(&self) {
        let tasks = self
            .slots
            .iter()
            .map(|(name, slot)| {
                let access = TaskAccess {
                    cmds: slot.runner.as_ref().map(|r| r.cmds.clone()),
                    handle: slot.record.handle.clone(),
                };
                (name.clone(), access)
            })
            .collect();
        *self.tasks.lock().expect("tasks lock") = tasks;
    }

    fn record(&self) -> AllocRecord {
        AllocRecord {
            version: STATE_VERSION,
            alloc: (**self.alloc.borrow()).clone(),
            client_status: self.client_status.clone(),
            client_description: self.client_description.clone(),
            tasks: self
                .slots
                .iter()
                .map(|(n, s)| (n.clone(), s.record.clone()))
                .collect(),
            csi_volumes: (**self.volumes.borrow()).clone(),
            network: self.network.clone(),
        }
    }

    async fn persist(&self) {
        let record = self.record();
        let db = self.ctx.state.clone();
        let result = tokio::task::spawn_blocking(move || db.put(&record)).await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!(alloc_id = %self.alloc_id(), error = %e, "cannot persist allocation state")
            }
            Err(e) => {
                tracing::error!(alloc_id = %self.alloc_id(), error = %e, "persisting allocation state panicked")
            }
        }
    }

    /// Client shutdown: task runners end without touching their tasks; the state is saved.
    async fn detach(mut self) {
        let mut joins = Vec::new();
        for slot in self.slots.values_mut() {
            if let Some(runner) = slot.runner.take() {
                let _ = runner.cmds.try_send(TaskCommand::Detach);
                joins.push(runner.join);
            }
        }
        let all = async {
            for j in joins.iter_mut() {
                let _ = j.await;
            }
        };
        if tokio::time::timeout(SHUTDOWN_GRACE, all).await.is_err() {
            joins.iter().for_each(JoinHandle::abort);
        }
        // Changes the runners made while detaching; the rest is on disk already. (A record
        // is written only when something changed, so a new client on the same data dir is
        // not overwritten by this one's leftovers.)
        let mut changed = false;
        while let Ok(report) = self.reports.try_recv() {
            if let Some(slot) = self.slots.get_mut(&report.name) {
                slot.record = report.record;
                changed = true;
            }
        }
        if changed {
            self.persist().await;
        }
    }

    /// The allocation is gone from the servers and its tasks are dead: remove every trace.
    async fn cleanup(self) {
        if let Some(rec) = &self.network {
            let alloc = self.alloc.borrow().clone();
            if let Err(e) = network::teardown(&self.ctx, &alloc, rec).await {
                // The record is all that says what to remove: it stays, and the next start of
                // the client recovers the allocation and tries again.
                tracing::warn!(alloc_id = %alloc.id, error = %e,
                    "cannot remove the group's network namespace; keeping the allocation's record to retry");
                self.persist().await;
                return;
            }
        }
        let id = self.alloc_id();
        let dir = self.dir.clone();
        let db = self.ctx.state.clone();
        let result = tokio::task::spawn_blocking(move || {
            dir.destroy()?;
            db.delete(&id)
        })
        .await;
        if let Ok(Err(e)) = result {
            tracing::warn!(alloc_id = %self.alloc_id(), error = %e, "cannot remove the allocation's files");
        }
    }
}

/// Sleeps until `at`; forever when `None`.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn slots_of(record: &AllocRecord) -> BTreeMap<String, Slot> {
    let Some((_, group)) = find_group(&record.alloc) else {
        return BTreeMap::new();
    };
    group
        .tasks
        .iter()
        .map(|task| {
            let record = record
                .tasks
                .get(&task.name)
                .cloned()
                .unwrap_or_else(|| TaskRecord {
                    state: TaskState {
                        state: TaskStatus::Pending,
                        ..TaskState::default()
                    },
                    handle: None,
                });
            let slot = Slot {
                role: Role::of(task),
                leader: task.leader,
                record,
                runner: None,
            };
            (task.name.clone(), slot)
        })
        .collect()
}

/// Nomad's `getClientStatus`: any failed task fails the allocation; otherwise running beats
/// pending beats complete.
pub(crate) fn client_status<'a>(
    states: impl Iterator<Item = &'a TaskState>,
) -> (ClientStatus, &'static str) {
    let (mut pending, mut running, mut dead, mut failed) = (false, false, false, false);
    for s in states {
        match s.state {
            TaskStatus::Running => running = true,
            TaskStatus::Dead if s.failed => failed = true,
            TaskStatus::Dead => dead = true,
            _ => pending = true,
        }
    }
    if failed {
        (ClientStatus::Failed, "Failed tasks")
    } else if running {
        (ClientStatus::Running, "Tasks are running")
    } else if pending {
        (ClientStatus::Pending, "No tasks have started")
    } else if dead {
        (ClientStatus::Complete, "All tasks have completed")
    } else {
        (ClientStatus::Pending, "No tasks have started")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(state: &str, failed: bool) -> TaskState {
        TaskState {
            state: TaskStatus::from_text(state),
            failed,
            ..TaskState::default()
        }
    }

    #[test]
    fn client_status_follows_nomad() {
        let rows: [(&[TaskState], &str); 5] = [
            (&[st("pending", false)], "pending"),
            (&[st("running", false), st("pending", false)], "running"),
            (&[st("dead", false), st("dead", false)], "complete"),
            (&[st("dead", true), st("running", false)], "failed"),
            (&[st("dead", false), st("pending", false)], "pending"),
        ];
        for (states, want) in rows {
            assert_eq!(client_status(states.iter()).0, want, "{states:?}");
        }
    }
}
