//! A store of your own without algorithm code: a backend that keeps bytes by key decides every
//! algorithm through [`StateBackedStore`]. It comes in two forms; implement the one your
//! backend does natively.
//!
//! A [`StateStore`] (compare-and-set) has three methods: [`get`](StateStore::get) a key's
//! state bytes and their version, [`set`](StateStore::set) new bytes only if the version is
//! still the one read (or the key still absent), with a time to live, and
//! [`delete`](StateStore::delete) a key. memcached's `gets`/`cas`/`add`, etcd's revisions,
//! DynamoDB's conditional writes and a SQL row with a version column fit it.
//! [`StateBackedStore::new`] runs the algorithms on it: it reads the state, decides with the
//! same state machines as [`MemoryStore`](super::MemoryStore), and writes the new state back if
//! nobody changed it in between; if somebody did, it decides again on their state. So it is
//! exact under any concurrency, across any number of instances: every admission was written
//! over the state it was decided on. Within one instance the decisions of one key take turns,
//! so that a burst on a hot key costs a read and a write per request rather than a herd of
//! refused writes; a refused write only ever means another instance wrote first. A key that
//! keeps changing under it is given up after [`MAX_ATTEMPTS`] tries, as a
//! [`StoreError::KeyState`] that the layer answers by its
//! [`OnStoreError`](super::OnStoreError) policy. Denied requests write nothing.
//!
//! An [`AtomicStateStore`] has two methods: [`update`](AtomicStateStore::update) a key in one
//! atomic step, handing its current bytes to a function that says what to store, and
//! [`delete`](AtomicStateStore::delete) it. A map behind a lock, a SQL transaction that reads
//! the row with `SELECT ... FOR UPDATE`, a FoundationDB or etcd transaction fit it.
//! [`StateBackedStore::atomic`] runs the same algorithms on it, deciding inside the update on
//! the state it holds: one call per decision, nothing to retry, and exact for the same reason.
//! `examples/custom_store.rs` is one, over a `HashMap`.
//!
//! Passed to the layer's builder, a `StateBackedStore` gets what the built-in stores get: the
//! cache of denials, leases for hot keys (taken and given back exactly, one write each),
//! timeouts, the circuit breaker and the fallback. Peek, reset, block and refund work
//! through it too, in both forms. Time comes from the adapter's clock (the system's by
//! default), so the instances sharing a backend should keep their clocks in sync (NTP), as
//! with a [`RedisStore`](super::RedisStore) given a clock.
//!
//! # The state's bytes
//!
//! Keys are `<prefix>:<policy name>:<algorithm>:<client key>` (the prefix is `tollgate` by
//! default, client keys already sanitized: at most 64 printable ASCII bytes, or a digest).
//! Values are one format, versioned by their first byte, every number an unsigned 64-bit
//! big-endian integer (µs since the Unix epoch for times):
//!
//! | bytes | what |
//! | --- | --- |
//! | 0 | the format's version: 1 |
//! | 1 | what follows: 0 a block, 1 GCRA, 2 token bucket, 3 leaky bucket, 4 fixed window, 5 fixed window from first, 6 sliding window log, 7 sliding window |
//! | 2.. | a block: the time it ends; GCRA and leaky bucket: the theoretical arrival time; token bucket: nothing (a full bucket) or its credit (µs) and when it was computed; both fixed windows: the window's start and its count; sliding window log: the running total before its oldest entry, then each entry's time and running total, oldest first; sliding window: the current window's start, the previous window's count, the current one's |
//!
//! A bucket's state written under a client's own quota (see
//! [`Rule::quota_from`](crate::rules::Rule::quota_from)), in another scale than its rule's,
//! is followed by that quota's interval and burst (`T`, `B`): GCRA and the leaky bucket then
//! hold `tat`, `T`, `B`; the token bucket `credit`, `updated_at`, `T`, `B`. A quota set for a
//! client at run time is kept at `<prefix>:<rule>:quota:<client key>` as the text
//! `limit:period_us:burst`, and `:until_us` when it expires.
//!
//! A state of another format version is refused (a [`StoreError::KeyState`]), never misread.
//! Each write's time to live is the time until the state decides like a new one, so nothing
//! lives longer than its algorithm needs.
//!
//! # A compare-and-set backend
//!
//! A map of bytes and versions as a [`StateStore`] (see `examples/custom_store.rs` for the
//! same map as an [`AtomicStateStore`], with expiry):
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use std::time::Duration;
//! use tollgate::store::{StateBackedStore, StateStore, StoreError, Versioned};
//! use tollgate::{key, Quota, RateLimitLayer};
//!
//! /// States in a map: (bytes, version). Expiry is left out for brevity.
//! #[derive(Default)]
//! struct Map(Mutex<HashMap<String, (Vec<u8>, u64)>>);
//!
//! impl StateStore for Map {
//!     async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
//!         let map = self.0.lock().unwrap();
//!         Ok(map.get(key).map(|(bytes, version)| Versioned::new(bytes.clone(), *version)))
//!     }
//!
//!     async fn set(&self, key: &str, bytes: &[u8], expected: Option<u64>, _ttl: Duration) -> Result<bool, StoreError> {
//!         let mut map = self.0.lock().unwrap();
//!         let current = map.get(key).map(|(_, version)| *version);
//!         if current != expected {
//!             return Ok(false);
//!         }
//!         map.insert(key.to_owned(), (bytes.to_vec(), current.unwrap_or(0) + 1));
//!         Ok(true)
//!     }
//!
//!     async fn delete(&self, key: &str) -> Result<(), StoreError> {
//!         self.0.lock().unwrap().remove(key);
//!         Ok(())
//!     }
//! }
//!
//! let layer = RateLimitLayer::builder()
//!     .quota(Quota::per_minute(100)?)
//!     .key(key::Global)
//!     .store(StateBackedStore::new(Map::default()))
//!     .build()?;
//! # let _ = layer;
//! # Ok::<(), tollgate::ConfigError>(())
//! ```

use std::future::Future;
use std::time::Duration;

use crate::error::StoreError;

mod adapter;
mod backed;
mod backend;
mod overrides;

pub use adapter::StateBackedStore;
pub(crate) use backed::StateBacked;

/// How many times a decision on a [`StateStore`] reads and tries to write a key's state before
/// it gives up (a [`StoreError::KeyState`]): each failed try means another instance wrote the
/// key in between, so the next try decides on its state.
pub const MAX_ATTEMPTS: u32 = 64;

/// A key's state bytes and their version, as a [`StateStore`] read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The state, as [`StateBackedStore`] wrote it (see the [module docs](self) for the
    /// format).
    pub bytes: Vec<u8>,
    /// Changes on every write of the key (memcached's CAS unique, a revision, a counter).
    pub version: u64,
}

impl Versioned {
    /// `bytes` at `version`.
    pub fn new(bytes: Vec<u8>, version: u64) -> Self {
        Self { bytes, version }
    }
}

/// A backend that keeps bytes by key with a version: all a store of your own needs for
/// [`StateBackedStore`] to decide every algorithm on it (see the [module docs](self)).
pub trait StateStore: Send + Sync + 'static {
    /// The state of `key` and its version, or `None` if the key has none (never written,
    /// deleted, or expired).
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Versioned>, StoreError>> + Send;

    /// Stores `bytes` as `key`'s state for `ttl`, only if the key's version is still
    /// `expected` (`None`: only if the key has no state); returns whether it did. `false`
    /// means another writer came first, and the caller reads again. The new state gets a new
    /// version. `ttl` is at least 1 µs; a backend that counts in coarser units rounds it up.
    fn set(
        &self,
        key: &str,
        bytes: &[u8],
        expected: Option<u64>,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Forgets `key`'s state, if it has one.
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// What an [`AtomicStateStore::update`] does with the key, as its function decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Leave the key as it is (a denial, a look).
    Keep,
    /// Store `bytes` as the key's state, to live for `ttl` (at least 1 µs; a backend that
    /// counts in coarser units rounds it up).
    Set {
        /// The new state (see the [module docs](self) for the format).
        bytes: Vec<u8>,
        /// How long it counts: after that the key reads as having no state.
        ttl: Duration,
    },
}

/// A backend that updates a key's bytes in one atomic step: the other form of a store of your
/// own, for backends with a lock or transactions rather than versions (see the
/// [module docs](self)). [`StateBackedStore::atomic`] decides every algorithm on it.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Mutex;
/// use tollgate::store::{AtomicStateStore, StateBackedStore, StoreError, Update};
///
/// /// States in a map, updated under its lock. Expiry is left out for brevity.
/// #[derive(Default)]
/// struct Map(Mutex<HashMap<String, Vec<u8>>>);
///
/// impl AtomicStateStore for Map {
///     async fn update(
///         &self,
///         key: &str,
///         mut decide: impl FnMut(Option<&[u8]>) -> Update + Send,
///     ) -> Result<(), StoreError> {
///         let mut map = self.0.lock().unwrap();
///         if let Update::Set { bytes, .. } = decide(map.get(key).map(Vec::as_slice)) {
///             map.insert(key.to_owned(), bytes);
///         }
///         Ok(())
///     }
///
///     async fn delete(&self, key: &str) -> Result<(), StoreError> {
///         self.0.lock().unwrap().remove(key);
///         Ok(())
///     }
/// }
///
/// let store = StateBackedStore::atomic(Map::default());
/// # let _ = store;
/// ```
pub trait AtomicStateStore: Send + Sync + 'static {
    /// Calls `decide` with `key`'s state (`None` if it has none: never written, deleted, or
    /// expired) and applies the [`Update`] it returns, with nothing else changing the key in
    /// between. `decide` is quick and does no I/O: call it inside the lock or transaction. A
    /// backend that retries a transaction (a serialization failure) calls it again with the
    /// state it reads then; the last call's update is the one that must be applied. An error
    /// means the key may or may not have been updated, as for any store call that fails.
    fn update(
        &self,
        key: &str,
        decide: impl FnMut(Option<&[u8]>) -> Update + Send,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Forgets `key`'s state, if it has one.
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
}

/// A backend behind an [`Arc`](std::sync::Arc) is the same backend: one kept beside the store that decides
/// on it (the memcached store's counters share its servers).
impl<S: StateStore> StateStore for std::sync::Arc<S> {
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Versioned>, StoreError>> + Send {
        S::get(self, key)
    }

    fn set(
        &self,
        key: &str,
        bytes: &[u8],
        expected: Option<u64>,
        ttl: Duration,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        S::set(self, key, bytes, expected, ttl)
    }

    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send {
        S::delete(self, key)
    }
}

#[cfg(test)]
mod tests;
