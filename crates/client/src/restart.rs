//! Restart tracking (Nomad's `RestartTracker`): after a task exits or fails to start, decide
//! whether to start it again, after how long, and why.
//!
//! Pure: the caller passes the time and a random number (for the delay's jitter), so tests
//! drive it row by row.

use crate::limits::RESTART_JITTER_PERCENT;
use model::group::RestartPolicy;
use model::job::JobType;
use model::task::TaskLifecycle;
use std::time::{Duration, Instant};

pub const REASON_NO_RESTARTS_ALLOWED: &str = "Policy allows no restarts";
pub const REASON_UNRECOVERABLE: &str = "Error was unrecoverable";
pub const REASON_WITHIN_POLICY: &str = "Restart within policy";
pub const REASON_DELAY: &str = "Exceeded allowed attempts, applying a delay";

/// What happens after an exit or a failed start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start again after `delay`.
    Restart { delay: Duration, reason: String },
    /// Do not start again; the task failed.
    Fail { reason: String },
    /// Do not start again; the task is done (a successful exit that is not restarted).
    Complete,
}

/// The restart policy's fields, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Policy {
    attempts: u32,
    interval: Duration,
    delay: Duration,
    fail_mode: bool,
}

#[derive(Debug, Clone)]
pub struct RestartTracker {
    policy: Policy,
    /// Whether a successful exit is restarted too (services, sidecars) or ends the task.
    restart_on_success: bool,
    /// Restarts counted in the current interval.
    count: u32,
    interval_start: Option<Instant>,
}

impl RestartTracker {
    /// `policy`: the task's canonical restart policy (`None`: Nomad's default for the job type).
    pub fn new(
        policy: Option<&RestartPolicy>,
        job_type: &JobType,
        lifecycle: Option<&TaskLifecycle>,
    ) -> RestartTracker {
        let default = RestartPolicy::default_for(job_type);
        let pick = |f: fn(&RestartPolicy) -> Option<model::Duration>| {
            policy.and_then(f).or(f(&default)).unwrap_or_default()
        };
        let to_std = |d: model::Duration| Duration::from_nanos(u64::try_from(d.0).unwrap_or(0));
        let attempts = policy
            .and_then(|p| p.attempts)
            .or(default.attempts)
            .unwrap_or(0);
        let mode = policy
            .and_then(|p| p.mode.clone())
            .or(default.mode.clone())
            .unwrap_or_default();
        let mut restart_on_success = !matches!(job_type, JobType::Batch | JobType::Sysbatch);
        if let Some(lc) = lifecycle {
            restart_on_success = match lc.hook.as_str() {
                "prestart" | "poststart" => lc.sidecar,
                "poststop" => false,
                _ => restart_on_success,
            };
        }
        RestartTracker {
            policy: Policy {
                attempts: u32::try_from(attempts).unwrap_or(0),
                interval: to_std(pick(|p| p.interval)),
                delay: to_std(pick(|p| p.delay)),
                fail_mode: mode != "delay",
            },
            restart_on_success,
            count: 0,
            interval_start: None,
        }
    }

    /// The task exited; `successful`: exit code 0, no signal.
    pub fn on_exit(&mut self, successful: bool, now: Instant, random: u64) -> Decision {
        if successful && !self.restart_on_success {
            return Decision::Complete;
        }
        self.decide(now, random)
    }

    /// The driver could not start the task; `recoverable`: trying again may work.
    pub fn on_start_error(&mut self, recoverable: bool, now: Instant, random: u64) -> Decision {
        if !recoverable {
            return Decision::Fail {
                reason: REASON_UNRECOVERABLE.into(),
            };
        }
        self.decide(now, random)
    }

    fn decide(&mut self, now: Instant, random: u64) -> Decision {
        let p = self.policy;
        if p.attempts == 0 {
            return Decision::Fail {
                reason: REASON_NO_RESTARTS_ALLOWED.into(),
            };
        }
        let start = *self.interval_start.get_or_insert(now);
        if now.duration_since(start) > p.interval {
            self.count = 0;
            self.interval_start = Some(now);
        }
        self.count += 1;
        if self.count <= p.attempts {
            return Decision::Restart {
                delay: jittered(p.delay, random),
                reason: REASON_WITHIN_POLICY.into(),
            };
        }
        if p.fail_mode {
            return Decision::Fail {
                reason: format!(
                    "Exceeded allowed attempts {} in interval {} and mode is \"fail\"",
                    p.attempts,
                    model::Duration::from(p.interval)
                ),
            };
        }
        // Delay mode: wait for the interval to end, then a new one begins.
        let end = self.interval_start.unwrap_or(now) + p.interval;
        Decision::Restart {
            delay: end.saturating_duration_since(now),
            reason: REASON_DELAY.into(),
        }
    }
}

/// `delay` plus up to [`RESTART_JITTER_PERCENT`] of it, chosen by `random`.
fn jittered(delay: Duration, random: u64) -> Duration {
    let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
    let span = nanos / 100 * RESTART_JITTER_PERCENT;
    let extra = if span == 0 { 0 } else { random % span };
    Duration::from_nanos(nanos.saturating_add(extra))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(attempts: i32, interval_s: i64, delay_ms: i64, mode: &str) -> RestartPolicy {
        RestartPolicy {
            attempts: Some(attempts),
            interval: Some(model::Duration::from_secs(interval_s)),
            delay: Some(model::Duration::from_millis(delay_ms)),
            mode: Some(mode.into()),
            render_templates: None,
        }
    }

    fn is_restart(d: &Decision) -> bool {
        matches!(d, Decision::Restart { .. })
    }

    #[test]
    fn attempts_within_the_interval_then_fail() {
        let p = policy(2, 60, 100, "fail");
        let mut t = RestartTracker::new(Some(&p), &JobType::Service, None);
        let now = Instant::now();
        let first = t.on_exit(false, now, 7);
        let Decision::Restart { delay, reason } = &first else {
            panic!("{first:?}")
        };
        assert!(*delay >= Duration::from_millis(100) && *delay <= Duration::from_millis(125));
        assert_eq!(reason, REASON_WITHIN_POLICY);
        assert!(is_restart(&t.on_exit(false, now, 0)));
        assert_eq!(
            t.on_exit(false, now, 0),
            Decision::Fail {
                reason: "Exceeded allowed attempts 2 in interval 1m0s and mode is \"fail\"".into()
            }
        );
    }

    #[test]
    fn a_new_interval_resets_the_count() {
        let p = policy(1, 10, 0, "fail");
        let mut t = RestartTracker::new(Some(&p), &JobType::Service, None);
        let now = Instant::now();
        assert!(is_restart(&t.on_exit(false, now, 0)));
        assert!(!is_restart(&t.on_exit(
            false,
            now + Duration::from_secs(1),
            0
        )));
        assert!(is_restart(&t.on_exit(
            false,
            now + Duration::from_secs(12),
            0
        )));
    }

    #[test]
    fn delay_mode_waits_for_the_interval_to_end() {
        let p = policy(1, 10, 0, "delay");
        let mut t = RestartTracker::new(Some(&p), &JobType::Service, None);
        let now = Instant::now();
        assert!(is_restart(&t.on_exit(false, now, 0)));
        let d = t.on_exit(false, now + Duration::from_secs(4), 0);
        assert_eq!(
            d,
            Decision::Restart {
                delay: Duration::from_secs(6),
                reason: REASON_DELAY.into()
            }
        );
    }

    #[test]
    fn success_ends_batch_tasks_but_restarts_services() {
        let p = policy(2, 60, 0, "fail");
        let now = Instant::now();
        let mut batch = RestartTracker::new(Some(&p), &JobType::Batch, None);
        assert_eq!(batch.on_exit(true, now, 0), Decision::Complete);
        let mut service = RestartTracker::new(Some(&p), &JobType::Service, None);
        assert!(is_restart(&service.on_exit(true, now, 0)));
        let sidecar = TaskLifecycle {
            hook: "prestart".into(),
            sidecar: false,
        };
        let mut init = RestartTracker::new(Some(&p), &JobType::Service, Some(&sidecar));
        assert_eq!(init.on_exit(true, now, 0), Decision::Complete);
    }

    #[test]
    fn no_attempts_and_unrecoverable_errors_fail_at_once() {
        let now = Instant::now();
        let mut t = RestartTracker::new(Some(&policy(0, 60, 0, "fail")), &JobType::Service, None);
        assert_eq!(
            t.on_exit(false, now, 0),
            Decision::Fail {
                reason: REASON_NO_RESTARTS_ALLOWED.into()
            }
        );
        let mut t = RestartTracker::new(Some(&policy(3, 60, 0, "fail")), &JobType::Service, None);
        assert_eq!(
            t.on_start_error(false, now, 0),
            Decision::Fail {
                reason: REASON_UNRECOVERABLE.into()
            }
        );
        assert!(is_restart(&t.on_start_error(true, now, 0)));
    }

    #[test]
    fn defaults_come_from_the_job_type() {
        let now = Instant::now();
        let mut t = RestartTracker::new(None, &JobType::Batch, None);
        for _ in 0..3 {
            let d = t.on_exit(false, now, 0);
            assert_eq!(
                d,
                Decision::Restart {
                    delay: Duration::from_secs(15),
                    reason: REASON_WITHIN_POLICY.into()
                }
            );
        }
        assert!(!is_restart(&t.on_exit(false, now, 0)));
    }
}
