//! [`Backend`]: the store under the stack, chosen once when the layer is built.
//!
//! A built-in store is recognised by its type and called directly, so the memory store's
//! decisions stay synchronous and unboxed and a Redis decision's future stays one future. Any
//! other [`Store`] is a user's: it gets the exact defaults of [`StoreExt`] and boxed futures,
//! so that the layer's type never names it.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::{Check, Grant, StoreExt};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
#[cfg(feature = "redis")]
use crate::store::RedisStore;
use crate::store::{MemoryStore, StateBackedStore, Store};

/// The store the stack decides with.
pub(crate) enum Backend {
    Memory(MemoryStore),
    #[cfg(feature = "redis")]
    Redis(RedisStore),
    Custom(Custom),
}

/// Calls `$call` on the store inside `$backend`, whichever it is.
macro_rules! dispatch {
    ($backend:expr, $store:ident => $call:expr) => {
        match $backend {
            Backend::Memory($store) => $call,
            #[cfg(feature = "redis")]
            Backend::Redis($store) => $call,
            Backend::Custom($store) => $call,
        }
    };
}

impl Backend {
    /// The backend for `store`: a built-in one by its type, else a user's.
    pub(crate) fn of<S: Store>(store: S) -> Self {
        let mut slot = Some(store);
        match (Self::built_in(&mut slot), slot) {
            (Some(backend), _) => backend,
            (None, Some(store)) => Self::Custom(Custom::new(Defaults(store))),
            // `built_in` takes the store only when it returns its backend.
            (None, None) => Self::Memory(MemoryStore::new()),
        }
    }

    /// A store that implements [`StoreExt`] itself, e.g. a test's store with a lease of its
    /// own making.
    #[cfg(test)]
    pub(crate) fn custom<S: StoreExt>(store: S) -> Self {
        Self::Custom(Custom::new(store))
    }

    /// The built-in backend holding the store in `slot`, if it is one (taken out of `slot`).
    fn built_in<S: 'static>(slot: &mut Option<S>) -> Option<Self> {
        if let Some(memory) = take(slot) {
            return Some(Self::Memory(memory));
        }
        // Leases, refunds and charged hits of its own, through the backend's state.
        if let Some(state_backed) = take::<StateBackedStore, S>(slot) {
            return Some(Self::Custom(Custom::new(state_backed)));
        }
        #[cfg(feature = "memcached")]
        if let Some(memcached) = take::<crate::store::MemcachedStore, S>(slot) {
            return Some(Self::Custom(Custom::new(memcached)));
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = take(slot) {
            return Some(Self::Redis(redis));
        }
        None
    }
}

/// The `T` in `slot`, taken out, if `S` is `T`.
fn take<T: 'static, S: 'static>(slot: &mut Option<S>) -> Option<T> {
    (slot as &mut dyn Any).downcast_mut::<Option<T>>()?.take()
}

impl Store for Backend {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        dispatch!(self, store => store.check(key, policy, cost).await)
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        dispatch!(self, store => store.peek(key, policy, cost).await)
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        dispatch!(self, store => store.reset(key, policy).await)
    }

    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        dispatch!(self, store => store.block(key, policy, duration).await)
    }
}

impl StoreExt for Backend {
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        dispatch!(self, store => store.check_many(checks).await)
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        dispatch!(self, store => store.refund(key, policy, n).await)
    }

    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        dispatch!(self, store => store.acquire(key, policy, min, max).await)
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        dispatch!(self, store => store.release(key, policy, unused, grant).await)
    }

    #[inline]
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        dispatch!(self, store => store.check_ready(key, policy, cost))
    }

    fn clock(&self) -> Option<&dyn Clock> {
        dispatch!(self, store => store.clock())
    }

    fn abandoned(&self) {
        dispatch!(self, store => store.abandoned())
    }

    /// The store's own label: `memory`, `redis`, `redis_cluster`, `redis_sentinel`, or a
    /// user's store's short type name.
    fn label(&self) -> Arc<str> {
        dispatch!(self, store => store.label())
    }
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        dispatch!(self, store => fmt::Debug::fmt(store, f))
    }
}

impl fmt::Debug for Custom {
    /// The store's label: a user's store need not be `Debug`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Custom").field(&self.label).finish()
    }
}

/// A user's [`Store`] with the defaults of [`StoreExt`]: leases by `check`, nothing given
/// back, stacked limits checked in order, no refunds.
struct Defaults<S>(S);

impl<S: Store> Store for Defaults<S> {
    fn check(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        self.0.check(key, policy, cost)
    }

    fn peek(
        &self,
        key: &str,
        policy: &Policy,
        cost: u32,
    ) -> impl Future<Output = Result<Decision, StoreError>> + Send {
        self.0.peek(key, policy, cost)
    }

    fn reset(
        &self,
        key: &str,
        policy: &Policy,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.reset(key, policy)
    }

    fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.0.block(key, policy, duration)
    }
}

impl<S: Store> StoreExt for Defaults<S> {
    /// The user's store's own type name, not the adapter's.
    fn label(&self) -> Arc<str> {
        crate::telemetry::store_label::<S>()
    }
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A store of a type the layer does not name, its futures boxed.
pub(crate) struct Custom {
    store: Box<dyn DynStore>,
    /// The `store` label of its metrics, from its type's name.
    label: Arc<str>,
}

impl Custom {
    fn new<S: StoreExt>(store: S) -> Self {
        Self {
            label: store.label(),
            store: Box::new(store),
        }
    }
}

/// [`Store`] and [`StoreExt`] with boxed futures, so that a store can be a trait object.
trait DynStore: Send + Sync {
    fn dyn_check<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>>;
    fn dyn_peek<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>>;
    fn dyn_reset<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn dyn_block<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn dyn_check_many<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> BoxFuture<'a, Result<Vec<Decision>, StoreError>>;
    fn dyn_refund<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        n: u32,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn dyn_acquire<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        min: u32,
        max: u32,
    ) -> BoxFuture<'a, Result<Grant, StoreError>>;
    fn dyn_release<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        unused: u32,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<u32, StoreError>>;
    fn dyn_check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision>;
    fn dyn_clock(&self) -> Option<&dyn Clock>;
}

impl<S: StoreExt> DynStore for S {
    fn dyn_check<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(Store::check(self, key, policy, cost))
    }

    fn dyn_peek<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        cost: u32,
    ) -> BoxFuture<'a, Result<Decision, StoreError>> {
        Box::pin(Store::peek(self, key, policy, cost))
    }

    fn dyn_reset<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::reset(self, key, policy))
    }

    fn dyn_block<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        duration: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(Store::block(self, key, policy, duration))
    }

    fn dyn_check_many<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> BoxFuture<'a, Result<Vec<Decision>, StoreError>> {
        Box::pin(StoreExt::check_many(self, checks))
    }

    fn dyn_refund<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        n: u32,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(StoreExt::refund(self, key, policy, n))
    }

    fn dyn_acquire<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        min: u32,
        max: u32,
    ) -> BoxFuture<'a, Result<Grant, StoreError>> {
        Box::pin(StoreExt::acquire(self, key, policy, min, max))
    }

    fn dyn_release<'a>(
        &'a self,
        key: &'a str,
        policy: &'a Policy,
        unused: u32,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<u32, StoreError>> {
        Box::pin(StoreExt::release(self, key, policy, unused, grant))
    }

    fn dyn_check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        StoreExt::check_ready(self, key, policy, cost)
    }

    fn dyn_clock(&self) -> Option<&dyn Clock> {
        StoreExt::clock(self)
    }
}

impl Store for Custom {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.store.dyn_check(key, policy, cost).await
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.store.dyn_peek(key, policy, cost).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.store.dyn_reset(key, policy).await
    }

    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        self.store.dyn_block(key, policy, duration).await
    }
}

impl StoreExt for Custom {
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        self.store.dyn_check_many(checks).await
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        self.store.dyn_refund(key, policy, n).await
    }

    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        self.store.dyn_acquire(key, policy, min, max).await
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        self.store.dyn_release(key, policy, unused, grant).await
    }

    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        self.store.dyn_check_ready(key, policy, cost)
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.store.dyn_clock()
    }

    /// The user's store's type name, taken when it was wrapped.
    fn label(&self) -> Arc<str> {
        Arc::clone(&self.label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::stack::UserStore;
    use crate::{Algorithm, Quota};

    #[test]
    fn built_in_stores_are_called_directly_and_others_are_labelled_by_their_type() {
        let memory = Backend::of(MemoryStore::new());
        assert!(matches!(memory, Backend::Memory(_)));
        assert_eq!(&*memory.label(), "memory");
        #[cfg(feature = "redis")]
        {
            let redis = Backend::of(RedisStore::from_url("redis://127.0.0.1:1").unwrap());
            assert!(matches!(redis, Backend::Redis(_)));
            assert_eq!(&*redis.label(), "redis");
        }
        let mine = Backend::of(UserStore::new());
        assert!(matches!(mine, Backend::Custom(_)));
        assert_eq!(&*mine.label(), "user");
        assert_eq!(format!("{mine:?}"), "Custom(\"user\")");
    }

    #[tokio::test]
    async fn a_users_store_gets_exact_defaults() {
        let store = Backend::of(UserStore::new());
        let policy = Policy::new("p", Quota::per_minute(3).unwrap(), Algorithm::Gcra).unwrap();
        // Nothing at once: the store is asked.
        assert!(store.check_ready("k", &policy, 1).is_none());
        // A lease is one check of its smallest size, and nothing comes back.
        let grant = store.acquire("k", &policy, 2, 3).await.unwrap();
        assert_eq!((grant.granted, grant.decision.remaining), (2, 1));
        assert_eq!(store.release("k", &policy, 2, &grant).await.unwrap(), 0);
        // Stacked limits are checked in order; a refund is not the user's to give.
        let checks = [Check::new("k", &policy, 1), Check::new("k", &policy, 1)];
        let decisions = store.check_many(&checks).await.unwrap();
        assert_eq!(
            decisions.iter().map(|d| d.allowed).collect::<Vec<_>>(),
            [true, false]
        );
        assert!(matches!(
            store.refund("k", &policy, 1).await,
            Err(StoreError::Unsupported("refund"))
        ));
    }
}
