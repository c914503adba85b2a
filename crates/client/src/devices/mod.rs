//! Device plugins (Nomad's device plugin interface, inside the client): each plugin fingerprints
//! groups of identical devices (`nvidia/gpu/NVIDIA H200` with its instances, their health and
//! attributes), reserves instances for a task (the environment, mounts and device nodes the task
//! needs to use them), and reports their statistics.
//!
//! The [`DeviceManager`] owns the configured plugins: the node's `NodeResources.Devices` is what
//! they fingerprint (re-read periodically, so health changes reach the scheduler), a reservation
//! goes to the plugin that reported the instance's group, and a plugin that fails is logged and
//! contributes no devices, never failing the client.
//!
//! Invariant: a reservation is only made for instances its plugin reported in its latest
//! fingerprint (the scheduler gave them out from the node's copy of that fingerprint).

pub mod mock;
pub mod nvidia;

use drivers::MountConfig;
use model::device::DeviceGroupStats;
use model::node::NodeDeviceResource;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What went wrong in a device plugin.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("device plugin {plugin:?}: {message}")]
    Plugin { plugin: String, message: String },
    #[error("plugin {plugin:?} config: {message}")]
    Config { plugin: String, message: String },
    #[error("no device plugin reported {vendor}/{device_type}/{name}")]
    UnknownGroup {
        vendor: String,
        device_type: String,
        name: String,
    },
    #[error("device {id:?} is not an instance of {group} (the plugin no longer reports it)")]
    UnknownInstance { group: String, id: String },
}

/// A device node the task gets (Nomad's `DeviceSpec`).
pub use drivers::DeviceConfig as DeviceSpec;

/// What a task needs to use the instances it was given (Nomad's `ContainerReservation`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    pub envs: BTreeMap<String, String>,
    pub mounts: Vec<MountConfig>,
    pub devices: Vec<DeviceSpec>,
    /// NVIDIA GPU UUIDs, for container drivers' GPU requests.
    pub gpu_ids: Vec<String>,
}

impl Reservation {
    fn merge(&mut self, other: Reservation) {
        for (k, v) in other.envs {
            // Two groups of one plugin naming the same variable (NVIDIA_VISIBLE_DEVICES for two
            // GPU models): their lists join.
            match self.envs.get_mut(&k) {
                Some(existing) if !existing.is_empty() && !v.is_empty() && *existing != v => {
                    existing.push(',');
                    existing.push_str(&v);
                }
                _ => {
                    self.envs.insert(k, v);
                }
            }
        }
        self.mounts.extend(other.mounts);
        self.devices.extend(other.devices);
        self.gpu_ids.extend(other.gpu_ids);
    }
}

/// One device plugin. Calls are blocking and short (the manager runs them off the async
/// threads).
pub trait DevicePlugin: Send + Sync {
    /// The name in `plugin "<name>" { config { … } }`.
    fn name(&self) -> &str;
    /// The device groups present now, with each instance's health.
    fn fingerprint(&self) -> Result<Vec<NodeDeviceResource>, DeviceError>;
    /// What a task needs to use instances `ids` of `group`.
    fn reserve(
        &self,
        group: &NodeDeviceResource,
        ids: &[String],
    ) -> Result<Reservation, DeviceError>;
    /// Statistics of every instance.
    fn stats(&self) -> Result<Vec<DeviceGroupStats>, DeviceError>;
}

/// The configured plugins and what they last fingerprinted.
pub struct DeviceManager {
    plugins: Vec<Arc<dyn DevicePlugin>>,
    /// Each plugin's latest groups, in plugin order.
    latest: Mutex<Vec<Vec<NodeDeviceResource>>>,
}

impl std::fmt::Debug for DeviceManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.plugins.iter().map(|p| p.name()).collect();
        f.debug_struct("DeviceManager")
            .field("plugins", &names)
            .finish()
    }
}

impl Default for DeviceManager {
    fn default() -> Self {
        DeviceManager::new(Vec::new())
    }
}

fn group_key(d: &NodeDeviceResource) -> (&str, &str, &str) {
    (&d.vendor, &d.device_type, &d.name)
}

impl DeviceManager {
    pub fn new(plugins: Vec<Arc<dyn DevicePlugin>>) -> DeviceManager {
        let latest = Mutex::new(vec![Vec::new(); plugins.len()]);
        DeviceManager { plugins, latest }
    }

    pub fn is_empty(&self) -> bool {
        self.plugins.is_empty()
    }

    /// Fingerprints every plugin again and returns every group, sorted. A plugin that fails
    /// keeps no devices (its instances could not be reserved) and is logged.
    pub fn fingerprint(&self) -> Vec<NodeDeviceResource> {
        let mut all = Vec::new();
        let mut latest = Vec::with_capacity(self.plugins.len());
        for p in &self.plugins {
            match p.fingerprint() {
                Ok(mut groups) => {
                    for g in &mut groups {
                        g.instances.sort_by(|a, b| a.id.cmp(&b.id));
                    }
                    all.extend(groups.iter().cloned());
                    latest.push(groups);
                }
                Err(e) => {
                    tracing::warn!(plugin = p.name(), error = %e, "device fingerprint failed; the plugin's devices are withdrawn");
                    latest.push(Vec::new());
                }
            }
        }
        *self.latest.lock().unwrap_or_else(|e| e.into_inner()) = latest;
        all.sort_by(|a, b| group_key(a).cmp(&group_key(b)));
        all
    }

    /// The groups of the latest fingerprint, without asking the plugins.
    pub fn devices(&self) -> Vec<NodeDeviceResource> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<NodeDeviceResource> = latest.iter().flatten().cloned().collect();
        all.sort_by(|a, b| group_key(a).cmp(&group_key(b)));
        all
    }

    /// Reserves instances for one task: each allocated group goes to the plugin that reported
    /// it; every ID must be one of that group's reported instances.
    pub fn reserve(
        &self,
        allocated: &[model::alloc::AllocatedDeviceResource],
    ) -> Result<Reservation, DeviceError> {
        let mut out = Reservation::default();
        for a in allocated {
            let (plugin, group) = self.owner(&a.vendor, &a.device_type, &a.name)?;
            for id in &a.device_ids {
                if !group.instances.iter().any(|i| i.id == *id) {
                    return Err(DeviceError::UnknownInstance {
                        group: format!("{}/{}/{}", a.vendor, a.device_type, a.name),
                        id: id.clone(),
                    });
                }
            }
            out.merge(plugin.reserve(&group, &a.device_ids)?);
        }
        Ok(out)
    }

    fn owner(
        &self,
        vendor: &str,
        device_type: &str,
        name: &str,
    ) -> Result<(Arc<dyn DevicePlugin>, NodeDeviceResource), DeviceError> {
        let latest = self.latest.lock().unwrap_or_else(|e| e.into_inner());
        for (plugin, groups) in self.plugins.iter().zip(latest.iter()) {
            if let Some(g) = groups
                .iter()
                .find(|g| group_key(g) == (vendor, device_type, name))
            {
                return Ok((Arc::clone(plugin), g.clone()));
            }
        }
        Err(DeviceError::UnknownGroup {
            vendor: vendor.to_string(),
            device_type: device_type.to_string(),
            name: name.to_string(),
        })
    }

    /// Statistics of the given instances (a task's), by group; plugins that fail are skipped.
    pub fn stats_of(
        &self,
        allocated: &[model::alloc::AllocatedDeviceResource],
    ) -> Vec<DeviceGroupStats> {
        if allocated.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for p in &self.plugins {
            let groups = match p.stats() {
                Ok(g) => g,
                Err(e) => {
                    tracing::debug!(plugin = p.name(), error = %e, "device stats failed");
                    continue;
                }
            };
            for mut g in groups {
                let Some(a) = allocated.iter().find(|a| {
                    (a.vendor.as_str(), a.device_type.as_str(), a.name.as_str())
                        == (g.vendor.as_str(), g.device_type.as_str(), g.name.as_str())
                }) else {
                    continue;
                };
                g.instance_stats.retain(|id, _| a.device_ids.contains(id));
                if !g.instance_stats.is_empty() {
                    out.push(g);
                }
            }
        }
        out
    }
}

/// Puts the plugins' groups in the node's resources (Nomad's `NodeResources.Devices`).
pub(crate) fn apply_to_node(node: &mut model::node::Node, groups: Vec<NodeDeviceResource>) {
    node.node_resources
        .get_or_insert_with(Default::default)
        .devices = groups;
    node.computed_class = crate::fingerprint::computed_class(node);
}

/// Builds the device plugins the agent's `plugin "<name>"` blocks enable. `nvidia` is on by
/// default, as Nomad bundles it (it finds no NVML on most machines, and says so once);
/// `plugin "nvidia" { config { enabled = false } }` turns it off.
pub fn from_plugin_configs(
    configs: &BTreeMap<String, serde_json::Value>,
) -> Result<Vec<Arc<dyn DevicePlugin>>, DeviceError> {
    let mut out: Vec<Arc<dyn DevicePlugin>> = Vec::new();
    let nvidia = configs
        .get(nvidia::NAME)
        .cloned()
        .unwrap_or(serde_json::Value::Null);
    if let Some(p) = nvidia::NvidiaPlugin::from_config(&nvidia)? {
        out.push(Arc::new(p));
    }
    if let Some(cfg) = configs.get(mock::NAME) {
        out.push(Arc::new(mock::MockDevicePlugin::from_config(cfg)?));
    }
    Ok(out)
}

/// The plugin block as one object: HCL blocks come as a list of objects, which merge.
pub(crate) fn config_object(
    plugin: &str,
    value: &serde_json::Value,
) -> Result<serde_json::Map<String, serde_json::Value>, DeviceError> {
    match value {
        serde_json::Value::Null => Ok(serde_json::Map::new()),
        serde_json::Value::Object(m) => Ok(m.clone()),
        serde_json::Value::Array(items) => {
            let mut merged = serde_json::Map::new();
            for item in items {
                match item {
                    serde_json::Value::Object(m) => merged.extend(m.clone()),
                    other => {
                        return Err(DeviceError::Config {
                            plugin: plugin.to_string(),
                            message: format!("expected a block, found {other}"),
                        })
                    }
                }
            }
            Ok(merged)
        }
        other => Err(DeviceError::Config {
            plugin: plugin.to_string(),
            message: format!("expected a block, found {other}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::alloc::AllocatedDeviceResource;
    use serde_json::json;

    fn manager() -> DeviceManager {
        let cfg = json!({
            "device": [
                {"type": "gpu", "name": "small", "ids": ["s0", "s1"], "env": "MOCK_VISIBLE"},
                {"vendor": "acme", "type": "fpga", "name": "f1", "count": 1, "unhealthy": []}
            ]
        });
        let p = mock::MockDevicePlugin::from_config(&cfg).expect("valid");
        DeviceManager::new(vec![Arc::new(p)])
    }

    #[test]
    fn reservations_go_to_the_reporting_plugin_and_check_ids() {
        let m = manager();
        assert!(
            m.devices().is_empty(),
            "nothing before the first fingerprint"
        );
        let groups = m.fingerprint();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].vendor, "acme");
        let ask = |ids: &[&str]| AllocatedDeviceResource {
            vendor: "caravan".into(),
            device_type: "gpu".into(),
            name: "small".into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
        };
        let r = m.reserve(&[ask(&["s1", "s0"])]).expect("reserved");
        assert_eq!(r.envs["MOCK_VISIBLE"], "s1,s0");
        let err = m.reserve(&[ask(&["s9"])]).unwrap_err().to_string();
        assert!(err.contains("\"s9\""), "{err}");
        let mut other = ask(&["x"]);
        other.name = "big".into();
        let err = m.reserve(&[other]).unwrap_err().to_string();
        assert!(err.contains("caravan/gpu/big"), "{err}");
        let stats = m.stats_of(&[ask(&["s1"])]);
        assert_eq!(stats.len(), 1);
        assert_eq!(stats[0].instance_stats.keys().collect::<Vec<_>>(), ["s1"]);
    }

    #[test]
    fn nvidia_without_nvml_is_no_devices_and_can_be_turned_off() {
        let none = from_plugin_configs(&BTreeMap::new()).expect("defaults");
        // On machines without NVML the plugin is there and reports nothing.
        let m = DeviceManager::new(none);
        let nvidia_groups: Vec<_> = m
            .fingerprint()
            .into_iter()
            .filter(|g| g.vendor == "nvidia")
            .collect();
        if !nvidia::nvml_present() {
            assert!(nvidia_groups.is_empty());
        }
        let off = BTreeMap::from([("nvidia".to_string(), json!([{"enabled": false}]))]);
        assert!(from_plugin_configs(&off).expect("valid").is_empty());
        let bad = BTreeMap::from([("nvidia".to_string(), json!({"enabled": "maybe"}))]);
        let err = from_plugin_configs(&bad)
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("enabled"), "{err}");
    }
}
