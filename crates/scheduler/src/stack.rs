//! The placement engine of one evaluation: a shuffled list of candidate nodes and, per node, what
//! it gives out so far (existing allocations, less those the plan stops, plus those it places).
//!
//! [`Stack::select`] is Nomad's `GenericStack.Select`: walk the nodes from where the last
//! placement stopped; filter by feasibility (cached per node and group) and the `distinct_*`
//! rules; make an offer (resources, ports, devices); score it; stop after `limit` scored nodes
//! (skipping up to `SAMPLE_SKIP_MAX` low scorers); take the best. Every step is counted in the
//! placement's `AllocMetric`. [`Stack::select_on`] does the same on one node (system jobs).

use crate::feasible::distinct::{self, DistinctProperty, Scope};
use crate::feasible::GroupChecks;
use crate::limits::{
    PREEMPTION_PRIORITY_DELTA, PREEMPTION_SCORE_PENALTY, SAMPLE_NODES_MIN, SAMPLE_SKIP_MAX,
    SAMPLE_SKIP_SCORE_THRESHOLD, SCORES_RETAINED_MAX,
};
use crate::offer::{check_fit, make_offer, Offer};
use crate::rank::{self, Affinities, Algorithm, Spreads};
use crate::resources::{Capacity, GroupAsk, Usage, Used};
use crate::rng::Rng;
use crate::view::StateView;
use model::alloc::{AllocMetric, AllocatedResources, Allocation, NodeScoreMeta};
use model::job::Job;
use model::node::Node;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Per-placement wishes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SelectOpts<'a> {
    /// Nodes the replaced allocation failed on (scored -1).
    pub(crate) penalty_nodes: &'a [String],
    /// Try this node first (sticky ephemeral disk).
    pub(crate) preferred_node: Option<&'a str>,
}

/// A placement decided.
#[derive(Debug, Clone)]
pub(crate) struct Choice {
    pub(crate) node: Arc<Node>,
    pub(crate) resources: AllocatedResources,
    pub(crate) metric: AllocMetric,
    /// Lower-priority allocations on the node that must be evicted to make room (preemption).
    pub(crate) preempted: Vec<Arc<Allocation>>,
}

/// Why a node took no allocation (system jobs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Miss {
    /// Infeasible: a constraint, driver, volume or device rule.
    Filtered,
    /// Feasible but short of resources.
    Exhausted,
}

/// What one node gives out now.
#[derive(Debug)]
struct NodeState {
    cap: Capacity,
    used: Used,
    /// The job's live allocations on the node, per task group.
    groups: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Copy)]
enum Feas {
    Unknown,
    Yes,
    No(u32),
}

/// One task group's compiled rules and caches.
#[derive(Debug)]
struct GroupCtx {
    name: String,
    ask: GroupAsk,
    checks: GroupChecks,
    feas: Vec<Feas>,
    reasons: Vec<String>,
    distinct_hosts: Option<Scope>,
    distinct: Vec<DistinctProperty>,
    spreads: Spreads,
    affinities: Affinities,
    desired_count: u32,
    limit: usize,
    /// Whether `distinct` and `spreads` hold counts yet (built on first use).
    counted: bool,
}

struct Candidate {
    slot: usize,
    score: f64,
    /// The full offer, or `None` when the group picks nothing by ID (made on commit).
    offer: Option<Offer>,
    usage: Usage,
    /// What must be evicted for it to fit (empty: it fits as things are).
    preempted: Vec<Arc<Allocation>>,
}

/// The placement engine; see the module doc.
pub(crate) struct Stack<'v> {
    view: &'v dyn StateView,
    job: Arc<Job>,
    namespace: String,
    slots: Vec<Arc<Node>>,
    states: Vec<Option<NodeState>>,
    slot_of: HashMap<String, usize>,
    offset: usize,
    base_limit: usize,
    rng: Rng,
    algorithm: Algorithm,
    groups: BTreeMap<String, GroupCtx>,
    stopped: HashSet<String>,
    placed: Vec<(usize, String)>,
    base_metric: AllocMetric,
    node_cache: HashMap<String, Option<Arc<Node>>>,
    class_eligibility: BTreeMap<String, bool>,
    escaped: bool,
    /// Whether this job's type may preempt (the cluster's `PreemptionConfig`).
    preempt: bool,
    /// The job's priority (preemption evicts only allocations of jobs at least 10 below it).
    priority: i32,
    /// Tasks get their `memory_max` only with memory oversubscription on.
    memory_oversubscription: bool,
}

/// How many nodes to score per placement: about log2(nodes) for service jobs, 2 for batch.
pub(crate) fn sample_limit(nodes: usize, batch: bool) -> usize {
    if batch {
        return SAMPLE_NODES_MIN;
    }
    let log2 = (nodes.max(1) as f64).log2().ceil() as usize;
    log2.max(SAMPLE_NODES_MIN)
}

impl<'v> Stack<'v> {
    /// `nodes` are the candidates (ready, in scope), already in sampling order.
    pub(crate) fn new(
        view: &'v dyn StateView,
        job: Arc<Job>,
        nodes: Vec<Arc<Node>>,
        base_metric: AllocMetric,
        rng: Rng,
        batch: bool,
    ) -> Stack<'v> {
        let slot_of = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.id.clone(), i))
            .collect();
        let states = nodes.iter().map(|_| None).collect();
        let config = view.scheduler_config();
        let preempt = config
            .preemption
            .enabled_for(&job.job_type.clone().unwrap_or_default());
        let priority = job.priority.unwrap_or(model::job::DEFAULT_PRIORITY);
        Stack {
            view,
            namespace: job.namespace.clone().unwrap_or_default(),
            job,
            base_limit: sample_limit(nodes.len(), batch),
            slots: nodes,
            states,
            slot_of,
            offset: 0,
            rng,
            algorithm: config.algorithm,
            preempt,
            priority,
            memory_oversubscription: config.memory_oversubscription,
            groups: BTreeMap::new(),
            stopped: HashSet::new(),
            placed: Vec::new(),
            base_metric,
            node_cache: HashMap::new(),
            class_eligibility: BTreeMap::new(),
            escaped: false,
        }
    }

    /// Computed node class → whether some node of it was feasible (for blocked evaluations).
    pub(crate) fn class_eligibility(&self) -> &BTreeMap<String, bool> {
        &self.class_eligibility
    }

    /// Whether some rule looked at values unique to a node.
    pub(crate) fn escaped(&self) -> bool {
        self.escaped
    }

    /// The plan stops `alloc`: its resources and counts are free from now on.
    pub(crate) fn note_stop(&mut self, alloc: &Allocation) {
        if alloc.is_terminal() || !self.stopped.insert(alloc.id.clone()) {
            return;
        }
        self.account(alloc, -1);
    }

    /// The plan no longer stops `alloc` (its replacement could not be placed).
    pub(crate) fn note_unstop(&mut self, alloc: &Allocation) {
        if self.stopped.remove(&alloc.id) {
            self.account(alloc, 1);
        }
    }

    fn account(&mut self, alloc: &Allocation, delta: i32) {
        let ours = alloc.job_id == self.job.id && alloc.namespace == self.namespace;
        if let Some(&slot) = self.slot_of.get(&alloc.node_id) {
            if let Some(state) = self.states[slot].as_mut() {
                let usage = Usage::of_alloc(alloc);
                if delta > 0 {
                    state.used.add(&usage);
                } else {
                    state.used.remove(&usage);
                }
                if ours {
                    let n = state.groups.entry(alloc.task_group.clone()).or_default();
                    *n = n.saturating_add_signed(delta);
                }
            }
        }
        if !ours {
            return;
        }
        let Some(node) = self.lookup(&alloc.node_id) else {
            return;
        };
        for g in self.groups.values_mut().filter(|g| g.counted) {
            record_counts(g, &node, &alloc.task_group, delta);
        }
    }

    fn lookup(&mut self, node_id: &str) -> Option<Arc<Node>> {
        if let Some(&slot) = self.slot_of.get(node_id) {
            return Some(self.slots[slot].clone());
        }
        let view = self.view;
        self.node_cache
            .entry(node_id.to_string())
            .or_insert_with(|| view.node(node_id))
            .clone()
    }

    /// Places one allocation of group `tg` on the best node sampled; `Err` explains why none took it.
    pub(crate) fn select(
        &mut self,
        tg: &str,
        opts: &SelectOpts,
    ) -> Result<Choice, Box<AllocMetric>> {
        let Some(mut g) = self.group(tg) else {
            return Err(Box::new(self.base_metric.clone()));
        };
        let mut metric = self.base_metric.clone();
        let mut best = None;
        if let Some(slot) = opts
            .preferred_node
            .and_then(|id| self.slot_of.get(id).copied())
        {
            let mut scratch = metric.clone();
            best = self.rank_node(&mut g, slot, opts, &mut scratch);
            if best.is_some() {
                metric = scratch;
            }
        }
        if best.is_none() {
            best = self.sample(&mut g, opts, &mut metric);
        }
        let result = match best {
            Some(c) => Ok(self.commit(&mut g, c, metric)),
            None => Err(Box::new(metric)),
        };
        self.groups.insert(g.name.clone(), g);
        result
    }

    /// Places one allocation of group `tg` on `node_id` only (system and sysbatch jobs).
    pub(crate) fn select_on(
        &mut self,
        node_id: &str,
        tg: &str,
    ) -> Result<Choice, (Box<AllocMetric>, Miss)> {
        let mut metric = self.base_metric.clone();
        let Some(&slot) = self.slot_of.get(node_id) else {
            return Err((Box::new(metric), Miss::Filtered));
        };
        let Some(mut g) = self.group(tg) else {
            return Err((Box::new(metric), Miss::Filtered));
        };
        metric.nodes_evaluated += 1;
        let ranked = self.rank_node(&mut g, slot, &SelectOpts::default(), &mut metric);
        let result = match ranked {
            Some(c) => Ok(self.commit(&mut g, c, metric)),
            None if metric.nodes_exhausted > 0 => Err((Box::new(metric), Miss::Exhausted)),
            None => Err((Box::new(metric), Miss::Filtered)),
        };
        self.groups.insert(g.name.clone(), g);
        result
    }

    /// Whether group `tg`'s node-only checks pass on `node_id` (system jobs: keep or stop).
    pub(crate) fn feasible_on(&mut self, node_id: &str, tg: &str) -> bool {
        let Some(&slot) = self.slot_of.get(node_id) else {
            return false;
        };
        let Some(mut g) = self.group(tg) else {
            return false;
        };
        let ok = self.static_check(&mut g, slot).is_ok();
        self.groups.insert(g.name.clone(), g);
        ok
    }

    /// Takes the group's context out of the map (callers put it back), building it on first use.
    fn group(&mut self, tg: &str) -> Option<GroupCtx> {
        let mut g = match self.groups.remove(tg) {
            Some(g) => g,
            None => self.new_group(tg)?,
        };
        self.refresh_sticky(&mut g);
        Some(g)
    }

    /// A sticky group's unmet claims as of now (placements of this evaluation meet claims too);
    /// when they changed, the cached node checks are dropped.
    fn refresh_sticky(&mut self, g: &mut GroupCtx) {
        // System and sysbatch jobs run on every node: each allocation keeps its own node's
        // volume anyway, and a claim must not make the other nodes infeasible (which would
        // stop their allocations).
        let per_node = matches!(
            self.job.job_type,
            Some(model::JobType::System | model::JobType::Sysbatch)
        );
        if !g.checks.has_sticky() || per_node {
            return;
        }
        let claims = self.view.host_volume_claims(&self.namespace, &self.job.id);
        let mut unmet = Vec::new();
        if claims.iter().any(|c| c.task_group_name == g.name) {
            let allocs = self.view.allocs_by_job(&self.namespace, &self.job.id);
            for c in claims.iter().filter(|c| c.task_group_name == g.name) {
                // A claim on a volume that was deleted is void.
                let Some(vol) = self.view.host_volume(&c.namespace, &c.volume_id) else {
                    continue;
                };
                let live = allocs.iter().any(|a| {
                    a.task_group == g.name
                        && a.node_id == vol.node_id
                        && !a.is_terminal()
                        && !self.stopped.contains(&a.id)
                });
                let placed = self
                    .placed
                    .iter()
                    .any(|(slot, tg)| *tg == g.name && self.slots[*slot].id == vol.node_id);
                if !live && !placed {
                    unmet.push((c.volume_name.clone(), c.volume_id.clone()));
                }
            }
        }
        if g.checks.set_unmet_claims(unmet) {
            g.feas.fill(Feas::Unknown);
        }
    }

    fn new_group(&mut self, tg: &str) -> Option<GroupCtx> {
        let group = self.job.task_groups.iter().find(|g| g.name == tg)?;
        let spreads = Spreads::new(&self.job, group);
        let affinities = Affinities::new(&self.job, group);
        let limit = if spreads.is_empty() && affinities.is_empty() {
            self.base_limit
        } else {
            usize::MAX
        };
        let mut checks = GroupChecks::new(&self.job, group);
        checks.resolve_csi(self.view, &self.namespace, &self.job);
        self.escaped |= checks.escaped;
        let mut ask = GroupAsk::of(group);
        if !self.memory_oversubscription {
            for task in &mut ask.tasks {
                task.memory_max_mb = 0;
            }
        }
        Some(GroupCtx {
            name: tg.to_string(),
            ask,
            checks,
            feas: vec![Feas::Unknown; self.slots.len()],
            reasons: Vec::new(),
            distinct_hosts: distinct::distinct_hosts(&self.job, group),
            distinct: distinct::distinct_properties(&self.job, group),
            spreads,
            affinities,
            desired_count: u32::try_from(group.count.unwrap_or(1)).unwrap_or(0),
            limit,
            counted: false,
        })
    }

    /// Walks the nodes from the current offset, scoring up to the group's limit.
    fn sample(
        &mut self,
        g: &mut GroupCtx,
        opts: &SelectOpts,
        metric: &mut AllocMetric,
    ) -> Option<Candidate> {
        let n = self.slots.len();
        let mut chosen: Vec<Candidate> = Vec::new();
        let mut skipped: Vec<Candidate> = Vec::new();
        let mut seen = 0;
        while seen < n && chosen.len() < g.limit {
            let slot = self.offset;
            self.offset = (self.offset + 1) % n;
            seen += 1;
            metric.nodes_evaluated += 1;
            let Some(c) = self.rank_node(g, slot, opts, metric) else {
                continue;
            };
            if c.score <= SAMPLE_SKIP_SCORE_THRESHOLD && skipped.len() < SAMPLE_SKIP_MAX {
                skipped.push(c);
            } else {
                chosen.push(c);
            }
        }
        let room = g.limit.saturating_sub(chosen.len());
        chosen.extend(skipped.into_iter().take(room));
        let mut best: Option<Candidate> = None;
        for c in chosen {
            if best.as_ref().is_none_or(|b| c.score > b.score) {
                best = Some(c);
            }
        }
        best
    }

    /// Feasibility, fit and score of one node; `None` when it cannot take the allocation (the
    /// metric says why).
    fn rank_node(
        &mut self,
        g: &mut GroupCtx,
        slot: usize,
        opts: &SelectOpts,
        metric: &mut AllocMetric,
    ) -> Option<Candidate> {
        if let Err(reason) = self.static_check(g, slot) {
            filter_node(metric, &self.slots[slot], &reason);
            return None;
        }
        if !g.counted && !g.distinct.is_empty() {
            self.build_counts(g);
        }
        self.ensure_state(slot);
        let node = &self.slots[slot];
        let state = self.states[slot].as_ref()?;
        if let Some(reason) = distinct_violation(g, node, state) {
            filter_node(metric, node, reason);
            return None;
        }
        let fit = fit_on(&g.ask, node, &state.cap, &state.used, &mut self.rng);
        let (usage, offer, preempted) = match fit {
            Ok((usage, offer)) => (usage, offer, Vec::new()),
            Err(dimension) => match self.preemption_on(g, slot) {
                Some(found) => found,
                None => {
                    exhaust_node(metric, &self.slots[slot], &dimension);
                    return None;
                }
            },
        };
        if !g.counted && !g.spreads.is_empty() {
            self.build_counts(g);
        }
        let node = &self.slots[slot];
        let state = self.states[slot].as_ref()?;
        let mut scores = score_node(self.algorithm, g, node, state, &usage, opts);
        if let Some(s) = offer.as_ref().and_then(|o| o.device_affinity) {
            scores.push(("devices", s));
        }
        if !preempted.is_empty() {
            scores.push(("preemption", -1.0));
        }
        let mut score = scores.iter().map(|(_, s)| s).sum::<f64>() / scores.len() as f64;
        record_score(metric, &node.id, &scores, score);
        if !preempted.is_empty() {
            score -= PREEMPTION_SCORE_PENALTY;
        }
        Some(Candidate {
            slot,
            score,
            offer,
            usage,
            preempted,
        })
    }

    /// Nomad's preemption on one node where the allocation does not fit: the live allocations of
    /// other jobs at least [`PREEMPTION_PRIORITY_DELTA`] below this job's priority are candidates,
    /// lowest priority first and, within a priority, the one closest to what is still missing;
    /// they are taken until the allocation fits, then any that turns out not to be needed is
    /// given back (Nomad's `filterSuperset`). `None` when even all of them would not make room.
    fn preemption_on(
        &mut self,
        g: &GroupCtx,
        slot: usize,
    ) -> Option<(Usage, Option<Offer>, Vec<Arc<Allocation>>)> {
        if !self.preempt {
            return None;
        }
        let node = self.slots[slot].clone();
        let mut victims: Vec<(i32, Arc<Allocation>, Usage)> = self
            .view
            .allocs_by_node(&node.id)
            .into_iter()
            .filter(|a| !a.is_terminal() && !self.stopped.contains(&a.id))
            .filter(|a| !(a.job_id == self.job.id && a.namespace == self.namespace))
            .filter_map(|a| {
                let priority = self.alloc_priority(&a);
                (self.priority - priority >= PREEMPTION_PRIORITY_DELTA).then(|| {
                    let usage = Usage::of_alloc(&a);
                    (priority, a, usage)
                })
            })
            .collect();
        if victims.is_empty() {
            return None;
        }
        victims.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
        let state = self.states[slot].as_ref()?;
        let cap = state.cap.clone();
        let mut used = state.used.clone();
        let ask_cpu = g.ask.cpu_mhz(cap.cpu_per_core);
        let ask_memory = g.ask.memory_mb();
        let mut chosen: Vec<(i32, Arc<Allocation>, Usage)> = Vec::new();
        loop {
            if fit_on(&g.ask, &node, &cap, &used, &mut self.rng).is_ok() {
                break;
            }
            let lowest = victims.first()?.0;
            let need_cpu = (used.cpu + ask_cpu - cap.cpu).max(0) as f64;
            let need_memory = (used.memory_mb + ask_memory - cap.memory_mb).max(0) as f64;
            let distance = |u: &Usage| {
                let axis = |need: f64, has: f64| {
                    if need > 0.0 {
                        (need - has) / need
                    } else {
                        0.0
                    }
                };
                (axis(need_cpu, u.cpu as f64).powi(2)
                    + axis(need_memory, u.memory_mb as f64).powi(2))
                .sqrt()
            };
            let pick = victims
                .iter()
                .enumerate()
                .take_while(|(_, v)| v.0 == lowest)
                .min_by(|(_, a), (_, b)| distance(&a.2).total_cmp(&distance(&b.2)))
                .map(|(i, _)| i)?;
            let victim = victims.remove(pick);
            used.remove(&victim.2);
            chosen.push(victim);
        }
        // Give back what is not needed, highest priority first.
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            used.add(&chosen[i].2);
            if fit_on(&g.ask, &node, &cap, &used, &mut self.rng).is_ok() {
                chosen.remove(i);
            } else {
                used.remove(&chosen[i].2);
            }
        }
        let (usage, offer) = fit_on(&g.ask, &node, &cap, &used, &mut self.rng).ok()?;
        Some((
            usage,
            offer,
            chosen.into_iter().map(|(_, a, _)| a).collect(),
        ))
    }

    /// The priority of the job an allocation runs (its own copy, else the stored job).
    fn alloc_priority(&self, alloc: &Allocation) -> i32 {
        alloc
            .job
            .as_ref()
            .and_then(|j| j.priority)
            .or_else(|| {
                self.view
                    .job(&alloc.namespace, &alloc.job_id)
                    .and_then(|j| j.priority)
            })
            .unwrap_or(model::job::DEFAULT_PRIORITY)
    }

    /// The node-only checks, cached per node and group.
    fn static_check(&mut self, g: &mut GroupCtx, slot: usize) -> Result<(), String> {
        match g.feas[slot] {
            Feas::Yes => return Ok(()),
            Feas::No(i) => return Err(g.reasons[i as usize].clone()),
            Feas::Unknown => {}
        }
        let node = &self.slots[slot];
        let result = g.checks.check(node);
        if !node.computed_class.is_empty() {
            let e = self
                .class_eligibility
                .entry(node.computed_class.clone())
                .or_insert(false);
            *e |= result.is_ok();
        }
        g.feas[slot] = match &result {
            Ok(()) => Feas::Yes,
            Err(reason) => {
                let i = match g.reasons.iter().position(|r| r == reason) {
                    Some(i) => i,
                    None => {
                        g.reasons.push(reason.clone());
                        g.reasons.len() - 1
                    }
                };
                Feas::No(i as u32)
            }
        };
        result
    }

    fn ensure_state(&mut self, slot: usize) {
        if self.states[slot].is_some() {
            return;
        }
        let node = &self.slots[slot];
        let mut state = NodeState {
            cap: Capacity::of(node),
            used: Used::default(),
            groups: BTreeMap::new(),
        };
        for a in self.view.allocs_by_node(&node.id) {
            if a.is_terminal() || self.stopped.contains(&a.id) {
                continue;
            }
            state.used.add(&Usage::of_alloc(&a));
            if a.job_id == self.job.id && a.namespace == self.namespace {
                *state.groups.entry(a.task_group.clone()).or_default() += 1;
            }
        }
        self.states[slot] = Some(state);
    }

    /// Counts the job's live allocations per property value, for `distinct_property` and spreads.
    fn build_counts(&mut self, g: &mut GroupCtx) {
        g.counted = true;
        let allocs = self.view.allocs_by_job(&self.namespace, &self.job.id);
        for a in allocs {
            if a.is_terminal() || self.stopped.contains(&a.id) {
                continue;
            }
            if let Some(node) = self.lookup(&a.node_id) {
                record_counts(g, &node, &a.task_group, 1);
            }
        }
        for (slot, tg) in &self.placed {
            record_counts(g, &self.slots[*slot], tg, 1);
        }
    }

    fn commit(&mut self, g: &mut GroupCtx, c: Candidate, metric: AllocMetric) -> Choice {
        for victim in &c.preempted {
            self.note_stop(victim);
        }
        let node = self.slots[c.slot].clone();
        let resources = match c.offer {
            Some(offer) => offer.resources,
            None => self.offer_on(g, c.slot),
        };
        if let Some(state) = self.states[c.slot].as_mut() {
            state.used.add(&c.usage);
            *state.groups.entry(g.name.clone()).or_default() += 1;
        }
        let name = g.name.clone();
        self.placed.push((c.slot, name.clone()));
        if g.counted {
            record_counts(g, &node, &name, 1);
        }
        for other in self.groups.values_mut().filter(|o| o.counted) {
            record_counts(other, &node, &name, 1);
        }
        Choice {
            node,
            resources,
            metric,
            preempted: c.preempted,
        }
    }

    /// The full offer on a node already ranked by sums (nothing picked by ID, so it fits).
    fn offer_on(&mut self, g: &GroupCtx, slot: usize) -> AllocatedResources {
        let node = &self.slots[slot];
        let devices = node
            .node_resources
            .as_ref()
            .map(|r| r.devices.as_slice())
            .unwrap_or_default();
        let state = self.states[slot].as_ref().expect("ranked nodes have state");
        let offer = make_offer(&g.ask, &state.cap, &state.used, devices, &mut self.rng);
        debug_assert!(
            offer.is_ok(),
            "a node that fits by sums takes an offer with no IDs"
        );
        offer.map(|o| o.resources).unwrap_or_default()
    }
}

/// Whether the group fits on a node given what it gives out: the resources it would hold and, when
/// it picks ports, cores or devices by ID, the full offer.
fn fit_on(
    ask: &GroupAsk,
    node: &Node,
    cap: &Capacity,
    used: &Used,
    rng: &mut Rng,
) -> Result<(Usage, Option<Offer>), String> {
    if ask.picks_ids() {
        let devices = node
            .node_resources
            .as_ref()
            .map(|r| r.devices.as_slice())
            .unwrap_or_default();
        make_offer(ask, cap, used, devices, rng).map(|o| (o.usage.clone(), Some(o)))
    } else {
        check_fit(ask, cap, used).map(|u| (u, None))
    }
}

fn record_counts(g: &mut GroupCtx, node: &Node, tg: &str, delta: i32) {
    for d in &mut g.distinct {
        d.counts.record(node, tg, delta);
    }
    for s in &mut g.spreads.infos {
        s.counts.record(node, tg, delta);
    }
}

/// The `distinct_*` rule the node breaks, as its `ConstraintFiltered` key.
fn distinct_violation(g: &GroupCtx, node: &Node, state: &NodeState) -> Option<&'static str> {
    let taken = match g.distinct_hosts {
        Some(Scope::Job) => state.groups.values().any(|n| *n > 0),
        Some(Scope::Group) => state.groups.get(&g.name).is_some_and(|n| *n > 0),
        None => false,
    };
    if taken {
        return Some("distinct_hosts");
    }
    if g.distinct.iter().any(|d| !d.allows(node)) {
        return Some("distinct_property");
    }
    None
}

/// Every scorer's say on one node, as Nomad names them in `ScoreMetaData`.
fn score_node(
    algorithm: Algorithm,
    g: &GroupCtx,
    node: &Node,
    state: &NodeState,
    usage: &Usage,
    opts: &SelectOpts,
) -> Vec<(&'static str, f64)> {
    let cpu = state.used.cpu + usage.cpu;
    let memory = state.used.memory_mb + usage.memory_mb;
    let mut scores = vec![("binpack", rank::fitness(algorithm, &state.cap, cpu, memory))];
    let collisions = state.groups.get(&g.name).copied().unwrap_or(0);
    if let Some(s) = rank::anti_affinity(collisions, g.desired_count) {
        scores.push(("job-anti-affinity", s));
    }
    if opts.penalty_nodes.contains(&node.id) {
        scores.push(("node-reschedule-penalty", -1.0));
    }
    if let Some(s) = g.affinities.score(node) {
        scores.push(("node-affinity", s));
    }
    if let Some(s) = g.spreads.score(node) {
        scores.push(("allocation-spread", s));
    }
    scores
}

fn bump(map: &mut BTreeMap<String, i64>, key: &str) {
    match map.get_mut(key) {
        Some(n) => *n += 1,
        None => {
            map.insert(key.to_string(), 1);
        }
    }
}

/// Nomad's `AllocMetric.FilterNode`.
pub(crate) fn filter_node(metric: &mut AllocMetric, node: &Node, reason: &str) {
    metric.nodes_filtered += 1;
    if !node.node_class.is_empty() {
        bump(&mut metric.class_filtered, &node.node_class);
    }
    bump(&mut metric.constraint_filtered, reason);
}

/// Nomad's `AllocMetric.ExhaustedNode`.
pub(crate) fn exhaust_node(metric: &mut AllocMetric, node: &Node, dimension: &str) {
    metric.nodes_exhausted += 1;
    if !node.node_class.is_empty() {
        bump(&mut metric.class_exhausted, &node.node_class);
    }
    bump(&mut metric.dimension_exhausted, dimension);
}

/// Keeps the best `SCORES_RETAINED_MAX` node scores, best first.
fn record_score(metric: &mut AllocMetric, node_id: &str, scores: &[(&str, f64)], norm: f64) {
    let kept = &mut metric.score_meta_data;
    let at = kept
        .iter()
        .position(|m| norm > m.norm_score)
        .unwrap_or(kept.len());
    if at >= SCORES_RETAINED_MAX {
        return;
    }
    kept.insert(
        at,
        NodeScoreMeta {
            node_id: node_id.to_string(),
            scores: scores.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            norm_score: norm,
        },
    );
    kept.truncate(SCORES_RETAINED_MAX);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::STREAM_SAMPLING;
    use crate::testing::{job, node, MemView};

    #[test]
    fn sampling_limits_as_nomad() {
        assert_eq!(sample_limit(1, false), 2);
        assert_eq!(sample_limit(1000, false), 10);
        assert_eq!(sample_limit(5000, false), 13);
        assert_eq!(sample_limit(5000, true), 2);
    }

    #[test]
    fn stops_free_room_and_unstops_take_it_back() {
        let mut view = MemView::new();
        let mut n = node("n1");
        n.node_resources.as_mut().expect("set").cpu.cpu_shares = 600;
        view.upsert_node(n);
        let j = view.upsert_job(job("web", "service", 1));
        let existing = Allocation {
            id: "a1".into(),
            namespace: "default".into(),
            job_id: "web".into(),
            task_group: "web".into(),
            node_id: "n1".into(),
            job: Some(Arc::new((*j).clone())),
            desired_status: "run".into(),
            client_status: "running".into(),
            ..Allocation::default()
        };
        view.upsert_alloc(existing.clone());
        let nodes = view.nodes();
        let mut stack = Stack::new(
            &view,
            j,
            nodes,
            AllocMetric::default(),
            Rng::new(1, STREAM_SAMPLING),
            false,
        );
        let err = stack
            .select("web", &SelectOpts::default())
            .expect_err("full");
        assert_eq!(err.dimension_exhausted.get("cpu"), Some(&1));
        assert_eq!(err.nodes_evaluated, 1);
        stack.note_stop(&existing);
        let choice = stack
            .select("web", &SelectOpts::default())
            .expect("room after the stop");
        assert_eq!(choice.node.id, "n1");
        assert_eq!(choice.metric.score_meta_data[0].node_id, "n1");
        let err = stack
            .select("web", &SelectOpts::default())
            .expect_err("full again");
        assert_eq!(err.nodes_exhausted, 1);
    }

    #[test]
    fn penalties_and_anti_affinity_show_in_scores() {
        let mut view = MemView::new();
        view.upsert_node(node("n1"));
        let j = view.upsert_job(job("web", "service", 2));
        let nodes = view.nodes();
        let mut stack = Stack::new(
            &view,
            j,
            nodes,
            AllocMetric::default(),
            Rng::new(1, STREAM_SAMPLING),
            false,
        );
        stack.select("web", &SelectOpts::default()).expect("first");
        let penalty = ["n1".to_string()];
        let opts = SelectOpts {
            penalty_nodes: &penalty,
            preferred_node: None,
        };
        let second = stack.select("web", &opts).expect("second");
        let scores = &second.metric.score_meta_data[0].scores;
        assert_eq!(scores.get("node-reschedule-penalty"), Some(&-1.0));
        assert_eq!(scores.get("job-anti-affinity"), Some(&-1.0));
        assert!(scores.contains_key("binpack"));
    }
}
