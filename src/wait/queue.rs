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

use hashbrown::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::futures::Notified;
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use crate::wait::read_holds::ReadHolds;

/// What the tasks of this client using one key share: one allocation per key in use.
#[derive(Debug)]
struct Shared {
    /// One permit, the turn. A task that takes it forgets the permit and [`Turn::drop`]
    /// adds it back: tokio's semaphore hands it to the longest waiter first, so the turns
    /// stay first-come first-served.
    turn: Semaphore,
    /// Signalled when a local guard's release of the key completed.
    freed: Notify,
    /// How many such releases there were (see [`LocalReleases`]).
    releases: AtomicU64,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            turn: Semaphore::new(1),
            freed: Notify::new(),
            releases: AtomicU64::new(0),
        })
    }
}

/// One key in the local queue: its turn, shared with the tasks that wait for it, and who
/// uses it.
#[derive(Debug)]
struct KeyTurns {
    shared: Arc<Shared>,
    /// Tasks queued for, or holding, the turn.
    users: usize,
    /// Guards of this client holding the key.
    held: usize,
}

/// The keys in use, and one [`Shared`] kept from a key no longer in use: a client that
/// locks one resource after another makes no new one per lock.
#[derive(Debug, Default)]
struct Keys {
    map: HashMap<String, KeyTurns>,
    spare: Option<Arc<Shared>>,
}

impl Keys {
    /// The entry of `key`, made if it is not in use.
    fn entry(&mut self, key: &str) -> &mut KeyTurns {
        let spare = &mut self.spare;
        self.map.entry_ref(key).or_insert_with(|| KeyTurns {
            shared: spare.take().unwrap_or_else(Shared::new),
            users: 0,
            held: 0,
        })
    }

    /// Changes `key`'s entry with `change`, then forgets the key once nobody uses it, so
    /// the map does not grow with every resource ever locked.
    fn update(&mut self, key: &str, change: impl FnOnce(&mut KeyTurns)) {
        let unused = self.map.get_mut(key).is_some_and(|entry| {
            change(entry);
            entry.users == 0 && entry.held == 0
        });
        if !unused {
            return;
        }
        if let Some(entry) = self.map.remove(key)
            // Nobody else refers to it (a task waiting for its turn or its signal does):
            // and with no users left, every turn taken was given back.
            && Arc::strong_count(&entry.shared) == 1
        {
            self.spare = Some(entry.shared);
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct LocalQueue {
    /// The read locks this client's tasks hold.
    pub(crate) reads: Arc<ReadHolds>,
    keys: Mutex<Keys>,
    /// Keys whose last release by this client woke another client, with the end of the
    /// head start that client gets before this one tries the key again.
    courtesy: Mutex<HashMap<String, Instant>>,
    /// Per semaphore name and permit count, the turns of this client's tasks (see
    /// [`LocalQueue::permit_turn`]).
    permit_turns: Mutex<HashMap<(String, u32), Arc<Semaphore>>>,
}

/// One task's turn among this client's tasks that want a permit of one semaphore: at most
/// as many tasks as it has permits try for them or hold them at once, and the others wait
/// here in arrival order without sending a command. Given back on drop.
#[derive(Debug)]
pub(crate) struct PermitTurn {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    queue: Arc<LocalQueue>,
    key: (String, u32),
}

impl Drop for PermitTurn {
    fn drop(&mut self) {
        drop(self.permit.take());
        // Forget the semaphore once nobody waits for it or holds one of its turns.
        let mut turns = (self.queue.permit_turns.lock()).unwrap_or_else(|p| p.into_inner());
        let unused = (turns.get(&self.key)).is_some_and(|s| {
            let all = usize::try_from(self.key.1).unwrap_or(usize::MAX);
            Arc::strong_count(s) == 1 && s.available_permits() == all
        });
        if unused {
            turns.remove(&self.key);
        }
    }
}

/// Whose turn a call waits for among this client's tasks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TurnOf<'a> {
    /// The keys of one lock: one task at a time (see [`LocalQueue::turn`]).
    Lock,
    /// A permit of semaphore `name` of `permits` permits: that many tasks at a time (see
    /// [`LocalQueue::permit_turn`]).
    Permit { name: &'a str, permits: u32 },
}

/// A task's turn, of either sort, held; given back on drop.
#[derive(Debug)]
pub(crate) enum HeldTurn {
    /// Held for its `Drop`: the turn passes on when the call ends.
    Lock { _turn: Turn },
    /// Held for its `Drop`: kept with the permit won.
    Permit { _turn: PermitTurn },
}

/// The turn of one task on a set of keys; given back on drop.
#[derive(Debug)]
pub(crate) struct Turn {
    queue: Arc<LocalQueue>,
    keys: Arc<[String]>,
    /// How many of `keys`, from the first, count this task among their users.
    queued: usize,
    /// How many of `keys`, from the first, this task has the turn of (`queued` or one less).
    taken: usize,
}

/// A guard of this client holding keys; dropped when its release completed.
#[derive(Debug)]
pub(crate) struct LocalHold {
    queue: Arc<LocalQueue>,
    keys: Arc<[String]>,
}

/// The locks a guard of this client held when they were watched
/// ([`LocalQueue::watch_releases`]), each with its count of releases then: a release that
/// completes afterwards, also before [`LocalReleases::first_or`] is awaited, counts.
pub(crate) struct LocalReleases {
    /// The index of each watched key among the keys given, its shared state, and how
    /// many releases it had seen when watched.
    watched: Vec<(usize, Arc<Shared>, u64)>,
}

impl LocalReleases {
    /// No lock watched: [`first_or`](Self::first_or) waits out its delay.
    pub(crate) fn none() -> LocalReleases {
        LocalReleases {
            watched: Vec::new(),
        }
    }

    /// These locks and those of `other`.
    pub(crate) fn and(mut self, other: LocalReleases) -> LocalReleases {
        self.watched.extend(other.watched);
        self
    }

    /// Waits until one of the watched locks is released by this client, or `delay` passed.
    /// Returns the index of the released key, `None` when the delay ran out first.
    pub(crate) async fn first_or(self, delay: Duration) -> Option<usize> {
        let mut armed = Vec::with_capacity(self.watched.len());
        for (i, shared, seen) in &self.watched {
            // Registered before the count is read: a release after the read wakes it.
            let mut notified = Box::pin(shared.freed.notified());
            notified.as_mut().enable();
            if shared.releases.load(Ordering::SeqCst) != *seen {
                return Some(*i);
            }
            armed.push(Box::pin(async move {
                notified.await;
                *i
            }));
        }
        if armed.is_empty() {
            tokio::time::sleep(delay).await;
            return None;
        }
        tokio::select! {
            (i, _, _) = futures::future::select_all(armed) => Some(i),
            () = tokio::time::sleep(delay) => None,
        }
    }
}

impl std::fmt::Debug for LocalReleases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalReleases")
            .field("watched", &self.watched.len())
            .finish()
    }
}

/// The signal of a local guard's release of a key (see [`LocalQueue::held_locally`]).
#[derive(Debug)]
pub(crate) struct Freed(Arc<Shared>);

impl Freed {
    /// Completes once the release completed (after [`Notified::enable`], or when polled
    /// first, as [`Notify::notified`]).
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.0.freed.notified()
    }
}

impl LocalQueue {
    fn lock(&self) -> MutexGuard<'_, Keys> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
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
        if courtesy.is_empty() {
            // No hand-off pending (the usual case): no clock read.
            return None;
        }
        let now = Instant::now();
        keys.iter()
            .filter_map(|k| courtesy.get(k).copied())
            .filter(|t| *t > now)
            .max()
    }

    /// Whether tasks other than the current turn holder wait for any of `keys`.
    pub(crate) fn has_waiters(&self, keys: &[String]) -> bool {
        let keys_in_use = self.lock();
        keys.iter()
            .any(|k| keys_in_use.map.get(k).is_some_and(|e| e.users > 1))
    }

    /// If a guard of this client holds one of `keys`, the signal of its release.
    pub(crate) fn held_locally(&self, keys: &[String]) -> Option<Freed> {
        let keys_in_use = self.lock();
        keys.iter()
            .find_map(|k| keys_in_use.map.get(k).filter(|e| e.held > 0))
            .map(|e| Freed(Arc::clone(&e.shared)))
    }

    /// Waits for this task's turn of sort `of`, `keys` being the lock's keys.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives back any turn already taken and leaves the queue.
    pub(crate) async fn take_turn(
        self: &Arc<Self>,
        of: TurnOf<'_>,
        keys: &Arc<[String]>,
    ) -> HeldTurn {
        match of {
            TurnOf::Lock => HeldTurn::Lock {
                _turn: self.turn(keys).await,
            },
            TurnOf::Permit { name, permits } => HeldTurn::Permit {
                _turn: self.permit_turn(name, permits).await,
            },
        }
    }

    /// Waits for this task's turn among the tasks of this client that want a permit of the
    /// semaphore `name` of `permits` permits: first come, first served (tokio's semaphore
    /// hands a returned turn to the longest waiter).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the queue.
    pub(crate) async fn permit_turn(self: &Arc<Self>, name: &str, permits: u32) -> PermitTurn {
        let key = (name.to_owned(), permits);
        let turns = {
            let mut map = (self.permit_turns.lock()).unwrap_or_else(|p| p.into_inner());
            let size = usize::try_from(permits).unwrap_or(usize::MAX);
            Arc::clone((map.entry(key.clone())).or_insert_with(|| Arc::new(Semaphore::new(size))))
        };
        // The semaphore is never closed, so this cannot fail; if it somehow did, going on
        // without a turn costs only fairness.
        let permit = turns.acquire_owned().await.ok();
        PermitTurn {
            permit,
            queue: Arc::clone(self),
            key,
        }
    }

    /// Whichever of `keys` (each a lock of its own) a guard of this client holds now, to
    /// wait for the release of one of them: see [`LocalReleases`].
    pub(crate) fn watch_releases(&self, keys: &[String]) -> LocalReleases {
        let keys_in_use = self.lock();
        let watched = (keys.iter().enumerate())
            .filter_map(|(i, k)| Some((i, keys_in_use.map.get(k).filter(|e| e.held > 0)?)))
            .map(|(i, e)| {
                let seen = e.shared.releases.load(Ordering::SeqCst);
                (i, Arc::clone(&e.shared), seen)
            })
            .collect();
        LocalReleases { watched }
    }

    /// Records that a guard of this client now holds `keys`.
    pub(crate) fn hold(self: &Arc<Self>, keys: &Arc<[String]>) -> LocalHold {
        let mut keys_in_use = self.lock();
        for key in keys.iter() {
            // The entry usually exists (this task's turn made it); `entry` copies the key
            // only when it makes one.
            keys_in_use.entry(key).held += 1;
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
    pub(crate) async fn turn(self: &Arc<Self>, keys: &Arc<[String]>) -> Turn {
        let mut turn = Turn {
            queue: Arc::clone(self),
            keys: Arc::clone(keys),
            queued: 0,
            taken: 0,
        };
        for key in keys.iter() {
            let shared = {
                let mut keys_in_use = self.lock();
                let entry = keys_in_use.entry(key);
                entry.users += 1;
                // Counted before waiting, so a cancellation here is undone by `Turn::drop`.
                turn.queued += 1;
                // Free, with nobody queued before us (a released permit goes to the
                // longest waiter, never to a newcomer): taken without waiting.
                if let Ok(permit) = entry.shared.turn.try_acquire() {
                    permit.forget();
                    turn.taken += 1;
                    continue;
                }
                Arc::clone(&entry.shared)
            };
            // The semaphores are never closed, so this cannot fail; if it somehow did, going
            // ahead without the turn only costs fairness.
            if let Ok(permit) = shared.turn.acquire().await {
                permit.forget();
                turn.taken += 1;
            }
        }
        turn
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut keys_in_use = self.queue.lock();
        for (i, key) in self.keys.iter().take(self.queued).enumerate() {
            let taken = i < self.taken;
            keys_in_use.update(key, |entry| {
                if taken {
                    entry.shared.turn.add_permits(1);
                }
                entry.users = entry.users.saturating_sub(1);
            });
        }
    }
}

impl Drop for LocalHold {
    fn drop(&mut self) {
        let mut keys_in_use = self.queue.lock();
        for key in self.keys.iter() {
            keys_in_use.update(key, |entry| {
                entry.held = entry.held.saturating_sub(1);
                entry.shared.releases.fetch_add(1, Ordering::SeqCst);
                entry.shared.freed.notify_waiters();
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn turns_are_fifo_and_the_map_is_cleaned() {
        let queue = Arc::new(LocalQueue::default());
        let keys: Arc<[String]> = vec!["a".to_owned()].into();
        let first = queue.turn(&keys).await;
        assert!(!queue.has_waiters(&keys));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..5 {
            let queue = Arc::clone(&queue);
            let keys = Arc::clone(&keys);
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
        assert!(queue.lock().map.is_empty());
    }

    #[tokio::test]
    async fn overlapping_sets_do_not_deadlock_and_cancellation_leaves_the_queue() {
        let queue = Arc::new(LocalQueue::default());
        let ab: Arc<[String]> = vec!["a".to_owned(), "b".to_owned()].into();
        let b: Arc<[String]> = vec!["b".to_owned()].into();
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
        assert!(queue.lock().map.is_empty());
    }

    #[tokio::test]
    async fn a_recycled_entry_has_one_turn_and_a_fresh_signal() {
        let queue = Arc::new(LocalQueue::default());
        let a: Arc<[String]> = vec!["a".to_owned()].into();
        let b: Arc<[String]> = vec!["b".to_owned()].into();
        drop(queue.hold(&a));
        drop(queue.turn(&a).await);
        assert!(queue.lock().spare.is_some());
        // "b" gets the spare: one turn, taken by the first task only.
        let first = queue.turn(&b).await;
        assert!(queue.lock().spare.is_none());
        let second = tokio::time::timeout(Duration::from_millis(5), queue.turn(&b)).await;
        assert!(second.is_err());
        let q = Arc::clone(&queue);
        let b2 = Arc::clone(&b);
        let waiter = tokio::spawn(async move { drop(q.turn(&b2).await) });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(first);
        waiter.await.unwrap();
        // Its signal is that of "b" alone: a release of "b" wakes a task waiting on it.
        dropping_the_hold_signals(&queue, &b).await;
        assert!(queue.lock().map.is_empty());
    }

    /// Holds `keys` locally, then drops the hold: a task waiting on their release signal
    /// (enabled before the drop) is woken.
    async fn dropping_the_hold_signals(queue: &Arc<LocalQueue>, keys: &Arc<[String]>) {
        let hold = queue.hold(keys);
        let freed = queue.held_locally(keys).unwrap();
        let notified = freed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        drop(hold);
        notified.await;
    }

    #[tokio::test]
    async fn local_holds_signal_their_release() {
        let queue = Arc::new(LocalQueue::default());
        let keys: Arc<[String]> = vec!["k".to_owned()].into();
        assert!(queue.held_locally(&keys).is_none());
        dropping_the_hold_signals(&queue, &keys).await;
        assert!(queue.held_locally(&keys).is_none());
        assert!(queue.lock().map.is_empty());
    }
}
