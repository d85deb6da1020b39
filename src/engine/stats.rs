//! [`Stats`]: the figures a layer's [`Control`](crate::Control) and `tollgate-rls` report
//! alike.

/// A layer's or service's figures at one moment, from
/// [`Control::stats`](crate::Control::stats) (or `RateLimitService::stats` with the `rls`
/// feature). (With the `metrics` feature the same figures and more go to your metrics
/// recorder.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Stats {
    /// How many times the store failed since the layer was built: errors, timeouts, and
    /// requests answered while the circuit breaker was open.
    pub store_errors: u64,
    /// Whether the circuit breaker is open now: the store is failing and not being called.
    pub circuit_open: bool,
    /// How many requests the cache of denials answered without asking the store.
    pub denial_cache_hits: u64,
    /// How many requests a shadow-mode rule would have denied.
    pub shadow_denials: u64,
    /// How many quota lookups were made (see [`QuotaLookup`](crate::rules::QuotaLookup)).
    pub quota_lookups: u64,
    /// How many requests had their quota from a lookup's cache, or from another request's
    /// lookup they waited for, without one of their own.
    pub quota_lookup_cache_hits: u64,
    /// How many quota lookups failed or timed out (answered with the rule's own quota).
    pub quota_lookup_failures: u64,
}
