//! What the deterministic simulations share (`raft/tests/sim.rs`, `server/tests/sim.rs`): the
//! seeded generator, the seed loop (seeds on one thread per core, each caught if it panics, one
//! whose virtual clock stands still named by a watchdog), the trace comparison of a replay, and
//! where runs keep their files.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A seeded SplitMix64 stream, shared by a run's tasks (one thread, so the order of draws is the
/// order of events).
#[derive(Clone)]
pub struct Rng(Arc<Mutex<u64>>);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(Arc::new(Mutex::new(seed)))
    }

    pub fn next(&self) -> u64 {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn chance(&self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A duration between `lo` and `hi` milliseconds, both included.
    pub fn millis(&self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi.saturating_sub(lo) + 1))
    }
}

/// `CARAVAN_SIM_SEED`: the seed to replay, or the first of the seed loop.
pub fn seed_from_env() -> Option<u64> {
    std::env::var("CARAVAN_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
}

/// `CARAVAN_SIM_SEEDS`: how many seeds the loop runs (200 by default).
pub fn seed_count() -> u64 {
    std::env::var("CARAVAN_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200)
}

/// Where a simulation's runs keep their files: in memory (`/dev/shm`) where there is one.
pub fn sim_root(name: &str) -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    let base = if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    };
    base.join(format!("{name}-{}", std::process::id()))
}

/// What one seed's run came to.
pub struct SeedResult {
    /// Operations in its history.
    pub ops: usize,
    /// Faults the nemesis injected.
    pub faults: usize,
    /// Why it failed, with the replay command; `None` when every check held.
    pub failure: Option<String>,
}

/// The seed loop's totals.
pub struct Summary {
    pub seeds: u64,
    pub ops: usize,
    pub faults: usize,
    pub failures: Vec<String>,
    pub secs: u64,
}

/// Runs `count` seeds from `first` on one thread per core (seeds are independent: each its own
/// runtime and directory). A seed that panics fails with `replay` (the command that replays a
/// seed, `{seed}` in it replaced). A seed that runs for `wall_limit` of real time has a virtual
/// clock that stands still (a task spins without waiting): it is named, with its replay
/// command, and the process stops, rather than hang CI.
pub fn run_seeds(
    first: u64,
    count: u64,
    replay: &str,
    wall_limit: Duration,
    run: impl Fn(u64) -> SeedResult + Sync,
) -> Summary {
    let started = std::time::Instant::now();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let current: Arc<Mutex<BTreeMap<u64, (u64, std::time::Instant)>>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    watchdog(
        current.clone(),
        done.clone(),
        replay.to_string(),
        wall_limit,
    );
    let run = &run;
    let results: Vec<SeedResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let current = current.clone();
                scope.spawn(move || {
                    let mut out = Vec::new();
                    for seed in (first..first + count).filter(|seed| seed % threads == t) {
                        lock(&current).insert(t, (seed, std::time::Instant::now()));
                        let r =
                            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(seed)))
                                .unwrap_or_else(|_| SeedResult {
                                    ops: 0,
                                    faults: 0,
                                    failure: Some(format!(
                                        "seed {seed}: a task panicked (see above)\nreplay: {}",
                                        replay.replace("{seed}", &seed.to_string())
                                    )),
                                });
                        lock(&current).remove(&t);
                        out.push(r);
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    Summary {
        seeds: count,
        ops: results.iter().map(|r| r.ops).sum(),
        faults: results.iter().map(|r| r.faults).sum(),
        failures: results.into_iter().filter_map(|r| r.failure).collect(),
        secs: started.elapsed().as_secs(),
    }
}

/// A simulation suite's test: `CARAVAN_SIM_SEEDS` seeds (from `CARAVAN_SIM_SEED`, else 1)
/// through [`run_seeds`], the totals printed under `label`, and a failure listing every seed
/// that broke a check, each with its replay command.
pub fn check_seeds(
    label: &str,
    replay: &str,
    wall_limit: Duration,
    run: impl Fn(u64) -> SeedResult + Sync,
) {
    let first = seed_from_env().unwrap_or(1);
    let summary = run_seeds(first, seed_count(), replay, wall_limit, run);
    println!(
        "[{label}] {} seeds from {first}: {} operations checked, {} faults injected, {} failed, in {} s",
        summary.seeds,
        summary.ops,
        summary.faults,
        summary.failures.len(),
        summary.secs
    );
    assert!(
        summary.failures.is_empty(),
        "{}",
        summary.failures.join("\n")
    );
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn watchdog(
    current: Arc<Mutex<BTreeMap<u64, (u64, std::time::Instant)>>>,
    done: Arc<std::sync::atomic::AtomicBool>,
    replay: String,
    limit: Duration,
) {
    std::thread::spawn(move || {
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(500));
            let stuck = lock(&current)
                .values()
                .find(|(_, since)| since.elapsed() > limit)
                .map(|(seed, _)| *seed);
            if let Some(seed) = stuck {
                eprintln!(
                    "seed {seed} has run for {limit:?} of real time: its virtual clock stands still (a task spins without waiting)\nreplay: {}",
                    replay.replace("{seed}", &seed.to_string())
                );
                std::process::exit(101);
            }
        }
    });
}

/// One seed's run, as a replay shows it: its trace and its verdict.
pub struct Replayed {
    pub trace: Vec<String>,
    pub verdict: Result<(), String>,
}

/// `CARAVAN_SIM_SEED=N … -- replay --nocapture`: runs `seed` twice, prints both traces, checks
/// they are the same, then fails with the verdict if the run broke a check
/// (`CARAVAN_SIM_ONCE=1`: one run, its trace and verdict). `label` starts the summary line.
pub fn replay(label: &str, seed: u64, run: impl Fn(u64) -> Replayed) {
    let a = run(seed);
    let print = |trace: &[String]| {
        for line in trace {
            println!("{line}");
        }
    };
    if std::env::var_os("CARAVAN_SIM_ONCE").is_none() {
        let b = run(seed);
        print(&a.trace);
        println!("---- the same seed again ----");
        print(&b.trace);
        same_trace(seed, &a.trace, &b.trace);
        println!(
            "{label} seed {seed}: the two traces are identical ({} lines)",
            a.trace.len()
        );
    } else {
        print(&a.trace);
    }
    if let Err(e) = a.verdict {
        panic!("{e}");
    }
}

/// Panics with where two traces of `seed` first differ (a run not decided by its seed alone).
pub fn same_trace(seed: u64, a: &[String], b: &[String]) {
    if a == b {
        return;
    }
    let at = a
        .iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let from = at.saturating_sub(3);
    panic!(
        "seed {seed} ran differently twice, from line {at}:\n{}\n---- and ----\n{}",
        a[from..(at + 3).min(a.len())].join("\n"),
        b[from..(at + 3).min(b.len())].join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_draws() {
        let (a, b) = (Rng::new(9), Rng::new(9));
        let x: Vec<u64> = (0..5).map(|_| a.next()).collect();
        let y: Vec<u64> = (0..5).map(|_| b.next()).collect();
        assert_eq!(x, y);
        assert_ne!(x[0], x[1]);
        assert!((0..100).all(|_| a.millis(5, 7) >= Duration::from_millis(5)));
    }

    #[test]
    fn the_seed_loop_runs_each_seed_once_and_catches_panics() {
        let summary = run_seeds(10, 6, "replay {seed}", Duration::from_secs(60), |seed| {
            assert!(seed != 13, "boom");
            SeedResult {
                ops: seed as usize,
                faults: 1,
                failure: None,
            }
        });
        assert_eq!(summary.ops, 10 + 11 + 12 + 14 + 15);
        assert_eq!(summary.faults, 5);
        assert_eq!(summary.failures.len(), 1);
        assert!(
            summary.failures[0].contains("replay 13"),
            "{:?}",
            summary.failures
        );
    }

    #[test]
    #[should_panic(expected = "from line 1")]
    fn traces_that_differ_are_shown_where_they_part() {
        let a = vec!["x".to_string(), "y".to_string()];
        let b = vec!["x".to_string(), "z".to_string()];
        same_trace(1, &a, &b);
    }
}
