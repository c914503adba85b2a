//! The volume watcher (Nomad's `nomad/volumewatcher`), a leader loop: it releases the claims of
//! allocations that stopped, were lost with their node, or were garbage-collected, and finishes
//! releases an earlier leader left half done (the claim's checkpoint says where it stopped).
//!
//! Releases run concurrently, one at a time per claim; a failed one is retried with exponential
//! backoff. Everything it needs is in state, so a new leader simply starts over from the claims.

use crate::server::Server;
use model::csi::{CSIVolumeClaim, CSIVolumeClaimState};
use model::node::NodeStatus;
use state::{StateSnapshot, Table};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
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

/// The claims that should be released now: live claims whose allocation is gone, or is
/// client-terminal on a node that is gone (down, disconnected, collected: lost allocations
/// included), and every past claim (a release under way, resumed from its checkpoint).
///
/// A client-terminal allocation on a live node is left to its client, which unpublishes and
/// unstages the volume and only then releases the claim: releasing it here would detach the
/// volume at the controller while the node may still have it mounted (the spec wants
/// ControllerUnpublishVolume after NodeUnstageVolume), and servers do not drive node calls.
pub(crate) fn due(snap: &StateSnapshot) -> Vec<Release> {
    let node_gone = |node_id: &str| {
        snap.node(node_id).is_none_or(|n| {
            n.status == NodeStatus::Down.as_str() || n.status == NodeStatus::Disconnected.as_str()
        })
    };
    let mut out = Vec::new();
    for v in snap.csi_volumes(None, "") {
        for c in v.read_claims.values().chain(v.write_claims.values()) {
            let done = snap
                .alloc(&c.allocation_id)
                .is_none_or(|a| a.client_terminal() && node_gone(&c.node_id));
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

#[derive(Default)]
struct Backoff {
    next: HashMap<Key, (Instant, Duration)>,
}

pub(crate) async fn run(server: Server, mut stop: watch::Receiver<bool>) {
    let store = server.state().clone();
    let tables = [
        Table::CsiVolumes,
        Table::Allocs,
        Table::Nodes,
        Table::CsiPlugins,
    ];
    let running: Arc<Mutex<HashSet<Key>>> = Arc::default();
    let backoff: Arc<Mutex<Backoff>> = Arc::default();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut tasks = tokio::task::JoinSet::new();
    let mut snap = store.snapshot();
    loop {
        let now = Instant::now();
        let mut wake = now + IDLE_WAIT;
        for release in due(&snap) {
            let key = release.key();
            {
                let b = backoff.lock().unwrap_or_else(|p| p.into_inner());
                if let Some((at, _)) = b.next.get(&key) {
                    if *at > now {
                        wake = wake.min(*at);
                        continue;
                    }
                }
            }
            if !running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.clone())
            {
                continue;
            }
            let server = server.clone();
            let running = Arc::clone(&running);
            let backoff = Arc::clone(&backoff);
            let done = done_tx.clone();
            tasks.spawn(async move {
                let result = server
                    .release_claim(&release.namespace, &release.volume_id, release.claim.clone())
                    .await;
                {
                    let mut b = backoff.lock().unwrap_or_else(|p| p.into_inner());
                    match result {
                        Ok(_) => {
                            b.next.remove(&key);
                        }
                        Err(e) => {
                            let delay = b
                                .next
                                .get(&key)
                                .map_or(RETRY_FIRST, |(_, d)| (*d * 2).min(RETRY_MAX));
                            tracing::warn!(volume = %release.volume_id, alloc = %release.claim.allocation_id,
                                error = %e, retry_in = ?delay, "volume watcher: releasing a claim failed");
                            b.next.insert(key.clone(), (Instant::now() + delay, delay));
                        }
                    }
                }
                running
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
                let _ = done.send(());
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
            _ = done_rx.recv() => store.snapshot(),
        };
    }
}
