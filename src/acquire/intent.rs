//! The writer intent of a read-write lock after the writer is done waiting: a writer that
//! won, gave up, or was dropped while it waited (a `timeout` or `select!` that stopped
//! polling it), clears it where it may remain (the nodes that refused it for their
//! readers, and there set the intent), so it does not keep readers out there until it
//! expires. Liveness only: readers and writers exclude each other by the lock key and the
//! readers, never by the intent.

use std::sync::Arc;

use crate::ensemble::Ensemble;
use crate::net::call::Call;
use crate::net::fanout::Round;
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
    let ([key], true) = (&plan.keys[..], plan.access.leaves_intent()) else {
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

/// Clears a writer's intent everywhere when the acquisition ends without a lock: on its
/// error returns, and when its future is dropped while it waits. Seated anew by every
/// attempt (a Cluster member's slot may move); [`won`](Self::won) clears it where the
/// winner was refused instead.
pub(crate) struct IntentCleanup<'a> {
    plan: &'a Plan,
    seated: Option<Arc<Ensemble>>,
}

impl<'a> IntentCleanup<'a> {
    pub(crate) fn new(plan: &'a Plan) -> Self {
        IntentCleanup { plan, seated: None }
    }

    /// The nodes the next attempt goes to.
    pub(crate) fn seat(&mut self, seated: &Arc<Ensemble>) {
        self.seated = Some(Arc::clone(seated));
    }

    /// The writer won: the intent goes where the nodes refused it.
    pub(crate) fn won(mut self, voted_yes: impl Fn(usize) -> bool) {
        if let Some(seated) = self.seated.take() {
            clear_after_write(&seated, self.plan, voted_yes);
        }
    }
}

impl Drop for IntentCleanup<'_> {
    fn drop(&mut self) {
        // Sending needs a runtime; without one the intent expires with its TTL.
        if let Some(seated) = self.seated.take()
            && tokio::runtime::Handle::try_current().is_ok()
        {
            clear_after_write(&seated, self.plan, |_| false);
        }
    }
}
