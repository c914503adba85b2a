//! `distinct_hosts` and `distinct_property`: constraints that depend on where the job's other
//! allocations are (existing ones and those placed earlier in the same plan), and the per-value
//! counts they share with spread scoring.

use super::constraint::Target;
use model::constraint::{Constraint, Operand};
use model::group::TaskGroup;
use model::job::Job;
use model::node::Node;
use std::collections::BTreeMap;

/// Which of the job's allocations a rule counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every allocation of the job (a job-level rule).
    Job,
    /// Allocations of the same task group (a group-level rule).
    Group,
}

fn operand(c: &Constraint) -> Option<Operand> {
    Operand::parse(&c.operand)
}

/// The `distinct_hosts` rule in force, if any. A job-level rule wins over a group-level one;
/// `value = false` switches a rule off.
pub(crate) fn distinct_hosts(job: &Job, tg: &TaskGroup) -> Option<Scope> {
    let enabled = |cs: &[Constraint]| {
        cs.iter().any(|c| {
            operand(c) == Some(Operand::DistinctHosts)
                && (c.r_target.is_empty() || c.r_target.parse::<bool>().unwrap_or(false))
        })
    };
    if enabled(&job.constraints) {
        Some(Scope::Job)
    } else if enabled(&tg.constraints) {
        Some(Scope::Group)
    } else {
        None
    }
}

/// A `distinct_property` rule: at most `limit` allocations per value of `target`.
#[derive(Debug, Clone)]
pub(crate) struct DistinctProperty {
    pub(crate) counts: PropertyCounts,
    pub(crate) limit: u32,
}

/// The job's and the group's `distinct_property` rules.
pub(crate) fn distinct_properties(job: &Job, tg: &TaskGroup) -> Vec<DistinctProperty> {
    let rules = |cs: &[Constraint], scope: Scope| -> Vec<DistinctProperty> {
        cs.iter()
            .filter(|c| operand(c) == Some(Operand::DistinctProperty))
            .map(|c| DistinctProperty {
                counts: PropertyCounts::new(
                    Target::parse(&c.l_target),
                    (scope == Scope::Group).then(|| tg.name.clone()),
                ),
                limit: c
                    .r_target
                    .trim()
                    .parse()
                    .ok()
                    .filter(|l| *l > 0)
                    .unwrap_or(1),
            })
            .collect()
    };
    let mut out = rules(&job.constraints, Scope::Job);
    out.extend(rules(&tg.constraints, Scope::Group));
    out
}

impl DistinctProperty {
    /// Whether one more allocation fits under the limit on `node`'s value; a node without the
    /// property is infeasible.
    pub(crate) fn allows(&self, node: &Node) -> bool {
        match self.counts.target.resolve(node) {
            Some(value) => self.counts.count_of(value) < self.limit,
            None => false,
        }
    }
}

/// Live allocations of the job (or of one group) per value of a node property.
#[derive(Debug, Clone)]
pub(crate) struct PropertyCounts {
    pub(crate) target: Target,
    /// `Some(group)` counts only that group's allocations.
    group: Option<String>,
    counts: BTreeMap<String, u32>,
}

impl PropertyCounts {
    pub(crate) fn new(target: Target, group: Option<String>) -> PropertyCounts {
        PropertyCounts {
            target,
            group,
            counts: BTreeMap::new(),
        }
    }

    /// Counts (`delta` = 1) or uncounts (`-1`) an allocation of group `tg` on `node`.
    pub(crate) fn record(&mut self, node: &Node, tg: &str, delta: i32) {
        if self.group.as_deref().is_some_and(|g| g != tg) {
            return;
        }
        let Some(value) = self.target.resolve(node) else {
            return;
        };
        let n = self.counts.entry(value.to_string()).or_default();
        *n = n.saturating_add_signed(delta);
        if *n == 0 {
            self.counts.remove(value);
        }
    }

    pub(crate) fn count_of(&self, value: &str) -> u32 {
        self.counts.get(value).copied().unwrap_or(0)
    }

    pub(crate) fn counts(&self) -> &BTreeMap<String, u32> {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_level_distinct_hosts_wins_and_false_switches_off() {
        let mut job = Job::default();
        let mut tg = TaskGroup {
            constraints: vec![Constraint::new("", "distinct_hosts", "")],
            ..TaskGroup::default()
        };
        assert_eq!(distinct_hosts(&job, &tg), Some(Scope::Group));
        job.constraints = vec![Constraint::new("", "distinct_hosts", "true")];
        assert_eq!(distinct_hosts(&job, &tg), Some(Scope::Job));
        job.constraints[0].r_target = "false".into();
        tg.constraints[0].r_target = "false".into();
        assert_eq!(distinct_hosts(&job, &tg), None);
    }

    #[test]
    fn distinct_property_limits_per_value() {
        let tg = TaskGroup {
            name: "web".into(),
            constraints: vec![Constraint::new("${meta.rack}", "distinct_property", "2")],
            ..TaskGroup::default()
        };
        let mut rules = distinct_properties(&Job::default(), &tg);
        assert_eq!(rules.len(), 1);
        let rule = &mut rules[0];
        assert_eq!(rule.limit, 2);
        let mut node = Node::default();
        node.meta.insert("rack".into(), "r1".into());
        assert!(rule.allows(&node));
        rule.counts.record(&node, "web", 1);
        rule.counts.record(&node, "other", 1);
        assert!(rule.allows(&node));
        rule.counts.record(&node, "web", 1);
        assert!(!rule.allows(&node));
        rule.counts.record(&node, "web", -1);
        assert!(rule.allows(&node));
        assert!(!rule.allows(&Node::default()));
    }
}
