//! Per-node outcomes of one fan-out (acquire, extend or release), kept as values so callers
//! and errors can say exactly which node did what.

use std::fmt;
use std::time::Duration;

/// What one node did with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeOutcome {
    /// The node stored our token (acquire).
    Acquired,
    /// The key exists with another owner's token (acquire).
    HeldByOther,
    /// The key holds a value of another type (a list, a hash, ...): a foreign lock or foreign
    /// data. Counted as held by someone else; never overwritten.
    WrongType,
    /// A semaphore's permit was refused: the node records that this semaphore's holders
    /// use another permit count (`None`: a record that is not a count). Every client of a
    /// semaphore must use the same count.
    CountMismatch {
        /// The count the node records.
        recorded: Option<u32>,
    },
    /// A semaphore's permit was refused: a lock of another kind (a mutex or a read-write
    /// lock) holds the semaphore's name on the node. One name is one lock.
    NameInUse,
    /// Our token was found and its expiry reset (extend).
    Extended,
    /// Our token was found and deleted (release).
    Released,
    /// The node stored our token but restart quarantine keeps its vote out: it may have
    /// lost locks that are still in force, or what is needed to tell is unknown.
    Quarantined {
        /// Why.
        reason: QuarantineReason,
        /// How long until it votes again, measured when this outcome was decided; `None`
        /// when that depends on something unknown (see the reason).
        remaining: Option<Duration>,
    },
    /// The key is absent or holds another token: we do not hold it here (extend, release).
    NotHeld,
    /// No answer within the per-node timeout. The request may still have been applied.
    TimedOut,
    /// Connecting or the request failed; the message is the driver's.
    Failed(String),
    /// The server's ACL refused the command, a key or a channel (`NOPERM`): the user this
    /// client connects as lacks a permission (see "Least privilege" in the README). A
    /// configuration error, never a vote; the message is the server's.
    PermissionDenied(String),
    /// The node answered `PING` (connectivity check).
    Reachable,
    /// Still in flight when the outcome was already certain; not waited for.
    Pending,
}

/// Why restart quarantine keeps a node's vote out (see
/// [`RedlockBuilder::restart_quarantine`](crate::RedlockBuilder::restart_quarantine)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuarantineReason {
    /// The node has no marker (it is new to a served ensemble, or it lost its memory: a
    /// restart, a flush) while locks granted before may still be in force: it votes again
    /// once the longest TTL a live lock may have (plus drift, and at least a second) has
    /// passed since it started.
    MemoryLost,
    /// The node runs a new process (another `run_id` than the one it was admitted in)
    /// without `appendfsync always`, so it may have lost writes: as for `MemoryLost`.
    Restarted,
    /// The node's `run_id` or uptime is unknown (`INFO` refused, say an ACL user without
    /// `+info`): it does not vote until they are known.
    NoIdentity,
    /// The ensemble's longest TTL was read from too few nodes whose memory is known intact
    /// (a majority is needed), and not every node answered: the node stays out for the
    /// TTL ceiling plus drift from its start
    /// ([`RedlockBuilder::ttl_ceiling`](crate::RedlockBuilder::ttl_ceiling)).
    RecordUnread,
    /// A new ensemble with nodes not answering: it cannot be told from one whose records
    /// were lost, so the node stays out for the TTL ceiling plus drift from its start.
    FreshNeedsAll,
    /// A new ensemble's node that has run for less than a second: it votes once it has
    /// (a node that restarted moments ago cannot yet be told from a new one).
    JustStarted,
    /// The node's quarantine is over (or a new ensemble's records are waited out), judged
    /// from an answer whose `run_id` and uptime may be those of a process that restarted
    /// after it answered: its marker is written now, naming that process, and it votes
    /// from the next attempt, once an answer shows the marker current.
    Readmitting,
}

impl QuarantineReason {
    /// A short machine-readable name: `memory_lost`, `restarted`, `no_identity`,
    /// `record_unread`, `fresh_needs_all`, `just_started` or `readmitting` (the metric's
    /// `reason` label).
    pub fn as_str(&self) -> &'static str {
        match self {
            QuarantineReason::MemoryLost => "memory_lost",
            QuarantineReason::Restarted => "restarted",
            QuarantineReason::NoIdentity => "no_identity",
            QuarantineReason::RecordUnread => "record_unread",
            QuarantineReason::FreshNeedsAll => "fresh_needs_all",
            QuarantineReason::JustStarted => "just_started",
            QuarantineReason::Readmitting => "readmitting",
        }
    }
}

impl fmt::Display for QuarantineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuarantineReason::MemoryLost => {
                "no marker of its current process (new, restarted or flushed) while locks may \
                 depend on it"
            }
            QuarantineReason::Restarted => "restarted without appendfsync always",
            QuarantineReason::NoIdentity => "run_id or uptime unknown (info refused?)",
            QuarantineReason::RecordUnread => {
                "the longest ttl was read from too few intact nodes: waits out the ttl ceiling \
                 (a new deployment's nodes vote at once once declared new: quorum-lock init)"
            }
            QuarantineReason::FreshNeedsAll => {
                "new ensemble with nodes not answering: waits out the ttl ceiling (declare \
                 a new deployment's nodes new once and they vote at once: quorum-lock init)"
            }
            QuarantineReason::JustStarted => "new ensemble, node started under 1 s ago",
            QuarantineReason::Readmitting => {
                "quarantine over: votes from the attempt after the one that marks it"
            }
        })
    }
}

impl NodeOutcome {
    /// Whether this is a counted yes vote: the predicate the acquire rounds count by.
    pub(crate) fn is_acquired(&self) -> bool {
        *self == NodeOutcome::Acquired
    }

    /// True when the node could not give an answer (timeout or error), as opposed to a
    /// definite answer from a working node.
    pub fn is_failure(&self) -> bool {
        matches!(
            self,
            NodeOutcome::TimedOut | NodeOutcome::Failed(_) | NodeOutcome::PermissionDenied(_)
        )
    }

    /// True when restart quarantine kept the node's vote out.
    pub fn is_quarantined(&self) -> bool {
        matches!(self, NodeOutcome::Quarantined { .. })
    }
}

impl fmt::Display for NodeOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Not "acquired": the node set our key, but whether the lock was acquired is the
            // majority's decision, and a refused attempt takes the key back.
            NodeOutcome::Acquired => f.write_str("voted yes"),
            NodeOutcome::HeldByOther => f.write_str("held by another owner"),
            NodeOutcome::WrongType => f.write_str("wrong type (foreign key)"),
            NodeOutcome::CountMismatch { recorded: Some(n) } => {
                write!(f, "semaphore in use with {n} permits")
            }
            NodeOutcome::CountMismatch { recorded: None } => {
                f.write_str("semaphore in use with another permit count")
            }
            NodeOutcome::NameInUse => f.write_str("the name is held as a lock, not a semaphore"),
            NodeOutcome::Extended => f.write_str("extended"),
            NodeOutcome::Released => f.write_str("released"),
            NodeOutcome::NotHeld => f.write_str("not held"),
            NodeOutcome::Quarantined { reason, remaining } => {
                write!(f, "kept out by restart quarantine: {reason}")?;
                match remaining {
                    Some(d) => write!(f, ", votes again in {:.1} s", d.as_secs_f64()),
                    None => Ok(()),
                }
            }
            NodeOutcome::TimedOut => f.write_str("timed out"),
            NodeOutcome::Failed(msg) => write!(f, "error: {msg}"),
            NodeOutcome::PermissionDenied(msg) => write!(f, "permission denied: {msg}"),
            NodeOutcome::Reachable => f.write_str("reachable"),
            NodeOutcome::Pending => f.write_str("no answer yet (not waited for)"),
        }
    }
}

/// One node's part in a fan-out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeResult {
    /// The node's address as `host:port` (credentials are never shown).
    pub node: String,
    /// The server's kind and version as learnt at connect, e.g. `"valkey 9.1.2"` or
    /// `"redis 7.0.15"`; `None` before a connection or when `INFO` was refused.
    pub server: Option<String>,
    /// What it did.
    pub outcome: NodeOutcome,
    /// Time from sending to the answer (or to giving up on it).
    pub latency: Duration,
}

/// The outcome of one fan-out on every node, in the order the nodes were configured.
///
/// It is the [`source`](std::error::Error::source) of the errors that involve nodes, so a
/// caller can log exactly which node failed and how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeReport {
    results: Vec<NodeResult>,
}

impl NodeReport {
    pub(crate) fn new(results: Vec<NodeResult>) -> Self {
        NodeReport { results }
    }

    /// Per-node results, in configuration order.
    pub fn results(&self) -> &[NodeResult] {
        &self.results
    }

    /// How many nodes ended with `outcome`.
    pub fn count(&self, outcome: &NodeOutcome) -> usize {
        self.results
            .iter()
            .filter(|r| &r.outcome == outcome)
            .count()
    }

    /// How many nodes refused a command for lack of permission.
    pub fn denials(&self) -> usize {
        self.results
            .iter()
            .filter(|r| matches!(r.outcome, NodeOutcome::PermissionDenied(_)))
            .count()
    }

    /// What the nodes did, counted: `2 voted yes, 1 timed out`, in the order the outcomes
    /// first appear; `no node answered` for an empty report.
    pub fn summary(&self) -> String {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for r in &self.results {
            let what = r.outcome.to_string();
            match counts.iter_mut().find(|(w, _)| *w == what) {
                Some((_, n)) => *n += 1,
                None => counts.push((what, 1)),
            }
        }
        if counts.is_empty() {
            return "no node answered".into();
        }
        let parts: Vec<String> = counts.iter().map(|(w, n)| format!("{n} {w}")).collect();
        parts.join(", ")
    }

    /// How many nodes restart quarantine kept out.
    pub fn quarantined(&self) -> usize {
        self.results
            .iter()
            .filter(|r| r.outcome.is_quarantined())
            .count()
    }

    /// How many nodes failed to answer (timeouts, errors and permission refusals).
    pub fn failures(&self) -> usize {
        self.results
            .iter()
            .filter(|r| r.outcome.is_failure())
            .count()
    }
}

impl fmt::Display for NodeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Semicolons: a driver's error message may contain commas.
        for (i, r) in self.results.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            f.write_str(&r.node)?;
            if let Some(server) = &r.server {
                write!(f, " [{server}]")?;
            }
            write!(f, " {}", r.outcome)?;
            // A pending node's time is only how long it had not answered.
            if r.outcome != NodeOutcome::Pending {
                write!(f, " ({})", latency(r.latency))?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for NodeReport {}

/// A duration for people: `340 µs`, `1.2 ms`, `48 ms`, `1.25 s`.
pub(crate) fn latency(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1000 {
        format!("{us} µs")
    } else if us < 10_000 {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else if us < 1_000_000 {
        format!("{} ms", (us + 500) / 1000)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(outcome: NodeOutcome, micros: u64) -> NodeResult {
        NodeResult {
            node: "10.0.0.1:6379".into(),
            server: None,
            outcome,
            latency: Duration::from_micros(micros),
        }
    }

    #[test]
    fn reports_read_as_sentences_with_rounded_times() {
        let report = NodeReport::new(vec![
            result(NodeOutcome::Acquired, 340),
            result(NodeOutcome::HeldByOther, 1234),
            result(NodeOutcome::TimedOut, 50_000),
            result(NodeOutcome::Pending, 400),
            result(NodeOutcome::Released, 1_250_000),
        ]);
        assert_eq!(
            report.to_string(),
            "10.0.0.1:6379 voted yes (340 µs); 10.0.0.1:6379 held by another owner (1.2 ms); \
             10.0.0.1:6379 timed out (50 ms); 10.0.0.1:6379 no answer yet (not waited for); \
             10.0.0.1:6379 released (1.25 s)"
        );
        assert_eq!(latency(Duration::from_micros(9_960)), "10.0 ms");
        assert_eq!(latency(Duration::MAX), "18446744073709551616.00 s");
    }

    #[test]
    fn display_names_each_nodes_server() {
        let result = |node: &str, server: Option<&str>, outcome| NodeResult {
            node: node.to_owned(),
            server: server.map(str::to_owned),
            outcome,
            latency: Duration::from_micros(1500),
        };
        let report = NodeReport::new(vec![
            result("a:1", Some("valkey 9.1.2"), NodeOutcome::Released),
            result("b:2", Some("redis 7.0.15"), NodeOutcome::NotHeld),
            result("c:3", None, NodeOutcome::TimedOut),
        ]);
        assert_eq!(
            report.to_string(),
            "a:1 [valkey 9.1.2] released (1.5 ms); b:2 [redis 7.0.15] not held (1.5 ms); \
             c:3 timed out (1.5 ms)"
        );
    }

    #[test]
    fn summaries_count_outcomes_in_order() {
        let report = NodeReport::new(vec![
            result(NodeOutcome::HeldByOther, 1),
            result(NodeOutcome::TimedOut, 1),
            result(NodeOutcome::HeldByOther, 1),
            result(
                NodeOutcome::Quarantined {
                    reason: QuarantineReason::MemoryLost,
                    remaining: None,
                },
                1,
            ),
        ]);
        assert_eq!(
            report.summary(),
            "2 held by another owner, 1 timed out, 1 kept out by restart quarantine: no marker \
             of its current process (new, restarted or flushed) while locks may depend on it"
        );
        assert_eq!(NodeReport::default().summary(), "no node answered");
    }
}
