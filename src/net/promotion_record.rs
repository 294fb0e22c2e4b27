//! A promoted master's promotion record: when, by the node's own clock, a client first
//! learnt its life as a promoted replica. Restart quarantine counts a promoted life from
//! when it was learnt (its uptime is a replica's, and `INFO` does not say when it was
//! promoted); a client that counted from its own first contact would start the quarantine
//! again in every new process, so a command run from cron, shorter than the quarantine,
//! would never see the node vote. The first client to learn the life writes the record;
//! every later one counts from it. The safety argument holds from any client's learning
//! (docs/members.md, "Failovers and new processes").

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::protocol::scripts::PROMOTED_SINCE;

/// The milliseconds since the record at `key` names `life`, written now when it names
/// another (or none); `None` when the script fails (an ACL, a redirect, a lost
/// connection) or answers something else.
pub(crate) async fn seen_ago(
    conn: &mut MultiplexedConnection,
    key: &str,
    life: &str,
) -> Option<Duration> {
    let since: i64 = (PROMOTED_SINCE.script().key(key).arg(life))
        .invoke_async(conn)
        .await
        .inspect_err(|e| tracing::debug!(%key, error = %e, "promotion record unavailable"))
        .ok()?;
    Some(Duration::from_millis(u64::try_from(since).ok()?))
}
