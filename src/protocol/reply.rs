//! Decoders of the nodes' replies: each turns a raw reply into a typed value, or into the
//! [`NodeOutcome`] that says why it is not one. They know the scripts' return shapes (see
//! [`scripts`](super::scripts)) and nothing above the protocol.

use redis::Value;

use crate::report::NodeOutcome;

/// Converts a reply to `T`, or says why it is not one.
pub(crate) fn decode<T: redis::FromRedisValue>(value: Value) -> Result<T, NodeOutcome> {
    redis::from_redis_value(value).map_err(|e| NodeOutcome::Failed(e.to_string()))
}

/// [`ACQUIRE`](super::scripts::ACQUIRE)'s reply `{acquired, fence}`: whether it set the
/// keys, and the fencing counter it read (with fencing on). A key of another type in the
/// way is [`NodeOutcome::WrongType`].
pub(crate) fn acquire_reply(reply: Value) -> Result<(bool, Option<u64>), NodeOutcome> {
    match decode::<(i64, Option<u64>)>(reply)? {
        (-1, _) => Err(NodeOutcome::WrongType),
        (set, fence) => Ok((set == 1, fence)),
    }
}

/// A `TYPE` reply: whether the key holds something other than a string (a foreign list,
/// hash, ...), as opposed to a string or nothing.
pub(crate) fn is_other_type(reply: Value) -> bool {
    decode::<String>(reply).is_ok_and(|kind| kind != "string" && kind != "none")
}

/// A reply `1` (the script did it) or anything else (it did not), as `yes` or `no`.
pub(crate) fn one_or(reply: Value, yes: NodeOutcome, no: NodeOutcome) -> NodeOutcome {
    match decode::<i64>(reply) {
        Ok(1) => yes,
        Ok(_) => no,
        Err(failed) => failed,
    }
}
