//! [`StateBackedStore`]: a state store of any type and either form ([`StateStore`],
//! [`AtomicStateStore`]), as a [`Store`] the layer takes.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::access::{Atomic, StateAccess};
use super::{AtomicStateStore, StateBacked, StateStore, Update, Versioned};
use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::StoreError;
use crate::quota::{InFlight, Policy, Quota};
use crate::store::check::Check;
use crate::store::contract::{InFlightSlots, Leasing, QuotaOverrides, StoreExt};
use crate::store::grant::Grant;
use crate::store::slot::HeldSlot;
use crate::store::Store;

/// Every algorithm on a [`StateStore`] or an [`AtomicStateStore`] of your own: pass it to the
/// layer's [`store`](crate::RateLimitLayerBuilder::store). Clones share the same backend.
///
/// A backend that keeps bytes by key comes in two forms; implement the one your backend does
/// natively.
///
/// A [`StateStore`] (compare-and-set) has three methods: [`get`](StateStore::get) a key's
/// state bytes and their version, [`set`](StateStore::set) new bytes only if the version is
/// still the one read (or the key still absent), with a time to live, and
/// [`delete`](StateStore::delete) a key. memcached's `gets`/`cas`/`add`, etcd's revisions,
/// DynamoDB's conditional writes and a SQL row with a version column fit it.
/// [`new`](Self::new) runs the algorithms on it: it reads the state, decides with the same
/// state machines as [`MemoryStore`](crate::store::MemoryStore), and writes the new state back
/// if nobody changed it in between; if somebody did, it decides again on their state. So it is
/// exact under any concurrency, across any number of instances: every admission was written
/// over the state it was decided on. Within one instance the decisions of one key take turns,
/// so that a burst on a hot key costs a read and a write per request rather than a herd of
/// refused writes; a refused write only ever means another instance wrote first. A key that
/// keeps changing under it is given up after [`MAX_ATTEMPTS`](Self::MAX_ATTEMPTS) tries, as a
/// [`StoreError::KeyState`] that the layer answers by its
/// [`OnStoreError`](crate::store::OnStoreError) policy. Denied requests write nothing.
///
/// An [`AtomicStateStore`] has two methods: [`update`](AtomicStateStore::update) a key in one
/// atomic step, handing its current bytes to a function that says what to store, and
/// [`delete`](AtomicStateStore::delete) it. A map behind a lock, a SQL transaction that reads
/// the row with `SELECT ... FOR UPDATE`, a FoundationDB or etcd transaction fit it.
/// [`atomic`](Self::atomic) runs the same algorithms on it, deciding inside the update on
/// the state it holds: one call per decision, nothing to retry, and exact for the same reason.
/// `examples/custom_store.rs` is one, over a `HashMap`.
///
/// Passed to the layer's builder, a `StateBackedStore` gets what the built-in stores get: the
/// cache of denials, leases for hot keys (taken and given back exactly, one write each),
/// timeouts, the circuit breaker and the fallback. Peek, reset, block and refund work
/// through it too, in both forms. Time comes from the adapter's clock (the system's by
/// default), so the instances sharing a backend should keep their clocks in sync (NTP), as
/// with a [`RedisStore`](crate::store::RedisStore) given a clock.
///
/// # The state's bytes
///
/// Keys are `<prefix>:<policy name>:<algorithm>:<client key>` (the prefix is `tollgate` by
/// default, client keys already sanitized: at most 64 printable ASCII bytes, or a digest), and
/// for the slots of requests in flight ([`InFlight`](crate::store::InFlight))
/// `<prefix>:<limit name>:slots:<client key>`. Values are one format, versioned by their first byte, every number an unsigned 64-bit
/// big-endian integer (µs since the Unix epoch for times):
///
/// | bytes | what |
/// | --- | --- |
/// | 0 | the format's version: 1 |
/// | 1 | what follows: 0 a block, 1 GCRA, 2 token bucket, 3 leaky bucket, 4 fixed window, 5 fixed window from first, 6 sliding window log, 7 sliding window, 8 slots of requests in flight |
/// | 2.. | a block: the time it ends; GCRA and leaky bucket: the theoretical arrival time; token bucket: nothing (a full bucket) or its credit (µs) and when it was computed; both fixed windows: the window's start and its count; sliding window log: the running total before its oldest entry, then each entry's time and running total, oldest first; sliding window: the current window's start, the previous window's count, the current one's; slots: each slot's id and the end of its lease, in the order they were taken |
///
/// A bucket's state written under a client's own quota (see
/// [`Rule::quota_from`](crate::rules::Rule::quota_from)), in another scale than its rule's,
/// is followed by that quota's interval and burst (`T`, `B`): GCRA and the leaky bucket then
/// hold `tat`, `T`, `B`; the token bucket `credit`, `updated_at`, `T`, `B`. A quota set for a
/// client at run time is kept at `<prefix>:<rule>:quota:<client key>` as the text
/// `limit:period_us:burst`, and `:until_us` when it expires.
///
/// A state of another format version is refused (a [`StoreError::KeyState`]), never misread.
/// Each write's time to live is the time until the state decides like a new one (for slots,
/// until the last lease ends), so nothing lives longer than its algorithm needs. A slot is
/// taken, given back, and renewed with its client's other slots, as one change of the key each.
///
/// # A compare-and-set backend
///
/// A map of bytes and versions as a [`StateStore`] (see `examples/custom_store.rs` for the
/// same map as an [`AtomicStateStore`], with expiry):
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
/// use std::time::Duration;
/// use tollgate::store::{StateBackedStore, StateStore, StoreError, Versioned};
/// use tollgate::{key, Quota, RateLimitLayer};
///
/// /// States in a map: (bytes, version). Expiry is left out for brevity.
/// #[derive(Default)]
/// struct Map(Mutex<HashMap<String, (Vec<u8>, u64)>>);
///
/// impl StateStore for Map {
///     async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
///         let map = self.0.lock().unwrap();
///         Ok(map.get(key).map(|(bytes, version)| Versioned::new(bytes.clone(), *version)))
///     }
///
///     async fn set(&self, key: &str, bytes: &[u8], expected: Option<u64>, _ttl: Duration) -> Result<bool, StoreError> {
///         let mut map = self.0.lock().unwrap();
///         let current = map.get(key).map(|(_, version)| *version);
///         if current != expected {
///             return Ok(false);
///         }
///         map.insert(key.to_owned(), (bytes.to_vec(), current.unwrap_or(0) + 1));
///         Ok(true)
///     }
///
///     async fn delete(&self, key: &str) -> Result<(), StoreError> {
///         self.0.lock().unwrap().remove(key);
///         Ok(())
///     }
/// }
///
/// let layer = RateLimitLayer::builder()
///     .quota(Quota::per_minute(100)?)
///     .key(key::Global)
///     .store(StateBackedStore::new(Map::default()))
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct StateBackedStore {
    inner: StateBacked<Erased>,
    /// The `store` label of its metrics: the backend's type name.
    label: Arc<str>,
}

/// The key prefix unless [`StateBackedStore::prefix`] sets another.
const DEFAULT_PREFIX: &str = "tollgate";

impl StateBackedStore {
    /// How many times a decision on a [`StateStore`] reads and tries to write a key's state
    /// before it gives up (a [`StoreError::KeyState`]): each failed try means another instance
    /// wrote the key in between, so the next try decides on its state.
    pub const MAX_ATTEMPTS: u32 = super::MAX_ATTEMPTS;

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
    fn check_many_ready(&self, _: &[Check<'_>]) -> Option<Vec<Decision>> {
        None
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

impl InFlightSlots for StateBackedStore {
    async fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> Result<Decision, StoreError> {
        self.inner.take_slot(key, limit, id).await
    }

    async fn give_back_slot(&self, key: &str, limit: &InFlight, id: u64) -> Result<(), StoreError> {
        self.inner.give_back_slot(key, limit, id).await
    }

    async fn renew_slots(&self, slots: &[HeldSlot<'_>]) -> Result<(), StoreError> {
        self.inner.renew_slots(slots).await
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

impl StateAccess for Erased {
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
