//! Restart quarantine against real servers: a node that lost its memory is
//! kept out for as long as any client's lease may depend on it (the ensemble's longest
//! TTL, rounding its uptime down), fresh and unrestarted nodes vote at once, missing inputs
//! keep a node out, one server behind two URLs is refused, and fencing tokens never repeat
//! after a minority restart.

mod common;

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::proxy::FaultProxy;
use common::{
    Cluster, RedisServer, ServerExtras, eventually, lock_and_release, unique, wait_until,
};
use quorum_lock::{Error, NodeOutcome, QuarantineReason, Redlock, RedlockBuilder};

fn client(urls: &[String], ttl: Duration) -> Redlock {
    common::safety_client(urls, true, ttl)
}

fn uptime_secs(node: &RedisServer) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut node.conn())
        .unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("uptime_in_seconds:"))
        .unwrap();
    line["uptime_in_seconds:".len()..].trim().parse().unwrap()
}

/// Puts a foreign value at `key` on `node` for `ms` milliseconds: a stale key that makes
/// the next lock a bare majority on the other nodes.
fn stale_key(node: &RedisServer, key: &str, ms: u64) {
    redis::cmd("SET")
        .arg(key)
        .arg("stale")
        .arg("PX")
        .arg(ms)
        .query::<()>(&mut node.conn())
        .unwrap();
}

fn exists(node: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut node.conn())
        .unwrap()
        == 1
}

/// Waits until the key [`stale_key`] put at `key` on `node` has expired.
async fn stale_key_expired(node: &RedisServer, key: &str) {
    eventually(Duration::from_secs(5), "stale key expired", || {
        !exists(node, key)
    })
    .await;
}

/// Restarts `node` empty and waits (blocking this worker thread) until it reports an
/// uptime of `secs` seconds.
fn restart_and_age(node: &mut RedisServer, secs: u64) {
    tokio::task::block_in_place(|| {
        node.restart();
        let what = format!("restarted node up {secs} s");
        wait_until(Duration::from_secs(10), &what, || uptime_secs(node) >= secs);
    });
}

/// A fresh ensemble grants the first lock at once (the old quarantine
/// refused every vote for one TTL), and the next lock takes the fast path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_ensemble_locks_at_once() {
    let cluster = Cluster::start(5);
    let redlock = client(&cluster.urls(), Duration::from_secs(30));
    let resource = unique("fresh");
    let began = Instant::now();
    let guard = redlock
        .lock(&resource, Duration::from_secs(30))
        .max_attempts(1)
        .await
        .expect("fresh nodes vote at once");
    let took = began.elapsed();
    eprintln!("first lock on a fresh 5-node ensemble: {took:.1?} (connects included)");
    assert_eq!(guard.report().count(&NodeOutcome::Acquired), 5);
    guard.release().await.unwrap();
    // Every node now has the record and its marker; a second client (new connections,
    // same nodes that did not restart) votes at once too.
    let other = client(&cluster.urls(), Duration::from_secs(5));
    let guard = other
        .lock(&resource, Duration::from_secs(5))
        .max_attempts(1)
        .await
        .expect("unrestarted nodes vote at once");
    guard.release().await.unwrap();
}

/// The quarantine lasts the longest TTL of the ensemble, not the TTL of
/// the client asking. A 60 s lock held on a bare majority loses one of its nodes; a 2 s
/// client must not acquire through that node once its own TTL has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_ttl_client_waits_out_another_clients_long_lease() {
    let mut cluster = Cluster::start(3);
    let urls = cluster.urls();
    let resource = unique("long-lease");
    // Node 2 holds a stale key: the 60 s lock is held on nodes 0 and 1 only.
    stale_key(&cluster.nodes[2], &resource, 1_500);
    let long = client(&urls, Duration::from_secs(60));
    let held = long
        .lock(&resource, Duration::from_secs(60))
        .max_attempts(1)
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", e.report()));
    assert_eq!(held.report().count(&NodeOutcome::HeldByOther), 1);
    stale_key_expired(&cluster.nodes[2], &resource).await;

    // Node 1 loses its memory, then runs longer than the short client's TTL plus drift
    // (rounded: uptime 4 means more than 3 s).
    restart_and_age(&mut cluster.nodes[1], 4);

    let short = client(&urls, Duration::from_secs(2));
    let refused = short
        .try_lock(&resource, Duration::from_secs(2))
        .await
        .expect("a refused attempt, not an error");
    assert!(refused.is_none());
    let err = short
        .lock(&resource, Duration::from_secs(2))
        .max_attempts(1)
        .await
        .expect_err("node 1 may have held the 60 s lock");
    let Error::Timeout { last, .. } = err else {
        panic!("{err:?}");
    };
    let err = *last;
    // Node 0 has the 60 s lock, node 2 votes, node 1 is kept out: held elsewhere.
    assert!(err.is_contended(), "{err}");
    let report = err.report().unwrap();
    assert_eq!(report.count(&NodeOutcome::Acquired), 1, "{report}");
    let kept = &report.results()[1];
    let NodeOutcome::Quarantined { reason, remaining } = &kept.outcome else {
        panic!("node 1 must be kept out: {report}");
    };
    assert_eq!(*reason, QuarantineReason::MemoryLost, "{report}");
    // 60 s + 0.6 s drift allowance, minus at most the 5 s the node has run.
    let remaining = remaining.expect("a known end");
    assert!(
        remaining > Duration::from_secs(55) && remaining <= Duration::from_millis(60_602),
        "{remaining:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains(&kept.node) && message.contains("kept out by restart quarantine"),
        "{message}"
    );
    // `status` says so too, without writing anything.
    let status = short.status(&resource).await.unwrap();
    let kept_out = status.nodes[1].kept_out.expect("node 1 kept out");
    assert_eq!(kept_out.reason, QuarantineReason::MemoryLost);
    assert!(
        kept_out
            .remaining
            .is_some_and(|r| r > Duration::from_secs(50))
    );
    assert_eq!(
        (status.nodes[0].kept_out, status.nodes[2].kept_out),
        (None, None)
    );
    assert!(status.to_json().contains("\"kept_out\":\"memory_lost\""));
    assert!(held.is_valid(), "the 60 s holder still holds its lock");
    // Its release reaches node 0; node 1 (restarted empty) answers on a fresh connection
    // that it does not hold the key, or its old connection fails: no majority confirmed
    // either way unless the third node held a copy.
    let released = held.release().await;
    assert!(
        released.is_ok()
            || released
                .as_ref()
                .is_err_and(|e| e.is_unavailable() || matches!(e, Error::NotHeld { .. })),
        "{released:?}"
    );
}

/// A failover behind a member's address (a DNS name, a virtual IP, a proxy) hands its
/// vote to a promoted replica that never received a lease's key. The replica has run
/// longer than the lease, but as a replica: it is a node in a new life, kept out for the
/// lease, not admitted by its uptime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_behind_a_moved_address_is_kept_out() {
    let cluster = Cluster::start(2);
    let master = RedisServer::start();
    let replica = RedisServer::start_extended(
        Default::default(),
        ServerExtras {
            extra_args: ["--replicaof", "127.0.0.1", &master.port().to_string()]
                .map(str::to_owned)
                .to_vec(),
            ..Default::default()
        },
    );
    let address = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], master.port())));
    let urls = [
        address.url(),
        cluster.nodes[0].url(),
        cluster.nodes[1].url(),
    ];
    let resource = unique("failover");
    // The replica has run longer than the lease below plus drift (uptime 5: more than
    // 4 s), then stops following its master: it never receives the lease's key.
    wait_until(
        Duration::from_secs(15),
        "replica older than the lease",
        || uptime_secs(&replica) >= 5,
    );
    redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query::<()>(&mut replica.conn())
        .unwrap();
    // Node 2 holds a stale key: the lease is on the master and node 1 only.
    stale_key(&cluster.nodes[1], &resource, 300);
    let lease = Duration::from_secs(3);
    let first = client(&urls, lease);
    let held = first
        .lock(&resource, lease)
        .max_attempts(1)
        .await
        .unwrap_or_else(|e| panic!("{e}: {:?}", e.report()));
    assert_eq!(held.report().count(&NodeOutcome::HeldByOther), 1);
    stale_key_expired(&cluster.nodes[1], &resource).await;

    // The failover: the member's address now leads to the promoted replica.
    address.move_to(SocketAddr::from(([127, 0, 0, 1], replica.port())));
    let second = client(&urls, lease);
    let err = second
        .lock(&resource, lease)
        .max_attempts(1)
        .await
        .expect_err("the promoted replica lacks the lease's key");
    assert!(held.is_valid(), "the first holder still holds its lock");
    let Error::Timeout { last, .. } = err else {
        panic!("{err:?}");
    };
    let report = last.report().expect("a per-node report");
    assert_eq!(report.count(&NodeOutcome::Acquired), 1, "{report}");
    assert_eq!(report.count(&NodeOutcome::HeldByOther), 1, "{report}");
    let NodeOutcome::Quarantined { reason, .. } = &report.results()[0].outcome else {
        panic!("the promoted replica must be kept out: {report}");
    };
    assert_eq!(*reason, QuarantineReason::MemoryLost, "{report}");
    // Its release finds its key on node 1 only: the replica never had it, and node 2's
    // key was a stale one.
    let released = held.release().await;
    assert!(
        matches!(released, Err(Error::NotHeld { .. })),
        "{released:?}"
    );
}

/// `uptime_in_seconds` is the difference of two whole-second readings, so
/// a node 0.4 s old can report 1. A restarted node is only trusted as old as its uptime
/// minus one second: a client never acquires through it while a 1 s lease it may have
/// held is still valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_is_not_trusted_older_than_it_may_be() {
    let mut cluster = Cluster::start(3);
    let urls = cluster.urls();
    let resource = unique("rounding");
    let ttl = Duration::from_secs(1);
    let first = client(&urls, ttl);
    // Warm up the connections; leave the record at 1 s.
    lock_and_release(&first, &resource, ttl).await;
    // Restart node 1 around the middle of a wall-clock second, so it reports uptime 1
    // about half a second after it started.
    let fraction = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_millis()
    };
    eventually(Duration::from_secs(3), "wall clock at .40", || {
        (400..450).contains(&fraction())
    })
    .await;
    stale_key(&cluster.nodes[2], &resource, 300);
    let held = first.lock(&resource, ttl).max_attempts(1).await.unwrap();
    let value: String = redis::cmd("GET")
        .arg(&resource)
        .query(&mut cluster.nodes[2].conn())
        .unwrap();
    assert_eq!(value, "stale", "the lock is on nodes 0 and 1 only");
    tokio::task::block_in_place(|| cluster.nodes[1].restart());
    let restarted = Instant::now();

    // A second client asks as soon as the node reports 1 s, and keeps asking while the
    // first holder's lock is valid.
    let second = client(&urls, ttl);
    let node1 = &cluster.nodes[1];
    eventually(Duration::from_secs(3), "node 1 reports uptime 1", || {
        uptime_secs(node1) >= 1
    })
    .await;
    let mut tries = 0;
    while held.is_valid() {
        tries += 1;
        if let Ok(Some(guard)) = second.try_lock(&resource, ttl).await {
            assert!(!held.is_valid(), "two holders after {tries} tries");
            guard.release().await.unwrap();
            break;
        }
    }
    assert!(tries > 0);
    drop(held);
    // Once the node is old enough (1 s + drift, uptime rounded down), it votes again.
    let began = Instant::now();
    loop {
        match second.try_lock(&resource, ttl).await {
            Ok(Some(guard)) if guard.report().count(&NodeOutcome::Acquired) >= 2 => {
                let votes: Vec<_> = guard.report().results().to_vec();
                guard.release().await.unwrap();
                if votes[1].outcome == NodeOutcome::Acquired {
                    break;
                }
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "node 1 never voted"
        );
    }
    eprintln!(
        "restarted node votes again {:.1?} after it was ready (record 1 s)",
        restarted.elapsed()
    );
}

/// A node whose `INFO` is refused (an ACL user without `+info`) does not
/// vote, and the report says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_refuses_info_does_not_vote() {
    let cluster = Cluster::start(3);
    for node in &cluster.nodes[..2] {
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg("locker")
            .arg("on")
            .arg(">secret")
            .arg("~*")
            .arg("&*")
            .arg("+@all")
            .arg("-info")
            .query::<()>(&mut node.conn())
            .unwrap();
    }
    let urls: Vec<String> = (cluster.nodes.iter().enumerate())
        .map(|(i, node)| match i {
            0 | 1 => format!("redis://locker:secret@127.0.0.1:{}", node.port()),
            _ => node.url(),
        })
        .collect();
    let redlock = client(&urls, Duration::from_secs(5));
    let resource = unique("no-info");
    let err = redlock
        .lock(&resource, Duration::from_secs(5))
        .max_attempts(1)
        .await
        .expect_err("two nodes without identity");
    assert!(err.is_unavailable(), "{err}");
    let report = err.report().unwrap();
    for r in &report.results()[..2] {
        assert_eq!(
            r.outcome,
            NodeOutcome::Quarantined {
                reason: QuarantineReason::NoIdentity,
                remaining: None,
            },
            "{report}"
        );
    }
    // Once two nodes were out, the third was not waited for.
    assert!(
        matches!(
            report.results()[2].outcome,
            NodeOutcome::Acquired | NodeOutcome::Pending
        ),
        "{report}"
    );
    assert!(!err.to_string().contains("did not answer"), "{err}");
    eventually(Duration::from_secs(5), "refused attempt cleaned up", || {
        cluster.keys_everywhere(&resource).is_empty()
    })
    .await;
}

/// Two URLs reaching one server are one vote: a configuration error
/// naming both, at connect and at the first lock.
#[tokio::test]
async fn one_server_behind_two_urls_is_refused() {
    let cluster = Cluster::start(2);
    let port = cluster.nodes[0].port();
    for (a, b) in [
        (
            format!("redis://127.0.0.1:{port}"),
            format!("redis://localhost:{port}"),
        ),
        (
            format!("redis://127.0.0.1:{port}/0"),
            format!("redis://127.0.0.1:{port}/1"),
        ),
    ] {
        let urls = [a, cluster.nodes[1].url(), b];
        let redlock = client(&urls, Duration::from_secs(5));
        let names: Vec<String> = redlock.nodes().map(str::to_owned).collect();
        match redlock.connect().await {
            Err(Error::SameServer { first, second }) => {
                assert_eq!((first, second), (names[0].clone(), names[2].clone()));
            }
            other => panic!("{other:?}"),
        }
        let resource = unique("twice");
        let err = redlock
            .lock(&resource, Duration::from_secs(5))
            .await
            .expect_err("one server must not vote twice");
        assert!(matches!(&err, Error::SameServer { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains(&names[0]) && message.contains(&names[2]),
            "{message}"
        );
        eventually(Duration::from_secs(5), "no key left", || {
            cluster.keys_everywhere(&resource).is_empty()
        })
        .await;
    }
}

/// The counter of `resource` on `node` (its digits; the life tag after them is ignored),
/// 0 when absent.
fn counter(node: &RedisServer, resource: &str) -> u64 {
    let raw: Option<String> = redis::cmd("GET")
        .arg(format!("quorum-lock:fence:{resource}"))
        .query(&mut node.conn())
        .unwrap();
    raw.map_or(0, |raw| raw.split(' ').next().unwrap().parse().unwrap())
}

/// A token committed on two of three nodes (the third held a stale key), one of the two
/// restarts empty; once its quarantine is over, a holder that reads only the restarted node
/// and the stale one must not be given the same token again, nor a smaller one: the
/// counters it reads are behind, the clock component is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_do_not_repeat_after_a_minority_restart() {
    let mut cluster = Cluster::start(3);
    let urls = cluster.urls();
    let ttl = Duration::from_secs(1);
    let redlock = client(&urls, ttl);
    let resource = unique("fence-restart");
    let fenced = || redlock.lock(&resource, ttl).fenced().max_attempts(1);
    let first = fenced().await.unwrap();
    let t1 = first.fencing_token().get();
    first.release().await.unwrap();
    // The commit beyond the majority may still be on its way to node 2.
    eventually(Duration::from_secs(5), "token 1 on node 2", || {
        counter(&cluster.nodes[2], &resource) == t1
    })
    .await;
    // The next token reaches nodes 0 and 1 only.
    stale_key(&cluster.nodes[2], &resource, 400);
    let second = fenced().await.unwrap();
    let t2 = second.fencing_token().get();
    second.release().await.unwrap();
    assert!(t2 > t1);
    assert_eq!(counter(&cluster.nodes[2], &resource), t1);
    stale_key_expired(&cluster.nodes[2], &resource).await;

    // Node 1 loses its memory and runs past its quarantine (1 s record; uptime 3 means
    // more than 2 s).
    restart_and_age(&mut cluster.nodes[1], 3);
    // The client's connection to node 1 broke with the restart: reconnect first, so that
    // the attempt below hears node 1 (on the old code it then counts its empty counter).
    loop {
        let report = redlock.connect().await.unwrap();
        if report.results()[1].outcome == quorum_lock::NodeOutcome::Reachable {
            break;
        }
    }
    tokio::task::block_in_place(|| cluster.nodes[0].pause());
    // Only node 1 (empty) and node 2 (the older token) answer: their counters say t1 at
    // most, yet the token minted is above t2.
    let outcome = fenced().await;
    tokio::task::block_in_place(|| cluster.nodes[0].resume());
    match outcome {
        Ok(guard) => {
            let token = guard.fencing_token().get();
            guard.release().await.unwrap();
            assert!(token > t2, "token {token} after {t2}");
        }
        // Or node 1 is still kept out (its readmission is confirmed by the next round).
        Err(Error::Timeout { last, .. }) => {
            let node1 = last.report().unwrap().results()[1].outcome.clone();
            assert!(node1.is_quarantined(), "{last}");
        }
        Err(other) => panic!("{other}"),
    }
    // With node 0 back, the sequence goes on above t2.
    let guard = (redlock.lock(&resource, ttl).fenced())
        .wait(Duration::from_secs(5))
        .await
        .unwrap();
    let t3 = guard.fencing_token().get();
    guard.release().await.unwrap();
    assert!(t3 > t2, "{t3} after {t2}");
}

/// A rolling restart through every node, each waiting out its quarantine, with fenced
/// locks all along: tokens strictly increase and every node votes again. A node that lost
/// its memory after the ensemble served locks is admitted by its age: the round that
/// finds its quarantine over marks it (`Readmitting`) and the next round (in the same
/// attempt, when the marking alone left it short of a majority) counts its vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_through_a_rolling_restart() {
    let mut cluster = Cluster::start(3);
    let urls = cluster.urls();
    let ttl = Duration::from_secs(1);
    let redlock = client(&urls, ttl);
    let resource = unique("rolling");
    let mut tokens = Vec::new();
    let readmitting = NodeOutcome::Quarantined {
        reason: QuarantineReason::Readmitting,
        remaining: None,
    };
    for restarted in 0..3 {
        tokio::task::block_in_place(|| cluster.nodes[restarted].restart());
        let began = Instant::now();
        let (mut marked, mut attempts) = (false, 0);
        loop {
            assert!(
                began.elapsed() < Duration::from_secs(15),
                "node never voted"
            );
            attempts += 1;
            let guard = match redlock.lock(&resource, ttl).fenced().max_attempts(1).await {
                Ok(guard) => guard,
                Err(e) if e.is_unavailable() || e.is_contended() => {
                    let report = e.report().map(|r| r.results()[restarted].outcome.clone());
                    marked |= report.as_ref() == Some(&readmitting);
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            tokens.push(guard.fencing_token().get());
            let outcome = guard.report().results()[restarted].outcome.clone();
            guard.release().await.ok();
            // Marked by an earlier attempt: its marker is current now, it votes (or its
            // answer was not waited for).
            let counts = matches!(outcome, NodeOutcome::Acquired | NodeOutcome::Pending);
            assert!(!marked || counts, "{outcome}");
            marked |= outcome == readmitting;
            if outcome == NodeOutcome::Acquired {
                eprintln!(
                    "node {restarted} votes again {:.1?} after its restart ({attempts} attempts)",
                    began.elapsed()
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert!(tokens.len() >= 3);
    for pair in tokens.windows(2) {
        assert!(pair[0] < pair[1], "tokens {tokens:?}");
    }
}

/// A fence floor lifts the sequence above the clock (for continuing a sequence of larger
/// tokens).
#[tokio::test]
async fn a_fence_floor_lifts_the_token_sequence() {
    let cluster = Cluster::start(3);
    let floor = 9_000_000_000_000_000;
    let redlock = Redlock::builder()
        .nodes(cluster.urls())
        .fence_floor(floor)
        .build()
        .unwrap();
    let resource = unique("floor");
    for want in [floor + 1, floor + 2] {
        let guard = redlock
            .lock(&resource, Duration::from_secs(5))
            .fenced()
            .await
            .unwrap();
        assert_eq!(guard.fencing_token().get(), want);
        guard.release().await.unwrap();
    }
    let err = Redlock::builder()
        .nodes(cluster.urls())
        .fence_floor(u64::MAX)
        .build()
        .unwrap_err();
    assert!(err.to_string().contains("fence floor"), "{err}");
}

/// `SET` and script calls a node executed, from `INFO commandstats`: `(command, calls)`.
/// (Commands a script runs count too: a `SET` in the acquire script would show as one more
/// `set` and one more `evalsha`.)
fn command_calls(node: &RedisServer) -> Vec<(String, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut node.conn())
        .unwrap();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .filter(|(name, _)| name == "set" || name.starts_with("eval"))
        .collect()
}

/// The fast path: once every node was seen admitted with a record covering the TTL, an
/// uncontended lock is one `SET NX PX` per node and its release one `EVALSHA`, as before
/// restart quarantine v2 (N = 1 and N = 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_lock_is_one_set_per_node() {
    const CYCLES: u64 = 10;
    for n in [1, 5] {
        let cluster = Cluster::start(n);
        let redlock = client(&cluster.urls(), Duration::from_secs(5));
        let resource = unique("steady");
        let reset = || {
            for node in &cluster.nodes {
                redis::cmd("CONFIG")
                    .arg("RESETSTAT")
                    .query::<()>(&mut node.conn())
                    .unwrap();
            }
        };
        let cycle = || async {
            let guard = redlock
                .lock(&resource, Duration::from_secs(5))
                .await
                .unwrap();
            guard.release().await.unwrap();
        };
        // The first lock pays for the script (record, marker); the marks are acknowledged
        // in the background, so the steady state starts a lock or two later.
        cycle().await;
        let steady = vec![("evalsha".to_owned(), 1), ("set".to_owned(), 1)];
        let mut warm = 1;
        loop {
            reset();
            cycle().await;
            warm += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
            let settled = cluster.nodes.iter().all(|node| {
                let mut calls = command_calls(node);
                calls.sort();
                calls == steady
            });
            if settled {
                break;
            }
            assert!(warm < 10, "no steady state after {warm} locks");
        }
        eprintln!("N = {n}: steady state after {warm} locks");
        reset();
        for _ in 0..CYCLES {
            let guard = redlock
                .lock(&resource, Duration::from_secs(5))
                .await
                .unwrap();
            guard.release().await.unwrap();
        }
        // Every release is one `EVALSHA` on every node, and no acquisition sent a script
        // (it would be one more). Each acquisition is at most one `SET` per node: a node
        // whose `SET` was still waiting for its connection when the release came never
        // gets it (the release's send gate), so a loaded machine may show one fewer.
        let quorum = n / 2 + 1;
        let mut sets = 0;
        for node in &cluster.nodes {
            let mut calls = Vec::new();
            for _ in 0..500 {
                calls = command_calls(node);
                if calls.contains(&("evalsha".to_owned(), CYCLES)) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            calls.sort();
            let [(evalsha, e), (set, s)] = &calls[..] else {
                panic!("N = {n}: {calls:?}");
            };
            assert_eq!(
                (evalsha.as_str(), *e),
                ("evalsha", CYCLES),
                "N = {n}: {calls:?}"
            );
            assert_eq!(set, "set");
            assert!(*s <= CYCLES, "N = {n}: {calls:?}");
            sets += s;
        }
        assert!(sets >= CYCLES * quorum as u64, "N = {n}: {sets} sets");
    }
}

/// The CLI exits 78 (`EX_CONFIG`) when two node URLs reach one server, naming both.
#[test]
fn the_cli_refuses_one_server_listed_twice() {
    let cluster = Cluster::start(2);
    let port = cluster.nodes[0].port();
    let nodes = format!(
        "redis://127.0.0.1:{port},{},redis://localhost:{port}",
        cluster.nodes[1].url()
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quorum-lock"))
        .args(["--nodes", &nodes, "run", &unique("cli-twice"), "--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(
        stderr.contains(&format!("127.0.0.1:{port}"))
            && stderr.contains(&format!("localhost:{port}")),
        "{stderr}"
    );
}

/// A `tracing` writer keeping everything written to it, for tests that read a warning.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

const UNSAFE_FENCING: &str = "fenced locks are refused";

/// Fencing on nodes without persistence and with quarantine off is refused, and said at
/// connect: fencing is chosen per request, so a client with quarantine off warns once its
/// nodes are connected, naming the nodes without `appendfsync always` and saying that
/// fenced locks are refused, before any lock; once per client. With quarantine
/// on, or on durable nodes, it says nothing. (Current-thread runtime: the subscriber set
/// for this thread sees every task of the test.)
#[tokio::test]
async fn quarantine_off_on_volatile_nodes_warns_at_connect() {
    let volatile = Cluster::start(3);
    let durable = RedisServer::start_with(common::ServerOptions {
        appendonly: true,
        ..Default::default()
    });
    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let build = |urls: &[String], quarantine| {
        Redlock::builder()
            .nodes(urls)
            .restart_quarantine(quarantine)
            .build()
            .unwrap()
    };
    let mut urls = volatile.urls();
    urls.truncate(2);
    urls.push(durable.url());
    let redlock = build(&urls, false);
    redlock.connect().await.unwrap();
    let text = logs.text();
    assert_eq!(text.matches(UNSAFE_FENCING).count(), 1, "{text}");
    let line = text.lines().find(|l| l.contains(UNSAFE_FENCING)).unwrap();
    let names: Vec<&str> = redlock.nodes().collect();
    assert!(line.contains(" WARN "), "{line}");
    assert!(
        line.contains(&format!("nodes=[\"{}\", \"{}\"]", names[0], names[1])),
        "the volatile nodes, not the durable one: {line}"
    );
    // Once per client: a lock through the same nodes adds nothing.
    let guard = redlock
        .lock(unique("warned"), Duration::from_secs(5))
        .await
        .unwrap();
    guard.release().await.unwrap();
    assert_eq!(logs.text().matches(UNSAFE_FENCING).count(), 1);

    // Quarantine on, or every node durable: no warning.
    let before = logs.text().len();
    build(&volatile.urls(), true).connect().await.unwrap();
    build(&[durable.url()], false).connect().await.unwrap();
    let after = logs.text();
    assert!(!after[before..].contains(UNSAFE_FENCING), "{after}");
}

/// A failed attempt gives its keys back as soon as it has decided, not once the markers
/// it writes are acknowledged: a slow node that it marks must not keep its copies on the
/// other nodes (where every other client is refused meanwhile) for that node's round
/// trip. Node 0 answers 350 ms late; nodes 0 and 1 hold a foreign key, so the attempt
/// fails once node 0's refusal is in (about 350 ms), and marks the fresh nodes, node 0
/// included, whose acknowledgement takes another 350 ms. Before, the clean-up waited for
/// it.
#[tokio::test]
async fn a_failed_attempt_gives_its_keys_back_before_its_markers_are_acknowledged() {
    let cluster = Cluster::start(3);
    let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], cluster.nodes[0].port()));
    let proxy = common::proxy::FaultProxy::start(upstream);
    let mut urls = cluster.urls();
    urls[0] = proxy.url();
    let resource = unique("marked-late");
    for node in &cluster.nodes[..2] {
        stale_key(node, &resource, 60_000);
    }
    // A new ensemble's nodes are marked once they have run a second (uptime 2: more than
    // one second, rounding down).
    for node in &cluster.nodes {
        eventually(Duration::from_secs(10), "nodes up 2 s", || {
            uptime_secs(node) >= 2
        })
        .await;
    }
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(RedlockBuilder::MAX_NODE_TIMEOUT)
        .max_attempts(1)
        .build()
        .unwrap();
    redlock.connect().await.unwrap();
    let delay = Duration::from_millis(350);
    proxy.set_delay(delay);
    let attempt = tokio::spawn({
        let resource = resource.clone();
        async move { redlock.lock(&resource, Duration::from_secs(60)).await }
    });
    let ours = &cluster.nodes[2];
    // The attempt reads the markers first (node 0's answer is late too), then sends.
    eventually(delay * 3, "the attempt's key on node 2", || {
        !ours.keys(&resource).is_empty()
    })
    .await;
    let start = Instant::now();
    eventually(delay * 3, "the attempt's key on node 2 given back", || {
        ours.keys(&resource).is_empty()
    })
    .await;
    let given_back = start.elapsed();
    let err = attempt.await.unwrap().unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(
        given_back < delay * 3 / 2,
        "the key stayed {given_back:?}: the clean-up waited for node 0's marker ({delay:?} a reply)"
    );
}
