//! Model check of the two lock kinds beside the mutex, a read-write lock and a counting
//! semaphore, over the quorum: which per-node rule keeps the kind's promise, and which does
//! not. The client's decisions are the crate's own (`safety::majority`,
//! `safety::lease_validity`, `safety::quarantine_period`); each node's rule is written here
//! as its script would apply it, atomically.
//!
//! In short: three nodes, three clients, time in ticks of 250 ms, drift factor 0 (the 2 ms
//! constant), taken on the safe side as in `tests/model.rs`: an attempt decides within the
//! tick after it began, so a client holds for its validity rounded down to whole ticks
//! after one tick elapsed, and a node's entry lives its TTL less one tick (its clock fast
//! by the allowance). Every step is atomic:
//! - `Acquire(c, slot, reached)`: client `c` runs one attempt; its request reaches the
//!   nodes in `reached` (the others lost it, or are down), each applies its rule, and the
//!   client holds if a majority granted and validity is left. A failed attempt leaves its
//!   grants to expire (its clean-up may be lost: the model never relies on it);
//! - `Release(c, reached)`: the holder's release reaches the nodes in `reached`;
//! - `Tick`: time passes; entries and holds expire;
//! - `Restart(i)`: node `i` loses its memory (at most one restart per run, a minority of
//!   three); restart quarantine keeps its vote out for the quarantine period of the TTL
//!   ceiling, as the mutex's rules bound it (DESIGN.md section 7).
//!
//! Safety: for the read-write lock, *a writer excludes everyone* (no instant where a
//! writer, or the mutex of the lock's name, holds while another client holds, to read or
//! to write: one name is one lock, the readers marking the lock key the mutex's plain
//! `SET NX` finds taken; a mutex with a key of its own runs beside readers, as in earlier
//! versions); for the semaphore, *at
//! most K holders*. Each design is checked safe, and the designs that peers use are found
//! unsafe: readers that share one TTL (a reader's grant resets the expiry of all), and a
//! semaphore that counts holders per node and takes a plain majority (Lua `ZCARD < K`).
//! Clients of one semaphore that use different counts are refused by the count record each
//! node keeps beside the slots; without it they exceed the smaller count.
//! `sometimes` properties guard against vacuity: two readers share, a writer holds, K
//! holders hold at once.

#[path = "common/model_check.rs"]
mod model_check;

use model_check::{Explored, Search, Tick, bits};
use quorum_lock::safety;
use stateright::{Model, Property};

const NODES: usize = 3;
const CLIENTS: usize = 3;
/// The tick: 250 ms.
const TICK: Tick = Tick::from_millis(250);

/// What each kind keeps on one node. Expiries are ticks: an entry lives while `now` is
/// below its expiry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Node {
    /// Tick from which the node votes (restart quarantine); 0 when it never restarted.
    votes_from: u8,
    /// Read-write lock: the writer and its expiry.
    writer: Option<(u8, u8)>,
    /// Read-write lock: each reader's own expiry (`PerReader`), or the readers with one
    /// shared expiry (`SharedTtl`: the expiry in `shared`).
    readers: [Option<u8>; CLIENTS],
    shared: u8,
    /// Read-write lock: a waiting writer's intent, until this tick (0: none).
    intent: u8,
    /// Read-write lock: the readers' mark on the lock key, until this tick (0: none): a
    /// mutex of the same name finds the key taken.
    mark: u8,
    /// A mutex's key of its own, apart from the read-write lock's (`SeparateMutex`).
    own_key: Option<(u8, u8)>,
    /// Semaphore: per slot, its holder and expiry (`Slots`); per client, its entry in the
    /// node's holder set (`Count`, in `readers`).
    slots: [Option<(u8, u8)>; PERMITS],
    /// Semaphore: the permit count its holders use and until when (`Slots` only).
    count: Option<(u8, u8)>,
    /// Semaphore: the permits' mark on the lock key of its name, until this tick (0:
    /// none; `Slots` only): a mutex of the same name finds the key taken.
    permits_mark: u8,
}

impl Node {
    fn expire(&mut self, now: u8, rule: Rule) {
        if self.writer.is_some_and(|(_, until)| until <= now) {
            self.writer = None;
        }
        if self.intent <= now {
            self.intent = 0;
        }
        if self.mark <= now {
            self.mark = 0;
        }
        if self.own_key.is_some_and(|(_, until)| until <= now) {
            self.own_key = None;
        }
        for r in &mut self.readers {
            let until = match rule {
                Rule::SharedTtl => self.shared,
                _ => r.unwrap_or(0),
            };
            if r.is_some() && until <= now {
                *r = None;
            }
        }
        for s in &mut self.slots {
            if s.is_some_and(|(_, until)| until <= now) {
                *s = None;
            }
        }
        if self.count.is_some_and(|(_, until)| until <= now) {
            self.count = None;
        }
        if self.permits_mark <= now {
            self.permits_mark = 0;
        }
    }

    fn readers_other_than(&self, c: usize) -> bool {
        (self.readers.iter().enumerate()).any(|(r, e)| r != c && e.is_some())
    }

    /// The node's script: whether it grants `c` what it asks (`slot` for the semaphore's
    /// slots) at tick `now`, writing the entry, which lives until `until`.
    fn grant(
        &mut self,
        c: usize,
        (kind, count): (Kind, u8),
        slot: usize,
        (now, until): (u8, u8),
        rule: Rule,
    ) -> bool {
        let client = c as u8;
        match kind {
            Kind::Write => {
                if self.writer.is_some_and(|(w, _)| w != client) {
                    return false;
                }
                if self.readers_other_than(c) {
                    // A writer found readers: new readers stay out while its intent lives.
                    self.intent = until;
                    return false;
                }
                // Replaces a mark that outlived its readers.
                self.writer = Some((client, until));
                self.intent = 0;
                self.mark = 0;
            }
            Kind::Mutex if rule == Rule::SeparateMutex => {
                if self.own_key.is_some_and(|(h, _)| h != client) {
                    return false;
                }
                self.own_key = Some((client, until));
            }
            Kind::Mutex => {
                // A plain `SET NX` on the lock key: a writer's token, the readers' mark or
                // the permits' mark refuses it.
                let marked = self.mark > now || self.permits_mark > now;
                if self.writer.is_some_and(|(w, _)| w != client) || marked {
                    return false;
                }
                self.writer = Some((client, until));
            }
            Kind::Read => {
                if self.writer.is_some_and(|(w, _)| w != client) {
                    return false;
                }
                if rule != Rule::IgnoreIntent && self.intent > now {
                    return false;
                }
                self.readers[c] = Some(until);
                self.mark = self.mark.max(until);
                if rule == Rule::SharedTtl {
                    // One TTL for the set of readers: the newest reader's.
                    self.shared = until;
                }
            }
            Kind::Permit => match rule {
                Rule::Count => {
                    let held = self.readers.iter().filter(|e| e.is_some()).count();
                    if self.readers[c].is_none() && held >= PERMITS {
                        return false;
                    }
                    self.readers[c] = Some(until);
                }
                _ => {
                    if self.slots[slot].is_some_and(|(h, _)| h != client) {
                        return false;
                    }
                    if rule == Rule::Slots && self.count.is_some_and(|(k, _)| k != count) {
                        // Another count is recorded while its holders may hold.
                        return false;
                    }
                    if rule == Rule::Slots && (self.writer.is_some() || self.mark > now) {
                        // A lock of another kind holds the name.
                        return false;
                    }
                    self.slots[slot] = Some((client, until));
                    if rule == Rule::Slots {
                        let kept = self.count.map_or(until, |(_, t)| t.max(until));
                        self.count = Some((count, kept));
                        self.permits_mark = self.permits_mark.max(until);
                    }
                }
            },
        }
        true
    }

    fn release(&mut self, c: usize) {
        let client = c as u8;
        if self.writer.is_some_and(|(w, _)| w == client) {
            self.writer = None;
        }
        if self.own_key.is_some_and(|(h, _)| h == client) {
            self.own_key = None;
        }
        if self.readers[c].take().is_some() {
            // The mark lives as long as the longest-lived remaining reader, or goes.
            self.mark = self.readers.iter().flatten().copied().max().unwrap_or(0);
        }
        for s in &mut self.slots {
            if s.is_some_and(|(h, _)| h == client) {
                *s = None;
            }
        }
    }
}

/// What a client asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Read,
    Write,
    /// The mutex of the read-write lock's name.
    Mutex,
    Permit,
}

/// The semaphore's permits.
const PERMITS: usize = 2;

/// The per-node rule checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    /// Read-write lock: each reader has its own expiry.
    PerReader,
    /// Read-write lock as peers build it: one expiry for all readers, reset by each grant.
    SharedTtl,
    /// Read-write lock whose readers ignore a waiting writer's intent.
    IgnoreIntent,
    /// Read-write lock whose name's mutex has a key of its own, as in earlier versions.
    SeparateMutex,
    /// Semaphore: K slots, each an ordinary quorum lock, with the count record.
    Slots,
    /// Semaphore: K slots without the count record (clients may use different counts).
    SlotsNoCount,
    /// Semaphore as peers build it: each node counts its holders, a plain majority wins.
    Count,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    nodes: [Node; NODES],
    /// Per client: until when it holds (`Some`), and the attempts it has left.
    holds: [Option<u8>; CLIENTS],
    attempts_left: [u8; CLIENTS],
    restarted: bool,
    /// A reader won while a writer's intent lived on a majority of nodes.
    reader_past_intent: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Action {
    Acquire(usize, usize, u8),
    Release(usize, u8),
    Tick,
    Restart(usize),
}

impl State {
    /// How many nodes hold a live writer intent.
    fn intents(&self) -> usize {
        self.nodes.iter().filter(|n| n.intent > self.now).count()
    }
}

struct Kinds {
    rule: Rule,
    /// Per client: what it asks for and its TTL in ticks.
    clients: [(Kind, u8); CLIENTS],
    /// Per client: the permit count it uses (semaphores).
    counts: [u8; CLIENTS],
    /// Restart quarantine on (the rule as written) or off.
    quarantine: bool,
    restarts: bool,
    attempts: u8,
    horizon: u8,
}

impl Kinds {
    /// The slots client `c` tries: as many as its count, one for the other kinds.
    fn slots(&self, c: usize) -> usize {
        match (self.rule, self.clients[c].0) {
            (Rule::Slots | Rule::SlotsNoCount, Kind::Permit) => usize::from(self.counts[c]),
            _ => 1,
        }
    }

    fn ceiling(&self) -> u8 {
        self.clients.iter().map(|(_, ttl)| *ttl).max().unwrap_or(0)
    }
}

impl Model for Kinds {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            nodes: Default::default(),
            holds: [None; CLIENTS],
            attempts_left: [self.attempts; CLIENTS],
            restarted: false,
            reader_past_intent: false,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        for c in 0..CLIENTS {
            match s.holds[c] {
                None if s.attempts_left[c] > 0 => {
                    for slot in 0..self.slots(c) {
                        for reached in 1..(1u8 << NODES) {
                            actions.push(Action::Acquire(c, slot, reached));
                        }
                    }
                }
                Some(_) => {
                    for reached in 0..(1u8 << NODES) {
                        actions.push(Action::Release(c, reached));
                    }
                }
                None => {}
            }
        }
        if s.now < self.horizon {
            actions.push(Action::Tick);
        }
        if self.restarts && !s.restarted {
            actions.extend((0..NODES).map(Action::Restart));
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Acquire(c, slot, reached) => {
                s.attempts_left[c] -= 1;
                let (kind, ttl) = self.clients[c];
                // The key lives its TTL less one tick: the node's clock may run fast.
                let until = s.now + ttl - 1;
                let now = s.now;
                let intents = s.intents();
                let granted = bits(reached)
                    .filter(|&i| {
                        let node = &mut s.nodes[i];
                        node.votes_from <= now
                            && node.grant(c, (kind, self.counts[c]), slot, (now, until), self.rule)
                    })
                    .count();
                let validity = TICK.validity(ttl);
                if granted >= safety::majority(NODES) && validity > 0 {
                    s.holds[c] = Some(now + validity);
                    if kind == Kind::Read && intents >= safety::majority(NODES) {
                        s.reader_past_intent = true;
                    }
                }
            }
            Action::Release(c, reached) => {
                s.holds[c] = None;
                for i in bits(reached) {
                    s.nodes[i].release(c);
                }
            }
            Action::Tick => {
                s.now += 1;
                let now = s.now;
                for node in &mut s.nodes {
                    node.expire(now, self.rule);
                }
                for hold in &mut s.holds {
                    if hold.is_some_and(|until| until <= now) {
                        *hold = None;
                    }
                }
            }
            Action::Restart(i) => {
                s.restarted = true;
                let period = safety::quarantine_period(TICK.times(self.ceiling()), 0.0);
                let wait = if self.quarantine {
                    TICK.ticks_up(period)
                } else {
                    0
                };
                s.nodes[i] = Node {
                    votes_from: s.now + wait,
                    ..Node::default()
                };
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(WRITER_EXCLUDES, |m: &Kinds, s: &State| {
                let holding = |c: usize| s.holds[c].is_some();
                let exclusive = |c: usize| matches!(m.clients[c].0, Kind::Write | Kind::Mutex);
                let writers = (0..CLIENTS).filter(|&c| holding(c) && exclusive(c));
                writers
                    .into_iter()
                    .all(|w| (0..CLIENTS).all(|o| o == w || !holding(o)))
            }),
            Property::always(AT_MOST_K, |m: &Kinds, s: &State| {
                // Every holder was promised at most its own count of holders.
                let holders: Vec<usize> = (0..CLIENTS)
                    .filter(|&c| s.holds[c].is_some() && m.clients[c].0 == Kind::Permit)
                    .collect();
                (holders.iter()).all(|&c| holders.len() <= usize::from(m.counts[c]))
            }),
            Property::always(NO_READER_PAST_INTENT, |_: &Kinds, s: &State| {
                !s.reader_past_intent
            }),
            Property::sometimes(INTENT_STANDS, |_: &Kinds, s: &State| {
                s.intents() >= safety::majority(NODES)
            }),
            Property::sometimes(READERS_SHARE, |m: &Kinds, s: &State| {
                (0..CLIENTS)
                    .filter(|&c| s.holds[c].is_some() && m.clients[c].0 == Kind::Read)
                    .count()
                    >= 2
            }),
            Property::sometimes(WRITER_HOLDS, |m: &Kinds, s: &State| {
                (0..CLIENTS).any(|c| s.holds[c].is_some() && m.clients[c].0 == Kind::Write)
            }),
            Property::sometimes(MUTEX_HOLDS, |m: &Kinds, s: &State| {
                (0..CLIENTS).any(|c| s.holds[c].is_some() && m.clients[c].0 == Kind::Mutex)
            }),
            Property::sometimes(PERMIT_HOLDS, |m: &Kinds, s: &State| {
                (0..CLIENTS).any(|c| s.holds[c].is_some() && m.clients[c].0 == Kind::Permit)
            }),
            Property::sometimes(K_HOLD, |m: &Kinds, s: &State| {
                (0..CLIENTS)
                    .filter(|&c| s.holds[c].is_some() && m.clients[c].0 == Kind::Permit)
                    .count()
                    == PERMITS
            }),
            Property::sometimes(WRITER_AFTER_RESTART, |m: &Kinds, s: &State| {
                s.restarted
                    && (0..CLIENTS).any(|c| s.holds[c].is_some() && m.clients[c].0 == Kind::Write)
            }),
        ]
    }
}

const WRITER_EXCLUDES: &str = "a writer excludes everyone";
const AT_MOST_K: &str = "at most K permit holders";
const NO_READER_PAST_INTENT: &str = "no reader enters past a waiting writer";
const INTENT_STANDS: &str = "a waiting writer's intent stands on a majority";
const READERS_SHARE: &str = "two readers hold at once";
const WRITER_HOLDS: &str = "a writer holds";
const MUTEX_HOLDS: &str = "the mutex of the name holds";
const PERMIT_HOLDS: &str = "a permit holder holds";
const K_HOLD: &str = "K permit holders hold at once";
const WRITER_AFTER_RESTART: &str = "a writer holds after a node restarted";

/// The nodes are interchangeable (no client state names one): a state's representative
/// has them sorted.
fn representative(s: &State) -> State {
    let mut r = s.clone();
    r.nodes.sort();
    r
}

/// Explores `model` depth first, one state per permutation of the nodes, to the end or
/// until `stop_at` is broken.
fn check(name: &str, model: Kinds, stop_at: Option<&'static str>) -> Explored<Kinds> {
    let label = format!("{name} ({:?})", model.rule);
    model_check::check(&label, model, Search::Symmetric(representative), stop_at)
}

/// No counterexample to any safety property; each state in `reached` is reached.
fn assert_safe(name: &str, model: Kinds, reached: &[&'static str]) {
    let holds = [WRITER_EXCLUDES, AT_MOST_K, NO_READER_PAST_INTENT];
    check(name, model, None).assert_safe(&holds, reached);
}

/// The checker must find a counterexample to `property`.
fn assert_caught(name: &str, model: Kinds, property: &'static str) {
    check(name, model, Some(property)).assert_caught(property);
}

/// Two readers with different TTLs and a writer, each with `attempts` attempts.
fn read_write(rule: Rule, quarantine: bool, restarts: bool, attempts: u8) -> Kinds {
    Kinds {
        rule,
        clients: [(Kind::Read, 5), (Kind::Read, 3), (Kind::Write, 3)],
        counts: [1; CLIENTS],
        quarantine,
        restarts,
        attempts,
        horizon: 8,
    }
}

/// Two readers with different TTLs and the mutex of their lock's name, two attempts each.
fn read_and_mutex(rule: Rule, restarts: bool) -> Kinds {
    Kinds {
        clients: [(Kind::Read, 5), (Kind::Read, 3), (Kind::Mutex, 3)],
        ..read_write(rule, true, restarts, 2)
    }
}

/// Three clients, two permits, one attempt each (two take minutes).
fn semaphore(rule: Rule, quarantine: bool, restarts: bool) -> Kinds {
    Kinds {
        rule,
        clients: [(Kind::Permit, 3); CLIENTS],
        counts: [PERMITS as u8; CLIENTS],
        quarantine,
        restarts,
        attempts: 1,
        horizon: 6,
    }
}

#[test]
fn a_writer_excludes_readers_with_per_reader_expiry() {
    let model = read_write(Rule::PerReader, true, false, 2);
    assert_safe("rw", model, &[READERS_SHARE, WRITER_HOLDS, INTENT_STANDS]);
}

#[test]
fn a_writer_excludes_readers_through_a_restart() {
    let model = read_write(Rule::PerReader, true, true, 2);
    assert_safe("rw restart", model, &[READERS_SHARE, WRITER_AFTER_RESTART]);
}

#[test]
fn readers_sharing_one_ttl_let_a_writer_in() {
    let model = read_write(Rule::SharedTtl, true, false, 1);
    assert_caught("rw shared ttl", model, WRITER_EXCLUDES);
}

#[test]
fn a_restart_without_quarantine_lets_a_writer_in() {
    let model = read_write(Rule::PerReader, false, true, 1);
    assert_caught("rw no quarantine", model, WRITER_EXCLUDES);
}

#[test]
fn readers_that_ignore_a_waiting_writer_pass_it() {
    let model = read_write(Rule::IgnoreIntent, true, false, 2);
    assert_caught("rw ignoring intent", model, NO_READER_PAST_INTENT);
}

#[test]
fn the_mutex_of_a_name_excludes_its_readers() {
    let model = read_and_mutex(Rule::PerReader, true);
    assert_safe("one name", model, &[READERS_SHARE, MUTEX_HOLDS]);
}

#[test]
fn a_mutex_with_a_key_of_its_own_runs_beside_readers() {
    let model = read_and_mutex(Rule::SeparateMutex, false);
    assert_caught("separate mutex", model, WRITER_EXCLUDES);
}

/// Two clients of a semaphore of two permits and the mutex of its name, one attempt each,
/// with a minority restart.
fn permits_and_mutex(rule: Rule) -> Kinds {
    Kinds {
        clients: [(Kind::Permit, 3), (Kind::Permit, 3), (Kind::Mutex, 3)],
        ..semaphore(rule, true, true)
    }
}

#[test]
fn the_mutex_of_a_name_excludes_its_permit_holders() {
    let model = permits_and_mutex(Rule::Slots);
    assert_safe("permits and mutex", model, &[MUTEX_HOLDS, PERMIT_HOLDS]);
}

#[test]
fn a_mutex_with_a_key_of_its_own_runs_beside_permit_holders() {
    let model = permits_and_mutex(Rule::SeparateMutex);
    assert_caught("permits beside a separate mutex", model, WRITER_EXCLUDES);
}

#[test]
fn slot_locks_hold_at_most_k() {
    let model = semaphore(Rule::Slots, true, true);
    assert_safe("semaphore slots", model, &[K_HOLD]);
}

/// Clients that use different counts of one semaphore: one with a single permit, two with
/// two; with a minority restart when `restarts`.
fn mixed_counts(rule: Rule, restarts: bool) -> Kinds {
    Kinds {
        counts: [1, 2, 2],
        ..semaphore(rule, true, restarts)
    }
}

#[test]
fn a_count_record_refuses_clients_of_another_count() {
    assert_safe(
        "semaphore mixed counts",
        mixed_counts(Rule::Slots, true),
        &[K_HOLD],
    );
}

#[test]
fn slots_without_a_count_record_exceed_the_smaller_count() {
    let model = mixed_counts(Rule::SlotsNoCount, false);
    assert_caught("semaphore mixed counts, no record", model, AT_MOST_K);
}

#[test]
fn counting_holders_per_node_by_majority_exceeds_k() {
    let model = semaphore(Rule::Count, true, false);
    assert_caught("semaphore count", model, AT_MOST_K);
}

#[test]
fn a_restart_without_quarantine_exceeds_k() {
    let model = semaphore(Rule::Slots, false, true);
    assert_caught("semaphore no quarantine", model, AT_MOST_K);
}
