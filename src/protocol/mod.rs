//! What goes over the wire: the Lua scripts with their KEYS/ARGV contracts, the native
//! commands that stand in for some of them on servers that have them, the names of every
//! key and channel the library uses, and the decoders of the replies (`INFO`'s text
//! among them).
//!
//! Key and channel names are spelled here and nowhere else, in Rust only: the scripts get
//! every key they touch through `KEYS` (see [`scripts::Lua`]'s key layout), so a key's name
//! can change in one place and a server can see every key a script touches.

pub(crate) mod access;
pub(crate) mod holder;
pub(crate) mod info;
pub(crate) mod keys;
pub(crate) mod native;
pub(crate) mod permit_scripts;
pub(crate) mod reply;
pub(crate) mod rw_scripts;
pub(crate) mod scripts;
pub(crate) mod slots;
pub(crate) mod term_scripts;

/// Every script's source, loaded with `SCRIPT LOAD` on each new connection.
pub(crate) fn every_source() -> impl Iterator<Item = &'static str> {
    (scripts::SOURCES.iter())
        .chain(&rw_scripts::SOURCES)
        .chain(&permit_scripts::SOURCES)
        .chain(&term_scripts::SOURCES)
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_preloaded_once() {
        use permit_scripts::{PERMIT_ACQUIRE, PERMIT_EXTEND, PERMIT_FORGET};
        use rw_scripts::{READ_EXTEND, READ_RELEASE, READERS, RW_ACQUIRE};
        use scripts::{
            ACQUIRE, EXTEND, FENCE, FENCED_SET, GATE, INSPECT, LEAVE, MARK, RELEASE, RELEASE_ONE,
            UNLOCK, WAITERS_READ,
        };
        use term_scripts::{
            CANDIDATE_ENTER, CANDIDATE_LEAVE, CANDIDATES_READ, TERM_CLEAR, TERM_READ, TERM_WRITE,
        };
        let every = [
            &ACQUIRE,
            &MARK,
            &GATE,
            &RELEASE,
            &UNLOCK,
            &RELEASE_ONE,
            &EXTEND,
            &LEAVE,
            &WAITERS_READ,
            &INSPECT,
            &FENCE,
            &FENCED_SET,
            &RW_ACQUIRE,
            &READ_RELEASE,
            &READ_EXTEND,
            &READERS,
            &PERMIT_ACQUIRE,
            &PERMIT_EXTEND,
            &PERMIT_FORGET,
            &TERM_WRITE,
            &TERM_READ,
            &TERM_CLEAR,
            &CANDIDATE_ENTER,
            &CANDIDATE_LEAVE,
            &CANDIDATES_READ,
        ];
        let loaded: Vec<&str> = every_source().collect();
        assert_eq!(loaded.len(), every.len());
        for lua in every {
            assert!(loaded.contains(&lua.source), "{}", lua.source);
        }
    }

    /// The marks a kind writes on a lock key are Lua literals in its scripts: each must be
    /// the Rust constant that the rest of the crate compares with.
    #[test]
    fn every_mark_literal_in_the_scripts_is_its_constant() {
        let kinds: [(&[&str], &str); 2] = [
            (&rw_scripts::SOURCES, rw_scripts::SHARED),
            (&permit_scripts::SOURCES, permit_scripts::PERMITS_MARK),
        ];
        for (sources, mark) in kinds {
            let quoted = format!("'{mark}'");
            let marks: usize = sources.iter().map(|s| s.matches(&quoted).count()).sum();
            let any: usize = (sources.iter())
                .map(|s| s.matches("'quorum-lock:").count())
                .sum();
            assert!(marks > 0, "the scripts name {quoted}");
            assert_eq!(any, marks, "every mark literal in the scripts is {quoted}");
        }
    }
}
