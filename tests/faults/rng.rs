//! A small seeded generator (SplitMix64), so a randomised schedule is reproducible from the
//! seed printed with its table (`QL_FAULTS_SEED=<seed>` replays it), independently of the
//! `rand` crate's version.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// Uniform in `lo..=hi`, in milliseconds.
    pub fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        Duration::from_millis(self.between(lo.as_millis() as u64, hi.as_millis() as u64))
    }

    /// `k` distinct indices out of `0..n`, sorted.
    pub fn subset(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut all: Vec<usize> = (0..n).collect();
        for i in 0..k.min(n) {
            let j = i + self.below((n - i) as u64) as usize;
            all.swap(i, j);
        }
        let mut picked = all[..k.min(n)].to_vec();
        picked.sort_unstable();
        picked
    }
}

/// `QL_FAULTS_SEED` if set, else a fresh seed from the clock.
pub fn seed() -> u64 {
    if let Some(seed) = std::env::var("QL_FAULTS_SEED")
        .ok()
        .and_then(|s| s.trim().parse().ok())
    {
        return seed;
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    Rng::new(nanos ^ u64::from(std::process::id())).next_u64() % 1_000_000_000
}
