//! The node URL of a member that is a master under Redis Sentinel:
//! `redis+sentinel://[user:password@]host:port[,host:port…]/service[/db]`.
//!
//! The sentinels are listed in the authority, the monitored master's name (Sentinel's
//! "service") is the first path segment, and an optional database number follows it. The
//! credentials are the master's (the sentinels are asked without any). Parsing, and the
//! member's clients (made, not connected); the member itself is `net::sentinel`.

use redis::io::tcp::TcpSettings;
use redis::{Client, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo};

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
        url.get(..SENTINEL_SCHEME.len())
            .is_some_and(|s| s.eq_ignore_ascii_case(SENTINEL_SCHEME))
    }

    /// Parses a `redis+sentinel://` URL; the error says what is wrong with it.
    pub(crate) fn parse(url: &str) -> Result<SentinelUrl, String> {
        let rest = url
            .get(SENTINEL_SCHEME.len()..)
            .filter(|_| Self::is_sentinel(url))
            .ok_or("it does not start with redis+sentinel://")?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (username, password) = credentials(userinfo)?;
        let sentinels = hosts
            .split(',')
            .map(|h| host_port(h, SENTINEL_PORT, "sentinel"))
            .collect::<Result<Vec<_>, _>>()?;
        let mut segments = path.split('/');
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
            sentinels,
            service,
            username,
            password,
            db,
        })
    }

    /// The member's display name, without credentials: `sentinel:<service>@<sentinels>`,
    /// with `/<db>` when not 0. Two URLs of one member (the same sentinels, in any order,
    /// and service) have one name.
    pub(crate) fn name(&self) -> String {
        let mut hosts: Vec<String> = (self.sentinels.iter())
            .map(|(h, p)| format!("{h}:{p}"))
            .collect();
        hosts.sort();
        let db = if self.db == 0 {
            String::new()
        } else {
            format!("/{}", self.db)
        };
        format!("sentinel:{}@{}{db}", self.service, hosts.join(","))
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
    let mut settings = RedisConnectionInfo::default().set_db(url.db);
    if let Some(user) = &url.username {
        settings = settings.set_username(user);
    }
    if let Some(password) = &url.password {
        settings = settings.set_password(password);
    }
    let template = (info("0.0.0.0", 0))
        .map_err(|e| format!("the master's settings are unusable: {e}"))?
        .set_redis_settings(settings);
    Ok(SentinelMaster::new(url.service, sentinels, template))
}

/// The user name and password of the URL's user information, percent-decoded.
pub(super) fn credentials(
    userinfo: Option<&str>,
) -> Result<(Option<String>, Option<String>), String> {
    let Some(userinfo) = userinfo else {
        return Ok((None, None));
    };
    let (user, password) = match userinfo.split_once(':') {
        Some((user, password)) => (user, Some(decode(password)?)),
        None => (userinfo, None),
    };
    let user = Some(decode(user)?).filter(|u| !u.is_empty());
    Ok((user, password))
}

/// One `host[:port]` of a member URL's list of servers (`what`, in errors), the port
/// `default_port` when none is given; `[v6]:port` for IPv6 addresses.
pub(super) fn host_port(
    text: &str,
    default_port: u16,
    what: &str,
) -> Result<(String, u16), String> {
    let (host, port) = match text.strip_prefix('[') {
        Some(v6) => {
            let (host, rest) = v6
                .split_once(']')
                .ok_or_else(|| format!("{what} {text:?} has no closing ]"))?;
            (host, rest.strip_prefix(':'))
        }
        None => match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        },
    };
    if host.is_empty() {
        return Err(format!("{what} {text:?} has no host"));
    }
    let port = match port {
        None => default_port,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("{what} {text:?} has no valid port"))?,
    };
    Ok((host.to_ascii_lowercase(), port))
}

/// `text` with its `%XX` escapes decoded.
pub(super) fn decode(text: &str) -> Result<String, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        let hex = text
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .ok_or_else(|| format!("bad percent escape in {text:?}"))?;
        out.push(hex);
        i += 3;
    }
    String::from_utf8(out).map_err(|_| format!("{text:?} is not UTF-8 once decoded"))
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
