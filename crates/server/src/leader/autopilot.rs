//! Dead-server cleanup (Nomad's autopilot `cleanup_dead_servers`), a leader loop: a voter that
//! has not acknowledged the leader for `dead_server_after` is removed from the raft
//! configuration — one at a time, and only while more voters than `bootstrap_expect` remain, so
//! a cluster never shrinks below the size it was built for (a replacement server must have joined
//! first). Everything it needs comes from the leader's view of its peers, so a new leader simply
//! looks again.

use crate::server::Server;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;

/// How often the leader looks at its peers.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The voter to remove now, if any: silent for longer than `after` (never-acknowledged peers
/// count as silent since the leader took over, which `since_leader` says), the lowest ID first,
/// only while `voters` exceeds `expect`.
pub(crate) fn dead_voter(
    me: u64,
    voters: &[u64],
    silence: &BTreeMap<u64, Option<Duration>>,
    since_leader: Duration,
    expect: usize,
    after: Duration,
) -> Option<u64> {
    if voters.len() <= expect.max(1) {
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

pub(crate) async fn run(server: Server, mut stop: watch::Receiver<bool>) {
    let cfg = server.config().clone();
    if !cfg.cleanup_dead_servers {
        return;
    }
    let started = tokio::time::Instant::now();
    loop {
        tokio::select! {
            () = super::tasks::stopped(&mut stop) => return,
            () = tokio::time::sleep(CHECK_EVERY) => {}
        }
        let raft = server.raft();
        let voters = raft.voters();
        let silence = raft.peer_silence();
        let expect = usize::try_from(cfg.bootstrap_expect).unwrap_or(usize::MAX);
        let Some(dead) = dead_voter(
            server.node_id(),
            &voters,
            &silence,
            started.elapsed(),
            expect,
            cfg.dead_server_after,
        ) else {
            continue;
        };
        tracing::warn!(server_id = dead, voters = voters.len(), after = ?cfg.dead_server_after,
            "autopilot: removing a server that stopped answering");
        if let Err(e) = raft.remove_member(dead).await {
            tracing::warn!(server_id = dead, error = %e, "autopilot: removing a dead server failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn removes_a_silent_voter_only_above_the_expected_size() {
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
}
