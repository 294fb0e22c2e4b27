//! The watchdog: a second `quorum-lock` process that kills the program's tree at the last
//! moment the lock allows when the supervisor cannot, because it is stopped (`SIGSTOP`, a
//! debugger, a frozen cgroup holding only it), starved, or dead.
//!
//! The supervisor starts it before the program, in a process group of its own (a terminal's
//! Ctrl-C or Ctrl-Z does not reach it), and feeds it through a pipe: which program to
//! watch, then every new kill deadline (the lock's validity end less the kill margin) as a
//! `CLOCK_MONOTONIC` reading, which both processes share. Unfed past the deadline, the
//! watchdog sends SIGKILL to every process of the tree it can find, says so on stderr and
//! exits with [`FIRED`]; told that the tree has ended, it exits 0. When the pipe closes
//! without that word (the supervisor died), it still kills at the last deadline it was
//! given: the program's process group and the program's descendants, since the supervisor's
//! re-parented orphans went to init with it.

use std::io::{BufRead as _, Write as _};
use std::os::fd::AsFd as _;
use std::process::{ChildStdin, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::signal::Signal;
use nix::time::{ClockId, clock_gettime};
use nix::unistd::{Pid, getpid};
use tokio::time::Instant;

use crate::duration::human;
use crate::tree::{ProcessTree, Target};

/// The hidden first argument that makes `quorum-lock` a watchdog.
pub(crate) const WATCHDOG_ARG: &str = "__watchdog";

/// The watchdog's exit status when it had to kill the tree.
pub(crate) const FIRED: i32 = 70;

/// How often the watchdog sends SIGKILL again while processes of the tree remain (one may
/// have forked as the last one was sent), and for how long at most.
const RESEND: Duration = Duration::from_millis(10);
const RESEND_FOR: Duration = Duration::from_secs(2);

/// Nanoseconds of `CLOCK_MONOTONIC`, the clock of `std::time::Instant` on Linux.
fn monotonic_ns() -> i64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec().saturating_mul(1_000_000_000) + t.tv_nsec())
        .unwrap_or(0)
}

/// `at` as a `CLOCK_MONOTONIC` reading.
fn monotonic_ns_of(at: Instant) -> i64 {
    let now = Instant::now();
    let ahead = i64::try_from(at.saturating_duration_since(now).as_nanos()).unwrap_or(i64::MAX);
    let behind = i64::try_from(now.saturating_duration_since(at).as_nanos()).unwrap_or(i64::MAX);
    monotonic_ns().saturating_add(ahead).saturating_sub(behind)
}

/// The supervisor's end of a running watchdog.
#[derive(Debug)]
pub(crate) struct Watchdog {
    pid: Pid,
    feed: ChildStdin,
    /// The last deadline fed, to feed only changes.
    fed: Option<Instant>,
}

impl Watchdog {
    /// Starts the watchdog (this executable, run as [`WATCHDOG_ARG`]).
    pub(crate) fn start() -> std::io::Result<Watchdog> {
        use std::os::unix::process::CommandExt as _;
        let exe = if cfg!(target_os = "linux") {
            // Still this program even if its file was replaced or deleted meanwhile.
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe()?
        };
        let mut child = Command::new(exe)
            .arg(WATCHDOG_ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()?;
        let feed = child
            .stdin
            .take()
            .ok_or_else(|| std::io::Error::other("the watchdog has no stdin"))?;
        // A stopped watchdog must never block the supervisor: a write that does not fit
        // is dropped (the watchdog, when it runs again, kills early rather than late).
        let _ = fcntl(feed.as_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK));
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        Ok(Watchdog {
            pid,
            feed,
            fed: None,
        })
    }

    pub(crate) fn pid(&self) -> Pid {
        self.pid
    }

    /// Names the program to watch, and whether it leads a process group of its own.
    pub(crate) fn watch(&mut self, program: Pid, grouped: bool) {
        let line = format!("watch {} {} {}\n", program, u8::from(grouped), getpid());
        let _ = self.feed.write_all(line.as_bytes());
    }

    /// The tree must be dead by `kill_by`, before the lock's validity ends at
    /// `validity_end`: fed when it moved by a millisecond or more.
    pub(crate) fn feed(&mut self, kill_by: Instant, validity_end: Instant) {
        let moved = self.fed.is_none_or(|fed| {
            let apart = fed.max(kill_by) - fed.min(kill_by);
            apart >= Duration::from_millis(1)
        });
        if moved {
            let line = format!(
                "kill-by {} {}\n",
                monotonic_ns_of(kill_by),
                monotonic_ns_of(validity_end)
            );
            if self.feed.write_all(line.as_bytes()).is_ok() {
                self.fed = Some(kill_by);
            }
        }
    }

    /// The tree has ended: the watchdog exits without doing anything.
    pub(crate) fn dismiss(mut self) {
        let _ = self.feed.write_all(b"done\n");
    }
}

/// What the supervisor says.
#[derive(Debug)]
enum Word {
    Watch {
        program: i32,
        grouped: bool,
        supervisor: i32,
    },
    /// The kill deadline and the validity end, as `CLOCK_MONOTONIC` readings.
    KillBy(i64, i64),
    Done,
    /// The pipe closed: the supervisor is gone.
    Closed,
}

fn parse_word(line: &str) -> Option<Word> {
    let mut parts = line.split_whitespace();
    match parts.next()? {
        "watch" => Some(Word::Watch {
            program: parts.next()?.parse().ok()?,
            grouped: parts.next()? == "1",
            supervisor: parts.next()?.parse().ok()?,
        }),
        "kill-by" => Some(Word::KillBy(
            parts.next()?.parse().ok()?,
            parts.next()?.parse().ok()?,
        )),
        "done" => Some(Word::Done),
        _ => None,
    }
}

/// The highest priority (lowest nice value) the watchdog asks for: on a starved host it
/// must still wake at its deadline, while it sleeps nearly all the time.
const WATCHDOG_NICE: i32 = -20;

/// The watchdog process: `quorum-lock __watchdog`, fed on stdin.
pub(crate) fn main() -> ExitCode {
    // Allowed for root, CAP_SYS_NICE or an RLIMIT_NICE that permits it; otherwise the
    // watchdog keeps the supervisor's priority (docs/cli.md says what that leaves).
    let _ = rustix::process::setpriority_process(None, WATCHDOG_NICE);
    let (sender, words) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if let Some(word) = parse_word(&line)
                && sender.send(word).is_err()
            {
                return;
            }
        }
        let _ = sender.send(Word::Closed);
    });
    let mut watched: Option<ProcessTree> = None;
    let mut kill_by: Option<(i64, i64)> = None;
    let mut supervisor_gone = false;
    loop {
        let left = kill_by.map(|(at, _)| {
            Duration::from_nanos(u64::try_from(at.saturating_sub(monotonic_ns())).unwrap_or(0))
        });
        let word = match left {
            Some(left) => match words.recv_timeout(left) {
                Ok(word) => word,
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Nothing more can come: only the deadline is left to wait for.
                    std::thread::sleep(left);
                    break;
                }
            },
            None => match words.recv() {
                Ok(word) => word,
                Err(_) => break,
            },
        };
        match word {
            Word::Watch {
                program,
                grouped,
                supervisor,
            } => {
                watched = Some(ProcessTree {
                    supervisor: Pid::from_raw(supervisor),
                    program: Pid::from_raw(program),
                    target: if grouped {
                        Target::Group
                    } else {
                        Target::Process
                    },
                    watchdog: Some(getpid()),
                });
            }
            Word::KillBy(at, end) => kill_by = Some((at, end)),
            Word::Done => return ExitCode::SUCCESS,
            Word::Closed => supervisor_gone = true,
        }
    }
    let Some(watched) = watched else {
        return ExitCode::SUCCESS;
    };
    let now = monotonic_ns();
    fire(
        watched,
        kill_by.map_or(now, |(_, end)| end),
        supervisor_gone,
    )
}

/// Kills the tree until none of it is left (or [`RESEND_FOR`] has passed) and says so,
/// against the lock's validity end `validity_end`.
fn fire(watched: ProcessTree, validity_end: i64, supervisor_gone: bool) -> ExitCode {
    let fired_at = monotonic_ns();
    let started = std::time::Instant::now();
    if !watched.signal_all(Signal::SIGKILL) {
        return ExitCode::SUCCESS;
    }
    let mut remaining = true;
    while remaining && started.elapsed() < RESEND_FOR {
        std::thread::sleep(RESEND);
        remaining = watched.signal_all(Signal::SIGKILL);
    }
    let ns = |d: i64| human(Duration::from_nanos(u64::try_from(d).unwrap_or(0)));
    let when = if fired_at <= validity_end {
        format!(
            "{} before the lock's validity end",
            ns(validity_end - fired_at)
        )
    } else {
        format!(
            "{} AFTER the lock's validity end",
            ns(fired_at - validity_end)
        )
    };
    let why = if supervisor_gone {
        format!("quorum-lock (pid {}) ended", watched.supervisor)
    } else {
        format!(
            "quorum-lock (pid {}) did not stop it in time (stopped or starved)",
            watched.supervisor
        )
    };
    let left = if remaining {
        format!("; some of it still found after {}", human(RESEND_FOR))
    } else {
        String::new()
    };
    crate::say_err(&format!(
        "watchdog: {why}: sent SIGKILL to the program's tree {when}{left}"
    ));
    ExitCode::from(u8::try_from(FIRED).unwrap_or(70))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_and_junk_is_ignored() {
        assert!(matches!(
            parse_word("watch 12 1 10"),
            Some(Word::Watch {
                program: 12,
                grouped: true,
                supervisor: 10
            })
        ));
        assert!(matches!(
            parse_word("kill-by 123 456"),
            Some(Word::KillBy(123, 456))
        ));
        assert!(parse_word("kill-by 123").is_none());
        assert!(matches!(parse_word("done"), Some(Word::Done)));
        assert!(parse_word("kill-by soon").is_none());
        assert!(parse_word("").is_none());
    }

    #[test]
    fn instants_map_onto_the_monotonic_clock() {
        let now = Instant::now();
        let later = monotonic_ns_of(now + Duration::from_secs(1));
        let earlier = monotonic_ns_of(now - Duration::from_millis(1));
        let gap = later - earlier;
        assert!((1_000_000_000..1_100_000_000).contains(&gap), "{gap}");
    }
}
