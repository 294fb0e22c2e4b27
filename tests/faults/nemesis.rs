//! Randomised fault schedules (the "nemesis") against concurrent worker processes.
//!
//! A run starts the workers, lets them warm up, then applies up to `max_windows` faults one
//! after another, each to a random set of nodes for a random time, with random gaps, until
//! its time bound; then the workers run on fault-free for a while and stop. The seed is
//! printed in the table; `QL_FAULTS_SEED=<seed>` replays the same schedule.
//!
//! Runs that restart nodes empty with restart quarantine on ([`Plan::readmit`]) track each
//! restarted node until a client has readmitted it (its marker names its new life), and
//! never let the nodes that are down or not yet readmitted exceed a minority: the
//! assumption under which quarantine and fencing are safe (DESIGN.md, section 7). A
//! [`Order::Rolling`] plan restarts every node in turn, each once the previous one is
//! readmitted.

use std::time::{Duration, Instant};

use crate::common::{RedisServer, unique};

use super::clock;
use super::ensemble::{Cut, Ensemble, Fault};
use super::history::{self, History, Hold, Live, Row, Verdict};
use super::rng::Rng;
use super::worker::{WorkerSpec, Workers, client_with_ceiling};

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
    /// These faults in turn: the run's first fault window gets the first, the next one
    /// the second, and so on, round again after the last.
    InTurn(Vec<Fault>),
}

impl FaultGen {
    /// The fault of the run's fault window number `window` (from 0).
    fn draw(&self, rng: &mut Rng, window: usize) -> Fault {
        match self {
            FaultGen::Fixed(f) => f.clone(),
            FaultGen::InTurn(faults) => faults[window % faults.len()].clone(),
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

/// Which nodes the faults hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Random sets of nodes at random times.
    Random,
    /// n1, n2, ... one node at a time, each once the previous one was readmitted (with
    /// [`Plan::readmit`]); the run goes through every node whatever its time bound.
    Rolling,
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
    pub order: Order,
    /// Nodes killed by this plan restart empty and are kept out by restart quarantine: wait
    /// for their readmission (a client's marker naming the node's new `run_id`), and never
    /// fault a node while `nodes.1` nodes are down or not yet readmitted.
    pub readmit: bool,
}

/// How long a restarted node may take to be readmitted (its quarantine is the longest TTL
/// plus drift, plus a second for the whole-second uptime, plus a loaded machine).
pub const READMIT_LIMIT: Duration = Duration::from_secs(30);

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
    /// Zero overlaps, exact counter, tokens increasing; progress may stop while restarted
    /// nodes are quarantined, but every restarted node is readmitted and acquisitions
    /// resume after the last fault.
    SafeAndRecovers,
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
    /// Lock TTLs of the workers, one per worker in turn (see `WorkerSpec::ttls`).
    pub ttls: Vec<Duration>,
    pub node_timeout: Duration,
    pub lock_wait: Duration,
    pub fencing: bool,
    pub quarantine: bool,
    pub use_lock: bool,
    pub max_increments: u64,
    /// Workers take one of this many permits of a semaphore instead of the lock (0: the
    /// lock); the checker then allows this many holders at once.
    pub permits: u32,
    /// Workers use a read-write lock: odd-numbered ones write, even-numbered ones read
    /// (see `WorkerSpec::rw`); the checker allows readers together.
    pub rw: bool,
    /// Workers campaign for an election instead of taking the lock (fencing and
    /// quarantine on: each term's epoch fences its writes).
    pub election: bool,
    /// Odd-numbered workers lock fenced, even-numbered ones plain (see
    /// `WorkerSpec::mixed`), and the row reports its live figures ([`recovery`]).
    pub mixed: bool,
}

impl NemesisRun {
    /// Defaults shared by the scenarios: 3 workers for 6 s, TTL 2 s, node timeout
    /// [`NODE_TIMEOUT`], no quarantine (only the empty-restart runs, which turn it on,
    /// restart nodes without persistence).
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
            ttls: vec![ttl],
            node_timeout: NODE_TIMEOUT,
            lock_wait: Duration::from_secs(2),
            fencing: false,
            quarantine: false,
            use_lock: true,
            max_increments: 10_000,
            permits: 0,
            rw: false,
            election: false,
            mixed: false,
        }
    }

    /// Plain and fenced workers in one run (fencing and quarantine on), and the row's live
    /// figures: how soon each kind of lock was granted after each fault healed, the calls
    /// refused after it, and the longest time without a grant ([`recovery`]).
    pub fn mixed(mut self) -> Self {
        self.mixed = true;
        self.fencing(true).quarantine(true)
    }

    /// Workers campaign for an election, each term's writes fenced by its epoch.
    pub fn election(mut self) -> Self {
        self.election = true;
        self.fencing(true).quarantine(true)
    }

    /// Workers use a read-write lock, writers and readers in turn.
    pub fn read_write(mut self) -> Self {
        self.rw = true;
        self
    }

    pub fn workers(mut self, count: usize) -> Self {
        self.workers = count;
        self
    }

    /// Workers take one of `k` permits of a semaphore instead of the lock.
    pub fn permits(mut self, k: u32) -> Self {
        self.permits = k;
        self
    }

    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Restart quarantine for every worker.
    pub fn quarantine(mut self, on: bool) -> Self {
        self.quarantine = on;
        self
    }

    /// Workers with these TTLs, in turn.
    pub fn ttls(mut self, ttls: &[Duration]) -> Self {
        assert!(!ttls.is_empty(), "at least one TTL");
        self.ttls = ttls.to_vec();
        self
    }

    pub fn longest_ttl(&self) -> Duration {
        self.ttls.iter().copied().max().unwrap_or_default()
    }

    /// The longest a minority fault may keep every worker from acquiring: keys left on a
    /// node that was down or cut off while their lock was released (it comes back with
    /// them when it persists) block until they expire, one TTL; plus the retry backoff, two
    /// rounds of node timeouts and scheduling slack on a loaded machine.
    pub fn liveness_bound(&self) -> Duration {
        self.longest_ttl() + Duration::from_millis(1500)
    }

    /// Time during which a `lock()` attempt begun before a fault may still complete:
    /// two rounds (acquire, fencing commit) of the node timeout, plus scheduling slack.
    pub fn grace(&self) -> Duration {
        self.node_timeout * 2 + Duration::from_millis(300)
    }
}

/// TTLs of the workers of the restart runs, in turn: clients with different TTLs, so a
/// node's quarantine must cover the longest TTL any client used, not the client's own.
pub const MIXED_TTLS: [Duration; 2] = [Duration::from_secs(1), Duration::from_secs(3)];

/// Random minority empty restarts (both tiers): nodes without persistence are killed and
/// restarted empty, 1 or 2 at a time, at random times, never more than 2 down or not yet
/// readmitted; restart quarantine and fencing on, mixed TTLs. Faults for 12 s (or
/// `QL_FAULTS_SOAK` seconds), then the workers run until every restarted node was
/// readmitted, and 0.7 s more.
pub fn minority_empty_restarts(name: &str) -> NemesisRun {
    let plan = Plan {
        faults: vec![FaultGen::Fixed(Fault::Kill)],
        nodes: (1, 2),
        hold: (Duration::from_millis(800), Duration::from_millis(1400)),
        gap: (Duration::from_millis(200), Duration::from_millis(1200)),
        max_windows: usize::MAX,
        order: Order::Random,
        readmit: true,
    };
    let mut run = NemesisRun::new(name, Some(plan), Expect::SafeAndRecovers)
        .fencing(true)
        .quarantine(true)
        .ttls(&MIXED_TTLS);
    run.run_for = soak().unwrap_or(Duration::from_secs(12));
    run
}

/// `QL_FAULTS_SOAK=<seconds>`: a longer randomised restart run (a soak), in both tiers.
pub fn soak() -> Option<Duration> {
    let secs: u64 = std::env::var("QL_FAULTS_SOAK").ok()?.trim().parse().ok()?;
    Some(Duration::from_secs(secs))
}

/// A rolling restart through every node (both tiers): n1..n5 in turn killed and restarted
/// empty, each once the previous one was readmitted; restart quarantine and fencing on,
/// mixed TTLs. The workers stop 0.7 s after the last readmission (at most 40 s of
/// restarts).
pub fn rolling_empty_restart(name: &str) -> NemesisRun {
    let plan = Plan {
        faults: vec![FaultGen::Fixed(Fault::Kill)],
        nodes: (1, 1),
        hold: (Duration::from_millis(800), Duration::from_millis(1400)),
        gap: (Duration::from_millis(100), Duration::from_millis(300)),
        max_windows: usize::MAX,
        order: Order::Rolling,
        readmit: true,
    };
    let mut run = NemesisRun::new(name, Some(plan), Expect::SafeAndRecovers)
        .fencing(true)
        .quarantine(true)
        .ttls(&MIXED_TTLS);
    run.run_for = Duration::from_secs(40);
    run
}

/// One fault as it happened.
#[derive(Clone, Debug)]
pub struct Window {
    pub fault: Fault,
    pub nodes: Vec<usize>,
    /// Just before the fault was injected.
    pub began: u64,
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
        "RETRIED (1st try, seed={seed}: {}; {}) {}",
        first.liveness.join("; "),
        first.notes,
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
    // Fencing needs restart quarantine on nodes without `appendfsync always` (a client
    // with it off is refused a token).
    let quarantine = run.quarantine || run.fencing;
    let mut spec = WorkerSpec {
        urls: ens.client_urls(),
        store_url: store.url(),
        resource: unique("faults-lock"),
        counter: counter.clone(),
        start_at: 0,
        stop_at: 0,
        max_increments: run.max_increments,
        ttls: run.ttls.clone(),
        node_timeout: run.node_timeout,
        lock_wait: run.lock_wait,
        quarantine,
        fencing: run.fencing,
        mixed: run.mixed,
        ttl_ceiling: None,
        use_lock: run.use_lock,
        permits: run.permits,
        rw: run.rw,
        election: run.election,
        seed,
    };
    if quarantine {
        prewarm(&spec, run.longest_ttl());
    }
    let start_at = clock::now() + 400_000_000; // time for the processes to start
    let readmit = run.plan.as_ref().is_some_and(|p| p.readmit);
    let extra = if readmit {
        READMIT_LIMIT
    } else {
        Duration::ZERO
    };
    let stop_at = start_at + (run.run_for + extra).as_nanos() as u64;
    spec.start_at = start_at;
    spec.stop_at = stop_at;
    let workers = Workers::spawn(worker_test, &spec, run.workers);

    let mut rng = Rng::new(seed);
    let mut sched = Schedule::default();
    let mut end_at = stop_at;
    if let Some(plan) = &run.plan {
        let faults_from = start_at + run.warmup.as_nanos() as u64;
        let faults_until = stop_at - run.cooldown.as_nanos() as u64;
        clock::sleep_until(faults_from);
        if plan.readmit {
            // `early_readmissions` is exact only if every kill outlasts the grace.
            assert!(
                plan.hold.0 > run.grace(),
                "restart plans hold longer than the grace"
            );
            // Workers run until every restarted node is readmitted, then a cooldown more.
            let last_start = stop_at - (READMIT_LIMIT + run.cooldown).as_nanos() as u64;
            match plan.order {
                Order::Random => random_readmitted(ens, plan, &mut rng, last_start, &mut sched),
                Order::Rolling => rolling(ens, plan, &mut rng, last_start, &mut sched),
            }
            sched.await_readmission(ens);
            std::thread::sleep(run.cooldown);
            workers.stop();
            end_at = clock::now();
        } else {
            random_windows(ens, plan, &mut rng, faults_until, &mut sched);
        }
    }
    let windows = &sched.windows;

    let limit = run.run_for + run.lock_wait + run.longest_ttl() + Duration::from_secs(20);
    let history = workers.wait(limit);
    let value: Option<i64> = redis::cmd("GET")
        .arg(&counter)
        .query(&mut store.conn())
        .expect("GET counter");
    let holders = usize::try_from(run.permits.max(1)).unwrap_or(usize::MAX);
    let check = if run.rw {
        history::check_rw(&history, value.unwrap_or(0), 0, super::worker::is_reader)
    } else {
        history::check_permits(&history, value.unwrap_or(0), 0, holders)
    };
    let want = match run.expect {
        Expect::SafeAndLive | Expect::SafeAndBlocked | Expect::SafeAndRecovers => Verdict::Safe,
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
    for f in history.failures.iter().filter(|f| f.end < end_at) {
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
    let (gap_from, longest_gap) = times
        .windows(2)
        .map(|w| (w[0], w[1] - w[0]))
        .max_by_key(|&(_, gap)| gap)
        .unwrap_or((start_at, 0));
    // Where the longest gap began, relative to the last fault begun before it.
    let gap_at = windows
        .iter()
        .rev()
        .find(|w| w.from <= gap_from)
        .map_or_else(
            || format!("@start+{}ms", (gap_from - start_at) / 1_000_000),
            |w| {
                format!(
                    "@{}+{}ms",
                    w.label().replace(' ', ":"),
                    (gap_from - w.from) / 1_000_000
                )
            },
        );
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
        Expect::SafeAndRecovers => {
            // Acquisitions after the last fault and the last readmission.
            let settled = last_to.max(sched.last_readmitted());
            if !history.holds.iter().any(|h| h.acquired > settled) {
                row.liveness
                    .push("no acquisition after the last node was readmitted".to_owned());
            }
            if check.holds < 10 {
                row.liveness
                    .push(format!("only {} holds in the whole run", check.holds));
            }
            if windows.is_empty() {
                row.liveness.push("no fault was applied".to_owned());
            }
        }
        Expect::Violation => {}
    }
    row.liveness.extend(sched.liveness.iter().cloned());
    row.problems.extend(early_readmissions(
        &sched.readmitted,
        &history.holds,
        grace,
        check.tolerance,
    ));
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
    if run.mixed {
        row.live = Some(recovery(&history, windows, end_at, longest_gap));
    }
    let labels: Vec<String> = windows.iter().map(Window::label).collect();
    let slowest_heal = windows
        .iter()
        .map(|w| (w.healed - w.to) / 1_000_000)
        .max()
        .unwrap_or(0);
    let ttls: Vec<String> = run
        .ttls
        .iter()
        .map(|t| format!("{}", t.as_secs_f64()))
        .collect();
    row.notes = format!(
        "seed={seed} fence={} ttl={}s{} longest-gap={}ms{gap_at} failed-calls={failures} slowest-heal={slowest_heal}ms{} windows={}{}",
        match (run.fencing, run.mixed) {
            (true, true) => "mixed",
            (true, false) => "y",
            _ => "n",
        },
        ttls.join("/"),
        if run.quarantine { " quarantine" } else { "" },
        longest_gap / 1_000_000,
        sched.readmission_note(),
        windows.len(),
        if labels.is_empty() {
            String::new()
        } else {
            format!(" [{}]", labels.join(", "))
        }
    );
    if run.election {
        row.notes.push_str(&handover_note(&history.holds));
    }
    row.secs = began.elapsed().as_secs_f64();
    row
}

/// ` handover p50=..ms max=..ms n=..`: from one term's release to the next term's start,
/// over the terms whose successor was already campaigning when it ended (a term released
/// with nobody waiting hands nothing over).
fn handover_note(holds: &[Hold]) -> String {
    let mut terms: Vec<&Hold> = holds.iter().collect();
    terms.sort_unstable_by_key(|h| h.acquired);
    let mut handovers: Vec<u64> = (terms.windows(2))
        .filter(|w| w[1].start < w[0].released && w[1].acquired >= w[0].released)
        .map(|w| w[1].acquired - w[0].released)
        .collect();
    handovers.sort_unstable();
    let ms = |ns: Option<&u64>| {
        ns.map_or_else(|| "-".to_owned(), |ns| format!("{:.1}", *ns as f64 / 1e6))
    };
    format!(
        " handover p50={}ms max={}ms n={}",
        ms(handovers.get(handovers.len() / 2)),
        ms(handovers.last()),
        handovers.len()
    )
}

/// The live figures of a run with plain and fenced workers: per fault window, from the
/// moment the fault healed, how long until the first plain and the first fenced lock were
/// granted, and the `lock()` calls begun from then until the next fault began that gave up
/// (a call cut short by the run's end, at `end_at`, left out); and the longest time
/// without a grant, `longest_gap` (ns).
pub fn recovery(history: &History, windows: &[Window], end_at: u64, longest_gap: u64) -> Live {
    let mut live = Live {
        refused: 0,
        to_plain: Some(Duration::ZERO),
        to_fenced: Some(Duration::ZERO),
        longest_gap: Some(Duration::from_nanos(longest_gap)),
    };
    for (k, w) in windows.iter().enumerate() {
        let next = windows.get(k + 1).map_or(end_at, |n| n.began);
        live.refused += (history.failures.iter())
            .filter(|f| f.start >= w.healed && f.start < next && f.end < end_at)
            .count();
        for (fenced, slot) in [(false, &mut live.to_plain), (true, &mut live.to_fenced)] {
            let first = (history.holds.iter())
                .filter(|h| h.token.is_some() == fenced && h.acquired >= w.healed)
                .map(|h| Duration::from_nanos(h.acquired - w.healed))
                .min();
            *slot = slot.zip(first).map(|(longest, d)| longest.max(d));
        }
    }
    live
}

/// One lock and release of the run's resource by a single client, before the workers
/// start: the nodes are then admitted and marked, as in a deployment already in use.
/// Without it, workers that start together on fresh nodes with quarantine on each see the
/// record another one's first attempt raised, none sees the ensemble fresh, and all wait
/// until the nodes are older than the longest TTL plus drift (DESIGN.md, section 7, "The
/// rules", rule 4): seconds without any acquisition at the start, which would hide the
/// quarantine dips the restart runs are about.
pub fn prewarm(spec: &WorkerSpec, ttl: Duration) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let redlock = client_with_ceiling(&spec.urls, ttl, spec.node_timeout, true, spec.ttl_ceiling);
    rt.block_on(async {
        let request = redlock
            .lock(&spec.resource, ttl)
            .wait(Duration::from_secs(15));
        let released = if spec.fencing {
            request
                .fenced()
                .await
                .expect("pre-warming lock")
                .release()
                .await
        } else {
            request.await.expect("pre-warming lock").release().await
        };
        released.expect("pre-warming release");
    });
}

/// The faults a run applied, and what became of the nodes restarted empty.
#[derive(Debug, Default)]
pub struct Schedule {
    pub windows: Vec<Window>,
    /// Restarted nodes not yet readmitted.
    pub pending: Vec<Restart>,
    /// Restarted nodes seen readmitted.
    pub readmitted: Vec<Restart>,
    /// Progress the schedule expected and did not see.
    liveness: Vec<String>,
}

/// A node killed and restarted empty, and when a client readmitted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restart {
    pub node: usize,
    /// Once it was killed.
    pub killed: u64,
    /// Once it served again (empty).
    pub healed: u64,
    /// When it was seen readmitted (its marker naming its new life); 0 while pending.
    pub readmitted: u64,
}

impl Restart {
    fn label(&self) -> String {
        format!("n{}", self.node + 1)
    }
}

impl Schedule {
    /// Applies `fault` to `nodes` for `hold`, then heals it; restarted nodes of a
    /// `readmit` plan are then pending readmission.
    pub fn window(
        &mut self,
        ens: &mut dyn Ensemble,
        fault: Fault,
        nodes: Vec<usize>,
        hold: Duration,
        readmit: bool,
    ) {
        let began = clock::now();
        for &i in &nodes {
            ens.inject(i, &fault);
        }
        let from = clock::now();
        std::thread::sleep(hold);
        let to = clock::now();
        for &i in &nodes {
            ens.heal(i, &fault);
        }
        let healed = clock::now();
        // A killed node restarts empty and a failed-over member serves from a promoted
        // replica: either is a new life, kept out until a client readmits it.
        if readmit && matches!(fault, Fault::Kill | Fault::Failover | Fault::HostStall) {
            self.pending.extend(nodes.iter().map(|&node| Restart {
                node,
                killed: from,
                healed,
                readmitted: 0,
            }));
        }
        self.windows.push(Window {
            fault,
            nodes,
            began,
            from,
            to,
            healed,
        });
    }

    /// Moves the pending nodes a client has readmitted since to `readmitted` (polled: the
    /// time seen is at or after the marker was written).
    pub fn refresh(&mut self, ens: &dyn Ensemble) {
        let mut still = Vec::new();
        for &r in &self.pending {
            if ens.admitted(r.node) {
                self.readmitted.push(Restart {
                    readmitted: clock::now(),
                    ..r
                });
            } else {
                still.push(r);
            }
        }
        self.pending = still;
    }

    /// When the last restarted node was readmitted (0: none was).
    fn last_readmitted(&self) -> u64 {
        self.readmitted
            .iter()
            .map(|r| r.readmitted)
            .max()
            .unwrap_or(0)
    }

    /// Waits (polling every 50 ms) until no node is pending, at most [`READMIT_LIMIT`] after
    /// the latest restart; a node still kept out then is a liveness failure.
    fn await_readmission(&mut self, ens: &dyn Ensemble) {
        loop {
            self.refresh(ens);
            let Some(latest) = self.pending.iter().map(|p| p.healed).max() else {
                return;
            };
            if clock::now() > latest + READMIT_LIMIT.as_nanos() as u64 {
                let nodes: Vec<String> = self.pending.iter().map(Restart::label).collect();
                self.liveness.push(format!(
                    "{} not readmitted within {READMIT_LIMIT:?} of restarting",
                    nodes.join("+")
                ));
                self.pending.clear();
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `readmit=<fastest>..<slowest>ms(<count>)`, or nothing.
    fn readmission_note(&self) -> String {
        let took: Vec<u64> = self
            .readmitted
            .iter()
            .map(|r| r.readmitted.saturating_sub(r.healed) / 1_000_000)
            .collect();
        match (took.iter().min(), took.iter().max()) {
            (Some(lo), Some(hi)) => format!(" readmitted-after={lo}..{hi}ms({})", took.len()),
            _ => String::new(),
        }
    }
}

/// Random faults on random nodes until `faults_until`.
fn random_windows(
    ens: &mut dyn Ensemble,
    plan: &Plan,
    rng: &mut Rng,
    faults_until: u64,
    sched: &mut Schedule,
) {
    while sched.windows.len() < plan.max_windows {
        let hold = rng.duration(plan.hold.0, plan.hold.1);
        if clock::now() + hold.as_nanos() as u64 > faults_until {
            break;
        }
        let fault = plan.faults[rng.below(plan.faults.len() as u64) as usize]
            .draw(rng, sched.windows.len());
        let k = rng.between(plan.nodes.0 as u64, plan.nodes.1 as u64) as usize;
        let nodes = rng.subset(ens.size(), k);
        sched.window(ens, fault, nodes, hold, false);
        std::thread::sleep(rng.duration(plan.gap.0, plan.gap.1));
    }
}

/// Random faults on random nodes, restarted nodes pending until readmitted: a fault only
/// hits nodes that are not pending, and only as many as keep the pending and the faulted
/// nodes together at most `plan.nodes.1` (a minority). No new fault starts after
/// `last_start`.
fn random_readmitted(
    ens: &mut dyn Ensemble,
    plan: &Plan,
    rng: &mut Rng,
    last_start: u64,
    sched: &mut Schedule,
) {
    while sched.windows.len() < plan.max_windows && clock::now() < last_start {
        sched.refresh(ens);
        let room = plan.nodes.1.saturating_sub(sched.pending.len());
        if room == 0 {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        let hold = rng.duration(plan.hold.0, plan.hold.1);
        let fault = plan.faults[rng.below(plan.faults.len() as u64) as usize]
            .draw(rng, sched.windows.len());
        let k = (rng.between(plan.nodes.0 as u64, plan.nodes.1 as u64) as usize).min(room);
        let free: Vec<usize> = (0..ens.size())
            .filter(|i| !sched.pending.iter().any(|r| r.node == *i))
            .collect();
        let nodes = rng
            .subset(free.len(), k)
            .into_iter()
            .map(|j| free[j])
            .collect();
        sched.window(ens, fault, nodes, hold, true);
        std::thread::sleep(rng.duration(plan.gap.0, plan.gap.1));
    }
}

/// A rolling restart: every node in turn, each once the previous one was readmitted.
fn rolling(
    ens: &mut dyn Ensemble,
    plan: &Plan,
    rng: &mut Rng,
    last_start: u64,
    sched: &mut Schedule,
) {
    for i in 0..ens.size() {
        if clock::now() > last_start {
            sched.liveness.push(format!(
                "the rolling restart ran out of time before n{}",
                i + 1
            ));
            return;
        }
        let hold = rng.duration(plan.hold.0, plan.hold.1);
        let fault = plan.faults[rng.below(plan.faults.len() as u64) as usize]
            .draw(rng, sched.windows.len());
        sched.window(ens, fault, vec![i], hold, true);
        sched.await_readmission(ens);
        std::thread::sleep(rng.duration(plan.gap.0, plan.gap.1));
    }
}

/// Restarted nodes readmitted while a hold that may have counted their vote from before the
/// restart was still within its validity: a quarantine that ended early (DESIGN.md,
/// section 7: a node that lost its memory votes again only once every lease that may
/// depend on it is over). Holds acquired up to `grace` after the kill are counted (an
/// attempt under way may have had the node's "yes" before it died); readmission after
/// their deadline, give or take `tolerance`, is required.
///
/// With every kill lasting longer than `grace`, a correct quarantine (the longest TTL of any
/// live lease, plus drift, from the node's restart) is always late enough, so this flags
/// nothing but a real early readmission; the polling that observes readmission can only
/// make it look later.
pub fn early_readmissions(
    readmitted: &[Restart],
    holds: &[Hold],
    grace: u64,
    tolerance: u64,
) -> Vec<String> {
    let mut found = Vec::new();
    for r in readmitted {
        let depended = holds
            .iter()
            .filter(|h| h.acquired <= r.killed + grace)
            .max_by_key(|h| h.deadline);
        if let Some(h) = depended
            && r.readmitted + tolerance < h.deadline
        {
            found.push(format!(
                "{} was readmitted {:?} after its restart, {:?} before the deadline of worker \
                 {} hold #{} acquired before it was killed: its quarantine ended early",
                r.label(),
                Duration::from_nanos(r.readmitted.saturating_sub(r.healed)),
                Duration::from_nanos(h.deadline - r.readmitted),
                h.worker,
                h.seq
            ));
        }
    }
    found
}
