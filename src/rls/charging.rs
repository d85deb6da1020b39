//! [`Charging`]: which hits a request's descriptors are charged, refused or not.

/// Which hits [`RateLimitService`](super::RateLimitService) charges to a request's
/// descriptors. The default is the reference's; the others are its
/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` and tollgate's own atomic mode. Every mode is one
/// atomic step per request on the built-in stores (one script call on Redis), so none of
/// them races between reading a counter and adding to it.
///
/// A descriptor "charged while over" goes past its limit: its counter (or log, or bucket's
/// time) records the hits although the request was refused, to at most one more quota (see
/// the [algorithms guide](crate::guide::algorithms)), and a look (`hits_addend` 0) answers
/// OVER_LIMIT until enough of them have expired. That is how usage reported after the
/// response (Envoy's `apply_on_stream_done`, token budgets for LLM traffic) is never lost.
///
/// ```
/// use tollgate::rls::{Charging, RateLimitService};
///
/// let reference = RateLimitService::builder(); // Charging::EveryHit
/// let atomic = RateLimitService::builder().charging(Charging::AllowedOnly);
/// # let _ = (reference, atomic);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Charging {
    /// Every descriptor is charged its hits, whether or not the request is refused, as the
    /// reference's `INCRBY` does. The default.
    #[default]
    EveryHit,
    /// The reference's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true`: when a descriptor
    /// (shadow-mode ones included) is over its limit, only the descriptors over their limit
    /// are charged; when none is, all are.
    StopWhenOverLimit,
    /// tollgate's: a refused request consumes nothing from any descriptor, and an allowed
    /// one consumes from all (`CHARGE_REFUSED=false` for `tollgate-rls`). Shadow-mode and
    /// quota-mode limits never refuse a request alone.
    AllowedOnly,
}
