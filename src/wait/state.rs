//! The waiting protocol's own state between attempts, as pure transitions: whether the next
//! attempt asks the waiting-list node first (the gate), whether it follows a wake-up (and
//! so rejoins the list at its head on failure), how many quick retries a wake-up still
//! allows, and what a failed attempt leads to. No I/O, no clock: [`super::Waiting`] does
//! the listening, sleeping and asking around these.

use std::time::Duration;

/// How long after a failed attempt a woken waiter first retries; each further quick retry
/// waits twice as long. The release that woke it (on the waiting-list node) may not have
/// reached the other nodes when the attempt did: its messages there arrive within the
/// releasing client's node timeout or not at all, so the quick retries sleep at most one
/// node timeout in all (see [`WaitState::new`]) before the waiter waits for the next
/// release or poll.
pub(crate) const QUICK_RETRY_DELAY: Duration = Duration::from_millis(1);

/// How many doublings later a waiter's polls start while it is known to be in a waiting
/// list and listens: a release then wakes it, and its polls only cover silent releases
/// (expiry, a client with notifications off, a lost message). Every poll of a queued
/// waiter costs a gate round trip that a hand-off in progress refuses.
pub(crate) const LISTED_POLL_SHIFT: u32 = 2;

/// Where a waiter stands between two attempts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct WaitState {
    /// The next attempt asks the waiting-list node first: this client just handed the keys
    /// to a waiting client, which goes first.
    gate: bool,
    /// The coming attempt follows a wake-up (a release chose us) or a quick retry after
    /// one: a failure then puts us back at the head of the waiting list.
    front: bool,
    /// The coming attempt follows a wake-up itself: the release popped our entry.
    popped: bool,
    /// The quick retries the last wake-up still allows.
    quick: QuickRetries,
    /// The coming attempt is the one made at once after this call started listening: the
    /// call's first listed attempt, ungated as a first attempt is.
    listened: bool,
}

/// The quick retries of a woken waiter whose attempt failed: from [`QUICK_RETRY_DELAY`],
/// doubling, for at most a window (the node timeout) in all since the wake-up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QuickRetries {
    /// The next one's delay.
    delay: Duration,
    /// How long they may still sleep.
    left: Duration,
    /// How long they may sleep in all after one wake-up.
    window: Duration,
}

impl QuickRetries {
    /// None allowed until [`QuickRetries::woken`]; `window` for each wake-up.
    pub(crate) fn new(window: Duration) -> Self {
        QuickRetries {
            window,
            ..QuickRetries::default()
        }
    }

    /// A release woke the waiter: the quick retries start afresh.
    pub(crate) fn woken(&mut self) {
        self.delay = QUICK_RETRY_DELAY;
        self.left = self.window;
    }

    /// The delay before the next quick retry, or `None` once the window is spent.
    pub(crate) fn next_delay(&mut self) -> Option<Duration> {
        if self.left.is_zero() {
            return None;
        }
        let delay = self.delay.min(self.left);
        self.left = self.left.saturating_sub(delay);
        self.delay = self.delay.saturating_mul(2);
        Some(delay)
    }
}

/// How the next attempt is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Next {
    /// It follows a wake-up: rejoin the list at its head if it fails.
    pub(crate) front: bool,
    /// It is the attempt right after a wake-up, whose release popped our entry (see
    /// `Enqueue::lists`).
    pub(crate) popped: bool,
    /// Ask the waiting-list node first (when listed there), so a waiter that no release
    /// woke does not take the lock from under the client a release woke.
    pub(crate) gated: bool,
}

/// What follows a failed attempt that still has time left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Start listening for releases, then try again at once.
    Listen,
    /// Woken, yet failed: retry after `delay` (from [`QUICK_RETRY_DELAY`], doubling),
    /// still at the head.
    QuickRetry {
        /// How long to wait first.
        delay: Duration,
    },
    /// Wait for a wake-up or the next poll, whose backoff starts `shift` doublings later.
    Wait {
        /// Extra doublings of the poll delay.
        shift: u32,
    },
}

impl WaitState {
    /// The state of a fresh `lock()` call; `courtesy` when it starts gated (see
    /// [`WaitState::gate`]); the quick retries after a wake-up sleep at most
    /// `quick_window` in all (the node timeout).
    pub(crate) fn new(courtesy: bool, quick_window: Duration) -> Self {
        WaitState {
            gate: courtesy,
            quick: QuickRetries::new(quick_window),
            ..WaitState::default()
        }
    }

    /// The coming attempt, the `attempt`-th of this call (from 1).
    pub(crate) fn next(&mut self, attempt: u32) -> Next {
        let front = std::mem::take(&mut self.front);
        let popped = std::mem::take(&mut self.popped);
        let first = attempt <= 1 || std::mem::take(&mut self.listened);
        let gated = std::mem::take(&mut self.gate) || (!first && !front);
        Next {
            front,
            popped,
            gated,
        }
    }

    /// After a failed attempt: `can_listen` when notifications are on but this call does
    /// not listen yet, `listening` when it does, `listed` when the waiting-list node
    /// answered (so this client is in its list).
    pub(crate) fn failed(
        &mut self,
        can_listen: bool,
        listening: bool,
        listed: bool,
    ) -> AfterFailure {
        if can_listen {
            self.listened = true;
            return AfterFailure::Listen;
        }
        if let Some(delay) = listening.then(|| self.quick.next_delay()).flatten() {
            self.front = true;
            return AfterFailure::QuickRetry { delay };
        }
        let shift = if listed { LISTED_POLL_SHIFT } else { 0 };
        AfterFailure::Wait { shift }
    }

    /// A release woke this client.
    pub(crate) fn woken(&mut self) {
        self.front = true;
        self.popped = true;
        self.quick.woken();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_millis(50);

    #[test]
    fn next_attempt_gates() {
        // (courtesy, woken before, attempt) -> (front, gated)
        let table = [
            (false, false, 1, false, false),
            (true, false, 1, false, true),
            (false, false, 2, false, true),
            (false, true, 2, true, false),
            (true, true, 2, true, true),
            (false, true, 1, true, false),
        ];
        for (courtesy, woken, attempt, front, gated) in table {
            let mut s = WaitState::new(courtesy, WINDOW);
            if woken {
                s.woken();
            }
            assert_eq!(
                s.next(attempt),
                Next {
                    front,
                    popped: front,
                    gated
                },
                "{courtesy} {woken} {attempt}"
            );
            // Both flags are spent by one attempt.
            assert!(!s.next(attempt).front);
            assert!(!s.next(1).gated);
        }
    }

    #[test]
    fn failures_listen_first_then_quick_retries_then_wait() {
        let mut s = WaitState::new(false, WINDOW);
        assert_eq!(s.failed(true, false, false), AfterFailure::Listen);
        assert_eq!(
            s.failed(false, true, false),
            AfterFailure::Wait { shift: 0 }
        );
        assert_eq!(
            s.failed(false, true, true),
            AfterFailure::Wait {
                shift: LISTED_POLL_SHIFT
            }
        );
        s.woken();
        assert!(s.next(2).front);
        // 1 + 2 + 4 + 8 + 16 + 19 ms: doubling, and 50 ms in all.
        for delay in [1, 2, 4, 8, 16, 19].map(Duration::from_millis) {
            assert_eq!(
                s.failed(false, true, true),
                AfterFailure::QuickRetry { delay }
            );
            // A quick retry keeps the head of the list and is not gated; the failure's
            // clean-up put the entry back, so it is not popped.
            assert_eq!(
                s.next(3),
                Next {
                    front: true,
                    popped: false,
                    gated: false
                }
            );
        }
        assert_eq!(
            s.failed(false, true, true),
            AfterFailure::Wait {
                shift: LISTED_POLL_SHIFT
            }
        );
        assert_eq!(
            s.next(4),
            Next {
                front: false,
                popped: false,
                gated: true
            }
        );
    }

    #[test]
    fn the_attempt_right_after_listening_is_not_gated() {
        // A call that did not listen yet failed its first (plain) attempt: it listens and
        // tries again at once, as the first attempt of a listening call would, ungated.
        let mut s = WaitState::new(false, WINDOW);
        assert!(!s.next(1).gated);
        assert_eq!(s.failed(true, false, false), AfterFailure::Listen);
        assert_eq!(
            s.next(2),
            Next {
                front: false,
                popped: false,
                gated: false
            }
        );
        // Later attempts that no release woke are gated again.
        assert_eq!(
            s.failed(false, true, true),
            AfterFailure::Wait {
                shift: LISTED_POLL_SHIFT
            }
        );
        assert!(s.next(3).gated);
    }

    #[test]
    fn each_wake_up_starts_the_quick_retries_afresh() {
        let mut s = WaitState::new(false, Duration::from_millis(3));
        s.woken();
        let quick = |delay| AfterFailure::QuickRetry {
            delay: Duration::from_millis(delay),
        };
        assert_eq!(s.failed(false, true, true), quick(1));
        assert_eq!(s.failed(false, true, true), quick(2));
        assert!(matches!(
            s.failed(false, true, true),
            AfterFailure::Wait { .. }
        ));
        s.woken();
        assert_eq!(s.failed(false, true, true), quick(1));
        // No window, no quick retry.
        let mut none = WaitState::new(false, Duration::ZERO);
        none.woken();
        assert!(matches!(
            none.failed(false, true, true),
            AfterFailure::Wait { .. }
        ));
    }

    #[test]
    fn quick_retries_need_listening() {
        let mut s = WaitState::new(false, WINDOW);
        s.woken();
        assert_eq!(
            s.failed(false, false, false),
            AfterFailure::Wait { shift: 0 }
        );
        assert_eq!(s.failed(true, false, false), AfterFailure::Listen);
    }
}
