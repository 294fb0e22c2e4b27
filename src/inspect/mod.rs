//! Read-only inspection for operators: nothing here takes or changes a lock.
//!
//! - [`status`]: who holds a lock, on which nodes, and who is kept out
//!   ([`Redlock::status`](crate::client::Redlock::status));
//! - [`doctor`]: the deployment check
//!   ([`Redlock::check_deployment`](crate::client::Redlock::check_deployment));
//! - [`readers`]: the writer and the readers of a read-write lock
//!   ([`RwLock::status`](crate::RwLock::status));
//! - [`json`]: the small JSON writer both reports use.

pub(crate) mod doctor;
pub(crate) mod json;
pub(crate) mod readers;
pub(crate) mod status;
