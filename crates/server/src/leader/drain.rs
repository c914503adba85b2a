//! The node drainer (Nomad's `nomad/drainer`, simplified), a leader loop: it moves allocations off
//! draining nodes by marking them `DesiredTransition{Migrate}` with an evaluation of their job; the
//! scheduler then stops each marked allocation and places its replacement elsewhere.
//!
//! Each tick decides, from a state snapshot and the time alone ([`tick`]):
//! - service groups: as many of a group's allocations on draining nodes as its
//!   `migrate.max_parallel` allows — `healthy - (count - max_parallel)`, where `healthy` counts the
//!   group's live allocations that are not already migrating and are healthy (their reported
//!   deployment health, or running when none was reported). So the next batch waits until the
//!   replacements of the last one are healthy;
//! - batch and sysbatch allocations are left to finish;
//! - system allocations are stopped last, once nothing else is left on the node (never with
//!   `IgnoreSystemJobs`);
//! - at the force deadline (at once for a negative deadline) every remaining allocation is marked
//!   and the drain completes;
//! - a node with nothing left to drain completes: strategy cleared, node left ineligible,
//!   `LastDrain` complete, a "Node drain complete" event.
//!
//! Everything the drainer knows is in state (a mark is the alloc's own `DesiredTransition`), so a new
//! leader carries on where the old one stopped; a decision that failed to apply is decided again on
//! the next tick.

use crate::endpoints::{new_eval, now_nanos};
use crate::server::Server;
use model::alloc::{Allocation, ClientStatus, DesiredTransition};
use model::eval::{Evaluation, EVAL_TRIGGER_NODE_DRAIN};
use model::node::{
    Node, NodeEvent, NODE_EVENT_DRAIN_COMPLETE, NODE_EVENT_DRAIN_DEADLINED,
    NODE_EVENT_SUBSYSTEM_DRAIN,
};
use model::{Job, JobType};
use state::{Command, StateSnapshot, Table};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::watch;

/// The longest the loop sleeps without a state change (a backstop; deadlines wake it sooner).
const IDLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
/// Allocations marked in one raft entry (Nomad's `MaxAllocsPerTxn`, smaller); the rest follow on
/// the next tick.
const MARKS_PER_ENTRY_MAX: usize = 1_000;

/// What one tick decided: at most one marking entry, then the drains that complete, in order (a
/// completion that follows a failed marking must not apply).
#[derive(Debug, Default)]
pub(crate) struct Tick {
    pub commands: Vec<Command>,
    /// The earliest force deadline still ahead (Unix nanoseconds).
    pub next_deadline: Option<i64>,
}

/// One draining node as the tick sees it.
struct Draining<'a> {
    node: &'a Node,
    /// The force deadline passed (or the drain is forced).
    deadlined: bool,
    ignore_system: bool,
}

/// The drainer's decisions for `snap` at `now` (Unix nanoseconds).
pub(crate) fn tick(snap: &StateSnapshot, now: i64) -> Tick {
    let nodes = snap.nodes("");
    let mut out = Tick::default();
    let mut draining = Vec::new();
    for node in &nodes {
        let Some(strategy) = &node.drain_strategy else {
            continue;
        };
        let deadline = strategy.force_deadline_nanos();
        let deadlined = deadline.is_some_and(|d| d <= now);
        if let Some(d) = deadline.filter(|_| !deadlined) {
            out.next_deadline = Some(out.next_deadline.map_or(d, |n| n.min(d)));
        }
        draining.push(Draining {
            node,
            deadlined,
            ignore_system: strategy.ignore_system_jobs,
        });
    }
    let mut marks: BTreeMap<String, Arc<Allocation>> = BTreeMap::new();
    let mut completes = Vec::new();
    mark_service_batches(snap, &draining, &mut marks);
    for d in &draining {
        let allocs = snap.allocs_by_node(&d.node.id);
        let markable = |a: &&Arc<Allocation>| {
            let skipped = a.is_terminal()
                || a.desired_transition.should_migrate()
                || (d.ignore_system && is_system(a));
            !skipped
        };
        if d.deadlined {
            for a in allocs.iter().filter(markable) {
                marks.insert(a.id.clone(), a.clone());
            }
            completes.push(complete(d.node, true, now));
            continue;
        }
        // Nomad's `IsDone`: every non-system allocation stopped on its client.
        let others_left = allocs.iter().any(|a| !is_system(a) && !a.client_terminal());
        if others_left {
            continue;
        }
        let system: Vec<_> = allocs
            .iter()
            .filter(markable)
            .filter(|a| is_system(a))
            .collect();
        if system.is_empty() {
            completes.push(complete(d.node, false, now));
        }
        for a in system {
            marks.insert(a.id.clone(), a.clone());
        }
    }
    if !marks.is_empty() {
        out.commands
            .push(mark_command(snap, marks.into_values(), now));
    }
    out.commands.extend(completes);
    out
}

fn is_system(a: &Allocation) -> bool {
    job_type(a) == Some(JobType::System)
}

fn job_type(a: &Allocation) -> Option<JobType> {
    a.job.as_ref().map(|j| j.kind())
}

/// Healthy for migration: live, not itself migrating, and healthy by its reported deployment health
/// (running when none was reported).
fn healthy(a: &Allocation) -> bool {
    if a.is_terminal() || a.desired_transition.should_migrate() {
        return false;
    }
    match a.deployment_status.as_ref().and_then(|s| s.healthy) {
        Some(h) => h,
        None => a.client_status == ClientStatus::Running,
    }
}

/// Nomad's `handleTaskGroup`, for every service group with allocations on a draining node whose
/// deadline has not passed: marks what `migrate.max_parallel` allows.
fn mark_service_batches(
    snap: &StateSnapshot,
    draining: &[Draining<'_>],
    marks: &mut BTreeMap<String, Arc<Allocation>>,
) {
    let waiting: BTreeSet<&str> = draining
        .iter()
        .filter(|d| !d.deadlined)
        .map(|d| d.node.id.as_str())
        .collect();
    // (namespace, job, group) → its drainable allocations, oldest first.
    let mut groups: BTreeMap<(String, String, String), Vec<Arc<Allocation>>> = BTreeMap::new();
    for node_id in &waiting {
        for a in snap.allocs_by_node(node_id) {
            if a.is_terminal()
                || a.desired_transition.should_migrate()
                || job_type(&a) != Some(JobType::Service)
            {
                continue;
            }
            let key = (a.namespace.clone(), a.job_id.clone(), a.task_group.clone());
            groups.entry(key).or_default().push(a);
        }
    }
    for ((ns, job_id, group), mut drainable) in groups {
        let job = snap
            .job(&ns, &job_id)
            .or_else(|| drainable[0].job.as_ref().map(|j| Arc::new((**j).clone())));
        let Some((count, max_parallel)) = job.as_deref().and_then(|j| group_limits(j, &group))
        else {
            continue;
        };
        let healthy_now = snap
            .allocs_by_job(&ns, &job_id)
            .iter()
            .filter(|a| a.task_group == group && healthy(a))
            .count();
        let threshold = count.saturating_sub(max_parallel);
        let n = healthy_now.saturating_sub(threshold).min(drainable.len());
        drainable.sort_by_key(|a| (a.create_index, a.id.clone()));
        for a in drainable.into_iter().take(n) {
            marks.insert(a.id.clone(), a);
        }
    }
}

/// The group's count and `migrate.max_parallel` (at least 1, Nomad's default 1).
fn group_limits(job: &Job, group: &str) -> Option<(usize, usize)> {
    let tg = job.task_groups.iter().find(|g| g.name == group)?;
    let count = usize::try_from(tg.count.unwrap_or(1)).unwrap_or(0);
    let max_parallel = tg
        .migrate
        .as_ref()
        .and_then(|m| m.max_parallel)
        .unwrap_or(1);
    Some((count, usize::try_from(max_parallel).unwrap_or(1).max(1)))
}

/// Marks `allocs` for migration (up to [`MARKS_PER_ENTRY_MAX`]), with one node-drain evaluation
/// per job (Nomad's `drainAllocs`).
fn mark_command(
    snap: &StateSnapshot,
    allocs: impl Iterator<Item = Arc<Allocation>>,
    now: i64,
) -> Command {
    let mut transitions = BTreeMap::new();
    let mut evals: BTreeMap<(String, String), Evaluation> = BTreeMap::new();
    for a in allocs.take(MARKS_PER_ENTRY_MAX) {
        let migrate = DesiredTransition {
            migrate: Some(true),
            ..DesiredTransition::default()
        };
        transitions.insert(a.id.clone(), migrate);
        let key = (a.namespace.clone(), a.job_id.clone());
        if evals.contains_key(&key) {
            continue;
        }
        let job = snap
            .job(&a.namespace, &a.job_id)
            .or_else(|| a.job.as_ref().map(|j| Arc::new((**j).clone())));
        if let Some(job) = job {
            let mut eval = new_eval(&job, EVAL_TRIGGER_NODE_DRAIN, 0, now);
            eval.namespace.clone_from(&a.namespace);
            eval.job_modify_index = job.job_modify_index.unwrap_or(0);
            evals.insert(key, eval);
        }
    }
    Command::AllocUpdateDesiredTransition {
        transitions,
        evals: evals.into_values().collect(),
    }
}

/// Ends `node`'s drain as done (Nomad's `NodesDrainComplete`): it stays ineligible.
fn complete(node: &Node, deadlined: bool, now: i64) -> Command {
    let mut event = NodeEvent {
        message: NODE_EVENT_DRAIN_COMPLETE.into(),
        subsystem: NODE_EVENT_SUBSYSTEM_DRAIN.into(),
        timestamp: Some(model::time::format_unix_nanos(now)),
        ..NodeEvent::default()
    };
    if deadlined {
        event
            .details
            .insert(NODE_EVENT_DRAIN_DEADLINED.into(), "true".into());
    }
    Command::NodeUpdateDrain {
        node_id: node.id.clone(),
        drain_strategy: None,
        mark_eligible: false,
        complete: true,
        event: Some(event),
        meta: BTreeMap::new(),
        updated_at: now / 1_000_000_000,
    }
}

/// The drainer's loop: tick after every change to nodes, allocations or jobs, at the next force
/// deadline, and at least every [`IDLE_WAIT`]; apply the tick's commands in order, stopping at the
/// first that fails (the next tick decides again). On leadership loss it returns.
pub(crate) async fn run(server: Server, mut stop: watch::Receiver<bool>) {
    let store = server.state().clone();
    let tables = [Table::Nodes, Table::Allocs, Table::Jobs];
    let mut snap = store.snapshot();
    loop {
        let decided = tick(&snap, now_nanos());
        for command in decided.commands {
            if *stop.borrow() {
                return;
            }
            let name = command.name();
            if let Err(e) = server.apply(command).await {
                tracing::warn!(command = name, error = %e,
                    "node drainer: applying a decision failed; trying again on the next change");
                break;
            }
        }
        let mut wait = IDLE_WAIT;
        if let Some(at) = decided.next_deadline {
            let ns = u64::try_from(at.saturating_sub(now_nanos())).unwrap_or(0);
            wait = wait.min(std::time::Duration::from_nanos(ns));
        }
        let deadline = tokio::time::Instant::now() + wait;
        let last = snap.index().max(1);
        snap = tokio::select! {
            () = super::tasks::stopped(&mut stop) => return,
            s = store.wait_for(&tables, last, deadline) => s,
        };
    }
}

#[cfg(test)]
#[path = "drain_tests.rs"]
mod tests;
