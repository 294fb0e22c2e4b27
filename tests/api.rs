//! The API people reach for: typed fencing on every way to hold a lock, client
//! shutdown, error texts. Against real `redis-server` processes.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::proxy::FaultProxy;
use common::{Cluster, NODE_TIMEOUT, client, eventually, unique};
use quorum_lock::{
    AutoExtend, Error, FencingToken, LostReason, NodeOutcome, Redlock, RedlockBuilder,
};

const TTL: Duration = Duration::from_secs(10);

/// Every way to hold a fenced lock gives a `FencingToken` (no `Option`), and the tokens of
/// successive holders of one resource strictly increase in holding order, whichever form
/// held it: guard, `try_lock_fenced`, scoped closure, `lock_many`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_way_to_hold_a_fenced_lock_has_a_token() {
    let cluster = Cluster::start(3);
    // Fencing needs restart quarantine on nodes without `appendfsync always`.
    let redlock = common::builder(&cluster.urls())
        .restart_quarantine(true)
        .build()
        .unwrap();
    let resource = unique("fenced-api");
    let other = unique("fenced-api-other");

    let guard = redlock.lock(&resource, TTL).fenced().await.unwrap();
    let first: FencingToken = guard.fencing_token();
    // The plain accessor still answers, with the same number.
    assert_eq!(guard.fencing_token().as_i64(), first.as_i64());
    assert_eq!(LockGuardView::of(&guard), Some(first.get()));
    // While held, a fenced try_lock is refused without error.
    assert!(
        redlock
            .try_lock_fenced(&resource, TTL)
            .await
            .unwrap()
            .is_none()
    );
    guard.release().await.unwrap();

    let tried = redlock.try_lock_fenced(&resource, TTL).await.unwrap();
    let tried = tried.expect("free after the release");
    let second = tried.fencing_token().get();
    assert!(second > first.get(), "{second} after {first}");
    tried.release().await.unwrap();

    let scoped = redlock
        .lock(&resource, TTL)
        .fenced()
        .run(|ctx| async move { (ctx.fencing_token(), ctx.validity() > Duration::ZERO) })
        .await
        .unwrap();
    assert!(scoped.0.get() > second, "{} after {second}", scoped.0);
    assert!(scoped.1);

    // Several resources: the token is above every counter of the keys it takes, here one
    // far ahead of the clock.
    let ahead: u64 = 9_000_000_000_000_000;
    for node in &cluster.nodes {
        let () = redis::cmd("SET")
            .arg(format!("quorum-lock:fence:{other}"))
            .arg(ahead)
            .query(&mut node.conn())
            .unwrap();
    }
    let many = redlock
        .lock_many([other.clone(), resource.clone()], TTL)
        .fenced()
        .await
        .unwrap();
    assert_eq!(many.fencing_token().get(), ahead + 1);
    assert_eq!(many.resources().len(), 2);
    many.release().await.unwrap();

    // A lock requested without fencing has no token to show (the deprecated accessor,
    // kept working until it is removed).
    let plain = redlock.lock(&other, TTL).await.unwrap();
    assert_eq!(LockGuardView::of(&plain), None);
    plain.release().await.unwrap();
}

/// The deprecated accessor on the plain guard, reached through `Deref`.
struct LockGuardView;

impl LockGuardView {
    #[allow(deprecated)]
    fn of(guard: &quorum_lock::LockGuard) -> Option<u64> {
        guard.fencing_token()
    }
}

/// `shutdown()` releases every lock the client holds on every node, the guards still alive
/// report the loss with its reason, and the client refuses new work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_every_lock_and_closes_the_client() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let prefix = unique("shutdown");
    let a = format!("{prefix}:a");
    let b = format!("{prefix}:b");
    let mut guard_a = redlock.lock(&a, TTL).await.unwrap();
    guard_a.auto_extend(AutoExtend::new());
    let guard_b = redlock
        .lock_many([b.clone(), a.clone() + "x"], TTL)
        .await
        .unwrap();
    let pattern = format!("{prefix}:*");
    // Three keys on each of three nodes (the slowest node's copies come in the background).
    eventually(Duration::from_secs(5), "every key on every node", || {
        cluster.keys_everywhere(&pattern).len() == 9
    })
    .await;
    // A clone of the client shuts it down for every clone.
    assert_eq!(redlock.clone().shutdown().await, 2);

    assert_eq!(cluster.keys_everywhere(&pattern), Vec::new());
    for guard in [&guard_a, &guard_b] {
        assert_eq!(guard.lost_signal().lost().await, LostReason::ShutDown);
        assert_eq!(guard.validity(), Duration::ZERO);
        assert!(!guard.is_valid());
    }
    assert!(matches!(guard_a.release().await, Err(Error::ShutDown)));
    assert!(matches!(redlock.lock(&a, TTL).await, Err(Error::ShutDown)));
    assert!(matches!(
        redlock.try_lock(&b, TTL).await,
        Err(Error::ShutDown)
    ));
    assert_eq!(Error::ShutDown.to_string(), "the client was shut down");
    // Dropping a guard after shutdown sends nothing (its nodes are closed); a second
    // shutdown does nothing.
    drop(guard_b);
    assert_eq!(redlock.shutdown().await, 0);
    assert_eq!(cluster.keys_everywhere(&pattern), Vec::new());
}

/// A lock released, and one dropped, while `shutdown()` waits for an attempt under way
/// leave no key: shutdown takes the locks still held only once that attempt is done, when
/// those guards are gone, so their releases go out by themselves, and shutdown waits for
/// them. Replies come 200 ms late through proxies, so the attempt is surely under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_released_while_shutdown_waits_leave_no_key() {
    let cluster = Cluster::start(3);
    let proxies: Vec<FaultProxy> = (cluster.nodes.iter())
        .map(|n| FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], n.port()))))
        .collect();
    let redlock = client(&proxies.iter().map(FaultProxy::url).collect::<Vec<_>>());
    let prefix = unique("release-in-shutdown");
    let pattern = format!("{prefix}:*");
    let released = redlock
        .lock(format!("{prefix}:released"), TTL)
        .await
        .unwrap();
    let dropped = redlock
        .lock(format!("{prefix}:dropped"), TTL)
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "both keys on every node", || {
        cluster.keys_everywhere(&pattern).len() == 6
    })
    .await;
    for proxy in &proxies {
        proxy.set_delay(Duration::from_millis(200));
    }
    let attempt = tokio::spawn({
        let (redlock, resource) = (redlock.clone(), format!("{prefix}:attempt"));
        async move { redlock.try_lock(&resource, TTL).await }
    });
    eventually(
        Duration::from_secs(10),
        "the attempt's SET on every node",
        || cluster.keys_everywhere(&format!("{prefix}:attempt")).len() == 3,
    )
    .await;
    let mut shutting_down = Box::pin(redlock.shutdown());
    assert!(
        futures::poll!(shutting_down.as_mut()).is_pending(),
        "shutdown waits for the attempt"
    );
    assert!(matches!(released.release().await, Err(Error::ShutDown)));
    drop(dropped);
    shutting_down.await;
    match attempt.await.unwrap() {
        Ok(Some(guard)) => assert!(!guard.is_valid(), "released by shutdown"),
        Ok(None) | Err(Error::ShutDown) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(cluster.keys_everywhere(&pattern), Vec::new());
}

/// `shutdown()` while attempts are in flight leaves no key behind: an attempt whose `SET`
/// reached the nodes before the close, and whose answers come after it, gives back what it
/// set before the connections close. Every node is clean once `shutdown()` returned (on the
/// old code the attempts' clean-up found the connections closed: the keys stayed for their
/// 60 s TTL). Replies come 200 ms late through proxies, so the attempts are surely in
/// flight when the client shuts down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_during_attempts_leaves_no_key() {
    const TASKS: usize = 24;
    let cluster = Cluster::start(3);
    let proxies: Vec<FaultProxy> = (cluster.nodes.iter())
        .map(|n| FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], n.port()))))
        .collect();
    let redlock = client(&proxies.iter().map(FaultProxy::url).collect::<Vec<_>>());
    // Connected at full speed; the attempts' answers are late.
    redlock.connect().await.unwrap();
    for proxy in &proxies {
        proxy.set_delay(Duration::from_millis(200));
    }
    let prefix = unique("shutdown-race");
    let pattern = format!("{prefix}:*");
    let attempts: Vec<_> = (0..TASKS)
        .map(|i| {
            let redlock = redlock.clone();
            let resource = format!("{prefix}:{i}");
            tokio::spawn(async move { redlock.try_lock(&resource, Duration::from_secs(60)).await })
        })
        .collect();
    // Every attempt's SET is on every node; their answers are still on the way (or, on a
    // slow machine, some have arrived: those locks are held, and shutdown releases them).
    eventually(Duration::from_secs(30), "every SET on every node", || {
        cluster.keys_everywhere(&pattern).len() == 3 * TASKS
    })
    .await;
    let closing = tokio::spawn({
        let redlock = redlock.clone();
        async move { redlock.shutdown().await }
    });
    // Once the client is closed (an attempt is then refused, or gives back what it won),
    // half the attempts are abandoned: their futures are dropped mid-flight.
    let probe = format!("{prefix}:probe");
    while !matches!(redlock.try_lock(&probe, TTL).await, Err(Error::ShutDown)) {}
    for attempt in &attempts[..TASKS / 2] {
        attempt.abort();
    }
    closing.await.unwrap();
    assert_eq!(cluster.keys_everywhere(&pattern), Vec::new());
    for attempt in attempts {
        match attempt.await {
            Ok(Err(Error::ShutDown)) => {}
            Ok(Ok(Some(guard))) => assert!(!guard.is_valid(), "released by shutdown"),
            Err(aborted) if aborted.is_cancelled() => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(cluster.keys_everywhere(&pattern), Vec::new());
    // Nothing else either: no fence counter (none was asked for), no waiting list.
    let stray: Vec<_> = (cluster.keys_everywhere("*").into_iter())
        .filter(|(_, k)| !k.starts_with("quorum-lock:node:"))
        .collect();
    assert_eq!(stray, Vec::new());
}

/// Error texts say what happened: a timeout names its last cause and a human duration;
/// an unavailable majority counts what the nodes did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_what_the_nodes_did() {
    let mut cluster = Cluster::start(3);
    let holder = client(&cluster.urls());
    let waiter = client(&cluster.urls());
    let resource = unique("errors");
    let guard = holder.lock(&resource, TTL).await.unwrap();
    let err = waiter
        .lock(&resource, TTL)
        .max_attempts(2)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("gave up after 2 attempts in "), "{text}");
    assert!(
        text.ends_with(" ms: resource is held by another owner")
            || text.ends_with(" µs: resource is held by another owner"),
        "{text}"
    );
    guard.release().await.unwrap();

    cluster.nodes[1].kill();
    cluster.nodes[2].kill();
    let err = waiter.try_lock(&resource, TTL).await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, Error::Unavailable { quorum: 2, .. }),
        "{text}"
    );
    // The two killed nodes failed with the driver's error and are counted as such (the
    // live one was not waited for: the outcome was certain without it).
    assert!(
        text.starts_with("no majority of 2 could be confirmed: "),
        "{text}"
    );
    // Each names the driver's error, which may differ between the two (a request sent on
    // the dead connection, or a connect refused): counted by outcome, not by message.
    let report = err.report().unwrap();
    let failed = report
        .results()
        .iter()
        .filter(|r| matches!(r.outcome, NodeOutcome::Failed(_)))
        .count();
    assert_eq!(failed, 2, "{text}");
    assert!(text.contains(" error: "), "{text}");
    assert_eq!(report.failures(), 2, "{text}");
    assert!(!text.contains("did not answer"), "{text}");
}

/// With a majority of nodes paused, the first failed auto-extension raises the at-risk
/// signal while plenty of validity remains, and the lost signal fires only afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_risk_comes_before_lost() {
    let cluster = Cluster::start(3);
    let redlock = Redlock::builder()
        .restart_quarantine(false)
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let resource = unique("at-risk");
    let ttl = Duration::from_secs(3);
    let mut guard = redlock.lock(&resource, ttl).await.unwrap();
    guard.auto_extend(AutoExtend::new());
    let signal = guard.lost_signal();
    cluster.nodes[1].pause();
    cluster.nodes[2].pause();
    // The extender tries at a third of the TTL before the deadline (1 s): its first
    // failure leaves about 0.9 s.
    let remaining = signal.at_risk().await;
    assert!(remaining >= Duration::from_millis(500), "{remaining:?}");
    assert!(!signal.is_lost());
    assert!(guard.validity() > Duration::ZERO);
    // Lost comes only when at most two node timeouts of validity are left.
    assert_eq!(signal.lost().await, LostReason::Expired);
    cluster.nodes[1].resume();
    cluster.nodes[2].resume();
    drop(guard);
}

/// Nodes given as an existing `redis::Client`, a `ConnectionInfo` and a URL make one
/// client; the same server given twice in two forms is still refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_from_clients_connection_infos_and_urls() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let redlock = Redlock::builder()
        .restart_quarantine(false)
        .node_timeout(NODE_TIMEOUT)
        .node_client(&cluster.nodes[0].client())
        .node_connection_info(cluster.nodes[1].client().get_connection_info().clone())
        .node(&urls[2])
        .build()
        .unwrap();
    assert_eq!(redlock.quorum(), 2);
    let resource = unique("node-kinds");
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    // The slowest node gets its copy in the background.
    eventually(Duration::from_secs(5), "the key on every node", || {
        cluster.keys_everywhere(&resource).len() == 3
    })
    .await;
    guard.release().await.unwrap();

    let twice = Redlock::builder()
        .node(&urls[0])
        .node_client(&cluster.nodes[0].client())
        .build()
        .unwrap_err();
    assert!(twice.to_string().contains("is listed twice"), "{twice}");
}

/// The node list format shared by the CLI's `--nodes` and `QUORUM_LOCK_NODES`.
#[test]
fn node_lists_split_on_commas() {
    assert_eq!(
        RedlockBuilder::parse_node_list(" redis://a:1, redis://b:2,,redis://c:3 ,"),
        ["redis://a:1", "redis://b:2", "redis://c:3"]
    );
    assert!(RedlockBuilder::parse_node_list(" , ").is_empty());
    // A Sentinel member keeps the commas between its sentinels.
    assert_eq!(
        RedlockBuilder::parse_node_list(
            "redis://a:1, redis+sentinel://s1:26379, s2:26379/svc, redis://b:2"
        ),
        [
            "redis://a:1",
            "redis+sentinel://s1:26379,s2:26379/svc",
            "redis://b:2"
        ]
    );
    assert_eq!(RedlockBuilder::NODES_ENV, "QUORUM_LOCK_NODES");
}

/// `nodes_from_env()` in a child process of this test binary, with the variable set, empty
/// and unset.
#[test]
fn nodes_come_from_the_environment_in_one_call() {
    let child = |value: Option<&str>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "env_child", "--ignored", "--nocapture"])
            .env("QUORUM_LOCK_API_CHILD", "1");
        match value {
            Some(v) => cmd.env(RedlockBuilder::NODES_ENV, v),
            None => cmd.env_remove(RedlockBuilder::NODES_ENV),
        };
        let out = cmd.output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        child(Some(
            "redis://127.0.0.1:1, redis://127.0.0.1:2,redis://127.0.0.1:3"
        ))
        .contains("child: ok 127.0.0.1:1 127.0.0.1:2 127.0.0.1:3 quorum 2")
    );
    assert!(
        child(Some(" , "))
            .contains("child: invalid configuration: QUORUM_LOCK_NODES lists no node")
    );
    assert!(child(None).contains("child: invalid configuration: QUORUM_LOCK_NODES is not set"));
}

/// Run only by [`nodes_come_from_the_environment_in_one_call`].
#[test]
#[ignore = "run as a child process with its own environment"]
fn env_child() {
    if std::env::var_os("QUORUM_LOCK_API_CHILD").is_none() {
        return;
    }
    match Redlock::builder().nodes_from_env().build() {
        Ok(r) => println!(
            "child: ok {} quorum {}",
            r.nodes().collect::<Vec<_>>().join(" "),
            r.quorum()
        ),
        Err(e) => println!("child: {e}"),
    }
}
