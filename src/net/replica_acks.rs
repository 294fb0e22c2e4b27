//! Votes confirmed on replicas: with [`ReplicaAcks`] set, a Sentinel or Cluster member's
//! answer to a write that a holder's vote rests on (an acquisition, an extension) counts
//! only once `WAIT` reports that enough of its master's replicas acknowledged it.
//!
//! `WAIT` covers every write the connection made before it, so it is sent on the same
//! connection, after the write's answer: the write has then run, and whatever the other
//! requests sharing the connection wrote in between only adds to what it waits for. While
//! it waits, the server holds back the connection's later requests, at most its timeout,
//! which is therefore kept below the node timeout.

use std::time::Duration;

use redis::Value;
use redis::aio::MultiplexedConnection;

use crate::net::failure::NodeFailure;

/// How many replicas must acknowledge a vote's write, and how long `WAIT` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAcks {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
}

impl ReplicaAcks {
    /// Waits on `conn` until `self.replicas` replicas hold everything it wrote, at most
    /// `self.timeout`.
    ///
    /// # Errors
    ///
    /// [`NodeFailure::Unreplicated`] when fewer acknowledged it in time, or the server
    /// refused `WAIT`; the connection's own failures as [`NodeFailure::Failed`].
    pub(crate) async fn confirm(self, mut conn: MultiplexedConnection) -> Result<(), NodeFailure> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.replicas).arg(wait_ms(self.timeout));
        match conn.send_packed_command(&wait).await {
            Ok(reply) => self.judge(&reply),
            Err(e) => Err(NodeFailure::Failed(e.to_string())),
        }
    }

    /// Whether `WAIT`'s `reply` confirms the write.
    fn judge(self, reply: &Value) -> Result<(), NodeFailure> {
        match reply {
            Value::Int(acked) if *acked >= i64::from(self.replicas) => Ok(()),
            Value::Int(acked) => Err(NodeFailure::Unreplicated(format!(
                "write acknowledged by {acked} of the {} replicas asked for within {:?}",
                self.replicas, self.timeout
            ))),
            Value::ServerError(e) => Err(NodeFailure::Unreplicated(format!(
                "WAIT refused: {}",
                e.details().unwrap_or(e.code())
            ))),
            other => Err(NodeFailure::Unreplicated(format!(
                "WAIT answered {other:?}"
            ))),
        }
    }
}

/// `WAIT`'s timeout in whole milliseconds, never 0 (which would wait for ever).
fn wait_ms(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: ReplicaAcks = ReplicaAcks {
        replicas: 2,
        timeout: Duration::from_millis(20),
    };

    #[test]
    fn enough_acknowledgements_confirm_the_write() {
        assert_eq!(TWO.judge(&Value::Int(2)), Ok(()));
        assert_eq!(TWO.judge(&Value::Int(3)), Ok(()));
    }

    #[test]
    fn too_few_acknowledgements_or_a_refusal_do_not() {
        for reply in [
            Value::Int(1),
            Value::Int(0),
            Value::Nil,
            redis::parse_redis_value(b"-NOPERM no WAIT for this user\r\n").unwrap(),
        ] {
            assert!(
                matches!(TWO.judge(&reply), Err(NodeFailure::Unreplicated(_))),
                "{reply:?}"
            );
        }
    }

    #[test]
    fn the_timeout_is_never_zero() {
        assert_eq!(wait_ms(Duration::from_micros(10)), 1);
        assert_eq!(wait_ms(Duration::from_millis(25)), 25);
    }
}
