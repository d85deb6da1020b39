//! The built-in stores a test runs on, one of each.

use std::time::Duration;

use crate::support::{shared_redis_url, unique_prefix};

/// A built-in store a test runs on, one of each: memory, and Redis under a prefix of its own.
#[derive(Debug, Clone)]
pub(crate) enum BuiltIn {
    Memory(tollgate::store::MemoryStore),
    Redis(tollgate::store::RedisStore),
}

impl BuiltIn {
    /// A memory store, and a Redis store on the shared server under a prefix for `test`.
    pub(crate) fn both(test: &str) -> [Self; 2] {
        let redis = tollgate::store::RedisStore::from_url(&shared_redis_url())
            .unwrap()
            .prefix(unique_prefix(test));
        [
            Self::Memory(tollgate::store::MemoryStore::new()),
            Self::Redis(redis),
        ]
    }

    /// `builder` with this store, as its own type (so the layer takes its built-in path).
    pub(crate) fn on(
        self,
        builder: tollgate::RateLimitLayerBuilder,
    ) -> tollgate::RateLimitLayerBuilder {
        match self {
            Self::Memory(store) => builder.store(store),
            Self::Redis(store) => builder.store(store),
        }
    }
}

/// As a store of the user's (e.g. inside a test's own store).
impl tollgate::store::Store for BuiltIn {
    async fn check(
        &self,
        key: &str,
        policy: &tollgate::store::Policy,
        cost: u32,
    ) -> Result<tollgate::store::Decision, tollgate::store::StoreError> {
        match self {
            Self::Memory(store) => tollgate::store::Store::check(store, key, policy, cost).await,
            Self::Redis(store) => tollgate::store::Store::check(store, key, policy, cost).await,
        }
    }

    async fn peek(
        &self,
        key: &str,
        policy: &tollgate::store::Policy,
        cost: u32,
    ) -> Result<tollgate::store::Decision, tollgate::store::StoreError> {
        match self {
            Self::Memory(store) => tollgate::store::Store::peek(store, key, policy, cost).await,
            Self::Redis(store) => tollgate::store::Store::peek(store, key, policy, cost).await,
        }
    }

    async fn reset(
        &self,
        key: &str,
        policy: &tollgate::store::Policy,
    ) -> Result<(), tollgate::store::StoreError> {
        match self {
            Self::Memory(store) => tollgate::store::Store::reset(store, key, policy).await,
            Self::Redis(store) => tollgate::store::Store::reset(store, key, policy).await,
        }
    }

    async fn block(
        &self,
        key: &str,
        policy: &tollgate::store::Policy,
        duration: Duration,
    ) -> Result<(), tollgate::store::StoreError> {
        match self {
            Self::Memory(store) => {
                tollgate::store::Store::block(store, key, policy, duration).await
            }
            Self::Redis(store) => tollgate::store::Store::block(store, key, policy, duration).await,
        }
    }
}
