//! The lifecycle of a client, shared by its views: its shutdown, the locks it holds (for
//! shutdown to release), its attempts under way (for shutdown to wait for), and its
//! background readmission's wake-up.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::ensemble::{Ensemble, Held, InFlight, Registry};
use crate::error::{Error, Result};

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.life.attempts.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.life.attempts_settled.notify_waiters();
        }
    }
}

impl Registry {
    fn add(&mut self, lock: Weak<dyn Held>) {
        if self.locks.len() >= self.prune_at {
            self.locks.retain(|h| h.strong_count() > 0);
            self.prune_at = self.locks.len().saturating_mul(2).max(64);
        }
        self.locks.push(lock);
    }

    /// The locks still held.
    fn live(&self) -> Vec<Arc<dyn Held>> {
        self.locks.iter().filter_map(Weak::upgrade).collect()
    }
}

impl Ensemble {
    /// Time since the last attempt began; `None` before the first.
    pub(crate) fn since_last_attempt(&self) -> Option<Duration> {
        let last = *self
            .life
            .last_attempt
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        last.map(|at| at.elapsed())
    }

    /// Records a held lock for shutdown (dropping the entries of locks already gone).
    pub(crate) fn register(&self, lock: Weak<dyn Held>) {
        (self.life.held.lock().unwrap_or_else(|p| p.into_inner())).add(lock);
    }

    /// Whether `Redlock::shutdown` was called.
    pub(crate) fn is_closed(&self) -> bool {
        // SeqCst, with `close` and the attempt count: see `begin_attempt`.
        self.life.closed.load(Ordering::SeqCst)
    }

    /// Counts an attempt as under way, then fails with [`Error::ShutDown`] if the client
    /// was shut down. Counted before the check (both sequentially consistent): a shutdown
    /// that closes after the check sees the count and waits for the attempt.
    pub(crate) fn begin_attempt(self: &Arc<Self>) -> Result<InFlight> {
        *self
            .life
            .last_attempt
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(tokio::time::Instant::now());
        let in_flight = self.in_flight();
        self.check_open()?;
        Ok(in_flight)
    }

    /// Counts work that shutdown must wait for (an attempt's clean-up), unchecked.
    pub(crate) fn in_flight(self: &Arc<Self>) -> InFlight {
        self.life.attempts.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(self))
    }

    /// Waits until no attempt is under way (see [`InFlight`]).
    pub(crate) async fn attempts_settled(&self) {
        loop {
            let notified = self.life.attempts_settled.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the count is read: a decrement to zero after the read
            // wakes it.
            notified.as_mut().enable();
            if self.life.attempts.load(Ordering::SeqCst) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// [`Error::ShutDown`] once the client was shut down.
    pub(crate) fn check_open(&self) -> Result<()> {
        match self.is_closed() {
            true => Err(Error::ShutDown),
            false => Ok(()),
        }
    }

    /// Closes the client to new work; `false` when it was closed already.
    pub(crate) fn close(&self) -> bool {
        !self.life.closed.swap(true, Ordering::SeqCst)
    }

    /// Takes the locks still held (after [`close`](Self::close) and
    /// [`attempts_settled`](Self::attempts_settled), no more are added).
    pub(crate) fn take_held(&self) -> Vec<Arc<dyn Held>> {
        std::mem::take(&mut *self.life.held.lock().unwrap_or_else(|p| p.into_inner())).live()
    }

    /// Stops the background work: subscriptions, collector, connections.
    pub(crate) fn stop(&self) {
        self.life.heal_wake.notify_one();
        if let Some(notifier) = &self.notifier {
            notifier.stop();
        }
        self.background.stop();
        for node in self.every_node() {
            node.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ensemble::ShutDownLock;

    #[derive(Debug)]
    struct Lock;

    impl Held for Lock {
        fn shut_down(&self) -> Option<ShutDownLock> {
            unimplemented!("these tests only list the locks held")
        }
    }

    fn weak(lock: &Arc<Lock>) -> Weak<dyn Held> {
        let lock: Arc<dyn Held> = Arc::clone(lock) as Arc<dyn Held>;
        Arc::downgrade(&lock)
    }

    /// Locks released as fast as they are taken leave a bounded list; locks kept are all
    /// found by shutdown, however many were released around them.
    #[test]
    fn registry_prunes_released_locks_and_keeps_held_ones() {
        let mut registry = Registry::default();
        let mut kept = Vec::new();
        for i in 0..10_000 {
            let lock = Arc::new(Lock);
            registry.add(weak(&lock));
            if i % 100 == 0 {
                kept.push(lock);
            }
            assert!(registry.locks.len() <= 2 * kept.len() + 64 + 1, "at {i}");
        }
        assert_eq!(registry.live().len(), kept.len());
        assert_eq!(kept.len(), 100);
    }
}
