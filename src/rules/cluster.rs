//! The rules of a member that is a Redis Cluster, pure: which master owns each slot as a
//! round of the masters' answers agrees. A Cluster member's vote counts only while such a
//! round, started less than a confirmation window before, named the node owner of the
//! lock's slot; that and a promoted master's quarantine are the Sentinel member's rules
//! (`rules::sentinel`: `vouched`, `promoted_life_start`), with the cluster's masters in the
//! sentinels' place, and `tests/model_sentinel.rs` checks them.

use crate::rules::sentinel::agreed;

/// Per slot (`slots` of them), the owner that a majority of the masters asked named in
/// `reports` (one per master asked, `None`: no answer; each answer the owner of every
/// slot, `None` where it names none). A majority of those asked, not of those that
/// answered, as for the sentinels: two rounds' majorities of one set of masters then share
/// a master.
pub fn agreed_owners<A: PartialEq + Clone>(
    reports: &[Option<Vec<Option<A>>>],
    slots: usize,
) -> Vec<Option<A>> {
    let mut named = Vec::with_capacity(reports.len());
    (0..slots)
        .map(|slot| {
            named.clear();
            named.extend(reports.iter().map(|report| {
                let owner = report.as_ref()?.get(slot)?;
                owner.clone()
            }));
            agreed(&named, reports.len())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_slot_goes_to_the_owner_a_majority_of_the_masters_names() {
        let a = || Some(vec![Some('a'), Some('b'), None]);
        let moved = || Some(vec![Some('a'), Some('c'), None]);
        // Three masters, all agreeing; one of them behind on slot 1.
        assert_eq!(
            agreed_owners(&[a(), a(), moved()], 3),
            vec![Some('a'), Some('b'), None]
        );
        // One silent master: the two others still make a majority of three.
        assert_eq!(
            agreed_owners(&[a(), None, moved()], 3),
            vec![Some('a'), None, None]
        );
        // A short answer names no owner for the slots it lacks.
        assert_eq!(
            agreed_owners(&[a(), Some(vec![Some('a')]), a()], 3),
            vec![Some('a'), Some('b'), None]
        );
        assert_eq!(agreed_owners::<char>(&[None, None], 2), vec![None, None]);
    }
}
