//! Background work that dies leaves the client recovering by itself:
//! a connect or a subscriber task whose runtime shut down, connections broken under the
//! client (killed, node restarted), and errors that say what the nodes answered.
//!
//! Each test names the runtime it drives explicitly where several are involved, as a client
//! kept in a `static` and used from several `#[tokio::test]` functions sees them.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::proxy::{FaultProxy, Link};
use common::{Cluster, RedisServer, builder, unique, wait_until};
use quorum_lock::{Error, LockGuard, NodeOutcome, Redlock};

const TTL: Duration = Duration::from_secs(30);

fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn addr(server: &RedisServer) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], server.port()))
}

/// Lets the runtime poll its I/O driver, so connection tasks see what the kernel already
/// holds for them (an end of stream after `CLIENT KILL`): a yielded task runs again only
/// after the driver was polled.
async fn let_io_settle() {
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
}

/// Whether some node has a waiting list for `resource` (a key naming it and "waiters").
fn listed(cluster: &Cluster, resource: &str) -> bool {
    cluster.nodes.iter().any(|node| {
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("*waiters*{resource}*"))
            .query(&mut node.conn())
            .unwrap();
        !keys.is_empty()
    })
}

/// Kills every connection of type `kind` on `server` (not the admin connection itself).
fn kill_clients(server: &RedisServer, kind: &str) -> i64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg(kind)
        .query(&mut server.conn())
        .expect("CLIENT KILL")
}

/// A client on a fresh server behind a fault proxy, with `node_timeout`.
fn proxied_client(node_timeout: Duration) -> (RedisServer, FaultProxy, Redlock) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(addr(&server));
    let client = builder(&[proxy.url()])
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    (server, proxy, client)
}

/// Locks `resource` and waits until every node of `cluster` holds its key.
async fn lock_everywhere(cluster: &Cluster, client: &Redlock, resource: &str) -> LockGuard {
    let guard = client.lock(resource, TTL).await.expect("locked");
    let everywhere = || cluster.keys_everywhere(resource).len() == cluster.nodes.len();
    tokio::task::block_in_place(|| wait_until(Duration::from_secs(10), "set on all", everywhere));
    guard
}

/// The message of a release that four of five nodes answered: two not held, two released.
#[track_caller]
fn assert_four_of_five_answered(err: &Error) {
    let text = err.to_string();
    assert!(
        text.starts_with(
            "no majority of 3 could be confirmed: 4 of 5 nodes answered (2 not held; \
             2 released), 1 did not (1 "
        ),
        "{text}"
    );
}

/// A client whose polls are so rare that only a wake-up can end its waits in time.
fn slow_poller(cluster: &Cluster) -> Redlock {
    builder(&cluster.urls())
        .retry_delay(Duration::from_secs(600))
        .max_retry_delay(Duration::from_secs(600))
        .build()
        .unwrap()
}

/// `holder` locks `resource`, and `client` waits for it in vain for 300 ms (which starts
/// its subscriptions); returns the holder's guard.
async fn hold_while_waited_for(holder: &Redlock, client: &Redlock, resource: &str) -> LockGuard {
    let held = holder.lock(resource, TTL).await.expect("held");
    let waited = client
        .lock(resource, TTL)
        .wait(Duration::from_millis(300))
        .await;
    assert!(waited.is_err(), "still held: {waited:?}");
    held
}

/// `client` waits up to 20 s for `resource`, on a task of its own.
fn spawn_waiter(
    client: &Redlock,
    resource: &str,
) -> tokio::task::JoinHandle<quorum_lock::Result<LockGuard>> {
    let client = client.clone();
    let resource = resource.to_owned();
    tokio::spawn(async move {
        client
            .lock(&resource, TTL)
            .wait(Duration::from_secs(20))
            .await
    })
}

/// A connect still running when its runtime shut down must not leave the node's slot
/// "connecting" for ever: the next request, in another runtime, connects again.
#[test]
fn connect_abandoned_by_its_runtime_is_made_again() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(addr(&server));
    proxy.set_link(Link::Blackhole);
    let client = builder(&[proxy.url()])
        // The first connect must still be running when its runtime goes.
        .connect_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let resource = unique("recovery-connect");

    let first = current_thread();
    first.block_on(async {
        let attempt = client.try_lock(&resource, TTL).await;
        assert!(
            matches!(attempt, Err(Error::Unavailable { .. })),
            "no answer through the black hole: {attempt:?}"
        );
    });
    assert!(proxy.accepted() >= 1, "the connect reached the proxy");
    drop(first);
    proxy.set_link(Link::Up);

    let second = current_thread();
    second.block_on(async {
        let guard = client
            .try_lock(&resource, TTL)
            .await
            .expect("the node is reachable again")
            .expect("the resource is free");
        guard.release().await.expect("released");
    });
}

/// A connection made in a runtime that shut down (its driver task went with it) is
/// replaced before anything is sent on it: the first lock in the next runtime succeeds.
#[test]
fn connection_of_a_dropped_runtime_is_replaced() {
    let cluster = Cluster::start(3);
    let client = builder(&cluster.urls()).build().unwrap();
    let resource = unique("recovery-runtime");
    for round in 0..3 {
        let runtime = current_thread();
        runtime.block_on(async {
            let guard = client
                .try_lock(&resource, TTL)
                .await
                .unwrap_or_else(|e| panic!("runtime {round}: {e}"))
                .expect("the resource is free");
            let report = guard.release().await.expect("released");
            assert_eq!(report.failures(), 0, "{report}");
            assert!(report.count(&NodeOutcome::Released) >= 2, "{report}");
        });
    }
    assert_eq!(cluster.keys_everywhere(&format!("*{resource}*")), vec![]);
}

/// A release, an extension and a status read whose connections were killed under the
/// client (`CLIENT KILL`) go out again on fresh connections and succeed, instead of failing
/// with "broken pipe".
#[tokio::test]
async fn requests_on_killed_connections_are_sent_again() {
    let cluster = Cluster::start(3);
    let client = builder(&cluster.urls()).build().unwrap();
    let resource = unique("recovery-kill");
    let guard = client.lock(&resource, TTL).await.expect("locked");

    let kill_all = || {
        for node in &cluster.nodes {
            assert!(
                kill_clients(node, "normal") >= 1,
                "the client was connected"
            );
        }
    };
    kill_all();
    let_io_settle().await;
    let status = client.status(&resource).await.expect("status");
    assert!(
        status.nodes.iter().all(|n| n.error.is_none()),
        "every node read again: {status:?}"
    );

    kill_all();
    let_io_settle().await;
    guard
        .extend(TTL)
        .await
        .expect("extended on fresh connections");

    kill_all();
    let_io_settle().await;
    let report = guard
        .release()
        .await
        .expect("released on fresh connections");
    assert_eq!(report.failures(), 0, "{report}");
    assert!(report.count(&NodeOutcome::Released) >= 2, "{report}");
    let gone = || cluster.keys_everywhere(&format!("*{resource}*")).is_empty();
    common::eventually(Duration::from_secs(5), "released everywhere", gone).await;
}

/// A rolling restart: nodes restarted empty no longer hold the lock, and the release, sent
/// again on fresh connections, hears it from them; a node that stays down is the only one
/// that did not answer, and the error says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_after_restarts_reports_what_each_node_said() {
    let mut cluster = Cluster::start(5);
    let client = builder(&cluster.urls()).build().unwrap();
    let resource = unique("recovery-restart");
    let guard = lock_everywhere(&cluster, &client, &resource).await;

    cluster.nodes[0].restart();
    cluster.nodes[1].restart();
    cluster.nodes[4].kill();
    let_io_settle().await;
    let err = guard
        .release()
        .await
        .expect_err("only two of five still held it");
    let Error::Unavailable { report, .. } = &err else {
        panic!("unavailable expected: {err:?}");
    };
    let outcomes: Vec<&NodeOutcome> = report.results().iter().map(|r| &r.outcome).collect();
    assert_eq!(
        &outcomes[..4],
        &[
            &NodeOutcome::NotHeld,
            &NodeOutcome::NotHeld,
            &NodeOutcome::Released,
            &NodeOutcome::Released,
        ]
    );
    assert!(outcomes[4].is_failure(), "{report}");
    assert_four_of_five_answered(&err);
}

/// The message of the release: two released, two not held, one failed. It said
/// "not enough nodes answered" although four of five had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_release_says_who_answered() {
    let mut cluster = Cluster::start(5);
    let client = builder(&cluster.urls()).build().unwrap();
    let resource = unique("recovery-message");
    let guard = lock_everywhere(&cluster, &client, &resource).await;
    for node in &cluster.nodes[..2] {
        let deleted: i64 = redis::cmd("DEL")
            .arg(guard.resource())
            .query(&mut node.conn())
            .unwrap();
        assert_eq!(deleted, 1);
    }
    cluster.nodes[4].kill();
    let_io_settle().await;
    let err = guard.release().await.expect_err("no majority confirmed");
    assert!(err.is_unavailable(), "{err:?}");
    assert_four_of_five_answered(&err);
}

/// Subscriber tasks that died with their runtime leave no subscription marked active: in
/// the next runtime a waiter is listed where a subscription stands again, and the holder's
/// release wakes it, long before its poll would.
#[test]
fn waiter_is_woken_after_its_subscribers_died_with_their_runtime() {
    let cluster = Cluster::start(3);
    let client = slow_poller(&cluster);
    let holder = builder(&cluster.urls()).build().unwrap();
    let resource = unique("recovery-subscriber");

    // A contended wait in the first runtime starts the subscriptions.
    let first = current_thread();
    first.block_on(async {
        let held = hold_while_waited_for(&holder, &client, &resource).await;
        held.release().await.expect("released");
    });
    drop(first);

    let second = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    second.block_on(async {
        let held = holder.lock(&resource, TTL).await.expect("held");
        let waiter = spawn_waiter(&client, &resource);
        // Release once the waiter is in a waiting list.
        tokio::task::block_in_place(|| {
            wait_until(Duration::from_secs(10), "the waiter is listed", || {
                listed(&cluster, &resource)
            })
        });
        let released_at = tokio::time::Instant::now();
        held.release().await.expect("released");
        let guard = waiter.await.unwrap().expect("woken by the release");
        assert!(
            released_at.elapsed() < Duration::from_secs(10),
            "woken by the release, not a poll: {:?}",
            released_at.elapsed()
        );
        guard.release().await.expect("released");
    });
}

/// A subscription killed on the server (`CLIENT KILL TYPE pubsub`) is withdrawn and made
/// again; a waiter is then woken by a release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_is_woken_after_its_subscriptions_were_killed() {
    let cluster = Cluster::start(3);
    let client = slow_poller(&cluster);
    let holder = builder(&cluster.urls()).build().unwrap();
    let resource = unique("recovery-pubsub");

    let held = hold_while_waited_for(&holder, &client, &resource).await;
    for node in &cluster.nodes {
        assert_eq!(kill_clients(node, "pubsub"), 1, "one subscription per node");
    }

    let waiter = spawn_waiter(&client, &resource);
    tokio::task::block_in_place(|| {
        wait_until(
            Duration::from_secs(10),
            "subscribed and listed again",
            || {
                listed(&cluster, &resource)
                    && cluster.nodes.iter().all(|node| {
                        let channels: Vec<String> = redis::cmd("PUBSUB")
                            .arg("CHANNELS")
                            .query(&mut node.conn())
                            .unwrap();
                        !channels.is_empty()
                    })
            },
        )
    });
    let released_at = tokio::time::Instant::now();
    held.release().await.expect("released");
    let guard = waiter.await.unwrap().expect("woken by the release");
    assert!(released_at.elapsed() < Duration::from_secs(10));
    guard.release().await.expect("released");
}

/// An extension to a shorter TTL that fails (its answer comes after the node timeout) may
/// still have been applied: the guard's validity is then at most the shorter TTL's, not its
/// old, longer one (DESIGN.md, section 1, "Extend").
#[tokio::test]
async fn failed_extension_to_a_shorter_ttl_lowers_the_validity() {
    let (server, proxy, client) = proxied_client(Duration::from_millis(100));
    let resource = unique("recovery-extend");
    let guard = client.lock(&resource, TTL).await.expect("locked");
    assert!(guard.validity() > Duration::from_secs(29));

    let shorter = Duration::from_secs(2);
    // ttl - drift: 2 s - (20 ms + 2 ms).
    let bound = Duration::from_millis(1_978);
    proxy.set_delay(Duration::from_millis(400));
    let err = guard
        .extend(shorter)
        .await
        .expect_err("the answer comes too late");
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        guard.validity() <= bound,
        "validity {:?} is above the shorter ttl's {bound:?}",
        guard.validity()
    );
    assert!(!guard.validity().is_zero(), "what is sure is still held");
    // The node did apply it.
    let pttl = || -> i64 {
        redis::cmd("PTTL")
            .arg(&resource)
            .query(&mut server.conn())
            .unwrap()
    };
    common::eventually(
        Duration::from_secs(5),
        "the node applied the extension",
        || (0..=2_000).contains(&pttl()),
    )
    .await;
    proxy.set_delay(Duration::ZERO);
    let _ = guard.release().await;
}

/// The same when the `extend` future is dropped after it was sent.
#[tokio::test]
async fn cancelled_extension_to_a_shorter_ttl_lowers_the_validity() {
    let (_server, proxy, client) = proxied_client(Duration::from_secs(1));
    let resource = unique("recovery-extend-cancel");
    let guard = client.lock(&resource, TTL).await.expect("locked");
    proxy.set_delay(Duration::from_millis(400));
    let cancelled = tokio::time::timeout(
        Duration::from_millis(50),
        guard.extend(Duration::from_secs(2)),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "dropped before its answer: {cancelled:?}"
    );
    assert!(
        guard.validity() <= Duration::from_millis(1_978),
        "validity {:?}",
        guard.validity()
    );
    proxy.set_delay(Duration::ZERO);
    let _ = guard.release().await;
}
