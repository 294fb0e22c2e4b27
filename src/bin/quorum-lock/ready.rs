//! `quorum-lock repair` and `quorum-lock doctor --ready`: readmit the nodes whose restart
//! quarantine is over and say, per node, whether it votes, and which live locks one more
//! restart could take; wait until every node votes and no lock is at risk.

use std::time::Duration;

use quorum_lock::{NodeState, Readiness, Redlock};

use crate::{EX_TEMPFAIL, Failure, say};

/// The pause between two checks while waiting: the next node's known wait, within these.
const SHORTEST_CHECK: Duration = Duration::from_millis(200);
const LONGEST_CHECK: Duration = Duration::from_secs(2);
/// The pause while every node votes and locks wait for their holders' copies (each check
/// reads every node's keys).
const LOCKS_CHECK: Duration = Duration::from_millis(500);
/// Locks at risk named one per line; the rest are counted.
const NAMED_LOCKS: usize = 10;

/// Readmits what can be readmitted, waiting up to `wait` until every node is admitted;
/// prints each node's state. Exits 0 when every node votes, 75 (`EX_TEMPFAIL`) otherwise.
pub(crate) async fn until_ready(redlock: &Redlock, wait: Duration) -> Result<u8, Failure> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let readiness = redlock.heal().await.map_err(|e| Failure::from_error(&e))?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if readiness.is_ready() || left.is_zero() {
            say(&describe(&readiness));
            return verdict(&readiness);
        }
        let pause = match readiness.next_change() {
            _ if readiness.every_node_admitted() => LOCKS_CHECK,
            next => next
                .unwrap_or(LONGEST_CHECK)
                .clamp(SHORTEST_CHECK, LONGEST_CHECK),
        };
        tokio::time::sleep(pause.min(left)).await;
    }
}

/// 0 when every node votes; otherwise 75 with what the others wait for.
fn verdict(readiness: &Readiness) -> Result<u8, Failure> {
    if readiness.is_ready() {
        return Ok(0);
    }
    if readiness.every_node_admitted() {
        return Err(Failure::new(
            EX_TEMPFAIL,
            format!(
                "not ready: {} live lock(s) lack a copy on some node, so restarting a node \
                 now could take them from their holders; their holders write them back at \
                 their next extension (wait with --wait DURATION)",
                readiness.locks_at_risk.len()
            ),
        ));
    }
    Err(Failure::new(
        EX_TEMPFAIL,
        format!(
            "not ready: {} of {} nodes admitted; restarting another node now could leave \
             locks without a majority (wait with --wait DURATION)",
            readiness.admitted(),
            readiness.nodes.len()
        ),
    ))
}

/// One line per node, then a summary line.
pub(crate) fn describe(readiness: &Readiness) -> String {
    let width = (readiness.nodes.iter())
        .map(|n| n.node.len())
        .max()
        .unwrap_or(0);
    let mut text = String::new();
    for node in &readiness.nodes {
        let state = match &node.state {
            NodeState::Admitted => "admitted: votes".to_owned(),
            NodeState::KeptOut {
                reason,
                remaining: Some(d),
            } => format!(
                "kept out: {reason}; votes again within {} s",
                d.as_secs_f64().ceil()
            ),
            NodeState::KeptOut { reason, .. } => format!("kept out: {reason}"),
            NodeState::Unreachable(why) => format!("unreachable: {why}"),
            _ => "unknown".to_owned(),
        };
        text.push_str(&format!("{:width$}  {state}\n", node.node));
    }
    text.push_str(&describe_locks(readiness));
    let verdict = match readiness.locks_at_risk.len() {
        _ if readiness.is_ready() => ": ready".to_owned(),
        0 => String::new(),
        n => format!("; {n} live lock(s) lack copies"),
    };
    text.push_str(&format!(
        "{} of {} nodes admitted{verdict}",
        readiness.admitted(),
        readiness.nodes.len(),
    ));
    text
}

/// A line per live lock at risk (the first few), and why some were not checked.
fn describe_locks(readiness: &Readiness) -> String {
    let mut text = String::new();
    let at_risk = &readiness.locks_at_risk;
    for lock in at_risk.iter().take(NAMED_LOCKS) {
        text.push_str(&format!(
            "lock {}: on {} of the {} nodes it needs; its holder writes it back at its next \
             extension, or it expires within {} s\n",
            lock.lock,
            lock.copies,
            lock.needed,
            lock.expires_in.as_secs_f64().ceil()
        ));
    }
    if at_risk.len() > NAMED_LOCKS {
        text.push_str(&format!(
            "... and {} more locks lacking copies\n",
            at_risk.len() - NAMED_LOCKS
        ));
    }
    if let Some(why) = &readiness.locks_unchecked {
        text.push_str(&format!("{why}\n"));
    }
    text
}
