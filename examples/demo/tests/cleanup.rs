//! The demo leaves nothing behind: after a normal run, and after SIGINT, SIGTERM or SIGHUP
//! in the middle of a round, none of its `redis-server` processes is alive and its
//! temporary directory is gone. Real processes throughout: the built demo binary, real
//! `redis-server`s, real signals.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// A running demo, its stdout as a channel of lines, and the temporary directory it was
/// given (through `TMPDIR`) for itself alone.
struct Demo {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    tmp: PathBuf,
}

impl Demo {
    fn start(case: &str) -> Demo {
        let tmp = std::env::temp_dir().join(format!("demo-cleanup-{}-{case}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_quorum-lock-demo"))
            .env("TMPDIR", &tmp)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the demo");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Demo {
            child,
            lines,
            seen: Vec::new(),
            tmp,
        }
    }

    /// Reads output until a line contains `needle`; panics after 60 s or at end of output.
    fn wait_for_line(&mut self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(RecvTimeoutError::Timeout) => panic!("no {needle:?} in 60 s: {:?}", self.seen),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("output ended before {needle:?}: {:?}", self.seen)
                }
            }
        }
    }

    /// Waits (at most 60 s) for the demo to exit and collects the rest of its output.
    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "demo still running after 60 s");
            std::thread::sleep(Duration::from_millis(10));
        };
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        status
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        // Only if an assertion failed early: do not leave the demo running.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.tmp);
    }
}

/// The pids of the processes whose parent is `parent`, read from /proc.
fn children_of(parent: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // Fields after the command name, which is in parentheses and may contain spaces.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let ppid: u32 = after.split(' ').nth(1).unwrap().parse().unwrap();
        if ppid == parent {
            pids.push(pid);
        }
    }
    pids
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or(String::new(), |s| s.trim().into())
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

/// Starts the demo, waits until workers hold the lock with all five nodes up, records its
/// five `redis-server` children, sends `signal`, and checks that everything is gone.
fn stops_cleanly_on(signal: Signal, case: &str) {
    let mut demo = Demo::start(case);
    demo.wait_for_line("holds the lock");
    let nodes = children_of(demo.child.id());
    assert_eq!(nodes.len(), 5, "children of the demo: {nodes:?}");
    for pid in &nodes {
        assert_eq!(comm(*pid), "redis-server", "child {pid}");
    }
    assert_eq!(entries(&demo.tmp).len(), 1, "the demo's data directory");

    kill(Pid::from_raw(demo.child.id() as i32), signal).unwrap();
    let status = demo.wait_exit();

    assert_eq!(
        status.code(),
        Some(128 + signal as i32),
        "output: {:?}",
        demo.seen
    );
    for pid in &nodes {
        // The demo reaps its nodes before it exits: they are gone, not even zombies.
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "redis-server {pid} left"
        );
    }
    assert_eq!(entries(&demo.tmp), Vec::<PathBuf>::new(), "left in TMPDIR");
    let last = demo.seen.last().unwrap();
    assert!(
        last.starts_with("stopped the five nodes and removed "),
        "{last:?}"
    );
}

#[test]
fn sigint_mid_round_leaves_nothing() {
    stops_cleanly_on(Signal::SIGINT, "int");
}

#[test]
fn sigterm_mid_round_leaves_nothing() {
    stops_cleanly_on(Signal::SIGTERM, "term");
}

#[test]
fn sighup_mid_round_leaves_nothing() {
    stops_cleanly_on(Signal::SIGHUP, "hup");
}

#[test]
fn a_full_run_leaves_nothing_and_reads_plainly() {
    let mut demo = Demo::start("full");
    demo.wait_for_line("holds the lock");
    let nodes = children_of(demo.child.id());
    assert_eq!(nodes.len(), 5, "children of the demo: {nodes:?}");
    let status = demo.wait_exit();
    assert_eq!(status.code(), Some(0), "output: {:?}", demo.seen);
    for pid in &nodes {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "redis-server {pid} left"
        );
    }
    assert_eq!(entries(&demo.tmp), Vec::<PathBuf>::new(), "left in TMPDIR");

    let out = &demo.seen;
    // Every grant says which nodes granted it (and why the others did not count).
    for (i, line) in out.iter().enumerate() {
        if line.contains("holds the lock") {
            assert!(
                out[i + 1].trim_start().starts_with("granted by nodes "),
                "{:?}",
                out[i + 1]
            );
        }
    }
    // The restart scene: node 3 comes back empty, is kept out, votes again, and the fencing
    // tokens never go back.
    let restarted = out
        .iter()
        .position(|l| l.starts_with("restarted node 3 without persistence"))
        .expect("restart");
    assert!(out[restarted].contains(", 0 now"), "{:?}", out[restarted]);
    let ready = out
        .iter()
        .position(|l| l.contains("all five nodes vote again"))
        .expect("node 3 readmitted");
    assert!(
        out[restarted..ready]
            .iter()
            .any(|l| l.contains("node 3") && l.contains("kept out by restart quarantine")),
        "{:?}",
        &out[restarted..ready]
    );
    let summary = "  -> tokens kept increasing across the restart: ";
    let tokens: Vec<u64> = out
        .iter()
        .find_map(|l| l.strip_prefix(summary))
        .expect("tokens")
        .split(", ")
        .map(|t| t.parse().unwrap())
        .collect();
    assert!(tokens.len() >= 5, "{tokens:?}");
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");

    // The rolling restart: the job keeps its lock through every gate.
    assert!(
        out.iter()
            .any(|l| l.starts_with("  -> the job held its lock through five restarts")),
        "{out:?}"
    );
    assert!(!out.iter().any(|l| l.contains("unexpected")), "{out:?}");

    // The refused lock: a plain sentence, per-node lines that never say "acquired".
    let refused = out
        .iter()
        .position(|l| l.contains("did not get the lock"))
        .expect("refusal");
    assert!(out[refused].contains(" ms"), "{:?}", out[refused]);
    assert!(
        out[refused + 1].contains("too few nodes are up"),
        "{:?}",
        out[refused + 1]
    );
    for line in &out[refused..] {
        assert!(
            !line.contains("acquired") && !line.contains("unavailable:"),
            "{line:?}"
        );
    }
    assert!(
        out[refused..]
            .iter()
            .any(|l| l.contains("nodes 2, 4 and 5 did not answer (down)"))
    );
    // Durations in whole milliseconds ("1003 ms"), never Debug-formatted ("1.003s", "850µs").
    for line in out {
        let tokens = line
            .split_whitespace()
            .map(|t| t.trim_matches(|c| ",;()".contains(c)));
        for t in tokens {
            let numeric = t.starts_with(|c: char| c.is_ascii_digit());
            assert!(!(numeric && t.ends_with('s')), "{t:?} in {line:?}");
        }
    }
}

/// The processes whose working directory is under `dir` (a `redis-server` works in its
/// data directory).
fn working_under(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if std::fs::read_link(entry.path().join("cwd")).is_ok_and(|cwd| cwd.starts_with(dir)) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn sigterm_while_the_nodes_start_leaves_nothing() {
    let mut demo = Demo::start("starting");
    let deadline = Instant::now() + Duration::from_secs(30);
    // Signalled as soon as the first node runs, while the others are still starting.
    let first = loop {
        let nodes = children_of(demo.child.id());
        if let Some(&pid) = nodes.iter().find(|&&pid| comm(pid) == "redis-server") {
            break pid;
        }
        assert!(
            Instant::now() < deadline,
            "no node started: {:?}",
            demo.seen
        );
        std::thread::sleep(Duration::from_millis(1));
    };
    kill(Pid::from_raw(demo.child.id() as i32), Signal::SIGTERM).unwrap();
    let status = demo.wait_exit();
    assert_eq!(status.code(), Some(128 + 15), "output: {:?}", demo.seen);
    assert!(
        !Path::new(&format!("/proc/{first}")).exists(),
        "redis-server {first} left"
    );
    assert_eq!(
        working_under(&demo.tmp),
        Vec::<u32>::new(),
        "processes left in TMPDIR"
    );
    assert_eq!(entries(&demo.tmp), Vec::<PathBuf>::new(), "left in TMPDIR");
}
