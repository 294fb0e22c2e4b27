//! The waiting candidates of an election: a campaign keeps an entry (since when, the value
//! it campaigns with) on every node while it waits, and takes it out when it wins or
//! stops; [`read_candidates`] lists them in the order they began.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;

use crate::election::Election;
use crate::election::term::written_on;
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::inspect::json::JsonObject;
use crate::inspect::waiters::read_entries_everywhere;
use crate::net::call::Call;
use crate::protocol::holder::unix_ms;
use crate::protocol::scripts::Lua;
use crate::protocol::term_scripts::{
    self, CANDIDATE_ENTER, CANDIDATE_LEAVE, CANDIDATES_READ, candidate_entry,
};
use crate::rules::election as election_rules;

/// A candidate waiting for its turn to lead, from
/// [`Election::candidates`](crate::Election::candidates).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidate {
    /// The value it campaigns with.
    pub value: String,
    /// When it began to campaign, by its own clock.
    pub since: SystemTime,
}

impl Candidate {
    /// One line of JSON: `{"value","since_ms"}` (Unix milliseconds, the candidate's clock).
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(64 + self.value.len());
        let mut o = JsonObject::new(&mut out);
        o.str("value", Some(&self.value));
        o.num("since_ms", Some(i128::from(unix_ms(self.since))));
        o.end();
        out
    }
}

/// A campaign's entry among the candidates, kept fresh while this lives; dropping it takes
/// the entry out, after any refresh under way (so none lands after the removal).
#[derive(Debug)]
pub(crate) struct Entered {
    _stop: oneshot::Sender<()>,
}

/// Enters a campaign of `election` with `value` among its candidates, for entries that
/// live `ttl` unless refreshed (every third of it). Without a runtime, enters nothing.
pub(crate) fn enter(election: &Election, value: &str, ttl: Duration) -> Option<Entered> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let id = uuid::Uuid::from_bytes(rand::random::<[u8; 16]>())
        .simple()
        .to_string();
    let entry = candidate_entry(unix_ms(SystemTime::now()), &id, value);
    let (ensemble, key) = (Arc::clone(election.ensemble()), election.key().to_owned());
    let (stop, stopped) = oneshot::channel();
    runtime.spawn(keep_entry(ensemble, key, entry, (ttl, stopped)));
    Some(Entered { _stop: stop })
}

/// Enters `entry` and refreshes it every third of `ttl` until `stopped` (or its sender
/// dropped), then takes it out.
async fn keep_entry(
    ensemble: Arc<Ensemble>,
    key: String,
    entry: String,
    (ttl, mut stopped): (Duration, oneshot::Receiver<()>),
) {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    loop {
        let call = candidate_call(&ensemble, &CANDIDATE_ENTER, &key).arg(&entry);
        written_on(&ensemble, call.arg(ttl_ms), &key).await;
        tokio::select! {
            () = tokio::time::sleep(election_rules::refresh_period(ttl)) => {}
            _ = &mut stopped => break,
        }
    }
    let call = candidate_call(&ensemble, &CANDIDATE_LEAVE, &key).arg(&entry);
    written_on(&ensemble, call, &key).await;
}

/// The waiting candidates of the election of lock key `key`, in the order they began:
/// every entry a node that answered holds (a majority must answer).
///
/// # Errors
///
/// [`Error::Unavailable`] when fewer than a majority of nodes answered;
/// [`Error::Permission`] when a node's ACL refused the read.
pub(crate) async fn read_candidates(ensemble: &Arc<Ensemble>, key: &str) -> Result<Vec<Candidate>> {
    let call = candidate_call(ensemble, &CANDIDATES_READ, key);
    let (report, reads) = read_entries_everywhere(ensemble, call, key).await;
    if report.denials() > 0 {
        return Err(Error::Permission { report });
    }
    let answered = reads.iter().flatten().count();
    if answered < ensemble.quorum {
        return Err(Error::Unavailable {
            quorum: ensemble.quorum,
            report,
        });
    }
    let entries: BTreeSet<(SystemTime, String)> = (reads.into_iter().flatten().flatten())
        .filter_map(|entry| {
            let (since_ms, value) = term_scripts::parse_candidate(&entry)?;
            let since = SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(since_ms))?;
            Some((since, value.to_owned()))
        })
        .collect();
    Ok((entries.into_iter())
        .map(|(since, value)| Candidate { value, since })
        .collect())
}

/// `lua` for the candidates of the election's lock key `key`.
fn candidate_call(ensemble: &Ensemble, lua: &'static Lua, key: &str) -> Call {
    Call::script(lua, ensemble.config.space(), &[key.to_owned()])
}
