//! Key extractors: how a request names its client.
//!
//! A [`KeyExtractor`] reads the request head and returns the client's key, or `None` when the
//! request has none (the layer then follows its `OnMissingKey` setting). [`from_fn`] makes a
//! closure `Fn(&http::request::Parts) -> Option<String>` an extractor, with a description for
//! the `400` body. An extractor chosen at run time can be an `Arc<dyn KeyExtractor>` or a
//! `Box<dyn KeyExtractor>`.
//!
//! | Extractor | Key | Missing when |
//! |---|---|---|
//! | [`PeerIp`] | the TCP peer's address (IPv6 grouped by `/64`) | the server does not record it |
//! | [`ClientIp`] | the client's address, read through trusted proxies | as `PeerIp` |
//! | [`Header`] | a header's value | the header is absent or empty |
//! | [`Path`] | the request path | never |
//! | [`Method`] | the request method | never |
//! | [`Global`] | one key for everyone | never |
//!
//! Combine them with [`KeyExtractor::or`] (a fallback) and tuples `(A, B)`, `(A, B, C)` (one
//! bucket per combination).
//!
//! ```
//! use tollgate::key::{ClientIp, Header, KeyExtractor};
//!
//! // API clients are limited by their key, everyone else by their address.
//! let key = Header::new("x-api-key").or(ClientIp::trusting(["10.0.0.0/8".parse()?]));
//!
//! let (req, ()) = http::Request::builder()
//!     .header("x-api-key", "k-123")
//!     .body(())?
//!     .into_parts();
//! assert_eq!(key.extract(&req).as_deref(), Some("k-123"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Keys come from requests and are untrusted: before any store sees them the layer passes them
//! through a sanitizer that replaces long or odd keys by a fixed-size digest.

use std::any::Any;
use std::borrow::Cow;

use http::request::Parts;

mod client_ip;
mod forwarded;
mod from_fn;
mod global;
mod header;
mod method;
mod or;
mod path;
mod peer_ip;
mod sanitize;
mod tuple;

pub use client_ip::{ClientIp, ProxyHeader};
pub use from_fn::{from_fn, FromFn};
pub use global::Global;
pub use header::Header;
pub use method::Method;
pub use or::Or;
pub use path::Path;
pub use peer_ip::PeerIp;
pub use sanitize::sanitize;
pub(crate) use sanitize::sanitize_borrowed;

/// Names the client a request comes from.
pub trait KeyExtractor: Any + Send + Sync + 'static {
    /// The client's key, or `None` when this request does not carry one.
    ///
    /// Keys come from requests and are untrusted; the layer replaces long or odd keys by a
    /// digest before they reach a store.
    fn extract(&self, req: &Parts) -> Option<String>;

    /// The same key as [`extract`](Self::extract), borrowed from the request where it is a
    /// part of it as it is: what the layer calls, so that a key read from a header costs no
    /// allocation. The default calls `extract`; an extractor that overrides it must return
    /// the same key.
    ///
    /// ```
    /// use tollgate::key::{Header, KeyExtractor};
    ///
    /// let (req, ()) = http::Request::builder()
    ///     .header("x-api-key", "k-123")
    ///     .body(())?
    ///     .into_parts();
    /// let key = Header::new("x-api-key");
    /// assert_eq!(key.extract_borrowed(&req).as_deref(), Some("k-123"));
    /// # Ok::<(), http::Error>(())
    /// ```
    fn extract_borrowed<'r>(&self, req: &'r Parts) -> Option<Cow<'r, str>> {
        self.extract(req).map(Cow::Owned)
    }

    /// What this extractor reads, for the `400` body when a key is missing, e.g.
    /// `"the x-api-key header"`.
    fn describe(&self) -> String;

    /// Falls back to `other` when this extractor finds no key.
    ///
    /// The two branches never share a bucket: keys from `other` are marked (see [`Or`]), so a
    /// header whose value is `10.0.0.1` is not limited together with the peer `10.0.0.1`.
    ///
    /// ```
    /// use tollgate::key::{Header, KeyExtractor, PeerIp};
    ///
    /// let key = Header::new("x-api-key").or(PeerIp::default());
    /// assert_eq!(key.describe(), "the x-api-key header or the client's IP address");
    /// ```
    fn or<K: KeyExtractor>(self, other: K) -> Or<Self, K>
    where
        Self: Sized,
    {
        Or::new(self, other)
    }
}

/// Extractors chosen at run time, e.g. from configuration: `Arc<dyn KeyExtractor>`.
///
/// ```
/// use std::sync::Arc;
/// use tollgate::key::{self, KeyExtractor};
///
/// let by_key = std::env::var("LIMIT_BY").is_ok_and(|v| v == "api-key");
/// let key: Arc<dyn KeyExtractor> = if by_key {
///     Arc::new(key::Header::new("x-api-key"))
/// } else {
///     Arc::new(key::PeerIp::default())
/// };
/// let fallback = key.or(key::Global);
/// # let _ = fallback;
/// ```
impl<K: KeyExtractor + ?Sized> KeyExtractor for std::sync::Arc<K> {
    fn extract(&self, req: &Parts) -> Option<String> {
        (**self).extract(req)
    }

    fn extract_borrowed<'r>(&self, req: &'r Parts) -> Option<Cow<'r, str>> {
        (**self).extract_borrowed(req)
    }

    fn describe(&self) -> String {
        (**self).describe()
    }
}

/// Extractors chosen at run time: `Box<dyn KeyExtractor>`.
impl<K: KeyExtractor + ?Sized> KeyExtractor for Box<K> {
    fn extract(&self, req: &Parts) -> Option<String> {
        (**self).extract(req)
    }

    fn extract_borrowed<'r>(&self, req: &'r Parts) -> Option<Cow<'r, str>> {
        (**self).extract_borrowed(req)
    }

    fn describe(&self) -> String {
        (**self).describe()
    }
}
