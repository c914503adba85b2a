//! The eval broker's engine: which evaluation a worker gets next.
//!
//! Evaluations come from the state store (the follower reports every change, see `follow.rs`);
//! the broker never creates work of its own except Nomad's failed follow-ups and cancellations,
//! which it asks to have written through raft ([`Command::WriteEvals`]).
//!
//! Where an evaluation can be ([`Place`]):
//! - **ready**: in its scheduler type's queue, highest priority first, then oldest (create index);
//! - **unacked**: delivered to a worker with a token; acked, nacked, or nacked for the worker when
//!   its unack timer runs out;
//! - **nack wait**: nacked, waiting out the nack delay before it is ready again;
//! - **pending**: its job already has an evaluation ready, unacked or in nack wait — at most one per
//!   job is outstanding; when that one is acked the newest pending one runs and the others are
//!   cancelled (a job-level evaluation subsumes older ones, as in Nomad);
//! - **delayed**: `WaitUntil` (or `Wait`) is in the future;
//! - **blocked**: it could not place everything; it runs again when capacity appears on a node class
//!   it is eligible for (or any class, when it escaped class checks). One per job: a newer blocked
//!   evaluation of the job cancels the older.
//!
//! Invariants: an evaluation is in exactly one place; a job's slot names the evaluation that holds
//! it, which is ready, unacked or in nack wait; every timer names an entry whose place carries that
//! time. The engine never reads the clock (`now`, Unix nanoseconds, is an input) nor makes IDs
//! (follow-up IDs derive from the evaluation's; tokens from a prefix and a counter).
//!
//! On leadership loss the broker is flushed: everything is dropped and parked dequeues are released;
//! the state store still holds every evaluation, and the next leader rebuilds from it.
//!
//! **Paused** (the scheduler configuration's `PauseEvalBroker`, [`Event::Pause`]): nothing is
//! delivered — dequeues stay parked — while every evaluation is still tracked where it belongs
//! (timers fire, blocked ones wake, deliveries made before the pause end as usual); unpausing
//! serves the parked dequeues at once. A pause survives rebuilds and flushes: only `Pause` sets it.

use super::derived_id;
use super::limits::{
    BROKER_EVALS_MAX, EVAL_DELIVERY_LIMIT, FAILED_FOLLOW_UP_DELAY_MIN_NS,
    FAILED_FOLLOW_UP_DELAY_RANGE_NS, NACK_DELAY_INITIAL_NS, NACK_DELAY_SUBSEQUENT_NS,
    UNACK_TIMEOUT_NS, UNBLOCK_CLASSES_MAX,
};
use model::eval::{EvalStatus, Evaluation, EVAL_TRIGGER_FAILED_FOLLOW_UP};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

/// Identifies a parked dequeue (the shell maps it to its reply channel).
pub type WaiterId = u64;

/// `(namespace, job ID)`.
type JobKey = (String, String);
/// Ready order: highest priority, then lowest create index, then ID.
type ReadyKey = (Reverse<i32>, u64, String);
/// Pending order: highest priority, then newest (highest create index), then ID.
type PendingKey = (Reverse<i32>, Reverse<u64>, String);

/// Nomad's description of evaluations cancelled because a newer one of their job ran.
pub const CANCELED_NEWER_DESC: &str = "canceled after more recent eval was processed";
/// Nomad's description of a blocked evaluation replaced by a newer blocked one.
pub const CANCELED_DUPLICATE_BLOCKED_DESC: &str = "existing blocked evaluation exists for job";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerError {
    #[error("evaluation {0} is not outstanding")]
    NotOutstanding(String),
    #[error("evaluation {0} was delivered with another token")]
    TokenMismatch(String),
    #[error("the eval broker is disabled: this server is not the leader")]
    Disabled,
}

#[derive(Debug)]
pub enum Event {
    /// Leadership gained: every non-terminal evaluation in the state store.
    Rebuild(Vec<Arc<Evaluation>>),
    /// Leadership lost: drop everything, release parked dequeues.
    Flush,
    /// The state store's newest versions of evaluations that changed, oldest change first.
    EvalsChanged(Vec<Arc<Evaluation>>),
    /// Capacity may have appeared on nodes of this computed class (a node became ready, an
    /// allocation stopped or finished) at this state index.
    CapacityChanged {
        class: String,
        index: u64,
    },
    /// A worker wants an evaluation of one of these scheduler types; parked until one is ready.
    Dequeue {
        waiter: WaiterId,
        types: Vec<String>,
    },
    /// A parked dequeue gave up.
    CancelDequeue {
        waiter: WaiterId,
    },
    Ack {
        eval_id: String,
        token: String,
    },
    Nack {
        eval_id: String,
        token: String,
    },
    /// The worker is still on it (it submitted a plan): restart the unack timer. Fails when the
    /// token is stale, which tells the worker to stop.
    Touch {
        eval_id: String,
        token: String,
    },
    /// Time passed: fire due timers.
    Tick,
    /// Stop (`true`) or resume (`false`) handing out evaluations (`PauseEvalBroker`).
    Pause(bool),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Deliver {
        waiter: WaiterId,
        eval: Arc<Evaluation>,
        token: String,
    },
    /// A parked dequeue gets nothing: the broker was flushed or is disabled.
    Release { waiter: WaiterId },
    /// Write these evaluations through raft (failed ones with their follow-ups, cancellations).
    WriteEvals(Vec<Evaluation>),
}

/// Counts by place, for tests and status pages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerStats {
    pub ready: usize,
    pub unacked: usize,
    pub nack_wait: usize,
    pub pending: usize,
    pub delayed: usize,
    pub blocked: usize,
    /// Evaluations not tracked because the broker was full ([`BROKER_EVALS_MAX`]).
    pub dropped: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Ready { queue: String, key: ReadyKey },
    Pending { key: PendingKey },
    Unacked { token: String, deadline: i64 },
    NackWait { due: i64 },
    Delayed { due: i64 },
    Blocked,
}

#[derive(Debug)]
struct Entry {
    eval: Arc<Evaluation>,
    place: Place,
    /// Deliveries since the evaluation last became runnable afresh.
    deliveries: u32,
    /// The state store's newest version of an outstanding evaluation (what its worker wrote),
    /// looked at when the delivery ends.
    latest: Option<Arc<Evaluation>>,
}

fn job_key(eval: &Evaluation) -> JobKey {
    (eval.namespace.clone(), eval.job_id.clone())
}

/// The broker. Single-threaded: the shell owns it and feeds it one event at a time.
pub struct EvalBroker {
    enabled: bool,
    /// No delivery while set ([`Event::Pause`]).
    paused: bool,
    token_prefix: String,
    token_seq: u64,
    entries: HashMap<String, Entry>,
    /// Scheduler type → ready evaluations.
    ready: BTreeMap<String, BTreeSet<ReadyKey>>,
    /// Job → the evaluation holding its one outstanding slot.
    slots: HashMap<JobKey, String>,
    /// Job → evaluations waiting for its slot.
    pending: HashMap<JobKey, BTreeSet<PendingKey>>,
    /// Job → its blocked evaluation.
    blocked: HashMap<JobKey, String>,
    /// `(due, eval ID)` of every delayed, nack-waiting and unacked evaluation.
    timers: BTreeSet<(i64, String)>,
    /// Computed class → the latest state index at which capacity appeared there.
    unblock_indexes: HashMap<String, u64>,
    waiters: VecDeque<(WaiterId, Vec<String>)>,
    dropped: u64,
}

impl EvalBroker {
    /// A disabled broker; [`Event::Rebuild`] enables it. Tokens are `<prefix>-<n>`: give each
    /// broker a prefix of its own so tokens from an earlier leadership never match.
    pub fn new(token_prefix: impl Into<String>) -> EvalBroker {
        EvalBroker {
            enabled: false,
            paused: false,
            token_prefix: token_prefix.into(),
            token_seq: 0,
            entries: HashMap::new(),
            ready: BTreeMap::new(),
            slots: HashMap::new(),
            pending: HashMap::new(),
            blocked: HashMap::new(),
            timers: BTreeSet::new(),
            unblock_indexes: HashMap::new(),
            waiters: VecDeque::new(),
            dropped: 0,
        }
    }

    #[cfg(test)]
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Whether deliveries are paused (`PauseEvalBroker`).
    #[cfg(test)]
    pub fn paused(&self) -> bool {
        self.paused
    }

    /// When the earliest timer fires (Unix nanoseconds), if any: the shell sends [`Event::Tick`].
    pub fn next_timer(&self) -> Option<i64> {
        self.timers.first().map(|(due, _)| *due)
    }

    pub fn stats(&self) -> BrokerStats {
        let mut s = BrokerStats {
            dropped: self.dropped,
            ..BrokerStats::default()
        };
        for entry in self.entries.values() {
            match entry.place {
                Place::Ready { .. } => s.ready += 1,
                Place::Pending { .. } => s.pending += 1,
                Place::Unacked { .. } => s.unacked += 1,
                Place::NackWait { .. } => s.nack_wait += 1,
                Place::Delayed { .. } => s.delayed += 1,
                Place::Blocked => s.blocked += 1,
            }
        }
        s
    }

    /// Applies one event at `now` (Unix nanoseconds). Errors only for ack, nack and touch with a
    /// stale token or while disabled; an error changes nothing.
    pub fn handle(&mut self, event: Event, now: i64) -> Result<Vec<Command>, BrokerError> {
        let mut out = Vec::new();
        match event {
            Event::Rebuild(evals) => {
                self.reset(&mut out);
                self.enabled = true;
                evals
                    .into_iter()
                    .for_each(|e| self.observe(e, now, &mut out));
            }
            Event::Flush => {
                self.reset(&mut out);
                self.enabled = false;
            }
            Event::Pause(paused) => {
                if paused != self.paused {
                    tracing::info!(
                        paused,
                        "eval broker pause changed by the scheduler configuration"
                    );
                }
                self.paused = paused;
            }
            event if !self.enabled => return Self::refuse(event),
            Event::EvalsChanged(evals) => {
                evals
                    .into_iter()
                    .for_each(|e| self.observe(e, now, &mut out));
            }
            Event::CapacityChanged { class, index } => self.unblock(class, index),
            Event::Dequeue { waiter, types } => self.waiters.push_back((waiter, types)),
            Event::CancelDequeue { waiter } => self.waiters.retain(|(w, _)| *w != waiter),
            Event::Ack { eval_id, token } => self.ack(&eval_id, &token, now, &mut out)?,
            Event::Nack { eval_id, token } => {
                self.check_token(&eval_id, &token)?;
                self.nack(&eval_id, now, &mut out);
            }
            Event::Touch { eval_id, token } => self.touch(&eval_id, &token, now)?,
            Event::Tick => {}
        }
        self.fire_timers(now, &mut out);
        self.serve_waiters(now, &mut out);
        Ok(out)
    }

    /// A disabled broker releases dequeues at once, refuses deliveries' ends and ignores the rest.
    fn refuse(event: Event) -> Result<Vec<Command>, BrokerError> {
        match event {
            Event::Dequeue { waiter, .. } => Ok(vec![Command::Release { waiter }]),
            Event::Ack { .. } | Event::Nack { .. } | Event::Touch { .. } => {
                Err(BrokerError::Disabled)
            }
            _ => Ok(Vec::new()),
        }
    }

    fn reset(&mut self, out: &mut Vec<Command>) {
        self.entries.clear();
        self.ready.clear();
        self.slots.clear();
        self.pending.clear();
        self.blocked.clear();
        self.timers.clear();
        self.unblock_indexes.clear();
        for (waiter, _) in self.waiters.drain(..) {
            out.push(Command::Release { waiter });
        }
    }

    // ----- evaluations arriving from the state store -----

    /// The state store's newest version of an evaluation.
    fn observe(&mut self, eval: Arc<Evaluation>, now: i64, out: &mut Vec<Command>) {
        if let Some(entry) = self.entries.get_mut(&eval.id) {
            if matches!(entry.place, Place::Unacked { .. } | Place::NackWait { .. }) {
                entry.latest = Some(eval);
                return;
            }
            if eval.modify_index < entry.eval.modify_index {
                return;
            }
            if !eval.is_terminal() && eval.status == entry.eval.status {
                entry.eval = eval;
                return;
            }
            self.remove(&eval.id, out);
        }
        if eval.should_enqueue() {
            self.enqueue(eval, now);
        } else if eval.should_block() {
            self.block(eval, out);
        }
    }

    fn track(&mut self, eval: Arc<Evaluation>, place: Place) -> bool {
        if self.entries.len() >= BROKER_EVALS_MAX {
            self.dropped += 1;
            tracing::error!(
                eval_id = %eval.id,
                limit = BROKER_EVALS_MAX,
                "the eval broker is full; the evaluation stays pending until the next leadership change"
            );
            return false;
        }
        let entry = Entry {
            eval,
            place,
            deliveries: 0,
            latest: None,
        };
        self.entries.insert(entry.eval.id.clone(), entry);
        true
    }

    /// A pending evaluation: delayed while its wait lasts, else runnable.
    fn enqueue(&mut self, eval: Arc<Evaluation>, now: i64) {
        let until = eval.wait_until.as_deref().and_then(state::parse_unix_nanos);
        let due = match until {
            Some(due) if due > now => Some(due),
            _ if eval.wait.0 > 0 => Some(now.saturating_add(eval.wait.0)),
            _ => None,
        };
        let id = eval.id.clone();
        match due {
            Some(due) => {
                if self.track(eval, Place::Delayed { due }) {
                    self.timers.insert((due, id));
                }
            }
            None => {
                // The place is a stand-in: `make_runnable` sets the real one.
                if self.track(eval, Place::Blocked) {
                    self.make_runnable(&id);
                }
            }
        }
    }

    /// Takes the job's slot and becomes ready, or waits in the job's pending set.
    fn make_runnable(&mut self, id: &str) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        let job = job_key(&entry.eval);
        entry.deliveries = 0;
        if self.slots.get(&job).is_some_and(|holder| holder != id) {
            let key = (
                Reverse(entry.eval.priority),
                Reverse(entry.eval.create_index),
                id.to_owned(),
            );
            entry.place = Place::Pending { key: key.clone() };
            self.pending.entry(job).or_default().insert(key);
            return;
        }
        self.slots.insert(job, id.to_owned());
        self.set_ready(id);
    }

    fn set_ready(&mut self, id: &str) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        let queue = entry.eval.eval_type.as_str().to_owned();
        let key = (
            Reverse(entry.eval.priority),
            entry.eval.create_index,
            id.to_owned(),
        );
        self.ready
            .entry(queue.clone())
            .or_default()
            .insert(key.clone());
        entry.place = Place::Ready { queue, key };
    }

    /// Drops an evaluation from wherever it is; a slot it held goes to the job's next pending one.
    fn remove(&mut self, id: &str, out: &mut Vec<Command>) -> Option<Entry> {
        let entry = self.entries.remove(id)?;
        let job = job_key(&entry.eval);
        match &entry.place {
            Place::Ready { queue, key } => {
                if let Some(set) = self.ready.get_mut(queue) {
                    set.remove(key);
                    if set.is_empty() {
                        self.ready.remove(queue);
                    }
                }
            }
            Place::Pending { key } => {
                if let Some(set) = self.pending.get_mut(&job) {
                    set.remove(key);
                    if set.is_empty() {
                        self.pending.remove(&job);
                    }
                }
            }
            Place::Unacked { deadline: due, .. }
            | Place::NackWait { due }
            | Place::Delayed { due } => {
                self.timers.remove(&(*due, id.to_owned()));
            }
            Place::Blocked => {
                if self.blocked.get(&job).is_some_and(|b| b == id) {
                    self.blocked.remove(&job);
                }
            }
        }
        self.release_slot(&job, id, false, out);
        Some(entry)
    }

    /// If `id` holds the job's slot, frees it: the job's best pending evaluation takes it. With
    /// `cancel_rest` (the holder ran), the other pending ones are cancelled.
    fn release_slot(&mut self, job: &JobKey, id: &str, cancel_rest: bool, out: &mut Vec<Command>) {
        if self.slots.get(job).is_none_or(|holder| holder != id) {
            return;
        }
        self.slots.remove(job);
        let Some(waiting) = self.pending.remove(job) else {
            return;
        };
        let mut waiting = waiting.into_iter();
        if let Some((_, _, next)) = waiting.next() {
            self.make_runnable(&next);
        }
        let rest: Vec<PendingKey> = waiting.collect();
        if rest.is_empty() {
            return;
        }
        if !cancel_rest {
            self.pending.insert(job.clone(), rest.into_iter().collect());
            return;
        }
        let canceled = rest
            .into_iter()
            .filter_map(|(_, _, other)| self.entries.remove(&other))
            .map(|e| canceled(&e.eval, CANCELED_NEWER_DESC))
            .collect();
        out.push(Command::WriteEvals(canceled));
    }

    // ----- blocked evaluations -----

    fn block(&mut self, eval: Arc<Evaluation>, out: &mut Vec<Command>) {
        let job = job_key(&eval);
        if let Some(existing) = self.blocked.get(&job).cloned() {
            let older = self
                .entries
                .get(&existing)
                .is_some_and(|e| e.eval.create_index <= eval.create_index);
            if !older {
                out.push(Command::WriteEvals(vec![canceled(
                    &eval,
                    CANCELED_DUPLICATE_BLOCKED_DESC,
                )]));
                return;
            }
            if let Some(old) = self.remove(&existing, out) {
                out.push(Command::WriteEvals(vec![canceled(
                    &old.eval,
                    CANCELED_DUPLICATE_BLOCKED_DESC,
                )]));
            }
        }
        let missed = self.missed_unblock(&eval);
        let id = eval.id.clone();
        if !self.track(eval, Place::Blocked) {
            return;
        }
        if missed {
            self.make_runnable(&id);
        } else {
            self.blocked.insert(job, id);
        }
    }

    /// Whether capacity appeared, on a class the evaluation may use, after the state it was
    /// blocked on (Nomad's `missedUnblock`).
    fn missed_unblock(&self, eval: &Evaluation) -> bool {
        let since = if eval.snapshot_index > 0 {
            eval.snapshot_index
        } else {
            eval.create_index
        };
        self.unblock_indexes
            .iter()
            .any(|(class, index)| *index > since && wakes(eval, class))
    }

    fn unblock(&mut self, class: String, index: u64) {
        let seen = self.unblock_indexes.entry(class.clone()).or_insert(0);
        *seen = (*seen).max(index);
        if self.unblock_indexes.len() > UNBLOCK_CLASSES_MAX {
            let oldest = self
                .unblock_indexes
                .iter()
                .min_by_key(|(c, i)| (**i, (*c).clone()))
                .map(|(c, _)| c.clone());
            if let Some(oldest) = oldest {
                self.unblock_indexes.remove(&oldest);
            }
        }
        let mut woken: Vec<(JobKey, String)> = self
            .blocked
            .iter()
            .filter(|(_, id)| {
                self.entries
                    .get(*id)
                    .is_some_and(|e| wakes(&e.eval, &class))
            })
            .map(|(job, id)| (job.clone(), id.clone()))
            .collect();
        woken.sort();
        for (job, id) in woken {
            self.blocked.remove(&job);
            self.make_runnable(&id);
        }
    }

    // ----- deliveries -----

    fn check_token(&self, id: &str, token: &str) -> Result<(), BrokerError> {
        match self.entries.get(id).map(|e| &e.place) {
            Some(Place::Unacked { token: t, .. }) if t == token => Ok(()),
            Some(Place::Unacked { .. }) => Err(BrokerError::TokenMismatch(id.to_owned())),
            _ => Err(BrokerError::NotOutstanding(id.to_owned())),
        }
    }

    fn ack(
        &mut self,
        id: &str,
        token: &str,
        now: i64,
        out: &mut Vec<Command>,
    ) -> Result<(), BrokerError> {
        self.check_token(id, token)?;
        let Some(entry) = self.finish_delivery(id, out) else {
            return Ok(());
        };
        // What the worker wrote decides what comes next: a reblocked evaluation waits again.
        if let Some(latest) = entry.latest {
            if latest.should_block() {
                self.block(latest, out);
            } else if latest.should_enqueue() && latest.modify_index > entry.eval.modify_index {
                self.enqueue(latest, now);
            }
        }
        Ok(())
    }

    /// Ends a delivery (acked, or failed at the delivery limit): the entry goes, its slot passes
    /// on and the job's other pending evaluations are cancelled.
    fn finish_delivery(&mut self, id: &str, out: &mut Vec<Command>) -> Option<Entry> {
        let entry = self.entries.remove(id)?;
        if let Place::Unacked { deadline, .. } | Place::NackWait { due: deadline } = entry.place {
            self.timers.remove(&(deadline, id.to_owned()));
        }
        self.release_slot(&job_key(&entry.eval), id, true, out);
        Some(entry)
    }

    fn nack(&mut self, id: &str, now: i64, out: &mut Vec<Command>) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        let Place::Unacked { deadline, .. } = entry.place else {
            return;
        };
        self.timers.remove(&(deadline, id.to_owned()));
        if entry.deliveries >= EVAL_DELIVERY_LIMIT {
            self.fail(id, now, out);
            return;
        }
        let delay = if entry.deliveries <= 1 {
            NACK_DELAY_INITIAL_NS
        } else {
            NACK_DELAY_SUBSEQUENT_NS
        };
        let due = now.saturating_add(delay);
        entry.place = Place::NackWait { due };
        self.timers.insert((due, id.to_owned()));
    }

    /// The delivery limit is reached: the evaluation fails with a delayed follow-up (Nomad's
    /// `reapFailedEvaluations`), unless its worker already finished it.
    fn fail(&mut self, id: &str, now: i64, out: &mut Vec<Command>) {
        let Some(entry) = self.finish_delivery(id, out) else {
            return;
        };
        if entry.latest.as_ref().is_some_and(|l| l.is_terminal()) {
            return;
        }
        let eval = entry.latest.as_deref().unwrap_or(&entry.eval);
        let (failed, follow_up) = failed_with_follow_up(eval, now);
        tracing::warn!(
            eval_id = %failed.id,
            follow_up = %follow_up.id,
            "evaluation reached the delivery limit; failed with a follow-up"
        );
        out.push(Command::WriteEvals(vec![failed, follow_up]));
    }

    fn touch(&mut self, id: &str, token: &str, now: i64) -> Result<(), BrokerError> {
        self.check_token(id, token)?;
        let entry = self.entries.get_mut(id).expect("checked above");
        if let Place::Unacked { deadline, .. } = &mut entry.place {
            self.timers.remove(&(*deadline, id.to_owned()));
            *deadline = now.saturating_add(UNACK_TIMEOUT_NS);
            self.timers.insert((*deadline, id.to_owned()));
        }
        Ok(())
    }

    fn fire_timers(&mut self, now: i64, out: &mut Vec<Command>) {
        while let Some((due, id)) = self.timers.first().cloned() {
            if due > now {
                return;
            }
            self.timers.remove(&(due, id.clone()));
            let Some(entry) = self.entries.get(&id) else {
                continue;
            };
            match entry.place {
                Place::Delayed { .. } => self.make_runnable(&id),
                Place::NackWait { .. } => {
                    if entry.latest.as_ref().is_some_and(|l| l.is_terminal()) {
                        self.finish_delivery(&id, out);
                    } else {
                        self.set_ready(&id);
                    }
                }
                Place::Unacked { .. } => {
                    tracing::warn!(eval_id = %id, "evaluation not acked in time; nacking it");
                    self.nack(&id, now, out);
                }
                _ => debug_assert!(false, "a timer for {id} in {:?}", entry.place),
            }
        }
    }

    fn serve_waiters(&mut self, now: i64, out: &mut Vec<Command>) {
        if self.paused {
            return;
        }
        let mut i = 0;
        while i < self.waiters.len() {
            let Some((queue, key)) = self.best_ready(&self.waiters[i].1) else {
                i += 1;
                continue;
            };
            let (waiter, _) = self.waiters.remove(i).expect("index in range");
            self.deliver(waiter, &queue, key, now, out);
        }
    }

    fn best_ready(&self, types: &[String]) -> Option<(String, ReadyKey)> {
        types
            .iter()
            .filter_map(|t| self.ready.get(t).and_then(|s| s.first()).map(|k| (t, k)))
            .min_by(|a, b| a.1.cmp(b.1))
            .map(|(t, k)| (t.clone(), k.clone()))
    }

    fn deliver(
        &mut self,
        waiter: WaiterId,
        queue: &str,
        key: ReadyKey,
        now: i64,
        out: &mut Vec<Command>,
    ) {
        if let Some(set) = self.ready.get_mut(queue) {
            set.remove(&key);
            if set.is_empty() {
                self.ready.remove(queue);
            }
        }
        let id = key.2;
        self.token_seq += 1;
        let token = format!("{}-{}", self.token_prefix, self.token_seq);
        let deadline = now.saturating_add(UNACK_TIMEOUT_NS);
        let entry = self
            .entries
            .get_mut(&id)
            .expect("a ready key names an entry");
        entry.place = Place::Unacked {
            token: token.clone(),
            deadline,
        };
        entry.deliveries += 1;
        self.timers.insert((deadline, id));
        out.push(Command::Deliver {
            waiter,
            eval: entry.eval.clone(),
            token,
        });
    }
}

/// Whether capacity on `class` may help a blocked evaluation: it escaped class checks, or the class
/// is new to it, or it was eligible there.
fn wakes(eval: &Evaluation, class: &str) -> bool {
    eval.escaped_computed_class || eval.class_eligibility.get(class) != Some(&false)
}

fn canceled(eval: &Evaluation, why: &str) -> Evaluation {
    let mut e = eval.clone();
    e.status = EvalStatus::Canceled;
    e.status_description = why.into();
    e
}

/// FNV-1a: a stable spread of an ID (the same on every build and server).
pub(crate) fn fnv1a(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Nomad's failed evaluation and its `failed-follow-up`, delayed by the baseline plus a spread
/// derived from the evaluation's ID.
pub(crate) fn failed_with_follow_up(eval: &Evaluation, now: i64) -> (Evaluation, Evaluation) {
    let spread = (fnv1a(&eval.id) % FAILED_FOLLOW_UP_DELAY_RANGE_NS as u64) as i64;
    let due = now.saturating_add(FAILED_FOLLOW_UP_DELAY_MIN_NS + spread);
    let follow_up = Evaluation {
        id: derived_id(&eval.id, EVAL_TRIGGER_FAILED_FOLLOW_UP),
        namespace: eval.namespace.clone(),
        priority: eval.priority,
        eval_type: eval.eval_type.clone(),
        triggered_by: EVAL_TRIGGER_FAILED_FOLLOW_UP.into(),
        job_id: eval.job_id.clone(),
        job_modify_index: eval.job_modify_index,
        status: EvalStatus::Pending,
        wait_until: Some(state::format_unix_nanos(due)),
        previous_eval: eval.id.clone(),
        create_time: now,
        modify_time: now,
        ..Evaluation::default()
    };
    let mut failed = eval.clone();
    failed.status = EvalStatus::Failed;
    failed.status_description =
        format!("evaluation reached delivery limit ({EVAL_DELIVERY_LIMIT})");
    failed.next_eval.clone_from(&follow_up.id);
    failed.modify_time = now;
    (failed, follow_up)
}

#[cfg(test)]
#[path = "broker_tests.rs"]
mod tests;
