//! The blocking API in a plain `fn main`, without an async runtime of the caller's own.
//!
//! ```sh
//! QUORUM_LOCK_NODES=redis://127.0.0.1:6379 \
//!     cargo run --example blocking_quickstart --features blocking
//! ```
//!
//! Locks and releases a resource, runs a closure under an auto-extended lock on this
//! thread, lets four threads increment a counter under the lock, and shuts down.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use quorum_lock::blocking::Redlock;

const TTL: Duration = Duration::from_secs(5);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let redlock = Redlock::builder()
        .nodes_from_env()
        .default_ttl(TTL)
        .build()
        .map_err(|e| format!("{e} (set QUORUM_LOCK_NODES to comma-separated redis:// URLs)"))?;

    let guard = redlock.lock("blocking-demo", TTL).acquire()?;
    println!("locked {} for {:?}", guard.resource(), guard.validity());
    let report = guard.release()?;
    println!("released: {}", report.summary());

    let steps = redlock.run("blocking-demo", TTL, |ctx| {
        let mut steps = 0;
        while steps < 5 && ctx.is_held() {
            steps += 1;
            std::thread::sleep(Duration::from_millis(20));
        }
        steps
    })?;
    println!("ran {steps} steps under the lock");

    // Four threads, one client: each increment a read-modify-write under the lock.
    let counter = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (redlock, counter) = (redlock.clone(), Arc::clone(&counter));
            std::thread::spawn(move || -> quorum_lock::Result<()> {
                for _ in 0..10 {
                    let guard = redlock.lock("blocking-demo:counter", TTL).acquire()?;
                    let seen = counter.load(Ordering::Relaxed);
                    counter.store(seen + 1, Ordering::Relaxed);
                    guard.release()?;
                }
                Ok(())
            })
        })
        .collect();
    for worker in workers {
        worker.join().map_err(|_| "a worker panicked")??;
    }
    println!("counter: {}", counter.load(Ordering::Relaxed));

    let released = redlock.shutdown()?;
    println!("shut down ({released} locks still held were released)");
    Ok(())
}
