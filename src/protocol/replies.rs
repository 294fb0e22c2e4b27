//! The decoders of every reply the client reads from a lock node: each turns a raw
//! [`Value`] into what the caller needs, or into the [`NodeOutcome`] that says why it is not
//! one. Pure, and total: any reply, however malformed (a wrong type, nil, a huge integer, an
//! odd or nested array), gives a value or an error, never a panic (the property test below
//! feeds them arbitrary replies).

use redis::{FromRedisValue, Value};

use crate::report::NodeOutcome;

/// Converts a reply to `T`, or says why it is not one.
pub(crate) fn decode<T: FromRedisValue>(value: Value) -> Result<T, NodeOutcome> {
    redis::from_redis_value(value).map_err(|e| NodeOutcome::Failed(e.to_string()))
}

/// An acquire request's reply: whether it set the keys, and the fencing counter read
/// (with fencing on). `SET NX PX` answers `OK` or nil; the acquire script answers
/// `{acquired, fence}` (see [`ACQUIRE`](super::scripts::ACQUIRE)).
pub(crate) fn acquire(reply: Value) -> Result<(bool, Option<u64>), NodeOutcome> {
    match reply {
        Value::Okay => Ok((true, None)),
        Value::Nil => Ok((false, None)),
        reply => {
            // Read as a signed number: the driver turns -1 into `u64::MAX` when asked for
            // a `u64`, and a counter at the top would make every later token equal.
            let (set, fence) = decode::<(i64, Option<i64>)>(reply)?;
            let fence = fence
                .map(u64::try_from)
                .transpose()
                .map_err(|_| NodeOutcome::Failed(format!("negative fencing counter {fence:?}")))?;
            Ok((set == 1, fence))
        }
    }
}

/// The release script's reply `{deleted, woke}`: how many keys it deleted, and whether it
/// woke a waiting client (see [`RELEASE`](super::scripts::RELEASE)).
pub(crate) fn release(reply: Value) -> Result<(i64, bool), NodeOutcome> {
    decode::<(i64, i64)>(reply).map(|(deleted, woke)| (deleted, woke == 1))
}

/// A reply that is a number whose value 1 means yes: the extend, gate and fence scripts.
pub(crate) fn yes(reply: Value) -> Result<bool, NodeOutcome> {
    decode::<i64>(reply).map(|n| n == 1)
}

/// A count (`DEL`).
pub(crate) fn count(reply: Value) -> Result<i64, NodeOutcome> {
    decode::<i64>(reply)
}

/// The inspect script's reply `{type, pttl, value}` (see
/// [`INSPECT`](super::scripts::INSPECT)).
pub(crate) fn inspect(reply: Value) -> Result<(String, i64, Option<Vec<u8>>), NodeOutcome> {
    decode::<(String, i64, Option<Vec<u8>>)>(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
            let _ = acquire(value.clone());
            let _ = release(value.clone());
            let _ = yes(value.clone());
            let _ = count(value.clone());
            let _ = inspect(value);
        }
    }

    #[test]
    fn well_formed_replies_decode() {
        use Value::{Array, BulkString, Int, Nil, Okay};
        assert_eq!(acquire(Okay), Ok((true, None)));
        assert_eq!(acquire(Nil), Ok((false, None)));
        assert_eq!(acquire(Array(vec![Int(1), Int(7)])), Ok((true, Some(7))));
        assert_eq!(acquire(Array(vec![Int(0), Nil])), Ok((false, None)));
        assert_eq!(release(Array(vec![Int(2), Int(1)])), Ok((2, true)));
        assert_eq!(yes(Int(1)), Ok(true));
        assert_eq!(yes(Int(0)), Ok(false));
        assert_eq!(count(Int(3)), Ok(3));
        assert_eq!(
            inspect(Array(vec![
                BulkString(b"string".to_vec()),
                Int(900),
                BulkString(b"t".to_vec())
            ])),
            Ok(("string".to_owned(), 900, Some(b"t".to_vec())))
        );
        // Malformed: errors, not panics or defaults.
        assert!(acquire(Int(1)).is_err());
        assert!(
            acquire(Array(vec![Int(1), Int(-1)])).is_err(),
            "a negative counter"
        );
        assert!(release(Array(vec![Int(1)])).is_err());
        assert!(yes(Nil).is_err());
        assert!(inspect(Array(vec![Nil, Nil, Nil, Nil])).is_err());
    }
}
