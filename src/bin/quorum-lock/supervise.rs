//! `run` while the program runs: the lock is extended until every process of the
//! program's tree has exited (see [`crate::tree`]), signals are passed on, the tree is
//! stopped before the lock's validity ends when the lock is lost or at risk, and the exit
//! message says what was measured.

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::Signal;
use quorum_lock::{Error, LockGuard, LostReason};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use crate::duration::{display, human};
use crate::lag::LagMeter;
use crate::run::{RunOptions, Signals, describe, exit_code};
use crate::schedule::KILL_MARGIN;
use crate::tree::{ProcessTree, Reaped};
use crate::watchdog::{FIRED, Watchdog};
use crate::{EX_NOPERM, EX_OSERR, EX_SOFTWARE, Failure};

/// How often SIGKILL is sent again while processes of the tree remain: one may have forked
/// as the last one was sent.
const KILL_AGAIN: Duration = Duration::from_millis(10);

/// Timers this late, with no extension failure to blame, name a starved host as the
/// reason the tree is stopped.
const STARVED: Duration = Duration::from_millis(50);

/// The program's tree, started and watched.
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) tree: ProcessTree,
    pub(crate) watchdog: Watchdog,
    pub(crate) reaped: UnboundedReceiver<Reaped>,
}

/// Why the tree is being stopped.
#[derive(Debug, Clone)]
enum Why {
    /// The lock was lost (a majority no longer holds our token, or it expired).
    Lost(LostReason),
    /// With `--no-extend`: the program ran so long that the rest of the validity was only
    /// enough to stop it.
    TimeLimit,
    /// Extensions kept failing (or none completed) until only enough validity was left to
    /// stop the program; the last failure, and the worst lateness of `quorum-lock`'s own
    /// timers when it was enough to call the host busy.
    AtRisk(String, Option<Duration>),
    /// With no extension due, `quorum-lock`'s own timers ran so late (a starved host) that
    /// the margin needed to stop the tree in time took the rest of the validity; the worst
    /// lateness.
    Starved(Duration),
    /// With `--stop-leftovers`: the program exited and left processes behind.
    Leftovers,
}

/// What is known when SIGTERM's time has come, to name the cause.
#[derive(Debug, Clone, Copy)]
struct TermDue {
    /// The worst lateness of the supervisor's timers lately.
    worst_lateness: Duration,
    /// Due only because the kill margin grew with that lateness.
    early: bool,
    /// An extension was due and has not moved the deadline: it failed or still waits.
    extension_overdue: bool,
    /// The lock is extended (no `--no-extend`).
    extends: bool,
}

impl TermDue {
    /// The cause, given the last extension failure. A starved host is the cause only
    /// when no extension was due; otherwise the extensions are, the lateness added.
    fn why(self, last_error: Option<String>) -> Why {
        let busy = (self.worst_lateness >= STARVED).then_some(self.worst_lateness);
        match last_error {
            _ if busy.is_some() && self.early && !self.extension_overdue => {
                Why::Starved(self.worst_lateness)
            }
            _ if !self.extends => Why::TimeLimit,
            Some(e) => Why::AtRisk(e, busy),
            None => Why::AtRisk("no extension completed in time".into(), busy),
        }
    }
}

/// A moment, and the lock's validity end as known then.
#[derive(Debug, Clone, Copy)]
struct Moment {
    at: Instant,
    validity_end: Instant,
}

impl Moment {
    fn now(guard: &LockGuard) -> Moment {
        Moment {
            at: Instant::now(),
            validity_end: guard.deadline(),
        }
    }

    /// "1.2s before the lock's validity end", or "after" when it came later.
    fn against_validity(self) -> String {
        if self.at <= self.validity_end {
            format!(
                "{} before the lock's validity end",
                human(self.validity_end - self.at)
            )
        } else {
            format!(
                "{} AFTER the lock's validity end",
                human(self.at - self.validity_end)
            )
        }
    }
}

/// The tree is being stopped: why, when SIGTERM went, and when SIGKILL did.
#[derive(Debug)]
struct Stopping {
    why: Why,
    termed: Moment,
    killed: Option<Moment>,
}

/// What the supervisor knows about keeping the lock.
#[derive(Debug, Default)]
struct Keeping {
    /// Extension failures push the next try back to here.
    retry_at: Option<Instant>,
    /// The last extension failure, for the message.
    last_error: Option<String>,
    /// The lost signal has fired.
    lost: bool,
}

/// What was seen of the tree's end.
#[derive(Debug, Default)]
struct Ended {
    /// The program's status, once reaped.
    program: Option<ExitStatus>,
    /// Other processes of the tree reaped (orphans re-parented to `quorum-lock`).
    others: usize,
    /// The watchdog had to kill the tree.
    watchdog_fired: bool,
    /// When the tree was seen empty.
    gone: Option<Moment>,
}

impl Ended {
    /// Notes one reaped child; returns whether the whole tree is now gone.
    fn note(&mut self, reaped: &Reaped, started: &Started, guard: &LockGuard) -> bool {
        if reaped.pid == started.watchdog.pid() {
            self.watchdog_fired = reaped.status.code() == Some(FIRED);
            return false;
        }
        if reaped.pid == started.tree.program {
            self.program = Some(reaped.status);
        } else {
            self.others += 1;
        }
        let gone = self.program.is_some() && started.tree.live().is_empty();
        if gone {
            self.gone = Some(Moment::now(guard));
        }
        gone
    }
}

/// When the supervisor acts next, unless something happens first.
struct Timers {
    term_at: Option<Instant>,
    kill_at: Option<Instant>,
    extend_at: Option<Instant>,
}

/// The supervisor's state between wake-ups.
struct Supervision<'a> {
    guard: &'a LockGuard,
    opts: &'a RunOptions,
    started: Started,
    keeping: Keeping,
    stopping: Option<Stopping>,
    ended: Ended,
    lateness: LagMeter,
}

impl Supervision<'_> {
    /// Sends SIGTERM to the tree for `why`, unless it is being stopped already.
    fn stop(&mut self, why: Why) {
        if let Some(stopping) = self.stopping.as_mut() {
            // Stopping the program's leftovers: a lost lock still says so.
            if matches!(stopping.why, Why::Leftovers) {
                stopping.why = why;
            }
        } else {
            self.started.tree.signal_all(Signal::SIGTERM);
            self.stopping = Some(Stopping {
                why,
                termed: Moment::now(self.guard),
                killed: None,
            });
        }
    }

    /// Sends SIGKILL to the tree (again, if it was sent before).
    fn kill(&mut self) {
        self.started.tree.signal_all(Signal::SIGKILL);
        let now = Moment::now(self.guard);
        if let Some(s) = self.stopping.as_mut().filter(|s| s.killed.is_none()) {
            s.killed = Some(now);
        }
    }

    /// When the next SIGTERM, SIGKILL and extension are due, as of `now`; feeds the
    /// watchdog its deadline.
    fn timers(&mut self, now: Instant) -> Timers {
        let plan = self.opts.plan;
        let deadline = self.guard.deadline();
        let margin = self.lateness.margin(KILL_MARGIN, now);
        // The watchdog acts only if the supervisor did not: half the margin later, still
        // before the validity ends.
        self.started
            .watchdog
            .feed(deadline.checked_sub(margin / 2).unwrap_or(now), deadline);
        let term_at = self
            .stopping
            .is_none()
            .then(|| plan.term_at(deadline, now, margin));
        let kill_at = self.stopping.as_ref().map(|st| match st.killed {
            None => plan.kill_at(deadline, st.termed.at, margin),
            Some(killed) => killed.at.max(now) + KILL_AGAIN,
        });
        // Keep extending while the tree shuts down: its clean-up runs under the lock.
        let extend_at = plan
            .extend_at(deadline, now)
            .filter(|_| !self.keeping.lost)
            .map(|at| self.keeping.retry_at.map_or(at, |r| r.max(at)));
        Timers {
            term_at,
            kill_at,
            extend_at,
        }
    }

    /// Receives the ends of a tree seen ended; returns whether the program's was among
    /// them.
    async fn reap_the_ended(&mut self) -> bool {
        while let Some(reaped) = self.started.reaped.recv().await {
            if self.ended.note(&reaped, &self.started, self.guard) {
                return true;
            }
        }
        self.ended.program.is_some()
    }

    /// Why SIGTERM is due now that its time has come.
    fn why_term_is_due(&self, now: Instant) -> Why {
        let worst = self.lateness.worst(now);
        let plan = self.opts.plan;
        let deadline = self.guard.deadline();
        let due = TermDue {
            worst_lateness: worst,
            early: plan.term_at(deadline, now, KILL_MARGIN) > now,
            extension_overdue: plan.extend_at(deadline, now).is_some_and(|at| at <= now),
            extends: plan.extends(),
        };
        due.why(self.keeping.last_error.clone())
    }

    /// Records an extension's outcome.
    fn extended(&mut self, result: quorum_lock::Result<Duration>) {
        let now = Instant::now();
        let pause = self.opts.node_timeout.max(Duration::from_millis(1));
        // Never again at once, whatever the error (no tight loop).
        let later = now.checked_add(pause).unwrap_or(now);
        match result {
            Ok(_) => self.keeping.retry_at = None,
            // The lease is marked lost: the lost branch fires next.
            Err(Error::NotHeld { .. }) => self.keeping.retry_at = Some(later),
            Err(e) => {
                self.keeping.last_error = Some(e.to_string());
                self.keeping.retry_at = Some(later);
            }
        }
    }
}

/// Waits for the whole tree while forwarding signals, extending the lock and stopping the
/// tree in time: SIGTERM when only `grace + margin` of validity is left without an
/// extension (or when the lock is lost), SIGKILL after the grace period and always
/// `margin` before the validity ends, where `margin` is [`KILL_MARGIN`] widened by the
/// lateness measured on this host (see [`crate::lag`]). Releases once the tree is gone.
pub(crate) async fn supervise(
    started: Started,
    guard: LockGuard,
    opts: &RunOptions,
    signals: &mut Signals,
    lateness: LagMeter,
) -> Result<u8, Failure> {
    let lost = guard.lost_signal();
    let mut s = Supervision {
        guard: &guard,
        opts,
        started,
        keeping: Keeping::default(),
        stopping: None,
        ended: Ended::default(),
        lateness,
    };
    let tracked = loop {
        let Timers {
            term_at,
            kill_at,
            extend_at,
        } = s.timers(Instant::now());
        tokio::select! {
            // A tree that has ended ran to the end, even if the lock was lost meanwhile.
            biased;
            reaped = s.started.reaped.recv() => match reaped {
                Some(reaped) => {
                    if s.ended.note(&reaped, &s.started, &guard) {
                        break true;
                    }
                    if s.ended.program.is_some() && opts.stop_leftovers {
                        s.stop(Why::Leftovers);
                    }
                }
                // No child left at all, the program not among the reaped: lost track.
                None => break s.ended.program.is_some(),
            },
            () = sleep_until(kill_at), if kill_at.is_some() => s.kill(),
            reason = lost.lost(), if !s.keeping.lost => {
                s.keeping.lost = true;
                s.stop(Why::Lost(reason));
            }
            () = sleep_until(term_at), if term_at.is_some() => {
                // A stall can delay the reaper past the tree's end: nothing is left to stop.
                if s.started.tree.has_ended() {
                    break s.reap_the_ended().await;
                }
                let why = s.why_term_is_due(Instant::now());
                s.stop(why);
            }
            result = extend_when(&guard, opts.ttl, extend_at), if extend_at.is_some() => {
                s.extended(result);
            }
            () = tokio::time::sleep_until(s.lateness.next_tick()) => {
                s.lateness.ticked(Instant::now());
            }
            sig = signals.recv() => {
                s.started.tree.forward(sig, s.ended.program.is_none());
            }
        }
    };
    let Supervision {
        started,
        stopping,
        ended,
        ..
    } = s;
    let mut ended = ended;
    ended.watchdog_fired |= dismissed(started).await;
    let released = guard.release().await;
    if !tracked {
        return Err(Failure::new(
            EX_OSERR,
            "lost track of the program: its exit was never seen".to_owned(),
        ));
    }
    finish(ended, released, stopping, opts)
}

/// How long the watchdog may take to exit once dismissed.
const WATCHDOG_EXIT: Duration = Duration::from_millis(500);

/// Dismisses the watchdog and waits (briefly) for its exit: whether it had killed the
/// tree, which a supervisor that was stopped learns only now.
async fn dismissed(started: Started) -> bool {
    let Started {
        watchdog,
        mut reaped,
        ..
    } = started;
    let pid = watchdog.pid();
    watchdog.dismiss();
    let exit = async {
        while let Some(child) = reaped.recv().await {
            if child.pid == pid {
                return child.status.code() == Some(FIRED);
            }
        }
        false
    };
    tokio::time::timeout(WATCHDOG_EXIT, exit)
        .await
        .unwrap_or(false)
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

/// What the tree's stop looked like, measured: the signals sent and when, against the
/// lock's validity end, how the program ended and when the tree was gone.
fn stop_account(stopping: &Stopping, ended: &Ended, opts: &RunOptions) -> String {
    let mut text = format!(
        "the program's tree was sent SIGTERM {}",
        stopping.termed.against_validity()
    );
    if let Some(killed) = stopping.killed {
        text.push_str(&format!(
            ", then SIGKILL {} later ({} grace period), {}",
            human(killed.at.saturating_duration_since(stopping.termed.at)),
            display(opts.plan.grace),
            killed.against_validity()
        ));
    }
    if ended.watchdog_fired {
        text.push_str(
            "; its watchdog sent SIGKILL to the program's tree (quorum-lock was stopped or \
             starved)",
        );
    }
    if let Some(status) = ended.program {
        text.push_str(&format!("; the program {}", describe(status)));
    }
    if ended.others > 0 {
        text.push_str(&format!(
            ", {} more of its processes ended after their parents",
            ended.others
        ));
    }
    if let Some(gone) = ended.gone {
        text.push_str(&format!(
            "; its whole tree was seen gone {}",
            gone.against_validity()
        ));
    }
    text
}

/// The exit status and message once the tree has ended and the lock was released.
fn finish(
    ended: Ended,
    released: quorum_lock::Result<quorum_lock::NodeReport>,
    stopping: Option<Stopping>,
    opts: &RunOptions,
) -> Result<u8, Failure> {
    let status = ended
        .program
        .ok_or_else(|| Failure::new(EX_OSERR, "lost track of the program".to_owned()))?;
    let nodes = match &released {
        Ok(report) => report.to_string(),
        Err(e) => e.report().map(ToString::to_string).unwrap_or_default(),
    };
    if let Some(stopping) = stopping.filter(|s| !matches!(s.why, Why::Leftovers)) {
        let what = match &stopping.why {
            Why::Lost(reason) => format!("was lost while the program ran ({reason})"),
            Why::TimeLimit => format!(
                "was about to expire: the program outlived --ttl {} with --no-extend",
                display(opts.ttl)
            ),
            Why::AtRisk(error, busy) => format!(
                "could not be extended in time (last attempt: {error}), with {} of validity \
                 left{}",
                human(opts.plan.stop_budget()),
                busy.map(|worst| format!(
                    " (quorum-lock's timers also ran up to {} late on this busy host)",
                    human(worst)
                ))
                .unwrap_or_default()
            ),
            Why::Starved(worst) => format!(
                "had too little validity left to stop the program safely: quorum-lock's \
                 timers ran up to {} late on this busy host",
                human(*worst)
            ),
            Why::Leftovers => String::new(),
        };
        let account = stop_account(&stopping, &ended, opts);
        return Err(Failure::new(
            EX_SOFTWARE,
            format!(
                "lock on {:?} {what}; {account}; release: {nodes}",
                opts.resource
            ),
        ));
    }
    if ended.watchdog_fired {
        let gone = ended
            .gone
            .map(|g| format!("; its whole tree was seen gone {}", g.against_validity()))
            .unwrap_or_default();
        return Err(Failure::new(
            EX_SOFTWARE,
            format!(
                "lock on {:?}: quorum-lock was stopped or starved past the moment the program \
                 had to be dead, and its watchdog sent SIGKILL to the program's tree; the \
                 program {}{gone}; release: {nodes}",
                opts.resource,
                describe(status)
            ),
        ));
    }
    released_after(status, &released, &nodes, opts)
}

/// The program ran to the end: its status, unless the release was refused.
fn released_after(
    status: ExitStatus,
    released: &quorum_lock::Result<quorum_lock::NodeReport>,
    nodes: &str,
    opts: &RunOptions,
) -> Result<u8, Failure> {
    if let Err(e) = released
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

/// The error for a tree that could not be watched: the program is killed at once.
pub(crate) fn unwatched(tree: &ProcessTree, what: &str, e: &io::Error) -> Failure {
    tree.signal_all(Signal::SIGKILL);
    Failure::new(EX_OSERR, format!("cannot watch the program ({what}): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    fn due(lateness: u64, early: bool, extension_overdue: bool, extends: bool) -> TermDue {
        TermDue {
            worst_lateness: MS(lateness),
            early,
            extension_overdue,
            extends,
        }
    }

    #[test]
    fn failing_extensions_are_the_cause_even_on_a_busy_host() {
        let failed = Some("timed out".to_owned());
        match due(60, true, true, true).why(failed) {
            Why::AtRisk(e, Some(late)) => assert_eq!((e.as_str(), late), ("timed out", MS(60))),
            other => panic!("{other:?}"),
        }
        match due(60, true, true, true).why(None) {
            Why::AtRisk(e, Some(_)) => assert_eq!(e, "no extension completed in time"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            due(10, false, true, true).why(None),
            Why::AtRisk(_, None)
        ));
    }

    #[test]
    fn a_busy_host_is_the_cause_when_no_extension_was_due() {
        assert!(matches!(
            due(60, true, false, true).why(None),
            Why::Starved(late) if late == MS(60)
        ));
        assert!(matches!(
            due(60, true, false, false).why(None),
            Why::Starved(_)
        ));
        // Lateness below the threshold, or a stop due anyway, is not starvation.
        assert!(matches!(
            due(10, true, false, false).why(None),
            Why::TimeLimit
        ));
        assert!(matches!(
            due(60, false, false, false).why(None),
            Why::TimeLimit
        ));
    }
}
