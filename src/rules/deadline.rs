//! Instants a duration after another, for durations up to `Duration::MAX`: "forever" is a
//! deadline that never comes, never an overflow; and whether an answer came before its
//! round's deadline. Pure: the instants come in as arguments.

use std::time::Duration;

use tokio::time::Instant;

/// Thirty years: later than any deadline this crate waits for, and far enough below the
/// clock's range that adding it to a monotonic instant never overflows.
const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);

/// `start + by`, or a far-future instant when that is not representable (or `by` is
/// beyond [`FAR`]): a wait that long is a wait for ever.
pub(crate) fn after(start: Instant, by: Duration) -> Instant {
    start
        .checked_add(by.min(FAR))
        .or_else(|| start.checked_add(FAR))
        .unwrap_or(start)
}

/// Whether an answer read at `read_at` came in time for a round that ends at `deadline`:
/// only strictly before it. An answer read at the deadline or later does not vote, however
/// it came to be read so late (a client that stalls past the deadline finds its answers
/// ready before its timer fires).
pub(crate) fn is_in_time(read_at: Instant, deadline: Instant) -> bool {
    read_at < deadline
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_waits_end_far_away_without_overflow() {
        let now = Instant::now();
        assert_eq!(after(now, Duration::ZERO), now);
        assert_eq!(
            after(now, Duration::from_millis(5)),
            now + Duration::from_millis(5)
        );
        assert_eq!(after(now, Duration::MAX), now + FAR);
        assert_eq!(after(now, Duration::from_secs(u64::MAX)), now + FAR);
        assert!(after(now, FAR - Duration::from_nanos(1)) < after(now, Duration::MAX));
    }

    #[test]
    fn an_answer_read_at_the_deadline_or_later_is_late() {
        let deadline = Instant::now() + Duration::from_millis(50);
        let ns = Duration::from_nanos(1);
        assert!(is_in_time(deadline - Duration::from_millis(50), deadline));
        assert!(is_in_time(deadline - ns, deadline));
        assert!(!is_in_time(deadline, deadline));
        assert!(!is_in_time(deadline + ns, deadline));
        assert!(!is_in_time(deadline + Duration::from_secs(3), deadline));
    }
}
