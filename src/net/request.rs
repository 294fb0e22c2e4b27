//! One node's request in a round: the node's connection waited for, then the call sent,
//! tagged with the node's index.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use redis::Value;

use crate::net::call::Call;
use crate::net::failure::NodeFailure;
use crate::net::node::Node;

/// One node's request in flight, tagged with the node's index: resolves to the index and
/// the raw reply. Its latency is read by its [`Round`](super::fanout::Round) when the answer is taken, from the
/// round's start (the requests of a round are sent together): a request left to the
/// [`Background`](super::background::Background) collector reads no clock.
pub(crate) struct NodeFuture {
    pub(super) index: usize,
    pub(super) request: BoxFuture<'static, Result<Value, NodeFailure>>,
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
