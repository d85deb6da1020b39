//! [`RateLimitLayerBuilder`]: every setting of a layer, checked once by `build`.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http::Response;

use super::{RateLimitLayer, Skip};
use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::engine::{Engine, EngineBuilder};
use crate::error::ConfigError;
use crate::key::{self, KeyExtractor};
use crate::limiter::{Limiter, OnMissingKey, SkipFn};
use crate::quiet_log::QuietLog;
use crate::quota::Quota;
use crate::response::{DenyResponse, HeaderStyle};
use crate::rules::{NamedLookups, QuotaLookup, Rule, RuleSource};
#[cfg(test)]
use crate::store::wrappers::Backend;
use crate::store::{OnStoreError, Store, StoreFailure};

/// Builds a [`RateLimitLayer`]; see [`RateLimitLayer::builder`].
///
/// The settings, by what they are about:
///
/// - what to limit: [`quota`](Self::quota) (with its [`name`](Self::name) and
///   [`algorithm`](Self::algorithm)), [`rule`](Self::rule)s, a [`rules_file`](Self::rules_file),
///   how clients are told apart ([`key`](Self::key)), and what is never limited
///   ([`skip`](Self::skip));
/// - where state lives: [`store`](Self::store), how a failing store is treated
///   ([`store_failure`](Self::store_failure), with the shorthands
///   [`on_store_error`](Self::on_store_error) and [`store_timeout`](Self::store_timeout)), and
///   the cache of denials in front of it ([`denial_cache`](Self::denial_cache));
/// - what clients see: [`headers`](Self::headers), [`deny_response`](Self::deny_response), and
///   what a request without a key gets ([`on_missing_key`](Self::on_missing_key)).
///
/// ```
/// use std::time::Duration;
/// use tollgate::{key, Algorithm, HeaderStyle, Quota, RateLimitLayer, store::OnStoreError};
///
/// let layer = RateLimitLayer::builder()
///     .quota("10/s; burst=20".parse::<Quota>()?)
///     .algorithm(Algorithm::TokenBucket)
///     .key(key::Header::new("x-api-key"))
///     .headers(HeaderStyle::Both)
///     .on_store_error(OnStoreError::FallbackToMemory)
///     .store_timeout(Duration::from_millis(50))
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[must_use]
pub struct RateLimitLayerBuilder {
    quota: Option<Quota>,
    algorithm: Algorithm,
    name: String,
    key: Option<Arc<dyn KeyExtractor>>,
    rules: Vec<Rule>,
    rules_file: Option<PathBuf>,
    skip: Skip,
    store: EngineBuilder,
    on_missing_key: OnMissingKey,
    headers: HeaderStyle,
    deny: Option<DenyResponse>,
    lookups: NamedLookups,
}

impl RateLimitLayerBuilder {
    /// Every setting at its default, the quota (if one is set) named `name`.
    pub(super) fn new(name: &str) -> Self {
        Self {
            quota: None,
            algorithm: Algorithm::default(),
            name: name.into(),
            key: None,
            rules: Vec::new(),
            rules_file: None,
            skip: Skip::default(),
            store: Engine::builder(),
            on_missing_key: OnMissingKey::default(),
            headers: HeaderStyle::default(),
            deny: None,
            lookups: NamedLookups::default(),
        }
    }

    /// Registers `lookup` under `name`, for a rules file's rules to name with
    /// `quota_from = "<name>"` (code's rules take theirs with
    /// [`Rule::quota_from`](crate::rules::Rule::quota_from)). The name is the file's to use:
    /// a rule naming one that is not registered is an error with its line and column.
    ///
    /// ```
    /// use http::request::Parts;
    /// use tollgate::rules::QuotaLookup;
    /// use tollgate::{Quota, RateLimitLayer};
    ///
    /// let plans = QuotaLookup::new(|_: &Parts, key: &str| {
    ///     let pro = key.starts_with("pro-");
    ///     async move { Ok::<_, std::io::Error>(pro.then(|| Quota::per_minute(600).expect("a valid quota"))) }
    /// });
    /// let builder = RateLimitLayer::builder().quota_lookup("plan", plans);
    /// // rules.toml: [[rule]] name = "api" quota = "60/min" key = "header:x-api-key" quota_from = "plan"
    /// # let _ = builder;
    /// ```
    pub fn quota_lookup(mut self, name: impl Into<String>, lookup: QuotaLookup) -> Self {
        self.lookups.insert(name.into(), lookup);
        self
    }

    /// A quota for every request (a rule named by [`name`](Self::name) that matches
    /// everything). A layer needs a quota, a [`rule`](Self::rule) or a
    /// [`rules_file`](Self::rules_file).
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quota = Some(quota);
        self
    }

    /// The algorithm of the quota and of rules that do not name one (default
    /// [`Algorithm::Gcra`]).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The quota's name (default `"default"`), shown in `RateLimit-Policy` and part of every
    /// store key: give layers that share a store different names.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How requests are keyed, for the quota and rules without a key of their own (default
    /// [`key::PeerIp`]).
    pub fn key(mut self, key: impl KeyExtractor) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// Adds a rule: a named limit for the requests its methods and path match. Every matching
    /// rule must allow a request (stacked limits); see [`Rule`].
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Loads rules (and skips) from a TOML file at `build`, and reloads them within a second
    /// of a change (or at once with [`Control::reload_rules`](super::Control::reload_rules)).
    /// The path must name a regular file (or a symlink to one) of at most
    /// [`rules::MAX_FILE_BYTES`]; anything else is a [`ConfigError`] at `build`. Later, a file
    /// that cannot be read, is not a regular file or is too large, or that does not parse or
    /// validate, has no rule, or is not UTF-8, is logged at WARN once per distinct failure,
    /// counted in `tollgate_rules_reload_failures_total`, and ignored: the last good rules keep
    /// serving, and the first good read after a failure is logged at INFO. The file's rules
    /// come after the builder's own.
    ///
    /// [`rules::MAX_FILE_BYTES`]: crate::rules::MAX_FILE_BYTES
    pub fn rules_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.rules_file = Some(path.into());
        self
    }

    /// Requests the layer never limits: paths, allow-lists of client keys and networks, and
    /// a predicate (see [`Skip`]). Called again, it adds to what was skipped before.
    ///
    /// ```
    /// use tollgate::{Quota, RateLimitLayer, Skip};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .quota(Quota::per_minute(100)?)
    ///     .skip(Skip::new().path("/health").cidrs(["10.0.0.0/8".parse()?]))
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn skip(mut self, skip: Skip) -> Self {
        self.skip = std::mem::take(&mut self.skip).and(skip);
        self
    }

    /// Where state lives (default: a new [`MemoryStore`](crate::store::MemoryStore)): a
    /// [`RedisStore`](crate::store::RedisStore), or any [`Store`] of your own. The layer puts
    /// the cache of denials, leases for hot keys and the failure handling around it. Chosen
    /// at run time: the layer's type does not name the store.
    pub fn store(mut self, store: impl Store) -> Self {
        self.store = self.store.store(store);
        self
    }

    /// A backend made by the crate's tests (e.g. a store with a lease of its own making).
    #[cfg(test)]
    pub(crate) fn backend(mut self, backend: Backend) -> Self {
        self.store = self.store.backend(backend);
        self
    }

    /// How a failing store is treated: the [`OnStoreError`] policy, the timeout, the circuit
    /// breaker and an error hook, in one value (default [`StoreFailure::default`]: fail open,
    /// 50 ms).
    pub fn store_failure(mut self, failure: StoreFailure) -> Self {
        self.store = self.store.store_failure(failure);
        self
    }

    /// What to do while the store cannot decide (default [`OnStoreError::Allow`]: fail open):
    /// shorthand for that part of [`store_failure`](Self::store_failure).
    pub fn on_store_error(mut self, on_store_error: OnStoreError) -> Self {
        self.store = self.store.on_store_error(on_store_error);
        self
    }

    /// The longest a decision may wait for the store (default 50 ms): shorthand for
    /// [`StoreFailure::timeout`]. The in-memory store never waits, so it never starts this
    /// timer.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store = self.store.store_timeout(timeout);
        self
    }

    /// Whether denials are cached (default true): once the store denies a client under a
    /// rule, requests of that cost or more are denied locally until the denial's
    /// `Retry-After` (5 s at most), with the same headers, instead of asking the store again.
    /// Exact (a cached denial never denies what the store would allow: denied requests change
    /// nothing, and other instances can only move the end later) and bounded (100,000
    /// denials). A reset, block or refund through [`Control`](super::Control) drops this
    /// instance's cached denial of that client; other instances ask the store again within
    /// 5 s. The memory store needs no cache (it answers a denied client as fast) and has none.
    pub fn denial_cache(mut self, enabled: bool) -> Self {
        self.store = self.store.denial_cache(enabled);
        self
    }

    /// What to do with requests that have no key (default [`OnMissingKey::Reject`]: 400).
    pub fn on_missing_key(mut self, on_missing_key: OnMissingKey) -> Self {
        self.on_missing_key = on_missing_key;
        self
    }

    /// Which rate-limit headers to send (default [`HeaderStyle::Ietf`]).
    pub fn headers(mut self, headers: HeaderStyle) -> Self {
        self.headers = headers;
        self
    }

    /// Builds the response for denied requests instead of the default 429. The rate-limit
    /// headers (and nothing else) are added unless the response sets them.
    ///
    /// ```
    /// use http::{Response, StatusCode};
    /// use tollgate::{key, Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .quota(Quota::per_minute(10)?)
    ///     .key(key::Global)
    ///     .deny_response(|decision| {
    ///         let mut r = Response::new(r#"{"error":"slow down"}"#.to_owned());
    ///         *r.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    ///         r
    ///     })
    ///     .build()?;
    /// # let _ = layer;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn deny_response<F>(mut self, deny: F) -> Self
    where
        F: Fn(&Decision) -> Response<String> + Send + Sync + 'static,
    {
        self.deny = Some(Arc::new(deny));
        self
    }

    /// Checks the settings and builds the layer.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] that says what is wrong: nothing to limit, a zero store timeout, a
    /// rule or skip that cannot work, a rules file that cannot be read or does not validate.
    pub fn build(mut self) -> Result<RateLimitLayer, ConfigError> {
        let engine = std::mem::take(&mut self.store).build()?;
        let mut code_rules = Vec::with_capacity(self.rules.len() + 1);
        if let Some(quota) = self.quota {
            code_rules.push(Rule::new(self.name.clone(), quota));
        }
        code_rules.extend(std::mem::take(&mut self.rules));
        if code_rules.is_empty() && self.rules_file.is_none() {
            return Err(ConfigError::new(
                "nothing to limit: set .quota(Quota::per_minute(100)?), add a .rule(..), or \
                 load a .rules_file(..)",
            ));
        }
        let default_key = (self.key.clone()).unwrap_or_else(|| Arc::new(key::PeerIp::default()));
        let (skips, when) = std::mem::take(&mut self.skip).build(&default_key)?;
        let rules = RuleSource::load(
            &code_rules,
            skips,
            default_key,
            self.algorithm,
            self.rules_file.take(),
            std::mem::take(&mut self.lookups),
        )?;
        rules.watch();
        Ok(self.assemble(engine, rules, when))
    }

    /// Checks the settings and builds only the layer's door: a [`Control`](super::Control)
    /// that checks and acquires for code outside Tower (a handler, a WebSocket loop, a job)
    /// with every guarantee of the layer, and no layer. Same errors as
    /// [`build`](Self::build).
    pub fn build_control(self) -> Result<super::Control, ConfigError> {
        Ok(self.build()?.control())
    }

    /// The layer over `rules` and the predicate `skip`, with the rest of these settings
    /// (checked already).
    pub(super) fn assemble(
        self,
        engine: Engine,
        rules: Arc<RuleSource>,
        skip: Option<SkipFn>,
    ) -> RateLimitLayer {
        RateLimitLayer {
            limiter: Arc::new(Limiter {
                rules,
                skip,
                engine,
                on_missing_key: self.on_missing_key,
                headers: self.headers,
                deny: self.deny,
                tier_log: QuietLog::new(Duration::from_secs(10)),
                shadow_log: QuietLog::new(Duration::from_secs(10)),
                renewing: Default::default(),
            }),
        }
    }
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("quota", &self.quota)
            .field("algorithm", &self.algorithm)
            .field("name", &self.name)
            .field("rules", &self.rules)
            .field("rules_file", &self.rules_file)
            .field("skip", &self.skip)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}
