//! Scenario 2: throughput of 16 tasks on their own resources, N = 1 and 5.

use std::sync::Arc;
use std::time::Duration;

use crate::common::Cluster;
use crate::support::contender::{Contender, Subject, defaults, floor_nodes, quorum};
use crate::support::measure::{Throughput, cpu_cells, servers_of, throughput};
use crate::support::probe::probe_all;
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, FLOOR_2ROUNDS, QUORUM, REDLOCK, RSLOCK};

pub async fn run(cfg: Cfg) {
    const TASKS: usize = 16;
    const SLICES: usize = 6;
    let warm = cfg.d(Duration::from_millis(500));
    let slice_warm = cfg.d(Duration::from_millis(100));
    let dur = cfg.d(Duration::from_secs(3));
    for n in [1usize, 5] {
        let cluster = Cluster::start(n);
        let urls = cluster.urls();
        let nodes = floor_nodes(&urls).await;
        let servers = servers_of(&cluster);
        let subjects = [
            (
                FLOOR_2ROUNDS,
                Subject::Async(Contender::TwoRounds {
                    need: nodes.len(),
                    nodes,
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
        for (_, s) in &subjects {
            throughput(s, TASKS, warm, Duration::ZERO, &servers).await;
        }
        let mut results: Vec<Throughput> = subjects.iter().map(|_| Throughput::default()).collect();
        for slice in 0..SLICES {
            for k in 0..subjects.len() {
                let i = (k + slice) % subjects.len();
                let slice = dur / SLICES as u32;
                let r = throughput(&subjects[i].1, TASKS, slice_warm, slice, &servers).await;
                results[i].merge(r);
            }
        }

        let mut t = Table::new(
            format!(
                "Scenario 2: throughput, {TASKS} concurrent tasks each on its own resource, \
                 N = {n} ({:.1} s each in {SLICES} interleaved slices, after {:.1} s warm-up)",
                dur.as_secs_f64(),
                warm.as_secs_f64()
            ),
            &[
                ("cycles/s", Unit::Rate),
                ("cpu/cycle", Unit::Time),
                ("server cpu", Unit::Time),
            ],
        );
        let mut rows = Vec::new();
        for ((name, _), r) in subjects.iter().zip(&results) {
            if let Some(e) = &r.first_error {
                t.note(format!("{name}: {} failed cycles, first: {e}", r.errors));
            }
            let [cpu, server_cpu] = cpu_cells(r.cpu_per_cycle());
            rows.push(t.row(*name, vec![Cell::Val(r.per_sec()), cpu, server_cpu]));
        }
        let (floor, rs) = (rows[0], rows[2]);
        t.ratio(0, floor, "rate/floor");
        t.ratio(0, rs, "rate/rslock");
        t.ratio(1, floor, "cpu/floor");
        t.ratio(1, rs, "cpu/rslock");
        t.note("one lock client (or floor connection set) shared by all tasks; redlock: one thread per task");
        t.note("cpu/cycle = client process CPU time / cycles; server cpu = all redis-servers' CPU time / cycles");
        t.note(probed);
        print!("{}", t.render());
        println!();
        drop(cluster);
    }
}
