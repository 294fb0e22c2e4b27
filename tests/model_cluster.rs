//! Model check of a member that is a Redis Cluster through a failover of the shard that
//! owns a lock's slot, with the client's own rules (`quorum_lock::cluster::confirmed_owners`;
//! `quorum_lock::sentinel`: `vouched`, `promoted_life_start`; `quorum_lock::safety`: the
//! quarantine period, the validity). DESIGN.md section 7 states the argument.
//!
//! In short: one member (N = 1: two clients that both get its vote for one key is exactly
//! what breaks a quorum's intersection), one slot, its master M and the replica M' the
//! failover promotes (lacking the last lock), the masters B and C of other slots (third
//! parties), two clients, ticks of 125 ms (window W 4 ticks, TTL 8; drift factor 0, so a
//! key lives 7 ticks, a lock its validity rounded down after one tick, a quarantine is
//! rounded up). Every step is atomic at one tick:
//! - `Confirm(c, round)`: `c` asks the masters its table names, B, C and the slot's: M
//!   (naming itself until demoted, M' after) or M' (naming itself); B and C name the owner
//!   they know. The owner `cluster::confirmed_owners` finds (named by more than half of the
//!   masters asked other than itself) is the confirmation, from now, and the table's; with
//!   none the last confirmation stays to age out, and the table as it was. Answers are read
//!   at the round's start (later ones could only name M' sooner). `round` is `All`,
//!   `Without(i)` (the `i`-th asked does not answer), or, with no table, `Fresh(s)`: the
//!   masters of a seed's table whose slot `s` owns;
//! - `Connect(c)`: to M', once the table names it: a new life, quarantined for the
//!   quarantine period of the TTL from `promoted_life_start` of when the first client
//!   learnt it (the promotion record on the node; M votes at once: its
//!   connection and its marker date from before the failover);
//! - `Acquire(c)`: on the table's owner, which sets the key if it is free (M until
//!   demoted, then `MOVED`); the vote counts, and `c` holds, if `sentinel::vouched` (the
//!   confirmation named that server less than W ago) and the server is out of quarantine.
//!   A vote that does not count leaves no key (its attempt gives it back);
//! - `Extend(c)`: on the server the lock was won on, by the same rules;
//! - `Promote`; `Switch(t)`: third party `t` names M' from then on (gossip); `Demote`: M
//!   stops accepting writes, at any later step or never (partitioned, or paused); `Tick`.
//!
//! A client makes at most two attempts (extensions among them) and two rounds; locks are
//! never released early; time starts with the failover. Times are kept as ticks left or
//! ages, and what can no longer matter is forgotten: the state space is finite, every
//! future is explored, with no horizon. `Faults::Assumed` bounds the third parties' lag
//! (the second switches no later than W ticks after the first); the other fault sets do
//! not, and add rounds that miss a master, or a client that starts from a seed's table.
//!
//! Safety: *mutual exclusion* (never two holders). The checks:
//! - the rules as the client has them: safe with the lag bounded, unbounded, with rounds
//!   missing a master, and with a client starting from a seed; `sometimes` guards against
//!   vacuity: a lock on M', one won on M after a third party switched, and (rounds missing
//!   a master) one on M' learnt from a round the frozen M did not answer. Neither owner's
//!   word about itself counts, so both confirmations need both B and C, whose views only
//!   move forward: no lag assumption is needed;
//! - every vote counting unconfirmed: a client still on M locks there after the failover;
//! - the quarantine of M' from when it is learnt: a vote on M confirmed just before the
//!   switches outlives it;
//! - a majority of the masters asked, each one's word about itself included (an earlier
//!   rule of the crate): a client starting from a seed's table confirms M' with M' and the
//!   switched third party while another confirms M with M and the lagging one.

use std::time::{Duration, Instant};

use quorum_lock::{cluster, safety, sentinel};
use stateright::{Checker, HasDiscoveries, Model, Property};

const TICK_MS: u64 = 125;
const TTL: u8 = 8;
const CLIENTS: usize = 2;
const ATTEMPTS: u8 = 2;
const ROUNDS: u8 = 2;
/// The servers of the slot: the first master, and the replica promoted by the failover.
const M: u8 = 0;
const PROMOTED: u8 = 1;
/// The third-party masters, by their place among the switches, and as masters.
const B: usize = 0;
const C: usize = 1;
const B_ID: u8 = 2;
const C_ID: u8 = 3;

fn ms(ticks: u8) -> Duration {
    Duration::from_millis(u64::from(ticks) * TICK_MS)
}

fn ticks_up(d: Duration) -> u8 {
    u8::try_from(d.as_millis().div_ceil(u128::from(TICK_MS))).unwrap_or(u8::MAX)
}

fn ticks_down(d: Duration) -> u8 {
    u8::try_from(d.as_millis() / u128::from(TICK_MS)).unwrap_or(u8::MAX)
}

/// The confirmation window W, in ticks.
fn window() -> u8 {
    ticks_down(sentinel::CONFIRM_WINDOW)
}

/// How long a key set now lives on a server whose clock may run fast by the allowance.
fn key_life() -> u8 {
    ticks_down(ms(TTL).saturating_sub(safety::drift_allowance(ms(TTL), 0.0)))
}

/// The validity a won attempt leaves, in whole ticks, one tick after it began.
fn validity() -> u8 {
    ticks_down(safety::lease_validity(ms(TTL), ms(1), 0.0).unwrap_or_default())
}

/// The crate's rules; every vote counting, confirmed or not; a learnt life's quarantine
/// from when it is learnt; a confirmation by a majority of the masters asked, each one's
/// word about itself included, and requests to the first answer's owner without one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Crate,
    NoConfirmation,
    NoShift,
    SelfCounted,
}

/// Beside the failover: the assumption, every master answering every round; the
/// assumption broken (a third party lags as long as it likes); the assumption, and rounds
/// that miss a master; the assumption, and the second client starting without a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Faults {
    Assumed,
    Lagging,
    Silent,
    Fresh,
}

/// Every master answers; the one at this place in the asked order does not; the first
/// round, asking the masters of a seed's table whose slot this server owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Round {
    All,
    Without(usize),
    Fresh(u8),
}

/// A client; times are ticks to come, or an age.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
struct Client {
    /// The slot's owner in its table (`None`: never learnt).
    table: Option<u8>,
    /// Its last confirmation while it may vouch: its round's age, the owner agreed on.
    confirmed: Option<(u8, u8)>,
    /// Once connected to M': the ticks left of its quarantine.
    quarantine: Option<u8>,
    /// While it holds the lock: the ticks left, and the server it won it on.
    holds: Option<(u8, u8)>,
    attempts: u8,
    rounds: u8,
    /// Whether a round that M, silent, did not answer confirmed M'.
    learnt_without_old: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    promoted: bool,
    demoted: bool,
    /// Whether B and C name M'.
    switched: [bool; 2],
    /// While one of them has switched and the other not: the ticks since.
    lag: u8,
    /// Per server of the slot, the ticks its lock key has left.
    keys: [Option<u8>; 2],
    clients: [Client; CLIENTS],
    /// Whether a lock was won on M after a third party switched (for vacuity).
    old_after_switch: bool,
    /// M''s promotion record: the ticks since a client first learnt it (at most the
    /// quarantine, after which it no longer matters).
    record_age: Option<u8>,
    /// Whether a lock was won on M' by a client whose table named it from a round that M,
    /// silent, did not answer (liveness with the old master frozen).
    promoted_while_old_silent: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    Confirm(usize, Round),
    Connect(usize),
    Acquire(usize),
    Extend(usize),
    Promote,
    Switch(usize),
    Demote,
    Tick,
}

struct Failover {
    rule: Rule,
    faults: Faults,
    /// The instant the tick of a step stands for.
    epoch: Instant,
}

impl Failover {
    /// A round of `c`'s now: the table it leaves (`None`: no owner, and the next round
    /// starts from a seed again), and the owner it confirms, if any.
    fn round(&self, s: &State, c: &Client, round: Round) -> Option<(Option<u8>, Option<u8>)> {
        let server = match round {
            Round::Fresh(server) => server,
            _ => c.table?,
        };
        let third = |t: usize| if s.switched[t] { PROMOTED } else { M };
        let own = if s.demoted { PROMOTED } else { server };
        let asked = [(B_ID, third(B)), (C_ID, third(C)), (server, own)];
        let answers: Vec<(u8, Option<Vec<Option<u8>>>)> = (asked.iter().enumerate())
            .map(|(i, &(master, view))| {
                (
                    master,
                    (round != Round::Without(i)).then(|| vec![Some(view)]),
                )
            })
            .collect();
        if self.rule == Rule::SelfCounted {
            // A majority of the masters asked, each one's word about itself included, and
            // the first answer's owner where there is none.
            let named: Vec<Option<u8>> = answers.iter().map(|(_, r)| r.as_ref()?[0]).collect();
            let agreed = sentinel::agreed(&named, named.len());
            let first = named.iter().flatten().next().copied();
            return Some((agreed.or(first), agreed));
        }
        let agreed = cluster::confirmed_owners(&answers, 1).pop().flatten();
        Some((agreed, agreed))
    }

    /// Whether a confirmation whose round is `age` ticks old and agreed on `owner` vouches
    /// for a vote on `server` now.
    fn vouched(&self, confirmed: Option<(u8, u8)>, server: u8) -> bool {
        let judged = |(age, owner): (u8, u8)| {
            let round = (self.epoch, owner);
            sentinel::vouched(Some(&round), Some(&server), self.epoch + ms(age))
        };
        self.rule == Rule::NoConfirmation || confirmed.is_some_and(judged)
    }

    /// The ticks M', learnt now, is quarantined for.
    fn quarantine(&self) -> u8 {
        let start = match self.rule {
            Rule::NoShift => self.epoch,
            _ => sentinel::promoted_life_start(self.epoch),
        };
        let period = safety::quarantine_period(ms(TTL), 0.0);
        ticks_up(start - self.epoch).saturating_add(ticks_up(period))
    }

    /// `c`'s vote on `server`: the key set (or extended) and the lock held, if it counts.
    fn vote(&self, s: &State, n: &mut State, i: usize, server: u8) {
        let c = s.clients[i];
        n.clients[i].attempts += 1;
        let counts = self.vouched(c.confirmed, server) && (server == M || c.quarantine == Some(0));
        if (server == M && s.demoted) || !counts {
            return;
        }
        n.keys[usize::from(server)] = Some(key_life());
        n.clients[i].holds = Some((1 + validity(), server));
        n.old_after_switch |= server == M && s.switched.contains(&true);
        n.promoted_while_old_silent |= server == PROMOTED && c.learnt_without_old;
    }

    /// `c` with what can no longer matter forgotten: a confirmation too old to vouch, and
    /// everything once it neither holds nor may try again.
    fn forget(&self, c: &mut Client) {
        let stale = |&(age, owner): &(u8, u8)| !self.vouched(Some((age, owner)), owner);
        if self.rule == Rule::NoConfirmation || c.confirmed.as_ref().is_some_and(stale) {
            c.confirmed = None;
        }
        if c.holds.is_none() && c.attempts >= ATTEMPTS {
            *c = Client::default();
            (c.attempts, c.rounds) = (ATTEMPTS, ROUNDS);
        }
    }
}

impl Model for Failover {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let client = |table| Client {
            table,
            ..Client::default()
        };
        let second = (self.faults != Faults::Fresh).then_some(M);
        vec![State {
            promoted: false,
            demoted: false,
            switched: [false; 2],
            lag: 0,
            keys: [None, None],
            clients: [client(Some(M)), client(second)],
            old_after_switch: false,
            record_age: None,
            promoted_while_old_silent: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (i, c) in s.clients.iter().enumerate() {
            if c.rounds < ROUNDS {
                match (c.table, self.faults) {
                    (None, _) => {
                        actions.push(Action::Confirm(i, Round::Fresh(M)));
                        if s.promoted {
                            actions.push(Action::Confirm(i, Round::Fresh(PROMOTED)));
                        }
                    }
                    (Some(_), Faults::Silent) => {
                        actions.push(Action::Confirm(i, Round::All));
                        for silent in 0..3 {
                            actions.push(Action::Confirm(i, Round::Without(silent)));
                        }
                    }
                    (Some(_), _) => actions.push(Action::Confirm(i, Round::All)),
                }
            }
            if c.table == Some(PROMOTED) && c.quarantine.is_none() {
                actions.push(Action::Connect(i));
            }
            if c.attempts < ATTEMPTS {
                match (c.holds, c.table) {
                    (Some(_), _) => actions.push(Action::Extend(i)),
                    (None, Some(owner)) if owner == M || c.quarantine.is_some() => {
                        actions.push(Action::Acquire(i))
                    }
                    _ => {}
                }
            }
        }
        if !s.promoted {
            actions.push(Action::Promote);
        } else {
            for t in [B, C] {
                if !s.switched[t] {
                    actions.push(Action::Switch(t));
                }
            }
            if !s.demoted {
                actions.push(Action::Demote);
            }
        }
        // Time starts with the failover; under the assumption, it does not pass W after
        // the first switch while the other third party has not switched.
        if s.promoted && (self.faults == Faults::Lagging || s.lag < window()) {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut n = s.clone();
        match action {
            Action::Confirm(i, round) => {
                let (table, agreed) = self.round(s, &s.clients[i], round)?;
                let c = &mut n.clients[i];
                c.rounds += 1;
                c.learnt_without_old |= round == Round::Without(2) && agreed == Some(PROMOTED);
                match agreed {
                    Some(owner) => (c.table, c.confirmed) = (table, Some((0, owner))),
                    // The crate's rule: a round that confirms no owner leaves the last
                    // confirmation to age out, and requests where they went.
                    None if self.rule != Rule::SelfCounted => {}
                    None => (c.table, c.confirmed) = (table, None),
                }
            }
            Action::Connect(i) => {
                // The quarantine counts from the promotion record: when the first client
                // learnt M'.
                let age = s.record_age.unwrap_or(0);
                n.clients[i].quarantine = Some(self.quarantine().saturating_sub(age));
                n.record_age.get_or_insert(0);
            }
            Action::Acquire(i) => {
                let server = s.clients[i].table?;
                if s.keys[usize::from(server)].is_some() {
                    n.clients[i].attempts += 1;
                } else {
                    self.vote(s, &mut n, i, server);
                }
            }
            Action::Extend(i) => {
                let (_, server) = s.clients[i].holds?;
                self.vote(s, &mut n, i, server);
            }
            Action::Promote => {
                n.promoted = true;
                n.keys[usize::from(PROMOTED)] = None;
            }
            Action::Switch(t) => n.switched[t] = true,
            Action::Demote => n.demoted = true,
            Action::Tick => {
                if n.switched[B] != n.switched[C] {
                    n.lag = (n.lag + 1).min(window());
                }
                if let Some(age) = &mut n.record_age {
                    *age = (*age + 1).min(self.quarantine());
                }
                for key in &mut n.keys {
                    *key = key.filter(|&left| left > 1).map(|left| left - 1);
                }
                for c in &mut n.clients {
                    c.holds = (c.holds.filter(|&(left, _)| left > 1)).map(|(l, at)| (l - 1, at));
                    if let Some((age, _)) = &mut c.confirmed {
                        *age += 1;
                    }
                    if let Some(left) = &mut c.quarantine {
                        *left = left.saturating_sub(1);
                    }
                }
            }
        }
        if n.switched[B] == n.switched[C] {
            n.lag = 0;
        }
        for c in &mut n.clients {
            self.forget(c);
        }
        Some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(EXCLUSION, |_: &Failover, s: &State| {
                s.clients.iter().filter(|c| c.holds.is_some()).count() <= 1
            }),
            Property::sometimes(ON_PROMOTED, |_: &Failover, s: &State| {
                (s.clients.iter()).any(|c| c.holds.is_some_and(|(_, at)| at == PROMOTED))
            }),
            Property::sometimes(ON_OLD_AFTER_SWITCH, |_: &Failover, s: &State| {
                s.old_after_switch
            }),
            Property::sometimes(WHILE_OLD_SILENT, |_: &Failover, s: &State| {
                s.promoted_while_old_silent
            }),
        ]
    }
}

const EXCLUSION: &str = "mutual exclusion";
const ON_PROMOTED: &str = "a client holds on the promoted master";
const ON_OLD_AFTER_SWITCH: &str = "a client holds on M, won after a third party switched";
const WHILE_OLD_SILENT: &str = "a client holds on M', learnt from a round M did not answer";

/// The two clients are alike (a key does not name its owner, and a client's table tells
/// whether it starts fresh): a state and its mirror have the same futures, so the checker
/// explores one of them.
fn representative(s: &State) -> State {
    let mut sorted = s.clone();
    sorted.clients.sort();
    sorted
}

/// Explores the model breadth first (a counterexample found is a shortest one), stopping
/// at the first discovery of `stop_at` if given.
fn check(rule: Rule, faults: Faults, stop_at: Option<&'static str>) -> impl Checker<Failover> {
    let started = Instant::now();
    let model = Failover {
        rule,
        faults,
        epoch: started,
    };
    let builder = model.checker().symmetry_fn(representative);
    let builder = match stop_at {
        Some(property) => builder.finish_when(HasDiscoveries::AnyOf([property].into())),
        None => builder,
    };
    let checker = builder.spawn_bfs().join();
    eprintln!(
        "{rule:?}, {faults:?}: {} states in {:.2?}",
        checker.unique_state_count(),
        started.elapsed()
    );
    checker
}

fn assert_safe(faults: Faults) {
    let checker = check(Rule::Crate, faults, None);
    if let Some(path) = checker.discovery(EXCLUSION) {
        panic!("counterexample: {:?}", path.into_actions());
    }
    checker.assert_any_discovery(ON_PROMOTED);
    checker.assert_any_discovery(ON_OLD_AFTER_SWITCH);
    if faults == Faults::Silent {
        checker.assert_any_discovery(WHILE_OLD_SILENT);
    }
}

fn assert_caught(rule: Rule, faults: Faults) {
    let checker = check(rule, faults, Some(EXCLUSION));
    let Some(path) = checker.discovery(EXCLUSION) else {
        panic!("{rule:?} with {faults:?} must lose exclusion");
    };
    let steps = path.into_actions();
    eprintln!(
        "{rule:?}, {faults:?}: lost in {} steps: {steps:?}",
        steps.len()
    );
}

#[test]
fn the_masters_confirmation_and_the_later_quarantine_keep_exclusion() {
    assert_safe(Faults::Assumed);
}

#[test]
fn votes_without_the_confirmation_lose_exclusion() {
    assert_caught(Rule::NoConfirmation, Faults::Assumed);
}

#[test]
fn a_quarantine_from_when_the_promoted_master_is_learnt_loses_exclusion() {
    assert_caught(Rule::NoShift, Faults::Assumed);
}

#[test]
fn a_third_party_lagging_past_the_window_keeps_exclusion_when_every_master_answers() {
    assert_safe(Faults::Lagging);
}

#[test]
fn a_round_that_misses_a_master_keeps_exclusion() {
    assert_safe(Faults::Silent);
}

#[test]
fn a_client_starting_fresh_from_a_seed_keeps_exclusion() {
    assert_safe(Faults::Fresh);
}

#[test]
fn counting_a_masters_word_about_itself_loses_exclusion() {
    assert_caught(Rule::SelfCounted, Faults::Fresh);
}
