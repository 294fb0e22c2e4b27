//! Every Lua script the client runs, each with its KEYS/ARGV contract and return codes.
//!
//! Scripts are sent as `EVALSHA` with their precomputed hash (one command built per round
//! and shared by every node, see `net::call::Call::script`); a node that
//! answers `NOSCRIPT` (after `SCRIPT FLUSH`) gets the source with `SCRIPT LOAD` and the call
//! once more. Every new connection also loads all of them first ([`SOURCES`], with the
//! read-write lock's, `protocol::every_source`): a release
//! queued behind a `SET` on a node that is paused must run when the node resumes, when
//! nobody waits for a `NOSCRIPT` answer any more to retry it.
//! All keys of one lock share one token, so the same scripts serve single and multi-resource
//! locks.

use std::sync::OnceLock;

use redis::Script;

use crate::protocol::keys::{self, Global, Kind, Space};

/// A Lua script: its source, the layout of its `KEYS` and, built once (hashing the
/// source), the driver's [`Script`] with the SHA1 that `EVALSHA` names it by.
#[derive(Debug)]
pub(crate) struct Lua {
    pub(crate) source: &'static str,
    /// `KEYS` is one block per kind, in this order, each with one key per lock key: with
    /// `k` lock keys, block `b` (from 0) is `KEYS[b*k + 1 ..= b*k + k]`.
    layout: &'static [Kind],
    /// Whether a call may be sent a second time when the first was refused by a broken
    /// connection before it was written (see `net::call::Call`): running it twice changes
    /// nothing that running it once did not (a read, a compare-and-delete, an expiry reset).
    repeatable: bool,
    /// Node-wide keys after the blocks, in this order (see [`Global`]).
    globals: &'static [Global],
    script: OnceLock<Script>,
}

impl Lua {
    pub(super) const fn new(layout: &'static [Kind], source: &'static str) -> Self {
        Lua::with_globals(layout, &[], source)
    }

    pub(super) const fn with_globals(
        layout: &'static [Kind],
        globals: &'static [Global],
        source: &'static str,
    ) -> Self {
        Lua {
            source,
            layout,
            repeatable: false,
            globals,
            script: OnceLock::new(),
        }
    }

    /// Marks the script safe to send again (see the field).
    pub(super) const fn repeatable(mut self) -> Self {
        self.repeatable = true;
        self
    }

    /// Whether a call of this script may be sent again on a fresh connection.
    pub(crate) fn is_repeatable(&self) -> bool {
        self.repeatable
    }

    /// The script's `KEYS` for the lock keys `locks` in `space`, block by block, then its
    /// node-wide keys (under the same prefix, and on a Cluster member in the slot of the
    /// lock keys, which share one).
    pub(crate) fn keys<'a>(
        &'static self,
        space: Space<'a>,
        locks: &'a [String],
    ) -> impl Iterator<Item = keys::Name<'a>> + Clone + 'a {
        let (prefix, tag) = (space.prefix, space.tag_for(locks));
        self.layout
            .iter()
            .flat_map(move |&kind| {
                (locks.iter()).map(move |lock| keys::derived_name(kind, prefix, lock, tag))
            })
            .chain(
                self.globals
                    .iter()
                    .map(move |&g| keys::global_name(prefix, g, tag)),
            )
    }

    /// The SHA1 digest `EVALSHA` names the script by.
    pub(crate) fn hash(&self) -> &str {
        self.script().get_hash()
    }

    /// The script as the driver's [`Script`], for one-off invocations with fallback.
    pub(crate) fn script(&self) -> &Script {
        self.script.get_or_init(|| Script::new(self.source))
    }
}

/// A boolean script argument, as the scripts compare it: `'1'` or `'0'`.
pub(crate) fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// Lua source of the waiting-list functions, shared by the scripts that keep waiting
/// lists. An entry is `<client id>@<listed at>`: the id (which never holds `@`), then when
/// the node listed it, in its own clock's Unix milliseconds, so that `status` can say who
/// waits and since when.
///
/// - `enqueue(list, id, front, expire_ms)` puts client `id` in `list` unless it is there
///   already, at the head when `front` is `'1'`, else at the tail, and sets the list's
///   expiry;
/// - `unlist(list, id)` takes client `id`'s entry out (returns 1, or 0 when absent);
/// - `pop_waiter(list)` pops the first entry and returns its client id (false: empty).
macro_rules! lua_enqueue {
    () => {
        r"
local function entry_of(list, id)
    local prefix = id .. '@'
    for _, entry in ipairs(redis.call('LRANGE', list, 0, -1)) do
        if string.sub(entry, 1, #prefix) == prefix then
            return entry
        end
    end
    return false
end
local function enqueue(list, id, front, expire_ms)
    if not entry_of(list, id) then
        local time = redis.call('TIME')
        local entry = id .. '@' .. (tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000))
        if front == '1' then
            redis.call('LPUSH', list, entry)
        else
            redis.call('RPUSH', list, entry)
        end
    end
    redis.call('PEXPIRE', list, expire_ms)
end
local function unlist(list, id)
    local entry = entry_of(list, id)
    if entry then
        return redis.call('LREM', list, 0, entry)
    end
    return 0
end
local function pop_waiter(list)
    local entry = redis.call('LPOP', list)
    if not entry then
        return false
    end
    local at = string.find(entry, '@', 1, true)
    if at then
        return string.sub(entry, 1, at - 1)
    end
    return entry
end
"
    };
}
pub(super) use lua_enqueue;

/// Lua source of `keep_listed(list, id, acquired, stay, front, expire_ms)` (with `enqueue`),
/// shared by the scripts whose reply says `acquired` (1 taken, 0 held by another, below 0
/// refused for another reason): client `id` (none when `''`) stays in the waiting list
/// `list` where the lock is held, or where it was taken while other tasks of the client
/// still wait (`stay` is `'1'`), and leaves it where it was taken otherwise.
macro_rules! lua_keep_listed {
    () => {
        concat!(
            lua_enqueue!(),
            r"
local function keep_listed(list, id, acquired, stay, front, expire_ms)
    if id == '' or acquired < 0 then
        return
    end
    if acquired == 1 and stay ~= '1' then
        unlist(list, id)
    else
        enqueue(list, id, front, expire_ms)
    end
end
"
        )
    };
}
pub(super) use lua_keep_listed;

/// Lua source of `raise_record(record_key, ttl_ms)`, shared by every script that acquires or
/// extends: raises the ensemble record to the TTL (never lowers it) and returns the record as
/// it was (nil: none).
macro_rules! lua_raise_record {
    () => {
        r"
local function raise_record(record_key, ttl_ms)
    local record = redis.call('GET', record_key)
    if (tonumber(record or '0') or 0) < tonumber(ttl_ms) then
        redis.call('SET', record_key, ttl_ms)
    end
    return record
end
"
    };
}
pub(super) use lua_raise_record;

/// Lua source of `server_ms()`, shared by the scripts that keep the readers' expiries: the
/// server's clock (`TIME`) in whole milliseconds.
macro_rules! lua_server_ms {
    () => {
        r"
local function server_ms()
    local time = redis.call('TIME')
    return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
"
    };
}
pub(super) use lua_server_ms;

/// Lua source of `ballot_facts(record_key, marker_key, ttl_ms, fast)` (with
/// `raise_record`), shared by the scripts with a fast path of their own: unless `fast`,
/// raises the ensemble record to the TTL and returns the record as it was and the node's
/// marker, what the ballot reads; on the fast path `false, false` (the client knows both).
macro_rules! lua_ballot_facts {
    () => {
        concat!(
            lua_raise_record!(),
            r"
local function ballot_facts(record_key, marker_key, ttl_ms, fast)
    if fast then
        return false, false
    end
    return raise_record(record_key, ttl_ms), redis.call('GET', marker_key)
end
"
        )
    };
}
pub(super) use lua_ballot_facts;

/// All-or-nothing acquisition of one or several keys on one node, with the waiting-list
/// bookkeeping of release notifications, the fencing counter read and the node-side data of
/// restart quarantine.
///
/// KEYS: the lock keys (sorted, distinct), then their fencing counters, then their waiting
/// lists (see [`keys`]), then the ensemble record and the node's marker ([`Global`]).
/// ARGV[1]: our token. ARGV[2]: TTL in milliseconds. ARGV[3]: our client id, or `''` for no
/// bookkeeping. ARGV[4]: `'1'` when other tasks of our client still wait for these keys.
/// ARGV[5]: `'1'` to read the fencing counters. ARGV[6]: `'1'` when this attempt follows
/// our wake-up, so a failure puts us back at the head of the waiting list (the release
/// chose us; whoever overtook us must not cost us our place).
///
/// First raises the ensemble record to the TTL (never lowers it), whatever follows: a vote
/// for this TTL then comes from a node whose record covers it.
///
/// One key is taken with `SET NX PX` (one call tells whether it was free); several are
/// all checked with `EXISTS` before any is set.
///
/// Returns `{acquired, fence, marker, record}`. `acquired` is 1 after setting
/// every key to the token with the TTL, or (nothing set) when a key already exists: 0 when the first one found
/// holds a string (a lock), -1 when it holds another type (a list, a hash, ...: foreign
/// data, whose type is read only on this failure path). `fence` is, with ARGV[5], the highest fencing counter of the keys (0
/// when none exists), else nil. `marker` is the node's marker as it was, `record` the
/// ensemble record before this call raised it (nil: none). With a client id, a failed
/// attempt appends the id (once) to each key's waiting list, so the next release wakes
/// this client; a successful one removes it again unless other tasks of the client still
/// wait (ARGV[4]), in which case it stays queued. Lists expire after twice the TTL unless
/// renewed by a later attempt. Counters, record and marker never expire.
const ACQUIRE_SRC: &str = concat!(
    lua_enqueue!(),
    lua_raise_record!(),
    r"
local k = (#KEYS - 2) / 3
local record = raise_record(KEYS[3 * k + 1], ARGV[2])
local marker = redis.call('GET', KEYS[3 * k + 2])
local function queue(i)
    enqueue(KEYS[2 * k + i], ARGV[3], ARGV[6], 2 * tonumber(ARGV[2]))
end
local fence = false
if ARGV[5] == '1' then
    fence = 0
    for i = 1, k do
        local f = tonumber(redis.call('GET', KEYS[k + i]) or '0') or 0
        if f > fence then
            fence = f
        end
    end
end
local function refused(i)
    if ARGV[3] ~= '' then
        for j = 1, k do
            queue(j)
        end
    end
    if redis.call('TYPE', KEYS[i]).ok ~= 'string' then
        return {-1, fence, marker, record}
    end
    return {0, fence, marker, record}
end
local function listed(i)
    if ARGV[3] ~= '' then
        if ARGV[4] == '1' then
            queue(i)
        else
            unlist(KEYS[2 * k + i], ARGV[3])
        end
    end
end
if k == 1 then
    if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
        return refused(1)
    end
    listed(1)
    return {1, fence, marker, record}
end
for i = 1, k do
    if redis.call('EXISTS', KEYS[i]) == 1 then
        return refused(i)
    end
end
for i = 1, k do
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
    listed(i)
end
return {1, fence, marker, record}
"
);
pub(crate) static ACQUIRE: Lua = Lua::with_globals(
    &[Kind::Lock, Kind::Fence, Kind::Waiters],
    &[Global::MaxTtl, Global::Marker],
    ACQUIRE_SRC,
);

/// Writes a node's marker: the life (`run_id`) in which a client admitted it.
///
/// KEYS: the marker ([`Global::Marker`]). ARGV[1]: the life. Returns 1 after writing it.
const MARK_SRC: &str = r"
redis.call('SET', KEYS[1], ARGV[1])
return 1
";
pub(crate) static MARK: Lua = Lua::with_globals(&[], &[Global::Marker], MARK_SRC).repeatable();

/// Writes a node's marker for the first start of a new ensemble (an operator's statement
/// that no lock was ever granted through its nodes): only where no marker is, so that a
/// node admitted meanwhile, by this or another client, keeps its own.
///
/// KEYS: the marker ([`Global::Marker`]). ARGV[1]: the life. Returns 1 after writing it,
/// 0 when a marker was there (nothing written).
const MARK_NEW_SRC: &str = r"
if redis.call('EXISTS', KEYS[1]) == 1 then
    return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
";
pub(crate) static MARK_NEW: Lua =
    Lua::with_globals(&[], &[Global::Marker], MARK_NEW_SRC).repeatable();

/// Reads, or writes first, a promoted master's promotion record: how long ago, by the
/// node's own clock, a client first learnt its current life.
///
/// KEYS: the record ([`Global::Promoted`]). ARGV[1]: the life. Returns the milliseconds
/// since the record names that life (0 when it names another, or none, or a time ahead of
/// the clock: then it is written now).
const PROMOTED_SINCE_SRC: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local held = redis.call('GET', KEYS[1])
if held then
    local sep = string.find(held, ' ', 1, true)
    local since = sep and tonumber(string.sub(held, sep + 1))
    if since and string.sub(held, 1, sep - 1) == ARGV[1] and since <= now then
        return now - since
    end
end
redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. now)
return 0
";
pub(crate) static PROMOTED_SINCE: Lua =
    Lua::with_globals(&[], &[Global::Promoted], PROMOTED_SINCE_SRC).repeatable();

/// Compare-and-delete, optionally waking the next waiting client.
///
/// KEYS: the lock keys, then their waiting lists, then their turns (see [`keys`]).
/// ARGV[1]: our token. ARGV[2]: `'0'`, or to wake waiters, the lifetime in milliseconds of
/// the turn it gives the woken client. ARGV[3]: the prefix of the clients' wake-up
/// channels. ARGV[4..6] (optional, for the clean-up of a failed attempt): our client id,
/// `'1'` to queue at the head of the waiting lists instead of their tail, and the lists'
/// expiry in milliseconds.
///
/// Deletes every key whose value equals the token and returns `{deleted, woke}`: how many
/// keys it deleted (0: none of them is ours, or they expired) and 1 if it woke a waiting
/// client, else 0. With ARGV[2], for each deleted key, and each key that is absent (it
/// expired here, or our `SET` never landed here while a majority elsewhere granted the
/// lock: the lock is free here all the same, and its waiters listed here must hear of the
/// release), it pops
/// client ids from the key's waiting list until one of them is listening, and publishes
/// `<token>:<key>` on that client's channel (ARGV[3] followed by its id): one client is
/// woken per release and node, in arrival order; ids of clients that went away are
/// skipped. It also records the woken id as the key's turn for ARGV[2] ms,
/// which [`GATE`] makes other waiters respect, through the woken client's hold until the
/// next release passes the turn on (or, waking nobody, deletes it: in the key's own `DEL`,
/// one call for both, as [`RELEASE_ONE`] does).
/// With ARGV[4], it puts the client back in each key's waiting list (once), where the
/// acquire script took it off when it set the key: the attempt failed on the whole, and
/// the client still waits. A key of another type makes `GET` fail with `WRONGTYPE`, which
/// the caller reports as a foreign key.
const RELEASE_SRC: &str = concat!(
    lua_enqueue!(),
    r"
local k = #KEYS / 3
local n = 0
local woke = 0
for i = 1, k do
    local held = redis.call('GET', KEYS[i])
    if held == ARGV[1] then
        n = n + 1
    end
    if held == ARGV[1] and ARGV[2] == '0' then
        redis.call('DEL', KEYS[i])
    elseif ARGV[2] ~= '0' and (held == ARGV[1] or not held) then
        local list = KEYS[k + i]
        local turn = KEYS[2 * k + i]
        while true do
            local id = pop_waiter(list)
            if not id then
                if held then
                    redis.call('DEL', KEYS[i], turn)
                end
                break
            end
            if redis.call('PUBLISH', ARGV[3] .. id, ARGV[1] .. ':' .. KEYS[i]) > 0 then
                if held then
                    redis.call('DEL', KEYS[i])
                end
                redis.call('SET', turn, id, 'PX', ARGV[2])
                woke = 1
                break
            end
        end
    end
end
if ARGV[4] then
    for i = 1, k do
        enqueue(KEYS[k + i], ARGV[4], ARGV[5], ARGV[6])
    end
end
return {n, woke}
"
);
pub(crate) static RELEASE: Lua =
    Lua::new(&[Kind::Lock, Kind::Waiters, Kind::Turn], RELEASE_SRC).repeatable();

/// Compare-and-delete of one lock key, waking nobody: the plain release of a one-key lock
/// (a node that is not the waiting-list node, or notifications off). The same effect as
/// [`RELEASE`] on that key with ARGV[2] `'0'`, without its loops, its waiting-list keys and
/// its reply table: about a third less server time than a `RELEASE` call.
///
/// KEYS[1]: the lock key. ARGV[1]: our token. Returns 1 after deleting the key, 0 when it
/// does not hold the token: `DELIFEQ`'s reply, which stands in for this script on the
/// servers that have it (see [`native`](super::native)).
const UNLOCK_SRC: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
";
pub(crate) static UNLOCK: Lua = Lua::new(&[Kind::Lock], UNLOCK_SRC).repeatable();

/// Compare-and-delete of one lock key that wakes the next waiting client: [`RELEASE`] on one
/// key with a turn lifetime and no requeue, without the general script's loops and reply
/// table (the release of every one-key lock on the waiting-list node).
///
/// KEYS: the lock key, its waiting list, its turn. ARGV[1]: our token. ARGV[2]: the lifetime
/// in milliseconds of the turn it gives the woken client. ARGV[3]: the prefix of the
/// clients' wake-up channels. Returns 0 when the key holds another token, or is absent
/// and nobody waits (nothing changed), 1 after deleting it when nobody was woken (the turn
/// deleted), 2 after deleting it and waking one client, as [`RELEASE`] wakes them, and 3
/// after waking one client while the key was absent (as [`RELEASE`] does then too).
///
/// The key is deleted after the list is popped, in the same script (atomic, so nothing sees
/// the order): waking nobody, one `DEL` takes the key and the turn together, the common
/// case of an uncontended release, four calls instead of five.
const RELEASE_ONE_SRC: &str = concat!(
    lua_enqueue!(),
    r"
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then
    return 0
end
while true do
    local id = pop_waiter(KEYS[2])
    if not id then
        if not held then
            return 0
        end
        redis.call('DEL', KEYS[1], KEYS[3])
        return 1
    end
    if redis.call('PUBLISH', ARGV[3] .. id, ARGV[1] .. ':' .. KEYS[1]) > 0 then
        redis.call('SET', KEYS[3], id, 'PX', ARGV[2])
        if not held then
            return 3
        end
        redis.call('DEL', KEYS[1])
        return 2
    end
end
"
);
pub(crate) static RELEASE_ONE: Lua =
    Lua::new(&[Kind::Lock, Kind::Waiters, Kind::Turn], RELEASE_ONE_SRC).repeatable();

/// Leaves the waiting lists of keys (a waiter that gave up).
///
/// KEYS: the waiting lists of the lock keys. ARGV[1]: our client id. Returns the number of
/// entries removed.
const LEAVE_SRC: &str = concat!(
    lua_enqueue!(),
    r"
local n = 0
for i = 1, #KEYS do
    n = n + unlist(KEYS[i], ARGV[1])
end
return n
"
);
pub(crate) static LEAVE: Lua = Lua::new(&[Kind::Waiters], LEAVE_SRC).repeatable();

/// The waiting list of a lock key, for `status`: KEYS[1] the list; returns its entries in
/// order (`<client id>@<listed at>`, see [`lua_enqueue`]).
const WAITERS_READ_SRC: &str = r"
return redis.call('LRANGE', KEYS[1], 0, -1)
";
pub(crate) static WAITERS_READ: Lua = Lua::new(&[Kind::Waiters], WAITERS_READ_SRC).repeatable();

/// Asks the waiting-list node whether an attempt may go ahead, before sending it: sent by
/// a waiter that was not woken (a poll, or a new `lock()` right after this client's own
/// release woke another client), so it does not take the lock from under the client whose
/// turn it is, nor split the votes with it.
///
/// KEYS: the turns of the lock keys, then their waiting lists (see [`keys`]). ARGV[1]: our
/// client id. ARGV[2]: `'1'` to queue at the head instead of the tail. ARGV[3]: the lists'
/// expiry in milliseconds. Returns 1 unless a key's turn names another client; otherwise queues the client (once)
/// in each key's waiting list and returns 0. The turn lasts while releases hand the lock
/// from one waiter to the next, and at most two node timeouts after the last of them. A
/// key that exists here does not close the gate on its own: the other nodes may still
/// grant a majority (this node may hold a foreign key, or a copy that a majority lost).
const GATE_SRC: &str = concat!(
    lua_enqueue!(),
    r"
local k = #KEYS / 2
local open = 1
for i = 1, k do
    local turn = redis.call('GET', KEYS[i])
    if turn and turn ~= ARGV[1] then
        open = 0
    end
end
if open == 0 then
    for i = 1, k do
        enqueue(KEYS[k + i], ARGV[1], ARGV[2], ARGV[3])
    end
end
return open
"
);
pub(crate) static GATE: Lua = Lua::new(&[Kind::Turn, Kind::Waiters], GATE_SRC);

/// Commits a fencing token next to a lock we hold.
///
/// KEYS: the lock keys, then their fencing counters (see [`keys`]). ARGV[1]: our token.
/// ARGV[2]: the fencing token. Returns 1 after raising every counter to at least ARGV[2]
/// (never lowering one; counters stay plain integers, as older clients read them), or 0,
/// changing nothing, when any lock key does not hold our token.
const FENCE_SRC: &str = r"
local k = #KEYS / 2
for i = 1, k do
    if redis.call('GET', KEYS[i]) ~= ARGV[1] then
        return 0
    end
end
local value = tonumber(ARGV[2])
for i = 1, k do
    if value > (tonumber(redis.call('GET', KEYS[k + i]) or '0') or 0) then
        redis.call('SET', KEYS[k + i], ARGV[2])
    end
end
return 1
";
pub(crate) static FENCE: Lua = Lua::new(&[Kind::Lock, Kind::Fence], FENCE_SRC).repeatable();

/// A write guarded by a fencing token, for data kept in Redis.
///
/// KEYS[1]: the data key. KEYS[2]: the highest token seen for the resource on this server.
/// ARGV[1]: the writer's fencing token. ARGV[2]: the value.
/// Sets KEYS[1] to ARGV[2] and records the token, returning 1, when the token is at least
/// the highest seen; returns 0 and writes nothing for an older token.
const FENCED_SET_SRC: &str = r"
local token = tonumber(ARGV[1])
if token < (tonumber(redis.call('GET', KEYS[2]) or '0') or 0) then
    return 0
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
return 1
";
/// Invoked directly on two keys of the caller's choosing, not through [`Lua::keys`].
pub(crate) static FENCED_SET: Lua = Lua::new(&[], FENCED_SET_SRC);

/// Reads a lock key without touching it (operators' `status`), with the node's restart
/// quarantine data.
///
/// KEYS[1]: the lock key, then the ensemble record and the node's marker ([`Global`]).
/// Returns `{type, pttl, value, marker, record}` where value is the string's content, or
/// nil for other types, and marker and record are as stored (nil: absent).
const INSPECT_SRC: &str = r"
local kind = redis.call('TYPE', KEYS[1]).ok
local pttl = redis.call('PTTL', KEYS[1])
local marker = redis.call('GET', KEYS[3])
local record = redis.call('GET', KEYS[2])
local value = false
if kind == 'string' then
    value = redis.call('GET', KEYS[1])
end
return {kind, pttl, value, marker, record}
";
pub(crate) static INSPECT: Lua = Lua::with_globals(
    &[Kind::Lock],
    &[Global::MaxTtl, Global::Marker],
    INSPECT_SRC,
)
.repeatable();

/// Compare-and-PEXPIRE, all or nothing, and the re-seat of a lock the node lost.
///
/// KEYS: the lock keys, then the ensemble record and the node's marker ([`Global`]).
/// ARGV[1]: our token. ARGV[2]: new TTL in milliseconds. ARGV[3] (optional): the life in
/// which the client saw this node admitted, to re-seat the lock here.
///
/// Returns 1 after raising the record to the new TTL (never lowering it) and resetting
/// the expiry of every key when all of them hold our token. Returns 2 after writing our
/// token with the TTL into every key when none of them exists (the node lost its memory,
/// or the keys expired here) and the node's marker names ARGV[3]: a holder that still
/// holds a majority gets its copy back on a node admitted in its current life, so that a
/// later restart elsewhere does not take its majority. Returns 0, changing nothing,
/// otherwise (a key holds another token, only some keys are missing, or no life matches).
const EXTEND_SRC: &str = concat!(
    lua_raise_record!(),
    r"
local k = #KEYS - 2
local missing = 0
for i = 1, k do
    local value = redis.call('GET', KEYS[i])
    if value == false then
        missing = missing + 1
    elseif value ~= ARGV[1] then
        return 0
    end
end
if missing == 0 then
    raise_record(KEYS[k + 1], ARGV[2])
    for i = 1, k do
        redis.call('PEXPIRE', KEYS[i], ARGV[2])
    end
    return 1
end
if missing < k or (ARGV[3] or '') == '' or redis.call('GET', KEYS[k + 2]) ~= ARGV[3] then
    return 0
end
raise_record(KEYS[k + 1], ARGV[2])
for i = 1, k do
    redis.call('SET', KEYS[i], ARGV[1], 'PX', ARGV[2])
end
return 2
"
);
pub(crate) static EXTEND: Lua =
    Lua::with_globals(&[Kind::Lock], &[Global::MaxTtl, Global::Marker], EXTEND_SRC).repeatable();

/// Every script's source, loaded with `SCRIPT LOAD` on each new connection.
pub(crate) const SOURCES: [&str; 12] = [
    ACQUIRE_SRC,
    MARK_SRC,
    GATE_SRC,
    RELEASE_SRC,
    UNLOCK_SRC,
    RELEASE_ONE_SRC,
    EXTEND_SRC,
    LEAVE_SRC,
    WAITERS_READ_SRC,
    INSPECT_SRC,
    FENCE_SRC,
    FENCED_SET_SRC,
];
