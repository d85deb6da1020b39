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
    pub(super) fn is(&self, key: &str) -> bool {
        self.as_bytes() == key.as_bytes()
    }
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
        assert!(!ClientKey::new(&"d".repeat(30)).is(&"d".repeat(29)));
    }
}
