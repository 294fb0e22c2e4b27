//! The I/O of the readiness gate's lock check: on a fresh connection to each node, `SCAN`
//! for the names under the key prefix (where the lock keys are: their users' resource
//! names), then each name's `TYPE` and `PTTL`, and the value of each string and the
//! entries of each readers set, pipelined; [`spread`](super::spread) judges the copies.

use std::time::Duration;

use redis::{RedisError, Value};

use super::doctor::key_scan::scan_names;
use super::spread::{self, HeldCopy};
use crate::acquire::heal::Readiness;
use crate::ensemble::Ensemble;
use crate::net::node::Node;
use crate::net::probe_connection::ProbeConnection;
use crate::protocol::keys;

/// Bound on connecting to one node, and on each request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on the whole scan of one node (nodes are scanned concurrently).
const SCAN_DEADLINE: Duration = Duration::from_secs(5);
/// Names read per pipeline.
const PIPELINE_NAMES: usize = 500;

/// What one node holds, and whether the scan stopped at its bound.
struct NodeCopies {
    copies: Vec<HeldCopy>,
    partial: bool,
}

/// Fills `readiness`'s lock check: the live locks at risk, or why they could not be
/// checked. Nothing on a Cluster member, whose nodes' copies are not written back.
pub(crate) async fn check_spread(ensemble: &Ensemble, readiness: &mut Readiness) {
    if ensemble.config.slotted {
        readiness.locks_unchecked = Some(
            "locks are not checked on Cluster members (a restarted shard's copies are not \
             written back)"
                .to_owned(),
        );
        return;
    }
    let prefix = &ensemble.config.key_prefix;
    let scans = (ensemble.nodes.iter()).map(|node| scan_within_deadline(node, prefix));
    let scanned = futures::future::join_all(scans).await;
    let mut nodes = Vec::with_capacity(scanned.len());
    let mut partial = Vec::new();
    for (node, scan) in ensemble.nodes.iter().zip(scanned) {
        match scan {
            Ok(copies) => {
                if copies.partial {
                    partial.push(node.name());
                }
                nodes.push(copies.copies);
            }
            Err(why) => {
                readiness.locks_unchecked =
                    Some(format!("locks not checked: {}: {why}", node.name()));
                return;
            }
        }
    }
    if !partial.is_empty() {
        readiness.locks_unchecked = Some(format!(
            "locks checked in part: more keys than one check reads on {}",
            partial.join(", ")
        ));
    }
    readiness.locks_at_risk = spread::locks_at_risk(&nodes, ensemble.quorum);
}

/// [`scan_node`] within [`SCAN_DEADLINE`]; the error says why not.
async fn scan_within_deadline(node: &Node, prefix: &str) -> Result<NodeCopies, String> {
    match tokio::time::timeout(SCAN_DEADLINE, scan_node(node, prefix)).await {
        Ok(Ok(copies)) => Ok(copies),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no complete scan within {SCAN_DEADLINE:?}")),
    }
}

/// The copies of locks on `node` under `prefix`.
async fn scan_node(node: &Node, prefix: &str) -> Result<NodeCopies, RedisError> {
    let conn = ProbeConnection::open(node, REQUEST_TIMEOUT, REQUEST_TIMEOUT).await?;
    let (names, partial) = scan_names(&conn, &keys::prefix_pattern(prefix)).await?;
    let mut copies = Vec::new();
    for chunk in names.chunks(PIPELINE_NAMES) {
        copies.extend(read_copies(&conn, prefix, chunk).await?);
    }
    Ok(NodeCopies { copies, partial })
}

/// The copies among `names`: `TYPE` and `PTTL` of each (and the node's `TIME`), then the
/// value of each string and the entries of each readers set.
async fn read_copies(
    conn: &ProbeConnection,
    prefix: &str,
    names: &[String],
) -> Result<Vec<HeldCopy>, RedisError> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    for name in names {
        pipe.cmd("TYPE").arg(name).cmd("PTTL").arg(name);
    }
    let replies: Vec<Value> = conn.clone().query_pipeline(&pipe).await?;
    let Some((time, typed)) = replies.split_first() else {
        return Ok(Vec::new());
    };
    let (seconds, micros): (i64, i64) = redis::from_redis_value_ref(time)?;
    let now_ms = seconds.saturating_mul(1000).saturating_add(micros / 1000);
    let mut wanted = Vec::new();
    let mut pipe = redis::pipe();
    for (name, reply) in names.iter().zip(typed.chunks(2)) {
        let [value_type, pttl] = reply else { break };
        let value_type: String = redis::from_redis_value_ref(value_type)?;
        let pttl: i64 = redis::from_redis_value_ref(pttl)?;
        if value_type == "string" {
            pipe.cmd("GET").arg(name);
        } else if value_type == "zset" && spread::is_readers_set(prefix, name) {
            pipe.cmd("ZRANGE")
                .arg(name)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES");
        } else {
            continue;
        }
        wanted.push((name, pttl));
    }
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let values: Vec<Value> = conn.clone().query_pipeline(&pipe).await?;
    let mut copies = Vec::new();
    for ((name, pttl), value) in wanted.into_iter().zip(&values) {
        match value {
            Value::Array(_) | Value::Map(_) => {
                let entries: Vec<(String, f64)> = redis::from_redis_value_ref(value)?;
                let entries: Vec<(String, i64)> =
                    (entries.into_iter()).map(|(t, s)| (t, s as i64)).collect();
                copies.extend(spread::reader_copies(prefix, name, now_ms, &entries));
            }
            Value::Nil => {}
            value => {
                // Another client's binary data is no holder's value.
                let bytes: Vec<u8> = redis::from_redis_value_ref(value)?;
                if let Ok(text) = std::str::from_utf8(&bytes) {
                    copies.extend(spread::string_copy(prefix, name, text, pttl));
                }
            }
        }
    }
    Ok(copies)
}
