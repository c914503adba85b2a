//! The client's side of CSI (issue #8), as Nomad's client does it:
//! - [`supervisor`]: a task with a `csi_plugin` block gets its socket and staging directories,
//!   is probed until healthy (or killed at its health timeout) and is then registered;
//! - [`registry`]: the plugins registered here, reflected into the node's
//!   `CSIControllerPlugins` / `CSINodePlugins` (a change registers the node again);
//! - [`volumes`]: staging and publishing volumes through a node plugin, serialized per volume;
//! - [`hook`]: an allocation's CSI volumes: claimed and mounted before its tasks start, handed
//!   to the tasks' `volume_mount`s, unmounted and released once its tasks are dead.
//!
//! Directory layout under `<data_dir>/client/csi`: `plugins/<alloc>/csi.sock` (a plugin's
//! socket) and `<type>/<plugin id>/` (its staging and publish base).

pub(crate) mod hook;
pub(crate) mod registry;
pub(crate) mod supervisor;
pub(crate) mod volumes;

use crate::context::SharedNode;
use registry::CsiRegistry;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Notify;
use volumes::VolumeManager;

/// What every runner shares for CSI.
pub(crate) struct CsiManager {
    /// `<data_dir>/client/csi`.
    pub root: PathBuf,
    pub registry: Arc<CsiRegistry>,
    pub volumes: VolumeManager,
}

impl CsiManager {
    pub fn new(root: PathBuf, node: SharedNode, reregister: Arc<Notify>) -> CsiManager {
        let registry = Arc::new(CsiRegistry::new(node, reregister));
        CsiManager {
            root,
            volumes: VolumeManager::new(Arc::clone(&registry)),
            registry,
        }
    }
}
