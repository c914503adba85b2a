//! [`Client`]: starting the node agent (identity, fingerprint, recovery of allocations from
//! the durable state, then the loops) and shutting it down.
//!
//! Shutdown protocol: (1) the shutdown signal goes out (`watch`, once); (2) the node, alloc
//! sync and update loops return at their next await; (3) every alloc runner tells its task
//! runners to detach, waits for them, saves its state and returns; (4) `shutdown` waits up to
//! [`SHUTDOWN_GRACE`] for all of that, then aborts what is left. Tasks keep running; the next
//! client on the same data dir reattaches to them. Dropping a `Client` does (1) only.

use crate::alloc_runner::AllocRunner;
use crate::alloc_sync::{AllocSync, Runners};
use crate::config::ClientConfig;
use crate::conn::ServerConn;
use crate::context::{RunnerContext, SharedNode};
use crate::csi::CsiManager;
use crate::error::ClientError;
use crate::fingerprint::{build_node, HostFacts};
use crate::identity::{self, NodeIdentity};
use crate::limits::{ALLOC_UPDATE_QUEUE_CAPACITY, SHUTDOWN_GRACE};
use crate::node_loop::NodeLoop;
use crate::node_meta::{NodeMeta, NodeMetaError};
use crate::persist::create_dir;
use crate::rng::Rng;
use crate::state_db::StateDb;
use crate::time::now_rfc3339;
use crate::updater::Updater;
use model::node::Node;
use model::wire::AllocClientUpdate;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

/// A running client: registered (or trying to be), heartbeating, running its allocations.
pub struct Client {
    identity: NodeIdentity,
    cfg: ClientConfig,
    node: SharedNode,
    pub(crate) runners: Arc<Runners>,
    registered: watch::Receiver<bool>,
    csi: Arc<CsiManager>,
    node_meta: Arc<NodeMeta>,
    host_volumes: Arc<crate::host_volumes::HostVolumes>,
    /// Sent `true` once, on shutdown or drop.
    shutdown: watch::Sender<bool>,
    loops: Vec<JoinHandle<()>>,
    /// Device plugins.
    pub(crate) devices: Arc<crate::devices::DeviceManager>,
    /// The agent's server for the tasks' API sockets ([`Client::set_task_api`]).
    task_api: watch::Sender<Option<Arc<dyn crate::task_api::TaskApiServer>>>,
}

impl Client {
    /// Starts the client: identity (made once, kept in the data dir), fingerprint, recovery of
    /// the allocations in the durable state (reattaching to their running tasks), then
    /// registration, heartbeats, allocation sync and status updates in the background. Returns
    /// without waiting for the servers: tasks run whether or not they are reachable.
    pub async fn start(
        cfg: ClientConfig,
        conn: Arc<dyn ServerConn>,
        drivers: Vec<Arc<dyn drivers::Driver>>,
    ) -> Result<Client, ClientError> {
        Client::start_with_devices(cfg, conn, drivers, Vec::new()).await
    }

    /// [`Client::start`] with device plugins: the node's devices are what they fingerprint, and
    /// tasks given instances get the plugins' reservations.
    pub async fn start_with_devices(
        cfg: ClientConfig,
        conn: Arc<dyn ServerConn>,
        drivers: Vec<Arc<dyn drivers::Driver>>,
        device_plugins: Vec<Arc<dyn crate::devices::DevicePlugin>>,
    ) -> Result<Client, ClientError> {
        cfg.validate()?;
        let devices = Arc::new(crate::devices::DeviceManager::new(device_plugins));
        let client_dir = cfg.client_dir();
        create_dir(&client_dir)?;
        create_dir(&cfg.alloc_root())?;
        let identity = identity::load_or_create(&client_dir)?;
        let by_name = drivers_by_name(&drivers)?;
        let mut fingerprinted = fingerprint(&cfg, &identity, &drivers).await;
        // Nomad's order: the static meta is the node's as fingerprinted; dynamic meta goes over it.
        let static_meta = fingerprinted.meta.clone();
        let dynamic_meta = crate::node_meta::load(&client_dir, &static_meta)?;
        crate::node_meta::apply_to_node(&mut fingerprinted, &static_meta, &dynamic_meta);
        let held_volumes = crate::host_volumes::load(&client_dir)?;
        let volume_plugins =
            crate::host_volumes::fingerprint_plugins(&cfg.host_volume_plugin_dir).await;
        crate::host_volumes::apply_to_node(&mut fingerprinted, &held_volumes, &volume_plugins);
        let groups = {
            let devices = Arc::clone(&devices);
            tokio::task::spawn_blocking(move || devices.fingerprint())
                .await
                .unwrap_or_default()
        };
        crate::devices::apply_to_node(&mut fingerprinted, groups);
        let node = SharedNode::new(fingerprinted);
        let state = StateDb::open(&client_dir)?;
        let (shutdown, shutdown_rx) = watch::channel(false);
        let (updates_tx, updates_rx) = mpsc::channel(ALLOC_UPDATE_QUEUE_CAPACITY);
        let reregister = Arc::new(Notify::new());
        let node_meta = Arc::new(NodeMeta::new(
            &client_dir,
            static_meta,
            dynamic_meta,
            node.clone(),
            Arc::clone(&reregister),
        ));
        let host_volumes = Arc::new(crate::host_volumes::HostVolumes::new(
            &client_dir,
            cfg.host_volumes_dir.clone(),
            cfg.host_volume_plugin_dir.clone(),
            held_volumes,
            node.clone(),
            Arc::clone(&reregister),
        ));
        let csi = Arc::new(CsiManager::new(
            client_dir.join("csi"),
            node.clone(),
            Arc::clone(&reregister),
        ));
        let (task_api, task_api_rx) = watch::channel(None);
        let ctx = Arc::new(RunnerContext {
            drivers: by_name,
            node: node.clone(),
            region: cfg.region.clone(),
            alloc_root: cfg.alloc_root(),
            state: state.clone(),
            updates: updates_tx,
            host_env: host_env(&cfg),
            user_policy: cfg.user_policy(),
            shutdown: shutdown_rx.clone(),
            csi: Arc::clone(&csi),
            conn: Arc::clone(&conn),
            network: cfg.network.clone(),
            task_api: task_api_rx,
            devices: Arc::clone(&devices),
        });
        let runners = Arc::new(Runners::new(Arc::clone(&ctx), &cfg.gc));
        recover(&state, &ctx, &runners).await?;
        let (registered_tx, registered) = watch::channel(false);
        let mut seed = Rng::from_entropy();
        let loops = vec![
            tokio::spawn(
                NodeLoop {
                    conn: Arc::clone(&conn),
                    node: node.clone(),
                    identity: identity.clone(),
                    drivers,
                    devices: Arc::clone(&devices),
                    registered: registered_tx,
                    reregister: Arc::clone(&reregister),
                    shutdown: shutdown_rx.clone(),
                    rng: Rng::new(seed.next_u64()),
                    runners: Arc::clone(&runners),
                }
                .run(),
            ),
            tokio::spawn(
                AllocSync {
                    conn: Arc::clone(&conn),
                    identity: identity.clone(),
                    wait: cfg.timing.alloc_query_wait,
                    runners: Arc::clone(&runners),
                    registered: registered.clone(),
                    reregister,
                    shutdown: shutdown_rx.clone(),
                    rng: Rng::new(seed.next_u64()),
                }
                .run(),
            ),
            tokio::spawn(
                crate::gc::Collector {
                    runners: Arc::clone(&runners),
                    cfg: cfg.gc.clone(),
                    alloc_root: cfg.alloc_root(),
                    shutdown: shutdown_rx.clone(),
                }
                .run(),
            ),
            tokio::spawn(
                Updater {
                    conn,
                    identity: identity.clone(),
                    interval: cfg.timing.alloc_update_interval,
                    updates: updates_rx,
                    registered: registered.clone(),
                    runners: Arc::clone(&runners),
                    shutdown: shutdown_rx,
                }
                .run(),
            ),
        ];
        tracing::info!(node_id = %identity.id, data_dir = %cfg.data_dir.display(), "client started");
        Ok(Client {
            identity,
            cfg,
            node,
            runners,
            registered,
            csi,
            node_meta,
            host_volumes,
            shutdown,
            loops,
            task_api,
            devices,
        })
    }

    /// Gives the tasks' API sockets (`secrets/api.sock`) the agent's HTTP API to serve; tasks
    /// started before this get theirs served from now on.
    pub fn set_task_api(&self, server: Arc<dyn crate::task_api::TaskApiServer>) {
        self.task_api.send_replace(Some(server));
    }

    /// The node's ID (kept in `<data_dir>/client/node-id.json`).
    pub fn node_id(&self) -> &str {
        &self.identity.id
    }

    /// The node as fingerprinted, with its current status (`initializing` until the first
    /// heartbeat is answered, then `ready`).
    pub fn node(&self) -> Node {
        (*self.node.get()).clone()
    }

    /// A server's dynamic host volume call: create (with the volume's plugin), register (an
    /// existing directory) or delete; the node offers the volume under its name after a create
    /// or register, and no longer after a delete.
    pub async fn host_volume(
        &self,
        req: model::host_volume::ClientHostVolumeRequest,
    ) -> Result<model::host_volume::ClientHostVolumeReply, model::wire::CsiCallError> {
        self.host_volumes.call(req).await
    }

    /// The node's metadata: effective, dynamic (set over the API, kept in the data dir) and
    /// static (from the configuration), as Nomad's `NodeMeta.Read` answers.
    pub async fn node_meta(&self) -> model::node_meta::NodeMetaResponse {
        self.node_meta.read().await
    }

    /// Applies dynamic metadata changes (`None` removes a dynamic key or hides a static one):
    /// written to the data dir first, then the node changes and registers again at once.
    pub async fn apply_node_meta(
        &self,
        changes: &model::node_meta::DynamicMeta,
    ) -> Result<model::node_meta::NodeMetaResponse, NodeMetaError> {
        self.node_meta.apply(changes).await
    }

    /// Whether the servers know the node now.
    pub fn is_registered(&self) -> bool {
        *self.registered.borrow()
    }

    /// The allocations this client runs (or keeps until the servers forget them or it garbage
    /// collects them).
    pub fn alloc_ids(&self) -> Vec<String> {
        self.runners.ids()
    }

    /// An allocation's status as last reported to the servers.
    pub fn alloc_status(&self, alloc_id: &str) -> Option<AllocClientUpdate> {
        self.runners.status(alloc_id)
    }

    /// `<data_dir>/alloc/<alloc_id>`: the allocation's directory (logs in `alloc/logs`).
    pub fn alloc_dir(&self, alloc_id: &str) -> PathBuf {
        self.cfg.alloc_root().join(alloc_id)
    }

    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// Every CSI plugin instance registered on this client, in use or not (for debugging).
    pub fn csi_plugins(&self) -> Vec<crate::CsiPluginInstance> {
        self.csi.registry.all()
    }

    /// A client for the controller part of `plugin_id` registered here (a controller or
    /// monolith plugin's newest instance), for the servers' controller calls; `None` when no
    /// such plugin runs here. Its calls end within [`crate::limits::CSI_NODE_CALL_TIMEOUT`].
    pub fn csi_controller(&self, plugin_id: &str) -> Option<csi::PluginClient> {
        let inst = self
            .csi
            .registry
            .get(crate::CsiPluginKind::Controller, plugin_id)?;
        inst.client(crate::limits::CSI_NODE_CALL_TIMEOUT).ok()
    }

    /// Unpublishes `volume_id` (`external_id` at the provider; empty: the same) for `alloc_id`
    /// through node plugin `plugin_id`, and unstages it when no other allocation here uses it
    /// the same way: the node step of a claim release the servers drive (Nomad's
    /// `CSI.NodeDetachVolume`). Serialized with every other node call for that volume.
    pub async fn csi_node_detach(
        &self,
        plugin_id: &str,
        volume_id: &str,
        external_id: &str,
        alloc_id: &str,
        usage: &crate::CsiVolumeUsage,
    ) -> Result<(), crate::CsiVolumeError> {
        let remote_id = if external_id.is_empty() {
            volume_id
        } else {
            external_id
        };
        self.csi
            .volumes
            .unmount_volume(plugin_id, volume_id, remote_id, alloc_id, usage)
            .await
    }

    /// Grows `volume_id` where it is published for `alloc_id` (NodeExpandVolume), after the
    /// controller expanded it (a server's expansion).
    pub async fn csi_node_expand(
        &self,
        req: &model::wire::CsiNodeExpandRequest,
    ) -> Result<(), crate::CsiVolumeError> {
        let t = &req.target;
        let remote_id = if t.external_id.is_empty() {
            &t.volume_id
        } else {
            &t.external_id
        };
        let usage = crate::CsiVolumeUsage {
            read_only: t.read_only,
            attachment_mode: t.attachment_mode.clone(),
            access_mode: t.access_mode.clone(),
        };
        self.csi
            .volumes
            .expand_volume(
                &t.plugin_id,
                &t.volume_id,
                remote_id,
                &t.alloc_id,
                &usage,
                req.capacity_min,
                req.capacity_max,
            )
            .await
    }

    /// Stops the client and leaves its tasks running (Nomad's behaviour on a plain stop); see
    /// the module docs for the protocol.
    /// Destroys every allocation (its tasks killed with their kill timeouts, its directory
    /// removed) and starts no new one, waiting up to `grace`. Nomad's dev agent does this on
    /// shutdown; a non-dev client keeps its tasks to reattach to them.
    pub async fn destroy_all_allocs(&self, grace: std::time::Duration) {
        let joins = self.runners.destroy_all().await;
        let count = joins.len();
        let all = async {
            for j in joins {
                let _ = j.await;
            }
        };
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!(
                allocations = count,
                "not every allocation was destroyed in time; stopping anyway"
            );
        } else {
            tracing::info!(allocations = count, "destroyed every allocation");
        }
    }

    /// Publishes the node's and its allocations' gauges every `settings.interval` until the
    /// client shuts down.
    pub fn spawn_metrics(&mut self, settings: crate::MetricsSettings) {
        let collector = crate::telemetry::Collector {
            runners: Arc::clone(&self.runners),
            node: self.node.clone(),
            data_dir: self.cfg.data_dir.clone(),
            settings,
            shutdown: self.shutdown.subscribe(),
        };
        self.loops.push(tokio::spawn(collector.run()));
    }

    pub async fn shutdown(mut self) {
        self.shutdown.send_replace(true);
        let mut joins = std::mem::take(&mut self.loops);
        joins.extend(self.runners.take_joins());
        let all = async {
            for j in joins.iter_mut() {
                let _ = j.await;
            }
        };
        if tokio::time::timeout(SHUTDOWN_GRACE, all).await.is_err() {
            tracing::warn!("client loops did not stop in time; aborting them");
            joins.iter().for_each(JoinHandle::abort);
        }
        tracing::info!(node_id = %self.identity.id, "client stopped; tasks left running");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.shutdown.send_replace(true);
    }
}

fn drivers_by_name(
    drivers: &[Arc<dyn drivers::Driver>],
) -> Result<BTreeMap<String, Arc<dyn drivers::Driver>>, ClientError> {
    let mut map = BTreeMap::new();
    for d in drivers {
        if map.insert(d.name().to_string(), Arc::clone(d)).is_some() {
            return Err(ClientError::Config(format!(
                "two drivers are named {:?}",
                d.name()
            )));
        }
    }
    Ok(map)
}

/// Reads the host (blocking, off the async threads) and builds the node.
async fn fingerprint(
    cfg: &ClientConfig,
    identity: &NodeIdentity,
    drivers: &[Arc<dyn drivers::Driver>],
) -> Node {
    let data_dir = cfg.data_dir.clone();
    let interface = cfg.network_interface.clone();
    let network = cfg.network.clone();
    let facts = tokio::task::spawn_blocking(move || {
        HostFacts::read(&data_dir, interface.as_deref(), &network)
    })
    .await
    .expect("fingerprinting the host panicked");
    let fps = crate::node_loop::fingerprint_drivers(drivers).await;
    build_node(identity, cfg, &facts, &fps, &now_rfc3339())
}

/// The client's own environment less the denylist: what tasks of host drivers inherit.
fn host_env(cfg: &ClientConfig) -> BTreeMap<String, String> {
    let deny = cfg.env_denylist();
    std::env::vars()
        .filter(|(k, _)| !deny.iter().any(|d| d == k))
        .collect()
}

/// Starts a runner for every allocation in the durable state; running tasks are reattached.
async fn recover(
    state: &StateDb,
    ctx: &Arc<RunnerContext>,
    runners: &Runners,
) -> Result<(), ClientError> {
    let db = state.clone();
    let (records, damaged) = tokio::task::spawn_blocking(move || db.load_all())
        .await
        .expect("reading the client state panicked")?;
    for e in damaged {
        tracing::error!(error = %e, "an allocation's state is damaged; its tasks cannot be reattached");
    }
    for record in records {
        tracing::info!(alloc_id = %record.alloc.id, "recovering allocation");
        let id = record.alloc.id.clone();
        runners.insert(id, AllocRunner::spawn_recovered(Arc::clone(ctx), record));
    }
    Ok(())
}
