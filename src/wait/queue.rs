//! A local, first-come first-served queue per resource, and local hand-off.
//!
//! Tasks of one client that want the same resource take turns here before they contend on
//! Redis: one of them at a time runs acquisition attempts, the others wait without sending
//! a single command. A task keeps its turn only while it acquires; then the task that has
//! waited longest takes over the waiting. A holder that wants the resource again queues
//! behind it.
//!
//! While a guard of this client holds a key, the task whose turn it is does not send
//! attempts that are bound to fail: it waits for that guard's release to complete (or for
//! its poll interval, in case the guard is forgotten), then tries at once. A hand-off
//! between tasks of one client thus costs one release and one acquisition on the nodes.
//! All of this adds fairness and saves commands; mutual exclusion itself still comes from
//! the quorum.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

#[derive(Debug)]
struct Entry {
    turn: Arc<Semaphore>,
    /// Tasks queued for, or holding, the turn.
    users: usize,
    /// Guards of this client holding the key.
    held: usize,
    /// Signalled when a local guard's release of the key completed.
    freed: Arc<Notify>,
}

impl Default for Entry {
    fn default() -> Self {
        Entry {
            turn: Arc::new(Semaphore::new(1)),
            users: 0,
            held: 0,
            freed: Arc::new(Notify::new()),
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct LocalQueue {
    keys: Mutex<HashMap<String, Entry>>,
    /// Keys whose last release by this client woke another client, with the end of the
    /// head start that client gets before this one tries the key again.
    courtesy: Mutex<HashMap<String, Instant>>,
}

/// The turn of one task on a set of keys; given back on drop.
#[derive(Debug)]
pub(crate) struct Turn {
    queue: Arc<LocalQueue>,
    taken: Vec<(String, Option<OwnedSemaphorePermit>)>,
}

/// A guard of this client holding keys; dropped when its release completed.
#[derive(Debug)]
pub(crate) struct LocalHold {
    queue: Arc<LocalQueue>,
    keys: Arc<[String]>,
}

impl LocalQueue {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets `key` once nobody uses it, so the map does not grow with every resource
    /// ever locked.
    fn tidy(map: &mut HashMap<String, Entry>, key: &str) {
        if map.get(key).is_some_and(|e| e.users == 0 && e.held == 0) {
            map.remove(key);
        }
    }

    /// Records that a release of `keys` woke another client: for a short while (a tenth of
    /// the node timeout, at most 10 ms, enough for its wake-up and attempt) new `lock()`
    /// calls of this client on these keys let it go first (asking the waiting-list node for
    /// the turn when the client listens for releases, else waiting that while), so a
    /// releasing task that immediately locks again does not keep winning against clients
    /// that waited.
    pub(crate) fn handed_off(&self, keys: &[String], node_timeout: Duration) {
        let until = Instant::now() + (node_timeout / 10).min(Duration::from_millis(10));
        let mut courtesy = self.courtesy.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        courtesy.retain(|_, t| *t > now);
        for key in keys {
            courtesy.insert(key.clone(), until);
        }
    }

    /// Until when a new `lock()` on `keys` should hold back (see [`handed_off`]).
    ///
    /// [`handed_off`]: LocalQueue::handed_off
    pub(crate) fn courtesy_until(&self, keys: &[String]) -> Option<Instant> {
        let courtesy = self.courtesy.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        keys.iter()
            .filter_map(|k| courtesy.get(k).copied())
            .filter(|t| *t > now)
            .max()
    }

    /// Whether tasks other than the current turn holder wait for any of `keys`.
    pub(crate) fn has_waiters(&self, keys: &[String]) -> bool {
        let map = self.lock();
        keys.iter().any(|k| map.get(k).is_some_and(|e| e.users > 1))
    }

    /// If a guard of this client holds one of `keys`, the signal of its release.
    pub(crate) fn held_locally(&self, keys: &[String]) -> Option<Arc<Notify>> {
        let map = self.lock();
        keys.iter()
            .find_map(|k| map.get(k).filter(|e| e.held > 0))
            .map(|e| Arc::clone(&e.freed))
    }

    /// Records that a guard of this client now holds `keys`.
    pub(crate) fn hold(self: &Arc<Self>, keys: &Arc<[String]>) -> LocalHold {
        let mut map = self.lock();
        for key in keys.iter() {
            // The entry usually exists (this task's turn made it): no key copy then.
            match map.get_mut(key.as_str()) {
                Some(entry) => entry.held += 1,
                None => map.entry(key.clone()).or_default().held += 1,
            }
        }
        LocalHold {
            queue: Arc::clone(self),
            keys: Arc::clone(keys),
        }
    }

    /// Waits for this task's turn on every key, in sorted key order (so two tasks asking
    /// for overlapping sets cannot deadlock each other).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives back any turn already taken and leaves the queue.
    pub(crate) async fn turn(self: &Arc<Self>, keys: &[String]) -> Turn {
        let mut turn = Turn {
            queue: Arc::clone(self),
            taken: Vec::with_capacity(keys.len()),
        };
        for key in keys {
            let semaphore = {
                let mut map = self.lock();
                let entry = map.entry(key.clone()).or_default();
                entry.users += 1;
                Arc::clone(&entry.turn)
            };
            // Registered before waiting, so a cancellation here is undone by `Turn::drop`.
            turn.taken.push((key.clone(), None));
            // The semaphores are never closed, so this cannot fail; if it somehow did, going
            // ahead without the turn only costs fairness.
            let permit = semaphore.acquire_owned().await.ok();
            if let Some(last) = turn.taken.last_mut() {
                last.1 = permit;
            }
        }
        turn
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut map = self.queue.lock();
        for (key, permit) in self.taken.drain(..) {
            drop(permit);
            if let Some(entry) = map.get_mut(&key) {
                entry.users = entry.users.saturating_sub(1);
            }
            LocalQueue::tidy(&mut map, &key);
        }
    }
}

impl Drop for LocalHold {
    fn drop(&mut self) {
        let mut map = self.queue.lock();
        for key in self.keys.iter() {
            if let Some(entry) = map.get_mut(key) {
                entry.held = entry.held.saturating_sub(1);
                entry.freed.notify_waiters();
            }
            LocalQueue::tidy(&mut map, key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn turns_are_fifo_and_the_map_is_cleaned() {
        let queue = Arc::new(LocalQueue::default());
        let keys = vec!["a".to_owned()];
        let first = queue.turn(&keys).await;
        assert!(!queue.has_waiters(&keys));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..5 {
            let queue = Arc::clone(&queue);
            let keys = keys.clone();
            let order = Arc::clone(&order);
            tasks.push(tokio::spawn(async move {
                let _turn = queue.turn(&keys).await;
                order.lock().unwrap().push(i);
            }));
            // Let task i queue up before task i + 1.
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
        }
        assert!(queue.has_waiters(&keys));
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert!(queue.lock().is_empty());
    }

    #[tokio::test]
    async fn overlapping_sets_do_not_deadlock_and_cancellation_leaves_the_queue() {
        let queue = Arc::new(LocalQueue::default());
        let ab = vec!["a".to_owned(), "b".to_owned()];
        let b = vec!["b".to_owned()];
        let t1 = queue.turn(&ab).await;
        let q = Arc::clone(&queue);
        let waiter = tokio::spawn(async move { drop(q.turn(&b).await) });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        // A cancelled wait leaves no trace.
        let cancelled =
            tokio::time::timeout(std::time::Duration::from_millis(5), queue.turn(&ab)).await;
        assert!(cancelled.is_err());
        drop(t1);
        waiter.await.unwrap();
        assert!(queue.lock().is_empty());
    }

    #[tokio::test]
    async fn local_holds_signal_their_release() {
        let queue = Arc::new(LocalQueue::default());
        let keys: Arc<[String]> = vec!["k".to_owned()].into();
        assert!(queue.held_locally(&keys).is_none());
        let hold = queue.hold(&keys);
        let freed = queue.held_locally(&keys).unwrap();
        let notified = freed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        drop(hold);
        notified.await;
        assert!(queue.held_locally(&keys).is_none());
        assert!(queue.lock().is_empty());
    }
}
