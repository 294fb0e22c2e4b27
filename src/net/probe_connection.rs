//! A short-lived connection of its own to one node, for the deployment check: it asks what
//! a lock round never does (`INFO`, `CONFIG`, `TIME`), and must not disturb the client's
//! shared connections.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, FromRedisValue, Pipeline, RedisError};

use crate::net::node::Node;

/// A fresh connection to one node, apart from the node's shared one. Cheap to clone:
/// clones share the connection, and requests on them are pipelined.
#[derive(Clone)]
pub(crate) struct ProbeConnection(MultiplexedConnection);

impl std::fmt::Debug for ProbeConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProbeConnection")
    }
}

impl ProbeConnection {
    /// Connects to `node` with its own driver settings: `connect` bounds the connect (TCP,
    /// TLS, authentication), `response` each request. Unbounded otherwise: the caller bounds
    /// the whole.
    pub(crate) async fn open(
        node: &Node,
        connect: Duration,
        response: Duration,
    ) -> Result<ProbeConnection, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect))
            .set_response_timeout(Some(response));
        let conn = (node.client().await?)
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(ProbeConnection(conn))
    }

    /// Sends `cmd` and decodes its answer.
    pub(crate) async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> Result<T, RedisError> {
        cmd.query_async(&mut self.0).await
    }

    /// Sends the commands of `pipe` in one write and decodes their answers, one per command;
    /// a refused command fails the whole.
    pub(crate) async fn query_pipeline<T: FromRedisValue>(
        &mut self,
        pipe: &Pipeline,
    ) -> Result<T, RedisError> {
        pipe.query_async(&mut self.0).await
    }
}
