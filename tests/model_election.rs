//! Model check of leader election over the quorum: a term is a fenced lock on the
//! election's name, its epoch the fencing token minted with the win, and an observer reads
//! the leader from the nodes. It checks the rules the election is built to: which ones keep
//! its promises, and which weaker ones do not.
//!
//! In short: three nodes, two candidates, one observer, time in ticks of 250 ms, drift
//! factor 0 (the 2 ms constant), on the safe side as in `tests/model.rs`: a campaign
//! decides within the tick after it began, so a leader leads for its validity rounded down
//! to whole ticks, and a node's key lives its TTL less one tick (its clock fast by the
//! allowance). Every step is atomic:
//! - `Campaign(c, reached)`: candidate `c` makes one attempt: its `SET NX` reaches the nodes
//!   in `reached` (the others lost it, or are down); with a majority granted and validity
//!   left it mints its epoch (one more than the highest fencing counter among the nodes
//!   that granted, under `Epoch::MintedWithWin`; one more than its own last epoch under
//!   `Epoch::Local`) and commits it beside its key on those nodes. A failed campaign leaves
//!   its grants to expire (its clean-up may be lost: the model never relies on it);
//! - `Resign(c, reached)`: the leader's compare-and-delete reaches the nodes in `reached`;
//!   its term ends at once, and the release notification of its epoch is on its way to
//!   the observer;
//! - `Deliver`: the notification reaches the observer (it may never: then nothing changes);
//! - `Observe(reached)`: the observer reads the nodes in `reached` at one instant and
//!   reports a leader (a candidate and epoch that a majority of all nodes hold), no leader
//!   (a majority free), or unknown;
//! - `Tick`: time passes; keys and terms expire.
//!
//! Safety: *one leader at a time* (no instant where two candidates lead), *one term per
//! epoch* and *epochs increase* (each term's epoch is above every earlier one), and *the
//! observer never reports a term it knows ended* (one whose resignation it was told of, or
//! older than an epoch it reported already). The election's rules hold them; an epoch not
//! minted with the win repeats an epoch, an observer that reads one node reports a term
//! older than one it reported, and an observer that ignores release notifications reports a
//! resigned leader whose release reached only a minority. `sometimes` properties guard
//! against vacuity: the second candidate leads after the first, the observer reports a
//! leader and later no leader.

#[path = "common/model_check.rs"]
mod model_check;

use model_check::{Explored, Search, Tick, bits};
use quorum_lock::election_rules::{Judged, NodeTerm, judge_leader};
use quorum_lock::safety;
use stateright::{Model, Property};

const NODES: usize = 3;
const CANDIDATES: usize = 2;
/// The tick: 250 ms.
const TICK: Tick = Tick::from_millis(250);
/// The term's TTL in ticks (1 s).
const TTL: u8 = 4;
/// No epoch above this is minted: it bounds the state space.
const MAX_EPOCH: u8 = 2;

/// How a winning candidate numbers its term.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Epoch {
    /// The fencing token minted with the win: one above every counter the granting nodes
    /// hold, committed beside the key there (the crate's fencing).
    MintedWithWin,
    /// One above the candidate's own last epoch (a weaker rule, to be caught).
    Local,
}

/// What the observer reads before it reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// A majority of the nodes, and it drops a term whose release notification it received.
    Majority,
    /// A majority, ignoring release notifications (to be caught).
    MajorityDeaf,
    /// Any one node, dropping a term whose release notification it received (to be
    /// caught).
    OneNode,
}

/// A term's key on one node: its candidate, its expiry, and the epoch committed beside it
/// (0 while none is: a failed campaign's grant).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    candidate: u8,
    until: u8,
    epoch: u8,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Node {
    key: Option<Key>,
    /// The fencing counter of the election's name: never expires, never goes down.
    fence: u8,
}

/// What the observer last reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
enum Report {
    #[default]
    Unknown,
    NoLeader,
    Leader {
        candidate: u8,
        epoch: u8,
    },
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Observer {
    report: Report,
    /// The highest epoch it reported.
    reported: u8,
    /// The highest epoch whose release notification it received.
    ended: u8,
    /// It reported a leader, then no leader.
    saw_handover: bool,
    /// It reported a term it knew had ended.
    stale: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    nodes: [Node; NODES],
    /// Each candidate's term: its epoch and the end of its validity.
    leading: [Option<(u8, u8)>; CANDIDATES],
    /// Each candidate's last epoch (for `Epoch::Local`).
    last_epoch: [u8; CANDIDATES],
    /// Every epoch minted so far, as a bit mask, and the highest.
    minted: u8,
    highest: u8,
    /// An epoch was minted twice, or below an earlier one.
    repeated: bool,
    decreased: bool,
    /// Which candidates have led.
    led: u8,
    /// A resignation's notification on its way to the observer.
    in_flight: Option<u8>,
    observer: Observer,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Campaign(usize, u8),
    Resign(usize, u8),
    Deliver,
    Observe(u8),
    Tick,
}

struct Election {
    epoch: Epoch,
    read: Read,
    horizon: u8,
}

impl State {
    /// Mints `epoch` for a term of `candidate`, noting a repeat or a decrease.
    fn mint(&mut self, candidate: usize, epoch: u8) {
        let bit = 1u8 << epoch;
        self.repeated |= self.minted & bit != 0;
        self.decreased |= epoch <= self.highest;
        self.minted |= bit;
        self.highest = self.highest.max(epoch);
        self.last_epoch[candidate] = epoch;
        self.led |= 1 << candidate;
    }

    /// What the nodes in `reached` say of the leader now, judged by the crate's rule: a
    /// candidate and epoch held with its epoch committed on a majority of all nodes, or a
    /// majority free (a key without its epoch is a grant, no term).
    fn read(&self, reached: u8) -> Report {
        let reads: Vec<Option<NodeTerm<Key>>> = (0..NODES)
            .map(|i| {
                (reached & (1 << i) != 0).then(|| match self.nodes[i].key {
                    None => NodeTerm::Free,
                    Some(key) if key.epoch > 0 => NodeTerm::Held(Some(key)),
                    Some(_) => NodeTerm::Held(None),
                })
            })
            .collect();
        match judge_leader(&reads, NODES) {
            Judged::Leader(key) => Report::Leader {
                candidate: key.candidate,
                epoch: key.epoch,
            },
            Judged::NoLeader => Report::NoLeader,
            Judged::Unknown => Report::Unknown,
        }
    }

    /// What one node says of the leader (the weaker observer).
    fn read_one(&self, reached: u8) -> Report {
        let Some(i) = bits(reached).next() else {
            return Report::Unknown;
        };
        match self.nodes[i].key {
            None => Report::NoLeader,
            Some(k) if k.epoch > 0 => Report::Leader {
                candidate: k.candidate,
                epoch: k.epoch,
            },
            Some(_) => Report::Unknown,
        }
    }
}

impl Election {
    fn campaign(&self, s: &mut State, c: usize, reached: u8) {
        let (now, until) = (s.now, s.now + TTL - 1);
        let granted: Vec<usize> = bits(reached)
            .filter(|&i| s.nodes[i].key.is_none())
            .collect();
        for &i in &granted {
            s.nodes[i].key = Some(Key {
                candidate: c as u8,
                until,
                epoch: 0,
            });
        }
        let validity = TICK.validity(TTL);
        if granted.len() < safety::majority(NODES) || validity == 0 {
            return;
        }
        let epoch = match self.epoch {
            Epoch::MintedWithWin => {
                1 + granted.iter().map(|&i| s.nodes[i].fence).max().unwrap_or(0)
            }
            Epoch::Local => s.last_epoch[c] + 1,
        };
        for &i in &granted {
            let node = &mut s.nodes[i];
            node.fence = node.fence.max(epoch);
            if let Some(key) = &mut node.key {
                key.epoch = epoch;
            }
        }
        s.mint(c, epoch);
        s.leading[c] = Some((epoch, now + validity));
    }

    fn observe(&self, s: &mut State, reached: u8) {
        let report = match self.read {
            Read::OneNode => s.read_one(reached),
            Read::Majority | Read::MajorityDeaf => s.read(reached),
        };
        let observer = &mut s.observer;
        let report = match report {
            // A term it knows ended is no leader it may report.
            Report::Leader { epoch, .. }
                if self.read != Read::MajorityDeaf && epoch <= observer.ended =>
            {
                Report::Unknown
            }
            other => other,
        };
        if let Report::Leader { epoch, .. } = report {
            observer.stale |= epoch < observer.reported || epoch <= observer.ended;
            observer.reported = observer.reported.max(epoch);
        }
        if report == Report::NoLeader && observer.reported > 0 {
            observer.saw_handover = true;
        }
        observer.report = report;
    }
}

impl Model for Election {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::default()]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let can_mint = s.highest < MAX_EPOCH && s.last_epoch.iter().all(|&e| e < MAX_EPOCH);
        for c in 0..CANDIDATES {
            match s.leading[c] {
                None if can_mint => {
                    actions.extend((1..(1u8 << NODES)).map(|reached| Action::Campaign(c, reached)));
                }
                Some(_) => {
                    actions.extend((0..(1u8 << NODES)).map(|reached| Action::Resign(c, reached)));
                }
                None => {}
            }
        }
        if s.in_flight.is_some() {
            actions.push(Action::Deliver);
        }
        let least = match self.read {
            Read::OneNode => 1,
            Read::Majority | Read::MajorityDeaf => safety::majority(NODES),
        };
        for reached in 1..(1u8 << NODES) {
            if bits(reached).count() == least {
                actions.push(Action::Observe(reached));
            }
        }
        if s.now < self.horizon {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, s: &State, action: Action) -> Option<State> {
        let mut s = s.clone();
        match action {
            Action::Campaign(c, reached) => self.campaign(&mut s, c, reached),
            Action::Resign(c, reached) => {
                let (epoch, _) = s.leading[c].take()?;
                for i in bits(reached) {
                    let node = &mut s.nodes[i];
                    if node.key.is_some_and(|k| usize::from(k.candidate) == c) {
                        node.key = None;
                    }
                }
                s.in_flight = Some(epoch);
            }
            Action::Deliver => {
                let epoch = s.in_flight.take()?;
                s.observer.ended = s.observer.ended.max(epoch);
            }
            Action::Observe(reached) => self.observe(&mut s, reached),
            Action::Tick => {
                s.now += 1;
                let now = s.now;
                for node in &mut s.nodes {
                    if node.key.is_some_and(|k| k.until <= now) {
                        node.key = None;
                    }
                }
                for term in &mut s.leading {
                    if term.is_some_and(|(_, until)| until <= now) {
                        *term = None;
                    }
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("one leader at a time", |_, s: &State| {
                s.leading.iter().flatten().count() <= 1
            }),
            Property::always("one term per epoch", |_, s: &State| !s.repeated),
            Property::always("epochs increase", |_, s: &State| !s.decreased),
            Property::always(
                "the observer never reports a term it knows ended",
                |_, s: &State| !s.observer.stale,
            ),
            Property::sometimes(
                "the second candidate leads after the first",
                |_, s: &State| s.led == 0b11 && s.highest >= 2,
            ),
            Property::sometimes(
                "the observer reports a leader, then no leader",
                |_, s: &State| s.observer.saw_handover,
            ),
        ]
    }
}

const SAFE: [&str; 4] = [
    "one leader at a time",
    "one term per epoch",
    "epochs increase",
    "the observer never reports a term it knows ended",
];
const REACHED: [&str; 2] = [
    "the second candidate leads after the first",
    "the observer reports a leader, then no leader",
];

fn explore(
    label: &str,
    epoch: Epoch,
    read: Read,
    stop_at: Option<&'static str>,
) -> Explored<Election> {
    let model = Election {
        epoch,
        read,
        horizon: 6,
    };
    model_check::check(label, model, Search::BreadthFirst, stop_at)
}

#[test]
fn the_election_keeps_its_promises() {
    let explored = explore("election", Epoch::MintedWithWin, Read::Majority, None);
    explored.assert_safe(&SAFE, &REACHED);
}

#[test]
fn an_epoch_not_minted_with_the_win_repeats() {
    let stop = "one term per epoch";
    explore("local epoch", Epoch::Local, Read::Majority, Some(stop)).assert_caught(stop);
}

/// The steps by which an observer reading by `read` reports a term it knows ended.
fn stale_report(label: &str, read: Read) -> Vec<Action> {
    let stop = "the observer never reports a term it knows ended";
    explore(label, Epoch::MintedWithWin, read, Some(stop)).assert_caught(stop)
}

#[test]
fn an_observer_of_one_node_reports_an_older_term() {
    let steps = stale_report("one-node observer", Read::OneNode);
    let terms = steps.iter().filter(|a| matches!(a, Action::Campaign(..)));
    assert!(
        terms.count() >= 2,
        "an older term after a newer one: {steps:?}"
    );
}

#[test]
fn an_observer_deaf_to_releases_reports_a_resigned_leader() {
    let steps = stale_report("deaf observer", Read::MajorityDeaf);
    assert!(
        steps.iter().any(|a| matches!(a, Action::Resign(..))),
        "the counterexample resigns: {steps:?}"
    );
}
