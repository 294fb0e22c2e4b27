//! The deployment check (`Redlock::check_deployment`) against real `redis-server`
//! processes, each configured to trigger one finding.
//!
//! The harness's servers run without persistence, so every reachable node without
//! `appendonly` also yields a `no_persistence` warning, and a majority of such nodes a
//! `majority_memory_loss` warning; the expectations list them explicitly.

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    BlackHole, CLOCKSHIFT_REFRESH, ClockFile, Cluster, PORT_HI, PORT_LO, READY_TIMEOUT,
    RedisServer, START_TRIES, ServerExtras, ServerOptions, clockshift_lib, eventually, raw_ping,
    server_clock_offset_ms, unique, wait_until,
};
use quorum_lock::{DeploymentReport, FindingKind, Redlock, ServerKind, Severity};

use FindingKind as K;
use Severity::{Error as E, Info as I, Warning as W};

/// The check must end within its per-node deadline (2.5 s) plus scheduling slack.
const CHECK_BOUND: Duration = Duration::from_millis(4000);

type Summary = Vec<(&'static str, Severity, Option<String>)>;

fn client(urls: &[String]) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .build()
        .expect("valid configuration")
}

/// The node name the client shows for a harness server.
fn name(server: &RedisServer) -> String {
    format!("127.0.0.1:{}", server.port())
}

/// Runs the check, prints it (shown when a test fails) and checks it was quick.
async fn check(redlock: &Redlock) -> DeploymentReport {
    let start = Instant::now();
    let report = redlock.check_deployment().await;
    let took = start.elapsed();
    println!("{report}\n{}\n(took {took:?})", report.to_json());
    assert!(took < CHECK_BOUND, "the check took {took:?}");
    report
}

/// Every finding as (kind, severity, node), sorted, for exact comparison. `known_issue`
/// findings are left out: they depend on the server build the harness runs (the
/// compatibility matrix runs these tests on Redis 6.2 too), and are asserted by
/// `other_builds_report_their_kind_version_and_known_issues`.
fn summary(report: &DeploymentReport) -> Summary {
    let mut s: Summary = report
        .findings
        .iter()
        .filter(|f| f.kind != K::KnownIssue)
        .map(|f| (f.kind.as_str(), f.severity, f.node.clone()))
        .collect();
    s.sort();
    s
}

fn expected(items: impl IntoIterator<Item = (FindingKind, Severity, Option<String>)>) -> Summary {
    let mut s: Summary = items
        .into_iter()
        .map(|(k, sev, node)| (k.as_str(), sev, node))
        .collect();
    s.sort();
    s
}

/// The `no_persistence` warnings of the given node names.
fn no_persistence<'a>(
    names: impl IntoIterator<Item = &'a String>,
) -> impl Iterator<Item = (FindingKind, Severity, Option<String>)> {
    names
        .into_iter()
        .map(|n| (K::NoPersistence, W, Some(n.clone())))
}

/// The warning that a majority of the nodes can lose their data together.
/// The `kept_out` warnings of the given node names: on a new ensemble with a node that
/// cannot be read, the others wait for it (`fresh_needs_all`), as an acquisition does.
/// What doctor finds when only the first of three nodes answers: it has no persistence
/// and is kept out (the others unheard), the other two are unreachable.
fn only_the_first_answers(names: &[String]) -> Summary {
    expected(
        no_persistence(&names[..1])
            .chain(kept_out(&names[..1]))
            .chain([
                (K::Unreachable, E, Some(names[1].clone())),
                (K::Unreachable, E, Some(names[2].clone())),
            ]),
    )
}

/// The report's finding of `kind` (the test fails when there is none).
fn finding_of(report: &DeploymentReport, kind: FindingKind) -> &quorum_lock::Finding {
    (report.findings.iter())
        .find(|f| f.kind == kind)
        .unwrap_or_else(|| panic!("no {} finding: {report}", kind.as_str()))
}

fn kept_out<'a>(
    names: impl IntoIterator<Item = &'a String>,
) -> impl Iterator<Item = (FindingKind, Severity, Option<String>)> {
    names.into_iter().map(|n| (K::KeptOut, W, Some(n.clone())))
}

fn memory_loss() -> (FindingKind, Severity, Option<String>) {
    (K::MajorityMemoryLoss, W, None)
}

fn info_field(server: &RedisServer, section: &str, field: &str) -> Option<String> {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query(&mut server.conn())
        .expect("INFO");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
}

fn extras(args: &[&str]) -> ServerExtras {
    ServerExtras {
        extra_args: args.iter().map(|a| (*a).to_owned()).collect(),
        ..ServerExtras::default()
    }
}

fn appendonly() -> ServerOptions {
    ServerOptions {
        appendonly: true,
        ..ServerOptions::default()
    }
}

#[tokio::test]
async fn healthy_masters_only_lack_persistence() {
    let cluster = Cluster::start(3);
    let names: Vec<String> = cluster.nodes.iter().map(name).collect();
    let redlock = client(&cluster.urls());
    // The check can run in a spawned task.
    let report = tokio::spawn(async move { check(&redlock).await })
        .await
        .expect("check task");

    assert_eq!(
        summary(&report),
        expected(no_persistence(&names).chain([memory_loss()]))
    );
    assert_eq!(report.worst(), Some(W));
    assert_eq!(report.quorum, 2);
    assert_eq!(report.nodes.len(), 3);
    // Per node: in a mixed ensemble (scripts/matrix.sh) the nodes run different versions.
    for ((info, n), node) in report.nodes.iter().zip(&names).zip(&cluster.nodes) {
        assert_eq!(&info.name, n);
        assert!(info.reachable, "{info:?}");
        assert_eq!(info.error, None);
        let version = info_field(node, "server", "redis_version");
        assert_eq!(info.redis_version, version);
        assert_eq!(info.run_id.as_ref().map(String::len), Some(40), "{info:?}");
        assert_eq!(info.role.as_deref(), Some("master"));
        assert!(!info.is_replica());
        assert_eq!(info.master_replid.as_ref().map(String::len), Some(40));
        assert_eq!(
            (info.master_host.as_deref(), info.master_port),
            (None, None)
        );
        assert_eq!(info.appendonly, Some(false));
        assert_eq!(info.save.as_deref(), Some(""), "the harness's --save \"\"");
        assert_eq!(
            info.appendfsync.as_deref(),
            Some("everysec"),
            "Redis default"
        );
        assert_eq!(info.maxmemory, Some(0));
        assert_eq!(info.maxmemory_policy.as_deref(), Some("noeviction"));
        assert_eq!(info.cluster_enabled, Some(false));
        assert!(info.uptime.is_some_and(|u| u < Duration::from_secs(600)));
        // Same host, same clock: the server's time lies within the round trip.
        let clock = info.clock.expect("clock sampled");
        assert!(clock.rtt > Duration::ZERO && clock.rtt < Duration::from_secs(1));
        assert_eq!(clock.uncertainty, clock.rtt / 2);
        assert!(clock.excess() <= Duration::from_millis(1), "{clock:?}");
    }
    let mut run_ids: Vec<_> = report.nodes.iter().map(|i| i.run_id.clone()).collect();
    run_ids.dedup();
    assert_eq!(run_ids.len(), 3, "independent servers");

    let json = report.to_json();
    assert!(json.starts_with(r#"{"quorum":2,"worst":"warning","nodes":[{"name":""#));
    assert_eq!(
        json.matches(r#""kind":"no_persistence","severity":"warning""#)
            .count(),
        3
    );
    let text = report.to_string();
    assert!(text.starts_with("3 nodes, quorum 2: 0 error(s), 4 warning(s), 0 note(s)"));
    for n in &names {
        assert!(text.contains(&format!("  {n}  up ")), "{text}");
    }
}

#[tokio::test]
async fn unreachable_nodes_warn_then_break_the_quorum() {
    let mut cluster = Cluster::start(3);
    let names: Vec<String> = cluster.nodes.iter().map(name).collect();
    let redlock = client(&cluster.urls());

    cluster.nodes[2].kill();
    let report = check(&redlock).await;
    assert_eq!(
        summary(&report),
        expected(
            no_persistence(&names[..2])
                .chain(kept_out(&names[..2]))
                .chain([(K::Unreachable, W, Some(names[2].clone())), memory_loss(),])
        )
    );
    let down = &report.nodes[2];
    assert!(!down.reachable);
    assert!(down.error.is_some(), "{down:?}");
    assert_eq!((down.run_id.as_ref(), down.clock), (None, None));

    cluster.nodes[1].kill();
    let report = check(&redlock).await;
    assert_eq!(summary(&report), only_the_first_answers(&names));
    assert_eq!(report.worst(), Some(E));
    assert_eq!(report.findings[0].severity, E, "most severe first");
}

#[tokio::test]
async fn hung_nodes_do_not_hold_up_the_check() {
    let cluster = Cluster::start(3);
    let hole = BlackHole::start();
    let paused = RedisServer::start();
    paused.pause();
    let mut urls = cluster.urls();
    urls.push(hole.url());
    urls.push(paused.url());
    let names: Vec<String> = cluster.nodes.iter().map(name).collect();
    let report = check(&client(&urls)).await;
    assert_eq!(
        summary(&report),
        expected(no_persistence(&names).chain(kept_out(&names)).chain([
            (
                K::Unreachable,
                W,
                Some(format!("127.0.0.1:{}", hole.port()))
            ),
            (K::Unreachable, W, Some(name(&paused))),
            memory_loss(),
        ]))
    );
    assert!(hole.accepted() >= 1, "the black hole was contacted");
}

#[tokio::test]
async fn credentials_are_used_and_refusals_are_unreachable() {
    let server = RedisServer::start_with(ServerOptions {
        password: Some("s3cret".into()),
        ..ServerOptions::default()
    });
    let port = server.port();
    let redlock = client(&[
        server.url(),
        format!("redis://localhost:{port}"),
        format!("redis://:wrong@127.0.0.1:{port}/1"),
    ]);
    let names: Vec<String> = redlock.nodes().map(str::to_owned).collect();
    let report = check(&redlock).await;
    assert_eq!(summary(&report), only_the_first_answers(&names));
    assert!(report.nodes[0].reachable);
    for refused in &report.nodes[1..] {
        assert!(!refused.reachable, "{refused:?}");
        let error = refused.error.as_deref().unwrap_or_default();
        assert!(
            error.contains("NOAUTH") || error.contains("WRONGPASS") || error.contains("auth"),
            "{error}"
        );
    }
}

#[cfg(feature = "tls")]
#[tokio::test]
async fn tls_nodes_are_checked_over_tls() {
    let server = RedisServer::start_with(ServerOptions {
        tls: true,
        ..ServerOptions::default()
    });
    let redlock = Redlock::builder()
        .node(server.url())
        .tls_root_certificate(server.ca_pem().expect("test CA"))
        .build()
        .expect("valid configuration");
    let n = name(&server);
    let report = check(&redlock).await;
    assert_eq!(
        summary(&report),
        expected(no_persistence([&n]).chain([(K::SingleNode, I, None), memory_loss()]))
    );
    assert!(report.nodes[0].clock.is_some());
}

#[tokio::test]
async fn the_same_server_listed_twice_votes_twice() {
    let cluster = Cluster::start(2);
    let port = cluster.nodes[0].port();
    let other = cluster.nodes[1].url();
    // Different names for one server pass the builder's duplicate check.
    for alias in [
        format!("redis://localhost:{port}"),
        format!("redis://127.0.0.1:{port}/1"),
    ] {
        let redlock = client(&[cluster.nodes[0].url(), alias, other.clone()]);
        let names: Vec<String> = redlock.nodes().map(str::to_owned).collect();
        let report = check(&redlock).await;
        assert_eq!(
            summary(&report),
            expected(no_persistence(&names).chain([
                (K::DuplicateServer, E, Some(names[1].clone())),
                memory_loss(),
            ]))
        );
        assert_eq!(report.nodes[0].run_id, report.nodes[1].run_id);
        let finding = &report.findings[0];
        assert!(finding.message.contains(&names[0]), "{}", finding.message);
        assert_eq!(finding.fix, "list each Redis server once");
    }
}

/// A master, its replica, and two independent masters.
fn master_replica_and_two_others() -> (RedisServer, RedisServer, Cluster) {
    let master = RedisServer::start();
    let replica = RedisServer::start_extended(
        ServerOptions::default(),
        extras(&["--replicaof", "127.0.0.1", &master.port().to_string()]),
    );
    (master, replica, Cluster::start(2))
}

#[tokio::test]
async fn replicas_are_not_independent_masters() {
    let (master, replica, others) = master_replica_and_two_others();
    let [m, r, o1, o2] = [&master, &replica, &others.nodes[0], &others.nodes[1]].map(name);

    // By address: the replica names a listed master (even before it has synchronised).
    let report = check(&client(&[
        master.url(),
        replica.url(),
        others.nodes[0].url(),
    ]))
    .await;
    assert_eq!(
        summary(&report),
        expected(
            no_persistence([&m, &r, &o1])
                .chain([(K::Replicated, E, Some(r.clone())), memory_loss()])
        )
    );
    let info = &report.nodes[1];
    assert!(info.is_replica(), "{info:?}");
    assert_eq!(info.role.as_deref(), Some("slave"));
    assert_eq!(info.master_host.as_deref(), Some("127.0.0.1"));
    assert_eq!(info.master_port, Some(master.port()));

    // By replication ID: the master listed under another name than the replica knows.
    wait_until(Duration::from_secs(10), "replica in sync", || {
        info_field(&replica, "replication", "master_link_status").as_deref() == Some("up")
    });
    let alias = format!("redis://localhost:{}", master.port());
    let redlock = client(&[alias, replica.url(), others.nodes[0].url()]);
    let m_alias = format!("localhost:{}", master.port());
    let report = check(&redlock).await;
    assert_eq!(
        summary(&report),
        expected(
            no_persistence([&m_alias, &r, &o1])
                .chain([(K::Replicated, E, Some(r.clone())), memory_loss()])
        )
    );
    assert_eq!(report.nodes[0].master_replid, report.nodes[1].master_replid);
    assert!(
        report.findings[0].message.contains("shares replication ID"),
        "{}",
        report.findings[0].message
    );

    // A replica whose master is not listed: no lock can be written on it.
    let report = check(&client(&[
        replica.url(),
        others.nodes[0].url(),
        others.nodes[1].url(),
    ]))
    .await;
    assert_eq!(
        summary(&report),
        expected(
            no_persistence([&r, &o1, &o2]).chain([(K::Replica, W, Some(r.clone())), memory_loss()])
        )
    );
}

#[tokio::test]
async fn a_master_that_a_failover_can_replace_is_flagged() {
    let (master, replica, others) = master_replica_and_two_others();
    wait_until(Duration::from_secs(10), "replica in sync", || {
        info_field(&replica, "replication", "master_link_status").as_deref() == Some("up")
    });

    // The master is listed, its replica not: a failover behind the master's address
    // would hand its vote to the replica.
    let (report, message) = failover_risk_alone(&master, &others).await;
    assert_eq!(report.nodes[0].replicas, Some(1));
    assert_eq!(report.nodes[0].promoted, Some(false));
    assert!(message.starts_with("has a replica: "), "{message}");

    // The replica promoted, and listed where the master was: a master since a moment,
    // whose uptime says otherwise.
    let () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut replica.conn())
        .unwrap();
    let (report, message) = failover_risk_alone(&replica, &others).await;
    assert_eq!(report.nodes[0].promoted, Some(true));
    assert!(
        message.starts_with("was promoted from a replica since it started: "),
        "{message}"
    );
}

/// The check of `first` and `others`' two independent masters, which must find the
/// failover risk of `first` beside what such a set always has; the report and that
/// finding's message.
async fn failover_risk_alone(first: &RedisServer, others: &Cluster) -> (DeploymentReport, String) {
    let report = check(&client(&[
        first.url(),
        others.nodes[0].url(),
        others.nodes[1].url(),
    ]))
    .await;
    let [f, o1, o2] = [first, &others.nodes[0], &others.nodes[1]].map(name);
    assert_eq!(
        summary(&report),
        expected(
            no_persistence([&f, &o1, &o2])
                .chain([(K::FailoverRisk, W, Some(f.clone())), memory_loss()])
        )
    );
    let message = finding_of(&report, K::FailoverRisk).message.clone();
    (report, message)
}

#[tokio::test]
async fn cluster_mode_is_flagged() {
    let cluster = Cluster::start(2);
    // `nodes.conf` is relative to the server's own `--dir`.
    let sharded = RedisServer::start_extended(
        ServerOptions::default(),
        extras(&[
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
        ]),
    );
    assert!(sharded.dir().join("nodes.conf").exists());
    let mut urls = cluster.urls();
    urls.push(sharded.url());
    let mut names: Vec<String> = cluster.nodes.iter().map(name).collect();
    names.push(name(&sharded));
    let report = check(&client(&urls)).await;
    assert_eq!(
        summary(&report),
        expected(
            no_persistence(&names)
                .chain(kept_out(&names[..2]))
                .chain([(K::ClusterMode, W, Some(name(&sharded))), memory_loss()])
        )
    );
    assert_eq!(report.nodes[2].cluster_enabled, Some(true));
    assert_eq!(report.nodes[0].cluster_enabled, Some(false));
}

#[tokio::test]
async fn node_counts_even_two_and_one() {
    let cluster = Cluster::start(4);
    let urls = cluster.urls();
    let names: Vec<String> = cluster.nodes.iter().map(name).collect();
    for (n, finding) in [
        (4, (K::EvenNodeCount, W)),
        (2, (K::TooFewNodes, W)),
        (1, (K::SingleNode, I)),
    ] {
        let report = check(&client(&urls[..n])).await;
        assert_eq!(
            summary(&report),
            expected(
                no_persistence(&names[..n]).chain([(finding.0, finding.1, None), memory_loss()])
            ),
            "{n} nodes"
        );
        assert_eq!(report.quorum, n / 2 + 1);
    }
}

#[tokio::test]
async fn append_only_file_and_fsync_policy() {
    let always = RedisServer::start_with(appendonly());
    let everysec =
        RedisServer::start_extended(appendonly(), extras(&["--appendfsync", "everysec"]));
    let never = RedisServer::start_extended(appendonly(), extras(&["--appendfsync", "no"]));
    let redlock = client(&[always.url(), everysec.url(), never.url()]);
    let report = check(&redlock).await;
    assert_eq!(
        summary(&report),
        expected([
            (K::WeakFsync, I, Some(name(&everysec))),
            (K::WeakFsync, W, Some(name(&never))),
        ])
    );
    let fsync: Vec<_> = report
        .nodes
        .iter()
        .map(|i| (i.appendonly, i.appendfsync.as_deref()))
        .collect();
    assert_eq!(
        fsync,
        [
            (Some(true), Some("always")),
            (Some(true), Some("everysec")),
            (Some(true), Some("no")),
        ]
    );

    // CONFIG refused by an ACL: appendonly still known (INFO), appendfsync unknown.
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "-config"])
        .query(&mut always.conn())
        .expect("ACL SETUSER");
    let report = check(&redlock).await;
    assert_eq!(
        summary(&report),
        expected([
            (K::FsyncUnknown, I, Some(name(&always))),
            (K::WeakFsync, I, Some(name(&everysec))),
            (K::WeakFsync, W, Some(name(&never))),
        ])
    );
    assert_eq!(report.nodes[0].appendonly, Some(true));
    assert_eq!(report.nodes[0].appendfsync, None);
    assert_eq!(
        report.nodes[0].error, None,
        "a refused CONFIG is expected, not an error"
    );
}

#[tokio::test]
async fn eviction_policies_that_can_drop_lock_keys() {
    let lru = RedisServer::start_extended(
        appendonly(),
        extras(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]),
    );
    let volatile = RedisServer::start_extended(
        appendonly(),
        extras(&["--maxmemory", "100mb", "--maxmemory-policy", "volatile-ttl"]),
    );
    let safe = RedisServer::start_extended(
        appendonly(),
        extras(&["--maxmemory", "100mb", "--maxmemory-policy", "noeviction"]),
    );
    let report = check(&client(&[lru.url(), volatile.url(), safe.url()])).await;
    assert_eq!(
        summary(&report),
        expected([
            (K::Eviction, W, Some(name(&lru))),
            (K::Eviction, W, Some(name(&volatile))),
        ])
    );
    assert_eq!(report.nodes[0].maxmemory, Some(100 << 20));
    assert_eq!(
        report.nodes[0].maxmemory_policy.as_deref(),
        Some("allkeys-lru")
    );
}

#[tokio::test]
async fn a_ttl_eaten_by_drift_and_node_timeout() {
    let cluster = Cluster::start(3);
    let names: Vec<String> = cluster.nodes.iter().map(name).collect();
    let redlock = Redlock::builder()
        .nodes(cluster.urls())
        .default_ttl(Duration::from_millis(120))
        .node_timeout(Duration::from_millis(100))
        .build()
        .expect("accepted: some validity is left");
    let report = check(&redlock).await;
    assert_eq!(
        summary(&report),
        expected(no_persistence(&names).chain([(K::TtlBudget, W, None), memory_loss()]))
    );
    let finding = finding_of(&report, K::TtlBudget);
    assert!(finding.fix.contains("at least 209 ms"), "{}", finding.fix);
}

/// Starts a server whose wall clock runs `file`'s offset ahead of ours.
fn shifted_server(file: &ClockFile) -> RedisServer {
    RedisServer::start_extended(
        ServerOptions::default(),
        ServerExtras {
            clock_offset_file: Some(file.path().to_owned()),
            ..ServerExtras::default()
        },
    )
}

fn skip_without_cc(test: &str) -> bool {
    if clockshift_lib().is_none() {
        eprintln!(
            "skipping {test}: no `cc` to build the clockshift shim (tests/shim/clockshift.c)"
        );
        return true;
    }
    false
}

/// Whether `server`'s clock is `want_ms` off ours, give or take 100 ms plus the round trip.
fn offset_near(server: &RedisServer, want_ms: f64) -> bool {
    let (got, rtt) = server_clock_offset_ms(server);
    (got - want_ms).abs() < 100.0 + rtt.as_secs_f64() * 1e3
}

#[test]
fn clock_shim_shifts_a_running_server() {
    if skip_without_cc("clock_shim_shifts_a_running_server") {
        return;
    }
    let file = ClockFile::new(5_000);
    let server = shifted_server(&file);
    let plain = RedisServer::start();
    let (offset, rtt) = server_clock_offset_ms(&server);
    assert!(
        offset_near(&server, 5_000.0),
        "offset {offset} ms (rtt {rtt:?})"
    );
    assert!(offset_near(&plain, 0.0), "an unshifted server is in sync");

    // Moving the offset moves the running server's clock within the refresh period.
    file.set(-3_000);
    wait_until(CLOCKSHIFT_REFRESH * 20, "the clock to move to -3 s", || {
        offset_near(&server, -3_000.0)
    });
    file.set(120_000);
    wait_until(
        CLOCKSHIFT_REFRESH * 20,
        "the clock to move to +120 s",
        || offset_near(&server, 120_000.0),
    );
    // A malformed file keeps the last offset.
    std::fs::write(file.path(), "soon\n").expect("write");
    std::thread::sleep(CLOCKSHIFT_REFRESH * 3);
    assert!(offset_near(&server, 120_000.0));
    // The server keeps working under the shim (monotonic clocks are not shifted).
    let pong: String = redis::cmd("PING").query(&mut server.conn()).expect("PING");
    assert_eq!(pong, "PONG");
    assert!(server.is_running());
}

#[tokio::test]
async fn clock_skew_beyond_drift_and_beyond_the_ttl() {
    if skip_without_cc("clock_skew_beyond_drift_and_beyond_the_ttl") {
        return;
    }
    let file = ClockFile::new(5_000);
    let cluster = Cluster::start(2);
    let shifted = shifted_server(&file);
    let mut urls = cluster.urls();
    urls.push(shifted.url());
    let mut names: Vec<String> = cluster.nodes.iter().map(name).collect();
    names.push(name(&shifted));
    // Default TTL 30 s: drift allowance 302 ms.
    let redlock = client(&urls);

    for (offset_ms, severity) in [(5_000, W), (45_000, E), (-2_000, W)] {
        file.set(offset_ms);
        eventually(Duration::from_secs(2), "the shifted clock to move", || {
            offset_near(&shifted, offset_ms as f64)
        })
        .await;
        let report = check(&redlock).await;
        // Shifted back before the server's start, `uptime_in_seconds` is negative: the
        // node's age is unknown and restart quarantine keeps it out (`no_identity`), as
        // an acquisition would, until its uptime is positive again.
        let mut findings = summary(&report);
        findings.retain(|f| {
            f != &(
                "kept_out",
                W,
                Some(name(&shifted)).filter(|_| offset_ms < 0),
            )
        });
        assert_eq!(
            findings,
            expected(no_persistence(&names).chain([
                (K::ClockSkew, severity, Some(name(&shifted))),
                memory_loss(),
            ])),
            "offset {offset_ms} ms"
        );
        let clock = report.nodes[2].clock.expect("clock sampled");
        let measured_ms = clock.offset_micros as f64 / 1e3;
        assert!(
            (measured_ms - offset_ms as f64).abs() < 100.0 + clock.uncertainty.as_secs_f64() * 1e3,
            "measured {measured_ms} ms for {offset_ms} ms"
        );
        for unshifted in &report.nodes[..2] {
            let c = unshifted.clock.expect("clock sampled");
            assert!(c.excess() <= Duration::from_millis(1), "{c:?}");
        }
    }
}

/// The kind and own version a harness server reports, read with `INFO server`.
fn kind_and_version(server: &RedisServer) -> (ServerKind, String) {
    match info_field(server, "server", "valkey_version") {
        Some(v) => (ServerKind::Valkey, v),
        None => (
            ServerKind::Redis,
            info_field(server, "server", "redis_version").expect("redis_version"),
        ),
    }
}

#[tokio::test]
async fn nodes_show_server_kind_and_findings_are_grouped_in_the_text() {
    let cluster = Cluster::start(3);
    let names: Vec<String> = cluster.nodes.iter().map(name).collect();
    let report = check(&client(&cluster.urls())).await;
    for (info, server) in report.nodes.iter().zip(&cluster.nodes) {
        let (kind, version) = kind_and_version(server);
        assert_eq!(info.server_kind, Some(kind), "{info:?}");
        assert_eq!(info.server_version.as_deref(), Some(version.as_str()));
        let json = report.to_json();
        let field = format!(r#""server_kind":"{kind}","server_version":"{version}""#);
        assert!(json.contains(&field), "{json}");
    }
    // Three per-node findings, one line of text naming the three nodes.
    assert_eq!(
        summary(&report),
        expected(no_persistence(&names).chain([memory_loss()]))
    );
    let text = report.to_string();
    let line = format!("WARNING  {}: appendonly is off: ", names.join(", "));
    assert_eq!(text.matches(&line).count(), 1, "{text}");
    assert_eq!(text.matches("appendonly is off").count(), 1, "{text}");
    // Each node's row names its server (columns padded to the widest cell, which differs
    // when the matrix runs a mixed ensemble).
    for (server, n) in cluster.nodes.iter().zip(&names) {
        let (kind, version) = kind_and_version(server);
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("  {n}  up ")))
            .unwrap_or_else(|| panic!("no row for {n}: {text}"));
        let cells: Vec<&str> = row
            .split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect();
        assert_eq!(
            cells[..4],
            [n.as_str(), "up", &format!("{kind} {version}"), "master"]
        );
    }
}

#[tokio::test]
async fn nodes_that_differ_in_persistence() {
    let on = [
        RedisServer::start_with(appendonly()),
        RedisServer::start_with(appendonly()),
    ];
    let off = RedisServer::start();
    let report = check(&client(&[on[0].url(), off.url(), on[1].url()])).await;
    assert_eq!(
        summary(&report),
        expected([
            (K::NoPersistence, W, Some(name(&off))),
            (K::PersistenceMismatch, W, None),
        ])
    );
    let mismatch = finding_of(&report, K::PersistenceMismatch);
    let want = format!(
        "appendonly is on at {}, {} but off at {}",
        name(&on[0]),
        name(&on[1]),
        name(&off)
    );
    assert!(mismatch.message.contains(&want), "{}", mismatch.message);

    // Same settings everywhere (all off): no mismatch, only the per-node warnings and the
    // one about a majority that can lose its data.
    let plain = Cluster::start(2);
    let mut urls = plain.urls();
    urls.push(off.url());
    let report = check(&client(&urls)).await;
    assert!(
        report
            .findings
            .iter()
            .all(|f| matches!(f.kind, K::NoPersistence | K::MajorityMemoryLoss)),
        "{report}"
    );
}

#[tokio::test]
async fn a_majority_that_can_lose_its_data_together() {
    let durable = RedisServer::start_with(appendonly());
    let volatile = RedisServer::start();
    // RDB snapshots set at run time: on the command line, Redis 6.2 keeps the harness's
    // earlier `--save ""` (7.0 and later let the last `--save` win).
    let snapshots = RedisServer::start();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("save")
        .arg("3600 1")
        .query(&mut snapshots.conn())
        .expect("CONFIG SET save");
    let lazy = RedisServer::start_extended(appendonly(), extras(&["--appendfsync", "no"]));
    let (d, v, s, l) = (
        name(&durable),
        name(&volatile),
        name(&snapshots),
        name(&lazy),
    );

    // One durable node of three: the other two, a majority, can lose their data together.
    let report = check(&client(&[durable.url(), volatile.url(), snapshots.url()])).await;
    assert_eq!(
        summary(&report),
        expected([
            (K::NoPersistence, W, Some(v.clone())),
            (K::NoPersistence, W, Some(s.clone())),
            (K::PersistenceMismatch, W, None),
            memory_loss(),
        ])
    );
    assert_eq!(report.nodes[1].save.as_deref(), Some(""));
    assert_eq!(report.nodes[2].save.as_deref(), Some("3600 1"));
    let finding = finding_of(&report, K::MajorityMemoryLoss);
    assert!(
        finding.message.starts_with(&format!(
            "2 of 3 nodes, a majority, can lose their data together: {v} (no persistence at \
             all), {s} (RDB snapshots only); a restart of all of them at once"
        )),
        "{}",
        finding.message
    );
    assert!(
        finding.message.contains("a lock may be granted twice"),
        "{}",
        finding.message
    );
    assert!(
        finding
            .fix
            .starts_with("give at least 2 of the 3 nodes appendonly yes with appendfsync always"),
        "{}",
        finding.fix
    );
    let text = report.to_string();
    assert!(
        text.contains("WARNING  2 of 3 nodes, a majority, can lose"),
        "{text}"
    );
    assert!(
        report
            .to_json()
            .contains(r#""kind":"majority_memory_loss","severity":"warning","node":null"#),
        "{}",
        report.to_json()
    );

    // appendfsync no counts too: the OS decides when writes reach the disk.
    let report = check(&client(&[durable.url(), volatile.url(), lazy.url()])).await;
    let finding = finding_of(&report, K::MajorityMemoryLoss);
    assert!(
        finding.message.contains(&format!(
            "{v} (no persistence at all), {l} (appendfsync no)"
        )),
        "{}",
        finding.message
    );

    // A minority that can lose its data: no finding.
    let second = RedisServer::start_with(appendonly());
    let report = check(&client(&[durable.url(), volatile.url(), second.url()])).await;
    assert_eq!(
        summary(&report),
        expected([
            (K::NoPersistence, W, Some(v.clone())),
            (K::PersistenceMismatch, W, None),
        ])
    );
    assert_eq!(report.nodes[0].name, d);
}

/// A server of another build than the harness's, from the compatibility matrix's cache
/// (`scripts/servers.sh`), SIGKILLed, reaped and its directory removed on drop.
struct Build {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Build {
    /// `<cache>/<name>/<binary>`, where the cache is `$QUORUM_LOCK_SERVER_CACHE` or
    /// `~/.cache/quorum-lock/servers`; `None` when it is not there.
    fn cached(name: &str, binary: &str) -> Option<PathBuf> {
        let cache = std::env::var_os("QUORUM_LOCK_SERVER_CACHE")
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(|h| PathBuf::from(h).join(".cache/quorum-lock/servers"))
            })?;
        Some(cache.join(name).join(binary)).filter(|p| p.is_file())
    }

    /// Starts `bin` on a free port below the ephemeral range, with an append-only file
    /// fsynced on every write and no RDB snapshots, and waits until it answers `PING`.
    fn start(bin: &Path) -> Build {
        let dir = std::env::temp_dir().join(unique("doctor-build"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        for attempt in 0..START_TRIES as u32 {
            let span = u32::from(PORT_HI - PORT_LO);
            let port = PORT_LO + u16::try_from((seed + attempt * 7919) % span).unwrap_or(0);
            if TcpListener::bind(("127.0.0.1", port)).is_err() {
                continue;
            }
            let child = Command::new(bin)
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                ])
                .args(["--appendonly", "yes", "--appendfsync", "always"])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn server");
            let mut build = Build {
                child,
                port,
                dir: dir.clone(),
            };
            let start = Instant::now();
            while start.elapsed() < READY_TIMEOUT {
                if raw_ping(port, Duration::from_millis(200)).is_ok_and(|r| r.contains("PONG")) {
                    return build;
                }
                if build.child.try_wait().ok().flatten().is_some() {
                    break; // exited: port taken after all; try another
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = build.child.kill();
        }
        panic!("{} did not start", bin.display());
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn name(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Build {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn other_builds_report_their_kind_version_and_known_issues() {
    let (Some(redis62), Some(valkey)) = (
        Build::cached("redis-6.2", "redis-server"),
        Build::cached("valkey-9.1", "valkey-server"),
    ) else {
        eprintln!(
            "skipped: other_builds_report_their_kind_version_and_known_issues needs the \
             redis-6.2 and valkey-9.1 builds: run scripts/servers.sh"
        );
        return;
    };
    // A mixed ensemble of builds chosen here, whatever build the matrix gives the harness.
    let nodes = [
        Build::start(&redis62),
        Build::start(&valkey),
        Build::start(&valkey),
    ];
    let old = &nodes[0];
    let report = check(&client(&nodes.each_ref().map(Build::url))).await;

    let kinds: Vec<_> = report
        .nodes
        .iter()
        .map(|n| {
            (
                n.server_kind,
                n.server_version.clone(),
                n.redis_version.clone(),
            )
        })
        .collect();
    let valkey_91 = (
        Some(ServerKind::Valkey),
        Some("9.1.2".to_owned()),
        Some("7.2.4".to_owned()),
    );
    assert_eq!(
        kinds,
        [
            (
                Some(ServerKind::Redis),
                Some("6.2.14".into()),
                Some("6.2.14".into())
            ),
            valkey_91.clone(),
            valkey_91,
        ]
    );
    // Persistence is the same everywhere: the only finding is Redis 6.2's release-note
    // issue with appendfsync always.
    let all: Vec<_> = report
        .findings
        .iter()
        .map(|f| (f.kind, f.severity, f.node.clone()))
        .collect();
    assert_eq!(all, [(K::KnownIssue, I, Some(old.name()))], "{report}");
    let message = &report.findings[0].message;
    assert!(message.starts_with("Redis 6.2.14 predates"), "{message}");
    assert!(message.contains("redis/redis#9678"), "{message}");
    let text = report.to_string();
    assert!(text.contains("valkey 9.1.2"), "{text}");
    assert!(text.contains("redis 6.2.14"), "{text}");
}

/// `doctor` shows the nodes restart quarantine keeps out now, why and when they
/// vote again, in the text and the JSON: none while every node kept its data; one node
/// restarted empty after serving a 30 s lock is kept out for that lock's TTL plus drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_empty_is_reported_kept_out() {
    let mut cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let guard = redlock
        .lock(unique("kept-out"), Duration::from_secs(30))
        .await
        .expect("a fresh ensemble locks at once");
    guard.release().await.expect("released");
    // The markers are written in the background after the lock was granted.
    eventually(Duration::from_secs(5), "every node marked", || {
        cluster.nodes.iter().all(|n| {
            redis::cmd("EXISTS")
                .arg("quorum-lock:node:marker")
                .query::<i64>(&mut n.conn())
                .unwrap()
                == 1
        })
    })
    .await;
    let report = check(&redlock).await;
    assert!(
        report.findings.iter().all(|f| f.kind != K::KeptOut),
        "{report}"
    );

    cluster.nodes[0].restart();
    let report = check(&redlock).await;
    let restarted = name(&cluster.nodes[0]);
    let kept: Vec<_> = (report.findings.iter())
        .filter(|f| f.kind == K::KeptOut)
        .collect();
    assert_eq!(kept.len(), 1, "{report}");
    assert_eq!(
        (kept[0].severity, kept[0].node.as_deref()),
        (W, Some(restarted.as_str()))
    );
    // 30 s plus 1 % drift and 2 ms, from a node that may be up to 2 s old by now.
    let within = ["29", "30", "31"].iter().find(|s| {
        kept[0].message
            == format!(
                "restart quarantine keeps its vote out: no marker of its current process \
                 (new, restarted or flushed) while locks may depend on it; votes again \
                 within {s} s"
            )
    });
    assert!(within.is_some(), "{}", kept[0].message);
    let text = report.to_string();
    assert!(
        text.contains(&format!("WARNING  {restarted}: {}", kept[0].message)),
        "{text}"
    );
    let json = report.to_json();
    assert!(
        json.contains(&format!(
            "{{\"kind\":\"kept_out\",\"severity\":\"warning\",\"node\":\"{restarted}\""
        )),
        "{json}"
    );
}

/// A prefix with every glob character: the scan must match it literally.
const GLOB_PREFIX: &str = r"doc[1]*?\:";

/// The census of each node as (readers, permits, count records, waiting lists, keys
/// found, partial), `None` when not counted.
type CensusRow = Option<(u64, u64, u64, u64, u64, bool)>;

fn census_rows(report: &DeploymentReport) -> Vec<CensusRow> {
    (report.nodes.iter())
        .map(|n| {
            n.keys.map(|c| {
                (
                    c.readers,
                    c.permits,
                    c.count_records,
                    c.waiting_lists,
                    c.scanned,
                    c.partial,
                )
            })
        })
        .collect()
}

/// The keys a server holds under `prefix`'s namespace, counted without a glob.
fn namespace_keys(server: &RedisServer, prefix: &str) -> u64 {
    let all: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .expect("KEYS");
    let namespace = format!("{prefix}quorum-lock:");
    all.iter().filter(|k| k.starts_with(&namespace)).count() as u64
}

/// Runs the check until `done` holds for its report (at most 15 s), and returns it.
async fn check_until(
    redlock: &Redlock,
    what: &str,
    done: impl Fn(&DeploymentReport) -> bool,
) -> DeploymentReport {
    let start = Instant::now();
    loop {
        let report = check(redlock).await;
        if done(&report) {
            return report;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "timed out waiting for: {what}\n{report}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends one command to every server.
fn on_every(cluster: &Cluster, cmd: &redis::Cmd) {
    for server in &cluster.nodes {
        let _: redis::Value = cmd.query(&mut server.conn()).expect("admin command");
    }
}

fn key_kinds() -> [&'static str; 3] {
    [
        K::NoExpiry.as_str(),
        K::ForeignData.as_str(),
        K::PermitCountMismatch.as_str(),
    ]
}

#[tokio::test]
async fn doctor_reads_the_keys_of_every_lock_kind() {
    let cluster = Cluster::start(3);
    let names: Vec<String> = cluster.nodes.iter().map(name).collect();
    let redlock = Redlock::builder()
        .nodes(cluster.urls())
        .key_prefix(GLOB_PREFIX)
        .build()
        .expect("valid configuration");
    let ttl = Duration::from_secs(30);
    let read = (redlock.rwlock("docs").expect("name").read(ttl).await).expect("read lock");
    let write = (redlock.rwlock("ledger").expect("name").write(ttl).await).expect("write lock");
    let jobs = redlock.semaphore("jobs", 3).expect("semaphore");
    let permit = jobs.acquire(Duration::from_secs(3)).await.expect("permit");
    // Planted: a writer intent without expiry on every node, a list where a readers set
    // belongs on the first, two counts for one semaphore, and a key of a prefix the
    // unescaped pattern would match.
    let ns = format!("{GLOB_PREFIX}quorum-lock:");
    let stuck = format!("{ns}intent:stuck");
    on_every(&cluster, redis::cmd("SET").arg(&stuck).arg("w1"));
    let foreign = format!("{ns}readers:foreign");
    let _: i64 = (redis::cmd("RPUSH").arg(&foreign).arg("x"))
        .query(&mut cluster.nodes[0].conn())
        .expect("RPUSH");
    for (node, count) in [(0, "4"), (1, "3")] {
        let _: () = (redis::cmd("SET")
            .arg(format!("{ns}permits:batch"))
            .arg(count))
        .arg("PX")
        .arg(60_000)
        .query(&mut cluster.nodes[node].conn())
        .expect("SET");
    }
    let sibling = r"doc1x\:quorum-lock:rw:other";
    on_every(&cluster, redis::cmd("SET").arg(sibling).arg("x"));

    // Every node granted the locks before the answers came back (wait for stragglers).
    let held = check_until(&redlock, "every node holds the locks", |r| {
        census_rows(r).iter().all(|c| c.is_some_and(|c| c.1 == 1))
    })
    .await;
    let found = |node: &RedisServer| namespace_keys(node, GLOB_PREFIX);
    let scanned: Vec<u64> = cluster.nodes.iter().map(found).collect();
    assert_eq!(
        census_rows(&held),
        [
            Some((1, 1, 2, 0, scanned[0], false)),
            Some((1, 1, 2, 0, scanned[1], false)),
            Some((1, 1, 1, 0, scanned[2], false)),
        ]
    );
    assert_eq!(
        summary(&held),
        expected(
            no_persistence(&names)
                .chain(names.iter().map(|n| (K::NoExpiry, W, Some(n.clone()))))
                .chain([
                    (K::ForeignData, E, Some(names[0].clone())),
                    (K::PermitCountMismatch, W, None),
                    memory_loss(),
                ])
        )
    );
    assert_eq!(held.worst(), Some(E));
    let no_expiry = finding_of(&held, K::NoExpiry);
    assert_eq!(
        no_expiry.message,
        format!(
            "keys that must expire have no expiry, so they hold a lock or its bookkeeping for \
             ever: {stuck} (writer intent of read-write lock stuck)"
        )
    );
    assert_eq!(
        finding_of(&held, K::ForeignData).message,
        format!(
            "foreign data in the crate's namespace, which its scripts refuse or misread: \
             {foreign} (list, where the readers of read-write lock foreign is a zset)"
        )
    );
    assert_eq!(
        finding_of(&held, K::PermitCountMismatch).message,
        format!(
            "semaphore batch has different permit counts recorded: 3 on {}; 4 on {}; its \
             clients use different counts for one name, and each is refused on the nodes \
             that record another",
            names[1], names[0]
        )
    );
    let text = held.to_string();
    let line = "keys: 1 reader, 1 permit held, 2 count records, 0 waiting lists";
    assert!(
        text.contains(&format!("  {}  {line}\n", names[0])),
        "{text}"
    );
    let json = held.to_json();
    let field = format!(
        r#""keys":{{"readers":1,"permits":1,"count_records":1,"waiting_lists":0,"scanned":{},"partial":false}}}}"#,
        scanned[2]
    );
    assert!(json.contains(&field), "{json}");

    // Released and cleaned: no finding on the keys, nothing counted but the records that
    // never expire (the node's quarantine records).
    read.release().await.expect("read lock released");
    write.release().await.expect("write lock released");
    permit.release().await.expect("permit released");
    let del = |key: &str| redis::cmd("DEL").arg(key).to_owned();
    for key in [&stuck, &foreign, &format!("{ns}permits:batch")] {
        on_every(&cluster, &del(key));
    }
    let clean = check_until(&redlock, "the count record expires", |r| {
        census_rows(r).iter().all(|c| c.is_some_and(|c| c.2 == 0))
    })
    .await;
    let scanned: Vec<u64> = cluster.nodes.iter().map(found).collect();
    let zero: Vec<CensusRow> = scanned
        .iter()
        .map(|&n| Some((0, 0, 0, 0, n, false)))
        .collect();
    assert_eq!(census_rows(&clean), zero);
    assert!(
        (clean.findings.iter()).all(|f| !key_kinds().contains(&f.kind.as_str())),
        "{clean}"
    );
    assert_eq!(
        summary(&clean),
        expected(no_persistence(&names).chain([memory_loss()]))
    );
}

#[tokio::test]
async fn a_refused_scan_leaves_the_census_unknown() {
    let cluster = Cluster::start(3);
    let names: Vec<String> = cluster.nodes.iter().map(name).collect();
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "default", "-scan"])
        .query(&mut cluster.nodes[0].conn())
        .expect("ACL SETUSER");
    let report = check(&client(&cluster.urls())).await;
    assert_eq!(
        summary(&report),
        expected(no_persistence(&names).chain([memory_loss()]))
    );
    let counted: Vec<bool> = report.nodes.iter().map(|n| n.keys.is_some()).collect();
    assert_eq!(counted, [false, true, true]);
    assert_eq!(
        report.nodes[0].error, None,
        "a refused SCAN is not an error"
    );
    assert!(report.to_string().contains(&format!(
        "  {}  keys: not counted (SCAN, TYPE or PTTL refused, or no answer in time)\n",
        names[0]
    )));
}
