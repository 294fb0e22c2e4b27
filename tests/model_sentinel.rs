//! Model check of a member under Sentinel through a failover, with the client's own rules
//! (`quorum_lock::sentinel`: the group learnt from the sentinels and where a round of their
//! answers stands, whose confirmation a vote needs, when a promoted master's quarantine
//! starts; `quorum_lock::safety`: the quarantine period and the validity). DESIGN.md
//! section 7 states the argument.
//!
//! In short: one member (N = 1: two clients that both get this member's vote for one key
//! is exactly what breaks a quorum's intersection), its master M and replica R, three
//! sentinels, two clients, time in ticks of 125 ms so that the confirmation window is 4
//! ticks, TTL 1 s (8 ticks). A key lives its TTL less one tick, a lock its validity
//! rounded down after one tick, a quarantine is rounded up. Every step is atomic at one
//! tick:
//! - `Confirm(c)`: client `c` asks the sentinels its URL lists, and those their answers
//!   report (`SentinelGroup`: every sentinel knows the two others); an unreachable or
//!   silent sentinel's ask stays pending. The round ends once `SentinelGroup::outcome` is
//!   certain with those asks pending; a round still undecided runs to its timeout and
//!   confirms nothing. The address a majority of the group names becomes its
//!   confirmation, from now; a connection to another address is dropped. Answers are read
//!   at the round's start: a real round's answers come later and may only name the new
//!   master sooner, while its window still counts from the start;
//! - `Connect(c)`: `c` resolves the master as a confirmation does and connects there,
//!   refused by a demoted server (`ROLE`); a promoted master is quarantined for the
//!   quarantine period of the TTL from `sentinel::promoted_life_start` of when the first
//!   client learnt it (the promotion record on the node: later clients count from it);
//! - `Acquire(c)`: the script runs on the connection's master (a demoted one answers
//!   `READONLY`, dropping the connection), setting the key if it is free; the vote counts
//!   if `sentinel::vouched` and the master is not quarantined, and the client then holds;
//! - `Promote`: the failover promotes R, whose copy lacks the last lock (the worst case:
//!   a copy that has it only refuses more); `Switch`: sentinels move to R, in order;
//!   `Demote`: Sentinel turns M into R's replica (at any later step, or never: a
//!   partitioned M accepts writes as long as it likes); `Silence { moved }`: a sentinel
//!   that has moved to R, or one still naming M, stops answering for good (frozen, or
//!   dropping packets); `Tick`.
//!
//! A client makes at most two attempts and two confirmation rounds (its connects among
//! them), locks are never released early (a release only shortens an overlap), and the
//! clock starts with the failover (what clients do before it happens at tick 0). Times are
//! kept as ticks left or ages, and what can no longer matter is forgotten (a confirmation
//! too old to vouch, a client that neither holds nor may try again, the demoted M's key):
//! the state space is finite and every future is explored, with no horizon.
//!
//! Three histories:
//! - every sentinel answers both clients: a round reads all three at one instant, so what
//!   it agrees on changes once, when a majority has moved, and `Switch` moves two at once;
//! - a partition: the first client lists all three and reaches the two that move to R,
//!   the second lists and reaches only the third, which stays with M;
//! - one sentinel silent: both clients list all three, and one sentinel falls silent at
//!   any step (from the start, during the failover or after it). With one silent, each
//!   move can change what a round sees: sentinels move one at a time, and all eventually.
//!   The sentinels are alike, so the silent one is named the last to move: silencing one
//!   that has moved renames it so, and the others' moves are the ones a round sees.
//!
//! Safety: *mutual exclusion* (never two holders). The rules are checked safe in every
//! history, and each weakened variant is caught: votes counted on any connection without
//! the confirmation (a client still connected to M locks there after the failover), the
//! promoted master's quarantine counted from when it is learnt instead of a window later
//! (a vote on M confirmed just before the switch outlives it), and a majority of the
//! client's own list instead of the group (in the partition, the second client confirms M
//! alone). `sometimes` properties guard against vacuity: a lock on the promoted master,
//! and one on M after a majority switched.
//!
//! Liveness: *votes resume*, checked as `always` of a bounded response in every history:
//! in every reachable state where a client holds nothing, may still try, and could lock
//! (a majority of the group answers it and names one server, which is a master with no
//! key and, for R, whose quarantine counted from the promotion record has run out; this
//! readiness is computed from the state alone, not by the rules), its next round, a
//! connect if that round left it without one, and one attempt make it hold. Not
//! `Property::eventually`: stateright judges it only at states without successors (here
//! there are none: `Tick` loops) and drops it where paths join, so it could not fail; and
//! with an adversary that keeps the key taken or spends the clients' rounds before the
//! switch, "eventually holds" is false for reasons that are not the rules'. With one
//! sentinel silent it holds, and a client ready on R while one is silent is reachable. A
//! round that ends only once every sentinel of the group answered is caught by it: the
//! earlier code waited for the silent one's ask to time out, after a connect timeout that
//! is the window by default, so the confirmation, counted from the round's start, had run
//! out; in the model such a round never ends with one.

#[path = "common/model_check.rs"]
mod model_check;

use std::time::Instant;

use model_check::{Explored, Search, Tick};
use quorum_lock::sentinel::{GroupReport, RoundOutcome, SentinelGroup};
use quorum_lock::{safety, sentinel};
use stateright::{Model, Property};

/// The tick: 125 ms.
const TICK: Tick = Tick::from_millis(125);
const TTL: u8 = 8;
const SENTINELS: usize = 3;
/// How many sentinels of the group make a majority.
const MAJORITY: usize = SENTINELS / 2 + 1;
const CLIENTS: usize = 2;
const ATTEMPTS: u8 = 2;
/// Confirmation rounds per client, connects included.
const ROUNDS: u8 = 2;
/// The servers: the first master, and the replica promoted by the failover.
const M: u8 = 0;
const R: u8 = 1;

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
    /// A round ends only once every sentinel of the group answered.
    WaitForAll,
}

/// Which sentinels each client lists and reaches, and whether one may fall silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum History {
    /// Both clients list and reach all three.
    AllListed,
    /// The first client lists all three and reaches the first two; the second lists and
    /// reaches only the third, which never moves to R.
    PartialList,
    /// Both clients list all three, and any one may stop answering at any step.
    OneSilent,
}

impl History {
    /// The sentinels client `c` lists, and those it reaches.
    fn sentinels(self, c: usize) -> (&'static [usize], &'static [usize]) {
        match (self, c) {
            (History::PartialList, 0) => (&[0, 1, 2], &[0, 1]),
            (History::PartialList, _) => (&[2], &[2]),
            _ => (&[0, 1, 2], &[0, 1, 2]),
        }
    }

    /// How many sentinels name R after one more `Switch` from `switched`, if one is left.
    fn switch(self, switched: usize) -> Option<usize> {
        match self {
            // What a round of every sentinel sees changes once, when a majority moved;
            // in the partition the third never moves.
            History::AllListed | History::PartialList => (switched == 0).then_some(MAJORITY),
            History::OneSilent => (switched < SENTINELS).then_some(switched + 1),
        }
    }

    /// Whether the clients list and reach the same sentinels, so are alike.
    fn clients_alike(self) -> bool {
        self != History::PartialList
    }
}

/// A client; times are ticks to come, or an age.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
struct Client {
    connected: Option<u8>,
    /// Its last confirmation while it may vouch: its round's age, the server it named.
    confirmed: Option<(u8, u8)>,
    /// The ticks left of the connected master's quarantine.
    quarantine: u8,
    /// While it holds the lock: the ticks left, and the server it won it on.
    holds: Option<(u8, u8)>,
    attempts: u8,
    rounds: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    /// How many sentinels name R: the first ones, in order.
    switched: usize,
    /// Whether the last sentinel no longer answers (then at most the others moved).
    silent: bool,
    promoted: bool,
    demoted: bool,
    /// Per server, the ticks its lock key has left.
    keys: [Option<u8>; 2],
    /// R's promotion record: the ticks since a client first learnt R (at most the
    /// quarantine, after which it no longer matters).
    record_age: Option<u8>,
    clients: [Client; CLIENTS],
}

impl State {
    /// The server sentinel `i` names.
    fn view(&self, i: usize) -> u8 {
        if i < self.switched { R } else { M }
    }

    /// Whether sentinel `i` answers.
    fn is_answering(&self, i: usize) -> bool {
        !(self.silent && i == SENTINELS - 1)
    }

    fn is_master(&self, server: u8) -> bool {
        match server {
            M => !self.demoted,
            _ => self.promoted,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Action {
    Confirm(usize),
    Connect(usize),
    Acquire(usize),
    Promote,
    Switch,
    Demote,
    Silence { moved: bool },
    Tick,
}

struct Failover {
    rule: Rule,
    history: History,
    /// What each sentinel reports of its group: its id and the two others'.
    reports: Vec<GroupReport<usize>>,
    /// The instant the tick of a step stands for.
    epoch: Instant,
    /// The one property a check that stops at its discovery evaluates.
    stop_at: Option<&'static str>,
}

impl Failover {
    fn new(rule: Rule, history: History, epoch: Instant, stop_at: Option<&'static str>) -> Self {
        let id = |i: usize| Some(format!("sentinel-{i}"));
        let report = |i: usize| GroupReport {
            id: id(i),
            others: (0..SENTINELS)
                .filter(|&o| o != i)
                .map(|o| (o, id(o)))
                .collect(),
            num_others: SENTINELS - 1,
        };
        Failover {
            rule,
            history,
            reports: (0..SENTINELS).map(report).collect(),
            epoch,
            stop_at,
        }
    }

    /// How many sentinels name R after one more `Switch`, if one that answers is left.
    fn next_switch(&self, s: &State) -> Option<usize> {
        let last = if s.silent { SENTINELS - 1 } else { SENTINELS };
        self.history.switch(s.switched).filter(|&n| n <= last)
    }

    /// What a round of client `c` at this step agrees on: the sentinels it lists, then
    /// those their answers report; the asks of those it cannot reach stay pending.
    fn agreed(&self, s: &State, c: usize) -> Option<u8> {
        let (listed, reached) = self.history.sentinels(c);
        let hears = |i: usize| reached.contains(&i) && s.is_answering(i);
        if self.rule == Rule::OwnList {
            let named: Vec<Option<u8>> = (listed.iter())
                .map(|&i| hears(i).then(|| s.view(i)))
                .collect();
            return sentinel::agreed(&named, listed.len());
        }
        let mut group = SentinelGroup::new(listed.iter().copied());
        let mut asked = listed.to_vec();
        let mut named = Vec::new();
        let mut next = 0;
        while let Some(&i) = asked.get(next) {
            next += 1;
            if hears(i) {
                asked.extend(group.learn(&i, &self.reports[i]));
                named.push((i, Some(s.view(i))));
            }
        }
        let pending = asked.len() - named.len();
        match group.outcome(&named, pending) {
            RoundOutcome::Agreed(_) if self.rule == Rule::WaitForAll && pending > 0 => None,
            RoundOutcome::Agreed(master) => Some(master),
            _ => None,
        }
    }

    /// Whether a confirmation `age` ticks old that named `named` vouches for a vote on the
    /// connection to `connected`.
    fn vouched(&self, confirmed: Option<(u8, u8)>, connected: Option<u8>) -> bool {
        let judged = |(age, named): (u8, u8)| {
            let round = (self.epoch, named);
            sentinel::vouched(
                Some(&round),
                connected.as_ref(),
                self.epoch + TICK.times(age),
            )
        };
        self.rule == Rule::NoConfirmation || confirmed.is_some_and(judged)
    }

    /// The ticks R, learnt now, is quarantined for.
    fn quarantine(&self) -> u8 {
        let start = match self.rule {
            Rule::NoShift => self.epoch,
            _ => sentinel::promoted_life_start(self.epoch),
        };
        let period = safety::quarantine_period(TICK.times(TTL), 0.0);
        TICK.ticks_up(start - self.epoch)
            .saturating_add(TICK.ticks_up(period))
    }

    /// `c` with what can no longer matter forgotten: a confirmation too old to vouch, the
    /// quarantine of no connection, and everything once it neither holds nor may try again.
    fn forget(&self, c: &mut Client) {
        let stale = |&(age, named): &(u8, u8)| !self.vouched(Some((age, named)), Some(named));
        if self.rule == Rule::NoConfirmation || c.confirmed.as_ref().is_some_and(stale) {
            c.confirmed = None;
        }
        if c.connected.is_none() {
            c.quarantine = 0;
        }
        if c.holds.is_none() && c.attempts >= ATTEMPTS {
            *c = Client {
                attempts: ATTEMPTS,
                rounds: ROUNDS,
                ..Client::default()
            };
        }
    }

    /// The server client `c` could lock on now, whatever the rules: it holds nothing and
    /// may still try, a majority of the group answers it and names that server, a master
    /// whose key is free and, for R, whose quarantine from its record has run out.
    fn ready_server(&self, s: &State, c: usize) -> Option<u8> {
        let client = &s.clients[c];
        if client.holds.is_some() || client.attempts >= ATTEMPTS {
            return None;
        }
        let (_, reached) = self.history.sentinels(c);
        let answering = reached.iter().filter(|&&i| s.is_answering(i));
        let named = |server: u8| answering.clone().filter(|&&i| s.view(i) == server).count();
        let server = [M, R].into_iter().find(|&x| named(x) >= MAJORITY)?;
        let free = s.is_master(server) && s.keys[usize::from(server)].is_none();
        let out_of_quarantine = server == M || s.record_age == Some(self.quarantine());
        (free && out_of_quarantine).then_some(server)
    }

    /// Whether `c`'s next round, a connect if that round left it without a connection,
    /// and one attempt make it hold the lock.
    fn votes_resume(&self, s: &State, c: usize) -> bool {
        let Some(confirmed) = self.next_state(s, Action::Confirm(c)) else {
            return false;
        };
        let connected = match confirmed.clients[c].connected {
            Some(_) => Some(confirmed),
            None => self.next_state(&confirmed, Action::Connect(c)),
        };
        (connected.and_then(|n| self.next_state(&n, Action::Acquire(c))))
            .is_some_and(|n| n.clients[c].holds.is_some())
    }

    /// Client `i`'s round: its confirmation, and its connection kept only to the address
    /// confirmed (`None`: the round confirms nothing, and the step is not taken).
    fn confirm(&self, s: &State, n: &mut State, i: usize) -> Option<()> {
        let agreed = self.agreed(s, i)?;
        let c = &mut n.clients[i];
        c.rounds += 1;
        c.confirmed = Some((0, agreed));
        if c.connected.is_some_and(|at| at != agreed) {
            c.connected = None;
        }
        Some(())
    }

    /// Client `i` connects to the master a round confirms now (`None`: none, or demoted).
    fn connect(&self, s: &State, n: &mut State, i: usize) -> Option<()> {
        let agreed = self.agreed(s, i).filter(|&at| s.is_master(at))?;
        let c = &mut n.clients[i];
        c.rounds += 1;
        c.connected = Some(agreed);
        c.confirmed = Some((0, agreed));
        // R's quarantine counts from its promotion record: when the first client learnt it.
        if agreed == R {
            let age = *n.record_age.get_or_insert(0);
            c.quarantine = self.quarantine().saturating_sub(age);
        }
        Some(())
    }

    /// Client `i`'s attempt on its connection: the key set if free, the lock held if the
    /// vote counts.
    fn acquire(&self, s: &State, n: &mut State, i: usize) -> Option<()> {
        let c = s.clients[i];
        let server = c.connected?;
        n.clients[i].attempts += 1;
        if !s.is_master(server) {
            n.clients[i].connected = None;
            return Some(());
        }
        let key = &mut n.keys[usize::from(server)];
        if key.is_some() {
            return Some(());
        }
        *key = Some(TTL - 1);
        if self.vouched(c.confirmed, c.connected) && c.quarantine == 0 {
            n.clients[i].holds = Some((1 + TICK.validity(TTL), server));
        }
        Some(())
    }

    /// One tick later: keys and locks run down, confirmations and the record age.
    fn tick(&self, n: &mut State) {
        let left = |t: u8| (t > 1).then(|| t - 1);
        for key in &mut n.keys {
            *key = key.and_then(left);
        }
        if let Some(age) = &mut n.record_age {
            *age = (*age + 1).min(self.quarantine());
        }
        for c in &mut n.clients {
            c.holds = c.holds.and_then(|(t, at)| Some((left(t)?, at)));
            if let Some((age, _)) = &mut c.confirmed {
                *age += 1;
            }
            c.quarantine = c.quarantine.saturating_sub(1);
        }
    }
}

impl Model for Failover {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            switched: 0,
            silent: false,
            promoted: false,
            demoted: false,
            keys: [None, None],
            record_age: None,
            clients: [Client::default(); CLIENTS],
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for (i, c) in s.clients.iter().enumerate() {
            if c.rounds < ROUNDS {
                actions.push(Action::Confirm(i));
                if c.connected.is_none() && c.holds.is_none() {
                    actions.push(Action::Connect(i));
                }
            }
            if c.connected.is_some() && c.holds.is_none() && c.attempts < ATTEMPTS {
                actions.push(Action::Acquire(i));
            }
        }
        if !s.promoted {
            actions.push(Action::Promote);
        } else {
            if self.next_switch(s).is_some() {
                actions.push(Action::Switch);
            }
            if !s.demoted {
                actions.push(Action::Demote);
            }
        }
        if self.history == History::OneSilent && !s.silent {
            if s.switched > 0 {
                actions.push(Action::Silence { moved: true });
            }
            if s.switched < SENTINELS {
                actions.push(Action::Silence { moved: false });
            }
        }
        // Time starts with the failover: idle ticks before it change nothing but the clock.
        if s.promoted {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut n = s.clone();
        match action {
            Action::Confirm(i) => self.confirm(s, &mut n, i)?,
            Action::Connect(i) => self.connect(s, &mut n, i)?,
            Action::Acquire(i) => self.acquire(s, &mut n, i)?,
            Action::Promote => {
                n.promoted = true;
                n.keys[usize::from(R)] = None;
            }
            Action::Switch => n.switched = self.next_switch(s)?,
            // Demoted, M never accepts a write again: its key no longer matters.
            Action::Demote => (n.demoted, n.keys[usize::from(M)]) = (true, None),
            // Renamed the last to move, a silent one that moved leaves one fewer moved.
            Action::Silence { moved } => {
                (n.silent, n.switched) = (true, s.switched - usize::from(moved))
            }
            Action::Tick => self.tick(&mut n),
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
                (0..CLIENTS).all(|c| m.ready_server(s, c).is_none() || m.votes_resume(s, c))
            }),
            Property::sometimes(ON_PROMOTED, |_: &Failover, s: &State| {
                (s.clients.iter()).any(|c| c.holds.is_some_and(|(_, at)| at == R))
            }),
            Property::sometimes(ON_OLD_AFTER_SWITCH, |_: &Failover, s: &State| {
                s.switched >= MAJORITY
                    && (s.clients.iter()).any(|c| c.holds.is_some_and(|(_, at)| at == M))
            }),
            Property::sometimes(READY_WHILE_SILENT, |m: &Failover, s: &State| {
                s.silent && (0..CLIENTS).any(|c| m.ready_server(s, c) == Some(R))
            }),
        ];
        properties.retain(|p| self.stop_at.is_none_or(|name| p.name == name));
        properties
    }
}

const EXCLUSION: &str = "mutual exclusion";
const VOTES_RESUME: &str = "a client that could lock holds after one round and one attempt";
const ON_PROMOTED: &str = "a client holds on the promoted master";
const ON_OLD_AFTER_SWITCH: &str = "a client holds on the old master after a majority switched";
const READY_WHILE_SILENT: &str = "a client could lock on R while a sentinel is silent";

/// The two clients are alike when they list and reach the same sentinels (a key does not
/// name its owner): a state and its mirror have the same futures, so the checker explores
/// one of them.
fn representative(s: &State) -> State {
    let mut sorted = s.clone();
    sorted.clients.sort();
    sorted
}

/// Explores `rule` in `history` depth first (with the clients' symmetry where they are
/// alike); with `stop_at`, only that property is evaluated, until its discovery.
fn check(rule: Rule, history: History, stop_at: Option<&'static str>) -> Explored<Failover> {
    let model = Failover::new(rule, history, Instant::now(), stop_at);
    let search = if history.clients_alike() {
        Search::Symmetric(representative)
    } else {
        Search::DepthFirst
    };
    model_check::check(&format!("{rule:?}, {history:?}"), model, search, stop_at)
}

/// The crate's rules keep exclusion and votes resume, and each of `reachable` is reached.
fn assert_safe_and_live(history: History, reachable: &[&'static str]) {
    let checked = check(Rule::Crate, history, None);
    checked.assert_safe(&[EXCLUSION, VOTES_RESUME], reachable);
}

/// `rule` in `history` breaks `property`.
fn assert_caught(rule: Rule, history: History, property: &'static str) {
    check(rule, history, Some(property)).assert_caught(property);
}

#[test]
fn the_confirmation_and_the_later_quarantine_keep_exclusion_through_a_failover() {
    assert_safe_and_live(History::AllListed, &[ON_PROMOTED, ON_OLD_AFTER_SWITCH]);
}

/// The partition: the first client confirms what the two sentinels it reaches name, the
/// second reaches one sentinel of the group of three and never confirms.
#[test]
fn a_majority_of_the_learnt_group_keeps_exclusion_with_a_partial_list() {
    assert_safe_and_live(History::PartialList, &[ON_PROMOTED]);
}

/// A sentinel silent from any step on: rounds end once the two others agree, and a client
/// ready on R while it is silent is reachable.
#[test]
fn a_silent_sentinel_keeps_exclusion_and_votes_resume() {
    let reachable = [ON_PROMOTED, ON_OLD_AFTER_SWITCH, READY_WHILE_SILENT];
    assert_safe_and_live(History::OneSilent, &reachable);
}

#[test]
fn votes_without_the_confirmation_lose_exclusion() {
    assert_caught(Rule::NoConfirmation, History::AllListed, EXCLUSION);
}

#[test]
fn a_quarantine_from_when_the_promoted_master_is_learnt_loses_exclusion() {
    assert_caught(Rule::NoShift, History::AllListed, EXCLUSION);
}

/// The second client, listing only the sentinel left with M, locks there while the first
/// holds on R.
#[test]
fn a_majority_of_the_clients_own_list_loses_exclusion() {
    assert_caught(Rule::OwnList, History::PartialList, EXCLUSION);
}

/// With one sentinel silent, a round that waits for it never ends with a confirmation:
/// a client that could lock never does.
#[test]
fn a_round_waiting_for_every_sentinel_stops_votes_while_one_is_silent() {
    assert_caught(Rule::WaitForAll, History::OneSilent, VOTES_RESUME);
}
