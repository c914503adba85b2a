//! What a user asks of an allocation on this client (Nomad's client `Allocations` endpoints):
//! signal and restart go through the task's runner (which records the events and keeps the
//! restart policy out of it); stats and exec go to the driver through the running task's handle.

use crate::alloc_runner::TaskAccess;
use crate::client::Client;
use crate::limits::USER_ACTION_TIMEOUT;
use crate::task_runner::TaskCommand;
use drivers::{DriverError, ExecStream, TaskStats};
use std::collections::BTreeMap;
use tokio::sync::oneshot;

/// Why a user action on an allocation failed. Callers match on the variant.
#[derive(Debug, thiserror::Error)]
pub enum AllocActionError {
    /// This client runs no allocation with that ID.
    #[error("unknown allocation {0:?} on this client")]
    UnknownAlloc(String),
    /// The allocation has no task of that name.
    #[error("unknown task {task:?} in allocation {alloc_id:?}")]
    UnknownTask { alloc_id: String, task: String },
    /// No process of the task runs now (not started, restarting, dead).
    #[error("task {0:?} is not running")]
    NotRunning(String),
    /// The driver refused or failed (an unknown signal, exec not supported, …).
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// The allocation is stopping or has ended: it is not restarted.
    #[error("restart of allocation {0:?} that should not run (it is stopping or has ended)")]
    ShouldNotRun(String),
    /// The task runner did not answer in time.
    #[error("task {0:?} did not answer within {USER_ACTION_TIMEOUT:?}")]
    Timeout(String),
}

impl Client {
    /// Sends `signal` to `task`, or to every running task when `None` (`alloc signal`).
    pub async fn signal_alloc(
        &self,
        alloc_id: &str,
        task: Option<&str>,
        signal: &str,
    ) -> Result<(), AllocActionError> {
        // A name no driver knows is refused before anything is looked up (Nomad's drivers send
        // SIGINT instead, silently; a typo should not become a different signal).
        drivers::signal::parse_signal(signal, drivers::signal::DEFAULT_KILL_SIGNAL)?;
        for (name, access) in self.targets(alloc_id, task)? {
            let signal = signal.to_string();
            ask(&name, &access, |reply| TaskCommand::Signal {
                signal,
                reply,
            })
            .await?;
        }
        Ok(())
    }

    /// Restarts `task` in place, or every running task when `None` (`alloc restart`). Returns
    /// once the old processes have stopped; the new ones start right after.
    pub async fn restart_alloc(
        &self,
        alloc_id: &str,
        task: Option<&str>,
    ) -> Result<(), AllocActionError> {
        for (name, access) in self.targets(alloc_id, task)? {
            ask(&name, &access, |reply| TaskCommand::Restart {
                reply,
                hold: false,
            })
            .await?;
        }
        Ok(())
    }

    /// Restarts every task of the allocation, dead ones included, in lifecycle order
    /// (`alloc restart -all-tasks`). Returns once the running tasks have stopped.
    pub async fn restart_all_tasks(&self, alloc_id: &str) -> Result<(), AllocActionError> {
        let unknown = || AllocActionError::UnknownAlloc(alloc_id.to_string());
        let cmds = self.runners.commands(alloc_id).ok_or_else(unknown)?;
        let (tx, rx) = oneshot::channel();
        cmds.send(crate::alloc_runner::AllocCommand::RestartAll(tx))
            .await
            .map_err(|_| unknown())?;
        // The runner answers after each running task answered (each within the action timeout).
        match rx.await {
            Ok(result) => result,
            Err(_) => Err(unknown()),
        }
    }

    /// The resource usage of each running task of the allocation.
    pub async fn alloc_stats(
        &self,
        alloc_id: &str,
    ) -> Result<BTreeMap<String, TaskStats>, AllocActionError> {
        let tasks = self
            .runners
            .tasks(alloc_id)
            .ok_or_else(|| AllocActionError::UnknownAlloc(alloc_id.to_string()))?;
        let mut out = BTreeMap::new();
        for (name, access) in tasks {
            let Some(handle) = access.handle else {
                continue;
            };
            let Some(driver) = self.runners.driver(&handle.driver) else {
                continue;
            };
            match driver.stats(&handle.task_id).await {
                Ok(stats) => {
                    out.insert(name, stats);
                }
                Err(DriverError::NotRunning(_) | DriverError::TaskNotFound(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    /// Statistics of the device instances each task of the allocation was given (tasks
    /// without devices are left out).
    pub async fn alloc_device_stats(
        &self,
        alloc_id: &str,
    ) -> Result<BTreeMap<String, Vec<model::device::DeviceGroupStats>>, AllocActionError> {
        let labels = self
            .runners
            .labels(alloc_id)
            .ok_or_else(|| AllocActionError::UnknownAlloc(alloc_id.to_string()))?;
        if labels.devices.is_empty() {
            return Ok(BTreeMap::new());
        }
        let devices = std::sync::Arc::clone(&self.devices);
        let per_task = labels.devices.clone();
        Ok(tokio::task::spawn_blocking(move || {
            per_task
                .into_iter()
                .map(|(task, given)| (task, devices.stats_of(&given)))
                .collect()
        })
        .await
        .unwrap_or_default())
    }

    /// The latest result of each check of the allocation's nomad services.
    pub fn alloc_checks(
        &self,
        alloc_id: &str,
    ) -> Result<BTreeMap<String, model::checks::CheckQueryResult>, AllocActionError> {
        self.runners
            .checks(alloc_id)
            .ok_or_else(|| AllocActionError::UnknownAlloc(alloc_id.to_string()))
    }

    /// Starts `cmd` inside the running `task` with piped stdio (`alloc exec`).
    pub async fn exec_alloc(
        &self,
        alloc_id: &str,
        task: &str,
        cmd: &[String],
        tty: bool,
    ) -> Result<ExecStream, AllocActionError> {
        let (name, access) = self
            .targets(alloc_id, Some(task))?
            .into_iter()
            .next()
            .ok_or_else(|| AllocActionError::NotRunning(task.to_string()))?;
        let handle = access
            .handle
            .ok_or_else(|| AllocActionError::NotRunning(name.clone()))?;
        let driver = self.runners.driver(&handle.driver).ok_or_else(|| {
            AllocActionError::Driver(DriverError::NotSupported(format!(
                "driver {:?} is not on this node",
                handle.driver
            )))
        })?;
        Ok(driver.exec_streaming(&handle.task_id, cmd, tty).await?)
    }

    /// The host's resource usage (`/v1/client/stats`).
    pub async fn host_stats(&self) -> crate::HostStats {
        let data_dir = self.config().data_dir.clone();
        let mhz = self
            .node()
            .node_resources
            .as_ref()
            .map_or(0, |r| u64::try_from(r.cpu.cpu_shares).unwrap_or(0));
        tokio::task::spawn_blocking(move || crate::HostStats::read(&data_dir, mhz))
            .await
            .unwrap_or_default()
    }

    /// The task named, or every task with a running process.
    fn targets(
        &self,
        alloc_id: &str,
        task: Option<&str>,
    ) -> Result<Vec<(String, TaskAccess)>, AllocActionError> {
        let mut tasks = self
            .runners
            .tasks(alloc_id)
            .ok_or_else(|| AllocActionError::UnknownAlloc(alloc_id.to_string()))?;
        match task.filter(|t| !t.is_empty()) {
            Some(name) => {
                let access = tasks
                    .remove(name)
                    .ok_or_else(|| AllocActionError::UnknownTask {
                        alloc_id: alloc_id.to_string(),
                        task: name.to_string(),
                    })?;
                Ok(vec![(name.to_string(), access)])
            }
            None => {
                let running: Vec<(String, TaskAccess)> = tasks
                    .into_iter()
                    .filter(|(_, a)| a.handle.is_some())
                    .collect();
                if running.is_empty() {
                    return Err(AllocActionError::NotRunning(format!(
                        "every task of allocation {alloc_id}"
                    )));
                }
                Ok(running)
            }
        }
    }
}

/// Sends a command with a reply channel to a task runner and waits for the answer.
async fn ask(
    name: &str,
    access: &TaskAccess,
    make: impl FnOnce(oneshot::Sender<Result<(), AllocActionError>>) -> TaskCommand,
) -> Result<(), AllocActionError> {
    let not_running = || AllocActionError::NotRunning(name.to_string());
    let cmds = access.cmds.as_ref().ok_or_else(not_running)?;
    if access.handle.is_none() {
        return Err(not_running());
    }
    let (tx, rx) = oneshot::channel();
    cmds.send(make(tx)).await.map_err(|_| not_running())?;
    match tokio::time::timeout(USER_ACTION_TIMEOUT, rx).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(not_running()),
        Err(_) => Err(AllocActionError::Timeout(name.to_string())),
    }
}
