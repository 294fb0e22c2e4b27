//! Acquiring a permit: one attempt per slot lock, from a random slot on, then a pause
//! before the next pass (cut short by a release: announced by any client, see `listen`, or
//! by this client's own), until a slot is won or the wait budget runs out.

use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::attempt;
use crate::acquire::gave_up;
use crate::acquire::heal;
use crate::acquire::plan::Plan;
use crate::error::{Error, Result};
use crate::metrics;
use crate::protocol::access::Access;
use crate::protocol::keys;
use crate::semaphore::Semaphore;
use crate::semaphore::listen::{PassAgain, PermitListener};
use crate::semaphore::permit::Permit;
use crate::wait::Enqueue;

/// The lock keys of `semaphore`'s slots, in slot order.
fn slot_keys(semaphore: &Semaphore) -> std::sync::Arc<[String]> {
    let space = semaphore.ensemble.config.space();
    (0..semaphore.permits)
        .map(|slot| keys::lock(space, &keys::permit_resource(&semaphore.name, slot)))
        .collect()
}

/// Every slot of `permits`, from a random one on (clients spread over the slots instead of
/// all contending for the first).
fn every_slot(permits: u32) -> impl Iterator<Item = u32> {
    let first = rand::random::<u32>() % permits;
    (0..permits).map(move |step| (first + step) % permits)
}

/// One pass over the slots: see [`try_slots`].
pub(super) async fn try_every_slot(semaphore: &Semaphore, ttl: Duration) -> Result<Permit> {
    try_slots(semaphore, ttl, every_slot(semaphore.permits), None, &mut 0).await
}

/// One attempt on each of `slots`, in order, counted in `attempts`, each keeping this
/// client in the semaphore's waiting list as `enqueue` says: the first slot won, else the
/// error of the last attempt ([`Error::Contended`] when every slot is held), or at once an
/// error no retry mends.
async fn try_slots(
    semaphore: &Semaphore,
    ttl: Duration,
    slots: impl Iterator<Item = u32>,
    enqueue: Option<Enqueue<'_>>,
    attempts: &mut u32,
) -> Result<Permit> {
    let ensemble = &semaphore.ensemble;
    heal::start_healer(ensemble);
    let mut last = None;
    let mut contended = None;
    for slot in slots {
        *attempts = attempts.saturating_add(1);
        let resource = keys::permit_resource(&semaphore.name, slot);
        let plan = Plan::new(ensemble, vec![resource], ttl, false)?;
        let plan = plan.with_access(Access::Permit(semaphore.permits))?;
        let seated = ensemble.seated(&plan.keys).await;
        match attempt::attempt(&seated, &plan, enqueue).await {
            Ok(guard) => return Ok(Permit::new(guard, slot, None)),
            Err(e @ Error::Contended { .. }) => contended = Some(e),
            Err(e) if e.is_retryable() => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    // A fault says more than a held slot: with every slot held, the answer is "held".
    Err(last.or(contended).unwrap_or(Error::Contended {
        report: Default::default(),
    }))
}

/// Tries the slots until one is won, for at most `wait` in all, once this task has its turn
/// among the client's tasks that want a permit (at most K of them try at once, and the
/// others wait in arrival order: `LocalQueue::permit_turn`): a pass over every slot, then
/// a pause before the next pass (see [`PermitListener::pause`]): until a release of any
/// client wakes this one, another task of this client gives back a permit it held when the
/// pass began or ended (then only that slot is tried, by every task that waited for it),
/// or the client's retry policy's jittered delay runs out.
pub(super) async fn acquire_permit(
    semaphore: &Semaphore,
    ttl: Duration,
    wait: Duration,
) -> Result<Permit> {
    let started = Instant::now();
    let ensemble = &semaphore.ensemble;
    let queue = &ensemble.queue;
    let deadline = crate::rules::deadline::after(started, wait);
    let turn = queue.permit_turn(&semaphore.name, semaphore.permits);
    let Ok(turn) = tokio::time::timeout_at(deadline, turn).await else {
        let held = Error::Contended {
            report: Default::default(),
        };
        return Err(gave_up(0, started, held));
    };
    let slot_keys = slot_keys(semaphore);
    let mut listener = PermitListener::new(ensemble, std::sync::Arc::clone(&slot_keys));
    let (mut attempts, mut polls, mut next) = (0u32, 0u32, PassAgain::Polled);
    loop {
        let local_releases = queue.watch_releases(&slot_keys);
        let enqueue = listener.enqueue();
        let tried = match next {
            PassAgain::FreedHere(slot) => {
                try_slots(
                    semaphore,
                    ttl,
                    std::iter::once(slot),
                    enqueue,
                    &mut attempts,
                )
                .await
            }
            _ => {
                let slots = every_slot(semaphore.permits);
                try_slots(semaphore, ttl, slots, enqueue, &mut attempts).await
            }
        };
        let err = match tried {
            Ok(permit) => {
                listener.won(enqueue, enqueue.and_then(|e| permit.vote(e.node)));
                metrics::acquired(started.elapsed());
                return Ok(permit.with_turn(turn));
            }
            Err(e) if e.is_retryable() => e,
            Err(e) => return Err(e),
        };
        let remaining = wait.saturating_sub(started.elapsed());
        if remaining.is_zero() {
            return Err(gave_up(attempts, started, err));
        }
        // Also the slots other tasks of this client took during the attempts.
        let local_releases = local_releases.and(queue.watch_releases(&slot_keys));
        let delay = ensemble.config.retry.delay(polls, rand::random::<f64>());
        let listed_on = enqueue.map(|e| e.node);
        next = (listener.pause(local_releases, delay.min(remaining), remaining, listed_on)).await;
        if next == PassAgain::Polled {
            polls = polls.saturating_add(1);
        }
    }
}
