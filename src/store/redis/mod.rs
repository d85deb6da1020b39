//! [`RedisStore`]: one atomic Lua script per decision, shared by every app instance, over a
//! standalone Redis, the master Sentinel names, or a Redis Cluster.

use std::fmt;
use std::sync::Arc;

use crate::clock::Clock;
use crate::error::ConfigError;
use crate::quota::Policy;

pub(crate) mod cached;
mod calls;
#[cfg(feature = "cluster")]
mod cluster;
mod connection;
mod counters;
mod in_flight;
mod on_connection;
mod options;
#[cfg(any(feature = "sentinel", feature = "cluster"))]
mod pools;
pub(crate) mod redact;
mod reply;
pub(crate) mod script;
mod sources;
#[cfg(feature = "tls")]
pub(crate) mod tls;
use connection::Connection;
pub use options::RedisOptions;
#[cfg(feature = "tls")]
#[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
pub use options::RedisTls;
pub use redact::redacted_url;
use script::{Scripts, DEFAULT_PREFIX};

/// Keeps rate-limit state in Redis so that many app instances share one limit.
///
/// Each decision is one `EVALSHA` of the algorithm's script in `src/store/redis/lua/` (loaded
/// again by `EVAL` on `NOSCRIPT`, after a restart, failover or `SCRIPT FLUSH`); stacked limits
/// are one `EVALSHA` too, of all the algorithms' scripts and `stacked.lua` assembled into one.
/// Time comes from the Redis server's `TIME`, so app servers with skewed clocks agree, unless
/// a [`Clock`] is given.
///
/// Keys are `<prefix>:<policy>:<algorithm>:{<client key>}` (see [`state_key`](Self::state_key)),
/// each with a TTL no longer than its state matters. A [plain counter](Policy::with_plain_counter)
/// is envoyproxy/ratelimit's instead: `<client key><window start in Unix seconds>`, an integer
/// added to with `INCRBY` + `EXPIRE`, a request's counters in one pipeline (the store's
/// [`per_second`](Self::per_second) Redis, if given, keeps the one-second ones). A key whose value the scripts cannot read
/// is left alone and its decisions fail with [`StoreError::KeyState`](crate::error::StoreError::KeyState).
///
/// One type for every deployment, the same scripts on the same keys:
///
/// - one Redis (or a proxy in front of one): [`from_url`](Self::from_url), or
///   [`from_pool`](Self::from_pool) with a deadpool-redis pool of the app's;
/// - the master Sentinel names ([`sentinel`](Self::sentinel), feature `sentinel`): after a
///   failover the old master's connection fails (or answers `READONLY` once it is back as a
///   replica), the store drops it, and the next decision asks the sentinels again;
/// - a Redis Cluster ([`cluster`](Self::cluster), feature `cluster`): each decision goes to the
///   master of its key's slot, following `MOVED` and `ASK`. The client key is the hash tag, so
///   one client's state under every policy lives in one slot, and stacked limits of one client
///   are one atomic call. Stacked limits of different client keys (per IP and per API key)
///   usually fall in different slots, which no single script may touch: they are decided in
///   two phases, a dry run of each slot's group (concurrently, writing nothing), then, only if
///   no blocking limit denied, the commit of every group. Each limit stays exact on its own;
///   the one weakness is a concurrent request taking one group's last unit between the two
///   phases, so that group denies at commit while the others have counted the request.
///
/// Building a store never connects: the app starts while Redis is down, and the first
/// decision connects. Errors and `Debug` show URLs with their passwords replaced by `***`.
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
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct RedisStore {
    prefix: Arc<str>,
    clock: Option<Arc<dyn Clock>>,
    shared: Arc<Shared>,
    /// Where the plain counters of one-second policies live, if not here (see
    /// [`per_second`](Self::per_second)).
    per_second: Option<Arc<RedisStore>>,
}

/// What all clones of a store share: the scripts and the connection in use.
struct Shared {
    scripts: Scripts,
    connection: Connection,
}

impl RedisStore {
    /// A store on a new connection pool for one Redis at `url` (`redis://host:port/db`,
    /// `rediss://…` with the `tls` feature).
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] only when the URL cannot be parsed; Redis need not be up. The error,
    /// like everything the store prints, shows the URL with its password replaced by `***`.
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        Self::with_options(url, &RedisOptions::new())
    }

    /// A store on a new connection pool for one Redis at `url` (`redis://host:port/db`,
    /// `redis+unix:///path`, `rediss://…` with the `tls` feature), connecting as `options`
    /// say: credentials when the URL carries none, the pool's size, TLS certificates.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when the URL cannot be parsed, or `options` hold TLS settings that
    /// the address would not use or certificates that do not parse; Redis need not be up.
    pub fn with_options(url: &str, options: &RedisOptions) -> Result<Self, ConfigError> {
        Ok(Self::on(Connection::standalone(url, options)?))
    }

    /// A store on an existing deadpool-redis pool for one Redis (e.g. one the app also uses);
    /// the pool's own timeouts apply to getting connections.
    pub fn from_pool(pool: deadpool_redis::Pool) -> Self {
        Self::on(Connection::standalone_pool(pool))
    }

    /// A store on the master named `master`, as `sentinels` (`redis://host:26379`, …) name it.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when no sentinel is given or a URL cannot be parsed; nothing need be
    /// up.
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel<S: AsRef<str>>(sentinels: &[S], master: &str) -> Result<Self, ConfigError> {
        Self::sentinel_with_options(sentinels, master, &RedisOptions::new())
    }

    /// A store on the master named `master`, as `sentinels` name it, connecting as `options`
    /// say. The sentinels are reached with the credentials of their own URLs, the master with
    /// `options`' (see [`RedisOptions::password`]); the master is reached over TLS when the
    /// sentinels' URLs are `rediss://`, and `options`' TLS settings apply to both.
    ///
    /// # Errors
    ///
    /// As [`sentinel`](Self::sentinel), and as [`with_options`](Self::with_options) for
    /// `options`.
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel_with_options<S: AsRef<str>>(
        sentinels: &[S],
        master: &str,
        options: &RedisOptions,
    ) -> Result<Self, ConfigError> {
        Ok(Self::on(Connection::sentinel(sentinels, master, options)?))
    }

    /// A store on an existing deadpool-redis sentinel pool.
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn from_sentinel_pool(pool: deadpool_redis::sentinel::Pool) -> Self {
        Self::on(Connection::sentinel_pool(pool))
    }

    /// A store on a Redis Cluster seeded with `nodes` (`redis://host:port`, `rediss://…`,
    /// with credentials if the cluster needs them): any reachable node tells the client the
    /// others.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] when no node is given or a URL cannot be parsed; the cluster need not
    /// be up.
    ///
    /// ```no_run
    /// use tollgate::store::RedisStore;
    ///
    /// let store = RedisStore::cluster(&["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"])?;
    /// # let _ = store;
    /// # Ok::<(), tollgate::ConfigError>(())
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster<S: AsRef<str>>(nodes: &[S]) -> Result<Self, ConfigError> {
        Self::cluster_with_options(nodes, &RedisOptions::new())
    }

    /// A store on a Redis Cluster seeded with `nodes`, connecting to every node as `options`
    /// say.
    ///
    /// # Errors
    ///
    /// As [`cluster`](Self::cluster), and as [`with_options`](Self::with_options) for
    /// `options`.
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster_with_options<S: AsRef<str>>(
        nodes: &[S],
        options: &RedisOptions,
    ) -> Result<Self, ConfigError> {
        Ok(Self::on(Connection::cluster(nodes, options)?))
    }

    /// A store on an existing deadpool-redis cluster pool.
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn from_cluster_pool(pool: deadpool_redis::cluster::Pool) -> Self {
        Self::on(Connection::cluster_pool(pool))
    }

    fn on(connection: Connection) -> Self {
        Self {
            prefix: DEFAULT_PREFIX.into(),
            clock: None,
            shared: Arc::new(Shared {
                scripts: Scripts::new(),
                connection,
            }),
            per_second: None,
        }
    }

    /// Keeps the [plain counters](Policy::with_plain_counter) of one-second policies in
    /// `store` (a Redis of their own, as envoyproxy/ratelimit's `REDIS_PERSECOND` keeps its
    /// per-second limits), and everything else here. A request whose plain counters are
    /// charged every hit, or stop when over the limit among plain counters only, is one
    /// pipeline on each Redis at once, as in the reference. One that needs an atomic step
    /// across both (a refused request consuming nothing) is one script call on each: the
    /// all-or-nothing holds within each Redis, and each limit stays exact. The decisions are
    /// made at this store's clock's time.
    #[must_use]
    pub fn per_second(mut self, store: RedisStore) -> Self {
        let store = RedisStore {
            clock: self.clock.clone(),
            per_second: None,
            ..store
        };
        self.per_second = Some(Arc::new(store));
        self
    }

    /// The store of [`per_second`](Self::per_second), if one was given.
    pub fn per_second_store(&self) -> Option<&RedisStore> {
        self.per_second.as_deref()
    }

    /// Sets the key prefix (default `"tollgate"`), e.g. to keep two apps apart on one Redis.
    /// On a cluster it must not hold `{`, which would change the keys' hash tag.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<Arc<str>>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Sends this clock's time with every decision instead of using Redis `TIME`.
    ///
    /// For tests (a [`ManualClock`](crate::clock::ManualClock) drives Redis deterministically) and for
    /// deployments that trust their app servers' clocks more than Redis's.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(clock);
        if let Some(per_second) = &mut self.per_second {
            Arc::make_mut(per_second).clock = Some(Arc::clone(&clock));
        }
        self.clock = Some(clock);
        self
    }

    /// The connection pool's state, as deadpool reports it: connections open (`size`), idle
    /// (`available`), and calls waiting for one (`waiting`). For statistics.
    pub fn pool_status(&self) -> deadpool_redis::Status {
        self.shared.connection.pool_status()
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

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("connection", &self.shared.connection)
            .field("prefix", &self.prefix)
            .field("clock", &self.clock)
            .field("per_second", &self.per_second)
            .finish_non_exhaustive()
    }
}
