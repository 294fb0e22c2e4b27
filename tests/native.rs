//! Native compare-and-delete (`DELIFEQ`) and compare-and-set (`SET ... IFEQ`) where a node
//! has them: the path each node takes (read from `INFO commandstats`), and outcomes equal
//! to the Lua scripts' for the same cases on the same servers.
//!
//! Needs a Valkey 9 build: the first `valkey-server` listed in `QUORUM_LOCK_SERVERS`, else
//! `~/.cache/quorum-lock/servers/valkey-9.1/valkey-server` (fetched by
//! `scripts/servers.sh`). Without one each test prints one "skipped: ..." line.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{RedisServer, ServerExtras, ServerOptions, eventually, unique};
use quorum_lock::{Error, NodeOutcome, NodeReport, Redlock};

const TTL: Duration = Duration::from_secs(10);
/// The longest TTL the tests lock or extend with (the warm-up raises the record to it).
const LONGEST: Duration = Duration::from_secs(60);

fn valkey_bin() -> Option<PathBuf> {
    let listed = common::listed_server_bins()
        .into_iter()
        .find(|b| b.file_name().is_some_and(|n| n == "valkey-server"));
    let cached = std::env::var_os("QUORUM_LOCK_SERVER_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/quorum-lock/servers"))
        })
        .map(|dir| dir.join("valkey-9.1/valkey-server"));
    let found = listed.or(cached.filter(|p| p.is_file()));
    if found.is_none() {
        eprintln!(
            "skipped: no valkey-server (run scripts/servers.sh, or list one in QUORUM_LOCK_SERVERS)"
        );
    }
    found
}

fn start(bin: &Path) -> RedisServer {
    RedisServer::start_extended(
        ServerOptions::default(),
        ServerExtras {
            bin: Some(bin.to_owned()),
            ..ServerExtras::default()
        },
    )
}

/// A connected client: every node's connection is up before the first lock, so every
/// request is written at once and the per-node call counts below are exact even on a
/// loaded machine (a request still waiting for a connection at its deadline is dropped).
async fn client(servers: &[&RedisServer], native: bool, notifications: bool) -> Redlock {
    let redlock = Redlock::builder()
        // Fresh test servers: quarantine would hold every vote for one TTL.
        .restart_quarantine(false)
        .nodes(servers.iter().map(|s| s.url()))
        .notifications(notifications)
        .native_commands(native)
        .build()
        .expect("valid configuration");
    connected(&redlock).await;
    warm_up(&redlock, servers).await;
    redlock
}

/// Locks and releases with the longest TTL the tests use, then the call counts are
/// reset: a client's first lock goes by the acquire script (it raises the ensemble record
/// and writes the node markers of restart quarantine), later ones take the one-command
/// fast path, so the counts below see only the calls under test.
async fn warm_up(redlock: &Redlock, servers: &[&RedisServer]) {
    // Two rounds: the first writes the markers, the second reads them back (the node is
    // then known admitted in its current life).
    for _ in 0..2 {
        let guard = redlock
            .lock(unique("native-warm-up"), LONGEST)
            .await
            .expect("warm-up lock");
        guard.release().await.expect("warm-up release");
        connected(redlock).await;
    }
    // Every node answers a PING after everything sent before it on the same connection.
    connected(redlock).await;
    servers.iter().for_each(|s| s.reset_command_stats());
}

/// Waits until every node of `redlock` is connected.
async fn connected(redlock: &Redlock) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let report = redlock
            .connect()
            .await
            .unwrap_or_else(|e| match e.report() {
                Some(r) => r.clone(),
                None => panic!("connect: {e}"),
            });
        if report.count(&NodeOutcome::Reachable) == report.results().len() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not all nodes connected: {report}"
        );
    }
}

fn set(server: &RedisServer, key: &str, value: &str) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query(&mut server.conn())
        .expect("SET");
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .expect("GET")
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.conn())
        .expect("PTTL")
}

/// The distinct outcomes of the nodes that answered before the decision (a round returns
/// once its outcome is certain; the others are `Pending` and finish in the background),
/// after checking that a majority answered.
fn outcomes(report: &NodeReport) -> Vec<NodeOutcome> {
    let mut answered: Vec<NodeOutcome> = report
        .results()
        .iter()
        .map(|r| r.outcome.clone())
        .filter(|o| *o != NodeOutcome::Pending)
        .collect();
    assert!(
        answered.len() > report.results().len() / 2,
        "a majority answered: {report}"
    );
    answered.dedup();
    answered
}

/// Waits until `server` counts `want` calls of `command` (rounds finish in the background
/// after their decision), then checks it is exactly that.
async fn await_calls(server: &RedisServer, command: &str, want: u64) {
    let what = format!("{want} {command} calls on port {}", server.port());
    eventually(Duration::from_secs(5), &what, || {
        server.command_calls(command) >= want
    })
    .await;
    assert_eq!(server.command_calls(command), want, "{command}");
}

/// Waits until `server` counts at least `lo` calls of `command`, then checks it is at most
/// `hi`: for counts that include the acquisitions, which go by the acquire script until
/// every node's answer has shown it admitted (restart quarantine), then by `SET NX PX`.
async fn await_between(server: &RedisServer, command: &str, lo: u64, hi: u64) {
    let what = format!("{lo} {command} calls on port {}", server.port());
    eventually(Duration::from_secs(5), &what, || {
        server.command_calls(command) >= lo
    })
    .await;
    let n = server.command_calls(command);
    assert!(n <= hi, "{command}: {n} calls, at most {hi} expected");
}

/// What one case ended with, comparable across the two paths.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    Ok(Vec<NodeOutcome>),
    NotHeld(Vec<NodeOutcome>),
}

fn ended<T>(result: Result<T, Error>, report: impl FnOnce(&T) -> NodeReport) -> Ended {
    match result {
        Ok(v) => Ended::Ok(outcomes(&report(&v))),
        Err(Error::NotHeld { report }) => Ended::NotHeld(outcomes(&report)),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// The five cases on `servers` with one client, notifications off; returns what each
/// ended with. Checks the keys left on the servers after each case. Five releases (cases
/// 1 to 4 explicitly, case 5 by dropping its guard) and two extensions.
async fn five_cases(servers: &[&RedisServer], native: bool) -> Vec<Ended> {
    let redlock = client(servers, native, false).await;
    let mut seen = Vec::new();

    // 1. Release held: deleted everywhere.
    let r = unique("native-held");
    let guard = redlock.lock(&r, TTL).await.expect("lock");
    seen.push(ended(guard.release().await, NodeReport::clone));
    eventually(Duration::from_secs(5), "released everywhere", || {
        servers.iter().all(|s| get(s, &r).is_none())
    })
    .await;

    // 2. Release not held: another owner's token is on every node and stays there.
    let r = unique("native-other");
    let guard = redlock.lock(&r, TTL).await.expect("lock");
    servers.iter().for_each(|s| set(s, &r, "someone-else"));
    seen.push(ended(guard.release().await, NodeReport::clone));

    // 3. Release after expiry: the key is gone everywhere before the release.
    let r3 = unique("native-expired");
    let guard = redlock
        .lock(&r3, Duration::from_millis(300))
        .await
        .expect("lock");
    eventually(
        Duration::from_secs(5),
        "the lock expired on every node",
        || servers.iter().all(|s| get(s, &r3).is_none()),
    )
    .await;
    seen.push(ended(guard.release().await, NodeReport::clone));

    // 4. Extend held: same token, the new TTL everywhere.
    let r4 = unique("native-extend");
    // Acquired with the TTL it is extended to: a longer extension needs the script (it
    // raises the ensemble record), so the native path is for extensions up to it.
    let longer = LONGEST;
    let guard = redlock.lock(&r4, longer).await.expect("lock");
    let extended = guard.extend(longer).await;
    assert!(extended.is_ok(), "extend held: {extended:?}");
    // A successful extension returns its validity, not a report: every node that
    // answered in time extended, or it would not have succeeded.
    seen.push(Ended::Ok(vec![NodeOutcome::Extended]));
    let waited = tokio::time::timeout(
        Duration::from_secs(5),
        eventually(Duration::from_secs(6), "extended", || {
            servers.iter().all(|s| pttl(s, &r4) > 50_000)
        }),
    )
    .await;
    let state: Vec<_> = servers
        .iter()
        .map(|s| (get(s, &r4), pttl(s, &r4)))
        .collect();
    assert!(
        waited.is_ok(),
        "extended to 60 s everywhere (native {native}, token {}): {state:?}",
        guard.token()
    );
    for s in servers {
        assert_eq!(get(s, &r4).as_deref(), Some(guard.token()));
        assert!(pttl(s, &r4) <= 60_000);
    }
    guard.release().await.expect("release");

    // 5. Extend not held: another owner's key keeps its value and its TTL.
    let r5 = unique("native-extend-other");
    let guard = redlock.lock(&r5, longer).await.expect("lock");
    servers.iter().for_each(|s| set(s, &r5, "someone-else"));
    seen.push(ended(guard.extend(longer).await, |_| -> NodeReport {
        panic!("extended another owner's lock")
    }));
    drop(guard);

    for s in servers {
        assert_eq!(
            get(s, &r).as_deref(),
            Some("someone-else"),
            "not ours, kept"
        );
        assert_eq!(get(s, &r5).as_deref(), Some("someone-else"));
        assert!(pttl(s, &r5) <= 10_000, "the other owner's TTL is untouched");
    }
    seen
}

/// The expected outcomes of [`five_cases`], whichever path.
fn expected() -> Vec<Ended> {
    vec![
        Ended::Ok(vec![NodeOutcome::Released]),
        Ended::NotHeld(vec![NodeOutcome::NotHeld]),
        Ended::NotHeld(vec![NodeOutcome::NotHeld]),
        Ended::Ok(vec![NodeOutcome::Extended]),
        Ended::NotHeld(vec![NodeOutcome::NotHeld]),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_releases_and_extends_natively_with_the_scripts_outcomes() {
    let Some(valkey) = valkey_bin() else { return };
    let nodes: Vec<RedisServer> = (0..3).map(|_| start(&valkey)).collect();
    let servers: Vec<&RedisServer> = nodes.iter().collect();

    servers.iter().for_each(|s| s.reset_command_stats());
    let native = five_cases(&servers, true).await;
    assert_eq!(native, expected());
    for s in &servers {
        await_calls(s, "delifeq", 5).await;
        // No release or extension by script: at most the five acquisitions' scripts.
        await_between(s, "evalsha", 0, 5).await;
        assert_eq!(s.command_calls("eval"), 0);
    }

    servers.iter().for_each(|s| s.reset_command_stats());
    let lua = five_cases(&servers, false).await;
    assert_eq!(lua, native, "the scripts end every case the same way");
    for s in &servers {
        // Five releases and two extensions by script (and at most five acquisitions).
        await_between(s, "evalsha", 7, 12).await;
        assert_eq!(s.command_calls("delifeq"), 0, "native commands off");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_ensemble_uses_each_nodes_own_path() {
    let Some(valkey) = valkey_bin() else { return };
    let redis = common::redis_server_bin();
    let nodes = [start(&valkey), start(&redis), start(&valkey)];
    let servers: Vec<&RedisServer> = nodes.iter().collect();
    servers.iter().for_each(|s| s.reset_command_stats());
    let redlock = client(&servers, true, false).await;

    let r = unique("native-mixed");
    let guard = redlock.lock(&r, TTL).await.expect("lock");
    guard.extend(TTL).await.expect("extend");
    let report = guard.release().await.expect("release");
    assert_eq!(outcomes(&report), [NodeOutcome::Released]);

    let kinds: Vec<_> = report
        .results()
        .iter()
        .map(|r| {
            r.server
                .as_deref()
                .unwrap_or("?")
                .split(' ')
                .next()
                .unwrap_or("?")
                .to_owned()
        })
        .collect();
    assert_eq!(kinds, ["valkey", "redis", "valkey"], "{report}");
    assert!(report.to_string().contains(" [valkey 9."), "{report}");
    for (i, s) in servers.iter().enumerate() {
        if i == 1 {
            // Redis 7.0: the scripts.
            await_between(s, "evalsha", 2, 3).await;
            assert_eq!(s.command_calls("delifeq"), 0);
        } else {
            // Valkey: native (a script only for the acquisition, if any).
            await_calls(s, "delifeq", 1).await;
            await_between(s, "evalsha", 0, 1).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_stay_where_a_native_command_would_not_do_the_same() {
    let Some(valkey) = valkey_bin() else { return };
    let nodes: Vec<RedisServer> = (0..3).map(|_| start(&valkey)).collect();
    let servers: Vec<&RedisServer> = nodes.iter().collect();

    // Several keys: extend and release are all or nothing, by script.
    servers.iter().for_each(|s| s.reset_command_stats());
    let plain = client(&servers, true, false).await;
    let (a, b) = (unique("native-many-a"), unique("native-many-b"));
    let guard = plain.lock_many([&a, &b], TTL).await.expect("lock_many");
    guard.extend(TTL * 2).await.expect("extend");
    guard.release().await.expect("release");
    for s in &servers {
        // The acquire script, the extend script and the release script.
        await_calls(s, "evalsha", 3).await;
        assert_eq!(s.command_calls("delifeq"), 0);
        assert!(get(s, &a).is_none() && get(s, &b).is_none());
    }

    // Notifications on: a release may wake a waiter, which only the script does, and only
    // on the node that keeps the waiting lists (node 0 for a client that never waited);
    // the other nodes are released natively, as a one-key extension is everywhere.
    servers.iter().for_each(|s| s.reset_command_stats());
    let waking = client(&servers, true, true).await;
    let r = unique("native-waking");
    let guard = waking.lock(&r, TTL).await.expect("lock");
    guard.extend(TTL).await.expect("extend");
    guard.release().await.expect("release");
    for (i, s) in servers.iter().enumerate() {
        // SET NX PX and SET IFEQ everywhere.
        await_calls(s, "set", 2).await;
        // (Plus the acquire script, if the warm-up left the fast path cold.)
        if i == 0 {
            // The waking release script: compare-and-delete, then the (empty) waiting
            // list and the turn.
            await_calls(s, "lpop", 1).await;
            await_between(s, "evalsha", 1, 2).await;
            assert_eq!(s.command_calls("delifeq"), 0);
        } else {
            await_calls(s, "delifeq", 1).await;
            await_between(s, "evalsha", 0, 1).await;
            assert_eq!(s.command_calls("lpop"), 0);
        }
        assert!(get(s, &r).is_none());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acl_without_delifeq_gets_the_script() {
    let Some(valkey) = valkey_bin() else { return };
    let nodes: Vec<RedisServer> = (0..3).map(|_| start(&valkey)).collect();
    for node in &nodes {
        let () = redis::cmd("ACL")
            .arg(&[
                "SETUSER", "locker", "on", ">secret", "~*", "&*", "+@all", "-delifeq",
            ])
            .query(&mut node.conn())
            .expect("ACL SETUSER");
        node.reset_command_stats();
    }
    let redlock = Redlock::builder()
        .restart_quarantine(false)
        .notifications(false)
        .nodes(
            nodes
                .iter()
                .map(|n| format!("redis://locker:secret@127.0.0.1:{}", n.port())),
        )
        .build()
        .expect("valid configuration");
    connected(&redlock).await;
    warm_up(&redlock, &nodes.iter().collect::<Vec<_>>()).await;
    let r = unique("native-acl");
    let guard = redlock.lock(&r, TTL).await.expect("lock");
    let report = guard
        .release()
        .await
        .expect("released by script after NOPERM");
    assert_eq!(outcomes(&report), [NodeOutcome::Released]);
    for node in &nodes {
        // The release by script (the lock itself may be by script too).
        let what = format!("the release script on port {}", node.port());
        // A release returns once a majority confirmed: the last node's may still be on its
        // way (its NOPERM, then the script), so wait for the key to be gone as well.
        eventually(Duration::from_secs(5), &what, || {
            node.command_calls("evalsha") >= 1 && get(node, &r).is_none()
        })
        .await;
        assert_eq!(node.command_calls("delifeq"), 0, "refused, never run");
    }
}
