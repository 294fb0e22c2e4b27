//! The I/O of the key census: `SCAN` for the names under `<prefix>quorum-lock:` on the
//! probe's connection, bounded, then each key's `PTTL` and `TYPE`, and a second read of
//! the permit count records and readers sets (`GET`, `ZCARD`), pipelined; the answers fill
//! a [`KeyScan`] for the pure findings of `keys`.

use redis::{RedisError, Value};

use super::keys::{FollowUp, KeyScan, ScannedKey, follow_up};
use crate::net::probe_connection::ProbeConnection;
use crate::protocol::keys;

/// Keys the server examines per `SCAN` call (its `COUNT` hint).
const SCAN_COUNT: usize = 1000;
/// Most `SCAN` calls per node: with [`SCAN_COUNT`] each, about 20 000 keys examined, so
/// that a large keyspace costs the node a bounded amount of work.
const SCAN_CALLS: usize = 20;
/// Most keys read per node; a namespace holding more is counted in part.
const MAX_KEYS: usize = 20_000;
/// Keys per pipeline of reads: one round trip each, with answers of a few kilobytes.
const PIPELINE_KEYS: usize = 500;

/// The keys under the namespace of `prefix` on the node of `conn`, read within the bounds
/// above. An error when any request was refused (an ACL without `SCAN`, a renamed command)
/// or not answered: the census is then unknown.
pub(super) async fn scan_keys(conn: &ProbeConnection, prefix: &str) -> Result<KeyScan, RedisError> {
    let (names, partial) = scan_names(conn, &keys::namespace_pattern(prefix)).await?;
    let mut keys = Vec::with_capacity(names.len());
    for chunk in names.chunks(PIPELINE_KEYS) {
        let mut read = read_keys(conn, chunk).await?;
        read_follow_ups(conn, prefix, &mut read).await?;
        keys.extend(read);
    }
    Ok(KeyScan { keys, partial })
}

/// The names matching `pattern` that `SCAN` finds, sorted and each once (a scan may return
/// a name twice), and whether it stopped at its bound. Names that are not UTF-8 are none of
/// the crate's.
pub(crate) async fn scan_names(
    conn: &ProbeConnection,
    pattern: &str,
) -> Result<(Vec<String>, bool), RedisError> {
    let mut names = Vec::new();
    let mut cursor = 0_u64;
    let mut partial = true;
    for _ in 0..SCAN_CALLS {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(SCAN_COUNT);
        let (next, found): (u64, Vec<Vec<u8>>) = conn.clone().query(&scan).await?;
        names.extend(found.into_iter().filter_map(|n| String::from_utf8(n).ok()));
        cursor = next;
        if cursor == 0 {
            partial = false;
            break;
        }
        if names.len() >= MAX_KEYS {
            break;
        }
    }
    names.sort_unstable();
    names.dedup();
    partial |= names.len() > MAX_KEYS;
    names.truncate(MAX_KEYS);
    Ok((names, partial))
}

/// `PTTL` and `TYPE` of each of `names`, in one pipeline.
async fn read_keys(
    conn: &ProbeConnection,
    names: &[String],
) -> Result<Vec<ScannedKey>, RedisError> {
    let mut pipe = redis::pipe();
    for name in names {
        pipe.cmd("PTTL").arg(name).cmd("TYPE").arg(name);
    }
    let replies: Vec<Value> = conn.clone().query_pipeline(&pipe).await?;
    let mut keys = Vec::with_capacity(names.len());
    for (name, reply) in names.iter().zip(replies.chunks(2)) {
        let [pttl, value_type] = reply else {
            break;
        };
        keys.push(ScannedKey {
            name: name.clone(),
            pttl_ms: redis::from_redis_value_ref(pttl)?,
            value_type: redis::from_redis_value_ref(value_type)?,
            count: None,
            entries: None,
            marker: None,
        });
    }
    Ok(keys)
}

/// The second reads `keys` deserve ([`follow_up`]), in one pipeline.
async fn read_follow_ups(
    conn: &ProbeConnection,
    prefix: &str,
    keys: &mut [ScannedKey],
) -> Result<(), RedisError> {
    let wanted: Vec<(usize, FollowUp)> = (keys.iter().enumerate())
        .filter_map(|(i, key)| Some((i, follow_up(prefix, &key.name, &key.value_type)?)))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let mut pipe = redis::pipe();
    for &(i, what) in &wanted {
        let command = match what {
            FollowUp::Count | FollowUp::Marker => "GET",
            FollowUp::Entries => "ZCARD",
        };
        pipe.cmd(command).arg(&keys[i].name);
    }
    let replies: Vec<Value> = conn.clone().query_pipeline(&pipe).await?;
    for (&(i, what), reply) in wanted.iter().zip(&replies) {
        match what {
            FollowUp::Count => keys[i].count = redis::from_redis_value_ref(reply)?,
            FollowUp::Entries => keys[i].entries = Some(redis::from_redis_value_ref(reply)?),
            FollowUp::Marker => keys[i].marker = redis::from_redis_value_ref(reply)?,
        }
    }
    Ok(())
}
