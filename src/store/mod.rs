//! Stores: where rate-limit state lives and decisions are made.

use std::future::Future;

use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;

mod memory;
pub use memory::MemoryStore;

/// Decides requests against a [`Policy`] for one client key, atomically.
///
/// Every store gives the same [`Decision`] for the same history of requests.
pub trait Store: Send + Sync + 'static {
    /// Decides one request of `cost` (≥ 1) by the client `key` under `policy`.
    fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Whether this store decides in-process without I/O. Such a store cannot fail, so the
    /// layer puts no timeout or circuit breaker around it.
    fn is_local(&self) -> bool {
        false
    }
}

#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
pub use self::redis::RedisStore;

mod failover;
pub(crate) use failover::{Breaker, Permit, QuietLog};
pub use failover::{CircuitBreaker, OnStoreError};
