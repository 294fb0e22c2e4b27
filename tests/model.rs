//! Model check of the lock protocol with restarts, using the crate's own decision rules
//! (`quorum_lock::ballot` and `quorum_lock::safety`, exposed `#[doc(hidden)] pub` for this
//! test). DESIGN.md section 7 states the rules and the argument for each.
//!
//! In short: N nodes (3, and 5 for short horizons), two clients with their TTLs and TTL
//! ceilings, time in ticks of 250 ms, so that [`safety::MIN_QUARANTINE`] (1 s) is 4 ticks
//! and a quarantine for a record of up to 3 ticks is that minimum. Drift factor 0: the
//! drift allowance is the 2 ms constant, taken on the safe side of every rounding (a
//! node's key lives `ttl - 1` tick, its clock fast by the allowance; validities are
//! rounded down to whole ticks; uptimes are reported in whole ticks, over-reported by
//! one). The node timeout is one tick: an attempt decides in the tick it began or the next
//! (the same one when its TTL would leave less than a tick). Every step is atomic at one
//! tick:
//! - `Begin(c, now, fast)`: client `c` starts an attempt; its acquire script runs on the
//!   nodes in `now` (raise the ensemble record to its TTL, `SET NX`; return `INFO`,
//!   marker, record and fence counter), except on `fast`, where the fast path's plain
//!   `SET NX PX` runs (same expiry; no record raised, nothing read).
//! - `Finish(c, late, dropped, fast, clock)`: the requests in `late` arrive (the plain
//!   `SET` on `fast`), the others are lost; the client decides with `ballot::view`,
//!   `ballot::admit`, `ballot::token` and `safety::lease_validity`, and writes the markers
//!   `admit` asks for (naming the life each answer came from); the fence commit then
//!   reaches the voters except `dropped` (at most a minority; only where the key is ours),
//!   and a majority with positive validity issues the lock, else it releases everywhere.
//!   An attempt that failed while a node that set its key was marked by its age
//!   (`Admission::MarkOnly`) makes its confirmation round at once, as `attempt::attempt`
//!   does: the client's next step is that round's `Begin` (no tick between), and it does
//!   not spend an attempt. A fenced client reads its wall clock with an error of at most
//!   `clock_eps` (`clock` picks `-eps` or `+eps` at each minting, so a client's clock may
//!   step anywhere within the bound between two tokens; [`CLOCK_EPS`] where tokens are the
//!   point, an exact clock elsewhere).
//! - `Extend(c, to)`: compare-and-`PEXPIRE` to the other client's TTL (raising the record)
//!   on `to`; a failed extension keeps `safety::after_failed_extension`.
//! - `Release(c)`; `Tick` (keys and validities expire), also with nothing in flight: time
//!   passes in idle gaps.
//! - Faults: `Restart(i)` (node `i` loses its memory and gets a new `run_id`),
//!   `Failover(i)` (behind node `i`'s address a replica is promoted, whose copy lacks the
//!   latest writes: the lock key and the fencing counter, while the marker and the record
//!   it had replicated stay; a process as old as the node, read as a new life aged from the
//!   promotion, as `safety::process_life` reads it) and
//!   `Flush(i)` (`FLUSHALL`: the memory lost under the same `run_id` and uptime), as long
//!   as the nodes lost since last admitted stay a minority; `Crash(i)` (node `i` never
//!   answers again, while a majority stays up); nodes down from the start. A restart may
//!   come at any moment, also between two answers of one attempt (`in_turn`: one per node,
//!   only between attempts).
//!
//! The fast path: each unfenced client keeps, per node, what `net::server_facts::ServerFacts` keeps (the life
//! it was read in, whether it was seen admitted there, the record known there), updated as
//! `markers::remember` and `Marks::settle` update it (a marker write's lesson only if it
//! landed), optionally warm at the start (`warm`). Where that cache allows the plain `SET`
//! (admitted, record >= TTL), the checker chooses it or the script per node, so every mix
//! is explored, the client's own policy (`ballot::mix_allowed`) among them. The plan reads
//! the cache only: the node may have restarted since, and the plain `SET` then runs in the
//! new life, whose `run_id` its answer carries (`Seen::Cached` with the planned life;
//! `ballot::admit` refuses it). Fencing locks never take the fast path.
//!
//! Safety: *mutual exclusion* (a lock issued while another client holds) and *fencing
//! tokens increase* (each token issued above every token issued before it). Liveness,
//! bounded by the horizon: *a healthy attempt succeeds*: an attempt that begins once no
//! fault has happened for [`Lock::healthy`] ticks (the quarantine period of the TTL
//! ceiling: no history keeps an answering node out longer), while the other client is idle
//! and no key is left on a node that is up, and that loses no request, marker write or
//! fence commit and takes no plain `SET` planned for a life the node has left, succeeds in
//! its first round or its confirmation round. `sometimes` properties guard against
//! vacuity (each check lists the ones it must reach).
//!
//! Each rule of the crate, weakened or replaced by an earlier one, must give a
//! counterexample ([`Rule`]); so must faults outside the assumptions (`FLUSHALL`, a TTL
//! above another client's ceiling, a clock error of half the shortest quarantine). The
//! rules as written must give none.
//!
//! Reductions, each exact for these properties: nodes are symmetric (the checker keeps one
//! representative per permutation; the printed paths replay from the initial state as
//! printed); a fence counter or token below every clock reading still to come reads as
//! absent ([`Lock::forget_old_tokens`]); the tick of the last fault is forgotten once the
//! healthy period has passed; a client's fast path cache is forgotten after its last
//! attempt.

#[path = "common/model_check.rs"]
mod model_check;

use std::sync::Arc;
use std::time::Duration;

use model_check::{Explored, Search, Tick, bits};
use quorum_lock::ballot::{self, Read, Seen};
use quorum_lock::safety::{self, Admission, EnsembleView, NextToken, Persistence, Reason, Uptime};
use stateright::{Model, Property};

/// One tick, 250 ms: [`safety::MIN_QUARANTINE`] is four of them.
const TICK: Tick = Tick::from_millis(250);
/// Units of the clients' wall clock (the clock component of fencing tokens) per tick: one
/// unit is 62.5 ms, so the shortest quarantine is 16 units.
const CLOCK_PER_TICK: u64 = 4;
/// The largest error of a client's wall clock, in clock units (375 ms): twice it is below
/// [`safety::MIN_QUARANTINE`] (16 units), with 4 units to spare for tokens minted by
/// counters (+1 each) within one tick, which real time spreads over at least a microsecond
/// each and the model does not (see [`Lock::clock`]).
const CLOCK_EPS: u8 = 6;
const CLIENTS: usize = 2;
const LIVES: [&str; 5] = ["l0", "l1", "l2", "l3", "l4"];

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Node {
    /// This node's restarts so far: its `run_id` is `LIVES[life]`.
    life: u8,
    started: u8,
    /// (owner, expiry tick)
    key: Option<(u8, u8)>,
    /// The fencing counter.
    counter: Option<u8>,
    /// The life the marker names.
    marker: Option<u8>,
    /// Which admission by age ([`BY_RECORD`], [`BY_CEILING`]) wrote the marker.
    via: u8,
    /// The ensemble record, in ticks.
    record: Option<u8>,
    /// The tick this life began by a promotion (a failover behind the node's address);
    /// `None` for a life that began with its process.
    promoted: Option<u8>,
}

impl Node {
    /// When the life the node answers from began, as a client reads its age: a promoted
    /// life from its promotion (`safety::process_life`), any other from its process's
    /// start; with [`Rule::PromotedByUptime`], always from the process's start.
    fn began(&self, rule: Rule) -> u8 {
        match self.promoted {
            Some(at) if rule != Rule::PromotedByUptime => at,
            _ => self.started,
        }
    }
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
    marker: Option<u8>,
    record: Option<u8>,
    counter: Option<u8>,
    /// The plain `SET NX PX`: the life the client had seen the node admitted in
    /// (`Seen::Cached`); it read no marker, record or counter.
    cached: Option<u8>,
}

/// What a client knows of a node in one of its lives (`net::server_facts::ServerFacts`: `admitted`,
/// `record_ms`), updated as `markers::remember` and `Marks::settle` update it
/// (`Node::seen`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
struct Known {
    life: u8,
    /// Seen admitted in `life`.
    admitted: bool,
    /// The ensemble record is known to be at least this (ticks) in `life`.
    record: u8,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Phase {
    Idle,
    Acquiring {
        start: u8,
        probes: Vec<Option<Probe>>,
        /// The confirmation round of an attempt whose first round marked nodes by age.
        confirming: bool,
    },
    Committing {
        start: u8,
        token: u8,
        voters: u8,
        via_restarted: bool,
        /// Which admissions by age ([`BY_RECORD`], [`BY_CEILING`]) admitted a voter.
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
    /// The last attempt failed with a node marked by its age: the next `Begin` is its
    /// confirmation round.
    confirm: bool,
    /// The attempt in flight (with its confirmation round) is healthy: see
    /// [`Lock::healthy`]. Cleared by anything that makes it contended or faulty.
    watched: bool,
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
    /// Nodes that never answer (down from the start, or crashed).
    down: u8,
    clients: [Client; CLIENTS],
    restarts: u8,
    failovers: u8,
    flushes: u8,
    crashes: u8,
    /// The tick of the last fault (the nodes' start at first).
    calm: u8,
    max_issued: Option<u8>,
    overlap: bool,
    regress: bool,
    /// A healthy attempt failed (see [`Lock::healthy`]).
    refused: bool,
    /// Healthy attempts that succeeded: bit 0 an unfenced one, bit 1 a fenced one.
    healthy_won: u8,
    acquired: bool,
    readmitted_acquired: bool,
    /// A lock was won by a confirmation round.
    confirmed_acquired: bool,
    /// A fenced lock was issued after every node restarted.
    fenced_after_all_restarted: bool,
    /// The admissions by age ([`BY_RECORD`], [`BY_CEILING`]) that admitted a voter of a
    /// lock.
    paths_acquired: u8,
    /// The kinds of votes ([`FAST_VOTE`], [`SCRIPT_VOTE`]) that one lock counted, over
    /// all locks: bit `kinds` set for each lock's mix.
    kinds_acquired: u8,
    /// A plain `SET` planned for a life ran in a later one (the answer is refused).
    fast_after_restart: bool,
    /// A lock counted a plain `SET` vote of a node that restarted.
    fast_restarted_acquired: bool,
}

/// An admission by age whose quarantine was the longest record read (every node answered,
/// or an intact majority did).
const BY_RECORD: u8 = 1;
/// An admission by age whose quarantine was the TTL ceiling (the record unreadable).
const BY_CEILING: u8 = 2;

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
    /// `Finish(c, late, dropped, fast, clock)`: the requests to `late` run (the plain
    /// `SET` on `fast`), then the decision; a fenced client's clock reads `+EPS` when
    /// `clock`, else `-EPS`.
    Finish(usize, u8, u8, u8, bool),
    Extend(usize, u8),
    Release(usize),
    Restart(usize),
    Failover(usize),
    Flush(usize),
    Crash(usize),
}

/// The rule the model runs: the crate's, or a weaker or earlier one put back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rule {
    Current,
    /// Quarantine lasts this client's own TTL, not the ensemble's longest.
    OwnTtlQuarantine,
    /// "Fresh" when a majority answered without a record (not every node).
    FreshFromMajority,
    /// The longest TTL taken from any majority of answers, intact or not.
    RecordFromAnyMajority,
    /// A failed extension leaves the old validity.
    KeepValidityAfterFailedExtension,
    /// A fast path answer (`Seen::Cached`) counts without comparing the life it was
    /// planned for with the `run_id` it came from.
    CachedLifeUnchecked,
    /// The fast path is taken where the node is seen admitted, whatever record is known
    /// there (the plain `SET` raises no record).
    FastBelowRecord,
    /// The earlier rule: where the record cannot be read (not every node answered and no
    /// intact majority did), the node never votes (`FreshNeedsAll`, `RecordUnread`)
    /// instead of waiting out the TTL ceiling.
    NoCeiling,
    /// Where the record cannot be read, the node is marked at once.
    CeilingAtOnce,
    /// Where the record cannot be read, the node waits out this client's own TTL (or the
    /// record, if higher) instead of the ceiling.
    FallbackOwnTtl,
    /// The quarantine period without its floor, `MIN_QUARANTINE`.
    NoMinQuarantine,
    /// The earlier token rule: counters and floor only, no clock component.
    TokensIgnoreClock,
    /// A fresh ensemble's nodes vote at once whatever their age (no
    /// `safety::fresh_once_old`).
    FreshAtAnyAge,
    /// A promoted replica's age is its process's uptime (no `safety::process_life`).
    PromotedByUptime,
}

#[derive(Clone, Copy, Debug)]
enum Start {
    /// Nodes that never served a lock.
    Fresh,
    /// Nodes that never served a lock, started this many ticks before the clients.
    Aged(u8),
    /// Every node admitted, the ensemble record at this many ticks.
    Served(u8),
}

#[derive(Clone, Copy, Debug)]
struct Lock {
    nodes: usize,
    /// Per client, in ticks.
    ttls: [u8; CLIENTS],
    /// Per client, the TTL ceiling it is built with, in ticks.
    ceilings: [u8; CLIENTS],
    t_max: u8,
    /// Per client.
    attempts: [u8; CLIENTS],
    /// Per client: whether its locks carry a fencing token.
    fenced: [bool; CLIENTS],
    /// Per client: whether its requests all reach every node that is up at once (none
    /// late or lost; no fence commit or marker write lost).
    reliable: [bool; CLIENTS],
    extends: u8,
    restarts: u8,
    /// Failovers behind a node's address (see `Action::Failover`), under the same bound as
    /// restarts.
    failovers: u8,
    /// Restarts go through the nodes in turn: each node at most once, only while no
    /// attempt is in flight (in the idle gaps between attempts and leases).
    in_turn: bool,
    flushes: u8,
    /// Flushes only while no lock is in flight or held and no key is left anywhere.
    flush_idle: bool,
    crashes: u8,
    /// Crashes only once every node has a record and none a marker: clients that started
    /// together left their records and no attempt completed, then a node is lost.
    crash_unmarked: bool,
    /// Nodes down from the start (never answering).
    down: usize,
    start: Start,
    rule: Rule,
    /// Whether a decision's marker writes may be lost (on the `dropped` nodes, any number
    /// of them): they are in flight when the lock is granted. Off: they always land.
    lost_marks: bool,
    /// With `Start::Served`: the unfenced clients begin with every node known admitted in
    /// its first life, at the served record (a client that ran before).
    warm: bool,
    /// Whether unfenced clients may take the fast path (the plain `SET NX PX` on any
    /// subset of the nodes their cache allows).
    fast_path: bool,
    /// The largest error of the fenced clients' wall clocks, in clock units.
    clock_eps: u8,
}

/// The `run_id` of a node's life `life` (shared, not allocated per answer).
fn run_id(life: u8) -> Arc<str> {
    thread_local! {
        static RUN_IDS: Vec<Arc<str>> = LIVES.iter().map(|&l| Arc::from(l)).collect();
    }
    RUN_IDS.with(|ids| Arc::clone(&ids[usize::from(life)]))
}

/// Every subset of `mask`, itself and the empty one included.
fn subsets(mask: u8) -> impl DoubleEndedIterator<Item = u8> {
    (0..=mask).filter(move |s| s & !mask == 0)
}

impl Lock {
    /// Whether client `c`'s attempt may wait a tick for answers and still hold for a
    /// whole tick (else it decides in the tick it began).
    fn waits_a_tick(&self, c: usize) -> bool {
        safety::lease_validity(TICK.times(self.ttls[c]), TICK.times(1), 0.0)
            .is_some_and(|v| TICK.ticks_down(v) > 0)
    }

    fn all(&self) -> u8 {
        u8::try_from((1u16 << self.nodes) - 1).unwrap_or(u8::MAX)
    }

    fn up(&self, s: &State) -> u8 {
        self.all() & !s.down
    }

    /// How long after the last fault an attempt is healthy, in ticks: the quarantine
    /// period of the largest TTL ceiling, the longest any answering node may be kept out
    /// (`safety::admit`: no history keeps it out longer than the ceiling plus drift).
    fn healthy(&self) -> u8 {
        let ceiling = self.ceilings.iter().copied().max().unwrap_or(0);
        TICK.ticks_up(safety::quarantine_period(TICK.times(ceiling), 0.0))
    }

    /// Client `c`'s wall clock now, in clock units, for a token: true time (shifted by
    /// `clock_eps` so that it stays positive) with an error of `-clock_eps` or, when
    /// `fast`, `+clock_eps`. Tokens minted by counters (+1) within one tick are at most
    /// this plus their count, which real time would spread over as many microseconds.
    fn clock(&self, now: u8, fast: bool) -> u64 {
        if self.rule == Rule::TokensIgnoreClock {
            return 0;
        }
        let eps = u64::from(self.clock_eps);
        u64::from(now) * CLOCK_PER_TICK + if fast { 2 * eps } else { 0 }
    }

    /// What the acquire script's reply (or the plain `SET`'s, as `attempt::read_vote` reads
    /// it) and the connect's `INFO` give the ballot.
    fn read(p: &Probe) -> Read {
        let life = |l: u8| LIVES[usize::from(l)];
        let scripted = Read {
            set: p.set,
            run_id: Some(run_id(p.life)),
            uptime: Some(Uptime {
                whole: u64::from(p.uptime),
                unit: TICK.times(1),
            }),
            persistence: Persistence::Volatile,
            marker: Seen::Read(p.marker.map(|l| life(l).to_owned())),
            record_ms: p.record.map(|r| u64::from(r) * TICK.as_millis()),
            fence: p.counter.map(u64::from),
        };
        match p.cached {
            // The plain `SET`: the cached marker, no record, no counter.
            Some(l) => Read {
                marker: Seen::Cached(run_id(l)),
                record_ms: None,
                fence: None,
                ..scripted
            },
            None => scripted,
        }
    }

    /// What the client reads of the ensemble (`ballot::view`), with an old rule's blind
    /// spot put back.
    fn view(&self, c: usize, reads: &[Option<Read>]) -> EnsembleView {
        let mut view = ballot::view(reads);
        match self.rule {
            Rule::FreshFromMajority if view.answered >= safety::majority(self.nodes) => {
                view.answered = self.nodes;
            }
            Rule::RecordFromAnyMajority => view.intact = view.answered,
            Rule::OwnTtlQuarantine if view.max_ttl.is_some() => {
                view.max_ttl = Some(TICK.times(self.ttls[c]));
            }
            _ => {}
        }
        view
    }

    /// `ballot::admit` for client `c` (with its ceiling), with a weaker rule put back; and
    /// which admission by age ([`BY_RECORD`], [`BY_CEILING`]) marked the node, if one did.
    fn admit(&self, c: usize, read: &Read, view: &EnsembleView) -> (Admission, u8) {
        let ceiling = TICK.times(self.ceilings[c]);
        let admission = match (self.rule, &read.marker) {
            (Rule::CachedLifeUnchecked, Seen::Cached(life)) => {
                let mut unchecked = read.clone();
                unchecked.run_id = Some(Arc::clone(life));
                ballot::admit(&unchecked, view, 0.0, ceiling)
            }
            _ => ballot::admit(read, view, 0.0, ceiling),
        };
        let by_age = matches!(
            admission,
            Admission::Quarantined { .. } | Admission::MarkOnly
        );
        let needed = safety::majority(view.nodes);
        let readable = view.answered >= view.nodes || view.intact >= needed;
        let age = read.uptime.map(Uptime::min_age).unwrap_or_default();
        let record = view.max_ttl.unwrap_or_default();
        let unread = Reason::RecordUnread {
            intact: view.intact,
            needed,
        };
        let admission = match self.rule {
            Rule::FreshAtAnyAge
                if matches!(
                    admission,
                    Admission::Quarantined {
                        reason: Reason::JustStarted,
                        ..
                    }
                ) =>
            {
                Admission::Votes { mark: true }
            }
            _ if !by_age => admission,
            Rule::NoCeiling if !readable => Admission::Unknown { reason: unread },
            Rule::CeilingAtOnce if !readable => Admission::MarkOnly,
            Rule::FallbackOwnTtl if !readable => {
                safety::wait_out(record.max(TICK.times(self.ttls[c])), age, unread, 0.0)
            }
            Rule::NoMinQuarantine => {
                let longest = safety::longest_lease(view, ceiling);
                let period = longest.saturating_add(safety::drift_allowance(longest, 0.0));
                match period.checked_sub(age).filter(|r| !r.is_zero()) {
                    Some(remaining) => Admission::Quarantined {
                        remaining,
                        period,
                        reason: unread,
                    },
                    None => Admission::MarkOnly,
                }
            }
            _ => admission,
        };
        let path = match (admission, readable) {
            (Admission::MarkOnly, true) => BY_RECORD,
            (Admission::MarkOnly, false) => BY_CEILING,
            _ => 0,
        };
        (admission, path)
    }

    /// The decision of client `c`'s attempt; the marker writes to the nodes in `lost` are
    /// lost; a fenced client's clock reads `fast_clock` (see [`Lock::clock`]). Returns
    /// whether a node that set our key was marked by its age (`Admission::MarkOnly`).
    fn decide(&self, s: &mut State, c: usize, lost: u8, fast_clock: bool) -> bool {
        let Phase::Acquiring { start, probes, .. } = s.clients[c].phase.clone() else {
            return false;
        };
        let reads: Vec<Option<Read>> = probes.iter().map(|p| p.as_ref().map(Self::read)).collect();
        let view = self.view(c, &reads);
        let (mut voters, mut via_restarted, mut paths, mut kinds) = (0u8, false, 0u8, 0u8);
        let mut readmitting = false;
        for (i, (p, read)) in probes.iter().zip(&reads).enumerate() {
            let (Some(p), Some(read)) = (p, read) else {
                continue;
            };
            let (admission, path) = self.admit(c, read, &view);
            let landed = lost & (1 << i) == 0;
            if p.cached.is_none() {
                // `markers::remember`: what a script reply teaches the fast path's cache; a
                // marker write's lesson only once it is acknowledged (`Marks::settle`). The
                // script raised the record to this TTL. A plain `SET`'s reply teaches
                // nothing.
                let record = p.record.unwrap_or(0).max(self.ttls[c]);
                let admitted = match admission {
                    Admission::Votes { mark: true } => landed.then_some(true),
                    Admission::MarkOnly => landed.then_some(false),
                    Admission::Votes { .. } => Some(p.marker.is_some()),
                    _ => Some(false),
                };
                if let Some(admitted) = admitted {
                    self.seen(s, c, i, p.life, admitted, record);
                }
            }
            let (mark, votes) = match admission {
                Admission::Votes { mark } => (mark, true),
                Admission::MarkOnly => (true, false),
                _ => continue,
            };
            readmitting |= p.set && !votes;
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
                node.marker = Some(p.life);
                node.via = path;
                if node.life == p.life {
                    s.degraded &= !(1 << i);
                }
            }
        }
        let enough = voters.count_ones() as usize >= safety::majority(self.nodes);
        let elapsed = TICK.times(s.now - start);
        let valid = safety::lease_validity(TICK.times(self.ttls[c]), elapsed, 0.0).is_some();
        let token = if self.fenced[c] {
            ballot::token(&reads, None, self.clock(s.now, fast_clock))
        } else {
            NextToken::Mint(0)
        };
        match token {
            NextToken::Mint(t) if enough && valid => {
                s.clients[c].phase = Phase::Committing {
                    start,
                    token: u8::try_from(t).expect("tokens fit the model's counters"),
                    voters,
                    via_restarted,
                    paths,
                    kinds,
                };
            }
            _ => release(s, c),
        }
        // A majority whose validity is spent is `ValiditySpent`: no confirmation round.
        readmitting && (!enough || valid)
    }

    /// `Node::seen`: client `c` saw node `i` in `life`: its record is at least `record`
    /// and, when `admitted`, its marker named `life`. Knowledge of an older life is dropped
    /// (the reconnect learnt the new `run_id`); an answer from a life older than the one
    /// known is ignored.
    fn seen(&self, s: &mut State, c: usize, i: usize, life: u8, admitted: bool, record: u8) {
        if self.fenced[c] || !self.fast_path {
            return;
        }
        let slot = &mut s.clients[c].known[i];
        let mut known = match *slot {
            Some(k) if k.life > life => return,
            Some(k) if k.life == life => k,
            _ => Known {
                life,
                admitted: false,
                record: 0,
            },
        };
        known.record = known.record.max(record);
        known.admitted |= admitted;
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
                    k.admitted && (k.record >= ttl || self.rule == Rule::FastBelowRecord)
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
                node.counter = Some(node.counter.map_or(token, |v| v.max(token)));
                acks |= 1 << i;
            }
        }
        let enough = (acks & voters).count_ones() as usize >= safety::majority(self.nodes);
        let validity =
            safety::lease_validity(TICK.times(self.ttls[c]), TICK.times(s.now - start), 0.0);
        match validity.map(|v| TICK.ticks_down(v)) {
            Some(v) if enough && v > 0 => {
                s.overlap |= s
                    .clients
                    .iter()
                    .enumerate()
                    .any(|(o, cl)| o != c && matches!(cl.phase, Phase::Holding { .. }));
                if self.fenced[c] {
                    s.regress |= s.max_issued.is_some_and(|m| token <= m);
                    s.max_issued = Some(s.max_issued.map_or(token, |m| m.max(token)));
                    s.fenced_after_all_restarted |= s.nodes.iter().all(|n| n.life > 0);
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
        for i in bits(to & self.up(s)) {
            let node = &mut s.nodes[i];
            if node.key.is_some_and(|(o, _)| usize::from(o) == c) {
                node.key = Some((c as u8, s.now + ttl - 1));
                node.record = Some(node.record.unwrap_or(0).max(ttl));
                ok += 1;
            }
        }
        let validity = safety::lease_validity(TICK.times(ttl), Duration::ZERO, 0.0);
        let after = match validity {
            Some(v) if ok >= safety::majority(self.nodes) => Some(v),
            _ if self.rule == Rule::KeepValidityAfterFailedExtension => {
                Some(TICK.times(until - s.now))
            }
            _ => safety::after_failed_extension(
                TICK.times(until - s.now),
                TICK.times(ttl),
                Duration::ZERO,
                0.0,
            ),
        };
        s.clients[c].phase = match after.map(|v| TICK.ticks_down(v)) {
            Some(v) if v > 0 => Phase::Holding { until: s.now + v },
            // Nothing is sure any more: the holder stops; its keys expire.
            _ => Phase::Idle,
        };
    }

    /// Client `c`'s request to node `i`: the plain `SET` when `fast`, else the script.
    fn request(&self, s: &mut State, c: usize, i: usize, fast: bool) -> Probe {
        let ttl = self.ttls[c];
        match s.clients[c].known[i] {
            Some(k) if fast => {
                let p = set_nx(s, c, i, ttl, Some(k.life), self.rule);
                if k.life != p.life {
                    // Planned for a life the node has left: the client's reconnect would
                    // have learnt the new one before its next plan.
                    s.fast_after_restart = true;
                    s.clients[c].watched = false;
                }
                p
            }
            _ => {
                let p = set_nx(s, c, i, ttl, None, self.rule);
                let node = &mut s.nodes[i];
                node.record = Some(node.record.unwrap_or(0).max(ttl));
                p
            }
        }
    }

    /// Whether client `c` could begin a healthy attempt now (see [`Lock::healthy`]): the
    /// other client idle and no key on a node that is up; for a first round, no fault for
    /// the healthy period.
    fn uncontended(&self, s: &State, c: usize) -> bool {
        let other = &s.clients[(c + 1) % CLIENTS];
        let free = bits(self.up(s)).all(|i| s.nodes[i].key.is_none());
        free && other.phase == Phase::Idle && !other.confirm
    }

    /// A fault: no attempt in flight is healthy, and the healthy period starts again.
    fn fault(s: &mut State) {
        s.calm = s.now;
        for cl in &mut s.clients {
            cl.watched = false;
        }
    }

    /// The end of client `c`'s round: a confirmation round when the attempt failed with a
    /// node marked by its age (`acquire::attempt::marked_for_readmission`), else the outcome.
    fn settle(&self, s: &mut State, c: usize, readmitting: bool, confirming: bool) {
        let won = matches!(s.clients[c].phase, Phase::Holding { .. });
        let cl = &mut s.clients[c];
        if !won && readmitting && !confirming {
            cl.confirm = true;
            return;
        }
        s.confirmed_acquired |= won && confirming;
        if cl.watched {
            cl.watched = false;
            if won {
                s.healthy_won |= 1 << u8::from(self.fenced[c]);
            } else {
                s.refused = true;
            }
        }
        if cl.attempts == 0 {
            // Never used again: forgotten, so that it does not split states.
            cl.known.fill(None);
        }
    }

    /// Counters and tokens below every clock reading still to come (`now` at `-EPS`) no
    /// longer matter: every later token is at least that reading, so above them, and a
    /// counter `c` below it gives `c + 1` at most that reading. They read as absent, so
    /// that states differing only in the tick of an old minting are one.
    fn forget_old_tokens(&self, s: &mut State) {
        if self.rule == Rule::TokensIgnoreClock {
            return;
        }
        let floor = self.clock(s.now, false);
        let old = |v: &mut Option<u8>| {
            if v.is_some_and(|v| u64::from(v) < floor) {
                *v = None;
            }
        };
        old(&mut s.max_issued);
        for node in &mut s.nodes {
            old(&mut node.counter);
        }
        for cl in &mut s.clients {
            if let Phase::Acquiring { probes, .. } = &mut cl.phase {
                for p in probes.iter_mut().flatten() {
                    old(&mut p.counter);
                }
            }
        }
    }

    /// Whether a `FLUSHALL` may come now (`flush_idle`: nothing in flight or held, no key).
    fn may_flush(&self, s: &State) -> bool {
        let idle = s
            .clients
            .iter()
            .all(|cl| cl.phase == Phase::Idle && !cl.confirm);
        let keys = s.nodes.iter().any(|n| n.key.is_some());
        s.flushes > 0 && (!self.flush_idle || (idle && !keys))
    }
}

fn release(s: &mut State, c: usize) {
    let down = s.down;
    for (i, node) in s.nodes.iter_mut().enumerate() {
        if down & (1 << i) == 0 && node.key.is_some_and(|(owner, _)| usize::from(owner) == c) {
            node.key = None;
        }
    }
    s.clients[c].phase = Phase::Idle;
}

/// The `SET NX` of node `i` at `s.now` (expiry `ttl - 1` ticks on, the node's clock fast by
/// the allowance) and what the answer reads: with `cached` (the plain `SET`, planned for
/// that life) the node's identity only, else also its marker, record and counter before
/// this request.
fn set_nx(s: &mut State, c: usize, i: usize, ttl: u8, cached: Option<u8>, rule: Rule) -> Probe {
    let now = s.now;
    let node = &mut s.nodes[i];
    let scripted = cached.is_none();
    let p = Probe {
        set: node.key.is_none(),
        life: node.life,
        // Whole ticks, over-reported by one: the "0.3 s old reports 1" worst case.
        uptime: now - node.began(rule) + 1,
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

impl Model for Lock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let served = match self.start {
            Start::Fresh | Start::Aged(_) => None,
            Start::Served(record) => Some(record),
        };
        let nodes = (0..self.nodes)
            .map(|_| Node {
                life: 0,
                started: 0,
                key: None,
                counter: None,
                marker: served.map(|_| 0),
                via: 0,
                record: served,
                promoted: None,
            })
            .collect();
        let known = |c: usize| match self.start {
            Start::Served(record) if self.warm && !self.fenced[c] => Some(Known {
                life: 0,
                admitted: true,
                record,
            }),
            _ => None,
        };
        let client = |c: usize| Client {
            phase: Phase::Idle,
            attempts: self.attempts[c],
            extends: self.extends,
            confirm: false,
            watched: false,
            known: vec![known(c); self.nodes],
        };
        vec![State {
            now: match self.start {
                Start::Aged(age) => age,
                _ => 0,
            },
            nodes,
            degraded: 0,
            down: u8::try_from((1u16 << self.down) - 1).unwrap_or(0),
            clients: [client(0), client(1)],
            restarts: self.restarts,
            failovers: self.failovers,
            flushes: self.flushes,
            crashes: self.crashes,
            calm: 0,
            max_issued: None,
            overlap: false,
            regress: false,
            refused: false,
            healthy_won: 0,
            acquired: false,
            readmitted_acquired: false,
            confirmed_acquired: false,
            fenced_after_all_restarted: false,
            paths_acquired: 0,
            kinds_acquired: 0,
            fast_after_restart: false,
            fast_restarted_acquired: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        // An attempt decides in the tick it began or the next one (node timeout one tick),
        // and only in the same tick when its TTL would leave less than a whole tick of
        // validity after waiting one.
        // A confirmation round follows its first round at once.
        let late = s.clients.iter().enumerate().any(|(c, cl)| {
            cl.confirm
                || matches!(cl.phase, Phase::Acquiring { start, .. }
                    if start < s.now || !self.waits_a_tick(c))
        });
        if s.now < self.t_max && !late {
            out.push(Action::Tick);
        }
        let up = self.up(s);
        for (c, cl) in s.clients.iter().enumerate() {
            match &cl.phase {
                Phase::Idle if cl.attempts > 0 || cl.confirm => {
                    // Any mix: the plain `SET` on any subset of the nodes it may go to (the
                    // script alone last: the depth-first search explores it first).
                    let fast = self.fast_nodes(s, c);
                    for now in subsets(up).filter(|&now| now == up || !self.reliable[c]) {
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
                        _ if self.reliable[c] => 0,
                        (true, _) => self.nodes,
                        (false, true) => self.nodes - safety::majority(self.nodes),
                        (false, false) => 0,
                    };
                    let clocks: &[bool] = match self.fenced[c] {
                        true if self.clock_eps > 0 && self.rule != Rule::TokensIgnoreClock => {
                            &[false, true]
                        }
                        _ => &[false],
                    };
                    let fast = self.fast_nodes(s, c);
                    let all_late = |late: &u8| *late == pending & up || !self.reliable[c];
                    for late in subsets(pending & up).filter(all_late) {
                        // Commits and marker writes go to answering nodes only: dropping
                        // another changes nothing.
                        let answered = (self.all() & !pending) | late;
                        for plain in subsets(late & fast).rev() {
                            for dropped in subsets(answered) {
                                if dropped.count_ones() as usize > f {
                                    continue;
                                }
                                out.extend(
                                    clocks
                                        .iter()
                                        .map(|&k| Action::Finish(c, late, dropped, plain, k)),
                                );
                            }
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
        let may_lose = lost + 1 + safety::majority(self.nodes) <= self.nodes;
        let in_flight =
            (s.clients.iter()).any(|cl| cl.confirm || matches!(cl.phase, Phase::Acquiring { .. }));
        if s.restarts > 0 && may_lose && !(self.in_turn && in_flight) {
            let first = |&i: &usize| !self.in_turn || s.nodes[i].life == 0;
            out.extend(bits(up).filter(first).map(Action::Restart));
        }
        if s.failovers > 0 && may_lose && !(self.in_turn && in_flight) {
            out.extend(bits(up).map(Action::Failover));
        }
        if may_lose && self.may_flush(s) {
            out.extend(bits(up).map(Action::Flush));
        }
        let down = s.down.count_ones() as usize;
        let unmarked = (s.nodes.iter()).all(|n| n.record.is_some() && n.marker.is_none());
        let may_crash = down + 1 + safety::majority(self.nodes) <= self.nodes;
        if s.crashes > 0 && may_crash && (unmarked || !self.crash_unmarked) {
            out.extend(bits(up).map(Action::Crash));
        }
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
                let confirming = s.clients[c].confirm;
                let quiet = s.now >= s.calm.saturating_add(self.healthy());
                let healthy = self.uncontended(&s, c);
                let cl = &mut s.clients[c];
                cl.watched = healthy && if confirming { cl.watched } else { quiet };
                if confirming {
                    cl.confirm = false;
                } else {
                    cl.attempts -= 1;
                }
                s.clients[(c + 1) % CLIENTS].watched = false;
                let mut probes = vec![None; self.nodes];
                for i in bits(now) {
                    probes[i] = Some(self.request(&mut s, c, i, fast & 1 << i != 0));
                }
                s.clients[c].phase = Phase::Acquiring {
                    start: s.now,
                    probes,
                    confirming,
                };
            }
            Action::Finish(c, late, dropped, fast, clock) => {
                let Phase::Acquiring {
                    probes, confirming, ..
                } = &s.clients[c].phase
                else {
                    return None;
                };
                let confirming = *confirming;
                let answered = (0..self.nodes)
                    .filter(|&i| probes[i].is_some())
                    .fold(late, |m, i| m | 1 << i);
                if answered & self.up(&s) != self.up(&s) || dropped != 0 {
                    s.clients[c].watched = false;
                }
                for i in bits(late) {
                    let p = self.request(&mut s, c, i, fast & 1 << i != 0);
                    if let Phase::Acquiring { probes, .. } = &mut s.clients[c].phase {
                        probes[i] = Some(p);
                    }
                }
                let lost = if self.lost_marks { dropped } else { 0 };
                let readmitting = self.decide(&mut s, c, lost, clock);
                self.commit(&mut s, c, !dropped);
                self.settle(&mut s, c, readmitting, confirming);
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
                    promoted: None,
                };
                s.degraded |= 1 << i;
                Self::fault(&mut s);
            }
            Action::Failover(i) => {
                s.failovers -= 1;
                let node = &mut s.nodes[i];
                (node.life, node.key, node.counter) = (node.life + 1, None, None);
                node.promoted = Some(s.now);
                s.degraded |= 1 << i;
                Self::fault(&mut s);
            }
            Action::Flush(i) => {
                s.flushes -= 1;
                let node = &mut s.nodes[i];
                (node.key, node.counter, node.marker, node.via, node.record) =
                    (None, None, None, 0, None);
                s.degraded |= 1 << i;
                Self::fault(&mut s);
            }
            Action::Crash(i) => {
                s.crashes -= 1;
                s.down |= 1 << i;
                Self::fault(&mut s);
            }
        }
        if s.now >= s.calm.saturating_add(self.healthy()) {
            // Healthy until the next fault, whenever the last one was: one state.
            s.calm = 0;
        }
        self.forget_old_tokens(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(EXCLUSION, |_, s: &State| !s.overlap),
            Property::always(TOKENS, |_, s: &State| !s.regress),
            Property::always(LIVE, |_, s: &State| !s.refused),
            Property::sometimes(ACQUIRED, |_, s: &State| s.acquired),
            Property::sometimes(READMITTED, |_, s: &State| s.readmitted_acquired),
            Property::sometimes(CONFIRMED, |_, s: &State| s.confirmed_acquired),
            Property::sometimes(BY_RECORD_REACHED, |_, s: &State| {
                s.paths_acquired & BY_RECORD != 0
            }),
            Property::sometimes(BY_CEILING_REACHED, |_, s: &State| {
                s.paths_acquired & BY_CEILING != 0
            }),
            Property::sometimes(HEALTHY_PLAIN, |_, s: &State| s.healthy_won & 1 != 0),
            Property::sometimes(HEALTHY_FENCED, |_, s: &State| s.healthy_won & 2 != 0),
            Property::sometimes(ALL_RESTARTED, |_, s: &State| s.fenced_after_all_restarted),
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
    order.sort_by_cached_key(|&i| {
        let known = |c: usize| s.clients[c].known[i];
        (
            s.nodes[i].clone(),
            s.degraded >> i & 1,
            s.down >> i & 1,
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
    r.down = remap(s.down);
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
    r
}

/// Explores `model` (named `name` in the output) depth first, one representative per
/// permutation of the nodes; with `stop_at`, until that property has a discovery.
fn check(name: &str, model: Lock, stop_at: Option<&'static str>) -> Explored<Lock> {
    let label = format!("{name} ({:?})", model.rule);
    model_check::check(&label, model, Search::Symmetric(representative), stop_at)
}

const EXCLUSION: &str = "mutual exclusion";
const TOKENS: &str = "fencing tokens increase";
const LIVE: &str = "a healthy attempt succeeds";
const ACQUIRED: &str = "a lock is acquired";
const READMITTED: &str = "a re-admitted node counts for a lock";
const CONFIRMED: &str = "a lock is won by a confirmation round";
const BY_RECORD_REACHED: &str =
    "a node marked by its age (the records waited out) counts for a lock";
const BY_CEILING_REACHED: &str =
    "a node marked by its age (the TTL ceiling waited out) counts for a lock";
const HEALTHY_PLAIN: &str = "a healthy unfenced attempt succeeds";
const HEALTHY_FENCED: &str = "a healthy fenced attempt succeeds";
const ALL_RESTARTED: &str = "a fenced lock is issued after every node restarted";
const FAST_ONLY_REACHED: &str = "a lock is counted through plain SET votes only";
const MIXED_REACHED: &str =
    "a lock is counted through plain SET and script votes in the same attempt";
const FAST_REFUSED: &str = "a plain SET planned for one life runs in the next";
const FAST_RESTARTED: &str = "a plain SET vote of a restarted node counts for a lock";

/// The rules as written: no counterexample to any safety or liveness property, a lock is
/// reached, and so is each state in `reached`.
fn assert_safe(name: &str, model: Lock, reached: &[&'static str]) {
    let reached = [&[ACQUIRED], reached].concat();
    check(name, model, None).assert_safe(&[EXCLUSION, TOKENS, LIVE], &reached);
}

/// A weaker rule (or a fault outside the assumptions): the checker must find a
/// counterexample to `property`. The path printed ends at the first step that breaks it.
fn assert_caught(name: &str, model: Lock, property: &'static str) {
    check(name, model, Some(property)).assert_caught(property);
}

#[test]
fn the_model_time_matches_the_rules() {
    // The shortest quarantine is four ticks; a record of up to three ticks waits it.
    let quarantine = |ttl| TICK.ticks_up(safety::quarantine_period(TICK.times(ttl), 0.0));
    assert_eq!(TICK.ticks_up(safety::MIN_QUARANTINE), 4);
    assert_eq!(quarantine(3), 4);
    assert_eq!(quarantine(2), 4);
    assert_eq!(quarantine(5), 6);
    // The clock error is within half the shortest quarantine, with room for three tokens
    // minted by counters in one tick.
    let min_quarantine = u64::from(TICK.ticks_up(safety::MIN_QUARANTINE)) * CLOCK_PER_TICK;
    assert!(2 * u64::from(CLOCK_EPS) + 3 < min_quarantine);
    // A key lives `ttl - 1` ticks: the TTL less the drift allowance, rounded down.
    for ttl in 2..8 {
        let allowance = safety::drift_allowance(TICK.times(ttl), 0.0);
        assert_eq!(TICK.ticks_down(TICK.times(ttl) - allowance), ttl - 1);
    }
}

/// N = 3; client 0 holds long fenced leases (5 ticks, validity 4), client 1 short unfenced
/// ones (2 ticks); the ensemble has served short leases only (record 2 ticks: quarantine
/// 4); ceiling 5 ticks (6 ticks of quarantine, as after a long lease); an exact clock. The
/// horizon covers a long lease, a restart, the long quarantine and a lock after it.
const SERVED: Lock = Lock {
    nodes: 3,
    ttls: [5, 2],
    ceilings: [5, 5],
    t_max: 7,
    attempts: [1, 1],
    fenced: [true, false],
    reliable: [false, false],
    extends: 1,
    restarts: 1,
    failovers: 0,
    in_turn: false,
    flushes: 0,
    flush_idle: false,
    crashes: 0,
    crash_unmarked: false,
    down: 0,
    start: Start::Served(2),
    rule: Rule::Current,
    lost_marks: false,
    warm: false,
    fast_path: true,
    clock_eps: 0,
};

/// Two restarts: after the first node is re-admitted, another one may restart.
const ROLLING: Lock = Lock {
    restarts: 2,
    extends: 0,
    ..SERVED
};

/// Nodes that never served a lock, started [`safety::MIN_QUARANTINE`] (four ticks) before
/// the clients, so a new ensemble's nodes vote at once and only a restarted one is young;
/// one restart.
const FRESH: Lock = Lock {
    t_max: 6,
    fenced: [true, true],
    start: Start::Aged(4),
    ..SERVED
};

/// One restart at any moment, an extension each (also failing, to the other client's
/// TTL); the short client's fast path cache starts cold and learns (its confirmation round
/// may take the plain `SET` where its first round saw a node admitted).
#[test]
fn rules_keep_exclusion_and_fencing_with_a_restart() {
    assert_safe(
        "SERVED",
        SERVED,
        &[
            READMITTED,
            CONFIRMED,
            BY_RECORD_REACHED,
            FAST_ONLY_REACHED,
            MIXED_REACHED,
        ],
    );
}

#[test]
fn rules_keep_exclusion_and_fencing_through_two_restarts() {
    assert_safe("ROLLING", ROLLING, &[READMITTED]);
}

#[test]
fn rules_keep_exclusion_and_fencing_on_a_fresh_ensemble() {
    assert_safe("FRESH", FRESH, &[]);
}

#[test]
fn rules_keep_exclusion_and_fencing_with_five_nodes() {
    assert_safe(
        "FRESH5",
        Lock {
            nodes: 5,
            t_max: 5,
            extends: 0,
            restarts: 1,
            start: Start::Aged(4),
            ..SERVED
        },
        &[],
    );
}

/// [`SERVED`] with a failover behind a node's address at any moment instead of a restart:
/// the promoted replica lacks the lock key and the fencing counter, keeps the marker and
/// the record it had replicated, and runs in a process as old as the node.
const FAILOVER: Lock = Lock {
    restarts: 0,
    failovers: 1,
    ..SERVED
};

/// Read as a new life aged from its promotion, the promoted replica is kept out as after a
/// restart, then readmitted: exclusion, fencing and liveness hold.
#[test]
fn rules_keep_exclusion_and_fencing_through_a_failover() {
    assert_safe("FAILOVER", FAILOVER, &[READMITTED]);
}

/// Aged by its process's uptime, the promoted replica votes while a lease it never
/// received is valid (what `tests/quarantine.rs` shows on real servers).
#[test]
fn a_promoted_replica_aged_by_its_uptime_loses_exclusion() {
    assert_caught(
        "FAILOVER",
        Lock {
            rule: Rule::PromotedByUptime,
            ..FAILOVER
        },
        EXCLUSION,
    );
}

#[test]
fn quarantine_from_this_clients_ttl_loses_exclusion() {
    assert_caught(
        "SERVED",
        Lock {
            rule: Rule::OwnTtlQuarantine,
            ttls: [6, 2],
            ceilings: [6, 6],
            extends: 0,
            ..SERVED
        },
        EXCLUSION,
    );
}

/// A long lease taken on a new ensemble, then one of its nodes restarts and another
/// crashes: the two answering nodes show no record.
#[test]
fn fresh_from_a_majority_of_answers_loses_exclusion() {
    assert_caught(
        "FRESH, a crash",
        Lock {
            rule: Rule::FreshFromMajority,
            ttls: [6, 2],
            ceilings: [6, 6],
            t_max: 10,
            fenced: [false, false],
            reliable: [false, true],
            crashes: 1,
            fast_path: false,
            ..FRESH
        },
        EXCLUSION,
    );
}

#[test]
fn the_longest_ttl_from_any_majority_loses_exclusion() {
    assert_caught(
        "SERVED",
        Lock {
            rule: Rule::RecordFromAnyMajority,
            ttls: [6, 2],
            ceilings: [6, 6],
            extends: 0,
            ..SERVED
        },
        EXCLUSION,
    );
}

#[test]
fn keeping_validity_after_a_failed_extension_loses_exclusion() {
    assert_caught(
        "SERVED",
        Lock {
            rule: Rule::KeepValidityAfterFailedExtension,
            restarts: 0,
            ..SERVED
        },
        EXCLUSION,
    );
}

/// A new ensemble of nodes that have run for a while (6 ticks, as long as any quarantine
/// here, so a restarted node is the only young one), whose marker writes may be lost (any
/// of them: a lock is granted with its markers in flight). No time passes: what differs
/// between the rules is how a young restarted node is judged. Each client tries once (with
/// its confirmation round); one restart, at any moment, also between two answers of one
/// attempt. Clients starting together leave records without markers (every node waits out
/// the records, or the ceiling when not every node answered); a lock whose markers landed
/// on one node leaves too few intact nodes to read the record. The fast path is off.
const NEW: Lock = Lock {
    t_max: 6,
    extends: 0,
    fast_path: false,
    start: Start::Aged(6),
    lost_marks: true,
    ..SERVED
};

/// [`NEW`] with the long, fenced client trying twice and no marker write lost.
const CONCURRENT: Lock = Lock {
    attempts: [2, 1],
    lost_marks: false,
    ..NEW
};

/// Admissions by age (the records or the ceiling waited out) mark the node and vote from
/// the confirmation round, and are reached for a lock then.
#[test]
fn rules_keep_exclusion_and_fencing_on_a_new_ensemble_with_lost_markers() {
    let reached = &[BY_RECORD_REACHED, BY_CEILING_REACHED, CONFIRMED];
    // Either client's requests, marker writes and commits may be lost, not both clients'
    // in one run (that run, 259,375 states, takes a minute on its own).
    let long_reliable = Lock {
        reliable: [true, false],
        ..NEW
    };
    assert_safe("NEW, client 0 reliable", long_reliable, reached);
    let short_reliable = Lock {
        reliable: [false, true],
        ..NEW
    };
    assert_safe("NEW, client 1 reliable", short_reliable, reached);
}

/// An answer given before its node restarted, judged by its old life, must not vote. N = 3,
/// a new ensemble whose nodes have run longer than any TTL. B's acquire reaches node 0 (B's
/// key set there); its requests to nodes 1 and 2 are slow. Node 0 restarts empty. A finds
/// all three nodes without record or marker (fresh), locks, marks them, releases, and locks
/// again on {0, 1}. B's answers from 1 (held) and 2 (free) arrive: two intact nodes give
/// the record, and node 0, whose answer shows no marker and an old process, has waited out
/// its quarantine (`MemoryLost` by its age). Voting at once, B would hold {0, 2} while A
/// holds {0, 1}. Two rules stop it: A cannot find node 0's new life fresh before it has run
/// `MIN_QUARANTINE` (by then B's slow requests have landed), and an admission by age only
/// marks the node (`Admission::MarkOnly`), whose marker names the old life. The checker
/// finds no overlap here with the first rule alone (voting at once when admitted by age,
/// in every configuration of this file); the second is kept as a second guard.
///
/// A fresh view read across a restart, found by the checker in [`CONCURRENT`] against the
/// rule that admitted a fresh ensemble's nodes at any age (10 steps, no time passing).
/// Client 1 (B: 2-tick TTL, unfenced) reaches only node 0 (its other requests lost): one
/// answer, no record or marker; not every node answered and no intact one did, so the node
/// waits out the ceiling, which it is past (6 ticks old): marked (`MarkOnly`). B's
/// confirmation round reaches node 0 at once (key set, marker current: intact); its request
/// to node 1 is slow. Node 0 restarts: B's key there is lost. Client 0 (A) reads all three
/// nodes: node 0's new life and nodes 1 and 2 show no record and no marker: fresh. A votes
/// all three at once (marking node 0's new life; its commit to node 1 lost), locks and
/// releases. B's answer from node 1 arrives (free, and marked by A: intact): B holds
/// {0 (old life), 1}. A locks again on {0 (new life, marked: intact), 2}: two holders.
///
/// The rule (`safety::fresh_once_old`): a fresh ensemble's node votes at once only once it
/// has run for `MIN_QUARANTINE`, else it waits that out. Every round is shorter than half
/// of it (here one tick against four; the client's node timeout is at most
/// `MAX_NODE_TIMEOUT`), so B's slow request had landed, and its record was read, before A
/// read a node that old.
#[test]
fn a_fresh_view_read_across_a_restart_keeps_exclusion() {
    assert_safe("CONCURRENT", CONCURRENT, &[BY_RECORD_REACHED, CONFIRMED]);
}

/// The earlier rule: a fresh ensemble's nodes vote at once, whatever their age.
#[test]
fn admitting_a_fresh_view_at_any_age_loses_exclusion() {
    // Client 0's requests all arrive: the overlap needs none of its losses.
    let reliable = Lock {
        reliable: [true, false],
        rule: Rule::FreshAtAnyAge,
        ..CONCURRENT
    };
    assert_caught("CONCURRENT, client 0 reliable", reliable, EXCLUSION);
}

// ---------------------------------------------------------------------------------------
// The fast path: a plain `SET NX PX` to the nodes a client has seen admitted in their
// current life with a record covering its TTL (`Node::fast_path`), the script to the
// others, in any mix (`Begin`/`Finish` choose the subset; the client's own policy,
// `ballot::mix_allowed`, picks one of these). Its answer is `Seen::Cached` with the life
// the client planned for and the `run_id` of the process it ran on.
// ---------------------------------------------------------------------------------------

/// [`SERVED`] with the short, unfenced client warm: every node known admitted in its first
/// life at the served record (it ran before), so its one attempt may take the fast path on
/// any subset, also while the long client holds and after a node restarted (the plain
/// `SET` then runs in the new life).
const FAST: Lock = Lock {
    extends: 0,
    warm: true,
    ..SERVED
};

/// [`FAST`] with a second attempt for the short client (no extensions, horizon 5): the
/// second attempt's cache is what the first one learnt (a restarted node's new life, its
/// marker or record; the script raised the record to the TTL). The long client's requests
/// all arrive (its losses are explored elsewhere).
const LEARNT: Lock = Lock {
    t_max: 5,
    attempts: [1, 2],
    reliable: [true, false],
    extends: 0,
    ..FAST
};

#[test]
fn rules_keep_exclusion_and_fencing_with_the_fast_path_in_any_mix() {
    assert_safe(
        "FAST",
        FAST,
        &[FAST_ONLY_REACHED, MIXED_REACHED, FAST_REFUSED, READMITTED],
    );
}

#[test]
fn rules_keep_exclusion_and_fencing_with_the_fast_path_from_a_learnt_cache() {
    assert_safe(
        "LEARNT",
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
        "FAST5",
        Lock {
            nodes: 5,
            t_max: 1,
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
        "FAST",
        Lock {
            rule: Rule::CachedLifeUnchecked,
            t_max: 1,
            extends: 0,
            ..FAST
        },
        EXCLUSION,
    );
}

/// The fast path where the record known is below the TTL: both clients unfenced and warm
/// at the served record (2 ticks); the long client's plain `SET` (5 ticks) raises no
/// record, so after a restart the record read from the intact nodes is too short a
/// quarantine for its lease.
#[test]
fn the_fast_path_above_the_known_record_loses_exclusion() {
    assert_caught(
        "FAST",
        Lock {
            rule: Rule::FastBelowRecord,
            ttls: [6, 2],
            ceilings: [6, 6],
            fenced: [false, false],
            extends: 0,
            t_max: 5,
            ..FAST
        },
        EXCLUSION,
    );
}

// ---------------------------------------------------------------------------------------
// Liveness within the TTL ceiling, and the fencing tokens' clock component.
// ---------------------------------------------------------------------------------------

/// A new deployment with a node down from the start (it never answers): client 0 fenced,
/// client 1 unfenced, both with 2-tick TTLs and a 3-tick ceiling (healthy after 4 ticks,
/// the shortest quarantine). Nothing shows the ensemble fresh, so the nodes wait out the
/// ceiling from their start, are marked and vote in the confirmation round.
const NODE_DOWN: Lock = Lock {
    ttls: [2, 2],
    ceilings: [3, 3],
    t_max: 5,
    attempts: [2, 2],
    extends: 0,
    restarts: 0,
    down: 1,
    start: Start::Fresh,
    fast_path: false,
    ..SERVED
};

/// Clients that start together on a new deployment (each may see the other's record and
/// no marker), then, once every node has a record and none a marker, a node crashes
/// (never answers again): with no intact node, the records cannot be read and the nodes
/// wait out the ceiling.
const TOGETHER: Lock = Lock {
    t_max: 4,
    attempts: [2, 1],
    down: 0,
    crashes: 1,
    crash_unmarked: true,
    ..NODE_DOWN
};

#[test]
fn a_new_deployment_with_a_node_down_locks_within_the_ceiling() {
    assert_safe(
        "NODE_DOWN",
        NODE_DOWN,
        &[BY_CEILING_REACHED, CONFIRMED, HEALTHY_PLAIN, HEALTHY_FENCED],
    );
}

#[test]
fn clients_that_start_together_then_lose_a_node_lock_within_the_ceiling() {
    assert_safe(
        "TOGETHER",
        TOGETHER,
        &[BY_CEILING_REACHED, HEALTHY_PLAIN, HEALTHY_FENCED],
    );
}

/// The earlier rule (a record that cannot be read keeps the node out for good) never locks
/// a new deployment with a node down.
#[test]
fn without_the_ceiling_a_new_deployment_with_a_node_down_never_locks() {
    assert_caught(
        "NODE_DOWN",
        Lock {
            rule: Rule::NoCeiling,
            ..NODE_DOWN
        },
        LIVE,
    );
}

/// The earlier rule never locks again after clients started together and a node was lost.
#[test]
fn without_the_ceiling_clients_that_start_together_then_lose_a_node_never_lock() {
    assert_caught(
        "TOGETHER",
        Lock {
            rule: Rule::NoCeiling,
            ..TOGETHER
        },
        LIVE,
    );
}

/// A long lease where the record cannot be read: client 0 (fenced) holds 6-tick leases
/// (the ceiling), client 1 short ones, on a served ensemble (record 2 ticks). Client 0's
/// lock reaches two nodes, one of them restarts, and client 1 reads it with the third
/// (its answer from the other holder lost): one intact node, so the record is unread and
/// the restarted node waits out the ceiling (7 ticks) while client 0 holds for 5.
const UNREAD: Lock = Lock {
    ttls: [6, 2],
    ceilings: [6, 6],
    t_max: 5,
    extends: 0,
    fast_path: false,
    ..SERVED
};

#[test]
fn rules_keep_exclusion_when_the_record_is_unread_under_a_long_lease() {
    assert_safe("UNREAD", UNREAD, &[]);
}

/// Where the record cannot be read, marking at once loses exclusion.
#[test]
fn marking_at_once_when_the_record_is_unread_loses_exclusion() {
    assert_caught(
        "UNREAD",
        Lock {
            rule: Rule::CeilingAtOnce,
            ..UNREAD
        },
        EXCLUSION,
    );
}

/// Where the record cannot be read, waiting out only this client's TTL (the shortest
/// quarantine, 4 ticks) loses exclusion.
#[test]
fn the_fallback_by_this_clients_ttl_loses_exclusion() {
    assert_caught(
        "UNREAD",
        Lock {
            rule: Rule::FallbackOwnTtl,
            ..UNREAD
        },
        EXCLUSION,
    );
}

/// A client built with a larger ceiling than another's, and using a TTL above the smaller
/// one: the other client's fallback waits too short. Every client's TTLs must stay within
/// the smallest ceiling of the deployment.
#[test]
fn a_ttl_above_another_clients_ceiling_loses_exclusion() {
    assert_caught(
        "UNREAD, client 1 built with a 2-tick ceiling",
        Lock {
            ceilings: [6, 2],
            ..UNREAD
        },
        EXCLUSION,
    );
}

/// Every node restarted in turn, with idle gaps: client 0 fenced (its clock within
/// [`CLOCK_EPS`]), client 1 unfenced and reliable (its attempts readmit the restarted
/// nodes), both with 2-tick TTLs and a 2-tick ceiling, so every quarantine is the shortest
/// (4 ticks, 16 clock units). Each node restarts once, between attempts, and each is
/// readmitted (marked by an attempt, confirmed by its second round) before the next
/// restarts; the counters that held the last token may all be gone, and the clock carries
/// the order. Horizon 8: the third restart comes two quarantines after the first.
const TURNS: Lock = Lock {
    ttls: [2, 2],
    ceilings: [2, 2],
    t_max: 8,
    attempts: [2, 1],
    fenced: [true, false],
    extends: 0,
    reliable: [false, true],
    restarts: 3,
    in_turn: true,
    start: Start::Served(2),
    fast_path: false,
    clock_eps: CLOCK_EPS,
    ..SERVED
};

#[test]
#[ignore = "long model check: run with `cargo test --all-features --test model -- --ignored` (CONTRIBUTING.md)"]
fn tokens_increase_when_every_node_restarts_in_turn() {
    assert_safe("TURNS", TURNS, &[ALL_RESTARTED, HEALTHY_FENCED]);
}

/// [`TURNS`] through two of the three nodes (a majority, one at a time), horizon 4 ticks:
/// the later lock comes exactly one shortest quarantine after the first restart.
#[test]
fn tokens_increase_when_a_majority_restarts_in_turn() {
    assert_safe(
        "TURNS2",
        Lock {
            restarts: 2,
            t_max: 4,
            ..TURNS
        },
        &[HEALTHY_FENCED],
    );
}

/// Tokens from the counters alone go back once the nodes that held the last one lost it.
#[test]
fn tokens_without_the_clock_go_back() {
    assert_caught(
        "TURNS",
        Lock {
            rule: Rule::TokensIgnoreClock,
            ..TURNS
        },
        TOKENS,
    );
}

/// Without the floor of the quarantine, a node that lost the last token votes again
/// before the clock has passed it (3 ticks, 12 units: twice the clock error).
#[test]
fn quarantine_below_its_minimum_lets_tokens_go_back() {
    assert_caught(
        "TURNS",
        Lock {
            rule: Rule::NoMinQuarantine,
            ..TURNS
        },
        TOKENS,
    );
}

/// A clock error of half the shortest quarantine (8 units, 500 ms) is too much: the
/// assumption needs twice the error below it.
#[test]
fn a_clock_error_of_half_the_minimum_quarantine_lets_tokens_go_back() {
    assert_caught(
        "TURNS, clock error 8 units",
        Lock {
            clock_eps: 8,
            ..TURNS
        },
        TOKENS,
    );
}

/// `FLUSHALL` while a lease depends on the node: the memory is lost under the same
/// `run_id` and uptime, so nothing tells the node apart from one never admitted, and it
/// is marked at once (outside the assumptions: the client cannot see it).
#[test]
fn flushall_on_a_serving_node_loses_exclusion() {
    assert_caught(
        "SERVED + FLUSHALL",
        Lock {
            flushes: 1,
            restarts: 0,
            extends: 0,
            t_max: 6,
            ..SERVED
        },
        EXCLUSION,
    );
}

/// `FLUSHALL` of a node while nothing is in flight or held: exclusion and liveness hold,
/// but the node is readmitted at once (its uptime is old), so the clock has not passed the
/// last token it lost.
#[test]
fn flushall_on_an_idle_node_lets_tokens_go_back() {
    let idle = Lock {
        flushes: 1,
        flush_idle: true,
        restarts: 0,
        t_max: 4,
        ..TURNS
    };
    assert_caught("TURNS + idle FLUSHALL", idle, TOKENS);
}
