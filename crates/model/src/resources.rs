//! What a task asks for: CPU, memory, disk, devices, and the network ports of a group.

use crate::constraint::{Affinity, Constraint};
use crate::path::Path;
use crate::validate::ValidationErrors;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;

pub const DEFAULT_CPU_MHZ: i32 = 100;
pub const DEFAULT_MEMORY_MB: i32 = 300;
pub const MIN_CPU_MHZ: i32 = 1;
pub const MIN_MEMORY_MB: i32 = 10;
pub const MAX_PORT: i32 = 65535;

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resources {
    #[serde(rename = "CPU")]
    pub cpu: Option<i32>,
    #[serde(rename = "Cores")]
    pub cores: Option<i32>,
    #[serde(rename = "MemoryMB")]
    pub memory_mb: Option<i32>,
    #[serde(rename = "MemoryMaxMB")]
    pub memory_max_mb: Option<i32>,
    #[serde(rename = "DiskMB")]
    pub disk_mb: Option<i32>,
    #[serde(rename = "IOPS")]
    pub iops: Option<i32>,
    #[serde(rename = "SecretsMB")]
    pub secrets_mb: Option<i32>,
    #[serde(rename = "Networks")]
    pub networks: Vec<NetworkResource>,
    #[serde(rename = "Devices")]
    pub devices: Vec<RequestedDevice>,
}

impl Resources {
    pub fn canonicalize(&mut self) {
        if self.cores.unwrap_or(0) == 0 {
            self.cpu.get_or_insert(DEFAULT_CPU_MHZ);
        }
        self.memory_mb.get_or_insert(DEFAULT_MEMORY_MB);
        for n in &mut self.networks {
            n.canonicalize();
        }
        for d in &mut self.devices {
            d.canonicalize();
        }
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        let cores = self.cores.unwrap_or(0);
        errs.check(
            cores >= 0,
            &path.field("cores"),
            format!("cores must be positive, got {cores}"),
        );
        if let Some(cpu) = self.cpu {
            errs.check(
                cpu >= MIN_CPU_MHZ,
                &path.field("cpu"),
                format!("cpu must be at least {MIN_CPU_MHZ} MHz, got {cpu}"),
            );
            errs.check(
                cores == 0 || cpu == 0,
                &path.field("cores"),
                "cpu and cores cannot both be set",
            );
        }
        if let Some(mem) = self.memory_mb {
            errs.check(
                mem >= MIN_MEMORY_MB,
                &path.field("memory"),
                format!("memory must be at least {MIN_MEMORY_MB} MB, got {mem}"),
            );
            if let Some(max) = self.memory_max_mb {
                errs.check(
                    max == 0 || max >= mem,
                    &path.field("memory_max"),
                    format!("memory_max ({max} MB) must not be less than memory ({mem} MB)"),
                );
            }
        }
        for (field, v) in [
            ("disk", self.disk_mb),
            ("iops", self.iops),
            ("secrets", self.secrets_mb),
        ] {
            if let Some(v) = v {
                errs.check(
                    v >= 0,
                    &path.field(field),
                    format!("{field} cannot be negative, got {v}"),
                );
            }
        }
        for (i, n) in self.networks.iter().enumerate() {
            n.validate(&path.field("network").index(i), errs);
        }
        for d in &self.devices {
            d.validate(&path.block("device", &d.name), errs);
        }
    }
}

/// A network request: the group's `network` block (or, deprecated, a task's).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NetworkResource {
    #[serde(rename = "Mode")]
    pub mode: String,
    #[serde(rename = "Device")]
    pub device: String,
    #[serde(rename = "CIDR")]
    pub cidr: String,
    #[serde(rename = "IP")]
    pub ip: String,
    #[serde(rename = "Hostname")]
    pub hostname: String,
    #[serde(rename = "MBits")]
    pub mbits: Option<i32>,
    #[serde(rename = "DNS")]
    pub dns: Option<DnsConfig>,
    #[serde(rename = "ReservedPorts")]
    pub reserved_ports: Vec<Port>,
    #[serde(rename = "DynamicPorts")]
    pub dynamic_ports: Vec<Port>,
    /// `cni { args = {…} }`: `CNI_ARGS` for a `cni/<name>` network.
    #[serde(rename = "CNI")]
    pub cni: Option<CniConfig>,
}

/// `network { cni { args } }` (Nomad's `CNIConfig`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CniConfig {
    #[serde(rename = "Args")]
    pub args: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DnsConfig {
    #[serde(rename = "Servers")]
    pub servers: Vec<String>,
    #[serde(rename = "Searches")]
    pub searches: Vec<String>,
    #[serde(rename = "Options")]
    pub options: Vec<String>,
}

/// A port: static (`Value` set, in `ReservedPorts`) or dynamic (picked by the scheduler).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Port {
    #[serde(rename = "Label")]
    pub label: String,
    #[serde(rename = "Value")]
    pub value: i32,
    #[serde(rename = "To")]
    pub to: i32,
    #[serde(rename = "HostNetwork")]
    pub host_network: String,
    #[serde(rename = "IgnoreCollision")]
    pub ignore_collision: bool,
}

impl NetworkResource {
    pub fn canonicalize(&mut self) {
        if self.mode.is_empty() {
            self.mode = "host".into();
        }
        for p in self
            .reserved_ports
            .iter_mut()
            .chain(self.dynamic_ports.iter_mut())
        {
            if p.host_network.is_empty() {
                p.host_network = "default".into();
            }
        }
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        let mode_ok = matches!(self.mode.as_str(), "" | "host" | "bridge" | "none")
            || self.mode.starts_with("cni/");
        errs.check(
            mode_ok,
            &path.field("mode"),
            format!(
                "unknown network mode {:?}; expected host, bridge, none or cni/<name>",
                self.mode
            ),
        );
        let mut labels = std::collections::BTreeSet::new();
        let mut statics = std::collections::BTreeSet::new();
        for p in self.reserved_ports.iter().chain(&self.dynamic_ports) {
            let pp = path.block("port", &p.label);
            errs.check(!p.label.is_empty(), &pp, "port label is required");
            errs.check(
                labels.insert(p.label.as_str()),
                &pp,
                format!("port label {:?} is used twice", p.label),
            );
            errs.check(
                (0..=MAX_PORT).contains(&p.to) || p.to == -1,
                &pp.field("to"),
                format!("to must be a port between 0 and {MAX_PORT}, got {}", p.to),
            );
        }
        for p in &self.reserved_ports {
            let pp = path.block("port", &p.label);
            errs.check(
                (1..=MAX_PORT).contains(&p.value),
                &pp.field("static"),
                format!(
                    "static port must be between 1 and {MAX_PORT}, got {}",
                    p.value
                ),
            );
            errs.check(
                p.ignore_collision || statics.insert(p.value),
                &pp.field("static"),
                format!("static port {} is reserved twice", p.value),
            );
        }
    }
}

/// A device request: `device "nvidia/gpu" { count = 2 }`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestedDevice {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Count", skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    #[serde(rename = "Constraints")]
    pub constraints: Vec<Constraint>,
    #[serde(rename = "Affinities")]
    pub affinities: Vec<Affinity>,
}

impl RequestedDevice {
    pub fn canonicalize(&mut self) {
        self.count.get_or_insert(1);
        self.constraints
            .iter_mut()
            .for_each(Constraint::canonicalize);
        self.affinities.iter_mut().for_each(Affinity::canonicalize);
    }

    pub fn validate(&self, path: &Path, errs: &mut ValidationErrors) {
        errs.check(!self.name.is_empty(), path, "device name is required");
        for (i, c) in self.constraints.iter().enumerate() {
            c.validate(&path.field("constraint").index(i), errs);
        }
        for (i, a) in self.affinities.iter().enumerate() {
            a.validate(&path.field("affinity").index(i), errs);
        }
    }
}
