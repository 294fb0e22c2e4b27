//! The finding on nodes that restart quarantine keeps out now, judged from each node's
//! marker and ensemble record as an acquisition judges them. Pure, like the other findings.

use std::sync::Arc;
use std::time::Duration;

use super::finding;
use super::{Finding, FindingKind, NodeInfo, Severity};
use crate::acquire::ballot::{self, Read, Seen};
use crate::report::QuarantineReason;
use crate::rules::safety::{Persistence, Uptime, process_life};

/// What the check read of one node's restart-quarantine bookkeeping.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Ledger {
    /// The life the node's marker names; `None` when absent.
    pub(crate) marker: Option<String>,
    /// The ensemble record in milliseconds; `None` when absent.
    pub(crate) record_ms: Option<u64>,
}

/// The nodes restart quarantine keeps out now, one finding each, judged from every node's
/// facts and ledger (`None`: not read) as an acquisition judges them
/// ([`ballot::kept_out`]); the message says why and when the node votes again, in whole
/// seconds rounded up, so that nodes kept out alike share one line of the text report. A
/// new ensemble's node younger than a second (`JustStarted`) gets none.
pub(crate) fn kept_out(
    infos: &[NodeInfo],
    ledgers: &[Option<Ledger>],
    drift_factor: f64,
    ceiling: Duration,
) -> Vec<Finding> {
    let reads: Vec<Option<Read>> = (infos.iter().zip(ledgers))
        .map(|(info, ledger)| Some(ballot_read(info, ledger.as_ref()?)))
        .collect();
    let verdicts = ballot::kept_out(&reads, drift_factor, ceiling);
    (infos.iter().zip(verdicts))
        .filter_map(|(info, kept)| {
            let (reason, remaining) = kept?;
            let (message, severity) = match (reason, remaining) {
                // A new ensemble's node under a second old: over by itself before anyone
                // could act on it.
                (QuarantineReason::JustStarted, _) => return None,
                // Over by itself at the next acquisition: worth knowing, not a warning.
                (QuarantineReason::Readmitting, _) => {
                    (format!("restart quarantine: {reason}"), Severity::Info)
                }
                (_, Some(d)) => (
                    format!(
                        "restart quarantine keeps its vote out: {reason}; votes again within {} s",
                        d.as_secs_f64().ceil()
                    ),
                    Severity::Warning,
                ),
                (_, None) => (
                    format!(
                        "restart quarantine keeps its vote out: {reason}; votes again once that \
                         is resolved"
                    ),
                    Severity::Warning,
                ),
            };
            Some(finding(
                FindingKind::KeptOut,
                severity,
                Some(&info.name),
                message,
                kept_out_fix(reason),
            ))
        })
        .collect()
}

/// What an acquisition would know of a node: its `INFO` (`run_id`, uptime), durability and
/// ledger.
pub(super) fn ballot_read(info: &NodeInfo, ledger: &Ledger) -> Read {
    let persistence = match (info.appendonly, info.appendfsync.as_deref()) {
        (Some(false), _) => Persistence::Volatile,
        (Some(true), Some("always")) => Persistence::AofAlways,
        (Some(true), Some(_)) => Persistence::Volatile,
        _ => Persistence::Unknown,
    };
    let process = process_life(
        info.run_id.as_deref(),
        info.uptime.map(|d| Uptime::seconds(d.as_secs())),
        persistence,
        info.promoted == Some(true),
        info.master_replid.as_deref(),
    );
    let mut read = Read::blank(
        process.life.map(Arc::from),
        process.uptime,
        process.persistence,
    );
    read.marker = Seen::Read(ledger.marker.clone());
    read.record_ms = ledger.record_ms;
    read
}

pub(super) fn kept_out_fix(reason: QuarantineReason) -> &'static str {
    match reason {
        QuarantineReason::MemoryLost | QuarantineReason::Restarted => {
            "none needed: it votes again by itself once every lock that may have used its \
             lost keys has ended; with appendonly yes and appendfsync always a restart keeps \
             its keys and it votes at once"
        }
        QuarantineReason::NoIdentity => {
            "let the client's ACL user run INFO (+info), so that its restarts can be seen"
        }
        QuarantineReason::RecordUnread => {
            "bring the unreachable or restarted nodes back: the longest TTL must be read from \
             a majority of nodes that kept their data; on a new deployment that never served \
             a lock, run `quorum-lock init` once"
        }
        QuarantineReason::FreshNeedsAll => {
            "run `quorum-lock init` once (a new deployment's first start), or bring every \
             node up: the first lock of a new ensemble needs every node's answer otherwise"
        }
        QuarantineReason::JustStarted => {
            "none needed: a new ensemble's node votes once it has run for a second"
        }
        QuarantineReason::Readmitting => {
            "none needed: the next acquisition writes its marker, and it votes from the one after"
        }
    }
}
