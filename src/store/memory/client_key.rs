//! [`ClientKey`]: a client key as the memory store's tables keep it, in 24 bytes.

/// The longest key kept in place, without an allocation of its own.
const INLINE: usize = 22;

/// A client key in a table. Most keys (addresses, IPv6 prefixes, short API keys) are at most
/// 22 bytes and live in the table's own slot; longer ones (at most 64 bytes, or a 33-byte
/// digest: see `key::sanitize`) on the heap. 24 bytes either way, where a `String` takes 24
/// bytes and an allocation for every key.
#[derive(Clone)]
pub(super) enum ClientKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl ClientKey {
    pub(super) fn new(key: &str) -> Self {
        let key = key.as_bytes();
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..key.len()].copy_from_slice(key);
                Self::Inline { len, bytes }
            }
            _ => Self::Heap(key.into()),
        }
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => &bytes[..usize::from(*len).min(INLINE)],
            Self::Heap(bytes) => bytes,
        }
    }

    /// Whether this is `key`.
    #[inline]
    pub(super) fn is(&self, key: &str) -> bool {
        let key = key.as_bytes();
        match self {
            Self::Inline { len, bytes } => usize::from(*len) == key.len() && same_short(bytes, key),
            Self::Heap(bytes) => **bytes == *key,
        }
    }
}

/// Whether `key` is the start of `bytes`: compared in a few overlapping word reads, not by a
/// call to `memcmp`, which costs more than the rest of a lookup for keys this short.
#[inline]
fn same_short(bytes: &[u8; INLINE], key: &[u8]) -> bool {
    let n = key.len();
    match n {
        0 => true,
        1..=3 => bytes[0] == key[0] && bytes[n / 2] == key[n / 2] && bytes[n - 1] == key[n - 1],
        4..=7 => {
            word::<4>(bytes, 0) == word::<4>(key, 0) && word::<4>(bytes, n - 4) == word(key, n - 4)
        }
        8..=INLINE => {
            word::<8>(bytes, 0) == word::<8>(key, 0)
                && word::<8>(bytes, n - 8) == word(key, n - 8)
                && (n <= 16 || word::<8>(bytes, 8) == word(key, 8))
        }
        _ => false,
    }
}

/// The `N` bytes of `s` from `at`.
#[inline(always)]
fn word<const N: usize>(s: &[u8], at: usize) -> [u8; N] {
    let mut word = [0; N];
    word.copy_from_slice(&s[at..at + N]);
    word
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_takes_24_bytes_and_reads_back_as_given() {
        assert_eq!(std::mem::size_of::<ClientKey>(), 24);
        for key in [
            "",
            "10.0.0.1",
            &"a".repeat(22),
            &"b".repeat(23),
            &"c".repeat(64),
        ] {
            let kept = ClientKey::new(key);
            assert_eq!(kept.as_bytes(), key.as_bytes());
            assert!(kept.is(key));
            assert_eq!(matches!(kept, ClientKey::Inline { .. }), key.len() <= 22);
        }
        assert!(!ClientKey::new("ab").is("a"));
        // Every length an inline key can have, and a difference at every position.
        for n in 0..=INLINE + 2 {
            let key: String = (0..n).map(|i| char::from(b'a' + i as u8)).collect();
            assert!(ClientKey::new(&key).is(&key), "{key}");
            for at in 0..n {
                let mut other = key.clone().into_bytes();
                other[at] = b'Z';
                let other = String::from_utf8(other).unwrap();
                assert!(!ClientKey::new(&key).is(&other), "{key} {other}");
                assert!(!ClientKey::new(&other).is(&key), "{other} {key}");
            }
            assert!(!ClientKey::new(&key).is(&format!("{key}a")));
        }
        assert!(!ClientKey::new(&"d".repeat(30)).is(&"d".repeat(29)));
    }
}
