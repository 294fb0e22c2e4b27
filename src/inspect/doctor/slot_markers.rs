//! A Cluster member's per-slot restart quarantine, as the deployment check reads it on
//! each shard master: a slot's marker (`<prefix>quorum-lock:{T}:node:marker`) names the
//! life in which a client admitted the master for that slot, so the slots whose marker
//! names another life (the master restarted or was promoted since) do not count its vote
//! until an attempt in the slot readmits it. Pure.

use super::finding;
use super::keys::KeyScan;
use super::{Finding, FindingKind, NodeInfo, Severity};
use crate::protocol::keys::{self, Global, KnownKey};
use crate::protocol::reply::Marker;
use crate::rules::safety::{Persistence, process_life};

/// The slots of one shard master that hold a marker, and those whose marker names another
/// life than the master's current one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SlotMarkers {
    pub(crate) marked: usize,
    pub(crate) kept_out: usize,
}

/// The per-slot markers in `scan`, a shard master's keys under `prefix`, judged against
/// the life its `INFO` (`info`) names; a master whose life is unknown keeps every slot out.
pub(crate) fn slot_markers(scan: &KeyScan, prefix: &str, info: &NodeInfo) -> SlotMarkers {
    let life = process_life(
        info.run_id.as_deref(),
        None,
        Persistence::Unknown,
        info.promoted == Some(true),
        info.master_replid.as_deref(),
    )
    .life;
    let markers = (scan.keys.iter())
        .filter(|k| keys::parse_key(prefix, &k.name) == Some(KnownKey::Global(Global::Marker)));
    let mut counted = SlotMarkers::default();
    for key in markers {
        counted.marked += 1;
        let named = key
            .marker
            .as_deref()
            .and_then(Marker::parse)
            .map(|m| m.life);
        if life.is_none() || named.as_deref() != life.as_deref() {
            counted.kept_out += 1;
        }
    }
    counted
}

/// A finding for a shard master `master` of a Cluster member whose vote restart
/// quarantine keeps out in some slots.
pub(crate) fn slots_kept_out(master: &str, counted: SlotMarkers) -> Option<Finding> {
    (counted.kept_out > 0).then(|| {
        finding(
            FindingKind::KeptOut,
            Severity::Info,
            Some(master),
            format!(
                "restart quarantine keeps this shard master's vote out in {} of the {} slots \
                 in use (their markers name an earlier life: restarted or promoted since)",
                counted.kept_out, counted.marked
            ),
            "nothing to do: the next lock in each such slot readmits it once the master's \
             quarantine is over (quorum-lock repair readmits one slot per master)",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::keys::ScannedKey;
    use super::*;
    use crate::protocol::slots::slot_tag;

    fn marker(slot: u16, life: Option<&str>) -> ScannedKey {
        ScannedKey {
            name: keys::global("", Global::Marker, slot_tag(slot)),
            pttl_ms: -1,
            value_type: "string".into(),
            count: None,
            entries: None,
            marker: life.map(str::to_owned),
        }
    }

    #[test]
    fn slots_whose_marker_names_another_life_are_kept_out() {
        let mut info = NodeInfo::new("m:1");
        info.run_id = Some("now".into());
        let record = ScannedKey {
            name: keys::global("", Global::MaxTtl, slot_tag(1)),
            ..marker(1, None)
        };
        let scan = KeyScan {
            keys: vec![
                marker(1, Some("now")),
                marker(2, Some("before")),
                marker(3, None),
                record,
            ],
            partial: false,
        };
        let counted = slot_markers(&scan, "", &info);
        assert_eq!(
            counted,
            SlotMarkers {
                marked: 3,
                kept_out: 2
            }
        );
        assert!(slots_kept_out("m:1", counted).is_some());
        assert!(
            slots_kept_out(
                "m:1",
                SlotMarkers {
                    marked: 3,
                    kept_out: 0
                }
            )
            .is_none()
        );
        // A master whose life is unknown votes in no slot.
        info.run_id = None;
        assert_eq!(slot_markers(&scan, "", &info).kept_out, 3);
    }
}
