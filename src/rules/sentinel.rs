//! The rules of a member under Sentinel, pure so that `tests/model_sentinel.rs` checks the
//! decisions `net::sentinel` makes: which sentinels make up the group, which master a round
//! of their answers names, whether a vote on the connection's master counts, and from when
//! a promoted master is quarantined.

use std::time::{Duration, Instant};

/// How long a sentinel majority's confirmation of the master's address lets the member's
/// votes count.
pub const CONFIRM_WINDOW: Duration = Duration::from_millis(500);

/// The address at least a majority of a group of `group` sentinels reported (`None` in
/// `reports`: a sentinel that gave no answer). A majority of the group, not of those that
/// answered: two rounds' majorities then always share a sentinel.
pub fn agreed<A: PartialEq + Clone>(reports: &[Option<A>], group: usize) -> Option<A> {
    let needed = group / 2 + 1;
    let named = reports.iter().flatten();
    named
        .clone()
        .find(|addr| named.clone().filter(|a| a == addr).count() >= needed)
        .cloned()
}

/// The sentinels of one group as a client knows them, each by its addresses (`S`) and,
/// once known, its id (Sentinel's run id: `SENTINEL MYID`, the `runid` of `SENTINEL
/// SENTINELS`).
///
/// The group is every sentinel the member's URL lists and every one a sentinel reported
/// knowing, and it never shrinks: a sentinel that stops answering stays a member, so a
/// client that lists one sentinel still needs a majority of the whole group. Its size is
/// never less than the largest group a sentinel counts (`1 + num-other-sentinels`).
#[derive(Debug, Clone)]
pub struct SentinelGroup<S> {
    members: Vec<GroupMember<S>>,
    /// The largest group a sentinel reported counting, itself included.
    counted: usize,
}

/// One sentinel of a [`SentinelGroup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember<S> {
    /// Every address it was listed or reported at, the first one first.
    pub addrs: Vec<S>,
    /// Its run id, once a report gave it.
    pub id: Option<String>,
    /// Whether the member's URL lists it.
    pub listed: bool,
}

/// What one sentinel told of its group: its own id, the other sentinels it knows (address
/// and run id) and how many others it counts (`num-other-sentinels`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupReport<S> {
    /// Its own run id (`None`: it did not say).
    pub id: Option<String>,
    /// The other sentinels it knows, down ones included: address and run id.
    pub others: Vec<(S, Option<String>)>,
    /// How many other sentinels it counts.
    pub num_others: usize,
}

/// Where a round of the sentinels' answers stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoundOutcome<A> {
    /// A majority of the group named this master.
    Agreed(A),
    /// No master can have a majority, whatever the asks still under way answer.
    NoMajority,
    /// Either may still come.
    Undecided,
}

impl<S: PartialEq + Clone> SentinelGroup<S> {
    /// The group of the sentinels the member's URL lists, before any has answered.
    pub fn new(listed: impl IntoIterator<Item = S>) -> Self {
        let mut group = SentinelGroup {
            members: Vec::new(),
            counted: 0,
        };
        for addr in listed {
            if group.member_at(&addr).is_none() {
                group.members.push(GroupMember {
                    addrs: vec![addr],
                    id: None,
                    listed: true,
                });
            }
        }
        group
    }

    /// The sentinels known, listed ones first.
    pub fn members(&self) -> &[GroupMember<S>] {
        &self.members
    }

    /// How many sentinels the group has: those known, or more when a sentinel counts more.
    pub fn size(&self) -> usize {
        self.members.len().max(self.counted)
    }

    /// How many of the group must name one master: a majority of [`size`](Self::size).
    pub fn majority(&self) -> usize {
        self.size() / 2 + 1
    }

    /// Whether some member was learnt from the sentinels, not listed.
    pub fn is_partially_listed(&self) -> bool {
        self.members.iter().any(|m| !m.listed)
    }

    fn member_at(&self, addr: &S) -> Option<usize> {
        self.members.iter().position(|m| m.addrs.contains(addr))
    }

    fn member_with(&self, id: &str) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.id.as_deref() == Some(id))
    }

    /// Adds what the sentinel asked at `from` reported; returns the addresses new to the
    /// group (to be asked too). One sentinel known by two addresses (a listed host name and
    /// the address the others report) is one member once an id ties them.
    pub fn learn(&mut self, from: &S, report: &GroupReport<S>) -> Vec<S> {
        self.counted = self.counted.max(report.num_others + 1);
        let mut new = Vec::new();
        let told = std::iter::once((from, report.id.as_deref()))
            .chain(report.others.iter().map(|(a, id)| (a, id.as_deref())));
        for (addr, id) in told {
            if self.add(addr, id) {
                new.push(addr.clone());
            }
        }
        new
    }

    /// Records that a sentinel at `addr` has id `id` (when known), merging members that
    /// the id shows are one; returns whether it is a member new to the group.
    fn add(&mut self, addr: &S, id: Option<&str>) -> bool {
        let by_addr = self.member_at(addr);
        let by_id = id.and_then(|id| self.member_with(id));
        match (by_addr, by_id) {
            (Some(a), Some(b)) if a != b => {
                // Two entries of one sentinel: keep the first, with both's addresses.
                let (keep, gone) = (a.min(b), a.max(b));
                let gone = self.members.remove(gone);
                let kept = &mut self.members[keep];
                kept.listed |= gone.listed;
                kept.id = kept.id.take().or(gone.id);
                for addr in gone.addrs {
                    if !kept.addrs.contains(&addr) {
                        kept.addrs.push(addr);
                    }
                }
            }
            (Some(a), None) => {
                let member = &mut self.members[a];
                if member.id.is_none() {
                    member.id = id.map(str::to_owned);
                }
            }
            (None, Some(b)) => self.members[b].addrs.push(addr.clone()),
            (None, None) => {
                self.members.push(GroupMember {
                    addrs: vec![addr.clone()],
                    id: id.map(str::to_owned),
                    listed: false,
                });
                return true;
            }
            (Some(_), Some(_)) => {}
        }
        false
    }

    /// Where a round stands with `answers` (the address asked and the master it named,
    /// `None`: none) and `pending` asks still under way: each member counts once, whichever
    /// of its addresses answered first, and toward a majority of the whole group.
    pub fn outcome<A: PartialEq + Clone>(
        &self,
        answers: &[(S, Option<A>)],
        pending: usize,
    ) -> RoundOutcome<A> {
        let mut seen = Vec::new();
        let mut named = Vec::new();
        for (addr, master) in answers {
            let Some(member) = self.member_at(addr) else {
                continue;
            };
            if !seen.contains(&member) {
                seen.push(member);
                named.push(master.clone());
            }
        }
        if let Some(master) = agreed(&named, self.size()) {
            return RoundOutcome::Agreed(master);
        }
        let best = named
            .iter()
            .flatten()
            .map(|m| named.iter().flatten().filter(|n| *n == m).count())
            .max()
            .unwrap_or(0);
        if best + pending < self.majority() {
            RoundOutcome::NoMajority
        } else {
            RoundOutcome::Undecided
        }
    }
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
    fn a_majority_of_the_group_must_agree() {
        assert_eq!(agreed(&[at(1), at(1), None], 3), at(1));
        assert_eq!(agreed(&[at(1), at(2), at(2)], 3), at(2));
        assert_eq!(agreed(&[at(1), None, None], 3), None);
        assert_eq!(agreed(&[at(1), at(2), None], 3), None);
        // A majority of the group, not of those that answered.
        assert_eq!(agreed(&[at(1), at(1), None, None], 4), None);
        assert_eq!(agreed(&[at(1)], 1), at(1));
        assert_eq!(agreed::<(String, u16)>(&[], 0), None);
    }

    /// A report from a sentinel with id `id` that knows `others` (`(port, id)`) and counts
    /// `num_others`.
    fn report(id: &str, others: &[(u16, &str)], num_others: usize) -> GroupReport<u16> {
        GroupReport {
            id: Some(id.to_owned()),
            others: others
                .iter()
                .map(|&(p, i)| (p, Some(i.to_owned())))
                .collect(),
            num_others,
        }
    }

    #[test]
    fn the_group_is_what_is_listed_and_every_sentinel_reported() {
        // Listed ports, reports (from port, report), expected size and new members asked.
        type Case = (
            &'static [u16],
            Vec<(u16, GroupReport<u16>)>,
            usize,
            Vec<u16>,
        );
        let cases: Vec<Case> = vec![
            (&[1], vec![], 1, vec![]),
            (&[1, 1, 2], vec![], 2, vec![]),
            // One listed of three: the two others it knows join.
            (
                &[3],
                vec![(3, report("c", &[(1, "a"), (2, "b")], 2))],
                3,
                vec![1, 2],
            ),
            // All listed: nothing new.
            (
                &[1, 2, 3],
                vec![(1, report("a", &[(2, "b"), (3, "c")], 2))],
                3,
                vec![],
            ),
            // A sentinel counts more than it names: the size follows the count.
            (&[1], vec![(1, report("a", &[(2, "b")], 4))], 5, vec![2]),
            // A listed host name and a reported address of one sentinel are one member.
            (
                &[10, 2],
                vec![
                    (10, report("a", &[(2, "b")], 1)),
                    (2, report("b", &[(1, "a")], 1)),
                ],
                2,
                vec![],
            ),
            // Reported later without a sentinel that was reported before: never shrinks.
            (
                &[1],
                vec![
                    (1, report("a", &[(2, "b"), (3, "c")], 2)),
                    (1, report("a", &[(2, "b")], 1)),
                ],
                3,
                vec![2, 3],
            ),
            // Four listed, one of which counts seven: a majority of seven.
            (&[1, 2, 3, 4], vec![(1, report("a", &[], 6))], 7, vec![]),
        ];
        for (listed, reports, size, asked) in cases {
            let mut group = SentinelGroup::new(listed.iter().copied());
            let mut new = Vec::new();
            for (from, report) in &reports {
                new.extend(group.learn(from, report));
            }
            let case = format!("{listed:?} {reports:?}");
            assert_eq!(group.size(), size, "{case}");
            assert_eq!(group.majority(), size / 2 + 1, "{case}");
            assert_eq!(new, asked, "{case}");
            assert_eq!(group.is_partially_listed(), !asked.is_empty(), "{case}");
        }
    }

    #[test]
    fn a_round_ends_once_its_outcome_is_certain() {
        use RoundOutcome::{Agreed, NoMajority, Undecided};
        let three = || {
            let mut group = SentinelGroup::new([3u16]);
            group.learn(&3, &report("c", &[(1, "a"), (2, "b")], 2));
            group
        };
        let m = |port| Some(("127.0.0.1".to_owned(), port));
        // Answers (sentinel, master), asks still pending, outcome.
        type Case = (
            Vec<(u16, Option<(String, u16)>)>,
            usize,
            RoundOutcome<(String, u16)>,
        );
        let cases: Vec<Case> = vec![
            (vec![], 3, Undecided),
            (vec![], 0, NoMajority),
            // The one listed sentinel alone is no majority of the three.
            (vec![(3, m(6379))], 2, Undecided),
            (vec![(3, m(6379))], 0, NoMajority),
            (
                vec![(3, m(6379)), (1, m(6379))],
                1,
                Agreed(("127.0.0.1".into(), 6379)),
            ),
            (vec![(3, m(6379)), (1, m(6380))], 1, Undecided),
            (vec![(3, m(6379)), (1, m(6380))], 0, NoMajority),
            (vec![(3, None), (1, None)], 1, NoMajority),
            // One sentinel asked at two addresses counts once.
            (vec![(3, m(6379)), (3, m(6379))], 0, NoMajority),
            // An address outside the group counts for nothing.
            (vec![(9, m(6379)), (3, m(6379))], 0, NoMajority),
        ];
        for (answers, pending, expected) in cases {
            assert_eq!(
                three().outcome(&answers, pending),
                expected,
                "{answers:?} {pending}"
            );
        }
        let one = SentinelGroup::new([1u16]);
        assert_eq!(
            one.outcome(&[(1, m(1))], 0),
            Agreed(("127.0.0.1".into(), 1))
        );
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
