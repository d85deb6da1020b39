//! [`QuotaLookup`]: a rule's quota per client, looked up at run time (a plan in a database, a
//! claim an auth layer attached to the request), asynchronously, and cached.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;

use crate::lookup_cache::LookupCache;
use crate::quota::Quota;

/// What a lookup failed with: any error, boxed.
pub type LookupError = Box<dyn Error + Send + Sync>;

/// A lookup under way: its answer, `'static` so that it can run on its own.
pub type Lookup = Pin<Box<dyn Future<Output = Result<Option<Quota>, LookupError>> + Send>>;

/// Looks up the quota of one client: `Some(quota)`, `None` for a client the rule does not
/// limit, or an error (answered with the rule's own quota). It sees the request head, its
/// extensions included (e.g. a plan an auth layer attached), and the client's key as the
/// rule's key extractor read it. It reads what it needs from them at once and returns a
/// future that owns it: the lookup runs on its own, and other requests of the client wait for
/// it.
///
/// Any `Fn(&Parts, &str) -> impl Future<Output = Result<Option<Quota>, E>>` is one, `E` any
/// error.
pub trait QuotaResolver: Send + Sync + 'static {
    /// Starts the lookup of `key`'s quota, for the request `request`.
    fn resolve(&self, request: &Parts, key: &str) -> Lookup;
}

impl<F, Fut, E> QuotaResolver for F
where
    F: Fn(&Parts, &str) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Quota>, E>> + Send + 'static,
    E: Into<LookupError>,
{
    fn resolve(&self, request: &Parts, key: &str) -> Lookup {
        let lookup = self(request, key);
        Box::pin(async move { lookup.await.map_err(Into::into) })
    }
}

/// What a lookup decided for a client, as kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Looked {
    /// This quota.
    Quota(Quota),
    /// Not limited by the rule.
    Unlimited,
    /// The rule's own quota: the lookup failed or timed out.
    Failed,
}

/// A rule's quota per client, looked up by a [`QuotaResolver`] and cached: give it to
/// [`Rule::quota_from`](super::Rule::quota_from), or register it by name with
/// [`RateLimitLayerBuilder::quota_lookup`](crate::RateLimitLayerBuilder::quota_lookup) for a
/// rules file's `quota_from`.
///
/// - Each client's answer is kept for [`ttl`](Self::ttl) (default 60 s), at most
///   [`max_entries`](Self::max_entries) of them (default 100,000).
/// - Concurrent first requests of a client make one lookup; the others wait for its answer.
/// - A lookup that fails, or takes longer than [`timeout`](Self::timeout) (default 100 ms), is
///   answered with the rule's own quota: no request waits longer than the timeout. Its
///   answer is kept for a second at most (the ttl if shorter), so that a failing source is
///   asked again soon but not by every request. Failures are counted
///   (`tollgate_quota_lookup_failures_total`, [`Stats`](crate::engine::Stats)) and logged
///   once when lookups start failing and once when they answer again.
///
/// Clones share the cache: a lookup given to several rules answers each client once for all.
///
/// ```
/// use std::time::Duration;
/// use http::request::Parts;
/// use tollgate::rules::{QuotaLookup, Rule};
/// use tollgate::{key, Quota, RateLimitLayer};
///
/// /// What an auth layer attached to the request.
/// #[derive(Clone)]
/// struct Plan(&'static str);
///
/// let plans = QuotaLookup::new(|request: &Parts, _key: &str| {
///     let plan = request.extensions.get::<Plan>().cloned();
///     async move {
///         Ok::<_, std::io::Error>(match plan {
///             Some(Plan("enterprise")) => None, // not limited
///             Some(Plan("pro")) => Some(Quota::per_minute(6_000).expect("a valid quota")),
///             _ => Some(Quota::per_minute(60).expect("a valid quota")),
///         })
///     }
/// })
/// .ttl(Duration::from_secs(300))
/// .timeout(Duration::from_millis(50));
///
/// let layer = RateLimitLayer::builder()
///     .rule(Rule::new("api", Quota::per_minute(60)?).key(key::Header::new("x-api-key")).quota_from(plans))
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct QuotaLookup {
    resolver: Arc<dyn QuotaResolver>,
    ttl: Duration,
    timeout: Duration,
    max_entries: usize,
    cache: Arc<LookupCache<Looked>>,
    /// Whether the last lookup failed: failures are logged once per change.
    failing: Arc<AtomicBool>,
}

/// Lookups by the names a rules file's `quota_from` gives them (registered with the layer's
/// builder).
pub(crate) type NamedLookups = std::collections::BTreeMap<String, QuotaLookup>;

/// How long the answer of a failed lookup is kept at most.
const FAILED_TTL: Duration = Duration::from_secs(1);

impl QuotaLookup {
    /// Looks quotas up with `resolver`: kept 60 s, 100,000 clients at most, 100 ms timeout.
    pub fn new(resolver: impl QuotaResolver) -> Self {
        let max_entries = 100_000;
        Self {
            resolver: Arc::new(resolver),
            ttl: Duration::from_secs(60),
            timeout: Duration::from_millis(100),
            max_entries,
            cache: Arc::new(LookupCache::new(max_entries)),
            failing: Arc::default(),
        }
    }

    /// How long a client's answer is kept (default 60 s); zero keeps none (every request
    /// looks up, one at a time per client).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The longest a lookup may take (default 100 ms); then the rule's own quota answers.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many clients' answers are kept at most (default 100,000): past it, expired ones
    /// are dropped, then any. Starts an empty cache.
    #[must_use]
    pub fn max_entries(mut self, max_entries: usize) -> Self {
        self.max_entries = max_entries.max(1);
        self.cache = Arc::new(LookupCache::new(self.max_entries));
        self
    }

    pub(crate) fn resolver(&self) -> &dyn QuotaResolver {
        &*self.resolver
    }

    pub(crate) fn cache(&self) -> &Arc<LookupCache<Looked>> {
        &self.cache
    }

    pub(crate) fn failing(&self) -> &Arc<AtomicBool> {
        &self.failing
    }

    pub(crate) fn timeout_setting(&self) -> Duration {
        self.timeout
    }

    /// How long an answer is kept: a failure's a second at most.
    pub(crate) fn ttl_of(&self, looked: &Looked) -> Duration {
        match looked {
            Looked::Failed => self.ttl.min(FAILED_TTL),
            _ => self.ttl,
        }
    }
}

impl fmt::Debug for QuotaLookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuotaLookup")
            .field("ttl", &self.ttl)
            .field("timeout", &self.timeout)
            .field("max_entries", &self.max_entries)
            .finish_non_exhaustive()
    }
}
