//! The core algorithm against real `redis-server` processes.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{
    BlackHole, Cluster, RedisServer, ServerOptions, builder, client, eventually, lock_and_release,
    unique,
};
use quorum_lock::{Error, NodeOutcome, Redlock};
use redis::AsyncCommands;

const TTL: Duration = Duration::from_secs(10);

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

/// How many live (running, not paused) nodes hold `key` with `token`.
fn holders(cluster: &Cluster, key: &str, token: &str) -> usize {
    cluster
        .nodes
        .iter()
        .filter(|s| s.is_running() && !s.is_paused())
        .filter(|s| get(s, key).as_deref() == Some(token))
        .count()
}

async fn lock_release_roundtrip(n: usize) {
    let cluster = Cluster::start(n);
    let redlock = client(&cluster.urls());
    assert_eq!(redlock.quorum(), n / 2 + 1);
    let resource = unique("roundtrip");

    let guard = redlock.lock(&resource, TTL).await.unwrap();
    assert_eq!(guard.resource(), resource);
    let token = quorum_lock::HolderInfo::parse(guard.token()).token;
    assert_eq!(token.len(), 32, "128-bit token as hex");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");
    assert!(guard.validity() > Duration::ZERO && guard.validity() <= TTL);
    assert!(holders(&cluster, &resource, guard.token()) >= redlock.quorum());
    for server in &cluster.nodes {
        if get(server, &resource).is_some() {
            let ttl = pttl(server, &resource);
            assert!(ttl > 0 && ttl <= 10_000, "key has a TTL: {ttl}");
        }
    }
    assert!(
        redlock.try_lock(&resource, TTL).await.unwrap().is_none(),
        "a second owner is refused while the lock is held"
    );

    let token = guard.token().to_owned();
    let report = guard.release().await.unwrap();
    assert!(report.count(&NodeOutcome::Released) >= redlock.quorum());
    eventually(Duration::from_secs(5), "keys released everywhere", || {
        holders(&cluster, &resource, &token) == 0
    })
    .await;
    let again = redlock.try_lock(&resource, TTL).await.unwrap();
    assert!(again.is_some(), "free again after release");
    assert_ne!(
        again.unwrap().token(),
        token,
        "each acquisition has a new token"
    );
}

#[tokio::test]
async fn single_node_is_a_plain_lock() {
    lock_release_roundtrip(1).await;
}

#[tokio::test]
async fn three_nodes_lock_and_release() {
    lock_release_roundtrip(3).await;
}

#[tokio::test]
async fn five_nodes_lock_and_release() {
    lock_release_roundtrip(5).await;
}

#[tokio::test]
async fn key_is_the_resource_name_unless_prefixed() {
    let server = RedisServer::start();
    let resource = unique("plain");
    let plain = client(&[server.url()]);
    let guard = plain.lock(&resource, TTL).await.unwrap();
    assert_eq!(get(&server, &resource).as_deref(), Some(guard.token()));
    guard.release().await.unwrap();

    let prefixed = builder(&[server.url()])
        .key_prefix("locks:")
        .build()
        .unwrap();
    assert_eq!(prefixed.key(&resource), format!("locks:{resource}"));
    let guard = prefixed.lock(&resource, TTL).await.unwrap();
    assert_eq!(
        get(&server, &format!("locks:{resource}")).as_deref(),
        Some(guard.token())
    );
    assert_eq!(get(&server, &resource), None);
    guard.release().await.unwrap();
}

/// Read-modify-write of a plain counter on a separate server, with a yield between the read
/// and the write so that unprotected increments would be lost.
async fn increment(counter: &mut redis::aio::MultiplexedConnection, key: &str) {
    let value: i64 = counter
        .get::<_, Option<i64>>(key)
        .await
        .unwrap()
        .unwrap_or(0);
    tokio::task::yield_now().await;
    tokio::time::sleep(Duration::from_micros(200)).await;
    let _: () = counter.set(key, value + 1).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_tasks_total_is_exact() {
    let cluster = Cluster::start(5);
    let store = RedisServer::start();
    exact_increments(&store, client(&cluster.urls())).await;
    // The same with Nagle's algorithm on the node connections (`tcp_nodelay(false)`):
    // commands of several tasks coalesced into one packet change nothing of the protocol.
    let nagle = builder(&cluster.urls()).tcp_nodelay(false).build().unwrap();
    exact_increments(&store, nagle).await;
}

/// 8 tasks of `redlock` each do 50 unprotected read-modify-write increments of a counter
/// on `store` under the lock: the total must be exactly 400.
async fn exact_increments(store: &RedisServer, redlock: Redlock) {
    const TASKS: usize = 8;
    const INCREMENTS: usize = 50;
    let resource = unique("counter-lock");
    let counter_key = unique("counter");
    let store_client = store.client();

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let redlock = redlock.clone();
        let resource = resource.clone();
        let counter_key = counter_key.clone();
        let mut conn = store_client
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        tasks.push(tokio::spawn(async move {
            for _ in 0..INCREMENTS {
                let guard = redlock
                    .lock(&resource, TTL)
                    .wait(Duration::from_secs(60))
                    .await
                    .unwrap();
                increment(&mut conn, &counter_key).await;
                guard.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = (TASKS * INCREMENTS).to_string();
    assert_eq!(get(store, &counter_key), Some(total));
}

/// Entry point of the child processes of `mutual_exclusion_across_processes`; does nothing
/// when run as an ordinary test.
#[tokio::test]
#[ignore = "child process of mutual_exclusion_across_processes"]
async fn process_worker() {
    let Ok(nodes) = std::env::var("QL_WORKER_NODES") else {
        return;
    };
    let store = std::env::var("QL_WORKER_STORE").unwrap();
    let resource = std::env::var("QL_WORKER_RESOURCE").unwrap();
    let counter_key = std::env::var("QL_WORKER_COUNTER").unwrap();
    let increments: usize = std::env::var("QL_WORKER_INCREMENTS")
        .unwrap()
        .parse()
        .unwrap();
    let urls: Vec<String> = nodes.split(',').map(str::to_owned).collect();
    let redlock = client(&urls);
    let mut conn = redis::Client::open(store)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for _ in 0..increments {
        let guard = redlock
            .lock(&resource, TTL)
            .wait(Duration::from_secs(120))
            .await
            .unwrap();
        increment(&mut conn, &counter_key).await;
        guard.release().await.unwrap();
    }
}

#[test]
fn mutual_exclusion_across_processes() {
    const PROCESSES: usize = 20;
    const INCREMENTS: usize = 100;
    let cluster = Cluster::start(3);
    let store = RedisServer::start();
    let resource = unique("proc-lock");
    let counter_key = unique("proc-counter");
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<std::process::Child> = (0..PROCESSES)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["--exact", "process_worker", "--ignored", "--quiet"])
                .env("QL_WORKER_NODES", cluster.urls().join(","))
                .env("QL_WORKER_STORE", store.url())
                .env("QL_WORKER_RESOURCE", &resource)
                .env("QL_WORKER_COUNTER", &counter_key)
                .env("QL_WORKER_INCREMENTS", INCREMENTS.to_string())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut failed = 0;
    for child in &mut children {
        if !child.wait().unwrap().success() {
            failed += 1;
        }
    }
    assert_eq!(failed, 0, "every worker process succeeded");
    let total = (PROCESSES * INCREMENTS).to_string();
    assert_eq!(get(&store, &counter_key), Some(total));
}

#[tokio::test]
async fn two_of_five_killed_or_paused_still_acquires() {
    let mut cluster = Cluster::start(5);
    let redlock = client(&cluster.urls());
    // Warm the connections so the failures below hit live connections too.
    redlock.connect().await.unwrap();
    cluster.nodes[0].kill();
    cluster.nodes[3].pause();
    let resource = unique("minority-down");
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    assert_eq!(holders(&cluster, &resource, guard.token()), 3);
    guard.release().await.unwrap();
    cluster.nodes[3].resume();
}

#[tokio::test]
async fn three_of_five_down_is_unavailable_without_hanging() {
    let mut cluster = Cluster::start(5);
    let redlock = client(&cluster.urls());
    redlock.connect().await.unwrap();
    cluster.nodes[0].kill();
    cluster.nodes[1].kill();
    cluster.nodes[2].pause();
    let resource = unique("majority-down");
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        redlock.lock(&resource, TTL).wait(Duration::from_secs(2)),
    )
    .await
    .expect("lock() returns within its wait budget, it never hangs");
    let err = result.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(err.is_unavailable(), "{err:?}");
    let report = err.report().unwrap();
    assert_eq!(report.results().len(), 5);
    assert!(report.failures() >= 3, "{report}");
    // try_lock reports it directly.
    let err = redlock.try_lock(&resource, TTL).await.unwrap_err();
    assert!(
        matches!(err, Error::Unavailable { quorum: 3, .. }),
        "{err:?}"
    );
    cluster.nodes[2].resume();
    // The two live nodes keep nothing of the failed attempts.
    eventually(Duration::from_secs(5), "no partial lock left", || {
        cluster.keys_everywhere(&resource).is_empty()
    })
    .await;
}

#[tokio::test]
async fn restarted_node_is_used_again() {
    let mut server = RedisServer::start();
    let redlock = client(&[server.url()]);
    let resource = unique("restart");
    lock_and_release(&redlock, &resource, TTL).await;
    server.kill();
    let err = redlock.try_lock(&resource, TTL).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    server.restart();
    let guard = redlock
        .lock(&resource, TTL)
        .wait(Duration::from_secs(10))
        .await
        .expect("the same client reconnects to the restarted node");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_hung_node_does_not_slow_the_majority() {
    let cluster = Cluster::start(2);
    let hole = BlackHole::start();
    let mut urls = cluster.urls();
    urls.push(hole.url());
    let redlock = Redlock::builder()
        // Quarantine off: these tests count every vote (quarantine has its own tests).
        .restart_quarantine(false)
        .nodes(&urls)
        .node_timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let resource = unique("hung");
    // The hung node would cost 5 s per request; deciding on the first two answers makes the
    // whole cycle finish long before that.
    let cycle = async {
        let guard = redlock.try_lock(&resource, TTL).await.unwrap().unwrap();
        let report = guard.report().clone();
        guard.release().await.unwrap();
        report
    };
    let report = tokio::time::timeout(Duration::from_secs(4), cycle)
        .await
        .expect("lock and release decide without waiting for the hung node");
    assert_eq!(report.results()[2].outcome, NodeOutcome::Pending);
    assert_eq!(report.count(&NodeOutcome::Acquired), 2);
}

#[tokio::test]
async fn release_never_deletes_another_owners_key() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("expired-owner");
    let short = Duration::from_millis(600);
    let stale = redlock.lock(&resource, short).await.unwrap();
    // Wait for the key to expire on every node, then let someone else take it.
    eventually(Duration::from_secs(10), "first lock expired", || {
        cluster.keys_everywhere(&resource).is_empty()
    })
    .await;
    let fresh = redlock.lock(&resource, TTL).await.unwrap();
    let err = stale.release().await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err:?}");
    assert_eq!(holders(&cluster, &resource, fresh.token()), 3);
    fresh.release().await.unwrap();
}

#[tokio::test]
async fn extend_before_and_after_expiry() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    // Connected first, so every node's SET is on its way before the extension follows it.
    redlock.connect().await.unwrap();
    let resource = unique("extend");
    let guard = redlock
        .lock(&resource, Duration::from_secs(2))
        .await
        .unwrap();
    let validity = guard.extend(Duration::from_secs(60)).await.unwrap();
    assert!(validity > Duration::from_secs(50), "{validity:?}");
    assert!(guard.validity() > Duration::from_secs(50));
    // A majority confirmed before extend() returned; the rest follows in the background.
    let extended = |c: &Cluster| {
        c.nodes
            .iter()
            .filter(|s| pttl(s, &resource) > 50_000)
            .count()
    };
    assert!(extended(&cluster) >= 2);
    eventually(Duration::from_secs(5), "TTL reset on every node", || {
        extended(&cluster) == 3
    })
    .await;
    guard.release().await.unwrap();

    let short = redlock
        .lock(&resource, Duration::from_millis(600))
        .await
        .unwrap();
    eventually(Duration::from_secs(10), "lock expired", || {
        cluster.keys_everywhere(&resource).is_empty() && !short.is_valid()
    })
    .await;
    let err = short.extend(TTL).await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err:?}");
    assert!(
        cluster.keys_everywhere(&resource).is_empty(),
        "extend never re-creates a key"
    );

    // Extending a lock that another owner has taken over fails without touching theirs.
    let a = redlock.lock(&resource, TTL).await.unwrap();
    for server in &cluster.nodes {
        let _: () = redis::cmd("SET")
            .arg(&resource)
            .arg("someone-else")
            .query(&mut server.conn())
            .unwrap();
    }
    let err = a.extend(TTL).await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err:?}");
    assert_eq!(holders(&cluster, &resource, "someone-else"), 3);
    // A majority answered "not ours": the lock is lost for good and the signal says so.
    assert!(!a.is_valid());
    assert_eq!(
        a.lost_signal().lost().await,
        quorum_lock::LostReason::NotHeld
    );
    let err = a.release().await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err:?}");
    assert_eq!(holders(&cluster, &resource, "someone-else"), 3);
}

#[tokio::test]
async fn wrong_type_key_counts_as_a_foreign_lock() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("wrongtype");
    let _: () = redis::cmd("RPUSH")
        .arg(&resource)
        .arg("foreign")
        .query(&mut cluster.nodes[0].conn())
        .unwrap();

    // One foreign key among three nodes: the other two still make a majority.
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    assert!(
        matches!(
            guard.report().results()[0].outcome,
            NodeOutcome::WrongType | NodeOutcome::HeldByOther | NodeOutcome::Pending
        ),
        "{}",
        guard.report()
    );
    guard.extend(TTL).await.unwrap();
    let report = guard.release().await.unwrap();
    let first = &report.results()[0].outcome;
    assert!(
        matches!(first, NodeOutcome::WrongType | NodeOutcome::Pending),
        "{report}"
    );
    let len: i64 = redis::cmd("LLEN")
        .arg(&resource)
        .query(&mut cluster.nodes[0].conn())
        .unwrap();
    assert_eq!(len, 1, "the foreign list is untouched");

    // Foreign keys on a majority: contended, and nothing of ours is left behind.
    let _: () = redis::cmd("HSET")
        .arg(&resource)
        .arg("f")
        .arg("v")
        .query(&mut cluster.nodes[1].conn())
        .unwrap();
    assert!(redlock.try_lock(&resource, TTL).await.unwrap().is_none());
    let value = get(&cluster.nodes[2], &resource);
    assert_eq!(value, None, "the failed attempt released its key on node 2");
}

#[tokio::test]
async fn release_and_extend_survive_script_flush() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("flush");
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    guard.extend(TTL).await.unwrap();
    for server in &cluster.nodes {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.conn())
            .unwrap();
    }
    guard
        .extend(TTL)
        .await
        .expect("EVALSHA falls back after SCRIPT FLUSH");
    for server in &cluster.nodes {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.conn())
            .unwrap();
    }
    let token = guard.token().to_owned();
    guard.release().await.unwrap();
    eventually(Duration::from_secs(5), "released on every node", || {
        holders(&cluster, &resource, &token) == 0
    })
    .await;
}

#[tokio::test]
async fn dropping_the_guard_releases_in_the_background() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("drop");
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    drop(guard);
    eventually(Duration::from_secs(5), "dropped guard released", || {
        cluster.keys_everywhere(&resource).is_empty()
    })
    .await;
}

/// Cancels `lock()` at many points (under `timeout`) and checks that nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_lock_leaves_no_keys() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster.urls());
    redlock.connect().await.unwrap();
    let prefix = unique("cancel");
    let mut completed = 0;
    for i in 0..300u64 {
        let resource = format!("{prefix}:{i}");
        // From before the first request to after the last answer.
        let budget = Duration::from_micros(i * 5);
        if let Ok(result) = tokio::time::timeout(budget, redlock.lock(&resource, TTL)).await {
            completed += 1;
            drop(result.unwrap()); // released in the background too
        }
    }
    // Cancellation while contended: another owner holds the lock, the attempt cleans up.
    let held = redlock.lock(format!("{prefix}:held"), TTL).await.unwrap();
    for i in 0..100u64 {
        let _ = tokio::time::timeout(
            Duration::from_micros(i * 10),
            redlock.lock(format!("{prefix}:held"), TTL),
        )
        .await;
    }
    let held_token = held.token().to_owned();
    assert!(completed < 300, "some attempts were really cancelled");
    let pattern = format!("{prefix}:*");
    eventually(
        Duration::from_secs(10),
        "no key left after cancellations",
        || {
            cluster
                .keys_everywhere(&pattern)
                .iter()
                .all(|(_, k)| k == &format!("{prefix}:held"))
        },
    )
    .await;
    assert_eq!(
        holders(&cluster, &format!("{prefix}:held"), &held_token),
        5,
        "the holder's key was never touched by the cancelled attempts"
    );
    held.release().await.unwrap();
    eventually(Duration::from_secs(10), "all released", || {
        cluster.keys_everywhere(&pattern).is_empty()
    })
    .await;
}

#[tokio::test]
async fn cancelled_try_lock_and_release_leave_no_keys() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    redlock.connect().await.unwrap();
    let prefix = unique("cancel-release");
    for i in 0..100u64 {
        let resource = format!("{prefix}:{i}");
        let _ = tokio::time::timeout(
            Duration::from_micros(i * 10),
            redlock.try_lock(&resource, TTL),
        )
        .await;
        if let Ok(Some(guard)) = redlock.try_lock(&resource, TTL).await {
            let _ = tokio::time::timeout(Duration::from_micros(i * 5), guard.release()).await;
        }
    }
    let pattern = format!("{prefix}:*");
    eventually(Duration::from_secs(10), "no key left", || {
        cluster.keys_everywhere(&pattern).is_empty()
    })
    .await;
}

#[tokio::test]
async fn password_and_tls_nodes() {
    let password = RedisServer::start_with(ServerOptions {
        password: Some("s3cret".into()),
        ..Default::default()
    });
    let redlock = client(&[password.url()]);
    let resource = unique("auth");
    lock_and_release(&redlock, &resource, TTL).await;

    let wrong = format!("redis://:wrong@127.0.0.1:{}", password.port());
    let redlock = client(&[wrong]);
    let err = tokio::time::timeout(Duration::from_secs(10), redlock.try_lock(&resource, TTL))
        .await
        .expect("a wrong password is an error, not a hang")
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    let report = err.report().unwrap().to_string();
    assert!(
        report.contains("WRONGPASS") || report.to_lowercase().contains("auth"),
        "the per-node error names the authentication failure: {report}"
    );
}

#[cfg(feature = "tls")]
#[tokio::test]
async fn tls_node_with_private_ca() {
    let server = RedisServer::start_with(ServerOptions {
        tls: true,
        ..Default::default()
    });
    assert!(server.url().starts_with("rediss://"));
    let redlock = Redlock::builder()
        // Quarantine off: these tests count every vote (quarantine has its own tests).
        .restart_quarantine(false)
        .node(server.url())
        .node_timeout(Duration::from_secs(2))
        .tls_root_certificate(server.ca_pem().unwrap())
        .build()
        .unwrap();
    let resource = unique("tls");
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    assert_eq!(get(&server, &resource).as_deref(), Some(guard.token()));
    guard.release().await.unwrap();

    // Without the CA the certificate is rejected: a clear per-node error, no panic.
    let untrusted = Redlock::builder()
        // Quarantine off: these tests count every vote (quarantine has its own tests).
        .restart_quarantine(false)
        .node(server.url())
        .node_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let err = untrusted.try_lock(&resource, TTL).await.unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    let report = err.report().unwrap();
    assert!(
        matches!(report.results()[0].outcome, NodeOutcome::Failed(_)),
        "{report}"
    );
}

#[tokio::test]
async fn invalid_configuration_is_rejected_with_a_clear_message() {
    fn build_err(b: quorum_lock::RedlockBuilder) -> String {
        b.build().unwrap_err().to_string()
    }
    let ok = "redis://127.0.0.1:6399";
    let cases: Vec<(quorum_lock::RedlockBuilder, &str)> = vec![
        (Redlock::builder(), "no nodes"),
        (Redlock::builder().nodes([ok, ok]), "listed twice"),
        (
            Redlock::builder().nodes(["redis://LocalHost:7000", "redis://localhost:7000/0"]),
            "listed twice",
        ),
        (
            Redlock::builder().node("http://example.com"),
            "malformed node URL",
        ),
        (
            Redlock::builder().node("redis://127.0.0.1:notaport"),
            "malformed node URL",
        ),
        (Redlock::builder().node(""), "empty node URL"),
        (
            Redlock::builder().node(ok).drift_factor(1.0),
            "drift factor",
        ),
        (
            Redlock::builder().node(ok).drift_factor(-0.1),
            "drift factor",
        ),
        (
            Redlock::builder().node(ok).drift_factor(f64::NAN),
            "drift factor",
        ),
        (
            Redlock::builder().node(ok).default_ttl(Duration::ZERO),
            "ttl",
        ),
        (
            Redlock::builder()
                .node(ok)
                .default_ttl(Duration::from_millis(40)),
            "too short",
        ),
        (
            Redlock::builder().node(ok).node_timeout(Duration::ZERO),
            "node timeout",
        ),
        (
            Redlock::builder().node(ok).connect_timeout(Duration::ZERO),
            "connect timeout",
        ),
        (Redlock::builder().node(ok).max_attempts(0), "max attempts"),
    ];
    for (builder, needle) in cases {
        let msg = build_err(builder);
        assert!(msg.contains(needle), "expected {needle:?} in {msg:?}");
        assert!(msg.starts_with("invalid configuration: "), "{msg}");
    }
    // The message never shows a password.
    let msg = build_err(Redlock::builder().node("redis://:hunter2@127.0.0.1:nope"));
    assert!(!msg.contains("hunter2"), "{msg}");

    // Per-call input.
    let redlock = Redlock::builder().node(ok).build().unwrap();
    for (resource, ttl, needle) in [
        ("", TTL, "empty resource name"),
        ("r", Duration::ZERO, "below one millisecond"),
        ("r", Duration::from_millis(30), "too short"),
    ] {
        let err = redlock.try_lock(resource, ttl).await.unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        assert!(err.to_string().contains(needle), "{err}");
        let err = redlock.lock(resource, ttl).await.unwrap_err();
        assert!(err.to_string().contains(needle), "{err}");
    }
    let err = redlock.lock("r", TTL).max_attempts(0).await.unwrap_err();
    assert!(err.to_string().contains("max attempts"), "{err}");
}

#[tokio::test]
async fn unreachable_nodes_never_fail_build_or_hang() {
    // Nothing listens on these ports (below the ephemeral range, unused by the harness).
    let redlock = Redlock::builder()
        // Quarantine off: these tests count every vote (quarantine has its own tests).
        .restart_quarantine(false)
        .nodes([
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:2",
            "redis://127.0.0.1:3",
        ])
        .build()
        .expect("build never connects");
    let err = tokio::time::timeout(
        Duration::from_secs(10),
        redlock
            .lock("anything", TTL)
            .wait(Duration::from_millis(300)),
    )
    .await
    .expect("no hang")
    .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    let Error::Timeout { attempts, .. } = err else {
        panic!("expected a timeout, got {err:?}");
    };
    assert!(attempts >= 1);
}

#[tokio::test]
async fn odd_but_valid_configurations_work() {
    let server = RedisServer::start();
    let redlock = Redlock::builder()
        // Quarantine off: these tests count every vote (quarantine has its own tests).
        .restart_quarantine(false)
        .node(server.url())
        .retry_delay(Duration::ZERO)
        .max_retry_delay(Duration::ZERO)
        .drift_factor(0.0)
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let resource = unique("odd");
    let held = redlock.lock(&resource, TTL).await.unwrap();
    // Zero retry delay and a one-attempt budget: contended, reported as a timeout.
    let err = redlock
        .lock(&resource, TTL)
        .max_attempts(3)
        .await
        .unwrap_err();
    let Error::Timeout {
        attempts, ref last, ..
    } = err
    else {
        panic!("{err:?}");
    };
    assert_eq!(attempts, 3);
    assert!(matches!(**last, Error::Contended { .. }), "{last:?}");
    assert!(err.is_contended());
    held.release().await.unwrap();
    // The smallest usable TTL for a 500 ms node timeout and no drift.
    let tiny = redlock
        .try_lock(&resource, Duration::from_millis(503))
        .await
        .unwrap();
    assert!(tiny.is_some());
    let err = redlock
        .try_lock(&resource, Duration::from_millis(502))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guards_are_owned_and_move_into_tasks() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("owned");
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    let shared = Arc::new(resource.clone());
    let handle = tokio::spawn(async move {
        assert_eq!(guard.resource(), *shared);
        guard.release().await
    });
    handle.await.unwrap().unwrap();
    // The release returned at a majority; the last node's delete may still be on its way.
    eventually(Duration::from_secs(5), "no key left", || {
        cluster.keys_everywhere(&resource).is_empty()
    })
    .await;
}

#[tokio::test]
async fn status_reports_what_each_node_holds() {
    use quorum_lock::{Holder, Verdict};
    let mut cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("status");
    let free = redlock.status(&resource).await.unwrap();
    assert_eq!(free.verdict, Verdict::Free);
    assert!(free.nodes.iter().all(|n| n.holder == Some(Holder::Free)));

    let guard = redlock.lock(&resource, TTL).await.unwrap();
    eventually(Duration::from_secs(5), "key on every node", || {
        holders(&cluster, &resource, guard.token()) == 3
    })
    .await;
    let held = redlock.status(&resource).await.unwrap();
    assert_eq!(
        held.verdict,
        Verdict::Held {
            token: guard.token().to_owned()
        }
    );
    for node in &held.nodes {
        let Some(Holder::Token { token, ttl }) = &node.holder else {
            panic!("{node:?}");
        };
        assert_eq!(token, guard.token());
        assert!(ttl.unwrap() <= TTL && ttl.unwrap() > Duration::ZERO);
    }

    // A foreign value on one node and another owner's token on another: split.
    let _: () = redis::cmd("DEL")
        .arg(&resource)
        .query(&mut cluster.nodes[0].conn())
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg(&resource)
        .arg("x")
        .query(&mut cluster.nodes[0].conn())
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(&resource)
        .arg("other")
        .query(&mut cluster.nodes[1].conn())
        .unwrap();
    let split = redlock.status(&resource).await.unwrap();
    assert_eq!(split.verdict, Verdict::Split);
    assert_eq!(split.nodes[0].holder, Some(Holder::Foreign("list".into())));
    assert_eq!(
        split.nodes[1].holder,
        Some(Holder::Token {
            token: "other".into(),
            ttl: None
        })
    );

    // reset() deletes whatever is there and says where it was.
    let report = redlock.reset(&resource).await.unwrap();
    assert_eq!(report.count(&NodeOutcome::Released), 3);
    drop(guard);
    cluster.nodes[2].kill();
    cluster.nodes[1].kill();
    let unknown = redlock.status(&resource).await.unwrap();
    assert_eq!(unknown.verdict, Verdict::Unknown);
    assert!(unknown.nodes[2].error.is_some());
}

/// No lock reaches the library's own keys: a name under `quorum-lock:` is refused for
/// every kind, before anything is sent, and the node's bookkeeping stays.
#[tokio::test]
async fn names_in_the_library_namespace_are_refused() {
    let server = RedisServer::start();
    let redlock = Redlock::builder().node(server.url()).build().unwrap();
    let guard = redlock
        .lock("ordinary", TTL)
        .await
        .expect("an ordinary name");
    guard.release().await.unwrap();
    let marker = "quorum-lock:node:marker";
    let read_marker = || -> Option<String> {
        redis::cmd("GET")
            .arg(marker)
            .query(&mut server.conn())
            .unwrap()
    };
    let before = read_marker();
    assert!(before.is_some(), "the node was admitted and marked");
    let refused = |err: Error| {
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        assert!(
            err.to_string().contains("starts with \"quorum-lock:\""),
            "{err}"
        );
    };
    refused(redlock.lock(marker, TTL).await.unwrap_err());
    refused(redlock.try_lock(marker, TTL).await.unwrap_err());
    refused(redlock.try_lock_fenced(marker, TTL).await.unwrap_err());
    refused(
        redlock
            .lock_many(["a", "quorum-lock:rw:x"], TTL)
            .await
            .unwrap_err(),
    );
    refused(redlock.rwlock("quorum-lock:rw").unwrap_err());
    refused(redlock.semaphore("quorum-lock:permit:x", 2).unwrap_err());
    refused(redlock.reset(marker).await.unwrap_err());
    assert_eq!(read_marker(), before);
}
