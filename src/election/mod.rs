//! Leader election over the quorum: one leader of a name at a time, an epoch per term.
//!
//! - this file: [`Election`], the handle of one name, and [`Campaign`], a pending
//!   campaign;
//! - [`leadership`]: [`Leadership`], a won term, its record kept and proclaimed;
//! - [`term`]: the term record on the nodes, and the read of who leads ([`Leader`]);
//! - [`observe`]: who leads, read at an interval and on each announcement into a watch
//!   channel;
//! - [`candidates`]: the waiting candidates, entered while they campaign;
//! - [`announce`]: the announcements of terms proclaimed and resigned, which wake
//!   observers.
//!
//! A term is a fenced lock of the acquisition core on the election's own resource
//! (`quorum-lock:election:<name>`), waited for in arrival order like any lock and
//! auto-extended; its epoch is the fencing token minted with the win. Beside the lock key
//! the leader keeps a term record (its lock value, epoch and proclaimed value), and a read
//! of who leads takes a term only from a majority of nodes holding both
//! ([`rules::election`](crate::rules::election)).

mod announce;
pub(crate) mod candidates;
pub(crate) mod leadership;
pub(crate) mod observe;
pub(crate) mod term;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::acquire::candidates::Candidates;
use crate::acquire::plan::Plan;
use crate::acquire::{self, Options};
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::held::extend::AutoExtend;
use crate::held::lease::LockContext;
use crate::protocol::keys;
use crate::rules::{election, safety};
use leadership::Leadership;
use term::Leader;

/// The election of one name among every client of these nodes (see
/// [`Redlock::election`](crate::Redlock::election)): [`campaign`](Self::campaign) to lead
/// it, [`leader`](Self::leader) to learn who does. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Election {
    ensemble: Arc<Ensemble>,
    name: Arc<str>,
    key: String,
    /// Where its leaders announce their terms (`None` without release notifications).
    channel: Option<String>,
}

impl Election {
    /// The longest value a candidate may proclaim, in bytes.
    pub const MAX_VALUE: usize = 4096;

    pub(crate) fn new(ensemble: Arc<Ensemble>, name: &str) -> Result<Election> {
        keys::check_user_name("election", name)?;
        let key = term::election_key(&ensemble, name);
        let channel = announce::channel(&ensemble, name);
        Ok(Election {
            ensemble,
            name: Arc::from(name),
            key,
            channel,
        })
    }

    pub(crate) fn ensemble(&self) -> &Arc<Ensemble> {
        &self.ensemble
    }

    /// The election's lock key.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// The channel its leaders announce their terms on, if they do.
    pub(crate) fn channel(&self) -> Option<&str> {
        self.channel.as_deref()
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns to lead with `value` (this candidate's address or id, what observers
    /// read), for terms of `ttl` kept extended while it leads. Await the returned
    /// campaign: it waits for its turn, in arrival order among the candidates, for ever
    /// unless [`Campaign::wait`] bounds it.
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) -> quorum_lock::Result<()> {
    /// use std::time::Duration;
    /// let election = redlock.election("scheduler")?;
    /// let leadership = election.campaign("10.0.0.7:8080", Duration::from_secs(10)).await?;
    /// let epoch = leadership.epoch(); // carried by every write to shared storage
    /// // ... lead, until leadership.lost_signal() fires or the work is done ...
    /// leadership.resign().await?;
    /// # Ok(()) }
    /// ```
    pub fn campaign(&self, value: impl Into<String>, ttl: Duration) -> Campaign {
        Campaign {
            election: self.clone(),
            value: value.into(),
            ttl,
            options: Options::default(),
        }
    }

    /// Leads until `f` is done: campaigns with `value`, runs `f` while leading (as
    /// [`Campaign::run`] does) and, whenever leadership is lost before `f` finished,
    /// campaigns again and runs `f` anew in the next term (Curator's requeue). Returns
    /// `f`'s output from the term that saw it to the end.
    ///
    /// # Errors
    ///
    /// As awaiting a campaign (which waits for ever): [`Error::Config`] for a bad TTL or
    /// value, [`Error::ShutDown`] after the client shut down.
    ///
    /// # Cancel safety
    ///
    /// As [`Campaign::run`].
    pub async fn lead<F, Fut, T>(&self, value: &str, ttl: Duration, mut f: F) -> Result<T>
    where
        F: FnMut(FencingToken, LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        loop {
            match self.campaign(value, ttl).run(&mut f).await {
                Err(Error::Lost { .. }) => continue,
                done => return done,
            }
        }
    }

    /// The candidates waiting to lead, in the order they began to campaign (by their own
    /// clocks): every campaign keeps an entry on the nodes while it waits, and takes it out
    /// when it wins or stops (a campaigner that died leaves an entry for at most its TTL).
    /// The leader is not among them: see [`leader`](Self::leader).
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when fewer than a majority of nodes answered;
    /// [`Error::Permission`] when a node's ACL refused the read.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it writes nothing.
    pub async fn candidates(&self) -> Result<Vec<candidates::Candidate>> {
        candidates::read_candidates(&self.ensemble, &self.key).await
    }

    /// Who leads now, as a majority of the nodes say: a term held with its record on a
    /// majority ([`Leader::Elected`]), no term on a majority ([`Leader::Vacant`]), or
    /// neither ([`Leader::Unknown`]). Never one node's word. Writes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Permission`] when a node's ACL refused the read. Nodes that do not answer
    /// make the result [`Leader::Unknown`] when too few others did, not an error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it writes nothing.
    pub async fn leader(&self) -> Result<Leader> {
        term::read_leader(&self.ensemble, &self.key).await
    }

    /// Watches who leads: a [`leader`](Self::leader) read every `every`, and at once when
    /// a term is announced proclaimed or resigned (with release notifications on: one
    /// subscription per node), its outcome in the receiver returned whenever the leader
    /// changes (another term or value, no leader, or unknown). It starts
    /// [`Leader::Unknown`] until the first read. An announcement only wakes a read: the
    /// leader shown is always a majority's. A term whose resignation it heard of, or older
    /// than one it showed, is shown as unknown, never as the leader. Reads stop once every
    /// receiver is dropped. A resignation shows within a read of its announcement; a
    /// leader that died without one, within `every` of its term's end.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a zero interval, or outside a tokio runtime.
    pub fn observe(&self, every: Duration) -> Result<tokio::sync::watch::Receiver<Leader>> {
        observe::observe(self, every)
    }
}

/// Refuses a value longer than [`Election::MAX_VALUE`].
fn check_value(value: &str) -> Result<()> {
    match value.len() > Election::MAX_VALUE {
        true => Err(Error::Config(format!(
            "an election value of {} bytes is longer than the {} allowed",
            value.len(),
            Election::MAX_VALUE
        ))),
        false => Ok(()),
    }
}

/// A pending [`Election::campaign`]; `.await` it for a [`Leadership`].
#[derive(Debug)]
#[must_use = "a campaign does nothing until awaited"]
pub struct Campaign {
    election: Election,
    value: String,
    ttl: Duration,
    options: Options,
}

impl Campaign {
    /// How long to wait for the term: by default for ever; zero makes a single attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = Some(wait);
        self
    }

    /// Caps the attempts (at least 1), overriding
    /// [`RedlockBuilder::max_attempts`](crate::RedlockBuilder::max_attempts).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.options.max_attempts = Some(attempts);
        self
    }

    /// How the term is kept extended while this candidate leads (by default without
    /// limit, see [`AutoExtend`]).
    pub fn auto_extend(mut self, policy: AutoExtend) -> Self {
        self.options.auto_extend = Some(policy);
        self
    }

    /// Waits for the term, runs `f` while leading (given the epoch and the term's
    /// [`LockContext`]) and resigns when `f` is done, returning its output. If leadership
    /// is lost first, `f`'s future is dropped at its next suspension point and the call
    /// returns [`Error::Lost`].
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) -> quorum_lock::Result<()> {
    /// use std::time::Duration;
    /// let election = redlock.election("scheduler")?;
    /// election
    ///     .campaign("10.0.0.7:8080", Duration::from_secs(10))
    ///     .run(|epoch, ctx| async move {
    ///         // ... lead: every write carries `epoch`; ctx.validity() says for how long ...
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As awaiting the campaign, or [`Error::Lost`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `f`'s and releases the term in the background, as
    /// dropping a [`Leadership`] does.
    pub async fn run<F, Fut, T>(self, f: F) -> Result<T>
    where
        F: FnOnce(FencingToken, LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let leadership = self.await?;
        let lost = leadership.lost_signal();
        let work = f(leadership.epoch(), leadership.context());
        tokio::select! {
            output = work => {
                // The work is done whatever the resignation says: a term already lost or
                // not released everywhere ends with its TTL.
                let _ = leadership.resign().await;
                Ok(output)
            }
            reason = lost.lost() => Err(Error::Lost { reason }),
        }
    }
}

/// Waits for the term, then proclaims it: the lock with its epoch, then the term record on
/// a majority.
///
/// # Errors
///
/// [`Error::Timeout`] when a bounded wait or the attempt cap ran out (its `last` says why
/// the final attempt failed); [`Error::Unavailable`] when the term was won but a majority
/// did not take its record (the lock is released); [`Error::Config`] for a TTL that leaves
/// the leader no time to renew ([`Error::Config`] names the shortest accepted), a value
/// longer than [`Election::MAX_VALUE`], a zero attempt cap, or a client whose epochs
/// could repeat: the epoch is a fencing token, minted only with restart quarantine on
/// (the default) or on nodes with `appendfsync always`.
///
/// # Cancel safety
///
/// Dropping the future leaves no lock behind, as a dropped `lock()` does; a term record
/// already written names a term no longer held and expires by itself.
impl IntoFuture for Campaign {
    type Output = Result<Leadership>;
    type IntoFuture = BoxFuture<'static, Result<Leadership>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(campaign(self))
    }
}

async fn campaign(request: Campaign) -> Result<Leadership> {
    let Campaign {
        election,
        value,
        ttl,
        mut options,
    } = request;
    check_value(&value)?;
    let ensemble = &election.ensemble;
    let plan = Plan::new(
        ensemble,
        vec![keys::election_resource(&election.name)],
        ttl,
        true,
    )?;
    check_term(ensemble, plan.ttl)?;
    options.wait.get_or_insert(Duration::MAX);
    options.for_run();
    let budget = options.budget(ensemble)?;
    // Listed among the candidates while this campaign waits, until it wins or stops.
    let _entered = candidates::enter(&election, &value, plan.ttl);
    let mut won = acquire::acquire_any(ensemble, Candidates::one(plan), budget).await?;
    options.extend_won(&mut won.guard);
    let epoch = (won.guard.fence()).ok_or_else(|| Error::Config("no epoch minted".into()))?;
    Leadership::proclaim_won(&election, won.guard, epoch, &value).await
}

/// Refuses a term too short to be renewed in time (see [`election::shortest_term`]).
fn check_term(ensemble: &Ensemble, ttl: Duration) -> Result<()> {
    let config = &ensemble.config;
    let drift = safety::drift_allowance(ttl, config.drift_factor);
    let shortest = election::shortest_term(config.node_timeout, drift);
    match ttl < shortest {
        true => Err(Error::Config(format!(
            "an election term of {ttl:?} leaves its leader no time to renew it: use at \
             least {shortest:?} (four node timeouts of {:?} and the drift allowance)",
            config.node_timeout
        ))),
        false => Ok(()),
    }
}
