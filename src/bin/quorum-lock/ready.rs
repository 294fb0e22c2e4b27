//! `quorum-lock repair` and `quorum-lock doctor --ready`: readmit the nodes whose restart
//! quarantine is over and say, per node, whether it votes; wait until every node does.

use std::time::Duration;

use quorum_lock::{NodeState, Readiness, Redlock};

use crate::{EX_TEMPFAIL, Failure, say};

/// The pause between two checks while waiting: the next node's known wait, within these.
const SHORTEST_CHECK: Duration = Duration::from_millis(200);
const LONGEST_CHECK: Duration = Duration::from_secs(2);

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
        let pause = (readiness.next_change())
            .unwrap_or(LONGEST_CHECK)
            .clamp(SHORTEST_CHECK, LONGEST_CHECK);
        tokio::time::sleep(pause.min(left)).await;
    }
}

/// 0 when every node votes; otherwise 75 with what the others wait for.
fn verdict(readiness: &Readiness) -> Result<u8, Failure> {
    if readiness.is_ready() {
        return Ok(0);
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
    text.push_str(&format!(
        "{} of {} nodes admitted{}",
        readiness.admitted(),
        readiness.nodes.len(),
        if readiness.is_ready() { ": ready" } else { "" }
    ));
    text
}
