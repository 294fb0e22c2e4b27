//! The shared state below every lock operation: the nodes, the validated configuration,
//! the majority size, this client's local queue, the release notifier and the background
//! collector. A `Redlock` is an `Arc` of it; guards, leases and extenders keep one too. It
//! sits above the node, fan-out and waiting modules and below acquire, release, guard and
//! lease.
//!
//! - this file: the state and the types it is made of, its making, and what rounds and
//!   waiters read of it;
//! - [`config`]: the validated settings and the TTL checks;
//! - `lifecycle`: shutdown, the locks held and the attempts under way;
//! - `seating`: with a Redis Cluster member, the views seated per hash slot, and whether a
//!   member's vote is vouched for;
//! - `persistence_warning`: the warning given when restart quarantine is off on nodes
//!   that may lose writes.

pub(crate) mod config;
mod lifecycle;
mod persistence_warning;
mod seating;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::ensemble::config::{Config, check_ceiling, check_ttl, whole_ms};
use crate::ensemble::persistence_warning::watch_persistence;
use crate::error::{Error, Result};
use crate::net::background::Background;
use crate::net::cluster::ClusterMember;
use crate::net::fanout::RoundScope;
use crate::net::node::Node;
use crate::net::send_gate::SendGate;
use crate::protocol::access::Access;
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

/// A lock held by this client, as shutdown sees it (implemented by the lease).
pub(crate) trait Held: Send + Sync + std::fmt::Debug {
    /// Marks the lock lost because the client shuts down, stops its extender, and returns
    /// what its release needs; `None` for a lock handed on as a ticket.
    fn shut_down(&self) -> Option<ShutDownLock>;
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

/// An attempt under way (or the clean-up of one): `Redlock::shutdown` waits until none is
/// left before it closes the connections, so whatever an attempt set is given back or
/// becomes a lock that shutdown releases. Counted until dropped.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Ensemble>);

/// The Cluster members of an ensemble and the views seated so far.
#[derive(Debug)]
pub(super) struct Seating {
    /// Per member, its cluster (`None`: a member with one node).
    clusters: Vec<Option<Arc<ClusterMember>>>,
    /// The views made so far, by slot and their nodes' addresses (weak: a view lives while a lock
    /// or an attempt uses it).
    views: Mutex<HashMap<ViewId, Weak<Ensemble>>>,
}

/// What tells two seated views apart: the slot, and the address of each member's node.
type ViewId = (u16, Vec<usize>);

impl Seating {
    /// The seating of an ensemble whose members are `clusters` (`None` when no member is a
    /// Redis Cluster).
    fn of(clusters: Vec<Option<Arc<ClusterMember>>>) -> Option<Arc<Seating>> {
        clusters.iter().any(Option::is_some).then(|| {
            Arc::new(Seating {
                clusters,
                views: Mutex::new(HashMap::new()),
            })
        })
    }
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
                &config.holder,
            ))
        });
        let seating = Seating::of(clusters);
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
