//! The waiting protocol's own state between attempts, as pure transitions: whether the next
//! attempt asks the waiting-list node first (the gate), whether it follows a wake-up (and
//! so rejoins the list at its head on failure), how many quick retries a wake-up still
//! allows, and what a failed attempt leads to. No I/O, no clock: [`super::Waiting`] does
//! the listening, sleeping and asking around these.

use std::time::Duration;

/// How many times a woken waiter retries at once when its attempt fails, and after how
/// long: enough for the release that woke it to reach the other nodes, well inside the head
/// start the releasing client gives it.
pub(crate) const QUICK_RETRIES: u32 = 2;
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
    /// Quick retries left since the last wake-up.
    quick: u32,
    /// The coming attempt is the one made at once after this call started listening: the
    /// call's first listed attempt, ungated as a first attempt is.
    listened: bool,
}

/// How the next attempt is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Next {
    /// It follows a wake-up: rejoin the list at its head if it fails.
    pub(crate) front: bool,
    /// Ask the waiting-list node first (when listed there), so a waiter that no release
    /// woke does not take the lock from under the client a release woke.
    pub(crate) gated: bool,
}

/// What follows a failed attempt that still has time left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Start listening for releases, then try again at once.
    Listen,
    /// Woken, yet failed: retry after [`QUICK_RETRY_DELAY`], still at the head.
    QuickRetry,
    /// Wait for a wake-up or the next poll, whose backoff starts `shift` doublings later.
    Wait {
        /// Extra doublings of the poll delay.
        shift: u32,
    },
}

impl WaitState {
    /// The state of a fresh `lock()` call; `courtesy` when it starts gated (see
    /// [`WaitState::gate`]).
    pub(crate) fn new(courtesy: bool) -> Self {
        WaitState {
            gate: courtesy,
            ..WaitState::default()
        }
    }

    /// The coming attempt, the `attempt`-th of this call (from 1).
    pub(crate) fn next(&mut self, attempt: u32) -> Next {
        let front = std::mem::take(&mut self.front);
        let first = attempt <= 1 || std::mem::take(&mut self.listened);
        let gated = std::mem::take(&mut self.gate) || (!first && !front);
        Next { front, gated }
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
        if self.quick > 0 && listening {
            self.quick -= 1;
            self.front = true;
            return AfterFailure::QuickRetry;
        }
        let shift = if listed { LISTED_POLL_SHIFT } else { 0 };
        AfterFailure::Wait { shift }
    }

    /// A release woke this client.
    pub(crate) fn woken(&mut self) {
        self.front = true;
        self.quick = QUICK_RETRIES;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let mut s = WaitState::new(courtesy);
            if woken {
                s.woken();
            }
            assert_eq!(
                s.next(attempt),
                Next { front, gated },
                "{courtesy} {woken} {attempt}"
            );
            // Both flags are spent by one attempt.
            assert!(!s.next(attempt).front);
            assert!(!s.next(1).gated);
        }
    }

    #[test]
    fn failures_listen_first_then_quick_retries_then_wait() {
        let mut s = WaitState::new(false);
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
        for _ in 0..QUICK_RETRIES {
            assert_eq!(s.failed(false, true, true), AfterFailure::QuickRetry);
            // A quick retry keeps the head of the list and is not gated.
            assert_eq!(
                s.next(3),
                Next {
                    front: true,
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
                gated: true
            }
        );
    }

    #[test]
    fn the_attempt_right_after_listening_is_not_gated() {
        // A call that did not listen yet failed its first (plain) attempt: it listens and
        // tries again at once, as the first attempt of a listening call would, ungated.
        let mut s = WaitState::new(false);
        assert!(!s.next(1).gated);
        assert_eq!(s.failed(true, false, false), AfterFailure::Listen);
        assert_eq!(
            s.next(2),
            Next {
                front: false,
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
    fn quick_retries_need_listening() {
        let mut s = WaitState::new(false);
        s.woken();
        assert_eq!(
            s.failed(false, false, false),
            AfterFailure::Wait { shift: 0 }
        );
        assert_eq!(s.failed(true, false, false), AfterFailure::Listen);
    }
}
