//! The deployment check behind
//! [`Redlock::check_deployment`](crate::Redlock::check_deployment) (and the CLI's
//! `doctor`): what every node is (server kind and version, role, persistence, cluster
//! mode, clock) and what about the set of them weakens the lock, each finding with a
//! severity and a one-line fix.
//!
//! - `probe`: the only part that talks to Redis: what is asked of each node, and how the
//!   answers (parsed by `crate::protocol::info`) fill a [`NodeInfo`].
//! - `findings`: pure: one function per kind of finding over the probed facts and the
//!   configuration, table-tested without a server; the findings on durability
//!   (`durability`), on failover (`failover`: masters a failover can replace, lagging
//!   replicas) and on the nodes restart quarantine keeps out now (`kept_out`) have files
//!   of their own.
//! - `key_scan` and `keys`: the crate's keys on each node, read with a bounded `SCAN`
//!   (`key_scan`, I/O) and judged (`keys`, pure): keys that never expire, foreign data in
//!   the namespace, permit counts that differ between nodes, and each node's census.
//! - `slot_markers`: pure: a Cluster member's per-slot quarantine, read on each shard
//!   master (whose slots hold a marker, which of them name an earlier life); the member's
//!   census is its masters' keys together.
//! - `render`: the report as text for people (findings that are the same on several nodes
//!   grouped on one line) and as JSON for scripts (one finding per node).

use std::fmt;
use std::time::Duration;

use crate::ensemble::Ensemble;

mod durability;
mod failover;
mod findings;
mod kept_out;
pub(super) mod key_scan;
mod keys;
mod probe;
mod render;
mod slot_markers;
#[cfg(test)]
mod tests;

pub use crate::protocol::info::ServerKind;
pub(crate) use findings::Limits;

/// How serious a [`Finding`] is. Ordered: `Info < Warning < Error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing; the lock is as safe as its design allows.
    Info,
    /// The lock works but is weaker than it looks: less fault tolerance, or a failure mode
    /// in which it can be granted twice.
    Warning,
    /// The lock is broken or unavailable as deployed.
    Error,
}

impl Severity {
    /// `"info"`, `"warning"` or `"error"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a [`Finding`] is about; stable names for scripts are given by
/// [`as_str`](Self::as_str).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FindingKind {
    /// A node did not answer: connecting, authenticating or `INFO` failed or timed out.
    /// An error when fewer than a quorum of nodes answered, else a warning.
    Unreachable,
    /// A node answered but refused `INFO`, so its role, cluster mode and persistence could
    /// not be checked (info).
    Incomplete,
    /// Two entries reach the same server (same `run_id`), which then votes twice (error).
    DuplicateServer,
    /// Two entries are in one replication group: one replicates the other, or both share a
    /// replication ID. A failover can hand the same lock to two clients (error).
    Replicated,
    /// A node is a replica of a master that is not listed: it refuses lock writes
    /// (`READONLY`) or loses them on resynchronisation (warning).
    Replica,
    /// A node runs in cluster mode: a lock key lives on whichever shard owns its slot, and a
    /// node without that slot refuses it (warning).
    ClusterMode,
    /// One node: no fault tolerance. Reported as info because a single instance is an
    /// explicit, documented mode of this client.
    SingleNode,
    /// Two nodes: both must grant every lock, so either failing stops locking (warning).
    TooFewNodes,
    /// An even number of nodes (4 or more) tolerates no more failures than one fewer would
    /// (warning).
    EvenNodeCount,
    /// `appendonly no`: a restart forgets the node's lock keys, so a lock can be granted
    /// twice (warning).
    NoPersistence,
    /// `appendonly yes` but `appendfsync` is not `always`: recent lock writes can be lost on
    /// a crash of the host (info for `everysec`, warning for `no`).
    WeakFsync,
    /// `appendonly yes` but `appendfsync` could not be read (`CONFIG GET` refused) (info).
    FsyncUnknown,
    /// A majority of the nodes can lose their data together (no persistence, RDB snapshots
    /// only, or `appendfsync no`): after they all restart, fence counters start below tokens
    /// already handed out, so fencing tokens go backwards (warning).
    MajorityMemoryLoss,
    /// A memory limit with an eviction policy: lock keys can be evicted before their TTL
    /// (warning).
    Eviction,
    /// The default TTL leaves little (warning) or no (error) validity after the drift
    /// allowance and one node timeout.
    TtlBudget,
    /// A node's wall clock differs from this host's by more than the drift allowance of the
    /// default TTL (warning) or by more than the whole TTL (error).
    ClockSkew,
    /// The node runs a server version whose release notes list a fix, in a later version,
    /// for a problem that can cost lock safety with the node's settings (the finding's
    /// message names the release note; info or warning).
    KnownIssue,
    /// The reachable nodes differ in `appendonly`: some keep lock keys across a restart and
    /// some do not, usually a configuration that drifted on some nodes (warning).
    PersistenceMismatch,
    /// A listed master that a failover can replace: it has replicas, or was itself
    /// promoted from a replica. Behind an address that follows the failover (a DNS name, a
    /// virtual IP, a proxy), the promoted replica may lack lock keys: restart quarantine
    /// keeps it out for the longest lease, as after an empty restart, so every failover
    /// costs the node's vote for that long (warning).
    FailoverRisk,
    /// A master's replica lags further behind than the default TTL: a failover would lose
    /// every lock key written in that time (warning).
    ReplicationLag,
    /// Restart quarantine keeps the node's vote out right now, judged from what every node
    /// holds as an acquisition judges it (see `NodeOutcome::Quarantined`): the message says
    /// why and when it votes again (warning).
    KeptOut,
    /// Keys of the crate that must expire (a read-write lock's writer key or readers, a
    /// permit, a writer intent, a permit count record, a waiting list, a turn) have no
    /// expiry: they hold a lock or its bookkeeping for ever. The message names them
    /// (warning).
    NoExpiry,
    /// Keys under the crate's namespace (`<prefix>quorum-lock:`) hold another type than the
    /// crate gives their kind: foreign data, which the scripts refuse or misread. The
    /// message names them (error).
    ForeignData,
    /// The nodes record different permit counts for one semaphore: its clients use
    /// different counts for one name (warning).
    PermitCountMismatch,
    /// A member under Sentinel whose sentinel group (those its URL lists and those learnt
    /// from them) does not all name one master: some are down, cut off, or see the
    /// topology otherwise. The member votes only while a majority of the group names its
    /// master, so with a bare majority left one more loss stops
    /// its votes (warning); without a majority it does not vote now (error; during a
    /// failover, until the sentinels agree again).
    SentinelQuorum,
    /// A member under Sentinel whose URL lists only some of its group's sentinels: the
    /// others were learnt from the sentinels that answered (warning). The member counts a
    /// majority of the whole group all the same, but a client that starts while the listed
    /// sentinels are down or cut off learns nothing, and a group member it never learnt
    /// cannot help it vote.
    SentinelPartialList,
}

impl FindingKind {
    /// The snake-case name used in JSON, e.g. `"duplicate_server"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            FindingKind::Unreachable => "unreachable",
            FindingKind::Incomplete => "incomplete",
            FindingKind::DuplicateServer => "duplicate_server",
            FindingKind::Replicated => "replicated",
            FindingKind::Replica => "replica",
            FindingKind::ClusterMode => "cluster_mode",
            FindingKind::SingleNode => "single_node",
            FindingKind::TooFewNodes => "too_few_nodes",
            FindingKind::EvenNodeCount => "even_node_count",
            FindingKind::NoPersistence => "no_persistence",
            FindingKind::WeakFsync => "weak_fsync",
            FindingKind::FsyncUnknown => "fsync_unknown",
            FindingKind::MajorityMemoryLoss => "majority_memory_loss",
            FindingKind::Eviction => "eviction",
            FindingKind::TtlBudget => "ttl_budget",
            FindingKind::ClockSkew => "clock_skew",
            FindingKind::KnownIssue => "known_issue",
            FindingKind::PersistenceMismatch => "persistence_mismatch",
            FindingKind::FailoverRisk => "failover_risk",
            FindingKind::ReplicationLag => "replication_lag",
            FindingKind::KeptOut => "kept_out",
            FindingKind::NoExpiry => "no_expiry",
            FindingKind::ForeignData => "foreign_data",
            FindingKind::PermitCountMismatch => "permit_count_mismatch",
            FindingKind::SentinelQuorum => "sentinel_quorum",
            FindingKind::SentinelPartialList => "sentinel_partial_list",
        }
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem (or notable fact) found by
/// [`Redlock::check_deployment`](crate::Redlock::check_deployment).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// What it is about.
    pub kind: FindingKind,
    /// How serious it is.
    pub severity: Severity,
    /// The node concerned as `host:port`, or `None` for a finding about the whole set or
    /// the configuration. For a pair of nodes, the later-listed one (or the replica).
    pub node: Option<String>,
    /// One line saying what was found and why it matters.
    pub message: String,
    /// One line saying how to fix it.
    pub fix: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.severity)?;
        if let Some(node) = &self.node {
            write!(f, "{node}: ")?;
        }
        write!(f, "{} (fix: {})", self.message, self.fix)
    }
}

/// A node's wall clock compared with this host's, from `TIME` and the round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClockOffset {
    /// Server clock minus this host's clock, in microseconds: positive when the server is
    /// ahead. Estimated as `server_time - (local_send_time + rtt / 2)`.
    pub offset_micros: i64,
    /// Half the round trip: the true offset lies within `offset ± uncertainty`.
    pub uncertainty: Duration,
    /// Round trip of the `TIME` request the estimate comes from (the fastest sample).
    pub rtt: Duration,
}

impl ClockOffset {
    /// How much of the offset is certain: `|offset| - uncertainty`, or zero.
    pub fn excess(&self) -> Duration {
        Duration::from_micros(self.offset_micros.unsigned_abs()).saturating_sub(self.uncertainty)
    }
}

/// What the check learned about one node. Fields are `None` when the node did not answer
/// or refused the command that tells.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeInfo {
    /// The node's address as `host:port` (credentials are never shown).
    pub name: String,
    /// Whether the node connected and answered.
    pub reachable: bool,
    /// Why the node is unreachable, or the first request that failed on a reachable node
    /// (say, `INFO` or `TIME` refused by an ACL).
    pub error: Option<String>,
    /// `redis_version` from `INFO`, e.g. `"7.2.4"`. Valkey reports the Redis version it is
    /// compatible with here; its own version is in [`server_version`](Self::server_version).
    pub redis_version: Option<String>,
    /// Which server the node runs (from `server_name` / `valkey_version` in `INFO`).
    pub server_kind: Option<ServerKind>,
    /// The server's own version: `valkey_version` on Valkey (e.g. `"9.1.2"`), else
    /// `redis_version`.
    pub server_version: Option<String>,
    /// `run_id` from `INFO`: random per server process, so two entries with the same one
    /// are the same server.
    pub run_id: Option<String>,
    /// `role` from `INFO`: `"master"`, or `"slave"` for a replica.
    pub role: Option<String>,
    /// `master_replid` from `INFO`: the replication ID, shared by a master and its
    /// synchronised replicas.
    pub master_replid: Option<String>,
    /// For a replica, the host of its master as the replica knows it.
    pub master_host: Option<String>,
    /// For a replica, the port of its master.
    pub master_port: Option<u16>,
    /// `connected_slaves` from `INFO`: how many replicas follow this node.
    pub replicas: Option<u32>,
    /// The longest `lag` of this node's connected replicas (whole seconds since a
    /// replica's last acknowledgement); `None` without replicas.
    pub replica_lag: Option<Duration>,
    /// Whether the server process was promoted from a replica since it started
    /// (`second_repl_offset` in `INFO` is not -1).
    pub promoted: Option<bool>,
    /// Whether the append-only file is on (`CONFIG GET appendonly`, or `aof_enabled` from
    /// `INFO` when `CONFIG` is refused).
    pub appendonly: Option<bool>,
    /// `CONFIG GET appendfsync`: `"always"`, `"everysec"` or `"no"`; `None` when `CONFIG`
    /// is refused (ACL or renamed command).
    pub appendfsync: Option<String>,
    /// `CONFIG GET save`: the RDB snapshot points, e.g. `"3600 1 300 100"`; empty when
    /// snapshots are off. `None` when `CONFIG` is refused.
    pub save: Option<String>,
    /// `maxmemory` from `INFO`, in bytes; 0 means no limit.
    pub maxmemory: Option<u64>,
    /// `maxmemory_policy` from `INFO`, e.g. `"noeviction"` or `"allkeys-lru"`.
    pub maxmemory_policy: Option<String>,
    /// `cluster_enabled` from `INFO`.
    pub cluster_enabled: Option<bool>,
    /// For a member under Sentinel (`redis+sentinel://`), the master's `host:port` as a
    /// majority of its sentinels named it for this check; `None` for a plain server.
    pub sentinel_master: Option<String>,
    /// For a member under Sentinel, what each sentinel of its group the client knows named
    /// as the master during this check: those the member's URL lists first, in its order,
    /// then those learnt from the sentinels; empty for a plain server.
    pub sentinels: Vec<SentinelAnswer>,
    /// For a member under Sentinel, how many sentinels its group has as the client counts
    /// them (those listed, those learnt, or more when a sentinel counts more): the member
    /// votes only while a majority of them names its master. `None` for a plain server.
    pub sentinel_group_size: Option<usize>,
    /// For a member that is a Redis Cluster (`redis+cluster://`), each shard master its
    /// slot table names for this check, sorted by address, with that master's replicas;
    /// the other facts are its first seed's. Empty for any other member.
    pub cluster_shards: Vec<ClusterShard>,
    /// `uptime_in_seconds` from `INFO`: time since the server process started.
    pub uptime: Option<Duration>,
    /// The clock offset from the best of a few `TIME` samples.
    pub clock: Option<ClockOffset>,
    /// The crate's keys on the node; `None` when not counted: a request of the count
    /// (`SCAN`, `TYPE`, `PTTL`, `GET`, `ZCARD`) refused, or no answer in time.
    pub keys: Option<KeyCensus>,
}

/// One sentinel's answer to the deployment check: the master it names for the member's
/// service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SentinelAnswer {
    /// The sentinel's `host:port`, as the member's URL lists it or a sentinel reported it.
    pub sentinel: String,
    /// Whether the member's URL lists the sentinel (else the client learnt it from the
    /// sentinels).
    pub listed: bool,
    /// The master's `host:port` the sentinel named; `None` when it gave no answer in time
    /// or knows no such service.
    pub master: Option<String>,
}

/// One shard of a Redis Cluster member, as the deployment check found it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterShard {
    /// The shard master's `host:port`, as the cluster's slot table names it.
    pub master: String,
    /// Whether the master answered `INFO replication` for this check (else the replica
    /// facts below are unknown, not absent).
    pub answered: bool,
    /// The `host:port` of each replica connected to the master.
    pub replicas: Vec<String>,
    /// The longest `lag` of those replicas (whole seconds since a replica's last
    /// acknowledgement); `None` without replicas.
    pub replica_lag: Option<Duration>,
    /// The slots in which the master holds a restart-quarantine marker (slots in use);
    /// `None` when its keys were not read.
    pub slots_marked: Option<usize>,
    /// Of those, the slots whose marker names an earlier life of the master (restarted or
    /// promoted since): there its vote does not count until an attempt in the slot
    /// readmits it; `None` when its keys were not read.
    pub slots_kept_out: Option<usize>,
}

impl ClusterShard {
    /// The shard of master `master` as its `INFO replication` text describes it (`None`:
    /// no answer).
    pub(crate) fn from_info(master: String, info: Option<&str>) -> Self {
        let parsed = info.map(crate::protocol::info::parse);
        ClusterShard {
            master,
            answered: parsed.is_some(),
            replicas: parsed
                .as_ref()
                .map(|i| i.replica_addresses())
                .unwrap_or_default(),
            replica_lag: parsed.as_ref().and_then(|i| i.longest_replica_lag()),
            slots_marked: None,
            slots_kept_out: None,
        }
    }
}

/// The crate's keys on one node, as the check counted them: the keys under
/// `<prefix>quorum-lock:` (the lock key of a mutex or read-write lock is its resource's
/// name, so mutexes and writers are not counted; their waiting lists and readers are).
/// Keys that expired during the count are left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeyCensus {
    /// Entries in the readers sets of read-write locks: one per reader holding on this
    /// node, plus expired entries not yet pruned.
    pub readers: u64,
    /// Semaphore permits held (slot lock keys).
    pub permits: u64,
    /// Semaphores' permit count records.
    pub count_records: u64,
    /// Waiting lists, of locks of any kind.
    pub waiting_lists: u64,
    /// Keys found under the namespace, of every kind (fencing counters and the node's
    /// quarantine records included), and still there when read.
    pub scanned: u64,
    /// Whether the count stopped at its bound (about 20 000 keys examined) before the end
    /// of the keyspace: the numbers are then lower bounds.
    pub partial: bool,
}

impl NodeInfo {
    pub(crate) fn new(name: &str) -> Self {
        NodeInfo {
            name: name.to_owned(),
            ..NodeInfo::default()
        }
    }

    /// Whether `INFO` reported this node as a replica.
    pub fn is_replica(&self) -> bool {
        matches!(self.role.as_deref(), Some("slave" | "replica"))
    }
}

/// The result of [`Redlock::check_deployment`](crate::Redlock::check_deployment): every
/// node, and the findings sorted from most to least severe. [`Display`](fmt::Display) renders a table for people,
/// [`to_json`](Self::to_json) a JSON document for scripts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeploymentReport {
    /// Votes needed for a lock: `nodes / 2 + 1`.
    pub quorum: usize,
    /// One entry per configured node, in configuration order.
    pub nodes: Vec<NodeInfo>,
    /// What was found, most severe first (then in node order).
    pub findings: Vec<Finding>,
}

impl DeploymentReport {
    /// The highest severity among the findings, `None` when there are none.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    /// The report as one line of JSON:
    /// `{"quorum":…,"worst":…,"nodes":[…],"findings":[…]}`. Absent values are `null`,
    /// durations are whole microseconds (`*_us`) or seconds (`uptime_secs`), and finding
    /// kinds and severities use their [`FindingKind::as_str`] and [`Severity::as_str`] names.
    pub fn to_json(&self) -> String {
        render::json(self)
    }
}

/// Probes every node and judges the deployment: the body of
/// [`Redlock::check_deployment`](crate::Redlock::check_deployment).
pub(crate) async fn check_deployment(inner: &Ensemble) -> DeploymentReport {
    let prefix = &inner.config.key_prefix;
    let probes = inner.nodes.iter().map(|node| probe::probe(node, prefix));
    let probed = futures::future::join_all(probes).await;
    let shards = (0..inner.nodes.len()).map(|i| inner.cluster_shards(i));
    let shards = futures::future::join_all(shards).await;
    let owners = (0..inner.nodes.len()).map(|i| inner.cluster_owner_slots(i));
    let owners = futures::future::join_all(owners).await;
    let mut nodes = Vec::with_capacity(probed.len());
    let (mut ledgers, mut scans, mut slot_findings) = (Vec::new(), Vec::new(), Vec::new());
    for ((mut node, shards), owners) in probed.into_iter().zip(shards).zip(owners) {
        node.info.cluster_shards = (shards.into_iter())
            .map(|(master, info)| ClusterShard::from_info(master, info.as_deref()))
            .collect();
        if let Some(owners) = owners {
            let masters: Vec<_> = owners.into_iter().map(|(node, _)| node).collect();
            slot_findings.extend(read_every_shard(&mut node, &masters, prefix).await);
        }
        node.info.keys = node.keys.as_ref().map(|scan| keys::census(scan, prefix));
        nodes.push(node.info);
        ledgers.push(node.ledger);
        scans.push(node.keys);
    }
    let mut findings = findings::findings(&nodes, inner.quorum, &Limits::from(&inner.config));
    if inner.config.quarantine {
        findings.extend(kept_out::kept_out(
            &nodes,
            &ledgers,
            inner.config.drift_factor,
            inner.config.ttl_ceiling,
        ));
    }
    findings.extend(keys::key_findings(&nodes, &scans, prefix));
    findings.extend(slot_findings);
    // Most severe first, the order within a severity kept.
    findings.sort_by_key(|f| std::cmp::Reverse(f.severity));
    for node in &nodes {
        if let Some(clock) = &node.clock {
            crate::metrics::clock_offset(&node.name, clock.offset_micros as f64 / 1e6);
        }
    }
    DeploymentReport {
        quorum: inner.quorum,
        nodes,
        findings,
    }
}

/// A Cluster member's bookkeeping, read on each of its shard `masters` rather than on its
/// first seed: per slot, so the seed's untagged names say nothing (no ledger), its key
/// census is every master's together, and each shard's slots in use and kept out are
/// counted. Returns the findings on slots kept out.
async fn read_every_shard(
    member: &mut probe::Probed,
    masters: &[std::sync::Arc<crate::net::node::Node>],
    prefix: &str,
) -> Vec<Finding> {
    member.ledger = None;
    let probes = masters.iter().map(|m| probe::probe(m, prefix));
    let probed = futures::future::join_all(probes).await;
    let mut merged = Some(keys::KeyScan::default());
    let mut found = Vec::new();
    for shard in &probed {
        let Some(scan) = &shard.keys else {
            merged = None;
            continue;
        };
        if let Some(all) = &mut merged {
            all.keys.extend(scan.keys.iter().cloned());
            all.partial |= scan.partial;
        }
        let counted = slot_markers::slot_markers(scan, prefix, &shard.info);
        if let Some(entry) =
            (member.info.cluster_shards.iter_mut()).find(|s| s.master == shard.info.name)
        {
            entry.slots_marked = Some(counted.marked);
            entry.slots_kept_out = Some(counted.kept_out);
        }
        found.extend(slot_markers::slots_kept_out(&shard.info.name, counted));
    }
    member.keys = merged;
    found
}

/// A finding about `node`, or about the whole deployment when `None`.
fn finding(
    kind: FindingKind,
    severity: Severity,
    node: Option<&str>,
    message: String,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        kind,
        severity,
        node: node.map(str::to_owned),
        message,
        fix: fix.into(),
    }
}
