//! When `run` extends its lock and when it stops the program: pure arithmetic on the lock's
//! validity deadline, the grace period and a margin for SIGKILL to take effect, so that the
//! program is dead before the lock's validity ends and the next holder cannot overlap it.
//!
//! The program is sent SIGTERM when the remaining validity falls to `grace + KILL_MARGIN`
//! without a successful extension, and SIGKILL `KILL_MARGIN` before the validity ends. With
//! extension, the extensions are tried during the first half of the validity that is left
//! after `grace + KILL_MARGIN`, so a failing node set is noticed while the program still has
//! its whole grace period.

use std::time::Duration;

use quorum_lock::RedlockBuilder;
use tokio::time::Instant;

use crate::duration::{display, human};

/// SIGKILL goes this long before the lock's validity ends: time for the signal to be
/// delivered and the program to die even when the host is busy.
pub(crate) const KILL_MARGIN: Duration = Duration::from_millis(100);

/// Default grace period: this, or a third of the TTL when that is less.
const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// With extension, the validity left after `grace + KILL_MARGIN` must hold this many node
/// timeouts: half of it is spent waiting, the other half leaves room for two attempts.
const MIN_EXTEND_WINDOW: u32 = 4;

/// The longest validity a lock with `ttl` can have: `ttl - (ttl * drift + 2 ms)`, the
/// library's formula with its default drift factor and no time spent acquiring.
pub(crate) fn max_validity(ttl: Duration) -> Duration {
    let drift =
        Duration::try_from_secs_f64(ttl.as_secs_f64() * RedlockBuilder::DEFAULT_DRIFT_FACTOR)
            .unwrap_or(Duration::MAX)
            .saturating_add(Duration::from_millis(2));
    ttl.saturating_sub(drift)
}

/// The validated timing of one `run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Time between SIGTERM and SIGKILL, at most.
    pub(crate) grace: Duration,
    /// `grace + KILL_MARGIN`: the validity left when SIGTERM is due.
    stop: Duration,
    /// How long before SIGTERM would be due the first extension is tried; `None` with
    /// `--no-extend`.
    lead: Option<Duration>,
}

impl Plan {
    /// Checks that `grace` (or the default when `None`) fits in the validity of `ttl`, with
    /// room to extend when `extend` is set; the error is a sentence for the user.
    pub(crate) fn new(
        ttl: Duration,
        grace: Option<Duration>,
        extend: bool,
        node_timeout: Duration,
    ) -> Result<Plan, String> {
        let (grace, named) = match grace {
            Some(g) => (g, format!("--grace {}", display(g))),
            None => {
                let g = DEFAULT_GRACE.min(ttl / 3);
                (g, format!("the default --grace of {}", display(g)))
            }
        };
        let validity = max_validity(ttl);
        let fits = grace
            .checked_add(KILL_MARGIN)
            .filter(|stop| *stop < validity);
        let Some(stop) = fits else {
            let most = validity.saturating_sub(KILL_MARGIN);
            if most.is_zero() {
                return Err(format!(
                    "--ttl {} is too short for run: its validity (at most {}) must outlast \
                     the {} by which SIGKILL precedes its end; use a longer --ttl",
                    display(ttl),
                    display(validity),
                    human(KILL_MARGIN)
                ));
            }
            return Err(format!(
                "{named} does not fit in --ttl {}: the program must be dead before the lock's \
                 validity ends (at most {} after it is taken), and SIGKILL goes {} before \
                 that; use a --grace below {} or a longer --ttl",
                display(ttl),
                display(validity),
                human(KILL_MARGIN),
                display(most)
            ));
        };
        if !extend {
            return Ok(Plan {
                grace,
                stop,
                lead: None,
            });
        }
        let window = validity - stop;
        let needed = node_timeout.saturating_mul(MIN_EXTEND_WINDOW);
        if window < needed {
            return Err(format!(
                "{named} leaves {} of --ttl {}'s validity to extend the lock in before \
                 SIGTERM is due, less than {MIN_EXTEND_WINDOW} node timeouts ({}): use a \
                 shorter --grace, a longer --ttl, a shorter --node-timeout or --no-extend",
                human(window),
                display(ttl),
                human(needed)
            ));
        }
        Ok(Plan {
            grace,
            stop,
            lead: Some(window / 2),
        })
    }

    /// `grace + KILL_MARGIN`: the validity the program must be stopped within.
    pub(crate) fn stop_budget(&self) -> Duration {
        self.stop
    }

    /// Whether the lock is extended.
    pub(crate) fn extends(&self) -> bool {
        self.lead.is_some()
    }

    /// When SIGTERM is due for a lock whose validity ends at `deadline`, unless an
    /// extension moves the deadline first: `grace + margin` before it, where `margin` is
    /// [`KILL_MARGIN`] widened by the supervisor's measured lateness (`lag`). `now` when
    /// that moment cannot be represented.
    pub(crate) fn term_at(&self, deadline: Instant, now: Instant, margin: Duration) -> Instant {
        deadline
            .checked_sub(self.grace.saturating_add(margin))
            .unwrap_or(now)
    }

    /// When SIGKILL is due for a program sent SIGTERM at `termed`: after the grace period,
    /// but never later than `margin` before the validity ends at `deadline`.
    pub(crate) fn kill_at(&self, deadline: Instant, termed: Instant, margin: Duration) -> Instant {
        let last = deadline.checked_sub(margin).unwrap_or(termed);
        termed.checked_add(self.grace).map_or(last, |k| k.min(last))
    }

    /// When the next extension is due for a lock whose validity ends at `deadline`;
    /// `None` with `--no-extend`.
    pub(crate) fn extend_at(&self, deadline: Instant, now: Instant) -> Option<Instant> {
        let lead = self.lead?;
        let term_at = deadline.checked_sub(self.stop).unwrap_or(now);
        Some(term_at.checked_sub(lead).unwrap_or(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const NT: Duration = Duration::from_millis(50);

    #[test]
    fn max_validity_is_the_library_formula() {
        assert_eq!(max_validity(MS(30_000)), MS(30_000 - 300 - 2));
        assert_eq!(max_validity(MS(2000)), MS(2000 - 20 - 2));
        assert_eq!(max_validity(MS(1)), Duration::ZERO);
        assert!(max_validity(Duration::MAX) < Duration::MAX);
    }

    #[test]
    fn default_grace_is_ten_seconds_or_a_third_of_the_ttl() {
        let plan = Plan::new(MS(30_000), None, true, NT).unwrap();
        assert_eq!(plan.grace, MS(10_000));
        assert_eq!(plan.stop_budget(), MS(10_100));
        // 29.698 s of validity, 10.1 s kept for stopping: extend 9.799 s before SIGTERM.
        assert_eq!(plan.lead, Some(MS(19_598) / 2));
        let plan = Plan::new(MS(60_000), None, true, NT).unwrap();
        assert_eq!(plan.grace, MS(10_000));
        let plan = Plan::new(MS(1500), None, false, NT).unwrap();
        assert_eq!(plan.grace, MS(500));
        assert_eq!(plan.lead, None);
        assert!(!plan.extends());
    }

    #[test]
    fn a_grace_that_cannot_fit_is_refused_with_the_numbers() {
        let err = Plan::new(MS(2000), Some(MS(2000)), false, NT).unwrap_err();
        assert!(err.contains("--grace 2s does not fit in --ttl 2s"), "{err}");
        assert!(err.contains("at most 1978ms after it is taken"), "{err}");
        assert!(err.contains("below 1878ms"), "{err}");
        // The boundary: grace + margin must stay strictly below the validity.
        assert!(Plan::new(MS(2000), Some(MS(1878)), false, NT).is_err());
        assert!(Plan::new(MS(2000), Some(MS(1877)), false, NT).is_ok());
        for huge in [
            Duration::MAX,
            Duration::from_secs(u64::MAX / 2),
            MS(u64::MAX),
        ] {
            let err = Plan::new(MS(30_000), Some(huge), true, NT).unwrap_err();
            assert!(err.contains("does not fit"), "{err}");
        }
        let err = Plan::new(MS(100), None, false, NT).unwrap_err();
        assert_eq!(
            err,
            "--ttl 100ms is too short for run: its validity (at most 97ms) must outlast the \
             100ms by which SIGKILL precedes its end; use a longer --ttl"
        );
        let err = Plan::new(MS(150), None, false, NT).unwrap_err();
        assert!(
            err.contains("the default --grace of 50ms does not fit"),
            "{err}"
        );
        assert!(err.contains("below 46ms"), "{err}");
    }

    #[test]
    fn extension_needs_room_before_sigterm() {
        // 2 s TTL, 1.5 s grace: 1.978 - 1.6 = 378 ms left, below four 200 ms timeouts.
        let err = Plan::new(MS(2000), Some(MS(1500)), true, MS(200)).unwrap_err();
        assert!(err.contains("leaves 378ms"), "{err}");
        assert!(err.contains("less than 4 node timeouts (800ms)"), "{err}");
        // The same without extension is fine: the program gets 378 ms before SIGTERM.
        assert!(Plan::new(MS(2000), Some(MS(1500)), false, MS(200)).is_ok());
        assert!(Plan::new(MS(2000), Some(MS(1500)), true, MS(50)).is_ok());
    }

    #[test]
    fn sigkill_lands_before_the_deadline_and_sigterm_a_grace_earlier() {
        let plan = Plan::new(MS(2000), Some(MS(500)), true, NT).unwrap();
        let now = Instant::now();
        let deadline = now + MS(1978);
        assert_eq!(plan.term_at(deadline, now, KILL_MARGIN), deadline - MS(600));
        assert_eq!(
            plan.kill_at(
                deadline,
                plan.term_at(deadline, now, KILL_MARGIN),
                KILL_MARGIN
            ),
            deadline - KILL_MARGIN
        );
        // Extensions start halfway through the 1.378 s before SIGTERM.
        assert_eq!(
            plan.extend_at(deadline, now),
            Some(deadline - MS(600) - MS(689))
        );
        // Lost early (another owner took it): the full grace, if it ends in time.
        assert_eq!(plan.kill_at(deadline, now, KILL_MARGIN), now + MS(500));
        // Lost late: SIGKILL still lands before the validity ends.
        let late = deadline - MS(300);
        assert_eq!(
            plan.kill_at(deadline, late, KILL_MARGIN),
            deadline - KILL_MARGIN
        );
        // Past the deadline already: at once.
        assert_eq!(
            plan.kill_at(deadline, deadline + MS(5), KILL_MARGIN),
            deadline - KILL_MARGIN
        );
        let no_extend = Plan::new(MS(2000), Some(MS(500)), false, NT).unwrap();
        assert_eq!(no_extend.extend_at(deadline, now), None);
    }
}
