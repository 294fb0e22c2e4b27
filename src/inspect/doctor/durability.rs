//! The findings on what a node keeps across a restart: its persistence, known issues of its
//! server version, persistence that differs between nodes, and whether a majority can lose
//! its data at once. Pure, like the other findings.

use super::finding;
use super::{Finding, FindingKind, NodeInfo, ServerKind, Severity};
use crate::protocol::info::Version;

/// `appendonly` and `appendfsync` of one node.
pub(super) fn persistence(node: &NodeInfo) -> Option<Finding> {
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
pub(super) fn known_issue(node: &NodeInfo) -> Option<Finding> {
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
pub(super) fn persistence_mismatch(infos: &[NodeInfo]) -> Option<Finding> {
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
pub(super) fn majority_memory_loss(infos: &[NodeInfo], quorum: usize) -> Option<Finding> {
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
