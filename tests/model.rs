//! Model check of the lock protocol with restarts, using the crate's own decision rules
//! (`quorum_lock::safety`, exposed `#[doc(hidden)] pub` for this test).
//!
//! Abstraction (1 tick = 1 ms, drift factor 0 so the allowance is the 2 ms constant):
//! - 3 nodes, 2 clients with different TTLs; per attempt each client sends one atomic
//!   acquire script per node (raise the ensemble record to its TTL, `SET NX` with expiry
//!   `ttl - 1` ticks from now — the node's clock runs 1 tick fast, inside the allowance —
//!   and return the node's marker, previous record and fence counter). A request is
//!   delivered in its start tick or the next one (delay), or never (loss).
//! - The decision counts a node's yes only if `safety::admit` says `Votes`, mints the token
//!   with `safety::next_token` and checks validity with `safety::lease_validity`; the
//!   fence commit goes per node (only where the key is ours), then the lock is held until
//!   its validity ends or it is released (compare-and-delete on every node).
//! - A restart empties a node (no persistence) and gives it a new run_id; at most one node
//!   is restarted-and-not-yet-readmitted at a time (minority memory loss).
//!
//! Bounded: the time horizon `t_max`, the number of attempts per client and of restarts.
//! Not modelled: extension (its bound is table-tested in `src/safety.rs`), delivery of an
//! acquire after its attempt was decided, clock jumps.

use std::time::{Duration, Instant};

use quorum_lock::safety::{
    self, Admission, CounterRead, EnsembleView, Marker, NextToken, NodeFacts, Persistence, Uptime,
};
use stateright::{Checker, Model, Property};

const N: usize = 3;
const LIVES: [&str; 8] = ["l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7"];
const NO_LIFE: u8 = u8::MAX;

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct NodeS {
    life: u8,
    started: u8,
    /// (owner, expiry tick)
    key: Option<(u8, u8)>,
    /// (value, life of the marker when written)
    counter: Option<(u8, u8)>,
    /// (life, complete)
    marker: Option<(u8, bool)>,
    record: Option<u8>,
    /// Restarted and not yet re-admitted under its current life.
    degraded: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Probe {
    at: u8,
    set: bool,
    life: u8,
    uptime: u8,
    marker: Option<(u8, bool)>,
    record: Option<u8>,
    counter: Option<(u8, u8)>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Phase {
    Idle,
    Acquiring {
        start: u8,
        probes: [Option<Probe>; N],
    },
    Committing {
        start: u8,
        token: u8,
        voters: u8,
        acks: u8,
    },
    Holding {
        until: u8,
    },
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    now: u8,
    nodes: [NodeS; N],
    clients: Vec<(Phase, u8)>,
    restarts: u8,
    next_life: u8,
    max_issued: u8,
    issued: u8,
    overlap: bool,
    repeated_token: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Action {
    Tick,
    Begin(usize),
    Probe(usize, usize),
    Decide(usize),
    Commit(usize, usize),
    Issue(usize),
    Release(usize),
    Restart(usize),
}

#[derive(Clone, Copy, Debug)]
struct Lock {
    ttls: [u8; 2],
    t_max: u8,
    attempts: u8,
    restarts: u8,
    /// The old rule: quarantine lasts this client's own TTL.
    own_ttl_quarantine: bool,
    /// The old rule: every counter read counts, a restarted node's empty one too.
    trust_every_counter: bool,
}

fn ms(t: u8) -> Duration {
    Duration::from_millis(u64::from(t))
}

impl Lock {
    fn admission(&self, c: usize, p: &Probe, view: &EnsembleView) -> Admission {
        let facts = NodeFacts {
            marker: p.marker.map(|(life, complete)| Marker {
                life: LIVES[usize::from(life)],
                complete,
            }),
            run_id: Some(LIVES[usize::from(p.life)]),
            uptime: Some(Uptime {
                whole: u64::from(p.uptime),
                unit: ms(1),
            }),
            persistence: Persistence::Volatile,
        };
        let mut view = *view;
        if self.own_ttl_quarantine && view.max_ttl.is_some() {
            view.max_ttl = Some(ms(self.ttls[c]));
        }
        safety::admit(&facts, &view, 0.0)
    }

    fn decide(&self, s: &mut State, c: usize, start: u8, probes: &[Option<Probe>; N]) {
        let answered: Vec<(usize, &Probe)> = probes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, p.as_ref()?)))
            .collect();
        let view = EnsembleView {
            nodes: N,
            answered: answered.len(),
            max_ttl: answered.iter().filter_map(|(_, p)| p.record).max().map(ms),
        };
        let mut voters = 0u8;
        let mut reads = Vec::new();
        for &(i, p) in &answered {
            let admission = self.admission(c, p, &view);
            let trusted = match admission {
                Admission::Votes { complete, .. } => safety::counter_trusted(
                    true,
                    complete,
                    p.counter.is_some_and(|(_, life)| life == p.life),
                ),
                _ => false,
            };
            reads.push(CounterRead {
                value: p.counter.map(|(v, _)| u64::from(v)),
                trusted: trusted || self.trust_every_counter,
            });
            if let Admission::Votes { complete, mark } = admission
                && p.set
            {
                voters |= 1 << i;
                if mark {
                    let node = &mut s.nodes[i];
                    node.marker = Some((p.life, complete));
                    if node.life == p.life {
                        node.degraded = false;
                    }
                }
            }
        }
        let elapsed = ms(s.now - start);
        let enough = voters.count_ones() as usize >= safety::majority(N);
        let valid = safety::lease_validity(ms(self.ttls[c]), elapsed, 0.0).is_some();
        match safety::next_token(&reads, N, None) {
            NextToken::Mint(t) if enough && valid => {
                let token = u8::try_from(t).unwrap_or(u8::MAX);
                s.clients[c].0 = Phase::Committing {
                    start,
                    token,
                    voters,
                    acks: 0,
                };
            }
            _ => release(s, c),
        }
    }

    fn issue(&self, s: &mut State, c: usize, start: u8, token: u8) {
        let elapsed = ms(s.now - start);
        let Some(v) = safety::lease_validity(ms(self.ttls[c]), elapsed, 0.0) else {
            return release(s, c);
        };
        let until = s.now + u8::try_from(v.as_millis()).unwrap_or(u8::MAX);
        for (o, (phase, _)) in s.clients.iter().enumerate() {
            if let Phase::Holding { until: other } = phase
                && o != c
                && *other > s.now
            {
                s.overlap = true;
            }
        }
        if s.issued > 0 && token <= s.max_issued {
            s.repeated_token = true;
        }
        s.max_issued = s.max_issued.max(token);
        s.issued += 1;
        s.clients[c].0 = Phase::Holding { until };
    }
}

fn release(s: &mut State, c: usize) {
    for node in &mut s.nodes {
        if node.key.is_some_and(|(owner, _)| usize::from(owner) == c) {
            node.key = None;
        }
    }
    s.clients[c].0 = Phase::Idle;
}

fn probe(s: &mut State, c: usize, i: usize, ttl: u8) -> Probe {
    let now = s.now;
    let node = &mut s.nodes[i];
    let p = Probe {
        at: now,
        set: node.key.is_none(),
        life: node.life,
        uptime: now - node.started,
        marker: node.marker,
        record: node.record,
        counter: node.counter,
    };
    node.record = Some(node.record.unwrap_or(0).max(ttl));
    if p.set {
        node.key = Some((c as u8, now + ttl - 1));
    }
    p
}

impl Model for Lock {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let node = |life| NodeS {
            life,
            started: 0,
            key: None,
            counter: None,
            marker: None,
            record: None,
            degraded: false,
        };
        vec![State {
            now: 0,
            nodes: [node(0), node(1), node(2)],
            clients: vec![(Phase::Idle, self.attempts); self.ttls.len()],
            restarts: self.restarts,
            next_life: N as u8,
            max_issued: 0,
            issued: 0,
            overlap: false,
            repeated_token: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        if s.now < self.t_max {
            out.push(Action::Tick);
        }
        for (c, (phase, left)) in s.clients.iter().enumerate() {
            match phase {
                Phase::Idle if *left > 0 => out.push(Action::Begin(c)),
                Phase::Idle => {}
                Phase::Acquiring { start, probes } => {
                    for (i, p) in probes.iter().enumerate() {
                        if p.is_none() && s.now <= start + 1 {
                            out.push(Action::Probe(c, i));
                        }
                    }
                    out.push(Action::Decide(c));
                }
                Phase::Committing { voters, acks, .. } => {
                    for (i, node) in s.nodes.iter().enumerate() {
                        let ours = node.key.is_some_and(|(o, _)| usize::from(o) == c);
                        if ours && acks & (1 << i) == 0 {
                            out.push(Action::Commit(c, i));
                        }
                    }
                    if (voters & acks).count_ones() as usize >= safety::majority(N) {
                        out.push(Action::Issue(c));
                    }
                }
                Phase::Holding { .. } => out.push(Action::Release(c)),
            }
        }
        if s.restarts > 0 && s.nodes.iter().all(|n| !n.degraded) {
            out.extend((0..N).map(Action::Restart));
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
                for (phase, _) in &mut s.clients {
                    if matches!(phase, Phase::Holding { until } if *until <= now) {
                        *phase = Phase::Idle;
                    }
                }
            }
            Action::Begin(c) => {
                s.clients[c] = (
                    Phase::Acquiring {
                        start: s.now,
                        probes: [None, None, None],
                    },
                    s.clients[c].1 - 1,
                );
            }
            Action::Probe(c, i) => {
                let p = probe(&mut s, c, i, self.ttls[c]);
                if let Phase::Acquiring { probes, .. } = &mut s.clients[c].0 {
                    probes[i] = Some(p);
                }
            }
            Action::Decide(c) => {
                let Phase::Acquiring { start, probes } = s.clients[c].0.clone() else {
                    return None;
                };
                self.decide(&mut s, c, start, &probes);
            }
            Action::Commit(c, i) => {
                let node = &mut s.nodes[i];
                let Phase::Committing { token, acks, .. } = &mut s.clients[c].0 else {
                    return None;
                };
                let tag = node.marker.map_or(NO_LIFE, |(life, _)| life);
                let value = node.counter.map_or(0, |(v, _)| v).max(*token);
                node.counter = Some((value, tag));
                *acks |= 1 << i;
            }
            Action::Issue(c) => {
                let Phase::Committing { start, token, .. } = s.clients[c].0 else {
                    return None;
                };
                self.issue(&mut s, c, start, token);
            }
            Action::Release(c) => release(&mut s, c),
            Action::Restart(i) => {
                s.restarts -= 1;
                s.nodes[i] = NodeS {
                    life: s.next_life,
                    started: s.now,
                    key: None,
                    counter: None,
                    marker: None,
                    record: None,
                    degraded: true,
                };
                s.next_life += 1;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("mutual exclusion", |_, s: &State| !s.overlap),
            Property::always("fencing tokens increase", |_, s: &State| !s.repeated_token),
            Property::sometimes("a lock is held after a restart", |_, s: &State| {
                s.issued >= 2 && s.nodes.iter().any(|n| usize::from(n.life) >= N)
            }),
        ]
    }
}

fn check(model: Lock) -> (impl Checker<Lock>, usize, Duration) {
    let began = Instant::now();
    let checker = model.checker().spawn_bfs().join();
    let count = checker.unique_state_count();
    let took = began.elapsed();
    eprintln!("{model:?}: {count} states in {took:.2?}");
    (checker, count, took)
}

const SAFE: Lock = Lock {
    ttls: [9, 3],
    t_max: 15,
    attempts: 1,
    restarts: 1,
    own_ttl_quarantine: false,
    trust_every_counter: false,
};

/// Runs in the suite: two ticks, no restart (about 140,000 states, a few seconds in debug).
#[test]
fn rules_keep_exclusion_and_fencing_without_restarts_small() {
    let (checker, _, _) = check(Lock {
        t_max: 2,
        restarts: 0,
        ..SAFE
    });
    checker.assert_no_discovery("mutual exclusion");
    checker.assert_no_discovery("fencing tokens increase");
}

// The three checks below need a horizon past the quarantine (about 15 ticks); with the
// present interleaving model that is more than 8 minutes in debug, so they are ignored
// until the model batches each tick's steps (see the report in docs/safety-v2.md).
#[test]
#[ignore = "state space too large in debug: run with --ignored --release"]
fn rules_keep_exclusion_and_fencing_with_a_restart() {
    let (checker, _, _) = check(SAFE);
    checker.assert_no_discovery("mutual exclusion");
    checker.assert_no_discovery("fencing tokens increase");
    checker.assert_any_discovery("a lock is held after a restart");
}

#[test]
#[ignore = "state space too large in debug: run with --ignored --release"]
fn quarantine_from_this_clients_ttl_loses_exclusion() {
    let (checker, _, _) = check(Lock {
        own_ttl_quarantine: true,
        ..SAFE
    });
    let path = checker.discovery("mutual exclusion");
    assert!(path.is_some(), "the old quarantine rule must be caught");
    eprintln!("{:?}", path.map(|p| p.into_actions()));
}

#[test]
#[ignore = "state space too large in debug: run with --ignored --release"]
fn counting_a_restarted_nodes_counter_repeats_tokens() {
    let (checker, _, _) = check(Lock {
        trust_every_counter: true,
        ..SAFE
    });
    let path = checker.discovery("fencing tokens increase");
    assert!(path.is_some(), "the old token rule must be caught");
    eprintln!("{:?}", path.map(|p| p.into_actions()));
}
