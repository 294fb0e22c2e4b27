//! The read-write lock for a blocking caller: [`RwLock`], [`ReadRequest`] and
//! [`ReadGuard`], over the async [`crate::RwLock`]. The write side is a blocking
//! [`LockRequest`], as the async write side is the mutex's request.

use std::future::IntoFuture;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::blocking::context::RunContext;
use crate::blocking::core::ClientCore;
use crate::blocking::guard::{AsyncGuard, LockGuard};
use crate::blocking::request::LockRequest;
use crate::blocking::request::forward_request_options;
use crate::blocking::scoped::run_on_this_thread;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::report::NodeReport;

impl AsyncGuard for crate::ReadGuard {
    fn lock_guard(&self) -> &crate::LockGuard {
        self
    }

    fn into_lock_guard(self: Box<Self>) -> crate::LockGuard {
        (*self).into_guard()
    }

    fn release_kind(self: Box<Self>) -> BoxFuture<'static, Result<NodeReport>> {
        Box::pin((*self).release())
    }
}

/// A read-write lock on one name: any number of readers or one writer at once, across
/// every client of these nodes, as [`crate::RwLock`].
///
/// A thread holding a read lock that asks for the write lock of the same name waits for
/// itself until its wait budget runs out (the async API refuses it at once with
/// [`Error::Upgrade`], which it tells by task): release the read lock first.
#[derive(Debug, Clone)]
pub struct RwLock {
    core: Arc<ClientCore>,
    rwlock: crate::RwLock,
}

impl RwLock {
    pub(crate) fn new(core: Arc<ClientCore>, rwlock: crate::RwLock) -> Self {
        RwLock { core, rwlock }
    }

    /// The name of the lock.
    pub fn name(&self) -> &str {
        self.rwlock.name()
    }

    /// A read lock for `ttl`, once [`ReadRequest::acquire`] is called.
    pub fn read(&self, ttl: Duration) -> ReadRequest {
        ReadRequest {
            core: Arc::clone(&self.core),
            request: self.rwlock.read(ttl),
        }
    }

    /// The write lock for `ttl`, once [`LockRequest::acquire`] is called.
    pub fn write(&self, ttl: Duration) -> LockRequest {
        LockRequest::new(Arc::clone(&self.core), self.rwlock.write(ttl))
    }

    /// One attempt at a read lock; `Ok(None)` when a writer holds or awaits the lock.
    ///
    /// # Errors
    ///
    /// As [`crate::RwLock::try_read`]; also [`Error::Config`] when called from inside an
    /// async runtime and [`Error::ShutDown`] after the client's shutdown.
    pub fn try_read(&self, ttl: Duration) -> Result<Option<ReadGuard>> {
        let rwlock = self.rwlock.clone();
        let tried = self
            .core
            .runtime
            .call(async move { rwlock.try_read(ttl).await })?;
        Ok(tried?.map(|guard| ReadGuard::new(&self.core, guard)))
    }

    /// One attempt at the write lock; `Ok(None)` when a reader or a writer holds it.
    ///
    /// # Errors
    ///
    /// As [`crate::RwLock::try_write`]; also [`Error::Config`] when called from inside an
    /// async runtime and [`Error::ShutDown`] after the client's shutdown.
    pub fn try_write(&self, ttl: Duration) -> Result<Option<LockGuard>> {
        let rwlock = self.rwlock.clone();
        let tried = self
            .core
            .runtime
            .call(async move { rwlock.try_write(ttl).await })?;
        Ok(tried?.map(|guard| LockGuard::new(&self.core, Box::new(guard))))
    }
}

/// A pending [`RwLock::read`]: adjust it, then [`acquire`](Self::acquire) the read lock.
#[derive(Debug)]
#[must_use = "a read request does nothing until `acquire()` is called"]
pub struct ReadRequest {
    core: Arc<ClientCore>,
    request: crate::ReadRequest,
}

impl ReadRequest {
    forward_request_options!(request);

    /// Acquires the read lock, as [`LockRequest::acquire`].
    ///
    /// # Errors
    ///
    /// As [`LockRequest::acquire`].
    pub fn acquire(self) -> Result<ReadGuard> {
        let guard = self.core.runtime.call(self.request.into_future())??;
        Ok(ReadGuard::new(&self.core, guard))
    }

    /// Acquires the read lock, runs `f` on the calling thread under it, auto-extended, and
    /// releases it, as [`LockRequest::run`] does with the write side.
    ///
    /// # Errors
    ///
    /// As [`LockRequest::run`].
    ///
    /// # Panics
    ///
    /// A panic in `f` is resumed after the read lock was released.
    pub fn run<F, T>(mut self, f: F) -> Result<T>
    where
        F: FnOnce(RunContext) -> T,
    {
        self.request = self.request.for_run();
        let ReadGuard { guard } = self.acquire()?;
        let context = guard.context();
        run_on_this_thread(guard, || f(context))
    }
}

/// A held read lock of a [`RwLock`], with everything a [`LockGuard`] offers through
/// `Deref`. Dropping it releases the read lock in the background, as a guard does.
#[derive(Debug)]
#[must_use = "dropping the guard releases the read lock at once"]
pub struct ReadGuard {
    guard: LockGuard,
}

impl ReadGuard {
    fn new(core: &Arc<ClientCore>, guard: crate::ReadGuard) -> ReadGuard {
        ReadGuard {
            guard: LockGuard::new(core, Box::new(guard)),
        }
    }

    /// Releases the read lock, as [`LockGuard::release`]; the last reader's release wakes
    /// a waiting writer.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    pub fn release(self) -> Result<NodeReport> {
        self.guard.release()
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
