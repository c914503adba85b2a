//! Feasibility: which nodes may run a task group at all, before resources are counted.
//!
//! [`in_scope`] is the first cut (ready, eligible, not draining, in the job's datacenters and node
//! pool); nodes outside it are not even evaluated. [`GroupChecks`] are the per-node checks whose
//! answer depends only on the node (constraints, drivers, host volumes, devices, CSI volumes), so a
//! node is checked once per group per evaluation. `distinct_hosts` and `distinct_property` depend
//! on other placements and live in [`distinct`].

pub(crate) mod constraint;
pub(crate) mod device;
pub(crate) mod distinct;
pub(crate) mod version;

use crate::resources::DeviceAsk;
use crate::view::StateView;
use constraint::{glob_match, Rule};
use model::constraint::{Constraint, Operand};
use model::csi::CSIVolume;
use model::group::{TaskGroup, VolumeRequest};
use model::job::Job;
use model::node::{Node, NodeStatus, SchedulingEligibility, NODE_POOL_ALL};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// `ConstraintFiltered` key of a node lacking a task's driver (Nomad's `FilterConstraintDrivers`).
pub(crate) const FILTER_DRIVERS: &str = "missing drivers";
/// … lacking a host volume the group mounts (`FilterConstraintHostVolumes`).
pub(crate) const FILTER_HOST_VOLUMES: &str = "missing compatible host volumes";
/// … lacking a device the group asks for (`FilterConstraintDevices`).
pub(crate) const FILTER_DEVICES: &str = "missing devices";
pub(crate) const FILTER_NETWORK: &str = "missing network";

/// Whether the node is ready for new work: status ready, eligible, not draining.
pub(crate) fn is_ready(node: &Node) -> bool {
    node.status == NodeStatus::Ready
        && node.drain_strategy.is_none()
        && node.scheduling_eligibility != SchedulingEligibility::Ineligible
}

/// Whether the node is in one of the datacenters (`*` globs allowed).
pub(crate) fn in_datacenters(datacenters: &[String], node: &Node) -> bool {
    datacenters
        .iter()
        .any(|dc| glob_match(dc, &node.datacenter))
}

/// Whether the node is in the job's pool (`all` takes every pool).
pub(crate) fn in_pool(job: &Job, node: &Node) -> bool {
    let pool = job
        .node_pool
        .as_deref()
        .unwrap_or(model::job::DEFAULT_NODE_POOL);
    let node_pool = if node.node_pool.is_empty() {
        model::job::DEFAULT_NODE_POOL
    } else {
        node.node_pool.as_str()
    };
    pool == NODE_POOL_ALL || pool == node_pool
}

/// Whether the job may place on the node at all: ready, in its datacenters and pool.
pub(crate) fn in_scope(job: &Job, node: &Node) -> bool {
    is_ready(node) && in_pool(job, node) && in_datacenters(&job.datacenters, node)
}

/// Whether a constraint is a node rule (not `distinct_*`).
pub(crate) fn is_node_rule(c: &Constraint) -> bool {
    !matches!(
        Operand::parse(&c.operand),
        Some(Operand::DistinctHosts | Operand::DistinctProperty)
    )
}

/// The node-only checks of one task group, compiled once per evaluation.
#[derive(Debug)]
pub(crate) struct GroupChecks {
    job_rules: Vec<Rule>,
    drivers: Vec<String>,
    group_rules: Vec<Rule>,
    host_volumes: Vec<(String, bool)>,
    /// The sources of the host volumes mounted with `sticky = true` (dynamic ones only).
    sticky: Vec<String>,
    /// The group's claims not met by a live or just-placed allocation, as (volume name, volume
    /// ID): while one is unmet for a source, only the node holding that volume will do.
    unmet_claims: Vec<(String, String)>,
    csi_volumes: Vec<VolumeRequest>,
    /// The group's CSI volumes as the stack resolved them; `None` skips the CSI checks (the
    /// reconciler's in-place check: a running allocation keeps its claims).
    csi: Option<Vec<CsiAsk>>,
    /// Per plugin the group uses: node ID → volumes of that plugin claimed there now.
    csi_used: HashMap<String, HashMap<String, i64>>,
    devices: Vec<DeviceAsk>,
    /// The group's network mode (`host` when unset).
    network_mode: String,
    /// `(port label, host network)` of the ports that ask for a named host network.
    host_networks: Vec<(String, String)>,
    /// Some rule looks at a value unique to a node (`EscapedComputedClass`).
    pub(crate) escaped: bool,
}

impl GroupChecks {
    pub(crate) fn new(job: &Job, tg: &TaskGroup) -> GroupChecks {
        let rules = |cs: &[Constraint]| -> Vec<Rule> {
            cs.iter()
                .filter(|c| is_node_rule(c))
                .map(Rule::compile)
                .collect()
        };
        let job_rules = rules(&job.constraints);
        let mut group_rules = rules(&tg.constraints);
        let mut drivers: Vec<String> = Vec::new();
        for t in &tg.tasks {
            group_rules.extend(rules(&t.constraints));
            if !drivers.contains(&t.driver) {
                drivers.push(t.driver.clone());
            }
        }
        let sticky: Vec<String> = tg
            .volumes
            .values()
            .filter(|v| v.volume_type != "csi" && v.sticky)
            .map(|v| v.source.clone())
            .collect();
        // Sticky volumes are told apart by ID, which no computed class holds.
        let escaped = !sticky.is_empty()
            || job_rules
                .iter()
                .chain(&group_rules)
                .any(Rule::escapes_class);
        let (host, csi): (Vec<_>, Vec<_>) =
            tg.volumes.values().partition(|v| v.volume_type != "csi");
        let network_mode = tg
            .networks
            .first()
            .map(|n| n.mode.clone())
            .filter(|m| !m.is_empty())
            .unwrap_or_else(|| "host".into());
        let host_networks = tg
            .networks
            .iter()
            .flat_map(|n| n.reserved_ports.iter().chain(&n.dynamic_ports))
            .filter(|p| !p.host_network.is_empty() && p.host_network != "default")
            .map(|p| (p.label.clone(), p.host_network.clone()))
            .collect();
        GroupChecks {
            job_rules,
            drivers,
            group_rules,
            host_volumes: host
                .into_iter()
                .map(|v| (v.source.clone(), v.read_only))
                .collect(),
            sticky,
            unmet_claims: Vec::new(),
            csi_volumes: csi.into_iter().cloned().collect(),
            csi: None,
            csi_used: HashMap::new(),
            devices: tg
                .tasks
                .iter()
                .filter_map(|t| t.resources.as_ref())
                .flat_map(|r| r.devices.iter().map(DeviceAsk::of))
                .collect(),
            network_mode,
            host_networks,
            escaped,
        }
    }

    /// `Err` is the `ConstraintFiltered` key of the first check the node fails, in Nomad's order:
    /// job constraints, drivers, group and task constraints, host volumes, devices, CSI volumes.
    pub(crate) fn check(&self, node: &Node) -> Result<(), String> {
        if let Some(r) = self.job_rules.iter().find(|r| !r.holds(node)) {
            return Err(r.text.clone());
        }
        if !self.drivers.iter().all(|d| has_driver(node, d)) {
            return Err(FILTER_DRIVERS.into());
        }
        if let Some(r) = self.group_rules.iter().find(|r| !r.holds(node)) {
            return Err(r.text.clone());
        }
        if !self.has_host_volumes(node) || !self.sticky_feasible(node) {
            return Err(FILTER_HOST_VOLUMES.into());
        }
        let devices = node
            .node_resources
            .as_ref()
            .map(|r| r.devices.as_slice())
            .unwrap_or_default();
        if !self
            .devices
            .iter()
            .all(|d| d.healthy_on(devices) >= d.count)
        {
            return Err(FILTER_DEVICES.into());
        }
        self.network_feasible(node)?;
        match &self.csi {
            Some(asks) => {
                csi_volumes_feasible(node, asks)?;
                self.csi_volume_limits(node, asks)
            }
            None => Ok(()),
        }
    }

    /// Nomad's per-node volume limit: the volumes of each plugin already claimed on the node plus
    /// the group's own (per_alloc ones count one each) must fit the node plugin's `MaxVolumes`
    /// (0: no limit).
    fn csi_volume_limits(&self, node: &Node, asks: &[CsiAsk]) -> Result<(), String> {
        let mut wanted: HashMap<&str, i64> = HashMap::new();
        for ask in asks {
            if let Some(v) = &ask.volume {
                let already = v
                    .read_claims
                    .values()
                    .chain(v.write_claims.values())
                    .any(|c| c.node_id == node.id);
                if ask.per_alloc || !already {
                    *wanted.entry(v.plugin_id.as_str()).or_default() += 1;
                }
            }
        }
        for (plugin, want) in wanted {
            let max = node
                .csi_node_plugins
                .get(plugin)
                .and_then(|p| p.node_info.as_ref())
                .map_or(0, |n| n.max_volumes);
            if max <= 0 {
                continue;
            }
            let used = self
                .csi_used
                .get(plugin)
                .and_then(|m| m.get(&node.id))
                .copied()
                .unwrap_or(0);
            if used + want > max {
                return Err(format!(
                    "CSI plugin {plugin} has the maximum number of volumes on client {}",
                    node.id
                ));
            }
        }
        Ok(())
    }

    /// Looks up the group's CSI volumes, so [`GroupChecks::check`] also checks them.
    pub(crate) fn resolve_csi(&mut self, view: &dyn StateView, namespace: &str, job: &Job) {
        if self.csi_volumes.is_empty() {
            return;
        }
        let mut plugins: HashSet<String> = HashSet::new();
        let own: HashSet<String> = view
            .allocs_by_job(namespace, &job.id)
            .iter()
            .map(|a| a.id.clone())
            .collect();
        self.csi = Some(
            self.csi_volumes
                .iter()
                .map(|req| {
                    // per_alloc: every index has its own volume; the node checks use the first.
                    let id = if req.per_alloc {
                        format!("{}[0]", req.source)
                    } else {
                        req.source.clone()
                    };
                    let volume = view.csi_volume(namespace, &id);
                    if let Some(v) = &volume {
                        plugins.insert(v.plugin_id.clone());
                    }
                    let write_taken_by = volume.as_ref().and_then(|v| {
                        v.write_claims
                            .keys()
                            .find(|alloc| !own.contains(*alloc))
                            .cloned()
                    });
                    CsiAsk {
                        id,
                        per_alloc: req.per_alloc,
                        read_only: req.read_only,
                        volume,
                        write_taken_by,
                    }
                })
                .collect(),
        );
        for plugin in plugins {
            let mut per_node: HashMap<String, i64> = HashMap::new();
            for v in view.csi_volumes_of_plugin(&plugin) {
                let nodes: HashSet<&str> = v
                    .read_claims
                    .values()
                    .chain(v.write_claims.values())
                    .map(|c| c.node_id.as_str())
                    .collect();
                for n in nodes {
                    *per_node.entry(n.to_string()).or_default() += 1;
                }
            }
            self.csi_used.insert(plugin, per_node);
        }
    }

    /// Nomad's `NetworkChecker`: a bridge or CNI group needs a node that fingerprinted that mode
    /// (`host` and `none` need nothing), and a port on a named host network needs a node with
    /// an address of that name.
    fn network_feasible(&self, node: &Node) -> Result<(), String> {
        let mode = self.network_mode.as_str();
        if mode != "host" && mode != "none" {
            let has = node
                .node_resources
                .as_ref()
                .is_some_and(|r| r.networks.iter().any(|n| n.mode == mode));
            if !has {
                return Err(FILTER_NETWORK.into());
            }
        }
        if self.host_networks.is_empty() {
            return Ok(());
        }
        let names = crate::resources::host_network_addresses(node);
        match self
            .host_networks
            .iter()
            .find(|(_, name)| !names.contains_key(name))
        {
            Some((label, name)) => Err(format!("missing host network {name:?} for port {label:?}")),
            None => Ok(()),
        }
    }

    /// Whether the group mounts a host volume with `sticky = true`.
    pub(crate) fn has_sticky(&self) -> bool {
        !self.sticky.is_empty()
    }

    /// Sets the unmet claims; `true` when they changed (cached node checks are stale then).
    pub(crate) fn set_unmet_claims(&mut self, mut unmet: Vec<(String, String)>) -> bool {
        unmet.sort();
        if unmet == self.unmet_claims {
            return false;
        }
        self.unmet_claims = unmet;
        true
    }

    /// Nomad's sticky rule: each sticky source must be a dynamic host volume on the node (a
    /// static one cannot be told apart from another node's), and while the group has an unmet
    /// claim on a volume of that name, it must be the claimed volume.
    fn sticky_feasible(&self, node: &Node) -> bool {
        self.sticky.iter().all(|source| {
            let Some(hv) = node.host_volumes.get(source).filter(|hv| !hv.id.is_empty()) else {
                return false;
            };
            let mut wanted = self
                .unmet_claims
                .iter()
                .filter(|(name, _)| name == source)
                .peekable();
            wanted.peek().is_none() || wanted.any(|(_, id)| *id == hv.id)
        })
    }

    fn has_host_volumes(&self, node: &Node) -> bool {
        self.host_volumes.iter().all(|(source, read_only)| {
            node.host_volumes
                .get(source)
                .is_some_and(|v| *read_only || !v.read_only)
        })
    }
}

/// The driver is detected and healthy (or, for clients that predate driver info, its
/// `driver.<name>` attribute is true).
pub(crate) fn has_driver(node: &Node, driver: &str) -> bool {
    if let Some(info) = node.drivers.get(driver) {
        return info.detected && info.healthy;
    }
    node.attributes
        .get(&format!("driver.{driver}"))
        .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "TRUE" | "True" | "t" | "T"))
}

/// One CSI volume of a group, looked up once per evaluation.
#[derive(Debug, Clone)]
pub(crate) struct CsiAsk {
    pub id: String,
    pub per_alloc: bool,
    pub read_only: bool,
    pub volume: Option<Arc<CSIVolume>>,
    /// A write claim held by an allocation of another job (a `per_alloc` request's own index
    /// is checked when it claims).
    pub write_taken_by: Option<String>,
}

/// Nomad's `CSIVolumeChecker` (minus the per-node volume limit): the volume exists, the node runs
/// a healthy node plugin for it, the node is in one of the volume's topologies, and a claim of the
/// kind asked for can be had. `Err` is Nomad's filter text.
pub(crate) fn csi_volumes_feasible(node: &Node, asks: &[CsiAsk]) -> Result<(), String> {
    for ask in asks {
        let Some(v) = &ask.volume else {
            return Err(format!("missing CSI Volume {}", ask.id));
        };
        let Some(plugin) = node.csi_node_plugins.get(&v.plugin_id) else {
            return Err(format!(
                "CSI plugin {} is missing from client {}",
                v.plugin_id, node.id
            ));
        };
        if !plugin.healthy {
            return Err(format!(
                "CSI plugin {} is unhealthy on client {}",
                v.plugin_id, node.id
            ));
        }
        if !v.topologies.is_empty() {
            let here = plugin
                .node_info
                .as_ref()
                .and_then(|n| n.accessible_topology.as_ref());
            if !here.is_some_and(|t| v.topologies.iter().any(|w| w.segments == t.segments)) {
                return Err("did not meet topology requirement".into());
            }
        }
        if ask.per_alloc {
            continue;
        }
        if ask.read_only {
            if !v.schedulable {
                return Err(format!(
                    "CSI volume {} is unschedulable or has exhausted its available reader claims",
                    v.id
                ));
            }
        } else {
            let writable = model::csi::is_writer_access_mode(&v.access_mode)
                || (v.access_mode.is_empty()
                    && v.requested_capabilities
                        .iter()
                        .any(|c| model::csi::is_writer_access_mode(&c.access_mode)));
            if !v.schedulable || !writable {
                return Err(format!(
                    "CSI volume {} is unschedulable or is read-only",
                    v.id
                ));
            }
            let single = matches!(
                v.access_mode.as_str(),
                model::csi::ACCESS_MODE_SINGLE_NODE_WRITER
                    | model::csi::ACCESS_MODE_MULTI_NODE_SINGLE_WRITER
            );
            if single && ask.write_taken_by.is_some() {
                return Err(format!(
                    "CSI volume {} has exhausted its available writer claims",
                    v.id
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::node::{ClientHostVolumeConfig, DriverInfo};
    use model::task::Task;

    fn node() -> Node {
        let mut n = Node {
            id: "n1".into(),
            datacenter: "us-east-1".into(),
            status: "ready".into(),
            ..Node::default()
        };
        n.drivers.insert(
            "docker".into(),
            DriverInfo {
                detected: true,
                healthy: true,
                ..DriverInfo::default()
            },
        );
        n.drivers.insert(
            "exec".into(),
            DriverInfo {
                detected: true,
                healthy: false,
                ..DriverInfo::default()
            },
        );
        n.attributes.insert("driver.raw_exec".into(), "1".into());
        n.host_volumes.insert(
            "certs".into(),
            ClientHostVolumeConfig {
                name: "certs".into(),
                path: "/etc/certs".into(),
                read_only: true,
                id: String::new(),
            },
        );
        n.canonicalize();
        n
    }

    fn group(driver: &str) -> TaskGroup {
        TaskGroup {
            name: "g".into(),
            tasks: vec![Task {
                name: "t".into(),
                driver: driver.into(),
                ..Task::default()
            }],
            ..TaskGroup::default()
        }
    }

    #[test]
    fn drivers_must_be_detected_and_healthy() {
        let n = node();
        let job = Job::default();
        for (driver, want) in [
            ("docker", Ok(())),
            ("raw_exec", Ok(())),
            ("exec", Err(FILTER_DRIVERS.to_string())),
            ("qemu", Err(FILTER_DRIVERS.to_string())),
        ] {
            assert_eq!(GroupChecks::new(&job, &group(driver)).check(&n), want);
        }
    }

    #[test]
    fn bridge_groups_need_a_bridge_node_and_ports_their_host_network() {
        use model::node::{NodeNetworkAddress, NodeNetworkResource, NodeResources};
        use model::resources::{NetworkResource, Port};
        let job = Job::default();
        let mut g = group("docker");
        g.networks = vec![NetworkResource {
            mode: "bridge".into(),
            dynamic_ports: vec![Port {
                label: "http".into(),
                host_network: "public".into(),
                ..Port::default()
            }],
            ..NetworkResource::default()
        }];
        let mut n = node();
        let checks = GroupChecks::new(&job, &g);
        assert_eq!(checks.check(&n).unwrap_err(), FILTER_NETWORK);
        n.node_resources = Some(NodeResources {
            networks: vec![NetworkResource {
                mode: "bridge".into(),
                ..NetworkResource::default()
            }],
            ..NodeResources::default()
        });
        assert_eq!(
            checks.check(&n).unwrap_err(),
            "missing host network \"public\" for port \"http\""
        );
        if let Some(r) = n.node_resources.as_mut() {
            r.node_networks.push(NodeNetworkResource {
                addresses: vec![NodeNetworkAddress {
                    alias: "public".into(),
                    address: "192.0.2.7".into(),
                    ..NodeNetworkAddress::default()
                }],
                ..NodeNetworkResource::default()
            });
        }
        assert_eq!(checks.check(&n), Ok(()));
        // host and none need nothing fingerprinted.
        g.networks[0].mode = "none".into();
        g.networks[0].dynamic_ports.clear();
        assert_eq!(GroupChecks::new(&job, &g).check(&node()), Ok(()));
    }

    #[test]
    fn host_volumes_must_exist_and_allow_writes_when_asked() {
        let n = node();
        let job = Job::default();
        let mut g = group("docker");
        let mut v = VolumeRequest {
            name: "certs".into(),
            volume_type: "host".into(),
            source: "certs".into(),
            read_only: true,
            ..VolumeRequest::default()
        };
        g.volumes.insert("certs".into(), v.clone());
        assert_eq!(GroupChecks::new(&job, &g).check(&n), Ok(()));
        v.read_only = false;
        g.volumes.insert("certs".into(), v.clone());
        assert_eq!(
            GroupChecks::new(&job, &g).check(&n),
            Err(FILTER_HOST_VOLUMES.into())
        );
        v.volume_type = "csi".into();
        g.volumes.insert("certs".into(), v);
        assert_eq!(GroupChecks::new(&job, &g).check(&n), Ok(()));
    }

    fn csi_volume(access: &str) -> model::csi::CSIVolume {
        model::csi::CSIVolume {
            id: "db".into(),
            namespace: "default".into(),
            plugin_id: "ebs".into(),
            schedulable: true,
            requested_capabilities: vec![model::csi::CSIVolumeCapability {
                access_mode: access.into(),
                attachment_mode: "file-system".into(),
            }],
            ..model::csi::CSIVolume::default()
        }
    }

    fn csi_node(healthy: bool, zone: &str) -> Node {
        let mut n = node();
        n.csi_node_plugins.insert(
            "ebs".into(),
            model::csi::CSIInfo {
                healthy,
                node_info: Some(model::csi::CSINodeInfo {
                    id: "i-1".into(),
                    accessible_topology: Some(model::csi::CSITopology {
                        segments: [("zone".to_string(), zone.to_string())].into(),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        n
    }

    fn ask(v: Option<model::csi::CSIVolume>, read_only: bool, taken: Option<&str>) -> CsiAsk {
        CsiAsk {
            id: "db".into(),
            per_alloc: false,
            read_only,
            volume: v.map(Arc::new),
            write_taken_by: taken.map(String::from),
        }
    }

    #[test]
    fn csi_volumes_need_the_volume_a_healthy_node_plugin_topology_and_a_free_claim() {
        let ok = csi_node(true, "a");
        let v = csi_volume("single-node-writer");
        assert_eq!(
            csi_volumes_feasible(&ok, &[ask(Some(v.clone()), false, None)]),
            Ok(())
        );
        assert_eq!(
            csi_volumes_feasible(&ok, &[ask(None, false, None)]),
            Err("missing CSI Volume db".into())
        );
        assert_eq!(
            csi_volumes_feasible(&node(), &[ask(Some(v.clone()), false, None)]),
            Err("CSI plugin ebs is missing from client n1".into())
        );
        assert_eq!(
            csi_volumes_feasible(&csi_node(false, "a"), &[ask(Some(v.clone()), false, None)]),
            Err("CSI plugin ebs is unhealthy on client n1".into())
        );
        let mut zoned = v.clone();
        zoned.topologies = vec![model::csi::CSITopology {
            segments: [("zone".to_string(), "b".to_string())].into(),
        }];
        assert_eq!(
            csi_volumes_feasible(&ok, &[ask(Some(zoned), false, None)]),
            Err("did not meet topology requirement".into())
        );
        assert_eq!(
            csi_volumes_feasible(&csi_node(true, "b"), &[ask(Some(v.clone()), false, None)]),
            Ok(())
        );
        let mut claimed = v.clone();
        claimed.access_mode = "single-node-writer".into();
        assert_eq!(
            csi_volumes_feasible(&ok, &[ask(Some(claimed.clone()), false, Some("other"))]),
            Err("CSI volume db has exhausted its available writer claims".into())
        );
        // Readers are checked when they claim.
        assert_eq!(
            csi_volumes_feasible(&ok, &[ask(Some(claimed), true, Some("other"))]),
            Ok(())
        );
        let ro = csi_volume("multi-node-reader-only");
        assert_eq!(
            csi_volumes_feasible(&ok, &[ask(Some(ro), false, None)]),
            Err("CSI volume db is unschedulable or is read-only".into())
        );
        let mut down = v;
        down.schedulable = false;
        assert_eq!(
            csi_volumes_feasible(&ok, &[ask(Some(down), true, None)]),
            Err(
                "CSI volume db is unschedulable or has exhausted its available reader claims"
                    .into()
            )
        );
    }

    #[test]
    fn job_constraints_come_first_and_print_as_nomad() {
        let n = node();
        let job = Job {
            constraints: vec![Constraint::new("${attr.kernel.name}", "=", "linux")],
            ..Job::default()
        };
        assert_eq!(
            GroupChecks::new(&job, &group("qemu")).check(&n),
            Err("${attr.kernel.name} = linux".into())
        );
    }

    #[test]
    fn scope_is_ready_datacenter_and_pool() {
        let mut n = node();
        let mut job = Job {
            datacenters: vec!["us-*".into()],
            ..Job::default()
        };
        assert!(in_scope(&job, &n));
        job.node_pool = Some("gpu".into());
        assert!(!in_scope(&job, &n));
        job.node_pool = Some("all".into());
        assert!(in_scope(&job, &n));
        n.scheduling_eligibility = "ineligible".into();
        assert!(!in_scope(&job, &n));
    }
}
