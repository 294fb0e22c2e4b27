//! [`LockTicket`]: a held lock handed from one guard (or process) to another, and its
//! stable text form. Pure: the adoption, which checks it on the nodes, is in
//! [`adopt`](crate::held::adopt).

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::protocol::access::Access;
use crate::protocol::holder::{escape_into, unescape, unix_ms};

/// The first field of a ticket's text: the format and its version.
const TICKET_VERSION: &str = "qlt1";

/// A held lock, detached from its guard ([`LockGuard::detach`](crate::LockGuard::detach))
/// so that another guard, in this process or another, can take it over with
/// [`Redlock::adopt`](crate::Redlock::adopt).
///
/// **A ticket is a capability**: whoever has it may extend and release the lock. Pass it
/// as you would pass a password (an environment variable, a pipe, a file only its reader
/// may read), never in a log line or a trace: its [`Debug`] shows only the resources, and it
/// has no [`Display`](std::fmt::Display); [`to_text`](Self::to_text) gives the text on
/// purpose.
///
/// The text form is stable: `qlt1:<kind>:<valid until>:<ttl>:<fence>:<token>:<resource>...`,
/// fields separated by `:`, the kind `m` (a mutex), `w` (a writer), `r` (a reader) or `p`
/// and a permit count, times in milliseconds (the validity's end in Unix milliseconds by
/// the detaching host's clock), the fence `-` when there is none, and token and resources
/// escaped (every byte outside `[A-Za-z0-9._-]` as `%XX`).
#[derive(Clone, PartialEq, Eq)]
pub struct LockTicket {
    pub(crate) resources: Vec<String>,
    pub(crate) token: String,
    pub(crate) access: Access,
    pub(crate) fence: Option<FencingToken>,
    pub(crate) valid_until: SystemTime,
    pub(crate) ttl: Duration,
}

impl fmt::Debug for LockTicket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockTicket")
            .field("resources", &self.resources)
            .finish_non_exhaustive()
    }
}

impl LockTicket {
    /// The resource (the first, sorted, of a [`lock_many`](crate::Redlock::lock_many)
    /// lock).
    pub fn resource(&self) -> &str {
        self.resources.first().map_or("", String::as_str)
    }

    /// Every resource of the lock, sorted.
    pub fn resources(&self) -> &[String] {
        &self.resources
    }

    /// The fencing token minted with the lock, if it was requested with one.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        self.fence
    }

    /// When the validity the detaching guard had ends, by the detaching host's clock:
    /// adopt before then (an adoption checks the nodes, not this time).
    pub fn valid_until(&self) -> SystemTime {
        self.valid_until
    }

    /// The TTL the lock was last set with; an adoption sets it again.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The ticket's text, to hand to another process (see the type's docs: a secret).
    pub fn to_text(&self) -> String {
        let mut out = String::with_capacity(96 + self.token.len() * 2);
        for field in [
            TICKET_VERSION,
            &self.access.ticket_tag(),
            &unix_ms(self.valid_until).to_string(),
            &self.ttl.as_millis().to_string(),
            &self.fence.map_or_else(|| "-".to_owned(), |f| f.to_string()),
        ] {
            out.push_str(field);
            out.push(':');
        }
        escape_into(&mut out, &self.token);
        for resource in &self.resources {
            out.push(':');
            escape_into(&mut out, resource);
        }
        out
    }

    /// Reads a ticket's text (surrounding white space ignored).
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for text that is not a ticket of this format; the message never
    /// repeats the text.
    pub fn parse(text: &str) -> Result<LockTicket> {
        parse_ticket(text.trim()).ok_or_else(|| {
            Error::Config(format!(
                "not a lock ticket (expected {TICKET_VERSION}:<kind>:<valid until>:<ttl>:\
                 <fence>:<token>:<resource>..., {} characters given)",
                text.trim().len()
            ))
        })
    }
}

/// The ticket `text` holds, if it is one.
fn parse_ticket(text: &str) -> Option<LockTicket> {
    let mut fields = text.split(':');
    if fields.next()? != TICKET_VERSION {
        return None;
    }
    let access = Access::from_ticket_tag(fields.next()?)?;
    let until_ms: u64 = digits(fields.next()?)?;
    let valid_until = SystemTime::UNIX_EPOCH.checked_add(Duration::from_millis(until_ms))?;
    let ttl = Duration::from_millis(digits(fields.next()?)?);
    let fence = match fields.next()? {
        "-" => None,
        number => Some(number.parse::<FencingToken>().ok()?),
    };
    let token = unescape(fields.next()?).filter(|t| !t.is_empty())?;
    let resources = fields
        .map(|r| unescape(r).filter(|r| !r.is_empty()))
        .collect::<Option<Vec<String>>>()?;
    let many_ok = resources.len() == 1 || access.takes_many_names();
    (!resources.is_empty() && many_ok && !ttl.is_zero()).then_some(LockTicket {
        resources,
        token,
        access,
        fence,
        valid_until,
        ttl,
    })
}

/// A number of ASCII digits only (no sign, no space).
fn digits(field: &str) -> Option<u64> {
    if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    field.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticket(tag: &str, resources: &[&str], fence: Option<u64>) -> LockTicket {
        let access = Access::from_ticket_tag(tag).unwrap();
        LockTicket {
            resources: resources.iter().map(|r| (*r).to_owned()).collect(),
            token: "0123abcd;q1;t=1700000000000;h=web-1;p=42;n=billing%20job".to_owned(),
            access,
            fence: fence.map(|f| FencingToken::try_from(f).unwrap()),
            valid_until: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_030_000),
            ttl: Duration::from_secs(30),
        }
    }

    #[test]
    fn the_text_form_reads_back_whole() {
        let cases = [
            ticket("m", &["orders:42"], Some(7)),
            ticket("m", &["a b", "c:d", "é"], None),
            ticket("w", &["schema"], Some(1 << 53)),
            ticket("r", &["schema"], None),
            ticket("p4", &["jobs-slot-2"], None),
        ];
        for t in cases {
            let text = t.to_text();
            assert!(text.starts_with("qlt1:"), "{text}");
            assert!(!text.contains(' ') && !text.contains(';'), "{text}");
            assert_eq!(
                LockTicket::parse(&format!(" {text}\n")).unwrap(),
                t,
                "{text}"
            );
        }
    }

    #[test]
    fn the_text_is_stable() {
        let text = ticket("m", &["orders:42"], Some(7)).to_text();
        assert_eq!(
            text,
            "qlt1:m:1700000030000:30000:7:0123abcd%3Bq1%3Bt%3D1700000000000%3Bh%3Dweb-1%3Bp%3D42\
             %3Bn%3Dbilling%2520job:orders%3A42"
        );
    }

    #[test]
    fn anything_else_is_refused_without_echoing_it() {
        let good = ticket("m", &["r"], None).to_text();
        let bad = [
            "",
            "qlt1",
            "qlt2:m:1:1:-:tok:r",
            "qlt1:x:1:1:-:tok:r",
            "qlt1:p0:1:1:-:tok:r",
            "qlt1:p-1:1:1:-:tok:r",
            "qlt1:m:+1:1:-:tok:r",
            "qlt1:m:1:0:-:tok:r",
            "qlt1:m:1:1:0:tok:r",
            "qlt1:m:1:1:x:tok:r",
            "qlt1:m:1:1:-::r",
            "qlt1:m:1:1:-:tok",
            "qlt1:m:1:1:-:tok:",
            "qlt1:m:1:1:-:tok:%zz",
            "qlt1:w:1:1:-:tok:a:b",
            "qlt1:m:99999999999999999999:1:-:tok:r",
        ];
        for text in bad {
            let err = LockTicket::parse(text).unwrap_err();
            assert!(matches!(err, Error::Config(_)), "{text}: {err:?}");
            if text.len() > 4 {
                assert!(!err.to_string().contains(text), "{err}");
            }
        }
        assert!(LockTicket::parse(&good).is_ok());
    }

    #[test]
    fn debug_shows_the_resources_only() {
        let t = ticket("m", &["orders:42"], Some(7));
        let shown = format!("{t:?}");
        assert_eq!(shown, r#"LockTicket { resources: ["orders:42"], .. }"#);
    }
}
