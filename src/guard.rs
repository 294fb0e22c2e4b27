//! The held lock: an owned guard with validity, extend, release and the lost-lock signal,
//! and the clean-up that runs when a guard or an unfinished acquisition is dropped.

use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use redis::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::client::{Inner, whole_ms};
use crate::error::{Error, Result};
use crate::extend::{self, AutoExtend};
use crate::fanout::{self, Round, Stop};
use crate::lease::{Lease, LockContext, LostReason, LostSignal};
use crate::metrics;
use crate::node::{Call, SendGate};
use crate::protocol::{keys, replies, scripts};
use crate::queue::LocalHold;
use crate::quorum::Verdict;
use crate::report::{NodeOutcome, NodeReport};

/// A token that may be stored on some nodes, with the duty to remove it.
///
/// While armed, dropping it sends compare-and-delete to every node from a spawned task.
/// It is armed from before an attempt's first request until the lock is released, so no
/// cancellation point can leave a key behind (beyond its TTL when no runtime is left).
pub(crate) struct Holding {
    inner: Arc<Inner>,
    keys: Arc<[String]>,
    token: Arc<str>,
    /// Closed by every release of this token before it sends (see [`SendGate`]).
    gate: Arc<SendGate>,
    armed: bool,
    /// Set once acquired: tells the local queue when our release has completed.
    local: Option<LocalHold>,
}

impl Holding {
    pub(crate) fn new(inner: Arc<Inner>, keys: Arc<[String]>, token: Arc<str>) -> Self {
        Holding {
            inner,
            keys,
            token,
            gate: Arc::new(SendGate::new()),
            armed: true,
            local: None,
        }
    }

    /// Marks the keys as held by this client (see [`LocalQueue`](crate::queue)).
    pub(crate) fn hold_locally(&mut self) {
        self.local = Some(self.inner.queue.hold(&self.keys));
    }

    pub(crate) fn token(&self) -> &Arc<str> {
        &self.token
    }

    /// The gate of the requests that may set this token's keys.
    pub(crate) fn gate(&self) -> &Arc<SendGate> {
        &self.gate
    }

    /// Compare-and-delete on the nodes in `which`, waking the next waiting client when
    /// notifications are on and `announce` is set. Closes the gate first, so no request that
    /// could set a key of this token is written after the release.
    fn release_round(&self, which: impl IntoIterator<Item = usize>, announce: bool) -> Round {
        self.gate.close();
        Round::broadcast(&self.inner, self.release_call(announce), which)
    }

    /// The release script's call; when it announces, the client it wakes gets the turn
    /// for two node timeouts (see [`scripts::GATE`]).
    fn release_call(&self, announce: bool) -> Call {
        let call = Call::script(&scripts::RELEASE, &self.keys).arg(&*self.token);
        let call = if announce && self.inner.notifier.is_some() {
            call.arg(whole_ms(self.inner.config.node_timeout.saturating_mul(2)).max(1))
        } else {
            call.arg("0")
        };
        call.arg(keys::WAKE_CHANNEL_PREFIX)
    }

    /// Turns a release reply `{deleted, woke}` into an outcome.
    fn released(&self, reply: Value) -> NodeOutcome {
        match replies::release(reply) {
            Ok((deleted, woke)) => {
                if woke {
                    // Another client was woken to take over: let it go first (see
                    // `LocalQueue::handed_off`).
                    self.inner
                        .queue
                        .handed_off(&self.keys, self.inner.config.node_timeout);
                }
                if deleted > 0 {
                    NodeOutcome::Released
                } else {
                    NodeOutcome::NotHeld
                }
            }
            Err(failed) => failed,
        }
    }

    /// Cleans up after a failed attempt: releases on the nodes in `which`, waiting for every
    /// answer (bounded by the node timeout), then disarms. Wakes nobody: no lock was held,
    /// and a waiter woken now would only race this client's next attempt (or the client a
    /// real release woke, whose attempt this one may just have spoiled). With `requeue`,
    /// the release on the waiting-list node also puts this client back in the list.
    pub(crate) async fn release_on(
        &mut self,
        which: impl IntoIterator<Item = usize>,
        requeue: Option<Requeue<'_>>,
    ) {
        let special = requeue.map(|r| {
            let call = self
                .release_call(false)
                .arg(r.client)
                .arg(scripts::flag(r.front))
                .arg(r.list_ttl_ms);
            (r.node, call)
        });
        self.gate.close();
        let mut round =
            Round::broadcast_with(&self.inner, self.release_call(false), which, special);
        let this = &*self;
        fanout::collect(
            &self.inner.nodes,
            &mut round,
            |_, r| this.released(r),
            |_| false,
            Stop::AtEnd,
        )
        .await;
        self.armed = false;
    }
}

/// Where and how a failed attempt's clean-up puts its client back in the waiting list
/// (see [`scripts::RELEASE`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requeue<'a> {
    /// The waiting-list node.
    pub(crate) node: usize,
    /// The client id.
    pub(crate) client: &'a str,
    /// At the head of the list (a release woke this client), else at its tail.
    pub(crate) front: bool,
    /// The list's expiry.
    pub(crate) list_ttl_ms: u64,
}

impl Drop for Holding {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.gate.close();
        // Never block or do I/O here: hand the release to the runtime if there is one,
        // otherwise the TTL frees the lock.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let n = self.inner.nodes.len();
                let mut round = self.release_round(0..n, true);
                let local = self.local.take();
                let inner = Arc::clone(&self.inner);
                handle.spawn(async move {
                    fanout::collect(
                        &inner.nodes,
                        &mut round,
                        |_, _| NodeOutcome::Released,
                        |_| false,
                        Stop::AtEnd,
                    )
                    .await;
                    // Only now may the next local task try.
                    drop(local);
                });
                metrics::released("drop");
            }
            Err(_) => metrics::released("skipped"),
        }
    }
}

/// A lock held on a majority of nodes.
///
/// Owned and `'static`: move it into tasks freely. The lock is only safe to rely on while
/// [`validity`](Self::validity) is not zero; after that another client may acquire it.
/// [`lost_signal`](Self::lost_signal) tells when that moment comes. Release it with
/// [`release`](Self::release) to learn the outcome; dropping it releases in a spawned task
/// (when a tokio runtime is available) and never blocks.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    holding: Holding,
    lease: Arc<Lease>,
    extender: Option<JoinHandle<()>>,
    acquired_at: Instant,
    /// What each node answered to the acquisition, made into a report when asked for.
    votes: Vec<(NodeOutcome, Duration)>,
    report: OnceLock<NodeReport>,
    fencing_token: Option<u64>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resources", &self.lease.resources)
            .field("token", &self.lease.token)
            .field("validity", &self.validity())
            .field("auto_extend", &self.extender.is_some())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        holding: Holding,
        resources: Arc<[String]>,
        ttl: Duration,
        deadline: Instant,
        votes: Vec<(NodeOutcome, Duration)>,
        fencing_token: Option<u64>,
    ) -> Self {
        let lease = Arc::new(Lease::new(
            Arc::clone(&holding.inner),
            Arc::clone(&holding.keys),
            resources,
            Arc::clone(&holding.token),
            deadline,
            ttl,
        ));
        LockGuard {
            holding,
            lease,
            extender: None,
            acquired_at: Instant::now(),
            votes,
            report: OnceLock::new(),
            fencing_token,
        }
    }

    /// The fencing token minted with this lock when it was requested with
    /// [`LockRequest::fencing`](crate::LockRequest::fencing): strictly greater than the
    /// token of every earlier holder of these resources. Pass it to the storage you write
    /// to and let it reject writes that carry an older token.
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    /// Starts extending the lock in the background (see [`AutoExtend`]); replaces any
    /// extender already running. Needs a tokio runtime; without one this does nothing.
    pub fn auto_extend(&mut self, policy: AutoExtend) {
        if let Some(old) = self.extender.take() {
            old.abort();
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            // The acquisition's own duration is the first round-trip estimate.
            let rtt = self
                .votes
                .iter()
                .map(|(_, latency)| *latency)
                .max()
                .unwrap_or_default();
            self.extender = Some(handle.spawn(extend::run(
                Arc::clone(&self.lease),
                policy,
                self.acquired_at,
                rtt,
            )));
        }
    }

    /// The resource name (the first, sorted, for a [`lock_many`](crate::Redlock::lock_many)
    /// guard).
    pub fn resource(&self) -> &str {
        self.lease.resources.first().map_or("", String::as_str)
    }

    /// Every resource this guard holds, sorted.
    pub fn resources(&self) -> &[String] {
        &self.lease.resources
    }

    /// The random token stored on the nodes: 128 bits as 32 hex digits.
    pub fn token(&self) -> &str {
        &self.lease.token
    }

    /// The TTL of the last successful acquire or extend.
    pub fn ttl(&self) -> Duration {
        self.lease.state().ttl
    }

    /// How much longer the lock is safely held: zero once the validity ran out or the lock
    /// is known lost.
    pub fn validity(&self) -> Duration {
        self.lease.validity()
    }

    /// The instant (on tokio's monotonic clock) at which the validity runs out.
    pub fn deadline(&self) -> Instant {
        self.lease.state().deadline
    }

    /// Whether the validity has not yet run out and the lock is not known lost.
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// What each node answered when the lock was acquired.
    pub fn report(&self) -> &NodeReport {
        self.report
            .get_or_init(|| fanout::report(&self.holding.inner, &self.votes))
    }

    /// What node `index` answered to the acquisition.
    pub(crate) fn vote(&self, index: usize) -> Option<&NodeOutcome> {
        self.votes.get(index).map(|(outcome, _)| outcome)
    }

    /// A signal that fires when this lock can no longer be assumed held.
    pub fn lost_signal(&self) -> LostSignal {
        self.lease.signal()
    }

    /// A cheap, cloneable view of this lock for code running under it.
    pub fn context(&self) -> LockContext {
        LockContext::new(Arc::clone(&self.lease))
    }

    /// Resets the TTL to `ttl` on every node that still holds our token, and succeeds when
    /// a majority did so in time to leave a positive validity. Returns the new validity.
    ///
    /// A failed extension never releases the lock. Nodes may still have applied it, so
    /// the guard keeps the lower bound of what they may hold: the old validity, or the new
    /// TTL's counted from the send when that ends sooner (an extension to a shorter TTL).
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the validity had already run out or a majority no longer has
    /// our token (the lost signal then fires); [`Error::Unavailable`] when too many nodes
    /// failed to answer (the lock may still be held: retry while
    /// [`validity`](Self::validity) remains); [`Error::ValiditySpent`] when the majority
    /// answered too late; [`Error::Config`] for an unusable TTL.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the new TTL on some nodes; the guard's validity is then
    /// the same lower bound as after a failure.
    pub async fn extend(&self, ttl: Duration) -> Result<Duration> {
        self.lease.extend(ttl).await
    }

    /// Releases the lock on every node (compare-and-delete: another owner's key is never
    /// touched) and reports what happened. Returns as soon as the outcome is certain (with
    /// wake-ups on, also once the node keeping the waiting lists answered); requests to
    /// slower nodes finish in the background.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the validity had run out before the release, or fewer than a
    /// majority still had our token (it expired or was taken over), like the seeds'
    /// `ExpiredLockError`; whatever of ours was still on the nodes is deleted all the same.
    /// [`Error::Unavailable`] when too many nodes failed to answer to tell. Either way
    /// nothing of ours is left except on nodes that did not answer, where the TTL removes
    /// it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future releases in the background instead.
    pub async fn release(mut self) -> Result<NodeReport> {
        let span = tracing::debug_span!(
            "quorum_lock.release",
            resources = ?self.lease.resources,
            votes = tracing::field::Empty,
            outcome = tracing::field::Empty,
        );
        let result = self.release_inner().instrument(span.clone()).await;
        match &result {
            Ok(report) => {
                span.record("votes", report.count(&NodeOutcome::Released));
                span.record("outcome", "released");
            }
            Err(e) => {
                span.record("outcome", tracing::field::display(e));
            }
        }
        result
    }

    async fn release_inner(&mut self) -> Result<NodeReport> {
        self.stop_extender();
        let expired = self.lease.validity().is_zero();
        if expired {
            // Released after its validity ran out: it was lost before (counted once).
            self.lease.mark_lost(LostReason::Expired);
        }
        let inner = Arc::clone(&self.holding.inner);
        let n = inner.nodes.len();
        let mut round = self.holding.release_round(0..n, true);
        // Local hand-off: the next task of this client waiting for these keys may send its
        // acquire as soon as our release is on the connections. Each node applies the two in
        // order, so its SET succeeds wherever our delete did, one round trip earlier than if
        // it waited for our answers.
        round.start();
        drop(self.holding.local.take());
        // With wake-ups on, hear the node that keeps the waiting lists even when it is not
        // among the first answers: its reply says whether another client was woken, and
        // only then does this client let it go first on its next `lock()`.
        // A release that finds no majority waits for every answer (bounded by the node
        // timeout): "not held" and "unavailable" are told apart by what each node said.
        let stop = Stop::WhenReached(inner.notifier.as_ref().and_then(|n| n.wake_node()));
        let holding = &self.holding;
        let collected = fanout::collect(
            &inner.nodes,
            &mut round,
            |_, r| holding.released(r),
            |o| *o == NodeOutcome::Released,
            stop,
        )
        .await;
        round.finish_in_background(&inner);
        self.holding.armed = false;
        metrics::released("explicit");
        let report = collected.report(&inner);
        if expired {
            // Whatever was still on the nodes is gone now, but the lock was not safely held
            // up to this release: say so, like the seeds' `ExpiredLockError`.
            Err(Error::NotHeld { report })
        } else if collected.tally.verdict() == Verdict::Reached {
            Ok(report)
        } else if collected.definitely_not_held(inner.quorum) {
            Err(Error::NotHeld { report })
        } else {
            Err(Error::Unavailable {
                quorum: inner.quorum,
                report,
            })
        }
    }

    fn stop_extender(&mut self) {
        if let Some(extender) = self.extender.take() {
            extender.abort();
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.stop_extender();
        if self.lease.validity().is_zero() {
            self.lease.mark_lost(LostReason::Expired);
        }
        self.lease.mark_lost(LostReason::Released);
        metrics::held(self.acquired_at.elapsed());
        // Then `Holding` drops and releases if still armed.
    }
}
