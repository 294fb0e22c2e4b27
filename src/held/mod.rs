//! A held lock: what the caller owns after a successful acquisition, until it is released
//! or lost.
//!
//! - [`guard`]: the public [`LockGuard`](guard::LockGuard);
//! - [`lease`]: the state a guard shares with its extender and its scoped run (validity
//!   deadline, the extend round, the lost-lock signal);
//! - [`extend`]: opt-in auto-extension in a background task;
//! - [`release`]: the release round and [`Holding`](release::Holding), the clean-up duty
//!   of a token that may be stored, which every attempt, guard and release goes through;
//! - [`scoped`]: running a future under a lock.
//!
//! An attempt hands its win over as a [`Holding`](release::Holding) and a
//! [`Lease`](lease::Lease); the rest of the crate sees only the guard types.

pub(crate) mod extend;
pub(crate) mod guard;
pub(crate) mod lease;
pub(crate) mod release;
pub(crate) mod scoped;
