//! `quorum-lock run` holds its lock for the program's whole process tree: children that
//! ignore SIGTERM, children left behind by a normal exit, children that left the program's
//! process group, and a supervisor that was stopped. Each test runs a worker that writes a
//! heartbeat (the wall clock, in nanoseconds) every 20 ms and checks it against the start
//! of a rival holder's program: a heartbeat after it would be two holders at once.
#![cfg(feature = "cli")]

mod cli_support;
mod common;

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use cli_support::*;
use common::wait_until;
use nix::sys::signal::Signal;

/// The worker's pid, once it has written it.
#[track_caller]
fn worker_pid(dir: &Scratch) -> i32 {
    let path = dir.path("worker.pid");
    wait_until(Duration::from_secs(40), "the worker to start", || {
        fs::read_to_string(&path).is_ok_and(|s| s.ends_with('\n'))
    });
    read_pid(&path)
}

/// SIGKILLs a worker when dropped, should a test fail while it still runs.
struct KillWorker(PathBuf);

impl Drop for KillWorker {
    fn drop(&mut self) {
        if let Some(pid) = fs::read_to_string(&self.0)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok())
        {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// `quorum-lock run OPTS RESOURCE -- sh -c 'LAUNCHER "<stubborn worker>" & wait'`: a shell
/// that starts a worker ignoring SIGTERM (`launcher`: `sh -c`, or `setsid sh -c` for one
/// that leaves the group) and waits. Returns the holder and, once it started, the worker's
/// pid.
fn hold_stubborn(
    urls: &[String],
    dir: &Scratch,
    opts: &[&str],
    resource: &str,
    launcher: &str,
) -> (Running, i32) {
    let script = format!("{launcher} {} & wait", quoted(&stubborn_worker(dir)));
    let holder = start(run_cmd(urls, opts, resource, &["sh", "-c", &script]), dir);
    (holder, worker_pid(dir))
}

/// The rival ran, and no heartbeat of the worker came after its program started.
#[track_caller]
fn no_heartbeat_after_the_rival_started(rival: Running, dir: &Scratch) {
    let margin = margin_before_the_rival(rival, dir);
    println!("last heartbeat {margin:?} before the rival started");
}

#[test]
fn a_child_ignoring_sigterm_is_dead_before_the_lock_expires() {
    let (_cluster, urls, dir, resource) = setup(TTL, "tree-expiry");
    let _net = KillWorker(dir.path("worker.pid"));
    let opts = ["--ttl", "2s", "--no-extend", "--grace", "300ms"];
    let (holder, worker) = hold_stubborn(&urls, &dir, &opts, &resource, "sh -c");
    let rival = start_rival(&urls, &dir, &resource);
    let done = holder.wait(LIMIT);
    assert!(
        has_ended(worker),
        "worker {worker} outlived quorum-lock: {done:#?}"
    );
    done.expect(70)
        .stderr_has("the program outlived --ttl 2s with --no-extend")
        // The worker, and the shell that launched it when it outlived the program.
        .stderr_has("the program was killed by SIGTERM, ")
        .stderr_has(" more of its processes ended after their parents")
        .stderr_has("then SIGKILL ")
        .stderr_has("its whole tree was seen gone ");
    no_heartbeat_after_the_rival_started(rival, &dir);
}

#[test]
fn a_child_ignoring_sigterm_is_dead_before_a_lost_lock_is_released() {
    let (cluster, urls, dir, resource) = setup(TTL, "tree-lost");
    let _net = KillWorker(dir.path("worker.pid"));
    let opts = ["--ttl", "2s", "--grace", "500ms"];
    let (holder, worker) = hold_stubborn(&urls, &dir, &opts, &resource, "sh -c");
    // Two of three nodes freeze: the extensions fail and the lock is at risk.
    cluster.nodes[0].pause();
    cluster.nodes[1].pause();
    let done = holder.wait(LIMIT);
    let ended = has_ended(worker);
    cluster.nodes[0].resume();
    cluster.nodes[1].resume();
    assert!(ended, "worker {worker} outlived quorum-lock: {done:#?}");
    // A busy host adds its timers' lateness to the message; the cause stays the same.
    done.expect(70)
        .stderr_has("could not be extended in time")
        .stderr_has("then SIGKILL ");
    no_heartbeat_after_the_rival_started(start_rival(&urls, &dir, &resource), &dir);
}

#[test]
fn a_child_that_left_the_process_group_is_stopped_too() {
    let (_cluster, urls, dir, resource) = setup(TTL, "tree-setsid");
    let _net = KillWorker(dir.path("worker.pid"));
    let opts = ["--ttl", "2s", "--no-extend", "--grace", "300ms"];
    let (holder, pid) = hold_stubborn(&urls, &dir, &opts, &resource, "setsid sh -c");
    let rival = start_rival(&urls, &dir, &resource);
    let done = holder.wait(LIMIT);
    assert!(
        has_ended(pid),
        "worker {pid} outlived quorum-lock: {done:#?}"
    );
    done.expect(70).stderr_has("then SIGKILL ");
    no_heartbeat_after_the_rival_started(rival, &dir);
}

/// A program that writes its pid to `program.pid`, starts a child and exits 0 once the child
/// wrote its pid to `worker.pid`; the child runs until `release` exists.
fn leaving_a_child(dir: &Scratch) -> String {
    let child = format!(
        "echo $$ > {pid}; while [ ! -e {release} ]; do sleep 0.02; done",
        pid = dir.sh("worker.pid"),
        release = dir.sh("release"),
    );
    // The program exits only once its child wrote its pid: a child stopped before that
    // (by --stop-leftovers) would leave no pid to check.
    format!(
        "echo $$ > {program}; sh -c {} & while [ ! -s {pid} ]; do sleep 0.01; done; exit 0",
        quoted(&child),
        program = dir.sh("program.pid"),
        pid = dir.sh("worker.pid"),
    )
}

#[test]
fn a_child_left_behind_by_a_normal_exit_keeps_the_lock_until_it_ends() {
    let (_cluster, urls, dir, resource) = setup(TTL, "tree-left");
    let _net = KillWorker(dir.path("worker.pid"));
    let script = leaving_a_child(&dir);
    let holder = start(
        run_cmd(&urls, &["--ttl", "2s"], &resource, &["sh", "-c", &script]),
        &dir,
    );
    let worker = worker_pid(&dir);
    let program = read_pid(&dir.path("program.pid"));
    wait_until(LIMIT, "the program to exit", || has_ended(program));
    // Longer than a TTL after the program's exit, its child still holds the lock.
    std::thread::sleep(TTL + Duration::from_millis(500));
    output(run_cmd(&urls, &["--no-wait"], &resource, &["true"]))
        .expect(75)
        .stderr_has("held elsewhere");
    assert!(!has_ended(worker), "the child still runs");
    fs::write(dir.path("release"), "").unwrap();
    holder.wait(LIMIT).expect(0);
    assert!(has_ended(worker));
    output(run_cmd(&urls, &["--no-wait"], &resource, &["true"])).expect(0);
}

#[test]
fn stop_leftovers_stops_what_the_program_left_behind() {
    let (_cluster, urls, dir, resource) = setup(TTL, "tree-stop");
    let _net = KillWorker(dir.path("worker.pid"));
    let script = leaving_a_child(&dir);
    let opts = ["--ttl", "2s", "--stop-leftovers"];
    let holder = start(
        run_cmd(&urls, &opts, &resource, &["sh", "-c", &script]),
        &dir,
    );
    let worker = worker_pid(&dir);
    let done = holder.wait(LIMIT);
    assert!(has_ended(worker), "the child was stopped: {done:#?}");
    done.expect(0);
    assert_eq!(done.stderr, "", "{done:#?}");
    output(run_cmd(&urls, &["--no-wait"], &resource, &["true"])).expect(0);
}

#[test]
fn a_stopped_supervisor_cannot_outlive_its_lock() {
    let (_cluster, urls, dir, resource) = setup(TTL, "tree-stopped");
    let _net = KillWorker(dir.path("worker.pid"));
    let (holder, worker) = hold_stubborn(&urls, &dir, &["--ttl", "2s"], &resource, "sh -c");
    // A debugger, SIGSTOP or a frozen cgroup stops quorum-lock alone: no extension, no
    // signal from it. The watchdog still kills the tree before the lock's validity ends.
    holder.signal(Signal::SIGSTOP);
    let rival = start_rival(&urls, &dir, &resource);
    wait_until(LIMIT, "the rival to take the lock", || {
        dir.path("rival").exists()
    });
    let ended = has_ended(worker);
    holder.signal(Signal::SIGCONT);
    assert!(
        ended,
        "worker {worker} ran on while its supervisor was stopped"
    );
    no_heartbeat_after_the_rival_started(rival, &dir);
    holder
        .wait(LIMIT)
        .expect(70)
        .stderr_has("watchdog: quorum-lock (pid ")
        .stderr_has("sent SIGKILL to the program's tree ")
        .stderr_has("its watchdog sent SIGKILL to the program's tree");
}

#[test]
fn a_stall_that_cuts_the_run_short_is_named_as_such() {
    let (_cluster, urls, dir, resource) = setup(TTL, "tree-stall");
    let pid_file = dir.path("program.pid");
    let opts = ["--no-extend", "--ttl", TTL_ARG];
    let holder = hold_sleeping(&urls, &dir, &opts, &resource, &pid_file);
    // A stall of quorum-lock alone, well inside the TTL: its timers come back 700 ms
    // late, the kill margin grows with that, and the program is stopped early.
    holder.signal(Signal::SIGSTOP);
    std::thread::sleep(Duration::from_millis(700));
    holder.signal(Signal::SIGCONT);
    let done = holder.wait(LIMIT);
    done.expect(70)
        .stderr_has("had too little validity left to stop the program safely")
        .stderr_has("timers ran up to");
    assert!(!done.stderr.contains("outlived --ttl"), "{done:#?}");
}
