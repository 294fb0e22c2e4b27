//! Graceful client shutdown: release every lock this client holds, stop its background
//! work, close its connections.

use std::sync::Arc;

use futures::future::join_all;

use crate::client::Redlock;
use crate::held::release::Holding;

impl Redlock {
    /// Shuts this client (and every clone of it) down, for a service that stops:
    ///
    /// 1. takes no new locks: every later `lock`, `try_lock` or `run` returns
    ///    [`Error::ShutDown`](crate::Error::ShutDown), and attempts still running give back
    ///    what they won; it waits for them (each bounded by its node timeouts), so that
    ///    no key they set is left behind;
    /// 2. releases every lock it holds, on every node, waiting for each node's answer
    ///    (bounded by the node timeout); the guards still alive report it: their lost
    ///    signal fires with [`LostReason::ShutDown`](crate::LostReason::ShutDown), their
    ///    validity is zero, and their `release()` returns `Error::ShutDown`;
    /// 3. stops the auto-extenders, the release subscriptions and the background
    ///    collector, and closes the connections (later requests fail without connecting).
    ///
    /// Returns how many locks were released. Calling it again does nothing and returns 0.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future after it started leaves the client shut down, and the locks not
    /// yet released then expire with their TTL.
    pub async fn shutdown(&self) -> usize {
        let ensemble = self.inner();
        if !ensemble.close() {
            return 0;
        }
        // Attempts under way finish first (bounded by their node timeouts): one that wins
        // now gives back what it set, one that had already won is registered below, and
        // the clean-up of an abandoned one is sent; all before the connections close.
        ensemble.attempts_settled().await;
        let held = ensemble.take_held();
        let releases = held.iter().map(|lock| {
            let (keys, token, gate) = lock.shut_down();
            let holding = Holding::adopt(Arc::clone(ensemble), keys, token, gate);
            async move { holding.release_everywhere().await }
        });
        let released = join_all(releases).await.len();
        ensemble.stop();
        tracing::debug!(released, "client shut down");
        released
    }
}
