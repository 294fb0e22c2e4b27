//! The `quorum-lock` binary against real `redis-server` processes, run as a user would:
//! real processes, real signals, exit statuses and output.
// The binary exists only with the `cli` feature (on by default).
#![cfg(feature = "cli")]

mod cli_support;
mod common;

use std::fs;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use cli_support::*;
use common::proxy::{FaultProxy, Link};
use common::{BlackHole, Cluster, RedisServer, unique, wait_until};
use nix::sys::signal::Signal;

fn status_json(urls: &[String], resource: &str) -> String {
    let done = output(cli(urls, ["status", "--json", resource]));
    assert!(done.status.success(), "status {resource} failed: {done:#?}");
    done.stdout
}

fn verdict(urls: &[String], resource: &str) -> String {
    let json = status_json(urls, resource);
    let start = json.find("\"verdict\":\"").expect("verdict in JSON") + 11;
    json[start..]
        .split('"')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// This machine's host name, as the kernel has it.
fn host_name() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

/// The number after `"key":` in a JSON line.
#[track_caller]
fn json_number(json: &str, key: &str) -> u64 {
    let after = json
        .split(&format!("\"{key}\":"))
        .nth(1)
        .unwrap_or_default();
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("{key} in {json}"))
}

// ---------------------------------------------------------------------------------------
// Usage

#[test]
fn usage_errors_exit_64_naming_the_problem() {
    let nodes = vec!["redis://127.0.0.1:1".to_owned()];
    let none: Vec<String> = Vec::new();
    let cases: Vec<(Vec<String>, Vec<&str>, &str)> = vec![
        (nodes.clone(), vec!["--bogus", "status", "r"], "--bogus"),
        (
            nodes.clone(),
            vec!["run", "--frobnicate", "r", "--", "true"],
            "--frobnicate",
        ),
        (nodes.clone(), vec!["run", "r", "true"], "missing `--`"),
        (nodes.clone(), vec!["run", "r"], "missing `-- PROGRAM"),
        (nodes.clone(), vec!["run", "r", "--"], "missing `-- PROGRAM"),
        (
            none.clone(),
            vec!["run", "r", "--", "true"],
            "no nodes given",
        ),
        (none.clone(), vec!["status", "r"], "QUORUM_LOCK_NODES"),
        (
            none.clone(),
            vec!["--nodes", " , ", "status", "r"],
            "no nodes given",
        ),
        (
            none.clone(),
            vec!["--nodes", "localhost:6379", "status", "r"],
            "malformed node URL \"localhost:6379\"",
        ),
        (
            none.clone(),
            vec!["--nodes", "http://h:1", "doctor"],
            "malformed node URL \"http://h:1\"",
        ),
        (
            none.clone(),
            vec!["--nodes", "redis://h:1,redis://h:1", "status", "r"],
            "listed twice",
        ),
        (
            nodes.clone(),
            vec!["run", "--ttl", "30", "r", "--", "true"],
            "no unit",
        ),
        (
            nodes.clone(),
            vec!["run", "--replica-acks", "1", "r", "--", "true"],
            "replica acks apply to Sentinel and Cluster members",
        ),
        (
            nodes.clone(),
            vec!["run", "--wait", "5 parsecs", "r", "--", "true"],
            "unknown unit",
        ),
        (
            nodes.clone(),
            vec!["run", "--ttl", "1ms", "r", "--", "true"],
            "too short",
        ),
        (
            nodes.clone(),
            vec!["run", "--wait", "1s", "--no-wait", "r", "--", "true"],
            "cannot be used with",
        ),
        (
            nodes.clone(),
            vec!["run", "--ttl", "2s", "--grace", "2s", "r", "--", "true"],
            "--grace 2s does not fit in --ttl 2s",
        ),
        (
            nodes.clone(),
            vec!["run", "--grace", "99999999999h", "r", "--", "true"],
            "--grace 99999999999h does not fit in --ttl 30s",
        ),
        (
            nodes.clone(),
            vec!["run", "--grace", "99999999999999999999h", "r", "--", "true"],
            "out of range",
        ),
        (
            nodes.clone(),
            vec!["run", "--ttl", "2s", "--grace", "1500ms", "r", "--", "true"],
            "to extend the lock in",
        ),
        (nodes.clone(), vec!["release", "r"], "--force"),
        (nodes.clone(), vec!["status", ""], "resource name is empty"),
        (nodes.clone(), vec!["frobnicate"], "frobnicate"),
        (nodes.clone(), vec![], "requires a subcommand"),
    ];
    // No arguments at all: the help, and a line naming what is missing.
    let done = output(Command::new(bin()));
    done.expect(64)
        .stderr_has("Usage:")
        .stderr_has("quorum-lock: missing command");
    for (urls, args, needle) in cases {
        let done = output(cli(&urls, &args));
        assert_eq!(done.code(), 64, "{args:?}: {done:#?}");
        assert!(
            done.stderr.contains(needle),
            "{args:?}: stderr lacks {needle:?}: {done:#?}"
        );
        assert!(
            done.stderr.starts_with("quorum-lock: "),
            "{args:?}: {done:#?}"
        );
    }
}

#[test]
fn help_and_version_exit_0() {
    output(cli(&[], ["--help"]))
        .expect(0)
        .stdout_has("QUORUM_LOCK_NODES")
        .stdout_has("75");
    output(cli(&[], ["run", "--help"]))
        .expect(0)
        .stdout_has("--no-wait")
        .stdout_has("RESOURCE -- PROGRAM");
    output(cli(&[], ["--version"]))
        .expect(0)
        .stdout_has(env!("CARGO_PKG_VERSION"));
}

// ---------------------------------------------------------------------------------------
// Unreachable nodes

#[test]
fn unreachable_nodes_exit_69_within_the_wait() {
    // Two silent nodes (accept, never answer) and one refusing connections: no majority.
    let (a, b) = (BlackHole::start(), BlackHole::start());
    let refused = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("redis://{}", listener.local_addr().unwrap())
    };
    let urls = vec![a.url(), b.url(), refused];
    let scratch = Scratch::new();
    let ran = scratch.path("ran");

    let done = output(cli(
        &urls,
        [
            "run",
            "--wait",
            "1s",
            "r",
            "--",
            "touch",
            ran.to_str().unwrap(),
        ],
    ));
    done.expect(69)
        .stderr_has("not enough nodes reachable for a majority")
        .stderr_has(&a.url()[8..]);
    assert!(done.elapsed < Duration::from_secs(8), "{done:#?}");
    assert!(!ran.exists(), "the program must not run without the lock");

    let done = output(cli(&urls, ["run", "--no-wait", "r", "--", "true"]));
    done.expect(69);
    assert!(done.elapsed < Duration::from_secs(5), "{done:#?}");

    let done = output(cli(&urls, ["status", "r"]));
    done.expect(69).stdout_has("unknown");
    assert!(done.elapsed < Duration::from_secs(5), "{done:#?}");

    let done = output(cli(&urls, ["release", "--force", "r"]));
    done.expect(69).stderr_has("may still be held");
    assert!(done.elapsed < Duration::from_secs(5), "{done:#?}");

    let done = output(cli(&urls, ["doctor"]));
    done.expect(69);
    assert!(done.elapsed < Duration::from_secs(10), "{done:#?}");
}

// ---------------------------------------------------------------------------------------
// Mutual exclusion

#[test]
fn concurrent_runs_never_overlap() {
    let (_cluster, urls, scratch, resource) = setup(TTL, "overlap");
    // Each program claims a marker directory and fails if it is already there.
    let script = format!(
        "mkdir {d} || exit 99; echo \"$QUORUM_LOCK_RESOURCE\" >> {log}; sleep 0.4; rmdir {d}",
        d = scratch.sh("inside"),
        log = scratch.sh("log")
    );
    let runs: Vec<Running> = (0..3)
        .map(|_| {
            let (wait, program) = (["--ttl", TTL_ARG, "--wait", "30s"], ["sh", "-c", &script]);
            start(run_cmd(&urls, &wait, &resource, &program), &scratch)
        })
        .collect();
    for run in runs {
        run.wait(LIMIT).expect(0);
    }
    let log = fs::read_to_string(scratch.path("log")).unwrap();
    assert_eq!(log.lines().collect::<Vec<_>>(), vec![resource.as_str(); 3]);
    assert_eq!(verdict(&urls, &resource), "free", "released after each run");
}

#[test]
fn runs_with_permits_never_exceed_k_and_all_run() {
    let (_cluster, urls, scratch, name) = setup(TTL, "permits");
    // Each program enters a directory of its own, then counts the programs inside.
    fs::create_dir(scratch.path("inside")).unwrap();
    let script = format!(
        "mkdir {d}/$$ && ls {d} | wc -l >> {log}; sleep 1; rmdir {d}/$$",
        d = scratch.sh("inside"),
        log = scratch.sh("log")
    );
    let opts = ["--ttl", TTL_ARG, "--wait", "30s", "--permits", "2"];
    let runs: Vec<Running> = (0..5)
        .map(|_| {
            start(
                run_cmd(&urls, &opts, &name, &["sh", "-c", &script]),
                &scratch,
            )
        })
        .collect();
    for run in runs {
        run.wait(LIMIT).expect(0);
    }
    let log = fs::read_to_string(scratch.path("log")).unwrap();
    let inside: Vec<u32> = log.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(inside.len(), 5, "every run ran once: {inside:?}");
    assert!(
        inside.iter().all(|&n| n <= 2),
        "never more than 2: {inside:?}"
    );
    assert!(inside.contains(&2), "2 at once: {inside:?}");
    // One name, one lock: a plain run waits for the permits; a semaphore is refused while
    // the name is held as a lock.
    let pid_file = scratch.path("permit.pid");
    let permits = ["--ttl", TTL_ARG, "--permits", "2"];
    let holder = hold_sleeping(&urls, &scratch, &permits, &name, &pid_file);
    (output(run_cmd(&urls, &["--no-wait"], &name, &["true"])).expect(75))
        .stderr_has("the permit holders of the semaphore of this name");
    holder.signal(Signal::SIGTERM);
    holder.wait(LIMIT);
    let lock_pid = scratch.path("lock.pid");
    let plain = ["--ttl", TTL_ARG, "--wait", "10s"];
    let holder = hold_sleeping(&urls, &scratch, &plain, &name, &lock_pid);
    let both = ["--no-wait", "--permits", "2"];
    (output(run_cmd(&urls, &both, &name, &["true"])).expect(64))
        .stderr_has("its name is held as a lock");
    holder.signal(Signal::SIGTERM);
    holder.wait(LIMIT);
    let zero = ["--permits", "0"];
    (output(run_cmd(&urls, &zero, &name, &["true"])).expect(64)).stderr_has("0 permits");
    // No name reaches the library's own keys, whatever the kind.
    for opts in [
        &[][..],
        &["--shared"],
        &["--exclusive"],
        &["--permits", "2"],
    ] {
        let reserved = "quorum-lock:node:marker";
        (output(run_cmd(&urls, opts, reserved, &["true"])).expect(64))
            .stderr_has("the names this library keeps for its own keys");
    }
}

/// `run --shared`, `run --exclusive` and a plain `run` (the mutex) of one name are one
/// lock, as `flock -s`, `flock -x` and `flock` of one file.
#[test]
fn shared_runs_run_together_and_exclusive_runs_alone() {
    let (_cluster, urls, scratch, name) = setup(TTL, "rw");
    // Each program enters a directory of its own, then logs its side, how many programs
    // are inside and how many of them write.
    fs::create_dir(scratch.path("inside")).unwrap();
    let script = |side: &str, hold: &str| {
        format!(
            "mkdir {d}/{side}$$ && echo {side} $(ls {d} | wc -l) $(ls {d} | grep -c w) >> {log}; \
             sleep {hold}; rmdir {d}/{side}$$",
            d = scratch.sh("inside"),
            log = scratch.sh("log")
        )
    };
    let (read, write) = (script("r", "1"), script("w", "0.2"));
    let opts = |side| ["--ttl", TTL_ARG, "--wait", "30s", side];
    let mut runs: Vec<Running> = Vec::new();
    for _ in 0..3 {
        let program = ["sh", "-c", read.as_str()];
        runs.push(start(
            run_cmd(&urls, &opts("--shared"), &name, &program),
            &scratch,
        ));
    }
    for _ in 0..2 {
        let program = ["sh", "-c", write.as_str()];
        runs.push(start(
            run_cmd(&urls, &opts("--exclusive"), &name, &program),
            &scratch,
        ));
        let plain = ["--ttl", TTL_ARG, "--wait", "30s"];
        runs.push(start(run_cmd(&urls, &plain, &name, &program), &scratch));
    }
    for run in runs {
        run.wait(LIMIT).expect(0);
    }
    let log = fs::read_to_string(scratch.path("log")).unwrap();
    let lines: Vec<Vec<&str>> = log
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(lines.len(), 7, "every run ran once: {log}");
    for line in &lines {
        match line[..] {
            ["w", inside, writers] => assert_eq!((inside, writers), ("1", "1"), "{log}"),
            ["r", _, writers] => assert_eq!(writers, "0", "a reader beside a writer: {log}"),
            _ => panic!("unexpected line in {log}"),
        }
    }
    let both = ["--shared", "--exclusive"];
    (output(run_cmd(&urls, &both, &name, &["true"])).expect(64)).stderr_has("cannot be used");
}

#[test]
fn status_shared_shows_the_readers_of_a_read_write_lock() {
    let (_cluster, urls, scratch, name) = setup(TTL, "rw-status");
    let ready = scratch.path("ready");
    let _group = KillGroup(ready.clone());
    let _reader = hold_sleeping(
        &urls,
        &scratch,
        &["--ttl", TTL_ARG, "--shared"],
        &name,
        &ready,
    );
    (output(cli(&urls, ["status", "--shared", &name])).expect(0))
        .stdout_has("readers: 1 on a majority")
        .stdout_has("on 3 of 3 nodes")
        .stdout_has(&format!("{name}: free"));
    (output(cli(&urls, ["status", "--shared", "--json", &name])).expect(0))
        .stdout_has(r#""readers":[{"holder":{"#)
        .stdout_has(r#""nodes":3"#);
    // One name, one lock: seen as a lock, it is held by its readers.
    (output(cli(&urls, ["status", &name])).expect(0))
        .stdout_has(&format!("{name}: held"))
        .stdout_has("held by readers (see status --shared)");
}

#[test]
fn a_killed_shared_run_delays_an_exclusive_run_by_its_ttl_only() {
    let (_cluster, urls, scratch, name) = setup(TTL, "killed-reader");
    let ready = scratch.path("ready");
    let _group = KillGroup(ready.clone());
    let reader = hold_sleeping(
        &urls,
        &scratch,
        &["--ttl", TTL_ARG, "--shared"],
        &name,
        &ready,
    );
    // Killed outright: no release, no extension; its program goes with it.
    reader.signal(Signal::SIGKILL);
    drop(_group);
    let started = Instant::now();
    let opts = ["--ttl", TTL_ARG, "--wait", "30s", "--exclusive"];
    output(run_cmd(&urls, &opts, &name, &["true"])).expect(0);
    let waited = started.elapsed();
    assert!(
        waited < TTL + Duration::from_secs(4),
        "waited {waited:?}, TTL {TTL:?}"
    );
}

/// A waiting `--exclusive` run that is killed leaves an intent that keeps new `--shared`
/// runs out for a few retry periods only (see `RetryPolicy::intent_lifetime`), not for
/// the writer's TTL.
#[test]
fn a_killed_waiting_writer_keeps_readers_out_briefly_only() {
    let (cluster, urls, scratch, name) = setup(TTL, "killed-writer");
    let ready = scratch.path("ready");
    let _group = KillGroup(ready.clone());
    let stop = scratch.sh("stop");
    let body = format!("while [ ! -e {stop} ]; do sleep 0.02; done");
    let shared = ["--ttl", TTL_ARG, "--shared"];
    let reader = hold(&urls, &scratch, &shared, &name, &ready, "", &body);
    let exclusive = ["--ttl", "30s", "--wait", "30s", "--exclusive"];
    let writer = start(run_cmd(&urls, &exclusive, &name, &["true"]), &scratch);
    wait_until(LIMIT, "the waiting writer's intent", || {
        !cluster.keys_everywhere("quorum-lock:intent:*").is_empty()
    });
    writer.signal(Signal::SIGKILL);
    let killed = writer.wait(LIMIT);
    assert!(killed.status.code().is_none(), "killed: {killed:#?}");
    fs::write(&stop, "").unwrap();
    reader.wait(LIMIT).expect(0);
    let started = Instant::now();
    let next = ["--ttl", TTL_ARG, "--shared", "--wait", "10s"];
    output(run_cmd(&urls, &next, &name, &["true"])).expect(0);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "readers kept out {waited:?}"
    );
}

#[test]
fn a_run_with_another_permit_count_is_refused_while_one_holds() {
    let (_cluster, urls, scratch, name) = setup(TTL, "permit-counts");
    let ready = scratch.path("ready");
    let _group = KillGroup(ready.clone());
    let two = ["--ttl", TTL_ARG, "--permits", "2"];
    let _holder = hold_sleeping(&urls, &scratch, &two, &name, &ready);
    let three = ["--ttl", TTL_ARG, "--wait", "5s", "--permits", "3"];
    (output(run_cmd(&urls, &three, &name, &["true"])).expect(64)).stderr_has("record 2 permits");
}

#[test]
fn no_wait_against_a_held_lock_exits_75_at_once() {
    let (_cluster, urls, scratch, resource) = setup(TTL, "held");
    let ready = scratch.path("ready");
    let holder = hold_sleeping(&urls, &scratch, &["--ttl", TTL_ARG], &resource, &ready);

    let ran = scratch.path("ran");
    let no_wait = ["--ttl", TTL_ARG, "--no-wait"];
    let touch = ["touch", ran.to_str().unwrap()];
    let done = output(run_cmd(&urls, &no_wait, &resource, &touch));
    done.expect(75)
        .stderr_has("held elsewhere")
        .stderr_has("held by another owner");
    assert!(done.elapsed < Duration::from_secs(5), "{done:#?}");
    assert!(!ran.exists(), "the program must not run without the lock");

    // With a short wait it gives up with 75 too, after about the wait.
    let done = output(cli(
        &urls,
        [
            "run", "--ttl", TTL_ARG, "--wait", "700ms", &resource, "--", "true",
        ],
    ));
    done.expect(75).stderr_has("within 700ms");
    assert!(done.elapsed >= Duration::from_millis(600), "{done:#?}");

    holder.signal(Signal::SIGTERM);
    holder.wait(LIMIT).expect(128 + 15);
}

// ---------------------------------------------------------------------------------------
// The program

/// An operator lists a member under Sentinel in `QUORUM_LOCK_NODES` (its sentinels
/// separated by commas, like the members): a run holds the lock on the master the
/// sentinels name, with `--replica-acks 1` also on its replica before the program starts,
/// and `doctor` names that master.
#[test]
fn a_member_under_sentinel_in_the_node_list() {
    let topology = common::topology::SentinelTopology::start(1, 3);
    let urls = [topology.member_url()];
    let resource = unique("cli-sentinel");
    let key_there = format!(
        "redis-cli -p {} exists {resource} | grep -qx 1",
        topology.server(0).port()
    );
    output(run_cmd(
        &urls,
        &["--ttl", TTL_ARG],
        &resource,
        &["sh", "-c", &key_there],
    ))
    .expect(0);
    // With --replica-acks the program starts only once the replica has the lock.
    let on_replica = format!(
        "redis-cli -p {} exists {resource} | grep -qx 1",
        topology.server(1).port()
    );
    output(run_cmd(
        &urls,
        &["--ttl", TTL_ARG, "--replica-acks", "1"],
        &resource,
        &["sh", "-c", &on_replica],
    ))
    .expect(0);
    let master = format!("127.0.0.1:{}", topology.server(0).port());
    output(cli(&urls, ["doctor"])).expect(0).stdout_has(&master);
}

/// An operator lists a Redis Cluster as one member (its seeds separated by commas): a
/// run holds the lock on the shard master that owns the resource's slot, a second run
/// with `--no-wait` is refused meanwhile (exit 75), and `doctor` lists the shards.
#[test]
fn a_redis_cluster_in_the_node_list() {
    let cluster = common::topology::RedisClusterTopology::start(3, 0);
    let seeds = format!(
        "redis+cluster://127.0.0.1:{},127.0.0.1:{}",
        cluster.node(0).port(),
        cluster.node(1).port()
    );
    let urls = [seeds];
    let resource = unique("cli-cluster");
    let owner = cluster.node(cluster.master_for_key(&resource)).port();
    let key_there = format!("redis-cli -p {owner} exists {resource} | grep -qx 1");
    output(run_cmd(
        &urls,
        &["--ttl", TTL_ARG],
        &resource,
        &["sh", "-c", &key_there],
    ))
    .expect(0);
    let scratch = Scratch::new();
    let pid_file = scratch.path("pid");
    let args = ["--ttl", TTL_ARG];
    let holder = hold_sleeping(&urls, &scratch, &args, &resource, &pid_file);
    output(run_cmd(
        &urls,
        &["--ttl", TTL_ARG, "--no-wait"],
        &resource,
        &["true"],
    ))
    .expect(75);
    holder.signal(Signal::SIGTERM);
    holder.wait(LIMIT).expect(128 + 15);
    output(cli(&urls, ["doctor"]))
        .expect(0)
        .stdout_has("cluster of 3 shards, 0 replicas");
}

#[test]
fn program_status_and_environment_pass_through() {
    let (_cluster, urls, scratch, resource) = setup(TTL, "status");
    let run = |program: &[&str]| {
        let mut args = vec!["run", "--ttl", TTL_ARG, resource.as_str(), "--"];
        args.extend_from_slice(program);
        output(cli(&urls, &args))
    };

    run(&["true"]).expect(0);
    run(&["sh", "-c", "exit 3"]).expect(3);
    run(&["sh", "-c", "exit 255"]).expect(255);
    // Killed by a signal: 128 + its number.
    run(&["sh", "-c", "kill -9 $$"]).expect(128 + 9);
    // Arguments arrive exactly as given: no shell in between.
    let args_file = scratch.sh("args");
    run(&[
        "sh",
        "-c",
        "printf '%s|' \"$@\" > \"$0\"",
        &args_file,
        "a b",
        "*",
        "$HOME",
        "",
    ])
    .expect(0);
    assert_eq!(fs::read_to_string(&args_file).unwrap(), "a b|*|$HOME||");
    // Programs that cannot start: 127 not found, 126 not executable; the lock is released.
    run(&["/nonexistent/program"])
        .expect(127)
        .stderr_has("/nonexistent/program");
    run(&[args_file.as_str()]).expect(126);
    assert_eq!(verdict(&urls, &resource), "free");

    // The environment: the resource, and the fencing token only with --fencing.
    let env_file = scratch.sh("env");
    let show =
        format!("echo \"$QUORUM_LOCK_RESOURCE ${{QUORUM_LOCK_FENCING_TOKEN-none}}\" >> {env_file}");
    run(&["sh", "-c", &show]).expect(0);
    for _ in 0..2 {
        output(cli(
            &urls,
            [
                "run",
                "--ttl",
                TTL_ARG,
                "--fencing",
                &resource,
                "--",
                "sh",
                "-c",
                &show,
            ],
        ))
        .expect(0);
    }
    let mut stale = ql(&urls);
    stale
        .env("QUORUM_LOCK_FENCING_TOKEN", "999")
        .args(["run", "--ttl", TTL_ARG, &resource, "--", "sh", "-c", &show]);
    output(stale).expect(0);
    let lines: Vec<String> = fs::read_to_string(&env_file)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[0], format!("{resource} none"));
    assert_eq!(
        lines[3],
        format!("{resource} none"),
        "no stale token passed on"
    );
    let token = |line: &str| -> u64 {
        line.rsplit(' ')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("no fencing token in {line:?}"))
    };
    assert!(
        token(&lines[2]) > token(&lines[1]),
        "fencing tokens grow: {lines:?}"
    );
}

#[test]
fn a_program_outliving_several_ttls_keeps_the_lock() {
    let (_cluster, urls, scratch, resource) = setup(TTL, "long");
    let ready = scratch.path("ready");
    let mut holder = hold(
        &urls,
        &scratch,
        &["--ttl", TTL_ARG],
        &resource,
        &ready,
        "",
        "sleep 6.5",
    );
    let started = Instant::now();
    let mut checks = 0;
    while started.elapsed() < Duration::from_millis(6000) && holder.is_running() {
        assert_eq!(
            verdict(&urls, &resource),
            "held",
            "after {:?}",
            started.elapsed()
        );
        let no_wait = ["--ttl", TTL_ARG, "--no-wait"];
        let done = output(run_cmd(&urls, &no_wait, &resource, &["true"]));
        done.expect(75);
        checks += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        started.elapsed() >= Duration::from_millis(6000),
        "holder ended early"
    );
    assert!(checks >= 6, "only {checks} checks");
    holder.wait(LIMIT).expect(0);
    assert_eq!(verdict(&urls, &resource), "free");
}

#[test]
fn losing_the_majority_terminates_the_program_and_exits_70() {
    let (cluster, urls, scratch, resource) = setup(TTL, "lost");
    let pid_file = scratch.path("pid");
    let holder = hold_sleeping(
        &urls,
        &scratch,
        &["--ttl", TTL_ARG, "--grace", "1s"],
        &resource,
        &pid_file,
    );
    let pid = read_pid(&pid_file);
    let paused = Instant::now();
    cluster.nodes[0].pause();
    cluster.nodes[1].pause();
    let done = holder.wait(LIMIT);
    cluster.nodes[0].resume();
    cluster.nodes[1].resume();
    done.expect(70)
        .stderr_has("could not be extended in time (last attempt: ")
        .stderr_has("with 1.1s of validity left; the program's tree was sent SIGTERM ")
        .stderr_has("before the lock's validity end; the program was killed by SIGTERM; ");
    // Within the TTL (the lock's validity) plus a little; never the grace period.
    assert!(
        paused.elapsed() < Duration::from_secs(8),
        "took {:?}",
        paused.elapsed()
    );
    assert!(!pid_alive(pid), "program {pid} still running");
    assert_eq!(done.stderr.lines().count(), 1, "one line: {done:#?}");
}

#[test]
fn a_program_ignoring_sigterm_is_killed_after_the_grace_period() {
    let (cluster, urls, scratch, resource) = setup(TTL, "stubborn");
    let pid_file = scratch.path("pid");
    let _net = KillGroup(pid_file.clone());
    let holder = hold(
        &urls,
        &scratch,
        &["--ttl", TTL_ARG, "--grace", "500ms"],
        &resource,
        &pid_file,
        "trap '' TERM;",
        "while :; do sleep 0.1; done",
    );
    let pid = read_pid(&pid_file);
    // Another owner takes the lock (an operator's forced release, then a new holder).
    output(cli(&urls, ["release", "--force", &resource])).expect(0);
    for node in &cluster.nodes {
        set(node, &resource, "intruder", 60_000);
    }
    let done = holder.wait(LIMIT);
    done.expect(70)
        .stderr_has("no longer holds our token")
        .stderr_has("then SIGKILL ")
        .stderr_has(" later (500ms grace period), ")
        // The shell's `sleep` may be reaped after the shell itself, which the message
        // counts between these two parts.
        .stderr_has("the program was killed by SIGKILL")
        .stderr_has("; its whole tree was seen gone ");
    assert!(!pid_alive(pid), "program {pid} still running");
    // The other owner's lock is untouched.
    assert!(status_json(&urls, &resource).contains("\"owner\":\"intruder\""));
}

/// The first moment `pid` is seen ended, polling every millisecond (at most [`LIMIT`]).
fn ended_at(pid: i32) -> Instant {
    let start = Instant::now();
    while !has_ended(pid) {
        assert!(start.elapsed() < LIMIT, "program {pid} still running");
        std::thread::sleep(Duration::from_millis(1));
    }
    Instant::now()
}

/// The latest moment the lock's validity can end, from what the nodes report: `PTTL` of
/// the key on every node that has it (read after `Instant::now()` is taken, so each key
/// expires no earlier than that instant plus its `PTTL`), the earliest of them, less the
/// drift allowance the client keeps (`ttl / 100 + 2 ms`). The client's own deadline comes
/// earlier still, by the time its last acquisition or extension took.
fn validity_end(cluster: &Cluster, key: &str, ttl: Duration) -> Instant {
    let before = Instant::now();
    let ttls: Vec<u64> = cluster
        .nodes
        .iter()
        .filter_map(|node| {
            let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut node.conn()).unwrap();
            u64::try_from(pttl).ok()
        })
        .collect();
    assert!(ttls.len() >= 2, "the key is on a majority: {ttls:?}");
    let earliest = before + Duration::from_millis(*ttls.iter().min().unwrap());
    earliest - (ttl / 100 + Duration::from_millis(2))
}

/// `quorum-lock run` of a second holder, waiting for `resource`; its program prints the
/// state of process `pid` (nothing once it is gone) and `taken`.
fn second_holder(urls: &[String], scratch: &Scratch, resource: &str, pid: i32) -> Running {
    let script = format!("cut -d' ' -f3 /proc/{pid}/stat 2>/dev/null; echo taken");
    let (wait, program) = (["--ttl", TTL_ARG, "--wait", "30s"], ["sh", "-c", &script]);
    start(run_cmd(urls, &wait, resource, &program), scratch)
}

/// A program that ignores SIGTERM under `args`, on `urls` (the nodes or proxies in front
/// of them): returns its pid, the first `quorum-lock` (the lock held) and a safety net.
fn stubborn(
    urls: &[String],
    scratch: &Scratch,
    args: &[&str],
    resource: &str,
) -> (i32, Running, KillGroup) {
    let pid_file = scratch.path(&unique("pid"));
    let holder = hold(
        urls,
        scratch,
        args,
        resource,
        &pid_file,
        "trap '' TERM;",
        "while :; do sleep 0.05; done",
    );
    (read_pid(&pid_file), holder, KillGroup(pid_file))
}

/// The moment program `pid` is seen ended, checked to come before the latest end of the
/// validity of the lock on `key` (taken with `ttl`) that the nodes of `cluster` report.
fn ended_within_validity(cluster: &Cluster, key: &str, ttl: Duration, pid: i32) -> Instant {
    let end = validity_end(cluster, key, ttl);
    let ended = ended_at(pid);
    assert!(
        ended < end,
        "the program ended {:?} after the lock's validity",
        ended - end
    );
    println!(
        "the program ended {:?} before the validity's latest end",
        end - ended
    );
    ended
}

/// The second holder got the lock after the first program had ended, without a word on
/// stderr although it waited more than a second (stderr is not a terminal).
#[track_caller]
fn took_over_cleanly(second: Running, first_ended: Instant) {
    assert!(
        second.started < first_ended,
        "it waited while the first held the lock"
    );
    let done = second.wait(LIMIT);
    done.expect(0);
    assert_eq!(
        done.stdout, "taken\n",
        "the first program was still there: {done:#?}"
    );
    assert_eq!(
        done.stderr, "",
        "no progress lines without a terminal: {done:#?}"
    );
    assert!(done.elapsed > Duration::from_secs(1), "{done:#?}");
}

#[test]
fn a_program_ignoring_sigterm_is_dead_before_the_validity_ends_with_no_extend() {
    let (cluster, urls, scratch, resource) = setup(TTL, "deadline");
    let (pid, holder, _net) = stubborn(
        &urls,
        &scratch,
        &["--ttl", TTL_ARG, "--no-extend", "--grace", "500ms"],
        &resource,
    );
    let second = second_holder(&urls, &scratch, &resource, pid);
    let ended = ended_within_validity(&cluster, &resource, TTL, pid);
    holder
        .wait(LIMIT)
        .expect(70)
        .stderr_has("the program outlived --ttl 2s with --no-extend")
        .stderr_has(" later (500ms grace period), ")
        .stderr_has("its whole tree was seen gone ");
    took_over_cleanly(second, ended);
}

#[test]
fn a_program_ignoring_sigterm_is_dead_before_the_validity_ends_when_extensions_fail() {
    // Long enough that the first extension comes well after the partition below.
    let ttl = Duration::from_secs(5);
    let cluster = cluster(ttl);
    let urls = cluster.urls();
    let proxies: Vec<FaultProxy> = cluster
        .nodes
        .iter()
        .map(|n| FaultProxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], n.port()))))
        .collect();
    let via: Vec<String> = proxies.iter().map(FaultProxy::url).collect();
    let scratch = Scratch::new();
    let resource = unique("at-risk");
    let (pid, holder, _net) =
        stubborn(&via, &scratch, &["--ttl", "5s", "--grace", "1s"], &resource);
    // The holder's link to every node goes silent: its extensions time out, while the
    // nodes expire its key on their own and the second holder reaches them directly.
    for proxy in &proxies {
        proxy.set_link(Link::Blackhole);
    }
    let second = second_holder(&urls, &scratch, &resource, pid);
    let ended = ended_within_validity(&cluster, &resource, ttl, pid);
    holder
        .wait(LIMIT)
        .expect(70)
        .stderr_has("could not be extended in time (last attempt: ")
        .stderr_has("with 1.1s of validity left")
        .stderr_has(" later (1s grace period), ");
    took_over_cleanly(second, ended);
}

#[test]
fn a_long_wait_shows_the_holder_on_a_terminal_only() {
    let (_cluster, urls, scratch, resource) = setup(TTL, "progress");
    let (ready, go) = (scratch.path("ready"), scratch.path("go"));
    let holder = hold(
        &urls,
        &scratch,
        &["--ttl", TTL_ARG],
        &resource,
        &ready,
        "",
        &format!("while [ ! -e {} ]; do sleep 0.05; done", go.display()),
    );
    let json = status_json(&urls, &resource);
    let owner = json
        .split("\"owner\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .to_owned();
    // Two waiters: one with stderr in a file, one on a terminal (a pty from `script`).
    let wait = ["--ttl", TTL_ARG, "--wait", "30s"];
    let plain = start(run_cmd(&urls, &wait, &resource, &["true"]), &scratch);
    let inner = format!(
        "{} --node-timeout {NODE_TIMEOUT_ARG} run --ttl {TTL_ARG} --wait 30s {resource} -- true",
        bin()
    );
    let mut on_tty = Command::new("script");
    on_tty
        .args(["-qefc", &inner, "/dev/null"])
        .env("SHELL", "/bin/sh")
        .env("QUORUM_LOCK_NODES", urls.join(","))
        .stdin(Stdio::null());
    let tty = start(on_tty, &scratch);
    assert!(
        owner.ends_with(&format!(";p={};n=sh", holder.pid())),
        "{json}"
    );
    let shown = format!(
        " so far): held by {}:{} (sh) for ",
        host_name(),
        holder.pid()
    );
    wait_until(
        Duration::from_secs(20),
        "a progress line on the terminal",
        || fs::read_to_string(&tty.out).is_ok_and(|out| out.contains(" unless it is extended")),
    );
    fs::write(&go, "").unwrap();
    holder.wait(LIMIT).expect(0);
    let done = tty.wait(LIMIT);
    done.expect(0);
    // The first line after a second's wait, e.g. `(1.01s so far)`.
    let first = done.stdout.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&format!("quorum-lock: waiting for \"{resource}\" (1")),
        "{done:#?}"
    );
    assert!(first.contains(&shown), "{done:#?}");
    assert!(first.contains(", its key expires in "), "{done:#?}");
    assert!(first.ends_with("s unless it is extended"), "{done:#?}");
    // It started first and ended after the terminal's line: it waited past the second too.
    let done = plain.wait(LIMIT);
    println!("{done:#?}");
    done.expect(0);
    assert!(done.elapsed > Duration::from_secs(1), "{done:#?}");
    assert_eq!(
        done.stderr, "",
        "no progress lines without a terminal: {done:#?}"
    );
}

#[test]
fn no_extend_makes_the_ttl_a_time_limit() {
    let cluster = cluster(TTL);
    let urls = cluster.urls();
    let resource = unique("noextend");
    let no_extend = ["--ttl", TTL_ARG, "--no-extend"];
    let done = output(run_cmd(&urls, &no_extend, &resource, &["sleep", "20"]));
    done.expect(70).stderr_has(&format!(
        "was about to expire: the program outlived --ttl {TTL_ARG} with --no-extend"
    ));
    assert!(done.elapsed < Duration::from_secs(10), "{done:#?}");
    output(run_cmd(&urls, &no_extend, &resource, &["sleep", "0.2"])).expect(0);
}

#[test]
fn sigterm_reaches_the_program_and_the_lock_is_released() {
    // Long enough that only a release, not expiry, frees the lock before it is checked.
    let ttl = Duration::from_secs(5);
    let (_cluster, urls, scratch, resource) = setup(ttl, "sigterm");
    let ready = scratch.path("ready");
    let got = scratch.path("got");
    let holder = hold(
        &urls,
        &scratch,
        &["--ttl", "5s"],
        &resource,
        &ready,
        &format!("trap 'echo TERM > {}; exit 7' TERM;", got.display()),
        "while :; do sleep 0.1; done",
    );
    assert_eq!(verdict(&urls, &resource), "held");
    holder.signal(Signal::SIGTERM);
    let done = holder.wait(LIMIT);
    done.expect(7);
    assert_eq!(fs::read_to_string(&got).unwrap().trim(), "TERM");
    assert_eq!(
        verdict(&urls, &resource),
        "free",
        "released, not left to expire"
    );

    // SIGINT too; a program that dies of it gives 128 + 2.
    let pid_file = scratch.path("pid");
    let holder = hold_sleeping(&urls, &scratch, &["--ttl", "5s"], &resource, &pid_file);
    holder.signal(Signal::SIGINT);
    holder.wait(LIMIT).expect(128 + 2);
    assert!(!pid_alive(read_pid(&pid_file)));
    assert_eq!(verdict(&urls, &resource), "free");
}

// ---------------------------------------------------------------------------------------
// Lock tickets

/// The ticket `run --detach` printed, from its stdout.
fn ticket_of(done: &Done) -> String {
    let line = done.stdout.trim();
    assert!(
        line.starts_with("qlt1:") && !line.contains('\n'),
        "{done:#?}"
    );
    line.to_owned()
}

/// A lock handed from one process to others: `run --detach` exits with it held and prints
/// a ticket; `run --ticket -` (read from stdin) runs a program under it with its fencing
/// token and releases it; `release --ticket` releases another; a used ticket is refused
/// (70), a malformed one is a usage error that does not repeat it (64).
#[test]
fn tickets_hand_a_held_lock_to_another_process() {
    let (_cluster, urls, scratch, resource) = setup(TTL, "ticket");
    let detached = output(cli(
        &urls,
        ["run", "--detach", "--fencing", "--ttl", "20s", &resource],
    ));
    let ticket = ticket_of(detached.expect(0));
    assert!(
        verdict(&urls, &resource) == "held",
        "held after the detaching process exited"
    );
    let json = status_json(&urls, &resource);
    assert!(json.contains(r#""program":"quorum-lock","#), "{json}");

    // Adopted from stdin by a process that runs a program under it.
    let ticket_file = scratch.path("ticket");
    fs::write(&ticket_file, format!("{ticket}\n")).unwrap();
    let seen = scratch.path("seen");
    let program = format!(
        "echo \"$QUORUM_LOCK_RESOURCE $QUORUM_LOCK_FENCING_TOKEN\" > {}",
        seen.display()
    );
    let mut adopt = cli(&urls, ["run", "--ticket", "-", "--", "sh", "-c", &program]);
    adopt.stdin(fs::File::open(&ticket_file).unwrap());
    output(adopt).expect(0);
    let fence = ticket.split(':').nth(4).unwrap().to_owned();
    assert_eq!(
        fs::read_to_string(&seen).unwrap().trim(),
        format!("{resource} {fence}")
    );
    assert_eq!(
        verdict(&urls, &resource),
        "free",
        "released after the program"
    );

    // A used ticket is refused; the lock stays free.
    output(cli(&urls, ["release", "--ticket", &ticket]))
        .expect(70)
        .stderr_has("no longer held");
    assert_eq!(verdict(&urls, &resource), "free");

    // `release --ticket` releases a detached lock.
    let second = ticket_of(output(cli(&urls, ["run", "--detach", &resource])).expect(0));
    output(cli(&urls, ["release", "--ticket", &second]))
        .expect(0)
        .stdout_has("released");
    assert_eq!(verdict(&urls, &resource), "free");

    // Malformed tickets and a program with --detach are usage errors.
    let forged = format!("{}x", &second[..second.len() / 2]);
    output(cli(&urls, ["release", "--ticket", &forged]))
        .expect(64)
        .stderr_has("not a lock ticket");
    assert!(
        !output(cli(&urls, ["release", "--ticket", &forged]))
            .stderr
            .contains(&forged)
    );
    output(run_cmd(&urls, &["--detach"], &resource, &["true"]))
        .expect(64)
        .stderr_has("runs no program");
}

// ---------------------------------------------------------------------------------------
// status, release --force, doctor

#[test]
fn status_and_forced_release_report_what_the_nodes_hold() {
    let (cluster, urls, scratch, resource) = setup(TTL, "inspect");
    let ready = scratch.path("ready");

    let done = output(cli(&urls, ["status", &resource]));
    done.expect(0).stdout_has(": free").stdout_has("absent");
    assert_eq!(done.stdout.matches("absent").count(), 3, "{}", done.stdout);

    let holder = hold_sleeping(&urls, &scratch, &["--ttl", TTL_ARG], &resource, &ready);
    let json = status_json(&urls, &resource);
    assert!(json.contains("\"verdict\":\"held\""), "{json}");
    // A majority at least; the last node may get its copy a moment later.
    assert!(json.matches("\"exists\":true").count() >= 2, "{json}");
    let owner = json
        .split("\"owner\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .to_owned();
    // The value: the random token, then who holds it (the `run` process, its command).
    let token = &owner[..32];
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{json}");
    let (host, pid) = (host_name(), holder.pid());
    assert!(owner.starts_with(&format!("{token};q1;t=")), "{json}");
    assert!(owner.ends_with(&format!(";p={pid};n=sh")), "{json}");
    let described = format!(
        "\"holder\":{{\"token\":\"{token}\",\"host\":\"{host}\",\"pid\":{pid},\
         \"program\":\"sh\",\"since_ms\":"
    );
    assert!(json.contains(&described), "{json}");
    let remaining = json_number(&json, "remaining_ms");
    assert!(
        remaining > 0 && remaining <= TTL.as_millis() as u64,
        "{json}"
    );
    assert!(
        json_number(&json, "held_for_ms") < LIMIT.as_millis() as u64,
        "{json}"
    );
    let done = output(cli(&urls, ["status", &resource]));
    done.expect(0)
        .stdout_has("held by a majority")
        .stdout_has(&owner[..8])
        .stdout_has(&format!("\nheld by {host}:{pid} (sh) for "))
        .stdout_has(" more\n")
        .stdout_has("exists");
    for node in &cluster.nodes {
        done.stdout_has(&format!("127.0.0.1:{}", node.port()));
    }

    // A `run` that waits for it is listed: who, since when, on which node.
    let waiter = start(
        run_cmd(&urls, &["--wait", "60s"], &resource, &["true"]),
        &scratch,
    );
    let listed = format!("waiting: 1\n  1. {host}:{} (true), listed ", waiter.pid());
    wait_until(LIMIT, "the waiter listed by status", || {
        output(cli(&urls, ["status", &resource]))
            .stdout
            .contains(&listed)
    });
    let json = status_json(&urls, &resource);
    let entry = format!(
        "\"pid\":{},\"program\":\"true\",\"listed_at_ms\":",
        waiter.pid()
    );
    assert!(json.contains(&entry), "{json}");

    // Forced release deletes it everywhere; the holder then finds its lock gone.
    output(cli(&urls, ["release", "--force", &resource]))
        .expect(0)
        .stdout_has("deleted on 3 of 3 nodes");
    holder
        .wait(LIMIT)
        .expect(70)
        .stderr_has("no longer holds our token");
    // The waiter then takes it and runs.
    waiter.wait(LIMIT).expect(0);
    output(cli(&urls, ["release", "--force", &resource]))
        .expect(0)
        .stdout_has("deleted on 0 of 3 nodes");

    // A split: two owners and a free node.
    set(&cluster.nodes[0], &resource, "owner-a", 60_000);
    set(&cluster.nodes[1], &resource, "owner-b", 60_000);
    let done = output(cli(&urls, ["status", &resource]));
    done.expect(0).stdout_has(": split").stdout_has("owner-a");
    let json = status_json(&urls, &resource);
    assert!(json.contains("\"verdict\":\"split\""), "{json}");
    assert!(json.contains("\"owner\":null"), "{json}");
    output(cli(&urls, ["release", "--force", &resource]))
        .expect(0)
        .stdout_has("deleted on 2 of 3 nodes");

    // Too few nodes answer: unknown, exit 69, quickly.
    set(&cluster.nodes[2], &resource, "owner-c", 60_000);
    cluster.nodes[0].pause();
    cluster.nodes[1].pause();
    let done = output(cli(&urls, ["status", "--json", &resource]));
    cluster.nodes[0].resume();
    cluster.nodes[1].resume();
    done.expect(69).stderr_has("not enough nodes");
    assert!(done.stdout.contains("\"verdict\":\"unknown\""), "{done:#?}");
    assert!(done.stdout.contains("\"reachable\":false"), "{done:#?}");
    assert!(done.elapsed < Duration::from_secs(5), "{done:#?}");
}

#[test]
fn key_prefix_applies_to_every_command() {
    let cluster = cluster(TTL);
    let urls = cluster.urls();
    let resource = unique("prefixed");
    set(&cluster.nodes[0], &format!("jobs:{resource}"), "x", 60_000);
    set(&cluster.nodes[1], &format!("jobs:{resource}"), "x", 60_000);
    output(cli(
        &urls,
        [
            "--key-prefix",
            "jobs:",
            "run",
            "--ttl",
            TTL_ARG,
            "--no-wait",
            &resource,
            "--",
            "true",
        ],
    ))
    .expect(75);
    // Without the prefix it is another key.
    let no_wait = ["--ttl", TTL_ARG, "--no-wait"];
    output(run_cmd(&urls, &no_wait, &resource, &["true"])).expect(0);
    output(cli(&urls, ["status", "--key-prefix", "jobs:", &resource]))
        .expect(0)
        .stdout_has(&format!("key \"jobs:{resource}\""))
        .stdout_has("held by a majority");
    output(cli(
        &urls,
        ["--key-prefix", "jobs:", "release", "--force", &resource],
    ))
    .expect(0)
    .stdout_has("deleted on 2 of 3 nodes");
}

#[test]
fn doctor_prints_the_deployment_check() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let done = output(cli(&urls, ["doctor"]));
    done.expect(0).stdout_has("3 nodes, quorum 2");
    let done = output(cli(&urls, ["doctor", "--json"]));
    done.expect(0).stdout_has("{\"quorum\":2,");
    // --nodes wins over the environment.
    let mut cmd = cli(&urls, ["--nodes", &urls[0], "doctor"]);
    cmd.env("QUORUM_LOCK_NODES", "not a url");
    output(cmd).stdout_has("1 node, quorum 1");
}

// ---------------------------------------------------------------------------------------
// Readiness for rolling restarts

/// The TTL ceiling the readiness tests give every invocation, so that waits stay short.
const CEILING_ARG: &str = "2s";

/// `cli(urls, args)` with `--ttl-ceiling 2s`.
fn with_ceiling<'a>(urls: &[String], args: impl IntoIterator<Item = &'a str>) -> Command {
    let mut cmd = cli(urls, ["--ttl-ceiling", CEILING_ARG]);
    cmd.args(args);
    cmd
}

/// `doctor --ready` says whether restarting the next node is safe. On a new ensemble after
/// one `run --ttl 1s` (`--no-extend`: a 1 s TTL leaves no room for extensions at the tests'
/// node timeout), it exits 0 with every node admitted. Right after a node restarts empty
/// it exits 75 at once (no `--wait`), the node "kept out"; with `--wait 15s` it readmits
/// the node once its quarantine is over and exits 0, the node "admitted"; then `repair`
/// exits 0.
///
/// On the code before this change `doctor --ready` (and `--ttl-ceiling`) did not exist:
/// exit 64, "unexpected argument".
#[test]
fn doctor_ready_waits_for_a_restarted_node_to_be_readmitted() {
    let mut cluster = Cluster::start(3);
    let urls = cluster.urls();
    let resource = unique("ready");
    let run = ["run", "--ttl", "1s", "--no-extend", &resource, "--", "true"];
    output(with_ceiling(&urls, run)).expect(0);

    let done = output(with_ceiling(&urls, ["doctor", "--ready"]));
    done.expect(0).stdout_has("3 of 3 nodes admitted: ready");
    assert_eq!(
        done.stdout.matches("admitted: votes").count(),
        3,
        "{done:#?}"
    );

    restart_empty(&mut cluster.nodes[1]);
    let node = format!("127.0.0.1:{}", cluster.nodes[1].port());
    let done = output(with_ceiling(&urls, ["doctor", "--ready"]));
    done.expect(75)
        .stdout_has("2 of 3 nodes admitted")
        .stderr_has("not ready");
    assert!(
        done.elapsed < Duration::from_secs(3),
        "no --wait: one check, not a wait: {done:#?}"
    );
    let line = node_line(&done.stdout, &node);
    assert!(line.contains("kept out"), "{node}: {line:?} in {done:#?}");
    eprintln!("doctor --ready after the restart:\n{}", done.stdout);

    let done = output(with_ceiling(&urls, ["doctor", "--ready", "--wait", "15s"]));
    done.expect(0).stdout_has("3 of 3 nodes admitted: ready");
    let line = node_line(&done.stdout, &node);
    assert!(line.contains("admitted"), "{node}: {line:?} in {done:#?}");
    eprintln!(
        "doctor --ready --wait 15s after the restart: {:.1?}",
        done.elapsed
    );

    output(with_ceiling(&urls, ["repair"]))
        .expect(0)
        .stdout_has("3 of 3 nodes admitted: ready");
}

/// Restarts `node` (no persistence: it comes back empty).
fn restart_empty(node: &mut RedisServer) {
    node.restart();
    assert!(node.keys("*").is_empty(), "the restart kept keys");
}

/// The line of `stdout` that starts with `node` (`host:port`).
#[track_caller]
fn node_line<'a>(stdout: &'a str, node: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.starts_with(&format!("{node} ")))
        .unwrap_or_else(|| panic!("no line for {node} in {stdout:?}"))
}

/// The commands that take no `--ttl` accept a TTL ceiling below their 30 s default TTL:
/// besides `doctor --ready` and `repair` (above), `status` and `release --force` with
/// `--ttl-ceiling 2s` do their work. Before they took the ceiling into account, all four
/// exited 64 at once ("ttl 30s is above the ttl ceiling 2s").
#[test]
fn commands_without_a_ttl_accept_a_short_ttl_ceiling() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let resource = unique("short-ceiling");
    let run = ["run", "--ttl", "1s", "--no-extend", &resource, "--", "true"];
    output(with_ceiling(&urls, run)).expect(0);
    output(with_ceiling(&urls, ["status", &resource])).expect(0);
    output(with_ceiling(&urls, ["release", "--force", &resource])).expect(0);
}
