//! Opt-in auto-extension: a background task that keeps a lock's validity from running out
//! while its holder works, within a budget.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;
use crate::error::LostReason;
use crate::held::lease::Lease;

/// How a held lock is extended in the background.
///
/// Extensions reset the TTL on every node to the lock's TTL. They start when the remaining
/// validity falls below a margin derived from the measured round trip and the node
/// timeout (and at least a third of the TTL), are retried while validity remains, and stop
/// for good when the budget is spent, when a majority reports the lock taken, or when the
/// guard is released or dropped. A failed extension never releases the lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AutoExtend {
    /// Stop after this many successful extensions. `None`: no limit.
    pub max_extensions: Option<u32>,
    /// Never extend past this long after the acquisition. `None`: no limit.
    pub max_hold: Option<Duration>,
}

impl AutoExtend {
    /// Unlimited auto-extension (the lock is held until released, dropped or lost).
    pub fn new() -> Self {
        AutoExtend::default()
    }

    /// Caps the number of extensions.
    pub fn max_extensions(mut self, n: u32) -> Self {
        self.max_extensions = Some(n);
        self
    }

    /// Caps the total hold time: the last extension is shortened so the lock expires at
    /// most this long after it was acquired. `Duration::MAX` sets no limit.
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.max_hold = Some(hold);
        self
    }
}

/// How long before the deadline an extension starts: enough for a few round trips and a
/// retry after one node timeout, at least a third of the TTL, at most half of it so a
/// short TTL is not extended in a tight loop.
pub(crate) fn extend_margin(ttl: Duration, rtt: Duration, node_timeout: Duration) -> Duration {
    let needed = rtt
        .saturating_mul(4)
        .saturating_add(node_timeout.saturating_mul(2));
    needed.max(ttl / 3).min(ttl / 2)
}

/// Exponentially smoothed round-trip estimate (weight 1/2 on the newest sample).
pub(crate) fn smooth_rtt(previous: Duration, sample: Duration) -> Duration {
    previous / 2 + sample / 2
}

/// The TTL for the next extension under a hold budget: `ttl`, shortened so the lock ends
/// at `acquired + max_hold`; `None` when the budget is spent.
pub(crate) fn budgeted_ttl(
    ttl: Duration,
    now: Instant,
    acquired: Instant,
    policy: &AutoExtend,
    extensions: u32,
) -> Option<Duration> {
    if policy.max_extensions.is_some_and(|max| extensions >= max) {
        return None;
    }
    match policy.max_hold {
        None => Some(ttl),
        Some(hold) => {
            // A hold too long to represent is no limit: "forever".
            let Some(end) = acquired.checked_add(hold) else {
                return Some(ttl);
            };
            let left = end.saturating_duration_since(now);
            (!left.is_zero()).then(|| ttl.min(left))
        }
    }
}

/// The extender: runs until the budget is spent or the lock is lost; aborted by the guard
/// on release or drop.
pub(crate) async fn run(lease: Arc<Lease>, policy: AutoExtend, acquired: Instant, rtt: Duration) {
    let node_timeout = lease.ensemble.config.node_timeout;
    let retry_pause = node_timeout.max(Duration::from_millis(1));
    let mut rtt = rtt;
    let mut extensions = 0u32;
    loop {
        let state = lease.state();
        if state.lost.is_some() {
            return;
        }
        let margin = extend_margin(state.ttl, rtt, node_timeout);
        tokio::time::sleep_until(state.deadline.checked_sub(margin).unwrap_or(state.deadline))
            .await;
        // Retry transient failures while validity remains.
        loop {
            let now = Instant::now();
            let Some(ttl) = budgeted_ttl(state.ttl, now, acquired, &policy, extensions) else {
                tracing::debug!(resources = ?lease.resources, extensions, "auto-extension budget spent");
                return;
            };
            if lease.validity().is_zero() {
                lease.mark_lost(LostReason::Expired);
                return;
            }
            let started = Instant::now();
            match lease.extend(ttl).await {
                Ok(_) => {
                    extensions = extensions.saturating_add(1);
                    rtt = smooth_rtt(rtt, started.elapsed());
                    break;
                }
                Err(Error::NotHeld { .. }) => {
                    lease.mark_lost(LostReason::NotHeld);
                    return;
                }
                Err(Error::Config(msg)) => {
                    // A budget-shortened TTL too small to be usable: the budget is spent.
                    tracing::debug!(resources = ?lease.resources, %msg, "auto-extension stopped");
                    return;
                }
                Err(e) => {
                    let left = lease.validity();
                    // The first failure raises the early warning, while validity remains.
                    lease.mark_at_risk(left);
                    // Not enough validity for another try to complete: say so now, while the
                    // lock is still held, so the work under it can stop in time.
                    if left <= node_timeout.saturating_mul(2) {
                        tracing::debug!(resources = ?lease.resources, error = %e, "extension failed; lock about to expire");
                        lease.mark_lost(LostReason::Expired);
                        return;
                    }
                    tracing::debug!(resources = ?lease.resources, error = %e, "extension failed; retrying");
                    tokio::time::sleep(retry_pause.min(left / 4)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn margin_follows_round_trip_within_bounds() {
        // Long TTL, fast network: a third of the TTL.
        assert_eq!(extend_margin(MS(30_000), MS(1), MS(50)), MS(10_000));
        // Short TTL: the round trip and node timeout dominate.
        assert_eq!(extend_margin(MS(600), MS(20), MS(50)), MS(200));
        assert_eq!(extend_margin(MS(900), MS(40), MS(100)), MS(360));
        // Never more than half the TTL.
        assert_eq!(extend_margin(MS(200), MS(100), MS(100)), MS(100));
        assert_eq!(extend_margin(Duration::ZERO, MS(5), MS(5)), Duration::ZERO);
        assert_eq!(
            extend_margin(Duration::MAX, Duration::MAX, Duration::MAX),
            Duration::MAX / 2
        );
    }

    #[test]
    fn rtt_smoothing_moves_halfway() {
        assert_eq!(smooth_rtt(MS(10), MS(20)), MS(15));
        assert_eq!(smooth_rtt(MS(0), MS(8)), MS(4));
    }

    #[test]
    fn budget_limits_count_and_hold() {
        let t0 = Instant::now();
        let unlimited = AutoExtend::new();
        assert_eq!(
            budgeted_ttl(MS(1000), t0, t0, &unlimited, 1_000_000),
            Some(MS(1000))
        );
        let counted = AutoExtend::new().max_extensions(2);
        assert_eq!(budgeted_ttl(MS(1000), t0, t0, &counted, 1), Some(MS(1000)));
        assert_eq!(budgeted_ttl(MS(1000), t0, t0, &counted, 2), None);
        let held = AutoExtend::new().max_hold(MS(2500));
        assert_eq!(
            budgeted_ttl(MS(1000), t0 + MS(1000), t0, &held, 0),
            Some(MS(1000))
        );
        assert_eq!(
            budgeted_ttl(MS(1000), t0 + MS(2000), t0, &held, 0),
            Some(MS(500))
        );
        assert_eq!(budgeted_ttl(MS(1000), t0 + MS(2500), t0, &held, 0), None);
        assert_eq!(budgeted_ttl(MS(1000), t0 + MS(9000), t0, &held, 0), None);
    }
}
