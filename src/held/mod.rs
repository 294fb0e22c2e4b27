//! A held lock: what the caller owns after a successful acquisition, until it is released
//! or lost.
//!
//! - [`guard`]: the public [`LockGuard`](guard::LockGuard);
//! - [`lease`]: the state a guard shares with its extender and its scoped run (validity
//!   deadline, the extend round, the lost-lock signal);
//! - [`extend`]: opt-in auto-extension in a background task;
//! - [`ticket`]: [`LockTicket`](ticket::LockTicket), a held lock handed on, and its text;
//! - [`adopt`]: a ticket's lock taken over by a new guard once a majority confirms it;
//! - [`release`]: the release round and [`Holding`](release::Holding), the clean-up duty
//!   of a token that may be stored, which every attempt, guard and release goes through.
//!
//! An attempt hands its win to [`LockGuard::new`](guard::LockGuard::new) as a
//! [`Holding`](release::Holding); from there the guard owns the lock, and a dropped one
//! hands its release to the background.

pub(crate) mod adopt;
pub(crate) mod extend;
pub(crate) mod guard;
pub(crate) mod lease;
pub(crate) mod release;
pub(crate) mod ticket;
