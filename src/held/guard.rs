//! The held lock: the public owned guard with validity, extend, release and the lost-lock
//! signal. The release itself, and the clean-up when a guard is dropped, are in
//! [`release`](crate::held::release).

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::ensemble::Held;
use crate::error::Error;
use crate::error::LostReason;
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::held::extend::{self, AutoExtend};
use crate::held::lease::{Lease, LockContext, LostSignal, token_prefix};
use crate::held::release::Holding;
use crate::held::ticket::LockTicket;
use crate::metrics;
use crate::net::answers;
use crate::report::{NodeOutcome, NodeReport};

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
    fencing_token: Option<FencingToken>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token's first digits only, as `status` shows them: with the whole value,
        // anyone reading a log could adopt the lock with a forged ticket.
        f.debug_struct("LockGuard")
            .field("resources", &self.lease.resources)
            .field("token", &token_prefix(&self.lease.token))
            .field("validity", &self.validity())
            .field("auto_extend", &self.extender.is_some())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        mut holding: Holding,
        resources: Arc<[String]>,
        ttl: Duration,
        deadline: Instant,
        votes: Vec<(NodeOutcome, Duration)>,
        fencing_token: Option<FencingToken>,
    ) -> Self {
        let lease = Arc::new(Lease::new(&holding, resources, deadline, ttl));
        let held: Weak<dyn Held> = Arc::downgrade(&lease) as Weak<dyn Held>;
        holding.ensemble().register(held);
        // Registered: a shutdown from now on releases it.
        holding.registered();
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
    ///
    /// Deprecated: use [`LockRequest::fenced`](crate::LockRequest::fenced) (or
    /// [`Redlock::try_lock_fenced`](crate::Redlock::try_lock_fenced),
    /// `.fenced().run(...)`): its [`FencedGuard`](crate::FencedGuard) has a
    /// [`FencingToken`] that cannot be absent, with an `i64` view for SQL.
    #[deprecated(
        since = "0.1.0",
        note = "request the lock with `.fenced()` (or `try_lock_fenced`) and use \
                `FencedGuard::fencing_token`, a `FencingToken` that cannot be absent"
    )]
    pub fn fencing_token(&self) -> Option<u64> {
        self.fencing_token.map(FencingToken::get)
    }

    /// The fencing token, when the lock was requested with one.
    pub(crate) fn fence(&self) -> Option<FencingToken> {
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
            let task = handle.spawn(extend::run(
                Arc::clone(&self.lease),
                policy,
                self.acquired_at,
                rtt,
            ));
            self.lease.set_extender(Some(task.abort_handle()));
            self.extender = Some(task);
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

    /// The value stored on the nodes: the random token (128 bits as 32 hex digits), then
    /// this client's holder description (`<token>;q1;t=...`, see
    /// [`HolderInfo`](crate::HolderInfo)). Every compare-and-delete and extension compares
    /// this whole value. [`HolderInfo::parse`](crate::HolderInfo::parse) gives the token
    /// alone.
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
            .get_or_init(|| answers::report(&self.holding.ensemble().nodes, &self.votes))
    }

    /// What node `index` answered to the acquisition.
    pub(crate) fn vote(&self, index: usize) -> Option<&NodeOutcome> {
        self.votes.get(index).map(|(outcome, _)| outcome)
    }

    /// Whether node `index` voted yes for this lock.
    pub(crate) fn voted_yes(&self, index: usize) -> bool {
        self.vote(index) == Some(&NodeOutcome::Acquired)
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
        self.holding.release(expired).await
    }

    /// Hands the lock on as a [`LockTicket`] without releasing it: this guard stops
    /// extending it and answers for it no more (its lost signal fires with
    /// [`LostReason::Detached`], and the client's shutdown leaves it alone); whoever adopts
    /// the ticket ([`Redlock::adopt`](crate::Redlock::adopt)), in this process or another,
    /// holds it from then on. Unless adopted and extended, the lock expires with its TTL.
    /// The ticket's fencing token is this guard's, if it had one.
    ///
    /// The ticket is a capability: see [`LockTicket`] on keeping it out of logs.
    pub fn detach(mut self) -> LockTicket {
        let now = SystemTime::now();
        let valid_until = now.checked_add(self.validity()).unwrap_or(now);
        let ticket = LockTicket {
            resources: self.lease.resources.to_vec(),
            token: self.lease.token.to_string(),
            access: self.holding.access(),
            fence: self.fencing_token,
            valid_until,
            ttl: self.ttl(),
        };
        self.abandon_as(LostReason::Detached);
        ticket
    }

    /// Gives the lock up without a release: a refused adoption, whose token is not ours to
    /// remove from the nodes that may still hold it.
    pub(crate) fn abandon(mut self) {
        self.abandon_as(LostReason::NotHeld);
    }

    /// Stops extending, disarms the release and marks the lock lost for `reason`.
    fn abandon_as(&mut self, reason: LostReason) {
        self.stop_extender();
        self.holding.disarm();
        self.lease.mark_lost(reason);
    }

    /// This guard after an adoption: its keys held by this client in the local queue, as an
    /// acquisition's are (a reader's excepted: readers share).
    pub(crate) fn holding_locally(mut self) -> Self {
        if !self.holding.access().is_shared() {
            self.holding.hold_locally();
        }
        self
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

/// Runs `work` under `guard`, raced against its lost signal; releases afterwards.
pub(crate) async fn run_under<Fut, T>(guard: LockGuard, work: Fut) -> Result<T>
where
    Fut: Future<Output = T>,
{
    let signal = guard.lost_signal();
    let work = AssertUnwindSafe(work).catch_unwind();
    let outcome = tokio::select! {
        // Finished work wins a tie with a loss noticed at the same moment: its effects
        // already happened either way.
        biased;
        out = work => Ok(out),
        reason = signal.lost() => Err(reason),
    };
    match outcome {
        Ok(out) => {
            // The work is done; a release that finds the lock already expired changes
            // nothing for the caller, so its outcome is only logged.
            if let Err(e) = guard.release().await {
                tracing::debug!(error = %e, "release after scoped run");
            }
            match out {
                Ok(value) => Ok(value),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Err(reason) => {
            // Remove what may remain of ours (a lock that expired locally may still sit
            // on some nodes); never another owner's.
            let _ = guard.release().await;
            Err(Error::Lost { reason })
        }
    }
}
