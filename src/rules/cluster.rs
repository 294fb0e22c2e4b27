//! The rules of a member that is a Redis Cluster, pure: which master owns each slot as a
//! round of the masters' answers confirms it. A Cluster member's vote counts only while
//! such a round, started less than a confirmation window before, named the node owner of
//! the lock's slot; that and a promoted master's quarantine are the Sentinel member's rules
//! (`rules::sentinel`: `vouched`, `promoted_life_start`), with the cluster's other masters
//! in the sentinels' place; `tests/model_cluster.rs` checks the three through a failover.

/// Per slot (`slots` of them), the owner that the round's `answers` confirm: `(master,
/// its answer)` per master asked, an answer being the owner of every slot (`None` where it
/// names none), `None` for a master that gave none. A master is confirmed owner of a slot
/// when more than half of the masters asked other than itself name it: what a master says
/// of itself is no evidence (an old master frozen through its failover and resumed names
/// itself until it hears of the promotion, and so does the promoted one), while each other
/// master's view only moves forward, so two rounds that confirm the old and the new owner
/// share a master that answered the first before the second. A cluster of one master has
/// no other: there its own answer confirms it, as a plain server's address does.
pub fn confirmed_owners<A: PartialEq + Clone>(
    answers: &[(A, Option<Vec<Option<A>>>)],
    slots: usize,
) -> Vec<Option<A>> {
    (0..slots)
        .map(|slot| {
            let named = |report: &Option<Vec<Option<A>>>| -> Option<A> {
                report.as_ref()?.get(slot)?.clone()
            };
            let candidates = answers.iter().filter_map(|(_, report)| named(report));
            candidates
                .clone()
                .find(|owner| confirms(answers, owner, &named))
        })
        .collect()
}

/// Whether a round whose answers so far are `answers` (`None` for a master yet to answer,
/// counted as not naming anyone) and whose confirmed owners they give are `agreed` (see
/// [`confirmed_owners`]) has settled: every slot some answer names an owner for has a
/// confirmed owner. Answers still to come cannot change a confirmed owner (each adds
/// namings, and no two owners of a slot can both be confirmed), so such a round need not
/// wait for a silent master.
pub fn settled<A>(answers: &[(A, Option<Vec<Option<A>>>)], agreed: &[Option<A>]) -> bool {
    agreed.iter().enumerate().all(|(slot, owner)| {
        owner.is_some()
            || (answers.iter()).all(|(_, report)| {
                report
                    .as_ref()
                    .is_none_or(|r| r.get(slot).is_none_or(Option::is_none))
            })
    })
}

/// Whether more than half of the masters of `answers` other than `owner` name it (or, when
/// `owner` is the only master asked, whether it names itself).
fn confirms<A: PartialEq>(
    answers: &[(A, Option<Vec<Option<A>>>)],
    owner: &A,
    named: &impl Fn(&Option<Vec<Option<A>>>) -> Option<A>,
) -> bool {
    let others = || answers.iter().filter(|(master, _)| master != owner);
    let asked = others().count();
    if asked == 0 {
        return answers
            .iter()
            .any(|(_, r)| named(r).as_ref() == Some(owner));
    }
    let naming = others()
        .filter(|(_, r)| named(r).as_ref() == Some(owner))
        .count();
    naming > asked / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn says(master: char, owners: &[Option<char>]) -> (char, Option<Vec<Option<char>>>) {
        (master, Some(owners.to_vec()))
    }

    #[test]
    fn a_master_is_confirmed_by_the_others_not_by_itself() {
        let (m, n) = (Some('m'), Some('n'));
        // Every master agrees: m owns slot 0, b slot 1.
        let all = [
            says('m', &[m, Some('b')]),
            says('b', &[m, Some('b')]),
            says('c', &[m, Some('b')]),
        ];
        assert_eq!(confirmed_owners(&all, 2), vec![m, Some('b')]);
        // The old master m resumed, naming itself; b has not switched yet, c has: neither
        // m nor the promoted n is confirmed.
        let lagging = [says('m', &[m]), says('b', &[m]), says('c', &[n])];
        assert_eq!(confirmed_owners(&lagging, 1), vec![None]);
        let promoted = [says('n', &[n]), says('b', &[m]), says('c', &[n])];
        assert_eq!(confirmed_owners(&promoted, 1), vec![None]);
        // Once both others switched, the promoted master is confirmed, the old one never.
        let switched = [says('n', &[n]), says('b', &[n]), says('c', &[n])];
        assert_eq!(confirmed_owners(&switched, 1), vec![n]);
        // A client whose table still lists m learns that n owns the slot.
        let stale = [says('m', &[m]), says('b', &[n]), says('c', &[n])];
        assert_eq!(confirmed_owners(&stale, 1), vec![n]);
        // A silent other master counts as not naming it.
        let silent = [says('m', &[m]), says('b', &[m]), ('c', None)];
        assert_eq!(confirmed_owners(&silent, 1), vec![None]);
        // Five masters: three of the four others suffice.
        let five = [
            says('m', &[m]),
            says('b', &[m]),
            says('c', &[m]),
            says('d', &[m]),
            ('e', None),
        ];
        assert_eq!(confirmed_owners(&five, 1), vec![m]);
    }

    #[test]
    fn a_round_settles_once_every_named_slot_is_confirmed() {
        let (m, b) = (Some('m'), Some('b'));
        // Five masters, one silent: the four others agree, nothing more can change.
        let mut answers = vec![
            says('m', &[m, b, None]),
            says('b', &[m, b, None]),
            says('c', &[m, b, None]),
            says('d', &[m, b, None]),
            ('e', None),
        ];
        let agreed = confirmed_owners(&answers, 3);
        assert_eq!(agreed, vec![m, b, None]);
        assert!(settled(&answers, &agreed));
        // Three masters, one silent: b's slot needs the silent one; not settled.
        answers.truncate(2);
        answers.push(('c', None));
        let agreed = confirmed_owners(&answers, 3);
        assert_eq!(agreed, vec![None, None, None]);
        assert!(!settled(&answers, &agreed));
    }

    #[test]
    fn a_single_master_confirms_itself() {
        assert_eq!(
            confirmed_owners(&[says('m', &[Some('m'), None])], 2),
            vec![Some('m'), None]
        );
        assert_eq!(confirmed_owners::<char>(&[('m', None)], 1), vec![None]);
    }
}
