//! Who waits for a lock: the waiting lists read on every node, for `status`.
//!
//! A waiting client is listed on one node (see `wait::notify`) as `<client id>@<listed at>`:
//! the id carries the client's description in the format of a lock value (host, process,
//! program) unless the client was built with `holder_info(false)`, and the time is the
//! listing node's clock. A release on that node wakes its clients in the list's order.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redis::Value;

use crate::ensemble::Ensemble;
use crate::inspect::json::JsonObject;
use crate::net::answers;
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::protocol::holder::{HolderInfo, unix_ms};
use crate::protocol::{reply, scripts};
use crate::report::{NodeOutcome, NodeReport};

/// A client waiting for a lock, from [`LockStatus::waiters`](crate::LockStatus::waiters).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// Who waits, read from the client's id: [`HolderInfo::token`] is the client's random
    /// id, [`HolderInfo::since`] when the client was built (its clock), and host, process
    /// and program are `None` for a client built with
    /// [`holder_info(false)`](crate::RedlockBuilder::holder_info).
    pub client: HolderInfo,
    /// When the node listed it, by that node's clock (a client that won the lock on this
    /// node in an attempt that failed as a whole is listed again, at the head, from then).
    /// `None` for an entry without a time.
    pub listed_at: Option<SystemTime>,
    /// The node whose waiting list holds it (`host:port`).
    pub node: String,
}

impl Waiter {
    /// One JSON object: `{"client","host","pid","program","listed_at_ms","node"}`
    /// (`client` is the client's random id; Unix milliseconds by the node's clock).
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(160);
        let mut o = JsonObject::new(&mut out);
        o.str("client", Some(&self.client.token));
        o.str("host", self.client.host.as_deref());
        o.num("pid", self.client.pid.map(i128::from));
        o.str("program", self.client.program.as_deref());
        o.num(
            "listed_at_ms",
            self.listed_at.map(|t| i128::from(unix_ms(t))),
        );
        o.str("node", Some(&self.node));
        o.end();
        out
    }
}

/// The client id and listing time of a waiting-list entry. Pure; an entry without a time
/// after its last `@` is a bare id.
pub(crate) fn parse_waiter_entry(entry: &str) -> (&str, Option<SystemTime>) {
    let listed = entry.rsplit_once('@').and_then(|(id, ms)| {
        let at = SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms.parse().ok()?))?;
        Some((id, at))
    });
    match listed {
        Some((id, at)) => (id, Some(at)),
        None => (entry, None),
    }
}

/// The waiters of lock key `key` on every node that answered: each node's list in its
/// order, nodes in configuration order, a client listed on two nodes shown once (where
/// first seen). Nodes that did not answer are left out (`status` reports them).
pub(crate) async fn read_waiters(ensemble: &Arc<Ensemble>, key: &str) -> Vec<Waiter> {
    let call = Call::script(
        &scripts::WAITERS_READ,
        ensemble.config.space(),
        &[key.to_owned()],
    );
    let (report, reads) = read_entries_everywhere(ensemble, call, key).await;
    let mut seen = HashSet::new();
    let mut waiters = Vec::new();
    for (result, entries) in report.results().iter().zip(reads) {
        for entry in entries.into_iter().flatten() {
            let (id, listed_at) = parse_waiter_entry(&entry);
            if seen.insert(id.to_owned()) {
                waiters.push(Waiter {
                    client: HolderInfo::parse(id),
                    listed_at,
                    node: result.node.clone(),
                });
            }
        }
    }
    waiters
}

/// Every node's answer to `call`, a read of a list of strings at `key` (bounded by the
/// node timeout): the report, and per node, in configuration order, the strings it
/// returned (`None`: no answer).
pub(crate) async fn read_entries_everywhere(
    ensemble: &Arc<Ensemble>,
    call: Call,
    key: &str,
) -> (NodeReport, Vec<Option<Vec<String>>>) {
    let seated = ensemble.seated(std::slice::from_ref(&key.to_owned())).await;
    let mut round = Round::everywhere(seated.round_scope(), call);
    let read = |_: usize, answer: Value| match reply::decode::<Vec<String>>(answer) {
        Ok(entries) => (NodeOutcome::Reachable, Some(entries)),
        Err(failed) => (failed, None),
    };
    let (collected, reads) =
        answers::collect_reading(&seated.nodes, &mut round, read, |_| false, |_, _, _| false).await;
    (collected.report(&seated.nodes), reads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_split_at_the_last_at_sign() {
        let at = |ms| Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        let cases = [
            ("abc@1700000000123", ("abc", at(1_700_000_000_123))),
            ("abc;q1;t=5;h=web%401@42", ("abc;q1;t=5;h=web%401", at(42))),
            ("a@b@7", ("a@b", at(7))),
            ("bare-id", ("bare-id", None)),
            ("id@not-a-time", ("id@not-a-time", None)),
            ("id@", ("id@", None)),
            ("id@99999999999999999999", ("id@99999999999999999999", None)),
        ];
        for (entry, expected) in cases {
            assert_eq!(parse_waiter_entry(entry), expected, "{entry}");
        }
    }
}
