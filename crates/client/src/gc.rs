//! Garbage collection of terminal allocations (Nomad's client `AllocGarbageCollector`,
//! `client/gc.go`).
//!
//! An allocation is collectable once its client status is terminal (`complete`, `failed`,
//! `lost`) and every one of its tasks is dead: it never runs again. Collecting it destroys its
//! runner the way the servers' removal does (`AllocCommand::GarbageCollect`: CSI volumes
//! released first, the alloc directory removed, its record deleted from the durable state), and
//! the client stops tracking it at once. While the servers still list it (until their own GC),
//! its ID stays in `Runners::collected`, so the allocation sync never starts it again.
//!
//! Three ways in: [`Client::gc_alloc`] (one allocation; Nomad's `CollectAllocation`),
//! [`Client::gc_all`] (every terminal one; `CollectAllAllocs`), and [`Collector`], the periodic
//! collector: every `gc_interval`, and whenever an allocation turns terminal or new ones arrive,
//! it collects terminal allocations, oldest first, while the alloc dir's file system is fuller
//! than `gc_disk_usage_threshold` or `gc_inode_usage_threshold`, or more than `gc_max_allocs`
//! allocations are kept. The allocation sync makes room the same way before it places new
//! allocations past `gc_max_allocs`. At most `gc_parallel_destroys` destroys run at once.
//!
//! **Invariants:** a non-terminal allocation is never collected; the collector never waits on
//! the servers (it reads the runners and `statvfs` only, and waits for a wave of destroys at
//! most [`GC_WAVE_WAIT`]).

use crate::alloc_runner::{AllocCommand, AllocRunnerHandle};
use crate::alloc_sync::Runners;
use crate::client::Client;
use crate::config::GcConfig;
use crate::context::shutting_down;
use crate::limits::GC_WAVE_WAIT;
use model::alloc::TaskStatus;
use model::wire::AllocClientUpdate;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

/// Why an allocation cannot be garbage collected, in Nomad's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GcError {
    /// This client has no allocation with that ID.
    #[error("Unknown allocation {0:?}")]
    UnknownAlloc(String),
    /// The allocation is not terminal (a task runs or may run again), or is already collected.
    #[error("No such allocation on client, or allocation not eligible for GC")]
    NotEligible(String),
}

/// Whether an allocation with this status may be collected: terminal, every task dead.
pub(crate) fn collectable(status: &AllocClientUpdate) -> bool {
    status.client_status.is_terminal()
        && status
            .task_states
            .values()
            .all(|t| t.state == TaskStatus::Dead)
}

/// When the allocation ended (Unix ns): its last task's finish, else its last status change.
/// The collector takes the smallest first.
pub(crate) fn ended_at(status: &AllocClientUpdate) -> i64 {
    status
        .task_states
        .values()
        .filter_map(|t| t.finished_at.as_deref())
        .filter_map(model::time::parse_unix_nanos)
        .max()
        .unwrap_or(status.modify_time)
}

/// Removes up to `n` collectable allocations from `map`, oldest first.
pub(crate) fn take_oldest_terminal(
    map: &mut BTreeMap<String, AllocRunnerHandle>,
    n: usize,
) -> Vec<(String, AllocRunnerHandle)> {
    let mut terminal: Vec<(i64, String)> = map
        .iter()
        .filter_map(|(id, h)| {
            let status = h.status.lock().expect("status lock");
            collectable(&status).then(|| (ended_at(&status), id.clone()))
        })
        .collect();
    terminal.sort();
    terminal
        .into_iter()
        .take(n)
        .filter_map(|(_, id)| map.remove(&id).map(|h| (id, h)))
        .collect()
}

/// What pushes the collector, checked in Nomad's order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Pressure {
    /// Percent of the alloc dir's file system in use.
    Disk(f64),
    /// Percent of its inodes in use.
    Inodes(f64),
    /// Allocations kept.
    Allocs(usize),
}

impl Pressure {
    /// Nomad's reason text.
    fn reason(&self, cfg: &GcConfig) -> String {
        match self {
            Pressure::Disk(p) => format!(
                "disk usage of {p:.0} is over gc threshold of {:.0}",
                cfg.disk_usage_threshold
            ),
            Pressure::Inodes(p) => format!(
                "inode usage of {p:.0} is over gc threshold of {:.0}",
                cfg.inode_usage_threshold
            ),
            Pressure::Allocs(n) => format!(
                "number of allocations ({n}) is over the limit ({})",
                cfg.max_allocs
            ),
        }
    }
}

/// Whether the collector must collect now: `usage` is the alloc dir's (disk, inode) use in
/// percent (`None`: unknown, only the count is checked), `live` the allocations kept.
pub(crate) fn pressure(cfg: &GcConfig, usage: Option<(f64, f64)>, live: usize) -> Option<Pressure> {
    if let Some((disk, inodes)) = usage {
        if disk > cfg.disk_usage_threshold {
            return Some(Pressure::Disk(disk));
        }
        if inodes > cfg.inode_usage_threshold {
            return Some(Pressure::Inodes(inodes));
        }
    }
    (live > cfg.max_allocs).then_some(Pressure::Allocs(live))
}

impl Runners {
    /// How many allocations the client keeps, running and terminal (Nomad's `NumAllocs`).
    pub fn count(&self) -> usize {
        self.map.lock().expect("runners lock").len()
    }

    /// Stops tracking a collectable allocation and destroys it; the receiver resolves once it
    /// is destroyed.
    pub fn collect(&self, id: &str, reason: &str) -> Result<oneshot::Receiver<()>, GcError> {
        let handle = {
            let mut map = self.map.lock().expect("runners lock");
            let mut collected = self.collected.lock().expect("collected lock");
            match map.get(id) {
                None if collected.contains(id) => return Err(GcError::NotEligible(id.into())),
                None => return Err(GcError::UnknownAlloc(id.into())),
                Some(h) if !collectable(&h.status.lock().expect("status lock")) => {
                    return Err(GcError::NotEligible(id.into()))
                }
                Some(_) => {}
            }
            collected.insert(id.to_string());
            map.remove(id).expect("checked above")
        };
        Ok(self.destroy_collected(id.to_string(), handle, reason))
    }

    /// Stops tracking up to `n` collectable allocations, oldest first, and destroys them; each
    /// receiver resolves once its allocation is destroyed.
    pub fn collect_oldest(&self, n: usize, reason: &str) -> Vec<oneshot::Receiver<()>> {
        let taken = {
            let mut map = self.map.lock().expect("runners lock");
            let taken = take_oldest_terminal(&mut map, n);
            let mut collected = self.collected.lock().expect("collected lock");
            collected.extend(taken.iter().map(|(id, _)| id.clone()));
            taken
        };
        taken
            .into_iter()
            .map(|(id, h)| self.destroy_collected(id, h, reason))
            .collect()
    }

    /// Destroys a runner already taken out of the map (its ID in `collected`), once one of the
    /// `gc_parallel_destroys` permits is free. Call with no lock of `self` held.
    pub(crate) fn destroy_collected(
        &self,
        id: String,
        handle: AllocRunnerHandle,
        reason: &str,
    ) -> oneshot::Receiver<()> {
        tracing::info!(alloc_id = %id, reason, "garbage collecting allocation");
        let (done_tx, done) = oneshot::channel();
        let permits = Arc::clone(&self.destroys);
        let mut shutdown = self.ctx.shutdown.clone();
        let join = tokio::spawn(async move {
            let _permit = tokio::select! {
                p = permits.acquire_owned() => p,
                // The handle is dropped: the runner detaches, as every runner does on shutdown,
                // and a later client collects the allocation.
                () = shutting_down(&mut shutdown) => return,
            };
            // A closed channel: the runner already ended (client shutdown).
            let _ = handle.cmds.send(AllocCommand::GarbageCollect).await;
            let _ = handle.join.await;
            tracing::debug!(alloc_id = %id, "allocation garbage collected");
            let _ = done_tx.send(());
        });
        let mut retired = self.retired.lock().expect("retired lock");
        retired.retain(|j| !j.is_finished());
        retired.push(join);
        done
    }
}

impl Client {
    /// Garbage collects one terminal allocation (Nomad's `CollectAllocation`): its CSI volumes
    /// released, its directory and durable state removed, the client no longer tracking it.
    /// Returns once it is destroyed. Refused for an allocation this client does not know, and
    /// for one not terminal (or already collected).
    pub async fn gc_alloc(&self, alloc_id: &str) -> Result<(), GcError> {
        let done = self.runners.collect(alloc_id, "forced collection")?;
        let _ = done.await;
        Ok(())
    }

    /// Garbage collects every terminal allocation (Nomad's `CollectAllAllocs`); running ones
    /// stay. Returns once they are destroyed, with how many there were.
    pub async fn gc_all(&self) -> usize {
        let done = self
            .runners
            .collect_oldest(usize::MAX, "forced full node collection");
        let count = done.len();
        for d in done {
            let _ = d.await;
        }
        count
    }
}

/// The periodic collector (Nomad's `AllocGarbageCollector.Run`).
pub(crate) struct Collector {
    pub runners: Arc<Runners>,
    pub cfg: GcConfig,
    /// `<data_dir>/alloc`: whose file system is measured.
    pub alloc_root: PathBuf,
    pub shutdown: watch::Receiver<bool>,
}

impl Collector {
    pub async fn run(self) {
        let mut shutdown = self.shutdown.clone();
        let first = tokio::time::Instant::now() + self.cfg.interval;
        let mut ticker = tokio::time::interval_at(first, self.cfg.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = self.runners.gc_trigger.notified() => {}
                () = shutting_down(&mut shutdown) => return,
            }
            self.keep_usage_below_threshold(&mut shutdown).await;
        }
    }

    /// Collects, oldest first, until nothing presses or nothing terminal is left.
    async fn keep_usage_below_threshold(&self, shutdown: &mut watch::Receiver<bool>) {
        loop {
            if *shutdown.borrow() {
                return;
            }
            let live = self.runners.count();
            let Some(pressure) = pressure(&self.cfg, self.usage().await, live) else {
                return;
            };
            let reason = pressure.reason(&self.cfg);
            // Past the count only as many as are too many; for disk or inodes one wave, then
            // the file system is measured again.
            let wave = match pressure {
                Pressure::Allocs(n) => n - self.cfg.max_allocs,
                Pressure::Disk(_) | Pressure::Inodes(_) => self.cfg.parallel_destroys,
            };
            let done = self.runners.collect_oldest(wave, &reason);
            if done.is_empty() {
                // Nomad warns about the count only at twice the limit.
                if matches!(pressure, Pressure::Allocs(n) if n < self.cfg.max_allocs.saturating_mul(2))
                {
                    tracing::info!(%reason, "garbage collection skipped because no terminal allocations");
                } else {
                    tracing::warn!(%reason, "garbage collection skipped because no terminal allocations");
                }
                return;
            }
            let all = async {
                for d in done {
                    let _ = d.await;
                }
            };
            tokio::select! {
                _ = tokio::time::timeout(GC_WAVE_WAIT, all) => {}
                () = shutting_down(shutdown) => return,
            }
        }
    }

    /// The alloc dir's file system: (disk, inode) use in percent; `None` when it cannot be read.
    async fn usage(&self) -> Option<(f64, f64)> {
        let root = self.alloc_root.clone();
        let stats = tokio::task::spawn_blocking(move || crate::host_stats::disk_stats("", &root))
            .await
            .ok()
            .flatten();
        match stats {
            Some(s) => Some((s.used_percent, s.inodes_used_percent)),
            None => {
                tracing::warn!(alloc_root = %self.alloc_root.display(),
                    "cannot read the alloc dir's disk usage; collecting by count only");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::alloc::{ClientStatus, TaskState};

    fn status(client: &str, tasks: &[(&str, Option<&str>)]) -> AllocClientUpdate {
        AllocClientUpdate {
            id: "a".into(),
            client_status: ClientStatus::from_text(client),
            task_states: tasks
                .iter()
                .enumerate()
                .map(|(i, (state, finished))| {
                    let t = TaskState {
                        state: TaskStatus::from_text(state),
                        finished_at: finished.map(str::to_string),
                        ..TaskState::default()
                    };
                    (format!("t{i}"), t)
                })
                .collect(),
            modify_time: 7,
            ..AllocClientUpdate::default()
        }
    }

    #[test]
    fn only_terminal_allocations_with_every_task_dead_are_collectable() {
        let rows = [
            ("complete", vec![("dead", None), ("dead", None)], true),
            ("failed", vec![("dead", None)], true),
            ("lost", vec![("dead", None)], true),
            // A failed task while a sibling is still being killed: not yet.
            ("failed", vec![("dead", None), ("running", None)], false),
            ("running", vec![("running", None)], false),
            ("pending", vec![("pending", None)], false),
            ("running", vec![("dead", None), ("pending", None)], false),
            ("unknown", vec![("dead", None)], false),
            // No group to run: the runner fails it with no task.
            ("failed", vec![], true),
        ];
        for (client, tasks, want) in rows {
            assert_eq!(
                collectable(&status(client, &tasks)),
                want,
                "{client} {tasks:?}"
            );
        }
    }

    #[test]
    fn an_allocation_ended_when_its_last_task_finished() {
        let s = status(
            "complete",
            &[
                ("dead", Some("2024-05-01T12:00:00Z")),
                ("dead", Some("2024-05-01T12:00:01.5Z")),
            ],
        );
        assert_eq!(ended_at(&s), 1_714_564_801_500_000_000);
        assert_eq!(ended_at(&status("failed", &[])), 7, "else the last change");
    }

    #[test]
    fn pressure_follows_nomads_order_and_thresholds() {
        let cfg = GcConfig::default();
        assert_eq!(pressure(&cfg, Some((50.0, 10.0)), 50), None);
        assert_eq!(
            pressure(&cfg, Some((80.5, 90.0)), 60),
            Some(Pressure::Disk(80.5))
        );
        assert_eq!(
            pressure(&cfg, Some((80.0, 70.5)), 60),
            Some(Pressure::Inodes(70.5))
        );
        assert_eq!(
            pressure(&cfg, Some((10.0, 10.0)), 51),
            Some(Pressure::Allocs(51))
        );
        assert_eq!(pressure(&cfg, None, 51), Some(Pressure::Allocs(51)));
        assert_eq!(pressure(&cfg, None, 3), None);
        assert_eq!(
            Pressure::Disk(85.2).reason(&cfg),
            "disk usage of 85 is over gc threshold of 80"
        );
        assert_eq!(
            Pressure::Allocs(51).reason(&cfg),
            "number of allocations (51) is over the limit (50)"
        );
    }
}
