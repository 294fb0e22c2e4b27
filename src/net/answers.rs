//! A round's answers as they arrive: each reply turned into a [`NodeOutcome`], counted in
//! a [`Tally`], and the round decided as soon as its stopping rule allows ([`Stop`]); the
//! result, [`Collected`], is one outcome per node in configuration order.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::net::failure::{NodeFailure, failed};
use crate::net::fanout::Round;
use crate::net::node::Node;
use crate::report::{NodeOutcome, NodeReport, NodeResult};
use crate::rules::deadline::is_in_time;
use crate::rules::quorum::{Certainty, Tally};

/// The outcome of a round so far.
pub(crate) struct Collected {
    pub(crate) outcomes: Vec<(NodeOutcome, Duration)>,
    pub(crate) tally: Tally,
}

/// The report of a round's outcomes, one per node in configuration order.
pub(crate) fn report(nodes: &[Arc<Node>], outcomes: &[(NodeOutcome, Duration)]) -> NodeReport {
    NodeReport::new(
        nodes
            .iter()
            .zip(outcomes)
            .map(|(node, (outcome, latency))| NodeResult {
                node: node.name().to_owned(),
                server: node.known().server(),
                outcome: outcome.clone(),
                latency: *latency,
            })
            .collect(),
    )
}

impl Collected {
    /// Recounts the tally from the outcomes, after some were decided again (the ballot of
    /// restart quarantine decides some votes only once the answers are in).
    pub(crate) fn recount(&mut self, is_yes: impl Fn(&NodeOutcome) -> bool) {
        let mut tally = Tally::new(self.outcomes.len());
        for (outcome, _) in &self.outcomes {
            if *outcome != NodeOutcome::Pending {
                tally.record(is_yes(outcome));
            }
        }
        self.tally = tally;
    }

    pub(crate) fn report(&self, nodes: &[Arc<Node>]) -> NodeReport {
        report(nodes, &self.outcomes)
    }
}

/// When [`collect`] may return before every node answered.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop {
    /// Only once every node answered or the deadline passed.
    AtEnd,
    /// As soon as the outcome is certain.
    WhenCertain,
    /// As soon as a majority said yes (and this node, if any, answered). A round that
    /// cannot reach one waits for every answer, so its report and error say what each node
    /// did (a release: not held here, failed there).
    WhenReached(Option<usize>),
}

/// Waits for the answers of `round`, turning each reply into an outcome with `interpret`
/// and recording it. With `stop` other than [`Stop::AtEnd`], returns as soon as the tally's
/// outcome is no longer [`Certainty::Pending`] (and the node named heard from), leaving the
/// rest in the round; nodes not heard from are reported as
/// [`NodeOutcome::Pending`] with the time waited so far. At the round's deadline every node
/// not heard from is [`NodeOutcome::TimedOut`], and so is a node whose answer is read then
/// or later (this task ran late).
pub(crate) async fn collect(
    nodes: &[Arc<Node>],
    round: &mut Round,
    interpret: impl FnMut(usize, Value) -> NodeOutcome,
    is_yes: impl Fn(&NodeOutcome) -> bool,
    stop: Stop,
) -> Collected {
    collect_until(nodes, round, interpret, is_yes, |outcomes, certainty| {
        let heard = |i: usize| {
            outcomes
                .get(i)
                .is_none_or(|(o, _)| *o != NodeOutcome::Pending)
        };
        match stop {
            Stop::AtEnd => false,
            Stop::WhenCertain => certainty != Certainty::Pending,
            Stop::WhenReached(i) => certainty == Certainty::Reached && i.is_none_or(heard),
        }
    })
    .await
}

/// Every node's answer to `round` (bounded by its timeout), each turned into an outcome by
/// `interpret`, as a report: the reads and administrative rounds, where no answer decides
/// early. A node's ACL refusal makes it [`Error::Permission`].
pub(crate) async fn report_every_answer(
    nodes: &[Arc<Node>],
    round: &mut Round,
    interpret: impl FnMut(usize, Value) -> NodeOutcome,
) -> Result<NodeReport> {
    let collected = collect(nodes, round, interpret, |_| false, Stop::AtEnd).await;
    let report = collected.report(nodes);
    if report.denials() > 0 {
        return Err(Error::Permission { report });
    }
    Ok(report)
}

/// [`collect`] with its own stopping rule: `done` sees the outcomes so far (unanswered
/// nodes [`NodeOutcome::Pending`]) and the tally's certainty after each answer.
pub(crate) async fn collect_until(
    nodes: &[Arc<Node>],
    round: &mut Round,
    mut interpret: impl FnMut(usize, Value) -> NodeOutcome,
    is_yes: impl Fn(&NodeOutcome) -> bool,
    mut done: impl FnMut(&[(NodeOutcome, Duration)], Certainty) -> bool,
) -> Collected {
    let read = |i: usize, value: Value| (interpret(i, value), None::<()>);
    let stop = |outcomes: &[(NodeOutcome, Duration)], _: &[Option<()>], certainty| {
        done(outcomes, certainty)
    };
    collect_reading(nodes, round, read, is_yes, stop).await.0
}

/// [`collect_until`] for replies that say more than an outcome: `read` turns each reply
/// into its outcome and what else it says (`R`), which `done` sees with the outcomes and
/// which come back with them, one per node (`None`: no reply, or nothing read).
pub(crate) async fn collect_reading<R>(
    nodes: &[Arc<Node>],
    round: &mut Round,
    mut read: impl FnMut(usize, Value) -> (NodeOutcome, Option<R>),
    is_yes: impl Fn(&NodeOutcome) -> bool,
    mut done: impl FnMut(&[(NodeOutcome, Duration)], &[Option<R>], Certainty) -> bool,
) -> (Collected, Vec<Option<R>>) {
    let n = nodes.len();
    let start = Instant::now();
    let mut outcomes = vec![(NodeOutcome::Pending, Duration::ZERO); n];
    let mut reads: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let mut tally = Tally::new(n);
    let expired = tokio::time::sleep_until(round.deadline);
    tokio::pin!(expired);
    loop {
        let (index, result, latency) = tokio::select! {
            biased;
            next = round.next() => match next {
                Some(answer) => answer,
                None => break,
            },
            () = &mut expired => {
                // Whatever is still in flight timed out: the round is over.
                for index in round.in_flight() {
                    if let (Some(node), Some(slot)) = (nodes.get(index), outcomes.get_mut(index)) {
                        *slot = (failed(node.name(), NodeFailure::TimedOut), start.elapsed());
                        tally.record(false);
                    }
                }
                round.pending.clear();
                break;
            }
        };
        let result = as_counted(round, result, latency);
        let (outcome, said) = answered(nodes, index, result, &mut read);
        let certainty = tally.record(is_yes(&outcome));
        if let (Some(slot), Some(kept)) = (outcomes.get_mut(index), reads.get_mut(index)) {
            *slot = (outcome, latency);
            *kept = said;
        }
        if done(&outcomes, &reads, certainty) {
            break;
        }
    }
    let waited = start.elapsed();
    for (outcome, latency) in &mut outcomes {
        if *outcome == NodeOutcome::Pending {
            *latency = waited;
        }
    }
    (Collected { outcomes, tally }, reads)
}

/// A node's answer as its round counts it: read `latency` after the round's start, at its
/// deadline or later, it timed out (see [`is_in_time`]), whatever it said. The biased
/// `select!` of [`collect_reading`] takes answers that are ready before the timer, so a
/// client that ran late would otherwise count answers that came after the deadline.
fn as_counted(
    round: &Round,
    result: Result<Value, NodeFailure>,
    latency: Duration,
) -> Result<Value, NodeFailure> {
    match is_in_time(round.start + latency, round.deadline) {
        true => result,
        false => Err(NodeFailure::TimedOut),
    }
}

/// A node's answer as an outcome and what else it says: a reply through `read`, a
/// failure counted.
fn answered<R>(
    nodes: &[Arc<Node>],
    index: usize,
    result: Result<Value, NodeFailure>,
    read: &mut impl FnMut(usize, Value) -> (NodeOutcome, Option<R>),
) -> (NodeOutcome, Option<R>) {
    match (result, nodes.get(index)) {
        (Ok(value), _) => read(index, value),
        (Err(failure), Some(node)) => (failed(node.name(), failure), None),
        (Err(failure), None) => (failure.into(), None),
    }
}

/// The [`Collected`] of a round of the single node `index` of `nodes` that gave `answer`
/// (see [`direct`](super::fanout::direct)): what [`collect`] records for it.
pub(crate) fn collected_one(
    nodes: &[Arc<Node>],
    index: usize,
    answer: (Result<Value, NodeFailure>, Duration),
    mut interpret: impl FnMut(usize, Value) -> NodeOutcome,
    is_yes: impl Fn(&NodeOutcome) -> bool,
) -> Collected {
    let read = |i: usize, value: Value| (interpret(i, value), None::<()>);
    collected_one_reading(nodes, index, answer, read, is_yes).0
}

/// [`collected_one`] for replies that say more than an outcome (see
/// [`collect_reading`]).
pub(crate) fn collected_one_reading<R>(
    nodes: &[Arc<Node>],
    index: usize,
    (result, latency): (Result<Value, NodeFailure>, Duration),
    mut read: impl FnMut(usize, Value) -> (NodeOutcome, Option<R>),
    is_yes: impl Fn(&NodeOutcome) -> bool,
) -> (Collected, Vec<Option<R>>) {
    let n = nodes.len();
    let mut outcomes = vec![(NodeOutcome::Pending, Duration::ZERO); n];
    let mut reads: Vec<Option<R>> = (0..n).map(|_| None).collect();
    let mut tally = Tally::new(n);
    let (outcome, said) = answered(nodes, index, result, &mut read);
    tally.record(is_yes(&outcome));
    if let (Some(slot), Some(kept)) = (outcomes.get_mut(index), reads.get_mut(index)) {
        *slot = (outcome, latency);
        *kept = said;
    }
    (Collected { outcomes, tally }, reads)
}

/// The [`Collected`] of a round that sent nothing: every node [`NodeOutcome::Pending`].
pub(crate) fn collected_none(nodes: &[Arc<Node>]) -> Collected {
    let n = nodes.len();
    Collected {
        outcomes: vec![(NodeOutcome::Pending, Duration::ZERO); n],
        tally: Tally::new(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::coalesce::Yield;
    use crate::net::member::Unusable;
    use crate::net::request::NodeFuture;

    fn nodes(n: usize) -> Vec<Arc<Node>> {
        let node = |i| {
            Node::new(
                format!("n{i}"),
                Box::new(Unusable("test".into())),
                Duration::from_secs(1),
                Yield::Deferred,
                Arc::from(""),
            )
        };
        (0..n).map(|i| Arc::new(node(i))).collect()
    }

    /// A round of `n` requests, each answered `OK` at once.
    fn answered_round(n: usize, timeout: Duration) -> Round {
        let ok = |index| NodeFuture {
            index,
            request: Box::pin(async { Ok(Value::Okay) }),
        };
        Round::new((0..n).map(ok), timeout)
    }

    async fn votes(nodes: &[Arc<Node>], round: &mut Round) -> Collected {
        let interpret = |_, value| match value {
            Value::Okay => NodeOutcome::Acquired,
            _ => NodeOutcome::HeldByOther,
        };
        collect(
            nodes,
            round,
            interpret,
            NodeOutcome::is_acquired,
            Stop::AtEnd,
        )
        .await
    }

    #[tokio::test]
    async fn answers_read_at_the_deadline_or_later_do_not_vote() {
        let nodes = nodes(3);
        let mut round = answered_round(3, Duration::from_secs(3600));
        assert_eq!(votes(&nodes, &mut round).await.tally.yes(), 3);
        // The same answers, ready, but read only once the deadline came (as by a task that
        // stalled past it): a round whose deadline is its start.
        let mut round = answered_round(3, Duration::ZERO);
        let collected = votes(&nodes, &mut round).await;
        assert_eq!(collected.tally.yes(), 0, "{:?}", collected.outcomes);
        let outcomes = collected.outcomes.iter().map(|(o, _)| o);
        assert!(outcomes.into_iter().all(|o| *o == NodeOutcome::TimedOut));
    }
}
