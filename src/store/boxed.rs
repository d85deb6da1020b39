//! [`BoxStore`]: any store, chosen at run time.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::store::{Check, Grant, Store};

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Any [`Store`], chosen at run time: e.g. Redis when a URL is configured, memory otherwise,
/// without the choice showing in the app's types.
///
/// It costs one allocation per decision (the boxed future), next to a Redis round trip.
///
/// ```
/// use tollgate::store::{BoxStore, MemoryStore, RedisStore};
/// use tollgate::{key, Quota, RateLimitLayer};
///
/// let store = match std::env::var("REDIS_URL") {
///     Ok(url) => BoxStore::new(RedisStore::from_url(&url)?),
///     Err(_) => BoxStore::new(MemoryStore::new()),
/// };
/// let layer = RateLimitLayer::builder()
///     .quota(Quota::per_minute(100)?)
///     .key(key::Global)
///     .store(store)
///     .build()?;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
///
/// Its metrics (`tollgate_store_duration_seconds{store}`, `tollgate_circuit_open{store}`) are
/// labelled by the store inside: `memory`, `redis`, `redis_cluster`, `redis_sentinel`.
#[derive(Clone)]
pub struct BoxStore {
    inner: Arc<dyn DynStore>,
    /// The metrics label of the store inside.
    label: Arc<str>,
}

impl BoxStore {
    /// Boxes `store`.
    pub fn new(store: impl Store + fmt::Debug) -> Self {
        Self {
            label: crate::telemetry::store_label_of(&store),
            inner: Arc::new(store),
        }
    }

    /// The `store` label of the metrics: the boxed store's.
    pub(crate) fn label(&self) -> Arc<str> {
        Arc::clone(&self.label)
    }
}

/// [`Store`] with boxed futures, so it can be a trait object.
trait DynStore: Send + Sync + fmt::Debug {
    fn check<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>>;

    fn check_many<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> BoxFuture<'a, Result<Vec<Decision>, StoreError>>;

    fn clock(&self) -> Option<&dyn Clock>;

    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision>;

    fn peek<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>>;
    fn reset<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    fn block<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    fn refund<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        n: u32,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        min: u32,
        max: u32,
    ) -> BoxFuture<'a, Result<Grant, StoreError>>;

    fn release<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        unused: u32,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<u32, StoreError>>;
}

impl<S: Store + fmt::Debug> DynStore for S {
    fn check<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(Store::check(self, key, policy, cost))
    }

    fn check_many<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> BoxFuture<'a, Result<Vec<Decision>, StoreError>> {
        Box::pin(Store::check_many(self, checks))
    }

    fn clock(&self) -> Option<&dyn Clock> {
        Store::clock(self)
    }

    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        Store::check_ready(self, key, policy, cost)
    }

    fn peek<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(Store::peek(self, key, policy, cost))
    }

    fn reset<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::reset(self, key, policy))
    }

    fn block<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::block(self, key, policy, duration))
    }

    fn refund<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        n: u32,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::refund(self, key, policy, n))
    }

    fn acquire<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        min: u32,
        max: u32,
    ) -> BoxFuture<'a, Result<Grant, StoreError>> {
        Box::pin(Store::acquire(self, key, policy, min, max))
    }

    fn release<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        unused: u32,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<u32, StoreError>> {
        Box::pin(Store::release(self, key, policy, unused, grant))
    }
}

impl Store for BoxStore {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.inner.check(key, policy, cost).await
    }

    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        self.inner.check_many(checks).await
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.inner.clock()
    }

    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        self.inner.check_ready(key, policy, cost)
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.inner.peek(key, policy, cost).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.inner.reset(key, policy).await
    }

    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        self.inner.block(key, policy, duration).await
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        self.inner.refund(key, policy, n).await
    }

    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        self.inner.acquire(key, policy, min, max).await
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        self.inner.release(key, policy, unused, grant).await
    }
}

impl fmt::Debug for BoxStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}
