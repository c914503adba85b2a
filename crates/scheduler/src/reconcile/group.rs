//! One task group's reconciliation (see the module doc of [`super`]).

use super::reschedule::{next_reschedule_time, policy_of};
use super::update::{update_kind, UpdateKind};
use super::{
    alloc_name, node_taint, ran_successfully, Place, Reconciler, Taint, DESC_LOST, DESC_MIGRATING,
    DESC_NOT_NEEDED, DESC_RECONNECTED, DESC_RESCHEDULED,
};
use crate::feasible::GroupChecks;
use crate::limits::RESCHEDULE_WINDOW_NS;
use crate::rng::Rng;
use model::alloc::{Allocation, ClientStatus};
use model::deployment::{Deployment, DeploymentState, DeploymentStatus};
use model::group::{TaskGroup, UpdateStrategy};
use model::job::Job;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// The group's allocations by what their state asks for.
#[derive(Default)]
struct Sets {
    untainted: Vec<Arc<Allocation>>,
    lost: Vec<Arc<Allocation>>,
    migrate: Vec<Arc<Allocation>>,
    reschedule_now: Vec<Arc<Allocation>>,
    reschedule_later: Vec<(Arc<Allocation>, i64)>,
    /// On a disconnected node, not yet `unknown`: marked so, and replaced when the group says.
    disconnecting: Vec<Arc<Allocation>>,
    /// `unknown` on a node now down, already replaced while disconnected: stopped, not replaced.
    lost_replaced: Vec<Arc<Allocation>>,
    /// Copies a reconnect made redundant (the group's `disconnect.reconcile` chose the other).
    reconnect_stops: Vec<Arc<Allocation>>,
}

/// Why an allocation is replaced under its own name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replace {
    Lost,
    Migrate,
    Reschedule,
    /// On a disconnected node: kept (now `unknown`), replaced meanwhile.
    Disconnect,
}

/// What the group's `update` block allows this pass.
struct Rollout {
    requires_canaries: bool,
    canary_want: usize,
    promoted: bool,
    /// Kept allocations to update, in place or destructively.
    changes: usize,
    /// Destructive updates allowed.
    limit: usize,
}

/// Lost, migrating, rescheduled and disconnected (when the group replaces them) allocations,
/// each replaced under its own name.
fn replacements(sets: Sets) -> Vec<(Arc<Allocation>, Replace)> {
    let disconnected = sets
        .disconnecting
        .into_iter()
        .map(|a| (a, Replace::Disconnect));
    let lost = sets.lost.into_iter().map(|a| (a, Replace::Lost));
    let migrate = sets.migrate.into_iter().map(|a| (a, Replace::Migrate));
    let now = sets
        .reschedule_now
        .into_iter()
        .map(|a| (a, Replace::Reschedule));
    lost.chain(migrate).chain(now).chain(disconnected).collect()
}

/// Nomad's `disconnect.reconcile`: which copy stays when a disconnected client comes back —
/// `keep_original`, `keep_replacement`, `longest_running` (the older), or `best_score` (the
/// better placement score, the original on a tie).
pub fn keep_original(strategy: &str, original: &Allocation, replacement: &Allocation) -> bool {
    let score = |a: &Allocation| {
        a.metrics
            .as_ref()
            .and_then(|m| m.score_meta_data.iter().find(|s| s.node_id == a.node_id))
            .map_or(0.0, |s| s.norm_score)
    };
    match strategy {
        "keep_replacement" => false,
        "keep_original" => true,
        "longest_running" => original.create_time <= replacement.create_time,
        _ => score(original) >= score(replacement),
    }
}

/// The group's allocations that keep a slot, and those replaced.
struct Work {
    count: usize,
    kept: Vec<(Arc<Allocation>, UpdateKind)>,
    replaced: Vec<(Arc<Allocation>, Replace)>,
}

fn index_of(a: &Allocation) -> u32 {
    a.index().unwrap_or(u32::MAX)
}

/// The group's update strategy, when it asks for rolling updates.
fn strategy_of(tg: &TaskGroup) -> Option<&UpdateStrategy> {
    tg.update
        .as_ref()
        .filter(|u| u.max_parallel.unwrap_or(0) > 0)
}

fn same_version(a: &Allocation, job: &Job) -> bool {
    a.job
        .as_ref()
        .is_some_and(|j| j.version == job.version && j.create_index == job.create_index)
}

fn is_canary_of(a: &Allocation, deployment_id: &str) -> bool {
    !deployment_id.is_empty()
        && a.deployment_id == deployment_id
        && a.deployment_status.as_ref().is_some_and(|s| s.canary)
}

impl Reconciler<'_> {
    pub(super) fn compute_group(
        &mut self,
        job: &Job,
        tg: &TaskGroup,
        allocs: &[Arc<Allocation>],
        ids: &mut Rng,
    ) {
        self.desired(&tg.name);
        // Nomad's filterOldTerminalAllocs: a batch job's finished allocations of an older
        // version, or of the job as it was before a purge and register, are history, not work
        // done for this version.
        let current: Vec<Arc<Allocation>> = if self.input.batch {
            let (version, created) = (job.version.unwrap_or(0), job.create_index.unwrap_or(0));
            allocs
                .iter()
                .filter(|a| {
                    let older = a.job.as_ref().is_some_and(|j| {
                        j.version.unwrap_or(0) < version || j.create_index.unwrap_or(0) < created
                    });
                    !(older && (a.server_terminal() || a.client_terminal()))
                })
                .cloned()
                .collect()
        } else {
            allocs.to_vec()
        };
        let allocs = current.as_slice();
        let mut sets = self.classify(tg, allocs);
        for a in std::mem::take(&mut sets.lost_replaced) {
            self.stop(&a, DESC_LOST, true);
        }
        for a in std::mem::take(&mut sets.reconnect_stops) {
            self.stop(&a, DESC_RECONNECTED, false);
        }
        if !tg.disconnect_replace() {
            // Not replaced: it keeps its slot, unknown, until its node returns or is lost.
            for a in std::mem::take(&mut sets.disconnecting) {
                self.mark_unknown(&a);
                sets.untainted.push(a);
            }
        }
        self.stop_old_canaries(&mut sets.untainted);
        let later = std::mem::take(&mut sets.reschedule_later);
        let later_count = later.len();
        self.schedule_later(job, later, ids);
        let dstate = self.group_state(&tg.name);
        let canarying_before = dstate
            .as_ref()
            .is_some_and(|s| s.desired_canaries > 0 && !s.promoted);
        let current_id = self.current_id().to_string();
        let (canaries, mut untainted): (Vec<_>, Vec<_>) = std::mem::take(&mut sets.untainted)
            .into_iter()
            .partition(|a| is_canary_of(a, &current_id));
        if !canarying_before {
            untainted.extend(canaries.iter().cloned());
        }
        let kept = self.update_kinds(job, tg, untainted);
        let r = self.rollout(job, tg, dstate.as_ref(), &kept, canaries.len(), allocs, ids);
        let mut work = Work {
            count: usize::try_from(tg.count.unwrap_or(1)).unwrap_or(0),
            kept,
            replaced: replacements(sets),
        };
        self.trim_to_count(&mut work, r.promoted && !canaries.is_empty());
        if r.requires_canaries {
            self.place_canaries(job, tg, &work, &canaries, r.canary_want - canaries.len());
        }
        let placed = self.place_group(job, tg, &work, r.limit);
        let busy = placed + later_count + r.changes > 0 || r.requires_canaries;
        self.note_progress(dstate.as_ref(), busy);
    }

    /// The group's rollout: whether canaries are due, the deployment state it joins (created
    /// here when the group changes under an `update` block), and the destructive update limit.
    #[allow(clippy::too_many_arguments)]
    fn rollout(
        &mut self,
        job: &Job,
        tg: &TaskGroup,
        dstate: Option<&DeploymentState>,
        kept: &[(Arc<Allocation>, UpdateKind)],
        canaries: usize,
        allocs: &[Arc<Allocation>],
        ids: &mut Rng,
    ) -> Rollout {
        let changes = kept
            .iter()
            .filter(|(_, k)| *k != UpdateKind::Ignore)
            .count();
        let destructive = kept.iter().any(|(_, k)| *k == UpdateKind::Destructive);
        let promoted = dstate.is_some_and(|s| s.promoted);
        let strategy = strategy_of(tg);
        let canary_want =
            strategy.map_or(0, |s| usize::try_from(s.canary.unwrap_or(0)).unwrap_or(0));
        // A pending (multiregion) deployment records the canaries it will want, and places
        // them once it runs.
        let wants_canaries = canary_want > canaries && destructive && !promoted && !self.failed;
        let requires_canaries = wants_canaries && !self.paused;
        let had_running = allocs.iter().any(|a| same_version(a, job));
        if let Some(s) = strategy {
            let wants =
                dstate.is_none() && tg.count.unwrap_or(1) > 0 && (!had_running || changes > 0);
            if wants {
                let canaries = if wants_canaries { canary_want } else { 0 };
                self.add_group_state(job, tg, s, canaries, ids);
            }
        }
        let canarying = requires_canaries
            || wants_canaries
            || dstate.is_some_and(|s| s.desired_canaries > 0 && !s.promoted);
        Rollout {
            requires_canaries,
            canary_want,
            promoted,
            changes,
            limit: self.update_limit(strategy, canarying, kept, changes),
        }
    }

    fn group_state(&self, tg: &str) -> Option<DeploymentState> {
        self.current.as_ref()?.task_groups.get(tg).cloned()
    }

    /// Sorts the group's allocations (Nomad's `filterByTainted` and `filterByRescheduleable`).
    fn classify(&self, tg: &TaskGroup, allocs: &[Arc<Allocation>]) -> Sets {
        let batch = self.input.batch;
        let tolerates = tg.disconnect_lost_after().is_some();
        let by_id: BTreeMap<&str, &Arc<Allocation>> =
            allocs.iter().map(|a| (a.id.as_str(), a)).collect();
        // The replacement placed for `a` while its node was disconnected, if it still runs.
        let live_replacement = |a: &Allocation| -> Option<Arc<Allocation>> {
            by_id
                .get(a.next_allocation.as_str())
                .filter(|r| !r.server_terminal() && !r.client_terminal())
                .map(|r| Arc::clone(r))
        };
        let unknown = |a: &Allocation| a.client_status == ClientStatus::Unknown;
        let mut s = Sets::default();
        let mut reconnecting: Vec<(Arc<Allocation>, Arc<Allocation>)> = Vec::new();
        for a in allocs {
            if a.server_terminal() {
                if batch && ran_successfully(a) {
                    s.untainted.push(a.clone());
                }
                continue;
            }
            if a.client_terminal() {
                match a.client_status {
                    _ if !a.next_allocation.is_empty() => {}
                    ClientStatus::Complete if batch => s.untainted.push(a.clone()),
                    ClientStatus::Failed => self.classify_failed(tg, a, &mut s),
                    _ => {}
                }
                continue;
            }
            // Nomad: "non-terminal allocs that should migrate should always migrate", whatever
            // their node (a drain marks them, and so does `alloc stop` on a healthy node).
            if a.desired_transition.should_migrate() {
                s.migrate.push(a.clone());
                continue;
            }
            let replaced = live_replacement(a);
            match node_taint(self.input.nodes, &a.node_id, tolerates) {
                Taint::Lost if unknown(a) && replaced.is_some() => s.lost_replaced.push(a.clone()),
                Taint::Lost => s.lost.push(a.clone()),
                // Marked unknown and replaced: its replacement holds the slot for now.
                Taint::Disconnected if unknown(a) && replaced.is_some() => {}
                Taint::Disconnected if unknown(a) => s.untainted.push(a.clone()),
                Taint::Disconnected => s.disconnecting.push(a.clone()),
                // Back on a ready node while its replacement runs: one of them goes, once its
                // client has said how the original is.
                _ => match replaced {
                    Some(_) if unknown(a) => {}
                    Some(r) => reconnecting.push((a.clone(), r)),
                    None => s.untainted.push(a.clone()),
                },
            }
        }
        for (original, replacement) in reconnecting {
            if keep_original(tg.disconnect_reconcile(), &original, &replacement) {
                s.untainted.retain(|a| a.id != replacement.id);
                s.untainted.push(original);
                s.reconnect_stops.push(replacement);
            } else {
                s.reconnect_stops.push(original);
            }
        }
        s
    }

    /// A failed allocation: replace it now, later (a follow-up evaluation), or never (it keeps
    /// its slot, failed).
    fn classify_failed(&self, tg: &TaskGroup, a: &Arc<Allocation>, s: &mut Sets) {
        if a.desired_transition.should_force_reschedule() {
            s.reschedule_now.push(a.clone());
            return;
        }
        let Some(policy) = policy_of(a, tg.reschedule_policy.as_ref()) else {
            s.untainted.push(a.clone());
            return;
        };
        let (at, eligible) = next_reschedule_time(a, policy);
        if !eligible {
            s.untainted.push(a.clone());
            return;
        }
        let ours = !a.followup_eval_id.is_empty() && a.followup_eval_id == self.input.eval.id;
        if ours || at - self.input.now <= RESCHEDULE_WINDOW_NS {
            s.reschedule_now.push(a.clone());
            return;
        }
        s.untainted.push(a.clone());
        if a.followup_eval_id.is_empty() {
            s.reschedule_later.push((a.clone(), at));
        }
    }

    fn stop_old_canaries(&mut self, untainted: &mut Vec<Arc<Allocation>>) {
        let old = self.unneeded_canaries();
        if old.is_empty() {
            return;
        }
        let (stop, keep): (Vec<_>, Vec<_>) = std::mem::take(untainted)
            .into_iter()
            .partition(|a| old.contains(&a.id));
        for a in &stop {
            self.stop(a, DESC_NOT_NEEDED, false);
        }
        *untainted = keep;
    }

    /// How each kept allocation meets the current job: unchanged, in place (when the node still
    /// passes the group's checks), or destructively. Failed ones are never updated in place.
    fn update_kinds(
        &self,
        job: &Job,
        tg: &TaskGroup,
        allocs: Vec<Arc<Allocation>>,
    ) -> Vec<(Arc<Allocation>, UpdateKind)> {
        let mut checks: Option<GroupChecks> = None;
        allocs
            .into_iter()
            .map(|a| {
                let kind = match update_kind(a.job.as_deref(), job, &tg.name) {
                    _ if a.client_status == ClientStatus::Complete => UpdateKind::Ignore,
                    UpdateKind::InPlace if a.client_terminal() => UpdateKind::Destructive,
                    UpdateKind::InPlace => {
                        let checks = checks.get_or_insert_with(|| GroupChecks::new(job, tg));
                        let node = self.input.nodes.get(&a.node_id).cloned().flatten();
                        match node {
                            Some(n) if checks.check(&n).is_ok() => UpdateKind::InPlace,
                            _ => UpdateKind::Destructive,
                        }
                    }
                    other => other,
                };
                (a, kind)
            })
            .collect()
    }

    fn add_group_state(
        &mut self,
        job: &Job,
        tg: &TaskGroup,
        s: &UpdateStrategy,
        canaries: usize,
        ids: &mut Rng,
    ) {
        if self.current.as_ref().is_some_and(|d| !d.is_active()) {
            return;
        }
        let d = match &mut self.current {
            Some(d) => d,
            None => {
                self.created = true;
                self.current
                    .insert(new_deployment(job, self.input.eval, self.input.now, ids))
            }
        };
        d.task_groups.insert(
            tg.name.clone(),
            DeploymentState {
                auto_revert: s.auto_revert.unwrap_or(false),
                auto_promote: s.auto_promote.unwrap_or(false),
                progress_deadline: s.progress_deadline.unwrap_or_default(),
                desired_canaries: canaries as i64,
                desired_total: i64::from(tg.count.unwrap_or(1)),
                ..DeploymentState::default()
            },
        );
        self.current_written = true;
    }

    /// Nomad's `computeLimit`: how many destructive updates this pass may make.
    fn update_limit(
        &self,
        strategy: Option<&UpdateStrategy>,
        canarying: bool,
        kept: &[(Arc<Allocation>, UpdateKind)],
        changes: usize,
    ) -> usize {
        let Some(s) = strategy else {
            return usize::MAX;
        };
        if changes == 0 {
            return usize::MAX;
        }
        if self.paused || self.failed || canarying {
            return 0;
        }
        let mut limit = i64::from(s.max_parallel.unwrap_or(1));
        let id = self.current_id();
        for (a, _) in kept
            .iter()
            .filter(|(a, _)| !id.is_empty() && a.deployment_id == id)
        {
            match a.deployment_status.as_ref().and_then(|d| d.healthy) {
                Some(false) => return 0,
                Some(true) => {}
                None => limit -= 1,
            }
        }
        usize::try_from(limit).unwrap_or(0)
    }

    /// Stops what exceeds the count: replacements first (they are stopped anyway), then kept
    /// allocations — already-stopped last, old versions first when promoted canaries replace
    /// them, duplicated names first, highest index first.
    fn trim_to_count(&mut self, work: &mut Work, prefer_old: bool) {
        let mut excess = (work.kept.len() + work.replaced.len()).saturating_sub(work.count);
        work.replaced
            .sort_by_key(|(a, _)| (Reverse(index_of(a)), a.id.clone()));
        while excess > 0 && !work.replaced.is_empty() {
            let (a, why) = work.replaced.remove(0);
            match why {
                Replace::Lost => self.stop(&a, DESC_LOST, true),
                _ => self.stop(&a, DESC_NOT_NEEDED, false),
            }
            excess -= 1;
        }
        if excess == 0 {
            return;
        }
        let mut seen: BTreeMap<u32, usize> = BTreeMap::new();
        for (a, _) in &work.kept {
            *seen.entry(index_of(a)).or_default() += 1;
        }
        work.kept.sort_by_key(|(a, kind)| {
            (
                a.server_terminal(),
                !(prefer_old && *kind != UpdateKind::Ignore),
                seen.get(&index_of(a)).copied().unwrap_or(0) <= 1,
                Reverse(index_of(a)),
                a.id.clone(),
            )
        });
        for (a, _) in work.kept.drain(..excess) {
            self.stop(&a, DESC_NOT_NEEDED, false);
        }
    }

    fn place_canaries(
        &mut self,
        job: &Job,
        tg: &TaskGroup,
        work: &Work,
        existing: &[Arc<Allocation>],
        number: usize,
    ) {
        let taken: BTreeSet<u32> = existing.iter().map(|a| index_of(a)).collect();
        let mut destructive: Vec<u32> = work
            .kept
            .iter()
            .filter(|(_, k)| *k == UpdateKind::Destructive)
            .map(|(a, _)| index_of(a))
            .filter(|i| *i != u32::MAX && !taken.contains(i))
            .collect();
        destructive.sort_unstable();
        destructive.dedup();
        let used = self.used_indexes(work, existing);
        let mut names = destructive
            .into_iter()
            .chain((0..).filter(|i| !used.contains(i)));
        for _ in 0..number {
            let index = names.next().unwrap_or(u32::MAX);
            self.results.places.push(Place {
                tg: tg.name.clone(),
                name: alloc_name(&job.id, &tg.name, index),
                previous: None,
                reschedule: false,
                canary: true,
                destructive: false,
            });
            self.desired(&tg.name).canary += 1;
        }
    }

    fn used_indexes(&self, work: &Work, extra: &[Arc<Allocation>]) -> BTreeSet<u32> {
        work.kept
            .iter()
            .map(|(a, _)| a)
            .chain(work.replaced.iter().map(|(a, _)| a))
            .chain(extra)
            .map(|a| index_of(a))
            .collect()
    }

    /// Replacements, in-place and destructive updates (up to `limit`), and missing allocations.
    /// Returns how many placements and updates it made.
    fn place_group(&mut self, job: &Job, tg: &TaskGroup, work: &Work, limit: usize) -> usize {
        let before = self.results.places.len() + self.results.inplace.len();
        for (a, why) in &work.replaced {
            let desc = match why {
                Replace::Lost => DESC_LOST,
                Replace::Migrate => DESC_MIGRATING,
                Replace::Reschedule => DESC_RESCHEDULED,
                Replace::Disconnect => "",
            };
            if *why == Replace::Disconnect {
                // Kept, unknown, while its replacement runs; a reconnect picks one of them.
                self.mark_unknown(a);
            } else {
                self.stop(a, desc, *why == Replace::Lost);
            }
            self.push_place(
                tg,
                a.name.clone(),
                Some(a.clone()),
                *why == Replace::Reschedule,
                false,
            );
            let d = self.desired(&tg.name);
            match why {
                Replace::Migrate => d.migrate += 1,
                _ => d.place += 1,
            }
        }
        let mut destructive: Vec<&Arc<Allocation>> = Vec::new();
        for (a, kind) in &work.kept {
            match kind {
                UpdateKind::Ignore => self.desired(&tg.name).ignore += 1,
                UpdateKind::InPlace => {
                    self.results.inplace.push(a.clone());
                    self.desired(&tg.name).in_place_update += 1;
                }
                UpdateKind::Destructive => destructive.push(a),
            }
        }
        destructive.sort_by_key(|a| (index_of(a), a.id.clone()));
        for (i, a) in destructive.into_iter().enumerate() {
            if i >= limit {
                self.desired(&tg.name).ignore += 1;
                continue;
            }
            self.push_place(tg, a.name.clone(), Some(a.clone()), false, true);
            self.desired(&tg.name).destructive_update += 1;
        }
        let used = self.used_indexes(work, &[]);
        // Nomad's `deploymentPlaceReady`: a paused or pending deployment places no new
        // allocations (replacements of lost and failed ones still go above).
        let missing = if self.paused {
            0
        } else {
            work.count
                .saturating_sub(work.kept.len() + work.replaced.len())
        };
        for index in (0..).filter(|i| !used.contains(i)).take(missing) {
            self.push_place(tg, alloc_name(&job.id, &tg.name, index), None, false, false);
            self.desired(&tg.name).place += 1;
        }
        self.results.places.len() + self.results.inplace.len() - before
    }

    /// The allocation's client status becomes `unknown`: its node is disconnected.
    fn mark_unknown(&mut self, a: &Arc<Allocation>) {
        let mut u = (**a).clone();
        u.client_status = ClientStatus::Unknown;
        u.client_description = "alloc is unknown since its node is disconnected".into();
        u.job = None;
        self.results.attribute_updates.push(u);
    }

    fn push_place(
        &mut self,
        tg: &TaskGroup,
        name: String,
        previous: Option<Arc<Allocation>>,
        reschedule: bool,
        destructive: bool,
    ) {
        self.results.places.push(Place {
            tg: tg.name.clone(),
            name,
            previous,
            reschedule,
            canary: false,
            destructive,
        });
    }

    /// A group still changing, or not yet healthy, keeps the deployment from completing.
    fn note_progress(&mut self, dstate: Option<&DeploymentState>, busy: bool) {
        let unhealthy = dstate.is_some_and(|s| {
            s.healthy_allocs < s.desired_total.max(s.desired_canaries)
                || (s.desired_canaries > 0 && !s.promoted)
        });
        if busy || unhealthy {
            self.complete = false;
        }
    }
}

/// Nomad's `NewDeployment`.
fn new_deployment(
    job: &Job,
    eval: &model::eval::Evaluation,
    now: i64,
    ids: &mut Rng,
) -> Deployment {
    Deployment {
        id: ids.uuid(),
        namespace: job.namespace.clone().unwrap_or_default(),
        job_id: job.id.clone(),
        job_version: job.version.unwrap_or(0),
        job_modify_index: job.modify_index.unwrap_or(0),
        job_spec_modify_index: job.job_modify_index.unwrap_or(0),
        job_create_index: job.create_index.unwrap_or(0),
        status: if job.is_multiregion() {
            DeploymentStatus::Pending
        } else {
            DeploymentStatus::Running
        },
        status_description: if job.is_multiregion() {
            model::deployment::DEPLOYMENT_DESC_PENDING_FOR_PEER.into()
        } else {
            model::deployment::DEPLOYMENT_DESC_RUNNING.into()
        },
        is_multiregion: job.is_multiregion(),
        eval_priority: eval.priority,
        create_time: now,
        modify_time: now,
        ..Deployment::default()
    }
}
