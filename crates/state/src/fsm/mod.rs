//! The FSM's apply functions: one command, applied to a private clone of the root, with Nomad's
//! semantics. Nothing here reads the clock or makes IDs; everything comes from the command.
//!
//! Each submodule mirrors the part of Nomad's state store it is named after; where we differ, the
//! function says so.

mod acl;
mod allocs;
mod autopilot_config;
pub(crate) mod csi;
mod deployments;
mod evals;
mod host_volumes;
pub(crate) mod jobs;
mod nodes;
mod plan;
mod scheduler_config;
mod services;
mod variables;

use crate::command::{ApplyResponse, Command, Table};
use crate::error::StateError;
use crate::tables::Root;
use model::alloc::Allocation;
use model::csi::{CSIControllerOp, CSIPlugin, CSIVolume};
use model::deployment::Deployment;
use model::eval::Evaluation;
use model::node::Node;
use model::summary::JobSummary;
use model::Job;
use std::ops::Deref;
use std::sync::Arc;

/// A write transaction: the clone of the root a command mutates, and the command's Raft index.
/// Every write goes through here so that the written table's index is recorded with it.
/// Reads see the transaction's own writes (it derefs to the root being built).
pub(crate) struct Txn {
    root: Root,
    index: u64,
}

impl Deref for Txn {
    type Target = Root;

    fn deref(&self) -> &Root {
        &self.root
    }
}

impl Txn {
    /// The command's Raft index.
    pub(crate) fn index(&self) -> u64 {
        self.index
    }

    /// Marks `table` changed at this index without writing to it (Nomad bumps some table indexes
    /// unconditionally, e.g. both evals and allocs on every eval delete).
    pub(crate) fn touch(&mut self, table: Table) {
        self.root.touch(table, self.index);
    }

    pub(crate) fn put_job(&mut self, job: Arc<Job>) {
        self.touch(Table::Jobs);
        self.root.put_job(job);
    }

    pub(crate) fn delete_job(&mut self, ns: &str, id: &str) -> Option<Arc<Job>> {
        self.touch(Table::Jobs);
        self.root.delete_job(ns, id)
    }

    pub(crate) fn put_job_version(&mut self, job: Arc<Job>) {
        self.touch(Table::JobVersions);
        self.root.put_job_version(job);
    }

    pub(crate) fn put_job_submission(&mut self, sub: model::job::JobSubmission) {
        self.touch(Table::JobVersions);
        self.root.put_job_submission(Arc::new(sub));
    }

    pub(crate) fn delete_job_version(&mut self, ns: &str, id: &str, version: u64) {
        self.touch(Table::JobVersions);
        self.root.delete_job_version(ns, id, version);
    }

    pub(crate) fn put_scaling_events(&mut self, events: model::scaling::JobScalingEvents) {
        self.touch(Table::ScalingEvents);
        self.root.put_scaling_events(Arc::new(events));
    }

    pub(crate) fn delete_scaling_events(&mut self, ns: &str, job_id: &str) {
        if self.root.scaling_events_of(ns, job_id).is_some() {
            self.touch(Table::ScalingEvents);
            self.root.delete_scaling_events(ns, job_id);
        }
    }

    pub(crate) fn put_job_summary(&mut self, summary: JobSummary) {
        self.touch(Table::JobSummaries);
        self.root.put_job_summary(Arc::new(summary));
    }

    pub(crate) fn delete_job_summary(&mut self, ns: &str, id: &str) {
        self.touch(Table::JobSummaries);
        self.root.delete_job_summary(ns, id);
    }

    pub(crate) fn put_eval(&mut self, eval: Evaluation) {
        self.touch(Table::Evals);
        self.root.put_eval(Arc::new(eval));
    }

    pub(crate) fn delete_eval(&mut self, id: &str) -> Option<Arc<Evaluation>> {
        self.touch(Table::Evals);
        self.root.delete_eval(id)
    }

    pub(crate) fn put_alloc(&mut self, alloc: Allocation) {
        self.touch(Table::Allocs);
        let alloc = Arc::new(alloc);
        self.root.put_alloc(Arc::clone(&alloc));
        services::sync_alloc(self, &alloc);
    }

    /// Writes a change to the client's own fields only (its report): the node's allocation
    /// query is not woken, since the client knows what it reported (Nomad's client pulls only
    /// allocations whose `AllocModifyIndex` moved; this one never does).
    pub(crate) fn put_alloc_client_fields(&mut self, alloc: Allocation) {
        self.touch(Table::Allocs);
        let alloc = Arc::new(alloc);
        self.root.put_alloc_with(Arc::clone(&alloc), false);
        services::sync_alloc(self, &alloc);
    }

    pub(crate) fn delete_alloc(&mut self, id: &str) -> Option<Arc<Allocation>> {
        self.touch(Table::Allocs);
        services::alloc_gone(self, id);
        self.root.delete_alloc(id)
    }

    pub(crate) fn put_service(&mut self, reg: model::service_registration::ServiceRegistration) {
        self.touch(Table::Services);
        self.root.put_service(Arc::new(reg));
    }

    pub(crate) fn delete_service(&mut self, id: &str) {
        self.touch(Table::Services);
        self.root.delete_service(id);
    }

    pub(crate) fn put_node(&mut self, node: Node) {
        self.touch(Table::Nodes);
        self.root.put_node(Arc::new(node));
    }

    pub(crate) fn delete_node(&mut self, id: &str) -> Option<Arc<Node>> {
        self.touch(Table::Nodes);
        self.root.delete_node(id)
    }

    pub(crate) fn put_csi_volume(&mut self, volume: CSIVolume) {
        self.touch(Table::CsiVolumes);
        self.root.put_csi_volume(Arc::new(volume));
    }

    pub(crate) fn delete_csi_volume(&mut self, ns: &str, id: &str) -> Option<Arc<CSIVolume>> {
        self.touch(Table::CsiVolumes);
        self.root.delete_csi_volume(ns, id)
    }

    pub(crate) fn put_host_volume(&mut self, volume: model::host_volume::HostVolume) {
        self.touch(Table::HostVolumes);
        self.root.put_host_volume(Arc::new(volume));
    }

    pub(crate) fn delete_host_volume(&mut self, ns: &str, id: &str) {
        self.touch(Table::HostVolumes);
        self.root.delete_host_volume(ns, id);
    }

    pub(crate) fn put_host_volume_claim(
        &mut self,
        claim: model::host_volume::TaskGroupHostVolumeClaim,
    ) {
        self.touch(Table::HostVolumeClaims);
        self.root.put_host_volume_claim(Arc::new(claim));
    }

    pub(crate) fn delete_host_volume_claim(&mut self, id: &str) {
        self.touch(Table::HostVolumeClaims);
        self.root.delete_host_volume_claim(id);
    }

    pub(crate) fn put_csi_plugin(&mut self, plugin: CSIPlugin) {
        self.touch(Table::CsiPlugins);
        self.root.put_csi_plugin(Arc::new(plugin));
    }

    pub(crate) fn delete_csi_plugin(&mut self, id: &str) {
        self.touch(Table::CsiPlugins);
        self.root.delete_csi_plugin(id);
    }

    pub(crate) fn put_csi_controller_op(&mut self, op: CSIControllerOp) {
        self.touch(Table::CsiControllerOps);
        self.root.put_csi_controller_op(Arc::new(op));
    }

    pub(crate) fn delete_csi_controller_op(&mut self, plugin_id: &str) {
        self.touch(Table::CsiControllerOps);
        self.root.delete_csi_controller_op(plugin_id);
    }

    pub(crate) fn put_deployment(&mut self, deployment: Deployment) {
        self.touch(Table::Deployments);
        self.root.put_deployment(Arc::new(deployment));
    }

    pub(crate) fn put_node_pool(&mut self, pool: model::node_pool::NodePool) {
        self.touch(Table::NodePools);
        self.root.put_node_pool(Arc::new(pool));
    }

    pub(crate) fn delete_node_pool(&mut self, name: &str) {
        self.touch(Table::NodePools);
        self.root.delete_node_pool(name);
    }

    pub(crate) fn delete_deployment(&mut self, id: &str) {
        self.touch(Table::Deployments);
        self.root.delete_deployment(id);
    }

    pub(crate) fn put_scheduler_config(
        &mut self,
        config: Arc<model::scheduler_config::SchedulerConfiguration>,
    ) {
        self.touch(Table::SchedulerConfig);
        self.root.set_scheduler_config(config);
    }
}

/// Applies `cmd` at `index` to a clone of `root`. On success returns the new root (with its index set)
/// and the response; on error the clone is dropped, so a failed command changes nothing.
/// A singleton configuration's check-and-set (scheduler, autopilot): with `cas`, the stored
/// modify index (0 when none is stored) must be it, else a `Conflict` starting `cas error:`.
pub(super) fn check_cas(
    what: &str,
    stored: Option<u64>,
    cas: Option<u64>,
) -> Result<(), StateError> {
    match cas {
        Some(want) if stored.unwrap_or(0) != want => Err(StateError::Conflict(format!(
            "cas error: the {what} configuration's modify index is {}, not {want}",
            stored.unwrap_or(0)
        ))),
        _ => Ok(()),
    }
}

pub(crate) fn apply(
    root: &Root,
    index: u64,
    cmd: &Command,
) -> Result<(Root, ApplyResponse), StateError> {
    let mut tx = Txn {
        root: root.clone(),
        index,
    };
    tx.root.begin_apply(index);
    let response = dispatch(&mut tx, cmd)?;
    tx.root.end_apply();
    tx.root.set_index(index);
    Ok((tx.root, response))
}

fn dispatch(tx: &mut Txn, cmd: &Command) -> Result<ApplyResponse, StateError> {
    let plain = ApplyResponse {
        index: tx.index(),
        ..ApplyResponse::default()
    };
    match cmd {
        Command::JobRegister {
            job,
            eval,
            submit_time,
            submission,
        } => jobs::register(tx, job, eval.as_ref(), *submit_time, submission.as_ref()),
        Command::JobRegisterAtVersion {
            job,
            eval,
            submit_time,
            version,
            submission,
        } => jobs::register_at_version(
            tx,
            job,
            eval.as_ref(),
            *submit_time,
            *version,
            submission.as_ref(),
        ),
        Command::JobScale {
            namespace,
            job_id,
            group,
            count,
            job_modify_index,
            eval,
            event,
            submit_time,
        } => jobs::scale(
            tx,
            jobs::Scale {
                ns: namespace,
                job_id,
                group,
                count: *count,
                job_modify_index: *job_modify_index,
                eval: eval.as_ref(),
                event,
                submit_time: *submit_time,
            },
        ),
        Command::JobDeregister {
            namespace,
            job_id,
            purge,
            eval,
            submit_time,
        } => jobs::deregister(tx, namespace, job_id, *purge, eval.as_ref(), *submit_time),
        Command::EvalUpsert { evals } => evals::upsert(tx, evals).map(|()| plain),
        Command::EvalDelete {
            eval_ids,
            alloc_ids,
        } => {
            evals::delete(tx, eval_ids, alloc_ids);
            Ok(plain)
        }
        Command::NodeRegister { node } => nodes::register(tx, node).map(|()| plain),
        Command::NodeDeregister { node_ids } => nodes::deregister(tx, node_ids).map(|()| plain),
        Command::NodeUpdateStatus {
            node_id,
            status,
            updated_at,
        } => nodes::update_status(tx, node_id, status, *updated_at).map(|()| plain),
        Command::AllocUpsert { allocs } => {
            allocs::upsert(tx, allocs, allocs::Writer::AsGiven).map(|()| plain)
        }
        Command::AllocStop { stops } => plan::stop(tx, stops).map(|()| plain),
        Command::DeploymentUpsert { deployment } => {
            deployments::upsert(tx, deployment).map(|()| plain)
        }
        Command::NodePurge { node_id, evals } => {
            nodes::deregister(tx, std::slice::from_ref(node_id))?;
            evals::upsert(tx, evals).map(|()| plain)
        }
        Command::NodePoolUpsert { pools } => nodes::upsert_pools(tx, pools).map(|()| plain),
        Command::NodePoolDelete { names } => nodes::delete_pools(tx, names).map(|()| plain),
        Command::AutopilotConfigSet { config, cas } => {
            autopilot_config::set(tx, config, *cas).map(|()| plain)
        }
        Command::HostVolumeUpsert { volume } => host_volumes::upsert(tx, volume).map(|()| plain),
        Command::HostVolumeDelete { namespace, id } => {
            host_volumes::delete(tx, namespace, id);
            Ok(plain)
        }
        Command::HostVolumeClaimDelete { namespace, id } => {
            host_volumes::delete_claim(tx, namespace, id);
            Ok(plain)
        }
        Command::ServiceRegistrationDelete { namespace, id } => {
            services::delete(tx, namespace, id);
            Ok(plain)
        }
        Command::JobSummariesReconcile => {
            jobs::reconcile_summaries(tx);
            Ok(plain)
        }
        Command::Gc {
            evals,
            allocs,
            jobs,
            deployments,
            nodes,
        } => gc(tx, evals, allocs, jobs, deployments, nodes).map(|()| plain),
        Command::PlanApply {
            eval_id,
            job,
            allocs_upsert,
            allocs_stop,
            evals,
            deployment,
            deployment_updates,
        } => plan::apply(
            tx,
            &plan::PlanResults {
                eval_id,
                job: job.as_ref(),
                allocs_upsert,
                allocs_stop,
                evals,
                deployment: deployment.as_ref(),
                deployment_updates,
            },
        ),
        Command::PlanApplyBatch { plans } => {
            let mut batch_errors = Vec::with_capacity(plans.len());
            let mut failed = false;
            for plan in plans {
                if failed {
                    // Each plan was checked with the ones before it applied: after one failed,
                    // the rest were checked against a state that will not be.
                    batch_errors.push(Some(
                        "not applied: an earlier plan of its batch failed".to_owned(),
                    ));
                    continue;
                }
                if !matches!(plan, Command::PlanApply { .. }) {
                    batch_errors.push(Some(format!("{} inside a plan batch", plan.name())));
                    failed = true;
                    continue;
                }
                // A plan that fails leaves no trace: the transaction goes back to before it.
                let before = tx.root.clone();
                match dispatch(tx, plan) {
                    Ok(_) => batch_errors.push(None),
                    Err(e) => {
                        tx.root = before;
                        batch_errors.push(Some(e.to_string()));
                        failed = true;
                    }
                }
            }
            Ok(ApplyResponse {
                batch_errors,
                ..plain
            })
        }
        Command::AllocClientUpdate {
            allocs: updates,
            evals: follow_ups,
        } => {
            allocs::client_update(tx, updates)?;
            if !follow_ups.is_empty() {
                evals::upsert(tx, follow_ups)?;
            }
            Ok(plain)
        }
        Command::DeploymentStatus {
            update,
            job,
            eval,
            submit_time,
        } => deployments::status(tx, update, job.as_ref(), eval.as_ref(), *submit_time),
        Command::DeploymentPromote {
            deployment_id,
            all,
            groups,
            eval,
        } => deployments::promote(tx, deployment_id, *all, groups, eval.as_ref()),
        Command::DeploymentAllocHealth {
            deployment_id,
            healthy,
            unhealthy,
            timestamp,
            update,
            job,
            eval,
        } => deployments::alloc_health(
            tx,
            deployment_id,
            healthy,
            unhealthy,
            *timestamp,
            update.as_ref(),
            job.as_ref(),
            eval.as_ref(),
        ),
        Command::AllocUpdateDesiredTransition { transitions, evals } => {
            allocs::update_desired_transitions(tx, transitions);
            if !evals.is_empty() {
                evals::upsert(tx, evals)?;
            }
            Ok(plain)
        }
        Command::NodeUpdateDrain {
            node_id,
            drain_strategy,
            mark_eligible,
            complete,
            event,
            meta,
            updated_at,
        } => nodes::update_drain(
            tx,
            node_id,
            &nodes::DrainUpdate {
                strategy: drain_strategy.as_ref(),
                mark_eligible: *mark_eligible,
                complete: *complete,
                event: event.as_ref(),
                meta,
                updated_at: *updated_at,
            },
        )
        .map(|()| plain),
        Command::NodeUpdateEligibility {
            node_id,
            eligibility,
            event,
            updated_at: _,
        } => nodes::update_eligibility(tx, node_id, eligibility, event.as_ref()).map(|()| plain),
        Command::CsiVolumeRegister { volumes } => csi::register(tx, volumes).map(|()| plain),
        Command::CsiVolumeDeregister {
            namespace,
            volume_ids,
            force,
        } => csi::deregister(tx, namespace, volume_ids, *force).map(|()| plain),
        Command::CsiVolumeClaim {
            namespace,
            volume_id,
            claim,
        } => csi::claim(tx, namespace, volume_id, claim).map(|()| plain),
        Command::CsiControllerOpBegin { op } => csi::op_begin(tx, op).map(|()| plain),
        Command::CsiControllerOpEnd {
            plugin_id,
            op_id,
            owner,
            term,
        } => csi::op_end(tx, plugin_id, op_id, *owner, *term).map(|()| plain),
        Command::CsiControllerOpRenew { .. } => csi::op_renew(tx, cmd).map(|()| plain),
        Command::AclBootstrap { token, reset_index } => {
            acl::bootstrap(tx, token, *reset_index).map(|()| plain)
        }
        Command::AclPolicyUpsert { policies } => acl::upsert_policies(tx, policies).map(|()| plain),
        Command::AclPolicyDelete { names } => acl::delete_policies(tx, names).map(|()| plain),
        Command::AclTokenUpsert { tokens } => acl::upsert_tokens(tx, tokens).map(|()| plain),
        Command::AclTokenDelete { accessor_ids } => {
            acl::delete_tokens(tx, accessor_ids).map(|()| plain)
        }
        Command::AclRoleUpsert { roles } => acl::upsert_roles(tx, roles).map(|()| plain),
        Command::AclRoleDelete { ids } => acl::delete_roles(tx, ids).map(|()| plain),
        Command::AclOneTimeTokenUpsert { token } => acl::upsert_one_time(tx, token).map(|()| plain),
        Command::AclOneTimeTokenExchange {
            one_time_secret_id,
            now,
        } => acl::exchange_one_time(tx, one_time_secret_id, *now).map(|()| plain),
        Command::AclExpire { now } => {
            acl::expire(tx, *now);
            Ok(plain)
        }
        Command::NamespaceUpsert { namespaces } => {
            acl::upsert_namespaces(tx, namespaces).map(|()| plain)
        }
        Command::NamespaceDelete { names } => acl::delete_namespaces(tx, names).map(|()| plain),
        Command::VarApply { op, var, now } => variables::apply(tx, *op, var, *now),
        Command::RootKeyUpsert { key } => variables::upsert_root_key(tx, key).map(|()| plain),
        Command::RootKeyDelete { key_id } => variables::delete_root_key(tx, key_id).map(|()| plain),
        Command::JobStability {
            namespace,
            job_id,
            version,
            stable,
        } => jobs::set_job_stability(tx, namespace, job_id, *version, *stable).map(|()| plain),
        Command::JobVersionTag {
            namespace,
            job_id,
            name,
            version,
            latest,
            tag,
        } => jobs::tag_version(
            tx,
            &jobs::TagVersion {
                ns: namespace,
                job_id,
                name,
                version: *version,
                latest: *latest,
                tag: tag.as_ref(),
            },
        )
        .map(|()| plain),
        Command::SchedulerConfigSet { config, cas } => {
            scheduler_config::set(tx, config, *cas).map(|()| plain)
        }
        // The store replaces its whole root for a restore before the FSM sees commands.
        Command::StateRestore { .. } => Err(StateError::invalid(
            "a state restore is applied by the store, not the FSM",
        )),
    }
}

/// `Gc`: removes what is still as it was judged (see [`Command::Gc`]).
fn gc(
    tx: &mut Txn,
    evals: &[(String, u64)],
    allocs: &[(String, u64)],
    jobs: &[(String, String, u64)],
    deployments: &[(String, u64)],
    nodes: &[(String, u64)],
) -> Result<(), StateError> {
    let eval_ids: Vec<String> = evals
        .iter()
        .filter(|(id, at)| tx.evals().get(id).is_some_and(|e| e.modify_index == *at))
        .map(|(id, _)| id.clone())
        .collect();
    let alloc_ids: Vec<String> = allocs
        .iter()
        .filter(|(id, at)| tx.allocs().get(id).is_some_and(|a| a.modify_index == *at))
        .map(|(id, _)| id.clone())
        .collect();
    evals::delete(tx, &eval_ids, &alloc_ids);
    for (ns, id, at) in jobs {
        if tx.job(ns, id).is_some_and(|j| j.modify_index == Some(*at)) {
            jobs::deregister(tx, ns, id, true, None, 0)?;
        }
    }
    for (id, at) in deployments {
        if tx
            .deployments()
            .get(id)
            .is_some_and(|d| d.modify_index == *at)
        {
            tx.delete_deployment(id);
        }
    }
    let node_ids: Vec<String> = nodes
        .iter()
        .filter(|(id, at)| tx.nodes().get(id).is_some_and(|n| n.modify_index == *at))
        .map(|(id, _)| id.clone())
        .collect();
    if !node_ids.is_empty() {
        nodes::deregister(tx, &node_ids)?;
    }
    Ok(())
}
