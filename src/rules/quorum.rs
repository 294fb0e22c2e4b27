//! The pure rules of Redlock's rounds: the running vote count that lets a fan-out stop as
//! soon as its outcome is certain, and the decision of every round (acquire, extend,
//! release, reach) over the nodes' votes, with the one mapping from a decision to the
//! caller's error. The arithmetic under them (majority size, drift allowance, validity) has
//! one home, [`safety`](crate::rules::safety), which the model checker calls too.
//!
//! Nothing here reads a clock, talks to Redis or awaits: time comes in as arguments, so the
//! rules are unit-tested exhaustively below.

use std::time::Duration;

use crate::error::Error;
use crate::report::{NodeOutcome, NodeReport};
use crate::rules::safety::{lease_validity, majority};

/// Whether a lock with this `ttl` can still be valid after one attempt that used its whole
/// per-node timeout. A TTL that fails this can never yield a usable lock on a slow node and
/// is rejected up front.
pub(crate) fn ttl_is_usable(ttl: Duration, drift_factor: f64, node_timeout: Duration) -> bool {
    lease_validity(ttl, node_timeout, drift_factor).is_some()
}

/// What a fan-out can conclude from the votes it has so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Certainty {
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

    pub(crate) fn record(&mut self, yes: bool) -> Certainty {
        if yes {
            self.yes += 1;
        } else {
            self.no += 1;
        }
        self.certainty()
    }

    pub(crate) fn yes(&self) -> usize {
        self.yes
    }

    pub(crate) fn certainty(&self) -> Certainty {
        let q = majority(self.n);
        if self.yes >= q {
            Certainty::Reached
        } else if self.n.saturating_sub(self.no) < q {
            // Even if every node still outstanding said yes we would stay below quorum.
            Certainty::Unreachable
        } else {
            Certainty::Pending
        }
    }
}

/// One node's part in a round, as the decision sees it. A rule that refuses a node's
/// answer (a restart quarantine, a future per-node admission) turns its `Yes` into
/// `Missing` before the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vote {
    /// The node did what the round asks (set, extended, released, answered).
    Yes,
    /// The node certainly does not hold our token: held by another owner, absent, or a
    /// key of another type.
    No,
    /// Not decisive either way: not heard from before the round stopped.
    Open,
    /// No vote: the node failed or timed out, or its answer is not admitted.
    Missing,
    /// No vote, and a configuration error: the node's ACL refused the request. Any such
    /// vote decides the round ([`Decision::Denied`]).
    Denied,
}

/// What `outcome` counts for in a round whose success is `yes`.
pub(crate) fn vote(outcome: &NodeOutcome, yes: &NodeOutcome) -> Vote {
    match outcome {
        o if o == yes => Vote::Yes,
        NodeOutcome::HeldByOther
        | NodeOutcome::NotHeld
        | NodeOutcome::WrongType
        | NodeOutcome::CountMismatch { .. }
        | NodeOutcome::NameInUse => Vote::No,
        NodeOutcome::Quarantined { .. } => Vote::Missing,
        NodeOutcome::PermissionDenied(_) => Vote::Denied,
        o if o.is_failure() => Vote::Missing,
        _ => Vote::Open,
    }
}

/// The votes of a round's outcomes, one per node in configuration order.
pub(crate) fn votes(outcomes: &[(NodeOutcome, Duration)], yes: &NodeOutcome) -> Vec<Vote> {
    outcomes.iter().map(|(o, _)| vote(o, yes)).collect()
}

/// Whether a majority of the nodes voted yes.
pub(crate) fn has_majority(votes: &[Vote]) -> bool {
    count(votes, Vote::Yes) >= majority(votes.len())
}

fn count(votes: &[Vote], which: Vote) -> usize {
    votes.iter().filter(|v| **v == which).count()
}

/// What a round decided. Every round ends in one; [`Decision::into_result`] is the one
/// place it becomes the caller's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// A majority agreed, leaving this validity (zero for rounds that grant none).
    Won {
        /// How much longer the lock is safely held.
        validity: Duration,
    },
    /// A majority agreed, too late to leave any validity.
    ValiditySpent {
        /// How long the round took.
        elapsed: Duration,
    },
    /// Another owner holds the keys where a majority would be needed.
    Contended,
    /// Enough nodes certainly do not hold our token to deny a majority.
    NotHeld,
    /// Too few nodes voted for a majority to be possible or certain either way.
    Unavailable {
        /// The majority that was needed.
        quorum: usize,
    },
    /// A node's ACL refused the request: a configuration error, whatever the other nodes
    /// answered (a release that some node refused left the key there).
    Denied,
}

impl Decision {
    /// The metrics label of the decision.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Decision::Won { .. } => "won",
            Decision::ValiditySpent { .. } => "validity_spent",
            Decision::Contended => "contended",
            Decision::NotHeld => "not_held",
            Decision::Unavailable { .. } => "unavailable",
            Decision::Denied => "permission",
        }
    }

    /// The validity won, or the error that tells the caller what happened, with the
    /// round's report (made only for an error: a win does not pay for it).
    pub(crate) fn into_result(
        self,
        report: impl FnOnce() -> NodeReport,
    ) -> Result<Duration, Error> {
        if let Decision::Won { validity } = self {
            return Ok(validity);
        }
        let report = report();
        match self {
            Decision::Won { validity } => Ok(validity),
            Decision::ValiditySpent { elapsed } => Err(Error::ValiditySpent { elapsed, report }),
            Decision::Contended => Err(Error::Contended { report }),
            Decision::NotHeld => Err(Error::NotHeld { report }),
            Decision::Unavailable { quorum } => Err(Error::Unavailable { quorum, report }),
            Decision::Denied => Err(Error::Permission { report }),
        }
    }
}

/// A majority with `validity` left (computed by the caller once the majority is certain,
/// after any further round such as a fencing commit) wins; one with none left spent it.
fn won(elapsed: Duration, validity: Option<Duration>) -> Decision {
    match validity {
        Some(validity) => Decision::Won { validity },
        None => Decision::ValiditySpent { elapsed },
    }
}

/// An acquisition attempt: a majority of yes wins (see [`won`]); without one, the attempt
/// is contended unless so many nodes gave no vote that a majority was never possible.
pub(crate) fn decide_acquire(
    votes: &[Vote],
    elapsed: Duration,
    validity: Option<Duration>,
) -> Decision {
    let q = majority(votes.len());
    if votes.contains(&Vote::Denied) {
        Decision::Denied
    } else if has_majority(votes) {
        won(elapsed, validity)
    } else if votes.len() - count(votes, Vote::Missing) < q {
        Decision::Unavailable { quorum: q }
    } else {
        Decision::Contended
    }
}

/// An extension: a majority of yes wins (see [`won`]); without one, the lock is not held
/// when the nodes that certainly lack our token deny a majority on their own, and
/// unavailable otherwise (failures prove nothing).
pub(crate) fn decide_extend(
    votes: &[Vote],
    elapsed: Duration,
    validity: Option<Duration>,
) -> Decision {
    if votes.contains(&Vote::Denied) {
        Decision::Denied
    } else if has_majority(votes) {
        won(elapsed, validity)
    } else {
        not_held_or_unavailable(votes)
    }
}

/// A release: `expired` (the validity ran out before it) is never a success; otherwise as
/// [`decide_extend`], with no validity to win.
pub(crate) fn decide_release(votes: &[Vote], expired: bool) -> Decision {
    if votes.contains(&Vote::Denied) {
        Decision::Denied
    } else if expired {
        Decision::NotHeld
    } else if has_majority(votes) {
        Decision::Won {
            validity: Duration::ZERO,
        }
    } else {
        not_held_or_unavailable(votes)
    }
}

/// A round that only needs a majority to answer yes (connecting, committing a fencing
/// token): anything less is unavailable.
pub(crate) fn decide_reach(votes: &[Vote]) -> Decision {
    if votes.contains(&Vote::Denied) {
        Decision::Denied
    } else if has_majority(votes) {
        Decision::Won {
            validity: Duration::ZERO,
        }
    } else {
        Decision::Unavailable {
            quorum: majority(votes.len()),
        }
    }
}

fn not_held_or_unavailable(votes: &[Vote]) -> Decision {
    let q = majority(votes.len());
    if votes.len() - count(votes, Vote::No) < q {
        Decision::NotHeld
    } else {
        Decision::Unavailable { quorum: q }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::safety::drift_allowance;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn quorum_is_strict_majority() {
        let table = [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)];
        for (n, q) in table {
            assert_eq!(majority(n), q, "n = {n}");
            // A quorum is more than half, and two quorums always intersect.
            assert!(2 * majority(n) > n);
            assert!(majority(n) + majority(n) > n);
            // One fewer vote would not be a majority.
            assert!(2 * (majority(n) - 1) <= n);
        }
    }

    #[test]
    fn drift_is_proportional_plus_two_ms() {
        assert_eq!(drift_allowance(MS(10_000), 0.01), MS(102));
        assert_eq!(drift_allowance(MS(1_000), 0.01), MS(12));
        assert_eq!(drift_allowance(MS(1_000), 0.0), MS(2));
        assert_eq!(drift_allowance(Duration::ZERO, 0.5), MS(2));
        assert_eq!(drift_allowance(MS(100), 0.5), MS(52));
        // Saturating: a factor the arithmetic cannot use gives the largest allowance.
        assert_eq!(drift_allowance(Duration::MAX, 2.0), Duration::MAX);
    }

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        // ttl 10 s, 1 % drift → 102 ms allowance.
        assert_eq!(lease_validity(MS(10_000), MS(0), 0.01), Some(MS(9_898)));
        assert_eq!(lease_validity(MS(10_000), MS(898), 0.01), Some(MS(9_000)));
        // Exactly used up is not valid: validity must be strictly positive.
        assert_eq!(lease_validity(MS(10_000), MS(9_898), 0.01), None);
        assert_eq!(
            lease_validity(MS(10_000), MS(9_897), 0.01),
            Some(MS(1)),
            "one millisecond left is still valid"
        );
        assert_eq!(lease_validity(MS(10_000), MS(20_000), 0.01), None);
        assert_eq!(lease_validity(Duration::ZERO, Duration::ZERO, 0.01), None);
        assert_eq!(lease_validity(MS(2), Duration::ZERO, 0.0), None);
        assert_eq!(lease_validity(MS(3), Duration::ZERO, 0.0), Some(MS(1)));
        assert_eq!(lease_validity(Duration::MAX, Duration::MAX, 0.01), None);
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
            let q = majority(n);
            // All yes: reached exactly on the q-th vote, pending before. All no: unreachable
            // exactly when n - no < q, i.e. from the (n - q + 1)-th no.
            let runs = [
                (true, q, Certainty::Reached),
                (false, n - q + 1, Certainty::Unreachable),
            ];
            for (yes, first_decided, decided) in runs {
                let mut t = Tally::new(n);
                for i in 1..=n {
                    let expected = if i < first_decided {
                        Certainty::Pending
                    } else {
                        decided
                    };
                    assert_eq!(t.record(yes), expected, "n={n} yes={yes} vote {i}");
                }
            }
            // Minority failures never stop a later majority.
            let mut t = Tally::new(n);
            for _ in 0..(n - q) {
                assert_eq!(t.record(false), Certainty::Pending, "n={n}");
            }
            for i in 1..=q {
                let v = t.record(true);
                assert_eq!(v == Certainty::Reached, i == q, "n={n} yes={i}");
            }
            assert_eq!(t.yes(), q);
        }
    }

    #[test]
    fn single_node_is_a_plain_lock() {
        let mut t = Tally::new(1);
        assert_eq!(t.certainty(), Certainty::Pending);
        assert_eq!(t.record(true), Certainty::Reached);
        let mut t = Tally::new(1);
        assert_eq!(t.record(false), Certainty::Unreachable);
    }

    /// `yes` yes votes, `no` certain noes, `open` unheard and `missing` failures.
    fn ballot(yes: usize, no: usize, open: usize, missing: usize) -> Vec<Vote> {
        let mut v = vec![Vote::Yes; yes];
        v.extend(vec![Vote::No; no]);
        v.extend(vec![Vote::Open; open]);
        v.extend(vec![Vote::Missing; missing]);
        v
    }

    /// Every split of `n` votes into yes / no / open / missing.
    fn splits(n: usize) -> impl Iterator<Item = (usize, usize, usize, usize)> {
        (0..=n).flat_map(move |y| {
            (0..=n - y)
                .flat_map(move |no| (0..=n - y - no).map(move |o| (y, no, o, n - y - no - o)))
        })
    }

    #[test]
    fn votes_from_outcomes() {
        let yes = NodeOutcome::Acquired;
        let table = [
            (NodeOutcome::Acquired, Vote::Yes),
            (NodeOutcome::HeldByOther, Vote::No),
            (NodeOutcome::NotHeld, Vote::No),
            (NodeOutcome::WrongType, Vote::No),
            (
                NodeOutcome::Quarantined {
                    reason: crate::report::QuarantineReason::MemoryLost,
                    remaining: Some(MS(5)),
                },
                Vote::Missing,
            ),
            (NodeOutcome::TimedOut, Vote::Missing),
            (NodeOutcome::Failed("x".into()), Vote::Missing),
            (NodeOutcome::PermissionDenied("NOPERM".into()), Vote::Denied),
            (NodeOutcome::Pending, Vote::Open),
            (NodeOutcome::Released, Vote::Open),
        ];
        for (outcome, expected) in table {
            assert_eq!(vote(&outcome, &yes), expected, "{outcome:?}");
        }
        assert_eq!(
            vote(&NodeOutcome::Released, &NodeOutcome::Released),
            Vote::Yes
        );
    }

    /// A ballot's counts: yes votes, certain noes, unheard, failures.
    type Split = (usize, usize, usize, usize);

    /// Runs `check(n, majority(n), split, votes)` on every ballot of `n` votes, `n` in `sizes`.
    fn every_ballot(
        sizes: std::ops::RangeInclusive<usize>,
        mut check: impl FnMut(usize, usize, Split, &[Vote]),
    ) {
        for n in sizes {
            for split in splits(n) {
                let (y, no, o, m) = split;
                check(n, majority(n), split, &ballot(y, no, o, m));
            }
        }
    }

    /// What an extension or a release (not expired) decides on a ballot without a denial:
    /// a majority of yes wins `validity`; noes that leave no majority possible mean not
    /// held; anything else is unavailable (failures prove nothing).
    fn expected_held(n: usize, q: usize, (y, no, _, _): Split, validity: Duration) -> Decision {
        if y >= q {
            Decision::Won { validity }
        } else if n - no < q {
            Decision::NotHeld
        } else {
            Decision::Unavailable { quorum: q }
        }
    }

    #[test]
    fn acquire_decisions() {
        let v = Some(MS(900));
        every_ballot(1..=7, |n, q, (y, _, _, m), votes| {
            let expected = if y >= q {
                Decision::Won { validity: MS(900) }
            } else if n - m < q {
                Decision::Unavailable { quorum: q }
            } else {
                Decision::Contended
            };
            assert_eq!(decide_acquire(votes, MS(5), v), expected, "n={n} {votes:?}");
        });
        for n in 1..=7 {
            let q = majority(n);
            // Majority but no validity left; one vote short of a majority.
            let bare = ballot(q, n - q, 0, 0);
            assert_eq!(
                decide_acquire(&bare, MS(7), None),
                Decision::ValiditySpent { elapsed: MS(7) }
            );
            let short = ballot(q - 1, 0, 0, n - q + 1);
            assert_eq!(
                decide_acquire(&short, MS(7), v),
                Decision::Unavailable { quorum: q }
            );
        }
        let boundaries = [
            // n = 5: two failures still leave a contended verdict, three do not.
            ((2, 1, 0, 2), Decision::Contended),
            ((2, 0, 0, 3), Decision::Unavailable { quorum: 3 }),
            // Unheard nodes could still hold another owner's key: contended, not unavailable.
            ((0, 2, 1, 2), Decision::Contended),
        ];
        for ((y, no, o, m), expected) in boundaries {
            let votes = ballot(y, no, o, m);
            assert_eq!(decide_acquire(&votes, MS(1), v), expected, "{votes:?}");
        }
    }

    #[test]
    fn extend_decisions() {
        every_ballot(1..=7, |n, q, split, votes| {
            let expected = expected_held(n, q, split, MS(40));
            let decided = decide_extend(votes, MS(5), Some(MS(40)));
            assert_eq!(decided, expected, "n={n} {votes:?}");
        });
        for n in 1..=7 {
            let q = majority(n);
            assert_eq!(
                decide_extend(&ballot(q, 0, 0, n - q), MS(9), None),
                Decision::ValiditySpent { elapsed: MS(9) }
            );
        }
        let boundaries = [
            // n = 3: one "not ours" and one failure prove nothing; two "not ours" do.
            ((1, 1, 0, 1), Decision::Unavailable { quorum: 2 }),
            ((1, 2, 0, 0), Decision::NotHeld),
        ];
        for ((y, no, o, m), expected) in boundaries {
            let votes = ballot(y, no, o, m);
            let decided = decide_extend(&votes, MS(1), Some(MS(1)));
            assert_eq!(decided, expected, "{votes:?}");
        }
    }

    #[test]
    fn release_decisions() {
        every_ballot(1..=7, |n, q, split, votes| {
            let expected = expected_held(n, q, split, Duration::ZERO);
            assert_eq!(decide_release(votes, false), expected, "n={n} {votes:?}");
            // Released after the validity ran out: never a success.
            let expired = decide_release(votes, true);
            assert_eq!(expired, Decision::NotHeld, "n={n} {votes:?}");
        });
    }

    #[test]
    fn one_denial_decides_every_round() {
        // Every ballot of 0 to 6 other votes, and one denial.
        every_ballot(0..=6, |_, _, _, others| {
            let mut votes = others.to_vec();
            votes.push(Vote::Denied);
            let d = Decision::Denied;
            assert_eq!(decide_acquire(&votes, MS(1), Some(MS(9))), d, "{votes:?}");
            assert_eq!(decide_extend(&votes, MS(1), Some(MS(9))), d, "{votes:?}");
            assert_eq!(decide_release(&votes, false), d, "{votes:?}");
            assert_eq!(decide_release(&votes, true), d, "{votes:?}");
            assert_eq!(decide_reach(&votes), d, "{votes:?}");
        });
    }

    #[test]
    fn reach_decisions() {
        every_ballot(1..=7, |n, q, (y, _, _, _), votes| {
            let expected = if y >= q {
                Decision::Won {
                    validity: Duration::ZERO,
                }
            } else {
                Decision::Unavailable { quorum: q }
            };
            assert_eq!(decide_reach(votes), expected, "n={n} {votes:?}");
        });
    }

    #[test]
    fn one_mapping_to_errors() {
        let report = NodeReport::default;
        assert_eq!(
            Decision::Won { validity: MS(3) }.into_result(report).ok(),
            Some(MS(3))
        );
        let cases = [
            (
                Decision::ValiditySpent { elapsed: MS(4) },
                "majority acquired after 4.0 ms",
            ),
            (Decision::Contended, "held by another owner"),
            (Decision::NotHeld, "no longer held"),
            (Decision::Unavailable { quorum: 2 }, "majority of 2"),
            (Decision::Denied, "permission denied"),
        ];
        for (decision, needle) in cases {
            let err = decision.into_result(report).unwrap_err();
            assert!(err.to_string().contains(needle), "{decision:?}: {err}");
            assert!(err.report().is_some(), "{decision:?}");
        }
    }
}
