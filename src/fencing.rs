//! Fencing tokens: making a storage system reject writes from a holder whose lock ran out.
//!
//! A lock can be lost while its holder still works (a long GC or VM pause, a network delay
//! of its writes): the validity runs out, another client acquires the lock and writes, and
//! then the old holder's delayed write lands. A lock alone cannot prevent that; the storage
//! can, if each write carries a number that grows from one holder to the next and the
//! storage refuses a number lower than one it has already seen.
//!
//! Request one with [`LockRequest::fenced`](crate::LockRequest::fenced) (also after
//! [`lock_many`](crate::Redlock::lock_many), and with
//! [`try_lock_fenced`](crate::Redlock::try_lock_fenced)) and read it with
//! [`FencedGuard::fencing_token`](crate::FencedGuard::fencing_token), or
//! [`FencedContext::fencing_token`](crate::FencedContext::fencing_token) in a scoped run:
//! a [`FencingToken`], never absent. (The older [`LockRequest::fencing`](crate::LockRequest::fencing)
//! gives a plain guard whose deprecated [`fencing_token`](crate::LockGuard::fencing_token)
//! is an `Option<u64>`.) It is minted by the same
//! majority as the lock: every node keeps a counter `<prefix>quorum-lock:fence:<resource>` that never
//! expires; the acquisition reads the counters of the nodes it reaches, takes the largest
//! of one more than the highest, the client's wall clock in microseconds since the Unix
//! epoch and the [fence floor](crate::RedlockBuilder::fence_floor), and commits it to a
//! majority (only where our lock is in place) before the guard is returned. Any two
//! majorities share a node, so while the nodes remember, the next holder reads at least
//! this value and mints a larger one; across memory the nodes lost (restarts, even of a
//! majority), the clock carries the order: a node that lost a counter votes again only
//! after restart quarantine, and a token is never above its minting time, so with every
//! client's clock within half the shortest quarantine of true time the next token is still
//! larger (`rules::safety::next_token` states the argument). Cost: one extra round trip per
//! acquisition, and one counter key per resource (below).
//!
//! # The token
//!
//! [`FencingToken`] is a number in `1..=`[`FencingToken::MAX`] (2<sup>53</sup>), never
//! absent, totally ordered: a later holder of the same resource always has a larger one.
//! [`get`](FencingToken::get) gives it as `u64`, [`as_i64`](FencingToken::as_i64) as `i64`
//! for a SQL `bigint` column (it always fits). The bound is what the nodes can count
//! exactly: their scripts compare counters as Lua numbers (doubles), exact up to 2<sup>53</sup>.
//! Minting past it is refused ([`FencingToken::after`]) rather than risking a repeated
//! token; at one acquisition per microsecond that takes 285 years (the acquisition then
//! fails with [`Error::Config`](crate::Error::Config)).
//!
//! # Using the token with SQL: claim the row when you read it
//!
//! Keep a `fence bigint not null default 0` column in each row the lock protects. A holder
//! with token `$t` does its read-modify-write in two statements:
//!
//! ```sql
//! -- 1. Read, and claim the row for $t in the same statement. No row: a holder with a
//! --    larger token has claimed it already; stop.
//! UPDATE accounts SET fence = $t WHERE id = $id AND fence < $t RETURNING balance;
//! -- 2. Write only if nobody claimed the row since. 0 rows updated: a newer holder did;
//! --    stop, the value read in 1 is stale.
//! UPDATE accounts SET balance = $new WHERE id = $id AND fence = $t;
//! ```
//!
//! Why this is safe: a row's `fence` only grows (the claim raises it, the write keeps it).
//! Once a holder with a larger token claims the row, `fence` never equals `$t` again, so the
//! older holder's write matches no row, whenever it arrives: before the newer holder's
//! write, after it, or long after. A write that is accepted therefore had no other claim
//! between its own claim and itself, so the value it was computed from is still the row's
//! value: no update is lost. The claim succeeds once per token (`fence < $t`); to read the
//! row again under the same lock, `SELECT ... WHERE id = $id AND fence = $t`. Create rows
//! with `fence = 0` before holders claim them (a claim on a missing row also returns
//! nothing). Each statement may run on its own (autocommit): what matters is that an
//! `UPDATE` checks its condition against the row's current version, as SQLite does and
//! PostgreSQL does at `READ COMMITTED` (it re-checks after waiting for a concurrent
//! update; stricter levels fail the statement instead, which is also safe).
//!
//! Why the simpler `UPDATE ... SET balance = $new, fence = $t WHERE id = $id AND fence <=
//! $t` (with a plain `SELECT` to read) is **not** safe for a read-modify-write: it rejects
//! an old write only after a newer holder has *written*. An old holder A (token 1) reads
//! the balance and pauses; its lock expires; B (token 2) acquires and reads the same
//! balance; A resumes and writes (`fence` is still 0, at most 1: accepted); then B writes
//! its value computed from the balance before A's write (`1 <= 2`, accepted). A's update
//! is lost, though every write passed the fence check. Claiming at the read closes exactly
//! this window: B's read raises `fence` to 2 before A can write.
//!
//! `examples/fenced-sqlite` runs this on SQLite with real nodes, and its tests show both a
//! paused holder's rejected write and the update the `<=` form loses.
//!
//! For data kept in Redis, [`fenced_set`] writes a value only if the token is at least the
//! highest one seen for the resource on that server. It suits blind writes (the new value
//! does not depend on a value read before); for a read-modify-write in Redis, do the
//! modification inside one script guarded the same way.
//!
//! # What the counters cost
//!
//! Fencing keeps one counter key per lock key (per resource name, with the client's key
//! prefix) on every node, and never removes it: deleting it would let the next holder mint
//! a token an older holder already used. On redis-server 7.0 (jemalloc, 64-bit),
//! `MEMORY USAGE` reports 88 bytes for `quorum-lock:fence:orders:invoice-batch` (72 bytes
//! for a 20-character key name, 104 for a 62-character one; the value's size does not
//! matter, counters are stored as integers), and 100,000 such counters raised `used_memory`
//! by 106 bytes each, hash table included: about 100 MB per node for a million distinct
//! resource names. Use fencing for a bounded set of names (accounts, jobs, tables), not for
//! names generated per request. [`fenced_set`] likewise keeps one
//! `quorum-lock:fence-seen:<resource>` key per resource on the data server, forever.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

// The write itself is I/O on the caller's connection, so it lives with the rest of the
// crate's connection code; it is part of this module's API.
pub use crate::net::fenced_write::fenced_set;

/// A fencing token: a number in `1..=`[`FencingToken::MAX`] that strictly increases from
/// one holder of a resource to the next. See the [module documentation](self) for how to
/// use it with a database.
///
/// Ordered, hashed and displayed as its number; `Copy`. Converts into `u64` and `i64`
/// (always in range) and from them with [`TryFrom`] (refusing 0, negative numbers and
/// values above [`MAX`](Self::MAX)); parses from its decimal form, as passed by the CLI in
/// `QUORUM_LOCK_FENCING_TOKEN`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(NonZeroU64);

/// 2^53: the largest integer the nodes' Lua scripts hold exactly.
const LIMIT: u64 = 1 << 53;

impl FencingToken {
    /// The smallest token, 1: the first holder of a resource gets it.
    pub const MIN: FencingToken = FencingToken(NonZeroU64::MIN);

    /// The largest token, 2^53 = 9,007,199,254,740,992: the nodes compare counters as Lua
    /// numbers (doubles), which are exact up to here. It is below `i64::MAX`, so every
    /// token fits a SQL `bigint` (and a JSON number).
    pub const MAX: FencingToken = FencingToken(NonZeroU64::new(LIMIT).unwrap());

    /// `value` as a token, or `None` when it is 0 or above [`MAX`](Self::MAX).
    pub const fn new(value: u64) -> Option<FencingToken> {
        match NonZeroU64::new(value) {
            Some(v) if value <= LIMIT => Some(FencingToken(v)),
            _ => None,
        }
    }

    /// The token that follows `highest`, the largest counter read from the nodes (0 when
    /// there is none): `highest + 1`.
    ///
    /// # Errors
    ///
    /// [`TokenOutOfRange`] when `highest` is [`MAX`](Self::MAX) or more: no larger token can
    /// be counted exactly, and handing out one that may repeat would defeat fencing.
    pub const fn after(highest: u64) -> Result<FencingToken, TokenOutOfRange> {
        if highest >= LIMIT {
            return Err(TokenOutOfRange(Range::Exhausted(highest)));
        }
        match FencingToken::new(highest + 1) {
            Some(token) => Ok(token),
            None => Err(TokenOutOfRange(Range::Exhausted(highest))),
        }
    }

    /// The number.
    pub const fn get(self) -> u64 {
        self.0.get()
    }

    /// The number as `i64`, for a SQL `bigint` column; always positive, never truncated.
    pub const fn as_i64(self) -> i64 {
        // Lossless: the value is at most 2^53.
        self.0.get() as i64
    }
}

impl fmt::Debug for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FencingToken({})", self.get())
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.get(), f)
    }
}

impl From<FencingToken> for u64 {
    fn from(token: FencingToken) -> u64 {
        token.get()
    }
}

impl From<FencingToken> for i64 {
    fn from(token: FencingToken) -> i64 {
        token.as_i64()
    }
}

impl TryFrom<u64> for FencingToken {
    type Error = TokenOutOfRange;

    fn try_from(value: u64) -> Result<FencingToken, TokenOutOfRange> {
        FencingToken::new(value).ok_or(TokenOutOfRange(Range::Value(i128::from(value))))
    }
}

impl TryFrom<i64> for FencingToken {
    type Error = TokenOutOfRange;

    fn try_from(value: i64) -> Result<FencingToken, TokenOutOfRange> {
        u64::try_from(value)
            .ok()
            .and_then(FencingToken::new)
            .ok_or(TokenOutOfRange(Range::Value(i128::from(value))))
    }
}

impl FromStr for FencingToken {
    type Err = ParseTokenError;

    /// Parses the decimal form (as [`Display`](fmt::Display) writes it), e.g. the CLI's
    /// `QUORUM_LOCK_FENCING_TOKEN`.
    fn from_str(s: &str) -> Result<FencingToken, ParseTokenError> {
        let value: u64 = s.parse().map_err(|_| ParseTokenError::NotANumber)?;
        FencingToken::try_from(value).map_err(ParseTokenError::OutOfRange)
    }
}

/// A number that is not a fencing token, or a counter past which no token can be minted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenOutOfRange(Range);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Range {
    /// A value outside `1..=MAX` (wide enough for any `u64` or `i64`).
    Value(i128),
    /// The highest counter read; nothing above it can be minted.
    Exhausted(u64),
}

impl fmt::Display for TokenOutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Range::Value(v) => write!(f, "fencing token {v} is outside 1..={LIMIT}"),
            Range::Exhausted(h) => write!(
                f,
                "fencing counter is at {h}: no token above {LIMIT} can be minted exactly"
            ),
        }
    }
}

impl std::error::Error for TokenOutOfRange {}

/// Why a string is not a fencing token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseTokenError {
    /// Not a decimal number that fits a `u64`.
    NotANumber,
    /// A number outside `1..=`[`FencingToken::MAX`].
    OutOfRange(TokenOutOfRange),
}

impl fmt::Display for ParseTokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseTokenError::NotANumber => f.write_str("fencing token is not a decimal number"),
            ParseTokenError::OutOfRange(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl std::error::Error for ParseTokenError {}

#[cfg(test)]
mod tests {
    use super::*;

    use std::collections::HashSet;

    #[test]
    fn new_accepts_exactly_one_to_two_to_the_53() {
        let cases: [(u64, Option<u64>); 8] = [
            (0, None),
            (1, Some(1)),
            (2, Some(2)),
            (LIMIT - 1, Some(LIMIT - 1)),
            (LIMIT, Some(LIMIT)),
            (LIMIT + 1, None),
            (i64::MAX as u64, None),
            (u64::MAX, None),
        ];
        for (value, expected) in cases {
            assert_eq!(
                FencingToken::new(value).map(FencingToken::get),
                expected,
                "{value}"
            );
            assert_eq!(
                FencingToken::try_from(value).ok().map(FencingToken::get),
                expected,
                "{value}"
            );
        }
        assert_eq!(FencingToken::MIN.get(), 1);
        assert_eq!(FencingToken::MAX.get(), 9_007_199_254_740_992);
    }

    #[test]
    fn after_mints_one_more_until_the_limit_and_then_refuses() {
        assert_eq!(FencingToken::after(0).map(FencingToken::get), Ok(1));
        assert_eq!(FencingToken::after(41).map(FencingToken::get), Ok(42));
        assert_eq!(FencingToken::after(LIMIT - 1), Ok(FencingToken::MAX));
        for highest in [LIMIT, LIMIT + 1, i64::MAX as u64, u64::MAX - 1, u64::MAX] {
            let err = FencingToken::after(highest).unwrap_err();
            assert_eq!(err, TokenOutOfRange(Range::Exhausted(highest)));
            assert_eq!(
                err.to_string(),
                format!(
                    "fencing counter is at {highest}: no token above 9007199254740992 can be \
                     minted exactly"
                )
            );
        }
    }

    #[test]
    fn the_i64_view_is_the_same_number_for_every_token() {
        for value in [1, 2, 1 << 31, (1 << 32) + 7, LIMIT - 1, LIMIT] {
            let token = FencingToken::new(value).unwrap();
            assert_eq!(token.as_i64(), value as i64);
            assert_eq!(i64::from(token), value as i64);
            assert_eq!(u64::from(token), value);
            assert_eq!(FencingToken::try_from(token.as_i64()), Ok(token));
        }
        assert_eq!(FencingToken::MAX.as_i64(), 9_007_199_254_740_992_i64);
    }

    #[test]
    fn i64_conversion_refuses_zero_negatives_and_values_past_the_limit() {
        for value in [0, -1, i64::MIN, LIMIT as i64 + 1, i64::MAX] {
            let err = FencingToken::try_from(value).unwrap_err();
            assert_eq!(
                err.to_string(),
                format!("fencing token {value} is outside 1..=9007199254740992")
            );
        }
    }

    #[test]
    fn order_equality_and_hash_follow_the_number() {
        let t = |v| FencingToken::new(v).unwrap();
        assert!(t(1) < t(2));
        assert!(t(LIMIT - 1) < FencingToken::MAX);
        assert_eq!(t(7).max(t(3)), t(7));
        let mut sorted = vec![t(5), t(1), t(3)];
        sorted.sort();
        assert_eq!(sorted, [t(1), t(3), t(5)]);
        let set: HashSet<FencingToken> = [t(4), t(4), t(9)].into_iter().collect();
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn display_debug_and_parse_round_trip() {
        let token = FencingToken::new(1234).unwrap();
        assert_eq!(token.to_string(), "1234");
        assert_eq!(format!("{token:?}"), "FencingToken(1234)");
        assert_eq!(format!("{token:>6}"), "  1234");
        assert_eq!("1234".parse::<FencingToken>(), Ok(token));
        assert_eq!(
            "9007199254740992".parse::<FencingToken>(),
            Ok(FencingToken::MAX)
        );
        let cases = [
            ("", "fencing token is not a decimal number"),
            ("-1", "fencing token is not a decimal number"),
            ("12a", "fencing token is not a decimal number"),
            (
                "18446744073709551616",
                "fencing token is not a decimal number",
            ),
            ("0", "fencing token 0 is outside 1..=9007199254740992"),
            (
                "9007199254740993",
                "fencing token 9007199254740993 is outside 1..=9007199254740992",
            ),
            (
                "18446744073709551615",
                "fencing token 18446744073709551615 is outside 1..=9007199254740992",
            ),
        ];
        for (input, message) in cases {
            let err = input.parse::<FencingToken>().unwrap_err();
            assert_eq!(err.to_string(), message, "{input:?}");
        }
    }
}
