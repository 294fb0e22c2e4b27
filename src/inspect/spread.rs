//! How far each live lock is spread over the nodes, for the readiness gate: a lock held on
//! a majority that lacks a copy on some admitted node (a node that restarted empty, before
//! its holder wrote it back) loses its majority if one of the nodes that do hold it
//! restarts next. Pure: the key scan (`spread_scan`) supplies what each node holds.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::acquire::heal::LockAtRisk;
use crate::protocol::holder::HolderInfo;
use crate::protocol::keys::{self, Kind, KnownKey, LockOf};

/// One holder's copy of one lock on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldCopy {
    /// The lock, as an operator names it.
    pub(crate) lock: String,
    /// The holder: the whole value of a lock key, or a reader's token.
    pub(crate) holder: String,
    /// Time left on this node.
    pub(crate) remaining: Duration,
}

/// The copy a string key `name` (under `prefix`) with `value` and `pttl_ms` left is: a
/// holder's value this library wrote on a lock key (a mutex's, a writer's or a permit
/// slot's); `None` for anything else (another client's data, a mark, a counter, the
/// readmission probe's lock, a key without expiry or gone).
pub(crate) fn string_copy(prefix: &str, name: &str, value: &str, pttl_ms: i64) -> Option<HeldCopy> {
    let resource = name.strip_prefix(prefix)?;
    if pttl_ms <= 0 || !HolderInfo::is_own_value(value) {
        return None;
    }
    let lock = match keys::lock_of(resource) {
        LockOf::Mutex(resource) => resource.to_owned(),
        LockOf::PermitSlot { semaphore, slot } => {
            format!("{semaphore} (semaphore, permit slot {slot})")
        }
        LockOf::Election(name) => format!("{name} (election)"),
        LockOf::Probe(_) | LockOf::Semaphore(_) => return None,
    };
    Some(HeldCopy {
        lock,
        holder: value.to_owned(),
        remaining: Duration::from_millis(pttl_ms.unsigned_abs()),
    })
}

/// Whether `name` (under `prefix`) is the readers set of a read-write lock.
pub(crate) fn is_readers_set(prefix: &str, name: &str) -> bool {
    matches!(
        keys::parse_key(prefix, name),
        Some(KnownKey::Of {
            kind: Kind::Readers,
            lock: LockOf::Mutex(_),
        })
    )
}

/// The copies the readers set `name` holds: one per reader whose expiry (in the server's
/// milliseconds) is after `now_ms`, the node's `TIME`.
pub(crate) fn reader_copies(
    prefix: &str,
    name: &str,
    now_ms: i64,
    entries: &[(String, i64)],
) -> Vec<HeldCopy> {
    let Some(KnownKey::Of {
        kind: Kind::Readers,
        lock: LockOf::Mutex(resource),
    }) = keys::parse_key(prefix, name)
    else {
        return Vec::new();
    };
    (entries.iter())
        .filter(|(_, expiry)| *expiry > now_ms)
        .map(|(token, expiry)| HeldCopy {
            lock: format!("{resource} (read lock)"),
            holder: token.clone(),
            remaining: Duration::from_millis((expiry - now_ms).unsigned_abs()),
        })
        .collect()
}

/// The live locks among `nodes` (what each node holds) that the restart of one node could
/// take: held by one holder on at least `quorum` nodes and on fewer than one more than
/// that (every node, when that is all there are). Sorted by lock.
pub(crate) fn locks_at_risk(nodes: &[Vec<HeldCopy>], quorum: usize) -> Vec<LockAtRisk> {
    let needed = (quorum + 1).min(nodes.len());
    let mut spread: BTreeMap<(&str, &str), (usize, Duration)> = BTreeMap::new();
    for node in nodes {
        for copy in node {
            let entry = spread
                .entry((&copy.lock, &copy.holder))
                .or_insert((0, Duration::ZERO));
            entry.0 += 1;
            entry.1 = entry.1.max(copy.remaining);
        }
    }
    (spread.into_iter())
        .filter(|(_, (copies, _))| *copies >= quorum && *copies < needed)
        .map(|((lock, _), (copies, expires_in))| LockAtRisk {
            lock: lock.to_owned(),
            copies,
            needed,
            expires_in,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::rw_scripts;

    const VALUE: &str = "0123456789abcdef0123456789abcdef;q1;t=1";

    fn copy(lock: &str, holder: &str) -> HeldCopy {
        HeldCopy {
            lock: lock.to_owned(),
            holder: holder.to_owned(),
            remaining: Duration::from_secs(1),
        }
    }

    #[test]
    fn only_a_holders_value_on_a_lock_key_is_a_copy() {
        let mutex = string_copy("app:", "app:jobs", VALUE, 1500).unwrap();
        assert_eq!(mutex.lock, "jobs");
        assert_eq!(mutex.remaining, Duration::from_millis(1500));
        let slot = string_copy("", &keys::permit_resource("pool", 1), VALUE, 10).unwrap();
        assert_eq!(slot.lock, "pool (semaphore, permit slot 1)");
        // Another client's token, the readers' mark, a counter, no expiry, the readmission
        // probe, another prefix.
        for (name, value, pttl) in [
            ("jobs".to_owned(), "3f2a", 100),
            ("jobs".to_owned(), rw_scripts::SHARED, 100),
            (keys::internal("", "fence", "jobs"), "17", -1),
            ("jobs".to_owned(), VALUE, -1),
            (keys::probe_resource("abc"), VALUE, 100),
        ] {
            assert_eq!(string_copy("", &name, value, pttl), None, "{name}");
        }
        assert_eq!(string_copy("app:", "other:jobs", VALUE, 100), None);
    }

    #[test]
    fn readers_count_while_their_expiry_is_ahead() {
        let entries = [("a".to_owned(), 2_000), ("b".to_owned(), 1_000)];
        let readers = keys::internal("", "readers", "doc");
        let waiters = keys::internal("", "waiters", "doc");
        let copies = reader_copies("", &readers, 1_000, &entries);
        assert_eq!(copies.len(), 1);
        assert_eq!(copies[0].lock, "doc (read lock)");
        assert_eq!(copies[0].remaining, Duration::from_secs(1));
        assert!(is_readers_set("", &readers));
        assert!(!is_readers_set("", &waiters));
        assert!(reader_copies("", &waiters, 0, &entries).is_empty());
    }

    #[test]
    fn a_lock_on_a_bare_majority_is_at_risk() {
        let held = vec![copy("r", "t")];
        let none = Vec::new();
        // Three nodes: two copies are a majority that one restart takes.
        let risk = locks_at_risk(&[held.clone(), held.clone(), none.clone()], 2);
        assert_eq!(risk.len(), 1);
        assert_eq!((risk[0].copies, risk[0].needed), (2, 3));
        assert!(locks_at_risk(&[held.clone(), held.clone(), held.clone()], 2).is_empty());
        // One copy of three is no live lock (a failed or lost one): nothing to keep.
        assert!(locks_at_risk(&[held.clone(), none.clone(), none.clone()], 2).is_empty());
        // Five nodes: four copies survive any one restart.
        let four = [
            held.clone(),
            held.clone(),
            held.clone(),
            held.clone(),
            none.clone(),
        ];
        assert!(locks_at_risk(&four, 3).is_empty());
        let three = [held.clone(), held.clone(), held.clone(), none.clone(), none];
        assert_eq!(locks_at_risk(&three, 3).len(), 1);
        // One node: its one copy is all there can be.
        assert!(locks_at_risk(&[held], 1).is_empty());
    }

    #[test]
    fn copies_count_per_holder() {
        let node = |holder| vec![copy("r", holder)];
        // Two holders' values on one name (a lost lock and its successor): each alone.
        let risk = locks_at_risk(&[node("old"), node("new"), node("new")], 2);
        assert_eq!(risk.len(), 1);
        assert_eq!(risk[0].copies, 2);
    }
}
