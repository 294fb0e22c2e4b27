//! `quorum-lock`: run a program under a Redlock held on N independent Redis masters, and
//! inspect or clear such locks.
#![forbid(unsafe_code)]

#[path = "quorum-lock/duration.rs"]
mod duration;
#[path = "quorum-lock/elect.rs"]
mod elect;
#[path = "quorum-lock/init.rs"]
mod init;
#[path = "quorum-lock/lag.rs"]
mod lag;
#[path = "quorum-lock/progress.rs"]
mod progress;
#[path = "quorum-lock/ready.rs"]
mod ready;
#[path = "quorum-lock/run.rs"]
mod run;
#[path = "quorum-lock/schedule.rs"]
mod schedule;
#[path = "quorum-lock/show.rs"]
mod show;
#[path = "quorum-lock/supervise.rs"]
mod supervise;
#[path = "quorum-lock/ticket.rs"]
mod ticket;
#[path = "quorum-lock/tree.rs"]
mod tree;
#[path = "quorum-lock/watch.rs"]
mod watch;
#[path = "quorum-lock/watchdog.rs"]
mod watchdog;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use quorum_lock::{Error, NodeOutcome, Redlock, RedlockBuilder, Severity, Verdict};

use crate::run::{HeldKind, RunOptions, Signals};

/// Usage or configuration error (sysexits `EX_USAGE`).
pub(crate) const EX_USAGE: u8 = 64;
/// Not enough nodes reachable for a majority (`EX_UNAVAILABLE`).
pub(crate) const EX_UNAVAILABLE: u8 = 69;
/// The lock was lost while the program ran (`EX_SOFTWARE`).
pub(crate) const EX_SOFTWARE: u8 = 70;
/// The operating system refused something (`EX_OSERR`): runtime, signal handlers.
pub(crate) const EX_OSERR: u8 = 71;
/// The nodes are misconfigured (`EX_CONFIG`): two URLs reach one server.
pub(crate) const EX_CONFIG: u8 = 78;
/// The lock is held elsewhere (`EX_TEMPFAIL`).
pub(crate) const EX_TEMPFAIL: u8 = 75;
/// A node's ACL refused a command, key or channel (`EX_NOPERM`).
pub(crate) const EX_NOPERM: u8 = 77;

/// Environment variable with the node URLs, used when `--nodes` is absent.
const ENV_NODES: &str = RedlockBuilder::NODES_ENV;
/// Default of `run --wait`.
const DEFAULT_WAIT: &str = "10s";
/// Default of `--node-timeout`: the library's.
const DEFAULT_NODE_TIMEOUT: &str = "50ms";
/// Default of `run --ttl`.
pub(crate) const DEFAULT_TTL: &str = "30s";

const AFTER_HELP: &str = "\
Nodes come from --nodes or, when it is absent, from QUORUM_LOCK_NODES (comma-separated
redis:// or rediss:// URLs of independent masters). Durations: 500ms, 30s, 2m, 1h, 1m30s.

Exit status of `run`: the program's own status when it ran to the end (128+N when a signal
N ended it); otherwise
   64  usage or configuration error
   69  not enough nodes reachable for a majority
   70  the lock was lost, or could not be extended, while the program's tree ran (it was
       sent SIGTERM, then SIGKILL before the lock's validity ended)
   75  the lock is held elsewhere (not acquired within the wait)
   77  permission denied: a node's ACL refused a command, key or channel
   78  two node URLs reach the same Redis server (it would vote twice)
  126  the program could not be started;  127  the program was not found";

const RUN_AFTER_HELP: &str = "\
PROGRAM runs without a shell, with QUORUM_LOCK_RESOURCE set (and QUORUM_LOCK_FENCING_TOKEN
with --fencing). SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to it.
quorum-lock exits with its status, or 128+N if signal N ended it.

The lock is held until every process of the program's tree has exited, also those it left
behind or that left its process group (--stop-leftovers stops what the program leaves
behind instead). The tree is stopped before the lock's validity ends, so the next holder
never overlaps it: if the lock is lost, or cannot be extended by the time only the grace
period plus a kill margin (100ms, more on a busy host) of validity is left, or with
--no-extend reaches that point, the tree is sent SIGTERM, then SIGKILL after the grace
period and a margin before the validity ends, and quorum-lock exits 70. A watchdog process
does the same if quorum-lock itself is stopped or starved. A --grace that does not fit in
the --ttl's validity is refused.

While it waits more than a second for the lock, and stderr is a terminal, quorum-lock says
on stderr who holds the lock and when its key expires.

With --permits K, RESOURCE names a counting semaphore: the program runs under one of its K
permits (each a lock of its own, extended and watched as a lock is), so at most K programs
run at once. Every run of one RESOURCE must give the same K (another K is refused while
runs of the first hold). With --shared, RESOURCE names a
read-write lock and the program runs under one of its read locks, beside other --shared
runs; with --exclusive, under its write lock, alone. A waiting --exclusive run keeps new
--shared runs out until it has run.
Other exits: 64 usage, 69 no majority of nodes reachable, 75 held elsewhere, 77 permission
denied by a node's ACL (also when the release after the program was refused), 78 one server
listed twice.";

/// Redlock over N independent Redis masters, from the command line.
#[derive(Debug, Parser)]
#[command(name = "quorum-lock", version, after_help = AFTER_HELP)]
struct Cli {
    /// Redis masters as comma-separated URLs [env: QUORUM_LOCK_NODES]
    #[arg(long, global = true, value_name = "URL,URL,...")]
    nodes: Option<String>,

    /// Prefix put before the resource name to form the Redis key [default: none]
    #[arg(long, global = true, value_name = "PREFIX")]
    key_prefix: Option<String>,

    /// Upper bound on one request to one node; raise it for distant or busy nodes
    #[arg(long, global = true, value_name = "DURATION", default_value = DEFAULT_NODE_TIMEOUT, value_parser = duration::parse)]
    node_timeout: Duration,

    /// The longest TTL any client of these nodes uses; every client must give the same
    /// [env: QUORUM_LOCK_TTL_CEILING] [default: 60s]
    #[arg(long, global = true, value_name = "DURATION", value_parser = duration::parse)]
    ttl_ceiling: Option<Duration>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Acquire RESOURCE, run PROGRAM while keeping the lock extended, release it afterwards
    Run(RunArgs),
    /// Campaign to lead NAME and run PROGRAM while leader; with --listen, print who leads
    Elect(elect::ElectArgs),
    /// Show, per node, what holds RESOURCE, and a verdict for the set
    Status(StatusArgs),
    /// Delete RESOURCE's lock on every node, whoever holds it
    Release(ReleaseArgs),
    /// Check the deployment: reachability, replication, persistence, clocks
    Doctor(DoctorArgs),
    /// Readmit the nodes whose restart quarantine is over; say which nodes vote
    Repair(ReadyArgs),
    /// Declare a new deployment's nodes new, once, at its first start: they vote at once,
    /// even with a node down (writes nothing on nodes that have served)
    Init,
}

#[derive(Debug, Args)]
struct ReadyArgs {
    /// Wait up to this long for every node to be admitted [default: 0s, check once]
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    wait: Option<Duration>,
}

#[derive(Debug, Args)]
#[command(
    override_usage = "quorum-lock run [OPTIONS] RESOURCE -- PROGRAM [ARGS...]",
    after_help = RUN_AFTER_HELP
)]
struct RunArgs {
    /// Lock time to live; renewed while the program runs unless --no-extend
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_TTL, value_parser = duration::parse)]
    ttl: Duration,

    /// How long to keep trying when the lock is held elsewhere
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_WAIT, value_parser = duration::parse)]
    wait: Duration,

    /// Make a single attempt; exit 75 at once if the lock is held elsewhere
    #[arg(long, conflicts_with = "wait")]
    no_wait: bool,

    /// Do not extend the lock: the program must finish within the TTL or it is stopped
    #[arg(long)]
    no_extend: bool,

    /// Obtain a fencing token and pass it in QUORUM_LOCK_FENCING_TOKEN
    #[arg(long)]
    fencing: bool,

    /// Fencing tokens start above N (to continue after most nodes lost their data)
    #[arg(long, value_name = "N", requires = "fencing")]
    fence_floor: Option<u64>,

    /// Count a Sentinel or Cluster member's vote only once N replicas of its master
    /// acknowledged the lock's write (WAIT), so that a failover keeps the lock
    #[arg(long, value_name = "N")]
    replica_acks: Option<u32>,

    /// How long WAIT gives the replicas; below --node-timeout [default: half of it]
    #[arg(long, value_name = "DURATION", requires = "replica_acks", value_parser = duration::parse)]
    replica_ack_timeout: Option<Duration>,

    /// Take one of K permits of the semaphore RESOURCE instead of its lock: at most K
    /// programs run at once (every run of RESOURCE must give the same K)
    #[arg(long, value_name = "K", conflicts_with = "fencing")]
    permits: Option<u32>,

    /// Take a read lock of the read-write lock RESOURCE: programs run with --shared run
    /// at once, never beside one run with --exclusive
    #[arg(long, conflicts_with_all = ["fencing", "permits", "exclusive"])]
    shared: bool,

    /// Take the write lock of the read-write lock RESOURCE: alone, beside no --shared run
    #[arg(long, conflicts_with = "permits")]
    exclusive: bool,

    /// How long the program has between SIGTERM and SIGKILL when the lock is lost or at
    /// risk; taken out of the lock's validity [default: 10s, or a third of --ttl if less]
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    grace: Option<Duration>,

    /// When the program exits, stop the processes it left behind (SIGTERM, then SIGKILL
    /// after the grace period) instead of holding the lock until they exit
    #[arg(long)]
    stop_leftovers: bool,

    /// Acquire RESOURCE, print a ticket for it on stdout and exit with the lock held (for
    /// --ttl, unless a `run --ticket` adopts it); no PROGRAM. The ticket is a secret: whoever
    /// has it may extend and release the lock
    #[arg(long, conflicts_with_all = ["ticket", "no_extend"])]
    detach: bool,

    /// Run PROGRAM under the lock TICKET hands on (printed by `run --detach`), instead of
    /// acquiring RESOURCE; `-` reads it from stdin (argv is visible to other local users)
    #[arg(long, value_name = "TICKET", conflicts_with_all = ["permits", "shared", "exclusive", "fencing", "resource"])]
    ticket: Option<String>,

    /// Name of the lock
    #[arg(value_name = "RESOURCE", required_unless_present = "ticket")]
    resource: Option<String>,

    /// The program to run and its arguments, after `--`
    #[arg(last = true, value_name = "PROGRAM")]
    program: Vec<OsString>,
}

#[derive(Debug, Args)]
struct StatusArgs {
    /// Name of the lock
    #[arg(value_name = "RESOURCE")]
    resource: String,

    /// RESOURCE names a read-write lock (as for `run --shared`): show its writer and its
    /// readers
    #[arg(long)]
    shared: bool,

    /// Print one line of JSON instead of a table
    #[arg(long)]
    json: bool,

    /// Keep reading and print a line whenever the holder changes (held, free, split,
    /// unknown), until interrupted
    #[arg(long, conflicts_with = "shared")]
    watch: bool,

    /// With --watch: how often every node is read
    #[arg(long, value_name = "DURATION", default_value = "1s", requires = "watch", value_parser = duration::parse)]
    interval: Duration,
}

#[derive(Debug, Args)]
struct ReleaseArgs {
    /// Required: the lock is deleted whoever holds it, so its holder may still be running
    #[arg(long)]
    force: bool,

    /// Release the lock TICKET hands on (printed by `run --detach`) if it still holds,
    /// instead of RESOURCE's whoever holds it; `-` reads it from stdin
    #[arg(long, value_name = "TICKET", conflicts_with_all = ["force", "resource"])]
    ticket: Option<String>,

    /// Name of the lock
    #[arg(value_name = "RESOURCE", required_unless_present = "ticket")]
    resource: Option<String>,
}

#[derive(Debug, Args)]
struct DoctorArgs {
    /// Print one line of JSON instead of a table
    #[arg(long)]
    json: bool,

    /// Only say whether every node votes (readmitting those whose quarantine is over):
    /// exit 0 when restarting the next node is safe, 75 when not
    #[arg(long, conflicts_with = "json")]
    ready: bool,

    /// With --ready: wait up to this long for every node to vote [default: 0s]
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, requires = "ready")]
    wait: Option<Duration>,
}

/// A command that did not succeed: its exit status and the one-line reason for stderr.
#[derive(Debug)]
pub(crate) struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure::new(EX_USAGE, message)
    }

    /// A library error of `status` or `release`: 77 for a permission refusal, else 64.
    pub(crate) fn from_error(err: &Error) -> Self {
        match err.report().filter(|_| err.is_permission()) {
            Some(report) => Failure::new(EX_NOPERM, format!("{err}: {report}")),
            None => Failure::usage(err.to_string()),
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == watchdog::WATCHDOG_ARG) {
        return watchdog::main();
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(err) => return ExitCode::from(clap_failure(&err, &args)),
    };
    let code = match execute(cli) {
        Ok(code) => code,
        Err(failure) => {
            say_err(&failure.message);
            failure.code
        }
    };
    ExitCode::from(code)
}

/// Prints clap's message (help and version to stdout) and picks the exit status: 0 for
/// help and version, 64 for every usage error (clap's own choice would be 2).
fn clap_failure(err: &clap::Error, args: &[OsString]) -> u8 {
    if !err.use_stderr() {
        let _ = err.print();
        return 0;
    }
    if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        write_to(std::io::stderr(), &err.render().to_string());
        say_err("missing command: run, status, release or doctor");
        return EX_USAGE;
    }
    let rendered = err.render().to_string();
    let text = rendered.strip_prefix("error: ").unwrap_or(&rendered);
    write_to(std::io::stderr(), &format!("quorum-lock: {text}"));
    let unexpected = matches!(
        err.kind(),
        ErrorKind::UnknownArgument | ErrorKind::TooManyValues | ErrorKind::InvalidSubcommand
    );
    let is_run = args.iter().skip(1).any(|a| a == "run");
    if unexpected && is_run && !args.iter().any(|a| a == "--") {
        say_err(
            "missing `--` between RESOURCE and PROGRAM: \
             quorum-lock run [OPTIONS] RESOURCE -- PROGRAM [ARGS...]",
        );
    }
    EX_USAGE
}

/// Writes `text` whole, ignoring errors: a closed pipe (`| head`) must not panic.
fn write_to(mut stream: impl std::io::Write, text: &str) {
    let _ = stream.write_all(text.as_bytes());
    let _ = stream.flush();
}

/// One line on stdout.
pub(crate) fn say(line: &str) {
    write_to(std::io::stdout(), &format!("{line}\n"));
}

/// One line on stderr, prefixed `quorum-lock: `.
pub(crate) fn say_err(line: &str) {
    write_to(std::io::stderr(), &format!("quorum-lock: {line}\n"));
}

/// The node URLs from `--nodes` or the environment; empty entries (a trailing comma) are
/// skipped.
fn node_urls(flag: Option<String>) -> Result<Vec<String>, Failure> {
    let (list, source) = match flag {
        Some(list) => (list, "--nodes"),
        None => match std::env::var(ENV_NODES) {
            Ok(list) => (list, ENV_NODES),
            Err(std::env::VarError::NotPresent) => (String::new(), ENV_NODES),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(Failure::usage(format!("{ENV_NODES} is not valid UTF-8")));
            }
        },
    };
    let urls = RedlockBuilder::parse_node_list(&list);
    if urls.is_empty() {
        let hint = if source == "--nodes" {
            "--nodes is empty"
        } else {
            "neither --nodes nor QUORUM_LOCK_NODES is set"
        };
        return Err(Failure::usage(format!(
            "no nodes given ({hint}): pass --nodes redis://host:6379,... or set {ENV_NODES}"
        )));
    }
    Ok(urls)
}

/// The TTL ceiling from `QUORUM_LOCK_TTL_CEILING` when `--ttl-ceiling` is not given;
/// `None` for the library's default.
fn ttl_ceiling_from_env() -> Result<Option<Duration>, Failure> {
    match std::env::var("QUORUM_LOCK_TTL_CEILING") {
        Ok(text) if !text.trim().is_empty() => duration::parse(text.trim())
            .map(Some)
            .map_err(|e| Failure::usage(format!("QUORUM_LOCK_TTL_CEILING: {e}"))),
        _ => Ok(None),
    }
}

/// The file name of the program `run` starts, for the lock's holder description.
fn program_name(program: &[OsString]) -> Option<String> {
    let path = std::path::Path::new(program.first()?);
    Some(path.file_name()?.to_string_lossy().into_owned())
}

/// The client builder for the global options, locking with `ttl`.
/// `ttl`: `run`'s; `None` for the commands that do not lock, which take the library's
/// default TTL, or the ceiling when that is shorter.
fn client(
    nodes: Option<String>,
    key_prefix: Option<String>,
    node_timeout: Duration,
    ttl: Option<Duration>,
    fence_floor: Option<u64>,
    ttl_ceiling: Option<Duration>,
) -> Result<RedlockBuilder, Failure> {
    let urls = node_urls(nodes)?;
    let ceiling = ttl_ceiling.map_or_else(ttl_ceiling_from_env, |c| Ok(Some(c)))?;
    let limit = ceiling.unwrap_or(RedlockBuilder::DEFAULT_TTL_CEILING);
    let mut builder = Redlock::builder()
        .nodes(urls)
        .default_ttl(ttl.unwrap_or(RedlockBuilder::DEFAULT_TTL.min(limit)))
        .node_timeout(node_timeout);
    if let Some(ceiling) = ceiling {
        builder = builder.ttl_ceiling(ceiling);
    }
    if let Some(floor) = fence_floor {
        builder = builder.fence_floor(floor);
    }
    if let Some(prefix) = key_prefix {
        builder = builder.key_prefix(prefix);
    }
    Ok(builder)
}

/// The replicas `run` asks to acknowledge its votes, and how long it gives them (half the
/// node timeout unless given).
fn replica_acks_of(command: &Command, node_timeout: Duration) -> Option<(u32, Duration)> {
    let Command::Run(args) = command else {
        return None;
    };
    let timeout = args.replica_ack_timeout.unwrap_or(node_timeout / 2);
    args.replica_acks.map(|n| (n, timeout))
}

/// The resource a command names, if any.
fn resource_of(command: &Command) -> Option<&String> {
    match command {
        Command::Run(a) => a.resource.as_ref(),
        Command::Elect(a) => Some(&a.name),
        Command::Status(a) => Some(&a.resource),
        Command::Release(a) => a.resource.as_ref(),
        Command::Doctor(_) | Command::Repair(_) | Command::Init => None,
    }
}

fn execute(cli: Cli) -> Result<u8, Failure> {
    // Everything that needs no network is checked before anything starts.
    if resource_of(&cli.command).is_some_and(|r| r.is_empty()) {
        return Err(Failure::usage("the resource name is empty"));
    }
    if let Command::Release(args) = &cli.command
        && !args.force
        && let Some(resource) = &args.resource
    {
        return Err(Failure::usage(format!(
            "release deletes the lock whoever holds it, and its holder may still be running: \
             pass --force to confirm (quorum-lock release --force {resource})"
        )));
    }
    let (ttl, fence_floor) = match &cli.command {
        Command::Run(args) => (Some(args.ttl), args.fence_floor),
        Command::Elect(args) => (Some(args.ttl), None),
        // Only `run` locks; the others use the library's default (see `client`).
        _ => (None, None),
    };
    let node_timeout = cli.node_timeout;
    let replica_acks = replica_acks_of(&cli.command, node_timeout);
    // `run`'s lock value names the command it runs (`status` shows it), not quorum-lock.
    let program = match &cli.command {
        Command::Run(args) => program_name(&args.program),
        Command::Elect(args) => program_name(&args.program),
        _ => None,
    };
    let redlock = client(
        cli.nodes,
        cli.key_prefix,
        node_timeout,
        ttl,
        fence_floor,
        cli.ttl_ceiling,
    )
    .map(|b| match program {
        Some(name) => b.holder_program(name),
        None => b,
    })
    .map(|b| match replica_acks {
        Some((replicas, timeout)) => b.replica_acks(replicas, timeout),
        None => b,
    })?
    .build()
    .map_err(|e| match e {
        Error::Config(msg) => Failure::usage(msg),
        other => Failure::usage(other.to_string()),
    })?;
    // After the client: its TTL check speaks first of a TTL too short for anything.
    let command = match cli.command {
        Command::Run(args) => Ok(run_options(args, node_timeout)?),
        Command::Elect(args) if args.is_campaign() => {
            Ok(elect::campaign_options(args, node_timeout)?)
        }
        other => Err(other),
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::new(EX_OSERR, format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(dispatch(&redlock, command))
}

/// Handlers for the signals `run` and `elect` forward, or the failure to install them.
fn install_signals() -> Result<Signals, Failure> {
    Signals::install()
        .map_err(|e| Failure::new(EX_OSERR, format!("cannot install signal handlers: {e}")))
}

/// Runs the command: a validated `run` (or `elect` campaign), or another command.
async fn dispatch(redlock: &Redlock, command: Result<RunOptions, Command>) -> Result<u8, Failure> {
    match command {
        Ok(options) => {
            // First thing: from here on no forwarded signal can kill us with the lock held.
            let mut signals = install_signals()?;
            loop {
                match run::run(redlock, options.clone(), &mut signals).await {
                    Err(lost) if options.requeue && lost.code == EX_SOFTWARE => {
                        say_err(&format!("{}; campaigning again (--requeue)", lost.message));
                    }
                    done => return done,
                }
            }
        }
        Err(Command::Status(args)) if args.watch => {
            let every = (args.interval, args.json);
            watch::watch(redlock, &args.resource, every, &mut install_signals()?).await
        }
        Err(Command::Status(args)) => status(redlock, &args).await,
        Err(Command::Release(ReleaseArgs {
            ticket: Some(text), ..
        })) => ticket::release_by_ticket(redlock, &ticket::read_ticket(&text)?).await,
        Err(Command::Release(args)) => {
            release(redlock, args.resource.as_deref().unwrap_or_default()).await
        }
        Err(Command::Doctor(args)) if args.ready => {
            ready::until_ready(redlock, args.wait.unwrap_or_default()).await
        }
        Err(Command::Doctor(args)) => doctor(redlock, args.json).await,
        Err(Command::Repair(args)) => {
            ready::until_ready(redlock, args.wait.unwrap_or_default()).await
        }
        Err(Command::Init) => init::init(redlock).await,
        Err(Command::Elect(args)) if args.is_listen() => {
            elect::listen(redlock, &args, &mut install_signals()?).await
        }
        Err(Command::Elect(args)) => elect::candidates(redlock, &args).await,
        Err(Command::Run(_)) => Err(Failure::new(EX_SOFTWARE, "run options lost")),
    }
}

/// Validates `run`'s arguments, the grace period among them (see [`schedule::Plan`]).
fn run_options(args: RunArgs, node_timeout: Duration) -> Result<RunOptions, Failure> {
    let mut program = args.program.into_iter();
    let name = program.next();
    match (&name, args.detach) {
        (None, false) => {
            return Err(Failure::usage(
                "run: missing `-- PROGRAM [ARGS...]` after RESOURCE",
            ));
        }
        (Some(_), true) => {
            return Err(Failure::usage(
                "run --detach runs no program: it prints a ticket for `run --ticket`",
            ));
        }
        (Some(name), false) if name.is_empty() => {
            return Err(Failure::usage("run: the program name is empty"));
        }
        _ => {}
    }
    let ticket = args
        .ticket
        .as_deref()
        .map(ticket::read_ticket)
        .transpose()?;
    let resource = match &ticket {
        Some(ticket) => ticket.resource().to_owned(),
        None => args.resource.unwrap_or_default(),
    };
    let plan = schedule::Plan::new(args.ttl, args.grace, !args.no_extend, node_timeout)
        .map_err(|e| Failure::usage(format!("run: {e}")))?;
    Ok(RunOptions {
        resource,
        detach: args.detach,
        ticket,
        ttl: args.ttl,
        wait: (!args.no_wait).then_some(args.wait),
        fencing: args.fencing,
        value: String::new(),
        requeue: false,
        kind: match (args.permits, args.shared, args.exclusive) {
            (Some(k), _, _) => HeldKind::Permit(k),
            (None, true, _) => HeldKind::Read,
            (None, false, true) => HeldKind::Write,
            (None, false, false) => HeldKind::Lock,
        },
        plan,
        node_timeout,
        stop_leftovers: args.stop_leftovers,
        program: name.unwrap_or_default(),
        args: program.collect(),
    })
}

async fn status(redlock: &Redlock, args: &StatusArgs) -> Result<u8, Failure> {
    // Connect within the connect timeout first (see `run`): the read itself has only the
    // node timeout.
    let _ = redlock.connect().await;
    if args.shared {
        return rw_status(redlock, args).await;
    }
    let status = redlock
        .status(&args.resource)
        .await
        .map_err(|e| Failure::from_error(&e))?;
    if args.json {
        say(&status.to_json());
    } else {
        write_to(
            std::io::stdout(),
            &show::status_text(&status, redlock.quorum()),
        );
    }
    if status.verdict == Verdict::Unknown {
        let answered = status.nodes.iter().filter(|n| n.holder.is_some()).count();
        return Err(Failure::new(
            EX_UNAVAILABLE,
            format!(
                "not enough nodes reachable for a majority: {answered} of {} answered, {} needed",
                status.nodes.len(),
                redlock.quorum()
            ),
        ));
    }
    Ok(0)
}

/// `status --shared`: the writer and the readers of the read-write lock RESOURCE.
async fn rw_status(redlock: &Redlock, args: &StatusArgs) -> Result<u8, Failure> {
    let rwlock = redlock
        .rwlock(&args.resource)
        .map_err(|e| Failure::from_error(&e))?;
    let status = rwlock.status().await.map_err(|e| Failure::from_error(&e))?;
    let (nodes, quorum) = (status.writer.nodes.len(), redlock.quorum());
    if args.json {
        say(&status.to_json());
    } else {
        let mut text = show::status_text(&status.writer, quorum);
        text.push_str(&show::readers_text(&status.readers, nodes, quorum));
        write_to(std::io::stdout(), &text);
    }
    Ok(0)
}

async fn release(redlock: &Redlock, resource: &str) -> Result<u8, Failure> {
    let _ = redlock.connect().await;
    let report = redlock
        .reset(resource)
        .await
        .map_err(|e| Failure::from_error(&e))?;
    let total = report.results().len();
    let had = report.count(&NodeOutcome::Released);
    let failed = report.failures();
    say(&format!(
        "{resource}: deleted on {had} of {total} nodes (key {:?}): {report}",
        redlock.key(resource)
    ));
    if total - failed < redlock.quorum() {
        return Err(Failure::new(
            EX_UNAVAILABLE,
            format!(
                "not enough nodes reachable for a majority: {} of {total} answered, {} needed; \
                 the lock may still be held: {report}",
                total - failed,
                redlock.quorum()
            ),
        ));
    }
    if failed > 0 {
        say_err(&format!(
            "warning: {failed} node(s) did not answer; a copy left there expires with its TTL"
        ));
    }
    Ok(0)
}

async fn doctor(redlock: &Redlock, json: bool) -> Result<u8, Failure> {
    let report = redlock.check_deployment().await;
    if json {
        say(&report.to_json());
    } else {
        write_to(std::io::stdout(), &report.to_string());
    }
    let reachable = report.nodes.iter().filter(|n| n.reachable).count();
    if reachable < report.quorum {
        return Err(Failure::new(
            EX_UNAVAILABLE,
            format!(
                "not enough nodes reachable for a majority: {reachable} of {} answered, {} needed",
                report.nodes.len(),
                report.quorum
            ),
        ));
    }
    Ok(if report.worst() == Some(Severity::Error) {
        1
    } else {
        0
    })
}
