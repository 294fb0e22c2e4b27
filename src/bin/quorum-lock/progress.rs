//! `run`'s progress on a long wait: who holds the lock and for how long, on stderr. Shown
//! only when stderr is a terminal (the caller checks): scripts and logs get no extra lines.

use std::convert::Infallible;
use std::time::Duration;

use quorum_lock::Redlock;
use tokio::time::Instant;

use crate::show;

/// The first line comes after this long a wait.
const FIRST_AFTER: Duration = Duration::from_secs(1);
/// The lock is looked at this often after that.
const POLL: Duration = Duration::from_secs(1);
/// An unchanged holder is shown again after this long.
const REPEAT_AFTER: Duration = Duration::from_secs(5);

/// Reports on the wait for `resource` until dropped: a line after [`FIRST_AFTER`], then one
/// whenever the holder changes or [`REPEAT_AFTER`] has passed. Reads the lock with the
/// library's read-only `status` (one request per node, bounded by the node timeout).
///
/// # Cancel safety
///
/// Meant to be dropped when the wait ends; it writes whole lines only.
pub(crate) async fn report(redlock: &Redlock, resource: &str) -> Infallible {
    let started = Instant::now();
    let mut shown: Option<(String, Instant)> = None;
    tokio::time::sleep(FIRST_AFTER).await;
    loop {
        if let Ok(status) = redlock.status(resource).await {
            let (who, line) = show::waiting(&status, started.elapsed());
            let due = shown
                .as_ref()
                .is_none_or(|(before, at)| *before != who || at.elapsed() >= REPEAT_AFTER);
            if due {
                crate::say_err(&line);
                shown = Some((who, Instant::now()));
            }
        }
        tokio::time::sleep(POLL).await;
    }
}
