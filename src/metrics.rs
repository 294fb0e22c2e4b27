//! Every metric the crate emits, through the [`metrics`] facade.
//!
//! Install any `metrics` recorder (for example `metrics-exporter-prometheus`, see
//! `examples/prometheus.rs`); without one every call is a no-op. Labels are bounded:
//! outcomes and kinds come from fixed sets and nodes from the configured list, never from
//! resource names.
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `quorum_lock_acquire_attempts_total` | counter | `outcome`: `acquired`, `contended`, `unavailable`, `validity_spent` | every acquisition attempt (`lock` retries make several) |
//! | `quorum_lock_acquire_timeouts_total` | counter | — | `lock()` calls that spent their wait budget |
//! | `quorum_lock_wait_events_total` | counter | `event`: `woken` (a release announced the lock to us), `poll` (the retry timer ran out first), `quick_retry` (woken, yet the attempt failed: retried after 1 ms, then 2, 4, … ms, for up to a node timeout in all), `gate_open`, `gate_refused` (a waiter no release woke asked the waiting-list node first, see [`notifications`](crate::RedlockBuilder::notifications)), `left` (a wait ended while waiting lists may still hold the client: `LEAVE` sent to those nodes), `moved` (the waiting-list node changed, so the waiter listed itself again on the new one) | what waiting `lock()` calls did between attempts |
//! | `quorum_lock_attempt_duration_seconds` | histogram | — | one attempt, first request to decision (acquire latency) |
//! | `quorum_lock_acquire_duration_seconds` | histogram | — | successful `lock()` calls, waiting included (wait time) |
//! | `quorum_lock_hold_duration_seconds` | histogram | — | acquisition to release or drop |
//! | `quorum_lock_extensions_total` | counter | `outcome`: `extended`, `not_held`, `unavailable`, `validity_spent` | extensions, manual or automatic |
//! | `quorum_lock_lost_total` | counter | `reason`: `expired`, `not_held` | locks that could no longer be assumed held |
//! | `quorum_lock_releases_total` | counter | `kind`: `explicit`, `drop` (guard or cancelled attempt, released in a spawned task), `skipped` (dropped without a runtime: the TTL frees it) | releases |
//! | `quorum_lock_node_failures_total` | counter | `node` (`host:port`), `kind`: `timeout`, `error`, `wrong_type` | per-node requests without a usable answer |
//! | `quorum_lock_node_restarts_total` | counter | `node` | a new `run_id` seen on reconnect |
//! | `quorum_lock_quarantined_votes_total` | counter | `node`, `reason`: `memory_lost` (the node lost its memory while the ensemble had served locks), `restarted` (a new process without durable persistence), `no_identity` (`INFO` refused or incomplete), `record_unread` (the longest TTL read from too few intact nodes), `fresh_needs_all` (a new ensemble: every node must answer first), `just_started` (a new ensemble's node younger than a second), `readmitting` (quarantine waited out: marked, votes from the next attempt) | yes votes not counted by restart quarantine |
//! | `quorum_lock_node_quarantined` | gauge | `node` | 1 while the node's votes are quarantined, 0 once they count (set when a vote finds the state changed) |
//! | `quorum_lock_node_clock_offset_seconds` | gauge | `node` | clock offset measured by the last [`check_deployment`](crate::Redlock::check_deployment) |

use std::time::Duration;

/// See the table above.
pub const ACQUIRE_ATTEMPTS: &str = "quorum_lock_acquire_attempts_total";
/// See the table above.
pub const ACQUIRE_TIMEOUTS: &str = "quorum_lock_acquire_timeouts_total";
/// See the table above.
pub const WAIT_EVENTS: &str = "quorum_lock_wait_events_total";
/// See the table above.
pub const ATTEMPT_DURATION: &str = "quorum_lock_attempt_duration_seconds";
/// See the table above.
pub const ACQUIRE_DURATION: &str = "quorum_lock_acquire_duration_seconds";
/// See the table above.
pub const HOLD_DURATION: &str = "quorum_lock_hold_duration_seconds";
/// See the table above.
pub const EXTENSIONS: &str = "quorum_lock_extensions_total";
/// See the table above.
pub const LOST: &str = "quorum_lock_lost_total";
/// See the table above.
pub const RELEASES: &str = "quorum_lock_releases_total";
/// See the table above.
pub const NODE_FAILURES: &str = "quorum_lock_node_failures_total";
/// See the table above.
pub const NODE_RESTARTS: &str = "quorum_lock_node_restarts_total";
/// See the table above.
pub const QUARANTINED_VOTES: &str = "quorum_lock_quarantined_votes_total";
/// See the table above.
pub const NODE_QUARANTINED: &str = "quorum_lock_node_quarantined";
/// See the table above.
pub const NODE_CLOCK_OFFSET: &str = "quorum_lock_node_clock_offset_seconds";

// Label values are literals in every `counter!` below: the macro then builds its key
// statically, where a label value in a variable costs an allocation on every call, recorder
// installed or not.

pub(crate) fn attempt(outcome: &'static str, took: Duration) {
    match outcome {
        "acquired" => metrics::counter!(ACQUIRE_ATTEMPTS, "outcome" => "acquired").increment(1),
        "contended" => {
            metrics::counter!(ACQUIRE_ATTEMPTS, "outcome" => "contended").increment(1);
        }
        "unavailable" => {
            metrics::counter!(ACQUIRE_ATTEMPTS, "outcome" => "unavailable").increment(1);
        }
        other => metrics::counter!(ACQUIRE_ATTEMPTS, "outcome" => other).increment(1),
    }
    metrics::histogram!(ATTEMPT_DURATION).record(took.as_secs_f64());
}

pub(crate) fn acquired(waited: Duration) {
    metrics::histogram!(ACQUIRE_DURATION).record(waited.as_secs_f64());
}

pub(crate) fn wait_event(event: &'static str) {
    match event {
        "woken" => metrics::counter!(WAIT_EVENTS, "event" => "woken").increment(1),
        "poll" => metrics::counter!(WAIT_EVENTS, "event" => "poll").increment(1),
        "gate_open" => metrics::counter!(WAIT_EVENTS, "event" => "gate_open").increment(1),
        "gate_refused" => metrics::counter!(WAIT_EVENTS, "event" => "gate_refused").increment(1),
        "quick_retry" => metrics::counter!(WAIT_EVENTS, "event" => "quick_retry").increment(1),
        "left" => metrics::counter!(WAIT_EVENTS, "event" => "left").increment(1),
        other => metrics::counter!(WAIT_EVENTS, "event" => other).increment(1),
    }
}

pub(crate) fn gave_up() {
    metrics::counter!(ACQUIRE_TIMEOUTS).increment(1);
}

pub(crate) fn extended(outcome: &'static str) {
    match outcome {
        "extended" => metrics::counter!(EXTENSIONS, "outcome" => "extended").increment(1),
        other => metrics::counter!(EXTENSIONS, "outcome" => other).increment(1),
    }
}

pub(crate) fn lost(reason: &'static str) {
    metrics::counter!(LOST, "reason" => reason).increment(1);
}

pub(crate) fn released(kind: &'static str) {
    match kind {
        "explicit" => metrics::counter!(RELEASES, "kind" => "explicit").increment(1),
        "drop" => metrics::counter!(RELEASES, "kind" => "drop").increment(1),
        other => metrics::counter!(RELEASES, "kind" => other).increment(1),
    }
}

pub(crate) fn held(duration: Duration) {
    metrics::histogram!(HOLD_DURATION).record(duration.as_secs_f64());
}

pub(crate) fn node_failure(node: &str, kind: &'static str) {
    metrics::counter!(NODE_FAILURES, "node" => node.to_owned(), "kind" => kind).increment(1);
}

pub(crate) fn node_restarted(node: &str) {
    metrics::counter!(NODE_RESTARTS, "node" => node.to_owned()).increment(1);
}

pub(crate) fn vote_quarantined(node: &str, reason: &'static str) {
    metrics::counter!(QUARANTINED_VOTES, "node" => node.to_owned(), "reason" => reason)
        .increment(1);
}

pub(crate) fn node_quarantined(node: &str, quarantined: bool) {
    metrics::gauge!(NODE_QUARANTINED, "node" => node.to_owned()).set(if quarantined {
        1.0
    } else {
        0.0
    });
}

pub(crate) fn clock_offset(node: &str, seconds: f64) {
    metrics::gauge!(NODE_CLOCK_OFFSET, "node" => node.to_owned()).set(seconds);
}
