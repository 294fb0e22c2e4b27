//! The names of the keys and channels the library uses, one function per kind.
//!
//! Every name starts with the client's key prefix, so an ACL that allows only
//! `~<prefix>*` (keys) and `&<prefix>*` (channels) covers all of them. A lock key is the
//! prefix followed by the resource name; every other name is made by [`internal`]: the
//! prefix, then `quorum-lock:<what>:`, then what it belongs to. With the default empty
//! prefix the names are those of earlier versions. A name a user gives a lock may not start
//! with `quorum-lock:` ([`check_user_name`]): no lock can reach these names.

use std::sync::Arc;

use crate::protocol::slots;

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
    /// The lock key of the name a semaphore's slot belongs to (the mutex's key of that
    /// name; any other lock key's is itself): while permits are held it holds the
    /// semaphore's mark, so that no lock of another kind takes the name.
    Name,
    /// An election's term record: the leader's lock value, epoch and proclaimed value,
    /// written beside the election's lock key by its leader (expires after the lock, by
    /// the term's TTL at most).
    Term,
    /// An election's waiting candidates: a sorted set of entries (since when, an id, the
    /// value), each scored by its own expiry in the server's milliseconds (expires with
    /// the last).
    Candidates,
}

impl Kind {
    /// The Redis type (`TYPE`) the scripts give a key of this kind: the readers a sorted
    /// set, the waiting list a list, every other kind a string.
    pub(crate) fn value_type(self) -> &'static str {
        match self {
            Kind::Readers | Kind::Candidates => "zset",
            Kind::Waiters => "list",
            Kind::Lock
            | Kind::Fence
            | Kind::Turn
            | Kind::Intent
            | Kind::PermitCount
            | Kind::Name
            | Kind::Term => "string",
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

/// Where a client's names live: its key prefix, and whether a member is a Redis Cluster.
/// There every key one script touches must be in its lock key's hash slot, so every name
/// other than a mutex's lock key carries the slot's tag ([`slots::slot_tag`]) after the
/// namespace: `<prefix>quorum-lock:{T}:<what>:<rest>`. Without a Cluster member the names
/// have no tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Space<'a> {
    pub(crate) prefix: &'a str,
    pub(crate) slotted: bool,
}

impl<'a> Space<'a> {
    /// The names of a client without a Cluster member.
    pub(crate) fn flat(prefix: &'a str) -> Self {
        Space {
            prefix,
            slotted: false,
        }
    }

    /// The tag the names derived from lock keys `locks` carry (which share one slot): empty
    /// without a Cluster member.
    pub(crate) fn tag_for(&self, locks: &[String]) -> &'static str {
        match (self.slotted, locks.first()) {
            (true, Some(lock)) => slots::slot_tag(slots::slot_of(lock.as_bytes())),
            _ => "",
        }
    }
}

/// Checks a name a user gave a lock of `kind` ("resource", "read-write lock",
/// "semaphore"): not empty, and outside the crate's namespace, whose names no lock may
/// reach (another kind's keys, a node's bookkeeping).
///
/// # Errors
///
/// [`Error::Config`] naming the rule the name breaks.
pub(crate) fn check_user_name(kind: &str, name: &str) -> crate::Result<()> {
    if name.is_empty() {
        return Err(crate::Error::Config(format!("empty {kind} name")));
    }
    if name.starts_with(NAMESPACE) {
        return Err(crate::Error::Config(format!(
            "{kind} name {name:?} starts with {NAMESPACE:?}, the names this library keeps \
             for its own keys; choose another name"
        )));
    }
    Ok(())
}

/// The one rule for every name other than a lock key: `<prefix>quorum-lock:<what>:<rest>`.
/// Any key or channel this crate adds is named through here, so it stays under the prefix.
pub(crate) fn internal(prefix: &str, what: &str, rest: &str) -> String {
    internal_name(prefix, "", what, rest).joined()
}

/// [`internal`]'s name as its parts, with slot tag `tag` (or none: empty).
fn internal_name<'a>(prefix: &'a str, tag: &'a str, what: &'a str, rest: &'a str) -> Name<'a> {
    Name::Parts([prefix, NAMESPACE, tag, what, ":", rest])
}

/// A name as the parts it is made of, in order, or made whole. As a command argument it is
/// written part by part into the command, with no `String` of its own: a script's keys are
/// named on every release (and contended lock), and three names cost three allocations.
/// Only the names derived from a semaphore's slot on a Cluster member are made whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Name<'a> {
    Parts([&'a str; 6]),
    Whole(String),
}

impl Name<'_> {
    /// The parts, in order.
    fn parts(&self) -> &[&str] {
        match self {
            Name::Parts(parts) => parts,
            Name::Whole(_) => &[],
        }
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Name::Parts(parts) => parts.iter().map(|p| p.len()).sum(),
            Name::Whole(name) => name.len(),
        }
    }

    /// The name, joined in one allocation of the right size (`format!` costs several times
    /// as much).
    pub(crate) fn joined(&self) -> String {
        match self {
            Name::Parts(parts) => concat(parts),
            Name::Whole(name) => name.clone(),
        }
    }
}

impl redis::ToRedisArgs for Name<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write as _;
        if let Name::Whole(name) = self {
            out.write_arg(name.as_bytes());
            return;
        }
        let mut arg = out.writer_for_next_arg();
        for part in self.parts() {
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
/// followed by the resource name), as its parts, with slot tag `tag` (see
/// [`Space::tag_for`]).
pub(crate) fn derived_name<'a>(
    kind: Kind,
    prefix: &'a str,
    lock: &'a str,
    tag: &'a str,
) -> Name<'a> {
    let resource = lock.strip_prefix(prefix).unwrap_or(lock);
    if kind != Kind::Lock
        && let Some(untagged) = untagged(resource)
    {
        // A semaphore slot's lock key on a Cluster member, which carries its tag.
        let flat = concat(&[prefix, &untagged]);
        return Name::Whole(derived_name(kind, prefix, &flat, tag).joined());
    }
    let name = |what, rest| internal_name(prefix, tag, what, rest);
    match kind {
        Kind::Lock => Name::Parts([lock, "", "", "", "", ""]),
        Kind::Fence => name("fence", resource),
        Kind::Waiters => name("waiters", waiting_resource(resource)),
        Kind::Turn => name("turn", resource),
        Kind::Readers => name("readers", resource),
        Kind::Intent => name("intent", resource),
        Kind::PermitCount => name("permits", semaphore_of(resource)),
        Kind::Term => name("term", resource),
        Kind::Candidates => name("candidates", resource),
        Kind::Name => match lock_of(resource) {
            LockOf::PermitSlot { semaphore, .. } => Name::Whole(concat(&[prefix, semaphore])),
            _ => Name::Parts([lock, "", "", "", "", ""]),
        },
    }
}

/// `resource` without the slot tag after the namespace, when it has one (a semaphore
/// slot's resource on a Cluster member, see [`lock`]).
fn untagged(resource: &str) -> Option<String> {
    let after = resource.strip_prefix(NAMESPACE)?;
    let rest = strip_tag(after);
    (rest.len() != after.len()).then(|| concat(&[NAMESPACE, rest]))
}

/// `name` (what follows the namespace) without the slot tag it starts with, if any: `{`,
/// one to three characters of `[0-9A-Za-z]`, `}:`.
fn strip_tag(name: &str) -> &str {
    let Some(inner) = name.strip_prefix('{') else {
        return name;
    };
    match inner.split_once("}:") {
        Some((tag, rest))
            if (1..=3).contains(&tag.len()) && tag.bytes().all(|b| b.is_ascii_alphanumeric()) =>
        {
            rest
        }
        _ => name,
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
    /// The node's promotion record: its life as a promoted replica and when, by its own
    /// clock, a client first learnt that life (`<life> <unix ms>`).
    Promoted,
}

/// The name of the node-wide key `global` under `prefix`, with slot tag `tag` (on a
/// Cluster member each slot has its own, see [`Space`]).
pub(crate) fn global(prefix: &str, global: Global, tag: &str) -> String {
    global_name(prefix, global, tag).joined()
}

/// [`global`]'s name as its parts.
pub(crate) fn global_name<'a>(prefix: &'a str, global: Global, tag: &'a str) -> Name<'a> {
    internal_name(prefix, tag, "node", global.name())
}

impl Global {
    /// What follows `node:` in its name.
    fn name(self) -> &'static str {
        match self {
            Global::MaxTtl => "max-ttl",
            Global::Marker => "marker",
            Global::Promoted => "promoted",
        }
    }
}

/// The resource name of a readmission probe (`heal`): one of the client's own, under the
/// crate's namespace; the key prefix is added to it as to any resource.
pub(crate) fn probe_resource(id: &str) -> String {
    internal("", "probe", id)
}

/// [`probe_resource`] in Redis Cluster slot `slot` (its name carries the slot's tag).
pub(crate) fn probe_resource_in(slot: u16, id: &str) -> String {
    internal_name("", slots::slot_tag(slot), "probe", id).joined()
}

/// The resource name of the election `name`: its lock, under the crate's namespace; the
/// key prefix is added to it as to any resource.
pub(crate) fn election_resource(name: &str) -> String {
    internal("", "election", name)
}

/// The channel election `name`'s leaders announce their terms on.
pub(crate) fn election_channel(prefix: &str, name: &str) -> String {
    internal(prefix, "leader", name)
}

/// The semaphore name in slot lock resource `resource` (see [`permit_resource`]); the whole
/// resource for any other.
pub(crate) fn semaphore_of(resource: &str) -> &str {
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

/// [`permit_slots`] named by the lock key of one of the slots in `space` (tagged on a
/// Cluster member) rather than its resource.
pub(crate) fn permit_slots_of_key(space: Space<'_>, slot_key: &str, permits: u32) -> Vec<String> {
    let resource = slot_key.strip_prefix(space.prefix).unwrap_or(slot_key);
    let flat = untagged(resource).unwrap_or_else(|| resource.to_owned());
    permit_slots(space, &flat, permits)
}

/// The lock keys in `space` of every slot of a semaphore of `permits` permits, named by the
/// resource of one of its slots (see [`permit_resource`]), in slot order.
pub(crate) fn permit_slots(space: Space<'_>, slot_resource: &str, permits: u32) -> Vec<String> {
    let semaphore = semaphore_of(slot_resource);
    (0..permits)
        .map(|slot| lock(space, &permit_resource(semaphore, slot)))
        .collect()
}

/// The lock key of `resource` in `space`: the key prefix followed by the resource name.
/// On a Cluster member a semaphore's slot locks carry the tag of the slot of the lock key
/// of the semaphore's name after the namespace, so that they share that slot with it, its
/// waiting list and its count record: `<prefix>quorum-lock:{T}:permit:<name>:<slot>`.
pub(crate) fn lock(space: Space<'_>, resource: &str) -> String {
    if space.slotted
        && let LockOf::PermitSlot { semaphore, .. } = lock_of(resource)
        && let Some(rest) = resource.strip_prefix(NAMESPACE)
    {
        let tag = slots::slot_tag(slots::slot_of(
            concat(&[space.prefix, semaphore]).as_bytes(),
        ));
        return concat(&[space.prefix, NAMESPACE, tag, rest]);
    }
    concat(&[space.prefix, resource])
}

/// The lock keys of `resources` in `space`, in their order. Without a prefix (and a
/// Cluster member) each key is its resource's name, and the names are shared rather than
/// copied.
pub(crate) fn locks(space: Space<'_>, resources: &Arc<[String]>) -> Arc<[String]> {
    match space.prefix.is_empty() && !space.slotted {
        true => Arc::clone(resources),
        false => resources.iter().map(|r| lock(space, r)).collect(),
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
const GLOBALS: [Global; 3] = [Global::MaxTtl, Global::Marker, Global::Promoted];

/// A `SCAN ... MATCH` pattern for every name under the crate's namespace for `prefix`
/// (`<prefix>quorum-lock:*`), the glob characters of the prefix (`* ? [ ] \`) escaped so
/// that they match only themselves.
pub(crate) fn namespace_pattern(prefix: &str) -> String {
    let mut pattern = glob_escaped(prefix);
    pattern.push_str(NAMESPACE);
    pattern.push('*');
    pattern
}

/// A `SCAN ... MATCH` pattern for every name under `prefix` (`<prefix>*`), where the lock
/// keys of mutexes and writers are (their users' resource names), the prefix's glob
/// characters escaped as in [`namespace_pattern`].
pub(crate) fn prefix_pattern(prefix: &str) -> String {
    let mut pattern = glob_escaped(prefix);
    pattern.push('*');
    pattern
}

/// `text` with the glob characters of `SCAN ... MATCH` (`* ? [ ] \`) escaped.
fn glob_escaped(text: &str) -> String {
    let mut escaped = String::with_capacity(2 * text.len() + NAMESPACE.len() + 1);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// The lock a resource name belongs to, read back from the name ([`lock_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockOf<'a> {
    /// Slot `slot` of semaphore `semaphore` ([`permit_resource`]).
    PermitSlot { semaphore: &'a str, slot: u32 },
    /// Semaphore `name` as a whole: what its slots' waiting list belongs to.
    Semaphore(&'a str),
    /// The readmission probe of client `id` ([`probe_resource`]).
    Probe(&'a str),
    /// The election `name` ([`election_resource`]).
    Election(&'a str),
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
    let (what, rest) = strip_tag(resource.strip_prefix(NAMESPACE)?).split_once(':')?;
    let of = |kind| {
        Some(KnownKey::Of {
            kind,
            lock: lock_of(rest),
        })
    };
    match what {
        "rw" | "permit" | "probe" | "election" => match lock_of(resource) {
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
        "term" => of(Kind::Term),
        "candidates" => of(Kind::Candidates),
        "permits" => Some(KnownKey::PermitCount { semaphore: rest }),
        "node" => (GLOBALS.into_iter())
            .find(|g| g.name() == rest)
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
    let Some((what, rest)) =
        (resource.strip_prefix(NAMESPACE)).and_then(|r| strip_tag(r).split_once(':'))
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
        "permit" => slot().unwrap_or(LockOf::Mutex(resource)),
        "probe" => LockOf::Probe(rest),
        "election" => LockOf::Election(rest),
        _ => LockOf::Mutex(resource),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn derived(kind: Kind, prefix: &str, lock: &str) -> String {
        derived_name(kind, prefix, lock, "").joined()
    }

    #[test]
    fn a_name_is_one_argument_of_its_joined_bytes() {
        for name in [
            derived_name(Kind::Lock, "app:", "app:r", ""),
            derived_name(Kind::Waiters, "app:", "app:r", ""),
            global_name("", Global::Marker, ""),
            derived_name(Kind::Fence, "", "quorum-lock:{a}:permit:s:1", "{a}:"),
        ] {
            let mut parts = redis::cmd("EVALSHA");
            parts.arg(&name).arg("next");
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
        assert_eq!(global("", Global::MaxTtl, ""), "quorum-lock:node:max-ttl");
        assert_eq!(global("", Global::Marker, ""), "quorum-lock:node:marker");
        assert_eq!(fence_seen("r"), "quorum-lock:fence-seen:r");
    }

    #[test]
    fn every_name_is_under_the_prefix() {
        let prefix = "app:";
        let lock_key = lock(Space::flat(prefix), "r");
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
        for g in GLOBALS {
            match g {
                Global::MaxTtl | Global::Marker | Global::Promoted => {}
            }
            assert!(global(prefix, g, "").starts_with(prefix), "{g:?}");
        }
        let kinds = [
            Kind::Lock,
            Kind::Fence,
            Kind::Waiters,
            Kind::Turn,
            Kind::Readers,
            Kind::Intent,
            Kind::PermitCount,
            Kind::Name,
            Kind::Term,
            Kind::Candidates,
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
                | Kind::PermitCount
                | Kind::Name
                | Kind::Term
                | Kind::Candidates => {}
            }
            assert!(
                derived(kind, prefix, &lock_key).starts_with(prefix),
                "{kind:?}"
            );
        }
        assert!(internal(prefix, "any", "x").starts_with(prefix));
    }

    #[test]
    fn a_semaphore_slot_names_the_lock_key_of_its_semaphore() {
        let slot = lock(Space::flat("app:"), &permit_resource("jobs:a", 3));
        assert_eq!(derived(Kind::Name, "app:", &slot), "app:jobs:a");
        assert_eq!(derived(Kind::Name, "app:", "app:r"), "app:r");
    }

    #[test]
    fn a_slot_key_names_every_slot_of_its_semaphore() {
        for slotted in [false, true] {
            let space = Space {
                prefix: "app:",
                slotted,
            };
            let every = permit_slots(space, &permit_resource("jobs", 0), 3);
            assert_eq!(permit_slots_of_key(space, &every[2], 3), every);
        }
    }

    #[test]
    fn every_slot_of_a_semaphore_shares_one_waiting_list() {
        let slot = |i| lock(Space::flat("app:"), &permit_resource("jobs:a", i));
        let list = |key: &str| derived(Kind::Waiters, "app:", key);
        assert_eq!(
            list(&slot(0)),
            "app:quorum-lock:waiters:quorum-lock:permit:jobs:a"
        );
        assert_eq!(list(&slot(3)), list(&slot(0)));
        assert_ne!(
            list(&lock(Space::flat("app:"), &permit_resource("jobs:b", 0))),
            list(&slot(0))
        );
        // A plain lock whose name has colons keeps its own list.
        assert_eq!(list("app:jobs:a:1"), "app:quorum-lock:waiters:jobs:a:1");
    }

    #[test]
    fn every_slot_of_a_semaphore_shares_one_count_key() {
        let slot = |i| lock(Space::flat("app:"), &permit_resource("jobs:a", i));
        let count = |key: &str| derived(Kind::PermitCount, "app:", key);
        assert_eq!(count(&slot(0)), "app:quorum-lock:permits:jobs:a");
        assert_eq!(count(&slot(7)), count(&slot(0)));
        let every = permit_slots(Space::flat("app:"), &permit_resource("jobs:a", 1), 3);
        assert_eq!(every, [slot(0), slot(1), slot(2)]);
        assert_ne!(
            count(&lock(Space::flat("app:"), &permit_resource("jobs:b", 0))),
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
            Kind::Term,
            Kind::Candidates,
        ];
        for prefix in ["", "app:", "a*[b]?\\:"] {
            let locks = [
                (
                    permit_resource("jobs:a", 7),
                    LockOf::PermitSlot {
                        semaphore: "jobs:a",
                        slot: 7,
                    },
                ),
                (probe_resource("c1"), LockOf::Probe("c1")),
                (election_resource("leader"), LockOf::Election("leader")),
                ("plain".to_owned(), LockOf::Mutex("plain")),
                (
                    "quorum-lock:other:x".to_owned(),
                    LockOf::Mutex("quorum-lock:other:x"),
                ),
            ];
            for (resource, lock_kind) in &locks {
                let key = lock(Space::flat(prefix), resource);
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
            let slot = lock(Space::flat(prefix), &permit_resource("jobs:a", 3));
            let count = derived(Kind::PermitCount, prefix, &slot);
            assert_eq!(
                parse_key(prefix, &count),
                Some(KnownKey::PermitCount {
                    semaphore: "jobs:a"
                })
            );
            for g in GLOBALS {
                assert_eq!(
                    parse_key(prefix, &global(prefix, g, "")),
                    Some(KnownKey::Global(g))
                );
            }
            // Names no lock node holds, and names of no kind.
            for other in [
                wake_channel(prefix, "c1"),
                internal(prefix, "node", "other"),
                internal(prefix, "future", "x"),
                lock(Space::flat(prefix), "quorum-lock"),
            ] {
                assert_eq!(parse_key(prefix, &other), None, "{other}");
            }
        }
        assert_eq!(parse_key("", &fence_seen("r")), None);
        // Another prefix's names are not ours.
        let theirs = derived(Kind::Fence, "b:", "b:r");
        assert_eq!(parse_key("a:", &theirs), None);
    }

    /// On a Cluster member every name a lock's scripts touch is in its lock key's slot, a
    /// mutex's lock key is its resource name, and every name reads back as without a tag.
    #[test]
    fn slotted_names_share_their_lock_keys_slot_and_read_back() {
        use crate::protocol::slots::slot_of;
        let kinds = [
            Kind::Fence,
            Kind::Waiters,
            Kind::Turn,
            Kind::Readers,
            Kind::Intent,
            Kind::PermitCount,
            Kind::Name,
        ];
        for prefix in ["", "app:", "{app}:", "a}b:"] {
            let space = Space {
                prefix,
                slotted: true,
            };
            let resources = [
                "plain".to_owned(),
                "{user1}:a".to_owned(),
                permit_resource("jobs:a", 2),
                probe_resource("c1"),
            ];
            for resource in &resources {
                let key = lock(space, resource);
                let locks = [key.clone()];
                let tag = space.tag_for(&locks);
                let slot = slot_of(key.as_bytes());
                for kind in kinds {
                    let name = derived_name(kind, prefix, &key, tag).joined();
                    assert_eq!(slot_of(name.as_bytes()), slot, "{name} beside {key}");
                    let flat_lock = lock(Space::flat(prefix), resource);
                    let flat = derived_name(kind, prefix, &flat_lock, "").joined();
                    assert_eq!(parse_key(prefix, &name), parse_key(prefix, &flat), "{name}");
                }
                for g in GLOBALS {
                    let name = global(prefix, g, tag);
                    assert_eq!(slot_of(name.as_bytes()), slot, "{name}");
                    assert_eq!(parse_key(prefix, &name), Some(KnownKey::Global(g)));
                }
            }
            assert_eq!(lock(space, "plain"), format!("{prefix}plain"));
            // Every slot lock of a semaphore is in one slot, with one waiting list and count.
            let slot_key = |i| lock(space, &permit_resource("jobs:a", i));
            assert_eq!(
                slot_of(slot_key(0).as_bytes()),
                slot_of(slot_key(5).as_bytes())
            );
            let list = |key: &str| {
                let tag = space.tag_for(&[key.to_owned()]);
                derived_name(Kind::Waiters, prefix, key, tag).joined()
            };
            assert_eq!(list(&slot_key(0)), list(&slot_key(5)));
            let every = permit_slots(space, &permit_resource("jobs:a", 2), 6);
            assert_eq!(every, (0..6).map(slot_key).collect::<Vec<_>>());
            assert_eq!(
                lock_of(slot_key(3).strip_prefix(prefix).unwrap_or_default()),
                LockOf::PermitSlot {
                    semaphore: "jobs:a",
                    slot: 3
                }
            );
        }
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
        assert_eq!(prefix_pattern(""), "*");
        assert_eq!(prefix_pattern(r"a*b?[c]\d:"), r"a\*b\?\[c\]\\d:*");
    }
}
