//! The stack the layer's builder puts around every store, outermost first: the cache of
//! denials, leases for hot keys, failure handling (timeout, circuit breaker, fallback).

mod breaker;
mod denial_cache;
mod grant;
mod leases;
mod resilient;

pub(crate) use breaker::Breaker;
pub use breaker::CircuitBreaker;
pub use denial_cache::DenialCache;
pub use grant::Grant;
pub use leases::Leases;
pub(crate) use resilient::ErrorHook;
pub use resilient::{OnStoreError, Resilient};
