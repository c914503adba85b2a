//! Operators' node writes: drain (Nomad's `Node.UpdateDrain`), scheduling eligibility
//! (`Node.UpdateEligibility`) and a forced evaluation of the node's jobs (`Node.Evaluate`). The
//! drain itself is carried out by the leader's drainer (`leader/drain.rs`).

use super::node::node_evals;
use super::now_nanos;
use crate::error::ServerError;
use crate::server::Server;
use model::node::{
    DrainStrategy, Node, NodeEvent, SchedulingEligibility, NODE_EVENT_DRAIN_DISABLED,
    NODE_EVENT_DRAIN_SET, NODE_EVENT_DRAIN_UPDATED, NODE_EVENT_ELIGIBLE, NODE_EVENT_INELIGIBLE,
    NODE_EVENT_SUBSYSTEM_CLUSTER, NODE_EVENT_SUBSYSTEM_DRAIN,
};
use model::time::format_unix_nanos;
use model::wire::{NodeUpdateDrainRequest, NodeUpdateEligibilityRequest, NodeWriteResponse};
use state::Command;
use std::sync::Arc;

impl Server {
    /// `Node.UpdateDrain`: sets (or with no `DrainSpec`, ends) the node's drain.
    pub async fn node_update_drain(
        &self,
        req: NodeUpdateDrainRequest,
    ) -> Result<NodeWriteResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::NodeUpdateDrain>(&leader, &req)
                    .await
            }
            None => self.node_update_drain_local(req).await,
        }
    }

    /// On the leader: the strategy gets its start (kept from a drain in progress) and its force
    /// deadline; ending a drain with `MarkEligible` evaluates the node's jobs, as Nomad does, since
    /// system jobs may now run there.
    pub(crate) async fn node_update_drain_local(
        &self,
        req: NodeUpdateDrainRequest,
    ) -> Result<NodeWriteResponse, ServerError> {
        let node = self.operated_node(&req.node_id)?;
        let now = now_nanos();
        let strategy = req.drain_spec.as_ref().map(|spec| {
            let started_at = node
                .drain_strategy
                .as_ref()
                .and_then(|s| s.started_at.clone())
                .unwrap_or_else(|| format_unix_nanos(now));
            DrainStrategy {
                deadline: spec.deadline,
                ignore_system_jobs: spec.ignore_system_jobs,
                force_deadline: (spec.deadline.0 > 0)
                    .then(|| format_unix_nanos(now.saturating_add(spec.deadline.0))),
                started_at: Some(started_at),
            }
        });
        let message = match (&node.drain_strategy, &strategy) {
            (None, Some(_)) => Some(NODE_EVENT_DRAIN_SET),
            (Some(_), Some(_)) => Some(NODE_EVENT_DRAIN_UPDATED),
            (Some(_), None) => Some(NODE_EVENT_DRAIN_DISABLED),
            (None, None) => None,
        };
        let becomes_eligible = strategy.is_none()
            && req.mark_eligible
            && node.scheduling_eligibility == SchedulingEligibility::Ineligible;
        let cmd = Command::NodeUpdateDrain {
            node_id: node.id.clone(),
            drain_strategy: strategy,
            mark_eligible: req.mark_eligible,
            complete: false,
            event: message.map(|m| event(NODE_EVENT_SUBSYSTEM_DRAIN, m, now)),
            meta: req.meta,
            updated_at: now / 1_000_000_000,
        };
        let index = self.apply(cmd).await?.index;
        self.node_write_response(&node.id, index, becomes_eligible)
            .await
    }

    /// `Node.UpdateEligibility`.
    pub async fn node_update_eligibility(
        &self,
        req: NodeUpdateEligibilityRequest,
    ) -> Result<NodeWriteResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::NodeUpdateEligibility>(&leader, &req)
                    .await
            }
            None => self.node_update_eligibility_local(req).await,
        }
    }

    /// On the leader: refuses to make a draining node eligible; nothing changes when the node
    /// already has that eligibility; becoming eligible evaluates the node's jobs.
    pub(crate) async fn node_update_eligibility_local(
        &self,
        req: NodeUpdateEligibilityRequest,
    ) -> Result<NodeWriteResponse, ServerError> {
        let Some(wanted) = SchedulingEligibility::parse(&req.eligibility) else {
            return Err(ServerError::bad_request(format!(
                "Eligibility: invalid scheduling eligibility {:?}; expected one of {}",
                req.eligibility,
                SchedulingEligibility::NAMES.join(", ")
            )));
        };
        let node = self.operated_node(&req.node_id)?;
        if node.drain_strategy.is_some() && wanted == SchedulingEligibility::Eligible {
            return Err(ServerError::bad_request(
                "can not set node's scheduling eligibility to eligible while it is draining",
            ));
        }
        if node.scheduling_eligibility == wanted {
            return Ok(NodeWriteResponse {
                node_modify_index: node.modify_index,
                index: node.modify_index,
                ..NodeWriteResponse::default()
            });
        }
        let now = now_nanos();
        let message = if wanted == SchedulingEligibility::Eligible {
            NODE_EVENT_ELIGIBLE
        } else {
            NODE_EVENT_INELIGIBLE
        };
        let cmd = Command::NodeUpdateEligibility {
            node_id: node.id.clone(),
            eligibility: wanted.clone(),
            event: Some(event(NODE_EVENT_SUBSYSTEM_CLUSTER, message, now)),
            updated_at: now / 1_000_000_000,
        };
        let index = self.apply(cmd).await?.index;
        let eligible = wanted == SchedulingEligibility::Eligible;
        self.node_write_response(&node.id, index, eligible).await
    }

    /// `Node.Evaluate`: an evaluation of every job with allocations on the node and of the system
    /// jobs that may run there.
    pub async fn node_evaluate(&self, node_id: String) -> Result<NodeWriteResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::NodeEvaluate>(
                    &leader,
                    &crate::methods::NodeRef { node_id },
                )
                .await
            }
            None => self.node_evaluate_local(node_id).await,
        }
    }

    pub(crate) async fn node_evaluate_local(
        &self,
        node_id: String,
    ) -> Result<NodeWriteResponse, ServerError> {
        let node = self.operated_node(&node_id)?;
        let index = self.state().snapshot().table_index(state::Table::Nodes);
        self.node_write_response(&node.id, index, true).await
    }

    /// `/v1/node/:id/purge`: the node removed, with evaluations of every job that had
    /// allocations on it (so they are placed elsewhere), in one raft entry.
    pub async fn node_purge(&self, node_id: String) -> Result<NodeWriteResponse, ServerError> {
        match self.forward_target().await? {
            Some(leader) => {
                self.forward::<crate::methods::NodePurge>(
                    &leader,
                    &crate::methods::NodeRef { node_id },
                )
                .await
            }
            None => self.node_purge_local(node_id).await,
        }
    }

    pub(crate) async fn node_purge_local(
        &self,
        node_id: String,
    ) -> Result<NodeWriteResponse, ServerError> {
        let node = self.operated_node(&node_id)?;
        let snap = self.state().snapshot();
        let evals = node_evals(&snap, &node, now_nanos());
        let eval_ids: Vec<String> = evals.iter().map(|e| e.id.clone()).collect();
        let index = self
            .apply(Command::NodePurge {
                node_id: node.id.clone(),
                evals,
            })
            .await?
            .index;
        Ok(NodeWriteResponse {
            eval_create_index: if eval_ids.is_empty() { 0 } else { index },
            eval_ids,
            node_modify_index: index,
            index,
        })
    }

    /// The node an operator names; the ID is required.
    fn operated_node(&self, node_id: &str) -> Result<Arc<Node>, ServerError> {
        if node_id.is_empty() {
            return Err(ServerError::bad_request("NodeID: missing node ID"));
        }
        self.state()
            .snapshot()
            .node(node_id)
            .ok_or_else(|| ServerError::not_found(format!("node not found: {node_id}")))
    }

    /// The answer to a node write at `index`, after writing the evaluations of the node's jobs
    /// when `evaluate`.
    async fn node_write_response(
        &self,
        node_id: &str,
        index: u64,
        evaluate: bool,
    ) -> Result<NodeWriteResponse, ServerError> {
        let snap = self.state().snapshot();
        let node = snap
            .node(node_id)
            .ok_or_else(|| ServerError::not_found(format!("node not found: {node_id}")))?;
        let mut resp = NodeWriteResponse {
            node_modify_index: node.modify_index,
            index,
            ..NodeWriteResponse::default()
        };
        if evaluate {
            let evals = node_evals(&snap, &node, now_nanos());
            if !evals.is_empty() {
                resp.eval_ids = evals.iter().map(|e| e.id.clone()).collect();
                resp.index = self.apply(Command::EvalUpsert { evals }).await?.index;
                resp.eval_create_index = resp.index;
            }
        }
        Ok(resp)
    }
}

fn event(subsystem: &str, message: &str, now: i64) -> NodeEvent {
    NodeEvent {
        message: message.into(),
        subsystem: subsystem.into(),
        timestamp: Some(format_unix_nanos(now)),
        ..NodeEvent::default()
    }
}
