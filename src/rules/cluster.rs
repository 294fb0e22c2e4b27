//! The rules of a member that is a Redis Cluster, pure so that `tests/model_cluster.rs`
//! checks the decisions `net::cluster` and `net::node` make: from when a promoted shard
//! master is quarantined.

use std::time::{Duration, Instant};

/// When a promoted shard master learnt at `learnt` starts its new life for restart
/// quarantine: `node_timeout` (the cluster's `cluster-node-timeout`) later. Until the old
/// master learns of the promotion it may still accept a lock, and it learns within the
/// cluster's node timeout: a master cut off from the majority of masters refuses writes
/// after it, and one that is not cut off hears of the new configuration sooner.
pub fn promoted_shard_life_start(learnt: Instant, node_timeout: Duration) -> Instant {
    learnt.checked_add(node_timeout).unwrap_or(learnt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_promoted_shard_starts_its_life_a_node_timeout_after_it_is_learnt() {
        let at = Instant::now();
        let timeout = Duration::from_millis(1500);
        assert_eq!(promoted_shard_life_start(at, timeout), at + timeout);
        assert_eq!(promoted_shard_life_start(at, Duration::ZERO), at);
    }
}
