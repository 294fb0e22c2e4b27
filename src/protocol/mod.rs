//! What goes over the wire: the Lua scripts with their KEYS/ARGV contracts, the native
//! commands that stand in for some of them on servers that have them, the names of every
//! key and channel the library uses, and the decoders of the replies (`INFO`'s text
//! among them).
//!
//! Key and channel names are spelled here and nowhere else, in Rust only: the scripts get
//! every key they touch through `KEYS` (see [`scripts::Lua`]'s key layout), so a key's name
//! can change in one place and a server can see every key a script touches.

pub(crate) mod holder;
pub(crate) mod info;
pub(crate) mod keys;
pub(crate) mod native;
pub(crate) mod reply;
pub(crate) mod rw_scripts;
pub(crate) mod scripts;
