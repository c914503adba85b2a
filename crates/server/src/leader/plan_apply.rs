//! The plan queue and the plan applier: the one place that settles conflicts between workers.
//!
//! Workers schedule in parallel on snapshots that may be stale by the time their plans arrive. The
//! applier takes plans highest priority first (then in arrival order), and checks each against the
//! newest state ([`evaluate_plan`]): every node the plan places on must still exist and be ready
//! (and, for new placements, eligible and not draining), and the node's live allocations, less
//! those the plan stops or replaces, plus those it places, must fit ([`scheduler::allocs_fit`]). A
//! node that fails loses its whole part of the plan (stops included, as in Nomad: a destructive
//! update must not stop without its replacement); the rest commits — unless the plan is
//! all-at-once — and the result carries a refresh index, so the worker refreshes its snapshot and
//! schedules again. A plan's commit is [`state::Command::PlanApply`]; the evaluation updates the
//! worker sent with the plan go in it only when the whole plan fit.
//!
//! Pipelined, as Nomad's: while one entry commits, the plans queued meanwhile are checked as one
//! batch against the newest state with that entry laid over it optimistically ([`PlanView`]),
//! each on top of the ones before it ([`evaluate_batch`]), and they go to Raft together
//! ([`state::Command::PlanApplyBatch`]) once the entry is applied.
//!
//! The engine ([`PlanApplier`]) only orders and sequences; evaluating (CPU work over snapshots) and
//! committing (raft) are commands the shell runs. On leadership loss it is flushed: every queued
//! plan, and those in flight, are answered [`PlanError::NotLeader`]; a commit already handed to
//! raft may still land, which is harmless (the new leader's broker finds the evaluation
//! unfinished in state and runs it again against the newer state).

use super::limits::{PLAN_BATCH_ALLOCS_MAX, PLAN_BATCH_MAX, PLAN_QUEUE_MAX};
use model::alloc::{Allocation, DesiredStatus};
use model::eval::Evaluation;
use model::node::{NodeStatus, SchedulingEligibility};
use model::plan::{Plan, PlanResult};
use state::{AllocStop, StateSnapshot, Table};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
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

/// What a plan is checked against: a state snapshot, with the placements and stops of plan
/// entries not applied to it yet laid over the nodes they touch. Only what the fit check reads
/// (each node's allocations) is laid over; laying an entry the snapshot already holds changes
/// nothing (allocations are replaced by ID).
#[derive(Clone)]
pub struct PlanView {
    snap: StateSnapshot,
    /// Node ID → its allocations with the entries laid over.
    nodes: HashMap<String, Vec<Arc<Allocation>>>,
}

impl PlanView {
    pub fn new(snap: StateSnapshot) -> PlanView {
        PlanView {
            snap,
            nodes: HashMap::new(),
        }
    }

    fn node(&self, id: &str) -> Option<Arc<model::node::Node>> {
        self.snap.node(id)
    }

    fn allocs_by_node(&self, id: &str) -> Vec<Arc<Allocation>> {
        match self.nodes.get(id) {
            Some(allocs) => allocs.clone(),
            None => self.snap.allocs_by_node(id),
        }
    }

    /// Lays a plan entry (`PlanApply` or `PlanApplyBatch`) over the view, as the FSM would apply
    /// it as far as the fit check can tell.
    pub fn lay(&mut self, command: &state::Command) {
        match command {
            state::Command::PlanApply {
                job,
                allocs_upsert,
                allocs_stop,
                ..
            } => {
                for stop in allocs_stop {
                    let Some(stored) = self.snap.alloc(&stop.alloc_id) else {
                        continue;
                    };
                    let mut stopped = (*stored).clone();
                    stopped.desired_status.clone_from(&stop.desired_status);
                    if let Some(status) = &stop.client_status {
                        stopped.client_status.clone_from(status);
                    }
                    self.put(Arc::new(stopped));
                }
                let job = job.as_ref().map(|j| Arc::new(j.clone()));
                for placed in allocs_upsert {
                    let mut placed = placed.clone();
                    if placed.job.is_none() {
                        placed.job.clone_from(&job);
                    }
                    self.put(Arc::new(placed));
                }
            }
            state::Command::PlanApplyBatch { plans } => plans.iter().for_each(|p| self.lay(p)),
            _ => {}
        }
    }

    fn put(&mut self, alloc: Arc<Allocation>) {
        let allocs = match self.nodes.entry(alloc.node_id.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(self.snap.allocs_by_node(&alloc.node_id))
            }
        };
        match allocs.iter_mut().find(|a| a.id == alloc.id) {
            Some(slot) => *slot = alloc,
            None => allocs.push(alloc),
        }
    }
}

/// Checks `sub` against `snap` (the newest state) and builds the entry that commits what fits.
pub fn evaluate_plan(snap: &StateSnapshot, sub: &PlanSubmission) -> Evaluated {
    evaluate_on(&PlanView::new(snap.clone()), sub)
}

/// [`evaluate_plan`] against a view with entries laid over.
fn evaluate_on(snap: &PlanView, sub: &PlanSubmission) -> Evaluated {
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
        // Nomad's evaluatePlan: only live allocations are evicted (one that finished or went
        // meanwhile is left as it is, and its job is not evaluated for it).
        if let Some(evicted) = result.node_preemptions.get_mut(node_id.as_str()) {
            let live: HashSet<String> = snap
                .allocs_by_node(node_id)
                .iter()
                .filter(|a| !a.is_terminal())
                .map(|a| a.id.clone())
                .collect();
            evicted.retain(|a| live.contains(&a.id));
            if evicted.is_empty() {
                result.node_preemptions.remove(node_id.as_str());
            }
        }
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
        result.refresh_index = snap
            .snap
            .max_table_index(&[Table::Nodes, Table::Allocs])
            .max(1);
    }
    let mut evals = if partial {
        Vec::new()
    } else {
        sub.evals.clone()
    };
    evals.extend(preemption_evals(&snap.snap, plan, &result));
    let command =
        (!result.is_no_op() || !evals.is_empty()).then(|| commit_command(plan, &result, &evals));
    Evaluated { result, command }
}

/// One evaluation per job that loses allocations to preemption, so its scheduler places them
/// again (Nomad's `PreemptionEvals`); committed in the same entry as the evictions. Their IDs
/// derive from the plan's evaluation and the job, so every check of the plan makes the same ones.
fn preemption_evals(snap: &StateSnapshot, plan: &Plan, result: &PlanResult) -> Vec<Evaluation> {
    // Per job: when, and the evicted allocations (in the ID, so a retry of the same evaluation
    // that evicts others of the job writes a new evaluation rather than reusing a finished one).
    let mut jobs: BTreeMap<(&str, &str), (i64, Vec<&str>)> = BTreeMap::new();
    for a in result.node_preemptions.values().flatten() {
        let entry = jobs
            .entry((a.namespace.as_str(), a.job_id.as_str()))
            .or_insert((a.modify_time, Vec::new()));
        entry.1.push(a.id.as_str());
    }
    jobs.into_iter()
        .filter_map(|((ns, job_id), (now, mut victims))| {
            let job = snap.job(ns, job_id)?;
            victims.sort_unstable();
            Some(Evaluation {
                id: super::derived_id(
                    &plan.eval_id,
                    &format!("preemption/{ns}/{job_id}/{}", victims.join(",")),
                ),
                namespace: ns.to_string(),
                priority: job.priority.unwrap_or(model::job::DEFAULT_PRIORITY),
                eval_type: job.job_type.clone().unwrap_or_default(),
                triggered_by: model::eval::EVAL_TRIGGER_PREEMPTION.into(),
                job_id: job_id.to_string(),
                job_modify_index: job.job_modify_index.unwrap_or(0),
                status: model::EvalStatus::Pending,
                create_time: now,
                modify_time: now,
                ..Evaluation::default()
            })
        })
        .collect()
}

/// Whether the plan's part on `node_id` still fits the newest state; the reason when not.
fn check_node(snap: &PlanView, plan: &Plan, node_id: &str) -> Result<(), String> {
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
    let marking_unknown = node.status == NodeStatus::Disconnected
        && placing.iter().all(|a| {
            existing_ids.contains(a.id.as_str())
                && a.client_status == model::alloc::ClientStatus::Unknown
        });
    if marking_unknown {
        return Ok(());
    }
    if node.status != NodeStatus::Ready {
        return Err("node is not ready for placements".into());
    }
    let placing_new = placing
        .iter()
        .any(|a| !existing_ids.contains(a.id.as_str()));
    if placing_new && node.scheduling_eligibility == SchedulingEligibility::Ineligible {
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
            // A stop list holds only stops and evictions; `run` there is read as a stop.
            desired_status: if a.desired_status == DesiredStatus::Run {
                DesiredStatus::Stop
            } else {
                a.desired_status.clone()
            },
            desired_description: a.desired_description.clone(),
            // Only the scheduler's own `lost` goes through: any other status on the stopped
            // copy is the worker's snapshot of the client's report, maybe older than the stored
            // one (a stale `unknown` would undo a reconnect's `running`).
            client_status: (a.client_status == model::alloc::ClientStatus::Lost)
                .then_some(model::alloc::ClientStatus::Lost),
            followup_eval_id: a.followup_eval_id.clone(),
            modify_time: a.modify_time,
            preempted_by: a.preempted_by_allocation.clone(),
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

/// The verdicts on a batch, in order: each plan is checked against the newest state with the
/// entry in commit (`under`) and the plans before it in the batch laid over ([`PlanView`]). A
/// rejected plan's refresh index is the newest state's; the engine raises it to the entry that
/// commits the batch.
pub fn evaluate_batch(
    newest: &StateSnapshot,
    under: Option<&state::Command>,
    batch: &Batch,
) -> Vec<(PlanId, Evaluated)> {
    let mut view = PlanView::new(newest.clone());
    if let Some(entry) = under {
        view.lay(entry);
    }
    let mut verdicts = Vec::with_capacity(batch.len());
    for (i, (id, submission)) in batch.iter().enumerate() {
        let verdict = evaluate_on(&view, submission);
        if let Some(command) = verdict.command.as_ref().filter(|_| i + 1 < batch.len()) {
            view.lay(command);
        }
        verdicts.push((*id, verdict));
    }
    verdicts
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

/// How many allocations a plan places, stops and evicts.
fn plan_allocs(plan: &Plan) -> usize {
    [
        &plan.node_allocation,
        &plan.node_update,
        &plan.node_preemptions,
    ]
    .iter()
    .flat_map(|m| m.values())
    .map(Vec::len)
    .sum()
}

/// Plans, in the order they are evaluated and committed.
pub type Batch = Vec<(PlanId, Arc<PlanSubmission>)>;

#[derive(Debug)]
pub enum Event {
    Submit {
        id: PlanId,
        submission: Arc<PlanSubmission>,
    },
    /// The shell evaluated the batch it was given: a verdict per plan, in the batch's order.
    Evaluated { verdicts: Vec<(PlanId, Evaluated)> },
    /// Evaluating the batch failed (a panic): its plans are answered with the error.
    EvaluationFailed { error: String },
    /// The entry in commit was applied at `index`; `errors` has each plan's error when the entry
    /// held several (`state::Command::PlanApplyBatch`).
    Committed {
        index: u64,
        errors: Vec<Option<String>>,
    },
    /// Writing the entry in commit failed.
    CommitFailed { error: String },
    /// Leadership lost.
    Flush,
}

// A handful of commands live at a time, each moved once; boxing the result would only cost callers.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Evaluate these plans in order, each against the newest state with the verdicts before it
    /// applied, then report [`Event::Evaluated`]. `over_commit`: the entry in commit is not applied
    /// yet; evaluate on top of it as if it were (the shell kept it when it sent it to Raft).
    Evaluate { batch: Batch, over_commit: bool },
    /// Write this entry through Raft, then report [`Event::Committed`] or [`Event::CommitFailed`].
    Commit { command: Box<state::Command> },
    Reply {
        id: PlanId,
        result: Result<PlanResult, PlanError>,
    },
}

struct Evaluating {
    batch: Batch,
    over_commit: bool,
    /// The commit this evaluation builds on failed: its verdicts are void.
    void: bool,
}

struct Ready {
    batch: Batch,
    verdicts: Vec<(PlanId, Evaluated)>,
    over_commit: bool,
}

/// A plan of the entry in commit: its result, and its place in the entry (`None`: it writes
/// nothing, but its answer waits for the entry, whose state it was checked against).
struct Committing {
    id: PlanId,
    result: PlanResult,
    in_entry: Option<usize>,
}

/// The plan queue and the pipeline: one batch commits while the next is evaluated against the
/// state with the first applied optimistically (Nomad's pipelined plan apply), and the plans
/// that queued up while one commit was in flight go into the next entry together.
///
/// Why this never overcommits a node: everything that takes room on a node is written by this
/// applier, one entry after another. A batch is evaluated against the newest state plus every
/// entry before it that is not applied yet (at most one: the next entry is sent only once the
/// previous one is applied) plus the plans before it in the batch. When an entry under an
/// evaluation fails, that evaluation's verdicts are void and its plans are evaluated again.
#[derive(Default)]
pub struct PlanApplier {
    /// `(priority, arrival)` → the plan: highest priority first, then first come.
    queue: BTreeMap<(Reverse<i32>, PlanId), Arc<PlanSubmission>>,
    evaluating: Option<Evaluating>,
    /// The evaluated batch waiting for the entry in commit.
    ready: Option<Ready>,
    committing: Option<Vec<Committing>>,
    /// The index of the last entry applied: a rejected plan refreshes to at least it.
    last_index: u64,
    /// Nothing is checked until the entry in commit is settled (it did not apply to the state
    /// the last batch was to be checked on).
    hold: bool,
}

impl PlanApplier {
    pub fn new() -> PlanApplier {
        PlanApplier::default()
    }

    /// Plans waiting, not counting those in flight.
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
            Event::Evaluated { verdicts } => {
                let Some(evaluating) = self.evaluating.take() else {
                    return out;
                };
                if evaluating.void {
                    self.requeue(evaluating.batch);
                } else {
                    let mut batch = evaluating.batch;
                    let unchecked = batch.split_off(verdicts.len().min(batch.len()));
                    if !unchecked.is_empty() {
                        // Checked again once the entry under them is settled.
                        self.hold = evaluating.over_commit && self.committing.is_some();
                        self.requeue(unchecked);
                    }
                    if !verdicts.is_empty() {
                        self.ready = Some(Ready {
                            batch,
                            verdicts,
                            over_commit: evaluating.over_commit,
                        });
                    }
                }
            }
            Event::EvaluationFailed { error } => {
                if let Some(evaluating) = self.evaluating.take() {
                    for (id, _) in evaluating.batch {
                        out.push(Command::Reply {
                            id,
                            result: Err(PlanError::Commit(error.clone())),
                        });
                    }
                }
            }
            Event::Committed { index, errors } => {
                let Some(plans) = self.committing.take() else {
                    return out;
                };
                self.hold = false;
                self.last_index = self.last_index.max(index);
                if errors.iter().any(Option::is_some) {
                    // What was checked on top of the plans that failed is void.
                    self.void_over_commit();
                }
                for Committing {
                    id,
                    mut result,
                    in_entry,
                } in plans
                {
                    let error = in_entry.and_then(|i| errors.get(i).cloned().flatten());
                    let result = match error {
                        Some(e) => Err(PlanError::Commit(e)),
                        None => {
                            if in_entry.is_some() {
                                result.alloc_index = index;
                            }
                            self.raise_refresh(&mut result);
                            Ok(result)
                        }
                    };
                    out.push(Command::Reply { id, result });
                }
            }
            Event::CommitFailed { error } => {
                let Some(plans) = self.committing.take() else {
                    return out;
                };
                self.hold = false;
                for p in plans {
                    out.push(Command::Reply {
                        id: p.id,
                        result: Err(PlanError::Commit(error.clone())),
                    });
                }
                // What was checked on top of the failed entry is void.
                self.void_over_commit();
            }
            Event::Flush => {
                self.hold = false;
                let in_flight = self
                    .committing
                    .take()
                    .into_iter()
                    .flatten()
                    .map(|p| p.id)
                    .chain(
                        self.ready
                            .take()
                            .into_iter()
                            .flat_map(|r| r.batch)
                            .map(|p| p.0),
                    )
                    .chain(
                        self.evaluating
                            .take()
                            .into_iter()
                            .flat_map(|e| e.batch)
                            .map(|p| p.0),
                    );
                let queued = std::mem::take(&mut self.queue)
                    .into_keys()
                    .map(|(_, id)| id);
                for id in in_flight.chain(queued) {
                    out.push(Command::Reply {
                        id,
                        result: Err(PlanError::NotLeader),
                    });
                }
                return out;
            }
        }
        self.advance(&mut out);
        out
    }

    /// Voids what was checked on top of the entry in commit (it failed, or part of it did): the
    /// batch under evaluation is checked again when it comes back, the one checked already at once.
    fn void_over_commit(&mut self) {
        if let Some(evaluating) = self.evaluating.as_mut() {
            evaluating.void |= evaluating.over_commit;
        }
        if self.ready.as_ref().is_some_and(|r| r.over_commit) {
            let ready = self.ready.take().expect("checked");
            self.requeue(ready.batch);
        }
    }

    /// A rejected plan refreshes to a state with everything it was checked against applied.
    fn raise_refresh(&self, result: &mut PlanResult) {
        if result.refresh_index != 0 {
            result.refresh_index = result.refresh_index.max(self.last_index);
        }
    }

    fn requeue(&mut self, batch: Batch) {
        // Back in the queue under their first keys: their places in line are kept.
        for (id, submission) in batch {
            self.queue
                .insert((Reverse(submission.plan.priority), id), submission);
        }
    }

    fn advance(&mut self, out: &mut Vec<Command>) {
        if self.committing.is_none() {
            if let Some(ready) = self.ready.take() {
                self.send_entry(ready, out);
            }
        }
        let held = self.hold && self.committing.is_some();
        if self.evaluating.is_none() && self.ready.is_none() && !held && !self.queue.is_empty() {
            let mut batch = Batch::new();
            let mut allocs = 0;
            while batch.len() < PLAN_BATCH_MAX {
                let Some(entry) = self.queue.first_entry() else {
                    break;
                };
                let size = plan_allocs(&entry.get().plan);
                if !batch.is_empty() && allocs + size > PLAN_BATCH_ALLOCS_MAX {
                    break;
                }
                allocs += size;
                let ((_, id), submission) = entry.remove_entry();
                batch.push((id, submission));
            }
            let over_commit = self.committing.is_some();
            self.evaluating = Some(Evaluating {
                batch: batch.clone(),
                over_commit,
                void: false,
            });
            out.push(Command::Evaluate { batch, over_commit });
        }
    }

    /// One entry for the evaluated batch; plans that write nothing are answered with it, or at
    /// once when nothing in the batch writes.
    fn send_entry(&mut self, ready: Ready, out: &mut Vec<Command>) {
        let mut entry = Vec::new();
        let mut plans = Vec::with_capacity(ready.verdicts.len());
        for (id, Evaluated { result, command }) in ready.verdicts {
            let in_entry = command.map(|c| {
                entry.push(c);
                entry.len() - 1
            });
            plans.push(Committing {
                id,
                result,
                in_entry,
            });
        }
        if entry.is_empty() {
            for Committing { id, mut result, .. } in plans {
                self.raise_refresh(&mut result);
                out.push(Command::Reply {
                    id,
                    result: Ok(result),
                });
            }
            return;
        }
        let command = if entry.len() == 1 {
            entry.pop().expect("one")
        } else {
            state::Command::PlanApplyBatch { plans: entry }
        };
        self.committing = Some(plans);
        out.push(Command::Commit {
            command: Box::new(command),
        });
    }
}

#[cfg(test)]
#[path = "plan_apply_tests.rs"]
mod tests;
