//! Scoped critical sections for a blocking caller: a closure run on the calling thread
//! under an auto-extended lock, with a [`RunContext`] to watch the lock from inside.
//!
//! Synchronous code cannot be cancelled: where the async
//! [`LockRequest::run`](crate::LockRequest::run) drops the work at its next suspension
//! point once the lock is lost, the closure here runs to its end. It must check
//! [`RunContext::is_held`] (or wait with [`RunContext::wait_lost`]) before each step that
//! needs the lock, and carry the fencing token to storage that can refuse a late write.

use std::panic::AssertUnwindSafe;

use crate::blocking::context::{FencedRunContext, RunContext};
use crate::blocking::fenced::FencedRequest;
use crate::blocking::guard::LockGuard;
use crate::blocking::request::LockRequest;
use crate::error::{Error, Result};

impl LockRequest {
    /// Acquires the lock, runs `f` on the calling thread under it with auto-extension
    /// (unlimited unless [`auto_extend`](Self::auto_extend) set a budget; the runtime
    /// thread extends while `f` works), releases it afterwards (also when `f` panics), and
    /// returns `f`'s output.
    ///
    /// `f` cannot be cancelled: it receives a [`RunContext`] and must check
    /// [`is_held`](RunContext::is_held) before the steps that need the lock. When the
    /// lock was lost while `f` ran, its output is dropped and the call returns
    /// [`Error::Lost`], as the async [`run`](crate::LockRequest::run) does; what `f` did
    /// meanwhile is done.
    ///
    /// ```no_run
    /// # fn demo(redlock: quorum_lock::blocking::Redlock) -> quorum_lock::Result<()> {
    /// use std::time::Duration;
    /// let total = redlock.lock("reports:daily", Duration::from_secs(10)).run(|ctx| {
    ///     let mut done = 0;
    ///     while done < 100 && ctx.is_held() {
    ///         done += 1; // ... one step of the work ...
    ///     }
    ///     done
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Acquisition errors as for [`acquire`](Self::acquire) (among them
    /// [`Error::Config`] when called from inside an async runtime), or [`Error::Lost`].
    ///
    /// # Panics
    ///
    /// A panic in `f` is resumed after the lock was released.
    pub fn run<F, T>(mut self, f: F) -> Result<T>
    where
        F: FnOnce(RunContext) -> T,
    {
        self.request.request.options.for_run();
        let guard = self.acquire()?;
        let context = guard.context();
        run_on_this_thread(guard, || f(context))
    }
}

impl FencedRequest {
    /// [`LockRequest::run`] with a fencing token: `f` receives a [`FencedRunContext`],
    /// whose [`fencing_token`](FencedRunContext::fencing_token) is never absent.
    ///
    /// # Errors
    ///
    /// As [`LockRequest::run`].
    ///
    /// # Panics
    ///
    /// A panic in `f` is resumed after the lock was released.
    pub fn run<F, T>(mut self, f: F) -> Result<T>
    where
        F: FnOnce(FencedRunContext) -> T,
    {
        self.request.request.request.options.for_run();
        let (guard, token) = self.acquire()?.into_parts();
        let context = FencedRunContext::new(guard.context(), token);
        run_on_this_thread(guard, || f(context))
    }
}

/// Runs `work` on this thread under `guard`, then releases it; [`Error::Lost`] when the
/// lock was lost before `work` ended.
pub(crate) fn run_on_this_thread<T>(guard: LockGuard, work: impl FnOnce() -> T) -> Result<T> {
    let output = std::panic::catch_unwind(AssertUnwindSafe(work));
    // Read before the release, which marks the lock lost as released.
    let lost = guard.lost_reason();
    let released = guard.release();
    match (output, lost) {
        (Err(panic), _) => std::panic::resume_unwind(panic),
        (Ok(_), Some(reason)) => Err(Error::Lost { reason }),
        (Ok(output), None) => {
            // The work is done; a release that finds the lock already expired changes
            // nothing for the caller.
            if let Err(e) = released {
                tracing::debug!(error = %e, "release after a blocking scoped run");
            }
            Ok(output)
        }
    }
}
