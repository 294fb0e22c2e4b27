//! [`LockRequest`]: a pending `lock()` call, the builder of its [`Request`], and the future
//! that runs [`acquire`] when it is awaited. `fenced` and `run` add to it in the client.

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::acquire::{Options, Request, acquire};
use crate::ensemble::Ensemble;
use crate::error::Result;
use crate::held::extend::AutoExtend;
use crate::held::guard::LockGuard;
use crate::protocol::access::Access;

/// A pending [`Redlock::lock`](crate::Redlock::lock) or
/// [`Redlock::lock_many`](crate::Redlock::lock_many) call; `.await` it.
///
/// Awaiting it runs the attempts (see [`Redlock::lock`](crate::Redlock::lock) for its `# Errors`
/// and `# Cancel safety`); [`LockRequest::run`] runs a closure under the lock instead.
#[derive(Debug)]
#[must_use = "a lock request does nothing until awaited"]
pub struct LockRequest {
    pub(crate) ensemble: Arc<Ensemble>,
    pub(crate) request: Request,
}

impl LockRequest {
    pub(crate) fn new(ensemble: Arc<Ensemble>, resources: Vec<String>, ttl: Duration) -> Self {
        LockRequest {
            ensemble,
            request: Request {
                resources,
                ttl,
                options: Options::default(),
                fencing: false,
                // A mutex (the write side sets its own).
                access: Access::default(),
            },
        }
    }

    /// How long to keep retrying, overriding
    /// [`RedlockBuilder::wait`](crate::RedlockBuilder::wait) for this call. Zero makes a
    /// single attempt; `Duration::MAX` waits for ever.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.request.options.wait = Some(wait);
        self
    }

    /// Caps the attempts of this call (at least 1), overriding
    /// [`RedlockBuilder::max_attempts`](crate::RedlockBuilder::max_attempts).
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.request.options.max_attempts = Some(attempts);
        self
    }

    /// Mints a fencing token with the lock: a number that strictly increases from one
    /// holder of these resources to the next, read from and committed to a majority of
    /// nodes (one more round trip). Prefer [`fenced`](Self::fenced), whose guard's token
    /// cannot be absent; see the [`fencing`](crate::fencing) module.
    pub fn fencing(mut self) -> Self {
        self.request.fencing = true;
        self
    }

    /// Keeps the lock extended in the background once acquired (see [`AutoExtend`]).
    pub fn auto_extend(mut self, policy: AutoExtend) -> Self {
        self.request.options.auto_extend = Some(policy);
        self
    }
}

/// Acquires the lock: attempts retried with jittered backoff (and, with notifications on,
/// woken by releases) until the wait budget or the attempt cap runs out.
///
/// # Errors
///
/// As [`Redlock::lock`](crate::Redlock::lock): [`Error::Timeout`](crate::Error::Timeout) when the
/// budget ran out, [`Error::Config`](crate::Error::Config) for an unusable request.
///
/// # Cancel safety
///
/// Dropping the future leaves no lock behind (see [`Redlock::lock`](crate::Redlock::lock)).
impl IntoFuture for LockRequest {
    type Output = Result<LockGuard>;
    type IntoFuture = BoxFuture<'static, Result<LockGuard>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(acquire(self.ensemble, self.request))
    }
}
