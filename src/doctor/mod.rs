//! The deployment check behind [`Redlock::check_deployment`] (and the CLI's `doctor`): what
//! every node is (version, role, persistence, cluster mode, clock) and what about the set of
//! them weakens the lock, each finding with a severity and a one-line fix.
//!
//! Probing is the only part that talks to Redis. The verdicts come from [`findings`], a pure
//! function of the probed facts and the configuration, and the clock estimate from
//! [`estimate_offset`]; both are unit-tested below without a server.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, FromRedisValue, RedisError};

use crate::builder::Config;
use crate::client::Redlock;
use crate::json::{JsonObject, json_opt_str};
use crate::node::Node;
use crate::quorum;

/// Bound on connecting to one node (TCP, TLS, authentication) during the check.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on each request to one node during the check.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// Bound on the whole probe of one node; nodes are probed concurrently, so this also bounds
/// the whole check.
const PROBE_DEADLINE: Duration = Duration::from_millis(2500);
/// `TIME` samples per node; the one with the shortest round trip is kept.
const TIME_SAMPLES: usize = 3;
/// A default TTL that keeps less than this share of itself as validity is flagged.
const MIN_VALIDITY_SHARE: f64 = 0.5;

/// How serious a [`Finding`] is. Ordered: `Info < Warning < Error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Severity {
    /// Worth knowing; the lock is as safe as its design allows.
    Info,
    /// The lock works but is weaker than it looks: less fault tolerance, or a failure mode
    /// in which it can be granted twice.
    Warning,
    /// The lock is broken or unavailable as deployed.
    Error,
}

impl Severity {
    /// `"info"`, `"warning"` or `"error"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a [`Finding`] is about; stable names for scripts are given by
/// [`as_str`](Self::as_str).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FindingKind {
    /// A node did not answer: connecting, authenticating or `INFO` failed or timed out.
    /// An error when fewer than a quorum of nodes answered, else a warning.
    Unreachable,
    /// A node answered but refused `INFO`, so its role, cluster mode and persistence could
    /// not be checked (info).
    Incomplete,
    /// Two entries reach the same server (same `run_id`), which then votes twice (error).
    DuplicateServer,
    /// Two entries are in one replication group: one replicates the other, or both share a
    /// replication ID. A failover can hand the same lock to two clients (error).
    Replicated,
    /// A node is a replica of a master that is not listed: it refuses lock writes
    /// (`READONLY`) or loses them on resynchronisation (warning).
    Replica,
    /// A node runs in cluster mode: a lock key lives on whichever shard owns its slot, and a
    /// node without that slot refuses it (warning).
    ClusterMode,
    /// One node: no fault tolerance. Reported as info because a single instance is an
    /// explicit, documented mode of this client.
    SingleNode,
    /// Two nodes: both must grant every lock, so either failing stops locking (warning).
    TooFewNodes,
    /// An even number of nodes (4 or more) tolerates no more failures than one fewer would
    /// (warning).
    EvenNodeCount,
    /// `appendonly no`: a restart forgets the node's lock keys, so a lock can be granted
    /// twice (warning).
    NoPersistence,
    /// `appendonly yes` but `appendfsync` is not `always`: recent lock writes can be lost on
    /// a crash of the host (info for `everysec`, warning for `no`).
    WeakFsync,
    /// `appendonly yes` but `appendfsync` could not be read (`CONFIG GET` refused) (info).
    FsyncUnknown,
    /// A memory limit with an eviction policy: lock keys can be evicted before their TTL
    /// (warning).
    Eviction,
    /// The default TTL leaves little (warning) or no (error) validity after the drift
    /// allowance and one node timeout.
    TtlBudget,
    /// A node's wall clock differs from this host's by more than the drift allowance of the
    /// default TTL (warning) or by more than the whole TTL (error).
    ClockSkew,
}

impl FindingKind {
    /// The snake-case name used in JSON, e.g. `"duplicate_server"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            FindingKind::Unreachable => "unreachable",
            FindingKind::Incomplete => "incomplete",
            FindingKind::DuplicateServer => "duplicate_server",
            FindingKind::Replicated => "replicated",
            FindingKind::Replica => "replica",
            FindingKind::ClusterMode => "cluster_mode",
            FindingKind::SingleNode => "single_node",
            FindingKind::TooFewNodes => "too_few_nodes",
            FindingKind::EvenNodeCount => "even_node_count",
            FindingKind::NoPersistence => "no_persistence",
            FindingKind::WeakFsync => "weak_fsync",
            FindingKind::FsyncUnknown => "fsync_unknown",
            FindingKind::Eviction => "eviction",
            FindingKind::TtlBudget => "ttl_budget",
            FindingKind::ClockSkew => "clock_skew",
        }
    }
}

impl fmt::Display for FindingKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem (or notable fact) found by [`Redlock::check_deployment`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// What it is about.
    pub kind: FindingKind,
    /// How serious it is.
    pub severity: Severity,
    /// The node concerned as `host:port`, or `None` for a finding about the whole set or
    /// the configuration. For a pair of nodes, the later-listed one (or the replica).
    pub node: Option<String>,
    /// One line saying what was found and why it matters.
    pub message: String,
    /// One line saying how to fix it.
    pub fix: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.severity)?;
        if let Some(node) = &self.node {
            write!(f, "{node}: ")?;
        }
        write!(f, "{} (fix: {})", self.message, self.fix)
    }
}

/// A node's wall clock compared with this host's, from `TIME` and the round trip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClockOffset {
    /// Server clock minus this host's clock, in microseconds: positive when the server is
    /// ahead. Estimated as `server_time - (local_send_time + rtt / 2)`.
    pub offset_micros: i64,
    /// Half the round trip: the true offset lies within `offset ± uncertainty`.
    pub uncertainty: Duration,
    /// Round trip of the `TIME` request the estimate comes from (the fastest sample).
    pub rtt: Duration,
}

impl ClockOffset {
    /// How much of the offset is certain: `|offset| - uncertainty`, or zero.
    pub fn excess(&self) -> Duration {
        Duration::from_micros(self.offset_micros.unsigned_abs()).saturating_sub(self.uncertainty)
    }
}

/// What the check learned about one node. Fields are `None` when the node did not answer
/// or refused the command that tells.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeInfo {
    /// The node's address as `host:port` (credentials are never shown).
    pub name: String,
    /// Whether the node connected and answered.
    pub reachable: bool,
    /// Why the node is unreachable, or the first request that failed on a reachable node
    /// (say, `INFO` or `TIME` refused by an ACL).
    pub error: Option<String>,
    /// `redis_version` from `INFO`, e.g. `"7.2.4"`.
    pub redis_version: Option<String>,
    /// `run_id` from `INFO`: random per server process, so two entries with the same one
    /// are the same server.
    pub run_id: Option<String>,
    /// `role` from `INFO`: `"master"`, or `"slave"` for a replica.
    pub role: Option<String>,
    /// `master_replid` from `INFO`: the replication ID, shared by a master and its
    /// synchronised replicas.
    pub master_replid: Option<String>,
    /// For a replica, the host of its master as the replica knows it.
    pub master_host: Option<String>,
    /// For a replica, the port of its master.
    pub master_port: Option<u16>,
    /// Whether the append-only file is on (`CONFIG GET appendonly`, or `aof_enabled` from
    /// `INFO` when `CONFIG` is refused).
    pub appendonly: Option<bool>,
    /// `CONFIG GET appendfsync`: `"always"`, `"everysec"` or `"no"`; `None` when `CONFIG`
    /// is refused (ACL or renamed command).
    pub appendfsync: Option<String>,
    /// `maxmemory` from `INFO`, in bytes; 0 means no limit.
    pub maxmemory: Option<u64>,
    /// `maxmemory_policy` from `INFO`, e.g. `"noeviction"` or `"allkeys-lru"`.
    pub maxmemory_policy: Option<String>,
    /// `cluster_enabled` from `INFO`.
    pub cluster_enabled: Option<bool>,
    /// `uptime_in_seconds` from `INFO`: time since the server process started.
    pub uptime: Option<Duration>,
    /// The clock offset from the best of a few `TIME` samples.
    pub clock: Option<ClockOffset>,
}

impl NodeInfo {
    fn new(name: &str) -> Self {
        NodeInfo {
            name: name.to_owned(),
            ..NodeInfo::default()
        }
    }

    /// Whether `INFO` reported this node as a replica.
    pub fn is_replica(&self) -> bool {
        matches!(self.role.as_deref(), Some("slave" | "replica"))
    }
}

/// The result of [`Redlock::check_deployment`]: every node, and the findings sorted from
/// most to least severe. [`Display`](fmt::Display) renders a table for people,
/// [`to_json`](Self::to_json) a JSON document for scripts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeploymentReport {
    /// Votes needed for a lock: `nodes / 2 + 1`.
    pub quorum: usize,
    /// One entry per configured node, in configuration order.
    pub nodes: Vec<NodeInfo>,
    /// What was found, most severe first (then in node order).
    pub findings: Vec<Finding>,
}

impl DeploymentReport {
    /// The highest severity among the findings, `None` when there are none.
    pub fn worst(&self) -> Option<Severity> {
        self.findings.iter().map(|f| f.severity).max()
    }

    /// The report as one line of JSON:
    /// `{"quorum":…,"worst":…,"nodes":[…],"findings":[…]}`. Absent values are `null`,
    /// durations are whole microseconds (`*_us`) or seconds (`uptime_secs`), and finding
    /// kinds and severities use their [`FindingKind::as_str`] and [`Severity::as_str`] names.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(256 + 512 * self.nodes.len());
        out.push('{');
        out.push_str("\"quorum\":");
        out.push_str(&self.quorum.to_string());
        out.push_str(",\"worst\":");
        json_opt_str(&mut out, self.worst().as_ref().map(Severity::as_str));
        out.push_str(",\"nodes\":[");
        for (i, node) in self.nodes.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            node_json(&mut out, node);
        }
        out.push_str("],\"findings\":[");
        for (i, finding) in self.findings.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let mut o = JsonObject::new(&mut out);
            o.str("kind", Some(finding.kind.as_str()));
            o.str("severity", Some(finding.severity.as_str()));
            o.str("node", finding.node.as_deref());
            o.str("message", Some(&finding.message));
            o.str("fix", Some(&finding.fix));
            o.end();
        }
        out.push_str("]}");
        out
    }
}

impl fmt::Display for DeploymentReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |s: Severity| self.findings.iter().filter(|x| x.severity == s).count();
        writeln!(
            f,
            "{} node{}, quorum {}: {} error(s), {} warning(s), {} note(s)",
            self.nodes.len(),
            if self.nodes.len() == 1 { "" } else { "s" },
            self.quorum,
            count(Severity::Error),
            count(Severity::Warning),
            count(Severity::Info),
        )?;
        writeln!(f)?;
        let header = [
            "node", "state", "version", "role", "aof", "cluster", "uptime", "clock",
        ];
        let rows: Vec<[String; 8]> = self.nodes.iter().map(node_row).collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        write_row(f, &header.map(str::to_owned), &widths)?;
        for row in &rows {
            write_row(f, row, &widths)?;
        }
        writeln!(f)?;
        if self.findings.is_empty() {
            return writeln!(f, "no findings");
        }
        for finding in &self.findings {
            let label = finding.severity.as_str().to_ascii_uppercase();
            match &finding.node {
                Some(node) => writeln!(f, "{label:<8} {node}: {}", finding.message)?,
                None => writeln!(f, "{label:<8} {}", finding.message)?,
            }
            writeln!(f, "{:<8} fix: {}", "", finding.fix)?;
        }
        Ok(())
    }
}

fn write_row(f: &mut fmt::Formatter<'_>, row: &[String; 8], widths: &[usize; 8]) -> fmt::Result {
    let mut line = String::from("  ");
    for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
        if i + 1 == row.len() {
            line.push_str(cell);
        } else {
            let _ = write!(line, "{cell:<w$}  ");
        }
    }
    writeln!(f, "{}", line.trim_end())
}

fn node_row(n: &NodeInfo) -> [String; 8] {
    let dash = || "-".to_owned();
    let opt = |v: &Option<String>| v.clone().unwrap_or_else(dash);
    let state = if n.reachable { "up" } else { "down" };
    let aof = match (n.appendonly, &n.appendfsync) {
        (Some(false), _) => "off".to_owned(),
        (Some(true), Some(fsync)) => fsync.clone(),
        (Some(true), None) => "on".to_owned(),
        (None, _) => dash(),
    };
    let cluster = match n.cluster_enabled {
        Some(true) => "yes".to_owned(),
        Some(false) => "no".to_owned(),
        None => dash(),
    };
    let uptime = n.uptime.map_or_else(dash, short_duration);
    let clock = n.clock.map_or_else(dash, |c| {
        format!(
            "{} ms ±{:.1} ms",
            signed_ms(c.offset_micros),
            c.uncertainty.as_secs_f64() * 1e3
        )
    });
    [
        n.name.clone(),
        state.to_owned(),
        opt(&n.redis_version),
        opt(&n.role),
        aof,
        cluster,
        uptime,
        clock,
    ]
}

/// `12s`, `5m`, `3h`, `4d`.
fn short_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Microseconds as signed milliseconds rounded to one decimal, e.g. `+5000.3`, `-0.1`
/// or `0.0`.
fn signed_ms(micros: i64) -> String {
    let abs = micros.unsigned_abs();
    let tenths = abs / 100 + u64::from(abs % 100 >= 50);
    let sign = match (tenths, micros < 0) {
        (0, _) => "",
        (_, true) => "-",
        (_, false) => "+",
    };
    format!("{sign}{}.{}", tenths / 10, tenths % 10)
}

fn node_json(out: &mut String, n: &NodeInfo) {
    let mut o = JsonObject::new(out);
    o.str("name", Some(&n.name));
    o.bool("reachable", Some(n.reachable));
    o.str("error", n.error.as_deref());
    o.str("redis_version", n.redis_version.as_deref());
    o.str("run_id", n.run_id.as_deref());
    o.str("role", n.role.as_deref());
    o.str("master_replid", n.master_replid.as_deref());
    o.str("master_host", n.master_host.as_deref());
    o.num("master_port", n.master_port.map(i128::from));
    o.bool("appendonly", n.appendonly);
    o.str("appendfsync", n.appendfsync.as_deref());
    o.num("maxmemory", n.maxmemory.map(i128::from));
    o.str("maxmemory_policy", n.maxmemory_policy.as_deref());
    o.bool("cluster_enabled", n.cluster_enabled);
    o.num("uptime_secs", n.uptime.map(|d| i128::from(d.as_secs())));
    o.key("clock");
    match &n.clock {
        None => o.out.push_str("null"),
        Some(c) => {
            let mut c_obj = JsonObject::new(o.out);
            c_obj.num("offset_us", Some(i128::from(c.offset_micros)));
            c_obj.num("uncertainty_us", Some(micros(c.uncertainty)));
            c_obj.num("rtt_us", Some(micros(c.rtt)));
            c_obj.end();
        }
    }
    o.end();
}

fn micros(d: Duration) -> i128 {
    i128::try_from(d.as_micros()).unwrap_or(i128::MAX)
}

impl Redlock {
    /// Checks how the nodes are deployed and reports what weakens the lock: unreachable
    /// nodes, one server listed twice, nodes that replicate one another, cluster mode, an
    /// even or too small number of nodes, persistence and eviction settings, a default TTL
    /// eaten up by the drift allowance and node timeout, and clocks that differ from this
    /// host's. Each [`Finding`] has a severity and a one-line fix.
    ///
    /// Never fails: a node that cannot be reached is itself a finding. Every node is
    /// probed at once on a fresh connection of its own (1 s to connect, 1 s per request,
    /// 2.5 s in all), so the check ends within about 2.5 s even when nodes hang. It reads
    /// `INFO`, `CONFIG GET append*` (optional: an ACL may refuse it) and three `TIME`
    /// samples; it writes nothing.
    ///
    /// ```no_run
    /// # async fn demo(redlock: quorum_lock::Redlock) {
    /// use quorum_lock::Severity;
    /// let report = redlock.check_deployment().await;
    /// println!("{report}");
    /// if report.worst() == Some(Severity::Error) {
    ///     std::process::exit(2);
    /// }
    /// # }
    /// ```
    pub async fn check_deployment(&self) -> DeploymentReport {
        let inner = self.inner();
        let nodes: Vec<NodeInfo> =
            futures::future::join_all(inner.nodes.iter().map(|node| probe(node))).await;
        let findings = findings(&nodes, inner.quorum, &Limits::from(&inner.config));
        for node in &nodes {
            if let Some(clock) = &node.clock {
                crate::metrics::clock_offset(&node.name, clock.offset_micros as f64 / 1e6);
            }
        }
        DeploymentReport {
            quorum: inner.quorum,
            nodes,
            findings,
        }
    }
}

/// Probes one node within [`PROBE_DEADLINE`]; what was learned before the deadline is kept.
async fn probe(node: &Node) -> NodeInfo {
    let mut info = NodeInfo::new(node.name());
    if tokio::time::timeout(PROBE_DEADLINE, probe_into(node, &mut info))
        .await
        .is_err()
    {
        info.error
            .get_or_insert_with(|| format!("no complete answer within {PROBE_DEADLINE:?}"));
    }
    info
}

async fn probe_into(node: &Node, info: &mut NodeInfo) {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT));
    let connect = node
        .client()
        .get_multiplexed_async_connection_with_config(&config);
    let mut conn = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => {
            info.error = Some(failure(&e));
            return;
        }
        Err(_) => {
            info.error = Some(format!("connect timed out after {CONNECT_TIMEOUT:?}"));
            return;
        }
    };

    // Both on the one multiplexed connection: one round trip.
    let mut append = redis::cmd("CONFIG");
    append.arg("GET").arg("append*");
    let (info_reply, config_reply) = futures::join!(
        query::<String>(&conn, redis::cmd("INFO")),
        query::<HashMap<String, String>>(&conn, append),
    );
    match info_reply {
        Ok(text) => {
            info.reachable = true;
            apply_info(info, &parse_info(&text));
        }
        Err(e) if answered(&e) => {
            info.reachable = true;
            info.error = Some(format!("INFO refused: {e}"));
        }
        Err(e) => {
            info.error = Some(failure(&e));
            return;
        }
    }
    if let Ok(settings) = config_reply {
        if let Some(on) = settings.get("appendonly").and_then(|v| flag(v)) {
            info.appendonly = Some(on);
        }
        info.appendfsync = settings.get("appendfsync").cloned();
    }

    for _ in 0..TIME_SAMPLES {
        let wall = SystemTime::now();
        let start = Instant::now();
        let reply = redis::cmd("TIME")
            .query_async::<(i64, i64)>(&mut conn)
            .await;
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

async fn query<T: FromRedisValue>(
    conn: &MultiplexedConnection,
    cmd: redis::Cmd,
) -> Result<T, RedisError> {
    let mut conn = conn.clone();
    cmd.query_async(&mut conn).await
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
        Ok(d) => micros(d),
        Err(e) => -micros(e.duration()),
    }
}

/// The clock offset from one `TIME` sample: the request left at local wall time
/// `local_send_us`, the answer came `rtt` later (monotonic clock) and said `server_us`.
/// Assuming the server read its clock halfway through the round trip, the offset is
/// `server - (send + rtt / 2)`, give or take `rtt / 2`.
pub(crate) fn estimate_offset(local_send_us: i128, rtt: Duration, server_us: i128) -> ClockOffset {
    let half = rtt / 2;
    let offset = server_us - (local_send_us + micros(half));
    let offset_micros =
        i64::try_from(offset).unwrap_or(if offset < 0 { i64::MIN } else { i64::MAX });
    ClockOffset {
        offset_micros,
        uncertainty: half,
        rtt,
    }
}

/// `INFO` text as `field → value`, section headers and blank lines skipped.
fn parse_info(text: &str) -> HashMap<&str, &str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .collect()
}

fn apply_info(info: &mut NodeInfo, fields: &HashMap<&str, &str>) {
    let text = |key: &str| fields.get(key).map(|v| (*v).to_owned());
    info.redis_version = text("redis_version");
    info.run_id = text("run_id");
    info.role = text("role");
    info.master_replid = text("master_replid");
    info.master_host = text("master_host");
    info.master_port = fields.get("master_port").and_then(|v| v.parse().ok());
    info.appendonly = fields.get("aof_enabled").and_then(|v| flag(v));
    info.maxmemory = fields.get("maxmemory").and_then(|v| v.parse().ok());
    info.maxmemory_policy = text("maxmemory_policy");
    info.cluster_enabled = fields.get("cluster_enabled").and_then(|v| flag(v));
    info.uptime = fields
        .get("uptime_in_seconds")
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs);
}

fn flag(v: &str) -> Option<bool> {
    match v {
        "1" | "yes" => Some(true),
        "0" | "no" => Some(false),
        _ => None,
    }
}

/// The configuration the findings are judged against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) ttl: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
}

impl From<&Config> for Limits {
    fn from(config: &Config) -> Self {
        Limits {
            ttl: config.default_ttl,
            drift_factor: config.drift_factor,
            node_timeout: config.node_timeout,
        }
    }
}

fn finding(
    kind: FindingKind,
    severity: Severity,
    node: Option<&str>,
    message: String,
    fix: impl Into<String>,
) -> Finding {
    Finding {
        kind,
        severity,
        node: node.map(str::to_owned),
        message,
        fix: fix.into(),
    }
}

/// `host:port` of a node name (which may end in `/db`), lowercased.
fn address(name: &str) -> String {
    name.split('/').next().unwrap_or(name).to_ascii_lowercase()
}

/// Whether `replica` reports `master` (by listed address) as its master.
fn replicates(replica: &NodeInfo, master: &NodeInfo) -> bool {
    match (&replica.master_host, replica.master_port) {
        (Some(host), Some(port)) if replica.is_replica() => {
            format!("{}:{port}", host.to_ascii_lowercase()) == address(&master.name)
        }
        _ => false,
    }
}

fn same(a: &Option<String>, b: &Option<String>) -> bool {
    matches!((a, b), (Some(a), Some(b)) if !a.is_empty() && a == b)
}

/// Everything wrong with a deployment described by `infos` (one per configured node) for a
/// client needing `quorum` votes with `limits`, most severe first.
pub(crate) fn findings(infos: &[NodeInfo], quorum: usize, limits: &Limits) -> Vec<Finding> {
    let mut out = Vec::new();
    let n = infos.len();
    let reachable = infos.iter().filter(|i| i.reachable).count();

    // The set.
    match n {
        1 => out.push(finding(
            FindingKind::SingleNode,
            Severity::Info,
            None,
            "one node: no fault tolerance; if it is down no lock can be taken, and if it \
             restarts without persistence its locks are forgotten"
                .into(),
            "keep it if a single instance is intended; otherwise use 3 or 5 independent masters",
        )),
        2 => out.push(finding(
            FindingKind::TooFewNodes,
            Severity::Warning,
            None,
            "2 nodes: both must grant every lock, so either one failing stops locking (no \
             better than one node)"
                .into(),
            "use 3 (or 5) independent masters",
        )),
        n if n >= 4 && n % 2 == 0 => out.push(finding(
            FindingKind::EvenNodeCount,
            Severity::Warning,
            None,
            format!(
                "{n} nodes need {quorum} votes and tolerate {} failures, no more than {} \
                 nodes would",
                n - quorum,
                n - 1
            ),
            format!("use {} or {} independent masters", n - 1, n + 1),
        )),
        _ => {}
    }

    // Pairs: the same server twice, or one replication group.
    let mut related = vec![false; n];
    for (i, a) in infos.iter().enumerate() {
        for (j, b) in infos.iter().enumerate().skip(i + 1) {
            if !(a.reachable && b.reachable) {
                continue;
            }
            if same(&a.run_id, &b.run_id) {
                out.push(finding(
                    FindingKind::DuplicateServer,
                    Severity::Error,
                    Some(&b.name),
                    format!(
                        "is the same server as {} (run_id {}): it casts two votes, so fewer \
                         servers than a quorum can grant a lock",
                        a.name,
                        b.run_id.as_deref().unwrap_or_default()
                    ),
                    "list each Redis server once",
                ));
                continue;
            }
            let (replica, how) = if replicates(b, a) {
                (b, format!("replicates {}", a.name))
            } else if replicates(a, b) {
                (a, format!("replicates {}", b.name))
            } else if same(&a.master_replid, &b.master_replid) {
                (
                    b,
                    format!(
                        "shares replication ID {} with {}",
                        b.master_replid.as_deref().unwrap_or_default(),
                        a.name
                    ),
                )
            } else {
                continue;
            };
            for k in [i, j] {
                if let Some(flag) = related.get_mut(k) {
                    *flag = true;
                }
            }
            out.push(finding(
                FindingKind::Replicated,
                Severity::Error,
                Some(&replica.name),
                format!(
                    "{how}: one replication group, not independent masters, so a failover \
                     or lagging replication can hand the same lock to two clients"
                ),
                "use independent masters with no replication between them",
            ));
        }
    }

    // Each node.
    let allowance = quorum::drift(limits.ttl, limits.drift_factor);
    for (i, node) in infos.iter().enumerate() {
        let name = Some(node.name.as_str());
        if !node.reachable {
            let (severity, consequence) = if reachable < quorum {
                (
                    Severity::Error,
                    format!(
                        "only {reachable} of {n} nodes answered, below the quorum of {quorum}: no lock can be taken"
                    ),
                )
            } else {
                (
                    Severity::Warning,
                    format!(
                        "{reachable} of {n} nodes answered (quorum {quorum}): fewer failures can be tolerated"
                    ),
                )
            };
            out.push(finding(
                FindingKind::Unreachable,
                severity,
                name,
                format!(
                    "unreachable ({}); {consequence}",
                    node.error.as_deref().unwrap_or("no answer")
                ),
                "start the node, or correct its URL, credentials, TLS settings or firewall",
            ));
            continue;
        }
        if node.redis_version.is_none() {
            out.push(finding(
                FindingKind::Incomplete,
                Severity::Info,
                name,
                format!(
                    "answered but could not be inspected ({}): replication, cluster mode and \
                     persistence are unchecked",
                    node.error.as_deref().unwrap_or("INFO gave nothing")
                ),
                "run the check as a user allowed INFO and CONFIG GET",
            ));
        }
        if node.cluster_enabled == Some(true) {
            out.push(finding(
                FindingKind::ClusterMode,
                Severity::Warning,
                name,
                "runs in cluster mode: a lock key lives on whichever shard owns its slot, and \
                 this node refuses keys of slots it does not own"
                    .into(),
                "use standalone masters (cluster-enabled no), each one an independent vote",
            ));
        }
        if node.is_replica() && !related.get(i).copied().unwrap_or(false) {
            let master = match (&node.master_host, node.master_port) {
                (Some(host), Some(port)) => format!("{host}:{port}"),
                _ => "an unlisted master".into(),
            };
            out.push(finding(
                FindingKind::Replica,
                Severity::Warning,
                name,
                format!(
                    "is a replica of {master}: it refuses lock writes (READONLY) or loses \
                     them when it resynchronises"
                ),
                "list an independent master instead of the replica",
            ));
        }
        match (node.appendonly, node.appendfsync.as_deref()) {
            (Some(false), _) => out.push(finding(
                FindingKind::NoPersistence,
                Severity::Warning,
                name,
                "appendonly is off: a restart forgets this node's lock keys, so a lock it \
                 granted can be granted again"
                    .into(),
                "set appendonly yes with appendfsync always, or keep a restarted node out of \
                 service for longer than the longest TTL",
            )),
            (Some(true), Some("always")) | (None, _) => {}
            (Some(true), Some("everysec")) => out.push(finding(
                FindingKind::WeakFsync,
                Severity::Info,
                name,
                "appendfsync everysec: up to 1 s of lock writes can be lost if the host \
                 loses power"
                    .into(),
                "set appendfsync always, or keep a restarted node out of service for longer \
                 than the longest TTL",
            )),
            (Some(true), Some(other)) if other != "no" => out.push(finding(
                FindingKind::FsyncUnknown,
                Severity::Info,
                name,
                format!("appendfsync has an unexpected value {other:?}"),
                "set appendfsync always",
            )),
            (Some(true), Some(_)) => out.push(finding(
                FindingKind::WeakFsync,
                Severity::Warning,
                name,
                "appendfsync no: the OS decides when lock writes reach the disk, so tens of \
                 seconds of them can be lost if the host crashes"
                    .into(),
                "set appendfsync always",
            )),
            (Some(true), None) => out.push(finding(
                FindingKind::FsyncUnknown,
                Severity::Info,
                name,
                "appendonly is on, but appendfsync could not be read (CONFIG GET refused): \
                 unless it is always, recent lock writes can be lost on a crash"
                    .into(),
                "check that appendfsync is always, or run the check as a user allowed CONFIG GET",
            )),
        }
        if let (Some(max), Some(policy)) = (node.maxmemory, node.maxmemory_policy.as_deref())
            && max > 0
            && policy != "noeviction"
        {
            out.push(finding(
                FindingKind::Eviction,
                Severity::Warning,
                name,
                format!(
                    "maxmemory {max} with maxmemory-policy {policy}: under memory pressure \
                     a lock key can be evicted before its TTL, and the lock granted again"
                ),
                "set maxmemory-policy noeviction on lock nodes (or no maxmemory)",
            ));
        }
        if let Some(clock) = node.clock {
            let excess = clock.excess();
            let severity = if excess > limits.ttl {
                Some((
                    Severity::Error,
                    format!("more than the whole default TTL of {:?}", limits.ttl),
                ))
            } else if excess > allowance {
                Some((
                    Severity::Warning,
                    format!(
                        "beyond the drift allowance of {allowance:?} for the default TTL of {:?}",
                        limits.ttl
                    ),
                ))
            } else {
                None
            };
            if let Some((severity, beyond)) = severity {
                out.push(finding(
                    FindingKind::ClockSkew,
                    severity,
                    name,
                    format!(
                        "clock is {} ms off this host's (±{:.1} ms), {beyond}; clocks this \
                         far apart are not kept in sync, and Redis expires keys by wall clock, \
                         so a correcting jump expires locks early",
                        signed_ms(clock.offset_micros),
                        clock.uncertainty.as_secs_f64() * 1e3
                    ),
                    "synchronise the clocks of the nodes and of this host with NTP (chrony), \
                     slewing rather than stepping",
                ));
            }
        }
    }

    // The configuration.
    let ttl = limits.ttl;
    let used = limits.node_timeout + allowance;
    match quorum::validity(ttl, limits.node_timeout, limits.drift_factor) {
        None => out.push(finding(
            FindingKind::TtlBudget,
            Severity::Error,
            None,
            format!(
                "the default TTL of {ttl:?} leaves no validity after the drift allowance \
                 ({allowance:?}) and one node timeout ({:?})",
                limits.node_timeout
            ),
            suggest_ttl(limits),
        )),
        Some(validity) if validity.as_secs_f64() < ttl.as_secs_f64() * MIN_VALIDITY_SHARE => {
            out.push(finding(
                FindingKind::TtlBudget,
                Severity::Warning,
                None,
                format!(
                    "the default TTL of {ttl:?} keeps only {validity:?} of validity after the \
                     drift allowance and one node timeout take {used:?}"
                ),
                suggest_ttl(limits),
            ));
        }
        Some(_) => {}
    }

    // Most severe first; equal severities keep the order above.
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// The fix for a TTL budget finding: the smallest TTL whose validity after the drift
/// allowance and one node timeout is [`MIN_VALIDITY_SHARE`] of it, rounded up to a
/// millisecond.
fn suggest_ttl(limits: &Limits) -> String {
    let share = MIN_VALIDITY_SHARE - limits.drift_factor;
    let fixed = limits.node_timeout + quorum::DRIFT_CONSTANT;
    match Duration::try_from_secs_f64(fixed.as_secs_f64() / share) {
        Ok(min) if share > 0.0 => {
            let ms = min.as_millis().saturating_add(1);
            format!("raise default_ttl to at least {ms} ms, or lower node_timeout")
        }
        _ => "lower drift_factor and node_timeout, or raise default_ttl".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn limits() -> Limits {
        Limits {
            ttl: Duration::from_secs(30),
            drift_factor: 0.01,
            node_timeout: MS(50),
        }
    }

    /// A healthy, reachable, independent master with `appendfsync always`.
    fn healthy(i: usize) -> NodeInfo {
        NodeInfo {
            name: format!("10.0.0.{i}:6379"),
            reachable: true,
            error: None,
            redis_version: Some("7.2.4".into()),
            run_id: Some(format!("run{i}")),
            role: Some("master".into()),
            master_replid: Some(format!("replid{i}")),
            master_host: None,
            master_port: None,
            appendonly: Some(true),
            appendfsync: Some("always".into()),
            maxmemory: Some(0),
            maxmemory_policy: Some("noeviction".into()),
            cluster_enabled: Some(false),
            uptime: Some(Duration::from_secs(3600)),
            clock: Some(ClockOffset {
                offset_micros: 200,
                uncertainty: MS(1),
                rtt: MS(2),
            }),
        }
    }

    fn set(n: usize) -> Vec<NodeInfo> {
        (0..n).map(healthy).collect()
    }

    fn kinds(infos: &[NodeInfo], limits: &Limits) -> Vec<(FindingKind, Severity, Option<String>)> {
        findings(infos, quorum::quorum(infos.len()), limits)
            .into_iter()
            .map(|f| (f.kind, f.severity, f.node))
            .collect()
    }

    fn node(i: usize) -> Option<String> {
        Some(format!("10.0.0.{i}:6379"))
    }

    use FindingKind as K;
    use Severity::{Error as E, Info as I, Warning as W};

    fn sample_report() -> DeploymentReport {
        let mut infos = set(2);
        infos[1] = NodeInfo {
            error: Some("refused \"quoted\"".into()),
            ..NodeInfo::new("10.0.0.1:6379")
        };
        let findings = findings(&infos, 2, &limits());
        DeploymentReport {
            quorum: 2,
            nodes: infos,
            findings,
        }
    }

    #[test]
    fn healthy_odd_sets_have_no_findings() {
        for n in [3, 5, 7] {
            assert_eq!(kinds(&set(n), &limits()), vec![], "n = {n}");
        }
    }

    #[test]
    fn node_counts() {
        assert_eq!(kinds(&set(1), &limits()), vec![(K::SingleNode, I, None)]);
        assert_eq!(kinds(&set(2), &limits()), vec![(K::TooFewNodes, W, None)]);
        assert_eq!(kinds(&set(4), &limits()), vec![(K::EvenNodeCount, W, None)]);
        assert_eq!(kinds(&set(6), &limits()), vec![(K::EvenNodeCount, W, None)]);
        let f = findings(&set(4), 3, &limits());
        assert!(
            f[0].message.contains("tolerate 1 failures"),
            "{}",
            f[0].message
        );
        assert!(f[0].fix.contains("use 3 or 5"), "{}", f[0].fix);
    }

    #[test]
    fn unreachable_is_an_error_only_below_quorum() {
        let mut infos = set(3);
        infos[1] = NodeInfo {
            error: Some("connection refused".into()),
            ..NodeInfo::new("10.0.0.1:6379")
        };
        assert_eq!(kinds(&infos, &limits()), vec![(K::Unreachable, W, node(1))]);
        infos[2] = NodeInfo::new("10.0.0.2:6379");
        assert_eq!(
            kinds(&infos, &limits()),
            vec![(K::Unreachable, E, node(1)), (K::Unreachable, E, node(2))]
        );
        let f = findings(&infos, 2, &limits());
        assert!(
            f[0].message.contains("connection refused"),
            "{}",
            f[0].message
        );
        assert!(f[1].message.contains("no answer"), "{}", f[1].message);
    }

    #[test]
    fn same_run_id_is_a_duplicate() {
        let mut infos = set(3);
        infos[2].run_id = infos[0].run_id.clone();
        infos[2].master_replid = infos[0].master_replid.clone();
        // Reported once, as a duplicate, not also as replication.
        assert_eq!(
            kinds(&infos, &limits()),
            vec![(K::DuplicateServer, E, node(2))]
        );
        // An unreachable entry cannot be compared.
        infos[2].reachable = false;
        assert_eq!(kinds(&infos, &limits()), vec![(K::Unreachable, W, node(2))]);
    }

    #[test]
    fn replication_between_listed_nodes() {
        // 1 replicates 0 by address (before it has synchronised: its own replid).
        let mut infos = set(3);
        infos[1].role = Some("slave".into());
        infos[1].master_host = Some("10.0.0.0".into());
        infos[1].master_port = Some(6379);
        assert_eq!(kinds(&infos, &limits()), vec![(K::Replicated, E, node(1))]);
        // Listed first, the replica is still the one named.
        infos.swap(0, 1);
        assert_eq!(kinds(&infos, &limits()), vec![(K::Replicated, E, node(1))]);
        // Same replication ID without an address match (master listed by another name).
        let mut infos = set(3);
        infos[2].master_replid = infos[0].master_replid.clone();
        assert_eq!(kinds(&infos, &limits()), vec![(K::Replicated, E, node(2))]);
        // A replica of an unlisted master.
        let mut infos = set(3);
        infos[0].role = Some("slave".into());
        infos[0].master_host = Some("10.9.9.9".into());
        infos[0].master_port = Some(6379);
        assert_eq!(kinds(&infos, &limits()), vec![(K::Replica, W, node(0))]);
        // A node listed with a db number still matches its replica's master address.
        let mut infos = set(3);
        infos[0].name = "10.0.0.0:6379/2".into();
        infos[1].role = Some("slave".into());
        infos[1].master_host = Some("10.0.0.0".into());
        infos[1].master_port = Some(6379);
        assert_eq!(kinds(&infos, &limits()), vec![(K::Replicated, E, node(1))]);
    }

    #[test]
    fn cluster_mode_and_eviction() {
        let mut infos = set(3);
        infos[0].cluster_enabled = Some(true);
        infos[1].maxmemory = Some(100 << 20);
        infos[1].maxmemory_policy = Some("allkeys-lru".into());
        infos[2].maxmemory_policy = Some("volatile-ttl".into()); // no limit: no eviction
        assert_eq!(
            kinds(&infos, &limits()),
            vec![(K::ClusterMode, W, node(0)), (K::Eviction, W, node(1))]
        );
    }

    #[test]
    fn persistence() {
        // appendonly, appendfsync, expected finding.
        type Case = (
            Option<bool>,
            Option<&'static str>,
            Option<(FindingKind, Severity)>,
        );
        let table: [Case; 7] = [
            (Some(true), Some("always"), None),
            (Some(true), Some("everysec"), Some((K::WeakFsync, I))),
            (Some(true), Some("no"), Some((K::WeakFsync, W))),
            (Some(true), Some("sometimes"), Some((K::FsyncUnknown, I))),
            (Some(true), None, Some((K::FsyncUnknown, I))),
            (Some(false), Some("always"), Some((K::NoPersistence, W))),
            (None, None, None),
        ];
        for (appendonly, fsync, expected) in table {
            let mut infos = set(3);
            infos[1].appendonly = appendonly;
            infos[1].appendfsync = fsync.map(str::to_owned);
            let expected: Vec<_> = expected.into_iter().map(|(k, s)| (k, s, node(1))).collect();
            assert_eq!(
                kinds(&infos, &limits()),
                expected,
                "{appendonly:?} {fsync:?}"
            );
        }
    }

    #[test]
    fn incomplete_when_info_refused() {
        let mut infos = set(3);
        infos[0] = NodeInfo {
            reachable: true,
            error: Some("INFO refused: NOPERM".into()),
            ..NodeInfo::new("10.0.0.0:6379")
        };
        assert_eq!(kinds(&infos, &limits()), vec![(K::Incomplete, I, node(0))]);
    }

    #[test]
    fn ttl_budget() {
        let with = |ttl, timeout| Limits {
            ttl: MS(ttl),
            drift_factor: 0.01,
            node_timeout: MS(timeout),
        };
        assert_eq!(kinds(&set(3), &with(30_000, 50)), vec![]);
        // 120 ms - 100 ms - 3.2 ms = 16.8 ms, under half.
        assert_eq!(
            kinds(&set(3), &with(120, 100)),
            vec![(K::TtlBudget, W, None)]
        );
        // Exactly used up: no validity at all.
        assert_eq!(
            kinds(&set(3), &with(100, 98)),
            vec![(K::TtlBudget, E, None)]
        );
        // Half of 210 ms is 105 ms; 210 - 100 - 4.1 = 105.9 ms: fine.
        assert_eq!(kinds(&set(3), &with(210, 100)), vec![]);
        let f = findings(&set(3), 2, &with(120, 100));
        // (100 + 2) / 0.49 = 208.2 ms.
        assert!(f[0].fix.contains("at least 209 ms"), "{}", f[0].fix);
        let odd = Limits {
            drift_factor: 0.6,
            ..with(1_000, 10)
        };
        assert!(suggest_ttl(&odd).contains("lower drift_factor"));
    }

    #[test]
    fn clock_skew_against_drift_and_ttl() {
        // Default TTL 30 s: drift allowance 302 ms.
        let cases = [
            (0, 1_000, None),
            (301_000, 1_000, None),
            (302_500, 1_000, None), // within the allowance once the uncertainty is counted
            (-303_500, 1_000, Some(W)),
            (5_000_000, 1_000, Some(W)),
            (30_000_000, 1_000, Some(W)),
            (-31_000_000, 1_000, Some(E)),
            (31_000_000, 2_000_000, Some(W)),
        ];
        for (offset, uncertainty_us, expected) in cases {
            let mut infos = set(3);
            infos[0].clock = Some(ClockOffset {
                offset_micros: offset,
                uncertainty: Duration::from_micros(uncertainty_us),
                rtt: Duration::from_micros(2 * uncertainty_us),
            });
            let expected: Vec<_> = expected
                .into_iter()
                .map(|s| (K::ClockSkew, s, node(0)))
                .collect();
            assert_eq!(kinds(&infos, &limits()), expected, "offset {offset} µs");
        }
    }

    #[test]
    fn findings_sorted_by_severity() {
        let mut infos = set(4);
        infos[0].appendfsync = Some("everysec".into());
        infos[3].run_id = infos[2].run_id.clone();
        let got = kinds(&infos, &limits());
        assert_eq!(
            got,
            vec![
                (K::DuplicateServer, E, node(3)),
                (K::EvenNodeCount, W, None),
                (K::WeakFsync, I, node(0)),
            ]
        );
    }

    #[test]
    fn offset_estimate_assumes_the_midpoint() {
        // Sent at t = 1_000_000 µs, 400 µs round trip, server said 1_000_200: in sync.
        let c = estimate_offset(1_000_000, Duration::from_micros(400), 1_000_200);
        assert_eq!(c.offset_micros, 0);
        assert_eq!(c.uncertainty, Duration::from_micros(200));
        assert_eq!(c.rtt, Duration::from_micros(400));
        assert_eq!(c.excess(), Duration::ZERO);
        // Server 5 s ahead.
        let c = estimate_offset(1_000_000, Duration::from_micros(400), 6_000_200);
        assert_eq!(c.offset_micros, 5_000_000);
        assert_eq!(c.excess(), Duration::from_micros(4_999_800));
        // Server behind, and before the epoch.
        let c = estimate_offset(1_000_000, Duration::from_millis(10), -4_000_000);
        assert_eq!(c.offset_micros, -5_005_000);
        assert_eq!(c.excess(), Duration::from_micros(5_000_000));
        // Absurd values saturate instead of wrapping.
        let c = estimate_offset(0, Duration::ZERO, i128::MAX);
        assert_eq!(c.offset_micros, i64::MAX);
        let c = estimate_offset(0, Duration::ZERO, i128::MIN / 2);
        assert_eq!(c.offset_micros, i64::MIN);
        assert_eq!(c.excess(), Duration::from_micros(i64::MIN.unsigned_abs()));
    }

    #[test]
    fn info_parsing() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n\r\n\
                    # Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:6380\r\n\
                    master_replid:r1\r\n# Persistence\r\naof_enabled:1\r\n# Memory\r\n\
                    maxmemory:1048576\r\nmaxmemory_policy:allkeys-lru\r\n# Cluster\r\n\
                    cluster_enabled:0\r\n";
        let mut info = NodeInfo::new("x:1");
        apply_info(&mut info, &parse_info(text));
        assert_eq!(info.redis_version.as_deref(), Some("7.0.15"));
        assert_eq!(info.run_id.as_deref(), Some("abc"));
        assert_eq!(info.uptime, Some(Duration::from_secs(42)));
        assert!(info.is_replica());
        assert_eq!(info.master_host.as_deref(), Some("127.0.0.1"));
        assert_eq!(info.master_port, Some(6380));
        assert_eq!(info.master_replid.as_deref(), Some("r1"));
        assert_eq!(info.appendonly, Some(true));
        assert_eq!(info.maxmemory, Some(1 << 20));
        assert_eq!(info.maxmemory_policy.as_deref(), Some("allkeys-lru"));
        assert_eq!(info.cluster_enabled, Some(false));
    }

    #[test]
    fn json_rendering() {
        let report = sample_report();
        let json = report.to_json();
        assert!(json.starts_with(r#"{"quorum":2,"worst":"error","nodes":[{"name":"10.0.0.0:6379","reachable":true,"error":null,"redis_version":"7.2.4""#), "{json}");
        assert!(
            json.contains(r#""clock":{"offset_us":200,"uncertainty_us":1000,"rtt_us":2000}}"#),
            "{json}"
        );
        assert!(
            json.contains(
                r#"{"name":"10.0.0.1:6379","reachable":false,"error":"refused \"quoted\"","#
            ),
            "{json}"
        );
        assert!(
            json.contains(r#""uptime_secs":null,"clock":null}"#),
            "{json}"
        );
        assert!(json.contains(r#"{"kind":"unreachable","severity":"error","node":"10.0.0.1:6379","message":"unreachable (refused \"quoted\"); only 1 of 2"#), "{json}");
        assert!(
            json.contains(r#"{"kind":"too_few_nodes","severity":"warning","node":null,"#),
            "{json}"
        );
        assert!(json.ends_with("\"}]}"), "{json}");
        // Balanced outside strings, and no raw control characters.
        let (mut depth, mut in_str, mut escaped) = (0i32, false, false);
        for c in json.chars() {
            assert!(u32::from(c) >= 0x20, "raw control character in {json}");
            match (in_str, escaped, c) {
                (true, true, _) => escaped = false,
                (true, false, '\\') => escaped = true,
                (true, false, '"') | (false, _, '"') => in_str = !in_str,
                (false, _, '{' | '[') => depth += 1,
                (false, _, '}' | ']') => depth -= 1,
                _ => {}
            }
            assert!(depth >= 0);
        }
        assert_eq!((depth, in_str), (0, false));
        let empty = DeploymentReport {
            quorum: 1,
            nodes: vec![],
            findings: vec![],
        };
        assert_eq!(
            empty.to_json(),
            r#"{"quorum":1,"worst":null,"nodes":[],"findings":[]}"#
        );
    }

    #[test]
    fn display_rendering() {
        let report = sample_report();
        assert_eq!(report.worst(), Some(Severity::Error));
        let text = report.to_string();
        assert!(
            text.starts_with("2 nodes, quorum 2: 1 error(s), 1 warning(s), 0 note(s)\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "  node           state  version  role    aof     cluster  uptime  clock\n"
            ),
            "{text}"
        );
        assert!(text.contains("  10.0.0.0:6379  up     7.2.4    master  always  no       60m     +0.2 ms ±1.0 ms\n"), "{text}");
        assert!(
            text.contains("  10.0.0.1:6379  down   -        -       -       -        -       -\n"),
            "{text}"
        );
        assert!(
            text.contains("ERROR    10.0.0.1:6379: unreachable (refused"),
            "{text}"
        );
        assert!(text.contains("\n         fix: start the node"), "{text}");
        let finding = &report.findings[1];
        assert_eq!(
            finding.to_string(),
            format!("warning: {} (fix: {})", finding.message, finding.fix)
        );
        assert_eq!(short_duration(Duration::from_secs(119)), "119s");
        assert_eq!(short_duration(Duration::from_secs(7199)), "119m");
        assert_eq!(short_duration(Duration::from_secs(172_799)), "47h");
        assert_eq!(short_duration(Duration::from_secs(172_800)), "2d");
        assert_eq!(signed_ms(-1_260), "-1.3");
        assert_eq!(signed_ms(-1_249), "-1.2");
        assert_eq!(signed_ms(5_000_050), "+5000.1");
        assert_eq!(signed_ms(-49), "0.0");
        assert_eq!(signed_ms(49), "0.0");
        assert_eq!(signed_ms(-50), "-0.1");
        assert_eq!(signed_ms(i64::MIN), "-9223372036854775.8");
    }
}
