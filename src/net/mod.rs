//! The network layer: the only code that holds connections to the nodes and names the
//! driver's async connection types (`redis::aio`).
//!
//! - [`node`]: one node, its lazily made shared connection, and what a connect learns of
//!   the server behind it;
//! - [`fanout`]: one request to many nodes under one deadline, decided as soon as the
//!   outcome is certain, and the background collector of the late answers;
//! - [`coalesce`]: the byte stream under a node's connection.
//!
//! The rest of the crate builds a [`Call`](node::Call) and sends it to one
//! [`Node`](node::Node) or, as a [`Round`](fanout::Round), to many.

pub(crate) mod coalesce;
pub(crate) mod fanout;
pub(crate) mod node;
