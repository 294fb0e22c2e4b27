//! Redis Cluster's hash slots: which of the 16384 slots a key belongs to (CRC16 of the key,
//! or of its hash tag), and one short hash tag per slot, so that every key a script touches
//! can be put in the slot of its lock key.

use std::sync::OnceLock;

/// How many hash slots a Redis Cluster has.
pub(crate) const SLOTS: u16 = 16384;

/// The slot of `key`: CRC16 (XMODEM) of its hash tag, the text between its first `{` and
/// the first `}` after it when that text is not empty, else of the whole key, modulo 16384.
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    crc16(hashed_part(key)) % SLOTS
}

/// The part of `key` its slot is computed from (see [`slot_of`]).
fn hashed_part(key: &[u8]) -> &[u8] {
    let Some(open) = key.iter().position(|&b| b == b'{') else {
        return key;
    };
    let after = key.get(open + 1..).unwrap_or_default();
    match after.iter().position(|&b| b == b'}') {
        Some(0) | None => key,
        Some(close) => after.get(..close).unwrap_or(key),
    }
}

/// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster uses it.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The characters the tags are made of.
const TAG_ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The name part that puts a key in `slot`: `{T}:`, where `T` (one to three characters of
/// `[0-9A-Za-z]`, the first such in length then alphabet order) hashes to `slot`. Inserted
/// before anything else in a name with braces, it is the name's hash tag.
pub(crate) fn slot_tag(slot: u16) -> &'static str {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    let tags = TAGS.get_or_init(every_slot_tag);
    tags.get(usize::from(slot % SLOTS))
        .map_or("", String::as_str)
}

/// [`slot_tag`] for every slot, in slot order.
fn every_slot_tag() -> Vec<String> {
    let mut tags: Vec<Option<String>> = vec![None; usize::from(SLOTS)];
    let mut missing = usize::from(SLOTS);
    let mut candidate = Vec::with_capacity(3);
    'lengths: for len in 1..=3 {
        let count = TAG_ALPHABET.len().pow(len);
        for n in 0..count {
            candidate.clear();
            let mut rest = n;
            for _ in 0..len {
                candidate.push(TAG_ALPHABET[rest % TAG_ALPHABET.len()]);
                rest /= TAG_ALPHABET.len();
            }
            let entry = &mut tags[usize::from(slot_of(&candidate))];
            if entry.is_none() {
                let text = String::from_utf8_lossy(&candidate);
                *entry = Some(format!("{{{text}}}:"));
                missing -= 1;
                if missing == 0 {
                    break 'lengths;
                }
            }
        }
    }
    tags.into_iter().map(Option::unwrap_or_default).collect()
}

/// Whether `text` has a `{` that does not open a complete, non-empty hash tag: a key
/// prefix with one would make the hash tag of every name after it depend on what follows.
pub(crate) fn has_open_brace(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.contains(&b'{') && std::ptr::eq(hashed_part(bytes), bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_those_redis_cluster_computes() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot_of(b"foo"), 12182);
        assert_eq!(slot_of(b"bar"), 5061);
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b"foo{}{bar}"), slot_of(b"foo{}{bar}"));
        assert_ne!(slot_of(b"foo{}{bar}"), slot_of(b"bar"));
        assert_eq!(slot_of(b"foo{{bar}}zap"), slot_of(b"{bar"));
        assert_eq!(slot_of(b"foo{bar}{zap}"), slot_of(b"bar"));
        assert_eq!(slot_of(b"no{close"), slot_of(b"no{close"));
    }

    #[test]
    fn every_slot_has_a_short_tag_that_hashes_to_it() {
        for slot in 0..SLOTS {
            let tag = slot_tag(slot);
            assert!(tag.len() >= 4 && tag.len() <= 6, "{slot}: {tag:?}");
            assert!(tag.starts_with('{') && tag.ends_with("}:"), "{tag}");
            assert_eq!(slot_of(tag.as_bytes()), slot, "{tag}");
            assert_eq!(slot_of(format!("{tag}any:name").as_bytes()), slot);
        }
    }

    #[test]
    fn prefixes_with_stray_braces_are_told_apart() {
        assert!(!has_open_brace("app:"));
        assert!(!has_open_brace("{app}:"));
        assert!(has_open_brace("a{b:"));
        assert!(!has_open_brace("a}b:"));
        assert!(has_open_brace("{}:"));
    }
}
