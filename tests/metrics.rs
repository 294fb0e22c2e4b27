//! Metric names and values after a scripted sequence, read from a debugging recorder.
//! One test in this binary: the recorder is global.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{Cluster, eventually, lock_and_release, unique};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use quorum_lock::{Redlock, metrics as names};

type Snapshot = HashMap<(String, Vec<(String, String)>), DebugValue>;

fn snapshot(snapshotter: &metrics_util::debugging::Snapshotter) -> Snapshot {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let (kind, key) = key.into_parts();
            let _ = kind;
            let mut labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            ((key.name().to_owned(), labels), value)
        })
        .collect()
}

fn counter(s: &Snapshot, name: &str, labels: &[(&str, &str)]) -> u64 {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    match s.get(&(name.to_owned(), labels)) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        Some(other) => panic!("{name} is not a counter: {other:?}"),
    }
}

fn histogram_len(s: &Snapshot, name: &str) -> usize {
    match s.get(&(name.to_owned(), Vec::new())) {
        Some(DebugValue::Histogram(v)) => v.len(),
        None => 0,
        Some(other) => panic!("{name} is not a histogram: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_follow_a_scripted_sequence() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().unwrap();

    let mut cluster = Cluster::start(3);
    let redlock = Redlock::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .retry_delay(Duration::from_millis(1))
        .max_retry_delay(Duration::from_millis(2))
        .restart_quarantine(false)
        .build()
        .unwrap();
    let resource = unique("metrics");
    let ttl = Duration::from_secs(10);

    // 1 acquired, then 1 contended try, then a lock() that gives up after 2 attempts.
    let guard = redlock.lock(&resource, ttl).await.unwrap();
    assert!(redlock.try_lock(&resource, ttl).await.unwrap().is_none());
    redlock
        .lock(&resource, ttl)
        .max_attempts(2)
        .await
        .unwrap_err();
    // 1 extension, 1 explicit release.
    guard.extend(ttl).await.unwrap();
    guard.release().await.unwrap();
    // 1 release on drop.
    drop(redlock.lock(&resource, ttl).await.unwrap());
    eventually(Duration::from_secs(5), "dropped guard released", || {
        cluster.keys_everywhere(&resource).is_empty()
    })
    .await;
    // A lock that expires before its release: counted as lost.
    let short = redlock
        .lock(&resource, Duration::from_millis(600))
        .await
        .unwrap();
    eventually(Duration::from_secs(5), "short lock expired", || {
        !short.is_valid()
    })
    .await;
    short.release().await.unwrap_err();

    let s = snapshot(&snapshotter);
    let attempts = names::ACQUIRE_ATTEMPTS;
    assert_eq!(counter(&s, attempts, &[("outcome", "acquired")]), 3);
    assert_eq!(counter(&s, attempts, &[("outcome", "contended")]), 3);
    assert_eq!(counter(&s, names::ACQUIRE_TIMEOUTS, &[]), 1);
    // The lock() that gave up listened for releases after its first attempt, made its
    // second at once without asking the waiting-list node (the first listed attempt of a
    // call is not gated), then left the list that attempt had put it in. It never slept
    // between attempts.
    let events = names::WAIT_EVENTS;
    assert_eq!(counter(&s, events, &[("event", "gate_open")]), 0);
    assert_eq!(counter(&s, events, &[("event", "gate_refused")]), 0);
    assert_eq!(counter(&s, events, &[("event", "left")]), 1);
    assert_eq!(counter(&s, events, &[("event", "poll")]), 0);
    assert_eq!(counter(&s, events, &[("event", "woken")]), 0);
    assert_eq!(histogram_len(&s, names::ATTEMPT_DURATION), 6);
    assert_eq!(
        histogram_len(&s, names::ACQUIRE_DURATION),
        3,
        "lock() calls that succeeded"
    );
    assert_eq!(
        counter(&s, names::EXTENSIONS, &[("outcome", "extended")]),
        1
    );
    assert_eq!(counter(&s, names::RELEASES, &[("kind", "explicit")]), 2);
    assert_eq!(counter(&s, names::RELEASES, &[("kind", "drop")]), 1);
    assert_eq!(counter(&s, names::LOST, &[("reason", "expired")]), 1);
    assert_eq!(
        histogram_len(&s, names::HOLD_DURATION),
        3,
        "every guard's hold is timed"
    );

    // A dead node shows up per node, by name, and nowhere else.
    let dead = cluster.nodes[2]
        .url()
        .trim_start_matches("redis://")
        .to_owned();
    cluster.nodes[2].kill();
    lock_and_release(&redlock, &resource, ttl).await;
    // The dead node's failure may be counted by the background collector, after the
    // release returned at a majority.
    eventually(
        Duration::from_secs(5),
        "the dead node's failure counted",
        || {
            let s = snapshot(&snapshotter);
            counter(
                &s,
                names::NODE_FAILURES,
                &[("kind", "error"), ("node", &dead)],
            ) >= 1
        },
    )
    .await;
    // The dead node comes back empty: restart quarantine keeps its vote out, and says why
    // in the metrics. Node 0 holds a foreign value, so node 2's answer is waited for.
    let back = dead;
    tokio::task::block_in_place(|| cluster.nodes[2].restart());
    redis::cmd("SET")
        .arg(&resource)
        .arg("foreign")
        .arg("PX")
        .arg(60_000)
        .query::<()>(&mut cluster.nodes[0].conn())
        .unwrap();
    let careful = Redlock::builder()
        .nodes(cluster.urls())
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let refused = careful.lock(&resource, ttl).max_attempts(1).await;
    let report = refused.as_ref().err().and_then(|e| e.report()).unwrap();
    assert!(report.results()[2].outcome.is_quarantined(), "{report}");
    let s = snapshot(&snapshotter);
    let kept_out = [("node", back.as_str()), ("reason", "memory_lost")];
    assert_eq!(counter(&s, names::QUARANTINED_VOTES, &kept_out), 1);
    let gauge = s.get(&(
        names::NODE_QUARANTINED.to_owned(),
        vec![("node".to_owned(), back.clone())],
    ));
    assert_eq!(gauge, Some(&DebugValue::Gauge(1.0.into())));
    // Its background readmission would ping the paused node below, and count that too.
    careful.shutdown().await;

    // A paused node: the lock is taken and released at the majority, and what was sent to
    // the paused node is left to the background collector, which counts each request's
    // timeout at its round's deadline.
    let paused = cluster.nodes[1]
        .url()
        .trim_start_matches("redis://")
        .to_owned();
    // A snapshot takes the counters' values and resets them: `counted` adds them up.
    let timeouts = || {
        let labels = [("kind", "timeout"), ("node", paused.as_str())];
        counter(&snapshot(&snapshotter), names::NODE_FAILURES, &labels)
    };
    timeouts();
    cluster.nodes[1].pause();
    let elsewhere = unique("metrics-paused");
    let guard = redlock.lock(&elsewhere, ttl).await.unwrap();
    guard.release().await.unwrap();
    let mut counted = 0;
    eventually(
        Duration::from_secs(5),
        "the paused node's acquire and release timeouts counted",
        || {
            counted += timeouts();
            counted >= 2
        },
    )
    .await;
    cluster.nodes[1].resume();
    counted += timeouts();
    assert_eq!(counted, 2, "one timeout per request");

    let s = snapshot(&snapshotter);
    for (name, labels) in s.keys() {
        assert!(name.starts_with("quorum_lock_"), "{name}");
        assert!(
            labels.iter().all(|(_, v)| !v.contains(&resource)),
            "resource names never become labels: {name} {labels:?}"
        );
    }
}
