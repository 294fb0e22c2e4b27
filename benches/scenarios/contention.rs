//! Scenario 4: contention, 8 tasks on one resource, N = 5, sharing one client or one each.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::common::{Cluster, RedisServer, unique};
use crate::support::contender::{Contender, Tune, defaults, floor_nodes, polling_only, quorum};
use crate::support::stats::{commandstats_sum, delta, ms_f, percentile, summarize};
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, QUORUM, RSLOCK};

pub struct Acq {
    task: usize,
    asked: Instant,
    got: Instant,
    /// How long the critical section actually took.
    held: Duration,
    released: Instant,
}

/// Contention results, merged over slices.
#[derive(Default)]
pub struct Contention {
    pub acquisitions: usize,
    pub per_task: Vec<usize>,
    /// Signed nanoseconds from a release returning to a different task's lock returning.
    handoffs: Vec<i128>,
    /// Consecutive acquisitions by the same task / all consecutive pairs.
    same: usize,
    pairs: usize,
    pub waits: Vec<Duration>,
    holds: Vec<Duration>,
    pub errors: usize,
    pub first_error: Option<String>,
    pub commands: BTreeMap<String, u64>,
    pub dur: Duration,
    /// How long each task still waiting at the end of a slice had waited by then (a lower
    /// bound of its wait; not in `waits`).
    pub pending: Vec<Duration>,
}

impl Contention {
    /// Commands counted by `INFO commandstats` on all nodes per acquisition.
    pub fn commands_per_acquisition(&self) -> f64 {
        self.commands.values().sum::<u64>() as f64 / self.acquisitions.max(1) as f64
    }

    pub fn absorb(&mut self, mut acqs: Vec<Acq>, tasks: usize) {
        acqs.sort_by_key(|a| a.got);
        self.per_task.resize(tasks, 0);
        for a in &acqs {
            self.per_task[a.task] += 1;
            self.waits.push(a.got - a.asked);
            self.holds.push(a.held);
        }
        for w in acqs.windows(2) {
            self.pairs += 1;
            if w[0].task == w[1].task {
                self.same += 1;
            } else {
                let gap = if w[1].got >= w[0].released {
                    (w[1].got - w[0].released).as_nanos() as i128
                } else {
                    -((w[0].released - w[1].got).as_nanos() as i128)
                };
                self.handoffs.push(gap);
            }
        }
        self.acquisitions += acqs.len();
    }
}

/// `tasks` tasks (task `i` uses `clients[i % len]`) lock one fresh resource for `dur`,
/// holding each acquisition for `hold`. Waiters still pending at the end are cancelled.
pub async fn contention_slice(
    clients: &[Contender],
    tasks: usize,
    dur: Duration,
    hold: Duration,
    admin: &mut [redis::Connection],
    out: &mut Contention,
) {
    let res = unique("s4");
    let before = commandstats_sum(admin);
    let deadline = Instant::now() + dur;
    let workers: Vec<_> = (0..tasks)
        .map(|task| {
            let c = clients[task % clients.len()].clone();
            let res = res.clone();
            tokio::spawn(async move {
                let mut acqs = Vec::new();
                let (mut errors, mut first_error, mut pending) = (0, None, None);
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    let held = tokio::select! {
                        held = c.acquire(&res) => held,
                        () = tokio::time::sleep_until(deadline) => {
                            pending = Some(asked.elapsed());
                            break;
                        }
                    };
                    let held = match held {
                        Ok(h) => h,
                        Err(e) => {
                            errors += 1;
                            first_error.get_or_insert(e);
                            continue;
                        }
                    };
                    let got = Instant::now();
                    // The critical section: `hold` of blocking work on a blocking thread
                    // (a thread sleep: within ~0.1 ms of `hold`, where a tokio sleep of
                    // 1 ms takes ~2 ms at the timer's millisecond granularity).
                    tokio::task::spawn_blocking(move || std::thread::sleep(hold))
                        .await
                        .expect("hold");
                    let held_for = got.elapsed();
                    if let Err(e) = c.release(held).await {
                        errors += 1;
                        first_error.get_or_insert(e);
                    }
                    acqs.push(Acq {
                        task,
                        asked,
                        got,
                        held: held_for,
                        released: Instant::now(),
                    });
                }
                (acqs, errors, first_error, pending)
            })
        })
        .collect();
    let mut all = Vec::new();
    for w in workers {
        let (acqs, errors, first_error, pending) = w.await.expect("contention worker");
        all.extend(acqs);
        out.pending.extend(pending);
        out.errors += errors;
        if out.first_error.is_none() {
            out.first_error = first_error;
        }
    }
    // Let background work (release stragglers, cancelled attempts) land in this window.
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (cmd, calls) in delta(&before, &commandstats_sum(admin)) {
        *out.commands.entry(cmd).or_insert(0) += calls;
    }
    out.absorb(all, tasks);
    out.dur += dur;
}

pub async fn run(cfg: Cfg) {
    const TASKS: usize = 8;
    const N: usize = 5;
    const SLICES: usize = 3;
    let hold = Duration::from_millis(1);
    let dur = cfg.d(Duration::from_secs(3));
    let cluster = Cluster::start(N);
    let urls = cluster.urls();
    let mut admin: Vec<redis::Connection> = cluster.nodes.iter().map(RedisServer::conn).collect();

    let nodes = floor_nodes(&urls).await;
    let floor = vec![Contender::Fifo {
        nodes,
        queue: Arc::new(tokio::sync::Mutex::new(())),
    }];
    let per_task = |make: Tune| {
        let urls = urls.clone();
        async move {
            let mut v = Vec::new();
            for _ in 0..TASKS {
                v.push(Contender::Quorum(quorum(&urls, make).await));
            }
            v
        }
    };
    let ql_shared_def = vec![Contender::Quorum(quorum(&urls, defaults).await)];
    let ql_shared_poll = vec![Contender::Quorum(quorum(&urls, polling_only).await)];
    let ql_own_def = per_task(defaults).await;
    let ql_own_poll = per_task(polling_only).await;
    let rs_shared = vec![Contender::Rslock(rslock::LockManager::new(urls.clone()))];
    let rs_own: Vec<Contender> = (0..TASKS)
        .map(|_| Contender::Rslock(rslock::LockManager::new(urls.clone())))
        .collect();
    let contenders: Vec<(String, Vec<Contender>)> = vec![
        ("floor: FIFO queue + 2 rounds".into(), floor),
        (format!("{QUORUM}, notifications on"), ql_shared_def),
        (format!("{QUORUM}, notifications off"), ql_shared_poll),
        (format!("{RSLOCK}, 3 x 0-200 ms"), rs_shared),
        (format!("{QUORUM}, notifications on"), ql_own_def),
        (format!("{QUORUM}, notifications off"), ql_own_poll),
        (format!("{RSLOCK}, 3 x 0-200 ms"), rs_own),
    ];
    // Warm every client's connections outside the measured windows.
    for (_, clients) in &contenders {
        for c in clients {
            c.cycle(&unique("s4-warm")).await.expect("warm-up cycle");
        }
    }
    let mut results: Vec<Contention> = contenders.iter().map(|_| Contention::default()).collect();
    for slice in 0..SLICES {
        for k in 0..contenders.len() {
            let i = (k + slice) % contenders.len();
            contention_slice(
                &contenders[i].1,
                TASKS,
                dur / SLICES as u32,
                hold,
                &mut admin,
                &mut results[i],
            )
            .await;
        }
    }

    // Two groups of rows: one client shared by the 8 tasks, and one client per task (as
    // if 8 processes); the floor heads both.
    for (group, label) in [
        ([0usize, 1, 2, 3], "one client shared by all tasks"),
        ([0, 4, 5, 6], "one client per task (like 8 processes)"),
    ] {
        let title = |part: &str| {
            format!(
                "Scenario 4{part}: contention, {TASKS} tasks on one resource, {label}; hold \
                 {hold:?} (thread sleep on a blocking thread), N = {N}, {:.1} s each in {SLICES} interleaved slices",
                dur.as_secs_f64()
            )
        };
        let mut a = Table::new(
            title(if group[1] == 1 { "a" } else { "c" }),
            &[
                ("acq/s", Unit::Rate),
                ("cmds/acq", Unit::Num(1)),
                ("same-task", Unit::Pct),
                ("acq/task min", Unit::Num(0)),
                ("max", Unit::Num(0)),
            ],
        );
        let mut b = Table::new(
            title(if group[1] == 1 { "b" } else { "d" }),
            &[
                ("handoffs", Unit::Num(0)),
                ("handoff p50", Unit::Time),
                ("handoff p99", Unit::Time),
                ("wait p50", Unit::Time),
                ("wait p99", Unit::Time),
                ("wait max", Unit::Time),
            ],
        );
        for &i in &group {
            let (name, _) = &contenders[i];
            let r = &mut results[i];
            if let Some(e) = &r.first_error {
                a.note(format!("{name}: {} errors, first: {e}", r.errors));
            }
            let acqs = r.acquisitions.max(1) as f64;
            r.handoffs.sort_unstable();
            let wait = summarize(r.waits.clone());
            a.row(
                name.as_str(),
                vec![
                    Cell::Val(r.acquisitions as f64 / r.dur.as_secs_f64()),
                    Cell::Val(r.commands_per_acquisition()),
                    Cell::Val(r.same as f64 / r.pairs.max(1) as f64),
                    Cell::Val(r.per_task.iter().copied().min().unwrap_or(0) as f64),
                    Cell::Val(r.per_task.iter().copied().max().unwrap_or(0) as f64),
                ],
            );
            let (h50, h99) = if r.handoffs.is_empty() {
                (Cell::Empty, Cell::Empty)
            } else {
                (
                    Cell::Val(percentile(&r.handoffs, 50.0) as f64),
                    Cell::Val(percentile(&r.handoffs, 99.0) as f64),
                )
            };
            b.row(
                name.as_str(),
                vec![
                    Cell::Val(r.handoffs.len() as f64),
                    h50,
                    h99,
                    Cell::time(wait.p50),
                    Cell::time(wait.p99),
                    Cell::time(wait.max),
                ],
            );
            let per_cmd: Vec<String> = r
                .commands
                .iter()
                .map(|(cmd, calls)| format!("{cmd} {:.1}", *calls as f64 / acqs))
                .collect();
            a.note(format!("  {name}: {}", per_cmd.join(", ")));
        }
        let (floor, rs) = (
            contenders[group[0]].0.as_str(),
            contenders[group[3]].0.as_str(),
        );
        a.ratios(&[
            (0, floor, "rate/floor"),
            (0, rs, "rate/rslock"),
            (1, rs, "cmds/rslock"),
        ]);
        b.ratios(&[(3, rs, "wait p50/rslock"), (4, rs, "wait p99/rslock")]);
        a.note("cmds/acq = INFO commandstats calls on all nodes (commands inside Lua scripts count too) / acquisitions; by command above");
        a.note("same-task = share of acquisitions that went to the task that had just released");
        b.note("handoff = one task's release() returning -> a different task's lock() returning (negative: the");
        b.note("  next owner got its majority before the releaser heard back from every node); handoffs = how many");
        b.note("wait = lock() called -> lock() returned");
        let holds: Vec<String> = group
            .iter()
            .map(|&i| {
                let h = summarize(results[i].holds.clone());
                format!("{:.2}/{:.2} ms", ms_f(h.p50), ms_f(h.p99))
            })
            .collect();
        b.note(format!(
            "hold as measured, p50/p99, rows in order: {}; a fair queue's wait is about 7 x (hold + hand-off)",
            holds.join(", ")
        ));
        print!("{}", a.render());
        println!();
        print!("{}", b.render());
        println!();
    }
    drop(admin);
    drop(cluster);
}
