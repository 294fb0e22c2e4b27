//! Native commands that stand in for a script on the servers that have them, and how a node
//! tells whether it has them.
//!
//! Valkey 9.0 added `DELIFEQ key value` (delete the key if its value equals `value`; reply
//! 1 or 0) and Valkey 8.1 `SET key value IFEQ comparison` (set only if the current value
//! equals `comparison`; reply `OK`, or nil when the key is absent or holds another value).
//! Both fail with `WRONGTYPE` on a key of another type, as the scripts' `GET` does. They
//! replace a script only where they have exactly its effect:
//!
//! - [`del_if_eq`] for [`UNLOCK`](super::scripts::UNLOCK), the release of **one** lock key
//!   that wakes nobody and requeues nobody: the script only compares and deletes. A release
//!   that wakes waiters (notifications on) or requeues this client, and every multi-key
//!   lock, keep their scripts.
//! - [`set_if_eq`] for [`EXTEND`](super::scripts::EXTEND) on **one** lock key: the script
//!   compares and resets the key's expiry and touches nothing else (not the fencing counter,
//!   not the waiting list); `SET key token IFEQ token PX ttl` writes the same value back
//!   with the same expiry. Several keys keep the script, which is all or nothing.
//!
//! Each native command carries its reply's translation to the script's reply shape, so the
//! decoders in [`reply`](super::reply) see one shape whichever path a node took.
//!
//! What a node has is asked on every (re)connect, never assumed from a version number:
//! `COMMAND INFO DELIFEQ` (an entry, not nil) and `COMMAND DOCS SET` (an argument whose
//! token is `IFEQ`). A server that refuses either (an older release without `COMMAND DOCS`,
//! an ACL without `COMMAND`) has neither capability and gets the scripts.

use redis::{Cmd, Value};

/// The native commands a node has, learnt at connect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Capabilities {
    /// `DELIFEQ key value`.
    pub(crate) delifeq: bool,
    /// `SET key value IFEQ comparison`.
    pub(crate) set_ifeq: bool,
}

/// The capability a native command needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// `DELIFEQ`.
    DelIfEq,
    /// `SET ... IFEQ`.
    SetIfEq,
}

impl Capabilities {
    /// Whether a node with these capabilities can run a command that `needs` one.
    pub(crate) fn has(self, needs: Needs) -> bool {
        match needs {
            Needs::DelIfEq => self.delifeq,
            Needs::SetIfEq => self.set_ifeq,
        }
    }

    /// The two probes, sent together: `COMMAND INFO DELIFEQ` and `COMMAND DOCS SET`.
    pub(crate) fn probes() -> [Cmd; 2] {
        let mut info = redis::cmd("COMMAND");
        info.arg("INFO").arg("DELIFEQ");
        let mut docs = redis::cmd("COMMAND");
        docs.arg("DOCS").arg("SET");
        [info, docs]
    }

    /// Reads the probes' replies (`None`: refused or failed).
    pub(crate) fn from_probes(info: Option<&Value>, docs: Option<&Value>) -> Capabilities {
        Capabilities {
            delifeq: info.is_some_and(lists_a_command),
            set_ifeq: docs.is_some_and(|d| has_token(d, "IFEQ")),
        }
    }
}

/// `COMMAND INFO name` answers an array with one entry per name asked: nil for an unknown
/// command, else the command's description (itself an array).
fn lists_a_command(reply: &Value) -> bool {
    match reply {
        Value::Array(entries) => matches!(entries.first(), Some(Value::Array(e)) if !e.is_empty()),
        _ => false,
    }
}

/// Whether the `COMMAND DOCS` reply describes an argument with this `token`: a `token`
/// field followed by that value, at any depth (arguments nest in `oneof` blocks).
fn has_token(reply: &Value, token: &str) -> bool {
    let text = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_owned),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    match reply {
        Value::Array(items) | Value::Set(items) => {
            items.windows(2).any(|w| {
                text(&w[0]).as_deref() == Some("token")
                    && text(&w[1]).is_some_and(|t| t.eq_ignore_ascii_case(token))
            }) || items.iter().any(|v| has_token(v, token))
        }
        Value::Map(pairs) => pairs.iter().any(|(k, v)| {
            (text(k).as_deref() == Some("token")
                && text(v).is_some_and(|t| t.eq_ignore_ascii_case(token)))
                || has_token(v, token)
        }),
        _ => false,
    }
}

/// A native command standing in for a script on nodes that have [`Needs`].
#[derive(Debug)]
pub(crate) struct Native {
    pub(crate) needs: Needs,
    pub(crate) cmd: Cmd,
    /// Turns the command's (non-error) reply into the script's reply shape.
    shape: fn(Value) -> Value,
}

impl Native {
    /// The command's reply in the shape of the script it replaces.
    pub(crate) fn reply(&self, reply: Value) -> Value {
        (self.shape)(reply)
    }
}

/// `DELIFEQ key token`, standing in for [`UNLOCK`](super::scripts::UNLOCK), the release of
/// one key that wakes and requeues nobody. Its reply, 1 or 0 keys deleted, is the script's.
pub(crate) fn del_if_eq(key: &str, token: &str) -> Native {
    let mut cmd = redis::cmd("DELIFEQ");
    cmd.arg(key).arg(token);
    Native {
        needs: Needs::DelIfEq,
        cmd,
        shape: |reply| reply,
    }
}

/// `SET key token IFEQ token PX ttl_ms`, standing in for [`EXTEND`](super::scripts::EXTEND)
/// on one key: the value stays the token, the expiry becomes `ttl_ms` from now, as the
/// script's `PEXPIRE`. Its reply, `OK` or nil, becomes the script's 1 or 0.
pub(crate) fn set_if_eq(key: &str, token: &str, ttl_ms: u64) -> Native {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key)
        .arg(token)
        .arg("IFEQ")
        .arg(token)
        .arg("PX")
        .arg(ttl_ms);
    Native {
        needs: Needs::SetIfEq,
        cmd,
        shape: |reply| match reply {
            Value::Okay => Value::Int(1),
            Value::SimpleString(s) if s == "OK" => Value::Int(1),
            Value::Nil => Value::Int(0),
            other => other,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn capabilities_from_probe_replies() {
        // Valkey 9.1: an entry for DELIFEQ; SET's docs list IFEQ inside a `oneof` block.
        let entry = Value::Array(vec![Value::Array(vec![bulk("delifeq"), Value::Int(3)])]);
        let ifeq = Value::Array(vec![
            bulk("name"),
            bulk("comparison-value"),
            bulk("token"),
            bulk("IFEQ"),
        ]);
        let docs = Value::Array(vec![
            bulk("set"),
            Value::Array(vec![
                bulk("arguments"),
                Value::Array(vec![Value::Array(vec![
                    bulk("name"),
                    bulk("condition"),
                    bulk("arguments"),
                    Value::Array(vec![ifeq]),
                ])]),
            ]),
        ]);
        let both = Capabilities::from_probes(Some(&entry), Some(&docs));
        assert_eq!(
            both,
            Capabilities {
                delifeq: true,
                set_ifeq: true
            }
        );
        assert!(both.has(Needs::DelIfEq) && both.has(Needs::SetIfEq));

        // Redis 7.0: nil for the unknown command, SET's docs without IFEQ (only NX, XX).
        let unknown = Value::Array(vec![Value::Nil]);
        let old_docs = Value::Array(vec![
            bulk("set"),
            Value::Array(vec![bulk("token"), bulk("NX"), bulk("token"), bulk("XX")]),
        ]);
        let none = Capabilities::from_probes(Some(&unknown), Some(&old_docs));
        assert_eq!(none, Capabilities::default());
        assert!(!none.has(Needs::DelIfEq) && !none.has(Needs::SetIfEq));
        // Redis 6.2 (no COMMAND DOCS) or a refusal: nothing.
        assert_eq!(
            Capabilities::from_probes(Some(&unknown), None),
            Capabilities::default()
        );
        assert_eq!(
            Capabilities::from_probes(None, None),
            Capabilities::default()
        );
        // RESP3 maps are read too; a `token` value elsewhere is not an argument's token.
        let map = Value::Map(vec![(bulk("token"), bulk("ifeq"))]);
        assert!(Capabilities::from_probes(None, Some(&map)).set_ifeq);
        let other = Value::Array(vec![bulk("summary"), bulk("IFEQ")]);
        assert!(!Capabilities::from_probes(None, Some(&other)).set_ifeq);
    }

    #[test]
    fn native_replies_take_the_scripts_shape() {
        let del = del_if_eq("k", "t");
        assert_eq!(del.needs, Needs::DelIfEq);
        assert_eq!(del.reply(Value::Int(1)), Value::Int(1));
        assert_eq!(del.reply(Value::Int(0)), Value::Int(0));
        let set = set_if_eq("k", "t", 10_000);
        assert_eq!(set.needs, Needs::SetIfEq);
        assert_eq!(set.reply(Value::Okay), Value::Int(1));
        assert_eq!(set.reply(Value::Nil), Value::Int(0));
        assert_eq!(
            set.cmd.args_iter().count(),
            7,
            "SET k t IFEQ t PX 10000: the command and six arguments"
        );
    }
}
