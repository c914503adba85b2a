//! The leader's loops: eval broker, state follower, plan applier, scheduling workers, heartbeat
//! timers, the periodic launcher, the deployment watcher, the node drainer.
//!
//! Each loop is an engine — a synchronous `handle(event, now) -> commands` core that tests drive
//! directly (`broker.rs`, `plan_apply.rs`, `follow.rs`, `heartbeat.rs`) — and a thin async task
//! that feeds it and executes its commands (`tasks.rs`). `worker.rs` runs the scheduler; `view.rs` shows it a state
//! snapshot. Limits and timings live in `limits.rs`.
//!
//! Lifecycle (the supervisor, below): raft offers no leadership notification, so the supervisor
//! polls `is_leader` every [`limits::LEADERSHIP_POLL`]. On becoming leader it waits (bounded) to
//! apply the log it has, then starts the writer, the broker, the follower (which rebuilds the broker
//! from every live evaluation in state), the applier and the workers. On losing leadership (or at
//! shutdown) it sends the stop signal and waits (bounded) for them: the broker and applier answer
//! everything outstanding with "not leader", workers exit. Nothing they held is lost — every
//! evaluation is in state, and the next leader starts from there.

pub(crate) mod autopilot;
mod broker;
pub(crate) mod deploy;
mod drain;
mod follow;
pub(crate) mod gc;
mod heartbeat;
pub(crate) mod limits;
pub(crate) mod multiregion;
pub(crate) mod periodic;
mod plan_apply;
pub mod pool;
mod stats;
pub(crate) mod tasks;
#[cfg(test)]
pub(crate) mod testkit;
mod view;
pub(crate) mod volumes;
mod worker;

pub use broker::BrokerStats;
pub use plan_apply::{evaluate_plan, Evaluated, PlanSubmission};
pub use view::SnapshotView;
pub use worker::seed_from;

use crate::server::Server;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// An ID made from another and a purpose, the same on every server: `uuid-v5(parent/what)`.
pub(crate) fn derived_id(parent: &str, what: &str) -> String {
    uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_OID,
        format!("{parent}/{what}").as_bytes(),
    )
    .to_string()
}

/// What the server knows about its leader loops.
pub(crate) struct Leadership {
    /// True while this server's workers run (set when the loops are up, cleared first thing when
    /// they stop).
    running: AtomicBool,
    /// True from the loops' start until every one of their tasks has ended (or been aborted).
    alive: watch::Sender<bool>,
    /// The running broker, for status queries. Never held across `.await`.
    broker: Mutex<Option<tasks::BrokerHandle>>,
    /// The heartbeat timers while this server leads; `None` otherwise. Never held across `.await`.
    heartbeats: Mutex<Option<heartbeat::Heartbeats>>,
    /// When each server's health last changed, as this leader saw it.
    pub(crate) autopilot: autopilot::HealthTracker,
}

impl Default for Leadership {
    fn default() -> Self {
        Leadership {
            running: AtomicBool::new(false),
            alive: watch::Sender::new(false),
            broker: Mutex::new(None),
            heartbeats: Mutex::new(None),
            autopilot: autopilot::HealthTracker::default(),
        }
    }
}

impl Leadership {
    /// How many nodes have a heartbeat timer (0 when this server does not lead).
    pub(crate) fn heartbeat_timers(&self) -> usize {
        self.heartbeats
            .lock()
            .expect("heartbeat lock")
            .as_ref()
            .map_or(0, heartbeat::Heartbeats::timer_count)
    }

    pub(crate) fn running(&self) -> bool {
        self.running.load(Ordering::SeqCst)
    }

    /// Waits (bounded) until no leader loop is left running.
    pub(crate) async fn wait_stopped(&self) {
        let mut alive = self.alive.subscribe();
        let wait = alive.wait_for(|a| !*a);
        let bound = limits::LEADER_STOP_WAIT + limits::LEADERSHIP_POLL * 2;
        let _ = tokio::time::timeout(bound, wait).await;
    }

    /// Restarts the node's heartbeat timer with a TTL scaled to the cluster (Nomad's
    /// `resetHeartbeatTimer`: `max_heartbeats_per_second`, `min_heartbeat_ttl`, a random stagger)
    /// and returns that TTL, which the node is handed. When this server does not lead (yet), the
    /// TTL is computed as if every known node had a timer.
    pub(crate) fn node_heartbeat_scaled(
        &self,
        node_id: &str,
        rate: f64,
        min_ttl: std::time::Duration,
        known_nodes: impl FnOnce() -> usize,
    ) -> std::time::Duration {
        let random = crate::env::random_u64();
        let mut guard = self.heartbeats.lock().expect("heartbeat lock");
        let Some(engine) = guard.as_mut() else {
            return heartbeat::heartbeat_ttl(rate, min_ttl, known_nodes(), random);
        };
        let ttl = heartbeat::heartbeat_ttl(rate, min_ttl, engine.timer_count(), random);
        let event = heartbeat::Event::NodeHeartbeat {
            node_id: node_id.to_owned(),
            ttl_ns: i64::try_from(ttl.as_nanos()).unwrap_or(i64::MAX),
        };
        let commands = engine.handle(event, heartbeat::mono_nanos());
        debug_assert!(commands.is_empty());
        ttl
    }

    /// Restarts the node's heartbeat timer (it heartbeated or registered and was handed `ttl`); a
    /// no-op when this server does not lead.
    pub(crate) fn node_heartbeat(&self, node_id: &str, ttl: std::time::Duration) {
        let event = heartbeat::Event::NodeHeartbeat {
            node_id: node_id.to_owned(),
            ttl_ns: i64::try_from(ttl.as_nanos()).unwrap_or(i64::MAX),
        };
        self.heartbeat_event(event);
    }

    /// The state was restored from a snapshot: every ready node gets the failover TTL to heartbeat,
    /// as after a leader change.
    pub(crate) fn nodes_restored(&self, nodes: Vec<String>) {
        self.heartbeat_event(heartbeat::Event::LeaderGained { nodes });
    }

    /// Stops the node's heartbeat timer (it is down).
    pub(crate) fn node_forget(&self, node_id: &str) {
        self.heartbeat_event(heartbeat::Event::Forget {
            node_id: node_id.to_owned(),
        });
    }

    /// Hands the heartbeat engine an event that yields no commands (only ticks do).
    fn heartbeat_event(&self, event: heartbeat::Event) {
        let mut guard = self.heartbeats.lock().expect("heartbeat lock");
        if let Some(engine) = guard.as_mut() {
            let commands = engine.handle(event, heartbeat::mono_nanos());
            debug_assert!(commands.is_empty());
        }
    }

    /// Ticks the heartbeat engine: the nodes whose deadline passed, and the next deadline. `None`
    /// when this server does not lead.
    fn heartbeat_tick(&self, now: i64) -> Option<(Vec<String>, Option<i64>)> {
        let mut guard = self.heartbeats.lock().expect("heartbeat lock");
        let engine = guard.as_mut()?;
        let down = engine
            .handle(heartbeat::Event::Tick, now)
            .into_iter()
            .map(|heartbeat::Command::MarkDown { node_id }| node_id)
            .collect();
        Some((down, engine.next_deadline()))
    }

    /// Marking the node down failed; its timer runs again, briefly.
    fn heartbeat_mark_down_failed(&self, node_id: String) {
        self.heartbeat_event(heartbeat::Event::MarkDownFailed { node_id });
    }

    /// The running broker's counts; `None` when this server does not lead.
    pub(crate) async fn broker_stats(&self) -> Option<BrokerStats> {
        let handle = self.broker.lock().expect("broker lock").clone()?;
        handle.stats().await
    }
}

/// Watches leadership until `shutdown`: starts the loops on gaining it, stops them on losing it.
pub(crate) async fn supervise(server: Server, mut shutdown: watch::Receiver<bool>) {
    loop {
        if !wait_for_leadership(&server, &mut shutdown, true).await {
            return;
        }
        let loops = LeaderLoops::start(&server).await;
        let keep_going = wait_for_leadership(&server, &mut shutdown, false).await;
        loops.stop(&server).await;
        if !keep_going {
            return;
        }
    }
}

/// Polls until this server's leadership is `leader`; `false` when shutdown came first.
async fn wait_for_leadership(
    server: &Server,
    shutdown: &mut watch::Receiver<bool>,
    leader: bool,
) -> bool {
    loop {
        if *shutdown.borrow() {
            return false;
        }
        if server.is_leader() == leader {
            return true;
        }
        tokio::select! {
            () = tokio::time::sleep(limits::LEADERSHIP_POLL) => {}
            changed = shutdown.changed() => if changed.is_err() { return false },
        }
    }
}

struct LeaderLoops {
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl LeaderLoops {
    async fn start(server: &Server) -> LeaderLoops {
        server.leadership().alive.send_replace(true);
        server.catch_up(limits::LEADER_CATCH_UP).await;
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let (writes, writes_rx) = tokio::sync::mpsc::channel(limits::BROKER_WRITES_MAX);
        tasks.spawn(tasks::writer_task(
            server.clone(),
            writes_rx,
            stop_rx.clone(),
        ));
        // A prefix of its own per leadership, so a token from an earlier one never matches.
        let prefix = crate::endpoints::new_id()[..8].to_owned();
        let mut follower = follow::Follower::new();
        let rebuild = follower.rebuild(&server.state().snapshot());
        let initial = vec![rebuild, broker::Event::Pause(follower.paused())];
        let (broker, broker_loop) = tasks::broker_task(prefix, initial, stop_rx.clone(), writes);
        tasks.spawn(broker_loop);
        tasks.spawn(tasks::follow_task(
            server.state().clone(),
            broker.clone(),
            stop_rx.clone(),
            follower,
        ));
        let (applier, applier_loop) = tasks::applier_task(server.clone(), stop_rx.clone());
        tasks.spawn(applier_loop);
        let ctx = Arc::new(worker::WorkerContext {
            store: server.state().clone(),
            broker: broker.clone(),
            applier,
            server: server.clone(),
        });
        // Follows the pool's configuration (`/v1/agent/schedulers/config`): workers past the
        // count stop themselves; this starts the missing ones.
        tasks.spawn(pool_supervisor(ctx.clone(), stop_rx.clone()));
        let leadership = server.leadership();
        {
            // The snapshot is read under the lock, so a node registered before it has a failover
            // timer (whatever its status, but down) and one registered after it gets its timer
            // from its own registration.
            let mut guard = leadership.heartbeats.lock().expect("heartbeat lock");
            let cfg = server.config();
            let mut engine = heartbeat::Heartbeats::new(heartbeat::Timing {
                grace_ns: duration_ns(cfg.heartbeat_grace),
                failover_ns: duration_ns(cfg.failover_heartbeat_ttl),
                rate: cfg.max_heartbeats_per_second,
                min_ttl: cfg.min_heartbeat_ttl,
                retry_ns: limits::HEARTBEAT_RETRY_NS,
            });
            let nodes = timed_nodes(&server.state().snapshot());
            engine.handle(
                heartbeat::Event::LeaderGained { nodes },
                heartbeat::mono_nanos(),
            );
            *guard = Some(engine);
        }
        tasks.spawn(tasks::heartbeat_task(server.clone(), stop_rx.clone()));
        tasks.spawn(deploy::run(server.clone(), stop_rx.clone()));
        // Stateless: each tick reads the drains and the marks from state.
        tasks.spawn(drain::run(server.clone(), stop_rx.clone()));
        // Rebuilt from state: each job's last launch is its newest child.
        tasks.spawn(periodic::periodic_task(server.clone(), stop_rx.clone()));
        // Stateless: the leader's own view of its peers.
        tasks.spawn(autopilot::run(server.clone(), stop_rx.clone()));
        tasks.spawn(multiregion::run(server.clone(), stop_rx.clone()));
        // Stateless: each claim's checkpoint says where its release stands.
        tasks.spawn(volumes::run(server.clone(), stop_rx.clone()));
        tasks.spawn(crate::acl::expire_loop(server.clone(), stop_rx.clone()));
        tasks.spawn(crate::replication::run(server.clone(), stop_rx.clone()));
        tasks.spawn(crate::variables::leader_loop(
            server.clone(),
            stop_rx.clone(),
        ));
        tasks.spawn(stats::run(server.clone(), broker.clone(), stop_rx.clone()));
        // Stateless: each round judges a fresh snapshot.
        tasks.spawn(gc::run(server.clone(), stop_rx.clone()));
        *leadership.broker.lock().expect("broker lock") = Some(broker);
        leadership.running.store(true, Ordering::SeqCst);
        tracing::info!(
            workers = server.worker_pool().config().num_schedulers,
            "leader loops started"
        );
        LeaderLoops { stop, tasks }
    }

    /// The stop protocol: (1) say the workers no longer run; (2) signal stop — the broker releases
    /// dequeues, the applier answers its queue, the rest return; (3) wait for them, bounded, then
    /// abort what is left (a worker inside the scheduler finishes on the blocking pool, unheard).
    async fn stop(mut self, server: &Server) {
        let leadership = server.leadership();
        leadership.running.store(false, Ordering::SeqCst);
        *leadership.broker.lock().expect("broker lock") = None;
        if let Some(mut engine) = leadership.heartbeats.lock().expect("heartbeat lock").take() {
            engine.handle(heartbeat::Event::LeaderLost, heartbeat::mono_nanos());
        }
        let _ = self.stop.send(true);
        let joined = tokio::time::timeout(limits::LEADER_STOP_WAIT, async {
            while self.tasks.join_next().await.is_some() {}
        })
        .await;
        if joined.is_err() {
            tracing::warn!("leader loops did not stop in time; aborting them");
            self.tasks.shutdown().await;
        }
        leadership.alive.send_replace(false);
        tracing::info!("leader loops stopped");
    }
}

/// The nodes a new leader (or a restored state) gives the failover TTL: every node that is not
/// down, as Nomad's `initializeHeartbeatTimers`. Initializing ones too: a client that registered
/// while the leader loops were starting had its own timer dropped, and would otherwise never be
/// marked down. Disconnected ones too: when the timer fires, `node_mark_down` waits out what is
/// left of their `lost_after`.
pub(crate) fn timed_nodes(snap: &state::StateSnapshot) -> Vec<String> {
    snap.nodes("")
        .iter()
        .filter(|n| n.status != model::node::NodeStatus::Down)
        .map(|n| n.id.clone())
        .collect()
}

fn duration_ns(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Keeps `num_schedulers` workers running while this server leads; they all stop with it.
async fn pool_supervisor(ctx: Arc<worker::WorkerContext>, mut stop: watch::Receiver<bool>) {
    let pool = ctx.server.worker_pool();
    let mut config = pool.watch();
    let mut workers: JoinSet<()> = JoinSet::new();
    let mut running: Vec<bool> = Vec::new();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(usize, worker::Exit)>();
    loop {
        let want = config
            .borrow_and_update()
            .num_schedulers
            .min(limits::WORKERS_MAX);
        if running.len() < want {
            running.resize(want, false);
        }
        for (i, slot) in running.iter_mut().enumerate().take(want) {
            if !*slot {
                *slot = true;
                let (ctx, done) = (ctx.clone(), done_tx.clone());
                workers.spawn(async move {
                    let exit = worker::run(ctx.clone(), i).await;
                    ctx.server.worker_pool().stopped(i);
                    let _ = done.send((i, exit));
                });
            }
        }
        tokio::select! {
            () = tasks::stopped(&mut stop) => return,
            changed = config.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            Some((i, exit)) = done_rx.recv() => {
                // The broker is gone: leadership is ending, and so are the others.
                if exit == worker::Exit::BrokerGone {
                    return;
                }
                // Past the count when it looked; started again above if wanted by now.
                if let Some(slot) = running.get_mut(i) {
                    *slot = false;
                }
            }
            Some(_) = workers.join_next(), if !workers.is_empty() => {}
        }
    }
}
