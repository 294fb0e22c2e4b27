//! The held lock: an owned guard with validity, extend and release, and the clean-up that
//! runs when a guard or an unfinished acquisition is dropped.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::builder::check_ttl;
use crate::client::Inner;
use crate::error::{Error, Result};
use crate::fanout::{self, Stragglers};
use crate::metrics;
use crate::quorum::{self, Verdict};
use crate::report::{NodeOutcome, NodeReport};
use crate::scripts;

/// A token that may be stored on some nodes, with the duty to remove it.
///
/// While armed, dropping it sends compare-and-delete to every node from a spawned task.
/// It is armed from before an attempt's first request until the lock is released, so no
/// cancellation point can leave a key behind (beyond its TTL when no runtime is left).
pub(crate) struct Holding {
    inner: Arc<Inner>,
    keys: Arc<[String]>,
    token: Arc<str>,
    armed: bool,
}

impl Holding {
    pub(crate) fn new(inner: Arc<Inner>, keys: Arc<[String]>, token: Arc<str>) -> Self {
        Holding {
            inner,
            keys,
            token,
            armed: true,
        }
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// Compare-and-delete requests for the nodes in `which`.
    fn release_requests(&self, which: impl Iterator<Item = usize>) -> Stragglers {
        let timeout = self.inner.config.node_timeout;
        which
            .filter_map(|i| self.inner.nodes.get(i).map(|node| (i, node)))
            .map(|(i, node)| {
                let mut invocation = scripts::RELEASE.prepare_invoke();
                for key in self.keys.iter() {
                    invocation.key(key.as_str());
                }
                invocation.arg(&*self.token);
                fanout::script(i, node, timeout, invocation, |deleted: i64| {
                    if deleted > 0 {
                        NodeOutcome::Released
                    } else {
                        NodeOutcome::NotHeld
                    }
                })
            })
            .collect()
    }

    /// Releases on the nodes in `which`, waiting for every answer (each bounded by the node
    /// timeout), then disarms.
    pub(crate) async fn release_on(&mut self, which: &[usize]) {
        if !which.is_empty() {
            let mut pending = self.release_requests(which.iter().copied());
            fanout::collect(self.inner.nodes.len(), &mut pending, |_| false, false).await;
        }
        self.armed = false;
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Never block or do I/O here: hand the release to the runtime if there is one,
        // otherwise the TTL frees the lock.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                let mut pending = self.release_requests(0..self.inner.nodes.len());
                let n = self.inner.nodes.len();
                handle.spawn(async move {
                    fanout::collect(n, &mut pending, |_| false, false).await;
                });
                metrics::released("drop");
            }
            Err(_) => metrics::released("skipped"),
        }
    }
}

/// A lock held on a majority of nodes.
///
/// Owned and `'static`: move it into tasks freely. The lock is only safe to rely on while
/// [`validity`](Self::validity) is not zero; after that another client may acquire it.
/// Release it with [`release`](Self::release) to learn the outcome; dropping it releases in
/// a spawned task (when a tokio runtime is available) and never blocks.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    holding: Holding,
    resources: Arc<[String]>,
    ttl: Duration,
    deadline: Instant,
    acquired_at: Instant,
    report: NodeReport,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("resources", &self.resources)
            .field("token", &self.holding.token)
            .field("ttl", &self.ttl)
            .field("validity", &self.validity())
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(
        holding: Holding,
        resources: Arc<[String]>,
        ttl: Duration,
        deadline: Instant,
        report: NodeReport,
    ) -> Self {
        LockGuard {
            holding,
            resources,
            ttl,
            deadline,
            acquired_at: Instant::now(),
            report,
        }
    }

    /// The resource name (the first, sorted, for a [`lock_many`](crate::Redlock::lock_many)
    /// guard).
    pub fn resource(&self) -> &str {
        self.resources.first().map_or("", String::as_str)
    }

    /// Every resource this guard holds, sorted.
    pub fn resources(&self) -> &[String] {
        &self.resources
    }

    /// The random token stored on the nodes: 128 bits as 32 hex digits.
    pub fn token(&self) -> &str {
        &self.holding.token
    }

    /// The TTL of the last successful acquire or extend.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How much longer the lock is safely held: zero once the validity ran out.
    pub fn validity(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The instant (on tokio's monotonic clock) at which the validity runs out.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the validity has not yet run out.
    pub fn is_valid(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// What each node answered when the lock was acquired.
    pub fn report(&self) -> &NodeReport {
        &self.report
    }

    /// Resets the TTL to `ttl` on every node that still holds our token, and succeeds when
    /// a majority did so in time to leave a positive validity. Returns the new validity.
    ///
    /// A failed extension changes nothing locally and never releases the lock: the old
    /// validity still applies.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the validity had already run out or a majority no longer has
    /// our token; [`Error::Unavailable`] when too many nodes failed to answer (the lock may
    /// still be held: retry while [`validity`](Self::validity) remains);
    /// [`Error::ValiditySpent`] when the majority answered too late;
    /// [`Error::Config`] for an unusable TTL.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the TTL extended on some nodes; the guard still holds
    /// its previous deadline, which is the safe side.
    pub async fn extend(&mut self, ttl: Duration) -> Result<Duration> {
        let inner = Arc::clone(&self.holding.inner);
        let config = &inner.config;
        let ttl = Duration::from_millis(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        check_ttl(ttl, config.drift_factor, config.node_timeout)?;
        if !self.is_valid() {
            metrics::extended("not_held");
            return Err(Error::NotHeld {
                report: NodeReport::default(),
            });
        }
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
        let n = inner.nodes.len();
        let start = Instant::now();
        let mut pending: Stragglers = inner
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let mut invocation = scripts::EXTEND.prepare_invoke();
                for key in self.holding.keys.iter() {
                    invocation.key(key.as_str());
                }
                invocation.arg(self.token()).arg(ttl_ms);
                fanout::script(i, node, config.node_timeout, invocation, |ok: i64| {
                    if ok == 1 {
                        NodeOutcome::Extended
                    } else {
                        NodeOutcome::NotHeld
                    }
                })
            })
            .collect();
        let collected =
            fanout::collect(n, &mut pending, |o| *o == NodeOutcome::Extended, true).await;
        // The other nodes still get their extension: more copies of the lock, same token.
        fanout::finish_in_background(pending);
        let decided = Instant::now();
        let elapsed = decided - start;
        let report = collected.report(&inner);
        if collected.tally.verdict() == Verdict::Reached {
            return match quorum::validity(ttl, elapsed, config.drift_factor) {
                Some(validity) => {
                    self.deadline = decided + validity;
                    self.ttl = ttl;
                    metrics::extended("extended");
                    Ok(validity)
                }
                None => {
                    metrics::extended("validity_spent");
                    Err(Error::ValiditySpent { elapsed, report })
                }
            };
        }
        if n - collected.failures() < inner.quorum {
            metrics::extended("unavailable");
            Err(Error::Unavailable {
                quorum: inner.quorum,
                report,
            })
        } else {
            metrics::extended("not_held");
            Err(Error::NotHeld { report })
        }
    }

    /// Releases the lock on every node (compare-and-delete: another owner's key is never
    /// touched) and reports what happened. Returns as soon as the outcome is certain;
    /// requests to slower nodes finish in the background.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when fewer than a majority still had our token: the lock had
    /// expired (or was taken over) before the release. [`Error::Unavailable`] when too many
    /// nodes failed to answer to tell. Either way nothing of ours is left except on nodes
    /// that did not answer, where the TTL removes it.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future releases in the background instead.
    pub async fn release(mut self) -> Result<NodeReport> {
        let inner = Arc::clone(&self.holding.inner);
        let n = inner.nodes.len();
        let mut pending = self.holding.release_requests(0..n);
        let collected =
            fanout::collect(n, &mut pending, |o| *o == NodeOutcome::Released, true).await;
        fanout::finish_in_background(pending);
        self.holding.armed = false;
        metrics::released("explicit");
        metrics::held(self.acquired_at.elapsed());
        let report = collected.report(&inner);
        if collected.tally.verdict() == Verdict::Reached {
            Ok(report)
        } else if n - collected.failures() < inner.quorum {
            Err(Error::Unavailable {
                quorum: inner.quorum,
                report,
            })
        } else {
            Err(Error::NotHeld { report })
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.holding.armed {
            metrics::held(self.acquired_at.elapsed());
        }
        // `Holding::drop` does the release.
    }
}
