//! `raw_exec`: runs the task's command directly on the host, without isolation, in a new
//! process group (session), as Nomad's raw_exec does.
//!
//! Output: with a log helper ([`RawExecDriver::with_logmon`]) and the task's `logs` set, the
//! task writes into fifos that a per-task `logmon` helper rotates into files (see
//! [`crate::logmon`]); otherwise straight into `stdout_path` / `stderr_path`.
//!
//! Off unless the client config enables it (`plugin "raw_exec" { config { enabled = true } }`,
//! or `-dev`): a disabled raw_exec is undetected and refuses to start tasks.

pub(crate) mod spawn;
pub(crate) mod task;

use crate::driver::{
    Capabilities, Driver, DriverFuture, ExecResult, ExecStream, ExitResult, Fingerprint,
    FsIsolation, TaskConfig, TaskHandle, TaskStats, TaskStatus, TASK_HANDLE_VERSION,
};
use crate::error::DriverError;
use crate::exit_cell::ExitCell;
use crate::limits::EXEC_OUTPUT_BYTES_MAX;
use crate::logmon::Logmon;
use crate::output::open_output;
use crate::procfs::ProcIdentity;
use crate::signal::{parse_signal, DEFAULT_KILL_SIGNAL};
use crate::table::TaskTable;
use serde::{Deserialize, Serialize};
use spawn::RawExecTaskConfig;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use task::{Monitor, RawExecState, RawTask};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The driver's name in job files.
pub const NAME: &str = "raw_exec";

/// The plugin's configuration (`plugin "raw_exec" { config { … } }`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RawExecConfig {
    pub enabled: bool,
}

impl RawExecConfig {
    /// What `agent -dev` uses: enabled.
    pub fn dev() -> RawExecConfig {
        RawExecConfig { enabled: true }
    }
}

pub struct RawExecDriver {
    config: RawExecConfig,
    /// The program started as `<helper> logmon` for rotated logs; `None`: no rotation.
    logmon_helper: Option<PathBuf>,
    tasks: TaskTable<RawTask>,
}

impl RawExecDriver {
    pub fn new(config: RawExecConfig) -> RawExecDriver {
        RawExecDriver {
            config,
            logmon_helper: None,
            tasks: TaskTable::new(),
        }
    }

    /// Rotates the logs of tasks that ask for it (`TaskConfig::logs`) through
    /// `<helper> logmon` (the agent passes its own executable).
    pub fn with_logmon(mut self, helper: impl Into<PathBuf>) -> RawExecDriver {
        self.logmon_helper = Some(helper.into());
        self
    }

    /// The task's stdout and stderr: the fifos of a started log helper, or the plain files.
    async fn open_outputs(
        &self,
        cfg: &TaskConfig,
    ) -> Result<(Option<Logmon>, std::fs::File, std::fs::File), DriverError> {
        if let (Some(helper), Some(logs)) = (&self.logmon_helper, &cfg.logs) {
            let (logmon, out) = Logmon::start(helper, cfg, logs).await?;
            return Ok((Some(logmon), out.stdout, out.stderr));
        }
        let stdout = open_output(&cfg.stdout_path)
            .await
            .map_err(|e| DriverError::io(&cfg.id, "opening stdout", e))?;
        let stderr = open_output(&cfg.stderr_path)
            .await
            .map_err(|e| DriverError::io(&cfg.id, "opening stderr", e))?;
        Ok((None, stdout, stderr))
    }

    async fn start_task(&self, cfg: TaskConfig) -> Result<TaskHandle, DriverError> {
        if !self.config.enabled {
            return Err(DriverError::Disabled {
                driver: NAME,
                hint: "enable it with plugin \"raw_exec\" { config { enabled = true } }",
            });
        }
        if self.tasks.contains(&cfg.id) {
            return Err(DriverError::TaskExists(cfg.id));
        }
        if !cfg.mounts.is_empty() {
            // Nomad's raw_exec has no mount support (MountConfigSupportNone): the task would run
            // against the host's paths, not the volume.
            return Err(DriverError::NotSupported(format!(
                "task driver \"{NAME}\" for \"{}\" does not support volume mounts",
                cfg.name
            )));
        }
        let raw = RawExecTaskConfig::parse(&cfg.driver_config)?;
        let program = spawn::lookup_bin(&cfg, &raw.command)?;
        let (logmon, stdout, stderr) = self.open_outputs(&cfg).await?;
        let work_dir = spawn::work_dir(&cfg, raw.work_dir.as_deref());
        let mut cmd = spawn::build_command(
            &cfg,
            &program,
            &raw.args,
            &work_dir,
            stdout.into(),
            stderr.into(),
        )?;
        // ETXTBSY: a program written just before (an artifact, a template, a test's script) is
        // still open for writing in a child another thread of this process forked meanwhile; that
        // child execs or exits within moments, so the spawn is tried again, briefly.
        let mut attempt = 0;
        let mut child = loop {
            match cmd.spawn() {
                Err(e)
                    if e.raw_os_error() == Some(nix::errno::Errno::ETXTBSY as i32)
                        && attempt < 5 =>
                {
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(20 * attempt)).await;
                }
                other => {
                    break other.map_err(|e| DriverError::Start {
                        task_id: cfg.id.clone(),
                        message: format!("running {}: {e}", program.display()),
                        recoverable: false,
                    })?
                }
            }
        };
        let leader = match leader_identity(&cfg.id, child.id()) {
            Ok(leader) => leader,
            Err(e) => {
                let _ = child.start_kill();
                return Err(e);
            }
        };
        let task = Arc::new(RawTask {
            config: cfg,
            leader,
            started_at_unix_ns: crate::now_unix_ns(),
            monitor: Monitor::Child,
            exit: ExitCell::new(),
            cpu_sample: Mutex::new(None),
        });
        task.watch_child(child, logmon);
        if let Err(e) = self.tasks.insert(&task.config.id, Arc::clone(&task)) {
            // Another start of the same id won the race: this process must not outlive it.
            let _ = task.kill_tree_and_wait().await;
            return Err(e);
        }
        tracing::debug!(task_id = %task.config.id, pid = leader.pid, "raw_exec task started");
        Ok(handle_of(&task))
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
        // Whatever the task left behind (a daemonised grandchild) dies with it, as Nomad's
        // executor kills the process group on shutdown.
        task.kill_tree_and_wait().await?;
        if task.monitor == Monitor::Recovered {
            task.exit.set(task::unknown_exit());
        }
        self.tasks.remove(task_id);
        Ok(())
    }

    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        let id = &handle.task_id;
        handle.check_for(NAME)?;
        if self.tasks.contains(id) {
            return Ok(());
        }
        let state: RawExecState =
            serde_json::from_value(handle.state.clone()).map_err(|e| DriverError::Recover {
                task_id: id.clone(),
                message: format!("driver state: {e}"),
            })?;
        let task = Arc::new(RawTask {
            config: handle.config.clone(),
            leader: state.leader,
            started_at_unix_ns: handle.started_at_unix_ns,
            monitor: Monitor::Recovered,
            exit: ExitCell::new(),
            cpu_sample: Mutex::new(None),
        });
        if state.leader.is_alive() {
            task.watch_recovered();
        } else {
            task.exit.set(task::unknown_exit());
        }
        self.tasks.insert(id, task)?;
        tracing::debug!(task_id = %id, pid = state.leader.pid, "raw_exec task recovered");
        Ok(())
    }

    async fn exec_in_task(
        &self,
        task_id: &str,
        cmd: &[String],
        timeout: Duration,
    ) -> Result<ExecResult, DriverError> {
        let task = self.tasks.get(task_id)?;
        if task.exit.has_exited() {
            return Err(DriverError::NotRunning(task_id.to_string()));
        }
        let (bin, args) = cmd
            .split_first()
            .ok_or_else(|| DriverError::invalid(NAME, "exec needs a command"))?;
        let program = spawn::lookup_bin(&task.config, bin)?;
        let mut command = spawn::build_command(
            &task.config,
            &program,
            args,
            &task.config.task_dir.dir,
            Stdio::piped(),
            Stdio::piped(),
        )?;
        let mut child = command
            .spawn()
            .map_err(|e| DriverError::io(task_id, "starting the exec command", e))?;
        let group = child
            .id()
            .and_then(ProcIdentity::of)
            .map(|leader| crate::process_group::TaskGroup { leader });
        let out = child.stdout.take();
        let err = child.stderr.take();
        let run = async {
            let (stdout, stderr, status) =
                tokio::join!(read_capped(out), read_capped(err), child.wait());
            let status = status.map_err(|e| DriverError::io(task_id, "waiting for exec", e))?;
            Ok::<_, DriverError>(ExecResult {
                stdout,
                stderr,
                exit: task::exit_from_status(status),
            })
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(result) => result,
            Err(_) => {
                if let Some(group) = group {
                    let _ = group.signal(nix::sys::signal::SIGKILL);
                }
                Err(DriverError::Timeout {
                    task_id: task_id.to_string(),
                    what: "exec",
                    limit: timeout,
                })
            }
        }
    }

    /// `exec_streaming`: the command in the task's directory and environment, in its own
    /// session (so a kill reaches everything it starts), on pipes.
    async fn exec_stream_in_task(
        &self,
        task_id: &str,
        cmd: &[String],
        tty: bool,
    ) -> Result<ExecStream, DriverError> {
        let task = self.tasks.get(task_id)?;
        if task.exit.has_exited() {
            return Err(DriverError::NotRunning(task_id.to_string()));
        }
        let (bin, args) = cmd
            .split_first()
            .ok_or_else(|| DriverError::invalid(NAME, "exec needs a command"))?;
        let program = spawn::lookup_bin(&task.config, bin)?;
        if tty {
            return exec_on_pty(&task.config, task_id, &program, args);
        }
        let mut command = spawn::build_command(
            &task.config,
            &program,
            args,
            &task.config.task_dir.dir,
            Stdio::piped(),
            Stdio::piped(),
        )?;
        command.stdin(Stdio::piped());
        let child = command
            .spawn()
            .map_err(|e| DriverError::io(task_id, "starting the exec command", e))?;
        crate::process_group::exec_stream_of(NAME, task_id, child)
    }
}

/// `alloc exec -t`: the command on a fresh pty (its controlling terminal); output arrives on
/// stdout only, as from a terminal.
fn exec_on_pty(
    cfg: &TaskConfig,
    task_id: &str,
    program: &std::path::Path,
    args: &[String],
) -> Result<ExecStream, DriverError> {
    let io_err = |what: &'static str, e: std::io::Error| DriverError::io(task_id, what, e);
    let pty = crate::pty::open().map_err(|e| io_err("opening a pty", e))?;
    let slave = |pty: &crate::pty::Pty| {
        pty.slave
            .try_clone()
            .map(Stdio::from)
            .map_err(|e| io_err("sharing the pty", e))
    };
    let mut command = spawn::build_command(
        cfg,
        program,
        args,
        &cfg.task_dir.dir,
        slave(&pty)?,
        slave(&pty)?,
    )?;
    command.stdin(slave(&pty)?);
    crate::pty::controlling_terminal(&mut command);
    let child = command
        .spawn()
        .map_err(|e| io_err("starting the exec command", e))?;
    // Only the command may hold the slave: the master reads EOF (EIO) once it is gone.
    drop(command);
    crate::pty::exec_stream(task_id, child, pty)
}

/// The main process's identity, read right after spawn (it cannot have been reaped yet: only
/// the monitor, started after this, reaps it).
fn leader_identity(task_id: &str, pid: Option<u32>) -> Result<ProcIdentity, DriverError> {
    pid.and_then(ProcIdentity::of)
        .ok_or_else(|| DriverError::Start {
            task_id: task_id.to_string(),
            message: "the process disappeared right after it started".to_string(),
            recoverable: true,
        })
}

fn handle_of(task: &RawTask) -> TaskHandle {
    TaskHandle {
        version: TASK_HANDLE_VERSION,
        task_id: task.config.id.clone(),
        driver: NAME.to_string(),
        config: task.config.clone(),
        pid: Some(task.leader.pid),
        started_at_unix_ns: task.started_at_unix_ns,
        state: serde_json::to_value(task.state()).expect("raw_exec state serialises"),
    }
}

/// Reads a pipe to its end, keeping at most [`EXEC_OUTPUT_BYTES_MAX`] bytes.
async fn read_capped(pipe: Option<impl AsyncRead + Unpin>) -> Vec<u8> {
    let Some(mut pipe) = pipe else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = EXEC_OUTPUT_BYTES_MAX.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

impl Driver for RawExecDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: true,
            exec: true,
            fs_isolation: FsIsolation::None,
            mounts: false,
            network_isolation: true,
            must_initiate_network: false,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        if self.config.enabled {
            Fingerprint::healthy(NAME, BTreeMap::new())
        } else {
            Fingerprint::undetected("disabled")
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
            task.signal_leader(parse_signal(signal, DEFAULT_KILL_SIGNAL)?)
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

    fn exec<'a>(
        &'a self,
        task_id: &'a str,
        cmd: &'a [String],
        timeout: Duration,
    ) -> DriverFuture<'a, ExecResult> {
        Box::pin(self.exec_in_task(task_id, cmd, timeout))
    }

    fn exec_streaming<'a>(
        &'a self,
        task_id: &'a str,
        cmd: &'a [String],
        tty: bool,
    ) -> DriverFuture<'a, ExecStream> {
        Box::pin(self.exec_stream_in_task(task_id, cmd, tty))
    }
}
