//! The I/O of the check: each node is probed on a fresh connection of its own with `INFO`,
//! `CONFIG GET append*`, `CONFIG GET save`, a `GET` of its quarantine marker and ensemble
//! record, a few `TIME` samples and the scan of the crate's keys (`key_scan`); the answers
//! fill a [`NodeInfo`], a [`Ledger`] and a [`KeyScan`].

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::{ErrorKind, FromRedisValue, RedisError};

use super::kept_out::Ledger;
use super::key_scan::scan_keys;
use super::keys::KeyScan;
use super::{ClockOffset, NodeInfo, SentinelAnswer};
use crate::net::node::Node;
use crate::net::probe_connection::ProbeConnection;
use crate::protocol::info::{self, Info};
use crate::protocol::keys::{self, Global};
use crate::protocol::reply::Marker;

/// Bound on connecting to one node (TCP, TLS, authentication) during the check.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on each request to one node during the check.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on the whole probe of one node; nodes are probed concurrently, so this also bounds
/// the whole check.
const PROBE_DEADLINE: Duration = Duration::from_millis(2500);
/// `TIME` samples per node; the one with the shortest round trip is kept.
const TIME_SAMPLES: usize = 3;

/// What the probe of one node learned.
#[derive(Debug)]
pub(super) struct Probed {
    /// The node's facts.
    pub(super) info: NodeInfo,
    /// Its marker and record under the key prefix; `None` when not read.
    pub(super) ledger: Option<Ledger>,
    /// The crate's keys on it; `None` when not read (refused, or no answer in time).
    pub(super) keys: Option<KeyScan>,
}

/// Probes one node within [`PROBE_DEADLINE`]; what was learned before the deadline is kept.
pub(super) async fn probe(node: &Node, prefix: &str) -> Probed {
    let mut probed = Probed {
        info: NodeInfo::new(node.name()),
        ledger: None,
        keys: None,
    };
    if tokio::time::timeout(PROBE_DEADLINE, probe_into(node, prefix, &mut probed))
        .await
        .is_err()
    {
        (probed.info.error)
            .get_or_insert_with(|| format!("no complete answer within {PROBE_DEADLINE:?}"));
    }
    probed
}

async fn probe_into(node: &Node, prefix: &str, probed: &mut Probed) {
    // First, and whether or not the master answers: the sentinels' view is what explains
    // an unreachable member.
    if let Some(survey) = node.sentinel_survey(RESPONSE_TIMEOUT).await {
        probed.info.sentinels = survey
            .answers
            .into_iter()
            .map(|(sentinel, listed, master)| SentinelAnswer {
                sentinel,
                listed,
                master: master.map(|(host, port)| format!("{host}:{port}")),
            })
            .collect();
        probed.info.sentinel_group_size = Some(survey.group_size);
    }
    let Some(conn) = connect(node, &mut probed.info).await else {
        return;
    };
    if ask_info_and_config(&conn, &mut probed.info).await {
        probed.ledger = read_ledger(&conn, prefix).await;
        sample_clock(conn.clone(), &mut probed.info).await;
        // Last, so that a slow scan of a large keyspace delays nothing else: a refused
        // scan leaves the census unknown, as a refused `CONFIG` leaves `appendfsync`.
        probed.keys = scan_keys(&conn, prefix).await.ok();
    }
}

/// The node's quarantine marker and ensemble record, as an acquisition reads them; `None`
/// when either `GET` failed (refused by an ACL, say).
async fn read_ledger(conn: &ProbeConnection, prefix: &str) -> Option<Ledger> {
    let get = |global| {
        let mut cmd = redis::cmd("GET");
        cmd.arg(keys::global(prefix, global, ""));
        query::<Option<String>>(conn, cmd)
    };
    let (marker, record) = futures::join!(get(Global::Marker), get(Global::MaxTtl));
    let marker = marker.ok()?.as_deref().and_then(Marker::parse);
    Some(Ledger {
        marker: marker.map(|m| m.life),
        record_ms: record.ok()?.and_then(|r| r.parse().ok()),
    })
}

/// A fresh connection to `node`, or `None` with the reason in `info.error`.
async fn connect(node: &Node, info: &mut NodeInfo) -> Option<ProbeConnection> {
    let connect = ProbeConnection::open(node, CONNECT_TIMEOUT, RESPONSE_TIMEOUT);
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(conn)) => {
            info.sentinel_master = node.resolved_master();
            Some(conn)
        }
        Ok(Err(e)) => {
            info.error = Some(failure(&e));
            None
        }
        Err(_) => {
            info.error = Some(format!("connect timed out after {CONNECT_TIMEOUT:?}"));
            None
        }
    }
}

/// `INFO` and `CONFIG GET append*`; false when the node gave no answer at all (then the
/// clock is not sampled either).
async fn ask_info_and_config(conn: &ProbeConnection, info: &mut NodeInfo) -> bool {
    // All on the one multiplexed connection: one round trip. Two `CONFIG GET`s: one
    // pattern per call is all that Redis before 7.0 accepts.
    let mut append = redis::cmd("CONFIG");
    append.arg("GET").arg("append*");
    let mut save = redis::cmd("CONFIG");
    save.arg("GET").arg("save");
    let (info_reply, config_reply, save_reply) = futures::join!(
        query::<String>(conn, redis::cmd("INFO")),
        query::<HashMap<String, String>>(conn, append),
        query::<HashMap<String, String>>(conn, save),
    );
    match info_reply {
        Ok(text) => {
            info.reachable = true;
            apply_info(info, &info::parse(&text));
        }
        Err(e) if answered(&e) => {
            info.reachable = true;
            info.error = Some(format!("INFO refused: {e}"));
        }
        Err(e) => {
            info.error = Some(failure(&e));
            return false;
        }
    }
    if let Ok(settings) = config_reply {
        if let Some(on) = settings.get("appendonly").and_then(|v| info::flag(v)) {
            info.appendonly = Some(on);
        }
        info.appendfsync = settings.get("appendfsync").cloned();
    }
    if let Ok(settings) = save_reply {
        info.save = settings.get("save").cloned();
    }
    true
}

/// [`TIME_SAMPLES`] `TIME` requests; the sample with the shortest round trip is kept.
async fn sample_clock(mut conn: ProbeConnection, info: &mut NodeInfo) {
    let time = redis::cmd("TIME");
    for _ in 0..TIME_SAMPLES {
        let wall = SystemTime::now();
        let start = Instant::now();
        let reply = conn.query::<(i64, i64)>(&time).await;
        let rtt = start.elapsed();
        match reply {
            Ok((secs, micros)) => {
                let server = i128::from(secs) * 1_000_000 + i128::from(micros);
                let sample = estimate_offset(unix_micros(wall), rtt, server);
                info.clock = Some(match info.clock {
                    Some(best) if best.rtt <= sample.rtt => best,
                    _ => sample,
                });
            }
            Err(e) => {
                info.error
                    .get_or_insert_with(|| format!("TIME failed: {e}"));
                break;
            }
        }
    }
}

/// One request on a clone of `conn`, so that requests run concurrently on it.
async fn query<T: FromRedisValue>(
    conn: &ProbeConnection,
    cmd: redis::Cmd,
) -> Result<T, RedisError> {
    conn.clone().query(&cmd).await
}

/// A driver error as shown in the report: timeouts say how long we waited.
fn failure(e: &RedisError) -> String {
    if e.is_timeout() {
        format!("no answer within {RESPONSE_TIMEOUT:?}")
    } else {
        e.to_string()
    }
}

/// Whether an error is the server's answer (the node works but refused this command), as
/// opposed to no answer, or an answer meaning the node cannot serve anything now.
fn answered(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
        && !matches!(
            e.code(),
            Some("NOAUTH" | "WRONGPASS" | "LOADING" | "BUSY" | "MASTERDOWN")
        )
}

/// Microseconds since the Unix epoch (negative before it).
fn unix_micros(t: SystemTime) -> i128 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => super::render::micros(d),
        Err(e) => -super::render::micros(e.duration()),
    }
}

/// The clock offset from one `TIME` sample: the request left at local wall time
/// `local_send_us`, the answer came `rtt` later (monotonic clock) and said `server_us`.
/// Assuming the server read its clock halfway through the round trip, the offset is
/// `server - (send + rtt / 2)`, give or take `rtt / 2`.
pub(crate) fn estimate_offset(local_send_us: i128, rtt: Duration, server_us: i128) -> ClockOffset {
    let half = rtt / 2;
    let offset = server_us - (local_send_us + super::render::micros(half));
    let offset_micros =
        i64::try_from(offset).unwrap_or(if offset < 0 { i64::MIN } else { i64::MAX });
    ClockOffset {
        offset_micros,
        uncertainty: half,
        rtt,
    }
}

/// Fills what `INFO` tells about a node.
pub(super) fn apply_info(node: &mut NodeInfo, info: &Info<'_>) {
    let text = |v: Option<&str>| v.map(str::to_owned);
    node.redis_version = text(info.redis_version());
    if let Some(server) = info.server() {
        node.server_kind = Some(server.kind);
        node.server_version = Some(server.version.to_owned());
    }
    node.run_id = text(info.run_id());
    node.role = text(info.role());
    node.master_replid = text(info.master_replid());
    node.master_host = text(info.master_host());
    node.master_port = info.master_port();
    node.replicas = info.connected_replicas();
    node.replica_lag = info.longest_replica_lag();
    node.promoted = info.promoted();
    node.appendonly = info.aof_enabled();
    node.maxmemory = info.maxmemory();
    node.maxmemory_policy = text(info.maxmemory_policy());
    node.cluster_enabled = info.cluster_enabled();
    node.uptime = info.uptime();
}
