//! Graceful client shutdown: release every lock this client holds, stop its background
//! work, close its connections.

use std::sync::Arc;

use futures::future::join_all;

use crate::ensemble::Ensemble;
use crate::held::release::Holding;

/// Shuts the client down: the body of [`Redlock::shutdown`](crate::Redlock::shutdown).
pub(crate) async fn shut_down(ensemble: &Arc<Ensemble>) -> usize {
    if !ensemble.close() {
        return 0;
    }
    // Attempts under way finish first (bounded by their node timeouts): one that wins
    // now gives back what it set, one that had already won is registered below, and
    // the clean-up of an abandoned one is sent; all before the connections close.
    ensemble.attempts_settled().await;
    let held = ensemble.take_held();
    let releases = held.iter().filter_map(|lock| {
        let holding = Holding::adopt(lock.shut_down()?);
        Some(async move { holding.release_everywhere().await })
    });
    let released = join_all(releases).await.len();
    ensemble.stop();
    tracing::debug!(released, "client shut down");
    released
}
