//! The async runtime raft runs on: tokio, with one seam for the deterministic simulation.
//!
//! openraft draws random numbers for election timeouts and tick jitter from its runtime. Here they
//! come from the OS's entropy, except on a thread where a simulation set a seed ([`simulate`]):
//! there every draw comes from that seed, in order. With a single-threaded tokio runtime whose
//! clock is paused (virtual time), raft's disk work done in line ([`blocking`]) and the network
//! simulated, a seed then decides the whole run, and replays it.

use openraft::rt::{AsyncRuntime, OptionalSend};
#[allow(deprecated)]
use openraft::TokioRuntime;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use std::cell::Cell;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::time::Duration;

thread_local! {
    /// The simulation's seed on this thread, advanced at each draw; `None` outside a simulation.
    static SEED: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Makes this thread's raft randomness come from `seed` (or from entropy again with `None`), and
/// raft's disk work run in line rather than on tokio's blocking pool. For simulations, which run
/// every node on one thread.
pub fn simulate(seed: Option<u64>) {
    SEED.with(|s| s.set(seed));
}

/// Whether this thread runs a simulation.
pub(crate) fn simulating() -> bool {
    SEED.with(|s| s.get().is_some())
}

/// Runs blocking disk work: on tokio's blocking pool, or in line in a simulation (a thread of its
/// own would make the order of events depend on the OS's scheduling).
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<T> {
    if simulating() {
        return Ok(f());
    }
    tokio::task::spawn_blocking(f)
        .await
        .map_err(io::Error::other)
}

/// SplitMix64: a good 64-bit mixer, so successive seeds give unrelated draws.
fn splitmix64(seed: u64) -> u64 {
    let z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn next_seed() -> u64 {
    SEED.with(|s| match s.get() {
        Some(seed) => {
            let next = splitmix64(seed);
            s.set(Some(next));
            next
        }
        // std's hash keys are random per `RandomState`: entropy without another dependency.
        None => std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish(),
    })
}

/// openraft's tokio runtime with the seedable randomness above.
#[allow(deprecated)]
pub struct CaravanRuntime(TokioRuntime);

impl std::fmt::Debug for CaravanRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaravanRuntime")
    }
}

#[allow(deprecated)]
impl AsyncRuntime for CaravanRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = <TokioRuntime as AsyncRuntime>::Instant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = SmallRng;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        SmallRng::seed_from_u64(next_seed())
    }

    type Mpsc = <TokioRuntime as AsyncRuntime>::Mpsc;
    type Watch = <TokioRuntime as AsyncRuntime>::Watch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    fn new(threads: usize) -> Self {
        CaravanRuntime(TokioRuntime::new(threads))
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.0.block_on(future)
    }

    fn spawn_blocking<F, T>(f: F) -> impl Future<Output = Result<T, io::Error>> + Send
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        blocking(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::RngExt;

    #[test]
    fn a_seed_gives_the_same_draws_and_no_seed_gives_others() {
        let draws = || -> Vec<u64> {
            (0..5)
                .map(|_| CaravanRuntime::thread_rng().random_range(0..1_000_000))
                .collect()
        };
        simulate(Some(7));
        let a = draws();
        simulate(Some(7));
        let b = draws();
        simulate(Some(8));
        let c = draws();
        simulate(None);
        let d = draws();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        assert!(!simulating());
    }
}
