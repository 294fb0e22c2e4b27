//! The pure arithmetic of Redlock: majority size, clock-drift allowance, remaining validity
//! and the running vote count that lets a fan-out stop as soon as its outcome is certain.
//!
//! Nothing here reads a clock, talks to Redis or awaits: time comes in as arguments, so the
//! rules are unit-tested exhaustively below.

use std::time::Duration;

/// The constant part of the drift allowance: the Redlock description adds 2 ms to
/// `ttl * drift_factor` to cover the millisecond granularity of Redis expiry.
pub(crate) const DRIFT_CONSTANT: Duration = Duration::from_millis(2);

/// Votes needed among `n` nodes: a strict majority, `n / 2 + 1`.
pub(crate) const fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// How much of `ttl` is set aside for clock drift between the nodes and the client:
/// `ttl * drift_factor + 2 ms`. `drift_factor` is validated to lie in `[0, 1)`.
pub(crate) fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    // `try_from_secs_f64` rejects NaN/negative/overflow instead of panicking like `mul_f64`.
    let proportional =
        Duration::try_from_secs_f64(ttl.as_secs_f64() * drift_factor).unwrap_or(Duration::MAX);
    proportional.saturating_add(DRIFT_CONSTANT)
}

/// Remaining validity of a lock set with `ttl` when `elapsed` has passed since just before
/// the first request was sent: `ttl - elapsed - drift(ttl)`, or `None` when that is not
/// strictly positive (the lock must then be treated as never acquired).
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift_factor: f64) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift(ttl, drift_factor))
        .filter(|v| !v.is_zero())
}

/// Whether a lock with this `ttl` can still be valid after one attempt that used its whole
/// per-node timeout. A TTL that fails this can never yield a usable lock on a slow node and
/// is rejected up front.
pub(crate) fn ttl_is_usable(ttl: Duration, drift_factor: f64, node_timeout: Duration) -> bool {
    validity(ttl, node_timeout, drift_factor).is_some()
}

/// What a fan-out can conclude from the votes it has so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Neither a majority of "yes" nor of "no" is certain yet.
    Pending,
    /// At least a quorum of nodes said yes.
    Reached,
    /// So many nodes said no (or failed) that a quorum of yes is impossible.
    Unreachable,
}

/// Running count of yes/no votes among `n` nodes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tally {
    n: usize,
    yes: usize,
    no: usize,
}

impl Tally {
    pub(crate) const fn new(n: usize) -> Self {
        Tally { n, yes: 0, no: 0 }
    }

    pub(crate) fn record(&mut self, yes: bool) -> Verdict {
        if yes {
            self.yes += 1;
        } else {
            self.no += 1;
        }
        self.verdict()
    }

    pub(crate) fn yes(&self) -> usize {
        self.yes
    }

    pub(crate) fn verdict(&self) -> Verdict {
        let q = quorum(self.n);
        if self.yes >= q {
            Verdict::Reached
        } else if self.n.saturating_sub(self.no) < q {
            // Even if every node still outstanding said yes we would stay below quorum.
            Verdict::Unreachable
        } else {
            Verdict::Pending
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn quorum_is_strict_majority() {
        let table = [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)];
        for (n, q) in table {
            assert_eq!(quorum(n), q, "n = {n}");
            // A quorum is more than half, and two quorums always intersect.
            assert!(2 * quorum(n) > n);
            assert!(quorum(n) + quorum(n) > n);
            // One fewer vote would not be a majority.
            assert!(2 * (quorum(n) - 1) <= n);
        }
    }

    #[test]
    fn drift_is_proportional_plus_two_ms() {
        assert_eq!(drift(MS(10_000), 0.01), MS(102));
        assert_eq!(drift(MS(1_000), 0.01), MS(12));
        assert_eq!(drift(MS(1_000), 0.0), MS(2));
        assert_eq!(drift(Duration::ZERO, 0.5), MS(2));
        assert_eq!(drift(MS(100), 0.5), MS(52));
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        // ttl 10 s, 1 % drift → 102 ms allowance.
        assert_eq!(validity(MS(10_000), MS(0), 0.01), Some(MS(9_898)));
        assert_eq!(validity(MS(10_000), MS(898), 0.01), Some(MS(9_000)));
        // Exactly used up is not valid: validity must be strictly positive.
        assert_eq!(validity(MS(10_000), MS(9_898), 0.01), None);
        assert_eq!(
            validity(MS(10_000), MS(9_897), 0.01),
            Some(MS(1)),
            "one millisecond left is still valid"
        );
        assert_eq!(validity(MS(10_000), MS(20_000), 0.01), None);
        assert_eq!(validity(Duration::ZERO, Duration::ZERO, 0.01), None);
        assert_eq!(validity(MS(2), Duration::ZERO, 0.0), None);
        assert_eq!(validity(MS(3), Duration::ZERO, 0.0), Some(MS(1)));
    }

    #[test]
    fn usable_ttl_accounts_for_node_timeout() {
        assert!(ttl_is_usable(MS(10_000), 0.01, MS(50)));
        assert!(!ttl_is_usable(MS(50), 0.01, MS(50)));
        assert!(!ttl_is_usable(MS(52), 0.0, MS(50)));
        assert!(ttl_is_usable(MS(53), 0.0, MS(50)));
        assert!(!ttl_is_usable(Duration::ZERO, 0.0, Duration::ZERO));
    }

    #[test]
    fn tally_decides_as_soon_as_certain() {
        for n in 1..=7 {
            let q = quorum(n);
            // All yes: reached exactly on the q-th vote, pending before.
            let mut t = Tally::new(n);
            for i in 1..=n {
                let v = t.record(true);
                if i < q {
                    assert_eq!(v, Verdict::Pending, "n={n} yes={i}");
                } else {
                    assert_eq!(v, Verdict::Reached, "n={n} yes={i}");
                }
            }
            // All no: unreachable exactly when n - no < q.
            let mut t = Tally::new(n);
            let first_fatal = n - q + 1;
            for i in 1..=n {
                let v = t.record(false);
                if i < first_fatal {
                    assert_eq!(v, Verdict::Pending, "n={n} no={i}");
                } else {
                    assert_eq!(v, Verdict::Unreachable, "n={n} no={i}");
                }
            }
            // Minority failures never stop a later majority.
            let mut t = Tally::new(n);
            for _ in 0..(n - q) {
                assert_eq!(t.record(false), Verdict::Pending, "n={n}");
            }
            for i in 1..=q {
                let v = t.record(true);
                assert_eq!(v == Verdict::Reached, i == q, "n={n} yes={i}");
            }
            assert_eq!(t.yes(), q);
        }
    }

    #[test]
    fn single_node_is_a_plain_lock() {
        let mut t = Tally::new(1);
        assert_eq!(t.verdict(), Verdict::Pending);
        assert_eq!(t.record(true), Verdict::Reached);
        let mut t = Tally::new(1);
        assert_eq!(t.record(false), Verdict::Unreachable);
    }
}
