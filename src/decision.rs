//! The answer a store gives for one request.

use std::time::Duration;

/// The outcome of one rate-limit check.
///
/// Every store returns the same `Decision` for the same history of requests.
///
/// The fields are public to read; a store of your own builds a decision with
/// [`Decision::allowed`] or [`Decision::denied`] (the struct is `#[non_exhaustive]`, so later
/// versions can add fields without breaking it).
///
/// ```
/// use std::time::Duration;
/// use tollgate::store::Decision;
///
/// let ok = Decision::allowed(10, 9, Duration::from_secs(6));
/// assert!(ok.allowed && ok.retry_after.is_none());
///
/// let no = Decision::denied(10, 0, Duration::from_secs(60), Some(Duration::from_secs(6)));
/// assert!(!no.allowed);
/// assert_eq!(no.retry_after, Some(Duration::from_secs(6)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
    /// An allowed request: `limit` as in [`Decision::limit`], `remaining` requests of cost 1
    /// left, and `reset_after` until the quota is whole again.
    pub fn allowed(limit: u64, remaining: u64, reset_after: Duration) -> Self {
        Self {
            allowed: true,
            limit,
            remaining,
            reset_after,
            retry_after: None,
        }
    }

    /// A denied request. `retry_after` is the earliest time the same request would be
    /// allowed, or `None` if it never can be (its cost is larger than the capacity).
    pub fn denied(
        limit: u64,
        remaining: u64,
        reset_after: Duration,
        retry_after: Option<Duration>,
    ) -> Self {
        Self {
            allowed: false,
            limit,
            remaining,
            reset_after,
            retry_after,
        }
    }

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
