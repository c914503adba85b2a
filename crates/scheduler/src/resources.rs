//! The resource model: what a node offers ([`Capacity`]), what an allocation holds ([`Usage`]),
//! what a task group asks for ([`GroupAsk`]) and what a node is already giving out ([`Used`]).

use crate::limits::{DYNAMIC_PORT_MAX_DEFAULT, DYNAMIC_PORT_MIN_DEFAULT};
use model::alloc::{AllocatedResources, Allocation};
use model::group::TaskGroup;
use model::node::{Node, NodeDeviceResource};
use model::resources::{
    NetworkResource, RequestedDevice, Resources, DEFAULT_CPU_MHZ, DEFAULT_MEMORY_MB,
};
use model::task::TaskLifecycle;
use std::collections::{BTreeMap, BTreeSet};

/// What a node can give to allocations: its resources less what the operator reserved.
#[derive(Debug, Clone, Default)]
pub(crate) struct Capacity {
    pub(crate) cpu: i64,
    pub(crate) memory_mb: i64,
    pub(crate) disk_mb: i64,
    /// Core IDs tasks may reserve.
    pub(crate) cores: Vec<u16>,
    pub(crate) cpu_per_core: i64,
    /// Host ports nobody may take.
    pub(crate) reserved_ports: BTreeSet<u16>,
    pub(crate) port_min: u16,
    pub(crate) port_max: u16,
    /// The address given ports are bound on.
    pub(crate) ip: String,
    /// Host network name (`host_network` blocks of the client) → its first address.
    pub(crate) host_networks: BTreeMap<String, String>,
}

impl Capacity {
    pub(crate) fn of(node: &Node) -> Capacity {
        let Some(res) = &node.node_resources else {
            return Capacity::default();
        };
        let reserved = node.reserved_resources.clone().unwrap_or_default();
        let reserved_cores: BTreeSet<u16> =
            reserved.cpu.reserved_cpu_cores.iter().copied().collect();
        let mut reserved_ports = parse_port_list(&reserved.networks.reserved_host_ports);
        for net in &res.node_networks {
            for addr in &net.addresses {
                reserved_ports.extend(parse_port_list(&addr.reserved_ports));
            }
        }
        let port_min = u16::try_from(res.min_dynamic_port)
            .ok()
            .filter(|p| *p > 0)
            .unwrap_or(DYNAMIC_PORT_MIN_DEFAULT);
        let port_max = u16::try_from(res.max_dynamic_port)
            .ok()
            .filter(|p| *p >= port_min)
            .unwrap_or(DYNAMIC_PORT_MAX_DEFAULT.max(port_min));
        Capacity {
            cpu: res.cpu.cpu_shares - reserved.cpu.cpu_shares,
            memory_mb: res.memory.memory_mb - reserved.memory.memory_mb,
            disk_mb: res.disk.disk_mb - reserved.disk.disk_mb,
            cores: res
                .cpu
                .reservable_cpu_cores
                .iter()
                .copied()
                .filter(|c| !reserved_cores.contains(c))
                .collect(),
            cpu_per_core: res.cpu.cpu_shares / i64::from(res.cpu.total_cpu_cores.max(1)),
            reserved_ports,
            port_min,
            port_max,
            ip: node_ip(node),
            host_networks: host_network_addresses(node),
        }
    }
}

/// Each host network alias of the node with its first address (`default` is [`node_ip`]).
pub(crate) fn host_network_addresses(node: &Node) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for net in node.node_resources.iter().flat_map(|r| &r.node_networks) {
        for a in &net.addresses {
            if !a.alias.is_empty() && a.alias != "default" {
                out.entry(a.alias.clone())
                    .or_insert_with(|| a.address.clone());
            }
        }
    }
    out
}

/// The node's address: its first network's IP, else a default-alias address, else the attribute.
fn node_ip(node: &Node) -> String {
    let res = node.node_resources.as_ref();
    let from_networks = res.and_then(|r| r.networks.iter().find(|n| !n.ip.is_empty()));
    if let Some(net) = from_networks {
        return net.ip.clone();
    }
    let from_addresses = res.and_then(|r| {
        r.node_networks
            .iter()
            .flat_map(|n| &n.addresses)
            .find(|a| a.alias == "default" || a.alias.is_empty())
    });
    if let Some(addr) = from_addresses {
        return addr.address.clone();
    }
    node.attributes
        .get(model::node::ATTR_ADDRESS)
        .cloned()
        .unwrap_or_default()
}

/// `"22,80,8000-8100"` → the ports it names; malformed parts name none.
pub(crate) fn parse_port_list(text: &str) -> BTreeSet<u16> {
    let mut out = BTreeSet::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(lo), Ok(hi)) = (lo.trim().parse::<u16>(), hi.trim().parse::<u16>()) {
            out.extend(lo..=hi);
        }
    }
    out
}

/// What one allocation holds on its node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    pub(crate) cpu: i64,
    pub(crate) memory_mb: i64,
    pub(crate) disk_mb: i64,
    pub(crate) cores: Vec<u16>,
    /// Host ports taken (ports that ignore collisions are left out).
    pub(crate) ports: Vec<u16>,
    /// Device instances taken, as `vendor/type/name/id`.
    pub(crate) devices: Vec<String>,
}

impl Usage {
    /// From `AllocatedResources`, else the deprecated `Resources`, else the job's ask.
    pub(crate) fn of_alloc(alloc: &Allocation) -> Usage {
        if let Some(ar) = &alloc.allocated_resources {
            return Usage::of_allocated(ar);
        }
        if let Some(r) = &alloc.resources {
            return Usage::of_resources(r);
        }
        let group = alloc
            .job
            .as_ref()
            .and_then(|j| j.task_groups.iter().find(|g| g.name == alloc.task_group));
        match group {
            Some(g) => {
                let ask = GroupAsk::of(g);
                Usage {
                    cpu: ask.cpu_mhz(0),
                    memory_mb: ask.memory_mb(),
                    disk_mb: ask.disk_mb,
                    ..Usage::default()
                }
            }
            None => Usage::default(),
        }
    }

    pub(crate) fn of_allocated(ar: &AllocatedResources) -> Usage {
        let mut u = Usage {
            disk_mb: ar.shared.disk_mb,
            ..Usage::default()
        };
        let mut ports = BTreeSet::new();
        for t in ar.tasks.values() {
            u.cpu += t.cpu.cpu_shares;
            u.memory_mb += t.memory.memory_mb;
            u.cores.extend(&t.cpu.reserved_cores);
            network_ports(&t.networks, &mut ports);
            for d in &t.devices {
                for id in &d.device_ids {
                    u.devices
                        .push(device_key(&d.vendor, &d.device_type, &d.name, id));
                }
            }
        }
        network_ports(&ar.shared.networks, &mut ports);
        if ar.shared.networks.is_empty() {
            ports.extend(
                ar.shared
                    .ports
                    .iter()
                    .filter_map(|p| u16::try_from(p.value).ok()),
            );
        }
        u.ports = ports.into_iter().filter(|p| *p != 0).collect();
        u
    }

    fn of_resources(r: &Resources) -> Usage {
        let mut ports = BTreeSet::new();
        network_ports(&r.networks, &mut ports);
        Usage {
            cpu: i64::from(r.cpu.unwrap_or(0)),
            memory_mb: i64::from(r.memory_mb.unwrap_or(0)),
            disk_mb: i64::from(r.disk_mb.unwrap_or(0)),
            ports: ports.into_iter().filter(|p| *p != 0).collect(),
            ..Usage::default()
        }
    }
}

fn network_ports(networks: &[NetworkResource], out: &mut BTreeSet<u16>) {
    for n in networks {
        for p in n.reserved_ports.iter().chain(&n.dynamic_ports) {
            if !p.ignore_collision {
                if let Ok(v) = u16::try_from(p.value) {
                    out.insert(v);
                }
            }
        }
    }
}

pub(crate) fn device_key(vendor: &str, device_type: &str, name: &str, id: &str) -> String {
    format!("{vendor}/{device_type}/{name}/{id}")
}

/// What a node is giving out now: sums and taken ports, cores and devices (counted, so two holders
/// of one port stay visible after one leaves).
#[derive(Debug, Clone, Default)]
pub(crate) struct Used {
    pub(crate) cpu: i64,
    pub(crate) memory_mb: i64,
    pub(crate) disk_mb: i64,
    pub(crate) cores: BTreeMap<u16, u32>,
    pub(crate) ports: BTreeMap<u16, u32>,
    pub(crate) devices: BTreeMap<String, u32>,
}

impl Used {
    pub(crate) fn add(&mut self, u: &Usage) {
        self.cpu += u.cpu;
        self.memory_mb += u.memory_mb;
        self.disk_mb += u.disk_mb;
        for c in &u.cores {
            *self.cores.entry(*c).or_default() += 1;
        }
        for p in &u.ports {
            *self.ports.entry(*p).or_default() += 1;
        }
        for d in &u.devices {
            *self.devices.entry(d.clone()).or_default() += 1;
        }
    }

    pub(crate) fn remove(&mut self, u: &Usage) {
        self.cpu -= u.cpu;
        self.memory_mb -= u.memory_mb;
        self.disk_mb -= u.disk_mb;
        for c in &u.cores {
            take_one(&mut self.cores, c);
        }
        for p in &u.ports {
            take_one(&mut self.ports, p);
        }
        for d in &u.devices {
            take_one(&mut self.devices, d);
        }
    }
}

fn take_one<K: Ord>(counts: &mut BTreeMap<K, u32>, key: &K) {
    if let Some(n) = counts.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
        }
    }
}

/// A requested device, `nvidia/gpu/Tesla T4`, `nvidia/gpu` or `gpu`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceAsk {
    pub(crate) vendor: Option<String>,
    pub(crate) device_type: String,
    pub(crate) name: Option<String>,
    pub(crate) count: u64,
    /// The request's `constraint` blocks as (attribute, operator, value), checked per device group
    /// (and, for those naming `${device.ids}`, per instance).
    pub(crate) constraints: Vec<(String, String, String)>,
    /// The request's `affinity` blocks as (attribute, operator, value, weight): they choose among
    /// the groups that fit, and score the node (`devices`).
    pub(crate) affinities: Vec<(String, String, String, i8)>,
}

impl DeviceAsk {
    pub(crate) fn of(d: &RequestedDevice) -> DeviceAsk {
        let parts: Vec<&str> = d.name.splitn(3, '/').collect();
        let (vendor, device_type, name) = match parts.as_slice() {
            [t] => (None, *t, None),
            [v, t] => (Some(*v), *t, None),
            [v, t, n, ..] => (Some(*v), *t, Some(*n)),
            [] => (None, "", None),
        };
        DeviceAsk {
            vendor: vendor.map(str::to_string),
            device_type: device_type.to_string(),
            name: name.map(str::to_string),
            count: d.count.unwrap_or(1),
            constraints: d
                .constraints
                .iter()
                .map(|c| (c.l_target.clone(), c.operand.clone(), c.r_target.clone()))
                .collect(),
            affinities: d
                .affinities
                .iter()
                .map(|a| {
                    (
                        a.l_target.clone(),
                        a.operand.clone(),
                        a.r_target.clone(),
                        a.weight.unwrap_or(50),
                    )
                })
                .collect(),
        }
    }

    /// Whether instance `id` of a matching group passes the `${device.ids}` constraints: the
    /// other side is a list the instance's ID is checked against (Nomad's
    /// `deviceIDMatchesConstraint`).
    pub(crate) fn instance_allowed(&self, id: &str, d: &NodeDeviceResource) -> bool {
        const IDS: &str = "${device.ids}";
        self.constraints.iter().all(|(l, op, r)| {
            let other = if l == IDS {
                r
            } else if r == IDS {
                l
            } else {
                return true;
            };
            crate::feasible::device::holds_for_id(other, op, id, d)
        })
    }

    /// Nomad's device choice score for group `d`: the matched affinity weights over the sum of
    /// their magnitudes, and the matched weights alone (what the node's `devices` score sums).
    pub(crate) fn affinity_score(&self, d: &NodeDeviceResource) -> (f64, f64) {
        if self.affinities.is_empty() {
            return (0.0, 0.0);
        }
        let mut total = 0.0;
        let mut matched = 0.0;
        for (l, op, r, w) in &self.affinities {
            total += f64::from(w.unsigned_abs());
            if crate::feasible::device::holds(l, op, r, d) {
                matched += f64::from(*w);
            }
        }
        (if total > 0.0 { matched / total } else { 0.0 }, matched)
    }

    /// The sum of the affinities' weight magnitudes (the node score's denominator).
    pub(crate) fn affinity_weight(&self) -> f64 {
        self.affinities
            .iter()
            .map(|a| f64::from(a.3.unsigned_abs()))
            .sum()
    }

    pub(crate) fn matches(&self, d: &NodeDeviceResource) -> bool {
        d.device_type == self.device_type
            && self.vendor.as_ref().is_none_or(|v| *v == d.vendor)
            && self.name.as_ref().is_none_or(|n| *n == d.name)
            && self
                .constraints
                .iter()
                .all(|(l, op, r)| crate::feasible::device::holds(l, op, r, d))
    }

    /// Healthy instances of matching device groups on the node, ignoring who holds them.
    pub(crate) fn healthy_on(&self, devices: &[NodeDeviceResource]) -> u64 {
        devices
            .iter()
            .filter(|d| self.matches(d))
            .map(|d| {
                d.instances
                    .iter()
                    .filter(|i| i.healthy && self.instance_allowed(&i.id, d))
                    .count() as u64
            })
            .max()
            .unwrap_or(0)
    }
}

/// What one task asks for.
#[derive(Debug, Clone)]
pub(crate) struct TaskAsk {
    pub(crate) name: String,
    pub(crate) cpu: i64,
    pub(crate) cores: usize,
    pub(crate) memory_mb: i64,
    pub(crate) memory_max_mb: i64,
    pub(crate) networks: Vec<NetworkResource>,
    pub(crate) devices: Vec<DeviceAsk>,
    pub(crate) lifecycle: Option<TaskLifecycle>,
}

/// What one allocation of a task group asks for.
#[derive(Debug, Clone)]
pub(crate) struct GroupAsk {
    pub(crate) tasks: Vec<TaskAsk>,
    pub(crate) disk_mb: i64,
    pub(crate) networks: Vec<NetworkResource>,
}

impl GroupAsk {
    pub(crate) fn of(tg: &TaskGroup) -> GroupAsk {
        let tasks = tg
            .tasks
            .iter()
            .map(|t| {
                let r = t.resources.clone().unwrap_or_default();
                let cores = usize::try_from(r.cores.unwrap_or(0)).unwrap_or(0);
                let cpu = if cores > 0 {
                    0
                } else {
                    r.cpu.unwrap_or(DEFAULT_CPU_MHZ)
                };
                TaskAsk {
                    name: t.name.clone(),
                    cpu: i64::from(cpu),
                    cores,
                    memory_mb: i64::from(r.memory_mb.unwrap_or(DEFAULT_MEMORY_MB)),
                    memory_max_mb: i64::from(r.memory_max_mb.unwrap_or(0)),
                    networks: r.networks.clone(),
                    devices: r.devices.iter().map(DeviceAsk::of).collect(),
                    lifecycle: t.lifecycle.clone(),
                }
            })
            .collect();
        GroupAsk {
            tasks,
            disk_mb: i64::from(
                tg.ephemeral_disk
                    .as_ref()
                    .and_then(|d| d.size_mb)
                    .unwrap_or(0),
            ),
            networks: tg.networks.clone(),
        }
    }

    /// CPU in MHz, counting reserved cores at `cpu_per_core` each.
    pub(crate) fn cpu_mhz(&self, cpu_per_core: i64) -> i64 {
        self.tasks
            .iter()
            .map(|t| t.cpu + t.cores as i64 * cpu_per_core)
            .sum()
    }

    pub(crate) fn memory_mb(&self) -> i64 {
        self.tasks.iter().map(|t| t.memory_mb).sum()
    }

    pub(crate) fn cores(&self) -> usize {
        self.tasks.iter().map(|t| t.cores).sum()
    }

    /// Whether an offer picks anything by ID (ports, addresses, devices, cores), beyond sums.
    pub(crate) fn picks_ids(&self) -> bool {
        !self.networks.is_empty()
            || self
                .tasks
                .iter()
                .any(|t| !t.networks.is_empty() || !t.devices.is_empty() || t.cores > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_lists() {
        let ports = parse_port_list("22, 80,8000-8002,bogus,9-x");
        assert_eq!(
            ports.into_iter().collect::<Vec<_>>(),
            [22, 80, 8000, 8001, 8002]
        );
    }

    #[test]
    fn device_names() {
        let ask = DeviceAsk::of(&RequestedDevice {
            name: "nvidia/gpu".into(),
            count: Some(2),
            ..RequestedDevice::default()
        });
        assert_eq!(ask.vendor.as_deref(), Some("nvidia"));
        assert_eq!(ask.device_type, "gpu");
        assert_eq!(ask.name, None);
        assert_eq!(ask.count, 2);
        let t4 = NodeDeviceResource {
            vendor: "nvidia".into(),
            device_type: "gpu".into(),
            name: "Tesla T4".into(),
            ..NodeDeviceResource::default()
        };
        assert!(ask.matches(&t4));
        assert!(DeviceAsk::of(&RequestedDevice {
            name: "gpu".into(),
            ..RequestedDevice::default()
        })
        .matches(&t4));
        assert!(!DeviceAsk::of(&RequestedDevice {
            name: "amd/gpu".into(),
            ..RequestedDevice::default()
        })
        .matches(&t4));
    }

    #[test]
    fn used_counts_shared_ports() {
        let u = Usage {
            cpu: 100,
            ports: vec![8080],
            ..Usage::default()
        };
        let mut used = Used::default();
        used.add(&u);
        used.add(&u);
        used.remove(&u);
        assert_eq!(used.cpu, 100);
        assert!(used.ports.contains_key(&8080));
        used.remove(&u);
        assert!(used.ports.is_empty());
    }
}
