//! Liveness rows: restart quarantine and fencing must leave the ensemble live, not only
//! safe. Nodes without persistence are restarted empty (or kept down from the start) with
//! restart quarantine and fencing on, the workers' TTL 1 s and a TTL ceiling of 2 s; the
//! workers are held idle across the restarts (paused, their clients alive, or stopped and
//! replaced by new processes), or keep running while an operator's readiness check paces
//! the restarts. Every row is judged by the checker like the others (overlaps, lost
//! updates, token order) and, in addition, on how fast locks are granted again.
//!
//! **Settling points.** A point opens where a change of the nodes (a restart, a node going
//! down or coming up) meets demand: at the change itself when workers are taking locks,
//! else when they next start or resume. It *settles* once a majority of nodes have each
//! been serving for [`longest_quarantine`] (the TTL ceiling plus its drift allowance: the
//! longest a node that may have lost its memory is kept out, whatever the ensemble
//! records say), and closes at the next change of the nodes or when the workers pause or
//! stop. Per point: the time from settling to the first plain and the first fenced lock
//! granted, and the `lock()` calls begun after settling that gave up. The table shows the
//! calls refused after settling (`refused`) and the longest times to a grant (`→plain`,
//! `→fenced`). A row fails when a time to a grant exceeds [`SLACK`] (so no lock waits
//! longer than the ceiling plus drift plus [`SLACK`] after a majority came back), when a
//! call begun more than [`SLACK`] after settling is refused, or when a point sees no
//! grant of a kind at all.
//!
//! A node serves from the moment its start (or restart) returned, once it answered: a
//! little after the process started, which is where the node's own uptime, and so its
//! quarantine, begins.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quorum_lock::{Redlock, RedlockBuilder};

use crate::common::{RedisServer, unique};

use super::clock;
use super::ensemble::{Ensemble, Fault};
use super::history::{self, History, Hold, Live, Row, Verdict};
use super::holders::LongHolders;
use super::nemesis::{self, Restart};
use super::worker::{WorkerSpec, Workers, client_with_ceiling};

/// Every worker's lock TTL.
pub const TTL: Duration = Duration::from_secs(1);
/// The deployment's TTL ceiling, given to every worker, to the readiness command and to
/// `Redlock::heal`'s client.
pub const CEILING: Duration = Duration::from_secs(2);
/// Workers per row: odd ones lock fenced, even ones plain (`WorkerSpec::mixed`).
pub const WORKERS: usize = 3;
/// Wait budget of one worker's `lock()` call: short, so a refusal shows soon.
const LOCK_WAIT: Duration = Duration::from_secs(1);
/// How long after settling a lock of each kind must have been granted, and after which no
/// `lock()` call may be refused: up to 2 s of `INFO`'s uptime in whole seconds (computed
/// from two whole-second wall-clock readings, read at connect and rounded against the
/// node), a retry and a loaded machine.
pub const SLACK: Duration = Duration::from_secs(3);
/// `quorum-lock doctor --ready --wait` and the `heal()` loop's limit.
const READY_WAIT: Duration = Duration::from_secs(30);
/// How long a node brought back may take to be admitted by the workers' locks.
const ADMIT_LIMIT: Duration = Duration::from_secs(30);
/// How often the parent looks at markers and at the workers' records while it waits.
const POLL: Duration = Duration::from_millis(50);
/// Time for worker processes to start before their first call.
const START_DELAY: Duration = Duration::from_millis(400);

/// The longest quarantine any node can be given in these rows: the TTL ceiling plus its
/// drift allowance (the library's default drift factor, plus 2 ms).
pub fn longest_quarantine() -> Duration {
    CEILING + CEILING.mul_f64(RedlockBuilder::DEFAULT_DRIFT_FACTOR) + Duration::from_millis(2)
}

/// How a row waits, after a restart, until every node votes again.
#[derive(Clone, Debug)]
pub enum ReadyBy {
    /// `quorum-lock doctor --ready --wait 30s` (the binary at this path) must exit 0.
    Cli(PathBuf),
    /// `Redlock::heal()` in a loop until `is_ready()`.
    Heal,
}

/// One step of a row, run in order.
#[derive(Clone, Debug)]
pub enum Step {
    /// Workers take locks (started if none run, resumed if paused) for at least this long,
    /// and, while a settling point is open, until a plain and a fenced lock were granted
    /// after it settled (or [`SLACK`] and half a second more have passed).
    Work(Duration),
    /// Workers start no new `lock()` call; returns once each is idle. Their clients stay
    /// alive (a long-lived client's background readmission goes on).
    Pause,
    /// The worker processes end; the next [`Step::Work`] starts new ones (clients that
    /// know nothing of the nodes' past).
    Stop,
    /// SIGKILL node `i` and start it again, empty.
    Restart(usize),
    /// SIGKILL node `i`; it stays down.
    Down(usize),
    /// Start node `i` again (empty).
    Up(usize),
    /// A deliberate idle gap.
    Idle(Duration),
    /// Wait until every node is admitted, asked as an operator would.
    Ready(ReadyBy),
    /// Wait until these nodes are admitted (their markers name their current lives).
    Admitted(Vec<usize>),
}

/// One liveness row.
#[derive(Clone, Debug)]
pub struct LivenessRun {
    pub name: String,
    pub steps: Vec<Step>,
    /// One lock and release before the workers start (a deployment already in use); off
    /// for a new deployment.
    pub prewarm: bool,
    /// Long holders of every kind (see `super::holders`) hold from before the first step
    /// to after the last; the row counts those that lost their lock (the `lost` column).
    pub long_holders: bool,
}

/// Row 1: a rolling restart at an operator's pace, every node in turn restarted empty,
/// 2.5 s apart (longer than the ceiling) with no lock taken meanwhile: the workers are
/// paused across the whole roll, their clients alive, then resume.
pub fn idle_rolling_restart(nodes: usize) -> LivenessRun {
    let mut steps = vec![Step::Work(Duration::from_secs(1)), Step::Pause];
    for i in 0..nodes {
        steps.push(Step::Restart(i));
        steps.push(Step::Idle(Duration::from_millis(2500)));
    }
    steps.push(Step::Work(Duration::from_secs(1)));
    steps.push(Step::Admitted((0..nodes).collect()));
    LivenessRun {
        name: "idle rolling restart, paused clients".to_owned(),
        steps,
        prewarm: true,
        long_holders: false,
    }
}

/// Row 2: a new deployment (nodes just created, never locked) with a minority down from
/// the start: the workers' first calls find two of five nodes dead. The two come back
/// empty later, while the workers run, and must be admitted.
pub fn down_from_the_start(nodes: usize) -> LivenessRun {
    let down: Vec<usize> = (nodes - (nodes - 1) / 2..nodes).collect();
    let mut steps: Vec<Step> = down.iter().map(|&i| Step::Down(i)).collect();
    steps.push(Step::Work(Duration::from_secs(1)));
    steps.extend(down.iter().map(|&i| Step::Up(i)));
    steps.push(Step::Admitted(down.clone()));
    steps.push(Step::Work(Duration::from_secs(1)));
    let names: Vec<String> = down.iter().map(|i| format!("n{}", i + 1)).collect();
    LivenessRun {
        name: format!("new deployment, {} down from the start", names.join("+")),
        steps,
        prewarm: false,
        long_holders: false,
    }
}

/// Row 3: single-node restarts separated by idle gaps: n1, 3 s idle, n2, 3 s idle, n3;
/// the workers stopped before and new processes (fresh clients) started right after n3.
pub fn idle_single_restarts() -> LivenessRun {
    let gap = Duration::from_secs(3);
    LivenessRun {
        name: "n1, n2, n3 restarted 3 s apart, idle, fresh clients".to_owned(),
        steps: vec![
            Step::Work(Duration::from_secs(1)),
            Step::Stop,
            Step::Restart(0),
            Step::Idle(gap),
            Step::Restart(1),
            Step::Idle(gap),
            Step::Restart(2),
            Step::Work(Duration::from_secs(1)),
            Step::Admitted(vec![0, 1, 2]),
        ],
        prewarm: true,
        long_holders: false,
    }
}

/// Row 4: a rolling restart paced by the readiness check, under long holders of every
/// kind: every node in turn restarted empty while the workers keep locking, the next one
/// only once the check says every node votes again and every live lock is back on enough
/// nodes; no long holder may lose its lock.
pub fn ready_paced_rolling_restart(nodes: usize, by: ReadyBy) -> LivenessRun {
    let mut steps = vec![Step::Work(Duration::from_secs(1))];
    for i in 0..nodes {
        steps.push(Step::Restart(i));
        steps.push(Step::Ready(by.clone()));
    }
    steps.push(Step::Work(Duration::from_secs(1)));
    let how = match by {
        ReadyBy::Cli(_) => "doctor --ready",
        ReadyBy::Heal => "heal()",
    };
    LivenessRun {
        name: format!("rolling restart paced by {how}, long holders"),
        steps,
        prewarm: true,
        long_holders: true,
    }
}

/// A settling point (see the module's doc).
#[derive(Clone, Debug)]
struct Point {
    /// What changed: `restart n1`, `down n4+down n5`, ...
    label: String,
    /// When the change met demand.
    from: u64,
    /// When a majority had been serving for the longest quarantine (at or after `from`).
    settled: u64,
    /// When it closed (`u64::MAX` while open).
    until: u64,
}

/// Restarted nodes seen readmitted before the deadline of a hold that may have counted
/// their vote from before the restart: a quarantine that ended early. A hold's attempt
/// began `TTL - drift` before its deadline (the validity is the TTL less the attempt's
/// elapsed time and the drift allowance, from the decision), so only a hold whose attempt
/// began at or before the kill can have counted the node's old life. Unlike the nemesis
/// check (`nemesis::early_readmissions`, holds acquired up to a grace after the kill,
/// which needs kills longer than the grace), this needs no assumption on how long a node
/// was down: these rows restart nodes at once. A correct quarantine (the longest TTL plus
/// drift after the node served again) is always after such a deadline; the polling that
/// sees a readmission only makes it look later.
pub fn early_readmissions(readmitted: &[Restart], holds: &[Hold], tolerance: u64) -> Vec<String> {
    let margin = (TTL - quorum_drift()).as_nanos() as u64;
    let mut found = Vec::new();
    for r in readmitted {
        let depended = (holds.iter())
            .filter(|h| h.deadline.saturating_sub(margin) <= r.killed + tolerance)
            .max_by_key(|h| h.deadline);
        if let Some(h) = depended
            && r.readmitted + tolerance < h.deadline
        {
            found.push(format!(
                "n{} was readmitted {:?} after its restart, {:?} before the deadline of worker \
                 {} hold #{} whose attempt began before it was killed: its quarantine ended early",
                r.node + 1,
                Duration::from_nanos(r.readmitted.saturating_sub(r.healed)),
                Duration::from_nanos(h.deadline - r.readmitted),
                h.worker,
                h.seq
            ));
        }
    }
    found
}

/// The drift allowance of [`TTL`] (`TTL * drift factor + 2 ms`).
fn quorum_drift() -> Duration {
    TTL.mul_f64(RedlockBuilder::DEFAULT_DRIFT_FACTOR) + Duration::from_millis(2)
}

/// The state of a row while it runs.
struct Runner<'a> {
    ens: &'a mut dyn Ensemble,
    spec: WorkerSpec,
    worker_test: &'a str,
    /// Since when each node has served (its latest start), `None` while down.
    up_since: Vec<Option<u64>>,
    /// When each node went down (for a node brought back).
    down_at: Vec<u64>,
    workers: Option<Workers>,
    paused: bool,
    next_id: u32,
    /// Records of worker sets that ended.
    histories: Vec<History>,
    points: Vec<Point>,
    open: Option<usize>,
    /// Changes of the nodes not yet met by demand, and when the last one was done.
    changes: Vec<String>,
    changed_at: u64,
    /// A readiness check failed: the remaining steps (restarts that would no longer wait
    /// for it) are skipped.
    aborted: bool,
    /// Nodes restarted (or brought back) empty, not yet seen admitted.
    pending: Vec<Restart>,
    readmitted: Vec<Restart>,
    /// How long each readiness check took, in ms.
    ready_ms: Vec<u64>,
    /// Client for `ReadyBy::Heal`.
    healer: Option<(tokio::runtime::Runtime, Redlock)>,
    problems: Vec<String>,
    liveness: Vec<String>,
}

/// Runs `run` on `ens`, whose nodes have served since `started` (common clock, one per
/// node), with the workers' counter in `store`.
pub fn run(
    ens: &mut dyn Ensemble,
    started: &[u64],
    store: &RedisServer,
    worker_test: &str,
    run: &LivenessRun,
    seed: u64,
) -> Row {
    let began = Instant::now();
    assert_eq!(started.len(), ens.size(), "one start time per node");
    let spec = WorkerSpec {
        urls: ens.client_urls(),
        store_url: store.url(),
        resource: unique("liveness-lock"),
        counter: unique("liveness-counter"),
        start_at: 0,
        stop_at: 0,
        max_increments: 100_000,
        ttls: vec![TTL],
        node_timeout: nemesis::NODE_TIMEOUT,
        lock_wait: LOCK_WAIT,
        quarantine: true,
        fencing: true,
        mixed: true,
        ttl_ceiling: Some(CEILING),
        use_lock: true,
        permits: 0,
        rw: false,
        election: false,
        seed,
    };
    if run.prewarm {
        nemesis::prewarm(&spec, TTL);
    }
    let holders = run.long_holders.then(|| {
        let urls = ens.client_urls();
        let client = client_with_ceiling(&urls, TTL, nemesis::NODE_TIMEOUT, true, Some(CEILING));
        LongHolders::take(client)
    });
    let mut runner = Runner {
        ens,
        spec,
        worker_test,
        up_since: started.iter().map(|&t| Some(t)).collect(),
        down_at: started.to_vec(),
        workers: None,
        paused: false,
        next_id: 1,
        histories: Vec::new(),
        points: Vec::new(),
        open: None,
        changes: Vec::new(),
        changed_at: clock::now(),
        aborted: false,
        pending: Vec::new(),
        readmitted: Vec::new(),
        ready_ms: Vec::new(),
        healer: None,
        problems: Vec::new(),
        liveness: Vec::new(),
    };
    for step in &run.steps {
        runner.step(step);
    }
    if runner.demand_on() {
        runner.open_point(runner.changed_at);
    }
    runner.close_point();
    if let Some(workers) = runner.workers.take() {
        workers.stop();
        runner.histories.push(workers.wait(worker_limit()));
    }
    let counter = runner.spec.counter.clone();
    let value: Option<i64> = redis::cmd("GET")
        .arg(&counter)
        .query(&mut store.conn())
        .expect("GET counter");
    let mut row = runner.judge(&run.name, value.unwrap_or(0), seed);
    if let Some(holders) = holders {
        let lost = holders.lost();
        row.holders_lost = Some((lost.len(), holders.count()));
        if !lost.is_empty() {
            row.liveness
                .push(format!("long holders lost their lock: {}", lost.join(", ")));
        }
        holders.release();
    }
    row.secs = began.elapsed().as_secs_f64();
    row
}

/// How long a worker set may take to finish once told to stop.
fn worker_limit() -> Duration {
    LOCK_WAIT + TTL + Duration::from_secs(20)
}

impl Runner<'_> {
    fn demand_on(&self) -> bool {
        self.workers.is_some() && !self.paused
    }

    fn step(&mut self, step: &Step) {
        if self.aborted {
            return;
        }
        let is_change = matches!(step, Step::Restart(_) | Step::Down(_) | Step::Up(_));
        if !is_change && self.demand_on() {
            // Changes in a row (two nodes brought back one after the other) meet demand
            // as one.
            self.open_point(self.changed_at);
        }
        match step {
            Step::Work(at_least) => self.work(*at_least),
            Step::Pause => {
                self.close_point();
                let workers = self.workers.as_mut().expect("Pause needs running workers");
                workers.pause(worker_limit());
                self.paused = true;
            }
            Step::Stop => {
                self.close_point();
                let workers = self.workers.take().expect("Stop needs workers");
                workers.stop();
                self.histories.push(workers.wait(worker_limit()));
                self.paused = false;
            }
            Step::Restart(i) => self.change(*i, Some(Fault::Kill), Some(Fault::Kill)),
            Step::Down(i) => self.change(*i, Some(Fault::Kill), None),
            Step::Up(i) => self.change(*i, None, Some(Fault::Kill)),
            Step::Idle(gap) => {
                let end = Instant::now() + *gap;
                while Instant::now() < end {
                    self.refresh();
                    std::thread::sleep(POLL.min(end.saturating_duration_since(Instant::now())));
                }
            }
            Step::Ready(by) => self.ready(by),
            Step::Admitted(nodes) => {
                let start = Instant::now();
                loop {
                    self.refresh();
                    let waiting: Vec<usize> = (self.pending.iter())
                        .map(|r| r.node)
                        .filter(|i| nodes.contains(i))
                        .collect();
                    if waiting.is_empty() {
                        break;
                    }
                    if start.elapsed() > ADMIT_LIMIT {
                        let names: Vec<String> =
                            waiting.iter().map(|i| format!("n{}", i + 1)).collect();
                        self.liveness.push(format!(
                            "{} not admitted within {ADMIT_LIMIT:?} of coming back",
                            names.join("+")
                        ));
                        break;
                    }
                    std::thread::sleep(POLL);
                }
            }
        }
    }

    /// Kills (`inject`) and/or starts (`heal`) node `i`: a change of the nodes.
    fn change(&mut self, i: usize, inject: Option<Fault>, heal: Option<Fault>) {
        self.close_point();
        let before = clock::now();
        if let Some(fault) = &inject {
            self.ens.inject(i, fault);
            self.up_since[i] = None;
            self.down_at[i] = before;
            self.pending.retain(|r| r.node != i);
        }
        let label = match (&inject, &heal) {
            (Some(_), Some(_)) => "restart",
            (Some(_), None) => "down",
            _ => "up",
        };
        if let Some(fault) = &heal {
            self.ens.heal(i, fault);
            let after = clock::now();
            self.up_since[i] = Some(after);
            self.pending.push(Restart {
                node: i,
                killed: self.down_at[i],
                healed: after,
                readmitted: 0,
            });
        }
        self.changes.push(format!("{label} n{}", i + 1));
        self.changed_at = clock::now();
    }

    /// Opens a point for the changes so far, met by demand at `from`.
    fn open_point(&mut self, from: u64) {
        if self.changes.is_empty() {
            return;
        }
        let label = std::mem::take(&mut self.changes).join("+");
        let quarantine = longest_quarantine().as_nanos() as u64;
        let mut ready: Vec<u64> = (self.up_since.iter().flatten())
            .map(|&since| (since + quarantine).max(from))
            .collect();
        ready.sort_unstable();
        let majority = self.up_since.len() / 2 + 1;
        match ready.get(majority - 1) {
            Some(&settled) => {
                self.points.push(Point {
                    label,
                    from,
                    settled,
                    until: u64::MAX,
                });
                self.open = Some(self.points.len() - 1);
            }
            None => self.problems.push(format!(
                "{label}: no majority of nodes serving (the row is wrong)"
            )),
        }
    }

    fn close_point(&mut self) {
        if let Some(p) = self.open.take() {
            self.points[p].until = clock::now();
        }
    }

    /// Moves the pending nodes now admitted (marker of their current life) to
    /// `readmitted`, with the time seen.
    fn refresh(&mut self) {
        let mut still = Vec::new();
        for r in std::mem::take(&mut self.pending) {
            if self.ens.admitted(r.node) {
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

    fn work(&mut self, at_least: Duration) {
        let mut min_end = Instant::now() + at_least;
        match self.workers.as_mut() {
            None => {
                let start_at = clock::now() + START_DELAY.as_nanos() as u64;
                self.spec.start_at = start_at;
                self.spec.stop_at = start_at + Duration::from_secs(600).as_nanos() as u64;
                let ids = self.next_id..=self.next_id + WORKERS as u32 - 1;
                self.next_id += WORKERS as u32;
                self.workers = Some(Workers::spawn_ids(self.worker_test, &self.spec, ids));
                min_end += START_DELAY;
                self.open_point(start_at);
            }
            Some(workers) if self.paused => {
                workers.resume();
                self.paused = false;
                self.open_point(clock::now());
            }
            Some(_) => {}
        }
        loop {
            std::thread::sleep(POLL);
            self.refresh();
            if Instant::now() < min_end {
                continue;
            }
            let Some(p) = self.open.map(|p| self.points[p].clone()) else {
                break;
            };
            let now = clock::now();
            if now > p.settled + (SLACK + Duration::from_millis(500)).as_nanos() as u64 {
                break;
            }
            if now < p.settled {
                continue;
            }
            let history = self.workers.as_ref().expect("workers").snapshot();
            let granted = |fenced: bool| {
                (history.holds.iter())
                    .any(|h| h.token.is_some() == fenced && h.acquired >= p.settled)
            };
            if granted(false) && granted(true) {
                break;
            }
        }
    }

    /// Waits until every node votes: the readiness command or `heal()` in a loop.
    fn ready(&mut self, by: &ReadyBy) {
        let start = Instant::now();
        let verdict = match by {
            ReadyBy::Cli(bin) => self.ready_cli(bin),
            ReadyBy::Heal => self.ready_heal(),
        };
        self.ready_ms.push(start.elapsed().as_millis() as u64);
        self.refresh();
        if let Err(why) = verdict {
            self.liveness
                .push(format!("{why} (the remaining steps were skipped)"));
            self.aborted = true;
            return;
        }
        // Ready means every node's marker names its current life.
        let out: Vec<String> = (0..self.ens.size())
            .filter(|&i| !self.ens.admitted(i))
            .map(|i| format!("n{}", i + 1))
            .collect();
        if !out.is_empty() {
            self.problems.push(format!(
                "the readiness check said ready, but {} has no marker of its current life",
                out.join("+")
            ));
        }
    }

    fn ready_cli(&mut self, bin: &PathBuf) -> Result<(), String> {
        let dir = std::env::temp_dir().join(unique("quorum-lock-ready"));
        std::fs::create_dir_all(&dir).expect("ready dir");
        let (out, err) = (dir.join("out"), dir.join("err"));
        let file = |p: &PathBuf| std::fs::File::create(p).expect("ready output file");
        let mut child: Child = Command::new(bin)
            .arg("--nodes")
            .arg(self.ens.client_urls().join(","))
            .arg("--node-timeout")
            .arg(format!("{}ms", nemesis::NODE_TIMEOUT.as_millis()))
            .arg("--ttl-ceiling")
            .arg(format!("{}s", CEILING.as_secs()))
            .args(["doctor", "--ready", "--wait"])
            .arg(format!("{}s", READY_WAIT.as_secs()))
            .stdin(Stdio::null())
            .stdout(file(&out))
            .stderr(file(&err))
            .spawn()
            .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
        let start = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait quorum-lock") {
                break Some(status);
            }
            if start.elapsed() > READY_WAIT + Duration::from_secs(10) {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            self.refresh();
            std::thread::sleep(POLL);
        };
        let text = |p: &PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        let said = format!("stdout: {:?} stderr: {:?}", text(&out), text(&err));
        let _ = std::fs::remove_dir_all(&dir);
        match status {
            Some(s) if s.success() => Ok(()),
            Some(s) => Err(format!(
                "`quorum-lock doctor --ready --wait {}s` exited {s} after {:?}; {said}",
                READY_WAIT.as_secs(),
                start.elapsed()
            )),
            None => Err(format!(
                "`quorum-lock doctor --ready` still running after {:?}; {said}",
                start.elapsed()
            )),
        }
    }

    fn ready_heal(&mut self) -> Result<(), String> {
        if self.healer.is_none() {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let redlock = client_with_ceiling(
                &self.ens.client_urls(),
                TTL,
                nemesis::NODE_TIMEOUT,
                true,
                Some(CEILING),
            );
            self.healer = Some((rt, redlock));
        }
        let start = Instant::now();
        loop {
            let (rt, redlock) = self.healer.as_ref().expect("healer");
            let readiness = rt
                .block_on(redlock.heal())
                .map_err(|e| format!("heal(): {e}"))?;
            if readiness.is_ready() {
                return Ok(());
            }
            if start.elapsed() > READY_WAIT {
                return Err(format!(
                    "heal() not ready after {READY_WAIT:?}: {:?}",
                    readiness.nodes
                ));
            }
            self.refresh();
            std::thread::sleep(POLL);
        }
    }

    /// The checker's verdict on every record of the row, and the liveness figures.
    fn judge(mut self, name: &str, counter: i64, seed: u64) -> Row {
        let mut history = History::default();
        for h in std::mem::take(&mut self.histories) {
            history.holds.extend(h.holds);
            history.failures.extend(h.failures);
            history.done.extend(h.done);
        }
        let check = history::check(&history, counter, 0);
        let mut row = Row::from_check(name, &check, true, Verdict::Safe);
        if let Some(d) = check.describe_overlap(&history) {
            row.problems.push(format!("first overlap: {d}"));
        }
        if check.token_regressions > 0 {
            row.problems.push(format!(
                "{} fencing token regression(s)",
                check.token_regressions
            ));
        }
        let reported: u64 = history.done.iter().map(|d| d.increments).sum();
        if reported as i64 != check.expected {
            row.problems.push(format!(
                "workers report {reported} increments but their records show {}",
                check.expected
            ));
        }
        row.problems.extend(early_readmissions(
            &self.readmitted,
            &history.holds,
            check.tolerance,
        ));
        row.problems.append(&mut self.problems);
        row.liveness.append(&mut self.liveness);
        if check.holds < 10 {
            row.liveness
                .push(format!("only {} holds in the whole row", check.holds));
        }

        let slack = SLACK.as_nanos() as u64;
        let mut live = Live {
            refused: 0,
            to_plain: Some(Duration::ZERO),
            to_fenced: Some(Duration::ZERO),
            longest_gap: None,
        };
        let mut point_notes = Vec::new();
        for p in &self.points {
            if p.settled >= p.until {
                point_notes.push(format!("{}:unsettled", p.label));
                continue;
            }
            let window = |t: u64| t >= p.settled && t < p.until;
            let first = |fenced: bool| {
                (history.holds.iter())
                    .filter(|h| h.token.is_some() == fenced && window(h.acquired))
                    .map(|h| Duration::from_nanos(h.acquired - p.settled))
                    .min()
            };
            let refused: Vec<u64> = (history.failures.iter())
                .filter(|f| window(f.start))
                .map(|f| f.start)
                .collect();
            let late = refused.iter().filter(|&&t| t >= p.settled + slack).count();
            live.refused += refused.len();
            let length = Duration::from_nanos(p.until - p.settled);
            for (fenced, kind, slot) in [
                (false, "plain", &mut live.to_plain),
                (true, "fenced", &mut live.to_fenced),
            ] {
                match first(fenced) {
                    Some(d) => {
                        *slot = slot.map(|s| s.max(d));
                        if d > SLACK {
                            row.liveness.push(format!(
                                "{}: first {kind} lock {d:.2?} after settling (more than {SLACK:?})",
                                p.label
                            ));
                        }
                    }
                    None => {
                        *slot = None;
                        row.liveness.push(format!(
                            "{}: no {kind} lock granted in the {length:.2?} after settling",
                            p.label
                        ));
                    }
                }
            }
            if late > 0 {
                row.liveness.push(format!(
                    "{}: {late} lock() call(s) begun more than {SLACK:?} after settling refused",
                    p.label
                ));
            }
            let ms = |d: Option<Duration>| {
                d.map_or_else(|| "-".to_owned(), |d| d.as_millis().to_string())
            };
            point_notes.push(format!(
                "{}:settled+{}ms,p={},f={},r={}",
                p.label.replace(' ', ""),
                (p.settled - p.from) / 1_000_000,
                ms(first(false)),
                ms(first(true)),
                refused.len()
            ));
        }
        row.live = Some(live);

        let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
        for f in &history.failures {
            *kinds.entry(f.why.as_str()).or_default() += 1;
        }
        let failures: Vec<String> = kinds.iter().map(|(k, n)| format!("{k}:{n}")).collect();
        let took: Vec<u64> = (self.readmitted.iter())
            .map(|r| r.readmitted.saturating_sub(r.healed) / 1_000_000)
            .collect();
        let range = |v: &[u64]| match (v.iter().min(), v.iter().max()) {
            (Some(lo), Some(hi)) => format!("{lo}..{hi}ms({})", v.len()),
            _ => "-".to_owned(),
        };
        row.notes = format!(
            "seed={seed} fence=mixed ttl={}s ceiling={}s quarantine failed-calls={}{} admitted-after={} ready-after={} points=[{}]",
            TTL.as_secs(),
            CEILING.as_secs(),
            history.failures.len(),
            if failures.is_empty() {
                String::new()
            } else {
                format!("({})", failures.join(","))
            },
            range(&took),
            range(&self.ready_ms),
            point_notes.join(" ")
        );
        row
    }
}
