//! A failed attempt: the clean-up wherever its token may be, the diagnosis of keys of
//! another type (`WRONGTYPE`) behind a refused `SET NX`, and the error the caller gets.

use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::plan::{Attempt, Plan};
use crate::ensemble::Ensemble;
use crate::error::Error;
use crate::held::release::{self, Holding};
use crate::metrics;
use crate::net::answers::{self, Collected, Stop};
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::protocol::{keys, reply};
use crate::report::{NodeOutcome, NodeReport};
use crate::rules::quorum::{self, Decision};

/// The clean-up and error of an attempt without a majority.
pub(super) async fn no_majority(
    this: Attempt<'_>,
    mut holding: Holding,
    mut collected: Collected,
    votes: &[quorum::Vote],
    start: Instant,
) -> Error {
    // Release wherever our token may be. Nodes that answered "held by another" or "wrong
    // type" certainly do not have it; every other node might (a timed-out SET may still
    // have been applied).
    let maybe_ours: Vec<usize> = (collected.outcomes.iter().enumerate())
        .filter(|(_, (o, _))| !certainly_not_set(o))
        .map(|(i, _)| i)
        .collect();
    let (ensemble, plan) = (this.ensemble, this.plan);
    let plain_set = plan.keys.len() == 1 && this.enqueue.is_none() && !plan.fencing;
    let (refused, ()) = tokio::join!(
        holding.release_on(maybe_ours.iter().copied(), this.requeue()),
        find_other_types(ensemble, plan, plain_set, &mut collected),
    );
    forget_count(ensemble, plan, maybe_ours);
    let decision = quorum::decide_acquire(votes, start.elapsed(), None);
    let err = refusal(ensemble, &collected, decision, start.elapsed());
    let err = count_mismatch(ensemble, plan, &collected).unwrap_or(err);
    attempt_error(&collected, refused, err)
}

/// Whether a node that answered `outcome` certainly did not set the token.
fn certainly_not_set(outcome: &NodeOutcome) -> bool {
    matches!(
        outcome,
        NodeOutcome::HeldByOther
            | NodeOutcome::WrongType
            | NodeOutcome::CountMismatch { .. }
            | NodeOutcome::NameInUse
    )
}

/// The error of a semaphore's slot refused by a majority of nodes that record another
/// permit count (see [`count_in_use`]): clients of one semaphore use different counts,
/// which no retry mends.
fn count_mismatch(ensemble: &Ensemble, plan: &Plan, collected: &Collected) -> Option<Error> {
    let count = plan.access.permit_count()?;
    let held_as_lock = (collected.outcomes.iter())
        .filter(|(o, _)| *o == NodeOutcome::NameInUse)
        .count();
    if held_as_lock >= ensemble.quorum {
        return Some(Error::Config(format!(
            "semaphore {:?}: its name is held as a lock (a mutex or a read-write lock) on a \
             majority of nodes; one name is one lock, of one kind",
            keys::semaphore_of(&plan.resources[0])
        )));
    }
    let recorded = count_in_use(&collected.outcomes, ensemble.quorum)?;
    let recorded = recorded.map_or_else(|| "another count of".to_owned(), |n| n.to_string());
    Some(Error::Config(format!(
        "semaphore slot {:?}: this client uses {count} permits, but the nodes record \
         {recorded} permits for the semaphore while its holders may hold; every client of \
         a semaphore must use the same count",
        plan.resources[0]
    )))
}

/// The count another semaphore's holders use (`None` inside: a record that is not a count),
/// when at least `quorum` nodes refused for a count record other than ours: only then may
/// holders of that count hold, since a holder's slot and count record are on a majority.
/// A minority's record (left by an attempt that failed, say) refuses the slot on those
/// nodes only, as another holder's key would: contention, not a configuration error.
fn count_in_use(outcomes: &[(NodeOutcome, Duration)], quorum: usize) -> Option<Option<u32>> {
    let mut recorded = (outcomes.iter()).filter_map(|(o, _)| match o {
        NodeOutcome::CountMismatch { recorded } => Some(*recorded),
        _ => None,
    });
    let first = recorded.next()?;
    (1 + recorded.count() >= quorum).then_some(first)
}

/// After a failed plain `SET NX`, which nodes that refused it hold a key of another type
/// (foreign data: a list, a hash, ...) at the lock key, not a lock: `SET NX` answers nil
/// for both. Asked with `TYPE` on those nodes only on this failure path, concurrently with
/// the clean-up, so the fast path stays one command per node. (`SET NX GET` would tell in
/// one command, but Redis 6.2 rejects it, and a per-node choice of command is not worth
/// it for a report.) The acquire script tells the types apart by itself.
async fn find_other_types(
    ensemble: &Ensemble,
    plan: &Plan,
    plain_set: bool,
    collected: &mut Collected,
) {
    let ([key], true) = (&plan.keys[..], plain_set) else {
        return;
    };
    let refused: Vec<usize> = (collected.outcomes.iter().enumerate())
        .filter(|(_, (o, _))| *o == NodeOutcome::HeldByOther)
        .map(|(i, _)| i)
        .collect();
    if refused.is_empty() {
        return;
    }
    let mut cmd = redis::cmd("TYPE");
    cmd.arg(key);
    let mut round = Round::broadcast(ensemble.round_scope(), Call::new(cmd), refused);
    let types = answers::collect(
        &ensemble.nodes,
        &mut round,
        |_, answer| match reply::is_other_type(answer) {
            true => NodeOutcome::WrongType,
            false => NodeOutcome::HeldByOther,
        },
        |_| false,
        Stop::AtEnd,
    )
    .await;
    for (slot, (found, _)) in collected.outcomes.iter_mut().zip(types.outcomes) {
        if found == NodeOutcome::WrongType {
            slot.0 = NodeOutcome::WrongType;
        }
    }
}

/// A majority was won but the attempt failed after all (fencing commit failed, validity
/// spent): the keys may be anywhere now, so release everywhere, then return `err`.
pub(super) async fn give_back(
    this: Attempt<'_>,
    mut holding: Holding,
    list_reply: Option<(usize, Round)>,
    collected: &Collected,
    err: Error,
) -> Error {
    let ensemble = this.ensemble;
    if let Some((_, reply)) = list_reply {
        reply.finish_in_background(ensemble.round_scope());
    }
    let refused = (holding.release_on(0..ensemble.nodes.len(), this.requeue())).await;
    forget_count(ensemble, this.plan, 0..ensemble.nodes.len());
    attempt_error(collected, refused, err)
}

/// After a failed attempt on a semaphore's slot released it on the nodes `which`: removes,
/// in the background, the count record and name mark it may have set there beside the
/// slot, on the nodes where no slot of its count is left ([`release::forget_permit_count`]).
/// Left there, they would refuse the clients of the count in use, and the locks of the
/// name, for up to a TTL. Best effort: a
/// record this misses expires with its TTL, and a minority's refuses only as contention
/// ([`count_in_use`]).
fn forget_count(ensemble: &Ensemble, plan: &Plan, which: impl IntoIterator<Item = usize>) {
    if let (Some(permits), [slot_key]) = (plan.access.permit_count(), &plan.keys[..]) {
        release::forget_permit_count(ensemble, slot_key, permits, which);
    }
}

/// The error of a decision other than a win, `elapsed` after the attempt started,
/// counted in the metrics: the one place where a refused attempt becomes an error.
pub(super) fn refusal(
    ensemble: &Ensemble,
    collected: &Collected,
    decision: Decision,
    elapsed: Duration,
) -> Error {
    metrics::attempt(decision.label(), elapsed);
    let report = || collected.report(&ensemble.nodes);
    match decision.into_result(report) {
        Err(err) => err,
        // Callers only pass decisions other than a win.
        Ok(_) => Error::Contended { report: report() },
    }
}

/// The error a failed attempt returns once cleaned up, recorded in its span: `err`, unless
/// a node's ACL refused the clean-up (`refused`, that round's report): then the key may
/// stay there for a TTL, and the refusal is the error to report.
fn attempt_error(collected: &Collected, refused: Option<NodeReport>, err: Error) -> Error {
    let err = match refused {
        Some(report) if !err.is_permission() => Error::Permission { report },
        _ => err,
    };
    let span = tracing::Span::current();
    span.record("votes", collected.tally.yes());
    span.record("outcome", tracing::field::display(&err));
    let report = err.report().map(ToString::to_string).unwrap_or_default();
    tracing::debug!(%report, "attempt failed");
    err
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_majority_s_count_record_is_a_count_in_use() {
        let three = |o: [NodeOutcome; 3]| o.map(|o| (o, Duration::ZERO));
        let mismatch = |n| NodeOutcome::CountMismatch { recorded: n };
        let (held, free) = (NodeOutcome::HeldByOther, NodeOutcome::Acquired);
        let table = [
            ([mismatch(Some(3)), held.clone(), held.clone()], None),
            ([mismatch(Some(3)), free.clone(), free.clone()], None),
            ([free.clone(), mismatch(None), NodeOutcome::TimedOut], None),
            (
                [mismatch(Some(3)), mismatch(Some(3)), held.clone()],
                Some(Some(3)),
            ),
            (
                [mismatch(Some(1)), free.clone(), mismatch(Some(1))],
                Some(Some(1)),
            ),
            ([mismatch(None), mismatch(None), mismatch(None)], Some(None)),
            ([held.clone(), held.clone(), held], None),
        ];
        for (outcomes, in_use) in table {
            assert_eq!(
                count_in_use(&three(outcomes.clone()), 2),
                in_use,
                "{outcomes:?}"
            );
        }
        let one = [(mismatch(Some(2)), Duration::ZERO)];
        assert_eq!(
            count_in_use(&one, 1),
            Some(Some(2)),
            "a single node decides alone"
        );
    }
}
