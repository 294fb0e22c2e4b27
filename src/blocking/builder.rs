//! [`RedlockBuilder`]: the async builder's settings, and a `build()` that starts the
//! runtime thread and builds the async client on it.

use std::time::Duration;

use crate::blocking::client::Redlock;
use crate::blocking::core::ClientCore;
use crate::blocking::runtime::{RuntimeThread, refuse_inside_runtime};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

/// Builds a blocking [`Redlock`]: the async [`RedlockBuilder`](crate::RedlockBuilder)'s
/// settings, with the same defaults and checks. Setters never fail;
/// [`build`](Self::build) reports the first problem. The settings not repeated here are
/// reached through `From`: `blocking::RedlockBuilder::from(quorum_lock::Redlock::builder()
/// .tls_root_certificate(pem))`.
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `build()` is called"]
pub struct RedlockBuilder {
    settings: crate::RedlockBuilder,
}

impl Redlock {
    /// Starts configuring a client.
    pub fn builder() -> RedlockBuilder {
        RedlockBuilder::default()
    }
}

impl From<crate::RedlockBuilder> for RedlockBuilder {
    fn from(settings: crate::RedlockBuilder) -> Self {
        RedlockBuilder { settings }
    }
}

impl RedlockBuilder {
    fn with(mut self, set: impl FnOnce(crate::RedlockBuilder) -> crate::RedlockBuilder) -> Self {
        self.settings = set(self.settings);
        self
    }

    /// Adds Redis nodes by URL, as [`crate::RedlockBuilder::nodes`].
    pub fn nodes<I, S>(self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.with(|b| b.nodes(urls))
    }

    /// Adds one node by URL, as [`crate::RedlockBuilder::node`].
    pub fn node(self, url: impl AsRef<str>) -> Self {
        self.with(|b| b.node(url))
    }

    /// Adds the nodes listed in `QUORUM_LOCK_NODES`, as
    /// [`crate::RedlockBuilder::nodes_from_env`].
    pub fn nodes_from_env(self) -> Self {
        self.with(crate::RedlockBuilder::nodes_from_env)
    }

    /// A prefix in front of every resource name, as [`crate::RedlockBuilder::key_prefix`].
    /// Default: none.
    pub fn key_prefix(self, prefix: impl Into<String>) -> Self {
        self.with(|b| b.key_prefix(prefix))
    }

    /// The TTL of operations that take none, as [`crate::RedlockBuilder::default_ttl`].
    /// Default: 30 s.
    pub fn default_ttl(self, ttl: Duration) -> Self {
        self.with(|b| b.default_ttl(ttl))
    }

    /// How long an acquisition keeps retrying, as [`crate::RedlockBuilder::wait`].
    /// Default: 10 s.
    pub fn wait(self, wait: Duration) -> Self {
        self.with(|b| b.wait(wait))
    }

    /// Caps the attempts of an acquisition, as [`crate::RedlockBuilder::max_attempts`].
    /// Default: no cap.
    pub fn max_attempts(self, attempts: u32) -> Self {
        self.with(|b| b.max_attempts(attempts))
    }

    /// Upper bound on one request to one node, as
    /// [`crate::RedlockBuilder::node_timeout`]. Default: 50 ms.
    pub fn node_timeout(self, timeout: Duration) -> Self {
        self.with(|b| b.node_timeout(timeout))
    }

    /// Upper bound on establishing one node's connection, as
    /// [`crate::RedlockBuilder::connect_timeout`]. Default: 500 ms.
    pub fn connect_timeout(self, timeout: Duration) -> Self {
        self.with(|b| b.connect_timeout(timeout))
    }

    /// Delay before the first retry, as [`crate::RedlockBuilder::retry_delay`].
    /// Default: 10 ms.
    pub fn retry_delay(self, delay: Duration) -> Self {
        self.with(|b| b.retry_delay(delay))
    }

    /// Cap on any single retry delay, as [`crate::RedlockBuilder::max_retry_delay`].
    /// Default: 200 ms.
    pub fn max_retry_delay(self, delay: Duration) -> Self {
        self.with(|b| b.max_retry_delay(delay))
    }

    /// Release notifications, as [`crate::RedlockBuilder::notifications`]. Default: on.
    pub fn notifications(self, on: bool) -> Self {
        self.with(|b| b.notifications(on))
    }

    /// Restart quarantine, as [`crate::RedlockBuilder::restart_quarantine`]. Default: on.
    pub fn restart_quarantine(self, on: bool) -> Self {
        self.with(|b| b.restart_quarantine(on))
    }

    /// The longest TTL any client of these nodes uses, as
    /// [`crate::RedlockBuilder::ttl_ceiling`]. Default: 60 s.
    pub fn ttl_ceiling(self, ceiling: Duration) -> Self {
        self.with(|b| b.ttl_ceiling(ceiling))
    }

    /// Validates the configuration, starts the client's runtime thread
    /// (`quorum-lock-runtime`) and builds the client on it. No connection is made until
    /// the first request.
    ///
    /// # Errors
    ///
    /// As [`crate::RedlockBuilder::build`]; also [`Error::Config`] when called from inside
    /// an async runtime, or when the thread could not be started. On an error no thread
    /// is left running.
    pub fn build(self) -> Result<Redlock> {
        refuse_inside_runtime()?;
        let runtime = RuntimeThread::start()?;
        let settings = self.settings;
        // Built on the runtime, where the client's background tasks are spawned.
        let client = runtime.call(async move { settings.build() })??;
        Ok(Redlock::new(ClientCore { client, runtime }))
    }
}
