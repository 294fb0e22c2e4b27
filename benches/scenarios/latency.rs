//! Scenario 1: uncontended lock + unlock, one task, N = 1, 3, 5: latency and CPU per cycle.

use crate::common::Cluster;
use crate::support::contender::{Kind, Subject, lock_contenders};
use crate::support::measure::{interleaved, latency_table, servers_of};
use crate::support::probe::probe_all;
use crate::{Cfg, FLOOR_2ROUNDS, REDLOCK, ROUNDS, RSLOCK};

pub async fn run(cfg: Cfg) {
    let warm = cfg.n(300);
    let iters = cfg.n(3000);
    for n in [1usize, 3, 5] {
        let cluster = Cluster::start(n);
        let urls = cluster.urls();
        let subjects = lock_contenders(
            &urls,
            &[
                Kind::OneTrip,
                Kind::TwoRounds,
                Kind::Quorum,
                Kind::QuorumNagle,
                Kind::Rslock,
                Kind::Redlock,
            ],
        )
        .await;
        let probed = probe_all(&subjects, &urls).await;
        let list: Vec<Subject> = subjects.iter().map(|(_, s)| s.clone()).collect();
        let runs = interleaved(&list, warm, iters, &servers_of(&cluster)).await;

        let title = format!(
            "Scenario 1: uncontended lock + unlock, one task, N = {n} ({iters} timed cycles \
                 each in {ROUNDS} interleaved rounds, after {warm} warm-up; same resource every \
                 cycle)"
        );
        let mut t = latency_table(title, &subjects, &runs);
        t.ratios(&[
            (0, FLOOR_2ROUNDS, "p50/floor"),
            (0, RSLOCK, "p50/rslock"),
            (1, FLOOR_2ROUNDS, "p99/floor"),
            (1, RSLOCK, "p99/rslock"),
            (2, FLOOR_2ROUNDS, "cpu/floor"),
            (2, RSLOCK, "cpu/rslock"),
        ]);
        t.note("floor (for ratios) = floor: 2 rounds x N");
        t.note(format!(
            "{REDLOCK}: a TCP connection per request, measured after the others, not interleaved"
        ));
        t.note("cpu/cycle = CPU time of the whole client process / cycles; server cpu = CPU time of all redis-servers / cycles");
        t.note(probed);
        print!("{}", t.render());
        println!();
        drop(cluster);
    }
}
