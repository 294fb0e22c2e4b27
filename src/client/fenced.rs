//! Fenced locks as their own types: a lock requested with [`LockRequest::fenced`] comes as a
//! [`FencedGuard`] (or, in a scoped run, a [`FencedContext`]) whose
//! [`FencingToken`] cannot be absent, and a lock requested without fencing has no way to
//! show one. What the token guarantees and how to use it: [`fencing`](crate::fencing).

use std::fmt;
use std::future::IntoFuture;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::acquire;
use crate::acquire::request::LockRequest;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::held::extend::AutoExtend;
use crate::held::guard::LockGuard;
use crate::held::lease::LockContext;
use crate::report::NodeReport;

impl LockRequest {
    /// Requests a fencing token with the lock (see [`fencing`](Self::fencing)) and makes
    /// the result typed: awaiting the returned request gives a [`FencedGuard`], whose
    /// [`fencing_token`](FencedGuard::fencing_token) is a [`FencingToken`], never absent.
    /// Works for [`lock`](crate::Redlock::lock) and [`lock_many`](crate::Redlock::lock_many) alike.
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) -> quorum_lock::Result<()> {
    /// use std::time::Duration;
    /// let guard = redlock.lock("accounts:7", Duration::from_secs(10)).fenced().await?;
    /// let fence: i64 = guard.fencing_token().as_i64(); // for a SQL bigint column
    /// // ... every write to the storage carries `fence` ...
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn fenced(self) -> FencedRequest {
        FencedRequest {
            request: self.fencing(),
        }
    }
}

/// A pending [`LockRequest::fenced`] call; `.await` it for a [`FencedGuard`], or
/// [`run`](Self::run) a closure under the lock.
#[derive(Debug)]
#[must_use = "a lock request does nothing until awaited"]
pub struct FencedRequest {
    pub(crate) request: LockRequest,
}

impl FencedRequest {
    /// As [`LockRequest::wait`].
    pub fn wait(mut self, wait: Duration) -> Self {
        self.request = self.request.wait(wait);
        self
    }

    /// As [`LockRequest::max_attempts`].
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.request = self.request.max_attempts(attempts);
        self
    }

    /// As [`LockRequest::auto_extend`].
    pub fn auto_extend(mut self, policy: AutoExtend) -> Self {
        self.request = self.request.auto_extend(policy);
        self
    }
}

/// Acquires the lock and its fencing token, as awaiting a [`LockRequest`] does.
///
/// # Errors
///
/// As [`Redlock::lock`](crate::Redlock::lock).
///
/// # Cancel safety
///
/// Dropping the future leaves no lock behind (see [`Redlock::lock`](crate::Redlock::lock)).
impl IntoFuture for FencedRequest {
    type Output = Result<FencedGuard>;
    type IntoFuture = BoxFuture<'static, Result<FencedGuard>>;

    fn into_future(self) -> Self::IntoFuture {
        let ensemble = Arc::clone(&self.request.ensemble);
        Box::pin(async move {
            let guard = acquire::acquire(ensemble, self.request.request).await?;
            FencedGuard::new(guard)
        })
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
    /// Wraps a guard acquired with fencing; a guard without a token (which a fenced request
    /// never returns) is released and refused.
    pub(crate) fn new(guard: LockGuard) -> Result<FencedGuard> {
        match guard.fence() {
            Some(token) => Ok(FencedGuard { guard, token }),
            None => Err(Error::Config(
                "a fenced lock came without a fencing token; it was released".into(),
            )),
        }
    }

    /// The fencing token minted with this lock: strictly greater than the token of every
    /// earlier holder of these resources. Every write to the protected storage carries it
    /// (see [`fencing`](crate::fencing) for the SQL pattern).
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// A view of this lock and its token for code running under it.
    pub fn context(&self) -> FencedContext {
        FencedContext {
            context: self.guard.context(),
            token: self.token,
        }
    }

    /// As [`LockGuard::auto_extend`].
    pub fn auto_extend(&mut self, policy: AutoExtend) {
        self.guard.auto_extend(policy);
    }

    /// As [`LockGuard::release`].
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future releases in the background instead.
    pub async fn release(self) -> Result<NodeReport> {
        self.guard.release().await
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

/// What code running under [`FencedRequest::run`] sees of its lock: a [`LockContext`]
/// (through `Deref`) and the lock's [`FencingToken`].
#[derive(Debug, Clone)]
pub struct FencedContext {
    context: LockContext,
    token: FencingToken,
}

impl FencedContext {
    pub(crate) fn new(context: LockContext, token: FencingToken) -> Self {
        FencedContext { context, token }
    }

    /// The fencing token minted with this lock.
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }

    /// The plain context, without the token.
    pub fn into_context(self) -> LockContext {
        self.context
    }
}

impl Deref for FencedContext {
    type Target = LockContext;

    fn deref(&self) -> &LockContext {
        &self.context
    }
}
