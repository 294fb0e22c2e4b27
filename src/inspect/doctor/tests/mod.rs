//! Unit tests of the check without a server, one file per part of the check: the findings
//! (`findings`, `durability`, `failover`, `kept_out`, `keys`), the probe's reading of `INFO` and the clock
//! estimate (`probe`), and the rendering (`render`). This file holds their fixtures.

use std::time::Duration;

use super::findings::{Limits, findings, suggest_ttl};
use super::probe::{apply_info, estimate_offset};
use super::render::{short_duration, signed_ms};
use super::*;
use crate::protocol::info;
use crate::rules::safety;
use FindingKind as K;
use Severity::{Error as E, Info as I, Warning as W};

mod durability;
mod failover;
mod findings;
mod kept_out;
mod keys;
mod probe;
mod render;

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
        server_kind: None,
        server_version: None,
        run_id: Some(format!("run{i}")),
        role: Some("master".into()),
        master_replid: Some(format!("replid{i}")),
        master_host: None,
        master_port: None,
        replicas: Some(0),
        replica_lag: None,
        promoted: Some(false),
        appendonly: Some(true),
        appendfsync: Some("always".into()),
        save: Some("3600 1 300 100 60 10000".into()),
        maxmemory: Some(0),
        maxmemory_policy: Some("noeviction".into()),
        cluster_enabled: Some(false),
        sentinel_master: None,
        sentinels: Vec::new(),
        sentinel_group_size: None,
        cluster_shards: Vec::new(),
        uptime: Some(Duration::from_secs(3600)),
        clock: Some(ClockOffset {
            offset_micros: 200,
            uncertainty: MS(1),
            rtt: MS(2),
        }),
        keys: None,
    }
}

fn set(n: usize) -> Vec<NodeInfo> {
    (0..n).map(healthy).collect()
}

fn kinds(infos: &[NodeInfo], limits: &Limits) -> Vec<(FindingKind, Severity, Option<String>)> {
    findings(infos, safety::majority(infos.len()), limits)
        .into_iter()
        .map(|f| (f.kind, f.severity, f.node))
        .collect()
}

fn node(i: usize) -> Option<String> {
    Some(format!("10.0.0.{i}:6379"))
}

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
