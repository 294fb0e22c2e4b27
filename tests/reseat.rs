//! A holder keeps its lock while a minority of nodes restarts, any number of times: a node
//! that lost its memory gets the holder's copy back at the first extension after this
//! client saw it admitted again, so two restarts far apart no longer take the majority.
//! For the mutex, a read lock and a semaphore permit, against real `redis-server`s.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::{Cluster, RedisServer, eventually, unique};
use quorum_lock::{AutoExtend, LockGuard, Redlock, Result};

/// The holder's TTL: extensions come every few hundred milliseconds.
const TTL: Duration = Duration::from_secs(2);
/// Restart quarantine keeps a restarted node out for about this long.
const CEILING: Duration = Duration::from_secs(3);

fn client(cluster: &Cluster) -> Redlock {
    Redlock::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(200))
        .ttl_ceiling(CEILING)
        .default_ttl(TTL)
        .build()
        .unwrap()
}

/// Tries `acquire` until it succeeds (fresh nodes sit out their first second), at most 20 s.
async fn first<F, Fut>(mut acquire: F) -> LockGuard
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<LockGuard>>,
{
    let start = Instant::now();
    loop {
        match acquire().await {
            Ok(guard) => return guard,
            Err(e) if start.elapsed() < Duration::from_secs(20) => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("no lock within 20 s: {e}"),
        }
    }
}

/// Whether `server` holds any key naming `resource` (the lock, its readers or its slot).
fn has_copy(server: &RedisServer, resource: &str) -> bool {
    !server.keys(&format!("*{resource}*")).is_empty()
}

/// Restarts nodes 0 and then 1 empty, each once the previous one has the holder's copy
/// back, and checks that `guard` holds throughout and releases on a majority.
async fn outlives_two_restarts(cluster: &mut Cluster, mut guard: LockGuard, resource: &str) {
    guard.auto_extend(AutoExtend::new());
    let lost = guard.lost_signal();
    for node in [0, 1] {
        cluster.nodes[node].restart();
        assert!(!has_copy(&cluster.nodes[node], resource), "restarted empty");
        let server = &cluster.nodes[node];
        let what = format!("the holder's copy back on restarted node {node}");
        eventually(Duration::from_secs(30), &what, || {
            has_copy(server, resource)
        })
        .await;
        assert!(!lost.is_lost(), "the lock was lost after restart {node}");
    }
    // Another extension after the second restart still finds a majority.
    guard
        .extend(TTL)
        .await
        .expect("extended after two restarts");
    assert!(!lost.is_lost());
    let report = guard.release().await.expect("released on a majority");
    println!("released: {report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutex_holder_keeps_its_lock_across_two_restarts() {
    let mut cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let resource = unique("reseat-mutex");
    let guard = first(|| async { redlock.lock(resource.clone(), TTL).await }).await;
    outlives_two_restarts(&mut cluster, guard, &resource).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_keeps_its_lock_across_two_restarts() {
    let mut cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let resource = unique("reseat-read");
    let rwlock = redlock.rwlock(&resource).unwrap();
    let guard = first(|| async { Ok(rwlock.read(TTL).await?.into_guard()) }).await;
    outlives_two_restarts(&mut cluster, guard, &resource).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_holder_keeps_its_permit_across_two_restarts() {
    let mut cluster = Cluster::start(3);
    let redlock = client(&cluster);
    let resource = unique("reseat-permit");
    let semaphore = redlock.semaphore(&resource, 2).unwrap();
    let guard = first(|| async { Ok(semaphore.acquire(TTL).await?.into_guard()) }).await;
    outlives_two_restarts(&mut cluster, guard, &resource).await;
}
