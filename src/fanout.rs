//! Sending one operation to many nodes at once and deciding as soon as the result is
//! certain.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{FromRedisValue, RedisResult, ScriptInvocation};
use tokio::time::Instant;

use crate::client::Inner;
use crate::metrics;
use crate::node::Node;
use crate::quorum::{Tally, Verdict};
use crate::report::{NodeOutcome, NodeReport, NodeResult};

/// One node's request in flight: resolves to the node's index, its outcome and latency.
pub(crate) type NodeFuture = BoxFuture<'static, (usize, NodeOutcome, Duration)>;

/// Requests still in flight after a decision was reached.
pub(crate) type Stragglers = FuturesUnordered<NodeFuture>;

/// Builds the request for node `index` from a command runner and an interpretation of its
/// answer.
pub(crate) fn request<T, F, Fut, I>(
    index: usize,
    node: &Arc<Node>,
    timeout: Duration,
    op: F,
    interpret: I,
) -> NodeFuture
where
    T: Send + 'static,
    F: FnOnce(MultiplexedConnection) -> Fut + Send + 'static,
    Fut: Future<Output = RedisResult<T>> + Send + 'static,
    I: FnOnce(T) -> NodeOutcome + Send + 'static,
{
    let node = Arc::clone(node);
    Box::pin(async move {
        let (result, latency) = node.run(timeout, op).await;
        let outcome = match result {
            Ok(answer) => interpret(answer),
            Err(failure) => {
                metrics::node_failure(node.name(), failure.kind());
                failure.into()
            }
        };
        (index, outcome, latency)
    })
}

/// Runs a Lua script invocation on a node and interprets its integer reply.
pub(crate) fn script<T>(
    index: usize,
    node: &Arc<Node>,
    timeout: Duration,
    invocation: ScriptInvocation<'static>,
    interpret: impl FnOnce(T) -> NodeOutcome + Send + 'static,
) -> NodeFuture
where
    T: FromRedisValue + Send + 'static,
{
    request(
        index,
        node,
        timeout,
        move |mut conn| async move { invocation.invoke_async::<T>(&mut conn).await },
        interpret,
    )
}

/// The outcome of a fan-out so far.
pub(crate) struct Collected {
    pub(crate) outcomes: Vec<(NodeOutcome, Duration)>,
    pub(crate) tally: Tally,
}

impl Collected {
    pub(crate) fn report(&self, inner: &Inner) -> NodeReport {
        NodeReport::new(
            inner
                .nodes
                .iter()
                .zip(&self.outcomes)
                .map(|(node, (outcome, latency))| NodeResult {
                    node: node.name().to_owned(),
                    outcome: outcome.clone(),
                    latency: *latency,
                })
                .collect(),
        )
    }

    /// Nodes whose vote is missing: no answer, or a recently restarted node.
    pub(crate) fn unavailable(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|(o, _)| o.is_failure() || *o == NodeOutcome::Quarantined)
            .count()
    }

    /// Whether the nodes that definitely do not hold our token (absent, another owner's, a
    /// foreign type) are enough on their own to deny a majority. Failures and unanswered
    /// nodes prove nothing: a mix of them is "unavailable", not "not held".
    pub(crate) fn definitely_not_held(&self, quorum: usize) -> bool {
        let denied = self
            .outcomes
            .iter()
            .filter(|(o, _)| {
                matches!(
                    o,
                    NodeOutcome::NotHeld | NodeOutcome::WrongType | NodeOutcome::HeldByOther
                )
            })
            .count();
        self.outcomes.len().saturating_sub(denied) < quorum
    }
}

/// Polls `pending` and records every answer. With `stop_early`, returns as soon as the
/// tally's verdict is no longer [`Verdict::Pending`], leaving the rest in `pending`; nodes
/// not heard from are reported as [`NodeOutcome::Pending`] with the time waited so far.
pub(crate) async fn collect(
    n: usize,
    pending: &mut Stragglers,
    is_yes: impl Fn(&NodeOutcome) -> bool,
    stop_early: bool,
) -> Collected {
    let start = Instant::now();
    let mut outcomes = vec![(NodeOutcome::Pending, Duration::ZERO); n];
    let mut tally = Tally::new(n);
    while let Some((index, outcome, latency)) = pending.next().await {
        let verdict = tally.record(is_yes(&outcome));
        if let Some(slot) = outcomes.get_mut(index) {
            *slot = (outcome, latency);
        }
        if stop_early && verdict != Verdict::Pending {
            break;
        }
    }
    let waited = start.elapsed();
    for (outcome, latency) in &mut outcomes {
        if *outcome == NodeOutcome::Pending {
            *latency = waited;
        }
    }
    Collected { outcomes, tally }
}

/// Lets requests that were not waited for run to completion in the background, so every
/// node still receives its command. Without a runtime they are dropped (any command already
/// written to a connection is still executed by the server).
pub(crate) fn finish_in_background(stragglers: Stragglers) {
    drop(finish_in_background_tracked(stragglers));
}

/// Completes when the background requests have all finished (answered or timed out).
pub(crate) type Finished = Shared<BoxFuture<'static, ()>>;

/// [`finish_in_background`], returning a future that completes when they are all done, so
/// that a later request to the same nodes can wait for them and stay ordered behind them.
pub(crate) fn finish_in_background_tracked(stragglers: Stragglers) -> Option<Finished> {
    if stragglers.is_empty() {
        return None;
    }
    let handle = tokio::runtime::Handle::try_current().ok()?;
    let task = handle.spawn(stragglers.for_each(|_| async {}));
    Some(
        async move {
            let _ = task.await;
        }
        .boxed()
        .shared(),
    )
}
