//! Stores: where rate-limit state lives and decisions are made.

use std::future::Future;

use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;

mod memory;
pub use memory::MemoryStore;

/// One limit of a stacked decision: a client key under a policy, at a cost.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The client key (already sanitized).
    pub key: &'a str,
    /// The policy to check it against.
    pub policy: &'a Policy,
    /// The request's cost (≥ 1).
    pub cost: u32,
    /// Whether a denial by this check blocks the request. Shadow-mode limits are checked and
    /// counted but never block, so their denial must not keep the others from counting.
    pub blocking: bool,
}

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

    /// Decides one request against several limits at once (stacked limits), all at the same
    /// instant and atomically: if any blocking check is denied, nothing is consumed from any
    /// limit; otherwise every check that was allowed is consumed. Returns one decision per
    /// check, in order, each as that limit alone decided it. Two checks of the same key and
    /// policy are decided in order, the second seeing what the first consumed.
    ///
    /// The default implementation runs [`check`](Self::check) one by one and is not atomic
    /// (an earlier limit counts a request that a later one denies); the built-in stores
    /// override it.
    fn check_many(
        &self,
        checks: &[Check<'_>],
    ) -> impl Future<Output = Result<Vec<Decision>, StoreError>> + Send {
        async move {
            let mut decisions = Vec::with_capacity(checks.len());
            for c in checks {
                decisions.push(self.check(c.key, c.policy, c.cost).await?);
            }
            Ok(decisions)
        }
    }

    /// Whether this store decides in-process without I/O. Such a store cannot fail, so the
    /// layer puts no timeout or circuit breaker around it.
    fn is_local(&self) -> bool {
        false
    }
}

#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisStore;

mod failover;
pub(crate) use failover::{Breaker, Permit, QuietLog};
pub use failover::{CircuitBreaker, OnStoreError};
