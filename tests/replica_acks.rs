//! Votes confirmed on replicas (`RedlockBuilder::replica_acks`), against a real Sentinel
//! group and a real Redis Cluster on loopback: a vote whose write no replica acknowledged
//! does not count (the replica frozen, as a stalled host is), the failed attempt leaves
//! nothing behind, and a granted lock is on the replica the moment it is granted, so a
//! failover that promotes that replica keeps its holder.

mod common;

use std::time::{Duration, Instant};

use common::topology::{RedisClusterTopology, SentinelTopology};
use common::{RedisServer, unique, wait_until};
use quorum_lock::{Error, Redlock};

const ACK_TIMEOUT: Duration = Duration::from_millis(20);

fn client(url: &str, acks: bool) -> Redlock {
    let builder = Redlock::builder()
        .nodes([url])
        .retry_delay(Duration::from_millis(20))
        .max_retry_delay(Duration::from_millis(100));
    let builder = if acks {
        builder.replica_acks(1, ACK_TIMEOUT)
    } else {
        builder
    };
    builder.build().unwrap()
}

/// `key`'s value on `server`, read as a replica serves it (a Cluster replica needs
/// `READONLY` on the connection).
fn value_on(server: &RedisServer, key: &str) -> Option<String> {
    let (value,): (Option<String>,) = redis::pipe()
        .cmd("READONLY")
        .ignore()
        .cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .or_else(|_| redis::pipe().cmd("GET").arg(key).query(&mut server.conn()))
        .unwrap();
    value
}

/// Whether `master`'s replica has not acknowledged everything `master` wrote.
fn replica_behind(master: &RedisServer) -> bool {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut master.conn())
        .unwrap();
    let written = (info.lines()).find_map(|l| {
        l.strip_prefix("master_repl_offset:")?
            .trim()
            .parse::<u64>()
            .ok()
    });
    let acked = (info.lines())
        .filter_map(|l| l.strip_prefix("slave0:"))
        .flat_map(|fields| fields.split(','))
        .find_map(|field| field.strip_prefix("offset=")?.trim().parse::<u64>().ok());
    matches!((written, acked), (Some(w), Some(a)) if a < w)
}

/// With `replica` frozen: a client that does not ask for its acknowledgement gets a lock
/// on `resource` that the replica lacks (a failover at that moment would lose it); one
/// that asks gets none, and its attempt leaves no key on `master`. Returns the refusal's
/// text.
async fn refused_while_frozen(
    url: &str,
    master: &RedisServer,
    replica: &RedisServer,
    resource: &str,
) -> String {
    replica.pause();
    // The plain client goes first: its win also admits the node, so that the refused
    // attempt below, whose writes ran but whose vote did not count, is the only thing
    // judged.
    let plain = client(url, false);
    let granted = plain.try_lock(resource, Duration::from_secs(5)).await;
    let guard = granted
        .unwrap()
        .expect("granted without asking the replica");
    assert!(
        replica_behind(master),
        "the frozen replica acknowledged the lock"
    );
    guard.release().await.unwrap();
    let asking = client(url, true);
    let refused = asking.try_lock(resource, Duration::from_secs(5)).await;
    let text = match refused {
        Err(e @ Error::Unavailable { .. }) => e.to_string(),
        other => panic!("locked without the replica's acknowledgement: {other:?}"),
    };
    wait_until(
        Duration::from_secs(5),
        "the refused attempt released",
        || value_on(master, resource).is_none(),
    );
    replica.resume();
    asking.shutdown().await;
    plain.shutdown().await;
    text
}

/// A refusal for want of the replica's acknowledgement: `WAIT` ran out (or, as the server
/// checks its timeout on its clock tick, every 100 ms by default, the request's node timeout
/// ran out first).
fn assert_unreplicated(refusal: &str) {
    assert!(
        refusal.contains("not replicated") || refusal.contains("1 timed out"),
        "{refusal}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_members_vote_needs_its_replicas_acknowledgement() {
    let topology = SentinelTopology::start(1, 3);
    let url = topology.member_url();
    let resource = unique("acks-sentinel-frozen");
    let (master, replica) = (topology.server(0), topology.server(1));
    let refusal = refused_while_frozen(&url, master, replica, &resource).await;
    assert_unreplicated(&refusal);

    let redlock = client(&url, true);
    let guard = redlock
        .lock(&resource, Duration::from_secs(5))
        .wait(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(value_on(replica, &resource).as_deref(), Some(guard.token()));
    guard.release().await.unwrap();
    redlock.shutdown().await;
}

/// Two replicas, one acknowledgement asked for: the promoted master still has a replica
/// to acknowledge the holder's extensions (the other one, which the failover turns to it),
/// where with one replica it has none until the old master comes back as its replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_its_replica_acknowledged_keeps_its_holder_through_a_failover() {
    const TTL: Duration = Duration::from_secs(10);
    let topology = SentinelTopology::start(2, 3);
    let redlock = client(&topology.member_url(), true);
    let resource = unique("acks-sentinel-failover");
    let guard = redlock.lock(&resource, TTL).await.unwrap();
    // No wait: the acknowledgement came before the lock was granted.
    let copies = (topology.servers()[1..].iter())
        .filter(|replica| value_on(replica, &resource).as_deref() == Some(guard.token()))
        .count();
    assert!(copies >= 1, "no replica had the lock when it was granted");
    let promoted = topology.failover();
    let deadline = Instant::now() + TTL / 2;
    let extended = loop {
        match guard.extend(TTL).await {
            Ok(validity) => break validity,
            Err(e) if Instant::now() < deadline => {
                eprintln!("not yet extended on the promoted master: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the holder lost its lock in the failover: {e}"),
        }
    };
    assert!(extended > TTL / 2, "{extended:?}");
    assert_eq!(
        value_on(topology.server(promoted), &resource).as_deref(),
        Some(guard.token())
    );
    guard.release().await.unwrap();
    redlock.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_members_vote_needs_its_shards_replica() {
    let cluster = RedisClusterTopology::start(3, 1);
    let url = format!("redis+cluster://127.0.0.1:{}", cluster.node(0).port());
    let resource = unique("acks-cluster-frozen");
    let master = cluster.master_for_key(&resource);
    let replica = cluster.replicas_of(master)[0];
    let (on_master, on_replica) = (cluster.node(master), cluster.node(replica));
    let refusal = refused_while_frozen(&url, on_master, on_replica, &resource).await;
    assert_unreplicated(&refusal);

    let redlock = client(&url, true);
    let guard = redlock
        .lock(&resource, Duration::from_secs(5))
        .wait(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        value_on(on_replica, &resource).as_deref(),
        Some(guard.token())
    );
    guard.release().await.unwrap();
    redlock.shutdown().await;
}

#[test]
fn replica_acks_without_a_promotable_member_or_in_bad_units_are_config_errors() {
    let build = |url: &str, replicas: u32, timeout: Duration| {
        Redlock::builder()
            .nodes([url])
            .replica_acks(replicas, timeout)
            .build()
            .err()
            .map(|e| e.to_string())
    };
    let sentinel = "redis+sentinel://127.0.0.1:1/svc";
    let cases = [
        ("redis://127.0.0.1:1", 1, ACK_TIMEOUT, "no node is one"),
        (sentinel, 0, ACK_TIMEOUT, "0 replicas"),
        (sentinel, 1, Duration::ZERO, "outside [1ms"),
        (sentinel, 1, Duration::from_millis(50), "outside [1ms"),
    ];
    for (url, replicas, timeout, expected) in cases {
        let error = build(url, replicas, timeout).unwrap_or_default();
        assert!(
            error.contains(expected),
            "{url} {replicas} {timeout:?}: {error}"
        );
    }
    assert_eq!(build(sentinel, 1, ACK_TIMEOUT), None);
}
