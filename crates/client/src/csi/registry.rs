//! The CSI plugins this client runs (Nomad's dynamic plugin registry): each plugin task that
//! became healthy registers one instance per part it serves (a monolith: controller and node),
//! and the node's `CSIControllerPlugins` / `CSINodePlugins` are rebuilt from the newest
//! instance of each plugin ID. A change to those maps makes the node loop register again, so
//! the servers learn it.

use crate::context::SharedNode;
use crate::time::now_rfc3339;
use model::csi::{CSIControllerInfo, CSIInfo, CSINodeInfo, CSITopology};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Which part of a plugin an instance serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CsiPluginKind {
    Controller,
    Node,
}

impl CsiPluginKind {
    /// The parts a `csi_plugin { type = … }` serves: `monolith` is both.
    pub fn of_type(plugin_type: &str) -> &'static [CsiPluginKind] {
        match plugin_type {
            "controller" => &[CsiPluginKind::Controller],
            "node" => &[CsiPluginKind::Node],
            _ => &[CsiPluginKind::Controller, CsiPluginKind::Node],
        }
    }
}

/// One registered plugin part, as the volume manager and the servers' controller calls use it.
#[derive(Debug, Clone, PartialEq)]
pub struct CsiPluginInstance {
    pub plugin_id: String,
    pub kind: CsiPluginKind,
    /// The allocation running the plugin task.
    pub alloc_id: String,
    /// The plugin's socket as this host sees it.
    pub socket: PathBuf,
    /// The staging/publish base directory on the host (`<data_dir>/client/csi/<type>/<id>`).
    pub base_dir_host: PathBuf,
    /// The same directory as the plugin sees it (its `stage_publish_base_dir`; the host path
    /// for drivers without file-system isolation). Paths handed to the plugin are under it.
    pub base_dir_plugin: PathBuf,
    pub info: csi::PluginInfo,
    pub healthy: bool,
    pub health_description: String,
    /// RFC 3339: when health last changed.
    pub update_time: String,
}

impl CsiPluginInstance {
    /// The fingerprint the node reports for this instance (Nomad's `CSIInfo`).
    pub fn csi_info(&self) -> CSIInfo {
        let controller_info = (self.kind == CsiPluginKind::Controller).then(|| {
            let c = self.info.controller.unwrap_or_default();
            CSIControllerInfo {
                supports_create_delete: c.create_delete,
                supports_attach_detach: c.publish_unpublish,
                supports_list_volumes: c.list_volumes,
                supports_get_capacity: c.get_capacity,
                supports_create_delete_snapshot: c.snapshots,
                supports_list_snapshots: c.list_snapshots,
                supports_clone: c.clone,
                supports_read_only_attach: c.publish_readonly,
                supports_expand: c.expand,
                supports_list_volumes_attached_nodes: c.list_volumes_published_nodes,
                ..CSIControllerInfo::default()
            }
        });
        let node_info = (self.kind == CsiPluginKind::Node).then(|| {
            let n = self.info.node.clone().unwrap_or_default();
            CSINodeInfo {
                id: n.node_id,
                // Nomad: a plugin without a limit reports the largest int64.
                max_volumes: if n.max_volumes_per_node > 0 {
                    n.max_volumes_per_node
                } else {
                    i64::MAX
                },
                accessible_topology: n
                    .accessible_topology
                    .map(|segments| CSITopology { segments }),
                requires_node_stage_volume: n.stage_unstage,
                supports_stats: n.volume_stats,
                supports_expand: n.expand,
                supports_condition: false,
            }
        });
        CSIInfo {
            plugin_id: self.plugin_id.clone(),
            alloc_id: self.alloc_id.clone(),
            healthy: self.healthy,
            health_description: self.health_description.clone(),
            update_time: Some(self.update_time.clone()),
            provider: self.info.name.clone(),
            provider_version: self.info.version.clone(),
            requires_controller_plugin: self.info.controller_service,
            requires_topologies: self.info.accessibility_constraints,
            controller_info,
            node_info,
        }
    }

    /// A client for the plugin's socket whose calls end within `timeout` (dialed on first use).
    pub fn client(&self, timeout: Duration) -> Result<csi::PluginClient, csi::CsiError> {
        csi::PluginClient::connect_lazy(&self.socket.display().to_string(), timeout)
    }
}

type Key = (CsiPluginKind, String);

/// The registry. Shared by the plugin supervisors (writers), the volume manager and the
/// client's public calls (readers).
pub(crate) struct CsiRegistry {
    /// (kind, plugin ID) → instances, the newest registration first (it is the one used, as
    /// Nomad's registry dispenses the front of its list). Never held across `.await`.
    plugins: Mutex<BTreeMap<Key, Vec<CsiPluginInstance>>>,
    /// Bumped after every change; `wait_for` watches it.
    changed: watch::Sender<u64>,
    node: SharedNode,
    /// The node loop's "register again" signal.
    reregister: Arc<Notify>,
}

impl CsiRegistry {
    pub fn new(node: SharedNode, reregister: Arc<Notify>) -> CsiRegistry {
        CsiRegistry {
            plugins: Mutex::new(BTreeMap::new()),
            changed: watch::channel(0).0,
            node,
            reregister,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<Key, Vec<CsiPluginInstance>>) -> T) -> T {
        let out = f(&mut self.plugins.lock().expect("csi registry lock"));
        self.changed.send_modify(|n| *n += 1);
        self.sync_node();
        out
    }

    /// Registers instances (replacing those of the same allocation, plugin and kind) in front.
    pub fn register(&self, instances: Vec<CsiPluginInstance>) {
        self.with(|plugins| {
            for inst in instances {
                let list = plugins
                    .entry((inst.kind, inst.plugin_id.clone()))
                    .or_default();
                list.retain(|i| i.alloc_id != inst.alloc_id);
                list.insert(0, inst);
            }
        });
    }

    /// Removes every instance of `plugin_id` run by `alloc_id`.
    pub fn deregister(&self, plugin_id: &str, alloc_id: &str) {
        self.with(|plugins| {
            for ((_, id), list) in plugins.iter_mut() {
                if id == plugin_id {
                    list.retain(|i| i.alloc_id != alloc_id);
                }
            }
            plugins.retain(|_, list| !list.is_empty());
        });
    }

    /// Records a health change of the instances of `plugin_id` run by `alloc_id`.
    pub fn set_health(&self, plugin_id: &str, alloc_id: &str, healthy: bool, description: &str) {
        let now = now_rfc3339();
        self.with(|plugins| {
            for ((_, id), list) in plugins.iter_mut() {
                for inst in list.iter_mut() {
                    if id == plugin_id && inst.alloc_id == alloc_id {
                        inst.healthy = healthy;
                        inst.health_description = description.to_string();
                        inst.update_time.clone_from(&now);
                    }
                }
            }
        });
    }

    /// The instance in use for `plugin_id`'s `kind` part.
    pub fn get(&self, kind: CsiPluginKind, plugin_id: &str) -> Option<CsiPluginInstance> {
        let plugins = self.plugins.lock().expect("csi registry lock");
        plugins
            .get(&(kind, plugin_id.to_string()))
            .and_then(|l| l.first().cloned())
    }

    /// Every registered instance, in use or not.
    pub fn all(&self) -> Vec<CsiPluginInstance> {
        let plugins = self.plugins.lock().expect("csi registry lock");
        plugins.values().flatten().cloned().collect()
    }

    /// Waits up to `limit` for `plugin_id`'s `kind` part to be registered.
    pub async fn wait_for(
        &self,
        kind: CsiPluginKind,
        plugin_id: &str,
        limit: Duration,
    ) -> Option<CsiPluginInstance> {
        let mut rx = self.changed.subscribe();
        let found = tokio::time::timeout(limit, async {
            loop {
                if let Some(inst) = self.get(kind, plugin_id) {
                    return Some(inst);
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await;
        found.ok().flatten()
    }

    /// Rebuilds the node's plugin maps from the instances in use; registers the node again
    /// when they changed.
    fn sync_node(&self) {
        let (controllers, nodes) = {
            let plugins = self.plugins.lock().expect("csi registry lock");
            let mut controllers = BTreeMap::new();
            let mut nodes = BTreeMap::new();
            for ((kind, id), list) in plugins.iter() {
                let Some(inst) = list.first() else { continue };
                let map = match kind {
                    CsiPluginKind::Controller => &mut controllers,
                    CsiPluginKind::Node => &mut nodes,
                };
                map.insert(id.clone(), inst.csi_info());
            }
            (controllers, nodes)
        };
        let current = self.node.get();
        if current.csi_controller_plugins == controllers && current.csi_node_plugins == nodes {
            return;
        }
        self.node.update(|n| {
            n.csi_controller_plugins = controllers;
            n.csi_node_plugins = nodes;
        });
        tracing::debug!("CSI plugins changed; registering the node again");
        self.reregister.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::node::Node;

    fn instance(alloc: &str, kind: CsiPluginKind) -> CsiPluginInstance {
        CsiPluginInstance {
            plugin_id: "hp".into(),
            kind,
            alloc_id: alloc.into(),
            socket: format!("/s/{alloc}/csi.sock").into(),
            base_dir_host: "/b".into(),
            base_dir_plugin: "/b".into(),
            info: csi::PluginInfo {
                name: "hostpath.csi.caravan".into(),
                version: "1".into(),
                controller_service: true,
                node: Some(csi::NodeCapabilities {
                    node_id: "n1".into(),
                    stage_unstage: true,
                    ..Default::default()
                }),
                controller: Some(csi::ControllerCapabilities {
                    publish_unpublish: true,
                    ..Default::default()
                }),
                ..Default::default()
            },
            healthy: true,
            health_description: "healthy".into(),
            update_time: "t".into(),
        }
    }

    #[tokio::test]
    async fn newest_instance_is_used_and_the_node_follows_with_a_reregister() {
        let node = SharedNode::new(Node::default());
        let rereg = Arc::new(Notify::new());
        let reg = CsiRegistry::new(node.clone(), Arc::clone(&rereg));
        reg.register(vec![
            instance("a1", CsiPluginKind::Controller),
            instance("a1", CsiPluginKind::Node),
        ]);
        rereg.notified().await; // a permit was stored
        let n = node.get();
        let ctrl = &n.csi_controller_plugins["hp"];
        assert!(ctrl.healthy && ctrl.requires_controller_plugin);
        assert!(
            ctrl.controller_info
                .as_ref()
                .unwrap()
                .supports_attach_detach
        );
        let info = n.csi_node_plugins["hp"].node_info.clone().unwrap();
        assert_eq!(
            (
                info.id.as_str(),
                info.max_volumes,
                info.requires_node_stage_volume
            ),
            ("n1", i64::MAX, true)
        );

        reg.register(vec![instance("a2", CsiPluginKind::Node)]);
        assert_eq!(reg.get(CsiPluginKind::Node, "hp").unwrap().alloc_id, "a2");
        assert_eq!(node.get().csi_node_plugins["hp"].alloc_id, "a2");
        reg.deregister("hp", "a2");
        assert_eq!(reg.get(CsiPluginKind::Node, "hp").unwrap().alloc_id, "a1");

        reg.set_health("hp", "a1", false, "probe failed");
        assert!(!node.get().csi_controller_plugins["hp"].healthy);
        reg.deregister("hp", "a1");
        assert!(reg.all().is_empty());
        let n = node.get();
        assert!(n.csi_controller_plugins.is_empty() && n.csi_node_plugins.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_for_a_plugin_ends_when_it_registers_or_at_the_limit() {
        let reg = Arc::new(CsiRegistry::new(
            SharedNode::new(Node::default()),
            Arc::new(Notify::new()),
        ));
        assert!(reg
            .wait_for(CsiPluginKind::Node, "hp", Duration::from_secs(1))
            .await
            .is_none());
        let waiter = {
            let reg = Arc::clone(&reg);
            tokio::spawn(async move {
                reg.wait_for(CsiPluginKind::Node, "hp", Duration::from_secs(60))
                    .await
            })
        };
        tokio::task::yield_now().await;
        reg.register(vec![instance("a1", CsiPluginKind::Node)]);
        assert_eq!(waiter.await.unwrap().unwrap().alloc_id, "a1");
    }
}
