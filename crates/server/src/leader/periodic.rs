//! The periodic launcher: launches each active periodic job's children on its cron schedule (Nomad's
//! `PeriodicDispatch`).
//!
//! Engine: [`Launcher::step`] takes what state says of every periodic job and the time, and answers
//! which children to launch now and when to look again. Everything it needs is rebuilt from state —
//! a job's last launch is its newest child `<id>/periodic-<unix seconds>` (or, before any, the job's
//! submit time, as Nomad records the insertion as the first launch) — so a new leader starts from
//! state alone. A launch whose time passed while no leader ran is made once, now, and the schedule
//! goes on from there (Nomad's leader force-runs a job whose next launch after the last one has
//! passed); several missed launches are not replayed.
//!
//! The only memory is the launches passed over for `prohibit_overlap` (a child still running), so
//! that a passed-over launch is not made later as "missed"; it is lost with leadership, and the next
//! leader may then make one such launch late.
//!
//! Task: [`periodic_task`] steps the engine whenever the Jobs table changes or a launch falls due,
//! registers the children one at a time, and returns on the stop signal (leadership lost).

use super::limits::{PERIODIC_EMPTY_POLL, PERIODIC_RETRY, PERIODIC_WAIT_MAX};
use super::tasks::stopped;
use crate::cron::Schedule;
use crate::endpoints::launch::{periodic_active, PERIODIC_LAUNCH_SUFFIX};
use crate::endpoints::now_nanos;
use crate::server::Server;
use model::Job;
use state::{StateSnapshot, Table};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const NANOS_PER_SEC: i64 = 1_000_000_000;

/// A job's key: (namespace, ID).
type JobKey = (String, String);

/// What state says of one active periodic job.
#[derive(Debug, Clone)]
pub(crate) struct Tracked {
    pub job: Arc<Job>,
    pub schedule: Schedule,
    /// The newest launch in state, Unix seconds.
    pub last_launch_s: i64,
    /// Some child is not dead yet (it has a live evaluation or allocation).
    pub child_running: bool,
}

impl Tracked {
    fn key(&self) -> JobKey {
        (
            self.job.namespace.clone().unwrap_or_default(),
            self.job.id.clone(),
        )
    }
}

/// A child to launch.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub job: Arc<Job>,
    pub launch_s: i64,
}

/// One step's answer: launches to make now, and the next time anything falls due.
#[derive(Debug, Default)]
pub(crate) struct Step {
    pub launches: Vec<Launch>,
    pub next_due_s: Option<i64>,
}

#[derive(Debug, Default)]
pub(crate) struct Launcher {
    /// Launches passed over because a child was still running, by job: treated as made.
    passed_over: BTreeMap<JobKey, i64>,
}

impl Launcher {
    /// What to launch at `now_s`, given every active periodic job.
    pub fn step(&mut self, jobs: &[Tracked], now_s: i64) -> Step {
        let mut step = Step::default();
        let mut passed_over = BTreeMap::new();
        for t in jobs {
            let key = t.key();
            let last = self
                .passed_over
                .get(&key)
                .map_or(t.last_launch_s, |&s| s.max(t.last_launch_s));
            let Some(next) = t.schedule.next_after(last) else {
                continue;
            };
            if next > now_s {
                step.next_due_s = earliest(step.next_due_s, Some(next));
                if last > t.last_launch_s {
                    passed_over.insert(key, last);
                }
                continue;
            }
            // Due. If more launches passed since, they were missed: launch once, now.
            let missed_more = t.schedule.next_after(next).is_some_and(|n| n <= now_s);
            let launch_s = if missed_more { now_s } else { next };
            if t.job.periodic.as_ref().and_then(|p| p.prohibit_overlap) == Some(true)
                && t.child_running
            {
                tracing::debug!(job_id = %t.job.id, launch_s, "a child still runs; launch passed over (prohibit_overlap)");
                passed_over.insert(key, launch_s);
            } else {
                step.launches.push(Launch {
                    job: t.job.clone(),
                    launch_s,
                });
            }
            step.next_due_s = earliest(step.next_due_s, t.schedule.next_after(launch_s));
        }
        self.passed_over = passed_over;
        step
    }
}

fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Every active periodic job in `snap` with its schedule, last launch and running children. A job
/// whose schedule no longer parses (registered before validation knew better) is skipped, logged.
pub(crate) fn tracked_jobs(snap: &StateSnapshot) -> Vec<Tracked> {
    snap.jobs(None, "")
        .into_iter()
        .filter(|j| periodic_active(j))
        .filter_map(|job| {
            let cfg = job.periodic.as_ref()?;
            let schedule = match Schedule::parse(cfg) {
                Ok(s) => s,
                Err(errors) => {
                    tracing::warn!(job_id = %job.id, ?errors, "periodic job has an invalid schedule; not launched");
                    return None;
                }
            };
            let ns = job.namespace.clone().unwrap_or_default();
            let prefix = format!("{}{PERIODIC_LAUNCH_SUFFIX}", job.id);
            let children = snap.jobs(Some(&ns), &prefix);
            let newest_child = children
                .iter()
                .filter_map(|c| c.id.strip_prefix(&prefix)?.parse::<i64>().ok())
                .max();
            let submitted = job.submit_time.unwrap_or(0).div_euclid(NANOS_PER_SEC);
            let child_running = children
                .iter()
                .any(|c| c.status != Some(model::JobStatus::Dead));
            Some(Tracked {
                last_launch_s: newest_child.map_or(submitted, |c| c.max(submitted)),
                child_running,
                schedule,
                job,
            })
        })
        .collect()
}

/// Steps the launcher on every change of the Jobs table and at every due time; registers the
/// children it asks for. Returns on the stop signal; nothing is lost, the next leader starts from
/// state.
pub(crate) async fn periodic_task(server: Server, mut stop: watch::Receiver<bool>) {
    let store = server.state().clone();
    let mut launcher = Launcher::default();
    loop {
        let snap = store.snapshot();
        let seen = snap.table_index(Table::Jobs);
        let now_ns = now_nanos();
        let step = launcher.step(&tracked_jobs(&snap), now_ns.div_euclid(NANOS_PER_SEC));
        let mut failed = false;
        for launch in step.launches {
            if *stop.borrow() {
                return;
            }
            let id = &launch.job.id;
            match server
                .periodic_launch_local(&launch.job, launch.launch_s)
                .await
            {
                Ok(r) => {
                    tracing::info!(job_id = %id, launch_s = launch.launch_s, eval_id = %r.eval_id, "periodic job launched")
                }
                Err(e) => {
                    tracing::warn!(job_id = %id, launch_s = launch.launch_s, error = %e, "launching a periodic job failed; trying again");
                    failed = true;
                }
            }
        }
        let wait = if failed {
            PERIODIC_RETRY
        } else {
            until(step.next_due_s, now_nanos())
        };
        let wake = async {
            if failed || seen == 0 {
                // The store never blocks on index 0, and a failed launch waits its turn.
                tokio::time::sleep(if failed {
                    wait
                } else {
                    wait.min(PERIODIC_EMPTY_POLL)
                })
                .await;
            } else {
                let deadline = tokio::time::Instant::now() + wait;
                store.wait_for(&[Table::Jobs], seen, deadline).await;
            }
        };
        tokio::select! {
            () = stopped(&mut stop) => return,
            () = wake => {}
        }
    }
}

/// How long until `due_s` (Unix seconds), at most [`PERIODIC_WAIT_MAX`].
fn until(due_s: Option<i64>, now_ns: i64) -> Duration {
    let Some(due_s) = due_s else {
        return PERIODIC_WAIT_MAX;
    };
    let wait_ns = due_s.saturating_mul(NANOS_PER_SEC).saturating_sub(now_ns);
    Duration::from_nanos(u64::try_from(wait_ns).unwrap_or(0)).min(PERIODIC_WAIT_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::PeriodicConfig;

    /// 2024-05-01T12:00:00Z.
    const NOON: i64 = 1_714_564_800;

    fn tracked(id: &str, spec: &str, last_launch_s: i64, overlap: bool, running: bool) -> Tracked {
        let cfg = PeriodicConfig {
            specs: vec![spec.into()],
            prohibit_overlap: Some(overlap),
            ..PeriodicConfig::default()
        };
        Tracked {
            schedule: Schedule::parse(&cfg).expect("valid"),
            job: Arc::new(Job {
                id: id.into(),
                namespace: Some("default".into()),
                periodic: Some(cfg),
                ..Job::default()
            }),
            last_launch_s,
            child_running: running,
        }
    }

    fn launched(step: &Step) -> Vec<(String, i64)> {
        step.launches
            .iter()
            .map(|l| (l.job.id.clone(), l.launch_s))
            .collect()
    }

    #[test]
    fn due_jobs_launch_at_their_scheduled_time() {
        let jobs = [
            tracked("hourly", "0 * * * *", NOON - 3600, false, false),
            tracked("quarter", "*/15 * * * *", NOON, false, false),
        ];
        let mut l = Launcher::default();
        // A second after noon: the hourly launch at noon is due; "quarter" made its noon launch
        // already, its next is at 12:15.
        let step = l.step(&jobs, NOON + 1);
        assert_eq!(launched(&step), [("hourly".to_string(), NOON)]);
        assert_eq!(step.next_due_s, Some(NOON + 15 * 60));
        // Before noon nothing is due, and the next look is at noon.
        let step = Launcher::default().step(&jobs[..1], NOON - 1);
        assert!(step.launches.is_empty());
        assert_eq!(step.next_due_s, Some(NOON));
    }

    #[test]
    fn missed_launches_are_made_once_now() {
        // Last launched three hours ago: the 10:00, 11:00 and 12:00 launches were missed.
        let jobs = [tracked(
            "hourly",
            "0 * * * *",
            NOON - 3 * 3600,
            false,
            false,
        )];
        let step = Launcher::default().step(&jobs, NOON + 120);
        assert_eq!(launched(&step), [("hourly".to_string(), NOON + 120)]);
        assert_eq!(step.next_due_s, Some(NOON + 3600));
    }

    #[test]
    fn overlap_passes_a_launch_over_until_the_next() {
        let mut l = Launcher::default();
        let busy = [tracked("p", "*/10 * * * * *", NOON, true, true)];
        let step = l.step(&busy, NOON + 10);
        assert!(step.launches.is_empty(), "a child still runs");
        assert_eq!(step.next_due_s, Some(NOON + 20));
        // The child finished: the passed-over launch is not made late…
        let idle = [tracked("p", "*/10 * * * * *", NOON, true, false)];
        let step = l.step(&idle, NOON + 15);
        assert!(step.launches.is_empty());
        assert_eq!(step.next_due_s, Some(NOON + 20));
        // …the next one is.
        let step = l.step(&idle, NOON + 20);
        assert_eq!(launched(&step), [("p".to_string(), NOON + 20)]);
        // Overlap allowed: launches whatever runs.
        let step = Launcher::default().step(
            &[tracked("q", "*/10 * * * * *", NOON, false, true)],
            NOON + 10,
        );
        assert_eq!(launched(&step), [("q".to_string(), NOON + 10)]);
    }

    #[test]
    fn waits_are_bounded() {
        assert_eq!(until(None, 0), PERIODIC_WAIT_MAX);
        assert_eq!(
            until(Some(1), 0),
            Duration::from_secs(1).min(PERIODIC_WAIT_MAX)
        );
        assert_eq!(until(Some(1), 5 * NANOS_PER_SEC), Duration::ZERO);
    }
}
