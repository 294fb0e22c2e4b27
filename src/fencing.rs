//! Fencing tokens: making a storage system reject writes from a holder whose lock ran out.
//!
//! A lock can be lost while its holder still works (a long GC or VM pause, a network delay
//! of its writes): the validity runs out, another client acquires the lock and writes, and
//! then the old holder's delayed write lands. A lock alone cannot prevent that; the storage
//! can, if each write carries a number that grows from one holder to the next and the
//! storage refuses a number lower than one it has already seen.
//!
//! Request one with [`LockRequest::fencing`](crate::LockRequest::fencing) and read it with
//! [`LockGuard::fencing_token`](crate::LockGuard::fencing_token). It is minted by the same
//! majority as the lock: every node keeps a counter `<prefix>quorum-lock:fence:<resource>` that never
//! expires; the acquisition reads the counters of the nodes it reaches, takes one more than
//! the highest, and commits it to a majority (only where our lock is in place) before the
//! guard is returned. Any two majorities share a node, so the next holder reads at least
//! this value and mints a larger one. It assumes that a majority of nodes never loses its
//! data at once; restart quarantine keeps a restarted, emptied node from voting while the
//! counters of the others are the ones that count. Cost: one extra round trip per
//! acquisition, and one counter key per resource.
//!
//! # Using the token
//!
//! For data kept in Redis, [`fenced_set`] writes a value only if the token is at least
//! the highest one seen for the resource on that server. For SQL, keep the token in the row
//! and make it part of the update's condition, so an older token changes nothing:
//!
//! ```sql
//! UPDATE accounts SET balance = $1, fence = $2
//!  WHERE id = $3 AND fence <= $2;  -- 0 rows updated: a newer holder already wrote
//! ```

use redis::RedisResult;
use redis::aio::ConnectionLike;

use crate::protocol::{keys, scripts};

/// Sets `key` to `value` on the server behind `conn` if `token` is at least the highest
/// fencing token seen there for `resource` (kept in `quorum-lock:fence-seen:<resource>`),
/// atomically. Returns whether the write happened: `false` means a newer holder has
/// written since, and this holder must stop.
///
/// `conn` is any connection to the Redis that holds your data; it need not be one of the
/// lock nodes.
///
/// # Errors
///
/// Whatever the connection returns (I/O, a wrong type at `key`, ...).
pub async fn fenced_set<C: ConnectionLike>(
    conn: &mut C,
    resource: &str,
    token: u64,
    key: &str,
    value: impl redis::ToRedisArgs,
) -> RedisResult<bool> {
    let mut invocation = scripts::FENCED_SET.script().prepare_invoke();
    invocation
        .key(key)
        .key(keys::fence_seen(resource))
        .arg(token)
        .arg(value);
    let written: i64 = invocation.invoke_async(conn).await?;
    Ok(written == 1)
}
