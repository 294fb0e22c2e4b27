//! Sending one operation to many nodes at once and deciding as soon as the result is
//! certain.
//!
//! A round sends the same [`Call`] to every node it targets, all bounded by one deadline
//! (one timer per round, not per node). The caller turns each raw reply into a
//! [`NodeOutcome`](crate::report::NodeOutcome) and stops as soon as the outcome is certain; requests still in flight then go
//! to the client's [`Background`] collector, which waits for them (bounded by the same
//! deadline) to count their failures. Nothing depends on those answers (except the
//! waiting-list node's, read by `Notifier::settle` after a win that came first): a command is
//! written to its node's connection on the first poll of its request, so a later command on
//! the same connection (a release after a late `SET`) stays ordered behind it whether or
//! not anyone waits for the reply.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use crate::net::background::Background;
use crate::net::call::Call;
use crate::net::failure::NodeFailure;
use crate::net::node::Node;
use crate::net::request::{NodeFuture, send};
use crate::net::timely;

/// The nodes a round goes to, as the layers above hand them down: every node in
/// configuration order, the timeout that bounds one request, and the collector that
/// finishes what a round leaves behind. Rounds never see the client's state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoundScope<'a> {
    pub(crate) nodes: &'a [Arc<Node>],
    pub(crate) timeout: Duration,
    pub(crate) background: &'a Background,
}

/// Requests in flight to several nodes, and the deadline that bounds all of them.
///
/// A handful of requests: each wake-up polls all those still pending, which costs less
/// than a `FuturesUnordered` allocating a task per request.
pub(crate) struct Round {
    pub(super) pending: Vec<Option<NodeFuture>>,
    /// Answers that came in during [`Round::start`], not yet collected.
    pub(super) early: Vec<(usize, Result<Value, NodeFailure>, Duration)>,
    /// When the requests were made: their latencies count from here.
    pub(super) start: Instant,
    pub(super) deadline: Instant,
}

impl Round {
    /// A round over requests made just now, each bounded by `timeout` from now.
    pub(crate) fn new(pending: impl IntoIterator<Item = NodeFuture>, timeout: Duration) -> Self {
        let pending = pending.into_iter();
        // Sized once: a request per node, where collecting a `filter_map` would start with
        // room for four and grow at the fifth.
        let (least, most) = pending.size_hint();
        let mut slots = Vec::with_capacity(most.unwrap_or(least));
        slots.extend(pending.map(Some));
        let start = Instant::now();
        Round {
            pending: slots,
            early: Vec::new(),
            start,
            deadline: crate::rules::deadline::after(start, timeout),
        }
    }

    /// Sends every request now, without waiting for answers: once this returns, each
    /// request whose node is connected is queued on that connection, so a command sent
    /// later on the same connection is applied after it.
    pub(crate) fn start(&mut self) {
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        for slot in &mut self.pending {
            if let Some(request) = slot
                && let Poll::Ready((index, result)) = Pin::new(request).poll(&mut cx)
            {
                *slot = None;
                self.early.push((index, result, self.start.elapsed()));
            }
        }
    }

    /// Splits off node `index`'s request, in flight or answered but not yet collected, as a
    /// round of its own with the same deadline.
    pub(crate) fn take(&mut self, index: usize) -> Option<Round> {
        let slot = self
            .pending
            .iter_mut()
            .find(|slot| slot.as_ref().is_some_and(|r| r.index == index))
            .and_then(Option::take);
        let early = self
            .early
            .iter()
            .position(|(i, ..)| *i == index)
            .map(|at| self.early.swap_remove(at));
        (slot.is_some() || early.is_some()).then(|| Round {
            pending: slot.into_iter().map(Some).collect(),
            early: early.into_iter().collect(),
            start: self.start,
            deadline: self.deadline,
        })
    }

    /// The indices of the nodes whose request is still in flight.
    pub(super) fn in_flight(&self) -> impl Iterator<Item = usize> + '_ {
        self.pending.iter().flatten().map(|request| request.index)
    }

    /// The next answer, or `None` once every request has answered.
    pub(super) async fn next(&mut self) -> Option<(usize, Result<Value, NodeFailure>, Duration)> {
        if let Some(answer) = self.early.pop() {
            return Some(answer);
        }
        std::future::poll_fn(|cx| {
            let mut waiting = false;
            for slot in &mut self.pending {
                if let Some(request) = slot {
                    if let Poll::Ready((index, result)) = Pin::new(request).poll(cx) {
                        *slot = None;
                        return Poll::Ready(Some((index, result, self.start.elapsed())));
                    }
                    waiting = true;
                }
            }
            if waiting {
                Poll::Pending
            } else {
                Poll::Ready(None)
            }
        })
        .await
    }

    /// Sends `call` to the nodes `which` of `scope`, bounded by its timeout.
    pub(crate) fn broadcast(
        scope: RoundScope<'_>,
        call: Call,
        which: impl IntoIterator<Item = usize>,
    ) -> Self {
        Round::broadcast_with(scope, call, which, None)
    }

    /// [`Round::broadcast`], except that one node, if among `which`, gets a call of its own
    /// (the node that keeps this client's waiting list).
    pub(crate) fn broadcast_with(
        scope: RoundScope<'_>,
        call: Call,
        which: impl IntoIterator<Item = usize>,
        special: Option<(usize, Call)>,
    ) -> Self {
        let call = Arc::new(call);
        let special = special.map(|(node, call)| (node, Arc::new(call)));
        Round::each(scope, which, |i| match &special {
            Some((node, special)) if *node == i => special,
            _ => &call,
        })
    }

    /// Sends each node `i` of `which` the call `call_for(i)` (calls shared by several
    /// nodes are built once).
    pub(crate) fn each<'c>(
        scope: RoundScope<'_>,
        which: impl IntoIterator<Item = usize>,
        call_for: impl Fn(usize) -> &'c Arc<Call>,
    ) -> Self {
        let pending = (which.into_iter())
            .filter_map(|i| scope.nodes.get(i).map(|node| send(i, node, call_for(i))));
        Round::new(pending, scope.timeout)
    }

    /// Sends each node `i` its own call, for the pairs `(i, call)` given.
    pub(crate) fn pairs(scope: RoundScope<'_>, calls: &[(usize, Arc<Call>)]) -> Self {
        let pending = (calls.iter())
            .filter_map(|(i, call)| scope.nodes.get(*i).map(|node| send(*i, node, call)));
        Round::new(pending, scope.timeout)
    }

    /// Sends `call` to every node of `scope`.
    pub(crate) fn everywhere(scope: RoundScope<'_>, call: Call) -> Self {
        Round::broadcast(scope, call, 0..scope.nodes.len())
    }

    /// Lets requests not yet answered finish in the background (see [`Background`]).
    pub(crate) fn finish_in_background(self, scope: RoundScope<'_>) {
        self.hand_to(scope.background);
    }

    /// Hands the requests not yet answered, and the answers not yet collected, to
    /// `background`.
    pub(crate) fn hand_to(self, background: &Background) {
        background.absorb(
            self.pending.into_iter().flatten(),
            self.early,
            self.deadline,
        );
    }
}

/// The direct path of a client with a single node: its request awaited in place, bounded
/// by `timeout` from now, with no [`Round`] (no boxed future, no shared call, no vectors
/// of requests, no collector). What [`collect`](super::answers::collect) makes of a round of that one node, the
/// same in every respect: at the deadline the request is dropped and the node
/// [`NodeOutcome::TimedOut`](crate::report::NodeOutcome::TimedOut) (counted as a failure), as is an answer read at
/// the deadline or later (see [`timely`]); a command already written to the
/// connection stays ahead of anything sent there later (the clean-up's release), exactly
/// as when a round drops it.
///
/// Poll it once before awaiting it to queue the command on the connection first (see
/// [`start`]).
pub(crate) async fn direct(
    node: &Arc<Node>,
    call: &Call,
    timeout: Duration,
) -> (Result<Value, NodeFailure>, Duration) {
    let start = Instant::now();
    let deadline = crate::rules::deadline::after(start, timeout);
    // An answer read at the deadline or later (this task ran late) timed out too.
    let result = timely::within(deadline, node.send(call)).await;
    (
        result.unwrap_or(Err(NodeFailure::TimedOut)),
        start.elapsed(),
    )
}

/// Polls `request` once without waiting, as [`Round::start`] does: once this returns, its
/// command is queued on its connection if the node is connected. The answer, if it came
/// already.
pub(crate) fn start<F: Future>(request: Pin<&mut F>) -> Option<F::Output> {
    let mut cx = Context::from_waker(futures::task::noop_waker_ref());
    match request.poll(&mut cx) {
        Poll::Ready(answer) => Some(answer),
        Poll::Pending => None,
    }
}
