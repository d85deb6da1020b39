//! [`RateLimitLayer`] and its builder.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::Response;
use tower_layer::Layer;

use crate::algorithm::Algorithm;
use crate::decision::Decision;
use crate::error::{ConfigError, StoreError};
use crate::key::{self, KeyExtractor};
use crate::limiter::{DenyResponse, ErrorHook, Limiter, OnMissingKey};
use crate::quota::{Policy, Quota};
use crate::response::HeaderStyle;
use crate::service::RateLimit;
use crate::store::{Breaker, CircuitBreaker, MemoryStore, OnStoreError, QuietLog, Store};

/// The policy name used when none is given; it appears in store keys and headers.
const DEFAULT_POLICY_NAME: &str = "default";

/// Rate-limits the wrapped service: each request is keyed, checked against a store, and
/// either passed on (with rate-limit headers) or answered with 429.
///
/// ```
/// use axum::{routing::get, Router};
/// use tollgate::{key, Quota, RateLimitLayer};
///
/// let app: Router = Router::new()
///     .route("/", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(Quota::per_minute(100), key::PeerIp::default()));
/// ```
#[must_use]
pub struct RateLimitLayer<S = MemoryStore> {
    limiter: Arc<Limiter<S>>,
}

impl RateLimitLayer<MemoryStore> {
    /// A layer with the in-memory store, GCRA, and the given quota and key; every other
    /// setting at its default.
    ///
    /// # Panics
    ///
    /// When the quota is invalid (e.g. `Quota::per_second(0)`). Use
    /// [`builder`](Self::builder) to get a [`ConfigError`] instead.
    pub fn new(quota: Quota, key: impl KeyExtractor) -> Self {
        match Self::builder().quota(quota).key(key).build() {
            Ok(layer) => layer,
            Err(e) => panic!("RateLimitLayer::new: {e}"),
        }
    }

    /// A builder for every setting; `build` checks them and returns a [`ConfigError`].
    pub fn builder() -> RateLimitLayerBuilder<MemoryStore> {
        RateLimitLayerBuilder {
            quota: None,
            algorithm: Algorithm::default(),
            name: DEFAULT_POLICY_NAME.into(),
            key: None,
            store: MemoryStore::new(),
            on_missing_key: OnMissingKey::default(),
            headers: HeaderStyle::default(),
            deny: None,
            on_store_error: OnStoreError::default(),
            store_timeout: Duration::from_millis(50),
            breaker: CircuitBreaker::default(),
            error_hook: None,
        }
    }
}

impl<S> RateLimitLayer<S> {
    /// How many times the store failed (errors, timeouts, and requests answered while the
    /// circuit breaker was open) since the layer was built.
    pub fn store_errors(&self) -> u64 {
        self.limiter.store_errors.load(Ordering::Relaxed)
    }

    /// Whether the circuit breaker is open: the store is failing and not being called.
    pub fn store_circuit_open(&self) -> bool {
        self.limiter.breaker.is_open()
    }

    /// The policy this layer enforces.
    pub fn policy(&self) -> &Policy {
        &self.limiter.policy
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
    store: S,
    on_missing_key: OnMissingKey,
    headers: HeaderStyle,
    deny: Option<DenyResponse>,
    on_store_error: OnStoreError,
    store_timeout: Duration,
    breaker: CircuitBreaker,
    error_hook: Option<ErrorHook>,
}

impl<S> RateLimitLayerBuilder<S> {
    /// The quota (required).
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quota = Some(quota);
        self
    }

    /// The algorithm (default [`Algorithm::Gcra`]).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// The policy's name (default `"default"`), shown in `RateLimit-Policy` and part of every
    /// store key: give layers that share a store different names.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// How requests are keyed (default [`key::PeerIp`]).
    pub fn key(mut self, key: impl KeyExtractor) -> Self {
        self.key = Some(Arc::new(key));
        self
    }

    /// Where state lives (default: a new [`MemoryStore`]).
    pub fn store<S2: Store>(self, store: S2) -> RateLimitLayerBuilder<S2> {
        RateLimitLayerBuilder {
            quota: self.quota,
            algorithm: self.algorithm,
            name: self.name,
            key: self.key,
            store,
            on_missing_key: self.on_missing_key,
            headers: self.headers,
            deny: self.deny,
            on_store_error: self.on_store_error,
            store_timeout: self.store_timeout,
            breaker: self.breaker,
            error_hook: self.error_hook,
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
    ///     .quota(Quota::per_minute(10))
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

    /// The longest a decision may wait for the store (default 50 ms). Not used by the
    /// in-memory store, which never waits.
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.store_timeout = timeout;
        self
    }

    /// Circuit breaker settings (see [`CircuitBreaker`] for the defaults).
    pub fn circuit_breaker(mut self, breaker: CircuitBreaker) -> Self {
        self.breaker = breaker;
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
        let quota = self.quota.ok_or_else(|| {
            ConfigError::new("no quota: call .quota(Quota::per_minute(100)) or similar")
        })?;
        if self.store_timeout.is_zero() {
            return Err(ConfigError::new("store_timeout must be longer than zero"));
        }
        let policy = Policy::new(self.name, quota, self.algorithm)?;
        Ok(RateLimitLayer {
            limiter: Arc::new(Limiter {
                policy,
                key: self.key.unwrap_or_else(|| Arc::new(key::PeerIp::default())),
                store: self.store,
                on_missing_key: self.on_missing_key,
                headers: self.headers,
                deny: self.deny,
                on_store_error: self.on_store_error,
                store_timeout: self.store_timeout,
                breaker: Breaker::new(self.breaker),
                fallback: MemoryStore::new(),
                log: QuietLog::new(Duration::from_secs(10)),
                store_errors: AtomicU64::new(0),
                error_hook: self.error_hook,
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
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}
