//! A Cluster member's shard master as a node's [`Membership`]: a fixed address, whose vote
//! counts while the cluster's masters, asked less than a confirmation window ago, name it
//! owner of the lock's slot (see `net::cluster`), and whose requests keep that
//! confirmation fresh and tell the cluster when the slot table may have changed.

use std::sync::Weak;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use redis::{Client, RedisError, RedisResult};

use crate::net::member::Membership;
use crate::net::sentinel::MasterAddr;
use crate::net::server_facts::KnownServer;
use crate::protocol::slots;
use crate::rules::sentinel::CONFIRM_WINDOW;

/// What a shard master's node asks of the Redis Cluster member it belongs to (the
/// cluster's slot table and its confirmation rounds, `net::cluster`).
pub(crate) trait ShardCluster: Send + Sync {
    /// Whether a vote of the master `node` (`host:port`), whose connection is to the
    /// server's life `life`, for a lock in `slot` counts now.
    fn vouches(&self, slot: u16, node: &str, life: Option<&str>) -> bool;
    /// How old the masters' last confirmation of the master `node` as owner of a slot is
    /// (`None`: there is none).
    fn confirmation_age(&self, node: &str) -> Option<Duration>;
    /// Learns the slot table again soon, in the background.
    fn relearn_soon(&self);
    /// A confirmation round of the masters (the one under way, or a new one, which runs to
    /// its end whoever waits for it), to await until it confirms `node` owner of a slot or
    /// ends.
    fn confirm(&self, node: &str) -> BoxFuture<'static, ()>;
    /// A slot the last confirmations name the master `node` owner of.
    fn owned_slot(&self, node: &str) -> Option<u16>;
}

/// One shard master of a Cluster member, and its cluster.
pub(crate) struct ShardMaster {
    client: Client,
    cluster: Weak<dyn ShardCluster>,
}

impl ShardMaster {
    pub(crate) fn new(client: Client, cluster: Weak<dyn ShardCluster>) -> ShardMaster {
        ShardMaster { client, cluster }
    }
}

impl Membership for ShardMaster {
    fn client(&self, _: Duration) -> BoxFuture<'_, RedisResult<(Client, Option<MasterAddr>)>> {
        Box::pin(std::future::ready(Ok((self.client.clone(), None))))
    }

    fn fails_over(&self) -> bool {
        true
    }

    /// The tag of a slot the last confirmations name the node owner of: the record must be
    /// on the node itself, not redirected.
    fn promotion_tag(&self, node: &str) -> Option<&'static str> {
        let cluster = self.cluster.upgrade()?;
        Some(slots::slot_tag(cluster.owned_slot(node)?))
    }

    /// In the life the node's connection goes to.
    fn vouches(&self, node: &str, slot: Option<u16>, known: &KnownServer) -> bool {
        let (Some(slot), Some(cluster)) = (slot, self.cluster.upgrade()) else {
            return false;
        };
        cluster.vouches(slot, node, known.run_id().as_deref())
    }

    /// Nothing while the confirmation is under half a window old; a background round once
    /// it is older; the round beside the request once it is a window old (the vote would
    /// not count without it).
    fn renewal<'a>(&'a self, node: &'a str, _: Duration) -> Option<BoxFuture<'a, bool>> {
        let cluster = self.cluster.upgrade()?;
        match cluster.confirmation_age(node) {
            Some(age) if age < CONFIRM_WINDOW / 2 => None,
            Some(age) if age < CONFIRM_WINDOW => {
                cluster.relearn_soon();
                None
            }
            _ => Some(cluster.confirm(node).map(|()| true).boxed()),
        }
    }

    /// A redirect (`MOVED`, `ASK`), a request the shard could not serve yet (`TRYAGAIN`,
    /// `CLUSTERDOWN`) or a lost connection asks the cluster to learn the slot table again.
    /// A redirect drops the connection: the server no longer owns the slot, and it may be
    /// demoted; if it is promoted again later, only a new connection learns its new life.
    fn noticed_failure(&self, error: &RedisError, dead: bool) -> bool {
        let redirected = matches!(error.code(), Some("MOVED" | "ASK"));
        let not_served = matches!(error.code(), Some("TRYAGAIN" | "CLUSTERDOWN"));
        if let Some(cluster) = (self.cluster.upgrade()).filter(|_| redirected || not_served || dead)
        {
            cluster.relearn_soon();
        }
        redirected
    }
}
