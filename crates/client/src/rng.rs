//! Randomness for jitter only (heartbeats, retries, restart delays): splitmix64, seeded by the
//! caller. Nothing the client decides depends on it beyond timing.

use crate::limits::{RETRY_DELAY_MAX, RETRY_DELAY_MIN};
use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Seeded from a fresh random UUID.
    pub fn from_entropy() -> Rng {
        Rng(uuid::Uuid::new_v4().as_u64_pair().0)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A duration in `[0, max)`; zero when `max` is zero.
    pub fn below(&mut self, max: Duration) -> Duration {
        let nanos = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.next_u64() % nanos)
    }
}

/// Exponential backoff with jitter between [`RETRY_DELAY_MIN`] and [`RETRY_DELAY_MAX`]: each
/// delay is half the current step plus a random part of the other half.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    step: Duration,
    rng: Rng,
}

impl Backoff {
    pub fn new(rng: Rng) -> Backoff {
        Backoff {
            step: RETRY_DELAY_MIN,
            rng,
        }
    }

    pub fn reset(&mut self) {
        self.step = RETRY_DELAY_MIN;
    }

    pub fn next_delay(&mut self) -> Duration {
        let step = self.step;
        self.step = (step * 2).min(RETRY_DELAY_MAX);
        step / 2 + self.rng.below(step / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_within_bounds_and_resets() {
        let mut b = Backoff::new(Rng::new(1));
        let mut last = Duration::ZERO;
        for _ in 0..20 {
            let d = b.next_delay();
            assert!(d >= RETRY_DELAY_MIN / 2 && d <= RETRY_DELAY_MAX, "{d:?}");
            last = d;
        }
        assert!(last >= RETRY_DELAY_MAX / 2);
        b.reset();
        assert!(b.next_delay() <= RETRY_DELAY_MIN);
    }

    #[test]
    fn below_stays_below() {
        let mut r = Rng::new(42);
        for _ in 0..100 {
            assert!(r.below(Duration::from_millis(10)) < Duration::from_millis(10));
        }
        assert_eq!(r.below(Duration::ZERO), Duration::ZERO);
    }
}
