//! `docker`: runs each task as a Docker container through the Engine API on a unix socket
//! (bollard, no TLS), with Nomad's docker driver options.
//!
//! - The container gets the task's environment, the alloc dirs at `/alloc`, `/local` and
//!   `/secrets`, the group's ports (`ports = ["http"]` publishes the allocated host port, to
//!   the port's `to` inside), CPU shares and a memory limit (`memory_max` as the limit and
//!   `memory` as the reservation when set).
//! - Its stdout and stderr are copied from the logs API into the task's log files (whatever
//!   `logging` driver Docker uses as well), so `alloc logs` works as for every driver.
//! - The handle carries the container id; `recover` reattaches to it.
//! - Containers labelled [`container::LABEL_TASK_ID`] that no task of this driver owns are
//!   removed by [`DockerDriver::remove_dangling`] (periodically once [`DockerDriver::spawn_gc`]
//!   runs); images no task uses are removed `gc.image_delay` after their last task went.

pub mod config;
pub mod container;
pub(crate) mod fingerprint;
mod image;
pub mod network;
mod task;

use crate::driver::{
    Capabilities, Driver, DriverFuture, ExecResult, ExitResult, Fingerprint, FsIsolation,
    TaskConfig, TaskHandle, TaskStats, TaskStatus, TASK_HANDLE_VERSION,
};
use crate::error::DriverError;
use crate::exit_cell::ExitCell;
use crate::limits::{
    DOCKER_CALL_TIMEOUT, DOCKER_CLIENT_TIMEOUT_S, EXEC_OUTPUT_BYTES_MAX, KILL_REAP_TIMEOUT,
};
use crate::signal::parse_signal;
use crate::table::TaskTable;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, KillContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, StatsOptionsBuilder,
};
use bollard::Docker;
use config::{DockerConfig, DockerTaskConfig};
use futures_util::StreamExt;
use image::ImageUsage;
use nix::sys::signal::Signal;
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use task::{DockerState, DockerTask};
use tokio::sync::OnceCell;

/// The driver's name in job files.
pub const NAME: &str = "docker";

/// Docker's default stop signal.
const DEFAULT_STOP_SIGNAL: Signal = Signal::SIGTERM;

pub struct DockerDriver {
    config: DockerConfig,
    /// The API client, connected (and its version negotiated) on first use; a failed connect
    /// leaves it empty so the next call tries again.
    docker: OnceCell<Docker>,
    tasks: TaskTable<DockerTask>,
    images: Arc<ImageUsage>,
}

/// Runs a Docker call under [`DOCKER_CALL_TIMEOUT`]: the outer error is the timeout, the inner
/// one the daemon's answer.
pub(crate) async fn bounded<T>(
    task_id: &str,
    what: &'static str,
    call: impl Future<Output = Result<T, bollard::errors::Error>>,
) -> Result<Result<T, bollard::errors::Error>, DriverError> {
    tokio::time::timeout(DOCKER_CALL_TIMEOUT, call)
        .await
        .map_err(|_| DriverError::Timeout {
            task_id: task_id.to_string(),
            what,
            limit: DOCKER_CALL_TIMEOUT,
        })
}

pub(crate) fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

fn is_status(e: &bollard::errors::Error, code: u16) -> bool {
    matches!(e, bollard::errors::Error::DockerResponseServerError { status_code, .. } if *status_code == code)
}

pub(crate) fn api_error(task_id: &str, what: &str, e: bollard::errors::Error) -> DriverError {
    DriverError::Start {
        task_id: task_id.to_string(),
        message: format!("{what}: {e}"),
        recoverable: true,
    }
}

impl DockerDriver {
    pub fn new(config: DockerConfig) -> DockerDriver {
        DockerDriver {
            config,
            docker: OnceCell::new(),
            tasks: TaskTable::new(),
            images: Arc::new(ImageUsage::default()),
        }
    }

    pub fn config(&self) -> &DockerConfig {
        &self.config
    }

    async fn client(&self, task_id: &str) -> Result<&Docker, DriverError> {
        let socket = self.config.socket_path()?;
        self.docker
            .get_or_try_init(|| async {
                let docker = Docker::connect_with_unix(
                    socket,
                    DOCKER_CLIENT_TIMEOUT_S,
                    bollard::API_DEFAULT_VERSION,
                )?;
                // The daemon may speak an older API than bollard's default (20.10 speaks 1.41).
                match tokio::time::timeout(DOCKER_CALL_TIMEOUT, docker.negotiate_version()).await {
                    Ok(r) => r,
                    Err(_) => Err(bollard::errors::Error::RequestTimeoutError),
                }
            })
            .await
            .map_err(|e| DriverError::Start {
                task_id: task_id.to_string(),
                message: format!(
                    "cannot reach the Docker daemon at {socket}: {e}; is Docker running?"
                ),
                recoverable: true,
            })
    }

    async fn start_task(&self, cfg: TaskConfig) -> Result<TaskHandle, DriverError> {
        if self.tasks.contains(&cfg.id) {
            return Err(DriverError::TaskExists(cfg.id));
        }
        let task_cfg = DockerTaskConfig::parse(&cfg.driver_config)?;
        // Built first so that what the node refuses fails before any image work.
        let mut body = container::create_body(&cfg, &task_cfg, &self.config, &task_cfg.image)?;
        let docker = self.client(&cfg.id).await?;
        let image_id = image::ensure_image(docker, &cfg, &task_cfg, &self.config).await?;
        body.image = Some(image_id.clone());
        let container_id = self.create_container(docker, &cfg, body).await?;
        const STARTING: &str = "starting the container";
        let started = bounded(
            &cfg.id,
            STARTING,
            docker.start_container(&container_id, None),
        )
        .await;
        if let Err(e) = started.and_then(|r| r.map_err(|e| api_error(&cfg.id, STARTING, e))) {
            self.remove_container(docker, &cfg.id, &container_id).await;
            return Err(e);
        }
        let inspected = bounded(
            &cfg.id,
            "inspecting the container",
            docker.inspect_container(&container_id, None),
        )
        .await;
        let pid = match inspected {
            Ok(Ok(c)) => c
                .state
                .and_then(|s| s.pid)
                .and_then(|p| u32::try_from(p).ok())
                .filter(|p| *p > 0),
            _ => None,
        };
        let task = Arc::new(DockerTask {
            config: cfg,
            state: DockerState {
                container_id,
                image_id,
            },
            pid,
            started_at_unix_ns: crate::now_unix_ns(),
            exit: ExitCell::new(),
            cpu_sample: Mutex::new(None),
        });
        if let Err(e) = self.tasks.insert(&task.config.id, Arc::clone(&task)) {
            self.remove_container(docker, &task.config.id, &task.state.container_id)
                .await;
            return Err(e);
        }
        self.images.acquire(&task.state.image_id);
        task.monitor(docker.clone(), 0);
        tracing::info!(task_id = %task.config.id, container_id = %task.state.container_id, "docker task started");
        Ok(handle_of(&task))
    }

    /// Creates the container under Nomad's name; a leftover of the same name (an earlier
    /// attempt of this task) is removed first.
    async fn create_container(
        &self,
        docker: &Docker,
        cfg: &TaskConfig,
        body: bollard::models::ContainerCreateBody,
    ) -> Result<String, DriverError> {
        const CREATING: &str = "creating the container";
        let name = container::container_name(cfg);
        for attempt in 0..2 {
            let options = CreateContainerOptionsBuilder::new().name(&name).build();
            match bounded(
                &cfg.id,
                CREATING,
                docker.create_container(Some(options), body.clone()),
            )
            .await?
            {
                Ok(created) => return Ok(created.id),
                Err(e) if is_status(&e, 409) && attempt == 0 => {
                    tracing::info!(task_id = %cfg.id, name, "removing a leftover container of the same name");
                    self.remove_container(docker, &cfg.id, &name).await;
                }
                Err(e) => {
                    return Err(DriverError::Start {
                        task_id: cfg.id.clone(),
                        message: format!("{CREATING}: {e}"),
                        recoverable: !is_status(&e, 400),
                    })
                }
            }
        }
        Err(DriverError::Start {
            task_id: cfg.id.clone(),
            message: format!("{CREATING}: the name {name} stays taken"),
            recoverable: true,
        })
    }

    /// Force-removes a container (and its anonymous volumes); failures are logged.
    async fn remove_container(&self, docker: &Docker, task_id: &str, id: &str) {
        let options = RemoveContainerOptionsBuilder::new()
            .force(true)
            .v(true)
            .build();
        match bounded(
            task_id,
            "removing the container",
            docker.remove_container(id, Some(options)),
        )
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) if is_not_found(&e) => {}
            Ok(Err(e)) => {
                tracing::warn!(task_id, container_id = id, error = %e, "removing the container failed")
            }
            Err(e) => {
                tracing::warn!(task_id, container_id = id, error = %e, "removing the container failed")
            }
        }
    }

    async fn kill(&self, task: &DockerTask, signal: Signal) -> Result<(), DriverError> {
        let docker = self.client(&task.config.id).await?;
        let options = KillContainerOptionsBuilder::new()
            .signal(signal.as_str())
            .build();
        let id = &task.state.container_id;
        match bounded(
            &task.config.id,
            "signalling the container",
            docker.kill_container(id, Some(options)),
        )
        .await?
        {
            Ok(()) => Ok(()),
            // 409: not running; 404: gone. Either way there is nothing left to signal.
            Err(e) if is_status(&e, 409) || is_not_found(&e) => Ok(()),
            Err(e) => Err(DriverError::Signal {
                task_id: task.config.id.clone(),
                signal: signal.as_str().to_string(),
                message: e.to_string(),
            }),
        }
    }

    async fn stop_task(
        &self,
        task_id: &str,
        timeout: Duration,
        signal: &str,
    ) -> Result<(), DriverError> {
        let task = self.tasks.get(task_id)?;
        if task.exit.has_exited() {
            return Ok(());
        }
        let signal = if signal.is_empty() {
            task.config.kill_signal.as_str()
        } else {
            signal
        };
        let signal = parse_signal(signal, DEFAULT_STOP_SIGNAL)?;
        self.kill(&task, signal).await?;
        if task.exit.wait_timeout(timeout).await.is_some() {
            return Ok(());
        }
        self.kill(&task, Signal::SIGKILL).await?;
        match task.exit.wait_timeout(KILL_REAP_TIMEOUT).await {
            Some(_) => Ok(()),
            None => Err(DriverError::Timeout {
                task_id: task_id.to_string(),
                what: "stopping the container",
                limit: timeout + KILL_REAP_TIMEOUT,
            }),
        }
    }

    async fn destroy_task(&self, task_id: &str, force: bool) -> Result<(), DriverError> {
        let task = self.tasks.get(task_id)?;
        if !task.exit.has_exited() && !force {
            return Err(DriverError::StillRunning(task_id.to_string()));
        }
        let docker = self.client(task_id).await?;
        if self.config.gc_container {
            self.remove_container(docker, task_id, &task.state.container_id)
                .await;
        } else if !task.exit.has_exited() {
            self.kill(&task, Signal::SIGKILL).await?;
        }
        self.tasks.remove(task_id);
        let image_id = &task.state.image_id;
        if self.images.release(image_id, Instant::now()) && self.config.gc_image {
            image::schedule_removal(
                docker.clone(),
                Arc::clone(&self.images),
                image_id.clone(),
                self.config.gc_image_delay,
            );
        }
        Ok(())
    }

    async fn recover_task(&self, handle: &TaskHandle) -> Result<(), DriverError> {
        let id = &handle.task_id;
        handle.check_for(NAME)?;
        if self.tasks.contains(id) {
            return Ok(());
        }
        let state: DockerState =
            serde_json::from_value(handle.state.clone()).map_err(|e| DriverError::Recover {
                task_id: id.clone(),
                message: format!("driver state: {e}"),
            })?;
        let docker = self.client(id).await.map_err(|e| DriverError::Recover {
            task_id: id.clone(),
            message: e.to_string(),
        })?;
        let inspected = bounded(
            id,
            "inspecting the container",
            docker.inspect_container(&state.container_id, None),
        )
        .await?;
        let running = match &inspected {
            Ok(c) => c.state.as_ref().and_then(|s| s.running).unwrap_or(false),
            Err(e) if is_not_found(e) => false,
            Err(e) => {
                return Err(DriverError::Recover {
                    task_id: id.clone(),
                    message: format!("inspecting container {}: {e}", state.container_id),
                })
            }
        };
        let task = Arc::new(DockerTask {
            config: handle.config.clone(),
            pid: handle.pid,
            started_at_unix_ns: handle.started_at_unix_ns,
            exit: ExitCell::new(),
            cpu_sample: Mutex::new(None),
            state,
        });
        if running {
            // Output written before now was copied by the previous client.
            let now_s = i32::try_from(crate::now_unix_ns() / 1_000_000_000).unwrap_or(0);
            task.monitor(docker.clone(), now_s);
        } else {
            task.exit
                .set(task::exit_of(docker, &task.state.container_id).await);
        }
        self.tasks.insert(id, Arc::clone(&task))?;
        self.images.acquire(&task.state.image_id);
        tracing::info!(task_id = %id, container_id = %task.state.container_id, running, "docker task recovered");
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
        if cmd.is_empty() {
            return Err(DriverError::invalid(NAME, "exec needs a command"));
        }
        let docker = self.client(task_id).await?;
        let run = async {
            let options = CreateExecOptions {
                cmd: Some(cmd.to_vec()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            };
            let exec = docker
                .create_exec(&task.state.container_id, options)
                .await?;
            let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
            if let StartExecResults::Attached { mut output, .. } =
                docker.start_exec(&exec.id, None).await?
            {
                while let Some(item) = output.next().await {
                    let (buf, bytes) = match item? {
                        bollard::container::LogOutput::StdErr { message } => (&mut stderr, message),
                        bollard::container::LogOutput::StdOut { message }
                        | bollard::container::LogOutput::Console { message } => {
                            (&mut stdout, message)
                        }
                        bollard::container::LogOutput::StdIn { .. } => continue,
                    };
                    let room = EXEC_OUTPUT_BYTES_MAX.saturating_sub(buf.len());
                    buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
                }
            }
            let inspected = docker.inspect_exec(&exec.id).await?;
            let exit_code = inspected
                .exit_code
                .and_then(|c| i32::try_from(c).ok())
                .unwrap_or(0);
            Ok::<_, bollard::errors::Error>(ExecResult {
                stdout,
                stderr,
                exit: ExitResult {
                    exit_code,
                    ..ExitResult::default()
                },
            })
        };
        match tokio::time::timeout(timeout, run).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(DriverError::io(
                task_id,
                "exec in the container",
                std::io::Error::other(e),
            )),
            Err(_) => Err(DriverError::Timeout {
                task_id: task_id.to_string(),
                what: "exec",
                limit: timeout,
            }),
        }
    }

    /// `alloc exec` in a container: a Docker exec with stdin attached; its multiplexed output is
    /// split into stdout and stderr pipes, and its exit code is read once the output ends. Killing
    /// the stream stops copying (Docker cannot kill an exec; the container's stop ends it).
    async fn exec_stream_in_task(
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
        let docker = self.client(task_id).await?.clone();
        let io = |e: bollard::errors::Error| {
            DriverError::io(task_id, "exec in the container", std::io::Error::other(e))
        };
        let options = CreateExecOptions {
            cmd: Some(cmd.to_vec()),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(tty),
            ..Default::default()
        };
        let exec = docker
            .create_exec(&task.state.container_id, options)
            .await
            .map_err(io)?;
        let StartExecResults::Attached { mut output, input } =
            docker.start_exec(&exec.id, None).await.map_err(io)?
        else {
            return Err(DriverError::invalid(NAME, "the exec started detached"));
        };
        let (mut out_w, out_r) = tokio::io::duplex(64 * 1024);
        let (mut err_w, err_r) = tokio::io::duplex(64 * 1024);
        let exec_id = exec.id.clone();
        let pump = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            while let Some(Ok(item)) = output.next().await {
                let (w, bytes) = match item {
                    bollard::container::LogOutput::StdErr { message } => (&mut err_w, message),
                    bollard::container::LogOutput::StdOut { message }
                    | bollard::container::LogOutput::Console { message } => (&mut out_w, message),
                    bollard::container::LogOutput::StdIn { .. } => continue,
                };
                if w.write_all(&bytes).await.is_err() {
                    break;
                }
            }
        });
        let abort = pump.abort_handle();
        // With a terminal, the user's window size goes to the exec's (Docker sends SIGWINCH).
        let resize: Option<Box<dyn Fn(u16, u16) + Send + Sync>> = tty.then(|| {
            let (docker, exec_id) = (docker.clone(), exec.id.clone());
            Box::new(move |rows: u16, cols: u16| {
                let (docker, exec_id) = (docker.clone(), exec_id.clone());
                let size = bollard::exec::ResizeExecOptions {
                    height: rows,
                    width: cols,
                };
                tokio::spawn(async move {
                    if let Err(e) = docker.resize_exec(&exec_id, size).await {
                        tracing::debug!(%exec_id, error = %e, "resizing the exec's terminal failed");
                    }
                });
            }) as Box<dyn Fn(u16, u16) + Send + Sync>
        });
        let exit = async move {
            let _ = pump.await;
            match docker.inspect_exec(&exec_id).await {
                Ok(i) => ExitResult {
                    exit_code: i.exit_code.and_then(|c| i32::try_from(c).ok()).unwrap_or(0),
                    ..ExitResult::default()
                },
                Err(e) => ExitResult {
                    exit_code: 1,
                    err: Some(format!("inspecting the exec: {e}")),
                    ..ExitResult::default()
                },
            }
        };
        Ok(crate::driver::ExecStream {
            stdin: Some(input),
            stdout: Box::pin(out_r),
            stderr: Box::pin(err_r),
            exit: Box::pin(exit),
            kill: Box::new(move || abort.abort()),
            resize,
        })
    }

    async fn stats_of(&self, task_id: &str) -> Result<TaskStats, DriverError> {
        let task = self.tasks.get(task_id)?;
        if task.exit.has_exited() {
            return Err(DriverError::NotRunning(task_id.to_string()));
        }
        let docker = self.client(task_id).await?;
        let options = StatsOptionsBuilder::new()
            .stream(false)
            .one_shot(true)
            .build();
        let mut stream = docker.stats(&task.state.container_id, Some(options));
        let next = async { stream.next().await.transpose() };
        match bounded(task_id, "reading container stats", next).await? {
            Ok(Some(s)) => Ok(task.stats_from(&s)),
            Err(e) if is_not_found(&e) => Err(DriverError::NotRunning(task_id.to_string())),
            Err(e) => Err(api_error(task_id, "reading container stats", e)),
            Ok(None) => Err(DriverError::NotRunning(task_id.to_string())),
        }
    }

    /// Removes Caravan's containers (labelled [`container::LABEL_TASK_ID`]) that no task of
    /// this driver owns and that were created more than `gc.dangling_containers.creation_grace`
    /// ago (younger ones may be starting). Returns the removed container ids.
    ///
    /// Call it only after the client has recovered its tasks: a task not yet recovered looks
    /// dangling. [`DockerDriver::spawn_gc`] waits one period before its first pass for that.
    pub async fn remove_dangling(&self) -> Result<Vec<String>, DriverError> {
        self.remove_dangling_in(None).await
    }

    /// [`DockerDriver::remove_dangling`], limited to one allocation's containers when
    /// `alloc_id` is given (tests share a daemon with other runs and must not touch theirs).
    pub async fn remove_dangling_in(
        &self,
        alloc_id: Option<&str>,
    ) -> Result<Vec<String>, DriverError> {
        const WHO: &str = "dangling containers";
        let docker = self.client(WHO).await?;
        let mut labels = vec![container::LABEL_TASK_ID.to_string()];
        if let Some(alloc_id) = alloc_id {
            labels.push(format!("{}={alloc_id}", container::LABEL_ALLOC_ID));
        }
        let filters = HashMap::from([("label".to_string(), labels)]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        let listed = bounded(
            WHO,
            "listing containers",
            docker.list_containers(Some(options)),
        )
        .await?
        .map_err(|e| api_error(WHO, "listing containers", e))?;
        let now_s = crate::now_unix_ns() / 1_000_000_000;
        let grace_s =
            i64::try_from(self.config.dangling_creation_grace.as_secs()).unwrap_or(i64::MAX);
        let mut removed = Vec::new();
        for c in listed {
            let (Some(id), Some(labels)) = (c.id, c.labels) else {
                continue;
            };
            // Another driver's container on the same daemon (podman through its docker shim)
            // is not ours to reap; containers from before the label are docker's.
            if labels
                .get(container::LABEL_DRIVER)
                .is_some_and(|d| *d != self.config.driver_label)
            {
                continue;
            }
            let owner = labels
                .get(container::LABEL_TASK_ID)
                .cloned()
                .unwrap_or_default();
            let owned = self
                .tasks
                .get(&owner)
                .is_ok_and(|t| t.state.container_id == id);
            let young = c.created.is_some_and(|t| now_s.saturating_sub(t) < grace_s);
            if owned || young {
                continue;
            }
            tracing::info!(container_id = %id, task_id = %owner, "removing a dangling docker container");
            self.remove_container(docker, &owner, &id).await;
            removed.push(id);
        }
        Ok(removed)
    }

    /// Starts the periodic dangling-container pass (when `gc.dangling_containers.enabled`),
    /// first after one period so the client has recovered its tasks. The loop holds only a
    /// weak reference and ends with the driver.
    pub fn spawn_gc(self: &Arc<Self>) {
        if !self.config.dangling_enabled {
            return;
        }
        let weak = Arc::downgrade(self);
        let period = self.config.dangling_period;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(period).await;
                let Some(driver) = weak.upgrade() else { return };
                if let Err(e) = driver.remove_dangling().await {
                    tracing::debug!(error = %e, "the dangling docker container pass failed");
                }
            }
        });
    }
}

fn handle_of(task: &DockerTask) -> TaskHandle {
    TaskHandle {
        version: TASK_HANDLE_VERSION,
        task_id: task.config.id.clone(),
        driver: NAME.to_string(),
        config: task.config.clone(),
        pid: task.pid,
        started_at_unix_ns: task.started_at_unix_ns,
        state: serde_json::to_value(&task.state).expect("docker state serialises"),
    }
}

impl Driver for DockerDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            send_signals: true,
            exec: true,
            fs_isolation: FsIsolation::Image,
            mounts: true,
            network_isolation: true,
            must_initiate_network: true,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        fingerprint::fingerprint(&self.config)
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

    fn create_network<'a>(
        &'a self,
        alloc_id: &'a str,
    ) -> DriverFuture<'a, crate::driver::NetworkIsolation> {
        Box::pin(self.create_sandbox(alloc_id))
    }

    fn destroy_network<'a>(
        &'a self,
        alloc_id: &'a str,
        spec: &'a crate::driver::NetworkIsolation,
    ) -> DriverFuture<'a, ()> {
        Box::pin(self.destroy_sandbox(alloc_id, spec))
    }

    fn signal<'a>(&'a self, task_id: &'a str, signal: &'a str) -> DriverFuture<'a, ()> {
        Box::pin(async move {
            let task = self.tasks.get(task_id)?;
            if signal.trim().is_empty() {
                return Err(DriverError::UnknownSignal(String::new()));
            }
            if task.exit.has_exited() {
                return Err(DriverError::NotRunning(task_id.to_string()));
            }
            self.kill(&task, parse_signal(signal, DEFAULT_STOP_SIGNAL)?)
                .await
        })
    }

    fn inspect<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, TaskStatus> {
        Box::pin(async move { Ok(self.tasks.get(task_id)?.status()) })
    }

    fn stats<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, TaskStats> {
        Box::pin(self.stats_of(task_id))
    }

    fn recover<'a>(&'a self, handle: &'a TaskHandle) -> DriverFuture<'a, ()> {
        Box::pin(self.recover_task(handle))
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
    ) -> DriverFuture<'a, crate::driver::ExecStream> {
        Box::pin(self.exec_stream_in_task(task_id, cmd, tty))
    }
}
