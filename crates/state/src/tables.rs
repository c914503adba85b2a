//! The root of the store: every table as a persistent map, the secondary indexes, and the Raft index
//! of each table's last change.
//!
//! Invariant: a secondary index holds exactly the IDs of the objects whose key it indexes. The maps
//! are private to this module and the only writers are the `put_*`/`delete_*` methods below, each of
//! which updates the table and its indexes together. Empty keys (an allocation with no deployment)
//! are not indexed, and an index entry whose set becomes empty is removed, so two roots holding the
//! same objects have identical indexes.

use crate::command::Table;
use imbl::{OrdMap, OrdSet};
use model::acl::{AclPolicy, AclRole, AclToken, Namespace, OneTimeToken};
use model::alloc::Allocation;
use model::csi::{CSIControllerOp, CSIPlugin, CSIVolume};
use model::deployment::Deployment;
use model::eval::Evaluation;
use model::node::Node;
use model::scheduler_config::SchedulerConfiguration;
use model::summary::JobSummary;
use model::variable::{RootKey, VariableEncrypted};
use model::Job;
use std::sync::Arc;

/// `(namespace, id)`.
pub(crate) type NsKey = (String, String);
/// `(namespace, job id, version)`.
pub(crate) type VersionKey = (String, String, u64);
type IdSet = OrdSet<String>;
/// `(modify index, id)`: a table's objects in the order they last changed.
type ModifySet = OrdSet<(u64, String)>;

/// The namespace a job is stored under: its own, or `default` when it has none.
pub(crate) fn job_namespace(job: &Job) -> &str {
    job.namespace
        .as_deref()
        .unwrap_or(model::job::DEFAULT_NAMESPACE)
}

pub(crate) fn ns_key(ns: &str, id: &str) -> NsKey {
    (ns.to_owned(), id.to_owned())
}

/// One version of the whole state. Cloning is O(1): the maps share structure.
#[derive(Clone, Default)]
pub(crate) struct Root {
    /// The highest Raft index applied.
    index: u64,
    /// How many restores produced this root; `wait_for` returns when it changes.
    restores: u64,
    table_indexes: [u64; Table::COUNT],
    jobs: OrdMap<NsKey, Arc<Job>>,
    job_versions: OrdMap<VersionKey, Arc<Job>>,
    /// The source each version was registered from, where its submitter sent it; an entry never
    /// outlives its version.
    job_submissions: OrdMap<VersionKey, Arc<model::job::JobSubmission>>,
    job_summaries: OrdMap<NsKey, Arc<JobSummary>>,
    evals: OrdMap<String, Arc<Evaluation>>,
    evals_by_job: OrdMap<NsKey, IdSet>,
    evals_by_modify: ModifySet,
    allocs: OrdMap<String, Arc<Allocation>>,
    allocs_by_job: OrdMap<NsKey, IdSet>,
    allocs_by_node: OrdMap<String, IdSet>,
    allocs_by_eval: OrdMap<String, IdSet>,
    allocs_by_deployment: OrdMap<String, IdSet>,
    allocs_by_modify: ModifySet,
    /// Node ID → the Raft index at which an allocation on that node last changed (was written,
    /// moved away or deleted): what a client's allocation query waits on, so a write wakes only
    /// the nodes it touched. Not saved: a load sets every node's to the snapshot's index, never
    /// lower than the true value (clients ignore a list whose index is below the last one they
    /// acted on, so a lower one would hold them back; a higher one costs one listing).
    node_alloc_index: OrdMap<String, u64>,
    /// Node ID → what its non-terminal allocations reserve, kept as allocations are written and
    /// deleted (so a list of every node's usage never reads the allocations).
    node_usage: OrdMap<String, model::NodeAllocated>,
    /// The index being applied (0 outside an apply, e.g. while loading a snapshot).
    applying: u64,
    /// The nodes whose allocations the current apply touched (reset at each apply); the store
    /// wakes their waiters after publishing.
    touched_nodes: Vec<String>,
    nodes: OrdMap<String, Arc<Node>>,
    nodes_by_modify: ModifySet,
    deployments: OrdMap<String, Arc<Deployment>>,
    deployments_by_job: OrdMap<NsKey, IdSet>,
    csi_volumes: OrdMap<NsKey, Arc<CSIVolume>>,
    /// Native service registrations by ID, and their IDs by allocation and by (namespace, name).
    services: OrdMap<String, Arc<model::service_registration::ServiceRegistration>>,
    services_by_alloc: OrdMap<String, IdSet>,
    services_by_name: OrdMap<NsKey, IdSet>,
    /// Dynamic host volumes by (namespace, ID).
    host_volumes: OrdMap<NsKey, Arc<model::host_volume::HostVolume>>,
    /// Sticky host volume claims by ID.
    host_volume_claims: OrdMap<String, Arc<model::host_volume::TaskGroupHostVolumeClaim>>,
    csi_plugins: OrdMap<String, Arc<CSIPlugin>>,
    /// Plugin ID → its in-flight destructive controller call.
    csi_controller_ops: OrdMap<String, Arc<CSIControllerOp>>,
    acl_policies: OrdMap<String, Arc<AclPolicy>>,
    /// Accessor ID → token.
    acl_tokens: OrdMap<String, Arc<AclToken>>,
    /// Secret ID → accessor ID.
    acl_tokens_by_secret: OrdMap<String, String>,
    /// Role ID → role.
    acl_roles: OrdMap<String, Arc<AclRole>>,
    /// Role name → role ID.
    acl_roles_by_name: OrdMap<String, String>,
    /// One-time secret ID → one-time token.
    one_time_tokens: OrdMap<String, Arc<OneTimeToken>>,
    /// The Raft index of the last ACL bootstrap (0: never bootstrapped).
    acl_bootstrap_index: u64,
    namespaces: OrdMap<String, Arc<Namespace>>,
    /// `(namespace, path)` → variable, its items sealed.
    variables: OrdMap<NsKey, Arc<VariableEncrypted>>,
    /// Key ID → root key.
    root_keys: OrdMap<String, Arc<RootKey>>,
    /// The scheduler configuration an operator stored; `None`: Nomad's defaults apply.
    scheduler_config: Option<Arc<SchedulerConfiguration>>,
    /// (namespace, job) → its scaling events per group.
    scaling_events: OrdMap<NsKey, Arc<model::scaling::JobScalingEvents>>,
    /// Name → node pool (the built-in `all` and `default` are not stored).
    node_pools: OrdMap<String, Arc<model::node_pool::NodePool>>,
    /// The autopilot configuration; `None` until the first leader stores its agent's.
    autopilot_config: Option<Arc<model::autopilot::AutopilotConfiguration>>,
}

fn index_add<K: Ord + Clone>(index: &mut OrdMap<K, IdSet>, key: K, id: &str) {
    index.entry(key).or_default().insert(id.to_owned());
}

fn index_remove<K: Ord + Clone>(index: &mut OrdMap<K, IdSet>, key: &K, id: &str) {
    if let Some(set) = index.get_mut(key) {
        set.remove(id);
        if set.is_empty() {
            index.remove(key);
        }
    }
}

/// Adds (or removes) `id` under `key` unless the key is empty: an empty node, evaluation or
/// deployment ID means "none" and is not indexed.
fn index_add_nonempty(index: &mut OrdMap<String, IdSet>, key: &str, id: &str) {
    if !key.is_empty() {
        index_add(index, key.to_owned(), id);
    }
}

fn index_remove_nonempty(index: &mut OrdMap<String, IdSet>, key: &str, id: &str) {
    if !key.is_empty() {
        index_remove(index, &key.to_owned(), id);
    }
}

/// The objects of `table` whose modify index is above `index`, in (modify index, ID) order.
fn modified_after<T>(
    index_set: &ModifySet,
    index: u64,
    table: &OrdMap<String, Arc<T>>,
) -> Vec<Arc<T>> {
    let Some(from) = index.checked_add(1) else {
        return Vec::new();
    };
    index_set
        .range((from, String::new())..)
        .map(|(_, id)| {
            let found = table.get(id);
            debug_assert!(
                found.is_some(),
                "modify index names {id}, which its table lacks"
            );
            found
        })
        .filter_map(|o| o.cloned())
        .collect()
}

/// The objects an index lists under `key`, in ID order.
fn resolve<K: Ord + Clone, T>(
    index: &OrdMap<K, IdSet>,
    key: &K,
    table: &OrdMap<String, Arc<T>>,
) -> Vec<Arc<T>> {
    let Some(ids) = index.get(key) else {
        return Vec::new();
    };
    ids.iter()
        .map(|id| {
            let found = table.get(id);
            debug_assert!(found.is_some(), "index names {id}, which its table lacks");
            found
        })
        .filter_map(|o| o.cloned())
        .collect()
}

impl Root {
    // ----- indexes of the root -----

    pub(crate) fn index(&self) -> u64 {
        self.index
    }

    pub(crate) fn set_index(&mut self, index: u64) {
        self.index = index;
    }

    pub(crate) fn restores(&self) -> u64 {
        self.restores
    }

    pub(crate) fn set_restores(&mut self, restores: u64) {
        self.restores = restores;
    }

    pub(crate) fn table_index(&self, table: Table) -> u64 {
        self.table_indexes[table.slot()]
    }

    /// Starts applying the entry at `index`: what allocation writes record as the nodes' change.
    pub(crate) fn begin_apply(&mut self, index: u64) {
        self.applying = index;
        self.touched_nodes.clear();
    }

    /// Ends an apply: the root no longer records touches (a loaded or published root is final).
    pub(crate) fn end_apply(&mut self) {
        self.applying = 0;
    }

    /// The nodes whose allocations the last apply touched (may repeat a node).
    pub(crate) fn touched_nodes(&self) -> &[String] {
        &self.touched_nodes
    }

    /// The Raft index at which an allocation on `node_id` last changed (0: never, as far as this
    /// state knows).
    pub(crate) fn node_alloc_index(&self, node_id: &str) -> u64 {
        self.node_alloc_index.get(node_id).copied().unwrap_or(0)
    }

    /// Marks every node, and every node any allocation names, changed at `at`.
    pub(crate) fn touch_every_node(&mut self, at: u64) {
        let ids: Vec<String> = self
            .nodes
            .keys()
            .chain(self.allocs_by_node.keys())
            .cloned()
            .collect();
        for id in ids {
            self.touch_node(&id, at);
        }
    }

    fn touch_node(&mut self, node_id: &str, at: u64) {
        if node_id.is_empty() {
            return;
        }
        let at = at.max(self.applying);
        let slot = self.node_alloc_index.entry(node_id.to_owned()).or_insert(0);
        *slot = (*slot).max(at);
        if self.applying > 0 {
            self.touched_nodes.push(node_id.to_owned());
        }
    }

    /// Records that `table` changed at `index`.
    pub(crate) fn touch(&mut self, table: Table, index: u64) {
        self.table_indexes[table.slot()] = index;
    }

    // ----- read access to the tables -----

    pub(crate) fn jobs(&self) -> &OrdMap<NsKey, Arc<Job>> {
        &self.jobs
    }

    pub(crate) fn job_versions(&self) -> &OrdMap<VersionKey, Arc<Job>> {
        &self.job_versions
    }

    pub(crate) fn job_summaries(&self) -> &OrdMap<NsKey, Arc<JobSummary>> {
        &self.job_summaries
    }

    pub(crate) fn evals(&self) -> &OrdMap<String, Arc<Evaluation>> {
        &self.evals
    }

    pub(crate) fn allocs(&self) -> &OrdMap<String, Arc<Allocation>> {
        &self.allocs
    }

    pub(crate) fn nodes(&self) -> &OrdMap<String, Arc<Node>> {
        &self.nodes
    }

    pub(crate) fn deployments(&self) -> &OrdMap<String, Arc<Deployment>> {
        &self.deployments
    }

    pub(crate) fn csi_volumes(&self) -> &OrdMap<NsKey, Arc<CSIVolume>> {
        &self.csi_volumes
    }

    pub(crate) fn services(
        &self,
    ) -> &OrdMap<String, Arc<model::service_registration::ServiceRegistration>> {
        &self.services
    }

    fn services_in(
        &self,
        ids: Option<&IdSet>,
    ) -> Vec<Arc<model::service_registration::ServiceRegistration>> {
        ids.into_iter()
            .flatten()
            .filter_map(|id| self.services.get(id).cloned())
            .collect()
    }

    pub(crate) fn services_of_alloc(
        &self,
        alloc_id: &str,
    ) -> Vec<Arc<model::service_registration::ServiceRegistration>> {
        self.services_in(self.services_by_alloc.get(alloc_id))
    }

    pub(crate) fn services_named(
        &self,
        ns: &str,
        name: &str,
    ) -> Vec<Arc<model::service_registration::ServiceRegistration>> {
        self.services_in(self.services_by_name.get(&ns_key(ns, name)))
    }

    pub(crate) fn put_service(
        &mut self,
        reg: Arc<model::service_registration::ServiceRegistration>,
    ) {
        self.delete_service(&reg.id);
        index_add(&mut self.services_by_alloc, reg.alloc_id.clone(), &reg.id);
        index_add(
            &mut self.services_by_name,
            ns_key(&reg.namespace, &reg.service_name),
            &reg.id,
        );
        self.services.insert(reg.id.clone(), reg);
    }

    pub(crate) fn delete_service(&mut self, id: &str) {
        if let Some(old) = self.services.remove(id) {
            index_remove(&mut self.services_by_alloc, &old.alloc_id, id);
            index_remove(
                &mut self.services_by_name,
                &ns_key(&old.namespace, &old.service_name),
                id,
            );
        }
    }

    pub(crate) fn host_volumes(&self) -> &OrdMap<NsKey, Arc<model::host_volume::HostVolume>> {
        &self.host_volumes
    }

    pub(crate) fn put_host_volume(&mut self, volume: Arc<model::host_volume::HostVolume>) {
        let key = ns_key(&volume.namespace, &volume.id);
        self.host_volumes.insert(key, volume);
    }

    pub(crate) fn delete_host_volume(&mut self, ns: &str, id: &str) {
        self.host_volumes.remove(&ns_key(ns, id));
    }

    pub(crate) fn host_volume_claims(
        &self,
    ) -> &OrdMap<String, Arc<model::host_volume::TaskGroupHostVolumeClaim>> {
        &self.host_volume_claims
    }

    pub(crate) fn put_host_volume_claim(
        &mut self,
        claim: Arc<model::host_volume::TaskGroupHostVolumeClaim>,
    ) {
        self.host_volume_claims.insert(claim.id.clone(), claim);
    }

    pub(crate) fn delete_host_volume_claim(&mut self, id: &str) {
        self.host_volume_claims.remove(id);
    }

    pub(crate) fn csi_plugins(&self) -> &OrdMap<String, Arc<CSIPlugin>> {
        &self.csi_plugins
    }

    pub(crate) fn csi_controller_ops(&self) -> &OrdMap<String, Arc<CSIControllerOp>> {
        &self.csi_controller_ops
    }

    pub(crate) fn acl_policies(&self) -> &OrdMap<String, Arc<AclPolicy>> {
        &self.acl_policies
    }

    pub(crate) fn acl_tokens(&self) -> &OrdMap<String, Arc<AclToken>> {
        &self.acl_tokens
    }

    pub(crate) fn acl_roles(&self) -> &OrdMap<String, Arc<AclRole>> {
        &self.acl_roles
    }

    pub(crate) fn one_time_tokens(&self) -> &OrdMap<String, Arc<OneTimeToken>> {
        &self.one_time_tokens
    }

    pub(crate) fn namespaces(&self) -> &OrdMap<String, Arc<Namespace>> {
        &self.namespaces
    }

    pub(crate) fn acl_bootstrap_index(&self) -> u64 {
        self.acl_bootstrap_index
    }

    // ----- lookups -----

    pub(crate) fn acl_token_by_secret(&self, secret: &str) -> Option<&Arc<AclToken>> {
        self.acl_tokens_by_secret
            .get(secret)
            .and_then(|accessor| self.acl_tokens.get(accessor))
    }

    pub(crate) fn acl_role_by_name(&self, name: &str) -> Option<&Arc<AclRole>> {
        self.acl_roles_by_name
            .get(name)
            .and_then(|id| self.acl_roles.get(id))
    }

    pub(crate) fn job(&self, ns: &str, id: &str) -> Option<&Arc<Job>> {
        self.jobs.get(&ns_key(ns, id))
    }

    pub(crate) fn job_summary(&self, ns: &str, id: &str) -> Option<&Arc<JobSummary>> {
        self.job_summaries.get(&ns_key(ns, id))
    }

    /// Every tracked version of a job, newest first.
    pub(crate) fn versions_of(&self, ns: &str, id: &str) -> Vec<Arc<Job>> {
        let from = (ns.to_owned(), id.to_owned(), 0);
        let to = (ns.to_owned(), id.to_owned(), u64::MAX);
        let mut out: Vec<Arc<Job>> = self
            .job_versions
            .range(from..=to)
            .map(|(_, j)| j.clone())
            .collect();
        out.reverse();
        out
    }

    pub(crate) fn job_version(&self, ns: &str, id: &str, version: u64) -> Option<&Arc<Job>> {
        self.job_versions
            .get(&(ns.to_owned(), id.to_owned(), version))
    }

    pub(crate) fn evals_by_job(&self, ns: &str, job_id: &str) -> Vec<Arc<Evaluation>> {
        resolve(&self.evals_by_job, &ns_key(ns, job_id), &self.evals)
    }

    pub(crate) fn allocs_by_job(&self, ns: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        resolve(&self.allocs_by_job, &ns_key(ns, job_id), &self.allocs)
    }

    /// What the node's non-terminal allocations reserve (zeros for none).
    pub(crate) fn node_usage(&self, node_id: &str) -> model::NodeAllocated {
        self.node_usage.get(node_id).copied().unwrap_or_default()
    }

    pub(crate) fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        resolve(&self.allocs_by_node, &node_id.to_owned(), &self.allocs)
    }

    pub(crate) fn allocs_by_eval(&self, eval_id: &str) -> Vec<Arc<Allocation>> {
        resolve(&self.allocs_by_eval, &eval_id.to_owned(), &self.allocs)
    }

    pub(crate) fn allocs_by_deployment(&self, deployment_id: &str) -> Vec<Arc<Allocation>> {
        resolve(
            &self.allocs_by_deployment,
            &deployment_id.to_owned(),
            &self.allocs,
        )
    }

    pub(crate) fn evals_modified_after(&self, index: u64) -> Vec<Arc<Evaluation>> {
        modified_after(&self.evals_by_modify, index, &self.evals)
    }

    pub(crate) fn allocs_modified_after(&self, index: u64) -> Vec<Arc<Allocation>> {
        modified_after(&self.allocs_by_modify, index, &self.allocs)
    }

    pub(crate) fn nodes_modified_after(&self, index: u64) -> Vec<Arc<Node>> {
        modified_after(&self.nodes_by_modify, index, &self.nodes)
    }

    pub(crate) fn deployments_by_job(&self, ns: &str, job_id: &str) -> Vec<Arc<Deployment>> {
        resolve(
            &self.deployments_by_job,
            &ns_key(ns, job_id),
            &self.deployments,
        )
    }

    // ----- writers: each keeps its table's secondary indexes in step -----

    pub(crate) fn put_job(&mut self, job: Arc<Job>) {
        let key = ns_key(job_namespace(&job), &job.id);
        self.jobs.insert(key, job);
    }

    pub(crate) fn delete_job(&mut self, ns: &str, id: &str) -> Option<Arc<Job>> {
        self.jobs.remove(&ns_key(ns, id))
    }

    pub(crate) fn put_job_version(&mut self, job: Arc<Job>) {
        let key = (
            job_namespace(&job).to_owned(),
            job.id.clone(),
            job.version.unwrap_or(0),
        );
        self.job_versions.insert(key, job);
    }

    pub(crate) fn delete_job_version(&mut self, ns: &str, id: &str, version: u64) {
        let key = (ns.to_owned(), id.to_owned(), version);
        self.job_versions.remove(&key);
        self.job_submissions.remove(&key);
    }

    /// Keeps `sub` as the source of the version it names, unless that version has one already
    /// or is not stored.
    pub(crate) fn put_job_submission(&mut self, sub: Arc<model::job::JobSubmission>) {
        let key = (sub.namespace.clone(), sub.job_id.clone(), sub.version);
        if self.job_versions.contains_key(&key) && !self.job_submissions.contains_key(&key) {
            self.job_submissions.insert(key, sub);
        }
    }

    pub(crate) fn job_submission(
        &self,
        ns: &str,
        id: &str,
        version: u64,
    ) -> Option<&Arc<model::job::JobSubmission>> {
        self.job_submissions
            .get(&(ns.to_owned(), id.to_owned(), version))
    }

    pub(crate) fn job_submissions(&self) -> &OrdMap<VersionKey, Arc<model::job::JobSubmission>> {
        &self.job_submissions
    }

    pub(crate) fn put_job_summary(&mut self, summary: Arc<JobSummary>) {
        let key = ns_key(&summary.namespace, &summary.job_id);
        self.job_summaries.insert(key, summary);
    }

    pub(crate) fn delete_job_summary(&mut self, ns: &str, id: &str) {
        self.job_summaries.remove(&ns_key(ns, id));
    }

    pub(crate) fn put_eval(&mut self, eval: Arc<Evaluation>) {
        if let Some(old) = self.evals.get(&eval.id).cloned() {
            self.unindex_eval(&old);
        }
        index_add(
            &mut self.evals_by_job,
            ns_key(&eval.namespace, &eval.job_id),
            &eval.id,
        );
        self.evals_by_modify
            .insert((eval.modify_index, eval.id.clone()));
        self.evals.insert(eval.id.clone(), eval);
    }

    pub(crate) fn delete_eval(&mut self, id: &str) -> Option<Arc<Evaluation>> {
        let old = self.evals.remove(id)?;
        self.unindex_eval(&old);
        Some(old)
    }

    fn unindex_eval(&mut self, old: &Evaluation) {
        index_remove(
            &mut self.evals_by_job,
            &ns_key(&old.namespace, &old.job_id),
            &old.id,
        );
        self.evals_by_modify
            .remove(&(old.modify_index, old.id.clone()));
    }

    pub(crate) fn put_alloc(&mut self, alloc: Arc<Allocation>) {
        self.put_alloc_with(alloc, true);
    }

    /// `put_alloc`; with `wake_node` false (a client's report of its own fields) the node's
    /// allocation index stays, unless the allocation moved between nodes.
    pub(crate) fn put_alloc_with(&mut self, alloc: Arc<Allocation>, wake_node: bool) {
        let alloc = self.share_job(alloc);
        let mut moved = false;
        if let Some(old) = self.allocs.get(&alloc.id).cloned() {
            self.unindex_alloc(&old);
            if old.node_id != alloc.node_id {
                moved = true;
                self.touch_node(&old.node_id, old.modify_index);
            }
        } else {
            moved = true;
        }
        if wake_node || moved {
            self.touch_node(&alloc.node_id, alloc.modify_index);
        }
        let id = alloc.id.as_str();
        index_add(
            &mut self.allocs_by_job,
            ns_key(&alloc.namespace, &alloc.job_id),
            id,
        );
        index_add_nonempty(&mut self.allocs_by_node, &alloc.node_id, id);
        if !alloc.node_id.is_empty() && !alloc.is_terminal() {
            let mut sums = self
                .node_usage
                .get(&alloc.node_id)
                .copied()
                .unwrap_or_default();
            sums.add(&alloc);
            self.node_usage.insert(alloc.node_id.clone(), sums);
        }
        index_add_nonempty(&mut self.allocs_by_eval, &alloc.eval_id, id);
        index_add_nonempty(&mut self.allocs_by_deployment, &alloc.deployment_id, id);
        self.allocs_by_modify
            .insert((alloc.modify_index, alloc.id.clone()));
        self.allocs.insert(alloc.id.clone(), alloc);
    }

    /// Allocations share their job with the stored version they run (same namespace, ID,
    /// version and job modify index) instead of each holding a copy: the bytes of state per
    /// allocation are its own fields, not its job's.
    fn share_job(&self, alloc: Arc<Allocation>) -> Arc<Allocation> {
        let Some(job) = alloc.job.as_ref() else {
            return alloc;
        };
        let key = (
            job_namespace(job).to_owned(),
            job.id.clone(),
            job.version.unwrap_or(0),
        );
        match self.job_versions.get(&key) {
            Some(stored)
                if !Arc::ptr_eq(stored, job) && stored.job_modify_index == job.job_modify_index =>
            {
                let stored = stored.clone();
                let mut a = Arc::unwrap_or_clone(alloc);
                a.job = Some(stored);
                Arc::new(a)
            }
            _ => alloc,
        }
    }

    pub(crate) fn delete_alloc(&mut self, id: &str) -> Option<Arc<Allocation>> {
        let old = self.allocs.remove(id)?;
        self.unindex_alloc(&old);
        self.touch_node(&old.node_id, old.modify_index);
        Some(old)
    }

    fn unindex_alloc(&mut self, old: &Allocation) {
        let id = old.id.as_str();
        index_remove(
            &mut self.allocs_by_job,
            &ns_key(&old.namespace, &old.job_id),
            id,
        );
        index_remove_nonempty(&mut self.allocs_by_node, &old.node_id, id);
        if !old.is_terminal() {
            if let Some(mut sums) = self.node_usage.get(&old.node_id).copied() {
                sums.remove(old);
                if sums.allocs == 0 {
                    self.node_usage.remove(&old.node_id);
                } else {
                    self.node_usage.insert(old.node_id.clone(), sums);
                }
            }
        }
        index_remove_nonempty(&mut self.allocs_by_eval, &old.eval_id, id);
        index_remove_nonempty(&mut self.allocs_by_deployment, &old.deployment_id, id);
        self.allocs_by_modify
            .remove(&(old.modify_index, old.id.clone()));
    }

    pub(crate) fn put_node(&mut self, node: Arc<Node>) {
        if let Some(old) = self.nodes.get(&node.id) {
            let key = (old.modify_index, old.id.clone());
            self.nodes_by_modify.remove(&key);
        }
        self.nodes_by_modify
            .insert((node.modify_index, node.id.clone()));
        self.nodes.insert(node.id.clone(), node);
    }

    pub(crate) fn delete_node(&mut self, id: &str) -> Option<Arc<Node>> {
        let old = self.nodes.remove(id)?;
        self.nodes_by_modify
            .remove(&(old.modify_index, old.id.clone()));
        if !self.allocs_by_node.contains_key(id) {
            self.node_alloc_index.remove(id);
        }
        Some(old)
    }

    pub(crate) fn put_deployment(&mut self, deployment: Arc<Deployment>) {
        if let Some(old) = self.deployments.get(&deployment.id).cloned() {
            index_remove(
                &mut self.deployments_by_job,
                &ns_key(&old.namespace, &old.job_id),
                &old.id,
            );
        }
        index_add(
            &mut self.deployments_by_job,
            ns_key(&deployment.namespace, &deployment.job_id),
            &deployment.id,
        );
        self.deployments.insert(deployment.id.clone(), deployment);
    }

    pub(crate) fn delete_deployment(&mut self, id: &str) {
        if let Some(old) = self.deployments.remove(id) {
            index_remove(
                &mut self.deployments_by_job,
                &ns_key(&old.namespace, &old.job_id),
                &old.id,
            );
        }
    }

    pub(crate) fn put_csi_volume(&mut self, volume: Arc<CSIVolume>) {
        let key = ns_key(&volume.namespace, &volume.id);
        self.csi_volumes.insert(key, volume);
    }

    pub(crate) fn put_csi_plugin(&mut self, plugin: Arc<CSIPlugin>) {
        self.csi_plugins.insert(plugin.id.clone(), plugin);
    }

    pub(crate) fn delete_csi_volume(&mut self, ns: &str, id: &str) -> Option<Arc<CSIVolume>> {
        self.csi_volumes.remove(&ns_key(ns, id))
    }

    pub(crate) fn delete_csi_plugin(&mut self, id: &str) -> Option<Arc<CSIPlugin>> {
        self.csi_plugins.remove(id)
    }

    pub(crate) fn put_csi_controller_op(&mut self, op: Arc<CSIControllerOp>) {
        self.csi_controller_ops.insert(op.plugin_id.clone(), op);
    }

    pub(crate) fn delete_csi_controller_op(&mut self, plugin_id: &str) {
        self.csi_controller_ops.remove(plugin_id);
    }

    pub(crate) fn put_acl_policy(&mut self, policy: Arc<AclPolicy>) {
        self.acl_policies.insert(policy.name.clone(), policy);
    }

    pub(crate) fn delete_acl_policy(&mut self, name: &str) -> Option<Arc<AclPolicy>> {
        self.acl_policies.remove(name)
    }

    pub(crate) fn put_acl_token(&mut self, token: Arc<AclToken>) {
        if let Some(old) = self.acl_tokens.get(&token.accessor_id).cloned() {
            self.acl_tokens_by_secret.remove(&old.secret_id);
        }
        self.acl_tokens_by_secret
            .insert(token.secret_id.clone(), token.accessor_id.clone());
        self.acl_tokens.insert(token.accessor_id.clone(), token);
    }

    pub(crate) fn delete_acl_token(&mut self, accessor_id: &str) -> Option<Arc<AclToken>> {
        let old = self.acl_tokens.remove(accessor_id)?;
        self.acl_tokens_by_secret.remove(&old.secret_id);
        Some(old)
    }

    pub(crate) fn put_acl_role(&mut self, role: Arc<AclRole>) {
        if let Some(old) = self.acl_roles.get(&role.id).cloned() {
            self.acl_roles_by_name.remove(&old.name);
        }
        self.acl_roles_by_name
            .insert(role.name.clone(), role.id.clone());
        self.acl_roles.insert(role.id.clone(), role);
    }

    pub(crate) fn delete_acl_role(&mut self, id: &str) -> Option<Arc<AclRole>> {
        let old = self.acl_roles.remove(id)?;
        self.acl_roles_by_name.remove(&old.name);
        Some(old)
    }

    pub(crate) fn put_one_time_token(&mut self, token: Arc<OneTimeToken>) {
        self.one_time_tokens
            .insert(token.one_time_secret_id.clone(), token);
    }

    pub(crate) fn delete_one_time_token(&mut self, secret: &str) -> Option<Arc<OneTimeToken>> {
        self.one_time_tokens.remove(secret)
    }

    pub(crate) fn set_acl_bootstrap_index(&mut self, index: u64) {
        self.acl_bootstrap_index = index;
    }

    pub(crate) fn variables(&self) -> &OrdMap<NsKey, Arc<VariableEncrypted>> {
        &self.variables
    }

    pub(crate) fn put_variable(&mut self, var: Arc<VariableEncrypted>) {
        self.variables
            .insert(ns_key(&var.meta.namespace, &var.meta.path), var);
    }

    pub(crate) fn delete_variable(
        &mut self,
        ns: &str,
        path: &str,
    ) -> Option<Arc<VariableEncrypted>> {
        self.variables.remove(&ns_key(ns, path))
    }

    pub(crate) fn root_keys(&self) -> &OrdMap<String, Arc<RootKey>> {
        &self.root_keys
    }

    pub(crate) fn node_pools(&self) -> &OrdMap<String, Arc<model::node_pool::NodePool>> {
        &self.node_pools
    }

    pub(crate) fn put_node_pool(&mut self, pool: Arc<model::node_pool::NodePool>) {
        self.node_pools.insert(pool.name.clone(), pool);
    }

    pub(crate) fn delete_node_pool(&mut self, name: &str) {
        self.node_pools.remove(name);
    }

    pub(crate) fn scaling_events(&self) -> &OrdMap<NsKey, Arc<model::scaling::JobScalingEvents>> {
        &self.scaling_events
    }

    pub(crate) fn scaling_events_of(
        &self,
        ns: &str,
        job_id: &str,
    ) -> Option<&Arc<model::scaling::JobScalingEvents>> {
        self.scaling_events.get(&ns_key(ns, job_id))
    }

    pub(crate) fn put_scaling_events(&mut self, events: Arc<model::scaling::JobScalingEvents>) {
        self.scaling_events
            .insert(ns_key(&events.namespace, &events.job_id), events);
    }

    pub(crate) fn delete_scaling_events(&mut self, ns: &str, job_id: &str) {
        self.scaling_events.remove(&ns_key(ns, job_id));
    }

    pub(crate) fn autopilot_config(
        &self,
    ) -> Option<&Arc<model::autopilot::AutopilotConfiguration>> {
        self.autopilot_config.as_ref()
    }

    pub(crate) fn set_autopilot_config(
        &mut self,
        config: Arc<model::autopilot::AutopilotConfiguration>,
    ) {
        self.autopilot_config = Some(config);
    }

    pub(crate) fn scheduler_config(&self) -> Option<&Arc<SchedulerConfiguration>> {
        self.scheduler_config.as_ref()
    }

    pub(crate) fn set_scheduler_config(&mut self, config: Arc<SchedulerConfiguration>) {
        self.scheduler_config = Some(config);
    }

    pub(crate) fn put_root_key(&mut self, key: Arc<RootKey>) {
        self.root_keys.insert(key.meta.key_id.clone(), key);
    }

    pub(crate) fn delete_root_key(&mut self, key_id: &str) -> Option<Arc<RootKey>> {
        self.root_keys.remove(key_id)
    }

    pub(crate) fn put_namespace(&mut self, ns: Arc<Namespace>) {
        self.namespaces.insert(ns.name.clone(), ns);
    }

    pub(crate) fn delete_namespace(&mut self, name: &str) -> Option<Arc<Namespace>> {
        self.namespaces.remove(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(id: &str, node: &str, eval: &str, deployment: &str) -> Arc<Allocation> {
        Arc::new(Allocation {
            id: id.into(),
            namespace: "default".into(),
            job_id: "web".into(),
            node_id: node.into(),
            eval_id: eval.into(),
            deployment_id: deployment.into(),
            ..Allocation::default()
        })
    }

    fn ids(allocs: Vec<Arc<Allocation>>) -> Vec<String> {
        allocs.iter().map(|a| a.id.clone()).collect()
    }

    /// The kept sums always equal a recount of the node's allocations, through writes that
    /// move, finish, resurrect and delete them.
    #[test]
    fn node_usage_follows_every_write() {
        use model::alloc::{AllocatedResources, AllocatedTaskResources};
        let sized = |id: &str, node: &str, cpu: i64, status: &str| {
            let mut t = AllocatedTaskResources::default();
            t.cpu.cpu_shares = cpu;
            t.memory.memory_mb = cpu / 2;
            let mut a = Arc::unwrap_or_clone(alloc(id, node, "e", ""));
            a.allocated_resources = Some(AllocatedResources {
                tasks: [("t".to_string(), t)].into(),
                ..AllocatedResources::default()
            });
            a.client_status = status.into();
            Arc::new(a)
        };
        let recount = |root: &Root, node: &str| {
            let mut sums = model::NodeAllocated::default();
            for a in root.allocs_by_node(node) {
                sums.add(&a);
            }
            sums
        };
        let mut root = Root::default();
        type Step<'a> = Box<dyn Fn(&mut Root) + 'a>;
        let steps: Vec<Step<'_>> = vec![
            Box::new(|r| r.put_alloc(sized("a1", "n1", 100, "running"))),
            Box::new(|r| r.put_alloc(sized("a2", "n1", 50, "pending"))),
            Box::new(|r| r.put_alloc(sized("a3", "n2", 70, "running"))),
            Box::new(|r| r.put_alloc(sized("a1", "n1", 120, "running"))),
            Box::new(|r| r.put_alloc(sized("a2", "n1", 50, "complete"))),
            Box::new(|r| r.put_alloc(sized("a3", "n1", 70, "running"))),
            Box::new(|r| r.put_alloc(sized("a2", "n1", 50, "pending"))),
            Box::new(|r| {
                r.delete_alloc("a1");
            }),
            Box::new(|r| r.put_alloc(sized("a4", "", 10, "pending"))),
        ];
        for (i, step) in steps.iter().enumerate() {
            step(&mut root);
            for node in ["n1", "n2"] {
                assert_eq!(
                    root.node_usage(node),
                    recount(&root, node),
                    "step {i}, {node}"
                );
            }
        }
        assert_eq!(root.node_usage("n1").allocs, 2);
        assert_eq!(root.node_usage("n1").cpu_shares, 120);
        assert_eq!(root.node_usage("n2"), model::NodeAllocated::default());
        assert!(
            !root.node_usage.contains_key("n2"),
            "an emptied node's entry is dropped"
        );
    }

    #[test]
    fn moving_an_alloc_updates_every_index_and_drops_empty_entries() {
        let mut root = Root::default();
        root.put_alloc(alloc("a1", "n1", "e1", ""));
        root.put_alloc(alloc("a2", "n1", "e1", "d1"));
        root.put_alloc(alloc("a1", "n2", "e2", "d1"));
        assert_eq!(ids(root.allocs_by_node("n1")), ["a2"]);
        assert_eq!(ids(root.allocs_by_node("n2")), ["a1"]);
        assert_eq!(ids(root.allocs_by_eval("e1")), ["a2"]);
        assert_eq!(ids(root.allocs_by_deployment("d1")), ["a1", "a2"]);
        assert_eq!(ids(root.allocs_by_job("default", "web")), ["a1", "a2"]);
        root.delete_alloc("a2");
        assert!(root.allocs_by_node("n1").is_empty());
        assert!(
            !root.allocs_by_node.contains_key("n1"),
            "an emptied entry is removed"
        );
        assert!(
            !root.allocs_by_deployment.contains_key(""),
            "empty keys are not indexed"
        );
    }

    #[test]
    fn versions_come_newest_first_and_stay_within_their_job() {
        let mut root = Root::default();
        for (id, v) in [("a", 0), ("a", 1), ("a", 2), ("ab", 0), ("b", 7)] {
            root.put_job_version(Arc::new(Job {
                id: id.into(),
                version: Some(v),
                ..Job::default()
            }));
        }
        let got: Vec<u64> = root
            .versions_of("default", "a")
            .iter()
            .map(|j| j.version.unwrap())
            .collect();
        assert_eq!(got, [2, 1, 0]);
        assert!(root.versions_of("other", "a").is_empty());
    }
}
