//! The findings on failover: a listed master that a failover can replace, a replica too
//! far behind for a failover to keep the locks, and a member under Sentinel whose
//! sentinels do not all name one master or whose URL lists only some of them.

use super::Limits;
use super::{Finding, FindingKind, NodeInfo, Severity, finding};
use crate::rules::sentinel::agreed;

/// What a failover behind a node's address means here: the promoted replica may lack lock
/// keys, so restart quarantine reads it as a new life (`safety::process_life`).
const PROMOTED_REPLICA: &str = "behind an address that follows a failover (a DNS name, a \
    virtual IP, a proxy), a promoted replica that may lack lock keys takes this node's place, \
    and restart quarantine keeps it out for the longest lease, as after an empty restart";

/// A master with replicas, or one promoted from a replica during its life (warning).
///
/// Not for a member under Sentinel: it follows its master through failovers by design,
/// and restart quarantine with the sentinels' confirmation covers them (DESIGN.md).
pub(super) fn failover_risk(node: &NodeInfo) -> Option<Finding> {
    if node.is_replica() || node.sentinel_master.is_some() {
        return None;
    }
    let replicas = node.replicas.unwrap_or(0);
    let what = match (replicas, node.promoted) {
        (0, Some(true)) => "was promoted from a replica since it started".to_owned(),
        (0, _) => return None,
        (1, _) => "has a replica".to_owned(),
        (n, _) => format!("has {n} replicas"),
    };
    Some(finding(
        FindingKind::FailoverRisk,
        Severity::Warning,
        Some(&node.name),
        format!("{what}: {PROMOTED_REPLICA}"),
        "give lock nodes no replicas and no automatic failover, or list each master by an \
         address that never moves to another server",
    ))
}

/// A replica that lags behind its master by more than the default TTL (warning).
pub(super) fn replication_lag(node: &NodeInfo, limits: &Limits) -> Option<Finding> {
    let lag = node.replica_lag.filter(|lag| *lag > limits.ttl)?;
    Some(finding(
        FindingKind::ReplicationLag,
        Severity::Warning,
        Some(&node.name),
        format!(
            "a replica last acknowledged {} s ago, longer than the default TTL ({:?}): a \
             failover now would lose every lock key written since",
            lag.as_secs(),
            limits.ttl
        ),
        "repair the replication link, or remove the replica",
    ))
}

/// A Cluster member's shard whose replica lags behind its master by more than the
/// default TTL (warning, one per shard): the cluster's failover of that shard would lose
/// every lock key written since.
pub(super) fn shard_replication_lag(node: &NodeInfo, limits: &Limits) -> Vec<Finding> {
    (node.cluster_shards.iter())
        .filter_map(|shard| Some((shard, shard.replica_lag.filter(|lag| *lag > limits.ttl)?)))
        .map(|(shard, lag)| {
            finding(
                FindingKind::ReplicationLag,
                Severity::Warning,
                Some(&node.name),
                format!(
                    "a replica of shard {} last acknowledged {} s ago, longer than the \
                     default TTL ({:?}): a failover of that shard would lose every lock key \
                     written since",
                    shard.master,
                    lag.as_secs(),
                    limits.ttl
                ),
                "repair the shard's replication link",
            )
        })
        .collect()
}

/// A member under Sentinel whose group's sentinels do not all name one master: a
/// warning while a majority of the group still does (`sentinel::agreed`, the member's own
/// rule), an error when none does.
pub(super) fn sentinel_quorum(node: &NodeInfo) -> Option<Finding> {
    let configured = node.sentinel_group_size.unwrap_or(node.sentinels.len());
    let named: Vec<Option<&str>> = node.sentinels.iter().map(|s| s.master.as_deref()).collect();
    let master = agreed(&named, configured);
    let agreeing = master.map_or(0, |m| named.iter().filter(|n| **n == Some(m)).count());
    if agreeing == configured {
        return None;
    }
    let answers: Vec<String> = node
        .sentinels
        .iter()
        .map(|s| {
            format!(
                "{}: {}",
                s.sentinel,
                s.master.as_deref().unwrap_or("no answer")
            )
        })
        .collect();
    let answers = answers.join(", ");
    let (severity, what) = match master {
        None => (
            Severity::Error,
            format!(
                "no majority of its {configured} sentinels names one master ({answers}): \
                 the member does not vote until one does"
            ),
        ),
        Some(_) => (
            Severity::Warning,
            format!(
                "{agreeing} of its {configured} sentinels name the master ({answers}): {} \
                 more lost and the member stops voting",
                agreeing + 1 - (configured / 2 + 1)
            ),
        ),
    };
    Some(finding(
        FindingKind::SentinelQuorum,
        severity,
        Some(&node.name),
        what,
        "bring back or reconnect the sentinels that do not name the master; during a \
         failover, check again once it has settled",
    ))
}

/// A member under Sentinel whose URL lists only some of the sentinels its group has
/// (warning): the client learnt the others from the listed ones, and needs a majority of
/// them all; one that starts while the listed ones are out of reach learns nothing.
pub(super) fn sentinel_partial_list(node: &NodeInfo) -> Option<Finding> {
    let listed = node.sentinels.iter().filter(|s| s.listed).count();
    let group = node.sentinel_group_size.unwrap_or(node.sentinels.len());
    if node.sentinels.is_empty() || listed >= group {
        return None;
    }
    let learnt: Vec<&str> = node
        .sentinels
        .iter()
        .filter(|s| !s.listed)
        .map(|s| s.sentinel.as_str())
        .collect();
    let learnt = if learnt.is_empty() {
        "none known by address".to_owned()
    } else {
        learnt.join(", ")
    };
    Some(finding(
        FindingKind::SentinelPartialList,
        Severity::Warning,
        Some(&node.name),
        format!(
            "its URL lists {listed} of the {group} sentinels of its group (learnt from them: \
             {learnt}): the member votes only while a majority of all {group} names its \
             master, and a client that starts while the listed ones are out of reach \
             learns none of the others"
        ),
        "list every sentinel of the group in the member's URL",
    ))
}
