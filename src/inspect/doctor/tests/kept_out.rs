//! Tests of the finding on nodes kept out by restart quarantine.

use super::*;

/// The default TTL ceiling.
const CEILING: Duration = Duration::from_secs(60);

#[test]
fn kept_out_nodes_are_judged_as_an_acquisition_judges_them() {
    use crate::inspect::doctor::kept_out::{Ledger, kept_out};
    let served = |i: usize| Ledger {
        marker: Some(format!("run{i}")),
        record_ms: Some(60_000),
    };
    let mut infos = set(5);
    for info in &mut infos {
        info.appendonly = Some(false);
    }
    // Nodes 3 and 4 restarted empty 10 s ago (uptime 11: at least 10 s old).
    for i in [3, 4] {
        infos[i].run_id = Some(format!("new{i}"));
        infos[i].uptime = Some(Duration::from_secs(11));
    }
    let ledgers: Vec<Option<Ledger>> = (0..5)
        .map(|i| Some(if i < 3 { served(i) } else { Ledger::default() }))
        .collect();
    let found = kept_out(&infos, &ledgers, 0.01, CEILING);
    let message = "restart quarantine keeps its vote out: no marker of its current process (new, \
                   restarted or flushed) while locks may depend on it; votes again within 51 s";
    let got: Vec<(Option<&str>, &str, Severity)> = (found.iter())
        .map(|f| (f.node.as_deref(), f.message.as_str(), f.severity))
        .collect();
    assert_eq!(
        got,
        [
            (Some("10.0.0.3:6379"), message, Severity::Warning),
            (Some("10.0.0.4:6379"), message, Severity::Warning),
        ]
    );
    assert!(found.iter().all(|f| f.kind == FindingKind::KeptOut));
    // Alike: one line of the text report naming both.
    let report = DeploymentReport {
        quorum: 3,
        nodes: infos.clone(),
        findings: found,
    };
    assert!(
        report.to_string().contains(&format!(
            "WARNING  10.0.0.3:6379, 10.0.0.4:6379: {message}\n"
        )),
        "{report}"
    );
    // Without a marker but up for an hour (longer than the record plus drift): quarantine
    // over, they vote once an acquisition has marked them (an admission by age), told as
    // information. An unread node leaves a new ensemble to wait out the TTL ceiling, over
    // for nodes up for an hour; nothing is kept out on a served set whose markers name the
    // current processes.
    let old = set(5);
    let text = "restart quarantine: quarantine over: votes from the attempt after the one that \
                marks it";
    let readmitting: Vec<(Option<String>, String, Severity)> =
        (kept_out(&old, &ledgers, 0.01, CEILING))
            .into_iter()
            .map(|f| (f.node, f.message, f.severity))
            .collect();
    let want = [3, 4].map(|i| {
        (
            Some(format!("10.0.0.{i}:6379")),
            text.to_owned(),
            Severity::Info,
        )
    });
    assert_eq!(readmitting, want);
    let fresh = [None, Some(Ledger::default()), Some(Ledger::default())];
    let waiting = kept_out(&infos[..3], &fresh, 0.01, CEILING);
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    assert!(
        waiting[0].message.contains("quarantine over"),
        "{waiting:?}"
    );
    let mut young = infos[..3].to_vec();
    for info in &mut young {
        info.uptime = Some(Duration::from_secs(2));
    }
    let waiting = kept_out(&young, &fresh, 0.01, CEILING);
    assert!(
        waiting[0].message.contains("waits out the ttl ceiling"),
        "{waiting:?}"
    );
    let all: Vec<Option<Ledger>> = (0..5).map(|i| Some(served(i))).collect();
    assert!(kept_out(&set(5), &all, 0.01, CEILING).is_empty());
}
