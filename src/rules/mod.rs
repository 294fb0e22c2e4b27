//! The pure rules: no I/O, no clock reads, no `async`; every input is an argument, so each
//! rule is table-tested on its own and the model checker (`tests/model.rs`) calls the same
//! functions the client does.
//!
//! - [`quorum`]: whether a TTL is usable, the vote tally and every round's decision;
//! - [`safety`]: the majority, drift and validity, restart quarantine, fencing tokens, vote
//!   de-duplication, failed extensions;
//! - [`sentinel`]: a member under Sentinel: the sentinels' agreement, whose confirmation a
//!   vote needs, and when a promoted master's quarantine starts;
//! - [`cluster`]: a member that is a Redis Cluster: which master its masters agree owns
//!   each slot;
//! - [`election`]: who leads, judged from one read of every node, and the shortest term;
//! - [`retry`]: the backoff between attempts;
//! - [`deadline`]: instants a duration later that saturate, and answers in time.

pub mod cluster;
pub(crate) mod deadline;
pub mod election;
pub(crate) mod quorum;
pub(crate) mod retry;
pub mod safety;
pub mod sentinel;
