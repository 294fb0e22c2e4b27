//! The shape both member URLs share, `<scheme>[user:password@]host:port[,host:port…][/path]`:
//! a comma-separated list of servers in the authority (sentinels, or a cluster's seeds),
//! percent-encoded credentials, and a path each member type reads its own way.

use redis::RedisConnectionInfo;

/// A member URL taken apart, its path left to the member type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MemberUrl<'a> {
    /// Each server's `(host, port)`, in the order given, hosts in lower case.
    pub(super) hosts: Vec<(String, u16)>,
    pub(super) username: Option<String>,
    pub(super) password: Option<String>,
    /// Everything after the authority's `/`, not decoded ("" when there is none).
    pub(super) path: &'a str,
}

/// Whether `url` starts with `scheme` (`redis+sentinel://`), in any case.
pub(super) fn has_scheme(url: &str, scheme: &str) -> bool {
    url.get(..scheme.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
}

impl<'a> MemberUrl<'a> {
    /// Takes `url` apart: its scheme must be `scheme`; a server without a port listens on
    /// `default_port`; `what` names a server in errors ("sentinel", "seed").
    pub(super) fn parse(
        url: &'a str,
        scheme: &str,
        default_port: u16,
        what: &str,
    ) -> Result<MemberUrl<'a>, String> {
        let rest = url
            .get(scheme.len()..)
            .filter(|_| has_scheme(url, scheme))
            .ok_or_else(|| format!("it does not start with {scheme}"))?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let (username, password) = credentials(userinfo)?;
        let hosts = hosts
            .split(',')
            .map(|h| host_port(h, default_port, what))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(MemberUrl {
            hosts,
            username,
            password,
            path,
        })
    }

    /// The servers as `host:port`, sorted, so that two URLs listing the same servers in
    /// any order name one member.
    pub(super) fn sorted_hosts(hosts: &[(String, u16)]) -> String {
        let mut shown: Vec<String> = hosts.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        shown.sort();
        shown.join(",")
    }
}

/// The connection settings of a member's servers: its credentials and database `db`.
pub(super) fn server_settings(
    username: Option<&str>,
    password: Option<&str>,
    db: i64,
) -> RedisConnectionInfo {
    let mut settings = RedisConnectionInfo::default().set_db(db);
    if let Some(user) = username {
        settings = settings.set_username(user);
    }
    if let Some(password) = password {
        settings = settings.set_password(password);
    }
    settings
}

/// The user name and password of the URL's user information, percent-decoded.
fn credentials(userinfo: Option<&str>) -> Result<(Option<String>, Option<String>), String> {
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
fn host_port(text: &str, default_port: u16, what: &str) -> Result<(String, u16), String> {
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
