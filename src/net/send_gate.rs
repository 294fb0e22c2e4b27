//! The send gate: orders every request that may set a token's keys before that token's
//! release, on every node.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::task::coop::Unconstrained;

/// Orders the requests that may set a token's keys before that token's release, on every
/// node: each such request is written to its connection under the gate's lock, and the
/// release closes the gate before it sends anything.
///
/// Once closed, a request not yet written (waiting for a connection still opening, say) is
/// never sent: without the gate it could be written after the release's compare-and-delete
/// and leave its key for a whole TTL. A request written before is ahead of the release on
/// the same connection, whose commands the node applies in order.
#[derive(Debug)]
pub(crate) struct SendGate {
    open: std::sync::Mutex<bool>,
}

impl SendGate {
    pub(crate) fn new() -> Self {
        SendGate {
            open: std::sync::Mutex::new(true),
        }
    }

    /// No request through this gate is written from now on.
    pub(crate) fn close(&self) {
        *self.open.lock().unwrap_or_else(|p| p.into_inner()) = false;
    }

    /// Runs `send` if the gate is open, its first poll under the gate's lock: that poll
    /// queues the command on the connection (the driver's channel is first come, first
    /// served, and the poll runs outside the task's cooperative budget, which could otherwise
    /// defer the queueing to a later poll). `None`: closed, nothing was sent. Otherwise the
    /// output, and whether it came at the first poll.
    ///
    /// `send` is pinned by the caller: taken by value, it would be stored twice in this
    /// future (the argument and its pinned copy), and copied twice on every send.
    pub(super) async fn pass<F: Future>(
        gate: Option<&Self>,
        mut send: Pin<&mut Unconstrained<F>>,
    ) -> Option<(F::Output, bool)> {
        let mut first = true;
        std::future::poll_fn(|cx| {
            let at_first = std::mem::take(&mut first);
            let open = match gate.filter(|_| at_first) {
                Some(gate) => {
                    let open = gate.open.lock().unwrap_or_else(|p| p.into_inner());
                    if !*open {
                        return Poll::Ready(None);
                    }
                    Some(open)
                }
                None => None,
            };
            let polled = send.as_mut().poll(cx);
            drop(open);
            polled.map(|out| Some((out, at_first)))
        })
        .await
    }
}
