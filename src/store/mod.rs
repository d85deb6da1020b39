//! Stores: where rate-limit state lives and decisions are made, and the whole kit for a store
//! of your own.
//!
//! [`MemoryStore`] keeps it in this process (the default); [`RedisStore`] keeps it in Redis,
//! shared by every instance of the app, one atomic Lua script per decision. A backend of your
//! own implements [`Store`]'s four methods, with the types they take and return here:
//! [`Policy`] (what to decide by) and [`StoreError`] (what went wrong); or it only keeps bytes
//! by key, with a version (a [`StateStore`]) or updated in one atomic step (an
//! [`AtomicStateStore`]), and [`StateBackedStore`] runs every algorithm on it.
//! Whichever store it is, the layer's builder
//! ([`store`](crate::RateLimitLayerBuilder::store)) puts the same wrappers around it, in this
//! order, outermost first:
//!
//! 1. the cache of denials (a client already denied is answered here until its
//!    `Retry-After`, without asking the store; not around the memory store, which answers as
//!    fast);
//! 2. leases for hot keys (a policy with a `Lease` spends units paid for in the store);
//! 3. failure handling, set by [`StoreFailure`] and [`OnStoreError`] (a timeout, a circuit
//!    breaker, fail open, closed or to memory);
//! 4. the store.
//!
//! None of them is a type you build or wrap yourself. The choice of store is made at run
//! time, with no type parameter:
//!
//! ```
//! use tollgate::store::{MemoryStore, RedisStore};
//! use tollgate::{key, Quota, RateLimitLayer};
//!
//! let builder = RateLimitLayer::builder().quota(Quota::per_minute(100)?).key(key::Global);
//! let layer = match std::env::var("REDIS_URL") {
//!     Ok(url) => builder.store(RedisStore::from_url(&url)?),
//!     Err(_) => builder.store(MemoryStore::new()),
//! }
//! .build()?;
//! # let _ = layer;
//! # Ok::<(), tollgate::ConfigError>(())
//! ```

use std::future::Future;
use std::time::Duration;

pub use crate::decision::Decision;
pub use crate::error::StoreError;
pub use crate::quota::{InFlight, Policy};

pub(crate) mod check;
pub(crate) mod contract;
pub(crate) mod grant;
mod memory;
pub(crate) mod slot;
pub(crate) mod state;
pub(crate) mod wrappers;
pub(crate) use memory::block_after;
pub use memory::MemoryStore;
pub use state::{AtomicStateStore, StateBackedStore, StateStore, Update, Versioned};
pub use wrappers::{OnStoreError, StoreFailure};
#[cfg(all(test, feature = "cluster", feature = "sentinel"))]
mod tests;

/// Decides requests against a [`Policy`] for one client key, atomically: what a backend of
/// your own implements.
///
/// Four methods, all required. Every store gives the same [`Decision`] for the same history
/// of requests; a store that cannot do one of them answers [`StoreError::Unsupported`] for
/// it. Passed to the layer's builder, a store gets everything the built-in ones get around
/// them: the cache of denials, leases for hot keys (exact: a lease is one
/// [`check`](Self::check) of its size), failure handling, and stacked limits (checked in
/// order, one call each).
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use tollgate::store::{Decision, MemoryStore, Policy, Store, StoreError};
/// use tollgate::{key, Quota, RateLimitLayer};
///
/// /// Decides in memory, and counts the decisions it was asked for.
/// #[derive(Default)]
/// struct Counting {
///     inner: MemoryStore,
///     checks: AtomicU64,
/// }
///
/// impl Store for Counting {
///     async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
///         self.checks.fetch_add(1, Ordering::Relaxed);
///         self.inner.check(key, policy, cost).await
///     }
///
///     async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
///         self.inner.peek(key, policy, cost).await
///     }
///
///     async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
///         self.inner.reset(key, policy).await
///     }
///
///     async fn block(&self, key: &str, policy: &Policy, duration: Duration) -> Result<(), StoreError> {
///         self.inner.block(key, policy, duration).await
///     }
/// }
///
/// let layer = RateLimitLayer::builder()
///     .quota(Quota::per_minute(100)?)
///     .key(key::Global)
///     .store(Counting::default())
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
pub trait Store: Send + Sync + 'static {
    /// Decides one request of `cost` (≥ 1) by the client `key` under `policy`, and counts it
    /// if it is allowed.
    fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// The decision a request of `cost` by `key` under `policy` would get now, consuming
    /// nothing: what a client has left, e.g. for an admin page, or to check a quota before
    /// the work it is counted for (a rule's `count_status`). The same decision a
    /// [`check`](Self::check) at that instant would give.
    fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send;

    /// Forgets the state of `key` under `policy`, and any block: its next request starts
    /// with a whole quota.
    fn reset(
        &self,
        key: &str,
        policy: &Policy,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Denies every request of `key` under `policy` for `duration` from now, with
    /// `remaining` 0 and `retry_after` the rest of the block. The block replaces the
    /// client's state, so once it ends the client starts with a whole quota. A zero
    /// `duration` is a [`reset`](Self::reset).
    fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

#[cfg(feature = "memcached")]
mod memcached;
#[cfg(feature = "memcached")]
#[cfg_attr(docsrs, doc(cfg(feature = "memcached")))]
pub use self::memcached::{MemcachedSrv, MemcachedStore};
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use self::redis::RedisTls;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use self::redis::{redacted_url, RedisOptions, RedisStore};
