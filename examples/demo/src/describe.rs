//! Sentences about what the nodes did, for a person reading the demo's output.
//! Pure: takes a report and the nodes' ports, returns text.

use quorum_lock::{NodeOutcome, NodeReport, NodeState};

/// "node 2", from the `host:port` a report names (ports in configuration order).
fn node_name(addr: &str, ports: &[u16]) -> String {
    let port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
    match port.and_then(|p| ports.iter().position(|q| *q == p)) {
        Some(i) => format!("{}", i + 1),
        None => addr.to_string(),
    }
}

/// The nodes of `report` whose outcome satisfies `pick`, as "1, 2 and 5" (None if none).
fn nodes_where(
    report: &NodeReport,
    ports: &[u16],
    pick: impl Fn(&NodeOutcome) -> bool,
) -> Option<String> {
    let names: Vec<String> = report
        .results()
        .iter()
        .filter(|r| pick(&r.outcome))
        .map(|r| node_name(&r.node, ports))
        .collect();
    match names.as_slice() {
        [] => None,
        [one] => Some(format!("node {one}")),
        [rest @ .., last] => Some(format!("nodes {} and {last}", rest.join(", "))),
    }
}

/// What the nodes did for a lock that was granted.
pub fn granted(report: &NodeReport, ports: &[u16]) -> String {
    let mut parts = Vec::new();
    if let Some(yes) = nodes_where(report, ports, |o| *o == NodeOutcome::Acquired) {
        parts.push(format!("granted by {yes}"));
    }
    if let Some(pending) = nodes_where(report, ports, |o| *o == NodeOutcome::Pending) {
        parts.push(format!(
            "{pending} not waited for: a majority had already said yes, and the request \
             still completes there"
        ));
    }
    if let Some(down) = nodes_where(report, ports, NodeOutcome::is_failure) {
        parts.push(format!("{down} down"));
    }
    if let Some(q) = nodes_where(report, ports, NodeOutcome::is_quarantined) {
        parts.push(format!("{q} kept out by restart quarantine"));
    }
    let told = [NodeOutcome::Acquired, NodeOutcome::Pending];
    parts.extend(others(report, ports, &told));
    parts.join("; ")
}

/// What the nodes did in the last attempt of a lock that was refused.
pub fn refused(report: &NodeReport, ports: &[u16]) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(yes) = nodes_where(report, ports, |o| *o == NodeOutcome::Acquired) {
        lines.push(format!(
            "{yes} said yes, which is no majority, so the client took the lock back there"
        ));
    }
    if let Some(held) = nodes_where(report, ports, |o| *o == NodeOutcome::HeldByOther) {
        lines.push(format!("{held} already held by another client"));
    }
    if let Some(q) = nodes_where(report, ports, NodeOutcome::is_quarantined) {
        lines.push(format!("{q} kept out by restart quarantine"));
    }
    if let Some(down) = nodes_where(report, ports, NodeOutcome::is_failure) {
        lines.push(format!("{down} did not answer (down)"));
    }
    if let Some(pending) = nodes_where(report, ports, |o| *o == NodeOutcome::Pending) {
        lines.push(format!(
            "{pending} had not answered when the outcome was already certain"
        ));
    }
    let told = [
        NodeOutcome::Acquired,
        NodeOutcome::HeldByOther,
        NodeOutcome::Pending,
    ];
    lines.extend(others(report, ports, &told));
    lines
}

/// "node 4: held by another owner" for every node whose outcome is neither in `told` nor a
/// failure (those have their own sentences).
fn others(report: &NodeReport, ports: &[u16], told: &[NodeOutcome]) -> Vec<String> {
    report
        .results()
        .iter()
        .filter(|r| {
            !told.contains(&r.outcome) && !r.outcome.is_failure() && !r.outcome.is_quarantined()
        })
        .map(|r| format!("node {}: {}", node_name(&r.node, ports), r.outcome))
        .collect()
}

/// Where a node stands for restart quarantine, as `Redlock::heal` found it.
pub fn node_state(state: &NodeState) -> String {
    match state {
        NodeState::Admitted => "votes again (admitted)".to_string(),
        NodeState::KeptOut {
            reason,
            remaining: Some(left),
        } => format!(
            "kept out by restart quarantine, about {} to go: {reason}",
            ms(*left)
        ),
        NodeState::KeptOut {
            reason,
            remaining: None,
        } => format!("kept out by restart quarantine: {reason}"),
        NodeState::Unreachable(why) => format!("unreachable: {why}"),
        other => format!("{other:?}"),
    }
}

/// A duration in whole milliseconds.
pub fn ms(d: std::time::Duration) -> String {
    format!("{} ms", d.as_millis())
}
