//! The rules of a member under Sentinel, pure so that `tests/model_sentinel.rs` checks the
//! decisions `net::sentinel` makes: which master a round of the sentinels' answers names,
//! whether a vote on the connection's master counts, and from when a promoted master is
//! quarantined.

use std::time::{Duration, Instant};

/// How long a sentinel majority's confirmation of the master's address lets the member's
/// votes count.
pub const CONFIRM_WINDOW: Duration = Duration::from_millis(500);

/// The address at least a majority of the `configured` sentinels reported (`None` in
/// `reports`: a sentinel that gave no answer). A majority of those configured, not of
/// those that answered: two rounds' majorities then always share a sentinel.
pub fn agreed<A: PartialEq + Clone>(reports: &[Option<A>], configured: usize) -> Option<A> {
    let needed = configured / 2 + 1;
    let named = reports.iter().flatten();
    named
        .clone()
        .find(|addr| named.clone().filter(|a| a == addr).count() >= needed)
        .cloned()
}

/// The last confirmation: when its round started, and the address it agreed on.
pub type Confirmation<A> = (Instant, A);

/// Whether a vote judged at `now` on the connection to `connected` counts: a confirmation
/// whose round started less than [`CONFIRM_WINDOW`] before `now` named that address.
pub fn vouched<A: PartialEq>(
    confirmed: Option<&Confirmation<A>>,
    connected: Option<&A>,
    now: Instant,
) -> bool {
    match (confirmed, connected) {
        (Some((at, addr)), Some(connected)) => {
            addr == connected && now.saturating_duration_since(*at) < CONFIRM_WINDOW
        }
        _ => false,
    }
}

/// When a promoted master learnt at `learnt` starts its new life for restart quarantine:
/// a [`CONFIRM_WINDOW`] later, since a client still connected to the old master may have a
/// vote counted there until a window after this client resolved the new one.
pub fn promoted_life_start(learnt: Instant) -> Instant {
    learnt.checked_add(CONFIRM_WINDOW).unwrap_or(learnt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> Option<(String, u16)> {
        Some(("127.0.0.1".to_owned(), port))
    }

    #[test]
    fn a_majority_of_the_configured_sentinels_must_agree() {
        assert_eq!(agreed(&[at(1), at(1), None], 3), at(1));
        assert_eq!(agreed(&[at(1), at(2), at(2)], 3), at(2));
        assert_eq!(agreed(&[at(1), None, None], 3), None);
        assert_eq!(agreed(&[at(1), at(2), None], 3), None);
        // A majority of those configured, not of those that answered.
        assert_eq!(agreed(&[at(1), at(1), None, None], 4), None);
        assert_eq!(agreed(&[at(1)], 1), at(1));
        assert_eq!(agreed::<(String, u16)>(&[], 0), None);
    }

    #[test]
    fn a_vote_counts_only_on_the_confirmed_master_within_the_window() {
        let start = Instant::now();
        let confirmed = (start, 1u16);
        let within = start + CONFIRM_WINDOW - Duration::from_millis(1);
        assert!(vouched(Some(&confirmed), Some(&1), start));
        assert!(vouched(Some(&confirmed), Some(&1), within));
        assert!(!vouched(Some(&confirmed), Some(&1), start + CONFIRM_WINDOW));
        assert!(!vouched(Some(&confirmed), Some(&2), within));
        assert!(!vouched(None, Some(&1), start));
        assert!(!vouched(Some(&confirmed), None, start));
        assert_eq!(promoted_life_start(start), start + CONFIRM_WINDOW);
    }
}
