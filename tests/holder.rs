//! Who holds a lock (the operator's view): the lock value carries the holder's
//! host, process id, program and start time, `status` reads them back, and raw-key peers
//! (redis-py, redsync: a plain `SET NX PX` with their own token, a Lua compare-and-delete)
//! still interoperate. Against real `redis-server` processes.

mod common;

use std::time::{Duration, SystemTime};

use common::{Cluster, RedisServer, eventually, unique};
use quorum_lock::{HolderInfo, Redlock, RedlockBuilder, Verdict, Waiter};

const TTL: Duration = Duration::from_secs(10);

fn builder(urls: &[String]) -> RedlockBuilder {
    Redlock::builder()
        // Fresh test servers: quarantine would hold every vote for one TTL.
        .restart_quarantine(false)
        .nodes(urls)
        .node_timeout(Duration::from_millis(500))
        .retry_delay(Duration::from_millis(2))
        .max_retry_delay(Duration::from_millis(20))
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

/// The compare-and-delete every Redlock client ships (redis-py's `Lock.release`, redsync's
/// `deleteScript`): delete the key only if it holds `token`.
fn peer_release(server: &RedisServer, key: &str, token: &str) -> i64 {
    redis::Script::new(
        "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) \
         else return 0 end",
    )
    .key(key)
    .arg(token)
    .invoke(&mut server.conn())
    .unwrap()
}

/// A library holder: the value is `<token>;q1;t=<ms>;h=<host>;p=<pid>;n=<program>`, and
/// `status` gives back exactly those fields, how long it has been held and the remaining
/// validity (the shortest TTL of the majority's copies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_a_library_holder() {
    let cluster = Cluster::start(3);
    let redlock = builder(&cluster.urls())
        .holder_program("billing job")
        .build()
        .unwrap();
    let resource = unique("holder-lib");
    let before = SystemTime::now();
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    let after = SystemTime::now();

    let value = guard.token().to_owned();
    let token = &value[..32];
    let pid = std::process::id();
    let (head, tail) = value.split_once(";h=").expect("a host field");
    assert!(head.starts_with(&format!("{token};q1;t=")), "{value}");
    assert_eq!(tail, format!("{};p={pid};n=billing%20job", host_name()));
    for node in &cluster.nodes {
        let stored = get(node, &resource);
        // A majority at least; the slowest node's copy may come a moment later.
        assert!(
            stored.is_none() || stored.as_deref() == Some(&value),
            "{stored:?}"
        );
    }

    let status = redlock.status(&resource).await.unwrap();
    assert_eq!(
        status.verdict,
        Verdict::Held {
            token: value.clone()
        }
    );
    let holder = status.holder.clone().expect("held");
    assert_eq!(holder.token, token);
    assert_eq!(holder.host, Some(host_name()));
    assert_eq!(holder.pid, Some(pid));
    assert_eq!(holder.program.as_deref(), Some("billing job"));
    // Milliseconds in the value: `since` is the attempt's start, rounded down.
    let since = holder.since.expect("since");
    let ms = Duration::from_millis(1);
    assert!(since + ms >= before && since <= after, "{since:?}");
    assert!(status.held_for.is_some());
    let remaining = status.remaining.expect("remaining");
    assert!(
        remaining > Duration::ZERO && remaining <= TTL,
        "{remaining:?}"
    );
    assert!(
        remaining >= guard.validity(),
        "{remaining:?} {:?}",
        guard.validity()
    );
    let json = status.to_json();
    let fields = format!(
        "\"holder\":{{\"token\":\"{token}\",\"host\":\"{}\",\"pid\":{pid},\"program\":\
         \"billing job\",\"since_ms\":",
        host_name()
    );
    assert!(json.contains(&fields), "{json}");

    // Safety is unchanged: the whole value is what release compares.
    guard.release().await.unwrap();
    let status = redlock.status(&resource).await.unwrap();
    assert_eq!((status.verdict, status.holder), (Verdict::Free, None));
}

/// `holder_info(false)` leaves host, pid and program out: the value is the token and the
/// time, nothing else. The default program is the executable's file name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_details_can_be_left_out() {
    let cluster = Cluster::start(1);
    let private = builder(&cluster.urls()).holder_info(false).build().unwrap();
    let resource = unique("holder-private");
    let guard = private.lock(&resource, TTL).await.unwrap();
    let value = guard.token();
    let (token, time) = value.split_once(";q1;t=").expect("the short form");
    assert_eq!(token.len(), 32, "{value}");
    assert!(time.bytes().all(|b| b.is_ascii_digit()), "{value}");
    let holder = private.status(&resource).await.unwrap().holder.unwrap();
    assert_eq!(
        (holder.host, holder.pid, holder.program),
        (None, None, None)
    );
    assert!(holder.since.is_some());
    guard.release().await.unwrap();

    let default = builder(&cluster.urls()).build().unwrap();
    let guard = default.lock(&resource, TTL).await.unwrap();
    let exe = std::env::current_exe().unwrap();
    let name = exe.file_name().unwrap().to_str().unwrap();
    let holder = HolderInfo::parse(guard.token());
    assert_eq!(holder.program.as_deref(), Some(name));
    guard.release().await.unwrap();
}

/// A raw-key peer (redis-py style: `SET key <uuid hex> NX PX`, released by its own Lua
/// compare-and-delete): `status` shows its value as the token, with no holder details;
/// our lock is refused while it holds; its compare-and-delete works and cannot delete our
/// lock afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_peers_still_interoperate() {
    let cluster = Cluster::start(3);
    let redlock = builder(&cluster.urls()).build().unwrap();
    let resource = unique("holder-peer");
    let peer = "5c2e9a1f0b7d4e3a8c6f1d2b9e0a7c4f";
    for node in &cluster.nodes {
        let set: Option<String> = redis::cmd("SET")
            .arg(&resource)
            .arg(peer)
            .arg("NX")
            .arg("PX")
            .arg(20_000)
            .query(&mut node.conn())
            .unwrap();
        assert_eq!(set.as_deref(), Some("OK"));
    }

    let status = redlock.status(&resource).await.unwrap();
    assert_eq!(status.verdict, Verdict::Held { token: peer.into() });
    let holder = status.holder.clone().unwrap();
    assert_eq!(holder.token, peer);
    assert!(!holder.is_described());
    assert_eq!(status.held_for, None);
    let remaining = status.remaining.unwrap();
    assert!(
        remaining <= Duration::from_secs(20) && remaining > TTL,
        "{remaining:?}"
    );
    assert!(status.to_json().contains(&format!(
        "\"holder\":{{\"token\":\"{peer}\",\"host\":null,\"pid\":null,\"program\":null,\
         \"since_ms\":null}},\"held_for_ms\":null"
    )));

    // Refused while the peer holds, and the peer's key is untouched.
    assert!(redlock.try_lock(&resource, TTL).await.unwrap().is_none());
    for node in &cluster.nodes {
        assert_eq!(get(node, &resource).as_deref(), Some(peer));
    }
    // The peer's own release works; then we take the lock, and the peer's late release
    // (its token) leaves our key alone.
    for node in &cluster.nodes {
        assert_eq!(peer_release(node, &resource, peer), 1);
    }
    let guard = redlock
        .try_lock(&resource, TTL)
        .await
        .unwrap()
        .expect("free");
    for node in &cluster.nodes {
        assert_eq!(peer_release(node, &resource, peer), 0);
    }
    let status = redlock.status(&resource).await.unwrap();
    assert_eq!(status.holder.unwrap().pid, Some(std::process::id()));
    guard.release().await.unwrap();
    // The release returns at a majority: the last node's delete may still be on its way.
    eventually(
        Duration::from_secs(5),
        "our key gone from every node",
        || {
            cluster
                .nodes
                .iter()
                .all(|node| get(node, &resource).is_none())
        },
    )
    .await;
}

/// The waiters `status` lists for `resource` once there are `n` of them (within 10 s).
async fn waiters_once(redlock: &Redlock, resource: &str, n: usize) -> Vec<Waiter> {
    let start = tokio::time::Instant::now();
    loop {
        let waiters = redlock.status(resource).await.unwrap().waiters;
        if waiters.len() == n {
            return waiters;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{n} waiters expected, listed: {waiters:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Clients waiting for a lock: `status` lists them in the order releases wake them, each
/// with who it is (host, process, program) and when its node listed it; the release wakes
/// the first, which leaves the list, and a waiter that gives up leaves it too, so no
/// waiting list is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_the_waiters_in_order() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let holder = builder(&urls).build().unwrap();
    let resource = unique("waiters");
    let guard = holder.lock(&resource, TTL).await.unwrap();
    let before = SystemTime::now() - Duration::from_secs(1);
    // Each waiter its own client, polling every 10 s: only a release's wake-up moves it.
    let waiting = |program: &str| {
        let redlock = (builder(&urls).holder_program(program))
            .retry_delay(Duration::from_secs(10))
            .max_retry_delay(Duration::from_secs(10))
            .build()
            .unwrap();
        let resource = resource.clone();
        tokio::spawn(async move {
            redlock
                .lock(resource, TTL)
                .wait(Duration::from_secs(60))
                .await
        })
    };
    let first = waiting("first waiter");
    waiters_once(&holder, &resource, 1).await;
    let second = waiting("second waiter");
    let waiters = waiters_once(&holder, &resource, 2).await;
    let programs: Vec<_> = waiters
        .iter()
        .map(|w| w.client.program.as_deref())
        .collect();
    assert_eq!(programs, [Some("first waiter"), Some("second waiter")]);
    for waiter in &waiters {
        assert_eq!(waiter.client.host.as_deref(), Some(host_name().as_str()));
        assert_eq!(waiter.client.pid, Some(std::process::id()));
        let listed_at = waiter.listed_at.expect("a listing time");
        assert!(listed_at > before && listed_at < SystemTime::now() + Duration::from_secs(1));
        assert_eq!(waiter.node, waiters[0].node, "one waiting-list node");
    }
    let json = holder.status(&resource).await.unwrap().to_json();
    assert!(
        json.contains(r#""program":"first waiter","listed_at_ms":"#),
        "{json}"
    );

    guard.release().await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(5), first).await;
    let woken = woken.expect("woken, not polled").unwrap().unwrap();
    let left = waiters_once(&holder, &resource, 1).await;
    assert_eq!(left[0].client.program.as_deref(), Some("second waiter"));

    second.abort();
    waiters_once(&holder, &resource, 0).await;
    woken.release().await.unwrap();
    let stray = cluster.keys_everywhere(&format!("*{resource}*"));
    assert!(stray.is_empty(), "{stray:?}");
}
