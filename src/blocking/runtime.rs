//! The runtime thread of a blocking client: one named OS thread running a tokio
//! current-thread runtime, which keeps the client's background work going between calls,
//! and the two ways the caller's thread reaches it: [`RuntimeThread::call`] (run a future
//! there and wait for its output) and [`RuntimeOwned`] (a value dropped there, without
//! waiting).

use std::any::Any;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Mutex;
use std::sync::mpsc;
use std::thread::{JoinHandle, ThreadId};

use futures::FutureExt;
use futures::future::BoxFuture;
use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

use crate::error::{Error, Result};

/// The name of every blocking client's runtime thread.
const THREAD_NAME: &str = "quorum-lock-runtime";

/// What a future run by [`RuntimeThread::call`] gives back: its output, or its panic.
type Answer<T> = std::result::Result<T, Box<dyn Any + Send>>;

/// Refuses a blocking call made from inside an async runtime, where waiting would stall
/// the runtime's thread (and tokio would panic).
///
/// # Errors
///
/// [`Error::Config`] when the calling thread is inside a tokio runtime.
pub(crate) fn refuse_inside_runtime() -> Result<()> {
    match Handle::try_current() {
        Ok(_) => Err(Error::Config(
            "the blocking API was called from inside an async runtime; use the async API there"
                .into(),
        )),
        Err(_) => Ok(()),
    }
}

/// A running runtime thread. Stopped by [`stop`](Self::stop), or when dropped.
pub(crate) struct RuntimeThread {
    handle: Handle,
    thread_id: ThreadId,
    stopper: Mutex<Option<Stopper>>,
}

/// How to end the thread: the last future it runs, then its join handle.
struct Stopper {
    farewell: oneshot::Sender<BoxFuture<'static, ()>>,
    thread: JoinHandle<()>,
}

impl fmt::Debug for RuntimeThread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeThread")
            .field("thread", &self.thread_id)
            .finish_non_exhaustive()
    }
}

impl RuntimeThread {
    /// Starts the thread and its runtime (I/O and timers enabled).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when the thread or the runtime could not be created.
    pub(crate) fn start() -> Result<RuntimeThread> {
        let (ready, handed) = mpsc::sync_channel(1);
        let (farewell, last) = oneshot::channel::<BoxFuture<'static, ()>>();
        let thread = std::thread::Builder::new()
            .name(THREAD_NAME.into())
            .spawn(move || {
                let runtime = match Builder::new_current_thread().enable_all().build() {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready.send(Err(e));
                        return;
                    }
                };
                let _ = ready.send(Ok(runtime.handle().clone()));
                // Serves every spawned task until told to stop, then runs the last
                // future (the client's shutdown) before the runtime drops its tasks.
                if let Ok(last) = runtime.block_on(last) {
                    runtime.block_on(last);
                }
            })
            .map_err(|e| Error::Config(format!("could not start {THREAD_NAME}: {e}")))?;
        let handle = match handed.recv() {
            Ok(Ok(handle)) => handle,
            Ok(Err(e)) => return Err(Error::Config(format!("could not build a runtime: {e}"))),
            Err(_) => return Err(Error::Config(format!("{THREAD_NAME} ended at its start"))),
        };
        Ok(RuntimeThread {
            handle,
            thread_id: thread.thread().id(),
            stopper: Mutex::new(Some(Stopper { farewell, thread })),
        })
    }

    /// Runs `work` on the runtime thread and waits for its output; a panic in it is
    /// resumed on the caller's thread.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when called from inside an async runtime (nothing is run);
    /// [`Error::ShutDown`] when the runtime thread has stopped.
    pub(crate) fn call<F>(&self, work: F) -> Result<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        refuse_inside_runtime()?;
        let (answer, answered) = mpsc::sync_channel::<Answer<F::Output>>(1);
        self.handle.spawn(async move {
            let output = AssertUnwindSafe(work).catch_unwind().await;
            let _ = answer.send(output);
        });
        match answered.recv() {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            // The task was dropped unrun: the runtime is gone.
            Err(_) => Err(Error::ShutDown),
        }
    }

    /// Enters the runtime's context on this thread, for a future polled here once
    /// without waiting.
    pub(crate) fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.handle.enter()
    }

    /// Stops the thread: it runs `farewell` (if any) and ends, dropping its remaining
    /// tasks. Waits for it unless called on the thread itself or from inside an async
    /// runtime, where waiting would deadlock or stall; the thread then ends on its own.
    /// Does nothing once stopped.
    pub(crate) fn stop(&self, farewell: Option<BoxFuture<'static, ()>>) {
        let stopper = self
            .stopper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(Stopper {
            farewell: last,
            thread,
        }) = stopper
        else {
            return;
        };
        let _ = last.send(farewell.unwrap_or_else(|| Box::pin(async {})));
        let here = std::thread::current().id() == self.thread_id;
        if !here && Handle::try_current().is_err() {
            // The thread only runs the library's own futures, whose panics are caught.
            let _ = thread.join();
        }
    }
}

impl Drop for RuntimeThread {
    fn drop(&mut self) {
        self.stop(None);
    }
}

/// A value that must be dropped on the runtime thread (an async guard, whose drop hands
/// its release to the runtime). Dropping the wrapper queues the value's drop there and
/// returns at once; once the runtime is gone it is dropped in place.
pub(crate) struct RuntimeOwned<T: Send + 'static> {
    value: Option<T>,
    handle: Handle,
}

impl<T: Send + 'static> RuntimeOwned<T> {
    pub(crate) fn new(value: T, runtime: &RuntimeThread) -> Self {
        RuntimeOwned {
            value: Some(value),
            handle: runtime.handle.clone(),
        }
    }

    /// Takes the value out, to move it into a task of the runtime.
    pub(crate) fn take(&mut self) -> Option<T> {
        self.value.take()
    }

    /// The value, unless taken out.
    pub(crate) fn get(&self) -> Option<&T> {
        self.value.as_ref()
    }

    /// Puts back a value taken out.
    pub(crate) fn put(&mut self, value: T) {
        self.value = Some(value);
    }
}

impl<T: Send + 'static> Drop for RuntimeOwned<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            // A spawn never blocks; onto a runtime that is gone, the task is dropped here.
            drop(self.handle.spawn(async move { drop(value) }));
        }
    }
}

impl<T: Send + fmt::Debug + 'static> fmt::Debug for RuntimeOwned<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RuntimeOwned").field(&self.value).finish()
    }
}
