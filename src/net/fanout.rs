//! Sending one operation to many nodes at once and deciding as soon as the result is
//! certain.
//!
//! A round sends the same [`Call`] to every node it targets, all bounded by one deadline
//! (one timer per round, not per node). The caller turns each raw reply into a
//! [`NodeOutcome`] and stops as soon as the outcome is certain; requests still in flight then go
//! to the client's [`Background`] collector, which waits for them (bounded by the same
//! deadline) to count their failures. Nothing depends on those answers (except the
//! waiting-list node's, read by `Notifier::settle` after a win that came first): a command is
//! written to its node's connection on the first poll of its request, so a later command on
//! the same connection (a release after a late `SET`) stays ordered behind it whether or
//! not anyone waits for the reply.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use redis::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::metrics;
use crate::net::call::Call;
use crate::net::failure::NodeFailure;
use crate::net::node::Node;
use crate::report::{NodeOutcome, NodeReport, NodeResult};
use crate::rules::quorum::{Certainty, Tally};

/// The nodes a round goes to, as the layers above hand them down: every node in
/// configuration order, the timeout that bounds one request, and the collector that
/// finishes what a round leaves behind. Rounds never see the client's state.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RoundScope<'a> {
    pub(crate) nodes: &'a [Arc<Node>],
    pub(crate) timeout: Duration,
    pub(crate) background: &'a Background,
}

/// One node's request in flight, tagged with the node's index: resolves to the index and
/// the raw reply. Its latency is read by its [`Round`] when the answer is taken, from the
/// round's start (the requests of a round are sent together): a request left to the
/// [`Background`] collector reads no clock.
pub(crate) struct NodeFuture {
    index: usize,
    request: BoxFuture<'static, Result<Value, NodeFailure>>,
}

impl Future for NodeFuture {
    type Output = (usize, Result<Value, NodeFailure>);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let index = self.index;
        self.request.as_mut().poll(cx).map(|result| (index, result))
    }
}

/// The request of one node in a round: waits for the node's connection, then sends.
/// Unbounded on its own: the round's deadline bounds it.
pub(crate) fn send(index: usize, node: &Arc<Node>, call: &Arc<Call>) -> NodeFuture {
    let call = Arc::clone(call);
    let node = Arc::clone(node);
    NodeFuture {
        index,
        request: Box::pin(async move { node.send(&call).await }),
    }
}

/// Requests in flight to several nodes, and the deadline that bounds all of them.
///
/// A handful of requests: each wake-up polls all those still pending, which costs less
/// than a `FuturesUnordered` allocating a task per request.
pub(crate) struct Round {
    pending: Vec<Option<NodeFuture>>,
    /// Answers that came in during [`Round::start`], not yet collected.
    early: Vec<(usize, Result<Value, NodeFailure>, Duration)>,
    /// When the requests were made: their latencies count from here.
    start: Instant,
    deadline: Instant,
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
    fn in_flight(&self) -> impl Iterator<Item = usize> + '_ {
        self.pending.iter().flatten().map(|request| request.index)
    }

    /// The next answer, or `None` once every request has answered.
    async fn next(&mut self) -> Option<(usize, Result<Value, NodeFailure>, Duration)> {
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

    /// Sends `call` to every node of `scope`.
    pub(crate) fn everywhere(scope: RoundScope<'_>, call: Call) -> Self {
        Round::broadcast(scope, call, 0..scope.nodes.len())
    }

    /// Lets requests not yet answered finish in the background (see [`Background`]).
    pub(crate) fn finish_in_background(self, scope: RoundScope<'_>) {
        scope.background.absorb(self);
    }
}

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

/// The outcome of a failed request, counted in the failure metric (a request withdrawn
/// before it was sent is no failure of the node).
fn failed(node: &Node, failure: NodeFailure) -> NodeOutcome {
    if failure != NodeFailure::Withdrawn {
        metrics::node_failure(node.name(), failure.kind());
    }
    failure.into()
}

/// Waits for the answers of `round`, turning each reply into an outcome with `interpret`
/// and recording it. With `stop` other than [`Stop::AtEnd`], returns as soon as the tally's
/// outcome is no longer [`Certainty::Pending`] (and the node named heard from), leaving the
/// rest in the round; nodes not heard from are reported as
/// [`NodeOutcome::Pending`] with the time waited so far. At the round's deadline every node
/// not heard from is [`NodeOutcome::TimedOut`].
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

/// [`collect`] with its own stopping rule: `done` sees the outcomes so far (unanswered
/// nodes [`NodeOutcome::Pending`]) and the tally's certainty after each answer.
pub(crate) async fn collect_until(
    nodes: &[Arc<Node>],
    round: &mut Round,
    mut interpret: impl FnMut(usize, Value) -> NodeOutcome,
    is_yes: impl Fn(&NodeOutcome) -> bool,
    mut done: impl FnMut(&[(NodeOutcome, Duration)], Certainty) -> bool,
) -> Collected {
    let n = nodes.len();
    let start = Instant::now();
    let mut outcomes = vec![(NodeOutcome::Pending, Duration::ZERO); n];
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
                        *slot = (failed(node, NodeFailure::TimedOut), start.elapsed());
                        tally.record(false);
                    }
                }
                round.pending.clear();
                break;
            }
        };
        let outcome = answered(nodes, index, result, &mut interpret);
        let certainty = tally.record(is_yes(&outcome));
        if let Some(slot) = outcomes.get_mut(index) {
            *slot = (outcome, latency);
        }
        if done(&outcomes, certainty) {
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

/// A node's answer as an outcome: a reply through `interpret`, a failure counted.
fn answered(
    nodes: &[Arc<Node>],
    index: usize,
    result: Result<Value, NodeFailure>,
    interpret: &mut impl FnMut(usize, Value) -> NodeOutcome,
) -> NodeOutcome {
    match (result, nodes.get(index)) {
        (Ok(value), _) => interpret(index, value),
        (Err(failure), Some(node)) => failed(node, failure),
        (Err(failure), None) => failure.into(),
    }
}

/// The direct path of a client with a single node: its request awaited in place, bounded
/// by `timeout` from now, with no [`Round`] (no boxed future, no shared call, no vectors
/// of requests, no collector). What [`collect`] makes of a round of that one node, the
/// same in every respect: at the deadline the request is dropped and the node
/// [`NodeOutcome::TimedOut`] (counted as a failure); a command already written to the
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
    match tokio::time::timeout_at(deadline, node.send(call)).await {
        Ok(result) => (result, start.elapsed()),
        Err(_) => (Err(NodeFailure::TimedOut), start.elapsed()),
    }
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

/// The [`Collected`] of a round of the single node `index` of `nodes` that gave `answer`
/// (see [`direct`]): what [`collect`] records for it.
pub(crate) fn collected_one(
    nodes: &[Arc<Node>],
    index: usize,
    (result, latency): (Result<Value, NodeFailure>, Duration),
    mut interpret: impl FnMut(usize, Value) -> NodeOutcome,
    is_yes: impl Fn(&NodeOutcome) -> bool,
) -> Collected {
    let n = nodes.len();
    let mut outcomes = vec![(NodeOutcome::Pending, Duration::ZERO); n];
    let mut tally = Tally::new(n);
    let outcome = answered(nodes, index, result, &mut interpret);
    tally.record(is_yes(&outcome));
    if let Some(slot) = outcomes.get_mut(index) {
        *slot = (outcome, latency);
    }
    Collected { outcomes, tally }
}

/// The [`Collected`] of a round that sent nothing: every node [`NodeOutcome::Pending`].
pub(crate) fn collected_none(nodes: &[Arc<Node>]) -> Collected {
    let n = nodes.len();
    Collected {
        outcomes: vec![(NodeOutcome::Pending, Duration::ZERO); n],
        tally: Tally::new(n),
    }
}

/// One task per client that waits for the requests rounds left behind, so every node's
/// failure is still counted, without spawning a task per round.
///
/// Requests are handed over one by one, not as rounds. Each is polled once on the way in,
/// so that one which has answered by then is counted at once and never reaches the
/// collector; the others join a queue shared with the collector, which the client wakes
/// only when the queue was empty (one wake-up for a burst of hand-overs). On each run the
/// collector moves the queue into its own set of requests, each bounded by its round's
/// deadline (past which it is counted as timed out and dropped), and polls only the
/// requests whose answer or deadline woke it: a slow or silent node with hundreds of
/// requests in flight costs each answer its own poll, not a pass over all of them with the
/// queue's lock held (which the client's next hand-over then waited for: bench scenario 3).
///
/// Started with the first work handed over (when a tokio runtime is there); ends when the
/// client is dropped (or shut down) and the last request is done. Without a runtime, or once
/// its runtime is gone, work handed over is dropped: a command already written to a
/// connection is still executed by its server, and only the failure count is lost.
pub(crate) struct Background {
    nodes: Vec<Arc<Node>>,
    shared: Arc<std::sync::Mutex<Leftovers>>,
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.shared);
        f.debug_struct("Background")
            .field("nodes", &self.nodes.len())
            .field("queued", &state.queue.len())
            .field("running", &state.running)
            .field("stopped", &state.stopped)
            .finish()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // Closes the collector's channel: it ends once its work is done.
        lock(&self.shared).tasks = None;
    }
}

/// What the client and its collector share.
#[derive(Default)]
struct Leftovers {
    /// Requests handed over and not yet taken by the collector, each with its round's
    /// deadline.
    queue: Vec<(NodeFuture, Instant)>,
    /// Whether a collector task exists (cleared when it is dropped: done, or its runtime
    /// gone).
    running: bool,
    /// The collector's waker, once it has run.
    waker: Option<Waker>,
    /// Where to send tasks for the collector (see [`Background::spawn`]).
    tasks: Option<mpsc::UnboundedSender<BoxFuture<'static, ()>>>,
    /// Set by the client's shutdown: work handed over later is dropped.
    stopped: bool,
}

fn lock(shared: &std::sync::Mutex<Leftovers>) -> std::sync::MutexGuard<'_, Leftovers> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

/// Counts `result`'s failure, if it is one, against node `index` (see [`failed`]).
fn count(nodes: &[Arc<Node>], index: usize, result: Result<Value, NodeFailure>) {
    if let (Err(failure), Some(node)) = (result, nodes.get(index)) {
        failed(node, failure);
    }
}

/// `request` bounded by `deadline`: its answer, or [`NodeFailure::TimedOut`] (the request
/// dropped) once the deadline passed.
fn bounded(
    request: NodeFuture,
    deadline: Instant,
) -> impl Future<Output = (usize, Result<Value, NodeFailure>)> {
    let index = request.index;
    async move {
        tokio::time::timeout_at(deadline, request)
            .await
            .unwrap_or((index, Err(NodeFailure::TimedOut)))
    }
}

impl Background {
    pub(crate) fn new(nodes: Vec<Arc<Node>>) -> Self {
        Background {
            nodes,
            shared: Arc::default(),
        }
    }

    /// Takes no more work; the collector ends once the work it has is done (each request
    /// bounded by its round's deadline, each task by its caller).
    pub(crate) fn stop(&self) {
        let mut state = lock(&self.shared);
        state.stopped = true;
        state.tasks = None;
    }

    /// Takes over what is still in flight in `round`; answers already in are counted here.
    pub(crate) fn absorb(&self, round: Round) {
        let Round {
            pending,
            early,
            deadline,
            ..
        } = round;
        let mut state = lock(&self.shared);
        if state.stopped {
            return;
        }
        for (index, result, _) in early {
            count(&self.nodes, index, result);
        }
        let mut requests = pending.into_iter().flatten().peekable();
        if requests.peek().is_none() {
            return;
        }
        let collector = if state.running {
            None
        } else {
            // No runtime to wait in: dropped.
            let Some(collector) = self.prepare(&mut state) else {
                return;
            };
            Some(collector)
        };
        let was_empty = state.queue.is_empty();
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        for mut request in requests {
            // An answer already in is counted without the collector.
            if let Poll::Ready((index, result)) = Pin::new(&mut request).poll(&mut cx) {
                count(&self.nodes, index, result);
                continue;
            }
            state.queue.push((request, deadline));
        }
        // A queue that was not empty has a wake-up on its way already (or a collector that
        // has not run yet, and takes the queue when it does).
        let waker = (was_empty && !state.queue.is_empty())
            .then(|| state.waker.clone())
            .flatten();
        drop(state);
        if let Some(collector) = collector {
            collector.start();
        } else if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// Runs `task` to its end, which the caller bounds (dropped without a runtime).
    pub(crate) fn spawn(&self, task: impl Future<Output = ()> + Send + 'static) {
        let mut state = lock(&self.shared);
        if state.stopped {
            return;
        }
        let task: BoxFuture<'static, ()> = Box::pin(task);
        if let Some(tx) = &state.tasks {
            // Cannot fail: the collector clears `tasks` before its receiver is dropped.
            let _ = tx.send(task);
            return;
        }
        let Some(collector) = self.prepare(&mut state) else {
            return;
        };
        if let Some(tx) = &state.tasks {
            let _ = tx.send(task);
        }
        drop(state);
        collector.start();
    }

    /// Readies the state for a new collector on the current runtime, to be started once
    /// the lock is released (dropping a task that cannot run locks it); `None` without a
    /// runtime.
    fn prepare(&self, state: &mut Leftovers) -> Option<Collector> {
        let handle = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = mpsc::unbounded_channel();
        state.running = true;
        state.waker = None;
        state.tasks = Some(tx);
        Some(Collector {
            handle,
            nodes: self.nodes.clone(),
            shared: Arc::clone(&self.shared),
            tasks: rx,
        })
    }
}

/// The collector's task, before and while it runs: when dropped (done, or its runtime
/// gone), it tells the client, which starts another on its next hand-over, and drops what
/// it was waiting for.
struct Collector {
    handle: tokio::runtime::Handle,
    nodes: Vec<Arc<Node>>,
    shared: Arc<std::sync::Mutex<Leftovers>>,
    tasks: mpsc::UnboundedReceiver<BoxFuture<'static, ()>>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let queue = {
            let mut state = lock(&self.shared);
            state.running = false;
            state.waker = None;
            state.tasks = None;
            std::mem::take(&mut state.queue)
        };
        drop(queue);
    }
}

impl Collector {
    fn start(self) {
        let handle = self.handle.clone();
        handle.spawn(self.run());
    }

    async fn run(mut self) {
        let mut tasks = FuturesUnordered::new();
        let mut requests = FuturesUnordered::new();
        // The queue is swapped with this buffer, so neither allocates again once grown.
        let mut batch = Vec::new();
        let mut open = true;
        std::future::poll_fn(|cx| {
            while open {
                match self.tasks.poll_recv(cx) {
                    Poll::Ready(Some(task)) => tasks.push(task),
                    Poll::Ready(None) => open = false,
                    Poll::Pending => break,
                }
            }
            while let Poll::Ready(Some(())) = tasks.poll_next_unpin(cx) {}
            self.take_queue(cx, &mut batch);
            requests.extend(batch.drain(..).map(|(r, deadline)| bounded(r, deadline)));
            while let Poll::Ready(Some((index, result))) = requests.poll_next_unpin(cx) {
                count(&self.nodes, index, result);
            }
            // Closed only by the client's stop or drop, after which nothing is handed over.
            let idle = tasks.is_empty() && requests.is_empty();
            if !open && idle && lock(&self.shared).queue.is_empty() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// Swaps the requests handed over since the last run into `batch` (empty), and leaves
    /// this run's waker for the next hand-over.
    fn take_queue(&self, cx: &Context<'_>, batch: &mut Vec<(NodeFuture, Instant)>) {
        let mut state = lock(&self.shared);
        if !state
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            state.waker = Some(cx.waker().clone());
        }
        std::mem::swap(&mut state.queue, batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;

    /// Fires its sender when dropped.
    struct Gone(Option<oneshot::Sender<()>>);

    impl Drop for Gone {
        fn drop(&mut self) {
            if let Some(tx) = self.0.take() {
                let _ = tx.send(());
            }
        }
    }

    /// A request to node `index` that answers once `answer` fires (never while its sender
    /// lives), and the signal that it is gone: answered, or dropped at its deadline.
    fn request(index: usize, answer: oneshot::Receiver<()>) -> (NodeFuture, oneshot::Receiver<()>) {
        let (tx, gone) = oneshot::channel();
        let guard = Gone(Some(tx));
        let request = Box::pin(async move {
            let _guard = guard;
            let _ = answer.await;
            Ok(Value::Okay)
        });
        (NodeFuture { index, request }, gone)
    }

    /// Hands `request` over to `background` in a round of its own, bounded by `timeout`.
    fn hand_over(background: &Background, request: NodeFuture, timeout: Duration) {
        background.absorb(Round::new([request], timeout));
    }

    async fn ends(gone: oneshot::Receiver<()>, what: &str) {
        let ended = tokio::time::timeout(Duration::from_secs(5), gone).await;
        assert!(ended.is_ok(), "{what} was never collected");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_request_handed_over_ends_answered_or_at_its_deadline() {
        let background = Background::new(Vec::new());
        // Handed over in a burst: only the first finds the queue empty and wakes the
        // collector; the others must be taken all the same.
        let (answer_a, a) = oneshot::channel();
        let (silent, b) = oneshot::channel::<()>();
        let (answer_c, c) = oneshot::channel();
        let (request_a, gone_a) = request(0, a);
        let (request_b, gone_b) = request(1, b);
        let (request_c, gone_c) = request(2, c);
        hand_over(&background, request_a, Duration::from_secs(60));
        hand_over(&background, request_b, Duration::from_millis(30));
        hand_over(&background, request_c, Duration::from_secs(60));
        // The silent one is given up at its deadline while its node still says nothing.
        ends(gone_b, "the request past its deadline").await;
        answer_c.send(()).unwrap();
        ends(gone_c, "the third request, answered").await;
        answer_a.send(()).unwrap();
        ends(gone_a, "the first request, answered").await;
        drop(silent);
        // A request handed over once the collector has run (its queue empty again) wakes it.
        let (answer_d, d) = oneshot::channel();
        let (request_d, gone_d) = request(0, d);
        hand_over(&background, request_d, Duration::from_secs(60));
        answer_d.send(()).unwrap();
        ends(gone_d, "a request handed over later").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_answer_in_before_the_hand_over_never_reaches_the_collector() {
        let background = Background::new(Vec::new());
        let (answer, rx) = oneshot::channel();
        let (request, gone) = request(0, rx);
        answer.send(()).unwrap();
        hand_over(&background, request, Duration::from_secs(60));
        // Counted and dropped during the hand-over itself.
        assert!(gone.await.is_ok());
        assert!(format!("{background:?}").contains("queued: 0"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_collector_ends_once_its_work_is_done() {
        let background = Background::new(Vec::new());
        let (silent, rx) = oneshot::channel::<()>();
        let (request, gone) = request(0, rx);
        hand_over(&background, request, Duration::from_millis(30));
        background.stop();
        ends(gone, "the request of a stopped collector").await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while format!("{background:?}").contains("running: true") {
            assert!(Instant::now() < deadline, "the collector never ended");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(silent);
    }
}
