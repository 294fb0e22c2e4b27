//! The ballot of one acquisition attempt under restart quarantine (safety v2): which
//! node's "yes" counts, when the attempt knows enough to stop waiting for answers, and which
//! fencing token it may mint.
//!
//! Pure: no clock, no Redis, no `async`. The client feeds it the facts each node's connect
//! learnt (`run_id`, uptime, persistence) and what each acquire reply said (the marker, the
//! ensemble record, the fencing counters); the rules themselves are [`crate::safety`]'s.
//! [`view`], [`admit`] and [`token`] are public (`#[doc(hidden)]`, not the crate's API) so
//! that the model checker in `tests/model.rs` decides with them, as the client does.

use std::sync::Arc;
use std::time::Duration;

use crate::report::{NodeOutcome, QuarantineReason};
use crate::safety::{
    self, Admission, CounterRead, EnsembleView, Marker, NextToken, NodeFacts, Persistence, Reason,
    Uptime,
};

/// What one node told this attempt, with what its connect learnt.
#[derive(Debug, Clone)]
pub struct Read {
    /// Whether the node set our keys.
    pub set: bool,
    /// The node's `run_id` when the reply came (`None`: unknown).
    pub run_id: Option<Arc<str>>,
    /// The node's age when the reply came, rounded down (see `aged`).
    pub uptime: Option<Uptime>,
    /// The node's durability.
    pub persistence: Persistence,
    /// What is known of the node's marker.
    pub marker: Seen,
    /// The ensemble record before this attempt raised it, in milliseconds (`None`: absent,
    /// or not read on the fast path).
    pub record_ms: Option<u64>,
    /// The highest fencing counter of the keys (when read).
    pub fence: Option<u64>,
    /// The life every counter was written in (`None`: one is absent, or they differ).
    pub fence_life: Option<String>,
}

/// What an attempt knows of a node's marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The fast path's plain `SET NX PX`: this client saw the node's marker name `life`
    /// before (with this completeness) and did not read it again.
    Cached {
        /// The life the marker named.
        life: Arc<str>,
        /// Its completeness.
        complete: bool,
    },
    /// The acquire script's read: `(life, complete)`, or absent.
    Read(Option<(String, bool)>),
}

impl Read {
    fn facts(&self) -> NodeFacts<'_> {
        let marker = match &self.marker {
            Seen::Cached { life, complete } => Some(Marker {
                life,
                complete: *complete,
            }),
            Seen::Read(marker) => marker.as_ref().map(|(life, complete)| Marker {
                life,
                complete: *complete,
            }),
        };
        NodeFacts {
            marker,
            run_id: self.run_id.as_deref(),
            uptime: self.uptime,
            persistence: self.persistence,
        }
    }
}

/// A node's uptime as reported at `INFO` time, aged by `since` (the time since that reply
/// arrived, which is less than the time since the node measured it): a lower bound of its
/// true age now, in milliseconds, rounding against the node.
pub(crate) fn aged(uptime: Uptime, since: Duration) -> Uptime {
    let age = uptime.min_age().saturating_add(since);
    let ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
    Uptime {
        whole: ms.saturating_add(1),
        unit: Duration::from_millis(1),
    }
}

/// The ensemble as one attempt read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    /// What the rules of [`safety::admit`] read: the script replies and the highest record.
    pub rules: EnsembleView,
    /// Every configured node answered the script and none has a marker, of any life.
    pub unmarked: bool,
    /// With `unmarked` and a record: how long until every node whose identity is known is
    /// old enough to be admitted (see [`admit`]); zero when all are.
    pub unmarked_wait: Duration,
}

/// The ensemble as this attempt read it: the script replies among `reads`.
pub fn view(reads: &[Option<Read>], drift_factor: f64) -> View {
    let scripted: Vec<&Read> = (reads.iter().flatten())
        .filter(|r| matches!(r.marker, Seen::Read(_)))
        .collect();
    let facts: Vec<NodeFacts<'_>> = scripted.iter().map(|r| r.facts()).collect();
    let records = scripted
        .iter()
        .map(|r| r.record_ms.map(Duration::from_millis));
    let rules = EnsembleView::read(reads.len(), facts.iter().zip(records));
    let period = safety::quarantine_period(rules.max_ttl.unwrap_or_default(), drift_factor);
    let unmarked_wait = (scripted.iter())
        .filter(|r| r.run_id.is_some())
        .filter_map(|r| r.uptime)
        .map(|u| period.saturating_sub(u.min_age()))
        .max()
        .unwrap_or_default();
    View {
        rules,
        unmarked: rules.answered == reads.len() && !rules.marked,
        unmarked_wait,
    }
}

/// Whether `read`'s "yes" counts, given the attempt's `view` (restart quarantine on). A fast
/// path answer from a node whose life changed since counts for nothing.
///
/// Two cases the rules of [`safety::admit`] leave undecided are decided here, both only
/// when **every** configured node answered (rules of the wiring, model-checked in
/// `tests/model.rs` with weaker variants caught):
///
/// - none has a marker, yet records exist (two clients starting together on a new
///   ensemble each see the record the other's attempt raised): every node is kept out
///   until all of them are older than the longest record plus drift, then all are marked
///   complete together ([`Admission::MarkOnly`]: they vote from the next attempt). Exclusion: a lease counted with its markers still in flight may
///   have lost a node since; every node answered and, under the minority-loss assumption,
///   some node of any lease's majority kept its record, so the longest record covers every
///   live lease, as for a lost memory. Fencing: a counter is only written after the marker
///   on the same connection, so without any marker no token was ever committed on a node
///   that kept its memory: complete. (Marking only some would leave the others short of
///   an intact majority, and marking them incomplete would leave new counters untrusted.)
/// - the rules want the record from an intact majority (`RecordUnread`): with every answer
///   in, the longest record covers every live lease by the same argument, so the node
///   waits out its quarantine by it and is then marked incomplete
///   ([`Admission::MarkOnly`], as [`safety::wait_out`]).
///
/// Both are admissions by age, as the rules' own waited-out quarantine: the answer's
/// `run_id` and uptime may be those of a process that restarted after it answered, so the
/// node is marked, naming that life, and votes only once a later answer shows the marker
/// current (see `docs/safety-v2.md`, "Admission by age").
pub fn admit(read: &Read, view: &View, drift_factor: f64) -> Admission {
    if let Seen::Cached { life, .. } = &read.marker
        && read.run_id.as_deref() != Some(&**life)
    {
        return Admission::Unknown {
            reason: Reason::Restarted,
        };
    }
    let max_ttl = view.rules.max_ttl.unwrap_or_default();
    let identified = read.run_id.is_some() && read.uptime.is_some();
    if view.unmarked && view.rules.max_ttl.is_some() && identified {
        let period = safety::quarantine_period(max_ttl, drift_factor);
        return match view.unmarked_wait {
            wait if wait.is_zero() => Admission::MarkOnly { complete: true },
            remaining => Admission::Quarantined {
                remaining,
                period,
                reason: Reason::MemoryLost,
            },
        };
    }
    match safety::admit(&read.facts(), &view.rules, drift_factor) {
        Admission::Unknown {
            reason: Reason::RecordUnread { .. },
        } if view.rules.answered == view.rules.nodes && identified => {
            by_uptime(read, max_ttl, drift_factor)
        }
        admission => admission,
    }
}

/// A node that may have lost its memory, every node having answered: kept out until its
/// age covers the longest record plus drift, then marked incomplete.
fn by_uptime(read: &Read, max_ttl: Duration, drift_factor: f64) -> Admission {
    let age = read.uptime.map(Uptime::min_age).unwrap_or_default();
    let reason = match read.marker {
        Seen::Read(None) => Reason::MemoryLost,
        _ => Reason::Restarted,
    };
    safety::wait_out(max_ttl, age, reason, drift_factor)
}

/// Whether an attempt may send the plain `SET NX PX` to the nodes that can take it (the
/// fast path, see [`Seen::Cached`]) and the acquire script to the others, given per node
/// `(fast, identified)`: whether it can take the fast path, and whether its identity
/// (`run_id`) is known. Allowed when every node that cannot has no identity: its answer
/// cannot vote ([`Reason::NoIdentity`]), whatever the others say. Otherwise every node
/// gets the script: [`view`] reads only scripted answers, and the rules that readmit a
/// node by age want every node's answer read ([`admit`]), so a node that restarted would
/// never be readmitted beside fast ones.
///
/// Never a safety question: a view read from fewer nodes admits fewer (no fresh ensemble,
/// no admission by age; the ensemble record only from an intact majority, as when nodes do
/// not answer), and a fast node's vote counts as on the all-fast path
/// (`tests/model.rs` checks every mix).
pub fn mix_allowed(nodes: impl IntoIterator<Item = (bool, bool)>) -> bool {
    (nodes.into_iter()).all(|(fast, identified)| fast || !identified)
}

/// Where a node stands before every answer is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Early {
    /// It counts whatever the others answer (its marker names its current life).
    Yes {
        /// Its fencing counter can be trusted.
        trusted: bool,
    },
    /// It depends on the others' answers (the ensemble record, a fresh ensemble).
    Maybe,
    /// It cannot count in this attempt.
    No,
}

/// Where `read` stands from its own answer alone.
pub(crate) fn early(read: &Read, nodes: usize, quarantine: bool) -> Early {
    if !quarantine {
        return Early::Yes { trusted: true };
    }
    let nothing = View {
        rules: EnsembleView::read(nodes, []),
        unmarked: false,
        unmarked_wait: Duration::ZERO,
    };
    match admit(read, &nothing, 0.0) {
        Admission::Votes { complete, .. } => Early::Yes {
            trusted: trusted(read, complete),
        },
        Admission::Unknown {
            reason: Reason::NoIdentity | Reason::Restarted,
        } => Early::No,
        _ => Early::Maybe,
    }
}

fn trusted(read: &Read, complete: bool) -> bool {
    let this_life = match (&read.fence_life, &read.run_id) {
        (Some(life), Some(run_id)) => **life == **run_id,
        _ => false,
    };
    safety::counter_trusted(true, complete, this_life)
}

/// Whether an attempt may stop waiting for answers: its outcome is certain. `reads[i]` is
/// node `i`'s answer, `None` while it is still awaited (`pending`) or when it failed. It
/// stops once the votes that count whatever comes reach `quorum` (and, with `fencing`, so
/// do the trusted counters), or once even every pending node and every vote still
/// depending on the others could not reach it. Otherwise it waits, for the rules that
/// need every answer (a fresh ensemble, the ensemble record), until none is pending.
///
/// With quarantine off every yes counts at once (the markers the answers so far allow are
/// still written, for the other clients).
pub(crate) fn settled(
    reads: &[Option<Read>],
    pending: usize,
    quorum: usize,
    fencing: bool,
    quarantine: bool,
) -> bool {
    let (mut yes, mut maybe, mut trusted, mut set) = (0, 0, 0, 0);
    for read in reads.iter().flatten() {
        set += usize::from(read.set);
        match early(read, reads.len(), true) {
            Early::Yes { trusted: t } => {
                trusted += usize::from(t);
                yes += usize::from(read.set);
            }
            Early::Maybe => maybe += usize::from(read.set),
            Early::No => {}
        }
    }
    if pending == 0 {
        return true;
    }
    if !quarantine {
        return set >= quorum || set + pending < quorum;
    }
    let won = yes >= quorum && (!fencing || trusted >= quorum);
    won || yes + maybe + pending < quorum
}

/// The outcome to report for a node that set our keys, given its admission.
pub(crate) fn outcome(admission: &Admission) -> NodeOutcome {
    match admission {
        Admission::Votes { .. } => NodeOutcome::Acquired,
        Admission::MarkOnly { .. } => NodeOutcome::Quarantined {
            reason: QuarantineReason::Readmitting,
            remaining: None,
        },
        Admission::Quarantined {
            remaining, reason, ..
        } => NodeOutcome::Quarantined {
            reason: public(*reason),
            remaining: Some(*remaining),
        },
        Admission::Unknown { reason } => NodeOutcome::Quarantined {
            reason: public(*reason),
            remaining: None,
        },
    }
}

impl Read {
    /// A node's answer before its reply is read: nothing set, no marker, no record; its
    /// `run_id`, age (see [`aged`]) and durability as its connect learnt them.
    pub(crate) fn blank(
        run_id: Option<Arc<str>>,
        uptime: Option<Uptime>,
        persistence: Persistence,
    ) -> Read {
        Read {
            set: false,
            run_id,
            uptime,
            persistence,
            marker: Seen::Read(None),
            record_ms: None,
            fence: None,
            fence_life: None,
        }
    }
}

/// Per node, whether restart quarantine would keep its vote out now, why and for how
/// long, judged from every answer as an acquisition judges them.
pub(crate) fn kept_out(
    reads: &[Option<Read>],
    drift_factor: f64,
) -> Vec<Option<(QuarantineReason, Option<Duration>)>> {
    let view = view(reads, drift_factor);
    reads
        .iter()
        .map(
            |read| match outcome(&admit(read.as_ref()?, &view, drift_factor)) {
                NodeOutcome::Quarantined { reason, remaining } => Some((reason, remaining)),
                _ => None,
            },
        )
        .collect()
}

/// The public reason of a rule's reason.
pub(crate) fn public(reason: Reason) -> QuarantineReason {
    match reason {
        Reason::MemoryLost => QuarantineReason::MemoryLost,
        Reason::Restarted => QuarantineReason::Restarted,
        Reason::NoIdentity => QuarantineReason::NoIdentity,
        Reason::RecordUnread { .. } => QuarantineReason::RecordUnread,
        Reason::FreshNeedsAll { .. } => QuarantineReason::FreshNeedsAll,
    }
}

/// The fencing token of an attempt: from the counters of the nodes whose admission says
/// their counter can be trusted (every counter read, with quarantine off), above `floor`.
pub fn token(
    reads: &[Option<Read>],
    admissions: &[Option<Admission>],
    floor: Option<u64>,
    quarantine: bool,
) -> NextToken {
    let counters: Vec<CounterRead> = reads
        .iter()
        .zip(admissions)
        .filter_map(|(read, admission)| {
            let read = read.as_ref()?;
            let trusted = match admission {
                _ if !quarantine => true,
                Some(Admission::Votes { complete, .. }) => trusted(read, *complete),
                _ => false,
            };
            Some(CounterRead {
                value: read.fence,
                trusted,
            })
        })
        .collect();
    safety::next_token(&counters, reads.len(), floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn read(set: bool, marker: Option<(&str, bool)>, up: u64, record_ms: Option<u64>) -> Read {
        Read {
            set,
            run_id: Some(Arc::from("r2")),
            uptime: Some(Uptime::seconds(up)),
            persistence: Persistence::Volatile,
            marker: Seen::Read(marker.map(|(l, c)| (l.to_owned(), c))),
            record_ms,
            fence: None,
            fence_life: None,
        }
    }

    #[test]
    fn uptime_ages_from_the_info_reply_rounding_down() {
        // Reported 1 s: maybe 0 s old at the reply; 250 ms later at least 250 ms.
        assert_eq!(aged(Uptime::seconds(1), MS(250)).min_age(), MS(250));
        assert_eq!(aged(Uptime::seconds(61), MS(0)).min_age(), MS(60_000));
        assert_eq!(aged(Uptime::seconds(0), Duration::MAX).whole, u64::MAX);
    }

    #[test]
    fn fast_nodes_mix_with_scripted_ones_only_beside_nodes_without_identity() {
        // (fast, identified) per node.
        assert!(mix_allowed([(true, true), (true, true)]), "all fast");
        assert!(
            mix_allowed([(true, true), (true, true), (false, false)]),
            "a silent node"
        );
        assert!(
            mix_allowed([(false, false), (false, false)]),
            "nobody known yet"
        );
        assert!(
            !mix_allowed([(true, true), (false, true)]),
            "a restarted node"
        );
        assert!(!mix_allowed([(true, true), (false, false), (false, true)]));
    }

    #[test]
    fn the_view_is_built_from_script_replies_only() {
        let mut fast = read(true, None, 5, Some(9_000));
        fast.marker = Seen::Cached {
            life: Arc::from("r2"),
            complete: true,
        };
        let reads = [
            Some(read(true, None, 5, Some(60_000))),
            None,
            Some(fast),
            Some(read(false, Some(("r2", true)), 5, Some(2_000))),
        ];
        assert_eq!(
            view(&reads, 0.01),
            View {
                rules: EnsembleView {
                    nodes: 4,
                    answered: 2,
                    intact: 1,
                    marked: true,
                    max_ttl: Some(MS(60_000)),
                },
                unmarked: false,
                // Uptime 5 s: 4 s old at least.
                unmarked_wait: MS(56_602),
            }
        );
    }

    #[test]
    fn an_ensemble_without_markers_waits_out_its_records_then_marks_complete() {
        // Two clients started together: records on every node, no marker anywhere.
        let young = || Some(read(true, None, 1, Some(1_000)));
        let old = || Some(read(true, None, 30, Some(1_000)));
        let reads = [young(), old(), young()];
        let v = view(&reads, 0.01);
        assert!(v.unmarked);
        assert_eq!(
            admit(reads[0].as_ref().unwrap(), &v, 0.01),
            Admission::Quarantined {
                remaining: MS(1_012),
                period: MS(1_012),
                reason: Reason::MemoryLost
            }
        );
        // All or none: the old node waits for the young ones, then all are complete.
        assert_eq!(
            admit(reads[1].as_ref().unwrap(), &v, 0.01),
            admit(reads[0].as_ref().unwrap(), &v, 0.01)
        );
        let reads = [old(), old(), old()];
        assert_eq!(
            admit(reads[1].as_ref().unwrap(), &view(&reads, 0.01), 0.01),
            Admission::MarkOnly { complete: true }
        );
        // Some markers, too few intact, every node heard: by its age, then incomplete.
        let lone = Some(read(true, Some(("r2", true)), 30, Some(1_000)));
        let reads = [young(), lone.clone(), old()];
        let v = view(&reads, 0.01);
        assert_eq!(
            admit(reads[2].as_ref().unwrap(), &v, 0.01),
            Admission::MarkOnly { complete: false }
        );
        assert!(matches!(
            admit(reads[0].as_ref().unwrap(), &v, 0.01),
            Admission::Quarantined { .. }
        ));
        // ... but not with a node unheard: the rules' `RecordUnread`.
        let reads = [None, lone, old()];
        assert!(matches!(
            admit(reads[2].as_ref().unwrap(), &view(&reads, 0.01), 0.01),
            Admission::Unknown { .. }
        ));
        // One node not heard: the usual rules (no fresh ensemble, no shortcut).
        let partial = [young(), old(), None];
        assert!(!view(&partial, 0.01).unmarked);
        // One marker anywhere: the usual rules.
        let marked = [
            young(),
            Some(read(true, Some(("r2", true)), 30, Some(1_000))),
            old(),
        ];
        assert!(!view(&marked, 0.01).unmarked);
    }

    #[test]
    fn a_fast_path_answer_counts_only_in_the_life_it_was_planned_for() {
        let mut r = read(true, None, 5, None);
        r.marker = Seen::Cached {
            life: Arc::from("r2"),
            complete: false,
        };
        let fresh = view(&[], 0.01);
        assert_eq!(
            admit(&r, &fresh, 0.01),
            Admission::Votes {
                complete: false,
                mark: false
            }
        );
        r.run_id = Some(Arc::from("r3"));
        assert!(matches!(admit(&r, &fresh, 0.01), Admission::Unknown { .. }));
        assert_eq!(early(&r, 3, true), Early::No);
    }

    #[test]
    fn an_attempt_waits_for_answers_the_rules_need() {
        let q = 2;
        let yes = || Some(read(true, Some(("r2", true)), 5, Some(1_000)));
        let maybe = || Some(read(true, None, 5, None));
        let held = || Some(read(false, Some(("r2", true)), 5, Some(1_000)));
        // Two certain votes: done, whatever is pending.
        assert!(settled(&[yes(), yes(), None], 1, q, false, true));
        // One certain vote and one depending on the third answer: wait.
        assert!(!settled(&[yes(), maybe(), None], 1, q, false, true));
        // Every answer in: done (the ballot is then decided on the full view).
        assert!(settled(&[yes(), maybe(), held()], 0, q, false, true));
        // Two held elsewhere: no majority can come.
        assert!(settled(&[held(), held(), None], 1, q, false, true));
        // Fencing needs a majority of trusted counters too: an incomplete node's absent
        // counter is not one.
        let incomplete = || Some(read(true, Some(("r2", false)), 5, Some(1_000)));
        assert!(!settled(&[yes(), incomplete(), None], 1, q, true, true));
        assert!(settled(&[yes(), incomplete(), None], 1, q, false, true));
        // Quarantine off: every yes counts at once.
        assert!(settled(&[maybe(), maybe(), None], 1, q, false, false));
        assert!(settled(&[yes(), yes(), None], 1, q, false, false));
        assert!(settled(&[held(), held(), None], 1, q, false, false));
    }

    #[test]
    fn outcomes_say_why_and_until_when() {
        let q = Admission::Quarantined {
            remaining: MS(1_500),
            period: MS(60_602),
            reason: Reason::MemoryLost,
        };
        assert_eq!(
            outcome(&q),
            NodeOutcome::Quarantined {
                reason: QuarantineReason::MemoryLost,
                remaining: Some(MS(1_500)),
            }
        );
        assert_eq!(
            outcome(&q).to_string(),
            "kept out by restart quarantine: lost its data while locks may depend on it, \
             votes again in 1.5 s"
        );
        // Admitted by its age: marked, kept out of this attempt.
        let marked = outcome(&Admission::MarkOnly { complete: false });
        assert_eq!(
            marked,
            NodeOutcome::Quarantined {
                reason: QuarantineReason::Readmitting,
                remaining: None,
            }
        );
        assert_eq!(
            marked.to_string(),
            "kept out by restart quarantine: quarantine over: votes from the attempt after the \
             one that marks it"
        );
    }

    #[test]
    fn tokens_come_from_trusted_counters_only() {
        let counter = |complete, value, life: Option<&str>| {
            let mut r = read(true, Some(("r2", complete)), 100, Some(1_000));
            r.fence = Some(value);
            r.fence_life = life.map(str::to_owned);
            Some(r)
        };
        let votes = |complete| {
            Some(Admission::Votes {
                complete,
                mark: false,
            })
        };
        // Issue 14's case: token 5 on nodes 0 and 1; node 1 restarted empty and was
        // re-admitted incomplete; node 2 held a stale key and has 4.
        let reads = [
            counter(true, 5, Some("r1")),
            counter(false, 0, None),
            counter(true, 4, Some("r1")),
        ];
        let adm = [votes(true), votes(false), votes(true)];
        assert_eq!(token(&reads, &adm, None, true), NextToken::Mint(6));
        // Without node 0 the trusted reads are a minority: no token.
        let reads = [None, counter(false, 0, None), counter(true, 4, Some("r1"))];
        assert_eq!(
            token(&reads, &adm, None, true),
            NextToken::Undecidable {
                trusted: 1,
                needed: 2
            }
        );
        // A counter rewritten in the node's current life is trusted again.
        let reads = [
            None,
            counter(false, 7, Some("r2")),
            counter(true, 4, Some("r1")),
        ];
        assert_eq!(token(&reads, &adm, None, true), NextToken::Mint(8));
        // A floor lifts the sequence; quarantine off trusts every counter (the old rule).
        assert_eq!(token(&reads, &adm, Some(100), true), NextToken::Mint(101));
        let reads = [None, counter(false, 0, None), counter(true, 4, Some("r1"))];
        assert_eq!(token(&reads, &adm, None, false), NextToken::Mint(5));
        // A node marked by its age gives no trusted counter in that attempt, even one
        // written in its life.
        let reads = [
            None,
            counter(false, 7, Some("r2")),
            counter(true, 4, Some("r1")),
        ];
        let adm = [
            None,
            Some(Admission::MarkOnly { complete: false }),
            votes(true),
        ];
        assert_eq!(
            token(&reads, &adm, None, true),
            NextToken::Undecidable {
                trusted: 1,
                needed: 2
            }
        );
    }
}
