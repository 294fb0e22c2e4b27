//! `quorum-lock elect`: lead an election while a program runs, listen to who leads, or
//! list who waits.

use std::ffi::OsString;
use std::time::Duration;

use clap::Args;
use quorum_lock::{Leader, Redlock};

use crate::duration::{self, human};
use crate::run::{HeldKind, RunOptions, Signals};
use crate::{DEFAULT_TTL, EX_OSERR, Failure, say, schedule};

pub(crate) const ELECT_AFTER_HELP: &str = "\
PROGRAM runs while this candidate leads NAME, without a shell, with QUORUM_LOCK_RESOURCE
(the election's name), QUORUM_LOCK_EPOCH and QUORUM_LOCK_FENCING_TOKEN (the term's epoch,
above every earlier term's: pass it to storage that refuses older ones) and
QUORUM_LOCK_LEADER_VALUE set. Candidates lead in the order they started waiting. The term
is renewed while PROGRAM runs and supervised as `run` supervises a lock: if leadership is
lost, PROGRAM's tree is stopped (SIGTERM, then SIGKILL) before the term's validity ends,
and quorum-lock exits 70, or with --requeue campaigns again and runs PROGRAM anew once
elected. Exit statuses as `run`'s (75: not elected within --wait).

With --listen, prints who leads NAME, one line per change (a leader with its value and
epoch, no leader, or unknown when no majority answered), read from a majority every
--interval and at once when a term is announced, until interrupted; --json prints each as
one line of JSON. With --candidates, prints the candidates waiting to lead, in the order
they came.";

#[derive(Debug, Args)]
#[command(
    override_usage = "quorum-lock elect [OPTIONS] NAME -- PROGRAM [ARGS...]\n       \
                      quorum-lock elect --listen [--json] NAME\n       \
                      quorum-lock elect --candidates [--json] NAME",
    after_help = ELECT_AFTER_HELP
)]
pub(crate) struct ElectArgs {
    /// What this candidate proclaims while it leads (its address or id) [default: the
    /// host name and process id]
    #[arg(long, value_name = "VALUE")]
    value: Option<String>,

    /// The term's time to live; renewed while the program runs
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_TTL, value_parser = duration::parse)]
    pub(crate) ttl: Duration,

    /// How long to wait to be elected [default: for ever]
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    wait: Option<Duration>,

    /// How long the program has between SIGTERM and SIGKILL when leadership is lost
    /// [default: 10s, or a third of --ttl if less]
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    grace: Option<Duration>,

    /// When leadership is lost while the program runs (exit 70 otherwise), campaign
    /// again and run the program anew once elected
    #[arg(long)]
    requeue: bool,

    /// Print who leads, one line per change, instead of campaigning
    #[arg(long, conflicts_with_all = ["value", "wait", "grace", "requeue"])]
    listen: bool,

    /// Print the candidates waiting to lead, in the order they came, instead of
    /// campaigning
    #[arg(long, conflicts_with_all = ["value", "wait", "grace", "requeue", "listen"])]
    candidates: bool,

    /// With --listen or --candidates: one line of JSON per change or per candidate
    #[arg(long)]
    json: bool,

    /// With --listen: how often a majority is read
    #[arg(long, value_name = "DURATION", default_value = "1s", requires = "listen", value_parser = duration::parse)]
    interval: Duration,

    /// Name of the election
    #[arg(value_name = "NAME")]
    pub(crate) name: String,

    /// The program to run while leading, and its arguments, after `--`
    #[arg(last = true, value_name = "PROGRAM")]
    pub(crate) program: Vec<OsString>,
}

impl ElectArgs {
    pub(crate) fn is_listen(&self) -> bool {
        self.listen
    }

    /// Whether it campaigns (and runs a program), rather than reading.
    pub(crate) fn is_campaign(&self) -> bool {
        !self.listen && !self.candidates
    }
}

/// `elect --candidates`: the waiting candidates, one line each (or one line of JSON).
pub(crate) async fn candidates(redlock: &Redlock, args: &ElectArgs) -> Result<u8, Failure> {
    let election = redlock
        .election(&args.name)
        .map_err(|e| Failure::from_error(&e))?;
    let _ = redlock.connect().await;
    let waiting = election
        .candidates()
        .await
        .map_err(|e| match e.is_unavailable() {
            true => Failure::new(crate::EX_UNAVAILABLE, e.to_string()),
            false => Failure::from_error(&e),
        })?;
    let now = std::time::SystemTime::now();
    let waited = |since| human(now.duration_since(since).unwrap_or_default());
    if args.json {
        waiting.iter().for_each(|c| say(&c.to_json()));
    } else if waiting.is_empty() {
        say(&format!("{}: no candidate waiting", args.name));
    } else {
        for (i, c) in waiting.iter().enumerate() {
            say(&format!(
                "{}. {:?}, waiting for {}",
                i + 1,
                c.value,
                waited(c.since)
            ));
        }
    }
    Ok(0)
}

/// `elect`'s campaign as the options of a `run` under a term of the election.
pub(crate) fn campaign_options(
    args: ElectArgs,
    node_timeout: Duration,
) -> Result<RunOptions, Failure> {
    let mut program = args.program.into_iter();
    let Some(name) = program.next().filter(|p| !p.is_empty()) else {
        return Err(Failure::new(
            crate::EX_USAGE,
            "elect: missing `-- PROGRAM [ARGS...]` after NAME (or --listen)",
        ));
    };
    let plan = schedule::Plan::new(args.ttl, args.grace, true, node_timeout)
        .map_err(|e| Failure::new(crate::EX_USAGE, format!("elect: {e}")))?;
    Ok(RunOptions {
        resource: args.name,
        detach: false,
        ticket: None,
        ttl: args.ttl,
        wait: Some(args.wait.unwrap_or(Duration::MAX)),
        fencing: true,
        kind: HeldKind::Leader,
        value: args.value.unwrap_or_else(default_value),
        requeue: args.requeue,
        plan,
        node_timeout,
        stop_leftovers: false,
        program: name,
        args: program.collect(),
    })
}

/// `<host>:<pid>`, what a candidate proclaims unless told.
fn default_value() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    format!("{host}:{}", std::process::id())
}

/// `elect --listen`: one line per change of who leads, until a signal.
pub(crate) async fn listen(
    redlock: &Redlock,
    args: &ElectArgs,
    signals: &mut Signals,
) -> Result<u8, Failure> {
    let election = redlock
        .election(&args.name)
        .map_err(|e| Failure::from_error(&e))?;
    let _ = redlock.connect().await;
    let mut leader = election
        .observe(args.interval)
        .map_err(|e| Failure::new(EX_OSERR, e.to_string()))?;
    loop {
        tokio::select! {
            changed = leader.changed() => {
                if changed.is_err() {
                    return Ok(0);
                }
                let seen = leader.borrow_and_update().clone();
                say(&match args.json {
                    true => seen.to_json(),
                    false => leader_text(&seen),
                });
            }
            _ = signals.recv() => return Ok(0),
        }
    }
}

/// Who leads, in one line.
fn leader_text(leader: &Leader) -> String {
    match leader {
        Leader::Elected(term) => format!(
            "leader {:?} epoch {} ({}), valid for at most {}",
            term.value,
            term.epoch,
            crate::show::holder_text(&term.holder, term.held_for()),
            human(term.valid_for)
        ),
        Leader::Vacant => "no leader".to_owned(),
        Leader::Unknown { report } => format!("unknown: no majority answered: {report}"),
        _ => "unknown".to_owned(),
    }
}
