//! A new deployment locks within seconds once declared new (`quorum-lock init`), with a
//! node down from the start, and with many processes starting together while a node is
//! paused and another killed. Without the declaration a new ensemble with a node down
//! cannot be told from one whose majority lost a live lock's records (the model's
//! `fresh_from_a_majority_of_answers_loses_exclusion`), so its nodes wait out the TTL
//! ceiling: the 69 message names the step.
// The binary exists only with the `cli` feature (on by default).
#![cfg(feature = "cli")]

mod cli_support;
mod common;

use std::fs;
use std::time::{Duration, Instant};

use cli_support::*;
use common::{Cluster, unique};

/// Five new nodes, the last down from the start (default 60 s TTL ceiling): a `run` exits
/// 69 naming `quorum-lock init`; `init` admits the four it reaches and exits 0; the next
/// `run --no-wait` exits 0 at once; a second `init` writes nothing ("already in
/// service"); the fifth node, started late, is readmitted by quarantine within the TTL
/// the runs used.
///
/// On the code before this change `init` did not exist (exit 64, "unrecognized
/// subcommand"), and runs exited 69 until the ceiling had passed.
#[test]
fn a_new_deployment_with_a_node_down_locks_at_once_after_init() {
    let started = Instant::now();
    let mut cluster = Cluster::start(5);
    cluster.nodes[4].kill();
    let urls = cluster.urls();
    let resource = unique("first-start");
    std::thread::sleep(Duration::from_millis(1100).saturating_sub(started.elapsed()));
    let run = |opts: &[&str]| {
        let mut args = vec!["--ttl", TTL_ARG];
        args.extend_from_slice(opts);
        output(run_cmd(&urls, &args, &resource, &["true"]))
    };

    run(&["--wait", "2s"])
        .expect(69)
        .stderr_has("quorum-lock init");

    let declared = output(cli(&urls, ["init"]));
    declared
        .expect(0)
        .stdout_has("declared new: 4 of 5 nodes admitted");
    let locked = run(&["--no-wait"]);
    locked.expect(0);
    assert!(locked.elapsed < Duration::from_secs(2), "{locked:#?}");

    output(cli(&urls, ["init"]))
        .expect(0)
        .stdout_has("already in service");

    cluster.nodes[4].restart();
    let ready = output(cli(&urls, ["doctor", "--ready", "--wait", "20s"]));
    ready.expect(0).stdout_has("5 of 5 nodes admitted: ready");
}

/// `processes` processes start together on five new nodes declared new, each running
/// three 0.1 s critical sections under one lock, `faults` applied meanwhile: every run exits
/// 0 within its wait, and no two critical sections overlap (a directory each claims with
/// `mkdir`, which fails when another holds it).
fn processes_start_together(processes: usize, faults: impl FnOnce(&mut Cluster)) {
    let mut cluster = Cluster::start(5);
    let urls = cluster.urls();
    let scratch = Scratch::new();
    let resource = unique("together");
    output(cli(&urls, ["init"])).expect(0);
    let script = format!(
        "mkdir {d} || exit 99; echo x >> {log}; sleep 0.1; rmdir {d}",
        d = scratch.sh("inside"),
        log = scratch.sh("log")
    );
    let worker = format!(
        "for i in 1 2 3; do {bin} run --node-timeout {nt} --ttl {ttl} --wait 30s {resource} \
         -- sh -c {script} || exit $?; done",
        bin = bin(),
        nt = NODE_TIMEOUT_ARG,
        ttl = TTL_ARG,
        script = quoted(&script),
    );
    let workers: Vec<Running> = (0..processes)
        .map(|_| {
            let mut cmd = std::process::Command::new("sh");
            cmd.args(["-c", &worker])
                .env("QUORUM_LOCK_NODES", urls.join(","));
            start(cmd, &scratch)
        })
        .collect();
    faults(&mut cluster);
    for (i, worker) in workers.into_iter().enumerate() {
        let done = worker.wait(LIMIT);
        assert_eq!(done.status.code(), Some(0), "worker {i}: {done:#?}");
    }
    let log = fs::read_to_string(scratch.path("log")).unwrap();
    assert_eq!(
        log.lines().count(),
        3 * processes,
        "every critical section ran once"
    );
}

/// Four processes start together on a declared ensemble, every node up.
#[test]
fn four_processes_starting_together_on_a_declared_ensemble_all_lock() {
    processes_start_together(4, |_| {});
}

/// Eight processes start together on a declared ensemble while node 1 is paused for 1.5 s
/// and node 2 is killed.
///
/// Without `init`, runs started on nodes whose first contacts overlap a pause can leave
/// records that make every node wait out the ceiling: 69 after the whole wait.
#[test]
fn processes_starting_together_on_a_declared_ensemble_all_lock() {
    processes_start_together(8, |cluster| {
        cluster.nodes[1].pause();
        std::thread::sleep(Duration::from_millis(1500));
        cluster.nodes[1].resume();
        cluster.nodes[2].kill();
    });
}
