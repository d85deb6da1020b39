//! [`StoreFailure`]: how the layer treats a store that fails, in one value, and
//! [`OnStoreError`], what a request gets meanwhile.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::breaker::BreakerSettings;
use crate::error::{ConfigError, ConfigErrorKind, StoreError};

/// What the layer does with a request when the store cannot decide (an error, a timeout, an
/// open circuit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnStoreError {
    /// Let the request through without rate-limit headers (fail open). The default: a Redis
    /// outage never becomes an outage of the app.
    #[default]
    Allow,
    /// Answer 503 with `Retry-After` (gRPC: UNAVAILABLE) (fail closed).
    Deny,
    /// Decide with an in-process limiter with the same policies, so each instance keeps
    /// limiting on its own while the store is away.
    FallbackToMemory,
}

/// Parses `allow`, `deny` or `fallback` (also `fallback_to_memory`), e.g. from an environment
/// variable.
///
/// ```
/// use tollgate::store::OnStoreError;
///
/// assert_eq!("fallback".parse::<OnStoreError>()?, OnStoreError::FallbackToMemory);
/// assert!("retry".parse::<OnStoreError>().is_err());
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
impl std::str::FromStr for OnStoreError {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "allow" => Ok(Self::Allow),
            "deny" => Ok(Self::Deny),
            "fallback" | "fallback_to_memory" => Ok(Self::FallbackToMemory),
            other => Err(ConfigError::with_kind(
                ConfigErrorKind::Other,
                format!("unknown store error policy {other:?} (use allow, deny or fallback)"),
            )),
        }
    }
}

/// Observes every store error (after the policy has answered the request).
pub(crate) type ErrorHook = Arc<dyn Fn(&StoreError) + Send + Sync>;

/// How the layer treats a store that fails, set in one place
/// ([`RateLimitLayerBuilder::store_failure`](crate::RateLimitLayerBuilder::store_failure)):
///
/// - what a request gets while the store cannot decide ([`OnStoreError`], default
///   [`Allow`](OnStoreError::Allow));
/// - how long a decision may wait for the store ([`timeout`](Self::timeout), default 50 ms;
///   the in-memory store never waits, so it never starts this timer);
/// - when the circuit breaker stops calling a failing store ([`open_after`](Self::open_after)
///   consecutive failures, default 5) and for how long ([`open_for`](Self::open_for), from 1 s
///   backing off to 30 s): while it is open, requests are answered by the policy at once, with
///   no call and no timeout, and one request probes the store after the back-off;
/// - a hook that sees every error ([`on_error_hook`](Self::on_error_hook)).
///
/// Failures are logged at most once per 10 s, counted in
/// [`Stats::store_errors`](crate::engine::Stats::store_errors), and never turned into a 500. A call
/// that times out may still have run in the store (Redis may run the script after the layer
/// gave up), so a request answered by the policy may have used quota.
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::{OnStoreError, StoreFailure};
/// use tollgate::{Quota, RateLimitLayer};
///
/// let layer = RateLimitLayer::builder()
///     .quota(Quota::per_minute(100)?)
///     .store_failure(
///         StoreFailure::new(OnStoreError::FallbackToMemory)
///             .timeout(Duration::from_millis(20))
///             .open_after(3)
///             .open_for(Duration::from_millis(500), Duration::from_secs(10))
///             .on_error_hook(|error| eprintln!("rate limit store: {error}")),
///     )
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
#[must_use]
pub struct StoreFailure {
    pub(crate) on_error: OnStoreError,
    pub(crate) timeout: Duration,
    pub(crate) breaker: BreakerSettings,
    pub(crate) hook: Option<ErrorHook>,
}

impl Default for StoreFailure {
    /// Fail open ([`OnStoreError::Allow`]), a 50 ms timeout, a circuit that opens after 5
    /// consecutive failures for 1 s (backing off to 30 s), no hook.
    fn default() -> Self {
        Self {
            on_error: OnStoreError::default(),
            timeout: Duration::from_millis(50),
            breaker: BreakerSettings::default(),
            hook: None,
        }
    }
}

impl StoreFailure {
    /// Failure handling that answers by `on_error`, with every other setting at its default.
    pub fn new(on_error: OnStoreError) -> Self {
        Self {
            on_error,
            ..Self::default()
        }
    }

    /// What a request gets while the store cannot decide.
    pub fn on_store_error(&self) -> OnStoreError {
        self.on_error
    }

    /// The longest a decision may wait for the store (default 50 ms); must be longer than
    /// zero (checked by `build`).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How many consecutive failures open the circuit breaker (default 5, at least 1). The
    /// calls in flight when a failure is seen (e.g. every call on a connection that broke)
    /// count as one. A call whose client gave up on it (hung up, or a gRPC deadline shorter
    /// than the timeout) after waiting 10 ms, or half the timeout if that is less, is a
    /// failure too: a hung store opens the circuit even when no call lives to time out.
    pub fn open_after(mut self, failures: u32) -> Self {
        self.breaker = self.breaker.failures(failures);
        self
    }

    /// How long the circuit stays open before a request probes the store (`min`, default 1 s),
    /// doubling while probes fail up to `max` (default 30 s), with ±20% jitter so instances do
    /// not probe in step.
    pub fn open_for(mut self, min: Duration, max: Duration) -> Self {
        self.breaker = self.breaker.open_for(min, max);
        self
    }

    /// Called on every store error, e.g. to count outages in your metrics.
    pub fn on_error_hook<F>(mut self, hook: F) -> Self
    where
        F: Fn(&StoreError) + Send + Sync + 'static,
    {
        self.hook = Some(Arc::new(hook));
        self
    }
}

impl fmt::Debug for StoreFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreFailure")
            .field("on_error", &self.on_error)
            .field("timeout", &self.timeout)
            .field("breaker", &self.breaker)
            .field("hook", &self.hook.is_some())
            .finish()
    }
}
