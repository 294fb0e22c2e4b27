//! The verdicts of the check: pure functions of the probed facts and the configuration, one
//! per kind of finding, table-tested below without a server.

use std::sync::Arc;
use std::time::Duration;

use super::{Finding, FindingKind, NodeInfo, ServerKind, Severity};
use crate::acquire::ballot::{self, Read, Seen};
use crate::config::Config;
use crate::protocol::info::Version;
use crate::report::QuarantineReason;
use crate::rules::safety::{self, Persistence, Uptime};

/// A default TTL that keeps less than this share of itself as validity is flagged.
const MIN_VALIDITY_SHARE: f64 = 0.5;

/// The configuration the findings are judged against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) ttl: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
}

impl From<&Config> for Limits {
    fn from(config: &Config) -> Self {
        Limits {
            ttl: config.default_ttl,
            drift_factor: config.drift_factor,
            node_timeout: config.node_timeout,
        }
    }
}

/// The reachable-node count and quorum the per-node findings are judged against.
#[derive(Debug, Clone, Copy)]
struct Votes {
    nodes: usize,
    reachable: usize,
    quorum: usize,
}

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

/// Everything wrong with a deployment described by `infos` (one per configured node) for a
/// client needing `quorum` votes with `limits`, most severe first.
pub(crate) fn findings(infos: &[NodeInfo], quorum: usize, limits: &Limits) -> Vec<Finding> {
    let votes = Votes {
        nodes: infos.len(),
        reachable: infos.iter().filter(|i| i.reachable).count(),
        quorum,
    };
    let mut out: Vec<Finding> = node_count(votes.nodes, quorum).into_iter().collect();
    let related = pairs(infos, &mut out);
    for (node, related) in infos.iter().zip(related) {
        if !node.reachable {
            out.push(unreachable(node, votes));
            continue;
        }
        out.extend(incomplete(node));
        out.extend(cluster_mode(node));
        if !related {
            out.extend(replica(node));
        }
        out.extend(persistence(node));
        out.extend(eviction(node));
        out.extend(clock_skew(node, limits));
        out.extend(known_issue(node));
    }
    out.extend(persistence_mismatch(infos));
    out.extend(majority_memory_loss(infos, quorum));
    out.extend(ttl_budget(limits));
    // Most severe first; equal severities keep the order above.
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// One node, two nodes, or an even number of them.
fn node_count(n: usize, quorum: usize) -> Option<Finding> {
    match n {
        1 => Some(finding(
            FindingKind::SingleNode,
            Severity::Info,
            None,
            "one node: no fault tolerance; if it is down no lock can be taken, and if it \
             restarts without persistence its locks are forgotten"
                .into(),
            "keep it if a single instance is intended; otherwise use 3 or 5 independent masters",
        )),
        2 => Some(finding(
            FindingKind::TooFewNodes,
            Severity::Warning,
            None,
            "2 nodes: both must grant every lock, so either one failing stops locking (no \
             better than one node)"
                .into(),
            "use 3 (or 5) independent masters",
        )),
        n if n >= 4 && n % 2 == 0 => Some(finding(
            FindingKind::EvenNodeCount,
            Severity::Warning,
            None,
            format!(
                "{n} nodes need {quorum} votes and tolerate {} failures, no more than {} \
                 nodes would",
                n - quorum,
                n - 1
            ),
            format!("use {} or {} independent masters", n - 1, n + 1),
        )),
        _ => None,
    }
}

/// `host:port` of a node name (which may end in `/db`), lowercased.
fn address(name: &str) -> String {
    name.split('/').next().unwrap_or(name).to_ascii_lowercase()
}

/// Whether `replica` reports `master` (by listed address) as its master.
fn replicates(replica: &NodeInfo, master: &NodeInfo) -> bool {
    match (&replica.master_host, replica.master_port) {
        (Some(host), Some(port)) if replica.is_replica() => {
            format!("{}:{port}", host.to_ascii_lowercase()) == address(&master.name)
        }
        _ => false,
    }
}

fn same(a: &Option<String>, b: &Option<String>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if !a.is_empty() && a == b)
}

/// Pairs of reachable nodes: the same server twice, or one replication group. Returns, per
/// node, whether it is in a replication group with another listed node (such a node is not
/// also reported as a replica of an unlisted master).
fn pairs(infos: &[NodeInfo], out: &mut Vec<Finding>) -> Vec<bool> {
    let mut related = vec![false; infos.len()];
    for (i, a) in infos.iter().enumerate() {
        for (j, b) in infos.iter().enumerate().skip(i + 1) {
            if !(a.reachable && b.reachable) {
                continue;
            }
            if same(&a.run_id, &b.run_id) {
                out.push(duplicate(a, b));
                continue;
            }
            if let Some(found) = replicated(a, b) {
                out.push(found);
                for k in [i, j] {
                    if let Some(flag) = related.get_mut(k) {
                        *flag = true;
                    }
                }
            }
        }
    }
    related
}

/// `b` is the same server as `a` (same `run_id`).
fn duplicate(a: &NodeInfo, b: &NodeInfo) -> Finding {
    finding(
        FindingKind::DuplicateServer,
        Severity::Error,
        Some(&b.name),
        format!(
            "is the same server as {} (run_id {}): it casts two votes, so fewer \
             servers than a quorum can grant a lock",
            a.name,
            b.run_id.as_deref().unwrap_or_default()
        ),
        "list each Redis server once",
    )
}

/// `a` and `b` in one replication group, named by the replica (or the later one).
fn replicated(a: &NodeInfo, b: &NodeInfo) -> Option<Finding> {
    let (replica, how) = if replicates(b, a) {
        (b, format!("replicates {}", a.name))
    } else if replicates(a, b) {
        (a, format!("replicates {}", b.name))
    } else if same(&a.master_replid, &b.master_replid) {
        (
            b,
            format!(
                "shares replication ID {} with {}",
                b.master_replid.as_deref().unwrap_or_default(),
                a.name
            ),
        )
    } else {
        return None;
    };
    Some(finding(
        FindingKind::Replicated,
        Severity::Error,
        Some(&replica.name),
        format!(
            "{how}: one replication group, not independent masters, so a failover \
             or lagging replication can hand the same lock to two clients"
        ),
        "use independent masters with no replication between them",
    ))
}

/// A node that did not answer: an error below the quorum, else a warning.
fn unreachable(node: &NodeInfo, votes: Votes) -> Finding {
    let Votes {
        nodes: n,
        reachable,
        quorum,
    } = votes;
    let (severity, consequence) = if reachable < quorum {
        (
            Severity::Error,
            format!(
                "only {reachable} of {n} nodes answered, below the quorum of {quorum}: no lock can be taken"
            ),
        )
    } else {
        (
            Severity::Warning,
            format!(
                "{reachable} of {n} nodes answered (quorum {quorum}): fewer failures can be tolerated"
            ),
        )
    };
    finding(
        FindingKind::Unreachable,
        severity,
        Some(&node.name),
        format!(
            "unreachable ({}); {consequence}",
            node.error.as_deref().unwrap_or("no answer")
        ),
        "start the node, or correct its URL, credentials, TLS settings or firewall",
    )
}

/// A node that answered but refused `INFO`.
fn incomplete(node: &NodeInfo) -> Option<Finding> {
    node.redis_version.is_none().then(|| {
        finding(
            FindingKind::Incomplete,
            Severity::Info,
            Some(&node.name),
            format!(
                "answered but could not be inspected ({}): replication, cluster mode and \
                 persistence are unchecked",
                node.error.as_deref().unwrap_or("INFO gave nothing")
            ),
            "run the check as a user allowed INFO and CONFIG GET",
        )
    })
}

fn cluster_mode(node: &NodeInfo) -> Option<Finding> {
    (node.cluster_enabled == Some(true)).then(|| {
        finding(
            FindingKind::ClusterMode,
            Severity::Warning,
            Some(&node.name),
            "runs in cluster mode: a lock key lives on whichever shard owns its slot, and \
             this node refuses keys of slots it does not own"
                .into(),
            "use standalone masters (cluster-enabled no), each one an independent vote",
        )
    })
}

/// A replica whose master is not among the listed nodes.
fn replica(node: &NodeInfo) -> Option<Finding> {
    if !node.is_replica() {
        return None;
    }
    let master = match (&node.master_host, node.master_port) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        _ => "an unlisted master".into(),
    };
    Some(finding(
        FindingKind::Replica,
        Severity::Warning,
        Some(&node.name),
        format!(
            "is a replica of {master}: it refuses lock writes (READONLY) or loses \
             them when it resynchronises"
        ),
        "list an independent master instead of the replica",
    ))
}

/// `appendonly` and `appendfsync` of one node.
fn persistence(node: &NodeInfo) -> Option<Finding> {
    let (kind, severity, message, fix): (_, _, String, &str) =
        match (node.appendonly, node.appendfsync.as_deref()) {
            (Some(true), Some("always")) | (None, _) => return None,
            (Some(false), _) => (
                FindingKind::NoPersistence,
                Severity::Warning,
                "appendonly is off: a restart forgets this node's lock keys, so a lock it \
                 granted can be granted again"
                    .into(),
                "set appendonly yes with appendfsync always, or keep a restarted node out of \
                 service for longer than the longest TTL",
            ),
            (Some(true), Some("everysec")) => (
                FindingKind::WeakFsync,
                Severity::Info,
                "appendfsync everysec: up to 1 s of lock writes can be lost if the host \
                 loses power"
                    .into(),
                "set appendfsync always, or keep a restarted node out of service for longer \
                 than the longest TTL",
            ),
            (Some(true), Some("no")) => (
                FindingKind::WeakFsync,
                Severity::Warning,
                "appendfsync no: the OS decides when lock writes reach the disk, so tens of \
                 seconds of them can be lost if the host crashes"
                    .into(),
                "set appendfsync always",
            ),
            (Some(true), Some(other)) => (
                FindingKind::FsyncUnknown,
                Severity::Info,
                format!("appendfsync has an unexpected value {other:?}"),
                "set appendfsync always",
            ),
            (Some(true), None) => (
                FindingKind::FsyncUnknown,
                Severity::Info,
                "appendonly is on, but appendfsync could not be read (CONFIG GET refused): \
                 unless it is always, recent lock writes can be lost on a crash"
                    .into(),
                "check that appendfsync is always, or run the check as a user allowed CONFIG GET",
            ),
        };
    Some(finding(kind, severity, Some(&node.name), message, fix))
}

/// A memory limit with a policy that can evict lock keys.
fn eviction(node: &NodeInfo) -> Option<Finding> {
    let (Some(max), Some(policy)) = (node.maxmemory, node.maxmemory_policy.as_deref()) else {
        return None;
    };
    (max > 0 && policy != "noeviction").then(|| {
        finding(
            FindingKind::Eviction,
            Severity::Warning,
            Some(&node.name),
            format!(
                "maxmemory {max} with maxmemory-policy {policy}: under memory pressure \
                 a lock key can be evicted before its TTL, and the lock granted again"
            ),
            "set maxmemory-policy noeviction on lock nodes (or no maxmemory)",
        )
    })
}

/// A clock beyond the drift allowance (warning) or the whole TTL (error).
fn clock_skew(node: &NodeInfo, limits: &Limits) -> Option<Finding> {
    let clock = node.clock?;
    let allowance = safety::drift_allowance(limits.ttl, limits.drift_factor);
    let excess = clock.excess();
    let (severity, beyond) = if excess > limits.ttl {
        (
            Severity::Error,
            format!("more than the whole default TTL of {:?}", limits.ttl),
        )
    } else if excess > allowance {
        (
            Severity::Warning,
            format!(
                "beyond the drift allowance of {allowance:?} for the default TTL of {:?}",
                limits.ttl
            ),
        )
    } else {
        return None;
    };
    Some(finding(
        FindingKind::ClockSkew,
        severity,
        Some(&node.name),
        format!(
            "clock is {} ms off this host's (±{:.1} ms), {beyond}; clocks this \
             far apart are not kept in sync, and Redis expires keys by wall clock, \
             so a correcting jump expires locks early",
            super::render::signed_ms(clock.offset_micros),
            clock.uncertainty.as_secs_f64() * 1e3
        ),
        "synchronise the clocks of the nodes and of this host with NTP (chrony), \
         slewing rather than stepping",
    ))
}

/// A server version whose release notes list a later fix for a durability problem that
/// matters with this node's persistence settings. Only facts from the release notes:
///
/// - Redis 7.0.0 release notes (redis/redis `00-RELEASENOTES`, branch 7.0), "Bug Fixes":
///   "Durability fixes for appendfsync=always policy (#9678)". redis/redis#9678 lists cases
///   in which a write was acknowledged before it was written and fsynced to the AOF: with
///   threaded I/O, for clients unblocked by a module, and while a slow script or module call
///   let other clients' events run. Redis maintainers do not normally backport non-critical
///   fixes to older releases (oranagra on redis/redis#10737), so Redis 6.x is taken to lack it.
/// - Redis 7.0.3 release notes: "Fsync directory while persisting AOF manifest, RDB file,
///   and config file (#10737)".
/// - Redis 7.0.5 release notes, "Fixes for issues in previous releases of Redis 7.0": "Fix
///   AOF rewrite to fsync the old AOF file when a new one is created (#11004)".
///
/// Valkey forked from Redis 7.2.4 and carries all three.
fn known_issue(node: &NodeInfo) -> Option<Finding> {
    if node.server_kind != Some(ServerKind::Redis) || node.appendonly != Some(true) {
        return None;
    }
    let text = node.server_version.as_deref()?;
    let version = Version::parse(text)?;
    let (severity, message) = if version < Version::new(7, 0, 0) {
        // Only `always` promises that an acknowledged write is on disk.
        if node.appendfsync.as_deref() != Some("always") {
            return None;
        }
        (
            Severity::Info,
            format!(
                "Redis {text} predates the \"durability fixes for appendfsync=always policy\" \
                 of the Redis 7.0.0 release notes (redis/redis#9678): with io-threads, \
                 module-blocked clients or a slow script, a lock write could be acknowledged \
                 before it was fsynced, and lost if the host crashed"
            ),
        )
    } else if version < Version::new(7, 0, 5) {
        let dir = if version < Version::new(7, 0, 3) {
            "the directory was not fsynced when the AOF manifest was persisted \
             (redis/redis#10737, fixed in 7.0.3), and "
        } else {
            ""
        };
        (
            Severity::Warning,
            format!(
                "Redis {text}: {dir}an AOF rewrite did not fsync the old AOF file \
                 (redis/redis#11004, fixed in 7.0.5 per its release notes), so a host \
                 crash around a rewrite can lose acknowledged lock writes"
            ),
        )
    } else {
        return None;
    };
    Some(finding(
        FindingKind::KnownIssue,
        severity,
        Some(&node.name),
        message,
        "upgrade to Redis 7.0.5 or later (or Valkey), or keep a restarted node out of service \
         for longer than the longest TTL",
    ))
}

/// Reachable nodes that disagree about `appendonly`.
fn persistence_mismatch(infos: &[NodeInfo]) -> Option<Finding> {
    let names = |on: bool| -> Vec<&str> {
        infos
            .iter()
            .filter(|i| i.reachable && i.appendonly == Some(on))
            .map(|i| i.name.as_str())
            .collect()
    };
    let (with, without) = (names(true), names(false));
    if with.is_empty() || without.is_empty() {
        return None;
    }
    Some(finding(
        FindingKind::PersistenceMismatch,
        Severity::Warning,
        None,
        format!(
            "the nodes differ in persistence: appendonly is on at {} but off at {}; a lock \
             survives a restart only on some of its nodes, and a configuration that differs \
             between nodes is usually one that drifted",
            with.join(", "),
            without.join(", ")
        ),
        "give every node the same persistence settings: appendonly yes with appendfsync always",
    ))
}

/// A majority of nodes that can lose their data together. Fence counters are kept only
/// by the nodes, so after such a majority restarts at once (a power cut, a host crash) the
/// locks in force are forgotten and the ensemble looks new to restart quarantine. A node is counted when it keeps nothing
/// across a restart (`appendonly no`, no RDB snapshots, or snapshots unknown), keeps only
/// RDB snapshots (a crash loses what changed since the last one), or has `appendfsync no`
/// (a host crash loses what the OS had not written). `everysec` loses at most a second and
/// is left to [`persistence`]; unreachable nodes and nodes whose settings could not be read
/// are not counted.
fn majority_memory_loss(infos: &[NodeInfo], quorum: usize) -> Option<Finding> {
    let at_risk: Vec<String> = infos
        .iter()
        .filter(|i| i.reachable)
        .filter_map(|i| {
            let how = match (i.appendonly, i.appendfsync.as_deref(), i.save.as_deref()) {
                (Some(false), _, Some(points)) if !points.trim().is_empty() => "RDB snapshots only",
                (Some(false), _, Some(_)) => "no persistence at all",
                (Some(false), _, None) => "appendonly no",
                (Some(true), Some("no"), _) => "appendfsync no",
                _ => return None,
            };
            Some(format!("{} ({how})", i.name))
        })
        .collect();
    if at_risk.len() < quorum.max(1) {
        return None;
    }
    let needed = (infos.len() + 1).saturating_sub(quorum);
    Some(finding(
        FindingKind::MajorityMemoryLoss,
        Severity::Warning,
        None,
        format!(
            "{} of {} nodes, a majority, can lose their data together: {}; a restart of all \
             of them at once (a power cut, a crash) forgets the locks in force, and restart \
             quarantine cannot tell (the nodes look new): a lock may be granted twice until \
             the TTLs of the lost locks have run out (fencing tokens keep their order: they \
             carry the clock)",
            at_risk.len(),
            infos.len(),
            at_risk.join(", ")
        ),
        format!(
            "give at least {needed} of the {} nodes appendonly yes with appendfsync always, so \
             that no majority can lose its data together",
            infos.len()
        ),
    ))
}

/// A default TTL that leaves little or no validity after the drift allowance and one node
/// timeout.
fn ttl_budget(limits: &Limits) -> Option<Finding> {
    let ttl = limits.ttl;
    let allowance = safety::drift_allowance(ttl, limits.drift_factor);
    let used = limits.node_timeout + allowance;
    match safety::lease_validity(ttl, limits.node_timeout, limits.drift_factor) {
        None => Some(finding(
            FindingKind::TtlBudget,
            Severity::Error,
            None,
            format!(
                "the default TTL of {ttl:?} leaves no validity after the drift allowance \
                 ({allowance:?}) and one node timeout ({:?})",
                limits.node_timeout
            ),
            suggest_ttl(limits),
        )),
        Some(validity) if validity.as_secs_f64() < ttl.as_secs_f64() * MIN_VALIDITY_SHARE => {
            Some(finding(
                FindingKind::TtlBudget,
                Severity::Warning,
                None,
                format!(
                    "the default TTL of {ttl:?} keeps only {validity:?} of validity after the \
                     drift allowance and one node timeout take {used:?}"
                ),
                suggest_ttl(limits),
            ))
        }
        Some(_) => None,
    }
}
/// The fix for a TTL budget finding: the smallest TTL whose validity after the drift
/// allowance and one node timeout is [`MIN_VALIDITY_SHARE`] of it, rounded up to a
/// millisecond.
pub(super) fn suggest_ttl(limits: &Limits) -> String {
    let share = MIN_VALIDITY_SHARE - limits.drift_factor;
    let fixed = limits.node_timeout + safety::DRIFT_CONSTANT;
    match Duration::try_from_secs_f64(fixed.as_secs_f64() / share) {
        Ok(min) if share > 0.0 => {
            let ms = min.as_millis().saturating_add(1);
            format!("raise default_ttl to at least {ms} ms, or lower node_timeout")
        }
        _ => "lower drift_factor and node_timeout, or raise default_ttl".into(),
    }
}

/// What the check read of one node's restart-quarantine bookkeeping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Ledger {
    /// The life the node's marker names; `None` when absent.
    pub(crate) marker: Option<String>,
    /// The ensemble record in milliseconds; `None` when absent.
    pub(crate) record_ms: Option<u64>,
}

/// The nodes restart quarantine keeps out now, one finding each, judged from every node's
/// facts and ledger (`None`: not read) as an acquisition judges them
/// ([`ballot::kept_out`]); the message says why and when the node votes again, in whole
/// seconds rounded up, so that nodes kept out alike share one line of the text report.
pub(crate) fn kept_out(
    infos: &[NodeInfo],
    ledgers: &[Option<Ledger>],
    drift_factor: f64,
    ceiling: Duration,
) -> Vec<Finding> {
    let reads: Vec<Option<Read>> = (infos.iter().zip(ledgers))
        .map(|(info, ledger)| Some(ballot_read(info, ledger.as_ref()?)))
        .collect();
    let verdicts = ballot::kept_out(&reads, drift_factor, ceiling);
    (infos.iter().zip(verdicts))
        .filter_map(|(info, kept)| {
            let (reason, remaining) = kept?;
            let (message, severity) = match (reason, remaining) {
                // Over by itself at the next acquisition: worth knowing, not a warning.
                (QuarantineReason::Readmitting, _) => {
                    (format!("restart quarantine: {reason}"), Severity::Info)
                }
                (_, Some(d)) => (
                    format!(
                        "restart quarantine keeps its vote out: {reason}; votes again within {} s",
                        d.as_secs_f64().ceil()
                    ),
                    Severity::Warning,
                ),
                (_, None) => (
                    format!(
                        "restart quarantine keeps its vote out: {reason}; votes again once that \
                         is resolved"
                    ),
                    Severity::Warning,
                ),
            };
            Some(finding(
                FindingKind::KeptOut,
                severity,
                Some(&info.name),
                message,
                kept_out_fix(reason),
            ))
        })
        .collect()
}

/// What an acquisition would know of a node: its `INFO` (`run_id`, uptime), durability and
/// ledger.
fn ballot_read(info: &NodeInfo, ledger: &Ledger) -> Read {
    let persistence = match (info.appendonly, info.appendfsync.as_deref()) {
        (Some(false), _) => Persistence::Volatile,
        (Some(true), Some("always")) => Persistence::AofAlways,
        (Some(true), Some(_)) => Persistence::Volatile,
        _ => Persistence::Unknown,
    };
    let mut read = Read::blank(
        info.run_id.as_deref().map(Arc::from),
        info.uptime.map(|d| Uptime::seconds(d.as_secs())),
        persistence,
    );
    read.marker = Seen::Read(ledger.marker.clone());
    read.record_ms = ledger.record_ms;
    read
}

fn kept_out_fix(reason: QuarantineReason) -> &'static str {
    match reason {
        QuarantineReason::MemoryLost | QuarantineReason::Restarted => {
            "none needed: it votes again by itself once every lock that may have used its \
             lost keys has ended; with appendonly yes and appendfsync always a restart keeps \
             its keys and it votes at once"
        }
        QuarantineReason::NoIdentity => {
            "let the client's ACL user run INFO (+info), so that its restarts can be seen"
        }
        QuarantineReason::RecordUnread => {
            "bring the unreachable or restarted nodes back: the longest TTL must be read from \
             a majority of nodes that kept their data"
        }
        QuarantineReason::FreshNeedsAll => {
            "bring every node up: the first lock of a new ensemble needs every node's answer"
        }
        QuarantineReason::Readmitting => {
            "none needed: the next acquisition writes its marker, and it votes from the one after"
        }
    }
}
