//! [`StateBackedStore`]: a state store of any type and either form ([`StateStore`],
//! [`AtomicStateStore`]), as a [`Store`] the layer takes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::backend::{Atomic, Backend};
use super::{AtomicStateStore, StateBacked, StateStore, Update, Versioned};
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::Policy;
use crate::quota::Quota;
use crate::store::check::Check;
use crate::store::contract::{Leasing, QuotaOverrides, StoreExt};
use crate::store::grant::Grant;
use crate::store::Store;

/// Every algorithm on a [`StateStore`] or an [`AtomicStateStore`] of your own: pass it to the
/// layer's [`store`](crate::RateLimitLayerBuilder::store). See the
/// [module docs](crate::store::state) for how it decides and what it writes.
///
/// Clones share the same backend.
#[derive(Clone)]
pub struct StateBackedStore {
    inner: StateBacked<Erased>,
    /// The `store` label of its metrics: the backend's type name.
    label: Arc<str>,
}

/// The key prefix unless [`StateBackedStore::prefix`] sets another.
const DEFAULT_PREFIX: &str = "tollgate";

impl StateBackedStore {
    /// The algorithms on `backend`, by compare-and-set, deciding by the system clock.
    pub fn new<S: StateStore>(backend: S) -> Self {
        Self::erased::<S>(Erased::Cas(ErasedCas(Arc::new(backend))))
    }

    /// The algorithms on `backend`, each decision inside one of its atomic updates, deciding
    /// by the system clock.
    pub fn atomic<A: AtomicStateStore>(backend: A) -> Self {
        Self::erased::<A>(Erased::Atomic(Atomic(ErasedAtomic(Arc::new(backend)))))
    }

    /// `backend`, labelled with `B`'s type name.
    fn erased<B>(backend: Erased) -> Self {
        // The first read calibrates the clock: here, not in the first request.
        SystemClock.now();
        Self {
            label: crate::telemetry::store_label::<B>(),
            inner: StateBacked::new(backend, Arc::new(SystemClock), DEFAULT_PREFIX.into()),
        }
    }

    /// Decides by `clock` instead (a [`ManualClock`](crate::clock::ManualClock) in tests).
    #[must_use]
    pub fn with_clock(self, clock: impl Clock) -> Self {
        Self {
            inner: self.inner.with_clock(Arc::new(clock)),
            ..self
        }
    }

    /// Sets the key prefix (default `"tollgate"`), e.g. to keep two apps apart on one
    /// backend.
    #[must_use]
    pub fn prefix(self, prefix: impl Into<Arc<str>>) -> Self {
        Self {
            inner: self.inner.with_prefix(prefix.into()),
            ..self
        }
    }

    /// The key under which the state of the client `key` under `policy` is kept.
    pub fn state_key(&self, key: &str, policy: &Policy) -> String {
        self.inner.state_key(key, policy)
    }
}

impl fmt::Debug for StateBackedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateBackedStore")
            .field("backend", &self.label)
            .field("inner", &self.inner)
            .finish()
    }
}

impl Store for StateBackedStore {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.inner.check(&Check::new(key, policy, cost), true).await
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
}

impl StateBackedStore {
    /// One of stacked limits, decided alone (a store that decides them one by one): a denial
    /// writes nothing but what the check itself asks for (a block, a charge).
    #[cfg(feature = "memcached")]
    pub(crate) async fn check_stacked(&self, check: &Check<'_>) -> Result<Decision, StoreError> {
        self.inner.check(check, false).await
    }
}

impl StoreExt for StateBackedStore {
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        self.inner.check_many(checks).await
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        self.inner.refund(key, policy, n).await
    }

    /// Never at once: every decision asks the backend.
    fn check_ready(&self, _: &str, _: &Policy, _: u32) -> Option<Decision> {
        None
    }

    fn clock(&self) -> Option<&dyn Clock> {
        Some(self.inner.clock())
    }

    /// Nothing kept between calls that a given-up call could leave stuck: the backend's own
    /// connections are closed when a call on them is dropped.
    fn abandoned(&self) {}

    /// The backend's type name.
    fn label(&self) -> Arc<str> {
        Arc::clone(&self.label)
    }
}

/// Kept in the backend at `<prefix>:<rule>:quota:<client key>` as `L:P:B`, so that every
/// instance on it sees them.
impl QuotaOverrides for StateBackedStore {
    async fn quota_override(&self, rule: &str, key: &str) -> Result<Option<Quota>, StoreError> {
        self.inner.quota_override(rule, key).await
    }

    async fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.inner.set_quota_override(rule, key, quota, ttl).await
    }
}

impl Leasing for StateBackedStore {
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

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`StateStore`] with boxed futures, so that any backend fits one adapter type.
trait DynStateStore: Send + Sync + 'static {
    fn dyn_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>>;
    fn dyn_set<'a>(
        &'a self,
        key: &'a str,
        bytes: &'a [u8],
        expected: Option<u64>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;
    fn dyn_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl<S: StateStore> DynStateStore for S {
    fn dyn_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(self.get(key))
    }

    fn dyn_set<'a>(
        &'a self,
        key: &'a str,
        bytes: &'a [u8],
        expected: Option<u64>,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.set(key, bytes, expected, ttl))
    }

    fn dyn_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.delete(key))
    }
}

/// Any compare-and-set backend, behind one type.
#[derive(Clone)]
struct ErasedCas(Arc<dyn DynStateStore>);

impl StateStore for ErasedCas {
    async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        self.0.dyn_get(key).await
    }

    async fn set(
        &self,
        key: &str,
        bytes: &[u8],
        expected: Option<u64>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        self.0.dyn_set(key, bytes, expected, ttl).await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.0.dyn_delete(key).await
    }
}

/// The function an [`AtomicStateStore`] is given, as one type.
type Decide<'a> = dyn FnMut(Option<&[u8]>) -> Update + Send + 'a;

/// [`AtomicStateStore`] with boxed futures, so that any backend fits one adapter type.
trait DynAtomicStateStore: Send + Sync + 'static {
    fn dyn_update<'a>(
        &'a self,
        key: &'a str,
        decide: &'a mut Decide<'_>,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
    fn dyn_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>>;
}

impl<A: AtomicStateStore> DynAtomicStateStore for A {
    fn dyn_update<'a>(
        &'a self,
        key: &'a str,
        decide: &'a mut Decide<'_>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.update(key, decide))
    }

    fn dyn_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.delete(key))
    }
}

/// Any atomic backend, behind one type.
#[derive(Clone)]
struct ErasedAtomic(Arc<dyn DynAtomicStateStore>);

impl AtomicStateStore for ErasedAtomic {
    async fn update(
        &self,
        key: &str,
        mut decide: impl FnMut(Option<&[u8]>) -> Update + Send,
    ) -> Result<(), StoreError> {
        self.0.dyn_update(key, &mut decide).await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.0.dyn_delete(key).await
    }
}

/// A backend of either form, behind one type.
#[derive(Clone)]
enum Erased {
    Cas(ErasedCas),
    Atomic(Atomic<ErasedAtomic>),
}

impl Backend for Erased {
    async fn apply<T: Send>(
        &self,
        key: &str,
        turn: &tokio::sync::Mutex<()>,
        decide: impl FnMut(Option<&[u8]>) -> Result<(Update, T), StoreError> + Send,
    ) -> Result<T, StoreError> {
        match self {
            Erased::Cas(backend) => backend.apply(key, turn, decide).await,
            Erased::Atomic(backend) => backend.apply(key, turn, decide).await,
        }
    }

    async fn forget(&self, key: &str) -> Result<(), StoreError> {
        match self {
            Erased::Cas(backend) => backend.forget(key).await,
            Erased::Atomic(backend) => backend.forget(key).await,
        }
    }
}
