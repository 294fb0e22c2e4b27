//! Tests of the topology and timing findings.

use super::*;

#[test]
fn healthy_odd_sets_have_no_findings() {
    for n in [3, 5, 7] {
        assert_eq!(kinds(&set(n), &limits()), vec![], "n = {n}");
    }
}

#[test]
fn node_counts() {
    assert_eq!(kinds(&set(1), &limits()), vec![(K::SingleNode, I, None)]);
    assert_eq!(kinds(&set(2), &limits()), vec![(K::TooFewNodes, W, None)]);
    assert_eq!(kinds(&set(4), &limits()), vec![(K::EvenNodeCount, W, None)]);
    assert_eq!(kinds(&set(6), &limits()), vec![(K::EvenNodeCount, W, None)]);
    let f = findings(&set(4), 3, &limits());
    assert!(
        f[0].message.contains("tolerate 1 failures"),
        "{}",
        f[0].message
    );
    assert!(f[0].fix.contains("use 3 or 5"), "{}", f[0].fix);
}

#[test]
fn unreachable_is_an_error_only_below_quorum() {
    let mut infos = set(3);
    infos[1] = NodeInfo {
        error: Some("connection refused".into()),
        ..NodeInfo::new("10.0.0.1:6379")
    };
    assert_eq!(kinds(&infos, &limits()), vec![(K::Unreachable, W, node(1))]);
    infos[2] = NodeInfo::new("10.0.0.2:6379");
    assert_eq!(
        kinds(&infos, &limits()),
        vec![(K::Unreachable, E, node(1)), (K::Unreachable, E, node(2))]
    );
    let f = findings(&infos, 2, &limits());
    assert!(
        f[0].message.contains("connection refused"),
        "{}",
        f[0].message
    );
    assert!(f[1].message.contains("no answer"), "{}", f[1].message);
}

#[test]
fn same_run_id_is_a_duplicate() {
    let mut infos = set(3);
    infos[2].run_id = infos[0].run_id.clone();
    infos[2].master_replid = infos[0].master_replid.clone();
    // Reported once, as a duplicate, not also as replication.
    assert_eq!(
        kinds(&infos, &limits()),
        vec![(K::DuplicateServer, E, node(2))]
    );
    // An unreachable entry cannot be compared.
    infos[2].reachable = false;
    assert_eq!(kinds(&infos, &limits()), vec![(K::Unreachable, W, node(2))]);
}

#[test]
fn replication_between_listed_nodes() {
    // 1 replicates 0 by address (before it has synchronised: its own replid).
    let mut infos = set(3);
    infos[1].role = Some("slave".into());
    infos[1].master_host = Some("10.0.0.0".into());
    infos[1].master_port = Some(6379);
    assert_eq!(kinds(&infos, &limits()), vec![(K::Replicated, E, node(1))]);
    // Listed first, the replica is still the one named.
    infos.swap(0, 1);
    assert_eq!(kinds(&infos, &limits()), vec![(K::Replicated, E, node(1))]);
    // Same replication ID without an address match (master listed by another name).
    let mut infos = set(3);
    infos[2].master_replid = infos[0].master_replid.clone();
    assert_eq!(kinds(&infos, &limits()), vec![(K::Replicated, E, node(2))]);
    // A replica of an unlisted master.
    let mut infos = set(3);
    infos[0].role = Some("slave".into());
    infos[0].master_host = Some("10.9.9.9".into());
    infos[0].master_port = Some(6379);
    assert_eq!(kinds(&infos, &limits()), vec![(K::Replica, W, node(0))]);
    // A node listed with a db number still matches its replica's master address.
    let mut infos = set(3);
    infos[0].name = "10.0.0.0:6379/2".into();
    infos[1].role = Some("slave".into());
    infos[1].master_host = Some("10.0.0.0".into());
    infos[1].master_port = Some(6379);
    assert_eq!(kinds(&infos, &limits()), vec![(K::Replicated, E, node(1))]);
}

#[test]
fn cluster_mode_and_eviction() {
    let mut infos = set(3);
    infos[0].cluster_enabled = Some(true);
    infos[1].maxmemory = Some(100 << 20);
    infos[1].maxmemory_policy = Some("allkeys-lru".into());
    infos[2].maxmemory_policy = Some("volatile-ttl".into()); // no limit: no eviction
    assert_eq!(
        kinds(&infos, &limits()),
        vec![(K::ClusterMode, W, node(0)), (K::Eviction, W, node(1))]
    );
}

/// A shard of a Cluster member: its master, the replicas its `INFO replication` lists, each
/// `lag_s` seconds behind.
fn shard(master: &str, replicas: &[&str], lag_s: u64) -> ClusterShard {
    let lines: String = (replicas.iter().enumerate())
        .map(|(i, r)| {
            let (ip, port) = r.split_once(':').unwrap();
            format!("slave{i}:ip={ip},port={port},state=online,offset=1,lag={lag_s}\r\n")
        })
        .collect();
    let info = format!(
        "role:master\r\nconnected_slaves:{}\r\n{lines}",
        replicas.len()
    );
    ClusterShard::from_info(master.into(), Some(&info))
}

/// A Cluster listed as one member is no `cluster_mode` warning, nor a failover risk for
/// its seed's replicas; a Cluster whose shard another member names is one failure domain
/// voting twice, and one whose shard replica another member names is one replication
/// group; a shard replica lagging past the TTL is flagged, shard by shard.
#[test]
fn a_cluster_member_and_a_shard_shared_with_another_member() {
    let mut infos = set(3);
    infos[2].name = "cluster:10.0.0.7:7000".into();
    infos[2].cluster_enabled = Some(true);
    infos[2].replicas = Some(1);
    infos[2].cluster_shards = vec![
        shard("10.0.0.7:7000", &["10.0.0.7:7001"], 0),
        shard("10.0.0.8:7000", &["10.0.0.8:7001"], 0),
    ];
    assert_eq!(kinds(&infos, &limits()), vec![]);
    let shards = infos[2].cluster_shards.clone();
    infos[1].name = "10.0.0.8:7000".into();
    assert_eq!(
        kinds(&infos, &limits()),
        vec![(K::DuplicateServer, E, Some("cluster:10.0.0.7:7000".into()))]
    );
    infos[1].name = "cluster:10.0.0.9:7000".into();
    infos[1].cluster_shards = vec![shard("10.0.0.8:7000", &[], 0)];
    assert_eq!(
        kinds(&infos, &limits()),
        vec![(K::DuplicateServer, E, Some("cluster:10.0.0.7:7000".into()))]
    );
    // A plain member that is a shard's replica.
    infos[1] = healthy(1);
    infos[1].name = "10.0.0.8:7001".into();
    assert_eq!(
        kinds(&infos, &limits()),
        vec![(K::Replicated, E, Some("cluster:10.0.0.7:7000".into()))]
    );
    // One shard's replica 40 s behind, past the 30 s TTL.
    infos[1] = healthy(1);
    infos[2].cluster_shards = vec![
        shards[0].clone(),
        shard("10.0.0.8:7000", &["10.0.0.8:7001"], 40),
    ];
    assert_eq!(
        kinds(&infos, &limits()),
        vec![(K::ReplicationLag, W, Some("cluster:10.0.0.7:7000".into()))]
    );
}

#[test]
fn incomplete_when_info_refused() {
    let mut infos = set(3);
    infos[0] = NodeInfo {
        reachable: true,
        error: Some("INFO refused: NOPERM".into()),
        ..NodeInfo::new("10.0.0.0:6379")
    };
    assert_eq!(kinds(&infos, &limits()), vec![(K::Incomplete, I, node(0))]);
}

#[test]
fn ttl_budget() {
    let with = |ttl, timeout| Limits {
        ttl: MS(ttl),
        drift_factor: 0.01,
        node_timeout: MS(timeout),
    };
    assert_eq!(kinds(&set(3), &with(30_000, 50)), vec![]);
    // 120 ms - 100 ms - 3.2 ms = 16.8 ms, under half.
    assert_eq!(
        kinds(&set(3), &with(120, 100)),
        vec![(K::TtlBudget, W, None)]
    );
    // Exactly used up: no validity at all.
    assert_eq!(
        kinds(&set(3), &with(100, 98)),
        vec![(K::TtlBudget, E, None)]
    );
    // Half of 210 ms is 105 ms; 210 - 100 - 4.1 = 105.9 ms: fine.
    assert_eq!(kinds(&set(3), &with(210, 100)), vec![]);
    let f = findings(&set(3), 2, &with(120, 100));
    // (100 + 2) / 0.49 = 208.2 ms.
    assert!(f[0].fix.contains("at least 209 ms"), "{}", f[0].fix);
    let odd = Limits {
        drift_factor: 0.6,
        ..with(1_000, 10)
    };
    assert!(suggest_ttl(&odd).contains("lower drift_factor"));
}

#[test]
fn clock_skew_against_drift_and_ttl() {
    // Default TTL 30 s: drift allowance 302 ms.
    let cases = [
        (0, 1_000, None),
        (301_000, 1_000, None),
        (302_500, 1_000, None), // within the allowance once the uncertainty is counted
        (-303_500, 1_000, Some(W)),
        (5_000_000, 1_000, Some(W)),
        (30_000_000, 1_000, Some(W)),
        (-31_000_000, 1_000, Some(E)),
        (31_000_000, 2_000_000, Some(W)),
    ];
    for (offset, uncertainty_us, expected) in cases {
        let mut infos = set(3);
        infos[0].clock = Some(ClockOffset {
            offset_micros: offset,
            uncertainty: Duration::from_micros(uncertainty_us),
            rtt: Duration::from_micros(2 * uncertainty_us),
        });
        let expected: Vec<_> = expected
            .into_iter()
            .map(|s| (K::ClockSkew, s, node(0)))
            .collect();
        assert_eq!(kinds(&infos, &limits()), expected, "offset {offset} µs");
    }
}

#[test]
fn findings_sorted_by_severity() {
    let mut infos = set(4);
    infos[0].appendfsync = Some("everysec".into());
    infos[3].run_id = infos[2].run_id.clone();
    let got = kinds(&infos, &limits());
    assert_eq!(
        got,
        vec![
            (K::DuplicateServer, E, node(3)),
            (K::EvenNodeCount, W, None),
            (K::WeakFsync, I, node(0)),
        ]
    );
}
