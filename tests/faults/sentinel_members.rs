//! Members under Redis Sentinel as the nodes under test: each member a master with two
//! replicas and three sentinels of its own, reached by a `redis+sentinel://` URL, and
//! [`Fault::Failover`] its fault.

use crate::common::topology::SentinelTopology;

use super::ensemble::{Ensemble, Fault};

/// `n` members, each under Sentinel.
pub struct SentinelMembers {
    members: Vec<SentinelTopology>,
}

impl SentinelMembers {
    pub fn start(n: usize) -> SentinelMembers {
        SentinelMembers {
            members: (0..n).map(|_| SentinelTopology::start(2, 3)).collect(),
        }
    }
}

impl Ensemble for SentinelMembers {
    fn size(&self) -> usize {
        self.members.len()
    }

    fn client_urls(&self) -> Vec<String> {
        self.members
            .iter()
            .map(SentinelTopology::member_url)
            .collect()
    }

    /// The member's current master.
    fn admin_url(&self, i: usize) -> String {
        format!("redis://{}", self.members[i].master_addr())
    }

    fn supports(&self, fault: &Fault) -> bool {
        *fault == Fault::Failover
    }

    fn inject(&mut self, i: usize, fault: &Fault) {
        assert_eq!(
            *fault,
            Fault::Failover,
            "members under Sentinel only fail over"
        );
        self.members[i].failover();
    }

    fn heal(&mut self, i: usize, _: &Fault) {
        self.members[i].wait_replicated();
    }
}
