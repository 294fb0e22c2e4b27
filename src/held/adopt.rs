//! Adoption of a [`LockTicket`]: the guard of a lock another guard detached, once a
//! majority confirms that the ticket's token still holds it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::held::guard::LockGuard;
use crate::held::release::Holding;
use crate::held::ticket::LockTicket;
use crate::net::answers;
use crate::protocol::keys;
use crate::report::NodeOutcome;
use crate::rules::deadline;

/// The body of [`Redlock::adopt`](crate::Redlock::adopt): one extension round, the
/// guard's own, sets the ticket's TTL again on every node that holds its token; a majority
/// within the validity makes the guard. Refused, the nodes keep what they had (at most a
/// minority of leftover copies of the ticket's token, which its TTL removes): nothing is
/// released, so no waiter of another holder is woken.
pub(crate) async fn adopt_ticket(
    ensemble: &Arc<Ensemble>,
    ticket: &LockTicket,
) -> Result<LockGuard> {
    ensemble.check_open()?;
    let left = (ticket.valid_until)
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    if left.is_zero() {
        let unasked = vec![(NodeOutcome::Pending, Duration::ZERO); ensemble.nodes.len()];
        return Err(Error::NotHeld {
            report: answers::report(&ensemble.nodes, &unasked),
        });
    }
    let resources: Arc<[String]> = ticket.resources.clone().into();
    let keys = keys::locks(ensemble.config.space(), &resources);
    let holding = Holding::new(
        Arc::clone(ensemble),
        keys,
        ticket.token.as_str().into(),
        ticket.access,
    );
    // No vote was cast for this guard: its report says so until an extension.
    let votes = vec![(NodeOutcome::Pending, Duration::ZERO); ensemble.nodes.len()];
    let guard = LockGuard::new(
        holding,
        resources,
        ticket.ttl,
        deadline::after(Instant::now(), left),
        votes,
        ticket.fence,
    );
    match guard.extend(ticket.ttl).await {
        Ok(_) => Ok(guard.holding_locally()),
        Err(refused) => {
            guard.abandon();
            Err(refused)
        }
    }
}
