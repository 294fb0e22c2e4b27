//! Acquiring a permit: one attempt per slot lock, from a random slot on (so that clients
//! spread over the slots instead of all contending for the first), then a jittered pause
//! before the next pass, until a slot is won or the wait budget runs out.

use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::attempt;
use crate::acquire::heal;
use crate::acquire::plan::Plan;
use crate::error::{Error, Result};
use crate::metrics;
use crate::protocol::keys;
use crate::semaphore::Semaphore;
use crate::semaphore::permit::Permit;

/// One pass over the slots: the first slot won, else the error of the last attempt
/// ([`Error::Contended`] when every slot is held), or at once an error no retry mends.
pub(super) async fn try_every_slot(semaphore: &Semaphore, ttl: Duration) -> Result<Permit> {
    let ensemble = &semaphore.ensemble;
    heal::start_healer(ensemble);
    let first = rand::random::<u32>() % semaphore.permits;
    let mut last = None;
    let mut contended = None;
    for step in 0..semaphore.permits {
        let slot = (first + step) % semaphore.permits;
        let resource = keys::permit_resource(&semaphore.name, slot);
        let plan = Plan::new(ensemble, vec![resource], ttl, false)?;
        match attempt::attempt(ensemble, &plan, None).await {
            Ok(guard) => return Ok(Permit::new(guard, slot)),
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

/// Passes over the slots until one is won, pausing between passes (the client's retry
/// policy, jittered) for at most `wait` in all.
pub(super) async fn acquire_permit(
    semaphore: &Semaphore,
    ttl: Duration,
    wait: Duration,
) -> Result<Permit> {
    let started = Instant::now();
    let retry = &semaphore.ensemble.config.retry;
    let mut passes: u32 = 0;
    loop {
        passes = passes.saturating_add(1);
        let err = match try_every_slot(semaphore, ttl).await {
            Ok(permit) => {
                metrics::acquired(started.elapsed());
                return Ok(permit);
            }
            Err(e) if e.is_retryable() => e,
            Err(e) => return Err(e),
        };
        let remaining = wait.saturating_sub(started.elapsed());
        if remaining.is_zero() {
            metrics::gave_up();
            return Err(Error::Timeout {
                attempts: passes.saturating_mul(semaphore.permits),
                waited: started.elapsed(),
                last: Box::new(err),
            });
        }
        let delay = retry.delay(passes - 1, rand::random::<f64>());
        tokio::time::sleep(delay.min(remaining)).await;
    }
}
