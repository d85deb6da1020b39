//! Stores: where rate-limit state lives and decisions are made.
//!
//! A backend ([`MemoryStore`], [`RedisStore`]) decides; wrappers that are themselves stores
//! add one concern each around it. The layer's builder puts its store inside a
//! [`Resilient`] (timeout, circuit breaker, fallback), and [`BoxStore`] lets an app choose
//! a backend at run time.

use std::future::Future;
use std::time::Duration;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;

mod memory;
pub use memory::MemoryStore;
mod stack;
pub use stack::Grant;

/// One limit of a stacked decision: a client key under a policy, at a cost.
///
/// ```
/// use tollgate::store::Check;
/// use tollgate::{Algorithm, Policy, Quota};
///
/// let policy = Policy::new("api", Quota::per_minute(100)?, Algorithm::Gcra)?;
/// let shadow = Check::new("client-1", &policy, 1).blocking(false);
/// assert!(!shadow.blocking);
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
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

impl<'a> Check<'a> {
    /// A blocking check of `key` under `policy` at `cost`.
    pub fn new(key: &'a str, policy: &'a Policy, cost: u32) -> Self {
        Self {
            key,
            policy,
            cost,
            blocking: true,
        }
    }

    /// Whether a denial by this check blocks the request (default true).
    #[must_use]
    pub fn blocking(mut self, blocking: bool) -> Self {
        self.blocking = blocking;
        self
    }
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

    /// The clock this store decides by, when it reads one in this process (a
    /// [`MemoryStore`], or a [`RedisStore`] given a clock); `None` when its time comes from
    /// elsewhere (Redis `TIME`). Wrappers that keep state bounded in time (the
    /// [`DenialCache`]) read it so that they agree with the store, [`ManualClock`]s included.
    ///
    /// [`ManualClock`]: crate::ManualClock
    fn clock(&self) -> Option<&dyn Clock> {
        None
    }

    /// The decision a request of `cost` by `key` under `policy` would get now, consuming
    /// nothing: what a client has left, e.g. for an admin page, or to check a quota before
    /// the work it is counted for (a rule's `count_status`). Every store gives the same peek
    /// for the same history, and the same decision a [`check`](Self::check) at that instant
    /// would give.
    ///
    /// The default implementation answers [`StoreError::Unsupported`], so stores written
    /// before it still compile; the built-in stores and wrappers implement it.
    fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        let _ = (key, policy, cost);
        std::future::ready(Err(StoreError::Unsupported("peek")))
    }

    /// Forgets the state of `key` under `policy`, and any block: its next request starts
    /// with a whole quota.
    ///
    /// The default returns [`StoreError::Unsupported`], so stores that only decide still
    /// compile; the built-in stores implement it.
    fn reset(
        &self,
        key: &str,
        policy: &Policy,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (key, policy);
        async { Err(StoreError::Unsupported("reset")) }
    }

    /// Denies every request of `key` under `policy` for `duration` from now, with
    /// `remaining` 0 and `retry_after` the rest of the block. The block replaces the
    /// client's state, so once it ends the client starts with a whole quota. A zero
    /// `duration` is a [`reset`](Self::reset).
    ///
    /// The default returns [`StoreError::Unsupported`].
    fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (key, policy, duration);
        async { Err(StoreError::Unsupported("block")) }
    }

    /// Gives `n` units back to `key` under `policy`, as far as the algorithm allows:
    ///
    /// - `Gcra`, `LeakyBucket`: the TAT moves back by `n·T`, never before now;
    /// - `TokenBucket`: `n` tokens are added, up to the capacity;
    /// - `FixedWindow`, `FixedWindowFromFirst`, `SlidingWindow`: the count of the current
    ///   window goes down by `n`, not below 0 (earlier windows are left as they are);
    /// - `SlidingWindowLog`: the newest `n` units of the log are removed.
    ///
    /// A blocked client stays blocked (use [`reset`](Self::reset) to lift a block), and a
    /// client with no state has nothing to get back.
    ///
    /// The default returns [`StoreError::Unsupported`].
    fn refund(
        &self,
        key: &str,
        policy: &Policy,
        n: u32,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = (key, policy, n);
        async { Err(StoreError::Unsupported("refund")) }
    }

    /// Leases from `min` to `max` units (`1 ≤ min ≤ max`) of `key`'s quota under `policy` in
    /// one atomic step, for an instance to spend locally (see [`Leases`]): as many as the
    /// algorithm admits back to back at this instant, consumed as if that many requests had
    /// been allowed; none if fewer than `min` fit, with the denial a request of cost `min`
    /// would get.
    ///
    /// The default implementation decides one request of cost `min` with
    /// [`check`](Self::check) and grants `min` units if it is allowed: exact, and no cheaper
    /// than a check per request. The built-in stores override it.
    fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> impl Future<Output = Result<Grant, StoreError>> + Send {
        let _ = max;
        async move {
            let decision = self.check(key, policy, min).await?;
            let granted = if decision.allowed { min } else { 0 };
            Ok(Grant::new(granted, decision, 0))
        }
    }

    /// Gives back up to `unused` units of `grant` (a lease of `key` under `policy`) and
    /// returns how many were taken back: only what the algorithm can take back exactly (see
    /// DESIGN: for the buckets, what is still ahead of now; for the fixed windows, within the
    /// lease's window).
    ///
    /// The default implementation takes nothing back: unused units then count as used, which
    /// only ever admits less.
    fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> impl Future<Output = Result<u32, StoreError>> + Send {
        let _ = (key, policy, unused, grant);
        async { Ok(0) }
    }

    /// The decision for one request of `cost` by `key` under `policy`, when this store can
    /// make it at once, in this process: a [`MemoryStore`] always can; a [`DenialCache`] can
    /// for a client it holds a denial of, and [`Leases`] from a lease in hand. The layer then
    /// answers without its asynchronous path (no boxed future, nothing to cancel).
    ///
    /// `None` means the store must be asked with [`check`](Self::check); a store that answers
    /// `None` must have changed nothing. The default is `None`, which is always correct.
    ///
    /// ```
    /// use tollgate::store::{MemoryStore, Store};
    /// use tollgate::{Algorithm, Policy, Quota};
    ///
    /// let policy = Policy::new("api", Quota::per_minute(1)?, Algorithm::Gcra)?;
    /// let store = MemoryStore::new();
    /// assert!(store.check_ready("client-1", &policy, 1).is_some_and(|d| d.allowed));
    /// assert!(store.check_ready("client-1", &policy, 1).is_some_and(|d| !d.allowed));
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        let _ = (key, policy, cost);
        None
    }
}

#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::RedisStore;
#[cfg(feature = "cluster")]
mod redis_cluster;
#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use self::redis_cluster::RedisClusterStore;
#[cfg(feature = "sentinel")]
mod redis_sentinel;
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub use self::redis_sentinel::RedisSentinelStore;

mod boxed;
pub use boxed::BoxStore;
pub(crate) use stack::ErrorHook;
pub use stack::{CircuitBreaker, DenialCache, Leases, OnStoreError, Resilient};
