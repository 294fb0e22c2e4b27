//! [`LockRequest`]: a pending blocking `lock()` call. [`acquire`](LockRequest::acquire)
//! runs the async request on the runtime thread and waits for its guard; `fenced` and
//! `run` add to it in [`fenced`](super::fenced) and [`scoped`](super::scoped).

use std::future::IntoFuture;
use std::sync::Arc;

use crate::blocking::core::ClientCore;
use crate::blocking::guard::LockGuard;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

/// A pending [`Redlock::lock`](crate::blocking::Redlock::lock) or
/// [`Redlock::lock_many`](crate::blocking::Redlock::lock_many) call: adjust it, then
/// [`acquire`](Self::acquire) the lock or [`run`](Self::run) a closure under it.
#[derive(Debug)]
#[must_use = "a lock request does nothing until `acquire()` or `run()` is called"]
pub struct LockRequest {
    pub(crate) core: Arc<ClientCore>,
    pub(crate) request: crate::LockRequest,
}

/// The setters every blocking request forwards to the async request in its field
/// `$inner`: `wait`, `max_attempts` and `auto_extend`, each as the async request's.
macro_rules! forward_request_options {
    ($inner:ident) => {
        /// How long to keep retrying, overriding the client's wait budget (as
        /// [`crate::LockRequest::wait`]; an election's campaign waits for ever unless
        /// told): zero makes a single attempt.
        pub fn wait(mut self, wait: std::time::Duration) -> Self {
            self.$inner = self.$inner.wait(wait);
            self
        }

        /// Caps the attempts (at least 1), as [`crate::LockRequest::max_attempts`].
        pub fn max_attempts(mut self, attempts: u32) -> Self {
            self.$inner = self.$inner.max_attempts(attempts);
            self
        }

        /// Keeps the lock extended in the background once acquired (see
        /// [`AutoExtend`](crate::AutoExtend)): the client's runtime thread extends it while
        /// the caller's thread works.
        pub fn auto_extend(mut self, policy: crate::AutoExtend) -> Self {
            self.$inner = self.$inner.auto_extend(policy);
            self
        }
    };
}
pub(crate) use forward_request_options;

impl LockRequest {
    pub(crate) fn new(core: Arc<ClientCore>, request: crate::LockRequest) -> Self {
        LockRequest { core, request }
    }

    forward_request_options!(request);

    /// Acquires the lock: attempts retried with jittered backoff (and woken by releases)
    /// until the wait budget or the attempt cap runs out, the calling thread blocked
    /// meanwhile.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`](crate::Redlock::lock): [`Error::Timeout`] when the budget ran
    /// out, [`Error::Config`] for an unusable request; also [`Error::Config`] when called
    /// from inside an async runtime and [`Error::ShutDown`] after the client's
    /// [`shutdown`](crate::blocking::Redlock::shutdown).
    pub fn acquire(self) -> Result<LockGuard> {
        let guard = self.core.runtime.call(self.request.into_future())??;
        Ok(LockGuard::new(&self.core, Box::new(guard)))
    }
}
