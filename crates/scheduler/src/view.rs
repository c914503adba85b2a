//! What the scheduler reads. The server implements [`StateView`] over a state snapshot; tests use
//! `testing::MemView`.

use model::alloc::Allocation;
use model::deployment::Deployment;
use model::node::Node;
use model::Job;
use std::sync::Arc;

pub use crate::rank::Algorithm;

/// The cluster-wide scheduler settings (Nomad's `SchedulerConfiguration`) the scheduler honours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SchedulerConfig {
    /// `binpack` (default) or `spread`.
    pub algorithm: Algorithm,
    /// Which job types may evict lower-priority allocations to make room.
    pub preemption: Preemption,
    /// `MemoryOversubscriptionEnabled`: tasks get their `memory_max`; without it, only `memory`.
    pub memory_oversubscription: bool,
}

/// Nomad's `PreemptionConfig`: system jobs preempt by default, the others do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preemption {
    pub system: bool,
    pub sysbatch: bool,
    pub batch: bool,
    pub service: bool,
}

impl Default for Preemption {
    fn default() -> Self {
        Preemption {
            system: true,
            sysbatch: false,
            batch: false,
            service: false,
        }
    }
}

impl Preemption {
    /// Whether jobs of this type may preempt.
    pub fn enabled_for(&self, job_type: &model::JobType) -> bool {
        match job_type {
            model::JobType::System => self.system,
            model::JobType::Sysbatch => self.sysbatch,
            model::JobType::Batch => self.batch,
            model::JobType::Service => self.service,
            _ => false,
        }
    }
}

/// A read-only, consistent view of the cluster at one index.
pub trait StateView {
    /// The state index the view was taken at (recorded as the plan's `SnapshotIndex`).
    fn index(&self) -> u64;
    fn job(&self, namespace: &str, id: &str) -> Option<Arc<Job>>;
    /// Every node, in any order (the scheduler sorts by ID before sampling).
    fn nodes(&self) -> Vec<Arc<Node>>;
    fn node(&self, id: &str) -> Option<Arc<Node>>;
    /// Every allocation of the job, terminal ones included.
    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>>;
    /// Every allocation on the node, terminal ones included.
    fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>>;
    /// The job's newest deployment, whatever its status.
    fn latest_deployment(&self, namespace: &str, job_id: &str) -> Option<Arc<Deployment>>;
    /// A registered CSI volume (the CSI feasibility checks); `None` when the view has none.
    fn csi_volume(&self, _namespace: &str, _id: &str) -> Option<Arc<model::csi::CSIVolume>> {
        None
    }
    /// Every registered CSI volume of a plugin, in any namespace (the per-node volume limit).
    fn csi_volumes_of_plugin(&self, _plugin_id: &str) -> Vec<Arc<model::csi::CSIVolume>> {
        Vec::new()
    }
    /// A dynamic host volume (sticky claims on a deleted volume are void).
    fn host_volume(
        &self,
        _namespace: &str,
        _id: &str,
    ) -> Option<Arc<model::host_volume::HostVolume>> {
        None
    }
    /// The job's sticky host volume claims, every group's.
    fn host_volume_claims(
        &self,
        _namespace: &str,
        _job_id: &str,
    ) -> Vec<Arc<model::host_volume::TaskGroupHostVolumeClaim>> {
        Vec::new()
    }
    /// The cluster's scheduler settings; Nomad's defaults unless the server stores others.
    fn scheduler_config(&self) -> SchedulerConfig {
        SchedulerConfig::default()
    }
}
