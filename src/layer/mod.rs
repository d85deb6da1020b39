//! [`RateLimitLayer`] and its builder.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::request::Parts;
use http::Response;
use tower_layer::Layer;

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::{ConfigError, ControlError, StoreError};
use crate::key::{self, KeyExtractor};
use crate::limiter::{DenyResponse, Limiter, OnMissingKey, SkipFn};
use crate::quiet_log::QuietLog;
use crate::quota::Quota;
use crate::response::HeaderStyle;
use crate::rules::{Rule, RuleSource, SkipSpec};
use crate::service::RateLimit;
use crate::store::{
    CircuitBreaker, DenialCache, ErrorHook, Leases, MemoryStore, OnStoreError, Resilient, Store,
};

/// The policy name used when none is given; it appears in store keys and headers.
const DEFAULT_POLICY_NAME: &str = "default";

/// How many denials the cache of denials keeps at most (a few MB).
const DENIAL_CACHE_CAPACITY: usize = 100_000;

/// Rate-limits the wrapped service: each request is keyed, checked against a store, and
/// either passed on (with rate-limit headers) or answered with 429.
///
/// ```
/// use axum::{routing::get, Router};
/// use tollgate::{key, Quota, RateLimitLayer};
///
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(Quota::per_minute(100)?, key::PeerIp::default()));
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[must_use]
pub struct RateLimitLayer<S = MemoryStore> {
    limiter: Arc<Limiter<S>>,
}

impl RateLimitLayer<MemoryStore> {
    /// A layer with the in-memory store, GCRA, and the given quota and key; every other
    /// setting at its default.
    ///
    /// A [`Quota`] is valid by construction (`Quota::per_second(0)` is already a
    /// [`ConfigError`]), so this never fails for a quota it can be given.
    pub fn new(quota: Quota, key: impl KeyExtractor) -> Self {
        match Self::builder().quota(quota).key(key).build() {
            Ok(layer) => layer,
            Err(e) => panic!("RateLimitLayer::new: {e}"),
        }
    }

    /// A layer with the in-memory store and the rules in a TOML file, reloaded when the file
    /// changes (see the README's "Rules file" section for its shape).
    ///
    /// ```no_run
    /// use tollgate::RateLimitLayer;
    ///
    /// let layer = RateLimitLayer::from_rules_file("rules.toml")?;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn from_rules_file(path: impl Into<PathBuf>) -> Result<Self, ConfigError> {
        Self::builder().rules_file(path).build()
    }

    /// A builder for every setting; `build` checks them and returns a [`ConfigError`].
    pub fn builder() -> RateLimitLayerBuilder<MemoryStore> {
        RateLimitLayerBuilder {
            quota: None,
            algorithm: Algorithm::default(),
            name: DEFAULT_POLICY_NAME.into(),
            key: None,
            rules: Vec::new(),
            skip_routes: Vec::new(),
            skip: None,
            rules_file: None,
            store: MemoryStore::new(),
            on_missing_key: OnMissingKey::default(),
            headers: HeaderStyle::default(),
            deny: None,
            on_store_error: OnStoreError::default(),
            store_timeout: Duration::from_millis(50),
            breaker: CircuitBreaker::default(),
            error_hook: None,
            denial_cache: DENIAL_CACHE_CAPACITY,
        }
    }
}

impl<S: Store> RateLimitLayer<S> {
    /// How many times the store failed (errors, timeouts, and requests answered while the
    /// circuit breaker was open) since the layer was built.
    pub fn store_errors(&self) -> u64 {
        self.limiter.store.get_ref().get_ref().errors()
    }

    /// Whether the circuit breaker is open: the store is failing and not being called.
    pub fn store_circuit_open(&self) -> bool {
        self.limiter.store.get_ref().get_ref().circuit_open()
    }

    /// How many requests the cache of denials answered without asking the store (see
    /// [`RateLimitLayerBuilder::denial_cache`]).
    pub fn denial_cache_hits(&self) -> u64 {
        self.limiter.store.hits()
    }

    /// How many requests a shadow-mode rule would have denied since the layer was built.
    pub fn shadow_denials(&self) -> u64 {
        self.limiter.shadow_denials.load(Ordering::Relaxed)
    }

    /// Reads the rules file again now and swaps in its rules, without waiting for the file
    /// watcher (which looks every half second): e.g. on SIGHUP, or after writing the file
    /// from a deployment script. If the file cannot be read, is not UTF-8, has no rule, or
    /// does not parse or validate, the rules in force stay and the error says why (with the
    /// file, line and column). Without a rules file it does nothing.
    ///
    /// It reads and parses on the calling thread; in async code with a large file, call it
    /// from `tokio::task::spawn_blocking`.
    ///
    /// ```no_run
    /// # #[cfg(unix)]
    /// # async fn run() -> Result<(), tollgate::ConfigError> {
    /// use tokio::signal::unix::{signal, SignalKind};
    /// use tollgate::RateLimitLayer;
    ///
    /// let layer = RateLimitLayer::from_rules_file("rules.toml")?;
    /// let handle = layer.clone();
    /// tokio::spawn(async move {
    ///     let Ok(mut hangups) = signal(SignalKind::hangup()) else { return };
    ///     while hangups.recv().await.is_some() {
    ///         match handle.reload_rules() {
    ///             Ok(()) => tracing::info!("rules reloaded: {:?}", handle.rule_names()),
    ///             Err(e) => tracing::error!("{e}; keeping the rules loaded before"),
    ///         }
    ///     }
    /// });
    /// // ... serve with `layer` ...
    /// # Ok(())
    /// # }
    /// ```
    pub fn reload_rules(&self) -> Result<(), ConfigError> {
        self.limiter.rules.reload()
    }

    /// What the client `key` has left under the rule named `rule`, consuming nothing: the
    /// decision a request of cost 1 would get now (see [`Store::peek`]). The key is read as
    /// a request's would be: the raw key its extractor returns (e.g. the `x-api-key` value,
    /// or the IP as text), given to the rule's `quota_for` and then sanitized the same way.
    ///
    /// An unknown rule is [`ControlError::UnknownRule`]; a store that cannot answer,
    /// [`ControlError::Store`] (with [`OnStoreError::FallbackToMemory`], the fallback
    /// answers instead).
    ///
    /// ```
    /// use tollgate::{key, Quota, RateLimitLayer};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
    /// let layer = RateLimitLayer::builder()
    ///     .name("api")
    ///     .quota(Quota::per_minute(100)?)
    ///     .key(key::Header::new("x-api-key"))
    ///     .build()?;
    /// let decision = layer.peek("api", "alice").await?;
    /// assert_eq!(decision.remaining, 99);
    /// assert!(layer.peek("nope", "alice").await.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub async fn peek(&self, rule: &str, key: &str) -> Result<Decision, ControlError> {
        let (key, policy) = self.limiter.client(rule, key)?;
        Ok(self.limiter.store.peek(&key, &policy, 1).await?)
    }

    /// The names of the rules in force (after the latest reload of a rules file).
    pub fn rule_names(&self) -> Vec<String> {
        let rules = self.limiter.rules.current();
        rules
            .rules()
            .iter()
            .map(|r| r.policy.name().to_owned())
            .collect()
    }

    /// Forgets the state of client `key` under the rule named `rule`, and any block: its next
    /// request starts with a whole quota. `key` is the client key as the rule's key extractor
    /// reads it (e.g. the IP address, or the header's value); it is sanitized as requests'
    /// keys are, and a rule with tiers uses the key's tier. On Redis every instance sees the
    /// reset; this instance's cache of denials forgets the client, and other instances' caches
    /// ask the store again within 5 s (see [`DenialCache`](crate::store::DenialCache)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tollgate::{key, ControlError, Quota, RateLimitLayer};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let layer = RateLimitLayer::builder()
    ///     .name("api")
    ///     .quota(Quota::per_minute(100)?)
    ///     .key(key::Header::new("x-api-key"))
    ///     .build()?;
    /// layer.block("api", "key-123", Duration::from_secs(600)).await?;
    /// layer.refund("api", "key-456", 1).await?;
    /// layer.reset("api", "key-123").await?;
    /// assert!(matches!(
    ///     layer.reset("nope", "key-123").await,
    ///     Err(ControlError::UnknownRule { .. })
    /// ));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn reset(&self, rule: &str, key: &str) -> Result<(), ControlError> {
        let (key, policy) = self.limiter.client(rule, key)?;
        Ok(self.limiter.store.reset(&key, &policy).await?)
    }

    /// Denies every request of client `key` under the rule named `rule` for `duration`
    /// from now, with `Retry-After` the rest of the block; the client starts afresh after it
    /// (see [`Store::block`]). Keys and tiers as in [`reset`](Self::reset).
    pub async fn block(
        &self,
        rule: &str,
        key: &str,
        duration: Duration,
    ) -> Result<(), ControlError> {
        let (key, policy) = self.limiter.client(rule, key)?;
        Ok(self.limiter.store.block(&key, &policy, duration).await?)
    }

    /// Gives `n` units back to client `key` under the rule named `rule`, as far as the rule's
    /// algorithm allows (see [`Store::refund`]): e.g. for a request that turned out not to
    /// count. Keys and tiers as in [`reset`](Self::reset).
    pub async fn refund(&self, rule: &str, key: &str, n: u32) -> Result<(), ControlError> {
        let (key, policy) = self.limiter.client(rule, key)?;
        Ok(self.limiter.store.refund(&key, &policy, n).await?)
    }
}

impl<S> Clone for RateLimitLayer<S> {
    fn clone(&self) -> Self {
        Self {
            limiter: Arc::clone(&self.limiter),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimitLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("limiter", &self.limiter)
            .finish()
    }
}

impl<Svc, S> Layer<Svc> for RateLimitLayer<S> {
    type Service = RateLimit<Svc, S>;

    fn layer(&self, inner: Svc) -> Self::Service {
        RateLimit::new(inner, Arc::clone(&self.limiter))
    }
}

/// Builds a [`RateLimitLayer`]; see [`RateLimitLayer::builder`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::{key, Algorithm, HeaderStyle, OnStoreError, Quota, RateLimitLayer};
///
/// let layer = RateLimitLayer::builder()
///     .quota("10/s; burst=20".parse::<Quota>()?)
///     .algorithm(Algorithm::TokenBucket)
///     .key(key::Header::new("x-api-key"))
///     .headers(HeaderStyle::Both)
///     .on_store_error(OnStoreError::FallbackToMemory)
///     .store_timeout(Duration::from_millis(50))
///     .build()?;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[must_use]
pub struct RateLimitLayerBuilder<S = MemoryStore> {
    quota: Option<Quota>,
    algorithm: Algorithm,
    name: String,
    key: Option<Arc<dyn KeyExtractor>>,
    rules: Vec<Rule>,
    skip_routes: Vec<SkipSpec>,
    skip: Option<SkipFn>,
    rules_file: Option<PathBuf>,
    store: S,
    on_missing_key: OnMissingKey,
    headers: HeaderStyle,
    deny: Option<DenyResponse>,
    on_store_error: OnStoreError,
    store_timeout: Duration,
    breaker: CircuitBreaker,
    error_hook: Option<ErrorHook>,
    /// Capacity of the cache of denials; 0 when it is off.
    denial_cache: usize,
}

impl<S> RateLimitLayerBuilder<S> {
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
    /// of a change (or at once with [`RateLimitLayer::reload_rules`]); a changed file that
    /// does not parse or validate, has no rule, or is not UTF-8 is logged and ignored. The
    /// file's rules come after the builder's own.
    pub fn rules_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.rules_file = Some(path.into());
        self
    }

    /// Never limits requests to this path pattern (exact, `"/prefix/*"`), e.g. health checks.
    pub fn skip_path(mut self, pattern: impl Into<String>) -> Self {
        self.skip_routes.push(SkipSpec::Path(pattern.into()));
        self
    }

    /// Never limits the clients whose key, as the layer's [`key`](Self::key) reads it, is one
    /// of `keys` (an allow-list, e.g. internal services' API keys).
    pub fn skip_keys<K: Into<String>>(mut self, keys: impl IntoIterator<Item = K>) -> Self {
        let keys = keys.into_iter().map(Into::into).collect();
        self.skip_routes.push(SkipSpec::Keys(keys));
        self
    }

    /// Never limits requests whose peer address is in one of `cidrs` (an allow-list of
    /// networks). Behind proxies, use [`skip_client_cidrs`](Self::skip_client_cidrs).
    ///
    /// ```
    /// use tollgate::{key, Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .quota(Quota::per_minute(100)?)
    ///     .skip_cidrs(["10.0.0.0/8".parse().unwrap()])
    ///     .skip_keys(["internal-batch"])
    ///     .build()?;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn skip_cidrs(mut self, cidrs: impl IntoIterator<Item = ipnet::IpNet>) -> Self {
        self.skip_routes
            .push(SkipSpec::Cidrs(None, cidrs.into_iter().collect()));
        self
    }

    /// Never limits requests whose client address, as `client_ip` reads it through its
    /// trusted proxies, is in one of `cidrs`.
    pub fn skip_client_cidrs(
        mut self,
        client_ip: key::ClientIp,
        cidrs: impl IntoIterator<Item = ipnet::IpNet>,
    ) -> Self {
        self.skip_routes.push(SkipSpec::Cidrs(
            Some(client_ip),
            cidrs.into_iter().collect(),
        ));
        self
    }

    /// Never limits requests for which `skip` returns true, e.g. CORS preflights.
    ///
    /// ```
    /// use tollgate::{key, Quota, RateLimitLayer};
    ///
    /// let layer = RateLimitLayer::builder()
    ///     .quota(Quota::per_minute(100)?)
    ///     .key(key::Global)
    ///     .skip(|req| req.method == http::Method::OPTIONS)
    ///     .build()?;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn skip<F>(mut self, skip: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.skip = Some(Arc::new(skip));
        self
    }

    /// Where state lives (default: a new [`MemoryStore`]).
    pub fn store<S2: Store>(self, store: S2) -> RateLimitLayerBuilder<S2> {
        RateLimitLayerBuilder {
            quota: self.quota,
            algorithm: self.algorithm,
            name: self.name,
            key: self.key,
            rules: self.rules,
            skip_routes: self.skip_routes,
            skip: self.skip,
            rules_file: self.rules_file,
            store,
            on_missing_key: self.on_missing_key,
            headers: self.headers,
            deny: self.deny,
            on_store_error: self.on_store_error,
            store_timeout: self.store_timeout,
            breaker: self.breaker,
            error_hook: self.error_hook,
            denial_cache: self.denial_cache,
        }
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
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    pub fn deny_response<F>(mut self, deny: F) -> Self
    where
        F: Fn(&Decision) -> Response<String> + Send + Sync + 'static,
    {
        self.deny = Some(Arc::new(deny));
        self
    }

    /// What to do when the store fails (default [`OnStoreError::Allow`]: fail open).
    pub fn on_store_error(mut self, on_store_error: OnStoreError) -> Self {
        self.on_store_error = on_store_error;
        self
    }

    /// The longest a decision may wait for the store (default 50 ms). The in-memory store
    /// never waits, so it never starts this timer.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// Circuit breaker settings (see [`CircuitBreaker`] for the defaults).
    pub fn circuit_breaker(mut self, breaker: CircuitBreaker) -> Self {
        self.breaker = breaker;
        self
    }

    /// Whether denials are cached (default true): once the store denies a client under a
    /// rule, requests of that cost or more are denied locally until the denial's
    /// `Retry-After`, with the same headers, instead of asking the store again. Exact (a
    /// cached denial never denies what the store would allow) and bounded (100,000 denials);
    /// see [`DenialCache`].
    pub fn denial_cache(mut self, enabled: bool) -> Self {
        self.denial_cache = if enabled { DENIAL_CACHE_CAPACITY } else { 0 };
        self
    }

    /// Called on every store error, e.g. to count outages in your metrics.
    pub fn on_store_error_hook<F>(mut self, hook: F) -> Self
    where
        F: Fn(&StoreError) + Send + Sync + 'static,
    {
        self.error_hook = Some(Arc::new(hook));
        self
    }
}

impl<S: Store> RateLimitLayerBuilder<S> {
    /// Checks the settings and builds the layer.
    pub fn build(self) -> Result<RateLimitLayer<S>, ConfigError> {
        if self.store_timeout.is_zero() {
            return Err(ConfigError::new("store_timeout must be longer than zero"));
        }
        let mut code_rules = Vec::with_capacity(self.rules.len() + 1);
        if let Some(quota) = self.quota {
            code_rules.push(Rule::new(self.name, quota));
        }
        code_rules.extend(self.rules);
        if code_rules.is_empty() && self.rules_file.is_none() {
            return Err(ConfigError::new(
                "nothing to limit: set .quota(Quota::per_minute(100)), add a .rule(..), or load \
                 a .rules_file(..)",
            ));
        }
        let default_key = self.key.unwrap_or_else(|| Arc::new(key::PeerIp::default()));
        let skips = (self.skip_routes.into_iter())
            .map(|skip| skip.build(&default_key))
            .collect::<Result<Vec<_>, _>>()?;
        let rules = RuleSource::load(
            &code_rules,
            skips,
            default_key,
            self.algorithm,
            self.rules_file,
        )?;
        rules.watch();
        let store = Resilient::new(self.store)
            .timeout(self.store_timeout)
            .on_error(self.on_store_error)
            .circuit_breaker(self.breaker)
            .on_error_hook(self.error_hook);
        let store = DenialCache::new(Leases::new(store), self.denial_cache);
        Ok(RateLimitLayer {
            limiter: Arc::new(Limiter {
                rules,
                skip: self.skip,
                store,
                on_missing_key: self.on_missing_key,
                headers: self.headers,
                deny: self.deny,
                on_store_error: self.on_store_error,
                tier_log: QuietLog::new(Duration::from_secs(10)),
                shadow_log: QuietLog::new(Duration::from_secs(10)),
                shadow_denials: AtomicU64::new(0),
            }),
        })
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimitLayerBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("quota", &self.quota)
            .field("algorithm", &self.algorithm)
            .field("name", &self.name)
            .field("rules", &self.rules)
            .field("rules_file", &self.rules_file)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}
