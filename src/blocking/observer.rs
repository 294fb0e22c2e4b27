//! [`Observer`]: who leads an election, as it changes, for a blocking caller.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::blocking::core::ClientCore;
use crate::election::term::Leader;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

/// The leader of an election as a majority of the nodes show it, kept up to date on the
/// client's runtime thread; made by [`Election::observe`](crate::blocking::Election::observe).
/// Clones follow the same reads; the reads stop when every clone is dropped.
#[derive(Clone)]
pub struct Observer {
    core: Arc<ClientCore>,
    views: watch::Receiver<Leader>,
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("leader", &*self.views.borrow())
            .finish_non_exhaustive()
    }
}

impl Observer {
    pub(crate) fn new(core: Arc<ClientCore>, views: watch::Receiver<Leader>) -> Self {
        Observer { core, views }
    }

    /// The leader as last read. Never waits.
    pub fn leader(&self) -> Leader {
        self.views.borrow().clone()
    }

    /// Waits up to `timeout` for the leader shown to change, and returns the new view;
    /// `None` when nothing changed in time. A change since the last call (or since the
    /// observer was made) returns at once.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when called from inside an async runtime; [`Error::ShutDown`]
    /// after the client's shutdown, which ends the reads.
    pub fn wait_change(&mut self, timeout: Duration) -> Result<Option<Leader>> {
        // A clone has seen what this receiver has seen; this one is marked below.
        let mut views = self.views.clone();
        let changed = self
            .core
            .runtime
            .call(async move { tokio::time::timeout(timeout, views.changed()).await })?;
        match changed {
            Err(_elapsed) => Ok(None),
            Ok(Err(_closed)) => Err(crate::error::Error::ShutDown),
            Ok(Ok(())) => Ok(Some(self.views.borrow_and_update().clone())),
        }
    }
}
