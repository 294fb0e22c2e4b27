//! Scenario 13: leader election, N = 3. (a) An uncontended term, campaign + resign,
//! against a fenced lock + release of the same nodes, interleaved. (b) Handover: the time
//! from a leader's resignation to the waiting candidate's election, and from a dead
//! leader's end of term (its renewals stopped) to the next election. (c) An idle
//! observer's commands per second per node. Restart quarantine is on: the epoch is a
//! fencing token, which these nodes (without `appendfsync always`) mint only with it.

use std::time::Duration;

use quorum_lock::{AutoExtend, Redlock};
use tokio::time::Instant;

use crate::Cfg;
use crate::common::Cluster;
use crate::support::contender::{quarantined, quorum};
use crate::support::stats::{commandstats_sum, delta, summarize};
use crate::support::table::{Cell, Table, Unit};

/// The term of every campaign but the dead leader's.
const TERM: Duration = Duration::from_secs(10);
/// The dead leader's term: the next leader waits it out.
const SHORT_TERM: Duration = Duration::from_secs(1);

pub async fn run(cfg: Cfg) {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let (a, b) = (
        quorum(&urls, quarantined).await,
        quorum(&urls, quarantined).await,
    );
    let heads = [
        ("p50", Unit::Time),
        ("p99", Unit::Time),
        ("max", Unit::Time),
        ("n", Unit::Num(0)),
    ];
    uncontended(&a, cfg.n(30)).await;
    let mut t = Table::new("Scenario 13a: leader election, uncontended, N = 3", &heads);
    let (term, lock) = uncontended(&a, cfg.n(1000)).await;
    row(&mut t, "campaign + resign", term);
    row(&mut t, "fenced lock + release", lock);
    t.ratios(&[(0, "fenced lock + release", "p50/fenced lock")]);
    t.note("alternated cycle by cycle, after 30 warm-up cycles of each");
    print!("{}", t.render());
    println!();
    let mut t = Table::new("Scenario 13b: leader election, handover, N = 3", &heads);
    row(
        &mut t,
        "after resign",
        after_resign(&a, &b, cfg.n(100)).await,
    );
    let deaths = after_death(&a, &b, cfg.n(10).max(3)).await;
    row(&mut t, "after death", deaths);
    // An observer of its own, as a process that only watches would be.
    let watcher = quorum(&urls, quarantined).await;
    let (per_node, commands) = observer_idle(&cluster, &watcher).await;
    t.note("after resign: from the resign call to the waiting candidate's win");
    t.note(format!(
        "after death: from the end of a {SHORT_TERM:?} term that stopped renewing to the next win"
    ));
    t.note(format!(
        "an idle observer reading every 1 s sends {per_node:.2} commands a second per node \
         ({commands} in 5 s on 3 nodes)"
    ));
    print!("{}", t.render());
    println!();
}

fn row(t: &mut Table, name: &str, samples: Vec<Duration>) {
    let s = summarize(samples);
    let cells = vec![
        Cell::time(s.p50),
        Cell::time(s.p99),
        Cell::time(s.max),
        Cell::Val(s.n as f64),
    ];
    t.row(name, cells);
}

/// Campaign + resign and fenced lock + release, alternated `iters` times.
async fn uncontended(redlock: &Redlock, iters: usize) -> (Vec<Duration>, Vec<Duration>) {
    let election = redlock.election("bench-uncontended").unwrap();
    let (mut terms, mut locks) = (Vec::new(), Vec::new());
    for _ in 0..iters {
        let start = Instant::now();
        let leadership = election.campaign("a", TERM).await.unwrap();
        leadership.resign().await.unwrap();
        terms.push(start.elapsed());
        let start = Instant::now();
        let guard = redlock.lock("bench-fenced", TERM).fenced().await.unwrap();
        guard.release().await.unwrap();
        locks.push(start.elapsed());
    }
    (terms, locks)
}

/// `iters` handovers: `a` leads, `b` waits listed, `a` resigns.
async fn after_resign(a: &Redlock, b: &Redlock, iters: usize) -> Vec<Duration> {
    let mut samples = Vec::new();
    for _ in 0..iters {
        let leading = a
            .election("bench-handover")
            .unwrap()
            .campaign("a", TERM)
            .await
            .unwrap();
        let election = b.election("bench-handover").unwrap();
        let waiting = tokio::spawn(async move { election.campaign("b", TERM).await });
        // Long enough for the waiter to be listed behind the leader.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let start = Instant::now();
        leading.resign().await.unwrap();
        let next = waiting.await.unwrap().unwrap();
        samples.push(start.elapsed());
        next.resign().await.unwrap();
    }
    samples
}

/// `iters` handovers after a leader stops renewing: from its term's end to `b`'s win.
async fn after_death(a: &Redlock, b: &Redlock, iters: usize) -> Vec<Duration> {
    let mut samples = Vec::new();
    for _ in 0..iters {
        let dead = (a.election("bench-death").unwrap())
            .campaign("a", SHORT_TERM)
            .auto_extend(AutoExtend::new().max_extensions(0))
            .await
            .unwrap();
        let ends = dead.deadline();
        let next = b
            .election("bench-death")
            .unwrap()
            .campaign("b", TERM)
            .await
            .unwrap();
        samples.push(Instant::now().saturating_duration_since(ends));
        next.resign().await.unwrap();
        drop(dead);
    }
    samples
}

/// Commands a second per node sent by one observer of a vacant election over 5 s (the
/// commands of a window without it, the other clients' background work, subtracted),
/// and which commands they were.
async fn observer_idle(cluster: &Cluster, redlock: &Redlock) -> (f64, String) {
    let election = redlock.election("bench-observed").unwrap();
    let mut conns: Vec<_> = cluster.nodes.iter().map(|n| n.conn()).collect();
    let window = Duration::from_secs(5);
    let before = commandstats_sum(&mut conns);
    tokio::time::sleep(window).await;
    let quiet = delta(&before, &commandstats_sum(&mut conns));
    let watch = election.observe(Duration::from_secs(1)).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = commandstats_sum(&mut conns);
    tokio::time::sleep(window).await;
    let after = commandstats_sum(&mut conns);
    drop(watch);
    let sent = delta(&before, &after);
    let extra = |name: &String, n: u64| n.saturating_sub(quiet.get(name).copied().unwrap_or(0));
    let total: u64 = sent.iter().map(|(name, n)| extra(name, *n)).sum();
    let named: Vec<String> = (sent.iter())
        .map(|(name, n)| format!("{name} {}", extra(name, *n)))
        .collect();
    let per_node = total as f64 / window.as_secs_f64() / cluster.nodes.len() as f64;
    (per_node, named.join(", "))
}
