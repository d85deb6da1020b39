//! The Redis store: one atomic Lua script per decision, shared by every app instance.

use std::fmt;
use std::fmt::Write as _;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::Duration;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{self, Script, ToRedisArgs};
use deadpool_redis::{Pool, PoolConfig, Runtime, Timeouts};

use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, ConfigErrorKind, StoreError};
use crate::quota::Policy;
use crate::store::{Check, Store};

mod redact;
use redact::Secrets;

/// How long getting, connecting or checking a pooled connection may take in a pool made by
/// `from_url`. The layer's own `store_timeout` (50 ms by default) bounds each decision well
/// below this; this bound is for code that calls the store directly.
const POOL_TIMEOUT: Duration = Duration::from_secs(1);

/// The default key prefix: keys look like `tollgate:<policy>:<algorithm>:{<client key>}`.
const DEFAULT_PREFIX: &str = "tollgate";

/// Keeps rate-limit state in Redis so that many app instances share one limit.
///
/// Each decision is one `EVALSHA` of the algorithm's script in `lua/` (loaded again on
/// `NOSCRIPT`, after a restart, failover or `SCRIPT FLUSH`); a stacked decision
/// ([`Store::check_many`]) is one `EVALSHA` too, of all the algorithms' scripts and
/// `lua/stacked.lua` assembled into one. Time comes from the Redis server's `TIME`, so app
/// servers with skewed clocks agree, unless a [`Clock`] is given.
///
/// Keys are `<prefix>:<policy>:<algorithm>:{<client key>}` (see [`state_key`](Self::state_key)),
/// each with a TTL no longer than its state matters. A key whose value the scripts cannot read
/// is left alone and its decisions fail with [`StoreError::KeyState`].
///
/// It talks to one standalone Redis (or a proxy in front of one): [`from_url`](Self::from_url)
/// and [`from_pool`](Self::from_pool) take a standalone connection pool, and Redis Cluster is
/// not supported yet. The keys are laid out for it already: the client key is the hash tag, so
/// one client's keys (under every policy) share a hash slot.
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
    /// The URL given to `from_url`, credentials redacted, for `Debug`.
    url: Option<Arc<str>>,
    prefix: Arc<str>,
    clock: Option<Arc<dyn Clock>>,
    shared: Arc<Shared>,
}

/// What all clones of a store share: the scripts and the connection in use.
struct Shared {
    /// One per algorithm, in `Algorithm::ALL` order.
    scripts: [LuaScript; 7],
    /// Every algorithm's script and `lua/stacked.lua` in one: see [`STACKED_SOURCE`].
    stacked: LuaScript,
    /// A multiplexed connection taken from the pool once and reused: checking a connection
    /// out of a deadpool pool costs a `PING` round trip, which would double the cost of a
    /// decision. Dropped after a connection error so the next decision reconnects.
    connection: Mutex<Option<MultiplexedConnection>>,
}

impl RedisStore {
    /// A store on a new connection pool for `url` (`redis://host:port/db`, `rediss://…`).
    ///
    /// Fails only when the URL cannot be parsed; Redis need not be up. The error, like
    /// everything the store prints, shows the URL with its password replaced by `***`.
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        let secrets = Secrets::of(url);
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
                scripts: ALGORITHM_SOURCES
                    .each_ref()
                    .map(|s| LuaScript::new(s.as_str())),
                stacked: LuaScript::new(STACKED_SOURCE.as_str()),
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
        format!(
            "{}:{}:{}:{{{}}}",
            self.prefix,
            policy.name(),
            key_part(policy.algorithm()),
            client_key
        )
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

    /// The `now` argument of every script: the store clock's µs, or `""` for Redis `TIME`.
    fn now(&self) -> String {
        self.clock
            .as_ref()
            .map_or_else(String::new, |c| c.now().to_string())
    }

    /// Runs `script` on the store's connection; an error that may have broken the connection
    /// makes the next decision reconnect.
    async fn eval<A: ToRedisArgs>(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &A,
    ) -> Result<Vec<i64>, StoreError> {
        let mut connection = self.connection().await?;
        script.run(&mut connection, keys, args).await.map_err(|e| {
            self.drop_connection_after(&e);
            store_error(e)
        })
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

/// Sorts a failed script call: an error about one key's data is that request's problem
/// ([`StoreError::KeyState`], which the circuit breaker does not count); anything else
/// (I/O, a dropped or refused connection, a timeout, `NOSCRIPT` again after loading, a server
/// that is loading, read-only, out of memory or busy) is the store failing
/// ([`StoreError::Backend`]).
///
/// Data errors are `WRONGTYPE` (the key holds another type) and `ERR`s raised while the script
/// ran (their text names `user_script`): a value it cannot read (see `unreadable` in
/// `lua/prelude.lua`), a Lua runtime error on bad state, or a command refusing a value.
fn store_error(error: redis::RedisError) -> StoreError {
    let raised_by_script =
        || error.code() == Some("ERR") && error.detail().is_some_and(|d| d.contains("user_script"));
    if error.code() == Some("WRONGTYPE") || raised_by_script() {
        StoreError::key_state(error)
    } else {
        StoreError::backend(error)
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
    async fn run<A: ToRedisArgs>(
        &self,
        connection: &mut MultiplexedConnection,
        keys: &[String],
        args: &A,
    ) -> redis::RedisResult<Vec<i64>> {
        let call = |command: &str, script: &str| {
            let mut cmd = redis::cmd(command);
            cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
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

/// What every script needs (the server clock, exact integer helpers), written once in
/// `lua/prelude.lua` and put in front of each script: the only Lua that reads `TIME`.
const PRELUDE: &str = include_str!("../../lua/prelude.lua");

/// Each algorithm's script as it runs, in `Algorithm::ALL` order: the prelude, then
/// `lua/<algorithm>.lua`. Assembled once per process.
static ALGORITHM_SOURCES: LazyLock<[String; 7]> =
    LazyLock::new(|| Algorithm::ALL.map(|a| format!("{PRELUDE}\n{}", script_source(a))));

/// The script a stacked decision runs: the prelude, then each algorithm's script wrapped as a
/// function of its own `KEYS` and `ARGV` (`ALGORITHMS[i]`, 1-based in `Algorithm::ALL` order;
/// names that share a script share the function),
/// then `lua/stacked.lua`, which calls them. Wrapping keeps every algorithm in exactly one file,
/// the one its single decisions run: a script's body is valid as a Lua 5.1 function body
/// (its locals become the function's, and each `return` ends its block), and `ALGORITHMS` is a
/// local because Redis forbids scripts to create globals. Assembled once per process.
static STACKED_SOURCE: LazyLock<String> = LazyLock::new(|| {
    let mut source = format!("{PRELUDE}\nlocal ALGORITHMS = {{}}\n");
    for (i, algorithm) in Algorithm::ALL.into_iter().enumerate() {
        let body = script_source(algorithm);
        let first = Algorithm::ALL
            .iter()
            .position(|a| script_source(*a) == body);
        let _ = match first {
            // Two names, one engine: the function is written once.
            Some(j) if j < i => writeln!(source, "ALGORITHMS[{}] = ALGORITHMS[{}]", i + 1, j + 1),
            // The newline before `end`: a last line that is a comment would swallow it.
            _ => write!(
                source,
                "ALGORITHMS[{}] = function(KEYS, ARGV)\n{body}\nend\n",
                i + 1
            ),
        };
    }
    source.push_str(include_str!("../../lua/stacked.lua"));
    source
});

/// An algorithm's place in `Algorithm::ALL` (0-based): the index of its script in
/// `Shared::scripts`, and one less than its number in the stacked script.
fn algorithm_index(algorithm: Algorithm) -> usize {
    Algorithm::ALL
        .iter()
        .position(|a| *a == algorithm)
        .unwrap_or_default()
}

/// The algorithm's part of a state key: short, since every tracked client pays for it.
fn key_part(algorithm: Algorithm) -> &'static str {
    match algorithm {
        Algorithm::Gcra => "gcra",
        Algorithm::TokenBucket => "tb",
        Algorithm::LeakyBucket => "lb",
        Algorithm::FixedWindow => "fw",
        Algorithm::FixedWindowFromFirst => "fwf",
        Algorithm::SlidingWindowLog => "swl",
        Algorithm::SlidingWindow => "sw",
    }
}

/// The Lua source of an algorithm's script (without the prelude).
fn script_source(algorithm: Algorithm) -> &'static str {
    match algorithm {
        // The leaky bucket decides exactly as GCRA, and runs its engine: see src/algorithm/gcra.rs.
        Algorithm::Gcra | Algorithm::LeakyBucket => include_str!("../../lua/gcra.lua"),
        Algorithm::TokenBucket => include_str!("../../lua/token_bucket.lua"),
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
        // `scripts` was built from `Algorithm::ALL`, so every algorithm has its script.
        let Some(script) = self.shared.scripts.get(algorithm_index(policy.algorithm())) else {
            return Err(StoreError::backend(format!(
                "no script for {}",
                policy.algorithm()
            )));
        };
        let numbers = [
            p.limit,
            p.period,
            p.burst,
            p.interval,
            u64::from(cost.max(1)),
        ];
        let key = self.state_key(policy, key);
        let reply = self
            .eval(
                script,
                std::slice::from_ref(&key),
                &(&numbers[..], self.now()),
            )
            .await?;
        decision_from_reply(p.burst, &reply)
    }

    /// Decides one request against several limits in one round trip: one `EVALSHA` of the
    /// stacked script (see `lua/stacked.lua`), which decides every check at the same instant,
    /// dry, and stores the allowed ones only if no blocking check was denied. A single check
    /// runs its algorithm's own script, as [`check`](Self::check) does.
    ///
    /// All the keys of one stacked decision go to one script call, which on a standalone Redis
    /// is always atomic. (On a Redis Cluster, once supported, a script may only touch keys of
    /// one hash slot: checks of one client key under several policies share the hash tag
    /// `{<client key>}` and would work; checks of different client keys would not.)
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        match checks {
            [] => return Ok(Vec::new()),
            [one] => return Ok(vec![self.check(one.key, one.policy, one.cost).await?]),
            _ => {}
        }
        let keys: Vec<String> = checks
            .iter()
            .map(|c| self.state_key(c.policy, c.key))
            .collect();
        let mut numbers = Vec::with_capacity(7 * checks.len());
        for c in checks {
            let p = c.policy.params();
            numbers.extend([
                algorithm_index(c.policy.algorithm()) as u64 + 1,
                p.limit,
                p.period,
                p.burst,
                p.interval,
                u64::from(c.cost.max(1)),
                u64::from(c.blocking),
            ]);
        }
        let reply = self
            .eval(&self.shared.stacked, &keys, &(self.now(), &numbers[..]))
            .await?;
        if reply.len() != 4 * checks.len() {
            return Err(StoreError::backend(format!(
                "unexpected stacked script reply {reply:?} (expected 4 integers per check, {} checks)",
                checks.len()
            )));
        }
        checks
            .iter()
            .zip(reply.chunks_exact(4))
            .map(|(c, r)| decision_from_reply(c.policy.params().burst, r))
            .collect()
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.clock.as_deref()
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
