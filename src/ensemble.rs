//! The shared state below every lock operation: the nodes, the validated configuration,
//! the majority size, this client's local queue, the release notifier and the background
//! collector. A `Redlock` is an `Arc` of it; guards, leases and
//! extenders keep one too. It sits above the node, fan-out and waiting modules and
//! below acquire, release, guard and lease.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::config::{Config, check_ttl, whole_ms};
use crate::error::{Error, Result};
use crate::fanout::{Background, View};
use crate::node::{Node, SendGate};
use crate::quorum;
use crate::safety::{self, Persistence};
use crate::wait::Context;
use crate::wait::notify::Notifier;
use crate::wait::queue::LocalQueue;

/// The ensemble of nodes and everything shared by every clone of a
/// `Redlock`.
#[derive(Debug)]
pub(crate) struct Ensemble {
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) config: Config,
    pub(crate) quorum: usize,
    pub(crate) queue: Arc<LocalQueue>,
    /// Present when release notifications are on.
    pub(crate) notifier: Option<Arc<Notifier>>,
    /// Waits for requests that rounds left behind (shared with the notifier).
    pub(crate) background: Arc<Background>,
    /// Whether the warning about fencing without quarantine on volatile nodes was given.
    warned_unfenced: AtomicBool,
    /// Set by `Redlock::shutdown`: no new lock, request or background work after it.
    closed: AtomicBool,
    /// The locks this client holds (their leases), for `Redlock::shutdown`.
    held: Mutex<Registry>,
}

/// The leases of the locks held, as weak references, some of them gone: pruned when the
/// list has doubled since the last pruning, so that a registration costs O(1) amortised
/// instead of a pass over every lock held (which made filling 100 000 locks quadratic).
/// A gone entry keeps only its lease's allocation (its fields are dropped), until the next
/// pruning.
#[derive(Debug, Default)]
struct Registry {
    locks: Vec<Weak<dyn Held>>,
    /// The length at which the next registration prunes first.
    prune_at: usize,
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

/// A lock held by this client, as shutdown sees it (implemented by the lease).
pub(crate) trait Held: Send + Sync + std::fmt::Debug {
    /// Marks the lock lost because the client shuts down, stops its extender, and returns
    /// what its release needs: keys, token and send gate.
    fn shut_down(&self) -> (Arc<[String]>, Arc<str>, Arc<SendGate>);
}

impl Ensemble {
    pub(crate) fn new(nodes: Vec<Arc<Node>>, config: Config, connect_timeout: Duration) -> Self {
        let quorum = quorum::quorum(nodes.len());
        let background = Arc::new(Background::new(nodes.clone()));
        let notifier = config.notifications.then(|| {
            Arc::new(Notifier::new(
                nodes.clone(),
                Arc::clone(&background),
                connect_timeout,
                config.node_timeout,
                config.key_prefix.clone(),
            ))
        });
        Ensemble {
            background,
            nodes,
            config,
            quorum,
            warned_unfenced: AtomicBool::new(false),
            queue: Arc::new(LocalQueue::default()),
            notifier,
            closed: AtomicBool::new(false),
            held: Mutex::new(Registry::default()),
        }
    }

    /// Records a held lock for shutdown (dropping the entries of locks already gone).
    pub(crate) fn register(&self, lock: Weak<dyn Held>) {
        (self.held.lock().unwrap_or_else(|p| p.into_inner())).add(lock);
    }

    /// Whether `Redlock::shutdown` was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// [`Error::ShutDown`] once the client was shut down.
    pub(crate) fn check_open(&self) -> Result<()> {
        match self.is_closed() {
            true => Err(Error::ShutDown),
            false => Ok(()),
        }
    }

    /// Closes the client to new work and returns the locks still held (first call only).
    pub(crate) fn close(&self) -> Vec<Arc<dyn Held>> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *self.held.lock().unwrap_or_else(|p| p.into_inner())).live()
    }

    /// Stops the background work: subscriptions, collector, connections.
    pub(crate) fn stop(&self) {
        if let Some(notifier) = &self.notifier {
            notifier.stop();
        }
        self.background.stop();
        for node in &self.nodes {
            node.close();
        }
    }

    /// The nodes as a round sees them: every node, bounded by the node timeout, with the
    /// collector that finishes what a round leaves behind.
    pub(crate) fn view(&self) -> View<'_> {
        View {
            nodes: &self.nodes,
            timeout: self.config.node_timeout,
            background: &self.background,
        }
    }

    /// What the waiting protocol uses of this client.
    pub(crate) fn wait_context(&self) -> Context<'_> {
        Context {
            view: self.view(),
            notifier: self.notifier.as_ref(),
            queue: &self.queue,
            prefix: &self.config.key_prefix,
        }
    }

    /// Validates a TTL for a lock or extension. Redis expiry has millisecond resolution:
    /// the TTL is rounded down so the validity arithmetic never assumes more time than the
    /// server grants.
    pub(crate) fn accept_ttl(&self, ttl: Duration) -> Result<Duration> {
        let ttl = Duration::from_millis(whole_ms(ttl));
        check_ttl(ttl, self.config.drift_factor, self.config.node_timeout)?;
        Ok(ttl)
    }

    /// Two configured nodes that reach one server (the same `run_id`, whatever the host
    /// name or db number, as learnt on connect): it would vote twice.
    pub(crate) fn same_server(&self) -> Option<Error> {
        if self.nodes.len() < 2 {
            // One node cannot vote twice (and an attempt at N = 1 allocates nothing here).
            return None;
        }
        let run_ids: Vec<Option<Arc<str>>> = self.nodes.iter().map(|n| n.run_id()).collect();
        let refs: Vec<Option<&str>> = run_ids.iter().map(Option::as_deref).collect();
        let (i, j) = safety::duplicate_server(&refs)?;
        Some(Error::SameServer {
            first: self.nodes.get(i)?.name().to_owned(),
            second: self.nodes.get(j)?.name().to_owned(),
        })
    }

    /// Warns once when fencing tokens are minted with quarantine off while a node may lose
    /// its counters on a restart (no `appendfsync always`, or unknown): tokens may then
    /// repeat.
    pub(crate) fn warn_unfenced(&self) {
        if self.config.quarantine || self.warned_unfenced.load(Ordering::Relaxed) {
            return;
        }
        let volatile: Vec<&str> = (self.nodes.iter())
            .filter(|n| {
                n.facts()
                    .is_some_and(|f| f.persistence != Persistence::AofAlways)
            })
            .map(|n| n.name())
            .collect();
        if !volatile.is_empty() && !self.warned_unfenced.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                nodes = ?volatile,
                "fencing with restart quarantine off on nodes without appendfsync always: \
                 a restart can make fencing tokens repeat"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Lock;

    impl Held for Lock {
        fn shut_down(&self) -> (Arc<[String]>, Arc<str>, Arc<SendGate>) {
            (
                Arc::from(Vec::new()),
                Arc::from(""),
                Arc::new(SendGate::new()),
            )
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
