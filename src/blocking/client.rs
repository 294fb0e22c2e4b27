//! The blocking client: [`Redlock`], the async client run on its runtime thread.

use std::sync::Arc;
use std::time::Duration;

use crate::blocking::context::RunContext;
use crate::blocking::core::ClientCore;
use crate::blocking::election::Election;
use crate::blocking::fenced::FencedGuard;
use crate::blocking::guard::LockGuard;
use crate::blocking::request::LockRequest;
use crate::blocking::runtime::refuse_inside_runtime;
use crate::blocking::rwlock::RwLock;
use crate::blocking::semaphore::Semaphore;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::held::ticket::LockTicket;
use crate::report::NodeReport;

/// A blocking Redlock client over N independent Redis masters: the async
/// [`Redlock`](crate::Redlock) run on a thread of its own (see the [module
/// docs](crate::blocking)).
///
/// Cheap to clone (an `Arc`): create one with [`Redlock::builder`] and share it between
/// threads. The runtime thread lives as long as the client, any clone of it, or anything
/// it handed out (a guard, a request, a read-write lock...); the last of them to be
/// dropped shuts the client down and stops the thread.
#[derive(Debug, Clone)]
pub struct Redlock {
    core: Arc<ClientCore>,
}

impl Redlock {
    pub(crate) fn new(core: ClientCore) -> Redlock {
        Redlock {
            core: Arc::new(core),
        }
    }

    /// Votes needed for a lock: `nodes / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.core.client.quorum()
    }

    /// The Redis key that stores the lock for `resource`, as
    /// [`Redlock::key`](crate::Redlock::key).
    pub fn key(&self, resource: &str) -> String {
        self.core.client.key(resource)
    }

    /// The TTL configured with
    /// [`RedlockBuilder::default_ttl`](crate::blocking::RedlockBuilder::default_ttl).
    pub fn default_ttl(&self) -> Duration {
        self.core.client.default_ttl()
    }

    /// Acquires `resource` for `ttl`, retrying until the wait budget runs out, once
    /// [`LockRequest::acquire`] is called; adjust the request first with
    /// [`LockRequest::wait`] or [`LockRequest::max_attempts`]. As
    /// [`Redlock::lock`](crate::Redlock::lock).
    pub fn lock(&self, resource: impl Into<String>, ttl: Duration) -> LockRequest {
        let request = self.core.client.lock(resource, ttl);
        LockRequest::new(Arc::clone(&self.core), request)
    }

    /// Acquires several resources as one lock, as
    /// [`Redlock::lock_many`](crate::Redlock::lock_many).
    pub fn lock_many<I, S>(&self, resources: I, ttl: Duration) -> LockRequest
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let request = self.core.client.lock_many(resources, ttl);
        LockRequest::new(Arc::clone(&self.core), request)
    }

    /// Makes exactly one attempt. Returns `Ok(None)` when another owner holds the resource.
    ///
    /// # Errors
    ///
    /// As [`Redlock::try_lock`](crate::Redlock::try_lock); also [`Error::Config`] when
    /// called from inside an async runtime and [`Error::ShutDown`] after
    /// [`shutdown`](Self::shutdown).
    pub fn try_lock(
        &self,
        resource: impl Into<String>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        let client = self.core.client.clone();
        let resource = resource.into();
        let tried = self
            .core
            .runtime
            .call(async move { client.try_lock(resource, ttl).await })?;
        Ok(tried?.map(|guard| LockGuard::new(&self.core, Box::new(guard))))
    }

    /// [`try_lock`](Self::try_lock) with a fencing token.
    ///
    /// # Errors
    ///
    /// As [`Redlock::try_lock_fenced`](crate::Redlock::try_lock_fenced); also
    /// [`Error::Config`] when called from inside an async runtime and [`Error::ShutDown`]
    /// after [`shutdown`](Self::shutdown).
    pub fn try_lock_fenced(
        &self,
        resource: impl Into<String>,
        ttl: Duration,
    ) -> Result<Option<FencedGuard>> {
        let client = self.core.client.clone();
        let resource = resource.into();
        let tried =
            (self.core.runtime).call(async move { client.try_lock_fenced(resource, ttl).await })?;
        Ok(tried?.map(|guard| FencedGuard::new(&self.core, guard)))
    }

    /// Runs `f` on the calling thread under `resource` locked for `ttl` and
    /// auto-extended; shorthand for `self.lock(resource, ttl).run(f)`. See
    /// [`LockRequest::run`].
    ///
    /// # Errors
    ///
    /// As [`LockRequest::run`].
    pub fn run<F, T>(&self, resource: impl Into<String>, ttl: Duration, f: F) -> Result<T>
    where
        F: FnOnce(RunContext) -> T,
    {
        self.lock(resource, ttl).run(f)
    }

    /// A read-write lock on `name`, as [`Redlock::rwlock`](crate::Redlock::rwlock).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty name.
    pub fn rwlock(&self, name: &str) -> Result<RwLock> {
        let rwlock = self.core.client.rwlock(name)?;
        Ok(RwLock::new(Arc::clone(&self.core), rwlock))
    }

    /// A counting semaphore of `permits` on `name`, as
    /// [`Redlock::semaphore`](crate::Redlock::semaphore).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty name, or a count of 0 or above
    /// [`Semaphore::MAX_PERMITS`](crate::Semaphore::MAX_PERMITS).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        let semaphore = self.core.client.semaphore(name, permits)?;
        Ok(Semaphore::new(Arc::clone(&self.core), semaphore))
    }

    /// The leader election of `name`, as [`Redlock::election`](crate::Redlock::election).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for an empty name, or one in the names this library keeps.
    pub fn election(&self, name: &str) -> Result<Election> {
        let election = self.core.client.election(name)?;
        Ok(Election::new(Arc::clone(&self.core), election))
    }

    /// Takes over the lock a [`LockTicket`] hands on, as
    /// [`Redlock::adopt`](crate::Redlock::adopt).
    ///
    /// # Errors
    ///
    /// As [`Redlock::adopt`](crate::Redlock::adopt); also [`Error::Config`] when called
    /// from inside an async runtime (nothing is sent).
    pub fn adopt(&self, ticket: &LockTicket) -> Result<LockGuard> {
        let (client, ticket) = (self.core.client.clone(), ticket.clone());
        let adopted = (self.core.runtime).call(async move { client.adopt(&ticket).await })?;
        Ok(LockGuard::new(&self.core, Box::new(adopted?)))
    }

    /// Connects to every node and checks it answers, as
    /// [`Redlock::connect`](crate::Redlock::connect). Optional: requests connect lazily.
    ///
    /// # Errors
    ///
    /// As [`Redlock::connect`](crate::Redlock::connect); also [`Error::Config`] when called
    /// from inside an async runtime.
    pub fn connect(&self) -> Result<NodeReport> {
        let client = self.core.client.clone();
        self.core
            .runtime
            .call(async move { client.connect().await })?
    }

    /// Shuts this client (and every clone of it) down, as
    /// [`Redlock::shutdown`](crate::Redlock::shutdown): takes no new locks, releases every
    /// lock it holds, stops its background work; then stops and joins the runtime thread.
    /// Later calls through any clone, guard or kind return [`Error::ShutDown`]. Returns how
    /// many locks were released; calling it again returns 0.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when called from inside an async runtime (nothing is done).
    pub fn shutdown(&self) -> Result<usize> {
        refuse_inside_runtime()?;
        let client = self.core.client.clone();
        // A runtime already stopped was shut down before: nothing is left to release.
        let shutting = async move { client.shutdown().await };
        let released = self.core.runtime.call(shutting).unwrap_or_default();
        self.core.runtime.stop(None);
        Ok(released)
    }
}
