//! [`Membership`]: what a node's kind of member adds to reaching its server and counting
//! its vote, behind one interface, so that [`Node`](super::node::Node) never asks which kind
//! it has. A plain server adds nothing ([`PlainServer`]); a Sentinel member's node reaches
//! the master its sentinels name and counts while they confirm it (`net::sentinel`); a
//! Cluster member's shard node counts while the cluster's masters confirm it owner of the
//! lock's slot (`net::shard`). A new member type is one implementation of this trait and
//! its URL form.

use std::time::Duration;

use futures::future::BoxFuture;
use redis::{Client, RedisError, RedisResult};

use crate::net::sentinel::{MasterAddr, Survey};
use crate::net::server_facts::KnownServer;

/// A node's membership: how a connect reaches its server, whether its vote counts now, and
/// what its requests keep up to date.
pub(crate) trait Membership: Send + Sync {
    /// The client a connect uses, resolved anew (a reconnect may follow a failover), within
    /// `timeout`; with the master address it resolved, for a membership that resolves one
    /// (the server found there must then be a master).
    fn client(&self, timeout: Duration)
    -> BoxFuture<'_, RedisResult<(Client, Option<MasterAddr>)>>;

    /// A connect reached `master`, the address [`client`](Self::client) resolved.
    fn connected_to(&self, _master: MasterAddr) {}

    /// Whether the server behind the node may change by failover: a client still connected
    /// to an old master may vote there up to a confirmation window after this client learnt
    /// the new one, so the quarantine of a life learnt here counts from then; and its votes
    /// may wait for replicas' acknowledgements.
    fn fails_over(&self) -> bool {
        false
    }

    /// The hash tag of the node `node`'s promotion record (empty for a whole server);
    /// `None` when no record can be kept now (a shard that owns no confirmed slot).
    fn promotion_tag(&self, _node: &str) -> Option<&'static str> {
        Some("")
    }

    /// Whether a vote of node `node`, from a connection to the server described by
    /// `known`, for a lock in hash slot `slot` (`None` outside a view seated for one),
    /// counts now.
    fn vouches(&self, _node: &str, _slot: Option<u16>, _known: &KnownServer) -> bool {
        true
    }

    /// What a request of node `node` runs beside itself to keep the confirmation its vote
    /// needs (`None`: nothing, it is fresh). The future tells whether the connection still
    /// goes to the confirmed master; `false` drops it.
    fn renewal<'a>(&'a self, _node: &'a str, _timeout: Duration) -> Option<BoxFuture<'a, bool>> {
        None
    }

    /// A request failed with `error` (`dead`: its connection must go): returns whether the
    /// connection must go for this membership's own reason (a redirect).
    fn noticed_failure(&self, _error: &RedisError, _dead: bool) -> bool {
        false
    }

    /// The master's `host:port` the membership last resolved, for the deployment check.
    fn resolved_master(&self) -> Option<String> {
        None
    }

    /// A survey of the membership's sentinels within `timeout`, for the deployment check.
    fn survey(&self, _timeout: Duration) -> Option<BoxFuture<'_, Survey>> {
        None
    }
}

/// A node's membership, as the node holds it.
pub(crate) type Member = Box<dyn Membership>;

/// A server at a fixed address.
pub(crate) struct PlainServer(pub(crate) Client);

impl Membership for PlainServer {
    fn client(&self, _: Duration) -> BoxFuture<'_, RedisResult<(Client, Option<MasterAddr>)>> {
        Box::pin(std::future::ready(Ok((self.0.clone(), None))))
    }
}

/// An address the driver cannot use (a cluster named it): every connect fails so.
pub(crate) struct Unusable(pub(crate) String);

impl Membership for Unusable {
    fn client(&self, _: Duration) -> BoxFuture<'_, RedisResult<(Client, Option<MasterAddr>)>> {
        let refused = RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "unusable address",
            self.0.clone(),
        ));
        Box::pin(std::future::ready(Err(refused)))
    }
}
