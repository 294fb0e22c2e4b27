//! The node URL of a member that is a whole Redis Cluster:
//! `redis+cluster://[user:password@]host:port[,host:port…][/]`.
//!
//! The authority lists seed servers of the cluster (any of its nodes; the member learns
//! the rest from them), the credentials are every shard's. A Cluster has database 0 only,
//! so the URL has no path. Parsing, and the member itself (made, not connected); the
//! member's slot table and shards are `net::cluster`.

use redis::io::tcp::TcpSettings;
use redis::{ConnectionAddr, IntoConnectionInfo};

use crate::client::member_url::{MemberUrl, has_scheme, server_settings};
use crate::net::cluster::ClusterMember;
use crate::net::coalesce::Yield;
use crate::net::replica_acks::ReplicaAcks;

/// A Cluster member as its URL gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterUrl {
    /// Each seed's `(host, port)`, in the order given, hosts in lower case.
    pub(crate) seeds: Vec<(String, u16)>,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
}

/// The scheme that marks a Cluster member.
pub(crate) const CLUSTER_SCHEME: &str = "redis+cluster://";

/// The port a seed listens on when the URL names none.
const REDIS_PORT: u16 = 6379;

impl ClusterUrl {
    /// Whether `url` names a Cluster member (and should be parsed here).
    pub(crate) fn is_cluster(url: &str) -> bool {
        has_scheme(url, CLUSTER_SCHEME)
    }

    /// Parses a `redis+cluster://` URL; the error says what is wrong with it.
    pub(crate) fn parse(url: &str) -> Result<ClusterUrl, String> {
        let parts = MemberUrl::parse(url, CLUSTER_SCHEME, REDIS_PORT, "seed")?;
        if !parts.path.is_empty() {
            return Err(format!(
                "it has a path ({:?}): a Redis Cluster has database 0 only",
                parts.path
            ));
        }
        Ok(ClusterUrl {
            seeds: parts.hosts,
            username: parts.username,
            password: parts.password,
        })
    }

    /// The member's display name, without credentials: `cluster:<seeds>`, the seeds
    /// sorted, so that two URLs listing the same seeds in any order have one name.
    pub(crate) fn name(&self) -> String {
        format!("cluster:{}", MemberUrl::sorted_hosts(&self.seeds))
    }
}

/// The member a parsed URL describes, with `tcp` (the builder's TCP settings) on every
/// connection.
///
/// # Errors
///
/// Settings the driver cannot use.
pub(crate) fn cluster_member(
    url: ClusterUrl,
    tcp: TcpSettings,
    connect_timeout: std::time::Duration,
    coalescing: Yield,
    key_prefix: std::sync::Arc<str>,
    replica_acks: Option<ReplicaAcks>,
) -> Result<std::sync::Arc<ClusterMember>, String> {
    let settings = server_settings(url.username.as_deref(), url.password.as_deref(), 0);
    let template = ConnectionAddr::Tcp("0.0.0.0".to_owned(), 0)
        .into_connection_info()
        .map_err(|e| format!("the shards' settings are unusable: {e}"))?
        .set_tcp_settings(tcp)
        .set_redis_settings(settings);
    let name = url.name();
    Ok(ClusterMember::new(
        name,
        url.seeds,
        template,
        connect_timeout,
        coalescing,
        key_prefix,
        replica_acks,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_url_and_a_short_one() {
        let full = ClusterUrl::parse("redis+cluster://app:p%40ss@H1:7000,h2,[::1]:7002").unwrap();
        assert_eq!(
            full,
            ClusterUrl {
                seeds: vec![
                    ("h1".into(), 7000),
                    ("h2".into(), 6379),
                    ("::1".into(), 7002)
                ],
                username: Some("app".into()),
                password: Some("p@ss".into()),
            }
        );
        assert_eq!(full.name(), "cluster:::1:7002,h1:7000,h2:6379");
        let short = ClusterUrl::parse("REDIS+CLUSTER://127.0.0.1:7000/").unwrap();
        assert_eq!(short.seeds, vec![("127.0.0.1".into(), 7000)]);
        assert_eq!(short.username, None);
    }

    #[test]
    fn malformed_urls_say_what_is_wrong() {
        for (url, says) in [
            ("redis://h:1", "does not start with redis+cluster://"),
            ("redis+cluster://", "has no host"),
            ("redis+cluster://h:1,", "has no host"),
            ("redis+cluster://h:0", "no valid port"),
            ("redis+cluster://h:x", "no valid port"),
            ("redis+cluster://h:1/3", "database 0 only"),
            ("redis+cluster://[::1:7000", "no closing ]"),
            ("redis+cluster://u:%zz@h:1", "bad percent escape"),
        ] {
            let err = ClusterUrl::parse(url).unwrap_err();
            assert!(err.contains(says), "{url}: {err}");
        }
        assert!(ClusterUrl::is_cluster("Redis+Cluster://h"));
        assert!(!ClusterUrl::is_cluster("redis+sentinel://h/s"));
    }
}
