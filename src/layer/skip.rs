//! [`Skip`]: what a layer never limits, in one value.

use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use ipnet::IpNet;

use crate::error::ConfigError;
use crate::key::{self, KeyExtractor};
use crate::limiter::SkipFn;
use crate::rules::{CompiledSkip, SkipSpec};

/// Requests a layer never limits: by path (health checks), by client key or network
/// (allow-lists, e.g. internal services), or by a predicate of your own (CORS preflights).
/// A request one of them takes is not limited, counted or given rate-limit headers.
///
/// Each setting adds an entry; a request is skipped when any entry takes it. A rules file's
/// `[[skip]]` entries add to these.
///
/// ```
/// use tollgate::{key, Quota, RateLimitLayer, Skip};
///
/// let layer = RateLimitLayer::builder()
///     .quota(Quota::per_minute(100)?)
///     .key(key::Header::new("x-api-key"))
///     .skip(
///         Skip::new()
///             .path("/health")
///             .keys(["internal-batch"])
///             .cidrs(["10.0.0.0/8".parse()?])
///             .when(|req| req.method == http::Method::OPTIONS),
///     )
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct Skip {
    entries: Vec<SkipSpec>,
    when: Vec<SkipFn>,
}

impl Skip {
    /// Skips nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Never limits requests to this path pattern: exact (`"/health"`) or a prefix
    /// (`"/internal/*"`).
    pub fn path(mut self, pattern: impl Into<String>) -> Self {
        self.entries.push(SkipSpec::Path(pattern.into()));
        self
    }

    /// Never limits the clients whose key, as the layer's
    /// [`key`](crate::RateLimitLayerBuilder::key) reads it, is one of `keys` (an allow-list,
    /// e.g. internal services' API keys).
    pub fn keys<K: Into<String>>(mut self, keys: impl IntoIterator<Item = K>) -> Self {
        let keys = keys.into_iter().map(Into::into).collect();
        self.entries.push(SkipSpec::Keys(keys));
        self
    }

    /// Never limits requests whose peer address is in one of `cidrs` (an allow-list of
    /// networks). Behind proxies, use [`client_cidrs`](Self::client_cidrs).
    pub fn cidrs(mut self, cidrs: impl IntoIterator<Item = IpNet>) -> Self {
        let cidrs = cidrs.into_iter().collect();
        self.entries.push(SkipSpec::Cidrs(None, cidrs));
        self
    }

    /// Never limits requests whose client address, as `client_ip` reads it through its
    /// trusted proxies, is in one of `cidrs`.
    pub fn client_cidrs(
        mut self,
        client_ip: key::ClientIp,
        cidrs: impl IntoIterator<Item = IpNet>,
    ) -> Self {
        let cidrs = cidrs.into_iter().collect();
        self.entries.push(SkipSpec::Cidrs(Some(client_ip), cidrs));
        self
    }

    /// Never limits requests for which `skip` returns true, e.g. CORS preflights.
    pub fn when<F>(mut self, skip: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.when.push(Arc::new(skip));
        self
    }

    /// These entries and `other`'s.
    pub(super) fn and(mut self, other: Skip) -> Self {
        self.entries.extend(other.entries);
        self.when.extend(other.when);
        self
    }

    /// The entries, checked, with `default_key` reading the keys of a key allow-list; and
    /// the predicates, as one.
    pub(super) fn build(
        self,
        default_key: &Arc<dyn KeyExtractor>,
    ) -> Result<(Vec<CompiledSkip>, Option<SkipFn>), ConfigError> {
        let entries = (self.entries.into_iter())
            .map(|entry| entry.build(default_key))
            .collect::<Result<Vec<_>, _>>()?;
        let when: Option<SkipFn> = match <[SkipFn; 1]>::try_from(self.when) {
            Ok([one]) => Some(one),
            Err(none) if none.is_empty() => None,
            Err(many) => Some(Arc::new(move |parts: &Parts| many.iter().any(|f| f(parts)))),
        };
        Ok((entries, when))
    }
}

impl fmt::Debug for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Skip")
            .field("entries", &self.entries)
            .field("when", &self.when.len())
            .finish()
    }
}
