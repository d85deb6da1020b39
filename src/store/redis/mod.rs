//! The Redis store: one atomic Lua script per decision, shared by every app instance.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::{Pool, PoolConfig, Runtime, Timeouts};

use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, ConfigErrorKind, StoreError};
use crate::quota::Policy;
use crate::store::stack::{Check, Grant, StoreExt};
use crate::store::Store;

pub(crate) mod cached;
#[cfg(feature = "cluster")]
pub(crate) mod cluster;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
pub(crate) mod calls;
pub(crate) mod redact;
pub(crate) mod script;
#[cfg(feature = "tls")]
pub(crate) mod tls;
use cached::CachedConnection;
use calls::ScriptRunner;
use redact::Secrets;
use script::{Call, Control, Scripts, DEFAULT_PREFIX};

/// How long getting, connecting or checking a pooled connection may take in a pool made by
/// `from_url`. The layer's own `store_timeout` (50 ms by default) bounds each decision well
/// below this; this bound is for code that calls the store directly.
const POOL_TIMEOUT: Duration = Duration::from_secs(1);

/// Keeps rate-limit state in Redis so that many app instances share one limit.
///
/// Each decision is one `EVALSHA` of the algorithm's script in `lua/` (loaded again on
/// `NOSCRIPT`, after a restart, failover or `SCRIPT FLUSH`); a stacked decision
/// (`StoreExt::check_many`) is one `EVALSHA` too, of all the algorithms' scripts and
/// `lua/stacked.lua` assembled into one. Time comes from the Redis server's `TIME`, so app
/// servers with skewed clocks agree, unless a [`Clock`] is given.
///
/// Keys are `<prefix>:<policy>:<algorithm>:{<client key>}` (see [`state_key`](Self::state_key)),
/// each with a TTL no longer than its state matters. A key whose value the scripts cannot read
/// is left alone and its decisions fail with [`StoreError::KeyState`].
///
/// It talks to one standalone Redis (or a proxy in front of one): [`from_url`](Self::from_url)
/// and [`from_pool`](Self::from_pool) take a standalone connection pool. For Redis Cluster and
/// Sentinel, see `RedisClusterStore` and `RedisSentinelStore` (features `cluster` and
/// `sentinel`), which run the same scripts on the same keys.
///
/// Building a store never connects: the app starts while Redis is down, and the first
/// decision connects.
///
/// ```no_run
/// use tollgate::{key, store::RedisStore, Quota, RateLimitLayer};
///
/// let store = RedisStore::from_url("redis://127.0.0.1:6379")?.prefix("myapp");
/// let layer = RateLimitLayer::builder()
///     .quota(Quota::per_minute(100)?)
///     .key(key::Header::new("x-api-key"))
///     .store(store)
///     .build()?;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct RedisStore {
    pool: Pool,
    /// The URL given to `from_url`, credentials redacted, for `Debug`.
    url: Option<Arc<str>>,
    prefix: Arc<str>,
    clock: Option<Arc<dyn Clock>>,
    shared: Arc<Shared>,
}

/// What all clones of a store share: the scripts and the connection in use.
struct Shared {
    scripts: Scripts,
    /// A multiplexed connection taken from the pool once and reused: checking a connection
    /// out of a deadpool pool costs a `PING` round trip, which would double the cost of a
    /// decision. Dropped after a connection error so the next decision reconnects.
    connection: CachedConnection<MultiplexedConnection>,
}

impl RedisStore {
    /// A store on a new connection pool for `url` (`redis://host:port/db`, `rediss://…`).
    ///
    /// Fails only when the URL cannot be parsed; Redis need not be up. The error, like
    /// everything the store prints, shows the URL with its password replaced by `***`.
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        let secrets = Secrets::of(url);
        #[cfg(feature = "tls")]
        tls::install_crypto_provider();
        let mut config = deadpool_redis::Config::from_url(url);
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
                    "invalid Redis URL {:?}: {}",
                    secrets.redact(url),
                    secrets.redact(&e.to_string())
                ),
            )
        })?;
        Ok(Self {
            url: Some(secrets.redact(url).into()),
            ..Self::from_pool(pool)
        })
    }

    /// A store on an existing deadpool-redis pool (e.g. one the app also uses); the pool's
    /// own timeouts apply to getting connections.
    pub fn from_pool(pool: Pool) -> Self {
        Self {
            pool,
            url: None,
            prefix: DEFAULT_PREFIX.into(),
            clock: None,
            shared: Arc::new(Shared {
                scripts: Scripts::new(),
                connection: CachedConnection::new(),
            }),
        }
    }

    /// Sets the key prefix (default `"tollgate"`), e.g. to keep two apps apart on one Redis.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<Arc<str>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sends this clock's time with every decision instead of using Redis `TIME`.
    ///
    /// For tests (a [`ManualClock`](crate::ManualClock) drives Redis deterministically) and for
    /// deployments that trust their app servers' clocks more than Redis's.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The pool this store uses.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The Redis key that holds `client_key`'s state under `policy`:
    /// `<prefix>:<policy name>:<algorithm>:{<client key>}`.
    ///
    /// The algorithm part is short (`gcra`, `tb`, `lb`, `fw`, `fwf`, `swl`, `sw`) and keeps
    /// algorithms apart: when a policy's algorithm changes, its clients start afresh instead
    /// of meeting state the new algorithm cannot read. The client key is the hash tag, last and
    /// alone, so that one client's keys share a hash slot.
    ///
    /// `client_key` is used as given; the layer has already replaced long or odd keys by a
    /// digest.
    pub fn state_key(&self, policy: &Policy, client_key: &str) -> String {
        script::state_key(&self.prefix, policy, client_key)
    }
}

impl ScriptRunner for RedisStore {
    fn key_prefix(&self) -> &str {
        &self.prefix
    }

    fn script_clock(&self) -> Option<&Arc<dyn Clock>> {
        self.clock.as_ref()
    }

    fn scripts(&self) -> &Scripts {
        &self.shared.scripts
    }

    /// Runs `call` on the store's connection; an error that may have broken the connection
    /// makes the next decision reconnect.
    async fn eval(&self, call: Call<'_>) -> Result<Vec<i64>, StoreError> {
        self.shared
            .connection
            .run(call, || async {
                let pooled = self.pool.get().await.map_err(StoreError::backend)?;
                Ok(MultiplexedConnection::clone(&pooled))
            })
            .await
    }
}

impl Store for RedisStore {
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

impl StoreExt for RedisStore {
    /// Decides one request against several limits in one round trip: one `EVALSHA` of the
    /// stacked script (see `lua/stacked.lua`), which decides every check at the same instant,
    /// dry, and stores the allowed ones only if no blocking check was denied. A single check
    /// runs its algorithm's own script, as [`check`](Self::check) does.
    ///
    /// All the keys of one stacked decision go to one script call, which on a standalone Redis
    /// is always atomic. (On a Redis Cluster a script may only touch keys of one hash slot:
    /// `RedisClusterStore` groups the checks by slot, see its docs.)
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

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .field("prefix", &self.prefix)
            .field("clock", &self.clock)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::stack::{self, Backend, StoreExt};
    use crate::store::StoreFailure;
    use crate::{Algorithm, Quota};

    /// The layer boxes each decision that waits for Redis, and the stack's futures are inside
    /// it. A connection checkout, a `NOSCRIPT` retry and a lease refill are rare, so each is
    /// boxed where it happens rather than given room in every decision's future (room that
    /// once made this one 22 KB, allocated and copied on every request). Measured on the stack
    /// the layer builds, over the backend it chooses.
    #[tokio::test]
    async fn a_decision_through_the_layers_stack_has_a_small_future() {
        let store = RedisStore::from_url("redis://127.0.0.1:1").unwrap();
        let policy = Policy::new("p", Quota::per_second(10).unwrap(), Algorithm::Gcra).unwrap();
        let stack = stack::stack(Backend::of(store), &StoreFailure::default(), 1_000);
        let check = stack.check("client", &policy, 1);
        let bytes = std::mem::size_of_val(&check);
        eprintln!("one decision: {bytes} bytes");
        assert!(bytes <= 1_536, "the decision's future takes {bytes} bytes");
        let checks = [stack::Check::new("client", &policy, 1); 2];
        let many = stack.check_many(&checks);
        let bytes = std::mem::size_of_val(&many);
        eprintln!("a stacked decision: {bytes} bytes");
        assert!(
            bytes <= 1_536,
            "a stacked decision's future takes {bytes} bytes"
        );
    }
}
