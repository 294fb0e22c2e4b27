//! The counting semaphore for a blocking caller: [`Semaphore`], [`PermitRequest`] and
//! [`Permit`], over the async [`crate::Semaphore`].

use std::future::IntoFuture;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::blocking::context::RunContext;
use crate::blocking::core::ClientCore;
use crate::blocking::guard::{AsyncGuard, LockGuard};
#[cfg(doc)]
use crate::blocking::request::LockRequest;
use crate::blocking::request::forward_request_options;
use crate::blocking::scoped::run_on_this_thread;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::report::NodeReport;

impl AsyncGuard for crate::Permit {
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

/// A counting semaphore: at most [`permits`](Self::permits) holders at once across every
/// client of these nodes, as [`crate::Semaphore`].
#[derive(Debug, Clone)]
pub struct Semaphore {
    core: Arc<ClientCore>,
    semaphore: crate::Semaphore,
}

impl Semaphore {
    pub(crate) fn new(core: Arc<ClientCore>, semaphore: crate::Semaphore) -> Self {
        Semaphore { core, semaphore }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        self.semaphore.name()
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.semaphore.permits()
    }

    /// A permit for `ttl`, once [`PermitRequest::acquire`] is called.
    pub fn acquire(&self, ttl: Duration) -> PermitRequest {
        PermitRequest {
            core: Arc::clone(&self.core),
            request: self.semaphore.acquire(ttl),
        }
    }

    /// One pass over the permits; `Ok(None)` when every permit is held.
    ///
    /// # Errors
    ///
    /// As [`crate::Semaphore::try_acquire`]; also [`Error::Config`] when called from
    /// inside an async runtime and [`Error::ShutDown`] after the client's shutdown.
    pub fn try_acquire(&self, ttl: Duration) -> Result<Option<Permit>> {
        let semaphore = self.semaphore.clone();
        let tried = (self.core.runtime).call(async move { semaphore.try_acquire(ttl).await })?;
        Ok(tried?.map(|permit| Permit::new(&self.core, permit)))
    }
}

/// A pending [`Semaphore::acquire`]: adjust it, then [`acquire`](Self::acquire) a permit.
#[derive(Debug)]
#[must_use = "a permit request does nothing until `acquire()` is called"]
pub struct PermitRequest {
    core: Arc<ClientCore>,
    request: crate::PermitRequest,
}

impl PermitRequest {
    forward_request_options!(request);

    /// Acquires a permit, as [`LockRequest::acquire`].
    ///
    /// # Errors
    ///
    /// As [`LockRequest::acquire`].
    pub fn acquire(self) -> Result<Permit> {
        let permit = self.core.runtime.call(self.request.into_future())??;
        Ok(Permit::new(&self.core, permit))
    }

    /// Acquires a permit, runs `f` on the calling thread under it, auto-extended, and
    /// releases it, as [`LockRequest::run`] does with a lock.
    ///
    /// # Errors
    ///
    /// As [`LockRequest::run`].
    ///
    /// # Panics
    ///
    /// A panic in `f` is resumed after the permit was released.
    pub fn run<F, T>(mut self, f: F) -> Result<T>
    where
        F: FnOnce(RunContext) -> T,
    {
        self.request = self.request.for_run();
        let Permit { guard, .. } = self.acquire()?;
        let context = guard.context();
        run_on_this_thread(guard, || f(context))
    }
}

/// One of a [`Semaphore`]'s permits, held, with everything a [`LockGuard`] offers through
/// `Deref`. Dropping it releases the permit in the background, as a guard does.
#[derive(Debug)]
#[must_use = "dropping the permit releases it at once"]
pub struct Permit {
    guard: LockGuard,
    slot: u32,
}

impl Permit {
    fn new(core: &Arc<ClientCore>, permit: crate::Permit) -> Permit {
        let slot = permit.slot();
        Permit {
            guard: LockGuard::new(core, Box::new(permit)),
            slot,
        }
    }

    /// Which of the semaphore's permits this is, from 0.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Releases the permit, as [`LockGuard::release`].
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    pub fn release(self) -> Result<NodeReport> {
        self.guard.release()
    }
}

impl Deref for Permit {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl DerefMut for Permit {
    fn deref_mut(&mut self) -> &mut LockGuard {
        &mut self.guard
    }
}
