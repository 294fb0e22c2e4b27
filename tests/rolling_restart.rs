//! A job under `quorum-lock run` (or `elect`) keeps running while every node is restarted
//! empty in turn, each restart paced by `quorum-lock doctor --ready`, for every lock kind: the gate
//! answers ready only once every live lock has its copy back on enough nodes that the next
//! restart leaves it a majority.
// The binary exists only with the `cli` feature (on by default).
#![cfg(feature = "cli")]

mod cli_support;
mod common;

use std::fs;

use cli_support::*;
use common::{Cluster, RedisServer, unique, wait_until};

/// Every client's TTL ceiling: a restarted node is kept out for about this long.
const CEILING_ARG: &str = "2s";

/// Whether `server` holds any key naming `resource` (a lock key, a reader's entry and the
/// readers' mark, a permit slot).
fn has_copy(server: &RedisServer, resource: &str) -> bool {
    !server.keys(&format!("*{resource}*")).is_empty()
}

/// A job under `quorum-lock elect`, running `body` once it leads a fresh election: the
/// election's name and the running job.
fn leading(urls: &[String], scratch: &Scratch, body: &str) -> (String, Running) {
    let name = unique("roll-leader");
    let pid_file = scratch.path("leader.pid");
    let script = format!("echo $$ > {}; {body}", pid_file.display());
    let opts = ["--ttl-ceiling", CEILING_ARG, "--ttl", TTL_ARG, &name, "--"];
    let mut cmd = cli(urls, ["elect"].into_iter().chain(opts));
    cmd.args(["sh", "-c", &script]);
    let job = start(cmd, scratch);
    wait_until(
        std::time::Duration::from_secs(40),
        "the leader's program to start",
        || fs::read_to_string(&pid_file).is_ok_and(|s| s.ends_with('\n')),
    );
    (name, job)
}

/// Six jobs, one per lock kind (a mutex, a fenced mutex, a reader, a writer, a semaphore
/// permit, a leader's term), each on its own resource with a 2 s TTL, live through three restarts: after
/// each, `doctor --ready --wait 60s` exits 0, and by then every node holds every job's
/// copy (the property of the gate: restarting any one node next leaves each a majority).
/// Every job then ends with its program's status, 0.
///
/// On the code before this change the gate answered ready as soon as every node was
/// admitted, before the holders had written their copies back: the copy check failed
/// ("node 0 lacks a copy of roll-mutex-... right after doctor --ready"), and jobs whose
/// holder was slower than the next restart exited 70.
#[test]
fn every_kind_of_job_outlives_a_rolling_restart_paced_by_doctor_ready() {
    let started = std::time::Instant::now();
    let mut cluster = Cluster::start(3);
    settle(started, TTL);
    let urls = cluster.urls();
    let scratch = Scratch::new();
    let done = scratch.path("done");
    let body = format!("while [ ! -e {} ]; do sleep 0.1; done", done.display());
    let kinds: [(&str, &[&str]); 5] = [
        ("mutex", &[]),
        ("fenced", &["--fencing"]),
        ("reader", &["--shared"]),
        ("writer", &["--exclusive"]),
        ("permit", &["--permits", "2"]),
    ];
    let mut jobs = Vec::new();
    for (kind, extra) in kinds {
        let resource = unique(&format!("roll-{kind}"));
        let mut opts = vec!["--ttl-ceiling", CEILING_ARG, "--ttl", TTL_ARG];
        opts.extend_from_slice(extra);
        let pid_file = scratch.path(&format!("{kind}.pid"));
        let job = hold(&urls, &scratch, &opts, &resource, &pid_file, "", &body);
        jobs.push((resource, job));
    }
    jobs.push(leading(&urls, &scratch, &body));
    for restarted in 0..cluster.nodes.len() {
        cluster.nodes[restarted].restart();
        let gate = [
            "--ttl-ceiling",
            CEILING_ARG,
            "doctor",
            "--ready",
            "--wait",
            "60s",
        ];
        let ready = output(cli(&urls, gate));
        eprintln!(
            "doctor --ready after restarting node {restarted}: {:.1?}\n{}",
            ready.elapsed, ready.stdout
        );
        ready.expect(0).stdout_has("3 of 3 nodes admitted: ready");
        for (i, node) in cluster.nodes.iter().enumerate() {
            for (resource, _) in &jobs {
                assert!(
                    has_copy(node, resource),
                    "node {i} lacks a copy of {resource} right after doctor --ready"
                );
            }
        }
        for (resource, job) in &mut jobs {
            assert!(
                job.is_running(),
                "the job on {resource} ended after restart {restarted}"
            );
        }
    }
    fs::write(&done, "").unwrap();
    for (resource, job) in jobs {
        let ended = job.wait(LIMIT);
        assert_eq!(
            ended.status.code(),
            Some(0),
            "the job on {resource}: {ended:#?}"
        );
    }
}
