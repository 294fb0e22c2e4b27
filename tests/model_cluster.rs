//! Model check of a member that is a Redis Cluster through a failover of the shard that
//! owns a lock's slot, with the client's own rules (`quorum_lock::cluster`:
//! `confirmed_owners`, `settled`; `quorum_lock::sentinel`: `vouched`, `promoted_life_start`;
//! `quorum_lock::safety`: the quarantine period, the validity). DESIGN.md section 7 states
//! the argument.
//!
//! In short: one member (N = 1: two clients that both get its vote for one key is exactly
//! what breaks a quorum's intersection), one slot, its master M and the replica M' the
//! failover promotes (lacking the last lock), the masters B and C of other slots (third
//! parties; D too, with four masters), two clients, ticks of 125 ms (window W 4 ticks, TTL
//! 8; drift factor 0, so a key lives 7 ticks, a lock its validity rounded down after one
//! tick, a quarantine is rounded up). Every step is atomic at one tick:
//! - `Confirm(c, round)`: `c` asks the masters its table names, the third parties and the
//!   slot's: M (naming itself until demoted, M' after) or M' (naming itself); a third
//!   party names the owner it knows. The owner `cluster::confirmed_owners` finds (named by
//!   more than half of the masters asked other than itself) is the confirmation, from now,
//!   and the table's; with none the last confirmation stays to age out, and the table as
//!   it was. The round ends once `cluster::settled` holds with a silent master's answer
//!   still to come (with one slot: an owner is confirmed, or none is named); one that does
//!   not settle runs to its timeout and confirms nothing. Answers are read at the round's
//!   start (later ones could only name M' sooner). `round` is `All`, `Without(i)` (the
//!   `i`-th asked does not answer), or, with no table, `Fresh(s)`: the masters of a seed's
//!   table whose slot `s` owns;
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
//!   stops accepting writes, at any later step or never (partitioned, or paused);
//!   `Silence`: the last third party stops answering for good (frozen, or dropping
//!   packets); `Tick`.
//!
//! A client makes at most two attempts (extensions among them) and two rounds; locks are
//! never released early; time starts with the failover. Times are kept as ticks left or
//! ages, and what can no longer matter is forgotten: the state space is finite, every
//! future is explored (depth first, one of each pair of mirrored clients), with no
//! horizon. `Faults::Assumed` bounds the third parties' lag (the second switches no later
//! than W ticks after the first); the other fault sets do not, and add rounds that miss a
//! master, a client that starts from a seed's table, or, with three or four masters, the
//! last third party silent from any step on (from the start, during the failover, after).
//!
//! Safety: *mutual exclusion* (never two holders). The checks:
//! - the rules as the client has them: safe with the lag bounded, unbounded, with rounds
//!   missing a master, with a client starting from a seed, and with D of four masters
//!   silent; `sometimes` guards against vacuity: a lock on M', one won on M after a third
//!   party switched, and (rounds missing a master) one on M' learnt from a round the
//!   frozen M did not answer. Neither owner's word about itself counts, so both
//!   confirmations need more than half of the third parties (both B and C of three
//!   masters), whose views only move forward: no lag assumption is needed;
//! - every vote counting unconfirmed: a client still on M locks there after the failover;
//! - the quarantine of M' from when it is learnt: a vote on M confirmed just before the
//!   switches outlives it;
//! - a majority of the masters asked, each one's word about itself included (an earlier
//!   rule of the crate): a client starting from a seed's table confirms M' with M' and the
//!   switched third party while another confirms M with M and the lagging one.
//!
//! Liveness: *votes resume*, checked as `always` of a bounded response in every fault
//! set: in every reachable state where a client holds nothing, has a table and may still
//! try, a majority of the masters its round asks answers, every one that answers names one
//! owner (the switch has settled, M included: not demoted, it still names itself), and
//! that owner accepts writes, has no key and, for M', is out of the quarantine counted
//! from its record (this readiness is computed from the state alone, not by the rules),
//! the client's next round, a connect if that round named M' first, and one attempt make
//! it hold. Not `Property::eventually`: stateright judges it only at states without
//! successors (here there are none: `Tick` loops) and drops it where paths join, so it
//! could not fail; and with an adversary that keeps the key taken or spends the rounds
//! before the switch, "eventually holds" is false for reasons that are not the rules'.
//! With four masters and D silent, it holds, and a client ready on M' while D is silent
//! is reachable; a round that waits for every master before it ends (the earlier code:
//! with one silent, no round produces a confirmation in time) is caught by it. With three
//! masters and C silent it fails under the crate's rules too: the owner needs both other
//! masters, so one silent third party takes the member's vote out although a majority of
//! the masters answers (the cost DESIGN.md states).

#[path = "common/model_check.rs"]
mod model_check;

use std::time::Instant;

use model_check::{Explored, Search, Tick};
use quorum_lock::{cluster, safety, sentinel};
use stateright::{Model, Property};

/// The tick: 125 ms.
const TICK: Tick = Tick::from_millis(125);
const TTL: u8 = 8;
const CLIENTS: usize = 2;
const ATTEMPTS: u8 = 2;
const ROUNDS: u8 = 2;
/// The servers of the slot: the first master, and the replica promoted by the failover.
const M: u8 = 0;
const PROMOTED: u8 = 1;
/// The third-party masters B, C and (with four masters) D: by their place among the
/// switches and the asks, and their ids as masters.
const THIRD_PARTY_IDS: [u8; 3] = [2, 3, 4];

/// The confirmation window W, in ticks.
fn window() -> u8 {
    TICK.ticks_down(sentinel::CONFIRM_WINDOW)
}

/// How long a key set now lives on a server whose clock may run fast by the allowance.
fn key_life() -> u8 {
    let ttl = TICK.times(TTL);
    TICK.ticks_down(ttl.saturating_sub(safety::drift_allowance(ttl, 0.0)))
}

/// The crate's rules; every vote counting, confirmed or not; a learnt life's quarantine
/// from when it is learnt; a confirmation by a majority of the masters asked, each one's
/// word about itself included, and requests to the first answer's owner without one; a
/// round that ends only once every master asked answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Crate,
    NoConfirmation,
    NoShift,
    SelfCounted,
    WaitForAll,
}

/// Beside the failover: the assumption, every master answering every round; the
/// assumption broken (a third party lags as long as it likes); the assumption, and rounds
/// that miss a master; the assumption, and the second client starting without a table;
/// `masters` masters (three, or four with D), the last third party silent from any step
/// on, the lag not bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Faults {
    Assumed,
    Lagging,
    Silent,
    Fresh,
    SilentThirdParty { masters: usize },
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
    /// Whether each third party names M'.
    switched: [bool; 3],
    /// Whether the last third party no longer answers.
    silent: bool,
    /// While the lag is bounded and the third parties disagree: the ticks since.
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
    Silence,
    Tick,
}

struct Failover {
    rule: Rule,
    faults: Faults,
    /// The instant the tick of a step stands for.
    epoch: Instant,
    /// The one property a check that stops at its discovery evaluates.
    stop_at: Option<&'static str>,
}

impl Failover {
    /// How many third parties there are: B and C, and D with four masters.
    fn third_parties(&self) -> usize {
        match self.faults {
            Faults::SilentThirdParty { masters } => masters - 1,
            _ => 2,
        }
    }

    /// Whether the third parties' lag is bounded: the assumption.
    fn bounds_lag(&self) -> bool {
        matches!(
            self.faults,
            Faults::Assumed | Faults::Silent | Faults::Fresh
        )
    }

    /// Whether the third party at `t` answers rounds.
    fn is_answering(&self, s: &State, t: usize) -> bool {
        !(s.silent && t + 1 == self.third_parties())
    }

    /// The owner third party `t` names.
    fn named_by(s: &State, t: usize) -> u8 {
        if s.switched[t] { PROMOTED } else { M }
    }

    /// Each master's answer to a round of kind `round` asking the third parties and
    /// `server` (`None`: it does not answer).
    fn answers(&self, s: &State, server: u8, round: Round) -> Vec<(u8, Option<Vec<Option<u8>>>)> {
        let own = if s.demoted { PROMOTED } else { server };
        let parties = self.third_parties();
        let asked = (0..parties).map(|t| (THIRD_PARTY_IDS[t], Self::named_by(s, t)));
        (asked.chain([(server, own)]).enumerate())
            .map(|(i, (master, view))| {
                let answers =
                    round != Round::Without(i) && (i == parties || self.is_answering(s, i));
                (master, answers.then(|| vec![Some(view)]))
            })
            .collect()
    }

    /// A round of `c`'s now: the table it leaves (`None`: no owner, and the next round
    /// starts from a seed again), and the owner it confirms, if any.
    fn round(&self, s: &State, c: &Client, round: Round) -> Option<(Option<u8>, Option<u8>)> {
        let server = match round {
            Round::Fresh(server) => server,
            _ => c.table?,
        };
        let answers = self.answers(s, server, round);
        if self.rule == Rule::SelfCounted {
            // A majority of the masters asked, each one's word about itself included, and
            // the first answer's owner where there is none.
            let named: Vec<Option<u8>> = answers.iter().map(|(_, r)| r.as_ref()?[0]).collect();
            let agreed = sentinel::agreed(&named, named.len());
            let first = named.iter().flatten().next().copied();
            return Some((agreed.or(first), agreed));
        }
        let agreed = cluster::confirmed_owners(&answers, 1);
        // The crate's round ends once settled (one that never does runs to its timeout,
        // confirming nothing); the waiting one only once every master answered.
        let ended = match self.rule {
            Rule::WaitForAll => answers.iter().all(|(_, report)| report.is_some()),
            _ => cluster::settled(&answers, &agreed),
        };
        let agreed = agreed[0].filter(|_| ended);
        Some((agreed, agreed))
    }

    /// Whether a confirmation whose round is `age` ticks old and agreed on `owner` vouches
    /// for a vote on `server` now.
    fn vouched(&self, confirmed: Option<(u8, u8)>, server: u8) -> bool {
        let judged = |(age, owner): (u8, u8)| {
            let round = (self.epoch, owner);
            sentinel::vouched(Some(&round), Some(&server), self.epoch + TICK.times(age))
        };
        self.rule == Rule::NoConfirmation || confirmed.is_some_and(judged)
    }

    /// The ticks M', learnt now, is quarantined for.
    fn quarantine(&self) -> u8 {
        let start = match self.rule {
            Rule::NoShift => self.epoch,
            _ => sentinel::promoted_life_start(self.epoch),
        };
        let period = safety::quarantine_period(TICK.times(TTL), 0.0);
        TICK.ticks_up(start - self.epoch)
            .saturating_add(TICK.ticks_up(period))
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
        n.clients[i].holds = Some((1 + TICK.validity(TTL), server));
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

    /// The owner client `c` could lock on now, whatever the rules: it holds nothing, has a
    /// table and may still try, a majority of the masters its round asks answers, all
    /// naming that owner (the switch has settled: a partitioned M that was not demoted
    /// still names itself), which accepts writes, has no key and, for M', whose quarantine
    /// from its record has run out.
    fn ready_owner(&self, s: &State, c: usize) -> Option<u8> {
        let client = &s.clients[c];
        if client.holds.is_some() || client.attempts >= ATTEMPTS {
            return None;
        }
        // The table's master answers the round, naming itself, or M' once demoted.
        let table = client.table?;
        let owner = if s.demoted { PROMOTED } else { table };
        let parties = self.third_parties();
        let answering = (0..parties).filter(|&t| self.is_answering(s, t));
        let majority = 2 * (answering.clone().count() + 1) > parties + 1;
        let settled = majority && answering.map(|t| Self::named_by(s, t)).all(|n| n == owner);
        let writable = match owner {
            M => !s.demoted,
            _ => s.record_age == Some(self.quarantine()),
        };
        (settled && writable && s.keys[usize::from(owner)].is_none()).then_some(owner)
    }

    /// Whether `c`'s next round, a connect if that round named M' first, and one attempt
    /// make it hold the lock.
    fn votes_resume(&self, s: &State, c: usize) -> bool {
        let Some(confirmed) = self.next_state(s, Action::Confirm(c, Round::All)) else {
            return false;
        };
        let client = confirmed.clients[c];
        let connected = if client.table == Some(PROMOTED) && client.quarantine.is_none() {
            self.next_state(&confirmed, Action::Connect(c))
        } else {
            Some(confirmed)
        };
        (connected.and_then(|n| self.next_state(&n, Action::Acquire(c))))
            .is_some_and(|n| n.clients[c].holds.is_some())
    }

    /// One tick later: the lag grows, keys, locks and quarantines run down, confirmations
    /// and the record age.
    fn tick(&self, n: &mut State) {
        let parties = &n.switched[..self.third_parties()];
        if self.bounds_lag() && parties.contains(&true) && parties.contains(&false) {
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

    /// What client `i` may do next: a round, a connect to M', an attempt or an extension.
    fn client_actions(&self, i: usize, c: &Client, promoted: bool, actions: &mut Vec<Action>) {
        if c.rounds < ROUNDS {
            match (c.table, self.faults) {
                (None, _) => {
                    actions.push(Action::Confirm(i, Round::Fresh(M)));
                    if promoted {
                        actions.push(Action::Confirm(i, Round::Fresh(PROMOTED)));
                    }
                }
                (Some(_), Faults::Silent) => {
                    actions.push(Action::Confirm(i, Round::All));
                    for silent in 0..=self.third_parties() {
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
            switched: [false; 3],
            silent: false,
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
            self.client_actions(i, c, s.promoted, actions);
        }
        if !s.promoted {
            actions.push(Action::Promote);
        } else {
            // A silent third party's view no longer matters.
            let moving = (0..self.third_parties()).filter(|&t| self.is_answering(s, t));
            actions.extend(moving.filter(|&t| !s.switched[t]).map(Action::Switch));
            if !s.demoted {
                actions.push(Action::Demote);
            }
        }
        if matches!(self.faults, Faults::SilentThirdParty { .. }) && !s.silent {
            actions.push(Action::Silence);
        }
        // Time starts with the failover; under the assumption, it does not pass W after
        // the first switch while another third party has not switched.
        if s.promoted && (!self.bounds_lag() || s.lag < window()) {
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
                let old_silent = Round::Without(self.third_parties());
                c.learnt_without_old |= round == old_silent && agreed == Some(PROMOTED);
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
            Action::Silence => n.silent = true,
            Action::Tick => self.tick(&mut n),
        }
        let parties = &n.switched[..self.third_parties()];
        if !(parties.contains(&true) && parties.contains(&false)) {
            n.lag = 0;
        }
        for c in &mut n.clients {
            self.forget(c);
        }
        Some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(EXCLUSION, |_: &Failover, s: &State| {
                s.clients.iter().filter(|c| c.holds.is_some()).count() <= 1
            }),
            Property::always(VOTES_RESUME, |m: &Failover, s: &State| {
                (0..CLIENTS).all(|c| m.ready_owner(s, c).is_none() || m.votes_resume(s, c))
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
            Property::sometimes(READY_WHILE_SILENT, |m: &Failover, s: &State| {
                s.silent && (0..CLIENTS).any(|c| m.ready_owner(s, c) == Some(PROMOTED))
            }),
        ];
        properties.retain(|p| self.stop_at.is_none_or(|name| p.name == name));
        properties
    }
}

const EXCLUSION: &str = "mutual exclusion";
const VOTES_RESUME: &str = "a client that could lock holds after one round and one attempt";
const ON_PROMOTED: &str = "a client holds on the promoted master";
const ON_OLD_AFTER_SWITCH: &str = "a client holds on M, won after a third party switched";
const WHILE_OLD_SILENT: &str = "a client holds on M', learnt from a round M did not answer";
const READY_WHILE_SILENT: &str = "a client could lock on M' while a third party is silent";

/// The two clients are alike (a key does not name its owner, and a client's table tells
/// whether it starts fresh): a state and its mirror have the same futures, so the checker
/// explores one of them.
fn representative(s: &State) -> State {
    let mut sorted = s.clone();
    sorted.clients.sort();
    sorted
}

/// Explores `rule` with `faults` depth first, with the clients' symmetry; with `stop_at`,
/// only that property is evaluated, until its discovery.
fn check(rule: Rule, faults: Faults, stop_at: Option<&'static str>) -> Explored<Failover> {
    let model = Failover {
        rule,
        faults,
        epoch: Instant::now(),
        stop_at,
    };
    let search = Search::Symmetric(representative);
    model_check::check(&format!("{rule:?}, {faults:?}"), model, search, stop_at)
}

/// The crate's rules keep exclusion and votes resume, and each of `reachable` is reached.
fn assert_safe_and_live(faults: Faults, reachable: &[&'static str]) {
    let reached = [&[ON_PROMOTED, ON_OLD_AFTER_SWITCH], reachable].concat();
    let checked = check(Rule::Crate, faults, None);
    checked.assert_safe(&[EXCLUSION, VOTES_RESUME], &reached);
}

/// `rule` with `faults` breaks `property`.
fn assert_caught(rule: Rule, faults: Faults, property: &'static str) {
    check(rule, faults, Some(property)).assert_caught(property);
}

#[test]
fn the_masters_confirmation_and_the_later_quarantine_keep_exclusion() {
    assert_safe_and_live(Faults::Assumed, &[]);
}

#[test]
fn votes_without_the_confirmation_lose_exclusion() {
    assert_caught(Rule::NoConfirmation, Faults::Assumed, EXCLUSION);
}

#[test]
fn a_quarantine_from_when_the_promoted_master_is_learnt_loses_exclusion() {
    assert_caught(Rule::NoShift, Faults::Assumed, EXCLUSION);
}

#[test]
fn a_third_party_lagging_past_the_window_keeps_exclusion_when_every_master_answers() {
    assert_safe_and_live(Faults::Lagging, &[]);
}

#[test]
fn a_round_that_misses_a_master_keeps_exclusion() {
    assert_safe_and_live(Faults::Silent, &[WHILE_OLD_SILENT]);
}

#[test]
fn a_client_starting_fresh_from_a_seed_keeps_exclusion() {
    assert_safe_and_live(Faults::Fresh, &[]);
}

#[test]
fn counting_a_masters_word_about_itself_loses_exclusion() {
    assert_caught(Rule::SelfCounted, Faults::Fresh, EXCLUSION);
}

/// Four masters, D silent from any step on: B and C settle every round, and a client
/// ready on M' while D is silent is reachable.
#[test]
fn a_silent_third_party_of_four_masters_keeps_exclusion_and_votes_resume() {
    let faults = Faults::SilentThirdParty { masters: 4 };
    assert_safe_and_live(faults, &[READY_WHILE_SILENT]);
}

/// Four masters, D silent: a round that waits for it never ends with a confirmation, and
/// a client that could lock never does.
#[test]
fn a_round_waiting_for_every_master_stops_votes_while_a_third_party_is_silent() {
    let faults = Faults::SilentThirdParty { masters: 4 };
    assert_caught(Rule::WaitForAll, faults, VOTES_RESUME);
}

/// Three masters, C silent: the slot's owner needs both others, so the crate's rules give
/// no vote although a majority of the masters answers (the cost DESIGN.md states).
#[test]
fn a_silent_third_party_of_three_masters_stops_votes() {
    let faults = Faults::SilentThirdParty { masters: 3 };
    assert_caught(Rule::Crate, faults, VOTES_RESUME);
}
