//! Members that are a whole Redis Cluster, against a real cluster of three masters and
//! three replicas on loopback: a `redis+cluster://` member spreads locks over its shards
//! and leaves no key behind, votes beside plain members, follows a slot that moved, and
//! keeps a promoted replica that lacks a lock out until that lock's TTL is over.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::clients::{cron_client, new_processes_until_one_locks};
use common::topology::RedisClusterTopology;
use common::{RedisServer, unique};
use quorum_lock::{Error, FindingKind, Redlock};

/// The `redis+cluster://` URL of `cluster`, listing its first two nodes as seeds.
fn member_url(cluster: &RedisClusterTopology) -> String {
    let seeds: Vec<String> = (0..2)
        .map(|i| format!("127.0.0.1:{}", cluster.node(i).port()))
        .collect();
    format!("redis+cluster://{}", seeds.join(","))
}

fn client(urls: &[&str]) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .retry_delay(Duration::from_millis(20))
        .max_retry_delay(Duration::from_millis(100))
        .build()
        .unwrap()
}

fn keys(server: &RedisServer, pattern: &str) -> Vec<String> {
    let mut found: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut server.conn())
        .unwrap();
    found.sort();
    found
}

/// The keys on the masters of `cluster` other than the per-slot bookkeeping that never
/// expires (ensemble records and markers) and a semaphore's count record, which expires
/// with the last permit's TTL.
fn stray_keys(cluster: &RedisClusterTopology) -> Vec<String> {
    let masters: Vec<usize> = (0..cluster.nodes().len())
        .filter(|&i| {
            cluster
                .cluster_nodes(i)
                .iter()
                .any(|e| e.has_flag("myself") && e.is_master())
        })
        .collect();
    assert_eq!(masters.len(), 3, "three masters");
    let expiring = |m: usize, key: &str| {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(key)
            .query(&mut cluster.node(m).conn())
            .unwrap();
        key.contains("}:permits:") && ttl > 0
    };
    (masters.iter())
        .flat_map(|&m| keys(cluster.node(m), "*").into_iter().map(move |k| (m, k)))
        .filter(|(m, k)| {
            !(expiring(*m, k) || k.starts_with("quorum-lock:{") && k.contains("}:node:"))
        })
        .map(|(_, k)| k)
        .collect()
}

/// Workers of several clients of one Cluster member increment counters under locks spread
/// over the shards: every increment is counted exactly once, the lock keys sit on the
/// master that owns their slot, more than one shard serves them, and once released no
/// key is left but the per-slot bookkeeping, also of locks the client's shutdown released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_member_spreads_locks_over_its_shards_and_leaves_no_key() {
    let cluster = RedisClusterTopology::start(3, 1);
    let url = member_url(&cluster);
    let resources: Vec<String> = (0..12).map(|i| unique(&format!("spread-{i}"))).collect();
    let mut owners: Vec<usize> = resources
        .iter()
        .map(|r| cluster.master_for_key(r))
        .collect();
    owners.sort_unstable();
    owners.dedup();
    assert!(owners.len() >= 2, "the resources hash to one shard only");

    const WORKERS: u64 = 4;
    const ROUNDS: u64 = 10;
    let counters: Arc<Vec<AtomicU64>> = Arc::new((0..12).map(|_| AtomicU64::new(0)).collect());
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (redlock, resources, counters) =
            (client(&[&url]), resources.clone(), Arc::clone(&counters));
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                for (i, resource) in resources.iter().enumerate() {
                    let guard = redlock
                        .lock(resource, Duration::from_secs(5))
                        .wait(Duration::from_secs(20))
                        .await
                        .unwrap();
                    // A read, a pause, a write: two holders at once would lose an increment.
                    let seen = counters[i].load(Ordering::SeqCst);
                    if round % 3 == 0 {
                        tokio::task::yield_now().await;
                    }
                    counters[i].store(seen + 1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                }
            }
            redlock.shutdown().await;
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    for counter in counters.iter() {
        assert_eq!(counter.load(Ordering::SeqCst), WORKERS * ROUNDS);
    }
    // A held lock's key is on the master of its slot, and nowhere else.
    let redlock = client(&[&url]);
    let guard = redlock
        .lock(&resources[0], Duration::from_secs(5))
        .await
        .unwrap();
    let owner = cluster.master_for_key(&resources[0]);
    assert_eq!(
        keys(cluster.node(owner), &resources[0]),
        vec![resources[0].clone()]
    );
    guard.release().await.unwrap();
    // Locks still held when the client shuts down are released on their slots' masters,
    // whichever shard that is (not on the member's first seed).
    let mut held = Vec::new();
    for resource in &resources {
        held.push(
            redlock
                .lock(resource, Duration::from_secs(30))
                .await
                .unwrap(),
        );
    }
    assert_eq!(redlock.shutdown().await, resources.len());
    assert_eq!(stray_keys(&cluster), Vec::<String>::new());
    drop(held);
}

/// A Cluster member votes beside two plain servers: with one plain server down the
/// Cluster member and the other make the majority, and the Cluster's shard holds the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_member_votes_beside_plain_servers() {
    let cluster = RedisClusterTopology::start(3, 1);
    let (a, b) = (RedisServer::start(), RedisServer::start());
    let urls = [a.url(), b.url(), member_url(&cluster)];
    let redlock = client(&urls.each_ref().map(String::as_str));
    let resource = unique("mixed");
    let guard = redlock
        .lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(guard.report().failures(), 0);
    guard.release().await.unwrap();
    b.stop();
    let guard = redlock
        .lock(&resource, Duration::from_secs(5))
        .await
        .unwrap();
    let owner = cluster.master_for_key(&resource);
    assert_eq!(keys(cluster.node(owner), &resource), vec![resource.clone()]);
    assert_eq!(keys(&a, &resource), vec![resource.clone()]);
    guard.release().await.unwrap();
    // The deployment check shows the Cluster member's shards and each one's replica, and
    // does not warn of its cluster mode or its replicas: the member follows the cluster
    // by design.
    let report = redlock.check_deployment().await;
    let addr = |i: usize| format!("127.0.0.1:{}", cluster.node(i).port());
    let mut expected: Vec<(String, Vec<String>)> = (0..3)
        .map(|m| {
            (
                addr(m),
                cluster.replicas_of(m).into_iter().map(addr).collect(),
            )
        })
        .collect();
    expected.sort();
    let shards: Vec<(String, Vec<String>)> = (report.nodes[2].cluster_shards.iter())
        .map(|s| (s.master.clone(), s.replicas.clone()))
        .collect();
    assert_eq!(shards, expected);
    let kinds: Vec<_> = report.findings.iter().map(|f| f.kind).collect();
    assert!(!kinds.contains(&FindingKind::ClusterMode), "{kinds:?}");
    assert!(!kinds.contains(&FindingKind::FailoverRisk), "{kinds:?}");
    redlock.shutdown().await;
    // A shard listed again as a plain member is one server voting twice; a shard's
    // replica listed as a plain member is one replication group.
    let replica = cluster.replicas_of(1)[0];
    let (shard, copy) = (cluster.node(0).url(), cluster.node(replica).url());
    for (plain, kind) in [
        (&shard, FindingKind::DuplicateServer),
        (&copy, FindingKind::Replicated),
    ] {
        let twice = client(&[plain, &a.url(), &member_url(&cluster)]);
        let report = twice.check_deployment().await;
        let kinds: Vec<_> = report.findings.iter().map(|f| f.kind).collect();
        assert!(kinds.contains(&kind), "{kinds:?}");
        twice.shutdown().await;
    }
}

/// `heal` until it reports `redlock` ready, within `bound`; the last readiness.
async fn ready_within(redlock: &Redlock, bound: Duration) -> quorum_lock::Readiness {
    let start = Instant::now();
    loop {
        let readiness = redlock.heal().await.unwrap();
        if readiness.is_ready() {
            return readiness;
        }
        assert!(
            start.elapsed() < bound,
            "not ready within {bound:?}: {readiness:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The slot tags of the per-slot bookkeeping keys on `server`, sorted and distinct.
fn bookkeeping_tags(server: &RedisServer) -> Vec<String> {
    let mut tags: Vec<String> = (keys(server, "quorum-lock:{*}:node:*").iter())
        .filter_map(|k| Some(k.split_once('{')?.1.split_once('}')?.0.to_owned()))
        .collect();
    tags.dedup();
    tags
}

/// `heal` (and so `doctor --ready` and `repair`) reports a Cluster member ready once each
/// master that owns a slot is admitted in its current life: it probes one fixed slot per
/// master, so that its probes leave bookkeeping in one slot per master and nothing else,
/// however often it runs.
///
/// On the code before this change a Cluster member was never ready: "not ready within
/// 30s: ... KeptOut { reason: Readmitting ... }".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_member_is_reported_ready_once_its_masters_are_admitted() {
    let cluster = RedisClusterTopology::start(3, 0);
    let redlock = client(&[&member_url(&cluster)]);
    let readiness = ready_within(&redlock, Duration::from_secs(30)).await;
    assert_eq!(readiness.admitted(), 1);
    for _ in 0..5 {
        assert!(redlock.heal().await.unwrap().is_ready());
    }
    for m in 0..3 {
        let tags = bookkeeping_tags(cluster.node(m));
        assert_eq!(tags.len(), 1, "master {m}: bookkeeping in slots {tags:?}");
    }
    assert_eq!(stray_keys(&cluster), Vec::<String>::new());
    redlock.shutdown().await;
    // A key prefix with a hash tag puts every name in one slot: only its owner counts.
    let tagged = Redlock::builder()
        .nodes([member_url(&cluster)])
        .key_prefix("{app}:")
        .build()
        .unwrap();
    ready_within(&tagged, Duration::from_secs(30)).await;
    tagged.shutdown().await;
}

/// One frozen master (`SIGSTOP`: it accepts connections and never answers) of a
/// five-master cluster stops no lock on the other masters' slots: a confirmation round
/// settles once the four others agree, without waiting for the silent one, and no round
/// is cut short by a request's node timeout. (With three masters the other two must both
/// answer: a silent one stops the others' votes until the cluster replaces it.)
///
/// On the code before this change every round waited for the frozen master until its
/// connect timeout, a confirmation window, and requests dropped it half-way: "lock 0 with
/// master 4 frozen: not enough votes ... (1 of 1 needed) within 5s".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_of_five_stops_no_lock_on_the_others() {
    let cluster = RedisClusterTopology::start(5, 0);
    for i in 0..5 {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("cluster-require-full-coverage")
            .arg("no")
            .query(&mut cluster.node(i).conn())
            .unwrap();
    }
    let redlock = client(&[&member_url(&cluster)]);
    ready_within(&redlock, Duration::from_secs(30)).await;
    let resources: Vec<String> = (0..40)
        .map(|i| unique(&format!("frozen-of-five-{i}")))
        .filter(|r| cluster.master_for_key(r) != 4)
        .take(10)
        .collect();
    cluster.node(4).pause();
    // Past a confirmation window: every lock below needs a round with the master frozen.
    tokio::time::sleep(Duration::from_millis(600)).await;
    for (i, resource) in resources.iter().enumerate() {
        let start = Instant::now();
        let guard = redlock
            .lock(resource, Duration::from_secs(5))
            .wait(Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("lock {i} with master 4 frozen: {e}"));
        println!("lock {i} with master 4 frozen: {:?}", start.elapsed());
        guard.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    cluster.node(4).resume();
    redlock.shutdown().await;
}

/// After a shard's failover every new process (a command run from cron, each shorter than
/// the quarantine) counts the promoted master's quarantine from when the first client
/// learnt its life, as recorded on the node in a slot it owns: once that is over, a fresh
/// client with a 1 s wait gets the vote.
///
/// On the code before this change each new process started the quarantine again, so none
/// ever saw it end: "no new process got the promoted master's vote within 15 s".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_processes_count_a_promoted_shards_quarantine_from_its_first_learning() {
    let cluster = RedisClusterTopology::start(3, 1);
    let resource = unique("cron");
    let master = cluster.master_for_key(&resource);
    let warm = cron_client(&member_url(&cluster));
    (warm.lock(&resource, Duration::from_secs(2)))
        .wait(Duration::from_secs(20))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    warm.shutdown().await;
    cluster.force_failover(cluster.replicas_of(master)[0]);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let first = cron_client(&member_url(&cluster));
    let refused = first.try_lock(&resource, Duration::from_secs(2)).await;
    assert!(
        !matches!(refused, Ok(Some(_))),
        "the promoted master voted at once"
    );
    first.shutdown().await;
    let learnt = Instant::now();
    new_processes_until_one_locks(&member_url(&cluster), &resource, learnt).await;
}

/// `total_connections_received` of node `i` of `cluster`.
fn connections_received(cluster: &RedisClusterTopology, i: usize) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query(&mut cluster.node(i).conn())
        .unwrap();
    (info.lines())
        .find_map(|l| {
            l.strip_prefix("total_connections_received:")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// A busy client's confirmation rounds (one every 250 ms or so while it locks) ask each
/// master on a connection kept from round to round: locking for 3 s opens a bounded
/// number of connections per master, not one per round.
///
/// On the code before this change every round connected to every master anew: "master 0
/// received 16 connections in 3 s of locking".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmation_rounds_keep_their_connections() {
    let cluster = RedisClusterTopology::start(3, 0);
    let redlock = client(&[&member_url(&cluster)]);
    ready_within(&redlock, Duration::from_secs(30)).await;
    let before: Vec<u64> = (0..3).map(|i| connections_received(&cluster, i)).collect();
    let start = Instant::now();
    let mut locks = 0;
    while start.elapsed() < Duration::from_secs(3) {
        let resource = unique("kept");
        let guard = redlock
            .lock(&resource, Duration::from_secs(5))
            .wait(Duration::from_secs(5))
            .await
            .unwrap();
        guard.release().await.unwrap();
        locks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (i, before) in before.iter().enumerate() {
        let opened = connections_received(&cluster, i) - before - 1;
        println!("master {i}: {opened} connections in 3 s of locking ({locks} locks)");
        assert!(
            opened <= 3,
            "master {i} received {opened} connections in 3 s of locking"
        );
    }
    redlock.shutdown().await;
}

/// The masters of `cluster` now, by index.
fn masters_now(cluster: &RedisClusterTopology) -> Vec<usize> {
    (0..cluster.nodes().len())
        .filter(|&i| {
            (cluster.cluster_nodes(i).iter()).any(|e| e.has_flag("myself") && e.is_master())
        })
        .collect()
}

/// The deployment check reads a Cluster member's bookkeeping on every shard master, per
/// slot: its key census counts every master's keys, each shard says how many slots it
/// holds a marker in and how many of those keep its vote out, and no node-wide marker is
/// missed (there is none on a Cluster member). After a failover the promoted master's
/// slots, whose markers name the old master, are reported kept out.
///
/// On the code before this change the check read the first seed alone, with untagged
/// names: its census counted one master's keys ("census Some(8) keys, the masters hold 30").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_check_reads_a_cluster_members_slots_on_every_master() {
    let cluster = RedisClusterTopology::start(3, 1);
    let redlock = client(&[&member_url(&cluster)]);
    ready_within(&redlock, Duration::from_secs(30)).await;
    let resources: Vec<String> = (0..12).map(|i| unique(&format!("census-{i}"))).collect();
    for resource in &resources {
        let guard = redlock
            .lock(resource, Duration::from_secs(5))
            .wait(Duration::from_secs(10))
            .await
            .unwrap();
        guard.release().await.unwrap();
    }
    let report = redlock.check_deployment().await;
    let member = &report.nodes[0];
    let held: usize = (masters_now(&cluster).into_iter())
        .map(|m| keys(cluster.node(m), "quorum-lock:*").len())
        .sum();
    let scanned = member.keys.map(|k| k.scanned);
    assert_eq!(
        scanned,
        Some(held as u64),
        "census {scanned:?} keys, the masters hold {held}"
    );
    for shard in &member.cluster_shards {
        assert!(shard.slots_marked >= Some(1), "{shard:?}");
        assert_eq!(shard.slots_kept_out, Some(0), "{shard:?}");
    }
    let kept: Vec<_> = (report.findings.iter())
        .filter(|f| f.kind == FindingKind::KeptOut)
        .collect();
    assert!(kept.is_empty(), "{kept:?}");

    let old = cluster.master_for_key(&resources[0]);
    let replica = cluster.replicas_of(old)[0];
    let promoted = format!("127.0.0.1:{}", cluster.node(replica).port());
    cluster.force_failover(replica);
    let start = Instant::now();
    loop {
        let _ = redlock.heal().await;
        let report = redlock.check_deployment().await;
        let shard = (report.nodes[0].cluster_shards.iter()).find(|s| s.master == promoted);
        let flagged = (report.findings.iter())
            .any(|f| f.kind == FindingKind::KeptOut && f.node.as_deref() == Some(&*promoted));
        if let Some(shard) = shard.filter(|s| s.slots_kept_out > Some(0) && flagged) {
            println!("after the failover: {shard:?}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the promoted master's slots were never reported kept out: {report:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    redlock.shutdown().await;
}

/// The other lock kinds on a Cluster member: a semaphore's slots share one shard (its
/// waiting list and count record are theirs), and at most its count hold at once; a
/// read-write lock's readers share while its writer is out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_and_a_read_write_lock_work_on_a_cluster_member() {
    let cluster = RedisClusterTopology::start(3, 1);
    let redlock = client(&[&member_url(&cluster)]);
    let jobs = redlock.semaphore(&unique("jobs"), 2).unwrap();
    let ttl = Duration::from_secs(5);
    let first = jobs.acquire(ttl).await.unwrap();
    let second = jobs.acquire(ttl).await.unwrap();
    assert!(
        jobs.try_acquire(ttl).await.unwrap().is_none(),
        "a third permit"
    );
    first.release().await.unwrap();
    let third = jobs
        .try_acquire(ttl)
        .await
        .unwrap()
        .expect("a freed permit");
    third.release().await.unwrap();
    second.release().await.unwrap();

    let name = unique("docs");
    let writers = client(&[&member_url(&cluster)]);
    let (docs, docs_writer) = (
        redlock.rwlock(&name).unwrap(),
        writers.rwlock(&name).unwrap(),
    );
    let r1 = docs.read(ttl).await.unwrap();
    let r2 = docs.read(ttl).await.unwrap();
    assert!(
        docs_writer.try_write(ttl).await.unwrap().is_none(),
        "a writer beside readers"
    );
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let writer = docs_writer
        .try_write(ttl)
        .await
        .unwrap()
        .expect("the writer");
    assert!(
        docs.try_read(ttl).await.unwrap().is_none(),
        "a reader beside the writer"
    );
    writer.release().await.unwrap();
    redlock.shutdown().await;
    writers.shutdown().await;
    assert_eq!(stray_keys(&cluster), Vec::<String>::new());
}

/// Bad settings are refused with a clear error before anything is sent: a malformed
/// Cluster URL, a Cluster member without restart quarantine, a key prefix whose `{` would
/// move names off their slot, and a lock over resources in two slots (nothing left).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_cluster_settings_and_cross_slot_locks_are_config_errors() {
    let refused = |builder: quorum_lock::RedlockBuilder, says: &str| match builder.build() {
        Err(Error::Config(msg)) => assert!(msg.contains(says), "{msg}"),
        other => panic!("expected a configuration error, got {other:?}"),
    };
    refused(
        Redlock::builder().node("redis+cluster://h:0"),
        "no valid port",
    );
    refused(
        Redlock::builder().node("redis+cluster://h:1/2"),
        "database 0 only",
    );
    refused(
        Redlock::builder()
            .node("redis+cluster://h:1")
            .restart_quarantine(false),
        "needs restart quarantine",
    );
    refused(
        Redlock::builder()
            .node("redis+cluster://h:1")
            .key_prefix("app{"),
        "opens no hash tag",
    );
    assert!(
        Redlock::builder()
            .node("redis+cluster://h:1")
            .key_prefix("{app}:")
            .build()
            .is_ok()
    );

    let cluster = RedisClusterTopology::start(3, 1);
    let redlock = client(&[&member_url(&cluster)]);
    let (a, b) = ("order-a".to_owned(), "order-b".to_owned());
    assert_ne!(cluster.key_slot(&a), cluster.key_slot(&b));
    match redlock
        .lock_many([a.clone(), b.clone()], Duration::from_secs(5))
        .await
    {
        Err(Error::Config(msg)) => assert!(msg.contains("hash slot"), "{msg}"),
        other => panic!("expected a configuration error, got {other:?}"),
    }
    let tagged = ["{order-7}:a".to_owned(), "{order-7}:b".to_owned()];
    let guard = redlock
        .lock_many(tagged.clone(), Duration::from_secs(5))
        .await
        .unwrap();
    guard.release().await.unwrap();
    redlock.shutdown().await;
    assert_eq!(stray_keys(&cluster), Vec::<String>::new());
}

/// One cluster listed twice, by two different seeds, is one server voting twice: every
/// lock fails with `SameServer` naming both, as two URLs of one plain server do, and
/// nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_listed_twice_is_refused() {
    let cluster = RedisClusterTopology::start(3, 0);
    let (a, b) = (cluster.node(0).port(), cluster.node(1).port());
    let twice = client(&[
        &format!("redis+cluster://127.0.0.1:{a}"),
        &format!("redis+cluster://127.0.0.1:{b}"),
        &RedisServer::start().url(),
    ]);
    match twice.lock(unique("twice"), Duration::from_secs(5)).await {
        Err(Error::SameServer { first, second }) => {
            assert_eq!(first, format!("cluster:127.0.0.1:{a}"));
            assert_eq!(second, format!("cluster:127.0.0.1:{b}"));
        }
        other => panic!("expected SameServer, got {other:?}"),
    }
    twice.shutdown().await;
    assert_eq!(stray_keys(&cluster), Vec::<String>::new());
}

/// Moves `slot` to master `to`, its keys with it (`MIGRATE`), as `redis-cli --cluster
/// reshard` does, and waits until every node names `to` its owner.
fn move_slot(cluster: &RedisClusterTopology, slot: u16, to: usize) {
    let from = cluster.master_for_slot(slot);
    let (src, dst) = (cluster.node(from), cluster.node(to));
    let setslot = |server: &RedisServer, state: &str, id: &str| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(state)
            .arg(id)
            .query(&mut server.conn())
            .unwrap();
    };
    setslot(dst, "IMPORTING", cluster.node_id(from));
    setslot(src, "MIGRATING", cluster.node_id(to));
    loop {
        let batch: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(100)
            .query(&mut src.conn())
            .unwrap();
        if batch.is_empty() {
            break;
        }
        let _: () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(dst.port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&batch)
            .query(&mut src.conn())
            .unwrap();
    }
    for m in (0..cluster.nodes().len()).filter(|&i| !cluster.replicas_of(i).is_empty()) {
        setslot(cluster.node(m), "NODE", cluster.node_id(to));
    }
    common::wait_until(
        Duration::from_secs(10),
        "every node to name the new owner",
        || {
            cluster.reachable().all(|i| {
                cluster
                    .cluster_nodes(i)
                    .iter()
                    .any(|e| e.id == cluster.node_id(to) && e.serves(slot))
            })
        },
    );
}

/// A slot moved to another master with its keys: the member's next request to the old
/// owner is redirected and votes no, the member learns the table again, and the lock is
/// granted on the new owner; a lock held across the move is still exclusive there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_with_its_keys_is_followed_and_stays_exclusive() {
    let cluster = RedisClusterTopology::start(3, 1);
    let url = member_url(&cluster);
    let (holder, other) = (client(&[&url]), client(&[&url]));
    let resource = unique("moved");
    let slot = cluster.key_slot(&resource);
    let guard = holder
        .lock(&resource, Duration::from_secs(3))
        .await
        .unwrap();
    let from = cluster.master_for_slot(slot);
    let to = (0..3).find(|&m| m != from).unwrap();
    move_slot(&cluster, slot, to);
    assert_eq!(keys(cluster.node(to), &resource), vec![resource.clone()]);
    // The other client learnt the table before the move? It learns it now, either way.
    assert!(
        other
            .try_lock(&resource, Duration::from_secs(3))
            .await
            .unwrap()
            .is_none()
    );
    let started = Instant::now();
    let next = other
        .lock(&resource, Duration::from_secs(3))
        .wait(Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(keys(cluster.node(to), &resource), vec![resource.clone()]);
    println!("lock after the move granted in {:?}", started.elapsed());
    drop(guard);
    next.release().await.unwrap();
    holder.shutdown().await;
    other.shutdown().await;
}

/// A lock held while its slot moves to another master with its keys (`MIGRATE`) follows
/// it: the holder extends it on the new owner (the key there holds its token) and its
/// release deletes it there, so a rebalance cancels no job and leaves no key.
///
/// On the code before this change the lock kept its seated view: the extension went to
/// the old owner, was redirected and did not vote ("the extension after the move:
/// Err(Unavailable ... Moved ...)"), and the release left the key on the new owner until
/// its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_follows_its_slot_to_another_master() {
    let cluster = RedisClusterTopology::start(3, 1);
    let holder = client(&[&member_url(&cluster)]);
    let resource = unique("follows");
    let slot = cluster.key_slot(&resource);
    let guard = holder
        .lock(&resource, Duration::from_secs(3))
        .wait(Duration::from_secs(20))
        .await
        .unwrap();
    let from = cluster.master_for_slot(slot);
    let to = (0..3).find(|&m| m != from).unwrap();
    move_slot(&cluster, slot, to);
    assert_eq!(keys(cluster.node(to), &resource), vec![resource.clone()]);
    let extended = guard.extend(Duration::from_secs(10)).await;
    assert!(
        extended.is_ok(),
        "the extension after the move: {extended:?}"
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&resource)
        .query(&mut cluster.node(to).conn())
        .unwrap();
    assert!(
        pttl > 3000,
        "the new owner's key was not extended: {pttl} ms left"
    );
    guard.release().await.unwrap();
    assert_eq!(keys(cluster.node(to), &resource), Vec::<String>::new());
    holder.shutdown().await;
}

/// The same move with two plain members beside the Cluster member: the extension after
/// the move wins on the plain members alone, and must still renew the copy the move put on
/// the new owner (it would otherwise run out, leaving the lock one fault from lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_renews_its_moved_copy_when_other_members_carry_the_extension() {
    let cluster = RedisClusterTopology::start(3, 1);
    let plain = [RedisServer::start(), RedisServer::start()];
    let (p1, p2) = (plain[0].url(), plain[1].url());
    let holder = client(&[&member_url(&cluster), &p1, &p2]);
    let resource = unique("follows-beside");
    let slot = cluster.key_slot(&resource);
    let guard = holder
        .lock(&resource, Duration::from_secs(3))
        .wait(Duration::from_secs(20))
        .await
        .unwrap();
    let from = cluster.master_for_slot(slot);
    let to = (0..3).find(|&m| m != from).unwrap();
    move_slot(&cluster, slot, to);
    // The old owner answers only after the plain nodes made the extension certain.
    cluster.node(from).pause();
    let renewed = |server: &RedisServer| {
        redis::cmd("PTTL")
            .arg(&resource)
            .query::<i64>(&mut server.conn())
            .unwrap()
            > 3000
    };
    let resume_once_plain_renewed = async {
        let what = "the plain nodes to renew the lock";
        common::eventually(Duration::from_secs(10), what, || plain.iter().all(renewed)).await;
        cluster.node(from).resume();
    };
    let (extended, ()) = tokio::join!(
        guard.extend(Duration::from_secs(10)),
        resume_once_plain_renewed
    );
    assert!(extended.is_ok(), "{extended:?}");
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&resource)
        .query(&mut cluster.node(to).conn())
        .unwrap();
    assert!(
        pttl > 3000,
        "the new owner's copy was not renewed: {pttl} ms left"
    );
    guard.release().await.unwrap();
    assert_eq!(keys(cluster.node(to), &resource), Vec::<String>::new());
    holder.shutdown().await;
}

/// Cuts the replication of master `master` to its replicas: each replica is told to
/// authenticate as a user the master does not have, and its link is closed; waits until
/// every replica says its link is down.
fn cut_replication(cluster: &RedisClusterTopology, master: usize) {
    let replicas = cluster.replicas_of(master);
    for &replica in &replicas {
        let mut conn = cluster.node(replica).conn();
        for (name, value) in [("masteruser", "nobody-here"), ("masterauth", "x")] {
            let _: () = redis::cmd("CONFIG")
                .arg("SET")
                .arg(name)
                .arg(value)
                .query(&mut conn)
                .unwrap();
        }
    }
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut cluster.node(master).conn())
        .unwrap();
    for replica in replicas {
        common::wait_until(
            Duration::from_secs(10),
            "the replication link to drop",
            || {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut cluster.node(replica).conn())
                    .unwrap();
                info.contains("master_link_status:down")
            },
        );
    }
}

/// Whether `key` exists on replica `replica` (read with `READONLY`).
fn on_replica(cluster: &RedisClusterTopology, replica: usize, key: &str) -> bool {
    let mut conn = cluster.node(replica).conn();
    let _: () = redis::cmd("READONLY").query(&mut conn).unwrap();
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut conn)
        .unwrap()
        == 1
}

/// A lock the promoted master lacks: its resource, TTL, when it ends at the latest (its
/// TTL after it was taken, or after a later extension), its token.
struct Lost<'a> {
    resource: &'a str,
    ttl: Duration,
    ends: Instant,
    token: u64,
}

/// When a lock taken or extended by a call that returned `Ok` now ends at the latest.
fn ends_after<T, E>(outcome: &Result<T, E>, ttl: Duration, ends: Instant) -> Instant {
    match outcome {
        Ok(_) => ends.max(Instant::now() + ttl),
        Err(_) => ends,
    }
}

/// The fenced lock `redlock` waits for after the failover to node `promoted`: granted no
/// sooner than the `lost` lock's TTL ran out, its key on the promoted master, its token
/// above the lost one. The guard, and when it was granted.
async fn granted_after(
    cluster: &RedisClusterTopology,
    promoted: usize,
    redlock: &Redlock,
    lost: &Lost<'_>,
) -> (quorum_lock::FencedGuard, Instant) {
    let next = redlock
        .lock(lost.resource, lost.ttl)
        .fenced()
        .wait(Duration::from_secs(30))
        .await
        .unwrap();
    let granted = Instant::now();
    let ends = lost.ends;
    assert!(
        granted >= ends,
        "granted {:?} before the lost lock's TTL ran out; the grant: {:?}; the promoted \
         master then: {}",
        ends - granted,
        next.report(),
        bookkeeping(cluster.node(promoted))
    );
    assert_eq!(
        keys(cluster.node(promoted), lost.resource),
        vec![lost.resource.to_owned()]
    );
    assert!(u64::from(next.fencing_token()) > lost.token);
    (next, granted)
}

/// Releases the next holder's lock after a failover. The promoted master may be busy
/// past the node timeout (it forks to resync the demoted master), so a release nobody
/// answered is accepted (the TTL frees the key); one that found the lock gone is not.
async fn release_after_failover(next: quorum_lock::FencedGuard) {
    match next.release().await {
        Ok(_) | Err(Error::Unavailable { .. }) => {}
        Err(e) => panic!("the next holder's release: {e:?}"),
    }
}

/// What a failover test prints when a lock was granted too soon: the server's replication
/// state and the crate's keys there with their values.
fn bookkeeping(server: &RedisServer) -> String {
    let info: String = (redis::cmd("INFO").arg("replication"))
        .query(&mut server.conn())
        .unwrap_or_default();
    let values: Vec<(String, Option<String>)> = (keys(server, "quorum-lock:*").into_iter())
        .map(|k| {
            let v = redis::cmd("GET").arg(&k).query(&mut server.conn()).ok();
            (k, v)
        })
        .collect();
    format!("{info:?} {values:?}")
}

/// A promotion that lost the lock and its fencing counter (replication cut before the
/// lock, after a first lock of the same TTL reached the replica with its slot's record;
/// then `CLUSTER FAILOVER FORCE`): the next lock is granted only once the lost lock's TTL
/// (or the holder's extension, granted while the other masters still named the demoted
/// master) is over, on the promoted master, and its fencing token is above the lost one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_lost_the_lock_keeps_the_next_holder_out_until_its_ttl() {
    let cluster = RedisClusterTopology::start(3, 1);
    let url = member_url(&cluster);
    let (holder, next_client) = (client(&[&url]), client(&[&url]));
    let resource = unique("failover");
    let ttl = Duration::from_secs(3);
    let master = cluster.master_for_key(&resource);
    let replica = cluster.replicas_of(master)[0];
    let warm_up = holder.lock(&resource, ttl).fenced().await.unwrap();
    let warm_token = u64::from(warm_up.fencing_token());
    warm_up.release().await.unwrap();
    let waited: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(1000)
        .query(&mut cluster.node(master).conn())
        .unwrap();
    assert_eq!(waited, 1, "the replica had the first lock's writes");
    cut_replication(&cluster, master);

    let acquired = Instant::now();
    let held = holder.lock(&resource, ttl).fenced().await.unwrap();
    let first_token = u64::from(held.fencing_token());
    assert!(first_token > warm_token);
    assert!(
        !on_replica(&cluster, replica, &resource),
        "the replica got the lock"
    );
    cluster.force_failover(replica);
    let failed_over = Instant::now();

    // Refused once the other masters name the promoted one; granted before, when the
    // promoted master is not confirmed yet either: then the next holder waits for it too.
    let extended = held.extend(ttl).await;
    println!("the holder's extension after the failover: {extended:?}");
    let lost = Lost {
        resource: &resource,
        ttl,
        ends: ends_after(&extended, ttl, acquired + ttl),
        token: first_token,
    };
    let (next, granted) = granted_after(&cluster, replica, &next_client, &lost).await;
    println!(
        "the promoted master voted again {:?} after the failover, {:?} after the lost lock's end",
        granted - failed_over,
        granted - lost.ends
    );
    release_after_failover(next).await;
    drop(held);
    holder.shutdown().await;
    next_client.shutdown().await;
}

/// The cluster finds a frozen shard master (SIGSTOP) silent and promotes its replica,
/// which never received the lock the frozen master holds; the old master then resumes,
/// still a master until it hears of the promotion. The holder's extension there and a
/// client whose slot table predates the failover count only while the other masters still
/// name the old one, and the next lock is granted only once every lock the old master
/// granted is over, on the promoted master, with a higher fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_replaced_by_the_cluster_keeps_its_lost_lock_exclusive() {
    let cluster = RedisClusterTopology::start(3, 1);
    let url = member_url(&cluster);
    let (holder, stale, next_client) = (client(&[&url]), client(&[&url]), client(&[&url]));
    let resource = unique("frozen");
    let ttl = Duration::from_secs(6);
    let master = cluster.master_for_key(&resource);
    let replica = cluster.replicas_of(master)[0];
    let warm_up = holder.lock(&resource, ttl).fenced().await.unwrap();
    warm_up.release().await.unwrap();
    // The stale client learns the table now, before the failover.
    let other = unique("frozen-other");
    stale
        .lock(&other, ttl)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let _: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(1000)
        .query(&mut cluster.node(master).conn())
        .unwrap();
    cut_replication(&cluster, master);
    let acquired = Instant::now();
    let held = holder.lock(&resource, ttl).fenced().await.unwrap();
    let first_token = u64::from(held.fencing_token());

    cluster.node(master).pause();
    let paused = Instant::now();
    common::wait_until(
        Duration::from_secs(20),
        "the cluster to promote the replica",
        || {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut cluster.node(replica).conn())
                .unwrap();
            info.contains("role:master")
        },
    );
    let promotion = paused.elapsed();
    cluster.node(master).resume();

    // Each is refused once the other masters name the promoted one, and may be granted
    // before, when the promoted master is not confirmed yet either: the next holder then
    // waits for it too.
    let extended = held.extend(ttl).await;
    let ends = ends_after(&extended, ttl, acquired + ttl);
    let tried = stale.try_lock(&resource, ttl).await;
    let stale_held = matches!(tried, Ok(Some(_)));
    let ends = if stale_held {
        Instant::now() + ttl
    } else {
        ends
    };
    println!(
        "after the resume: the holder's extension {:?}, the stale client's lock {}",
        extended.map(|_| "granted"),
        if stale_held { "granted" } else { "refused" }
    );
    let lost = Lost {
        resource: &resource,
        ttl,
        ends,
        token: first_token,
    };
    let (next, granted) = granted_after(&cluster, replica, &next_client, &lost).await;
    println!(
        "promoted {promotion:?} after the freeze; the member voted again {:?} after the \
         promotion, {:?} after the lost lock's TTL",
        granted - paused - promotion,
        granted - ends
    );
    drop(tried);
    release_after_failover(next).await;
    drop(held);
    for c in [holder, stale, next_client] {
        c.shutdown().await;
    }
}

/// Calls of `command` on every master of `cluster` since the last `CONFIG RESETSTAT`.
fn calls_on_masters(cluster: &RedisClusterTopology, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    (0..cluster.nodes().len())
        .map(|i| {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut cluster.node(i).conn())
                .unwrap();
            (info.lines())
                .find_map(|l| l.strip_prefix(&prefix)?.split(',').next()?.parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// An idle client of a Cluster member stays quiet: once its masters are admitted and it
/// has made no attempt for a second and a half, its background readmission only pings. In
/// the next 6 s its masters see no script (no readmission probe on a random slot, which
/// left per-slot bookkeeping keys behind, slot after slot).
///
/// On the code before this change the background task probed every 100 ms to 5 s for
/// ever, since a Cluster member is never known admitted as a whole: "an idle client sent
/// 14 scripts in 3 s".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_cluster_member_client_sends_no_scripts() {
    let cluster = RedisClusterTopology::start(3, 0);
    let url = member_url(&cluster);
    let redlock = client(&[&url]);
    let resource = unique("idle");
    let start = Instant::now();
    let guard = loop {
        match redlock.lock(&resource, Duration::from_secs(5)).await {
            Ok(guard) => break guard,
            Err(e) if start.elapsed() < Duration::from_secs(20) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no lock within 20 s: {e}"),
        }
    };
    guard.release().await.unwrap();
    ready_within(&redlock, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for i in 0..cluster.nodes().len() {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut cluster.node(i).conn())
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    // Read first: each reading is an `INFO` of its own on every master.
    let info = calls_on_masters(&cluster, "info");
    let scripts = calls_on_masters(&cluster, "evalsha") + calls_on_masters(&cluster, "eval");
    assert_eq!(scripts, 0, "an idle client sent {scripts} scripts in 6 s");
    let (ping, slots) = (
        calls_on_masters(&cluster, "ping"),
        calls_on_masters(&cluster, "cluster|slots") + calls_on_masters(&cluster, "cluster"),
    );
    println!(
        "idle for 6 s: {ping} PING, {slots} CLUSTER SLOTS, {info} INFO on the 3 masters: \
         {:.2} commands a second per master",
        (ping + slots + info) as f64 / 6.0 / 3.0
    );
}
