//! The read side of a [`RwLock`]: [`ReadRequest`], which runs the mutex's acquire loop with
//! the read script, and [`ReadGuard`], a held read lock.

use std::future::IntoFuture;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::acquire::{self, Options, Request};
use crate::error::Result;
use crate::held::extend::AutoExtend;
use crate::held::guard::{LockGuard, run_under};
use crate::held::lease::LockContext;
use crate::protocol::access::Access;
use crate::report::NodeReport;
use crate::rwlock::RwLock;
use crate::wait::read_holds::ReadHold;

/// A pending [`RwLock::read`]; `.await` it for a [`ReadGuard`].
#[derive(Debug)]
#[must_use = "a read request does nothing until awaited"]
pub struct ReadRequest {
    rwlock: RwLock,
    ttl: Duration,
    options: Options,
}

impl ReadRequest {
    pub(super) fn new(rwlock: RwLock, ttl: Duration) -> Self {
        ReadRequest {
            rwlock,
            ttl,
            options: Options::default(),
        }
    }

    /// How long to wait for the read lock, instead of the client's wait budget.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = Some(wait);
        self
    }

    /// Caps the attempts (at least 1), instead of the client's attempt cap.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.options.max_attempts = Some(attempts);
        self
    }

    /// The request of a scoped run: auto-extended, unlimited unless a policy was set.
    pub(crate) fn for_run(mut self) -> Self {
        self.options.for_run();
        self
    }

    /// Keeps the read lock extended in the background while it is held (see
    /// [`AutoExtend`]).
    pub fn auto_extend(mut self, policy: AutoExtend) -> Self {
        self.options.auto_extend = Some(policy);
        self
    }

    /// Acquires the read lock, runs `f` under it with auto-extension (unlimited unless
    /// [`auto_extend`](Self::auto_extend) set a budget), releases it afterwards, also when
    /// `f` fails or panics, and returns `f`'s output: as
    /// [`LockRequest::run`](crate::LockRequest::run) for a read lock.
    ///
    /// # Errors
    ///
    /// Acquisition errors as for [`RwLock::read`], or [`Error::Lost`](crate::Error::Lost)
    /// when the read lock is lost while `f` runs (`f`'s future is then dropped).
    ///
    /// # Cancel safety
    ///
    /// As [`LockRequest::run`](crate::LockRequest::run).
    ///
    /// # Panics
    ///
    /// A panic in `f` is resumed after the read lock was released.
    pub async fn run<F, Fut, T>(mut self, f: F) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        self.options.for_run();
        let ReadGuard { guard, _reading } = self.await?;
        let work = f(guard.context());
        // This task reads until the work is done: it may not ask for the write lock.
        let ran = run_under(guard, work).await;
        drop(_reading);
        ran
    }
}

impl IntoFuture for ReadRequest {
    type Output = Result<ReadGuard>;
    type IntoFuture = BoxFuture<'static, Result<ReadGuard>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let request = Request {
                resources: vec![self.rwlock.resource()],
                ttl: self.ttl,
                options: self.options,
                fencing: false,
                access: Access::Read,
            };
            let ensemble = Arc::clone(&self.rwlock.ensemble);
            let guard = acquire::acquire(ensemble, request).await?;
            Ok(ReadGuard::new(guard, &self.rwlock))
        })
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
        let reads = &rwlock.ensemble.queue.reads;
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

impl ReadGuard {
    /// The reader's guard. This task no longer counts as a reader of the name for
    /// [`Error::Upgrade`](crate::Error::Upgrade): the guard still holds the read lock.
    pub fn into_guard(self) -> LockGuard {
        self.guard
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
