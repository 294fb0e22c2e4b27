//! The client handle and acquisition: one attempt fans `SET NX PX` out to every node,
//! `lock()` retries attempts with jittered backoff within a wait budget.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use redis::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::builder::{Config, RedlockBuilder, check_ttl};
use crate::error::{Error, Result};
use crate::extend::AutoExtend;
use crate::fanout::{self, Background, Round, Stop};
use crate::guard::{Holding, LockGuard, Requeue};
use crate::metrics;
use crate::node::Call;
use crate::node::Node;
use crate::notify::Notifier;
use crate::protocol::{keys, scripts};
use crate::queue::LocalQueue;
use crate::ballot::{self, Read, Seen};
use crate::fanout::Collected;
use crate::quorum::{self, Verdict};
use crate::report::{NodeOutcome, NodeReport, QuarantineReason};
use crate::safety::{Admission, NextToken, Persistence};

/// State shared by every clone of a [`Redlock`].
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) config: Config,
    pub(crate) quorum: usize,
    pub(crate) queue: Arc<LocalQueue>,
    /// Present when release notifications are on.
    pub(crate) notifier: Option<Arc<Notifier>>,
    /// Waits for requests that rounds left behind (shared with the notifier).
    pub(crate) background: Arc<Background>,
    /// Whether the warning about fencing without quarantine on volatile nodes was given.
    warned_unfenced: std::sync::atomic::AtomicBool,
}

impl Inner {
    pub(crate) fn new(nodes: Vec<Arc<Node>>, config: Config, connect_timeout: Duration) -> Self {
        let quorum = quorum::quorum(nodes.len());
        let background = Arc::new(Background::new(nodes.clone()));
        let notifier = config.notifications.then(|| {
            Arc::new(Notifier::new(
                nodes.clone(),
                Arc::clone(&background),
                connect_timeout,
                config.node_timeout,
            ))
        });
        Inner {
            background,
            nodes,
            config,
            quorum,
            warned_unfenced: std::sync::atomic::AtomicBool::new(false),
            queue: Arc::new(LocalQueue::default()),
            notifier,
        }
    }

    /// Validates a TTL for a lock or extension. Redis expiry has millisecond resolution:
    /// the TTL is rounded down so the validity arithmetic never assumes more time than the
    /// server grants.
    pub(crate) fn accept_ttl(&self, ttl: Duration) -> Result<Duration> {
        let ttl = Duration::from_millis(whole_ms(ttl));
        check_ttl(ttl, self.config.drift_factor, self.config.node_timeout)?;
        Ok(ttl)
    }

    /// Two configured nodes that reach one server (the same `run_id`, whatever the host
    /// name or db number): it would vote twice.
    fn same_server(&self) -> Option<Error> {
        let run_ids: Vec<Option<Arc<str>>> = self.nodes.iter().map(|n| n.run_id()).collect();
        let refs: Vec<Option<&str>> = run_ids.iter().map(Option::as_deref).collect();
        let (i, j) = crate::safety::duplicate_server(&refs)?;
        Some(Error::SameServer {
            first: self.nodes.get(i)?.name().to_owned(),
            second: self.nodes.get(j)?.name().to_owned(),
        })
    }

    /// Warns once when fencing tokens are minted with quarantine off while a node may lose
    /// its counters on a restart: tokens may then repeat.
    fn warn_unfenced(&self) {
        if self.config.quarantine
            || self.warned_unfenced.load(std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let volatile: Vec<&str> = (self.nodes.iter())
            .filter(|n| {
                n.facts()
                    .is_some_and(|f| f.persistence != crate::safety::Persistence::AofAlways)
            })
            .map(|n| n.name())
            .collect();
        if !volatile.is_empty()
            && !self
                .warned_unfenced
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                nodes = ?volatile,
                "fencing with restart quarantine off on nodes without appendfsync always: \
                 a restart can make fencing tokens repeat"
            );
        }
    }
}

/// A Redlock client over N independent Redis masters.
///
/// Cheap to clone (an `Arc`): create one with [`Redlock::builder`] and share it. With one
/// node it is a plain single-instance lock through the same code path.
#[derive(Debug, Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

impl Redlock {
    /// Starts configuring a client.
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }

    pub(crate) fn from_inner(inner: Inner) -> Self {
        Redlock {
            inner: Arc::new(inner),
        }
    }

    pub(crate) fn inner(&self) -> &Arc<Inner> {
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
        keys::lock(&self.inner.config.key_prefix, resource)
    }

    /// The TTL configured with [`RedlockBuilder::default_ttl`].
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
    pub fn lock(&self, resource: impl Into<String>, ttl: Duration) -> LockRequest {
        LockRequest {
            client: self.clone(),
            resources: vec![resource.into()],
            ttl,
            wait: None,
            max_attempts: None,
            auto_extend: None,
            fencing: false,
        }
    }

    /// Acquires several resources as one lock: on each node either all of them are set or
    /// none (one atomic script per node), and a majority of nodes must agree. The order of
    /// `resources` does not matter and duplicates are ignored, so two callers locking
    /// `[a, b]` and `[b, a]` cannot deadlock.
    pub fn lock_many<I, S>(&self, resources: I, ttl: Duration) -> LockRequest
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        LockRequest {
            client: self.clone(),
            resources: resources.into_iter().map(Into::into).collect(),
            ttl,
            wait: None,
            max_attempts: None,
            auto_extend: None,
            fencing: false,
        }
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
        let plan = Plan::new(&self.inner, vec![resource.into()], ttl, false)?;
        match attempt(&self.inner, &plan, None).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Contended { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Connects to every node (if not yet connected) and checks it answers `PING`, waiting
    /// up to the connect timeout plus the node timeout. Optional: requests connect lazily.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when fewer than a majority of nodes answered; the report
    /// lists every node. [`Error::SameServer`] when two configured nodes reach one server.
    pub async fn connect(&self) -> Result<NodeReport> {
        let inner = &self.inner;
        let timeout = inner
            .nodes
            .first()
            .map_or(Duration::ZERO, |n| n.connect_timeout())
            .saturating_add(inner.config.node_timeout);
        let ping = Arc::new(Call::new(redis::cmd("PING")));
        let pending =
            (inner.nodes.iter().enumerate()).map(|(i, node)| fanout::send(i, node, &ping));
        let mut round = Round::new(pending, timeout);
        let collected = fanout::collect(
            &inner.nodes,
            &mut round,
            |_, _| NodeOutcome::Reachable,
            is_reachable,
            Stop::AtEnd,
        )
        .await;
        let report = collected.report(inner);
        if let Some(err) = inner.same_server() {
            return Err(err);
        }
        if collected.tally.verdict() == Verdict::Reached {
            Ok(report)
        } else {
            Err(Error::Unavailable {
                quorum: inner.quorum,
                report,
            })
        }
    }

    /// Deletes the lock on every node whatever its owner (the seeds' `reset`), for an
    /// operator clearing a lock whose holder is known to be gone. Returns what each node
    /// did: [`NodeOutcome::Released`] where the key existed, [`NodeOutcome::NotHeld`] where
    /// it did not.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty resource name.
    pub async fn reset(&self, resource: &str) -> Result<NodeReport> {
        if resource.is_empty() {
            return Err(Error::Config("empty resource name".into()));
        }
        let inner = &self.inner;
        let key = self.key(resource);
        let mut del = redis::cmd("DEL");
        del.arg(key);
        let mut round = Round::everywhere(inner, Call::new(del));
        let collected = fanout::collect(
            &inner.nodes,
            &mut round,
            |_, reply| match fanout::decode::<i64>(reply) {
                Ok(deleted) if deleted > 0 => NodeOutcome::Released,
                Ok(_) => NodeOutcome::NotHeld,
                Err(failed) => failed,
            },
            |_| false,
            Stop::AtEnd,
        )
        .await;
        Ok(collected.report(inner))
    }
}

fn is_reachable(o: &NodeOutcome) -> bool {
    *o == NodeOutcome::Reachable
}

/// How many times a woken waiter retries at once when its attempt fails, and after how
/// long: enough for the release that woke it to reach the other nodes, well inside the head
/// start the releasing client gives it.
const QUICK_RETRIES: u32 = 2;
const QUICK_RETRY_DELAY: Duration = Duration::from_millis(1);

/// How many doublings later a waiter's polls start while it is known to be in a waiting
/// list and listens: a release then wakes it, and its polls only cover silent releases
/// (expiry, a client with notifications off, a lost message). Every poll of a queued
/// waiter costs a gate round trip that a hand-off in progress refuses.
const LISTED_POLL_SHIFT: u32 = 2;

/// A pending [`Redlock::lock`] or [`Redlock::lock_many`] call; `.await` it.
#[derive(Debug)]
#[must_use = "a lock request does nothing until awaited"]
pub struct LockRequest {
    pub(crate) client: Redlock,
    resources: Vec<String>,
    ttl: Duration,
    wait: Option<Duration>,
    max_attempts: Option<u32>,
    pub(crate) auto_extend: Option<AutoExtend>,
    fencing: bool,
}

impl LockRequest {
    /// How long to keep retrying, overriding [`RedlockBuilder::wait`] for this call.
    /// Zero makes a single attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Caps the attempts of this call (at least 1), overriding
    /// [`RedlockBuilder::max_attempts`].
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    /// Mints a fencing token with the lock: a number that strictly increases from one
    /// holder of these resources to the next, read from and committed to a majority of
    /// nodes (one more round trip). See [`LockGuard::fencing_token`] and the
    /// [`fencing`](crate::fencing) module.
    pub fn fencing(mut self) -> Self {
        self.fencing = true;
        self
    }

    /// Keeps the lock extended in the background once acquired (see [`AutoExtend`]).
    pub fn auto_extend(mut self, policy: AutoExtend) -> Self {
        self.auto_extend = Some(policy);
        self
    }

    async fn acquire(self) -> Result<LockGuard> {
        let inner = &self.client.inner;
        let config = &inner.config;
        let plan = Plan::new(inner, self.resources, self.ttl, self.fencing)?;
        let max_attempts = self.max_attempts.or(config.max_attempts);
        if max_attempts == Some(0) {
            return Err(Error::Config("max attempts is zero; use at least 1".into()));
        }
        let started = Instant::now();
        let wait = self.wait.unwrap_or(config.wait);

        // Tasks of this client queue locally for their turn, so only one of them at a time
        // sends attempts for these resources. The turn passes on as soon as this call
        // returns (acquired or not): the next task then waits on Redis for our release.
        let _turn = match tokio::time::timeout(wait, inner.queue.turn(&plan.keys)).await {
            Ok(turn) => turn,
            Err(_) => {
                metrics::gave_up();
                return Err(Error::Timeout {
                    attempts: 0,
                    waited: started.elapsed(),
                    last: Box::new(Error::Contended {
                        report: NodeReport::default(),
                    }),
                });
            }
        };

        // Listen for releases if the subscriptions already run; otherwise they are started
        // on the first failed attempt (uncontended locks never pay for them).
        let mut listening = inner
            .notifier
            .as_ref()
            .filter(|n| n.is_started())
            .map(|n| n.register(&plan.keys));

        // This client just handed these keys to a waiting client: let it go first. While
        // listening, the first attempt asks the waiting-list node, where the woken client
        // has the turn, before it is sent; otherwise it waits for a head start.
        let mut gate = false;
        if let Some(until) = inner.queue.courtesy_until(&plan.keys) {
            if listening.is_some() {
                gate = true;
            } else {
                tokio::time::sleep_until(until.min(started + wait)).await;
            }
        }
        let mut attempts: u32 = 0;
        let mut retries: u32 = 0;
        // Whether the coming attempt follows a wake-up (a release chose us) or a quick
        // retry after one: a failure then puts us back at the head of the waiting list.
        let mut front = false;
        // Quick retries left since the last wake-up.
        let mut quick: u32 = 0;
        loop {
            // A guard of this client holds the lock: an attempt would fail. Wait for its
            // release to complete, or one poll interval in case the guard was forgotten.
            if let Some(freed) = inner.queue.held_locally(&plan.keys) {
                let notified = freed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let remaining = wait.saturating_sub(started.elapsed());
                if inner.queue.held_locally(&plan.keys).is_some() && !remaining.is_zero() {
                    let delay = config
                        .retry
                        .delay(retries, rand::random::<f64>())
                        .min(remaining);
                    tokio::select! {
                        () = &mut notified => {}
                        () = tokio::time::sleep(delay) => retries = retries.saturating_add(1),
                    }
                }
            }
            attempts = attempts.saturating_add(1);
            // While listening, each attempt also keeps this client in the waiting list of one
            // node, where our subscription stands (and in it after success when other local
            // tasks wait for the same keys): a release there pops the entry and must be
            // heard, and one list means one wake-up per release.
            let at_front = std::mem::take(&mut front);
            let enqueue = match (&mut listening, &inner.notifier) {
                (Some(registration), Some(notifier)) => notifier.wake_node().map(|node| {
                    registration.listing_on(node);
                    Enqueue {
                        node,
                        client: notifier.client_id(),
                        stay: inner.queue.has_waiters(&plan.keys),
                        front: at_front,
                    }
                }),
                _ => None,
            };
            // A waiter that was not woken asks the waiting-list node first, so it does not
            // take the lock from under the client a release woke, nor split the votes.
            let gated = std::mem::take(&mut gate) || (attempts > 1 && !at_front);
            let result = match enqueue.filter(|_| gated) {
                Some(e) => match gate_open(inner, &plan, e).await {
                    Ok(()) => {
                        metrics::wait_event("gate_open");
                        attempt(inner, &plan, enqueue).await
                    }
                    Err(refused) => {
                        metrics::wait_event("gate_refused");
                        Err(refused)
                    }
                },
                None => attempt(inner, &plan, enqueue).await,
            };
            let err = match result {
                Ok(mut guard) => {
                    if let (Some(registration), Some(e)) = (&mut listening, enqueue) {
                        // The acquire script took us off the waiting list where it set the
                        // key. Where it did not (the majority came from the other nodes), it
                        // listed us, as may an earlier wake node: those lists are left when
                        // the registration ends, or the next release there would wake us,
                        // who no longer wait. A list node that has not answered yet is
                        // settled from its answer, in the background (`Notifier::settle`).
                        if matches!(
                            guard.vote(e.node),
                            Some(NodeOutcome::Acquired | NodeOutcome::Pending)
                        ) {
                            registration.acquired_on(e.node);
                        }
                    }
                    metrics::acquired(started.elapsed());
                    if let Some(policy) = self.auto_extend {
                        guard.auto_extend(policy);
                    }
                    return Ok(guard);
                }
                Err(e) if e.is_retryable() => e,
                Err(e) => return Err(e),
            };
            let waited = started.elapsed();
            let remaining = wait.saturating_sub(waited);
            if remaining.is_zero() || max_attempts.is_some_and(|m| attempts >= m) {
                metrics::gave_up();
                return Err(Error::Timeout {
                    attempts,
                    waited,
                    last: Box::new(err),
                });
            }
            if let (None, Some(notifier)) = (&listening, &inner.notifier) {
                listening = Some(notifier.register(&plan.keys));
                // A release may have been announced before we listened: once the
                // subscriptions stand, try again at once instead of sleeping. Wait for
                // all of them (bounded): the wake node is the first node where we listen,
                // and one that comes up later would move us to another waiting list than
                // the one clients configured alike use.
                notifier
                    .wait_ready(inner.nodes.len(), remaining.min(config.node_timeout * 4))
                    .await;
                continue;
            }
            if quick > 0 && listening.is_some() {
                // Woken, yet the attempt failed: the release that woke us comes from the
                // node that keeps the waiting list, and the same release may not have
                // reached the other nodes yet when our SET did. Retry after a moment, still
                // at the head of the list, instead of waiting for the next release.
                quick -= 1;
                front = true;
                metrics::wait_event("quick_retry");
                tokio::time::sleep(QUICK_RETRY_DELAY.min(remaining)).await;
                continue;
            }
            // The waiting-list node answered the gate or the attempt: we are in its list.
            let listed = enqueue.is_some_and(|e| {
                err.report()
                    .and_then(|r| r.results().get(e.node))
                    .is_some_and(|r| !r.outcome.is_failure() && r.outcome != NodeOutcome::Pending)
            });
            let shift = if listed { LISTED_POLL_SHIFT } else { 0 };
            let delay = config
                .retry
                .delay(retries.saturating_add(shift), rand::random::<f64>())
                .min(remaining);
            retries = retries.saturating_add(1);
            match &listening {
                Some(registration) => {
                    tokio::select! {
                        () = registration.notified() => {
                            metrics::wait_event("woken");
                            front = true;
                            quick = QUICK_RETRIES;
                        }
                        () = tokio::time::sleep(delay) => metrics::wait_event("poll"),
                    }
                }
                None => {
                    tokio::time::sleep(delay).await;
                    metrics::wait_event("poll");
                }
            }
        }
    }
}

impl IntoFuture for LockRequest {
    type Output = Result<LockGuard>;
    type IntoFuture = BoxFuture<'static, Result<LockGuard>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.acquire())
    }
}

/// A validated acquisition: the resources, their keys and the TTL in whole milliseconds.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) resources: Arc<[String]>,
    pub(crate) keys: Arc<[String]>,
    pub(crate) ttl: Duration,
    pub(crate) fencing: bool,
}

impl Plan {
    fn new(
        inner: &Inner,
        mut resources: Vec<String>,
        ttl: Duration,
        fencing: bool,
    ) -> Result<Plan> {
        if resources.is_empty() {
            return Err(Error::Config("no resource names given".into()));
        }
        if resources.iter().any(String::is_empty) {
            return Err(Error::Config("empty resource name".into()));
        }
        // Sorted and unique: the order callers pass must not matter.
        resources.sort_unstable();
        resources.dedup();
        let config = &inner.config;
        let ttl = inner.accept_ttl(ttl)?;
        let keys: Arc<[String]> = resources
            .iter()
            .map(|r| keys::lock(&config.key_prefix, r))
            .collect();
        Ok(Plan {
            resources: resources.into(),
            keys,
            ttl,
            fencing,
        })
    }

    fn ttl_ms(&self) -> u64 {
        whole_ms(self.ttl)
    }

    /// The expiry of the keys' waiting lists: twice the TTL, as the acquire script sets it.
    fn list_ttl_ms(&self) -> u64 {
        self.ttl_ms().saturating_mul(2)
    }
}

/// Whole milliseconds of `d`, saturating.
pub(crate) fn whole_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A fresh 128-bit random token, as 32 hex digits.
fn new_token() -> Arc<str> {
    let mut hex = [0u8; uuid::fmt::Simple::LENGTH];
    let text = uuid::Uuid::from_bytes(rand::random::<[u8; 16]>())
        .simple()
        .encode_lower(&mut hex);
    Arc::from(&*text)
}

/// One acquisition attempt with a fresh token, in a `quorum_lock.acquire` span whose
/// `votes` and `outcome` fields are filled in when it ends. `enqueue` says how the attempt
/// keeps this client in the waiting lists, when it listens for releases.
async fn attempt(
    inner: &Arc<Inner>,
    plan: &Plan,
    enqueue: Option<Enqueue<'_>>,
) -> Result<LockGuard> {
    let span = tracing::debug_span!(
        "quorum_lock.acquire",
        resources = ?plan.resources,
        nodes = inner.nodes.len(),
        quorum = inner.quorum,
        votes = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    attempt_inner(inner, plan, enqueue).instrument(span).await
}

async fn attempt_inner(
    inner: &Arc<Inner>,
    plan: &Plan,
    enqueue: Option<Enqueue<'_>>,
) -> Result<LockGuard> {
    let token = new_token();
    // Armed before the first await: if this future is dropped at any point, whatever it may
    // have set is released on every node in the background.
    let mut holding = Holding::new(Arc::clone(inner), Arc::clone(&plan.keys), token);
    let n = inner.nodes.len();
    let start = Instant::now();
    let (mut round, lives) = acquire_round(inner, plan, &holding, enqueue);
    let (mut collected, reads) = collect_votes(inner, plan, &mut round, lives.as_deref()).await;
    let admissions = decide_votes(inner, plan, &reads, &mut collected);
    if let Some(err) = inner.same_server() {
        drop(round);
        holding.release_on(0..n, requeue(plan, enqueue)).await;
        return Err(err);
    }
    let mut failure = None;

    if collected.tally.verdict() == Verdict::Reached {
        // The waiting-list node's answer, if it is still to come: it says whether the
        // acquire script took us off the list there or listed us (see `settle` below).
        let list_reply = enqueue
            .filter(|e| {
                collected
                    .outcomes
                    .get(e.node)
                    .is_some_and(|(o, _)| *o == NodeOutcome::Pending)
            })
            .and_then(|e| Some((e.node, round.take(e.node)?)));
        // The slower nodes still get their SET (queued on their connections, or sent once
        // the connection is up): copies beyond the bare majority let the lock survive, and
        // be extended through, the loss of one of the first nodes. Every release of this
        // token closes the attempt's send gate first: a SET already queued is ahead of the
        // release on the same connection, and one not yet queued is never sent.
        round.finish_in_background(inner);
        let fencing_token = if plan.fencing {
            match commit_fence(inner, plan, holding.token(), &reads, &admissions, &collected).await {
                Ok(fence) => Some(fence),
                Err(e) => {
                    failure = Some(e);
                    None
                }
            }
        } else {
            None
        };
        let decided = Instant::now();
        let elapsed = decided - start;
        match (
            failure.is_none(),
            quorum::validity(plan.ttl, elapsed, inner.config.drift_factor),
        ) {
            (true, Some(validity)) => {
                holding.hold_locally();
                if let (Some((node, reply)), Some(notifier)) = (list_reply, &inner.notifier) {
                    // Acquired before the waiting-list node answered: whether that
                    // node's list still holds us is known only from its answer.
                    notifier.settle(Arc::clone(&plan.keys), node, reply);
                }
                metrics::attempt("acquired", elapsed);
                let span = tracing::Span::current();
                span.record("votes", collected.tally.yes());
                span.record("outcome", "acquired");
                tracing::debug!(?elapsed, ?validity, ?fencing_token, "acquired");
                return Ok(LockGuard::new(
                    holding,
                    Arc::clone(&plan.resources),
                    plan.ttl,
                    decided + validity,
                    collected.outcomes,
                    fencing_token,
                ));
            }
            (true, None) => {
                metrics::attempt("validity_spent", elapsed);
                failure = Some(Error::ValiditySpent {
                    elapsed,
                    report: collected.report(inner),
                });
            }
            (false, _) => metrics::attempt("unavailable", elapsed),
        }
        // The keys may be anywhere now: release everywhere.
        if let Some((_, reply)) = list_reply {
            reply.finish_in_background(inner);
        }
        holding.release_on(0..n, requeue(plan, enqueue)).await;
    } else {
        // Requests still in flight are dropped: one already written to its connection is
        // followed there by the release below, and one not yet written is never sent.
        drop(round);
        // Release wherever our token may be. Nodes that answered "held by another" or
        // "wrong type" certainly do not have it; every other node might (a timed-out SET
        // may still have been applied).
        let maybe_ours: Vec<usize> = collected
            .outcomes
            .iter()
            .enumerate()
            .filter(|(_, (o, _))| !matches!(o, NodeOutcome::HeldByOther | NodeOutcome::WrongType))
            .map(|(i, _)| i)
            .collect();
        holding.release_on(maybe_ours, requeue(plan, enqueue)).await;
    }

    let took = start.elapsed();
    let err = match failure {
        Some(e) => e,
        None if n - collected.unavailable() < inner.quorum => {
            metrics::attempt("unavailable", took);
            Error::Unavailable {
                quorum: inner.quorum,
                report: collected.report(inner),
            }
        }
        None => {
            metrics::attempt("contended", took);
            Error::Contended {
                report: collected.report(inner),
            }
        }
    };
    let span = tracing::Span::current();
    span.record("votes", collected.tally.yes());
    span.record("outcome", tracing::field::display(&err));
    tracing::debug!(report = %err.report().map(ToString::to_string).unwrap_or_default(), "attempt failed");
    Err(err)
}

/// Asks the waiting-list node whether this waiter, which no release woke, may try now
/// (see [`scripts::GATE`]). Refused (a release gave another client the turn), it returns [`Error::Contended`] with that node's answer only (the
/// others show as not asked, [`NodeOutcome::Pending`]), and the client is in the waiting
/// list. A node that fails to answer opens the gate: the attempt then decides.
async fn gate_open(inner: &Inner, plan: &Plan, e: Enqueue<'_>) -> Result<()> {
    let call = Call::script(&scripts::GATE, &plan.keys)
        .arg(e.client)
        .arg(scripts::flag(e.front))
        .arg(plan.list_ttl_ms());
    let start = Instant::now();
    let mut round = Round::broadcast(inner, call, [e.node]);
    let collected = fanout::collect(
        &inner.nodes,
        &mut round,
        |_, reply| match fanout::decode::<i64>(reply) {
            Ok(1) => NodeOutcome::Acquired,
            Ok(_) => NodeOutcome::HeldByOther,
            Err(failed) => failed,
        },
        is_acquired,
        Stop::AtEnd,
    )
    .await;
    let refused = collected
        .outcomes
        .get(e.node)
        .is_some_and(|(o, _)| *o == NodeOutcome::HeldByOther);
    if !refused {
        return Ok(());
    }
    metrics::attempt("contended", start.elapsed());
    Err(Error::Contended {
        report: collected.report(inner),
    })
}

/// How a failed attempt's clean-up puts this client back in the waiting list: where the
/// attempt's `SET` succeeded on the waiting-list node, the acquire script took the client
/// off that list, and a client that still waits must be on it to be woken.
fn requeue<'a>(plan: &Plan, enqueue: Option<Enqueue<'a>>) -> Option<Requeue<'a>> {
    enqueue.map(|e| Requeue {
        node: e.node,
        client: e.client,
        front: e.front,
        list_ttl_ms: plan.list_ttl_ms(),
    })
}

/// How an attempt keeps this client in the waiting list of the keys (see
/// [`scripts::ACQUIRE`]).
#[derive(Debug, Clone, Copy, Default)]
struct Enqueue<'a> {
    /// The node whose waiting list we join.
    node: usize,
    /// Our client id in waiting lists.
    client: &'a str,
    /// Stay listed after success: other tasks of this client wait for the keys.
    stay: bool,
    /// Rejoin at the head after failure: a release woke us and someone overtook us.
    front: bool,
}

/// Waits for the acquire replies of one attempt until its outcome is certain (see
/// [`ballot::settled`]), keeping what each node said for the ballot. `lives`: the fast
/// path's plan, the life each node was seen admitted in and its completeness (for plain
/// `SET NX PX` replies).
/// Outcomes of yes votes are provisional until [`decide_votes`].
async fn collect_votes(
    inner: &Inner,
    plan: &Plan,
    round: &mut Round,
    lives: Option<&[(Arc<str>, bool)]>,
) -> (Collected, Vec<Option<Read>>) {
    let n = inner.nodes.len();
    let quarantine = inner.config.quarantine;
    // Shared by the two closures below, one at a time (a `Mutex` for `Sync`: the future
    // is sent between threads).
    let reads: std::sync::Mutex<Vec<Option<Read>>> = std::sync::Mutex::new(vec![None; n]);
    let lock = || reads.lock().unwrap_or_else(|p| p.into_inner());
    let collected = fanout::collect_until(
        &inner.nodes,
        round,
        |i, reply| {
            let Some(node) = inner.nodes.get(i) else {
                return NodeOutcome::Failed("no such node".into());
            };
            let read = match read_vote(node, reply, lives.and_then(|l| l.get(i))) {
                Ok(read) => read,
                Err(failed) => return failed,
            };
            let outcome = match ballot::early(&read, n, quarantine) {
                _ if !read.set => NodeOutcome::HeldByOther,
                ballot::Early::Yes { .. } => NodeOutcome::Acquired,
                // Decided once the answers are in (`decide_votes`).
                _ => NodeOutcome::Quarantined {
                    reason: QuarantineReason::RecordUnread,
                    remaining: None,
                },
            };
            if let Some(slot) = lock().get_mut(i) {
                *slot = Some(read);
            }
            outcome
        },
        is_acquired,
        |outcomes, _| {
            let pending = outcomes
                .iter()
                .filter(|(o, _)| *o == NodeOutcome::Pending)
                .count();
            ballot::settled(&lock(), pending, inner.quorum, plan.fencing, quarantine)
        },
    )
    .await;
    let reads = reads.into_inner().unwrap_or_else(|p| p.into_inner());
    (collected, reads)
}

/// What one acquire reply says for the ballot: a plain `SET NX PX` (`OK` or nil) or the
/// acquire script's reply, with the facts the node's connect learnt.
fn read_vote(
    node: &Node,
    reply: Value,
    life: Option<&(Arc<str>, bool)>,
) -> std::result::Result<Read, NodeOutcome> {
    let facts = node.facts();
    let mut read = Read {
        set: false,
        run_id: facts.as_ref().and_then(|f| f.run_id.clone()),
        uptime: (facts.as_ref()).and_then(|f| Some(ballot::aged(f.uptime?, f.at.elapsed()))),
        persistence: facts.map_or(Persistence::Unknown, |f| f.persistence),
        marker: Seen::Read(None),
        record_ms: None,
        fence: None,
        fence_life: None,
    };
    if let Some((life, complete)) = life {
        read.marker = Seen::Cached {
            life: Arc::clone(life),
            complete: *complete,
        };
    }
    match reply {
        Value::Okay => read.set = true,
        Value::Nil => {}
        reply => {
            let got = scripts::acquire_reply(reply)?;
            read.set = got.set;
            read.marker = Seen::Read(got.marker.map(|m| (m.life, m.complete)));
            read.record_ms = got.record_ms;
            read.fence = got.fence;
            read.fence_life = got.fence_life;
        }
    }
    Ok(read)
}

/// Decides every answering node's admission once the answers are in (restart quarantine
/// v2, [`ballot`]), sets the outcomes of the yes votes accordingly (kept out:
/// [`NodeOutcome::Quarantined`] with why and for how long), counts them in the metrics,
/// remembers where a node was seen admitted (the fast path), and writes the markers the
/// rules ask for before anything else is sent to those nodes.
fn decide_votes(
    inner: &Arc<Inner>,
    plan: &Plan,
    reads: &[Option<Read>],
    collected: &mut Collected,
) -> Vec<Option<Admission>> {
    let quarantine = inner.config.quarantine;
    let view = ballot::view(reads);
    let mut marks = Vec::new();
    let admissions = (reads.iter().zip(&inner.nodes).enumerate())
        .map(|(i, (read, node))| {
            let read = read.as_ref()?;
            let admission = ballot::admit(read, &view, inner.config.drift_factor);
            if read.set
                && let Some(slot) = collected.outcomes.get_mut(i)
            {
                // With quarantine off every yes counts; the marker is still kept, so that
                // other clients' quarantine sees the nodes this one admitted.
                if quarantine {
                    slot.0 = ballot::outcome(&admission);
                }
                node.count_vote(match &slot.0 {
                    NodeOutcome::Quarantined { reason, .. } => Some(reason.as_str()),
                    _ => None,
                });
            }
            let (Some(life), Seen::Read(marker)) = (&read.run_id, &read.marker) else {
                return Some(admission);
            };
            // The script raised the record to this TTL, atomically with its `SET NX`.
            let record_ms = read.record_ms.unwrap_or(0).max(plan.ttl_ms());
            match admission {
                Admission::Votes {
                    mark: true,
                    complete,
                } => marks.push((i, Arc::clone(life), complete, record_ms)),
                Admission::Votes { complete, .. } if marker.is_some() => {
                    node.seen(life, Some(complete), record_ms);
                }
                _ => node.seen(life, None, record_ms),
            }
            Some(admission)
        })
        .collect();
    collected.recount(is_acquired);
    send_marks(inner, marks);
    admissions
}

/// Writes the markers `(node, life, complete, record)` that admissions asked for: each is
/// queued on its node's connection before this returns, so the fence commit that may
/// follow finds it; once a node acknowledges, this client takes the fast path there.
fn send_marks(inner: &Arc<Inner>, marks: Vec<(usize, Arc<str>, bool, u64)>) {
    if marks.is_empty() {
        return;
    }
    let pending = marks.iter().filter_map(|(i, life, complete, _)| {
        let call = Call::script(&scripts::MARK, &[])
            .arg(&**life)
            .arg(scripts::flag(*complete));
        Some(fanout::send(*i, inner.nodes.get(*i)?, &Arc::new(call)))
    });
    let mut round = Round::new(pending, inner.config.node_timeout);
    round.start();
    let nodes = inner.nodes.clone();
    inner.background.spawn(async move {
        fanout::collect(
            &nodes,
            &mut round,
            |i, reply| {
                let written = fanout::decode::<i64>(reply);
                if let (Some((_, life, complete, record_ms)), Some(node), Ok(written)) =
                    (marks.iter().find(|m| m.0 == i), nodes.get(i), written)
                {
                    node.seen(life, Some(*complete && written == 1), *record_ms);
                }
                NodeOutcome::Reachable
            },
            |_| false,
            Stop::AtEnd,
        )
        .await;
    });
}

/// Second round of a fencing acquisition: the new token is one above the highest counter
/// that can be trusted ([`ballot::token`]: a majority of them is needed), and is committed
/// next to the lock on a majority of voting nodes before the guard exists. Any two
/// majorities share a node, so the next holder reads a counter at least this high and
/// mints a larger one.
async fn commit_fence(
    inner: &Arc<Inner>,
    plan: &Plan,
    token: &str,
    reads: &[Option<Read>],
    admissions: &[Option<Admission>],
    acquired: &Collected,
) -> Result<u64> {
    inner.warn_unfenced();
    let quarantine = inner.config.quarantine;
    let fence = match ballot::token(reads, admissions, inner.config.fence_floor, quarantine) {
        NextToken::Mint(fence) => fence,
        NextToken::Undecidable { trusted, needed } => {
            return Err(Error::FenceUnknown {
                trusted,
                needed,
                report: acquired.report(inner),
            });
        }
    };
    let call = Call::script(&scripts::FENCE, &plan.keys)
        .arg(token)
        .arg(fence);
    let mut round = Round::everywhere(inner, call);
    let voted = |i: usize| {
        acquired
            .outcomes
            .get(i)
            .is_some_and(|(o, _)| *o == NodeOutcome::Acquired)
    };
    let collected = fanout::collect(
        &inner.nodes,
        &mut round,
        |i, reply| match fanout::decode::<i64>(reply) {
            // Only where the acquisition's vote counted.
            Ok(1) if voted(i) => NodeOutcome::Acquired,
            Ok(1) => acquired.outcomes.get(i).map_or(NodeOutcome::Pending, |o| o.0.clone()),
            Ok(_) => NodeOutcome::NotHeld,
            Err(failed) => failed,
        },
        is_acquired,
        Stop::WhenCertain,
    )
    .await;
    round.finish_in_background(inner);
    if collected.tally.verdict() == Verdict::Reached {
        Ok(fence)
    } else {
        Err(Error::Unavailable {
            quorum: inner.quorum,
            report: collected.report(inner),
        })
    }
}

fn is_acquired(o: &NodeOutcome) -> bool {
    *o == NodeOutcome::Acquired
}

/// The acquire requests of one attempt: plain `SET NX PX` for one key, the all-or-nothing
/// script for several keys, to keep the waiting list or to read fencing counters. Every
/// node gets the same command except the one whose waiting list this client joins.
///
/// The plain `SET NX PX` is the fast path: only when every node's ensemble record is known
/// to cover this TTL in its current life and, with restart quarantine on, every node was
/// seen admitted in that life (returned: the life per node, which a reply then counts
/// for). Otherwise every node gets the script, which raises the record and reads the
/// marker and the record for the ballot. Clients with quarantine off raise the record
/// too: other clients' quarantine protects their leases as well.
fn acquire_round(
    inner: &Inner,
    plan: &Plan,
    holding: &Holding,
    enqueue: Option<Enqueue<'_>>,
) -> (Round, Option<Vec<(Arc<str>, bool)>>) {
    let ttl_ms = plan.ttl_ms();
    let token = &**holding.token();
    let quarantine = inner.config.quarantine;
    let lives: Option<Vec<(Arc<str>, bool)>> = (inner.nodes.iter())
        .map(|n| n.fast_path(ttl_ms, quarantine))
        .collect();
    let plain = lives.is_some();
    let call = |enqueue: Option<Enqueue<'_>>| match (&plan.keys[..], enqueue, plan.fencing) {
        ([key], None, false) if plain => {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
            Call::new(cmd).gated(holding.gate())
        }
        (keys, enqueue, fencing) => {
            let enqueue = enqueue.unwrap_or_default();
            Call::script(&scripts::ACQUIRE, keys)
                .arg(token)
                .arg(ttl_ms)
                .arg(enqueue.client)
                .arg(scripts::flag(enqueue.stay))
                .arg(scripts::flag(fencing))
                .arg(scripts::flag(enqueue.front))
                .gated(holding.gate())
        }
    };
    let special = enqueue.map(|e| (e.node, call(enqueue)));
    let round = Round::broadcast_with(inner, call(None), 0..inner.nodes.len(), special);
    (round, lives)
}
