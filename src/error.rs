//! The one error type of the crate.

use std::time::Duration;

use crate::report::NodeReport;

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

    /// Too few nodes gave a vote that counts for a majority to be possible: they failed,
    /// timed out, or restart quarantine kept them out (the report says which, why and
    /// until when).
    #[error(
        "no majority of {quorum} votes{}{}",
        no_answer(report),
        kept_out(report)
    )]
    Unavailable {
        /// The majority that was needed.
        quorum: usize,
        /// Per-node outcomes of the attempt.
        #[source]
        report: NodeReport,
    },

    /// A majority acquired, but so late that no validity was left after the drift
    /// allowance; the partial lock was released.
    #[error("majority acquired after {elapsed:?}, leaving no validity")]
    ValiditySpent {
        /// Time the attempt took.
        elapsed: Duration,
        /// Per-node outcomes of the attempt.
        #[source]
        report: NodeReport,
    },

    /// `lock()` spent its wait budget or attempt count; `last` is why the final attempt
    /// failed.
    #[error("gave up after {attempts} attempts in {waited:?}")]
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
        reason: crate::LostReason,
    },

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

    /// A fencing token was asked for, but fewer than a majority of the nodes read had a
    /// counter that can be trusted (nodes that lost their memory and have not seen a
    /// commit since do not count): a larger token may exist unseen. The acquisition was
    /// released. `lock()` retries (a trusted node may only have been slow); after a
    /// majority of nodes lost their memory, continue with
    /// [`fence_floor`](crate::RedlockBuilder::fence_floor).
    #[error(
        "no safe fencing token: {trusted} trusted counters read, {needed} needed (nodes that \
         lost their data do not count; after most nodes lost theirs, set a fence floor)"
    )]
    FenceUnknown {
        /// Trusted counters read.
        trusted: usize,
        /// Trusted counters needed (a majority).
        needed: usize,
        /// Per-node outcomes of the acquisition.
        #[source]
        report: NodeReport,
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
            | Error::FenceUnknown { report, .. } => Some(report),
            Error::Timeout { last, .. } => last.report(),
            Error::Lost { .. } | Error::Config(_) | Error::SameServer { .. } => None,
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

    /// Whether another attempt may succeed (contention, unavailability, spent validity, a
    /// fencing token that needs a trusted counter from a node that did not answer).
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Contended { .. }
                | Error::Unavailable { .. }
                | Error::ValiditySpent { .. }
                | Error::FenceUnknown { .. }
        )
    }
}

/// How many nodes of `report` gave no answer, for [`Error::Unavailable`]'s message.
fn no_answer(report: &NodeReport) -> String {
    match report.failures() {
        0 => String::new(),
        failed => format!(": {failed} node(s) gave no answer"),
    }
}

/// Which nodes of `report` restart quarantine kept out, why and until when.
fn kept_out(report: &NodeReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for r in report.results() {
        if let crate::NodeOutcome::Quarantined { reason, remaining } = &r.outcome {
            let sep = if out.is_empty() && report.failures() == 0 {
                ": "
            } else {
                "; "
            };
            let _ = write!(
                out,
                "{sep}{} kept out by restart quarantine ({reason}",
                r.node
            );
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
