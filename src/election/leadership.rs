//! [`Leadership`]: a won term. The lock it rests on is extended in the background, and a
//! task of its own keeps the term record beside it (what observers read) until the term
//! ends.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::election::Election;
use crate::election::announce::Announced;
use crate::election::term::{self, clear_term, write_term};
use crate::ensemble::Ensemble;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::held::guard::LockGuard;
use crate::held::lease::LostSignal;
use crate::report::NodeReport;
use crate::rules::election as election_rules;

/// A term won by [`Election::campaign`](crate::Election::campaign): this candidate leads
/// until the term is lost (its [`lost_signal`](LockGuard::lost_signal) fires, as a
/// guard's does), it [`resign`](Self::resign)s, or the handle is dropped (which releases
/// the lock at once, as dropping a guard does, and lets the term record expire).
///
/// The lock under it is reachable through `Deref` ([`LockGuard::validity`],
/// [`LockGuard::context`], ...). Every write the leader makes to shared storage should
/// carry its [`epoch`](Self::epoch), a fencing token above every earlier term's: storage
/// that checks it refuses a leader whose term ended.
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    election: Election,
    guard: LockGuard,
    epoch: FencingToken,
    record: watch::Sender<String>,
    keeper: RecordKeeper,
}

/// The task that keeps the term record: stopped when its handle is dropped, unless
/// told to keep it until the term ends.
#[derive(Debug)]
struct RecordKeeper(Option<AbortHandle>);

impl RecordKeeper {
    fn keep_until_term_ends(mut self) {
        self.0 = None;
    }
}

impl Drop for RecordKeeper {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.election.name())
            .field("epoch", &self.epoch)
            .field("validity", &self.guard.validity())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    /// Proclaims the term won with `guard` (whose fencing token is `epoch`) on the nodes,
    /// and starts keeping its record.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when fewer than a majority of nodes took the record; the
    /// lock is released then.
    pub(crate) async fn proclaim_won(
        election: &Election,
        guard: LockGuard,
        epoch: FencingToken,
        value: &str,
    ) -> Result<Leadership> {
        let ensemble = election.ensemble();
        let record = term::record(guard.token(), epoch, value);
        let at = (election.key(), guard.token());
        let announce = (election.channel(), Announced::Elected(epoch.get()));
        let (written, report) =
            write_term(ensemble, at, &record, guard.ttl(), Some(announce)).await;
        if written < ensemble.quorum {
            // Released on drop, at once.
            drop(guard);
            return Err(Error::Unavailable {
                quorum: ensemble.quorum,
                report,
            });
        }
        let (record, watched) = watch::channel(record);
        let keeper = tokio::spawn(keep_record(
            Arc::clone(ensemble),
            election.key().to_owned(),
            (guard.token().to_owned(), guard.ttl(), guard.lost_signal()),
            watched,
        ))
        .abort_handle();
        let keeper = RecordKeeper(Some(keeper));
        Ok(Leadership {
            election: election.clone(),
            guard,
            epoch,
            record,
            keeper,
        })
    }

    /// The election's name.
    pub fn election(&self) -> &str {
        self.election.name()
    }

    /// This term's epoch: a fencing token above every earlier term's of this election.
    pub fn epoch(&self) -> FencingToken {
        self.epoch
    }

    /// The value this leader proclaims now.
    pub fn value(&self) -> String {
        let record = self.record.borrow();
        crate::protocol::term_scripts::parse_record(&record)
            .map(|(_, _, value)| value.to_owned())
            .unwrap_or_default()
    }

    /// Changes the value observers read for this term, while it lasts.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when the term is over (its validity ran out or a majority no
    /// longer holds it: nothing is changed where it is not held); [`Error::Unavailable`]
    /// when too few nodes answered to tell (the nodes that did answer show the new value);
    /// [`Error::Config`] for a value longer than
    /// [`Election::MAX_VALUE`](crate::Election::MAX_VALUE).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the new value on some nodes; the term's record keeps
    /// the new value from then on either way.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<()> {
        let value = value.into();
        super::check_value(&value)?;
        if self.guard.validity().is_zero() {
            return Err(Error::NotHeld {
                report: NodeReport::default(),
            });
        }
        let record = term::record(self.guard.token(), self.epoch, &value);
        self.record.send_replace(record.clone());
        let ensemble = self.election.ensemble();
        let at = (self.election.key(), self.guard.token());
        let announce = (
            self.election.channel(),
            Announced::Elected(self.epoch.get()),
        );
        let ttl = self.guard.ttl();
        let (written, report) = write_term(ensemble, at, &record, ttl, Some(announce)).await;
        match written >= ensemble.quorum {
            true => Ok(()),
            false if report.count(&crate::report::NodeOutcome::NotHeld) >= ensemble.quorum => {
                Err(Error::NotHeld { report })
            }
            false => Err(Error::Unavailable {
                quorum: ensemble.quorum,
                report,
            }),
        }
    }

    /// Resigns: releases the lock on every node, which wakes the next candidate waiting
    /// (no TTL to wait out), then clears the term record and announces the term's end to
    /// observers.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`]: [`Error::NotHeld`] when the term had already ended.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future releases the lock in the background instead; a record not yet
    /// cleared expires by itself and names a term no longer held, which no reader takes
    /// for a leader.
    pub async fn resign(self) -> Result<NodeReport> {
        let Leadership {
            election,
            guard,
            epoch,
            keeper,
            ..
        } = self;
        drop(keeper);
        let token = guard.token().to_owned();
        // Released first, so that a reader woken by the announcement finds the key gone.
        let released = guard.release().await;
        let announce = (election.channel(), Announced::Ended(epoch.get()));
        clear_term(election.ensemble(), (election.key(), &token), announce).await;
        released
    }

    /// The lock under the term and its epoch, for code that supervises a lock of any kind
    /// (the command line's `elect`). The term record is kept until the lock is released
    /// or lost; the value can no longer change.
    pub fn into_parts(self) -> (LockGuard, FencingToken) {
        let Leadership {
            guard,
            epoch,
            keeper,
            ..
        } = self;
        keeper.keep_until_term_ends();
        (guard, epoch)
    }
}

impl Deref for Leadership {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

/// Rewrites the term record every third of the TTL while the term lasts, so that it
/// outlives the lock key the leader keeps extending; the value is the latest proclaimed.
async fn keep_record(
    ensemble: Arc<Ensemble>,
    key: String,
    (lock_value, ttl, lost): (String, Duration, LostSignal),
    record: watch::Receiver<String>,
) {
    let period = election_rules::refresh_period(ttl);
    loop {
        tokio::select! {
            () = tokio::time::sleep(period) => {}
            _ = lost.lost() => return,
        }
        let current = record.borrow().clone();
        write_term(&ensemble, (&key, &lock_value), &current, ttl, None).await;
    }
}
