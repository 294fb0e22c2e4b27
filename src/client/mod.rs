//! The public handle: what a caller holds and calls, and nothing below it.
//!
//! - this file: [`Redlock`], every one of its methods (the longer ones call down into the
//!   layer that does the work), and the [`LockRequest`] builder that `lock()` and
//!   `lock_many()` return;
//! - [`builder`]: [`RedlockBuilder`], validation, the node list;
//! - [`fenced`]: fenced requests, guards and contexts;
//! - [`scoped`]: running a future under a lock;
//! - [`sentinel_url`]: the `redis+sentinel://` URL of a member under Sentinel;
//! - [`cluster_url`]: the `redis+cluster://` URL of a member that is a Redis Cluster;
//! - `member_url`: the shape both member URLs share (servers, credentials, a path);
//! - [`shutdown`]: closing the client, behind [`Redlock::shutdown`].
//!
//! Acquiring is in [`acquire`](crate::acquire) (the retry loop) and
//! [`attempt`](crate::acquire::attempt) (one round); the shared state in
//! [`ensemble`](crate::ensemble).

pub(crate) mod builder;
pub(crate) mod cluster_url;
pub(crate) mod fenced;
mod member_url;
pub(crate) mod scoped;
pub(crate) mod sentinel_url;
pub(crate) mod shutdown;

use std::sync::Arc;
use std::time::Duration;

use crate::acquire;
use crate::acquire::first_contact;
use crate::acquire::first_start::{self, FirstStart};
use crate::acquire::heal::{self, Readiness};
use crate::acquire::plan::Plan;
use crate::acquire::request::LockRequest;
use crate::election::Election;
use crate::ensemble::Ensemble;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::held::guard::LockGuard;
use crate::held::lease::LockContext;
use crate::held::ticket::LockTicket;
use crate::inspect::doctor::{self, DeploymentReport};
use crate::inspect::spread_scan;
use crate::inspect::status::{self, LockStatus};
use crate::net::answers;
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::protocol::{keys, reply};
use crate::report::{NodeOutcome, NodeReport};
use crate::rules::quorum;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use builder::RedlockBuilder;
use fenced::FencedGuard;

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone (an `Arc`): create one with [`Redlock::builder`] and share it. With one
/// node it is a plain single-instance lock with the same API, errors and guarantees (its
/// acquire and release await the one node's request directly, without fan-out rounds).
#[derive(Debug, Clone)]
pub struct Redlock {
    inner: Arc<Ensemble>,
}

impl Redlock {
    pub(crate) fn from_ensemble(ensemble: Ensemble) -> Self {
        Redlock {
            inner: Arc::new(ensemble),
        }
    }

    /// The shared state: nodes, configuration, queue and notifier.
    pub(crate) fn inner(&self) -> &Arc<Ensemble> {
        &self.inner
    }

    /// Votes needed for a lock: `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// The configured nodes as `host:port`, in order.
    pub fn nodes(&self) -> impl Iterator<Item = &str> {
        self.inner.nodes.iter().map(|n| n.name())
    }

    /// The Redis key that stores the lock for `resource`: the key prefix (if any) followed
    /// by the resource name.
    pub fn key(&self, resource: &str) -> String {
        keys::lock(self.inner.config.space(), resource)
    }

    /// The TTL configured with [`RedlockBuilder::default_ttl`](crate::RedlockBuilder::default_ttl).
    pub fn default_ttl(&self) -> Duration {
        self.inner.config.default_ttl
    }

    /// Acquires `resource` for `ttl`, retrying with jittered backoff until the configured
    /// wait budget runs out. Await the returned request; adjust it first with
    /// [`LockRequest::wait`] or [`LockRequest::max_attempts`].
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) -> quorum_lock::Result<()> {
    /// use std::time::Duration;
    /// let guard = redlock.lock("orders:42", Duration::from_secs(10)).await?;
    /// // ... critical section, while guard.validity() is not zero ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Awaiting the request returns [`Error::Timeout`] when the wait budget or the attempt
    /// cap ran out (its `last` says why the final attempt failed: [`Error::Contended`],
    /// [`Error::Unavailable`] or [`Error::ValiditySpent`]), and [`Error::Config`] at once for
    /// no or an empty resource name, an unusable TTL or a zero attempt cap.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point leaves no lock behind: whatever an attempt in
    /// progress may have set is released on every node in the background, the local turn
    /// passes to the next task, and the waiting lists that may hold this client are left.
    pub fn lock(&self, resource: impl Into<String>, ttl: Duration) -> LockRequest {
        LockRequest::new(Arc::clone(&self.inner), vec![resource.into()], ttl)
    }

    /// Acquires several resources as one lock: on each node either all of them are set or
    /// none (one atomic script per node), and a majority of nodes must agree. The order of
    /// `resources` does not matter and duplicates are ignored, so two callers locking
    /// `[a, b]` and `[b, a]` cannot deadlock.
    ///
    /// # Errors
    ///
    /// Awaiting the request returns [`Error::Timeout`] when the wait budget or the attempt
    /// cap ran out (its `last` says why the final attempt failed: [`Error::Contended`],
    /// [`Error::Unavailable`] or [`Error::ValiditySpent`]), and [`Error::Config`] at once for
    /// an empty list or an empty resource name, an unusable TTL or a zero attempt cap.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point leaves no lock behind: whatever an attempt in
    /// progress may have set is released on every node in the background, the local turn
    /// passes to the next task, and the waiting lists that may hold this client are left.
    pub fn lock_many<I, S>(&self, resources: I, ttl: Duration) -> LockRequest
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let resources = resources.into_iter().map(Into::into).collect();
        LockRequest::new(Arc::clone(&self.inner), resources, ttl)
    }

    /// A counting semaphore of `permits` on `name`: at most that many holders at once
    /// across every client of these nodes, each permit an ordinary quorum lock of its own
    /// (see [`Semaphore`]). Every client of one name must use the same count: while holders
    /// of one count may hold, acquiring with another is refused with [`Error::Config`].
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) -> quorum_lock::Result<()> {
    /// use std::time::Duration;
    /// let exports = redlock.semaphore("exports", 4)?;
    /// let permit = exports.acquire(Duration::from_secs(30)).await?;
    /// // ... at most 4 exports run at once ...
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty name, or a count of 0 or above
    /// [`Semaphore::MAX_PERMITS`].
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Semaphore::new(Arc::clone(&self.inner), name, permits)
    }

    /// A read-write lock on `name`: any number of readers or one writer at once, across
    /// every client of these nodes (see [`RwLock`]).
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) -> quorum_lock::Result<()> {
    /// use std::time::Duration;
    /// let schema = redlock.rwlock("schema")?;
    /// let reading = schema.read(Duration::from_secs(10)).await?;
    /// // ... readers of other clients may read too; writers wait ...
    /// reading.release().await?;
    /// let writing = schema.write(Duration::from_secs(10)).await?;
    /// // ... alone: no reader, no other writer ...
    /// writing.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty name.
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        RwLock::new(Arc::clone(&self.inner), name)
    }

    /// The leader election of `name` among every client of these nodes (see [`Election`]):
    /// one leader at a time, each term with an epoch above every earlier one's.
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) -> quorum_lock::Result<()> {
    /// use quorum_lock::Leader;
    /// let election = redlock.election("scheduler")?;
    /// if let Leader::Elected(term) = election.leader().await? {
    ///     println!("{} leads, epoch {}", term.value, term.epoch);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty name, or one in the names this library keeps.
    pub fn election(&self, name: &str) -> Result<Election> {
        Election::new(Arc::clone(&self.inner), name)
    }

    /// Makes exactly one attempt. Returns `Ok(None)` when another owner holds the resource.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when too many nodes failed, [`Error::ValiditySpent`] when the
    /// attempt was too slow, [`Error::Config`] for an empty name or unusable TTL.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes releases, in the background, whatever the
    /// attempt may have set on any node.
    pub async fn try_lock(
        &self,
        resource: impl Into<String>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        let resource = resource.into();
        keys::check_user_name("resource", &resource)?;
        let plan = Plan::new(&self.inner, vec![resource], ttl, false)?;
        let (_, tried) = acquire::attempt_seated(&self.inner, &plan, None).await;
        acquire::contended_as_none(tried)
    }

    /// Connects to every node (if not yet connected) and checks it answers `PING`, waiting
    /// up to the connect timeout plus the node timeout. Optional: requests connect lazily.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when fewer than a majority of nodes answered; the report
    /// lists every node. [`Error::SameServer`] when two configured nodes reach one server.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it writes nothing; a connection being made goes on and is kept for the
    /// next request.
    pub async fn connect(&self) -> Result<NodeReport> {
        let ensemble = &self.inner;
        let (report, votes) = first_contact::ping_every_node(ensemble).await;
        if let Some(err) = ensemble.same_server() {
            return Err(err);
        }
        quorum::decide_reach(&votes)
            .into_result(|| report.clone())
            .map(|_| report)
    }

    /// Readmits the nodes whose restart quarantine is over, without waiting for lock
    /// traffic, and says where every node stands. Pings every node (a reconnect learns a
    /// restart); when one that answers is not known admitted in its current life, makes an
    /// acquisition attempt on a private resource (a key of this client's own, released at
    /// once), which marks the nodes whose quarantine is over and confirms them. Nodes
    /// still quarantined are reported with the time they wait. A Redis Cluster member,
    /// whose markers are per slot, is admitted once each master that owns a slot is: the
    /// attempt is made in one fixed slot of each (the first it owns). A long-lived client does
    /// this by itself in the background; this is for the command line (`quorum-lock
    /// repair`, `quorum-lock doctor --ready`) and for tests.
    ///
    /// Once every node is admitted, it also reads every node's keys under the key prefix
    /// (`SCAN`, bounded, on connections of its own) for the live locks that one more
    /// restart could take: held on a majority but not yet written back where a node lost
    /// them ([`Readiness::locks_at_risk`]). Their holders write them back at their next
    /// extension, or they expire.
    ///
    /// # Errors
    ///
    /// [`Error::ShutDown`] after [`shutdown`](Self::shutdown); [`Error::SameServer`] when two
    /// configured nodes reach one server; [`Error::Config`] when the TTL ceiling is too
    /// short for the probe's TTL (the node timeout plus drift). Nodes that do not answer
    /// are reported, not an error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves no key behind (the probe is an ordinary acquisition) and
    /// may leave markers written: the nodes they name are admitted all the same.
    pub async fn heal(&self) -> Result<Readiness> {
        let mut readiness = heal::heal_ensemble(&self.inner).await?;
        if readiness.every_node_admitted() {
            spread_scan::check_spread(&self.inner, &mut readiness).await;
        }
        Ok(readiness)
    }

    /// Declares the ensemble new, once, at its first start: an operator's statement that no
    /// lock was ever granted through these nodes (as etcd's `--initial-cluster-state
    /// new`). Restart quarantine lets a new ensemble's nodes vote at once only when every
    /// configured node answers; with one down from the start, a new ensemble looks the
    /// same as one whose majority lost a live lock's records, and its nodes wait out the
    /// TTL ceiling. This writes every node reached the marker of its current life, so
    /// that it votes at once; the nodes not reached are readmitted by restart quarantine
    /// when they answer (after the longest TTL used so far). When a node reached carries a
    /// marker, the ensemble has served: nothing is written ([`FirstStart::InService`]).
    ///
    /// Declaring an ensemble new while a lock is held through nodes that lost their
    /// memory, or that do not answer, can let a second holder in: run it only on nodes
    /// that never served (the command line's `quorum-lock init`, in a deployment's first
    /// start).
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when fewer than a majority of nodes answered (nothing
    /// written), or one stopped answering while markers were read or written;
    /// [`Error::Permission`] when an ACL refused the read or the write; [`Error::Config`]
    /// for a Cluster member (markers per slot); [`Error::SameServer`] when two configured
    /// nodes reach one server; [`Error::ShutDown`] after [`shutdown`](Self::shutdown).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave some nodes marked and others not; call again: the
    /// marked ones then show the ensemble in service, and restart quarantine readmits the
    /// rest as nodes that lost their memory.
    pub async fn declare_new(&self) -> Result<FirstStart> {
        first_start::declare_new(&self.inner).await
    }

    /// Deletes the lock on every node whatever its owner (the seeds' `reset`), for an
    /// operator clearing a lock whose holder is known to be gone. Returns what each node
    /// did: [`NodeOutcome::Released`] where the key existed, [`NodeOutcome::NotHeld`] where
    /// it did not.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty resource name; [`Error::Permission`] when a node's ACL
    /// refused the `DEL` (the key may still be there). Nodes that fail otherwise are
    /// reported per node, not as an error.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the lock deleted on some nodes and not on others; call
    /// again to finish.
    pub async fn reset(&self, resource: &str) -> Result<NodeReport> {
        keys::check_user_name("resource", resource)?;
        let ensemble = &self.inner;
        let key = self.key(resource);
        let mut del = redis::cmd("DEL");
        del.arg(key);
        let mut round = Round::everywhere(ensemble.round_scope(), Call::new(del).repeatable());
        answers::report_every_answer(
            &ensemble.nodes,
            &mut round,
            |_, answer| match reply::decode::<i64>(answer) {
                Ok(deleted) if deleted > 0 => NodeOutcome::Released,
                Ok(_) => NodeOutcome::NotHeld,
                Err(failed) => failed,
            },
        )
        .await
    }

    /// Starts configuring a client.
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }

    /// [`try_lock`](Redlock::try_lock) with a fencing token: exactly one attempt, and
    /// `Ok(None)` when another owner holds the resource.
    ///
    /// # Errors
    ///
    /// As [`Redlock::try_lock`]; also [`Error::Unavailable`] when the token could not be
    /// committed to a majority.
    ///
    /// # Cancel safety
    ///
    /// As [`Redlock::try_lock`]: dropping the future releases, in the background,
    /// whatever the attempt may have set on any node.
    pub async fn try_lock_fenced(
        &self,
        resource: impl Into<String>,
        ttl: Duration,
    ) -> Result<Option<FencedGuard>> {
        let resource = resource.into();
        keys::check_user_name("resource", &resource)?;
        let plan = Plan::new(self.inner(), vec![resource], ttl, true)?;
        let (_, tried) = acquire::attempt_seated(self.inner(), &plan, None).await;
        acquire::contended_as_none(tried)?
            .map(FencedGuard::new)
            .transpose()
    }

    /// Runs `f` under `resource` locked for `ttl` and auto-extended; shorthand for
    /// `self.lock(resource, ttl).run(f)`. See [`LockRequest::run`].
    ///
    /// # Errors
    ///
    /// As [`LockRequest::run`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockRequest::run`].
    pub async fn run<F, Fut, T>(
        &self,
        resource: impl Into<String>,
        ttl: Duration,
        f: F,
    ) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lock(resource, ttl).run(f).await
    }

    /// Takes over the lock a [`LockTicket`] hands on ([`LockGuard::detach`], here or in
    /// another process of the same nodes and key prefix): one extension round sets the
    /// ticket's TTL again on every node that still holds its token, and a majority in time
    /// makes the guard, which extends, signals loss and releases as any other (auto-extension
    /// is off until [`LockGuard::auto_extend`]). Its report shows no votes: no node was
    /// asked to grant it.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the ticket's validity has ended (nothing is sent) or a
    /// majority does not hold its token (it expired, was taken over or released, or the
    /// ticket was forged): nothing is released or woken, and another holder's keys are
    /// never touched; [`Error::Unavailable`] or [`Error::ValiditySpent`] when too few nodes
    /// answered in time (the ticket may still be adopted while it is valid);
    /// [`Error::ShutDown`] after [`shutdown`](Self::shutdown).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the new TTL on some nodes; the lock is then the
    /// ticket's still, and another adoption may take it.
    pub async fn adopt(&self, ticket: &LockTicket) -> Result<LockGuard> {
        crate::held::adopt::adopt_ticket(&self.inner, ticket).await
    }

    /// Reads the lock of `resource` on every node (type, value and remaining TTL) and the
    /// clients waiting for it, both in one round trip, and judges the set. Writes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty resource name; [`Error::Permission`] when a node's ACL
    /// refused the read. Unreachable nodes are reported per node, not as an error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it writes nothing.
    pub async fn status(&self, resource: &str) -> Result<LockStatus> {
        status::read_status(self.inner(), resource).await
    }

    /// Checks how the nodes are deployed and reports what weakens the lock: unreachable
    /// nodes, one server listed twice, nodes that replicate one another, cluster mode, an
    /// even or too small number of nodes, persistence and eviction settings (among them a
    /// majority of nodes that can lose their data together), a default TTL
    /// eaten up by the drift allowance and node timeout, clocks that differ from this
    /// host's, and (restart quarantine on) nodes whose vote quarantine keeps out now, with
    /// why and when they vote again. Each [`Finding`](crate::Finding) has a severity and a
    /// one-line fix.
    ///
    /// Never fails: a node that cannot be reached is itself a finding. Every node is
    /// probed at once on a fresh connection of its own (1 s to connect, 1 s per request,
    /// 2.5 s in all), so the check ends within about 2.5 s even when nodes hang. It reads
    /// `INFO`, `CONFIG GET append*` and `CONFIG GET save` (optional: an ACL may refuse
    /// them), the node's quarantine marker and ensemble record (two `GET`s) and three
    /// `TIME` samples; it writes nothing.
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) {
    /// use quorum_lock::Severity;
    /// let report = redlock.check_deployment().await;
    /// println!("{report}");
    /// if report.worst() == Some(Severity::Error) {
    ///     std::process::exit(2);
    /// }
    /// # }
    /// ```
    pub async fn check_deployment(&self) -> DeploymentReport {
        doctor::check_deployment(self.inner()).await
    }

    /// Shuts this client (and every clone of it) down, for a service that stops:
    ///
    /// 1. takes no new locks: every later `lock`, `try_lock` or `run` returns
    ///    [`Error::ShutDown`](crate::Error::ShutDown), and attempts still running give back
    ///    what they won; it waits for them (each bounded by its node timeouts), so that
    ///    no key they set is left behind;
    /// 2. releases every lock it holds, on every node, waiting for each node's answer
    ///    (bounded by the node timeout); the guards still alive report it: their lost
    ///    signal fires with [`LostReason::ShutDown`](crate::LostReason::ShutDown), their
    ///    validity is zero, and their `release()` returns `Error::ShutDown`;
    /// 3. stops the auto-extenders, the release subscriptions and the background
    ///    collector, and closes the connections (later requests fail without connecting).
    ///
    /// Returns how many locks were released. Calling it again does nothing and returns 0.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after it started leaves the client shut down, and the locks not
    /// yet released then expire with their TTL.
    pub async fn shutdown(&self) -> usize {
        shutdown::shut_down(self.inner()).await
    }
}
