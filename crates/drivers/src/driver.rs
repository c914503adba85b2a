//! The `Driver` trait and the values that cross it.
//!
//! The client speaks to every driver through this one trait, so a driver is chosen by name at run
//! time: the trait is object safe (`Arc<dyn Driver>`), which is why its async calls return a boxed
//! future ([`DriverFuture`]) rather than being `async fn`s.

use crate::error::DriverError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::Duration;

/// The future every async driver call returns: `Send`, borrowing the driver and its arguments.
pub type DriverFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, DriverError>> + Send + 'a>>;

/// One task driver.
///
/// Every call has a bounded duration except [`Driver::wait`], which resolves when the task exits;
/// its future may be dropped at any time (cancel-safe) and called again.
pub trait Driver: Send + Sync + 'static {
    /// The name jobs use in `driver = "…"`.
    fn name(&self) -> &'static str;

    /// What the driver can do; fixed for the driver's lifetime.
    fn capabilities(&self) -> Capabilities;

    /// Detection and health, and the `driver.<name>.*` node attributes. Cheap and synchronous:
    /// the client calls it periodically.
    fn fingerprint(&self) -> Fingerprint;

    /// Starts the task. The returned handle is what the client persists to call
    /// [`Driver::recover`] after its own restart.
    fn start(&self, cfg: TaskConfig) -> DriverFuture<'_, TaskHandle>;

    /// Resolves with the task's exit. May be called any number of times, before or after the exit.
    fn wait<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, ExitResult>;

    /// Sends `signal` (empty: the driver's default kill signal) to the task; after `timeout`,
    /// SIGKILLs everything the task started. Returns once the task has exited, or fails with
    /// [`DriverError::Timeout`] if even SIGKILL did not end it within a bounded time.
    fn stop<'a>(
        &'a self,
        task_id: &'a str,
        timeout: Duration,
        signal: &'a str,
    ) -> DriverFuture<'a, ()>;

    /// Forgets the task and frees what the driver holds for it (killing leftover processes).
    /// Refuses a running task unless `force`, which kills it first.
    fn destroy<'a>(&'a self, task_id: &'a str, force: bool) -> DriverFuture<'a, ()>;

    /// Sends a signal to the task's main process (`alloc signal`).
    fn signal<'a>(&'a self, task_id: &'a str, signal: &'a str) -> DriverFuture<'a, ()>;

    /// The task's current state.
    fn inspect<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, TaskStatus>;

    /// Resource usage of everything the task runs. Fails with [`DriverError::NotRunning`] once
    /// the task has exited.
    fn stats<'a>(&'a self, task_id: &'a str) -> DriverFuture<'a, TaskStats>;

    /// Reattaches to a task started before the client restarted, from its persisted handle.
    /// Never starts or restarts the task: if it is gone, the task is recorded as exited and
    /// [`Driver::wait`] reports that.
    fn recover<'a>(&'a self, handle: &'a TaskHandle) -> DriverFuture<'a, ()>;

    /// Runs a command inside the task's environment (non-interactive), killing it after `timeout`.
    fn exec<'a>(
        &'a self,
        task_id: &'a str,
        cmd: &'a [String],
        timeout: Duration,
    ) -> DriverFuture<'a, ExecResult>;

    /// Makes the network namespace of allocation `alloc_id`'s group, for drivers that
    /// [`Capabilities::must_initiate_network`]. Idempotent: a namespace this driver already made
    /// for the allocation (before a client restart, say) is returned again.
    fn create_network<'a>(&'a self, alloc_id: &'a str) -> DriverFuture<'a, NetworkIsolation> {
        let _ = alloc_id;
        let name = self.name();
        Box::pin(async move {
            Err(DriverError::NotSupported(format!(
                "{name} driver: making a group network namespace is not supported"
            )))
        })
    }

    /// Removes what [`Driver::create_network`] made; harmless when it is already gone.
    fn destroy_network<'a>(
        &'a self,
        alloc_id: &'a str,
        spec: &'a NetworkIsolation,
    ) -> DriverFuture<'a, ()> {
        let _ = (alloc_id, spec);
        let name = self.name();
        Box::pin(async move {
            Err(DriverError::NotSupported(format!(
                "{name} driver: group network namespaces are not supported"
            )))
        })
    }

    /// Starts a command inside the task's environment with its stdin, stdout and stderr piped
    /// to the caller (`alloc exec`). It runs until it exits or the [`ExecStream`] is dropped,
    /// which kills it. `tty`: the caller asked for a terminal (raw_exec gives it a pty: output
    /// comes on stdout only); drivers without pty support run the command on pipes anyway. Drivers that cannot do this say [`DriverError::NotSupported`].
    fn exec_streaming<'a>(
        &'a self,
        task_id: &'a str,
        cmd: &'a [String],
        tty: bool,
    ) -> DriverFuture<'a, ExecStream> {
        let _ = (task_id, cmd, tty);
        let name = self.name();
        Box::pin(async move {
            Err(DriverError::NotSupported(format!(
                "{name} driver: interactive exec (alloc exec) is not supported yet"
            )))
        })
    }
}

/// A command started by [`Driver::exec_streaming`]. Dropping it kills the command and
/// everything it started.
pub struct ExecStream {
    /// The command's stdin; dropping it closes the stream (EOF for the command).
    pub stdin: Option<Pin<Box<dyn tokio::io::AsyncWrite + Send>>>,
    pub stdout: Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    pub stderr: Pin<Box<dyn tokio::io::AsyncRead + Send>>,
    /// Resolves once with how the command ended.
    pub exit: Pin<Box<dyn Future<Output = ExitResult> + Send>>,
    /// Kills the command's whole process group; harmless once it is gone.
    pub kill: Box<dyn Fn() + Send + Sync>,
    /// With a terminal: sets its size (rows, columns). `None` on pipes.
    pub resize: Option<Box<dyn Fn(u16, u16) + Send + Sync>>,
}

impl ExecStream {
    /// Runs the command to its end as a non-interactive exec: stdin closed, stdout and stderr
    /// collected (each cut at [`crate::limits::EXEC_OUTPUT_BYTES_MAX`], the rest read and
    /// dropped so the command never blocks on a full pipe), killed with its process group past
    /// `timeout`.
    pub async fn run_to_completion(mut self, timeout: Duration) -> ExecResult {
        use tokio::io::AsyncReadExt;
        async fn collect(mut r: Pin<&mut (dyn tokio::io::AsyncRead + Send)>) -> Vec<u8> {
            let mut kept = Vec::new();
            let mut buf = [0u8; 8192];
            loop {
                match r.read(&mut buf).await {
                    Ok(0) | Err(_) => return kept,
                    Ok(n) => {
                        let room = crate::limits::EXEC_OUTPUT_BYTES_MAX.saturating_sub(kept.len());
                        kept.extend_from_slice(&buf[..n.min(room)]);
                    }
                }
            }
        }
        drop(self.stdin.take());
        let run = async {
            tokio::join!(
                collect(self.stdout.as_mut()),
                collect(self.stderr.as_mut()),
                self.exit.as_mut()
            )
        };
        match tokio::time::timeout(timeout, run).await {
            Ok((stdout, stderr, exit)) => ExecResult {
                stdout,
                stderr,
                exit,
            },
            Err(_) => {
                (self.kill)();
                ExecResult {
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                    exit: ExitResult {
                        exit_code: -1,
                        signal: 9,
                        oom_killed: false,
                        err: Some(format!(
                            "the command did not finish within {timeout:?}; killed"
                        )),
                    },
                }
            }
        }
    }
}

impl std::fmt::Debug for ExecStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecStream").finish_non_exhaustive()
    }
}

impl Drop for ExecStream {
    fn drop(&mut self) {
        (self.kill)();
    }
}

/// What a driver supports, as Nomad's `drivers.Capabilities`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub send_signals: bool,
    pub exec: bool,
    pub fs_isolation: FsIsolation,
    /// The driver honours [`TaskConfig::mounts`] (Nomad's `MountConfigs`); without it a task
    /// with mounts fails to start.
    pub mounts: bool,
    /// The driver's tasks can join a group's network namespace
    /// ([`TaskConfig::network_isolation`]); without it a bridge-mode group refuses the task.
    pub network_isolation: bool,
    /// The driver must make the group's network namespace itself
    /// ([`Driver::create_network`]; docker, whose containers can only join another container's).
    pub must_initiate_network: bool,
}

/// How a driver isolates the task's file system; tells the client whether to build a chroot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsIsolation {
    /// The task sees the host's file system (raw_exec, mock).
    None,
    /// The task runs in a chroot built from the host (exec).
    Chroot,
    /// The task brings its own root file system (docker).
    Image,
}

/// A driver's detection and health, and the node attributes it contributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fingerprint {
    /// The driver exists on this node (Nomad's "undetected" when false).
    pub detected: bool,
    /// The driver can run tasks now.
    pub healthy: bool,
    pub health_description: String,
    /// `driver.<name>` (= `"1"` when usable) and `driver.<name>.*` attributes.
    pub attributes: BTreeMap<String, String>,
}

/// Nomad's health description for a healthy driver.
pub const HEALTHY: &str = "Healthy";

impl Fingerprint {
    /// Detected and healthy, with `driver.<name> = "1"` added to `attributes`.
    pub fn healthy(name: &str, mut attributes: BTreeMap<String, String>) -> Fingerprint {
        attributes.insert(format!("driver.{name}"), "1".to_string());
        Fingerprint {
            detected: true,
            healthy: true,
            health_description: HEALTHY.to_string(),
            attributes,
        }
    }

    /// Not detected (Nomad's `HealthStateUndetected`): the node does not advertise the driver.
    pub fn undetected(description: impl Into<String>) -> Fingerprint {
        Fingerprint {
            detected: false,
            healthy: false,
            health_description: description.into(),
            attributes: BTreeMap::new(),
        }
    }

    /// Detected but unable to run tasks now.
    pub fn unhealthy(description: impl Into<String>) -> Fingerprint {
        Fingerprint {
            detected: true,
            healthy: false,
            health_description: description.into(),
            attributes: BTreeMap::new(),
        }
    }
}

/// Everything a driver needs to start one task. The client builds it (directories, environment,
/// interpolated driver config) and persists it inside the [`TaskHandle`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskConfig {
    /// Unique among the tasks of one driver, for the life of the node (Nomad: `alloc/task/random`).
    pub id: String,
    pub alloc_id: String,
    /// The task's name in its group.
    pub name: String,
    /// The task's `config { … }` block, already interpolated.
    pub driver_config: serde_json::Map<String, serde_json::Value>,
    /// The complete environment of the task; nothing is inherited from the client.
    pub env: BTreeMap<String, String>,
    /// Run as this user (needs the client to run as root); `None`: the client's user.
    pub user: Option<String>,
    pub task_dir: TaskDir,
    /// The allocation directory (`alloc/` is shared by the group's tasks).
    pub alloc_dir: PathBuf,
    /// Where the task's stdout goes: a file (appended to) or a fifo the client reads. Empty: discard.
    /// With [`TaskConfig::logs`] and a driver that rotates, this is only the first file's name.
    pub stdout_path: PathBuf,
    /// Where the task's stderr goes; as `stdout_path`.
    pub stderr_path: PathBuf,
    /// Rotated log files (Nomad's `logs` block): drivers that rotate write `<dir>/<name>.stdout.N`
    /// and `.stderr.N` instead of the two paths above. `None`: no rotation. (Handles persisted
    /// before this field existed read as `None`.)
    #[serde(default)]
    pub logs: Option<TaskLogConfig>,
    pub resources: TaskResources,
    /// Signal `stop` sends when the caller passes none; empty: the driver's default.
    pub kill_signal: String,
    pub kill_timeout: Duration,
    /// Host paths the task sees at its own paths (volume mounts, a CSI plugin's socket and
    /// staging directories). Drivers without file-system isolation refuse a task with any.
    /// (Handles persisted before this field existed read as none.)
    #[serde(default)]
    pub mounts: Vec<MountConfig>,
    /// The group's network namespace the task joins (`network { mode = "bridge" }`, `none`,
    /// `cni/<name>`); `None`: the host's network. (Handles persisted before this field existed
    /// read as `None`.)
    #[serde(default)]
    pub network_isolation: Option<NetworkIsolation>,
    /// Device nodes the task gets (a device plugin's reservation). Drivers with isolation make
    /// them visible at `task_path`; without isolation the host's nodes are there already.
    /// (Handles persisted before this field existed read as none.)
    #[serde(default)]
    pub devices: Vec<DeviceConfig>,
    /// NVIDIA GPUs (UUIDs) the `nvidia` device plugin reserved for the task: container drivers
    /// ask the NVIDIA runtime for exactly these. Never taken from the task's environment, which
    /// the job controls. (Handles persisted before this field existed read as none.)
    #[serde(default)]
    pub gpu_ids: Vec<String>,
}

/// A device node made visible in the task (Nomad's `drivers.DeviceConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceConfig {
    pub host_path: PathBuf,
    pub task_path: PathBuf,
    /// cgroup permissions: any of `r`, `w`, `m`.
    pub permissions: String,
}

/// A group's shared network namespace (Nomad's `NetworkIsolationSpec` in mode `group`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkIsolation {
    /// The namespace's file (a bind-mounted `/proc/<pid>/ns/net`).
    pub path: PathBuf,
    /// What the driver that made it needs to find it again ([`LABEL_SANDBOX_CONTAINER`]).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// The label naming the docker container that holds a group's network namespace (Nomad's).
pub const LABEL_SANDBOX_CONTAINER: &str = "docker_sandbox_container_id";

/// One host path made visible inside the task (Nomad's `drivers.MountConfig`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MountConfig {
    /// The path on the host: a directory or a file.
    pub host_path: PathBuf,
    /// Where the task sees it: absolute, inside the task's root (no `..`).
    pub task_path: PathBuf,
    pub readonly: bool,
}

impl MountConfig {
    /// Refuses a task path that is relative or climbs out of the task's root with `..`.
    pub fn check(&self) -> Result<(), String> {
        use std::path::Component;
        if !self.task_path.is_absolute() {
            return Err(format!(
                "mount destination {} is not an absolute path",
                self.task_path.display()
            ));
        }
        if self
            .task_path
            .components()
            .any(|c| matches!(c, Component::ParentDir))
        {
            return Err(format!(
                "mount destination {} must not contain \"..\"",
                self.task_path.display()
            ));
        }
        Ok(())
    }
}

/// Where and how a task's output files rotate (Nomad's `logs { max_files max_file_size }`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskLogConfig {
    /// The log directory, `alloc/logs`.
    pub dir: PathBuf,
    /// How many files of each stream are kept (the newest); at least 1.
    pub max_files: u32,
    /// A file's size limit in MB (MiB); at least 1.
    pub max_file_size_mb: u64,
}

/// A task's directories (Nomad's `allocdir.TaskDir`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskDir {
    /// The task's root directory; the working directory of raw_exec tasks.
    pub dir: PathBuf,
    /// `local/` (`NOMAD_TASK_DIR`).
    pub local_dir: PathBuf,
    /// `secrets/` (`NOMAD_SECRETS_DIR`).
    pub secrets_dir: PathBuf,
    /// `tmp/`.
    pub tmp_dir: PathBuf,
}

impl TaskDir {
    /// The conventional layout under `dir`: `local/`, `secrets/`, `tmp/`.
    pub fn under(dir: impl Into<PathBuf>) -> TaskDir {
        let dir = dir.into();
        TaskDir {
            local_dir: dir.join("local"),
            secrets_dir: dir.join("secrets"),
            tmp_dir: dir.join("tmp"),
            dir,
        }
    }
}

/// The resources a task asked for, as the driver enforces them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResources {
    /// CPU in MHz: a relative weight (cgroup CPU shares), not a cap.
    pub cpu_mhz: u64,
    /// Memory in MB: the hard limit, or the soft one when `memory_max_mb` is set.
    pub memory_mb: u64,
    /// Memory oversubscription: the hard limit in MB; 0 when not set.
    pub memory_max_mb: u64,
}

/// The version of [`TaskHandle`]'s layout; a handle of another version is refused by `recover`.
pub const TASK_HANDLE_VERSION: u32 = 1;

/// What the client persists about a started task, to reattach after its own restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskHandle {
    pub version: u32,
    pub task_id: String,
    /// The driver's name: the client picks the driver to recover with by it.
    pub driver: String,
    pub config: TaskConfig,
    /// The task's main process, where there is one.
    pub pid: Option<u32>,
    pub started_at_unix_ns: i64,
    /// Driver-private state (e.g. the process start time that tells a recycled pid apart).
    pub state: serde_json::Value,
}

impl TaskHandle {
    /// Refuses a handle of another driver or another layout version.
    pub(crate) fn check_for(&self, driver: &str) -> Result<(), DriverError> {
        let refuse = |message: String| DriverError::Recover {
            task_id: self.task_id.clone(),
            message,
        };
        if self.driver != driver {
            return Err(refuse(format!(
                "the handle belongs to driver {:?}, not {driver}",
                self.driver
            )));
        }
        if self.version != TASK_HANDLE_VERSION {
            return Err(refuse(format!(
                "handle version {} is not {TASK_HANDLE_VERSION}",
                self.version
            )));
        }
        Ok(())
    }
}

/// How a task ended (Nomad's `drivers.ExitResult`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitResult {
    /// The exit code; `128 + signal` when a signal killed the process, as shells report it.
    pub exit_code: i32,
    /// The signal that killed the process; 0 when it exited by itself.
    pub signal: i32,
    /// The kernel's OOM killer ended the task (only drivers with a memory cgroup can tell).
    pub oom_killed: bool,
    /// Why the exit is not an ordinary one (e.g. its status could not be known).
    pub err: Option<String>,
}

impl ExitResult {
    /// Exit code 0, no signal, no error: Nomad's `Successful()`.
    pub fn successful(&self) -> bool {
        self.exit_code == 0 && self.signal == 0 && self.err.is_none()
    }
}

/// A task's state, as Nomad's `drivers.TaskState`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    Running,
    Exited,
}

/// What `inspect` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub task_id: String,
    pub name: String,
    pub state: TaskState,
    pub pid: Option<u32>,
    pub started_at_unix_ns: i64,
    pub completed_at_unix_ns: Option<i64>,
    pub exit_result: Option<ExitResult>,
}

/// Resource usage of a task's processes at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskStats {
    pub timestamp_unix_ns: i64,
    /// How many processes were measured.
    pub process_count: usize,
    /// CPU time used in user mode, all processes together, since each started.
    pub cpu_user_seconds: f64,
    /// CPU time used in kernel mode, as `cpu_user_seconds`.
    pub cpu_system_seconds: f64,
    /// CPU use since the previous `stats` call (or since the task started), in percent of one core.
    pub cpu_percent: f64,
    /// Resident memory of all processes together.
    pub memory_rss_bytes: u64,
    /// Swapped-out memory of all processes together.
    pub memory_swap_bytes: u64,
}

/// What a non-interactive `exec` produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecResult {
    /// The command's stdout, cut at [`crate::limits::EXEC_OUTPUT_BYTES_MAX`].
    pub stdout: Vec<u8>,
    /// The command's stderr, as `stdout`.
    pub stderr: Vec<u8>,
    pub exit: ExitResult,
}
