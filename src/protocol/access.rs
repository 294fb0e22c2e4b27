//! [`Access`]: what a lock's token holds, and the table of how the kinds differ: which
//! scripts they go through, what those scripts take beyond the token and the TTL, and
//! which of the shared steps apply to them. The rest of the crate asks these questions,
//! never which kind it has.

use crate::protocol::scripts::{self, Lua};
use crate::protocol::{permit_scripts, rw_scripts};

/// What a lock's holder holds: a mutex, a semaphore's slot, or one side of a read-write
/// lock. It chooses the acquire, release and extension scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Access {
    /// The lock key alone, exclusively.
    #[default]
    Mutex,
    /// A read-write lock's read side: the token among the readers.
    Read,
    /// A read-write lock's write side: the lock key, once no reader is left.
    Write,
    /// A semaphore's slot lock, with the semaphore's permit count.
    Permit(u32),
}

impl Access {
    /// The acquire script's mode argument, for the read-write lock's sides.
    pub(crate) fn mode(self) -> Option<&'static str> {
        match self {
            Access::Mutex | Access::Permit(_) => None,
            Access::Read => Some("r"),
            Access::Write => Some("w"),
        }
    }

    /// A semaphore slot's permit count: its scripts take it, record it beside the slots,
    /// and forget it with the last slot.
    pub(crate) fn permit_count(self) -> Option<u32> {
        match self {
            Access::Permit(count) => Some(count),
            Access::Mutex | Access::Read | Access::Write => None,
        }
    }

    /// Whether holders share the name (readers): a holder of this client is then no reason
    /// for another task to wait, and a task that holds one may not ask for the exclusive
    /// side.
    pub(crate) fn is_shared(self) -> bool {
        self == Access::Read
    }

    /// Whether the lock may cover several resources at once (a mutex only).
    pub(crate) fn takes_many_names(self) -> bool {
        self == Access::Mutex
    }

    /// Whether an attempt may be the plain `SET NX PX` (one key, not listed, no fencing):
    /// a mutex only; the other kinds' scripts check more than the key.
    pub(crate) fn acquires_with_plain_set(self) -> bool {
        self == Access::Mutex
    }

    /// Whether a holder that is done waiting clears the writer intent it may have set.
    pub(crate) fn leaves_intent(self) -> bool {
        self == Access::Write
    }

    /// The extension script.
    pub(crate) fn extend_script(self) -> &'static Lua {
        match self {
            Access::Read => &rw_scripts::READ_EXTEND,
            Access::Permit(_) => &permit_scripts::PERMIT_EXTEND,
            Access::Mutex | Access::Write => &scripts::EXTEND,
        }
    }

    /// The kind's tag in a lock ticket's text: `m`, `r`, `w`, or `p` and the permit count.
    pub(crate) fn ticket_tag(self) -> String {
        match self {
            Access::Mutex => "m".to_owned(),
            Access::Read => "r".to_owned(),
            Access::Write => "w".to_owned(),
            Access::Permit(count) => format!("p{count}"),
        }
    }

    /// The kind a ticket's tag names (see [`ticket_tag`](Self::ticket_tag)); `None` for
    /// any other text.
    pub(crate) fn from_ticket_tag(tag: &str) -> Option<Access> {
        match tag {
            "m" => Some(Access::Mutex),
            "r" => Some(Access::Read),
            "w" => Some(Access::Write),
            _ => {
                let count = tag.strip_prefix('p')?;
                if !count.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                Some(Access::Permit(count.parse().ok().filter(|&k| k > 0)?))
            }
        }
    }

    /// Whether one key's extension may be the native `SET IFEQ` instead of the script: the
    /// lock key is the whole hold (a mutex, a writer).
    pub(crate) fn extends_natively(self) -> bool {
        matches!(self, Access::Mutex | Access::Write)
    }
}
