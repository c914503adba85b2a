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
use constraint::{glob_match, Rule};
use model::constraint::{Constraint, Operand};
use model::group::{TaskGroup, VolumeRequest};
use model::job::Job;
use model::node::{Node, NodeStatus, SchedulingEligibility, NODE_POOL_ALL};

/// `ConstraintFiltered` key of a node lacking a task's driver (Nomad's `FilterConstraintDrivers`).
pub(crate) const FILTER_DRIVERS: &str = "missing drivers";
/// … lacking a host volume the group mounts (`FilterConstraintHostVolumes`).
pub(crate) const FILTER_HOST_VOLUMES: &str = "missing compatible host volumes";
/// … lacking a device the group asks for (`FilterConstraintDevices`).
pub(crate) const FILTER_DEVICES: &str = "missing devices";

/// Whether the node is ready for new work: status ready, eligible, not draining.
pub(crate) fn is_ready(node: &Node) -> bool {
    node.status_kind() == Some(NodeStatus::Ready)
        && node.drain_strategy.is_none()
        && node.scheduling_eligibility != SchedulingEligibility::Ineligible.as_str()
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
    csi_volumes: Vec<VolumeRequest>,
    devices: Vec<DeviceAsk>,
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
        let escaped = job_rules
            .iter()
            .chain(&group_rules)
            .any(Rule::escapes_class);
        let (host, csi): (Vec<_>, Vec<_>) =
            tg.volumes.values().partition(|v| v.volume_type != "csi");
        GroupChecks {
            job_rules,
            drivers,
            group_rules,
            host_volumes: host
                .into_iter()
                .map(|v| (v.source.clone(), v.read_only))
                .collect(),
            csi_volumes: csi.into_iter().cloned().collect(),
            devices: tg
                .tasks
                .iter()
                .filter_map(|t| t.resources.as_ref())
                .flat_map(|r| r.devices.iter().map(DeviceAsk::of))
                .collect(),
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
        if !self.has_host_volumes(node) {
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
        csi_volumes_feasible(node, &self.csi_volumes)
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

/// The hook for CSI volume checks (claims, access modes, plugin health and topology on the node).
/// Issue #8 (CSI volumes) fills it in, reading volumes through a `StateView` method it adds; until
/// then every node is feasible for every CSI volume request.
pub(crate) fn csi_volumes_feasible(node: &Node, volumes: &[VolumeRequest]) -> Result<(), String> {
    let _ = (node, volumes);
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
