//! The Redis Sentinel store: the Redis store's scripts, on the master Sentinel names.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::sentinel::{Config, Pool, SentinelServerType};
use deadpool_redis::{PoolConfig, Runtime, Timeouts};

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, ConfigErrorKind, StoreError};
use crate::quota::Policy;
use crate::store::redis::cached::CachedConnection;
use crate::store::redis::calls::{self, ScriptRunner};
use crate::store::redis::redact::Secrets;
use crate::store::redis::script::{self, Call, Control, Scripts, DEFAULT_PREFIX};
use crate::store::stack::{Check, Grant, StoreExt};
use crate::store::Store;

/// How long getting or checking a pooled connection may take in a pool made by
/// `from_sentinels` (the layer's `store_timeout` bounds each decision well below this).
const POOL_TIMEOUT: Duration = Duration::from_secs(1);

/// Keeps rate-limit state on the master of a Redis Sentinel deployment, with the same
/// scripts, keys and decisions as [`RedisStore`](crate::store::RedisStore).
///
/// The sentinels name the master; after a failover the old master's connection fails (or
/// answers `READONLY` once it is back as a replica), the store drops it, and the next
/// decision asks the sentinels again and connects to the new master. Scripts the new master
/// lacks are loaded by `EVAL` on `NOSCRIPT`.
///
/// Building a store never connects; the first decision does.
///
/// ```no_run
/// use tollgate::store::RedisSentinelStore;
///
/// let store = RedisSentinelStore::from_sentinels(
///     &["redis://10.0.0.1:26379", "redis://10.0.0.2:26379"],
///     "mymaster",
/// )?;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct RedisSentinelStore {
    pool: Pool,
    /// The sentinel URLs and master name given to `from_sentinels`, credentials redacted.
    sentinels: Option<Arc<[String]>>,
    master: Option<Arc<str>>,
    prefix: Arc<str>,
    clock: Option<Arc<dyn Clock>>,
    shared: Arc<Shared>,
}

/// What all clones of a store share: the scripts and the connection to the master in use.
struct Shared {
    scripts: Scripts,
    connection: CachedConnection<MultiplexedConnection>,
}

impl RedisSentinelStore {
    /// A store on a new pool that asks `sentinels` (`redis://host:26379`, …) for the master
    /// named `master`.
    ///
    /// Fails only when a URL cannot be parsed or none is given; nothing need be up. Errors and
    /// `Debug` show the URLs with their passwords replaced by `***`.
    pub fn from_sentinels<S: AsRef<str>>(
        sentinels: &[S],
        master: &str,
    ) -> Result<Self, ConfigError> {
        let urls: Vec<String> = sentinels.iter().map(|n| n.as_ref().to_owned()).collect();
        let secrets: Vec<Secrets<'_>> = urls.iter().map(|u| Secrets::of(u)).collect();
        let redact = |text: &str| {
            secrets
                .iter()
                .fold(text.to_owned(), |text, s| s.redact(&text))
        };
        let redacted: Vec<String> = urls.iter().map(|u| redact(u)).collect();
        if urls.is_empty() {
            return Err(ConfigError::of(
                ConfigErrorKind::Store,
                "a Redis Sentinel store needs at least one sentinel URL",
            ));
        }
        #[cfg(feature = "tls")]
        crate::store::redis::tls::install_crypto_provider();
        let mut config =
            Config::from_urls(urls.clone(), master.to_owned(), SentinelServerType::Master);
        config.pool = Some(PoolConfig {
            timeouts: Timeouts {
                wait: Some(POOL_TIMEOUT),
                create: Some(POOL_TIMEOUT),
                recycle: Some(POOL_TIMEOUT),
            },
            ..PoolConfig::default()
        });
        let pool = config.create_pool(Some(Runtime::Tokio1)).map_err(|e| {
            ConfigError::of(
                ConfigErrorKind::Store,
                format!(
                    "invalid Redis sentinels {redacted:?}: {}",
                    redact(&e.to_string())
                ),
            )
        })?;
        Ok(Self {
            sentinels: Some(redacted.into()),
            master: Some(master.into()),
            ..Self::from_pool(pool)
        })
    }

    /// A store on an existing deadpool-redis sentinel pool.
    pub fn from_pool(pool: Pool) -> Self {
        Self {
            pool,
            sentinels: None,
            master: None,
            prefix: DEFAULT_PREFIX.into(),
            clock: None,
            shared: Arc::new(Shared {
                scripts: Scripts::new(),
                connection: CachedConnection::new(),
            }),
        }
    }

    /// Sets the key prefix (default `"tollgate"`).
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<Arc<str>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sends this clock's time with every decision instead of using Redis `TIME`.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The Redis key that holds `client_key`'s state under `policy`, as
    /// [`RedisStore::state_key`](crate::store::RedisStore::state_key) names it.
    pub fn state_key(&self, policy: &Policy, client_key: &str) -> String {
        script::state_key(&self.prefix, policy, client_key)
    }
}

impl ScriptRunner for RedisSentinelStore {
    fn key_prefix(&self) -> &str {
        &self.prefix
    }

    fn script_clock(&self) -> Option<&Arc<dyn Clock>> {
        self.clock.as_ref()
    }

    fn scripts(&self) -> &Scripts {
        &self.shared.scripts
    }

    /// Runs `call` on the master's connection; an error that may have broken it (after a
    /// failover, the old master answers read-only) makes the next decision take a connection
    /// from the pool again.
    async fn eval(&self, call: Call<'_>) -> Result<Vec<i64>, StoreError> {
        self.shared
            .connection
            .run(call, || async {
                // Boxed: the sentinel pool's future is deeply nested, and a connection is made
                // rarely, so this keeps every caller's future type shallow at no real cost.
                let pooled = Box::pin(self.pool.get())
                    .await
                    .map_err(StoreError::backend)?;
                Ok(MultiplexedConnection::clone(&pooled))
            })
            .await
    }
}

impl Store for RedisSentinelStore {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        calls::check(self, key, policy, cost).await
    }

    /// One dry run of the algorithm's script (see `lua/gcra.lua`, `ARGV[7]`): one round trip,
    /// nothing written.
    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        calls::peek(self, key, policy, cost).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        calls::act(self, key, policy, Control::Reset).await
    }

    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        calls::act(self, key, policy, Control::block(duration)).await
    }
}

impl StoreExt for RedisSentinelStore {
    /// One atomic stacked script on the master, as [`RedisStore`](crate::store::RedisStore)
    /// runs it.
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        calls::check_stacked(self, checks).await
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.clock.as_deref()
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        calls::act(self, key, policy, Control::Refund(u64::from(n))).await
    }

    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        calls::acquire(self, key, policy, min, max).await
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        calls::release(self, key, policy, unused, grant).await
    }
}

impl fmt::Debug for RedisSentinelStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSentinelStore")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("prefix", &self.prefix)
            .field("clock", &self.clock)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_errors_hide_passwords() {
        let store =
            RedisSentinelStore::from_sentinels(&["redis://:hunter2@127.0.0.1:26379"], "mymaster")
                .unwrap();
        let debug = format!("{store:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("redis://:***@127.0.0.1:26379"), "{debug}");
        let error = RedisSentinelStore::from_sentinels(&["redis://:hunter2@127.0.0.1:x"], "m")
            .unwrap_err()
            .to_string();
        assert!(
            !error.contains("hunter2") && error.contains("***"),
            "{error}"
        );
        let empty: [&str; 0] = [];
        assert!(RedisSentinelStore::from_sentinels(&empty, "m").is_err());
    }
}
