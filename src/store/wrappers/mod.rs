//! The wrappers the layer's builder puts around every store, outermost first: the cache of
//! denials ([`DenialCache`]), leases for hot keys ([`Leases`]), failure handling
//! ([`Resilient`]: timeout, circuit breaker, fallback), then the [`Backend`], which calls the
//! built-in store directly, or a user's store boxed, through
//! [`UserStore`](user_store::UserStore), the adapter that gives it the fallbacks of what it
//! does not do itself, or through [`Native`](native::Native) when it keeps the whole contract
//! itself (the state-backed stores).
//!
//! The folder is named for what its types are: each is a store holding a store, adding one
//! concern, as tower's `Timeout<S>` is a service holding a service. ("Stack" would also mean
//! stacked limits, the contract's
//! [`check_many`](crate::store::contract::StoreExt::check_many).) None of it is public: a user
//! never wraps a store, and a store passed to `.store(...)` gets all of them.
//!
//! Each wrapper implements every method of the contract
//! ([`StoreExt`](crate::store::contract::StoreExt)) itself, and the failure handling also
//! [`Leasing`](crate::store::contract::Leasing), which the leases call through it. Nothing
//! else in `store/` imports from here (`scripts/check_layout.sh` checks it).

mod backend;
mod breaker;
mod denial_cache;
mod failure;
mod leases;
pub(crate) mod native;
mod on_drop;
mod resilient;
#[cfg(test)]
pub(crate) mod tests;
pub(crate) mod user_store;

pub(crate) use backend::Backend;
pub(crate) use denial_cache::DenialCache;
pub use failure::{OnStoreError, StoreFailure};
pub(crate) use leases::Leases;
pub(crate) use resilient::Resilient;

/// A backend with every wrapper, as the limiter (and the `rls` service) holds it.
pub(crate) type Wrapped = DenialCache<Leases<Resilient<Backend>>>;

/// How many denials the cache of denials keeps at most (a few MB).
pub(crate) const DENIAL_CACHE_CAPACITY: usize = 100_000;

/// Wraps `backend` in the cache of denials (`denial_cache` entries at most, 0 for none),
/// leases and the failure handling of `failure`.
///
/// The memory store gets no cache of denials: it answers a denied client as fast as the cache
/// would (a lookup under a lock), and the cache would cost every allowed request a clock read.
pub(crate) fn wrap(backend: Backend, failure: &StoreFailure, denial_cache: usize) -> Wrapped {
    let denial_cache = match backend {
        Backend::Memory(_) => 0,
        _ => denial_cache,
    };
    let resilient = Resilient::new(backend).failure(failure);
    DenialCache::new(Leases::new(resilient), denial_cache)
}

impl Wrapped {
    /// The failure handling, for its error count and circuit state.
    pub(crate) fn resilient(&self) -> &Resilient<Backend> {
        self.get_ref().get_ref()
    }
}
