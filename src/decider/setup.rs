//! [`StoreSetup`]: the store settings both builders (the layer's and `rls`'s) embed: the
//! store, how its failures are handled, and the cache of denials in front of it.

use std::time::Duration;

use super::Decider;
use crate::error::ConfigError;
use crate::store::wrappers::{self, Backend, DENIAL_CACHE_CAPACITY};
use crate::store::{MemoryStore, OnStoreError, Store, StoreFailure};

/// Where state lives and how a failing store is treated, until `build` wraps it.
#[derive(Debug)]
pub(crate) struct StoreSetup {
    backend: Backend,
    pub(crate) failure: StoreFailure,
    /// Capacity of the cache of denials; 0 when it is off.
    denial_cache: usize,
}

impl Default for StoreSetup {
    /// A new [`MemoryStore`], failing open after 50 ms, with a cache of denials.
    fn default() -> Self {
        Self {
            backend: Backend::Memory(MemoryStore::new()),
            failure: StoreFailure::default(),
            denial_cache: DENIAL_CACHE_CAPACITY,
        }
    }
}

impl StoreSetup {
    /// Any store: a built-in one is called directly, any other through exact defaults.
    pub(crate) fn store(&mut self, store: impl Store) {
        self.backend = Backend::of(store);
    }

    /// A backend made by the crate's tests (e.g. a store with a lease of its own making).
    #[cfg(test)]
    pub(crate) fn backend(&mut self, backend: Backend) {
        self.backend = backend;
    }

    /// The whole failure handling at once.
    pub(crate) fn failure(&mut self, failure: StoreFailure) {
        self.failure = failure;
    }

    /// What a decision gets while the store cannot decide.
    pub(crate) fn on_error(&mut self, on_error: OnStoreError) {
        self.failure.on_error = on_error;
    }

    /// The longest a decision may wait for the store.
    pub(crate) fn timeout(&mut self, timeout: Duration) {
        self.failure.timeout = timeout;
    }

    /// Whether denials are cached.
    pub(crate) fn denial_cache(&mut self, enabled: bool) {
        self.denial_cache = if enabled { DENIAL_CACHE_CAPACITY } else { 0 };
    }

    /// The settings' own errors: a zero timeout.
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.failure.timeout.is_zero() {
            return Err(ConfigError::new("store_timeout must be longer than zero"));
        }
        Ok(())
    }

    /// The store in its wrappers, as these settings say.
    pub(crate) fn build(self) -> Decider {
        Decider {
            store: wrappers::wrap(self.backend, &self.failure, self.denial_cache),
        }
    }
}
