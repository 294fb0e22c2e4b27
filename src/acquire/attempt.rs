//! One acquisition attempt: a fresh token, `SET NX PX` (or the acquire script) fanned out
//! to every node, the optional fencing commit, and the quorum's decision. A failed attempt
//! cleans up after itself before it returns.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::acquire::ballot::{self, Read, Seen};
use crate::config::whole_ms;
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::held::guard::LockGuard;
use crate::held::release::Holding;
use crate::metrics;
use crate::net::fanout::{self, Collected, Round, Stop};
use crate::net::node::{Call, Node};
use crate::protocol::{keys, reply, scripts};
use crate::report::{NodeOutcome, NodeReport, QuarantineReason};
use crate::rules::quorum::{self, Decision};
use crate::rules::safety::{Admission, NextToken};
use crate::wait::Enqueue;

/// The fast path's plan (see [`acquire_round`]): per node, the life (`run_id`) it was seen
/// admitted in and the completeness its marker said, for the nodes that get the plain
/// `SET NX PX`; `None` for those that get the acquire script.
type Lives = Vec<Option<Arc<str>>>;

/// A validated acquisition: the resources, their keys and the TTL in whole milliseconds.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) resources: Arc<[String]>,
    pub(crate) keys: Arc<[String]>,
    pub(crate) ttl: Duration,
    pub(crate) fencing: bool,
    /// Read every node's answer (up to the node timeout), not only until the outcome is
    /// certain: a readmission probe reports every node's standing.
    pub(crate) every_answer: bool,
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
        let resources: Arc<[String]> = resources.into();
        let keys = keys::locks(prefix, &resources);
        Ok(Plan {
            resources,
            keys,
            ttl,
            fencing,
            every_answer: false,
        })
    }

    /// The same plan, reading every node's answer (see [`Plan::every_answer`]).
    pub(crate) fn reading_every_answer(self) -> Plan {
        Plan {
            every_answer: true,
            ..self
        }
    }

    fn ttl_ms(&self) -> u64 {
        whole_ms(self.ttl)
    }

    /// The expiry of the keys' waiting lists: twice the TTL, as the acquire script sets it.
    pub(crate) fn list_ttl_ms(&self) -> u64 {
        self.ttl_ms().saturating_mul(2)
    }
}

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
    async {
        match attempt_inner(ensemble, plan, enqueue).await {
            // Nodes whose quarantine was over were marked, naming the life they answered
            // from, and their markers acknowledged: at once, a second round confirms them
            // (their markers now read current) and counts their votes, so that the caller
            // sees one attempt succeed where the marking alone could not.
            Err(e) if marked_for_readmission(&e) => attempt_inner(ensemble, plan, enqueue).await,
            outcome => outcome,
        }
    }
    .instrument(span)
    .await
}

/// Whether a failed attempt marked a node admitted by its age (see
/// [`Admission::MarkOnly`]): its yes counts from the next round on.
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

async fn attempt_inner(
    ensemble: &Arc<Ensemble>,
    plan: &Plan,
    enqueue: Option<Enqueue<'_>>,
) -> Result<LockGuard> {
    // Armed before the first await: if this future is dropped at any point, whatever it may
    // have set is released on every node in the background.
    let token = new_token(&ensemble.config.holder);
    let holding = Holding::new(Arc::clone(ensemble), Arc::clone(&plan.keys), token);
    let start = Instant::now();
    let (requests, lives) = acquire_round(ensemble, plan, &holding, enqueue);
    let (mut collected, reads, mut round) = collect_votes(ensemble, plan, requests, &lives).await;
    // Restart quarantine: a yes that does not count becomes `Quarantined` here, before
    // the decision (see `ballot`).
    let (reads, marks) = decide_votes(ensemble, plan, reads, &mut collected);
    if let Some(err) = ensemble.same_server() {
        drop(round);
        metrics::attempt("unavailable", start.elapsed());
        let failure = give_back(holding, plan, enqueue, None, &collected, err);
        return Err(Box::pin(clean_up(marks, failure)).await);
    }
    let votes = quorum::votes(&collected.outcomes, &NodeOutcome::Acquired);
    if !quorum::has_majority(&votes) {
        // Requests still in flight are dropped: one already written to its connection is
        // followed there by the release below, and one not yet written is never sent.
        drop(round);
        // Boxed, as every failure path (see `Won::fail`).
        let failure = no_majority(ensemble, plan, enqueue, holding, collected, &votes, start);
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
            round.finish_in_background(ensemble.view());
        }
        Some(round) => read_late_records(ensemble, plan, round),
        None => {}
    }
    let won = Won {
        holding,
        plan,
        enqueue,
        list_reply,
        collected,
        marks,
        start,
    };
    won.into_guard(ensemble, &reads, &votes).await
}

/// Reads, in the background, the acquire script's answers that come after the decision
/// from nodes this client does not yet know to hold an ensemble record covering the TTL:
/// each such answer says the script raised the node's record to this TTL in its current
/// life, which is what the plain `SET NX PX` fast path needs to know of every node (with
/// quarantine on, it also needs the node seen admitted, which only a ballot decides).
/// Without this, a node that always answers after the majority (a slow one) would keep
/// every later attempt of this client on the script, on every node. One reader per node at
/// a time: a node that never answers (a silent one) costs one reader per node timeout, not
/// one per attempt. The rest of the round finishes in the background as usual.
fn read_late_records(ensemble: &Ensemble, plan: &Plan, mut round: Round) {
    let ttl_ms = plan.ttl_ms();
    for (i, node) in ensemble.nodes.iter().enumerate() {
        if node.fast_path(ttl_ms, false).is_some() {
            continue;
        }
        let Some(claim) = node.claim_reading_late() else {
            continue;
        };
        // Answered before the decision (read by then) or not sent: nothing late to read,
        // and the claim goes back as it drops.
        let Some(mut late) = round.take(i) else {
            continue;
        };
        let nodes = ensemble.nodes.clone();
        ensemble.background.spawn(async move {
            let node = claim.node();
            fanout::collect(
                &nodes,
                &mut late,
                |_, answer| {
                    if let Ok(read) = read_vote(node, answer, None)
                        && let Some(life) = &read.run_id
                    {
                        node.seen(life, false, record_after(&read, ttl_ms));
                    }
                    NodeOutcome::Reachable
                },
                |_| false,
                Stop::AtEnd,
            )
            .await;
        });
    }
    round.finish_in_background(ensemble.view());
}

/// The ensemble record a node holds after the acquire script read `read` for a TTL of
/// `ttl_ms`: the script raises the record to the TTL (never lowers it) before anything else.
fn record_after(read: &Read, ttl_ms: u64) -> u64 {
    read.record_ms.unwrap_or(0).max(ttl_ms)
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
    holding: Holding,
    plan: &'a Plan,
    enqueue: Option<Enqueue<'a>>,
    /// The waiting-list node's answer still to come (see [`take_list_reply`]).
    list_reply: Option<(usize, Round)>,
    collected: Collected,
    marks: Option<Marks>,
    start: Instant,
}

impl Won<'_> {
    /// Commits the fencing token if asked for, decides on the validity left, and makes
    /// the guard; or gives everything back.
    async fn into_guard(
        self,
        ensemble: &Arc<Ensemble>,
        reads: &[Option<Read>],
        votes: &[quorum::Vote],
    ) -> Result<LockGuard> {
        let (plan, start) = (self.plan, self.start);
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
        let validity = quorum::validity(plan.ttl, elapsed, ensemble.config.drift_factor);
        let decision = quorum::decide_acquire(votes, elapsed, validity);
        let Decision::Won { validity } = decision else {
            metrics::attempt(decision.label(), elapsed);
            let err = refusal(ensemble, &self.collected, decision);
            return Err(Box::pin(self.fail(err)).await);
        };
        if ensemble.is_closed() {
            // The client shut down while this attempt ran: its locks are being released, and
            // this one must not outlive it.
            return Err(Box::pin(self.fail(Error::ShutDown)).await);
        }
        Ok(self.hold(ensemble, (decided, elapsed, validity), fencing_token))
    }

    /// The lock is ours for `validity` from `decided` (`elapsed` after the attempt
    /// started): the guard, with the bookkeeping of a win.
    fn hold(
        mut self,
        ensemble: &Ensemble,
        (decided, elapsed, validity): (Instant, Duration, Duration),
        fencing_token: Option<FencingToken>,
    ) -> LockGuard {
        if let Some(marks) = self.marks {
            marks.detach(ensemble);
        }
        self.holding.hold_locally();
        if let (Some((node, reply)), Some(notifier)) = (self.list_reply, &ensemble.notifier) {
            // Acquired before the waiting-list node answered: whether that node's list still
            // holds us is known only from its answer.
            notifier.settle(Arc::clone(&self.plan.keys), node, reply);
        }
        metrics::attempt("acquired", elapsed);
        let span = tracing::Span::current();
        span.record("votes", self.collected.tally.yes());
        span.record("outcome", "acquired");
        tracing::debug!(?elapsed, ?validity, ?fencing_token, "acquired");
        LockGuard::new(
            self.holding,
            Arc::clone(&self.plan.resources),
            self.plan.ttl,
            crate::rules::deadline::after(decided, validity),
            self.collected.outcomes,
            fencing_token,
        )
    }

    /// Gives the won votes back (releases everywhere) and returns `err`. Callers box it,
    /// as every failure path of an attempt: inline, its clean-up round would make the
    /// future of every attempt, moved on each lock, larger by its size.
    async fn fail(self, err: Error) -> Error {
        let (plan, enqueue) = (self.plan, self.enqueue);
        let failure = give_back(
            self.holding,
            plan,
            enqueue,
            self.list_reply,
            &self.collected,
            err,
        );
        clean_up(self.marks, failure).await
    }
}

/// Waits for the acquire replies of one attempt until its outcome is certain (see
/// [`ballot::settled`]), keeping what each node said for the ballot. `lives`: the fast
/// path's plan, the life each node that got the plain `SET NX PX` was seen admitted in
/// and its completeness.
/// Outcomes of yes votes are provisional until [`decide_votes`].
/// Returns the round with what is still in flight (none on the direct path).
async fn collect_votes(
    ensemble: &Ensemble,
    plan: &Plan,
    requests: Requests<'_>,
    lives: &[Option<Arc<str>>],
) -> (Collected, Vec<Option<Read>>, Option<Round>) {
    let n = ensemble.nodes.len();
    let quarantine = ensemble.config.quarantine;
    // Shared by the two closures below, one at a time (a `Mutex` for `Sync`: the future
    // is sent between threads).
    let reads: std::sync::Mutex<Vec<Option<Read>>> = std::sync::Mutex::new(vec![None; n]);
    let lock = || reads.lock().unwrap_or_else(|p| p.into_inner());
    let interpret = |i: usize, answer: Value| {
        let Some(node) = ensemble.nodes.get(i) else {
            return NodeOutcome::Failed("no such node".into());
        };
        let read = match read_vote(node, answer, lives.get(i).and_then(Option::as_ref)) {
            Ok(read) => read,
            Err(failed) => return failed,
        };
        let outcome = match ballot::early(&read, n, quarantine) {
            _ if !read.set => NodeOutcome::HeldByOther,
            ballot::Early::Yes => NodeOutcome::Acquired,
            // Decided once the answers are in (`decide_votes`).
            _ => NodeOutcome::Quarantined {
                reason: QuarantineReason::RecordUnread,
                remaining: None,
            },
        };
        if let Some(slot) = lock().get_mut(i) {
            *slot = Some(read);
        }
        outcome
    };
    let (collected, round) = match requests {
        Requests::Direct(node, call) => {
            let answer = fanout::direct(node, &call, ensemble.config.node_timeout).await;
            let collected =
                fanout::collected_one(&ensemble.nodes, 0, answer, interpret, is_acquired);
            (collected, None)
        }
        Requests::Round(mut round) => {
            let collected = fanout::collect_until(
                &ensemble.nodes,
                &mut round,
                interpret,
                is_acquired,
                |outcomes, _| {
                    let pending = outcomes
                        .iter()
                        .filter(|(o, _)| *o == NodeOutcome::Pending)
                        .count();
                    let settled = ballot::settled(&lock(), pending, ensemble.quorum, quarantine);
                    settled && (pending == 0 || !plan.every_answer)
                },
            )
            .await;
            (collected, Some(round))
        }
    };
    let reads = reads.into_inner().unwrap_or_else(|p| p.into_inner());
    (collected, reads, round)
}

/// What one acquire reply says for the ballot: a plain `SET NX PX` (`OK` or nil) or the
/// acquire script's reply, with the facts the node's connect learnt.
fn read_vote(
    node: &Node,
    answer: Value,
    life: Option<&Arc<str>>,
) -> std::result::Result<Read, NodeOutcome> {
    let mut read = node.blank_read();
    if let Some(life) = life {
        read.marker = Seen::Cached(Arc::clone(life));
    }
    match answer {
        Value::Okay => read.set = true,
        Value::Nil => {}
        answer => {
            let got = reply::acquire_reply(answer)?;
            read.set = got.set;
            read.marker = Seen::Read(got.marker.map(|m| m.life));
            read.record_ms = got.record_ms;
            read.fence = got.fence;
        }
    }
    Ok(read)
}

/// Decides every answering node's admission once the answers are in (restart quarantine
/// v2, [`ballot`]), sets the outcomes of the yes votes accordingly (kept out:
/// [`NodeOutcome::Quarantined`] with why and for how long), counts them in the metrics,
/// remembers where a node was seen admitted (the fast path), and sends the markers the
/// rules ask for before anything else is sent to those nodes (returned: in flight).
fn decide_votes(
    ensemble: &Ensemble,
    plan: &Plan,
    reads: Vec<Option<Read>>,
    collected: &mut Collected,
) -> (Vec<Option<Read>>, Option<Marks>) {
    let config = &ensemble.config;
    let view = ballot::view(&reads);
    let mut marks = Vec::new();
    for (i, (read, node)) in reads.iter().zip(&ensemble.nodes).enumerate() {
        let Some(read) = read else { continue };
        let admission = ballot::admit(read, &view, config.drift_factor, config.ttl_ceiling);
        if read.set
            && let Some(slot) = collected.outcomes.get_mut(i)
        {
            // With quarantine off every yes counts; the marker is still kept, so that
            // other clients' quarantine sees the nodes this one admitted.
            if config.quarantine {
                slot.0 = ballot::outcome(&admission);
            }
            node.count_vote(match &slot.0 {
                NodeOutcome::Quarantined { reason, .. } => Some(reason.as_str()),
                _ => None,
            });
        }
        marks.extend(remember(node, i, read, &admission, plan.ttl_ms()));
    }
    collected.recount(is_acquired);
    let marks = send_marks(ensemble, marks);
    (reads, marks)
}

/// What this client keeps of a scripted answer (the node's record, and whether it votes
/// without asking the ensemble: the fast path), or the marker its admission asks for.
fn remember(
    node: &Node,
    i: usize,
    read: &Read,
    admission: &Admission,
    ttl_ms: u64,
) -> Option<Mark> {
    let (Some(life), Seen::Read(marker)) = (&read.run_id, &read.marker) else {
        return None;
    };
    // The script raised the record to this TTL, atomically with its `SET NX`.
    let record_ms = record_after(read, ttl_ms);
    let mark = |voted| Mark {
        node: i,
        life: Arc::clone(life),
        record_ms,
        voted,
    };
    match admission {
        Admission::Votes { mark: true } => return Some(mark(true)),
        // Marked, but not cached as admitted: a later answer must show the marker current
        // before the fast path trusts this node.
        Admission::MarkOnly => return Some(mark(false)),
        Admission::Votes { .. } if marker.is_some() => node.seen(life, true, record_ms),
        _ => node.seen(life, false, record_ms),
    }
    None
}

/// Runs a failed attempt's clean-up `failure` while its marker writes are acknowledged
/// (see [`Marks`]), and returns its error. The keys go back at once: waiting for the
/// markers first kept them on every node where the attempt set them (refusing every other
/// client there) for a round trip of the slowest marked node, up to the node timeout,
/// and made each failed attempt after a restart a longer obstacle for the next. The
/// markers are queued on their connections before the release, so each node still applies
/// its marker first.
async fn clean_up(marks: Option<Marks>, failure: impl Future<Output = Error>) -> Error {
    let ((), err) = tokio::join!(
        async {
            if let Some(marks) = marks {
                marks.settle().await;
            }
        },
        failure
    );
    err
}

/// Writes the markers that admissions asked for: each is queued on its node's connection
/// before this returns, so the fence commit that may follow finds it. See [`Marks`].
fn send_marks(ensemble: &Ensemble, marks: Vec<Mark>) -> Option<Marks> {
    if marks.is_empty() {
        return None;
    }
    let pending = marks.iter().filter_map(|mark| {
        let call = Call::script(&scripts::MARK, &ensemble.config.key_prefix, &[]).arg(&*mark.life);
        Some(fanout::send(
            mark.node,
            ensemble.nodes.get(mark.node)?,
            &Arc::new(call),
        ))
    });
    let mut round = Round::new(pending, ensemble.config.node_timeout);
    round.start();
    Some(Marks {
        round,
        marks,
        nodes: ensemble.nodes.clone(),
    })
}

/// A marker to write.
struct Mark {
    /// The node's index.
    node: usize,
    /// The life the marker names.
    life: Arc<str>,
    /// The record the node holds now, in milliseconds.
    record_ms: u64,
    /// Whether the node's yes counted ([`Admission::Votes`]; not for
    /// [`Admission::MarkOnly`]), so that the written marker admits it for the fast path.
    voted: bool,
}

/// Marker writes in flight. Once a node acknowledges, this client takes the fast path
/// there. A won attempt leaves them to the background; a failed one waits for them (within
/// the node timeout) while it gives its keys back (see [`clean_up`]), so that a short-lived
/// process (the CLI) does not exit before the markers are written, leaving the next client
/// to find records without markers.
struct Marks {
    round: Round,
    marks: Vec<Mark>,
    nodes: Vec<Arc<Node>>,
}

impl Marks {
    /// Waits for the acknowledgements and records them (bounded by the round's deadline).
    async fn settle(mut self) {
        let (nodes, marks) = (&self.nodes, &self.marks);
        fanout::collect(
            nodes,
            &mut self.round,
            |i, answer| {
                let written = reply::decode::<i64>(answer).is_ok_and(|w| w == 1);
                if let (Some(mark), Some(node)) = (marks.iter().find(|m| m.node == i), nodes.get(i))
                {
                    node.seen(&mark.life, mark.voted && written, mark.record_ms);
                }
                NodeOutcome::Reachable
            },
            |_| false,
            Stop::AtEnd,
        )
        .await;
    }

    /// Leaves the acknowledgements to the background collector.
    fn detach(self, ensemble: &Ensemble) {
        ensemble.background.spawn(self.settle());
    }
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

/// Second round of a fencing acquisition: the new token is one above the highest counter
/// that can be trusted ([`ballot::token`]: a majority of them is needed), and is committed
/// next to the lock on a majority of voting nodes before the guard exists. Any two
/// majorities share a node, so the next holder reads a counter at least this high and
/// mints a larger one.
async fn commit_fence(
    ensemble: &Ensemble,
    plan: &Plan,
    token: &str,
    reads: &[Option<Read>],
    acquired: &Collected,
) -> Result<FencingToken> {
    ensemble.refuse_unfenced()?;
    let config = &ensemble.config;
    let fence = match ballot::token(reads, config.fence_floor, clock_us()) {
        // Past 2^53 the nodes cannot count exactly: refuse rather than risk a repeated
        // token.
        NextToken::Mint(fence) => {
            FencingToken::try_from(fence).map_err(|e| Error::Config(e.to_string()))?
        }
        NextToken::Exhausted => {
            return Err(Error::Config(
                "a fencing counter is at u64::MAX: no larger token exists".into(),
            ));
        }
    };
    let call = Call::script(&scripts::FENCE, &config.key_prefix, &plan.keys)
        .arg(token)
        .arg(fence.get());
    let mut round = Round::everywhere(ensemble.view(), call);
    let collected = fanout::collect(
        &ensemble.nodes,
        &mut round,
        |i, answer| match reply::one_or(answer, NodeOutcome::Acquired, NodeOutcome::NotHeld) {
            // Only where the acquisition's vote counted.
            NodeOutcome::Acquired => match acquired.outcomes.get(i) {
                Some((o @ NodeOutcome::Quarantined { .. }, _)) => o.clone(),
                _ => NodeOutcome::Acquired,
            },
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

/// The wall clock in microseconds since the Unix epoch: the clock component of fencing
/// tokens ([`crate::rules::safety::next_token`]); 0 for a clock before the epoch.
fn clock_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn is_acquired(o: &NodeOutcome) -> bool {
    *o == NodeOutcome::Acquired
}

/// The acquire requests of one attempt: plain `SET NX PX` for one key, the all-or-nothing
/// script for several keys, to keep the waiting list or to read fencing counters. The node
/// whose waiting list this client joins gets the script.
///
/// The plain `SET NX PX` is the fast path, per node: for a node whose ensemble record is
/// known to cover this TTL in its current life and, with restart quarantine on, that was
/// seen admitted in that life (returned: the life per such node, which its reply then
/// counts for). The other nodes get the script, which raises the record and reads the
/// marker and the record for the ballot. The fast nodes keep the plain `SET` beside
/// scripted ones only when no scripted node has an identity yet (never connected, such
/// as a node that is down or silent: its answer cannot vote, [`ballot::mix_allowed`]);
/// otherwise every node gets the script, so that the ballot sees every node's marker and
/// record (a node that restarted is readmitted by age only with every answer read).
/// Clients with quarantine off raise the record too: other clients' quarantine protects
/// their leases as well.
fn acquire_round<'a>(
    ensemble: &'a Ensemble,
    plan: &Plan,
    holding: &Holding,
    enqueue: Option<Enqueue<'_>>,
) -> (Requests<'a>, Lives) {
    let ttl_ms = plan.ttl_ms();
    let token = &**holding.token();
    let lives = fast_nodes(ensemble, ttl_ms);
    let any_fast = lives.iter().any(Option::is_some);
    let any_scripted = lives.iter().any(Option::is_none);
    let call =
        |enqueue: Option<Enqueue<'_>>, plain: bool| match (&plan.keys[..], enqueue, plan.fencing) {
            ([key], None, false) if plain => {
                // Sized once: the six arguments and their bytes (a TTL has at most 20 digits).
                let mut cmd = redis::Cmd::with_capacity(6, key.len() + token.len() + 32);
                cmd.arg("SET")
                    .arg(key)
                    .arg(token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl_ms);
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
    let enqueue = enqueue.filter(|e| e.lists());
    if let [node] = &ensemble.nodes[..] {
        // The direct path: the one node's call, whichever it is, awaited in place.
        return (Requests::Direct(node, call(enqueue, any_fast)), lives);
    }
    let special = enqueue.map(|e| (e.node, Arc::new(call(enqueue, false))));
    // The fast nodes' `SET`, or the script when no node is fast; the script apart when mixed.
    let common = Arc::new(call(None, any_fast));
    let script = (any_fast && any_scripted).then(|| Arc::new(call(None, false)));
    let round = Round::each(ensemble.view(), 0..ensemble.nodes.len(), |i| {
        match (&special, &script) {
            (Some((node, special)), _) if *node == i => special,
            (_, Some(script)) if lives.get(i).is_some_and(Option::is_none) => script,
            _ => &common,
        }
    });
    (Requests::Round(round), lives)
}

/// Per node, the life it takes the plain `SET NX PX` in (see [`acquire_round`]), or
/// `None` for the acquire script.
fn fast_nodes(ensemble: &Ensemble, ttl_ms: u64) -> Lives {
    let quarantine = ensemble.config.quarantine;
    let mut lives: Lives = (ensemble.nodes.iter())
        .map(|n| n.fast_path(ttl_ms, quarantine))
        .collect();
    if lives.iter().all(Option::is_some) {
        return lives;
    }
    let nodes = (ensemble.nodes.iter().zip(&lives))
        .map(|(node, life)| (life.is_some(), node.run_id().is_some()));
    if !ballot::mix_allowed(nodes) {
        lives.fill(None);
    }
    lives
}

/// An attempt's acquire requests: a round over several nodes, or, with a single node, its
/// call alone, sent and awaited in place by [`collect_votes`] (see [`fanout::direct`]).
enum Requests<'a> {
    Round(Round),
    Direct(&'a Arc<Node>, Call),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plan of a lock on `names` by a client with `prefix` (built, never connected).
    fn plan(prefix: &str, names: &[&str]) -> Plan {
        let client = crate::Redlock::builder()
            .node("redis://127.0.0.1:1")
            .key_prefix(prefix)
            .build()
            .expect("client");
        let names = names.iter().map(|n| (*n).to_owned()).collect();
        Plan::new(client.inner(), names, Duration::from_secs(1), false).expect("plan")
    }

    #[test]
    fn without_a_prefix_the_keys_are_the_resource_names_in_one_allocation() {
        let p = plan("", &["b", "a", "b"]);
        assert_eq!(&*p.resources, ["a", "b"]);
        assert_eq!(&*p.keys, ["a", "b"]);
        assert!(Arc::ptr_eq(&p.keys, &p.resources));

        let p = plan("app:", &["b", "a"]);
        assert_eq!(&*p.resources, ["a", "b"]);
        assert_eq!(&*p.keys, ["app:a", "app:b"]);
    }
}
