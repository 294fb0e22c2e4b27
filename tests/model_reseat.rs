//! Model check of a long holder across node restarts (docs/safety.md, "Holders get
//! their copies back"): three nodes without persistence, a holder A that extends at every
//! tick, a contender B, restarts that erase a node, restart quarantine, and an operator's
//! forced release of A's lock. Time is in ticks; a key lives `TTL` ticks, a won
//! acquisition or extension is valid `VALIDITY` ticks (the drift allowance takes one), and
//! a restarted node votes again `QUARANTINE` ticks after its restart (as long as a TTL:
//! every lock it may have held has ended by then, or was renewed elsewhere).
//!
//! Each step is atomic: `Tick` advances time, drops expired keys, then A extends (a
//! majority of renewals wins and sets the new validity; a majority of "not held" answers,
//! or a validity run out, loses the lock for good) and the rule under test writes copies
//! back; `Acquire` is one attempt of B (its keys where none is, its votes on admitted
//! nodes, its keys taken back at once when it wins no majority); `Restart(i)` erases node
//! `i` while every other node is admitted (a minority at a time); `Admit(i)` ends its
//! quarantine; `Force` deletes A's keys everywhere (`quorum-lock release --force`).
//!
//! Properties: *exclusion* (A and B never hold at once, a forced release apart: its
//! holder runs on until its next extension, as docs/cli.md warns); *a forced release stays* (once
//! forced away, A's lock is never renewed again); and, with paced restarts (a node
//! restarts only when every node is admitted and an extension has run since the last
//! admission, what docs/cli.md asks of a rolling restart), *the holder keeps its lock*
//! without a forced release. The crate's rule keeps all three. Weaker rules are caught:
//! never writing a copy back (the rule before re-seat) loses the holder after two
//! restarts, and writing it back within the extension round whatever its renewals (not a
//! vote there, so the lock is not seen lost) renews a lock forced away.

#[path = "common/model_check.rs"]
mod model_check;

use model_check::{Explored, Search};
use stateright::{Model, Property};

const NODES: usize = 3;
const MAJORITY: usize = NODES / 2 + 1;
const TTL: u8 = 4;
const VALIDITY: u8 = TTL - 1;
const QUARANTINE: u8 = TTL;
const HORIZON: u8 = 16;
const RESTARTS: u8 = 2;
const ATTEMPTS: u8 = 3;

const EXCLUSION: &str = "A and B never hold at once";
const FORCE_STAYS: &str = "a lock forced away is never renewed";
const HOLDER_KEPT: &str = "the holder keeps its lock through paced restarts";
const KEPT_THROUGH_RESTARTS: &str = "A holds after two restarts";
const B_AFTER_FORCE: &str = "B holds after A's lock was forced away";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    /// After an extension that a majority renewed, the admitted nodes that answered "not
    /// held" get A's copy back where no key is.
    AfterWon,
    /// Never written back.
    NeverWriteBack,
    /// Written back within the extension round, on every admitted node without a key,
    /// whatever the renewals; such a node's answer is no vote either way.
    InRound,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Owner {
    A,
    B,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Node {
    /// The lock key: whose token, and the tick it expires at.
    key: Option<(Owner, u8)>,
    admitted: bool,
    /// When it last restarted.
    restarted: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct State {
    now: u8,
    nodes: [Node; NODES],
    /// A holds while `now` is before this; `None` once it knows it lost the lock.
    a_until: Option<u8>,
    /// B holds while `now` is before this.
    b_until: Option<u8>,
    forced: bool,
    renewed_after_force: bool,
    /// An extension ran since the last admission.
    extended_since_admit: bool,
    restarts: u8,
    attempts: u8,
}

impl State {
    fn a_holds(&self) -> bool {
        self.a_until.is_some_and(|until| self.now < until)
    }

    fn b_holds(&self) -> bool {
        self.b_until.is_some_and(|until| self.now < until)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Tick,
    Acquire,
    Restart(usize),
    Admit(usize),
    Force,
}

struct Holder {
    rule: Rule,
    paced: bool,
    force: bool,
}

impl Holder {
    /// A's extension at `s.now`, then the rule's copies.
    fn extend(&self, s: &mut State) {
        if !s.a_holds() {
            // Its validity ran out: the guard knows the lock lost and extends no more.
            s.a_until = None;
            return;
        }
        let ours = |n: &Node| matches!(n.key, Some((Owner::A, _)));
        let empty_admitted = |n: &Node| n.key.is_none() && n.admitted;
        // Written back within the round: those nodes answer "re-seated", no vote.
        let mut written_back = 0;
        if self.rule == Rule::InRound {
            for node in s.nodes.iter_mut().filter(|n| empty_admitted(n)) {
                node.key = Some((Owner::A, s.now + TTL));
                written_back += 1;
            }
        }
        let renewed = s.nodes.iter().filter(|n| ours(n)).count() - written_back;
        let not_held = NODES - renewed - written_back;
        if renewed >= MAJORITY {
            for node in s.nodes.iter_mut().filter(|n| ours(n)) {
                node.key = Some((Owner::A, s.now + TTL));
            }
            s.a_until = Some(s.now + VALIDITY);
            s.extended_since_admit = true;
            s.renewed_after_force |= s.forced;
            if self.rule == Rule::AfterWon {
                for node in s.nodes.iter_mut().filter(|n| empty_admitted(n)) {
                    node.key = Some((Owner::A, s.now + TTL));
                }
            }
        } else if not_held >= MAJORITY {
            s.a_until = None;
        }
    }

    /// One attempt of B.
    fn acquire(s: &mut State) {
        s.attempts += 1;
        let mut set = [false; NODES];
        for (i, node) in s.nodes.iter_mut().enumerate() {
            if node.key.is_none() {
                node.key = Some((Owner::B, s.now + TTL));
                set[i] = true;
            }
        }
        let votes = (s.nodes.iter().zip(set))
            .filter(|(n, set)| *set && n.admitted)
            .count();
        if votes >= MAJORITY {
            s.b_until = Some(s.now + VALIDITY);
        } else {
            for (node, set) in s.nodes.iter_mut().zip(set) {
                if set {
                    node.key = None;
                }
            }
        }
    }
}

impl Model for Holder {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let node = Node {
            key: Some((Owner::A, TTL)),
            admitted: true,
            restarted: 0,
        };
        vec![State {
            now: 0,
            nodes: [node; NODES],
            a_until: Some(VALIDITY),
            b_until: None,
            forced: false,
            renewed_after_force: false,
            extended_since_admit: true,
            restarts: 0,
            attempts: 0,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.now < HORIZON {
            out.push(Action::Tick);
        }
        if s.attempts < ATTEMPTS && !s.b_holds() {
            out.push(Action::Acquire);
        }
        if self.force && !s.forced {
            out.push(Action::Force);
        }
        let all_admitted = s.nodes.iter().all(|n| n.admitted);
        for (i, node) in s.nodes.iter().enumerate() {
            let paced = !self.paced || s.extended_since_admit;
            if all_admitted && paced && s.restarts < RESTARTS {
                out.push(Action::Restart(i));
            }
            if !node.admitted && s.now >= node.restarted + QUARANTINE {
                out.push(Action::Admit(i));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                for node in &mut s.nodes {
                    if node.key.is_some_and(|(_, expires)| expires <= s.now) {
                        node.key = None;
                    }
                }
                self.extend(&mut s);
            }
            Action::Acquire => Holder::acquire(&mut s),
            Action::Restart(i) => {
                s.nodes[i] = Node {
                    key: None,
                    admitted: false,
                    restarted: s.now,
                };
                s.restarts += 1;
            }
            Action::Admit(i) => {
                s.nodes[i].admitted = true;
                s.extended_since_admit = false;
            }
            Action::Force => {
                for node in &mut s.nodes {
                    if matches!(node.key, Some((Owner::A, _))) {
                        node.key = None;
                    }
                }
                s.forced = true;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            // A forced release overlaps by design until the holder's next extension.
            Property::always(EXCLUSION, |_, s: &State| {
                s.forced || !(s.a_holds() && s.b_holds())
            }),
            Property::always(FORCE_STAYS, |_, s: &State| !s.renewed_after_force),
            Property::always(HOLDER_KEPT, |m: &Holder, s: &State| {
                !m.paced || s.forced || s.a_holds()
            }),
            Property::sometimes(KEPT_THROUGH_RESTARTS, |_, s: &State| {
                s.restarts == RESTARTS && s.nodes.iter().all(|n| n.admitted) && s.a_holds()
            }),
            Property::sometimes(B_AFTER_FORCE, |_, s: &State| s.forced && s.b_holds()),
        ]
    }
}

/// Explores the model breadth first, to the end or until `stop_at` is broken.
fn check(rule: Rule, paced: bool, force: bool, stop_at: Option<&'static str>) -> Explored<Holder> {
    let label = format!("{rule:?} (paced {paced}, force {force})");
    let model = Holder { rule, paced, force };
    model_check::check(&label, model, Search::BreadthFirst, stop_at)
}

#[test]
fn writing_copies_back_after_a_won_extension_keeps_every_property() {
    let paced = check(Rule::AfterWon, true, false, None);
    paced.assert_safe(&[EXCLUSION, HOLDER_KEPT], &[KEPT_THROUGH_RESTARTS]);
    let free = check(Rule::AfterWon, false, true, None);
    free.assert_safe(&[EXCLUSION, FORCE_STAYS], &[B_AFTER_FORCE]);
}

#[test]
fn never_writing_copies_back_loses_the_holder_after_two_restarts() {
    let paced = check(Rule::NeverWriteBack, true, false, Some(HOLDER_KEPT));
    let actions = paced.assert_caught(HOLDER_KEPT);
    let restarts = actions
        .iter()
        .filter(|a| matches!(a, Action::Restart(_)))
        .count();
    assert_eq!(restarts, 2, "{actions:?}");
    let free = check(Rule::NeverWriteBack, false, true, None);
    free.assert_safe(&[EXCLUSION], &[]);
}

#[test]
fn writing_copies_back_within_the_round_renews_a_forced_release() {
    check(Rule::InRound, false, true, None).assert_caught(FORCE_STAYS);
}
