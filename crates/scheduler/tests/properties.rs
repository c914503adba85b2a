//! Properties over random clusters and jobs: no plan overcommits a node; every placement meets
//! every rule; no group runs more than its count; scheduling again after applying the plan
//! changes nothing.

use model::alloc::Allocation;
use model::constraint::{Affinity, Constraint, Spread};
use model::node::{DrainStrategy, Node, NodeReservedResources};
use model::resources::{NetworkResource, Port};
use model::{Job, JobType};
use proptest::prelude::*;
use scheduler::testing::{eval, job, node, MemView};
use scheduler::{allocs_fit, schedule, Outcome, StateView};
use std::collections::BTreeMap;
use std::sync::Arc;

const NOW: i64 = 1_714_564_800_000_000_000;

#[derive(Debug, Clone)]
struct NodeSpec {
    cpu: i64,
    memory_mb: i64,
    dc: u8,
    rack: u8,
    windows: bool,
    status: u8,
    reserved_port: bool,
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        1000i64..8000,
        1024i64..16384,
        0u8..2,
        0u8..3,
        any::<bool>(),
        0u8..10,
        any::<bool>(),
    )
        .prop_map(
            |(cpu, memory_mb, dc, rack, windows, status, reserved_port)| NodeSpec {
                cpu,
                memory_mb,
                dc,
                rack,
                windows,
                status,
                reserved_port,
            },
        )
}

fn build_node(i: usize, s: &NodeSpec) -> Node {
    let mut n = node(&format!("node-{i:02}"));
    let res = n.node_resources.as_mut().expect("builder sets resources");
    res.cpu.cpu_shares = s.cpu;
    res.memory.memory_mb = s.memory_mb;
    n.datacenter = format!("dc{}", s.dc + 1);
    n.meta.insert("rack".into(), format!("r{}", s.rack + 1));
    if s.windows {
        n.attributes.insert("kernel.name".into(), "windows".into());
    }
    match s.status {
        0 => n.status = "down".into(),
        1 => n.scheduling_eligibility = "ineligible".into(),
        2 => n.drain_strategy = Some(DrainStrategy::default()),
        _ => {}
    }
    if s.reserved_port {
        n.reserved_resources = Some(NodeReservedResources {
            networks: model::node::NodeReservedNetworkResources {
                reserved_host_ports: "8080".into(),
            },
            ..NodeReservedResources::default()
        });
    }
    n
}

#[derive(Debug, Clone)]
struct JobSpec {
    kind: u8,
    groups: Vec<GroupSpec>,
    linux_only: bool,
    distinct_hosts: bool,
    spread: bool,
    dcs: u8,
}

#[derive(Debug, Clone)]
struct GroupSpec {
    count: i32,
    cpu: i32,
    memory_mb: i32,
    port: u8,
    not_rack: Option<u8>,
    affinity: bool,
}

fn group_spec() -> impl Strategy<Value = GroupSpec> {
    (
        0i32..8,
        100i32..3000,
        128i32..4096,
        0u8..3,
        proptest::option::of(0u8..3),
        any::<bool>(),
    )
        .prop_map(
            |(count, cpu, memory_mb, port, not_rack, affinity)| GroupSpec {
                count,
                cpu,
                memory_mb,
                port,
                not_rack,
                affinity,
            },
        )
}

fn job_spec() -> impl Strategy<Value = JobSpec> {
    (
        0u8..4,
        proptest::collection::vec(group_spec(), 1..3),
        any::<bool>(),
        proptest::bool::weighted(0.2),
        proptest::bool::weighted(0.2),
        0u8..3,
    )
        .prop_map(
            |(kind, groups, linux_only, distinct_hosts, spread, dcs)| JobSpec {
                kind,
                groups,
                linux_only,
                distinct_hosts,
                spread,
                dcs,
            },
        )
}

fn build_job(id: &str, s: &JobSpec) -> Job {
    let kind = ["service", "batch", "system", "sysbatch"][usize::from(s.kind)];
    let mut j = job(id, kind, 1);
    j.datacenters = match s.dcs {
        0 => vec!["*".into()],
        1 => vec!["dc1".into()],
        _ => vec!["dc*".into()],
    };
    if s.linux_only {
        j.constraints
            .push(Constraint::new("${attr.kernel.name}", "=", "linux"));
    }
    if s.distinct_hosts {
        j.constraints
            .push(Constraint::new("", "distinct_hosts", ""));
    }
    if s.spread {
        j.spreads.push(Spread {
            attribute: "${node.datacenter}".into(),
            weight: Some(50),
            targets: Vec::new(),
        });
    }
    let template = j.task_groups[0].clone();
    j.task_groups = s
        .groups
        .iter()
        .enumerate()
        .map(|(i, g)| build_group(&template, i, g, s.kind >= 2))
        .collect();
    j
}

fn build_group(
    template: &model::TaskGroup,
    i: usize,
    g: &GroupSpec,
    system: bool,
) -> model::TaskGroup {
    let mut tg = template.clone();
    tg.name = format!("g{i}");
    tg.count = Some(if system { 1 } else { g.count });
    let res = tg.tasks[0]
        .resources
        .as_mut()
        .expect("builder sets resources");
    res.cpu = Some(g.cpu);
    res.memory_mb = Some(g.memory_mb);
    if g.port > 0 {
        let port = Port {
            label: "http".into(),
            value: if g.port == 1 { 8080 } else { 0 },
            host_network: "default".into(),
            ..Port::default()
        };
        let mut net = NetworkResource {
            mode: "host".into(),
            ..NetworkResource::default()
        };
        if g.port == 1 {
            net.reserved_ports.push(port);
        } else {
            net.dynamic_ports.push(port);
        }
        tg.networks.push(net);
    }
    if let Some(rack) = g.not_rack {
        tg.constraints.push(Constraint::new(
            "${meta.rack}",
            "!=",
            &format!("r{}", rack + 1),
        ));
    }
    if g.affinity {
        tg.affinities.push(Affinity {
            l_target: "${meta.rack}".into(),
            operand: "=".into(),
            r_target: "r2".into(),
            weight: Some(40),
        });
    }
    tg
}

fn run(view: &MemView, j: &Job, seed: u64) -> Outcome {
    schedule(view, &eval(j), NOW, seed).expect("schedules")
}

/// Every node's live allocations fit on it.
fn assert_no_overcommit(view: &MemView) -> Result<(), TestCaseError> {
    let mut by_node: BTreeMap<String, Vec<Arc<Allocation>>> = BTreeMap::new();
    for a in view.all_allocs().into_iter().filter(|a| !a.is_terminal()) {
        by_node.entry(a.node_id.clone()).or_default().push(a);
    }
    for (node_id, allocs) in by_node {
        let node = view.node(&node_id).expect("allocs are on known nodes");
        let refs: Vec<&Allocation> = allocs.iter().map(|a| a.as_ref()).collect();
        if let Err(e) = allocs_fit(&node, &refs) {
            return Err(TestCaseError::fail(format!("{node_id} overcommitted: {e}")));
        }
    }
    Ok(())
}

/// An independent reading of the rules the generator uses.
fn node_meets_job(node: &Node, j: &Job, tg: &model::TaskGroup) -> bool {
    let dc_ok = j.datacenters.iter().any(|dc| match dc.as_str() {
        "*" => true,
        "dc*" => node.datacenter.starts_with("dc"),
        other => other == node.datacenter,
    });
    let linux = node.attributes.get("kernel.name").map(String::as_str) == Some("linux");
    let rules_ok = j
        .constraints
        .iter()
        .chain(&tg.constraints)
        .all(|c| match c.operand.as_str() {
            "=" => linux,
            "!=" => node.meta.get("rack") != Some(&c.r_target),
            _ => true,
        });
    dc_ok && rules_ok
}

/// The plan's placements meet every rule and the job's counts hold.
fn assert_placements(view: &MemView, o: &Outcome, j: &Job) -> Result<(), TestCaseError> {
    for a in o.plan.node_allocation.values().flatten() {
        if view.alloc(&a.id).is_some() {
            continue;
        }
        let node = view.node(&a.node_id).expect("placed on a known node");
        let tg = j
            .task_groups
            .iter()
            .find(|g| g.name == a.task_group)
            .expect("known group");
        prop_assert!(
            node.is_ready(),
            "placed on a node that is not ready: {}",
            node.id
        );
        prop_assert!(
            node_meets_job(&node, j, tg),
            "{} breaks a rule on {}",
            a.name,
            node.id
        );
    }
    Ok(())
}

fn assert_counts(view: &MemView, j: &Job) -> Result<(), TestCaseError> {
    let live: Vec<Arc<Allocation>> = view
        .allocs_by_job("default", &j.id)
        .into_iter()
        .filter(|a| !a.is_terminal())
        .collect();
    let system = matches!(j.job_type, Some(JobType::System | JobType::Sysbatch));
    for tg in &j.task_groups {
        let mine: Vec<&Arc<Allocation>> = live.iter().filter(|a| a.task_group == tg.name).collect();
        if system {
            let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
            for a in &mine {
                *per_node.entry(&a.node_id).or_default() += 1;
            }
            prop_assert!(
                per_node.values().all(|n| *n == 1),
                "two of {} on a node",
                tg.name
            );
        } else {
            let count = usize::try_from(tg.count.unwrap_or(1)).unwrap_or(0);
            prop_assert!(
                mine.len() <= count,
                "{}: {} live > count {count}",
                tg.name,
                mine.len()
            );
        }
    }
    let distinct = j.constraints.iter().any(|c| c.operand == "distinct_hosts");
    if distinct {
        let mut nodes: Vec<&str> = live.iter().map(|a| a.node_id.as_str()).collect();
        nodes.sort_unstable();
        let before = nodes.len();
        nodes.dedup();
        prop_assert_eq!(before, nodes.len(), "distinct_hosts broken");
    }
    Ok(())
}

fn assert_settled(view: &MemView, j: &Job, seed: u64) -> Result<(), TestCaseError> {
    let again = run(view, j, seed.wrapping_add(1));
    let placed: usize = again.plan.node_allocation.values().map(Vec::len).sum();
    let stopped: usize = again.plan.node_update.values().map(Vec::len).sum();
    prop_assert_eq!(
        (placed, stopped),
        (0, 0),
        "second pass changed things: {:?}",
        again.plan
    );
    Ok(())
}

/// Schedules, checks the plan, applies it, checks the state, and checks a second pass is a no-op.
fn step(view: &mut MemView, j: &Arc<Job>, seed: u64) -> Result<(), TestCaseError> {
    let o = run(view, j, seed);
    assert_placements(view, &o, j)?;
    view.apply(&o);
    assert_no_overcommit(view)?;
    assert_counts(view, j)?;
    assert_settled(view, j, seed)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn plans_never_overcommit_break_rules_or_exceed_counts(
        nodes in proptest::collection::vec(node_spec(), 1..12),
        a in job_spec(),
        b in job_spec(),
        seed in any::<u64>(),
        scale in 0i32..6,
    ) {
        let mut view = MemView::new();
        for (i, n) in nodes.iter().enumerate() {
            view.upsert_node(build_node(i, n));
        }
        let ja = view.upsert_job(build_job("alpha", &a));
        step(&mut view, &ja, seed)?;
        let jb = view.upsert_job(build_job("beta", &b));
        step(&mut view, &jb, seed ^ 1)?;
        let mut changed = build_job("alpha", &a);
        for g in &mut changed.task_groups {
            if a.kind < 2 {
                g.count = Some(scale);
            }
            g.tasks[0].config.insert("image".into(), serde_json::json!("app:2"));
        }
        let ja2 = view.upsert_job(changed);
        step(&mut view, &ja2, seed ^ 2)?;
        view.update_node("node-00", |n| n.status = "down".into());
        step(&mut view, &ja2, seed ^ 3)?;
    }

    #[test]
    fn the_same_inputs_give_the_same_plan(
        nodes in proptest::collection::vec(node_spec(), 1..8),
        a in job_spec(),
        seed in any::<u64>(),
    ) {
        let mut view = MemView::new();
        for (i, n) in nodes.iter().enumerate() {
            view.upsert_node(build_node(i, n));
        }
        let j = view.upsert_job(build_job("alpha", &a));
        prop_assert_eq!(run(&view, &j, seed), run(&view, &j, seed));
    }
}
