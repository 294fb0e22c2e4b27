//! An election's term record on the nodes: the leader writes and clears it beside the
//! election's lock key, and anyone reads the key and the record together to learn who
//! leads ([`read_leader`]), judged by [`election::judge_leader`].

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redis::Value;

use crate::election::announce::Announced;
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::inspect::json::JsonObject;
use crate::inspect::status::holder_json;
use crate::net::answers::{self, Collected, Stop};
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::protocol::holder::HolderInfo;
use crate::protocol::scripts::Lua;
use crate::protocol::term_scripts::{self, TERM_CLEAR, TERM_READ, TERM_WRITE};
use crate::protocol::{keys, reply};
use crate::report::{NodeOutcome, NodeReport};
use crate::rules::election::{self, Judged, NodeTerm};

/// Who leads an election, from [`Election::leader`](crate::Election::leader).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leader {
    /// A majority of the nodes hold this term.
    Elected(Term),
    /// A majority of the nodes hold no term: nobody leads.
    Vacant,
    /// Neither could be told: too few nodes answered, or they disagree (a campaign or a
    /// hand-over under way, or a node that lost its copy). The report says what each
    /// node answered.
    Unknown {
        /// Per-node outcomes of the read.
        report: NodeReport,
    },
}

/// A leader's term, as a majority of the nodes hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Term {
    /// What the leader proclaims (its address or id), as given to
    /// [`Election::campaign`](crate::Election::campaign) or
    /// [`Leadership::proclaim`](crate::Leadership::proclaim).
    pub value: String,
    /// The term's epoch: the fencing token minted with the win, above every earlier term's.
    pub epoch: FencingToken,
    /// Who holds it (host, process, since when), read from its lock value.
    pub holder: HolderInfo,
    /// The term ends at the latest after this long: the shortest remaining TTL among the
    /// nodes that hold it (the leader extends it while it leads).
    pub valid_for: Duration,
}

impl Leader {
    /// One line of JSON: `{"leader":"elected","value","epoch","holder":{"token","host",
    /// "pid","program","since_ms"},"valid_for_ms"}`, or `{"leader":"vacant"}`, or
    /// `{"leader":"unknown","answered"}` (how many nodes answered the read).
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(160);
        let mut o = JsonObject::new(&mut out);
        match self {
            Leader::Elected(term) => {
                o.str("leader", Some("elected"));
                o.str("value", Some(&term.value));
                o.num("epoch", Some(i128::from(term.epoch.get())));
                o.key("holder");
                holder_json(o.out, &term.holder);
                o.num("valid_for_ms", Some(term.valid_for.as_millis() as i128));
            }
            Leader::Vacant => o.str("leader", Some("vacant")),
            Leader::Unknown { report } => {
                o.str("leader", Some("unknown"));
                let answered = report.results().len() - report.failures();
                o.num("answered", Some(answered as i128));
            }
        }
        o.end();
        out
    }
}

impl Term {
    /// How long the leader has led, by this machine's clock against the leader's; `None`
    /// when its lock value does not say.
    pub fn held_for(&self) -> Option<Duration> {
        let since = self.holder.since?;
        Some(SystemTime::now().duration_since(since).unwrap_or_default())
    }
}

/// What a node's read says of a term: its lock value, epoch and value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    lock_value: String,
    epoch: FencingToken,
    value: String,
}

/// One node's answer: the term it holds, and the lock key's remaining TTL in ms.
type NodeRead = (NodeTerm<Held>, u64);

/// Where a term's writes announce themselves: the election's channel (`None`: nowhere)
/// and the announcement.
pub(crate) type Announcing<'a> = (Option<&'a str>, Announced);

/// Writes the term record of `lock_value` on every node of `ensemble` that holds the lock
/// key `key` with that value, expiring one `ttl` after the key, and announces it where
/// `announce` says (a rewrite that changes nothing observers see announces nothing).
/// Returns how many nodes wrote it, and the report.
pub(crate) async fn write_term(
    ensemble: &Arc<Ensemble>,
    (key, lock_value): (&str, &str),
    record: &str,
    ttl: Duration,
    announce: Option<Announcing<'_>>,
) -> (usize, NodeReport) {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let (channel, message) = announcement(announce);
    let call = term_call(ensemble, &TERM_WRITE, key)
        .arg(lock_value)
        .arg(record)
        .arg(ttl_ms)
        .arg(channel)
        .arg(message);
    written_on(ensemble, call, key).await
}

/// Deletes the term record of `lock_value` on every node of `ensemble` that holds it, and
/// announces the term's end where `announce` says.
pub(crate) async fn clear_term(
    ensemble: &Arc<Ensemble>,
    (key, lock_value): (&str, &str),
    announce: Announcing<'_>,
) {
    let (channel, message) = announcement(Some(announce));
    let call = (term_call(ensemble, &TERM_CLEAR, key))
        .arg(lock_value)
        .arg(channel)
        .arg(message);
    written_on(ensemble, call, key).await;
}

/// The channel and message arguments of a term script (empty: no announcement).
fn announcement(announce: Option<Announcing<'_>>) -> (String, String) {
    match announce {
        Some((Some(channel), announced)) => (channel.to_owned(), announced.message()),
        _ => (String::new(), String::new()),
    }
}

/// The term record of a leader.
pub(crate) fn record(lock_value: &str, epoch: FencingToken, value: &str) -> String {
    term_scripts::record(lock_value, epoch.get(), value)
}

/// `lua` for the election's lock key `key`.
fn term_call(ensemble: &Ensemble, lua: &'static Lua, key: &str) -> Call {
    Call::script(
        lua,
        ensemble.config.space(),
        std::slice::from_ref(&key.to_owned()),
    )
}

/// Runs `call` on every node the key `key` is seated on and counts the nodes that
/// answered 1.
pub(crate) async fn written_on(
    ensemble: &Arc<Ensemble>,
    call: Call,
    key: &str,
) -> (usize, NodeReport) {
    let seated = ensemble.seated(std::slice::from_ref(&key.to_owned())).await;
    let mut round = Round::everywhere(seated.round_scope(), call);
    let collected = answers::collect(
        &seated.nodes,
        &mut round,
        |_, answer| reply::one_or(answer, NodeOutcome::Acquired, NodeOutcome::NotHeld),
        NodeOutcome::is_acquired,
        Stop::AtEnd,
    )
    .await;
    let written = (collected.outcomes.iter())
        .filter(|(o, _)| o.is_acquired())
        .count();
    (written, collected.report(&seated.nodes))
}

/// Reads the election's lock key `key` and its term record on every node and judges who
/// leads: the body of [`Election::leader`](crate::Election::leader). The read ends as
/// soon as the answers decide it. A read needs no node admitted, so it starts no healer:
/// an observer's only traffic is this read.
pub(crate) async fn read_leader(ensemble: &Arc<Ensemble>, key: &str) -> Result<Leader> {
    let seated = ensemble.seated(std::slice::from_ref(&key.to_owned())).await;
    let mut round = Round::everywhere(seated.round_scope(), term_call(&seated, &TERM_READ, key));
    let n = seated.nodes.len();
    let done = |_: &[(NodeOutcome, Duration)], reads: &[Option<NodeRead>], _| {
        election::is_judged(&terms_of(reads), n)
    };
    let (collected, reads): (Collected, Vec<Option<NodeRead>>) =
        answers::collect_reading(&seated.nodes, &mut round, node_read, |_| false, done).await;
    let report = collected.report(&seated.nodes);
    if report.denials() > 0 {
        return Err(Error::Permission { report });
    }
    Ok(match election::judge_leader(&terms_of(&reads), n) {
        Judged::Leader(held) => Leader::Elected(term(held, &reads)),
        Judged::NoLeader => Leader::Vacant,
        Judged::Unknown => Leader::Unknown { report },
    })
}

/// The terms alone of the reads so far, for the judge.
fn terms_of(reads: &[Option<NodeRead>]) -> Vec<Option<NodeTerm<Held>>> {
    reads
        .iter()
        .map(|r| r.as_ref().map(|(term, _)| term.clone()))
        .collect()
}

/// One node's answer to [`TERM_READ`].
fn node_read(_: usize, answer: Value) -> (NodeOutcome, Option<NodeRead>) {
    match reply::decode::<Vec<Value>>(answer) {
        Ok(parts) if parts.is_empty() => (NodeOutcome::Reachable, Some((NodeTerm::Free, 0))),
        Ok(parts) => match reply::decode::<(String, i64, String)>(Value::Array(parts)) {
            Ok((lock_value, pttl, record)) => {
                let term = held_term(&lock_value, &record);
                let pttl = u64::try_from(pttl).unwrap_or(0);
                (NodeOutcome::Reachable, Some((NodeTerm::Held(term), pttl)))
            }
            Err(failed) => (failed, None),
        },
        Err(failed) => (failed, None),
    }
}

/// The term a node holds: its record, when the record belongs to the lock value the key
/// holds (an earlier term's record, or none, is a grant without a term).
fn held_term(lock_value: &str, record: &str) -> Option<Held> {
    let (recorded, epoch, value) = term_scripts::parse_record(record)?;
    let epoch = FencingToken::new(epoch)?;
    (recorded == lock_value).then(|| Held {
        lock_value: lock_value.to_owned(),
        epoch,
        value: value.to_owned(),
    })
}

/// The public view of the term `held` that a majority holds.
fn term(held: Held, reads: &[Option<NodeRead>]) -> Term {
    let valid_ms = (reads.iter().flatten())
        .filter(|(t, _)| matches!(t, NodeTerm::Held(Some(h)) if *h == held))
        .map(|(_, pttl)| *pttl)
        .min()
        .unwrap_or(0);
    Term {
        holder: HolderInfo::parse(&held.lock_value),
        epoch: held.epoch,
        value: held.value,
        valid_for: Duration::from_millis(valid_ms),
    }
}

/// The lock key of election `name` on `ensemble`.
pub(crate) fn election_key(ensemble: &Ensemble, name: &str) -> String {
    keys::lock(ensemble.config.space(), &keys::election_resource(name))
}
