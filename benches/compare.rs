//! quorum-lock against rslock 0.10 and redlock 2.0, and against floors measured with raw
//! `redis` multiplexed connections in the same run, on throw-away local `redis-server`s.
//!
//! ```text
//! cargo bench --bench compare            # every scenario
//! cargo bench --bench compare -- 1 3     # scenarios 1 and 3 only
//! QUICK=1 cargo bench --bench compare    # 10x fewer iterations, 10x shorter runs
//! ONLY=quorum-lock cargo bench --bench compare -- 2   # one contender of 1, 2 and 6a (profiling)
//! ONLY=floor,rslock cargo bench --bench compare -- 2  # those whose names contain a part
//! ```
//!
//! 1. uncontended lock + unlock, one task, N = 1, 3, 5: p50, p99, client CPU per cycle
//! 2. throughput: 16 tasks on their own resources, N = 1 and 5
//! 3. one slow node among 5: 5 ms reply delay (proxy), and a node that never answers
//! 4. contention: 8 tasks on one resource, N = 5, sharing one client or one client each
//! 5. memory: RSS around 100 000 cycles, N = 3
//! 6. scale, as curves with fitted slopes and SVG plots: N = 1-9 nodes; 1 to 100 000
//!    resources held at once; 2 to 256 waiters on one resource
//! 7. native commands: Valkey 9 only, N = 5, lock + extend + release with `DELIFEQ` /
//!    `SET IFEQ` against the Lua scripts (skipped without a `valkey-server` build)
//! 8. semaphore: K = 4 permits, 16 tasks, N = 1 and 3, against a floor of K slot locks
//! 9. read-write lock: uncontended read lock + release and write lock + release, one task,
//!    N = 1, 3, 5, against the mutex and the floor
//! 10. fairness between clients (each its own `Redlock`, as separate processes), N = 3:
//!     the semaphore (K = 4; 4 clients x 4 tasks, 16 x 1), the read-write lock (3 writer
//!     and 3 reader clients) and the mutex (4 x 4): per-client shares and waits, Jain's
//!     index
//! 11. a member under Sentinel against the same master as a plain member, N = 1:
//!     uncontended lock + unlock, p50, p99, CPU of the master and the sentinels
//! 12. a member that is a Redis Cluster, N = 1: how one client's locks on distinct
//!     resources spread over 3 shard masters; server and client CPU per lock with 1, 3 and
//!     6 masters; uncontended lock + unlock against a plain member and the floors
//! 13. leader election, N = 3: campaign + resign against a fenced lock + release, the
//!     handover after a resignation and after a leader's death, an idle observer's traffic
//! 14. the blocking API (`--features blocking`; skipped without it), N = 3: lock + release
//!     from a plain thread against the async API from one task, p50 side by side, and the
//!     threads and RSS that building one blocking client adds
//!
//! Floors: "1 round trip" is one `SET k v NX PX` to one node; "2 rounds" is `SET NX PX` to
//! all N nodes concurrently, then the compare-and-delete (`EVALSHA`) to all N concurrently
//! (the minimum traffic of a safe lock plus unlock), on multiplexed connections with the
//! driver's socket options (Nagle's algorithm on, as rslock has it), awaited in place.
//!
//! The machine may be shared, so contenders are measured in interleaved rounds (rotated and
//! reversed in turn) rather than one after the other: background load then hits all alike.
//! The sync redlock crate is the exception, measured after the others: its threads (a TCP
//! connection per request, ~10x the others' CPU per cycle) slowed whichever contender ran
//! next (see `support::measure::order`).

#[path = "../tests/common/mod.rs"]
mod common;
mod scenarios;
mod support;

use std::time::Duration;

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
const FLOOR_BUSY: &str = "control: floor + 1µs spin a cycle";
/// The busy work of [`FLOOR_BUSY`] before each acquisition.
const BUSY: Duration = Duration::from_micros(1);
const QUORUM: &str = "quorum-lock";
const QUORUM_NAGLE: &str = "quorum-lock, tcp_nodelay(false)";
const QUORUM_QUIET: &str = "quorum-lock, notifications(false)";
const QUORUM_READ: &str = "quorum-lock read lock";
const QUORUM_WRITE: &str = "quorum-lock write lock";
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
            Ok(n @ 1..=14) => selected.push(n),
            _ => {
                eprintln!("usage: cargo bench --bench compare [-- SCENARIO...]  (SCENARIO: 1-14)");
                std::process::exit(2);
            }
        }
    }
    if selected.is_empty() {
        selected = vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14];
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
    if let Ok(spec) = std::env::var(scenarios::scale::HELD_CHILD) {
        rt.block_on(scenarios::scale::held_child(cfg, &spec));
        return;
    }
    let started = std::time::Instant::now();
    print_header(cfg, &selected);
    rt.block_on(async {
        for s in selected {
            let t = std::time::Instant::now();
            match s {
                1 => scenarios::latency::run(cfg).await,
                2 => scenarios::throughput::run(cfg).await,
                3 => scenarios::slow_node::run(cfg).await,
                4 => scenarios::contention::run(cfg).await,
                5 => scenarios::memory::run(cfg).await,
                6 => scenarios::scale::run(cfg).await,
                7 => scenarios::native::run(cfg).await,
                8 => scenarios::semaphore::run(cfg).await,
                9 => scenarios::rwlock::run(cfg).await,
                10 => scenarios::fairness::run(cfg).await,
                11 => scenarios::sentinel::run(cfg).await,
                12 => scenarios::cluster_member::run(cfg).await,
                13 => scenarios::election::run(cfg).await,
                // Blocks this thread while its own thread measures: a blocking client
                // refuses calls from inside the runtime.
                _ => scenarios::blocking_overhead::run(cfg),
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
    println!("  {}", idle_regime());
    println!(
        "  scenarios {selected:?}{}; lock TTL {TTL:?}; quorum-lock node_timeout {NODE_TIMEOUT:?}\n",
        if cfg.quick {
            ", QUICK (10x shorter)"
        } else {
            ""
        }
    );
}

/// How an idle CPU of this machine waits: the cpuidle driver and, under `haltpoll` (a
/// KVM guest), how long it polls before it halts. With `guest_halt_poll_ns` 0 every idle
/// CPU halts, and each cross-thread wake-up costs a trip through the hypervisor: on the
/// VMs of these runs, scenario 1's p50 at N = 1 then takes one of two modes per
/// contender and run (~50 or ~140 µs), and with 200 µs of polling all of them 42-63 µs
/// (BENCHMARKS.md, "Know the idle regime").
fn idle_regime() -> String {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_or_else(|_| "?".to_string(), |s| s.trim().to_string())
    };
    let driver = read("/sys/devices/system/cpu/cpuidle/current_driver");
    let mut out = format!("cpuidle driver {driver}");
    if driver == "haltpoll" {
        let poll = read("/sys/module/haltpoll/parameters/guest_halt_poll_ns");
        out.push_str(&format!(", guest_halt_poll_ns {poll}"));
    }
    out
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
