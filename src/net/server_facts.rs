//! What a connect learns about the server behind a node (its identity, age, durability,
//! kind and version, native commands) and what this client has since seen of the node's
//! admission in that life: the inputs of restart quarantine and of the fast path.

use std::sync::{Arc, Mutex, MutexGuard};

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Value};
use tokio::time::Instant;

use crate::protocol::native::Capabilities;
use crate::rules::safety::{Persistence, Uptime, process_life};

/// What the ensemble wants to hear when a node's connect learnt its facts: its name and
/// durability (see [`Node::on_facts`](super::node::Node::on_facts)).
pub(crate) type FactsHook = Arc<dyn Fn(&str, Persistence) + Send + Sync>;

/// `uptime_in_seconds` as Redis reports it. Redis computes it from wall-clock readings, so
/// after a backward clock step it is negative: that reads as 0, the lower bound (the age
/// restart quarantine needs is rounded against the node), rather than as no identity at all,
/// which would keep even an intact node from voting for the connection's life.
fn parse_uptime(text: &str) -> Option<Uptime> {
    let seconds: i64 = text.trim().parse().ok()?;
    Some(Uptime::seconds(u64::try_from(seconds).unwrap_or(0)))
}

/// What a connect learnt about the Redis process behind a node, for restart quarantine:
/// its identity and age from `INFO`, its durability, and what this client has
/// since seen of the node's admission in that life.
#[derive(Debug, Clone)]
pub(crate) struct ServerFacts {
    /// The process's life (see [`process_life`]): its `run_id`, one per process, so a new
    /// one means a restart; joined with its replication ID once it was promoted from a
    /// replica. `None` when `INFO` was refused or lacks it: the node then does not vote.
    pub(crate) run_id: Option<Arc<str>>,
    /// `uptime_in_seconds` from the same reply.
    pub(crate) uptime: Option<Uptime>,
    /// When that reply arrived (the uptime was measured before).
    pub(crate) at: Instant,
    /// Whether acknowledged writes survive a restart (`aof_enabled`, `appendfsync`).
    pub(crate) persistence: Persistence,
    /// Why `INFO` gave no identity (say, an ACL user without `+info`).
    pub(crate) refused: Option<String>,
    /// This client saw the node's marker name this life (the node votes without asking
    /// the ensemble). Lets an acquisition send a plain `SET NX PX`, with
    /// [`ServerFacts::record_ms`].
    pub(crate) admitted: bool,
    /// The ensemble record is known to be at least this on the node in this life
    /// (milliseconds; 0: not known).
    pub(crate) record_ms: u64,
    /// The server's kind and version (`"valkey 9.1.2"`), from the same `INFO`.
    pub(crate) server: Option<String>,
    /// Whether the process was promoted from a replica since it started (its life then
    /// names its replication ID).
    pub(crate) promoted: bool,
}

impl ServerFacts {
    /// Reads `INFO` (every default section: `server` and `persistence` are needed) and, only
    /// with AOF on, `CONFIG GET appendfsync`. A refused `INFO` leaves the identity unknown,
    /// a refused `CONFIG` the persistence: both fall to the safe side (see
    /// [`safety::admit`](crate::rules::safety::admit)). Only I/O errors fail.
    pub(super) async fn learn(conn: &mut MultiplexedConnection) -> RedisResult<ServerFacts> {
        let text = match redis::cmd("INFO").query_async::<String>(conn).await {
            Ok(text) => text,
            Err(e) if e.is_io_error() || e.is_connection_dropped() => return Err(e),
            Err(e) => {
                return Ok(ServerFacts {
                    run_id: None,
                    uptime: None,
                    at: Instant::now(),
                    persistence: Persistence::Unknown,
                    refused: Some(format!("info refused: {e}")),
                    admitted: false,
                    record_ms: 0,
                    server: None,
                    promoted: false,
                });
            }
        };
        let at = Instant::now();
        let info = crate::protocol::info::parse(&text);
        let persistence = match info.aof_enabled() {
            Some(false) => Persistence::Volatile,
            None => Persistence::Unknown,
            Some(true) => match redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendfsync")
                .query_async::<Vec<String>>(conn)
                .await
            {
                Ok(pair) if pair.get(1).is_some_and(|v| v == "always") => Persistence::AofAlways,
                Ok(pair) if pair.len() == 2 => Persistence::Volatile,
                Ok(_) => Persistence::Unknown,
                Err(e) if e.is_io_error() || e.is_connection_dropped() => return Err(e),
                Err(_) => Persistence::Unknown,
            },
        };
        let promoted = info.promoted() == Some(true);
        let process = process_life(
            info.run_id(),
            info.get("uptime_in_seconds").and_then(parse_uptime),
            persistence,
            promoted,
            info.master_replid(),
        );
        let (run_id, uptime) = (process.life.map(Arc::from), process.uptime);
        let persistence = process.persistence;
        let refused = (run_id.is_none() || uptime.is_none())
            .then(|| "info gave no run_id or uptime_in_seconds".to_owned());
        let server = info.server().map(|s| format!("{} {}", s.kind, s.version));
        Ok(ServerFacts {
            run_id,
            uptime,
            at,
            persistence,
            refused,
            admitted: false,
            record_ms: 0,
            server,
            promoted,
        })
    }
}

/// The life (`run_id`, or `run_id~replid` once promoted, see [`process_life`]) that an
/// `INFO` reply's text names; `None` without a `run_id`.
pub(crate) fn life_in(info_text: &str) -> Option<String> {
    let info = crate::protocol::info::parse(info_text);
    let promoted = info.promoted() == Some(true);
    let process = process_life(
        info.run_id(),
        None,
        Persistence::Unknown,
        promoted,
        info.master_replid(),
    );
    process.life
}

/// What this client knows of the server behind a node's current connection: the facts its
/// last connect learnt (none before the first), and what the client has since seen of the
/// node's admission and record in that life.
#[derive(Debug, Default)]
pub(crate) struct KnownServer(Mutex<Option<ServerFacts>>);

impl KnownServer {
    fn lock(&self) -> MutexGuard<'_, Option<ServerFacts>> {
        // Only ever replaced or updated whole: a poisoned lock still holds valid facts.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the facts a new connect learnt. When it reached the same process again (a
    /// reconnect), what this client saw of its admission and record still holds. Returns
    /// whether the node restarted (a new `run_id` after a known one).
    pub(super) fn replace(&self, facts: ServerFacts) -> bool {
        let mut known = self.lock();
        let old = known.as_ref().and_then(|f| f.run_id.clone());
        let restarted = matches!((&old, &facts.run_id), (Some(old), Some(new)) if old != new);
        let same_life = known
            .as_ref()
            .filter(|f| f.run_id.is_some() && f.run_id == facts.run_id);
        let facts = match same_life {
            // The same life again (a reconnect, a redirect): what this client knew of it
            // stays, its age included (the earlier start, when a promotion record gives one),
            // so a quarantine counted from when a promoted life was first learnt does not
            // start over at every reconnect.
            Some(old) => ServerFacts {
                admitted: old.admitted,
                record_ms: old.record_ms,
                at: old.at.min(facts.at),
                uptime: old.uptime,
                ..facts
            },
            None => ServerFacts {
                admitted: false,
                record_ms: 0,
                ..facts
            },
        };
        *known = Some(facts);
        restarted
    }

    /// The server's kind and version as last learnt (`"valkey 9.1.2"`); `None` before the
    /// first connect or when `INFO` was refused.
    pub(crate) fn server(&self) -> Option<String> {
        self.lock().as_ref().and_then(|f| f.server.clone())
    }

    /// The facts learnt on the last connect; `None` before the first one.
    pub(crate) fn facts(&self) -> Option<ServerFacts> {
        self.lock().clone()
    }

    /// Runs `read` on the facts learnt on the last connect (`None` before the first one),
    /// without copying them.
    pub(crate) fn with_facts<R>(&self, read: impl FnOnce(Option<&ServerFacts>) -> R) -> R {
        read(self.lock().as_ref())
    }

    /// The node's `run_id`, when known.
    pub(crate) fn run_id(&self) -> Option<Arc<str>> {
        self.lock().as_ref().and_then(|f| f.run_id.clone())
    }

    /// The life (`run_id`) in which this node may take a plain `SET NX PX` for `ttl_ms`: its
    /// ensemble record is known to cover `ttl_ms` in its current life and, when `admitted`
    /// is asked for, it was seen admitted in that life.
    pub(crate) fn fast_path(&self, ttl_ms: u64, admitted: bool) -> Option<Arc<str>> {
        let known = self.lock();
        let facts = known.as_ref()?;
        if facts.record_ms < ttl_ms || (admitted && !facts.admitted) {
            return None;
        }
        facts.run_id.clone()
    }

    /// The node's current life, when this client saw it admitted in it (see
    /// [`is_admitted`](Self::is_admitted)): where a held lock the node lost may be written
    /// back.
    pub(crate) fn admitted_life(&self) -> Option<Arc<str>> {
        // Any record covers a TTL of 0: only the admission is asked for.
        self.fast_path(0, true)
    }

    /// Whether this client knows the node admitted in its current life (its marker named
    /// that life in an answer since the last connect learnt it).
    pub(crate) fn is_admitted(&self) -> bool {
        self.lock().as_ref().is_some_and(|f| f.admitted)
    }

    /// Records what this client saw in the node's life `life` (ignored when that is no
    /// longer its current life): its ensemble record is at least `record_ms`, and, when
    /// `admitted`, its marker names that life.
    pub(crate) fn seen(&self, life: &str, admitted: bool, record_ms: u64) {
        let mut known = self.lock();
        if let Some(facts) = known.as_mut()
            && facts.run_id.as_deref() == Some(life)
        {
            facts.record_ms = facts.record_ms.max(record_ms);
            facts.admitted |= admitted;
        }
    }
}

/// Asks which native commands the server has (see [`Capabilities`]), both probes in one
/// round trip; a refused probe means "not there". Only I/O errors fail.
pub(super) async fn learn_capabilities(
    conn: &mut MultiplexedConnection,
) -> RedisResult<Capabilities> {
    let [info, docs] = Capabilities::probes();
    let (mut c1, mut c2) = (conn.clone(), conn.clone());
    let (info, docs) = futures::join!(
        info.query_async::<Value>(&mut c1),
        docs.query_async::<Value>(&mut c2)
    );
    for reply in [&info, &docs] {
        if let Err(e) = reply
            && (e.is_io_error() || e.is_connection_dropped())
        {
            return Err(e.clone());
        }
    }
    Ok(Capabilities::from_probes(
        info.as_ref().ok(),
        docs.as_ref().ok(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_uptime_reads_as_zero_not_as_no_identity() {
        assert_eq!(parse_uptime("42"), Some(Uptime::seconds(42)));
        assert_eq!(parse_uptime("-3"), Some(Uptime::seconds(0)));
        assert_eq!(parse_uptime("x"), None);
    }
}
