//! Liveness against real servers: restart quarantine and fencing must not stall an
//! ensemble for good. After rolling restarts with idle gaps, a node down from the start,
//! concurrent first clients, a peer's key at first contact or a `FLUSHALL`, locks (plain
//! and fenced) are granted again within a bound derived from the TTL ceiling, and fencing
//! tokens keep increasing. A long-lived client readmits a restarted node without any lock
//! traffic (until it is shut down), and a backward step of a node's wall clock does not
//! take its vote away. Each test uses a 1 s TTL and a 2 s ceiling, so that bound
//! (`BOUND`: twice the ceiling plus 5 s) stays short.

mod common;

use std::time::{Duration, Instant};

use common::{
    CLOCKSHIFT_REFRESH, ClockFile, Cluster, RedisServer, ServerExtras, ServerOptions,
    clockshift_lib, eventually, unique,
};
use quorum_lock::{Error, FencedGuard, LockGuard, NodeOutcome, Redlock};

/// The TTL of every lock in these tests.
const TTL: Duration = Duration::from_secs(1);
/// The deployment-wide TTL ceiling every client here is built with.
const CEILING: Duration = Duration::from_secs(2);
/// The idle gap between two restarts of a rolling restart: longer than the ceiling.
const GAP: Duration = Duration::from_secs(4);
/// How long a lock may take to be granted after a fault: the ceiling plus drift, twice,
/// plus a margin for a loaded machine.
const BOUND: Duration = Duration::from_secs(9);
/// Pause between two attempts of a retry loop.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// A client of `urls` with the 1 s default TTL, the 2 s ceiling and restart quarantine on.
fn client(urls: &[String]) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(common::NODE_TIMEOUT)
        .default_ttl(TTL)
        .ttl_ceiling(CEILING)
        .build()
        .expect("valid configuration")
}

/// An error with the per-node report behind it, for a panic message.
fn explain(e: &Error) -> String {
    match e.report() {
        Some(report) => format!("{e} [report: {report}]"),
        None => format!("{e} [{e:?}]"),
    }
}

/// Single attempts (`try_lock`) at a plain lock on `resource` until one is granted;
/// panics once `deadline` has passed, saying what the last attempt returned.
async fn plain_by(redlock: &Redlock, resource: &str, deadline: Instant, what: &str) -> LockGuard {
    let began = Instant::now();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let last = match redlock.try_lock(resource, TTL).await {
            Ok(Some(guard)) => {
                eprintln!(
                    "{what}: plain lock after {attempts} attempts, {:.1?}",
                    began.elapsed()
                );
                return guard;
            }
            Ok(None) => "refused as contended (Ok(None))".to_owned(),
            Err(e) => explain(&e),
        };
        if Instant::now() >= deadline {
            panic!(
                "{what}: no plain lock on {resource} after {attempts} attempts in {:.1?}; \
                 last attempt: {last}",
                began.elapsed()
            );
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// [`plain_by`] for a fenced lock (`try_lock_fenced`).
async fn fenced_by(
    redlock: &Redlock,
    resource: &str,
    deadline: Instant,
    what: &str,
) -> FencedGuard {
    let began = Instant::now();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let last = match redlock.try_lock_fenced(resource, TTL).await {
            Ok(Some(guard)) => {
                eprintln!(
                    "{what}: fenced lock (token {}) after {attempts} attempts, {:.1?}",
                    guard.fencing_token().get(),
                    began.elapsed()
                );
                return guard;
            }
            Ok(None) => "refused as contended (Ok(None))".to_owned(),
            Err(e) => explain(&e),
        };
        if Instant::now() >= deadline {
            panic!(
                "{what}: no fenced lock on {resource} after {attempts} attempts in {:.1?}; \
                 last attempt: {last}",
                began.elapsed()
            );
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// A fenced lock on `resource` within `deadline`, released; returns its token.
async fn token_by(redlock: &Redlock, resource: &str, deadline: Instant, what: &str) -> u64 {
    let guard = fenced_by(redlock, resource, deadline, what).await;
    let token = guard.fencing_token().get();
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{what}: release of token {token}: {}", explain(&e)));
    token
}

/// A plain lock on `resource` within `deadline`, released.
async fn plain_and_release(redlock: &Redlock, resource: &str, deadline: Instant, what: &str) {
    let guard = plain_by(redlock, resource, deadline, what).await;
    guard
        .release()
        .await
        .unwrap_or_else(|e| panic!("{what}: release: {}", explain(&e)));
}

/// Asserts `tokens` strictly increase.
fn assert_increasing(tokens: &[u64], what: &str) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "{what}: fencing tokens went backwards or repeated: {tokens:?}"
        );
    }
}

/// Restarts `node` empty (no persistence) and checks it came back without a key.
fn restart_empty(node: &mut RedisServer, which: usize) {
    tokio::task::block_in_place(|| node.restart());
    let left = node.keys("*");
    assert!(
        left.is_empty(),
        "node {which} kept keys over its restart: {left:?}"
    );
}

fn exists(node: &RedisServer, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(&mut node.conn())
        .unwrap()
        == 1
}

/// Three fenced locks on `resource` from `redlock`, released: t1 < t2 < t3.
async fn three_tokens(redlock: &Redlock, resource: &str) -> Vec<u64> {
    let mut tokens = Vec::new();
    for i in 1..=3 {
        let deadline = Instant::now() + BOUND;
        tokens.push(
            token_by(
                redlock,
                resource,
                deadline,
                &format!("before restarts, t{i}"),
            )
            .await,
        );
    }
    assert_increasing(&tokens, "before the restarts");
    tokens
}

/// Restarts nodes 0, 1 and 2 of a 3-node cluster empty, one after another, with [`GAP`]
/// between restarts and no lock traffic at all.
async fn idle_rolling_restart(cluster: &mut Cluster) {
    for i in 0..3 {
        if i > 0 {
            tokio::time::sleep(GAP).await;
        }
        restart_empty(&mut cluster.nodes[i], i);
    }
}

/// Fenced locks on `resource` from `redlock` after an idle rolling restart: three within
/// [`BOUND`] of `from`, all above `before` and strictly increasing.
async fn tokens_after_restarts(redlock: &Redlock, resource: &str, before: &[u64], from: Instant) {
    let t3 = *before.last().unwrap();
    let mut after = Vec::new();
    for i in 1..=3 {
        let what = format!("after the rolling restart, lock {i}");
        after.push(token_by(redlock, resource, from + BOUND, &what).await);
    }
    assert!(
        after[0] > t3,
        "tokens went backwards over the rolling restart: before {before:?}, after {after:?}"
    );
    assert_increasing(&after, "after the rolling restart");
}

/// Finding 1 (fresh client): tokens never go backwards after an idle rolling restart.
/// 3 nodes, tokens t1 < t2 < t3; every node restarts empty, one after another, 4 s apart,
/// with no lock traffic; then a client built after the restarts gets fenced locks within
/// the bound, with tokens above t3 and strictly increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_after_an_idle_rolling_restart_fresh_client() {
    let mut cluster = Cluster::start(3);
    let resource = unique("rolling-fresh");
    let before = three_tokens(&client(&cluster.urls()), &resource).await;
    idle_rolling_restart(&mut cluster).await;
    let from = Instant::now();
    let fresh = client(&cluster.urls());
    tokens_after_restarts(&fresh, &resource, &before, from).await;
}

/// Finding 1 (idle client): tokens never go backwards after an idle rolling restart, for a
/// long-lived client that stayed idle through it. As the fresh-client variant, with the
/// client that minted t1 < t2 < t3 asking again after the last restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_after_an_idle_rolling_restart_idle_client() {
    let mut cluster = Cluster::start(3);
    let resource = unique("rolling-idle");
    let redlock = client(&cluster.urls());
    let before = three_tokens(&redlock, &resource).await;
    idle_rolling_restart(&mut cluster).await;
    let from = Instant::now();
    tokens_after_restarts(&redlock, &resource, &before, from).await;
}

/// A new 5-node deployment whose node 4 is down before any client ever connected.
fn five_with_one_down() -> Cluster {
    let mut cluster = Cluster::start(5);
    cluster.nodes[4].kill();
    assert!(!cluster.nodes[4].is_running());
    cluster
}

/// Finding 2 (plain): a new 5-node deployment with one node down before the first lock
/// grants a plain lock within the bound (the ceiling plus drift, with margin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_deployment_with_a_node_down_grants_a_plain_lock() {
    let cluster = five_with_one_down();
    let from = Instant::now();
    let redlock = client(&cluster.urls());
    let resource = unique("down-from-start");
    plain_and_release(&redlock, &resource, from + BOUND, "4 of 5 nodes, plain").await;
}

/// Finding 2 (fenced): a new 5-node deployment with one node down before the first lock
/// grants a fenced lock within the bound, and the next one has a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_deployment_with_a_node_down_grants_a_fenced_lock() {
    let cluster = five_with_one_down();
    let from = Instant::now();
    let redlock = client(&cluster.urls());
    let resource = unique("down-from-start-fenced");
    let first = token_by(&redlock, &resource, from + BOUND, "4 of 5 nodes, fenced").await;
    let second = token_by(&redlock, &resource, from + BOUND, "4 of 5 nodes, again").await;
    assert!(first < second, "tokens {first} then {second}");
}

/// After a restart: fenced locks on the old `resource` from the long-lived client and a
/// fresh one, and on a never-used resource from each, all within [`BOUND`] of `from`.
/// The tokens on the old resource are appended to `tokens`.
async fn fenced_everywhere(
    cluster: &Cluster,
    long_lived: &Redlock,
    resource: &str,
    tokens: &mut Vec<u64>,
    from: Instant,
    phase: &str,
) {
    let deadline = from + BOUND;
    let fresh = client(&cluster.urls());
    let what = format!("{phase}, long-lived client, old resource");
    tokens.push(token_by(long_lived, resource, deadline, &what).await);
    let what = format!("{phase}, fresh client, old resource");
    tokens.push(token_by(&fresh, resource, deadline, &what).await);
    let what = format!("{phase}, fresh client, new resource");
    token_by(&fresh, &unique("never-used"), deadline, &what).await;
    let what = format!("{phase}, long-lived client, new resource");
    token_by(long_lived, &unique("never-used"), deadline, &what).await;
    assert_increasing(tokens, phase);
}

/// Finding 3: fenced locks keep working after two single-node restarts with an idle gap.
/// 3 nodes; a fenced lock; node 0 restarts empty; a fenced lock; 3 s idle; node 1 restarts
/// empty; fenced locks (old and never-used resources, a fresh client and the long-lived
/// one) within the bound; then node 2 restarts empty and the same holds. Tokens on the old
/// resource strictly increase throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_locks_survive_two_restarts_with_an_idle_gap() {
    let mut cluster = Cluster::start(3);
    let resource = unique("two-restarts");
    let long_lived = client(&cluster.urls());
    let mut tokens = Vec::new();
    let deadline = Instant::now() + BOUND;
    tokens.push(token_by(&long_lived, &resource, deadline, "first fenced lock").await);

    restart_empty(&mut cluster.nodes[0], 0);
    let deadline = Instant::now() + BOUND;
    tokens.push(token_by(&long_lived, &resource, deadline, "after node 0 restarted").await);

    tokio::time::sleep(Duration::from_secs(3)).await;
    restart_empty(&mut cluster.nodes[1], 1);
    let from = Instant::now();
    let phase = "after node 1 restarted";
    fenced_everywhere(&cluster, &long_lived, &resource, &mut tokens, from, phase).await;

    restart_empty(&mut cluster.nodes[2], 2);
    let from = Instant::now();
    let phase = "after node 2 restarted";
    fenced_everywhere(&cluster, &long_lived, &resource, &mut tokens, from, phase).await;
    eprintln!("tokens on {resource}: {tokens:?}");
}

/// Finding 4: concurrent first clients, then a minority fault, do not stall the ensemble.
/// 5 fresh nodes; 6 separate clients try to lock one resource at the same moment (at most
/// one holds it); then node 3 is paused (SIGSTOP) for 1.5 s and node 4 stopped. Fresh
/// clients get plain locks within the bound, both while node 3 is paused (3 healthy nodes)
/// and after it resumed (4 healthy nodes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_clients_then_a_minority_fault_still_lock() {
    let mut cluster = Cluster::start(5);
    let urls = cluster.urls();
    let resource = unique("first-clients");
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(6));
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let (barrier, resource) = (barrier.clone(), resource.clone());
            let redlock = client(&urls);
            tokio::spawn(async move {
                barrier.wait().await;
                let outcome = redlock.try_lock(&resource, TTL).await;
                (redlock, outcome)
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut outcomes = Vec::new();
    for task in tasks {
        let (redlock, outcome) = task.await.unwrap();
        match outcome {
            Ok(Some(guard)) => {
                outcomes.push("won".to_owned());
                winners.push((redlock, guard));
            }
            Ok(None) => outcomes.push("contended".to_owned()),
            Err(e) => outcomes.push(explain(&e)),
        }
    }
    eprintln!("6 concurrent first clients: {outcomes:?}");
    let valid = winners.iter().filter(|(_, g)| g.is_valid()).count();
    assert!(valid <= 1, "{valid} holders at once: {outcomes:?}");
    for (_, guard) in winners {
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("winner's release: {}", explain(&e)));
    }

    // A minority fault: node 3 paused for 1.5 s, node 4 stopped.
    tokio::task::block_in_place(|| cluster.nodes[3].pause());
    cluster.nodes[4].kill();
    let from = Instant::now();
    let during = tokio::spawn({
        let (urls, resource) = (urls.clone(), resource.clone());
        async move {
            let fresh = client(&urls);
            let what = "node 3 paused, node 4 stopped, fresh client";
            plain_and_release(&fresh, &resource, from + BOUND, what).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    tokio::task::block_in_place(|| cluster.nodes[3].resume());
    if let Err(e) = during.await {
        std::panic::resume_unwind(e.into_panic());
    }
    let from = Instant::now();
    for i in 1..=2 {
        let fresh = client(&urls);
        let what = format!("node 3 resumed, node 4 stopped, fresh client {i}");
        plain_and_release(&fresh, &resource, from + BOUND, &what).await;
        let what = format!("node 3 resumed, node 4 stopped, fresh client {i}, new resource");
        plain_and_release(&fresh, &unique("after-fault"), from + BOUND, &what).await;
    }
    tokio::task::block_in_place(|| cluster.nodes[4].restart());
}

/// Finding 5: a peer's key at first contact does not keep the nodes out once it expired.
/// On 3 fresh nodes, a foreign value is `SET R <token> PX 1500` on every node before the
/// crate connects: the first `try_lock(R)` is refused as contended. Once the key is gone
/// everywhere, one single `try_lock` from the same client succeeds, and so does one from
/// a fresh client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peers_key_at_first_contact_does_not_keep_nodes_out() {
    let cluster = Cluster::start(3);
    let urls = cluster.urls();
    let resource = unique("peer-key");
    let redlock = client(&urls);
    assert_eq!(redlock.key(&resource), resource, "no key prefix");
    for node in &cluster.nodes {
        redis::cmd("SET")
            .arg(&resource)
            .arg("0f8e3c4a-peer-redis-py-token")
            .arg("PX")
            .arg(1_500)
            .query::<()>(&mut node.conn())
            .unwrap();
    }
    // `try_lock` reports contention (`Error::Contended`) as `Ok(None)`; anything else is
    // an `Err` (a node kept out is `Unavailable`).
    match redlock.try_lock(&resource, TTL).await {
        Ok(None) => {}
        Ok(Some(guard)) => panic!("locked over a peer's key on every node: {}", guard.report()),
        Err(e) => panic!(
            "first contact with a peer's key must be refused as contended, not: {}",
            explain(&e)
        ),
    }
    let nodes = &cluster.nodes;
    eventually(
        Duration::from_secs(5),
        "the peer's key gone everywhere",
        || nodes.iter().all(|n| !exists(n, &resource)),
    )
    .await;
    match redlock.try_lock(&resource, TTL).await {
        Ok(Some(guard)) => {
            let released = guard.release().await;
            released.unwrap_or_else(|e| panic!("release: {}", explain(&e)));
        }
        Ok(None) => panic!("same client, after the peer's key expired: refused as contended"),
        Err(e) => panic!("same client, after the peer's key expired: {}", explain(&e)),
    }
    let fresh = client(&urls);
    match fresh.try_lock(&resource, TTL).await {
        Ok(Some(guard)) => {
            let released = guard.release().await;
            released.unwrap_or_else(|e| panic!("release: {}", explain(&e)));
        }
        Ok(None) => panic!("fresh client, after the peer's key expired: refused as contended"),
        Err(e) => panic!(
            "fresh client, after the peer's key expired: {}",
            explain(&e)
        ),
    }
}

/// Finding 6: `FLUSHALL` on one node of 3 while idle does not stall locks. Plain and fenced
/// locks work before; after node 0 is flushed, plain and fenced locks from the long-lived
/// client and a fresh one are granted within the bound, tokens strictly increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushall_on_one_node_keeps_locks_working() {
    let cluster = Cluster::start(3);
    let resource = unique("flushed");
    let long_lived = client(&cluster.urls());
    let deadline = Instant::now() + BOUND;
    let mut tokens = vec![token_by(&long_lived, &resource, deadline, "before FLUSHALL").await];
    plain_and_release(&long_lived, &resource, deadline, "before FLUSHALL").await;
    tokens.push(token_by(&long_lived, &resource, deadline, "before FLUSHALL, again").await);

    redis::cmd("FLUSHALL")
        .query::<()>(&mut cluster.nodes[0].conn())
        .unwrap();
    assert!(cluster.nodes[0].keys("*").is_empty());
    let deadline = Instant::now() + BOUND;
    let what = "after FLUSHALL, long-lived client";
    plain_and_release(&long_lived, &resource, deadline, what).await;
    tokens.push(token_by(&long_lived, &resource, deadline, what).await);
    let fresh = client(&cluster.urls());
    let what = "after FLUSHALL, fresh client";
    plain_and_release(&fresh, &resource, deadline, what).await;
    tokens.push(token_by(&fresh, &resource, deadline, what).await);
    plain_and_release(&fresh, &unique("flushed-new"), deadline, what).await;
    assert_increasing(&tokens, "across FLUSHALL");
}

/// Finding 7: fencing with restart quarantine off on nodes without persistence is a
/// configuration error (`Error::Config`), not a lock with a warning. On nodes persisting
/// with `appendfsync always`, the same client settings mint tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_without_quarantine_on_volatile_nodes_is_a_config_error() {
    let volatile = Cluster::start(3);
    let build = |urls: &[String]| {
        Redlock::builder()
            .nodes(urls)
            .node_timeout(common::NODE_TIMEOUT)
            .default_ttl(TTL)
            .ttl_ceiling(CEILING)
            .restart_quarantine(false)
            .build()
            .expect("valid configuration")
    };
    let redlock = build(&volatile.urls());
    let resource = unique("unsafe-fencing");
    match redlock.lock(&resource, TTL).fenced().max_attempts(1).await {
        Err(Error::Config(message)) => eprintln!("lock().fenced(): {message}"),
        Ok(guard) => panic!(
            "fenced lock granted (token {}) with quarantine off on volatile nodes",
            guard.fencing_token().get()
        ),
        Err(e) => panic!("lock().fenced(): want Error::Config, got {}", explain(&e)),
    }
    match redlock.try_lock_fenced(&resource, TTL).await {
        Err(Error::Config(message)) => eprintln!("try_lock_fenced(): {message}"),
        Ok(Some(guard)) => panic!(
            "fenced try_lock granted (token {}) with quarantine off on volatile nodes",
            guard.fencing_token().get()
        ),
        Ok(None) => panic!("try_lock_fenced(): want Error::Config, got contended"),
        Err(e) => panic!("try_lock_fenced(): want Error::Config, got {}", explain(&e)),
    }
    let pattern = format!("*{resource}*");
    assert!(
        volatile.keys_everywhere(&pattern).is_empty(),
        "a refused fenced lock left keys: {:?}",
        volatile.keys_everywhere(&pattern)
    );

    // The control: durable nodes, same settings, fenced locks work.
    let durable = Cluster::start_with(
        3,
        ServerOptions {
            appendonly: true,
            ..Default::default()
        },
    );
    let redlock = build(&durable.urls());
    let deadline = Instant::now() + BOUND;
    let first = token_by(&redlock, &resource, deadline, "durable nodes").await;
    let second = token_by(&redlock, &resource, deadline, "durable nodes, again").await;
    assert!(first < second, "tokens {first} then {second}");
}

/// The key in which a node keeps the `run_id` of the life a client admitted it in.
const MARKER: &str = "quorum-lock:node:marker";

/// `node`'s `run_id` (`INFO server`): a new one on every start.
fn run_id(node: &RedisServer) -> String {
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut node.conn())
        .unwrap_or_else(|e| panic!("INFO server on {}: {e}", node.url()));
    info.lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .unwrap_or_else(|| panic!("no run_id in INFO server of {}", node.url()))
}

/// `node`'s marker, if it has one.
fn marker(node: &RedisServer) -> Option<String> {
    redis::cmd("GET")
        .arg(MARKER)
        .query(&mut node.conn())
        .unwrap_or_else(|e| panic!("GET {MARKER} on {}: {e}", node.url()))
}

/// Whether `marker` names the life `run_id` (earlier versions wrote `<run_id>:<0|1>`).
fn names(marker: Option<&str>, run_id: &str) -> bool {
    marker
        .is_some_and(|m| m == run_id || m.strip_prefix(run_id).is_some_and(|r| r.starts_with(':')))
}

/// How long a readmission without lock traffic may take: the background task's idle
/// `PING` (every 5 s) sees the restart, then the quarantine (the 1 s record, rounded
/// against the node: up to 3 s from its start) and two probe rounds; measured 3 to 8 s,
/// plus a margin for a loaded machine.
const READMISSION_BOUND: Duration = Duration::from_secs(12);

/// How long a client that was shut down is watched for not readmitting a restarted node:
/// longer than the background task's idle `PING` period (5 s) plus the 1-2 s quarantine,
/// so a task still running would have written the marker (as the first half shows).
const AFTER_SHUTDOWN: Duration = Duration::from_secs(8);

/// A long-lived client readmits a restarted node by itself, with no lock traffic at all,
/// and stops doing so once shut down. 3 nodes, TTL 1 s, ceiling 2 s: one lock starts the
/// client's background task; node 1 restarts empty; nobody locks again; node 1's marker
/// comes to name its new `run_id` within [`READMISSION_BOUND`]. Then the client is shut
/// down (and kept alive, so that only `shutdown()` can stop the task), node 2 restarts
/// empty, and its marker stays unwritten for [`AFTER_SHUTDOWN`].
///
/// On the code before background healing (no `ttl_ceiling` there; the same steps with
/// the builder's other settings) node 1's marker kept naming its old life: "timed out
/// after 12s waiting for: node 1's marker to name its new run_id". Without the
/// `shutdown()` call, node 2's marker is written about 5 s after its restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lived_client_readmits_a_restarted_node_without_lock_traffic() {
    let mut cluster = Cluster::start(3);
    let redlock = client(&cluster.urls());
    let resource = unique("background-readmission");
    let deadline = Instant::now() + BOUND;
    plain_and_release(&redlock, &resource, deadline, "the one lock").await;
    let old = run_id(&cluster.nodes[1]);
    let node1 = &cluster.nodes[1];
    eventually(
        Duration::from_secs(5),
        "node 1's marker to name its first life",
        || names(marker(node1).as_deref(), &old),
    )
    .await;

    restart_empty(&mut cluster.nodes[1], 1);
    let restarted = Instant::now();
    let new = run_id(&cluster.nodes[1]);
    assert_ne!(old, new, "a restart gives a new run_id");
    let node1 = &cluster.nodes[1];
    eventually(
        READMISSION_BOUND,
        "node 1's marker to name its new run_id",
        || names(marker(node1).as_deref(), &new),
    )
    .await;
    eprintln!(
        "node 1 readmitted without lock traffic {:.1?} after its restart",
        restarted.elapsed()
    );

    // (A probe of the background task may be under way: shutdown waits for it.)
    redlock.shutdown().await;
    restart_empty(&mut cluster.nodes[2], 2);
    let node2_life = run_id(&cluster.nodes[2]);
    let watched = Instant::now();
    while watched.elapsed() < AFTER_SHUTDOWN {
        let written = marker(&cluster.nodes[2]);
        assert!(
            written.is_none(),
            "a client shut down {:.1?} ago still readmitted node 2 (life {node2_life}): \
             its marker is {written:?}",
            watched.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The client stays alive until here: only `shutdown()` stopped its background task.
    drop(redlock);
}

/// A backward step of a node's wall clock does not take its vote away. Node 0 of 3 runs
/// under the clockshift shim; one lock admits every node; then node 0's clock steps back
/// 10 minutes, so its `INFO` reports a negative `uptime_in_seconds`, and its client
/// connections are killed so that the client reconnects and reads that `INFO`. Locks keep
/// being granted, and within a few attempts with node 0's yes counted (its outcome
/// `Acquired`), again and again.
///
/// On the code before this change a negative uptime read as "no identity": from the
/// reconnect on, node 0 was "kept out by restart quarantine: run_id or uptime unknown
/// (info refused?)", never `Acquired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backward_clock_step_does_not_take_a_nodes_vote_away() {
    if clockshift_lib().is_none() {
        eprintln!("skipping: no `cc` to build the clockshift shim (tests/shim/clockshift.c)");
        return;
    }
    /// How far node 0's wall clock steps back.
    const STEP_MS: i64 = -600_000;
    /// Attempts allowed for the first lock that counts node 0's yes after the step.
    const ATTEMPTS: u32 = 30;

    let clock = ClockFile::new(0);
    let shifted = RedisServer::start_extended(
        ServerOptions::default(),
        ServerExtras {
            clock_offset_file: Some(clock.path().to_owned()),
            ..ServerExtras::default()
        },
    );
    let others = Cluster::start(2);
    let mut urls = vec![shifted.url()];
    urls.extend(others.urls());
    let redlock = client(&urls);

    let deadline = Instant::now() + BOUND;
    let guard = plain_by(
        &redlock,
        &unique("before-step"),
        deadline,
        "before the step",
    )
    .await;
    let report = guard.report().clone();
    guard.release().await.expect("release");
    assert_eq!(
        report.count(&NodeOutcome::Acquired),
        3,
        "every node votes on a fresh ensemble: {report}"
    );

    clock.set(STEP_MS);
    let uptime = || -> i64 {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut shifted.conn())
            .expect("INFO server");
        info.lines()
            .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
            .and_then(|u| u.trim().parse().ok())
            .expect("uptime_in_seconds")
    };
    eventually(
        CLOCKSHIFT_REFRESH * 30,
        "node 0 to report a negative uptime",
        || uptime() < 0,
    )
    .await;
    eprintln!("node 0 reports uptime_in_seconds:{}", uptime());
    // Every client connection of node 0 (not this admin one): the client reconnects and
    // learns node 0's facts again, from an INFO with the negative uptime.
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut shifted.conn())
        .expect("CLIENT KILL TYPE normal");
    assert!(killed > 0, "the client had a connection to node 0");

    let mut outcomes = Vec::new();
    let mut voted = 0;
    for attempt in 1..=ATTEMPTS {
        let deadline = Instant::now() + BOUND;
        let what = format!("after the step, attempt {attempt}");
        let guard = plain_by(&redlock, &unique("after-step"), deadline, &what).await;
        let outcome = guard.report().results()[0].outcome.clone();
        guard
            .release()
            .await
            .unwrap_or_else(|e| panic!("{what}: release: {}", explain(&e)));
        outcomes.push(outcome.to_string());
        // The first attempt finds its connection killed; an answer that came after the
        // majority's is not waited for ("no answer yet"). Neither is a vote kept out.
        assert!(
            !outcome.is_quarantined(),
            "node 0 kept out after its clock stepped back: {outcomes:?}"
        );
        if outcome == NodeOutcome::Acquired {
            voted += 1;
            if voted == 3 {
                break;
            }
        }
    }
    eprintln!("node 0's outcomes after the step: {outcomes:?}");
    assert_eq!(
        voted, 3,
        "node 0's yes did not count in 3 locks out of {ATTEMPTS} after its clock stepped \
         back: {outcomes:?}"
    );
    assert!(uptime() < 0, "node 0's uptime stayed negative throughout");
}

/// A new ensemble's nodes vote only once they have run for a second (a node that
/// restarted moments ago cannot yet be told from a new one: another client's answers from
/// its previous life may still be in flight). A client's first `try_lock` on servers
/// started just now waits for that second and then succeeds in its one attempt: had it
/// sent its keys at once, they would have been refused and their records would have made
/// every node wait out the lock's TTL (20 s here) instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_lock_on_just_started_nodes_waits_a_second_not_the_ttl() {
    let long = Duration::from_secs(20);
    let before_start = Instant::now();
    let cluster = Cluster::start(3);
    let redlock = Redlock::builder()
        .nodes(cluster.urls())
        .node_timeout(common::NODE_TIMEOUT)
        .default_ttl(long)
        .ttl_ceiling(long)
        .build()
        .expect("valid configuration");
    let resource = unique("just-started");
    let guard = match redlock.try_lock(&resource, long).await {
        Ok(Some(guard)) => guard,
        Ok(None) => panic!("refused as contended on new servers"),
        Err(e) => panic!("one attempt on new servers: {}", explain(&e)),
    };
    assert!(
        before_start.elapsed() >= Duration::from_secs(1),
        "granted before the nodes had run a second"
    );
    let votes = guard.report().count(&NodeOutcome::Acquired);
    assert_eq!(votes, 3, "every node votes: {}", guard.report());
    guard.release().await.expect("release");
    assert!(
        cluster.keys_everywhere(&format!("*{resource}*")).is_empty(),
        "keys left: {}",
        cluster.describe(&format!("*{resource}*"))
    );
}
