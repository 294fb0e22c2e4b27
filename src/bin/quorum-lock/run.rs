//! `quorum-lock run`: hold a lock for as long as a program runs.

use std::ffi::OsString;
use std::io::{self, IsTerminal as _};
use std::process::ExitStatus;
use std::time::Duration;

use std::process::Command;

use nix::sys::signal::Signal;
use nix::unistd::{Pid, getpgrp, getpid};
use quorum_lock::{Error, FencingToken, LockGuard, LockTicket, Redlock};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::duration::{display, human};
use crate::lag::LagMeter;
use crate::progress;
use crate::schedule::{KILL_MARGIN, Plan};
use crate::supervise::{self, Started};
use crate::ticket;
use crate::tree::{self, ProcessTree, Target};
use crate::watchdog::Watchdog;
use crate::{
    EX_CONFIG, EX_NOPERM, EX_OSERR, EX_SOFTWARE, EX_TEMPFAIL, EX_UNAVAILABLE, EX_USAGE, Failure,
};

/// What `run` was asked to do, validated.
#[derive(Debug, Clone)]
pub(crate) struct RunOptions {
    pub(crate) resource: String,
    /// `--detach`: print a ticket for the lock and exit with it held; no program.
    pub(crate) detach: bool,
    /// `--ticket`: adopt the lock this ticket hands on instead of acquiring `resource`.
    pub(crate) ticket: Option<LockTicket>,
    pub(crate) ttl: Duration,
    /// `None`: `--no-wait`, one attempt.
    pub(crate) wait: Option<Duration>,
    pub(crate) fencing: bool,
    /// What is held while the program runs.
    pub(crate) kind: HeldKind,
    /// What a leader proclaims (`elect --value`); empty for the other kinds.
    pub(crate) value: String,
    /// `elect --requeue`: campaign again after the term was lost while the program ran.
    pub(crate) requeue: bool,
    /// When to extend, SIGTERM and SIGKILL (grace period included).
    pub(crate) plan: Plan,
    /// The client's per-node timeout: the pause between failed extensions.
    pub(crate) node_timeout: Duration,
    /// `--stop-leftovers`: when the program exits, stop the processes it left behind
    /// instead of holding the lock until they exit.
    pub(crate) stop_leftovers: bool,
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
    /// `elect`: a term of the leader election of that name.
    Leader,
}

/// Environment variable naming the resource, for the program.
pub(crate) const ENV_RESOURCE: &str = "QUORUM_LOCK_RESOURCE";
/// Environment variable holding the fencing token, with `--fencing`.
pub(crate) const ENV_FENCING: &str = "QUORUM_LOCK_FENCING_TOKEN";
/// Environment variable holding a leader's epoch, under `elect` (also its fencing token).
pub(crate) const ENV_EPOCH: &str = "QUORUM_LOCK_EPOCH";
/// Environment variable holding the value a leader proclaims, under `elect`.
pub(crate) const ENV_LEADER_VALUE: &str = "QUORUM_LOCK_LEADER_VALUE";

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
    pub(crate) async fn recv(&mut self) -> Signal {
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
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(EX_SOFTWARE),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(EX_SOFTWARE),
        (None, None) => EX_SOFTWARE,
    }
}

/// How the program ended, in words.
pub(crate) fn describe(status: ExitStatus) -> String {
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

/// Who holds the lock of `resource`, read once after a refusal for contention: a holder,
/// the readers or a semaphore's permit holders (one name is one lock).
async fn held_by(redlock: &Redlock, resource: &str) -> Option<String> {
    let status = redlock.status(resource).await.ok()?;
    let holder = status.holder.as_ref()?;
    Some(crate::show::holder_text(holder, status.held_for))
}

/// What went wrong acquiring, as an exit status and message; `holder` names who holds
/// the lock when it was refused for contention.
fn acquire_failure(
    err: &Error,
    opts: &RunOptions,
    redlock: &Redlock,
    holder: Option<&str>,
) -> Failure {
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
            HeldKind::Leader => format!("the election {:?} is", opts.resource),
        };
        let held = match holder {
            Some(who) => format!("{held} held elsewhere, by {who}:"),
            None => format!("{held} held elsewhere:"),
        };
        Failure::new(EX_TEMPFAIL, format!("{held} not acquired {within}{report}"))
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
    let mut lateness = LagMeter::new(Instant::now());
    let (guard, fence) = acquire(redlock, &opts, signals, &mut lateness).await?;
    if opts.detach {
        return Ok(ticket::print_ticket(guard.detach()));
    }
    let validity = guard.validity();
    let margin = lateness.margin(KILL_MARGIN, Instant::now());
    if validity <= opts.plan.grace.saturating_add(margin) {
        let _ = guard.release().await;
        return Err(too_little_validity(&opts, validity, &lateness));
    }
    let watchdog = match Watchdog::start() {
        Ok(watchdog) => watchdog,
        Err(e) => {
            let _ = guard.release().await;
            return Err(Failure::new(
                EX_OSERR,
                format!("cannot start the watchdog: {e}; not run"),
            ));
        }
    };
    // Before the program starts: its orphans must come to us, not to init.
    tree::become_subreaper();
    let tree = match spawn(fence, &opts, &watchdog) {
        Ok(tree) => tree,
        Err(failure) => {
            watchdog.dismiss();
            let _ = guard.release().await;
            return Err(failure);
        }
    };
    let mut watchdog = watchdog;
    watchdog.watch(tree.program, tree.target == Target::Group);
    let deadline = guard.deadline();
    watchdog.feed(
        deadline
            .checked_sub(KILL_MARGIN / 2)
            .unwrap_or_else(Instant::now),
        deadline,
    );
    // After the last spawn: the standard library reaps a child whose `exec` failed itself.
    let reaped = match tree::spawn_reaper() {
        Ok(reaped) => reaped,
        Err(e) => {
            let failure = supervise::unwatched(&tree, "no reaper thread", &e);
            let _ = guard.release().await;
            return Err(failure);
        }
    };
    let started = Started {
        tree,
        watchdog,
        reaped,
    };
    supervise::supervise(started, guard, &opts, signals, lateness).await
}

/// The refusal when the lock was acquired with too little validity to run the program and
/// still stop it in time: the nodes were slow, or this host delays `quorum-lock`'s timers.
fn too_little_validity(opts: &RunOptions, validity: Duration, lateness: &LagMeter) -> Failure {
    let now = Instant::now();
    let margin = lateness.margin(KILL_MARGIN, now);
    let cause = if margin > KILL_MARGIN {
        format!(
            "this host delays quorum-lock's timers by up to {} (a busy CPU, nice, a throttled \
             cgroup), so SIGKILL must go {} before the validity ends",
            human(lateness.worst(now)),
            human(margin)
        )
    } else {
        format!(
            "the nodes answer too slowly for --ttl {} (SIGKILL goes {} before the validity \
             ends)",
            display(opts.ttl),
            human(margin)
        )
    };
    Failure::new(
        EX_UNAVAILABLE,
        format!(
            "{:?} was acquired with only {} of validity left, not enough to run the program and \
             still stop it in time ({} grace period): {cause}; not run",
            opts.resource,
            human(validity),
            display(opts.plan.grace),
        ),
    )
}

/// Takes the lock within the wait, saying who holds it meanwhile when stderr is a terminal
/// (see [`progress`]); a forwarded signal ends the wait. Measures the lateness of this
/// process's timers meanwhile (see [`crate::lag`]).
async fn acquire(
    redlock: &Redlock,
    opts: &RunOptions,
    signals: &mut Signals,
    lateness: &mut LagMeter,
) -> Result<(LockGuard, Option<FencingToken>), Failure> {
    let acquire = async {
        let started = Instant::now();
        // A fresh process has no connections yet: open them first, within the connect
        // timeout, so that the attempts' short per-node timeout is not spent connecting.
        // Unreachable nodes are left to the attempts (and their retries) to report.
        let _ = redlock.connect().await;
        if let Some(ticket) = &opts.ticket {
            let guard = redlock.adopt(ticket).await?;
            return Ok((guard, ticket.fencing_token()));
        }
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
            HeldKind::Leader => return campaign(redlock, opts, wait).await,
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
    let progress = progress::report(redlock, &opts.resource);
    tokio::pin!(acquire, progress);
    loop {
        tokio::select! {
            acquired = &mut acquire => {
                let e: Error = match acquired {
                    Ok(held) => return Ok(held),
                    Err(e) if opts.ticket.is_some() => return Err(ticket::adopt_failure(&e)),
                    Err(e) => e,
                };
                let named = e.is_contended()
                    && !matches!(opts.kind, HeldKind::Permit(_) | HeldKind::Leader);
                let holder = match named {
                    true => held_by(redlock, &opts.resource).await,
                    false => None,
                };
                return Err(acquire_failure(&e, opts, redlock, holder.as_deref()));
            }
            never = &mut progress, if show_progress => match never {},
            sig = signals.recv() => {
                // Whatever a cancelled attempt set expires with the TTL.
                return Err(Failure::new(
                    signal_status(sig),
                    format!("{} while waiting for {:?}; not run", sig.as_str(), opts.resource),
                ));
            }
            () = tokio::time::sleep_until(lateness.next_tick()) => lateness.ticked(Instant::now()),
        }
    }
}

/// `elect`: a term of the election, with its epoch as the fencing token.
async fn campaign(
    redlock: &Redlock,
    opts: &RunOptions,
    wait: Option<Duration>,
) -> Result<(LockGuard, Option<FencingToken>), Error> {
    let campaign = (redlock.election(&opts.resource)?).campaign(opts.value.clone(), opts.ttl);
    let campaign = match wait {
        Some(wait) => campaign.wait(wait),
        None => campaign.wait(Duration::ZERO).max_attempts(1),
    };
    let (guard, epoch) = campaign.await?.into_parts();
    Ok((guard, Some(epoch)))
}

/// Starts the program with its environment, in a process group of its own unless in a
/// terminal's foreground (see [`Target`]).
fn spawn(
    fence: Option<FencingToken>,
    opts: &RunOptions,
    watchdog: &Watchdog,
) -> Result<ProcessTree, Failure> {
    use std::os::unix::process::CommandExt as _;
    let mut command = Command::new(&opts.program);
    command.args(&opts.args).env(ENV_RESOURCE, &opts.resource);
    let target = if in_terminal_foreground() {
        Target::Process
    } else {
        command.process_group(0);
        Target::Group
    };
    if opts.kind == HeldKind::Leader {
        command.env(ENV_LEADER_VALUE, &opts.value);
        command.env(ENV_EPOCH, fence.map(|t| t.to_string()).unwrap_or_default());
    } else {
        command.env_remove(ENV_LEADER_VALUE).env_remove(ENV_EPOCH);
    }
    if let Some(token) = fence {
        command.env(ENV_FENCING, token.to_string());
    } else {
        // Never pass on a token from an enclosing `quorum-lock run`.
        command.env_remove(ENV_FENCING);
    }
    match command.spawn() {
        // Reaped by the reaper thread, never through this handle.
        Ok(child) => Ok(ProcessTree {
            supervisor: getpid(),
            program: Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX)),
            target,
            watchdog: Some(watchdog.pid()),
        }),
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
