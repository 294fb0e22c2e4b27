//! The shared state below every lock operation: the nodes, the validated configuration,
//! the majority size, this client's local queue, the release notifier and the background
//! collector. A `Redlock` is an `Arc` of it; guards, leases and
//! extenders keep one too. It sits above the node, fan-out and waiting modules and
//! below acquire, release, guard and lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::config::{Config, check_ceiling, check_ttl, whole_ms};
use crate::error::{Error, Result};
use crate::net::background::Background;
use crate::net::cluster::ClusterMember;
use crate::net::fanout::RoundScope;
use crate::net::node::Node;
use crate::net::send_gate::SendGate;
use crate::protocol::access::Access;
use crate::protocol::slots;

use crate::rules::safety::{self, Persistence};
use crate::wait::Context;
use crate::wait::notify::Notifier;
use crate::wait::queue::LocalQueue;

/// The ensemble of nodes and everything shared by every clone of a
/// `Redlock`. With a Redis Cluster member, a lock's operations run on a view of it seated
/// for the lock's hash slot ([`Ensemble::seated`]): the same client, with each Cluster
/// member's node the shard master that owns the slot.
#[derive(Debug)]
pub(crate) struct Ensemble {
    /// One node per member: for a Cluster member, in a view the shard master that owns the
    /// view's slot, in the client's own ensemble a node at its first seed address.
    pub(crate) nodes: Vec<Arc<Node>>,
    pub(crate) config: Config,
    pub(crate) quorum: usize,
    pub(crate) queue: Arc<LocalQueue>,
    /// Present when release notifications are on.
    pub(crate) notifier: Option<Arc<Notifier>>,
    /// Waits for requests that rounds left behind (shared with the notifier).
    pub(crate) background: Arc<Background>,
    /// What every view shares with the client's own ensemble.
    pub(crate) life: Arc<Lifecycle>,
    /// The Cluster members, by position (none: no member is a Cluster).
    seating: Option<Arc<Seating>>,
    /// In a view, the client's own ensemble.
    base: Option<Arc<Ensemble>>,
    /// In a view seated for a slot, that slot.
    slot: Option<u16>,
}

/// The lifecycle of a client: its shutdown, the locks it holds, its attempts under way,
/// and its background readmission; one per client, shared by its views.
#[derive(Debug, Default)]
pub(crate) struct Lifecycle {
    /// Set by `Redlock::shutdown`: no new lock, request or background work after it.
    closed: AtomicBool,
    /// The locks this client holds (their leases), for `Redlock::shutdown`.
    held: Mutex<Registry>,
    /// Attempts under way, with their clean-up (see [`InFlight`]).
    attempts: AtomicUsize,
    /// Told when `attempts` falls to zero.
    attempts_settled: tokio::sync::Notify,
    /// Whether the background readmission runs (see `heal`).
    pub(crate) healer_started: AtomicBool,
    /// Wakes the background readmission: a connect learnt a node's facts.
    pub(crate) heal_wake: Arc<tokio::sync::Notify>,
    /// Taken by an attempt made while this client knows no node admitted, for its whole
    /// length: such attempts go one at a time (`acquire::first_contact`).
    pub(crate) first_contact: tokio::sync::Mutex<()>,
    /// When the last attempt began: the background readmission leaves a busy client to its
    /// own attempts, which readmit nodes as they go.
    last_attempt: Mutex<Option<tokio::time::Instant>>,
}

/// The Cluster members of an ensemble and the views seated so far.
#[derive(Debug)]
struct Seating {
    /// Per member, its cluster (`None`: a member with one node).
    clusters: Vec<Option<Arc<ClusterMember>>>,
    /// The views made so far, by slot and their nodes' addresses (weak: a view lives while a lock
    /// or an attempt uses it).
    views: Mutex<HashMap<ViewId, Weak<Ensemble>>>,
}

/// What tells two seated views apart: the slot, and the address of each member's node.
type ViewId = (u16, Vec<usize>);

/// An attempt under way (or the clean-up of one): `Redlock::shutdown` waits until none is
/// left before it closes the connections, so whatever an attempt set is given back or
/// becomes a lock that shutdown releases. Counted until dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Ensemble>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.life.attempts.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.life.attempts_settled.notify_waiters();
        }
    }
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
    /// what its release needs.
    fn shut_down(&self) -> ShutDownLock;
}

/// What the release of a lock the client's shutdown takes over needs.
#[derive(Debug)]
pub(crate) struct ShutDownLock {
    /// The ensemble the lock was granted on: with a Cluster member, the view seated for
    /// its slot, whose nodes hold its keys (the client's own would send the release to a
    /// seed that does not).
    pub(crate) ensemble: Arc<Ensemble>,
    pub(crate) keys: Arc<[String]>,
    pub(crate) token: Arc<str>,
    pub(crate) gate: Arc<SendGate>,
    pub(crate) access: Access,
}

impl Ensemble {
    /// The client's ensemble of `nodes`, where `clusters` gives, per member, its Redis
    /// Cluster (none when no member is one).
    pub(crate) fn new(
        nodes: Vec<Arc<Node>>,
        clusters: Vec<Option<Arc<ClusterMember>>>,
        config: Config,
        connect_timeout: Duration,
    ) -> Self {
        let life = Arc::new(Lifecycle::default());
        if config.quarantine {
            for node in &nodes {
                let wake = Arc::clone(&life.heal_wake);
                node.on_facts(Arc::new(move |_, _| wake.notify_one()));
            }
            for cluster in clusters.iter().flatten() {
                let wake = Arc::clone(&life.heal_wake);
                cluster.on_facts(Arc::new(move |_, _| wake.notify_one()));
            }
        } else {
            watch_persistence(&nodes);
        }
        let quorum = safety::majority(nodes.len());
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
        let seating = clusters.iter().any(Option::is_some).then(|| {
            Arc::new(Seating {
                clusters,
                views: Mutex::new(HashMap::new()),
            })
        });
        Ensemble {
            background,
            nodes,
            config,
            quorum,
            queue: Arc::new(LocalQueue::default()),
            notifier,
            life,
            seating,
            base: None,
            slot: None,
        }
    }

    /// The client's own ensemble (itself, or the one a view was seated from).
    pub(crate) fn base(self: &Arc<Self>) -> &Arc<Ensemble> {
        self.base.as_ref().unwrap_or(self)
    }

    /// The ensemble a lock on `keys` (which share one hash slot) runs on: this one without
    /// a Cluster member; else a view with each Cluster member's node the shard master that
    /// owns the slot (its first seed's node when none is known: a request there is
    /// redirected and does not vote).
    pub(crate) async fn seated(self: &Arc<Self>, keys: &[String]) -> Arc<Ensemble> {
        let base = self.base();
        let Some(seating) = &base.seating else {
            return Arc::clone(self);
        };
        let slot = keys.first().map_or(0, |k| slots::slot_of(k.as_bytes()));
        let seats = (base.nodes.iter().zip(&seating.clusters)).map(|(node, cluster)| async move {
            match cluster {
                Some(cluster) => cluster.seat(slot).await.unwrap_or_else(|| Arc::clone(node)),
                None => Arc::clone(node),
            }
        });
        let nodes: Vec<Arc<Node>> = futures::future::join_all(seats).await;
        // By slot too: a view's confirmation is its slot's (`vouches`), and two slots of one
        // master part when one of them moves.
        let id = (
            slot,
            nodes.iter().map(|n| Arc::as_ptr(n) as usize).collect(),
        );
        let mut views = seating.views.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(view) = views.get(&id).and_then(Weak::upgrade) {
            return view;
        }
        views.retain(|_, v| v.strong_count() > 0);
        let view = Arc::new(Ensemble {
            nodes,
            config: base.config.clone(),
            quorum: base.quorum,
            queue: Arc::clone(&base.queue),
            notifier: base.notifier.clone(),
            background: Arc::clone(&base.background),
            life: Arc::clone(&base.life),
            seating: None,
            base: Some(Arc::clone(base)),
            slot: Some(slot),
        });
        views.insert(id, Arc::downgrade(&view));
        view
    }

    /// Whether node `i`'s votes may count now, as far as its membership goes: a Sentinel
    /// member's only while its sentinels confirm its master (`Node::vouches`), a Cluster
    /// member's only while more than half of the cluster's other masters, asked less than a
    /// confirmation window ago, named the node owner of this view's slot (see
    /// `net::cluster`); any other node's always.
    pub(crate) fn vouches(&self, i: usize) -> bool {
        let Some(node) = self.nodes.get(i) else {
            return false;
        };
        match (self.slot, self.cluster_of(i)) {
            (Some(slot), Some(cluster)) => {
                let life = node.known().run_id();
                cluster.vouches(slot, node.name(), life.as_deref())
            }
            (None, Some(_)) => false,
            _ => node.vouches(),
        }
    }

    /// Where a lock on `keys` seated in this view is seated once every Cluster member has
    /// learnt its slot table again, when that differs from this view: its slot moved (a
    /// request was redirected). `None` without a Cluster member, or when it did not move.
    pub(crate) async fn moved_seat(self: &Arc<Self>, keys: &[String]) -> Option<Arc<Ensemble>> {
        let seating = self.base().seating.as_ref()?;
        let relearnt = seating.clusters.iter().flatten().map(|c| c.learn_now());
        futures::future::join_all(relearnt).await;
        let view = self.seated(keys).await;
        (!Arc::ptr_eq(&view, self)).then_some(view)
    }

    /// Member `i`'s Redis Cluster, if it is one.
    fn cluster_of(&self, i: usize) -> Option<&Arc<ClusterMember>> {
        let seating = self.base.as_deref().unwrap_or(self).seating.as_ref()?;
        seating.clusters.get(i)?.as_ref()
    }

    /// For member `i` when it is a Redis Cluster, each shard master its slot table names
    /// (learnt first if it never was), sorted, with the `INFO replication` it gave (see
    /// `ClusterMember::shard_replication`); empty for any other member.
    pub(crate) async fn cluster_shards(&self, i: usize) -> Vec<(String, Option<String>)> {
        match self.cluster_of(i) {
            Some(cluster) => cluster.shard_replication().await,
            None => Vec::new(),
        }
    }

    /// For member `i` when it is a Redis Cluster, each master that owns a slot this
    /// client's names can reach, with the first such slot it owns (see
    /// `ClusterMember::owner_first_slots`): with a key prefix that carries a hash tag every
    /// name is in that tag's slot, so only its owner. `None` for any other member.
    pub(crate) async fn cluster_owner_slots(&self, i: usize) -> Option<Vec<(Arc<Node>, u16)>> {
        let cluster = self.cluster_of(i)?;
        let prefix = &self.config.key_prefix;
        if prefix.contains('{') {
            let slot = slots::slot_of(prefix.as_bytes());
            return Some(
                cluster
                    .seat(slot)
                    .await
                    .map(|n| (n, slot))
                    .into_iter()
                    .collect(),
            );
        }
        Some(cluster.owner_first_slots().await)
    }

    /// Every node this client has: its members' and, for a Cluster member, every shard
    /// master named so far.
    pub(crate) fn every_node(&self) -> Vec<Arc<Node>> {
        let mut every = self.nodes.clone();
        let clusters = self
            .seating
            .iter()
            .flat_map(|s| s.clusters.iter().flatten());
        for cluster in clusters {
            every.extend(cluster.shards());
        }
        every
    }

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

    /// The nodes as a round sees them: every node, bounded by the node timeout, with the
    /// collector that finishes what a round leaves behind.
    pub(crate) fn round_scope(&self) -> RoundScope<'_> {
        RoundScope {
            nodes: &self.nodes,
            timeout: self.config.node_timeout,
            background: &self.background,
        }
    }

    /// What the waiting protocol uses of this client.
    pub(crate) fn wait_context(&self) -> Context<'_> {
        Context {
            scope: self.round_scope(),
            notifier: self.notifier.as_ref(),
            queue: &self.queue,
            space: self.config.space(),
        }
    }

    /// Validates a TTL for a lock or extension. Redis expiry has millisecond resolution:
    /// the TTL is rounded down so the validity arithmetic never assumes more time than the
    /// server grants.
    pub(crate) fn accept_ttl(&self, ttl: Duration) -> Result<Duration> {
        let ttl = Duration::from_millis(whole_ms(ttl));
        check_ttl(ttl, self.config.drift_factor, self.config.node_timeout)?;
        check_ceiling(ttl, self.config.ttl_ceiling)?;
        Ok(ttl)
    }

    /// Two configured nodes that reach one server (the same `run_id`, whatever the host
    /// name or db number, as learnt on connect): it would vote twice.
    pub(crate) fn same_server(&self) -> Option<Error> {
        if self.nodes.len() < 2 {
            // One node cannot vote twice (and an attempt at N = 1 allocates nothing here).
            return None;
        }
        let run_ids: Vec<Option<Arc<str>>> =
            self.nodes.iter().map(|n| n.known().run_id()).collect();
        let refs: Vec<Option<&str>> = run_ids.iter().map(Option::as_deref).collect();
        let (i, j) = safety::duplicate_server(&refs)?;
        // Named by member: a Cluster member's seat is a shard, its member the cluster.
        let members = &self.base.as_deref().unwrap_or(self).nodes;
        Some(Error::SameServer {
            first: members.get(i)?.name().to_owned(),
            second: members.get(j)?.name().to_owned(),
        })
    }

    /// Refuses to mint a fencing token with restart quarantine off while a node may lose
    /// its counters on a restart (no `appendfsync always`, or unknown): such a node votes
    /// again at once after a restart, with its counters gone, and a token could repeat.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming those nodes.
    pub(crate) fn refuse_unfenced(&self) -> Result<()> {
        if self.config.quarantine {
            return Ok(());
        }
        let volatile: Vec<&str> = (self.nodes.iter())
            .filter(|n| {
                n.known()
                    .facts()
                    .is_some_and(|f| f.persistence != Persistence::AofAlways)
            })
            .map(|n| n.name())
            .collect();
        if volatile.is_empty() {
            return Ok(());
        }
        Err(Error::Config(format!(
            "fencing with restart quarantine off on nodes without appendfsync always ({}): a \
             restart could repeat a token; turn restart quarantine on, or set appendonly yes \
             and appendfsync always on every node",
            volatile.join(", ")
        )))
    }
}

/// With restart quarantine off: warns once, as soon as every node's connect has learnt its
/// durability, naming the nodes that may lose writes on a restart (no `appendfsync
/// always`, or unknown). Fencing is chosen per request (`.fenced()`), not for the client,
/// so the warning is given whether or not this client will fence, and says that fenced
/// locks are refused there (a fenced acquisition fails with a configuration error).
fn watch_persistence(nodes: &[Arc<Node>]) {
    let learnt: Vec<(String, Option<Persistence>)> =
        nodes.iter().map(|n| (n.name().to_owned(), None)).collect();
    let learnt = Arc::new(Mutex::new(learnt));
    let warned = Arc::new(AtomicBool::new(false));
    for node in nodes {
        let (learnt, warned) = (Arc::clone(&learnt), Arc::clone(&warned));
        node.on_facts(Arc::new(move |name, persistence| {
            let volatile = {
                let mut learnt = learnt.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(slot) = learnt.iter_mut().find(|(n, _)| n == name) {
                    slot.1 = Some(persistence);
                }
                volatile_nodes(&learnt)
            };
            if let Some(volatile) = volatile.filter(|v| !v.is_empty())
                && !warned.swap(true, Ordering::Relaxed)
            {
                tracing::warn!(
                    nodes = ?volatile,
                    "restart quarantine is off on nodes without appendfsync always: a \
                     restart of one can let a lock be granted twice, and fenced locks are \
                     refused (their fencing tokens could repeat)"
                );
            }
        }));
    }
}

/// Once every node's durability is known: the nodes that may lose writes on a restart
/// (`None` while one is not known yet).
fn volatile_nodes(learnt: &[(String, Option<Persistence>)]) -> Option<Vec<String>> {
    learnt
        .iter()
        .try_fold(Vec::new(), |mut volatile, (name, persistence)| {
            if (*persistence)? != Persistence::AofAlways {
                volatile.push(name.clone());
            }
            Some(volatile)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatile_nodes_are_named_once_every_node_is_known() {
        let known = |p: &[Option<Persistence>]| -> Vec<(String, Option<Persistence>)> {
            p.iter()
                .enumerate()
                .map(|(i, p)| (format!("n{i}"), *p))
                .collect()
        };
        let (aof, vol, unknown) = (
            Some(Persistence::AofAlways),
            Some(Persistence::Volatile),
            Some(Persistence::Unknown),
        );
        assert_eq!(volatile_nodes(&known(&[aof, None, vol])), None);
        assert_eq!(volatile_nodes(&known(&[aof, aof])), Some(vec![]));
        assert_eq!(
            volatile_nodes(&known(&[vol, aof, unknown])),
            Some(vec!["n0".to_owned(), "n2".to_owned()])
        );
    }

    #[derive(Debug)]
    struct Lock;

    impl Held for Lock {
        fn shut_down(&self) -> ShutDownLock {
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
