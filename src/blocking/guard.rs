//! [`LockGuard`]: a held lock of any kind, seen from a blocking caller. The async guard
//! under it (a mutex's, a reader's, a permit's or a leader's) lives on the runtime
//! thread's side: extending and releasing run it there, and dropping the blocking guard
//! hands it over to be dropped there, which queues its release.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::blocking::context::RunContext;
use crate::blocking::core::ClientCore;
use crate::blocking::runtime::{RuntimeOwned, refuse_inside_runtime};
#[cfg(doc)]
use crate::error::Error;
use crate::error::{LostReason, Result};
use crate::held::ticket::LockTicket;
use crate::report::NodeReport;

/// An async guard of any lock kind, as the blocking guard drives it.
pub(crate) trait AsyncGuard: Send + Sync + 'static {
    /// The lock under it.
    fn lock_guard(&self) -> &crate::LockGuard;

    /// Releases it the kind's way (a leader resigns), reporting what happened.
    fn release_kind(self: Box<Self>) -> BoxFuture<'static, Result<NodeReport>>;

    /// The lock under it, to hand on as a ticket.
    fn into_lock_guard(self: Box<Self>) -> crate::LockGuard;

    /// The term, when it is a leader's.
    fn leadership(&self) -> Option<&crate::Leadership> {
        None
    }
}

impl AsyncGuard for crate::LockGuard {
    fn lock_guard(&self) -> &crate::LockGuard {
        self
    }

    fn into_lock_guard(self: Box<Self>) -> crate::LockGuard {
        *self
    }

    fn release_kind(self: Box<Self>) -> BoxFuture<'static, Result<NodeReport>> {
        Box::pin((*self).release())
    }
}

/// A lock held on a majority of nodes, for a blocking caller: the blocking twin of
/// [`crate::LockGuard`].
///
/// Owned, `Send` and `Sync`: move it to other threads freely. The lock is only safe to
/// rely on while [`validity`](Self::validity) is not zero. [`release`](Self::release)
/// waits for the outcome; dropping the guard returns at once: the release is queued on
/// the client's runtime thread, as dropping an async guard spawns it.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    // Declared first, so that it is queued for its drop before the context may drop the
    // last handle on the runtime.
    held: RuntimeOwned<Box<dyn AsyncGuard>>,
    context: RunContext,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resources", &self.resources())
            .field("validity", &self.validity())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(core: &Arc<ClientCore>, held: Box<dyn AsyncGuard>) -> LockGuard {
        let context = RunContext::new(held.lock_guard().context(), core);
        LockGuard {
            held: RuntimeOwned::new(held, &core.runtime),
            context,
        }
    }

    /// The resource name (the first, sorted, for a
    /// [`lock_many`](crate::blocking::Redlock::lock_many) guard).
    pub fn resource(&self) -> &str {
        self.resources().first().map_or("", String::as_str)
    }

    /// Every resource this guard holds, sorted.
    pub fn resources(&self) -> &[String] {
        self.context.resources()
    }

    /// The value stored on the nodes: the random token, then the holder description (see
    /// [`crate::LockGuard::token`]).
    pub fn token(&self) -> &str {
        self.context.token()
    }

    /// How much longer the lock is safely held: zero once the validity ran out or the lock
    /// is known lost.
    pub fn validity(&self) -> Duration {
        self.context.validity()
    }

    /// Whether the validity has not yet run out and the lock is not known lost.
    pub fn is_valid(&self) -> bool {
        !self.validity().is_zero()
    }

    /// Whether the lock can no longer be assumed held (see [`crate::LostSignal`]).
    pub fn is_lost(&self) -> bool {
        !self.context.is_held()
    }

    /// Why the lock is lost, or `None` while it is held. Never waits.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.context.lost_reason()
    }

    /// Waits up to `timeout` for the lock to be lost, and says why; `None` when it is still
    /// held then. Called from async code it does not wait (see [`RunContext::wait_lost`]).
    pub fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        self.context.wait_lost(timeout)
    }

    /// A cheap, cloneable view of this lock for code running under it, on any thread.
    pub fn context(&self) -> RunContext {
        self.context.clone()
    }

    /// Resets the TTL to `ttl` on every node that still holds our token, as
    /// [`crate::LockGuard::extend`]. Returns the new validity.
    ///
    /// # Errors
    ///
    /// As [`crate::LockGuard::extend`]; also [`Error::Config`] when called from inside an
    /// async runtime (nothing is done) and [`Error::ShutDown`] after the client's
    /// [`shutdown`](crate::blocking::Redlock::shutdown).
    pub fn extend(&mut self, ttl: Duration) -> Result<Duration> {
        self.lend_held(move |held| {
            Box::pin(async move {
                let extended = held.lock_guard().extend(ttl).await;
                (held, extended)
            })
        })?
    }

    /// Lends the async guard to the runtime thread for `work`, which gives it back with
    /// its outcome; if the runtime is gone, the guard was dropped there (and shutdown had
    /// released it).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when called from inside an async runtime (nothing is done);
    /// [`Error::ShutDown`] after the client's shutdown.
    pub(crate) fn lend_held<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(Box<dyn AsyncGuard>) -> BoxFuture<'static, (Box<dyn AsyncGuard>, T)>,
    ) -> Result<T> {
        refuse_inside_runtime()?;
        let Some(held) = self.held.take() else {
            return Err(crate::error::Error::ShutDown);
        };
        let (held, output) = (self.context.core().runtime).call(work(held))?;
        self.held.put(held);
        Ok(output)
    }

    /// The async guard, while it is here (not lent out, not released).
    pub(crate) fn held(&self) -> Option<&dyn AsyncGuard> {
        self.held.get().map(|held| &**held)
    }

    /// Hands the lock on as a [`LockTicket`] without releasing it, as
    /// [`crate::LockGuard::detach`]: another client (blocking or async, in this process or
    /// another) takes it over with [`adopt`](crate::blocking::Redlock::adopt). The ticket
    /// is a capability: see [`LockTicket`].
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when called from inside an async runtime (the guard is then
    /// dropped: the release is queued, as on drop); [`Error::ShutDown`] after the client's
    /// [`shutdown`](crate::blocking::Redlock::shutdown), which released the lock.
    pub fn detach(mut self) -> Result<LockTicket> {
        refuse_inside_runtime()?;
        let Some(held) = self.held.take() else {
            return Err(crate::error::Error::ShutDown);
        };
        (self.context.core().runtime).call(async move { held.into_lock_guard().detach() })
    }

    /// Releases the lock on every node and reports what happened, as
    /// [`crate::LockGuard::release`] (a leader's guard resigns, as
    /// [`crate::Leadership::resign`]).
    ///
    /// # Errors
    ///
    /// As [`crate::LockGuard::release`]; also [`Error::Config`] when called from inside an
    /// async runtime (the guard is then dropped: the release is queued, as on drop) and
    /// [`Error::ShutDown`] after the client's
    /// [`shutdown`](crate::blocking::Redlock::shutdown).
    pub fn release(mut self) -> Result<NodeReport> {
        refuse_inside_runtime()?;
        let Some(held) = self.held.take() else {
            return Err(crate::error::Error::ShutDown);
        };
        (self.context.core().runtime).call(held.release_kind())?
    }
}
