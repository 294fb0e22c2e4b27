//! Model check of a member under Sentinel through a failover, with the client's own rules
//! (`quorum_lock::sentinel`: the group learnt from the sentinels and its agreement, whose
//! confirmation a vote needs, when a promoted master's quarantine starts; `quorum_lock::safety`: the quarantine
//! period and the validity). DESIGN.md section 7 states the argument.
//!
//! In short: one member (N = 1: two clients that both get this member's vote for one key
//! is exactly what breaks a quorum's intersection), its master M and replica R, three
//! sentinels, two clients, time in ticks of 125 ms so that the confirmation window is 4
//! ticks, TTL 1 s (8 ticks). A key lives its TTL less one tick and a lock its validity
//! rounded down after one tick, as in `tests/model.rs`. Every step is atomic at one tick:
//! - `Confirm(c)`: client `c` asks the sentinels its URL lists, and those their answers
//!   report (`SentinelGroup`: every sentinel knows the two others); the address a majority
//!   of the group names becomes its confirmation, from now; a connection to another
//!   address is dropped. Answers are read at the round's start: a real round's answers
//!   come later and may only name the new master sooner, while its window still counts
//!   from the start;
//! - `Connect(c)`: `c` resolves the master as a confirmation does and connects there,
//!   refused by a demoted server (`ROLE`); a promoted master is quarantined for the
//!   quarantine period of the TTL from `sentinel::promoted_life_start` of when the first
//!   client learnt it (the promotion record on the node: later clients count from it);
//! - `Acquire(c)`: the script runs on the connection's master (a demoted one answers
//!   `READONLY`, dropping the connection), setting the key if it is free; the vote counts
//!   if `sentinel::vouched` and the master is not quarantined, and the client then holds;
//! - `Promote`: the failover promotes R, whose copy lacks the last lock (the worst case:
//!   a copy that has it only refuses more); `Switch`: a majority of the sentinels moves to R
//!   (a round reads every sentinel at one instant, so what it agrees on changes once, when
//!   a majority has moved: the steps of single sentinels between change nothing it sees);
//!   `Demote`: Sentinel turns M into R's replica (at any later step, or never: a partitioned
//!   M accepts writes as long as it likes); `Tick`.
//!
//! A client makes at most two attempts and two confirmation rounds (its connects among
//! them), locks are never released early (a release only shortens an overlap), and the
//! clock starts with the failover (what clients do before it happens at tick 0).
//!
//! Two histories: in the first both clients list and reach every sentinel; in the second
//! (a partition) the first client lists all three and reaches the two that move to R, the
//! second lists and reaches only the third, which stays with M.
//!
//! Safety: *mutual exclusion* (never two holders). The rules are checked safe in both
//! histories, and each weakened variant is caught: votes counted on any connection without
//! the confirmation (a client still connected to M locks there after the failover), the
//! promoted master's quarantine counted from when it is learnt instead of a window later (a
//! vote on M confirmed just before the switch outlives it), and a majority of the client's
//! own list instead of the group (in the partition, the second client confirms M alone). `sometimes` properties guard against
//! vacuity: a lock on the promoted master, and one on M after a sentinel switched.

use std::time::{Duration, Instant};

use quorum_lock::sentinel::{GroupReport, RoundOutcome, SentinelGroup};
use quorum_lock::{safety, sentinel};
use stateright::{Checker, HasDiscoveries, Model, Property};

const TICK_MS: u64 = 125;
const TTL: u8 = 8;
const SENTINELS: usize = 3;
const CLIENTS: usize = 2;
/// The servers: the first master, and the replica promoted by the failover.
const M: u8 = 0;
const R: u8 = 1;

fn ms(ticks: u8) -> Duration {
    Duration::from_millis(u64::from(ticks) * TICK_MS)
}

/// Whole ticks in `d`, rounded up.
fn ticks_up(d: Duration) -> u8 {
    u8::try_from(d.as_millis().div_ceil(u128::from(TICK_MS))).unwrap_or(u8::MAX)
}

/// The validity a won attempt leaves, in whole ticks, one tick after it began.
fn validity_ticks() -> u8 {
    let left = safety::lease_validity(ms(TTL), ms(1), 0.0).unwrap_or_default();
    u8::try_from(left.as_millis() / u128::from(TICK_MS)).unwrap_or(0)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// The crate's rules.
    Crate,
    /// Votes count on any connection, confirmed or not.
    NoConfirmation,
    /// The promoted master's quarantine starts when it is learnt.
    NoShift,
    /// A majority of the sentinels the client's URL lists, not of the group.
    OwnList,
}

/// Which sentinels each client lists and reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum History {
    /// Both clients list and reach all three.
    AllListed,
    /// The first client lists all three and reaches the first two; the second lists and
    /// reaches only the third, which never moves to R.
    PartialList,
}

impl History {
    /// The sentinels client `c` lists, and those it reaches.
    fn sentinels(self, c: usize) -> (&'static [usize], &'static [usize]) {
        match (self, c) {
            (History::AllListed, _) => (&[0, 1, 2], &[0, 1, 2]),
            (History::PartialList, 0) => (&[0, 1, 2], &[0, 1]),
            (History::PartialList, _) => (&[2], &[2]),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
struct Client {
    connected: Option<u8>,
    /// When its last confirmation started, and the server it named.
    confirmed: Option<(u8, u8)>,
    /// Until when the connected master is quarantined.
    quarantined_until: u8,
    /// Until when it holds the lock, and on which server it won it.
    holds: Option<(u8, u8)>,
    attempts: u8,
    confirms: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    /// The server each sentinel names.
    views: [u8; SENTINELS],
    promoted: bool,
    demoted: bool,
    /// Per server, the lock key: its owner and when it expires.
    keys: [Option<(u8, u8)>; 2],
    /// The promoted master's promotion record: when a client first learnt it.
    first_learnt: Option<u8>,
    clients: [Client; CLIENTS],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    Confirm(usize),
    Connect(usize),
    Acquire(usize),
    Promote,
    Switch,
    Demote,
    Tick,
}

struct Failover {
    rule: Rule,
    history: History,
    horizon: u8,
    attempts: u8,
    /// Confirmation rounds per client, connects included.
    confirms: u8,
}

impl Failover {
    fn instant(base: Instant, tick: u8) -> Instant {
        base + ms(tick)
    }

    /// What a confirmation round of client `c` at this step agrees on.
    fn agreed(&self, s: &State, c: usize) -> Option<u8> {
        let (listed, reached) = self.history.sentinels(c);
        let answer = |i: usize| reached.contains(&i).then_some(s.views[i]);
        if self.rule == Rule::OwnList {
            let reports: Vec<Option<u8>> = listed.iter().map(|&i| answer(i)).collect();
            return sentinel::agreed(&reports, listed.len());
        }
        // The round: the listed sentinels, then those their answers report.
        let mut group = SentinelGroup::new(listed.iter().copied());
        let mut asked = listed.to_vec();
        let mut answers = Vec::new();
        let mut next = 0;
        while let Some(&i) = asked.get(next) {
            next += 1;
            let named = answer(i);
            if named.is_some() {
                let report = GroupReport {
                    id: Some(format!("sentinel-{i}")),
                    others: (0..SENTINELS)
                        .filter(|&o| o != i)
                        .map(|o| (o, Some(format!("sentinel-{o}"))))
                        .collect(),
                    num_others: SENTINELS - 1,
                };
                asked.extend(group.learn(&i, &report));
            }
            answers.push((i, named));
        }
        match group.outcome(&answers, 0) {
            RoundOutcome::Agreed(master) => Some(master),
            _ => None,
        }
    }

    /// Whether `c`'s vote on its connection counts now.
    fn vouched(&self, s: &State, c: &Client) -> bool {
        if self.rule == Rule::NoConfirmation {
            return true;
        }
        let base = Instant::now();
        let confirmed = c
            .confirmed
            .map(|(at, addr)| (Self::instant(base, at), addr));
        sentinel::vouched(
            confirmed.as_ref(),
            c.connected.as_ref(),
            Self::instant(base, s.now),
        )
    }

    /// The tick until which a promoted master learnt now is quarantined.
    fn quarantine_from(&self, now: u8) -> u8 {
        let base = Instant::now();
        let learnt = Self::instant(base, now);
        let start = match self.rule {
            Rule::NoShift => learnt,
            _ => sentinel::promoted_life_start(learnt),
        };
        let start = ticks_up(start - base);
        start.saturating_add(ticks_up(safety::quarantine_period(ms(TTL), 0.0)))
    }

    fn is_master(s: &State, server: u8) -> bool {
        match server {
            M => !s.demoted,
            _ => s.promoted,
        }
    }
}

impl Model for Failover {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            views: [M; SENTINELS],
            promoted: false,
            demoted: false,
            keys: [None, None],
            first_learnt: None,
            clients: [Client::default(); CLIENTS],
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (i, c) in s.clients.iter().enumerate() {
            if c.confirms < self.confirms {
                actions.push(Action::Confirm(i));
            }
            match (c.connected, c.holds) {
                (None, None) if c.confirms < self.confirms => actions.push(Action::Connect(i)),
                (Some(_), None) if c.attempts < self.attempts => actions.push(Action::Acquire(i)),
                _ => {}
            }
        }
        if !s.promoted {
            actions.push(Action::Promote);
        } else {
            if s.views.iter().filter(|&&view| view == R).count() < SENTINELS / 2 + 1 {
                actions.push(Action::Switch);
            }
            if !s.demoted {
                actions.push(Action::Demote);
            }
        }
        // Time starts with the failover: idle ticks before it change nothing but the clock.
        if s.promoted && s.now < self.horizon {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut n = s.clone();
        match action {
            Action::Confirm(i) => {
                let agreed = self.agreed(s, i)?;
                let c = &mut n.clients[i];
                c.confirms += 1;
                c.confirmed = Some((s.now, agreed));
                if c.connected.is_some_and(|at| at != agreed) {
                    c.connected = None;
                }
            }
            Action::Connect(i) => {
                let agreed = self.agreed(s, i)?;
                if !Self::is_master(s, agreed) {
                    return None;
                }
                let c = &mut n.clients[i];
                c.confirms += 1;
                c.connected = Some(agreed);
                c.confirmed = Some((s.now, agreed));
                // The promoted master's quarantine counts from its promotion record: when
                // the first client learnt it.
                c.quarantined_until = if agreed == R {
                    self.quarantine_from(s.first_learnt.unwrap_or(s.now))
                } else {
                    0
                };
                if agreed == R {
                    n.first_learnt.get_or_insert(s.now);
                }
            }
            Action::Acquire(i) => {
                let c = n.clients[i];
                let server = c.connected?;
                n.clients[i].attempts += 1;
                if !Self::is_master(s, server) {
                    n.clients[i].connected = None;
                    return Some(n);
                }
                let key = &mut n.keys[usize::from(server)];
                if key.is_some() {
                    return Some(n);
                }
                *key = Some((i as u8, s.now + TTL - 1));
                if self.vouched(s, &c) && s.now >= c.quarantined_until {
                    n.clients[i].holds = Some((s.now + 1 + validity_ticks(), server));
                }
            }
            Action::Promote => {
                n.promoted = true;
                n.keys[usize::from(R)] = None;
            }
            Action::Switch => {
                for view in &mut n.views[..SENTINELS / 2 + 1] {
                    *view = R;
                }
            }
            Action::Demote => {
                n.demoted = true;
                n.keys[usize::from(M)] = s.keys[usize::from(R)];
            }
            Action::Tick => {
                n.now += 1;
                for key in &mut n.keys {
                    if key.is_some_and(|(_, until)| until <= n.now) {
                        *key = None;
                    }
                }
                for c in &mut n.clients {
                    if c.holds.is_some_and(|(until, _)| until <= n.now) {
                        c.holds = None;
                    }
                }
            }
        }
        Some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(EXCLUSION, |_: &Failover, s: &State| {
                s.clients.iter().filter(|c| c.holds.is_some()).count() <= 1
            }),
            Property::sometimes(ON_PROMOTED, |_: &Failover, s: &State| {
                s.clients
                    .iter()
                    .any(|c| c.holds.is_some_and(|(_, at)| at == R))
            }),
            Property::sometimes(ON_OLD_AFTER_SWITCH, |_: &Failover, s: &State| {
                s.views.contains(&R)
                    && s.clients
                        .iter()
                        .any(|c| c.holds.is_some_and(|(_, at)| at == M))
            }),
        ]
    }
}

const EXCLUSION: &str = "mutual exclusion";
const ON_PROMOTED: &str = "a client holds on the promoted master";
const ON_OLD_AFTER_SWITCH: &str = "a client holds on the old master after a sentinel switched";

/// The two clients are alike: a state and its mirror (clients swapped, key owners
/// renamed) have the same futures, so the checker explores one of them.
fn representative(s: &State) -> State {
    if s.clients[0] <= s.clients[1] {
        return s.clone();
    }
    let mut mirror = s.clone();
    mirror.clients.swap(0, 1);
    for (owner, _) in mirror.keys.iter_mut().flatten() {
        *owner = 1 - *owner;
    }
    mirror
}

fn check(rule: Rule, history: History, stop_at: Option<&'static str>) -> impl Checker<Failover> {
    let started = std::time::Instant::now();
    let model = Failover {
        rule,
        history,
        horizon: 14,
        attempts: 2,
        confirms: 2,
    };
    let builder = model.checker();
    // The clients are alike only when they list and reach the same sentinels.
    let builder = match history {
        History::AllListed => builder.symmetry_fn(representative),
        History::PartialList => builder,
    };
    let builder = match stop_at {
        Some(property) => builder.finish_when(HasDiscoveries::AnyOf([property].into())),
        None => builder,
    };
    let checker = builder.spawn_dfs().join();
    eprintln!(
        "{rule:?}, {history:?}: {} states in {:.2?}",
        checker.unique_state_count(),
        started.elapsed()
    );
    checker
}

#[test]
fn the_confirmation_and_the_later_quarantine_keep_exclusion_through_a_failover() {
    let checker = check(Rule::Crate, History::AllListed, None);
    if let Some(path) = checker.discovery(EXCLUSION) {
        panic!("counterexample: {:?}", path.into_actions());
    }
    checker.assert_any_discovery(ON_PROMOTED);
    checker.assert_any_discovery(ON_OLD_AFTER_SWITCH);
}

/// The partition: the first client confirms what the two sentinels it reaches name, the
/// second reaches one sentinel of the group of three and never confirms.
#[test]
fn a_majority_of_the_learnt_group_keeps_exclusion_with_a_partial_list() {
    let checker = check(Rule::Crate, History::PartialList, None);
    if let Some(path) = checker.discovery(EXCLUSION) {
        panic!("counterexample: {:?}", path.into_actions());
    }
    checker.assert_any_discovery(ON_PROMOTED);
}

fn assert_caught(rule: Rule, history: History) {
    let checker = check(rule, history, Some(EXCLUSION));
    let Some(path) = checker.discovery(EXCLUSION) else {
        panic!("{rule:?} must lose exclusion in {history:?}");
    };
    eprintln!("{rule:?} loses exclusion: {:?}", path.into_actions());
}

#[test]
fn votes_without_the_confirmation_lose_exclusion() {
    assert_caught(Rule::NoConfirmation, History::AllListed);
}

#[test]
fn a_quarantine_from_when_the_promoted_master_is_learnt_loses_exclusion() {
    assert_caught(Rule::NoShift, History::AllListed);
}

/// The second client, listing only the sentinel left with M, locks there while the first
/// holds on R.
#[test]
fn a_majority_of_the_clients_own_list_loses_exclusion() {
    assert_caught(Rule::OwnList, History::PartialList);
}
