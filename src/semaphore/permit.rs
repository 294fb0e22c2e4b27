//! A held permit: one slot lock of a semaphore.

use std::ops::{Deref, DerefMut};

use crate::error::Result;
use crate::held::guard::LockGuard;
use crate::report::NodeReport;

/// One of a [`Semaphore`](crate::Semaphore)'s permits, held: the guard of its slot lock,
/// with everything a [`LockGuard`] offers (validity, extension, lost signal, context)
/// through `Deref`. Dropping it releases the permit in the background, as a guard does.
#[derive(Debug)]
pub struct Permit {
    guard: LockGuard,
    slot: u32,
}

impl Permit {
    pub(crate) fn new(guard: LockGuard, slot: u32) -> Permit {
        Permit { guard, slot }
    }

    /// Which of the semaphore's permits this is, from 0.
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// Releases the permit on every node, as [`LockGuard::release`].
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`].
    pub async fn release(self) -> Result<NodeReport> {
        self.guard.release().await
    }

    /// The slot lock's guard.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
}

impl Deref for Permit {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.guard
    }
}

impl DerefMut for Permit {
    fn deref_mut(&mut self) -> &mut LockGuard {
        &mut self.guard
    }
}
