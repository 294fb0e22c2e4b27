//! The scripts of a semaphore's slot locks: a slot is taken and extended as a mutex's lock
//! key is, and each also keeps the semaphore's permit count recorded beside it, so that a
//! client that uses another count is refused while a holder of this one may hold (a slot
//! lock is released by the mutex's scripts; the count record goes with [`PERMIT_FORGET`]
//! after a release or a failed attempt, and otherwise expires a TTL after its last grant
//! or extension).
//!
//! One name is one lock: while permits are held, the lock key of the semaphore's name
//! ([`Kind::Name`], the key of the mutex of that name) holds [`PERMITS_MARK`], so a mutex
//! or read-write lock of the name finds it taken, and a slot is refused while the name
//! holds anything else (a lock's token, the readers' mark). The mark goes and expires with
//! the count record.

use super::keys::{Global, Kind};

/// The value of a name's lock key while permits of the semaphore of that name are held:
/// no token is ever this (tokens start with 32 hex digits).
pub(crate) const PERMITS_MARK: &str = "quorum-lock:permits";

/// Lua: `mark_name(key, ttl)` gives lock key `key` [`PERMITS_MARK`] with at least `ttl`
/// milliseconds left; `name_taken(key)` tells whether it holds anything else.
macro_rules! lua_name_mark {
    () => {
        r"
local function name_taken(key)
    local kind = redis.call('TYPE', key).ok
    return kind ~= 'none'
        and (kind ~= 'string' or redis.call('GET', key) ~= 'quorum-lock:permits')
end
local function mark_name(key, ttl)
    if redis.call('PTTL', key) < ttl then
        redis.call('SET', key, 'quorum-lock:permits', 'PX', ttl)
    end
end
"
    };
}
use super::scripts::{Lua, lua_ballot_facts, lua_enqueue, lua_keep_listed, lua_raise_record};

/// Takes one slot lock on one node, with the semaphore's count record, its waiting list
/// and the restart quarantine data of the mutex's acquire script.
///
/// KEYS: the slot's lock key, the semaphore's count record, the semaphore's waiting list
/// (one for all its slots), the lock key of its name, then the ensemble record and the
/// node's marker ([`Global`]).
/// ARGV[1]: our token. ARGV[2]: TTL in milliseconds. ARGV[3]: the permit count. ARGV[4]:
/// `'1'` for the fast path (as the read-write lock's acquire script: the record is neither
/// raised nor read, nor the marker). ARGV[5]: our client id, or `''` (or absent) for no
/// waiting-list bookkeeping. ARGV[6]: `'1'` when other tasks of our client still wait for
/// a permit. ARGV[7]: `'1'` to be queued at the head (a release woke us).
///
/// Otherwise raises the ensemble record first, as the mutex's script does. A name held by
/// a lock of another kind refuses the slot, and so does a count record other than
/// ARGV[3]. Else the slot is taken with `SET NX PX`, and on success the count record is
/// set to ARGV[3] and the name to [`PERMITS_MARK`], each with at least the TTL left, so
/// that they outlive this slot's key. With a client id, a slot held by another token queues the
/// client (once) in the semaphore's waiting list, so that the next release of any slot
/// wakes it; a slot taken removes it unless ARGV[6] keeps it there. The list expires after
/// twice the TTL unless a later attempt renews it.
///
/// Returns `{acquired, recorded, marker, record}`: `acquired` is 1 after taking the slot,
/// 0 when another token holds it, -1 when the key holds another type (foreign data), -2
/// when the node records another count (`recorded`, else nil), -3 when a lock of another
/// kind holds the name. On the fast path a taken or held slot answers as `SET NX PX` does
/// (status `OK`, nil).
pub(crate) const PERMIT_ACQUIRE_SRC: &str = concat!(
    lua_ballot_facts!(),
    lua_keep_listed!(),
    lua_name_mark!(),
    r"
local fast = ARGV[4] == '1'
local record, marker = ballot_facts(KEYS[5], KEYS[6], ARGV[2], fast)
if name_taken(KEYS[4]) then
    return {-3, false, marker, record}
end
local count = redis.call('GET', KEYS[2])
if count and count ~= ARGV[3] then
    return {-2, tonumber(count) or -1, marker, record}
end
local ttl = tonumber(ARGV[2])
local acquired = 0
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ttl) then
    acquired = 1
    if redis.call('PTTL', KEYS[2]) < ttl then
        redis.call('SET', KEYS[2], ARGV[3], 'PX', ttl)
    end
    mark_name(KEYS[4], ttl)
elseif redis.call('TYPE', KEYS[1]).ok ~= 'string' then
    acquired = -1
end
keep_listed(KEYS[3], ARGV[5] or '', acquired, ARGV[6], ARGV[7], 2 * ttl)
if fast and acquired == 1 then
    return redis.status_reply('OK')
elseif fast and acquired == 0 then
    return false
end
return {acquired, false, marker, record}
"
);
pub(crate) static PERMIT_ACQUIRE: Lua = Lua::with_globals(
    &[Kind::Lock, Kind::PermitCount, Kind::Waiters, Kind::Name],
    &[Global::MaxTtl, Global::Marker],
    PERMIT_ACQUIRE_SRC,
);

/// Extends a slot lock (compare-and-`PEXPIRE`) and the count record with it; re-seats the
/// slot where the node lost it.
///
/// KEYS: the slot's lock key, the count record, the lock key of the semaphore's name, then
/// the ensemble record and the node's marker ([`Global`]). ARGV[1]: our token. ARGV[2]:
/// the new TTL in milliseconds. ARGV[3]: the permit count. ARGV[4] (optional): the life in
/// which the client saw this node admitted. Returns 1 after raising the ensemble record to
/// the TTL (never lowering it), resetting the slot's expiry and raising the count record's
/// and the name's [`PERMITS_MARK`] to at least the TTL, when the slot holds our token and
/// no lock of another kind holds the name; 2 after writing our token into the slot with
/// the TTL and the same for the records, when the slot is absent here, the count record is
/// absent or holds this count, the name is free or marked, and the node's marker names
/// ARGV[4] (the re-seat of a permit that holds a majority elsewhere); 0, changing nothing,
/// otherwise.
pub(crate) const PERMIT_EXTEND_SRC: &str = concat!(
    lua_raise_record!(),
    lua_name_mark!(),
    r"
if name_taken(KEYS[3]) then
    return 0
end
local slot = redis.call('GET', KEYS[1])
local answer = 1
if slot ~= ARGV[1] then
    local count = redis.call('GET', KEYS[2])
    if slot ~= false or (ARGV[4] or '') == '' or (count ~= false and count ~= ARGV[3])
        or redis.call('GET', KEYS[5]) ~= ARGV[4] then
        return 0
    end
    answer = 2
end
local ttl = tonumber(ARGV[2])
raise_record(KEYS[4], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
if redis.call('PTTL', KEYS[2]) < ttl then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ttl)
end
mark_name(KEYS[3], ttl)
return answer
"
);
pub(crate) static PERMIT_EXTEND: Lua = Lua::with_globals(
    &[Kind::Lock, Kind::PermitCount, Kind::Name],
    &[Global::MaxTtl, Global::Marker],
    PERMIT_EXTEND_SRC,
)
.repeatable();

/// Removes the count record and the name's [`PERMITS_MARK`], after a permit's release or a
/// failed attempt, once no slot of that count is left on the node: a record that no slot
/// holds would refuse clients of another count, and the mark locks of another kind of the
/// name, for up to a TTL.
///
/// KEYS: the lock key of every slot of the semaphore for ARGV[1] permits (k of them), then
/// the count record k times and the lock key of the name k times (one per slot: the
/// layout's blocks). ARGV[1]: the permit count. Returns 1 after deleting the record (and
/// the mark, where the name holds it); 0, changing nothing, when it records another count
/// (or none) or a slot of the count is held (its holder's record).
pub(crate) const PERMIT_FORGET_SRC: &str = r"
local k = #KEYS / 3
if redis.call('GET', KEYS[k + 1]) ~= ARGV[1] then
    return 0
end
if redis.call('EXISTS', unpack(KEYS, 1, k)) > 0 then
    return 0
end
redis.call('DEL', KEYS[k + 1])
if redis.call('TYPE', KEYS[2 * k + 1]).ok == 'string'
    and redis.call('GET', KEYS[2 * k + 1]) == 'quorum-lock:permits' then
    redis.call('DEL', KEYS[2 * k + 1])
end
return 1
";
pub(crate) static PERMIT_FORGET: Lua = Lua::new(
    &[Kind::Lock, Kind::PermitCount, Kind::Name],
    PERMIT_FORGET_SRC,
)
.repeatable();

/// The slot locks' scripts' sources, loaded on each new connection with the others.
pub(crate) const SOURCES: [&str; 3] = [PERMIT_ACQUIRE_SRC, PERMIT_EXTEND_SRC, PERMIT_FORGET_SRC];
