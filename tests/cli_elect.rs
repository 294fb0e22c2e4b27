//! `quorum-lock elect` and `status --watch` against real `redis-server` processes: three
//! candidates in three processes, one leader at a time, a killed leader replaced once its
//! term ends, a resigning leader replaced at once, a listener whose lines follow the
//! leaders, a requeued leader that campaigns again, and a lock watched change by change.
// The binary exists only with the `cli` feature (on by default).
#![cfg(feature = "cli")]

mod cli_support;
mod common;

use std::fs;
use std::time::Duration;

use cli_support::*;
use common::wait_until;
use nix::sys::signal::Signal;

/// The candidates' programs: each writes `<epoch> <value> <fence> <pid>` to its file when
/// it starts leading, then sleeps (the pid is the sleep's).
fn candidate(urls: &[String], scratch: &Scratch, name: &str, c: usize) -> Running {
    let file = scratch.sh(&format!("led-{c}"));
    let script = format!(
        "echo \"$QUORUM_LOCK_EPOCH $QUORUM_LOCK_LEADER_VALUE $QUORUM_LOCK_FENCING_TOKEN $$\" \
         > {file}.tmp && mv {file}.tmp {file}; exec sleep 30"
    );
    let value = format!("candidate-{c}");
    let mut cmd = cli(
        urls,
        ["elect", "--ttl", TTL_ARG, "--value", &value, name, "--"],
    );
    cmd.args(["sh", "-c", &script]);
    start(cmd, scratch)
}

/// The candidates whose program has started, with what it was given.
fn leaders(scratch: &Scratch, candidates: usize) -> Vec<(usize, u64, String, i32)> {
    (0..candidates)
        .filter_map(|c| {
            let line = fs::read_to_string(scratch.path(&format!("led-{c}"))).ok()?;
            let mut parts = line.split_whitespace();
            let epoch: u64 = parts.next()?.parse().ok()?;
            let value = parts.next()?.to_owned();
            assert_eq!(
                parts.next(),
                Some(epoch.to_string().as_str()),
                "the fence is the epoch"
            );
            Some((c, epoch, value, parts.next()?.parse().ok()?))
        })
        .collect()
}

/// Waits until `count` candidates have led, and returns the one that leads now: every
/// earlier leader's program has ended by then.
#[track_caller]
fn leader_number(scratch: &Scratch, candidates: usize, count: usize) -> (usize, u64) {
    wait_until(Duration::from_secs(40), "the next leader", || {
        leaders(scratch, candidates).len() >= count
    });
    let led = leaders(scratch, candidates);
    assert_eq!(led.len(), count, "one leader at a time: {led:?}");
    for (c, _, value, _) in &led {
        assert_eq!(value, &format!("candidate-{c}"));
    }
    let (c, epoch, _, _) = led.iter().max_by_key(|(_, e, _, _)| *e).unwrap().clone();
    for (_, _, _, pid) in led.iter().filter(|(other, ..)| *other != c) {
        assert!(
            has_ended(*pid),
            "an earlier leader's program {pid} still runs"
        );
    }
    (c, epoch)
}

#[test]
fn candidates_in_three_processes_lead_one_at_a_time() {
    let (_cluster, urls, scratch, name) = setup(TTL, "elect");
    three_candidates_take_turns(&urls, &scratch, &name);
}

#[test]
fn candidates_lead_one_at_a_time_on_five_nodes() {
    let started = std::time::Instant::now();
    let cluster = common::Cluster::start(5);
    settle(started, TTL);
    three_candidates_take_turns(&cluster.urls(), &Scratch::new(), &common::unique("elect5"));
}

/// Three candidates and a listener on `urls`: the first leader killed, the second
/// stopped, each later leader elected with a higher epoch once the earlier program ended,
/// and the listener's lines following them.
fn three_candidates_take_turns(urls: &[String], scratch: &Scratch, name: &str) {
    let (urls, name) = (urls.to_vec(), name.to_owned());
    let listener = start(
        cli(
            &urls,
            ["elect", "--listen", "--json", "--interval", "100ms", &name],
        ),
        scratch,
    );
    let mut candidates: Vec<Running> = (0..3)
        .map(|c| candidate(&urls, scratch, &name, c))
        .collect();
    let (first, first_epoch) = leader_number(scratch, 3, 1);
    // Killed without a word: the next candidate leads once the term has ended.
    candidates[first].signal(Signal::SIGKILL);
    let (second, second_epoch) = leader_number(scratch, 3, 2);
    assert_ne!(second, first);
    assert!(second_epoch > first_epoch);
    // SIGTERM: the program ends, its term is released, and the last candidate leads.
    candidates[second].signal(Signal::SIGTERM);
    let done = candidates.remove(second).wait(LIMIT);
    assert_eq!(done.code(), 128 + Signal::SIGTERM as i32, "{done:#?}");
    let (third, third_epoch) = leader_number(scratch, 3, 3);
    assert!(third != first && third != second);
    assert!(third_epoch > second_epoch);
    wait_until(
        Duration::from_secs(20),
        "the listener to see the third leader",
        || {
            fs::read_to_string(&listener.out)
                .is_ok_and(|out| out.contains(&format!("\"epoch\":{third_epoch}")))
        },
    );
    let lines = fs::read_to_string(&listener.out).unwrap();
    let epochs: Vec<u64> = lines
        .lines()
        .filter(|l| l.contains("\"leader\":\"elected\""))
        .map(|l| {
            let after = l.split("\"epoch\":").nth(1).unwrap();
            after
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "the listener never goes back: {lines}"
    );
    assert_eq!(epochs.last(), Some(&third_epoch), "{lines}");
}

#[test]
fn elect_without_a_program_or_with_too_short_a_term_is_a_usage_error() {
    let nodes = vec!["redis://127.0.0.1:1".to_owned()];
    output(cli(&nodes, ["elect", "leader"]))
        .expect(64)
        .stderr_has("missing `-- PROGRAM");
    output(cli(&nodes, ["elect", "--listen", "--value", "x", "leader"])).expect(64);
    // A term too short to renew before the grace period is refused before any network.
    output(cli(
        &nodes,
        ["elect", "--ttl", "300ms", "leader", "--", "true"],
    ))
    .expect(64)
    .stderr_has("--ttl 300ms");
}

#[test]
fn a_requeued_leader_campaigns_again_after_losing_its_term() {
    let (cluster, urls, scratch, name) = setup(TTL, "requeue");
    let epochs = scratch.sh("epochs");
    let script = format!("echo \"$QUORUM_LOCK_EPOCH\" >> {epochs}; exec sleep 30");
    let mut cmd = cli(&urls, ["elect", "--requeue", "--ttl", TTL_ARG, &name, "--"]);
    cmd.args(["sh", "-c", &script]);
    let mut leader = start(cmd, &scratch);
    let terms = || -> Vec<u64> {
        (fs::read_to_string(scratch.path("epochs")).unwrap_or_default())
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    wait_until(Duration::from_secs(40), "the first term", || {
        terms().len() == 1
    });
    // The term vanishes behind the leader's back: its next renewal finds it gone.
    for node in &cluster.nodes {
        let _: () = redis::cmd("DEL")
            .arg(format!("quorum-lock:election:{name}"))
            .query(&mut node.conn())
            .unwrap();
    }
    wait_until(Duration::from_secs(40), "a second term", || {
        terms().len() == 2
    });
    let epochs = terms();
    assert!(epochs[1] > epochs[0], "a higher epoch: {epochs:?}");
    assert!(leader.is_running(), "still campaigning or leading");
    leader.signal(Signal::SIGTERM);
    let done = leader.wait(LIMIT);
    assert_eq!(done.code(), 128 + Signal::SIGTERM as i32, "{done:#?}");
    assert!(
        done.stderr.contains("campaigning again (--requeue)"),
        "{done:#?}"
    );
}

#[test]
fn status_watch_prints_a_line_per_change_of_holder() {
    let (_cluster, urls, scratch, resource) = setup(TTL, "watched");
    let watch = ["status", "--watch", "--interval", "100ms", &resource];
    let watcher = start(cli(&urls, watch), &scratch);
    let lines = || fs::read_to_string(&watcher.out).unwrap_or_default();
    wait_until(Duration::from_secs(20), "a first line", || {
        lines().contains("free")
    });
    let pid_file = scratch.path("holder.pid");
    let holder = hold_sleeping(&urls, &scratch, &["--ttl", TTL_ARG], &resource, &pid_file);
    wait_until(Duration::from_secs(20), "the holder's line", || {
        lines().contains("held by a majority by ")
    });
    holder.signal(Signal::SIGTERM);
    wait_until(Duration::from_secs(20), "free again", || {
        lines().lines().filter(|l| l.ends_with(": free")).count() == 2
    });
    let seen: Vec<String> = lines().lines().map(str::to_owned).collect();
    assert_eq!(
        seen.len(),
        3,
        "one line per change, none while it counts down: {seen:?}"
    );
    assert!(
        seen[1].starts_with(&format!("{resource}: held by a majority by ")),
        "{seen:?}"
    );
}

#[test]
fn a_paused_leaders_program_ends_before_the_next_leader_starts() {
    let (_cluster, urls, scratch, name) = setup(TTL, "paused");
    let mut candidates: Vec<Running> = (0..2)
        .map(|c| candidate(&urls, &scratch, &name, c))
        .collect();
    let (first, first_epoch) = leader_number(&scratch, 2, 1);
    // Frozen past its term: its watchdog stops the program before the term's validity
    // ends, and the other candidate leads only after that (checked by `leader_number`).
    candidates[first].signal(Signal::SIGSTOP);
    let (second, second_epoch) = leader_number(&scratch, 2, 2);
    assert!(second != first && second_epoch > first_epoch);
    candidates[first].signal(Signal::SIGCONT);
    let done = candidates.remove(first).wait(LIMIT);
    assert_eq!(
        done.code(),
        70,
        "the resumed leader knows it lost: {done:#?}"
    );
}

#[test]
fn elect_candidates_lists_who_waits_in_the_order_they_came() {
    let (_cluster, urls, scratch, name) = setup(TTL, "queue");
    let _first = candidate(&urls, &scratch, &name, 0);
    leader_number(&scratch, 3, 1);
    let listed = |json: bool| {
        let mut args = vec!["elect", "--candidates"];
        args.extend(json.then_some("--json"));
        args.push(&name);
        output(cli(&urls, args)).expect(0).stdout.clone()
    };
    assert_eq!(listed(false), format!("{name}: no candidate waiting\n"));
    let _second = candidate(&urls, &scratch, &name, 1);
    wait_until(Duration::from_secs(20), "the second listed", || {
        listed(false).contains("candidate-1")
    });
    let _third = candidate(&urls, &scratch, &name, 2);
    wait_until(Duration::from_secs(20), "the third listed", || {
        listed(false).contains("candidate-2")
    });
    let lines: Vec<String> = listed(true).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2, "the leader is not waiting: {lines:?}");
    assert!(lines[0].contains("\"value\":\"candidate-1\""), "{lines:?}");
    assert!(lines[1].contains("\"value\":\"candidate-2\""), "{lines:?}");
}
