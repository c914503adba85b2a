//! Test support (feature `testing`): [`MemView`], an in-memory [`StateView`] that can apply an
//! [`Outcome`] the way the plan applier and state store would, and builders for nodes, jobs and
//! evaluations with Nomad's defaults filled in.

use crate::outcome::Outcome;
use crate::view::{SchedulerConfig, StateView};
use model::alloc::Allocation;
use model::deployment::Deployment;
use model::eval::{EvalStatus, Evaluation, EVAL_TRIGGER_JOB_REGISTER};
use model::job::Job;
use model::node::{
    DriverInfo, Node, NodeCpuResources, NodeDiskResources, NodeMemoryResources, NodeResources,
};
use model::resources::{NetworkResource, Resources};
use model::task::Task;
use model::TaskGroup;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A cluster state held in memory, indexed by node and job like the state store.
#[derive(Debug, Clone, Default)]
pub struct MemView {
    index: u64,
    jobs: BTreeMap<(String, String), Arc<Job>>,
    nodes: BTreeMap<String, Arc<Node>>,
    allocs: BTreeMap<String, Arc<Allocation>>,
    by_node: BTreeMap<String, BTreeSet<String>>,
    by_job: BTreeMap<(String, String), BTreeSet<String>>,
    deployments: BTreeMap<String, Arc<Deployment>>,
    config: SchedulerConfig,
    csi_volumes: BTreeMap<(String, String), Arc<model::csi::CSIVolume>>,
    host_volumes: BTreeMap<(String, String), Arc<model::host_volume::HostVolume>>,
    host_volume_claims: Vec<Arc<model::host_volume::TaskGroupHostVolumeClaim>>,
}

impl MemView {
    pub fn new() -> MemView {
        MemView::default()
    }

    fn bump(&mut self) -> u64 {
        self.index += 1;
        self.index
    }

    pub fn set_scheduler_config(&mut self, config: SchedulerConfig) {
        self.config = config;
    }

    pub fn upsert_node(&mut self, mut node: Node) {
        node.canonicalize();
        node.modify_index = self.bump();
        self.nodes.insert(node.id.clone(), Arc::new(node));
    }

    /// Registers the job as the state store would: canonicalized, its version bumped when it
    /// existed, create/modify indexes set. Returns the stored job.
    pub fn upsert_job(&mut self, mut job: Job) -> Arc<Job> {
        job.canonicalize();
        let ns = job.namespace.clone().unwrap_or_default();
        let index = self.bump();
        let key = (ns, job.id.clone());
        match self.jobs.get(&key) {
            Some(old) => {
                job.create_index = old.create_index;
                job.version = Some(old.version.unwrap_or(0) + 1);
            }
            None => {
                job.create_index = Some(index);
                job.version = Some(0);
            }
        }
        job.modify_index = Some(index);
        job.job_modify_index = Some(index);
        let job = Arc::new(job);
        self.jobs.insert(key, job.clone());
        job
    }

    pub fn upsert_alloc(&mut self, mut alloc: Allocation) {
        let index = self.bump();
        if let Some(old) = self.allocs.get(&alloc.id) {
            alloc.create_index = old.create_index;
            if alloc.job.is_none() {
                alloc.job.clone_from(&old.job);
            }
        } else {
            alloc.create_index = index;
        }
        alloc.modify_index = index;
        self.by_node
            .entry(alloc.node_id.clone())
            .or_default()
            .insert(alloc.id.clone());
        self.by_job
            .entry((alloc.namespace.clone(), alloc.job_id.clone()))
            .or_default()
            .insert(alloc.id.clone());
        if !alloc.previous_allocation.is_empty() {
            if let Some(prev) = self.allocs.get(&alloc.previous_allocation) {
                let mut prev = (**prev).clone();
                prev.next_allocation.clone_from(&alloc.id);
                self.allocs.insert(prev.id.clone(), Arc::new(prev));
            }
        }
        self.allocs.insert(alloc.id.clone(), Arc::new(alloc));
    }

    pub fn upsert_deployment(&mut self, mut d: Deployment) {
        let index = self.bump();
        d.create_index = match self.deployments.get(&d.id) {
            Some(old) => old.create_index,
            None => index,
        };
        d.modify_index = index;
        self.deployments.insert(d.id.clone(), Arc::new(d));
    }

    /// Applies a plan in full, as the plan applier commits it when everything still fits: stops,
    /// placements and updates, the deployment and its status updates.
    pub fn apply(&mut self, outcome: &Outcome) {
        let plan = &outcome.plan;
        for a in plan
            .node_update
            .values()
            .chain(plan.node_preemptions.values())
            .flatten()
        {
            self.upsert_alloc(a.clone());
        }
        // As the FSM does: an update without its job keeps the stored one, and a replacement
        // links its previous allocation to itself.
        for a in plan.node_allocation.values().flatten() {
            let mut a = a.clone();
            if let Some(old) = self.allocs.get(&a.id) {
                if a.job.is_none() {
                    a.job.clone_from(&old.job);
                }
                if a.next_allocation.is_empty() {
                    a.next_allocation.clone_from(&old.next_allocation);
                }
            }
            let (id, previous) = (a.id.clone(), a.previous_allocation.clone());
            self.upsert_alloc(a);
            if !previous.is_empty() {
                self.update_alloc(&previous, |p| p.next_allocation = id);
            }
        }
        if let Some(d) = &plan.deployment {
            self.upsert_deployment(d.clone());
        }
        for u in &plan.deployment_updates {
            if let Some(d) = self.deployments.get(&u.deployment_id) {
                let mut d = (**d).clone();
                d.status.clone_from(&u.status);
                d.status_description.clone_from(&u.status_description);
                self.upsert_deployment(d);
            }
        }
    }

    pub fn alloc(&self, id: &str) -> Option<Arc<Allocation>> {
        self.allocs.get(id).cloned()
    }

    pub fn all_allocs(&self) -> Vec<Arc<Allocation>> {
        self.allocs.values().cloned().collect()
    }

    /// Replaces a stored allocation with `f` applied to it (a client status update, say).
    pub fn update_alloc(&mut self, id: &str, f: impl FnOnce(&mut Allocation)) {
        if let Some(a) = self.allocs.get(id) {
            let mut a = (**a).clone();
            f(&mut a);
            self.upsert_alloc(a);
        }
    }

    /// Stores a CSI volume (its `Schedulable` as the test sets it).
    pub fn upsert_csi_volume(&mut self, v: model::csi::CSIVolume) {
        self.csi_volumes
            .insert((v.namespace.clone(), v.id.clone()), Arc::new(v));
    }

    pub fn upsert_host_volume(&mut self, v: model::host_volume::HostVolume) {
        self.host_volumes
            .insert((v.namespace.clone(), v.id.clone()), Arc::new(v));
    }

    pub fn delete_host_volume(&mut self, namespace: &str, id: &str) {
        self.host_volumes
            .remove(&(namespace.to_string(), id.to_string()));
    }

    /// Adds a sticky claim, as the state does when a plan places a sticky group's allocation.
    pub fn add_host_volume_claim(&mut self, c: model::host_volume::TaskGroupHostVolumeClaim) {
        self.host_volume_claims.push(Arc::new(c));
    }

    /// Replaces a stored node with `f` applied to it (down, draining, …).
    pub fn update_node(&mut self, id: &str, f: impl FnOnce(&mut Node)) {
        if let Some(n) = self.nodes.get(id) {
            let mut n = (**n).clone();
            f(&mut n);
            self.upsert_node(n);
        }
    }
}

impl StateView for MemView {
    fn index(&self) -> u64 {
        self.index
    }

    fn job(&self, namespace: &str, id: &str) -> Option<Arc<Job>> {
        self.jobs
            .get(&(namespace.to_string(), id.to_string()))
            .cloned()
    }

    fn nodes(&self) -> Vec<Arc<Node>> {
        self.nodes.values().cloned().collect()
    }

    fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.nodes.get(id).cloned()
    }

    fn csi_volume(&self, namespace: &str, id: &str) -> Option<Arc<model::csi::CSIVolume>> {
        self.csi_volumes
            .get(&(namespace.to_string(), id.to_string()))
            .cloned()
    }

    fn host_volume(
        &self,
        namespace: &str,
        id: &str,
    ) -> Option<Arc<model::host_volume::HostVolume>> {
        self.host_volumes
            .get(&(namespace.to_string(), id.to_string()))
            .cloned()
    }

    fn host_volume_claims(
        &self,
        namespace: &str,
        job_id: &str,
    ) -> Vec<Arc<model::host_volume::TaskGroupHostVolumeClaim>> {
        self.host_volume_claims
            .iter()
            .filter(|c| c.namespace == namespace && c.job_id == job_id)
            .cloned()
            .collect()
    }

    fn csi_volumes_of_plugin(&self, plugin_id: &str) -> Vec<Arc<model::csi::CSIVolume>> {
        self.csi_volumes
            .values()
            .filter(|v| v.plugin_id == plugin_id)
            .cloned()
            .collect()
    }

    fn allocs_by_job(&self, namespace: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        self.by_job
            .get(&(namespace.to_string(), job_id.to_string()))
            .into_iter()
            .flatten()
            .filter_map(|id| self.allocs.get(id).cloned())
            .collect()
    }

    fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        self.by_node
            .get(node_id)
            .into_iter()
            .flatten()
            .filter_map(|id| self.allocs.get(id).cloned())
            .collect()
    }

    fn latest_deployment(&self, namespace: &str, job_id: &str) -> Option<Arc<Deployment>> {
        self.deployments
            .values()
            .filter(|d| d.namespace == namespace && d.job_id == job_id)
            .max_by_key(|d| d.create_index)
            .cloned()
    }

    fn scheduler_config(&self) -> SchedulerConfig {
        self.config
    }
}

/// A ready Linux node in `dc1`, pool `default`: 4000 MHz, 8 GiB, 100 GiB disk, address
/// `10.0.0.1`, drivers `docker`, `exec` and `raw_exec`.
pub fn node(id: &str) -> Node {
    let mut n = Node {
        id: id.into(),
        secret_id: format!("secret-{id}"),
        name: id.into(),
        datacenter: "dc1".into(),
        status: "ready".into(),
        node_resources: Some(NodeResources {
            cpu: NodeCpuResources {
                cpu_shares: 4000,
                total_cpu_cores: 4,
                reservable_cpu_cores: vec![0, 1, 2, 3],
            },
            memory: NodeMemoryResources { memory_mb: 8192 },
            disk: NodeDiskResources {
                disk_mb: 100 * 1024,
            },
            networks: vec![NetworkResource {
                device: "eth0".into(),
                ip: "10.0.0.1".into(),
                ..NetworkResource::default()
            }],
            ..NodeResources::default()
        }),
        ..Node::default()
    };
    for (k, v) in [
        ("kernel.name", "linux"),
        ("cpu.arch", "amd64"),
        ("unique.hostname", id),
        ("nomad.version", "1.7.3"),
    ] {
        n.attributes.insert(k.into(), v.into());
    }
    for d in ["docker", "exec", "raw_exec"] {
        n.drivers.insert(
            d.into(),
            DriverInfo {
                detected: true,
                healthy: true,
                ..DriverInfo::default()
            },
        );
    }
    n.canonicalize();
    n
}

/// A job of `job_type` with one group `web` of `count` and one `docker` task asking for
/// 500 MHz and 256 MB, canonicalized.
pub fn job(id: &str, job_type: &str, count: i32) -> Job {
    let mut j = Job {
        id: id.into(),
        job_type: Some(job_type.into()),
        task_groups: vec![TaskGroup {
            name: "web".into(),
            count: Some(count),
            tasks: vec![Task {
                name: "app".into(),
                driver: "docker".into(),
                config: [("image".to_string(), serde_json::json!("app:1"))].into(),
                resources: Some(Resources {
                    cpu: Some(500),
                    memory_mb: Some(256),
                    ..Resources::default()
                }),
                ..Task::default()
            }],
            ..TaskGroup::default()
        }],
        ..Job::default()
    };
    j.canonicalize();
    j
}

/// A pending evaluation of `job` triggered by its registration.
pub fn eval(job: &Job) -> Evaluation {
    Evaluation {
        id: format!("eval-{}-{}", job.id, job.job_modify_index.unwrap_or(0)),
        namespace: job.namespace.clone().unwrap_or_else(|| "default".into()),
        priority: job.priority.unwrap_or(50),
        eval_type: job.job_type.clone().unwrap_or_else(|| "service".into()),
        triggered_by: EVAL_TRIGGER_JOB_REGISTER.into(),
        job_id: job.id.clone(),
        job_modify_index: job.job_modify_index.unwrap_or(0),
        status: EvalStatus::Pending,
        ..Evaluation::default()
    }
}
