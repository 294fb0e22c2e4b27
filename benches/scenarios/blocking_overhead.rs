//! Scenario 14: the blocking API against the async one, N = 3: lock + release from a
//! plain thread through a blocking client, and from one task through an async client, in
//! interleaved rounds; and what building one blocking client adds (its runtime thread,
//! RSS), read from `/proc/self/status`; and what adopting a lock ticket costs against the
//! acquisition it replaces. It exists only with the `blocking` feature.

use std::time::{Duration, Instant};

use quorum_lock::blocking;

use crate::common::{Cluster, unique};
use crate::support::stats::{rss_kib, summarize};
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, NODE_TIMEOUT, ROUNDS, TTL};

const ASYNC: &str = "quorum-lock (async, one task)";
const BLOCKING: &str = "quorum-lock::blocking (a plain thread)";

fn settings(urls: &[String]) -> quorum_lock::RedlockBuilder {
    quorum_lock::Redlock::builder()
        .nodes(urls)
        .node_timeout(NODE_TIMEOUT)
        .restart_quarantine(false)
}

/// `Threads` of `/proc/self/status`.
fn threads() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status.lines().find_map(|l| l.strip_prefix("Threads:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// `cycles` timed lock + release cycles of the async client, as one task.
fn async_cycles(
    rt: &tokio::runtime::Handle,
    rl: &quorum_lock::Redlock,
    res: &str,
    cycles: usize,
) -> Vec<Duration> {
    let (rl, res) = (rl.clone(), res.to_owned());
    let task = rt.spawn(async move {
        let mut took = Vec::with_capacity(cycles);
        for _ in 0..cycles {
            let start = Instant::now();
            let guard = rl.lock(&res, TTL).await.expect("async lock");
            guard.release().await.expect("async release");
            took.push(start.elapsed());
        }
        took
    });
    rt.block_on(task).expect("async cycles")
}

/// `cycles` timed lock + release cycles of the blocking client, on this thread.
fn blocking_cycles(rl: &blocking::Redlock, res: &str, cycles: usize) -> Vec<Duration> {
    (0..cycles)
        .map(|_| {
            let start = Instant::now();
            let guard = rl.lock(res, TTL).acquire().expect("blocking lock");
            guard.release().expect("blocking release");
            start.elapsed()
        })
        .collect()
}

/// `cycles` timed (acquisition, adoption) pairs of the async client, as one task: each
/// cycle locks, detaches the guard into a ticket, adopts it and releases.
fn ticket_cycles(
    rt: &tokio::runtime::Handle,
    rl: &quorum_lock::Redlock,
    res: &str,
    cycles: usize,
) -> (Vec<Duration>, Vec<Duration>) {
    let (rl, res) = (rl.clone(), res.to_owned());
    let task = rt.spawn(async move {
        let (mut locks, mut adoptions) = (Vec::new(), Vec::new());
        for _ in 0..cycles {
            let start = Instant::now();
            let ticket = rl.lock(&res, TTL).await.expect("lock").detach();
            locks.push(start.elapsed());
            let start = Instant::now();
            let adopted = rl.adopt(&ticket).await.expect("adopt");
            adoptions.push(start.elapsed());
            adopted.release().await.expect("release");
        }
        (locks, adoptions)
    });
    rt.block_on(task).expect("ticket cycles")
}

/// The table of [`ticket_cycles`]: adoption against acquisition, p50 and p99.
fn tickets_table(rt: &tokio::runtime::Handle, rl: &quorum_lock::Redlock, iters: usize) -> Table {
    let (locks, adoptions) = ticket_cycles(rt, rl, &unique("s14-ticket"), iters);
    let (sl, sa) = (summarize(locks), summarize(adoptions));
    let mut t = Table::new(
        format!(
            "Scenario 14: adopting a lock ticket, N = 3 ({iters} cycles of lock, detach, adopt, release)"
        ),
        &[("p50", Unit::Time), ("p99", Unit::Time)],
    );
    const LOCK: &str = "lock (acquire)";
    t.row(LOCK, vec![Cell::time(sl.p50), Cell::time(sl.p99)]);
    t.row(
        "adopt (one extension round)",
        vec![Cell::time(sa.p50), Cell::time(sa.p99)],
    );
    t.ratios(&[(0, LOCK, "p50/lock"), (1, LOCK, "p99/lock")]);
    t
}

pub fn run(cfg: Cfg) {
    let rt = tokio::runtime::Handle::current();
    // A thread outside the runtime's context, as a blocking caller's is.
    std::thread::spawn(move || measure(cfg, &rt))
        .join()
        .expect("scenario 14");
}

fn measure(cfg: Cfg, rt: &tokio::runtime::Handle) {
    let (warm, iters) = (cfg.n(300), cfg.n(3000));
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let async_rl = settings(&urls).build().expect("async client");
    rt.block_on(async_rl.connect()).expect("async connect");
    let (threads_before, (rss_before, _)) = (threads(), rss_kib());
    let blocking_rl = blocking::RedlockBuilder::from(settings(&urls))
        .build()
        .expect("blocking client");
    blocking_rl.connect().expect("blocking connect");
    let (threads_after, (rss_after, _)) = (threads(), rss_kib());
    let (res_async, res_blocking) = (unique("s14-async"), unique("s14-blocking"));
    async_cycles(rt, &async_rl, &res_async, warm);
    blocking_cycles(&blocking_rl, &res_blocking, warm);
    let (mut a, mut b) = (Vec::with_capacity(iters), Vec::with_capacity(iters));
    for round in 0..ROUNDS {
        let n = iters / ROUNDS;
        // Each goes first in every other round: background load hits both alike.
        if round % 2 == 0 {
            a.extend(async_cycles(rt, &async_rl, &res_async, n));
            b.extend(blocking_cycles(&blocking_rl, &res_blocking, n));
        } else {
            b.extend(blocking_cycles(&blocking_rl, &res_blocking, n));
            a.extend(async_cycles(rt, &async_rl, &res_async, n));
        }
    }
    let (sa, sb) = (summarize(a), summarize(b));
    let mut t = Table::new(
        format!(
            "Scenario 14: the blocking API against the async one, uncontended lock + release, \
             N = 3 ({iters} timed cycles each in {ROUNDS} interleaved rounds, after {warm} warm-up)"
        ),
        &[("p50", Unit::Time), ("p99", Unit::Time)],
    );
    t.row(ASYNC, vec![Cell::time(sa.p50), Cell::time(sa.p99)]);
    t.row(BLOCKING, vec![Cell::time(sb.p50), Cell::time(sb.p99)]);
    t.ratios(&[(0, ASYNC, "p50/async"), (1, ASYNC, "p99/async")]);
    t.note(format!(
        "building one blocking client (and connecting it): +{} threads ({threads_before} -> \
         {threads_after}), VmRSS {:+} KiB ({rss_before} -> {rss_after} KiB)",
        threads_after.saturating_sub(threads_before),
        rss_after as i64 - rss_before as i64,
    ));
    t.note("async: one task on the bench's multi-thread runtime; blocking: a plain thread, each call a task on the client's runtime thread and a wait for its answer");
    print!("{}", t.render());
    println!();
    print!("{}", tickets_table(rt, &async_rl, iters).render());
    println!();
    blocking_rl.shutdown().expect("blocking shutdown");
    rt.block_on(async_rl.shutdown());
    drop(cluster);
}
