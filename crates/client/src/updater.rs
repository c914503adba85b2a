//! Batching allocation status updates to the servers (Nomad's `allocSync`): runners queue
//! updates; every interval the newest update of each allocation goes out in one
//! `Node.UpdateAlloc`. A failed send keeps the batch (newer updates replace older ones) and is
//! retried with backoff; runners never wait on the servers. Each time the node registers, the
//! status of every allocation is queued again: updates lost with a crash or with a server's
//! state are sent anew.

use crate::alloc_sync::Runners;
use crate::conn::ServerConn;
use crate::context::shutting_down;
use crate::identity::NodeIdentity;
use crate::limits::ALLOC_UPDATES_PER_CALL_MAX;
use crate::rng::{Backoff, Rng};
use model::wire::{AllocClientUpdate, NodeUpdateAllocRequest};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

pub(crate) struct Updater {
    pub conn: Arc<dyn ServerConn>,
    pub identity: NodeIdentity,
    pub interval: Duration,
    pub updates: mpsc::Receiver<AllocClientUpdate>,
    /// `true` while the node is registered; updates wait for it.
    pub registered: watch::Receiver<bool>,
    pub runners: Arc<Runners>,
    pub shutdown: watch::Receiver<bool>,
}

impl Updater {
    pub async fn run(mut self) {
        let mut pending: BTreeMap<String, AllocClientUpdate> = BTreeMap::new();
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut backoff = Backoff::new(Rng::from_entropy());
        let mut not_before = Instant::now();
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                up = became_registered(&mut self.registered) => match up {
                    Some(true) => {
                        for status in self.runners.statuses() {
                            pending.entry(status.id.clone()).or_insert(status);
                        }
                    }
                    Some(false) => {}
                    None => return,
                },
                update = self.updates.recv() => match update {
                    Some(u) => {
                        if crate::gc::collectable(&u) {
                            // A terminal allocation: the collector may be waiting for one.
                            self.runners.gc_trigger.notify_one();
                        }
                        pending.insert(u.id.clone(), u);
                    }
                    None => return,
                },
                _ = ticker.tick() => {
                    if pending.is_empty() || Instant::now() < not_before || !*self.registered.borrow() {
                        continue;
                    }
                    match self.send(&mut pending).await {
                        Ok(()) => backoff.reset(),
                        Err(e) => {
                            let delay = backoff.next_delay();
                            tracing::warn!(error = %e, retry_in = ?delay, "cannot send allocation updates");
                            not_before = Instant::now() + delay;
                        }
                    }
                },
                () = shutting_down(&mut shutdown) => return,
            }
        }
    }

    /// Sends up to [`ALLOC_UPDATES_PER_CALL_MAX`] updates; removes them once the servers took them.
    async fn send(
        &self,
        pending: &mut BTreeMap<String, AllocClientUpdate>,
    ) -> Result<(), rpc::RpcError> {
        let batch: Vec<AllocClientUpdate> = pending
            .values()
            .take(ALLOC_UPDATES_PER_CALL_MAX)
            .cloned()
            .collect();
        let req = NodeUpdateAllocRequest {
            node_id: self.identity.id.clone(),
            secret_id: self.identity.secret_id.clone(),
            allocs: batch,
        };
        for u in &req.allocs {
            tracing::debug!(alloc_id = %u.id, client_status = %u.client_status, "sending an allocation update");
        }
        let sent: Vec<String> = req.allocs.iter().map(|u| u.id.clone()).collect();
        self.conn.update_allocs(req).await?;
        for id in sent {
            pending.remove(&id);
        }
        Ok(())
    }
}

/// The next change of registration: `Some(true)` when the node registered, `None` when the
/// node loop is gone.
async fn became_registered(rx: &mut watch::Receiver<bool>) -> Option<bool> {
    rx.changed().await.ok()?;
    let up = *rx.borrow_and_update();
    Some(up)
}
