//! The client's periodic gauges, as Nomad's client publishes them every `collection_interval`:
//! the node's allocation counts and allocated/unallocated resources and, with
//! `publish_node_metrics`, the host's memory, CPU and disks (`nomad.client.host.*`); with
//! `publish_allocation_metrics`, each running task's memory and CPU (`nomad.client.allocs.*`).
//! Read-only: the runners' statuses, the drivers' stats and `/proc`; never waits on a server.

use crate::alloc_sync::Runners;
use crate::context::SharedNode;
use crate::HostStats;
use drivers::DriverError;
use model::ClientStatus;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The agent's `telemetry` settings the client acts on.
#[derive(Debug, Clone)]
pub struct MetricsSettings {
    /// `collection_interval` (1 s).
    pub interval: Duration,
    /// `publish_node_metrics`.
    pub node: bool,
    /// `publish_allocation_metrics`.
    pub allocations: bool,
}

pub(crate) struct Collector {
    pub runners: Arc<Runners>,
    pub node: SharedNode,
    pub data_dir: PathBuf,
    pub settings: MetricsSettings,
    pub shutdown: watch::Receiver<bool>,
}

type Labels = Vec<(&'static str, String)>;

impl Collector {
    pub(crate) async fn run(mut self) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.settings.interval) => {}
                _ = self.shutdown.changed() => return,
            }
            if *self.shutdown.borrow() {
                return;
            }
            let node = self.node.get();
            let labels: Labels = vec![
                ("node_id", node.id.clone()),
                ("datacenter", node.datacenter.clone()),
                ("node_class", node.node_class.clone()),
                (
                    "node_pool",
                    if node.node_pool.is_empty() {
                        "default".to_string()
                    } else {
                        node.node_pool.clone()
                    },
                ),
            ];
            self.allocations(&node, &labels);
            if self.settings.node {
                let data_dir = self.data_dir.clone();
                let mhz = node
                    .node_resources
                    .as_ref()
                    .map_or(0, |r| u64::try_from(r.cpu.cpu_shares).unwrap_or(0));
                if let Ok(host) =
                    tokio::task::spawn_blocking(move || HostStats::read(&data_dir, mhz)).await
                {
                    publish_host(&host, &labels);
                }
            }
            if self.settings.allocations {
                self.task_usage().await;
            }
        }
    }

    /// `nomad.client.allocations.*` and `nomad.client.(un)allocated.*`.
    fn allocations(&self, node: &model::node::Node, labels: &Labels) {
        let (mut running, mut pending, mut terminal) = (0u64, 0u64, 0u64);
        let (mut cpu, mut memory, mut disk) = (0i64, 0i64, 0i64);
        for (alloc, status) in self.runners.labelled() {
            match status.client_status {
                ClientStatus::Running => running += 1,
                ClientStatus::Pending => pending += 1,
                _ => terminal += 1,
            }
            if matches!(
                status.client_status,
                ClientStatus::Running | ClientStatus::Pending
            ) {
                for (task_cpu, task_mem) in alloc.tasks.values() {
                    cpu += task_cpu;
                    memory += task_mem;
                }
                disk += alloc.disk_mb;
            }
        }
        for (name, value) in [
            ("running", running),
            ("pending", pending),
            ("terminal", terminal),
        ] {
            metrics::gauge!(format!("nomad.client.allocations.{name}"), labels).set(value as f64);
        }
        let total = node.node_resources.as_ref();
        let reserved = node.reserved_resources.as_ref();
        let free = |total: i64, reserved: i64, used: i64| (total - reserved - used).max(0) as f64;
        let (t_cpu, t_mem, t_disk) = total.map_or((0, 0, 0), |r| {
            (r.cpu.cpu_shares, r.memory.memory_mb, r.disk.disk_mb)
        });
        let (r_cpu, r_mem, r_disk) = reserved.map_or((0, 0, 0), |r| {
            (r.cpu.cpu_shares, r.memory.memory_mb, r.disk.disk_mb)
        });
        metrics::gauge!("nomad.client.allocated.cpu", labels).set(cpu as f64);
        metrics::gauge!("nomad.client.allocated.memory", labels).set(memory as f64);
        metrics::gauge!("nomad.client.allocated.disk", labels).set(disk as f64);
        metrics::gauge!("nomad.client.unallocated.cpu", labels).set(free(t_cpu, r_cpu, cpu));
        metrics::gauge!("nomad.client.unallocated.memory", labels).set(free(t_mem, r_mem, memory));
        metrics::gauge!("nomad.client.unallocated.disk", labels).set(free(t_disk, r_disk, disk));
    }

    /// `nomad.client.allocs.memory.*` and `nomad.client.allocs.cpu.*` of each running task.
    async fn task_usage(&self) {
        for id in self.runners.ids() {
            let (Some(tasks), Some(alloc)) = (self.runners.tasks(&id), self.runners.labels(&id))
            else {
                continue;
            };
            for (task, access) in tasks {
                let Some(handle) = access.handle else {
                    continue;
                };
                let Some(driver) = self.runners.driver(&handle.driver) else {
                    continue;
                };
                let stats = match driver.stats(&handle.task_id).await {
                    Ok(stats) => stats,
                    Err(DriverError::NotRunning(_) | DriverError::TaskNotFound(_)) => continue,
                    Err(e) => {
                        tracing::debug!(alloc_id = %id, %task, error = %e, "no task stats for metrics");
                        continue;
                    }
                };
                let labels: Labels = vec![
                    ("alloc_id", id.clone()),
                    ("job", alloc.job.clone()),
                    ("task_group", alloc.task_group.clone()),
                    ("task", task.clone()),
                    ("namespace", alloc.namespace.clone()),
                ];
                let (cpu_mhz, memory_mb) = alloc.tasks.get(&task).copied().unwrap_or_default();
                for (name, value) in [
                    ("memory.rss", stats.memory_rss_bytes as f64),
                    ("memory.swap", stats.memory_swap_bytes as f64),
                    ("memory.usage", stats.memory_rss_bytes as f64),
                    ("memory.allocated", (memory_mb * 1024 * 1024) as f64),
                    ("cpu.total_percent", stats.cpu_percent),
                    ("cpu.user", stats.cpu_user_seconds),
                    ("cpu.system", stats.cpu_system_seconds),
                    ("cpu.allocated", cpu_mhz as f64),
                ] {
                    metrics::gauge!(format!("nomad.client.allocs.{name}"), &labels).set(value);
                }
            }
        }
    }
}

/// `nomad.client.host.*` and `nomad.client.uptime`.
fn publish_host(host: &HostStats, labels: &Labels) {
    let m = &host.memory;
    for (name, value) in [
        ("total", m.total),
        ("available", m.available),
        ("used", m.used),
        ("free", m.free),
    ] {
        metrics::gauge!(format!("nomad.client.host.memory.{name}"), labels).set(value as f64);
    }
    for cpu in &host.cpus {
        let mut l = labels.clone();
        l.push(("cpu", cpu.cpu.clone()));
        for (name, value) in [
            ("total", cpu.total),
            ("user", cpu.user),
            ("system", cpu.system),
            ("idle", cpu.idle),
        ] {
            metrics::gauge!(format!("nomad.client.host.cpu.{name}"), &l).set(value);
        }
    }
    for disk in &host.disks {
        let mut l = labels.clone();
        l.push(("disk", disk.device.clone()));
        for (name, value) in [
            ("size", disk.size_bytes as f64),
            ("used", disk.used_bytes as f64),
            ("available", disk.available_bytes as f64),
            ("used_percent", disk.used_percent),
            ("inodes_percent", disk.inodes_used_percent),
        ] {
            metrics::gauge!(format!("nomad.client.host.disk.{name}"), &l).set(value);
        }
    }
    metrics::gauge!("nomad.client.uptime", labels).set(host.uptime_s as f64);
}
