//! [`Connection`]: where a [`RedisStore`](super::RedisStore)'s calls go — one standalone Redis,
//! the master Sentinel names, or a Redis Cluster — and the one way every call runs there.

use std::fmt;
use std::time::Duration;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::{PoolConfig, Runtime, Timeouts};

use super::cached::CachedConnection;
use super::redact::Secrets;
use super::script::Call;
use crate::error::{ConfigError, ConfigErrorKind, StoreError};

/// How long getting, connecting or checking a pooled connection may take in a pool the store
/// makes. The layer's store timeout (50 ms by default) bounds each decision well below this;
/// this bound is for code that calls the store directly.
const POOL_TIMEOUT: Duration = Duration::from_secs(1);

/// A deadpool pool of one kind, and the multiplexed connection taken from it once and reused
/// by every call (checking one out of the pool costs a `PING` round trip, which would double
/// the cost of a decision).
pub(crate) enum Connection {
    /// One Redis (or a proxy in front of one).
    Standalone {
        pool: deadpool_redis::Pool,
        /// The URL the pool was made from, credentials redacted, for `Debug`.
        url: Option<String>,
        cached: CachedConnection<MultiplexedConnection>,
    },
    /// The master the sentinels name: after a failover the old master's connection fails (or
    /// answers `READONLY`), it is dropped, and the next call asks the sentinels again.
    #[cfg(feature = "sentinel")]
    Sentinel {
        pool: deadpool_redis::sentinel::Pool,
        /// The sentinel URLs (redacted) and the master's name, for `Debug`.
        sentinels: Option<(Vec<String>, String)>,
        cached: CachedConnection<MultiplexedConnection>,
    },
    /// A Redis Cluster: each call goes to the master of its first key's slot; redis-rs follows
    /// `MOVED` and `ASK` and refreshes its slot map after a failover or a resharding.
    #[cfg(feature = "cluster")]
    Cluster {
        pool: deadpool_redis::cluster::Pool,
        /// The seed URLs, redacted, for `Debug`.
        nodes: Option<Vec<String>>,
        cached: CachedConnection<deadpool_redis::cluster::ClusterConnection>,
    },
}

/// The pool settings of a pool the store makes.
fn pool_config() -> PoolConfig {
    PoolConfig {
        timeouts: Timeouts {
            wait: Some(POOL_TIMEOUT),
            create: Some(POOL_TIMEOUT),
            recycle: Some(POOL_TIMEOUT),
        },
        ..PoolConfig::default()
    }
}

/// `urls` redacted, and a redactor of any text that may quote them (a parse error).
fn redacted(urls: &[String]) -> (Vec<String>, impl Fn(&str) -> String + '_) {
    let secrets: Vec<Secrets<'_>> = urls.iter().map(|u| Secrets::of(u)).collect();
    let redact = move |text: &str| {
        secrets
            .iter()
            .fold(text.to_owned(), |text, s| s.redact(&text))
    };
    let shown = urls.iter().map(|u| redact(u)).collect();
    (shown, redact)
}

/// The `Store` error for URLs that cannot make a pool.
fn invalid(what: &str, shown: impl fmt::Debug, error: String) -> ConfigError {
    ConfigError::of(
        ConfigErrorKind::Store,
        format!("invalid {what} {shown:?}: {error}"),
    )
}

impl Connection {
    /// A standalone pool for `url`.
    pub(crate) fn standalone(url: &str) -> Result<Self, ConfigError> {
        let urls = [url.to_owned()];
        let (shown, redact) = redacted(&urls);
        #[cfg(feature = "tls")]
        super::tls::install_crypto_provider();
        let mut config = deadpool_redis::Config::from_url(url);
        config.pool = Some(pool_config());
        let pool = (config.create_pool(Some(Runtime::Tokio1)))
            .map_err(|e| invalid("Redis URL", &shown[0], redact(&e.to_string())))?;
        Ok(Self::Standalone {
            pool,
            url: shown.into_iter().next(),
            cached: CachedConnection::new(),
        })
    }

    /// A standalone pool of the app's.
    pub(crate) fn standalone_pool(pool: deadpool_redis::Pool) -> Self {
        Self::Standalone {
            pool,
            url: None,
            cached: CachedConnection::new(),
        }
    }

    /// A pool that asks `sentinels` for the master named `master`.
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel<S: AsRef<str>>(
        sentinels: &[S],
        master: &str,
    ) -> Result<Self, ConfigError> {
        use deadpool_redis::sentinel::{Config, SentinelServerType};
        let urls: Vec<String> = sentinels.iter().map(|u| u.as_ref().to_owned()).collect();
        if urls.is_empty() {
            return Err(ConfigError::of(
                ConfigErrorKind::Store,
                "a Redis Sentinel store needs at least one sentinel URL",
            ));
        }
        let (shown, redact) = redacted(&urls);
        #[cfg(feature = "tls")]
        super::tls::install_crypto_provider();
        let mut config =
            Config::from_urls(urls.clone(), master.to_owned(), SentinelServerType::Master);
        config.pool = Some(pool_config());
        let pool = (config.create_pool(Some(Runtime::Tokio1)))
            .map_err(|e| invalid("Redis sentinels", &shown, redact(&e.to_string())))?;
        Ok(Self::Sentinel {
            pool,
            sentinels: Some((shown, master.to_owned())),
            cached: CachedConnection::new(),
        })
    }

    /// A sentinel pool of the app's.
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel_pool(pool: deadpool_redis::sentinel::Pool) -> Self {
        Self::Sentinel {
            pool,
            sentinels: None,
            cached: CachedConnection::new(),
        }
    }

    /// A cluster pool seeded with `nodes`.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster<S: AsRef<str>>(nodes: &[S]) -> Result<Self, ConfigError> {
        let urls: Vec<String> = nodes.iter().map(|u| u.as_ref().to_owned()).collect();
        if urls.is_empty() {
            return Err(ConfigError::of(
                ConfigErrorKind::Store,
                "a Redis Cluster store needs at least one node URL",
            ));
        }
        let (shown, redact) = redacted(&urls);
        #[cfg(feature = "tls")]
        super::tls::install_crypto_provider();
        let mut config = deadpool_redis::cluster::Config::from_urls(urls.clone());
        config.pool = Some(pool_config());
        let pool = (config.create_pool(Some(Runtime::Tokio1)))
            .map_err(|e| invalid("Redis Cluster nodes", &shown, redact(&e.to_string())))?;
        Ok(Self::Cluster {
            pool,
            nodes: Some(shown),
            cached: CachedConnection::new(),
        })
    }

    /// A cluster pool of the app's.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster_pool(pool: deadpool_redis::cluster::Pool) -> Self {
        Self::Cluster {
            pool,
            nodes: None,
            cached: CachedConnection::new(),
        }
    }

    /// Whether calls go to a cluster, where one script may touch the keys of one slot only.
    #[cfg(feature = "cluster")]
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster { .. })
    }

    /// The `store` label of the metrics: `redis`, `redis_sentinel` or `redis_cluster`.
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Self::Standalone { .. } => "redis",
            #[cfg(feature = "sentinel")]
            Self::Sentinel { .. } => "redis_sentinel",
            #[cfg(feature = "cluster")]
            Self::Cluster { .. } => "redis_cluster",
        }
    }

    /// Runs `call` on the kept connection (taken from the pool first if none is kept): the
    /// same `EVALSHA`, `NOSCRIPT` reload and error sorting for every kind. An error that may
    /// have broken the connection makes the next call take a fresh one.
    pub(crate) async fn eval(&self, call: Call<'_>) -> Result<Vec<i64>, StoreError> {
        match self {
            Self::Standalone { pool, cached, .. } => {
                let connect = || async {
                    let pooled = pool.get().await.map_err(StoreError::backend)?;
                    Ok(MultiplexedConnection::clone(&pooled))
                };
                cached.run(call, connect).await
            }
            #[cfg(feature = "sentinel")]
            Self::Sentinel { pool, cached, .. } => {
                let connect = || async {
                    let pooled = pool.get().await.map_err(StoreError::backend)?;
                    Ok(MultiplexedConnection::clone(&pooled))
                };
                cached.run(call, connect).await
            }
            #[cfg(feature = "cluster")]
            Self::Cluster { pool, cached, .. } => {
                let connect = || async {
                    let pooled = pool.get().await.map_err(StoreError::backend)?;
                    Ok(deadpool_redis::cluster::ClusterConnection::clone(&pooled))
                };
                cached.run(call, connect).await
            }
        }
    }

    /// Drops the kept connection (see [`CachedConnection::forget`]).
    pub(crate) fn forget(&self) {
        match self {
            Self::Standalone { cached, .. } => cached.forget(),
            #[cfg(feature = "sentinel")]
            Self::Sentinel { cached, .. } => cached.forget(),
            #[cfg(feature = "cluster")]
            Self::Cluster { cached, .. } => cached.forget(),
        }
    }
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Standalone { pool, url, .. } => f
                .debug_struct("Standalone")
                .field("url", url)
                .field("pool", &pool.status())
                .finish_non_exhaustive(),
            #[cfg(feature = "sentinel")]
            Self::Sentinel {
                pool, sentinels, ..
            } => f
                .debug_struct("Sentinel")
                .field("sentinels", &sentinels.as_ref().map(|(urls, _)| urls))
                .field("master", &sentinels.as_ref().map(|(_, master)| master))
                .field("pool", &pool.status())
                .finish_non_exhaustive(),
            #[cfg(feature = "cluster")]
            Self::Cluster { pool, nodes, .. } => f
                .debug_struct("Cluster")
                .field("nodes", nodes)
                .field("pool", &pool.status())
                .finish_non_exhaustive(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::RedisStore;

    #[cfg(feature = "sentinel")]
    #[test]
    fn sentinel_debug_and_errors_hide_passwords() {
        let store =
            RedisStore::sentinel(&["redis://:hunter2@127.0.0.1:26379"], "mymaster").unwrap();
        let debug = format!("{store:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("redis://:***@127.0.0.1:26379"), "{debug}");
        assert!(debug.contains("mymaster"), "{debug}");
        let error = RedisStore::sentinel(&["redis://:hunter2@127.0.0.1:x"], "m")
            .unwrap_err()
            .to_string();
        assert!(
            !error.contains("hunter2") && error.contains("***"),
            "{error}"
        );
        let empty: [&str; 0] = [];
        assert!(RedisStore::sentinel(&empty, "m").is_err());
    }

    #[test]
    fn each_kind_has_its_metrics_label() {
        use crate::store::stack::StoreExt;
        let standalone = RedisStore::from_url("redis://127.0.0.1:1").unwrap();
        assert_eq!(&*standalone.label(), "redis");
        #[cfg(feature = "sentinel")]
        {
            let sentinel = RedisStore::sentinel(&["redis://127.0.0.1:1"], "m").unwrap();
            assert_eq!(&*sentinel.label(), "redis_sentinel");
        }
        #[cfg(feature = "cluster")]
        {
            let cluster = RedisStore::cluster(&["redis://127.0.0.1:1"]).unwrap();
            assert_eq!(&*cluster.label(), "redis_cluster");
        }
    }
}
