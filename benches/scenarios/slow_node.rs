//! Scenario 3: one slow (5 ms reply delay, through a proxy) or silent node among five.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::common::proxy::FaultProxy;
use crate::common::{BlackHole, Cluster, unique};
use crate::support::contender::{
    Contender, FloorNode, Subject, defaults, floor_conn, floor_nodes, load_script, quorum,
};
use crate::support::measure::{
    Servers, interleaved, join_within, measure, measure_redlock_bounded,
};
use crate::support::stats::summarize;
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, NODE_TIMEOUT, QUORUM, REDLOCK, ROUNDS, RSLOCK, SLOW_DELAY};

pub struct SlowSetup<'a> {
    title: String,
    urls: &'a [String],
    /// Five healthy nodes: the scenario-1 baseline, measured interleaved in the same run.
    healthy: &'a [String],
    nodes: Arc<Vec<FloorNode>>,
}

pub async fn run(cfg: Cfg) {
    // (a) node 0 behind a proxy that delays every reply by SLOW_DELAY.
    {
        let cluster = Cluster::start(5);
        let upstream = SocketAddr::from(([127, 0, 0, 1], cluster.nodes[0].port()));
        let proxy = FaultProxy::with_delay(upstream, SLOW_DELAY);
        let healthy = cluster.urls();
        let mut urls = healthy.clone();
        urls[0] = proxy.url();
        let nodes = floor_nodes(&urls).await;
        let setup = SlowSetup {
            title: format!(
                "Scenario 3a: lock + unlock, N = 5, node 0 behind a proxy that delays every \
                 reply by {SLOW_DELAY:?}"
            ),
            urls: &urls,
            healthy: &healthy,
            nodes,
        };
        let thread = slow_table(cfg, setup).await;
        drop(proxy);
        join_within(thread, Duration::from_secs(10));
        drop(cluster);
    }

    // (b) node 0 is a black hole: accepts TCP connections, never answers.
    {
        // Five servers: nodes 1-4 with the black hole in place of node 0, and all five as
        // the healthy baseline.
        let cluster = Cluster::start(5);
        let hole = BlackHole::start();
        let healthy = cluster.urls();
        let mut urls = healthy.clone();
        urls[0] = hole.url();
        let mut nodes = vec![FloorNode::Silent];
        for url in &urls[1..] {
            let node = floor_conn(url).await;
            // Without it every release was refused (`NOSCRIPT`) and the floors' keys stayed:
            // both 3b floors refused all their cycles in runs G and H.
            load_script(&node).await;
            nodes.push(node);
        }
        let setup = SlowSetup {
            title: "Scenario 3b: lock + unlock, N = 5, node 0 a black hole (accepts TCP, never \
                    answers)"
                .to_string(),
            urls: &urls,
            healthy: &healthy,
            nodes: Arc::new(nodes),
        };
        let thread = slow_table(cfg, setup).await;
        // Closing the black hole's sockets unblocks a redlock thread stuck reading.
        drop(hole);
        if !join_within(thread, Duration::from_secs(10)) {
            println!("  (the redlock thread was still blocked 10 s after the black hole closed)");
        }
        drop(cluster);
    }
}

/// Runs and prints one scenario-3 table; returns the redlock thread to join.
pub async fn slow_table(cfg: Cfg, setup: SlowSetup<'_>) -> std::thread::JoinHandle<()> {
    let warm = cfg.n(100);
    let iters = cfg.n(1000);
    let peer_warm = 1;
    let peer_iters = cfg.n(50).max(5);
    let peer_limit = cfg.d(Duration::from_secs(10)).max(Duration::from_secs(3));
    let SlowSetup {
        title,
        urls,
        healthy,
        nodes,
    } = setup;

    // The fast ones, interleaved.
    let majority = Contender::TwoRounds {
        nodes: Arc::clone(&nodes),
        need: nodes.len() / 2 + 1,
    };
    let ql = Contender::Quorum(quorum(urls, defaults).await);
    let base = Contender::Quorum(quorum(healthy, defaults).await);
    // The same floor on the five healthy nodes: what the slow or silent node costs a client
    // that does the least work (the proxy or black hole and its CPU are part of the setup).
    let healthy_nodes = floor_nodes(healthy).await;
    let majority_base = Contender::TwoRounds {
        need: healthy_nodes.len() / 2 + 1,
        nodes: healthy_nodes,
    };
    let none: Servers = Arc::new([]);
    let fast = interleaved(
        &[
            Subject::Async(majority),
            Subject::Async(ql),
            Subject::Async(base),
            Subject::Async(majority_base),
        ],
        warm,
        iters,
        &none,
    )
    .await;
    // The slow ones, each bounded.
    let all = Contender::TwoRounds {
        nodes: Arc::clone(&nodes),
        need: nodes.len(),
    };
    let limit = Some(peer_limit);
    let all_run = measure(&all, &unique("s3"), peer_warm, peer_iters, limit, &none).await;
    let rs = Contender::Rslock(rslock::LockManager::new(urls.to_vec()));
    let rs_run = measure(&rs, &unique("s3"), peer_warm, peer_iters, limit, &none).await;
    let (rl_run, thread) =
        measure_redlock_bounded(urls, &unique("s3"), peer_warm, peer_iters, peer_limit).await;

    let mut t = Table::new(
        format!(
            "{title}\n(quorum-lock node_timeout {NODE_TIMEOUT:?}; quorum-lock and majority floor: \
             {iters} cycles in {ROUNDS} interleaved rounds after {warm} warm-up; others: up to \
             {peer_iters} cycles after {peer_warm} warm-up, within {:.0} s each)",
            peer_limit.as_secs_f64()
        ),
        &[
            ("p50", Unit::Time),
            ("p99", Unit::Time),
            ("cycles", Unit::Num(0)),
        ],
    );
    let mut fast = fast.into_iter();
    let named = [
        ("floor: 2 rounds, majority", fast.next().unwrap_or_default()),
        ("floor: 2 rounds, all N", all_run),
        (QUORUM, fast.next().unwrap_or_default()),
        (RSLOCK, rs_run),
        (REDLOCK, rl_run),
        (
            "quorum-lock, 5 healthy nodes (scenario 1)",
            fast.next().unwrap_or_default(),
        ),
        (
            "floor: 2 rounds, majority, 5 healthy nodes",
            fast.next().unwrap_or_default(),
        ),
    ];
    for (name, run) in &named {
        if let Some(note) = run.error_note(name) {
            t.note(note);
        }
        let s = summarize(run.samples.clone());
        let cells = if s.n == 0 {
            let why = if run.timed_out { "timeout" } else { "n/a" };
            vec![
                Cell::Text(why.into()),
                Cell::Text(why.into()),
                Cell::Val(0.0),
            ]
        } else if run.timed_out {
            vec![
                Cell::time(s.p50),
                Cell::time(s.p99),
                Cell::ValNote(s.n as f64, "(then timeout)".into()),
            ]
        } else {
            vec![Cell::time(s.p50), Cell::time(s.p99), Cell::Val(s.n as f64)]
        };
        t.row(*name, cells);
    }
    t.ratios(&[
        (0, named[0].0, "p50/floor"),
        (0, RSLOCK, "p50/rslock"),
        (0, named[5].0, "p50/healthy"),
        (0, named[6].0, "p50/healthy floor"),
    ]);
    t.note(
        "\"5 healthy nodes\": quorum-lock on the same servers without the slow or silent one, \
         interleaved with the rows above (the issue's target: p50 within 1.1x of it)",
    );
    t.note(
        "\"healthy floor\": against the majority floor on the same five healthy servers; in the \
         majority floor's row, what the slow or silent node (its proxy or black hole included) \
         costs the least work, beside quorum-lock's p50/healthy",
    );
    t.note(
        "floor (for ratios) = 2 parallel rounds that each return at the first majority of answers;",
    );
    t.note("\"all N\" waits for every node (a silent node counts as answered after 50 ms)");
    print!("{}", t.render());
    println!();
    thread
}
