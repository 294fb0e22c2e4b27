//! Least privilege against real `redis-server` processes: every key and channel under the
//! key prefix, a user confined to it by the README's own `ACL SETUSER` line, ACL refusals
//! as `Error::Permission` (exit 77 from the CLI), and foreign data at a lock key reported
//! as a wrong type, not as another holder.

mod common;

use std::time::Duration;

use common::{Cluster, RedisServer, builder, eventually, unique};
use quorum_lock::{Error, NodeOutcome, Redlock, Verdict};

const TTL: Duration = Duration::from_secs(10);
/// The prefix and password of the README's line.
const PREFIX: &str = "myapp:locks:";
const PASSWORD: &str = "CHANGE-ME";

/// The `ACL SETUSER` line of the README's "Least privilege" section, as arguments.
fn readme_acl_line() -> Vec<String> {
    let readme = include_str!("../README.md");
    let line = readme
        .lines()
        .find(|l| l.starts_with("ACL SETUSER "))
        .expect("the README gives an ACL SETUSER line");
    line.split_whitespace().map(str::to_owned).collect()
}

/// Creates the README's user on every node, less the rules in `without`.
fn create_user(cluster: &Cluster, without: &[&str]) {
    let line = readme_acl_line();
    assert_eq!(line[2], "locker", "{line:?}");
    for node in &cluster.nodes {
        let mut cmd = redis::cmd("ACL");
        for arg in line[1..].iter().filter(|a| !without.contains(&a.as_str())) {
            cmd.arg(arg);
        }
        let () = cmd
            .query(&mut node.conn())
            .unwrap_or_else(|e| panic!("{line:?}: {e}"));
    }
}

/// A client connecting as the README's user.
fn client_as_user(cluster: &Cluster) -> Redlock {
    let urls: Vec<String> = (cluster.nodes.iter())
        .map(|n| format!("redis://locker:{PASSWORD}@127.0.0.1:{}", n.port()))
        .collect();
    // Restart quarantine on, as a fencing client must have it on nodes without
    // `appendfsync always`: the user's ACL allows what it needs too.
    builder(&urls)
        .restart_quarantine(true)
        .key_prefix(PREFIX)
        .retry_delay(Duration::from_millis(2))
        .max_retry_delay(Duration::from_millis(20))
        .build()
        .expect("valid configuration")
}

fn get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

/// Every key on every node, as `(node, key)`, but the node-wide keys of restart quarantine
/// (the ensemble record and the node's marker, kept for the node's lifetime).
fn all_keys(cluster: &Cluster) -> Vec<(usize, String)> {
    let node_wide = format!("{PREFIX}quorum-lock:node:");
    cluster
        .keys_everywhere("*")
        .into_iter()
        .filter(|(_, k)| !k.starts_with(&node_wide))
        .collect()
}

#[tokio::test]
async fn least_privilege_user_runs_the_read_write_lock() {
    let cluster = Cluster::start(3);
    create_user(&cluster, &[]);
    let (readers, writer) = (client_as_user(&cluster), client_as_user(&cluster));
    let name = unique("least-rw");
    let rwlock = readers.rwlock(&name).expect("a name");
    let reading = rwlock.read(TTL).await.expect("read as the user");
    reading
        .extend(TTL)
        .await
        .expect("extend a reader as the user");
    let status = rwlock.status().await.expect("status as the user");
    assert_eq!(status.readers.len(), 1, "{status:?}");
    let writing = tokio::spawn(async move {
        let rwlock = writer.rwlock(&name).expect("a name");
        let guard = rwlock
            .write(TTL)
            .fenced()
            .wait(Duration::from_secs(20))
            .await;
        guard
            .expect("write as the user, after the reader")
            .release()
            .await
    });
    reading
        .release()
        .await
        .expect("release a reader as the user");
    writing
        .await
        .unwrap()
        .expect("release the writer as the user");
    eventually(
        Duration::from_secs(10),
        "nothing left but the counter",
        || (all_keys(&cluster).iter()).all(|(_, k)| k.contains("quorum-lock:fence:")),
    )
    .await;
}

#[tokio::test]
async fn least_privilege_user_runs_the_core_scenarios() {
    let cluster = Cluster::start(3);
    create_user(&cluster, &[]);
    let redlock = client_as_user(&cluster);
    let resource = unique("least");
    let key = format!("{PREFIX}{resource}");

    // Lock, extend, status, release.
    let guard = redlock
        .lock(&resource, TTL)
        .await
        .expect("lock as the user");
    assert_eq!(redlock.key(&resource), key);
    guard.extend(TTL).await.expect("extend as the user");
    let status = redlock.status(&resource).await.expect("status as the user");
    assert_eq!(
        status.verdict,
        Verdict::Held {
            token: guard.token().to_owned()
        }
    );
    let report = guard.release().await.expect("release as the user");
    // A majority answered; the last node's release finishes in the background.
    assert!(report.count(&NodeOutcome::Released) >= 2, "{report}");
    eventually(Duration::from_secs(10), "released everywhere", || {
        all_keys(&cluster).is_empty()
    })
    .await;

    // Fencing: the counters live under the prefix and grow from one holder to the next.
    let first = redlock
        .lock(&resource, TTL)
        .fenced()
        .await
        .expect("fencing");
    let t1 = first.fencing_token().get();
    first.release().await.expect("release");
    let second = redlock
        .lock(&resource, TTL)
        .fenced()
        .await
        .expect("fencing");
    let t2 = second.fencing_token().get();
    assert!(t2 > t1, "{t2} > {t1}");
    let fence_key = format!("{PREFIX}quorum-lock:fence:{resource}");
    for node in &cluster.nodes {
        assert_eq!(get(node, &fence_key), Some(t2.to_string()));
    }

    // Waiting: another client waits, is listed and subscribed under the prefix, and is
    // woken by the release.
    let waiter = client_as_user(&cluster);
    let wanted = resource.clone();
    let waiting = tokio::spawn(async move {
        waiter
            .lock(&wanted, TTL)
            .wait(Duration::from_secs(20))
            .await
    });
    let list_key = format!("{PREFIX}quorum-lock:waiters:{resource}");
    eventually(Duration::from_secs(10), "the waiter is listed", || {
        cluster
            .nodes
            .iter()
            .any(|n| n.keys(&list_key) == vec![list_key.clone()])
    })
    .await;
    let channels = |node: &RedisServer| -> Vec<String> {
        redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("*")
            .query(&mut node.conn())
            .unwrap()
    };
    eventually(Duration::from_secs(10), "the waiter subscribed", || {
        cluster.nodes.iter().all(|n| channels(n).len() == 1)
    })
    .await;
    for node in &cluster.nodes {
        let channels = channels(node);
        assert!(
            channels[0].starts_with(&format!("{PREFIX}quorum-lock:wake:")),
            "{channels:?}"
        );
    }
    second.release().await.expect("release to the waiter");
    let woken = waiting.await.unwrap().expect("the waiter acquires");
    assert_eq!(
        redlock.status(&resource).await.unwrap().verdict,
        Verdict::Held {
            token: woken.token().to_owned()
        }
    );
    woken.release().await.expect("release as the user");

    // Nothing outside the prefix, on any node.
    let outside: Vec<_> = (all_keys(&cluster).into_iter())
        .filter(|(_, k)| !k.starts_with(PREFIX))
        .collect();
    assert_eq!(outside, vec![]);
}

#[tokio::test]
async fn a_refused_release_is_a_permission_error_and_the_key_stays() {
    let cluster = Cluster::start(3);
    // The release script's `DEL` is refused.
    create_user(&cluster, &["+del"]);
    let redlock = client_as_user(&cluster);
    let resource = unique("nodel");
    let guard = redlock.lock(&resource, TTL).await.expect("SET is allowed");
    let token = guard.token().to_owned();
    let err = guard.release().await.expect_err("a refused release");
    assert!(matches!(err, Error::Permission { .. }), "{err:?}");
    let report = err.report().expect("a report");
    // The round stops once the outcome is certain: two refusals of three at least.
    assert!(report.denials() >= 2, "{report}");
    assert_eq!(report.count(&NodeOutcome::Released), 0, "{report}");
    assert!(report.to_string().contains("permission denied"), "{report}");
    // Every node that refused still holds the key.
    for (node, result) in cluster.nodes.iter().zip(report.results()) {
        if matches!(result.outcome, NodeOutcome::PermissionDenied(_)) {
            assert_eq!(
                get(node, &format!("{PREFIX}{resource}")),
                Some(token.clone())
            );
        }
    }
}

#[tokio::test]
async fn a_refused_set_fails_at_once_with_a_permission_error() {
    let cluster = Cluster::start(3);
    create_user(&cluster, &["+set"]);
    let redlock = client_as_user(&cluster);
    let resource = unique("noset");
    // With a wait budget: a permission error is not retried until it runs out.
    let err = redlock
        .lock(&resource, TTL)
        .wait(Duration::from_secs(60))
        .await
        .expect_err("SET is refused");
    assert!(matches!(err, Error::Permission { .. }), "{err:?}");
    assert!(err.is_permission());
    assert!(err.report().unwrap().denials() >= 2, "{err:?}");
    assert_eq!(all_keys(&cluster), vec![]);
    // Fencing goes through the acquire script, whose `SET` is refused too.
    let err = redlock
        .lock(&resource, TTL)
        .fencing()
        .wait(Duration::from_secs(60))
        .await
        .expect_err("SET is refused");
    assert!(matches!(err, Error::Permission { .. }), "{err:?}");
    // `status` and `release --force` need no `SET`.
    let status = redlock.status(&resource).await.expect("status");
    assert_eq!(status.verdict, Verdict::Free);
    let err = redlock.reset(&resource).await;
    assert!(err.is_ok(), "{err:?}");
}

#[tokio::test]
async fn a_refused_read_is_a_permission_error() {
    let cluster = Cluster::start(3);
    create_user(&cluster, &["+evalsha"]);
    let redlock = client_as_user(&cluster);
    let resource = unique("noeval");
    let err = redlock
        .status(&resource)
        .await
        .expect_err("EVALSHA is refused");
    assert!(matches!(err, Error::Permission { .. }), "{err:?}");
    // The line starts its commands with `-@all`: this replaces the user's commands.
    create_user(&cluster, &["+del"]);
    let err = redlock.reset(&resource).await.expect_err("DEL is refused");
    assert!(matches!(err, Error::Permission { .. }), "{err:?}");
}

#[tokio::test]
async fn a_list_at_the_lock_key_is_a_wrong_type_not_another_holder() {
    let cluster = Cluster::start(3);
    let redlock = builder(&cluster.urls()).build().unwrap();
    let resource = unique("list");
    // Foreign data on every node.
    for node in &cluster.nodes {
        let _: i64 = redis::cmd("RPUSH")
            .arg(&resource)
            .arg("x")
            .query(&mut node.conn())
            .unwrap();
    }
    // Plain `SET NX`, then the acquire script (fencing, and several keys).
    for (how, result) in [
        ("plain", redlock.lock(&resource, TTL).max_attempts(1).await),
        (
            "fencing",
            redlock.lock(&resource, TTL).fencing().max_attempts(1).await,
        ),
        (
            "several",
            redlock
                .lock_many([resource.clone(), unique("other")], TTL)
                .max_attempts(1)
                .await,
        ),
    ] {
        let err = result.expect_err("foreign keys");
        let Error::Timeout { last, .. } = &err else {
            panic!("{how}: {err:?}")
        };
        assert!(matches!(**last, Error::Contended { .. }), "{how}: {err:?}");
        // The round stops once two nodes refused; the third may not have answered yet.
        let report = err.report().unwrap();
        assert!(
            report.count(&NodeOutcome::WrongType) >= 2,
            "{how}: {report}"
        );
        assert_eq!(
            report.count(&NodeOutcome::WrongType) + report.count(&NodeOutcome::Pending),
            3,
            "{how}: {report}"
        );
    }
    // Nothing was overwritten.
    for node in &cluster.nodes {
        let kind: String = redis::cmd("TYPE")
            .arg(&resource)
            .query(&mut node.conn())
            .unwrap();
        assert_eq!(kind, "list");
    }
}

/// `quorum-lock run` as a user whose release is refused: exit 77, not the program's 0, and
/// the key stays.
#[test]
fn the_cli_exits_77_when_the_release_is_refused() {
    let Some(bin) = option_env!("CARGO_BIN_EXE_quorum-lock") else {
        eprintln!("skipped: build with --features cli");
        return;
    };
    let cluster = Cluster::start(3);
    create_user(&cluster, &["+del"]);
    // The CLI keeps the restart quarantine: a node's vote counts once it has run longer
    // than the TTL (3 s) plus drift, with its uptime read in whole seconds.
    common::wait_until(Duration::from_secs(20), "the nodes run for 5 s", || {
        cluster.nodes.iter().all(|n| {
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query(&mut n.conn())
                .unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
                .and_then(|s| s.trim().parse::<u64>().ok())
                .is_some_and(|s| s >= 5)
        })
    });
    let resource = unique("cli");
    let urls: Vec<String> = (cluster.nodes.iter())
        .map(|n| format!("redis://locker:{PASSWORD}@127.0.0.1:{}", n.port()))
        .collect();
    let output = std::process::Command::new(bin)
        .arg("--nodes")
        .arg(urls.join(","))
        .arg("--key-prefix")
        .arg(PREFIX)
        .arg("--node-timeout")
        .arg("500ms")
        .arg("run")
        .arg("--no-extend")
        .arg("--ttl")
        .arg("3s")
        // A host stall widens the kill margin; with a short grace only a stall of about a
        // second stops the program before it exits.
        .arg("--grace")
        .arg("100ms")
        .arg("--no-wait")
        .arg(&resource)
        .arg("--")
        .arg("true")
        .output()
        .expect("run the CLI");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(77), "{stderr}");
    assert!(
        stderr.contains("after the program exited with status 0"),
        "{stderr}"
    );
    assert!(stderr.contains("permission denied"), "{stderr}");
    let key = format!("{PREFIX}{resource}");
    let holding = (cluster.nodes.iter())
        .filter(|n| get(n, &key).is_some())
        .count();
    assert!(holding >= 2, "the refused release left the key: {holding}");
}
