//! Scenario 5: client memory (RSS) around 100 000 lock/release cycles, N = 3.

use std::time::Duration;

use tokio::time::Instant;

use crate::common::{Cluster, unique};
use crate::support::contender::{Contender, defaults, quorum};
use crate::support::measure::Run;
use crate::support::stats::rss_kib;
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, QUORUM};

/// `total` cycles split over `tasks` tasks; returns the time taken and the failed cycles.
pub async fn cycles_concurrently(
    rl: &quorum_lock::Redlock,
    tasks: usize,
    total: usize,
) -> (Duration, Run) {
    let start = Instant::now();
    let workers: Vec<_> = (0..tasks)
        .map(|i| {
            let c = Contender::Quorum(rl.clone());
            let res = unique("s5");
            let n = total / tasks + usize::from(i < total % tasks);
            tokio::spawn(async move {
                let mut run = Run::default();
                for _ in 0..n {
                    if let Err(e) = c.cycle(&res).await {
                        run.record(Duration::ZERO, Err(e));
                    }
                }
                run
            })
        })
        .collect();
    let mut failures = Run::default();
    for w in workers {
        failures.merge(w.await.expect("memory worker"));
    }
    (start.elapsed(), failures)
}

pub async fn run(cfg: Cfg) {
    const TASKS: usize = 16;
    let total = cfg.n(100_000);
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let mut t = Table::new(
        format!(
            "Scenario 5: client memory around quorum-lock lock/release cycles, N = 3, \
             {TASKS} concurrent tasks on their own resources"
        ),
        &[
            ("VmRSS", Unit::KiB),
            ("delta", Unit::KiB),
            ("VmHWM", Unit::KiB),
            ("tokio tasks", Unit::Num(0)),
            ("cycles/s", Unit::Rate),
        ],
    );
    let alive = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks() as f64
    };
    let mut prev = rss_kib().0;
    let mut checkpoint = |t: &mut Table, name: &str, rate: Option<f64>| {
        let (rss, hwm) = rss_kib();
        t.row(
            name,
            vec![
                Cell::Val(rss as f64),
                Cell::Val(rss as f64 - prev as f64),
                Cell::Val(hwm as f64),
                Cell::Val(alive()),
                rate.map_or(Cell::Empty, Cell::Val),
            ],
        );
        prev = rss;
    };
    checkpoint(&mut t, "servers up, no client", None);
    let rl = quorum(&urls, defaults).await;
    let warm = cfg.n(1000);
    let mut failures = cycles_concurrently(&rl, TASKS, warm).await.1;
    tokio::time::sleep(Duration::from_millis(100)).await;
    checkpoint(&mut t, &format!("client + {warm} warm-up cycles"), None);
    for label in ["after", "after another"] {
        let (took, failed) = cycles_concurrently(&rl, TASKS, total).await;
        failures.merge(failed);
        // Let background release stragglers finish so task counts are settled.
        tokio::time::sleep(Duration::from_millis(100)).await;
        checkpoint(
            &mut t,
            &format!("{label} {total} cycles"),
            Some(total as f64 / took.as_secs_f64()),
        );
    }
    t.note("delta = change from the previous row; VmHWM = peak RSS of the whole process so far");
    t.note("(earlier scenarios in the same run raise VmHWM and leave allocator caches behind)");
    if let Some(note) = failures.error_note(QUORUM) {
        t.note(note);
    }
    print!("{}", t.render());
    println!();
    drop(rl);
    drop(cluster);
}
