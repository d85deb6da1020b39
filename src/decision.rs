//! The answer a store gives for one request.

use std::time::Duration;

/// The outcome of one rate-limit check.
///
/// Every store returns the same `Decision` for the same history of requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request may proceed.
    pub allowed: bool,
    /// The most requests the key can make at once: the burst for bucket algorithms
    /// (GCRA, token bucket, leaky bucket), the limit for window algorithms.
    pub limit: u64,
    /// How many more requests of cost 1 would be allowed right now.
    pub remaining: u64,
    /// Time until the quota is whole again (`remaining == limit`).
    pub reset_after: Duration,
    /// When denied: the earliest time the same request would be allowed. `None` when allowed,
    /// and when the request can never be allowed (its cost is larger than the capacity).
    pub retry_after: Option<Duration>,
}

impl Decision {
    /// Builds a decision from microsecond values, as algorithms and Lua scripts compute them.
    pub(crate) fn from_micros(
        allowed: bool,
        limit: u64,
        remaining: u64,
        reset_after_us: u64,
        retry_after_us: Option<u64>,
    ) -> Self {
        Self {
            allowed,
            limit,
            remaining,
            reset_after: Duration::from_micros(reset_after_us),
            retry_after: retry_after_us.map(Duration::from_micros),
        }
    }
}
