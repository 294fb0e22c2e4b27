//! The ballot of one acquisition attempt under restart quarantine: which
//! node's "yes" counts, when the attempt knows enough to stop waiting for answers, and which
//! fencing token it may mint.
//!
//! Pure: no clock, no Redis, no `async`. The client feeds it the facts each node's connect
//! learnt (`run_id`, uptime, persistence) and what each acquire reply said (the marker, the
//! ensemble record, the fencing counters); the rules themselves are [`crate::rules::safety`]'s.
//! [`view`], [`admit`] and [`token`] are public (`#[doc(hidden)]`, not the crate's API) so
//! that the model checker in `tests/model.rs` decides with them, as the client does.

use std::sync::Arc;
use std::time::Duration;

use crate::report::{NodeOutcome, QuarantineReason};
use crate::rules::safety::{
    self, Admission, EnsembleView, NextToken, NodeFacts, Persistence, Reason, Uptime,
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
}

/// What an attempt knows of a node's marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The fast path's plain `SET NX PX`: this client saw the node's marker name `life`
    /// before and did not read it again.
    Cached(Arc<str>),
    /// The acquire script's read: the life the marker names, or absent.
    Read(Option<String>),
}

impl Read {
    fn facts(&self) -> NodeFacts<'_> {
        let marker = match &self.marker {
            Seen::Cached(life) => Some(&**life),
            Seen::Read(marker) => marker.as_deref(),
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

/// The ensemble as this attempt read it: the script replies among `reads` (a fast path
/// answer read no marker and no record).
pub fn view(reads: &[Option<Read>]) -> EnsembleView {
    let scripted: Vec<&Read> = (reads.iter().flatten())
        .filter(|r| matches!(r.marker, Seen::Read(_)))
        .collect();
    let facts: Vec<NodeFacts<'_>> = scripted.iter().map(|r| r.facts()).collect();
    let records = scripted
        .iter()
        .map(|r| r.record_ms.map(Duration::from_millis));
    EnsembleView::read(reads.len(), facts.iter().zip(records))
}

/// Whether `read`'s "yes" counts, given the attempt's `view`, the drift factor and the
/// deployment's TTL `ceiling` (restart quarantine on): [`safety::admit`], except that a
/// fast path answer from a node whose life changed since the plan counts for nothing.
pub fn admit(read: &Read, view: &EnsembleView, drift_factor: f64, ceiling: Duration) -> Admission {
    if let Seen::Cached(life) = &read.marker
        && read.run_id.as_deref() != Some(&**life)
    {
        return Admission::Unknown {
            reason: Reason::Restarted,
        };
    }
    safety::admit(&read.facts(), view, drift_factor, ceiling)
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
    Yes,
    /// It depends on the others' answers (the ensemble record, a fresh ensemble).
    Maybe,
    /// It cannot count in this attempt.
    No,
}

/// Where `read` stands from its own answer alone.
pub(crate) fn early(read: &Read, nodes: usize, quarantine: bool) -> Early {
    if !quarantine {
        return Early::Yes;
    }
    let nothing = EnsembleView::read(nodes, []);
    match admit(read, &nothing, 0.0, Duration::ZERO) {
        Admission::Votes { .. } => Early::Yes,
        Admission::Unknown {
            reason: Reason::NoIdentity | Reason::Restarted,
        } => Early::No,
        _ => Early::Maybe,
    }
}

/// Whether an attempt may stop waiting for answers: its outcome is certain, and so is
/// every admission its answers can decide. `reads[i]` is node `i`'s answer, `None` while it
/// is still awaited (`pending`) or when it failed. It stops once the votes that count
/// whatever comes reach `quorum`, or once even every pending node and every vote still
/// depending on the others could not reach it and no answer waits for the others to be
/// judged. An answer that depends on the others (no marker of its life) is judged on
/// every answer: a fresh ensemble is recognised, and its nodes marked, even by an attempt
/// that fails (a peer's key in the way, say), and a node whose quarantine is over is
/// marked; so a failed attempt waits for them, up to the node timeout.
///
/// With quarantine off every yes counts at once (the markers the answers so far allow are
/// still written, for the other clients).
pub(crate) fn settled(
    reads: &[Option<Read>],
    pending: usize,
    quorum: usize,
    quarantine: bool,
) -> bool {
    let (mut yes, mut maybe, mut set, mut undecided) = (0, 0, 0, false);
    for read in reads.iter().flatten() {
        set += usize::from(read.set);
        match early(read, reads.len(), true) {
            Early::Yes => yes += usize::from(read.set),
            Early::Maybe => {
                maybe += usize::from(read.set);
                undecided = true;
            }
            Early::No => {}
        }
    }
    if pending == 0 {
        return true;
    }
    if !quarantine {
        return set >= quorum || set + pending < quorum;
    }
    yes >= quorum || (yes + maybe + pending < quorum && !undecided)
}

/// The outcome to report for a node that set our keys, given its admission.
pub(crate) fn outcome(admission: &Admission) -> NodeOutcome {
    match admission {
        Admission::Votes { .. } => NodeOutcome::Acquired,
        Admission::MarkOnly => NodeOutcome::Quarantined {
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

/// The outcome of a node's fence commit (`committed`: [`NodeOutcome::Acquired`] where the
/// script found our token and committed the counter), given the outcome of its vote in the
/// acquisition as the ballot judged it (`acquired`) and whether its membership vouches for
/// it now (`vouched`, see `Ensemble::vouches`). The commit counts only where the vote
/// counted and is still vouched for: a node whose vote was never judged (still pending,
/// timed out or failed while the ballot read the others) or was kept out may be a
/// superseded master or a restarted one, and a counter committed there is no promise that
/// the next holder reads it. Such a commit keeps the acquisition's outcome, which says why
/// it does not count; a vote no longer vouched for is [`QuarantineReason::NoIdentity`], as
/// in an acquisition.
pub(crate) fn fence_outcome(
    committed: NodeOutcome,
    acquired: &NodeOutcome,
    vouched: bool,
) -> NodeOutcome {
    match (committed, acquired) {
        (NodeOutcome::Acquired, NodeOutcome::Acquired) if vouched => NodeOutcome::Acquired,
        (NodeOutcome::Acquired, NodeOutcome::Acquired) => NodeOutcome::Quarantined {
            reason: QuarantineReason::NoIdentity,
            remaining: None,
        },
        (NodeOutcome::Acquired, not_counted) => not_counted.clone(),
        (other, _) => other,
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
        }
    }
}

/// Per node, whether restart quarantine would keep its vote out now, why and for how
/// long, judged from every answer as an acquisition judges them.
pub(crate) fn kept_out(
    reads: &[Option<Read>],
    drift_factor: f64,
    ceiling: Duration,
) -> Vec<Option<(QuarantineReason, Option<Duration>)>> {
    let view = view(reads);
    reads
        .iter()
        .map(|read| {
            let admission = admit(read.as_ref()?, &view, drift_factor, ceiling);
            match outcome(&admission) {
                NodeOutcome::Quarantined { reason, remaining } => Some((reason, remaining)),
                _ => None,
            }
        })
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
        Reason::JustStarted => QuarantineReason::JustStarted,
    }
}

/// The fencing token of an attempt (see [`safety::next_token`]): above every counter the
/// answers read, above `floor`, and at least `clock_us`, the client's wall clock in
/// microseconds since the Unix epoch.
pub fn token(reads: &[Option<Read>], floor: Option<u64>, clock_us: u64) -> NextToken {
    let counters = reads.iter().flatten().map(|read| read.fence);
    safety::next_token(counters, floor, clock_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;
    const CEILING: Duration = Duration::from_secs(60);

    fn read(set: bool, marker: Option<&str>, up: u64, record_ms: Option<u64>) -> Read {
        Read {
            set,
            run_id: Some(Arc::from("r2")),
            uptime: Some(Uptime::seconds(up)),
            persistence: Persistence::Volatile,
            marker: Seen::Read(marker.map(str::to_owned)),
            record_ms,
            fence: None,
        }
    }

    #[test]
    fn a_fence_commit_counts_only_where_the_acquisition_vote_counted_and_is_vouched_for() {
        let kept_out = |reason| NodeOutcome::Quarantined {
            reason,
            remaining: None,
        };
        // The acquisition's outcome of the node, and whether its commit counts when vouched.
        let table = [
            (NodeOutcome::Acquired, true),
            (NodeOutcome::Pending, false),
            (NodeOutcome::TimedOut, false),
            (NodeOutcome::Failed("reset".into()), false),
            (NodeOutcome::HeldByOther, false),
            (kept_out(QuarantineReason::MemoryLost), false),
            (kept_out(QuarantineReason::NoIdentity), false),
            (kept_out(QuarantineReason::Readmitting), false),
        ];
        let mut wrong = Vec::new();
        for (acquired, counts) in table {
            for vouched in [true, false] {
                let committed = fence_outcome(NodeOutcome::Acquired, &acquired, vouched);
                if committed.is_acquired() != (counts && vouched) {
                    wrong.push(format!(
                        "{acquired:?} (vouched: {vouched}) -> {committed:?}"
                    ));
                }
                let refused = fence_outcome(NodeOutcome::NotHeld, &acquired, vouched);
                assert_eq!(refused, NodeOutcome::NotHeld);
            }
        }
        assert!(wrong.is_empty(), "counted wrongly: {wrong:#?}");
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
        fast.marker = Seen::Cached(Arc::from("r2"));
        let reads = [
            Some(read(true, None, 5, Some(60_000))),
            None,
            Some(fast),
            Some(read(false, Some("r2"), 5, Some(2_000))),
        ];
        assert_eq!(
            view(&reads),
            EnsembleView {
                nodes: 4,
                answered: 2,
                intact: 1,
                marked: true,
                max_ttl: Some(MS(60_000)),
            }
        );
    }

    #[test]
    fn clients_that_start_together_mark_each_node_once_its_records_are_waited_out() {
        // Two clients started together: records on every node, no marker anywhere.
        let young = || Some(read(true, None, 1, Some(1_000)));
        let old = || Some(read(true, None, 30, Some(1_000)));
        let reads = [young(), old(), young()];
        let v = view(&reads);
        assert_eq!(
            admit(reads[0].as_ref().unwrap(), &v, 0.01, CEILING),
            Admission::Quarantined {
                remaining: MS(1_012),
                period: MS(1_012),
                reason: Reason::MemoryLost
            }
        );
        assert_eq!(
            admit(reads[1].as_ref().unwrap(), &v, 0.01, CEILING),
            Admission::MarkOnly
        );
        // A node unheard, no intact majority: the ceiling bounds the wait.
        let reads = [None, old(), old()];
        let v = view(&reads);
        assert_eq!(
            admit(reads[1].as_ref().unwrap(), &v, 0.01, CEILING),
            Admission::Quarantined {
                remaining: MS(60_602 - 29_000),
                period: MS(60_602),
                reason: Reason::RecordUnread {
                    intact: 0,
                    needed: 2
                }
            }
        );
        let ancient = Some(read(true, None, 70, Some(1_000)));
        let reads = [None, ancient.clone(), ancient];
        assert_eq!(
            admit(reads[1].as_ref().unwrap(), &view(&reads), 0.01, CEILING),
            Admission::MarkOnly
        );
    }

    #[test]
    fn a_fast_path_answer_counts_only_in_the_life_it_was_planned_for() {
        let mut r = read(true, None, 5, None);
        r.marker = Seen::Cached(Arc::from("r2"));
        let fresh = view(&[]);
        assert_eq!(
            admit(&r, &fresh, 0.01, CEILING),
            Admission::Votes { mark: false }
        );
        r.run_id = Some(Arc::from("r3"));
        assert!(matches!(
            admit(&r, &fresh, 0.01, CEILING),
            Admission::Unknown { .. }
        ));
        assert_eq!(early(&r, 3, true), Early::No);
    }

    #[test]
    fn an_attempt_waits_for_answers_the_rules_need() {
        let q = 2;
        let yes = || Some(read(true, Some("r2"), 5, Some(1_000)));
        let maybe = || Some(read(true, None, 5, None));
        let held = || Some(read(false, Some("r2"), 5, Some(1_000)));
        let held_unmarked = || Some(read(false, None, 5, None));
        // Two certain votes: done, whatever is pending.
        assert!(settled(&[yes(), yes(), None], 1, q, true));
        // One certain vote and one depending on the third answer: wait.
        assert!(!settled(&[yes(), maybe(), None], 1, q, true));
        // Every answer in: done (the ballot is then decided on the full view).
        assert!(settled(&[yes(), maybe(), held()], 0, q, true));
        // Two held elsewhere by marked nodes: no majority can come.
        assert!(settled(&[held(), held(), None], 1, q, true));
        // Held on unmarked nodes: lost, but the last answer may show a fresh ensemble,
        // whose markers even a failed attempt writes.
        assert!(!settled(
            &[held_unmarked(), held_unmarked(), None],
            1,
            q,
            true
        ));
        // Quarantine off: every yes counts at once.
        assert!(settled(&[maybe(), maybe(), None], 1, q, false));
        assert!(settled(&[yes(), yes(), None], 1, q, false));
        assert!(settled(&[held(), held(), None], 1, q, false));
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
        // Admitted by its age: marked, kept out of this attempt.
        assert_eq!(
            outcome(&Admission::MarkOnly),
            NodeOutcome::Quarantined {
                reason: QuarantineReason::Readmitting,
                remaining: None,
            }
        );
    }

    #[test]
    fn tokens_read_every_counter_the_floor_and_the_clock() {
        let counter = |value| {
            let mut r = read(true, Some("r2"), 100, Some(1_000));
            r.fence = value;
            Some(r)
        };
        let now = 1_800_000_000_000_000;
        let reads = [
            counter(Some(now + 5)),
            counter(None),
            None,
            counter(Some(4)),
        ];
        assert_eq!(token(&reads, None, now), NextToken::Mint(now + 6));
        assert_eq!(token(&reads, None, now + 50), NextToken::Mint(now + 50));
        assert_eq!(
            token(&reads, Some(now + 100), now),
            NextToken::Mint(now + 101)
        );
        assert_eq!(token(&[counter(None)], None, 0), NextToken::Mint(1));
    }
}
