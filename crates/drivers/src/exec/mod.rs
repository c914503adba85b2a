//! `exec`: Linux isolation — new PID, mount, IPC and UTS namespaces, a chroot of the host paths
//! in `chroot_env`, cgroup limits for memory (hard) and CPU weight.
//!
//! The driver never isolates from inside the client's multi-threaded runtime: per task it
//! starts a single-threaded helper process, `<caravan> executor <spec.json>` ([`executor`]),
//! which joins the task's cgroup, unshares the namespaces, builds the chroot and runs the task as
//! PID 1 of its PID namespace. The driver watches the helper (whose exit mirrors the task's),
//! reads OOM kills from the cgroup, and stops tasks through the cgroup, which holds every
//! process the task started.
//!
//! `chroot_env` comes from the plugin config ([`ExecConfig`]; Nomad's default list without
//! one). With the task's `logs` set, output goes through a per-task log helper (`<helper>
//! logmon`, see [`crate::logmon`]) into rotated files; the executor opens the helper's fifos.
//!
//! Not built yet: `exec` into a running task (answers NotSupported).

pub mod cgroup;
pub mod config;
pub mod executor;
pub mod isolation;

use crate::capabilities::{CapSet, NOMAD_DEFAULTS};
use crate::driver::{
    Capabilities, Driver, DriverFuture, ExecResult, ExitResult, Fingerprint, FsIsolation,
    TaskConfig, TaskHandle, TaskState, TaskStats, TaskStatus, TASK_HANDLE_VERSION,
};
use crate::error::DriverError;
use crate::exit_cell::ExitCell;
use crate::limits::{
    EXECUTOR_START_TIMEOUT, KILL_REAP_TIMEOUT, PROC_POLL_DELAY_MAX, PROC_POLL_DELAY_MIN,
    STOP_POLL_DELAY_MAX,
};
use crate::logmon::Logmon;
use crate::process_group::CpuSample;
use crate::procfs::ProcIdentity;
use crate::raw_exec::task::{exit_from_status, unknown_exit};
use crate::signal::{parse_signal, DEFAULT_KILL_SIGNAL};
use crate::table::TaskTable;
use cgroup::{Cgroup, CgroupLayout};
pub use config::ExecConfig;
use config::ExecTaskConfig;
use executor::{CapPlan, ExecutorReport, ExecutorSpec};
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;

/// The driver's name in job files.
pub const NAME: &str = "exec";

/// The cgroup (under each controller's root) that holds one child cgroup per exec task.
pub const CGROUP_PARENT: &str = "caravan";

/// The helper's subcommand: `<helper> executor <spec.json>`.
pub const EXECUTOR_SUBCOMMAND: &str = "executor";

pub struct ExecDriver {
    /// The program started as the helper; `None`: this process's own executable.
    helper: Option<PathBuf>,
    config: ExecConfig,
    tasks: TaskTable<ExecTask>,
}

impl Default for ExecDriver {
    fn default() -> ExecDriver {
        ExecDriver::new()
    }
}

impl std::fmt::Debug for ExecDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecDriver")
            .field("helper", &self.helper)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Whether this host could run exec tasks at all: root, and a memory cgroup controller.
fn host_problem() -> Option<&'static str> {
    if !nix::unistd::geteuid().is_root() {
        return Some("exec driver must run as root");
    }
    if CgroupLayout::detect().is_none() {
        return Some("no cgroup memory controller is mounted");
    }
    None
}

/// Who an exec task runs as when its `user` is unset (Nomad's exec driver: `nobody`).
pub const DEFAULT_USER: &str = "nobody";

/// The task's `user`, or [`DEFAULT_USER`].
fn task_user(cfg: &TaskConfig) -> &str {
    cfg.user
        .as_deref()
        .filter(|u| !u.is_empty())
        .unwrap_or(DEFAULT_USER)
}

/// A task id as one cgroup directory name.
fn cgroup_name(task_id: &str) -> String {
    task_id
        .chars()
        .map(|c| {
            if c == '/' || c.is_whitespace() {
                '-'
            } else {
                c
            }
        })
        .collect::<String>()
        .trim_start_matches('.')
        .to_string()
}

/// The driver-private part of the persisted handle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ExecState {
    /// The helper process; its exit is the task's.
    helper: ProcIdentity,
    /// The task's main process (PID 1 of its namespace) as the host sees it.
    task_pid: u32,
    cgroup_name: String,
}

struct ExecTask {
    config: TaskConfig,
    state: ExecState,
    cgroup: Cgroup,
    started_at_unix_ns: i64,
    recovered: bool,
    exit: ExitCell,
    cpu_sample: Mutex<Option<CpuSample>>,
}

impl ExecDriver {
    /// The driver, starting helpers from this process's own executable (`caravan`).
    pub fn new() -> ExecDriver {
        ExecDriver {
            helper: None,
            config: ExecConfig::default(),
            tasks: TaskTable::new(),
        }
    }

    /// The driver, starting `helper executor <spec>` (tests use their own binary).
    pub fn new_with_helper(helper: impl Into<PathBuf>) -> ExecDriver {
        ExecDriver {
            helper: Some(helper.into()),
            config: ExecConfig::default(),
            tasks: TaskTable::new(),
        }
    }

    /// The driver with the plugin's configuration (`chroot_env`).
    pub fn with_config(mut self, config: ExecConfig) -> ExecDriver {
        self.config = config;
        self
    }

    fn helper_path(&self, task_id: &str) -> Result<PathBuf, DriverError> {
        match &self.helper {
            Some(path) => Ok(path.clone()),
            None => std::env::current_exe()
                .map_err(|e| DriverError::io(task_id, "finding the executor binary", e)),
        }
    }

    async fn start_task(&self, cfg: TaskConfig) -> Result<TaskHandle, DriverError> {
        if let Some(problem) = host_problem() {
            return Err(DriverError::NotSupported(format!("exec driver: {problem}")));
        }
        if self.tasks.contains(&cfg.id) {
            return Err(DriverError::TaskExists(cfg.id));
        }
        let task_config = ExecTaskConfig::parse(&cfg.driver_config)?;
        let supported = crate::capabilities::supported();
        let caps = crate::capabilities::calculate(
            &CapSet::of(&NOMAD_DEFAULTS),
            &self.config.allow_caps,
            &task_config.cap_add,
            &task_config.cap_drop,
            &supported,
        )
        .map_err(|message| DriverError::invalid(NAME, message))?;
        let user = task_user(&cfg).to_string();
        let holdable = supported.intersect(&crate::capabilities::own_bounding());
        let caps = CapPlan::for_user(&user, &caps, &holdable);
        let raw = task_config.base;
        for m in &cfg.mounts {
            m.check()
                .map_err(|message| DriverError::invalid(NAME, message))?;
        }
        let start_err = |message: String, recoverable: bool| DriverError::Start {
            task_id: cfg.id.clone(),
            message,
            recoverable,
        };
        let layout = CgroupLayout::detect()
            .ok_or_else(|| start_err("no cgroup memory controller".into(), false))?;
        let name = cgroup_name(&cfg.id);
        let cgroup = Cgroup::create(&layout, CGROUP_PARENT, &name)
            .map_err(|e| start_err(format!("creating the cgroup: {e}"), true))?;
        // The log helper first: the executor opens its fifos as the task's stdout and stderr.
        let logmon = match &cfg.logs {
            Some(logs) => {
                let helper = self.helper_path(&cfg.id)?;
                match Logmon::start(&helper, &cfg, logs).await {
                    Ok(started) => Some(started),
                    Err(e) => {
                        let _ = destroy_cgroup(cgroup).await;
                        return Err(e);
                    }
                }
            }
            None => None,
        };
        let (stdout_path, stderr_path) = match &cfg.logs {
            Some(logs) if logmon.is_some() => (
                crate::logmon::fifo_path(&logs.dir, &cfg.name, "stdout"),
                crate::logmon::fifo_path(&logs.dir, &cfg.name, "stderr"),
            ),
            _ => (cfg.stdout_path.clone(), cfg.stderr_path.clone()),
        };
        let spec = ExecutorSpec {
            task_id: cfg.id.clone(),
            command: raw.command,
            args: raw.args,
            env: cfg.env.clone(),
            work_dir: raw.work_dir,
            user: Some(user),
            hostname: cfg.name.clone(),
            task_dir: cfg.task_dir.dir.clone(),
            alloc_dir: cfg.alloc_dir.clone(),
            chroot_env: self.config.chroot_env.clone(),
            stdout_path,
            stderr_path,
            cgroup_parent: CGROUP_PARENT.to_string(),
            cgroup_name: name.clone(),
            resources: cfg.resources,
            // A device plugin's nodes are bound into the chroot's `/dev` like any file.
            mounts: cfg
                .mounts
                .iter()
                .cloned()
                .chain(cfg.devices.iter().map(|d| crate::driver::MountConfig {
                    host_path: d.host_path.clone(),
                    task_path: d.task_path.clone(),
                    readonly: !d.permissions.contains('w'),
                }))
                .collect(),
            caps,
        };
        let netns = cfg.network_isolation.as_ref().map(|n| n.path.clone());
        let started = self.spawn_helper(&cfg.id, &spec, netns.as_deref()).await;
        // The executor has opened the fifos (or failed): the driver's write ends close here,
        // so the log helper ends with the task.
        let logmon = logmon.map(|(logmon, _outputs)| logmon);
        let (child, report) = match started {
            Ok(v) => v,
            Err(e) => {
                let _ = destroy_cgroup(cgroup).await;
                return Err(e);
            }
        };
        let helper = child.id().and_then(ProcIdentity::of);
        let (Some(task_pid), Some(helper)) = (report.pid, helper) else {
            let mut child = child;
            let _ = child.start_kill();
            let _ = child.wait().await;
            let _ = destroy_cgroup(cgroup).await;
            let why = report
                .error
                .unwrap_or_else(|| "the executor ended without starting the task".into());
            return Err(start_err(why, false));
        };
        let task = Arc::new(ExecTask {
            config: cfg,
            state: ExecState {
                helper,
                task_pid,
                cgroup_name: name,
            },
            cgroup,
            started_at_unix_ns: crate::now_unix_ns(),
            recovered: false,
            exit: ExitCell::new(),
            cpu_sample: Mutex::new(None),
        });
        task.watch_child(child, logmon);
        if let Err(e) = self.tasks.insert(&task.config.id, Arc::clone(&task)) {
            let _ = task.kill_all_and_wait().await;
            return Err(e);
        }
        tracing::debug!(task_id = %task.config.id, pid = task_pid, "exec task started");
        Ok(handle_of(&task))
    }

    /// Writes the spec (mode 0600, outside the task's chroot), starts the helper, and reads its
    /// one-line report.
    async fn spawn_helper(
        &self,
        task_id: &str,
        spec: &ExecutorSpec,
        netns: Option<&std::path::Path>,
    ) -> Result<(tokio::process::Child, ExecutorReport), DriverError> {
        let helper = self.helper_path(task_id)?;
        let spec_path = std::env::temp_dir().join(format!(
            "caravan-executor-{}-{}.json",
            std::process::id(),
            cgroup_name(task_id)
        ));
        let text = serde_json::to_vec(spec).expect("executor spec serialises");
        {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&spec_path)
                .map_err(|e| DriverError::io(task_id, "writing the executor spec", e))?;
            file.write_all(&text)
                .map_err(|e| DriverError::io(task_id, "writing the executor spec", e))?;
        }
        let mut helper_cmd = tokio::process::Command::new(&helper);
        if let Some(netns) = netns {
            // The executor enters the group's namespace first; the task inherits it.
            if let Err(e) = crate::netns::join_in_child(&mut helper_cmd, task_id, netns) {
                let _ = std::fs::remove_file(&spec_path);
                return Err(e);
            }
        }
        let mut child = helper_cmd
            .arg(EXECUTOR_SUBCOMMAND)
            .arg(&spec_path)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(false)
            .spawn()
            .map_err(|e| {
                let _ = std::fs::remove_file(&spec_path);
                DriverError::Start {
                    task_id: task_id.to_string(),
                    message: format!("running the executor {}: {e}", helper.display()),
                    recoverable: false,
                }
            })?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut line = String::new();
        let read = tokio::time::timeout(EXECUTOR_START_TIMEOUT, async {
            tokio::io::BufReader::new(stdout).read_line(&mut line).await
        })
        .await;
        let _ = std::fs::remove_file(&spec_path);
        let report = match read {
            Ok(Ok(_)) => serde_json::from_str(line.trim()).unwrap_or(ExecutorReport {
                pid: None,
                error: Some(format!("the executor said {:?}", line.trim())),
            }),
            Ok(Err(e)) => ExecutorReport {
                pid: None,
                error: Some(format!("reading the executor's report: {e}")),
            },
            Err(_) => ExecutorReport {
                pid: None,
                error: Some(format!(
                    "the executor did not report within {EXECUTOR_START_TIMEOUT:?}"
                )),
            },
        };
        Ok((child, report))
    }

    async fn stop_task(
        &self,
        task_id: &str,
        timeout: Duration,
        signal: &str,
    ) -> Result<(), DriverError> {
        let task = self.tasks.get(task_id)?;
        let signal = if signal.is_empty() {
            task.config.kill_signal.as_str()
        } else {
            signal
        };
        let signal = parse_signal(signal, DEFAULT_KILL_SIGNAL)?;
        task.stop(signal, timeout).await
    }

    async fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        let task = self.tasks.get(task_id)?;
        if !task.exit.has_exited() && !force {
            return Err(DriverError::StillRunning(task_id.to_string()));
        }
        task.kill_all_and_wait().await?;
        destroy_cgroup(task.cgroup.clone())
            .await
            .map_err(|e| DriverError::io(task_id, "removing the cgroup", e))?;
        task.exit.set(unknown_exit());
        self.tasks.remove(task_id);
        Ok(())
    }

    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        let id = &handle.task_id;
        handle.check_for(NAME)?;
        if self.tasks.contains(id) {
            return Ok(());
        }
        let refuse = |message: String| DriverError::Recover {
            task_id: id.clone(),
            message,
        };
        let state: ExecState = serde_json::from_value(handle.state.clone())
            .map_err(|e| refuse(format!("driver state: {e}")))?;
        let layout = CgroupLayout::detect().ok_or_else(|| refuse("no cgroup memory".into()))?;
        let cgroup = Cgroup::at(&layout, CGROUP_PARENT, &state.cgroup_name)
            .map_err(|e| refuse(e.to_string()))?;
        let task = Arc::new(ExecTask {
            config: handle.config.clone(),
            state,
            cgroup,
            started_at_unix_ns: handle.started_at_unix_ns,
            recovered: true,
            exit: ExitCell::new(),
            cpu_sample: Mutex::new(None),
        });
        if task.state.helper.is_alive() {
            task.watch_recovered();
        } else {
            task.exit.set(task.recovered_exit());
        }
        self.tasks.insert(id, task)?;
        Ok(())
    }
}

/// Kills what is left in the cgroup and removes it, off the runtime's threads.
async fn destroy_cgroup(cgroup: Cgroup) -> std::io::Result<()> {
    tokio::task::spawn_blocking(move || match cgroup.destroy() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    })
    .await
    .map_err(std::io::Error::other)?
}

fn handle_of(task: &ExecTask) -> TaskHandle {
    TaskHandle {
        version: TASK_HANDLE_VERSION,
        task_id: task.config.id.clone(),
        driver: NAME.to_string(),
        config: task.config.clone(),
        pid: Some(task.state.task_pid),
        started_at_unix_ns: task.started_at_unix_ns,
        state: serde_json::to_value(&task.state).expect("exec state serialises"),
    }
}

impl ExecTask {
    fn oom_killed(&self) -> bool {
        self.cgroup.oom_kill_count().unwrap_or(0) > 0
    }

    /// The cgroup's processes other than the helper (signals go to the task, not the helper).
    fn task_pids(&self) -> Vec<u32> {
        self.cgroup
            .pids()
            .unwrap_or_default()
            .into_iter()
            .filter(|pid| *pid != self.state.helper.pid)
            .collect()
    }

    fn cgroup_empty(&self) -> bool {
        self.cgroup.pids().map(|p| p.is_empty()).unwrap_or(true)
    }

    fn recovered_exit(&self) -> ExitResult {
        ExitResult {
            oom_killed: self.oom_killed(),
            ..unknown_exit()
        }
    }

    /// Records the helper's exit (the task's) when it comes, with the cgroup's OOM verdict, and
    /// kills whatever the task left behind.
    fn watch_child(self: &Arc<Self>, mut child: tokio::process::Child, logmon: Option<Logmon>) {
        let task = Arc::clone(self);
        tokio::spawn(async move {
            let mut result = match child.wait().await {
                Ok(status) => exit_from_status(status),
                Err(e) => ExitResult {
                    exit_code: -1,
                    err: Some(format!("waiting for the executor failed: {e}")),
                    ..Default::default()
                },
            };
            result.oom_killed = task.oom_killed();
            let cgroup = task.cgroup.clone();
            let _ = tokio::task::spawn_blocking(move || cgroup.kill_all()).await;
            if let Some(logmon) = logmon {
                logmon.drained(&task.config.id).await;
            }
            tracing::debug!(task_id = %task.config.id, ?result, "exec task exited");
            task.exit.set(result);
        });
    }

    /// Polls the recovered helper until it is gone (its status is lost: it is not our child).
    fn watch_recovered(self: &Arc<Self>) {
        let weak: Weak<ExecTask> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut delay = PROC_POLL_DELAY_MIN;
            loop {
                let Some(task) = weak.upgrade() else { return };
                if task.exit.has_exited() {
                    return;
                }
                if !task.state.helper.is_alive() {
                    task.exit.set(task.recovered_exit());
                    return;
                }
                drop(task);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(PROC_POLL_DELAY_MAX);
            }
        });
    }

    fn status(&self) -> TaskStatus {
        let exited = self.exit.get();
        TaskStatus {
            task_id: self.config.id.clone(),
            name: self.config.name.clone(),
            state: if exited.is_some() {
                TaskState::Exited
            } else {
                TaskState::Running
            },
            pid: Some(self.state.task_pid),
            started_at_unix_ns: self.started_at_unix_ns,
            completed_at_unix_ns: exited.as_ref().map(|e| e.at_unix_ns),
            exit_result: exited.map(|e| e.result),
        }
    }

    fn signal_main(&self, signal: Signal) -> Result<(), DriverError> {
        let pid = self.state.task_pid;
        if self.exit.has_exited() || !self.cgroup.pids().unwrap_or_default().contains(&pid) {
            return Err(DriverError::NotRunning(self.config.id.clone()));
        }
        nix::sys::signal::kill(crate::process_group::to_pid(pid), signal).map_err(|e| {
            DriverError::Signal {
                task_id: self.config.id.clone(),
                signal: signal.to_string(),
                message: e.to_string(),
            }
        })
    }

    /// Sends `signal` to every task process in the cgroup, waits up to `timeout`, then SIGKILLs
    /// the whole cgroup. PID 1 of a namespace ignores signals it has no handler for, except
    /// SIGKILL: a task that does not handle `signal` ends at the timeout.
    async fn stop(&self, signal: Signal, timeout: Duration) -> Result<(), DriverError> {
        if !self.exit.has_exited() {
            for pid in self.task_pids() {
                let _ = nix::sys::signal::kill(crate::process_group::to_pid(pid), signal);
            }
            let deadline = Instant::now() + timeout;
            let mut delay = PROC_POLL_DELAY_MIN;
            while !self.exit.has_exited() && !self.cgroup_empty() && Instant::now() < deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                tokio::time::sleep(delay.min(left)).await;
                delay = (delay * 2).min(STOP_POLL_DELAY_MAX);
            }
            if !self.exit.has_exited() {
                self.kill_all_and_wait().await?;
            }
        }
        if self.recovered && !self.state.helper.is_alive() {
            self.exit.set(self.recovered_exit());
        }
        match self.exit.wait_timeout(KILL_REAP_TIMEOUT).await {
            Some(_) => Ok(()),
            None => Err(DriverError::Timeout {
                task_id: self.config.id.clone(),
                what: "reaping the executor",
                limit: KILL_REAP_TIMEOUT,
            }),
        }
    }

    /// SIGKILLs every process of the cgroup (the helper too) until it is empty.
    async fn kill_all_and_wait(&self) -> Result<(), DriverError> {
        let cgroup = self.cgroup.clone();
        let done = tokio::task::spawn_blocking(move || match cgroup.kill_all() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r);
        done.map_err(|e| DriverError::io(&self.config.id, "killing the task's cgroup", e))
    }

    fn stats(&self) -> Result<TaskStats, DriverError> {
        if self.exit.has_exited() {
            return Err(DriverError::NotRunning(self.config.id.clone()));
        }
        let processes: Vec<_> = self
            .task_pids()
            .into_iter()
            .filter_map(crate::procfs::read_stat)
            .collect();
        let start_ticks = crate::procfs::read_stat(self.state.task_pid)
            .map_or(self.state.helper.start_ticks, |p| p.start_ticks);
        let mut sample = self.cpu_sample.lock().unwrap_or_else(|e| e.into_inner());
        let (stats, next) = crate::process_group::measure(&processes, start_ticks, *sample);
        *sample = Some(next);
        Ok(stats)
    }
}

impl Driver for ExecDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: true,
            exec: false,
            fs_isolation: FsIsolation::Chroot,
            mounts: true,
            network_isolation: true,
            must_initiate_network: false,
        }
    }

    /// Healthy (`driver.exec = "1"`) where the host can isolate: root and a memory cgroup.
    fn fingerprint(&self) -> Fingerprint {
        match host_problem() {
            Some(problem) => Fingerprint::undetected(problem),
            None => Fingerprint::healthy(NAME, BTreeMap::new()),
        }
    }

    fn start(&self, cfg: TaskConfig) -> DriverFuture<'_, TaskHandle> {
        Box::pin(self.start_task(cfg))
    }

    fn wait<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, ExitResult> {
        Box::pin(async move {
            let task = self.tasks.get(task_id)?;
            Ok(task.exit.wait().await.result)
        })
    }

    fn stop<'a>(
        &'a self,
        task_id: &'a str,
        timeout: Duration,
        signal: &'a str,
    ) -> DriverFuture<'a, ()> {
        Box::pin(self.stop_task(task_id, timeout, signal))
    }

    fn destroy<'a>(&'a self, task_id: &'a str, force: bool) -> DriverFuture<'a, ()> {
        Box::pin(self.destroy_task(task_id, force))
    }

    fn signal<'a>(&'a self, task_id: &'a str, signal: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let task = self.tasks.get(task_id)?;
            if signal.trim().is_empty() {
                return Err(DriverError::UnknownSignal(String::new()));
            }
            task.signal_main(parse_signal(signal, DEFAULT_KILL_SIGNAL)?)
        })
    }

    fn inspect<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, TaskStatus> {
        Box::pin(async move { Ok(self.tasks.get(task_id)?.status()) })
    }

    fn stats<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, TaskStats> {
        Box::pin(async move { self.tasks.get(task_id)?.stats() })
    }

    fn recover<'a>(&'a self, handle: &'a TaskHandle) -> DriverFuture<'a, ()> {
        Box::pin(async move { self.recover_task(handle) })
    }

    /// Script checks and template `change_script`s: the same `nsenter` path as `alloc exec`,
    /// run to its end.
    fn exec<'a>(
        &'a self,
        task_id: &'a str,
        cmd: &'a [String],
        timeout: Duration,
    ) -> DriverFuture<'a, ExecResult> {
        Box::pin(async move {
            let stream = self.exec_in_task(task_id, cmd, false).await?;
            Ok(stream.run_to_completion(timeout).await)
        })
    }

    fn exec_streaming<'a>(
        &'a self,
        task_id: &'a str,
        cmd: &'a [String],
        tty: bool,
    ) -> DriverFuture<'a, crate::driver::ExecStream> {
        Box::pin(self.exec_in_task(task_id, cmd, tty))
    }
}

/// The `PATH` a command run inside a task gets when the task's environment has none.
const EXEC_DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

impl ExecDriver {
    /// `alloc exec` inside an exec task: util-linux's `nsenter` joins the task's mount, UTS, IPC
    /// and PID namespaces and its root (the chroot) and working directory, as the task's user,
    /// with the task's environment; the command joins the task's cgroup, so it counts against the
    /// task's limits. `tty`: the command gets a fresh pty as its terminal (nsenter starts a new
    /// session on it; the command, forked into the task's namespaces, inherits it).
    async fn exec_in_task(
        &self,
        task_id: &str,
        cmd: &[String],
        tty: bool,
    ) -> Result<crate::driver::ExecStream, DriverError> {
        let task = self.tasks.get(task_id)?;
        if task.exit.has_exited() {
            return Err(DriverError::NotRunning(task_id.to_string()));
        }
        if cmd.is_empty() {
            return Err(DriverError::invalid(NAME, "exec needs a command"));
        }
        let mut command = tokio::process::Command::new("nsenter");
        command
            .arg("--target")
            .arg(task.state.task_pid.to_string())
            .args(["--mount", "--uts", "--ipc", "--pid", "--root", "--wd"]);
        if task.config.network_isolation.is_some() {
            command.arg("--net");
        }
        // The task's user (`nobody` when unset, as the task itself runs).
        let user = task_user(&task.config);
        let found = nix::unistd::User::from_name(user)
            .ok()
            .flatten()
            .ok_or_else(|| DriverError::invalid(NAME, format!("unknown user {user:?}")))?;
        command
            .arg(format!("--setuid={}", found.uid))
            .arg(format!("--setgid={}", found.gid));
        command.arg("--").args(cmd);
        command.env_clear().envs(&task.config.env);
        if !task.config.env.contains_key("PATH") {
            command.env("PATH", EXEC_DEFAULT_PATH);
        }
        command.kill_on_drop(true);
        let spawn_err = |e| {
            DriverError::io(
                task_id,
                "starting nsenter for exec (is util-linux installed?)",
                e,
            )
        };
        let join_cgroup = |child: &tokio::process::Child| {
            if let Some(pid) = child.id() {
                if let Err(e) = task.cgroup.add_process(pid) {
                    tracing::warn!(task_id, error = %e, "the exec command could not join the task's cgroup");
                }
            }
        };
        if tty {
            let pty =
                crate::pty::open().map_err(|e| DriverError::io(task_id, "opening a pty", e))?;
            let slave = || {
                pty.slave
                    .try_clone()
                    .map(Stdio::from)
                    .map_err(|e| DriverError::io(task_id, "sharing the pty", e))
            };
            command.stdin(slave()?).stdout(slave()?).stderr(slave()?);
            crate::raw_exec::spawn::new_session(&mut command);
            crate::pty::controlling_terminal(&mut command);
            let child = command.spawn().map_err(spawn_err)?;
            join_cgroup(&child);
            // Only the command may hold the slave: the master reads EOF (EIO) once it is gone.
            drop(command);
            return crate::pty::exec_stream(task_id, child, pty);
        }
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let child = command.spawn().map_err(spawn_err)?;
        join_cgroup(&child);
        crate::process_group::exec_stream_of(NAME, task_id, child)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{task_config, TestDir};

    #[tokio::test]
    async fn a_config_without_command_is_refused_before_anything_starts() {
        if host_problem().is_some() {
            println!("skipped: {}", host_problem().unwrap_or_default());
            return;
        }
        let driver = ExecDriver::new_with_helper("/nonexistent-helper");
        let dir = TestDir::new("exec-bad");
        let cfg = task_config(dir.path(), "t1", serde_json::json!({"args": ["x"]}));
        let err = driver.start(cfg).await.unwrap_err();
        assert!(err.to_string().contains("command is required"), "{err}");
    }

    #[tokio::test]
    async fn a_missing_helper_fails_the_start_and_leaves_no_cgroup() {
        if host_problem().is_some() {
            return;
        }
        let driver = ExecDriver::new_with_helper("/nonexistent-helper");
        let dir = TestDir::new("exec-nohelper");
        let cfg = task_config(
            dir.path(),
            "exec-unit-nohelper",
            serde_json::json!({"command": "/bin/true"}),
        );
        let err = driver.start(cfg).await.unwrap_err();
        assert!(matches!(err, DriverError::Start { .. }), "{err}");
        let layout = CgroupLayout::detect().unwrap();
        let cg = Cgroup::at(&layout, CGROUP_PARENT, "exec-unit-nohelper").unwrap();
        assert!(cg.dirs().iter().all(|d| !d.exists()));
    }

    #[test]
    fn cgroup_names_have_no_slashes() {
        assert_eq!(cgroup_name("a/b c"), "a-b-c");
        assert_eq!(cgroup_name("..x"), "x");
    }
}
