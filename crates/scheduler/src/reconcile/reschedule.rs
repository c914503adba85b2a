//! The `reschedule` policy: when a failed allocation gets a replacement (Nomad's
//! `NextRescheduleTime`, `NextDelay`, `RescheduleEligible`, `updateRescheduleTracker`).

use crate::limits::RESCHEDULE_EVENTS_KEPT_MAX;
use crate::time::parse_unix_nanos;
use model::alloc::{Allocation, RescheduleEvent, RescheduleTracker};
use model::duration::Duration;
use model::group::ReschedulePolicy;

/// The policy governing `alloc`: its own job version's group policy, else `fallback`.
pub(crate) fn policy_of<'a>(
    alloc: &'a Allocation,
    fallback: Option<&'a ReschedulePolicy>,
) -> Option<&'a ReschedulePolicy> {
    let own = alloc.job.as_ref().map(|j| {
        j.task_groups
            .iter()
            .find(|g| g.name == alloc.task_group)
            .and_then(|g| g.reschedule_policy.as_ref())
    });
    match own {
        Some(p) => p,
        None => fallback,
    }
}

/// When the allocation failed: its tasks' latest finish, else its modify time.
pub(crate) fn fail_time(alloc: &Allocation) -> i64 {
    alloc
        .task_states
        .values()
        .filter_map(|s| s.finished_at.as_deref().and_then(parse_unix_nanos))
        .max()
        .unwrap_or(alloc.modify_time)
}

fn events(alloc: &Allocation) -> &[RescheduleEvent] {
    alloc
        .reschedule_tracker
        .as_ref()
        .map(|t| t.events.as_slice())
        .unwrap_or_default()
}

/// The delay before the next attempt: `delay`, doubled (exponential) or the sum of the last two
/// (fibonacci) after earlier attempts, capped by `max_delay` — and back to `delay` once the
/// allocation ran longer than the cap since its last reschedule.
pub(crate) fn next_delay(alloc: &Allocation, policy: &ReschedulePolicy) -> i64 {
    let base = policy.delay.unwrap_or_default().0;
    let max = policy.max_delay.unwrap_or_default().0;
    let evs = events(alloc);
    let Some(last) = evs.last() else {
        return base;
    };
    let delay = match policy.delay_function.as_deref() {
        Some("exponential") => last.delay.0.saturating_mul(2),
        Some("fibonacci") if evs.len() >= 2 => {
            let before = evs[evs.len() - 2].delay.0;
            if before == max && last.delay.0 == base {
                last.delay.0
            } else {
                last.delay.0.saturating_add(before)
            }
        }
        Some("fibonacci") => base,
        _ => return base,
    };
    if max > 0 && delay > max {
        if fail_time(alloc) - last.reschedule_time > max {
            return base;
        }
        return max;
    }
    delay
}

/// When the failed allocation may be replaced, and whether the policy allows it at all.
pub(crate) fn next_reschedule_time(alloc: &Allocation, policy: &ReschedulePolicy) -> (i64, bool) {
    let failed = fail_time(alloc);
    let delay = next_delay(alloc, policy);
    let attempts = policy.attempts.unwrap_or(0);
    let unlimited = policy.unlimited.unwrap_or(false);
    let interval = policy.interval.unwrap_or_default().0;
    let evs = events(alloc);
    let mut eligible = unlimited || (attempts > 0 && evs.is_empty());
    if attempts > 0 && !evs.is_empty() {
        let attempted = evs
            .iter()
            .filter(|e| failed - e.reschedule_time < interval)
            .count();
        eligible = (attempted as i64) < i64::from(attempts) && delay < interval;
    }
    (failed.saturating_add(delay), eligible)
}

/// The tracker of a replacement for `prev`, made at `now`: earlier events still inside the
/// interval (or the last few when unlimited), then this one.
pub(crate) fn tracker_for(
    prev: &Allocation,
    policy: Option<&ReschedulePolicy>,
    now: i64,
) -> RescheduleTracker {
    let mut kept: Vec<RescheduleEvent> = Vec::new();
    let evs = events(prev);
    let attempts = policy.and_then(|p| p.attempts).unwrap_or(0);
    if attempts > 0 {
        let interval = policy.and_then(|p| p.interval).unwrap_or_default().0;
        kept.extend(
            evs.iter()
                .filter(|e| interval > 0 && now - e.reschedule_time <= interval)
                .cloned(),
        );
    } else {
        let start = evs.len().saturating_sub(RESCHEDULE_EVENTS_KEPT_MAX);
        kept.extend(evs[start..].iter().cloned());
    }
    let delay = policy.map(|p| next_delay(prev, p)).unwrap_or(0);
    kept.push(RescheduleEvent {
        reschedule_time: now,
        prev_alloc_id: prev.id.clone(),
        prev_node_id: prev.node_id.clone(),
        delay: Duration(delay),
    });
    RescheduleTracker { events: kept }
}

/// The nodes a replacement should avoid: where this allocation and its predecessors failed.
pub(crate) fn penalty_nodes(prev: &Allocation) -> Vec<String> {
    let mut nodes = vec![prev.node_id.clone()];
    for e in events(prev) {
        if !nodes.contains(&e.prev_node_id) {
            nodes.push(e.prev_node_id.clone());
        }
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i64 = 1_000_000_000;

    fn policy(function: &str, attempts: i32, unlimited: bool) -> ReschedulePolicy {
        ReschedulePolicy {
            attempts: Some(attempts),
            interval: Some(Duration::from_hours(1)),
            delay: Some(Duration::from_secs(5)),
            delay_function: Some(function.into()),
            max_delay: Some(Duration::from_secs(60)),
            unlimited: Some(unlimited),
        }
    }

    fn failed_with(delays: &[i64]) -> Allocation {
        Allocation {
            id: "a".into(),
            node_id: "n".into(),
            modify_time: 1000 * SEC,
            reschedule_tracker: (!delays.is_empty()).then(|| RescheduleTracker {
                events: delays
                    .iter()
                    .map(|d| RescheduleEvent {
                        reschedule_time: 990 * SEC,
                        delay: Duration(d * SEC),
                        prev_node_id: "old".into(),
                        ..RescheduleEvent::default()
                    })
                    .collect(),
            }),
            ..Allocation::default()
        }
    }

    #[test]
    fn delay_functions() {
        let rows = [
            ("constant", vec![], 5),
            ("constant", vec![5, 5], 5),
            ("exponential", vec![], 5),
            ("exponential", vec![5, 10], 20),
            ("exponential", vec![40], 60),
            ("fibonacci", vec![5], 5),
            ("fibonacci", vec![5, 5], 10),
            ("fibonacci", vec![5, 10], 15),
            ("fibonacci", vec![30, 50], 60),
        ];
        for (function, delays, want) in rows {
            let a = failed_with(&delays);
            assert_eq!(
                next_delay(&a, &policy(function, 0, true)),
                want * SEC,
                "{function} {delays:?}"
            );
        }
    }

    #[test]
    fn delay_resets_after_a_long_run() {
        let mut a = failed_with(&[40]);
        a.modify_time = 990 * SEC + 61 * SEC;
        assert_eq!(next_delay(&a, &policy("exponential", 0, true)), 5 * SEC);
    }

    #[test]
    fn attempts_within_the_interval() {
        let p = policy("constant", 2, false);
        assert_eq!(
            next_reschedule_time(&failed_with(&[]), &p),
            (1005 * SEC, true)
        );
        assert!(next_reschedule_time(&failed_with(&[5]), &p).1);
        assert!(!next_reschedule_time(&failed_with(&[5, 5]), &p).1);
        assert!(next_reschedule_time(&failed_with(&[5, 5]), &policy("constant", 0, true)).1);
        assert!(!next_reschedule_time(&failed_with(&[]), &policy("constant", 0, false)).1);
    }

    #[test]
    fn trackers_carry_recent_events() {
        let prev = failed_with(&[5, 5]);
        let t = tracker_for(&prev, Some(&policy("constant", 3, false)), 1000 * SEC);
        assert_eq!(t.events.len(), 3);
        assert_eq!(t.events[2].prev_alloc_id, "a");
        assert_eq!(penalty_nodes(&prev), ["n", "old"]);
    }
}
