//! Released means released: after `release()` returns (and after the clean-up of a failed
//! attempt), no node keeps a key of that token once the release's own requests are answered.
//!
//! The race these tests catch: an acquire request not yet written to its node's connection
//! when the majority decision falls (connection still opening, or its task out of
//! cooperative budget) was written after the release's compare-and-delete, leaving a key
//! for a whole TTL.

mod common;

use std::time::Duration;

use common::{Cluster, builder, unique};
use quorum_lock::Redlock;

/// Long enough that a leaked key outlives the wait below by far.
const TTL: Duration = Duration::from_secs(30);
/// A release returns at a majority; the other nodes' deletes are on their connections and
/// answered within the node timeout. Keys still there after this are leaks.
const SETTLE: Duration = Duration::from_secs(3);

/// The shared test client with the library's default retry delays.
fn client(urls: &[String]) -> Redlock {
    builder(urls).build().expect("valid configuration")
}

/// Keeps the runtime's workers busy with short polls, as an application's other tasks do.
fn load_runtime(tasks: usize) -> Vec<tokio::task::JoinHandle<()>> {
    (0..tasks)
        .map(|_| {
            tokio::spawn(async {
                loop {
                    for _ in 0..64 {
                        std::hint::black_box(0u64);
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect()
}

async fn assert_no_keys(cluster: &Cluster, pattern: &str, cycles: usize) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut left = cluster.keys_everywhere(pattern);
    while !left.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = cluster.keys_everywhere(pattern);
    }
    assert!(
        left.is_empty(),
        "{} keys left after {cycles} released cycles: {left:?}",
        left.len()
    );
}

/// One lock/release cycle on a client; the release must report success.
async fn cycle(redlock: &Redlock, resource: &str) {
    let guard = redlock.lock(resource, TTL).await.expect("uncontended lock");
    guard.release().await.expect("released on a majority");
}

/// A new client per cycle: it connects lazily, so the first lock's requests wait for
/// connections that finish at different times.
async fn fresh_clients(n: usize, cycles: usize) {
    let cluster = Cluster::start(n);
    let urls = cluster.urls();
    let prefix = unique(&format!("leak-fresh-{n}"));
    let load = load_runtime(2);
    for i in 0..cycles {
        let redlock = client(&urls);
        cycle(&redlock, &format!("{prefix}:{i}")).await;
    }
    load.iter().for_each(|t| t.abort());
    assert_no_keys(&cluster, &format!("{prefix}:*"), cycles).await;
}

/// One connected client driving several tasks at once, each on its own resources.
async fn warm_client(n: usize, tasks: usize, cycles: usize) {
    let cluster = Cluster::start(n);
    let redlock = client(&cluster.urls());
    redlock.connect().await.unwrap();
    let prefix = unique(&format!("leak-warm-{n}"));
    let load = load_runtime(2);
    let workers: Vec<_> = (0..tasks)
        .map(|t| {
            let redlock = redlock.clone();
            let prefix = prefix.clone();
            tokio::spawn(async move {
                for i in 0..cycles {
                    cycle(&redlock, &format!("{prefix}:{t}:{i}")).await;
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    load.iter().for_each(|t| t.abort());
    assert_no_keys(&cluster, &format!("{prefix}:*"), tasks * cycles).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_client_first_lock_leaves_no_key_n5() {
    fresh_clients(5, 150).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_client_first_lock_leaves_no_key_n3() {
    fresh_clients(3, 150).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_client_first_lock_leaves_no_key_n1() {
    fresh_clients(1, 100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_client_cycles_leave_no_key_n5() {
    warm_client(5, 8, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_client_cycles_leave_no_key_n3() {
    warm_client(3, 8, 300).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_client_cycles_leave_no_key_n1() {
    warm_client(1, 8, 300).await;
}

/// A failed attempt cleans up too: contenders against a held lock, fresh clients each,
/// leave nothing of theirs behind (only the holder's key stays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_of_fresh_clients_leave_no_key() {
    let cluster = Cluster::start(5);
    let urls = cluster.urls();
    let resource = unique("leak-contended");
    let holder = client(&urls);
    let held = holder.lock(&resource, TTL).await.unwrap();
    let token = held.token().to_owned();
    // The holder's SETs beyond its majority land in the background: a contender may take a
    // node they have not reached yet, and the holder's later SET NX is refused there (a
    // minority without its key, as Redlock allows). Start once every node holds it.
    let everywhere = || cluster.keys_everywhere(&resource).len() == cluster.nodes.len();
    common::eventually(
        Duration::from_secs(5),
        "the holder's key on every node",
        everywhere,
    )
    .await;
    let load = load_runtime(2);
    for _ in 0..100 {
        let contender = client(&urls);
        match contender.try_lock(&resource, TTL).await {
            Ok(None) => {}
            other => panic!("expected contended, got {other:?}"),
        }
    }
    load.iter().for_each(|t| t.abort());
    for (i, server) in cluster.nodes.iter().enumerate() {
        let value: Option<String> = redis::cmd("GET")
            .arg(&resource)
            .query(&mut server.conn())
            .unwrap();
        assert_eq!(
            value.as_deref(),
            Some(&*token),
            "node {i} keeps the holder's key"
        );
    }
    held.release().await.unwrap();
    assert_no_keys(&cluster, &resource, 1).await;
}

/// The outcome of the only node in `report`.
fn only_outcome(report: &quorum_lock::NodeReport) -> &quorum_lock::NodeOutcome {
    match report.results() {
        [only] => &only.outcome,
        other => panic!("expected one node's result, got {other:?}"),
    }
}

/// A single node (the direct path: its request awaited in place, no round) that answers
/// only after the node timeout: the attempt fails as unavailable, its request is dropped
/// unanswered, and the clean-up's release, queued behind the late `SET` on the same
/// connection, removes the key the server applies once it runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_answer_at_n1_leaves_no_key() {
    let cluster = Cluster::start(1);
    let redlock = builder(&cluster.urls())
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    redlock.connect().await.unwrap();
    let prefix = unique("leak-late-n1");
    // Warm: the next attempt is a plain `SET NX PX` on the fast path.
    cycle(&redlock, &format!("{prefix}:warm")).await;
    let resource = format!("{prefix}:late");
    cluster.nodes[0].pause();
    let attempt = redlock.try_lock(&resource, TTL).await;
    cluster.nodes[0].resume();
    match attempt {
        Err(quorum_lock::Error::Unavailable { quorum: 1, report }) => {
            assert_eq!(only_outcome(&report), &quorum_lock::NodeOutcome::TimedOut)
        }
        other => panic!("expected unavailable (timed out), got {other:?}"),
    }
    assert_no_keys(&cluster, &format!("{prefix}:*"), 2).await;
    // The connection is still usable afterwards, and the resource free.
    cycle(&redlock, &resource).await;
    assert_no_keys(&cluster, &format!("{prefix}:*"), 3).await;
}

/// A release at N = 1 whose answer comes after the node timeout reports the node timed
/// out, and its compare-and-delete, already on the connection, still removes the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_release_at_n1_still_removes_the_key() {
    let cluster = Cluster::start(1);
    let redlock = builder(&cluster.urls())
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let resource = unique("leak-late-release-n1");
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    cluster.nodes[0].pause();
    let released = guard.release().await;
    cluster.nodes[0].resume();
    match released {
        Err(quorum_lock::Error::Unavailable { quorum: 1, report }) => {
            assert_eq!(only_outcome(&report), &quorum_lock::NodeOutcome::TimedOut)
        }
        other => panic!("expected unavailable (timed out), got {other:?}"),
    }
    assert_no_keys(&cluster, &resource, 1).await;
}

/// An extension at N = 1 (direct path) whose answer comes after the node timeout: reported
/// as the node timing out, the guard's validity not lengthened, and the release after it
/// (queued behind the late extension on the same connection) still removes the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_extension_at_n1_times_out_and_the_release_still_removes_the_key() {
    let cluster = Cluster::start(1);
    let redlock = builder(&cluster.urls())
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let resource = unique("leak-late-extend-n1");
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    let before = guard.validity();
    cluster.nodes[0].pause();
    let extended = guard.extend(TTL).await;
    cluster.nodes[0].resume();
    match extended {
        Err(quorum_lock::Error::Unavailable { quorum: 1, report }) => {
            assert_eq!(only_outcome(&report), &quorum_lock::NodeOutcome::TimedOut)
        }
        other => panic!("expected unavailable (timed out), got {other:?}"),
    }
    assert!(
        guard.validity() <= before,
        "a failed extension must not lengthen the validity"
    );
    guard.release().await.expect("released");
    assert_no_keys(&cluster, &resource, 1).await;
}

/// Node timeouts of a few microseconds: a request's deadline passes before the driver's
/// task gets to it, and the driver does not write a request whose caller has gone. A
/// `SET` that did get written was then followed by a release that never was, and its key
/// stayed for the whole TTL: 17-52 keys after these 800 attempts on the old code, in each
/// of six runs. A release given up early now queues a copy the driver writes without a
/// reply (`net::call::Delivery`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_given_up_at_once_still_reach_their_nodes() {
    let cluster = Cluster::start(3);
    let prefix = unique("tiny-timeout");
    let mut attempts = 0;
    // Kept until the end: a client dropped at once takes its connections, and what they
    // had still to write, with it (the TTL then frees the keys).
    let mut clients = Vec::new();
    for micros in [1, 2, 5, 10, 20, 50, 100, 200] {
        let redlock = builder(&cluster.urls())
            .node_timeout(Duration::from_micros(micros))
            .build()
            .unwrap();
        let _ = redlock.connect().await;
        for i in 0..100 {
            let resource = format!("{prefix}-{micros}-{i}");
            if let Ok(Some(guard)) = redlock.try_lock(&resource, Duration::from_secs(60)).await {
                let _ = guard.release().await;
            }
            attempts += 1;
        }
        clients.push(redlock);
    }
    assert_no_keys(&cluster, &format!("{prefix}*"), attempts).await;
}
