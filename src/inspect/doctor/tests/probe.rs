//! Tests of what the probe makes of a node's answers: `INFO` and the clock estimate.

use super::*;

#[test]
fn offset_estimate_assumes_the_midpoint() {
    // Sent at t = 1_000_000 µs, 400 µs round trip, server said 1_000_200: in sync.
    let c = estimate_offset(1_000_000, Duration::from_micros(400), 1_000_200);
    assert_eq!(c.offset_micros, 0);
    assert_eq!(c.uncertainty, Duration::from_micros(200));
    assert_eq!(c.rtt, Duration::from_micros(400));
    assert_eq!(c.excess(), Duration::ZERO);
    // Server 5 s ahead.
    let c = estimate_offset(1_000_000, Duration::from_micros(400), 6_000_200);
    assert_eq!(c.offset_micros, 5_000_000);
    assert_eq!(c.excess(), Duration::from_micros(4_999_800));
    // Server behind, and before the epoch.
    let c = estimate_offset(1_000_000, Duration::from_millis(10), -4_000_000);
    assert_eq!(c.offset_micros, -5_005_000);
    assert_eq!(c.excess(), Duration::from_micros(5_000_000));
    // Absurd values saturate instead of wrapping.
    let c = estimate_offset(0, Duration::ZERO, i128::MAX);
    assert_eq!(c.offset_micros, i64::MAX);
    let c = estimate_offset(0, Duration::ZERO, i128::MIN / 2);
    assert_eq!(c.offset_micros, i64::MIN);
    assert_eq!(c.excess(), Duration::from_micros(i64::MIN.unsigned_abs()));
}

#[test]
fn info_parsing() {
    let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n\r\n\
                # Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:6380\r\n\
                master_replid:r1\r\n# Persistence\r\naof_enabled:1\r\n# Memory\r\n\
                maxmemory:1048576\r\nmaxmemory_policy:allkeys-lru\r\n# Cluster\r\n\
                cluster_enabled:0\r\n";
    let mut info = NodeInfo::new("x:1");
    apply_info(&mut info, &info::parse(text));
    assert_eq!(info.redis_version.as_deref(), Some("7.0.15"));
    assert_eq!(info.run_id.as_deref(), Some("abc"));
    assert_eq!(info.uptime, Some(Duration::from_secs(42)));
    assert!(info.is_replica());
    assert_eq!(info.master_host.as_deref(), Some("127.0.0.1"));
    assert_eq!(info.master_port, Some(6380));
    assert_eq!(info.master_replid.as_deref(), Some("r1"));
    assert_eq!(info.appendonly, Some(true));
    assert_eq!(info.maxmemory, Some(1 << 20));
    assert_eq!(info.maxmemory_policy.as_deref(), Some("allkeys-lru"));
    assert_eq!(info.cluster_enabled, Some(false));
}

#[test]
fn valkey_info_fills_kind_and_own_version() {
    let text = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.1.2\r\n\
                run_id:5415bfbb56f0c8955bbdbabf514e6e0b8a3230e8\r\nuptime_in_seconds:5\r\n";
    let mut node = NodeInfo::new("x:1");
    apply_info(&mut node, &info::parse(text));
    assert_eq!(node.redis_version.as_deref(), Some("7.2.4"));
    assert_eq!(node.server_kind, Some(ServerKind::Valkey));
    assert_eq!(node.server_version.as_deref(), Some("9.1.2"));
    assert_eq!(node.uptime, Some(Duration::from_secs(5)));
}
