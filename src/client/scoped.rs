//! Scoped critical sections: run a future under a lock, the Rust form of the seeds'
//! context manager and decorator.

use crate::acquire::request::LockRequest;
use crate::client::fenced::{FencedContext, FencedRequest};
use crate::error::Result;
use crate::held::guard::run_under;
use crate::held::lease::LockContext;

impl LockRequest {
    /// Acquires the lock, runs `f` under it with auto-extension (unlimited unless
    /// [`auto_extend`](Self::auto_extend) set a budget), releases it afterwards — also when
    /// `f` fails or panics — and returns `f`'s output.
    ///
    /// `f` receives a [`LockContext`] to read the remaining validity and the lost-lock
    /// signal. If the lock is lost while `f` runs, `f`'s future is dropped at its next
    /// suspension point and the call returns [`Error::Lost`](crate::Error::Lost).
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) -> quorum_lock::Result<()> {
    /// use std::time::Duration;
    /// let total = redlock
    ///     .lock("reports:daily", Duration::from_secs(10))
    ///     .run(|ctx| async move {
    ///         // ... long work; ctx.validity() says how long the lock is certainly ours ...
    ///         42
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Acquisition errors as for [`Redlock::lock`](crate::Redlock::lock), or
    /// [`Error::Lost`](crate::Error::Lost).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `f`'s future at its suspension point and releases the lock
    /// in the background (as dropping a [`LockGuard`](crate::LockGuard) does); dropped
    /// while acquiring, it leaves no lock behind (see [`Redlock::lock`](crate::Redlock::lock)).
    ///
    /// # Panics
    ///
    /// A panic in `f` is resumed after the lock was released.
    pub async fn run<F, Fut, T>(mut self, f: F) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        self.request.options.for_run();
        let guard = self.await?;
        let work = f(guard.context());
        run_under(guard, work).await
    }
}

impl FencedRequest {
    /// [`LockRequest::run`] with a fencing token: `f` receives a [`FencedContext`], whose
    /// [`fencing_token`](FencedContext::fencing_token) is never absent.
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) -> quorum_lock::Result<()> {
    /// use std::time::Duration;
    /// redlock
    ///     .lock("accounts:7", Duration::from_secs(10))
    ///     .fenced()
    ///     .run(|ctx| async move {
    ///         let fence = ctx.fencing_token().as_i64();
    ///         // ... writes carrying `fence` ...
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`LockRequest::run`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockRequest::run`].
    ///
    /// # Panics
    ///
    /// A panic in `f` is resumed after the lock was released.
    pub async fn run<F, Fut, T>(mut self, f: F) -> Result<T>
    where
        F: FnOnce(FencedContext) -> Fut,
        Fut: Future<Output = T>,
    {
        self.request.request.options.for_run();
        let (guard, token) = self.await?.into_parts();
        let work = f(FencedContext::new(guard.context(), token));
        run_under(guard, work).await
    }
}
