//! A piece of background work that several callers may await and none may cut short:
//! spawned on the runtime when there is one, so it runs to its end whoever waits for it
//! (a confirmation round of the sentinels or of a Cluster's masters).

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

/// `work`, spawned when a runtime is there (else run by whoever awaits it), as a future
/// any number of callers may await.
pub(crate) fn spawn_shared(
    work: impl Future<Output = ()> + Send + 'static,
) -> Shared<BoxFuture<'static, ()>> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            let task = handle.spawn(work);
            async move {
                let _ = task.await;
            }
            .boxed()
        }
        Err(_) => work.boxed(),
    }
    .shared()
}
