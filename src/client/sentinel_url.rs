//! The node URL of a member that is a master under Redis Sentinel:
//! `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]`.
//!
//! The sentinels are listed in the authority, the monitored master's name (Sentinel's
//! "service") is the first path segment, and an optional database number follows it. The
//! credentials are the master's (the sentinels are asked without any). Parsing, and the
//! member's clients (made, not connected); the member itself is `net::sentinel`.

use redis::io::tcp::TcpSettings;
use redis::{Client, ConnectionAddr, IntoConnectionInfo};

use crate::client::member_url::{MemberUrl, decode, has_scheme, server_settings};

use crate::net::sentinel::SentinelMaster;

/// A Sentinel member as its URL gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    /// Each sentinel's `(host, port)`, in the order given, hosts in lower case.
    pub(crate) sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the master under.
    pub(crate) service: String,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: i64,
}

/// The scheme that marks a Sentinel member.
pub(crate) const SENTINEL_SCHEME: &str = "redis+sentinel://";

/// The port a sentinel listens on when the URL names none.
const SENTINEL_PORT: u16 = 26379;

impl SentinelUrl {
    /// Whether `url` names a Sentinel member (and should be parsed here).
    pub(crate) fn is_sentinel(url: &str) -> bool {
        has_scheme(url, SENTINEL_SCHEME)
    }

    /// Parses a `redis+sentinel://` URL; the error says what is wrong with it.
    pub(crate) fn parse(url: &str) -> Result<SentinelUrl, String> {
        let parts = MemberUrl::parse(url, SENTINEL_SCHEME, SENTINEL_PORT, "sentinel")?;
        let mut segments = parts.path.split('/');
        let service = decode(segments.next().unwrap_or_default())?;
        if service.is_empty() {
            return Err("it names no service: add /<master name> after the sentinels".into());
        }
        let db = match segments.next() {
            None | Some("") => 0,
            Some(db) => db
                .parse::<i64>()
                .ok()
                .filter(|d| *d >= 0)
                .ok_or_else(|| format!("database {db:?} is not a number"))?,
        };
        if segments.next().is_some_and(|s| !s.is_empty()) {
            return Err("its path has more than /<service>/<db>".into());
        }
        Ok(SentinelUrl {
            sentinels: parts.hosts,
            service,
            username: parts.username,
            password: parts.password,
            db,
        })
    }

    /// The member's display name, without credentials: `sentinel:<service>@<sentinels>`,
    /// with `/<db>` when not 0. Two URLs of one member (the same sentinels, in any order,
    /// and service) have one name.
    pub(crate) fn name(&self) -> String {
        let db = if self.db == 0 {
            String::new()
        } else {
            format!("/{}", self.db)
        };
        let hosts = MemberUrl::sorted_hosts(&self.sentinels);
        format!("sentinel:{}@{hosts}{db}", self.service)
    }
}

/// The member a parsed URL describes: clients for its sentinels and its master's
/// connection settings, with `tcp` (the builder's TCP settings) on every connection.
///
/// # Errors
///
/// A sentinel address the driver cannot use.
pub(crate) fn sentinel_member(
    url: SentinelUrl,
    tcp: TcpSettings,
) -> Result<SentinelMaster, String> {
    let info = |host: &str, port: u16| {
        ConnectionAddr::Tcp(host.to_owned(), port)
            .into_connection_info()
            .map(|i| i.set_tcp_settings(tcp.clone()))
    };
    let sentinels = (url.sentinels.iter())
        .map(|(host, port)| info(host, *port).and_then(Client::open))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("a sentinel address is unusable: {e}"))?;
    let settings = server_settings(url.username.as_deref(), url.password.as_deref(), url.db);
    let template = (info("0.0.0.0", 0))
        .map_err(|e| format!("the master's settings are unusable: {e}"))?
        .set_redis_settings(settings);
    Ok(SentinelMaster::new(url.service, sentinels, template))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_url_and_a_short_one() {
        let full =
            SentinelUrl::parse("redis+sentinel://app:p%40ss@S1:26380,s2,[::1]:7/cache/3").unwrap();
        assert_eq!(
            full,
            SentinelUrl {
                sentinels: vec![
                    ("s1".into(), 26380),
                    ("s2".into(), 26379),
                    ("::1".into(), 7)
                ],
                service: "cache".into(),
                username: Some("app".into()),
                password: Some("p@ss".into()),
                db: 3,
            }
        );
        assert_eq!(full.name(), "sentinel:cache@::1:7,s1:26380,s2:26379/3");
        let short = SentinelUrl::parse("REDIS+SENTINEL://h:1/m").unwrap();
        assert_eq!(short.name(), "sentinel:m@h:1");
        assert_eq!((short.username, short.password, short.db), (None, None, 0));
        let password_only = SentinelUrl::parse("redis+sentinel://:pw@h:1/m").unwrap();
        assert_eq!(
            (password_only.username, password_only.password),
            (None, Some("pw".into()))
        );
    }

    #[test]
    fn the_same_sentinels_in_another_order_are_one_member() {
        let a = SentinelUrl::parse("redis+sentinel://a:1,b:2/m").unwrap();
        let b = SentinelUrl::parse("redis+sentinel://b:2,a:1/m").unwrap();
        assert_eq!(a.name(), b.name());
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        let cases = [
            ("redis://h:1/m", "does not start"),
            ("redis+sentinel://h:1", "names no service"),
            ("redis+sentinel://h:1/", "names no service"),
            ("redis+sentinel://h:x/m", "no valid port"),
            ("redis+sentinel://h:0/m", "no valid port"),
            ("redis+sentinel://h:1,/m", "has no host"),
            ("redis+sentinel://[::1/m", "no closing ]"),
            ("redis+sentinel://h:1/m/x", "not a number"),
            ("redis+sentinel://h:1/m/-1", "not a number"),
            ("redis+sentinel://h:1/m/1/2", "more than"),
            ("redis+sentinel://u:%zz@h:1/m", "bad percent escape"),
        ];
        for (url, says) in cases {
            let err = SentinelUrl::parse(url).unwrap_err();
            assert!(err.contains(says), "{url}: {err}");
        }
    }
}
