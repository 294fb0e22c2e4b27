//! One acquisition attempt: a fresh token, the acquire round, the ballot's decision on
//! the votes, the optional fencing commit and the validity left. A failed attempt cleans up
//! after itself before it returns ([`refusal`](super::refusal)); a won one becomes a guard.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use crate::acquire::ballot::Read;
use crate::acquire::fence_commit::commit_fence;
use crate::acquire::first_contact;
use crate::acquire::markers::{Marks, clean_up, decide_votes};
use crate::acquire::plan::{Attempt, Plan};
use crate::acquire::refusal::{give_back, no_majority, refusal};
use crate::acquire::vote_round::{acquire_round, collect_votes, read_late_records};
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::held::guard::LockGuard;
use crate::held::release::Holding;
use crate::metrics;
use crate::net::answers::Collected;
use crate::net::fanout::Round;
use crate::report::{NodeOutcome, QuarantineReason};
use crate::rules::quorum::{self, Decision};
use crate::rules::safety;
use crate::wait::Enqueue;
/// The value to set: a fresh 128-bit random token as 32 hex digits, then the client's
/// holder description and the time (`protocol::holder`); compares use the whole value.
fn new_token(described: &str) -> Arc<str> {
    let mut hex = [0u8; uuid::fmt::Simple::LENGTH];
    let text = uuid::Uuid::from_bytes(rand::random::<[u8; 16]>())
        .simple()
        .encode_lower(&mut hex);
    let now = crate::protocol::holder::unix_ms(std::time::SystemTime::now());
    Arc::from(crate::protocol::holder::value(text, now, described))
}

/// One acquisition attempt with a fresh token, in a `quorum_lock.acquire` span whose
/// `votes` and `outcome` fields are filled in when it ends. `enqueue` says how the attempt
/// keeps this client in the waiting lists, when it listens for releases.
pub(crate) async fn attempt(
    ensemble: &Arc<Ensemble>,
    plan: &Plan,
    enqueue: Option<Enqueue<'_>>,
) -> Result<LockGuard> {
    // A `lock()` still retrying when the client shuts down stops here; a shutdown after
    // this point waits for the attempt (see `InFlight`).
    let _in_flight = ensemble.begin_attempt()?;
    let span = tracing::debug_span!(
        "quorum_lock.acquire",
        resources = ?plan.resources,
        nodes = ensemble.nodes.len(),
        quorum = ensemble.quorum,
        votes = tracing::field::Empty,
        outcome = tracing::field::Empty,
    );
    let this = Attempt {
        ensemble,
        plan,
        enqueue,
    };
    async {
        let _first_contact = first_contact::let_new_nodes_age(ensemble, &plan.keys).await;
        match attempt_inner(this).await {
            // Nodes whose quarantine was over were marked, naming the life they answered
            // from, and their markers acknowledged: at once, a second round confirms them
            // (their markers now read current) and counts their votes, so that the caller
            // sees one attempt succeed where the marking alone could not.
            Err(e) if marked_for_readmission(&e) => attempt_inner(this).await,
            outcome => outcome,
        }
    }
    .instrument(span)
    .await
}

/// Whether a failed attempt marked a node admitted by its age (see
/// [`Admission::MarkOnly`](crate::rules::safety::Admission::MarkOnly)): its yes counts
/// from the next round on.
fn marked_for_readmission(err: &Error) -> bool {
    let readmitting = |r: &crate::report::NodeResult| {
        matches!(
            r.outcome,
            NodeOutcome::Quarantined {
                reason: QuarantineReason::Readmitting,
                ..
            }
        )
    };
    matches!(err, Error::Contended { .. } | Error::Unavailable { .. })
        && err
            .report()
            .is_some_and(|r| r.results().iter().any(readmitting))
}

async fn attempt_inner(this: Attempt<'_>) -> Result<LockGuard> {
    let Attempt {
        ensemble,
        plan,
        enqueue,
    } = this;
    // Armed before the first await: if this future is dropped at any point, whatever it may
    // have set is released on every node in the background.
    let token = new_token(&ensemble.config.holder);
    let keys = Arc::clone(&plan.keys);
    let holding = Holding::new(Arc::clone(ensemble), keys, token, plan.access);
    let start = Instant::now();
    let (requests, lives) = acquire_round(this, &holding);
    let (mut collected, reads, mut round) = collect_votes(ensemble, plan, requests, &lives).await;
    // Restart quarantine: a yes that does not count becomes `Quarantined` here, before
    // the decision (see `ballot`).
    let (reads, marks) = decide_votes(ensemble, plan, reads, &mut collected);
    if let Some(err) = ensemble.same_server() {
        drop(round);
        metrics::attempt("unavailable", start.elapsed());
        let failure = give_back(this, holding, None, &collected, err);
        return Err(Box::pin(clean_up(marks, failure)).await);
    }
    let votes = quorum::votes(&collected.outcomes, &NodeOutcome::Acquired);
    if !quorum::has_majority(&votes) {
        // Requests still in flight are dropped: one already written to its connection is
        // followed there by the release below, and one not yet written is never sent.
        drop(round);
        // Boxed, as every failure path (see `Won::fail`).
        let failure = no_majority(this, holding, collected, &votes, start);
        return Err(Box::pin(clean_up(marks, failure)).await);
    }
    let list_reply = round
        .as_mut()
        .and_then(|round| take_list_reply(enqueue, &collected, round));
    // The slower nodes still get their SET (queued on their connections, or sent once the
    // connection is up): copies beyond the bare majority let the lock survive, and be
    // extended through, the loss of one of the first nodes. Every release of this token
    // closes the attempt's send gate first: a SET already queued is ahead of the release on
    // the same connection, and one not yet queued is never sent.
    match round {
        Some(round) if lives.iter().all(Option::is_some) => {
            round.finish_in_background(ensemble.round_scope());
        }
        Some(round) => read_late_records(ensemble, plan, round),
        None => {}
    }
    let won = Won {
        attempt: this,
        holding,
        list_reply,
        collected,
        marks,
        start,
    };
    won.into_guard(&reads, &votes).await
}

/// The waiting-list node's answer, if it is still to come, split off `round`: it says
/// whether the acquire script took us off the list there or listed us (see
/// `Notifier::settle`).
fn take_list_reply(
    enqueue: Option<Enqueue<'_>>,
    collected: &Collected,
    round: &mut Round,
) -> Option<(usize, Round)> {
    enqueue
        .filter(|e| {
            (collected.outcomes.get(e.node)).is_some_and(|(o, _)| *o == NodeOutcome::Pending)
        })
        .and_then(|e| Some((e.node, round.take(e.node)?)))
}

/// An attempt that won a majority of votes, not yet a lock: the fencing commit, the
/// validity left and the client's shutdown may still undo it ([`Won::fail`]).
struct Won<'a> {
    attempt: Attempt<'a>,
    holding: Holding,
    /// The waiting-list node's answer still to come (see [`take_list_reply`]).
    list_reply: Option<(usize, Round)>,
    collected: Collected,
    marks: Option<Marks>,
    start: Instant,
}

impl Won<'_> {
    /// Commits the fencing token if asked for, decides on the validity left, and makes
    /// the guard; or gives everything back.
    async fn into_guard(self, reads: &[Option<Read>], votes: &[quorum::Vote]) -> Result<LockGuard> {
        let (ensemble, plan, start) = (self.attempt.ensemble, self.attempt.plan, self.start);
        let fencing_token = match plan.fencing {
            true => {
                let token = self.holding.token();
                match commit_fence(ensemble, plan, token, reads, &self.collected).await {
                    Ok(fence) => Some(fence),
                    Err(e) => {
                        metrics::attempt("unavailable", start.elapsed());
                        return Err(Box::pin(self.fail(e)).await);
                    }
                }
            }
            false => None,
        };
        let decided = Instant::now();
        let elapsed = decided - start;
        let validity = safety::lease_validity(plan.ttl, elapsed, ensemble.config.drift_factor);
        let decision = quorum::decide_acquire(votes, elapsed, validity);
        let Decision::Won { validity } = decision else {
            let err = refusal(ensemble, &self.collected, decision, elapsed);
            return Err(Box::pin(self.fail(err)).await);
        };
        if ensemble.is_closed() {
            // The client shut down while this attempt ran: its locks are being released, and
            // this one must not outlive it.
            return Err(Box::pin(self.fail(Error::ShutDown)).await);
        }
        Ok(self.hold((decided, elapsed, validity), fencing_token))
    }

    /// The lock is ours for `validity` from `decided` (`elapsed` after the attempt
    /// started): the guard, with the bookkeeping of a win.
    fn hold(
        mut self,
        (decided, elapsed, validity): (Instant, Duration, Duration),
        fencing_token: Option<FencingToken>,
    ) -> LockGuard {
        let (ensemble, plan) = (self.attempt.ensemble, self.attempt.plan);
        if let Some(marks) = self.marks {
            marks.settle_in_background(ensemble);
        }
        if !plan.access.is_shared() {
            // Readers share: a reader of this client is no reason for another to wait.
            self.holding.hold_locally();
        }
        if let (Some((node, reply)), Some(notifier)) = (self.list_reply, &ensemble.notifier) {
            // Acquired before the waiting-list node answered: whether that node's list still
            // holds us is known only from its answer.
            notifier.settle(Arc::clone(&plan.keys), node, reply);
        }
        metrics::attempt("acquired", elapsed);
        let span = tracing::Span::current();
        span.record("votes", self.collected.tally.yes());
        span.record("outcome", "acquired");
        tracing::debug!(?elapsed, ?validity, ?fencing_token, "acquired");
        LockGuard::new(
            self.holding,
            Arc::clone(&plan.resources),
            plan.ttl,
            crate::rules::deadline::after(decided, validity),
            self.collected.outcomes,
            fencing_token,
        )
    }

    /// Gives the won votes back (releases everywhere) and returns `err`. Callers box it,
    /// as every failure path of an attempt: inline, its clean-up round would make the
    /// future of every attempt, moved on each lock, larger by its size.
    async fn fail(self, err: Error) -> Error {
        let failure = give_back(
            self.attempt,
            self.holding,
            self.list_reply,
            &self.collected,
            err,
        );
        clean_up(self.marks, failure).await
    }
}
