//! The harness of the `quorum-lock` binary's tests: scratch directories, invocations run
//! to the end or left running with their output in files, a three-node cluster old enough
//! to vote, and process helpers.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::{Cluster, RedisServer, unique, wait_until};

const BUILT_BIN: &str = env!("CARGO_BIN_EXE_quorum-lock");

/// The binary under test: this build's, or another build's named by
/// `QUORUM_LOCK_TEST_BIN` (to show that a test fails on an older build).
pub fn bin() -> String {
    std::env::var("QUORUM_LOCK_TEST_BIN").unwrap_or_else(|_| BUILT_BIN.to_owned())
}

/// The TTL of most tests: short, yet two node timeouts (below) fit into its extension
/// margin, so one slow extension on a busy machine does not lose the lock.
pub const TTL: Duration = Duration::from_secs(2);
pub const TTL_ARG: &str = "2s";
/// Generous per-node timeout: tests share two cores with many servers (the default of
/// 50 ms is for production networks, not for a machine running several test suites).
pub const NODE_TIMEOUT_ARG: &str = "200ms";

/// Upper bound on any single invocation; reaching it is a hang, and the test fails.
pub const LIMIT: Duration = Duration::from_secs(60);

/// A temp dir for one test's files, removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new() -> Scratch {
        let dir = std::env::temp_dir().join(unique("quorum-lock-cli"));
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The path as a string for shell snippets (temp paths have no quotes in them).
    pub fn sh(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A finished invocation.
#[derive(Debug)]
pub struct Done {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Done {
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .unwrap_or_else(|| panic!("quorum-lock died by a signal: {self:?}"))
    }

    #[track_caller]
    pub fn expect(&self, code: i32) -> &Self {
        assert_eq!(self.code(), code, "unexpected exit status: {self:#?}");
        self
    }

    #[track_caller]
    pub fn stderr_has(&self, text: &str) -> &Self {
        assert!(
            self.stderr.contains(text),
            "stderr lacks {text:?}: {self:#?}"
        );
        self
    }

    #[track_caller]
    pub fn stdout_has(&self, text: &str) -> &Self {
        assert!(
            self.stdout.contains(text),
            "stdout lacks {text:?}: {self:#?}"
        );
        self
    }
}

/// A running `quorum-lock`, its output going to files (no pipe can fill up). Dropping it
/// sends SIGTERM (which `quorum-lock` passes on to its program), then SIGKILL, and reaps it.
pub struct Running {
    child: Option<Child>,
    pub out: PathBuf,
    pub err: PathBuf,
    pub started: Instant,
}

impl Running {
    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.as_ref().unwrap().id() as i32)
    }

    pub fn signal(&self, sig: Signal) {
        kill(self.pid(), sig).unwrap();
    }

    pub fn try_done(&mut self) -> Option<Done> {
        let status = self.child.as_mut().unwrap().try_wait().unwrap()?;
        self.child = None;
        Some(Done {
            status,
            stdout: fs::read_to_string(&self.out).unwrap_or_default(),
            stderr: fs::read_to_string(&self.err).unwrap_or_default(),
            elapsed: self.started.elapsed(),
        })
    }

    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().unwrap().is_none(),
            None => false,
        }
    }

    /// Waits for the exit; panics (killing it) after `limit`.
    #[track_caller]
    pub fn wait(mut self, limit: Duration) -> Done {
        let start = Instant::now();
        loop {
            if let Some(done) = self.try_done() {
                return done;
            }
            if start.elapsed() > limit {
                let stderr = fs::read_to_string(&self.err).unwrap_or_default();
                panic!("quorum-lock still running after {limit:?}; stderr so far: {stderr}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// `quorum-lock` with `QUORUM_LOCK_NODES` set to `urls` (unset when empty).
pub fn ql(urls: &[String]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.args(["--node-timeout", NODE_TIMEOUT_ARG])
        .env_remove("QUORUM_LOCK_NODES")
        .env_remove("QUORUM_LOCK_FENCING_TOKEN")
        .stdin(Stdio::null());
    if !urls.is_empty() {
        cmd.env("QUORUM_LOCK_NODES", urls.join(","));
    }
    cmd
}

pub fn start(mut cmd: Command, scratch: &Scratch) -> Running {
    let id = unique("out");
    let out = scratch.path(&format!("{id}.stdout"));
    let err = scratch.path(&format!("{id}.stderr"));
    let started = Instant::now();
    let child = cmd
        .stdout(fs::File::create(&out).unwrap())
        .stderr(fs::File::create(&err).unwrap())
        .spawn()
        .expect("spawn quorum-lock");
    Running {
        child: Some(child),
        out,
        err,
        started,
    }
}

/// Starts `quorum-lock run ARGS RESOURCE -- sh -c 'PRELUDE echo $$ > PID_FILE; BODY'` and
/// waits until its program has written its pid to `pid_file`: from then on the lock is
/// held. `args` are the options before the resource; `prelude` runs first (a `trap`).
#[track_caller]
pub fn hold(
    urls: &[String],
    scratch: &Scratch,
    args: &[&str],
    resource: &str,
    pid_file: &Path,
    prelude: &str,
    body: &str,
) -> Running {
    let script = format!("{prelude} echo $$ > {}; {body}", pid_file.display());
    let program = ["sh", "-c", &script];
    let holder = start(run_cmd(urls, args, resource, &program), scratch);
    wait_until(
        Duration::from_secs(40),
        "the holder's program to start",
        || fs::read_to_string(pid_file).is_ok_and(|s| s.ends_with('\n')),
    );
    holder
}

/// [`hold`] with a program that only sleeps (30 s, `exec`ed: the pid is the sleep's).
#[track_caller]
pub fn hold_sleeping(
    urls: &[String],
    scratch: &Scratch,
    args: &[&str],
    resource: &str,
    pid_file: &Path,
) -> Running {
    hold(urls, scratch, args, resource, pid_file, "", "exec sleep 30")
}

/// Runs to the end (at most [`LIMIT`]).
#[track_caller]
pub fn output(cmd: Command) -> Done {
    let scratch = Scratch::new();
    start(cmd, &scratch).wait(LIMIT)
}

/// `ql(urls)` with these arguments.
pub fn cli<I, S>(urls: &[String], args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = ql(urls);
    cmd.args(args);
    cmd
}

/// `quorum-lock run OPTS RESOURCE -- PROGRAM...` on `urls`.
pub fn run_cmd(urls: &[String], opts: &[&str], resource: &str, program: &[&str]) -> Command {
    let mut cmd = cli(urls, ["run"]);
    cmd.args(opts).arg(resource).arg("--").args(program);
    cmd
}

/// Fresh servers do not vote until they have been up for one TTL (the library's restart
/// quarantine; every CLI invocation is a new client). Waits that out for `ttl`.
pub fn settle(started: Instant, ttl: Duration) {
    // Uptime is reported in whole seconds: one more second, plus the drift allowance.
    let until = started + ttl + ttl / 50 + Duration::from_millis(1200);
    if let Some(left) = until.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
}

/// What most tests start from: a [`cluster`] for `ttl`, its URLs, a scratch directory and
/// a fresh resource name from `name`.
pub fn setup(ttl: Duration, name: &str) -> (Cluster, Vec<String>, Scratch, String) {
    let cluster = cluster(ttl);
    let urls = cluster.urls();
    (cluster, urls, Scratch::new(), unique(name))
}

/// A three-node cluster whose votes count for TTLs up to `ttl`.
pub fn cluster(ttl: Duration) -> Cluster {
    let started = Instant::now();
    let cluster = Cluster::start(3);
    settle(started, ttl);
    cluster
}

pub fn set(server: &RedisServer, key: &str, value: &str, px: u64) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("PX")
        .arg(px)
        .query(&mut server.conn())
        .unwrap();
}

/// SIGKILLs the process group led by the pid in `path` when dropped: a safety net for
/// programs that ignore SIGTERM, should a test fail before `quorum-lock` ends them.
pub struct KillGroup(pub PathBuf);

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(pid) = fs::read_to_string(&self.0)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            let _ = nix::sys::signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

pub fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

pub fn read_pid(path: &Path) -> i32 {
    fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("pid in {}: {e}", path.display()))
}

/// Whether process `pid` has ended: gone, or a zombie waiting to be reaped.
pub fn has_ended(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // After the command name in parentheses comes the state letter.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
        Err(_) => true,
    }
}

/// A worker script that ignores SIGTERM, writes its pid to `worker.pid` in `dir`, then the
/// wall clock (ns) to `beats` every 20 ms: a child that outlives a holder shows in them.
pub fn stubborn_worker(dir: &Scratch) -> String {
    format!(
        "trap '' TERM; echo $$ > {pid}; while :; do date +%s%N >> {beats}; sleep 0.02; done",
        pid = dir.sh("worker.pid"),
        beats = dir.sh("beats"),
    )
}

/// `script` as one double-quoted shell word, for `sh -c "…"` inside another script.
pub fn quoted(script: &str) -> String {
    let mut word = String::from("\"");
    for c in script.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            word.push('\\');
        }
        word.push(c);
    }
    word.push('"');
    word
}

#[track_caller]
pub fn read_number(path: &Path) -> u128 {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("a number in {}: {e}", path.display()))
}

/// Starts a rival `run` of `resource` that waits for it; its program writes the wall
/// clock (ns) to `rival` in `dir` when it starts.
pub fn start_rival(urls: &[String], dir: &Scratch, resource: &str) -> Running {
    let script = format!("date +%s%N > {}", dir.sh("rival"));
    let opts = ["--ttl", "2s", "--wait", "40s"];
    start(run_cmd(urls, &opts, resource, &["sh", "-c", &script]), dir)
}

/// The rival ran, and no heartbeat of the [`stubborn_worker`] in `dir` came at or after
/// its program's start: how long before it the last one came.
#[track_caller]
pub fn margin_before_the_rival(rival: Running, dir: &Scratch) -> Duration {
    rival.wait(LIMIT).expect(0);
    let started: u128 = read_number(&dir.path("rival"));
    let beats = fs::read_to_string(dir.path("beats")).unwrap_or_default();
    let beats: Vec<u128> = beats
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let Some(&last) = beats.iter().max() else {
        panic!("the worker wrote no heartbeat");
    };
    let overlaps = beats.iter().filter(|&&b| b >= started).count();
    assert_eq!(
        overlaps,
        0,
        "{overlaps} heartbeats of the old holder's worker came after the rival started, the \
         last {:?} after",
        Duration::from_nanos(u64::try_from(last - started).unwrap_or(u64::MAX))
    );
    Duration::from_nanos(u64::try_from(started - last).unwrap_or(u64::MAX))
}
