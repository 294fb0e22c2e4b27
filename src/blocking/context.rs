//! [`RunContext`]: what a closure under a lock, or any thread given a guard's context,
//! reads of the lock (validity, loss and its reason) and the one wait on its loss; and
//! [`FencedRunContext`], the same with the fencing token.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use crate::blocking::core::ClientCore;
use crate::error::LostReason;
use crate::fencing::FencingToken;
use crate::held::lease::LockContext;

/// What a closure run under [`LockRequest::run`](crate::blocking::LockRequest::run) (or
/// holding a [`LockGuard::context`](crate::blocking::LockGuard::context)) sees of its
/// lock, from any thread: the blocking twin of [`LockContext`](crate::LockContext).
///
/// It keeps the client's runtime thread alive while it exists.
#[derive(Debug, Clone)]
pub struct RunContext {
    context: LockContext,
    core: Arc<ClientCore>,
}

impl RunContext {
    pub(crate) fn new(context: LockContext, core: &Arc<ClientCore>) -> Self {
        RunContext {
            context,
            core: Arc::clone(core),
        }
    }

    pub(crate) fn core(&self) -> &Arc<ClientCore> {
        &self.core
    }

    /// Whether the lock is still held: not known lost and its validity not run out. Check
    /// it before every step that relies on the lock.
    pub fn is_held(&self) -> bool {
        !self.context.lost_signal().is_lost()
    }

    /// Remaining validity: how long the lock is certainly held without a further extension.
    pub fn validity(&self) -> Duration {
        self.context.validity()
    }

    /// Why the lock is lost, or `None` while it is held. Never waits.
    pub fn lost_reason(&self) -> Option<LostReason> {
        let signal = self.context.lost_signal();
        if !signal.is_lost() {
            return None;
        }
        // A lost signal completes on its first poll; the runtime's context is entered only
        // for the timer it would create if an extension moved the deadline meanwhile.
        let _entered = self.core.runtime.enter();
        signal.lost().now_or_never()
    }

    /// Blocks up to `timeout` waiting for the lock to be lost, and says why; `None` when
    /// it is still held at the end. For work that waits on something else in slices, or
    /// a watchdog thread that stops the work. Called from inside an async runtime (or
    /// after the client's shutdown) it does not wait: it says how things stand now.
    pub fn wait_lost(&self, timeout: Duration) -> Option<LostReason> {
        let signal = self.context.lost_signal();
        let waited = (self.core.runtime)
            .call(async move { tokio::time::timeout(timeout, signal.lost()).await.ok() });
        match waited {
            Ok(reason) => reason,
            Err(_) => self.lost_reason(),
        }
    }

    /// The value stored on the nodes (see [`crate::LockGuard::token`]).
    pub fn token(&self) -> &str {
        self.context.token()
    }

    /// The resources held, sorted.
    pub fn resources(&self) -> &[String] {
        self.context.resources()
    }
}

/// What a closure run under [`FencedRequest::run`](crate::blocking::FencedRequest::run)
/// sees: a [`RunContext`] (through `Deref`) and the lock's [`FencingToken`].
#[derive(Debug, Clone)]
pub struct FencedRunContext {
    context: RunContext,
    token: FencingToken,
}

impl FencedRunContext {
    pub(crate) fn new(context: RunContext, token: FencingToken) -> Self {
        FencedRunContext { context, token }
    }

    /// The fencing token minted with this lock.
    pub fn fencing_token(&self) -> FencingToken {
        self.token
    }
}

impl Deref for FencedRunContext {
    type Target = RunContext;

    fn deref(&self) -> &RunContext {
        &self.context
    }
}
