//! The one error type of the crate.

use std::fmt;
use std::time::Duration;

use crate::report::{NodeOutcome, NodeReport, latency};

/// Everything that can go wrong, split by what the caller can do about it.
///
/// Variants that involve nodes carry a [`NodeReport`] as their
/// [`source`](std::error::Error::source): which node answered what, and how fast.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another owner holds the resource on enough nodes that we cannot reach a majority
    /// (with the votes restart quarantine kept out, which the message names).
    #[error("resource is held by another owner{}", kept_out(report))]
    Contended {
        /// Per-node outcomes of the attempt.
        #[source]
        report: NodeReport,
    },

    /// No majority could be confirmed, and not because a majority answered no: too many
    /// nodes failed, timed out or may not vote (a recent restart). The message says how
    /// many answered and what, and which nodes restart quarantine kept out, why and until
    /// when; the report has every node.
    #[error("{}{}", no_majority(*quorum, report), kept_out(report))]
    Unavailable {
        /// The majority that was needed.
        quorum: usize,
        /// Per-node outcomes of the attempt.
        #[source]
        report: NodeReport,
    },

    /// A majority acquired, but so late that no validity was left after the drift
    /// allowance; the partial lock was released.
    #[error("majority acquired after {}, leaving no validity", latency(*elapsed))]
    ValiditySpent {
        /// Time the attempt took.
        elapsed: Duration,
        /// Per-node outcomes of the attempt.
        #[source]
        report: NodeReport,
    },

    /// `lock()` spent its wait budget or attempt count; `last` is why the final attempt
    /// failed.
    #[error("gave up after {attempts} attempts in {}: {last}", latency(*waited))]
    Timeout {
        /// Attempts made.
        attempts: u32,
        /// Time spent waiting, from the call to giving up.
        waited: Duration,
        /// The final attempt's failure.
        #[source]
        last: Box<Error>,
    },

    /// Extend or release found that we no longer hold the lock on a majority: it expired,
    /// or another owner took it.
    #[error("lock is no longer held")]
    NotHeld {
        /// Per-node outcomes of the extend or release.
        #[source]
        report: NodeReport,
    },

    /// The lock was lost while code ran under [`LockRequest::run`](crate::LockRequest::run);
    /// that code was cancelled.
    #[error("lock was lost while the critical section ran: {reason}")]
    Lost {
        /// Why the lock can no longer be assumed held.
        reason: LostReason,
    },

    /// A node refused a command, key or channel for lack of permission (an ACL `NOPERM`):
    /// the user the client connects as lacks one of the permissions listed in the README's
    /// "Least privilege" section. A configuration error: retrying does not help, and
    /// nothing is reported as done that a refusing node did not do.
    #[error("permission denied by a node's ACL")]
    Permission {
        /// Per-node outcomes of the round; the refusing nodes show
        /// [`NodeOutcome::PermissionDenied`](crate::NodeOutcome::PermissionDenied).
        #[source]
        report: NodeReport,
    },
    /// The client was shut down ([`Redlock::shutdown`](crate::Redlock::shutdown)): it takes
    /// no new locks, and the locks it held were released.
    #[error("the client was shut down")]
    ShutDown,

    /// Two configured nodes reach the same Redis server (the same `run_id`, found on
    /// connect): it would vote twice. A configuration error; list each server once.
    #[error(
        "nodes {first} and {second} are the same redis server (same run_id): list each \
         server once, or it votes twice"
    )]
    SameServer {
        /// The first node, as configured (`host:port[/db]`).
        first: String,
        /// The second node reaching the same server.
        second: String,
    },

    /// A task that holds a read lock asked for the exclusive side of the same name (its
    /// write lock, or the mutex of that name, which is the same lock): it would wait for
    /// its own reader. Release the read lock first (upgrading in place deadlocks as soon
    /// as two readers try it at once).
    #[error(
        "this task holds a read lock on {name:?} and asked for its exclusive side (the \
         write lock or the mutex of that name): release the read lock first (a read lock \
         cannot be upgraded)"
    )]
    Upgrade {
        /// The read-write lock's resource.
        name: String,
    },

    /// Invalid configuration or argument; the message says what to fix.
    #[error("invalid configuration: {0}")]
    Config(String),
}

impl Error {
    /// The per-node report of this error, or of the final attempt behind a
    /// [`Timeout`](Error::Timeout).
    pub fn report(&self) -> Option<&NodeReport> {
        match self {
            Error::Contended { report }
            | Error::Unavailable { report, .. }
            | Error::ValiditySpent { report, .. }
            | Error::NotHeld { report }
            | Error::Permission { report } => Some(report),
            Error::Timeout { last, .. } => last.report(),
            Error::Lost { .. }
            | Error::ShutDown
            | Error::Config(_)
            | Error::SameServer { .. }
            | Error::Upgrade { .. } => None,
        }
    }

    /// True when this error, or the final attempt behind a timeout, was contention: the
    /// resource is held elsewhere.
    pub fn is_contended(&self) -> bool {
        match self {
            Error::Contended { .. } => true,
            Error::Timeout { last, .. } => last.is_contended(),
            _ => false,
        }
    }

    /// True when this error, or the final attempt behind a timeout, was too many nodes
    /// failing to answer.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Unavailable { .. } => true,
            Error::Timeout { last, .. } => last.is_unavailable(),
            _ => false,
        }
    }

    /// True when this error, or the final attempt behind a timeout, was a node refusing a
    /// command for lack of permission.
    pub fn is_permission(&self) -> bool {
        match self {
            Error::Permission { .. } => true,
            Error::Timeout { last, .. } => last.is_permission(),
            _ => false,
        }
    }

    /// Whether another attempt may succeed (contention, unavailability, spent validity, a
    /// fencing token that needs a trusted counter from a node that did not answer).
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Contended { .. } | Error::Unavailable { .. } | Error::ValiditySpent { .. }
        )
    }
}

/// The message of [`Error::Unavailable`]: how many nodes answered and what, so it never
/// says that nodes did not answer when they did (a release after a restart: two released,
/// two no longer held it, one failed).
fn no_majority(quorum: usize, report: &NodeReport) -> String {
    let results = report.results();
    let mut msg = format!("no majority of {quorum} could be confirmed");
    if results.is_empty() {
        return msg;
    }
    let pending = report.count(&NodeOutcome::Pending);
    // What the nodes said (answers) and what went wrong with the others (failures), each
    // counted by kind in the order first seen.
    let mut answers: Vec<(String, usize)> = Vec::new();
    let mut failures: Vec<(String, usize)> = Vec::new();
    for r in results {
        if r.outcome == NodeOutcome::Pending {
            continue;
        }
        let tally = if r.outcome.is_failure() {
            &mut failures
        } else {
            &mut answers
        };
        let what = r.outcome.to_string();
        match tally.iter_mut().find(|(w, _)| *w == what) {
            Some((_, count)) => *count += 1,
            None => tally.push((what, 1)),
        }
    }
    let counted = |tally: &[(String, usize)]| -> (usize, String) {
        let n = tally.iter().map(|(_, c)| c).sum();
        let detail: Vec<String> = tally.iter().map(|(w, c)| format!("{c} {w}")).collect();
        (n, detail.join("; "))
    };
    let (heard, said) = counted(&answers);
    msg.push_str(&format!(": {heard} of {} nodes answered", results.len()));
    if heard > 0 {
        msg.push_str(&format!(" ({said})"));
    }
    let (silent, why) = counted(&failures);
    if silent > 0 {
        msg.push_str(&format!(", {silent} did not ({why})"));
    }
    if pending > 0 {
        msg.push_str(&format!(", {pending} not waited for"));
    }
    msg
}

/// Which nodes of `report` restart quarantine kept out, why and until when.
fn kept_out(report: &NodeReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for r in report.results() {
        if let NodeOutcome::Quarantined { reason, remaining } = &r.outcome {
            let _ = write!(out, "; {} kept out by restart quarantine ({reason}", r.node);
            if let Some(d) = remaining {
                let _ = write!(out, ", votes again in {:.1} s", d.as_secs_f64());
            }
            out.push(')');
        }
    }
    out
}

/// Shorthand for `Result<T, quorum_lock::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a lock can no longer be assumed held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The validity deadline passed without a successful extension on a quorum, or (with
    /// auto-extension) extensions kept failing until too little validity was left for
    /// another try to complete.
    Expired,
    /// An extension found that a majority no longer has our token: it expired there or
    /// another owner took it.
    NotHeld,
    /// The holder released it.
    Released,
    /// The client was shut down ([`Redlock::shutdown`](crate::Redlock::shutdown)), which
    /// released the lock.
    ShutDown,
    /// The guard was detached into a ticket ([`LockGuard::detach`](crate::LockGuard::detach)):
    /// the lock is still held, by whoever adopts the ticket, no longer through this guard.
    Detached,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "validity ran out without an extension",
            LostReason::NotHeld => "a majority no longer holds our token",
            LostReason::Released => "released by its holder",
            LostReason::ShutDown => "released because the client was shut down",
            LostReason::Detached => "handed on as a ticket",
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::report::NodeResult;

    fn report(outcomes: &[NodeOutcome]) -> NodeReport {
        NodeReport::new(
            outcomes
                .iter()
                .enumerate()
                .map(|(i, outcome)| NodeResult {
                    server: None,
                    node: format!("n{i}:6379"),
                    outcome: outcome.clone(),
                    latency: Duration::from_millis(1),
                })
                .collect(),
        )
    }

    #[test]
    fn unavailable_says_who_answered() {
        use NodeOutcome::{Failed, NotHeld, Pending, Released, TimedOut};
        let q = || NodeOutcome::Quarantined {
            reason: crate::report::QuarantineReason::MemoryLost,
            remaining: None,
        };
        let table: [(&[NodeOutcome], &str); 4] = [
            (
                &[
                    NotHeld,
                    NotHeld,
                    Released,
                    Released,
                    Failed("refused".into()),
                ],
                "no majority of 3 could be confirmed: 4 of 5 nodes answered \
                 (2 not held; 2 released), 1 did not (1 error: refused)",
            ),
            (
                &[TimedOut, TimedOut, Released],
                "no majority of 3 could be confirmed: 1 of 3 nodes answered (1 released), \
                 2 did not (2 timed out)",
            ),
            (
                &[q(), q(), Pending],
                "no majority of 3 could be confirmed: 2 of 3 nodes answered (2 kept out by \
                 restart quarantine: no marker of its current process (new, restarted or \
                 flushed) while locks may depend on it), 1 not waited for; n0:6379 kept out by \
                 restart quarantine (no marker of its current process (new, restarted or \
                 flushed) while locks may depend on it); n1:6379 kept out by restart \
                 quarantine (no marker of its current process (new, restarted or flushed) \
                 while locks may depend on it)",
            ),
            (&[], "no majority of 3 could be confirmed"),
        ];
        for (outcomes, want) in table {
            let err = Error::Unavailable {
                quorum: 3,
                report: report(outcomes),
            };
            assert_eq!(err.to_string(), want, "{outcomes:?}");
        }
    }
}
