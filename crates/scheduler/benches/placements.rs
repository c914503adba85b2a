//! Placement throughput: a count = 1000 service job and a system job on clusters of 1k, 5k and 10k
//! nodes, timed with `std::time::Instant` (best of a few runs), printed as placements per second.
//! Run: `cargo bench -p scheduler --bench placements`.

use scheduler::testing::{eval, job, node, MemView};
use scheduler::{schedule, Outcome};
use std::time::{Duration, Instant};

const NOW: i64 = 1_714_564_800_000_000_000;
const RUNS: usize = 3;
const SERVICE_COUNT: i32 = 1000;

fn cluster(nodes: usize) -> MemView {
    let mut v = MemView::new();
    for i in 0..nodes {
        let mut n = node(&format!("node-{i:05}"));
        n.datacenter = format!("dc{}", i % 3 + 1);
        let res = n.node_resources.as_mut().expect("builder sets resources");
        res.cpu.cpu_shares = 16_000;
        res.memory.memory_mb = 32_768;
        v.upsert_node(n);
    }
    v
}

/// Best wall time of `RUNS` schedules of the job's evaluation, and the placements made.
fn time(view: &MemView, job_type: &str, count: i32) -> (Duration, usize) {
    let mut j = job("bench", job_type, count);
    j.task_groups[0].tasks[0]
        .resources
        .as_mut()
        .expect("has")
        .cpu = Some(100);
    let mut view = view.clone();
    let j = view.upsert_job(j);
    let ev = eval(&j);
    let mut best = Duration::MAX;
    let mut placed = 0;
    for run in 0..RUNS {
        let start = Instant::now();
        let outcome: Outcome = schedule(&view, &ev, NOW, run as u64).expect("schedules");
        best = best.min(start.elapsed());
        placed = outcome.plan.node_allocation.values().map(Vec::len).sum();
    }
    (best, placed)
}

fn main() {
    println!(
        "{:<8} {:>7} {:>10} {:>12} {:>16}",
        "job", "nodes", "placed", "best ms", "placements/s"
    );
    for nodes in [1_000, 5_000, 10_000] {
        let view = cluster(nodes);
        for (kind, count) in [("service", SERVICE_COUNT), ("system", 1)] {
            let (took, placed) = time(&view, kind, count);
            let rate = placed as f64 / took.as_secs_f64();
            println!(
                "{kind:<8} {nodes:>7} {placed:>10} {:>12.2} {rate:>16.0}",
                took.as_secs_f64() * 1e3
            );
        }
    }
}
