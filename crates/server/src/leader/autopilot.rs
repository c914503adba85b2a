//! Nomad's autopilot on the leader, from its own view of its raft peers (nothing here is
//! remembered across leaders but when each server's health last changed, so a new leader simply
//! looks again):
//!
//! - **The configuration.** The cluster's autopilot configuration is stored through raft; while
//!   none is stored (a new cluster, a restored snapshot from before it existed) the leader stores
//!   its agent's `autopilot { … }` block, as Nomad's `getOrCreateAutopilotConfig` does. Every
//!   tick reads the stored one, so an operator's change applies within a tick.
//! - **Health** ([`health`], `/v1/operator/autopilot/health`): a server is healthy when the
//!   leader heard from it within `LastContactThreshold`, it holds an entry of the leader's term,
//!   and its log trails the leader's by at most `MaxTrailingLogs`. The leader hears from a peer
//!   only when it answers a heartbeat (every `raft_heartbeat_ms`), so a peer counts as in contact
//!   while its silence is within the threshold plus one heartbeat interval. There is no gossip
//!   yet (issue #22): `SerfStatus` is `alive` for a server in contact and `failed` otherwise.
//! - **Promotion** (Nomad's): a server that joins a running cluster is added as a non-voter and
//!   becomes a voter once it has been healthy for `ServerStabilizationTime` without a break, so a
//!   server that flaps while catching up never counts toward (or against) the quorum.
//! - **Dead-server cleanup** (`CleanupDeadServers`): a voter silent towards the leader for longer
//!   than `ServerStabilizationTime` is removed from the raft configuration — one at a time, and
//!   never when that would leave fewer voters than `bootstrap_expect` (a cluster never shrinks
//!   below the size it was built for: a replacement must have joined first) or than `MinQuorum`.

use crate::server::Server;
use model::autopilot::{AutopilotConfiguration, OperatorHealthReply, ServerHealth};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How often the leader looks at its peers.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The voter to remove now, if any: silent for longer than `after` (never-acknowledged peers
/// count as silent since the leader took over, which `since_leader` says), the lowest ID first,
/// only while more than `floor` voters (and at least one besides the leader) would be left.
pub(crate) fn dead_voter(
    me: u64,
    voters: &[u64],
    silence: &BTreeMap<u64, Option<Duration>>,
    since_leader: Duration,
    floor: usize,
    after: Duration,
) -> Option<u64> {
    if voters.len() <= floor.max(1) {
        return None;
    }
    voters
        .iter()
        .copied()
        .filter(|id| *id != me)
        .find(|id| match silence.get(id) {
            Some(Some(quiet)) => *quiet > after,
            Some(None) | None => since_leader > after,
        })
}

/// What the leader knows of one raft member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub id: u64,
    pub leader: bool,
    /// How long since it last acknowledged the leader (`None`: never since this leader took
    /// over); zero for the leader itself.
    pub silence: Option<Duration>,
    /// The last entry the leader knows it holds, `(term, index)`; the leader's own last entry
    /// for the leader.
    pub matched: Option<(u64, u64)>,
}

/// One member's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Heard from within the threshold (`SerfStatus` `alive`).
    pub alive: bool,
    pub healthy: bool,
    /// Its silence; a member never heard from has been silent since the leader took over.
    pub last_contact: Duration,
}

/// Judges one member (see the module's doc): `term` is the leader's, `last_index` the leader's
/// last log index, `heartbeat` the raft heartbeat interval.
pub(crate) fn judge(
    cfg: &AutopilotConfiguration,
    term: u64,
    last_index: u64,
    heartbeat: Duration,
    since_leader: Duration,
    member: &Observed,
) -> Verdict {
    if member.leader {
        return Verdict {
            alive: true,
            healthy: true,
            last_contact: Duration::ZERO,
        };
    }
    let last_contact = member.silence.unwrap_or(since_leader);
    let alive =
        member.silence.is_some() && last_contact <= cfg.last_contact_threshold_std() + heartbeat;
    let (its_term, its_index) = member.matched.unwrap_or((0, 0));
    let caught_up =
        its_term == term && its_index.saturating_add(cfg.max_trailing_logs) >= last_index;
    Verdict {
        alive,
        healthy: alive && caught_up,
        last_contact,
    }
}

/// When each server's health last changed, as this leader saw it (Nomad's `StableSince`), and
/// when this server last became leader. Never held across `.await`.
#[derive(Default)]
pub(crate) struct HealthTracker(Mutex<Tracked>);

#[derive(Default)]
struct Tracked {
    leader_since: Option<Instant>,
    /// Raft ID → (healthy, since: Unix nanoseconds for `StableSince`, and on the monotonic
    /// clock for promotion, so a stepped wall clock never promotes an unstable server).
    seen: BTreeMap<u64, (bool, i64, Instant)>,
}

impl HealthTracker {
    /// A new leadership: nothing seen yet.
    pub(crate) fn reset(&self) {
        *self.0.lock().expect("autopilot tracker lock") = Tracked {
            leader_since: Some(Instant::now()),
            seen: BTreeMap::new(),
        };
    }

    pub(crate) fn since_leader(&self) -> Duration {
        self.0
            .lock()
            .expect("autopilot tracker lock")
            .leader_since
            .map_or(Duration::ZERO, |t| t.elapsed())
    }

    /// Since when (Unix nanoseconds) server `id` has been healthy without a break, as this
    /// leader saw it; `None` when it is not healthy or not seen yet.
    fn healthy_since(&self, id: u64) -> Option<Instant> {
        let t = self.0.lock().expect("autopilot tracker lock");
        t.seen
            .get(&id)
            .and_then(|(healthy, _, since)| healthy.then_some(*since))
    }

    /// Records the verdicts of this look (`(id, healthy)`) at `now`; forgets members no longer
    /// listed. Returns when each one's health last changed.
    fn observe(&self, verdicts: &[(u64, bool)], now: i64) -> BTreeMap<u64, i64> {
        let mut t = self.0.lock().expect("autopilot tracker lock");
        t.seen
            .retain(|id, _| verdicts.iter().any(|(listed, _)| listed == id));
        verdicts
            .iter()
            .map(|&(id, healthy)| {
                let entry = t.seen.entry(id).or_insert((healthy, now, Instant::now()));
                if entry.0 != healthy {
                    *entry = (healthy, now, Instant::now());
                }
                (id, entry.1)
            })
            .collect()
    }
}

/// Nomad's `StableSince.Round(time.Second).UTC()` as JSON writes it.
fn stable_since_text(unix_nanos: i64) -> String {
    const SEC: i64 = 1_000_000_000;
    let rounded = (unix_nanos + SEC / 2).div_euclid(SEC) * SEC;
    model::time::format_unix_nanos(rounded)
}

/// The servers' health now, from this leader's view of its raft peers; records when each one's
/// health changed.
pub(crate) fn health(server: &Server) -> OperatorHealthReply {
    let cfg = server.autopilot_config();
    let raft = server.raft();
    let stats = raft.stats();
    let silence = raft.peer_silence();
    let matched = raft.peer_matched();
    let voters = raft.voters();
    let me = server.node_id();
    let tracker = &server.leadership().autopilot;
    let since_leader = tracker.since_leader();
    let heartbeat = Duration::from_millis(server.config().raft_heartbeat_ms);
    let mut members = server.members();
    members.sort_by_key(|m| m.raft_id);
    let judged: Vec<(crate::server::Member, Observed, Verdict)> = members
        .into_iter()
        .map(|m| {
            let leader = m.raft_id == me;
            let observed = Observed {
                id: m.raft_id,
                leader,
                silence: if leader {
                    Some(Duration::ZERO)
                } else {
                    silence.get(&m.raft_id).copied().flatten()
                },
                matched: if leader {
                    Some((stats.term, stats.last_log_index))
                } else {
                    matched.get(&m.raft_id).copied().flatten()
                },
            };
            let mut verdict = judge(
                &cfg,
                stats.term,
                stats.last_log_index,
                heartbeat,
                since_leader,
                &observed,
            );
            // Where gossip knows the server, its word is the serf status (as Nomad's), and a
            // server gossip does not see alive is not healthy, whatever raft says.
            if !m.serf_addr.is_empty() && m.status != "alive" {
                verdict.alive = false;
                verdict.healthy = false;
            }
            (m, observed, verdict)
        })
        .collect();
    let verdicts: Vec<(u64, bool)> = judged.iter().map(|(_, o, v)| (o.id, v.healthy)).collect();
    let since = tracker.observe(&verdicts, crate::endpoints::now_nanos());
    let healthy_voters = judged
        .iter()
        .filter(|(_, o, v)| v.healthy && voters.contains(&o.id))
        .count();
    let servers: Vec<ServerHealth> = judged
        .into_iter()
        .map(|(m, o, v)| {
            let (last_term, last_index) = o.matched.unwrap_or((0, 0));
            ServerHealth {
                id: o.id.to_string(),
                name: m.name,
                address: m.addr,
                serf_status: if !m.serf_addr.is_empty() {
                    m.status.clone()
                } else if v.alive {
                    "alive".to_string()
                } else {
                    "failed".to_string()
                },
                version: if !m.build.is_empty() {
                    m.build.clone()
                } else if o.leader {
                    env!("CARGO_PKG_VERSION").to_string()
                } else {
                    String::new()
                },
                leader: o.leader,
                last_contact: v.last_contact.into(),
                last_term,
                last_index,
                healthy: v.healthy,
                voter: voters.contains(&o.id),
                stable_since: stable_since_text(since.get(&o.id).copied().unwrap_or(0)),
            }
        })
        .collect();
    let failure_tolerance = model::autopilot::failure_tolerance(voters.len(), healthy_voters);
    let healthy = servers.iter().all(|s| s.healthy);
    metrics::gauge!("nomad.nomad.autopilot.healthy").set(if healthy { 1.0 } else { 0.0 });
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!("nomad.nomad.autopilot.failure_tolerance").set(failure_tolerance as f64);
    OperatorHealthReply {
        healthy,
        failure_tolerance,
        servers,
        leader: me.to_string(),
        voters: voters.iter().map(u64::to_string).collect(),
    }
}

/// The non-voters healthy for at least `ServerStabilizationTime` without a break become voters
/// (Nomad's autopilot promotion), one per look.
async fn promote_stable(server: &Server, now: &OperatorHealthReply, cfg: &AutopilotConfiguration) {
    let stable_for = cfg.server_stabilization_time_std();
    let tracker = &server.leadership().autopilot;
    let ready = now
        .servers
        .iter()
        .filter(|s| !s.voter && s.healthy)
        .find_map(|s| {
            let id: u64 = s.id.parse().ok()?;
            let since = tracker.healthy_since(id)?;
            (since.elapsed() >= stable_for).then_some(id)
        });
    let Some(id) = ready else {
        return;
    };
    tracing::info!(
        server_id = id,
        ?stable_for,
        "autopilot: promoting a stable server to voter"
    );
    if let Err(e) = server.raft().promote(id).await {
        tracing::warn!(server_id = id, error = %e, "autopilot: promoting a server failed");
    }
}

/// Stores the agent's `autopilot` block while no configuration is stored (a check-and-set
/// against "none", so an operator's concurrent write wins).
pub(crate) async fn store_agent_config(server: &Server) {
    if server.state().snapshot().autopilot_config().is_some() {
        return;
    }
    let cmd = state::Command::AutopilotConfigSet {
        config: server.agent_autopilot_config(),
        cas: Some(0),
    };
    match server.apply(cmd).await {
        Ok(_) => {}
        Err(e) if e.code == rpc::ErrorCode::Conflict => {}
        Err(e) => {
            tracing::warn!(error = %e, "autopilot: storing the agent's configuration failed");
        }
    }
}

pub(crate) async fn run(server: Server, mut stop: watch::Receiver<bool>) {
    server.leadership().autopilot.reset();
    loop {
        store_agent_config(&server).await;
        tokio::select! {
            () = super::tasks::stopped(&mut stop) => return,
            () = tokio::time::sleep(CHECK_EVERY) => {}
        }
        // Also keeps each server's `StableSince` current between health requests.
        let now = health(&server);
        let cfg = server.autopilot_config();
        promote_stable(&server, &now, &cfg).await;
        // A server that left gossip on purpose (or was force-left) leaves raft too, as Nomad's
        // leader reconciles a `left` serf member: one at a time, never this one.
        let me = server.node_id();
        let left = server
            .members()
            .into_iter()
            .find(|m| m.raft_id != me && !m.serf_addr.is_empty() && m.status == "left");
        if let Some(m) = left {
            tracing::info!(server_id = m.raft_id, name = %m.name, "removing a server that left from raft");
            if let Err(e) = server.raft().remove_member(m.raft_id).await {
                tracing::warn!(server_id = m.raft_id, error = %e, "removing a server that left failed");
            }
            continue;
        }
        if !cfg.cleanup_dead_servers {
            continue;
        }
        let raft = server.raft();
        let voters = raft.voters();
        let silence = raft.peer_silence();
        let expect = usize::try_from(server.config().bootstrap_expect).unwrap_or(usize::MAX);
        let min_quorum = usize::try_from(cfg.min_quorum).unwrap_or(usize::MAX);
        let after = cfg.server_stabilization_time_std();
        // A non-voter that went silent (it joined, then died before it was promoted) does not
        // count toward the quorum: it goes without waiting for a replacement.
        let learners: Vec<u64> = raft
            .members()
            .into_iter()
            .map(|(id, _)| id)
            .filter(|id| !voters.contains(id))
            .collect();
        let since_leader = server.leadership().autopilot.since_leader();
        let dead_learner = learners.iter().copied().find(|id| match silence.get(id) {
            Some(Some(quiet)) => *quiet > after,
            Some(None) | None => since_leader > after,
        });
        if let Some(dead) = dead_learner {
            tracing::warn!(
                server_id = dead,
                "autopilot: removing a non-voter that stopped answering"
            );
            let name = name_of(&server, dead);
            if let Err(e) = raft.remove_member(dead).await {
                tracing::warn!(server_id = dead, error = %e, "autopilot: removing a dead non-voter failed");
            } else {
                left_in_gossip(&server, name).await;
            }
            continue;
        }
        let Some(dead) = dead_voter(
            server.node_id(),
            &voters,
            &silence,
            server.leadership().autopilot.since_leader(),
            expect.max(min_quorum),
            after,
        ) else {
            continue;
        };
        tracing::warn!(
            server_id = dead,
            voters = voters.len(),
            ?after,
            "autopilot: removing a server that stopped answering"
        );
        let name = name_of(&server, dead);
        if let Err(e) = raft.remove_member(dead).await {
            tracing::warn!(server_id = dead, error = %e,
                "autopilot: removing a dead server failed");
        } else {
            left_in_gossip(&server, name).await;
        }
    }
}

/// Raft member `id`'s serf address, if gossip knows it (unique, where names may repeat).
fn name_of(server: &Server, id: u64) -> Option<String> {
    server
        .members()
        .into_iter()
        .find(|m| m.raft_id == id && !m.serf_addr.is_empty())
        .map(|m| m.serf_addr)
}

/// A dead server autopilot removed is `left` in gossip too (Nomad's RemoveFailedNode), so
/// `server members` stops listing it failed.
async fn left_in_gossip(server: &Server, name: Option<String>) {
    if let (Some(g), Some(name)) = (server.gossip(), name) {
        if let Err(e) = g.force_leave(&name, false).await {
            tracing::debug!(%name, error = %e, "autopilot: gossip keeps the removed server");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn removes_a_silent_voter_only_above_the_floor() {
        let quiet: BTreeMap<u64, Option<Duration>> =
            [(2, Some(S / 10)), (3, Some(30 * S)), (4, Some(S))].into();
        // Four voters, three expected: 3 is dead.
        assert_eq!(
            dead_voter(1, &[1, 2, 3, 4], &quiet, 60 * S, 3, 10 * S),
            Some(3)
        );
        // Three voters, three expected: nobody is removed, whoever is silent.
        assert_eq!(dead_voter(1, &[1, 2, 3], &quiet, 60 * S, 3, 10 * S), None);
        // Nobody silent long enough.
        assert_eq!(dead_voter(1, &[1, 2, 4], &quiet, 60 * S, 1, 10 * S), None);
        // Never heard from: dead once the leader has led for longer than the threshold.
        let never: BTreeMap<u64, Option<Duration>> = [(2, None)].into();
        assert_eq!(dead_voter(1, &[1, 2], &never, 5 * S, 1, 10 * S), None);
        assert_eq!(dead_voter(1, &[1, 2], &never, 11 * S, 1, 10 * S), Some(2));
        // Never itself.
        assert_eq!(
            dead_voter(1, &[1, 2], &quiet, 60 * S, 1, Duration::ZERO),
            Some(2)
        );
    }

    #[test]
    fn min_quorum_keeps_voters_a_removal_would_cost() {
        let quiet: BTreeMap<u64, Option<Duration>> =
            [(2, Some(S)), (3, Some(30 * S)), (4, Some(S)), (5, Some(S))].into();
        let voters = [1, 2, 3, 4, 5];
        // Expected 3, MinQuorum 0: five voters, one dead, removed.
        assert_eq!(dead_voter(1, &voters, &quiet, 60 * S, 3, 10 * S), Some(3));
        // MinQuorum 5: removing would leave 4.
        assert_eq!(dead_voter(1, &voters, &quiet, 60 * S, 5, 10 * S), None);
        // MinQuorum 4: removing leaves 4, allowed.
        assert_eq!(dead_voter(1, &voters, &quiet, 60 * S, 4, 10 * S), Some(3));
    }

    fn member(id: u64, silence: Option<Duration>, matched: Option<(u64, u64)>) -> Observed {
        Observed {
            id,
            leader: false,
            silence,
            matched,
        }
    }

    #[test]
    fn health_needs_contact_the_leaders_term_and_a_short_trail() {
        let cfg = AutopilotConfiguration::agent_default(); // 200ms, 250 entries
        let hb = 250 * MS;
        let judge = |m: &Observed| judge(&cfg, 5, 1000, hb, 60 * S, m);

        let leader = Observed {
            leader: true,
            ..member(1, Some(Duration::ZERO), Some((5, 1000)))
        };
        let v = judge(&leader);
        assert!(v.alive && v.healthy);
        assert_eq!(v.last_contact, Duration::ZERO);

        // Heard 100ms ago, caught up: healthy.
        let v = judge(&member(2, Some(100 * MS), Some((5, 1000))));
        assert_eq!(
            v,
            Verdict {
                alive: true,
                healthy: true,
                last_contact: 100 * MS
            }
        );
        // Within the threshold plus one heartbeat interval: still in contact.
        assert!(judge(&member(2, Some(440 * MS), Some((5, 1000)))).healthy);
        // Silent past it: failed.
        let v = judge(&member(2, Some(460 * MS), Some((5, 1000))));
        assert!(!v.alive && !v.healthy);
        // Never heard from: failed, silent since the leader took over.
        let v = judge(&member(2, None, None));
        assert_eq!(
            v,
            Verdict {
                alive: false,
                healthy: false,
                last_contact: 60 * S
            }
        );
        // Trailing by exactly MaxTrailingLogs is fine, by more is not.
        assert!(judge(&member(2, Some(MS), Some((5, 750)))).healthy);
        let v = judge(&member(2, Some(MS), Some((5, 749))));
        assert!(v.alive && !v.healthy);
        // Its last entry is from an older term: not healthy yet.
        assert!(!judge(&member(2, Some(MS), Some((4, 1000)))).healthy);
        // A larger threshold changes the verdict.
        let relaxed = AutopilotConfiguration {
            last_contact_threshold: model::Duration::from_secs(2),
            ..cfg.clone()
        };
        assert!(
            super::judge(
                &relaxed,
                5,
                1000,
                hb,
                S,
                &member(2, Some(S), Some((5, 1000)))
            )
            .healthy
        );
    }

    #[test]
    fn stable_since_changes_only_with_health() {
        let t = HealthTracker::default();
        t.reset();
        let first = t.observe(&[(1, true), (2, false)], 1_000);
        assert_eq!(first, [(1, 1_000), (2, 1_000)].into());
        let same = t.observe(&[(1, true), (2, false)], 2_000);
        assert_eq!(same, first);
        let flipped = t.observe(&[(1, true), (2, true)], 3_000);
        assert_eq!(flipped, [(1, 1_000), (2, 3_000)].into());
        // A member that left is forgotten; one that comes back starts over.
        t.observe(&[(1, true)], 4_000);
        let back = t.observe(&[(1, true), (2, true)], 5_000);
        assert_eq!(back[&2], 5_000);
        t.reset();
        assert_eq!(t.observe(&[(1, true)], 6_000)[&1], 6_000);
    }

    #[test]
    fn stable_since_is_rounded_to_the_second() {
        assert_eq!(
            stable_since_text(1_700_000_000_400_000_000),
            "2023-11-14T22:13:20Z"
        );
        assert_eq!(
            stable_since_text(1_700_000_000_600_000_000),
            "2023-11-14T22:13:21Z"
        );
    }
}
