//! The scripts of an election's term record ([`Kind::Term`]): what its leader proclaims
//! beside the election's lock key, and the read that judges who leads.
//!
//! The record is one string, `<lock value>\n<epoch>\n<value>`: the leader's whole lock
//! value (so a reader can tell the record of the term that holds the key from one left by
//! an earlier term), the epoch (the fencing token minted with the win) and the value the
//! leader proclaims. Only the holder of the lock key writes it, and it expires one term's
//! TTL after the lock key's own expiry at the time of writing, so an abandoned record goes
//! away by itself.

use crate::protocol::keys::Kind;
use crate::protocol::scripts::{Lua, lua_server_ms};

/// Writes the term record while the lock key holds the leader's value.
///
/// KEYS[1]: the election's lock key; KEYS[2]: its term record. ARGV[1]: the leader's lock
/// value; ARGV[2]: the record; ARGV[3]: the term's TTL in ms; ARGV[4]: the channel to
/// announce the write on (empty: none); ARGV[5]: the announcement. Returns 1 after
/// writing, 0 (writing nothing) when the lock key holds anything else.
const TERM_WRITE_SRC: &str = r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return 0
end
local left = redis.call('PTTL', KEYS[1])
if left < 0 then
    left = 0
end
redis.call('SET', KEYS[2], ARGV[2], 'PX', left + tonumber(ARGV[3]))
if ARGV[4] ~= '' then
    redis.call('PUBLISH', ARGV[4], ARGV[5])
end
return 1
";
pub(crate) static TERM_WRITE: Lua =
    Lua::new(&[Kind::Lock, Kind::Term], TERM_WRITE_SRC).repeatable();

/// Reads the election's lock key and term record at one instant.
///
/// KEYS as [`TERM_WRITE`]. Returns an empty array when the lock key is absent, else the
/// lock value, its remaining TTL in ms and the record (an empty string when absent).
const TERM_READ_SRC: &str = r"
local held = redis.call('GET', KEYS[1])
if not held then
    return {}
end
return {held, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or ''}
";
pub(crate) static TERM_READ: Lua = Lua::new(&[Kind::Lock, Kind::Term], TERM_READ_SRC).repeatable();

/// Deletes the term record when it is the one of the lock value given (a resigning
/// leader's), and announces the term's end either way: a resignation clears its record
/// after its release, when the next leader may have written its own already.
///
/// KEYS as [`TERM_WRITE`]. ARGV[1]: the leader's lock value; ARGV[2]: the channel to
/// announce the resignation on (empty: none); ARGV[3]: the announcement. Returns 1 after
/// deleting, 0 when the record is absent or another term's.
const TERM_CLEAR_SRC: &str = r"
if ARGV[2] ~= '' then
    redis.call('PUBLISH', ARGV[2], ARGV[3])
end
local record = redis.call('GET', KEYS[2])
if record and string.sub(record, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
    return redis.call('DEL', KEYS[2])
end
return 0
";
pub(crate) static TERM_CLEAR: Lua =
    Lua::new(&[Kind::Lock, Kind::Term], TERM_CLEAR_SRC).repeatable();

/// Enters or refreshes a waiting candidate in the election's candidates, a sorted set
/// scored by each entry's expiry in the server's milliseconds; drops expired entries.
///
/// KEYS[1]: the candidates of the election's lock key. ARGV[1]: the entry; ARGV[2]: its
/// time to live in ms. Returns 1.
pub(crate) const CANDIDATE_ENTER_SRC: &str = concat!(
    lua_server_ms!(),
    r"
local now = server_ms()
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
"
);
pub(crate) static CANDIDATE_ENTER: Lua =
    Lua::new(&[Kind::Candidates], CANDIDATE_ENTER_SRC).repeatable();

/// Takes a candidate's entry out. KEYS as [`CANDIDATE_ENTER`]; ARGV[1]: the entry.
/// Returns how many entries it removed.
const CANDIDATE_LEAVE_SRC: &str = r"
return redis.call('ZREM', KEYS[1], ARGV[1])
";
pub(crate) static CANDIDATE_LEAVE: Lua =
    Lua::new(&[Kind::Candidates], CANDIDATE_LEAVE_SRC).repeatable();

/// The live entries of the candidates. KEYS as [`CANDIDATE_ENTER`]. Returns the entries
/// whose expiry is after the server's now.
pub(crate) const CANDIDATES_READ_SRC: &str = concat!(
    lua_server_ms!(),
    r"
return redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. server_ms(), '+inf')
"
);
pub(crate) static CANDIDATES_READ: Lua =
    Lua::new(&[Kind::Candidates], CANDIDATES_READ_SRC).repeatable();

/// The term scripts' sources, loaded on each new connection with the others.
pub(crate) const SOURCES: [&str; 6] = [
    TERM_WRITE_SRC,
    TERM_READ_SRC,
    TERM_CLEAR_SRC,
    CANDIDATE_ENTER_SRC,
    CANDIDATE_LEAVE_SRC,
    CANDIDATES_READ_SRC,
];

/// A candidate's entry: when it began to campaign (Unix ms, its clock), an id of its own,
/// and the value it campaigns with.
pub(crate) fn candidate_entry(since_ms: u64, id: &str, value: &str) -> String {
    format!("{since_ms}\n{id}\n{value}")
}

/// An entry read back: since when (Unix ms) and with which value; `None` for anything not
/// in the form [`candidate_entry`] writes.
pub(crate) fn parse_candidate(entry: &str) -> Option<(u64, &str)> {
    let mut parts = entry.splitn(3, '\n');
    let since = parts.next()?.parse().ok()?;
    let _id = parts.next()?;
    Some((since, parts.next()?))
}

/// The term record of lock value `lock_value`, epoch `epoch` and proclaimed `value`.
pub(crate) fn record(lock_value: &str, epoch: u64, value: &str) -> String {
    format!("{lock_value}\n{epoch}\n{value}")
}

/// A term record read back: its lock value, epoch and value; `None` for anything not in
/// the form [`record`] writes.
pub(crate) fn parse_record(record: &str) -> Option<(&str, u64, &str)> {
    let mut parts = record.splitn(3, '\n');
    let lock_value = parts.next().filter(|v| !v.is_empty())?;
    let epoch = parts.next()?.parse().ok()?;
    Some((lock_value, epoch, parts.next()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_candidate_entry_reads_back() {
        let entry = candidate_entry(1_700_000_000_000, "ab12", "host:1\nline");
        assert_eq!(
            parse_candidate(&entry),
            Some((1_700_000_000_000, "host:1\nline"))
        );
        for broken in ["", "x\nid\nv", "5\nid"] {
            assert_eq!(parse_candidate(broken), None, "{broken:?}");
        }
    }

    #[test]
    fn a_record_reads_back_whatever_its_value_holds() {
        for value in ["", "10.0.0.7:8080", "two\nlines", "\n"] {
            let written = record("abc;q1;t=5", 42, value);
            assert_eq!(parse_record(&written), Some(("abc;q1;t=5", 42, value)));
        }
        for broken in ["", "abc", "abc\nx\nv", "\n1\nv"] {
            assert_eq!(parse_record(broken), None, "{broken:?}");
        }
    }
}
