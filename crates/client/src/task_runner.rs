//! One task's life on this node (Nomad's `TaskRunner`): build its directory and environment,
//! start it through its driver, wait for it, apply the restart policy, and stop it with its
//! `kill_timeout` and `kill_signal` when told.
//!
//! A task runner owns its [`TaskRecord`] and sends a copy to its alloc runner after every
//! change; the alloc runner persists it. On [`TaskCommand::Detach`] (client shutdown), or when
//! its alloc runner is gone, it returns without touching the task: the task keeps running and
//! the next client reattaches to it from the persisted handle.

use crate::actions::AllocActionError;
use crate::allocdir::AllocDir;
use crate::context::{find_task, RunnerContext};
use crate::csi::supervisor::{self, PluginSetup, PluginSupervisor, SupervisorEvent};
use crate::events;
use crate::limits::{KILL_TIMEOUT_MAX, RUNNER_QUEUE_CAPACITY, TEMPLATE_SCRIPT_TIMEOUT_DEFAULT};
use crate::restart::{Decision, RestartTracker};
use crate::rng::Rng;
use crate::state_db::TaskRecord;
use crate::task_hooks;
use crate::task_hooks::watch::{TemplateChange, TemplateWatch};
use crate::taskenv::{EnvInputs, TaskEnv, TaskPaths};
use drivers::{
    Driver, DriverError, ExitResult, FsIsolation, TaskConfig, TaskHandle, TaskResources,
};
use model::alloc::{Allocation, TaskEvent, TaskStatus};
use model::Task;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// What an alloc runner tells a task runner.
#[derive(Debug)]
pub(crate) enum TaskCommand {
    /// Stop the task and end; `event` (why: a sibling failed, the leader died) is recorded first.
    Kill { event: Option<Box<TaskEvent>> },
    /// End without touching the task (client shutdown).
    Detach,
    /// Send a signal to the running task (`alloc signal`).
    Signal {
        signal: String,
        reply: oneshot::Sender<Result<(), AllocActionError>>,
    },
    /// Stop the running task and start it again at once (`alloc restart`); the restart policy
    /// does not count it. The reply comes once the old process has stopped. `hold`: instead of
    /// starting it again, end the runner with the task pending (reported `released`), for the
    /// alloc runner to start again in lifecycle order (`alloc restart -all-tasks`).
    Restart {
        reply: oneshot::Sender<Result<(), AllocActionError>>,
        hold: bool,
    },
    /// A check with `check_restart` stayed unhealthy: stop the task and let the restart policy
    /// decide, counting it as a failure (Nomad's check watcher). `reason` names the check.
    CheckRestart { reason: String },
}

impl TaskCommand {
    /// Answers a signal or restart that arrived while no process runs; other commands are
    /// handed back.
    fn refuse_if_action(self, task: &str) -> Option<TaskCommand> {
        let not_running = || Err(AllocActionError::NotRunning(task.to_string()));
        match self {
            TaskCommand::Signal { reply, .. } | TaskCommand::Restart { reply, .. } => {
                let _ = reply.send(not_running());
                None
            }
            // The check's task is not running: nothing to restart.
            TaskCommand::CheckRestart { .. } => None,
            other => Some(other),
        }
    }
}

/// A task runner's state after a change.
#[derive(Debug)]
pub(crate) struct TaskReport {
    pub name: String,
    pub record: TaskRecord,
    /// The runner ended with the task not dead (a held restart): the alloc runner starts a new
    /// one when the lifecycle allows.
    pub released: bool,
}

/// What a task runner follows of its allocation: the newest copy from the servers, and its
/// mounted CSI volumes.
pub(crate) struct AllocView {
    pub alloc: watch::Receiver<Arc<Allocation>>,
    pub volumes: watch::Receiver<Arc<crate::csi::hook::Volumes>>,
    /// The group's network namespace, once made; `None`: the host's network.
    pub network: watch::Receiver<Option<drivers::NetworkIsolation>>,
}

pub(crate) struct TaskRunnerHandle {
    pub cmds: mpsc::Sender<TaskCommand>,
    pub join: JoinHandle<()>,
}

pub(crate) struct TaskRunner {
    ctx: Arc<RunnerContext>,
    name: String,
    /// The newest allocation from the servers (restarts use the newest job and resources).
    alloc: watch::Receiver<Arc<Allocation>>,
    /// The allocation's mounted CSI volumes, for the task's `volume_mount`s.
    volumes: watch::Receiver<Arc<crate::csi::hook::Volumes>>,
    /// The group's network namespace the task joins.
    network: watch::Receiver<Option<drivers::NetworkIsolation>>,
    /// The task's `secrets/api.sock`, served from before the task first starts until the runner
    /// ends.
    api_socket: Option<crate::task_api::ApiSocket>,
    dir: AllocDir,
    record: TaskRecord,
    tracker: RestartTracker,
    cmds: mpsc::Receiver<TaskCommand>,
    reports: mpsc::Sender<TaskReport>,
    rng: Rng,
    /// The task directory was built and "Task Setup" recorded.
    set_up: bool,
    /// The prestart hooks (dispatch payload, artifacts, templates) succeeded once; restarts
    /// do not run them again, as Nomad's hooks mark themselves done.
    prestart_done: bool,
    /// The variables of `env = true` templates, added to the task's environment.
    hook_env: BTreeMap<String, String>,
    /// `NOMAD_TOKEN` (and `NOMAD_TOKEN_<name>`) of identities with `env = true`.
    identity_env: BTreeMap<String, String>,
    /// The servers' API through the default identity, for templates (`nomadVar`, ...).
    nomad_api: Option<Arc<task_hooks::nomad_api::NomadApi>>,
    /// When identities with a `ttl` are signed again (half their life).
    identity_renew_at: Option<tokio::time::Instant>,
    /// A CSI plugin task's supervisor while its process runs (probes, registration).
    supervisor: Option<PluginSupervisor>,
    /// The task's templates, rendered again while it runs (`change_mode`); `None` without
    /// templates.
    templates: Option<TemplateWatch>,
}

/// Where the runner goes next.
enum Step {
    Start,
    Wait {
        driver: Arc<dyn Driver>,
        task_id: String,
    },
    Decide(Decision),
    Done,
}

/// How waiting on a running task ended.
enum WaitEnd {
    Exited(ExitResult),
    Kill(Option<Box<TaskEvent>>),
    Detach,
    Signal(String, oneshot::Sender<Result<(), AllocActionError>>),
    Restart(oneshot::Sender<Result<(), AllocActionError>>, bool),
    CheckRestart(String),
    IdentityRenew,
    Plugin(SupervisorEvent),
    Template(TemplateChange),
}

impl TaskRunner {
    /// Spawns the runner. `recover`: reattach to this handle's task instead of starting one.
    pub fn spawn(
        ctx: Arc<RunnerContext>,
        name: String,
        alloc: AllocView,
        dir: AllocDir,
        record: TaskRecord,
        reports: mpsc::Sender<TaskReport>,
        recover: Option<TaskHandle>,
    ) -> TaskRunnerHandle {
        let (cmd_tx, cmd_rx) = mpsc::channel(RUNNER_QUEUE_CAPACITY);
        let tracker = {
            let a = alloc.alloc.borrow();
            let job_type = a.job.as_deref().map(|j| j.kind()).unwrap_or_default();
            let task = find_task(&a, &name).map(|(_, _, t)| t);
            RestartTracker::new(
                task.and_then(|t| t.restart_policy.as_ref()),
                &job_type,
                task.and_then(|t| t.lifecycle.as_ref()),
            )
        };
        let runner = TaskRunner {
            ctx,
            set_up: recover.is_some(),
            prestart_done: false,
            hook_env: BTreeMap::new(),
            identity_env: BTreeMap::new(),
            nomad_api: None,
            identity_renew_at: None,
            supervisor: None,
            templates: None,
            name,
            alloc: alloc.alloc,
            volumes: alloc.volumes,
            network: alloc.network,
            api_socket: None,
            dir,
            record,
            tracker,
            cmds: cmd_rx,
            reports,
            rng: Rng::from_entropy(),
        };
        let join = tokio::spawn(runner.run(recover));
        TaskRunnerHandle { cmds: cmd_tx, join }
    }

    async fn run(mut self, recover: Option<TaskHandle>) {
        let mut step = match recover {
            Some(handle) => self.reattach(handle).await,
            None => Step::Start,
        };
        loop {
            step = match step {
                Step::Start => self.start().await,
                Step::Wait { driver, task_id } => self.wait(driver, task_id).await,
                Step::Decide(decision) => self.apply(decision).await,
                Step::Done => return,
            };
        }
    }

    async fn report(&self) {
        let report = TaskReport {
            name: self.name.clone(),
            record: self.record.clone(),
            released: false,
        };
        // The alloc runner is gone only when the client is going away; nothing to tell then.
        let _ = self.reports.send(report).await;
    }

    /// Ends this runner with the task pending (its process stopped): the alloc runner starts a
    /// new runner for it in lifecycle order.
    async fn release(&mut self) {
        let report = TaskReport {
            name: self.name.clone(),
            record: self.record.clone(),
            released: true,
        };
        let _ = self.reports.send(report).await;
    }

    fn push(&mut self, e: TaskEvent) {
        events::push(&mut self.record.state, e);
    }

    fn driver(&self, name: &str) -> Option<Arc<dyn Driver>> {
        self.ctx.drivers.get(name).cloned()
    }

    /// A kill or detach that arrived while the runner was not listening (starting, setting
    /// up); signals and restarts that came meanwhile are answered "not running".
    fn pending_command(&mut self) -> Option<TaskCommand> {
        loop {
            match self.cmds.try_recv() {
                Ok(cmd) => {
                    if let Some(cmd) = cmd.refuse_if_action(&self.name) {
                        return Some(cmd);
                    }
                }
                Err(mpsc::error::TryRecvError::Empty) => return None,
                Err(mpsc::error::TryRecvError::Disconnected) => return Some(TaskCommand::Detach),
            }
        }
    }

    async fn reattach(&mut self, handle: TaskHandle) -> Step {
        let Some(driver) = self.driver(&handle.driver) else {
            let msg = format!(
                "cannot reattach: no driver {:?} on this node",
                handle.driver
            );
            return self.lost_task(&msg).await;
        };
        match driver.recover(&handle).await {
            Ok(()) => {
                tracing::info!(task = %self.name, task_id = %handle.task_id, pid = ?handle.pid, "reattached to task");
                self.api_socket = crate::task_api::ApiSocket::start(
                    &self.ctx.task_api,
                    &self.dir.root,
                    &self.name,
                );
                let alloc = self.alloc.borrow().clone();
                self.supervise(&alloc, &*driver);
                self.resign_reattached(&alloc, &*driver).await;
                self.watch_reattached_templates(&alloc, &*driver);
                Step::Wait {
                    driver,
                    task_id: handle.task_id,
                }
            }
            Err(e) => self.lost_task(&format!("cannot reattach: {e}")).await,
        }
    }

    /// After a client restart, a reattached task's templates are watched again from what their
    /// files hold now; one whose render differs (it changed while the client was away) acts on
    /// its `change_mode` at the first pass, as Nomad's template hook does on restore.
    /// A reattached task's identities were not kept: they are signed again (files rewritten,
    /// templates' access and `ttl` renewal back). While the servers are away it is tried again
    /// as a renewal would be.
    async fn resign_reattached(&mut self, alloc: &Allocation, driver: &dyn Driver) {
        let Some((_, _, task)) = find_task(alloc, &self.name) else {
            return;
        };
        let task = task.clone();
        let signed = match self.task_env(alloc, driver) {
            Ok((_, dir)) => self.identities(alloc, &task, &dir).await,
            Err(e) => Err(e),
        };
        if let Err(e) = signed {
            tracing::warn!(task = %self.name, error = %e, "signing the reattached task's identities failed; trying again in 10s");
            self.identity_renew_at = Some(tokio::time::Instant::now() + IDENTITY_RENEW_RETRY);
        }
    }

    fn watch_reattached_templates(&mut self, alloc: &Allocation, driver: &dyn Driver) {
        let Some((_, _, task)) = find_task(alloc, &self.name) else {
            return;
        };
        if task.templates.is_empty() {
            return;
        }
        let task = task.clone();
        match self.task_env(alloc, driver) {
            Ok((env, dir)) => {
                let rendered = task_hooks::rendered_on_disk(&task, &env, &dir);
                let rng = Rng::new(self.rng.next_u64());
                let nomad = self.nomad_api.clone();
                self.templates = TemplateWatch::new(task, env, dir, rendered, rng, nomad);
            }
            Err(e) => {
                tracing::warn!(task = %self.name, error = %e, "cannot watch the reattached task's templates");
            }
        }
    }

    /// The task of a persisted handle cannot be reached: it counts as a failed start.
    async fn lost_task(&mut self, msg: &str) -> Step {
        tracing::warn!(task = %self.name, "{msg}");
        self.record.handle = None;
        self.push(events::driver_failure(msg));
        events::transition(&mut self.record.state, TaskStatus::Pending);
        self.report().await;
        let d = self
            .tracker
            .on_start_error(true, Instant::now(), self.rng.next_u64());
        Step::Decide(d)
    }

    async fn start(&mut self) -> Step {
        match self.pending_command() {
            Some(TaskCommand::Kill { event }) => return self.killed_while_idle(event).await,
            Some(_) => return Step::Done,
            None => {}
        }
        let alloc = self.alloc.borrow().clone();
        let Some((_, _, task)) = find_task(&alloc, &self.name) else {
            return self
                .setup_failed("the task is not in the allocation's job")
                .await;
        };
        let Some(driver) = self.driver(&task.driver) else {
            let msg = format!("driver {:?} is not available on this node", task.driver);
            self.push(events::driver_failure(&msg));
            let d = self
                .tracker
                .on_start_error(false, Instant::now(), self.rng.next_u64());
            return Step::Decide(d);
        };
        if !self.set_up {
            self.push(events::setup());
            let network = group_of(&alloc).and_then(|g| g.networks.first());
            if network.is_some_and(|n| !n.hostname.is_empty()) {
                self.push(events::setup_note(
                    "network hostname is not supported yet and is not applied: the task keeps the node's host name",
                ));
            }
            let dns = network.and_then(|n| n.dns.as_ref());
            if dns.is_some() && driver.capabilities().fs_isolation == FsIsolation::None {
                self.push(events::setup_note(&format!(
                    "network dns is not applied: the {} driver has no file system isolation, so the task reads the host's /etc/resolv.conf",
                    task.driver
                )));
            }
            self.report().await;
            self.set_up = true;
        }
        if let Err(step) = self.prestart(&alloc, &*driver).await {
            return step;
        }
        let cfg = match self.task_config(&alloc, &*driver) {
            Ok(cfg) => cfg,
            Err(msg) => return self.setup_failed(&msg).await,
        };
        if self.api_socket.is_none() {
            self.api_socket =
                crate::task_api::ApiSocket::start(&self.ctx.task_api, &self.dir.root, &self.name);
        }
        let task_id = cfg.id.clone();
        match driver.start(cfg).await {
            Ok(handle) => {
                tracing::debug!(task = %self.name, %task_id, pid = ?handle.pid, "task started");
                self.record.handle = Some(handle);
                events::transition(&mut self.record.state, TaskStatus::Running);
                self.push(events::started());
                self.report().await;
                self.supervise(&alloc, &*driver);
                Step::Wait { driver, task_id }
            }
            Err(e) => self.start_failed(&e).await,
        }
    }

    async fn start_failed(&mut self, e: &DriverError) -> Step {
        tracing::warn!(task = %self.name, error = %e, "task failed to start");
        self.push(events::driver_failure(&e.to_string()));
        self.report().await;
        let d =
            self.tracker
                .on_start_error(e.is_recoverable(), Instant::now(), self.rng.next_u64());
        Step::Decide(d)
    }

    async fn setup_failed(&mut self, msg: &str) -> Step {
        tracing::warn!(task = %self.name, "task setup failed: {msg}");
        self.push(events::setup_failure(msg));
        events::transition(&mut self.record.state, TaskStatus::Dead);
        self.report().await;
        Step::Done
    }

    /// Runs the prestart hooks until they succeed once: the dispatch payload, artifacts
    /// ("Downloading Artifacts"; a failure counts against the restart policy), templates (a
    /// failure fails the task). `Err`: the step after a failure.
    async fn prestart(&mut self, alloc: &Allocation, driver: &dyn Driver) -> Result<(), Step> {
        if self.prestart_done {
            return Ok(());
        }
        // Nomad's validate hook, first: a denied user fails the task before its directory is
        // even made.
        let denied = find_task(alloc, &self.name)
            .and_then(|(_, _, task)| self.ctx.user_policy.check(&task.driver, &task.user).err());
        if let Some(msg) = denied {
            let e = events::hook_failed("validate", &msg);
            return Err(self.hook_failed(e, false).await);
        }
        let built = find_task(alloc, &self.name)
            .ok_or_else(|| "the task is not in the allocation's job".to_string())
            .and_then(|(job, _, task)| {
                let (env, dir) = self.task_env(alloc, driver)?;
                Ok((job.clone(), task.clone(), env, dir))
            });
        let (job, task, env, dir) = match built {
            Ok(b) => b,
            Err(msg) => return Err(self.setup_failed(&msg).await),
        };
        if let Err(msg) = self.identities(alloc, &task, &dir).await {
            let e = events::hook_failed("identity", &msg);
            return Err(self.hook_failed(e, true).await);
        }
        if let Err(msg) = task_hooks::write_dispatch_payload(&job, &task, &dir) {
            let e = events::hook_failed("dispatch_payload", &msg);
            return Err(self.hook_failed(e, false).await);
        }
        if !task.artifacts.is_empty() {
            self.push(events::downloading_artifacts());
            self.report().await;
            if let Err(msg) = task_hooks::artifact::fetch_all(&task.artifacts, &env, &dir).await {
                return Err(self.hook_failed(events::artifact_failed(&msg), true).await);
            }
        }
        let watched = (task.clone(), env.clone(), dir.clone());
        let nomad = self.nomad_api.clone();
        let rendered = tokio::task::spawn_blocking(move || {
            task_hooks::render_templates(&task, &env, &dir, nomad.as_deref())
        })
        .await
        .unwrap_or_else(|e| Err(format!("the template worker failed: {e}")));
        match rendered {
            Ok(rendered) => {
                self.hook_env = rendered.vars.clone();
                let (task, env, dir) = watched;
                let rng = Rng::new(self.rng.next_u64());
                let nomad = self.nomad_api.clone();
                self.templates = TemplateWatch::new(task, env, dir, rendered, rng, nomad);
            }
            Err(msg) => return Err(self.hook_failed(events::template_failed(&msg), false).await),
        }
        self.prestart_done = true;
        Ok(())
    }

    /// Nomad's identity hook: the task's identities with `env` or `file` are signed by the
    /// servers and handed over as `NOMAD_TOKEN` / `NOMAD_TOKEN_<name>` and
    /// `secrets/nomad_token` / `secrets/nomad_<name>.jwt` (0644, as templates: a task running as
    /// `nobody` reads it; the task directory is the boundary).
    async fn identities(
        &mut self,
        alloc: &Allocation,
        task: &Task,
        dir: &drivers::TaskDir,
    ) -> Result<(), String> {
        let mut wanted: Vec<&model::task::WorkloadIdentity> = task
            .identity
            .iter()
            .chain(&task.identities)
            .filter(|i| i.env || i.file)
            .collect();
        // Templates read the servers through the default identity (block or not).
        let implicit = model::task::WorkloadIdentity::default();
        let for_templates = !task.templates.is_empty();
        if for_templates
            && !wanted
                .iter()
                .any(|i| i.name() == model::task::DEFAULT_IDENTITY)
        {
            wanted.push(task.identity.as_ref().unwrap_or(&implicit));
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let node = self.ctx.node.get();
        let req = model::wire::AllocSignIdentitiesRequest {
            node_id: node.id.clone(),
            secret_id: node.secret_id.clone(),
            min_index: alloc.alloc_modify_index,
            identities: wanted
                .iter()
                .map(|i| model::wire::WorkloadIdentityRequest {
                    alloc_id: alloc.id.clone(),
                    task_name: self.name.clone(),
                    identity_name: i.name().to_string(),
                })
                .collect(),
        };
        let resp = self
            .ctx
            .conn
            .sign_identities(req)
            .await
            .map_err(|e| format!("signing the task's identities failed: {e}"))?;
        if let Some(r) = resp.rejections.first() {
            return Err(format!(
                "the servers refused identity {:?}: {}",
                r.request.identity_name, r.reason
            ));
        }
        let fs = task_hooks::alloc_fs(dir)?;
        for id in wanted {
            let name = id.name();
            let jwt = resp
                .signed
                .iter()
                .find(|s| s.identity_name == name)
                .map(|s| s.jwt.clone())
                .ok_or_else(|| format!("the servers did not sign identity {name:?}"))?;
            let default = name == model::task::DEFAULT_IDENTITY;
            if default && for_templates {
                self.nomad_api = Some(Arc::new(task_hooks::nomad_api::NomadApi::new(
                    Arc::clone(&self.ctx.conn),
                    jwt.clone(),
                    alloc.namespace.clone(),
                    tokio::runtime::Handle::current(),
                )));
            }
            if id.env {
                let var = if default {
                    "NOMAD_TOKEN".to_string()
                } else {
                    format!("NOMAD_TOKEN_{name}")
                };
                self.identity_env.insert(var, jwt.clone());
            }
            if id.file {
                let path = if !id.filepath.is_empty() {
                    task_hooks::confine(&dir.dir, &id.filepath, "identity.filepath")?
                } else if default {
                    dir.secrets_dir.join("nomad_token")
                } else {
                    dir.secrets_dir.join(format!("nomad_{name}.jwt"))
                };
                fs.write_atomic(&path, jwt.as_bytes(), 0o644)
                    .map_err(|e| format!("writing identity {name:?}: {e}"))?;
            }
        }
        // Signed again at half the shortest life, as Nomad renews before expiry.
        let shortest = task
            .identity
            .iter()
            .chain(&task.identities)
            .filter(|i| i.ttl.0 > 0)
            .map(|i| Duration::from_nanos(u64::try_from(i.ttl.0).unwrap_or(0)))
            .min();
        self.identity_renew_at = shortest.map(|ttl| tokio::time::Instant::now() + ttl / 2);
        Ok(())
    }

    /// Identities with a `ttl` are signed again before they expire; the task hears of it as
    /// their `change_mode`s ask (one restart wins, else each signal once; `noop`: the new token
    /// is only in the file).
    async fn renew_identities(&mut self, driver: Arc<dyn Driver>, task_id: String) -> Step {
        let alloc = self.alloc.borrow().clone();
        let Some((_, _, task)) = find_task(&alloc, &self.name) else {
            self.identity_renew_at = None;
            return Step::Wait { driver, task_id };
        };
        let task = task.clone();
        let renewed = match self.task_env(&alloc, &*driver) {
            Ok((_, dir)) => self.identities(&alloc, &task, &dir).await,
            Err(e) => Err(e),
        };
        if let Err(e) = renewed {
            tracing::warn!(task = %self.name, error = %e, "renewing the task's identities failed; trying again in 10s");
            self.identity_renew_at = Some(tokio::time::Instant::now() + IDENTITY_RENEW_RETRY);
            return Step::Wait { driver, task_id };
        }
        let expiring = task
            .identity
            .iter()
            .chain(&task.identities)
            .filter(|i| i.ttl.0 > 0);
        let mut signals = Vec::new();
        for id in expiring {
            match id.change_mode.as_str() {
                "restart" => {
                    let reason = "Workload identity renewed (change_mode restart)";
                    return self.restart(driver, task_id, reason, None).await;
                }
                "signal" if !signals.contains(&id.change_signal) => {
                    signals.push(id.change_signal.clone());
                }
                _ => {}
            }
        }
        for signal in signals {
            if let Err(e) = driver.signal(&task_id, &signal).await {
                tracing::warn!(task = %self.name, %signal, error = %e, "signalling the renewed identity failed");
            } else {
                self.push(events::signaling(&signal));
            }
        }
        self.report().await;
        Step::Wait { driver, task_id }
    }

    /// A prestart hook failed: record why, and let the restart policy decide (`recoverable`:
    /// trying again may work).
    async fn hook_failed(&mut self, e: TaskEvent, recoverable: bool) -> Step {
        tracing::warn!(task = %self.name, event = %e.event_type, "prestart hook failed: {}", e.display_message);
        self.push(e);
        self.report().await;
        let d = self
            .tracker
            .on_start_error(recoverable, Instant::now(), self.rng.next_u64());
        Step::Decide(d)
    }

    /// Builds the directories and the task's environment as the task will see it (with the
    /// variables of `env = true` templates once they rendered).
    fn task_env(
        &self,
        alloc: &Allocation,
        driver: &dyn Driver,
    ) -> Result<(TaskEnv, drivers::TaskDir), String> {
        let (job, group, task) =
            find_task(alloc, &self.name).ok_or("the task is not in the allocation's job")?;
        self.dir.build().map_err(|e| e.to_string())?;
        let task_dir = self.dir.build_task(&self.name).map_err(|e| e.to_string())?;
        let isolation = driver.capabilities().fs_isolation;
        let paths = match isolation {
            FsIsolation::None => TaskPaths {
                alloc_dir: self.dir.shared().display().to_string(),
                task_dir: task_dir.local_dir.display().to_string(),
                secrets_dir: task_dir.secrets_dir.display().to_string(),
            },
            FsIsolation::Chroot | FsIsolation::Image => TaskPaths {
                alloc_dir: "/alloc".into(),
                task_dir: "/local".into(),
                secrets_dir: "/secrets".into(),
            },
        };
        let secrets_dir = paths.secrets_dir.clone();
        let no_host_env = Default::default();
        let node = self.ctx.node.get();
        let mut env = TaskEnv::build(&EnvInputs {
            alloc,
            job,
            group,
            task,
            node: &node,
            region: &self.ctx.region,
            paths,
            host_env: if isolation == FsIsolation::Image {
                &no_host_env
            } else {
                &self.ctx.host_env
            },
        });
        env.extend(self.hook_env.clone());
        env.extend(self.identity_env.clone());
        if self
            .identity_env
            .keys()
            .any(|k| k.starts_with("NOMAD_TOKEN"))
        {
            // Nomad sets it alongside a workload identity in the environment.
            env.extend([(
                "NOMAD_UNIX_ADDR".to_string(),
                format!("unix://{secrets_dir}/{}", crate::task_api::SOCKET_NAME),
            )]);
        }
        Ok((env, task_dir))
    }

    /// A CSI plugin task's directories, endpoint and mounts; `None` for other tasks.
    fn plugin_setup(&self, alloc: &Allocation, driver: &dyn Driver) -> Option<PluginSetup> {
        let (_, _, task) = find_task(alloc, &self.name)?;
        let cfg = task.csi_plugin_config.as_ref()?;
        Some(PluginSetup::plan(
            &self.ctx.csi.root,
            &alloc.id,
            cfg,
            driver.capabilities().fs_isolation,
        ))
    }

    /// Starts supervising a CSI plugin task whose process now runs.
    fn supervise(&mut self, alloc: &Allocation, driver: &dyn Driver) {
        if let Some(setup) = self.plugin_setup(alloc, driver) {
            let registry = std::sync::Arc::clone(&self.ctx.csi.registry);
            self.supervisor = Some(PluginSupervisor::spawn(registry, setup));
        }
    }

    /// Everything the driver needs to start this task now.
    fn task_config(&self, alloc: &Allocation, driver: &dyn Driver) -> Result<TaskConfig, String> {
        let (_, group, task) =
            find_task(alloc, &self.name).ok_or("the task is not in the allocation's job")?;
        let (mut env, task_dir) = self.task_env(alloc, driver)?;
        let volumes = Arc::clone(&self.volumes.borrow());
        let mut mounts = crate::csi::hook::task_mounts(task, &volumes, &group.volumes)?;
        mounts.extend(host_volume_mounts(
            task,
            &group.volumes,
            &self.ctx.node.get(),
            alloc.index(),
        )?);
        if let Some(m) = dns_mount(group, &task_dir, driver)? {
            mounts.push(m);
        }
        if let Some(plugin) = self.plugin_setup(alloc, driver) {
            plugin.create_dirs()?;
            env.extend([("CSI_ENDPOINT".to_string(), plugin.endpoint.clone())]);
            mounts.extend(plugin.mounts);
        }
        let mut devices = Vec::new();
        let mut gpu_ids = Vec::new();
        let given = alloc
            .allocated_resources
            .as_ref()
            .and_then(|r| r.tasks.get(&self.name))
            .map(|t| t.devices.as_slice())
            .unwrap_or_default();
        if !given.is_empty() {
            let r = self
                .ctx
                .devices
                .reserve(given)
                .map_err(|e| format!("reserving devices: {e}"))?;
            env.extend(r.envs);
            // Without isolation the task sees the host's device nodes and paths already.
            if driver.capabilities().fs_isolation != FsIsolation::None {
                mounts.extend(r.mounts);
                devices = r.devices;
                gpu_ids = r.gpu_ids;
            }
        }
        let config: serde_json::Map<String, serde_json::Value> = task
            .config
            .iter()
            .map(|(k, v)| (k.clone(), env.interpolate_json(v)))
            .collect();
        let short = uuid::Uuid::new_v4().simple().to_string();
        // `logs { disabled = true }`: Nomad collects nothing; an empty path discards.
        let logs_disabled = task.log_config.as_ref().and_then(|l| l.disabled) == Some(true);
        let logs_on = |path: std::path::PathBuf| {
            if logs_disabled {
                Default::default()
            } else {
                path
            }
        };
        Ok(TaskConfig {
            id: format!("{}/{}/{}", alloc.id, self.name, &short[..8]),
            alloc_id: alloc.id.clone(),
            name: self.name.clone(),
            driver_config: config,
            env: env.into_env(),
            user: (!task.user.is_empty()).then(|| task.user.clone()),
            task_dir,
            alloc_dir: self.dir.shared(),
            stdout_path: logs_on(self.dir.stdout_path(&self.name)),
            stderr_path: logs_on(self.dir.stderr_path(&self.name)),
            logs: task_logs(task, self.dir.logs()),
            resources: task_resources(alloc, task),
            kill_signal: task.kill_signal.clone(),
            kill_timeout: kill_timeout(task),
            mounts,
            network_isolation: self.network.borrow().clone(),
            devices,
            gpu_ids,
        })
    }

    async fn wait(&mut self, driver: Arc<dyn Driver>, task_id: String) -> Step {
        let end = tokio::select! {
            exit = driver.wait(&task_id) => WaitEnd::Exited(exit.unwrap_or_else(|e| ExitResult {
                exit_code: 0,
                signal: 0,
                oom_killed: false,
                err: Some(format!("waiting on the task failed: {e}")),
            })),
            cmd = self.cmds.recv() => match cmd {
                Some(TaskCommand::Kill { event }) => WaitEnd::Kill(event),
                Some(TaskCommand::Signal { signal, reply }) => WaitEnd::Signal(signal, reply),
                Some(TaskCommand::Restart { reply, hold }) => WaitEnd::Restart(reply, hold),
                Some(TaskCommand::CheckRestart { reason }) => WaitEnd::CheckRestart(reason),
                Some(TaskCommand::Detach) | None => WaitEnd::Detach,
            },
            ev = supervisor::next_event(&mut self.supervisor) => WaitEnd::Plugin(ev),
            change = task_hooks::watch::next_change(&mut self.templates) => WaitEnd::Template(change),
            () = sleep_until_some(self.identity_renew_at) => WaitEnd::IdentityRenew,
        };
        match end {
            WaitEnd::Detach => Step::Done,
            WaitEnd::Signal(signal, reply) => {
                let sent = driver.signal(&task_id, &signal).await;
                if sent.is_ok() {
                    self.push(events::signaling(&signal));
                    self.report().await;
                }
                let _ = reply.send(sent.map_err(AllocActionError::from));
                Step::Wait { driver, task_id }
            }
            WaitEnd::Restart(reply, hold) => {
                let step = self
                    .restart(driver, task_id, events::REASON_USER_RESTART, Some(reply))
                    .await;
                if hold && matches!(step, Step::Start) {
                    self.release().await;
                    return Step::Done;
                }
                step
            }
            WaitEnd::CheckRestart(reason) => self.restart_counted(driver, task_id, &reason).await,
            WaitEnd::Template(change) => self.template_changed(driver, task_id, change).await,
            WaitEnd::IdentityRenew => self.renew_identities(driver, task_id).await,
            WaitEnd::Plugin(SupervisorEvent::Event(e)) => {
                self.push(*e);
                self.report().await;
                Step::Wait { driver, task_id }
            }
            WaitEnd::Plugin(SupervisorEvent::Kill { unhealthy, killing }) => {
                self.push(*unhealthy);
                self.kill(&*driver, &task_id, Some(killing)).await
            }
            WaitEnd::Kill(event) => self.kill(&*driver, &task_id, event).await,
            WaitEnd::Exited(exit) => {
                tracing::debug!(task = %self.name, %task_id, ?exit, "task exited");
                self.push(events::terminated(&exit));
                self.forget(&*driver, &task_id).await;
                self.report().await;
                let d =
                    self.tracker
                        .on_exit(exit.successful(), Instant::now(), self.rng.next_u64());
                Step::Decide(d)
            }
        }
    }

    /// Stops the running task for a restart (`reason` recorded first; kill timeout and signal as
    /// for a kill) and lets go of it. `Err`: the driver could not stop it; it still runs.
    async fn stop_for_restart(
        &mut self,
        driver: &dyn Driver,
        task_id: &str,
        reason: &str,
    ) -> Result<(), DriverError> {
        tracing::info!(task = %self.name, %task_id, reason, "restarting the task");
        self.push(events::restart_signaled(reason));
        self.report().await;
        let alloc = self.alloc.borrow().clone();
        let timeout = find_task(&alloc, &self.name)
            .map(|(_, _, t)| t)
            .map_or(Duration::from_secs(5), kill_timeout);
        if let Err(e) = driver.stop(task_id, timeout, "").await {
            tracing::warn!(task = %self.name, %task_id, error = %e, "stopping the task for a restart failed");
            return Err(e);
        }
        if let Ok(Ok(exit)) = tokio::time::timeout(timeout, driver.wait(task_id)).await {
            self.push(events::terminated(&exit));
        }
        self.forget(driver, task_id).await;
        Ok(())
    }

    /// `alloc restart`: stop the task, then start it again without a delay and without counting
    /// it against the restart policy.
    async fn restart(
        &mut self,
        driver: Arc<dyn Driver>,
        task_id: String,
        reason: &str,
        reply: Option<oneshot::Sender<Result<(), AllocActionError>>>,
    ) -> Step {
        if let Err(e) = self.stop_for_restart(&*driver, &task_id, reason).await {
            if let Some(reply) = reply {
                let _ = reply.send(Err(e.into()));
            }
            return Step::Wait { driver, task_id };
        }
        self.record.state.restarts += 1;
        self.record.state.last_restart = Some(crate::time::now_rfc3339());
        self.push(events::restarting(Duration::ZERO, reason));
        events::transition(&mut self.record.state, TaskStatus::Pending);
        self.report().await;
        if let Some(reply) = reply {
            let _ = reply.send(Ok(()));
        }
        Step::Start
    }

    /// `check_restart`: stop the task as for a restart, then let the restart policy decide, as
    /// after a failed exit (a delay, or the task fails once its attempts are spent).
    async fn restart_counted(
        &mut self,
        driver: Arc<dyn Driver>,
        task_id: String,
        reason: &str,
    ) -> Step {
        if self
            .stop_for_restart(&*driver, &task_id, reason)
            .await
            .is_err()
        {
            return Step::Wait { driver, task_id };
        }
        self.report().await;
        Step::Decide(
            self.tracker
                .on_exit(false, Instant::now(), self.rng.next_u64()),
        )
    }

    /// Templates were rendered again with new output: the task hears of it as their
    /// `change_mode`s ask (Nomad's template manager). The variables of `env = true` templates
    /// take effect at the next start. A signal that cannot be sent, or a failing script with
    /// `fail_on_error`, kills the task as failed.
    async fn template_changed(
        &mut self,
        driver: Arc<dyn Driver>,
        task_id: String,
        change: TemplateChange,
    ) -> Step {
        self.hook_env.clone_from(&change.vars);
        if change.restart {
            let reason = events::REASON_TEMPLATE_RESTART;
            return self.restart(driver, task_id, reason, None).await;
        }
        for signal in &change.signals {
            if let Err(e) = driver.signal(&task_id, signal).await {
                let why = format!("Sending signals [{signal}] failed: {e}");
                self.record.state.failed = true;
                let event = events::template_kill(&why);
                return self.kill(&*driver, &task_id, Some(Box::new(event))).await;
            }
            self.push(events::template_signaling(signal));
        }
        for script in &change.scripts {
            let mut cmd = vec![script.command.clone()];
            cmd.extend(script.args.iter().cloned());
            let timeout = match u64::try_from(script.timeout.0).unwrap_or(0) {
                0 => TEMPLATE_SCRIPT_TIMEOUT_DEFAULT,
                ns => Duration::from_nanos(ns),
            };
            let ran = driver.exec(&task_id, &cmd, timeout).await;
            match ran {
                Ok(r) if r.exit.exit_code == 0 && r.exit.err.is_none() => {
                    self.push(events::template_script_ran(script, r.exit.exit_code));
                }
                other => {
                    let (code, why) = match other {
                        Ok(r) => (r.exit.exit_code, r.exit.err.unwrap_or_default()),
                        Err(e) => (-1, e.to_string()),
                    };
                    self.push(events::template_script_failed(script, &why, code));
                    if script.fail_on_error {
                        self.record.state.failed = true;
                        let event =
                            events::template_kill("Template script failed, task is being killed");
                        return self.kill(&*driver, &task_id, Some(Box::new(event))).await;
                    }
                }
            }
        }
        self.report().await;
        Step::Wait { driver, task_id }
    }

    /// Frees what the driver holds for an exited task and drops the handle; a CSI plugin is
    /// deregistered.
    async fn forget(&mut self, driver: &dyn Driver, task_id: &str) {
        if let Some(s) = self.supervisor.take() {
            s.stop();
        }
        if let Err(e) = driver.destroy(task_id, true).await {
            tracing::warn!(task = %self.name, %task_id, error = %e, "driver could not destroy the task");
        }
        self.record.handle = None;
    }

    async fn kill(
        &mut self,
        driver: &dyn Driver,
        task_id: &str,
        event: Option<Box<TaskEvent>>,
    ) -> Step {
        tracing::debug!(task = %self.name, %task_id, "killing task");
        if let Some(e) = event {
            self.push(*e);
        }
        let alloc = self.alloc.borrow().clone();
        let task = find_task(&alloc, &self.name).map(|(_, _, t)| t);
        let delay = task.map_or(Duration::ZERO, shutdown_delay);
        if !delay.is_zero() {
            self.push(events::waiting_shutdown_delay(delay));
            self.report().await;
            tokio::time::sleep(delay).await;
        }
        let timeout = task.map_or(Duration::from_secs(5), kill_timeout);
        self.push(events::killing(timeout));
        self.report().await;
        let stopped = driver.stop(task_id, timeout, "").await;
        if let Ok(Ok(exit)) = tokio::time::timeout(timeout, driver.wait(task_id)).await {
            self.push(events::terminated(&exit));
        }
        let error = stopped.err().map(|e| e.to_string());
        self.push(events::killed(error.as_deref()));
        self.forget(driver, task_id).await;
        events::transition(&mut self.record.state, TaskStatus::Dead);
        self.report().await;
        tracing::debug!(task = %self.name, %task_id, "task killed");
        Step::Done
    }

    /// A kill while no process runs (before a start, during a restart delay).
    async fn killed_while_idle(&mut self, event: Option<Box<TaskEvent>>) -> Step {
        if let Some(e) = event {
            self.push(*e);
        }
        self.push(events::killed(None));
        events::transition(&mut self.record.state, TaskStatus::Dead);
        self.report().await;
        Step::Done
    }

    async fn apply(&mut self, decision: Decision) -> Step {
        match decision {
            Decision::Complete => {
                events::transition(&mut self.record.state, TaskStatus::Dead);
                self.report().await;
                Step::Done
            }
            Decision::Fail { reason } => {
                self.push(events::not_restarting(&reason));
                events::transition(&mut self.record.state, TaskStatus::Dead);
                self.report().await;
                Step::Done
            }
            Decision::Restart { delay, reason } => {
                self.record.state.restarts += 1;
                self.record.state.last_restart = Some(crate::time::now_rfc3339());
                self.push(events::restarting(delay, &reason));
                events::transition(&mut self.record.state, TaskStatus::Pending);
                self.report().await;
                let sleep = tokio::time::sleep(delay);
                tokio::pin!(sleep);
                loop {
                    let cmd = tokio::select! {
                        () = &mut sleep => return Step::Start,
                        cmd = self.cmds.recv() => cmd,
                    };
                    let Some(cmd) = cmd else { return Step::Done };
                    match cmd.refuse_if_action(&self.name) {
                        Some(TaskCommand::Kill { event }) => {
                            return self.killed_while_idle(event).await
                        }
                        Some(_) => return Step::Done,
                        // A refused signal or restart: keep waiting out the delay.
                        None => {}
                    }
                }
            }
        }
    }
}

/// How soon a failed identity renewal is tried again.
const IDENTITY_RENEW_RETRY: Duration = Duration::from_secs(10);

/// Sleeps until `at`; forever when `None`.
async fn sleep_until_some(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The resources the scheduler gave the task, or what the task asked for.
fn task_resources(alloc: &Allocation, task: &Task) -> TaskResources {
    let to_u64 = |v: i64| u64::try_from(v).unwrap_or(0);
    if let Some(r) = alloc
        .allocated_resources
        .as_ref()
        .and_then(|r| r.tasks.get(&task.name))
    {
        return TaskResources {
            cpu_mhz: to_u64(r.cpu.cpu_shares),
            memory_mb: to_u64(r.memory.memory_mb),
            memory_max_mb: to_u64(r.memory.memory_max_mb),
        };
    }
    let asked = task.resources.clone().unwrap_or_default();
    TaskResources {
        cpu_mhz: to_u64(i64::from(asked.cpu.unwrap_or(0))),
        memory_mb: to_u64(i64::from(asked.memory_mb.unwrap_or(0))),
        memory_max_mb: to_u64(i64::from(asked.memory_max_mb.unwrap_or(0))),
    }
}

/// The task's `kill_timeout` (Nomad's default 5 s), capped at [`KILL_TIMEOUT_MAX`].
fn kill_timeout(task: &Task) -> Duration {
    let d = task
        .kill_timeout
        .unwrap_or(model::task::DEFAULT_KILL_TIMEOUT);
    Duration::from_nanos(u64::try_from(d.0).unwrap_or(0)).min(KILL_TIMEOUT_MAX)
}

fn shutdown_delay(task: &Task) -> Duration {
    Duration::from_nanos(u64::try_from(task.shutdown_delay.0).unwrap_or(0))
}

/// The task's `logs` block as the driver rotates it (Nomad's defaults: 10 files of 10 MB).
/// `None` when `logs { disabled = true }`.
fn task_logs(task: &Task, dir: std::path::PathBuf) -> Option<drivers::TaskLogConfig> {
    let log = task.log_config.clone().unwrap_or_default();
    if log.disabled == Some(true) {
        return None;
    }
    let positive = |v: Option<i32>| v.and_then(|v| u32::try_from(v).ok()).filter(|v| *v > 0);
    Some(drivers::TaskLogConfig {
        dir,
        max_files: positive(log.max_files).unwrap_or(10),
        max_file_size_mb: positive(log.max_file_size_mb).map_or(10, u64::from),
    })
}

/// The group's `network { dns { servers searches options } }` as the task's /etc/resolv.conf
/// (Nomad's `GenerateDNSMount`): written into the task directory and mounted read-only, for
/// drivers that isolate the file system. raw_exec tasks see the host's file (the alloc runner
/// records an event saying so).
fn dns_mount(
    group: &model::group::TaskGroup,
    task_dir: &drivers::TaskDir,
    driver: &dyn Driver,
) -> Result<Option<drivers::MountConfig>, String> {
    let Some(dns) = group.networks.first().and_then(|n| n.dns.as_ref()) else {
        return Ok(None);
    };
    if driver.capabilities().fs_isolation == FsIsolation::None {
        return Ok(None);
    }
    let path = task_dir.dir.join("resolv.conf");
    std::fs::write(&path, resolv_conf(dns))
        .map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(Some(drivers::MountConfig {
        host_path: path,
        task_path: "/etc/resolv.conf".into(),
        readonly: true,
    }))
}

fn group_of(alloc: &Allocation) -> Option<&model::group::TaskGroup> {
    alloc
        .job
        .as_ref()?
        .task_groups
        .iter()
        .find(|g| g.name == alloc.task_group)
}

/// resolv.conf text for a `dns` block.
pub(crate) fn resolv_conf(dns: &model::resources::DnsConfig) -> String {
    let mut out = String::new();
    for s in &dns.servers {
        out.push_str(&format!("nameserver {s}\n"));
    }
    if !dns.searches.is_empty() {
        out.push_str(&format!("search {}\n", dns.searches.join(" ")));
    }
    if !dns.options.is_empty() {
        out.push_str(&format!("options {}\n", dns.options.join(" ")));
    }
    out
}

/// The driver mounts of a task's `volume_mount` blocks for the group's host volumes (static
/// ones from the client's configuration and dynamic ones alike, both in the node's
/// `HostVolumes`); read-only when the mount, the request or the volume says so. A volume the
/// node no longer offers is an error.
fn host_volume_mounts(
    task: &model::Task,
    requests: &std::collections::BTreeMap<String, model::group::VolumeRequest>,
    node: &model::Node,
    alloc_index: Option<u32>,
) -> Result<Vec<drivers::MountConfig>, String> {
    let mut out = Vec::new();
    for vm in &task.volume_mounts {
        let Some(req) = requests.get(&vm.volume) else {
            continue;
        };
        if req.volume_type != "host" {
            continue;
        }
        let name = match (req.per_alloc, alloc_index) {
            (true, Some(i)) => format!("{}[{i}]", req.source),
            _ => req.source.clone(),
        };
        let hv = node
            .host_volumes
            .get(&name)
            .ok_or_else(|| format!("host volume {name:?} is not on this node"))?;
        out.push(drivers::MountConfig {
            host_path: std::path::PathBuf::from(&hv.path),
            task_path: std::path::PathBuf::from(&vm.destination),
            readonly: vm.read_only || req.read_only || hv.read_only,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod dns_tests {
    #[test]
    fn resolv_conf_lists_servers_then_searches_and_options() {
        let dns = model::resources::DnsConfig {
            servers: vec!["1.1.1.1".into(), "8.8.8.8".into()],
            searches: vec!["svc.local".into(), "local".into()],
            options: vec!["ndots:2".into()],
        };
        assert_eq!(
            super::resolv_conf(&dns),
            "nameserver 1.1.1.1\nnameserver 8.8.8.8\nsearch svc.local local\noptions ndots:2\n"
        );
    }
}
