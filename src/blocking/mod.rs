//! A blocking API for code without an async runtime (behind the `blocking` feature), as
//! `reqwest::blocking` is for reqwest: the same names and semantics as the async API,
//! and no tokio in the caller's `Cargo.toml`.
//!
//! ```no_run
//! use std::time::Duration;
//! use quorum_lock::blocking::Redlock;
//!
//! fn main() -> quorum_lock::Result<()> {
//!     let redlock = Redlock::builder().nodes_from_env().build()?;
//!     let guard = redlock.lock("orders:42", Duration::from_secs(10)).acquire()?;
//!     // ... critical section, while guard.is_valid() ...
//!     guard.release()?;
//!
//!     // A closure run on this thread under an auto-extended lock:
//!     let done = redlock.run("reports:daily", Duration::from_secs(10), |ctx| {
//!         let mut steps = 0;
//!         while steps < 10 && ctx.is_held() {
//!             steps += 1; // ... one step that relies on the lock ...
//!         }
//!         steps
//!     })?;
//!     println!("{done} steps");
//!     redlock.shutdown()?;
//!     Ok(())
//! }
//! ```
//!
//! # How it runs
//!
//! Each client built with [`RedlockBuilder::build`] starts one OS thread,
//! `quorum-lock-runtime`, running a tokio current-thread runtime; the async
//! [`Redlock`](crate::Redlock) is built and runs there. Its background work
//! (auto-extension, releases of dropped guards, wake-ups of waiters, healing) goes on
//! between calls. A blocking call sends its future to that thread and waits for the
//! answer. Clones share the thread; it stops when [`Redlock::shutdown`] is called, or
//! when the last handle (client, guard, request or kind) is dropped, after shutting the
//! client down.
//!
//! # Rules
//!
//! - Do not call it from async code: every blocking call made inside an async runtime
//!   (including [`RedlockBuilder::build`]) returns [`Error::Config`](crate::Error::Config)
//!   instead of stalling or panicking. Use the async API there.
//! - Dropping a guard never waits: its release is queued on the runtime thread, as
//!   dropping an async guard spawns it. [`LockGuard::release`] waits and reports.
//! - Synchronous code cannot be cancelled. A closure under [`Redlock::run`] runs to its
//!   end even when the lock is lost meanwhile: it checks [`RunContext::is_held`] before
//!   the steps that need the lock (or waits with [`RunContext::wait_lost`]), and the call
//!   then returns [`Error::Lost`](crate::Error::Lost). Fencing tokens
//!   ([`LockRequest::fenced`]) close the gap for writes that may come late.
//! - A thread holding a read lock that asks for the write lock of the same name waits
//!   for itself (see [`RwLock`]).

// Layout: `runtime` the runtime thread and the two ways to reach it (a call waited for, a
// value dropped there); `core` what every handle shares (the async client and that
// thread); `client` the client; `builder` its builder; `request` lock requests; `fenced`
// fenced ones; `scoped` closures run under a lock; `context` what a closure or a guard
// reads of its lock; `guard` the held lock of any kind; `rwlock`, `semaphore`,
// `election` the other kinds; `observer` an election's leader as it changes. The top
// layer: it may use anything in the crate, and nothing uses it (scripts/check-layers.sh).

pub(crate) mod builder;
pub(crate) mod client;
pub(crate) mod context;
pub(crate) mod core;
pub(crate) mod election;
pub(crate) mod fenced;
pub(crate) mod guard;
pub(crate) mod observer;
pub(crate) mod request;
pub(crate) mod runtime;
pub(crate) mod rwlock;
pub(crate) mod scoped;
pub(crate) mod semaphore;

pub use builder::RedlockBuilder;
pub use client::Redlock;
pub use context::{FencedRunContext, RunContext};
pub use election::{Campaign, Election, Leadership};
pub use fenced::{FencedGuard, FencedRequest};
pub use guard::LockGuard;
pub use observer::Observer;
pub use request::LockRequest;
pub use rwlock::{ReadGuard, ReadRequest, RwLock};
pub use semaphore::{Permit, PermitRequest, Semaphore};
