//! Fault-injection suite, portable tier: local `redis-server` processes (no root, no
//! Docker), faults by SIGSTOP/SIGCONT, SIGKILL and restart (with and without persistence),
//! a user-space TCP proxy (latency, silent and resetting partitions) and the clock shim.
//!
//! Workers run in separate OS processes (this binary re-executed), record every hold on one
//! clock, and increment a counter in a Redis that is never faulted; the checker fails a run
//! on overlapping holds, a write after its holder's deadline, or a lost update. Each test
//! prints a table (`cargo test --test faults -- --nocapture`); `docker/README.md` explains
//! the columns. `QL_FAULTS_SEED=<n>` replays the random schedules of a run.

mod common;
#[path = "faults/mod.rs"]
mod kit;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{RedisServer, clockshift_lib, raw_ping};
use kit::cluster_members::ClusterMembers;
use kit::ensemble::{Ensemble, Fault, LocalEnsemble, NodeKind};
use kit::history::{self, Done, History, Hold, Row, Verdict, Write};
use kit::liveness::{self, ReadyBy};
use kit::nemesis::{self, Expect, FaultGen, NemesisRun, Order, Plan};
use kit::proxy::{FaultProxy, Link};
use kit::scenarios::{self, BareMajority, Hit};
use kit::sentinel_members::SentinelMembers;

/// The worker entry point (see `kit::worker`); does nothing when run as an ordinary test.
const WORKER_TEST: &str = "faults_worker";

#[test]
#[ignore = "child process of the fault-injection runs"]
fn faults_worker() {
    kit::worker::worker_main();
}

const PLAIN: NodeKind = NodeKind {
    appendonly: false,
    shifted_clock: false,
};
const PERSISTENT: NodeKind = NodeKind {
    appendonly: true,
    shifted_clock: false,
};

fn minority(faults: Vec<FaultGen>) -> Plan {
    Plan {
        faults,
        nodes: (1, 2),
        hold: (Duration::from_millis(800), Duration::from_millis(1500)),
        gap: (Duration::from_millis(100), Duration::from_millis(400)),
        max_windows: 6,
        order: Order::Random,
        readmit: false,
    }
}

fn majority(faults: Vec<FaultGen>) -> Plan {
    Plan {
        faults,
        nodes: (3, 4),
        hold: (Duration::from_millis(1000), Duration::from_millis(1600)),
        gap: (Duration::from_millis(500), Duration::from_millis(900)),
        max_windows: 3,
        order: Order::Random,
        readmit: false,
    }
}

/// Runs each nemesis run on a fresh five-node ensemble of `kind` (behind proxies) and
/// prints the table.
fn nemesis_table(title: &str, runs: Vec<(NodeKind, NemesisRun)>) {
    let store = RedisServer::start();
    let base = kit::rng::seed();
    let rows: Vec<Row> = runs
        .iter()
        .enumerate()
        .map(|(i, (kind, run))| {
            let mut ens = LocalEnsemble::uniform(5, *kind, true);
            nemesis::run(&mut ens, &store, WORKER_TEST, run, base + i as u64)
        })
        .collect();
    history::report(&format!("{title} [QL_FAULTS_SEED={base}]"), &rows);
}

#[test]
fn nemesis_minority_partition_and_pause() {
    nemesis_table(
        "portable: minority partition and pause (5 nodes, 3 worker processes)",
        vec![
            (
                PLAIN,
                NemesisRun::new("no faults (baseline)", None, Expect::SafeAndLive),
            ),
            (
                PLAIN,
                NemesisRun::new(
                    "minority partition (proxy cut)",
                    Some(minority(vec![FaultGen::AnyCut])),
                    Expect::SafeAndLive,
                )
                .fencing(true),
            ),
            (
                PLAIN,
                NemesisRun::new(
                    "minority pause (SIGSTOP)",
                    Some(minority(vec![FaultGen::Fixed(Fault::Pause)])),
                    Expect::SafeAndLive,
                ),
            ),
        ],
    );
}

#[test]
fn nemesis_minority_latency_and_restarts() {
    let below = Plan {
        nodes: (1, 5),
        ..minority(vec![FaultGen::Delay {
            lo: Duration::from_millis(10),
            hi: nemesis::NODE_TIMEOUT / 4,
        }])
    };
    nemesis_table(
        "portable: latency and restarts (node timeout 200 ms)",
        vec![
            (
                PLAIN,
                NemesisRun::new(
                    "latency below timeout (any nodes)",
                    Some(below),
                    Expect::SafeAndLive,
                ),
            ),
            (
                PLAIN,
                NemesisRun::new(
                    "latency above timeout (minority)",
                    Some(minority(vec![FaultGen::Delay {
                        lo: nemesis::NODE_TIMEOUT + Duration::from_millis(100),
                        hi: nemesis::NODE_TIMEOUT * 3,
                    }])),
                    Expect::SafeAndLive,
                )
                .fencing(true),
            ),
            (
                PERSISTENT,
                NemesisRun::new(
                    "kill+restart minority (AOF)",
                    Some(minority(vec![FaultGen::Fixed(Fault::Kill)])),
                    Expect::SafeAndLive,
                )
                .fencing(true),
            ),
        ],
    );
}

/// A semaphore of two permits taken by five worker processes: a minority partition, a
/// minority pause, and random minority restarts of nodes without persistence (restart
/// quarantine on, TTLs of 1 s and 3 s). Never more than two holders at once, the counter
/// exact, and permits granted again after each fault.
#[test]
fn nemesis_semaphore_holds_at_most_k() {
    let semaphore = |run: NemesisRun| run.permits(2).workers(5);
    let mut restarts = nemesis::minority_empty_restarts("semaphore: minority empty restarts");
    restarts.run_for = nemesis::soak().unwrap_or(Duration::from_secs(7));
    let restarts = restarts.fencing(false);
    nemesis_table(
        "portable: semaphore, 2 permits, 5 worker processes (overlaps: a third holder)",
        vec![
            (
                PLAIN,
                semaphore(NemesisRun::new(
                    "semaphore: minority partition (proxy cut)",
                    Some(minority(vec![FaultGen::AnyCut])),
                    Expect::SafeAndLive,
                )),
            ),
            (
                PLAIN,
                semaphore(NemesisRun::new(
                    "semaphore: minority pause (SIGSTOP)",
                    Some(minority(vec![FaultGen::Fixed(Fault::Pause)])),
                    Expect::SafeAndLive,
                )),
            ),
            (PLAIN, semaphore(restarts)),
        ],
    );
}

/// Leader election under the faults the mutex meets: four candidates in four processes,
/// each term's writes fenced by its epoch (restart quarantine on). Never two leaders at
/// once, epochs strictly increasing, the counter exact, and a leader elected again after
/// each fault.
#[test]
fn nemesis_election_one_leader_at_a_time() {
    let election = |run: NemesisRun| run.election().workers(4);
    let mut restarts = nemesis::minority_empty_restarts("election: minority empty restarts");
    restarts.run_for = nemesis::soak().unwrap_or(Duration::from_secs(7));
    nemesis_table(
        "portable: leader election, 4 candidate processes (overlaps: a second leader)",
        vec![
            (
                PLAIN,
                election(NemesisRun::new(
                    "election: minority partition (proxy cut)",
                    Some(minority(vec![FaultGen::AnyCut])),
                    Expect::SafeAndLive,
                )),
            ),
            (
                PLAIN,
                election(NemesisRun::new(
                    "election: minority pause (SIGSTOP)",
                    Some(minority(vec![FaultGen::Fixed(Fault::Pause)])),
                    Expect::SafeAndLive,
                )),
            ),
            (PLAIN, election(restarts)),
        ],
    );
}

/// The read-write lock under the faults the mutex meets: three writers (read-modify-write,
/// fenced in the restart run) and two readers. Safe with zero overlaps (a writer beside
/// anyone) and strictly increasing writers' tokens; live.
#[test]
fn nemesis_rwlock_writers_exclude_everyone() {
    let rw = |run: NemesisRun| run.read_write().workers(5);
    let mut restarts = nemesis::minority_empty_restarts("rwlock: minority empty restarts");
    restarts.run_for = nemesis::soak().unwrap_or(Duration::from_secs(7));
    nemesis_table(
        "portable: read-write lock, 3 writers and 2 readers (overlaps: a writer beside anyone)",
        vec![
            (
                PLAIN,
                rw(NemesisRun::new(
                    "rwlock: minority partition (proxy cut)",
                    Some(minority(vec![FaultGen::AnyCut])),
                    Expect::SafeAndLive,
                )),
            ),
            (
                PLAIN,
                rw(NemesisRun::new(
                    "rwlock: minority pause (SIGSTOP)",
                    Some(minority(vec![FaultGen::Fixed(Fault::Pause)])),
                    Expect::SafeAndLive,
                )),
            ),
            (PLAIN, rw(restarts)),
        ],
    );
}

/// Nodes without persistence restarted empty with restart quarantine on: random minority
/// restarts and a rolling restart through every node, fencing on, workers with 1 s and 3 s
/// TTLs. Safe with zero overlaps and strictly increasing tokens; progress may pause while
/// restarted nodes are quarantined.
#[test]
fn nemesis_empty_restarts_with_quarantine() {
    nemesis_table(
        "portable: nodes restarted empty, restart quarantine on, fencing, TTL 1 s / 3 s",
        vec![
            (
                PLAIN,
                nemesis::minority_empty_restarts("random minority empty restarts"),
            ),
            (
                PLAIN,
                nemesis::rolling_empty_restart("rolling empty restart, every node"),
            ),
        ],
    );
}

/// Three members under Sentinel (each a master, two replicas and three sentinels), one
/// failed over at a time with `SENTINEL FAILOVER`, twice, while three worker processes
/// lock with fencing and quarantine on (a member must not be used without). The promoted
/// master may lack the last locks: it is kept out for the longest TTL and the sentinels'
/// confirmation window, and the two other members carry on meanwhile. Zero overlaps, the
/// exact count, increasing tokens, and locks granted during the failovers.
#[test]
fn nemesis_sentinel_members_fail_over() {
    let store = RedisServer::start();
    let base = kit::rng::seed();
    let plan = Plan {
        faults: vec![FaultGen::Fixed(Fault::Failover)],
        nodes: (1, 1),
        // About the promoted master's quarantine (TTL 2 s, drift, 0.5 s), the time the
        // member is out; then a replica follows it again, and the next failover comes once
        // it votes again: one member at a time is out.
        hold: (Duration::from_millis(2000), Duration::from_millis(2500)),
        gap: (Duration::from_millis(1500), Duration::from_millis(2000)),
        max_windows: 2,
        order: Order::Random,
        readmit: false,
    };
    let mut run = NemesisRun::new(
        "one member under Sentinel failed over at a time",
        Some(plan),
        Expect::SafeAndLive,
    )
    .fencing(true)
    .quarantine(true);
    run.run_for = Duration::from_secs(16);
    let mut members = SentinelMembers::start(3);
    let row = nemesis::run(&mut members, &store, WORKER_TEST, &run, base);
    history::report(
        &format!("portable: members under Sentinel, failovers [QL_FAULTS_SEED={base}]"),
        &[row],
    );
}

/// Three members that are Redis Clusters (each two shards of a master and a replica), one
/// member at a time failed over with `CLUSTER FAILOVER FORCE` on every shard (no wait for
/// the replica to catch up), twice, while three worker processes lock with fencing and
/// quarantine on. A promoted shard master may lack the last locks: it is kept out for the
/// longest TTL from a cluster node timeout after the client learnt it, and the two other
/// members carry on meanwhile. Zero overlaps, the exact count, increasing tokens, and locks
/// granted during the failovers.
#[test]
fn nemesis_cluster_members_fail_over() {
    let store = RedisServer::start();
    let base = kit::rng::seed();
    let plan = Plan {
        faults: vec![FaultGen::Fixed(Fault::Failover)],
        nodes: (1, 1),
        // About the promoted masters' quarantine (TTL 2 s, drift, the 1 s node timeout),
        // the time the member is out; the next failover comes once it votes again.
        hold: (Duration::from_millis(3000), Duration::from_millis(3500)),
        gap: (Duration::from_millis(1500), Duration::from_millis(2000)),
        max_windows: 2,
        order: Order::Random,
        readmit: false,
    };
    let mut run = NemesisRun::new(
        "one Cluster member failed over at a time",
        Some(plan),
        Expect::SafeAndLive,
    )
    .fencing(true)
    .quarantine(true);
    run.run_for = Duration::from_secs(18);
    let mut members = ClusterMembers::start(3);
    let row = nemesis::run(&mut members, &store, WORKER_TEST, &run, base);
    history::report(
        &format!("portable: Cluster members, failovers [QL_FAULTS_SEED={base}]"),
        &[row],
    );
}

/// Liveness with restart quarantine and fencing on (TTL 1 s, TTL ceiling 2 s, plain and
/// fenced workers): an idle rolling restart, a new deployment with a minority down from the
/// start, single restarts with idle gaps, and rolling restarts paced by `Redlock::heal()`
/// and by `quorum-lock doctor --ready` (that one only with the `cli` feature, which builds
/// the binary). Each on fresh nodes; safe with increasing tokens, and locks of both kinds
/// granted within `liveness::SLACK` of a majority having served for the ceiling plus drift.
#[test]
fn liveness_after_idle_restarts_and_a_minority_down() {
    let store = RedisServer::start();
    let base = kit::rng::seed();
    let mut runs = vec![
        liveness::idle_rolling_restart(5),
        liveness::down_from_the_start(5),
        liveness::idle_single_restarts(),
        liveness::ready_paced_rolling_restart(5, ReadyBy::Heal),
    ];
    match option_env!("CARGO_BIN_EXE_quorum-lock") {
        Some(bin) => runs.push(liveness::ready_paced_rolling_restart(
            5,
            ReadyBy::Cli(bin.into()),
        )),
        None => {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                b"liveness row paced by `quorum-lock doctor --ready` skipped: the binary needs \
                  the `cli` feature (cargo test --all-features)\n",
            );
        }
    }
    let rows: Vec<Row> = runs
        .iter()
        .enumerate()
        .map(|(i, run)| {
            let mut ens = LocalEnsemble::uniform(5, PLAIN, true);
            let started = ens.started.clone();
            liveness::run(
                &mut ens,
                &started,
                &store,
                WORKER_TEST,
                run,
                base + i as u64,
            )
        })
        .collect();
    history::report(
        &format!(
            "portable: liveness after empty restarts, quarantine and fencing on, TTL 1 s, \
             ceiling 2 s [QL_FAULTS_SEED={base}]"
        ),
        &rows,
    );
}

#[test]
fn nemesis_majority_faults_block_and_stay_safe() {
    let mut control = NemesisRun::new("control: no lock at all", None, Expect::Violation);
    control.use_lock = false;
    control.run_for = Duration::from_secs(2);
    nemesis_table(
        "portable: majority faults, and a control run the checker must fail",
        vec![
            (
                PLAIN,
                NemesisRun::new(
                    "majority partition (proxy cut)",
                    Some(majority(vec![FaultGen::AnyCut])),
                    Expect::SafeAndBlocked,
                )
                .fencing(true),
            ),
            (
                PLAIN,
                NemesisRun::new(
                    "majority pause (SIGSTOP)",
                    Some(majority(vec![FaultGen::Fixed(Fault::Pause)])),
                    Expect::SafeAndBlocked,
                ),
            ),
            (PLAIN, control),
        ],
    );
}

#[test]
fn deterministic_bare_majority_and_paused_holder() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let store = RedisServer::start();
    // Started first: scenario (c) with quarantine needs nodes older than the quarantine
    // period, and the other scenarios run meanwhile.
    let mut plain = LocalEnsemble::uniform(5, PLAIN, false);
    let n3_persists = [PLAIN, PLAIN, PERSISTENT, PLAIN, PLAIN];
    let mut persist3 = LocalEnsemble::start(&n3_persists, false);
    let mut rows = Vec::new();

    let case = |name: &str, hit: Hit, b_quarantine: bool, fencing: bool, b_acquires: bool, want| {
        BareMajority {
            name: name.to_owned(),
            hit,
            b_quarantine,
            fencing,
            b_acquires,
            want,
        }
    };
    rows.push(scenarios::bare_majority(
        &rt,
        &mut persist3,
        &store,
        &case(
            "(a) n3 paused",
            Hit::Pause,
            false,
            false,
            false,
            Verdict::Safe,
        ),
    ));
    rows.push(scenarios::bare_majority(
        &rt,
        &mut persist3,
        &store,
        &case(
            "(b) n3 killed+restarted, AOF",
            Hit::KillRestart,
            false,
            false,
            false,
            Verdict::Safe,
        ),
    ));
    let jump = Hit::ClockJump(scenarios::TTL + Duration::from_secs(2));
    let jump_secs = (scenarios::TTL + Duration::from_secs(2)).as_secs();
    if clockshift_lib().is_some() {
        let shifted = NodeKind {
            shifted_clock: true,
            ..PLAIN
        };
        let mut clock3 = LocalEnsemble::start(&[PLAIN, PLAIN, shifted, PLAIN, PLAIN], false);
        rows.push(scenarios::bare_majority(
            &rt,
            &mut clock3,
            &store,
            &case(
                &format!("(d) n3 clock +{}s, no fencing", jump_secs),
                jump.clone(),
                false,
                false,
                true,
                Verdict::Unsafe,
            ),
        ));
        rows.push(scenarios::bare_majority(
            &rt,
            &mut clock3,
            &store,
            &case(
                &format!("(d) n3 clock +{}s, fencing", jump_secs),
                jump,
                false,
                true,
                true,
                Verdict::Fenced,
            ),
        ));
    } else {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"scenario (d) skipped: no `cc` to build the clockshift shim (tests/shim)\n",
        );
    }
    rows.push(scenarios::paused_holder(
        &rt,
        &mut persist3,
        &store,
        "(e) holder paused past validity, no fencing",
        false,
        Verdict::Unsafe,
    ));
    rows.push(scenarios::paused_holder(
        &rt,
        &mut persist3,
        &store,
        "(e) holder paused past validity, fencing",
        true,
        Verdict::Fenced,
    ));
    rows.push(scenarios::bare_majority(
        &rt,
        &mut plain,
        &store,
        &case(
            "(c) n3 restarted empty, no quarantine",
            Hit::KillRestart,
            false,
            false,
            true,
            Verdict::Unsafe,
        ),
    ));
    rows.push(scenarios::bare_majority(
        &rt,
        &mut plain,
        &store,
        &case(
            "(c) n3 restarted empty, quarantine",
            Hit::KillRestart,
            true,
            false,
            false,
            Verdict::Safe,
        ),
    ));
    // (a), (b), ... in order; a stable sort keeps each letter's variants as run.
    rows.sort_by_key(|r| r.scenario.chars().take(3).collect::<String>());
    history::report(
        &format!(
            "portable: A holds bare majority n1-n3, n3 is hit, B tries (TTL {} s)",
            scenarios::TTL.as_secs()
        ),
        &rows,
    );
}

/// The checker itself, on hand-made histories.
#[test]
fn checker_judges_synthetic_histories() {
    const MS: u64 = 1_000_000;
    let hold =
        |worker: u32, acquired: u64, end: u64, deadline: u64, write: Option<(u64, bool)>| Hold {
            worker,
            seq: 1,
            start: acquired,
            acquired,
            deadline,
            read: Some(acquired),
            write: write.map(|(acked, accepted)| Write {
                sent: acked,
                acked,
                accepted,
                value: 1,
            }),
            end,
            released: end,
            token: None,
            release: "ok".into(),
        };
    let done = |worker| Done {
        worker,
        increments: 1,
        clock_err: 1_000,
        clock_step: 0,
    };
    let hist = |holds: Vec<Hold>| History {
        holds,
        failures: Vec::new(),
        done: vec![done(1), done(2)],
    };

    // Back to back: safe.
    let h = hist(vec![
        hold(1, 0, 10 * MS, 100 * MS, Some((5 * MS, true))),
        hold(2, 10 * MS, 20 * MS, 110 * MS, Some((15 * MS, true))),
    ]);
    let c = history::check(&h, 2, 0);
    assert!(c.overlaps.is_empty());
    assert_eq!(c.verdict(false), Verdict::Safe);

    // Overlapping holds: unsafe, and the overlap is described.
    let h = hist(vec![
        hold(1, 0, 10 * MS, 100 * MS, Some((5 * MS, true))),
        hold(2, 8 * MS, 20 * MS, 110 * MS, Some((15 * MS, true))),
    ]);
    let c = history::check(&h, 2, 0);
    assert_eq!(c.overlaps.len(), 1);
    assert_eq!(c.overlaps[0].2, 2 * MS);
    assert_eq!(c.verdict(false), Verdict::Unsafe);
    assert!(c.describe_overlap(&h).unwrap().contains("share 2ms"));

    // A hold that ran past its deadline does not overlap the next one, but its write
    // after the deadline is late; accepted it is unsafe, rejected (fenced) it is not.
    let h = hist(vec![
        hold(1, 0, 50 * MS, 10 * MS, Some((40 * MS, true))),
        hold(2, 20 * MS, 30 * MS, 110 * MS, Some((25 * MS, true))),
    ]);
    let c = history::check(&h, 2, 0);
    assert!(c.overlaps.is_empty());
    assert_eq!(c.late_writes, 1);
    assert_eq!(c.verdict(true), Verdict::Unsafe);
    let h = hist(vec![
        hold(1, 0, 50 * MS, 10 * MS, Some((40 * MS, false))),
        hold(2, 20 * MS, 30 * MS, 110 * MS, Some((25 * MS, true))),
    ]);
    let c = history::check(&h, 1, 0);
    assert_eq!((c.late_writes, c.rejected, c.expected), (0, 1, 1));
    assert_eq!(c.verdict(true), Verdict::Fenced);

    // Lost update: two accepted increments, counter 1.
    let h = hist(vec![
        hold(1, 0, 10 * MS, 100 * MS, Some((5 * MS, true))),
        hold(2, 10 * MS, 20 * MS, 110 * MS, Some((15 * MS, true))),
    ]);
    assert_eq!(history::check(&h, 1, 0).verdict(false), Verdict::Unsafe);

    // Permits: two holders at once is within two permits; a third while both hold is
    // an overlap with each of them, also with three permits counted as two.
    let h = hist(vec![
        hold(1, 0, 30 * MS, 100 * MS, None),
        hold(2, 10 * MS, 40 * MS, 110 * MS, None),
        hold(3, 40 * MS, 50 * MS, 120 * MS, None),
    ]);
    assert!(history::check_permits(&h, 0, 0, 2).overlaps.is_empty());
    let h = hist(vec![
        hold(1, 0, 30 * MS, 100 * MS, None),
        hold(2, 10 * MS, 40 * MS, 110 * MS, None),
        hold(3, 20 * MS, 50 * MS, 120 * MS, None),
    ]);
    let c = history::check_permits(&h, 0, 0, 2);
    assert_eq!(c.overlaps, vec![(0, 2, 10 * MS), (1, 2, 20 * MS)]);
    assert_eq!(c.verdict(false), Verdict::Unsafe);
    assert!(history::check_permits(&h, 0, 0, 3).overlaps.is_empty());

    // Read-write lock (workers 2 and 4 read): readers share; a writer beside a reader, or
    // a reader beside a writer, is an overlap.
    let h = hist(vec![
        hold(2, 0, 30 * MS, 100 * MS, None),
        hold(4, 10 * MS, 40 * MS, 110 * MS, None),
        hold(1, 40 * MS, 50 * MS, 120 * MS, None),
    ]);
    let rw = |h: &History| history::check_rw(h, 0, 0, |w| w % 2 == 0).overlaps;
    assert!(rw(&h).is_empty());
    let h = hist(vec![
        hold(2, 0, 30 * MS, 100 * MS, None),
        hold(1, 20 * MS, 40 * MS, 110 * MS, None),
        hold(4, 35 * MS, 50 * MS, 120 * MS, None),
    ]);
    assert_eq!(rw(&h), vec![(0, 1, 10 * MS), (1, 2, 5 * MS)]);

    // Within the clocks' uncertainty (2 x 1 µs) an apparent overlap is not reported.
    let h = hist(vec![
        hold(1, 0, 10 * MS + 1_000, 100 * MS, None),
        hold(2, 10 * MS, 20 * MS, 110 * MS, None),
    ]);
    assert!(history::check(&h, 0, 0).overlaps.is_empty());

    // Fencing tokens must grow in acquisition order.
    let mut h = hist(vec![
        hold(1, 0, 10 * MS, 100 * MS, None),
        hold(2, 10 * MS, 20 * MS, 110 * MS, None),
    ]);
    h.holds[0].token = Some(5);
    h.holds[1].token = Some(5);
    let c = history::check(&h, 0, 0);
    assert_eq!(c.token_regressions, 1);
    assert_eq!(c.verdict(true), Verdict::Unsafe);

    // A step of the wall clock invalidates the run.
    let mut h = hist(Vec::new());
    h.done[0].clock_step = 5 * MS as i64;
    assert_eq!(history::check(&h, 0, 0).verdict(false), Verdict::Invalid);

    // Records survive the round trip through their text form.
    let mut h2 = History::default();
    let mut text = String::new();
    for x in &h.holds {
        text.push_str(&x.to_line());
        text.push('\n');
    }
    let original = hist(vec![
        hold(1, 0, 50 * MS, 10 * MS, Some((40 * MS, false))),
        hold(2, 20 * MS, 30 * MS, 110 * MS, None),
    ]);
    for x in &original.holds {
        text.push_str(&x.to_line());
        text.push('\n');
    }
    text.push_str(&done(1).to_line());
    history::parse(&text, &mut h2);
    assert_eq!(h2.holds, original.holds);
    assert_eq!(h2.done, vec![done(1)]);
}

/// The checker's fencing judgement: tokens must grow in acquisition order on the common
/// clock, every token larger than all earlier ones (not only the previous one); holds
/// without a token (a client without fencing) are left out; a regression makes the run
/// UNSAFE and shows in the `tokens↑` column.
#[test]
fn checker_catches_token_regressions() {
    const MS: u64 = 1_000_000;
    // Back-to-back holds, recorded out of order (workers' files are read one by one).
    let history = |tokens: &[Option<u64>]| History {
        holds: tokens
            .iter()
            .enumerate()
            .rev()
            .map(|(i, &token)| {
                let at = i as u64 * 10 * MS;
                Hold {
                    worker: 1 + (i % 2) as u32,
                    seq: 1 + i as u32,
                    start: at,
                    acquired: at,
                    deadline: at + 100 * MS,
                    read: None,
                    write: None,
                    end: at + 5 * MS,
                    released: at + 6 * MS,
                    token,
                    release: "ok".into(),
                }
            })
            .collect(),
        failures: Vec::new(),
        done: Vec::new(),
    };
    let judge = |tokens: &[Option<u64>]| {
        let c = history::check(&history(tokens), 0, 0);
        let row = Row::from_check("t", &c, true, Verdict::Safe);
        (
            c.tokens,
            c.token_regressions,
            c.verdict(true),
            row.tokens_cell(),
        )
    };
    assert_eq!(
        judge(&[Some(1), Some(2), Some(7), Some(8)]),
        (4, 0, Verdict::Safe, "yes".to_owned())
    );
    assert_eq!(judge(&[None, None]), (0, 0, Verdict::Safe, "-".to_owned()));
    // Equal tokens: not larger.
    assert_eq!(
        judge(&[Some(1), Some(2), Some(2)]),
        (3, 1, Verdict::Unsafe, "NO(1)".to_owned())
    );
    // 5, 3, 4: 4 is larger than its predecessor, but not than 5.
    assert_eq!(
        judge(&[Some(5), Some(3), Some(4), Some(6)]),
        (4, 2, Verdict::Unsafe, "NO(2)".to_owned())
    );
    // Untokened holds in between do not hide a regression.
    assert_eq!(
        judge(&[Some(3), None, Some(3), None, Some(4)]),
        (3, 1, Verdict::Unsafe, "NO(1)".to_owned())
    );
    assert_eq!(history::token_regressions(&[9, 1, 2, 3, 10]), 3);
    // The table shows the column and the regression.
    let c = history::check(&history(&[Some(5), Some(3)]), 0, 0);
    let row = Row::from_check("regressing", &c, true, Verdict::Safe);
    let text = history::table("t", &[row]);
    assert!(text.contains("tokens↑"), "{text}");
    assert!(text.contains("NO(1)"), "{text}");
}

/// How the nemesis sees readmission, on real servers: a restarted node counts as readmitted
/// once its marker names its new `run_id`, not before, and not for a marker of another life.
#[test]
fn readmission_is_the_marker_of_the_new_life() {
    let mut ens = LocalEnsemble::uniform(3, PLAIN, false);
    let run_id = |ens: &LocalEnsemble, i: usize| -> String {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut ens.admin(i))
            .expect("INFO");
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .expect("run_id")
            .trim()
            .to_owned()
    };
    let set_marker = |ens: &LocalEnsemble, i: usize, life: &str| {
        let () = redis::cmd("SET")
            .arg(kit::ensemble::MARKER)
            .arg(life)
            .query(&mut ens.admin(i))
            .expect("SET marker");
    };
    let old_life = run_id(&ens, 1);
    let mut sched = nemesis::Schedule::default();
    sched.window(
        &mut ens,
        Fault::Kill,
        vec![0, 1],
        Duration::from_millis(50),
        true,
    );
    assert_eq!(sched.pending.len(), 2, "both restarted nodes are pending");
    sched.refresh(&ens);
    assert_eq!(sched.pending.len(), 2, "no marker yet: both pending");
    let new_life = run_id(&ens, 0);
    set_marker(&ens, 0, &new_life);
    set_marker(&ens, 1, &old_life);
    sched.refresh(&ens);
    assert_eq!(sched.readmitted.len(), 1);
    assert_eq!(sched.readmitted[0].node, 0);
    assert!(sched.readmitted[0].readmitted >= sched.readmitted[0].healed);
    assert_eq!(sched.pending.len(), 1);
    assert_eq!(
        sched.pending[0].node, 1,
        "a marker of its old life does not count"
    );
}

/// The early-readmission check on hand-made histories: a restarted node must not be
/// readmitted before the deadline of any hold acquired before (or within the grace after)
/// its kill.
#[test]
fn early_readmission_is_flagged() {
    const MS: u64 = 1_000_000;
    let hold = |worker: u32, acquired: u64, deadline: u64| Hold {
        worker,
        seq: 1,
        start: acquired,
        acquired,
        deadline,
        read: None,
        write: None,
        end: acquired + MS,
        released: acquired + MS,
        token: None,
        release: "ok".into(),
    };
    let restart = |readmitted: u64| nemesis::Restart {
        node: 2,
        killed: 1_000 * MS,
        healed: 1_900 * MS,
        readmitted,
    };
    let grace = 700 * MS;
    // A 3 s hold acquired just before the kill: deadline at 3.9 s.
    let holds = vec![
        hold(1, 900 * MS, 3_900 * MS),
        hold(2, 5_000 * MS, 8_000 * MS),
    ];
    let early = nemesis::early_readmissions(&[restart(3_000 * MS)], &holds, grace, 1_000);
    assert_eq!(early.len(), 1, "{early:?}");
    assert!(
        early[0].starts_with("n3 was readmitted 1.1s after its restart, 900ms before")
            && early[0].contains("worker 1 hold #1"),
        "{early:?}"
    );
    // Readmitted after that deadline: fine (the later hold did not depend on n3's old life).
    assert!(nemesis::early_readmissions(&[restart(4_000 * MS)], &holds, grace, 1_000).is_empty());
    // A hold acquired within the grace after the kill counts; one after it does not.
    let holds = vec![hold(1, 1_600 * MS, 4_600 * MS)];
    assert_eq!(
        nemesis::early_readmissions(&[restart(4_000 * MS)], &holds, grace, 1_000).len(),
        1
    );
    let holds = vec![hold(1, 1_800 * MS, 4_800 * MS)];
    assert!(nemesis::early_readmissions(&[restart(4_000 * MS)], &holds, grace, 1_000).is_empty());
}

/// Five nodes without persistence, quarantine on, and a client whose fenced
/// lock-and-release returns the token: the set-up of the two rolling-restart tests below.
struct FencedFive {
    ens: LocalEnsemble,
    rt: tokio::runtime::Runtime,
    redlock: quorum_lock::Redlock,
}

impl FencedFive {
    const TTL: Duration = Duration::from_secs(1);

    fn start() -> FencedFive {
        let ens = LocalEnsemble::uniform(5, PLAIN, false);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let urls = ens.client_urls();
        let redlock = kit::worker::client(&urls, Self::TTL, Duration::from_millis(200), true);
        FencedFive { ens, rt, redlock }
    }

    fn lock(&self, resource: &str, wait: Duration) -> quorum_lock::Result<u64> {
        self.rt.block_on(async {
            let request = self.redlock.lock(resource, Self::TTL).wait(wait);
            let guard = request.fenced().await?;
            let token = u64::from(guard.fencing_token());
            guard.release().await?;
            Ok(token)
        })
    }
}

/// Rolling-restart liveness: once three of five nodes have each restarted empty and been
/// readmitted, one at a time, a fenced lock on a resource never locked before still gets a
/// token, above every token of the resource locked all along (the clock component carries
/// the order over the counters the nodes lost).
#[test]
fn fenced_lock_on_a_new_resource_after_minority_restarts() {
    let mut fenced = FencedFive::start();
    let mut last = fenced
        .lock("used", Duration::from_secs(5))
        .expect("first lock on fresh nodes");
    for i in 0..3 {
        fenced.ens.inject(i, &Fault::Kill);
        fenced.ens.heal(i, &Fault::Kill);
        // Locking "used" readmits the node once its quarantine is over; the next node goes
        // down once its marker names its new life.
        common::wait_until(Duration::from_secs(15), "the node's readmission", || {
            let token = fenced
                .lock("used", Duration::from_millis(200))
                .expect("lock while a minority is out");
            assert!(token > last, "token {token} after {last}");
            last = token;
            fenced.ens.admitted(i)
        });
    }
    let fresh = common::unique("never-locked");
    match fenced.lock(&fresh, Duration::from_secs(3)) {
        Ok(token) => assert!(token > last, "token {token} after {last}"),
        Err(e) => panic!("a resource never locked before gets no token: {e}"),
    }
}

/// A rolling restart through every node, each readmitted before the next and a lock taken
/// on another resource meanwhile, loses every node's own counter of a resource not locked
/// during the roll: its next token must be above every earlier one (the clock component),
/// never refused and never repeated.
#[test]
fn a_rolling_restart_never_reissues_an_old_token() {
    let mut fenced = FencedFive::start();
    let victim = common::unique("victim");
    let mut last = 0;
    for _ in 0..3 {
        last = fenced
            .lock(&victim, Duration::from_secs(5))
            .expect("lock on fresh nodes");
    }
    for i in 0..5 {
        fenced.ens.inject(i, &Fault::Kill);
        fenced.ens.heal(i, &Fault::Kill);
        common::wait_until(Duration::from_secs(15), "the node's readmission", || {
            let _ = fenced.lock("used", Duration::from_millis(200));
            fenced.ens.admitted(i)
        });
    }
    match fenced.lock(&victim, Duration::from_secs(3)) {
        Ok(token) => assert!(token > last, "token {token} after {last}"),
        Err(e) => panic!("no token after a rolling restart: {e}"),
    }
}

/// The fault proxy does what the scenarios rely on.
#[test]
fn proxy_delays_blackholes_and_resets() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(SocketAddr::from(([127, 0, 0, 1], server.port())));
    let port: u16 = proxy.url().rsplit(':').next().unwrap().parse().unwrap();
    let ping = |timeout: Duration| {
        let start = Instant::now();
        let reply = raw_ping(port, timeout);
        (reply, start.elapsed())
    };
    let (reply, _) = ping(Duration::from_secs(2));
    assert_eq!(reply.unwrap(), "+PONG");

    proxy.set_delay(Duration::from_millis(150));
    let (reply, took) = ping(Duration::from_secs(2));
    assert_eq!(reply.unwrap(), "+PONG");
    assert!(
        took >= Duration::from_millis(150),
        "delayed reply after {took:?}"
    );
    proxy.set_delay(Duration::ZERO);

    // Silent partition: a request hangs, and is delivered once the link is back.
    proxy.set_link(Link::Blackhole);
    let (reply, took) = ping(Duration::from_millis(300));
    assert!(reply.is_err(), "no reply through a black hole: {reply:?}");
    assert!(took >= Duration::from_millis(250), "{took:?}");
    let key = common::unique("proxy-late");
    let mut held = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(
        &mut held,
        format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\n1\r\n", key.len()).as_bytes(),
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let exists = |server: &RedisServer| -> bool {
        redis::cmd("EXISTS")
            .arg(&key)
            .query::<i64>(&mut server.conn())
            .unwrap()
            == 1
    };
    assert!(!exists(&server), "nothing crosses a black hole");
    proxy.set_link(Link::Up);
    common::wait_until(Duration::from_secs(5), "the held SET to arrive", || {
        exists(&server)
    });

    // Resetting partition: open connections are closed, new ones fail fast.
    proxy.set_link(Link::Reset);
    held.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = [0u8; 64];
    let mut got = Vec::new();
    loop {
        match std::io::Read::read(&mut held, &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let (reply, took) = ping(Duration::from_secs(2));
    assert!(reply.is_err(), "{reply:?}");
    assert!(took < Duration::from_secs(1), "reset fails fast: {took:?}");
    proxy.set_link(Link::Up);
    let (reply, _) = ping(Duration::from_secs(2));
    assert_eq!(reply.unwrap(), "+PONG");
    assert!(proxy.accepted() >= 5);
}
