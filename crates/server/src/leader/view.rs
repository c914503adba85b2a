//! The scheduler's read-only view of the cluster, over a state snapshot.

use model::alloc::Allocation;
use model::deployment::Deployment;
use model::node::Node;
use model::Job;
use state::StateSnapshot;
use std::sync::Arc;

/// A [`scheduler::StateView`] of one state snapshot: it never changes, whatever is applied after.
#[derive(Clone)]
pub struct SnapshotView {
    snap: StateSnapshot,
}

impl SnapshotView {
    pub fn new(snap: StateSnapshot) -> SnapshotView {
        SnapshotView { snap }
    }

    pub fn snapshot(&self) -> &StateSnapshot {
        &self.snap
    }
}

impl scheduler::StateView for SnapshotView {
    fn index(&self) -> u64 {
        self.snap.index()
    }

    fn job(&self, namespace: &str, id: &str) -> Option<Arc<Job>> {
        self.snap.job(namespace, id)
    }

    fn nodes(&self) -> Vec<Arc<Node>> {
        self.snap.nodes("")
    }

    fn csi_volume(&self, namespace: &str, id: &str) -> Option<Arc<model::csi::CSIVolume>> {
        self.snap.csi_volume(namespace, id).map(|v| {
            let plugin = self.snap.csi_plugin(&v.plugin_id);
            let mut v = (*v).clone();
            v.schedulable = state::csi_schedulable(plugin.as_deref());
            Arc::new(v)
        })
    }

    fn host_volume(
        &self,
        namespace: &str,
        id: &str,
    ) -> Option<Arc<model::host_volume::HostVolume>> {
        self.snap.host_volume(namespace, id)
    }

    fn host_volume_claims(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Vec<Arc<model::host_volume::TaskGroupHostVolumeClaim>> {
        self.snap
            .host_volume_claims()
            .into_iter()
            .filter(|c| c.namespace == namespace && c.job_id == job_id)
            .collect()
    }

    fn csi_volumes_of_plugin(&self, plugin_id: &str) -> Vec<Arc<model::csi::CSIVolume>> {
        self.snap
            .csi_volumes(None, "")
            .into_iter()
            .filter(|v| v.plugin_id == plugin_id)
            .collect()
    }

    fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.snap.node(id)
    }

    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        self.snap.allocs_by_job(namespace, job_id)
    }

    fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        self.snap.allocs_by_node(node_id)
    }

    fn latest_deployment(&self, namespace: &str, job_id: &str) -> Option<Arc<Deployment>> {
        self.snap.latest_deployment_by_job(namespace, job_id)
    }

    fn scheduler_config(&self) -> scheduler::SchedulerConfig {
        scheduler_config_of(&self.snap.scheduler_config())
    }
}

/// The scheduler's settings from the stored configuration (Nomad's defaults when none is stored).
pub(crate) fn scheduler_config_of(
    c: &model::scheduler_config::SchedulerConfiguration,
) -> scheduler::SchedulerConfig {
    let p = &c.preemption_config;
    scheduler::SchedulerConfig {
        algorithm: if c.spreads() {
            scheduler::Algorithm::Spread
        } else {
            scheduler::Algorithm::Binpack
        },
        preemption: scheduler::Preemption {
            system: p.system_scheduler_enabled,
            sysbatch: p.sysbatch_scheduler_enabled,
            batch: p.batch_scheduler_enabled,
            service: p.service_scheduler_enabled,
        },
        memory_oversubscription: c.memory_oversubscription_enabled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scheduler::StateView;
    use state::{Command, StateStore};

    #[test]
    fn the_scheduler_sees_the_stored_configuration() {
        let store = StateStore::new();
        let view = SnapshotView::new(store.snapshot());
        assert_eq!(
            view.scheduler_config(),
            scheduler::SchedulerConfig::default(),
            "Nomad's defaults on both sides"
        );
        let config = model::scheduler_config::SchedulerConfiguration {
            scheduler_algorithm: "spread".into(),
            memory_oversubscription_enabled: true,
            preemption_config: model::scheduler_config::PreemptionConfig {
                batch_scheduler_enabled: true,
                ..Default::default()
            },
            ..Default::default()
        };
        store
            .apply(1, &Command::SchedulerConfigSet { config, cas: None })
            .unwrap();
        let view = SnapshotView::new(store.snapshot());
        assert_eq!(
            view.scheduler_config(),
            scheduler::SchedulerConfig {
                algorithm: scheduler::Algorithm::Spread,
                preemption: scheduler::Preemption {
                    system: false,
                    sysbatch: false,
                    batch: true,
                    service: false,
                },
                memory_oversubscription: true,
            }
        );
    }
}
