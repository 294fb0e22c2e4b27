//! The read side of a [`RwLock`]: [`ReadRequest`], the loop that acquires a read lock, and
//! [`ReadGuard`], a held one.

use std::future::IntoFuture;
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::acquire::attempt;
use crate::acquire::gave_up;
use crate::acquire::heal;
use crate::acquire::plan::Plan;
use crate::error::Result;
use crate::held::extend::AutoExtend;
use crate::held::guard::LockGuard;
use crate::metrics;
use crate::protocol::rw_scripts::Access;
use crate::report::NodeReport;
use crate::rwlock::RwLock;
use crate::wait::read_holds::ReadHold;

/// A pending [`RwLock::read`]; `.await` it for a [`ReadGuard`].
#[derive(Debug)]
#[must_use = "a read request does nothing until awaited"]
pub struct ReadRequest {
    rwlock: RwLock,
    ttl: Duration,
    wait: Option<Duration>,
    auto_extend: Option<AutoExtend>,
}

impl ReadRequest {
    pub(super) fn new(rwlock: RwLock, ttl: Duration) -> Self {
        ReadRequest {
            rwlock,
            ttl,
            wait: None,
            auto_extend: None,
        }
    }

    /// How long to wait for the read lock, instead of the client's wait budget.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Keeps the read lock extended in the background while it is held (see
    /// [`AutoExtend`]).
    pub fn auto_extend(mut self, policy: AutoExtend) -> Self {
        self.auto_extend = Some(policy);
        self
    }
}

impl IntoFuture for ReadRequest {
    type Output = Result<ReadGuard>;
    type IntoFuture = BoxFuture<'static, Result<ReadGuard>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let ensemble = self.rwlock.client.inner();
            let wait = (self.wait).unwrap_or(ensemble.config.wait);
            let mut guard = acquire_read(&self.rwlock, self.ttl, wait).await?;
            if let Some(policy) = self.auto_extend {
                guard.auto_extend(policy);
            }
            Ok(guard)
        })
    }
}

/// Attempts a read lock until one wins, for at most `wait`: after each refusal, a pause
/// (the client's retry policy, jittered), cut short when a write lock of this client on
/// the name is released. Writers of other clients are found gone by the next attempt.
async fn acquire_read(rwlock: &RwLock, ttl: Duration, wait: Duration) -> Result<ReadGuard> {
    let started = Instant::now();
    let ensemble = rwlock.client.inner();
    let plan =
        Plan::new(ensemble, vec![rwlock.resource()], ttl, false)?.with_access(Access::Read)?;
    heal::start_healer(ensemble);
    let (retry, queue) = (&ensemble.config.retry, &ensemble.queue);
    let (mut attempts, mut polls) = (0u32, 0u32);
    loop {
        let local_release = queue.watch_releases(&plan.keys);
        attempts = attempts.saturating_add(1);
        let err = match attempt::attempt(ensemble, &plan, None).await {
            Ok(guard) => {
                metrics::acquired(started.elapsed());
                return Ok(ReadGuard::new(guard, rwlock));
            }
            Err(e) if e.is_retryable() => e,
            Err(e) => return Err(e),
        };
        let remaining = wait.saturating_sub(started.elapsed());
        if remaining.is_zero() {
            return Err(gave_up(attempts, started, err));
        }
        let local_release = local_release.and(queue.watch_releases(&plan.keys));
        let delay = retry.delay(polls, rand::random::<f64>());
        if local_release.first_or(delay.min(remaining)).await.is_none() {
            polls = polls.saturating_add(1);
        }
    }
}

/// A held read lock of a [`RwLock`]: the guard of its reader entry, with everything a
/// [`LockGuard`] offers (validity, extension, lost signal, context) through `Deref`. Its
/// entry expires on its own TTL, whatever other readers do. Dropping it releases the read
/// lock in the background, as a guard does.
#[derive(Debug)]
pub struct ReadGuard {
    guard: LockGuard,
    /// This task's mark as a reader of the name (see `ReadHolds`).
    _reading: ReadHold,
}

impl ReadGuard {
    pub(super) fn new(guard: LockGuard, rwlock: &RwLock) -> ReadGuard {
        let reads = &rwlock.client.inner().queue.reads;
        let reading = reads.hold(guard.resource());
        ReadGuard {
            guard,
            _reading: reading,
        }
    }

    /// Releases the read lock on every node, as [`LockGuard::release`]; the last reader's
    /// release wakes a waiting writer.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`].
    pub async fn release(self) -> Result<NodeReport> {
        self.guard.release().await
    }
}

impl Deref for ReadGuard {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl DerefMut for ReadGuard {
    fn deref_mut(&mut self) -> &mut LockGuard {
        &mut self.guard
    }
}
