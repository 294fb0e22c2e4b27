//! Acquiring a lock: the Redlock attempt and everything that decides whether it won.
//!
//! - this file: `lock()`'s loop, attempts retried with jittered backoff until the wait
//!   budget or the attempt cap runs out, in this client's local turn for the keys, waiting
//!   between attempts through the waiting protocol ([`Waiting`]);
//! - [`plan`]: a validated acquisition (resources, keys, TTL);
//! - [`attempt`]: one attempt (`try_lock`) from its token to its guard or its error, made
//!   of the acquire round and its votes ([`vote_round`]), restart quarantine's markers
//!   ([`markers`]), the fencing commit ([`fence_commit`]) and the clean-up and error of a
//!   failed attempt ([`refusal`]);
//! - [`ballot`]: what each node's answer says for restart quarantine and fencing;
//! - [`first_contact`]: reaching every node, and letting a new ensemble's nodes reach a
//!   second of age before a client that knows none of them admitted sends its keys;
//! - [`heal`]: readmission of restarted nodes without lock traffic.
//!
//! The rest of the crate calls [`acquire`] with a [`Request`] (or [`plan::Plan`] and
//! [`attempt::attempt`] for a single attempt) and gets a held lock back.

pub(crate) mod attempt;
pub mod ballot;
mod fence_commit;
pub(crate) mod first_contact;
pub(crate) mod heal;
mod markers;
pub(crate) mod plan;
mod refusal;
pub(crate) mod vote_round;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::held::extend::AutoExtend;
use crate::held::guard::LockGuard;
use crate::metrics;
use crate::report::NodeReport;
use crate::wait::Waiting;
use plan::Plan;

/// What a `LockRequest` asks for.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) resources: Vec<String>,
    pub(crate) ttl: Duration,
    /// Overrides the configured wait budget.
    pub(crate) wait: Option<Duration>,
    /// Overrides the configured attempt cap.
    pub(crate) max_attempts: Option<u32>,
    pub(crate) auto_extend: Option<AutoExtend>,
    pub(crate) fencing: bool,
}

/// Runs a `LockRequest` on `ensemble`: see its `IntoFuture` docs in the client module.
pub(crate) async fn acquire(ensemble: Arc<Ensemble>, request: Request) -> Result<LockGuard> {
    let ensemble = &ensemble;
    let config = &ensemble.config;
    let plan = Plan::new(ensemble, request.resources, request.ttl, request.fencing)?;
    let max_attempts = request.max_attempts.or(config.max_attempts);
    if max_attempts == Some(0) {
        return Err(Error::Config("max attempts is zero; use at least 1".into()));
    }
    let started = Instant::now();
    let wait = request.wait.unwrap_or(config.wait);

    // Tasks of this client queue locally for their turn, so only one of them at a time
    // sends attempts for these resources. The turn passes on as soon as this call returns
    // (acquired or not): the next task then waits on Redis for our release.
    let Ok(_turn) = tokio::time::timeout(wait, ensemble.queue.turn(&plan.keys)).await else {
        metrics::gave_up();
        return Err(Error::Timeout {
            attempts: 0,
            waited: started.elapsed(),
            last: Box::new(Error::Contended {
                report: NodeReport::default(),
            }),
        });
    };
    let mut waiting = Waiting::start(
        ensemble.wait_context(),
        &plan.keys,
        crate::rules::deadline::after(started, wait),
    )
    .await;
    let mut attempts: u32 = 0;
    let mut retries: u32 = 0;
    crate::acquire::heal::start_healer(ensemble);
    loop {
        let remaining = wait.saturating_sub(started.elapsed());
        wait_for_local_release(ensemble, &plan, remaining, &mut retries).await;
        attempts = attempts.saturating_add(1);
        let (enqueue, gated) = waiting.next(attempts);
        let result = match enqueue.filter(|_| gated) {
            // A waiter that was not woken asks the waiting-list node first, so it does not
            // take the lock from under the client a release woke, nor split the votes.
            Some(e) => match waiting.ask_gate(e, plan.list_ttl_ms()).await {
                Ok(()) => attempt::attempt(ensemble, &plan, enqueue).await,
                Err(refused) => Err(refused),
            },
            None => attempt::attempt(ensemble, &plan, enqueue).await,
        };
        let err = match result {
            Ok(mut guard) => {
                waiting.acquired(enqueue, enqueue.and_then(|e| guard.vote(e.node)));
                metrics::acquired(started.elapsed());
                if let Some(policy) = request.auto_extend {
                    guard.auto_extend(policy);
                }
                return Ok(guard);
            }
            Err(e) if e.is_retryable() => e,
            Err(e) => return Err(e),
        };
        let waited = started.elapsed();
        let remaining = wait.saturating_sub(waited);
        if remaining.is_zero() || max_attempts.is_some_and(|m| attempts >= m) {
            metrics::gave_up();
            return Err(Error::Timeout {
                attempts,
                waited,
                last: Box::new(err),
            });
        }
        let poll = |shift: u32| {
            let delay = config
                .retry
                .delay(retries.saturating_add(shift), rand::random::<f64>());
            retries = retries.saturating_add(1);
            delay
        };
        waiting.pause(&err, enqueue, remaining, poll).await;
    }
}

/// A guard of this client holds the lock: an attempt would fail. Waits for its release to
/// complete, or one poll interval in case the guard was forgotten (at most `remaining`).
async fn wait_for_local_release(
    ensemble: &Arc<Ensemble>,
    plan: &Plan,
    remaining: Duration,
    retries: &mut u32,
) {
    let Some(freed) = ensemble.queue.held_locally(&plan.keys) else {
        return;
    };
    let notified = freed.notified();
    tokio::pin!(notified);
    notified.as_mut().enable();
    if ensemble.queue.held_locally(&plan.keys).is_some() && !remaining.is_zero() {
        let delay = (ensemble.config.retry)
            .delay(*retries, rand::random::<f64>())
            .min(remaining);
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep(delay) => *retries = retries.saturating_add(1),
        }
    }
}
