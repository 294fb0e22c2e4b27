//! The client's background collector: the requests that rounds leave behind, waited for
//! in one task per client so that every node's failure is still counted.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use redis::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::net::failure::{NodeFailure, failed};
use crate::net::node::Node;
use crate::net::request::NodeFuture;
use crate::net::timely;

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
        failed(node.name(), failure);
    }
}

/// `request` bounded by `deadline`: its answer, or [`NodeFailure::TimedOut`] (the request
/// dropped) once the deadline passed, also for an answer read then (see [`timely`]).
fn bounded(
    request: NodeFuture,
    deadline: Instant,
) -> impl Future<Output = (usize, Result<Value, NodeFailure>)> {
    let index = request.index;
    async move {
        timely::within(deadline, request)
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
    pub(crate) fn absorb(
        &self,
        pending: impl IntoIterator<Item = NodeFuture>,
        early: Vec<(usize, Result<Value, NodeFailure>, Duration)>,
        deadline: Instant,
    ) {
        let mut state = lock(&self.shared);
        if state.stopped {
            return;
        }
        for (index, result, _) in early {
            count(&self.nodes, index, result);
        }
        let mut requests = pending.into_iter().peekable();
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
    use crate::net::fanout::Round;
    use std::time::Duration;
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
        Round::new([request], timeout).hand_to(background);
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
