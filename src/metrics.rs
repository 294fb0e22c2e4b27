//! Metric names and the helpers that emit them through the [`metrics`] facade.
//!
//! Labels are bounded: outcomes and kinds come from fixed sets, never from resource names.
//! Without an installed recorder every call is a no-op.
//!
//! | name | type | labels |
//! |---|---|---|
//! | `quorum_lock_acquire_attempts_total` | counter | `outcome`: `acquired`, `contended`, `unavailable`, `validity_spent` |
//! | `quorum_lock_acquire_timeouts_total` | counter | — (a `lock()` call gave up) |
//! | `quorum_lock_acquire_duration_seconds` | histogram | — (successful `lock()` call, waiting included) |
//! | `quorum_lock_extensions_total` | counter | `outcome`: `extended`, `not_held`, `unavailable`, `validity_spent` |
//! | `quorum_lock_releases_total` | counter | `kind`: `explicit`, `drop` (guard or cancelled attempt, released in a spawned task), `skipped` (dropped without a runtime) |
//! | `quorum_lock_hold_duration_seconds` | histogram | — (acquire to release or drop) |
//! | `quorum_lock_node_restarts_total` | counter | `node` (`host:port`): a new `run_id` seen on reconnect |
//! | `quorum_lock_quarantined_votes_total` | counter | `node`: votes not counted because the node restarted recently |

use std::time::Duration;

/// Counter of acquisition attempts by outcome.
pub const ACQUIRE_ATTEMPTS: &str = "quorum_lock_acquire_attempts_total";
/// Counter of `lock()` calls that gave up.
pub const ACQUIRE_TIMEOUTS: &str = "quorum_lock_acquire_timeouts_total";
/// Histogram of successful `lock()` call durations in seconds.
pub const ACQUIRE_DURATION: &str = "quorum_lock_acquire_duration_seconds";
/// Counter of extensions by outcome.
pub const EXTENSIONS: &str = "quorum_lock_extensions_total";
/// Counter of releases by kind.
pub const RELEASES: &str = "quorum_lock_releases_total";
/// Histogram of hold durations in seconds.
pub const HOLD_DURATION: &str = "quorum_lock_hold_duration_seconds";

pub(crate) fn attempt(outcome: &'static str) {
    metrics::counter!(ACQUIRE_ATTEMPTS, "outcome" => outcome).increment(1);
}

pub(crate) fn acquired(waited: Duration) {
    metrics::histogram!(ACQUIRE_DURATION).record(waited.as_secs_f64());
}

pub(crate) fn gave_up() {
    metrics::counter!(ACQUIRE_TIMEOUTS).increment(1);
}

pub(crate) fn extended(outcome: &'static str) {
    metrics::counter!(EXTENSIONS, "outcome" => outcome).increment(1);
}

pub(crate) fn released(kind: &'static str) {
    metrics::counter!(RELEASES, "kind" => kind).increment(1);
}

pub(crate) fn held(duration: Duration) {
    metrics::histogram!(HOLD_DURATION).record(duration.as_secs_f64());
}

/// Counter of node restarts noticed on reconnect.
pub const NODE_RESTARTS: &str = "quorum_lock_node_restarts_total";
/// Counter of votes ignored because of restart quarantine.
pub const QUARANTINED_VOTES: &str = "quorum_lock_quarantined_votes_total";

pub(crate) fn node_restarted(node: &str) {
    metrics::counter!(NODE_RESTARTS, "node" => node.to_owned()).increment(1);
}

pub(crate) fn quarantined_vote(node: &str) {
    metrics::counter!(QUARANTINED_VOTES, "node" => node.to_owned()).increment(1);
}
