//! [`Access`]: what a lock's token holds, which chooses the scripts it goes through.

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
}
