//! A fenced read-modify-write on SQLite under a quorum-lock lock.
//!
//! A holder acquires the lock with a fencing token, **claims the row when it reads it**
//! (`UPDATE counters SET fence = $t WHERE id = ? AND fence < $t RETURNING value`) and writes
//! only where the row still carries its token (`UPDATE counters SET value = ? WHERE id = ?
//! AND fence = $t`). A holder that was paused past its lock's validity finds 0 rows to
//! update once a newer holder has claimed the row, so its stale value never lands and no
//! increment is lost. [`Pattern::FenceAtMost`] is the tempting `WHERE fence <= $t` form,
//! which does lose one in the same scenario (see the tests).
//!
//! `cargo run -p quorum-lock-fenced-sqlite` plays that scenario with three real
//! `redis-server` nodes and a SQLite file in a temporary directory.

mod ledger;
mod nodes;

use std::time::{Duration, Instant};

use quorum_lock::{Redlock, Verdict};

pub use ledger::{Ledger, Pattern};
pub use nodes::{Nodes, TempDir};

/// A client for `urls` with quick retries, as a service would build it (restart
/// quarantine stays on, as fencing needs on nodes without `appendfsync always`; a new
/// ensemble votes at once).
///
/// # Errors
///
/// The builder's configuration error, as text.
pub fn client(urls: &[String]) -> Result<Redlock, String> {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_millis(200))
        .retry_delay(Duration::from_millis(5))
        .max_retry_delay(Duration::from_millis(50))
        .build()
        .map_err(|e| e.to_string())
}

/// Waits until `resource` is no longer held by the owner `token` on a majority of nodes:
/// its lock expired (the status shows it free) or another holder acquired it. This is how
/// the tests "pause" a holder past its validity without a fixed sleep.
///
/// # Errors
///
/// When the status cannot be read, or the lock is still held after `limit`.
///
/// # Cancel safety
///
/// Reads only; dropping the future changes nothing.
pub async fn until_not_held_by(
    redlock: &Redlock,
    resource: &str,
    token: &str,
    limit: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    loop {
        let status = redlock.status(resource).await.map_err(|e| e.to_string())?;
        match status.verdict {
            Verdict::Held { token: ref owner } if owner == token => {}
            Verdict::Unknown => {}
            _ => return Ok(()),
        }
        if Instant::now() > deadline {
            return Err(format!("{resource} still held by {token} after {limit:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
