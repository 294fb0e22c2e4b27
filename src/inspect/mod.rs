//! Read-only inspection for operators: nothing here takes or changes a lock.
//!
//! - [`status`]: who holds a lock, on which nodes, and who is kept out
//!   ([`Redlock::status`](crate::client::Redlock::status));
//! - [`doctor`]: the deployment check
//!   ([`Redlock::check_deployment`](crate::client::Redlock::check_deployment));
//! - [`waiters`]: who waits for a lock, for the status;
//! - [`readers`]: the writer and the readers of a read-write lock
//!   ([`RwLock::status`](crate::RwLock::status));
//! - [`spread`] and [`spread_scan`]: the live locks that one more node restart could take
//!   from their holders, for the readiness gate ([`Redlock::heal`](crate::Redlock::heal));
//! - [`json`]: the small JSON writer both reports use.

pub(crate) mod doctor;
pub(crate) mod json;
pub(crate) mod readers;
pub(crate) mod spread;
pub(crate) mod spread_scan;
pub(crate) mod status;
pub(crate) mod waiters;
