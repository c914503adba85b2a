//! The node side of CSI volumes (Nomad's csimanager `volumeManager`): stage and publish a volume
//! for an allocation through the node plugin registered here, and unpublish and unstage it.
//!
//! Paths under the plugin's staging/publish base: `staging/<volume>/<usage>` and
//! `per-alloc/<alloc>/<volume>/<usage>`, where usage reads like
//! `rw-file-system-single-node-writer`. Each step is skipped when its path is already a mount.
//! NodeUnstageVolume runs only once no other allocation on this node has the volume published
//! with the same usage (read from the `per-alloc` directories, so it survives a client restart).
//!
//! **Invariant:** node calls for one volume never overlap on this client: every mount and unmount
//! holds that volume's async lock across all its calls (the CSI spec asks the CO for at most one
//! call in flight per volume). A call that fails with a retryable code is tried again with
//! backoff, at most [`CSI_NODE_CALL_TRIES_MAX`] times in all.

use crate::csi::registry::{CsiPluginInstance, CsiPluginKind, CsiRegistry};
use crate::limits::{CSI_NODE_CALL_TIMEOUT, CSI_NODE_CALL_TRIES_MAX};
use crate::rng::{Backoff, Rng};
use csi::v1;
use model::csi::CSIVolume;
use model::group::CsiMountOptions;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Why a volume could not be mounted or unmounted on this node.
#[derive(Debug, thiserror::Error)]
pub enum CsiVolumeError {
    /// No node plugin with this ID is registered on this client.
    #[error("CSI node plugin {0:?} is not running on this node")]
    PluginNotFound(String),
    /// The plugin answered a node call with an error (after the retries a retryable code gets).
    #[error("{call} of volume {volume:?}: {source}")]
    Plugin {
        call: &'static str,
        volume: String,
        #[source]
        source: csi::CsiError,
    },
    /// A directory under the plugin's staging/publish base could not be made or read.
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl CsiVolumeError {
    /// Whether trying the whole mount or unmount again later may work.
    pub fn is_retryable(&self) -> bool {
        match self {
            CsiVolumeError::PluginNotFound(_) => true,
            CsiVolumeError::Plugin { source, .. } => source.is_retryable(),
            CsiVolumeError::Io { .. } => false,
        }
    }
}

/// How an allocation uses a volume; one staging and one publish path per usage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CsiVolumeUsage {
    pub read_only: bool,
    /// `file-system` or `block-device`.
    pub attachment_mode: String,
    /// `single-node-writer`, …
    pub access_mode: String,
}

impl CsiVolumeUsage {
    /// The directory name of this usage: `rw-file-system-single-node-writer`.
    pub fn dir_name(&self) -> String {
        let rw = if self.read_only { "ro" } else { "rw" };
        format!("{rw}-{}-{}", self.attachment_mode, self.access_mode)
    }
}

/// One volume's node paths for one plugin instance: as the host sees them and as the plugin does.
struct Paths {
    staging_host: PathBuf,
    staging_plugin: PathBuf,
    target_host: PathBuf,
    target_plugin: PathBuf,
}

impl Paths {
    fn new(inst: &CsiPluginInstance, volume_id: &str, alloc_id: &str, usage: &str) -> Paths {
        let staging = Path::new("staging").join(volume_id).join(usage);
        let target = Path::new("per-alloc")
            .join(alloc_id)
            .join(volume_id)
            .join(usage);
        Paths {
            staging_host: inst.base_dir_host.join(&staging),
            staging_plugin: inst.base_dir_plugin.join(&staging),
            target_host: inst.base_dir_host.join(&target),
            target_plugin: inst.base_dir_plugin.join(&target),
        }
    }
}

/// Node-side mounts of CSI volumes, serialized per volume.
pub(crate) struct VolumeManager {
    registry: Arc<CsiRegistry>,
    /// Volume ID → its lock, held (across `.await`) for a whole mount or unmount. An entry
    /// lives while someone holds or waits for it. The map itself is never held across `.await`.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A held volume lock; dropping it removes the map entry when nobody else wants it.
struct VolumeLock<'a> {
    manager: &'a VolumeManager,
    volume_id: String,
    lock: Arc<tokio::sync::Mutex<()>>,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for VolumeLock<'_> {
    fn drop(&mut self) {
        self.guard.take();
        let mut locks = self.manager.locks.lock().expect("volume locks");
        // The map's Arc and ours: nobody waits. Clones are only made under the map's lock.
        if Arc::strong_count(&self.lock) == 2 {
            locks.remove(&self.volume_id);
        }
    }
}

impl VolumeManager {
    pub fn new(registry: Arc<CsiRegistry>) -> VolumeManager {
        VolumeManager {
            registry,
            locks: Mutex::new(HashMap::new()),
        }
    }

    async fn lock(&self, volume_id: &str) -> VolumeLock<'_> {
        let lock = {
            let mut locks = self.locks.lock().expect("volume locks");
            Arc::clone(locks.entry(volume_id.to_string()).or_default())
        };
        let guard = Arc::clone(&lock).lock_owned().await;
        VolumeLock {
            manager: self,
            volume_id: volume_id.to_string(),
            lock,
            guard: Some(guard),
        }
    }

    fn node_plugin(&self, plugin_id: &str) -> Result<CsiPluginInstance, CsiVolumeError> {
        self.registry
            .get(CsiPluginKind::Node, plugin_id)
            .ok_or_else(|| CsiVolumeError::PluginNotFound(plugin_id.to_string()))
    }

    /// Stages (when the plugin stages) and publishes `volume` for `alloc_id`; returns the host
    /// path of the published volume, to be mounted into the allocation's tasks.
    pub async fn mount_volume(
        &self,
        plugin_id: &str,
        volume: &CSIVolume,
        alloc_id: &str,
        usage: &CsiVolumeUsage,
        publish_context: &BTreeMap<String, String>,
    ) -> Result<PathBuf, CsiVolumeError> {
        let inst = self.node_plugin(plugin_id)?;
        let client = plugin_client(&inst)?;
        let _lock = self.lock(&volume.id).await;
        let paths = Paths::new(&inst, &volume.id, alloc_id, &usage.dir_name());
        let stages = inst.info.node.as_ref().is_some_and(|n| n.stage_unstage);
        let capability = capability(usage, volume.mount_options.as_ref(), &volume.id)?;
        let remote_id = volume.remote_id().to_string();
        let to_map = |m: &BTreeMap<String, String>| m.clone().into_iter().collect();
        let usage_dir = usage.dir_name();
        if stages
            && is_mount(&paths.staging_host)?
            && !still_published(&inst.base_dir_host, &volume.id, &usage_dir)
        {
            // A staging mount no allocation publishes from: left by one whose release never
            // finished, and possibly stale (the volume may have been detached and attached
            // again since). It is unstaged and staged afresh rather than reused.
            tracing::warn!(volume = %volume.id, path = %paths.staging_host.display(),
                "a staging mount nobody uses is left from an earlier allocation; unstaging it first");
            let req = v1::NodeUnstageVolumeRequest {
                volume_id: remote_id.clone(),
                staging_target_path: paths.staging_plugin.display().to_string(),
            };
            with_retries("NodeUnstageVolume", &volume.id, || {
                client.node_unstage_volume(req.clone())
            })
            .await?;
        }
        if stages && !is_mount(&paths.staging_host)? {
            create_dir(&paths.staging_host)?;
            let req = v1::NodeStageVolumeRequest {
                volume_id: remote_id.clone(),
                publish_context: to_map(publish_context),
                staging_target_path: paths.staging_plugin.display().to_string(),
                volume_capability: Some(capability.clone()),
                secrets: to_map(&volume.secrets),
                volume_context: to_map(&volume.context),
            };
            with_retries("NodeStageVolume", &volume.id, || {
                client.node_stage_volume(req.clone())
            })
            .await?;
        }
        if !is_mount(&paths.target_host)? {
            if let Some(parent) = paths.target_host.parent() {
                create_dir(parent)?;
            }
            let req = v1::NodePublishVolumeRequest {
                volume_id: remote_id,
                publish_context: to_map(publish_context),
                staging_target_path: if stages {
                    paths.staging_plugin.display().to_string()
                } else {
                    String::new()
                },
                target_path: paths.target_plugin.display().to_string(),
                volume_capability: Some(capability),
                readonly: usage.read_only,
                secrets: to_map(&volume.secrets),
                volume_context: to_map(&volume.context),
            };
            with_retries("NodePublishVolume", &volume.id, || {
                client.node_publish_volume(req.clone())
            })
            .await?;
        }
        Ok(paths.target_host)
    }

    /// Unpublishes `volume_id` (the provider knows it as `remote_id`) for `alloc_id`, then
    /// unstages it when no other allocation on this node uses it the same way.
    pub async fn unmount_volume(
        &self,
        plugin_id: &str,
        volume_id: &str,
        remote_id: &str,
        alloc_id: &str,
        usage: &CsiVolumeUsage,
    ) -> Result<(), CsiVolumeError> {
        let inst = self.node_plugin(plugin_id)?;
        let client = plugin_client(&inst)?;
        let _lock = self.lock(volume_id).await;
        let usage_dir = usage.dir_name();
        let paths = Paths::new(&inst, volume_id, alloc_id, &usage_dir);
        let req = v1::NodeUnpublishVolumeRequest {
            volume_id: remote_id.to_string(),
            target_path: paths.target_plugin.display().to_string(),
        };
        with_retries("NodeUnpublishVolume", volume_id, || {
            client.node_unpublish_volume(req.clone())
        })
        .await?;
        remove_empty_dirs(&paths.target_host, &inst.base_dir_host.join("per-alloc"));
        let stages = inst.info.node.as_ref().is_some_and(|n| n.stage_unstage);
        if !stages || still_published(&inst.base_dir_host, volume_id, &usage_dir) {
            return Ok(());
        }
        let req = v1::NodeUnstageVolumeRequest {
            volume_id: remote_id.to_string(),
            staging_target_path: paths.staging_plugin.display().to_string(),
        };
        with_retries("NodeUnstageVolume", volume_id, || {
            client.node_unstage_volume(req.clone())
        })
        .await?;
        remove_empty_dirs(&paths.staging_host, &inst.base_dir_host.join("staging"));
        Ok(())
    }
}

impl VolumeManager {
    /// Grows `volume_id` where it is published for `alloc_id` (NodeExpandVolume), after the
    /// controller expanded it; nothing to do for a node plugin without EXPAND_VOLUME.
    /// Serialized with every other node call for that volume.
    #[allow(clippy::too_many_arguments)]
    pub async fn expand_volume(
        &self,
        plugin_id: &str,
        volume_id: &str,
        remote_id: &str,
        alloc_id: &str,
        usage: &CsiVolumeUsage,
        capacity_min: i64,
        capacity_max: i64,
    ) -> Result<(), CsiVolumeError> {
        let inst = self.node_plugin(plugin_id)?;
        if !inst.info.node.as_ref().is_some_and(|n| n.expand) {
            return Ok(());
        }
        let client = plugin_client(&inst)?;
        let _lock = self.lock(volume_id).await;
        let usage_dir = usage.dir_name();
        let paths = Paths::new(&inst, volume_id, alloc_id, &usage_dir);
        let stages = inst.info.node.as_ref().is_some_and(|n| n.stage_unstage);
        let req = v1::NodeExpandVolumeRequest {
            volume_id: remote_id.to_string(),
            volume_path: paths.target_plugin.display().to_string(),
            capacity_range: Some(v1::CapacityRange {
                required_bytes: capacity_min,
                limit_bytes: capacity_max,
            }),
            staging_target_path: if stages {
                paths.staging_plugin.display().to_string()
            } else {
                String::new()
            },
            volume_capability: Some(capability(usage, None, volume_id)?),
            secrets: Default::default(),
        };
        with_retries("NodeExpandVolume", volume_id, || {
            client.node_expand_volume(req.clone())
        })
        .await?;
        Ok(())
    }
}

fn plugin_client(inst: &CsiPluginInstance) -> Result<csi::PluginClient, CsiVolumeError> {
    inst.client(CSI_NODE_CALL_TIMEOUT)
        .map_err(|source| CsiVolumeError::Plugin {
            call: "dialing the node plugin",
            volume: String::new(),
            source,
        })
}

/// Runs a node call, again after a retryable failure (with backoff), at most
/// [`CSI_NODE_CALL_TRIES_MAX`] times.
async fn with_retries<T, F, Fut>(
    call: &'static str,
    volume: &str,
    mut send: F,
) -> Result<T, CsiVolumeError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, csi::CsiError>>,
{
    let mut backoff = Backoff::new(Rng::from_entropy());
    let mut tries = 0;
    loop {
        tries += 1;
        match send().await {
            Ok(v) => return Ok(v),
            Err(e) if e.is_retryable() && tries < CSI_NODE_CALL_TRIES_MAX => {
                let delay = backoff.next_delay();
                tracing::warn!(%call, %volume, error = %e, retry_in = ?delay, "CSI node call failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(source) => {
                return Err(CsiVolumeError::Plugin {
                    call,
                    volume: volume.to_string(),
                    source,
                })
            }
        }
    }
}

/// The CSI capability of a usage (access mode, and a mount with its options or a block device):
/// the csi crate's mapping, the same the servers use for controller calls.
fn capability(
    usage: &CsiVolumeUsage,
    options: Option<&CsiMountOptions>,
    volume: &str,
) -> Result<v1::VolumeCapability, CsiVolumeError> {
    let options = options.cloned().unwrap_or_default();
    csi::remote::capability(&model::wire::CsiCapability {
        access_mode: usage.access_mode.clone(),
        attachment_mode: usage.attachment_mode.clone(),
        fs_type: options.fs_type,
        mount_flags: options.mount_flags,
    })
    .map_err(|source| CsiVolumeError::Plugin {
        call: "VolumeCapability",
        volume: volume.to_string(),
        source,
    })
}

/// Whether something is mounted exactly at `path`.
pub(crate) fn is_mount(path: &Path) -> Result<bool, CsiVolumeError> {
    csi::hostpath::mount::mounted_at(path)
        .map(|m| m.is_some())
        .map_err(|source| CsiVolumeError::Io {
            what: "reading the mounts at",
            path: path.to_path_buf(),
            source,
        })
}

fn create_dir(path: &Path) -> Result<(), CsiVolumeError> {
    std::fs::create_dir_all(path).map_err(|source| CsiVolumeError::Io {
        what: "creating",
        path: path.to_path_buf(),
        source,
    })
}

/// Whether any allocation still has `volume_id` published with this usage.
fn still_published(base: &Path, volume_id: &str, usage: &str) -> bool {
    let Ok(allocs) = std::fs::read_dir(base.join("per-alloc")) else {
        return false;
    };
    allocs
        .filter_map(Result::ok)
        .any(|a| a.path().join(volume_id).join(usage).exists())
}

/// Removes `path` and its empty parents up to (not including) `stop`; never a non-empty
/// directory (`remove_dir`), so a leftover mount's files are never touched.
fn remove_empty_dirs(path: &Path, stop: &Path) {
    let mut dir = Some(path);
    while let Some(d) = dir.filter(|d| d.starts_with(stop) && *d != stop) {
        match std::fs::remove_dir(d) {
            Ok(()) => {}
            // The plugin removed it (a target is the plugin's to remove).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(_) => return,
        }
        dir = d.parent();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::SharedNode;
    use csi::v1::node_server::{Node, NodeServer};
    use csi::v1::volume_capability::access_mode::Mode;
    use model::node::Node as ClusterNode;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tokio::sync::Notify;
    use tonic::{Request, Response, Status};

    /// The hostpath node service, recording the node calls and whether two for one volume were
    /// ever in flight together. Each call lingers a little, so an overlap could not hide.
    #[derive(Clone)]
    struct Recording {
        inner: csi::hostpath::NodeService,
        in_flight: Arc<Mutex<HashMap<String, usize>>>,
        overlaps: Arc<AtomicUsize>,
        calls: Arc<Mutex<Vec<String>>>,
    }

    impl Recording {
        async fn around<T>(&self, volume: &str, call: &str, f: impl Future<Output = T>) -> T {
            {
                let mut m = self.in_flight.lock().unwrap();
                let n = m.entry(volume.to_string()).or_default();
                *n += 1;
                if *n > 1 {
                    self.overlaps.fetch_add(1, Ordering::SeqCst);
                }
            }
            self.calls.lock().unwrap().push(call.to_string());
            tokio::time::sleep(Duration::from_millis(30)).await;
            let out = f.await;
            *self
                .in_flight
                .lock()
                .unwrap()
                .get_mut(volume)
                .expect("counted") -= 1;
            out
        }
    }

    #[tonic::async_trait]
    impl Node for Recording {
        async fn node_stage_volume(
            &self,
            r: Request<v1::NodeStageVolumeRequest>,
        ) -> Result<Response<v1::NodeStageVolumeResponse>, Status> {
            let v = r.get_ref().volume_id.clone();
            self.around(&v, "stage", self.inner.node_stage_volume(r))
                .await
        }
        async fn node_unstage_volume(
            &self,
            r: Request<v1::NodeUnstageVolumeRequest>,
        ) -> Result<Response<v1::NodeUnstageVolumeResponse>, Status> {
            let v = r.get_ref().volume_id.clone();
            self.around(&v, "unstage", self.inner.node_unstage_volume(r))
                .await
        }
        async fn node_publish_volume(
            &self,
            r: Request<v1::NodePublishVolumeRequest>,
        ) -> Result<Response<v1::NodePublishVolumeResponse>, Status> {
            let v = r.get_ref().volume_id.clone();
            self.around(&v, "publish", self.inner.node_publish_volume(r))
                .await
        }
        async fn node_unpublish_volume(
            &self,
            r: Request<v1::NodeUnpublishVolumeRequest>,
        ) -> Result<Response<v1::NodeUnpublishVolumeResponse>, Status> {
            let v = r.get_ref().volume_id.clone();
            self.around(&v, "unpublish", self.inner.node_unpublish_volume(r))
                .await
        }
        async fn node_get_capabilities(
            &self,
            r: Request<v1::NodeGetCapabilitiesRequest>,
        ) -> Result<Response<v1::NodeGetCapabilitiesResponse>, Status> {
            self.inner.node_get_capabilities(r).await
        }
        async fn node_get_info(
            &self,
            r: Request<v1::NodeGetInfoRequest>,
        ) -> Result<Response<v1::NodeGetInfoResponse>, Status> {
            self.inner.node_get_info(r).await
        }
    }

    /// Unmounts whatever is still mounted under the test's directory, then removes it.
    struct Cleanup(PathBuf);

    impl Drop for Cleanup {
        fn drop(&mut self) {
            let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
            let mut mounted: Vec<PathBuf> = csi::hostpath::mount::parse_mountinfo(&table)
                .into_iter()
                .map(|m| m.path)
                .filter(|p| p.starts_with(&self.0))
                .collect();
            mounted.reverse();
            for p in mounted {
                let _ = csi::hostpath::mount::unmount(&p);
            }
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_mounts_of_one_volume_never_overlap_and_the_last_unmount_unstages() {
        if !is_root() {
            eprintln!("skipped: bind mounts need root");
            return;
        }
        let dir = std::env::temp_dir().join(format!("caravan-csi-vm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let dir = std::fs::canonicalize(&dir).unwrap();
        let _cleanup = Cleanup(dir.clone());
        let socket = dir.join("csi.sock");
        let plugin = csi::hostpath::Hostpath::open(csi::hostpath::Config {
            root: dir.join("root"),
            node_id: "n1".into(),
            max_volumes_per_node: 0,
            shared: false,
        })
        .unwrap();
        let recording = Recording {
            inner: plugin.node(),
            in_flight: Arc::default(),
            overlaps: Arc::default(),
            calls: Arc::default(),
        };
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(v1::identity_server::IdentityServer::new(plugin.identity()))
                .add_service(v1::controller_server::ControllerServer::new(
                    plugin.controller(),
                ))
                .add_service(NodeServer::new(recording.clone()))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::UnixListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                ),
        );

        let client =
            csi::PluginClient::connect_lazy(&socket.display().to_string(), Duration::from_secs(10))
                .unwrap();
        let info = client.plugin_info().await.unwrap();
        let registry = Arc::new(CsiRegistry::new(
            SharedNode::new(ClusterNode::default()),
            Arc::new(Notify::new()),
        ));
        let base = dir.join("base");
        registry.register(vec![CsiPluginInstance {
            plugin_id: "hp".into(),
            kind: CsiPluginKind::Node,
            alloc_id: "plugin-alloc".into(),
            socket: socket.clone(),
            base_dir_host: base.clone(),
            base_dir_plugin: base.clone(),
            info,
            healthy: true,
            health_description: "healthy".into(),
            update_time: String::new(),
        }]);
        let usage = CsiVolumeUsage {
            read_only: false,
            attachment_mode: "file-system".into(),
            access_mode: "multi-node-multi-writer".into(),
        };
        let created = client
            .create_volume(v1::CreateVolumeRequest {
                name: "shared".into(),
                volume_capabilities: vec![capability(&usage, None, "shared").unwrap()],
                ..Default::default()
            })
            .await
            .unwrap()
            .volume
            .unwrap();
        let volume = CSIVolume {
            id: "shared".into(),
            external_id: created.volume_id.clone(),
            plugin_id: "hp".into(),
            ..CSIVolume::default()
        };
        let manager = Arc::new(VolumeManager::new(Arc::clone(&registry)));
        let mount = |alloc: &'static str| {
            let (manager, volume, usage) = (Arc::clone(&manager), volume.clone(), usage.clone());
            tokio::spawn(async move {
                manager
                    .mount_volume("hp", &volume, alloc, &usage, &BTreeMap::new())
                    .await
            })
        };
        let (a, b) = (mount("alloc-a"), mount("alloc-b"));
        let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
        assert_eq!(
            a,
            base.join("per-alloc/alloc-a/shared/rw-file-system-multi-node-multi-writer")
        );
        assert!(is_mount(&a).unwrap() && is_mount(&b).unwrap());
        let staging = base.join("staging/shared/rw-file-system-multi-node-multi-writer");
        assert!(is_mount(&staging).unwrap());
        std::fs::write(a.join("hello"), "from a").unwrap();
        assert_eq!(std::fs::read_to_string(b.join("hello")).unwrap(), "from a");
        {
            let calls = recording.calls.lock().unwrap().clone();
            let stages = calls.iter().filter(|c| *c == "stage").count();
            assert_eq!(stages, 1, "staged once, then skipped: {calls:?}");
        }

        // Mounting again is a no-op: both steps see their mounts.
        let before = recording.calls.lock().unwrap().len();
        let again = manager
            .mount_volume("hp", &volume, "alloc-a", &usage, &BTreeMap::new())
            .await
            .unwrap();
        assert_eq!(again, a);
        assert_eq!(recording.calls.lock().unwrap().len(), before);

        // Two unmounts at once: the first leaves the staging mount for the other allocation.
        let unmount = |alloc: &'static str| {
            let (manager, usage, remote) = (
                Arc::clone(&manager),
                usage.clone(),
                created.volume_id.clone(),
            );
            tokio::spawn(async move {
                manager
                    .unmount_volume("hp", "shared", &remote, alloc, &usage)
                    .await
            })
        };
        let (ua, ub) = (unmount("alloc-a"), unmount("alloc-b"));
        ua.await.unwrap().unwrap();
        ub.await.unwrap().unwrap();
        assert!(!is_mount(&a).unwrap() && !is_mount(&b).unwrap());
        assert!(!is_mount(&staging).unwrap());
        assert!(!base.join("per-alloc/alloc-a").exists());
        let calls = recording.calls.lock().unwrap().clone();
        assert_eq!(
            calls.iter().filter(|c| *c == "unstage").count(),
            1,
            "{calls:?}"
        );
        assert_eq!(
            recording.overlaps.load(Ordering::SeqCst),
            0,
            "node calls for one volume overlapped: {calls:?}"
        );
        assert!(manager.locks.lock().unwrap().is_empty(), "locks are freed");

        // A staging mount left by an allocation whose release never finished (unpublished,
        // never unstaged) is not reused by the next one: it is unstaged and staged afresh.
        let c = manager
            .mount_volume("hp", &volume, "alloc-c", &usage, &BTreeMap::new())
            .await
            .unwrap();
        client
            .node_unpublish_volume(v1::NodeUnpublishVolumeRequest {
                volume_id: created.volume_id.clone(),
                target_path: c.display().to_string(),
            })
            .await
            .unwrap();
        let _ = std::fs::remove_dir_all(base.join("per-alloc/alloc-c"));
        assert!(
            is_mount(&staging).unwrap(),
            "the leak: staged, published by nobody"
        );
        recording.calls.lock().unwrap().clear();
        let d = manager
            .mount_volume("hp", &volume, "alloc-d", &usage, &BTreeMap::new())
            .await
            .unwrap();
        assert_eq!(
            *recording.calls.lock().unwrap(),
            ["unstage", "stage", "publish"],
            "the stale staging mount is unstaged before the volume is staged again"
        );
        assert!(is_mount(&d).unwrap() && is_mount(&staging).unwrap());
        manager
            .unmount_volume("hp", "shared", &created.volume_id, "alloc-d", &usage)
            .await
            .unwrap();
        assert!(!is_mount(&staging).unwrap());

        // A plugin that is not registered is a retryable error.
        let e = manager
            .mount_volume("nope", &volume, "alloc-c", &usage, &BTreeMap::new())
            .await
            .unwrap_err();
        assert!(matches!(e, CsiVolumeError::PluginNotFound(_)) && e.is_retryable());

        let _ = stop.send(());
        let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
    }

    #[test]
    fn usage_dirs_and_capabilities_follow_nomad() {
        let usage = CsiVolumeUsage {
            read_only: true,
            attachment_mode: "block-device".into(),
            access_mode: "single-node-reader-only".into(),
        };
        assert_eq!(usage.dir_name(), "ro-block-device-single-node-reader-only");
        let cap = capability(&usage, None, "v").unwrap();
        assert_eq!(
            cap.access_mode.unwrap().mode,
            Mode::SingleNodeReaderOnly as i32
        );
        assert!(matches!(
            cap.access_type,
            Some(v1::volume_capability::AccessType::Block(_))
        ));
    }
}
