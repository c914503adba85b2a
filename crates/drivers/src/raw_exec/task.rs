//! One raw_exec task: its process group, how its exit becomes known, and stopping it.

use crate::driver::{ExitResult, TaskConfig, TaskState, TaskStats, TaskStatus};
use crate::error::DriverError;
use crate::exit_cell::ExitCell;
use crate::limits::{KILL_REAP_TIMEOUT, PROC_POLL_DELAY_MAX, PROC_POLL_DELAY_MIN};
use crate::logmon::Logmon;
use crate::process_group::{self, CpuSample, TaskGroup};
use crate::procfs::ProcIdentity;
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// The driver-private part of the persisted handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RawExecState {
    /// The task's main process; it leads the task's process group (pgid = pid).
    pub leader: ProcIdentity,
}

/// How the exit becomes known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Monitor {
    /// We spawned the process: a tokio task waits on it and records its exit status.
    Child,
    /// Recovered after a client restart: the process is not our child (it was reparented when
    /// the old client died), so `waitpid` cannot be used and its exit status is lost. A tokio
    /// task polls /proc with backoff until the pid is gone, a zombie, or another process's.
    Recovered,
}

pub(crate) struct RawTask {
    pub config: TaskConfig,
    pub leader: ProcIdentity,
    pub started_at_unix_ns: i64,
    pub monitor: Monitor,
    pub exit: ExitCell,
    /// The last CPU sample, for the percent between two `stats` calls. Held only to swap it.
    pub cpu_sample: Mutex<Option<CpuSample>>,
}

/// What a recovered task reports when it is found exited: the status is unknown.
pub(crate) fn unknown_exit() -> ExitResult {
    ExitResult {
        exit_code: 0,
        signal: 0,
        oom_killed: false,
        err: Some(
            "the task exited while the client was not running; its exit status is unknown"
                .to_string(),
        ),
    }
}

/// An exit status as Nomad's executor reports it: a signal death is `128 + signal`.
pub(crate) fn exit_from_status(status: std::process::ExitStatus) -> ExitResult {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitResult {
            exit_code: code,
            ..Default::default()
        },
        (None, Some(signal)) => ExitResult {
            exit_code: 128 + signal,
            signal,
            ..Default::default()
        },
        (None, None) => ExitResult {
            exit_code: -1,
            err: Some(format!("unrecognised wait status {status:?}")),
            ..Default::default()
        },
    }
}

impl RawTask {
    pub fn group(&self) -> TaskGroup {
        TaskGroup {
            leader: self.leader,
        }
    }

    pub fn state(&self) -> RawExecState {
        RawExecState {
            leader: self.leader,
        }
    }

    /// Records the exit of a spawned child when it comes, once its log helper (if any) has
    /// written the last of its output.
    pub fn watch_child(self: &Arc<Self>, mut child: tokio::process::Child, logmon: Option<Logmon>) {
        let task = Arc::clone(self);
        tokio::spawn(async move {
            let result = match child.wait().await {
                Ok(status) => exit_from_status(status),
                Err(e) => ExitResult {
                    exit_code: -1,
                    err: Some(format!("waiting for the task's process failed: {e}")),
                    ..Default::default()
                },
            };
            if let Some(logmon) = logmon {
                logmon.drained(&task.config.id).await;
            }
            tracing::debug!(task_id = %task.config.id, ?result, "raw_exec task exited");
            task.exit.set(result);
        });
    }

    /// Polls /proc until the recovered leader is gone. Holds only a weak reference, so a
    /// destroyed task's poller ends at its next look.
    pub fn watch_recovered(self: &Arc<Self>) {
        let weak: Weak<RawTask> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut delay = PROC_POLL_DELAY_MIN;
            loop {
                let Some(task) = weak.upgrade() else { return };
                if task.exit.has_exited() {
                    return;
                }
                if !task.leader.is_alive() {
                    task.exit.set(unknown_exit());
                    return;
                }
                drop(task);
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(PROC_POLL_DELAY_MAX);
            }
        });
    }

    pub fn status(&self) -> TaskStatus {
        let exited = self.exit.get();
        TaskStatus {
            task_id: self.config.id.clone(),
            name: self.config.name.clone(),
            state: if exited.is_some() {
                TaskState::Exited
            } else {
                TaskState::Running
            },
            pid: Some(self.leader.pid),
            started_at_unix_ns: self.started_at_unix_ns,
            completed_at_unix_ns: exited.as_ref().map(|e| e.at_unix_ns),
            exit_result: exited.map(|e| e.result),
        }
    }

    /// Signals the main process only (`alloc signal`), never a recycled pid.
    pub fn signal_leader(&self, signal: Signal) -> Result<(), DriverError> {
        if self.exit.has_exited() || !self.leader.is_alive() {
            return Err(DriverError::NotRunning(self.config.id.clone()));
        }
        nix::sys::signal::kill(process_group::to_pid(self.leader.pid), signal).map_err(|e| {
            DriverError::Signal {
                task_id: self.config.id.clone(),
                signal: signal.to_string(),
                message: e.to_string(),
            }
        })
    }

    /// Sends `signal` to the whole tree, waits up to `timeout` for it to end, then SIGKILLs what
    /// is left and waits up to [`KILL_REAP_TIMEOUT`] more.
    pub async fn stop(&self, signal: Signal, timeout: Duration) -> Result<(), DriverError> {
        let id = &self.config.id;
        let group = self.group();
        if group.alive() {
            let escaped = group
                .signal(signal)
                .map_err(|e| DriverError::io(id, "sending the kill signal", e))?;
            if !group.wait_dead(timeout, &escaped).await {
                tracing::debug!(task_id = %id, ?timeout, "kill timeout passed; sending SIGKILL");
                self.kill_tree_and_wait_with(&escaped).await?;
            }
        }
        self.await_exit_record().await
    }

    /// SIGKILLs the whole tree and waits for it to end.
    pub async fn kill_tree_and_wait(&self) -> Result<(), DriverError> {
        self.kill_tree_and_wait_with(&[]).await
    }

    /// SIGKILLs the whole tree and the escaped descendants an earlier signal found, and waits.
    async fn kill_tree_and_wait_with(&self, earlier: &[(u32, u64)]) -> Result<(), DriverError> {
        let id = &self.config.id;
        let group = self.group();
        let mut escaped = group
            .signal(Signal::SIGKILL)
            .map_err(|e| DriverError::io(id, "sending SIGKILL", e))?;
        crate::process_group::signal_escaped(earlier, Signal::SIGKILL);
        escaped.extend_from_slice(earlier);
        if group.wait_dead(KILL_REAP_TIMEOUT, &escaped).await {
            Ok(())
        } else {
            Err(DriverError::Timeout {
                task_id: id.clone(),
                what: "killing the process tree",
                limit: KILL_REAP_TIMEOUT,
            })
        }
    }

    /// Once the tree is dead, makes sure the exit is recorded before returning, so `inspect`
    /// right after `stop` says exited.
    async fn await_exit_record(&self) -> Result<(), DriverError> {
        if self.monitor == Monitor::Recovered {
            self.exit.set(unknown_exit());
        }
        match self.exit.wait_timeout(KILL_REAP_TIMEOUT).await {
            Some(_) => Ok(()),
            None => Err(DriverError::Timeout {
                task_id: self.config.id.clone(),
                what: "reaping the task's main process",
                limit: KILL_REAP_TIMEOUT,
            }),
        }
    }

    pub fn stats(&self) -> Result<TaskStats, DriverError> {
        if self.exit.has_exited() {
            return Err(DriverError::NotRunning(self.config.id.clone()));
        }
        let mut sample = self.cpu_sample.lock().unwrap_or_else(|e| e.into_inner());
        let (stats, next) = self.group().measure(*sample);
        *sample = Some(next);
        Ok(stats)
    }
}
