//! The server's clock and ID source: the one place its code reads the time or draws an ID.
//!
//! Outside a simulation these are the wall clock, the monotonic clock and random v4 UUIDs. On a
//! thread where a simulation called [`simulate`], they come from tokio's clock (paused, so
//! virtual) and from the seed, and the CPU work the server would hand to tokio's blocking pool
//! ([`blocking`]) runs in line: then a seed decides every timestamp, every ID and the order of
//! every event, so a run replays exactly (issue #23). The simulation also seeds raft's own
//! randomness ([`raft::rt::simulate`]).

use std::cell::RefCell;
use std::sync::LazyLock;

/// The wall time a simulation starts at: 2026-01-01T00:00:00Z.
const SIM_EPOCH_NANOS: i64 = 1_767_225_600_000_000_000;

struct Sim {
    /// Advanced at each draw (SplitMix64).
    seed: u64,
    /// Tokio's (virtual) clock when the simulation began: wall time is the epoch plus what
    /// passed since.
    start: tokio::time::Instant,
}

thread_local! {
    static SIM: RefCell<Option<Sim>> = const { RefCell::new(None) };
}

/// Makes this thread's server clock, IDs and raft randomness come from `seed` and tokio's clock
/// (call it inside the simulation's runtime, whose clock is paused), or the real ones again with
/// `None`.
pub fn simulate(seed: Option<u64>) {
    SIM.with(|s| {
        *s.borrow_mut() = seed.map(|seed| Sim {
            seed,
            start: tokio::time::Instant::now(),
        });
    });
    raft::rt::simulate(seed.map(|s| s ^ 0x005e_ed0f_4a1f));
}

/// Whether this thread runs a simulation.
pub fn simulating() -> bool {
    SIM.with(|s| s.borrow().is_some())
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Nanoseconds since the Unix epoch: what timestamps in state (create and modify times, events)
/// say. Never used to measure a duration: see [`mono_nanos`].
pub fn now_nanos() -> i64 {
    if let Some(t) = SIM.with(|s| s.borrow().as_ref().map(|s| s.start)) {
        let passed = i64::try_from(t.elapsed().as_nanos()).unwrap_or(i64::MAX);
        return SIM_EPOCH_NANOS.saturating_add(passed);
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Whole seconds since the Unix epoch.
pub fn now_secs() -> i64 {
    now_nanos() / 1_000_000_000
}

/// Nanoseconds on a monotonic clock since this process first asked (in a simulation: since it
/// began): only differences mean anything. Timers and deadlines use it, so a step of the wall
/// clock never moves them.
pub fn mono_nanos() -> i64 {
    static START: LazyLock<std::time::Instant> = LazyLock::new(std::time::Instant::now);
    if let Some(t) = SIM.with(|s| s.borrow().as_ref().map(|s| s.start)) {
        return i64::try_from(t.elapsed().as_nanos()).unwrap_or(i64::MAX);
    }
    i64::try_from(START.elapsed().as_nanos()).unwrap_or(i64::MAX)
}

/// A fresh random 64-bit number (from the seed in a simulation).
pub fn random_u64() -> u64 {
    SIM.with(|s| match s.borrow_mut().as_mut() {
        Some(sim) => splitmix64(&mut sim.seed),
        None => uuid::Uuid::new_v4().as_u64_pair().0,
    })
}

/// A new ID: a random (version 4) UUID, from the seed in a simulation.
pub fn new_id() -> String {
    if simulating() {
        let bytes = (u128::from(random_u64()) << 64) | u128::from(random_u64());
        return uuid::Builder::from_random_bytes(bytes.to_be_bytes())
            .into_uuid()
            .to_string();
    }
    uuid::Uuid::new_v4().to_string()
}

/// Runs CPU-bound work (a scheduler pass, a plan) on tokio's blocking pool, or in line in a
/// simulation (another thread would make the order of events depend on the OS).
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    if simulating() {
        return Ok(f());
    }
    tokio::task::spawn_blocking(f).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_simulation_draws_the_same_ids_and_times_for_a_seed() {
        let draw = || async {
            simulate(Some(7));
            let a = (new_id(), new_id(), now_nanos());
            tokio::time::sleep(std::time::Duration::from_secs(3)).await;
            let b = now_nanos();
            simulate(None);
            (a, b)
        };
        let (first, t1) = draw().await;
        let (second, t2) = draw().await;
        assert_eq!(first, second);
        assert_ne!(first.0, first.1);
        assert_eq!(first.2, SIM_EPOCH_NANOS);
        assert_eq!(t1 - first.2, 3_000_000_000);
        assert_eq!(t2, t1);
        assert!(uuid::Uuid::parse_str(&first.0).is_ok());
        // Outside the simulation: random IDs and the real clock again.
        assert_ne!(new_id(), new_id());
        assert!(now_nanos() > SIM_EPOCH_NANOS);
    }

    #[tokio::test(start_paused = true)]
    async fn in_a_simulation_the_monotonic_clock_is_virtual() {
        simulate(Some(1));
        let a = mono_nanos();
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        let b = mono_nanos();
        simulate(None);
        assert_eq!(b - a, 60_000_000_000);
        // Outside one it is the OS's, whatever tokio's clock says.
        let c = mono_nanos();
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        assert!(mono_nanos() - c < 60_000_000_000);
    }
}
