//! Leader election for a blocking caller: [`Election`], [`Campaign`] and [`Leadership`],
//! over the async [`crate::Election`].

use std::fmt;
use std::future::IntoFuture;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use crate::blocking::context::FencedRunContext;
use crate::blocking::core::ClientCore;
use crate::blocking::guard::{AsyncGuard, LockGuard};
use crate::blocking::observer::Observer;
#[cfg(doc)]
use crate::blocking::request::LockRequest;
use crate::blocking::request::forward_request_options;
use crate::blocking::scoped::run_on_this_thread;
use crate::election::candidates::Candidate;
use crate::election::term::Leader;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::report::NodeReport;

impl AsyncGuard for crate::Leadership {
    fn lock_guard(&self) -> &crate::LockGuard {
        self
    }

    fn into_lock_guard(self: Box<Self>) -> crate::LockGuard {
        (*self).into_parts().0
    }

    fn release_kind(self: Box<Self>) -> BoxFuture<'static, Result<NodeReport>> {
        Box::pin((*self).resign())
    }

    fn leadership(&self) -> Option<&crate::Leadership> {
        Some(self)
    }
}

/// The leader election of one name among every client of these nodes, as
/// [`crate::Election`]: one leader at a time, each term with an epoch above every earlier
/// one's.
#[derive(Debug, Clone)]
pub struct Election {
    core: Arc<ClientCore>,
    election: crate::Election,
}

impl Election {
    pub(crate) fn new(core: Arc<ClientCore>, election: crate::Election) -> Self {
        Election { core, election }
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.election.name()
    }

    /// Campaigns to lead with `value` (what observers read: an address, an id), the term
    /// a lock of `ttl`, once [`Campaign::acquire`] is called; as
    /// [`crate::Election::campaign`].
    pub fn campaign(&self, value: impl Into<String>, ttl: Duration) -> Campaign {
        Campaign {
            core: Arc::clone(&self.core),
            campaign: self.election.campaign(value, ttl),
        }
    }

    /// Who leads, as a majority of the nodes say, as [`crate::Election::leader`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::leader`]; also [`Error::Config`] when called from inside an
    /// async runtime and [`Error::ShutDown`] after the client's shutdown.
    pub fn leader(&self) -> Result<Leader> {
        let election = self.election.clone();
        self.core
            .runtime
            .call(async move { election.leader().await })?
    }

    /// Watches who leads, as [`crate::Election::observe`]: a majority read every `every`
    /// and on each announcement, never one node's word.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a zero interval, or when called from inside an async runtime;
    /// [`Error::ShutDown`] after the client's shutdown.
    pub fn observe(&self, every: Duration) -> Result<Observer> {
        let election = self.election.clone();
        let views = self
            .core
            .runtime
            .call(async move { election.observe(every) })??;
        Ok(Observer::new(Arc::clone(&self.core), views))
    }

    /// The candidates waiting for the term, in the order they will lead, as
    /// [`crate::Election::candidates`].
    ///
    /// # Errors
    ///
    /// As [`crate::Election::candidates`]; also [`Error::Config`] when called from inside
    /// an async runtime and [`Error::ShutDown`] after the client's shutdown.
    pub fn candidates(&self) -> Result<Vec<Candidate>> {
        let election = self.election.clone();
        self.core
            .runtime
            .call(async move { election.candidates().await })?
    }
}

/// A pending [`Election::campaign`]: adjust it, then [`acquire`](Self::acquire) the
/// leadership.
#[derive(Debug)]
#[must_use = "a campaign does nothing until `acquire()` is called"]
pub struct Campaign {
    core: Arc<ClientCore>,
    campaign: crate::Campaign,
}

impl Campaign {
    forward_request_options!(campaign);

    /// Waits to be elected, as awaiting a [`crate::Campaign`].
    ///
    /// # Errors
    ///
    /// As awaiting a [`crate::Campaign`]; also [`Error::Config`] when called from inside
    /// an async runtime and [`Error::ShutDown`] after the client's shutdown.
    pub fn acquire(self) -> Result<Leadership> {
        let won = self.core.runtime.call(self.campaign.into_future())??;
        let epoch = won.epoch();
        Ok(Leadership {
            guard: LockGuard::new(&self.core, Box::new(won)),
            epoch,
        })
    }

    /// Waits for the term, runs `f` on the calling thread while leading and resigns when
    /// `f` is done (also when it panics), returning its output; as
    /// [`crate::Campaign::run`], except that `f` cannot be cancelled: it receives a
    /// [`FencedRunContext`] (its [`fencing_token`](FencedRunContext::fencing_token) is the
    /// epoch) and must check [`is_held`](crate::blocking::RunContext::is_held) before each
    /// step that needs the leadership. When the term was lost while `f` ran, its output
    /// is dropped and the call returns [`Error::Lost`].
    ///
    /// ```no_run
    /// # fn demo(redlock: quorum_lock::blocking::Redlock) -> quorum_lock::Result<()> {
    /// use std::time::Duration;
    /// let election = redlock.election("scheduler")?;
    /// election
    ///     .campaign("10.0.0.7:8080", Duration::from_secs(10))
    ///     .run(|ctx| {
    ///         while ctx.is_held() {
    ///             // ... one step of the leader's work, its writes fenced by
    ///             // ctx.fencing_token() ...
    ///             # break;
    ///         }
    ///     })?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire), or [`Error::Lost`].
    ///
    /// # Panics
    ///
    /// A panic in `f` is resumed after the resignation.
    pub fn run<F, T>(self, f: F) -> Result<T>
    where
        F: FnOnce(FencedRunContext) -> T,
    {
        let Leadership { guard, epoch } = self.acquire()?;
        let context = FencedRunContext::new(guard.context(), epoch);
        run_on_this_thread(guard, || f(context))
    }
}

/// A term won by [`Campaign::acquire`]: this candidate leads until the term is lost, it
/// [`resign`](Self::resign)s, or it is dropped (which resigns in the background). The
/// lock under it is reachable through `Deref`.
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    guard: LockGuard,
    epoch: FencingToken,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("epoch", &self.epoch)
            .field("guard", &self.guard)
            .finish()
    }
}

impl Leadership {
    /// This term's epoch: a fencing token above every earlier term's of this election.
    pub fn epoch(&self) -> FencingToken {
        self.epoch
    }

    /// The value this leader proclaims now.
    pub fn value(&self) -> String {
        (self.guard.held())
            .and_then(AsyncGuard::leadership)
            .map(crate::Leadership::value)
            .unwrap_or_default()
    }

    /// Changes the value observers read for this term, while it lasts, as
    /// [`crate::Leadership::proclaim`].
    ///
    /// # Errors
    ///
    /// As [`crate::Leadership::proclaim`]; also [`Error::Config`] when called from inside
    /// an async runtime (nothing is changed) and [`Error::ShutDown`] after the client's
    /// shutdown.
    pub fn proclaim(&mut self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        self.guard.lend_held(move |held| {
            Box::pin(async move {
                let proclaimed = match held.leadership() {
                    Some(term) => term.proclaim(value).await,
                    None => Err(Error::NotHeld {
                        report: NodeReport::default(),
                    }),
                };
                (held, proclaimed)
            })
        })?
    }

    /// Resigns, as [`crate::Leadership::resign`]: releases the lock, which wakes the next
    /// candidate, and clears the term record.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    pub fn resign(self) -> Result<NodeReport> {
        self.guard.release()
    }
}

impl Deref for Leadership {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl DerefMut for Leadership {
    fn deref_mut(&mut self) -> &mut LockGuard {
        &mut self.guard
    }
}
