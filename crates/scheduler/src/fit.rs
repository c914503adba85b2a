//! Whether a set of allocations fits on a node: the check the plan applier repeats against the
//! newest state before it commits a plan.

use crate::resources::{Capacity, Usage};
use model::alloc::Allocation;
use model::node::Node;
use std::collections::BTreeSet;

/// Why a set of allocations does not fit on a node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FitError {
    /// The exhausted dimension: `cpu`, `cores`, `memory`, `disk`, `network` or `devices`.
    pub dimension: String,
    /// What ran out, for people: `"network: port 8080 already in use"`.
    pub message: String,
}

impl FitError {
    fn new(dimension: &str, message: String) -> FitError {
        FitError {
            dimension: dimension.into(),
            message: format!("{dimension}: {message}"),
        }
    }
}

/// Whether `allocs` fit on `node` together: CPU, memory and disk within the node's resources less
/// its reserved resources; reserved cores, host ports and device instances each held at most once
/// and only where the node offers them. Terminal allocations hold nothing and are skipped.
pub fn allocs_fit(node: &Node, allocs: &[&Allocation]) -> Result<(), FitError> {
    let cap = Capacity::of(node);
    let usages: Vec<Usage> = allocs
        .iter()
        .filter(|a| !a.is_terminal())
        .map(|a| Usage::of_alloc(a))
        .collect();
    check_sums(&cap, &usages)?;
    check_cores(&cap, &usages)?;
    check_ports(&cap, &usages)?;
    check_devices(&usages)
}

fn check_sums(cap: &Capacity, usages: &[Usage]) -> Result<(), FitError> {
    let sum = |f: fn(&Usage) -> i64| usages.iter().map(f).sum::<i64>();
    let rows = [
        ("cpu", sum(|u| u.cpu), cap.cpu, "MHz"),
        ("memory", sum(|u| u.memory_mb), cap.memory_mb, "MB"),
        ("disk", sum(|u| u.disk_mb), cap.disk_mb, "MB"),
    ];
    for (dimension, needed, available, unit) in rows {
        if needed > available {
            return Err(FitError::new(
                dimension,
                format!("{needed} {unit} needed, {available} {unit} available"),
            ));
        }
    }
    Ok(())
}

fn check_cores(cap: &Capacity, usages: &[Usage]) -> Result<(), FitError> {
    let mut seen = BTreeSet::new();
    for core in usages.iter().flat_map(|u| &u.cores) {
        if !cap.cores.contains(core) {
            return Err(FitError::new(
                "cores",
                format!("core {core} is not reservable on the node"),
            ));
        }
        if !seen.insert(*core) {
            return Err(FitError::new("cores", format!("core {core} given twice")));
        }
    }
    Ok(())
}

fn check_ports(cap: &Capacity, usages: &[Usage]) -> Result<(), FitError> {
    let mut seen = BTreeSet::new();
    for port in usages.iter().flat_map(|u| &u.ports) {
        if cap.reserved_ports.contains(port) {
            return Err(FitError::new(
                "network",
                format!("port {port} is reserved on the node"),
            ));
        }
        if !seen.insert(*port) {
            return Err(FitError::new(
                "network",
                format!("port {port} already in use"),
            ));
        }
    }
    Ok(())
}

/// No device instance held twice (Nomad's `DeviceAccounter`). An instance that went unhealthy or
/// missing while held does not fail the node: that would refuse every plan for it, placements
/// of jobs without devices included; the scheduler only offers healthy instances.
fn check_devices(usages: &[Usage]) -> Result<(), FitError> {
    let mut seen = BTreeSet::new();
    for key in usages.iter().flat_map(|u| &u.devices) {
        if !seen.insert(key.as_str()) {
            return Err(FitError::new(
                "devices",
                format!("device {key} given twice"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::alloc::{
        AllocatedCpuResources, AllocatedMemoryResources, AllocatedPortMapping, AllocatedResources,
        AllocatedTaskResources,
    };
    use model::node::{NodeCpuResources, NodeMemoryResources, NodeResources};

    fn node() -> Node {
        Node {
            id: "n1".into(),
            node_resources: Some(NodeResources {
                cpu: NodeCpuResources {
                    cpu_shares: 1000,
                    ..NodeCpuResources::default()
                },
                memory: NodeMemoryResources { memory_mb: 1000 },
                ..NodeResources::default()
            }),
            ..Node::default()
        }
    }

    fn alloc(cpu: i64, memory_mb: i64, port: i32) -> Allocation {
        let task = AllocatedTaskResources {
            cpu: AllocatedCpuResources {
                cpu_shares: cpu,
                reserved_cores: Vec::new(),
            },
            memory: AllocatedMemoryResources {
                memory_mb,
                memory_max_mb: 0,
            },
            ..AllocatedTaskResources::default()
        };
        let mut resources = AllocatedResources {
            tasks: [("t".to_string(), task)].into(),
            ..AllocatedResources::default()
        };
        if port > 0 {
            resources.shared.ports.push(AllocatedPortMapping {
                label: "http".into(),
                value: port,
                ..AllocatedPortMapping::default()
            });
        }
        Allocation {
            allocated_resources: Some(resources),
            desired_status: "run".into(),
            client_status: "running".into(),
            ..Allocation::default()
        }
    }

    #[test]
    fn each_dimension_is_named() {
        let n = node();
        assert_eq!(
            allocs_fit(&n, &[&alloc(500, 500, 0), &alloc(500, 500, 0)]),
            Ok(())
        );
        let err = allocs_fit(&n, &[&alloc(600, 100, 0), &alloc(600, 100, 0)]).expect_err("cpu");
        assert_eq!(err.dimension, "cpu");
        assert_eq!(err.message, "cpu: 1200 MHz needed, 1000 MHz available");
        let err = allocs_fit(&n, &[&alloc(1, 900, 0), &alloc(1, 200, 0)]).expect_err("memory");
        assert_eq!(err.dimension, "memory");
        let err = allocs_fit(&n, &[&alloc(1, 1, 8080), &alloc(1, 1, 8080)]).expect_err("port");
        assert_eq!(err.dimension, "network");
        assert_eq!(err.to_string(), "network: port 8080 already in use");
    }

    #[test]
    fn a_held_device_gone_unhealthy_blocks_nothing_but_sharing_does() {
        let mut n = node();
        n.node_resources.as_mut().unwrap().devices = vec![model::node::NodeDeviceResource {
            vendor: "nvidia".into(),
            device_type: "gpu".into(),
            name: "t4".into(),
            instances: vec![model::node::NodeDevice {
                id: "g0".into(),
                healthy: false,
                ..Default::default()
            }],
            ..Default::default()
        }];
        let mut gpu = alloc(10, 10, 0);
        let task = gpu
            .allocated_resources
            .as_mut()
            .unwrap()
            .tasks
            .get_mut("t")
            .unwrap();
        task.devices = vec![model::alloc::AllocatedDeviceResource {
            vendor: "nvidia".into(),
            device_type: "gpu".into(),
            name: "t4".into(),
            device_ids: vec!["g0".into()],
        }];
        // The GPU went unhealthy after it was given: a plan for another job still fits.
        assert_eq!(allocs_fit(&n, &[&gpu, &alloc(10, 10, 0)]), Ok(()));
        let err = allocs_fit(&n, &[&gpu, &gpu.clone()]).expect_err("shared");
        assert_eq!(err.dimension, "devices");
        assert!(
            err.message.contains("nvidia/gpu/t4/g0 given twice"),
            "{err}"
        );
    }

    #[test]
    fn terminal_allocations_hold_nothing() {
        let n = node();
        let mut done = alloc(900, 900, 8080);
        done.client_status = "complete".into();
        assert_eq!(allocs_fit(&n, &[&done, &alloc(900, 900, 8080)]), Ok(()));
    }

    #[test]
    fn reserved_ports_and_resources_count() {
        let mut n = node();
        n.reserved_resources = Some(model::node::NodeReservedResources {
            memory: NodeMemoryResources { memory_mb: 200 },
            networks: model::node::NodeReservedNetworkResources {
                reserved_host_ports: "8000-8100".into(),
            },
            ..Default::default()
        });
        let err = allocs_fit(&n, &[&alloc(1, 900, 0)]).expect_err("reserved memory");
        assert_eq!(err.dimension, "memory");
        let err = allocs_fit(&n, &[&alloc(1, 1, 8080)]).expect_err("reserved port");
        assert_eq!(
            err.to_string(),
            "network: port 8080 is reserved on the node"
        );
    }
}
