//! quorum-lock against rslock 0.10 and redlock 2.0, and against floors measured with raw
//! `redis` multiplexed connections in the same run, on throw-away local `redis-server`s.
//!
//! ```text
//! cargo bench --bench compare            # every scenario
//! cargo bench --bench compare -- 1 3     # scenarios 1 and 3 only
//! QUICK=1 cargo bench --bench compare    # 10x fewer iterations, 10x shorter runs
//! ```
//!
//! 1. uncontended lock + unlock, one task, N = 1, 3, 5: p50, p99, client CPU per cycle
//! 2. throughput: 16 tasks on their own resources, N = 1 and 5
//! 3. one slow node among 5: 5 ms reply delay (proxy), and a node that never answers
//! 4. contention: 8 tasks on one resource, N = 5, sharing one client or one client each
//! 5. memory: RSS around 100 000 cycles, N = 3
//!
//! Floors: "1 round trip" is one `SET k v NX PX` to one node; "2 rounds" is `SET NX PX` to
//! all N nodes concurrently, then `DEL` to all N concurrently (the minimum traffic of a lock
//! plus unlock), on multiplexed connections with `TCP_NODELAY`.
//!
//! The machine may be shared, so contenders are measured in interleaved rounds (rotating
//! order) rather than one after the other: background load then hits all of them alike.

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::io::tcp::TcpSettings;
use redis::{AsyncConnectionConfig, IntoConnectionInfo};
use tokio::time::Instant;

use common::{BlackHole, Cluster, RedisServer, unique};
use support::proxy::DelayProxy;
use support::stats::{
    commandstats_sum, cpu_time, delta, percentile, pids_cpu_time, rss_kib, summarize,
};
use support::table::{Cell, Table, Unit};

/// Lock TTL everywhere: long enough that no lock ever expires during a bench.
const TTL: Duration = Duration::from_secs(10);
/// quorum-lock's per-node bound (its default), also the floors' bound for a silent node.
const NODE_TIMEOUT: Duration = Duration::from_millis(50);
/// Reply delay of the slow node in scenario 3a.
const SLOW_DELAY: Duration = Duration::from_millis(5);
/// Interleaved rounds per measurement.
const ROUNDS: usize = 10;

const FLOOR_1RTT: &str = "floor: 1 round trip";
const FLOOR_2ROUNDS: &str = "floor: 2 rounds x N";
const QUORUM: &str = "quorum-lock";
const RSLOCK: &str = "rslock 0.10";
const REDLOCK: &str = "redlock 2.0 (sync)";

/// Iteration and duration scaling (`QUICK=1` divides by 10).
#[derive(Clone, Copy)]
struct Cfg {
    quick: bool,
}

impl Cfg {
    fn n(self, full: usize) -> usize {
        if self.quick { (full / 10).max(1) } else { full }
    }

    fn d(self, full: Duration) -> Duration {
        if self.quick { full / 10 } else { full }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; anything else that is not a scenario number is an error.
    let mut selected = Vec::new();
    for arg in std::env::args().skip(1).filter(|a| !a.starts_with('-')) {
        match arg.parse::<u32>() {
            Ok(n @ 1..=5) => selected.push(n),
            _ => {
                eprintln!("usage: cargo bench --bench compare [-- SCENARIO...]  (SCENARIO: 1-5)");
                std::process::exit(2);
            }
        }
    }
    if selected.is_empty() {
        selected = vec![1, 2, 3, 4, 5];
    }
    let cfg = Cfg {
        quick: std::env::var("QUICK").is_ok_and(|v| !v.is_empty() && v != "0"),
    };

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Blocking threads must outlive each measurement: `cpu_time` sums live threads only.
        .thread_keep_alive(Duration::from_secs(3600))
        .build()
        .expect("tokio runtime");
    let started = std::time::Instant::now();
    print_header(cfg, &selected);
    rt.block_on(async {
        for s in selected {
            let t = std::time::Instant::now();
            match s {
                1 => scenario1(cfg).await,
                2 => scenario2(cfg).await,
                3 => scenario3(cfg).await,
                4 => scenario4(cfg).await,
                _ => scenario5(cfg).await,
            }
            println!(
                "(scenario {s} took {:.1} s; load average now {})\n",
                t.elapsed().as_secs_f64(),
                loadavg()
            );
        }
    });
    rt.shutdown_timeout(Duration::from_secs(5));
    println!(
        "total bench time: {:.1} s; redis-server children still running: {}",
        started.elapsed().as_secs_f64(),
        own_redis_children()
    );
}

fn print_header(cfg: Cfg, selected: &[u32]) {
    let redis_version = std::process::Command::new(common::redis_server_bin())
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    println!("quorum-lock comparison bench");
    println!("  {redis_version}");
    println!(
        "  {cpus} CPUs, tokio multi-thread runtime ({cpus} workers); load average at start {}",
        loadavg()
    );
    println!(
        "  scenarios {selected:?}{}; lock TTL {TTL:?}; quorum-lock node_timeout {NODE_TIMEOUT:?}\n",
        if cfg.quick {
            ", QUICK (10x shorter)"
        } else {
            ""
        }
    );
}

/// The 1/5/15-minute load averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// `redis-server` processes whose parent is this process.
fn own_redis_children() -> usize {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let comm_ok = stat.contains("(redis-server)");
            let ppid = stat
                .rfind(')')
                .and_then(|i| stat[i + 1..].split_whitespace().nth(1))
                .unwrap_or("");
            comm_ok && ppid == me
        })
        .count()
}

// ---------------------------------------------------------------------------------------
// The contenders: floors built on raw connections, quorum-lock, rslock and redlock.

/// One node as the floors see it: a multiplexed connection, or a node that never answers.
#[derive(Clone)]
enum FloorNode {
    Conn(MultiplexedConnection),
    /// Modelled as a request that times out after [`NODE_TIMEOUT`].
    Silent,
}

async fn floor_conn(url: &str) -> FloorNode {
    let info = url
        .into_connection_info()
        .expect("node URL")
        .set_tcp_settings(TcpSettings::default().set_nodelay(true));
    let client = redis::Client::open(info).expect("redis client");
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(None);
    let conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("floor connection");
    FloorNode::Conn(conn)
}

async fn floor_nodes(urls: &[String]) -> Arc<Vec<FloorNode>> {
    let mut nodes = Vec::with_capacity(urls.len());
    for url in urls {
        nodes.push(floor_conn(url).await);
    }
    Arc::new(nodes)
}

/// Sends `cmd` to every node at once and returns when `need` of them answered; the rest
/// are dropped (a command already written is still executed by its server).
async fn round(nodes: &[FloorNode], need: usize, cmd: Arc<redis::Cmd>) {
    let mut pending: FuturesUnordered<_> = nodes
        .iter()
        .map(|node| {
            let node = node.clone();
            let cmd = Arc::clone(&cmd);
            async move {
                match node {
                    FloorNode::Conn(mut conn) => {
                        let _ = cmd.query_async::<redis::Value>(&mut conn).await;
                    }
                    FloorNode::Silent => tokio::time::sleep(NODE_TIMEOUT).await,
                }
            }
        })
        .collect();
    let mut answered = 0;
    while pending.next().await.is_some() {
        answered += 1;
        if answered >= need {
            break;
        }
    }
}

fn set_nx_px(key: &str, ttl_ms: u64) -> Arc<redis::Cmd> {
    let mut cmd = redis::cmd("SET");
    cmd.arg(key).arg("1").arg("NX").arg("PX").arg(ttl_ms);
    Arc::new(cmd)
}

fn del(key: &str) -> Arc<redis::Cmd> {
    let mut cmd = redis::cmd("DEL");
    cmd.arg(key);
    Arc::new(cmd)
}

/// Something that locks asynchronously.
#[derive(Clone)]
enum Contender {
    /// One `SET NX PX` (fresh key, 1 s TTL) to the first node.
    OneTrip(Arc<Vec<FloorNode>>),
    /// `SET NX PX` to all nodes, then `DEL` to all; each round done at `need` answers.
    TwoRounds {
        nodes: Arc<Vec<FloorNode>>,
        need: usize,
    },
    /// [`Contender::TwoRounds`] (all answers) serialised by an in-process FIFO mutex: the
    /// ideal hand-off of a contended lock with the minimum Redis traffic.
    Fifo {
        nodes: Arc<Vec<FloorNode>>,
        queue: Arc<tokio::sync::Mutex<()>>,
    },
    Quorum(quorum_lock::Redlock),
    Rslock(rslock::LockManager),
}

enum Held {
    Nothing,
    Key(String),
    Fifo(tokio::sync::OwnedMutexGuard<()>, String),
    Quorum(quorum_lock::LockGuard),
    Rslock(rslock::Lock),
}

impl Contender {
    /// Acquires `res`, waiting (with the implementation's own retries) while it is taken.
    async fn acquire(&self, res: &str) -> Result<Held, String> {
        match self {
            Contender::OneTrip(nodes) => {
                static SEQ: AtomicU64 = AtomicU64::new(0);
                let key = format!("{res}:{}", SEQ.fetch_add(1, Ordering::Relaxed));
                round(&nodes[..1], 1, set_nx_px(&key, 1000)).await;
                Ok(Held::Nothing)
            }
            Contender::TwoRounds { nodes, need } => {
                round(nodes, *need, set_nx_px(res, ms(TTL))).await;
                Ok(Held::Key(res.to_string()))
            }
            Contender::Fifo { nodes, queue } => {
                let turn = Arc::clone(queue).lock_owned().await;
                round(nodes, nodes.len(), set_nx_px(res, ms(TTL))).await;
                Ok(Held::Fifo(turn, res.to_string()))
            }
            Contender::Quorum(rl) => rl
                .lock(res, TTL)
                .await
                .map(Held::Quorum)
                .map_err(|e| format!("lock: {e}")),
            // rslock's own "wait until acquired" loop (`lock` with its 3 tries, repeated).
            Contender::Rslock(lm) => lm
                .acquire_no_guard(res.as_bytes(), TTL)
                .await
                .map(Held::Rslock)
                .map_err(|e| format!("lock: {e}")),
        }
    }

    async fn release(&self, held: Held) -> Result<(), String> {
        match (self, held) {
            (_, Held::Nothing) => Ok(()),
            (Contender::TwoRounds { nodes, need }, Held::Key(key)) => {
                round(nodes, *need, del(&key)).await;
                Ok(())
            }
            (Contender::Fifo { nodes, .. }, Held::Fifo(turn, key)) => {
                round(nodes, nodes.len(), del(&key)).await;
                drop(turn);
                Ok(())
            }
            (_, Held::Quorum(guard)) => guard
                .release()
                .await
                .map(drop)
                .map_err(|e| format!("release: {e}")),
            (Contender::Rslock(lm), Held::Rslock(lock)) => {
                lm.unlock(&lock).await;
                Ok(())
            }
            _ => Err("lock released through the wrong contender".into()),
        }
    }

    async fn cycle(&self, res: &str) -> Result<(), String> {
        let held = self.acquire(res).await?;
        self.release(held).await
    }
}

/// A contender of the latency and throughput scenarios: async, or the sync redlock crate
/// (run on blocking threads).
#[derive(Clone)]
enum Subject {
    Async(Contender),
    Sync(Arc<redlock::RedLock>),
}

/// CPU time of this process (the client) and of the Redis servers under test.
#[derive(Clone, Copy, Default)]
struct Cpu {
    client: Duration,
    servers: Duration,
}

/// The pids of the Redis servers whose CPU time is reported (may be empty).
type Servers = Arc<[u32]>;

fn servers_of(cluster: &Cluster) -> Servers {
    cluster.nodes.iter().map(RedisServer::pid).collect()
}

impl Cpu {
    fn now(servers: &[u32]) -> Cpu {
        Cpu {
            client: cpu_time(),
            servers: pids_cpu_time(servers),
        }
    }

    fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            client: self.client.saturating_sub(earlier.client),
            servers: self.servers.saturating_sub(earlier.servers),
        }
    }

    fn add(&mut self, other: Cpu) {
        self.client += other.client;
        self.servers += other.servers;
    }

    /// Per-cycle client and server CPU, or `None` without cycles.
    fn per(self, cycles: f64) -> Option<(Duration, Duration)> {
        (cycles > 0.0).then(|| (self.client.div_f64(cycles), self.servers.div_f64(cycles)))
    }
}

fn ms_f(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

type Tune = fn(quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder;

fn defaults(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b
}

/// Release notifications off: waiters only poll.
fn polling_only(b: quorum_lock::RedlockBuilder) -> quorum_lock::RedlockBuilder {
    b.notifications(false)
}

/// A connected quorum-lock client with its defaults, except: `node_timeout` set explicitly
/// (to its default), and no restart quarantine, which would ignore the votes of servers
/// started less than the longest TTL ago, i.e. every server of this bench.
async fn quorum(urls: &[String], tune: Tune) -> quorum_lock::Redlock {
    let rl = tune(
        quorum_lock::Redlock::builder()
            .nodes(urls)
            .node_timeout(NODE_TIMEOUT)
            .restart_quarantine(false),
    )
    .build()
    .expect("build quorum-lock client");
    rl.connect().await.expect("quorum-lock connect");
    rl
}

fn redlock_cycle(rl: &redlock::RedLock, res: &[u8]) -> Result<(), String> {
    match rl.lock(res, usize::try_from(ms(TTL)).unwrap_or(usize::MAX)) {
        Ok(Some(lock)) => {
            rl.unlock(&lock);
            Ok(())
        }
        Ok(None) => Err("redlock: not acquired after its retries".into()),
        Err(e) => Err(format!("redlock: {e}")),
    }
}

// ---------------------------------------------------------------------------------------
// Latency: sequential cycles.

#[derive(Default)]
struct Run {
    samples: Vec<Duration>,
    errors: usize,
    first_error: Option<String>,
    cpu: Cpu,
    /// The time limit ended the run before all iterations were done.
    timed_out: bool,
}

impl Run {
    fn record(&mut self, took: Duration, result: Result<(), String>) {
        match result {
            Ok(()) => self.samples.push(took),
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }

    fn merge(&mut self, other: Run) {
        self.samples.extend(other.samples);
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.cpu.add(other.cpu);
        self.timed_out |= other.timed_out;
    }

    fn cpu_per_cycle(&self) -> Option<(Duration, Duration)> {
        self.cpu.per((self.samples.len() + self.errors) as f64)
    }

    fn error_note(&self, name: &str) -> Option<String> {
        self.first_error
            .as_ref()
            .map(|e| format!("{name}: {} failed cycles, first: {e}", self.errors))
    }
}

/// `warm` untimed then `iters` timed cycles of `c` on `res`, in a task of the runtime.
/// With `limit`, gives up (marking the run timed out) once that much time has passed.
async fn measure(
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
async fn measure_redlock(
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

/// Warms every subject up, then measures `iters` cycles of each in [`ROUNDS`] interleaved
/// chunks, rotating the order every round. Each subject keeps its own resource.
async fn interleaved(
    subjects: &[Subject],
    warm: usize,
    iters: usize,
    servers: &Servers,
) -> Vec<Run> {
    let resources: Vec<String> = subjects.iter().map(|_| unique("lat")).collect();
    let chunk = |s: &Subject, res: &str, warm: usize, iters: usize| {
        let s = s.clone();
        let res = res.to_string();
        let servers = Arc::clone(servers);
        async move {
            match &s {
                Subject::Async(c) => measure(c, &res, warm, iters, None, &servers).await,
                Subject::Sync(rl) => measure_redlock(rl, &res, warm, iters, &servers).await,
            }
        }
    };
    for (s, res) in subjects.iter().zip(&resources) {
        chunk(s, res, warm, 0).await;
    }
    let mut runs: Vec<Run> = subjects.iter().map(|_| Run::default()).collect();
    let per_round = iters.div_ceil(ROUNDS);
    for round in 0..ROUNDS {
        for k in 0..subjects.len() {
            let i = (k + round) % subjects.len();
            runs[i].merge(chunk(&subjects[i], &resources[i], 0, per_round).await);
        }
    }
    runs
}

/// redlock on a plain thread that may hang for good (its sockets have no timeouts):
/// collects what finishes within `limit`, then tells the thread to stop after its current
/// cycle. Returns the thread so the caller can join it once the hanging peer is gone.
async fn measure_redlock_bounded(
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
fn join_within(thread: std::thread::JoinHandle<()>, limit: Duration) -> bool {
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
struct Throughput {
    cycles: u64,
    errors: u64,
    first_error: Option<String>,
    dur: Duration,
    cpu: Cpu,
}

impl Throughput {
    fn per_sec(&self) -> f64 {
        self.cycles as f64 / self.dur.as_secs_f64()
    }

    fn cpu_per_cycle(&self) -> Option<(Duration, Duration)> {
        self.cpu.per(self.cycles as f64)
    }

    fn merge(&mut self, other: Throughput) {
        self.cycles += other.cycles;
        self.errors += other.errors;
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        self.dur += other.dur;
        self.cpu.add(other.cpu);
    }
}

type WorkerResult = (u64, u64, Option<String>);

/// `tasks` workers cycling for `warm` untimed, then for `dur` counted.
async fn throughput(
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

/// Client and server CPU-per-cycle cells.
fn cpu_cells(per: Option<(Duration, Duration)>) -> [Cell; 2] {
    match per {
        Some((client, servers)) => [Cell::time(client), Cell::time(servers)],
        None => [Cell::Empty, Cell::Empty],
    }
}

// ---------------------------------------------------------------------------------------
// Scenario 1: uncontended latency and CPU.

async fn scenario1(cfg: Cfg) {
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
        print!("{}", t.render());
        println!();
        drop(cluster);
    }
}

// ---------------------------------------------------------------------------------------
// Scenario 2: throughput.

async fn scenario2(cfg: Cfg) {
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
        print!("{}", t.render());
        println!();
        drop(cluster);
    }
}

// ---------------------------------------------------------------------------------------
// Scenario 3: one slow or silent node among five.

struct SlowSetup<'a> {
    title: String,
    urls: &'a [String],
    /// Five healthy nodes: the scenario-1 baseline, measured interleaved in the same run.
    healthy: &'a [String],
    nodes: Arc<Vec<FloorNode>>,
}

async fn scenario3(cfg: Cfg) {
    // (a) node 0 behind a proxy that delays every reply by SLOW_DELAY.
    {
        let cluster = Cluster::start(5);
        let upstream = SocketAddr::from(([127, 0, 0, 1], cluster.nodes[0].port()));
        let proxy = DelayProxy::start(upstream, SLOW_DELAY);
        let healthy = cluster.urls();
        let mut urls = healthy.clone();
        urls[0] = proxy.url();
        let nodes = floor_nodes(&urls).await;
        let setup = SlowSetup {
            title: format!(
                "Scenario 3a: lock + unlock, N = 5, node 0 behind a proxy that delays every \
                 reply by {SLOW_DELAY:?}"
            ),
            urls: &urls,
            healthy: &healthy,
            nodes,
        };
        let thread = slow_table(cfg, setup).await;
        drop(proxy);
        join_within(thread, Duration::from_secs(10));
        drop(cluster);
    }

    // (b) node 0 is a black hole: accepts TCP connections, never answers.
    {
        // Five servers: nodes 1-4 with the black hole in place of node 0, and all five as
        // the healthy baseline.
        let cluster = Cluster::start(5);
        let hole = BlackHole::start();
        let healthy = cluster.urls();
        let mut urls = healthy.clone();
        urls[0] = hole.url();
        let mut nodes = vec![FloorNode::Silent];
        for url in &urls[1..] {
            nodes.push(floor_conn(url).await);
        }
        let setup = SlowSetup {
            title: "Scenario 3b: lock + unlock, N = 5, node 0 a black hole (accepts TCP, never \
                    answers)"
                .to_string(),
            urls: &urls,
            healthy: &healthy,
            nodes: Arc::new(nodes),
        };
        let thread = slow_table(cfg, setup).await;
        // Closing the black hole's sockets unblocks a redlock thread stuck reading.
        drop(hole);
        if !join_within(thread, Duration::from_secs(10)) {
            println!("  (the redlock thread was still blocked 10 s after the black hole closed)");
        }
        drop(cluster);
    }
}

/// Runs and prints one scenario-3 table; returns the redlock thread to join.
async fn slow_table(cfg: Cfg, setup: SlowSetup<'_>) -> std::thread::JoinHandle<()> {
    let warm = cfg.n(100);
    let iters = cfg.n(1000);
    let peer_warm = 1;
    let peer_iters = cfg.n(50).max(5);
    let peer_limit = cfg.d(Duration::from_secs(10)).max(Duration::from_secs(3));
    let SlowSetup {
        title,
        urls,
        healthy,
        nodes,
    } = setup;

    // The fast ones, interleaved.
    let majority = Contender::TwoRounds {
        nodes: Arc::clone(&nodes),
        need: nodes.len() / 2 + 1,
    };
    let ql = Contender::Quorum(quorum(urls, defaults).await);
    let base = Contender::Quorum(quorum(healthy, defaults).await);
    let none: Servers = Arc::new([]);
    let fast = interleaved(
        &[
            Subject::Async(majority),
            Subject::Async(ql),
            Subject::Async(base),
        ],
        warm,
        iters,
        &none,
    )
    .await;
    // The slow ones, each bounded.
    let all = Contender::TwoRounds {
        nodes: Arc::clone(&nodes),
        need: nodes.len(),
    };
    let limit = Some(peer_limit);
    let all_run = measure(&all, &unique("s3"), peer_warm, peer_iters, limit, &none).await;
    let rs = Contender::Rslock(rslock::LockManager::new(urls.to_vec()));
    let rs_run = measure(&rs, &unique("s3"), peer_warm, peer_iters, limit, &none).await;
    let (rl_run, thread) =
        measure_redlock_bounded(urls, &unique("s3"), peer_warm, peer_iters, peer_limit).await;

    let mut t = Table::new(
        format!(
            "{title}\n(quorum-lock node_timeout {NODE_TIMEOUT:?}; quorum-lock and majority floor: \
             {iters} cycles in {ROUNDS} interleaved rounds after {warm} warm-up; others: up to \
             {peer_iters} cycles after {peer_warm} warm-up, within {:.0} s each)",
            peer_limit.as_secs_f64()
        ),
        &[
            ("p50", Unit::Time),
            ("p99", Unit::Time),
            ("cycles", Unit::Num(0)),
        ],
    );
    let mut fast = fast.into_iter();
    let named = [
        ("floor: 2 rounds, majority", fast.next().unwrap_or_default()),
        ("floor: 2 rounds, all N", all_run),
        (QUORUM, fast.next().unwrap_or_default()),
        (RSLOCK, rs_run),
        (REDLOCK, rl_run),
        (
            "quorum-lock, 5 healthy nodes (scenario 1)",
            fast.next().unwrap_or_default(),
        ),
    ];
    let mut rows = Vec::new();
    for (name, run) in &named {
        if let Some(note) = run.error_note(name) {
            t.note(note);
        }
        let s = summarize(run.samples.clone());
        let cells = if s.n == 0 {
            let why = if run.timed_out { "timeout" } else { "n/a" };
            vec![
                Cell::Text(why.into()),
                Cell::Text(why.into()),
                Cell::Val(0.0),
            ]
        } else if run.timed_out {
            vec![
                Cell::time(s.p50),
                Cell::time(s.p99),
                Cell::ValNote(s.n as f64, "(then timeout)".into()),
            ]
        } else {
            vec![Cell::time(s.p50), Cell::time(s.p99), Cell::Val(s.n as f64)]
        };
        rows.push(t.row(*name, cells));
    }
    t.ratio(0, rows[0], "p50/floor");
    t.ratio(0, rows[3], "p50/rslock");
    t.ratio(0, rows[5], "p50/healthy");
    t.note(
        "\"5 healthy nodes\": quorum-lock on the same servers without the slow or silent one, \
         interleaved with the rows above (the issue's target: p50 within 1.1x of it)",
    );
    t.note(
        "floor (for ratios) = 2 parallel rounds that each return at the first majority of answers;",
    );
    t.note("\"all N\" waits for every node (a silent node counts as answered after 50 ms)");
    print!("{}", t.render());
    println!();
    thread
}

// ---------------------------------------------------------------------------------------
// Scenario 4: contention.

struct Acq {
    task: usize,
    asked: Instant,
    got: Instant,
    /// How long the critical section actually took.
    held: Duration,
    released: Instant,
}

/// Contention results, merged over slices.
#[derive(Default)]
struct Contention {
    acquisitions: usize,
    per_task: Vec<usize>,
    /// Signed nanoseconds from a release returning to a different task's lock returning.
    handoffs: Vec<i128>,
    /// Consecutive acquisitions by the same task / all consecutive pairs.
    same: usize,
    pairs: usize,
    waits: Vec<Duration>,
    holds: Vec<Duration>,
    errors: usize,
    first_error: Option<String>,
    commands: BTreeMap<String, u64>,
    dur: Duration,
}

impl Contention {
    fn absorb(&mut self, mut acqs: Vec<Acq>, tasks: usize) {
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
async fn contention_slice(
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
                let (mut errors, mut first_error) = (0, None);
                while Instant::now() < deadline {
                    let asked = Instant::now();
                    let held = tokio::select! {
                        held = c.acquire(&res) => held,
                        () = tokio::time::sleep_until(deadline) => break,
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
                (acqs, errors, first_error)
            })
        })
        .collect();
    let mut all = Vec::new();
    for w in workers {
        let (acqs, errors, first_error) = w.await.expect("contention worker");
        all.extend(acqs);
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

async fn scenario4(cfg: Cfg) {
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
        let mut rows = Vec::new();
        for &i in &group {
            let (name, _) = &contenders[i];
            let r = &mut results[i];
            if let Some(e) = &r.first_error {
                a.note(format!("{name}: {} errors, first: {e}", r.errors));
            }
            let acqs = r.acquisitions.max(1) as f64;
            let total_cmds: u64 = r.commands.values().sum();
            r.handoffs.sort_unstable();
            let wait = summarize(r.waits.clone());
            let row = a.row(
                name.as_str(),
                vec![
                    Cell::Val(r.acquisitions as f64 / r.dur.as_secs_f64()),
                    Cell::Val(total_cmds as f64 / acqs),
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
            rows.push(row);
            let per_cmd: Vec<String> = r
                .commands
                .iter()
                .map(|(cmd, calls)| format!("{cmd} {:.1}", *calls as f64 / acqs))
                .collect();
            a.note(format!("  {name}: {}", per_cmd.join(", ")));
        }
        let (floor_row, rs_row) = (rows[0], rows[3]);
        a.ratio(0, floor_row, "rate/floor");
        a.ratio(0, rs_row, "rate/rslock");
        a.ratio(1, rs_row, "cmds/rslock");
        b.ratio(3, rs_row, "wait p50/rslock");
        b.ratio(4, rs_row, "wait p99/rslock");
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

// ---------------------------------------------------------------------------------------
// Scenario 5: memory.

/// `total` cycles split over `tasks` tasks; returns the time taken and the failed cycles.
async fn cycles_concurrently(
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

async fn scenario5(cfg: Cfg) {
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
