//! `quorum-lock status --watch`: one line per change of who holds a lock, read from every
//! node at an interval until interrupted.

use std::time::Duration;

use quorum_lock::{LockStatus, Redlock, Verdict};

use crate::duration::human;
use crate::run::Signals;
use crate::show::holder_text;
use crate::{Failure, say};

/// What a reading says, compared from one reading to the next: the verdict (its owner's
/// token included), so a change of holder or of state prints a line and a TTL that counts
/// down does not.
fn seen(status: &LockStatus) -> &Verdict {
    &status.verdict
}

/// One line: the resource, its verdict and, when held, by whom and for how long at most.
fn line(status: &LockStatus) -> String {
    let mut out = format!("{}: {}", status.resource, status.verdict);
    if let Some(holder) = &status.holder {
        out.push_str(&format!(" by {}", holder_text(holder, status.held_for)));
        if let Some(left) = status.remaining {
            out.push_str(&format!(", valid for at most {}", human(left)));
        }
    }
    out
}

/// Reads `resource` every `every` and prints a line (or one line of JSON) whenever the
/// verdict changes, until a forwarded signal (exit 0).
pub(crate) async fn watch(
    redlock: &Redlock,
    resource: &str,
    (every, json): (Duration, bool),
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let _ = redlock.connect().await;
    let mut last: Option<Verdict> = None;
    loop {
        let status = redlock
            .status(resource)
            .await
            .map_err(|e| Failure::from_error(&e))?;
        if last.as_ref() != Some(seen(&status)) {
            say(&match json {
                true => status.to_json(),
                false => line(&status),
            });
            last = Some(seen(&status).clone());
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = signals.recv() => return Ok(0),
        }
    }
}
