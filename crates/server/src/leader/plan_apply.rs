//! The plan queue and the plan applier: the one place that settles conflicts between workers.
//!
//! Workers schedule in parallel on snapshots that may be stale by the time their plans arrive. The
//! applier takes plans one at a time, highest priority first (then in arrival order), and checks
//! each against the newest state ([`evaluate_plan`]): every node the plan places on must still exist
//! and be ready (and, for new placements, eligible and not draining), and the node's live
//! allocations, less those the plan stops or replaces, plus those it places, must fit
//! ([`scheduler::allocs_fit`]). A node that fails loses its whole part of the plan (stops included,
//! as in Nomad: a destructive update must not stop without its replacement); the rest commits —
//! unless the plan is all-at-once — and the result carries a refresh index, so the worker refreshes
//! its snapshot and schedules again. What commits is one raft entry ([`state::Command::PlanApply`]);
//! the evaluation updates the worker sent with the plan go in it only when the whole plan fit.
//!
//! The engine ([`PlanApplier`]) only orders and sequences; evaluating (CPU work over a snapshot) and
//! committing (raft) are commands the shell runs. On leadership loss it is flushed: every queued
//! plan, and the one in flight, is answered [`PlanError::NotLeader`]; a commit already handed to raft
//! may still land, which is harmless (the new leader's broker finds the evaluation unfinished in
//! state and runs it again against the newer state).

use super::limits::PLAN_QUEUE_MAX;
use model::alloc::{Allocation, ALLOC_DESIRED_STATUS_STOP};
use model::eval::Evaluation;
use model::node::{NodeStatus, SchedulingEligibility};
use model::plan::{Plan, PlanResult};
use state::{AllocStop, StateSnapshot, Table};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

/// What a worker hands the applier.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanSubmission {
    pub plan: Plan,
    /// The evaluation's update and the evaluations its scheduling created; committed with the plan
    /// only when all of the plan fits.
    pub evals: Vec<Evaluation>,
}

/// The verdict on one plan against one snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluated {
    /// What will be committed (its `alloc_index` is filled in after the commit).
    pub result: PlanResult,
    /// The raft entry to write; `None` when nothing is left to write.
    pub command: Option<state::Command>,
}

/// Checks `sub` against `snap` (the newest state) and builds the entry that commits what fits.
pub fn evaluate_plan(snap: &StateSnapshot, sub: &PlanSubmission) -> Evaluated {
    let plan = &sub.plan;
    let mut result = PlanResult::default();
    let touched: BTreeSet<&String> = plan
        .node_update
        .keys()
        .chain(plan.node_allocation.keys())
        .chain(plan.node_preemptions.keys())
        .collect();
    let mut partial = false;
    for node_id in touched {
        if let Err(why) = check_node(snap, plan, node_id) {
            tracing::debug!(eval_id = %plan.eval_id, node_id = %node_id, reason = %why, "plan rejected on node");
            partial = true;
            result.rejected_nodes.push(node_id.clone());
            if plan.all_at_once {
                break;
            }
            continue;
        }
        copy_node(plan, node_id, &mut result);
    }
    if partial && plan.all_at_once {
        result.node_update.clear();
        result.node_allocation.clear();
        result.node_preemptions.clear();
    } else {
        result.deployment.clone_from(&plan.deployment);
        result
            .deployment_updates
            .clone_from(&plan.deployment_updates);
        correct_canaries(&mut result);
    }
    if partial {
        result.refresh_index = snap.max_table_index(&[Table::Nodes, Table::Allocs]).max(1);
    }
    let evals = if partial { &[][..] } else { &sub.evals[..] };
    let command =
        (!result.is_no_op() || !evals.is_empty()).then(|| commit_command(plan, &result, evals));
    Evaluated { result, command }
}

/// Whether the plan's part on `node_id` still fits the newest state; the reason when not.
fn check_node(snap: &StateSnapshot, plan: &Plan, node_id: &str) -> Result<(), String> {
    let placing = plan
        .node_allocation
        .get(node_id)
        .map_or(&[][..], Vec::as_slice);
    if placing.is_empty() {
        // Only stops and evictions: always allowed.
        return Ok(());
    }
    let node = snap
        .node(node_id)
        .ok_or_else(|| "node does not exist".to_string())?;
    let existing = snap.allocs_by_node(node_id);
    let existing_ids: HashSet<&str> = existing.iter().map(|a| a.id.as_str()).collect();
    // Allocations of a disconnected node marked `unknown`: nothing is placed or resized.
    let marking_unknown = node.status_kind() == Some(NodeStatus::Disconnected)
        && placing.iter().all(|a| {
            existing_ids.contains(a.id.as_str())
                && a.client_status == model::alloc::ALLOC_CLIENT_STATUS_UNKNOWN
        });
    if marking_unknown {
        return Ok(());
    }
    if node.status_kind() != Some(NodeStatus::Ready) {
        return Err("node is not ready for placements".into());
    }
    let placing_new = placing
        .iter()
        .any(|a| !existing_ids.contains(a.id.as_str()));
    if placing_new && node.scheduling_eligibility == SchedulingEligibility::Ineligible.as_str() {
        return Err("node is not eligible".into());
    }
    if placing_new && node.drain_strategy.is_some() {
        return Err("node is draining".into());
    }
    let mut leaving: HashSet<&str> = placing.iter().map(|a| a.id.as_str()).collect();
    for gone in [&plan.node_update, &plan.node_preemptions] {
        if let Some(allocs) = gone.get(node_id) {
            leaving.extend(allocs.iter().map(|a| a.id.as_str()));
        }
    }
    let mut proposed: Vec<&Allocation> = existing
        .iter()
        .map(|a| &**a)
        .filter(|a| !a.is_terminal() && !leaving.contains(a.id.as_str()))
        .collect();
    proposed.extend(placing);
    scheduler::allocs_fit(&node, &proposed).map_err(|e| e.message)
}

fn copy_node(plan: &Plan, node_id: &str, result: &mut PlanResult) {
    for (from, to) in [
        (&plan.node_update, &mut result.node_update),
        (&plan.node_allocation, &mut result.node_allocation),
        (&plan.node_preemptions, &mut result.node_preemptions),
    ] {
        if let Some(allocs) = from.get(node_id).filter(|a| !a.is_empty()) {
            to.insert(node_id.to_owned(), allocs.clone());
        }
    }
}

/// Nomad's `correctDeploymentCanaries`: a deployment lists only the canaries that were committed.
fn correct_canaries(result: &mut PlanResult) {
    let committed: HashSet<&str> = result
        .node_allocation
        .values()
        .flatten()
        .map(|a| a.id.as_str())
        .collect();
    let Some(deployment) = result.deployment.as_mut() else {
        return;
    };
    for state in deployment.task_groups.values_mut() {
        state
            .placed_canaries
            .retain(|id| committed.contains(id.as_str()));
    }
}

/// The raft entry for a result: placements carry no job (the entry carries the plan's once).
fn commit_command(plan: &Plan, result: &PlanResult, evals: &[Evaluation]) -> state::Command {
    let job = plan.job.as_deref().cloned();
    let allocs_upsert = result
        .node_allocation
        .values()
        .flatten()
        .map(|a| {
            let mut a = a.clone();
            if job.is_some() {
                a.job = None;
            }
            a
        })
        .collect();
    let allocs_stop = result
        .node_update
        .values()
        .chain(result.node_preemptions.values())
        .flatten()
        .map(|a| AllocStop {
            alloc_id: a.id.clone(),
            desired_status: if a.desired_status.is_empty() {
                ALLOC_DESIRED_STATUS_STOP.into()
            } else {
                a.desired_status.clone()
            },
            desired_description: a.desired_description.clone(),
            // Only the scheduler's own `lost` goes through: any other status on the stopped
            // copy is the worker's snapshot of the client's report, maybe older than the stored
            // one (a stale `unknown` would undo a reconnect's `running`).
            client_status: if a.client_status == model::alloc::ALLOC_CLIENT_STATUS_LOST {
                a.client_status.clone()
            } else {
                String::new()
            },
            followup_eval_id: a.followup_eval_id.clone(),
            modify_time: a.modify_time,
        })
        .collect();
    state::Command::PlanApply {
        eval_id: plan.eval_id.clone(),
        job,
        allocs_upsert,
        allocs_stop,
        evals: evals.to_vec(),
        deployment: result.deployment.clone(),
        deployment_updates: result.deployment_updates.clone(),
    }
}

// ----- the engine -----

/// Names a submitted plan until it is answered.
pub type PlanId = u64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("the plan queue is full ({0} plans waiting); try again later")]
    QueueFull(usize),
    #[error("this server lost leadership before the plan was applied")]
    NotLeader,
    #[error("committing the plan failed: {0}")]
    Commit(String),
}

#[derive(Debug)]
pub enum Event {
    Submit {
        id: PlanId,
        submission: Arc<PlanSubmission>,
    },
    /// The shell evaluated the in-flight plan against the newest state.
    Evaluated { id: PlanId, outcome: Box<Evaluated> },
    /// Its entry was committed (and applied) at `index`.
    Committed { id: PlanId, index: u64 },
    /// Evaluating or committing the plan in flight failed.
    Failed { id: PlanId, error: String },
    /// Leadership lost.
    Flush,
}

// A handful of commands live at a time, each moved once; boxing the result would only cost callers.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Evaluate this plan against the newest state, then report [`Event::Evaluated`].
    Evaluate {
        id: PlanId,
        submission: Arc<PlanSubmission>,
    },
    /// Write this entry through raft, then report [`Event::Committed`] or [`Event::Failed`].
    Commit {
        id: PlanId,
        command: Box<state::Command>,
    },
    Reply {
        id: PlanId,
        result: Result<PlanResult, PlanError>,
    },
}

enum InFlight {
    Evaluating(PlanId),
    Committing(PlanId, Box<PlanResult>),
}

/// The plan queue and the one-at-a-time sequence of evaluate → commit → reply.
#[derive(Default)]
pub struct PlanApplier {
    /// `(priority, arrival)` → the plan: highest priority first, then first come.
    queue: BTreeMap<(Reverse<i32>, PlanId), Arc<PlanSubmission>>,
    in_flight: Option<InFlight>,
}

impl PlanApplier {
    pub fn new() -> PlanApplier {
        PlanApplier::default()
    }

    /// Plans waiting, not counting the one in flight.
    #[cfg(test)]
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    pub fn handle(&mut self, event: Event) -> Vec<Command> {
        let mut out = Vec::new();
        match event {
            Event::Submit { id, submission } => {
                if self.queue.len() >= PLAN_QUEUE_MAX {
                    out.push(Command::Reply {
                        id,
                        result: Err(PlanError::QueueFull(self.queue.len())),
                    });
                } else {
                    let key = (Reverse(submission.plan.priority), id);
                    self.queue.insert(key, submission);
                }
            }
            Event::Evaluated { id, outcome } => {
                if !matches!(self.in_flight, Some(InFlight::Evaluating(f)) if f == id) {
                    return out;
                }
                let Evaluated { result, command } = *outcome;
                match command {
                    Some(command) => {
                        self.in_flight = Some(InFlight::Committing(id, Box::new(result)));
                        out.push(Command::Commit {
                            id,
                            command: Box::new(command),
                        });
                    }
                    None => {
                        self.in_flight = None;
                        out.push(Command::Reply {
                            id,
                            result: Ok(result),
                        });
                    }
                }
            }
            Event::Committed { id, index } => {
                if let Some(mut result) = self.take_committing(id) {
                    result.alloc_index = index;
                    out.push(Command::Reply {
                        id,
                        result: Ok(*result),
                    });
                }
            }
            Event::Failed { id, error } => {
                if self.in_flight_id() == Some(id) {
                    self.in_flight = None;
                    out.push(Command::Reply {
                        id,
                        result: Err(PlanError::Commit(error)),
                    });
                }
            }
            Event::Flush => {
                let in_flight = self.in_flight_id();
                self.in_flight = None;
                let queued = std::mem::take(&mut self.queue)
                    .into_keys()
                    .map(|(_, id)| id);
                for id in in_flight.into_iter().chain(queued) {
                    out.push(Command::Reply {
                        id,
                        result: Err(PlanError::NotLeader),
                    });
                }
                return out;
            }
        }
        self.start_next(&mut out);
        out
    }

    fn in_flight_id(&self) -> Option<PlanId> {
        match &self.in_flight {
            Some(InFlight::Evaluating(id) | InFlight::Committing(id, _)) => Some(*id),
            None => None,
        }
    }

    fn take_committing(&mut self, id: PlanId) -> Option<Box<PlanResult>> {
        match self.in_flight.take() {
            Some(InFlight::Committing(f, result)) if f == id => Some(result),
            other => {
                self.in_flight = other;
                None
            }
        }
    }

    fn start_next(&mut self, out: &mut Vec<Command>) {
        if self.in_flight.is_some() {
            return;
        }
        let Some(((_, id), submission)) = self.queue.pop_first() else {
            return;
        };
        self.in_flight = Some(InFlight::Evaluating(id));
        out.push(Command::Evaluate { id, submission });
    }
}

#[cfg(test)]
#[path = "plan_apply_tests.rs"]
mod tests;
