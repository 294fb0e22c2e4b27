//! Measuring loops shared by the scenarios: sequential cycles (latency), concurrent workers
//! (throughput), and the CPU time of the client and of the servers around them.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::ROUNDS;
use crate::common::{Cluster, RedisServer, unique};
use crate::support::contender::{Contender, Subject, redlock_cycle};
use crate::support::stats::{cpu_time, pids_cpu_time, summarize};
use crate::support::table::{Cell, Table, Unit};

/// CPU time of this process (the client) and of the Redis servers under test.
#[derive(Clone, Copy, Default)]
pub struct Cpu {
    pub client: Duration,
    pub servers: Duration,
}

/// The pids of the Redis servers whose CPU time is reported (may be empty).
pub type Servers = Arc<[u32]>;

pub fn servers_of(cluster: &Cluster) -> Servers {
    cluster.nodes.iter().map(RedisServer::pid).collect()
}

impl Cpu {
    pub fn now(servers: &[u32]) -> Cpu {
        Cpu {
            client: cpu_time(),
            servers: pids_cpu_time(servers),
        }
    }

    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            client: self.client.saturating_sub(earlier.client),
            servers: self.servers.saturating_sub(earlier.servers),
        }
    }

    pub fn add(&mut self, other: Cpu) {
        self.client += other.client;
        self.servers += other.servers;
    }

    /// Per-cycle client and server CPU, or `None` without cycles.
    pub fn per(self, cycles: f64) -> Option<(Duration, Duration)> {
        (cycles > 0.0).then(|| (self.client.div_f64(cycles), self.servers.div_f64(cycles)))
    }
}

#[derive(Default)]
pub struct Run {
    pub samples: Vec<Duration>,
    pub errors: usize,
    pub first_error: Option<String>,
    pub cpu: Cpu,
    /// The time limit ended the run before all iterations were done.
    pub timed_out: bool,
}

impl Run {
    pub fn record(&mut self, took: Duration, result: Result<(), String>) {
        match result {
            Ok(()) => self.samples.push(took),
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }

    pub fn merge(&mut self, other: Run) {
        self.samples.extend(other.samples);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.cpu.add(other.cpu);
        self.timed_out |= other.timed_out;
    }

    pub fn cpu_per_cycle(&self) -> Option<(Duration, Duration)> {
        self.cpu.per((self.samples.len() + self.errors) as f64)
    }

    pub fn error_note(&self, name: &str) -> Option<String> {
        self.first_error
            .as_ref()
            .map(|e| format!("{name}: {} failed cycles, first: {e}", self.errors))
    }
}

/// `warm` untimed then `iters` timed cycles of `c` on `res`, in a task of the runtime.
/// With `limit`, gives up (marking the run timed out) once that much time has passed.
pub async fn measure(
    c: &Contender,
    res: &str,
    warm: usize,
    iters: usize,
    limit: Option<Duration>,
    servers: &Servers,
) -> Run {
    let c = c.clone();
    let res = res.to_string();
    let servers = Arc::clone(servers);
    tokio::spawn(async move {
        // With a limit, warm-up and timed cycles get `limit` each.
        let mut deadline = limit.map(|l| Instant::now() + l);
        let mut run = Run::default();
        let mut cpu0 = Cpu::now(&servers);
        for i in 0..warm + iters {
            if i == warm {
                deadline = limit.map(|l| Instant::now() + l);
                cpu0 = Cpu::now(&servers);
            }
            let start = Instant::now();
            let result = match deadline {
                None => c.cycle(&res).await,
                Some(deadline) => match tokio::time::timeout_at(deadline, c.cycle(&res)).await {
                    Ok(r) => r,
                    Err(_) => {
                        run.timed_out = true;
                        break;
                    }
                },
            };
            if i >= warm {
                run.record(start.elapsed(), result);
            }
        }
        run.cpu = Cpu::now(&servers).since(cpu0);
        run
    })
    .await
    .expect("measurement task")
}

/// [`measure`] for the synchronous redlock crate, on a blocking thread of the runtime.
pub async fn measure_redlock(
    rl: &Arc<redlock::RedLock>,
    res: &str,
    warm: usize,
    iters: usize,
    servers: &Servers,
) -> Run {
    let rl = Arc::clone(rl);
    let servers = Arc::clone(servers);
    let res = res.as_bytes().to_vec();
    tokio::task::spawn_blocking(move || {
        let mut run = Run::default();
        for _ in 0..warm {
            let _ = redlock_cycle(&rl, &res);
        }
        let cpu0 = Cpu::now(&servers);
        for _ in 0..iters {
            let start = std::time::Instant::now();
            let result = redlock_cycle(&rl, &res);
            run.record(start.elapsed(), result);
        }
        run.cpu = Cpu::now(&servers).since(cpu0);
        run
    })
    .await
    .expect("redlock measurement thread")
}

/// Where [`interleaved_on`] runs one subject: the resource it cycles on, and the servers
/// whose CPU time its runs are charged.
#[derive(Clone)]
pub struct Placement {
    pub resource: String,
    pub servers: Servers,
}

/// Warms every subject up, then measures `iters` cycles of each in [`ROUNDS`] chunks:
/// the async subjects interleaved in [`order`], then each sync one (redlock) by itself.
/// Each subject keeps its own resource; every run is charged the CPU of `servers`.
pub async fn interleaved(
    subjects: &[Subject],
    warm: usize,
    iters: usize,
    servers: &Servers,
) -> Vec<Run> {
    let placements: Vec<Placement> = (subjects.iter())
        .map(|_| Placement {
            resource: unique("lat"),
            servers: Arc::clone(servers),
        })
        .collect();
    interleaved_on(subjects, &placements, warm, iters).await
}

/// [`interleaved`] with each subject at its own [`Placement`] (one per subject, in order).
pub async fn interleaved_on(
    subjects: &[Subject],
    placements: &[Placement],
    warm: usize,
    iters: usize,
) -> Vec<Run> {
    assert_eq!(
        subjects.len(),
        placements.len(),
        "one placement per subject"
    );
    let chunk = |i: usize, warm: usize, iters: usize| {
        let s = subjects[i].clone();
        let Placement { resource, servers } = placements[i].clone();
        async move {
            match &s {
                Subject::Async(c) => measure(c, &resource, warm, iters, None, &servers).await,
                Subject::Sync(rl) => measure_redlock(rl, &resource, warm, iters, &servers).await,
            }
        }
    };
    let (sync, alike) = split_sync(subjects);
    for &i in &alike {
        chunk(i, warm, 0).await;
    }
    let mut runs: Vec<Run> = subjects.iter().map(|_| Run::default()).collect();
    let per_round = iters.div_ceil(ROUNDS);
    for round in 0..ROUNDS {
        for i in order(&alike, round) {
            runs[i].merge(chunk(i, 0, per_round).await);
        }
    }
    for i in sync {
        chunk(i, warm, 0).await;
        for _ in 0..ROUNDS {
            runs[i].merge(chunk(i, 0, per_round).await);
        }
    }
    runs
}

/// The indices of the sync subjects and of the others.
fn split_sync(subjects: &[Subject]) -> (Vec<usize>, Vec<usize>) {
    (0..subjects.len()).partition(|&i| matches!(subjects[i], Subject::Sync(_)))
}

/// The order of `subjects` in `round`: rotated by one every round and reversed every other
/// round, so that no subject always runs right after the same one. (A rotation alone keeps
/// the cyclic order: the first subject always followed the last. With the sync redlock
/// last, whose threads use ~10x the others' CPU per cycle, the first, the floor, did 0.71x
/// rslock's rate in scenario 2 at N = 1, and 0.94-0.96x with redlock measured apart.)
pub fn order(subjects: &[usize], round: usize) -> Vec<usize> {
    let n = subjects.len();
    let mut out: Vec<usize> = (0..n).map(|k| subjects[(k + round) % n]).collect();
    if round % 2 == 1 {
        out.reverse();
    }
    out
}

/// redlock on a plain thread that may hang for good (its sockets have no timeouts):
/// collects what finishes within `limit`, then tells the thread to stop after its current
/// cycle. Returns the thread so the caller can join it once the hanging peer is gone.
pub async fn measure_redlock_bounded(
    urls: &[String],
    res: &str,
    warm: usize,
    iters: usize,
    limit: Duration,
) -> (Run, std::thread::JoinHandle<()>) {
    let rl = redlock::RedLock::new(urls.to_vec());
    let res = res.as_bytes().to_vec();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = std::sync::mpsc::channel::<(bool, Duration, Result<(), String>)>();
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::Builder::new()
            .name("redlock-bounded".into())
            .spawn(move || {
                for i in 0..warm + iters {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let start = std::time::Instant::now();
                    let result = redlock_cycle(&rl, &res);
                    if tx.send((i >= warm, start.elapsed(), result)).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn redlock thread")
    };
    let run = tokio::task::spawn_blocking(move || {
        // Warm-up and timed cycles get `limit` each.
        let mut deadline = std::time::Instant::now() + limit;
        let mut run = Run::default();
        let mut seen = 0;
        while seen < warm + iters {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok((timed, took, result)) => {
                    seen += 1;
                    if timed {
                        run.record(took, result);
                    }
                    if seen == warm {
                        deadline = std::time::Instant::now() + limit;
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    run.timed_out = true;
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        stop.store(true, Ordering::SeqCst);
        run
    })
    .await
    .expect("redlock collector");
    (run, thread)
}

/// Waits up to `limit` for `thread` to end; leaves it running otherwise.
pub fn join_within(thread: std::thread::JoinHandle<()>, limit: Duration) -> bool {
    let start = std::time::Instant::now();
    while !thread.is_finished() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = thread.join();
    true
}

// ---------------------------------------------------------------------------------------
// Throughput: concurrent workers, each on its own resource.

#[derive(Default)]
pub struct Throughput {
    pub cycles: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub dur: Duration,
    pub cpu: Cpu,
}

impl Throughput {
    pub fn per_sec(&self) -> f64 {
        self.cycles as f64 / self.dur.as_secs_f64()
    }

    pub fn cpu_per_cycle(&self) -> Option<(Duration, Duration)> {
        self.cpu.per(self.cycles as f64)
    }

    pub fn merge(&mut self, other: Throughput) {
        self.cycles += other.cycles;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.dur += other.dur;
        self.cpu.add(other.cpu);
    }
}

pub type WorkerResult = (u64, u64, Option<String>);

/// `tasks` workers cycling for `warm` untimed, then for `dur` counted.
pub async fn throughput(
    s: &Subject,
    tasks: usize,
    warm: Duration,
    dur: Duration,
    servers: &Servers,
) -> Throughput {
    let start_at = Instant::now() + warm;
    let end_at = start_at + dur;
    let workers: Vec<tokio::task::JoinHandle<WorkerResult>> = match s {
        Subject::Async(c) => (0..tasks)
            .map(|_| {
                let c = c.clone();
                let res = unique("tput");
                tokio::spawn(async move {
                    while Instant::now() < start_at {
                        let _ = c.cycle(&res).await;
                    }
                    let (mut n, mut errors, mut first_error) = (0, 0, None);
                    while Instant::now() < end_at {
                        match c.cycle(&res).await {
                            Ok(()) if Instant::now() <= end_at => n += 1,
                            Ok(()) => {}
                            Err(e) => {
                                errors += 1;
                                first_error.get_or_insert(e);
                            }
                        }
                    }
                    (n, errors, first_error)
                })
            })
            .collect(),
        Subject::Sync(rl) => {
            let (start_std, end_std) = (start_at.into_std(), end_at.into_std());
            (0..tasks)
                .map(|_| {
                    let rl = Arc::clone(rl);
                    let res = unique("tput").into_bytes();
                    tokio::task::spawn_blocking(move || {
                        while std::time::Instant::now() < start_std {
                            let _ = redlock_cycle(&rl, &res);
                        }
                        let (mut n, mut errors, mut first_error) = (0, 0, None);
                        while std::time::Instant::now() < end_std {
                            match redlock_cycle(&rl, &res) {
                                Ok(()) if std::time::Instant::now() <= end_std => n += 1,
                                Ok(()) => {}
                                Err(e) => {
                                    errors += 1;
                                    first_error.get_or_insert(e);
                                }
                            }
                        }
                        (n, errors, first_error)
                    })
                })
                .collect()
        }
    };
    tokio::time::sleep_until(start_at).await;
    let cpu0 = Cpu::now(servers);
    tokio::time::sleep_until(end_at).await;
    let cpu = Cpu::now(servers).since(cpu0);
    let mut total = Throughput {
        dur: end_at - start_at,
        cpu,
        ..Throughput::default()
    };
    for w in workers {
        let (n, errors, first_error) = w.await.expect("throughput worker");
        total.merge(Throughput {
            cycles: n,
            errors,
            first_error,
            ..Throughput::default()
        });
    }
    total
}

/// How long [`throughput_interleaved`] runs each subject.
#[derive(Clone, Copy)]
pub struct Slices {
    /// Concurrent tasks, each cycling on its own resource.
    pub tasks: usize,
    /// Untimed run of every subject before the first slice.
    pub warm: Duration,
    /// Untimed start of every slice.
    pub slice_warm: Duration,
    /// Counted time of each subject, over all slices.
    pub dur: Duration,
    pub slices: usize,
}

/// Warms every subject up, then measures [`throughput`] of each: the async subjects in
/// `slices` interleaved slices in [`order`], then each sync one (redlock) by itself.
pub async fn throughput_interleaved(
    subjects: &[Subject],
    how: Slices,
    servers: &Servers,
) -> Vec<Throughput> {
    let (sync, alike) = split_sync(subjects);
    for &i in &alike {
        throughput(&subjects[i], how.tasks, how.warm, Duration::ZERO, servers).await;
    }
    let mut results: Vec<Throughput> = subjects.iter().map(|_| Throughput::default()).collect();
    let slice = how.dur / how.slices.max(1) as u32;
    for k in 0..how.slices {
        for i in order(&alike, k) {
            let r = throughput(&subjects[i], how.tasks, how.slice_warm, slice, servers).await;
            results[i].merge(r);
        }
    }
    for i in sync {
        results[i] = throughput(&subjects[i], how.tasks, how.warm, how.dur, servers).await;
    }
    results
}

/// Client and server CPU-per-cycle cells.
pub fn cpu_cells(per: Option<(Duration, Duration)>) -> [Cell; 2] {
    match per {
        Some((client, servers)) => [Cell::time(client), Cell::time(servers)],
        None => [Cell::Empty, Cell::Empty],
    }
}

/// The table of an uncontended latency run: per subject its p50, p99, client and server CPU
/// per cycle (with a note for a subject whose cycles failed), titled `title`.
pub fn latency_table(title: String, subjects: &[(&'static str, Subject)], runs: &[Run]) -> Table {
    let mut t = Table::new(
        title,
        &[
            ("p50", Unit::Time),
            ("p99", Unit::Time),
            ("cpu/cycle", Unit::Time),
            ("server cpu", Unit::Time),
        ],
    );
    for ((name, _), run) in subjects.iter().zip(runs) {
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
    t
}
