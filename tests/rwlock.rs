//! The read-write lock against real `redis-server` processes: writers exclude everyone
//! and readers share, with exact counts across clients; per-reader expiry; writers first;
//! upgrade refused; a minority of nodes down; bad input; and no key left behind.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use common::{Cluster, builder, client, unique};
use quorum_lock::{Error, Redlock, RwLock};

/// Longer than any test waits for a key to go: a key left behind fails the test.
const TTL: Duration = Duration::from_secs(30);

/// Every key of every read-write lock on every node (fencing counters aside: they never
/// expire, by design).
fn rw_keys(cluster: &Cluster) -> Vec<(usize, String)> {
    let mut keys = cluster.keys_everywhere("*quorum-lock:rw:*");
    keys.retain(|(_, k)| !k.starts_with("quorum-lock:fence:"));
    keys
}

/// Waits until no key of a read-write lock is left on any node: releases finish on the
/// last nodes in the background, and a key left behind fails it (a TTL outlives the wait).
async fn no_key_left(cluster: &Cluster) {
    common::eventually(Duration::from_secs(5), "no key left", || {
        rw_keys(cluster).is_empty()
    })
    .await;
}

/// A client with a short retry delay, as a separate process would have.
fn fast_client(cluster: &Cluster) -> Redlock {
    builder(&cluster.urls())
        .retry_delay(Duration::from_millis(2))
        .max_retry_delay(Duration::from_millis(20))
        .build()
        .unwrap()
}

/// The shared data: a writer sets both halves, one after the other, with a pause between.
#[derive(Default)]
struct Data {
    first: AtomicU64,
    second: AtomicU64,
    writers_inside: AtomicI64,
    readers_inside: AtomicI64,
    most_readers: AtomicI64,
    reads: AtomicUsize,
}

async fn write_once(rwlock: &RwLock, data: &Data) {
    let guard = rwlock.write(TTL).wait(Duration::from_secs(60)).await;
    let guard = guard.expect("the write lock within the wait budget");
    assert_eq!(
        data.writers_inside.fetch_add(1, Ordering::SeqCst),
        0,
        "two writers"
    );
    assert_eq!(
        data.readers_inside.load(Ordering::SeqCst),
        0,
        "a writer beside readers"
    );
    let next = data.first.load(Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(2)).await;
    data.first.store(next, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2)).await;
    data.second.store(next, Ordering::SeqCst);
    data.writers_inside.fetch_sub(1, Ordering::SeqCst);
    guard.release().await.expect("released on every node");
}

async fn read_once(rwlock: &RwLock, data: &Data) {
    let guard = rwlock.read(TTL).wait(Duration::from_secs(60)).await;
    let guard = guard.expect("a read lock within the wait budget");
    let now = data.readers_inside.fetch_add(1, Ordering::SeqCst) + 1;
    data.most_readers.fetch_max(now, Ordering::SeqCst);
    assert_eq!(
        data.writers_inside.load(Ordering::SeqCst),
        0,
        "a reader beside a writer"
    );
    let first = data.first.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(3)).await;
    assert_eq!(data.second.load(Ordering::SeqCst), first, "a torn snapshot");
    data.readers_inside.fetch_sub(1, Ordering::SeqCst);
    data.reads.fetch_add(1, Ordering::SeqCst);
    guard.release().await.expect("released on every node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_exclude_everyone_with_exact_counts_while_readers_read() {
    const WRITERS: usize = 4;
    const ROUNDS: usize = 10;
    const READERS: usize = 3;
    let cluster = Cluster::start(3);
    let name = unique("cache");
    let data = Arc::new(Data::default());
    let writers_done = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for _ in 0..WRITERS {
        let rwlock = fast_client(&cluster).rwlock(&name).unwrap();
        let data = data.clone();
        writers.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                write_once(&rwlock, &data).await;
            }
        }));
    }
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let rwlock = fast_client(&cluster).rwlock(&name).unwrap();
        let (data, done) = (data.clone(), writers_done.clone());
        readers.push(tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                read_once(&rwlock, &data).await;
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    writers_done.store(true, Ordering::SeqCst);
    for reader in readers {
        reader.await.unwrap();
    }
    let total = (WRITERS * ROUNDS) as u64;
    assert_eq!(
        data.first.load(Ordering::SeqCst),
        total,
        "every increment, once"
    );
    assert_eq!(data.second.load(Ordering::SeqCst), total);
    assert!(
        data.reads.load(Ordering::SeqCst) > 0,
        "readers read meanwhile"
    );
    common::eventually(Duration::from_secs(5), "no key left", || {
        rw_keys(&cluster).is_empty()
    })
    .await;
}

#[tokio::test]
async fn readers_share_and_a_waiting_writer_keeps_new_readers_out() {
    let cluster = Cluster::start(3);
    let name = unique("schema");
    let (a, b, c) = (
        client(&cluster.urls()),
        client(&cluster.urls()),
        client(&cluster.urls()),
    );
    let (a, b, c) = (
        a.rwlock(&name).unwrap(),
        b.rwlock(&name).unwrap(),
        c.rwlock(&name).unwrap(),
    );
    let first = a.try_read(TTL).await.unwrap().expect("a reader");
    let second = b
        .try_read(TTL)
        .await
        .unwrap()
        .expect("a second reader beside it");
    assert!(c.try_write(TTL).await.unwrap().is_none(), "readers hold");
    let third = c.try_read(TTL).await.unwrap();
    third
        .expect("a refused try leaves no intent")
        .release()
        .await
        .unwrap();
    let writer = {
        let c = c.clone();
        tokio::spawn(async move { c.write(TTL).wait(Duration::from_secs(10)).await })
    };
    common::eventually(Duration::from_secs(5), "the writer's intent", || {
        !cluster.keys_everywhere("quorum-lock:intent:*").is_empty()
    })
    .await;
    let late = a.try_read(TTL).await.unwrap();
    assert!(late.is_none(), "a writer waits: no new reader");
    first.release().await.unwrap();
    second.release().await.unwrap();
    let writing = writer
        .await
        .unwrap()
        .expect("the writer, once the readers left");
    assert!(a.try_read(TTL).await.unwrap().is_none(), "a writer holds");
    assert!(b.try_write(TTL).await.unwrap().is_none(), "one writer");
    writing.release().await.unwrap();
    let reading = a.try_read(TTL).await.unwrap().expect("readers again");
    reading.release().await.unwrap();
    no_key_left(&cluster).await;
}

/// A writer whose wait is given up by its caller (a `timeout` drops the future) leaves no
/// intent behind to keep new readers out for its TTL.
#[tokio::test]
async fn a_dropped_waiting_writer_keeps_no_reader_out() {
    let cluster = Cluster::start(3);
    let name = unique("dropped-writer");
    let (a, b) = (client(&cluster.urls()), client(&cluster.urls()));
    let (a, b) = (a.rwlock(&name).unwrap(), b.rwlock(&name).unwrap());
    let reader = a.try_read(TTL).await.unwrap().expect("a reader");
    let waiting = b.write(TTL).wait(Duration::from_secs(20));
    let intent_set = async {
        common::eventually(Duration::from_secs(5), "the writer's intent", || {
            !cluster.keys_everywhere("quorum-lock:intent:*").is_empty()
        })
        .await;
    };
    tokio::select! {
        _ = waiting => panic!("the writer got in beside a reader"),
        () = intent_set => {}
    }
    reader.release().await.unwrap();
    common::eventually(Duration::from_secs(5), "the intent cleared", || {
        cluster.keys_everywhere("quorum-lock:intent:*").is_empty()
    })
    .await;
    let next = a.try_read(TTL).await.unwrap();
    next.expect("a new reader once the writer was dropped")
        .release()
        .await
        .unwrap();
    no_key_left(&cluster).await;
}

#[tokio::test]
async fn a_dead_reader_delays_a_writer_by_its_own_ttl_only() {
    let cluster = Cluster::start(3);
    let name = unique("report");
    let reader = client(&cluster.urls()).rwlock(&name).unwrap();
    // A long reader, released, and a short one that dies: no release, no extension.
    let long = reader.try_read(Duration::from_secs(60)).await.unwrap();
    let short = reader.try_read(Duration::from_millis(800)).await.unwrap();
    long.expect("the long reader").release().await.unwrap();
    std::mem::forget(short.expect("the short reader"));
    let writer = client(&cluster.urls()).rwlock(&name).unwrap();
    assert!(
        writer.try_write(TTL).await.unwrap().is_none(),
        "the short reader holds"
    );
    // Within a few seconds, not the long reader's minute: each reader expires on its own.
    let writing = writer.write(TTL).wait(Duration::from_secs(5)).await;
    writing
        .expect("free once the dead reader's TTL ran out")
        .release()
        .await
        .unwrap();
    // A node that answered the writer before the dead reader expired there keeps its
    // entry until then, not until the long reader's minute.
    common::eventually(Duration::from_secs(5), "no key left", || {
        rw_keys(&cluster).is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_reader_that_asks_to_write_is_refused_other_tasks_wait() {
    let cluster = Cluster::start(1);
    let redlock = client(&cluster.urls());
    let rwlock = redlock.rwlock(&unique("upgrade")).unwrap();
    let reading = rwlock.read(TTL).await.unwrap();
    let upgrade = rwlock.write(TTL).await;
    assert!(matches!(upgrade, Err(Error::Upgrade { .. })), "{upgrade:?}");
    let upgrade = rwlock.try_write(TTL).await;
    assert!(matches!(upgrade, Err(Error::Upgrade { .. })), "{upgrade:?}");
    // Another task of the same client waits for the reader instead.
    let other = {
        let rwlock = rwlock.clone();
        tokio::spawn(async move { rwlock.write(TTL).wait(Duration::from_secs(10)).await })
    };
    reading.release().await.unwrap();
    let writing = other.await.unwrap().expect("the other task writes");
    writing.release().await.unwrap();
    let writing = rwlock
        .write(TTL)
        .await
        .expect("no reader left in this task");
    writing.release().await.unwrap();
    no_key_left(&cluster).await;
}

/// `rwlock.try_write(ttl)` from a task of its own: refused (`true`) while readers or a
/// writer hold. A task holding a read lock may not ask for the write lock itself.
async fn write_refused_elsewhere(rwlock: &RwLock) -> bool {
    let rwlock = rwlock.clone();
    let tried = tokio::spawn(async move { rwlock.try_write(TTL).await });
    tried.await.unwrap().unwrap().is_none()
}

#[tokio::test]
async fn a_minority_down_still_reads_and_writes() {
    let mut cluster = Cluster::start(3);
    cluster.nodes[1].kill();
    let rwlock = client(&cluster.urls()).rwlock(&unique("minority")).unwrap();
    let one = rwlock.try_read(TTL).await.unwrap().expect("a reader");
    let two = rwlock.try_read(TTL).await.unwrap().expect("another reader");
    assert!(write_refused_elsewhere(&rwlock).await, "readers hold");
    one.release().await.unwrap();
    two.release().await.unwrap();
    let writing = rwlock.write(TTL).wait(Duration::from_secs(5)).await;
    let writing = writing.expect("the writer, with one node down");
    assert!(
        rwlock.try_read(TTL).await.unwrap().is_none(),
        "a writer holds"
    );
    writing.release().await.unwrap();
    no_key_left(&cluster).await;
}

#[tokio::test]
async fn writers_fencing_tokens_increase_and_readers_extend_alone() {
    let cluster = Cluster::start(3);
    let redlock = builder(&cluster.urls()).restart_quarantine(true).build();
    let rwlock = redlock.unwrap().rwlock(&unique("fenced")).unwrap();
    let first = rwlock.write(TTL).fenced().await.unwrap();
    let token = first.fencing_token();
    first.release().await.unwrap();
    let second = rwlock.write(TTL).fenced().await.unwrap();
    assert!(second.fencing_token() > token, "tokens strictly increase");
    second.release().await.unwrap();
    let reading = rwlock.read(Duration::from_millis(1500)).await.unwrap();
    let other = rwlock.read(Duration::from_millis(1500)).await.unwrap();
    let extended = reading.extend(Duration::from_secs(30)).await;
    extended.expect("the reader extended");
    other.release().await.unwrap();
    assert!(
        write_refused_elsewhere(&rwlock).await,
        "the extended reader holds"
    );
    reading.release().await.unwrap();
    rwlock.write(TTL).await.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn a_cancelled_or_timed_out_acquisition_leaves_nothing_behind() {
    let cluster = Cluster::start(3);
    let rwlock = client(&cluster.urls()).rwlock(&unique("busy")).unwrap();
    let writing = rwlock.write(TTL).await.unwrap();
    let reading = rwlock.read(TTL).wait(Duration::from_millis(200)).await;
    assert!(matches!(reading, Err(Error::Timeout { .. })), "{reading:?}");
    let cancelled = tokio::time::timeout(Duration::from_millis(50), rwlock.read(TTL).into_future());
    assert!(cancelled.await.is_err(), "still waiting when dropped");
    writing.release().await.unwrap();
    let reading = rwlock.read(TTL).await.unwrap();
    let writer = {
        let rwlock = rwlock.clone();
        let short = Duration::from_millis(1500);
        tokio::spawn(async move { rwlock.write(short).wait(Duration::from_millis(100)).await })
    };
    let writer = writer.await.unwrap();
    assert!(matches!(writer, Err(Error::Timeout { .. })), "{writer:?}");
    reading.release().await.unwrap();
    // The writer that gave up cleared its intent; nothing else was left.
    common::eventually(Duration::from_secs(5), "no key left", || {
        rw_keys(&cluster).is_empty()
    })
    .await;
}

#[tokio::test]
async fn status_shows_the_writer_or_every_reader_with_holder_info() {
    let cluster = Cluster::start(3);
    let name = unique("status");
    let (a, b) = (client(&cluster.urls()), client(&cluster.urls()));
    let (a, b) = (a.rwlock(&name).unwrap(), b.rwlock(&name).unwrap());
    let first = a.read(TTL).await.unwrap();
    let second = b.read(Duration::from_secs(10)).await.unwrap();
    // A read lock is granted by a majority; the third node's entry may still be in flight.
    let mut status = a.status().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while status.readers.iter().any(|r| r.nodes < 3) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        status = a.status().await.unwrap();
    }
    assert_eq!(status.writer.verdict, quorum_lock::Verdict::Free);
    let readers: Vec<(&str, usize)> = (status.readers.iter())
        .map(|r| (r.holder.token.as_str(), r.nodes))
        .collect();
    let token =
        |guard: &quorum_lock::ReadGuard| guard.token().split(';').next().unwrap().to_owned();
    assert_eq!(
        readers,
        vec![(token(&first).as_str(), 3), (token(&second).as_str(), 3)]
    );
    assert_eq!(status.readers[0].holder.pid, Some(std::process::id()));
    assert!(status.readers[1].remaining <= Duration::from_secs(10));
    first.release().await.unwrap();
    second.release().await.unwrap();
    let writing = b.write(TTL).await.unwrap();
    let status = a.status().await.unwrap();
    assert!(status.readers.is_empty(), "{status:?}");
    let holder = status.writer.holder.expect("the writer");
    assert_eq!(
        writing.token().split(';').next(),
        Some(holder.token.as_str())
    );
    writing.release().await.unwrap();
}

#[tokio::test]
async fn a_reader_runs_its_work_under_the_read_lock_and_releases() {
    let cluster = Cluster::start(3);
    let rwlock = client(&cluster.urls()).rwlock(&unique("run")).unwrap();
    let elsewhere = rwlock.clone();
    let (validity, refused) = rwlock
        .read(TTL)
        .run(|ctx| async move {
            let refused = write_refused_elsewhere(&elsewhere).await;
            (ctx.validity(), refused)
        })
        .await
        .expect("the work's output");
    assert!(validity > Duration::ZERO);
    assert!(refused, "no writer while the work ran");
    let upgrade = rwlock.read(TTL).run(|_| rwlock.try_write(TTL)).await;
    assert!(
        matches!(upgrade, Ok(Err(Error::Upgrade { .. }))),
        "{upgrade:?}"
    );
    no_key_left(&cluster).await;
}

#[tokio::test]
async fn bad_input_is_a_config_error() {
    let cluster = Cluster::start(1);
    let redlock = client(&cluster.urls());
    assert!(matches!(redlock.rwlock(""), Err(Error::Config(_))));
    let rwlock = redlock.rwlock("r").unwrap();
    let zero = rwlock.read(Duration::ZERO).await;
    assert!(matches!(zero, Err(Error::Config(_))), "{zero:?}");
    let zero = rwlock.write(Duration::ZERO).await;
    assert!(matches!(zero, Err(Error::Config(_))), "{zero:?}");
    let huge = rwlock.try_read(Duration::MAX).await;
    assert!(matches!(huge, Err(Error::Config(_))), "{huge:?}");
    no_key_left(&cluster).await;
}

/// One name, one lock: the mutex of a name is its read-write lock's exclusive side.
#[tokio::test]
async fn the_mutex_of_a_name_excludes_its_readers_and_writer() {
    let cluster = Cluster::start(3);
    let name = unique("one-name");
    let redlock = client(&cluster.urls());
    let rw = redlock.rwlock(&name).unwrap();
    let reading = rw.read(TTL).await.unwrap();
    let beside = redlock.try_lock(name.as_str(), TTL).await.unwrap();
    assert!(beside.is_none(), "a mutex beside a reader");
    let upgrade = redlock.lock(name.as_str(), TTL).await;
    assert!(matches!(upgrade, Err(Error::Upgrade { .. })), "{upgrade:?}");
    // A waiting mutex is woken by the last reader's release.
    let waiting = {
        let (redlock, name) = (redlock.clone(), name.clone());
        tokio::spawn(async move { redlock.lock(name, TTL).wait(Duration::from_secs(20)).await })
    };
    common::eventually(Duration::from_secs(10), "the mutex waits", || {
        cluster.nodes.iter().any(|n| {
            let waiters = format!("quorum-lock:waiters:{name}");
            redis::cmd("EXISTS")
                .arg(&waiters)
                .query::<i64>(&mut n.conn())
                .unwrap()
                == 1
        })
    })
    .await;
    reading.release().await.unwrap();
    let mutex = waiting
        .await
        .unwrap()
        .expect("the mutex once the reader left");
    assert!(
        rw.try_read(TTL).await.unwrap().is_none(),
        "a reader beside a mutex"
    );
    assert!(
        rw.try_write(TTL).await.unwrap().is_none(),
        "a writer beside a mutex"
    );
    mutex.release().await.unwrap();
    let writing = rw.write(TTL).await.unwrap();
    let beside = redlock.try_lock(name.as_str(), TTL).await.unwrap();
    assert!(beside.is_none(), "a mutex beside a writer");
    writing.release().await.unwrap();
    // The last reader's mark went with it: the name is free for anyone.
    let mutex = redlock.try_lock(name.as_str(), TTL).await.unwrap();
    mutex
        .expect("free after every holder left")
        .release()
        .await
        .unwrap();
    for node in &cluster.nodes {
        let left: i64 = (redis::cmd("EXISTS").arg(&name))
            .query(&mut node.conn())
            .unwrap();
        assert_eq!(left, 0, "the lock key stays on {}", node.port());
    }
}

/// Readers queued behind a writer enter together when it leaves, long before their polls:
/// the writer's release wakes the first waiting client, and each reader that enters on its
/// turn hands the turn on to the next one listed. Three readers, each its own client that
/// polls only every 10 s, wait behind a writer; once it releases, all three hold at once
/// within 3 s.
///
/// On the code before this change the first reader was woken and the others waited for
/// their polls: "2 of 3 readers still waiting 3 s after the writer left".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_queued_behind_a_writer_enter_together_when_it_leaves() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let resource = unique("readers-together");
    let slow = |urls: &[String]| {
        builder(urls)
            .restart_quarantine(false)
            .retry_delay(Duration::from_secs(10))
            .max_retry_delay(Duration::from_secs(10))
            .build()
            .unwrap()
    };
    let writer = slow(&urls)
        .rwlock(&resource)
        .unwrap()
        .write(TTL)
        .await
        .unwrap();
    let entered = Arc::new(AtomicUsize::new(0));
    let leave = Arc::new(tokio::sync::Semaphore::new(0));
    let mut readers = Vec::new();
    for _ in 0..3 {
        let (redlock, resource) = (slow(&urls), resource.clone());
        let (entered, leave) = (Arc::clone(&entered), Arc::clone(&leave));
        readers.push(tokio::spawn(async move {
            let rwlock = redlock.rwlock(&resource).unwrap();
            let guard = rwlock
                .read(TTL)
                .wait(Duration::from_secs(60))
                .await
                .unwrap();
            entered.fetch_add(1, Ordering::SeqCst);
            let _ = leave.acquire().await.unwrap();
            guard.release().await.unwrap();
        }));
    }
    let waiters = format!("quorum-lock:waiters:{resource}");
    common::eventually(Duration::from_secs(10), "three readers listed", || {
        cluster.nodes.iter().any(|node| {
            let len: usize = redis::cmd("LLEN")
                .arg(&waiters)
                .query(&mut node.conn())
                .unwrap();
            len == 3
        })
    })
    .await;
    writer.release().await.unwrap();
    let left = tokio::time::Instant::now();
    while entered.load(Ordering::SeqCst) < 3 && left.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let n = entered.load(Ordering::SeqCst);
    assert_eq!(
        n,
        3,
        "{} of 3 readers still waiting 3 s after the writer left",
        3 - n
    );
    println!(
        "three readers in within {:?} of the writer's release",
        left.elapsed()
    );
    leave.add_permits(3);
    for reader in readers {
        reader.await.unwrap();
    }
    no_key_left(&cluster).await;
}
