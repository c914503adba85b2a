//! The volume watcher (Nomad's `nomad/volumewatcher`), a leader loop: it releases the claims of
//! allocations that stopped, were lost with their node, or were garbage-collected, and finishes
//! releases an earlier leader left half done (the claim's checkpoint says where it stopped).
//!
//! Releases run concurrently, one at a time per claim; a failed one is retried with exponential
//! backoff. Everything it needs is in state, so a new leader simply starts over from the claims.

use crate::server::Server;
use model::csi::{CSIVolumeClaim, CSIVolumeClaimState};
use state::{StateSnapshot, Table};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The longest the loop sleeps without a state change.
const IDLE_WAIT: Duration = Duration::from_secs(5);
/// Retry delays of a failed release: first, and the cap.
pub(crate) const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

type Key = (String, String, String);

/// One claim to release: namespace, volume, and the claim (with the state to start from).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Release {
    pub namespace: String,
    pub volume_id: String,
    pub claim: CSIVolumeClaim,
}

impl Release {
    fn key(&self) -> Key {
        (
            self.namespace.clone(),
            self.volume_id.clone(),
            self.claim.allocation_id.clone(),
        )
    }
}

/// How long a stopped allocation's own client has to release its claims (it unpublishes on the
/// node first, then tells the servers) before the watcher releases them itself.
pub(crate) const CLIENT_RELEASE_GRACE_NS: i64 = 60 * 1_000_000_000;

/// The claims that should be released now (`now`: Unix nanoseconds): live claims whose allocation
/// is gone, or client-terminal on a node that is gone or down, or client-terminal for longer than
/// [`CLIENT_RELEASE_GRACE_NS`] (its client should have released it: the volume may still be
/// mounted there until then, so the controller must not detach it yet); and every past claim.
pub(crate) fn due(snap: &StateSnapshot, now: i64) -> Vec<Release> {
    let mut out = Vec::new();
    for v in snap.csi_volumes(None, "") {
        for c in v.read_claims.values().chain(v.write_claims.values()) {
            let done = match snap.alloc(&c.allocation_id) {
                None => true,
                Some(a) if !a.client_terminal() => false,
                Some(a) => {
                    crate::csi::node_is_gone(snap, &c.node_id)
                        || now.saturating_sub(a.modify_time) > CLIENT_RELEASE_GRACE_NS
                }
            };
            if done {
                let mut claim = c.clone();
                claim.state = CSIVolumeClaimState::UNPUBLISHING;
                out.push(Release {
                    namespace: v.namespace.clone(),
                    volume_id: v.id.clone(),
                    claim,
                });
            }
        }
        for c in v.past_claims.values() {
            out.push(Release {
                namespace: v.namespace.clone(),
                volume_id: v.id.clone(),
                claim: c.clone(),
            });
        }
    }
    out
}

/// The watcher's engine: which releases to start now, and when to look again. It takes the
/// state, the time and each release's outcome, and does no I/O (the loop below carries its
/// decisions out), so its rules are unit-tested without processes: one release per claim at a
/// time, a failed one retried after a delay doubling from [`RETRY_FIRST`] to [`RETRY_MAX`], a
/// successful one forgetting its delay.
#[derive(Default)]
pub(crate) struct WatcherEngine {
    running: HashSet<Key>,
    retry_at: HashMap<Key, (Instant, Duration)>,
}

impl WatcherEngine {
    /// The releases to start now (marked running), and the latest time to look again even if
    /// nothing changes (the grace of a stopped allocation, a retry coming due).
    pub(crate) fn tick(
        &mut self,
        snap: &StateSnapshot,
        now_ns: i64,
        now: Instant,
    ) -> (Vec<Release>, Instant) {
        let mut wake = now + IDLE_WAIT;
        let mut start = Vec::new();
        for release in due(snap, now_ns) {
            let key = release.key();
            if let Some((at, _)) = self.retry_at.get(&key) {
                if *at > now {
                    wake = wake.min(*at);
                    continue;
                }
            }
            if self.running.insert(key) {
                start.push(release);
            }
        }
        (start, wake)
    }

    /// A release ended; a failure is tried again after the next delay.
    pub(crate) fn finished(
        &mut self,
        release: &Release,
        ok: bool,
        now: Instant,
    ) -> Option<Duration> {
        let key = release.key();
        self.running.remove(&key);
        if ok {
            self.retry_at.remove(&key);
            return None;
        }
        let delay = self
            .retry_at
            .get(&key)
            .map_or(RETRY_FIRST, |(_, d)| (*d * 2).min(RETRY_MAX));
        self.retry_at.insert(key, (now + delay, delay));
        Some(delay)
    }
}

pub(crate) async fn run(server: Server, mut stop: watch::Receiver<bool>) {
    let store = server.state().clone();
    let tables = [
        Table::CsiVolumes,
        Table::Allocs,
        Table::Nodes,
        Table::CsiPlugins,
    ];
    let mut engine = WatcherEngine::default();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<(Release, bool)>();
    let mut tasks = tokio::task::JoinSet::new();
    let mut snap = store.snapshot();
    // Calls an earlier leader left recorded are settled first, whether or not anything else
    // comes for their plugins.
    for op in snap.csi_controller_ops() {
        let server = server.clone();
        tasks.spawn(async move {
            if let Err(e) = server.csi_resolve_plugin(&op.plugin_id).await {
                tracing::warn!(plugin_id = %op.plugin_id, error = %e,
                    "volume watcher: a recorded controller call is not resolved yet; the next call for the plugin tries again");
            }
        });
    }
    loop {
        let (start, wake) = engine.tick(&snap, crate::endpoints::now_nanos(), Instant::now());
        for release in start {
            let server = server.clone();
            let done = done_tx.clone();
            tasks.spawn(async move {
                let result = server
                    .release_claim(
                        &release.namespace,
                        &release.volume_id,
                        release.claim.clone(),
                        crate::csi::ReleaseBy::Server,
                    )
                    .await;
                if let Err(e) = &result {
                    tracing::warn!(volume = %release.volume_id, alloc = %release.claim.allocation_id,
                        error = %e, "volume watcher: releasing a claim failed");
                }
                let _ = done.send((release, result.is_ok()));
            });
        }
        while tasks.try_join_next().is_some() {}
        let last = snap.index().max(1);
        snap = tokio::select! {
            () = super::tasks::stopped(&mut stop) => {
                tasks.abort_all();
                return;
            }
            s = store.wait_for(&tables, last, wake) => s,
            Some((release, ok)) = done_rx.recv() => {
                if let Some(delay) = engine.finished(&release, ok, Instant::now()) {
                    tracing::debug!(volume = %release.volume_id, retry_in = ?delay, "volume watcher: retrying later");
                }
                store.snapshot()
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leader::testkit::{alloc, job, node, Cluster};
    use model::csi::{CSIInfo, CSINodeInfo, CSIVolume, CSIVolumeClaimMode};
    use state::Command;

    const NOW: i64 = 1_000 * 1_000_000_000;

    /// Node n1 with a node plugin, volume v claimed (write) by allocation a1.
    fn setup() -> (Cluster, model::Job) {
        let mut c = Cluster::new();
        let mut n = node("n1", 1000, 1000);
        n.csi_node_plugins.insert(
            "p".into(),
            CSIInfo {
                healthy: true,
                node_info: Some(CSINodeInfo {
                    id: "ext".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
        );
        c.add_node(n);
        let j = job("web", 1, 100, 100);
        c.register(&j, "e1");
        let mut a = alloc("a1", &j, "n1", 100, 100);
        a.client_status = "running".into();
        c.apply(Command::AllocUpsert { allocs: vec![a] });
        c.apply(Command::CsiVolumeRegister {
            volumes: vec![CSIVolume {
                id: "v".into(),
                namespace: "default".into(),
                plugin_id: "p".into(),
                ..Default::default()
            }],
        });
        c.apply(Command::CsiVolumeClaim {
            namespace: "default".into(),
            volume_id: "v".into(),
            claim: CSIVolumeClaim {
                allocation_id: "a1".into(),
                node_id: "n1".into(),
                mode: CSIVolumeClaimMode::WRITE,
                access_mode: "single-node-writer".into(),
                attachment_mode: "file-system".into(),
                ..Default::default()
            },
        });
        (c, j)
    }

    fn stop(c: &mut Cluster, j: &model::Job, modify_time: i64) {
        let mut a = alloc("a1", j, "n1", 100, 100);
        a.client_status = "complete".into();
        a.desired_status = "stop".into();
        a.modify_time = modify_time;
        c.apply(Command::AllocUpsert { allocs: vec![a] });
    }

    #[test]
    fn a_running_allocation_keeps_its_claim() {
        let (c, _) = setup();
        assert!(due(&c.snap(), NOW).is_empty());
    }

    #[test]
    fn a_stopped_allocation_on_a_live_node_is_left_to_its_client_for_a_while() {
        let (mut c, j) = setup();
        stop(&mut c, &j, NOW - 1_000_000_000);
        assert!(due(&c.snap(), NOW).is_empty(), "its client unmounts first");
        let late = due(&c.snap(), NOW + CLIENT_RELEASE_GRACE_NS);
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].claim.state, CSIVolumeClaimState::UNPUBLISHING);
        assert_eq!(late[0].claim.access_mode, "single-node-writer");
    }

    #[test]
    fn a_stopped_allocation_on_a_down_node_is_released_at_once() {
        let (mut c, j) = setup();
        stop(&mut c, &j, NOW);
        c.apply(Command::NodeUpdateStatus {
            node_id: "n1".into(),
            status: "down".into(),
            updated_at: 1,
        });
        assert_eq!(due(&c.snap(), NOW).len(), 1);
    }

    #[test]
    fn the_engine_runs_one_release_per_claim_and_backs_off_a_failed_one() {
        let (mut c, j) = setup();
        stop(&mut c, &j, NOW);
        c.apply(Command::NodeUpdateStatus {
            node_id: "n1".into(),
            status: "down".into(),
            updated_at: 1,
        });
        let mut e = WatcherEngine::default();
        let t0 = Instant::now();
        let (start, _) = e.tick(&c.snap(), NOW, t0);
        assert_eq!(start.len(), 1);
        // Still running: not started twice.
        assert!(e.tick(&c.snap(), NOW, t0).0.is_empty());
        // It failed: not again before the delay, and the loop wakes for it.
        assert_eq!(e.finished(&start[0], false, t0), Some(RETRY_FIRST));
        let (again, wake) = e.tick(&c.snap(), NOW, t0);
        assert!(again.is_empty());
        assert_eq!(wake, t0 + RETRY_FIRST);
        let (again, _) = e.tick(&c.snap(), NOW, t0 + RETRY_FIRST);
        assert_eq!(again.len(), 1);
        // The delay doubles, up to its cap.
        let mut last = RETRY_FIRST;
        for _ in 0..10 {
            let d = e.finished(&again[0], false, t0).unwrap();
            assert!(d == (last * 2).min(RETRY_MAX), "{d:?} after {last:?}");
            last = d;
            e.running.insert(again[0].key());
        }
        assert_eq!(last, RETRY_MAX);
        // A success forgets the delay.
        assert_eq!(e.finished(&again[0], true, t0), None);
        assert_eq!(e.tick(&c.snap(), NOW, t0).0.len(), 1);
    }

    #[test]
    fn past_claims_are_always_due() {
        let (mut c, _) = setup();
        c.apply(Command::CsiVolumeClaim {
            namespace: "default".into(),
            volume_id: "v".into(),
            claim: CSIVolumeClaim {
                allocation_id: "a1".into(),
                node_id: "n1".into(),
                state: CSIVolumeClaimState::UNPUBLISHING,
                ..Default::default()
            },
        });
        let d = due(&c.snap(), NOW);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].claim.state, CSIVolumeClaimState::UNPUBLISHING);
    }
}
