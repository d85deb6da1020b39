//! The Redis store: one atomic Lua script per decision, shared by every app instance.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{self, Script};
use deadpool_redis::{Pool, Runtime};

use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, StoreError};
use crate::quota::Policy;
use crate::store::Store;

/// The default key prefix: keys look like `tollgate:<policy>:{<client key>}`.
const DEFAULT_PREFIX: &str = "tollgate";

/// Keeps rate-limit state in Redis so that many app instances share one limit.
///
/// Each decision is one `EVALSHA` of the algorithm's script in `lua/` (loaded again on
/// `NOSCRIPT`, after a restart, failover or `SCRIPT FLUSH`). Time comes from the Redis
/// server's `TIME`, so app servers with skewed clocks agree, unless a [`Clock`] is given.
///
/// Keys are `<prefix>:<policy>:{<client key>}`: one hash slot per client, so it works on
/// Redis Cluster. Every key carries a TTL no longer than its state matters.
///
/// Building a store never connects: the app starts while Redis is down, and the first
/// decision connects.
///
/// ```no_run
/// use tollgate::{key, store::RedisStore, Quota, RateLimitLayer};
///
/// let store = RedisStore::from_url("redis://127.0.0.1:6379")?.prefix("myapp");
/// let layer = RateLimitLayer::builder()
///     .quota(Quota::per_minute(100))
///     .key(key::Header::new("x-api-key"))
///     .store(store)
///     .build()?;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct RedisStore {
    pool: Pool,
    prefix: Arc<str>,
    clock: Option<Arc<dyn Clock>>,
    shared: Arc<Shared>,
}

/// What all clones of a store share: the scripts and the connection in use.
struct Shared {
    /// One per algorithm, in `Algorithm::ALL` order.
    scripts: [LuaScript; 7],
    /// A multiplexed connection taken from the pool once and reused: checking a connection
    /// out of a deadpool pool costs a `PING` round trip, which would double the cost of a
    /// decision. Dropped after a connection error so the next decision reconnects.
    connection: Mutex<Option<MultiplexedConnection>>,
}

impl RedisStore {
    /// A store on a new connection pool for `url` (`redis://host:port/db`, `rediss://…`).
    ///
    /// Fails only when the URL cannot be parsed; Redis need not be up.
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        let pool = deadpool_redis::Config::from_url(url)
            .create_pool(Some(Runtime::Tokio1))
            .map_err(|e| ConfigError::new(format!("invalid Redis URL {url:?}: {e}")))?;
        Ok(Self::from_pool(pool))
    }

    /// A store on an existing deadpool-redis pool (e.g. one the app also uses).
    pub fn from_pool(pool: Pool) -> Self {
        Self {
            pool,
            prefix: DEFAULT_PREFIX.into(),
            clock: None,
            shared: Arc::new(Shared {
                scripts: Algorithm::ALL.map(|a| LuaScript::new(script_source(a))),
                connection: Mutex::new(None),
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

    /// The Redis key that holds `client_key`'s state under `policy`.
    ///
    /// `client_key` is used as given; the layer has already replaced long or odd keys by a
    /// digest.
    pub fn state_key(&self, policy: &Policy, client_key: &str) -> String {
        format!("{}:{}:{{{}}}", self.prefix, policy.name(), client_key)
    }

    async fn connection(&self) -> Result<MultiplexedConnection, StoreError> {
        let cached = lock(&self.shared.connection).clone();
        if let Some(connection) = cached {
            return Ok(connection);
        }
        let pooled = self.pool.get().await.map_err(StoreError::backend)?;
        let connection = MultiplexedConnection::clone(&pooled);
        *lock(&self.shared.connection) = Some(connection.clone());
        Ok(connection)
    }

    /// Forgets the cached connection after an error that may have broken it.
    fn drop_connection_after(&self, error: &redis::RedisError) {
        if error.is_io_error()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.is_unrecoverable_error()
            || error.is_timeout()
        {
            *lock(&self.shared.connection) = None;
        }
    }
}

/// A script's source and SHA-1.
struct LuaScript {
    source: &'static str,
    sha: String,
}

impl LuaScript {
    fn new(source: &'static str) -> Self {
        Self {
            source,
            sha: Script::new(source).get_hash().to_owned(),
        }
    }

    /// `EVALSHA`; on `NOSCRIPT` (a restart, failover or `SCRIPT FLUSH` emptied the script
    /// cache), `EVAL` with the source, which runs it and caches it again in one round trip
    /// and, unlike `SCRIPT LOAD` + `EVALSHA`, cannot race with another flush.
    async fn run(
        &self,
        connection: &mut MultiplexedConnection,
        key: &str,
        numbers: [u64; 5],
        now: &str,
    ) -> redis::RedisResult<Vec<i64>> {
        let call = |command: &str, script: &str| {
            let mut cmd = redis::cmd(command);
            cmd.arg(script).arg(1).arg(key).arg(&numbers[..]).arg(now);
            cmd
        };
        match call("EVALSHA", &self.sha).query_async(connection).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                call("EVAL", self.source).query_async(connection).await
            }
            result => result,
        }
    }
}

/// The Lua source of an algorithm's script.
fn script_source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::Gcra => include_str!("../../lua/gcra.lua"),
        Algorithm::TokenBucket => include_str!("../../lua/token_bucket.lua"),
        Algorithm::LeakyBucket => include_str!("../../lua/leaky_bucket.lua"),
        Algorithm::FixedWindow => include_str!("../../lua/fixed_window.lua"),
        Algorithm::FixedWindowFromFirst => include_str!("../../lua/fixed_window_from_first.lua"),
        Algorithm::SlidingWindowLog => include_str!("../../lua/sliding_window_log.lua"),
        Algorithm::SlidingWindow => include_str!("../../lua/sliding_window.lua"),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads the scripts' reply `{allowed, remaining, reset_after_us, retry_after_us (-1 = none)}`.
fn decision_from_reply(limit: u64, reply: &[i64]) -> Result<Decision, StoreError> {
    let &[allowed, remaining, reset_after, retry_after] = reply else {
        return Err(StoreError::backend(format!(
            "unexpected script reply {reply:?} (expected 4 integers)"
        )));
    };
    let micros = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(Decision::from_micros(
        allowed == 1,
        limit,
        micros(remaining),
        micros(reset_after),
        (retry_after >= 0).then(|| micros(retry_after)),
    ))
}

impl Store for RedisStore {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        let p = policy.params();
        let now = self.clock.as_ref().map(|c| c.now().to_string());
        let script = &self.shared.scripts[policy.algorithm() as usize];
        let state_key = self.state_key(policy, key);
        let numbers = [
            p.limit,
            p.period,
            p.burst,
            p.interval,
            u64::from(cost.max(1)),
        ];
        let now = now.as_deref().unwrap_or("");
        let mut connection = self.connection().await?;
        match script.run(&mut connection, &state_key, numbers, now).await {
            Ok(reply) => decision_from_reply(p.burst, &reply),
            Err(e) => {
                self.drop_connection_after(&e);
                Err(StoreError::backend(e))
            }
        }
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.prefix)
            .field("clock", &self.clock)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}
