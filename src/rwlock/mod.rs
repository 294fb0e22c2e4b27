//! The read-write lock: many readers or one writer of a name at once, over the same
//! quorum.
//!
//! Each side needs a majority, so a writer's majority and any reader's majority share a
//! node, whose script refused the second while the first's entry lived (DESIGN.md section
//! 11, checked in `tests/model_kinds.rs`). A writer holds the lock key as a mutex does,
//! once no reader is left; each reader is an entry of its own, with its own expiry by the
//! server's clock, beside it (`protocol::rw_scripts`). Both sides go through the mutex's
//! attempt: the same ballot, restart quarantine, first contact, clean-up and guard.
//!
//! - this file: [`RwLock`], the handle of one name, and the write side, which is the
//!   mutex's [`LockRequest`] on the lock key with the write script;
//! - [`read`]: the read side: [`ReadRequest`] and [`ReadGuard`].
//!
//! Both sides wait as mutex waiters do: local turns, one waiting list of readers and
//! writers in arrival order, woken by a writer's release and by the last reader's.
//! A writer that finds readers keeps new readers out for its TTL while the readers it
//! found leave, and then enters; a reader woken in its turn lets the other waiting
//! readers in with it.

pub(crate) mod read;

use std::sync::Arc;
use std::time::Duration;

use crate::acquire;
use crate::acquire::intent;
use crate::acquire::plan::Plan;
use crate::acquire::refuse_upgrade;
use crate::acquire::request::LockRequest;
use crate::ensemble::Ensemble;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::held::guard::LockGuard;
use crate::inspect::readers::{self, RwLockStatus};
use crate::protocol::access::Access;
use crate::protocol::keys;
use read::{ReadGuard, ReadRequest};

/// A read-write lock: any number of readers, or one writer, of its name at once, across
/// every client of the same nodes. Made by [`Redlock::rwlock`](crate::Redlock::rwlock); cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct RwLock {
    ensemble: Arc<Ensemble>,
    name: Arc<str>,
}

impl RwLock {
    /// Checks the name.
    pub(crate) fn new(ensemble: Arc<Ensemble>, name: &str) -> Result<RwLock> {
        keys::check_user_name("read-write lock", name)?;
        Ok(RwLock {
            ensemble,
            name: Arc::from(name),
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The resource its lock key is named after (under the client's key prefix): its
    /// name, as for the mutex of that name, which is its exclusive side.
    fn resource(&self) -> String {
        self.name.to_string()
    }

    /// Acquires a read lock for `ttl`, shared with other readers, waiting (up to the
    /// client's wait budget, or the request's [`wait`](ReadRequest::wait)) while a writer
    /// holds the lock or waits for it. Await the returned request for a [`ReadGuard`].
    ///
    /// # Errors
    ///
    /// Awaiting the request returns [`Error::Timeout`] when the wait budget ran out (its
    /// `last` says why the last attempt failed), and [`Error::Config`] at once for an
    /// unusable TTL.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future at any point leaves no reader behind: whatever an attempt in
    /// progress may have added is removed on every node in the background.
    pub fn read(&self, ttl: Duration) -> ReadRequest {
        ReadRequest::new(self.clone(), ttl)
    }

    /// Acquires the write lock for `ttl`, excluding readers and other writers: the mutex's
    /// [`LockRequest`] (wait budget, attempt cap, fencing tokens, auto-extension, `run`),
    /// entering once no reader is left. A writer that finds readers keeps new readers out
    /// for its TTL, so that it is not starved.
    ///
    /// # Errors
    ///
    /// As [`Redlock::lock`](crate::Redlock::lock), and [`Error::Upgrade`] when the awaiting task
    /// holds a read lock of this name.
    ///
    /// # Cancel safety
    ///
    /// As [`Redlock::lock`](crate::Redlock::lock).
    pub fn write(&self, ttl: Duration) -> LockRequest {
        let ensemble = Arc::clone(&self.ensemble);
        let mut request = LockRequest::new(ensemble, vec![self.resource()], ttl);
        request.request.access = Access::Write;
        request
    }

    /// Makes one attempt at a read lock. Returns `Ok(None)` when a writer holds the lock
    /// or waits for it.
    ///
    /// # Errors
    ///
    /// As [`Redlock::try_lock`](crate::Redlock::try_lock).
    ///
    /// # Cancel safety
    ///
    /// As [`Redlock::try_lock`](crate::Redlock::try_lock).
    pub async fn try_read(&self, ttl: Duration) -> Result<Option<ReadGuard>> {
        match self.try_access(ttl, Access::Read).await? {
            Some(guard) => Ok(Some(ReadGuard::new(guard, self))),
            None => Ok(None),
        }
    }

    /// Makes one attempt at the write lock. Returns `Ok(None)` when a writer or a live
    /// reader holds the lock. A refused try leaves no intent: it does not keep readers
    /// out, as a waiting [`write`](Self::write) does.
    ///
    /// # Errors
    ///
    /// As [`Redlock::try_lock`](crate::Redlock::try_lock), and [`Error::Upgrade`] when this task
    /// holds a read lock of this name.
    ///
    /// # Cancel safety
    ///
    /// As [`Redlock::try_lock`](crate::Redlock::try_lock).
    pub async fn try_write(&self, ttl: Duration) -> Result<Option<LockGuard>> {
        self.try_access(ttl, Access::Write).await
    }

    /// Reads the writer and the readers of this lock on every node: who holds it, and for
    /// how long. Writes nothing.
    ///
    /// # Errors
    ///
    /// As [`Redlock::status`](crate::Redlock::status).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it writes nothing.
    pub async fn status(&self) -> Result<RwLockStatus> {
        readers::read_rw_status(&self.ensemble, &self.resource()).await
    }

    /// One attempt at `access`; `None` when refused for a holder.
    async fn try_access(&self, ttl: Duration, access: Access) -> Result<Option<LockGuard>> {
        let plan = Plan::new(&self.ensemble, vec![self.resource()], ttl, false)?;
        let plan = plan.with_access(access)?;
        refuse_upgrade(&self.ensemble, &plan)?;
        let (ensemble, tried) = acquire::attempt_seated(&self.ensemble, &plan, None).await;
        // A single try does not wait: it leaves no intent behind to keep readers out.
        match &tried {
            Ok(guard) => intent::clear_after_write(&ensemble, &plan, |i| guard.voted_yes(i)),
            Err(_) => intent::clear_after_write(&ensemble, &plan, |_| false),
        }
        acquire::contended_as_none(tried)
    }
}
