//! The counting semaphore against real `redis-server` processes: never more than K
//! holders across clients, exact counts, a minority of nodes down, bad input, and no key
//! left behind.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use common::proxy::Link;
use common::{Cluster, NODE_TIMEOUT, builder, client, unique};
use quorum_lock::{Error, Semaphore};

const TTL: Duration = Duration::from_secs(5);

/// The slot keys of every semaphore, on every node.
fn slot_keys(cluster: &Cluster) -> Vec<(usize, String)> {
    cluster.keys_everywhere("quorum-lock:permit:*")
}

/// The one permit of a semaphore of one permit on `name`, held.
async fn the_only_permit(redlock: &quorum_lock::Redlock, name: &str) -> quorum_lock::Permit {
    redlock
        .semaphore(name, 1)
        .unwrap()
        .acquire(TTL)
        .await
        .unwrap()
}

/// A client that polls only every 30 s: in a test's time only a release's wake-up gets
/// it a permit it waits for, and it sends no command of its own meanwhile.
fn slow_polling(urls: &[String]) -> quorum_lock::Redlock {
    (builder(urls).retry_delay(Duration::from_secs(30)))
        .max_retry_delay(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Waits until one client is listed in semaphore `name`'s waiting list on node 0.
async fn until_one_waits(cluster: &Cluster, name: &str) {
    let list = format!("quorum-lock:waiters:quorum-lock:permit:{name}");
    let mut node0 = cluster.nodes[0].conn();
    common::eventually(Duration::from_secs(5), "the waiter is listed", || {
        redis::cmd("LLEN").arg(&list).query::<u64>(&mut node0) == Ok(1)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_k_holders_across_clients_with_exact_counts() {
    const PERMITS: u32 = 2;
    const WORKERS: usize = 6;
    const ROUNDS: usize = 10;
    let cluster = Cluster::start(3);
    let name = unique("exports");
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let acquired = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        // A client each, as separate processes would have, with restart quarantine on.
        let redlock = (builder(&cluster.urls()).restart_quarantine(true))
            .retry_delay(Duration::from_millis(2))
            .max_retry_delay(Duration::from_millis(20))
            .build()
            .unwrap();
        let semaphore = redlock.semaphore(&name, PERMITS).unwrap();
        let (inside, most, acquired) = (inside.clone(), most.clone(), acquired.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let permit = semaphore.acquire(TTL).wait(Duration::from_secs(30)).await;
                let permit = permit.expect("a permit within the wait budget");
                assert!(permit.slot() < PERMITS);
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                acquired.fetch_add(1, Ordering::SeqCst);
                permit.release().await.expect("released on every node");
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    assert_eq!(acquired.load(Ordering::SeqCst), WORKERS * ROUNDS);
    assert_eq!(
        most.load(Ordering::SeqCst),
        PERMITS,
        "K holders at once, never more"
    );
    assert_eq!(
        slot_keys(&cluster),
        vec![],
        "no slot key left after the releases"
    );
}

#[tokio::test]
async fn a_minority_down_still_grants_every_permit_and_no_more() {
    let mut cluster = Cluster::start(3);
    cluster.nodes[2].kill();
    let semaphore = client(&cluster.urls())
        .semaphore(&unique("jobs"), 2)
        .unwrap();
    let first = semaphore
        .try_acquire(TTL)
        .await
        .unwrap()
        .expect("first permit");
    let second = semaphore
        .try_acquire(TTL)
        .await
        .unwrap()
        .expect("second permit");
    assert_ne!(first.slot(), second.slot());
    assert!(
        semaphore.try_acquire(TTL).await.unwrap().is_none(),
        "both held"
    );
    first.release().await.unwrap();
    let third = semaphore
        .try_acquire(TTL)
        .await
        .unwrap()
        .expect("the freed permit");
    third.release().await.unwrap();
    second.release().await.unwrap();
    assert_eq!(slot_keys(&cluster), vec![]);
}

#[tokio::test]
async fn a_permit_given_back_wakes_a_waiting_task_of_the_same_client() {
    let cluster = Cluster::start(3);
    // Polling alone would take 30 s to try again.
    let redlock = (builder(&cluster.urls()).retry_delay(Duration::from_secs(30)))
        .max_retry_delay(Duration::from_secs(30))
        .build()
        .unwrap();
    let name = unique("handed-on");
    let held = the_only_permit(&redlock, &name).await;
    // Another handle of the same name, as another task would make.
    let semaphore = redlock.semaphore(&name, 1).unwrap();
    let waiter =
        tokio::spawn(async move { semaphore.acquire(TTL).wait(Duration::from_secs(60)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(5), waiter).await;
    let permit = woken
        .expect("woken by the release, not by polling")
        .unwrap();
    permit.unwrap().release().await.unwrap();
}

#[tokio::test]
async fn a_permit_given_back_wakes_a_client_waiting_in_another_process() {
    let cluster = Cluster::start(3);
    // Two clients share nothing but the nodes, as two processes. Polling alone would
    // take at least 15 s to try again: only the release's wake-up is in time.
    let (holder, waiter) = (slow_polling(&cluster.urls()), slow_polling(&cluster.urls()));
    let name = unique("across");
    let held = the_only_permit(&holder, &name).await;
    let semaphore = waiter.semaphore(&name, 1).unwrap();
    let waiting =
        tokio::spawn(async move { semaphore.acquire(TTL).wait(Duration::from_secs(10)).await });
    until_one_waits(&cluster, &name).await;
    held.release().await.unwrap();
    let permit = waiting
        .await
        .unwrap()
        .expect("woken by the release, not by polling");
    assert_eq!(permit.slot(), 0);
    permit.release().await.unwrap();
    // The win took the waiter off the list: nothing is left on any node.
    assert_eq!(cluster.keys_everywhere("quorum-lock:waiters:*"), vec![]);
    assert_eq!(slot_keys(&cluster), vec![]);
}

/// A woken client may pass before the release that woke it (on the waiting-list node)
/// reached the other nodes: its messages there are late, within the node timeout. The
/// client keeps passing, at growing intervals, for a node timeout after its wake-up, and
/// gets the permit once they arrive, though it polls only every 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_client_that_outruns_the_release_still_gets_the_permit() {
    let cluster = Cluster::start(3);
    let (late, urls) = cluster.proxied([1, 2]);
    let (holder, waiter) = (slow_polling(&urls), slow_polling(&cluster.urls()));
    let name = unique("outrun");
    let slot = format!("quorum-lock:permit:{name}:0");
    let mut conns: Vec<_> = cluster.nodes.iter().map(|n| n.conn()).collect();
    let mut value =
        |i: usize| -> Option<String> { redis::cmd("GET").arg(&slot).query(&mut conns[i]).unwrap() };
    // The scenario needs the permit on every node; a majority is enough to hold it, and a
    // slow first connection through a proxy can leave a node out: take it again then.
    let mut everywhere = None;
    for _ in 0..10 {
        let held = the_only_permit(&holder, &name).await;
        let token = (0..3).find_map(&mut value).expect("the holder's token");
        let start = std::time::Instant::now();
        let mut on_every_node = false;
        while !on_every_node && start.elapsed() < NODE_TIMEOUT * 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            on_every_node = (0..3).all(|i| value(i).as_ref() == Some(&token));
        }
        if on_every_node {
            everywhere = Some((held, token));
            break;
        }
        let _ = held.release().await;
    }
    let (held, token) = everywhere.expect("the permit on every node in one of 10 tries");
    let semaphore = waiter.semaphore(&name, 1).unwrap();
    let waiting =
        tokio::spawn(async move { semaphore.acquire(TTL).wait(Duration::from_secs(20)).await });
    until_one_waits(&cluster, &name).await;
    // The release reaches node 0 (which wakes the waiter) at once, the others late.
    late.iter().for_each(|p| p.set_link(Link::Blackhole));
    let release = tokio::spawn(held.release());
    let start = std::time::Instant::now();
    while value(0).as_ref() == Some(&token) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not released on node 0 in 10 s (release finished: {}):\n{}",
            release.is_finished(),
            cluster.describe("*")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The late nodes still hold the token: the waiter passes before the release reached them.
    assert_eq!([value(1), value(2)], [Some(token.clone()), Some(token)]);
    tokio::time::sleep(NODE_TIMEOUT / 4).await;
    late.iter().for_each(|p| p.set_link(Link::Up));
    let _ = release.await;
    let in_time = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    let permit = (in_time.expect("not polling: 30 s").unwrap()).expect("retried after the wake-up");
    permit.release().await.unwrap();
}

#[tokio::test]
async fn tasks_of_one_client_get_permits_in_arrival_order() {
    const WAITERS: usize = 5;
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let name = unique("in-order");
    let held = the_only_permit(&redlock, &name).await;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        let (semaphore, tx) = (redlock.semaphore(&name, 1).unwrap(), tx.clone());
        waiters.push(tokio::spawn(async move {
            let permit = semaphore.acquire(TTL).wait(Duration::from_secs(30)).await;
            tx.send(i).unwrap();
            permit.unwrap().release().await.unwrap();
        }));
        // Each waiter queued before the next arrives.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    held.release().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let order: Vec<usize> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "first come, first served"
    );
}

#[tokio::test]
async fn status_shows_who_holds_which_permit() {
    let cluster = Cluster::start(3);
    let semaphore = client(&cluster.urls())
        .semaphore(&unique("shown"), 3)
        .unwrap();
    let permit = semaphore.acquire(TTL).await.unwrap();
    let slots = semaphore.status().await.unwrap();
    let verdicts: Vec<&str> = slots.iter().map(|s| s.verdict.as_str()).collect();
    let mut expected = vec!["free"; 3];
    expected[permit.slot() as usize] = "held";
    assert_eq!(verdicts, expected);
    let held = &slots[permit.slot() as usize];
    let holder = held.holder.as_ref().expect("the holder");
    assert_eq!(
        holder.token,
        quorum_lock::HolderInfo::parse(permit.token()).token
    );
    permit.release().await.unwrap();
    let slots = semaphore.status().await.unwrap();
    assert!(slots.iter().all(|s| s.verdict.as_str() == "free"));
}

/// The slots of a semaphore share its one waiting list: `status` lists the same waiters
/// under every slot, and reads the list once (one `LRANGE` per node, whatever the count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reads_the_shared_waiting_list_once() {
    const PERMITS: u32 = 3;
    let cluster = Cluster::start(3);
    let name = unique("listed-once");
    let redlock = client(&cluster.urls());
    let semaphore = redlock.semaphore(&name, PERMITS).unwrap();
    let mut held = Vec::new();
    for _ in 0..PERMITS {
        held.push(semaphore.acquire(TTL).await.unwrap());
    }
    // No command of its own while `status` reads.
    let waiter = slow_polling(&cluster.urls())
        .semaphore(&name, PERMITS)
        .unwrap();
    let waiting =
        tokio::spawn(async move { waiter.acquire(TTL).wait(Duration::from_secs(20)).await });
    until_one_waits(&cluster, &name).await;
    cluster
        .nodes
        .iter()
        .for_each(|node| node.reset_command_stats());
    let slots = semaphore.status().await.unwrap();
    let lranges: Vec<u64> = (cluster.nodes.iter())
        .map(|node| node.command_calls("lrange"))
        .collect();
    // Node 0 keeps the list, where the waiter's own scripts may still be at work; the
    // other nodes see the status's reads only.
    assert_eq!(lranges[1..], [1, 1]);
    assert!(lranges[0] >= 1);
    assert_eq!(slots.len(), PERMITS as usize);
    for slot in &slots {
        let waiters: Vec<_> = slot.waiters.iter().map(|w| w.client.clone()).collect();
        assert_eq!(waiters, vec![slots[0].waiters[0].client.clone()]);
    }
    held.pop().unwrap().release().await.unwrap();
    let permit = waiting.await.unwrap().unwrap();
    permit.release().await.unwrap();
    for permit in held {
        permit.release().await.unwrap();
    }
    assert_eq!(slot_keys(&cluster), vec![]);
}

#[tokio::test]
async fn a_holder_that_never_releases_frees_its_permit_at_its_ttl() {
    let cluster = Cluster::start(3);
    let name = unique("dead-holder");
    let dead = client(&cluster.urls()).semaphore(&name, 1).unwrap();
    let permit = dead.try_acquire(Duration::from_millis(600)).await.unwrap();
    // The holder dies: no release, no extension.
    std::mem::forget(permit.expect("the permit"));
    let other = client(&cluster.urls()).semaphore(&name, 1).unwrap();
    assert!(
        other.try_acquire(TTL).await.unwrap().is_none(),
        "held until its TTL"
    );
    let permit = other.acquire(TTL).wait(Duration::from_secs(5)).await;
    permit
        .expect("free once the TTL ran out")
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_cancelled_or_timed_out_acquisition_leaves_nothing_behind() {
    let cluster = Cluster::start(3);
    let semaphore = client(&cluster.urls())
        .semaphore(&unique("busy"), 1)
        .unwrap();
    let held = semaphore.acquire(TTL).await.unwrap();
    let waiting = semaphore
        .acquire(TTL)
        .wait(Duration::from_millis(200))
        .await;
    assert!(matches!(waiting, Err(Error::Timeout { .. })), "{waiting:?}");
    let cancelled = tokio::time::timeout(Duration::from_millis(50), semaphore.acquire(TTL));
    assert!(cancelled.await.is_err(), "still waiting when dropped");
    held.release().await.unwrap();
    common::eventually(
        Duration::from_secs(5),
        "no slot key or waiting list left",
        || {
            slot_keys(&cluster).is_empty()
                && cluster.keys_everywhere("quorum-lock:waiters:*").is_empty()
        },
    )
    .await;
}

#[tokio::test]
async fn a_client_with_another_count_is_refused_while_holders_hold() {
    let cluster = Cluster::start(3);
    let name = unique("counts");
    let one = client(&cluster.urls()).semaphore(&name, 1).unwrap();
    let two = client(&cluster.urls()).semaphore(&name, 2).unwrap();
    let held = one.acquire(Duration::from_millis(1500)).await.unwrap();
    let refused = two.try_acquire(TTL).await;
    match refused {
        Err(Error::Config(msg)) => assert!(msg.contains("record 1 permits"), "{msg}"),
        other => panic!("refused for its count, not {other:?}"),
    }
    let waiting = two.acquire(TTL).wait(Duration::from_secs(2)).await;
    assert!(
        matches!(waiting, Err(Error::Config(_))),
        "no wait: {waiting:?}"
    );
    // The holder dies: its count goes with its slot's TTL, then the other count may start.
    std::mem::forget(held);
    let mut started = None;
    for _ in 0..100 {
        match two.try_acquire(TTL).await {
            Ok(Some(permit)) => {
                started = Some(permit);
                break;
            }
            Err(Error::Config(_)) => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("{other:?}"),
        }
    }
    let permit = started.expect("the other count, once the first one's holder expired");
    permit.release().await.unwrap();
}

#[tokio::test]
async fn a_count_recorded_on_a_minority_is_contention_not_a_config_error() {
    let cluster = Cluster::start(3);
    let name = unique("stray");
    let held = client(&cluster.urls()).semaphore(&name, 2).unwrap();
    let held = held.acquire(TTL).await.unwrap();
    // Another count recorded on one node only (the crate's count record key).
    let record_three_permits_on = |i: usize| {
        let mut conn = cluster.nodes[i].conn();
        let count = format!("quorum-lock:permits:{name}");
        let set = redis::cmd("SET")
            .arg(count)
            .arg(3)
            .arg("PX")
            .arg(60_000)
            .clone();
        set.query::<()>(&mut conn).unwrap();
    };
    record_three_permits_on(0);
    let other = client(&cluster.urls()).semaphore(&name, 2).unwrap();
    // The slots are tried from a random one on: the held one first about every other time.
    for _ in 0..16 {
        let permit = other.try_acquire(TTL).await;
        let permit = permit.expect("the other slot, free on every node").unwrap();
        assert_ne!(permit.slot(), held.slot());
        permit.release().await.unwrap();
    }
    // On a majority the count is in use: a configuration error.
    record_three_permits_on(1);
    match other.try_acquire(TTL).await {
        Err(Error::Config(msg)) => assert!(msg.contains("record 3 permits"), "{msg}"),
        refused => panic!("refused for its count, not {refused:?}"),
    }
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_failed_attempt_of_another_count_leaves_no_count_record() {
    let cluster = Cluster::start(3);
    let name = unique("leftover");
    let held = client(&cluster.urls()).semaphore(&name, 2).unwrap();
    let held = held.acquire(TTL).await.unwrap();
    // Node 0 lost the holder's slot and count record: a client of 3 permits takes a slot
    // there alone, and fails on the count the others record.
    let count = format!("quorum-lock:permits:{name}");
    let slot = format!("quorum-lock:permit:{name}:{}", held.slot());
    let mut node0 = cluster.nodes[0].conn();
    // The holder's grant may reach node 0 after its majority answered: lose it after that.
    common::eventually(TTL / 2, "the holder's slot on node 0", || {
        let exists = redis::cmd("EXISTS").arg(&slot).query::<i64>(&mut node0);
        exists.unwrap() == 1
    })
    .await;
    let lose = redis::cmd("DEL").arg(&count).arg(&slot).clone();
    lose.query::<()>(&mut node0).unwrap();
    let three = client(&cluster.urls()).semaphore(&name, 3).unwrap();
    let refused = three.try_acquire(TTL).await;
    assert!(matches!(refused, Err(Error::Config(_))), "{refused:?}");
    common::eventually(TTL / 2, "its count record gone with its slot", || {
        let recorded = redis::cmd("GET")
            .arg(&count)
            .query::<Option<u32>>(&mut node0);
        recorded.unwrap().is_none()
    })
    .await;
    held.release().await.unwrap();
}

#[tokio::test]
async fn bad_input_is_a_config_error() {
    let cluster = Cluster::start(1);
    let redlock = builder(&cluster.urls()).build().unwrap();
    let config = |r: quorum_lock::Result<Semaphore>| match r {
        Err(Error::Config(msg)) => msg,
        other => panic!("a config error, not {other:?}"),
    };
    assert!(config(redlock.semaphore("s", 0)).contains("0 permits"));
    let above = Semaphore::MAX_PERMITS + 1;
    assert!(config(redlock.semaphore("s", above)).contains("use 1 to 1024"));
    assert!(config(redlock.semaphore("", 2)).contains("empty"));
    let semaphore = redlock.semaphore("s", 2).unwrap();
    let zero_ttl = semaphore.acquire(Duration::ZERO).await;
    assert!(matches!(zero_ttl, Err(Error::Config(_))), "{zero_ttl:?}");
    assert_eq!(slot_keys(&cluster), vec![]);
}

/// One name, one lock: a semaphore and a lock (mutex or read-write) of one name never
/// hold at once; the semaphore is refused with a configuration error naming the lock, and
/// the lock waits for the permits' mark to go.
#[tokio::test]
async fn a_semaphore_and_a_lock_of_one_name_exclude_each_other() {
    let cluster = Cluster::start(3);
    let name = unique("one-name");
    let redlock = client(&cluster.urls());
    let semaphore = redlock.semaphore(&name, 2).unwrap();
    let mutex = redlock.lock(name.as_str(), TTL).await.unwrap();
    let refused = semaphore.try_acquire(TTL).await;
    let Err(Error::Config(message)) = refused else {
        panic!("a permit beside the mutex: {refused:?}");
    };
    assert!(message.contains("its name is held as a lock"), "{message}");
    mutex.release().await.unwrap();
    let short = Duration::from_millis(1500);
    let permit = semaphore
        .try_acquire(short)
        .await
        .unwrap()
        .expect("a free permit");
    let beside = redlock.try_lock(name.as_str(), TTL).await.unwrap();
    assert!(beside.is_none(), "a mutex beside a permit");
    let rw = redlock.rwlock(&name).unwrap();
    assert!(
        rw.try_read(TTL).await.unwrap().is_none(),
        "a reader beside a permit"
    );
    assert!(
        rw.try_write(TTL).await.unwrap().is_none(),
        "a writer beside a permit"
    );
    permit.release().await.unwrap();
    // The last permit's release takes the permits' mark with it, in the background.
    let mutex = redlock
        .lock(name.as_str(), TTL)
        .wait(short * 3)
        .await
        .expect("the mutex once the permits' mark expired");
    mutex.release().await.unwrap();
    // A reader's mark refuses the semaphore too.
    let reading = rw.read(TTL).await.unwrap();
    let refused = semaphore.try_acquire(TTL).await;
    assert!(matches!(refused, Err(Error::Config(_))), "{refused:?}");
    reading.release().await.unwrap();
    assert!(semaphore.try_acquire(TTL).await.unwrap().is_some());
}

/// A request's attempt cap (or the client's) ends the wait after that many attempts, one
/// per pass over the slots, however long the wait budget; zero is a configuration error.
#[tokio::test]
async fn a_capped_permit_request_gives_up_after_its_attempts() {
    let cluster = Cluster::start(3);
    let name = unique("capped");
    let holder = client(&cluster.urls());
    let _held = the_only_permit(&holder, &name).await;
    let rival = client(&cluster.urls());
    let semaphore = rival.semaphore(&name, 1).unwrap();
    let long = Duration::from_secs(60);
    let capped = semaphore.acquire(TTL).wait(long).max_attempts(2).await;
    assert!(
        matches!(capped, Err(Error::Timeout { attempts: 2, .. })),
        "{capped:?}"
    );
    let zero = semaphore.acquire(TTL).max_attempts(0).await;
    assert!(matches!(zero, Err(Error::Config(_))), "{zero:?}");
    let capped_client = builder(&cluster.urls())
        .wait(long)
        .max_attempts(1)
        .build()
        .unwrap();
    let semaphore = capped_client.semaphore(&name, 1).unwrap();
    let once = semaphore.acquire(TTL).await;
    assert!(
        matches!(once, Err(Error::Timeout { attempts: 1, .. })),
        "{once:?}"
    );
}

/// `run` holds a permit while the closure runs and gives it back after, leaving no key.
#[tokio::test]
async fn run_holds_a_permit_for_the_closure_and_gives_it_back() {
    let cluster = Cluster::start(3);
    let name = unique("run-permit");
    let redlock = client(&cluster.urls());
    let rival = client(&cluster.urls());
    let semaphore = redlock.semaphore(&name, 1).unwrap();
    let rival_semaphore = rival.semaphore(&name, 1).unwrap();
    let inside = semaphore
        .acquire(TTL)
        .run(|context| async move {
            assert!(context.validity() > Duration::ZERO);
            rival_semaphore.try_acquire(TTL).await.unwrap().is_none()
        })
        .await
        .unwrap();
    assert!(inside, "a rival got the only permit while run held it");
    assert_eq!(slot_keys(&cluster), vec![]);
    let after = rival.semaphore(&name, 1).unwrap().try_acquire(TTL).await;
    assert!(matches!(after, Ok(Some(_))), "{after:?}");
}
