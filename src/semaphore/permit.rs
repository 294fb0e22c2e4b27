//! A held permit: one slot lock of a semaphore.

use std::ops::{Deref, DerefMut};

use crate::acquire::HeldTurn;
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
    /// The task's turn among this client's tasks, held with the permit (none for
    /// [`try_acquire`](crate::Semaphore::try_acquire)).
    turn: Option<HeldTurn>,
}

impl Permit {
    pub(crate) fn new(guard: LockGuard, slot: u32, turn: Option<HeldTurn>) -> Permit {
        Permit { guard, slot, turn }
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
        let released = self.guard.release().await;
        drop(self.turn);
        released
    }

    /// The slot lock's guard. The permit's turn among this client's tasks passes on: the
    /// guard still holds the slot, and the next task tries the others.
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// The slot lock's guard and the task's turn, apart.
    pub(crate) fn into_parts(self) -> (LockGuard, Option<HeldTurn>) {
        (self.guard, self.turn)
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
