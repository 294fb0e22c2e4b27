//! Randomised fault schedules (the "nemesis") against concurrent worker processes.
//!
//! A run starts the workers, lets them warm up, then applies up to `max_windows` faults one
//! after another, each to a random set of nodes for a random time, with random gaps, until
//! its time bound; then the workers run on fault-free for a while and stop. The seed is
//! printed in the table; `QL_FAULTS_SEED=<seed>` replays the same schedule.

use std::time::{Duration, Instant};

use crate::common::{RedisServer, unique};

use super::clock;
use super::ensemble::{Cut, Ensemble, Fault};
use super::history::{self, Row, Verdict};
use super::rng::Rng;
use super::worker::{WorkerSpec, Workers};

/// Per-node timeout of the randomised runs: generous, because the workers share two cores
/// with ten servers, five proxies and possibly other tests.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// A kind of fault the nemesis draws from.
#[derive(Clone, Debug)]
pub enum FaultGen {
    /// Always this fault.
    Fixed(Fault),
    /// A partition, silent or resetting at random.
    AnyCut,
    /// Reply latency drawn from `lo..=hi`.
    Delay { lo: Duration, hi: Duration },
}

impl FaultGen {
    fn draw(&self, rng: &mut Rng) -> Fault {
        match self {
            FaultGen::Fixed(f) => f.clone(),
            FaultGen::AnyCut => {
                if rng.below(2) == 0 {
                    Fault::Partition(Cut::Silent)
                } else {
                    Fault::Partition(Cut::Reset)
                }
            }
            FaultGen::Delay { lo, hi } => Fault::Delay(rng.duration(*lo, *hi)),
        }
    }
}

/// The fault schedule of one run.
#[derive(Clone, Debug)]
pub struct Plan {
    pub faults: Vec<FaultGen>,
    /// How many nodes each fault hits, drawn from this inclusive range.
    pub nodes: (usize, usize),
    /// How long each fault lasts.
    pub hold: (Duration, Duration),
    /// Fault-free time between two faults.
    pub gap: (Duration, Duration),
    pub max_windows: usize,
}

/// What a run must show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Zero overlaps, exact counter, and acquisitions keep succeeding during the faults.
    SafeAndLive,
    /// Zero overlaps, exact counter, and no acquisition succeeds while a fault lasts (but
    /// they resume afterwards).
    SafeAndBlocked,
    /// The checker must find a violation (the control run without a lock).
    Violation,
}

/// One randomised run.
#[derive(Clone, Debug)]
pub struct NemesisRun {
    pub name: String,
    pub plan: Option<Plan>,
    pub expect: Expect,
    pub workers: usize,
    /// How long the workers run.
    pub run_for: Duration,
    /// Fault-free time at the start.
    pub warmup: Duration,
    /// Fault-free time at the end.
    pub cooldown: Duration,
    pub ttl: Duration,
    pub node_timeout: Duration,
    pub lock_wait: Duration,
    pub fencing: bool,
    pub quarantine: bool,
    pub use_lock: bool,
    pub max_increments: u64,
}

impl NemesisRun {
    /// Defaults shared by the scenarios: 3 workers for 6 s, TTL 2 s, node timeout
    /// [`NODE_TIMEOUT`], no quarantine (fresh nodes; no randomised run restarts a node
    /// without persistence).
    /// Runs that must block get 8 s with a fault-free tail of TTL + 1 s, so recovery
    /// after the last fault is seen even when healing is slow (`docker unpause` of three
    /// nodes) or left keys must expire first.
    pub fn new(name: &str, plan: Option<Plan>, expect: Expect) -> NemesisRun {
        let ttl = Duration::from_secs(2);
        let blocking = expect == Expect::SafeAndBlocked;
        NemesisRun {
            name: name.to_owned(),
            plan,
            expect,
            workers: 3,
            run_for: Duration::from_secs(if blocking { 8 } else { 6 }),
            warmup: Duration::from_millis(600),
            cooldown: if blocking {
                ttl + Duration::from_secs(1)
            } else {
                Duration::from_millis(700)
            },
            ttl,
            node_timeout: NODE_TIMEOUT,
            lock_wait: Duration::from_secs(2),
            fencing: false,
            quarantine: false,
            use_lock: true,
            max_increments: 10_000,
        }
    }

    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// The longest a minority fault may keep every worker from acquiring: keys left on a
    /// node that was down or cut off while their lock was released (it comes back with
    /// them when it persists) block until they expire, one TTL; plus the retry backoff, two
    /// rounds of node timeouts and scheduling slack on a loaded machine.
    pub fn liveness_bound(&self) -> Duration {
        self.ttl + Duration::from_millis(1500)
    }

    /// Time during which a `lock()` attempt begun before a fault may still complete:
    /// two rounds (acquire, fencing commit) of the node timeout, plus scheduling slack.
    pub fn grace(&self) -> Duration {
        self.node_timeout * 2 + Duration::from_millis(300)
    }
}

/// One fault as it happened.
#[derive(Clone, Debug)]
pub struct Window {
    pub fault: Fault,
    pub nodes: Vec<usize>,
    /// Once the fault was in place on every chosen node.
    pub from: u64,
    /// Just before healing began.
    pub to: u64,
    /// Once every node was healed (for a kill: restarted and serving).
    pub healed: u64,
}

impl Window {
    fn label(&self) -> String {
        let nodes: Vec<String> = self.nodes.iter().map(|i| format!("n{}", i + 1)).collect();
        format!("{} {}", self.fault.label(), nodes.join("+"))
    }
}

/// Runs `run` against `ens` with workers started from the test `worker_test` of this
/// binary, the counter in `store`, and the schedule drawn from `seed`.
///
/// A run that kept every safety property but fell short of its progress conditions (a
/// machine loaded by other work can starve the workers) is run once more with the next
/// seed, and the second result is reported with a note. Safety failures are never retried.
pub fn run(
    ens: &mut dyn Ensemble,
    store: &RedisServer,
    worker_test: &str,
    run: &NemesisRun,
    seed: u64,
) -> Row {
    let first = run_once(ens, store, worker_test, run, seed);
    if !first.only_liveness_failed() {
        return first;
    }
    let mut second = run_once(ens, store, worker_test, run, seed.wrapping_add(1_000));
    second.notes = format!(
        "RETRIED (1st try, seed={seed}: {}) {}",
        first.liveness.join("; "),
        second.notes
    );
    second.secs += first.secs;
    second
}

fn run_once(
    ens: &mut dyn Ensemble,
    store: &RedisServer,
    worker_test: &str,
    run: &NemesisRun,
    seed: u64,
) -> Row {
    let began = Instant::now();
    let counter = unique("faults-counter");
    let start_at = clock::now() + 400_000_000; // time for the processes to start
    let stop_at = start_at + run.run_for.as_nanos() as u64;
    let spec = WorkerSpec {
        urls: ens.client_urls(),
        store_url: store.url(),
        resource: unique("faults-lock"),
        counter: counter.clone(),
        start_at,
        stop_at,
        max_increments: run.max_increments,
        ttl: run.ttl,
        node_timeout: run.node_timeout,
        lock_wait: run.lock_wait,
        quarantine: run.quarantine,
        fencing: run.fencing,
        use_lock: run.use_lock,
        seed,
    };
    let workers = Workers::spawn(worker_test, &spec, run.workers);

    let mut rng = Rng::new(seed);
    let mut windows: Vec<Window> = Vec::new();
    if let Some(plan) = &run.plan {
        let faults_from = start_at + run.warmup.as_nanos() as u64;
        let faults_until = stop_at - run.cooldown.as_nanos() as u64;
        clock::sleep_until(faults_from);
        while windows.len() < plan.max_windows {
            let hold = rng.duration(plan.hold.0, plan.hold.1);
            if clock::now() + hold.as_nanos() as u64 > faults_until {
                break;
            }
            let fault = plan.faults[rng.below(plan.faults.len() as u64) as usize].draw(&mut rng);
            let k = rng.between(plan.nodes.0 as u64, plan.nodes.1 as u64) as usize;
            let nodes = rng.subset(ens.size(), k);
            for &i in &nodes {
                ens.inject(i, &fault);
            }
            let from = clock::now();
            std::thread::sleep(hold);
            let to = clock::now();
            for &i in &nodes {
                ens.heal(i, &fault);
            }
            windows.push(Window {
                fault,
                nodes,
                from,
                to,
                healed: clock::now(),
            });
            std::thread::sleep(rng.duration(plan.gap.0, plan.gap.1));
        }
    }

    let limit = run.run_for + run.lock_wait + run.ttl + Duration::from_secs(20);
    let history = workers.wait(limit);
    let value: Option<i64> = redis::cmd("GET")
        .arg(&counter)
        .query(&mut store.conn())
        .expect("GET counter");
    let check = history::check(&history, value.unwrap_or(0), 0);
    let want = match run.expect {
        Expect::SafeAndLive | Expect::SafeAndBlocked => Verdict::Safe,
        Expect::Violation => Verdict::Unsafe,
    };
    let mut row = Row::from_check(&run.name, &check, run.fencing, want);
    if want == Verdict::Safe
        && let Some(d) = check.describe_overlap(&history)
    {
        row.problems.push(format!("first overlap: {d}"));
    }

    // Acquisitions that completed while a fault was in place, leaving out the first
    // `grace` of each window (an attempt begun before the fault may still finish then).
    let grace = run.grace().as_nanos() as u64;
    let inside = |w: &Window| {
        history
            .holds
            .iter()
            .filter(|h| h.acquired >= w.from + grace && h.acquired <= w.to)
            .count()
    };
    let per_window: Vec<usize> = windows.iter().map(inside).collect();
    if !windows.is_empty() {
        row.during_faults = Some(per_window.iter().sum());
    }
    // `lock()` calls that gave up before the end of the run (the last call of a worker may
    // be cut short by the time bound; it does not count).
    let mut kinds: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for f in history.failures.iter().filter(|f| f.end < stop_at) {
        *kinds.entry(f.why.as_str()).or_default() += 1;
    }
    let failures = if kinds.is_empty() {
        "0".to_owned()
    } else {
        let parts: Vec<String> = kinds.iter().map(|(k, n)| format!("{k}:{n}")).collect();
        format!("{}({})", kinds.values().sum::<usize>(), parts.join(","))
    };
    let last_to = windows.last().map_or(start_at, |w| w.to);
    let after = history
        .holds
        .iter()
        .filter(|h| h.acquired > last_to)
        .count();
    // Liveness: the longest time without any acquisition, from the workers' start.
    let mut times: Vec<u64> = history.holds.iter().map(|h| h.acquired).collect();
    times.push(start_at);
    times.sort_unstable();
    let longest_gap = times.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let gap_limit = run.liveness_bound();
    match run.expect {
        Expect::SafeAndLive => {
            if row.during_faults == Some(0) {
                let measured: Vec<String> = windows
                    .iter()
                    .map(|w| {
                        format!(
                            "{} for {} ms",
                            w.label(),
                            w.to.saturating_sub(w.from + grace) / 1_000_000
                        )
                    })
                    .collect();
                row.liveness.push(format!(
                    "no acquisition succeeded while faults were in place (after the grace: {})",
                    measured.join(", ")
                ));
            }
            if longest_gap > gap_limit.as_nanos() as u64 {
                row.liveness.push(format!(
                    "no acquisition for {:?} (more than {gap_limit:?})",
                    Duration::from_nanos(longest_gap)
                ));
            }
            if check.holds < 10 {
                row.liveness
                    .push(format!("only {} holds in the whole run", check.holds));
            }
        }
        Expect::SafeAndBlocked => {
            for (w, &n) in windows.iter().zip(&per_window) {
                if n > 0 {
                    row.problems.push(format!(
                        "{n} acquisition(s) succeeded during {} (a majority was down)",
                        w.label()
                    ));
                }
            }
            if after == 0 {
                row.liveness
                    .push("no acquisition after the faults healed".to_owned());
            }
            if windows.is_empty() {
                row.liveness.push("no fault was applied".to_owned());
            }
        }
        Expect::Violation => {}
    }
    let reported: u64 = history.done.iter().map(|d| d.increments).sum();
    if reported as i64 != check.expected {
        row.problems.push(format!(
            "workers report {reported} increments but their records show {}",
            check.expected
        ));
    }
    if check.token_regressions > 0 {
        row.problems.push(format!(
            "{} fencing token regression(s)",
            check.token_regressions
        ));
    }
    let labels: Vec<String> = windows.iter().map(Window::label).collect();
    let slowest_heal = windows
        .iter()
        .map(|w| (w.healed - w.to) / 1_000_000)
        .max()
        .unwrap_or(0);
    row.notes = format!(
        "seed={seed} fence={} longest-gap={}ms failed-calls={failures} slowest-heal={slowest_heal}ms windows={}{}",
        if run.fencing { "y" } else { "n" },
        longest_gap / 1_000_000,
        windows.len(),
        if labels.is_empty() {
            String::new()
        } else {
            format!(" [{}]", labels.join(", "))
        }
    );
    row.secs = began.elapsed().as_secs_f64();
    row
}
