//! Fenced locks for a blocking caller: [`FencedRequest`] and [`FencedGuard`], whose
//! [`FencingToken`] cannot be absent, as the async [`crate::FencedGuard`]'s.

use std::fmt;
use std::future::IntoFuture;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use crate::blocking::core::ClientCore;
use crate::blocking::guard::LockGuard;
use crate::blocking::request::LockRequest;
use crate::blocking::request::forward_request_options;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::report::NodeReport;

impl LockRequest {
    /// Requests a fencing token with the lock, as [`crate::LockRequest::fenced`]:
    /// [`acquire`](FencedRequest::acquire) then gives a [`FencedGuard`].
    pub fn fenced(self) -> FencedRequest {
        FencedRequest {
            core: self.core,
            request: self.request.fenced(),
        }
    }
}

/// A pending [`LockRequest::fenced`] call: [`acquire`](Self::acquire) it for a
/// [`FencedGuard`], or [`run`](Self::run) a closure under the lock.
#[derive(Debug)]
#[must_use = "a lock request does nothing until `acquire()` or `run()` is called"]
pub struct FencedRequest {
    pub(crate) core: Arc<ClientCore>,
    pub(crate) request: crate::FencedRequest,
}

impl FencedRequest {
    forward_request_options!(request);

    /// Acquires the lock and its fencing token, as [`LockRequest::acquire`].
    ///
    /// # Errors
    ///
    /// As [`LockRequest::acquire`]; also [`Error::Unavailable`] when the token could not
    /// be committed to a majority.
    pub fn acquire(self) -> Result<FencedGuard> {
        let guard = self.core.runtime.call(self.request.into_future())??;
        Ok(FencedGuard::new(&self.core, guard))
    }
}

/// A lock held with a fencing token: a [`LockGuard`] (everything it offers is reachable
/// through `Deref`) plus its [`FencingToken`].
#[must_use = "dropping the guard releases the lock at once"]
pub struct FencedGuard {
    guard: LockGuard,
    token: FencingToken,
}

impl fmt::Debug for FencedGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedGuard")
            .field("guard", &self.guard)
            .field("fencing_token", &self.token)
            .finish()
    }
}

impl FencedGuard {
    pub(crate) fn new(core: &Arc<ClientCore>, guard: crate::FencedGuard) -> FencedGuard {
        let (guard, token) = guard.into_parts();
        FencedGuard {
            guard: LockGuard::new(core, Box::new(guard)),
            token,
        }
    }

    /// The fencing token minted with this lock: strictly greater than the token of every
    /// earlier holder of these resources (see [`fencing`](crate::fencing)).
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// As [`LockGuard::release`].
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    pub fn release(self) -> Result<NodeReport> {
        self.guard.release()
    }

    /// The plain guard and the token, apart.
    pub fn into_parts(self) -> (LockGuard, FencingToken) {
        (self.guard, self.token)
    }
}

impl Deref for FencedGuard {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl DerefMut for FencedGuard {
    fn deref_mut(&mut self) -> &mut LockGuard {
        &mut self.guard
    }
}
