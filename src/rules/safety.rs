//! The pure safety and liveness rules of restart quarantine, fencing tokens, vote
//! de-duplication and failed extensions. DESIGN.md (sections 6 and 7) is the argument;
//! this is the code.
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
//! - the node's **marker**: the `run_id` of the process in which a client admitted the
//!   node ([`Admission::Votes`] with `mark`, or [`Admission::MarkOnly`]). A marker naming
//!   the current `run_id` means the node's memory is intact since it was admitted.
//!
//! Entry points, in the order an attempt uses them: [`duplicate_server`] (at connect),
//! [`EnsembleView::read`] and [`admit`] (per node, per attempt), [`next_token`] (fencing),
//! [`lease_validity`] (the decision), [`after_failed_extension`].

use std::fmt;
use std::time::Duration;

/// The constant part of the drift allowance (Redis expires keys with millisecond
/// granularity).
pub const DRIFT_CONSTANT: Duration = Duration::from_millis(2);

/// Votes needed among `n` nodes: a strict majority, `n / 2 + 1`. The client's rounds count
/// by it too (`quorum`).
pub const fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// The drift allowance of a TTL: `ttl * drift_factor + 2 ms`, saturating (a factor the
/// arithmetic cannot use gives the largest allowance). The client's too.
pub fn drift_allowance(ttl: Duration, drift_factor: f64) -> Duration {
    let proportional =
        Duration::try_from_secs_f64(ttl.as_secs_f64() * drift_factor).unwrap_or(Duration::MAX);
    proportional.saturating_add(DRIFT_CONSTANT)
}

/// The crate's validity rule: `ttl - elapsed - drift_allowance(ttl)`, `None` when not
/// strictly positive. The client's decisions use it too (`quorum`).
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

/// What restart quarantine reads of a server process from its `INFO`: the life it is in,
/// the age it vouches for, and its durability ([`process_life`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessLife {
    /// The life: the `run_id`, or `<run_id>~<replication ID>` once promoted.
    pub life: Option<String>,
    /// The age the process vouches for: its uptime, or zero once promoted.
    pub uptime: Option<Uptime>,
    /// What survives a restart of it: none of it once promoted.
    pub persistence: Persistence,
}

/// The life of a server process whose `INFO` says `run_id`, `uptime` and `persistence`, as
/// restart quarantine reads it. A process promoted from a replica since it started
/// (`promoted`: behind a member's address that followed a failover) may lack writes its
/// old master acknowledged, as replication is asynchronous, and its uptime is a replica's,
/// which says nothing of how long it has been a master. So it is read as a restarted node
/// of unknown durability: a life of its own, named by the `run_id` and the replication ID
/// `replid` (which every promotion renews), of age zero when learnt (the client counts
/// from then, later than the promotion: the quarantine only grows), volatile (its own
/// persistence covers nothing it never received).
pub fn process_life(
    run_id: Option<&str>,
    uptime: Option<Uptime>,
    persistence: Persistence,
    promoted: bool,
    replid: Option<&str>,
) -> ProcessLife {
    if !promoted {
        return ProcessLife {
            life: run_id.map(str::to_owned),
            uptime,
            persistence,
        };
    }
    ProcessLife {
        life: run_id.map(|id| format!("{id}~{}", replid.unwrap_or(""))),
        uptime: uptime.map(|_| Uptime::seconds(0)),
        persistence: Persistence::Volatile,
    }
}

/// What one client knows of one node when deciding whether its "yes" counts: `INFO`
/// (`run_id`, `uptime_in_seconds`) read on the connection the acquire script ran on, the
/// marker the script returned, and the persistence settings read at connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeFacts<'a> {
    /// The life (`run_id`) the node's marker names; `None` when absent.
    pub marker: Option<&'a str>,
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
            (Some(life), Some(run_id)) => {
                life == run_id || self.persistence == Persistence::AofAlways
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
    /// No marker of any life while the ensemble has served locks: the node is new to the
    /// ensemble, or it lost its memory (a restart, a flush), and cannot tell which.
    MemoryLost,
    /// A marker of another process and no durable persistence: it restarted.
    Restarted,
    /// `INFO` gave no `run_id` or uptime (refused by an ACL, say).
    NoIdentity,
    /// Not every configured node answered, and none that did shows that the ensemble has
    /// served: a new ensemble cannot be told from one whose records were lost, so the node
    /// waits out the TTL ceiling.
    FreshNeedsAll {
        /// Nodes that answered.
        answered: usize,
        /// Configured nodes.
        nodes: usize,
    },
    /// The ensemble record was read from too few intact nodes to know the longest TTL a
    /// lost lease may have had, and not every node answered: the node waits out the TTL
    /// ceiling.
    RecordUnread {
        /// Intact nodes that answered.
        intact: usize,
        /// Intact nodes needed (a majority of the configured nodes).
        needed: usize,
    },
    /// The ensemble looks new, but the node has run for less than [`MIN_QUARANTINE`]: it
    /// may have restarted while another client's answers from its previous life still
    /// count in a round whose other requests are in flight (they land within a node
    /// timeout, at most [`MAX_NODE_TIMEOUT`]), so it waits until those have landed.
    JustStarted,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::MemoryLost => f.write_str(
                "node has no marker (new, restarted or flushed) and may have held lost locks",
            ),
            Reason::Restarted => f.write_str(
                "node restarted without durable persistence and may have held lost locks",
            ),
            Reason::NoIdentity => f.write_str("node's run_id or uptime is unknown (INFO refused?)"),
            Reason::FreshNeedsAll { answered, nodes } => write!(
                f,
                "new ensemble with nodes not answering ({answered} of {nodes} did): waits out the ttl ceiling"
            ),
            Reason::RecordUnread { intact, needed } => write!(
                f,
                "ensemble record read from {intact} intact nodes, {needed} needed: waits out the ttl ceiling"
            ),
            Reason::JustStarted => f.write_str(
                "node started moments ago: a new ensemble's nodes vote once they have run 1 s",
            ),
        }
    }
}

/// Whether a node's "yes" counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// It counts. When `mark`, write the marker naming the `run_id` the decision was made
    /// for.
    Votes {
        /// Whether the marker must be (re)written.
        mark: bool,
    },
    /// Admitted by its age (its quarantine waited out): write the marker naming the life
    /// the answer came from, but the yes does not count in this attempt. The answer may
    /// predate a restart (it was sent before the node lost its memory and arrived after),
    /// and its `run_id` and uptime are those of the old life; the marker settles it: the
    /// next attempt finds it current (intact: votes) or naming an old life (restarted:
    /// quarantined again).
    MarkOnly,
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

/// The shortest quarantine: a node that may have lost its memory never votes before it has
/// run this long, whatever the TTLs. It is the margin the fencing tokens' clock component
/// relies on (see [`next_token`]): every client's wall clock within half of it of true
/// time.
pub const MIN_QUARANTINE: Duration = Duration::from_secs(1);

/// The longest node timeout a client accepts: half of [`MIN_QUARANTINE`]. A round counts
/// only answers that arrive within one node timeout of its start, so two clients' rounds
/// together span less than the shortest quarantine; [`admit`] relies on it for a new
/// ensemble's nodes.
pub const MAX_NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// How long a node that lost its memory stays out: the longest TTL a lease depending on it
/// may have had plus its drift allowance, and at least [`MIN_QUARANTINE`]. Every lease that
/// may have depended on the lost memory has ended by then.
pub fn quarantine_period(max_ttl: Duration, drift_factor: f64) -> Duration {
    max_ttl
        .saturating_add(drift_allowance(max_ttl, drift_factor))
        .max(MIN_QUARANTINE)
}

/// The longest TTL a live lease may have, as far as one attempt's answers can tell: the
/// highest record read when those answers cover every live lease (every configured node
/// answered, or a majority of intact nodes did: under the minority-loss assumption some
/// node of any lease's majority kept its record and is among them), else `ceiling`, the
/// deployment's TTL ceiling. The ceiling bounds every lease (every client refuses a TTL
/// above it), so a record above it, left by a longer TTL used before the ceiling was
/// lowered, counts only up to the ceiling: lowering the ceiling once those leases are over
/// shortens every later quarantine.
pub fn longest_lease(ensemble: &EnsembleView, ceiling: Duration) -> Duration {
    let record = ensemble.max_ttl.unwrap_or_default();
    if ensemble.answered >= ensemble.nodes || ensemble.intact >= majority(ensemble.nodes) {
        record.min(ceiling)
    } else {
        ceiling
    }
}

/// Restart quarantine: decides whether `node`'s "yes" counts in this attempt, given what
/// the attempt read from every answering node (`ensemble`) and the deployment's TTL
/// `ceiling`.
///
/// In order: unknown identity → [`Admission::Unknown`]; intact (marker of this process,
/// or durable) → votes at once; a fresh ensemble ([`EnsembleView::is_fresh`]) → votes at
/// once if the node has run for [`MIN_QUARANTINE`], else waits until it has
/// ([`fresh_once_old`]); otherwise the node may have lost memory: it is kept out until its uptime (rounded
/// down by a whole unit) covers the [`quarantine_period`] of [`longest_lease`], then marked
/// ([`Admission::MarkOnly`]: it votes from the next attempt, see [`wait_out`]). So no
/// history keeps an answering node out for longer than the ceiling plus drift after its
/// start.
pub fn admit(
    node: &NodeFacts<'_>,
    ensemble: &EnsembleView,
    drift_factor: f64,
    ceiling: Duration,
) -> Admission {
    let (Some(run_id), Some(uptime)) = (node.run_id, node.uptime) else {
        return Admission::Unknown {
            reason: Reason::NoIdentity,
        };
    };
    if let Some(life) = node.marker
        && node.is_intact()
    {
        return Admission::Votes {
            mark: life != run_id,
        };
    }
    if ensemble.is_fresh() {
        return fresh_once_old(uptime.min_age());
    }
    wait_out(
        longest_lease(ensemble, ceiling),
        uptime.min_age(),
        kept_out_because(node, ensemble),
        drift_factor,
    )
}

/// A node of a fresh ensemble that is at least `age` old: it votes (and is marked) once it
/// has run for [`MIN_QUARANTINE`], else it is quarantined until then.
///
/// A fresh view can be read across a restart: client B counts a node's yes from its old
/// life, the node restarts empty, client A reads every node before B's other requests of
/// that round land, sees no record or marker anywhere, and would vote the restarted node
/// in at once; B's late answers then complete B's majority while A holds. B's requests
/// land within B's node timeout of its round's start, before the restart, and A read them
/// within A's node timeout: two node timeouts, at most [`MIN_QUARANTINE`]
/// ([`MAX_NODE_TIMEOUT`]). A node that has run that long was read by A after B's requests
/// landed, so A's view is not fresh.
pub fn fresh_once_old(age: Duration) -> Admission {
    match MIN_QUARANTINE.checked_sub(age).filter(|r| !r.is_zero()) {
        Some(remaining) => Admission::Quarantined {
            remaining,
            period: MIN_QUARANTINE,
            reason: Reason::JustStarted,
        },
        None => Admission::Votes { mark: true },
    }
}

/// How long a client that knows no node admitted waits before it sends its keys, given the
/// age of every node it reached: until each has run for [`MIN_QUARANTINE`]. Keys sent
/// earlier could not count on a new ensemble ([`fresh_once_old`]) and their records would
/// make it look served, so its nodes would wait out those records instead.
pub fn first_contact_wait(ages: impl IntoIterator<Item = Duration>) -> Duration {
    (ages.into_iter())
        .map(|age| MIN_QUARANTINE.saturating_sub(age))
        .max()
        .unwrap_or_default()
}

/// Why a node that is neither intact nor fresh is kept out.
fn kept_out_because(node: &NodeFacts<'_>, ensemble: &EnsembleView) -> Reason {
    let needed = majority(ensemble.nodes);
    let served = ensemble.max_ttl.is_some() || ensemble.marked;
    if node.marker.is_some() {
        Reason::Restarted
    } else if ensemble.answered >= ensemble.nodes || ensemble.intact >= needed {
        Reason::MemoryLost
    } else if !served {
        Reason::FreshNeedsAll {
            answered: ensemble.answered,
            nodes: ensemble.nodes,
        }
    } else {
        Reason::RecordUnread {
            intact: ensemble.intact,
            needed,
        }
    }
}

/// A node that may have lost memory (`reason`) and is at least `age` old: quarantined until
/// `age` reaches the quarantine period of `max_ttl`, then marked ([`Admission::MarkOnly`]):
/// an admission by age never votes in the attempt that decides it, since `age` (and the
/// life the marker names) may be those of a process that restarted after it answered.
pub fn wait_out(max_ttl: Duration, age: Duration, reason: Reason, drift_factor: f64) -> Admission {
    let period = quarantine_period(max_ttl, drift_factor);
    match period.checked_sub(age) {
        Some(remaining) if !remaining.is_zero() => Admission::Quarantined {
            remaining,
            period,
            reason,
        },
        _ => Admission::MarkOnly,
    }
}

/// The fencing token decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextToken {
    /// Mint and commit this token.
    Mint(u64),
    /// A counter or the floor is at `u64::MAX`: no larger token exists.
    Exhausted,
}

/// The next fencing token: above every counter read (`counters`: one per answering node,
/// `None` when absent), above `floor`, and at least `clock_us`, the minting client's wall
/// clock in microseconds since the Unix epoch.
///
/// A hybrid logical clock. The counters carry the order while the nodes remember: a token
/// committed on a majority is read back by any later majority through a node that kept it.
/// The clock carries it across memory the nodes lost: a later holder misses a committed
/// token only through a node that lost it and was readmitted since, which takes at least
/// [`MIN_QUARANTINE`] after the loss (a restart, or the last of a majority's restarts),
/// and every token is at most its minting time plus the minting client's clock offset
/// (by induction: a counter + 1 is minted at least a microsecond after the counter). So
/// with every client's wall clock within half of [`MIN_QUARANTINE`] of true time, the
/// later token is larger: tokens never repeat and never go back, whatever the nodes
/// forgot, and no counter needs to be trusted or repaired.
pub fn next_token(
    counters: impl IntoIterator<Item = Option<u64>>,
    floor: Option<u64>,
    clock_us: u64,
) -> NextToken {
    let highest = (counters.into_iter().flatten())
        .chain(floor)
        .chain(clock_us.checked_sub(1))
        .max()
        .unwrap_or(0);
    highest
        .checked_add(1)
        .map_or(NextToken::Exhausted, NextToken::Mint)
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
    const CEILING: Duration = Duration::from_secs(60);

    fn facts<'a>(marker: Option<&'a str>, run_id: &'a str, up: u64) -> NodeFacts<'a> {
        NodeFacts {
            marker,
            run_id: Some(run_id),
            uptime: Some(Uptime::seconds(up)),
            persistence: Persistence::Volatile,
        }
    }

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
    #[test]
    fn the_view_counts_intact_nodes_and_the_longest_record() {
        let a = facts(Some("a"), "a", 9);
        let b = facts(Some("old"), "b", 9);
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
    fn first_contact_waits_for_the_youngest_node_to_run_a_second() {
        assert_eq!(first_contact_wait([]), Duration::ZERO);
        assert_eq!(first_contact_wait([MS(2_000), MS(5_000)]), Duration::ZERO);
        assert_eq!(first_contact_wait([MS(2_000), MS(300), MS(900)]), MS(700));
        assert_eq!(first_contact_wait([Duration::ZERO]), MIN_QUARANTINE);
    }

    #[test]
    fn admission_table() {
        let votes = |mark| Admission::Votes { mark };
        let q = |ms, period, reason| Admission::Quarantined {
            remaining: MS(ms),
            period: MS(period),
            reason,
        };
        let table = [
            (facts(Some("r2"), "r2", 0), served(60_000), votes(false)),
            // A new ensemble's node votes once it has run for a second (uptime 2: more
            // than one second, rounding down).
            (
                facts(None, "r2", 0),
                FRESH,
                q(1_000, 1_000, Reason::JustStarted),
            ),
            (facts(None, "r2", 2), FRESH, votes(true)),
            (facts(None, "r2", 500), FRESH, votes(true)),
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
            (facts(None, "r2", 62), served(60_000), Admission::MarkOnly),
            (
                facts(Some("r1"), "r2", 10),
                served(60_000),
                q(51_602, 60_602, Reason::Restarted),
            ),
            (
                facts(Some("r1"), "r2", 100),
                served(60_000),
                Admission::MarkOnly,
            ),
            (facts(None, "r2", 3), served(1_000), Admission::MarkOnly),
            (
                facts(None, "r2", 3),
                served(2_000),
                q(22, 2_022, Reason::MemoryLost),
            ),
            // Never less than the shortest quarantine, however short the record.
            (
                facts(None, "r2", 1),
                served(10),
                q(1_000, 1_000, Reason::MemoryLost),
            ),
            (facts(None, "r2", 2), served(10), Admission::MarkOnly),
        ];
        for (i, (node, view, want)) in table.into_iter().enumerate() {
            assert_eq!(admit(&node, &view, 0.01, CEILING), want, "row {i}");
        }
    }

    #[test]
    fn an_unreadable_history_waits_out_the_ceiling_and_never_longer() {
        let ceiling = MS(2_000);
        // A new ensemble with a node down: no record, no marker, 2 of 3 answered.
        let partial = EnsembleView {
            answered: 2,
            ..FRESH
        };
        let why = Reason::FreshNeedsAll {
            answered: 2,
            nodes: 3,
        };
        assert_eq!(
            admit(&facts(None, "r2", 1), &partial, 0.01, ceiling),
            Admission::Quarantined {
                remaining: MS(2_022),
                period: MS(2_022),
                reason: why,
            }
        );
        assert_eq!(
            admit(&facts(None, "r2", 4), &partial, 0.01, ceiling),
            Admission::MarkOnly
        );
        // Records but too few intact nodes heard: the ceiling, or the record if higher.
        let one_intact = EnsembleView {
            answered: 2,
            intact: 1,
            ..served(1_000)
        };
        let why = Reason::RecordUnread {
            intact: 1,
            needed: 2,
        };
        assert_eq!(
            admit(&facts(None, "r2", 1), &one_intact, 0.01, ceiling),
            Admission::Quarantined {
                remaining: MS(2_022),
                period: MS(2_022),
                reason: why,
            }
        );
        // A record above the ceiling (a longer TTL used before the ceiling was lowered)
        // counts up to the ceiling.
        let long_record = EnsembleView {
            max_ttl: Some(MS(5_000)),
            ..one_intact
        };
        assert_eq!(longest_lease(&long_record, ceiling), ceiling);
        let long_but_read = EnsembleView {
            max_ttl: Some(MS(5_000)),
            ..served(1_000)
        };
        assert_eq!(longest_lease(&long_but_read, ceiling), ceiling);
        // Every node heard: the records cover every live lease, intact or not.
        let all_heard = EnsembleView {
            intact: 0,
            marked: false,
            ..served(1_000)
        };
        assert_eq!(longest_lease(&all_heard, ceiling), MS(1_000));
        assert_eq!(
            admit(&facts(None, "r2", 3), &all_heard, 0.01, ceiling),
            Admission::MarkOnly
        );
        // An intact majority heard, no record anywhere: nothing to wait for but the minimum.
        let idle = EnsembleView {
            nodes: 5,
            answered: 3,
            intact: 3,
            marked: true,
            max_ttl: None,
        };
        assert_eq!(longest_lease(&idle, ceiling), Duration::ZERO);
        assert_eq!(
            admit(&facts(None, "r2", 2), &idle, 0.01, ceiling),
            Admission::MarkOnly
        );
    }

    #[test]
    fn missing_inputs_fall_to_the_safe_side() {
        let mut node = facts(None, "r2", 100);
        node.run_id = None;
        let no_id = Admission::Unknown {
            reason: Reason::NoIdentity,
        };
        assert_eq!(admit(&node, &FRESH, 0.01, CEILING), no_id);
        let mut node = facts(None, "r2", 100);
        node.uptime = None;
        assert_eq!(admit(&node, &served(1), 0.01, CEILING), no_id);
        let mut node = facts(Some("r1"), "r2", 1);
        node.persistence = Persistence::Unknown;
        assert!(matches!(
            admit(&node, &served(1_000), 0.0, CEILING),
            Admission::Quarantined { .. }
        ));
        node.persistence = Persistence::AofAlways;
        assert_eq!(
            admit(&node, &served(1_000), 0.0, CEILING),
            Admission::Votes { mark: true }
        );
        // Never a panic at the extremes.
        let mut node = facts(None, "r2", u64::MAX);
        assert!(matches!(
            admit(&node, &served(u64::MAX), 0.5, Duration::MAX),
            Admission::Quarantined { .. }
        ));
        node.uptime = Some(Uptime::seconds(0));
        assert!(matches!(
            admit(&node, &served(0), 0.0, Duration::ZERO),
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
                "new ensemble with nodes not answering (2 of 3 did): waits out the ttl ceiling",
            ),
            (
                Reason::RecordUnread {
                    intact: 1,
                    needed: 2,
                },
                "ensemble record read from 1 intact nodes, 2 needed: waits out the ttl ceiling",
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
    fn tokens_follow_the_counters_the_floor_and_the_clock() {
        let now = 1_800_000_000_000_000;
        type Row = (Vec<Option<u64>>, Option<u64>, u64, NextToken);
        let table: [Row; 7] = [
            // The clock, when the counters are behind it (a new ensemble, lost memory).
            (vec![None, None], None, now, NextToken::Mint(now)),
            (
                vec![Some(5), Some(3), None],
                None,
                now,
                NextToken::Mint(now),
            ),
            // The counters, when ahead of the clock (a client whose clock is behind).
            (
                vec![Some(now + 9), None],
                None,
                now,
                NextToken::Mint(now + 10),
            ),
            (vec![Some(5), Some(3), None], None, 0, NextToken::Mint(6)),
            (vec![], None, 0, NextToken::Mint(1)),
            (vec![None], Some(now + 100), now, NextToken::Mint(now + 101)),
            (vec![Some(u64::MAX), None], None, now, NextToken::Exhausted),
        ];
        for (i, (counters, floor, clock, want)) in table.into_iter().enumerate() {
            assert_eq!(next_token(counters, floor, clock), want, "row {i}");
        }
    }

    #[test]
    fn a_promoted_process_is_a_new_life_of_age_zero_and_volatile() {
        let (uptime, always) = (Some(Uptime::seconds(3600)), Persistence::AofAlways);
        let plain = process_life(Some("r1"), uptime, always, false, Some("a1"));
        assert_eq!(
            plain,
            ProcessLife {
                life: Some("r1".into()),
                uptime,
                persistence: always,
            }
        );
        let promoted = process_life(Some("r1"), uptime, always, true, Some("b2"));
        assert_eq!(
            promoted,
            ProcessLife {
                life: Some("r1~b2".into()),
                uptime: Some(Uptime::seconds(0)),
                persistence: Persistence::Volatile,
            }
        );
        // Promoted again later: the replication ID is renewed, and so is the life.
        let again = process_life(Some("r1"), uptime, always, true, Some("c3"));
        assert_ne!(again.life, promoted.life);
        // A marker's older `<run_id>:<0|1>` form is split at ':', which a life never has.
        assert!(!promoted.life.unwrap().contains(':'));
        // Nothing known stays unknown.
        let unknown = process_life(None, None, Persistence::Unknown, true, None);
        assert_eq!((unknown.life, unknown.uptime), (None, None));
    }
}
