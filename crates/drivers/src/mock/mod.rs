//! `mock_driver`: a driver for tests that runs no process. A task is a tokio timer that writes
//! configured output and exits with a configured result (the keys of Nomad's mock driver:
//! `run_for`, `exit_code`, `exit_signal`, `exit_err_msg`, `start_error`,
//! `start_error_recoverable`, `start_block_for`, `kill_after`, `signal_error`,
//! `stdout_string`/`stderr_string`, `*_repeat`, `*_repeat_duration`).

mod config;

use crate::driver::{
    Capabilities, Driver, DriverFuture, ExecResult, ExitResult, Fingerprint, FsIsolation,
    TaskConfig, TaskHandle, TaskState, TaskStats, TaskStatus, TASK_HANDLE_VERSION,
};
use crate::error::DriverError;
use crate::exit_cell::ExitCell;
use crate::limits::KILL_REAP_TIMEOUT;
use crate::output::open_output;
use crate::table::TaskTable;
pub use config::{MockOutput, MockTaskConfig};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;

/// The driver's name in job files, as Nomad's (`driver = "mock_driver"`).
pub const NAME: &str = "mock_driver";

struct MockTask {
    config: TaskConfig,
    mock: MockTaskConfig,
    started_at_unix_ns: i64,
    exit: ExitCell,
    /// Set to true to end the task (a stop after `kill_after`, or a forced destroy).
    kill: watch::Sender<bool>,
}

impl MockTask {
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
            pid: None,
            started_at_unix_ns: self.started_at_unix_ns,
            completed_at_unix_ns: exited.as_ref().map(|e| e.at_unix_ns),
            exit_result: exited.map(|e| e.result),
        }
    }

    fn configured_exit(&self) -> ExitResult {
        ExitResult {
            exit_code: self.mock.exit_code,
            signal: self.mock.exit_signal,
            oom_killed: false,
            err: self.mock.exit_err_msg.clone(),
        }
    }

    async fn kill_and_wait(&self) -> Result<(), DriverError> {
        self.kill.send_replace(true);
        match self.exit.wait_timeout(KILL_REAP_TIMEOUT).await {
            Some(_) => Ok(()),
            None => Err(DriverError::Timeout {
                task_id: self.config.id.clone(),
                what: "stopping the mock task",
                limit: KILL_REAP_TIMEOUT,
            }),
        }
    }
}

/// Runs the task: output writers and the `run_for` timer together; the task exits when both
/// are done (or at once when a write fails), or early when killed.
async fn run(task: Arc<MockTask>, run_for: Duration, write_output: bool) {
    let kill = task.kill.subscribe();
    let writers = async {
        if !write_output {
            return Ok(());
        }
        let (out, err) = tokio::join!(
            write_repeated(&task.config.stdout_path, &task.mock.stdout, kill.clone()),
            write_repeated(&task.config.stderr_path, &task.mock.stderr, kill.clone()),
        );
        out.and(err)
    };
    let timer = async {
        let mut kill = kill.clone();
        tokio::select! {
            _ = tokio::time::sleep(run_for) => {}
            _ = kill.wait_for(|k| *k) => {}
        }
    };
    tokio::pin!(writers, timer);
    let (mut timer_done, mut writers_done) = (false, false);
    while !(timer_done && writers_done) {
        tokio::select! {
            _ = &mut timer, if !timer_done => timer_done = true,
            written = &mut writers, if !writers_done => {
                if let Err(message) = written {
                    task.exit.set(ExitResult { err: Some(message), ..Default::default() });
                    return;
                }
                writers_done = true;
            }
        }
    }
    task.exit.set(task.configured_exit());
}

async fn write_repeated(
    path: &Path,
    output: &MockOutput,
    mut kill: watch::Receiver<bool>,
) -> Result<(), String> {
    if output.text.is_empty() {
        return Ok(());
    }
    let fail = |e: std::io::Error| format!("writing to {}: {e}", path.display());
    let mut file = tokio::fs::File::from_std(open_output(path).await.map_err(fail)?);
    file.write_all(output.text.as_bytes()).await.map_err(fail)?;
    for _ in 0..output.repeat {
        tokio::select! {
            _ = kill.wait_for(|k| *k) => break,
            _ = tokio::time::sleep(output.every) => {}
        }
        file.write_all(output.text.as_bytes()).await.map_err(fail)?;
    }
    file.flush().await.map_err(fail)
}

pub struct MockDriver {
    tasks: TaskTable<MockTask>,
    /// Every config `start` accepted, in order (tests read mounts and env from it). Never held
    /// across `.await`.
    started: std::sync::Mutex<Vec<TaskConfig>>,
}

impl Default for MockDriver {
    fn default() -> Self {
        MockDriver::new()
    }
}

impl MockDriver {
    pub fn new() -> MockDriver {
        MockDriver {
            tasks: TaskTable::new(),
            started: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Every task config this driver started (not recovered), oldest first.
    pub fn started(&self) -> Vec<TaskConfig> {
        self.started.lock().expect("started lock").clone()
    }

    fn launch(
        &self,
        config: TaskConfig,
        mock: MockTaskConfig,
        started_at_unix_ns: i64,
        run_for: Duration,
        write_output: bool,
    ) -> Result<Arc<MockTask>, DriverError> {
        let task = Arc::new(MockTask {
            config,
            mock,
            started_at_unix_ns,
            exit: ExitCell::new(),
            kill: watch::Sender::new(false),
        });
        self.tasks.insert(&task.config.id, Arc::clone(&task))?;
        tokio::spawn(run(Arc::clone(&task), run_for, write_output));
        Ok(task)
    }

    async fn start_task(&self, cfg: TaskConfig) -> Result<TaskHandle, DriverError> {
        let mock = MockTaskConfig::parse(&cfg.driver_config)?;
        if !mock.start_block_for.is_zero() {
            tokio::time::sleep(mock.start_block_for).await;
        }
        if let Some(message) = &mock.start_error {
            return Err(DriverError::Start {
                task_id: cfg.id.clone(),
                message: message.clone(),
                recoverable: mock.start_error_recoverable,
            });
        }
        for m in &cfg.mounts {
            m.check()
                .map_err(|message| DriverError::invalid(NAME, message))?;
        }
        let run_for = mock.run_for;
        let task = self.launch(cfg, mock, crate::now_unix_ns(), run_for, true)?;
        self.started
            .lock()
            .expect("started lock")
            .push(task.config.clone());
        Ok(TaskHandle {
            version: TASK_HANDLE_VERSION,
            task_id: task.config.id.clone(),
            driver: NAME.to_string(),
            config: task.config.clone(),
            pid: None,
            started_at_unix_ns: task.started_at_unix_ns,
            state: serde_json::Value::Null,
        })
    }

    /// Nomad's mock: a stop waits `kill_after` (or for the task to end by itself), then ends it.
    /// The caller's timeout and signal do not change that.
    async fn stop_task(&self, task_id: &str) -> Result<(), DriverError> {
        let task = self.tasks.get(task_id)?;
        if task.exit.has_exited() {
            return Ok(());
        }
        tokio::select! {
            _ = task.exit.wait() => Ok(()),
            _ = tokio::time::sleep(task.mock.kill_after) => task.kill_and_wait().await,
        }
    }

    async fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        let task = self.tasks.get(task_id)?;
        if !task.exit.has_exited() {
            if !force {
                return Err(DriverError::StillRunning(task_id.to_string()));
            }
            task.kill_and_wait().await?;
        }
        self.tasks.remove(task_id);
        Ok(())
    }

    /// Resumes a task from its handle: it runs for what is left of `run_for` and does not
    /// write its output again.
    fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        handle.check_for(NAME)?;
        if self.tasks.contains(&handle.task_id) {
            return Ok(());
        }
        let mock = MockTaskConfig::parse(&handle.config.driver_config)?;
        let ran_ns = crate::now_unix_ns().saturating_sub(handle.started_at_unix_ns);
        let ran = Duration::from_nanos(u64::try_from(ran_ns).unwrap_or(0));
        let left = mock.run_for.saturating_sub(ran);
        self.launch(
            handle.config.clone(),
            mock,
            handle.started_at_unix_ns,
            left,
            false,
        )?;
        Ok(())
    }
}

impl Driver for MockDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: true,
            exec: true,
            fs_isolation: FsIsolation::None,
            mounts: true,
            network_isolation: false,
            must_initiate_network: false,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        Fingerprint::healthy(NAME, BTreeMap::new())
    }

    fn start(&self, cfg: TaskConfig) -> DriverFuture<'_, TaskHandle> {
        Box::pin(self.start_task(cfg))
    }

    fn wait<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, ExitResult> {
        Box::pin(async move { Ok(self.tasks.get(task_id)?.exit.wait().await.result) })
    }

    fn stop<'a>(
        &'a self,
        task_id: &'a str,
        _timeout: Duration,
        _signal: &'a str,
    ) -> DriverFuture<'a, ()> {
        Box::pin(self.stop_task(task_id))
    }

    fn destroy<'a>(&'a self, task_id: &'a str, force: bool) -> DriverFuture<'a, ()> {
        Box::pin(self.destroy_task(task_id, force))
    }

    fn signal<'a>(&'a self, task_id: &'a str, signal: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let task = self.tasks.get(task_id)?;
            match &task.mock.signal_error {
                Some(message) => Err(DriverError::Signal {
                    task_id: task_id.to_string(),
                    signal: signal.to_string(),
                    message: message.clone(),
                }),
                None if task.exit.has_exited() => Err(DriverError::NotRunning(task_id.into())),
                None => Ok(()),
            }
        })
    }

    fn inspect<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, TaskStatus> {
        Box::pin(async move { Ok(self.tasks.get(task_id)?.status()) })
    }

    fn stats<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, TaskStats> {
        Box::pin(async move {
            let task = self.tasks.get(task_id)?;
            if task.exit.has_exited() {
                return Err(DriverError::NotRunning(task_id.to_string()));
            }
            Ok(TaskStats {
                timestamp_unix_ns: crate::now_unix_ns(),
                ..Default::default()
            })
        })
    }

    fn recover<'a>(&'a self, handle: &'a TaskHandle) -> DriverFuture<'a, ()> {
        Box::pin(async move { self.recover_task(handle) })
    }

    fn exec<'a>(
        &'a self,
        task_id: &'a str,
        cmd: &'a [String],
        _timeout: Duration,
    ) -> DriverFuture<'a, ExecResult> {
        Box::pin(async move {
            let task = self.tasks.get(task_id)?;
            Ok(ExecResult {
                stdout: format!("Exec({:?}, {:?})", task.config.name, cmd).into_bytes(),
                stderr: Vec::new(),
                exit: ExitResult::default(),
            })
        })
    }
}
