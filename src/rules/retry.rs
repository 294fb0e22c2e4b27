//! Retry delays between acquisition attempts: capped exponential backoff with jitter.
//!
//! Pure: the random draw is an argument, so the schedule is unit-tested without a clock.

use std::time::Duration;

/// How long `lock()` sleeps between two failed attempts.
///
/// The n-th retry (counting from 0) waits a uniformly random time in
/// `[d / 2, d]` where `d = min(max_delay, base_delay * 2^n)` ("equal jitter"): waiters that
/// failed together spread out, and the wait never collapses to zero unless `base_delay` is
/// zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub(crate) base_delay: Duration,
    pub(crate) max_delay: Duration,
}

impl RetryPolicy {
    /// Default first delay: 10 ms.
    pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(10);
    /// Default cap on any single delay: 200 ms.
    pub const DEFAULT_MAX_DELAY: Duration = Duration::from_millis(200);

    pub(crate) const fn new(base_delay: Duration, max_delay: Duration) -> Self {
        RetryPolicy {
            base_delay,
            max_delay,
        }
    }

    /// The delay before retry number `retry` (0 for the first retry), given a uniform
    /// random `unit` in `[0, 1)`. Values of `unit` outside that range are clamped.
    pub(crate) fn delay(&self, retry: u32, unit: f64) -> Duration {
        let cap = self.cap(retry);
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let half = cap / 2;
        // `cap - half` rather than `half` so odd nanosecond counts still reach `cap`. The
        // product is computed in floating point, which may round above `cap - half`: keep
        // it below (and never panic, as `mul_f64` does on overflow).
        let upper = cap - half;
        let jitter = Duration::try_from_secs_f64(upper.as_secs_f64() * unit).unwrap_or(upper);
        half.saturating_add(jitter.min(upper))
    }

    /// How long the turn that a wake-up gives its client lasts on a node: two node
    /// timeouts (the woken client's attempt starts within one and lands within the next),
    /// at least a millisecond.
    pub(crate) fn turn_lifetime(node_timeout: Duration) -> Duration {
        node_timeout.saturating_mul(2).max(Duration::from_millis(1))
    }

    /// How long a waiting writer's intent lasts on a node: it keeps new readers out only
    /// while the writer waits, and the writer tries again at least every
    /// [`max_delay`](Self::max_delay) plus a round (within `node_timeout`), each try
    /// setting it anew; so it lasts four such periods (room for a busy host's late
    /// timers), and never longer than the writer's `ttl`: one second with the defaults. A
    /// writer that is gone (killed, its future dropped before its clean-up) keeps readers
    /// out that long, not for its whole TTL.
    pub(crate) fn intent_lifetime(&self, ttl: Duration, node_timeout: Duration) -> Duration {
        self.max_delay
            .saturating_add(node_timeout)
            .saturating_mul(4)
            .min(ttl)
    }

    /// The upper bound of the delay before retry number `retry`.
    fn cap(&self, retry: u32) -> Duration {
        // 2^retry saturates: beyond 2^31 any base exceeds any sensible cap anyway.
        let factor = 1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX);
        self.base_delay
            .checked_mul(factor)
            .unwrap_or(Duration::MAX)
            .min(self.max_delay)
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::new(Self::DEFAULT_BASE_DELAY, Self::DEFAULT_MAX_DELAY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_writer_intent_outlives_four_retry_periods_and_never_its_ttl() {
        let policy = RetryPolicy::new(MS(10), MS(200));
        assert_eq!(policy.intent_lifetime(MS(30_000), MS(50)), MS(1000));
        assert_eq!(policy.intent_lifetime(MS(300), MS(50)), MS(300));
        let forever = RetryPolicy::new(MS(10), Duration::MAX);
        assert_eq!(forever.intent_lifetime(MS(30_000), MS(50)), MS(30_000));
    }

    #[test]
    fn delays_grow_exponentially_up_to_the_cap() {
        let p = RetryPolicy::new(MS(10), MS(200));
        let table = [
            (0, 10),
            (1, 20),
            (2, 40),
            (3, 80),
            (4, 160),
            (5, 200),
            (6, 200),
        ];
        for (retry, cap) in table {
            assert_eq!(p.delay(retry, 1.0), MS(cap), "upper bound of retry {retry}");
            assert_eq!(
                p.delay(retry, 0.0),
                MS(cap) / 2,
                "lower bound of retry {retry}"
            );
            let mid = p.delay(retry, 0.5);
            assert!(mid > MS(cap) / 2 && mid < MS(cap), "retry {retry}: {mid:?}");
        }
        assert_eq!(
            p.delay(u32::MAX, 1.0),
            MS(200),
            "huge retry counts saturate"
        );
    }

    #[test]
    fn odd_configurations_never_panic() {
        let zero = RetryPolicy::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(zero.delay(0, 0.7), Duration::ZERO);
        assert_eq!(zero.delay(1000, 0.7), Duration::ZERO);
        let huge = RetryPolicy::new(Duration::MAX, Duration::MAX);
        assert_eq!(huge.delay(40, 1.0), Duration::MAX);
        let p = RetryPolicy::default();
        assert_eq!(p.delay(0, f64::NAN), MS(5));
        assert_eq!(p.delay(0, -3.0), MS(5));
        assert_eq!(p.delay(0, 7.0), MS(10));
        // A cap below the base wins.
        let inverted = RetryPolicy::new(MS(100), MS(30));
        assert_eq!(inverted.delay(0, 1.0), MS(30));
    }
}
