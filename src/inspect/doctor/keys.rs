//! The findings on the crate's own keys, and each node's census of them, judged from what
//! the key scan (`key_scan`) read under `<prefix>quorum-lock:`. Pure, like the other
//! findings: every name is read back by `protocol::keys::parse_key`.

use std::collections::BTreeMap;

use super::finding;
use super::{Finding, FindingKind, KeyCensus, NodeInfo, Severity};
use crate::protocol::keys::{self, Global, Kind, KnownKey, LockOf};

/// Keys named in one finding's message; the rest are counted.
const NAMED_KEYS: usize = 5;

/// One key of the namespace as the scan read it on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ScannedKey {
    /// The key's name.
    pub(crate) name: String,
    /// `PTTL`: milliseconds left, -1 without expiry, -2 when gone since the scan.
    pub(crate) pttl_ms: i64,
    /// `TYPE`: `string`, `list`, `zset`, ..., `none` when gone since the scan.
    pub(crate) value_type: String,
    /// The value of a permit count record (see [`follow_up`]), else `None`.
    pub(crate) count: Option<String>,
    /// The entries of a readers set (see [`follow_up`]), else `None`.
    pub(crate) entries: Option<u64>,
    /// The value of a node marker (see [`follow_up`]), else `None`.
    pub(crate) marker: Option<String>,
}

/// What the scan read of one node's keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct KeyScan {
    /// Every key found, in the order found.
    pub(crate) keys: Vec<ScannedKey>,
    /// Whether the scan stopped at its bound before the end of the keyspace.
    pub(crate) partial: bool,
}

/// The second read a key deserves once its type is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FollowUp {
    /// `GET`: a permit count record, compared across nodes.
    Count,
    /// `ZCARD`: a readers set, whose entries the census counts.
    Entries,
    /// `GET`: a node marker, whose life says whether its slot votes (a Cluster member's
    /// markers are per slot).
    Marker,
}

/// Which second read `name` of type `value_type` deserves under `prefix`, if any: only keys
/// of the type their kind is given, so that the read cannot be refused for its type.
pub(crate) fn follow_up(prefix: &str, name: &str, value_type: &str) -> Option<FollowUp> {
    let known = keys::parse_key(prefix, name)?;
    if known.value_type() != value_type {
        return None;
    }
    match known {
        KnownKey::PermitCount { .. } => Some(FollowUp::Count),
        KnownKey::Global(Global::Marker) => Some(FollowUp::Marker),
        KnownKey::Of {
            kind: Kind::Readers,
            ..
        } => Some(FollowUp::Entries),
        _ => None,
    }
}

/// The census of one node's scan under `prefix`: keys of the type their kind is given.
pub(crate) fn census(scan: &KeyScan, prefix: &str) -> KeyCensus {
    // A key gone between the scan and its reads (`TYPE` says "none") is left out, of
    // every count.
    let present = (scan.keys.iter()).filter(|key| key.value_type != "none");
    let mut census = KeyCensus {
        scanned: present.count() as u64,
        partial: scan.partial,
        ..KeyCensus::default()
    };
    for key in scan.keys.iter() {
        let known = keys::parse_key(prefix, &key.name);
        // Gone since the scan, or foreign data: nothing of a lock.
        if known.is_none_or(|k| k.value_type() != key.value_type) {
            continue;
        }
        match known {
            Some(KnownKey::Of {
                kind: Kind::Lock,
                lock: LockOf::PermitSlot { .. },
            }) => census.permits += 1,
            Some(KnownKey::Of {
                kind: Kind::Readers,
                ..
            }) => census.readers += key.entries.unwrap_or(0),
            Some(KnownKey::Of {
                kind: Kind::Waiters,
                ..
            }) => census.waiting_lists += 1,
            Some(KnownKey::PermitCount { .. }) => census.count_records += 1,
            _ => {}
        }
    }
    census
}

/// The findings on the keys every node's scan read (`None`: not read), one per node and
/// kind of finding, then one per semaphore whose count records disagree.
pub(crate) fn key_findings(
    infos: &[NodeInfo],
    scans: &[Option<KeyScan>],
    prefix: &str,
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (info, scan) in infos.iter().zip(scans) {
        let Some(scan) = scan else { continue };
        out.extend(foreign_data(&info.name, scan, prefix));
        out.extend(no_expiry(&info.name, scan, prefix));
    }
    out.extend(permit_count_mismatch(infos, scans, prefix));
    out
}

/// Keys of the namespace whose type is not the one the scripts give their kind.
fn foreign_data(node: &str, scan: &KeyScan, prefix: &str) -> Option<Finding> {
    let foreign: Vec<String> = (scan.keys.iter())
        .filter_map(|key| {
            let known = keys::parse_key(prefix, &key.name)?;
            let expected = known.value_type();
            (key.value_type != expected && key.value_type != "none").then(|| {
                format!(
                    "{} ({}, where the {} is a {expected})",
                    key.name,
                    key.value_type,
                    describe(&known)
                )
            })
        })
        .collect();
    (!foreign.is_empty()).then(|| {
        finding(
            FindingKind::ForeignData,
            Severity::Error,
            Some(node),
            format!(
                "foreign data in the crate's namespace, which its scripts refuse or misread: {}",
                named(&foreign)
            ),
            "find what writes these keys (another program, or keys made by hand under the \
             key prefix) and give it other names, then DEL these keys on this node",
        )
    })
}

/// Keys of a kind that must expire, of the right type, without an expiry.
fn no_expiry(node: &str, scan: &KeyScan, prefix: &str) -> Option<Finding> {
    let forever: Vec<String> = (scan.keys.iter())
        .filter(|key| key.pttl_ms == -1)
        .filter_map(|key| {
            let known = keys::parse_key(prefix, &key.name)?;
            (known.expires() && known.value_type() == key.value_type)
                .then(|| format!("{} ({})", key.name, describe(&known)))
        })
        .collect();
    (!forever.is_empty()).then(|| {
        finding(
            FindingKind::NoExpiry,
            Severity::Warning,
            Some(node),
            format!(
                "keys that must expire have no expiry, so they hold a lock or its bookkeeping \
                 for ever: {}",
                named(&forever)
            ),
            "see who holds the lock with `quorum-lock status RESOURCE` (`status --shared NAME` \
             for a read-write lock; a permit is RESOURCE quorum-lock:permit:NAME:SLOT); the \
             scripts always set an expiry, so once that holder is gone, DEL the key on every node",
        )
    })
}

/// One warning per semaphore whose count records (of the right type) differ between nodes.
fn permit_count_mismatch(
    infos: &[NodeInfo],
    scans: &[Option<KeyScan>],
    prefix: &str,
) -> Vec<Finding> {
    // Semaphore -> recorded count -> the nodes recording it, in node order.
    let mut records: BTreeMap<&str, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for (info, scan) in infos.iter().zip(scans) {
        for key in scan.iter().flat_map(|s| &s.keys) {
            let (Some(KnownKey::PermitCount { semaphore }), Some(count)) =
                (keys::parse_key(prefix, &key.name), key.count.as_deref())
            else {
                continue;
            };
            let nodes = records.entry(semaphore).or_default().entry(count);
            nodes.or_default().push(&info.name);
        }
    }
    (records.into_iter())
        .filter(|(_, counts)| counts.len() > 1)
        .map(|(semaphore, counts)| {
            let seen: Vec<String> = (counts.iter())
                .map(|(count, nodes)| format!("{count} on {}", nodes.join(", ")))
                .collect();
            finding(
                FindingKind::PermitCountMismatch,
                Severity::Warning,
                None,
                format!(
                    "semaphore {semaphore} has different permit counts recorded: {}; its \
                     clients use different counts for one name, and each is refused on the \
                     nodes that record another",
                    seen.join("; ")
                ),
                format!(
                    "give every client of semaphore {semaphore} one permit count; the records \
                     expire with the permits held under them"
                ),
            )
        })
        .collect()
}

/// Up to [`NAMED_KEYS`] items, then how many more.
fn named(items: &[String]) -> String {
    let shown = items.iter().take(NAMED_KEYS).cloned().collect::<Vec<_>>();
    match items.len().saturating_sub(NAMED_KEYS) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// What a key is, in a few words: "readers of read-write lock docs".
fn describe(key: &KnownKey<'_>) -> String {
    match key {
        KnownKey::Of {
            kind: Kind::Lock,
            lock,
        } => describe_lock(lock),
        // Only a read-write lock has readers and writer intents: the lock of its name.
        KnownKey::Of {
            kind: kind @ (Kind::Readers | Kind::Intent),
            lock: LockOf::Mutex(name),
        } => {
            let what = if *kind == Kind::Readers {
                "readers"
            } else {
                "writer intent"
            };
            format!("{what} of read-write lock {name}")
        }
        KnownKey::Of { kind, lock } => {
            let what = match kind {
                Kind::Fence => "fencing counter",
                Kind::Waiters => "waiting list",
                Kind::Turn => "turn",
                Kind::Readers => "readers",
                Kind::Intent => "writer intent",
                Kind::Term => "term record",
                Kind::Candidates => "candidates",
                Kind::Lock | Kind::PermitCount | Kind::Name => "key",
            };
            format!("{what} of {}", describe_lock(lock))
        }
        KnownKey::PermitCount { semaphore } => format!("permit count of semaphore {semaphore}"),
        KnownKey::Global(Global::MaxTtl) => "ensemble record".to_owned(),
        KnownKey::Global(Global::Marker) => "node marker".to_owned(),
        KnownKey::Global(Global::Promoted) => "promotion record".to_owned(),
    }
}

fn describe_lock(lock: &LockOf<'_>) -> String {
    match lock {
        LockOf::PermitSlot { semaphore, slot } => format!("permit {slot} of semaphore {semaphore}"),
        LockOf::Semaphore(name) => format!("semaphore {name}"),
        LockOf::Probe(id) => format!("readmission probe of client {id}"),
        LockOf::Election(name) => format!("election {name}"),
        LockOf::Mutex(resource) => format!("lock {resource}"),
    }
}
