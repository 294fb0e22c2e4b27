//! Decoders of the nodes' replies: each turns a raw reply into a typed value, or into the
//! [`NodeOutcome`] that says why it is not one. They know the scripts' return shapes (see
//! [`scripts`](super::scripts)) and nothing above the protocol. Total: any reply, however
//! malformed (a wrong type, nil, a huge or negative integer, an odd or nested array), gives
//! a value or an error, never a panic (the property test below feeds them arbitrary
//! replies).

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
    /// The node's marker as it was.
    pub(crate) marker: Option<Marker>,
    /// The ensemble record before the script raised it, in milliseconds.
    pub(crate) record_ms: Option<u64>,
}

/// A node's marker, as [`MARK`](super::scripts::MARK) writes it: the `run_id` of the life
/// the node was admitted in. Markers of earlier versions, `<life>:<0|1>`, read as their
/// life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Marker {
    /// The `run_id` of the life the node was admitted in.
    pub(crate) life: String,
}

impl Marker {
    /// Reads the marker's text; an empty one reads as no marker at all (the safe side: the
    /// node is treated as having lost its memory).
    pub(crate) fn parse(text: &str) -> Option<Marker> {
        let life = text.split(':').next().unwrap_or_default();
        (!life.is_empty()).then(|| Marker {
            life: life.to_owned(),
        })
    }
}

/// [`ACQUIRE`](super::scripts::ACQUIRE)'s reply `{acquired, fence, marker, record}`.
/// A key of another type in the way (`acquired` = -1) is [`NodeOutcome::WrongType`]; a
/// semaphore count record other than the slot's (`acquired` = -2, with the count recorded
/// in place of the fencing counter) is [`NodeOutcome::CountMismatch`], and a lock of
/// another kind holding the semaphore's name (`acquired` = -3) [`NodeOutcome::NameInUse`].
pub(crate) fn acquire_reply(reply: Value) -> Result<Acquired, NodeOutcome> {
    // The counter is read as a signed number: the driver turns -1 into `u64::MAX` when
    // asked for a `u64`, and a counter at the top would make every later token equal.
    type Raw = (i64, Option<i64>, Option<String>, Option<u64>);
    let (set, fence, marker, record_ms) = decode::<Raw>(reply)?;
    if set == -1 {
        return Err(NodeOutcome::WrongType);
    }
    if set == -3 {
        return Err(NodeOutcome::NameInUse);
    }
    if set == -2 {
        // A slot lock's script: the node records another permit count, in place of the
        // fencing counter.
        let recorded = fence.and_then(|count| u32::try_from(count).ok());
        return Err(NodeOutcome::CountMismatch { recorded });
    }
    let fence = fence
        .map(u64::try_from)
        .transpose()
        .map_err(|_| NodeOutcome::Failed(format!("negative fencing counter {fence:?}")))?;
    Ok(Acquired {
        set: set == 1,
        fence,
        marker: marker.as_deref().and_then(Marker::parse),
        record_ms,
    })
}

/// A `TYPE` reply: whether the key holds something other than a string (a foreign list,
/// hash, ...), as opposed to a string or nothing.
pub(crate) fn is_other_type(reply: Value) -> bool {
    decode::<String>(reply).is_ok_and(|kind| kind != "string" && kind != "none")
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

/// A release's reply, decoded: [`RELEASE`](super::scripts::RELEASE)'s `{deleted, woke}`,
/// or the one-key scripts' integer ([`UNLOCK`](super::scripts::UNLOCK) and `DELIFEQ`: 0 or
/// 1 deleted; [`RELEASE_ONE`](super::scripts::RELEASE_ONE): 2 deleted and woke a client,
/// 3 woke a client where the key was absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Release {
    /// Whether it deleted a key holding our token.
    pub(crate) deleted: bool,
    /// Whether it woke a waiting client.
    pub(crate) woke: bool,
}

/// Decodes a release's reply (see [`Release`]).
pub(crate) fn release_reply(reply: Value) -> Result<Release, NodeOutcome> {
    let (deleted, woke) = match reply {
        Value::Int(n @ 0..=1) => (n, 0),
        Value::Int(2) => (1, 1),
        Value::Int(3) => (0, 1),
        Value::Int(n) => return Err(NodeOutcome::Failed(format!("unexpected release reply {n}"))),
        other => decode::<(i64, i64)>(other)?,
    };
    Ok(Release {
        deleted: deleted > 0,
        woke: woke == 1,
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn release_replies_of_every_shape() {
        let r = |deleted, woke| Ok(Release { deleted, woke });
        assert_eq!(release_reply(Value::Int(0)), r(false, false));
        assert_eq!(release_reply(Value::Int(1)), r(true, false));
        assert_eq!(release_reply(Value::Int(2)), r(true, true));
        let pair = |a, b| Value::Array(vec![Value::Int(a), Value::Int(b)]);
        assert_eq!(release_reply(pair(0, 0)), r(false, false));
        assert_eq!(release_reply(pair(2, 1)), r(true, true));
        assert_eq!(release_reply(Value::Int(3)), r(false, true));
        assert_eq!(release_reply(pair(0, 1)), r(false, true));
        assert!(release_reply(Value::Int(4)).is_err());
        assert!(release_reply(Value::Int(-1)).is_err());
        assert!(release_reply(Value::Nil).is_err());
    }

    /// Any reply a server (or something posing as one) could send, nested a few levels.
    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Nil),
            Just(Value::Okay),
            any::<i64>().prop_map(Value::Int),
            prop_oneof![
                Just(i64::MIN),
                Just(i64::MAX),
                Just(-1i64),
                Just(0),
                Just(1)
            ]
            .prop_map(Value::Int),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::BulkString),
            "[0-9-]{0,25}".prop_map(|s| Value::BulkString(s.into_bytes())),
            ".{0,16}".prop_map(Value::SimpleString),
            any::<f64>().prop_map(Value::Double),
            any::<bool>().prop_map(Value::Boolean),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::BigNumber),
            ".{0,12}".prop_map(|text| Value::VerbatimString {
                format: redis::VerbatimFormat::Text,
                text,
            }),
            ("[A-Z]{1,10}", proptest::option::of(".{0,12}")).prop_map(|(code, detail)| {
                redis::ServerError::try_from(redis::make_extension_error(code, detail))
                    .map_or(Value::Nil, Value::ServerError)
            }),
        ];
        leaf.prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Set),
                proptest::collection::vec((inner.clone(), inner.clone()), 0..4)
                    .prop_map(Value::Map),
                proptest::collection::vec(inner.clone(), 0..4).prop_map(|data| Value::Push {
                    kind: redis::PushKind::Message,
                    data,
                }),
                (inner.clone(), proptest::collection::vec(inner, 0..3)).prop_map(
                    |(value, attributes)| Value::Attribute {
                        data: Box::new(value),
                        attributes: attributes.into_iter().map(|a| (Value::Nil, a)).collect(),
                    }
                ),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        #[test]
        fn decoders_never_panic(value in any_value()) {
            // Every decoder, and `decode` at every type the client reads.
            let _ = acquire_reply(value.clone());
            let _ = release_reply(value.clone());
            let _ = one_or(value.clone(), NodeOutcome::Acquired, NodeOutcome::NotHeld);
            let _ = decode::<i64>(value.clone());
            let _ = decode::<(i64, i64)>(value.clone());
            let _ = decode::<(String, i64, Option<Vec<u8>>)>(value.clone());
            let _ = decode::<String>(value);
        }
    }

    #[test]
    fn markers_name_a_life_in_either_format() {
        let life = |text| Marker::parse(text).map(|m| m.life);
        assert_eq!(life("abc"), Some("abc".to_owned()));
        assert_eq!(
            life("abc:1"),
            Some("abc".to_owned()),
            "an earlier version's"
        );
        assert_eq!(
            life("abc:0"),
            Some("abc".to_owned()),
            "an earlier version's"
        );
        assert_eq!(life(""), None);
        assert_eq!(life(":1"), None);
    }

    #[test]
    fn well_formed_replies_decode() {
        use Value::{Array, Int, Nil};
        let acquired = acquire_reply(Array(vec![Int(1), Int(7), Nil, Nil])).unwrap();
        assert_eq!((acquired.set, acquired.fence), (true, Some(7)));
        let refused = acquire_reply(Array(vec![Int(0), Nil, Nil, Nil])).unwrap();
        assert_eq!((refused.set, refused.fence), (false, None));
        assert_eq!(
            acquire_reply(Array(vec![Int(-1), Nil, Nil, Nil])),
            Err(NodeOutcome::WrongType)
        );
        let (yes, no) = (NodeOutcome::Extended, NodeOutcome::NotHeld);
        assert_eq!(one_or(Int(1), yes.clone(), no.clone()), yes);
        assert_eq!(one_or(Int(0), yes.clone(), no.clone()), no);
        // Malformed: errors, not panics or defaults.
        assert!(acquire_reply(Int(1)).is_err());
        assert!(
            acquire_reply(Array(vec![Int(1), Int(-1), Nil, Nil])).is_err(),
            "a negative counter"
        );
        assert!(one_or(Nil, yes, no).is_failure());
        assert!(decode::<(i64, i64)>(Array(vec![Int(1)])).is_err());
    }
}
