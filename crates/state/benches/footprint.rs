//! Bytes of state per allocation: a service job's placements committed through `PlanApply` (as
//! the plan applier does, 1,000 per plan, the job carried once per entry), measured with a
//! counting allocator (heap bytes the store holds after the plans, divided by the allocations)
//! and as snapshot bytes per allocation. Prints figures; asserts nothing.
//!
//! `cargo bench -p state --bench footprint [-- ALLOCS]` (default 100,000)

use model::alloc::Allocation;
use state::{Command, StateStore};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn job() -> model::Job {
    let ms = 1_000_000u64;
    let mut job: model::Job = serde_json::from_value(serde_json::json!({
        "ID": "bench", "Name": "bench", "Type": "service", "Datacenters": ["dc1"],
        "TaskGroups": [{
            "Name": "g", "Count": 1000,
            "RestartPolicy": {"Attempts": 0, "Mode": "fail", "Interval": 60_000 * ms, "Delay": 10 * ms},
            "Tasks": [{
                "Name": "t", "Driver": "mock_driver", "Config": {"run_for": "24h"},
                "Env": {"GREETING": "hello", "PORT": "8080"},
                "Resources": {"CPU": 50, "MemoryMB": 30}
            }]
        }]
    }))
    .expect("job");
    job.canonicalize();
    job
}

fn main() {
    let total: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let store = StateStore::new();
    let job = job();
    let mut index = 1;
    store
        .apply(
            index,
            &Command::JobRegister {
                job: job.clone(),
                eval: None,
                submit_time: 0,
                submission: None,
            },
        )
        .expect("register");
    let stored = store
        .snapshot()
        .job("default", "bench")
        .expect("stored job");
    let before = LIVE.load(Ordering::Relaxed);
    let mut placed = 0;
    while placed < total {
        let n = (total - placed).min(1000);
        let allocs: Vec<Allocation> = (0..n)
            .map(|i| {
                let k = placed + i;
                Allocation {
                    id: format!("{k:08x}-0000-4000-8000-000000000000"),
                    namespace: "default".into(),
                    eval_id: format!("eval-{}", placed / 1000),
                    name: format!("bench.g[{}]", k % 1000),
                    node_id: format!("{:08x}-node-4000-8000-000000000000", k % 5000),
                    node_name: format!("sim-{}", k % 5000),
                    job_id: "bench".into(),
                    job: None,
                    task_group: "g".into(),
                    desired_status: "run".into(),
                    client_status: "pending".into(),
                    ..Allocation::default()
                }
            })
            .collect();
        index += 1;
        store
            .apply(
                index,
                &Command::PlanApply {
                    eval_id: format!("eval-{}", placed / 1000),
                    job: Some((*stored).clone()),
                    allocs_upsert: allocs,
                    allocs_stop: Vec::new(),
                    evals: Vec::new(),
                    deployment: None,
                    deployment_updates: Vec::new(),
                },
            )
            .expect("plan");
        placed += n;
    }
    let after = LIVE.load(Ordering::Relaxed);
    let mut snap = Vec::new();
    store.save(&mut snap).expect("save");
    let job_json = serde_json::to_vec(&*stored).map(|v| v.len()).unwrap_or(0);
    println!(
        "{total} allocations: {:.0} heap bytes of state per allocation, {:.0} snapshot bytes per allocation (the job alone is {job_json} bytes of JSON)",
        (after - before) as f64 / total as f64,
        snap.len() as f64 / total as f64,
    );
}
