//! The verdicts of the check: pure functions of the probed facts and the configuration, one
//! per kind of finding, table-tested without a server (`tests.rs`).

use std::time::Duration;

use super::durability::{known_issue, majority_memory_loss, persistence, persistence_mismatch};
use super::failover::{
    failover_risk, replication_lag, sentinel_partial_list, sentinel_quorum, shard_replication_lag,
};
use super::finding;
use super::{Finding, FindingKind, NodeInfo, Severity};
use crate::ensemble::config::Config;
use crate::rules::safety;

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

/// Everything wrong with a deployment described by `infos` (one per configured node) for a
/// client needing `quorum` votes with `limits`, most severe first.
pub(crate) fn findings(infos: &[NodeInfo], quorum: usize, limits: &Limits) -> Vec<Finding> {
    let votes = Votes {
        nodes: infos.len(),
        reachable: infos.iter().filter(|i| i.reachable).count(),
        quorum,
    };
    let mut out: Vec<Finding> = node_count(votes.nodes, quorum).into_iter().collect();
    out.extend(shared_shards(infos));
    let related = pairs(infos, &mut out);
    for (node, related) in infos.iter().zip(related) {
        out.extend(sentinel_quorum(node));
        out.extend(sentinel_partial_list(node));
        if !node.reachable {
            out.push(unreachable(node, votes));
            continue;
        }
        out.extend(incomplete(node));
        out.extend(cluster_mode(node));
        // A Cluster member's seed has replicas by design: the member follows failovers.
        if !related && node.cluster_shards.is_empty() {
            out.extend(replica(node));
            out.extend(failover_risk(node));
        }
        out.extend(replication_lag(node, limits));
        out.extend(shard_replication_lag(node, limits));
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

/// Members that share a server or a replica set, where one of them is a Cluster member:
/// a shard master that another member names too (as a shard of its own, or as its
/// address) is one failure domain casting two votes, an error as the same server listed
/// twice is; a shard replica that another member names is one replication group, an
/// error as two plain members replicating each other are.
fn shared_shards(infos: &[NodeInfo]) -> Vec<Finding> {
    let mut out = Vec::new();
    for (i, a) in infos.iter().enumerate() {
        for b in infos.iter().skip(i + 1) {
            if a.cluster_shards.is_empty() && b.cluster_shards.is_empty() {
                continue;
            }
            let (mine, theirs) = (masters(a), masters(b));
            if let Some(shared) = mine.iter().find(|s| theirs.contains(s)) {
                out.push(finding(
                    FindingKind::DuplicateServer,
                    Severity::Error,
                    Some(&b.name),
                    format!(
                        "shares the server {shared} with {}: one failure domain casts two \
                         votes, so fewer servers than a quorum can grant a lock",
                        a.name
                    ),
                    "list each Redis Cluster once, and no shard of it as another member",
                ));
            } else if let Some(shared) = group(a).find(|s| group(b).any(|t| t == *s)) {
                out.push(finding(
                    FindingKind::Replicated,
                    Severity::Error,
                    Some(&b.name),
                    format!(
                        "shares the replica set of {shared} with {}: one replication \
                         group, not independent members, so a failover can hand the same \
                         lock to two clients",
                        a.name
                    ),
                    "give each member servers of its own, replicas included",
                ));
            }
        }
    }
    out
}

/// The masters a member votes through: a Cluster member's shard masters, else its own
/// address.
fn masters(node: &NodeInfo) -> Vec<String> {
    match node.cluster_shards.is_empty() {
        true => vec![address(&node.name)],
        false => (node.cluster_shards.iter())
            .map(|s| s.master.clone())
            .collect(),
    }
}

/// Every server a member's data lives on: its masters and, for a Cluster member, the
/// replicas of each shard.
fn group(node: &NodeInfo) -> impl Iterator<Item = String> + '_ {
    let replicas = (node.cluster_shards.iter()).flat_map(|s| s.replicas.iter().cloned());
    masters(node).into_iter().chain(replicas)
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
    let listed_plainly = node.cluster_shards.is_empty();
    (listed_plainly && node.cluster_enabled == Some(true)).then(|| {
        finding(
            FindingKind::ClusterMode,
            Severity::Warning,
            Some(&node.name),
            "runs in cluster mode: a lock key lives on whichever shard owns its slot, and \
             this node refuses keys of slots it does not own"
                .into(),
            "list the cluster as one member (redis+cluster://host:port,...), or use \
             standalone masters (cluster-enabled no), each one an independent vote",
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
