//! The async shells around the leader's engines. Each task owns its engine, feeds it one event at a
//! time (requests from a bounded channel, its timers, the stop signal) and executes the commands it
//! returns. Nothing here decides anything the engines could.
//!
//! Every task watches the same stop signal (`watch<bool>`, sent by the supervisor on leadership
//! loss): the broker flushes (parked dequeues get `None`, so workers exit), the applier answers its
//! queued plans `NotLeader`, the follower and the writer return.

use super::broker::{self, BrokerError, BrokerStats, EvalBroker, WaiterId};
use super::follow::Follower;
use super::limits::{
    BROKER_REQUESTS_MAX, BROKER_TICK_MAX, BROKER_WRITE_EVALS_MAX, FOLLOW_EMPTY_POLL, FOLLOW_WAIT,
    HEARTBEAT_TICK_MAX, PLAN_QUEUE_MAX,
};
use super::plan_apply::{self, PlanApplier, PlanError, PlanId, PlanSubmission};
use crate::endpoints::now_nanos;
use crate::server::Server;
use model::eval::Evaluation;
use model::plan::PlanResult;
use state::{StateStore, Table};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};

/// Resolves once the stop signal is `true` (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

// ----- eval broker -----

/// One evaluation handed to a worker, with the token that ends its delivery.
#[derive(Debug, Clone)]
pub struct Delivery {
    pub eval: Arc<Evaluation>,
    pub token: String,
}

enum EndKind {
    Ack,
    Nack,
    Touch,
}

enum BrokerRequest {
    Event(broker::Event),
    Dequeue {
        types: Vec<String>,
        reply: oneshot::Sender<Option<Delivery>>,
    },
    End {
        kind: EndKind,
        eval_id: String,
        token: String,
        reply: oneshot::Sender<Result<(), BrokerError>>,
    },
    Stats {
        reply: oneshot::Sender<BrokerStats>,
    },
}

/// Talks to the broker task. Every call fails (or returns `None`) once the task is gone.
#[derive(Clone)]
pub struct BrokerHandle {
    tx: mpsc::Sender<BrokerRequest>,
}

impl BrokerHandle {
    /// Parks a dequeue for an evaluation of one of `types`: the receiver gets it, or `None`
    /// when the broker stops (leadership lost). A worker that gives up waiting closes the
    /// receiver and then takes what `try_recv` still holds, so a delivery sent just before is
    /// not lost (one sent after is nacked straight back by the broker).
    pub(crate) async fn dequeue_waiter(
        &self,
        types: Vec<String>,
    ) -> Option<oneshot::Receiver<Option<Delivery>>> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(BrokerRequest::Dequeue { types, reply })
            .await
            .ok()?;
        Some(rx)
    }

    pub async fn ack(&self, d: &Delivery) -> Result<(), BrokerError> {
        self.end(EndKind::Ack, d).await
    }

    pub async fn nack(&self, d: &Delivery) -> Result<(), BrokerError> {
        self.end(EndKind::Nack, d).await
    }

    /// Restarts the delivery's unack timer; fails when the token is stale.
    pub async fn touch(&self, d: &Delivery) -> Result<(), BrokerError> {
        self.end(EndKind::Touch, d).await
    }

    pub async fn stats(&self) -> Option<BrokerStats> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(BrokerRequest::Stats { reply }).await.ok()?;
        rx.await.ok()
    }

    /// Hands the broker an event; `false` once the broker is gone.
    pub(crate) async fn event(&self, event: broker::Event) -> bool {
        self.tx.send(BrokerRequest::Event(event)).await.is_ok()
    }

    async fn end(&self, kind: EndKind, d: &Delivery) -> Result<(), BrokerError> {
        let (reply, rx) = oneshot::channel();
        let req = BrokerRequest::End {
            kind,
            eval_id: d.eval.id.clone(),
            token: d.token.clone(),
            reply,
        };
        self.tx.send(req).await.map_err(|_| BrokerError::Disabled)?;
        rx.await.map_err(|_| BrokerError::Disabled)?
    }
}

/// The broker task and its handle. It handles `initial` (the rebuild, then the pause read with
/// it) before any request, so no dequeue ever finds it disabled, or unpaused when it should not
/// be, at the start. Evaluations the broker wants written go to `writes`.
pub(crate) fn broker_task(
    token_prefix: String,
    initial: Vec<broker::Event>,
    stop: watch::Receiver<bool>,
    writes: mpsc::Sender<Vec<Evaluation>>,
) -> (BrokerHandle, impl Future<Output = ()>) {
    let (tx, rx) = mpsc::channel(BROKER_REQUESTS_MAX);
    let shell = BrokerShell {
        engine: EvalBroker::new(token_prefix),
        waiters: HashMap::new(),
        next_waiter: 0,
        writes,
    };
    (BrokerHandle { tx }, shell.run(initial, rx, stop))
}

struct BrokerShell {
    engine: EvalBroker,
    /// Parked dequeues by waiter ID; bounded by the workers (each has at most one).
    waiters: HashMap<WaiterId, oneshot::Sender<Option<Delivery>>>,
    next_waiter: WaiterId,
    writes: mpsc::Sender<Vec<Evaluation>>,
}

impl BrokerShell {
    async fn run(
        mut self,
        initial: Vec<broker::Event>,
        mut rx: mpsc::Receiver<BrokerRequest>,
        mut stop: watch::Receiver<bool>,
    ) {
        for event in initial {
            self.step(event).await;
        }
        loop {
            let sleep = tokio::time::sleep(until_timer(self.engine.next_timer()));
            let req = tokio::select! {
                () = stopped(&mut stop) => None,
                req = rx.recv() => req,
                () = sleep => Some(BrokerRequest::Event(broker::Event::Tick)),
            };
            let Some(req) = req else {
                self.step(broker::Event::Flush).await;
                return;
            };
            self.request(req).await;
        }
    }

    async fn request(&mut self, req: BrokerRequest) {
        match req {
            BrokerRequest::Event(event) => self.step(event).await,
            BrokerRequest::Dequeue { types, reply } => {
                self.forget_gone_waiters().await;
                self.next_waiter += 1;
                let waiter = self.next_waiter;
                self.waiters.insert(waiter, reply);
                self.step(broker::Event::Dequeue { waiter, types }).await;
            }
            BrokerRequest::End {
                kind,
                eval_id,
                token,
                reply,
            } => {
                let event = match kind {
                    EndKind::Ack => broker::Event::Ack { eval_id, token },
                    EndKind::Nack => broker::Event::Nack { eval_id, token },
                    EndKind::Touch => broker::Event::Touch { eval_id, token },
                };
                match self.engine.handle(event, now_nanos()) {
                    Ok(commands) => {
                        let _ = reply.send(Ok(()));
                        self.execute(commands).await;
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            BrokerRequest::Stats { reply } => {
                let _ = reply.send(self.engine.stats());
            }
        }
    }

    /// Parked dequeues whose worker stopped waiting (aborted at a stop) leave the queue.
    async fn forget_gone_waiters(&mut self) {
        let gone: Vec<WaiterId> = self
            .waiters
            .iter()
            .filter(|(_, tx)| tx.is_closed())
            .map(|(w, _)| *w)
            .collect();
        for waiter in gone {
            self.waiters.remove(&waiter);
            self.step(broker::Event::CancelDequeue { waiter }).await;
        }
    }

    async fn step(&mut self, event: broker::Event) {
        // Only ack, nack and touch can fail, and those come through `request`.
        if let Ok(commands) = self.engine.handle(event, now_nanos()) {
            self.execute(commands).await;
        }
    }

    async fn execute(&mut self, commands: Vec<broker::Command>) {
        let mut todo: VecDeque<broker::Command> = commands.into();
        while let Some(command) = todo.pop_front() {
            match command {
                broker::Command::Deliver {
                    waiter,
                    eval,
                    token,
                } => {
                    let delivery = Delivery {
                        eval: eval.clone(),
                        token: token.clone(),
                    };
                    let taken = self
                        .waiters
                        .remove(&waiter)
                        .is_some_and(|tx| tx.send(Some(delivery)).is_ok());
                    if !taken {
                        // The worker went away: give the evaluation back at once.
                        let nack = broker::Event::Nack {
                            eval_id: eval.id.clone(),
                            token,
                        };
                        if let Ok(more) = self.engine.handle(nack, now_nanos()) {
                            todo.extend(more);
                        }
                    }
                }
                broker::Command::Release { waiter } => {
                    if let Some(tx) = self.waiters.remove(&waiter) {
                        let _ = tx.send(None);
                    }
                }
                broker::Command::WriteEvals(evals) => {
                    if self.writes.send(evals).await.is_err() {
                        tracing::warn!("the evaluation writer is gone; evaluations not written");
                    }
                }
            }
        }
    }
}

/// How long to sleep for a timer at `due` (Unix nanoseconds), at most [`BROKER_TICK_MAX`].
fn until_timer(due: Option<i64>) -> Duration {
    let Some(due) = due else {
        return BROKER_TICK_MAX;
    };
    let wait = u64::try_from(due.saturating_sub(now_nanos())).unwrap_or(0);
    Duration::from_nanos(wait).min(BROKER_TICK_MAX)
}

/// Writes the broker's evaluations (failed ones and follow-ups, cancellations) through raft, in
/// batches, one write at a time.
pub(crate) async fn writer_task(
    server: Server,
    mut rx: mpsc::Receiver<Vec<Evaluation>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let evals = tokio::select! {
            () = stopped(&mut stop) => return,
            evals = rx.recv() => match evals {
                Some(evals) => evals,
                None => return,
            },
        };
        let now = now_nanos();
        for chunk in evals.chunks(BROKER_WRITE_EVALS_MAX) {
            let evals = chunk
                .iter()
                .cloned()
                .map(|mut e| {
                    e.modify_time = now;
                    e
                })
                .collect();
            if let Err(e) = server.apply(state::Command::EvalUpsert { evals }).await {
                tracing::warn!(error = %e, "writing the broker's evaluations failed");
            }
        }
    }
}

/// Follows the state store and tells the broker what changed after each wake-up. `follower` has
/// already produced the broker's rebuild.
pub(crate) async fn follow_task(
    store: StateStore,
    broker: BrokerHandle,
    mut stop: watch::Receiver<bool>,
    mut follower: Follower,
) {
    let tables = [
        Table::Evals,
        Table::Nodes,
        Table::Allocs,
        Table::SchedulerConfig,
    ];
    loop {
        let last = follower.last_index();
        let wait = async {
            if last == 0 {
                // The store never blocks on index 0: poll until something is applied.
                tokio::time::sleep(FOLLOW_EMPTY_POLL).await;
                return store.snapshot();
            }
            let deadline = tokio::time::Instant::now() + FOLLOW_WAIT;
            store.wait_for(&tables, last, deadline).await
        };
        let snap = tokio::select! {
            () = stopped(&mut stop) => return,
            snap = wait => snap,
        };
        for event in follower.changes(&snap) {
            if !broker.event(event).await {
                return;
            }
        }
    }
}

// ----- heartbeats -----

/// Ticks the heartbeat engine (held by [`super::Leadership`], which the endpoints feed) at its next
/// deadline, at most [`HEARTBEAT_TICK_MAX`] apart, and writes down the nodes whose deadline passed —
/// with their node-update evaluations — one at a time.
pub(crate) async fn heartbeat_task(server: Server, mut stop: watch::Receiver<bool>) {
    tracing::info!("heartbeat timers running");
    loop {
        let Some((down, next)) = server
            .leadership()
            .heartbeat_tick(super::heartbeat::mono_nanos())
        else {
            tracing::info!("heartbeat timers stopped: this server no longer leads");
            return;
        };
        for node_id in down {
            if *stop.borrow() {
                return;
            }
            match server.node_mark_down(&node_id).await {
                Ok(Some(status)) => {
                    tracing::info!(
                        node_id,
                        status = status.as_str(),
                        "node missed its heartbeats"
                    )
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(node_id, error = %e, "marking a node down failed");
                    server.leadership().heartbeat_mark_down_failed(node_id);
                }
            }
        }
        let wait = match next {
            Some(due) => Duration::from_nanos(
                u64::try_from(due.saturating_sub(super::heartbeat::mono_nanos())).unwrap_or(0),
            ),
            None => HEARTBEAT_TICK_MAX,
        };
        tokio::select! {
            () = stopped(&mut stop) => return,
            () = tokio::time::sleep(wait.min(HEARTBEAT_TICK_MAX)) => {}
        }
    }
}

// ----- plan applier -----

type PlanReply = oneshot::Sender<Result<PlanResult, PlanError>>;

/// Submits plans to the applier task.
#[derive(Clone)]
pub struct ApplierHandle {
    tx: mpsc::Sender<(PlanSubmission, PlanReply)>,
}

impl ApplierHandle {
    /// Waits for the plan's turn and result. `NotLeader` once the applier is gone.
    pub async fn submit(&self, submission: PlanSubmission) -> Result<PlanResult, PlanError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send((submission, reply))
            .await
            .map_err(|_| PlanError::NotLeader)?;
        rx.await.map_err(|_| PlanError::NotLeader)?
    }
}

/// How soon the applier tries again to settle a failed entry.
const SETTLE_RETRY: Duration = Duration::from_millis(200);

/// The applier task and its handle.
pub(crate) fn applier_task(
    server: Server,
    stop: watch::Receiver<bool>,
) -> (ApplierHandle, impl Future<Output = ()>) {
    let (tx, rx) = mpsc::channel(PLAN_QUEUE_MAX);
    (ApplierHandle { tx }, applier_loop(server, rx, stop))
}

async fn applier_loop(
    server: Server,
    mut rx: mpsc::Receiver<(PlanSubmission, PlanReply)>,
    mut stop: watch::Receiver<bool>,
) {
    let mut engine = PlanApplier::new();
    // At most one evaluation and one commit are in flight, so at most two reports wait here.
    let (done_tx, mut done_rx) = mpsc::channel::<plan_apply::Event>(4);
    // Bounded by the queue (PLAN_QUEUE_MAX) plus the plans in flight.
    let mut replies: HashMap<PlanId, PlanReply> = HashMap::new();
    let mut next_id: PlanId = 0;
    // The entry in commit: the next batch is checked with it laid over the newest state.
    let mut in_commit: Option<Arc<state::Command>> = None;
    loop {
        let event = tokio::select! {
            () = stopped(&mut stop) => plan_apply::Event::Flush,
            sub = rx.recv() => match sub {
                Some((submission, reply)) => {
                    next_id += 1;
                    replies.insert(next_id, reply);
                    plan_apply::Event::Submit { id: next_id, submission: Arc::new(submission) }
                }
                None => plan_apply::Event::Flush,
            },
            Some(done) = done_rx.recv() => done,
        };
        let flush = matches!(event, plan_apply::Event::Flush);
        if matches!(
            event,
            plan_apply::Event::Committed { .. } | plan_apply::Event::CommitFailed { .. }
        ) {
            in_commit = None;
        }
        for command in engine.handle(event) {
            match command {
                plan_apply::Command::Evaluate { batch, over_commit } => {
                    let store = server.state().clone();
                    let under = if over_commit { in_commit.clone() } else { None };
                    let done = done_tx.clone();
                    tokio::spawn(async move {
                        let started = std::time::Instant::now();
                        let evaluated = crate::env::blocking(move || {
                            plan_apply::evaluate_batch(&store.snapshot(), under.as_deref(), &batch)
                        })
                        .await;
                        metrics::histogram!("nomad.nomad.plan.evaluate")
                            .record(started.elapsed().as_secs_f64() * 1000.0);
                        let event = match evaluated {
                            Ok(verdicts) => plan_apply::Event::Evaluated { verdicts },
                            Err(e) => plan_apply::Event::EvaluationFailed {
                                error: format!("evaluating the plans panicked: {e}"),
                            },
                        };
                        let _ = done.send(event).await;
                    });
                }
                plan_apply::Command::Commit { command } => {
                    let command = Arc::new(*command);
                    in_commit = Some(command.clone());
                    let server = server.clone();
                    let done = done_tx.clone();
                    tokio::spawn(async move {
                        let started = std::time::Instant::now();
                        let event = commit_entry(&server, &command).await;
                        metrics::histogram!("nomad.nomad.plan.apply")
                            .record(started.elapsed().as_secs_f64() * 1000.0);
                        let _ = done.send(event).await;
                    });
                }
                plan_apply::Command::Reply { id, result } => {
                    if let Some(reply) = replies.remove(&id) {
                        let _ = reply.send(result);
                    }
                }
            }
        }
        if flush {
            return;
        }
    }
}

/// Writes a plan entry. A batch too large for one Raft entry goes plan by plan (each is checked
/// with the ones before it applied, so they go in order and stop at the first failure, as the
/// FSM applies a batch). A failed write may still land (a timeout after the entry was
/// appended): the failure is reported only once a later write has committed, so the state the
/// next plans are checked against shows the entry's fate.
async fn commit_entry(server: &Server, command: &state::Command) -> plan_apply::Event {
    let written = match command {
        state::Command::PlanApplyBatch { plans }
            if encoded_len(command) > raft::limits::ENTRY_BYTES_MAX =>
        {
            commit_one_by_one(server, plans).await
        }
        _ => server
            .apply_ref(command)
            .await
            .map(|resp| (resp.index, resp.batch_errors)),
    };
    match written {
        Ok((index, errors)) => plan_apply::Event::Committed { index, errors },
        Err(e) => {
            settle(server).await;
            plan_apply::Event::CommitFailed {
                error: e.to_string(),
            }
        }
    }
}

fn encoded_len(command: &state::Command) -> usize {
    crate::fsm::encode_command(command).map_or(usize::MAX, |b| b.len())
}

/// A batch's plans, one entry each: the last index, and each plan's error.
async fn commit_one_by_one(
    server: &Server,
    plans: &[state::Command],
) -> Result<(u64, Vec<Option<String>>), crate::ServerError> {
    let mut index = 0;
    let mut errors = Vec::with_capacity(plans.len());
    for plan in plans {
        if errors.iter().any(Option::is_some) {
            errors.push(Some(
                "not applied: an earlier plan of its batch failed".to_owned(),
            ));
            continue;
        }
        match server.apply_ref(plan).await {
            Ok(resp) => {
                index = resp.index;
                errors.push(None);
            }
            Err(e) if index == 0 => return Err(e),
            Err(e) => {
                settle(server).await;
                errors.push(Some(e.to_string()));
            }
        }
    }
    Ok((index, errors))
}

/// Waits until a write after everything sent so far has committed (every earlier entry is then
/// applied or gone), or until this server no longer leads (the applier is flushed then).
async fn settle(server: &Server) {
    // An empty evaluation upsert changes nothing: it only orders after what came before.
    while server.is_leader() {
        match server
            .apply(state::Command::EvalUpsert { evals: vec![] })
            .await
        {
            Ok(_) => return,
            Err(e) => {
                tracing::warn!(error = %e, "waiting for a write to settle the failed plan entry");
                tokio::time::sleep(SETTLE_RETRY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::eval::EvalStatus;

    fn pending(id: &str) -> Arc<Evaluation> {
        Arc::new(Evaluation {
            id: id.into(),
            namespace: "default".into(),
            priority: 50,
            eval_type: model::JobType::Service,
            triggered_by: "job-register".into(),
            job_id: format!("job-{id}"),
            status: EvalStatus::Pending,
            create_index: 1,
            modify_index: 1,
            ..Evaluation::default()
        })
    }

    fn broker() -> (BrokerHandle, watch::Sender<bool>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (writes, _rx) = mpsc::channel(8);
        let initial = vec![broker::Event::Rebuild(Vec::new())];
        let (handle, run) = broker_task("t".into(), initial, stop_rx, writes);
        tokio::spawn(run);
        (handle, stop_tx)
    }

    /// What a worker does when the pool's configuration changes while its dequeue is parked: it
    /// closes the receiver, then takes what is in it. A delivery the broker sent just before is
    /// taken, not lost to the nack timer.
    #[tokio::test]
    async fn a_dequeue_given_up_keeps_a_delivery_already_sent() {
        let (broker, _stop) = broker();
        let mut waiter = broker
            .dequeue_waiter(vec!["service".into()])
            .await
            .expect("the broker runs");
        assert!(
            broker
                .event(broker::Event::EvalsChanged(vec![pending("e1")]))
                .await
        );
        // Requests are served in order: once stats answers, the delivery was sent.
        let stats = broker.stats().await.expect("the broker runs");
        assert_eq!(stats.unacked, 1, "{stats:?}");
        waiter.close();
        let d = waiter
            .try_recv()
            .expect("the delivery sent before the close is kept");
        assert_eq!(d.expect("a delivery").eval.id, "e1");
    }

    /// A dequeue given up before anything was sent: the next evaluation goes to another worker.
    #[tokio::test]
    async fn a_dequeue_given_up_empty_takes_nothing_from_the_next_worker() {
        let (broker, _stop) = broker();
        let mut gone = broker
            .dequeue_waiter(vec!["service".into()])
            .await
            .expect("the broker runs");
        gone.close();
        assert!(gone.try_recv().is_err());
        let next = broker
            .dequeue_waiter(vec!["service".into()])
            .await
            .expect("the broker runs");
        assert!(
            broker
                .event(broker::Event::EvalsChanged(vec![pending("e2")]))
                .await
        );
        let d = tokio::time::timeout(Duration::from_secs(10), next)
            .await
            .expect("delivered in time")
            .expect("the broker runs");
        assert_eq!(d.expect("a delivery").eval.id, "e2");
    }
}
