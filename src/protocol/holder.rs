//! The value a lock key holds: the random token, then a short description of the holder
//! for operators (`quorum-lock status`). Pure: the caller supplies the host, process id,
//! program and time.
//!
//! Version 1 of the format, one string with no spaces:
//!
//! ```text
//! <token>;q1;t=<unix ms>[;h=<host>][;p=<pid>][;n=<program>]
//! ```
//!
//! `<token>` is the 32 hex digits of the random token; `q1` names the format;
//! `t` is when the attempt that set the key started (the holder's wall clock). Field values
//! are escaped: every byte outside `[A-Za-z0-9._-]` is written `%XX`, so a value never holds
//! `;`, `=`, `:` (a release's wake-up message is `<value>:<key>` and is split at the first
//! `:`) or a space. Host and program are cut to [`MAX_FIELD`] characters before escaping.
//!
//! Safety does not depend on any of this: every compare (release, extension, fencing
//! commit, the native `DELIFEQ`/`SET IFEQ`) is against the whole stored value, which the
//! guard keeps; the description only makes the value longer. A value in any other form
//! (a redis-py or redsync token, a later version) is read as a bare token.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// The tag after the token that names version 1 of the format.
const VERSION: &str = "q1";

/// The most characters of a host or program name kept in the value.
pub(crate) const MAX_FIELD: usize = 40;

/// Who holds a lock, as read back from the value of its key (see
/// [`LockStatus::holder`](crate::LockStatus::holder)).
///
/// A value written by this library (or its CLI) carries the host, process id, program and
/// the time the holder started to acquire it, unless the holder's client was built with
/// [`holder_info(false)`](crate::RedlockBuilder::holder_info) (then only the time). A value
/// written by another client (redis-py, redsync, a plain `SET`) is kept whole as the
/// [`token`](Self::token), and everything else is `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The random token (32 hex digits) of a value from this library; the whole value of
    /// any other.
    pub token: String,
    /// The holder's host name.
    pub host: Option<String>,
    /// The holder's process id.
    pub pid: Option<u32>,
    /// The holder's program: the executable's file name, or what the client was built
    /// with ([`holder_program`](crate::RedlockBuilder::holder_program)); the CLI gives
    /// the command it runs.
    pub program: Option<String>,
    /// When the holder started the attempt that acquired the lock, by the holder's clock
    /// (an extension keeps it).
    pub since: Option<SystemTime>,
}

impl HolderInfo {
    /// Reads a lock key's value. Never fails: anything not in this library's format is a
    /// bare token.
    pub fn parse(value: &str) -> HolderInfo {
        let bare = || HolderInfo {
            token: value.to_owned(),
            host: None,
            pid: None,
            program: None,
            since: None,
        };
        let mut parts = value.split(';');
        let (Some(token), Some(VERSION)) = (parts.next(), parts.next()) else {
            return bare();
        };
        if token.is_empty() {
            return bare();
        }
        let mut info = HolderInfo {
            token: token.to_owned(),
            ..bare()
        };
        for field in parts {
            let Some((name, raw)) = field.split_once('=') else {
                continue;
            };
            // A malformed field is left out; the rest still tells who holds the lock.
            let Some(text) = unescape(raw) else {
                continue;
            };
            match name {
                "h" => info.host = Some(text),
                "p" => info.pid = text.parse().ok(),
                "n" => info.program = Some(text),
                "t" => {
                    info.since = (text.parse().ok()).and_then(|ms| {
                        SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(ms))
                    })
                }
                // Fields of a later minor addition are skipped.
                _ => {}
            }
        }
        info
    }

    /// Whether the lock is held by the readers of the read-write lock of its name (the
    /// value is their mark, not a holder's token): `status --shared` lists them.
    pub fn is_readers(&self) -> bool {
        self.token == super::rw_scripts::SHARED
    }

    /// Whether the lock is held by the permit holders of the semaphore of its name (the
    /// value is their mark, not a holder's token).
    pub fn is_permits(&self) -> bool {
        self.token == super::permit_scripts::PERMITS_MARK
    }

    /// Whether `value` is one this library writes for a holder (version 1 of the format),
    /// not a mark, a counter or another client's token.
    pub(crate) fn is_own_value(value: &str) -> bool {
        let mut parts = value.split(';');
        matches!((parts.next(), parts.next()), (Some(token), Some(VERSION)) if !token.is_empty())
    }

    /// Whether the value carried this library's description (version 1).
    pub fn is_described(&self) -> bool {
        self.since.is_some() || self.host.is_some() || self.pid.is_some()
    }
}

/// The part of the value that is the same for every lock of one client: `;h=..;p=..;n=..`
/// with each field present only when given (empty when none is).
pub(crate) fn describe(host: Option<&str>, pid: Option<u32>, program: Option<&str>) -> String {
    let mut out = String::new();
    if let Some(host) = host.filter(|h| !h.is_empty()) {
        out.push_str(";h=");
        escape_into(&mut out, cut(host));
    }
    if let Some(pid) = pid {
        let _ = write!(out, ";p={pid}");
    }
    if let Some(program) = program.filter(|p| !p.is_empty()) {
        out.push_str(";n=");
        escape_into(&mut out, cut(program));
    }
    out
}

/// The value to store: `token`, the version, the start time `since_ms` (Unix ms) and the
/// client's fixed description from [`describe`].
pub(crate) fn value(token: &str, since_ms: u64, described: &str) -> String {
    // Made once per attempt: pieces pushed in place of `write!`, whose formatting machinery
    // cost about as much as the rest of the value.
    let mut out = String::with_capacity(token.len() + 26 + described.len());
    out.push_str(token);
    out.push(';');
    out.push_str(VERSION);
    out.push_str(";t=");
    out.push_str(itoa::Buffer::new().format(since_ms));
    out.push_str(described);
    out
}

/// Milliseconds since the Unix epoch of `at` (zero before it).
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// At most [`MAX_FIELD`] characters of `s`.
fn cut(s: &str) -> &str {
    s.char_indices().nth(MAX_FIELD).map_or(s, |(i, _)| &s[..i])
}

pub(crate) fn escape_into(out: &mut String, s: &str) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// The text of an escaped field; `None` for a broken escape.
pub(crate) fn unescape(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn at(ms: u64) -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
    }

    #[test]
    fn values_write_the_time_in_decimal() {
        for ms in [0, 7, 10, 1_700_000_000_123, u64::MAX] {
            let expected = format!("{TOKEN};q1;t={ms};h=x");
            assert_eq!(value(TOKEN, ms, ";h=x"), expected);
        }
    }

    #[test]
    fn values_are_compact_and_read_back() {
        type Case<'a> = (Option<&'a str>, Option<u32>, Option<&'a str>, &'a str);
        let cases: Vec<Case<'_>> = vec![
            (
                Some("web-1"),
                Some(4242),
                Some("backup.sh"),
                ";q1;t=1700000000123;h=web-1;p=4242;n=backup.sh",
            ),
            (None, None, None, ";q1;t=1700000000123"),
            (Some(""), Some(7), Some(""), ";q1;t=1700000000123;p=7"),
            (
                Some("a b:c;d=e%"),
                None,
                Some("é"),
                ";q1;t=1700000000123;h=a%20b%3Ac%3Bd%3De%25;n=%C3%A9",
            ),
        ];
        for (host, pid, program, tail) in cases {
            let v = value(TOKEN, 1_700_000_000_123, &describe(host, pid, program));
            assert_eq!(v, format!("{TOKEN}{tail}"));
            assert!(!v.contains(':') && !v.contains(' '), "{v}");
            let info = HolderInfo::parse(&v);
            assert_eq!(info.token, TOKEN);
            assert_eq!(info.host.as_deref(), host.filter(|h| !h.is_empty()));
            assert_eq!(info.pid, pid);
            assert_eq!(info.program.as_deref(), program.filter(|p| !p.is_empty()));
            assert_eq!(info.since, at(1_700_000_000_123));
            assert!(info.is_described());
        }
    }

    #[test]
    fn long_names_are_cut_on_a_character_boundary() {
        let long = "ü".repeat(MAX_FIELD + 5);
        let info = HolderInfo::parse(&value(TOKEN, 1, &describe(Some(&long), None, None)));
        assert_eq!(info.host, Some("ü".repeat(MAX_FIELD)));
    }

    #[test]
    fn other_values_are_bare_tokens() {
        for v in [
            "",
            TOKEN,
            "b5a2f6a0-3e1d-4c7b-9a57-2c8e1f0d9b11",
            "redsync:c29tZQ==",
            "tok;q2;t=1",
            ";q1;t=1",
            "tok;t=1;q1",
            "tok;",
        ] {
            let info = HolderInfo::parse(v);
            assert_eq!(info.token, v);
            assert_eq!(
                (&info.host, info.pid, &info.program, info.since),
                (&None, None, &None, None)
            );
            assert!(!info.is_described(), "{v}");
        }
    }

    #[test]
    fn broken_or_unknown_fields_are_skipped() {
        let info = HolderInfo::parse("tok;q1;h=%zz;p=x;n=ok;t=;x=1;junk");
        assert_eq!(info.token, "tok");
        assert_eq!(info.host, None);
        assert_eq!(info.pid, None);
        assert_eq!(info.program.as_deref(), Some("ok"));
        assert_eq!(info.since, None);
        let info = HolderInfo::parse("tok;q1;h=ab%4");
        assert_eq!(info.host, None);
    }

    #[test]
    fn unix_ms_saturates_at_the_epoch() {
        assert_eq!(unix_ms(SystemTime::UNIX_EPOCH), 0);
        assert_eq!(unix_ms(at(5).unwrap()), 5);
    }
}
