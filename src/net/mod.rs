//! The network layer: the only code that holds connections to the nodes and names the
//! driver's async connection types (`redis::aio`).
//!
//! - [`node`]: one node and the lifecycle of its lazily made, shared connection;
//! - [`member`]: the one interface of every kind of member a node may be
//!   ([`Membership`](member::Membership): how a connect reaches the server, whether a vote
//!   counts now, what a request keeps confirmed), and the plain server;
//! - [`sentinel`], [`sentinel_member`]: a member that is a master under Sentinel, and the
//!   sentinels' confirmation its votes need;
//! - [`cluster`], [`shard`]: a member that is a Redis Cluster: its slot table, and a node
//!   per shard master whose votes need the masters' confirmation;
//! - [`server_facts`]: what a connect learns of the server behind a node, for restart
//!   quarantine and the fast path;
//! - [`promotion_record`]: when a client first learnt a promoted master's life, kept on
//!   the node, where every later client's quarantine counts from;
//! - [`replica_acks`]: votes that count only once `WAIT` confirms their writes on replicas;
//! - [`call`]: the command a round sends (script, native stand-in, delivery);
//! - [`send_gate`]: the gate that orders a token's `SET`s before its release;
//! - [`failure`]: why a request produced no usable answer;
//! - [`fanout`]: one request to many nodes under one deadline (a [`Round`](fanout::Round)),
//!   or to the one node of a single-node client, awaited in place;
//! - [`request`]: one node's request in a round;
//! - [`shared_task`]: background work several callers await and none cuts short;
//! - [`timely`]: a request bounded by a deadline, whose answer counts only when read before
//!   it (every round's rule, also for the sentinels' and a cluster's confirmations);
//! - [`answers`]: a round's answers as they arrive, decided as soon as the outcome is
//!   certain;
//! - [`background`]: the collector of the answers that rounds leave behind;
//! - [`coalesce`]: the byte stream under a node's connection;
//! - [`subscription`]: a node's pub/sub subscription to release notifications;
//! - [`probe_connection`]: a node's short-lived connection for the deployment check;
//! - [`fenced_write`]: [`fenced_set`](crate::fencing::fenced_set), the guarded write on the
//!   caller's own connection to its data.
//!
//! The rest of the crate builds a [`Call`](call::Call) and sends it to one
//! [`Node`](node::Node) or, as a [`Round`](fanout::Round), to many.

pub(crate) mod answers;
pub(crate) mod background;
pub(crate) mod call;
pub(crate) mod cluster;
pub(crate) mod coalesce;
pub(crate) mod failure;
pub(crate) mod fanout;
pub(crate) mod fenced_write;
pub(crate) mod member;
pub(crate) mod node;
pub(crate) mod probe_connection;
pub(crate) mod promotion_record;
pub(crate) mod replica_acks;
pub(crate) mod request;
pub(crate) mod send_gate;
pub(crate) mod sentinel;
pub(crate) mod sentinel_member;
pub(crate) mod server_facts;
pub(crate) mod shard;
pub(crate) mod shared_task;
pub(crate) mod subscription;
pub(crate) mod timely;
