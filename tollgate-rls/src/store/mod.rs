//! The store the settings name, built in one place: Redis (standalone, Sentinel or Cluster) at
//! `REDIS_URL` in the reference's forms (`redis.rs`), memcached at `MEMCACHE_HOST_PORT` or
//! `MEMCACHE_SRV` with `BACKEND_TYPE=memcache` (`memcached.rs`), or memory without either.

mod memcached;
mod redis;

use tollgate::store::{MemcachedStore, RedisStore};
use tollgate_rls::RateLimitServiceBuilder;

use crate::settings::{Backend, SettingsError, StoreSettings};

pub(crate) use redis::publish_pool_size;

/// The store the service decides with, and how the start-up line describes it (credentials
/// left out).
#[derive(Debug)]
pub(crate) struct BuiltStore {
    store: Store,
    described: String,
}

/// One of the stores.
#[derive(Debug)]
enum Store {
    /// The service's own, in this process.
    Memory,
    Redis(RedisStore),
    Memcached(MemcachedStore),
}

/// The store `settings` name. A setting that cannot work (an address that is not one, a TLS
/// file that cannot be read, an SRV record that names no server) is an error naming it.
pub(crate) async fn build(settings: &StoreSettings) -> Result<BuiltStore, SettingsError> {
    let prefix = settings.key_prefix.as_str();
    let (store, described) = match &settings.backend {
        Backend::Memory => (Store::Memory, "memory (this instance only)".to_owned()),
        Backend::Redis(r) => {
            let (store, described) = redis::build(r, prefix)?;
            (Store::Redis(store), described)
        }
        Backend::Memcached(m) => {
            let (store, described) = memcached::build(m, prefix).await?;
            (Store::Memcached(store), described)
        }
    };
    Ok(BuiltStore { store, described })
}

impl BuiltStore {
    /// `builder` deciding with this store.
    pub(crate) fn serve(&self, builder: RateLimitServiceBuilder) -> RateLimitServiceBuilder {
        match &self.store {
            Store::Memory => builder,
            Store::Redis(redis) => builder.store(redis.clone()),
            Store::Memcached(memcached) => builder.store(memcached.clone()),
        }
    }

    /// The Redis store, which is asked at start until it answers and whose pool is published.
    pub(crate) fn redis(&self) -> Option<&RedisStore> {
        match &self.store {
            Store::Redis(redis) => Some(redis),
            Store::Memory | Store::Memcached(_) => None,
        }
    }

    /// For the start-up line: `memory (…)`, `redis (TYPE, URL)`, `memcached (SERVERS)`.
    pub(crate) fn described(&self) -> &str {
        &self.described
    }
}
