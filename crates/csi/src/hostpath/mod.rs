//! A monolith CSI plugin (Identity, Controller and Node services in one process) whose volumes are
//! directories on this machine: for tests and single-machine users.
//!
//! Layout under the root: `volumes/<id>/` (a volume), `snapshots/<id>/` (a copy of one), and
//! `state.json` (names, capacities, attachments; see [`store`]). Staging bind-mounts the volume's
//! directory at the staging path; publishing bind-mounts the staging path at the target,
//! read-only when asked. Mounting needs root (`CAP_SYS_ADMIN`).
//!
//! The service structs ([`IdentityService`], [`ControllerService`], [`NodeService`]) are public so
//! a test plugin can wrap them — delegate what it does not change, record or fail the rest.
//!
//! Concurrency: controller calls are serialized by one lock over the store (held across the
//! copies of CreateVolume and CreateSnapshot, so a copy never races a delete of its source);
//! node calls by another (mount state is checked, then changed).

mod controller;
mod identity;
pub mod mount;
mod node;
pub mod store;

use std::future::Future;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::Status;

pub use controller::ControllerService;
pub use identity::IdentityService;
pub use node::NodeService;

use crate::v1;
use crate::v1::volume_capability::access_mode::Mode;
use store::Store;

/// The name the plugin reports in GetPluginInfo.
pub const PLUGIN_NAME: &str = "hostpath.csi.caravan";
/// The topology segment naming the node that holds a volume's directory.
pub const TOPOLOGY_KEY: &str = "hostpath.csi.caravan/node";

/// How long calls in flight may finish after shutdown is asked for.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How the plugin is set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where volumes, snapshots and `state.json` live; created if missing.
    pub root: PathBuf,
    /// This node's ID, reported by NodeGetInfo and used as the volumes' topology.
    pub node_id: String,
    /// NodeGetInfo's limit, also enforced by ControllerPublishVolume per node; 0: no limit.
    pub max_volumes_per_node: i64,
    /// Every node sees the same `root` (one machine, or a shared file system): volumes have no
    /// topology and any node may publish them. Otherwise a volume lives on the node that made it.
    pub shared: bool,
}

/// Why the plugin could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    #[error("serving gRPC: {0}")]
    Transport(#[from] tonic::transport::Error),
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> ServeError {
    let what = what.into();
    move |source| ServeError::Io { what, source }
}

/// The plugin's state, shared by its three services. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Hostpath {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    /// Controller records; held across `.await` (copies run under it), never by node calls.
    store: tokio::sync::Mutex<Store>,
    /// Serializes node calls (mount checks then mount changes); held across `.await`.
    node_lock: tokio::sync::Mutex<()>,
}

impl Hostpath {
    /// Opens (creating if needed) the root and reads `state.json`.
    pub fn open(config: Config) -> Result<Self, ServeError> {
        for dir in ["volumes", "snapshots"] {
            let path = config.root.join(dir);
            std::fs::create_dir_all(&path)
                .map_err(io_error(format!("creating {}", path.display())))?;
        }
        let store = Store::open(&config.root).map_err(io_error(format!(
            "reading {}",
            config.root.join("state.json").display()
        )))?;
        Ok(Hostpath {
            inner: Arc::new(Inner {
                config,
                store: tokio::sync::Mutex::new(store),
                node_lock: tokio::sync::Mutex::new(()),
            }),
        })
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn identity(&self) -> IdentityService {
        IdentityService::new(self.clone())
    }

    pub fn controller(&self) -> ControllerService {
        ControllerService::new(self.clone())
    }

    pub fn node(&self) -> NodeService {
        NodeService::new(self.clone())
    }

    fn volume_dir(&self, id: &str) -> PathBuf {
        self.inner.config.root.join("volumes").join(id)
    }

    fn snapshot_dir(&self, id: &str) -> PathBuf {
        self.inner.config.root.join("snapshots").join(id)
    }

    /// The topology of this node's volumes; `None` with a shared root (reachable everywhere).
    fn topology(&self) -> Option<v1::Topology> {
        (!self.inner.config.shared).then(|| v1::Topology {
            segments: [(TOPOLOGY_KEY.to_string(), self.inner.config.node_id.clone())].into(),
        })
    }
}

/// A plugin bound to its socket, not yet answering. The socket exists once this is made, so a
/// client may dial it right away.
pub struct Bound {
    plugin: Hostpath,
    socket: PathBuf,
    listener: UnixListener,
}

impl Bound {
    /// Opens the plugin and listens on `socket` (a stale socket file there is removed first;
    /// anything else there is an error). Needs a tokio runtime.
    pub fn new(socket: &Path, config: Config) -> Result<Self, ServeError> {
        let plugin = Hostpath::open(config)?;
        remove_stale_socket(socket)?;
        if let Some(parent) = socket.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(io_error(format!("creating {}", parent.display())))?;
        }
        let listener = UnixListener::bind(socket)
            .map_err(io_error(format!("listening on {}", socket.display())))?;
        Ok(Bound {
            plugin,
            socket: socket.to_path_buf(),
            listener,
        })
    }

    pub fn plugin(&self) -> &Hostpath {
        &self.plugin
    }

    /// Answers CSI calls until `shutdown` completes, then removes the socket.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServeError> {
        let Bound {
            plugin,
            socket,
            listener,
        } = self;
        let stopping = tokio::sync::Notify::new();
        let signal = async {
            shutdown.await;
            stopping.notify_one();
        };
        let serving = tonic::transport::Server::builder()
            .add_service(v1::identity_server::IdentityServer::new(plugin.identity()))
            .add_service(v1::controller_server::ControllerServer::new(
                plugin.controller(),
            ))
            .add_service(v1::node_server::NodeServer::new(plugin.node()))
            .serve_with_incoming_shutdown(UnixListenerStream::new(listener), signal);
        // A graceful stop waits for every connection to close; an idle client may keep one
        // open for ever, so calls in flight get SHUTDOWN_GRACE and then the connections drop.
        let result = tokio::select! {
            result = serving => result.map_err(ServeError::from),
            () = async {
                stopping.notified().await;
                tokio::time::sleep(SHUTDOWN_GRACE).await;
            } => Ok(()),
        };
        let _ = std::fs::remove_file(&socket);
        result
    }
}

/// Runs the hostpath plugin on the unix socket `socket` until `shutdown` completes.
pub async fn serve(
    socket: &Path,
    config: Config,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    Bound::new(socket, config)?.run(shutdown).await
}

fn remove_stale_socket(socket: &Path) -> Result<(), ServeError> {
    match std::fs::symlink_metadata(socket) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(socket).map_err(io_error(
            format!("removing stale socket {}", socket.display()),
        )),
        Ok(_) => Err(ServeError::Io {
            what: format!("{} exists and is not a socket", socket.display()),
            source: io::Error::from(io::ErrorKind::AlreadyExists),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_error(format!("inspecting {}", socket.display()))(e)),
    }
}

/// The access mode of a capability this plugin supports (mount access, any known mode).
fn supported_mode(cap: &v1::VolumeCapability) -> Result<Mode, String> {
    match cap.access_type {
        Some(v1::volume_capability::AccessType::Mount(_)) => {}
        Some(v1::volume_capability::AccessType::Block(_)) => {
            return Err("block volumes are not supported: volumes are directories".into())
        }
        None => return Err("volume capability has no access type".into()),
    }
    let mode = cap
        .access_mode
        .and_then(|m| Mode::try_from(m.mode).ok())
        .unwrap_or(Mode::Unknown);
    if mode == Mode::Unknown {
        return Err("volume capability has no known access mode".into());
    }
    Ok(mode)
}

/// [`supported_mode`] for a required capability: missing or unsupported is INVALID_ARGUMENT.
fn required_mode(cap: Option<&v1::VolumeCapability>) -> Result<Mode, Status> {
    let cap = cap.ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
    supported_mode(cap).map_err(Status::invalid_argument)
}

fn is_single_node(mode: Mode) -> bool {
    matches!(
        mode,
        Mode::SingleNodeWriter
            | Mode::SingleNodeReaderOnly
            | Mode::SingleNodeSingleWriter
            | Mode::SingleNodeMultiWriter
    )
}

fn is_read_only(mode: Mode) -> bool {
    matches!(mode, Mode::SingleNodeReaderOnly | Mode::MultiNodeReaderOnly)
}

fn require(value: &str, field: &str) -> Result<(), Status> {
    if value.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    Ok(())
}

/// A required absolute path.
fn require_path(value: &str, field: &str) -> Result<PathBuf, Status> {
    require(value, field)?;
    let path = PathBuf::from(value);
    if !path.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "{field} {value:?} is not absolute"
        )));
    }
    Ok(path)
}

fn internal(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> Status {
    move |e| Status::internal(format!("{what}: {e}"))
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, Status> + Send + 'static,
) -> Result<T, Status> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| Status::internal(format!("file work panicked: {e}")))?
}
