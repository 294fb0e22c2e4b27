//! Leader election against real `redis-server` processes: one leader at a time with
//! epochs that increase, a resignation handed over at once, the leader read from a
//! majority only, proclaimed values, bad input, and no key left behind but the epoch
//! counter.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Cluster, builder, unique};
use quorum_lock::{Error, Leader, Redlock};
use tokio::sync::Mutex;

/// A term: long enough that no test waits it out by accident.
const TTL: Duration = Duration::from_secs(10);

/// A candidate's client: fencing (the epoch) needs restart quarantine on these nodes,
/// which run without `appendfsync always`.
fn client(urls: &[String]) -> Redlock {
    builder(urls)
        .restart_quarantine(true)
        .retry_delay(Duration::from_millis(2))
        .max_retry_delay(Duration::from_millis(20))
        .build()
        .expect("valid configuration")
}

/// The election's keys left on every node, its epoch counter apart (which must outlive
/// every term it numbered).
fn election_keys(cluster: &Cluster, name: &str) -> Vec<(usize, String)> {
    let mut left = cluster.keys_everywhere(&format!("quorum-lock:election:{name}"));
    left.extend(cluster.keys_everywhere(&format!("quorum-lock:term:quorum-lock:election:{name}")));
    left.extend(
        cluster.keys_everywhere(&format!("quorum-lock:waiters:quorum-lock:election:{name}")),
    );
    left
}

/// Waits until no key of the election is left but its epoch counter: a release returns
/// once a majority answered, and finishes on the other nodes in the background.
async fn no_keys_left(cluster: &Cluster, name: &str, when: &str) {
    let what = format!("no key of {name} left {when}");
    common::eventually(Duration::from_secs(5), &what, || {
        election_keys(cluster, name).is_empty()
    })
    .await;
}

/// The leader read, which must be a term.
async fn elected(redlock: &Redlock, name: &str) -> quorum_lock::Term {
    match redlock.election(name).unwrap().leader().await.unwrap() {
        Leader::Elected(term) => term,
        other => panic!("a leader of {name}, not {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_each_term_with_a_higher_epoch() {
    const CANDIDATES: usize = 4;
    const TERMS: usize = 5;
    let cluster = Cluster::start(3);
    let name = unique("scheduler");
    let leading = Arc::new(AtomicUsize::new(0));
    let epochs = Arc::new(Mutex::new(Vec::new()));
    let mut candidates = Vec::new();
    for c in 0..CANDIDATES {
        let redlock = client(&cluster.urls());
        let (name, leading, epochs) = (name.clone(), leading.clone(), epochs.clone());
        candidates.push(tokio::spawn(async move {
            let election = redlock.election(&name).unwrap();
            for t in 0..TERMS {
                let value = format!("candidate-{c}-term-{t}");
                let leadership = election.campaign(value.clone(), TTL).await.unwrap();
                assert_eq!(leading.fetch_add(1, Ordering::SeqCst), 0, "a second leader");
                let term = elected(&redlock, &name).await;
                assert_eq!(
                    (term.value.as_str(), term.epoch),
                    (value.as_str(), leadership.epoch())
                );
                epochs.lock().await.push(leadership.epoch().get());
                leading.fetch_sub(1, Ordering::SeqCst);
                leadership.resign().await.unwrap();
            }
        }));
    }
    for candidate in candidates {
        candidate.await.unwrap();
    }
    let epochs = epochs.lock().await.clone();
    assert_eq!(epochs.len(), CANDIDATES * TERMS);
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "epochs increase term by term: {epochs:?}"
    );
    let redlock = client(&cluster.urls());
    let leader = redlock.election(&name).unwrap().leader().await.unwrap();
    assert_eq!(leader, Leader::Vacant);
    no_keys_left(&cluster, &name, "after the terms").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resignation_hands_the_term_to_the_waiting_candidate_at_once() {
    let cluster = Cluster::start(3);
    let name = unique("handover");
    let (first, second) = (client(&cluster.urls()), client(&cluster.urls()));
    // A term far longer than the handover's bound below: waiting it out would fail.
    let long = Duration::from_secs(50);
    let leading = first
        .election(&name)
        .unwrap()
        .campaign("first", long)
        .await
        .unwrap();
    let election = second.election(&name).unwrap();
    let waiting = tokio::spawn(async move { election.campaign("second", long).await });
    let observer = client(&cluster.urls());
    // The second candidate is listed before the first resigns, so a wake-up reaches it.
    common::eventually(
        Duration::from_secs(10),
        "the second candidate waits",
        || {
            !cluster
                .keys_everywhere(&format!("quorum-lock:waiters:quorum-lock:election:{name}"))
                .is_empty()
        },
    )
    .await;
    let first_epoch = leading.epoch();
    leading.resign().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiting candidate leads long before the resigned term's TTL")
        .unwrap()
        .unwrap();
    assert!(next.epoch() > first_epoch);
    let term = elected(&observer, &name).await;
    assert_eq!((term.value.as_str(), term.epoch), ("second", next.epoch()));
    next.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_is_read_from_a_majority_never_from_one_node() {
    let cluster = Cluster::start(3);
    let name = unique("majority");
    let redlock = client(&cluster.urls());
    let leadership = redlock
        .election(&name)
        .unwrap()
        .campaign("a", TTL)
        .await
        .unwrap();
    // A copy of another term on one node (a minority) does not change the reading.
    let key = format!("quorum-lock:election:{name}");
    let record_key = format!("quorum-lock:term:{key}");
    let stale = "0123456789abcdef0123456789abcdef;q1;t=1";
    let mut node0 = cluster.nodes[0].conn();
    let _: () = redis::pipe()
        .cmd("SET")
        .arg(&key)
        .arg(stale)
        .arg("PX")
        .arg(60_000)
        .cmd("SET")
        .arg(&record_key)
        .arg(format!("{stale}\n999\nimpostor"))
        .arg("PX")
        .arg(60_000)
        .query(&mut node0)
        .unwrap();
    let term = elected(&redlock, &name).await;
    assert_eq!((term.value.as_str(), term.epoch), ("a", leadership.epoch()));
    // With two of three nodes silent, one node's word is not enough.
    cluster.nodes[1].pause();
    cluster.nodes[2].pause();
    let observer = client(&cluster.urls());
    let leader = observer.election(&name).unwrap().leader().await.unwrap();
    cluster.nodes[1].resume();
    cluster.nodes[2].resume();
    assert!(matches!(leader, Leader::Unknown { .. }), "{leader:?}");
    // Once the nodes answer again (the observer reconnects to them first), the term.
    let election = observer.election(&name).unwrap();
    let started = std::time::Instant::now();
    let term = loop {
        match election.leader().await.unwrap() {
            Leader::Elected(term) => break term,
            Leader::Unknown { .. } if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("the leader once the nodes answer, not {other:?}"),
        }
    };
    assert_eq!(term.epoch, leadership.epoch());
    leadership.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_proclaims_while_it_leads_and_not_after() {
    let cluster = Cluster::start(3);
    let name = unique("proclaim");
    let redlock = client(&cluster.urls());
    let election = redlock.election(&name).unwrap();
    let leadership = election.campaign("10.0.0.7:8080", TTL).await.unwrap();
    assert_eq!(leadership.value(), "10.0.0.7:8080");
    leadership.proclaim("10.0.0.7:9090").await.unwrap();
    assert_eq!(leadership.value(), "10.0.0.7:9090");
    assert_eq!(elected(&redlock, &name).await.value, "10.0.0.7:9090");
    // Another candidate takes the name once the lock is gone behind the leader's back.
    for node in &cluster.nodes {
        let _: () = redis::cmd("DEL")
            .arg(format!("quorum-lock:election:{name}"))
            .query(&mut node.conn())
            .unwrap();
    }
    let err = leadership.proclaim("10.0.0.7:7070").await.unwrap_err();
    assert!(matches!(err, Error::NotHeld { .. }), "{err}");
    assert_ne!(
        elected_or_vacant(&redlock, &name).await.as_deref(),
        Some("10.0.0.7:7070")
    );
    drop(leadership);
}

/// The leader's value, or `None` when nobody leads.
async fn elected_or_vacant(redlock: &Redlock, name: &str) -> Option<String> {
    match redlock.election(name).unwrap().leader().await.unwrap() {
        Leader::Elected(term) => Some(term.value),
        Leader::Vacant => None,
        other => panic!("a leader or none, not {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_campaign_gives_up_while_another_leads() {
    let cluster = Cluster::start(3);
    let name = unique("bounded");
    let (first, second) = (client(&cluster.urls()), client(&cluster.urls()));
    let leadership = first
        .election(&name)
        .unwrap()
        .campaign("a", TTL)
        .await
        .unwrap();
    let err = (second.election(&name).unwrap())
        .campaign("b", TTL)
        .wait(Duration::ZERO)
        .await
        .unwrap_err();
    match err {
        Error::Timeout { last, .. } => assert!(matches!(*last, Error::Contended { .. }), "{last}"),
        other => panic!("a timeout, not {other}"),
    }
    leadership.resign().await.unwrap();
    no_keys_left(&cluster, &name, "after the resignation").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_elections_are_config_errors_that_leave_nothing() {
    let cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    for name in ["", "quorum-lock:x"] {
        let err = redlock.election(name).unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{name:?}: {err}");
    }
    let election = redlock.election("config").unwrap();
    let short = election
        .campaign("a", Duration::from_millis(900))
        .await
        .unwrap_err();
    assert!(
        short
            .to_string()
            .contains("leaves its leader no time to renew it"),
        "{short}"
    );
    let long = "x".repeat(quorum_lock::Election::MAX_VALUE + 1);
    let err = election.campaign(long, TTL).await.unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    let err = election
        .campaign("a", TTL)
        .max_attempts(0)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
    assert_eq!(cluster.keys_everywhere("*"), vec![], "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_term_resigns_when_done_and_is_cancelled_when_lost() {
    let cluster = Cluster::start(3);
    let name = unique("scoped");
    let redlock = client(&cluster.urls());
    let election = redlock.election(&name).unwrap();
    let epoch = (election.campaign("a", TTL))
        .run(|epoch, ctx| async move {
            assert!(!ctx.validity().is_zero());
            epoch
        })
        .await
        .unwrap();
    assert_eq!(election.leader().await.unwrap(), Leader::Vacant);
    no_keys_left(&cluster, &name, "once the work was done").await;
    // The term vanishes behind the leader's back: its next renewal finds it gone.
    let short = Duration::from_secs(3);
    let work = tokio::spawn({
        let election = election.clone();
        async move {
            (election.campaign("b", short))
                .run(|later, _| async move {
                    assert!(later > epoch, "a later term, a higher epoch");
                    std::future::pending::<()>().await
                })
                .await
        }
    });
    let record = format!("quorum-lock:term:quorum-lock:election:{name}");
    common::eventually(Duration::from_secs(10), "the second term's record", || {
        !cluster.keys_everywhere(&record).is_empty()
    })
    .await;
    for node in &cluster.nodes {
        let _: () = redis::cmd("DEL")
            .arg(format!("quorum-lock:election:{name}"))
            .query(&mut node.conn())
            .unwrap();
    }
    let ended = tokio::time::timeout(Duration::from_secs(20), work).await;
    let err = ended.expect("the work is cancelled").unwrap().unwrap_err();
    assert!(matches!(err, Error::Lost { .. }), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_term_leads_again_until_its_work_is_done() {
    let cluster = Cluster::start(3);
    let name = unique("requeue");
    let redlock = client(&cluster.urls());
    let election = redlock.election(&name).unwrap();
    let key = format!("quorum-lock:election:{name}");
    let record = format!("quorum-lock:term:{key}");
    let conns: Vec<_> = cluster.nodes.iter().map(|n| n.client()).collect();
    let mut terms = Vec::new();
    let done = election
        .lead("a", Duration::from_secs(3), |epoch, _| {
            terms.push(epoch);
            let (first, conns, key, record) =
                (terms.len() == 1, conns.clone(), key.clone(), record.clone());
            async move {
                if !first {
                    return epoch;
                }
                // The first term vanishes behind the leader's back once proclaimed.
                for client in &conns {
                    let mut conn = client.get_connection().unwrap();
                    let _: () = redis::cmd("DEL")
                        .arg(&key)
                        .arg(&record)
                        .query(&mut conn)
                        .unwrap();
                }
                std::future::pending().await
            }
        })
        .await
        .unwrap();
    assert_eq!(terms.len(), 2, "one lost term, one to the end: {terms:?}");
    assert!(terms[1] > terms[0] && done == terms[1], "{terms:?}");
    assert_eq!(election.leader().await.unwrap(), Leader::Vacant);
}

/// The next reading `seen` shows, within 10 s.
async fn next_change(seen: &mut tokio::sync::watch::Receiver<Leader>) -> Leader {
    let changed = tokio::time::timeout(Duration::from_secs(10), seen.changed()).await;
    changed.expect("a change within 10 s").unwrap();
    seen.borrow_and_update().clone()
}

/// How many clients listen to election `name`'s announcements on `node`.
fn listeners(node: &common::RedisServer, name: &str) -> i64 {
    let channel = format!("quorum-lock:leader:{name}");
    let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(&channel)
        .query(&mut node.conn())
        .unwrap();
    counts.first().map_or(0, |(_, n)| *n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_hears_a_term_begin_and_end_long_before_its_next_read() {
    let cluster = Cluster::start(3);
    let name = unique("observed");
    let (leader, watcher) = (client(&cluster.urls()), client(&cluster.urls()));
    let election = watcher.election(&name).unwrap();
    // Reads a minute apart: what it shows sooner, it heard announced.
    let mut seen = election.observe(Duration::from_secs(60)).unwrap();
    assert_eq!(
        next_change(&mut seen).await,
        Leader::Vacant,
        "the first read"
    );
    common::eventually(
        Duration::from_secs(10),
        "the observer listens on every node",
        || cluster.nodes.iter().all(|node| listeners(node, &name) == 1),
    )
    .await;
    let leadership = leader
        .election(&name)
        .unwrap()
        .campaign("a", TTL)
        .await
        .unwrap();
    match next_change(&mut seen).await {
        Leader::Elected(term) => assert_eq!(term.epoch, leadership.epoch()),
        other => panic!("the new leader, not {other:?}"),
    }
    leadership.resign().await.unwrap();
    assert_eq!(
        next_change(&mut seen).await,
        Leader::Vacant,
        "the resignation heard"
    );
    drop(seen);
    common::eventually(
        Duration::from_secs(10),
        "the observer stops listening",
        || cluster.nodes.iter().all(|node| listeners(node, &name) == 0),
    )
    .await;
}

/// The values of the candidates `election` lists now.
async fn waiting(election: &quorum_lock::Election) -> Vec<String> {
    let listed = election.candidates().await.unwrap();
    listed.into_iter().map(|c| c.value).collect()
}

/// Waits until `election` lists exactly `want`.
async fn lists(election: &quorum_lock::Election, want: &[&str]) {
    let started = std::time::Instant::now();
    loop {
        let listed = waiting(election).await;
        if listed == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "candidates {listed:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waiting_candidates_are_listed_in_the_order_they_came() {
    let cluster = Cluster::start(3);
    let name = unique("queue");
    let clients: Vec<Redlock> = (0..3).map(|_| client(&cluster.urls())).collect();
    let observer = client(&cluster.urls()).election(&name).unwrap();
    let leading = (clients[0].election(&name).unwrap())
        .campaign("a", TTL)
        .await
        .unwrap();
    lists(&observer, &[]).await;
    let campaign = |c: usize, value: &'static str| {
        let election = clients[c].election(&name).unwrap();
        tokio::spawn(async move { election.campaign(value, TTL).await })
    };
    let b = campaign(1, "b");
    lists(&observer, &["b"]).await;
    let c = campaign(2, "c");
    lists(&observer, &["b", "c"]).await;
    leading.resign().await.unwrap();
    let b = b.await.unwrap().unwrap();
    lists(&observer, &["c"]).await;
    b.resign().await.unwrap();
    let c = c.await.unwrap().unwrap();
    lists(&observer, &[]).await;
    c.resign().await.unwrap();
    common::eventually(Duration::from_secs(5), "no candidates key left", || {
        cluster
            .keys_everywhere("quorum-lock:candidates:*")
            .is_empty()
    })
    .await;
}
