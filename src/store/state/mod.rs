//! Stores of your own without algorithm code: the two forms of state store ([`StateStore`],
//! [`AtomicStateStore`]) and [`StateBackedStore`], which runs every algorithm on either. Their
//! public home is `tollgate::store`; what a user needs to know is on [`StateBackedStore`].

use std::future::Future;
use std::time::Duration;

use crate::error::StoreError;

mod access;
mod adapter;
mod backed;
mod overrides;
mod slots;

pub use adapter::StateBackedStore;
pub(crate) use backed::StateBacked;

/// How many times a decision on a [`StateStore`] tries (see
/// [`StateBackedStore::MAX_ATTEMPTS`]).
pub(crate) const MAX_ATTEMPTS: u32 = 64;

/// A key's state bytes and their version, as a [`StateStore`] read them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The state, as [`StateBackedStore`] wrote it (see [`StateBackedStore`] for the
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
/// [`StateBackedStore`] to decide every algorithm on it (see [`StateBackedStore`]).
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
        /// The new state (see [`StateBackedStore`] for the format).
        bytes: Vec<u8>,
        /// How long it counts: after that the key reads as having no state.
        ttl: Duration,
    },
}

/// A backend that updates a key's bytes in one atomic step: the other form of a store of your
/// own, for backends with a lock or transactions rather than versions (see
/// [`StateBackedStore`]). [`StateBackedStore::atomic`] decides every algorithm on it.
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
