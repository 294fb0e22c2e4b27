//! The names of the keys and channels the library uses, one function per kind.
//!
//! A lock key is the resource name with the client's key prefix. The library's own
//! bookkeeping keys are derived from the lock key, so they follow its prefix.

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

/// The name of the key of `kind` that belongs to lock key `lock`.
pub(crate) fn derived(kind: Kind, lock: &str) -> String {
    match kind {
        Kind::Lock => lock.to_owned(),
        Kind::Fence => format!("quorum-lock:fence:{lock}"),
        Kind::FenceLife => format!("quorum-lock:fence-life:{lock}"),
        Kind::Waiters => format!("quorum-lock:waiters:{lock}"),
        Kind::Turn => format!("quorum-lock:turn:{lock}"),
    }
}

/// The node-wide keys of restart quarantine (safety v2): one of each per node, shared by
/// every client and key prefix, never expiring. A script gets them after its per-lock
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

/// The name of the node-wide key `global`.
pub(crate) fn global(global: Global) -> &'static str {
    match global {
        Global::MaxTtl => "quorum-lock:max-ttl",
        Global::Marker => "quorum-lock:marker",
    }
}

/// The lock key of `resource` under `prefix`.
pub(crate) fn lock(prefix: &str, resource: &str) -> String {
    format!("{prefix}{resource}")
}

/// The prefix of the channel each client listens on for wake-ups; its id follows.
pub(crate) const WAKE_CHANNEL_PREFIX: &str = "quorum-lock:wake:";

/// The channel client `id` listens on for wake-ups.
pub(crate) fn wake_channel(id: &str) -> String {
    format!("{WAKE_CHANNEL_PREFIX}{id}")
}

/// The highest fencing token seen for `resource` by [`fenced_set`](crate::fencing::fenced_set).
pub(crate) fn fence_seen(resource: &str) -> String {
    format!("quorum-lock:fence-seen:{resource}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_keys_keep_their_names() {
        assert_eq!(derived(Kind::Lock, "app:r"), "app:r");
        assert_eq!(derived(Kind::Fence, "app:r"), "quorum-lock:fence:app:r");
        assert_eq!(
            derived(Kind::FenceLife, "app:r"),
            "quorum-lock:fence-life:app:r"
        );
        assert_eq!(derived(Kind::Waiters, "app:r"), "quorum-lock:waiters:app:r");
        assert_eq!(derived(Kind::Turn, "app:r"), "quorum-lock:turn:app:r");
        assert_eq!(lock("app:", "r"), "app:r");
        assert_eq!(wake_channel("c1"), "quorum-lock:wake:c1");
        assert_eq!(fence_seen("r"), "quorum-lock:fence-seen:r");
        assert_eq!(global(Global::MaxTtl), "quorum-lock:max-ttl");
        assert_eq!(global(Global::Marker), "quorum-lock:marker");
    }
}
