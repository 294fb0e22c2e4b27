//! Model check of the lock protocol with restarts, using the crate's own decision rules
//! (`quorum_lock::safety`, exposed `#[doc(hidden)] pub` for this test). DESIGN.md section 7
//! states the rules and the argument for each.
//!
//! In short: N nodes (3, and 5 without restarts), two clients with different TTLs, time in
//! ticks of 2 ms so that the drift allowance at drift factor 0 (2 ms) is exactly one tick.
//! Every step is atomic at one tick:
//! - `Begin(c, now, fast)`: client `c` starts an attempt; its acquire script runs on the
//!   nodes in `now` (raise the ensemble record to its TTL, `SET NX` with expiry `ttl - 1`
//!   tick, the node's clock running fast by the whole allowance; return `INFO`, marker,
//!   record and fence counter), except on `fast`, where the fast path's plain `SET NX PX`
//!   runs (same expiry; no record raised, nothing read). `Finish(c, late, dropped, fast)`:
//!   in the same tick or the next one, the requests in `late` arrive (the plain `SET` on
//!   `fast`), the others are lost; the client decides with
//!   `ballot::admit`, `ballot::token`, `safety::lease_validity` and writes the markers
//!   `admit` asks for; the fence commit then reaches the voters except `dropped` (at most a
//!   minority; only where the key is ours), and a majority with positive validity issues
//!   the lock, else it releases everywhere.
//! - `Extend(c, to)`: compare-and-`PEXPIRE` to the other client's TTL (raising the record)
//!   on `to`; a failed extension keeps `safety::after_failed_extension`.
//! - `Release(c)`, `Tick` (keys and validities expire), `Restart(i)`: node `i` loses its
//!   memory and gets a new `run_id`, as long as the nodes lost since last admitted stay a
//!   minority.
//!
//! The decisions are the client's own: `ballot::view`, `ballot::admit` (which applies
//! `safety::admit` and decides the two cases the pure rules leave stuck: an ensemble with
//! records but no marker, and `RecordUnread` with every node answered) and `ballot::token`,
//! exposed `#[doc(hidden)] pub` for this test. An attempt whose TTL is not above one tick
//! plus the drift allowance decides in the tick it began (the builder refuses a TTL not
//! above the node timeout plus drift). Optionally (`lost_marks`), the marker writes of a
//! decision to the `dropped` nodes are lost too (any number of them: they are in flight
//! when the lock is granted); and nodes may start long before the clients
//! (`Start::Aged`). A restart may come at any moment, also between two answers of one
//! attempt.
//!
//! The fast path: each unfenced client keeps, per node, what `node::Facts` keeps (the life
//! it was read in, whether it was seen admitted there and with which completeness, the
//! record known there), updated as `attempt::decide_votes` and `Marks::settle` update it
//! (a marker write's lesson only if it landed), optionally warm at the start (`warm`).
//! Where that cache allows the plain `SET` (admitted, record >= TTL), the checker chooses
//! it or the script per node, so every mix is explored, the client's own policy
//! (`ballot::mix_allowed`) among them. The plan reads the cache only: the node may have
//! restarted since, and the plain `SET` then runs in the new life, whose `run_id` its
//! answer carries (`Seen::Cached` with the planned life; `ballot::admit` refuses it).
//! Fencing locks never take the fast path.
//!
//! Each old rule, put back, must give a counterexample; the rules as written must give
//! none, and the model must reach a lock, one counted through a re-admitted node, one
//! counted through plain `SET` votes alone and one through plain `SET` and script votes
//! together. Two fast path mistakes are caught: a plain `SET`'s answer counted without
//! comparing its life (`Rule::CachedLifeUnchecked`) and the plain `SET` above the record
//! known (`Rule::FastBelowRecord`). A
//! node admitted by its age (`Admission::MarkOnly`) votes from the next attempt: voting at
//! once (`Rule::AgeVotesAtOnce`) loses exclusion when a node restarts between two answers
//! of one attempt, a defect this model found.
//!
//! Nodes are symmetric: the checker keeps one representative per permutation of nodes, so
//! the printed counterexample paths use the representatives' node numbering.

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorum_lock::ballot::{self, Read, Seen, View};
use quorum_lock::safety::{
    self, Admission, CounterRead, Marker, NextToken, NodeFacts, Persistence, Reason, Uptime,
};
use stateright::{Checker, HasDiscoveries, Model, Property};

/// One tick: the drift allowance at drift factor 0 (the 2 ms constant).
const TICK_MS: u64 = 2;
const CLIENTS: usize = 2;
const LIVES: [&str; 4] = ["l0", "l1", "l2", "l3"];
const NO_LIFE: u8 = u8::MAX;

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Node {
    /// This node's restarts so far: its `run_id` is `LIVES[life]`.
    life: u8,
    started: u8,
    /// (owner, expiry tick)
    key: Option<(u8, u8)>,
    /// (value, the marker's life when written)
    counter: Option<(u8, u8)>,
    /// (life, complete)
    marker: Option<(u8, bool)>,
    /// Which of the wiring's cases ([`UNMARKED`], [`BY_AGE`]) wrote the marker.
    via: u8,
    /// The ensemble record, in ticks.
    record: Option<u8>,
}

/// What one acquire request returned (with the `INFO` of the process it ran on): the
/// acquire script's reply, or the plain `SET NX PX` of the fast path (`cached`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Probe {
    set: bool,
    /// The life the request ran in: for the plain `SET`, the `run_id` the client's
    /// connection knows when the answer comes (a restarted node is reconnected first).
    life: u8,
    uptime: u8,
    marker: Option<(u8, bool)>,
    record: Option<u8>,
    counter: Option<(u8, u8)>,
    /// The plain `SET NX PX`: the life the client had seen the node admitted in and the
    /// completeness it cached (`Seen::Cached`); it read no marker, record or counter.
    cached: Option<(u8, bool)>,
}

/// What a client knows of a node in one of its lives (`node::Facts`: `admitted`,
/// `record_ms`), updated as `attempt::decide_votes` and `Marks::settle` update it
/// (`Node::seen`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Known {
    life: u8,
    /// Seen admitted in `life`, with this completeness.
    admitted: Option<bool>,
    /// The ensemble record is known to be at least this (ticks) in `life`.
    record: u8,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Phase {
    Idle,
    Acquiring {
        start: u8,
        probes: Vec<Option<Probe>>,
    },
    Committing {
        start: u8,
        token: u8,
        voters: u8,
        via_restarted: bool,
        /// Which of the wiring's paths admitted a voter ([`UNMARKED`], [`BY_AGE`]).
        paths: u8,
        /// Which requests the counted votes answered ([`FAST_VOTE`], [`SCRIPT_VOTE`]).
        kinds: u8,
    },
    Holding {
        until: u8,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Client {
    phase: Phase,
    attempts: u8,
    extends: u8,
    /// Per node, what this client knows of it (the fast path's cache; kept for unfenced
    /// clients only, the others never take the fast path).
    known: Vec<Option<Known>>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    now: u8,
    nodes: Vec<Node>,
    /// Nodes that lost their memory and were not admitted since (bit mask).
    degraded: u8,
    clients: [Client; CLIENTS],
    restarts: u8,
    max_issued: Option<u8>,
    overlap: bool,
    regress: bool,
    acquired: bool,
    readmitted_acquired: bool,
    /// The wiring's paths ([`UNMARKED`], [`BY_AGE`]) that admitted a voter of a lock.
    paths_acquired: u8,
    /// The kinds of votes ([`FAST_VOTE`], [`SCRIPT_VOTE`]) that one lock counted, over
    /// all locks: bit `kinds` set for each lock's mix.
    kinds_acquired: u8,
    /// A plain `SET` planned for a life ran in a later one (the answer is refused).
    fast_after_restart: bool,
    /// A lock counted a plain `SET` vote of a node that restarted.
    fast_restarted_acquired: bool,
    /// Counter repair (see the repair block below).
    repair: RepairState,
}

/// `ballot::admit`'s case for an ensemble without markers but with records (every node
/// answered): all wait out the records, then all are marked complete.
const UNMARKED: u8 = 1;
/// `ballot::admit`'s case for `RecordUnread` with every node answered: the node waits out
/// its quarantine by the longest record (`by_uptime`), then is marked incomplete.
const BY_AGE: u8 = 2;

/// A counted vote answered the plain `SET NX PX` of the fast path.
const FAST_VOTE: u8 = 1;
/// A counted vote answered the acquire script.
const SCRIPT_VOTE: u8 = 2;
/// A counted plain `SET` vote came from a node that restarted (and was admitted again).
const FAST_RESTARTED_VOTE: u8 = 4;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Action {
    Tick,
    /// `Begin(c, now, fast)`: the requests to the nodes in `now` run; those in `fast` (a
    /// subset of `now` the client's cache allows) are the plain `SET NX PX`.
    Begin(usize, u8, u8),
    /// `Finish(c, late, dropped, fast)`: the requests to `late` run (the plain `SET` on
    /// `fast`), then the decision.
    Finish(usize, u8, u8, u8),
    Extend(usize, u8),
    Release(usize),
    Restart(usize),
    /// Counter repair of node `x`, reading the nodes in the mask (see the repair block).
    RepairRead(usize, u8),
    RepairWrite,
}

/// The rule the model runs: the crate's, or one old rule put back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    Current,
    /// Quarantine lasts this client's own TTL, not the ensemble's longest.
    OwnTtlQuarantine,
    /// Every counter read counts, a restarted node's empty one too.
    TrustEveryCounter,
    /// "Fresh" when a majority answered without a record (not every node).
    FreshFromMajority,
    /// The longest TTL taken from any majority of answers, intact or not.
    RecordFromAnyMajority,
    /// A failed extension leaves the old validity.
    KeepValidityAfterFailedExtension,
    /// No marker anywhere but records: every node marked complete at once, without
    /// waiting out the records.
    UnmarkedAtOnce,
    /// `RecordUnread` with every node answered: marked at once (incomplete), without the
    /// fallback to the node's age.
    RecordUnreadAtOnce,
    /// `RecordUnread` with every node answered: the age fallback waits out this client's
    /// own TTL instead of the longest record.
    RecordUnreadOwnTtl,
    /// A node admitted by its age (quarantine waited out, the unmarked case, the age
    /// fallback: `Admission::MarkOnly`) votes in the attempt that marks it.
    AgeVotesAtOnce,
    /// Counter repair scans fewer than a majority of complete nodes for resources.
    RepairFromAMinority,
    /// A fast path answer (`Seen::Cached`) counts without comparing the life it was
    /// planned for with the `run_id` it came from.
    CachedLifeUnchecked,
    /// The fast path is taken where the node is seen admitted, whatever record is known
    /// there (the plain `SET` raises no record).
    FastBelowRecord,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Start {
    /// Nodes that never served a lock.
    Fresh,
    /// Nodes that never served a lock, started this many ticks before the clients.
    Aged(u8),
    /// Every node admitted (complete), the ensemble record at this many ticks.
    Served(u8),
}

#[derive(Clone, Copy, Debug)]
struct Lock {
    nodes: usize,
    /// Per client, in ticks.
    ttls: [u8; CLIENTS],
    t_max: u8,
    /// Per client.
    attempts: [u8; CLIENTS],
    /// Per client: whether its locks carry a fencing token.
    fenced: [bool; CLIENTS],
    extends: u8,
    restarts: u8,
    /// Counter repairs the clients may start (see the repair block).
    repairs: u8,
    start: Start,
    rule: Rule,
    /// Whether a decision's marker writes may be lost (on the `dropped` nodes, any number
    /// of them): they are in flight when the lock is granted. Off: they always land.
    lost_marks: bool,
    /// With `Start::Served`: the unfenced clients begin with every node known admitted
    /// (complete) in its first life, at the served record (a client that ran before).
    warm: bool,
    /// Whether unfenced clients may take the fast path (the plain `SET NX PX` on any
    /// subset of the nodes their cache allows).
    fast_path: bool,
}

fn ms(ticks: u8) -> Duration {
    Duration::from_millis(u64::from(ticks) * TICK_MS)
}

/// Whole ticks in `d`, rounded down (the safe side for a validity).
fn ticks(d: Duration) -> u8 {
    u8::try_from(d.as_millis() / u128::from(TICK_MS)).unwrap_or(u8::MAX)
}

fn bits(mask: u8) -> impl Iterator<Item = usize> {
    (0..8).filter(move |i| mask & (1 << i) != 0)
}

/// Every subset of `mask`, itself and the empty one included.
fn subsets(mask: u8) -> impl DoubleEndedIterator<Item = u8> {
    (0..=mask).filter(move |s| s & !mask == 0)
}

impl Lock {
    /// Whether client `c`'s TTL is usable with a node timeout of one tick.
    fn waits_a_tick(&self, c: usize) -> bool {
        safety::lease_validity(ms(self.ttls[c]), ms(1), 0.0).is_some()
    }

    fn all(&self) -> u8 {
        u8::try_from((1u16 << self.nodes) - 1).unwrap_or(u8::MAX)
    }

    fn facts(p: &Probe) -> NodeFacts<'static> {
        NodeFacts {
            marker: p.cached.or(p.marker).map(|(life, complete)| Marker {
                life: LIVES[usize::from(life)],
                complete,
            }),
            run_id: Some(LIVES[usize::from(p.life)]),
            uptime: Some(Uptime {
                whole: u64::from(p.uptime),
                unit: ms(1),
            }),
            persistence: Persistence::Volatile,
        }
    }

    /// What the acquire script's reply (or the plain `SET`'s, as `attempt::read_vote` reads
    /// it) and the connect's `INFO` give the ballot.
    fn read(p: &Probe) -> Read {
        let life = |l: u8| LIVES[usize::from(l)];
        let scripted = Read {
            set: p.set,
            run_id: Some(Arc::from(life(p.life))),
            uptime: Some(Uptime {
                whole: u64::from(p.uptime),
                unit: ms(1),
            }),
            persistence: Persistence::Volatile,
            marker: Seen::Read(p.marker.map(|(l, complete)| (life(l).to_owned(), complete))),
            record_ms: p.record.map(|r| u64::from(r) * TICK_MS),
            fence: p.counter.map(|(v, _)| u64::from(v)),
            fence_life: (p.counter)
                .filter(|&(_, l)| l != NO_LIFE)
                .map(|(_, l)| life(l).to_owned()),
        };
        match p.cached {
            // The plain `SET`: the cached marker, no record, no counter.
            Some((l, complete)) => Read {
                marker: Seen::Cached {
                    life: Arc::from(life(l)),
                    complete,
                },
                record_ms: None,
                fence: None,
                fence_life: None,
                ..scripted
            },
            None => scripted,
        }
    }

    /// What the client reads of the ensemble (`ballot::view`), with an old rule's blind
    /// spot put back.
    fn view(&self, c: usize, reads: &[Option<Read>]) -> View {
        let mut view = ballot::view(reads, 0.0);
        let rules = &mut view.rules;
        match self.rule {
            Rule::FreshFromMajority if rules.answered >= safety::majority(self.nodes) => {
                rules.answered = self.nodes;
            }
            Rule::RecordFromAnyMajority => rules.intact = rules.answered,
            Rule::OwnTtlQuarantine if rules.max_ttl.is_some() => {
                rules.max_ttl = Some(ms(self.ttls[c]));
            }
            Rule::UnmarkedAtOnce => view.unmarked_wait = Duration::ZERO,
            _ => {}
        }
        view
    }

    /// `ballot::admit`, with a weaker age fallback put back; and which of the wiring's
    /// paths ([`UNMARKED`], [`BY_AGE`]) decided.
    fn admit(&self, c: usize, p: &Probe, read: &Read, view: &View) -> (Admission, u8) {
        let path = if view.unmarked && view.rules.max_ttl.is_some() {
            UNMARKED
        } else {
            let rules = safety::admit(&Self::facts(p), &view.rules, 0.0);
            let unread = matches!(
                rules,
                Admission::Unknown {
                    reason: Reason::RecordUnread { .. }
                }
            );
            if unread && view.rules.answered == self.nodes {
                BY_AGE
            } else {
                0
            }
        };
        let admission = match (self.rule, &read.marker) {
            (Rule::CachedLifeUnchecked, Seen::Cached { life, .. }) => {
                let mut unchecked = read.clone();
                unchecked.run_id = Some(Arc::clone(life));
                ballot::admit(&unchecked, view, 0.0)
            }
            (Rule::RecordUnreadAtOnce, _) if path == BY_AGE => {
                Admission::MarkOnly { complete: false }
            }
            (Rule::RecordUnreadOwnTtl, _) if path == BY_AGE => {
                let mut own = *view;
                own.rules.max_ttl = Some(ms(self.ttls[c]));
                ballot::admit(read, &own, 0.0)
            }
            _ => ballot::admit(read, view, 0.0),
        };
        match (self.rule, admission) {
            (Rule::AgeVotesAtOnce, Admission::MarkOnly { complete }) => {
                let votes = Admission::Votes {
                    complete,
                    mark: true,
                };
                (votes, path)
            }
            _ => (admission, path),
        }
    }

    /// The decision of client `c`'s attempt; the marker writes to the nodes in `lost` are
    /// lost.
    fn decide(&self, s: &mut State, c: usize, lost: u8) {
        let Phase::Acquiring { start, probes } = s.clients[c].phase.clone() else {
            return;
        };
        let reads: Vec<Option<Read>> = probes.iter().map(|p| p.as_ref().map(Self::read)).collect();
        let view = self.view(c, &reads);
        let (mut voters, mut via_restarted, mut paths, mut kinds) = (0u8, false, 0u8, 0u8);
        let mut admissions = vec![None; self.nodes];
        let mut via_repaired = false;
        for (i, (p, read)) in probes.iter().zip(&reads).enumerate() {
            let (Some(p), Some(read)) = (p, read) else {
                continue;
            };
            let (admission, path) = self.admit(c, p, read, &view);
            admissions[i] = Some(admission);
            let landed = lost & (1 << i) == 0;
            if p.cached.is_none() {
                // `decide_votes`: what a script reply teaches the fast path's cache; a marker
                // write's lesson only once it is acknowledged (`Marks::settle`). The script
                // raised the record to this TTL. A plain `SET`'s reply teaches nothing.
                let record = p.record.unwrap_or(0).max(self.ttls[c]);
                let admitted = match admission {
                    Admission::Votes {
                        mark: true,
                        complete,
                    } => landed.then_some(Some(complete)),
                    Admission::MarkOnly { .. } => landed.then_some(None),
                    Admission::Votes { complete, .. } if p.marker.is_some() => Some(Some(complete)),
                    _ => Some(None),
                };
                if let Some(admitted) = admitted {
                    self.seen(s, c, i, p.life, admitted, record);
                }
            }
            let (complete, mark, votes) = match admission {
                Admission::Votes { complete, mark } => (complete, mark, true),
                Admission::MarkOnly { complete } => (complete, true, false),
                _ => continue,
            };
            if votes {
                let this_life = p.counter.is_some_and(|(_, life)| life == p.life);
                via_repaired |= repaired(p, this_life);
            }
            let node = &mut s.nodes[i];
            if p.set && votes {
                voters |= 1 << i;
                via_restarted |= p.life > 0;
                paths |= path | (node.via * u8::from(node.life == p.life));
                kinds |= match p.cached {
                    Some(_) if p.life > 0 => FAST_VOTE | FAST_RESTARTED_VOTE,
                    Some(_) => FAST_VOTE,
                    None => SCRIPT_VOTE,
                };
            }
            if mark && landed {
                // Names the process the decision was made for: if the node restarted
                // since, the marker names an old life and reads as "restarted".
                node.marker = Some((p.life, complete));
                node.via = path;
                if node.life == p.life {
                    s.degraded &= !(1 << i);
                }
            }
        }
        if s.clients[c].attempts == 0 {
            // Never used again: forgotten, so that it does not split states.
            s.clients[c].known.fill(None);
        }
        let enough = voters.count_ones() as usize >= safety::majority(self.nodes);
        let elapsed = ms(s.now - start);
        let valid = safety::lease_validity(ms(self.ttls[c]), elapsed, 0.0).is_some();
        let token = if self.fenced[c] {
            // The old rule: every counter read counts, as with quarantine off.
            let quarantine = self.rule != Rule::TrustEveryCounter;
            ballot::token(&reads, &admissions, None, quarantine)
        } else {
            NextToken::Mint(0)
        };
        match token {
            NextToken::Mint(t) if enough && valid => {
                s.repair.used |= via_repaired && self.fenced[c];
                s.clients[c].phase = Phase::Committing {
                    start,
                    token: u8::try_from(t).unwrap_or(u8::MAX),
                    voters,
                    via_restarted,
                    paths,
                    kinds,
                };
            }
            _ => release(s, c),
        }
    }

    /// `Node::seen`: client `c` saw node `i` in `life`: its record is at least `record`
    /// and, with `admitted`, its marker named `life` with that completeness. Knowledge of
    /// an older life is dropped (the reconnect learnt the new `run_id`); an answer from a
    /// life older than the one known is ignored.
    fn seen(
        &self,
        s: &mut State,
        c: usize,
        i: usize,
        life: u8,
        admitted: Option<bool>,
        record: u8,
    ) {
        if self.fenced[c] || !self.fast_path {
            return;
        }
        let slot = &mut s.clients[c].known[i];
        let mut known = match *slot {
            Some(k) if k.life > life => return,
            Some(k) if k.life == life => k,
            _ => Known {
                life,
                admitted: None,
                record: 0,
            },
        };
        known.record = known.record.max(record);
        if admitted.is_some() {
            known.admitted = admitted;
        }
        *slot = Some(known);
    }

    /// The nodes where client `c` may send the plain `SET NX PX` (`Node::fast_path` with
    /// quarantine on): seen admitted in the life it knows, with a record covering its TTL.
    /// Never for a fencing lock. Judged from the cache alone: the node may have restarted
    /// since (the answer then names the new life, and `ballot::admit` refuses it).
    fn fast_nodes(&self, s: &State, c: usize) -> u8 {
        if self.fenced[c] || !self.fast_path {
            return 0;
        }
        let ttl = self.ttls[c];
        let known = &s.clients[c].known;
        (0..self.nodes)
            .filter(|&i| {
                known[i].is_some_and(|k| {
                    k.admitted.is_some() && (k.record >= ttl || self.rule == Rule::FastBelowRecord)
                })
            })
            .fold(0, |m, i| m | 1 << i)
    }

    fn commit(&self, s: &mut State, c: usize, to: u8) {
        let Phase::Committing {
            start,
            token,
            voters,
            via_restarted,
            paths,
            kinds,
        } = s.clients[c].phase
        else {
            return;
        };
        let mut acks = if self.fenced[c] { 0u8 } else { voters };
        for i in bits(to & voters).filter(|_| self.fenced[c]) {
            let node = &mut s.nodes[i];
            if node.key.is_some_and(|(o, _)| usize::from(o) == c) {
                let tag = node.marker.map_or(NO_LIFE, |(life, _)| life);
                let value = node.counter.map_or(0, |(v, _)| v).max(token);
                node.counter = Some((value, tag));
                acks |= 1 << i;
            }
        }
        let enough = (acks & voters).count_ones() as usize >= safety::majority(self.nodes);
        let validity = safety::lease_validity(ms(self.ttls[c]), ms(s.now - start), 0.0);
        match validity.map(ticks) {
            Some(v) if enough && v > 0 => {
                s.overlap |= s
                    .clients
                    .iter()
                    .enumerate()
                    .any(|(o, cl)| o != c && matches!(cl.phase, Phase::Holding { .. }));
                if self.fenced[c] {
                    s.regress |= s.max_issued.is_some_and(|m| token <= m);
                    s.max_issued = Some(s.max_issued.map_or(token, |m| m.max(token)));
                }
                s.acquired = true;
                s.readmitted_acquired |= via_restarted;
                s.paths_acquired |= paths;
                s.kinds_acquired |= 1 << (kinds & (FAST_VOTE | SCRIPT_VOTE));
                s.fast_restarted_acquired |= kinds & FAST_RESTARTED_VOTE != 0;
                s.clients[c].phase = Phase::Holding { until: s.now + v };
            }
            _ => release(s, c),
        }
    }

    fn extend(&self, s: &mut State, c: usize, to: u8) {
        let Phase::Holding { until } = s.clients[c].phase else {
            return;
        };
        let ttl = self.ttls[(c + 1) % CLIENTS];
        let mut ok = 0;
        for i in bits(to) {
            let node = &mut s.nodes[i];
            if node.key.is_some_and(|(o, _)| usize::from(o) == c) {
                node.key = Some((c as u8, s.now + ttl - 1));
                node.record = Some(node.record.unwrap_or(0).max(ttl));
                ok += 1;
            }
        }
        let validity = safety::lease_validity(ms(ttl), Duration::ZERO, 0.0);
        let after = match validity {
            Some(v) if ok >= safety::majority(self.nodes) => Some(v),
            _ if self.rule == Rule::KeepValidityAfterFailedExtension => Some(ms(until - s.now)),
            _ => safety::after_failed_extension(ms(until - s.now), ms(ttl), Duration::ZERO, 0.0),
        };
        s.clients[c].phase = match after.map(ticks) {
            Some(v) if v > 0 => Phase::Holding { until: s.now + v },
            // Nothing is sure any more: the holder stops; its keys expire.
            _ => Phase::Idle,
        };
    }
}

fn release(s: &mut State, c: usize) {
    for node in &mut s.nodes {
        if node.key.is_some_and(|(owner, _)| usize::from(owner) == c) {
            node.key = None;
        }
    }
    s.clients[c].phase = Phase::Idle;
}

/// The acquire script on node `i` at `s.now`, atomically.
fn acquire(s: &mut State, c: usize, i: usize, ttl: u8) -> Probe {
    let p = set_nx(s, c, i, ttl, None);
    let node = &mut s.nodes[i];
    node.record = Some(node.record.unwrap_or(0).max(ttl));
    p
}

/// The fast path's plain `SET NX PX` on node `i` at `s.now`, planned for the life and
/// completeness `cached`: the same expiry as the script's `SET`; no record raised, no
/// marker or counter read.
fn plain_set(s: &mut State, c: usize, i: usize, ttl: u8, cached: (u8, bool)) -> Probe {
    let p = set_nx(s, c, i, ttl, Some(cached));
    s.fast_after_restart |= cached.0 != p.life;
    p
}

/// The `SET NX` of node `i` at `s.now` (expiry `ttl - 1` ticks on, the node's clock fast by
/// the whole allowance) and what the answer reads: with `cached` (the plain `SET`) the
/// node's identity only, else also its marker, record and counter before this request.
fn set_nx(s: &mut State, c: usize, i: usize, ttl: u8, cached: Option<(u8, bool)>) -> Probe {
    let now = s.now;
    let node = &mut s.nodes[i];
    let scripted = cached.is_none();
    let p = Probe {
        set: node.key.is_none(),
        life: node.life,
        // Whole ticks, over-reported by one: the "0.3 s old reports 1" worst case.
        uptime: now - node.started + 1,
        marker: node.marker.filter(|_| scripted),
        record: node.record.filter(|_| scripted),
        counter: node.counter.filter(|_| scripted),
        cached,
    };
    if p.set {
        node.key = Some((c as u8, now + ttl - 1));
    }
    p
}

impl Lock {
    /// Client `c`'s request to node `i`: the plain `SET` when `fast`, else the script.
    fn request(&self, s: &mut State, c: usize, i: usize, fast: bool) -> Probe {
        let ttl = self.ttls[c];
        match s.clients[c].known[i] {
            Some(k) if fast => plain_set(s, c, i, ttl, (k.life, k.admitted.unwrap_or(false))),
            _ => acquire(s, c, i, ttl),
        }
    }
}

impl Model for Lock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let nodes = (0..self.nodes)
            .map(|_| {
                let life = 0;
                let served = match self.start {
                    Start::Fresh | Start::Aged(_) => None,
                    Start::Served(record) => Some(record),
                };
                Node {
                    life,
                    started: 0,
                    key: None,
                    counter: None,
                    marker: served.map(|_| (life, true)),
                    via: 0,
                    record: served,
                }
            })
            .collect();
        let known = |c: usize| match self.start {
            Start::Served(record) if self.warm && !self.fenced[c] => Some(Known {
                life: 0,
                admitted: Some(true),
                record,
            }),
            _ => None,
        };
        let client = |c: usize| Client {
            phase: Phase::Idle,
            attempts: self.attempts[c],
            extends: self.extends,
            known: vec![known(c); self.nodes],
        };
        vec![State {
            now: match self.start {
                Start::Aged(age) => age,
                _ => 0,
            },
            nodes,
            degraded: 0,
            clients: [client(0), client(1)],
            restarts: self.restarts,
            max_issued: None,
            overlap: false,
            regress: false,
            acquired: false,
            readmitted_acquired: false,
            paths_acquired: 0,
            kinds_acquired: 0,
            fast_after_restart: false,
            fast_restarted_acquired: false,
            repair: RepairState {
                left: self.repairs,
                ..RepairState::default()
            },
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        // An attempt decides in the tick it began or the next one (node timeout one tick),
        // and only in the same tick when its TTL is not above one tick plus the drift
        // allowance (the builder refuses a TTL not above the node timeout plus drift: the
        // keys would expire before the answers are in).
        let late = s.clients.iter().enumerate().any(|(c, cl)| {
            matches!(cl.phase, Phase::Acquiring { start, .. }
                if start < s.now || !self.waits_a_tick(c))
        });
        if s.now < self.t_max && !late {
            out.push(Action::Tick);
        }
        for (c, cl) in s.clients.iter().enumerate() {
            match &cl.phase {
                Phase::Idle if cl.attempts > 0 => {
                    // Any mix: the plain `SET` on any subset of the nodes it may go to (the
                    // script alone last: the depth-first search explores it first).
                    let fast = self.fast_nodes(s, c);
                    for now in subsets(self.all()) {
                        out.extend(subsets(now & fast).rev().map(|f| Action::Begin(c, now, f)));
                    }
                }
                Phase::Idle => {}
                Phase::Acquiring { probes, .. } => {
                    let pending = (0..self.nodes)
                        .filter(|&i| probes[i].is_none())
                        .fold(0u8, |m, i| m | 1 << i);
                    // Fence commits lost: at most a minority (more only fails the attempt);
                    // with lost marker writes, any number; an unfenced lock sends no commit,
                    // so without lost marker writes `dropped` would change nothing.
                    let f = match (self.lost_marks, self.fenced[c]) {
                        (true, _) => self.nodes,
                        (false, true) => self.nodes - safety::majority(self.nodes),
                        (false, false) => 0,
                    };
                    let fast = self.fast_nodes(s, c);
                    for late in subsets(pending) {
                        for plain in subsets(late & fast).rev() {
                            out.extend(
                                subsets(self.all())
                                    .filter(|d| d.count_ones() as usize <= f)
                                    .map(|dropped| Action::Finish(c, late, dropped, plain)),
                            );
                        }
                    }
                }
                Phase::Committing { .. } => {}
                Phase::Holding { .. } => {
                    out.push(Action::Release(c));
                    if cl.extends > 0 {
                        out.extend(subsets(self.all()).map(|m| Action::Extend(c, m)));
                    }
                }
            }
        }
        let lost = s.degraded.count_ones() as usize;
        if s.restarts > 0 && lost + 1 + safety::majority(self.nodes) <= self.nodes {
            out.extend((0..self.nodes).map(Action::Restart));
        }
        self.repair_actions(s, out);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                let now = s.now;
                for node in &mut s.nodes {
                    if node.key.is_some_and(|(_, exp)| exp <= now) {
                        node.key = None;
                    }
                }
                for cl in &mut s.clients {
                    if matches!(cl.phase, Phase::Holding { until } if until <= now) {
                        cl.phase = Phase::Idle;
                    }
                }
            }
            Action::Begin(c, now, fast) => {
                let mut probes = vec![None; self.nodes];
                for i in bits(now) {
                    probes[i] = Some(self.request(&mut s, c, i, fast & 1 << i != 0));
                }
                s.clients[c].attempts -= 1;
                s.clients[c].phase = Phase::Acquiring {
                    start: s.now,
                    probes,
                };
            }
            Action::Finish(c, late, dropped, fast) => {
                for i in bits(late) {
                    let p = self.request(&mut s, c, i, fast & 1 << i != 0);
                    if let Phase::Acquiring { probes, .. } = &mut s.clients[c].phase {
                        probes[i] = Some(p);
                    }
                }
                self.decide(&mut s, c, if self.lost_marks { dropped } else { 0 });
                self.commit(&mut s, c, !dropped);
            }
            Action::Extend(c, to) => {
                s.clients[c].extends -= 1;
                self.extend(&mut s, c, to);
            }
            Action::Release(c) => release(&mut s, c),
            Action::Restart(i) => {
                s.restarts -= 1;
                s.nodes[i] = Node {
                    life: s.nodes[i].life + 1,
                    started: s.now,
                    key: None,
                    counter: None,
                    marker: None,
                    via: 0,
                    record: None,
                };
                s.degraded |= 1 << i;
            }
            Action::RepairRead(x, reached) => self.repair_read(&mut s, x, reached)?,
            Action::RepairWrite => repair_write(&mut s),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, s: &State| !s.overlap),
            Property::always("fencing tokens increase", |_, s: &State| !s.regress),
            Property::sometimes("a lock is acquired", |_, s: &State| s.acquired),
            Property::sometimes(READMITTED, |_, s: &State| s.readmitted_acquired),
            Property::sometimes(UNMARKED_REACHED, |_, s: &State| {
                s.paths_acquired & UNMARKED != 0
            }),
            Property::sometimes(BY_AGE_REACHED, |_, s: &State| {
                s.paths_acquired & BY_AGE != 0
            }),
            Property::sometimes(
                "a repaired node's counter is used for a token",
                |_, s: &State| s.repair.used,
            ),
            Property::sometimes(FAST_ONLY_REACHED, |_, s: &State| {
                s.kinds_acquired & 1 << FAST_VOTE != 0
            }),
            Property::sometimes(MIXED_REACHED, |_, s: &State| {
                s.kinds_acquired & 1 << (FAST_VOTE | SCRIPT_VOTE) != 0
            }),
            Property::sometimes(FAST_REFUSED, |_, s: &State| s.fast_after_restart),
            Property::sometimes(FAST_RESTARTED, |_, s: &State| s.fast_restarted_acquired),
        ]
    }
}

/// Nodes are interchangeable: the representative orders them (with what each pending
/// attempt read from them) and renumbers every per-node mask to match.
fn representative(s: &State) -> State {
    let probe = |c: usize, i: usize| match &s.clients[c].phase {
        Phase::Acquiring { probes, .. } => probes[i].clone(),
        _ => None,
    };
    let mut order: Vec<usize> = (0..s.nodes.len()).collect();
    order.sort_by_key(|&i| {
        let lost = s.degraded >> i & 1;
        let known = |c: usize| s.clients[c].known[i];
        (
            s.nodes[i].clone(),
            lost,
            probe(0, i),
            probe(1, i),
            known(0),
            known(1),
        )
    });
    let remap = |mask: u8| {
        order
            .iter()
            .enumerate()
            .fold(0u8, |m, (new, &old)| m | ((mask >> old) & 1) << new)
    };
    let mut r = s.clone();
    r.nodes = order.iter().map(|&i| s.nodes[i].clone()).collect();
    r.degraded = remap(s.degraded);
    for cl in &mut r.clients {
        cl.known = order.iter().map(|&i| cl.known[i]).collect();
        match &mut cl.phase {
            Phase::Acquiring { probes, .. } => {
                let sorted = order.iter().map(|&i| probes[i].clone()).collect();
                *probes = sorted;
            }
            Phase::Committing { voters, .. } => *voters = remap(*voters),
            _ => {}
        }
    }
    if let Some(pending) = &mut r.repair.pending {
        pending.node = order.iter().position(|&i| i == pending.node).unwrap_or(0);
    }
    r
}

/// Explores `model`; with `stop_at`, until that property has a discovery (another
/// property's counterexample found first does not stop it).
fn check(model: Lock, stop_at: Option<&'static str>) -> impl Checker<Lock> {
    let began = Instant::now();
    let builder = model.checker().symmetry_fn(representative);
    let builder = match stop_at {
        Some(property) => builder.finish_when(HasDiscoveries::AnyOf([property].into())),
        None => builder,
    };
    let checker = builder.spawn_dfs().join();
    eprintln!(
        "{model:?}: {} states in {:.2?}",
        checker.unique_state_count(),
        began.elapsed()
    );
    checker
}

const READMITTED: &str = "a re-admitted node counts for a lock";
const UNMARKED_REACHED: &str = "a node admitted (or marked) by the unmarked case counts for a lock";
const BY_AGE_REACHED: &str =
    "a node admitted (or marked) by its age (record unread) counts for a lock";
const FAST_ONLY_REACHED: &str = "a lock is counted through plain SET votes only";
const MIXED_REACHED: &str =
    "a lock is counted through plain SET and script votes in the same attempt";
const FAST_REFUSED: &str = "a plain SET planned for one life runs in the next";
const FAST_RESTARTED: &str = "a plain SET vote of a restarted node counts for a lock";

/// The rules as written: no counterexample, a lock is reached, and so is each state in
/// `reached`.
fn assert_safe(model: Lock, reached: &[&'static str]) {
    let checker = check(model, None);
    checker.assert_no_discovery("mutual exclusion");
    checker.assert_no_discovery("fencing tokens increase");
    checker.assert_any_discovery("a lock is acquired");
    for property in reached {
        let path = checker.assert_any_discovery(property);
        eprintln!("{property}: after {} steps", path.into_actions().len());
    }
}

/// An old rule put back: the checker must find a counterexample to `property`.
fn assert_caught(model: Lock, property: &'static str) {
    let checker = check(model, Some(property));
    let path = checker.discovery(property);
    let Some(path) = path else {
        panic!("{:?} must break {property}", model.rule);
    };
    let actions = path.into_actions();
    eprintln!(
        "{:?} breaks {property} in {} steps: {actions:?}",
        model.rule,
        actions.len()
    );
}

/// N = 3; client 0 holds long fenced leases (5 ticks, 10 ms), client 1 short unfenced ones
/// (2 ticks, 4 ms); the ensemble has served short leases only (record 2 ticks). The horizon covers a long
/// lease, a restart, the long quarantine (6 ticks) and a lock after it.
const SERVED: Lock = Lock {
    nodes: 3,
    ttls: [5, 2],
    t_max: 9,
    attempts: [1, 1],
    fenced: [true, false],
    extends: 1,
    restarts: 1,
    repairs: 0,
    start: Start::Served(2),
    rule: Rule::Current,
    lost_marks: false,
    warm: false,
    fast_path: true,
};

/// A second attempt for the short client (no extensions, a shorter horizon): a node
/// re-admitted by one attempt is read without the others by the next.
const READMIT: Lock = Lock {
    t_max: 7,
    attempts: [1, 2],
    fenced: [true, true],
    extends: 0,
    ..SERVED
};

/// Two restarts: after the first node is re-admitted, another one may restart.
const ROLLING: Lock = Lock {
    restarts: 2,
    extends: 0,
    ..SERVED
};

/// Nodes that never served a lock, one restart.
const FRESH: Lock = Lock {
    t_max: 3,
    fenced: [true, true],
    start: Start::Fresh,
    ..SERVED
};

#[test]
fn rules_keep_exclusion_and_fencing_with_a_restart() {
    assert_safe(SERVED, &[READMITTED]);
}

#[test]
fn rules_keep_exclusion_and_fencing_when_a_readmitted_node_is_read_alone() {
    assert_safe(READMIT, &[READMITTED]);
}

#[test]
fn rules_keep_exclusion_and_fencing_through_two_restarts() {
    assert_safe(ROLLING, &[READMITTED]);
}

#[test]
fn rules_keep_exclusion_and_fencing_on_a_fresh_ensemble() {
    assert_safe(FRESH, &[]);
}

#[test]
fn rules_keep_exclusion_and_fencing_with_five_nodes() {
    assert_safe(
        Lock {
            nodes: 5,
            t_max: 2,
            extends: 0,
            restarts: 1,
            start: Start::Fresh,
            ..SERVED
        },
        &[],
    );
}

/// Attempts for a mutant of [`SERVED`]: a node re-admitted by its age is marked by one
/// attempt and votes in the next, so the short client tries twice.
const MARK_THEN_VOTE: [u8; CLIENTS] = [1, 2];

#[test]
fn quarantine_from_this_clients_ttl_loses_exclusion() {
    assert_caught(
        Lock {
            rule: Rule::OwnTtlQuarantine,
            attempts: MARK_THEN_VOTE,
            extends: 0,
            ..SERVED
        },
        "mutual exclusion",
    );
}

#[test]
fn counting_a_restarted_nodes_counter_repeats_tokens() {
    assert_caught(
        Lock {
            rule: Rule::TrustEveryCounter,
            ..READMIT
        },
        "fencing tokens increase",
    );
}

#[test]
fn fresh_from_a_majority_of_answers_loses_exclusion() {
    assert_caught(
        Lock {
            rule: Rule::FreshFromMajority,
            ..FRESH
        },
        "mutual exclusion",
    );
}

#[test]
fn the_longest_ttl_from_any_majority_loses_exclusion() {
    assert_caught(
        Lock {
            rule: Rule::RecordFromAnyMajority,
            attempts: MARK_THEN_VOTE,
            extends: 0,
            ..SERVED
        },
        "mutual exclusion",
    );
}

#[test]
fn keeping_validity_after_a_failed_extension_loses_exclusion() {
    assert_caught(
        Lock {
            rule: Rule::KeepValidityAfterFailedExtension,
            restarts: 0,
            ..SERVED
        },
        "mutual exclusion",
    );
}

/// A new ensemble of nodes that have run for a while (6 ticks, longer than any quarantine
/// here, so a restarted node is the only young one), whose marker writes may be lost (any
/// of them: a lock is granted with its markers in flight). No time passes: what differs
/// between the rules is how a young restarted node is judged. Client 0 (long, fenced) tries
/// once and client 1 (short, unfenced) twice; one restart, at any moment, also between two
/// answers of one attempt. Clients starting together leave records without markers (the
/// wiring's unmarked case); a lock whose markers landed on one node leaves too few intact
/// nodes to read the record (`RecordUnread`: the age fallback). Client 1's second attempt
/// may take the fast path, in any mix, where its first one saw a node admitted (a fresh
/// ensemble's marker write counts only if it landed).
const NEW: Lock = Lock {
    t_max: 6,
    attempts: [1, 2],
    extends: 0,
    start: Start::Aged(6),
    lost_marks: true,
    ..SERVED
};

/// [`NEW`] with the roles swapped: the long, fenced client tries twice.
const CONCURRENT: Lock = Lock {
    attempts: [2, 1],
    ..NEW
};

/// Admissions by age (the quarantine waited out, the unmarked case, the age fallback) mark
/// the node and vote from the next attempt, and are still reached for a lock then.
#[test]
fn rules_keep_exclusion_and_fencing_on_a_new_ensemble_with_lost_markers() {
    assert_safe(
        NEW,
        &[
            UNMARKED_REACHED,
            BY_AGE_REACHED,
            FAST_ONLY_REACHED,
            MIXED_REACHED,
            FAST_REFUSED,
            FAST_RESTARTED,
        ],
    );
}

/// An answer given before its node restarted, judged by its old life, must not vote. N = 3,
/// a new ensemble whose nodes have run longer than any TTL. B's acquire reaches node 0 (B's
/// key set there); its requests to nodes 1 and 2 are slow. Node 0 restarts empty. A finds
/// all three nodes without record or marker (fresh), locks, marks them, releases, and locks
/// again on {0, 1}. B's answers from 1 (held) and 2 (free) arrive: two intact nodes give
/// the record, and node 0, whose answer shows no marker and an old process, has waited out
/// its quarantine (`MemoryLost` by its age). Voting at once (the rule before
/// `Admission::MarkOnly`), B held {0, 2} while A held {0, 1}: see
/// `voting_at_once_when_admitted_by_age_loses_exclusion`. Marked only, node 0's marker
/// names its old life, and B's next attempt finds it restarted.
#[test]
fn rules_keep_exclusion_and_fencing_when_a_node_restarts_between_two_answers() {
    assert_safe(CONCURRENT, &[UNMARKED_REACHED, BY_AGE_REACHED]);
}

/// The old rule: a node admitted by its age votes in the attempt that marks it.
#[test]
fn voting_at_once_when_admitted_by_age_loses_exclusion() {
    assert_caught(
        Lock {
            rule: Rule::AgeVotesAtOnce,
            ..CONCURRENT
        },
        "mutual exclusion",
    );
}

/// The unmarked case without its wait: marked complete at once (the long client tries three
/// times: marked by one attempt, counted by a later one).
#[test]
fn marking_an_unmarked_ensemble_complete_at_once_loses_exclusion() {
    assert_caught(
        Lock {
            rule: Rule::UnmarkedAtOnce,
            attempts: [3, 1],
            ..CONCURRENT
        },
        "mutual exclusion",
    );
}

/// `RecordUnread` marked at once, without the age fallback; the short client tries three
/// times (it marks the node, then counts it). The fast path is off for this script-path
/// rule: on, the search finds an overlap too, among 369,050 states instead of 63,043. The short client is unfenced: a node
/// admitted by its age is incomplete, its counter untrusted, so a fenced client cannot lock
/// through it.
#[test]
fn admitting_at_once_when_the_record_is_unread_loses_exclusion() {
    assert_caught(
        Lock {
            rule: Rule::RecordUnreadAtOnce,
            attempts: [1, 3],
            fast_path: false,
            ..NEW
        },
        "mutual exclusion",
    );
}

/// The age fallback by this client's TTL instead of the longest record. Time must pass for
/// this one: the restarted node waits out the short client's TTL while the long client's
/// lease is valid, and the short client tries three times (horizon 8 finds nothing). The
/// fast path is off for this script-path rule: on, the search finds an overlap too, among
/// 2,257,559 states (60 s) instead of 402,051.
#[test]
fn the_age_fallback_by_this_clients_ttl_loses_exclusion() {
    assert_caught(
        Lock {
            rule: Rule::RecordUnreadOwnTtl,
            t_max: 9,
            attempts: [1, 3],
            fast_path: false,
            ..NEW
        },
        "mutual exclusion",
    );
}

// ---------------------------------------------------------------------------------------
// The fast path: a plain `SET NX PX` to the nodes a client has seen admitted in their
// current life with a record covering its TTL (`Node::fast_path`), the script to the
// others, in any mix (`Begin`/`Finish` choose the subset; the client's own policy,
// `ballot::mix_allowed`, picks one of these). Its answer is `Seen::Cached` with the life
// the client planned for and the `run_id` of the process it ran on.
// ---------------------------------------------------------------------------------------

/// [`SERVED`] with the short, unfenced client warm: every node known admitted (complete)
/// in its first life at the served record (it ran before), so its one attempt may take the
/// fast path on any subset, also while the long client holds and after a node restarted
/// (the plain `SET` then runs in the new life).
const FAST: Lock = Lock {
    warm: true,
    ..SERVED
};

/// [`FAST`] with a second attempt for the short client (no extensions, horizon 7): the
/// second attempt's cache is what the first one learnt (a restarted node's new life, its
/// marker or record; the script raised the record to the TTL). Reached: a node restarts,
/// the long client's attempt marks it by its age, the short client's script reads the
/// marker (votes, cached admitted, incomplete), and its next attempt counts the node's
/// plain `SET`.
const LEARNT: Lock = Lock {
    t_max: 7,
    attempts: [1, 2],
    extends: 0,
    ..FAST
};

#[test]
fn rules_keep_exclusion_and_fencing_with_the_fast_path_in_any_mix() {
    assert_safe(
        FAST,
        &[FAST_ONLY_REACHED, MIXED_REACHED, FAST_REFUSED, READMITTED],
    );
}

#[test]
fn rules_keep_exclusion_and_fencing_with_the_fast_path_from_a_learnt_cache() {
    assert_safe(
        LEARNT,
        &[
            FAST_ONLY_REACHED,
            MIXED_REACHED,
            FAST_REFUSED,
            FAST_RESTARTED,
            READMITTED,
        ],
    );
}

/// Five nodes (horizon 2, no extensions): a mix can leave a majority of scripted answers,
/// intact ones among them, beside plain `SET`s.
#[test]
fn rules_keep_exclusion_and_fencing_with_the_fast_path_in_any_mix_of_five_nodes() {
    assert_safe(
        Lock {
            nodes: 5,
            t_max: 2,
            extends: 0,
            ..FAST
        },
        &[FAST_ONLY_REACHED, MIXED_REACHED, FAST_REFUSED],
    );
}

/// A plain `SET`'s answer counted without comparing the life it was planned for with the
/// node's `run_id`: a node that restarted (and lost the long client's key) votes for the
/// short client at once.
#[test]
fn counting_a_fast_path_answer_from_another_life_loses_exclusion() {
    assert_caught(
        Lock {
            rule: Rule::CachedLifeUnchecked,
            ..FAST
        },
        "mutual exclusion",
    );
}

/// The fast path where the record known is below the TTL: both clients unfenced and warm
/// at the served record (2 ticks); the long client's plain `SET` (5 ticks) raises no
/// record, so after a restart the record read from the intact nodes is too short a
/// quarantine for its lease.
#[test]
fn the_fast_path_above_the_known_record_loses_exclusion() {
    assert_caught(
        Lock {
            rule: Rule::FastBelowRecord,
            fenced: [false, false],
            attempts: MARK_THEN_VOTE,
            extends: 0,
            t_max: 5,
            ..FAST
        },
        "mutual exclusion",
    );
}

// ---------------------------------------------------------------------------------------
// Counter repair of a re-admitted node (issue 14's rolling-restart liveness), kept apart.
//
// A client that admits node `x` with a current, incomplete marker repairs it in the
// background, in two steps so that commits, attempts and restarts interleave with it:
// - `RepairRead(x, reached)`: the nodes in `reached` answer. The sources are the reached
//   nodes other than `x` whose marker is current and complete (`safety::repair_sources`,
//   a majority needed); the resource is "found" when a source holds its counter (the
//   scan); its counters are read on every reached node, trusted as the ballot trusts them,
//   and `safety::repair_value` gives the value (`None`: skip, `x` stays incomplete).
// - `RepairWrite`: only while `x`'s marker still reads `(life, incomplete)` (the
//   compare-and-set of the `COMPLETE` script, which compares the marker alone): raise
//   `x`'s counter to the value, tagged with `life`, then mark it complete.
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
struct RepairState {
    /// Repairs still allowed (a bound of the model).
    left: u8,
    /// Read, not yet written.
    pending: Option<PendingRepair>,
    /// A token was minted from a counter trusted only because a repair completed its node.
    used: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct PendingRepair {
    node: usize,
    /// The life the repair was read for (`x`'s marker and `run_id` then).
    life: u8,
    /// The value to write, when the resource was found.
    value: Option<u8>,
}

/// Whether a probe's counter is trusted only because a repair marked its node complete
/// (a restarted node, complete, the counter not rewritten in its life).
fn repaired(p: &Probe, this_life: bool) -> bool {
    p.life > 0 && p.marker == Some((p.life, true)) && !this_life
}

impl Lock {
    fn repair_actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.repair.pending.is_some() {
            out.push(Action::RepairWrite);
            return;
        }
        if s.repair.left == 0 {
            return;
        }
        for (x, node) in s.nodes.iter().enumerate() {
            if node.marker == Some((node.life, false)) {
                out.extend(
                    subsets(self.all())
                        .filter(|m| m.count_ones() as usize >= safety::majority(self.nodes))
                        .map(|m| Action::RepairRead(x, m)),
                );
            }
        }
    }

    /// `None` when the repair cannot proceed now (too few sources, an undecidable value).
    fn repair_read(&self, s: &mut State, x: usize, reached: u8) -> Option<()> {
        let current = |n: &Node| n.marker.filter(|(life, _)| *life == n.life);
        let complete: Vec<bool> = (s.nodes.iter().enumerate())
            .map(|(i, n)| reached & 1 << i != 0 && current(n).is_some_and(|(_, c)| c))
            .collect();
        let sources = match self.rule {
            Rule::RepairFromAMinority => {
                Some((0..self.nodes).filter(|&i| complete[i] && i != x).collect())
                    .filter(|v: &Vec<usize>| !v.is_empty())
            }
            _ => safety::repair_sources(&complete, x, self.nodes),
        }?;
        let found = sources.iter().any(|&i| s.nodes[i].counter.is_some());
        let reads: Vec<CounterRead> = (bits(reached).map(|i| &s.nodes[i]))
            .map(|n| CounterRead {
                value: n.counter.map(|(v, _)| u64::from(v)),
                trusted: current(n).is_some_and(|(_, complete)| {
                    let this_life = n.counter.is_some_and(|(_, life)| life == n.life);
                    safety::counter_trusted(true, complete, this_life)
                }),
            })
            .collect();
        let value = match found {
            true => Some(u8::try_from(safety::repair_value(&reads, self.nodes)?).ok()?),
            false => None,
        };
        s.repair.left -= 1;
        s.repair.pending = Some(PendingRepair {
            node: x,
            life: s.nodes[x].life,
            value,
        });
        Some(())
    }
}

fn repair_write(s: &mut State) {
    let Some(PendingRepair { node, life, value }) = s.repair.pending.take() else {
        return;
    };
    let node = &mut s.nodes[node];
    if node.marker != Some((life, false)) {
        return;
    }
    if let Some(v) = value.filter(|v| *v > 0) {
        let old = node.counter.map_or(0, |(c, _)| c);
        node.counter = Some((old.max(v), life));
    }
    node.marker = Some((life, true));
}

/// Short fenced leases for both clients (2 ticks, so the quarantine is 3), restarts of a
/// majority one at a time, each re-admitted before the next, repairs on.
const REPAIR: Lock = Lock {
    ttls: [2, 2],
    t_max: 6,
    attempts: [1, 2],
    fenced: [true, true],
    extends: 0,
    restarts: 2,
    repairs: 1,
    ..SERVED
};

#[test]
fn repair_keeps_exclusion_and_fencing_through_a_rolling_restart() {
    assert_safe(REPAIR, &["a repaired node's counter is used for a token"]);
}

#[test]
fn repair_from_a_minority_of_complete_nodes_repeats_tokens() {
    assert_caught(
        Lock {
            rule: Rule::RepairFromAMinority,
            restarts: 1,
            repairs: 1,
            t_max: 5,
            ..REPAIR
        },
        "fencing tokens increase",
    );
}
