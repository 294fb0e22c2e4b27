//! Acquiring a lock: the Redlock attempt and everything that decides whether it won.
//!
//! - this file: `lock()`'s loop, attempts retried with jittered backoff until the wait
//!   budget or the attempt cap runs out, in this client's local turn for the keys, waiting
//!   between attempts through the waiting protocol ([`Waiting`]);
//! - [`request`]: [`LockRequest`](request::LockRequest), the public builder of a call;
//! - [`plan`]: a validated acquisition (resources, keys, TTL);
//! - [`attempt`]: one attempt (`try_lock`) from its token to its guard or its error, made
//!   of the acquire round and its votes ([`vote_round`]), restart quarantine's markers
//!   ([`markers`]), the fencing commit ([`fence_commit`]) and the clean-up and error of a
//!   failed attempt ([`refusal`]);
//! - [`ballot`]: what each node's answer says for restart quarantine and fencing;
//! - [`first_contact`]: reaching every node, and letting a new ensemble's nodes reach a
//!   second of age before a client that knows none of them admitted sends its keys;
//! - [`first_start`]: an operator's declaration that a new ensemble's nodes never served;
//! - [`heal`]: readmission of restarted nodes without lock traffic;
//! - [`intent`]: a read-write lock's writer intent, cleared once the writer is done
//!   waiting.
//!
//! The rest of the crate calls [`acquire`] with a [`Request`] (or [`plan::Plan`] and
//! [`attempt::attempt`] for a single attempt) and gets a held lock back.

pub(crate) mod attempt;
pub mod ballot;
mod fence_commit;
pub(crate) mod first_contact;
pub(crate) mod first_start;
pub(crate) mod heal;
pub(crate) mod intent;
mod markers;
pub(crate) mod plan;
mod refusal;
pub(crate) mod request;
pub(crate) mod vote_round;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::held::extend::AutoExtend;
use crate::held::guard::LockGuard;
use crate::metrics;
use crate::protocol::access::Access;
use crate::protocol::keys;
use crate::report::NodeReport;
use crate::rules::retry::RetryPolicy;
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
    /// A mutex, or a side of a read-write lock.
    pub(crate) access: Access,
}

/// Runs a `LockRequest` on `ensemble`: see its `IntoFuture` docs in the client module.
pub(crate) async fn acquire(ensemble: Arc<Ensemble>, request: Request) -> Result<LockGuard> {
    let ensemble = &ensemble;
    let config = &ensemble.config;
    if request.access == Access::Mutex {
        for resource in &request.resources {
            keys::check_user_name("resource", resource)?;
        }
    }
    let plan = Plan::new(ensemble, request.resources, request.ttl, request.fencing)?
        .with_access(request.access)?;
    refuse_upgrade(ensemble, &plan)?;
    let max_attempts = request.max_attempts.or(config.max_attempts);
    if max_attempts == Some(0) {
        return Err(Error::Config("max attempts is zero; use at least 1".into()));
    }
    let started = Instant::now();
    let wait = request.wait.unwrap_or(config.wait);
    let deadline = crate::rules::deadline::after(started, wait);
    let Some(mut waiting) = Waiting::start(ensemble.wait_context(), &plan.keys, deadline).await
    else {
        return Err(gave_up(
            0,
            started,
            Error::Contended {
                report: NodeReport::default(),
            },
        ));
    };
    let mut backoff = Backoff {
        policy: &config.retry,
        retries: 0,
    };
    let mut attempts: u32 = 0;
    crate::acquire::heal::start_healer(ensemble);
    // Every way out but a win, a dropped future included, clears a writer's intent.
    let mut cleanup = intent::IntentCleanup::new(&plan);
    loop {
        let remaining = wait.saturating_sub(started.elapsed());
        if waiting
            .for_local_release(remaining, || backoff.peek())
            .await
        {
            backoff.retries = backoff.retries.saturating_add(1);
        }
        attempts = attempts.saturating_add(1);
        let (enqueue, gated) = waiting.next(attempts);
        // Seated anew for every attempt: a Cluster member's slot may have a new owner.
        let seated = &ensemble.seated(&plan.keys).await;
        cleanup.seat(seated);
        let result = match enqueue.filter(|_| gated) {
            // A waiter that was not woken asks the waiting-list node first, so it does not
            // take the lock from under the client a release woke, nor split the votes.
            Some(e) => match waiting.ask_gate(e, plan.list_ttl_ms()).await {
                Ok(()) => attempt::attempt(seated, &plan, enqueue).await,
                Err(refused) => Err(refused),
            },
            None => attempt::attempt(seated, &plan, enqueue).await,
        };
        let err = match result {
            Ok(mut guard) => {
                waiting.acquired(enqueue, enqueue.and_then(|e| guard.vote(e.node)));
                cleanup.won(|i| guard.voted_yes(i));
                metrics::acquired(started.elapsed());
                if let Some(policy) = request.auto_extend {
                    guard.auto_extend(policy);
                }
                return Ok(guard);
            }
            Err(e) if e.is_retryable() => e,
            Err(e) => return Err(e),
        };
        let remaining = wait.saturating_sub(started.elapsed());
        if remaining.is_zero() || max_attempts.is_some_and(|m| attempts >= m) {
            return Err(gave_up(attempts, started, err));
        }
        let poll = |shift| backoff.next(shift);
        waiting.pause(&err, enqueue, remaining, poll).await;
    }
}

/// Refuses a write lock, or a mutex (the same exclusive side), asked for by a task that
/// holds a read lock of the same name ([`Error::Upgrade`]): it would wait for itself.
pub(crate) fn refuse_upgrade(ensemble: &Ensemble, plan: &Plan) -> Result<()> {
    let reads = &ensemble.queue.reads;
    if plan.access == Access::Read {
        return Ok(());
    }
    match plan.resources.iter().find(|r| reads.held_by_this_task(r)) {
        Some(name) => Err(Error::Upgrade { name: name.clone() }),
        None => Ok(()),
    }
}

/// The error of a `lock()` call (or a semaphore's acquisition) that stops trying after
/// `attempts`, the last of which failed with `last`, counted in the metrics.
pub(crate) fn gave_up(attempts: u32, started: Instant, last: Error) -> Error {
    metrics::gave_up();
    Error::Timeout {
        attempts,
        waited: started.elapsed(),
        last: Box::new(last),
    }
}

/// The jittered backoff between one call's attempts: the retry policy and how many
/// delays it has given so far.
struct Backoff<'a> {
    policy: &'a RetryPolicy,
    retries: u32,
}

impl Backoff<'_> {
    /// The next delay, not yet counted as given.
    fn peek(&self) -> Duration {
        self.policy.delay(self.retries, rand::random::<f64>())
    }

    /// The next delay, `shift` doublings further (a listed waiter's extra patience).
    fn next(&mut self, shift: u32) -> Duration {
        let delay = (self.policy).delay(self.retries.saturating_add(shift), rand::random::<f64>());
        self.retries = self.retries.saturating_add(1);
        delay
    }
}
