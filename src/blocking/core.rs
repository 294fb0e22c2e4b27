//! [`ClientCore`]: what a blocking client and everything it hands out (requests,
//! guards, kinds, contexts) share: the async client and the thread whose runtime runs it.

use crate::blocking::runtime::RuntimeThread;

/// The async client and its runtime thread. The last handle to go shuts the client down
/// and stops the thread.
#[derive(Debug)]
pub(crate) struct ClientCore {
    pub(crate) client: crate::Redlock,
    pub(crate) runtime: RuntimeThread,
}

impl Drop for ClientCore {
    fn drop(&mut self) {
        let client = self.client.clone();
        self.runtime.stop(Some(Box::pin(async move {
            client.shutdown().await;
        })));
    }
}
