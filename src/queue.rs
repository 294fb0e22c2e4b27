//! A local, first-come first-served queue per resource.
//!
//! Tasks of one client that want the same resource take turns here before they contend on
//! Redis: one of them at a time runs acquisition attempts, the others wait without sending
//! a single command. A task keeps its turn only while it acquires; then the task that has
//! waited longest takes over the waiting on Redis. A holder that wants the resource again
//! queues behind it. It adds fairness and saves commands; mutual exclusion itself still
//! comes from the quorum.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug, Default)]
pub(crate) struct LocalQueue {
    turns: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// The turn of one task on a set of keys; given back on drop.
#[derive(Debug)]
pub(crate) struct Turn {
    queue: Arc<LocalQueue>,
    held: Vec<(String, Arc<Semaphore>, Option<OwnedSemaphorePermit>)>,
}

impl LocalQueue {
    fn semaphore(&self, key: &str) -> Arc<Semaphore> {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            turns
                .entry(key.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(1))),
        )
    }

    /// Whether tasks other than the current turn holder wait for any of `keys`.
    pub(crate) fn has_waiters(&self, keys: &[String]) -> bool {
        let turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        // References: the map's, the holder's `Turn` and its permit; each waiter holds one
        // more while it waits.
        keys.iter()
            .any(|k| turns.get(k).is_some_and(|s| Arc::strong_count(s) > 3))
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
            held: Vec::with_capacity(keys.len()),
        };
        for key in keys {
            let semaphore = self.semaphore(key);
            // The queue's semaphores are never closed, so `acquire_owned` cannot fail; if it
            // somehow did, going ahead without the turn only costs fairness.
            let permit = Arc::clone(&semaphore).acquire_owned().await.ok();
            turn.held.push((key.clone(), semaphore, permit));
        }
        turn
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut turns = self.queue.turns.lock().unwrap_or_else(|p| p.into_inner());
        for (key, semaphore, permit) in self.held.drain(..) {
            drop(permit);
            // Two references left (the map's and ours) and nobody queued: forget the key so
            // the map does not grow with every resource ever locked. Waiters hold a clone,
            // so the count is exact under the map's lock.
            if Arc::strong_count(&semaphore) == 2 {
                turns.remove(&key);
            }
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
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        assert!(queue.turns.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn overlapping_sets_do_not_deadlock() {
        let queue = Arc::new(LocalQueue::default());
        let ab = vec!["a".to_owned(), "b".to_owned()];
        let b = vec!["b".to_owned()];
        let t1 = queue.turn(&ab).await;
        let q = Arc::clone(&queue);
        let waiter = tokio::spawn(async move { drop(q.turn(&b).await) });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(t1);
        waiter.await.unwrap();
        assert!(queue.turns.lock().unwrap().is_empty());
    }
}
