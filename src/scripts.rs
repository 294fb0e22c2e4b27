//! Every Lua script the client runs, each with its KEYS/ARGV contract and return codes.
//!
//! Scripts are sent with `EVALSHA` by [`redis::Script::invoke_async`], which loads the source
//! and retries once when a node answers `NOSCRIPT` (after `SCRIPT FLUSH`). Every new
//! connection also loads all of them first ([`SOURCES`]): a release queued behind a `SET` on a
//! node that is paused must run when the node resumes, when nobody waits for a `NOSCRIPT`
//! answer any more to retry it.
//! All keys of one lock share one token, so the same scripts serve single and multi-resource
//! locks.

use std::sync::LazyLock;

use redis::Script;

/// All-or-nothing acquisition of several keys on one node.
///
/// KEYS: the lock keys (sorted, distinct). ARGV[1]: our token. ARGV[2]: TTL in milliseconds.
/// Returns 1 after setting every key to the token with the TTL, or 0 (and sets nothing)
/// when any key already exists, whatever its type.
const ACQUIRE_MANY_SRC: &str = r"
for i = 1, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 then
        return 0
    end
end
for i = 1, #KEYS do
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 1
";
pub(crate) static ACQUIRE_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_MANY_SRC));

/// Compare-and-delete.
///
/// KEYS: the lock keys. ARGV[1]: our token.
/// Deletes every key whose value equals the token; returns how many it deleted
/// (0: none of them is ours, or they expired). A key of another type makes `GET` fail
/// with `WRONGTYPE`, which the caller reports as a foreign key.
const RELEASE_SRC: &str = r"
local n = 0
for i = 1, #KEYS do
    if redis.call('GET', KEYS[i]) == ARGV[1] then
        n = n + redis.call('DEL', KEYS[i])
    end
end
return n
";
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SRC));

/// Compare-and-PEXPIRE, all or nothing.
///
/// KEYS: the lock keys. ARGV[1]: our token. ARGV[2]: new TTL in milliseconds.
/// Returns 1 after resetting the expiry of every key when all of them hold our token,
/// 0 (and changes nothing) when any of them does not.
const EXTEND_SRC: &str = r"
for i = 1, #KEYS do
    if redis.call('GET', KEYS[i]) ~= ARGV[1] then
        return 0
    end
end
for i = 1, #KEYS do
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return 1
";
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_SRC));

/// Every script's source, loaded with `SCRIPT LOAD` on each new connection.
pub(crate) const SOURCES: [&str; 3] = [ACQUIRE_MANY_SRC, RELEASE_SRC, EXTEND_SRC];
