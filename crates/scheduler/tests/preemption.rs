//! Preemption scenarios (Nomad's `scheduler/preemption.go` behaviour): a job that does not fit
//! evicts allocations of jobs at least 10 below its priority, lowest priority first and only as
//! many as it needs; never an equal, near or higher priority; only for the job types the cluster's
//! `PreemptionConfig` enables (system by default).

use model::alloc::{Allocation, DesiredStatus};
use model::Job;
use scheduler::testing::{eval, job, node, MemView};
use scheduler::{schedule, Outcome, Preemption, SchedulerConfig};
use std::sync::Arc;

const NOW: i64 = 1_714_564_800_000_000_000;

/// A job of `job_type` and `priority` whose one task asks for `cpu` MHz and `memory` MB.
fn sized(id: &str, job_type: &str, priority: i32, count: i32, cpu: i32, memory: i32) -> Job {
    let mut j = job(id, job_type, count);
    j.priority = Some(priority);
    let r = j.task_groups[0].tasks[0].resources.as_mut().expect("has");
    r.cpu = Some(cpu);
    r.memory_mb = Some(memory);
    j
}

/// Schedules `j` on `v` and applies the plan, as the plan applier would when everything fits.
fn run(v: &mut MemView, j: Job) -> (Arc<Job>, Outcome) {
    let j = v.upsert_job(j);
    let outcome = schedule(v, &eval(&j), NOW, 7).expect("schedules");
    v.apply(&outcome);
    (j, outcome)
}

fn live_of(v: &MemView, job_id: &str) -> Vec<Arc<Allocation>> {
    v.all_allocs()
        .into_iter()
        .filter(|a| a.job_id == job_id && a.desired_status == DesiredStatus::Run)
        .collect()
}

fn evicted(o: &Outcome) -> Vec<Allocation> {
    o.plan
        .node_preemptions
        .values()
        .flatten()
        .cloned()
        .collect()
}

/// One node (4000 MHz, 8 GiB) holding `jobs`, each one allocation.
fn one_node_with(jobs: &[Job]) -> MemView {
    let mut v = MemView::new();
    v.upsert_node(node("n1"));
    for j in jobs {
        let (_, o) = run(&mut v, j.clone());
        assert!(o.eval.failed_tg_allocs.is_empty(), "{} placed", j.id);
    }
    v
}

#[test]
fn a_high_priority_system_job_evicts_a_low_priority_batch_alloc() {
    let mut v = one_node_with(&[sized("etl", "batch", 20, 1, 3600, 1024)]);
    let victim = live_of(&v, "etl").pop().expect("placed");
    let (_, o) = run(&mut v, sized("agent", "system", 100, 1, 1000, 256));
    let placed: Vec<&Allocation> = o.plan.node_allocation.values().flatten().collect();
    assert_eq!(placed.len(), 1, "{o:#?}");
    assert_eq!(placed[0].preempted_allocations, vec![victim.id.clone()]);
    let gone = evicted(&o);
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].id, victim.id);
    assert_eq!(gone[0].desired_status, DesiredStatus::Evict);
    assert_eq!(gone[0].preempted_by_allocation, placed[0].id);
    assert_eq!(
        gone[0].desired_description,
        format!("Preempted by alloc ID {}", placed[0].id)
    );
    assert!(live_of(&v, "etl").is_empty());
    assert_eq!(live_of(&v, "agent").len(), 1);
}

#[test]
fn never_a_higher_equal_or_near_priority_alloc() {
    for (priority, why) in [(100, "higher"), (70, "equal"), (61, "within 10")] {
        let mut v = one_node_with(&[sized("web", "service", priority, 1, 3600, 1024)]);
        let (_, o) = run(&mut v, sized("agent", "system", 70, 1, 1000, 256));
        assert!(evicted(&o).is_empty(), "{why}: nothing evicted");
        assert!(o.plan.node_allocation.is_empty(), "{why}: nothing placed");
        let failed = &o.eval.failed_tg_allocs["web"];
        assert_eq!(failed.dimension_exhausted.get("cpu"), Some(&1), "{why}");
        assert_eq!(live_of(&v, "web").len(), 1, "{why}");
    }
}

#[test]
fn only_what_is_needed_lowest_priority_first() {
    // 4000 MHz: three allocations of 1200, 1200 and 1000 MHz at priorities 30, 10 and 20.
    let mut v = one_node_with(&[
        sized("mid", "batch", 30, 1, 1200, 512),
        sized("low", "batch", 10, 1, 1200, 512),
        sized("lowish", "batch", 20, 1, 1000, 512),
    ]);
    // 1500 MHz: 600 are free, so one eviction of at least 900 suffices; the lowest priority goes.
    let (_, o) = run(&mut v, sized("agent", "system", 90, 1, 1500, 256));
    let gone: Vec<String> = evicted(&o).iter().map(|a| a.job_id.clone()).collect();
    assert_eq!(gone, vec!["low".to_string()]);
    assert_eq!(live_of(&v, "agent").len(), 1);
    assert_eq!(live_of(&v, "mid").len(), 1);
    assert_eq!(live_of(&v, "lowish").len(), 1);
}

#[test]
fn two_evictions_when_one_is_not_enough_and_none_given_back_needlessly() {
    let mut v = one_node_with(&[
        sized("a", "batch", 10, 1, 1800, 512),
        sized("b", "batch", 10, 1, 1800, 512),
    ]);
    // 3000 MHz: 400 free, so both must go.
    let (_, o) = run(&mut v, sized("agent", "system", 90, 1, 3000, 256));
    let mut gone: Vec<String> = evicted(&o).iter().map(|a| a.job_id.clone()).collect();
    gone.sort();
    assert_eq!(gone, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(live_of(&v, "agent").len(), 1);
}

#[test]
fn only_enabled_job_types_preempt() {
    let low = sized("etl", "batch", 10, 1, 3600, 1024);
    // Batch preemption is off by default.
    let mut v = one_node_with(std::slice::from_ref(&low));
    let (_, o) = run(&mut v, sized("urgent", "batch", 90, 1, 1000, 256));
    assert!(evicted(&o).is_empty());
    assert!(o.eval.failed_tg_allocs.contains_key("web"));
    // ... and service too; turned on, they preempt.
    for (job_type, preemption) in [
        (
            "batch",
            Preemption {
                batch: true,
                ..Preemption::default()
            },
        ),
        (
            "service",
            Preemption {
                service: true,
                ..Preemption::default()
            },
        ),
    ] {
        let mut v = one_node_with(std::slice::from_ref(&low));
        let (_, o) = run(&mut v, sized("urgent", job_type, 90, 1, 1000, 256));
        assert!(evicted(&o).is_empty(), "{job_type} is off by default");
        v.set_scheduler_config(SchedulerConfig {
            preemption,
            ..SchedulerConfig::default()
        });
        let (_, o) = run(&mut v, sized("urgent2", job_type, 90, 1, 1000, 256));
        assert_eq!(evicted(&o).len(), 1, "{job_type} preempts once enabled");
        assert_eq!(live_of(&v, "urgent2").len(), 1);
    }
    // System preemption can be turned off.
    let mut v = one_node_with(std::slice::from_ref(&low));
    v.set_scheduler_config(SchedulerConfig {
        preemption: Preemption {
            system: false,
            ..Preemption::default()
        },
        ..SchedulerConfig::default()
    });
    let (_, o) = run(&mut v, sized("agent", "system", 100, 1, 1000, 256));
    assert!(evicted(&o).is_empty());
}

#[test]
fn a_node_with_room_wins_over_one_that_needs_an_eviction() {
    let mut v = MemView::new();
    v.upsert_node(node("n1"));
    v.upsert_node(node("n2"));
    v.set_scheduler_config(SchedulerConfig {
        preemption: Preemption {
            service: true,
            ..Preemption::default()
        },
        ..SchedulerConfig::default()
    });
    // n1 full of a low-priority job, n2 empty.
    let mut low = sized("low", "batch", 10, 1, 3600, 1024);
    low.constraints.push(model::constraint::Constraint::new(
        "${node.unique.id}",
        "=",
        "n1",
    ));
    let (_, o) = run(&mut v, low);
    assert!(o.eval.failed_tg_allocs.is_empty());
    let (_, o) = run(&mut v, sized("web", "service", 90, 1, 1000, 256));
    assert!(evicted(&o).is_empty(), "{o:#?}");
    assert_eq!(live_of(&v, "web")[0].node_id, "n2");
}

#[test]
fn memory_max_is_given_only_with_oversubscription() {
    let mut j = sized("web", "service", 50, 1, 100, 256);
    j.task_groups[0].tasks[0]
        .resources
        .as_mut()
        .expect("has")
        .memory_max_mb = Some(1024);
    let mut v = MemView::new();
    v.upsert_node(node("n1"));
    let (_, o) = run(&mut v, j.clone());
    let a = o
        .plan
        .node_allocation
        .values()
        .flatten()
        .next()
        .expect("placed");
    let task = &a.allocated_resources.as_ref().expect("has").tasks["app"];
    assert_eq!(task.memory.memory_max_mb, 0, "off by default, as Nomad");
    v.set_scheduler_config(SchedulerConfig {
        memory_oversubscription: true,
        ..SchedulerConfig::default()
    });
    j.id = "web2".into();
    let (_, o) = run(&mut v, j);
    let a = o
        .plan
        .node_allocation
        .values()
        .flatten()
        .next()
        .expect("placed");
    let task = &a.allocated_resources.as_ref().expect("has").tasks["app"];
    assert_eq!(task.memory.memory_max_mb, 1024);
}

#[test]
fn a_plan_names_what_it_would_preempt() {
    let v = one_node_with(&[sized("etl", "batch", 20, 1, 3600, 1024)]);
    let victim = live_of(&v, "etl").pop().expect("placed");
    let mut v = v;
    let j = v.upsert_job(sized("agent", "system", 100, 1, 1000, 256));
    let mut ev = eval(&j);
    ev.annotate_plan = true;
    let o = schedule(&v, &ev, NOW, 7).expect("schedules");
    let annotations = o.plan.annotations.expect("annotated");
    let ids: Vec<&str> = annotations
        .preempted_allocs
        .iter()
        .map(|a| a.id.as_str())
        .collect();
    assert_eq!(ids, vec![victim.id.as_str()]);
    assert_eq!(annotations.preempted_allocs[0].job_id, "etl");
    assert_eq!(annotations.desired_tg_updates["web"].preemptions, 1);
}
