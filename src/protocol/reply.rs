//! Decoders of the nodes' replies: each turns a raw reply into a typed value, or into the
//! [`NodeOutcome`] that says why it is not one. They know the scripts' return shapes (see
//! [`scripts`](super::scripts)) and nothing above the protocol.

use redis::Value;

use crate::report::NodeOutcome;

/// Converts a reply to `T`, or says why it is not one.
pub(crate) fn decode<T: redis::FromRedisValue>(value: Value) -> Result<T, NodeOutcome> {
    redis::from_redis_value(value).map_err(|e| NodeOutcome::Failed(e.to_string()))
}

/// [`ACQUIRE`](super::scripts::ACQUIRE)'s reply, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Acquired {
    /// Whether it set the keys.
    pub(crate) set: bool,
    /// The highest fencing counter of the keys (with fencing on).
    pub(crate) fence: Option<u64>,
    /// The life every counter was written in; `None` when one is absent or they differ.
    pub(crate) fence_life: Option<String>,
    /// The node's marker as it was.
    pub(crate) marker: Option<Marker>,
    /// The ensemble record before the script raised it, in milliseconds.
    pub(crate) record_ms: Option<u64>,
}

/// A node's marker, as [`MARK`](super::scripts::MARK) writes it: `<life>:<0|1>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marker {
    /// The `run_id` of the life the node was admitted in.
    pub(crate) life: String,
    /// Whether the node held everything since it first served.
    pub(crate) complete: bool,
}

impl Marker {
    /// Reads the marker's text; anything else reads as no marker at all (the safe side:
    /// the node is treated as having lost its memory).
    pub(crate) fn parse(text: &str) -> Option<Marker> {
        let (life, complete) = text.rsplit_once(':')?;
        let complete = match complete {
            "1" => true,
            "0" => false,
            _ => return None,
        };
        (!life.is_empty()).then(|| Marker {
            life: life.to_owned(),
            complete,
        })
    }
}

/// [`ACQUIRE`](super::scripts::ACQUIRE)'s reply `{acquired, fence, fence_life, marker, record}`.
pub(crate) fn acquire_reply(reply: Value) -> Result<Acquired, NodeOutcome> {
    type Raw = (
        i64,
        Option<u64>,
        Option<String>,
        Option<String>,
        Option<u64>,
    );
    decode::<Raw>(reply).map(|(set, fence, fence_life, marker, record_ms)| Acquired {
        set: set == 1,
        fence,
        fence_life,
        marker: marker.as_deref().and_then(Marker::parse),
        record_ms,
    })
}

/// [`INSPECT`](super::scripts::INSPECT)'s reply, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inspected {
    /// The key's type (`none` when absent).
    pub(crate) kind: String,
    /// Its remaining time to live in milliseconds (negative: none, or no key).
    pub(crate) pttl: i64,
    /// A string key's value.
    pub(crate) value: Option<Vec<u8>>,
    /// The node's marker.
    pub(crate) marker: Option<Marker>,
    /// The ensemble record on the node, in milliseconds.
    pub(crate) record_ms: Option<u64>,
}

/// [`INSPECT`](super::scripts::INSPECT)'s reply `{type, pttl, value, marker, record}`.
pub(crate) fn inspect_reply(reply: Value) -> Result<Inspected, NodeOutcome> {
    type Raw = (String, i64, Option<Vec<u8>>, Option<String>, Option<u64>);
    decode::<Raw>(reply).map(|(kind, pttl, value, marker, record_ms)| Inspected {
        kind,
        pttl,
        value,
        marker: marker.as_deref().and_then(Marker::parse),
        record_ms,
    })
}

/// A reply `1` (the script did it) or anything else (it did not), as `yes` or `no`.
pub(crate) fn one_or(reply: Value, yes: NodeOutcome, no: NodeOutcome) -> NodeOutcome {
    match decode::<i64>(reply) {
        Ok(1) => yes,
        Ok(_) => no,
        Err(failed) => failed,
    }
}
