//! `quorum-lock run`: hold a lock for as long as a program runs.

use std::ffi::OsString;
use std::io::{self, IsTerminal as _};
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, getpgrp};
use quorum_lock::{AutoExtend, Error, LockGuard, LostReason, Redlock};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::duration::display;
use crate::{EX_CONFIG, EX_OSERR, EX_SOFTWARE, EX_TEMPFAIL, EX_UNAVAILABLE, EX_USAGE, Failure};

/// What `run` was asked to do, validated.
#[derive(Debug)]
pub(crate) struct RunOptions {
    pub(crate) resource: String,
    pub(crate) ttl: Duration,
    /// `None`: `--no-wait`, one attempt.
    pub(crate) wait: Option<Duration>,
    pub(crate) extend: bool,
    pub(crate) fencing: bool,
    pub(crate) grace: Duration,
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
}

/// Environment variable naming the resource, for the program.
pub(crate) const ENV_RESOURCE: &str = "QUORUM_LOCK_RESOURCE";
/// Environment variable holding the fencing token, with `--fencing`.
pub(crate) const ENV_FENCING: &str = "QUORUM_LOCK_FENCING_TOKEN";

/// The signals passed on to the program. Each would otherwise end `quorum-lock` at once
/// and leave the program running without its lock being extended or released.
const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// Signal handlers for [`FORWARDED`], installed before anything else happens so that no
/// signal takes the default action (death) while the lock is held.
pub(crate) struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    pub(crate) fn install() -> io::Result<Signals> {
        let streams = FORWARDED
            .iter()
            .map(|&sig| Ok((sig, signal(SignalKind::from_raw(sig as i32))?)))
            .collect::<io::Result<_>>()?;
        Ok(Signals { streams })
    }

    /// The next signal received. Cancel safe.
    async fn recv(&mut self) -> Signal {
        let waits = self.streams.iter_mut().map(|(sig, stream)| {
            Box::pin(async move {
                match stream.recv().await {
                    Some(()) => *sig,
                    // The signal driver is gone (runtime shutting down): nothing more comes.
                    None => std::future::pending().await,
                }
            })
        });
        futures::future::select_all(waits).await.0
    }
}

/// The shell convention for a death by signal.
fn signal_status(sig: Signal) -> u8 {
    u8::try_from(128 + sig as i32).unwrap_or(EX_SOFTWARE)
}

/// The exit status to pass on: the program's code, or 128 + the signal that ended it.
fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(EX_SOFTWARE),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(EX_SOFTWARE),
        (None, None) => EX_SOFTWARE,
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("was killed by {}", s.as_str()),
            Err(_) => format!("was killed by signal {sig}"),
        },
        (None, None) => format!("ended ({status})"),
    }
}

/// Whether `quorum-lock` runs in the foreground of a terminal: its stdin is a terminal and
/// the foreground process group of its controlling terminal is its own (from
/// `/proc/self/stat`; where that cannot be read, the answer is no).
fn in_terminal_foreground() -> bool {
    if !std::io::stdin().is_terminal() {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return false;
    };
    // After the command name in parentheses: state ppid pgrp session tty_nr tpgid ...
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |i: usize| fields.get(i).and_then(|f| f.parse::<i32>().ok());
    matches!((field(2), field(5)), (Some(pgrp), Some(tpgid)) if pgrp == tpgid && pgrp == getpgrp().as_raw())
}

/// Where signals for the program go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// The program leads a process group of its own: signals go to the whole group, so a
    /// shell script's children get them too (as from a terminal).
    Group,
    /// In a terminal's foreground the program stays in our process group, keeping the
    /// terminal and job control: signals go to the program's process only.
    Process,
}

/// Sends `sig` to the program (see [`Target`]) if it has not been reaped yet.
fn send(child: &Child, target: Target, sig: Signal) {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        let pid = Pid::from_raw(pid);
        // ESRCH (already gone) is fine: its exit is about to be seen.
        let _ = match target {
            Target::Group => killpg(pid, sig),
            Target::Process => kill(pid, sig),
        };
    }
}

/// What went wrong acquiring, as an exit status and message.
fn acquire_failure(err: &Error, opts: &RunOptions, redlock: &Redlock) -> Failure {
    let report = err.report().map(|r| format!(": {r}")).unwrap_or_default();
    let within = match opts.wait {
        None => "with --no-wait".to_owned(),
        Some(w) => format!("within {}", display(w)),
    };
    let total = redlock.nodes().count();
    if err.is_contended() {
        Failure::new(
            EX_TEMPFAIL,
            format!(
                "{:?} is held elsewhere: not acquired {within}{report}",
                opts.resource
            ),
        )
    } else if err.is_unavailable() {
        // Restart quarantine keeps reachable nodes out: say so, not "unreachable".
        let why = match err.report().map_or(0, |r| r.quarantined()) {
            0 => "not enough nodes reachable for a majority",
            _ => "not enough votes for a majority (restart quarantine keeps nodes out)",
        };
        Failure::new(
            EX_UNAVAILABLE,
            format!(
                "{why} ({} of {total} needed) {within}{report}",
                redlock.quorum()
            ),
        )
    } else {
        match err {
            Error::Config(msg) => Failure::new(EX_USAGE, msg.clone()),
            Error::SameServer { .. } => Failure::new(EX_CONFIG, err.to_string()),
            // Spent validity: the nodes answered, but too slowly for the TTL.
            _ => Failure::new(
                EX_UNAVAILABLE,
                format!(
                    "could not acquire {:?} {within}: {err}; the nodes answer too slowly for \
                     --ttl {}{report}",
                    opts.resource,
                    display(opts.ttl)
                ),
            ),
        }
    }
}

/// Acquires, runs the program under the lock, releases; returns the exit status.
pub(crate) async fn run(
    redlock: &Redlock,
    opts: RunOptions,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let acquire = async {
        let started = Instant::now();
        // A fresh process has no connections yet: open them first, within the connect
        // timeout, so that the attempts' short per-node timeout is not spent connecting.
        // Unreachable nodes are left to the attempts (and their retries) to report.
        let _ = redlock.connect().await;
        let mut request = redlock.lock(opts.resource.clone(), opts.ttl);
        request = match opts.wait {
            // Connecting counts against the wait.
            Some(wait) => request.wait(wait.saturating_sub(started.elapsed())),
            None => request.wait(Duration::ZERO).max_attempts(1),
        };
        if opts.extend {
            request = request.auto_extend(AutoExtend::new());
        }
        if opts.fencing {
            request = request.fencing();
        }
        request.await
    };
    let guard = tokio::select! {
        acquired = acquire => acquired.map_err(|e| acquire_failure(&e, &opts, redlock))?,
        sig = signals.recv() => {
            // Whatever a cancelled attempt set expires with the TTL.
            return Err(Failure::new(
                signal_status(sig),
                format!("{} while waiting for {:?}; not run", sig.as_str(), opts.resource),
            ));
        }
    };

    let mut command = Command::new(&opts.program);
    command
        .args(&opts.args)
        .env(ENV_RESOURCE, &opts.resource)
        .kill_on_drop(true);
    let target = if in_terminal_foreground() {
        Target::Process
    } else {
        command.process_group(0);
        Target::Group
    };
    if opts.fencing {
        match guard.fencing_token() {
            Some(token) => {
                command.env(ENV_FENCING, token.to_string());
            }
            None => {
                let _ = guard.release().await;
                return Err(Failure::new(
                    EX_SOFTWARE,
                    "--fencing: the lock came without a fencing token; not run",
                ));
            }
        }
    } else {
        // Never pass on a token from an enclosing `quorum-lock run`.
        command.env_remove(ENV_FENCING);
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let _ = guard.release().await;
            let code = if e.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            return Err(Failure::new(
                code,
                format!("cannot run {:?}: {e}", opts.program),
            ));
        }
    };
    supervise(child, target, guard, &opts, signals).await
}

/// How the lock ended while the program ran.
struct Loss {
    reason: LostReason,
    /// When the grace period ends and SIGKILL follows.
    kill_at: Instant,
    killed: bool,
}

/// Waits for the program while forwarding signals and watching the lock.
async fn supervise(
    mut child: Child,
    target: Target,
    guard: LockGuard,
    opts: &RunOptions,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let lost = guard.lost_signal();
    let mut loss: Option<Loss> = None;
    let waited = loop {
        let kill_at = loss.as_ref().filter(|l| !l.killed).map(|l| l.kill_at);
        tokio::select! {
            // A program that has ended ran to the end, even if the lock was lost meanwhile.
            biased;
            status = child.wait() => break status,
            reason = lost.lost(), if loss.is_none() => {
                send(&child, target, Signal::SIGTERM);
                loss = Some(Loss { reason, kill_at: Instant::now() + opts.grace, killed: false });
            }
            () = sleep_until(kill_at), if kill_at.is_some() => {
                send(&child, target, Signal::SIGKILL);
                if let Some(l) = loss.as_mut() {
                    l.killed = true;
                }
            }
            sig = signals.recv() => send(&child, target, sig),
        }
    };
    let released = guard.release().await;

    let status = match waited {
        Ok(status) => status,
        Err(e) => {
            // `child` is dropped on return: kill_on_drop ends it.
            return Err(Failure::new(
                EX_OSERR,
                format!("lost track of the program: {e}"),
            ));
        }
    };
    let nodes = match &released {
        Ok(report) => report.to_string(),
        Err(e) => e.report().map(ToString::to_string).unwrap_or_default(),
    };
    if let Some(loss) = loss {
        let ending = if loss.killed {
            format!(
                "it ignored SIGTERM and was killed with SIGKILL after the {} grace period",
                display(opts.grace)
            )
        } else {
            format!("it was sent SIGTERM and {}", describe(status))
        };
        let why = if !opts.extend && loss.reason == LostReason::Expired {
            format!("it outlived --ttl {} with --no-extend", display(opts.ttl))
        } else {
            loss.reason.to_string()
        };
        return Err(Failure::new(
            EX_SOFTWARE,
            format!(
                "lock on {:?} was lost while the program ran ({why}); {ending}; release: {nodes}",
                opts.resource
            ),
        ));
    }
    if let Err(e) = released {
        // The program ran to the end, so its status stands; but say that the lock had gone.
        crate::say_err(&format!(
            "warning: releasing {:?} after the program {}: {e}: {nodes}",
            opts.resource,
            describe(status)
        ));
    }
    Ok(exit_code(status))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
