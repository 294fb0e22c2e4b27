//! The scripts of the read-write lock: one acquire script for both sides, and the
//! release and extension of a reader (a writer's lock key is a mutex's, released and
//! extended by the mutex's scripts).
//!
//! The lock key of read-write lock R is R's, the key of the mutex of R: a writer holds it
//! with its token, as a mutex does, so the writer and `lock(R)` are one exclusive side. The
//! readers are a sorted set beside it ([`Kind::Readers`]): each reader's token, scored by
//! its own expiry in the server's milliseconds (`TIME`), so one reader's grant or release
//! never moves another reader's expiry. While any reader is live the lock key holds
//! [`SHARED`] instead of a token, expiring no sooner than the last reader: a mutex's plain
//! `SET NX` finds the key taken and waits, as for a writer. A writer that finds live
//! readers leaves an intent ([`Kind::Intent`]) that keeps new readers out for a few retry
//! periods: readers drain, and the writer gets in.

use super::keys::{self, Global, Kind, Space};
use super::scripts::lua_server_ms;
use super::scripts::{Lua, lua_ballot_facts, lua_enqueue, lua_keep_listed, lua_raise_record};

/// The value of a lock key held by readers: no token is ever this (tokens start with 32
/// hex digits).
pub(crate) const SHARED: &str = "quorum-lock:shared";

/// Lua: `keep_shared(key, now, expiry)` makes lock key `key` hold [`SHARED`] until at
/// least `expiry`, both in the server's milliseconds: readers hold it.
macro_rules! lua_keep_shared {
    () => {
        r"
local function keep_shared(key, now, expiry)
    if redis.call('GET', key) ~= 'quorum-lock:shared'
        or now + redis.call('PTTL', key) < expiry then
        redis.call('SET', key, 'quorum-lock:shared', 'PX', math.max(expiry - now, 1))
    end
end
"
    };
}

/// Acquisition of a read-write lock's read or write side on one node, with the same
/// waiting-list bookkeeping, fencing counter read and restart quarantine data as the
/// mutex's acquire script, and the same reply; or, on the fast path, the plain `SET NX
/// PX`'s reply.
///
/// KEYS: the lock key, its fencing counter, its waiting list, its readers, its writer
/// intent, its turn, then the ensemble record and the node's marker ([`Global`]).
/// ARGV[1..6]: as the mutex's acquire script (token, TTL in ms, client id or `''`, stay,
/// read the fencing counter, rejoin at the head). ARGV[7]: `'r'` to read, `'w'` to write.
/// ARGV[8]: `'1'` for the fast path: the client knows that this node's record covers the
/// TTL in its current life (as for the mutex's plain `SET NX PX`), so the record is neither
/// raised nor read, nor the marker. ARGV[9] (optional, a writer's): how long its intent
/// lasts, in milliseconds (default: the TTL); every try of a waiting writer sets it anew.
/// ARGV[10], ARGV[11] (optional, a reader's): the prefix of the clients' wake-up channels
/// and the lifetime in milliseconds of the turn a hand-on gives.
///
/// Otherwise raises the ensemble record first, as the mutex's script does. A lock key that holds
/// anything but [`SHARED`] (a writer's or a mutex holder's token) refuses both sides. Then the
/// readers whose expiry passed by the server's clock are dropped, and a reader enters when no
/// writer intent exists, or it is its client's turn (a release woke it, ahead of the writer that
/// left the intent): its token is added with the expiry now + TTL, the set's own expiry and the
/// lock key's [`SHARED`] raised to at least that, and its own turn ended. A reader that enters
/// while a turn is given (a release or a hand-on woke a client less than a turn's lifetime ago)
/// hands it on (with ARGV[10]): the next listed client that still listens is popped, woken
/// (`<token>:<lock key>`, as a release wakes) and given the turn, so that readers queued behind
/// a writer enter together rather than one per hold; a writer or a mutex handed the turn finds
/// the readers and ends the chain (a writer leaves its intent). Waiting writers find the
/// readers and leave their intent. A writer enters when no live reader is left: the key is set to its token with the
/// TTL (replacing a [`SHARED`] that outlived its readers) and the intent deleted; finding readers,
/// it sets the intent for ARGV[9] instead.
///
/// Returns `{acquired, fence, marker, record}` as the mutex's script: `acquired` is 1 on
/// entry, 0 when refused, -1 when the lock key holds another type (foreign data, whatever
/// the path). On the fast path, a status `OK` on entry and nil when refused, as `SET NX PX`
/// answers. A readers key of another type fails the script (`WRONGTYPE`).
pub(crate) const RW_ACQUIRE_SRC: &str = concat!(
    lua_keep_listed!(),
    lua_keep_shared!(),
    lua_ballot_facts!(),
    lua_server_ms!(),
    r"
local fast = ARGV[8] == '1'
local record, marker = ballot_facts(KEYS[7], KEYS[8], ARGV[2], fast)
local fence = false
if ARGV[5] == '1' then
    fence = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
end
local ttl = tonumber(ARGV[2])
local function hand_on()
    while true do
        local id = pop_waiter(KEYS[3])
        if not id then
            return
        end
        if redis.call('PUBLISH', ARGV[10] .. id, ARGV[1] .. ':' .. KEYS[1]) > 0 then
            redis.call('SET', KEYS[6], id, 'PX', ARGV[11])
            return
        end
    end
end
local function answer(acquired)
    keep_listed(KEYS[3], ARGV[3], acquired, ARGV[4], ARGV[6], 2 * ttl)
    if fast and acquired ~= -1 then
        if acquired == 1 then
            return redis.status_reply('OK')
        end
        return false
    end
    return {acquired, fence, marker, record}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
    if redis.call('TYPE', KEYS[1]).ok ~= 'string' then
        return answer(-1)
    end
    if redis.call('GET', KEYS[1]) ~= 'quorum-lock:shared' then
        return answer(0)
    end
end
local now = server_ms()
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
if ARGV[7] == 'r' then
    local our_turn = ARGV[3] ~= '' and redis.call('GET', KEYS[6]) == ARGV[3]
    if not our_turn and redis.call('EXISTS', KEYS[5]) == 1 then
        return answer(0)
    end
    redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
    if redis.call('PTTL', KEYS[4]) < ttl then
        redis.call('PEXPIRE', KEYS[4], ttl)
    end
    keep_shared(KEYS[1], now, now + ttl)
    local after_wake = redis.call('EXISTS', KEYS[6]) == 1
    if our_turn then
        redis.call('DEL', KEYS[6])
    end
    if after_wake and ARGV[10] then
        hand_on()
    end
    return answer(1)
end
if redis.call('EXISTS', KEYS[4]) == 1 then
    redis.call('SET', KEYS[5], '1', 'PX', tonumber(ARGV[9] or ARGV[2]))
    return answer(0)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('DEL', KEYS[5])
return answer(1)
"
);
pub(crate) static RW_ACQUIRE: Lua = Lua::with_globals(
    &[
        Kind::Lock,
        Kind::Fence,
        Kind::Waiters,
        Kind::Readers,
        Kind::Intent,
        Kind::Turn,
    ],
    &[Global::MaxTtl, Global::Marker],
    RW_ACQUIRE_SRC,
);

/// A reader leaves, and when it was the last live reader, wakes the next waiting client,
/// as the mutex's release does; optionally puts a client back in the waiting list.
///
/// KEYS: the lock key, its readers, its waiting list, its turn. ARGV[1]: the reader's
/// token. ARGV[2]: `'0'`, or to wake a waiter, the lifetime in milliseconds of the turn it
/// gives the woken client. ARGV[3]: the prefix of the clients' wake-up channels.
/// ARGV[4..6] (optional, for the clean-up of a failed attempt): our client id, `'1'` to
/// queue at the head of the waiting list instead of its tail, and the list's expiry in
/// milliseconds.
///
/// The set's own expiry becomes its longest-lived reader's, and so does the lock key's
/// [`SHARED`] (deleted with the last reader): a reader that left no longer keeps the
/// others' expired entries stored, nor a mutex or writer out.
///
/// Returns 0 when the token is not among the readers (nothing removed) and nobody was
/// woken, 1 after removing it when nobody was woken, 2 after removing it and waking one
/// client, which is published `<token>:<lock key>` as the mutex's release publishes it, 3
/// after waking one where the token was absent (the reader's majority was elsewhere: this
/// node lost or never got its entry) and no token holds the lock key. Readers whose expiry
/// passed do not count as live. With ARGV[4], the client is put back in the waiting list (once)
/// whatever else happened: the attempt failed on the whole, and the client still waits.
pub(crate) const READ_RELEASE_SRC: &str = concat!(
    lua_enqueue!(),
    lua_server_ms!(),
    r"
local function wake()
    local now = server_ms()
    if redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf') > 0 then
        return 1
    end
    while true do
        local id = pop_waiter(KEYS[3])
        if not id then
            return 1
        end
        if redis.call('PUBLISH', ARGV[3] .. id, ARGV[1] .. ':' .. KEYS[1]) > 0 then
            redis.call('SET', KEYS[4], id, 'PX', ARGV[2])
            return 2
        end
    end
end
local result = redis.call('ZREM', KEYS[2], ARGV[1])
if result == 1 then
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    local shared = redis.call('TYPE', KEYS[1]).ok == 'string'
        and redis.call('GET', KEYS[1]) == 'quorum-lock:shared'
    if last[2] then
        redis.call('PEXPIREAT', KEYS[2], last[2])
        if shared then
            redis.call('PEXPIREAT', KEYS[1], last[2])
        end
    elseif shared then
        redis.call('DEL', KEYS[1])
    end
end
local function token_holds()
    return redis.call('TYPE', KEYS[1]).ok == 'string'
        and redis.call('GET', KEYS[1]) ~= 'quorum-lock:shared'
end
if ARGV[2] ~= '0' and redis.call('EXISTS', KEYS[3]) == 1 then
    if result == 1 then
        result = wake()
    elseif not token_holds() and wake() == 2 then
        result = 3
    end
end
if ARGV[4] then
    enqueue(KEYS[3], ARGV[4], ARGV[5], ARGV[6])
end
return result
"
);
pub(crate) static READ_RELEASE: Lua = Lua::new(
    &[Kind::Lock, Kind::Readers, Kind::Waiters, Kind::Turn],
    READ_RELEASE_SRC,
)
.repeatable();

/// Extends a reader: its expiry becomes now + the new TTL, if it is still a live reader;
/// re-seats it where the node lost it.
///
/// KEYS: the writer's lock key, the readers, then the ensemble record and the node's
/// marker ([`Global`]). ARGV[1]: the reader's token. ARGV[2]: the new TTL in milliseconds.
/// ARGV[3] (optional): the life in which the client saw this node admitted. Returns 1
/// after raising the record to the TTL (never lowering it), setting the reader's expiry
/// and raising the set's own expiry and the lock key's [`SHARED`] to at least the TTL,
/// when the reader is live here and no token holds the lock key; 2 after the same when it
/// was absent or expired here, the lock key is absent or [`SHARED`] and the node's marker
/// names ARGV[3] (the re-seat of a reader that holds a majority elsewhere); 0, changing
/// nothing, otherwise.
pub(crate) const READ_EXTEND_SRC: &str = concat!(
    lua_raise_record!(),
    lua_server_ms!(),
    lua_keep_shared!(),
    r"
local now = server_ms()
local expiry = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '0')
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'none' and (kind ~= 'string' or redis.call('GET', KEYS[1]) ~= 'quorum-lock:shared') then
    return 0
end
local answer = 1
if expiry <= now then
    if (ARGV[3] or '') == '' or redis.call('GET', KEYS[4]) ~= ARGV[3] then
        return 0
    end
    answer = 2
end
local ttl = tonumber(ARGV[2])
raise_record(KEYS[3], ARGV[2])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[2]) < ttl then
    redis.call('PEXPIRE', KEYS[2], ttl)
end
keep_shared(KEYS[1], now, now + ttl)
return answer
"
);
pub(crate) static READ_EXTEND: Lua = Lua::with_globals(
    &[Kind::Lock, Kind::Readers],
    &[Global::MaxTtl, Global::Marker],
    READ_EXTEND_SRC,
)
.repeatable();

/// The read-write lock's scripts' sources, loaded on each new connection with the others.
pub(crate) const SOURCES: [&str; 4] = [
    RW_ACQUIRE_SRC,
    READ_RELEASE_SRC,
    READ_EXTEND_SRC,
    READERS_SRC,
];

/// `DEL` of the writer intent of lock key `lock` in `space`: sent where a writer that
/// won, or gave up, may have left it (a node that refused the writer for its readers).
pub(crate) fn clear_intent(space: Space<'_>, lock: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("DEL");
    let tag = space.tag_for(std::slice::from_ref(&lock.to_owned()));
    cmd.arg(keys::derived_name(Kind::Intent, space.prefix, lock, tag));
    cmd
}

/// Lists a read-write lock's live readers, for `status`; writes nothing.
///
/// KEYS[1]: the readers. Returns `{now, {token, expiry, token, expiry, ...}}`: the
/// server's time in milliseconds and each reader whose expiry (in the same clock) is
/// later, in expiry order.
pub(crate) const READERS_SRC: &str = concat!(
    lua_server_ms!(),
    r"
local now = server_ms()
return {now, redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')}
"
);
pub(crate) static READERS: Lua = Lua::new(&[Kind::Readers], READERS_SRC).repeatable();
