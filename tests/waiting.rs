//! Long critical sections and waiting: auto-extension, the lost-lock signal, scoped runs,
//! wake-ups on release, and several resources at once.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::proxy::{FaultProxy, Link};
use common::{Cluster, RedisServer, eventually, unique};
use quorum_lock::{AutoExtend, Error, LockGuard, LostReason, Redlock, RedlockBuilder};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const NODE_TIMEOUT: Duration = Duration::from_millis(200);

fn client(urls: &[String]) -> Redlock {
    polling(urls, Duration::from_millis(5), Duration::from_millis(50))
}

/// A client whose retries start `first` apart and grow to at most `at_most`.
fn polling(urls: &[String], first: Duration, at_most: Duration) -> Redlock {
    polling_builder(urls, first, at_most).build().unwrap()
}

fn polling_builder(urls: &[String], first: Duration, at_most: Duration) -> RedlockBuilder {
    Redlock::builder()
        // Quarantine off: these tests count every vote (quarantine has its own tests).
        .restart_quarantine(false)
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(first)
        .max_retry_delay(at_most)
}

/// [`client`] (or, `slow`, [`slow_poller`]) with the scripts on every server, for the exact
/// command counts below: on servers with native commands (Valkey) the plain release would
/// be `DELIFEQ` instead (`tests/native.rs` counts those).
fn scripted(urls: &[String], slow: bool) -> Redlock {
    scripted_with(urls, slow, false)
}

/// [`scripted`] with restart quarantine on or off.
fn scripted_with(urls: &[String], slow: bool, quarantine: bool) -> Redlock {
    let (first, at_most) = match slow {
        true => (Duration::from_secs(10), Duration::from_secs(10)),
        false => (Duration::from_millis(5), Duration::from_millis(50)),
    };
    (polling_builder(urls, first, at_most))
        .restart_quarantine(quarantine)
        .native_commands(false)
        .build()
        .unwrap()
}

/// A client that polls only every 10 s: only a wake-up makes it fast.
fn slow_poller(urls: &[String]) -> Redlock {
    polling(urls, Duration::from_secs(10), Duration::from_secs(10))
}

/// A lock held by someone else on every node, for a minute.
fn foreign_lock(cluster: &Cluster, resource: &str) {
    for node in &cluster.nodes {
        let _: () = redis::cmd("SET")
            .arg(resource)
            .arg("someone-else")
            .arg("PX")
            .arg(60_000)
            .query(&mut node.conn())
            .unwrap();
    }
}

fn value(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

fn evalsha_calls(server: &RedisServer) -> u64 {
    command_calls(server, "evalsha")
}

/// How often `server` ran `command`, scripts' calls included (`INFO commandstats`).
fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    let prefix = format!("cmdstat_{command}:");
    info.lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_extension_keeps_ownership_for_three_ttls() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster.urls());
    let rival = client(&cluster.urls());
    let resource = unique("long");
    let ttl = Duration::from_secs(1);
    let guard = holder
        .lock(&resource, ttl)
        .auto_extend(AutoExtend::new())
        .await
        .unwrap();
    let signal = guard.lost_signal();
    let start = Instant::now();
    let mut checks = 0;
    while start.elapsed() < ttl * 3 {
        assert!(
            rival.try_lock(&resource, ttl).await.unwrap().is_none(),
            "the rival got the lock after {:?}",
            start.elapsed()
        );
        assert!(!signal.is_lost());
        checks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(checks > 10);
    assert!(guard.validity() > Duration::ZERO);
    guard.release().await.unwrap();
    assert_eq!(signal.lost().await, LostReason::Released);
    assert!(rival.try_lock(&resource, ttl).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_majority_fires_the_signal_and_cancels_the_scoped_run() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("paused-majority");
    let cancelled_late = Arc::new(AtomicBool::new(false));
    let deadline_at_pause = Arc::new(std::sync::Mutex::new(None));
    let nodes = Arc::new(cluster);

    let work = {
        let nodes = Arc::clone(&nodes);
        let late = Arc::clone(&cancelled_late);
        let deadline_at_pause = Arc::clone(&deadline_at_pause);
        move |ctx: quorum_lock::LockContext| async move {
            // Let one extension happen, then cut off a majority.
            tokio::time::sleep(Duration::from_millis(900)).await;
            let nodes2 = Arc::clone(&nodes);
            tokio::task::spawn_blocking(move || {
                nodes2.nodes[0].pause();
                nodes2.nodes[1].pause();
            })
            .await
            .unwrap();
            // No extension can succeed from here on: this is the last deadline.
            *deadline_at_pause.lock().unwrap() = Some(Instant::now() + ctx.validity());
            tokio::time::sleep(Duration::from_secs(30)).await;
            late.store(true, Ordering::SeqCst);
        }
    };
    let result = redlock
        .lock(&resource, Duration::from_millis(1500))
        .run(work)
        .await;
    let fired = Instant::now();
    nodes.nodes[0].resume();
    nodes.nodes[1].resume();
    let err = result.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Lost {
                reason: LostReason::Expired
            }
        ),
        "{err:?}"
    );
    assert!(
        !cancelled_late.load(Ordering::SeqCst),
        "the closure was cancelled"
    );
    let deadline = deadline_at_pause
        .lock()
        .unwrap()
        .expect("the closure paused the nodes");
    assert!(
        fired <= deadline,
        "the signal fired {:?} after the validity deadline",
        fired - deadline
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_budget_is_honoured() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("budget");
    let ttl = Duration::from_millis(900);
    let guard = redlock
        .lock(&resource, ttl)
        .auto_extend(AutoExtend::new().max_extensions(2))
        .await
        .unwrap();
    let signal = guard.lost_signal();
    // Count extensions as upward jumps of the key's remaining TTL on one node that has it.
    let node = cluster
        .nodes
        .iter()
        .find(|n| pttl(n, &resource) > 0)
        .unwrap();
    let mut last = pttl(node, &resource);
    let mut jumps = 0;
    let start = std::time::Instant::now();
    loop {
        let now = pttl(node, &resource);
        if now < 0 {
            break; // expired
        }
        if now > last + 50 {
            jumps += 1;
        }
        last = now;
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "lock never expired"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(jumps, 2, "exactly the budgeted number of extensions");
    assert_eq!(signal.lost().await, LostReason::Expired);
    assert!(!guard.is_valid());
    drop(guard);

    // A hold-time budget: the lock ends at most `max_hold` after acquisition.
    let guard = redlock
        .lock(&resource, ttl)
        .auto_extend(AutoExtend::new().max_hold(Duration::from_millis(1500)))
        .await
        .unwrap();
    let acquired = Instant::now();
    assert_eq!(guard.lost_signal().lost().await, LostReason::Expired);
    // `acquired` is read after the acquisition, so these bounds are on the safe side.
    let held = guard.deadline() - acquired;
    assert!(held >= ttl, "it was extended at least once: held {held:?}");
    assert!(
        held <= Duration::from_millis(1500),
        "never beyond max_hold: held {held:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_guard_stops_the_extender() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("stop-extender");
    let ttl = Duration::from_millis(600);
    let guard = redlock
        .lock(&resource, ttl)
        .auto_extend(AutoExtend::new())
        .await
        .unwrap();
    let signal = guard.lost_signal();
    // Wait for at least one extension to be sure the extender runs: by script (its
    // `PEXPIRE`) or, on a node with `SET IFEQ`, natively (a second `SET` after the
    // acquisition's).
    let extensions = |node: &RedisServer| {
        command_calls(node, "pexpire") + command_calls(node, "set").saturating_sub(1)
    };
    eventually(Duration::from_secs(5), "one extension", || {
        extensions(&cluster.nodes[0]) >= 1
    })
    .await;
    drop(guard);
    assert_eq!(signal.lost().await, LostReason::Released);
    eventually(Duration::from_secs(5), "dropped guard released", || {
        cluster.keys_everywhere(&resource).is_empty()
    })
    .await;
    // Two TTLs without any further extension on the node: nothing extends any more.
    let baseline = extensions(&cluster.nodes[0]);
    let quiet_until = Instant::now() + ttl * 2;
    while Instant::now() < quiet_until {
        assert_eq!(
            extensions(&cluster.nodes[0]),
            baseline,
            "an extension ran after drop"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiter_long_before_its_poll() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster.urls());
    // Polls only every 10 s: only a notification can make it fast.
    let waiter = slow_poller(&cluster.urls());
    let resource = unique("wake");
    let ttl = Duration::from_secs(30);
    let guard = holder.lock(&resource, ttl).await.unwrap();
    let task = {
        let resource = resource.clone();
        tokio::spawn(async move {
            let guard = waiter
                .lock(&resource, ttl)
                .wait(Duration::from_secs(60))
                .await
                .unwrap();
            (Instant::now(), guard)
        })
    };
    // The waiter is queued once its entry exists, on exactly one node (the first where its
    // subscription stands): one list, one wake-up per release.
    let list = format!("quorum-lock:waiters:{resource}");
    eventually(Duration::from_secs(10), "waiter queued", || {
        cluster
            .nodes
            .iter()
            .filter(|n| {
                redis::cmd("LLEN")
                    .arg(&list)
                    .query::<i64>(&mut n.conn())
                    .unwrap()
                    > 0
            })
            .count()
            == 1
    })
    .await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let (acquired, guard) = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("woken")
        .unwrap();
    let gap = acquired - released;
    assert!(gap < Duration::from_secs(5), "hand-off took {gap:?}");
    guard.release().await.unwrap();
    // Nothing of the waiting list is left once the waiter got the lock.
    eventually(Duration::from_secs(5), "waiting lists emptied", || {
        cluster.keys_everywhere(&list).is_empty()
    })
    .await;
}

/// The waiting list of `resource` on every node, as (node index, ids in order).
fn waiting_lists(cluster: &Cluster, resource: &str) -> Vec<(usize, Vec<String>)> {
    cluster
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (i, waiting_list(n, resource)))
        .filter(|(_, ids)| !ids.is_empty())
        .collect()
}

/// The client ids in the waiting list of `resource` on one node (each entry is the id,
/// `@`, then when it was listed).
fn waiting_list(node: &RedisServer, resource: &str) -> Vec<String> {
    let entries: Vec<String> = redis::cmd("LRANGE")
        .arg(format!("quorum-lock:waiters:{resource}"))
        .arg(0)
        .arg(-1)
        .query(&mut node.conn())
        .unwrap();
    (entries.into_iter())
        .map(|entry| match entry.split_once('@') {
            Some((id, _)) => id.to_owned(),
            None => panic!("an entry without its listing time: {entry:?}"),
        })
        .collect()
}

/// A task that waits up to a minute for `resource` (TTL 30 s) through `redlock`.
fn waiter(redlock: Redlock, resource: &str) -> JoinHandle<quorum_lock::Result<LockGuard>> {
    waiter_for(redlock, resource, Duration::from_secs(60))
}

/// A task that waits up to `wait` for `resource` (TTL 30 s) through `redlock`.
fn waiter_for(
    redlock: Redlock,
    resource: &str,
    wait: Duration,
) -> JoinHandle<quorum_lock::Result<LockGuard>> {
    let resource = resource.to_owned();
    tokio::spawn(async move {
        redlock
            .lock(&resource, Duration::from_secs(30))
            .wait(wait)
            .await
    })
}

/// The guard a [`waiter`] task acquired (within 30 s), or a panic saying `what` failed.
async fn acquired(task: JoinHandle<quorum_lock::Result<LockGuard>>, what: &str) -> LockGuard {
    match tokio::time::timeout(Duration::from_secs(30), task).await {
        Ok(Ok(Ok(guard))) => guard,
        Ok(Ok(Err(e))) => panic!("{what}: {e}"),
        Ok(Err(e)) => panic!("{what}: task failed: {e}"),
        Err(_) => panic!("{what}: not within 30 s"),
    }
}

/// Deletes `resource` on every node but `keep`, announcing nothing.
fn free_all_but(cluster: &Cluster, resource: &str, keep: usize) {
    for (i, node) in cluster.nodes.iter().enumerate() {
        if i != keep {
            let _: () = redis::cmd("DEL")
                .arg(resource)
                .query(&mut node.conn())
                .unwrap();
        }
    }
}

/// A waiter that polls every 10-20 ms, queued behind a foreign lock on every node: its
/// task and the node whose waiting list holds it.
async fn queued_poller(
    cluster: &Cluster,
    resource: &str,
) -> (JoinHandle<quorum_lock::Result<LockGuard>>, usize) {
    foreign_lock(cluster, resource);
    let redlock = polling(
        &cluster.urls(),
        Duration::from_millis(10),
        Duration::from_millis(20),
    );
    let task = waiter(redlock, resource);
    queued(cluster, resource, 1, "waiter queued").await;
    (task, waiting_lists(cluster, resource)[0].0)
}

/// Waits until no node keeps a waiting list for `resource`.
async fn lists_emptied(cluster: &Cluster, resource: &str, what: &str) {
    eventually(Duration::from_secs(5), what, || {
        waiting_lists(cluster, resource).is_empty()
    })
    .await;
}

/// Waits until the one waiting list of `resource` holds `n` ids.
async fn queued(cluster: &Cluster, resource: &str, n: usize, what: &str) {
    eventually(Duration::from_secs(10), what, || {
        waiting_lists(cluster, resource)
            .first()
            .is_some_and(|(_, ids)| ids.len() == n)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_that_is_overtaken_keeps_its_place() {
    let cluster = Cluster::start(3);
    let resource = unique("front");
    // A foreign holder on every node, for the whole test.
    foreign_lock(&cluster, &resource);
    // Two waiters that poll only every 10 s: A queues first, then B.
    let a = waiter(slow_poller(&cluster.urls()), &resource);
    queued(&cluster, &resource, 1, "A queued").await;
    let b = waiter(slow_poller(&cluster.urls()), &resource);
    queued(&cluster, &resource, 2, "B queued behind A").await;
    let lists = waiting_lists(&cluster, &resource);
    assert_eq!(lists.len(), 1, "one waiting list: {lists:?}");
    let (wake_node, order) = lists[0].clone();
    let (id_a, id_b) = (order[0].clone(), order[1].clone());

    // A release as the release script does it (pop the head, tell it), except that the key
    // is taken again at once: A is woken, tries, and finds the lock held.
    let mut conn = cluster.nodes[wake_node].conn();
    let list = format!("quorum-lock:waiters:{resource}");
    let popped: String = redis::cmd("LPOP").arg(&list).query(&mut conn).unwrap();
    assert_eq!(
        popped.split_once('@').map(|(id, _)| id),
        Some(id_a.as_str())
    );
    let told: i64 = redis::cmd("PUBLISH")
        .arg(format!("quorum-lock:wake:{id_a}"))
        .arg(format!("some-token:{resource}"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(told, 1, "A listens");

    // A rejoins at the head, not behind B who waited less.
    queued(&cluster, &resource, 2, "A back in the list").await;
    assert_eq!(
        waiting_lists(&cluster, &resource),
        vec![(wake_node, vec![id_a, id_b])]
    );
    a.abort();
    b.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_wins_before_the_list_node_answers_leaves_the_list() {
    let cluster = Cluster::start(3);
    let resource = unique("unanswered");
    // A waiter that polls every 10-20 ms (40-80 ms once queued), queued on one node.
    let (task, wake_node) = queued_poller(&cluster, &resource).await;
    // The foreign lock goes away everywhere but on the list node, which then stops
    // answering: the waiter's next poll finds the gate silent (open), wins on the two
    // other nodes, and returns while its acquire script on the list node is still queued.
    free_all_but(&cluster, &resource, wake_node);
    cluster.nodes[wake_node].pause();
    let guard = acquired(task, "won through the other nodes").await;
    // Resumed, the list node runs the script, which finds the foreign key and lists the
    // waiter again: that answer (or its absence) makes the client leave the list there.
    cluster.nodes[wake_node].resume();
    lists_emptied(
        &cluster,
        &resource,
        "entry removed once the list node answered",
    )
    .await;
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_wins_through_the_other_nodes_leaves_the_list() {
    let cluster = Cluster::start(3);
    let resource = unique("stale");
    foreign_lock(&cluster, &resource);
    let redlock = slow_poller(&cluster.urls());
    let task = waiter(redlock, &resource);
    eventually(Duration::from_secs(10), "waiter queued", || {
        waiting_lists(&cluster, &resource).len() == 1
    })
    .await;
    let (wake_node, ids) = waiting_lists(&cluster, &resource)[0].clone();
    // The foreign lock goes away everywhere but on the waiting-list node, and the waiter
    // is woken as a release wakes it (the waking script pops it from the list, then
    // publishes): it wins on the other two nodes while its plain `SET` on the list node is
    // refused, and nothing may list it there again.
    free_all_but(&cluster, &resource, wake_node);
    let _: Option<String> = redis::cmd("LPOP")
        .arg(format!("quorum-lock:waiters:{resource}"))
        .query(&mut cluster.nodes[wake_node].conn())
        .unwrap();
    let _: i64 = redis::cmd("PUBLISH")
        .arg(format!("quorum-lock:wake:{}", ids[0]))
        .arg(format!("some-token:{resource}"))
        .query(&mut cluster.nodes[wake_node].conn())
        .unwrap();
    let guard = acquired(task, "woken").await;
    // It holds the lock and no longer waits: its entry must not swallow the next wake-up.
    lists_emptied(&cluster, &resource, "entry removed").await;
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_only_the_list_that_holds_it() {
    let cluster = Cluster::start(3);
    let resource = unique("giveup");
    foreign_lock(&cluster, &resource);
    // `LREM` runs only in the leave script here (no attempt succeeds).
    let calls = |cluster: &Cluster| {
        cluster
            .nodes
            .iter()
            .map(|n| command_calls(n, "lrem"))
            .collect::<Vec<_>>()
    };
    let before = calls(&cluster);
    let redlock = slow_poller(&cluster.urls());
    let task = waiter_for(redlock, &resource, Duration::from_secs(2));
    eventually(Duration::from_secs(10), "waiter queued", || {
        waiting_lists(&cluster, &resource).len() == 1
    })
    .await;
    let wake_node = waiting_lists(&cluster, &resource)[0].0;
    let outcome = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the wait is bounded")
        .expect("task");
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    lists_emptied(&cluster, &resource, "the waiter left its list").await;
    // Only the list node held the waiter: only there does it leave (one `LREM`).
    let after = calls(&cluster);
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let left = a - b;
        let expected = u64::from(i == wake_node);
        assert_eq!(
            left, expected,
            "LREM on node {i} (list on node {wake_node})"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_wins_only_the_list_node_stays_listed() {
    let cluster = Cluster::start(3);
    let resource = unique("split");
    // Held by someone else on nodes 1 and 2 only: the waiter's attempts set the key on
    // node 0, its waiting-list node, where the acquire script takes it off the list, and
    // fail on the whole.
    for node in &cluster.nodes[1..] {
        let _: () = redis::cmd("SET")
            .arg(&resource)
            .arg("someone-else")
            .arg("PX")
            .arg(60_000)
            .query(&mut node.conn())
            .unwrap();
    }
    let redlock = slow_poller(&cluster.urls());
    let task = waiter(redlock, &resource);
    // The clean-up of the failed attempt puts it back: a release must be able to wake it.
    eventually(Duration::from_secs(10), "waiter listed on node 0", || {
        waiting_list(&cluster.nodes[0], &resource).len() == 1
    })
    .await;
    assert!(!task.is_finished());
    assert_eq!(waiting_lists(&cluster, &resource).len(), 1);
    // And nothing of its failed attempt is left on node 0.
    assert!(cluster.nodes[0].keys(&resource).is_empty());
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_waiter_respects_the_turn_of_the_woken_client() {
    let cluster = Cluster::start(3);
    let resource = unique("turn");
    let (task, wake_node) = queued_poller(&cluster, &resource).await;
    // A release gave another client the turn (as the release script records it), and the
    // lock is free everywhere: the waiter's polls must leave it to that client.
    let turn = format!("quorum-lock:turn:{resource}");
    let _: () = redis::cmd("SET")
        .arg(&turn)
        .arg("another-client")
        .arg("PX")
        .arg(60_000)
        .query(&mut cluster.nodes[wake_node].conn())
        .unwrap();
    for node in &cluster.nodes {
        let _: () = redis::cmd("DEL")
            .arg(&resource)
            .query(&mut node.conn())
            .unwrap();
    }
    let asked = evalsha_calls(&cluster.nodes[wake_node]);
    eventually(Duration::from_secs(10), "five more polls", || {
        evalsha_calls(&cluster.nodes[wake_node]) >= asked + 5
    })
    .await;
    assert!(
        !task.is_finished(),
        "the waiter took the lock during another's turn"
    );
    for node in &cluster.nodes {
        assert!(node.keys(&resource).is_empty());
    }
    assert_eq!(waiting_lists(&cluster, &resource).len(), 1, "still queued");
    // The turn ends (the woken client took the lock or its turn expired): the next poll wins.
    let _: () = redis::cmd("DEL")
        .arg(&turn)
        .query(&mut cluster.nodes[wake_node].conn())
        .unwrap();
    let guard = acquired(task, "acquired").await;
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_passes_the_turn_on_or_ends_it() {
    let cluster = Cluster::start(3);
    let resource = unique("turn-pass");
    let turn = format!("quorum-lock:turn:{resource}");
    let turn_on = |node: &RedisServer| -> Option<String> {
        redis::cmd("GET")
            .arg(&turn)
            .query(&mut node.conn())
            .unwrap()
    };
    // The turn a release gives lasts two of the releasing client's node timeouts: long
    // enough here to be read after the woken client acquired.
    let holder = Redlock::builder()
        .restart_quarantine(false)
        .nodes(cluster.urls())
        .node_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let guard = holder
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    // A waiter queues (its client subscribes on every node, so node 0 keeps the list).
    let task = waiter(slow_poller(&cluster.urls()), &resource);
    queued(&cluster, &resource, 1, "waiter queued").await;
    let (wake_node, ids) = waiting_lists(&cluster, &resource)[0].clone();
    // The release wakes it and gives it the turn, which lasts through its hold.
    guard.release().await.unwrap();
    let second = acquired(task, "woken").await;
    assert_eq!(turn_on(&cluster.nodes[wake_node]), Some(ids[0].clone()));
    // Its release wakes nobody: the turn ends with it.
    second.release().await.unwrap();
    eventually(Duration::from_secs(5), "turn ended", || {
        turn_on(&cluster.nodes[wake_node]).is_none()
    })
    .await;
}

/// Every command `node` ran since its last `CONFIG RESETSTAT`, scripts' calls included,
/// as `(command, calls)` sorted by name; the test's own `INFO` and `CONFIG` are left out, and
/// so is `CLIENT` (the driver's `CLIENT SETINFO` on each of this test's own connections:
/// Redis 7.4 counts it as `client|setinfo`, 6.2 as `client`; 7.0 does not count it).
fn commands(node: &RedisServer) -> Vec<(String, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut node.conn())
        .unwrap();
    let mut counts: Vec<(String, u64)> = info
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            let calls = rest.split(',').next()?.parse().ok()?;
            Some((name.to_owned(), calls))
        })
        .filter(|(name, _)| {
            !["info", "config", "client", "keys"]
                .iter()
                .any(|c| name.starts_with(c))
        })
        .collect();
    counts.sort();
    counts
}

fn reset_stats(cluster: &Cluster) {
    for node in &cluster.nodes {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut node.conn())
            .unwrap();
    }
}

/// `(command, calls)` pairs as [`commands`] lists them.
fn counts(pairs: &[(&str, u64)]) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = pairs.iter().map(|(c, n)| ((*c).to_owned(), *n)).collect();
    v.sort();
    v
}

/// Waits until every node ran exactly the commands `want` lists for it (rounds finish in
/// the background), then asserts it: a missing or extra call fails with both lists.
async fn assert_commands(cluster: &Cluster, want: &[Vec<(String, u64)>], what: &str) {
    let seen = || cluster.nodes.iter().map(commands).collect::<Vec<_>>();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen() != want && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen(), want, "{what}");
}

/// Locks a fresh resource and waits until its key is on every node before returning the
/// guard: the acquisition returns at a majority, and a `SET` still unsent when the release
/// closes the send gate is rightly never sent (one command less on that node). (Looking
/// with `KEYS`, which [`commands`] leaves out.)
async fn locked_everywhere(cluster: &Cluster, redlock: &Redlock, ttl: Duration) -> LockGuard {
    let resource = unique("cycle");
    let guard = redlock.lock(&resource, ttl).await.unwrap();
    eventually(Duration::from_secs(5), "the key on every node", || {
        (cluster.nodes.iter()).all(|n| !n.keys(&resource).is_empty())
    })
    .await;
    guard
}

/// The cluster's URLs with node 0 reached through a proxy that delays its replies by
/// `delay` (the proxy, kept alive by the caller, and the URLs).
fn first_node_delayed(cluster: &Cluster, delay: Duration) -> (FaultProxy, Vec<String>) {
    let ([proxy], urls) = cluster.proxied([0]);
    proxy.set_delay(delay);
    (proxy, urls)
}

/// `redlock` with its fast path warm (the first cycle writes the node markers, a later one
/// reads them back): cycles until one acquires by plain `SET NX PX`, with no acquire
/// script, on every node. (The cluster's command counts are reset.)
async fn warmed(cluster: &Cluster, redlock: Redlock) -> Redlock {
    for _ in 0..20 {
        reset_stats(cluster);
        let guard = redlock
            .lock(unique("warm-up"), Duration::from_secs(30))
            .await
            .unwrap();
        guard.release().await.unwrap();
        // The release script alone: no acquire script.
        let plain =
            (cluster.nodes.iter()).all(|n| commands(n).contains(&("evalsha".to_owned(), 1)));
        if plain {
            return redlock;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the fast path never became warm");
}

/// Waits until every node has a subscriber on some wake-up channel, and then until the
/// nodes' command counts stay still for 300 ms: a call that starts listening makes one
/// more attempt at once (it may have missed a release while it subscribed), which lands
/// after the subscription shows and must not fall among the counts that follow.
async fn subscribed_everywhere(cluster: &Cluster) {
    eventually(Duration::from_secs(10), "subscribed on every node", || {
        cluster.nodes.iter().all(|n| {
            let channels: Vec<String> = redis::cmd("PUBSUB")
                .arg("CHANNELS")
                .arg("quorum-lock:wake:*")
                .query(&mut n.conn())
                .unwrap();
            !channels.is_empty()
        })
    })
    .await;
    let seen = || cluster.nodes.iter().map(commands).collect::<Vec<_>>();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut before = seen();
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = seen();
        if now == before || Instant::now() > deadline {
            return;
        }
        before = now;
    }
}

/// Exact commands of an uncontended lock + release on each of three nodes, scripts' calls
/// included: only the node that keeps the waiting lists (node 0) does the release's
/// wake-up work (the list's `LPOP`; the turn goes in the key's `DEL`); the others get the
/// plain compare-and-delete. Before, every node popped its (empty) list and deleted its
/// turn: two more calls per node and cycle; later the list node still deleted the turn in
/// a `DEL` of its own. A client that has waited before (its subscriptions
/// stand) pays the same for a lock nobody else wants: before, every such lock sent the
/// acquire script to the list node and listed the client there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_does_the_wake_up_work_on_the_list_node_only() {
    let cluster = Cluster::start(3);
    let ttl = Duration::from_secs(30);
    let plain_release = [("evalsha", 1), ("get", 1), ("del", 1)];

    // A client that never waited: plain `SET NX PX` everywhere; it knows no list node and
    // wakes on the first node, where clients configured alike list.
    let redlock = warmed(&cluster, scripted(&cluster.urls(), false)).await;
    reset_stats(&cluster);
    let guard = locked_everywhere(&cluster, &redlock, ttl).await;
    guard.release().await.unwrap();
    let others = counts(&[
        ("set", 1),
        plain_release[0],
        plain_release[1],
        plain_release[2],
    ]);
    let list_node = counts(&[
        ("set", 1),
        ("evalsha", 1),
        ("get", 1),
        // The key and the turn, in one `DEL` (before: one each).
        ("del", 1),
        ("lpop", 1),
    ]);
    let want = vec![list_node, others.clone(), others.clone()];
    assert_commands(&cluster, &want, "never waited").await;

    // The same client once it waited (its subscriptions stand, node 0 first): still plain
    // `SET NX PX` everywhere, the first attempt in no waiting list.
    foreign_lock(&cluster, "held");
    let refused = redlock
        .lock("held", ttl)
        .wait(Duration::from_millis(300))
        .await;
    assert!(matches!(refused, Err(Error::Timeout { .. })), "{refused:?}");
    subscribed_everywhere(&cluster).await;
    lists_emptied(&cluster, "held", "the waiter left the list").await;
    reset_stats(&cluster);
    let guard = locked_everywhere(&cluster, &redlock, ttl).await;
    guard.release().await.unwrap();
    assert_commands(&cluster, &want, "listening").await;
}

/// Exact commands of a hand-off between two clients on three nodes: the release wakes
/// the listed waiter on the list node only, and the woken client, whom the release took
/// off the list, acquires with a plain `SET NX PX` there too (before: the acquire script,
/// six calls instead of one, and two wake-up calls more on each other node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_between_clients_costs_the_plain_commands_and_one_wake_up() {
    let cluster = Cluster::start(3);
    let resource = unique("hand-off");
    let holder = warmed(&cluster, scripted(&cluster.urls(), false)).await;
    let guard = holder
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    // A waiter that polls only every 10 s (no poll among the counts), warmed too, queued
    // on node 0. It reaches node 0 through a proxy that delays replies by 20 ms, so the
    // wake-up (a message on its subscription there) comes well after the holder's release
    // reached nodes 1 and 2: on loopback alone its `SET` sometimes got there first, was
    // refused on both, and a second attempt changed the counts (2 of 40 runs).
    let (_proxy, urls) = first_node_delayed(&cluster, Duration::from_millis(20));
    let waiting = warmed(&cluster, scripted(&urls, true)).await;
    let task = waiter(waiting, &resource);
    queued(&cluster, &resource, 1, "waiter queued").await;
    assert_eq!(waiting_lists(&cluster, &resource)[0].0, 0);
    subscribed_everywhere(&cluster).await;
    reset_stats(&cluster);

    guard.release().await.unwrap();
    let second = acquired(task, "woken").await;
    let list_node = counts(&[
        // The release: compare-and-delete, pop the waiter, tell it, give it the turn.
        ("evalsha", 1),
        ("get", 1),
        ("del", 1),
        ("lpop", 1),
        ("publish", 1),
        // The turn, and the woken client's `SET NX PX`.
        ("set", 2),
    ]);
    let others = counts(&[("evalsha", 1), ("get", 1), ("del", 1), ("set", 1)]);
    let want = vec![list_node, others.clone(), others];
    assert_commands(&cluster, &want, "hand-off").await;
    assert!(waiting_lists(&cluster, &resource).is_empty());

    // Its release wakes nobody and ends its turn, on the list node only. (The woken
    // client's `SET` may have reached node 1 or 2 before the first release did, and been
    // refused there while the other two made its majority: no key to delete there then.)
    let held: Vec<bool> = (cluster.nodes.iter())
        .map(|n| !n.keys(&resource).is_empty())
        .collect();
    assert!(
        held[0],
        "the list node woke the waiter after deleting the key"
    );
    reset_stats(&cluster);
    second.release().await.unwrap();
    let list_node = counts(&[("evalsha", 1), ("get", 1), ("del", 1), ("lpop", 1)]);
    let other = |held: bool| match held {
        true => counts(&[("evalsha", 1), ("get", 1), ("del", 1)]),
        false => counts(&[("evalsha", 1), ("get", 1)]),
    };
    let want = vec![list_node, other(held[1]), other(held[2])];
    assert_commands(&cluster, &want, "last release").await;
}

/// Exact commands of the release of an uncontended two-key lock: on the node that keeps the
/// waiting lists, per key, the compare (`GET`), the pop of its empty list and one `DEL` of
/// the key and its turn together; elsewhere the compare and the key's `DEL`. Before, the
/// list node deleted each turn in a `DEL` of its own: four `DEL`s there instead of two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_key_release_that_wakes_nobody_deletes_each_key_and_its_turn_together() {
    let cluster = Cluster::start(3);
    let redlock = warmed(&cluster, scripted(&cluster.urls(), false)).await;
    let (a, b) = (unique("pair-a"), unique("pair-b"));
    let guard = redlock
        .lock_many([&a, &b], Duration::from_secs(30))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "both keys on every node", || {
        (cluster.nodes.iter()).all(|n| !n.keys(&a).is_empty() && !n.keys(&b).is_empty())
    })
    .await;
    reset_stats(&cluster);
    guard.release().await.unwrap();
    let list_node = counts(&[("evalsha", 1), ("get", 2), ("lpop", 2), ("del", 2)]);
    let others = counts(&[("evalsha", 1), ("get", 2), ("del", 2)]);
    let want = vec![list_node, others.clone(), others];
    assert_commands(&cluster, &want, "two-key release").await;
    assert!(cluster.keys_everywhere("*pair-*").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_left_on_the_list_node_does_not_keep_polls_out() {
    let cluster = Cluster::start(3);
    let resource = unique("gate-open");
    let (task, wake_node) = queued_poller(&cluster, &resource).await;
    // The other nodes free the key, nobody announces it, and the waiting-list node keeps
    // its copy for a minute: the waiter's polls must still win the majority.
    free_all_but(&cluster, &resource, wake_node);
    let guard = acquired(task, "acquired through the other nodes").await;
    assert_eq!(guard.report().count(&quorum_lock::NodeOutcome::Acquired), 2);
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_wake_node_changed_leaves_the_old_list() {
    let cluster = Cluster::start(3);
    let resource = unique("moved");
    foreign_lock(&cluster, &resource);
    // Node 0 does not answer at first: the waiter's subscription there is not up, so it
    // queues on node 1, the first node where it listens.
    cluster.nodes[0].pause();
    let redlock = polling(
        &cluster.urls(),
        Duration::from_millis(20),
        Duration::from_millis(50),
    );
    let task = waiter(redlock, &resource);
    eventually(Duration::from_secs(10), "waiter queued on node 1", || {
        waiting_list(&cluster.nodes[1], &resource).len() == 1
    })
    .await;
    let id = waiting_list(&cluster.nodes[1], &resource)[0].clone();
    // Node 0 comes back and the waiter's subscription there stands: node 0 becomes its
    // wake node, the one whose list its later attempts use.
    cluster.nodes[0].resume();
    let channel = format!("quorum-lock:wake:{id}");
    eventually(Duration::from_secs(20), "subscribed on node 0", || {
        let counts: Vec<redis::Value> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut cluster.nodes[0].conn())
            .unwrap();
        counts.get(1) == Some(&redis::Value::Int(1))
    })
    .await;
    eventually(Duration::from_secs(10), "waiter queued on node 0", || {
        waiting_list(&cluster.nodes[0], &resource) == [id.clone()]
    })
    .await;
    // The lock is freed without a release (no wake-up): the waiter's poll wins everywhere.
    for node in &cluster.nodes {
        let _: () = redis::cmd("DEL")
            .arg(&resource)
            .query(&mut node.conn())
            .unwrap();
    }
    let guard = acquired(task, "acquired").await;
    // Node 1 still listed it: that entry must go too, or a release there wakes nobody.
    lists_emptied(&cluster, &resource, "every entry removed").await;
    guard.release().await.unwrap();
}

/// A client waiting for two keys is in both keys' lists; a release of one of them takes it
/// off that list only. Woken, it acquires by the acquire script (not a plain `SET`), which
/// takes it off the other list too: an entry left there would swallow a later release's
/// wake-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_for_several_keys_leaves_every_list() {
    let cluster = Cluster::start(3);
    let (a, b) = (unique("several-a"), unique("several-b"));
    let holder = warmed(&cluster, scripted(&cluster.urls(), false)).await;
    let guard = holder.lock(&a, Duration::from_secs(30)).await.unwrap();
    let waiting = warmed(&cluster, scripted(&cluster.urls(), true)).await;
    let task = {
        let (a, b) = (a.clone(), b.clone());
        tokio::spawn(async move {
            waiting
                .lock_many([a, b], Duration::from_secs(30))
                .wait(Duration::from_secs(60))
                .await
        })
    };
    queued(&cluster, &a, 1, "waiter queued for a").await;
    assert_eq!(waiting_lists(&cluster, &b).len(), 1, "and for b");
    guard.release().await.unwrap();
    let both = acquired(task, "woken").await;
    lists_emptied(&cluster, &a, "a's list emptied").await;
    lists_emptied(&cluster, &b, "b's list emptied").await;
    both.release().await.unwrap();
}

/// A waiter listed on node 1 (its subscription to node 0 was not up) moves to node 0's
/// list as soon as that subscription stands: releases wake on one node only, the first
/// for clients configured alike, and would never pop its old list. It polls only every
/// 30-60 s, so only its move and a wake-up make it fast (before the move, it stayed on
/// node 1 until its next poll).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_moves_to_the_list_that_releases_pop() {
    let cluster = Cluster::start(3);
    let resource = unique("move-list");
    let holder = client(&cluster.urls());
    let guard = holder
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    cluster.nodes[0].pause();
    let minute = Duration::from_secs(60);
    let task = waiter_for(polling(&cluster.urls(), minute, minute), &resource, minute);
    eventually(Duration::from_secs(10), "waiter queued on node 1", || {
        waiting_list(&cluster.nodes[1], &resource).len() == 1
    })
    .await;
    let id = waiting_list(&cluster.nodes[1], &resource)[0].clone();
    cluster.nodes[0].resume();
    eventually(Duration::from_secs(8), "waiter queued on node 0", || {
        waiting_list(&cluster.nodes[0], &resource) == [id.clone()]
    })
    .await;
    // The holder never waited: its release wakes on node 0.
    let released = Instant::now();
    guard.release().await.unwrap();
    let second = acquired(task, "woken").await;
    let gap = released.elapsed();
    assert!(gap < Duration::from_secs(5), "woken after {gap:?}");
    second.release().await.unwrap();
}

/// Takes a lock of a fresh name (from `prefix`) with `take` until its keys, `keys_of(name)`,
/// are all on every node: a majority is enough to hold, and a node whose `SET` timed out
/// under load never gets its copy; such a try is dropped (released in the background) and
/// another name taken, at most 10 times. Returns the name and the holder's guard.
async fn held_on_every_node<G, Taken>(
    cluster: &Cluster,
    prefix: &str,
    keys_of: impl Fn(&str) -> Vec<String>,
    mut take: impl FnMut(String) -> Taken,
) -> (String, G)
where
    Taken: std::future::Future<Output = G>,
{
    for _ in 0..10 {
        let resource = unique(prefix);
        let held = take(resource.clone()).await;
        let keys = keys_of(&resource);
        let everywhere = || {
            (cluster.nodes.iter()).all(|node| {
                let exists = redis::cmd("EXISTS").arg(&keys).clone();
                exists.query::<usize>(&mut node.conn()).unwrap() == keys.len()
            })
        };
        // A grant may still land after its majority answered: give it two seconds.
        let start = Instant::now();
        let mut on_every_node = everywhere();
        while !on_every_node && start.elapsed() < Duration::from_secs(2) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            on_every_node = everywhere();
        }
        if on_every_node {
            return (resource, held);
        }
    }
    panic!("no lock of {prefix} on every node in 10 tries");
}

/// Queues on node 0 a waiter for `resource` that polls only every minute, deletes `lost`
/// there (the holder's copy, on every node: see [`held_on_every_node`]), runs `release`,
/// and checks that the waiter is woken within 5 s and leaves the list (once node 0 applied
/// its acquisition): only the wake-up makes it fast.
async fn woken_where_the_copy_is_missing(
    cluster: &Cluster,
    resource: &str,
    lost: &[String],
    release: impl std::future::Future<Output = ()>,
) {
    let minute = Duration::from_secs(60);
    let task = waiter_for(polling(&cluster.urls(), minute, minute), resource, minute);
    eventually(Duration::from_secs(10), "waiter queued on node 0", || {
        waiting_list(&cluster.nodes[0], resource).len() == 1
    })
    .await;
    let deleted: usize = redis::cmd("DEL")
        .arg(lost)
        .query(&mut cluster.nodes[0].conn())
        .unwrap();
    assert_eq!(deleted, lost.len());
    let released = Instant::now();
    release.await;
    let second = acquired(task, "woken").await;
    let gap = released.elapsed();
    assert!(gap < Duration::from_secs(5), "woken after {gap:?}");
    // Its acquisition may be granted by the other two nodes before node 0 applies it.
    eventually(
        Duration::from_secs(5),
        "the waiter out of node 0's list",
        || waiting_list(&cluster.nodes[0], resource).is_empty(),
    )
    .await;
    second.release().await.unwrap();
}

/// A lock granted by a majority without its key on the waiting-list node (it expired
/// there, or the `SET` there landed after another client's) still wakes the waiter listed
/// there when it is released: the lock is free there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiter_listed_where_its_key_is_missing() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster.urls());
    let lock = |resource: String| {
        let holder = &holder;
        async move {
            let request = holder.lock(&resource, Duration::from_secs(30));
            request.await.unwrap()
        }
    };
    let (resource, guard) =
        held_on_every_node(&cluster, "missing-key", |r| vec![r.to_owned()], lock).await;
    let release = async { drop(guard.release().await.unwrap()) };
    woken_where_the_copy_is_missing(
        &cluster,
        &resource,
        std::slice::from_ref(&resource),
        release,
    )
    .await;
}

/// The same for a reader: its release wakes the waiter listed on a node that lost its
/// entry (and the readers' mark), since no live reader is left there. The waiter is the
/// mutex of the read-write lock's name, which waits for its readers.
#[tokio::test]
async fn a_readers_release_wakes_the_waiter_listed_where_its_entry_is_missing() {
    let cluster = Cluster::start(3);
    let holder = client(&cluster.urls());
    let read = |resource: String| {
        let holder = &holder;
        async move {
            let rwlock = holder.rwlock(&resource).unwrap();
            rwlock.read(Duration::from_secs(30)).await.unwrap()
        }
    };
    let keys_of = |r: &str| vec![format!("quorum-lock:readers:{r}"), r.to_owned()];
    let (resource, reading) = held_on_every_node(&cluster, "missing-reader", keys_of, read).await;
    let lost = keys_of(&resource);
    let release = async { drop(reading.release().await.unwrap()) };
    woken_where_the_copy_is_missing(&cluster, &resource, &lost, release).await;
}

/// A woken waiter may try before the release that woke it (on the waiting-list node)
/// reached the other nodes: its messages there are late, within the node timeout. The
/// waiter keeps retrying, at growing intervals, for a node timeout after its wake-up, and
/// gets the lock once they arrive, and leaves no entry in the waiting list; it polls only
/// every minute, and nobody else releases.
///
/// The holder's node timeout (5 s) outlasts the partition, so its release is still waiting
/// for nodes 1 and 2 when their link heals; the waiter's (1 s) leaves its retries ample
/// room past the 100 ms the late messages are held after node 0 released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_outruns_the_release_and_still_acquires() {
    let cluster = Cluster::start(3);
    let (late, urls) = cluster.proxied([1, 2]);
    let resource = unique("outrun");
    let with_timeout = |urls: &[String], node_timeout: Duration, poll: Duration| {
        polling_builder(urls, poll, poll)
            .node_timeout(node_timeout)
            .build()
            .unwrap()
    };
    let holder = with_timeout(&urls, Duration::from_secs(5), Duration::from_millis(5));
    let guard = holder
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    // A majority was enough to hold; the scenario needs the lock's copy on every node, and
    // the holder's 5 s node timeout lets a late one land.
    let token = (cluster.nodes.iter()).find_map(|node| value(node, &resource));
    eventually(Duration::from_secs(5), "the lock on every node", || {
        (cluster.nodes.iter()).all(|node| value(node, &resource) == token)
    })
    .await;
    let minute = Duration::from_secs(60);
    let waiting = with_timeout(&cluster.urls(), Duration::from_secs(1), minute);
    let task = waiter_for(waiting, &resource, minute);
    eventually(Duration::from_secs(10), "waiter queued on node 0", || {
        waiting_list(&cluster.nodes[0], &resource).len() == 1
    })
    .await;
    // The release reaches node 0 (which wakes the waiter) at once, the others late.
    late.iter().for_each(|p| p.set_link(Link::Blackhole));
    let release = tokio::spawn(async move { guard.release().await });
    eventually(Duration::from_secs(5), "released on node 0", || {
        value(&cluster.nodes[0], &resource) != value(&cluster.nodes[1], &resource)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    late.iter().for_each(|p| p.set_link(Link::Up));
    release.await.unwrap().unwrap();
    let second = acquired(task, "woken").await;
    // The failed attempt's clean-up put the waiter back at the head of node 0's list; the
    // retry that won took it off again (a plain `SET` there would have left it listed).
    eventually(
        Duration::from_secs(5),
        "the waiter out of node 0's list",
        || waiting_list(&cluster.nodes[0], &resource).is_empty(),
    )
    .await;
    second.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_notification_the_poll_still_acquires() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("expiry");
    // The holder never releases: its key expires, which announces nothing.
    let holder = redlock
        .lock(&resource, Duration::from_millis(800))
        .await
        .unwrap();
    std::mem::forget(holder);
    let waiter = Redlock::builder()
        // Quarantine off: these tests count every vote (quarantine has its own tests).
        .restart_quarantine(false)
        .nodes(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_millis(200))
        .max_retry_delay(Duration::from_millis(300))
        .build()
        .unwrap();
    let guard = waiter
        .lock(&resource, Duration::from_secs(5))
        .wait(Duration::from_secs(30))
        .await
        .unwrap();
    guard.release().await.unwrap();

    // Notifications off on both sides: polling alone.
    let quiet = Redlock::builder()
        // Quarantine off: these tests count every vote (quarantine has its own tests).
        .restart_quarantine(false)
        .nodes(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .notifications(false)
        .build()
        .unwrap();
    let held = quiet.lock(&resource, Duration::from_secs(5)).await.unwrap();
    let task = {
        let quiet = quiet.clone();
        let resource = resource.clone();
        tokio::spawn(async move { quiet.lock(&resource, Duration::from_secs(5)).await })
    };
    held.release().await.unwrap();
    task.await.unwrap().unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contended_tasks_all_get_turns_and_the_count_is_exact() {
    const TASKS: usize = 8;
    const ROUNDS: usize = 25;
    let cluster = Cluster::start(5);
    let redlock = client(&cluster.urls());
    let resource = unique("turns");
    let inside = Arc::new(AtomicUsize::new(0));
    let total = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let redlock = redlock.clone();
        let resource = resource.clone();
        let inside = Arc::clone(&inside);
        let total = Arc::clone(&total);
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = redlock
                    .lock(&resource, Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .await
                    .unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                total.fetch_add(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(total.load(Ordering::SeqCst), TASKS * ROUNDS);
}

#[tokio::test]
async fn scoped_run_returns_output_and_releases_on_error_and_panic() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("scoped");
    let ttl = Duration::from_secs(5);

    let out = redlock
        .run(&resource, ttl, |ctx| async move {
            assert!(ctx.validity() > Duration::ZERO);
            assert!(!ctx.lost_signal().is_lost());
            assert_eq!(quorum_lock::HolderInfo::parse(ctx.token()).token.len(), 32);
            7 * 6
        })
        .await
        .unwrap();
    assert_eq!(out, 42);
    eventually(Duration::from_secs(5), "released after the run", || {
        cluster.keys_everywhere(&resource).is_empty()
    })
    .await;

    let out: Result<(), &str> = redlock
        .run(&resource, ttl, |_| async { Err("failed inside") })
        .await
        .unwrap();
    assert_eq!(out, Err("failed inside"));
    eventually(Duration::from_secs(5), "released after an error", || {
        cluster.keys_everywhere(&resource).is_empty()
    })
    .await;

    let panicking = {
        let redlock = redlock.clone();
        let resource = resource.clone();
        tokio::spawn(async move {
            redlock
                .run(&resource, ttl, |_| async {
                    panic!("boom");
                })
                .await
        })
    };
    let err = panicking.await.unwrap_err();
    assert!(err.is_panic());
    eventually(Duration::from_secs(5), "released after a panic", || {
        cluster.keys_everywhere(&resource).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_resources_at_once() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let p = unique("many");
    let (a, b, c, d) = (
        format!("{p}:a"),
        format!("{p}:b"),
        format!("{p}:c"),
        format!("{p}:d"),
    );
    let ttl = Duration::from_secs(10);
    let ab = redlock.lock_many([&b, &a], ttl).await.unwrap();
    assert_eq!(ab.resources(), [a.clone(), b.clone()]);
    // Overlapping sets exclude each other, disjoint ones do not.
    let err = redlock
        .lock_many([&b, &c], ttl)
        .max_attempts(1)
        .await
        .unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    assert!(redlock.try_lock(&a, ttl).await.unwrap().is_none());
    let cd = redlock.lock_many([&c, &d], ttl).await.unwrap();
    // One guard covers the set: extend and release act on every key.
    ab.extend(ttl).await.unwrap();
    ab.release().await.unwrap();
    cd.release().await.unwrap();
    eventually(Duration::from_secs(5), "all keys released", || {
        cluster.keys_everywhere(&format!("{p}:*")).is_empty()
    })
    .await;

    // A partial failure leaves nothing: a foreign `b` on two of three nodes.
    for node in &cluster.nodes[..2] {
        let _: () = redis::cmd("SET")
            .arg(&b)
            .arg("foreign")
            .query(&mut node.conn())
            .unwrap();
    }
    let err = redlock
        .lock_many([&a, &b], ttl)
        .max_attempts(3)
        .await
        .unwrap_err();
    assert!(err.is_contended(), "{err:?}");
    eventually(Duration::from_secs(5), "no partial keys", || {
        cluster.keys_everywhere(&format!("{p}:*")).len() == 2
    })
    .await;
    assert!(
        cluster
            .keys_everywhere(&format!("{p}:*"))
            .iter()
            .all(|(_, k)| *k == b),
        "only the foreign keys remain"
    );
    for node in &cluster.nodes[..2] {
        let _: () = redis::cmd("DEL").arg(&b).query(&mut node.conn()).unwrap();
    }

    // [a, b] against [b, a] from many tasks: no deadlock, always exclusive.
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let redlock = redlock.clone();
        let names = if i % 2 == 0 {
            [a.clone(), b.clone()]
        } else {
            [b.clone(), a.clone()]
        };
        let inside = Arc::clone(&inside);
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let g = redlock
                    .lock_many(names.clone(), ttl)
                    .wait(Duration::from_secs(60))
                    .await
                    .unwrap();
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("no deadlock")
            .unwrap();
    }
}

/// A client that never waited does not wait for the waiting-list node's answer to its
/// release: with that node (the first) silent, the release returns once the majority
/// confirmed, long before the node timeout. Wake-ups on, the default. (It waited for the
/// first node on every release, 5 ms a cycle behind a 5 ms proxy: bench scenario 3a.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_does_not_wait_for_a_silent_list_node() {
    let cluster = Cluster::start(3);
    let port = |n: &RedisServer| std::net::SocketAddr::from(([127, 0, 0, 1], n.port()));
    let proxy = FaultProxy::start(port(&cluster.nodes[0]));
    let mut urls = cluster.urls();
    urls[0] = proxy.url();
    let node_timeout = Duration::from_secs(5);
    let client = Redlock::builder()
        .nodes(&urls)
        .restart_quarantine(false)
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    let resource = unique("silent-list-node");
    client
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    proxy.set_link(Link::Blackhole);
    let guard = client
        .lock(&resource, Duration::from_secs(30))
        .await
        .unwrap();
    let began = Instant::now();
    guard.release().await.expect("released on a majority");
    let took = began.elapsed();
    assert!(took < node_timeout / 2, "the release took {took:?}");
    proxy.set_link(Link::Up);
}

/// Whether `done` holds within a second (a release returns at a majority; the healthy
/// nodes' counts wait for the rest of its round).
async fn within_a_second(done: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(1);
    while !done() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    done()
}

/// A node that never answers (behind a proxy that blackholes it, so this client never
/// learns its identity) must not keep the plain `SET NX PX` fast path off for the others:
/// its answer could not vote anyway, so the nodes this client saw admitted get the plain
/// `SET` and only the silent node the acquire script. Before, every node got the script
/// on every lock while one node was unknown (bench scenario 3b: 1.2x the p50 of five
/// healthy nodes). With quarantine on (the markers written by an earlier client while every
/// node was up) and off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_does_not_keep_the_fast_path_off() {
    let cluster = Cluster::start(3);
    let upstream = format!("127.0.0.1:{}", cluster.nodes[2].port());
    let proxy = FaultProxy::start(upstream.parse().unwrap());
    let mut urls = cluster.urls();
    urls[2] = proxy.url();
    // Every node marked, as on an ensemble that has served locks.
    let first = scripted_with(&urls, false, true);
    drop(warmed(&cluster, first).await);
    proxy.set_link(Link::Blackhole);
    let healthy = &cluster.nodes[..2];
    for quarantine in [true, false] {
        let redlock = scripted_with(&urls, false, quarantine);
        // The release wakes waiters on node 0 (the first node), the plain
        // compare-and-delete elsewhere.
        let want = [
            counts(&[
                ("set", 1),
                ("evalsha", 1),
                ("get", 1),
                ("lpop", 1),
                ("del", 1),
            ]),
            counts(&[("set", 1), ("evalsha", 1), ("get", 1), ("del", 1)]),
        ];
        let plain = || healthy.iter().map(commands).collect::<Vec<_>>() == want;
        let mut warm = false;
        for _ in 0..20 {
            reset_stats(&cluster);
            let resource = unique("silent-third");
            let guard = redlock
                .lock(&resource, Duration::from_secs(30))
                .await
                .unwrap();
            eventually(
                Duration::from_secs(5),
                "the key on both healthy nodes",
                || healthy.iter().all(|n| !n.keys(&resource).is_empty()),
            )
            .await;
            guard.release().await.unwrap();
            if within_a_second(plain).await {
                warm = true;
                break;
            }
        }
        let seen: Vec<_> = healthy.iter().map(commands).collect();
        assert!(
            warm,
            "quarantine {quarantine}: the healthy nodes never got the plain SET: {seen:?}"
        );
    }
    proxy.set_link(Link::Up);
}

/// A node that always answers after the majority (here 20 ms behind a proxy, the others on
/// loopback) must not keep the plain `SET NX PX` fast path off for the whole ensemble: its
/// late answers to the acquire script raise its record and are read in the background, so
/// after a few cycles every node gets the plain `SET` (the two healthy nodes count one
/// `SET` and the release's compare-and-delete a cycle, no acquire script). With quarantine
/// on (the default) and off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_node_does_not_keep_the_fast_path_off() {
    let cluster = Cluster::start(3);
    let (_proxy, urls) = first_node_delayed(&cluster, Duration::from_millis(20));
    for quarantine in [true, false] {
        let redlock = scripted_with(&urls, false, quarantine);
        let mut plain = false;
        for _ in 0..50 {
            reset_stats(&cluster);
            let guard = locked_everywhere(&cluster, &redlock, Duration::from_secs(30)).await;
            guard.release().await.unwrap();
            let others = counts(&[("set", 1), ("evalsha", 1), ("get", 1), ("del", 1)]);
            let healthy = || (cluster.nodes[1..].iter()).all(|n| commands(n) == others);
            if within_a_second(healthy).await {
                plain = true;
                break;
            }
        }
        assert!(
            plain,
            "quarantine {quarantine}: the fast path never became warm"
        );
    }
}
