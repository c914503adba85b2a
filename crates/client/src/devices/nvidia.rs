//! `nvidia`: NVIDIA GPUs through NVML, loaded at run time (Nomad's `nomad-device-nvidia`). Each GPU
//! model is a group `nvidia/gpu/<model>` whose instances are GPU UUIDs, with Nomad's attributes
//! (`memory`, `power`, `bar1`, `driver_version`, `cores_clock`, `memory_clock`, `pci_bandwidth`,
//! `display_state`, `persistence_mode`) and the compute capability; a reservation sets
//! `NVIDIA_VISIBLE_DEVICES` to the UUIDs (the NVIDIA container runtime and CUDA read it).
//!
//! Without NVML (no driver, no GPU) the plugin reports no devices and says so once; it never
//! fails the client.
//!
//! ```hcl
//! plugin "nvidia" {
//!   config {
//!     enabled            = true          # default
//!     ignored_gpu_ids    = ["GPU-…"]
//!     fingerprint_period = "1m"          # how long a fingerprint is reused
//!   }
//! }
//! ```

use super::{config_object, DeviceError, DevicePlugin, Reservation};
use model::device::{DeviceGroupStats, DeviceStats, StatObject, StatValue};
use model::node::{NodeDevice, NodeDeviceLocality, NodeDeviceResource};
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::Nvml;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const NAME: &str = "nvidia";
pub const VENDOR: &str = "nvidia";
pub const DEVICE_TYPE: &str = "gpu";
/// The variable a reservation sets (Nomad's `NvidiaVisibleDevices`).
pub const VISIBLE_DEVICES_ENV: &str = "NVIDIA_VISIBLE_DEVICES";
/// Nomad's default `fingerprint_period`.
const FINGERPRINT_PERIOD_DEFAULT: Duration = Duration::from_secs(60);
/// NVML's library names, the versioned one first (drivers install it; the bare name is a
/// development symlink).
const LIBRARIES: [&str; 2] = ["libnvidia-ml.so.1", "libnvidia-ml.so"];

fn config_error(message: impl Into<String>) -> DeviceError {
    DeviceError::Config {
        plugin: NAME.to_string(),
        message: message.into(),
    }
}

fn plugin_error(message: impl Into<String>) -> DeviceError {
    DeviceError::Plugin {
        plugin: NAME.to_string(),
        message: message.into(),
    }
}

/// Opens NVML, or says why not.
fn open_nvml() -> Result<Nvml, String> {
    let mut last = String::new();
    for lib in LIBRARIES {
        match Nvml::builder().lib_path(std::ffi::OsStr::new(lib)).init() {
            Ok(n) => return Ok(n),
            Err(e) => last = format!("{lib}: {e}"),
        }
    }
    Err(last)
}

/// Whether NVML loads on this machine.
pub fn nvml_present() -> bool {
    open_nvml().is_ok()
}

/// The plugin: NVML once it loaded, and the latest fingerprint.
pub struct NvidiaPlugin {
    ignored: Vec<String>,
    period: Duration,
    nvml: Mutex<NvmlState>,
    cached: Mutex<Option<(Instant, Vec<NodeDeviceResource>)>>,
}

enum NvmlState {
    NotTried,
    Open(Box<Nvml>),
    /// NVML did not load; logged once.
    Absent,
}

impl NvidiaPlugin {
    /// `None` when `enabled = false`.
    pub fn from_config(value: &Value) -> Result<Option<NvidiaPlugin>, DeviceError> {
        let cfg = config_object(NAME, value)?;
        let mut enabled = true;
        let mut ignored = Vec::new();
        let mut period = FINGERPRINT_PERIOD_DEFAULT;
        for (k, v) in &cfg {
            match k.as_str() {
                "enabled" => {
                    enabled = v
                        .as_bool()
                        .ok_or_else(|| config_error(format!("enabled: expected true or false, got {v}")))?
                }
                "ignored_gpu_ids" => {
                    ignored = serde_json::from_value(v.clone()).map_err(|_| {
                        config_error(format!("ignored_gpu_ids: expected a list of GPU UUIDs, got {v}"))
                    })?
                }
                "fingerprint_period" => {
                    let text = v.as_str().ok_or_else(|| {
                        config_error(format!("fingerprint_period: expected a duration like \"1m\", got {v}"))
                    })?;
                    period = model::duration::Duration::parse(text)
                        .ok()
                        .and_then(|d| u64::try_from(d.0).ok())
                        .map(Duration::from_nanos)
                        .filter(|d| *d >= Duration::from_secs(1))
                        .ok_or_else(|| {
                            config_error(format!(
                                "fingerprint_period: {text:?} is not a duration of at least 1s"
                            ))
                        })?;
                }
                other => {
                    return Err(config_error(format!(
                        "unknown key {other:?}; expected enabled, ignored_gpu_ids or fingerprint_period"
                    )))
                }
            }
        }
        Ok(enabled.then(|| NvidiaPlugin {
            ignored,
            period,
            nvml: Mutex::new(NvmlState::NotTried),
            cached: Mutex::new(None),
        }))
    }

    /// Runs `f` with NVML, opening it the first time; `None` when NVML is absent.
    fn with_nvml<T>(&self, f: impl FnOnce(&Nvml) -> T) -> Option<T> {
        let mut state = self.nvml.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*state, NvmlState::NotTried) {
            *state = match open_nvml() {
                Ok(n) => {
                    tracing::info!("nvidia: NVML loaded");
                    NvmlState::Open(Box::new(n))
                }
                Err(why) => {
                    tracing::info!(reason = %why, "nvidia: NVML not found; no NVIDIA GPUs on this node");
                    NvmlState::Absent
                }
            };
        }
        match &*state {
            NvmlState::Open(n) => Some(f(n)),
            _ => None,
        }
    }

    fn read_groups(nvml: &Nvml, ignored: &[String]) -> Result<Vec<NodeDeviceResource>, String> {
        let count = nvml
            .device_count()
            .map_err(|e| format!("device count: {e}"))?;
        let driver = nvml.sys_driver_version().unwrap_or_default();
        let mut by_model: BTreeMap<String, NodeDeviceResource> = BTreeMap::new();
        for index in 0..count {
            let dev = match nvml.device_by_index(index) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(index, error = %e, "nvidia: cannot open GPU");
                    continue;
                }
            };
            let Ok(uuid) = dev.uuid() else { continue };
            if ignored.contains(&uuid) {
                continue;
            }
            let model = dev.name().unwrap_or_else(|_| "unknown".into());
            let (healthy, health_description) = match dev.memory_info() {
                Ok(_) => (true, String::new()),
                Err(e) => (false, format!("NVML cannot read the GPU: {e}")),
            };
            let locality = dev.pci_info().ok().map(|p| NodeDeviceLocality {
                pci_bus_id: p.bus_id,
            });
            let group = by_model
                .entry(model.clone())
                .or_insert_with(|| NodeDeviceResource {
                    vendor: VENDOR.into(),
                    device_type: DEVICE_TYPE.into(),
                    name: model.clone(),
                    instances: Vec::new(),
                    attributes: attributes(&dev, &driver),
                });
            group.instances.push(NodeDevice {
                id: uuid,
                healthy,
                health_description,
                locality,
            });
        }
        Ok(by_model.into_values().collect())
    }
}

/// Nomad's nvidia attributes of one GPU (the group's first).
fn attributes(dev: &nvml_wrapper::Device<'_>, driver: &str) -> BTreeMap<String, Value> {
    let mut a = BTreeMap::new();
    if let Ok(m) = dev.memory_info() {
        a.insert(
            "memory".into(),
            json!({"Int": m.total / (1024 * 1024), "Unit": "MiB"}),
        );
    }
    if let Ok(p) = dev.power_management_limit() {
        a.insert("power".into(), json!({"Int": p / 1000, "Unit": "W"}));
    }
    if let Ok(b) = dev.bar1_memory_info() {
        a.insert(
            "bar1".into(),
            json!({"Int": b.total / (1024 * 1024), "Unit": "MiB"}),
        );
    }
    if !driver.is_empty() {
        a.insert("driver_version".into(), json!({"String": driver}));
    }
    if let Ok(c) = dev.max_clock_info(Clock::SM) {
        a.insert("cores_clock".into(), json!({"Int": c, "Unit": "MHz"}));
    }
    if let Ok(c) = dev.max_clock_info(Clock::Memory) {
        a.insert("memory_clock".into(), json!({"Int": c, "Unit": "MHz"}));
    }
    if let (Ok(generation), Ok(width)) = (dev.max_pcie_link_gen(), dev.max_pcie_link_width()) {
        // MB/s per lane of each PCIe generation.
        let per_lane = match generation {
            1 => 250,
            2 => 500,
            3 => 985,
            4 => 1969,
            5 => 3938,
            _ => 7877,
        };
        a.insert(
            "pci_bandwidth".into(),
            json!({"Int": per_lane * width, "Unit": "MB/s"}),
        );
    }
    if let Ok(active) = dev.is_display_active() {
        let state = if active { "Enabled" } else { "Disabled" };
        a.insert("display_state".into(), json!({"String": state}));
    }
    if let Ok(on) = dev.is_in_persistent_mode() {
        let state = if on { "Enabled" } else { "Disabled" };
        a.insert("persistence_mode".into(), json!({"String": state}));
    }
    if let Ok(cc) = dev.cuda_compute_capability() {
        a.insert(
            "compute_capability".into(),
            json!({"String": format!("{}.{}", cc.major, cc.minor)}),
        );
    }
    a
}

impl DevicePlugin for NvidiaPlugin {
    fn name(&self) -> &str {
        NAME
    }

    fn fingerprint(&self) -> Result<Vec<NodeDeviceResource>, DeviceError> {
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, groups)) = &*cached {
            if at.elapsed() < self.period {
                return Ok(groups.clone());
            }
        }
        let groups = self
            .with_nvml(|n| Self::read_groups(n, &self.ignored))
            .unwrap_or(Ok(Vec::new()))
            .map_err(plugin_error)?;
        *cached = Some((Instant::now(), groups.clone()));
        Ok(groups)
    }

    fn reserve(
        &self,
        _group: &NodeDeviceResource,
        ids: &[String],
    ) -> Result<Reservation, DeviceError> {
        let mut r = Reservation::default();
        r.envs.insert(VISIBLE_DEVICES_ENV.into(), ids.join(","));
        r.gpu_ids = ids.to_vec();
        Ok(r)
    }

    fn stats(&self) -> Result<Vec<DeviceGroupStats>, DeviceError> {
        let now = crate::time::now_rfc3339();
        let out = self.with_nvml(|nvml| {
            let mut by_model: BTreeMap<String, DeviceGroupStats> = BTreeMap::new();
            let count = nvml.device_count().unwrap_or(0);
            for index in 0..count {
                let Ok(dev) = nvml.device_by_index(index) else {
                    continue;
                };
                let Ok(uuid) = dev.uuid() else { continue };
                if self.ignored.contains(&uuid) {
                    continue;
                }
                let model = dev.name().unwrap_or_else(|_| "unknown".into());
                let mut attrs = BTreeMap::new();
                let summary = dev.memory_info().ok().map(|m| {
                    let used = i64::try_from(m.used / (1024 * 1024)).unwrap_or(i64::MAX);
                    let total = i64::try_from(m.total / (1024 * 1024)).unwrap_or(i64::MAX);
                    StatValue::int_of(used, Some(total), "MiB", "UsedMemory / TotalMemory")
                });
                if let Some(s) = &summary {
                    attrs.insert("Memory state".to_string(), s.clone());
                }
                if let Ok(u) = dev.utilization_rates() {
                    attrs.insert(
                        "GPU utilization".into(),
                        StatValue::int_of(i64::from(u.gpu), Some(100), "%", "GPU utilization"),
                    );
                    attrs.insert(
                        "Memory utilization".into(),
                        StatValue::int_of(
                            i64::from(u.memory),
                            Some(100),
                            "%",
                            "Memory utilization",
                        ),
                    );
                }
                if let Ok(t) = dev.temperature(TemperatureSensor::Gpu) {
                    attrs.insert(
                        "Temperature".into(),
                        StatValue::int_of(i64::from(t), None, "C", "Temperature"),
                    );
                }
                if let Ok(p) = dev.power_usage() {
                    attrs.insert(
                        "Power usage".into(),
                        StatValue::int_of(i64::from(p / 1000), None, "W", "Power usage"),
                    );
                }
                by_model
                    .entry(model.clone())
                    .or_insert_with(|| DeviceGroupStats {
                        vendor: VENDOR.into(),
                        device_type: DEVICE_TYPE.into(),
                        name: model,
                        instance_stats: BTreeMap::new(),
                    })
                    .instance_stats
                    .insert(
                        uuid,
                        DeviceStats {
                            summary,
                            stats: Some(StatObject {
                                nested: BTreeMap::new(),
                                attributes: attrs,
                            }),
                            timestamp: now.clone(),
                        },
                    );
            }
            by_model.into_values().collect()
        });
        Ok(out.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keys_are_checked() {
        assert!(NvidiaPlugin::from_config(&Value::Null).unwrap().is_some());
        let p = NvidiaPlugin::from_config(
            &json!({"ignored_gpu_ids": ["GPU-1"], "fingerprint_period": "30s"}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.ignored, ["GPU-1"]);
        assert_eq!(p.period, Duration::from_secs(30));
        for (cfg, want) in [
            (json!({"fingerprint_period": "1ms"}), "fingerprint_period"),
            (json!({"ignored_gpu_ids": "GPU-1"}), "ignored_gpu_ids"),
            (json!({"enable": true}), "unknown key \"enable\""),
        ] {
            let err = NvidiaPlugin::from_config(&cfg)
                .err()
                .expect("refused")
                .to_string();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn reservations_name_the_uuids() {
        let p = NvidiaPlugin::from_config(&Value::Null).unwrap().unwrap();
        let r = p
            .reserve(
                &NodeDeviceResource::default(),
                &["GPU-a".into(), "GPU-b".into()],
            )
            .unwrap();
        assert_eq!(r.envs[VISIBLE_DEVICES_ENV], "GPU-a,GPU-b");
        assert_eq!(r.gpu_ids, ["GPU-a", "GPU-b"]);
    }
}
