//! The pure safety rules of restart quarantine (v2), fencing tokens, vote de-duplication and
//! failed extensions (issue 14). `docs/safety-v2.md` is the argument; this is the code.
//!
//! Nothing here reads a clock, talks to Redis or awaits: every input comes in as an
//! argument, so the client feeds the rules from `INFO` and its Lua replies, and the model
//! checker in `tests/model.rs` calls the very same functions. The module depends on nothing
//! else in the crate. It is public only so that test can see it (`#[doc(hidden)]`); it is
//! not part of the crate's API.
//!
//! Node-side data the rules read (written by the client's scripts, never by the user):
//! - the **ensemble record** on every node: the longest TTL any client counted a vote (or
//!   extended) for on that node, raised in the same script as the `SET NX` / `PEXPIRE`;
//! - the node's **marker** `<run_id>:<complete>`, written when a client admits the node
//!   ([`Admission::Votes`] with `mark`, or [`Admission::MarkOnly`]). A marker naming the current `run_id` means the
//!   node's memory is intact since it was admitted;
//! - each fencing counter's **life**: the marker's `run_id` when the counter was written.
//!
//! Entry points, in the order an attempt uses them: [`duplicate_server`] (at connect),
//! [`EnsembleView::read`] and [`admit`] (per node, per attempt), [`counter_trusted`] and
//! [`next_token`] (fencing), [`lease_validity`] (the decision), [`after_failed_extension`];
//! in the background, [`repair_sources`] and [`repair_value`] (counter repair of a
//! re-admitted node).

use std::fmt;
use std::time::Duration;

/// The constant part of the drift allowance (Redis expires keys with millisecond
/// granularity).
pub const DRIFT_CONSTANT: Duration = Duration::from_millis(2);

/// Votes needed among `n` nodes: a strict majority, `n / 2 + 1`. Equal to the client's
/// quorum rule (`quorum::quorum`).
pub const fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The drift allowance of a TTL: `ttl * drift_factor + 2 ms`, saturating (a factor the
/// arithmetic cannot use gives the largest allowance). Equal to the client's
/// `quorum::drift`.
pub fn drift_allowance(ttl: Duration, drift_factor: f64) -> Duration {
    let proportional =
        Duration::try_from_secs_f64(ttl.as_secs_f64() * drift_factor).unwrap_or(Duration::MAX);
    proportional.saturating_add(DRIFT_CONSTANT)
}

/// The crate's validity rule: `ttl - elapsed - drift_allowance(ttl)`, `None` when not
/// strictly positive. Equal to the client's `quorum::validity`.
pub fn lease_validity(ttl: Duration, elapsed: Duration, drift_factor: f64) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift_allowance(ttl, drift_factor))
        .filter(|v| !v.is_zero())
}

/// What is known of a node's durability across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Not known (`CONFIG GET` refused): treated as losing data.
    Unknown,
    /// Known to lose writes on a restart (no AOF, or AOF without `appendfsync always`).
    Volatile,
    /// `appendonly yes` with `appendfsync always`: every acknowledged write survives.
    AofAlways,
}

/// The node's own marker, as read from the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker<'a> {
    /// The `run_id` of the process that was admitted.
    pub life: &'a str,
    /// Whether the node holds everything the ensemble wrote to it since it first served
    /// (`false` once it was admitted after a loss: its absent counters say nothing).
    pub complete: bool,
}

/// `INFO server`'s `uptime_in_seconds`: a count of whole `unit`s computed from two
/// whole-unit wall-clock readings, so the true age is more than `whole - 1` units and may
/// be almost a unit less than `whole` units (a node 0.3 s old can report 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Uptime {
    /// The reported count.
    pub whole: u64,
    /// The unit of the count (one second for Redis).
    pub unit: Duration,
}

impl Uptime {
    /// Redis's uptime in seconds.
    pub fn seconds(whole: u64) -> Self {
        Uptime {
            whole,
            unit: Duration::from_secs(1),
        }
    }

    /// A lower bound of the process's true age, rounding against the node: `whole - 1`
    /// units (zero when `whole` is 0 or 1).
    pub fn min_age(self) -> Duration {
        let whole = u32::try_from(self.whole.saturating_sub(1)).unwrap_or(u32::MAX);
        self.unit.saturating_mul(whole)
    }
}

/// What one client knows of one node when deciding whether its "yes" counts: `INFO`
/// (`run_id`, `uptime_in_seconds`) read on the connection the acquire script ran on, the
/// marker the script returned, and the persistence settings read at connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeFacts<'a> {
    /// The node's marker; `None` when absent.
    pub marker: Option<Marker<'a>>,
    /// `run_id` from `INFO`; `None` when `INFO` was refused or lacks it.
    pub run_id: Option<&'a str>,
    /// `uptime_in_seconds` from the same `INFO` reply.
    pub uptime: Option<Uptime>,
    /// The node's durability.
    pub persistence: Persistence,
}

impl NodeFacts<'_> {
    /// Whether the node's memory is known intact since a client admitted it: its marker
    /// names its current `run_id`, or another one while every write is durable. Only such
    /// nodes' ensemble records are trusted to hold every TTL granted through them.
    pub fn is_intact(&self) -> bool {
        match (self.marker, self.run_id) {
            (Some(m), Some(run_id)) => {
                m.life == run_id || self.persistence == Persistence::AofAlways
            }
            _ => false,
        }
    }
}

/// The ensemble record and markers as read in one attempt, from the nodes that answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnsembleView {
    /// Configured nodes.
    pub nodes: usize,
    /// Nodes whose acquire script answered (record and marker read, present or absent).
    pub answered: usize,
    /// Answering nodes that are [`NodeFacts::is_intact`].
    pub intact: usize,
    /// Whether any answering node had a marker (of any life).
    pub marked: bool,
    /// The highest record read, as it was before this attempt raised it; `None` when no
    /// answering node had one.
    pub max_ttl: Option<Duration>,
}

impl EnsembleView {
    /// Summarises one attempt's answers: per answering node, its facts and the record it
    /// returned.
    pub fn read<'a, 'f: 'a>(
        nodes: usize,
        answers: impl IntoIterator<Item = (&'a NodeFacts<'f>, Option<Duration>)>,
    ) -> Self {
        let mut view = EnsembleView {
            nodes,
            answered: 0,
            intact: 0,
            marked: false,
            max_ttl: None,
        };
        for (facts, record) in answers {
            view.answered += 1;
            view.intact += usize::from(facts.is_intact());
            view.marked |= facts.marker.is_some();
            view.max_ttl = view.max_ttl.max(record);
        }
        view
    }

    /// Whether the answers show a fresh ensemble: every configured node answered and none
    /// has a record or a marker, so no lease was ever counted anywhere.
    pub fn is_fresh(&self) -> bool {
        self.answered >= self.nodes && self.max_ttl.is_none() && !self.marked
    }
}

/// Why a node is kept out. Its `Display` is a sentence for users (lowercase, no node
/// name: the caller adds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// No marker while the ensemble has served locks: the node lost its memory (or never
    /// was admitted).
    MemoryLost,
    /// A marker of another process and no durable persistence: it restarted.
    Restarted,
    /// `INFO` gave no `run_id` or uptime (refused by an ACL, say).
    NoIdentity,
    /// Not every configured node answered, and none that did shows that the ensemble has
    /// served: a fresh ensemble cannot be told from one whose records were lost.
    FreshNeedsAll {
        /// Nodes that answered.
        answered: usize,
        /// Configured nodes.
        nodes: usize,
    },
    /// The ensemble record was read from too few intact nodes to know the longest TTL a
    /// lost lease may have had.
    RecordUnread {
        /// Intact nodes that answered.
        intact: usize,
        /// Intact nodes needed (a majority of the configured nodes).
        needed: usize,
    },
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::MemoryLost => {
                f.write_str("node lost its memory (no marker) and may have held lost locks")
            }
            Reason::Restarted => f.write_str(
                "node restarted without durable persistence and may have held lost locks",
            ),
            Reason::NoIdentity => f.write_str("node's run_id or uptime is unknown (INFO refused?)"),
            Reason::FreshNeedsAll { answered, nodes } => write!(
                f,
                "new ensemble: every node must answer before the first lock ({answered} of {nodes} did)"
            ),
            Reason::RecordUnread { intact, needed } => write!(
                f,
                "ensemble record read from {intact} intact nodes, {needed} needed"
            ),
        }
    }
}

/// Whether a node's "yes" counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// It counts. When `mark`, write the marker `<run_id>:<complete>` on the node (the
    /// `run_id` the decision was made for).
    Votes {
        /// The completeness the marker must say.
        complete: bool,
        /// Whether the marker must be (re)written.
        mark: bool,
    },
    /// Admitted by its age (its quarantine waited out): write the marker `<run_id>:<complete>`
    /// naming the life the answer came from, but the yes does not count in this attempt.
    /// The answer may predate a restart (it was sent before the node lost its memory and
    /// arrived after), and its `run_id` and uptime are those of the old life; the marker
    /// settles it: the next attempt finds it current (intact: votes) or naming an old life
    /// (restarted: quarantined again). See `docs/safety-v2.md`, "Admission by age".
    MarkOnly {
        /// The completeness the marker must say.
        complete: bool,
    },
    /// Not yet: it votes once `remaining` has passed after the moment the `INFO` reply
    /// arrived ("quarantined until ~T").
    Quarantined {
        /// Time still to wait, measured from the `INFO` reply.
        remaining: Duration,
        /// The whole quarantine period, from the node's start.
        period: Duration,
        /// Why.
        reason: Reason,
    },
    /// An input is missing: the node does not vote until it is known.
    Unknown {
        /// Which input.
        reason: Reason,
    },
}

/// How long a node that lost its memory stays out: the longest TTL the ensemble ever
/// granted plus its drift allowance. Every lease that may have depended on the lost
/// memory has ended by then.
pub fn quarantine_period(max_ttl: Duration, drift_factor: f64) -> Duration {
    max_ttl.saturating_add(drift_allowance(max_ttl, drift_factor))
}

/// Restart quarantine v2: decides whether `node`'s "yes" counts in this attempt, given
/// what the attempt read from every answering node (`ensemble`).
///
/// In order: unknown identity → [`Admission::Unknown`]; intact (marker of this process,
/// or durable) → votes at once; a fresh ensemble ([`EnsembleView::is_fresh`]) → votes at
/// once; otherwise the node may have lost memory: the ensemble's longest TTL must be read
/// from a majority of intact nodes, and the node is marked once its uptime (rounded down by
/// a whole unit) covers [`quarantine_period`] of it ([`Admission::MarkOnly`]: it votes from
/// the next attempt, see [`wait_out`]).
pub fn admit(node: &NodeFacts<'_>, ensemble: &EnsembleView, drift_factor: f64) -> Admission {
    let (Some(run_id), Some(uptime)) = (node.run_id, node.uptime) else {
        return Admission::Unknown {
            reason: Reason::NoIdentity,
        };
    };
    if let Some(m) = node.marker
        && node.is_intact()
    {
        return Admission::Votes {
            complete: m.complete,
            mark: m.life != run_id,
        };
    }
    if ensemble.is_fresh() {
        return Admission::Votes {
            complete: true,
            mark: true,
        };
    }
    let needed = majority(ensemble.nodes);
    let served = ensemble.max_ttl.is_some() || ensemble.marked;
    if !served {
        return Admission::Unknown {
            reason: Reason::FreshNeedsAll {
                answered: ensemble.answered,
                nodes: ensemble.nodes,
            },
        };
    }
    let Some(max_ttl) = ensemble.max_ttl.filter(|_| ensemble.intact >= needed) else {
        return Admission::Unknown {
            reason: Reason::RecordUnread {
                intact: ensemble.intact,
                needed,
            },
        };
    };
    let reason = if node.marker.is_some() {
        Reason::Restarted
    } else {
        Reason::MemoryLost
    };
    wait_out(max_ttl, uptime.min_age(), reason, drift_factor)
}

/// A node that may have lost memory (`reason`) and is at least `age` old: quarantined until
/// `age` reaches the quarantine period of `max_ttl`, then marked with `complete = false`
/// ([`Admission::MarkOnly`]): an admission by age never votes in the attempt that decides
/// it, since `age` (and the life the marker names) may be those of a process that restarted
/// after it answered.
pub fn wait_out(max_ttl: Duration, age: Duration, reason: Reason, drift_factor: f64) -> Admission {
    let period = quarantine_period(max_ttl, drift_factor);
    match period.checked_sub(age) {
        Some(remaining) if !remaining.is_zero() => Admission::Quarantined {
            remaining,
            period,
            reason,
        },
        // Every lease that may have used the lost memory has ended, if the answer is of the
        // node's current life: the marker tells the next attempt. Its counters stay
        // untrusted until rewritten in this life (complete = false).
        _ => Admission::MarkOnly { complete: false },
    }
}

/// One node's fencing counter as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterRead {
    /// The value; `None` when absent.
    pub value: Option<u64>,
    /// Whether the value (or its absence) can be trusted: see [`counter_trusted`].
    pub trusted: bool,
}

/// Whether a node's counter reflects every commit that reached it: the node is admitted in
/// its current life (`marker_current`: [`admit`] said [`Admission::Votes`], never
/// [`Admission::MarkOnly`]) and either
/// never lost memory (`complete`, from the marker) or the counter was written in this life
/// (`written_this_life`: the counter's life tag equals the node's `run_id`).
pub fn counter_trusted(marker_current: bool, complete: bool, written_this_life: bool) -> bool {
    marker_current && (complete || written_this_life)
}

/// The fencing token decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextToken {
    /// Mint and commit this token.
    Mint(u64),
    /// Fewer than a majority of trusted reads: a higher token may exist unseen.
    Undecidable {
        /// Trusted reads.
        trusted: usize,
        /// Trusted reads needed.
        needed: usize,
    },
    /// The highest trusted counter is `u64::MAX`: no larger token exists.
    Exhausted,
}

/// The next fencing token: one above the highest trusted counter, provided a majority of
/// the `nodes` gave trusted reads, and above `floor` (a user's floor after a majority lost
/// its memory: every token issued before must be at most `floor`).
pub fn next_token(reads: &[CounterRead], nodes: usize, floor: Option<u64>) -> NextToken {
    let highest = match trusted_max(reads, nodes) {
        Ok(highest) => highest.max(floor.unwrap_or(0)),
        Err((trusted, needed)) => return NextToken::Undecidable { trusted, needed },
    };
    highest
        .checked_add(1)
        .map_or(NextToken::Exhausted, NextToken::Mint)
}

/// The highest trusted counter (0 when every trusted read is absent), provided a majority
/// of the `nodes` gave trusted reads; else `(trusted reads, needed)`. The one rule behind
/// [`next_token`] and [`repair_value`].
fn trusted_max(reads: &[CounterRead], nodes: usize) -> Result<u64, (usize, usize)> {
    let needed = majority(nodes);
    let trusted = reads.iter().filter(|r| r.trusted).count();
    if trusted < needed {
        return Err((trusted, needed));
    }
    Ok((reads.iter().filter(|r| r.trusted))
        .filter_map(|r| r.value)
        .max()
        .unwrap_or(0))
}

/// Counter repair of a re-admitted node (marker current, incomplete): the value to write
/// to its counter of one resource, raise-only, from `reads` of that resource's counter on
/// the reachable nodes (trust as for [`next_token`]: [`counter_trusted`]). The same rule
/// as the token: the highest trusted counter, provided a majority of the `nodes` gave
/// trusted reads; `None` otherwise (skip: the node must then not be marked complete).
/// `Some(0)`: every trusted read is absent, nothing to write.
///
/// Why a repaired node may be marked complete: a token `t` committed on a majority `M`
/// reaches any trusted majority `T` through a node of `M ∩ T` that shows at least `t` (the
/// argument of [`next_token`]), so the value is at least every token committed so far; the
/// resources to repair come from a full scan of a majority of complete nodes, which meets
/// `M` in a node showing the counter (`docs/safety-v2.md`, "Counter repair").
pub fn repair_value(reads: &[CounterRead], nodes: usize) -> Option<u64> {
    trusted_max(reads, nodes).ok()
}

/// The nodes whose counters a repair of node `x` scans for resource names: every node
/// other than `x` whose marker is current and complete (`intact_complete[i]`). `None` when
/// they are fewer than a majority of the `nodes` (the repair then waits for a later
/// admission): only a majority of complete nodes is sure to meet every token's majority.
pub fn repair_sources(intact_complete: &[bool], x: usize, nodes: usize) -> Option<Vec<usize>> {
    let sources: Vec<usize> = (intact_complete.iter().enumerate())
        .filter(|&(i, &ok)| ok && i != x)
        .map(|(i, _)| i)
        .collect();
    (sources.len() >= majority(nodes)).then_some(sources)
}

/// Vote de-duplication: the first pair of configured nodes (by index) reporting the same
/// `run_id`, which are one server (any db number). `None` entries (unknown) are skipped.
pub fn duplicate_server(run_ids: &[Option<&str>]) -> Option<(usize, usize)> {
    run_ids.iter().enumerate().find_map(|(j, b)| {
        let b = (*b)?;
        run_ids[..j]
            .iter()
            .position(|a| *a == Some(b))
            .map(|i| (i, j))
    })
}

/// The guard's validity after a failed or cancelled extension: nodes may have applied the
/// new TTL (`ttl`, sent `elapsed` before now, with its drift allowance) or not, so the lock
/// is only sure until the earlier of the old deadline and the new TTL's validity. Both as
/// times remaining from now; `None`: nothing is sure any more.
pub fn after_failed_extension(
    old_remaining: Duration,
    ttl: Duration,
    elapsed: Duration,
    drift_factor: f64,
) -> Option<Duration> {
    let new = lease_validity(ttl, elapsed, drift_factor)?;
    Some(old_remaining.min(new)).filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn facts<'a>(marker: Option<Marker<'a>>, run_id: &'a str, up: u64) -> NodeFacts<'a> {
        NodeFacts {
            marker,
            run_id: Some(run_id),
            uptime: Some(Uptime::seconds(up)),
            persistence: Persistence::Volatile,
        }
    }

    /// Three nodes answered, two of them intact, the longest record `max_ttl_ms`.
    fn served(max_ttl_ms: u64) -> EnsembleView {
        EnsembleView {
            nodes: 3,
            answered: 3,
            intact: 2,
            marked: true,
            max_ttl: Some(MS(max_ttl_ms)),
        }
    }

    const FRESH: EnsembleView = EnsembleView {
        nodes: 3,
        answered: 3,
        intact: 0,
        marked: false,
        max_ttl: None,
    };

    #[test]
    fn rules_match_the_clients_quorum_arithmetic() {
        for n in 0..9 {
            assert_eq!(majority(n), crate::quorum::quorum(n));
        }
        for (ttl, elapsed, df) in [(10_000, 898, 0.01), (3, 0, 0.0), (2, 0, 0.0), (0, 0, 0.5)] {
            assert_eq!(
                lease_validity(MS(ttl), MS(elapsed), df),
                crate::quorum::validity(MS(ttl), MS(elapsed), df)
            );
            assert_eq!(
                drift_allowance(MS(ttl), df),
                crate::quorum::drift(MS(ttl), df)
            );
        }
        assert_eq!(lease_validity(Duration::MAX, Duration::MAX, 0.01), None);
        assert_eq!(drift_allowance(Duration::MAX, 2.0), Duration::MAX);
    }

    #[test]
    fn uptime_rounds_against_the_node() {
        assert_eq!(Uptime::seconds(0).min_age(), MS(0));
        assert_eq!(Uptime::seconds(1).min_age(), MS(0), "0.3 s old can say 1");
        assert_eq!(Uptime::seconds(2).min_age(), MS(1_000));
        assert_eq!(Uptime::seconds(61).min_age(), MS(60_000));
        assert_eq!(
            Uptime::seconds(u64::MAX).min_age(),
            MS(u64::from(u32::MAX) * 1_000)
        );
    }

    #[test]
    fn the_view_counts_intact_nodes_and_the_longest_record() {
        let cur = Some(Marker {
            life: "a",
            complete: true,
        });
        let old = Some(Marker {
            life: "old",
            complete: true,
        });
        let a = facts(cur, "a", 9);
        let b = facts(old, "b", 9);
        let c = facts(None, "c", 9);
        let view = EnsembleView::read(5, [(&a, Some(MS(5))), (&b, Some(MS(9))), (&c, None)]);
        assert_eq!(
            view,
            EnsembleView {
                nodes: 5,
                answered: 3,
                intact: 1,
                marked: true,
                max_ttl: Some(MS(9)),
            }
        );
        assert!(!view.is_fresh());
        let durable = NodeFacts {
            persistence: Persistence::AofAlways,
            ..b
        };
        assert!(durable.is_intact() && a.is_intact() && !b.is_intact() && !c.is_intact());
        assert!(EnsembleView::read(2, [(&c, None), (&c, None)]).is_fresh());
        assert!(!EnsembleView::read(3, [(&c, None), (&c, None)]).is_fresh());
    }

    #[test]
    fn admission_table() {
        let cur = Some(Marker {
            life: "r2",
            complete: true,
        });
        let cur_incomplete = Some(Marker {
            life: "r2",
            complete: false,
        });
        let old = Some(Marker {
            life: "r1",
            complete: true,
        });
        let votes = |complete, mark| Admission::Votes { complete, mark };
        let mark_only = Admission::MarkOnly { complete: false };
        let q = |ms, period, reason| Admission::Quarantined {
            remaining: MS(ms),
            period: MS(period),
            reason,
        };
        // 60 s lease on the ensemble, 1 % drift: period 60.602 s.
        let table = [
            (facts(cur, "r2", 0), served(60_000), votes(true, false)),
            (
                facts(cur_incomplete, "r2", 5),
                served(60_000),
                votes(false, false),
            ),
            (facts(None, "r2", 0), FRESH, votes(true, true)),
            (facts(None, "r2", 500), FRESH, votes(true, true)),
            (
                facts(None, "r2", 1),
                served(60_000),
                q(60_602, 60_602, Reason::MemoryLost),
            ),
            (
                facts(None, "r2", 2),
                served(60_000),
                q(59_602, 60_602, Reason::MemoryLost),
            ),
            (
                facts(None, "r2", 61),
                served(60_000),
                q(602, 60_602, Reason::MemoryLost),
            ),
            // Waited out: marked, votes from the next attempt.
            (facts(None, "r2", 62), served(60_000), mark_only),
            (
                facts(old, "r2", 10),
                served(60_000),
                q(51_602, 60_602, Reason::Restarted),
            ),
            (facts(old, "r2", 100), served(60_000), mark_only),
            // A short TTL of this client does not shorten it: the record is the ensemble's.
            (facts(None, "r2", 3), served(1_000), mark_only),
            (
                facts(None, "r2", 3),
                served(2_000),
                q(22, 2_022, Reason::MemoryLost),
            ),
        ];
        for (i, (node, view, want)) in table.into_iter().enumerate() {
            assert_eq!(admit(&node, &view, 0.01), want, "row {i}");
        }
    }

    #[test]
    fn missing_inputs_fall_to_the_safe_side() {
        let mut node = facts(None, "r2", 100);
        node.run_id = None;
        let no_id = Admission::Unknown {
            reason: Reason::NoIdentity,
        };
        assert_eq!(admit(&node, &FRESH, 0.01), no_id);
        let mut node = facts(None, "r2", 100);
        node.uptime = None;
        assert_eq!(admit(&node, &served(1), 0.01), no_id);
        // Two answers of three, no record: fresh, or the third holds the only record.
        let partial = EnsembleView {
            answered: 2,
            ..FRESH
        };
        assert_eq!(
            admit(&facts(None, "r2", 100), &partial, 0.01),
            Admission::Unknown {
                reason: Reason::FreshNeedsAll {
                    answered: 2,
                    nodes: 3
                }
            }
        );
        // A record, but from one intact node: the other may hold a longer one.
        let one_intact = EnsembleView {
            intact: 1,
            ..served(1_000)
        };
        assert_eq!(
            admit(&facts(None, "r2", 100), &one_intact, 0.01),
            Admission::Unknown {
                reason: Reason::RecordUnread {
                    intact: 1,
                    needed: 2
                }
            }
        );
        // Markers but no record: served, longest TTL unknown.
        let no_record = EnsembleView {
            max_ttl: None,
            ..served(1)
        };
        assert!(matches!(
            admit(&facts(None, "r2", 100), &no_record, 0.01),
            Admission::Unknown {
                reason: Reason::RecordUnread { .. }
            }
        ));
        // Unknown persistence is not durable.
        let old = Some(Marker {
            life: "r1",
            complete: true,
        });
        let mut node = facts(old, "r2", 1);
        node.persistence = Persistence::Unknown;
        assert!(matches!(
            admit(&node, &served(1_000), 0.0),
            Admission::Quarantined { .. }
        ));
        node.persistence = Persistence::AofAlways;
        assert_eq!(
            admit(&node, &served(1_000), 0.0),
            Admission::Votes {
                complete: true,
                mark: true
            }
        );
        // Never a panic at the extremes.
        let mut node = facts(None, "r2", u64::MAX);
        assert!(matches!(
            admit(&node, &served(u64::MAX), 0.5),
            Admission::Quarantined { .. }
        ));
        node.uptime = Some(Uptime::seconds(0));
        assert!(matches!(
            admit(&node, &served(0), 0.0),
            Admission::Quarantined { .. }
        ));
    }

    #[test]
    fn reasons_read_as_sentences() {
        let table = [
            (
                Reason::FreshNeedsAll {
                    answered: 2,
                    nodes: 3,
                },
                "new ensemble: every node must answer before the first lock (2 of 3 did)",
            ),
            (
                Reason::RecordUnread {
                    intact: 1,
                    needed: 2,
                },
                "ensemble record read from 1 intact nodes, 2 needed",
            ),
            (
                Reason::NoIdentity,
                "node's run_id or uptime is unknown (INFO refused?)",
            ),
        ];
        for (reason, text) in table {
            assert_eq!(reason.to_string(), text);
        }
    }

    #[test]
    fn trust_needs_current_life_and_completeness_or_a_rewrite() {
        let table = [
            (false, true, true, false),
            (true, true, false, true),
            (true, false, false, false),
            (true, false, true, true),
        ];
        for (cur, complete, this_life, want) in table {
            assert_eq!(counter_trusted(cur, complete, this_life), want);
        }
    }

    /// A trusted counter read.
    fn t(value: Option<u64>) -> CounterRead {
        CounterRead {
            value,
            trusted: true,
        }
    }

    /// An untrusted counter read.
    fn u(value: Option<u64>) -> CounterRead {
        CounterRead {
            value,
            trusted: false,
        }
    }

    #[test]
    fn token_needs_a_trusted_majority() {
        let undecidable = |trusted, needed| NextToken::Undecidable { trusted, needed };
        let table: [(&[CounterRead], usize, Option<u64>, NextToken); 9] = [
            (
                &[t(Some(5)), t(Some(3)), t(None)],
                3,
                None,
                NextToken::Mint(6),
            ),
            (&[t(None), t(None)], 3, None, NextToken::Mint(1)),
            // Issue 14's case: the restarted node's empty counter does not count.
            (&[u(None), t(Some(3))], 3, None, undecidable(1, 2)),
            (
                &[u(None), t(Some(3)), t(Some(5))],
                3,
                None,
                NextToken::Mint(6),
            ),
            // An untrusted value is not used even when higher (it cannot be, but stays out).
            (
                &[u(Some(9)), t(Some(3)), t(Some(5))],
                3,
                None,
                NextToken::Mint(6),
            ),
            (&[t(Some(5)), t(Some(3))], 5, None, undecidable(2, 3)),
            (&[t(None), t(None)], 3, Some(1_000), NextToken::Mint(1_001)),
            (
                &[t(Some(2_000)), t(None)],
                3,
                Some(1_000),
                NextToken::Mint(2_001),
            ),
            (&[t(Some(u64::MAX)), t(None)], 3, None, NextToken::Exhausted),
        ];
        for (i, (reads, n, floor, want)) in table.into_iter().enumerate() {
            assert_eq!(next_token(reads, n, floor), want, "row {i}");
        }
    }

    #[test]
    fn repair_uses_the_token_rule_without_the_increment() {
        let table: [(&[CounterRead], usize, Option<u64>); 8] = [
            (&[t(Some(5)), t(Some(3)), t(None)], 3, Some(5)),
            (&[t(None), t(None)], 3, Some(0)),
            // The node under repair reads untrusted: a majority of the others is needed.
            (&[u(None), t(Some(3))], 3, None),
            (&[u(Some(9)), t(Some(3)), t(Some(4))], 3, Some(4)),
            (&[t(Some(5)), t(Some(3))], 5, None),
            (&[t(Some(5)), t(Some(3)), t(None)], 5, Some(5)),
            (&[t(Some(u64::MAX)), t(None)], 3, Some(u64::MAX)),
            (&[t(Some(1))], 1, Some(1)),
        ];
        for (i, (reads, n, want)) in table.into_iter().enumerate() {
            assert_eq!(repair_value(reads, n), want, "row {i}");
            // Exactly where the token rule mints `value + 1`.
            let token = next_token(reads, n, None);
            match want {
                Some(v) if v < u64::MAX => assert_eq!(token, NextToken::Mint(v + 1)),
                Some(_) => assert_eq!(token, NextToken::Exhausted),
                None => assert!(matches!(token, NextToken::Undecidable { .. })),
            }
        }
    }

    #[test]
    fn repair_scans_a_majority_of_complete_nodes_other_than_the_node() {
        type Row = (&'static [bool], usize, Option<Vec<usize>>);
        let table: [Row; 6] = [
            (&[false, true, true], 0, Some(vec![1, 2])),
            // The node itself never counts, even if it reads complete.
            (&[true, true, false], 0, None),
            (&[false, true, false, true, true], 0, Some(vec![1, 3, 4])),
            (&[false, true, false, true, false], 0, None),
            (&[true, false, true, true, true], 1, Some(vec![0, 2, 3, 4])),
            (&[false], 0, None),
        ];
        for (i, (ok, x, want)) in table.into_iter().enumerate() {
            assert_eq!(repair_sources(ok, x, ok.len()), want, "row {i}");
        }
    }

    #[test]
    fn one_server_behind_two_urls_is_found() {
        assert_eq!(duplicate_server(&[Some("a"), Some("b"), Some("c")]), None);
        assert_eq!(
            duplicate_server(&[Some("a"), Some("b"), Some("a")]),
            Some((0, 2))
        );
        assert_eq!(
            duplicate_server(&[None, None, Some("b"), Some("b")]),
            Some((2, 3))
        );
        assert_eq!(duplicate_server(&[]), None);
    }

    #[test]
    fn failed_extension_keeps_the_lower_bound() {
        // Old deadline 9 s away; a 2 s extension sent 100 ms ago (no drift): 1.898 s.
        assert_eq!(
            after_failed_extension(MS(9_000), MS(2_000), MS(100), 0.0),
            Some(MS(1_898))
        );
        // A longer extension never lengthens what is sure.
        assert_eq!(
            after_failed_extension(MS(1_000), MS(30_000), MS(100), 0.0),
            Some(MS(1_000))
        );
        assert_eq!(
            after_failed_extension(MS(1_000), MS(100), MS(98), 0.0),
            None
        );
        assert_eq!(after_failed_extension(MS(0), MS(30_000), MS(0), 0.0), None);
        assert_eq!(
            after_failed_extension(Duration::MAX, Duration::MAX, Duration::MAX, 0.01),
            None
        );
    }
}
