//! The CSI plugin supervisor (Nomad's `csiPluginSupervisorHook`), for a task with a
//! `csi_plugin` block.
//!
//! Before the task starts ([`PluginSetup::plan`], [`PluginSetup::create_dirs`]): the socket
//! directory `<csi root>/plugins/<alloc>` and the staging/publish base `<csi root>/<type>/<id>`
//! exist, `CSI_ENDPOINT` names the socket, and drivers with file-system isolation get both
//! directories (and `/dev`) mounted at `mount_dir` and `stage_publish_base_dir`.
//!
//! After it started ([`PluginSupervisor::spawn`]): Probe every [`CSI_PROBE_INTERVAL_STARTING`]
//! until the plugin is ready — past its health timeout the task is killed, failed, with
//! Nomad's events — then gather its info and register it ([`CsiRegistry`]), then probe every
//! [`CSI_PROBE_INTERVAL_HEALTHY`] and record health changes. The task runner receives the
//! events to record (and the kill) over a channel; stopping the supervisor deregisters the
//! plugin, dropping it (client shutdown) does not.

use crate::csi::registry::{CsiPluginInstance, CsiPluginKind, CsiRegistry};
use crate::limits::{
    CSI_HEALTH_TIMEOUT_DEFAULT, CSI_PROBE_INTERVAL_HEALTHY, CSI_PROBE_INTERVAL_STARTING,
    CSI_PROBE_TIMEOUT, CSI_SUPERVISOR_QUEUE_CAPACITY,
};
use crate::time::now_rfc3339;
use drivers::{FsIsolation, MountConfig};
use model::alloc::{TaskEvent, TASK_EVENT_KILLING, TASK_EVENT_PLUGIN_HEALTHY};
use model::task::TaskCsiPluginConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Nomad's event when a supervised plugin fails its probe.
pub const TASK_EVENT_PLUGIN_UNHEALTHY: &str = "Plugin became unhealthy";
/// The socket file a plugin creates in its mount dir.
pub const CSI_SOCKET_NAME: &str = "csi.sock";
/// Nomad's default `mount_dir`.
pub const MOUNT_DIR_DEFAULT: &str = "/csi";
/// Nomad's default `stage_publish_base_dir`.
pub const STAGE_PUBLISH_BASE_DIR_DEFAULT: &str = "/local/csi";

/// The longest unix socket path (`sun_path` holds 108 bytes with the terminating NUL).
pub const SOCKET_PATH_MAX: usize = 107;
/// The short run dir's name, under `/run` (or the temp dir where there is no `/run`).
const RUN_DIR_NAME: &str = "caravan-csi";

/// The socket directory for a plugin allocation: `wanted` (`<data_dir>/client/csi/plugins/<alloc>`)
/// when its socket path fits a unix socket address, else a short directory in the run dir
/// named by a hash of `wanted` (the same every time, so a restarted client finds the socket of
/// a plugin it reattaches to).
fn socket_dir_for(wanted: &Path) -> PathBuf {
    if wanted.join(CSI_SOCKET_NAME).as_os_str().len() <= SOCKET_PATH_MAX {
        return wanted.to_path_buf();
    }
    let run = if Path::new("/run").is_dir() {
        PathBuf::from("/run").join(RUN_DIR_NAME)
    } else {
        std::env::temp_dir().join(RUN_DIR_NAME)
    };
    // FNV-1a: stable across builds and platforms.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in wanted.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    run.join(format!("{h:016x}"))
}

/// Creates `dir` (mode 0700) unless it exists, and refuses one that is a symlink or is not this
/// process's own (another user could otherwise plant a socket directory in a shared temp dir).
fn make_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("creating {}: {e}", dir.display())),
    }
    let meta =
        std::fs::symlink_metadata(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is not a private directory of this agent's user (uid {me}, mode 0700); remove it",
            dir.display()
        ));
    }
    Ok(())
}

/// Where a plugin task's directories are and how the task is told.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PluginSetup {
    pub plugin_id: String,
    pub plugin_type: String,
    pub alloc_id: String,
    /// The directory the plugin creates its socket in, on the host.
    pub socket_dir: PathBuf,
    pub base_dir_host: PathBuf,
    pub base_dir_plugin: PathBuf,
    /// `CSI_ENDPOINT` as the task sees it.
    pub endpoint: String,
    pub mounts: Vec<MountConfig>,
    pub health_timeout: Duration,
}

impl PluginSetup {
    /// The plan for `cfg` in `alloc_id` under `csi_root` (`<data_dir>/client/csi`); pure.
    pub fn plan(
        csi_root: &Path,
        alloc_id: &str,
        cfg: &TaskCsiPluginConfig,
        isolation: FsIsolation,
    ) -> PluginSetup {
        let socket_dir = socket_dir_for(&csi_root.join("plugins").join(alloc_id));
        let base_dir_host = csi_root.join(&cfg.plugin_type).join(&cfg.id);
        let or = |v: &str, d: &str| {
            if v.is_empty() {
                d.to_string()
            } else {
                v.to_string()
            }
        };
        let mount_dir = or(&cfg.mount_dir, MOUNT_DIR_DEFAULT);
        let base_dir = or(&cfg.stage_publish_base_dir, STAGE_PUBLISH_BASE_DIR_DEFAULT);
        let health_timeout = cfg
            .health_timeout
            .map(|d| Duration::from_nanos(u64::try_from(d.0).unwrap_or(0)))
            .filter(|d| !d.is_zero())
            .unwrap_or(CSI_HEALTH_TIMEOUT_DEFAULT);
        let (endpoint, base_dir_plugin, mounts) = match isolation {
            // The task sees the host: it is handed host paths, nothing is mounted.
            FsIsolation::None => (
                format!("unix://{}", socket_dir.join(CSI_SOCKET_NAME).display()),
                base_dir_host.clone(),
                Vec::new(),
            ),
            FsIsolation::Chroot | FsIsolation::Image => {
                let mount = |host: &Path, task: &str| MountConfig {
                    host_path: host.to_path_buf(),
                    task_path: PathBuf::from(task),
                    readonly: false,
                };
                let mounts = vec![
                    mount(&socket_dir, &mount_dir),
                    mount(&base_dir_host, &base_dir),
                    mount(Path::new("/dev"), "/dev"),
                ];
                let endpoint = format!(
                    "unix://{}",
                    Path::new(&mount_dir).join(CSI_SOCKET_NAME).display()
                );
                (endpoint, PathBuf::from(&base_dir), mounts)
            }
        };
        PluginSetup {
            plugin_id: cfg.id.clone(),
            plugin_type: cfg.plugin_type.clone(),
            alloc_id: alloc_id.to_string(),
            socket_dir,
            base_dir_host,
            base_dir_plugin,
            endpoint,
            mounts,
            health_timeout,
        }
    }

    /// The socket as the host sees it.
    pub fn socket(&self) -> PathBuf {
        self.socket_dir.join(CSI_SOCKET_NAME)
    }

    /// Creates both directories (mode 0700: only root talks to plugins). Fails, saying what to
    /// change, when the socket path cannot fit a unix socket address even in the short run dir.
    pub fn create_dirs(&self) -> Result<(), String> {
        use std::os::unix::fs::DirBuilderExt;
        let socket = self.socket();
        let len = socket.as_os_str().len();
        if len > SOCKET_PATH_MAX {
            return Err(format!(
                "the CSI plugin's socket path {} is {len} bytes, over the {SOCKET_PATH_MAX}-byte limit of unix socket paths, and so is the short run dir's; use a shorter data_dir (or TMPDIR)",
                socket.display()
            ));
        }
        if let Some(run) = self
            .socket_dir
            .parent()
            .filter(|p| p.ends_with(RUN_DIR_NAME))
        {
            make_private_dir(run)?;
        }
        for dir in [&self.socket_dir, &self.base_dir_host] {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("creating CSI plugin directory {}: {e}", dir.display()))?;
        }
        Ok(())
    }
}

/// What a supervisor asks of its task runner.
#[derive(Debug)]
pub(crate) enum SupervisorEvent {
    /// Record this task event.
    Event(Box<TaskEvent>),
    /// Record `unhealthy`, then kill the task with `killing` (which fails it).
    Kill {
        unhealthy: Box<TaskEvent>,
        killing: Box<TaskEvent>,
    },
}

/// A running supervisor, owned by the plugin task's runner.
pub(crate) struct PluginSupervisor {
    join: JoinHandle<()>,
    events: mpsc::Receiver<SupervisorEvent>,
    registry: Arc<CsiRegistry>,
    plugin_id: String,
    alloc_id: String,
    socket_dir: PathBuf,
}

impl PluginSupervisor {
    pub fn spawn(registry: Arc<CsiRegistry>, setup: PluginSetup) -> PluginSupervisor {
        let (tx, events) = mpsc::channel(CSI_SUPERVISOR_QUEUE_CAPACITY);
        let plugin_id = setup.plugin_id.clone();
        let alloc_id = setup.alloc_id.clone();
        let socket_dir = setup.socket_dir.clone();
        let join = tokio::spawn(supervise(Arc::clone(&registry), setup, tx));
        PluginSupervisor {
            join,
            events,
            registry,
            plugin_id,
            alloc_id,
            socket_dir,
        }
    }

    /// The next event; pending for ever once the supervisor has nothing more to say.
    pub async fn next(&mut self) -> SupervisorEvent {
        match self.events.recv().await {
            Some(e) => e,
            None => std::future::pending().await,
        }
    }

    /// The task has stopped: stop probing and deregister the plugin.
    pub fn stop(self) {
        self.join.abort();
        self.registry.deregister(&self.plugin_id, &self.alloc_id);
        // A socket dir in the short run dir is nobody else's to clean up (one under the data
        // dir goes with it).
        if self
            .socket_dir
            .parent()
            .is_some_and(|p| p.ends_with(RUN_DIR_NAME))
        {
            let _ = std::fs::remove_dir_all(&self.socket_dir);
        }
        tracing::info!(plugin_id = %self.plugin_id, alloc_id = %self.alloc_id, "CSI plugin deregistered");
    }
}

impl Drop for PluginSupervisor {
    fn drop(&mut self) {
        self.join.abort();
    }
}

/// The next event of an optional supervisor; pending for ever without one.
pub(crate) async fn next_event(supervisor: &mut Option<PluginSupervisor>) -> SupervisorEvent {
    match supervisor {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

fn event(kind: &str, message: String) -> TaskEvent {
    TaskEvent {
        event_type: kind.to_string(),
        time: crate::time::now_unix_ns(),
        message: message.clone(),
        display_message: message,
        ..TaskEvent::default()
    }
}

pub(crate) fn plugin_healthy(plugin_id: &str) -> TaskEvent {
    event(TASK_EVENT_PLUGIN_HEALTHY, format!("plugin: {plugin_id}"))
}

pub(crate) fn plugin_unhealthy(error: &str) -> TaskEvent {
    event(TASK_EVENT_PLUGIN_UNHEALTHY, format!("Error: {error}"))
}

fn plugin_killing() -> TaskEvent {
    let mut e = event(
        TASK_EVENT_KILLING,
        "CSI plugin did not become healthy before timeout".into(),
    );
    e.fails_task = true;
    e
}

/// One probe: `Ok` when ready, else why not.
async fn probe(socket: &Path) -> Result<csi::PluginClient, String> {
    let client = csi::PluginClient::connect_lazy(&socket.display().to_string(), CSI_PROBE_TIMEOUT)
        .map_err(|e| e.to_string())?;
    match client.probe().await {
        Ok(true) => Ok(client),
        Ok(false) => Err("the plugin reported it is not ready".into()),
        Err(e) => Err(e.to_string()),
    }
}

async fn supervise(
    registry: Arc<CsiRegistry>,
    setup: PluginSetup,
    tx: mpsc::Sender<SupervisorEvent>,
) {
    let socket = setup.socket();
    let deadline = Instant::now() + setup.health_timeout;
    let client = loop {
        let why = match probe(&socket).await {
            Ok(client) => break client,
            Err(why) => why,
        };
        tracing::debug!(plugin_id = %setup.plugin_id, error = %why, "CSI plugin not ready");
        if Instant::now() >= deadline {
            return kill(&tx, &format!("CSI plugin failed probe: {why}")).await;
        }
        tokio::time::sleep_until((Instant::now() + CSI_PROBE_INTERVAL_STARTING).min(deadline))
            .await;
    };
    let _ = tx
        .send(SupervisorEvent::Event(Box::new(plugin_healthy(
            &setup.plugin_id,
        ))))
        .await;
    let info = match client.plugin_info().await {
        Ok(info) => info,
        Err(e) => return kill(&tx, &format!("CSI plugin failed to register: {e}")).await,
    };
    let now = now_rfc3339();
    let instances = CsiPluginKind::of_type(&setup.plugin_type)
        .iter()
        .map(|kind| CsiPluginInstance {
            plugin_id: setup.plugin_id.clone(),
            kind: *kind,
            alloc_id: setup.alloc_id.clone(),
            socket: socket.clone(),
            base_dir_host: setup.base_dir_host.clone(),
            base_dir_plugin: setup.base_dir_plugin.clone(),
            info: info.clone(),
            healthy: true,
            health_description: "healthy".into(),
            update_time: now.clone(),
        })
        .collect();
    registry.register(instances);
    tracing::info!(plugin_id = %setup.plugin_id, plugin_type = %setup.plugin_type, alloc_id = %setup.alloc_id, provider = %info.name, "CSI plugin registered");
    watch_health(&registry, &setup, &tx).await;
}

/// Probes a registered plugin periodically; records and reports health changes.
async fn watch_health(
    registry: &CsiRegistry,
    setup: &PluginSetup,
    tx: &mpsc::Sender<SupervisorEvent>,
) {
    let socket = setup.socket();
    let mut healthy = true;
    loop {
        tokio::time::sleep(CSI_PROBE_INTERVAL_HEALTHY).await;
        let result = probe(&socket).await;
        let now_healthy = result.is_ok();
        if now_healthy == healthy {
            continue;
        }
        healthy = now_healthy;
        let (description, e) = match &result {
            Ok(_) => ("healthy".to_string(), plugin_healthy(&setup.plugin_id)),
            Err(why) => (why.clone(), plugin_unhealthy(why)),
        };
        tracing::warn!(plugin_id = %setup.plugin_id, healthy, %description, "CSI plugin health changed");
        registry.set_health(&setup.plugin_id, &setup.alloc_id, healthy, &description);
        if tx.send(SupervisorEvent::Event(Box::new(e))).await.is_err() {
            return;
        }
    }
}

async fn kill(tx: &mpsc::Sender<SupervisorEvent>, why: &str) {
    tracing::warn!(error = %why, "killing the CSI plugin task");
    let _ = tx
        .send(SupervisorEvent::Kill {
            unhealthy: Box::new(plugin_unhealthy(why)),
            killing: Box::new(plugin_killing()),
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> TaskCsiPluginConfig {
        TaskCsiPluginConfig {
            id: "hp".into(),
            plugin_type: "monolith".into(),
            mount_dir: String::new(),
            stage_publish_base_dir: "/local/csi".into(),
            health_timeout: Some(model::Duration::from_secs(5)),
        }
    }

    #[test]
    fn host_drivers_get_host_paths_and_no_mounts() {
        let s = PluginSetup::plan(Path::new("/d/client/csi"), "a1", &cfg(), FsIsolation::None);
        assert_eq!(s.endpoint, "unix:///d/client/csi/plugins/a1/csi.sock");
        assert_eq!(s.socket(), Path::new("/d/client/csi/plugins/a1/csi.sock"));
        assert_eq!(s.base_dir_host, Path::new("/d/client/csi/monolith/hp"));
        assert_eq!(s.base_dir_plugin, s.base_dir_host);
        assert!(s.mounts.is_empty());
        assert_eq!(s.health_timeout, Duration::from_secs(5));
    }

    /// A data dir a few levels deep (an agent per folder under a temp folder) once made the
    /// socket path pass the 107-byte limit, and the plugin never became healthy.
    #[test]
    fn a_deep_data_dir_gets_a_short_socket_path_the_same_every_time() {
        let deep = Path::new(
            "/tmp/caravan-tests-1234567/some-test-with-a-long-name/agent-c1/data/client/csi",
        );
        let alloc = "5b2d1c1e-8d3f-4f7a-9f3c-2a1b0c9d8e7f";
        let long = deep.join("plugins").join(alloc).join(CSI_SOCKET_NAME);
        assert!(
            long.as_os_str().len() > SOCKET_PATH_MAX,
            "{}",
            long.display()
        );
        for isolation in [FsIsolation::None, FsIsolation::Chroot] {
            let s = PluginSetup::plan(deep, alloc, &cfg(), isolation);
            assert!(
                s.socket().as_os_str().len() <= SOCKET_PATH_MAX,
                "{}",
                s.socket().display()
            );
            assert!(
                s.socket_dir.parent().unwrap().ends_with(RUN_DIR_NAME),
                "{:?}",
                s.socket_dir
            );
            // A restarted client computes the same path for the plugin it reattaches to.
            assert_eq!(s, PluginSetup::plan(deep, alloc, &cfg(), isolation));
            // Another allocation gets its own.
            assert_ne!(
                s.socket_dir,
                PluginSetup::plan(deep, "another-alloc", &cfg(), isolation).socket_dir
            );
        }
        let s = PluginSetup::plan(deep, alloc, &cfg(), FsIsolation::None);
        assert_eq!(s.endpoint, format!("unix://{}", s.socket().display()));
        let s = PluginSetup::plan(deep, alloc, &cfg(), FsIsolation::Chroot);
        assert_eq!(s.mounts[0].host_path, s.socket_dir);
    }

    #[test]
    fn a_socket_path_that_cannot_fit_fails_the_task_saying_what_to_change() {
        let mut s = PluginSetup::plan(Path::new("/d/client/csi"), "a1", &cfg(), FsIsolation::None);
        s.socket_dir = PathBuf::from(format!("/{}", "x".repeat(120)));
        let err = s.create_dirs().unwrap_err();
        assert!(err.contains("107-byte limit"), "{err}");
        assert!(err.contains("shorter data_dir"), "{err}");
    }

    #[test]
    fn isolated_drivers_get_the_dirs_mounted_at_the_plugins_paths() {
        let mut c = cfg();
        c.health_timeout = None;
        let s = PluginSetup::plan(Path::new("/d/client/csi"), "a1", &c, FsIsolation::Chroot);
        assert_eq!(s.endpoint, "unix:///csi/csi.sock");
        assert_eq!(s.base_dir_plugin, Path::new("/local/csi"));
        let pairs: Vec<(String, String)> = s
            .mounts
            .iter()
            .map(|m| {
                (
                    m.host_path.display().to_string(),
                    m.task_path.display().to_string(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [
                ("/d/client/csi/plugins/a1".into(), "/csi".into()),
                ("/d/client/csi/monolith/hp".into(), "/local/csi".into()),
                ("/dev".into(), "/dev".into()),
            ]
        );
        assert_eq!(s.health_timeout, CSI_HEALTH_TIMEOUT_DEFAULT);
    }
}
