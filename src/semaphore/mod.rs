//! The counting semaphore: at most K holders of a name at once, over the same quorum.
//!
//! A semaphore of K permits is K slot locks, each an ordinary quorum mutex on a resource
//! of its own (`quorum-lock:permit:<name>:<slot>`): each slot has at most one holder, so
//! the semaphore has at most K, with the mutex's fault tolerance (a minority of nodes
//! down, whatever K is), restart quarantine, extension, lost signal and release. Counting
//! holders per node and winning by plain majority would not be safe (DESIGN.md section
//! 11, checked in `tests/model_kinds.rs`).
//!
//! - this file: [`Semaphore`], the handle of one name and permit count, and its
//!   [`PermitRequest`];
//! - [`permit`]: [`Permit`], a held slot;
//! - [`slots`]: acquiring: a turn among the client's tasks (at most K try at once, the
//!   others wait in arrival order), then one attempt per slot, from a random slot on, then
//!   a pause until a slot frees or the wait budget runs out;
//! - [`listen`]: the pause's wake-ups from other clients: every slot of a semaphore shares
//!   one waiting list, so the release of any slot wakes the first client that waits.
//!
//! Every client of one name must use the same permit count: each node records the count
//! beside the slots while their holders may hold, and a client that asks for another count
//! is refused ([`Error::Config`], when a majority of nodes records it) until they are gone.

mod listen;
pub(crate) mod permit;
mod slots;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::held::extend::AutoExtend;
use crate::inspect::status::{self, LockStatus};
use crate::protocol::keys;
use permit::Permit;

/// A counting semaphore: at most [`permits`](Self::permits) holders of its name at once,
/// across every client of the same nodes. Made by
/// [`Redlock::semaphore`](crate::Redlock::semaphore); cheap to clone.
#[derive(Debug, Clone)]
pub struct Semaphore {
    ensemble: Arc<Ensemble>,
    name: Arc<str>,
    permits: u32,
}

impl Semaphore {
    /// The most permits a semaphore may have: each is a slot lock, tried in turn.
    pub const MAX_PERMITS: u32 = 1024;

    /// Checks the name and the permit count.
    pub(crate) fn new(ensemble: Arc<Ensemble>, name: &str, permits: u32) -> Result<Semaphore> {
        keys::check_user_name("semaphore", name)?;
        if permits == 0 || permits > Self::MAX_PERMITS {
            return Err(Error::Config(format!(
                "semaphore {name:?} has {permits} permits; use 1 to {}",
                Self::MAX_PERMITS
            )));
        }
        Ok(Semaphore {
            ensemble,
            name: Arc::from(name),
            permits,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many holders it admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Acquires a permit for `ttl`, waiting (up to the client's wait budget, or the
    /// request's [`wait`](PermitRequest::wait)) while all permits are held. Await the
    /// returned request.
    ///
    /// # Errors
    ///
    /// Awaiting the request returns [`Error::Timeout`] when the wait budget ran out (its
    /// `last` says why the last attempt failed), and [`Error::Config`] at once for an
    /// unusable TTL.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point leaves no permit behind: whatever an attempt in
    /// progress may have set is released on every node in the background.
    pub fn acquire(&self, ttl: Duration) -> PermitRequest {
        PermitRequest {
            semaphore: self.clone(),
            ttl,
            wait: None,
            auto_extend: None,
        }
    }

    /// Tries each permit once, from a random one on. Returns `Ok(None)` when all are held.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] or [`Error::ValiditySpent`] when no slot could be decided
    /// for a fault rather than for its holders, [`Error::Config`] for an unusable TTL.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes releases, in the background, whatever the
    /// attempt in progress may have set on any node.
    pub async fn try_acquire(&self, ttl: Duration) -> Result<Option<Permit>> {
        match slots::try_every_slot(self, ttl).await {
            Ok(permit) => Ok(Some(permit)),
            Err(Error::Contended { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Semaphore {
    /// Reads every permit's slot lock on every node, one [`LockStatus`] per permit in
    /// slot order (each as [`Redlock::status`](crate::Redlock::status) reads a lock):
    /// who holds which permit, and for how long. Writes nothing.
    ///
    /// # Errors
    ///
    /// As [`Redlock::status`](crate::Redlock::status).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it writes nothing.
    pub async fn status(&self) -> Result<Vec<LockStatus>> {
        let slots = (0..self.permits).map(|slot| {
            let resource = keys::permit_resource(&self.name, slot);
            async move { status::read_status(&self.ensemble, &resource).await }
        });
        futures::future::try_join_all(slots).await
    }
}

/// A pending [`Semaphore::acquire`]; `.await` it for a [`Permit`].
#[derive(Debug)]
#[must_use = "a permit request does nothing until awaited"]
pub struct PermitRequest {
    semaphore: Semaphore,
    ttl: Duration,
    wait: Option<Duration>,
    auto_extend: Option<AutoExtend>,
}

impl PermitRequest {
    /// How long to wait for a permit, instead of the client's wait budget.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Keeps the permit extended in the background while it is held (see [`AutoExtend`]).
    pub fn auto_extend(mut self, policy: AutoExtend) -> Self {
        self.auto_extend = Some(policy);
        self
    }
}

impl IntoFuture for PermitRequest {
    type Output = Result<Permit>;
    type IntoFuture = BoxFuture<'static, Result<Permit>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let wait = (self.wait).unwrap_or(self.semaphore.ensemble.config.wait);
            let mut permit = slots::acquire_permit(&self.semaphore, self.ttl, wait).await?;
            if let Some(policy) = self.auto_extend {
                permit.auto_extend(policy);
            }
            Ok(permit)
        })
    }
}
