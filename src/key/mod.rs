//! Key extractors: how a request names its client.
//!
//! A [`KeyExtractor`] reads the request head and returns the client's key, or `None` when the
//! request has none (the layer then follows its `OnMissingKey` setting). Closures
//! `Fn(&http::request::Parts) -> Option<String>` are extractors too.

use http::request::Parts;

/// Names the client a request comes from.
pub trait KeyExtractor: Send + Sync + 'static {
    /// The client's key, or `None` when this request does not carry one.
    ///
    /// Keys come from requests and are untrusted; the layer replaces long or odd keys by a
    /// digest before they reach a store.
    fn extract(&self, req: &Parts) -> Option<String>;

    /// What this extractor reads, for the `400` body when a key is missing, e.g.
    /// `"the x-api-key header"`.
    fn describe(&self) -> String;
}

impl<F> KeyExtractor for F
where
    F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
{
    fn extract(&self, req: &Parts) -> Option<String> {
        self(req)
    }

    fn describe(&self) -> String {
        "a client key".to_owned()
    }
}
