//! Scheduler scenarios: a cluster, a job, and what the scheduler does, summarised as text through
//! one helper ([`check`]). Each scenario pins Nomad behaviour the scheduler must keep.

use model::alloc::{Allocation, ClientStatus, TaskState};
use model::constraint::{Affinity, Constraint, Spread, SpreadTarget};
use model::deployment::DeploymentState;
use model::eval::Evaluation;
use model::group::{UpdateStrategy, VolumeRequest};
use model::node::{ClientHostVolumeConfig, DrainStrategy, Node};
use model::resources::{NetworkResource, Port};
use model::Job;
use scheduler::testing::{eval, job, node, MemView};
use scheduler::{schedule, Outcome, StateView};
use std::collections::BTreeMap;

const NOW: i64 = 1_714_564_800_000_000_000;
const SEC: i64 = 1_000_000_000;
const SEED: u64 = 42;

/// Runs `ev` against `view` and compares the summary with `expect` (line order ignored).
fn check(view: &MemView, ev: &Evaluation, expect: &str) -> Outcome {
    let outcome = schedule(view, ev, NOW, SEED).expect("schedules");
    let got = summary(view, &outcome);
    let mut want: Vec<&str> = expect
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    want.sort_unstable();
    assert_eq!(got, want.join("\n"), "\n--- got ---\n{got}\n");
    outcome
}

/// One line per change: `place NAME on NODE`, `update NAME on NODE`, `stop NAME on NODE: WHY`,
/// `failed GROUP: …`, `eval …`, `new eval …`, `deployment …`; sorted.
fn summary(view: &MemView, o: &Outcome) -> String {
    let mut lines = Vec::new();
    for a in o.plan.node_update.values().flatten() {
        let lost = if a.client_status == "lost" {
            " [lost]"
        } else {
            ""
        };
        lines.push(format!(
            "stop {} on {}: {}{lost}",
            a.name, a.node_id, a.desired_description
        ));
    }
    for a in o.plan.node_allocation.values().flatten() {
        lines.push(placement_line(view, a));
    }
    for (tg, m) in &o.eval.failed_tg_allocs {
        lines.push(format!(
            "failed {tg}: evaluated {}, filtered {} {:?}, exhausted {} {:?}, coalesced {}",
            m.nodes_evaluated,
            m.nodes_filtered,
            m.constraint_filtered,
            m.nodes_exhausted,
            m.dimension_exhausted,
            m.coalesced_failures
        ));
    }
    let queued: Vec<String> = o
        .eval
        .queued_allocations
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(tg, n)| format!(" queued {tg}={n}"))
        .collect();
    let blocked = if o.eval.blocked_eval.is_empty() {
        ""
    } else {
        " +blocked"
    };
    lines.push(format!(
        "eval {}{}{blocked}",
        o.eval.status,
        queued.concat()
    ));
    for e in &o.new_evals {
        let wait = e
            .wait_until
            .as_deref()
            .map(|w| format!(" until {w}"))
            .unwrap_or_default();
        lines.push(format!("new eval {} {}{wait}", e.status, e.triggered_by));
    }
    if let Some(d) = &o.plan.deployment {
        lines.push(deployment_line(d));
    }
    for u in &o.plan.deployment_updates {
        lines.push(format!(
            "deployment update {}: {}",
            u.status, u.status_description
        ));
    }
    lines.sort();
    lines.join("\n")
}

fn placement_line(view: &MemView, a: &Allocation) -> String {
    if let Some(old) = view.alloc(&a.id) {
        if !a.followup_eval_id.is_empty() && old.followup_eval_id.is_empty() {
            return format!("mark {} for follow-up", a.name);
        }
        return format!("update {} on {}", a.name, a.node_id);
    }
    let mut line = format!("place {} on {}", a.name, a.node_id);
    if a.deployment_status.as_ref().is_some_and(|s| s.canary) {
        line.push_str(" (canary)");
    }
    if let Some(prev) = view.alloc(&a.previous_allocation) {
        line.push_str(&format!(" replacing {} on {}", prev.name, prev.node_id));
    }
    let ports: Vec<String> = a
        .allocated_resources
        .iter()
        .flat_map(|r| &r.shared.ports)
        .map(|p| format!("{}={}", p.label, p.value))
        .collect();
    if !ports.is_empty() {
        line.push_str(&format!(" ports {}", ports.join(",")));
    }
    line
}

fn deployment_line(d: &model::deployment::Deployment) -> String {
    let groups: Vec<String> = d
        .task_groups
        .iter()
        .map(|(tg, s): (&String, &DeploymentState)| {
            format!(
                "{tg} total={} canaries={} placed_canaries={}",
                s.desired_total,
                s.desired_canaries,
                s.placed_canaries.len()
            )
        })
        .collect();
    format!(
        "deployment {} {:?}: {}",
        d.status,
        d.status_description,
        groups.join("; ")
    )
}

/// A cluster of nodes `n1..=n{count}` built by [`node`].
fn cluster(count: usize) -> MemView {
    let mut v = MemView::new();
    for i in 1..=count {
        v.upsert_node(node(&format!("n{i}")));
    }
    v
}

/// Schedules `j` on `view`, applies the outcome, and returns the stored job.
fn run_and_apply(view: &mut MemView, j: Job) -> std::sync::Arc<Job> {
    let stored = view.upsert_job(j);
    let outcome = schedule(view, &eval(&stored), NOW, SEED).expect("schedules");
    view.apply(&outcome);
    stored
}

fn live(view: &MemView) -> Vec<std::sync::Arc<Allocation>> {
    view.all_allocs()
        .into_iter()
        .filter(|a| !a.is_terminal())
        .collect()
}

#[test]
fn places_the_count_on_nodes_that_pass_constraints() {
    let mut v = cluster(3);
    v.update_node("n3", |n| {
        n.attributes.insert("kernel.name".into(), "windows".into());
    });
    let mut j = job("web", "service", 4);
    j.constraints
        .push(Constraint::new("${attr.kernel.name}", "=", "linux"));
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"place web.web[0] on n1
           place web.web[1] on n2
           place web.web[2] on n1
           place web.web[3] on n2
           deployment running "Deployment is running": web total=4 canaries=0 placed_canaries=0
           eval complete"#,
    );
}

#[test]
fn datacenters_glob_and_pools_narrow_the_candidates() {
    let mut v = cluster(4);
    v.update_node("n2", |n| n.datacenter = "dc2".into());
    v.update_node("n3", |n| n.datacenter = "eu-west".into());
    v.update_node("n4", |n| n.node_pool = "gpu".into());
    let mut j = job("web", "service", 2);
    j.datacenters = vec!["dc*".into()];
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"place web.web[0] on n2
           place web.web[1] on n1
           deployment running "Deployment is running": web total=2 canaries=0 placed_canaries=0
           eval complete"#,
    );
}

#[test]
fn memory_exhaustion_is_explained_and_blocks() {
    let mut v = cluster(2);
    let mut j = job("web", "service", 5);
    j.task_groups[0].tasks[0]
        .resources
        .as_mut()
        .expect("has resources")
        .memory_mb = Some(4000);
    let j = v.upsert_job(j);
    let o = check(
        &v,
        &eval(&j),
        r#"place web.web[0] on n2
           place web.web[1] on n1
           place web.web[2] on n2
           place web.web[3] on n1
           deployment running "Deployment is running": web total=5 canaries=0 placed_canaries=0
           failed web: evaluated 2, filtered 0 {}, exhausted 2 {"memory": 2}, coalesced 0
           eval complete queued web=1 +blocked
           new eval blocked queued-allocs"#,
    );
    let blocked = &o.new_evals[0];
    assert_eq!(blocked.previous_eval, o.eval.id);
    assert_eq!(
        blocked.status_description,
        "created to place remaining allocations"
    );
    assert_eq!(o.eval.blocked_eval, blocked.id);
}

#[test]
fn constraint_failures_name_the_constraint_as_nomad_prints_it() {
    let mut v = cluster(3);
    let mut j = job("web", "service", 3);
    j.task_groups[0]
        .constraints
        .push(Constraint::new("${meta.rack}", "=", "r9"));
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"deployment running "Deployment is running": web total=3 canaries=0 placed_canaries=0
           failed web: evaluated 3, filtered 3 {"${meta.rack} = r9": 3}, exhausted 0 {}, coalesced 2
           eval complete queued web=3 +blocked
           new eval blocked queued-allocs"#,
    );
}

#[test]
fn a_blocked_evaluation_that_still_cannot_place_stays_blocked() {
    let mut v = cluster(1);
    let mut j = job("web", "service", 1);
    j.task_groups[0].tasks[0].driver = "qemu".into();
    let j = v.upsert_job(j);
    let mut ev = eval(&j);
    ev.status = "blocked".into();
    check(
        &v,
        &ev,
        r#"deployment running "Deployment is running": web total=1 canaries=0 placed_canaries=0
           failed web: evaluated 1, filtered 1 {"missing drivers": 1}, exhausted 0 {}, coalesced 0
           eval blocked queued web=1"#,
    );
}

fn with_port(mut j: Job, label: &str, static_port: i32) -> Job {
    let port = Port {
        label: label.into(),
        value: static_port,
        host_network: "default".into(),
        ..Port::default()
    };
    let mut net = NetworkResource {
        mode: "host".into(),
        ..NetworkResource::default()
    };
    if static_port > 0 {
        net.reserved_ports.push(port);
    } else {
        net.dynamic_ports.push(port);
    }
    j.task_groups[0].networks.push(net);
    j
}

#[test]
fn static_ports_never_collide() {
    let mut v = cluster(2);
    let j = v.upsert_job(with_port(job("web", "service", 3), "http", 8080));
    check(
        &v,
        &eval(&j),
        r#"deployment running "Deployment is running": web total=3 canaries=0 placed_canaries=0
           place web.web[0] on n2 ports http=8080
           place web.web[1] on n1 ports http=8080
           failed web: evaluated 2, filtered 0 {}, exhausted 2 {"network: reserved port collision http=8080": 2}, coalesced 0
           eval complete queued web=1 +blocked
           new eval blocked queued-allocs"#,
    );
}

#[test]
fn dynamic_ports_come_from_the_dynamic_range() {
    let mut v = cluster(1);
    let j = v.upsert_job(with_port(job("web", "service", 3), "http", 0));
    let o = schedule(&v, &eval(&j), NOW, SEED).expect("schedules");
    let mut ports: Vec<i32> = o
        .plan
        .node_allocation
        .values()
        .flatten()
        .flat_map(|a| a.allocated_resources.iter().flat_map(|r| &r.shared.ports))
        .map(|p| p.value)
        .collect();
    assert_eq!(ports.len(), 3);
    assert!(
        ports.iter().all(|p| (20_000..=32_000).contains(p)),
        "{ports:?}"
    );
    ports.dedup();
    assert_eq!(ports.len(), 3, "distinct ports on one node");
}

#[test]
fn count_down_stops_the_highest_indexes() {
    let mut v = cluster(2);
    run_and_apply(&mut v, job("web", "service", 5));
    let j = v.upsert_job(job("web", "service", 2));
    check(
        &v,
        &eval(&j),
        r#"stop web.web[2] on n2: alloc not needed due to job update
           stop web.web[3] on n1: alloc not needed due to job update
           stop web.web[4] on n2: alloc not needed due to job update
           update web.web[0] on n2
           update web.web[1] on n1
           deployment running "Deployment is running": web total=2 canaries=0 placed_canaries=0
           deployment update cancelled: Cancelled due to newer version of job
           eval complete"#,
    );
}

#[test]
fn count_up_fills_the_lowest_free_indexes() {
    let mut v = cluster(2);
    run_and_apply(&mut v, job("web", "service", 3));
    let victim = live(&v)
        .into_iter()
        .find(|a| a.name == "web.web[1]")
        .expect("web[1] placed");
    v.update_alloc(&victim.id, |a| {
        a.desired_status = "stop".into();
        a.client_status = "complete".into();
    });
    let j = v.upsert_job(job("web", "service", 4));
    check(
        &v,
        &eval(&j),
        r#"place web.web[1] on n1
           place web.web[3] on n1
           update web.web[0] on n2
           update web.web[2] on n2
           deployment running "Deployment is running": web total=4 canaries=0 placed_canaries=0
           deployment update cancelled: Cancelled due to newer version of job
           eval complete"#,
    );
}

#[test]
fn changing_the_task_config_is_a_rolling_destructive_update() {
    let mut v = cluster(2);
    run_and_apply(&mut v, job("web", "service", 3));
    let mut j = job("web", "service", 3);
    j.task_groups[0].tasks[0]
        .config
        .insert("image".into(), serde_json::json!("app:2"));
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"deployment running "Deployment is running": web total=3 canaries=0 placed_canaries=0
           deployment update cancelled: Cancelled due to newer version of job
           eval complete
           place web.web[0] on n2 replacing web.web[0] on n2
           stop web.web[0] on n2: alloc is being updated due to job update"#,
    );
}

#[test]
fn canaries_come_first_when_the_update_asks_for_them() {
    let mut v = cluster(2);
    let mut j = job("web", "service", 3);
    j.task_groups[0].update = Some(UpdateStrategy {
        canary: Some(1),
        max_parallel: Some(2),
        ..UpdateStrategy::default_service()
    });
    run_and_apply(&mut v, j.clone());
    j.task_groups[0].tasks[0]
        .config
        .insert("image".into(), serde_json::json!("app:2"));
    let stored = v.upsert_job(j);
    let o = check(
        &v,
        &eval(&stored),
        r#"deployment running "Deployment is running but requires manual promotion": web total=3 canaries=1 placed_canaries=1
           deployment update cancelled: Cancelled due to newer version of job
           eval complete
           place web.web[0] on n1 (canary)"#,
    );
    v.apply(&o);
    check(&v, &eval(&stored), "eval complete");
}

#[test]
fn allocations_on_a_down_node_are_lost_and_replaced() {
    let mut v = cluster(2);
    run_and_apply(&mut v, job("web", "service", 2));
    v.update_node("n1", |n| n.status = "down".into());
    let j = v.job("default", "web").expect("stored");
    check(
        &v,
        &eval(&j),
        "eval complete
         place web.web[1] on n2 replacing web.web[1] on n1
         stop web.web[1] on n1: alloc is lost since its node is down [lost]",
    );
}

#[test]
fn allocations_marked_for_migration_leave_a_draining_node() {
    let mut v = cluster(2);
    run_and_apply(&mut v, job("web", "service", 2));
    v.update_node("n1", |n| n.drain_strategy = Some(DrainStrategy::default()));
    for a in live(&v).into_iter().filter(|a| a.node_id == "n1") {
        v.update_alloc(&a.id, |a| a.desired_transition.migrate = Some(true));
    }
    let j = v.job("default", "web").expect("stored");
    check(
        &v,
        &eval(&j),
        "eval complete
         place web.web[1] on n2 replacing web.web[1] on n1
         stop web.web[1] on n1: alloc is being migrated",
    );
}

#[test]
fn an_alloc_stopped_by_a_user_migrates_from_a_healthy_node() {
    // `alloc stop` marks one allocation for migration without draining its node (Nomad's
    // filterByTainted migrates any non-terminal allocation so marked).
    let mut v = cluster(1);
    run_and_apply(&mut v, job("web", "service", 1));
    let a = live(&v).into_iter().next().expect("placed");
    v.update_alloc(&a.id, |a| a.desired_transition.migrate = Some(true));
    let j = v.job("default", "web").expect("stored");
    check(
        &v,
        &eval(&j),
        "eval complete
         place web.web[0] on n1 replacing web.web[0] on n1
         stop web.web[0] on n1: alloc is being migrated",
    );
}

fn fail(v: &mut MemView, name: &str, finished_ago_secs: i64) {
    let a = live(v)
        .into_iter()
        .find(|a| a.name == name)
        .expect("placed");
    let finished = scheduler_time(NOW - finished_ago_secs * SEC);
    v.update_alloc(&a.id, |a| {
        a.client_status = ClientStatus::Failed;
        a.task_states.insert(
            "app".into(),
            TaskState {
                state: "dead".into(),
                failed: true,
                finished_at: Some(finished),
                ..TaskState::default()
            },
        );
    });
}

/// RFC 3339 of Unix nanoseconds (whole seconds here).
fn scheduler_time(nanos: i64) -> String {
    let secs = nanos / SEC;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    assert_eq!(days, 19_844, "tests stay on 2024-05-01");
    format!(
        "2024-05-01T{:02}:{:02}:{:02}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

#[test]
fn failed_allocations_are_rescheduled_after_their_delay() {
    let mut v = cluster(2);
    run_and_apply(&mut v, job("web", "service", 2));
    fail(&mut v, "web.web[0]", 60);
    fail(&mut v, "web.web[1]", 10);
    let j = v.job("default", "web").expect("stored");
    let o = check(
        &v,
        &eval(&j),
        "eval complete
         mark web.web[1] for follow-up
         new eval pending alloc-failure until 2024-05-01T12:00:20Z
         place web.web[0] on n1 replacing web.web[0] on n2
         stop web.web[0] on n2: alloc was rescheduled because it failed",
    );
    let placed = o
        .plan
        .node_allocation
        .values()
        .flatten()
        .find(|a| a.name == "web.web[0]" && !a.previous_allocation.is_empty());
    let tracker = placed
        .and_then(|a| a.reschedule_tracker.as_ref())
        .expect("tracker");
    assert_eq!(tracker.events.len(), 1);
    assert_eq!(tracker.events[0].delay.0, 30 * SEC);
    v.apply(&o);
    check(&v, &eval(&j), "eval complete");
}

#[test]
fn completed_batch_allocations_are_not_replaced() {
    let mut v = cluster(1);
    run_and_apply(&mut v, job("etl", "batch", 2));
    for a in live(&v) {
        v.update_alloc(&a.id, |a| a.client_status = "complete".into());
    }
    let j = v.job("default", "etl").expect("stored");
    check(&v, &eval(&j), "eval complete");
}

#[test]
fn stopping_the_job_stops_everything() {
    let mut v = cluster(2);
    run_and_apply(&mut v, job("web", "service", 2));
    let mut j = job("web", "service", 2);
    j.stop = true;
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        "deployment update cancelled: Cancelled because job is stopped
         eval complete
         stop web.web[0] on n2: alloc not needed due to job update
         stop web.web[1] on n1: alloc not needed due to job update",
    );
}

#[test]
fn distinct_hosts_keeps_one_per_node() {
    let mut v = cluster(2);
    let mut j = job("web", "service", 3);
    j.constraints
        .push(Constraint::new("", "distinct_hosts", "true"));
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"deployment running "Deployment is running": web total=3 canaries=0 placed_canaries=0
           failed web: evaluated 2, filtered 2 {"distinct_hosts": 2}, exhausted 0 {}, coalesced 0
           eval complete queued web=1 +blocked
           new eval blocked queued-allocs
           place web.web[0] on n2
           place web.web[1] on n1"#,
    );
}

#[test]
fn distinct_property_limits_each_value() {
    let mut v = cluster(4);
    for (id, rack) in [("n1", "r1"), ("n2", "r1"), ("n3", "r2"), ("n4", "r2")] {
        v.update_node(id, |n| {
            n.meta.insert("rack".into(), rack.into());
        });
    }
    let mut j = job("web", "service", 3);
    j.task_groups[0]
        .constraints
        .push(Constraint::new("${meta.rack}", "distinct_property", ""));
    let j = v.upsert_job(j);
    let o = schedule(&v, &eval(&j), NOW, SEED).expect("schedules");
    let placed: Vec<&Allocation> = o.plan.node_allocation.values().flatten().collect();
    assert_eq!(placed.len(), 2);
    let racks: Vec<&str> = placed
        .iter()
        .map(|a| {
            if matches!(a.node_id.as_str(), "n1" | "n2") {
                "r1"
            } else {
                "r2"
            }
        })
        .collect();
    assert_ne!(racks[0], racks[1], "one per rack");
    let failed = &o.eval.failed_tg_allocs["web"];
    assert_eq!(
        failed.constraint_filtered.get("distinct_property"),
        Some(&4)
    );
}

#[test]
fn spread_targets_split_by_percentage() {
    let mut v = cluster(6);
    for id in ["n4", "n5", "n6"] {
        v.update_node(id, |n| n.datacenter = "dc2".into());
    }
    let mut j = job("web", "service", 10);
    j.datacenters = vec!["dc1".into(), "dc2".into()];
    j.spreads.push(Spread {
        attribute: "${node.datacenter}".into(),
        weight: Some(100),
        targets: vec![
            SpreadTarget {
                value: "dc1".into(),
                percent: 70,
            },
            SpreadTarget {
                value: "dc2".into(),
                percent: 30,
            },
        ],
    });
    let j = v.upsert_job(j);
    let o = schedule(&v, &eval(&j), NOW, SEED).expect("schedules");
    let mut per_dc: BTreeMap<&str, usize> = BTreeMap::new();
    for a in o.plan.node_allocation.values().flatten() {
        let dc = if matches!(a.node_id.as_str(), "n4" | "n5" | "n6") {
            "dc2"
        } else {
            "dc1"
        };
        *per_dc.entry(dc).or_default() += 1;
    }
    assert_eq!(per_dc, BTreeMap::from([("dc1", 7), ("dc2", 3)]));
}

#[test]
fn affinities_pull_toward_matching_nodes() {
    let mut v = cluster(8);
    v.update_node("n5", |n| n.node_class = "fast".into());
    let mut j = job("web", "service", 1);
    j.affinities.push(Affinity {
        l_target: "${node.class}".into(),
        operand: "=".into(),
        r_target: "fast".into(),
        weight: Some(100),
    });
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"deployment running "Deployment is running": web total=1 canaries=0 placed_canaries=0
           eval complete
           place web.web[0] on n5"#,
    );
}

#[test]
fn host_volumes_must_be_offered() {
    let mut v = cluster(3);
    v.update_node("n2", |n: &mut Node| {
        n.host_volumes.insert(
            "data".into(),
            ClientHostVolumeConfig {
                name: "data".into(),
                path: "/srv/data".into(),
                read_only: false,
                id: String::new(),
            },
        );
    });
    let mut j = job("db", "service", 1);
    j.task_groups[0].volumes.insert(
        "data".into(),
        VolumeRequest {
            name: "data".into(),
            volume_type: "host".into(),
            source: "data".into(),
            ..VolumeRequest::default()
        },
    );
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"deployment running "Deployment is running": web total=1 canaries=0 placed_canaries=0
           eval complete
           place db.web[0] on n2"#,
    );
}

#[test]
fn system_jobs_run_once_on_every_feasible_node() {
    let mut v = cluster(3);
    v.update_node("n3", |n| {
        n.attributes.insert("kernel.name".into(), "darwin".into());
    });
    let mut j = job("agent", "system", 1);
    j.constraints
        .push(Constraint::new("${attr.kernel.name}", "=", "linux"));
    let j = run_and_apply(&mut v, j);
    assert_eq!(live(&v).len(), 2);
    check(&v, &eval(&j), "eval complete");
    v.upsert_node(node("n4"));
    check(&v, &eval(&j), "eval complete\nplace agent.web[0] on n4");
    v.update_node("n1", |n| {
        n.attributes.insert("kernel.name".into(), "darwin".into());
    });
    check(
        &v,
        &eval(&j),
        "eval complete
         place agent.web[0] on n4
         stop agent.web[0] on n1: alloc not needed due to job update",
    );
}

#[test]
fn sysbatch_does_not_rerun_finished_work() {
    let mut v = cluster(2);
    let j = run_and_apply(&mut v, job("gc", "sysbatch", 1));
    for a in live(&v) {
        v.update_alloc(&a.id, |a| a.client_status = "complete".into());
    }
    check(&v, &eval(&j), "eval complete");
}

#[test]
fn system_jobs_report_nodes_short_of_resources() {
    let mut v = cluster(2);
    let mut j = job("agent", "system", 1);
    j.task_groups[0].tasks[0]
        .resources
        .as_mut()
        .expect("has")
        .cpu = Some(5000);
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"eval complete queued web=2
           failed web: evaluated 1, filtered 0 {}, exhausted 1 {"cpu": 1}, coalesced 1"#,
    );
}

#[test]
fn the_same_inputs_give_the_same_outcome() {
    let mut v = cluster(20);
    let j = v.upsert_job(with_port(job("web", "service", 15), "http", 0));
    let a = schedule(&v, &eval(&j), NOW, 7).expect("schedules");
    let b = schedule(&v, &eval(&j), NOW, 7).expect("schedules");
    assert_eq!(a, b);
    let c = schedule(&v, &eval(&j), NOW, 8).expect("schedules");
    assert_ne!(
        a.plan.node_allocation, c.plan.node_allocation,
        "the seed matters"
    );
}

#[test]
fn unknown_types_and_evaluations_without_jobs_are_errors() {
    let v = cluster(1);
    let mut ev = eval(&job("web", "service", 1));
    ev.eval_type = "_core".into();
    assert!(matches!(
        schedule(&v, &ev, NOW, 1),
        Err(scheduler::SchedulerError::UnknownType(t)) if t == "_core"
    ));
    ev.eval_type = "service".into();
    ev.job_id.clear();
    assert!(matches!(
        schedule(&v, &ev, NOW, 1),
        Err(scheduler::SchedulerError::Invalid(_))
    ));
}

#[test]
fn running_allocations_are_left_alone() {
    let mut v = cluster(2);
    let j = run_and_apply(&mut v, job("web", "service", 2));
    for a in live(&v) {
        v.update_alloc(&a.id, |a| a.client_status = ClientStatus::Running);
    }
    check(&v, &eval(&j), "eval complete");
}

#[test]
fn promoted_canaries_replace_the_old_allocations() {
    let mut v = cluster(2);
    let mut j = job("web", "service", 2);
    j.task_groups[0].update = Some(UpdateStrategy {
        canary: Some(1),
        max_parallel: Some(1),
        ..UpdateStrategy::default_service()
    });
    run_and_apply(&mut v, j.clone());
    j.task_groups[0].tasks[0]
        .config
        .insert("image".into(), serde_json::json!("app:2"));
    let stored = run_and_apply(&mut v, j);
    let d = v.latest_deployment("default", "web").expect("deployment");
    let mut promoted = (*d).clone();
    let state = promoted.task_groups.get_mut("web").expect("group state");
    state.promoted = true;
    v.upsert_deployment(promoted);
    let canary = live(&v)
        .into_iter()
        .find(|a| a.deployment_status.as_ref().is_some_and(|s| s.canary))
        .expect("canary placed");
    v.update_alloc(&canary.id, |a| {
        a.client_status = ClientStatus::Running;
        if let Some(s) = a.deployment_status.as_mut() {
            s.healthy = Some(true);
        }
    });
    check(
        &v,
        &eval(&stored),
        "eval complete
         place web.web[1] on n2 replacing web.web[1] on n1
         stop web.web[0] on n2: alloc not needed due to job update
         stop web.web[1] on n1: alloc is being updated due to job update",
    );
}

#[test]
fn a_deregistered_job_loses_every_allocation() {
    let mut v = cluster(1);
    let j = run_and_apply(&mut v, job("web", "service", 1));
    let mut gone = MemView::new();
    gone.upsert_node(node("n1"));
    for a in v.all_allocs() {
        gone.upsert_alloc((*a).clone());
    }
    check(
        &gone,
        &eval(&j),
        "eval complete
         stop web.web[0] on n1: alloc not needed due to job update",
    );
}

#[test]
fn system_updates_roll_by_max_parallel() {
    let mut v = cluster(3);
    let mut j = job("agent", "system", 1);
    j.task_groups[0].update = Some(UpdateStrategy {
        max_parallel: Some(1),
        ..UpdateStrategy::default_service()
    });
    run_and_apply(&mut v, j.clone());
    j.task_groups[0].tasks[0]
        .config
        .insert("image".into(), serde_json::json!("agent:2"));
    let stored = v.upsert_job(j);
    check(
        &v,
        &eval(&stored),
        "eval complete
         place agent.web[0] on n1 replacing agent.web[0] on n1
         stop agent.web[0] on n1: alloc is being updated due to job update",
    );
}

#[test]
fn system_allocations_on_a_down_node_are_lost_not_replaced_elsewhere() {
    let mut v = cluster(2);
    let j = run_and_apply(&mut v, job("agent", "system", 1));
    v.update_node("n2", |n| n.status = "down".into());
    check(
        &v,
        &eval(&j),
        "eval complete
         stop agent.web[0] on n2: alloc is lost since its node is down [lost]",
    );
}

#[test]
fn a_system_alloc_stopped_by_a_user_is_placed_again_by_the_next_evaluation() {
    // Nomad's system scheduler stops an allocation marked for migration on a healthy node and
    // places the group there again only in a later evaluation (`job restart -reschedule` forces
    // one); the new allocation follows the stopped one.
    let mut v = cluster(2);
    let j = run_and_apply(&mut v, job("agent", "system", 1));
    let a = live(&v)
        .into_iter()
        .find(|a| a.node_id == "n1")
        .expect("placed");
    v.update_alloc(&a.id, |a| a.desired_transition.migrate = Some(true));
    let o = check(
        &v,
        &eval(&j),
        "eval complete
         stop agent.web[0] on n1: alloc is being migrated",
    );
    v.apply(&o);
    check(
        &v,
        &eval(&j),
        "eval complete
         place agent.web[0] on n1 replacing agent.web[0] on n1",
    );
}

#[test]
fn batch_failures_use_up_their_attempts() {
    let mut v = cluster(2);
    let j = run_and_apply(&mut v, job("etl", "batch", 1));
    fail(&mut v, "etl.web[0]", 10);
    let o = check(
        &v,
        &eval(&j),
        "eval complete
         place etl.web[0] on n1 replacing etl.web[0] on n2
         stop etl.web[0] on n2: alloc was rescheduled because it failed",
    );
    v.apply(&o);
    let replacement = live(&v).into_iter().next().expect("replacement");
    fail(&mut v, &replacement.name, 10);
    check(&v, &eval(&j), "eval complete");
}

fn gpus(model: &str, memory_gib: i64, ids: &[&str]) -> model::node::NodeDeviceResource {
    model::node::NodeDeviceResource {
        vendor: "nvidia".into(),
        device_type: "gpu".into(),
        name: model.into(),
        instances: ids
            .iter()
            .map(|id| model::node::NodeDevice {
                id: (*id).into(),
                healthy: true,
                ..model::node::NodeDevice::default()
            })
            .collect(),
        attributes: [(
            "memory".to_string(),
            serde_json::json!({"Int": memory_gib, "Unit": "GiB"}),
        )]
        .into(),
    }
}

#[test]
fn device_constraints_pick_the_device_groups_whose_attributes_match() {
    let mut v = cluster(3);
    v.update_node("n1", |n| {
        n.node_resources
            .get_or_insert_with(Default::default)
            .devices = vec![gpus("T4", 16, &["g1"])];
    });
    v.update_node("n2", |n| {
        n.node_resources
            .get_or_insert_with(Default::default)
            .devices = vec![gpus("K80", 4, &["a"]), gpus("A100", 80, &["b"])];
    });
    let mut j = job("train", "service", 2);
    let task = &mut j.task_groups[0].tasks[0];
    task.resources.get_or_insert_with(Default::default).devices =
        vec![model::resources::RequestedDevice {
            name: "nvidia/gpu".into(),
            count: Some(1),
            constraints: vec![Constraint::new("${device.attr.memory}", ">=", "8 GiB")],
            ..Default::default()
        }];
    let j = run_and_apply(&mut v, j);
    let mut given: Vec<(String, Vec<String>)> = live(&v)
        .iter()
        .map(|a| {
            let r = a.allocated_resources.as_ref().unwrap();
            let d = &r.tasks.values().next().unwrap().devices[0];
            (
                a.node_id.clone(),
                vec![d.name.clone(), d.device_ids.join(",")],
            )
        })
        .collect();
    given.sort();
    // The K80 (4 GiB) never qualifies; each node gives its one big GPU; n3 has none.
    assert_eq!(
        given,
        [
            ("n1".to_string(), vec!["T4".to_string(), "g1".to_string()]),
            ("n2".to_string(), vec!["A100".to_string(), "b".to_string()]),
        ]
    );
    // A third copy finds no GPU with enough memory left anywhere: the failure says devices.
    let mut more = (*j).clone();
    more.task_groups[0].count = Some(3);
    let more = v.upsert_job(more);
    let outcome = schedule(&v, &eval(&more), NOW, SEED).expect("schedules");
    let m = &outcome.eval.failed_tg_allocs["web"];
    assert_eq!(m.coalesced_failures + 1, 1, "{m:?}");
    assert!(
        m.constraint_filtered.contains_key("missing devices")
            || m.dimension_exhausted.contains_key("devices"),
        "{m:?}"
    );
}

fn ask_gpus(j: &mut Job, count: u64, affinities: Vec<Affinity>) {
    let task = &mut j.task_groups[0].tasks[0];
    task.resources.get_or_insert_with(Default::default).devices =
        vec![model::resources::RequestedDevice {
            name: "nvidia/gpu".into(),
            count: Some(count),
            affinities,
            ..Default::default()
        }];
}

fn given_devices(v: &MemView, job_id: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = live(v)
        .iter()
        .filter(|a| a.job_id == job_id)
        .flat_map(|a| {
            let r = a.allocated_resources.as_ref().expect("allocated");
            r.tasks
                .values()
                .flat_map(|t| t.devices.iter())
                .flat_map(|d| {
                    d.device_ids
                        .iter()
                        .map(|id| (a.node_id.clone(), id.clone()))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    out.sort();
    out
}

#[test]
fn device_affinity_steers_placement_to_the_preferred_gpu_and_scores_it() {
    let mut v = cluster(2);
    v.update_node("n1", |n| {
        n.node_resources
            .get_or_insert_with(Default::default)
            .devices = vec![gpus("T4", 16, &["t4"])];
    });
    v.update_node("n2", |n| {
        n.node_resources
            .get_or_insert_with(Default::default)
            .devices = vec![gpus("A100", 80, &["a100"])];
    });
    let mut j = job("train", "service", 1);
    ask_gpus(
        &mut j,
        1,
        vec![Affinity {
            l_target: "${device.attr.memory}".into(),
            operand: ">=".into(),
            r_target: "40 GiB".into(),
            weight: Some(100),
        }],
    );
    run_and_apply(&mut v, j);
    assert_eq!(
        given_devices(&v, "train"),
        [("n2".to_string(), "a100".to_string())]
    );
    let a = &live(&v)[0];
    let best = &a.metrics.as_ref().expect("metrics").score_meta_data[0];
    assert_eq!(best.node_id, "n2");
    assert_eq!(best.scores.get("devices"), Some(&1.0));
    // A negative affinity sends the next job to the T4.
    let mut k = job("infer", "service", 1);
    ask_gpus(
        &mut k,
        1,
        vec![Affinity {
            l_target: "${device.model}".into(),
            operand: "=".into(),
            r_target: "A100".into(),
            weight: Some(-100),
        }],
    );
    run_and_apply(&mut v, k);
    assert_eq!(
        given_devices(&v, "infer"),
        [("n1".to_string(), "t4".to_string())]
    );
}

#[test]
fn device_instances_are_never_shared_and_never_preempted() {
    let mut v = cluster(1);
    v.update_node("n1", |n| {
        n.node_resources
            .get_or_insert_with(Default::default)
            .devices = vec![gpus("T4", 16, &["g0", "g1", "g2"])];
    });
    let mut a = job("a", "service", 2);
    ask_gpus(&mut a, 1, Vec::new());
    run_and_apply(&mut v, a);
    let mut b = job("b", "service", 1);
    b.priority = Some(100);
    ask_gpus(&mut b, 1, Vec::new());
    run_and_apply(&mut v, b);
    let mut all: Vec<String> = given_devices(&v, "a")
        .into_iter()
        .chain(given_devices(&v, "b"))
        .map(|(_, id)| id)
        .collect();
    all.sort();
    assert_eq!(
        all,
        ["g0", "g1", "g2"],
        "three allocations, three instances"
    );
    // Every instance is held: a fourth, even of a higher priority, waits (service preemption
    // is off by default) and says why.
    let mut c = job("c", "service", 1);
    c.priority = Some(100);
    ask_gpus(&mut c, 1, Vec::new());
    let c = v.upsert_job(c);
    let outcome = schedule(&v, &eval(&c), NOW, SEED).expect("schedules");
    assert!(outcome
        .plan
        .node_allocation
        .values()
        .flatten()
        .next()
        .is_none());
    assert!(
        outcome.plan.node_update.values().flatten().next().is_none(),
        "nothing preempted"
    );
    let m = &outcome.eval.failed_tg_allocs["web"];
    assert!(
        m.dimension_exhausted
            .contains_key("devices: no devices match request"),
        "{m:?}"
    );
}

#[test]
fn rolling_back_from_a_failed_canary_stops_it_and_places_no_new_canary() {
    let mut v = cluster(2);
    let mut j = job("web", "service", 2);
    j.task_groups[0].update = Some(UpdateStrategy {
        canary: Some(1),
        max_parallel: Some(1),
        ..UpdateStrategy::default_service()
    });
    run_and_apply(&mut v, j.clone());
    let stable: Vec<String> = live(&v).iter().map(|a| a.id.clone()).collect();
    let mut v1 = j.clone();
    v1.task_groups[0].tasks[0]
        .config
        .insert("image".into(), serde_json::json!("app:2"));
    run_and_apply(&mut v, v1);
    let canary = live(&v)
        .into_iter()
        .find(|a| !stable.contains(&a.id))
        .expect("a canary was placed");
    // The canary fails; the deployment watcher fails the deployment.
    v.update_alloc(&canary.id, |a| a.client_status = ClientStatus::Failed);
    let d = (*v
        .latest_deployment("default", "web")
        .expect("the canary's deployment"))
    .clone();
    v.upsert_deployment(model::deployment::Deployment {
        status: "failed".into(),
        ..d
    });
    // The rollback registers the stable spec again as a new version.
    let back = v.upsert_job(j);
    let o = schedule(&v, &eval(&back), NOW, SEED).expect("schedules");
    let stopped: Vec<&str> = o
        .plan
        .node_update
        .values()
        .flatten()
        .map(|a| a.id.as_str())
        .collect();
    assert_eq!(
        stopped,
        [canary.id.as_str()],
        "only the failed canary stops"
    );
    let placed_new = o
        .plan
        .node_allocation
        .values()
        .flatten()
        .filter(|a| v.alloc(&a.id).is_none())
        .count();
    assert_eq!(placed_new, 0, "no new canary, no replacement");
}

#[test]
fn csi_volumes_place_only_where_a_healthy_node_plugin_runs() {
    let mut v = cluster(3);
    let plugin = |healthy| model::csi::CSIInfo {
        plugin_id: "hostpath".into(),
        healthy,
        node_info: Some(model::csi::CSINodeInfo {
            id: "ext".into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    v.update_node("n1", |n| {
        n.csi_node_plugins.insert("hostpath".into(), plugin(false));
    });
    v.update_node("n2", |n| {
        n.csi_node_plugins.insert("hostpath".into(), plugin(true));
    });
    v.upsert_csi_volume(model::csi::CSIVolume {
        id: "data".into(),
        namespace: "default".into(),
        plugin_id: "hostpath".into(),
        schedulable: true,
        requested_capabilities: vec![model::csi::CSIVolumeCapability {
            access_mode: "single-node-writer".into(),
            attachment_mode: "file-system".into(),
        }],
        ..Default::default()
    });
    let mut j = job("db", "service", 1);
    j.task_groups[0].volumes.insert(
        "data".into(),
        VolumeRequest {
            name: "data".into(),
            volume_type: "csi".into(),
            source: "data".into(),
            access_mode: "single-node-writer".into(),
            attachment_mode: "file-system".into(),
            ..VolumeRequest::default()
        },
    );
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"place db.web[0] on n2
           deployment running "Deployment is running": web total=1 canaries=0 placed_canaries=0
           eval complete"#,
    );
    // A volume that does not exist blocks the group, saying so.
    let mut j2 = job("other", "service", 1);
    j2.task_groups[0].volumes.insert(
        "x".into(),
        VolumeRequest {
            name: "x".into(),
            volume_type: "csi".into(),
            source: "missing".into(),
            access_mode: "single-node-writer".into(),
            attachment_mode: "file-system".into(),
            ..VolumeRequest::default()
        },
    );
    let j2 = v.upsert_job(j2);
    let o = schedule(&v, &eval(&j2), NOW, SEED).expect("schedules");
    let s = summary(&v, &o);
    assert!(s.contains("missing CSI Volume missing"), "{s}");
}

#[test]
fn a_node_at_its_csi_volume_limit_takes_no_more() {
    let mut v = cluster(2);
    let plugin = || model::csi::CSIInfo {
        plugin_id: "hostpath".into(),
        healthy: true,
        node_info: Some(model::csi::CSINodeInfo {
            id: "ext".into(),
            max_volumes: 1,
            ..Default::default()
        }),
        ..Default::default()
    };
    for n in ["n1", "n2"] {
        v.update_node(n, |node| {
            node.csi_node_plugins.insert("hostpath".into(), plugin());
        });
    }
    let vol = |id: &str| model::csi::CSIVolume {
        id: id.into(),
        namespace: "default".into(),
        plugin_id: "hostpath".into(),
        schedulable: true,
        requested_capabilities: vec![model::csi::CSIVolumeCapability {
            access_mode: "single-node-writer".into(),
            attachment_mode: "file-system".into(),
        }],
        ..Default::default()
    };
    // One node already has one volume of the plugin claimed: it is full. Either way round,
    // the group lands on the other one.
    let busy_on = |node: &str| {
        let mut busy = vol("busy");
        busy.write_claims.insert(
            "other-alloc".into(),
            model::csi::CSIVolumeClaim {
                allocation_id: "other-alloc".into(),
                node_id: node.into(),
                ..Default::default()
            },
        );
        busy
    };
    v.upsert_csi_volume(busy_on("n1"));
    v.upsert_csi_volume(vol("data"));
    let mut j = job("db", "service", 1);
    j.task_groups[0].volumes.insert(
        "data".into(),
        VolumeRequest {
            name: "data".into(),
            volume_type: "csi".into(),
            source: "data".into(),
            access_mode: "single-node-writer".into(),
            attachment_mode: "file-system".into(),
            ..VolumeRequest::default()
        },
    );
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"place db.web[0] on n2
           deployment running "Deployment is running": web total=1 canaries=0 placed_canaries=0
           eval complete"#,
    );
    v.upsert_csi_volume(busy_on("n2"));
    check(
        &v,
        &eval(&j),
        r#"place db.web[0] on n1
           deployment running "Deployment is running": web total=1 canaries=0 placed_canaries=0
           eval complete"#,
    );
}

fn disconnect_job(reconcile: &str, replace: bool) -> Job {
    let mut j = job("web", "service", 1);
    j.task_groups[0].disconnect = Some(model::group::DisconnectStrategy {
        lost_after: Some(model::Duration(60 * SEC)),
        replace: Some(replace),
        reconcile: Some(reconcile.into()),
        stop_on_client_after: None,
    });
    j
}

/// The one allocation of `web` on `node`, running.
fn web_on(v: &MemView, node: &str) -> Allocation {
    let a = live(v)
        .into_iter()
        .find(|a| a.node_id == node)
        .unwrap_or_else(|| panic!("an allocation on {node}"));
    (*a).clone()
}

#[test]
fn a_disconnected_clients_allocation_becomes_unknown_and_is_replaced_then_lost_when_down() {
    let mut v = cluster(2);
    run_and_apply(&mut v, disconnect_job("keep_original", true));
    let first = live(&v)[0].clone();
    let (home, other) = if first.node_id == "n1" {
        ("n1", "n2")
    } else {
        ("n2", "n1")
    };
    v.update_alloc(&first.id, |a| a.client_status = ClientStatus::Running);
    v.update_node(home, |n| n.status = "disconnected".into());
    let j = v.job("default", "web").expect("stored");
    let o = check(
        &v,
        &eval(&j),
        &format!(
            "eval complete
             place web.web[0] on {other} replacing web.web[0] on {home}
             update web.web[0] on {home}"
        ),
    );
    let marked = o.plan.node_allocation[home][0].clone();
    assert_eq!(marked.client_status, "unknown");
    v.apply(&o);
    assert!(
        !v.alloc(&first.id).unwrap().next_allocation.is_empty(),
        "the original points at its replacement"
    );
    // While it stays disconnected nothing more happens.
    check(&v, &eval(&j), "eval complete");
    // Once it is down the original is lost, and not replaced again.
    v.update_node(home, |n| n.status = "down".into());
    check(
        &v,
        &eval(&j),
        &format!(
            "eval complete
             stop web.web[0] on {home}: alloc is lost since its node is down [lost]"
        ),
    );
}

#[test]
fn a_reconnecting_client_keeps_one_copy_as_the_group_says() {
    for (strategy, keeps_original) in [("keep_original", true), ("keep_replacement", false)] {
        let mut v = cluster(2);
        run_and_apply(&mut v, disconnect_job(strategy, true));
        let first = live(&v)[0].clone();
        let (home, other) = if first.node_id == "n1" {
            ("n1", "n2")
        } else {
            ("n2", "n1")
        };
        v.update_node(home, |n| n.status = "disconnected".into());
        let j = v.job("default", "web").expect("stored");
        let o = scheduler::schedule(&v, &eval(&j), NOW, SEED).expect("schedules");
        v.apply(&o);
        let replacement = web_on(&v, other);
        // The client comes back and reports its copy running.
        v.update_node(home, |n| n.status = "ready".into());
        v.update_alloc(&first.id, |a| a.client_status = ClientStatus::Running);
        v.update_alloc(&replacement.id, |a| a.client_status = ClientStatus::Running);
        let loser = if keeps_original { other } else { home };
        check(
            &v,
            &eval(&j),
            &format!(
                "eval complete
                 stop web.web[0] on {loser}: alloc not needed due to disconnected client reconnect"
            ),
        );
    }
}

#[test]
fn without_replace_a_disconnected_allocation_is_only_marked_unknown() {
    let mut v = cluster(2);
    run_and_apply(&mut v, disconnect_job("best_score", false));
    let first = live(&v)[0].clone();
    v.update_node(&first.node_id, |n| n.status = "disconnected".into());
    let j = v.job("default", "web").expect("stored");
    check(
        &v,
        &eval(&j),
        &format!(
            "eval complete
             update web.web[0] on {}",
            first.node_id
        ),
    );
}

/// Nomad's `filterOldTerminalAllocs`: a batch job's finished allocations count for their own
/// version only. The same version does not run again; a new version, or the job registered
/// again after a purge (a newer create index), runs again.
#[test]
fn finished_batch_allocations_count_for_their_own_job_version_only() {
    let mut v = cluster(1);
    let first = run_and_apply(&mut v, job("etl", "batch", 1));
    for a in live(&v) {
        v.update_alloc(&a.id, |a| a.client_status = "complete".into());
    }
    check(&v, &eval(&first), "eval complete");
    // Purged and registered again: the stored job is new (a later create index).
    let mut again = job("etl", "batch", 1);
    again.create_index = Some(first.create_index.unwrap_or(0) + 100);
    again.version = Some(0);
    let again = v.upsert_job(again);
    let outcome = check(&v, &eval(&again), "place etl.web[0] on n1\neval complete");
    assert_eq!(
        outcome
            .plan
            .node_allocation
            .values()
            .map(Vec::len)
            .sum::<usize>(),
        1
    );
}

/// Nodes n1..n3, each with its own dynamic host volume "data" (vol-1..vol-3); the job mounts it
/// with `sticky = true`, and affinities pull it to n1 and n2 (class "fast").
fn sticky_cluster() -> (MemView, Job) {
    let mut v = cluster(3);
    for i in 1..=3 {
        let (n, vol) = (format!("n{i}"), format!("vol-{i}"));
        v.update_node(&n, |node: &mut Node| {
            node.host_volumes.insert(
                "data".into(),
                ClientHostVolumeConfig {
                    name: "data".into(),
                    path: format!("/srv/{vol}"),
                    read_only: false,
                    id: vol.clone(),
                },
            );
            if i < 3 {
                node.node_class = "fast".into();
            }
        });
        v.upsert_host_volume(model::host_volume::HostVolume {
            id: vol,
            name: "data".into(),
            namespace: "default".into(),
            node_id: n,
            ..model::host_volume::HostVolume::default()
        });
    }
    let mut j = job("db", "service", 1);
    j.affinities.push(Affinity {
        l_target: "${node.class}".into(),
        operand: "=".into(),
        r_target: "fast".into(),
        weight: Some(100),
    });
    j.task_groups[0].volumes.insert(
        "data".into(),
        VolumeRequest {
            name: "data".into(),
            volume_type: "host".into(),
            source: "data".into(),
            sticky: true,
            ..VolumeRequest::default()
        },
    );
    (v, j)
}

fn sticky_claim(volume: &str) -> model::host_volume::TaskGroupHostVolumeClaim {
    model::host_volume::TaskGroupHostVolumeClaim {
        id: format!("claim-{volume}"),
        namespace: "default".into(),
        job_id: "db".into(),
        task_group_name: "web".into(),
        alloc_id: "gone".into(),
        volume_id: volume.into(),
        volume_name: "data".into(),
        ..Default::default()
    }
}

#[test]
fn a_sticky_group_goes_back_to_the_volume_it_claimed() {
    // No claim yet: the affinity decides.
    let (mut v, j) = sticky_cluster();
    let j = v.upsert_job(j);
    let o = schedule(&v, &eval(&j), NOW, SEED).expect("schedules");
    let node = &o
        .plan
        .node_allocation
        .values()
        .flatten()
        .next()
        .expect("placed")
        .node_id;
    assert!(node == "n1" || node == "n2", "{node}");

    // A claim on n3's volume (its allocation gone): only n3 will do, affinity or not.
    let (mut v, j) = sticky_cluster();
    v.add_host_volume_claim(sticky_claim("vol-3"));
    let j = v.upsert_job(j);
    check(
        &v,
        &eval(&j),
        r#"deployment running "Deployment is running": web total=1 canaries=0 placed_canaries=0
           eval complete
           place db.web[0] on n3"#,
    );

    // The claimed volume's node is down: nothing else will do; the evaluation blocks.
    v.update_node("n3", |n| n.status = "down".into());
    check(
        &v,
        &eval(&j),
        r#"deployment running "Deployment is running": web total=1 canaries=0 placed_canaries=0
           failed web: evaluated 2, filtered 2 {"missing compatible host volumes": 2}, exhausted 0 {}, coalesced 0
           eval complete queued web=1 +blocked
           new eval blocked queued-allocs"#,
    );

    // The volume was deleted: the claim is void.
    v.delete_host_volume("default", "vol-3");
    let o = schedule(&v, &eval(&j), NOW, SEED).expect("schedules");
    assert_eq!(o.plan.node_allocation.values().flatten().count(), 1);
}

#[test]
fn a_claim_met_by_a_running_allocation_leaves_new_ones_free() {
    // count 1 runs on n3 with its claim; scaling to 2 places the new one by affinity.
    let (mut v, mut j) = sticky_cluster();
    v.add_host_volume_claim(sticky_claim("vol-3"));
    j.task_groups[0].count = Some(1);
    let j = run_and_apply(&mut v, j);
    let first = live(&v)[0].clone();
    assert_eq!(first.node_id, "n3");
    let mut bigger = (*j).clone();
    bigger.task_groups[0].count = Some(2);
    let bigger = v.upsert_job(bigger);
    let o = schedule(&v, &eval(&bigger), NOW, SEED).expect("schedules");
    let placed: Vec<&str> = o
        .plan
        .node_allocation
        .values()
        .flatten()
        .filter(|a| a.id != first.id)
        .map(|a| a.node_id.as_str())
        .collect();
    assert_eq!(placed.len(), 1, "{placed:?}");
    assert!(placed[0] == "n1" || placed[0] == "n2", "{placed:?}");
}

#[test]
fn sticky_needs_a_dynamic_host_volume() {
    let (mut v, j) = sticky_cluster();
    for i in 1..=3 {
        v.update_node(&format!("n{i}"), |n: &mut Node| {
            n.host_volumes.get_mut("data").expect("has").id.clear();
        });
    }
    let j = v.upsert_job(j);
    let o = schedule(&v, &eval(&j), NOW, SEED).expect("schedules");
    assert_eq!(o.plan.node_allocation.values().flatten().count(), 0);
}

#[test]
fn a_system_job_with_a_sticky_volume_keeps_its_other_nodes() {
    // A claim whose node is down must not make the other nodes infeasible (which would stop
    // their allocations): system jobs place per node and are left out of the claim rule.
    let (mut v, mut j) = sticky_cluster();
    j.job_type = Some(model::JobType::System);
    j.affinities.clear();
    let j = run_and_apply(&mut v, j);
    assert_eq!(live(&v).len(), 3);
    v.add_host_volume_claim(sticky_claim("vol-3"));
    v.update_node("n3", |n| n.status = "down".into());
    // The plan after the node went down marked its allocation lost: the claim is unmet now.
    let on_n3 = live(&v)
        .into_iter()
        .find(|a| a.node_id == "n3")
        .expect("one on n3");
    v.update_alloc(&on_n3.id, |a| a.client_status = "lost".into());
    let o = schedule(&v, &eval(&j), NOW, SEED).expect("schedules");
    for node in ["n1", "n2"] {
        assert!(
            o.plan.node_update.get(node).is_none_or(Vec::is_empty),
            "{node} keeps its allocation: {:?}",
            o.plan.node_update
        );
    }
}

/// A multiregion job's region waits (Nomad's `pending`): its deployment is created pending and
/// nothing is placed until its peers let it run; once running it places, and once every
/// allocation is healthy it is `blocked` (waiting for its peers), not successful.
#[test]
fn a_multiregion_region_places_nothing_until_its_deployment_runs() {
    let mut v = cluster(2);
    let mut j = job("web", "service", 2);
    j.multiregion = Some(model::Multiregion {
        strategy: None,
        regions: vec![model::MultiregionRegion {
            name: "global".into(),
            ..model::MultiregionRegion::default()
        }],
    });
    let j = v.upsert_job(j);
    let o = check(
        &v,
        &eval(&j),
        r#"deployment pending "Deployment is pending, waiting for peer region": web total=2 canaries=0 placed_canaries=0
           eval complete"#,
    );
    v.apply(&o);
    // Evaluated again while pending: still nothing.
    check(&v, &eval(&j), "eval complete");
    // Its peers let it run.
    let mut d = o.plan.deployment.clone().expect("created");
    d.status = model::DeploymentStatus::Running;
    v.upsert_deployment(d.clone());
    let o = check(
        &v,
        &eval(&j),
        "eval complete
         place web.web[0] on n1
         place web.web[1] on n2",
    );
    v.apply(&o);
    for s in d.task_groups.values_mut() {
        s.healthy_allocs = 2;
    }
    d.status = model::DeploymentStatus::Running;
    v.upsert_deployment(d);
    check(
        &v,
        &eval(&j),
        "deployment update blocked: Deployment is complete but waiting for peer region
         eval complete",
    );
}

/// A multiregion update with canaries, while its region waits: the deployment records the
/// canaries every group will want and places none, in any group, until it runs.
#[test]
fn a_pending_multiregion_update_records_its_canaries_and_places_none() {
    let mut v = cluster(2);
    let mut j = job("web", "service", 2);
    j.task_groups[0].update = Some(UpdateStrategy {
        canary: Some(1),
        max_parallel: Some(1),
        ..UpdateStrategy::default_service()
    });
    let mut second = j.task_groups[0].clone();
    second.name = "api".into();
    j.task_groups.push(second);
    j.multiregion = Some(model::Multiregion {
        strategy: None,
        regions: vec![model::MultiregionRegion {
            name: "global".into(),
            ..model::MultiregionRegion::default()
        }],
    });
    let stored = v.upsert_job(j.clone());
    // The first version ran (its deployment went through).
    let o = schedule(&v, &eval(&stored), NOW, SEED).expect("schedules");
    v.apply(&o);
    let mut d = o.plan.deployment.clone().expect("created");
    d.status = model::DeploymentStatus::Running;
    v.upsert_deployment(d);
    let o = schedule(&v, &eval(&stored), NOW, SEED).expect("schedules");
    v.apply(&o);
    assert_eq!(live(&v).len(), 4);
    // Version 2 changes the task: pending, with one canary wanted per group, nothing placed.
    for g in &mut j.task_groups {
        g.tasks[0]
            .config
            .insert("image".into(), serde_json::json!("app:2"));
    }
    let stored = v.upsert_job(j);
    check(
        &v,
        &eval(&stored),
        r#"deployment pending "Deployment is pending, waiting for peer region": api total=2 canaries=1 placed_canaries=0; web total=2 canaries=1 placed_canaries=0
           deployment update cancelled: Cancelled due to newer version of job
           eval complete"#,
    );
}
