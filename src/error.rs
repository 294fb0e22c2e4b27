//! The one error type of the crate.

use std::time::Duration;

use crate::report::{NodeReport, latency};

/// Everything that can go wrong, split by what the caller can do about it.
///
/// Variants that involve nodes carry a [`NodeReport`] as their
/// [`source`](std::error::Error::source): which node answered what, and how fast.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another owner holds the resource on enough nodes that we cannot reach a majority.
    #[error("resource is held by another owner")]
    Contended {
        /// Per-node outcomes of the attempt.
        #[source]
        report: NodeReport,
    },

    /// Too many nodes failed or timed out for a majority to be possible.
    #[error("no majority of {quorum} could be formed: {}", report.summary())]
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
        reason: crate::LostReason,
    },

    /// The client was shut down ([`Redlock::shutdown`](crate::Redlock::shutdown)): it takes
    /// no new locks, and the locks it held were released.
    #[error("the client was shut down")]
    ShutDown,

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
            | Error::NotHeld { report } => Some(report),
            Error::Timeout { last, .. } => last.report(),
            Error::Lost { .. } | Error::ShutDown | Error::Config(_) => None,
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

    /// Whether another attempt may succeed (contention, unavailability, spent validity).
    pub(crate) fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Contended { .. } | Error::Unavailable { .. } | Error::ValiditySpent { .. }
        )
    }
}

/// Shorthand for `Result<T, quorum_lock::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
