//! The blocking API against real `redis-server` processes (three nodes), from plain
//! threads: lock, try_lock and release; a counter incremented under the lock by several
//! threads; a dropped guard that returns at once and frees the lock; auto-extension
//! across a long synchronous section and a loss seen from inside one; the refusal inside
//! an async runtime; the read-write lock and the semaphore; shutdown.

mod common;

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::proxy::FaultProxy;
use common::{Cluster, unique, wait_until};
use quorum_lock::blocking::{self, Redlock};
use quorum_lock::{Error, LostReason, redis};

/// Long enough that no lock of these tests expires while it is meant to be held.
const TTL: Duration = Duration::from_secs(10);

/// One cluster for every case of this file: each case locks names of its own.
fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        Cluster::stop_at_exit(&CLUSTER);
        Cluster::start(3)
    })
}

/// A blocking client of `urls` with the tests' shared settings (restart quarantine off,
/// a generous node timeout, short retry delays).
fn client_of(urls: &[String]) -> Redlock {
    let settings = common::builder(urls)
        .retry_delay(Duration::from_millis(2))
        .max_retry_delay(Duration::from_millis(20));
    blocking::RedlockBuilder::from(settings).build().unwrap()
}

fn client() -> Redlock {
    client_of(&cluster().urls())
}

/// A client that may fence (and so elect): fencing needs restart quarantine on these
/// nodes, which run without `appendfsync always`. On nodes of its own (`fresh`): the
/// other cases' clients run with restart quarantine off.
fn fencing_client(fresh: &Cluster) -> Redlock {
    let settings = common::builder(&fresh.urls())
        .retry_delay(Duration::from_millis(2))
        .max_retry_delay(Duration::from_millis(20));
    blocking::RedlockBuilder::from(settings)
        .restart_quarantine(true)
        .build()
        .unwrap()
}

#[test]
fn lock_try_lock_and_release_on_three_nodes() {
    let (a, b) = (client(), client());
    assert_eq!(a.quorum(), 2);
    let name = unique("blocking-basic");
    let guard = a.lock(&name, TTL).acquire().unwrap();
    assert_eq!(guard.resource(), name);
    assert!(guard.is_valid() && !guard.is_lost());
    assert!(b.try_lock(&name, TTL).unwrap().is_none());
    assert!(a.try_lock(&name, TTL).unwrap().is_none());

    let mut guard = guard;
    let validity = guard.extend(TTL).unwrap();
    assert!(validity > TTL / 2, "validity after extend: {validity:?}");
    // It returns once the outcome is certain: a majority released.
    let report = guard.release().unwrap();
    assert!(
        report.count(&quorum_lock::NodeOutcome::Released) >= 2,
        "{report:?}"
    );

    let again = b.try_lock(&name, TTL).unwrap().expect("free after release");
    assert!(a.try_lock(&name, TTL).unwrap().is_none());
    again.release().unwrap();
}

#[test]
fn threads_increment_a_counter_under_the_lock() {
    const THREADS: u64 = 4;
    const EACH: u64 = 25;
    let redlock = client();
    let name = unique("blocking-counter");
    let data_key = unique("blocking-counter-value");
    let workers: Vec<_> = (0..THREADS)
        .map(|_| {
            let (redlock, name, data_key) = (redlock.clone(), name.clone(), data_key.clone());
            std::thread::spawn(move || {
                let mut data = cluster().nodes[0].conn();
                for _ in 0..EACH {
                    let guard = redlock.lock(&name, TTL).acquire().unwrap();
                    // A read-modify-write that loses increments without the lock.
                    let seen: Option<u64> =
                        redis::cmd("GET").arg(&data_key).query(&mut data).unwrap();
                    let next = seen.unwrap_or(0) + 1;
                    let () = redis::cmd("SET")
                        .arg(&data_key)
                        .arg(next)
                        .query(&mut data)
                        .unwrap();
                    guard.release().unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let total: u64 = redis::cmd("GET")
        .arg(&data_key)
        .query(&mut cluster().nodes[0].conn())
        .unwrap();
    assert_eq!(total, THREADS * EACH);
}

#[test]
fn a_dropped_guard_returns_at_once_and_frees_the_lock() {
    const DELAY: Duration = Duration::from_millis(300);
    let addr = |i: usize| std::net::SocketAddr::from(([127, 0, 0, 1], cluster().nodes[i].port()));
    let proxies: Vec<FaultProxy> = (0..3).map(|i| FaultProxy::start(addr(i))).collect();
    let urls: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let (holder, other) = (client_of(&urls), client());
    let name = unique("blocking-drop");
    let guard = holder.lock(&name, TTL).acquire().unwrap();
    // Every reply now comes DELAY late: a release waited for on this thread would take it.
    proxies.iter().for_each(|p| p.set_delay(DELAY));

    let dropped = Instant::now();
    drop(guard);
    let took = dropped.elapsed();
    assert!(took < DELAY / 3, "dropping the guard took {took:?}");

    wait_until(Duration::from_secs(5), "the other client acquires", || {
        other
            .try_lock(&name, TTL)
            .unwrap()
            .is_some_and(|g| g.release().is_ok())
    });
    holder.shutdown().unwrap();
}

#[test]
fn auto_extension_holds_the_lock_across_a_long_synchronous_section() {
    const SHORT: Duration = Duration::from_secs(1);
    let (a, b) = (client(), client());
    let name = unique("blocking-run");
    let ran = a.run(&name, SHORT, |ctx| {
        for _ in 0..2 {
            std::thread::sleep(SHORT * 3 / 2);
            assert!(ctx.is_held(), "lost: {:?}", ctx.lost_reason());
            assert!(b.try_lock(&name, SHORT).unwrap().is_none(), "taken over");
        }
        assert_eq!(ctx.wait_lost(Duration::from_millis(10)), None);
        42
    });
    assert_eq!(ran.unwrap(), 42);
    let after = b
        .try_lock(&name, SHORT)
        .unwrap()
        .expect("released after the run");
    after.release().unwrap();
}

#[test]
fn a_lock_lost_while_the_closure_runs_is_reported() {
    const SHORT: Duration = Duration::from_secs(1);
    let redlock = client();
    let name = unique("blocking-lost");
    let key = redlock.key(&name);
    let ran = redlock.run(&name, SHORT, |ctx| {
        for node in &cluster().nodes {
            let () = redis::cmd("DEL").arg(&key).query(&mut node.conn()).unwrap();
        }
        // The next extension finds the key gone on every node.
        let reason = ctx.wait_lost(Duration::from_secs(5));
        assert_eq!(reason, Some(LostReason::NotHeld));
        assert!(!ctx.is_held());
        "output dropped"
    });
    match ran {
        Err(Error::Lost { reason }) => assert_eq!(reason, LostReason::NotHeld),
        other => panic!("expected Error::Lost, got {other:?}"),
    }
}

#[tokio::test]
async fn inside_an_async_runtime_every_call_is_refused() {
    let urls = cluster().urls();
    let built = blocking::Redlock::builder().nodes(&urls).build();
    match built {
        Err(Error::Config(msg)) => assert!(msg.contains("inside an async runtime"), "{msg}"),
        other => panic!("expected Error::Config, got {other:?}"),
    }
    // A client built outside, then called inside: refused too, and dropped without harm.
    let outside = std::thread::spawn(move || client_of(&urls)).join().unwrap();
    let tried = outside.try_lock(unique("blocking-in-runtime"), TTL);
    assert!(matches!(tried, Err(Error::Config(_))), "{tried:?}");
    assert!(matches!(outside.shutdown(), Err(Error::Config(_))));
    drop(outside);
}

#[test]
fn two_readers_at_once_and_a_writer_alone() {
    let (a, b) = (client(), client());
    let name = unique("blocking-rw");
    let (rw_a, rw_b) = (a.rwlock(&name).unwrap(), b.rwlock(&name).unwrap());
    let first = rw_a.read(TTL).acquire().unwrap();
    let second = rw_b.try_read(TTL).unwrap().expect("a second reader");
    assert!(first.is_valid() && second.is_valid());
    assert!(
        rw_b.try_write(TTL).unwrap().is_none(),
        "a writer among readers"
    );
    first.release().unwrap();
    second.release().unwrap();

    let writer = rw_a.write(TTL).acquire().unwrap();
    assert!(
        rw_b.try_read(TTL).unwrap().is_none(),
        "a reader beside the writer"
    );
    assert!(rw_b.try_write(TTL).unwrap().is_none(), "a second writer");
    writer.release().unwrap();
    let reader = rw_b
        .read(TTL)
        .wait(Duration::from_secs(5))
        .acquire()
        .unwrap();
    reader.release().unwrap();
}

#[test]
fn semaphore_permits_count_exactly() {
    const PERMITS: u32 = 3;
    let (a, b) = (client(), client());
    let name = unique("blocking-sem");
    let (sem_a, sem_b) = (
        a.semaphore(&name, PERMITS).unwrap(),
        b.semaphore(&name, PERMITS).unwrap(),
    );
    let mut held: Vec<_> = (0..PERMITS)
        .map(|_| sem_a.acquire(TTL).acquire().unwrap())
        .collect();
    let mut slots: Vec<u32> = held.iter().map(|p| p.slot()).collect();
    slots.sort_unstable();
    assert_eq!(slots, vec![0, 1, 2]);
    assert!(
        sem_b.try_acquire(TTL).unwrap().is_none(),
        "a permit beyond the count"
    );
    held.pop().unwrap().release().unwrap();
    let last = sem_b
        .try_acquire(TTL)
        .unwrap()
        .expect("the permit released");
    assert!(sem_b.try_acquire(TTL).unwrap().is_none());
    last.release().unwrap();
    held.into_iter()
        .for_each(|p| p.release().map(drop).unwrap());
}

#[test]
fn fencing_tokens_increase_from_holder_to_holder() {
    let fresh = Cluster::start(3);
    let redlock = fencing_client(&fresh);
    let name = unique("blocking-fenced");
    let first = redlock.lock(&name, TTL).fenced().acquire().unwrap();
    let token = first.fencing_token();
    first.release().unwrap();
    let next = redlock.try_lock_fenced(&name, TTL).unwrap().expect("free");
    assert!(next.fencing_token() > token);
    next.release().unwrap();
    let ran = redlock
        .lock(&name, TTL)
        .fenced()
        .run(|ctx| ctx.fencing_token())
        .unwrap();
    assert!(ran > token);
}

#[test]
fn shutdown_releases_what_is_held_and_stops_the_client() {
    let (a, b) = (client(), client());
    let name = unique("blocking-shutdown");
    let guard = a.lock(&name, TTL).acquire().unwrap();
    let clone = a.clone();
    assert_eq!(a.shutdown().unwrap(), 1);
    assert_eq!(guard.lost_reason(), Some(LostReason::ShutDown));
    assert!(matches!(clone.try_lock(&name, TTL), Err(Error::ShutDown)));
    assert_eq!(a.shutdown().unwrap(), 0);
    let after = b
        .try_lock(&name, TTL)
        .unwrap()
        .expect("released by the shutdown");
    after.release().unwrap();
    drop(guard);
}

/// Two candidates, each through a fencing client of its own, for a new election on nodes
/// of its own (returned: they stop when dropped).
fn two_candidates(prefix: &str) -> (Cluster, blocking::Election, blocking::Election) {
    let fresh = Cluster::start(3);
    let (a, b) = (fencing_client(&fresh), fencing_client(&fresh));
    let name = unique(prefix);
    let elections = (a.election(&name).unwrap(), b.election(&name).unwrap());
    (fresh, elections.0, elections.1)
}

#[test]
fn a_leader_is_elected_and_resigns() {
    let (_fresh, ea, eb) = two_candidates("blocking-election");
    let term = ea.campaign("a", TTL).acquire().unwrap();
    match eb.leader().unwrap() {
        quorum_lock::Leader::Elected(t) => {
            assert_eq!(t.value, "a");
            assert_eq!(t.epoch, term.epoch());
        }
        other => panic!("expected a leader, got {other:?}"),
    }
    let first = term.epoch();
    term.resign().unwrap();
    let next = eb
        .campaign("b", TTL)
        .wait(Duration::from_secs(5))
        .acquire()
        .unwrap();
    assert!(next.epoch() > first);
    next.resign().unwrap();
}

/// Waits (up to 10 s, on the observer's changes) for a view that `wanted` accepts.
fn until_shown(
    observer: &mut blocking::Observer,
    what: &str,
    wanted: impl Fn(&quorum_lock::Leader) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = observer.leader();
    while !wanted(&seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "observer never showed {what}; last: {seen:?}"
        );
        seen = observer.wait_change(left).unwrap().unwrap_or(seen);
    }
}

fn shows_value(leader: &quorum_lock::Leader, value: &str) -> bool {
    matches!(leader, quorum_lock::Leader::Elected(t) if t.value == value)
}

/// A blocking observer follows the term: the leader's value, a proclaimed one, then no
/// leader after the resignation. A term whose keys are gone proclaims nothing.
#[test]
fn observers_follow_a_proclaiming_leader_until_it_resigns() {
    let (fresh, ea, eb) = two_candidates("blocking-observed");
    let mut observer = eb.observe(Duration::from_millis(100)).unwrap();
    let mut term = ea.campaign("a", TTL).acquire().unwrap();
    until_shown(&mut observer, "a", |l| shows_value(l, "a"));
    term.proclaim("a, moved").unwrap();
    assert_eq!(term.value(), "a, moved");
    until_shown(&mut observer, "a, moved", |l| shows_value(l, "a, moved"));
    assert!(shows_value(&eb.leader().unwrap(), "a, moved"));
    term.resign().unwrap();
    until_shown(&mut observer, "no leader", |l| {
        matches!(l, quorum_lock::Leader::Vacant)
    });
    // No stale leader shown after that, over a few more reads.
    let later = observer.wait_change(Duration::from_millis(300)).unwrap();
    assert!(
        matches!(later, None | Some(quorum_lock::Leader::Vacant)),
        "{later:?}"
    );

    let mut taken = ea.campaign("c", TTL).acquire().unwrap();
    for node in &fresh.nodes {
        let _: () = redis::cmd("FLUSHALL").query(&mut node.conn()).unwrap();
    }
    match taken.proclaim("c, moved") {
        Err(Error::NotHeld { .. }) => {}
        other => panic!("a proclaim without the keys was {other:?}"),
    }
    assert_eq!(fresh.keys_everywhere("*"), []);
}

/// A scoped term runs the leader's work on the calling thread with the epoch as its fencing
/// token, while a waiting candidate is listed; once the work is done it resigns, and the
/// waiting candidate leads next with a higher epoch.
#[test]
fn a_scoped_term_runs_the_work_and_resigns() {
    let (_fresh, ea, eb) = two_candidates("blocking-scoped-term");
    let (epoch, next) = ea
        .campaign("a", TTL)
        .run(|ctx| {
            let epoch = ctx.fencing_token();
            match eb.leader().unwrap() {
                quorum_lock::Leader::Elected(t) => {
                    assert_eq!((t.value, t.epoch), ("a".into(), epoch))
                }
                other => panic!("expected a leader, got {other:?}"),
            }
            let campaign = eb.campaign("b", TTL).wait(Duration::from_secs(10));
            let next = std::thread::spawn(move || campaign.acquire());
            wait_until(Duration::from_secs(5), "b among the candidates", || {
                !ea.candidates().unwrap().is_empty()
            });
            let values: Vec<String> = ea
                .candidates()
                .unwrap()
                .into_iter()
                .map(|c| c.value)
                .collect();
            assert_eq!(values, ["b"]);
            assert!(ctx.is_held());
            (epoch, next)
        })
        .unwrap();
    let next = next.join().unwrap().expect("b leads after the scoped term");
    assert!(next.epoch() > epoch);
    next.resign().unwrap();
}

/// A lock detached by one blocking client travels as the ticket's text and is adopted by
/// another, which holds it (the first cannot take it) and releases it.
#[test]
fn a_detached_lock_is_adopted_by_another_client() {
    let (dispatcher, worker) = (client(), client());
    let name = unique("blocking-ticket");
    let text = dispatcher
        .lock(&name, TTL)
        .acquire()
        .unwrap()
        .detach()
        .unwrap()
        .to_text();
    assert!(
        dispatcher.try_lock(&name, TTL).unwrap().is_none(),
        "still held"
    );
    let ticket = quorum_lock::LockTicket::parse(&text).unwrap();
    let adopted = worker.adopt(&ticket).unwrap();
    assert_eq!(adopted.resource(), name);
    assert!(adopted.is_valid());
    assert!(
        dispatcher.try_lock(&name, TTL).unwrap().is_none(),
        "held by the adopter"
    );
    adopted.release().unwrap();
    let err = worker.adopt(&ticket).unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err:?}");
    dispatcher
        .try_lock(&name, TTL)
        .unwrap()
        .expect("free")
        .release()
        .unwrap();
}

/// The example `blocking_quickstart`, a plain `fn main` with no runtime of its own, run as
/// a user runs it against these nodes: every step it prints, and the exact count of its
/// four threads' increments under the lock. `cargo test` builds examples beside the test
/// binaries (`target/<profile>/examples/`).
#[test]
fn the_quickstart_example_runs_in_a_plain_main() {
    let test_binary = std::env::current_exe().unwrap();
    let profile_dir = test_binary.parent().and_then(|deps| deps.parent()).unwrap();
    let example = profile_dir.join("examples").join("blocking_quickstart");
    assert!(
        example.exists(),
        "{} not built: `cargo test --all-features` builds it; a filtered run needs \
         `cargo build --example blocking_quickstart --features blocking` first",
        example.display()
    );
    // Fresh nodes of its own: the example runs with restart quarantine on (the default),
    // beside which the other cases' clients, with it off, leave no node markers.
    let fresh = Cluster::start(3);
    let output = std::process::Command::new(&example)
        .env("QUORUM_LOCK_NODES", fresh.urls().join(","))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    for line in [
        "locked blocking-demo for ",
        "ran 5 steps under the lock",
        "counter: 40",
    ] {
        assert!(stdout.contains(line), "{line:?} in {stdout}");
    }
}

/// Scoped runs of the other kinds: under a read lock (a writer is kept out meanwhile) and
/// under a permit (the count holds meanwhile); each returns the closure's value and
/// releases, so a writer and every permit are free again after.
#[test]
fn scoped_runs_under_a_read_lock_and_a_permit() {
    let (a, b) = (client(), client());
    let name = unique("blocking-scoped-kinds");
    let (rw_a, rw_b) = (a.rwlock(&name).unwrap(), b.rwlock(&name).unwrap());
    let read = rw_a.read(TTL).run(|ctx| {
        assert!(ctx.is_held());
        rw_b.try_write(TTL).unwrap().is_none()
    });
    assert!(read.unwrap(), "the writer was kept out");
    rw_b.try_write(TTL)
        .unwrap()
        .expect("free after the run")
        .release()
        .unwrap();

    let permits = unique("blocking-scoped-permits");
    let (sem_a, sem_b) = (
        a.semaphore(&permits, 1).unwrap(),
        b.semaphore(&permits, 1).unwrap(),
    );
    let under = sem_a
        .acquire(TTL)
        .run(|_| sem_b.try_acquire(TTL).unwrap().is_none());
    assert!(under.unwrap(), "the one permit was held");
    sem_b
        .try_acquire(TTL)
        .unwrap()
        .expect("free after the run")
        .release()
        .unwrap();
}
