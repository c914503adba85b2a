//! The scheduler's only source of randomness: a small seeded generator (SplitMix64). Node
//! sampling and new IDs draw from separate streams so adding an ID never moves a placement.

/// A seeded pseudo-random generator. Not cryptographic; deterministic for a seed.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    /// A generator for one purpose (`stream`) of one seed.
    pub(crate) fn new(seed: u64, stream: u64) -> Rng {
        let mut rng = Rng {
            state: seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F),
        };
        rng.next_u64();
        rng
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (Lemire's multiply-shift; `n` > 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Fisher–Yates.
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }

    /// A random (version 4) UUID as text.
    pub(crate) fn uuid(&mut self) -> String {
        let hi = self.next_u64();
        let lo = self.next_u64();
        let hi = (hi & !0xF000) | 0x4000;
        let lo = (lo & !(0xC000 << 48)) | (0x8000 << 48);
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            hi >> 32,
            (hi >> 16) & 0xFFFF,
            hi & 0xFFFF,
            lo >> 48,
            lo & 0xFFFF_FFFF_FFFF
        )
    }
}

/// Mixes the caller's seed with the evaluation's ID and the state index (FNV-1a, then SplitMix64).
pub(crate) fn mix(seed: u64, eval_id: &str, index: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in eval_id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01B3);
    }
    let mut rng = Rng::new(seed ^ h, index);
    rng.next_u64()
}

/// The stream of node sampling and dynamic ports.
pub(crate) const STREAM_SAMPLING: u64 = 1;
/// The stream of new allocation, evaluation and deployment IDs.
pub(crate) const STREAM_IDS: u64 = 2;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_numbers_and_streams_differ() {
        let mut a = Rng::new(7, STREAM_IDS);
        let mut b = Rng::new(7, STREAM_IDS);
        let mut c = Rng::new(7, STREAM_SAMPLING);
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        let zs: Vec<u64> = (0..4).map(|_| c.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs, zs);
    }

    #[test]
    fn mixing_separates_evaluations_and_indexes() {
        assert_eq!(mix(1, "a", 5), mix(1, "a", 5));
        assert_ne!(mix(1, "a", 5), mix(1, "b", 5));
        assert_ne!(mix(1, "a", 5), mix(1, "a", 6));
        assert_ne!(mix(1, "a", 5), mix(2, "a", 5));
    }

    #[test]
    fn uuids_look_like_version_4() {
        let mut rng = Rng::new(1, STREAM_IDS);
        let id = rng.uuid();
        assert_eq!(id.len(), 36, "{id}");
        let parts: Vec<&str> = id.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'), "{id}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(id, rng.uuid());
    }

    #[test]
    fn below_stays_in_range_and_shuffle_permutes() {
        let mut rng = Rng::new(3, STREAM_SAMPLING);
        assert!((0..1000).all(|_| rng.below(7) < 7));
        let mut v: Vec<u32> = (0..50).collect();
        rng.shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
        assert_ne!(v, sorted);
    }
}
