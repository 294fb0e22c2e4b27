//! The read locks this client's tasks hold, by resource and task. A task that holds a read
//! lock and asks for the write lock of the same name would wait for itself (until its
//! wait budget ran out, its read lock being kept alive meanwhile): that request is refused
//! at once instead.

use std::sync::{Arc, Mutex, MutexGuard};

use hashbrown::HashMap;
use tokio::task::Id;

/// The read locks held, counted per resource and task (`None`: held outside a task).
#[derive(Debug, Default)]
pub(crate) struct ReadHolds {
    held: Mutex<HashMap<(String, Option<Id>), usize>>,
}

impl ReadHolds {
    fn lock(&self) -> MutexGuard<'_, HashMap<(String, Option<Id>), usize>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that the current task holds a read lock on `key` (a resource name), until the hold
    /// drops.
    pub(crate) fn hold(self: &Arc<Self>, key: &str) -> ReadHold {
        let task = tokio::task::try_id();
        *self.lock().entry((key.to_owned(), task)).or_insert(0) += 1;
        ReadHold {
            holds: Arc::clone(self),
            key: key.to_owned(),
            task,
        }
    }

    /// Whether the current task holds a read lock on `key` (a resource name).
    pub(crate) fn held_by_this_task(&self, key: &str) -> bool {
        let task = tokio::task::try_id();
        self.lock().contains_key(&(key.to_owned(), task))
    }
}

/// A read lock's mark in [`ReadHolds`], removed when it drops.
#[derive(Debug)]
pub(crate) struct ReadHold {
    holds: Arc<ReadHolds>,
    key: String,
    task: Option<Id>,
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        let mut held = self.holds.lock();
        let entry = (std::mem::take(&mut self.key), self.task);
        if let Some(count) = held.get_mut(&entry) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(&entry);
            }
        }
    }
}
