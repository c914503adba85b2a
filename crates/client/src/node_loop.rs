//! Keeping the node known to the servers: register (status `initializing` the first time), heartbeat
//! (`Node.UpdateStatus` with `ready`) at about half the TTL the servers hand out, register again
//! when a server does not know the node (it lost its state) or when a driver's health changed.
//!
//! Failures are retried with bounded backoff forever; this loop never touches tasks, so
//! unreachable servers never stop task supervision.

use crate::conn::ServerConn;
use crate::context::shutting_down;
use crate::context::SharedNode;
use crate::fingerprint::apply_driver_fingerprints;
use crate::identity::NodeIdentity;
use crate::limits::{
    DRIVER_FINGERPRINT_PERIOD, HEARTBEAT_INTERVAL_DEFAULT, HEARTBEAT_INTERVAL_MIN,
    HEARTBEAT_JITTER_PERCENT_MAX,
};
use crate::rng::{Backoff, Rng};
use crate::time::now_rfc3339;
use model::node::NodeStatus;
use model::wire::{NodeRegisterRequest, NodeUpdateStatusRequest};
use rpc::ErrorCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

pub(crate) struct NodeLoop {
    pub conn: Arc<dyn ServerConn>,
    pub node: SharedNode,
    pub identity: NodeIdentity,
    pub drivers: Vec<Arc<dyn drivers::Driver>>,
    /// Device plugins, fingerprinted again with the drivers.
    pub devices: Arc<crate::devices::DeviceManager>,
    /// `true` while the servers know the node; the alloc loops wait on it.
    pub registered: watch::Sender<bool>,
    /// Another loop learned that the servers do not know the node.
    pub reregister: Arc<Notify>,
    pub shutdown: watch::Receiver<bool>,
    pub rng: Rng,
    /// The allocations, to stop those whose `stop_on_client_after` passes while no server
    /// answers.
    pub runners: Arc<crate::alloc_sync::Runners>,
}

/// Why heartbeating stopped.
enum Stop {
    Reregister,
    Shutdown,
}

impl NodeLoop {
    pub async fn run(mut self) {
        let mut backoff = Backoff::new(self.rng.clone());
        loop {
            let Some(ttl) = self.register(&mut backoff).await else {
                return;
            };
            self.registered.send_replace(true);
            let stop = self.heartbeat(ttl, &mut backoff).await;
            self.registered.send_replace(false);
            if let Stop::Shutdown = stop {
                return;
            }
        }
    }

    /// Registers until it works; `None` on shutdown.
    async fn register(&mut self, backoff: &mut Backoff) -> Option<Duration> {
        let mut shutdown = self.shutdown.clone();
        loop {
            // The node's own status: `initializing` until the first heartbeat is answered, then
            // `ready` — a client that registers again (its plugins or drivers changed) stays
            // ready, as Nomad's does, instead of dropping out of scheduling and controller calls.
            let node = (*self.node.get()).clone();
            let req = NodeRegisterRequest { node };
            let result = tokio::select! {
                r = self.conn.register(req) => r,
                () = shutting_down(&mut shutdown) => return None,
            };
            let delay = match result {
                Ok(resp) => {
                    tracing::info!(node_id = %self.identity.id, "node registered");
                    backoff.reset();
                    return Some(to_std(resp.heartbeat_ttl));
                }
                Err(e) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(error = %e, retry_in = ?delay, "cannot register the node");
                    delay
                }
            };
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutting_down(&mut shutdown) => return None,
            }
        }
    }

    async fn heartbeat(&mut self, mut ttl: Duration, backoff: &mut Backoff) -> Stop {
        let mut shutdown = self.shutdown.clone();
        let reregister = Arc::clone(&self.reregister);
        let mut fingerprint = tokio::time::interval(DRIVER_FINGERPRINT_PERIOD);
        fingerprint.tick().await;
        let mut next = Instant::now();
        // Since when heartbeats have failed (the client is cut off from every server).
        let mut failing_since: Option<Instant> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = reregister.notified() => return Stop::Reregister,
                _ = fingerprint.tick() => {
                    let drivers_changed = self.refresh_drivers().await;
                    if self.refresh_devices().await || drivers_changed {
                        return Stop::Reregister;
                    }
                    continue;
                }
                () = shutting_down(&mut shutdown) => return Stop::Shutdown,
            }
            tracing::trace!("heartbeat");
            let req = NodeUpdateStatusRequest {
                node_id: self.identity.id.clone(),
                secret_id: self.identity.secret_id.clone(),
                status: Some(NodeStatus::Ready),
            };
            let result = tokio::select! {
                r = self.conn.update_status(req) => r,
                () = shutting_down(&mut shutdown) => return Stop::Shutdown,
            };
            match result {
                Ok(resp) => {
                    backoff.reset();
                    if failing_since.take().is_some() {
                        self.runners.reconnected();
                    }
                    if self.node.get().status != NodeStatus::Ready {
                        self.node.update(|n| n.status = NodeStatus::Ready);
                    }
                    ttl = to_std(resp.heartbeat_ttl);
                    next = Instant::now() + self.interval(ttl);
                    tracing::trace!(?ttl, "heartbeat answered");
                }
                Err(e) if e.code == ErrorCode::NotFound => {
                    tracing::info!("the servers do not know this node; registering again");
                    return Stop::Reregister;
                }
                Err(e) => {
                    let delay = backoff.next_delay().min(self.interval(ttl));
                    tracing::warn!(error = %e, retry_in = ?delay, "heartbeat failed");
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    self.runners.stop_disconnected(since.elapsed());
                    next = Instant::now() + delay;
                }
            }
        }
    }

    /// About half the TTL, moved earlier by up to [`HEARTBEAT_JITTER_PERCENT_MAX`] percent.
    fn interval(&mut self, ttl: Duration) -> Duration {
        heartbeat_interval(ttl, &mut self.rng)
    }

    /// Fingerprints the device plugins again; returns whether the node's devices changed (an
    /// instance's health, a group appearing or going).
    async fn refresh_devices(&self) -> bool {
        if self.devices.is_empty() {
            return false;
        }
        let devices = Arc::clone(&self.devices);
        let Ok(groups) = tokio::task::spawn_blocking(move || devices.fingerprint()).await else {
            return false;
        };
        let current = self.node.get();
        let now = current
            .node_resources
            .as_ref()
            .map(|r| r.devices.as_slice())
            .unwrap_or_default();
        if now == groups.as_slice() {
            return false;
        }
        tracing::info!("device fingerprints changed; updating the node");
        self.node
            .update(|n| crate::devices::apply_to_node(n, groups));
        true
    }

    /// Fingerprints the drivers again; returns whether the node changed.
    async fn refresh_drivers(&self) -> bool {
        let fps = fingerprint_drivers(&self.drivers).await;
        let current = self.node.get();
        let changed = fps
            .iter()
            .any(|(name, fp)| match current.drivers.get(name) {
                None => fp.detected,
                Some(info) => {
                    info.healthy != fp.healthy
                        || info.detected != fp.detected
                        || info.health_description != fp.health_description
                        || info.attributes != fp.attributes
                }
            });
        if changed {
            tracing::info!("driver fingerprints changed; updating the node");
            self.node
                .update(|n| apply_driver_fingerprints(n, &fps, &now_rfc3339()));
        }
        changed
    }
}

/// Every driver's fingerprint, taken off the async threads: probes are blocking (a socket
/// request to a daemon, `java -version`, `qemu --version`).
pub(crate) async fn fingerprint_drivers(
    drivers: &[Arc<dyn drivers::Driver>],
) -> Vec<(String, drivers::Fingerprint)> {
    let drivers = drivers.to_vec();
    let names: Vec<String> = drivers.iter().map(|d| d.name().to_string()).collect();
    tokio::task::spawn_blocking(move || {
        drivers
            .iter()
            .map(|d| (d.name().to_string(), d.fingerprint()))
            .collect()
    })
    .await
    .unwrap_or_else(|_| {
        // A probe panicked: report every driver as unable to run tasks, never crash the client.
        names
            .into_iter()
            .map(|n| {
                (
                    n,
                    drivers::Fingerprint::unhealthy("the driver's fingerprint panicked"),
                )
            })
            .collect()
    })
}

pub(crate) fn heartbeat_interval(ttl: Duration, rng: &mut Rng) -> Duration {
    if ttl.is_zero() {
        return HEARTBEAT_INTERVAL_DEFAULT;
    }
    let half = ttl / 2;
    let jitter = rng.below(half * u32::try_from(HEARTBEAT_JITTER_PERCENT_MAX).unwrap_or(0) / 100);
    (half - jitter).max(HEARTBEAT_INTERVAL_MIN)
}

pub(crate) fn to_std(d: model::Duration) -> Duration {
    Duration::from_nanos(u64::try_from(d.as_nanos()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_come_at_about_half_the_ttl() {
        let mut rng = Rng::new(3);
        for _ in 0..100 {
            let d = heartbeat_interval(Duration::from_secs(10), &mut rng);
            assert!(
                d <= Duration::from_secs(5) && d >= Duration::from_secs(4),
                "{d:?}"
            );
        }
        assert_eq!(
            heartbeat_interval(Duration::from_millis(10), &mut rng),
            HEARTBEAT_INTERVAL_MIN
        );
        assert_eq!(
            heartbeat_interval(Duration::ZERO, &mut rng),
            HEARTBEAT_INTERVAL_DEFAULT
        );
    }
}
