//! Scenario 9: the read-write lock, uncontended, one task, N = 1, 3, 5: read lock + release
//! and write lock + release against the mutex's lock + unlock and the floor (2 rounds), in
//! interleaved rounds, with server commands per cycle.

use crate::common::Cluster;
use crate::support::contender::{Kind, Subject, lock_contenders};
use crate::support::measure::{interleaved, latency_table, servers_of};
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
        let title = format!(
            "Scenario 9: read-write lock, uncontended, one task, N = {n} ({iters} timed \
                 cycles each in {ROUNDS} interleaved rounds, after {warm} warm-up)"
        );
        let mut t = latency_table(title, &subjects, &runs);
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
