//! Leader election's rules: who leads, as the nodes' answers to one read say, and which
//! term lengths leave a leader time to renew. The model check (`tests/model_election.rs`)
//! judges its observer's reads with [`judge_leader`].

use std::time::Duration;

use crate::rules::safety;

/// What one node holds of an election when read: nothing (free), or the lock key of a term
/// whose record `T` is beside it (the leader and its epoch) or is not (`None`: a grant
/// whose epoch was never committed there, or a term record gone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeTerm<T> {
    /// The election's lock key is absent.
    Free,
    /// The lock key is present, with the term it belongs to when its record says so.
    Held(Option<T>),
}

/// Who leads, as judged from one read of every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged<T> {
    /// A majority of all nodes hold this term, lock key and record alike.
    Leader(T),
    /// A majority of all nodes hold no lock key for the election.
    NoLeader,
    /// Neither: too few nodes answered, or the answers disagree.
    Unknown,
}

/// Judges one read: `reads[i]` is node `i`'s answer (`None`: it did not answer). A term is
/// reported only when a majority of all `nodes` hold it with its record, never on fewer
/// nodes' word: any two majorities share a node, so no later term can be held as well,
/// and an earlier term's copies left on a minority are outvoted. A grant without its
/// record counts for no leader, so a campaign that won votes but whose epoch was never
/// committed is not reported with another term's epoch.
pub fn judge_leader<T: PartialEq + Clone>(
    reads: &[Option<NodeTerm<T>>],
    nodes: usize,
) -> Judged<T> {
    let quorum = safety::majority(nodes);
    let free = reads
        .iter()
        .filter(|r| matches!(r, Some(NodeTerm::Free)))
        .count();
    if free >= quorum {
        return Judged::NoLeader;
    }
    let terms = reads.iter().filter_map(|r| match r {
        Some(NodeTerm::Held(Some(term))) => Some(term),
        _ => None,
    });
    for term in terms {
        let same = reads
            .iter()
            .filter(|r| matches!(r, Some(NodeTerm::Held(Some(t))) if t == term))
            .count();
        if same >= quorum {
            return Judged::Leader(term.clone());
        }
    }
    Judged::Unknown
}

/// Whether a read whose answers so far are `reads` already has its outcome: the answers
/// still missing cannot change it.
pub fn is_judged<T: PartialEq + Clone>(reads: &[Option<NodeTerm<T>>], nodes: usize) -> bool {
    !matches!(judge_leader(reads, nodes), Judged::Unknown)
}

/// The shortest term an election accepts: a leader renews its term in the background, and
/// each renewal may take a round of the node timeout; the term must outlast four such
/// rounds beyond the drift allowance (as client-go's leader election checks that the lease
/// outlasts the renew deadline), so one slow renewal does not end it.
pub fn shortest_term(node_timeout: Duration, drift_allowance: Duration) -> Duration {
    node_timeout
        .saturating_mul(4)
        .saturating_add(drift_allowance)
}

/// How often a leader rewrites its term record and a waiting candidate refreshes its
/// entry, both living one `ttl`: every third of it (at least the drift allowance's 2 ms,
/// so that a tiny TTL never spins).
pub fn refresh_period(ttl: Duration) -> Duration {
    (ttl / 3).max(safety::drift_allowance(Duration::ZERO, 0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(t: u8) -> Option<NodeTerm<u8>> {
        Some(NodeTerm::Held(Some(t)))
    }

    const FREE: Option<NodeTerm<u8>> = Some(NodeTerm::Free);
    const GRANT: Option<NodeTerm<u8>> = Some(NodeTerm::Held(None));

    #[test]
    fn a_majority_decides_and_fewer_nodes_do_not() {
        assert_eq!(
            judge_leader(&[held(1), held(1), None], 3),
            Judged::Leader(1)
        );
        assert_eq!(judge_leader(&[FREE, FREE, held(1)], 3), Judged::NoLeader);
        assert_eq!(judge_leader(&[held(1), None, None], 3), Judged::Unknown);
        assert_eq!(judge_leader(&[held(1), held(2), FREE], 3), Judged::Unknown);
        assert_eq!(judge_leader(&[held(1), GRANT, GRANT], 3), Judged::Unknown);
        assert_eq!(judge_leader(&[GRANT, GRANT, FREE], 3), Judged::Unknown);
        assert_eq!(judge_leader(&[held(3)], 1), Judged::Leader(3));
        assert_eq!(judge_leader(&[FREE], 1), Judged::NoLeader);
        assert_eq!(judge_leader::<u8>(&[None], 1), Judged::Unknown);
        let five = [held(2), FREE, held(2), held(2), None];
        assert_eq!(judge_leader(&five, 5), Judged::Leader(2));
        assert!(is_judged(&five, 5));
        assert!(!is_judged(&[held(2), FREE, None, None, None], 5));
    }

    #[test]
    fn the_shortest_term_outlasts_four_node_timeouts() {
        let ms = Duration::from_millis;
        assert_eq!(shortest_term(ms(50), ms(2)), ms(202));
        assert_eq!(shortest_term(Duration::MAX, ms(2)), Duration::MAX);
    }
}
