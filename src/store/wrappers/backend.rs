//! [`Backend`]: the store under the wrappers, chosen once when the layer is built.
//!
//! A built-in store is recognised by its type and called directly, so the memory store's
//! decisions stay synchronous and unboxed and a Redis decision's future stays one future. Any
//! other [`Store`] is a user's: it gets the fallbacks of [`UserStore`] and boxed futures
//! ([`BoxedStore`]), so that the layer's type never names it. Each method is one dispatch.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::native::Native;
use super::user_store::{BoxedStore, UserStore};
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::{InFlight, Policy, Quota};
use crate::store::check::Check;
use crate::store::contract::{InFlightSlots, Leasing, QuotaOverrides, StoreExt};
use crate::store::grant::Grant;
#[cfg(feature = "memcached")]
use crate::store::memcached::MemcachedStore;
use crate::store::memory::MemoryStore;
#[cfg(feature = "redis")]
use crate::store::redis::RedisStore;
use crate::store::slot::HeldSlot;
use crate::store::state::StateBackedStore;
use crate::store::Store;

/// The store the wrappers decide with.
pub(crate) enum Backend {
    Memory(MemoryStore),
    #[cfg(feature = "redis")]
    Redis(RedisStore),
    /// A store behind a box: a user's (a [`UserStore`]), or one that keeps the whole contract
    /// itself (a [`Native`]: the state-backed stores).
    User(BoxedStore),
}

/// Calls `$call` on the store inside `$backend`, whichever it is.
macro_rules! dispatch {
    ($backend:expr, $store:ident => $call:expr) => {
        match $backend {
            Backend::Memory($store) => $call,
            #[cfg(feature = "redis")]
            Backend::Redis($store) => $call,
            Backend::User($store) => $call,
        }
    };
}

impl Backend {
    /// The backend for `store`: a built-in one by its type, else a user's.
    pub(crate) fn of<S: Store>(store: S) -> Self {
        let mut slot = Some(store);
        match (Self::built_in(&mut slot), slot) {
            (Some(backend), _) => backend,
            (None, Some(store)) => Self::User(Box::new(UserStore::new(store))),
            // `built_in` takes the store only when it returns its backend.
            (None, None) => Self::Memory(MemoryStore::new()),
        }
    }

    /// A store that implements the contract itself, e.g. a test's store with a lease of its
    /// own making.
    #[cfg(test)]
    pub(crate) fn custom<S: Leasing + QuotaOverrides + InFlightSlots>(store: S) -> Self {
        Self::User(Box::new(Native(store)))
    }

    /// The built-in backend holding the store in `slot`, if it is one (taken out of `slot`).
    fn built_in<S: 'static>(slot: &mut Option<S>) -> Option<Self> {
        if let Some(memory) = take(slot) {
            return Some(Self::Memory(memory));
        }
        // Leases, refunds and charged hits of its own, through the backend's state.
        if let Some(state_backed) = take::<StateBackedStore, S>(slot) {
            return Some(Self::User(Box::new(Native(state_backed))));
        }
        #[cfg(feature = "memcached")]
        if let Some(memcached) = take::<MemcachedStore, S>(slot) {
            return Some(Self::User(Box::new(Native(memcached))));
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

    #[inline]
    fn check_ready(&self, key: &str, policy: &Policy, cost: u32) -> Option<Decision> {
        dispatch!(self, store => store.check_ready(key, policy, cost))
    }

    /// The memory store's at once; every other backend's are round trips.
    #[inline]
    fn check_many_ready(&self, checks: &[Check<'_>]) -> Option<Vec<Decision>> {
        match self {
            Backend::Memory(store) => store.check_many_ready(checks),
            _ => None,
        }
    }

    fn clock(&self) -> Option<&dyn Clock> {
        dispatch!(self, store => store.clock())
    }

    fn abandoned(&self) {
        dispatch!(self, store => store.abandoned())
    }

    fn label(&self) -> Arc<str> {
        dispatch!(self, store => store.label())
    }
}

impl Leasing for Backend {
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
}

impl QuotaOverrides for Backend {
    async fn quota_override(&self, rule: &str, key: &str) -> Result<Option<Quota>, StoreError> {
        dispatch!(self, store => store.quota_override(rule, key).await)
    }

    async fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        dispatch!(self, store => store.set_quota_override(rule, key, quota, ttl).await)
    }
}

impl InFlightSlots for Backend {
    async fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> Result<Decision, StoreError> {
        dispatch!(self, store => store.take_slot(key, limit, id).await)
    }

    async fn give_back_slot(&self, key: &str, limit: &InFlight, id: u64) -> Result<(), StoreError> {
        dispatch!(self, store => store.give_back_slot(key, limit, id).await)
    }

    fn give_back_slot_now(&self, key: &str, limit: &InFlight, id: u64) -> bool {
        dispatch!(self, store => store.give_back_slot_now(key, limit, id))
    }

    async fn renew_slots(&self, slots: &[HeldSlot<'_>]) -> Result<(), StoreError> {
        dispatch!(self, store => store.renew_slots(slots).await)
    }
}

impl fmt::Debug for Backend {
    /// A built-in store as itself; a user's by its label (it need not be `Debug`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Backend::Memory(store) => fmt::Debug::fmt(store, f),
            #[cfg(feature = "redis")]
            Backend::Redis(store) => fmt::Debug::fmt(store, f),
            Backend::User(store) => f.debug_tuple("User").field(&store.label()).finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::wrappers::tests::Remote;
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
        let mine = Backend::of(Remote::new());
        assert!(matches!(mine, Backend::User(_)));
        assert_eq!(&*mine.label(), "remote");
        assert_eq!(format!("{mine:?}"), "User(\"remote\")");
    }

    #[tokio::test]
    async fn a_users_store_gets_exact_defaults() {
        let store = Backend::of(Remote::new());
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
