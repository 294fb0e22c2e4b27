//! One acquisition attempt: a fresh token, `SET NX PX` (or the acquire script) fanned out
//! to every node, the optional fencing commit, and the quorum's decision. A failed attempt
//! cleans up after itself before it returns.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::whole_ms;
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::fanout::{self, Collected, Round, Stop};
use crate::fencing::FencingToken;
use crate::guard::LockGuard;
use crate::metrics;
use crate::node::Call;
use crate::protocol::{keys, reply, scripts};
use crate::quorum::{self, Decision};
use crate::release::Holding;
use crate::report::{NodeOutcome, NodeReport};
use crate::wait::Enqueue;

/// A validated acquisition: the resources, their keys and the TTL in whole milliseconds.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) resources: Arc<[String]>,
    pub(crate) keys: Arc<[String]>,
    pub(crate) ttl: Duration,
    pub(crate) fencing: bool,
}

impl Plan {
    pub(crate) fn new(
        ensemble: &Ensemble,
        mut resources: Vec<String>,
        ttl: Duration,
        fencing: bool,
    ) -> Result<Plan> {
        ensemble.check_open()?;
        if resources.is_empty() {
            return Err(Error::Config("no resource names given".into()));
        }
        if resources.iter().any(String::is_empty) {
            return Err(Error::Config("empty resource name".into()));
        }
        // Sorted and unique: the order callers pass must not matter.
        resources.sort_unstable();
        resources.dedup();
        let ttl = ensemble.accept_ttl(ttl)?;
        let prefix = &ensemble.config.key_prefix;
        let keys: Arc<[String]> = resources.iter().map(|r| keys::lock(prefix, r)).collect();
        Ok(Plan {
            resources: resources.into(),
            keys,
            ttl,
            fencing,
        })
    }

    fn ttl_ms(&self) -> u64 {
        whole_ms(self.ttl)
    }

    /// The expiry of the keys' waiting lists: twice the TTL, as the acquire script sets it.
    pub(crate) fn list_ttl_ms(&self) -> u64 {
        self.ttl_ms().saturating_mul(2)
    }
}

/// A fresh 128-bit random token, as 32 hex digits.
fn new_token() -> Arc<str> {
    let mut hex = [0u8; uuid::fmt::Simple::LENGTH];
    let text = uuid::Uuid::from_bytes(rand::random::<[u8; 16]>())
        .simple()
        .encode_lower(&mut hex);
    Arc::from(&*text)
}

/// One acquisition attempt with a fresh token, in a `quorum_lock.acquire` span whose
/// `votes` and `outcome` fields are filled in when it ends. `enqueue` says how the attempt
/// keeps this client in the waiting lists, when it listens for releases.
pub(crate) async fn attempt(
    ensemble: &Arc<Ensemble>,
    plan: &Plan,
    enqueue: Option<Enqueue<'_>>,
) -> Result<LockGuard> {
    // A `lock()` still retrying when the client shuts down stops here.
    ensemble.check_open()?;
    let span = tracing::debug_span!(
        "quorum_lock.acquire",
        resources = ?plan.resources,
        nodes = ensemble.nodes.len(),
        quorum = ensemble.quorum,
        votes = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    attempt_inner(ensemble, plan, enqueue)
        .instrument(span)
        .await
}

async fn attempt_inner(
    ensemble: &Arc<Ensemble>,
    plan: &Plan,
    enqueue: Option<Enqueue<'_>>,
) -> Result<LockGuard> {
    // Armed before the first await: if this future is dropped at any point, whatever it may
    // have set is released on every node in the background.
    let mut holding = Holding::new(Arc::clone(ensemble), Arc::clone(&plan.keys), new_token());
    let start = Instant::now();
    let mut round = acquire_round(ensemble, plan, &holding, enqueue);
    let (collected, counters) = collect_votes(ensemble, &mut round).await;
    let votes = quorum::votes(&collected.outcomes, &NodeOutcome::Acquired);
    if !quorum::has_majority(&votes) {
        // Requests still in flight are dropped: one already written to its connection is
        // followed there by the release below, and one not yet written is never sent.
        drop(round);
        return Err(no_majority(ensemble, plan, enqueue, holding, collected, &votes, start).await);
    }
    // The waiting-list node's answer, if it is still to come: it says whether the acquire
    // script took us off the list there or listed us (see `Notifier::settle`).
    let list_reply = enqueue
        .filter(|e| {
            (collected.outcomes.get(e.node)).is_some_and(|(o, _)| *o == NodeOutcome::Pending)
        })
        .and_then(|e| Some((e.node, round.take(e.node)?)));
    // The slower nodes still get their SET (queued on their connections, or sent once the
    // connection is up): copies beyond the bare majority let the lock survive, and be
    // extended through, the loss of one of the first nodes. Every release of this token
    // closes the attempt's send gate first: a SET already queued is ahead of the release on
    // the same connection, and one not yet queued is never sent.
    round.finish_in_background(ensemble.view());
    let fencing_token = match plan.fencing {
        true => match commit_fence(ensemble, plan, holding.token(), &counters).await {
            Ok(fence) => Some(fence),
            Err(e) => {
                metrics::attempt("unavailable", start.elapsed());
                return Err(give_back(holding, plan, enqueue, list_reply, &collected, e).await);
            }
        },
        false => None,
    };
    let decided = Instant::now();
    let elapsed = decided - start;
    let validity = quorum::validity(plan.ttl, elapsed, ensemble.config.drift_factor);
    let decision = quorum::decide_acquire(&votes, elapsed, validity);
    let Decision::Won { validity } = decision else {
        metrics::attempt(decision.label(), elapsed);
        let err = refusal(ensemble, &collected, decision);
        return Err(give_back(holding, plan, enqueue, list_reply, &collected, err).await);
    };
    if ensemble.is_closed() {
        // The client shut down while this attempt ran: its locks are being released, and
        // this one must not outlive it.
        return Err(give_back(
            holding,
            plan,
            enqueue,
            list_reply,
            &collected,
            Error::ShutDown,
        )
        .await);
    }
    holding.hold_locally();
    if let (Some((node, reply)), Some(notifier)) = (list_reply, &ensemble.notifier) {
        // Acquired before the waiting-list node answered: whether that node's list still
        // holds us is known only from its answer.
        notifier.settle(Arc::clone(&plan.keys), node, reply);
    }
    metrics::attempt("acquired", elapsed);
    let span = tracing::Span::current();
    span.record("votes", collected.tally.yes());
    span.record("outcome", "acquired");
    tracing::debug!(?elapsed, ?validity, ?fencing_token, "acquired");
    Ok(LockGuard::new(
        holding,
        Arc::clone(&plan.resources),
        plan.ttl,
        crate::deadline::after(decided, validity),
        collected.outcomes,
        fencing_token,
    ))
}

/// Collects the acquire round's answers: each node's outcome, and the fencing counters
/// the acquire script read, per node.
async fn collect_votes(ensemble: &Ensemble, round: &mut Round) -> (Collected, Vec<Option<u64>>) {
    let mut counters: Vec<Option<u64>> = vec![None; ensemble.nodes.len()];
    let vote = Voter::new(ensemble);
    let collected = fanout::collect(
        &ensemble.nodes,
        round,
        |i, answer| match answer {
            // `SET NX PX`.
            Value::Okay => vote.yes(i),
            Value::Nil => NodeOutcome::HeldByOther,
            // The acquire script: `{acquired, fence}`.
            answer => match reply::acquire_reply(answer) {
                Ok((set, fence)) => {
                    if let Some(slot) = counters.get_mut(i) {
                        *slot = fence;
                    }
                    if set {
                        vote.yes(i)
                    } else {
                        NodeOutcome::HeldByOther
                    }
                }
                Err(failed) => failed,
            },
        },
        is_acquired,
        Stop::WhenCertain,
    )
    .await;
    (collected, counters)
}

/// The clean-up and error of an attempt without a majority.
async fn no_majority(
    ensemble: &Ensemble,
    plan: &Plan,
    enqueue: Option<Enqueue<'_>>,
    mut holding: Holding,
    mut collected: Collected,
    votes: &[quorum::Vote],
    start: Instant,
) -> Error {
    // Release wherever our token may be. Nodes that answered "held by another" or "wrong
    // type" certainly do not have it; every other node might (a timed-out SET may still
    // have been applied).
    let maybe_ours: Vec<usize> = (collected.outcomes.iter().enumerate())
        .filter(|(_, (o, _))| !matches!(o, NodeOutcome::HeldByOther | NodeOutcome::WrongType))
        .map(|(i, _)| i)
        .collect();
    let requeue = enqueue.map(|e| e.requeue(plan.list_ttl_ms()));
    let plain_set = plan.keys.len() == 1 && enqueue.is_none() && !plan.fencing;
    let (refused, ()) = tokio::join!(
        holding.release_on(maybe_ours, requeue),
        find_other_types(ensemble, plan, plain_set, &mut collected),
    );
    let decision = quorum::decide_acquire(votes, start.elapsed(), None);
    cleanup_refused(refused, failed(ensemble, &collected, decision, start))
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
    let mut round = Round::broadcast(ensemble.view(), Call::new(cmd), refused);
    let types = fanout::collect(
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
async fn give_back(
    mut holding: Holding,
    plan: &Plan,
    enqueue: Option<Enqueue<'_>>,
    list_reply: Option<(usize, Round)>,
    collected: &Collected,
    err: Error,
) -> Error {
    let ensemble = Arc::clone(holding.ensemble());
    if let Some((_, reply)) = list_reply {
        reply.finish_in_background(ensemble.view());
    }
    let requeue = enqueue.map(|e| e.requeue(plan.list_ttl_ms()));
    let refused = holding.release_on(0..ensemble.nodes.len(), requeue).await;
    cleanup_refused(refused, record_failure(collected, err))
}

/// An attempt's error, unless a node's ACL refused its clean-up (`refused`, that round's
/// report): then the key may stay there for a TTL, and the refusal is the error to report.
fn cleanup_refused(refused: Option<NodeReport>, err: Error) -> Error {
    match refused {
        Some(report) if !err.is_permission() => Error::Permission { report },
        _ => err,
    }
}

/// The error of an attempt without a majority, counted in the metrics.
fn failed(ensemble: &Ensemble, collected: &Collected, decision: Decision, start: Instant) -> Error {
    metrics::attempt(decision.label(), start.elapsed());
    record_failure(collected, refusal(ensemble, collected, decision))
}

/// The error of a decision other than a win.
fn refusal(ensemble: &Ensemble, collected: &Collected, decision: Decision) -> Error {
    let report = || collected.report(&ensemble.nodes);
    match decision.into_result(report) {
        Err(err) => err,
        // Callers only pass decisions other than a win.
        Ok(_) => Error::Contended { report: report() },
    }
}

/// Fills in the attempt span's fields for a failure.
fn record_failure(collected: &Collected, err: Error) -> Error {
    let span = tracing::Span::current();
    span.record("votes", collected.tally.yes());
    span.record("outcome", tracing::field::display(&err));
    let report = err.report().map(ToString::to_string).unwrap_or_default();
    tracing::debug!(%report, "attempt failed");
    err
}

/// Counts a node's yes as a vote unless the node restarted too recently: it may have lost
/// locks it granted before (restart quarantine).
struct Voter<'a> {
    ensemble: &'a Ensemble,
    /// The quarantine period, when quarantine is on.
    period: Option<Duration>,
}

impl<'a> Voter<'a> {
    fn new(ensemble: &'a Ensemble) -> Self {
        Voter {
            ensemble,
            period: (ensemble.config.quarantine).then(|| ensemble.quarantine_period()),
        }
    }

    fn yes(&self, i: usize) -> NodeOutcome {
        let (Some(period), Some(node)) = (self.period, self.ensemble.nodes.get(i)) else {
            return NodeOutcome::Acquired;
        };
        if node.quarantined_vote(period) {
            NodeOutcome::Quarantined
        } else {
            NodeOutcome::Acquired
        }
    }
}

/// Second round of a fencing acquisition: the new token is one above the highest counter
/// any node reported, and is committed next to the lock on a majority of voting nodes
/// before the guard exists. Any two majorities share a node, so the next holder reads a
/// counter at least this high and mints a larger token.
async fn commit_fence(
    ensemble: &Ensemble,
    plan: &Plan,
    token: &str,
    counters: &[Option<u64>],
) -> Result<FencingToken> {
    let highest = counters.iter().flatten().copied().max().unwrap_or(0);
    // Past 2^53 the nodes cannot count exactly: refuse rather than risk a repeated token.
    let fence = FencingToken::after(highest).map_err(|e| Error::Config(e.to_string()))?;
    let call = Call::script(&scripts::FENCE, &ensemble.config.key_prefix, &plan.keys)
        .arg(token)
        .arg(fence.get());
    let mut round = Round::everywhere(ensemble.view(), call);
    let vote = Voter::new(ensemble);
    let collected = fanout::collect(
        &ensemble.nodes,
        &mut round,
        |i, answer| match reply::one_or(answer, NodeOutcome::Acquired, NodeOutcome::NotHeld) {
            NodeOutcome::Acquired => vote.yes(i),
            other => other,
        },
        is_acquired,
        Stop::WhenCertain,
    )
    .await;
    round.finish_in_background(ensemble.view());
    let votes = quorum::votes(&collected.outcomes, &NodeOutcome::Acquired);
    quorum::decide_reach(&votes)
        .into_result(|| collected.report(&ensemble.nodes))
        .map(|_| fence)
}

fn is_acquired(o: &NodeOutcome) -> bool {
    *o == NodeOutcome::Acquired
}

/// The acquire requests of one attempt: plain `SET NX PX` for one key, the all-or-nothing
/// script for several keys, to keep the waiting list or to read fencing counters. Every
/// node gets the same command except the one whose waiting list this client joins.
fn acquire_round(
    ensemble: &Ensemble,
    plan: &Plan,
    holding: &Holding,
    enqueue: Option<Enqueue<'_>>,
) -> Round {
    let ttl_ms = plan.ttl_ms();
    let token = &**holding.token();
    let call = |enqueue: Option<Enqueue<'_>>| match (&plan.keys[..], enqueue, plan.fencing) {
        ([key], None, false) => {
            let mut cmd = redis::cmd("SET");
            cmd.arg(key).arg(token).arg("NX").arg("PX").arg(ttl_ms);
            Call::new(cmd).gated(holding.gate())
        }
        (keys, enqueue, fencing) => {
            let enqueue = enqueue.unwrap_or_default();
            Call::script(&scripts::ACQUIRE, &ensemble.config.key_prefix, keys)
                .arg(token)
                .arg(ttl_ms)
                .arg(enqueue.client)
                .arg(scripts::flag(enqueue.stay))
                .arg(scripts::flag(fencing))
                .arg(scripts::flag(enqueue.front))
                .gated(holding.gate())
        }
    };
    let special = enqueue.map(|e| (e.node, call(enqueue)));
    Round::broadcast_with(
        ensemble.view(),
        call(None),
        0..ensemble.nodes.len(),
        special,
    )
}
