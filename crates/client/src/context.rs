//! What every alloc and task runner shares: the drivers, the node, where things go on disk, the
//! durable state, and the queue of status updates to the servers.

use crate::state_db::StateDb;
use model::alloc::Allocation;
use model::node::Node;
use model::wire::AllocClientUpdate;
use model::{Job, Task, TaskGroup};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use tokio::sync::{mpsc, watch};

pub(crate) struct RunnerContext {
    pub drivers: BTreeMap<String, Arc<dyn drivers::Driver>>,
    pub node: SharedNode,
    /// The client's region (`NOMAD_REGION` when the job names none).
    pub region: String,
    /// `<data_dir>/alloc`.
    pub alloc_root: PathBuf,
    pub state: StateDb,
    /// To the update batcher; it drains continuously, so a send waits only for a burst.
    pub updates: mpsc::Sender<AllocClientUpdate>,
    /// Host variables passed to tasks of drivers without an image (denylist applied).
    pub host_env: BTreeMap<String, String>,
    /// Which users tasks may not run as (`user.denylist`, `user.checked_drivers`).
    pub user_policy: crate::config::UserPolicy,
    /// Becomes `true` once when the client shuts down: runners detach from their tasks.
    pub shutdown: watch::Receiver<bool>,
    /// CSI plugins registered here, and where their directories go.
    pub csi: Arc<crate::csi::CsiManager>,
    /// The servers (CSI claims; node calls stay with the client's loops).
    pub conn: Arc<dyn crate::conn::ServerConn>,
    /// Group networks (bridge, CNI).
    pub network: crate::network::NetworkConfig,
    /// The agent's server for the tasks' API sockets, once it has one.
    pub task_api: crate::task_api::TaskApiSlot,
    /// Device plugins: reservations for the instances a task was given.
    pub devices: Arc<crate::devices::DeviceManager>,
}

/// The node as fingerprinted now. Readers take a snapshot; never held across `.await`.
#[derive(Clone, Default)]
pub(crate) struct SharedNode(Arc<RwLock<Arc<Node>>>);

impl SharedNode {
    pub fn new(node: Node) -> SharedNode {
        SharedNode(Arc::new(RwLock::new(Arc::new(node))))
    }

    pub fn get(&self) -> Arc<Node> {
        self.0.read().expect("node lock").clone()
    }

    pub fn update(&self, f: impl FnOnce(&mut Node)) {
        let mut guard = self.0.write().expect("node lock");
        let mut node = (**guard).clone();
        f(&mut node);
        *guard = Arc::new(node);
    }
}

/// The job, group and task of `name` in an allocation.
pub(crate) fn find_task<'a>(
    alloc: &'a Allocation,
    name: &str,
) -> Option<(&'a Job, &'a TaskGroup, &'a Task)> {
    let (job, group) = find_group(alloc)?;
    let task = group.tasks.iter().find(|t| t.name == name)?;
    Some((job, group, task))
}

/// The job and task group of an allocation.
pub(crate) fn find_group(alloc: &Allocation) -> Option<(&Job, &TaskGroup)> {
    let job = alloc.job.as_deref()?;
    let group = job
        .task_groups
        .iter()
        .find(|g| g.name == alloc.task_group)?;
    Some((job, group))
}

/// Resolves once the client shuts down (or its `Client` is gone).
pub(crate) async fn shutting_down(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|down| *down).await;
}
