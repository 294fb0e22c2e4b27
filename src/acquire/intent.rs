//! The writer intent of a read-write lock after the writer is done waiting: a writer that
//! won, or gave up, clears it where it may remain (the nodes that refused it for their
//! readers, and there set the intent), so it does not keep readers out there until it
//! expires. Liveness only: readers and writers exclude each other by the lock key and the
//! readers, never by the intent.

use crate::ensemble::Ensemble;
use crate::net::call::Call;
use crate::net::fanout::Round;
use crate::protocol::access::Access;
use crate::protocol::rw_scripts;

use super::plan::Plan;

/// Clears the intent in the background on the nodes `i` for which `voted_yes(i)` is false
/// (all of them for a writer that gave up), for a write plan; does nothing for other plans
/// or when every node voted yes.
pub(crate) fn clear_after_write(
    ensemble: &Ensemble,
    plan: &Plan,
    voted_yes: impl Fn(usize) -> bool,
) {
    let ([key], Access::Write) = (&plan.keys[..], plan.access) else {
        return;
    };
    let which: Vec<usize> = (0..ensemble.nodes.len())
        .filter(|&i| !voted_yes(i))
        .collect();
    if which.is_empty() {
        return;
    }
    let call = Call::new(rw_scripts::clear_intent(ensemble.config.space(), key));
    let scope = ensemble.round_scope();
    Round::broadcast(scope, call, which).finish_in_background(scope);
}
