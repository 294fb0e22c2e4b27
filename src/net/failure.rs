//! Why a request to a node produced no usable answer: the classification of the driver's
//! errors into the cases the rounds and the reports tell apart.

use redis::RedisError;

use crate::metrics;
use crate::report::NodeOutcome;

/// Why a request to a node produced no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeFailure {
    /// The key holds another type.
    WrongType,
    /// No answer in time.
    TimedOut,
    /// Connect or request error.
    Failed(String),
    /// Never sent: the token's release closed the request's gate first (see
    /// [`SendGate`](super::send_gate::SendGate)).
    Withdrawn,
    /// The server's ACL refused the command, a key or a channel; the message is the
    /// server's.
    Denied(String),
    /// The write was answered but too few replicas acknowledged it in time (see
    /// [`ReplicaAcks`](super::replica_acks::ReplicaAcks)): its vote does not count.
    Unreplicated(String),
}

impl NodeFailure {
    /// The `kind` label of the failure metric.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            NodeFailure::WrongType => "wrong_type",
            NodeFailure::TimedOut => "timeout",
            NodeFailure::Failed(_) => "error",
            NodeFailure::Withdrawn => "withdrawn",
            NodeFailure::Denied(_) => "permission",
            NodeFailure::Unreplicated(_) => "unreplicated",
        }
    }
}

impl From<NodeFailure> for NodeOutcome {
    fn from(f: NodeFailure) -> Self {
        match f {
            NodeFailure::WrongType => NodeOutcome::WrongType,
            NodeFailure::TimedOut => NodeOutcome::TimedOut,
            NodeFailure::Failed(m) => NodeOutcome::Failed(m),
            NodeFailure::Withdrawn => {
                NodeOutcome::Failed("not sent: the lock was released first".to_owned())
            }
            NodeFailure::Denied(m) => NodeOutcome::PermissionDenied(m),
            NodeFailure::Unreplicated(m) => NodeOutcome::Failed(format!("not replicated: {m}")),
        }
    }
}

/// The outcome of a failed request to the node named `node`, counted in the failure
/// metric (a request withdrawn before it was sent is no failure of the node).
pub(crate) fn failed(node: &str, failure: NodeFailure) -> NodeOutcome {
    if failure != NodeFailure::Withdrawn {
        metrics::node_failure(node, failure.kind());
    }
    failure.into()
}

/// How to read a failed request's error: the failure, and whether the connection it came
/// on is dead (an I/O error, a dropped or unrecoverable connection) and must be discarded.
/// A timeout keeps the connection (see [`Node::discard`](super::node::Node)).
pub(crate) fn classify(e: &RedisError) -> (NodeFailure, bool) {
    if e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE") {
        return (NodeFailure::WrongType, false);
    }
    if is_permission_error(e.code(), &e.to_string()) {
        return (NodeFailure::Denied(e.to_string()), false);
    }
    if e.is_timeout() {
        // A timeout reported by the driver (its response timeout is off on our own
        // connections): the connection stays.
        return (NodeFailure::TimedOut, false);
    }
    let dead = e.is_io_error()
        || e.is_connection_dropped()
        || e.is_unrecoverable_error()
        || is_demoted(e.code(), &e.to_string());
    (NodeFailure::Failed(e.to_string()), dead)
}

/// Whether a server error says the server is (now) a replica: `READONLY`, also from inside
/// a script. The connection then leads to a server demoted behind the node's address (a
/// failover moved the address, or demoted the server in place): it is discarded, so the
/// next connect learns who answers there (see `ServerFacts::learn`).
fn is_demoted(code: Option<&str>, message: &str) -> bool {
    code == Some("READONLY") || message.contains("READONLY")
}

/// Whether a server error (its code and message) is an ACL refusal: `NOPERM` for a command,
/// key or channel the user may not use, or, for a command a script ran, the plain `ERR`
/// with which the servers report it (Redis 6.2 and 7.0: "The user executing the script
/// can't ...", Redis 7.2 and later, Valkey: "ACL failure in script").
fn is_permission_error(code: Option<&str>, message: &str) -> bool {
    code == Some("NOPERM")
        || message.starts_with("NOPERM")
        || message.contains("The user executing the script can't")
        || message.contains("ACL failure in script")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replica_s_refusal_means_the_server_was_demoted() {
        assert!(is_demoted(
            Some("READONLY"),
            "READONLY You can't write against a read only replica."
        ));
        assert!(is_demoted(
            Some("ERR"),
            "ERR Error running script (call to f_1): @user_script:9: READONLY You can't \
             write against a read only replica."
        ));
        assert!(!is_demoted(Some("ERR"), "ERR syntax error"));
        assert!(!is_demoted(None, "broken pipe"));
    }

    #[test]
    fn acl_refusals_are_permission_errors() {
        // The servers' own words (Redis 6.2, 7.0, 7.4, Valkey 9.1).
        let denied = [
            (
                Some("NOPERM"),
                "NOPERM this user has no permissions to run the 'lpop' command",
            ),
            (Some("NOPERM"), "NOPERM No permissions to access a key"),
            (
                Some("ERR"),
                "ERR Error running script (call to f_9): @user_script:1: @user_script: 1: \
                 The user executing the script can't publish to the channel mentioned in the command",
            ),
            (
                Some("ERR"),
                "ERR The user executing the script can't access at least one of the keys \
                 mentioned in the command arguments script: 3b0b, on @user_script:1.",
            ),
            (
                Some("ERR"),
                "ERR ACL failure in script: No permissions to access a channel script: on @user_script:1.",
            ),
        ];
        for (code, message) in denied {
            assert!(is_permission_error(code, message), "{message}");
        }
        let other = [
            (Some("ERR"), "ERR syntax error"),
            (
                Some("WRONGTYPE"),
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            ),
            (Some("NOSCRIPT"), "NOSCRIPT No matching script"),
            (None, "broken pipe"),
        ];
        for (code, message) in other {
            assert!(!is_permission_error(code, message), "{message}");
        }
    }
}
