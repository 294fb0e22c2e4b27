//! A node's pub/sub subscription to the release notifications: a connection of its own
//! (a subscribed connection can send nothing else), subscribed to one channel.

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::{Msg, RedisResult};

use crate::net::node::Node;

/// A subscription to one channel on one node, until it is dropped or its connection ends.
pub(crate) struct Subscription {
    /// Kept only so that the subscription lasts: dropping the sink unsubscribes.
    _sink: PubSubSink,
    stream: PubSubStream,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Subscription")
    }
}

impl Subscription {
    /// Connects to `node` and subscribes to `channel`. Unbounded: the caller bounds it.
    pub(crate) async fn open(node: &Node, channel: &str) -> RedisResult<Subscription> {
        let (mut sink, stream) = node.client().await?.get_async_pubsub().await?.split();
        sink.subscribe(channel).await?;
        Ok(Subscription {
            _sink: sink,
            stream,
        })
    }

    /// The next message; `None` once the connection has ended.
    pub(crate) async fn next(&mut self) -> Option<Msg> {
        self.stream.next().await
    }
}
