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
//! - [`slots`]: acquiring: the slot locks as the candidates of the one acquisition loop,
//!   with a turn among the client's tasks (at most K try at once, the others wait in
//!   arrival order). Every slot of a semaphore shares one waiting list, so the release of
//!   any slot wakes the first client that waits.
//!
//! Every client of one name must use the same permit count: each node records the count
//! beside the slots while their holders may hold, and a client that asks for another count
//! is refused ([`Error::Config`], when a majority of nodes records it) until they are gone.

pub(crate) mod permit;
mod slots;

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::acquire::Options;
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::held::extend::AutoExtend;
use crate::held::guard::run_under;
use crate::held::lease::LockContext;
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
            options: Options::default(),
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
        // Every slot's waiters are the semaphore's: its one list is read with slot 0.
        let slots = (0..self.permits).map(|slot| {
            let resource = keys::permit_resource(&self.name, slot);
            async move { status::read_status_listing(&self.ensemble, &resource, slot == 0).await }
        });
        let mut statuses = futures::future::try_join_all(slots).await?;
        if let Some((first, rest)) = statuses.split_first_mut() {
            rest.iter_mut()
                .for_each(|status| status.waiters.clone_from(&first.waiters));
        }
        Ok(statuses)
    }
}

/// A pending [`Semaphore::acquire`]; `.await` it for a [`Permit`].
#[derive(Debug)]
#[must_use = "a permit request does nothing until awaited"]
pub struct PermitRequest {
    semaphore: Semaphore,
    ttl: Duration,
    options: Options,
}

impl PermitRequest {
    /// How long to wait for a permit, instead of the client's wait budget.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = Some(wait);
        self
    }

    /// Caps the attempts (at least 1), instead of the client's attempt cap: an attempt at
    /// a permit tries each free slot once.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.options.max_attempts = Some(attempts);
        self
    }

    /// The request of a scoped run: auto-extended, unlimited unless a policy was set.
    pub(crate) fn for_run(mut self) -> Self {
        self.options.for_run();
        self
    }

    /// Keeps the permit extended in the background while it is held (see [`AutoExtend`]).
    pub fn auto_extend(mut self, policy: AutoExtend) -> Self {
        self.options.auto_extend = Some(policy);
        self
    }

    /// Acquires a permit, runs `f` under it with auto-extension (unlimited unless
    /// [`auto_extend`](Self::auto_extend) set a budget), releases it afterwards, also when
    /// `f` fails or panics, and returns `f`'s output: as
    /// [`LockRequest::run`](crate::LockRequest::run) for a permit.
    ///
    /// # Errors
    ///
    /// Acquisition errors as for [`Semaphore::acquire`], or
    /// [`Error::Lost`](crate::Error::Lost) when the permit is lost while `f` runs (`f`'s
    /// future is then dropped).
    ///
    /// # Cancel safety
    ///
    /// As [`LockRequest::run`](crate::LockRequest::run).
    ///
    /// # Panics
    ///
    /// A panic in `f` is resumed after the permit was released.
    pub async fn run<F, Fut, T>(mut self, f: F) -> Result<T>
    where
        F: FnOnce(LockContext) -> Fut,
        Fut: Future<Output = T>,
    {
        self.options.for_run();
        let (guard, turn) = self.await?.into_parts();
        let work = f(guard.context());
        // The task keeps its turn among the client's tasks until the work is done.
        let ran = run_under(guard, work).await;
        drop(turn);
        ran
    }
}

impl IntoFuture for PermitRequest {
    type Output = Result<Permit>;
    type IntoFuture = BoxFuture<'static, Result<Permit>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            let budget = self.options.budget(&self.semaphore.ensemble)?;
            let mut permit = slots::acquire_permit(&self.semaphore, self.ttl, budget).await?;
            self.options.extend_won(&mut permit);
            Ok(permit)
        })
    }
}
