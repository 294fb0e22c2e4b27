//! A local five-node ensemble, workers contending for one lock, and what happens as nodes
//! die: `cargo run --release -p quorum-lock-demo` (or `bash scripts/demo.sh`, which installs
//! `redis-server` first).
//!
//! The scenes, in order: workers contend with all five nodes up; fenced locks while node 3
//! restarts empty (restart quarantine keeps its vote out until every lock it may have
//! granted has expired, `Redlock::heal` reports when it votes again, and the fencing tokens
//! keep increasing throughout); a long job keeps its lock while every node restarts empty
//! in turn, each restart paced by the readiness gate; workers contend with a minority
//! killed; no lock once a majority is gone.
//!
//! The demo removes its nodes and their directory when it ends, and also on SIGINT (Ctrl-C),
//! SIGTERM and SIGHUP; it then exits with 128 + the signal's number.

mod describe;
mod ensemble;
mod rolling;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quorum_lock::{Error, FencedGuard, FencingToken, FirstStart, NodeOutcome, NodeState, Redlock};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::task::JoinSet;
use tokio::time::Instant;

use ensemble::Ensemble;

const RESOURCE: &str = "demo:nightly-report";
const TTL: Duration = Duration::from_secs(2);

/// Workers that each take the lock `per_worker` times and count in a shared variable.
async fn round(redlock: &Redlock, ports: &[u16], label: &str, workers: usize, per_worker: usize) {
    println!("\n== {label}: {workers} workers take the lock {per_worker} times each");
    let counter = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    // A JoinSet aborts its tasks when dropped: a signal stops the workers too.
    let mut tasks = JoinSet::new();
    for w in 1..=workers {
        let (redlock, counter, ports) = (redlock.clone(), Arc::clone(&counter), ports.to_vec());
        tasks.spawn(async move {
            for _ in 0..per_worker {
                let guard = match redlock
                    .lock(RESOURCE, TTL)
                    .wait(Duration::from_secs(5))
                    .await
                {
                    Ok(guard) => guard,
                    Err(e) => return explain_refusal(&format!("worker {w}"), &e, &ports),
                };
                // Read-modify-write that only mutual exclusion keeps correct.
                let seen = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                counter.store(seen + 1, Ordering::SeqCst);
                println!(
                    "  worker {w} holds the lock, {} of validity left, count = {}\n    {}",
                    describe::ms(guard.validity()),
                    seen + 1,
                    describe::granted(guard.report(), &ports)
                );
                if let Err(e) = guard.release().await {
                    println!("  worker {w} could not release the lock: {e}");
                }
            }
        });
    }
    while tasks.join_next().await.is_some() {}
    println!(
        "  -> {} critical sections in {}, none overlapped (the count never skipped)",
        counter.load(Ordering::SeqCst),
        describe::ms(started.elapsed())
    );
}

/// Prints why `who` did not get the lock, and what each node did in the last attempt.
fn explain_refusal(who: &str, e: &Error, ports: &[u16]) {
    match e {
        Error::Timeout {
            attempts, waited, ..
        } => println!(
            "  {who} did not get the lock: gave up after {attempts} attempts in {}",
            describe::ms(*waited)
        ),
        other => println!("  {who} did not get the lock: {other}"),
    }
    if e.is_unavailable() {
        println!("    too few nodes are up to form a majority: no lock until nodes come back");
    }
    if let Some(report) = e.report() {
        println!("    in the last attempt:");
        for line in describe::refused(report, ports) {
            println!("      {line}");
        }
    }
}

/// A fenced lock of the restart scene, already released.
struct Fenced {
    token: FencingToken,
    /// What the nodes did, from the guard's report.
    granted: String,
    /// What node 3 did.
    node3: String,
    /// Whether node 3 answered (not a broken connection or a timeout).
    node3_answered: bool,
}

/// Takes a fenced lock on `RESOURCE`, notes what the nodes did, and releases it.
async fn fenced(redlock: &Redlock, ports: &[u16]) -> Result<Fenced, String> {
    let guard = (redlock.lock(RESOURCE, TTL).fenced())
        .wait(Duration::from_secs(5))
        .await
        .map_err(|e| format!("a fenced lock was refused: {e}"))?;
    let (node3, node3_answered) = node3(redlock, &guard).await?;
    let lock = Fenced {
        token: guard.fencing_token(),
        granted: describe::granted(guard.report(), ports),
        node3,
        node3_answered,
    };
    guard.release().await.map_err(|e| e.to_string())?;
    Ok(lock)
}

/// Node 3's outcome in the guard's report, and whether node 3 answered. A lock returns as
/// soon as a majority agreed, so node 3's answer may not be in the report: then its
/// standing is read back from every node (read-only, `Redlock::status`).
async fn node3(redlock: &Redlock, guard: &FencedGuard) -> Result<(String, bool), String> {
    let outcome = &guard.report().results()[2].outcome;
    if *outcome != NodeOutcome::Pending {
        return Ok((format!("node 3: {outcome}"), !outcome.is_failure()));
    }
    let status = redlock.status(RESOURCE).await.map_err(|e| e.to_string())?;
    let node = &status.nodes[2];
    if let Some(e) = &node.error {
        return Ok((format!("node 3: {e}"), false));
    }
    let what = match node.kept_out {
        None => "its vote counts".to_string(),
        Some(kept_out) => {
            let left = (kept_out.remaining).map_or(String::new(), |d| {
                format!(", votes again in {}", describe::ms(d))
            });
            format!("kept out by restart quarantine: {}{left}", kept_out.reason)
        }
    };
    let line = format!("node 3 (not waited for, read back): {what}");
    Ok((line, true))
}

/// Fencing tokens across a node that restarts empty: restart quarantine keeps its vote out
/// until every lock it may have granted has expired, then readmits it, and the tokens keep
/// increasing throughout.
async fn restart_scene(
    redlock: &Redlock,
    nodes: &mut Ensemble,
    ports: &[u16],
) -> Result<(), String> {
    println!("\n== fencing tokens while node 3 restarts empty");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let lock = fenced(redlock, ports).await?;
        println!("  fenced lock, token {}", lock.token);
        tokens.push(lock.token);
    }
    println!("  (a hybrid logical clock: about microseconds since the epoch, never repeated)");

    let before = nodes.key_count(3).await?;
    nodes.restart(3).await?;
    let restarted = Instant::now();
    let after = nodes.key_count(3).await?;
    println!(
        "\nrestarted node 3 without persistence: {before} keys before, {after} now \
         (it lost every key, its fencing counter too)"
    );
    for label in ["fenced lock at once", "fenced lock again"] {
        let lock = fenced(redlock, ports).await?;
        // The client's connection to node 3 died with the old process.
        let note = if lock.node3_answered {
            ""
        } else {
            " (the connection the restart broke: the client reconnects)"
        };
        println!(
            "  {label}, token {}\n    {}\n    {}{note}",
            lock.token, lock.granted, lock.node3
        );
        tokens.push(lock.token);
        if lock.node3_answered {
            break;
        }
    }

    wait_until_ready(redlock, restarted).await?;

    let lock = fenced(redlock, ports).await?;
    println!("  fenced lock, token {}\n    {}", lock.token, lock.node3);
    tokens.push(lock.token);
    let shown: Vec<String> = tokens.iter().map(FencingToken::to_string).collect();
    if tokens.windows(2).all(|w| w[0] < w[1]) {
        println!(
            "  -> tokens kept increasing across the restart: {}",
            shown.join(", ")
        );
    } else {
        println!(
            "  unexpected: the tokens did not always increase: {}",
            shown.join(", ")
        );
    }
    Ok(())
}

/// Asks `Redlock::heal` every 200 ms until every node votes, printing node 3's state when
/// it changes; gives up (with the reason) after 15 s.
async fn wait_until_ready(redlock: &Redlock, restarted: Instant) -> Result<(), String> {
    const DEADLINE: Duration = Duration::from_secs(15);
    let mut shown = String::new();
    loop {
        let readiness = redlock.heal().await.map_err(|e| e.to_string())?;
        let state = &readiness.nodes[2].state;
        // A change of state, not of the time left.
        let kind = match state {
            NodeState::KeptOut { reason, .. } => format!("kept out: {reason}"),
            other => describe::node_state(other),
        };
        if kind != shown {
            println!(
                "  {} after the restart: node 3 {}",
                describe::ms(restarted.elapsed()),
                describe::node_state(state)
            );
            shown = kind;
        }
        if readiness.is_ready() {
            println!("  all five nodes vote again");
            return Ok(());
        }
        if restarted.elapsed() > DEADLINE {
            println!(
                "  node 3 still does not vote {} after its restart: its quarantine lasts the \
                 longest TTL a lock may still have (up to the 60 s TTL ceiling when that TTL \
                 could not be read from a majority); the demo goes on without waiting",
                describe::ms(DEADLINE)
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The demo proper. The ensemble lives in `slot` so that `main` removes it however this
/// future ends (returned, failed, or dropped on a signal).
async fn demo(slot: &mut Option<Ensemble>) -> Result<(), String> {
    println!("starting five independent Redis masters on 127.0.0.1 ...");
    let nodes = slot.insert(Ensemble::start(5).await?);
    let ports = nodes.ports();
    let shown: Vec<String> = ports.iter().map(u16::to_string).collect();
    println!("nodes 1 to 5 listen on ports {}", shown.join(", "));
    println!("their data directory is {}", nodes.dir().display());

    let redlock = Redlock::builder()
        .nodes(nodes.urls())
        .default_ttl(TTL)
        .build()
        .map_err(|e| e.to_string())?;
    println!("a lock needs a majority: {} of 5 nodes", redlock.quorum());
    // A new deployment's first start (`quorum-lock init`): its nodes vote at once even if
    // one were down (with every node up, new nodes would vote at once anyway).
    match redlock.declare_new().await {
        Ok(FirstStart::Declared { admitted, .. }) => println!(
            "declared the new nodes new (quorum-lock init): {} of 5 vote at once",
            admitted.len()
        ),
        Ok(_) => println!("the nodes have served already: nothing to declare"),
        Err(e) => println!("could not declare the nodes new: {e}"),
    }
    round(&redlock, &ports, "all five nodes up", 4, 3).await;
    restart_scene(&redlock, nodes, &ports).await?;
    rolling::rolling_scene(&redlock, nodes).await?;

    nodes.kill(2);
    nodes.kill(4);
    println!("\nkilled nodes 2 and 4 (a minority): the other three still form a majority");
    round(&redlock, &ports, "three of five nodes up", 4, 3).await;

    nodes.kill(5);
    println!("\nkilled node 5 too: two nodes remain, no majority");
    match redlock
        .lock(RESOURCE, TTL)
        .wait(Duration::from_secs(1))
        .await
    {
        Ok(_) => println!("  unexpected: the lock was granted without a majority"),
        Err(e) => explain_refusal("the client", &e, &ports),
    }
    Ok(())
}

/// SIGINT, SIGTERM and SIGHUP, registered before any node starts.
fn signals() -> std::io::Result<[(Signal, &'static str, u8); 3]> {
    Ok([
        (signal(SignalKind::interrupt())?, "SIGINT", 2),
        (signal(SignalKind::terminate())?, "SIGTERM", 15),
        (signal(SignalKind::hangup())?, "SIGHUP", 1),
    ])
}

#[tokio::main]
async fn main() -> ExitCode {
    let [mut int, mut term, mut hup] = match signals() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("demo: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut slot = None;
    let code = tokio::select! {
        result = demo(&mut slot) => match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("demo: {e}");
                ExitCode::FAILURE
            }
        },
        _ = int.0.recv() => stopped(int.1, int.2),
        _ = term.0.recv() => stopped(term.1, term.2),
        _ = hup.0.recv() => stopped(hup.1, hup.2),
    };
    if let Some(ensemble) = slot.take() {
        let dir = ensemble.dir().display().to_string();
        drop(ensemble);
        println!("\nstopped the five nodes and removed {dir}");
    }
    code
}

fn stopped(name: &str, number: u8) -> ExitCode {
    println!("\n{name} received: stopping");
    ExitCode::from(128 + number)
}
