//! One running container: its monitor (wait for the exit, copy the output into the task's log
//! files) and what `inspect`/`stats` read from it.

use crate::driver::{ExitResult, TaskConfig, TaskState, TaskStats, TaskStatus};
use crate::exit_cell::ExitCell;
use crate::limits::{
    DOCKER_CALL_TIMEOUT, DOCKER_LOG_DRAIN_TIMEOUT, DOCKER_WAIT_RETRY_DELAY_MAX,
    DOCKER_WAIT_RETRY_DELAY_MIN,
};
use crate::logmon::{RotatingWriter, RotationLimits};
use crate::output::open_output;
use bollard::container::LogOutput;
use bollard::models::ContainerStatsResponse;
use bollard::query_parameters::LogsOptionsBuilder;
use bollard::Docker;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What the handle persists beyond the task config: the container to reattach to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DockerState {
    pub container_id: String,
    pub image_id: String,
}

pub(crate) struct DockerTask {
    pub config: TaskConfig,
    pub state: DockerState,
    pub pid: Option<u32>,
    pub started_at_unix_ns: i64,
    pub exit: ExitCell,
    /// The previous stats sample (when, total CPU seconds), for `cpu_percent`. Held only for a
    /// read-and-replace, never across an `.await`.
    pub cpu_sample: Mutex<Option<(Instant, f64)>>,
}

impl DockerTask {
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
            pid: self.pid,
            started_at_unix_ns: self.started_at_unix_ns,
            completed_at_unix_ns: exited.as_ref().map(|e| e.at_unix_ns),
            exit_result: exited.map(|e| e.result),
        }
    }

    /// Waits for the container to exit and records how it ended, after its output has been
    /// copied (for at most [`DOCKER_LOG_DRAIN_TIMEOUT`]). `logs_since_unix_s`: 0 copies the
    /// output from the start; a recovered task copies only what comes after the recovery.
    pub fn monitor(self: &Arc<Self>, docker: Docker, logs_since_unix_s: i32) {
        let task = Arc::clone(self);
        tokio::spawn(async move {
            let logs = tokio::spawn(copy_logs(
                docker.clone(),
                task.config.clone(),
                task.state.container_id.clone(),
                logs_since_unix_s,
            ));
            let result = wait_exit(&docker, &task.state.container_id).await;
            if tokio::time::timeout(DOCKER_LOG_DRAIN_TIMEOUT, logs)
                .await
                .is_err()
            {
                tracing::warn!(task_id = %task.config.id, "the container's output did not drain in time");
            }
            tracing::debug!(task_id = %task.config.id, ?result, "docker task exited");
            task.exit.set(result);
        });
    }

    /// Turns one stats sample into the driver's figures; CPU percent comes from the previous
    /// sample this task took.
    pub fn stats_from(&self, s: &ContainerStatsResponse) -> TaskStats {
        let ns = |v: Option<u64>| v.unwrap_or(0) as f64 / 1e9;
        let cpu = s.cpu_stats.as_ref().and_then(|c| c.cpu_usage.as_ref());
        let user = ns(cpu.and_then(|c| c.usage_in_usermode));
        let system = ns(cpu.and_then(|c| c.usage_in_kernelmode));
        let total = ns(cpu.and_then(|c| c.total_usage));
        let now = Instant::now();
        let previous = {
            let mut sample = self.cpu_sample.lock().unwrap_or_else(|e| e.into_inner());
            sample.replace((now, total))
        };
        let cpu_percent = match previous {
            Some((at, before)) if now > at => {
                100.0 * (total - before).max(0.0) / now.duration_since(at).as_secs_f64()
            }
            _ => 0.0,
        };
        let mem = s.memory_stats.as_ref();
        let stat = |key: &str| {
            mem.and_then(|m| m.stats.as_ref())
                .and_then(|st| st.get(key).copied())
        };
        // cgroup v1 reports `rss`, v2 `anon`; without either, usage less the page cache.
        let rss = stat("rss").or_else(|| stat("anon")).unwrap_or_else(|| {
            let usage = mem.and_then(|m| m.usage).unwrap_or(0);
            usage.saturating_sub(stat("cache").or_else(|| stat("inactive_file")).unwrap_or(0))
        });
        TaskStats {
            timestamp_unix_ns: crate::now_unix_ns(),
            process_count: s
                .pids_stats
                .as_ref()
                .and_then(|p| p.current)
                .and_then(|n| usize::try_from(n).ok())
                .unwrap_or(0),
            cpu_user_seconds: user,
            cpu_system_seconds: system,
            cpu_percent,
            memory_rss_bytes: rss,
            memory_swap_bytes: stat("swap").unwrap_or(0),
        }
    }
}

/// The container's exit. The wait is retried while the daemon connection breaks but the
/// container still runs; a container that is gone is an exit with an error.
async fn wait_exit(docker: &Docker, id: &str) -> ExitResult {
    let mut delay = DOCKER_WAIT_RETRY_DELAY_MIN;
    loop {
        let waited = docker.wait_container(id, None).next().await;
        match waited {
            Some(Ok(_)) | Some(Err(bollard::errors::Error::DockerContainerWaitError { .. })) => {
                return exit_of(docker, id).await;
            }
            Some(Err(e)) => tracing::debug!(container_id = id, error = %e, "container wait failed"),
            None => {}
        }
        let inspected =
            tokio::time::timeout(DOCKER_CALL_TIMEOUT, docker.inspect_container(id, None)).await;
        match inspected.unwrap_or(Err(bollard::errors::Error::RequestTimeoutError)) {
            Ok(c) if !c.state.as_ref().and_then(|s| s.running).unwrap_or(false) => {
                return exit_of(docker, id).await;
            }
            Err(e) if super::is_not_found(&e) => return gone(id),
            _ => {}
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(DOCKER_WAIT_RETRY_DELAY_MAX);
    }
}

fn gone(id: &str) -> ExitResult {
    ExitResult {
        exit_code: 0,
        signal: 0,
        oom_killed: false,
        err: Some(format!(
            "container {id} disappeared; its exit status is unknown"
        )),
    }
}

/// Reads the stopped container's exit code and OOM flag.
pub(crate) async fn exit_of(docker: &Docker, id: &str) -> ExitResult {
    let inspected =
        tokio::time::timeout(DOCKER_CALL_TIMEOUT, docker.inspect_container(id, None)).await;
    let Ok(inspected) = inspected else {
        return ExitResult {
            err: Some(format!(
                "reading the exit of container {id} timed out after {DOCKER_CALL_TIMEOUT:?}"
            )),
            ..ExitResult::default()
        };
    };
    match inspected {
        Ok(c) => {
            let state = c.state.unwrap_or_default();
            ExitResult {
                exit_code: state
                    .exit_code
                    .and_then(|c| i32::try_from(c).ok())
                    .unwrap_or(0),
                signal: 0,
                oom_killed: state.oom_killed.unwrap_or(false),
                err: state.error.filter(|e| !e.is_empty()),
            }
        }
        Err(e) if super::is_not_found(&e) => gone(id),
        Err(e) => ExitResult {
            err: Some(format!("reading the exit of container {id}: {e}")),
            ..ExitResult::default()
        },
    }
}

/// One stream's destination: rotated files when the task has `logs`, else the plain path.
async fn open_sink(cfg: &TaskConfig, kind: &str) -> std::io::Result<Box<dyn Write + Send>> {
    match &cfg.logs {
        Some(logs) => {
            let limits = RotationLimits::from_mb(logs.max_files, logs.max_file_size_mb);
            let base = format!("{}.{kind}", cfg.name);
            Ok(Box::new(RotatingWriter::open(&logs.dir, &base, limits)?))
        }
        None if kind == "stdout" => Ok(Box::new(open_output(&cfg.stdout_path).await?)),
        None => Ok(Box::new(open_output(&cfg.stderr_path).await?)),
    }
}

/// Copies the container's stdout and stderr into the task's log files (the same rotated files
/// raw_exec's log helper writes, so `alloc logs` reads them) until the container stops. In
/// process: the daemon keeps the output while the client is down, and `recover` re-attaches.
/// Writes are plain blocking appends to local files, one log chunk at a time.
async fn copy_logs(docker: Docker, cfg: TaskConfig, id: String, since_unix_s: i32) {
    let (mut out, mut err) = match (
        open_sink(&cfg, "stdout").await,
        open_sink(&cfg, "stderr").await,
    ) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            tracing::warn!(task_id = %cfg.id, error = %e, "cannot open the task's log files");
            return;
        }
    };
    let options = LogsOptionsBuilder::new()
        .follow(true)
        .stdout(true)
        .stderr(true)
        .since(since_unix_s)
        .build();
    let mut stream = docker.logs(&id, Some(options));
    while let Some(item) = stream.next().await {
        let written = match item {
            Ok(LogOutput::StdErr { message }) => err.write_all(&message),
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                out.write_all(&message)
            }
            Ok(LogOutput::StdIn { .. }) => Ok(()),
            Err(e) => {
                tracing::warn!(task_id = %cfg.id, error = %e, "reading the container's output failed");
                break;
            }
        };
        if let Err(e) = written {
            tracing::warn!(task_id = %cfg.id, error = %e, "writing the task's output failed");
            break;
        }
    }
    let _ = out.flush();
    let _ = err.flush();
}
