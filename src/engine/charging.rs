//! [`Charging`]: which of a request's limits are charged, refused or not.

/// Which hits a decision charges to a request's limits ([`Engine::decide`](super::Engine::decide)).
/// The default is that of Envoy's reference rate limit service (what `tollgate-rls` answers
/// by); the others are its `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` and tollgate's own atomic
/// mode, which the layer and the door always use. Every mode is one
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
/// use tollgate::engine::Charging;
///
/// assert_eq!(Charging::default(), Charging::EveryHit);
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
    /// one consumes from all (`CHARGE_REFUSED=false` for `tollgate-rls`; the layer's mode). Shadow-mode and
    /// quota-mode limits never refuse a request alone.
    AllowedOnly,
}
