//! The names of the keys and channels the library uses, one function per kind.
//!
//! Every name starts with the client's key prefix, so an ACL that allows only
//! `~<prefix>*` (keys) and `&<prefix>*` (channels) covers all of them. A lock key is the
//! prefix followed by the resource name; every other name is made by [`internal`]: the
//! prefix, then `quorum-lock:<what>:`, then what it belongs to. With the default empty
//! prefix the names are those of earlier versions. Resource names that start with
//! `quorum-lock:` would collide with these names: they are the library's own.

use std::sync::Arc;

/// The kinds of keys a script receives, in the order of its `KEYS` blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The lock key itself.
    Lock,
    /// The fencing counter of a lock key (never expires): a plain integer.
    Fence,
    /// The waiting list of a lock key (client ids, expires after twice the TTL). A
    /// semaphore's slot locks all derive one list, the semaphore's: the release of any slot
    /// wakes the first client waiting for a permit.
    Waiters,
    /// The client whose turn it is after a release woke it (short expiry).
    Turn,
    /// The readers of a read-write lock: a sorted set of reader tokens, each scored by its
    /// own expiry in the server's milliseconds (expires with the last reader).
    Readers,
    /// A writer waits for readers to leave: while it exists no new reader enters (it
    /// expires after the waiting writer's TTL).
    Intent,
    /// The permit count a semaphore's holders use, one per semaphore (its slot locks all
    /// derive the same name), expiring after the longest-lived of them.
    PermitCount,
}

impl Kind {
    /// The Redis type (`TYPE`) the scripts give a key of this kind: the readers a sorted
    /// set, the waiting list a list, every other kind a string.
    pub(crate) fn value_type(self) -> &'static str {
        match self {
            Kind::Readers => "zset",
            Kind::Waiters => "list",
            Kind::Lock | Kind::Fence | Kind::Turn | Kind::Intent | Kind::PermitCount => "string",
        }
    }

    /// Whether the scripts always give a key of this kind an expiry: every kind but the
    /// fencing counter, which must outlive every token it handed out.
    pub(crate) fn expires(self) -> bool {
        !matches!(self, Kind::Fence)
    }
}

/// The namespace of every name [`internal`] makes, after the key prefix.
const NAMESPACE: &str = "quorum-lock:";

/// The one rule for every name other than a lock key: `<prefix>quorum-lock:<what>:<rest>`.
/// Any key or channel this crate adds is named through here, so it stays under the prefix.
pub(crate) fn internal(prefix: &str, what: &str, rest: &str) -> String {
    internal_name(prefix, what, rest).joined()
}

/// [`internal`]'s name as its parts.
fn internal_name<'a>(prefix: &'a str, what: &'a str, rest: &'a str) -> Name<'a> {
    Name([prefix, NAMESPACE, what, ":", rest])
}

/// A name as the parts it is made of, in order. As a command argument it is written part
/// by part into the command, with no `String` of its own: a script's keys are named on
/// every release (and contended lock), and three names cost three allocations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Name<'a>([&'a str; 5]);

impl Name<'_> {
    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.0.iter().map(|p| p.len()).sum()
    }

    /// The name, joined in one allocation of the right size (`format!` costs several times
    /// as much).
    pub(crate) fn joined(&self) -> String {
        concat(&self.0)
    }
}

impl redis::ToRedisArgs for Name<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write as _;
        let mut arg = out.writer_for_next_arg();
        for part in self.0 {
            // Writing into the command's buffer cannot fail.
            let _ = arg.write_all(part.as_bytes());
        }
    }
}

/// `parts` joined, in one allocation.
fn concat(parts: &[&str]) -> String {
    let mut name = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        name.push_str(part);
    }
    name
}

/// The name of the key of `kind` that belongs to lock key `lock` (which is `prefix`
/// followed by the resource name), as its parts.
pub(crate) fn derived_name<'a>(kind: Kind, prefix: &'a str, lock: &'a str) -> Name<'a> {
    let resource = lock.strip_prefix(prefix).unwrap_or(lock);
    match kind {
        Kind::Lock => Name([lock, "", "", "", ""]),
        Kind::Fence => internal_name(prefix, "fence", resource),
        Kind::Waiters => internal_name(prefix, "waiters", waiting_resource(resource)),
        Kind::Turn => internal_name(prefix, "turn", resource),
        Kind::Readers => internal_name(prefix, "readers", resource),
        Kind::Intent => internal_name(prefix, "intent", resource),
        Kind::PermitCount => internal_name(prefix, "permits", semaphore_of(resource)),
    }
}

/// The node-wide keys of restart quarantine: one of each per node and key
/// prefix (clients of one prefix share them: their leases are on the same keys), never
/// expiring. A script gets them after its per-lock
/// blocks, in the order of its layout's globals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Global {
    /// The ensemble record: the longest TTL in milliseconds any client may count votes
    /// for, raised with (before or atomically with) every acquisition and extension.
    MaxTtl,
    /// The node's marker: the `run_id` of the life in which a client admitted the node
    /// (an older `<run_id>:<0|1>` form still reads as that `run_id`).
    Marker,
}

/// The name of the node-wide key `global` under `prefix`.
pub(crate) fn global(prefix: &str, global: Global) -> String {
    global_name(prefix, global).joined()
}

/// [`global`]'s name as its parts.
pub(crate) fn global_name(prefix: &str, global: Global) -> Name<'_> {
    match global {
        Global::MaxTtl => internal_name(prefix, "node", "max-ttl"),
        Global::Marker => internal_name(prefix, "node", "marker"),
    }
}

/// The resource name of a readmission probe (`heal`): one of the client's own, under the
/// crate's namespace; the key prefix is added to it as to any resource.
pub(crate) fn probe_resource(id: &str) -> String {
    internal("", "probe", id)
}

/// The semaphore name in slot lock resource `resource` (see [`permit_resource`]); the whole
/// resource for any other.
fn semaphore_of(resource: &str) -> &str {
    match lock_of(resource) {
        LockOf::PermitSlot { semaphore, .. } => semaphore,
        _ => resource,
    }
}

/// What the waiting list of lock resource `resource` belongs to: a semaphore's slot lock
/// (see [`permit_resource`]) waits in its semaphore's list, `quorum-lock:permit:<name>`;
/// any other resource in its own.
fn waiting_resource(resource: &str) -> &str {
    match lock_of(resource) {
        LockOf::PermitSlot { .. } => resource.rsplit_once(':').map_or(resource, |(s, _)| s),
        _ => resource,
    }
}

/// The resource name of permit `slot` of semaphore `name`: a slot lock, under the crate's
/// namespace; the key prefix is added to it as to any resource.
pub(crate) fn permit_resource(name: &str, slot: u32) -> String {
    internal("", "permit", &format!("{name}:{slot}"))
}

/// The resource name of read-write lock `name`: its writer's lock key (with the key
/// prefix added, as to any resource), and the name its readers and writer intent are
/// derived from.
pub(crate) fn rw_resource(name: &str) -> String {
    internal("", "rw", name)
}

/// The lock key of `resource` under `prefix`.
pub(crate) fn lock(prefix: &str, resource: &str) -> String {
    concat(&[prefix, resource])
}

/// The lock keys of `resources` under `prefix`, in their order. Without a prefix each key
/// is its resource's name, and the names are shared rather than copied.
pub(crate) fn locks(prefix: &str, resources: &Arc<[String]>) -> Arc<[String]> {
    match prefix.is_empty() {
        true => Arc::clone(resources),
        false => resources.iter().map(|r| lock(prefix, r)).collect(),
    }
}

/// The prefix of the channels clients listen on for wake-ups under `prefix`; a client's
/// id follows.
pub(crate) fn wake_channel_prefix(prefix: &str) -> String {
    internal(prefix, "wake", "")
}

/// The channel client `id` listens on for wake-ups.
pub(crate) fn wake_channel(prefix: &str, id: &str) -> String {
    internal(prefix, "wake", id)
}

/// The highest fencing token seen for `resource` by `fencing::fenced_set`,
/// on the server that holds the caller's data (not a lock node; no key prefix applies).
pub(crate) fn fence_seen(resource: &str) -> String {
    internal("", "fence-seen", resource)
}

/// The node-wide keys, each once.
const GLOBALS: [Global; 2] = [Global::MaxTtl, Global::Marker];

/// A `SCAN ... MATCH` pattern for every name under the crate's namespace for `prefix`
/// (`<prefix>quorum-lock:*`), the glob characters of the prefix (`* ? [ ] \`) escaped so
/// that they match only themselves.
pub(crate) fn namespace_pattern(prefix: &str) -> String {
    let mut pattern = String::with_capacity(2 * prefix.len() + NAMESPACE.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str(NAMESPACE);
    pattern.push('*');
    pattern
}

/// The lock a resource name belongs to, read back from the name ([`lock_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockOf<'a> {
    /// Read-write lock `name` ([`rw_resource`]).
    ReadWrite(&'a str),
    /// Slot `slot` of semaphore `semaphore` ([`permit_resource`]).
    PermitSlot { semaphore: &'a str, slot: u32 },
    /// Semaphore `name` as a whole: what its slots' waiting list belongs to.
    Semaphore(&'a str),
    /// The readmission probe of client `id` ([`probe_resource`]).
    Probe(&'a str),
    /// A mutex: any other resource, the name as its user gave it.
    Mutex(&'a str),
}

/// A key name this crate makes, read back by [`parse_key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KnownKey<'a> {
    /// The key of `kind` that belongs to lock `lock`: its lock key ([`Kind::Lock`], only for
    /// the resources under the namespace) or one derived from it (never
    /// [`Kind::PermitCount`], which belongs to a whole semaphore).
    Of { kind: Kind, lock: LockOf<'a> },
    /// The permit count record of semaphore `semaphore`.
    PermitCount { semaphore: &'a str },
    /// A node-wide key.
    Global(Global),
}

impl KnownKey<'_> {
    /// The Redis type the scripts give the key (see [`Kind::value_type`]).
    pub(crate) fn value_type(&self) -> &'static str {
        match self {
            KnownKey::Of { kind, .. } => kind.value_type(),
            KnownKey::PermitCount { .. } => Kind::PermitCount.value_type(),
            KnownKey::Global(_) => "string",
        }
    }

    /// Whether the scripts always give the key an expiry (see [`Kind::expires`]; the
    /// node-wide keys never expire).
    pub(crate) fn expires(&self) -> bool {
        match self {
            KnownKey::Of { kind, .. } => kind.expires(),
            KnownKey::PermitCount { .. } => Kind::PermitCount.expires(),
            KnownKey::Global(_) => false,
        }
    }
}

/// Which of this crate's keys `key` is under `prefix`: the inverse of the naming functions
/// above, for the names under `<prefix>quorum-lock:`. `None` for any other name: a mutex's
/// lock key (its user's resource name, which no name can tell from other data), a name of
/// the namespace no lock node holds (wake-up channels, `fence_seen`'s key) or one this
/// version does not make.
pub(crate) fn parse_key<'a>(prefix: &str, key: &'a str) -> Option<KnownKey<'a>> {
    let resource = key.strip_prefix(prefix)?;
    let (what, rest) = resource.strip_prefix(NAMESPACE)?.split_once(':')?;
    let of = |kind| {
        Some(KnownKey::Of {
            kind,
            lock: lock_of(rest),
        })
    };
    match what {
        "rw" | "permit" | "probe" => match lock_of(resource) {
            LockOf::Mutex(_) => None,
            lock => Some(KnownKey::Of {
                kind: Kind::Lock,
                lock,
            }),
        },
        "fence" => of(Kind::Fence),
        "waiters" => Some(KnownKey::Of {
            kind: Kind::Waiters,
            lock: waiting_lock_of(rest),
        }),
        "turn" => of(Kind::Turn),
        "readers" => of(Kind::Readers),
        "intent" => of(Kind::Intent),
        "permits" => Some(KnownKey::PermitCount { semaphore: rest }),
        "node" => (GLOBALS.into_iter())
            .find(|&g| global(prefix, g) == key)
            .map(KnownKey::Global),
        _ => None,
    }
}

/// What the waiting list of `resource` belongs to (see [`waiting_resource`]).
fn waiting_lock_of(resource: &str) -> LockOf<'_> {
    match resource.strip_prefix("quorum-lock:permit:") {
        Some(semaphore) => LockOf::Semaphore(semaphore),
        None => lock_of(resource),
    }
}

/// The lock resource name `resource` (without the key prefix) belongs to.
pub(crate) fn lock_of(resource: &str) -> LockOf<'_> {
    let Some((what, rest)) = (resource.strip_prefix(NAMESPACE)).and_then(|r| r.split_once(':'))
    else {
        return LockOf::Mutex(resource);
    };
    let slot = || {
        let (semaphore, slot) = rest.rsplit_once(':')?;
        Some(LockOf::PermitSlot {
            semaphore,
            slot: slot.parse().ok()?,
        })
    };
    match what {
        "rw" => LockOf::ReadWrite(rest),
        "permit" => slot().unwrap_or(LockOf::Mutex(resource)),
        "probe" => LockOf::Probe(rest),
        _ => LockOf::Mutex(resource),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derived(kind: Kind, prefix: &str, lock: &str) -> String {
        derived_name(kind, prefix, lock).joined()
    }

    #[test]
    fn a_name_is_one_argument_of_its_joined_bytes() {
        for name in [
            derived_name(Kind::Lock, "app:", "app:r"),
            derived_name(Kind::Waiters, "app:", "app:r"),
            global_name("", Global::Marker),
        ] {
            let mut parts = redis::cmd("EVALSHA");
            parts.arg(name).arg("next");
            let mut joined = redis::cmd("EVALSHA");
            joined.arg(name.joined()).arg("next");
            assert_eq!(parts.get_packed_command(), joined.get_packed_command());
            assert_eq!(name.len(), name.joined().len());
        }
    }

    #[test]
    fn names_without_a_prefix_are_unchanged() {
        assert_eq!(derived(Kind::Lock, "", "r"), "r");
        assert_eq!(derived(Kind::Fence, "", "r"), "quorum-lock:fence:r");
        assert_eq!(derived(Kind::Waiters, "", "r"), "quorum-lock:waiters:r");
        assert_eq!(derived(Kind::Turn, "", "r"), "quorum-lock:turn:r");
        assert_eq!(wake_channel("", "c1"), "quorum-lock:wake:c1");
        assert_eq!(wake_channel_prefix(""), "quorum-lock:wake:");
        assert_eq!(global("", Global::MaxTtl), "quorum-lock:node:max-ttl");
        assert_eq!(global("", Global::Marker), "quorum-lock:node:marker");
        assert_eq!(fence_seen("r"), "quorum-lock:fence-seen:r");
    }

    #[test]
    fn every_name_is_under_the_prefix() {
        let prefix = "app:";
        let lock_key = lock(prefix, "r");
        assert_eq!(lock_key, "app:r");
        assert_eq!(
            derived(Kind::Fence, prefix, &lock_key),
            "app:quorum-lock:fence:r"
        );
        assert_eq!(
            derived(Kind::Waiters, prefix, &lock_key),
            "app:quorum-lock:waiters:r"
        );
        assert_eq!(
            derived(Kind::Turn, prefix, &lock_key),
            "app:quorum-lock:turn:r"
        );
        assert_eq!(wake_channel(prefix, "c1"), "app:quorum-lock:wake:c1");
        assert!(wake_channel(prefix, "c1").starts_with(&wake_channel_prefix(prefix)));
        for g in [Global::MaxTtl, Global::Marker] {
            match g {
                Global::MaxTtl | Global::Marker => {}
            }
            assert!(global(prefix, g).starts_with(prefix), "{g:?}");
        }
        let kinds = [
            Kind::Lock,
            Kind::Fence,
            Kind::Waiters,
            Kind::Turn,
            Kind::Readers,
            Kind::Intent,
            Kind::PermitCount,
        ];
        for kind in kinds {
            // Exhaustive on purpose: a new kind must be added to the list above.
            match kind {
                Kind::Lock
                | Kind::Fence
                | Kind::Waiters
                | Kind::Turn
                | Kind::Readers
                | Kind::Intent
                | Kind::PermitCount => {}
            }
            assert!(
                derived(kind, prefix, &lock_key).starts_with(prefix),
                "{kind:?}"
            );
        }
        assert!(internal(prefix, "any", "x").starts_with(prefix));
    }

    #[test]
    fn every_slot_of_a_semaphore_shares_one_waiting_list() {
        let slot = |i| lock("app:", &permit_resource("jobs:a", i));
        let list = |key: &str| derived(Kind::Waiters, "app:", key);
        assert_eq!(
            list(&slot(0)),
            "app:quorum-lock:waiters:quorum-lock:permit:jobs:a"
        );
        assert_eq!(list(&slot(3)), list(&slot(0)));
        assert_ne!(
            list(&lock("app:", &permit_resource("jobs:b", 0))),
            list(&slot(0))
        );
        // A plain lock whose name has colons keeps its own list.
        assert_eq!(list("app:jobs:a:1"), "app:quorum-lock:waiters:jobs:a:1");
    }

    #[test]
    fn every_slot_of_a_semaphore_shares_one_count_key() {
        let slot = |i| lock("app:", &permit_resource("jobs:a", i));
        let count = |key: &str| derived(Kind::PermitCount, "app:", key);
        assert_eq!(count(&slot(0)), "app:quorum-lock:permits:jobs:a");
        assert_eq!(count(&slot(7)), count(&slot(0)));
        assert_ne!(
            count(&lock("app:", &permit_resource("jobs:b", 0))),
            count(&slot(0))
        );
    }

    #[test]
    fn every_name_a_lock_node_holds_reads_back_as_what_it_names() {
        let derived_kinds = [
            Kind::Fence,
            Kind::Waiters,
            Kind::Turn,
            Kind::Readers,
            Kind::Intent,
        ];
        for prefix in ["", "app:", "a*[b]?\\:"] {
            let locks = [
                (rw_resource("docs"), LockOf::ReadWrite("docs")),
                (rw_resource("a:b"), LockOf::ReadWrite("a:b")),
                (
                    permit_resource("jobs:a", 7),
                    LockOf::PermitSlot {
                        semaphore: "jobs:a",
                        slot: 7,
                    },
                ),
                (probe_resource("c1"), LockOf::Probe("c1")),
                ("plain".to_owned(), LockOf::Mutex("plain")),
                (
                    "quorum-lock:other:x".to_owned(),
                    LockOf::Mutex("quorum-lock:other:x"),
                ),
            ];
            for (resource, lock_kind) in &locks {
                let key = lock(prefix, resource);
                assert_eq!(lock_of(resource), *lock_kind, "{resource}");
                let as_lock = match lock_kind {
                    LockOf::Mutex(_) => None,
                    _ => Some(KnownKey::Of {
                        kind: Kind::Lock,
                        lock: *lock_kind,
                    }),
                };
                assert_eq!(parse_key(prefix, &key), as_lock, "{key}");
                for kind in derived_kinds {
                    let name = derived(kind, prefix, &key);
                    let lock = match (kind, lock_kind) {
                        // A semaphore's slots wait in one list, the semaphore's.
                        (Kind::Waiters, LockOf::PermitSlot { semaphore, .. }) => {
                            LockOf::Semaphore(semaphore)
                        }
                        _ => *lock_kind,
                    };
                    let want = KnownKey::Of { kind, lock };
                    assert_eq!(parse_key(prefix, &name), Some(want), "{name}");
                }
            }
            let slot = lock(prefix, &permit_resource("jobs:a", 3));
            let count = derived(Kind::PermitCount, prefix, &slot);
            assert_eq!(
                parse_key(prefix, &count),
                Some(KnownKey::PermitCount {
                    semaphore: "jobs:a"
                })
            );
            for g in GLOBALS {
                assert_eq!(
                    parse_key(prefix, &global(prefix, g)),
                    Some(KnownKey::Global(g))
                );
            }
            // Names no lock node holds, and names of no kind.
            for other in [
                wake_channel(prefix, "c1"),
                internal(prefix, "node", "other"),
                internal(prefix, "future", "x"),
                lock(prefix, "quorum-lock"),
            ] {
                assert_eq!(parse_key(prefix, &other), None, "{other}");
            }
        }
        assert_eq!(parse_key("", &fence_seen("r")), None);
        // Another prefix's names are not ours.
        let theirs = derived(Kind::Fence, "b:", "b:r");
        assert_eq!(parse_key("a:", &theirs), None);
    }

    #[test]
    fn kinds_say_their_type_and_whether_they_expire() {
        let table = [
            (Kind::Lock, "string", true),
            (Kind::Fence, "string", false),
            (Kind::Waiters, "list", true),
            (Kind::Turn, "string", true),
            (Kind::Readers, "zset", true),
            (Kind::Intent, "string", true),
            (Kind::PermitCount, "string", true),
        ];
        for (kind, value_type, expires) in table {
            assert_eq!((kind.value_type(), kind.expires()), (value_type, expires));
        }
        let global = KnownKey::Global(Global::Marker);
        assert_eq!((global.value_type(), global.expires()), ("string", false));
    }

    #[test]
    fn the_namespace_pattern_escapes_the_prefix_globs() {
        assert_eq!(namespace_pattern(""), "quorum-lock:*");
        assert_eq!(namespace_pattern("app:"), "app:quorum-lock:*");
        assert_eq!(
            namespace_pattern(r"a*b?[c]\d:"),
            r"a\*b\?\[c\]\\d:quorum-lock:*"
        );
    }
}
