//! Scenario 10: fairness between clients. Every client is a `Redlock` built on its own (its
//! own connections, waiting-list id and local queue: what a separate process has), N = 3,
//! and its tasks loop on one name for a fixed time: take, hold, give back. Per client:
//! acquisitions, share and waits; per case: Jain's index of the acquisitions, max/min and
//! the longest single wait.
//!
//! The cases: (a) the semaphore, K = 4, with 4 clients of 4 tasks and 16 clients of 1 task;
//! (b) the read-write lock, 3 writer clients of 1 task and 3 reader clients of 2 tasks on
//! one name; the mutex with 4 clients of 4 tasks as the reference (K = 1).

use std::time::{Duration, Instant};

use quorum_lock::{LockGuard, Permit, ReadGuard, Redlock, RwLock, Semaphore};

use crate::common::{Cluster, unique};
use crate::support::contender::{defaults, quorum};
use crate::support::stats::{jain, summarize};
use crate::support::table::{Cell, Table, Unit};
use crate::{Cfg, TTL};

const NODES: usize = 3;
const PERMITS: u32 = 4;
/// How long a permit, the mutex or the write lock is held.
const HOLD: Duration = Duration::from_millis(1);
/// How long a read lock is held.
const READ_HOLD: Duration = Duration::from_millis(2);
/// How long the tasks of one case loop (`QUICK=1`: a tenth).
const RUN: Duration = Duration::from_secs(5);
/// Every wait's budget: far beyond the run, so that a starved task shows as a long wait
/// rather than as an error.
const WAIT: Duration = Duration::from_secs(60);

/// What the tasks of one client take, through that client's own handle.
#[derive(Clone)]
enum Take {
    Permit(Semaphore),
    Mutex(Redlock, String),
    Read(RwLock),
    Write(RwLock),
}

/// What a task holds.
enum Held {
    Permit(Permit),
    Guard(LockGuard),
    Read(ReadGuard),
}

impl Take {
    async fn take(&self) -> quorum_lock::Result<Held> {
        Ok(match self {
            Take::Permit(sem) => Held::Permit(sem.acquire(TTL).wait(WAIT).await?),
            Take::Mutex(rl, name) => Held::Guard(rl.lock(name.as_str(), TTL).wait(WAIT).await?),
            Take::Read(rw) => Held::Read(rw.read(TTL).wait(WAIT).await?),
            Take::Write(rw) => Held::Guard(rw.write(TTL).wait(WAIT).await?),
        })
    }

    fn hold(&self) -> Duration {
        match self {
            Take::Read(_) => READ_HOLD,
            _ => HOLD,
        }
    }
}

impl Held {
    async fn release(self) -> quorum_lock::Result<()> {
        match self {
            Held::Permit(p) => p.release().await.map(drop),
            Held::Guard(g) => g.release().await.map(drop),
            Held::Read(r) => r.release().await.map(drop),
        }
    }
}

/// A group of like clients of one case: `count` clients of `tasks` tasks each.
struct Group {
    /// `writer`, `reader` or `client`: the rows are `<role> 1`, `<role> 2`, ...
    role: &'static str,
    count: usize,
    tasks: usize,
    take: fn(&Redlock, &str) -> Take,
}

impl Group {
    fn new(
        role: &'static str,
        count: usize,
        tasks: usize,
        take: fn(&Redlock, &str) -> Take,
    ) -> Self {
        Group {
            role,
            count,
            tasks,
            take,
        }
    }
}

/// What one client's tasks did.
#[derive(Default)]
struct ClientRun {
    acquired: usize,
    waits: Vec<Duration>,
    errors: Vec<String>,
}

/// One case's clients, each with the group it belongs to (an index into the case's groups).
struct CaseRun {
    clients: Vec<(usize, ClientRun)>,
    elapsed: Duration,
}

pub async fn run(cfg: Cfg) {
    let cluster = Cluster::start(NODES);
    let urls = cluster.urls();
    let run = cfg.d(RUN);
    print_header(run);
    let mut summary = Table::new(
        "Scenario 10 summary: fairness over the clients of each role",
        &[
            ("clients", Unit::Num(0)),
            ("acq/s", Unit::Rate),
            ("Jain", Unit::Num(3)),
            ("max/min", Unit::Num(2)),
            ("wait p50", Unit::Time),
            ("wait p99", Unit::Time),
            ("longest wait", Unit::Time),
        ],
    );
    for case in cases() {
        let outcome = run_case(&urls, &case.groups, run).await;
        print!("{}", client_table(&case, run, &outcome).render());
        println!();
        for (g, group) in case.groups.iter().enumerate() {
            let label = if case.groups.len() > 1 {
                format!(
                    "{} {}s, {} x {}",
                    case.short, group.role, group.count, group.tasks
                )
            } else {
                format!("{}, {} x {}", case.short, group.count, group.tasks)
            };
            summary.row(label, summary_cells(&outcome, g));
        }
    }
    summary.note("rows: clients x tasks per client; acq/s: acquisitions of the role's clients together per second, drain included");
    summary.note("max/min: the most acquisitions of one client over the fewest (inf: a client never acquired)");
    print!("{}", summary.render());
    println!();
    drop(cluster);
}

fn print_header(run: Duration) {
    let text = format!(
        "Scenario 10: fairness between clients, N = {NODES}. Each client is a Redlock built on \
         its own (own connections, waiting-list id and local queue: a separate process's \
         view); its tasks loop for {:.1} s on one name: acquire (TTL {TTL:?}), hold \
         ({HOLD:?}; read locks {READ_HOLD:?}), release. Inside a client, waiting tasks are \
         served in arrival order; between clients, waiters are woken by release \
         notifications and otherwise poll with jittered backoff (the default retry delays: \
         10 ms doubling to 200 ms). Measured per client: acquisitions, their share and the \
         wait (from wanting to holding); per case, over the clients of one role: Jain's \
         index (sum x)^2 / (n sum x^2) of the acquisitions (1 = equal shares, 1/n = one \
         client takes all), max/min and the longest single wait.",
        run.as_secs_f64()
    );
    println!("{}\n", wrap(&text, 100));
}

/// `text` with its words wrapped into lines of at most `width` characters.
fn wrap(text: &str, width: usize) -> String {
    let mut lines: Vec<String> = vec![String::new()];
    for word in text.split_whitespace() {
        let line = lines.last_mut().expect("one line at least");
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(word.to_string());
        } else {
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
    }
    lines.join("\n")
}

/// One case: its clients, all on one name.
struct Case {
    title: String,
    /// The case in the summary's rows.
    short: String,
    groups: Vec<Group>,
}

fn cases() -> [Case; 4] {
    let semaphore = format!("semaphore K = {PERMITS}");
    [
        Case {
            title: format!("{semaphore}, 4 clients x 4 tasks"),
            short: semaphore.clone(),
            groups: vec![Group::new("client", 4, 4, permit)],
        },
        Case {
            title: format!("{semaphore}, 16 clients x 1 task (every waiter its own process)"),
            short: semaphore,
            groups: vec![Group::new("client", 16, 1, permit)],
        },
        Case {
            title: "mutex (K = 1, the reference), 4 clients x 4 tasks".to_string(),
            short: "mutex".to_string(),
            groups: vec![Group::new("client", 4, 4, mutex)],
        },
        Case {
            title: "read-write lock, 3 writer clients x 1 task and 3 reader clients x 2 tasks"
                .to_string(),
            short: "read-write lock".to_string(),
            groups: vec![
                Group::new("writer", 3, 1, write),
                Group::new("reader", 3, 2, read),
            ],
        },
    ]
}

fn permit(rl: &Redlock, name: &str) -> Take {
    Take::Permit(rl.semaphore(name, PERMITS).expect("semaphore"))
}

fn mutex(rl: &Redlock, name: &str) -> Take {
    Take::Mutex(rl.clone(), name.to_string())
}

fn read(rl: &Redlock, name: &str) -> Take {
    Take::Read(rl.rwlock(name).expect("rwlock"))
}

fn write(rl: &Redlock, name: &str) -> Take {
    Take::Write(rl.rwlock(name).expect("rwlock"))
}

/// Builds every client of `groups` (connected), runs their tasks for `run` on a fresh name,
/// then shuts the clients down.
async fn run_case(urls: &[String], groups: &[Group], run: Duration) -> CaseRun {
    let name = unique("s10");
    let mut clients = Vec::new();
    for (g, group) in groups.iter().enumerate() {
        for _ in 0..group.count {
            let rl = quorum(urls, defaults).await;
            let take = (group.take)(&rl, &name);
            clients.push((g, rl, take));
        }
    }
    // Tasks spawned client by client would give the first clients a head start: every
    // task waits for the common start instead.
    let start = Instant::now() + Duration::from_millis(50);
    let mut handles = Vec::new();
    for (g, _, take) in &clients {
        let tasks: Vec<_> = (0..groups[*g].tasks)
            .map(|_| tokio::spawn(task_loop(take.clone(), start, run)))
            .collect();
        handles.push((*g, tasks));
    }
    let mut out = Vec::with_capacity(handles.len());
    for (g, tasks) in handles {
        let mut client = ClientRun::default();
        for task in tasks {
            let one = task.await.expect("bench task");
            client.acquired += one.acquired;
            client.waits.extend(one.waits);
            client.errors.extend(one.errors);
        }
        out.push((g, client));
    }
    let elapsed = start.elapsed();
    for (_, rl, take) in clients {
        drop(take);
        rl.shutdown().await;
    }
    CaseRun {
        clients: out,
        elapsed,
    }
}

/// One task: take, hold, give back, until `run` has passed since `start`.
async fn task_loop(take: Take, start: Instant, run: Duration) -> ClientRun {
    tokio::time::sleep_until(start.into()).await;
    let mut out = ClientRun::default();
    while start.elapsed() < run {
        let wanted = Instant::now();
        match take.take().await {
            Ok(held) => {
                out.waits.push(wanted.elapsed());
                tokio::time::sleep(take.hold()).await;
                if let Err(e) = held.release().await {
                    out.errors.push(format!("release: {e}"));
                }
                out.acquired += 1;
            }
            Err(e) => {
                // Not a timeout of a slow turn (the budget outlasts the run): stop.
                out.errors.push(format!("acquire: {e}"));
                break;
            }
        }
    }
    out
}

/// One row per client: acquisitions, share of its role's total and waits.
fn client_table(case: &Case, run: Duration, outcome: &CaseRun) -> Table {
    let groups = &case.groups;
    let mut t = Table::new(
        format!(
            "Scenario 10: {}, N = {NODES}, {:.1} s run (last task done at {:.2} s)",
            case.title,
            run.as_secs_f64(),
            outcome.elapsed.as_secs_f64()
        ),
        &[
            ("tasks", Unit::Num(0)),
            ("acquisitions", Unit::Num(0)),
            ("share", Unit::Pct),
            ("wait p50", Unit::Time),
            ("wait p99", Unit::Time),
            ("longest wait", Unit::Time),
        ],
    );
    let mut seen = vec![0usize; groups.len()];
    let mut errors = Vec::new();
    for (g, client) in &outcome.clients {
        seen[*g] += 1;
        let role_total: usize = (outcome.clients.iter())
            .filter(|(h, _)| h == g)
            .map(|(_, c)| c.acquired)
            .sum();
        let waits = summarize(client.waits.clone());
        t.row(
            format!("{} {}", groups[*g].role, seen[*g]),
            vec![
                Cell::Val(groups[*g].tasks as f64),
                Cell::Val(client.acquired as f64),
                Cell::Val(client.acquired as f64 / role_total.max(1) as f64),
                Cell::time(waits.p50),
                Cell::time(waits.p99),
                Cell::time(waits.max),
            ],
        );
        errors.extend(client.errors.iter().cloned());
    }
    if groups.len() > 1 {
        t.note("share: of the acquisitions of the clients of the same role");
    }
    if let Some(first) = errors.first() {
        t.note(format!("{} failed calls; the first: {first}", errors.len()));
    }
    t
}

/// The summary row of the clients of group `g`.
fn summary_cells(case: &CaseRun, g: usize) -> Vec<Cell> {
    let clients: Vec<&ClientRun> = (case.clients.iter())
        .filter(|(h, _)| *h == g)
        .map(|(_, c)| c)
        .collect();
    let counts: Vec<f64> = clients.iter().map(|c| c.acquired as f64).collect();
    let total: f64 = counts.iter().sum();
    let most = counts.iter().copied().fold(0.0, f64::max);
    let fewest = counts.iter().copied().fold(f64::INFINITY, f64::min);
    let spread = if fewest > 0.0 {
        Cell::Val(most / fewest)
    } else {
        Cell::Text("inf".to_string())
    };
    let waits = summarize(
        clients
            .iter()
            .flat_map(|c| c.waits.iter().copied())
            .collect(),
    );
    vec![
        Cell::Val(counts.len() as f64),
        Cell::Val(total / case.elapsed.as_secs_f64().max(1e-9)),
        Cell::Val(jain(&counts)),
        spread,
        Cell::time(waits.p50),
        Cell::time(waits.p99),
        Cell::time(waits.max),
    ]
}
