//! Scenario 9: the read-write lock, uncontended, one task, N = 1, 3, 5: read lock + release
//! and write lock + release against the mutex's lock + unlock and the floor (2 rounds), in
//! interleaved rounds, with server commands per cycle.

use crate::common::Cluster;
use crate::support::contender::{Kind, Subject, lock_contenders};
use crate::support::measure::{cpu_cells, interleaved, servers_of};
use crate::support::stats::summarize;
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, FLOOR_2ROUNDS, QUORUM, ROUNDS};

pub async fn run(cfg: Cfg) {
    let warm = cfg.n(300);
    let iters = cfg.n(3000);
    for n in [1usize, 3, 5] {
        let cluster = Cluster::start(n);
        let urls = cluster.urls();
        let kinds = [
            Kind::TwoRounds,
            Kind::Quorum,
            Kind::QuorumRead,
            Kind::QuorumWrite,
        ];
        let subjects = lock_contenders(&urls, &kinds).await;
        let list: Vec<Subject> = subjects.iter().map(|(_, s)| s.clone()).collect();
        let runs = interleaved(&list, warm, iters, &servers_of(&cluster)).await;
        let mut t = Table::new(
            format!(
                "Scenario 9: read-write lock, uncontended, one task, N = {n} ({iters} timed \
                 cycles each in {ROUNDS} interleaved rounds, after {warm} warm-up)"
            ),
            &[
                ("p50", Unit::Time),
                ("p99", Unit::Time),
                ("cpu/cycle", Unit::Time),
                ("server cpu", Unit::Time),
            ],
        );
        for ((name, _), run) in subjects.iter().zip(&runs) {
            let s = summarize(run.samples.clone());
            if let Some(note) = run.error_note(name) {
                t.note(note);
            }
            let [cpu, server_cpu] = cpu_cells(run.cpu_per_cycle());
            t.row(
                *name,
                vec![Cell::time(s.p50), Cell::time(s.p99), cpu, server_cpu],
            );
        }
        t.ratios(&[
            (0, QUORUM, "p50/mutex"),
            (0, FLOOR_2ROUNDS, "p50/floor"),
            (1, QUORUM, "p99/mutex"),
            (3, QUORUM, "server cpu/mutex"),
        ]);
        t.note("mutex = quorum-lock's lock + unlock of a plain resource (its fast path: SET NX PX, then DELIFEQ or the compare-and-delete script)");
        t.note("read and write locks run one script per node to acquire and one to release");
        print!("{}", t.render());
        println!();
        drop(cluster);
    }
}
