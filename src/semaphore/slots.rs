//! Acquiring a permit: the semaphore's slot plans as the candidates of the one acquisition
//! loop (`acquire::acquire_any`), in a turn among the client's tasks of which at most K
//! try at once.

use std::time::Duration;

use crate::acquire::candidates::{self, Candidates};
use crate::acquire::plan::Plan;
use crate::acquire::{self, Budget, heal};
use crate::error::Result;
use crate::protocol::access::Access;
use crate::protocol::keys;
use crate::semaphore::Semaphore;
use crate::semaphore::permit::Permit;

/// Every slot's plan for `ttl`, in slot order, taking a turn among this client's tasks
/// that want a permit of `semaphore`.
fn slot_candidates(semaphore: &Semaphore, ttl: Duration) -> Result<Candidates<'_>> {
    let ensemble = &semaphore.ensemble;
    let access = Access::Permit(semaphore.permits);
    let plans = (0..semaphore.permits)
        .map(|slot| {
            let resource = keys::permit_resource(&semaphore.name, slot);
            Plan::new(ensemble, vec![resource], ttl, false)?.with_access(access)
        })
        .collect::<Result<Vec<Plan>>>()?;
    Ok(Candidates::slots(plans, &semaphore.name))
}

/// The permit of slot `index` (a slot number, below `MAX_PERMITS`).
fn slot_number(index: usize) -> u32 {
    u32::try_from(index).unwrap_or(u32::MAX)
}

/// One pass over the slots, from a random one on: the first slot won, else the error of
/// the last attempt ([`crate::Error::Contended`] when every slot is held).
pub(super) async fn try_every_slot(semaphore: &Semaphore, ttl: Duration) -> Result<Permit> {
    let ensemble = &semaphore.ensemble;
    let candidates = slot_candidates(semaphore, ttl)?;
    heal::start_healer(ensemble);
    let on = (&candidates, candidates.order(None));
    let (index, guard) = candidates::pass(ensemble, on, None, &mut 0, |_| {}).await?;
    Ok(Permit::new(guard, slot_number(index), None))
}

/// Tries the slots until one is won, within `budget` (its attempt cap counts passes over
/// the slots), once this task has its turn among the client's tasks that want a permit
/// (at most K of them try at once, and the others wait in arrival order): a pass over
/// every slot, then a pause until a release of any client wakes this one, another task of
/// this client gives back a slot (then only that slot is tried), or the retry policy's
/// jittered delay runs out.
pub(super) async fn acquire_permit(
    semaphore: &Semaphore,
    ttl: Duration,
    budget: Budget,
) -> Result<Permit> {
    let candidates = slot_candidates(semaphore, ttl)?;
    let won = acquire::acquire_any(&semaphore.ensemble, candidates, budget).await?;
    let slot = slot_number(won.candidate);
    Ok(Permit::new(won.guard, slot, Some(won.turn)))
}
