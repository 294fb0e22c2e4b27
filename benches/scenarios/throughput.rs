//! Scenario 2: throughput of 16 tasks on their own resources, N = 1 and 5.

use std::time::Duration;

use crate::common::Cluster;
use crate::support::contender::{Kind, Subject, lock_contenders};
use crate::support::measure::{Slices, cpu_cells, servers_of, throughput_interleaved};
use crate::support::probe::probe_all;
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, FLOOR_2ROUNDS, FLOOR_BUSY, QUORUM_NAGLE, QUORUM_QUIET, REDLOCK, RSLOCK};

pub async fn run(cfg: Cfg) {
    const TASKS: usize = 16;
    const SLICES: usize = 6;
    let how = Slices {
        tasks: TASKS,
        warm: cfg.d(Duration::from_millis(500)),
        slice_warm: cfg.d(Duration::from_millis(100)),
        dur: cfg.d(Duration::from_secs(3)),
        slices: SLICES,
    };
    for n in [1usize, 5] {
        let cluster = Cluster::start(n);
        let urls = cluster.urls();
        let subjects = lock_contenders(
            &urls,
            &[
                Kind::TwoRounds,
                Kind::Busy,
                Kind::Quorum,
                Kind::QuorumNagle,
                Kind::QuorumQuiet,
                Kind::Rslock,
                Kind::Redlock,
            ],
        )
        .await;
        let probed = probe_all(&subjects, &urls).await;
        let list: Vec<Subject> = subjects.iter().map(|(_, s)| s.clone()).collect();
        let results = throughput_interleaved(&list, how, &servers_of(&cluster)).await;

        let mut t = Table::new(
            format!(
                "Scenario 2: throughput, {TASKS} concurrent tasks each on its own resource, \
                 N = {n} ({:.1} s each in {SLICES} interleaved slices, after {:.1} s warm-up)",
                how.dur.as_secs_f64(),
                how.warm.as_secs_f64()
            ),
            &[
                ("cycles/s", Unit::Rate),
                ("cpu/cycle", Unit::Time),
                ("server cpu", Unit::Time),
            ],
        );
        for ((name, _), r) in subjects.iter().zip(&results) {
            if let Some(e) = &r.first_error {
                t.note(format!("{name}: {} failed cycles, first: {e}", r.errors));
            }
            let [cpu, server_cpu] = cpu_cells(r.cpu_per_cycle());
            t.row(*name, vec![Cell::Val(r.per_sec()), cpu, server_cpu]);
        }
        t.ratios(&[
            (0, FLOOR_2ROUNDS, "rate/floor"),
            (0, RSLOCK, "rate/rslock"),
            (1, FLOOR_2ROUNDS, "cpu/floor"),
            (1, RSLOCK, "cpu/rslock"),
        ]);
        t.note("one lock client (or floor connection set) shared by all tasks; redlock: one thread per task");
        t.note(format!(
            "{REDLOCK}: a TCP connection per request, measured after the others, not interleaved"
        ));
        t.note(format!("{QUORUM_NAGLE}: quorum-lock with Nagle's algorithm on its node connections, as the redis driver's default (and rslock) has it; quorum-lock's default is TCP_NODELAY"));
        t.note(format!("{QUORUM_QUIET}: quorum-lock without release notifications (waiters only poll): every release is the plain compare-and-delete, as rslock's and the floor's are; with them, the release on the waiting-list node also pops the (empty) waiting list and deletes the turn"));
        t.note(format!("{FLOOR_BUSY}: a control, not a floor: the floor with 1 µs of busy work before each acquisition. Client and servers share two cores, and a worker thread that runs dry parks and must be woken again: more client work can mean more throughput. Where this row beats the floor, so may a contender that does more work than the floor"));
        t.note("cpu/cycle = client process CPU time / cycles; server cpu = all redis-servers' CPU time / cycles");
        t.note(probed);
        print!("{}", t.render());
        println!();
        drop(cluster);
    }
}
