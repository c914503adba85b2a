//! Heartbeat expiry, as Nomad's heartbeat timers: the leader keeps one deadline per node — its last
//! heartbeat plus the TTL it handed out plus a grace — and a node whose deadline passes is written
//! `down` (the shell also creates node-update evaluations, so the scheduler marks its allocations
//! lost and replaces them).
//!
//! A new leader gives every ready node a fresh failover deadline (Nomad's `failover_heartbeat_ttl`),
//! so an election never marks healthy nodes down: they have that long to find the new leader.
//!
//! The engine is synchronous: `handle(event, now)` returns what to do; `tasks.rs` ticks it. Its
//! clock is [`mono_nanos`], monotonic: a step of the wall clock (NTP, an operator's `date -s`)
//! never expires a deadline early nor holds one back.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

/// Nanoseconds on the monotonic clock since this process first asked: the heartbeat engine's
/// `now`. Only differences mean anything.
pub fn mono_nanos() -> i64 {
    crate::env::mono_nanos()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The node heartbeated (or registered) and was handed `ttl_ns`.
    NodeHeartbeat { node_id: String, ttl_ns: i64 },
    /// The node needs no timer (it is down, or gone).
    Forget { node_id: String },
    /// Marking the node down failed: try again after [`super::limits::HEARTBEAT_RETRY_NS`].
    MarkDownFailed { node_id: String },
    /// Look for passed deadlines.
    Tick,
    /// This server became leader; `nodes` are the ready nodes in state.
    LeaderGained { nodes: Vec<String> },
    /// Leadership is lost: every timer stops.
    LeaderLost,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// The node's deadline passed: write it `down` and evaluate its jobs.
    MarkDown { node_id: String },
}

/// Nomad's `RateScaledInterval`: the interval at which `n` nodes heartbeat at most `rate` times a
/// second in all, never under `min`. A rate of 0 (or less) means no scaling.
pub fn rate_scaled_interval(rate: f64, min: Duration, n: usize) -> Duration {
    if rate <= 0.0 || !rate.is_finite() {
        return min;
    }
    let secs = n as f64 / rate;
    if !secs.is_finite() {
        return min;
    }
    Duration::from_secs_f64(secs.min(MAX_SCALED_SECS)).max(min)
}

/// The TTL handed to a node when `n` nodes have timers (Nomad's `resetHeartbeatTimer`): the rate
/// scaled interval plus a random stagger of up to as much again, so heartbeats spread out.
/// `random` is any 64-bit random value.
pub fn heartbeat_ttl(rate: f64, min: Duration, n: usize, random: u64) -> Duration {
    let ttl = rate_scaled_interval(rate, min, n);
    let nanos = u64::try_from(ttl.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return ttl;
    }
    ttl + Duration::from_nanos(random % nanos)
}

/// A scaled interval never goes past a day, whatever the rate.
const MAX_SCALED_SECS: f64 = 86_400.0;

#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Added to every TTL before a node is marked down (Nomad's `heartbeat_grace`).
    pub grace_ns: i64,
    /// The deadline a new leader gives every ready node (Nomad's `failover_heartbeat_ttl`),
    /// raised to the rate-scaled interval of that many nodes plus the grace when a large cluster
    /// needs longer to reach the new leader at `max_heartbeats_per_second`.
    pub failover_ns: i64,
    /// `max_heartbeats_per_second` and `min_heartbeat_ttl`, for that floor.
    pub rate: f64,
    pub min_ttl: Duration,
    /// The wait before retrying a failed down write.
    pub retry_ns: i64,
}

pub struct Heartbeats {
    timing: Timing,
    /// Deadlines (Unix nanoseconds) by node.
    deadlines: HashMap<String, i64>,
    /// Whether this server leads; no timer runs otherwise.
    enabled: bool,
}

impl Heartbeats {
    pub fn new(timing: Timing) -> Heartbeats {
        Heartbeats {
            timing,
            deadlines: HashMap::new(),
            enabled: false,
        }
    }

    pub fn handle(&mut self, event: Event, now: i64) -> Vec<Command> {
        match event {
            Event::LeaderGained { nodes } => {
                self.enabled = true;
                self.deadlines.clear();
                let scaled =
                    rate_scaled_interval(self.timing.rate, self.timing.min_ttl, nodes.len());
                let floor = i64::try_from(scaled.as_nanos())
                    .unwrap_or(i64::MAX)
                    .saturating_add(self.timing.grace_ns);
                let due = now.saturating_add(self.timing.failover_ns.max(floor));
                self.deadlines
                    .extend(nodes.into_iter().map(|node| (node, due)));
                Vec::new()
            }
            Event::LeaderLost => {
                self.enabled = false;
                self.deadlines.clear();
                Vec::new()
            }
            Event::NodeHeartbeat { node_id, ttl_ns } if self.enabled => {
                let due = now
                    .saturating_add(ttl_ns.max(0))
                    .saturating_add(self.timing.grace_ns);
                self.deadlines.insert(node_id, due);
                Vec::new()
            }
            Event::MarkDownFailed { node_id } if self.enabled => {
                let due = now.saturating_add(self.timing.retry_ns);
                self.deadlines.entry(node_id).or_insert(due);
                Vec::new()
            }
            Event::Forget { node_id } => {
                self.deadlines.remove(&node_id);
                Vec::new()
            }
            Event::Tick if self.enabled => {
                // Sorted, so the commands come in the same order on every run.
                let passed: BTreeSet<String> = self
                    .deadlines
                    .iter()
                    .filter(|(_, due)| **due <= now)
                    .map(|(node, _)| node.clone())
                    .collect();
                passed
                    .into_iter()
                    .map(|node_id| {
                        self.deadlines.remove(&node_id);
                        Command::MarkDown { node_id }
                    })
                    .collect()
            }
            Event::NodeHeartbeat { .. } | Event::MarkDownFailed { .. } | Event::Tick => Vec::new(),
        }
    }

    /// How many nodes have a timer (what the TTL scales with).
    pub fn timer_count(&self) -> usize {
        self.deadlines.len()
    }

    /// The earliest deadline, for the shell's sleep.
    pub fn next_deadline(&self) -> Option<i64> {
        self.deadlines.values().min().copied()
    }

    /// The node's deadline, if it has one.
    #[cfg(test)]
    pub fn deadline(&self, node_id: &str) -> Option<i64> {
        self.deadlines.get(node_id).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    fn engine() -> Heartbeats {
        let mut hb = Heartbeats::new(Timing {
            grace_ns: 10 * S,
            failover_ns: 300 * S,
            rate: 50.0,
            min_ttl: Duration::from_secs(10),
            retry_ns: S,
        });
        hb.handle(Event::LeaderGained { nodes: vec![] }, 0);
        hb
    }

    fn beat(hb: &mut Heartbeats, node: &str, now: i64) -> Vec<Command> {
        hb.handle(
            Event::NodeHeartbeat {
                node_id: node.into(),
                ttl_ns: 10 * S,
            },
            now,
        )
    }

    #[test]
    fn ttls_scale_with_the_cluster_as_nomads() {
        let min = Duration::from_secs(10);
        // Under 500 nodes at 50/s the floor holds; past it the interval grows linearly.
        assert_eq!(rate_scaled_interval(50.0, min, 0), min);
        assert_eq!(rate_scaled_interval(50.0, min, 500), min);
        assert_eq!(
            rate_scaled_interval(50.0, min, 10_000),
            Duration::from_secs(200)
        );
        assert_eq!(
            rate_scaled_interval(500.0, min, 10_000),
            Duration::from_secs(20)
        );
        assert_eq!(rate_scaled_interval(0.0, min, 10_000), min, "0: no scaling");
        assert_eq!(rate_scaled_interval(f64::NAN, min, 10_000), min);
        assert_eq!(
            rate_scaled_interval(1e-300, min, 10),
            Duration::from_secs(86_400),
            "capped"
        );
        // The stagger adds up to as much again.
        for r in [0, 1, u64::MAX / 3, u64::MAX] {
            let ttl = heartbeat_ttl(50.0, min, 10_000, r);
            assert!(
                ttl >= Duration::from_secs(200) && ttl < Duration::from_secs(400),
                "{ttl:?}"
            );
        }
        assert_eq!(heartbeat_ttl(50.0, min, 1, 0), min);
    }

    #[test]
    fn a_new_leader_gives_a_large_cluster_at_least_its_scaled_interval() {
        let mut hb = Heartbeats::new(Timing {
            grace_ns: 10 * S,
            failover_ns: 60 * S,
            rate: 50.0,
            min_ttl: Duration::from_secs(10),
            retry_ns: S,
        });
        let nodes: Vec<String> = (0..10_000).map(|i| format!("n{i}")).collect();
        hb.handle(Event::LeaderGained { nodes }, 0);
        assert_eq!(hb.timer_count(), 10_000);
        // 10,000 nodes at 50/s: 200 s, plus the grace, beats the 60 s failover TTL.
        assert_eq!(hb.deadline("n0"), Some(210 * S));
        let mut small = engine();
        small.handle(
            Event::LeaderGained {
                nodes: vec!["a".into()],
            },
            0,
        );
        assert_eq!(
            small.deadline("a"),
            Some(300 * S),
            "the failover TTL when larger"
        );
    }

    fn down(node: &str) -> Command {
        Command::MarkDown {
            node_id: node.into(),
        }
    }

    #[test]
    fn a_passed_deadline_marks_the_node_down_once() {
        let mut hb = engine();
        assert!(beat(&mut hb, "n1", 0).is_empty());
        assert_eq!(hb.deadline("n1"), Some(20 * S), "TTL plus grace");
        assert!(hb.handle(Event::Tick, 20 * S - 1).is_empty());
        assert_eq!(hb.handle(Event::Tick, 20 * S), vec![down("n1")]);
        assert!(hb.handle(Event::Tick, 30 * S).is_empty(), "only once");
        assert_eq!(hb.next_deadline(), None);
    }

    #[test]
    fn a_heartbeat_resets_the_deadline() {
        let mut hb = engine();
        beat(&mut hb, "n1", 0);
        beat(&mut hb, "n2", 0);
        beat(&mut hb, "n1", 15 * S);
        assert_eq!(hb.next_deadline(), Some(20 * S));
        assert_eq!(hb.handle(Event::Tick, 25 * S), vec![down("n2")]);
        assert!(hb.handle(Event::Tick, 34 * S).is_empty());
        assert_eq!(hb.handle(Event::Tick, 35 * S), vec![down("n1")]);
    }

    #[test]
    fn a_new_leader_gives_ready_nodes_the_failover_ttl() {
        let mut hb = engine();
        beat(&mut hb, "old", 0);
        hb.handle(Event::LeaderLost, S);
        assert!(
            hb.handle(Event::Tick, 100 * S).is_empty(),
            "no timers off leadership"
        );
        assert!(beat(&mut hb, "ignored", 100 * S).is_empty());
        assert_eq!(hb.next_deadline(), None);

        hb.handle(
            Event::LeaderGained {
                nodes: vec!["a".into(), "b".into()],
            },
            1000 * S,
        );
        assert_eq!(hb.deadline("a"), Some(1300 * S));
        assert_eq!(
            hb.deadline("old"),
            None,
            "earlier leaderships' timers are gone"
        );
        // A TTL's worth of silence is no reason to mark anything down after an election.
        assert!(hb.handle(Event::Tick, 1020 * S).is_empty());
        beat(&mut hb, "a", 1100 * S);
        assert_eq!(hb.deadline("a"), Some(1120 * S));
        assert_eq!(hb.handle(Event::Tick, 1120 * S), vec![down("a")]);
        assert_eq!(hb.handle(Event::Tick, 1300 * S), vec![down("b")]);
    }

    #[test]
    fn a_down_node_that_heartbeats_again_gets_a_timer_again() {
        let mut hb = engine();
        beat(&mut hb, "n1", 0);
        assert_eq!(hb.handle(Event::Tick, 20 * S), vec![down("n1")]);
        // It comes back (the endpoint writes it ready); its timer runs again.
        beat(&mut hb, "n1", 40 * S);
        assert_eq!(hb.deadline("n1"), Some(60 * S));
        assert_eq!(hb.handle(Event::Tick, 60 * S), vec![down("n1")]);
    }

    #[test]
    fn forgotten_nodes_and_failed_writes() {
        let mut hb = engine();
        beat(&mut hb, "gone", 0);
        hb.handle(
            Event::Forget {
                node_id: "gone".into(),
            },
            S,
        );
        assert!(hb.handle(Event::Tick, 100 * S).is_empty());

        beat(&mut hb, "n1", 100 * S);
        assert_eq!(hb.handle(Event::Tick, 120 * S), vec![down("n1")]);
        hb.handle(
            Event::MarkDownFailed {
                node_id: "n1".into(),
            },
            120 * S,
        );
        assert_eq!(hb.handle(Event::Tick, 121 * S), vec![down("n1")], "retried");
    }
}
