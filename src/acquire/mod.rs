//! Acquiring a lock: the Redlock attempt and everything that decides whether it won.
//!
//! - this file: the one acquisition loop of every kind ([`acquire_any`]): passes over the
//!   candidates retried with jittered backoff until the wait budget or the attempt cap
//!   runs out, in this client's local turn, waiting between passes through the waiting
//!   protocol ([`Waiting`]); `lock()` is [`acquire`], one candidate;
//! - [`candidates`]: what one acquisition may win (one lock's plan, or a semaphore's slot
//!   plans) and one pass over them;
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
//! The rest of the crate calls [`acquire`] with a [`Request`], or [`acquire_any`] with
//! [`Candidates`] (or [`plan::Plan`] and [`attempt_seated`] for a single attempt), and gets
//! a held lock back.

pub(crate) mod attempt;
pub mod ballot;
pub(crate) mod candidates;
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
/// The turn an acquisition took among this client's tasks, which a permit keeps.
pub(crate) use crate::wait::queue::HeldTurn;
use candidates::Candidates;
use plan::Plan;

/// What a `LockRequest` asks for.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) resources: Vec<String>,
    pub(crate) ttl: Duration,
    pub(crate) options: Options,
    pub(crate) fencing: bool,
    /// A mutex, or a side of a read-write lock.
    pub(crate) access: Access,
}

/// Runs a `LockRequest` on `ensemble`: see its `IntoFuture` docs in the client module.
pub(crate) async fn acquire(ensemble: Arc<Ensemble>, request: Request) -> Result<LockGuard> {
    let ensemble = &ensemble;
    for resource in &request.resources {
        keys::check_user_name("resource", resource)?;
    }
    let plan = Plan::new(ensemble, request.resources, request.ttl, request.fencing)?
        .with_access(request.access)?;
    refuse_upgrade(ensemble, &plan)?;
    let options = request.options;
    let mut won = acquire_any(ensemble, Candidates::one(plan), options.budget(ensemble)?).await?;
    options.extend_won(&mut won.guard);
    Ok(won.guard)
}

/// The options every request builder shares; unset, the client's.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    /// Overrides the configured wait budget.
    pub(crate) wait: Option<Duration>,
    /// Overrides the configured attempt cap.
    pub(crate) max_attempts: Option<u32>,
    /// Keeps the lock won extended in the background.
    pub(crate) auto_extend: Option<AutoExtend>,
}

impl Options {
    /// The budget of the acquisition on `ensemble`.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an attempt cap of zero.
    pub(crate) fn budget(&self, ensemble: &Ensemble) -> Result<Budget> {
        let config = &ensemble.config;
        Ok(Budget {
            wait: self.wait.unwrap_or(config.wait),
            max_attempts: attempt_cap(self.max_attempts, config.max_attempts)?,
        })
    }

    /// For a scoped run: auto-extension, unlimited unless the caller set a policy.
    pub(crate) fn for_run(&mut self) {
        self.auto_extend.get_or_insert_with(AutoExtend::new);
    }

    /// Starts the auto-extension of `guard`, just won, when asked for.
    pub(crate) fn extend_won(&self, guard: &mut LockGuard) {
        if let Some(policy) = self.auto_extend {
            guard.auto_extend(policy);
        }
    }
}

/// How long one acquisition may wait, and how many passes it may make.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub(crate) wait: Duration,
    pub(crate) max_attempts: Option<u32>,
}

/// A won acquisition: the guard, the index of the candidate it holds, and the call's turn
/// among this client's tasks (a permit keeps its own).
#[derive(Debug)]
pub(crate) struct Won {
    pub(crate) guard: LockGuard,
    pub(crate) candidate: usize,
    pub(crate) turn: HeldTurn,
}

/// The one acquisition loop of every kind: in this client's local turn, passes over the
/// candidates (one attempt each) retried with jittered backoff until one is won or the
/// budget runs out, waiting between passes through the waiting protocol ([`Waiting`]). A
/// pass after a guard of this client released one candidate tries that one only.
pub(crate) async fn acquire_any(
    ensemble: &Arc<Ensemble>,
    candidates: Candidates<'_>,
    budget: Budget,
) -> Result<Won> {
    let started = Instant::now();
    let deadline = crate::rules::deadline::after(started, budget.wait);
    let (keys, turn) = (&candidates.keys, candidates.turn);
    let Some(mut waiting) = Waiting::start(ensemble.wait_context(), keys, turn, deadline).await
    else {
        let held = Error::Contended {
            report: NodeReport::default(),
        };
        return Err(gave_up(0, started, held));
    };
    let mut backoff = Backoff {
        policy: &ensemble.config.retry,
        retries: 0,
    };
    let (mut passes, mut attempts, mut freed) = (0u32, 0u32, None);
    heal::start_healer(ensemble);
    // Every way out but a win, a dropped future included, clears a writer's intent.
    let mut cleanup = intent::IntentCleanup::new(candidates.first());
    loop {
        let remaining = budget.wait.saturating_sub(started.elapsed());
        if (waiting.for_local_release(remaining, || backoff.peek())).await {
            backoff.retries = backoff.retries.saturating_add(1);
        }
        passes = passes.saturating_add(1);
        let (enqueue, gated) = waiting.next(passes);
        let local = waiting.watch_local();
        let order = candidates.order(freed);
        let tried = match enqueue.filter(|_| gated) {
            // A waiter that was not woken asks the waiting-list node first, so it does not
            // take the lock from under the client a release woke, nor split the votes.
            Some(e) => match waiting.ask_gate(e, candidates.first().list_ttl_ms()).await {
                Ok(()) => None,
                Err(refused) => Some(Err(refused)),
            },
            None => None,
        };
        let tried = match tried {
            Some(refused) => {
                attempts = attempts.saturating_add(1);
                refused
            }
            None => {
                let seat = |seated: &Arc<Ensemble>| cleanup.seat(seated);
                let on = (&candidates, order);
                candidates::pass(ensemble, on, enqueue, &mut attempts, seat).await
            }
        };
        let err = match tried {
            Ok((candidate, guard)) => {
                waiting.acquired(enqueue, enqueue.and_then(|e| guard.vote(e.node)));
                cleanup.won(|i| guard.voted_yes(i));
                metrics::acquired(started.elapsed());
                let turn = waiting.into_turn();
                return Ok(Won {
                    guard,
                    candidate,
                    turn,
                });
            }
            Err(e) if e.is_retryable() => e,
            Err(e) => return Err(e),
        };
        let remaining = budget.wait.saturating_sub(started.elapsed());
        if remaining.is_zero() || budget.max_attempts.is_some_and(|m| passes >= m) {
            return Err(gave_up(attempts, started, err));
        }
        // Also what other tasks of this client took during the pass.
        let local = local.and(waiting.watch_local());
        let poll = |shift| backoff.next(shift);
        let released = waiting.pause(&err, enqueue, (remaining, local), poll).await;
        freed = released.map(|key| candidates.holding_key(key));
    }
}

/// Refuses a write lock, or a mutex (the same exclusive side), asked for by a task that
/// holds a read lock of the same name ([`Error::Upgrade`]): it would wait for itself.
pub(crate) fn refuse_upgrade(ensemble: &Ensemble, plan: &Plan) -> Result<()> {
    let reads = &ensemble.queue.reads;
    if plan.access.is_shared() {
        return Ok(());
    }
    match plan.resources.iter().find(|r| reads.held_by_this_task(r)) {
        Some(name) => Err(Error::Upgrade { name: name.clone() }),
        None => Ok(()),
    }
}

/// One attempt at `plan` on the ensemble seated for its keys, the background healer
/// started first: what each `try_*` call of a lock makes (a semaphore's `try_acquire` is
/// one [`candidates::pass`]).
/// Returns the seated view with the outcome, for what the caller does on its nodes after.
pub(crate) async fn attempt_seated(
    ensemble: &Arc<Ensemble>,
    plan: &Plan,
    enqueue: Option<crate::wait::Enqueue<'_>>,
) -> (Arc<Ensemble>, Result<LockGuard>) {
    heal::start_healer(ensemble);
    let seated = ensemble.seated(&plan.keys).await;
    let tried = attempt::attempt(&seated, plan, enqueue).await;
    (seated, tried)
}

/// The attempt cap of one call: the call's own (`asked`), else the client's
/// (`configured`); `None` is no cap.
///
/// # Errors
///
/// [`Error::Config`] for a cap of zero.
pub(crate) fn attempt_cap(asked: Option<u32>, configured: Option<u32>) -> Result<Option<u32>> {
    match asked.or(configured) {
        Some(0) => Err(Error::Config("max attempts is zero; use at least 1".into())),
        cap => Ok(cap),
    }
}

/// A single try's outcome as `try_*` calls return it: a lock that others hold is `None`,
/// not an error.
pub(crate) fn contended_as_none<T>(tried: Result<T>) -> Result<Option<T>> {
    match tried {
        Ok(held) => Ok(Some(held)),
        Err(Error::Contended { .. }) => Ok(None),
        Err(e) => Err(e),
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
