//! The names of the keys and channels the library uses, one function per kind.
//!
//! Every name starts with the client's key prefix, so an ACL that allows only
//! `~<prefix>*` (keys) and `&<prefix>*` (channels) covers all of them. A lock key is the
//! prefix followed by the resource name; every other name is made by [`internal`]: the
//! prefix, then `quorum-lock:<what>:`, then what it belongs to. With the default empty
//! prefix the names are those of earlier versions. Resource names that start with
//! `quorum-lock:` would collide with these names: they are the library's own.

/// The kinds of keys a script receives, in the order of its `KEYS` blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The lock key itself.
    Lock,
    /// The fencing counter of a lock key (never expires): a plain integer.
    Fence,
    /// The life (`run_id`) the fencing counter was last written in, from the node's
    /// marker (never expires; `''` when the node had no marker).
    FenceLife,
    /// The waiting list of a lock key (client ids, expires after twice the TTL).
    Waiters,
    /// The client whose turn it is after a release woke it (short expiry).
    Turn,
}

/// The one rule for every name other than a lock key: `<prefix>quorum-lock:<what>:<rest>`.
/// Any key or channel this crate adds is named through here, so it stays under the prefix.
pub(crate) fn internal(prefix: &str, what: &str, rest: &str) -> String {
    // Concatenated into one allocation of the right size: names are made on every lock and
    // release, and `format!` costs several times as much.
    concat(&[prefix, "quorum-lock:", what, ":", rest])
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
/// followed by the resource name).
pub(crate) fn derived(kind: Kind, prefix: &str, lock: &str) -> String {
    let resource = lock.strip_prefix(prefix).unwrap_or(lock);
    match kind {
        Kind::Lock => lock.to_owned(),
        Kind::Fence => internal(prefix, "fence", resource),
        Kind::FenceLife => internal(prefix, "fence-life", resource),
        Kind::Waiters => internal(prefix, "waiters", resource),
        Kind::Turn => internal(prefix, "turn", resource),
    }
}

/// The node-wide keys of restart quarantine (safety v2): one of each per node and key
/// prefix (clients of one prefix share them: their leases are on the same keys), never
/// expiring. A script gets them after its per-lock
/// blocks, in the order of its layout's globals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Global {
    /// The ensemble record: the longest TTL in milliseconds any client may count votes
    /// for, raised with (before or atomically with) every acquisition and extension.
    MaxTtl,
    /// The node's marker `<run_id>:<0|1>`: the life in which a client admitted the node,
    /// and whether it held everything since it first served (`1`).
    Marker,
}

/// The name of the node-wide key `global` under `prefix`.
pub(crate) fn global(prefix: &str, global: Global) -> String {
    match global {
        Global::MaxTtl => internal(prefix, "node", "max-ttl"),
        Global::Marker => internal(prefix, "node", "marker"),
    }
}

/// The `SCAN MATCH` pattern of every fencing counter under `prefix` (glob characters of
/// the prefix escaped), for counter repair.
pub(crate) fn fence_pattern(prefix: &str) -> String {
    let mut escaped = String::with_capacity(prefix.len());
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    internal(&escaped, "fence", "*")
}

/// The resource whose fencing counter is `key` under `prefix` (the inverse of
/// [`derived`] with [`Kind::Fence`]); `None` for any other key.
pub(crate) fn fence_resource<'a>(prefix: &str, key: &'a str) -> Option<&'a str> {
    key.strip_prefix(prefix)?
        .strip_prefix("quorum-lock:fence:")
        .filter(|r| !r.is_empty())
}

/// The lock key of `resource` under `prefix`.
pub(crate) fn lock(prefix: &str, resource: &str) -> String {
    concat(&[prefix, resource])
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

/// The highest fencing token seen for `resource` by [`fenced_set`](crate::fencing::fenced_set),
/// on the server that holds the caller's data (not a lock node; no key prefix applies).
pub(crate) fn fence_seen(resource: &str) -> String {
    internal("", "fence-seen", resource)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_without_a_prefix_are_unchanged() {
        assert_eq!(derived(Kind::Lock, "", "r"), "r");
        assert_eq!(derived(Kind::Fence, "", "r"), "quorum-lock:fence:r");
        assert_eq!(derived(Kind::Waiters, "", "r"), "quorum-lock:waiters:r");
        assert_eq!(derived(Kind::Turn, "", "r"), "quorum-lock:turn:r");
        assert_eq!(wake_channel("", "c1"), "quorum-lock:wake:c1");
        assert_eq!(wake_channel_prefix(""), "quorum-lock:wake:");
        assert_eq!(
            derived(Kind::FenceLife, "", "r"),
            "quorum-lock:fence-life:r"
        );
        assert_eq!(global("", Global::MaxTtl), "quorum-lock:node:max-ttl");
        assert_eq!(global("", Global::Marker), "quorum-lock:node:marker");
        assert_eq!(fence_seen("r"), "quorum-lock:fence-seen:r");
    }

    #[test]
    fn repair_finds_counters_and_their_resources() {
        assert_eq!(fence_pattern(""), "quorum-lock:fence:*");
        assert_eq!(
            fence_pattern("a*b?[c]\\:"),
            "a\\*b\\?\\[c\\]\\\\:quorum-lock:fence:*"
        );
        for (prefix, resource) in [("", "r"), ("app:", "orders:1"), ("p*", "x")] {
            let key = derived(Kind::Fence, prefix, &lock(prefix, resource));
            assert_eq!(fence_resource(prefix, &key), Some(resource));
        }
        assert_eq!(fence_resource("", "quorum-lock:fence-life:r"), None);
        assert_eq!(fence_resource("", "quorum-lock:fence:"), None);
        assert_eq!(fence_resource("app:", "quorum-lock:fence:r"), None);
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
        for kind in [
            Kind::Lock,
            Kind::Fence,
            Kind::FenceLife,
            Kind::Waiters,
            Kind::Turn,
        ] {
            // Exhaustive on purpose: a new kind must be added to the list above.
            match kind {
                Kind::Lock | Kind::Fence | Kind::FenceLife | Kind::Waiters | Kind::Turn => {}
            }
            assert!(
                derived(kind, prefix, &lock_key).starts_with(prefix),
                "{kind:?}"
            );
        }
        assert!(internal(prefix, "any", "x").starts_with(prefix));
    }
}
