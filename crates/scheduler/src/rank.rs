//! Ranking: the scores Nomad gives a feasible node that fits (`rank.go`, `spread.go`), each in
//! -1..=1, averaged into the node's final score.

use crate::feasible::constraint::{Rule, Target};
use crate::feasible::distinct::PropertyCounts;
use crate::limits::BINPACK_FITNESS_MAX;
use crate::resources::Capacity;
use model::group::TaskGroup;
use model::job::Job;
use model::node::Node;
use std::collections::BTreeMap;

/// The cluster's scheduler algorithm (Nomad's `SchedulerConfiguration.SchedulerAlgorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Algorithm {
    /// Fill nodes up (the default).
    #[default]
    Binpack,
    /// Prefer the emptiest nodes.
    Spread,
}

/// Nomad's `ScoreFitBinPack` / `ScoreFitSpread`, normalised to 0..=1. `cpu` and `memory_mb` are
/// the node's utilisation including the allocation being placed.
pub(crate) fn fitness(algorithm: Algorithm, cap: &Capacity, cpu: i64, memory_mb: i64) -> f64 {
    let free = |used: i64, total: i64| {
        if total <= 0 {
            0.0
        } else {
            1.0 - used as f64 / total as f64
        }
    };
    let total = 10f64.powf(free(cpu, cap.cpu)) + 10f64.powf(free(memory_mb, cap.memory_mb));
    let score = match algorithm {
        Algorithm::Binpack => 20.0 - total,
        Algorithm::Spread => total - 2.0,
    };
    score.clamp(0.0, BINPACK_FITNESS_MAX) / BINPACK_FITNESS_MAX
}

/// Job anti-affinity: a penalty for each allocation of the same group already on the node.
pub(crate) fn anti_affinity(collisions: u32, desired_count: u32) -> Option<f64> {
    (collisions > 0).then(|| -f64::from(collisions + 1) / f64::from(desired_count.max(1)))
}

/// The job's, group's and tasks' affinities, compiled.
#[derive(Debug, Clone, Default)]
pub(crate) struct Affinities {
    rules: Vec<(Rule, f64)>,
    weight_sum: f64,
}

impl Affinities {
    pub(crate) fn new(job: &Job, tg: &TaskGroup) -> Affinities {
        let all = job
            .affinities
            .iter()
            .chain(&tg.affinities)
            .chain(tg.tasks.iter().flat_map(|t| &t.affinities));
        let rules: Vec<(Rule, f64)> = all
            .map(|a| {
                (
                    Rule::new(&a.l_target, &a.operand, &a.r_target),
                    f64::from(a.weight.unwrap_or(50)),
                )
            })
            .collect();
        let weight_sum = rules.iter().map(|(_, w)| w.abs()).sum();
        Affinities { rules, weight_sum }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The weights of the matching affinities over all weights; `None` when nothing matches.
    pub(crate) fn score(&self, node: &Node) -> Option<f64> {
        if self.weight_sum == 0.0 {
            return None;
        }
        let total: f64 = self
            .rules
            .iter()
            .filter(|(r, _)| r.holds(node))
            .map(|(_, w)| w)
            .sum();
        (total != 0.0).then_some(total / self.weight_sum)
    }
}

/// The implicit spread target: the share no listed target claims.
const IMPLICIT_TARGET: &str = "*";

/// One `spread` block with its counts so far.
#[derive(Debug, Clone)]
pub(crate) struct SpreadInfo {
    pub(crate) counts: PropertyCounts,
    weight: f64,
    /// Value → desired allocations; empty for an even spread.
    desired: BTreeMap<String, f64>,
}

/// The job's and group's spread blocks.
#[derive(Debug, Clone, Default)]
pub(crate) struct Spreads {
    pub(crate) infos: Vec<SpreadInfo>,
    weight_sum: f64,
}

impl Spreads {
    pub(crate) fn new(job: &Job, tg: &TaskGroup) -> Spreads {
        let total = f64::from(tg.count.unwrap_or(1).max(0));
        let infos: Vec<SpreadInfo> = job
            .spreads
            .iter()
            .chain(&tg.spreads)
            .map(|s| {
                let mut desired = BTreeMap::new();
                let mut sum = 0.0;
                for t in &s.targets {
                    let want = f64::from(t.percent) / 100.0 * total;
                    desired.insert(t.value.clone(), want);
                    sum += want;
                }
                if sum > 0.0 && sum < total {
                    desired.insert(IMPLICIT_TARGET.to_string(), total - sum);
                }
                SpreadInfo {
                    counts: PropertyCounts::new(Target::parse(&s.attribute), Some(tg.name.clone())),
                    weight: f64::from(s.weight.unwrap_or(50)),
                    desired,
                }
            })
            .collect();
        let weight_sum = infos.iter().map(|i| i.weight).sum();
        Spreads { infos, weight_sum }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.infos.is_empty()
    }

    /// Nomad's `SpreadIterator` score for placing one more allocation on `node`.
    pub(crate) fn score(&self, node: &Node) -> Option<f64> {
        let mut total = 0.0;
        for info in &self.infos {
            let Some(value) = info.counts.target.resolve(node) else {
                total -= 1.0;
                continue;
            };
            if info.desired.is_empty() {
                total += even_spread_boost(info.counts.counts(), value);
                continue;
            }
            let desired = info
                .desired
                .get(value)
                .or_else(|| info.desired.get(IMPLICIT_TARGET))
                .copied()
                .filter(|d| *d > 0.0);
            let Some(desired) = desired else {
                total -= 1.0;
                continue;
            };
            let used = f64::from(info.counts.count_of(value) + 1);
            total += (desired - used) / desired * (info.weight / self.weight_sum);
        }
        (total != 0.0).then_some(total)
    }
}

/// Nomad's `evenSpreadScoreBoost`: favour values below the least-used value's count.
fn even_spread_boost(counts: &BTreeMap<String, u32>, value: &str) -> f64 {
    if counts.is_empty() {
        return 0.0;
    }
    let current = f64::from(counts.get(value).copied().unwrap_or(0));
    let min = f64::from(counts.values().copied().min().unwrap_or(0));
    let max = f64::from(counts.values().copied().max().unwrap_or(0));
    if current != min {
        if min == 0.0 {
            return -1.0;
        }
        (min - current) / min
    } else if min == max {
        -1.0
    } else if min == 0.0 {
        1.0
    } else {
        (max - current) / min
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::constraint::{Affinity, Spread, SpreadTarget};

    fn cap() -> Capacity {
        Capacity {
            cpu: 1000,
            memory_mb: 1000,
            ..Capacity::default()
        }
    }

    #[test]
    fn binpack_prefers_fuller_nodes_and_spread_emptier() {
        let empty = fitness(Algorithm::Binpack, &cap(), 100, 100);
        let full = fitness(Algorithm::Binpack, &cap(), 900, 900);
        assert!(full > empty, "{full} {empty}");
        assert!((fitness(Algorithm::Binpack, &cap(), 1000, 1000) - 1.0).abs() < 1e-9);
        assert_eq!(fitness(Algorithm::Binpack, &cap(), 0, 0), 0.0);
        let s_empty = fitness(Algorithm::Spread, &cap(), 100, 100);
        let s_full = fitness(Algorithm::Spread, &cap(), 900, 900);
        assert!(s_empty > s_full);
    }

    #[test]
    fn anti_affinity_penalises_collisions() {
        assert_eq!(anti_affinity(0, 3), None);
        assert_eq!(anti_affinity(1, 4), Some(-0.5));
    }

    #[test]
    fn affinity_weights() {
        let job = Job {
            affinities: vec![
                Affinity {
                    l_target: "${node.datacenter}".into(),
                    operand: "=".into(),
                    r_target: "dc1".into(),
                    weight: Some(100),
                },
                Affinity {
                    l_target: "${meta.rack}".into(),
                    operand: "=".into(),
                    r_target: "r1".into(),
                    weight: Some(-50),
                },
            ],
            ..Job::default()
        };
        let a = Affinities::new(&job, &TaskGroup::default());
        let mut node = Node {
            datacenter: "dc1".into(),
            ..Node::default()
        };
        assert!((a.score(&node).unwrap_or_default() - 100.0 / 150.0).abs() < 1e-9);
        node.meta.insert("rack".into(), "r1".into());
        assert!((a.score(&node).unwrap_or_default() - 50.0 / 150.0).abs() < 1e-9);
        node.datacenter = "dc2".into();
        node.meta.clear();
        assert_eq!(a.score(&node), None);
    }

    fn dc_node(dc: &str) -> Node {
        Node {
            datacenter: dc.into(),
            ..Node::default()
        }
    }

    #[test]
    fn spread_with_targets_fills_toward_percentages() {
        let tg = TaskGroup {
            name: "g".into(),
            count: Some(10),
            spreads: vec![Spread {
                attribute: "${node.datacenter}".into(),
                weight: Some(100),
                targets: vec![SpreadTarget {
                    value: "dc1".into(),
                    percent: 70,
                }],
            }],
            ..TaskGroup::default()
        };
        let mut s = Spreads::new(&Job::default(), &tg);
        let (dc1, dc2) = (dc_node("dc1"), dc_node("dc2"));
        let first = s.score(&dc1).unwrap_or_default();
        assert!((first - 6.0 / 7.0).abs() < 1e-9, "{first}");
        for _ in 0..7 {
            s.infos[0].counts.record(&dc1, "g", 1);
        }
        assert!(s.score(&dc1).unwrap_or_default() < 0.0);
        assert!(s.score(&dc2).unwrap_or_default() > 0.0);
    }

    #[test]
    fn even_spread_prefers_the_least_used_value() {
        let mut counts = BTreeMap::new();
        assert_eq!(even_spread_boost(&counts, "a"), 0.0);
        counts.insert("a".to_string(), 2);
        counts.insert("b".to_string(), 1);
        assert_eq!(even_spread_boost(&counts, "c"), 1.0);
        assert_eq!(even_spread_boost(&counts, "b"), 1.0);
        assert_eq!(even_spread_boost(&counts, "a"), -1.0);
        counts.insert("b".to_string(), 2);
        assert_eq!(even_spread_boost(&counts, "a"), -1.0);
    }
}
