//! Read-only, point-in-time views of the store.

use crate::command::Table;
use crate::tables::{NsKey, Root};
use imbl::OrdMap;
use model::acl::{AclPolicy, AclRole, AclToken, Namespace, OneTimeToken};
use model::alloc::Allocation;
use model::csi::{CSIControllerOp, CSIPlugin, CSIVolume};
use model::deployment::Deployment;
use model::eval::Evaluation;
use model::node::Node;
use model::summary::JobSummary;
use model::variable::{RootKey, VariableEncrypted};
use model::Job;
use std::sync::Arc;

/// The whole state as of one Raft index. Cheap to clone and to keep; it never changes, whatever is
/// applied after it was taken. Lists come sorted by their key (ID, or namespace then ID).
#[derive(Clone)]
pub struct StateSnapshot {
    root: Arc<Root>,
}

/// Values whose ID starts with `prefix`, in ID order.
fn by_prefix<T>(map: &OrdMap<String, Arc<T>>, prefix: &str) -> Vec<Arc<T>> {
    map.range(prefix.to_owned()..)
        .take_while(|(id, _)| id.starts_with(prefix))
        .map(|(_, v)| v.clone())
        .collect()
}

/// Values keyed `(namespace, id)` whose ID starts with `prefix`, in one namespace or (`None`) all.
fn by_ns_prefix<T>(map: &OrdMap<NsKey, Arc<T>>, ns: Option<&str>, prefix: &str) -> Vec<Arc<T>> {
    match ns {
        Some(ns) => map
            .range((ns.to_owned(), prefix.to_owned())..)
            .take_while(|((n, id), _)| n == ns && id.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect(),
        None => map
            .iter()
            .filter(|((_, id), _)| id.starts_with(prefix))
            .map(|(_, v)| v.clone())
            .collect(),
    }
}

fn in_namespace(ns: Option<&str>, namespace: &str) -> bool {
    ns.is_none_or(|ns| ns == namespace)
}

impl StateSnapshot {
    pub(crate) fn new(root: Arc<Root>) -> StateSnapshot {
        StateSnapshot { root }
    }

    /// How many times the whole state was replaced (a restore); a change means every index read
    /// before may be stale.
    pub fn restores(&self) -> u64 {
        self.root().restores()
    }

    pub(crate) fn root(&self) -> &Root {
        &self.root
    }

    /// The highest Raft index applied when the snapshot was taken.
    pub fn index(&self) -> u64 {
        self.root.index()
    }

    /// The Raft index at which `table` last changed (0: never).
    pub fn table_index(&self, table: Table) -> u64 {
        self.root.table_index(table)
    }

    /// The Raft index at which an allocation on `node_id` last changed: what a client's
    /// allocation query reports and waits on ([`crate::StateStore::wait_for_node`]).
    pub fn node_alloc_index(&self, node_id: &str) -> u64 {
        self.root.node_alloc_index(node_id)
    }

    /// The highest of the tables' indexes: what a blocking query over them reports as its index.
    pub fn max_table_index(&self, tables: &[Table]) -> u64 {
        tables
            .iter()
            .map(|t| self.table_index(*t))
            .max()
            .unwrap_or(0)
    }

    /// Writes this snapshot in the format [`crate::StateStore::restore`] reads: a consistent copy
    /// while the store goes on applying.
    pub fn save(&self, w: &mut dyn std::io::Write) -> Result<(), crate::StateError> {
        crate::persist::save(&self.root, w)
    }

    // ----- ACLs and namespaces -----

    pub fn acl_policy(&self, name: &str) -> Option<Arc<AclPolicy>> {
        self.root.acl_policies().get(name).cloned()
    }

    /// Policies whose name starts with `prefix`, by name.
    pub fn acl_policies(&self, prefix: &str) -> Vec<Arc<AclPolicy>> {
        by_prefix(self.root.acl_policies(), prefix)
    }

    pub fn acl_token(&self, accessor_id: &str) -> Option<Arc<AclToken>> {
        self.root.acl_tokens().get(accessor_id).cloned()
    }

    pub fn acl_token_by_secret(&self, secret_id: &str) -> Option<Arc<AclToken>> {
        self.root.acl_token_by_secret(secret_id).cloned()
    }

    /// Tokens whose accessor ID starts with `prefix`, by accessor ID.
    pub fn acl_tokens(&self, prefix: &str) -> Vec<Arc<AclToken>> {
        by_prefix(self.root.acl_tokens(), prefix)
    }

    pub fn acl_role(&self, id: &str) -> Option<Arc<AclRole>> {
        self.root.acl_roles().get(id).cloned()
    }

    pub fn acl_role_by_name(&self, name: &str) -> Option<Arc<AclRole>> {
        self.root.acl_role_by_name(name).cloned()
    }

    /// Roles whose ID starts with `prefix`, by ID.
    pub fn acl_roles(&self, prefix: &str) -> Vec<Arc<AclRole>> {
        by_prefix(self.root.acl_roles(), prefix)
    }

    pub fn one_time_token(&self, secret: &str) -> Option<Arc<OneTimeToken>> {
        self.root.one_time_tokens().get(secret).cloned()
    }

    /// Whether some one-time token has expired at `now` (unix ns).
    pub fn has_expired_one_time_tokens(&self, now: i64) -> bool {
        self.root
            .one_time_tokens()
            .values()
            .any(|t| t.expires_at <= now)
    }

    /// The Raft index of the last ACL bootstrap; 0 before the first.
    pub fn acl_bootstrap_index(&self) -> u64 {
        self.root.acl_bootstrap_index()
    }

    /// A namespace; `default` exists even when it was never written.
    pub fn namespace(&self, name: &str) -> Option<Arc<Namespace>> {
        match self.root.namespaces().get(name) {
            Some(ns) => Some(ns.clone()),
            None if name == model::job::DEFAULT_NAMESPACE => {
                Some(Arc::new(Namespace::default_namespace()))
            }
            None => None,
        }
    }

    /// Namespaces whose name starts with `prefix` (`default` included), by name.
    pub fn namespaces(&self, prefix: &str) -> Vec<Arc<Namespace>> {
        let mut out = by_prefix(self.root.namespaces(), prefix);
        let default = model::job::DEFAULT_NAMESPACE;
        if default.starts_with(prefix) && !self.root.namespaces().contains_key(default) {
            out.push(Arc::new(Namespace::default_namespace()));
            out.sort_by(|a, b| a.name.cmp(&b.name));
        }
        out
    }

    // ----- variables and root keys -----

    pub fn variable(&self, ns: &str, path: &str) -> Option<Arc<VariableEncrypted>> {
        self.root
            .variables()
            .get(&(ns.to_owned(), path.to_owned()))
            .cloned()
    }

    /// Variables whose path starts with `prefix`, in one namespace or (`None`) all; sorted by
    /// (namespace, path).
    pub fn variables(&self, ns: Option<&str>, prefix: &str) -> Vec<Arc<VariableEncrypted>> {
        match ns {
            Some(ns) => self
                .root
                .variables()
                .range((ns.to_owned(), prefix.to_owned())..)
                .take_while(|((n, p), _)| n == ns && p.starts_with(prefix))
                .map(|(_, v)| v.clone())
                .collect(),
            None => self
                .root
                .variables()
                .values()
                .filter(|v| v.meta.path.starts_with(prefix))
                .cloned()
                .collect(),
        }
    }

    pub fn root_key(&self, key_id: &str) -> Option<Arc<RootKey>> {
        self.root.root_keys().get(key_id).cloned()
    }

    /// Every root key, by ID.
    /// Every node pool, the built-in `all` and `default` first, then by name.
    pub fn node_pools(&self) -> Vec<Arc<model::node_pool::NodePool>> {
        let mut out: Vec<_> = model::node_pool::NodePool::built_ins()
            .into_iter()
            .map(Arc::new)
            .collect();
        out.extend(self.root.node_pools().values().cloned());
        out
    }

    /// One node pool (a built-in one too).
    pub fn node_pool(&self, name: &str) -> Option<Arc<model::node_pool::NodePool>> {
        if model::node_pool::NodePool::is_built_in(name) {
            return model::node_pool::NodePool::built_ins()
                .into_iter()
                .find(|p| p.name == name)
                .map(Arc::new);
        }
        self.root.node_pools().get(name).cloned()
    }

    /// A job's scaling events per group (newest first), if it has any.
    pub fn scaling_events(
        &self,
        ns: &str,
        job_id: &str,
    ) -> Option<Arc<model::scaling::JobScalingEvents>> {
        self.root.scaling_events_of(ns, job_id).cloned()
    }

    /// The stored autopilot configuration; `None` until the first leader stored its agent's.
    pub fn autopilot_config(&self) -> Option<model::autopilot::AutopilotConfiguration> {
        self.root.autopilot_config().map(|c| (**c).clone())
    }

    /// The stored scheduler configuration, or Nomad's defaults when none is stored (indexes 0).
    pub fn scheduler_config(&self) -> model::scheduler_config::SchedulerConfiguration {
        self.root.scheduler_config().map_or_else(
            model::scheduler_config::SchedulerConfiguration::cluster_default,
            |c| (**c).clone(),
        )
    }

    pub fn root_keys(&self) -> Vec<Arc<RootKey>> {
        self.root.root_keys().values().cloned().collect()
    }

    /// The key new variables are sealed with.
    pub fn active_root_key(&self) -> Option<Arc<RootKey>> {
        self.root
            .root_keys()
            .values()
            .find(|k| k.meta.state == model::variable::KEY_STATE_ACTIVE)
            .cloned()
    }

    // ----- jobs -----

    pub fn job(&self, ns: &str, id: &str) -> Option<Arc<Job>> {
        self.root.job(ns, id).cloned()
    }

    /// Jobs whose ID starts with `prefix`, in one namespace or (`None`) all; sorted by (namespace, id).
    pub fn jobs(&self, ns: Option<&str>, prefix: &str) -> Vec<Arc<Job>> {
        by_ns_prefix(self.root.jobs(), ns, prefix)
    }

    /// The tracked versions of a job, newest first (at most [`crate::limits::JOB_TRACKED_VERSIONS`]).
    pub fn job_versions(&self, ns: &str, id: &str) -> Vec<Arc<Job>> {
        self.root.versions_of(ns, id)
    }

    /// The source version `version` of a job was registered from, if its submitter sent it.
    pub fn job_submission(
        &self,
        ns: &str,
        id: &str,
        version: u64,
    ) -> Option<Arc<model::job::JobSubmission>> {
        self.root.job_submission(ns, id, version).cloned()
    }

    pub fn job_version(&self, ns: &str, id: &str, version: u64) -> Option<Arc<Job>> {
        self.root.job_version(ns, id, version).cloned()
    }

    pub fn job_summary(&self, ns: &str, id: &str) -> Option<Arc<JobSummary>> {
        self.root.job_summary(ns, id).cloned()
    }

    // ----- evaluations -----

    pub fn eval(&self, id: &str) -> Option<Arc<Evaluation>> {
        self.root.evals().get(id).cloned()
    }

    /// Evaluations whose ID starts with `prefix`, in one namespace or all; sorted by ID.
    pub fn evals(&self, ns: Option<&str>, prefix: &str) -> Vec<Arc<Evaluation>> {
        let mut all = by_prefix(self.root.evals(), prefix);
        all.retain(|e| in_namespace(ns, &e.namespace));
        all
    }

    /// Evaluations whose `ModifyIndex` is above `index`, oldest change first: what a follower of
    /// the store (the leader's eval broker) has not seen yet.
    pub fn evals_modified_after(&self, index: u64) -> Vec<Arc<Evaluation>> {
        self.root.evals_modified_after(index)
    }

    /// A job's evaluations, sorted by ID.
    pub fn evals_by_job(&self, ns: &str, job_id: &str) -> Vec<Arc<Evaluation>> {
        self.root.evals_by_job(ns, job_id)
    }

    // ----- allocations -----

    pub fn alloc(&self, id: &str) -> Option<Arc<Allocation>> {
        self.root.allocs().get(id).cloned()
    }

    /// Allocations whose ID starts with `prefix`, in one namespace or all; sorted by ID.
    pub fn allocs(&self, ns: Option<&str>, prefix: &str) -> Vec<Arc<Allocation>> {
        let mut all = by_prefix(self.root.allocs(), prefix);
        all.retain(|a| in_namespace(ns, &a.namespace));
        all
    }

    /// Every allocation with this job ID, whichever incarnation of the job made it; sorted by ID.
    pub fn allocs_by_job(&self, ns: &str, job_id: &str) -> Vec<Arc<Allocation>> {
        self.root.allocs_by_job(ns, job_id)
    }

    /// Allocations whose `ModifyIndex` is above `index`, oldest change first.
    pub fn allocs_modified_after(&self, index: u64) -> Vec<Arc<Allocation>> {
        self.root.allocs_modified_after(index)
    }

    /// What the node's non-terminal allocations reserve, kept as they are written: no
    /// allocation is read.
    pub fn node_usage(&self, node_id: &str) -> model::NodeAllocated {
        self.root.node_usage(node_id)
    }

    pub fn allocs_by_node(&self, node_id: &str) -> Vec<Arc<Allocation>> {
        self.root.allocs_by_node(node_id)
    }

    pub fn allocs_by_eval(&self, eval_id: &str) -> Vec<Arc<Allocation>> {
        self.root.allocs_by_eval(eval_id)
    }

    pub fn allocs_by_deployment(&self, deployment_id: &str) -> Vec<Arc<Allocation>> {
        self.root.allocs_by_deployment(deployment_id)
    }

    // ----- nodes -----

    pub fn node(&self, id: &str) -> Option<Arc<Node>> {
        self.root.nodes().get(id).cloned()
    }

    /// How many nodes are registered, O(1).
    pub fn node_count(&self) -> usize {
        self.root.nodes().len()
    }

    pub fn nodes(&self, prefix: &str) -> Vec<Arc<Node>> {
        by_prefix(self.root.nodes(), prefix)
    }

    /// Nodes whose `ModifyIndex` is above `index`, oldest change first.
    pub fn nodes_modified_after(&self, index: u64) -> Vec<Arc<Node>> {
        self.root.nodes_modified_after(index)
    }

    // ----- deployments -----

    pub fn deployment(&self, id: &str) -> Option<Arc<Deployment>> {
        self.root.deployments().get(id).cloned()
    }

    pub fn deployments(&self, ns: Option<&str>, prefix: &str) -> Vec<Arc<Deployment>> {
        let mut all = by_prefix(self.root.deployments(), prefix);
        all.retain(|d| in_namespace(ns, &d.namespace));
        all
    }

    pub fn deployments_by_job(&self, ns: &str, job_id: &str) -> Vec<Arc<Deployment>> {
        self.root.deployments_by_job(ns, job_id)
    }

    /// The job's deployment with the highest create index (Nomad's `LatestDeploymentByJobID`).
    pub fn latest_deployment_by_job(&self, ns: &str, job_id: &str) -> Option<Arc<Deployment>> {
        self.deployments_by_job(ns, job_id)
            .into_iter()
            .max_by_key(|d| d.create_index)
    }

    // ----- native services -----

    /// Every registration in `ns` (every namespace: `None`), by ID.
    pub fn services(
        &self,
        ns: Option<&str>,
    ) -> Vec<Arc<model::service_registration::ServiceRegistration>> {
        self.root
            .services()
            .values()
            .filter(|s| ns.is_none_or(|n| s.namespace == n))
            .cloned()
            .collect()
    }

    /// The instances of service `name` in `ns`, by ID.
    pub fn services_named(
        &self,
        ns: &str,
        name: &str,
    ) -> Vec<Arc<model::service_registration::ServiceRegistration>> {
        self.root.services_named(ns, name)
    }

    /// The registrations of one allocation.
    pub fn services_of_alloc(
        &self,
        alloc_id: &str,
    ) -> Vec<Arc<model::service_registration::ServiceRegistration>> {
        self.root.services_of_alloc(alloc_id)
    }

    /// The registrations of a job's allocations.
    pub fn services_of_job(
        &self,
        ns: &str,
        job_id: &str,
    ) -> Vec<Arc<model::service_registration::ServiceRegistration>> {
        self.root
            .services()
            .values()
            .filter(|s| s.namespace == ns && s.job_id == job_id)
            .cloned()
            .collect()
    }

    // ----- dynamic host volumes -----

    pub fn host_volume(&self, ns: &str, id: &str) -> Option<Arc<model::host_volume::HostVolume>> {
        self.root
            .host_volumes()
            .get(&(ns.to_owned(), id.to_owned()))
            .cloned()
    }

    /// Host volumes in `ns` (every namespace: `None`) whose ID starts with `prefix`.
    pub fn host_volumes(
        &self,
        ns: Option<&str>,
        prefix: &str,
    ) -> Vec<Arc<model::host_volume::HostVolume>> {
        by_ns_prefix(self.root.host_volumes(), ns, prefix)
    }

    /// Every sticky host volume claim.
    pub fn host_volume_claims(&self) -> Vec<Arc<model::host_volume::TaskGroupHostVolumeClaim>> {
        self.root.host_volume_claims().values().cloned().collect()
    }

    /// A sticky host volume claim by ID.
    pub fn host_volume_claim(
        &self,
        id: &str,
    ) -> Option<Arc<model::host_volume::TaskGroupHostVolumeClaim>> {
        self.root.host_volume_claims().get(id).cloned()
    }

    /// The host volumes placed on `node_id`.
    pub fn host_volumes_on_node(&self, node_id: &str) -> Vec<Arc<model::host_volume::HostVolume>> {
        self.root
            .host_volumes()
            .values()
            .filter(|v| v.node_id == node_id)
            .cloned()
            .collect()
    }

    // ----- CSI -----

    pub fn csi_volume(&self, ns: &str, id: &str) -> Option<Arc<CSIVolume>> {
        self.root
            .csi_volumes()
            .get(&(ns.to_owned(), id.to_owned()))
            .cloned()
    }

    pub fn csi_volumes(&self, ns: Option<&str>, prefix: &str) -> Vec<Arc<CSIVolume>> {
        by_ns_prefix(self.root.csi_volumes(), ns, prefix)
    }

    pub fn csi_plugin(&self, id: &str) -> Option<Arc<CSIPlugin>> {
        self.root.csi_plugins().get(id).cloned()
    }

    pub fn csi_plugins(&self, prefix: &str) -> Vec<Arc<CSIPlugin>> {
        by_prefix(self.root.csi_plugins(), prefix)
    }

    /// The plugin's in-flight destructive controller call, if any.
    pub fn csi_controller_op(&self, plugin_id: &str) -> Option<Arc<CSIControllerOp>> {
        self.root.csi_controller_ops().get(plugin_id).cloned()
    }

    /// Every in-flight controller call (one per plugin at most).
    pub fn csi_controller_ops(&self) -> Vec<Arc<CSIControllerOp>> {
        self.root.csi_controller_ops().values().cloned().collect()
    }
}

impl std::fmt::Debug for StateSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("StateSnapshot");
        d.field("index", &self.index());
        for t in Table::ALL {
            d.field(&format!("{t:?}"), &self.table_index(t));
        }
        d.finish()
    }
}
