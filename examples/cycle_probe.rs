//! A small, deterministic probe of the client's own cost, for `valgrind --tool=callgrind`
//! and `--tool=dhat` (timings belong in `benches/compare.rs`; this one counts).
//!
//! ```sh
//! cargo build --release --example cycle_probe
//! P=target/release/examples/cycle_probe
//! # lock + release of one resource, one after another (a current-thread runtime: the
//! # same instructions run after run), and the same traffic on raw connections:
//! RT=ct valgrind --tool=callgrind $P cycles 7001 1200
//! RT=ct valgrind --tool=callgrind $P floor 7001 1200
//! # heap kept per held lock (N = 3):
//! $P held 7001,7002,7003 10000
//! # 16 tasks on their own resources for 3000 ms (bench scenario 2, for `perf record`):
//! $P tasks 7001 3000
//! $P floor-tasks 7001 3000
//! $P rslock-tasks 7001 3000
//! # the floor with 1 µs of busy work before each cycle (bench scenario 2's control row):
//! SPIN_US=1 $P floor-tasks 7001 3000
//! # 8 clients on one resource, 1 ms holds, for 3000 ms (bench scenario 4c): what the
//! # waiting did, per acquisition (the client's own metrics):
//! $P contend 7001,7002,7003,7004,7005 3000
//! ```
//!
//! Arguments: mode (`cycles`, `floor`, `held`, `tasks`, `floor-tasks`, `rslock-tasks`,
//! `contend` or `segments`), the ports of
//! `redis-server`s on 127.0.0.1 or `$HOST` (comma-separated), a count. Per-cycle instruction counts are the difference
//! of two runs (say 200 and 1200 cycles) divided by the difference in cycles, so that
//! start-up cancels out. `NT_MS` sets the node timeout (default 50 ms; give valgrind
//! 2000), `RT=ct` a current-thread runtime, `NAGLE` (set) the client's `tcp_nodelay(false)`, `QUIET` (set) `notifications(false)`, `ANON` (set) `holder_info(false)`. The keys carry the process id, so probes may
//! share servers.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::join_all;
use redis::aio::MultiplexedConnection;

/// Counts live heap bytes and allocations.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Off for the `tasks` modes: two threads updating the counters would time the contention
/// on their cache line, not the client.
static COUNTING: AtomicBool = AtomicBool::new(true);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

fn signed(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

// SAFETY: every call is passed to `System` unchanged; the counters are only statistics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(signed(layout.size()), Ordering::Relaxed);
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(signed(layout.size()), Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(signed(new_size) - signed(layout.size()), Ordering::Relaxed);
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The compare-and-delete of the floor (as `benches/support` sends it).
const UNLOCK: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                      return redis.call('DEL', KEYS[1]) else return 0 end";

type Probe = Result<(), Box<dyn std::error::Error>>;

fn main() -> Probe {
    let runtime = if std::env::var("RT").is_ok_and(|v| v == "ct") {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?
    };
    runtime.block_on(run())
}

async fn run() -> Probe {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(ports), Some(count)) = (args.get(1), args.get(2), args.get(3)) else {
        return Err("usage: cycle_probe cycles|floor|held PORT[,PORT...] COUNT".into());
    };
    let host = std::env::var("HOST").unwrap_or_else(|_| "127.0.0.1".into());
    let urls: Vec<String> = (ports.split(','))
        .map(|p| format!("redis://{host}:{p}"))
        .collect();
    let count: usize = count.parse()?;
    let node_timeout = std::env::var("NT_MS").ok().and_then(|v| v.parse().ok());
    let client = quorum_lock::Redlock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_millis(node_timeout.unwrap_or(50)))
        .connect_timeout(Duration::from_secs(10))
        .restart_quarantine(false)
        .tcp_nodelay(std::env::var_os("NAGLE").is_none())
        .notifications(std::env::var_os("QUIET").is_none())
        .holder_info(std::env::var_os("ANON").is_none())
        .build()?;
    client.connect().await?;
    let tag = format!("cycle-probe-{}", std::process::id());
    match mode.as_str() {
        "cycles" => cycles(&client, &tag, count).await,
        "floor" => floor(&urls, &tag, count).await,
        "held" => held(&client, &tag, count).await,
        "tasks" => tasks(Locker::Client(client.clone()), &tag, count).await,
        "floor-tasks" => tasks(Locker::floor(&urls).await?, &tag, count).await,
        "rslock-tasks" => {
            let manager = rslock::LockManager::new(urls.clone());
            tasks(Locker::Rslock(manager), &tag, count).await
        }
        "contend" => contend(&urls, &tag, count).await,
        "segments" => segments(&client, &tag, count).await,
        _ => Err(format!("unknown mode {mode}").into()),
    }
}

const TTL: Duration = Duration::from_secs(600);

/// `count` lock + release cycles on one resource, after 200 not counted.
async fn cycles(client: &quorum_lock::Redlock, tag: &str, count: usize) -> Probe {
    for _ in 0..200 {
        client.lock(tag, TTL).await?.release().await?;
    }
    let before = ALLOCS.load(Ordering::Relaxed);
    let started = std::time::Instant::now();
    for _ in 0..count {
        client.lock(tag, TTL).await?.release().await?;
    }
    let took = started.elapsed();
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    println!(
        "cycles {count}: {:.1} allocations per cycle, {:.1} µs a cycle",
        ratio(allocs, count),
        took.as_secs_f64() * 1e6 / count.max(1) as f64
    );
    Ok(())
}

/// One multiplexed connection per node with the floor's compare-and-delete loaded, and
/// that script's digest.
async fn floor_conns(
    urls: &[String],
) -> Result<(Vec<MultiplexedConnection>, String), Box<dyn std::error::Error>> {
    let mut conns = Vec::with_capacity(urls.len());
    for url in urls {
        let mut conn = redis::Client::open(url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(UNLOCK)
            .query_async(&mut conn)
            .await?;
        conns.push(conn);
    }
    Ok((conns, redis::Script::new(UNLOCK).get_hash().to_owned()))
}

/// The floor's traffic: `SET NX PX` on every node, then the compare-and-delete, each
/// round awaited with `join_all` on one multiplexed connection per node; 200 cycles more
/// than `count` (as `cycles` with its warm-up).
async fn floor(urls: &[String], tag: &str, count: usize) -> Probe {
    let (conns, hash) = floor_conns(urls).await?;
    let before = ALLOCS.load(Ordering::Relaxed);
    for i in 0..count + 200 {
        let token = format!("{:032x}", (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let sets = join_all(conns.iter().map(|c| {
            let mut set = redis::cmd("SET");
            set.arg(tag).arg(&token).arg("NX").arg("PX").arg(600_000u64);
            let mut c = c.clone();
            async move { set.query_async::<Option<String>>(&mut c).await }
        }))
        .await;
        let dels = join_all(conns.iter().map(|c| {
            let mut del = redis::cmd("EVALSHA");
            del.arg(&hash).arg(1).arg(tag).arg(&token);
            let mut c = c.clone();
            async move { del.query_async::<i64>(&mut c).await }
        }))
        .await;
        let held = sets
            .into_iter()
            .filter(|s| matches!(s, Ok(Some(_))))
            .count();
        let freed = dels.into_iter().filter(|d| matches!(d, Ok(1))).count();
        if held != conns.len() || freed != conns.len() {
            return Err(format!("floor cycle {i}: set on {held}, deleted on {freed}").into());
        }
    }
    let allocs = ALLOCS.load(Ordering::Relaxed) - before;
    println!(
        "floor {count}: {:.1} allocations per cycle",
        ratio(allocs, count + 200)
    );
    Ok(())
}

/// Takes `count` distinct resources one after another and keeps them: the live heap
/// they keep, per lock (the vector of guards is allocated before, and not counted).
async fn held(client: &quorum_lock::Redlock, tag: &str, count: usize) -> Probe {
    for i in 0..100 {
        client
            .lock(format!("{tag}-warm-{i}"), TTL)
            .await?
            .release()
            .await?;
    }
    let mut guards = Vec::with_capacity(count);
    let names: Vec<String> = (0..count).map(|i| format!("{tag}-{i:08}")).collect();
    let before = LIVE.load(Ordering::Relaxed);
    for name in &names {
        guards.push(client.lock(name.as_str(), TTL).await?);
    }
    let kept = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "held {count}: {:.1} bytes of heap per held lock (each guard itself: {} bytes)",
        kept as f64 / count.max(1) as f64,
        size_of::<quorum_lock::LockGuard>()
    );
    for guard in guards {
        guard.release().await?;
    }
    Ok(())
}

/// What the `tasks` loops lock with.
#[derive(Clone)]
enum Locker {
    /// The client (`tasks`).
    Client(quorum_lock::Redlock),
    /// The floor's two rounds on shared connections (`floor-tasks`), after `spin_us` of
    /// busy work a cycle (`SPIN_US`, default none).
    Floor {
        conns: Vec<MultiplexedConnection>,
        hash: String,
        spin_us: u64,
    },
    /// rslock's `LockManager` (`rslock-tasks`: bench scenario 2's rslock row).
    Rslock(rslock::LockManager),
}

type TaskResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

impl Locker {
    async fn floor(urls: &[String]) -> Result<Locker, Box<dyn std::error::Error>> {
        let (conns, hash) = floor_conns(urls).await?;
        let spin_us = match std::env::var("SPIN_US") {
            Ok(us) => us.parse()?,
            Err(_) => 0,
        };
        Ok(Locker::Floor {
            conns,
            hash,
            spin_us,
        })
    }

    /// Lock + release of `name`, the `n`th time.
    async fn cycle(&self, name: &str, n: u64) -> TaskResult<()> {
        match self {
            Locker::Client(c) => c.lock(name, TTL).await?.release().await.map(drop)?,
            Locker::Floor {
                conns,
                hash,
                spin_us,
            } => {
                spin(*spin_us);
                floor_cycle(conns, hash, name, n).await?;
            }
            Locker::Rslock(manager) => {
                let lock = (manager.lock(name.as_bytes(), TTL).await).map_err(|e| e.to_string())?;
                manager.unlock(&lock).await;
            }
        }
        Ok(())
    }
}

/// 16 tasks, each on its own resource, looping lock + release with `locker` for `ms`
/// milliseconds on the multi-threaded runtime (scenario 2 of the bench, for `perf
/// record`). Prints the cycles per second and the process's CPU time per cycle.
async fn tasks(locker: Locker, tag: &str, ms: usize) -> Probe {
    const TASKS: usize = 16;
    COUNTING.store(false, Ordering::Relaxed);
    let end = std::time::Instant::now() + Duration::from_millis(ms as u64);
    let cpu0 = process_cpu();
    let handles = (0..TASKS).map(|t| {
        let (locker, name) = (locker.clone(), format!("{tag}-{t}"));
        tokio::spawn(async move {
            let mut n = 0u64;
            while std::time::Instant::now() < end {
                locker.cycle(&name, n).await?;
                n += 1;
            }
            Ok(n)
        })
    });
    let cycles = total(handles).await?;
    let cpu = process_cpu() - cpu0;
    println!(
        "{TASKS} tasks: {:.0} cycles/s, {:.1} µs CPU per cycle",
        cycles as f64 * 1000.0 / ms as f64,
        cpu.as_secs_f64() * 1e6 / cycles.max(1) as f64
    );
    Ok(())
}

/// The sum of what the spawned loops counted; the first error of any.
async fn total(
    handles: impl IntoIterator<Item = tokio::task::JoinHandle<TaskResult<u64>>>,
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut sum = 0;
    for h in join_all(handles).await {
        sum += h?.map_err(|e| e.to_string())?;
    }
    Ok(sum)
}

/// Busy work on the calling thread for `us` microseconds (none for 0).
fn spin(us: u64) {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_micros(us) {
        std::hint::spin_loop();
    }
}

/// 8 clients (one per task, as bench scenario 4c) lock one resource in turn, holding it
/// 1 ms on a blocking thread, for `ms` milliseconds; prints the client's counters per
/// acquisition (attempts by outcome, wait events), read from a debugging recorder.
async fn contend(urls: &[String], tag: &str, ms: usize) -> Probe {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    const TASKS: usize = 8;
    COUNTING.store(false, Ordering::Relaxed);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install()?;
    let mut clients = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        let client = quorum_lock::Redlock::builder()
            .nodes(urls)
            .restart_quarantine(false)
            .build()?;
        client.connect().await?;
        clients.push(client);
    }
    let end = std::time::Instant::now() + Duration::from_millis(ms as u64);
    let handles = clients.into_iter().map(|client| {
        let name = format!("{tag}-contended");
        tokio::spawn(async move {
            let mut n = 0u64;
            while std::time::Instant::now() < end {
                let guard = client.lock(name.as_str(), TTL).await?;
                tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1)))
                    .await?;
                guard.release().await?;
                n += 1;
            }
            Ok(n)
        })
    });
    let acquisitions = total(handles).await?;
    println!("{TASKS} clients: {acquisitions} acquisitions; per acquisition:");
    let mut rows: Vec<(String, u64)> = (snapshotter.snapshot().into_vec().into_iter())
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(count) => {
                let labels: Vec<String> = (key.key().labels())
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                Some((format!("{} {}", key.key().name(), labels.join(",")), count))
            }
            _ => None,
        })
        .collect();
    rows.sort();
    for (name, count) in rows {
        println!(
            "{:8.3}  {name}",
            ratio(count as usize, acquisitions as usize)
        );
    }
    Ok(())
}

/// One floor cycle on `conns`: `SET NX PX` everywhere, then the compare-and-delete.
async fn floor_cycle(
    conns: &[MultiplexedConnection],
    hash: &str,
    name: &str,
    i: u64,
) -> TaskResult<()> {
    let token = format!("{:032x}", u128::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let sets = join_all(conns.iter().map(|c| {
        let mut set = redis::cmd("SET");
        set.arg(name)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(600_000u64);
        let mut c = c.clone();
        async move { set.query_async::<Option<String>>(&mut c).await }
    }))
    .await;
    let dels = join_all(conns.iter().map(|c| {
        let mut del = redis::cmd("EVALSHA");
        del.arg(hash).arg(1).arg(name).arg(&token);
        let mut c = c.clone();
        async move { del.query_async::<i64>(&mut c).await }
    }))
    .await;
    let ok =
        sets.iter().all(|s| matches!(s, Ok(Some(_)))) && dels.iter().all(|d| matches!(d, Ok(1)));
    match ok {
        true => Ok(()),
        false => Err(format!("floor cycle {i} of {name} did not hold and free every node").into()),
    }
}

/// Lock + release latency with resource names of 16 bytes to 9 000 (commands of one to
/// several TCP segments at a 1 500-byte MTU): `count` cycles one after another per size,
/// then 16 tasks at once (4 per size), `count` cycles each. For the Nagle question: with
/// `NAGLE` set, does a command that spans segments wait for a delayed ACK (~40 ms)?
async fn segments(client: &quorum_lock::Redlock, tag: &str, count: usize) -> Probe {
    const SIZES: [usize; 4] = [16, 1_400, 3_000, 9_000];
    COUNTING.store(false, Ordering::Relaxed);
    let name = |size: usize, t: usize| format!("{tag}-{t}-{}", "x".repeat(size));
    for size in SIZES {
        let mut took = Vec::with_capacity(count);
        for _ in 0..count {
            let start = std::time::Instant::now();
            client.lock(name(size, 0), TTL).await?.release().await?;
            took.push(start.elapsed());
        }
        println!("one task, name {size:>5} B: {}", spread(&mut took));
    }
    let handles = (0..16).map(|t| {
        let (client, name) = (client.clone(), name(SIZES[t % 4], t));
        tokio::spawn(async move {
            let mut took = Vec::with_capacity(count);
            for _ in 0..count {
                let start = std::time::Instant::now();
                client.lock(name.as_str(), TTL).await?.release().await?;
                took.push(start.elapsed());
            }
            Ok::<_, quorum_lock::Error>(took)
        })
    });
    let mut all = Vec::new();
    for h in join_all(handles).await {
        all.extend(h?.map_err(|e| e.to_string())?);
    }
    println!("16 tasks, mixed names: {}", spread(&mut all));
    Ok(())
}

/// p50, p99 and max of `took`, in µs.
fn spread(took: &mut [Duration]) -> String {
    if took.is_empty() {
        return "no cycles".into();
    }
    took.sort();
    let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    format!(
        "p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

/// This process's user + system CPU time.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the command name.
    let field = |i: usize| f.get(i).and_then(|x| x.parse::<u64>().ok()).unwrap_or(0);
    let ticks = field(11) + field(12);
    Duration::from_millis(ticks * 10)
}

fn ratio(n: usize, d: usize) -> f64 {
    n as f64 / d.max(1) as f64
}
