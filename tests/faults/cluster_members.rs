//! Members that are Redis Clusters as the nodes under test: each member a cluster of two
//! shards (a master and a replica each) of its own, reached by a `redis+cluster://` URL, and
//! [`Fault::Failover`] its fault: every shard of the member fails over, one after the other.

use crate::common::topology::RedisClusterTopology;

use super::ensemble::{Ensemble, Fault};

/// `n` members, each a Redis Cluster.
pub struct ClusterMembers {
    members: Vec<RedisClusterTopology>,
}

impl ClusterMembers {
    pub fn start(n: usize) -> ClusterMembers {
        ClusterMembers {
            members: (0..n).map(|_| RedisClusterTopology::start(2, 1)).collect(),
        }
    }

    /// The current masters of member `i` (the nodes with a replica).
    fn masters(&self, i: usize) -> Vec<usize> {
        let cluster = &self.members[i];
        (0..cluster.nodes().len())
            .filter(|&n| !cluster.replicas_of(n).is_empty())
            .collect()
    }
}

impl Ensemble for ClusterMembers {
    fn size(&self) -> usize {
        self.members.len()
    }

    fn client_urls(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|c| format!("redis+cluster://127.0.0.1:{}", c.node(0).port()))
            .collect()
    }

    /// The member's first master.
    fn admin_url(&self, i: usize) -> String {
        let first = self.masters(i).first().copied().unwrap_or(0);
        self.members[i].node(first).url()
    }

    fn supports(&self, fault: &Fault) -> bool {
        *fault == Fault::Failover
    }

    /// `CLUSTER FAILOVER FORCE` on a replica of each master of member `i`, one after the
    /// other: whichever shard serves the run's resource, its master changes.
    fn inject(&mut self, i: usize, fault: &Fault) {
        assert_eq!(*fault, Fault::Failover, "Cluster members only fail over");
        for master in self.masters(i) {
            let replica = self.members[i].replicas_of(master)[0];
            self.members[i].force_failover(replica);
        }
    }

    /// Nothing to wait for: a forced failover returns once the old master follows the new
    /// one.
    fn heal(&mut self, _: usize, _: &Fault) {}
}
