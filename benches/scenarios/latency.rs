//! Scenario 1: uncontended lock + unlock, one task, N = 1, 3, 5: latency and CPU per cycle.

use std::sync::Arc;

use crate::common::Cluster;
use crate::support::contender::{Contender, Subject, defaults, floor_nodes, quorum};
use crate::support::measure::{cpu_cells, interleaved, servers_of};
use crate::support::probe::probe_all;
use crate::support::stats::summarize;
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, FLOOR_1RTT, FLOOR_2ROUNDS, QUORUM, REDLOCK, ROUNDS, RSLOCK};

pub async fn run(cfg: Cfg) {
    let warm = cfg.n(300);
    let iters = cfg.n(3000);
    for n in [1usize, 3, 5] {
        let cluster = Cluster::start(n);
        let urls = cluster.urls();
        let nodes = floor_nodes(&urls).await;
        let subjects = [
            (
                FLOOR_1RTT,
                Subject::Async(Contender::OneTrip(Arc::clone(&nodes))),
            ),
            (
                FLOOR_2ROUNDS,
                Subject::Async(Contender::TwoRounds {
                    need: nodes.len(),
                    nodes: Arc::clone(&nodes),
                }),
            ),
            (
                QUORUM,
                Subject::Async(Contender::Quorum(quorum(&urls, defaults).await)),
            ),
            (
                RSLOCK,
                Subject::Async(Contender::Rslock(rslock::LockManager::new(urls.clone()))),
            ),
            (
                REDLOCK,
                Subject::Sync(Arc::new(redlock::RedLock::new(urls.clone()))),
            ),
        ];
        let probed = probe_all(&subjects, &urls).await;
        let list: Vec<Subject> = subjects.iter().map(|(_, s)| s.clone()).collect();
        let runs = interleaved(&list, warm, iters, &servers_of(&cluster)).await;

        let mut t = Table::new(
            format!(
                "Scenario 1: uncontended lock + unlock, one task, N = {n} ({iters} timed cycles \
                 each in {ROUNDS} interleaved rounds, after {warm} warm-up; same resource every \
                 cycle)"
            ),
            &[
                ("p50", Unit::Time),
                ("p99", Unit::Time),
                ("cpu/cycle", Unit::Time),
                ("server cpu", Unit::Time),
            ],
        );
        let mut rows = Vec::new();
        for ((name, _), run) in subjects.iter().zip(&runs) {
            let s = summarize(run.samples.clone());
            if let Some(note) = run.error_note(name) {
                t.note(note);
            }
            let [cpu, server_cpu] = cpu_cells(run.cpu_per_cycle());
            rows.push(t.row(
                *name,
                vec![Cell::time(s.p50), Cell::time(s.p99), cpu, server_cpu],
            ));
        }
        let (floor, rs) = (rows[1], rows[3]);
        t.ratio(0, floor, "p50/floor");
        t.ratio(0, rs, "p50/rslock");
        t.ratio(1, floor, "p99/floor");
        t.ratio(1, rs, "p99/rslock");
        t.ratio(2, floor, "cpu/floor");
        t.ratio(2, rs, "cpu/rslock");
        t.note("floor (for ratios) = floor: 2 rounds x N");
        t.note("cpu/cycle = CPU time of the whole client process / cycles; server cpu = CPU time of all redis-servers / cycles");
        t.note(probed);
        print!("{}", t.render());
        println!();
        drop(cluster);
    }
}
