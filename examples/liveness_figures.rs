//! Liveness figures for restart quarantine, measured on real `redis-server` processes on
//! loopback (they are started here, on ports 17000-19999, and stopped by pid at the end,
//! also on a panic):
//!
//! ```sh
//! cargo run --release --example liveness_figures
//! ```
//!
//! (a) from a single-node restart (empty) to the first fenced lock counting the restarted
//!     node's yes, and to the first fenced lock at all, for one long-lived client and for
//!     a fresh client per attempt; (b) the first lock on a new 5-node deployment with one
//!     node down from the start; (c) fencing tokens across an idle rolling restart;
//!     (d) what the background readmission costs an idle client, per node.
//!
//! Default client settings, except a 1 s TTL for every lock and the TTL ceiling (2 s, and
//! the default 60 s where it matters). `redis-server` must be on `PATH` (or named by
//! `$REDIS_SERVER`). Takes about four minutes; `SKIP_60S=1` leaves out the runs at the
//! default ceiling (about two minutes of them).

use std::fs;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::{Duration, Instant};

use quorum_lock::{FencedGuard, NodeOutcome, Redlock};

/// The TTL of every lock here.
const TTL: Duration = Duration::from_secs(1);
/// The short TTL ceiling; `None` in [`client`] is the default (60 s).
const CEILING: Duration = Duration::from_secs(2);
/// Pause between two attempts of a retry loop.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
/// Give up on one measurement after this long.
const GIVE_UP: Duration = Duration::from_secs(90);
/// Repetitions of (a) per mode.
const REPS: usize = 10;
/// The idle gap between two restarts of (c).
const GAP: Duration = Duration::from_secs(3);
/// The idle window of (d).
const IDLE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------
// Servers

/// One `redis-server` without persistence on a loopback port, in a directory of its own.
/// Killed (SIGKILL), reaped and its directory removed when dropped.
struct Server {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

fn server_bin() -> PathBuf {
    std::env::var_os("REDIS_SERVER")
        .filter(|p| !p.is_empty())
        .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
}

/// The next port that is free now, from a range below the ephemeral ports.
fn free_port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    for _ in 0..3000 {
        let offset = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid_part = u16::try_from(std::process::id() % 1000).unwrap_or(0) * 3;
        let port = 17000 + (pid_part + offset) % 3000;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 17000..20000");
}

impl Server {
    fn start() -> Server {
        static DIRS: AtomicU16 = AtomicU16::new(0);
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("quorum-lock-figures-{}-{n}", std::process::id()));
        fs::create_dir_all(&dir).expect("create the server's directory");
        let mut server = Server {
            port: 0,
            dir,
            child: None,
        };
        for _ in 0..10 {
            server.port = free_port();
            if server.spawn().is_ok() {
                return server;
            }
        }
        panic!("redis-server did not start (is it installed?)");
    }

    /// Starts the process on `self.port` and waits until it answers as itself (its
    /// `process_id` is our child's pid).
    fn spawn(&mut self) -> Result<(), String> {
        let port = self.port.to_string();
        let mut child = Command::new(server_bin())
            .args(["--port", &port, "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", server_bin().display()))?;
        let pid = child.id();
        let began = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("exited: {status}"));
            }
            if info_field(self.port, "process_id").is_some_and(|p| p == pid.to_string()) {
                self.child = Some(child);
                return Ok(());
            }
            if began.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                return Err("not ready within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGKILL and a new process on the same port: it comes back empty.
    fn restart(&mut self) {
        self.kill();
        for _ in 0..40 {
            if self.spawn().is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server on port {} did not restart", self.port);
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn conn(&self) -> redis::Connection {
        admin(self.port).expect("admin connection")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn admin(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let conn = client.get_connection_with_timeout(Duration::from_secs(1))?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    Ok(conn)
}

/// A field of `INFO` on `port`, if it answers.
fn info_field(port: u16, field: &str) -> Option<String> {
    let text: String = redis::cmd("INFO").query(&mut admin(port).ok()?).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// `n` servers, started one after another.
fn servers(n: usize) -> Vec<Server> {
    block(|| (0..n).map(|_| Server::start()).collect())
}

fn urls(servers: &[Server]) -> Vec<String> {
    servers.iter().map(Server::url).collect()
}

/// Runs blocking server work without stalling the runtime's other tasks.
fn block<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

// ---------------------------------------------------------------------------------------
// Clients and measurements

/// A client with the default settings, a 1 s TTL and `ceiling` (`None`: the default).
fn client(urls: &[String], ceiling: Option<Duration>) -> Redlock {
    let builder = Redlock::builder().nodes(urls).default_ttl(TTL);
    let builder = match ceiling {
        Some(c) => builder.ttl_ceiling(c),
        None => builder,
    };
    builder.build().expect("valid configuration")
}

fn ceiling_name(ceiling: Option<Duration>) -> &'static str {
    if ceiling.is_some() { "2 s" } else { "60 s" }
}

static RESOURCES: AtomicU16 = AtomicU16::new(0);

fn resource(what: &str) -> String {
    let n = RESOURCES.fetch_add(1, Ordering::Relaxed);
    format!("figures-{what}-{}-{n}", std::process::id())
}

/// Whether node `i` voted for `guard`.
fn voted(guard: &FencedGuard, i: usize) -> bool {
    guard.report().results()[i].outcome == NodeOutcome::Acquired
}

/// Median (nearest rank) and maximum.
fn p50_max(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let p50 = samples[(samples.len() - 1) / 2];
    (p50, *samples.last().expect("samples"))
}

/// Seconds, or milliseconds below one second.
fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// One row of the final table.
struct Row {
    figure: String,
    setting: String,
    value: String,
}

fn row(rows: &mut Vec<Row>, figure: &str, setting: &str, value: String) {
    println!("  {figure} | {setting} | {value}");
    rows.push(Row {
        figure: figure.into(),
        setting: setting.into(),
        value,
    });
}

// (a) -----------------------------------------------------------------------------------

/// How the attempts of (a) get their client.
#[derive(Clone, Copy)]
enum Clients {
    LongLived,
    Fresh,
}

/// From the restart of node `i` (its new process answering) to the first fenced lock, and
/// to the first one that counts node `i`'s yes. Each lock is released at once.
async fn to_vote(
    servers: &[Server],
    long_lived: &Redlock,
    clients: Clients,
    ceiling: Option<Duration>,
    i: usize,
) -> (Duration, Duration) {
    let urls = urls(servers);
    let name = resource("restart");
    let began = Instant::now();
    let mut first = None;
    loop {
        let fresh;
        let redlock = match clients {
            Clients::LongLived => long_lived,
            Clients::Fresh => {
                fresh = client(&urls, ceiling);
                &fresh
            }
        };
        if let Ok(Some(guard)) = redlock.try_lock_fenced(&name, TTL).await {
            let at = began.elapsed();
            let first = *first.get_or_insert(at);
            let counted = voted(&guard, i);
            let _ = guard.release().await;
            if counted {
                return (first, at);
            }
        }
        assert!(
            began.elapsed() < GIVE_UP,
            "node {i} never voted again after its restart"
        );
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

async fn figure_a(rows: &mut Vec<Row>, ceilings: &[Option<Duration>]) {
    println!("(a) single-node restart (empty) to fenced locks, {REPS} restarts each");
    for &ceiling in ceilings {
        for (clients, mode) in [
            (Clients::LongLived, "one long-lived client"),
            (Clients::Fresh, "a fresh client per attempt"),
        ] {
            let mut servers = servers(3);
            let urls = urls(&servers);
            let long_lived = client(&urls, ceiling);
            // Every node admitted before the first restart.
            let warm = long_lived.try_lock_fenced(resource("warm"), TTL).await;
            let warm = warm.expect("first lock").expect("uncontended");
            assert_eq!(warm.report().count(&NodeOutcome::Acquired), 3);
            let _ = warm.release().await;
            let (mut any, mut vote) = (Vec::new(), Vec::new());
            for rep in 0..REPS {
                let i = rep % 3;
                block(|| servers[i].restart());
                let (first, counted) = to_vote(&servers, &long_lived, clients, ceiling, i).await;
                any.push(first);
                vote.push(counted);
            }
            long_lived.shutdown().await;
            let setting = format!("{mode}, ceiling {}", ceiling_name(ceiling));
            let (p50, max) = p50_max(any);
            let value = format!("p50 {}  max {}", secs(p50), secs(max));
            row(rows, "a: first fenced lock", &setting, value);
            let (p50, max) = p50_max(vote);
            let value = format!("p50 {}  max {}", secs(p50), secs(max));
            row(rows, "a: restarted node votes", &setting, value);
        }
    }
}

// (b) -----------------------------------------------------------------------------------

/// From the start of 5 new nodes, one of them stopped before any client connected, to the
/// first plain lock granted to a client retrying `try_lock`.
async fn first_lock_one_down(ceiling: Option<Duration>) -> Duration {
    let began = Instant::now();
    let mut servers = servers(5);
    block(|| servers[4].kill());
    let redlock = client(&urls(&servers), ceiling);
    let name = resource("one-down");
    loop {
        if let Ok(Some(guard)) = redlock.try_lock(&name, TTL).await {
            let at = began.elapsed();
            let _ = guard.release().await;
            redlock.shutdown().await;
            return at;
        }
        assert!(began.elapsed() < GIVE_UP, "no lock with 4 of 5 nodes");
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

async fn figure_b(rows: &mut Vec<Row>, with_60s: bool) {
    println!("(b) new 5-node deployment, one node down from the start: first plain lock");
    let mut times = Vec::new();
    for _ in 0..3 {
        times.push(first_lock_one_down(Some(CEILING)).await);
    }
    let all: Vec<String> = times.iter().map(|d| secs(*d)).collect();
    let (p50, max) = p50_max(times);
    let value = format!("p50 {}  max {}  ({})", secs(p50), secs(max), all.join(", "));
    row(
        rows,
        "b: first lock, 4 of 5",
        "ceiling 2 s, 3 deployments",
        value,
    );
    if with_60s {
        let once = first_lock_one_down(None).await;
        row(
            rows,
            "b: first lock, 4 of 5",
            "ceiling 60 s, once",
            secs(once),
        );
    }
}

// (c) -----------------------------------------------------------------------------------

/// Fenced locks on `name` from `redlock` until `count` were granted (each released);
/// their tokens and the time to the first.
async fn tokens(redlock: &Redlock, name: &str, count: usize) -> (Vec<u64>, Duration) {
    let began = Instant::now();
    let mut tokens = Vec::new();
    let mut first = None;
    while tokens.len() < count {
        if let Ok(Some(guard)) = redlock.try_lock_fenced(name, TTL).await {
            first.get_or_insert(began.elapsed());
            tokens.push(guard.fencing_token().get());
            let _ = guard.release().await;
        } else {
            assert!(began.elapsed() < GIVE_UP, "no fenced lock on {name}");
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }
    (tokens, first.unwrap_or_default())
}

/// Whether `tokens` strictly increase.
fn increasing(tokens: &[u64]) -> bool {
    tokens.windows(2).all(|w| w[0] < w[1])
}

/// Three tokens, an idle rolling restart of the 3 nodes ([`GAP`] apart, no traffic), then
/// three tokens from the long-lived client (kept through the restarts when `keep`, else
/// shut down before them) and three from a fresh client.
async fn rolling(rows: &mut Vec<Row>, ceiling: Option<Duration>, keep: bool) {
    let mut servers = servers(3);
    let urls = urls(&servers);
    let name = resource("rolling");
    let long_lived = client(&urls, ceiling);
    let (mut all, _) = tokens(&long_lived, &name, 3).await;
    if !keep {
        long_lived.shutdown().await;
    }
    for (i, server) in servers.iter_mut().enumerate() {
        if i > 0 {
            tokio::time::sleep(GAP).await;
        }
        block(|| server.restart());
    }
    let mut firsts = Vec::new();
    if keep {
        let (after, first) = tokens(&long_lived, &name, 3).await;
        all.extend(after);
        firsts.push(format!("long-lived {}", secs(first)));
    }
    let fresh = client(&urls, ceiling);
    let (after, first) = tokens(&fresh, &name, 3).await;
    all.extend(after);
    firsts.push(format!("fresh {}", secs(first)));
    let setting = format!(
        "ceiling {}, {}",
        ceiling_name(ceiling),
        if keep {
            "long-lived client idle through it"
        } else {
            "no client during it"
        }
    );
    println!("  tokens ({setting}): {all:?}");
    let verdict = if increasing(&all) {
        "strictly increasing"
    } else {
        "NOT INCREASING"
    };
    let value = format!("{verdict}; first token after {}", firsts.join(", "));
    row(rows, "c: tokens, rolling restart", &setting, value);
    long_lived.shutdown().await;
    fresh.shutdown().await;
}

async fn figure_c(rows: &mut Vec<Row>, with_60s: bool) {
    println!("(c) fencing tokens across an idle rolling restart of 3 nodes, {GAP:?} gaps");
    rolling(rows, Some(CEILING), true).await;
    rolling(rows, Some(CEILING), false).await;
    if with_60s {
        rolling(rows, None, true).await;
        rolling(rows, None, false).await;
    }
}

// (d) -----------------------------------------------------------------------------------

/// `calls` per command from `INFO commandstats`.
fn command_calls(server: &Server) -> Vec<(String, u64)> {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .expect("INFO commandstats");
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

async fn figure_d(rows: &mut Vec<Row>) {
    println!("(d) an idle long-lived client for {IDLE:?}: commands per node");
    let servers = servers(3);
    let redlock = client(&urls(&servers), Some(CEILING));
    let guard = redlock.try_lock_fenced(resource("idle"), TTL).await;
    let _ = guard.expect("lock").expect("uncontended").release().await;
    block(|| {
        for s in &servers {
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query(&mut s.conn())
                .expect("CONFIG RESETSTAT");
        }
    });
    tokio::time::sleep(IDLE).await;
    for (i, server) in servers.iter().enumerate() {
        let calls = block(|| command_calls(server));
        let count = |name: &str| {
            (calls.iter())
                .find(|(n, _)| n == name)
                .map_or(0, |(_, c)| *c)
        };
        // Our own CONFIG RESETSTAT and INFO are not the client's.
        let others: Vec<String> = (calls.iter())
            .filter(|(n, _)| !["ping", "evalsha", "config|resetstat", "info"].contains(&n.as_str()))
            .map(|(n, c)| format!("{n} {c}"))
            .collect();
        let value = format!(
            "PING {}  EVALSHA {}  other {}",
            count("ping"),
            count("evalsha"),
            if others.is_empty() {
                "none".to_owned()
            } else {
                others.join(", ")
            }
        );
        row(rows, "d: idle client, 30 s", &format!("node {i}"), value);
    }
    redlock.shutdown().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let with_60s = std::env::var_os("SKIP_60S").is_none();
    let mut rows = Vec::new();
    let began = Instant::now();
    let ceilings: &[Option<Duration>] = if with_60s {
        &[Some(CEILING), None]
    } else {
        &[Some(CEILING)]
    };
    figure_a(&mut rows, ceilings).await;
    figure_b(&mut rows, with_60s).await;
    figure_c(&mut rows, with_60s).await;
    figure_d(&mut rows).await;

    let w0 = rows.iter().map(|r| r.figure.len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.setting.len()).max().unwrap_or(0);
    println!();
    println!(
        "TTL 1 s, loopback, release build; {:.0?} in all",
        began.elapsed()
    );
    println!("{:w0$}  {:w1$}  value", "figure", "setting");
    for r in &rows {
        println!("{:w0$}  {:w1$}  {}", r.figure, r.setting, r.value);
    }
}
