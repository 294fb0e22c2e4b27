//! `quorum-lock run`: hold a lock for as long as a program runs.

use std::ffi::OsString;
use std::io::{self, IsTerminal as _};
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, getpgrp};
use quorum_lock::{Error, FencingToken, LockGuard, LostReason, Redlock};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::duration::{display, human};
use crate::progress;
use crate::schedule::{KILL_MARGIN, Plan};
use crate::{
    EX_CONFIG, EX_NOPERM, EX_OSERR, EX_SOFTWARE, EX_TEMPFAIL, EX_UNAVAILABLE, EX_USAGE, Failure,
};

/// What `run` was asked to do, validated.
#[derive(Debug)]
pub(crate) struct RunOptions {
    pub(crate) resource: String,
    pub(crate) ttl: Duration,
    /// `None`: `--no-wait`, one attempt.
    pub(crate) wait: Option<Duration>,
    pub(crate) fencing: bool,
    /// What is held while the program runs.
    pub(crate) kind: HeldKind,
    /// When to extend, SIGTERM and SIGKILL (grace period included).
    pub(crate) plan: Plan,
    /// The client's per-node timeout: the pause between failed extensions.
    pub(crate) node_timeout: Duration,
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
}

/// What `run` holds while the program runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeldKind {
    /// The lock of the resource.
    Lock,
    /// `--permits K`: a permit of the semaphore of that name.
    Permit(u32),
    /// `--shared`: a read lock of the read-write lock of that name.
    Read,
    /// `--exclusive`: the write lock of the read-write lock of that name.
    Write,
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

/// The signal that ended the program, if one did.
fn signal_of(status: ExitStatus) -> Option<Signal> {
    use std::os::unix::process::ExitStatusExt;
    status.signal().and_then(|sig| Signal::try_from(sig).ok())
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
    if err.is_permission() {
        Failure::new(
            EX_NOPERM,
            format!("cannot lock {:?}: {err}{report}", opts.resource),
        )
    } else if err.is_contended() {
        let held = match opts.kind {
            HeldKind::Permit(k) => format!("all {k} permits of {:?} are", opts.resource),
            HeldKind::Read => format!("{:?} is written", opts.resource),
            HeldKind::Write => format!("{:?} is read or written", opts.resource),
            HeldKind::Lock => format!("{:?} is", opts.resource),
        };
        Failure::new(
            EX_TEMPFAIL,
            format!("{held} held elsewhere: not acquired {within}{report}"),
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
    let (guard, fence) = acquire(redlock, &opts, signals).await?;
    let validity = guard.validity();
    if validity <= opts.plan.stop_budget() {
        let _ = guard.release().await;
        return Err(Failure::new(
            EX_UNAVAILABLE,
            format!(
                "{:?} was acquired with only {} of validity left, not enough to run the program \
                 and still stop it in time ({} grace period, SIGKILL {} before the validity \
                 ends); the nodes answer too slowly for --ttl {}; not run",
                opts.resource,
                human(validity),
                display(opts.plan.grace),
                human(KILL_MARGIN),
                display(opts.ttl)
            ),
        ));
    }
    match spawn(fence, &opts) {
        Ok((child, target)) => supervise(child, target, guard, &opts, signals).await,
        Err(failure) => {
            let _ = guard.release().await;
            Err(failure)
        }
    }
}

/// Takes the lock within the wait, saying who holds it meanwhile when stderr is a terminal
/// (see [`progress`]); a forwarded signal ends the wait.
async fn acquire(
    redlock: &Redlock,
    opts: &RunOptions,
    signals: &mut Signals,
) -> Result<(LockGuard, Option<FencingToken>), Failure> {
    let acquire = async {
        let started = Instant::now();
        // A fresh process has no connections yet: open them first, within the connect
        // timeout, so that the attempts' short per-node timeout is not spent connecting.
        // Unreachable nodes are left to the attempts (and their retries) to report.
        let _ = redlock.connect().await;
        // Connecting counts against the wait; `--no-wait` is one attempt (one pass over
        // the permits).
        let wait = opts.wait.map(|w| w.saturating_sub(started.elapsed()));
        let request = match opts.kind {
            HeldKind::Permit(permits) => {
                let semaphore = redlock.semaphore(&opts.resource, permits)?;
                let request = semaphore.acquire(opts.ttl).wait(wait.unwrap_or_default());
                return Ok((request.await?.into_guard(), None));
            }
            HeldKind::Read => {
                let rwlock = redlock.rwlock(&opts.resource)?;
                let request = rwlock.read(opts.ttl).wait(wait.unwrap_or_default());
                return Ok((request.await?.into_guard(), None));
            }
            HeldKind::Write => redlock.rwlock(&opts.resource)?.write(opts.ttl),
            HeldKind::Lock => redlock.lock(opts.resource.clone(), opts.ttl),
        };
        let request = match wait {
            Some(wait) => request.wait(wait),
            None => request.wait(Duration::ZERO).max_attempts(1),
        };
        if opts.fencing {
            let (guard, token) = request.fenced().await?.into_parts();
            Ok((guard, Some(token)))
        } else {
            Ok((request.await?, None))
        }
    };
    // Who holds a semaphore's permits or a read-write lock is not shown while waiting.
    let show_progress = io::stderr().is_terminal() && opts.kind == HeldKind::Lock;
    tokio::select! {
        acquired = acquire => acquired.map_err(|e| acquire_failure(&e, opts, redlock)),
        never = progress::report(redlock, &opts.resource), if show_progress => {
            match never {}
        }
        sig = signals.recv() => {
            // Whatever a cancelled attempt set expires with the TTL.
            Err(Failure::new(
                signal_status(sig),
                format!("{} while waiting for {:?}; not run", sig.as_str(), opts.resource),
            ))
        }
    }
}

/// Starts the program with its environment, in a process group of its own unless in a
/// terminal's foreground (see [`Target`]).
fn spawn(fence: Option<FencingToken>, opts: &RunOptions) -> Result<(Child, Target), Failure> {
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
    if let Some(token) = fence {
        command.env(ENV_FENCING, token.to_string());
    } else {
        // Never pass on a token from an enclosing `quorum-lock run`.
        command.env_remove(ENV_FENCING);
    }
    match command.spawn() {
        Ok(child) => Ok((child, target)),
        Err(e) => {
            let code = if e.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            Err(Failure::new(
                code,
                format!("cannot run {:?}: {e}", opts.program),
            ))
        }
    }
}

/// Why the program is being stopped.
#[derive(Debug, Clone)]
enum Why {
    /// The lock was lost (a majority no longer holds our token, or it expired).
    Lost(LostReason),
    /// With `--no-extend`: the program ran so long that the rest of the validity was only
    /// enough to stop it.
    TimeLimit,
    /// Extensions kept failing until only enough validity was left to stop the program;
    /// the last failure.
    AtRisk(String),
}

/// The program was sent SIGTERM: when, why, and whether SIGKILL followed.
struct Stopping {
    why: Why,
    termed: Instant,
    killed: bool,
}

/// What the supervisor knows about keeping the lock.
struct Keeping {
    /// Extension failures push the next try back to here.
    retry_at: Option<Instant>,
    /// The last extension failure, for the message.
    last_error: Option<String>,
    /// The lost signal has fired.
    lost: bool,
}

/// Waits for the program while forwarding signals, extending the lock and stopping the
/// program in time: SIGTERM when only `grace + KILL_MARGIN` of validity is left without an
/// extension (or when the lock is lost), SIGKILL after the grace period and always
/// `KILL_MARGIN` before the validity ends (see [`Plan`]).
async fn supervise(
    mut child: Child,
    target: Target,
    guard: LockGuard,
    opts: &RunOptions,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let plan = opts.plan;
    let lost = guard.lost_signal();
    let retry_pause = opts.node_timeout.max(Duration::from_millis(1));
    let mut keeping = Keeping {
        retry_at: None,
        last_error: None,
        lost: false,
    };
    let mut stopping: Option<Stopping> = None;
    let waited = loop {
        let now = Instant::now();
        let deadline = guard.deadline();
        let term_at = stopping.is_none().then(|| plan.term_at(deadline, now));
        let kill_at = stopping
            .as_ref()
            .filter(|s| !s.killed)
            .map(|s| plan.kill_at(deadline, s.termed));
        // Keep extending while the program shuts down: its clean-up runs under the lock.
        let extend_at = plan
            .extend_at(deadline, now)
            .filter(|_| !keeping.lost)
            .map(|at| keeping.retry_at.map_or(at, |r| r.max(at)));
        tokio::select! {
            // A program that has ended ran to the end, even if the lock was lost meanwhile.
            biased;
            status = child.wait() => break status,
            () = sleep_until(kill_at), if kill_at.is_some() => {
                send(&child, target, Signal::SIGKILL);
                if let Some(s) = stopping.as_mut() {
                    s.killed = true;
                }
            }
            reason = lost.lost(), if !keeping.lost => {
                keeping.lost = true;
                if stopping.is_none() {
                    send(&child, target, Signal::SIGTERM);
                    stopping = Some(Stopping { why: Why::Lost(reason), termed: Instant::now(), killed: false });
                }
            }
            () = sleep_until(term_at), if term_at.is_some() => {
                send(&child, target, Signal::SIGTERM);
                let why = match keeping.last_error.clone() {
                    _ if !plan.extends() => Why::TimeLimit,
                    Some(e) => Why::AtRisk(e),
                    None => Why::AtRisk("no extension completed in time".into()),
                };
                stopping = Some(Stopping { why, termed: Instant::now(), killed: false });
            }
            result = extend_when(&guard, opts.ttl, extend_at), if extend_at.is_some() => {
                let now = Instant::now();
                // Never again at once, whatever the error (no tight loop).
                let later = now.checked_add(retry_pause).unwrap_or(now);
                match result {
                    Ok(_) => keeping.retry_at = None,
                    // The lease is marked lost: the lost branch fires next.
                    Err(Error::NotHeld { .. }) => keeping.retry_at = Some(later),
                    Err(e) => {
                        keeping.last_error = Some(e.to_string());
                        keeping.retry_at = Some(later);
                    }
                }
            }
            sig = signals.recv() => send(&child, target, sig),
        }
    };
    let released = guard.release().await;
    finish(waited, released, stopping, opts)
}

/// Sleeps until `at`, then tries one extension.
async fn extend_when(
    guard: &LockGuard,
    ttl: Duration,
    at: Option<Instant>,
) -> quorum_lock::Result<Duration> {
    sleep_until(at).await;
    guard.extend(ttl).await
}

/// The exit status and message once the program has ended and the lock was released.
fn finish(
    waited: io::Result<ExitStatus>,
    released: quorum_lock::Result<quorum_lock::NodeReport>,
    stopping: Option<Stopping>,
    opts: &RunOptions,
) -> Result<u8, Failure> {
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
    if let Some(stopping) = stopping {
        let ending = if stopping.killed {
            format!(
                "it ignored SIGTERM and was killed with SIGKILL after the {} grace period, \
                 {} before the lock's validity ended",
                display(opts.plan.grace),
                human(KILL_MARGIN)
            )
        } else if signal_of(status) == Some(Signal::SIGTERM) {
            "SIGTERM ended it".to_owned()
        } else {
            format!("it was sent SIGTERM and {}", describe(status))
        };
        let what = match &stopping.why {
            Why::Lost(reason) => format!("was lost while the program ran ({reason})"),
            Why::TimeLimit => format!(
                "was about to expire: the program outlived --ttl {} with --no-extend",
                display(opts.ttl)
            ),
            Why::AtRisk(error) => format!(
                "could not be extended in time (last attempt: {error}), with {} of validity \
                 left",
                human(opts.plan.stop_budget())
            ),
        };
        return Err(Failure::new(
            EX_SOFTWARE,
            format!(
                "lock on {:?} {what}; {ending}; release: {nodes}",
                opts.resource
            ),
        ));
    }
    if let Err(e) = &released
        && e.is_permission()
    {
        // A refused release left the key on the nodes: a configuration error, not success.
        return Err(Failure::new(
            EX_NOPERM,
            format!(
                "releasing {:?} after the program {}: {e}; the key stays until its TTL ends: \
                 {nodes}",
                opts.resource,
                describe(status)
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
