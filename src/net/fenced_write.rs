//! The guarded write of [`fencing`](crate::fencing) on the caller's own connection to its
//! data: the one place the crate sends a command on a connection it did not make.

use redis::RedisResult;
use redis::aio::ConnectionLike;

use crate::protocol::{keys, scripts};

/// Sets `key` to `value` on the server behind `conn` if `token` is at least the highest
/// fencing token seen there for `resource` (kept in `quorum-lock:fence-seen:<resource>`),
/// atomically. Returns whether the write happened: `false` means a newer holder has
/// written since, and this holder must stop.
///
/// `conn` is any connection to the Redis that holds your data; it need not be one of the
/// lock nodes. `token` is a [`FencingToken`](crate::fencing::FencingToken) or its `u64` value.
///
/// # Errors
///
/// Whatever the connection returns (I/O, a wrong type at `key`, ...).
///
/// # Cancel safety
///
/// Dropping the future may leave the write done or not done; it is never half done.
pub async fn fenced_set<C: ConnectionLike>(
    conn: &mut C,
    resource: &str,
    token: impl Into<u64>,
    key: &str,
    value: impl redis::ToRedisArgs,
) -> RedisResult<bool> {
    let mut invocation = scripts::FENCED_SET.script().prepare_invoke();
    invocation
        .key(key)
        .key(keys::fence_seen(resource))
        .arg(token.into())
        .arg(value);
    let written: i64 = invocation.invoke_async(conn).await?;
    Ok(written == 1)
}
