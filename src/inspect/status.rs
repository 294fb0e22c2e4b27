//! Read-only inspection of a lock on every node, for operators (`quorum-lock status`).

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use std::sync::Arc;

use crate::acquire::ballot::{self, Read, Seen};
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::inspect::json::JsonObject;
use crate::inspect::waiters::{Waiter, read_waiters};
use crate::net::answers::{self, Collected};
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::protocol::holder::{self, HolderInfo};
use crate::protocol::{keys, reply, rw_scripts, scripts};
use crate::report::{NodeOutcome, QuarantineReason};

/// What one node holds for a lock key.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyState {
    /// The node as `host:port`.
    pub node: String,
    /// `None` when the node did not answer; the error message is in `error`.
    pub holder: Option<Holder>,
    /// Why the node could not be read.
    pub error: Option<String>,
    /// Restart quarantine would keep this node's vote out of an acquisition now (judged
    /// from what every node answered, as an acquisition judges it).
    pub kept_out: Option<KeptOut>,
}

/// Why and how long restart quarantine keeps a node's vote out (see
/// [`NodeOutcome::Quarantined`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeptOut {
    /// Why.
    pub reason: QuarantineReason,
    /// How long until it votes again; `None` when that depends on something unknown.
    pub remaining: Option<Duration>,
}

/// The content of a lock key on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holder {
    /// No such key.
    Free,
    /// A string value (an owner token) with its remaining time to live; `None` when the key
    /// has no expiry (never set by this crate).
    Token {
        /// The stored value.
        token: String,
        /// Remaining time to live.
        ttl: Option<Duration>,
    },
    /// A key of another type (`list`, `hash`, ...): foreign data.
    Foreign(String),
}

/// The verdict over all nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// One token is stored on a majority: the lock is held.
    Held {
        /// The owner's token.
        token: String,
    },
    /// A majority of nodes answered that the key is absent.
    Free,
    /// Enough nodes answered but no token and no absence reaches a majority.
    Split,
    /// Too few nodes answered to tell.
    Unknown,
}

impl Verdict {
    /// A short machine-readable name: `held`, `free`, `split` or `unknown`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Held { .. } => "held",
            Verdict::Free => "free",
            Verdict::Split => "split",
            Verdict::Unknown => "unknown",
        }
    }
}

impl LockStatus {
    /// The status as one JSON object:
    /// `{"resource","key","quorum","verdict","owner","holder":{"token","host","pid",
    /// "program","since_ms"},"held_for_ms","remaining_ms","nodes":[{"node","reachable",
    /// "exists","type","ttl_ms","owner","error","kept_out","votes_in_ms"}],"waiters":[...]}`
    /// (each waiter as [`Waiter::to_json`]; `owner` is
    /// the whole stored value, `holder` what it says, `null` unless held); unknown
    /// values are `null`, and `kept_out` (a [`QuarantineReason::as_str`]) is `null` for a
    /// node that votes.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(128 + 160 * self.nodes.len());
        let mut o = JsonObject::new(&mut out);
        o.str("resource", Some(&self.resource));
        o.str("key", Some(&self.key));
        o.num("quorum", Some(self.quorum as i128));
        o.str("verdict", Some(self.verdict.as_str()));
        let owner = match &self.verdict {
            Verdict::Held { token } => Some(token.as_str()),
            _ => None,
        };
        o.str("owner", owner);
        o.key("holder");
        match &self.holder {
            Some(h) => holder_json(o.out, h),
            None => o.out.push_str("null"),
        }
        o.num("held_for_ms", self.held_for.map(|d| d.as_millis() as i128));
        o.num(
            "remaining_ms",
            self.remaining.map(|d| d.as_millis() as i128),
        );
        o.array("nodes", &self.nodes, |out, n| {
            let (exists, kind, ttl, token) = match &n.holder {
                None => (None, None, None, None),
                Some(Holder::Free) => (Some(false), None, None, None),
                Some(Holder::Token { token, ttl }) => {
                    (Some(true), Some("string"), *ttl, Some(token.as_str()))
                }
                Some(Holder::Foreign(kind)) => (Some(true), Some(kind.as_str()), None, None),
            };
            let mut node = JsonObject::new(out);
            node.str("node", Some(&n.node));
            node.bool("reachable", Some(n.holder.is_some()));
            node.bool("exists", exists);
            node.str("type", kind);
            node.num("ttl_ms", ttl.map(|d| d.as_millis() as i128));
            node.str("owner", token);
            node.str("error", n.error.as_deref());
            node.str("kept_out", n.kept_out.map(|k| k.reason.as_str()));
            node.num(
                "votes_in_ms",
                (n.kept_out)
                    .and_then(|k| k.remaining)
                    .map(|d| d.as_millis() as i128),
            );
            node.end();
        });
        o.array("waiters", &self.waiters, |out, w| {
            out.push_str(&w.to_json())
        });
        o.end();
        out
    }
}

/// `{"token","host","pid","program","since_ms"}`.
pub(crate) fn holder_json(out: &mut String, h: &HolderInfo) {
    let mut o = JsonObject::new(out);
    o.str("token", Some(&h.token));
    o.str("host", h.host.as_deref());
    o.num("pid", h.pid.map(i128::from));
    o.str("program", h.program.as_deref());
    o.num("since_ms", h.since.map(|t| i128::from(holder::unix_ms(t))));
    o.end();
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Held { .. } => f.write_str("held by a majority"),
            Verdict::Free => f.write_str("free"),
            Verdict::Split => f.write_str("split"),
            Verdict::Unknown => f.write_str("unknown"),
        }
    }
}

/// A lock as seen on every node, from [`Redlock::status`](crate::Redlock::status).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The resource inspected.
    pub resource: String,
    /// The Redis key.
    pub key: String,
    /// The majority the verdict is judged against.
    pub quorum: usize,
    /// Per node, in configuration order.
    pub nodes: Vec<KeyState>,
    /// The verdict for the set.
    pub verdict: Verdict,
    /// Who holds the lock, read from the value a majority holds (see [`HolderInfo`]):
    /// `Some` exactly when the verdict is [`Verdict::Held`]. For a value from another
    /// client (redis-py, redsync) only [`HolderInfo::token`] is known: the whole value.
    pub holder: Option<HolderInfo>,
    /// How long the holder has had it, by this machine's clock against the holder's
    /// ([`HolderInfo::since`]); zero when the clocks disagree the other way.
    pub held_for: Option<Duration>,
    /// The holder's remaining validity at most: the shortest remaining TTL among the nodes
    /// that hold its value (the holder counts its validity from before its first `SET`, so
    /// its own ends no later, and a drift allowance earlier). `None` unless held, or when
    /// a copy has no expiry.
    pub remaining: Option<Duration>,
    /// The clients waiting for it, in the order releases wake them: each waiting-list
    /// node's list in its order, nodes in configuration order (see [`Waiter`]). Clients
    /// with notifications off are not listed.
    pub waiters: Vec<Waiter>,
}

/// A node's answer to [`scripts::INSPECT`] as a [`Holder`].
fn holder(kind: &str, pttl: i64, value: Option<Vec<u8>>) -> Holder {
    match (kind, value) {
        ("none", _) => Holder::Free,
        ("string", Some(bytes)) => Holder::Token {
            token: String::from_utf8_lossy(&bytes).into_owned(),
            ttl: u64::try_from(pttl).ok().map(Duration::from_millis),
        },
        ("string", None) => Holder::Free,
        (other, _) => Holder::Foreign(other.to_owned()),
    }
}

/// The shortest remaining TTL among the copies of `value`; `None` when there are none or
/// one has no expiry. Pure.
pub(crate) fn remaining(holders: &[Option<&Holder>], value: &str) -> Option<Duration> {
    let mut shortest: Option<Duration> = None;
    for h in holders.iter().flatten() {
        if let Holder::Token { token, ttl } = h
            && token == value
        {
            let ttl = (*ttl)?;
            shortest = Some(shortest.map_or(ttl, |s| s.min(ttl)));
        }
    }
    shortest
}

/// The verdict from per-node holders (`None`: no answer) and the quorum. Pure.
pub(crate) fn verdict(holders: &[Option<&Holder>], quorum: usize) -> Verdict {
    let answered = holders.iter().flatten().count();
    if answered < quorum {
        return Verdict::Unknown;
    }
    let free = holders
        .iter()
        .flatten()
        .filter(|h| matches!(h, Holder::Free))
        .count();
    if free >= quorum {
        return Verdict::Free;
    }
    let mut tokens: HashMap<&str, usize> = HashMap::new();
    for h in holders.iter().flatten() {
        if let Holder::Token { token, .. } = h {
            *tokens.entry(token.as_str()).or_default() += 1;
        }
    }
    match tokens.into_iter().find(|(_, n)| *n >= quorum) {
        Some((token, _)) => Verdict::Held {
            token: token.to_owned(),
        },
        None => Verdict::Split,
    }
}

/// Reads the lock of `resource` on every node and judges the set: the body of
/// [`Redlock::status`](crate::Redlock::status).
pub(crate) async fn read_status(ensemble: &Arc<Ensemble>, resource: &str) -> Result<LockStatus> {
    read_status_listing(ensemble, resource, true).await
}

/// The lock key a status of `resource` reads; [`Error::Config`] for an empty name.
pub(crate) fn status_key(ensemble: &Ensemble, resource: &str) -> Result<String> {
    match resource.is_empty() {
        true => Err(Error::Config("empty resource name".into())),
        false => Ok(keys::lock(ensemble.config.space(), resource)),
    }
}

/// [`read_status`], with the lock's waiting clients read in the same round trip when
/// `list_waiters`, else left empty (a semaphore's slots share one waiting list, which
/// one of them reads).
pub(crate) async fn read_status_listing(
    ensemble: &Arc<Ensemble>,
    resource: &str,
    list_waiters: bool,
) -> Result<LockStatus> {
    let key = status_key(ensemble, resource)?;
    crate::acquire::heal::start_healer(ensemble);
    let ensemble = &ensemble.seated(std::slice::from_ref(&key)).await;
    let waiting = async {
        match list_waiters {
            true => read_waiters(ensemble, &key).await,
            false => Vec::new(),
        }
    };
    let ((collected, reads), waiters) = tokio::join!(inspect_everywhere(ensemble, &key), waiting);
    let report = collected.report(&ensemble.nodes);
    if report.denials() > 0 {
        return Err(Error::Permission { report });
    }
    let (holders, reads): (Vec<_>, Vec<_>) = reads
        .into_iter()
        .map(|r| r.map_or((None, None), |(holder, read)| (Some(holder), Some(read))))
        .unzip();
    let nodes = key_states(ensemble, holders, &reads, collected.outcomes);
    let holders: Vec<Option<&Holder>> = nodes.iter().map(|s| s.holder.as_ref()).collect();
    let verdict = verdict(&holders, ensemble.quorum);
    let (holder, remaining) = match &verdict {
        Verdict::Held { token } => (Some(HolderInfo::parse(token)), remaining(&holders, token)),
        _ => (None, None),
    };
    let held_for = (holder.as_ref())
        .and_then(|h| h.since)
        .map(|since| SystemTime::now().duration_since(since).unwrap_or_default());
    Ok(LockStatus {
        resource: resource.to_owned(),
        key,
        quorum: ensemble.quorum,
        nodes,
        verdict,
        holder,
        held_for,
        remaining,
        waiters,
    })
}

/// The writer's side of `status`, the lock of a read-write lock's name: a node whose key
/// holds the readers' mark holds no writer.
pub(crate) fn writer_side(mut status: LockStatus) -> LockStatus {
    for node in &mut status.nodes {
        if matches!(&node.holder, Some(Holder::Token { token, .. }) if token == rw_scripts::SHARED)
        {
            node.holder = Some(Holder::Free);
        }
    }
    let holders: Vec<Option<&Holder>> = status.nodes.iter().map(|s| s.holder.as_ref()).collect();
    status.verdict = verdict(&holders, status.quorum);
    (status.holder, status.remaining) = match &status.verdict {
        Verdict::Held { token } => (Some(HolderInfo::parse(token)), remaining(&holders, token)),
        _ => (None, None),
    };
    if status.holder.is_none() {
        status.held_for = None;
    }
    status
}

/// The inspect script's round on every node: per node that answered, what it holds at
/// `key` and what its answer says for restart quarantine.
async fn inspect_everywhere(
    ensemble: &Ensemble,
    key: &str,
) -> (Collected, Vec<Option<(Holder, Read)>>) {
    let call = Call::script(
        &scripts::INSPECT,
        ensemble.config.space(),
        std::slice::from_ref(&key.to_owned()),
    );
    let mut round = Round::everywhere(ensemble.round_scope(), call);
    let nodes = &ensemble.nodes;
    let read = |i: usize, answer| match (reply::inspect_reply(answer), nodes.get(i)) {
        (Ok(inspected), Some(node)) => {
            let mut seen = crate::acquire::vote_round::blank_read(node, ensemble.vouches(i));
            seen.marker = Seen::Read(inspected.marker.map(|m| m.life));
            seen.record_ms = inspected.record_ms;
            let held = holder(&inspected.kind, inspected.pttl, inspected.value);
            (NodeOutcome::Reachable, Some((held, seen)))
        }
        (Ok(_), None) => (NodeOutcome::Reachable, None),
        (Err(failed), _) => (failed, None),
    };
    answers::collect_reading(nodes, &mut round, read, |_| false, |_, _, _| false).await
}

/// Each node's state for the status: what it holds, why it could not be read, and
/// whether restart quarantine keeps it out now.
fn key_states(
    ensemble: &Ensemble,
    holders: Vec<Option<Holder>>,
    reads: &[Option<Read>],
    outcomes: Vec<(NodeOutcome, Duration)>,
) -> Vec<KeyState> {
    let config = &ensemble.config;
    let kept_out = ballot::kept_out(reads, config.drift_factor, config.ttl_ceiling);
    (ensemble.nodes.iter().zip(holders))
        .zip(outcomes)
        .zip(kept_out)
        .map(|(((node, holder), (outcome, _)), kept_out)| KeyState {
            node: node.name().to_owned(),
            error: holder.is_none().then(|| outcome.to_string()),
            holder,
            kept_out: (config.quarantine)
                .then_some(kept_out)
                .flatten()
                .map(|(reason, remaining)| KeptOut { reason, remaining }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(t: &str) -> Holder {
        Holder::Token {
            token: t.into(),
            ttl: Some(Duration::from_secs(1)),
        }
    }

    #[test]
    fn remaining_is_the_shortest_ttl_of_the_value() {
        let ms = Duration::from_millis;
        let tok = |t: &str, ttl: Option<u64>| Holder::Token {
            token: t.into(),
            ttl: ttl.map(ms),
        };
        let (a9, a4, a7, b1) = (
            tok("a", Some(9000)),
            tok("a", Some(4000)),
            tok("a", Some(7000)),
            tok("b", Some(1000)),
        );
        let (none, free) = (tok("a", None), Holder::Free);
        let cases: Vec<(Vec<Option<&Holder>>, Option<Duration>)> = vec![
            (vec![Some(&a9), Some(&a4), Some(&a7)], Some(ms(4000))),
            (
                vec![Some(&a9), Some(&b1), None, Some(&free)],
                Some(ms(9000)),
            ),
            (vec![Some(&a9), Some(&none)], None),
            (vec![Some(&b1), Some(&free)], None),
            (vec![], None),
        ];
        for (holders, expected) in cases {
            assert_eq!(remaining(&holders, "a"), expected, "{holders:?}");
        }
    }

    #[test]
    fn verdicts() {
        let (a, b, free) = (token("a"), token("b"), Holder::Free);
        let foreign = Holder::Foreign("list".into());
        let cases: Vec<(Vec<Option<&Holder>>, Verdict)> = vec![
            (
                vec![Some(&a), Some(&a), Some(&free)],
                Verdict::Held { token: "a".into() },
            ),
            (vec![Some(&free), Some(&free), Some(&a)], Verdict::Free),
            (vec![Some(&a), Some(&b), Some(&free)], Verdict::Split),
            (vec![Some(&a), Some(&foreign), Some(&free)], Verdict::Split),
            (vec![Some(&a), None, None], Verdict::Unknown),
            (
                vec![Some(&a), Some(&a), None],
                Verdict::Held { token: "a".into() },
            ),
            (vec![Some(&a)], Verdict::Held { token: "a".into() }),
            (vec![None], Verdict::Unknown),
            (vec![Some(&free)], Verdict::Free),
        ];
        for (holders, expected) in cases {
            assert_eq!(
                verdict(&holders, holders.len() / 2 + 1),
                expected,
                "{holders:?}"
            );
        }
    }
}
