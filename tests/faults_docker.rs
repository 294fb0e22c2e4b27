//! Fault-injection suite, Docker tier: five Redis containers on a private bridge network
//! (`docker/docker-compose.yml`), faults through the engine (`docker/fault.sh`): pause,
//! kill and start (with and without AOF), network disconnect and reconnect with the same
//! address, packet drops inside a node's network namespace (root only), and latency through
//! the user-space proxy; then three members under Sentinel in containers of their own
//! (`faults_docker/sentinel.rs`), a master's process or its whole host (with the sentinel
//! on it) stalled until its replica is promoted; and three members that are Redis Clusters
//! (`faults_docker/cluster.rs`), a shard master frozen until its cluster promotes its
//! replica, or its locks' slots moved to another master with their keys and back, under
//! long holders. Workers are processes on the host that reach the nodes by container
//! address; the counter lives in a host-local `redis-server` that is never faulted. The
//! member rows' workers lock plain and fenced, and the rows report their live figures:
//! after each fault healed, how soon each kind of lock was granted and how many `lock()`
//! calls were refused, and the longest time without a grant.
//!
//! Runs when `docker info` succeeds; otherwise prints one line saying why it was skipped
//! and passes. Every run uses its own compose project and subnet and always tears them down
//! (also when it fails). `cargo test --test faults_docker -- --nocapture` shows the table.

mod common;
#[path = "faults_docker/cluster.rs"]
mod docker_cluster;
#[path = "faults_docker/sentinel.rs"]
mod docker_sentinel;
#[path = "faults/mod.rs"]
mod kit;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::RedisServer;
use kit::ensemble::{Cut, Ensemble, Fault, clock_near};
use kit::history::{self, Row, Verdict};
use kit::nemesis::{self, Expect, FaultGen, NemesisRun, Order, Plan};
use kit::proxy::FaultProxy;
use kit::scenarios::{self, BareMajority, Hit};

const WORKER_TEST: &str = "faults_docker_worker";

#[test]
#[ignore = "child process of the Docker fault-injection runs"]
fn faults_docker_worker() {
    kit::worker::worker_main();
}

fn docker_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docker")
}

/// Runs `program args` under coreutils `timeout`, returning its output; `Err` when it could
/// not be started at all.
fn run(
    program: &str,
    args: &[&str],
    envs: &[(&str, &str)],
    limit: Duration,
) -> Result<Output, String> {
    Command::new("timeout")
        .arg("--kill-after=5")
        .arg(limit.as_secs().to_string())
        .arg(program)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))
}

fn first_line(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output")
        .to_owned()
}

/// Why the Docker tier cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    match run("docker", &["info"], &[], Duration::from_secs(30)) {
        Err(e) => return Some(e),
        Ok(out) if out.status.code() == Some(127) => {
            return Some("docker CLI not found".into());
        }
        Ok(out) if !out.status.success() => {
            return Some(format!("`docker info` failed: {}", first_line(&out.stderr)));
        }
        Ok(_) => {}
    }
    let v1 = run("docker-compose", &["version"], &[], Duration::from_secs(30));
    let v2 = run(
        "docker",
        &["compose", "version"],
        &[],
        Duration::from_secs(30),
    );
    if !v1.is_ok_and(|o| o.status.success()) && !v2.is_ok_and(|o| o.status.success()) {
        return Some("neither docker-compose nor `docker compose` is available".into());
    }
    None
}

/// Subnets in use by Docker networks and host routes, as text to search.
fn used_subnets() -> String {
    let mut text = String::new();
    if let Ok(out) = run(
        "docker",
        &["network", "ls", "-q"],
        &[],
        Duration::from_secs(30),
    ) {
        let ids = String::from_utf8_lossy(&out.stdout).to_string();
        let mut args = vec![
            "network",
            "inspect",
            "-f",
            "{{range .IPAM.Config}}{{.Subnet}} {{end}}",
        ];
        args.extend(ids.split_whitespace());
        if let Ok(out) = run("docker", &args, &[], Duration::from_secs(30)) {
            text.push_str(&String::from_utf8_lossy(&out.stdout));
        }
    }
    if let Ok(out) = run("ip", &["-4", "route"], &[], Duration::from_secs(10)) {
        text.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    text
}

/// The five-node compose ensemble of one test run.
struct DockerEnsemble {
    project: String,
    prefix: String,
    proxies: Vec<FaultProxy>,
    drops: Result<(), String>,
    clocks: Result<(), String>,
}

impl DockerEnsemble {
    /// Brings up a fresh project on a free subnet.
    fn up() -> DockerEnsemble {
        let project = format!("qlfaults{}", std::process::id());
        let used = used_subnets();
        let mut errors = Vec::new();
        for k in 0..150u32 {
            let prefix = format!("172.29.{}", 100 + (std::process::id() + k) % 150);
            if used.contains(&format!("{prefix}.")) {
                continue;
            }
            let ens = DockerEnsemble {
                project: project.clone(),
                prefix,
                proxies: Vec::new(),
                drops: Ok(()),
                clocks: Ok(()),
            };
            match ens.fault_sh(&["up", "clock"], Duration::from_secs(180)) {
                Ok(_) => return ens,
                // `ens` is dropped here: `fault.sh down` removes whatever was created.
                Err(e) => errors.push(e),
            }
            if errors.len() >= 3 {
                break;
            }
        }
        panic!(
            "cannot bring up the Docker ensemble:\n{}",
            errors.join("\n")
        );
    }

    fn envs(&self) -> [(&str, &str); 2] {
        [
            ("COMPOSE_PROJECT_NAME", self.project.as_str()),
            ("QL_NET_PREFIX", self.prefix.as_str()),
        ]
    }

    fn fault_sh(&self, args: &[&str], limit: Duration) -> Result<String, String> {
        let script = docker_dir().join("fault.sh");
        let out = run(
            script.to_str().expect("utf-8 path"),
            args,
            &self.envs(),
            limit,
        )?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "fault.sh {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    fn must(&self, args: &[&str]) {
        if let Err(e) = self.fault_sh(args, Duration::from_secs(120)) {
            panic!("{e}");
        }
    }

    fn ip(&self, i: usize) -> String {
        format!("{}.{}", self.prefix, 11 + i)
    }

    /// Recreates the nodes with or without the AOF override (data is lost either way).
    fn recreate(&mut self, persist: bool) {
        if persist {
            self.must(&["up", "persist", "clock"]);
        } else {
            self.must(&["up", "clock"]);
        }
    }

    /// Clients go through a latency proxy per node (on the host) from now on, or not.
    fn use_proxies(&mut self, on: bool) {
        self.proxies.clear();
        if on {
            self.proxies = (0..5)
                .map(|i| {
                    let addr: SocketAddr = format!("{}:6379", self.ip(i)).parse().expect("address");
                    FaultProxy::start(addr)
                })
                .collect();
        }
    }

    /// Whether `iptables` works inside a node's namespace (root, iptables, nsenter).
    fn probe_drops(&mut self) {
        self.drops = self
            .fault_sh(&["undrop", "1"], Duration::from_secs(30))
            .map(|_| ());
    }

    /// Moves node `i`'s clock to `offset_ms` from real time and waits until it shows.
    fn set_clock(&self, i: usize, offset_ms: i64) -> Result<(), String> {
        let n = (i + 1).to_string();
        self.fault_sh(
            &["clock", &n, &offset_ms.to_string()],
            Duration::from_secs(30),
        )?;
        let url = self.admin_url(i);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if clock_near(&url, offset_ms as f64) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "n{n}'s clock did not move to {offset_ms} ms (is the clockshift shim in the image? \
             it needs `cc` when docker/build-image.sh runs)"
        ))
    }

    /// Whether clock jumps work (the image has the shim).
    fn probe_clocks(&mut self) {
        self.clocks = self.set_clock(0, 3_000).and_then(|()| self.set_clock(0, 0));
    }
}

impl Drop for DockerEnsemble {
    fn drop(&mut self) {
        self.proxies.clear();
        if let Err(e) = self.fault_sh(&["down"], Duration::from_secs(180)) {
            eprintln!("docker tier teardown: {e}");
        }
    }
}

impl Ensemble for DockerEnsemble {
    fn size(&self) -> usize {
        5
    }

    fn client_urls(&self) -> Vec<String> {
        if self.proxies.is_empty() {
            (0..5).map(|i| self.admin_url(i)).collect()
        } else {
            self.proxies.iter().map(FaultProxy::url).collect()
        }
    }

    fn admin_url(&self, i: usize) -> String {
        format!("redis://{}:6379", self.ip(i))
    }

    fn supports(&self, fault: &Fault) -> bool {
        match fault {
            Fault::Pause | Fault::Kill | Fault::Partition(Cut::Silent) => true,
            Fault::Partition(Cut::Reset) | Fault::Failover | Fault::HostStall | Fault::SlotMove => {
                false
            }
            Fault::Drop => self.drops.is_ok(),
            Fault::ClockJump(_) => self.clocks.is_ok(),
            Fault::Delay(_) => !self.proxies.is_empty(),
        }
    }

    fn inject(&mut self, i: usize, fault: &Fault) {
        let n = (i + 1).to_string();
        match fault {
            Fault::Pause => self.must(&["pause", &n]),
            Fault::Kill => self.must(&["kill", &n]),
            Fault::Partition(_) => self.must(&["disconnect", &n]),
            Fault::Drop => self.must(&["drop", &n]),
            Fault::Delay(d) => self.proxies[i].set_delay(*d),
            Fault::ClockJump(d) => {
                if let Err(e) = self.set_clock(i, d.as_millis() as i64) {
                    panic!("{e}");
                }
            }
            Fault::Failover | Fault::HostStall | Fault::SlotMove => {
                panic!("the five-node ensemble has no members to fail over or reshard")
            }
        }
    }

    fn heal(&mut self, i: usize, fault: &Fault) {
        let n = (i + 1).to_string();
        match fault {
            Fault::Pause => self.must(&["unpause", &n]),
            Fault::Kill => self.must(&["start", &n]),
            Fault::Partition(_) => self.must(&["connect", &n]),
            Fault::Drop => self.must(&["undrop", &n]),
            Fault::Delay(_) => self.proxies[i].set_delay(Duration::ZERO),
            Fault::ClockJump(_) => {
                if let Err(e) = self.set_clock(i, 0) {
                    panic!("{e}");
                }
            }
            Fault::Failover | Fault::HostStall | Fault::SlotMove => {}
        }
    }
}

fn minority(fault: FaultGen) -> Plan {
    Plan {
        faults: vec![fault],
        nodes: (1, 2),
        hold: (Duration::from_millis(800), Duration::from_millis(1500)),
        gap: (Duration::from_millis(100), Duration::from_millis(400)),
        max_windows: 4,
        order: Order::Random,
        readmit: false,
    }
}

/// A run of silent faults (packets lost, not refused: a partition, or a killed container
/// whose address is gone). After such a partition heals, a
/// connection moves again only at its next TCP retransmission, which exponential backoff
/// puts up to about the partition's length later: the healed node stays unreachable that
/// long. Two partitions of different minorities in quick succession would then cut off a
/// majority for a moment (a liveness effect, not a safety one), so these runs leave at
/// least as long a gap as a fault lasts, and run 8 s to fit two or three faults.
fn silent(mut run: NemesisRun) -> NemesisRun {
    run.run_for = Duration::from_secs(8);
    if let Some(plan) = run.plan.as_mut() {
        plan.gap = (plan.hold.1, plan.hold.1 + Duration::from_millis(500));
    }
    run
}

/// Three members under Sentinel, each in turn stalled until the sentinels promote its
/// replica, the next one once a client has readmitted the promoted master: n1's and n3's
/// master process alone, n2's whole host, the sentinel on it too, so that two sentinels
/// must make the majority. Plain and fenced workers, quarantine on. The promoted master may
/// lack the last locks: it is kept out for the longest TTL and the confirmation window
/// while the two other members carry on, and the thawed old master, a master until the
/// sentinels turn it into a replica (and named by its thawed sentinel until that one hears
/// of the promotion), gets no vote. `readmitted-after` is how long after the promotion a
/// member voted again.
fn sentinel_failovers() -> NemesisRun {
    let plan = Plan {
        faults: vec![FaultGen::InTurn(vec![Fault::Failover, Fault::HostStall])],
        nodes: (1, 1),
        hold: (Duration::from_millis(2000), Duration::from_millis(2500)),
        gap: (Duration::from_millis(300), Duration::from_millis(600)),
        max_windows: usize::MAX,
        order: Order::Rolling,
        readmit: true,
    };
    let mut run = NemesisRun::new(
        "docker members under Sentinel: a master or its host stalled until the replica is promoted",
        Some(plan),
        Expect::SafeAndLive,
    )
    .mixed();
    // Each member takes about 7 s: 3-4 s to be found silent and replaced, the hold, and
    // its readmission 2.6 s after the promotion.
    run.run_for = Duration::from_secs(24);
    run
}

/// Three members that are Redis Clusters, random ones in turn with the master of the
/// locks' slots frozen until its cluster promotes the replica, then thawed, or with those
/// slots moved to another master with their keys, and back; plain and fenced workers,
/// quarantine on. The promoted master may lack the last locks: it is kept out for the
/// longest TTL and the confirmation window while the two other members carry on, and the
/// thawed old master, a master until it hears of the promotion, gets no vote. A moved
/// slot's held locks follow it: their extensions and releases, redirected, go to the new
/// owner; long holders of every kind, taken before each move with the workers' TTL, are
/// checked for it once the move is undone (`DockerClusterMembers::witness_moves`).
fn cluster_faults() -> NemesisRun {
    let plan = Plan {
        faults: vec![FaultGen::InTurn(vec![Fault::Failover, Fault::SlotMove])],
        nodes: (1, 1),
        hold: (Duration::from_millis(2000), Duration::from_millis(2500)),
        gap: (Duration::from_millis(2500), Duration::from_millis(3000)),
        max_windows: 4,
        order: Order::Rolling,
        readmit: false,
    };
    let mut run = NemesisRun::new(
        "docker Cluster members: a master stalled until its replica is promoted, or its slots moved",
        Some(plan),
        Expect::SafeAndLive,
    )
    .mixed();
    // A failover takes about 8 s: 2-3 s to be found silent and replaced, the hold, and the
    // gap in which the promoted master is readmitted; a slot move about 5 s.
    run.run_for = Duration::from_secs(31);
    run
}

/// The Cluster row on containers of its own, beside [`docker_tier`]'s five nodes, with
/// long holders across each slot move.
#[test]
fn docker_cluster_members() {
    run_member_row(
        "Cluster members, 12 containers",
        || {
            let run = cluster_faults();
            let members = docker_cluster::DockerClusterMembers::up()?;
            Ok(members.witness_moves(run.longest_ttl(), run.node_timeout))
        },
        &cluster_faults(),
        docker_cluster::DockerClusterMembers::report_witnesses,
    );
}

/// Runs `run` on members that `up` brings up in containers of their own (skipped, saying
/// why, without a Docker engine), lets `finish` add what the members saw to the row, and
/// reports the row as `what`.
fn run_member_row<E: Ensemble>(
    what: &str,
    up: fn() -> Result<E, String>,
    run: &NemesisRun,
    finish: fn(&mut E, &mut Row),
) {
    if let Some(reason) = unavailable() {
        let _ = writeln!(std::io::stderr(), "docker {what} skipped: {reason}");
        return;
    }
    let _engine = engine();
    build_image();
    let began = Instant::now();
    let store = RedisServer::start();
    let base = kit::rng::seed();
    let mut members = up().unwrap_or_else(|e| panic!("cannot bring up the {what}: {e}"));
    let mut row = nemesis::run(&mut members, &store, WORKER_TEST, run, base);
    finish(&mut members, &mut row);
    drop(members);
    history::report(
        &format!(
            "docker tier: 3 {what} ({:.0} s with up and down) [QL_FAULTS_SEED={base}]",
            began.elapsed().as_secs_f64()
        ),
        &[row],
    );
}

/// The tests of this binary use the Docker engine one at a time: rows measured while the
/// other test's containers start, fail and stop would be measured on a busier machine.
fn engine() -> std::sync::MutexGuard<'static, ()> {
    static ENGINE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ENGINE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Builds the tier's image (`docker/build-image.sh`) once for the tests of this binary,
/// which run at once, or panics saying why it failed.
fn build_image() {
    static BUILT: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let script = docker_dir().join("build-image.sh");
        let build = run(
            script.to_str().expect("utf-8 path"),
            &[],
            &[],
            Duration::from_secs(300),
        )?;
        if build.status.success() {
            Ok(())
        } else {
            Err(format!(
                "docker/build-image.sh failed:\n{}{}",
                String::from_utf8_lossy(&build.stdout),
                String::from_utf8_lossy(&build.stderr)
            ))
        }
    });
    if let Err(e) = built {
        panic!("{e}");
    }
}

/// The Sentinel row on containers of its own, beside [`docker_tier`]'s five nodes.
#[test]
fn docker_sentinel_members() {
    run_member_row(
        "members under Sentinel, 6 containers",
        docker_sentinel::DockerSentinelMembers::up,
        &sentinel_failovers(),
        |_, _| {},
    );
}

#[test]
fn docker_tier() {
    if let Some(reason) = unavailable() {
        // Straight to stderr, past the test harness's capture: always visible.
        let _ = writeln!(std::io::stderr(), "docker tier skipped: {reason}");
        return;
    }
    let _engine = engine();
    let began = Instant::now();
    build_image();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store = RedisServer::start();
    let mut ens = DockerEnsemble::up();
    if let Err(e) = redis::Client::open(ens.admin_url(0))
        .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(3)))
    {
        drop(ens);
        let _ = writeln!(
            std::io::stderr(),
            "docker tier skipped: container addresses are not reachable from this host ({e})"
        );
        return;
    }
    ens.probe_drops();
    ens.probe_clocks();
    let base = kit::rng::seed();
    let mut seed = base;
    let mut next_seed = || {
        seed += 1;
        seed
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    // The rows under `every_row` inject faults the portable tier injects too (a paused or
    // restarted server process, the user-space proxy): they run with QL_FAULTS_DOCKER_ALL=1.
    let every_row = std::env::var("QL_FAULTS_DOCKER_ALL").is_ok_and(|v| v == "1");
    if !every_row {
        skipped.push(
            "rows of faults the portable tier also injects skipped (QL_FAULTS_DOCKER_ALL=1 runs them)"
                .to_owned(),
        );
    }

    // First, on the fresh ensemble: nodes without persistence restarted empty (`docker
    // kill` / `docker start`), restart quarantine and fencing on, workers with 1 s and 3 s
    // TTLs. The rolling run (every row) follows on the nodes the first run restarted: tokens
    // carry a clock component, so fencing stays live and ordered through both runs.
    rows.push(nemesis::run(
        &mut ens,
        &store,
        WORKER_TEST,
        &nemesis::minority_empty_restarts("docker kill+start minority (empty, quarantine)"),
        next_seed(),
    ));
    if every_row {
        rows.push(nemesis::run(
            &mut ens,
            &store,
            WORKER_TEST,
            &nemesis::rolling_empty_restart("docker rolling kill+start, every node (empty)"),
            next_seed(),
        ));
        rows.push(nemesis::run(
            &mut ens,
            &store,
            WORKER_TEST,
            &NemesisRun::new(
                "docker pause minority",
                Some(minority(FaultGen::Fixed(Fault::Pause))),
                Expect::SafeAndLive,
            ),
            next_seed(),
        ));
        rows.push(nemesis::run(
            &mut ens,
            &store,
            WORKER_TEST,
            &NemesisRun::new(
                "semaphore (2 permits): docker pause minority",
                Some(minority(FaultGen::Fixed(Fault::Pause))),
                Expect::SafeAndLive,
            )
            .permits(2)
            .workers(5),
            next_seed(),
        ));
        rows.push(nemesis::run(
            &mut ens,
            &store,
            WORKER_TEST,
            &NemesisRun::new(
                "read-write lock (3 writers, 2 readers): docker pause minority",
                Some(minority(FaultGen::Fixed(Fault::Pause))),
                Expect::SafeAndLive,
            )
            .read_write()
            .workers(5),
            next_seed(),
        ));
    }
    rows.push(nemesis::run(
        &mut ens,
        &store,
        WORKER_TEST,
        &silent(
            NemesisRun::new(
                "network disconnect minority",
                Some(minority(FaultGen::Fixed(Fault::Partition(Cut::Silent)))),
                Expect::SafeAndLive,
            )
            .fencing(true),
        ),
        next_seed(),
    ));
    match &ens.drops {
        Ok(()) => rows.push(nemesis::run(
            &mut ens,
            &store,
            WORKER_TEST,
            &silent(NemesisRun::new(
                "iptables DROP minority",
                Some(minority(FaultGen::Fixed(Fault::Drop))),
                Expect::SafeAndLive,
            )),
            next_seed(),
        )),
        Err(e) => skipped.push(format!("packet drops skipped: {e}")),
    }
    if every_row {
        ens.use_proxies(true);
        rows.push(nemesis::run(
            &mut ens,
            &store,
            WORKER_TEST,
            &NemesisRun::new(
                "latency above timeout (proxy)",
                Some(minority(FaultGen::Delay {
                    lo: nemesis::NODE_TIMEOUT + Duration::from_millis(100),
                    hi: nemesis::NODE_TIMEOUT * 3,
                })),
                Expect::SafeAndLive,
            )
            .fencing(true),
            next_seed(),
        ));
        ens.use_proxies(false);
        rows.push(nemesis::run(
            &mut ens,
            &store,
            WORKER_TEST,
            &NemesisRun::new(
                "docker pause majority",
                Some(Plan {
                    faults: vec![FaultGen::Fixed(Fault::Pause)],
                    nodes: (3, 3),
                    hold: (Duration::from_millis(1000), Duration::from_millis(1500)),
                    gap: (Duration::from_millis(500), Duration::from_millis(800)),
                    max_windows: 2,
                    order: Order::Random,
                    readmit: false,
                }),
                Expect::SafeAndBlocked,
            ),
            next_seed(),
        ));
    }
    let case = |name: &str, hit: Hit, b_quarantine: bool, b_acquires: bool, want| BareMajority {
        name: name.to_owned(),
        hit,
        b_quarantine,
        fencing: false,
        b_acquires,
        want,
    };
    if every_row {
        rows.push(scenarios::bare_majority(
            &rt,
            &mut ens,
            &store,
            &case("(a) n3 paused", Hit::Pause, false, false, Verdict::Safe),
        ));
        rows.push(scenarios::bare_majority(
            &rt,
            &mut ens,
            &store,
            &case(
                "(c) n3 killed+started empty, no quarantine",
                Hit::KillRestart,
                false,
                true,
                Verdict::Unsafe,
            ),
        ));
        rows.push(scenarios::bare_majority(
            &rt,
            &mut ens,
            &store,
            &case(
                "(c) n3 killed+started empty, quarantine",
                Hit::KillRestart,
                true,
                false,
                Verdict::Safe,
            ),
        ));
    }

    match &ens.clocks {
        Ok(()) => {
            let jump = Hit::ClockJump(scenarios::TTL + Duration::from_secs(2));
            let jump_secs = (scenarios::TTL + Duration::from_secs(2)).as_secs();
            rows.push(scenarios::bare_majority(
                &rt,
                &mut ens,
                &store,
                &case(
                    &format!("(d) n3 clock +{}s, no fencing", jump_secs),
                    jump.clone(),
                    false,
                    true,
                    Verdict::Unsafe,
                ),
            ));
            rows.push(scenarios::bare_majority(
                &rt,
                &mut ens,
                &store,
                &BareMajority {
                    fencing: true,
                    ..case(
                        &format!("(d) n3 clock +{}s, fencing", jump_secs),
                        jump,
                        false,
                        true,
                        Verdict::Fenced,
                    )
                },
            ));
        }
        Err(e) => skipped.push(format!("clock faults skipped: {e}")),
    }

    // The same nodes with `appendonly yes` / `appendfsync always` in named volumes.
    ens.recreate(true);
    rows.push(nemesis::run(
        &mut ens,
        &store,
        WORKER_TEST,
        &silent(
            NemesisRun::new(
                "docker kill+start minority (AOF)",
                Some(minority(FaultGen::Fixed(Fault::Kill))),
                Expect::SafeAndLive,
            )
            .fencing(true),
        ),
        next_seed(),
    ));
    rows.push(scenarios::bare_majority(
        &rt,
        &mut ens,
        &store,
        &case(
            "(b) n3 killed+started, AOF",
            Hit::KillRestart,
            false,
            false,
            Verdict::Safe,
        ),
    ));
    drop(ens);
    for line in &skipped {
        let _ = writeln!(std::io::stderr(), "docker tier: {line}");
    }
    history::report(
        &format!(
            "docker tier: 5 containers, faults through the engine ({:.0} s with build, up and down) [QL_FAULTS_SEED={base}]",
            began.elapsed().as_secs_f64()
        ),
        &rows,
    );
}
