//! A local five-node ensemble, workers contending for one lock, and what happens as nodes
//! die: `cargo run --release -p quorum-lock-demo` (or `bash scripts/demo.sh`, which installs
//! `redis-server` first).
//!
//! The demo removes its nodes and their directory when it ends, and also on SIGINT (Ctrl-C),
//! SIGTERM and SIGHUP; it then exits with 128 + the signal's number.

mod describe;
mod ensemble;

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quorum_lock::{Error, Redlock};
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
    round(&redlock, &ports, "all five nodes up", 4, 3).await;

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
