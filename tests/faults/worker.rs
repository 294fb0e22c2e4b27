//! Worker processes: the test binary re-executes itself (`--exact <worker test> --ignored`,
//! like `mutual_exclusion_across_processes` in `tests/core.rs`) with the run described in
//! environment variables. Each worker repeatedly locks the resource, increments a counter
//! kept in a separate, never-faulted Redis by read-modify-write (GET, a short sleep, SET —
//! or, with fencing, `fenced_set` under the token of a `LockRequest::fenced()` lock),
//! releases, and records every hold (with its token) and every failed `lock()` call as a
//! line in its own file, which the parent reads once it exits (or, complete lines only,
//! while it runs: `Workers::snapshot`). Workers of one run may use different TTLs
//! (`WorkerSpec::ttls`) and mix plain and fenced locks (`WorkerSpec::mixed`); the parent
//! can end a run early (`Workers::stop`) or hold every worker idle for a while
//! (`Workers::pause`, `Workers::resume`).

use std::fs::{self, File};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use quorum_lock::{Error, LockGuard, LockRequest, Redlock, fencing};
use redis::AsyncCommands;

use super::clock;
use super::history::{Done, Failure, History, Hold, Write, parse};
use super::rng::Rng;

/// Everything a worker needs to know; passed through the environment.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    pub urls: Vec<String>,
    pub store_url: String,
    pub resource: String,
    pub counter: String,
    /// Common-clock time at which all workers begin (so they contend from the start).
    pub start_at: u64,
    /// Common-clock time after which no worker starts a new `lock()` call.
    pub stop_at: u64,
    /// Increments per worker, at most.
    pub max_increments: u64,
    /// Lock TTLs, one per worker in turn: worker `id` (from 1) uses `ttls[(id - 1) % len]`,
    /// so one run can mix clients with different TTLs.
    pub ttls: Vec<Duration>,
    pub node_timeout: Duration,
    /// Wait budget of one `lock()` call.
    pub lock_wait: Duration,
    pub quarantine: bool,
    /// Lock with [`LockRequest::fenced`](quorum_lock::LockRequest::fenced) (a
    /// `FencedGuard`), record each hold's token and write the counter with `fenced_set`.
    pub fencing: bool,
    /// With `fencing`, even-numbered workers (2, 4, ...) lock plain: plain and fenced
    /// holders of one resource in one run.
    pub mixed: bool,
    /// The deployment's TTL ceiling every worker's client is built with
    /// (`RedlockBuilder::ttl_ceiling`); `None`: the library's default.
    pub ttl_ceiling: Option<Duration>,
    /// False for the control run: increments without any lock.
    pub use_lock: bool,
    /// Take one of this many permits of the semaphore `resource` instead of its lock (0:
    /// the lock); the counter is then incremented with `INCR`, since up to this many
    /// holders write at once.
    pub permits: u32,
    /// Use the read-write lock `resource`: odd-numbered workers (1, 3, ...) write under its
    /// write lock (read-modify-write, fenced with `fencing`), even-numbered ones hold its
    /// read lock and only read ([`is_reader`]).
    pub rw: bool,
    /// Campaign for the election `resource` instead of taking its lock: each term's epoch
    /// is the token its writes carry (`fencing` on).
    pub election: bool,
    pub seed: u64,
}

/// Whether worker `id` (from 1) of a read-write run is a reader.
pub fn is_reader(id: u32) -> bool {
    id.is_multiple_of(2)
}

const PREFIX: &str = "QLF_";

impl WorkerSpec {
    /// The TTL of worker `id` (from 1).
    pub fn ttl_of(&self, id: u32) -> Duration {
        self.ttls[(id as usize - 1) % self.ttls.len()]
    }

    /// Whether worker `id` (from 1) locks with a fencing token.
    pub fn fenced(&self, id: u32) -> bool {
        self.fencing && !(self.mixed && id.is_multiple_of(2))
    }

    fn to_env(&self) -> Vec<(String, String)> {
        let ms = |d: Duration| d.as_millis().to_string();
        [
            ("URLS", self.urls.join(",")),
            ("STORE", self.store_url.clone()),
            ("RESOURCE", self.resource.clone()),
            ("COUNTER", self.counter.clone()),
            ("START_AT", self.start_at.to_string()),
            ("STOP_AT", self.stop_at.to_string()),
            ("MAX_INCR", self.max_increments.to_string()),
            (
                "TTL_MS",
                self.ttls
                    .iter()
                    .map(|&d| ms(d))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            ("NODE_TIMEOUT_MS", ms(self.node_timeout)),
            ("LOCK_WAIT_MS", ms(self.lock_wait)),
            ("QUARANTINE", u8::from(self.quarantine).to_string()),
            ("FENCING", u8::from(self.fencing).to_string()),
            ("MIXED", u8::from(self.mixed).to_string()),
            (
                "CEILING_MS",
                self.ttl_ceiling.map_or(0, |d| d.as_millis()).to_string(),
            ),
            ("USE_LOCK", u8::from(self.use_lock).to_string()),
            ("PERMITS", self.permits.to_string()),
            ("RW", u8::from(self.rw).to_string()),
            ("ELECTION", u8::from(self.election).to_string()),
            ("SEED", self.seed.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{PREFIX}{k}"), v))
        .collect()
    }

    fn from_env() -> WorkerSpec {
        fn var(k: &str) -> String {
            std::env::var(format!("{PREFIX}{k}")).unwrap_or_else(|_| panic!("{PREFIX}{k} unset"))
        }
        fn n(k: &str) -> u64 {
            var(k)
                .parse()
                .unwrap_or_else(|e| panic!("{PREFIX}{k}: {e}"))
        }
        let ms = |k: &str| Duration::from_millis(n(k));
        WorkerSpec {
            // The node list format: a Sentinel member's URL keeps its commas.
            urls: quorum_lock::RedlockBuilder::parse_node_list(&var("URLS")),
            store_url: var("STORE"),
            resource: var("RESOURCE"),
            counter: var("COUNTER"),
            start_at: n("START_AT"),
            stop_at: n("STOP_AT"),
            max_increments: n("MAX_INCR"),
            ttls: var("TTL_MS")
                .split(',')
                .map(|v| Duration::from_millis(v.parse().unwrap_or_else(|e| panic!("TTL_MS: {e}"))))
                .collect(),
            node_timeout: ms("NODE_TIMEOUT_MS"),
            lock_wait: ms("LOCK_WAIT_MS"),
            quarantine: n("QUARANTINE") == 1,
            fencing: n("FENCING") == 1,
            mixed: n("MIXED") == 1,
            ttl_ceiling: Some(ms("CEILING_MS")).filter(|d| !d.is_zero()),
            use_lock: n("USE_LOCK") == 1,
            permits: u32::try_from(n("PERMITS")).expect("PERMITS fits u32"),
            rw: n("RW") == 1,
            election: n("ELECTION") == 1,
            seed: n("SEED"),
        }
    }
}

/// The lock client a worker (or a scenario's client) uses.
pub fn client(urls: &[String], ttl: Duration, node_timeout: Duration, quarantine: bool) -> Redlock {
    client_with_ceiling(urls, ttl, node_timeout, quarantine, None)
}

/// [`client`] with the deployment's TTL ceiling (`None`: the library's default).
pub fn client_with_ceiling(
    urls: &[String],
    ttl: Duration,
    node_timeout: Duration,
    quarantine: bool,
    ceiling: Option<Duration>,
) -> Redlock {
    let builder = Redlock::builder()
        .nodes(urls)
        .node_timeout(node_timeout)
        .retry_delay(Duration::from_millis(5))
        .max_retry_delay(Duration::from_millis(50))
        .default_ttl(ttl)
        .restart_quarantine(quarantine);
    match ceiling {
        Some(ceiling) => builder.ttl_ceiling(ceiling),
        None => builder,
    }
    .build()
    .expect("valid lock configuration")
}

/// A multiplexed connection to the counter store with generous timeouts (the store is never
/// faulted; a slow answer from a loaded machine must not fail a run).
/// Awaits `request`, with a fencing token (through the fenced API) when `fencing`.
pub async fn acquire(
    request: LockRequest,
    fencing: bool,
) -> quorum_lock::Result<(LockGuard, Option<u64>)> {
    if fencing {
        let (guard, token) = request.fenced().await?.into_parts();
        Ok((guard, Some(token.get())))
    } else {
        Ok((request.await?, None))
    }
}

/// The read lock (`reader`) or the write lock of the read-write lock `name`, as a guard.
async fn take_side(
    redlock: &Redlock,
    name: &str,
    reader: bool,
    fenced: bool,
    (ttl, wait): (Duration, Duration),
) -> quorum_lock::Result<(LockGuard, Option<u64>)> {
    let rwlock = redlock.rwlock(name)?;
    if reader {
        return Ok((rwlock.read(ttl).wait(wait).await?.into_guard(), None));
    }
    acquire(rwlock.write(ttl).wait(wait), fenced).await
}

/// A term of the election `name` for worker `id`, as the guard of its lock and its epoch.
async fn campaign(
    redlock: &Redlock,
    name: &str,
    id: u32,
    (ttl, wait): (Duration, Duration),
) -> quorum_lock::Result<(LockGuard, Option<u64>)> {
    let campaign = redlock
        .election(name)?
        .campaign(format!("worker-{id}"), ttl);
    let (guard, epoch) = campaign.wait(wait).await?.into_parts();
    Ok((guard, Some(epoch.get())))
}

/// One of `permits` permits of the semaphore `name`, as the guard of its slot lock.
async fn take_permit(
    redlock: &Redlock,
    name: &str,
    permits: u32,
    ttl: Duration,
    wait: Duration,
) -> quorum_lock::Result<(LockGuard, Option<u64>)> {
    let permit = redlock.semaphore(name, permits)?.acquire(ttl).wait(wait);
    Ok((permit.await?.into_guard(), None))
}

/// `INCR` of the counter, as a semaphore's holder writes it (several write at once).
async fn increment(store: &mut redis::aio::MultiplexedConnection, counter: &str) -> Write {
    let sent = clock::now();
    let value: i64 = store.incr(counter, 1).await.expect("INCR on the store");
    Write {
        sent,
        acked: clock::now(),
        accepted: true,
        value,
    }
}

pub async fn store_conn(url: &str) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(5)));
    redis::Client::open(url)
        .unwrap_or_else(|e| panic!("store client {url}: {e}"))
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap_or_else(|e| panic!("connect to store {url}: {e}"))
}

/// Why a `lock()` call gave up, in one word.
pub fn failure_kind(e: &Error) -> String {
    let last = match e {
        Error::Timeout { last, .. } => last.as_ref(),
        other => other,
    };
    let kept_out = last.report().is_some_and(|r| r.quarantined() > 0);
    match last {
        Error::Contended { .. } if kept_out => "contended+kept-out".into(),
        Error::Contended { .. } => "contended".into(),
        Error::Unavailable { .. } if kept_out => "kept-out".into(),
        Error::Unavailable { .. } => "unavailable".into(),
        Error::ValiditySpent { .. } => "validity-spent".into(),
        other => format!("{other}").replace(' ', "_"),
    }
}

/// Writes `value` to the counter: plain `SET`, or `fenced_set` with `token`. Returns
/// whether the storage accepted it.
pub async fn write_counter(
    store: &mut redis::aio::MultiplexedConnection,
    resource: &str,
    counter: &str,
    token: Option<u64>,
    value: i64,
) -> bool {
    match token {
        Some(token) => fencing::fenced_set(store, resource, token, counter, value)
            .await
            .expect("fenced_set on the store"),
        None => {
            let () = store.set(counter, value).await.expect("SET on the store");
            true
        }
    }
}

pub async fn read_counter(store: &mut redis::aio::MultiplexedConnection, counter: &str) -> i64 {
    let v: Option<i64> = store.get(counter).await.expect("GET on the store");
    v.unwrap_or(0)
}

/// Outcome of a release, in one word.
pub fn release_kind(r: &quorum_lock::Result<quorum_lock::NodeReport>) -> &'static str {
    match r {
        Ok(_) => "ok",
        Err(Error::NotHeld { .. }) => "not-held",
        Err(e) if e.is_unavailable() => "unavailable",
        Err(_) => "error",
    }
}

/// Entry point of a worker process; does nothing unless started by [`Workers::spawn`].
pub fn worker_main() {
    let Ok(id) = std::env::var("QLF_WORKER") else {
        return;
    };
    let id: u32 = id.parse().expect("QLF_WORKER is a number");
    let out = PathBuf::from(std::env::var("QLF_OUT").expect("QLF_OUT"));
    let spec = WorkerSpec::from_env();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("worker runtime");
    rt.block_on(run_worker(id, &spec, out));
}

async fn run_worker(id: u32, spec: &WorkerSpec, out: PathBuf) {
    let _ = clock::now(); // take the clock anchor before anything else
    let mut out = File::create(&out).unwrap_or_else(|e| panic!("create {}: {e}", out.display()));
    let mut emit = |line: String| {
        out.write_all(format!("{line}\n").as_bytes())
            .expect("write record");
    };
    let ttl = spec.ttl_of(id);
    let fenced = spec.fenced(id);
    let redlock = client_with_ceiling(
        &spec.urls,
        ttl,
        spec.node_timeout,
        spec.quarantine,
        spec.ttl_ceiling,
    );
    let mut store = store_conn(&spec.store_url).await;
    let mut rng = Rng::new(spec.seed ^ (u64::from(id) << 32));
    // Anything closer than this to the deadline is not started: the holder stops in time.
    let margin = (ttl / 4).min(Duration::from_millis(500));
    // The parent may end the run before `stop_at` (a run whose length depends on how fast
    // restarted nodes are readmitted) by creating this file.
    let stop_file = std::env::var_os("QLF_STOP").map(PathBuf::from);
    let stopped = || stop_file.as_ref().is_some_and(|f| f.exists());
    // While the parent's pause file exists no `lock()` call starts; this worker says it is
    // idle by creating its own acknowledgement file, and removes it when it goes on. The
    // client stays alive meanwhile (its background work goes on).
    let pause_file = std::env::var_os("QLF_PAUSE").map(PathBuf::from);
    let ack_file = std::env::var_os("QLF_PAUSED").map(PathBuf::from);
    let paused = || pause_file.as_ref().is_some_and(|f| f.exists());
    let mut acked = false;

    tokio::time::sleep_until(clock::instant_of(spec.start_at).into()).await;
    let mut seq = 0u32;
    let mut increments = 0u64;
    while clock::now() < spec.stop_at && increments < spec.max_increments && !stopped() {
        if let Some(ack) = &ack_file {
            if paused() {
                if !acked {
                    File::create(ack).unwrap_or_else(|e| panic!("create {}: {e}", ack.display()));
                    acked = true;
                }
                tokio::time::sleep(PAUSE_POLL).await;
                continue;
            }
            if acked {
                fs::remove_file(ack).unwrap_or_else(|e| panic!("remove {}: {e}", ack.display()));
                acked = false;
            }
        }
        seq += 1;
        let start = clock::now();
        if !spec.use_lock {
            // Control run: the same read-modify-write with no lock at all.
            let v = read_counter(&mut store, &spec.counter).await;
            tokio::time::sleep(Duration::from_millis(rng.between(1, 3))).await;
            let sent = clock::now();
            write_counter(&mut store, &spec.resource, &spec.counter, None, v + 1).await;
            let acked = clock::now();
            increments += 1;
            emit(
                Hold {
                    worker: id,
                    seq,
                    start,
                    acquired: start,
                    deadline: acked + 60_000_000_000,
                    read: Some(start),
                    write: Some(Write {
                        sent,
                        acked,
                        accepted: true,
                        value: v + 1,
                    }),
                    end: acked,
                    released: acked,
                    token: None,
                    release: "none".into(),
                }
                .to_line(),
            );
            tokio::time::sleep(Duration::from_millis(rng.between(0, 4))).await;
            continue;
        }
        let left = Duration::from_nanos(spec.stop_at.saturating_sub(start));
        let wait = spec.lock_wait.min(left);
        let reader = spec.rw && is_reader(id);
        let acquired = match (spec.permits, spec.rw) {
            _ if spec.election => campaign(&redlock, &spec.resource, id, (ttl, wait)).await,
            (0, false) => acquire(redlock.lock(&spec.resource, ttl).wait(wait), fenced).await,
            (0, true) => take_side(&redlock, &spec.resource, reader, fenced, (ttl, wait)).await,
            (k, _) => take_permit(&redlock, &spec.resource, k, ttl, wait).await,
        };
        let (guard, token) = match acquired {
            Ok(held) => held,
            Err(e) => {
                emit(
                    Failure {
                        worker: id,
                        start,
                        end: clock::now(),
                        why: failure_kind(&e),
                    }
                    .to_line(),
                );
                continue;
            }
        };
        let acquired = clock::now();
        let deadline = clock::at_tokio(guard.deadline());
        let remaining = || {
            guard
                .deadline()
                .saturating_duration_since(tokio::time::Instant::now())
        };
        let mut read = None;
        let mut write = None;
        if reader {
            // A reader only reads: its hold is what the checker judges.
            read = Some(clock::now());
            read_counter(&mut store, &spec.counter).await;
            tokio::time::sleep(Duration::from_millis(rng.between(1, 3))).await;
        } else if remaining() > margin && spec.permits > 0 {
            write = Some(increment(&mut store, &spec.counter).await);
            increments += 1;
        } else if remaining() > margin {
            read = Some(clock::now());
            let v = read_counter(&mut store, &spec.counter).await;
            tokio::time::sleep(Duration::from_millis(rng.between(1, 3))).await;
            if remaining() > margin {
                let sent = clock::now();
                let accepted =
                    write_counter(&mut store, &spec.resource, &spec.counter, token, v + 1).await;
                let acked = clock::now();
                if accepted {
                    increments += 1;
                }
                write = Some(Write {
                    sent,
                    acked,
                    accepted,
                    value: v + 1,
                });
            }
        }
        let end = clock::now();
        let release = release_kind(&guard.release().await);
        emit(
            Hold {
                worker: id,
                seq,
                start,
                acquired,
                deadline,
                read,
                write,
                end,
                released: clock::now(),
                token,
                release: release.into(),
            }
            .to_line(),
        );
        tokio::time::sleep(Duration::from_millis(rng.between(0, 8))).await;
    }
    emit(
        Done {
            worker: id,
            increments,
            clock_err: clock::uncertainty_ns(),
            clock_step: clock::step_ns(),
        }
        .to_line(),
    );
}

/// How often a paused worker checks whether it may go on.
const PAUSE_POLL: Duration = Duration::from_millis(10);

/// The parent's handle on a set of worker processes; kills and reaps them when dropped.
pub struct Workers {
    children: Vec<Child>,
    /// The workers' ids, in the order of `children`.
    ids: Vec<u32>,
    dir: PathBuf,
}

impl Workers {
    /// Starts `count` workers running `spec`, by re-executing this test binary with
    /// `--exact <test_name> --ignored`.
    pub fn spawn(test_name: &str, spec: &WorkerSpec, count: usize) -> Workers {
        Self::spawn_ids(test_name, spec, 1..=count as u32)
    }

    /// [`spawn`](Self::spawn) with these worker ids (a run that starts new workers after
    /// earlier ones ended numbers them on, so their records stay apart; the id also picks
    /// the TTL and the lock kind).
    pub fn spawn_ids(
        test_name: &str,
        spec: &WorkerSpec,
        ids: std::ops::RangeInclusive<u32>,
    ) -> Workers {
        let dir = std::env::temp_dir().join(crate::common::unique("quorum-lock-faults"));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        let exe = std::env::current_exe().expect("current_exe");
        let mut workers = Workers {
            children: Vec::new(),
            ids: Vec::new(),
            dir,
        };
        for id in ids {
            let stderr = File::create(workers.dir.join(format!("w{id}.err"))).expect("stderr file");
            let child = Command::new(&exe)
                .args(["--exact", test_name, "--ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .envs(spec.to_env())
                .env("QLF_WORKER", id.to_string())
                .env("QLF_OUT", workers.dir.join(format!("w{id}.log")))
                .env("QLF_STOP", workers.dir.join("stop"))
                .env("QLF_PAUSE", workers.dir.join("pause"))
                .env("QLF_PAUSED", workers.dir.join(format!("paused-w{id}")))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .unwrap_or_else(|e| panic!("spawn worker {id}: {e}"));
            workers.children.push(child);
            workers.ids.push(id);
        }
        workers
    }

    /// Asks every worker to start no new `lock()` call until [`resume`](Self::resume), and
    /// returns once each one is idle (it finished its current call and hold) or has
    /// exited; panics after `limit`.
    pub fn pause(&mut self, limit: Duration) {
        let path = self.dir.join("pause");
        File::create(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
        let start = Instant::now();
        loop {
            let mut idle = true;
            for (child, id) in self.children.iter_mut().zip(&self.ids) {
                let exited = child.try_wait().expect("try_wait on a worker").is_some();
                idle &= exited || self.dir.join(format!("paused-w{id}")).exists();
            }
            if idle {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "workers not idle {limit:?} after the pause\n{}",
                self.stderr_tails()
            );
            std::thread::sleep(PAUSE_POLL);
        }
    }

    /// Lets paused workers go on (each within [`PAUSE_POLL`]).
    pub fn resume(&self) {
        let path = self.dir.join("pause");
        fs::remove_file(&path).unwrap_or_else(|e| panic!("remove {}: {e}", path.display()));
    }

    /// The records the workers have written so far (complete lines only), while they run.
    pub fn snapshot(&self) -> History {
        let mut history = History::default();
        for id in &self.ids {
            let text = fs::read_to_string(self.dir.join(format!("w{id}.log"))).unwrap_or_default();
            let complete = text.rfind('\n').map_or("", |end| &text[..end]);
            parse(complete, &mut history);
        }
        history
    }

    /// Asks every worker to stop starting new `lock()` calls (each finishes its current
    /// hold first).
    pub fn stop(&self) {
        let path = self.dir.join("stop");
        File::create(&path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    }

    /// Waits for every worker (at most `limit`), checks they all succeeded and returns
    /// their records.
    pub fn wait(mut self, limit: Duration) -> History {
        let start = Instant::now();
        let mut status = vec![None; self.children.len()];
        while status.iter().any(Option::is_none) {
            for (i, child) in self.children.iter_mut().enumerate() {
                if status[i].is_none() {
                    status[i] = child.try_wait().expect("try_wait on a worker");
                }
            }
            if start.elapsed() > limit {
                for child in &mut self.children {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                panic!(
                    "workers still running after {limit:?}\n{}",
                    self.stderr_tails()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let failed: Vec<u32> = (status.iter().zip(&self.ids))
            .filter(|(s, _)| !s.is_some_and(|s| s.success()))
            .map(|(_, &id)| id)
            .collect();
        assert!(
            failed.is_empty(),
            "worker(s) {failed:?} failed\n{}",
            self.stderr_tails()
        );
        let mut history = History::default();
        for id in &self.ids {
            let path = self.dir.join(format!("w{id}.log"));
            let text = fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            parse(&text, &mut history);
        }
        assert_eq!(
            history.done.len(),
            self.children.len(),
            "every worker wrote its closing line"
        );
        history
    }

    fn stderr_tails(&self) -> String {
        (self.ids.iter())
            .map(|id| {
                let text =
                    fs::read_to_string(self.dir.join(format!("w{id}.err"))).unwrap_or_default();
                let lines: Vec<&str> = text.lines().collect();
                format!(
                    "--- worker {id} stderr ---\n{}",
                    lines[lines.len().saturating_sub(20)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}
