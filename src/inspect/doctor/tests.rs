//! Unit tests of the check without a server: findings, rendering, clock estimate and the
//! reading of `INFO` into a [`NodeInfo`].

use std::time::Duration;

use super::findings::{Limits, findings, suggest_ttl};
use super::probe::{apply_info, estimate_offset};
use super::render::{short_duration, signed_ms};
use super::*;
use crate::protocol::info;
use crate::rules::safety;

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
        appendonly: Some(true),
        appendfsync: Some("always".into()),
        save: Some("3600 1 300 100 60 10000".into()),
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
    findings(infos, safety::majority(infos.len()), limits)
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
        let mut expected: Vec<_> = expected.into_iter().map(|(k, s)| (k, s, node(1))).collect();
        // Off on one node and on on the others is also a mismatch across the set.
        if appendonly == Some(false) {
            expected.push((K::PersistenceMismatch, W, None));
        }
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
    apply_info(&mut info, &info::parse(text));
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
        json.contains(r#"{"name":"10.0.0.1:6379","reachable":false,"error":"refused \"quoted\"","#),
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
        text.contains("  node           state  version  role    aof     cluster  uptime  clock\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "  10.0.0.0:6379  up     7.2.4    master  always  no       60m     +0.2 ms ±1.0 ms\n"
        ),
        "{text}"
    );
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

#[test]
fn known_issues_by_version_and_persistence() {
    // kind, version, appendonly, appendfsync, expected severity.
    type Case = (
        ServerKind,
        &'static str,
        Option<bool>,
        Option<&'static str>,
        Option<Severity>,
    );
    let table: [Case; 11] = [
        (
            ServerKind::Redis,
            "6.2.14",
            Some(true),
            Some("always"),
            Some(I),
        ),
        (
            ServerKind::Redis,
            "6.0.20",
            Some(true),
            Some("always"),
            Some(I),
        ),
        // Only `always` promises a write is on disk when acknowledged.
        (
            ServerKind::Redis,
            "6.2.14",
            Some(true),
            Some("everysec"),
            None,
        ),
        (
            ServerKind::Redis,
            "6.2.14",
            Some(false),
            Some("always"),
            None,
        ),
        (
            ServerKind::Redis,
            "7.0.0",
            Some(true),
            Some("always"),
            Some(W),
        ),
        (
            ServerKind::Redis,
            "7.0.4",
            Some(true),
            Some("everysec"),
            Some(W),
        ),
        (ServerKind::Redis, "7.0.4", None, None, None),
        (ServerKind::Redis, "7.0.5", Some(true), Some("always"), None),
        (
            ServerKind::Redis,
            "7.0.15",
            Some(true),
            Some("always"),
            None,
        ),
        (
            ServerKind::Valkey,
            "7.2.4",
            Some(true),
            Some("always"),
            None,
        ),
        (
            ServerKind::Redis,
            "unknown",
            Some(true),
            Some("always"),
            None,
        ),
    ];
    for (kind, version, appendonly, fsync, expected) in table {
        let mut infos = set(3);
        infos[2].server_kind = Some(kind);
        infos[2].server_version = Some(version.into());
        infos[2].appendonly = appendonly;
        infos[2].appendfsync = fsync.map(str::to_owned);
        let got: Vec<_> = kinds(&infos, &limits())
            .into_iter()
            .filter(|(k, _, _)| *k == K::KnownIssue)
            .collect();
        let want: Vec<_> = expected
            .map(|s| (K::KnownIssue, s, node(2)))
            .into_iter()
            .collect();
        assert_eq!(got, want, "{kind} {version} {appendonly:?} {fsync:?}");
    }
    let mut infos = set(3);
    infos[0].server_kind = Some(ServerKind::Redis);
    infos[0].server_version = Some("7.0.2".into());
    let f = findings(&infos, 2, &limits());
    assert_eq!(f[0].kind, K::KnownIssue);
    assert!(
        f[0].message.starts_with("Redis 7.0.2: the directory"),
        "{}",
        f[0].message
    );
    assert!(
        f[0].message.contains("redis/redis#10737"),
        "{}",
        f[0].message
    );
    assert!(
        f[0].message.contains("redis/redis#11004"),
        "{}",
        f[0].message
    );
    infos[0].server_version = Some("7.0.3".into());
    let f = findings(&infos, 2, &limits());
    assert!(
        !f[0].message.contains("#10737"),
        "fixed in 7.0.3: {}",
        f[0].message
    );
}

#[test]
fn persistence_mismatch_across_the_set() {
    let mismatch = |infos: &[NodeInfo]| {
        findings(infos, 2, &limits())
            .into_iter()
            .filter(|f| f.kind == K::PersistenceMismatch)
            .collect::<Vec<_>>()
    };
    let mut infos = set(3);
    assert_eq!(mismatch(&infos), vec![], "all on");
    for info in &mut infos {
        info.appendonly = Some(false);
    }
    assert_eq!(mismatch(&infos), vec![], "all off");
    infos[1].appendonly = Some(true);
    let found = mismatch(&infos);
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].severity, found[0].node.as_deref()), (W, None));
    assert!(
        found[0]
            .message
            .contains("on at 10.0.0.1:6379 but off at 10.0.0.0:6379, 10.0.0.2:6379"),
        "{}",
        found[0].message
    );
    // Unknown and unreachable nodes are not compared.
    infos[0].appendonly = None;
    infos[2].reachable = false;
    assert_eq!(mismatch(&infos), vec![]);
}

#[test]
fn a_majority_that_can_lose_its_data_together() {
    let found = |infos: &[NodeInfo]| {
        findings(infos, safety::majority(infos.len()), &limits())
            .into_iter()
            .filter(|f| f.kind == K::MajorityMemoryLoss)
            .collect::<Vec<_>>()
    };
    // appendonly, appendfsync, save: whether the node can lose its data.
    let volatile = |info: &mut NodeInfo, how: u8| match how {
        0 => (info.appendonly, info.save) = (Some(false), Some(String::new())),
        1 => (info.appendonly, info.save) = (Some(false), Some("3600 1".into())),
        2 => (info.appendonly, info.save) = (Some(false), None),
        _ => (info.appendonly, info.appendfsync) = (Some(true), Some("no".into())),
    };
    let mut infos = set(5);
    assert_eq!(found(&infos), vec![], "all durable");
    volatile(&mut infos[0], 0);
    volatile(&mut infos[3], 3);
    assert_eq!(found(&infos), vec![], "a minority");
    // everysec loses at most a second: not counted.
    infos[4].appendfsync = Some("everysec".into());
    assert_eq!(found(&infos), vec![], "everysec");
    volatile(&mut infos[2], 1);
    let f = found(&infos);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].severity, f[0].node.as_deref()), (W, None));
    assert_eq!(
        f[0].message,
        "3 of 5 nodes, a majority, can lose their data together: 10.0.0.0:6379 (no \
         persistence at all), 10.0.0.2:6379 (RDB snapshots only), 10.0.0.3:6379 \
         (appendfsync no); a restart of all of them at once (a power cut, a crash) forgets \
         the locks in force, and restart quarantine cannot tell (the nodes look new): a lock \
         may be granted twice until the TTLs of the lost locks have run out (fencing tokens \
         keep their order: they carry the clock)"
    );
    assert!(
        f[0].fix
            .starts_with("give at least 3 of the 5 nodes appendonly yes with appendfsync always"),
        "{}",
        f[0].fix
    );
    // Unreachable nodes and unread settings are not counted.
    infos[2].reachable = false;
    assert_eq!(found(&infos), vec![], "one of three unreachable");
    infos[2].reachable = true;
    infos[2].appendonly = None;
    assert_eq!(found(&infos), vec![], "one of three unknown");
    // appendonly no with snapshot settings unknown (CONFIG refused) counts.
    volatile(&mut infos[2], 2);
    assert!(
        found(&infos)[0]
            .message
            .contains("10.0.0.2:6379 (appendonly no)")
    );
    // One node: it alone is the majority.
    let mut one = set(1);
    volatile(&mut one[0], 0);
    assert!(
        found(&one)[0]
            .fix
            .starts_with("give at least 1 of the 1 nodes")
    );
}

#[test]
fn same_findings_on_several_nodes_render_as_one_line() {
    let mut infos = set(5);
    for info in &mut infos {
        info.appendonly = Some(false);
    }
    infos[3].server_kind = Some(ServerKind::Valkey);
    infos[3].server_version = Some("9.1.2".into());
    infos[4].server_kind = Some(ServerKind::Redis);
    infos[4].server_version = Some("7.2.4".into());
    infos[2].maxmemory = Some(1 << 20);
    infos[2].maxmemory_policy = Some("allkeys-lru".into());
    let report = DeploymentReport {
        quorum: 3,
        findings: findings(&infos, 3, &limits()),
        nodes: infos,
    };
    // Five per node, one for the set (a majority can lose its data), one for maxmemory.
    assert_eq!(report.findings.len(), 7, "still one finding per node");
    let text = report.to_string();
    assert!(
        text.starts_with("5 nodes, quorum 3: 0 error(s), 7 warning(s), 0 note(s)\n"),
        "{text}"
    );
    let names = (0..5)
        .map(|i| format!("10.0.0.{i}:6379"))
        .collect::<Vec<_>>();
    let line = format!("WARNING  {}: appendonly is off: ", names.join(", "));
    assert_eq!(text.matches(&line).count(), 1, "{text}");
    assert_eq!(text.matches("appendonly is off").count(), 1, "{text}");
    assert!(
        text.contains("WARNING  10.0.0.2:6379: maxmemory 1048576 with"),
        "{text}"
    );
    assert!(
        text.contains("WARNING  5 of 5 nodes, a majority, can lose"),
        "{text}"
    );
    assert_eq!(text.matches("fix: ").count(), 3, "{text}");
    // The version column names the server when its kind is known.
    assert!(
        text.contains("  10.0.0.3:6379  up     valkey 9.1.2  master"),
        "{text}"
    );
    assert!(
        text.contains("  10.0.0.4:6379  up     redis 7.2.4   master"),
        "{text}"
    );
    assert!(
        text.contains("  10.0.0.0:6379  up     7.2.4         master"),
        "{text}"
    );
    let json = report.to_json();
    assert_eq!(json.matches(r#""kind":"no_persistence""#).count(), 5);
    assert!(
        json.contains(
            r#""redis_version":"7.2.4","server_kind":"valkey","server_version":"9.1.2","#
        ),
        "{json}"
    );
}

#[test]
fn valkey_info_fills_kind_and_own_version() {
    let text = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n\
                run_id:5415bfbb56f0c8955bbdbabf514e6e0b8a3230e8\r\nuptime_in_seconds:5\r\n";
    let mut node = NodeInfo::new("x:1");
    apply_info(&mut node, &info::parse(text));
    assert_eq!(node.redis_version.as_deref(), Some("7.2.4"));
    assert_eq!(node.server_kind, Some(ServerKind::Valkey));
    assert_eq!(node.server_version.as_deref(), Some("9.1.2"));
    assert_eq!(node.uptime, Some(Duration::from_secs(5)));
}

/// The default TTL ceiling.
const CEILING: Duration = Duration::from_secs(60);

#[test]
fn kept_out_nodes_are_judged_as_an_acquisition_judges_them() {
    use super::kept_out::{Ledger, kept_out};
    let served = |i: usize| Ledger {
        marker: Some(format!("run{i}")),
        record_ms: Some(60_000),
    };
    let mut infos = set(5);
    for info in &mut infos {
        info.appendonly = Some(false);
    }
    // Nodes 3 and 4 restarted empty 10 s ago (uptime 11: at least 10 s old).
    for i in [3, 4] {
        infos[i].run_id = Some(format!("new{i}"));
        infos[i].uptime = Some(Duration::from_secs(11));
    }
    let ledgers: Vec<Option<Ledger>> = (0..5)
        .map(|i| Some(if i < 3 { served(i) } else { Ledger::default() }))
        .collect();
    let found = kept_out(&infos, &ledgers, 0.01, CEILING);
    let message = "restart quarantine keeps its vote out: no marker of its current process (new, \
                   restarted or flushed) while locks may depend on it; votes again within 51 s";
    let got: Vec<(Option<&str>, &str, Severity)> = (found.iter())
        .map(|f| (f.node.as_deref(), f.message.as_str(), f.severity))
        .collect();
    assert_eq!(
        got,
        [
            (Some("10.0.0.3:6379"), message, Severity::Warning),
            (Some("10.0.0.4:6379"), message, Severity::Warning),
        ]
    );
    assert!(found.iter().all(|f| f.kind == FindingKind::KeptOut));
    // Alike: one line of the text report naming both.
    let report = DeploymentReport {
        quorum: 3,
        nodes: infos.clone(),
        findings: found,
    };
    assert!(
        report.to_string().contains(&format!(
            "WARNING  10.0.0.3:6379, 10.0.0.4:6379: {message}\n"
        )),
        "{report}"
    );
    // Without a marker but up for an hour (longer than the record plus drift): quarantine
    // over, they vote once an acquisition has marked them (an admission by age), told as
    // information. An unread node leaves a new ensemble to wait out the TTL ceiling, over
    // for nodes up for an hour; nothing is kept out on a served set whose markers name the
    // current processes.
    let old = set(5);
    let text = "restart quarantine: quarantine over: votes from the attempt after the one that \
                marks it";
    let readmitting: Vec<(Option<String>, String, Severity)> =
        (kept_out(&old, &ledgers, 0.01, CEILING))
            .into_iter()
            .map(|f| (f.node, f.message, f.severity))
            .collect();
    let want = [3, 4].map(|i| {
        (
            Some(format!("10.0.0.{i}:6379")),
            text.to_owned(),
            Severity::Info,
        )
    });
    assert_eq!(readmitting, want);
    let fresh = [None, Some(Ledger::default()), Some(Ledger::default())];
    let waiting = kept_out(&infos[..3], &fresh, 0.01, CEILING);
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    assert!(
        waiting[0].message.contains("quarantine over"),
        "{waiting:?}"
    );
    let mut young = infos[..3].to_vec();
    for info in &mut young {
        info.uptime = Some(Duration::from_secs(2));
    }
    let waiting = kept_out(&young, &fresh, 0.01, CEILING);
    assert!(
        waiting[0].message.contains("waits out the ttl ceiling"),
        "{waiting:?}"
    );
    let all: Vec<Option<Ledger>> = (0..5).map(|i| Some(served(i))).collect();
    assert!(kept_out(&set(5), &all, 0.01, CEILING).is_empty());
}
