//! The pure safety rules of restart quarantine (v2), fencing tokens, vote de-duplication and
//! failed extensions (issue 14).
//!
//! Nothing here reads a clock, talks to Redis or awaits: every input the rules need comes in
//! as an argument, so the client can feed them from Lua replies and `INFO`, and the model
//! checker in `tests/model.rs` calls the very same functions. The module is public only so
//! that test can see it (`#[doc(hidden)]`); it is not part of the crate's API.
//!
//! Node-side data the rules read (written by the client, never by the user):
//! - the **ensemble record** `max_ttl` on every node: the longest TTL any client may count
//!   votes for, raised atomically with (or before) the acquisition that uses it, so a
//!   majority holds it before a vote for that TTL counts;
//! - the node's **marker** `life=<run_id> complete=0|1`, written on the node when a client
//!   admits it. Missing while the ensemble has a record: the node lost its memory;
//! - each fencing counter's **life**: the marker's life when the counter was last written.

use std::time::Duration;

use crate::quorum;

/// Votes needed among `n` nodes (the crate's quorum rule).
pub fn majority(n: usize) -> usize {
    quorum::quorum(n)
}

/// The crate's validity rule: `ttl - elapsed - (ttl * drift_factor + 2 ms)`, `None` when not
/// strictly positive.
pub fn lease_validity(ttl: Duration, elapsed: Duration, drift_factor: f64) -> Option<Duration> {
    quorum::validity(ttl, elapsed, drift_factor)
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
    /// Whether the node has held everything the ensemble wrote to it since it first served
    /// (`false` after it was admitted following a loss: its absent counters are unknown).
    pub complete: bool,
}

/// `INFO server`'s `uptime_in_seconds`: a count of whole `unit`s computed from two
/// whole-unit wall-clock readings, so the true age is more than `whole - 1` units and may
/// be almost a unit less than `whole` units.
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

/// What one client knows of one node when deciding whether its "yes" counts.
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

/// The ensemble record as read from the nodes that answered (this one included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnsembleView {
    /// Configured nodes.
    pub nodes: usize,
    /// Nodes whose record was read (present or absent).
    pub answered: usize,
    /// The highest `max_ttl` read, as it was before this client raised it; `None` when no
    /// answering node had a record.
    pub max_ttl: Option<Duration>,
}

/// Why a node is kept out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Marker missing while the ensemble has served: the node lost its memory.
    MemoryLost,
    /// Marker of another process and no durable persistence: it restarted.
    Restarted,
    /// `INFO` gave no `run_id` or uptime.
    NoIdentity,
    /// The record was read from fewer than a majority, so "fresh" cannot be told apart
    /// from "lost".
    RecordUnread,
}

/// Whether a node's "yes" counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// It counts. `mark`: write the marker `life=<run_id> complete=<complete>` on the node.
    Votes {
        /// The completeness the marker must say.
        complete: bool,
        /// Whether the marker must be (re)written.
        mark: bool,
    },
    /// Not yet: `remaining` after the moment the `INFO` reply arrived.
    Quarantined {
        /// Time still to wait, measured from the `INFO` reply.
        remaining: Duration,
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
/// granted plus its drift allowance (every lease from before has ended by then).
pub fn quarantine_period(max_ttl: Duration, drift_factor: f64) -> Duration {
    max_ttl.saturating_add(quorum::drift(max_ttl, drift_factor))
}

/// Restart quarantine v2: decides whether `node`'s "yes" counts, given the ensemble record.
pub fn admit(node: &NodeFacts<'_>, ensemble: &EnsembleView, drift_factor: f64) -> Admission {
    let (Some(run_id), Some(uptime)) = (node.run_id, node.uptime) else {
        return Admission::Unknown {
            reason: Reason::NoIdentity,
        };
    };
    let lost = match node.marker {
        // Same process as when admitted: it never lost anything since.
        Some(m) if m.life == run_id => {
            return Admission::Votes {
                complete: m.complete,
                mark: false,
            };
        }
        // Restarted, but every acknowledged write survived.
        Some(m) if node.persistence == Persistence::AofAlways => {
            return Admission::Votes {
                complete: m.complete,
                mark: true,
            };
        }
        Some(_) => Reason::Restarted,
        None => Reason::MemoryLost,
    };
    match ensemble.max_ttl {
        Some(max_ttl) => {
            let period = quarantine_period(max_ttl, drift_factor);
            let age = uptime.min_age();
            if age >= period {
                // Every lease this node may have held before has ended; its counters
                // stay untrusted until rewritten (complete = false).
                Admission::Votes {
                    complete: false,
                    mark: true,
                }
            } else {
                Admission::Quarantined {
                    remaining: period - age,
                    reason: lost,
                }
            }
        }
        // No record on a majority: the ensemble never served a lock; nothing was lost.
        None if ensemble.answered >= majority(ensemble.nodes) => Admission::Votes {
            complete: true,
            mark: true,
        },
        None => Admission::Unknown {
            reason: Reason::RecordUnread,
        },
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
/// its current life (`marker_current`) and either never lost memory (`complete`) or the
/// counter was written in this life (`written_this_life`).
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
}

/// The next fencing token: one above the highest trusted counter, provided a majority of
/// the `nodes` gave trusted reads, and above `floor` (a user's floor after a majority lost
/// its memory).
pub fn next_token(reads: &[CounterRead], nodes: usize, floor: Option<u64>) -> NextToken {
    let needed = majority(nodes);
    let trusted = reads.iter().filter(|r| r.trusted).count();
    if trusted < needed {
        return NextToken::Undecidable { trusted, needed };
    }
    let highest = reads
        .iter()
        .filter(|r| r.trusted)
        .filter_map(|r| r.value)
        .chain(floor)
        .max()
        .unwrap_or(0);
    NextToken::Mint(highest.saturating_add(1))
}

/// Vote de-duplication: the first pair of configured nodes (by index) reporting the same
/// `run_id`, which are one server. `None` entries (unknown) are skipped.
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

    fn served(max_ttl_ms: u64) -> EnsembleView {
        EnsembleView {
            nodes: 3,
            answered: 3,
            max_ttl: Some(MS(max_ttl_ms)),
        }
    }

    const FRESH: EnsembleView = EnsembleView {
        nodes: 3,
        answered: 2,
        max_ttl: None,
    };

    #[test]
    fn uptime_rounds_against_the_node() {
        assert_eq!(Uptime::seconds(0).min_age(), MS(0));
        assert_eq!(Uptime::seconds(1).min_age(), MS(0), "0.3 s old can say 1");
        assert_eq!(Uptime::seconds(2).min_age(), MS(1_000));
        assert_eq!(Uptime::seconds(61).min_age(), MS(60_000));
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
        let q = |ms, reason| Admission::Quarantined {
            remaining: MS(ms),
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
                q(60_602, Reason::MemoryLost),
            ),
            (
                facts(None, "r2", 2),
                served(60_000),
                q(59_602, Reason::MemoryLost),
            ),
            (
                facts(None, "r2", 61),
                served(60_000),
                q(602, Reason::MemoryLost),
            ),
            (facts(None, "r2", 62), served(60_000), votes(false, true)),
            (
                facts(old, "r2", 10),
                served(60_000),
                q(51_602, Reason::Restarted),
            ),
            (facts(old, "r2", 100), served(60_000), votes(false, true)),
            // A short TTL of this client does not shorten it: the record is the ensemble's.
            (facts(None, "r2", 3), served(1_000), votes(false, true)),
            (
                facts(None, "r2", 3),
                served(2_000),
                q(22, Reason::MemoryLost),
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
        // One answer of three cannot tell a fresh ensemble from a lost record.
        let minority = EnsembleView {
            nodes: 3,
            answered: 1,
            max_ttl: None,
        };
        let unread = Admission::Unknown {
            reason: Reason::RecordUnread,
        };
        assert_eq!(admit(&facts(None, "r2", 100), &minority, 0.01), unread);
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

    #[test]
    fn token_needs_a_trusted_majority() {
        let t = |value| CounterRead {
            value,
            trusted: true,
        };
        let u = |value| CounterRead {
            value,
            trusted: false,
        };
        let undecidable = |trusted, needed| NextToken::Undecidable { trusted, needed };
        let table: [(&[CounterRead], usize, Option<u64>, NextToken); 8] = [
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
        ];
        for (i, (reads, n, floor, want)) in table.into_iter().enumerate() {
            assert_eq!(next_token(reads, n, floor), want, "row {i}");
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
    }
}
