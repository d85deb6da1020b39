//! [`EngineBuilder`]: the store settings every front end's builder embeds (the layer's,
//! `tollgate-rls`'s): the store, how its failures are handled, and the cache of denials.

use std::time::Duration;

use super::Engine;
use crate::error::ConfigError;
use crate::store::wrappers::{self, Backend, DENIAL_CACHE_CAPACITY};
use crate::store::{MemoryStore, OnStoreError, Store, StoreFailure};

/// Where state lives and how a failing store is treated, until [`build`](Self::build) wraps
/// it; from [`Engine::builder`].
///
/// ```
/// use std::time::Duration;
/// use tollgate::engine::Engine;
/// use tollgate::store::{MemoryStore, OnStoreError};
///
/// let engine = Engine::builder()
///     .store(MemoryStore::new())
///     .on_store_error(OnStoreError::FallbackToMemory)
///     .store_timeout(Duration::from_millis(20))
///     .build()?;
/// # let _ = engine;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Debug)]
#[must_use]
pub struct EngineBuilder {
    backend: Backend,
    failure: StoreFailure,
    /// Capacity of the cache of denials; 0 when it is off.
    denial_cache: usize,
}

impl Default for EngineBuilder {
    /// A new [`MemoryStore`], failing open after 50 ms, with a cache of denials.
    fn default() -> Self {
        Self {
            backend: Backend::Memory(MemoryStore::new()),
            failure: StoreFailure::default(),
            denial_cache: DENIAL_CACHE_CAPACITY,
        }
    }
}

impl EngineBuilder {
    /// Where state lives (default: a new [`MemoryStore`]): a built-in store is called
    /// directly, any other [`Store`] through exact defaults.
    pub fn store(mut self, store: impl Store) -> Self {
        self.backend = Backend::of(store);
        self
    }

    /// A backend made by the crate's tests (e.g. a store with a lease of its own making).
    #[cfg(test)]
    pub(crate) fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// How a failing store is treated, in one value (default [`StoreFailure::default`]).
    pub fn store_failure(mut self, failure: StoreFailure) -> Self {
        self.failure = failure;
        self
    }

    /// What a decision gets while the store cannot decide (default
    /// [`OnStoreError::Allow`]); shorthand for that part of
    /// [`store_failure`](Self::store_failure).
    pub fn on_store_error(mut self, on_error: OnStoreError) -> Self {
        self.failure.on_error = on_error;
        self
    }

    /// The longest a decision may wait for the store (default 50 ms).
    pub fn store_timeout(mut self, timeout: Duration) -> Self {
        self.failure.timeout = timeout;
        self
    }

    /// Whether denials are cached (default true; see
    /// [`RateLimitLayerBuilder::denial_cache`](crate::RateLimitLayerBuilder::denial_cache)).
    pub fn denial_cache(mut self, enabled: bool) -> Self {
        self.denial_cache = if enabled { DENIAL_CACHE_CAPACITY } else { 0 };
        self
    }

    /// The store in its wrappers, as these settings say.
    ///
    /// # Errors
    ///
    /// A zero store timeout.
    pub fn build(self) -> Result<Engine, ConfigError> {
        if self.failure.timeout.is_zero() {
            return Err(ConfigError::new("store_timeout must be longer than zero"));
        }
        Ok(self.wrap())
    }

    /// [`build`](Self::build) for settings that cannot be wrong (the defaults).
    pub(crate) fn wrap(self) -> Engine {
        Engine {
            store: wrappers::wrap(self.backend, &self.failure, self.denial_cache),
            on_error: self.failure.on_error,
            shadow_denials: Default::default(),
            timeout: self.failure.timeout,
            overrides: Default::default(),
            lookups: Default::default(),
            slots: Default::default(),
        }
    }
}
