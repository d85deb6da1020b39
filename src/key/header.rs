//! [`Header`]: a request header's value, e.g. an API key.

use std::borrow::Cow;
use std::fmt::Write as _;

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::request::Parts;

use super::KeyExtractor;

/// Keys requests by the value of a header, such as `x-api-key` or `x-tenant-id`.
///
/// Why: clients that identify themselves get a bucket of their own, whatever address they come
/// from. The header is not authenticated here: a client can send any value, so limit by a
/// header only when the value is checked elsewhere, or as the first branch of an
/// [`or`](KeyExtractor::or) whose fallback still limits anonymous traffic.
///
/// The first value of the header is the key, as it is. An absent or blank header gives no key.
/// Values that are not printable ASCII still give a key (distinct values give distinct keys);
/// the layer's sanitizer turns it into a digest.
///
/// ```
/// use tollgate::key::{Header, KeyExtractor};
///
/// let key = Header::new("x-api-key");
/// let (req, ()) = http::Request::builder()
///     .header("x-api-key", "k-123")
///     .body(())?
///     .into_parts();
/// assert_eq!(key.extract(&req).as_deref(), Some("k-123"));
/// assert_eq!(key.describe(), "the x-api-key header");
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// `None` when the name given is not a valid header name: it then never matches.
    name: Option<HeaderName>,
    display: String,
}

impl Header {
    /// Reads the header `name` (any case; `"X-Api-Key"` and `"x-api-key"` are the same).
    ///
    /// A name that is not a valid header name (spaces, `:`, ...) matches no request; an error
    /// is logged when the extractor is built.
    pub fn new(name: impl AsRef<str>) -> Self {
        let lowercase = name.as_ref().to_ascii_lowercase();
        let name = HeaderName::from_bytes(lowercase.as_bytes()).ok();
        if name.is_none() {
            tracing::error!(
                header = %lowercase,
                "tollgate: key::Header::new got an invalid header name; it will never find a key"
            );
        }
        Self {
            name,
            display: lowercase,
        }
    }
}

impl KeyExtractor for Header {
    fn extract(&self, req: &Parts) -> Option<String> {
        self.extract_borrowed(req).map(Cow::into_owned)
    }

    fn extract_borrowed<'r>(&self, req: &'r Parts) -> Option<Cow<'r, str>> {
        self.read(&req.headers)
    }

    fn describe(&self) -> String {
        format!("the {} header", self.display)
    }
}

/// Names a request has at most for a look along them, rather than a hash of the name, to
/// find its header: comparing a name costs a few instructions, hashing one a few per byte.
const FEW_NAMES: usize = 8;

/// The first value of `name` in `headers`, as `HeaderMap::get` finds it.
#[inline]
fn first_value<'r>(headers: &'r HeaderMap, name: &HeaderName) -> Option<&'r HeaderValue> {
    if headers.keys_len() <= FEW_NAMES {
        // In order of the names' first insertion, each name's first value first.
        return (headers.iter()).find_map(|(n, value)| (n == name).then_some(value));
    }
    headers.get(name)
}

impl Header {
    /// The key in `headers`: [`extract_borrowed`](KeyExtractor::extract_borrowed)'s, read
    /// where the layer has the request's headers and not its head.
    #[inline]
    pub(crate) fn read<'r>(&self, headers: &'r HeaderMap) -> Option<Cow<'r, str>> {
        let value = first_value(headers, self.name.as_ref()?)?;
        if let Ok(text) = value.to_str() {
            // Visible ASCII and tabs (see `to_str`): blank is spaces and tabs only.
            let blank = text.bytes().all(|b| b == b' ' || b == b'\t');
            return (!blank).then_some(Cow::Borrowed(text));
        }
        Some(Cow::Owned(Self::not_ascii(value.as_bytes())))
    }

    /// The key of a value that is not visible ASCII.
    #[cold]
    fn not_ascii(bytes: &[u8]) -> String {
        if let Ok(text) = std::str::from_utf8(bytes) {
            // Not ASCII, so distinct from every ASCII value; digested by the sanitizer.
            return text.to_owned();
        }
        // Not UTF-8: `\u{1}` (never in a header value) then the bytes in hex, so no two values
        // share a key and none collides with a text value.
        let mut key = String::with_capacity(1 + 2 * bytes.len());
        key.push('\u{1}');
        for b in bytes {
            let _ = write!(key, "{b:02x}");
        }
        key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn with_value(value: HeaderValue) -> Parts {
        let mut req = http::Request::builder().body(()).unwrap().into_parts().0;
        req.headers.insert("x-api-key", value);
        req
    }

    #[test]
    fn reads_value_as_is() {
        let key = Header::new("X-Api-Key");
        let req = with_value(HeaderValue::from_static("Abc 123=="));
        assert_eq!(key.extract(&req).as_deref(), Some("Abc 123=="));
        assert_eq!(key.describe(), "the x-api-key header");
    }

    #[test]
    fn absent_or_blank_is_none() {
        let key = Header::new("x-api-key");
        let (req, ()) = http::Request::builder().body(()).unwrap().into_parts();
        assert_eq!(key.extract(&req), None);
        assert_eq!(key.extract(&with_value(HeaderValue::from_static(""))), None);
        assert_eq!(
            key.extract(&with_value(HeaderValue::from_static("  "))),
            None
        );
    }

    #[test]
    fn first_of_repeated_values() {
        let key = Header::new("x-api-key");
        let (req, ()) = http::Request::builder()
            .header("x-api-key", "one")
            .header("x-api-key", "two")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(key.extract(&req).as_deref(), Some("one"));
    }

    #[test]
    fn non_ascii_values_are_distinct_keys() {
        let key = Header::new("x-api-key");
        let utf8 = key
            .extract(&with_value(
                HeaderValue::from_bytes("clé".as_bytes()).unwrap(),
            ))
            .unwrap();
        let raw = key
            .extract(&with_value(HeaderValue::from_bytes(b"cl\xe9").unwrap()))
            .unwrap();
        assert_eq!(utf8, "clé");
        assert_eq!(raw, "\u{1}636ce9");
        assert_ne!(utf8, raw);
        assert!(crate::key::sanitize(raw).starts_with('#'));
    }

    /// Few names or many, the key is the header's first value, as `HeaderMap::get` finds it.
    #[test]
    fn first_value_with_few_or_many_names() {
        let key = Header::new("X-Api-Key");
        for others in [0, 3, FEW_NAMES, FEW_NAMES + 5] {
            let mut builder = http::Request::builder();
            for i in 0..others / 2 {
                builder = builder.header(format!("x-before-{i}"), "b");
            }
            builder = builder
                .header("x-api-key", "one")
                .header("x-api-key", "two");
            for i in others / 2..others {
                builder = builder.header(format!("x-after-{i}"), "a");
            }
            let (req, ()) = builder.body(()).unwrap().into_parts();
            assert_eq!(
                key.extract(&req).as_deref(),
                Some("one"),
                "{others} other names"
            );
            let absent = Header::new("x-absent");
            assert_eq!(absent.extract(&req), None);
        }
    }

    /// The layer reads keys borrowed: the same keys, a plain value not copied.
    #[test]
    fn borrowed_keys_are_the_same_keys() {
        let key = Header::new("x-api-key");
        let values = [&b"k-1"[..], b"", b" \t", b"cl\xc3\xa9", b"cl\xe9", b"a\tb"];
        for value in values {
            let req = with_value(HeaderValue::from_bytes(value).unwrap());
            let borrowed = key.extract_borrowed(&req);
            assert_eq!(borrowed.as_deref(), key.extract(&req).as_deref());
        }
        let req = with_value(HeaderValue::from_static("k-1"));
        assert!(matches!(
            key.extract_borrowed(&req),
            Some(Cow::Borrowed("k-1"))
        ));
    }

    #[test]
    fn invalid_name_never_matches() {
        let key = Header::new("bad name");
        let (req, ()) = http::Request::builder()
            .header("x-api-key", "one")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(key.extract(&req), None);
        assert_eq!(key.describe(), "the bad name header");
    }
}
