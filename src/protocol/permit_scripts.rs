//! The scripts of a semaphore's slot locks: a slot is taken and extended as a mutex's lock
//! key is, and each also keeps the semaphore's permit count recorded beside it, so that a
//! client that uses another count is refused while a holder of this one may hold (a slot
//! lock is released by the mutex's scripts; a failed attempt's count record goes with
//! [`PERMIT_FORGET`]).

use super::keys::{Global, Kind};
use super::scripts::{Lua, lua_ballot_facts, lua_enqueue, lua_keep_listed, lua_raise_record};

/// Takes one slot lock on one node, with the semaphore's count record, its waiting list
/// and the restart quarantine data of the mutex's acquire script.
///
/// KEYS: the slot's lock key, the semaphore's count record, the semaphore's waiting list
/// (one for all its slots), then the ensemble record and the node's marker ([`Global`]).
/// ARGV[1]: our token. ARGV[2]: TTL in milliseconds. ARGV[3]: the permit count. ARGV[4]:
/// `'1'` for the fast path (as the read-write lock's acquire script: the record is neither
/// raised nor read, nor the marker). ARGV[5]: our client id, or `''` (or absent) for no
/// waiting-list bookkeeping. ARGV[6]: `'1'` when other tasks of our client still wait for
/// a permit. ARGV[7]: `'1'` to be queued at the head (a release woke us).
///
/// Otherwise raises the ensemble record first, as the mutex's script does. A count record
/// other than ARGV[3] refuses the slot. Else the slot is taken with `SET NX PX`, and on
/// success the count record is set to ARGV[3] with at least the TTL left, so that it
/// outlives this slot's key. With a client id, a slot held by another token queues the
/// client (once) in the semaphore's waiting list, so that the next release of any slot
/// wakes it; a slot taken removes it unless ARGV[6] keeps it there. The list expires after
/// twice the TTL unless a later attempt renews it.
///
/// Returns `{acquired, recorded, marker, record}`: `acquired` is 1 after taking the slot,
/// 0 when another token holds it, -1 when the key holds another type (foreign data), -2
/// when the node records another count (`recorded`, else nil). On the fast path a taken or
/// held slot answers as `SET NX PX` does (status `OK`, nil).
pub(crate) const PERMIT_ACQUIRE_SRC: &str = concat!(
    lua_ballot_facts!(),
    lua_keep_listed!(),
    r"
local fast = ARGV[4] == '1'
local record, marker = ballot_facts(KEYS[4], KEYS[5], ARGV[2], fast)
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
    &[Kind::Lock, Kind::PermitCount, Kind::Waiters],
    &[Global::MaxTtl, Global::Marker],
    PERMIT_ACQUIRE_SRC,
);

/// Extends a slot lock (compare-and-`PEXPIRE`) and the count record with it; re-seats the
/// slot where the node lost it.
///
/// KEYS: the slot's lock key, the count record, then the ensemble record and the node's
/// marker ([`Global`]). ARGV[1]: our token. ARGV[2]: the new TTL in milliseconds.
/// ARGV[3]: the permit count. ARGV[4] (optional): the life in which the client saw this
/// node admitted. Returns 1 after raising the ensemble record to the TTL (never lowering
/// it), resetting the slot's expiry and raising the count record's to at least the TTL,
/// when the slot holds our token; 2 after writing our token into the slot with the TTL
/// and the same for the records, when the slot is absent here, the count record is absent
/// or holds this count, and the node's marker names ARGV[4] (the re-seat of a permit that
/// holds a majority elsewhere); 0, changing nothing, otherwise.
pub(crate) const PERMIT_EXTEND_SRC: &str = concat!(
    lua_raise_record!(),
    r"
local slot = redis.call('GET', KEYS[1])
local answer = 1
if slot ~= ARGV[1] then
    local count = redis.call('GET', KEYS[2])
    if slot ~= false or (ARGV[4] or '') == '' or (count ~= false and count ~= ARGV[3])
        or redis.call('GET', KEYS[4]) ~= ARGV[4] then
        return 0
    end
    answer = 2
end
local ttl = tonumber(ARGV[2])
raise_record(KEYS[3], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
if redis.call('PTTL', KEYS[2]) < ttl then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ttl)
end
return answer
"
);
pub(crate) static PERMIT_EXTEND: Lua = Lua::with_globals(
    &[Kind::Lock, Kind::PermitCount],
    &[Global::MaxTtl, Global::Marker],
    PERMIT_EXTEND_SRC,
)
.repeatable();

/// Removes the count record a failed attempt may have set beside a slot it took, once no
/// slot of that count is left on the node: the attempt's slot is released, and a record
/// that no slot holds would refuse clients of the count in use there for up to a TTL.
///
/// KEYS: the lock key of every slot of the semaphore for ARGV[1] permits (k of them), then
/// the count record k times (one per slot: the layout's block). ARGV[1]: the permit count.
/// Returns 1 after deleting the record; 0, changing nothing, when it records another count
/// (or none) or a slot of the count is held (its holder's record).
pub(crate) const PERMIT_FORGET_SRC: &str = r"
local k = #KEYS / 2
if redis.call('GET', KEYS[k + 1]) ~= ARGV[1] then
    return 0
end
if redis.call('EXISTS', unpack(KEYS, 1, k)) > 0 then
    return 0
end
redis.call('DEL', KEYS[k + 1])
return 1
";
pub(crate) static PERMIT_FORGET: Lua =
    Lua::new(&[Kind::Lock, Kind::PermitCount], PERMIT_FORGET_SRC).repeatable();

/// The slot locks' scripts' sources, loaded on each new connection with the others.
pub(crate) const SOURCES: [&str; 3] = [PERMIT_ACQUIRE_SRC, PERMIT_EXTEND_SRC, PERMIT_FORGET_SRC];
