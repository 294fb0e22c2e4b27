//! The report as text for people and as JSON for scripts.
//!
//! The text groups findings that say the same thing about several nodes into one line
//! naming them all ("appendonly is off" on five nodes is one line, not five); the JSON keeps
//! one finding per node, as [`DeploymentReport::findings`] does.

use std::fmt::{self, Write as _};
use std::time::Duration;

use super::{DeploymentReport, Finding, KeyCensus, NodeInfo, Severity};
use crate::inspect::json::{JsonObject, json_opt_str};

/// The JSON document of [`DeploymentReport::to_json`].
pub(super) fn json(report: &DeploymentReport) -> String {
    let mut out = String::with_capacity(256 + 512 * report.nodes.len());
    out.push('{');
    out.push_str("\"quorum\":");
    out.push_str(&report.quorum.to_string());
    out.push_str(",\"worst\":");
    json_opt_str(&mut out, report.worst().as_ref().map(Severity::as_str));
    out.push_str(",\"nodes\":[");
    for (i, node) in report.nodes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        node_json(&mut out, node);
    }
    out.push_str("],\"findings\":[");
    for (i, finding) in report.findings.iter().enumerate() {
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

/// Findings that differ only in their node, merged: the nodes of each group in the order
/// the findings came (most severe first), node-less findings alone.
pub(super) fn group(findings: &[Finding]) -> Vec<(&Finding, Vec<&str>)> {
    let mut groups: Vec<(&Finding, Vec<&str>)> = Vec::new();
    for finding in findings {
        let same = |g: &&mut (&Finding, Vec<&str>)| {
            let first = g.0;
            first.node.is_some()
                && finding.node.is_some()
                && (first.kind, first.severity, &first.message, &first.fix)
                    == (
                        finding.kind,
                        finding.severity,
                        &finding.message,
                        &finding.fix,
                    )
        };
        match groups.iter_mut().find(same) {
            Some(g) => g.1.extend(finding.node.as_deref()),
            None => groups.push((finding, finding.node.as_deref().into_iter().collect())),
        }
    }
    groups
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
        let name_width = widths[0];
        for node in self.nodes.iter().filter(|n| n.reachable) {
            writeln!(
                f,
                "  {:<name_width$}  keys: {}",
                node.name,
                census_line(node.keys)
            )?;
        }
        if self.nodes.iter().any(|n| n.reachable) {
            writeln!(f)?;
        }
        if self.findings.is_empty() {
            return writeln!(f, "no findings");
        }
        for (finding, nodes) in group(&self.findings) {
            let label = finding.severity.as_str().to_ascii_uppercase();
            match nodes.as_slice() {
                [] => writeln!(f, "{label:<8} {}", finding.message)?,
                nodes => writeln!(f, "{label:<8} {}: {}", nodes.join(", "), finding.message)?,
            }
            writeln!(f, "{:<8} fix: {}", "", finding.fix)?;
        }
        Ok(())
    }
}

/// A node's census in one line: `2 readers, 1 permit held, 1 count record,
/// 0 waiting lists`, or why there is none.
pub(super) fn census_line(census: Option<KeyCensus>) -> String {
    let Some(c) = census else {
        return "not counted (SCAN, TYPE or PTTL refused, or no answer in time)".to_owned();
    };
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut line = [
        plural(c.readers, "reader", "readers"),
        plural(c.permits, "permit held", "permits held"),
        plural(c.count_records, "count record", "count records"),
        plural(c.waiting_lists, "waiting list", "waiting lists"),
    ]
    .join(", ");
    if c.partial {
        let _ = write!(line, " (partial: stopped after {} keys)", c.scanned);
    }
    line
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
        version(n),
        match (&n.role, &n.sentinel_master) {
            (Some(role), Some(at)) => format!("{role} {at} ({})", sentinels_agreeing(n, at)),
            _ if !n.cluster_shards.is_empty() => cluster_topology(&n.cluster_shards),
            (role, _) => opt(role),
        },
        aof,
        cluster,
        uptime,
        clock,
    ]
}

/// `cluster of 3 shards, 3 replicas`: a Cluster member's topology (replicas of the shards
/// that answered).
fn cluster_topology(shards: &[super::ClusterShard]) -> String {
    let replicas: usize = shards.iter().map(|s| s.replicas.len()).sum();
    let silent = shards.iter().filter(|s| !s.answered).count();
    let mut text = format!("cluster of {} shards, {replicas} replicas", shards.len());
    if silent > 0 {
        text.push_str(&format!(" ({silent} shards silent)"));
    }
    let marked: usize = shards.iter().filter_map(|s| s.slots_marked).sum();
    let kept_out: usize = shards.iter().filter_map(|s| s.slots_kept_out).sum();
    if marked > 0 {
        text.push_str(&format!(", {marked} slots in use, {kept_out} kept out"));
    }
    text
}

/// `sentinels 3/3`: how many of the sentinels of the member's group named `master`, with
/// `, 2 learnt` when its URL lists only some of them.
fn sentinels_agreeing(n: &NodeInfo, master: &str) -> String {
    let agreeing = n
        .sentinels
        .iter()
        .filter(|s| s.master.as_deref() == Some(master))
        .count();
    let group = n.sentinel_group_size.unwrap_or(n.sentinels.len());
    let learnt = n.sentinels.iter().filter(|s| !s.listed).count();
    if learnt == 0 {
        format!("sentinels {agreeing}/{group}")
    } else {
        format!("sentinels {agreeing}/{group}, {learnt} learnt")
    }
}

/// `redis 7.0.15` or `valkey 9.1.2`; just `redis_version` when the kind is unknown.
fn version(n: &NodeInfo) -> String {
    match (n.server_kind, &n.server_version, &n.redis_version) {
        (Some(kind), Some(version), _) => format!("{kind} {version}"),
        (_, _, Some(version)) => version.clone(),
        _ => "-".to_owned(),
    }
}

/// `12s`, `5m`, `3h`, `4d`.
pub(super) fn short_duration(d: Duration) -> String {
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
pub(super) fn signed_ms(micros: i64) -> String {
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
    o.str("server_kind", n.server_kind.as_ref().map(|k| k.as_str()));
    o.str("server_version", n.server_version.as_deref());
    o.str("run_id", n.run_id.as_deref());
    o.str("role", n.role.as_deref());
    o.str("master_replid", n.master_replid.as_deref());
    o.str("master_host", n.master_host.as_deref());
    o.num("master_port", n.master_port.map(i128::from));
    o.num("replicas", n.replicas.map(i128::from));
    o.num(
        "replica_lag_s",
        n.replica_lag.map(|lag| i128::from(lag.as_secs())),
    );
    o.bool("promoted", n.promoted);
    o.bool("appendonly", n.appendonly);
    o.str("appendfsync", n.appendfsync.as_deref());
    o.str("save", n.save.as_deref());
    o.num("maxmemory", n.maxmemory.map(i128::from));
    o.str("maxmemory_policy", n.maxmemory_policy.as_deref());
    o.bool("cluster_enabled", n.cluster_enabled);
    o.str("sentinel_master", n.sentinel_master.as_deref());
    o.array("cluster_shards", &n.cluster_shards, |out, shard| {
        let mut s = JsonObject::new(out);
        s.str("master", Some(&shard.master));
        s.bool("answered", Some(shard.answered));
        s.array("replicas", &shard.replicas, |out, r| {
            crate::inspect::json::json_str(out, r)
        });
        s.num(
            "replica_lag_s",
            shard.replica_lag.map(|lag| i128::from(lag.as_secs())),
        );
        let count = |n: Option<usize>| n.and_then(|n| i128::try_from(n).ok());
        s.num("slots_marked", count(shard.slots_marked));
        s.num("slots_kept_out", count(shard.slots_kept_out));
        s.end();
    });
    o.array("sentinels", &n.sentinels, |out, answer| {
        let mut a = JsonObject::new(out);
        a.str("sentinel", Some(&answer.sentinel));
        a.bool("listed", Some(answer.listed));
        a.str("master", answer.master.as_deref());
        a.end();
    });
    o.num(
        "sentinel_group_size",
        n.sentinel_group_size.and_then(|g| i128::try_from(g).ok()),
    );
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
    o.key("keys");
    match &n.keys {
        None => o.out.push_str("null"),
        Some(c) => census_json(o.out, c),
    }
    o.end();
}

fn census_json(out: &mut String, c: &KeyCensus) {
    let mut o = JsonObject::new(out);
    o.num("readers", Some(i128::from(c.readers)));
    o.num("permits", Some(i128::from(c.permits)));
    o.num("count_records", Some(i128::from(c.count_records)));
    o.num("waiting_lists", Some(i128::from(c.waiting_lists)));
    o.num("scanned", Some(i128::from(c.scanned)));
    o.bool("partial", Some(c.partial));
    o.end();
}

pub(super) fn micros(d: Duration) -> i128 {
    i128::try_from(d.as_micros()).unwrap_or(i128::MAX)
}
