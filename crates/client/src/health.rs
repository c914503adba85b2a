//! Deployment health of one allocation (Nomad's alloc health tracker): an allocation of a
//! deployment is healthy once its tasks have all been running, and (with `health_check =
//! "checks"`, the default, when the group's nomad services have checks) its checks passing, for
//! the group's `min_healthy_time`; unhealthy if a task fails or `healthy_deadline` passes first.
//! The servers' deployment watcher counts the result.
//!
//! Pure: the caller passes the time and the tasks' states.

use model::alloc::{Allocation, TaskStatus};
use model::group::TaskGroup;
use std::time::Duration;
use tokio::time::Instant;

/// Nomad's defaults for `min_healthy_time` and `healthy_deadline`.
const MIN_HEALTHY_TIME_DEFAULT: Duration = Duration::from_secs(10);
const HEALTHY_DEADLINE_DEFAULT: Duration = Duration::from_secs(300);

/// One task as health sees it.
pub(crate) struct TaskView<'a> {
    /// The task must be running for the allocation to be healthy (main tasks, sidecars).
    pub must_run: bool,
    pub state: &'a TaskStatus,
    pub failed: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct HealthTracker {
    deployment_id: String,
    min_healthy: Duration,
    deadline: Instant,
    running_since: Option<Instant>,
    decided: Option<bool>,
    /// The group's checks count too.
    use_checks: bool,
}

/// Whether the group's `nomad` services (its own and its tasks') declare any check.
fn has_nomad_checks(group: &TaskGroup) -> bool {
    let nomad = |s: &&model::service::Service| {
        s.provider.as_deref() == Some(model::service_registration::PROVIDER_NOMAD)
    };
    group
        .services
        .iter()
        .chain(group.tasks.iter().flat_map(|t| t.services.iter()))
        .filter(nomad)
        .any(|s| !s.checks.is_empty())
}

impl HealthTracker {
    /// A tracker when the allocation belongs to a deployment whose health is not yet decided
    /// and whose group does not ask for manual health.
    pub fn for_alloc(alloc: &Allocation, group: Option<&TaskGroup>, now: Instant) -> Option<Self> {
        if alloc.deployment_id.is_empty()
            || alloc
                .deployment_status
                .as_ref()
                .is_some_and(|d| d.healthy.is_some())
        {
            return None;
        }
        let update = group.and_then(|g| g.update.as_ref());
        if update.and_then(|u| u.health_check.as_deref()) == Some("manual") {
            return None;
        }
        let to_std = |d: model::Duration| Duration::from_nanos(u64::try_from(d.0).unwrap_or(0));
        let use_checks = update.and_then(|u| u.health_check.as_deref()) != Some("task_states")
            && group.is_some_and(has_nomad_checks);
        Some(HealthTracker {
            use_checks,
            deployment_id: alloc.deployment_id.clone(),
            min_healthy: update
                .and_then(|u| u.min_healthy_time)
                .map_or(MIN_HEALTHY_TIME_DEFAULT, to_std),
            deadline: now
                + update
                    .and_then(|u| u.healthy_deadline)
                    .map_or(HEALTHY_DEADLINE_DEFAULT, to_std),
            running_since: None,
            decided: None,
        })
    }

    pub fn deployment_id(&self) -> &str {
        &self.deployment_id
    }

    /// The decision, once made; it never changes after.
    pub fn decided(&self) -> Option<bool> {
        self.decided
    }

    /// `checks_ok`: the allocation's checks all pass now (ignored when they do not count).
    pub fn observe<'a>(
        &mut self,
        tasks: impl Iterator<Item = TaskView<'a>>,
        checks_ok: bool,
        now: Instant,
    ) {
        if self.decided.is_some() {
            return;
        }
        let (mut all_running, mut any_failed) = (true, false);
        for t in tasks {
            any_failed |= t.failed;
            all_running &= !t.must_run || *t.state == TaskStatus::Running;
        }
        if any_failed {
            self.decided = Some(false);
            return;
        }
        if all_running && (checks_ok || !self.use_checks) {
            let since = *self.running_since.get_or_insert(now);
            if now.duration_since(since) >= self.min_healthy {
                self.decided = Some(true);
                return;
            }
        } else {
            self.running_since = None;
        }
        if now >= self.deadline {
            self.decided = Some(false);
        }
    }

    /// When to look again (the healthy time or the deadline); `None` once decided.
    pub fn next_check(&self) -> Option<Instant> {
        if self.decided.is_some() {
            return None;
        }
        let healthy_at = self.running_since.map(|s| s + self.min_healthy);
        Some(healthy_at.map_or(self.deadline, |h| h.min(self.deadline)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::group::UpdateStrategy;

    fn tracker(now: Instant) -> HealthTracker {
        let alloc = Allocation {
            deployment_id: "d1".into(),
            ..Allocation::default()
        };
        let group = TaskGroup {
            update: Some(UpdateStrategy {
                min_healthy_time: Some(model::Duration::from_secs(10)),
                healthy_deadline: Some(model::Duration::from_secs(60)),
                ..UpdateStrategy::default()
            }),
            ..TaskGroup::default()
        };
        HealthTracker::for_alloc(&alloc, Some(&group), now).expect("tracked")
    }

    fn view(state: &str, failed: bool) -> TaskView<'static> {
        TaskView {
            must_run: true,
            state: match state {
                "running" => &TaskStatus::Running,
                "pending" => &TaskStatus::Pending,
                _ => &TaskStatus::Dead,
            },
            failed,
        }
    }

    #[test]
    fn healthy_after_running_for_min_healthy_time() {
        let t0 = Instant::now();
        let mut h = tracker(t0);
        h.observe([view("running", false)].into_iter(), true, t0);
        assert_eq!(h.decided(), None);
        assert_eq!(h.next_check(), Some(t0 + Duration::from_secs(10)));
        h.observe(
            [view("running", false)].into_iter(),
            true,
            t0 + Duration::from_secs(10),
        );
        assert_eq!(h.decided(), Some(true));
        assert_eq!(h.next_check(), None);
    }

    #[test]
    fn a_restart_resets_the_clock_and_a_failure_or_the_deadline_decides_unhealthy() {
        let t0 = Instant::now();
        let mut h = tracker(t0);
        h.observe([view("running", false)].into_iter(), true, t0);
        h.observe(
            [view("pending", false)].into_iter(),
            true,
            t0 + Duration::from_secs(5),
        );
        h.observe(
            [view("running", false)].into_iter(),
            true,
            t0 + Duration::from_secs(6),
        );
        h.observe(
            [view("running", false)].into_iter(),
            true,
            t0 + Duration::from_secs(12),
        );
        assert_eq!(h.decided(), None, "the clock restarted at 6 s");
        let mut late = tracker(t0);
        late.observe(
            [view("pending", false)].into_iter(),
            true,
            t0 + Duration::from_secs(61),
        );
        assert_eq!(late.decided(), Some(false));
        let mut failed = tracker(t0);
        failed.observe([view("dead", true)].into_iter(), true, t0);
        assert_eq!(failed.decided(), Some(false));
    }

    #[test]
    fn with_checks_the_healthy_time_counts_from_when_the_checks_pass() {
        let t0 = Instant::now();
        let alloc = Allocation {
            deployment_id: "d1".into(),
            ..Allocation::default()
        };
        let mut group = TaskGroup {
            update: Some(UpdateStrategy {
                min_healthy_time: Some(model::Duration::from_secs(10)),
                healthy_deadline: Some(model::Duration::from_secs(60)),
                ..UpdateStrategy::default()
            }),
            services: vec![model::service::Service {
                name: "web".into(),
                provider: Some("nomad".into()),
                checks: vec![model::service::ServiceCheck::default()],
                ..model::service::Service::default()
            }],
            ..TaskGroup::default()
        };
        let mut h = HealthTracker::for_alloc(&alloc, Some(&group), t0).expect("tracked");
        h.observe([view("running", false)].into_iter(), false, t0);
        let at = |s| t0 + Duration::from_secs(s);
        h.observe([view("running", false)].into_iter(), false, at(20));
        assert_eq!(h.decided(), None, "running, but the checks do not pass");
        h.observe([view("running", false)].into_iter(), true, at(25));
        h.observe([view("running", false)].into_iter(), true, at(34));
        assert_eq!(h.decided(), None, "passing since 25 s");
        h.observe([view("running", false)].into_iter(), true, at(35));
        assert_eq!(h.decided(), Some(true));

        // health_check = "task_states": the checks do not count.
        group.update.as_mut().unwrap().health_check = Some("task_states".into());
        let mut h = HealthTracker::for_alloc(&alloc, Some(&group), t0).expect("tracked");
        h.observe([view("running", false)].into_iter(), false, t0);
        h.observe([view("running", false)].into_iter(), false, at(10));
        assert_eq!(h.decided(), Some(true));
    }

    #[test]
    fn only_deployments_are_tracked() {
        let now = Instant::now();
        assert!(HealthTracker::for_alloc(&Allocation::default(), None, now).is_none());
    }
}
