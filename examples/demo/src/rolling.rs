//! The rolling-restart scene: a long job holds a lock, extended in the background, while
//! every node is restarted empty in turn, each restart paced by `Redlock::heal` (the
//! library's `quorum-lock doctor --ready`). The gate answers ready only once every node
//! votes and the job's lock is back on enough nodes that the next restart leaves it a
//! majority; the job keeps its lock throughout.

use std::time::Duration;

use quorum_lock::{AutoExtend, Redlock};
use tokio::time::Instant;

use crate::describe;
use crate::ensemble::Ensemble;

const JOB: &str = "demo:long-job";
const TTL: Duration = Duration::from_secs(2);
/// How long the demo waits for the gate after one restart before it gives up.
const GATE_DEADLINE: Duration = Duration::from_secs(20);

/// Restarts nodes 1 to 5 in turn under a held lock; prints each gate and whether the job
/// still holds.
pub async fn rolling_scene(redlock: &Redlock, nodes: &mut Ensemble) -> Result<(), String> {
    println!("\n== a long job holds a lock while every node restarts empty in turn");
    let mut guard = (redlock.lock(JOB, TTL).await).map_err(|e| e.to_string())?;
    guard.auto_extend(AutoExtend::new());
    let lost = guard.lost_signal();
    println!("  the job holds {JOB} (TTL 2 s, extended in the background)");
    let started = Instant::now();
    for number in 1..=5 {
        nodes.restart(number).await?;
        let restarted = Instant::now();
        let waited = wait_for_gate(redlock, restarted).await?;
        if lost.is_lost() {
            println!("  unexpected: the job lost its lock after node {number} restarted");
            return Ok(());
        }
        println!(
            "  restarted node {number}: ready after {waited}; the job still holds, {} of \
             validity left",
            describe::ms(guard.validity())
        );
    }
    guard.release().await.map_err(|e| e.to_string())?;
    println!(
        "  -> the job held its lock through five restarts ({}) and released it",
        describe::ms(started.elapsed())
    );
    Ok(())
}

/// Asks `Redlock::heal` every 200 ms until it answers ready; says what it waited for the
/// first time it waits for the job's copy. Returns how long it took.
async fn wait_for_gate(redlock: &Redlock, restarted: Instant) -> Result<String, String> {
    let mut told = false;
    loop {
        let readiness = redlock.heal().await.map_err(|e| e.to_string())?;
        if readiness.is_ready() {
            return Ok(describe::ms(restarted.elapsed()));
        }
        if let Some(lock) = readiness.locks_at_risk.first()
            && !told
        {
            println!(
                "    every node votes; the gate waits for the job's copy: {} on {} of the {} \
                 nodes it needs",
                lock.lock, lock.copies, lock.needed
            );
            told = true;
        }
        if restarted.elapsed() > GATE_DEADLINE {
            return Err(format!(
                "not ready {} after a restart",
                describe::ms(GATE_DEADLINE)
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
