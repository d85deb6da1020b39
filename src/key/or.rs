//! [`Or`]: a fallback from one extractor to another.

use std::borrow::Cow;
use std::fmt;

use http::request::Parts;

use super::KeyExtractor;

/// Marks keys from the fallback branch: `~:` then the key.
const FALLBACK: &str = "~:";
/// Marks keys from the first branch that happen to start with `~`: one more `~` in front.
const ESCAPE: char = '~';

/// The first extractor's key when it has one, else the second's; built by
/// [`KeyExtractor::or`].
///
/// Why: limit API clients by their key and everyone else by their address, without letting
/// the two meet. Keys from `B` get the prefix `~:`, and keys from `A` that start with `~` get
/// one more `~` (so they start with `~~`); other keys from `A` are unchanged. No key of one
/// branch can then equal a key of the other: a header value `10.0.0.1` stays `10.0.0.1`, the
/// peer `10.0.0.1` becomes `~:10.0.0.1`.
///
/// ```
/// use std::net::SocketAddr;
/// use axum::extract::ConnectInfo;
/// use tollgate::key::{Header, KeyExtractor, PeerIp};
///
/// let key = Header::new("x-api-key").or(PeerIp::default());
/// let peer: SocketAddr = "10.0.0.1:4000".parse()?;
/// let (anonymous, ()) = http::Request::builder()
///     .extension(ConnectInfo(peer))
///     .body(())?
///     .into_parts();
/// assert_eq!(key.extract(&anonymous).as_deref(), Some("~:10.0.0.1"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Or<A, B> {
    first: A,
    second: B,
}

impl<A, B> Or<A, B> {
    pub(crate) fn new(first: A, second: B) -> Self {
        Self { first, second }
    }
}

impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for Or<A, B> {
    fn extract(&self, req: &Parts) -> Option<String> {
        self.extract_borrowed(req).map(Cow::into_owned)
    }

    fn extract_borrowed<'r>(&self, req: &'r Parts) -> Option<Cow<'r, str>> {
        if let Some(key) = self.first.extract_borrowed(req) {
            return Some(if key.starts_with(ESCAPE) {
                Cow::Owned(format!("{ESCAPE}{key}"))
            } else {
                key
            });
        }
        (self.second.extract_borrowed(req)).map(|key| Cow::Owned(format!("{FALLBACK}{key}")))
    }

    fn describe(&self) -> String {
        format!("{} or {}", self.first.describe(), self.second.describe())
    }
}

impl<A: KeyExtractor, B: KeyExtractor> fmt::Debug for Or<A, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Or")
            .field("first", &self.first.describe())
            .field("second", &self.second.describe())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{Header, PeerIp};
    use axum::extract::ConnectInfo;
    use proptest::prelude::*;
    use std::net::SocketAddr;

    fn request(header: Option<&str>) -> Parts {
        let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let mut builder = http::Request::builder().extension(ConnectInfo(peer));
        if let Some(value) = header {
            builder = builder.header("x-key", value);
        }
        builder.body(()).unwrap().into_parts().0
    }

    #[test]
    fn first_when_present_else_second() {
        let key = Header::new("x-key").or(PeerIp::default());
        assert_eq!(key.extract(&request(Some("abc"))).as_deref(), Some("abc"));
        assert_eq!(key.extract(&request(None)).as_deref(), Some("~:10.0.0.1"));
        assert_eq!(
            key.describe(),
            "the x-key header or the client's IP address"
        );
    }

    #[test]
    fn branches_never_collide() {
        let key = Header::new("x-key").or(PeerIp::default());
        let by_ip = key.extract(&request(None)).unwrap();
        for forged in ["10.0.0.1", "~:10.0.0.1", "~10.0.0.1", ":10.0.0.1"] {
            let by_header = key.extract(&request(Some(forged))).unwrap();
            assert_ne!(by_header, by_ip, "{forged}");
        }
        assert_eq!(
            key.extract(&request(Some("~:10.0.0.1"))).as_deref(),
            Some("~~:10.0.0.1")
        );
    }

    #[test]
    fn neither_is_none() {
        let key = crate::key::from_fn(|_| None).or(crate::key::from_fn(|_| None));
        assert_eq!(key.extract(&request(None)), None);
        assert_eq!(
            format!("{key:?}"),
            r#"Or { first: "a client key", second: "a client key" }"#
        );
    }

    fn constant(key: Option<String>) -> impl KeyExtractor {
        crate::key::from_fn(move |_: &Parts| key.clone())
    }

    proptest! {
        #[test]
        fn injective_across_branches(a in ".{0,12}", b in ".{0,12}", c in ".{0,12}") {
            let req = request(None);
            let first = constant(Some(a.clone())).or(constant(None)).extract(&req);
            let second = constant(None).or(constant(Some(b.clone()))).extract(&req);
            prop_assert_ne!(&first, &second);
            // Nested: `x.or(y).or(z)` keeps all three apart.
            let nested = |x: Option<String>, y: Option<String>, z: Option<String>| {
                constant(x).or(constant(y)).or(constant(z)).extract(&req)
            };
            let keys = [
                nested(Some(a.clone()), None, None),
                nested(None, Some(b.clone()), None),
                nested(None, None, Some(c.clone())),
            ];
            prop_assert_ne!(&keys[0], &keys[1]);
            prop_assert_ne!(&keys[0], &keys[2]);
            prop_assert_ne!(&keys[1], &keys[2]);
        }

        #[test]
        fn injective_within_first_branch(a in "~?.{0,8}", b in "~?.{0,8}") {
            prop_assume!(a != b);
            let req = request(None);
            let ka = constant(Some(a)).or(constant(None)).extract(&req);
            let kb = constant(Some(b)).or(constant(None)).extract(&req);
            prop_assert_ne!(ka, kb);
        }
    }
}

/// Gives the built-in extractors an inherent `or`, so `key::Header::new("x").or(…)` works
/// without importing [`KeyExtractor`].
macro_rules! inherent_or {
    ($($ty:ty),* $(,)?) => {$(
        impl $ty {
            /// This extractor's key, else `other`'s; see [`Or`].
            pub fn or<K: KeyExtractor>(self, other: K) -> Or<Self, K> {
                Or::new(self, other)
            }
        }
    )*};
}

inherent_or!(
    super::ClientIp,
    super::Global,
    super::Header,
    super::Method,
    super::Path,
    super::PeerIp,
);

impl<A: KeyExtractor, B: KeyExtractor> Or<A, B> {
    /// This extractor's key, else `other`'s; see [`Or`].
    pub fn or<K: KeyExtractor>(self, other: K) -> Or<Self, K> {
        Or::new(self, other)
    }
}
