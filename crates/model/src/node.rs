//! A client node: what its agent fingerprinted (attributes, resources, drivers, host volumes, CSI plugins),
//! its status, its scheduling eligibility and any drain in progress. A client registers a [`Node`];
//! [`Node::validate`] checks what it must send, [`Node::canonicalize`] fills the server-side defaults.

use crate::csi::CSIInfo;
use crate::duration::Duration;
use crate::job::DEFAULT_NODE_POOL;
use crate::path::Path;
use crate::resources::NetworkResource;
use crate::validate::ValidationErrors;
use serde::{Deserialize, Serialize};
use serde_with::skip_serializing_none;
use std::collections::BTreeMap;

/// The pseudo node pool that names every pool; no node may register in it.
pub const NODE_POOL_ALL: &str = "all";
pub const NODE_POOL_NAME_MAX_LEN: usize = 128;
/// The attribute holding the node's address, shown as `Address` in node lists.
pub const ATTR_ADDRESS: &str = "unique.network.ip-address";
/// The attribute holding the client's Nomad-compatible version, shown as `Version` in node lists.
pub const ATTR_VERSION: &str = "nomad.version";

pub use crate::status::{NodeStatus, SchedulingEligibility};

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Node {
    #[serde(rename = "ID")]
    pub id: String,
    /// The client's secret; API responses blank it.
    #[serde(rename = "SecretID")]
    pub secret_id: String,
    #[serde(rename = "Datacenter")]
    pub datacenter: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "HTTPAddr")]
    pub http_addr: String,
    #[serde(rename = "TLSEnabled")]
    pub tls_enabled: bool,
    /// Fingerprinted attributes: `kernel.name`, `cpu.arch`, `driver.docker`, `unique.hostname`, …
    #[serde(rename = "Attributes")]
    pub attributes: BTreeMap<String, String>,
    #[serde(rename = "NodeResources")]
    pub node_resources: Option<NodeResources>,
    #[serde(rename = "ReservedResources")]
    pub reserved_resources: Option<NodeReservedResources>,
    #[serde(rename = "Links")]
    pub links: BTreeMap<String, String>,
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
    #[serde(rename = "NodeClass")]
    pub node_class: String,
    #[serde(rename = "NodePool")]
    pub node_pool: String,
    /// A hash of the attributes that affect scheduling, so nodes alike are checked once.
    #[serde(rename = "ComputedClass")]
    pub computed_class: String,
    #[serde(rename = "DrainStrategy")]
    pub drain_strategy: Option<DrainStrategy>,
    /// Computed for API responses: whether `DrainStrategy` is set.
    #[serde(rename = "Drain")]
    pub drain: bool,
    /// `eligible` or `ineligible` ([`SchedulingEligibility`]).
    #[serde(rename = "SchedulingEligibility")]
    pub scheduling_eligibility: SchedulingEligibility,
    /// `initializing`, `ready`, `down` or `disconnected` ([`NodeStatus`]).
    #[serde(rename = "Status")]
    pub status: NodeStatus,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
    /// Unix seconds.
    #[serde(rename = "StatusUpdatedAt")]
    pub status_updated_at: i64,
    #[serde(rename = "Events")]
    pub events: Vec<NodeEvent>,
    #[serde(rename = "Drivers")]
    pub drivers: BTreeMap<String, DriverInfo>,
    #[serde(rename = "HostVolumes")]
    pub host_volumes: BTreeMap<String, ClientHostVolumeConfig>,
    /// Plugin ID → the controller plugin's fingerprint on this node.
    #[serde(rename = "CSIControllerPlugins")]
    pub csi_controller_plugins: BTreeMap<String, CSIInfo>,
    /// Plugin ID → the node plugin's fingerprint on this node.
    #[serde(rename = "CSINodePlugins")]
    pub csi_node_plugins: BTreeMap<String, CSIInfo>,
    #[serde(rename = "LastDrain")]
    pub last_drain: Option<DrainMetadata>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// What the node has to offer, as fingerprinted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeResources {
    #[serde(rename = "Cpu")]
    pub cpu: NodeCpuResources,
    #[serde(rename = "Memory")]
    pub memory: NodeMemoryResources,
    #[serde(rename = "Disk")]
    pub disk: NodeDiskResources,
    #[serde(rename = "Networks")]
    pub networks: Vec<NetworkResource>,
    #[serde(rename = "NodeNetworks")]
    pub node_networks: Vec<NodeNetworkResource>,
    #[serde(rename = "Devices")]
    pub devices: Vec<NodeDeviceResource>,
    #[serde(rename = "MinDynamicPort")]
    pub min_dynamic_port: i32,
    #[serde(rename = "MaxDynamicPort")]
    pub max_dynamic_port: i32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeCpuResources {
    /// Total compute in MHz.
    #[serde(rename = "CpuShares")]
    pub cpu_shares: i64,
    #[serde(rename = "TotalCpuCores")]
    pub total_cpu_cores: u16,
    /// Core IDs that tasks may reserve with `resources.cores`.
    #[serde(rename = "ReservableCpuCores")]
    pub reservable_cpu_cores: Vec<u16>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeMemoryResources {
    #[serde(rename = "MemoryMB")]
    pub memory_mb: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeDiskResources {
    #[serde(rename = "DiskMB")]
    pub disk_mb: i64,
}

/// A network interface of the node, with its addresses (used by `host_network`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeNetworkResource {
    #[serde(rename = "Mode")]
    pub mode: String,
    #[serde(rename = "Device")]
    pub device: String,
    #[serde(rename = "MacAddress")]
    pub mac_address: String,
    /// Link speed in MBits.
    #[serde(rename = "Speed")]
    pub speed: i64,
    #[serde(rename = "Addresses")]
    pub addresses: Vec<NodeNetworkAddress>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeNetworkAddress {
    /// `ipv4` or `ipv6`.
    #[serde(rename = "Family")]
    pub family: String,
    /// The host network name this address serves.
    #[serde(rename = "Alias")]
    pub alias: String,
    #[serde(rename = "Address")]
    pub address: String,
    #[serde(rename = "ReservedPorts")]
    pub reserved_ports: String,
    #[serde(rename = "Gateway")]
    pub gateway: String,
}

/// A group of identical devices (`nvidia/gpu/Tesla T4`) with their instances.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeDeviceResource {
    #[serde(rename = "Vendor")]
    pub vendor: String,
    #[serde(rename = "Type")]
    pub device_type: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Instances")]
    pub instances: Vec<NodeDevice>,
    /// Typed attributes as the device plugin reports them (`{"Int":16,"Unit":"GiB"}`), kept as JSON.
    #[serde(rename = "Attributes")]
    pub attributes: BTreeMap<String, serde_json::Value>,
}

#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeDevice {
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Healthy")]
    pub healthy: bool,
    #[serde(rename = "HealthDescription")]
    pub health_description: String,
    #[serde(rename = "Locality")]
    pub locality: Option<NodeDeviceLocality>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeDeviceLocality {
    #[serde(rename = "PciBusID")]
    pub pci_bus_id: String,
}

/// What the operator keeps back from scheduling on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeReservedResources {
    #[serde(rename = "Cpu")]
    pub cpu: NodeReservedCpuResources,
    #[serde(rename = "Memory")]
    pub memory: NodeMemoryResources,
    #[serde(rename = "Disk")]
    pub disk: NodeDiskResources,
    #[serde(rename = "Networks")]
    pub networks: NodeReservedNetworkResources,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeReservedCpuResources {
    #[serde(rename = "CpuShares")]
    pub cpu_shares: i64,
    #[serde(rename = "ReservedCpuCores")]
    pub reserved_cpu_cores: Vec<u16>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeReservedNetworkResources {
    /// A port list such as `"22,80,8000-8100"`.
    #[serde(rename = "ReservedHostPorts")]
    pub reserved_host_ports: String,
}

/// A drain in progress. A negative `Deadline` forces the drain at once.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DrainStrategy {
    #[serde(rename = "Deadline")]
    pub deadline: Duration,
    #[serde(rename = "IgnoreSystemJobs")]
    pub ignore_system_jobs: bool,
    /// RFC 3339: when remaining allocations are stopped regardless.
    #[serde(rename = "ForceDeadline")]
    pub force_deadline: Option<String>,
    /// RFC 3339.
    #[serde(rename = "StartedAt")]
    pub started_at: Option<String>,
}

pub use crate::status::DrainStatus;

/// Node event subsystems and messages of drains and eligibility changes (Nomad's wording).
pub const NODE_EVENT_SUBSYSTEM_DRAIN: &str = "Drain";
pub const NODE_EVENT_SUBSYSTEM_CLUSTER: &str = "Cluster";
pub const NODE_EVENT_DRAIN_SET: &str = "Node drain strategy set";
pub const NODE_EVENT_DRAIN_UPDATED: &str = "Node drain stategy updated";
pub const NODE_EVENT_DRAIN_DISABLED: &str = "Node drain disabled";
pub const NODE_EVENT_DRAIN_COMPLETE: &str = "Node drain complete";
/// The detail key a drain completed by its deadline carries.
pub const NODE_EVENT_DRAIN_DEADLINED: &str = "deadline_reached";
pub const NODE_EVENT_ELIGIBLE: &str = "Node marked as eligible for scheduling";
pub const NODE_EVENT_INELIGIBLE: &str = "Node marked as ineligible for scheduling";

impl DrainStrategy {
    /// When the drain stops waiting and migrates everything left (Unix nanoseconds): `Some(i64::MIN)`
    /// for a forced drain (negative deadline), `None` for a drain without a deadline.
    pub fn force_deadline_nanos(&self) -> Option<i64> {
        if self.deadline.0 < 0 {
            return Some(i64::MIN);
        }
        if self.deadline.0 == 0 {
            return None;
        }
        self.force_deadline
            .as_deref()
            .and_then(crate::time::parse_unix_nanos)
    }
}

/// The record of the node's last drain.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DrainMetadata {
    /// RFC 3339.
    #[serde(rename = "StartedAt")]
    pub started_at: Option<String>,
    /// RFC 3339.
    #[serde(rename = "UpdatedAt")]
    pub updated_at: Option<String>,
    /// `draining`, `complete` or `canceled`.
    #[serde(rename = "Status")]
    pub status: DrainStatus,
    #[serde(rename = "AccessorID")]
    pub accessor_id: String,
    #[serde(rename = "Meta")]
    pub meta: BTreeMap<String, String>,
}

/// A task driver's fingerprint on this node.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DriverInfo {
    #[serde(rename = "Attributes")]
    pub attributes: BTreeMap<String, String>,
    #[serde(rename = "Detected")]
    pub detected: bool,
    #[serde(rename = "Healthy")]
    pub healthy: bool,
    #[serde(rename = "HealthDescription")]
    pub health_description: String,
    /// RFC 3339.
    #[serde(rename = "UpdateTime")]
    pub update_time: Option<String>,
}

/// A host volume the client's configuration offers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClientHostVolumeConfig {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Path")]
    pub path: String,
    #[serde(rename = "ReadOnly")]
    pub read_only: bool,
    /// A dynamic host volume's ID (empty for one from the client's configuration).
    #[serde(rename = "ID")]
    pub id: String,
}

/// Something that happened to the node (registered, drained, heartbeat missed, …).
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeEvent {
    #[serde(rename = "Message")]
    pub message: String,
    /// `Cluster`, `Drain`, `Driver`, `Heartbeat`, `Scheduling`, …
    #[serde(rename = "Subsystem")]
    pub subsystem: String,
    #[serde(rename = "Details")]
    pub details: BTreeMap<String, String>,
    /// RFC 3339.
    #[serde(rename = "Timestamp")]
    pub timestamp: Option<String>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
}

/// A node as `GET /v1/nodes` lists it. `Attributes` only with `?os=true`, resources only with `?resources=true`.
#[skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeListStub {
    #[serde(rename = "Address")]
    pub address: String,
    #[serde(rename = "ID")]
    pub id: String,
    #[serde(rename = "Attributes", skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    #[serde(rename = "Datacenter")]
    pub datacenter: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "NodeClass")]
    pub node_class: String,
    #[serde(rename = "NodePool")]
    pub node_pool: String,
    #[serde(rename = "Version")]
    pub version: String,
    #[serde(rename = "Drain")]
    pub drain: bool,
    #[serde(rename = "SchedulingEligibility")]
    pub scheduling_eligibility: SchedulingEligibility,
    #[serde(rename = "Status")]
    pub status: NodeStatus,
    #[serde(rename = "StatusDescription")]
    pub status_description: String,
    #[serde(rename = "Drivers")]
    pub drivers: BTreeMap<String, DriverInfo>,
    #[serde(rename = "HostVolumes")]
    pub host_volumes: BTreeMap<String, ClientHostVolumeConfig>,
    #[serde(rename = "NodeResources")]
    pub node_resources: Option<NodeResources>,
    #[serde(rename = "ReservedResources")]
    pub reserved_resources: Option<NodeReservedResources>,
    #[serde(rename = "LastDrain")]
    pub last_drain: Option<DrainMetadata>,
    /// Caravan's own (`?allocated=true` on `/v1/nodes`): what the node's live allocations
    /// reserve. Nomad has no such field; its clients ignore it.
    #[serde(rename = "Allocated", default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<NodeAllocated>,
    #[serde(rename = "CreateIndex")]
    pub create_index: u64,
    #[serde(rename = "ModifyIndex")]
    pub modify_index: u64,
}

/// The sums of what a node's non-terminal allocations reserve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeAllocated {
    #[serde(rename = "Allocs")]
    pub allocs: u64,
    #[serde(rename = "CpuShares")]
    pub cpu_shares: i64,
    #[serde(rename = "MemoryMB")]
    pub memory_mb: i64,
    #[serde(rename = "DiskMB")]
    pub disk_mb: i64,
}

impl NodeAllocated {
    /// Adds one allocation's reservation, unless it is terminal.
    pub fn add(&mut self, alloc: &crate::Allocation) {
        if alloc.is_terminal() {
            return;
        }
        let (cpu, mem, disk) = alloc.reserved();
        self.allocs += 1;
        self.cpu_shares += cpu;
        self.memory_mb += mem;
        self.disk_mb += disk;
    }

    /// Takes back what `add` added for the same allocation.
    pub fn remove(&mut self, alloc: &crate::Allocation) {
        if alloc.is_terminal() {
            return;
        }
        let (cpu, mem, disk) = alloc.reserved();
        self.allocs = self.allocs.saturating_sub(1);
        self.cpu_shares -= cpu;
        self.memory_mb -= mem;
        self.disk_mb -= disk;
    }
}

impl Node {
    /// Ready, not draining and eligible: the scheduler may place allocations here.
    pub fn is_ready(&self) -> bool {
        self.status == NodeStatus::Ready
            && self.drain_strategy.is_none()
            && self.scheduling_eligibility != SchedulingEligibility::Ineligible
    }

    /// Fills what the server sets when a client registers: pool and the `Drain` flag (status and
    /// eligibility already default to `initializing` and `eligible`). Idempotent.
    pub fn canonicalize(&mut self) {
        if self.node_pool.is_empty() {
            self.node_pool = DEFAULT_NODE_POOL.into();
        }
        self.drain = self.drain_strategy.is_some();
    }

    /// Checks what a registering client must send, and returns every problem found.
    pub fn validate(&self) -> Result<(), ValidationErrors> {
        let mut errs = ValidationErrors::new();
        let root = Path::root();
        self.validate_identity(&root, &mut errs);
        errs.check(
            self.status.is_known(),
            &root.field("status"),
            format!(
                "unknown node status {:?}; expected one of {}",
                self.status.as_str(),
                NodeStatus::NAMES.join(", ")
            ),
        );
        errs.check(
            self.scheduling_eligibility.is_known(),
            &root.field("scheduling_eligibility"),
            format!(
                "scheduling eligibility must be eligible or ineligible, got {:?}",
                self.scheduling_eligibility.as_str()
            ),
        );
        for (name, v) in &self.host_volumes {
            errs.check(
                !v.path.is_empty(),
                &root.block("host_volume", name).field("path"),
                "host volume path is required",
            );
        }
        errs.into_result()
    }

    fn validate_identity(&self, root: &Path, errs: &mut ValidationErrors) {
        for (field, value, what) in [
            ("id", &self.id, "node ID"),
            ("secret_id", &self.secret_id, "node secret ID"),
            ("datacenter", &self.datacenter, "datacenter"),
            ("name", &self.name, "node name"),
        ] {
            errs.check(
                !value.is_empty(),
                &root.field(field),
                format!("{what} is required"),
            );
            errs.check(
                !value.contains(|c: char| c.is_whitespace() || c == '\0'),
                &root.field(field),
                format!("{what} {value:?} cannot contain spaces or null characters"),
            );
        }
        if !self.node_pool.is_empty() {
            let pool = self.node_pool.as_str();
            errs.check(
                valid_pool_name(pool),
                &root.field("node_pool"),
                format!("node pool {pool:?} must be 1 to {NODE_POOL_NAME_MAX_LEN} letters, digits, '-' or '_'"),
            );
            errs.check(
                pool != NODE_POOL_ALL,
                &root.field("node_pool"),
                format!("a node cannot register in the {NODE_POOL_ALL:?} pool"),
            );
        }
    }

    /// The node as `GET /v1/nodes` lists it.
    pub fn stub(&self, with_attributes: bool, with_resources: bool) -> NodeListStub {
        let attr = |k: &str| self.attributes.get(k).cloned().unwrap_or_default();
        NodeListStub {
            address: attr(ATTR_ADDRESS),
            id: self.id.clone(),
            attributes: if with_attributes {
                self.attributes.clone()
            } else {
                BTreeMap::new()
            },
            datacenter: self.datacenter.clone(),
            name: self.name.clone(),
            node_class: self.node_class.clone(),
            node_pool: self.node_pool.clone(),
            version: attr(ATTR_VERSION),
            drain: self.drain_strategy.is_some(),
            scheduling_eligibility: self.scheduling_eligibility.clone(),
            status: self.status.clone(),
            status_description: self.status_description.clone(),
            drivers: self.drivers.clone(),
            host_volumes: self.host_volumes.clone(),
            node_resources: self.node_resources.clone().filter(|_| with_resources),
            reserved_resources: self.reserved_resources.clone().filter(|_| with_resources),
            last_drain: self.last_drain.clone(),
            allocated: None,
            create_index: self.create_index,
            modify_index: self.modify_index,
        }
    }
}

/// Node pool names: 1 to 128 ASCII letters, digits, `-` or `_`.
pub fn valid_pool_name(name: &str) -> bool {
    (1..=NODE_POOL_NAME_MAX_LEN).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::{CSIControllerInfo, CSINodeInfo, CSITopology};
    use crate::resources::Port;
    use crate::testutil::{assert_decodes_lowercased, assert_round_trip};

    impl Node {
        /// A registered, fingerprinted node with every block filled in.
        pub(crate) fn example() -> Node {
            let attributes: BTreeMap<String, String> = [
                ("kernel.name", "linux"),
                ("cpu.arch", "amd64"),
                ("driver.docker", "1"),
                (ATTR_ADDRESS, "10.0.0.5"),
                (ATTR_VERSION, "1.9.0"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
            let mut node = Node {
                id: "5b2d1c1e-8d3f-4f7a-9f3c-2a1b0c9d8e7f".into(),
                secret_id: "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b".into(),
                datacenter: "dc1".into(),
                name: "client-1".into(),
                http_addr: "10.0.0.5:4646".into(),
                tls_enabled: true,
                attributes,
                node_resources: Some(example_resources()),
                reserved_resources: Some(NodeReservedResources {
                    cpu: NodeReservedCpuResources {
                        cpu_shares: 100,
                        reserved_cpu_cores: vec![0],
                    },
                    memory: NodeMemoryResources { memory_mb: 256 },
                    disk: NodeDiskResources { disk_mb: 1024 },
                    networks: NodeReservedNetworkResources {
                        reserved_host_ports: "22".into(),
                    },
                }),
                links: [("aws.ec2".to_string(), "i-0abc".to_string())].into(),
                meta: [("rack".to_string(), "r1".to_string())].into(),
                node_class: "large".into(),
                node_pool: "default".into(),
                computed_class: "v1:123456".into(),
                drain_strategy: Some(DrainStrategy {
                    deadline: Duration::from_hours(1),
                    ignore_system_jobs: true,
                    force_deadline: Some("2024-05-01T13:00:00Z".into()),
                    started_at: Some("2024-05-01T12:00:00.123456789Z".into()),
                }),
                drain: true,
                scheduling_eligibility: "ineligible".into(),
                status: "ready".into(),
                status_description: "".into(),
                status_updated_at: 1_714_564_800,
                events: vec![NodeEvent {
                    message: "node registered".into(),
                    subsystem: "Cluster".into(),
                    details: BTreeMap::new(),
                    timestamp: Some("2024-05-01T11:00:00Z".into()),
                    create_index: 10,
                }],
                drivers: [("docker".to_string(), example_driver())].into(),
                host_volumes: [(
                    "certs".to_string(),
                    ClientHostVolumeConfig {
                        name: "certs".into(),
                        path: "/etc/ssl/certs".into(),
                        read_only: true,
                        id: String::new(),
                    },
                )]
                .into(),
                csi_controller_plugins: BTreeMap::new(),
                csi_node_plugins: BTreeMap::new(),
                last_drain: Some(DrainMetadata {
                    started_at: Some("2024-04-01T12:00:00Z".into()),
                    updated_at: Some("2024-04-01T12:30:00Z".into()),
                    status: "complete".into(),
                    accessor_id: "a-1".into(),
                    meta: [("message".to_string(), "kernel upgrade".to_string())].into(),
                }),
                create_index: 10,
                modify_index: 42,
            };
            node.csi_controller_plugins
                .insert("ebs".into(), example_csi_info(true));
            node.csi_node_plugins
                .insert("ebs".into(), example_csi_info(false));
            node
        }
    }

    fn example_resources() -> NodeResources {
        NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: 8000,
                total_cpu_cores: 4,
                reservable_cpu_cores: vec![1, 2, 3],
            },
            memory: NodeMemoryResources { memory_mb: 16384 },
            disk: NodeDiskResources { disk_mb: 100_000 },
            networks: vec![NetworkResource {
                mode: "host".into(),
                device: "eth0".into(),
                cidr: "10.0.0.5/32".into(),
                ip: "10.0.0.5".into(),
                mbits: Some(1000),
                reserved_ports: vec![Port {
                    label: "ssh".into(),
                    value: 22,
                    ..Port::default()
                }],
                ..NetworkResource::default()
            }],
            node_networks: vec![NodeNetworkResource {
                mode: "host".into(),
                device: "eth0".into(),
                mac_address: "02:42:ac:11:00:02".into(),
                speed: 1000,
                addresses: vec![NodeNetworkAddress {
                    family: "ipv4".into(),
                    alias: "default".into(),
                    address: "10.0.0.5".into(),
                    reserved_ports: "".into(),
                    gateway: "".into(),
                }],
            }],
            devices: vec![NodeDeviceResource {
                vendor: "nvidia".into(),
                device_type: "gpu".into(),
                name: "t4".into(),
                instances: vec![NodeDevice {
                    id: "gpu-0".into(),
                    healthy: true,
                    health_description: "".into(),
                    locality: Some(NodeDeviceLocality {
                        pci_bus_id: "0000:00:1e.0".into(),
                    }),
                }],
                attributes: [("cuda_cores".to_string(), serde_json::json!(2560))].into(),
            }],
            min_dynamic_port: 20000,
            max_dynamic_port: 32000,
        }
    }

    fn example_driver() -> DriverInfo {
        DriverInfo {
            attributes: [("driver.docker.version".to_string(), "24.0.7".to_string())].into(),
            detected: true,
            healthy: true,
            health_description: "Healthy".into(),
            update_time: Some("2024-05-01T11:00:00Z".into()),
        }
    }

    fn example_csi_info(controller: bool) -> CSIInfo {
        CSIInfo {
            plugin_id: "ebs".into(),
            alloc_id: "0d7e0a3c-1111-2222-3333-444455556666".into(),
            healthy: true,
            health_description: "healthy".into(),
            update_time: Some("2024-05-01T11:00:30Z".into()),
            provider: "ebs.csi.aws.com".into(),
            provider_version: "1.2.0".into(),
            requires_controller_plugin: true,
            requires_topologies: true,
            controller_info: controller.then(|| CSIControllerInfo {
                supports_attach_detach: true,
                supports_read_only_attach: true,
                ..CSIControllerInfo::default()
            }),
            node_info: (!controller).then(|| CSINodeInfo {
                id: "i-0abc".into(),
                max_volumes: 25,
                accessible_topology: Some(CSITopology {
                    segments: [("zone".to_string(), "us-east-1a".to_string())].into(),
                }),
                requires_node_stage_volume: true,
                ..CSINodeInfo::default()
            }),
        }
    }

    fn errors_of(node: &Node) -> Vec<String> {
        match node.validate() {
            Ok(()) => Vec::new(),
            Err(e) => e.errors.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn node_round_trips() {
        let text = assert_round_trip(&Node::example());
        assert!(text.contains(r#""HTTPAddr":"10.0.0.5:4646""#), "{text}");
        assert!(text.contains(r#""CSINodePlugins":{"ebs":"#), "{text}");
        assert!(text.contains(r#""Deadline":3600000000000"#), "{text}");
        assert_decodes_lowercased(&Node::example());
    }

    #[test]
    fn node_list_stub_round_trips_and_hides_what_was_not_asked_for() {
        let node = Node::example();
        let stub = node.stub(false, false);
        assert_eq!(stub.address, "10.0.0.5");
        assert_eq!(stub.version, "1.9.0");
        assert!(stub.drain);
        let text = assert_round_trip(&stub);
        assert!(!text.contains(r#""Attributes":{"kernel.name""#), "{text}");
        assert!(!text.contains("NodeResources"), "{text}");
        let full = node.stub(true, true);
        assert_round_trip(&full);
        assert_decodes_lowercased(&full);
        assert_eq!(full.attributes.len(), node.attributes.len());
    }

    #[test]
    fn a_complete_registration_is_valid() {
        assert_eq!(errors_of(&Node::example()), Vec::<String>::new());
        let mut bare = Node {
            id: "n1".into(),
            secret_id: "s1".into(),
            datacenter: "dc1".into(),
            name: "client-1".into(),
            ..Node::default()
        };
        assert!(bare.validate().is_ok());
        bare.canonicalize();
        assert_eq!(bare.node_pool, "default");
        assert_eq!(bare.status, NodeStatus::Initializing);
        assert_eq!(bare.scheduling_eligibility, SchedulingEligibility::Eligible);
        let once = bare.clone();
        bare.canonicalize();
        assert_eq!(bare, once, "canonicalize is idempotent");
    }

    #[test]
    fn registration_reports_every_missing_field() {
        assert_eq!(
            errors_of(&Node::default()),
            vec![
                "id: node ID is required",
                "secret_id: node secret ID is required",
                "datacenter: datacenter is required",
                "name: node name is required",
            ]
        );
    }

    #[test]
    fn registration_rejects_bad_values() {
        let mut node = Node::example();
        node.status = "sleeping".into();
        node.scheduling_eligibility = "maybe".into();
        node.node_pool = "all".into();
        node.name = "client 1".into();
        node.host_volumes
            .get_mut("certs")
            .expect("example has certs")
            .path = String::new();
        let errs = errors_of(&node);
        assert_eq!(errs.len(), 5, "{errs:#?}");
        assert!(errs[0].starts_with("name: node name \"client 1\" cannot contain spaces"));
        assert_eq!(
            errs[1],
            "node_pool: a node cannot register in the \"all\" pool"
        );
        assert!(errs[2].starts_with("status: unknown node status \"sleeping\""));
        assert!(errs[3].starts_with("scheduling_eligibility:"));
        assert_eq!(
            errs[4],
            "host_volume \"certs\" > path: host volume path is required"
        );
        node.node_pool = "bad pool!".into();
        assert!(errors_of(&node).iter().any(|e| e.starts_with("node_pool:")));
    }

    #[test]
    fn readiness_needs_ready_undrained_and_eligible() {
        let mut node = Node::example();
        assert!(!node.is_ready(), "draining and ineligible");
        node.drain_strategy = None;
        node.scheduling_eligibility = "eligible".into();
        assert!(node.is_ready());
        node.status = "down".into();
        assert!(!node.is_ready());
        for &name in NodeStatus::NAMES {
            assert_eq!(
                NodeStatus::parse(name).as_ref().map(NodeStatus::as_str),
                Some(name)
            );
        }
        for &name in SchedulingEligibility::NAMES {
            assert_eq!(
                SchedulingEligibility::parse(name)
                    .as_ref()
                    .map(SchedulingEligibility::as_str),
                Some(name)
            );
        }
    }
}
