//! The scheduling workers' pool (Nomad's `SchedulerWorkerPoolArgs`, `/v1/agent/schedulers` and
//! `/v1/agent/schedulers/config`): how many workers this server runs when it leads and which
//! scheduler types they take, changeable while it runs, and what each worker is doing.
//!
//! Invariant: the worker in slot `i` runs only while `i < num`; a smaller `num` stops the extra
//! workers at their next dequeue (a worker in the middle of an evaluation finishes it first), a
//! larger one starts the missing ones, both without a leadership change.

use std::sync::Mutex;
use tokio::sync::watch;

/// Nomad's `_core` scheduler: required in every enabled list (Caravan's core work — garbage
/// collection — runs in its own leader loop, not through workers).
pub const CORE_SCHEDULER: &str = "_core";

/// The pool's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    pub num_schedulers: usize,
    pub enabled_schedulers: Vec<String>,
}

impl PoolConfig {
    /// Nomad's `IsValid`: a count from 0 to the cores, `_core` and only known types enabled.
    pub fn check(&self, cores: usize) -> Result<(), String> {
        if self.num_schedulers > cores {
            return Err(format!(
                "num_schedulers = {}: at most the {cores} cores of this server",
                self.num_schedulers
            ));
        }
        if !self.enabled_schedulers.iter().any(|s| s == CORE_SCHEDULER) {
            return Err(format!(
                "enabled_schedulers must include {CORE_SCHEDULER:?} (got {:?})",
                self.enabled_schedulers
            ));
        }
        if let Some(bad) = self.enabled_schedulers.iter().find(|s| {
            s.as_str() != CORE_SCHEDULER && !super::worker::SCHEDULER_TYPES.contains(&s.as_str())
        }) {
            return Err(format!(
                "enabled_schedulers: unknown scheduler {bad:?} (known: {CORE_SCHEDULER}, {})",
                super::worker::SCHEDULER_TYPES.join(", ")
            ));
        }
        Ok(())
    }

    /// The job types workers dequeue.
    pub(crate) fn types(&self) -> Vec<String> {
        self.enabled_schedulers
            .iter()
            .filter(|s| super::worker::SCHEDULER_TYPES.contains(&s.as_str()))
            .cloned()
            .collect()
    }

    /// Every type, with `_core`: Nomad's default.
    pub fn all(num_schedulers: usize) -> PoolConfig {
        let mut enabled: Vec<String> = super::worker::SCHEDULER_TYPES
            .iter()
            .map(|t| (*t).to_owned())
            .collect();
        enabled.push(CORE_SCHEDULER.to_owned());
        PoolConfig {
            num_schedulers,
            enabled_schedulers: enabled,
        }
    }
}

/// Nomad's `WorkerStatus` words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Starting,
    Started,
    Paused,
    Stopped,
}

/// Nomad's `SchedulerWorkerStatus` words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    WaitingToDequeue,
    Scheduling,
    Submitting,
    Stopped,
    Paused,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Starting => "Starting",
            Status::Started => "Started",
            Status::Paused => "Paused",
            Status::Stopped => "Stopped",
        }
    }
}

impl Workload {
    pub fn as_str(self) -> &'static str {
        match self {
            Workload::WaitingToDequeue => "WaitingToDequeue",
            Workload::Scheduling => "Scheduling",
            Workload::Submitting => "Submitting",
            Workload::Stopped => "Stopped",
            Workload::Paused => "Paused",
        }
    }
}

/// One worker as `/v1/agent/schedulers` shows it.
#[derive(Debug, Clone)]
pub struct WorkerInfo {
    pub id: String,
    pub enabled_schedulers: Vec<String>,
    /// Unix nanoseconds.
    pub started: i64,
    pub status: Status,
    pub workload: Workload,
}

#[derive(Debug, Clone)]
struct Slot {
    id: String,
    started: i64,
    status: Status,
    workload: Workload,
}

/// The pool: its configuration (watched by the leader's workers) and its slots.
pub struct WorkerPool {
    config: watch::Sender<PoolConfig>,
    slots: Mutex<Vec<Slot>>,
}

impl WorkerPool {
    pub fn new(config: PoolConfig) -> WorkerPool {
        WorkerPool {
            config: watch::channel(config).0,
            slots: Mutex::new(Vec::new()),
        }
    }

    pub fn config(&self) -> PoolConfig {
        self.config.borrow().clone()
    }

    /// Replaces the configuration; the leader's workers follow at once.
    pub fn set_config(&self, config: PoolConfig) {
        self.config.send_replace(config);
    }

    pub(crate) fn watch(&self) -> watch::Receiver<PoolConfig> {
        self.config.subscribe()
    }

    fn with_slot(&self, i: usize, f: impl FnOnce(&mut Slot)) {
        let mut slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while slots.len() <= i {
            slots.push(Slot {
                id: uuid_like(),
                started: 0,
                status: Status::Paused,
                workload: Workload::Paused,
            });
        }
        f(&mut slots[i]);
    }

    /// Worker `i` (re)starts.
    pub(crate) fn started(&self, i: usize) {
        let now = crate::endpoints::now_nanos();
        self.with_slot(i, |s| {
            s.started = now;
            s.status = Status::Started;
            s.workload = Workload::WaitingToDequeue;
        });
    }

    pub(crate) fn workload(&self, i: usize, w: Workload) {
        self.with_slot(i, |s| s.workload = w);
    }

    pub(crate) fn stopped(&self, i: usize) {
        self.with_slot(i, |s| {
            s.status = Status::Stopped;
            s.workload = Workload::Stopped;
        });
    }

    /// The configured workers; on a server that does not lead, all paused (Nomad's followers
    /// pause theirs: only the leader schedules).
    pub fn info(&self, leading: bool) -> Vec<WorkerInfo> {
        let cfg = self.config();
        for i in 0..cfg.num_schedulers {
            self.with_slot(i, |_| {});
        }
        let slots = self
            .slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        slots
            .iter()
            .take(cfg.num_schedulers)
            .map(|s| WorkerInfo {
                id: s.id.clone(),
                enabled_schedulers: cfg.enabled_schedulers.clone(),
                started: s.started,
                status: if leading { s.status } else { Status::Paused },
                workload: if leading {
                    s.workload
                } else {
                    Workload::Paused
                },
            })
            .collect()
    }
}

fn uuid_like() -> String {
    crate::endpoints::new_id()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_is_checked_as_nomad_checks_it() {
        assert!(PoolConfig::all(2).check(2).is_ok());
        assert!(
            PoolConfig::all(0).check(2).is_ok(),
            "zero pauses scheduling here"
        );
        let err = PoolConfig::all(3).check(2).unwrap_err();
        assert!(err.contains("at most the 2 cores"), "{err}");
        let mut no_core = PoolConfig::all(1);
        no_core.enabled_schedulers.retain(|s| s != CORE_SCHEDULER);
        assert!(no_core.check(2).unwrap_err().contains("_core"));
        let mut unknown = PoolConfig::all(1);
        unknown.enabled_schedulers.push("gpu".into());
        assert!(unknown.check(2).unwrap_err().contains("\"gpu\""));
        assert_eq!(PoolConfig::all(1).types().len(), 4);
    }

    #[test]
    fn slots_follow_their_workers_and_followers_show_paused() {
        let pool = WorkerPool::new(PoolConfig::all(2));
        let before = pool.info(true);
        assert_eq!(before.len(), 2);
        assert_eq!(before[0].status, Status::Paused, "not started yet");
        pool.started(0);
        pool.workload(0, Workload::Scheduling);
        let now = pool.info(true);
        assert_eq!(
            (now[0].status, now[0].workload),
            (Status::Started, Workload::Scheduling)
        );
        assert_eq!(now[0].id, before[0].id, "a slot keeps its ID");
        assert_eq!(pool.info(false)[0].status, Status::Paused);
        pool.set_config(PoolConfig::all(1));
        assert_eq!(pool.info(true).len(), 1);
    }
}
