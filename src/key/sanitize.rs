//! The sanitizer every key passes through before a store sees it.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

/// Longest key kept as it is, in bytes.
const MAX_PLAIN_LEN: usize = 64;

/// The key a store may use for the client key `key`: what the layer and the door do to every
/// key before the engine sees it, and what a front end of your own does to keys clients send.
///
/// Keys come from requests, so they are bounded and made safe here: a key of at most 64 bytes,
/// all printable ASCII (`0x20..=0x7e`) other than `{` and `}`, is kept as it is. Anything else
/// (longer, control bytes, non-ASCII, braces that would break Redis Cluster hash tags) becomes
/// `#` and the first 16 bytes of its SHA-256 in lowercase hex, 33 bytes in all. Keys starting
/// with `#` are digested too, so a client cannot send a key that equals another's digest.
#[inline]
pub fn sanitize(key: String) -> String {
    if is_plain_key(&key) {
        return key;
    }
    digest(&key)
}

/// [`sanitize`] of a key that may be borrowed: a plain key stays as it is, borrowed or not.
#[inline]
pub(crate) fn sanitize_borrowed(key: Cow<'_, str>) -> Cow<'_, str> {
    if is_plain_key(&key) {
        return key;
    }
    Cow::Owned(digest(&key))
}

/// Whether `key` is kept as it is (see [`sanitize`]).
#[inline]
fn is_plain_key(key: &str) -> bool {
    // Eight bytes at a time, each eight without early exits, which the compiler checks
    // together (keys are short, and nearly all plain); then the few bytes left.
    let (words, rest) = key.as_bytes().as_chunks::<8>();
    key.len() <= MAX_PLAIN_LEN
        && !key.starts_with('#')
        && words
            .iter()
            .all(|word| word.iter().fold(true, |plain, &b| plain & is_plain(b)))
        && rest.iter().all(|&b| is_plain(b))
}

/// `#` and the first 16 bytes of `key`'s SHA-256 in lowercase hex.
#[cold]
fn digest(key: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(33);
    out.push('#');
    for b in digest.iter().take(16) {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0x0f)]));
    }
    out
}

/// Printable ASCII (`0x20..=0x7e`) but for `{` and `}`.
#[inline(always)]
fn is_plain(b: u8) -> bool {
    (0x20..=0x7e).contains(&b) && b != b'{' && b != b'}'
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn brace_free(key: &str) -> bool {
        !key.contains(['{', '}'])
    }

    fn is_digest(key: &str) -> bool {
        key.len() == 33
            && key.starts_with('#')
            && key[1..]
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }

    #[test]
    fn plain_keys_kept() {
        for key in [
            "",
            "10.0.0.1",
            "2001:db8::/64",
            "~:k 1",
            "8:10.0.0.1,6:/login,",
        ] {
            assert_eq!(sanitize(key.to_owned()), key);
        }
        let longest = "a".repeat(64);
        assert_eq!(sanitize(longest.clone()), longest);
    }

    #[test]
    fn odd_keys_digested() {
        for key in [
            "a".repeat(65),
            "{tag}".to_owned(),
            "a}".to_owned(),
            "tab\there".to_owned(),
            "nul\0".to_owned(),
            "del\x7f".to_owned(),
            "clé".to_owned(),
            "#0123456789abcdef0123456789abcdef".to_owned(),
        ] {
            let out = sanitize(key.clone());
            assert!(is_digest(&out), "{key:?} -> {out:?}");
        }
    }

    #[test]
    fn digest_is_sha256_prefix_and_stable() {
        let long = "x".repeat(100);
        assert_eq!(sanitize(long.clone()), sanitize(long));
        assert_ne!(sanitize("{a".to_owned()), sanitize("{b".to_owned()));
        // SHA-256("{") = 021fb596db81e6d02bf3d2586ee3981fe519f275c0ac9ca76bbcf2ebb4097d96
        assert_eq!(
            sanitize("{".to_owned()),
            "#021fb596db81e6d02bf3d2586ee3981f"
        );
    }

    /// A byte that is not plain is found wherever it is, in one of the eight-byte words the
    /// check reads or in the bytes after them; the plain bytes at the edges are kept.
    #[test]
    fn every_position_of_a_key_is_checked() {
        for len in 1..=24 {
            for at in 0..len {
                for bad in [0x00, 0x1f, 0x7f, b'{', b'}', 0x80, 0xff] {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = bad;
                    let key = String::from_utf8_lossy(&bytes).into_owned();
                    assert!(is_digest(&sanitize(key.clone())), "{key:?}");
                }
                for good in [b' ', b'z', b'|', b'~', b'#'] {
                    let mut bytes = vec![b'a'; len];
                    bytes[at] = good;
                    let key = String::from_utf8(bytes).unwrap();
                    let kept = !(at == 0 && good == b'#');
                    assert_eq!(sanitize(key.clone()) == key, kept, "{key:?}");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn bounded_and_brace_free(key in ".*") {
            let out = sanitize(key.clone());
            prop_assert!(out.len() <= 64);
            prop_assert!(brace_free(&out));
            prop_assert!(out.bytes().all(|b| (0x20..=0x7e).contains(&b)));
            prop_assert!(out == key || is_digest(&out));
        }

        #[test]
        fn bounded_on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let key = String::from_utf8_lossy(&bytes).into_owned();
            let out = sanitize(key);
            prop_assert!(out.len() <= 64);
            prop_assert!(brace_free(&out));
        }

        #[test]
        fn borrowed_keys_sanitized_alike(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let key = String::from_utf8_lossy(&bytes).into_owned();
            let borrowed = sanitize_borrowed(Cow::Borrowed(&key)).into_owned();
            prop_assert_eq!(borrowed, sanitize(key.clone()));
        }

        #[test]
        fn printable_short_keys_kept(key in "[ -z|~]{0,64}") {
            prop_assume!(!key.starts_with('#'));
            prop_assert_eq!(sanitize(key.clone()), key);
        }
    }
}
