//! [`Connection`]: where a [`RedisStore`](super::RedisStore)'s calls go — one standalone Redis,
//! the master Sentinel names, or a Redis Cluster — and the one way every call runs there.

use std::fmt;
use std::time::Duration;

use deadpool_redis::redis::aio::MultiplexedConnection;
use deadpool_redis::redis::{ConnectionInfo, IntoConnectionInfo, RedisResult};
use deadpool_redis::{PoolConfig, Runtime, Timeouts};

use super::cached::CachedConnection;
use super::on_connection::OnConnection;
use super::options::RedisOptions;
#[cfg(feature = "cluster")]
use super::pools::{ClusterManager, ClusterPool};
#[cfg(feature = "sentinel")]
use super::pools::{SentinelManager, SentinelPool};
use super::redact::Secrets;
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
        pool: SentinelPool,
        /// The sentinel URLs (redacted) and the master's name, for `Debug`.
        sentinels: Option<(Vec<String>, String)>,
        cached: CachedConnection<MultiplexedConnection>,
    },
    /// A Redis Cluster: each call goes to the master of its first key's slot; redis-rs follows
    /// `MOVED` and `ASK` and refreshes its slot map after a failover or a resharding.
    #[cfg(feature = "cluster")]
    Cluster {
        pool: ClusterPool,
        /// The seed URLs, redacted, for `Debug`.
        nodes: Option<Vec<String>>,
        cached: CachedConnection<deadpool_redis::cluster::ClusterConnection>,
    },
}

/// The pool settings of a pool the store makes: `options`' size, and bounded waits.
fn pool_config(options: &RedisOptions) -> PoolConfig {
    let default = PoolConfig::default();
    PoolConfig {
        max_size: options.pool_size.unwrap_or(default.max_size),
        timeouts: Timeouts {
            wait: Some(POOL_TIMEOUT),
            create: Some(POOL_TIMEOUT),
            recycle: Some(POOL_TIMEOUT),
        },
        ..default
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
    ConfigError::with_kind(
        ConfigErrorKind::Store,
        format!("invalid {what} {shown:?}: {error}"),
    )
}

/// Each URL's connection details.
#[cfg(any(feature = "sentinel", feature = "cluster"))]
fn parse(urls: &[String]) -> RedisResult<Vec<ConnectionInfo>> {
    urls.iter()
        .map(|u| u.as_str().into_connection_info())
        .collect()
}

/// Whether `info` is a TLS address (`rediss://`).
#[cfg(any(feature = "tls", feature = "sentinel"))]
fn is_tls(info: &ConnectionInfo) -> bool {
    use deadpool_redis::redis::ConnectionAddr;
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// `info` with `options`' credentials when its URL carries no password.
fn with_credentials(info: ConnectionInfo, options: &RedisOptions) -> ConnectionInfo {
    let Some((username, password)) = options.credentials() else {
        return info;
    };
    if info.redis_settings().password().is_some() {
        return info;
    }
    let mut settings = info.redis_settings().clone().set_password(password);
    if let Some(username) = username {
        settings = settings.set_username(username);
    }
    info.set_redis_settings(settings)
}

/// `info` with `options`' credentials and TLS settings applied.
fn complete(info: ConnectionInfo, options: &RedisOptions) -> RedisResult<ConnectionInfo> {
    let info = with_credentials(info, options);
    #[cfg(feature = "tls")]
    if let Some(tls) = &options.tls {
        return super::tls::apply(info, tls);
    }
    Ok(info)
}

/// Readies TLS (the crypto provider) and checks `options`' TLS settings against the addresses:
/// settings no address would use are refused rather than silently dropped.
fn prepare_tls(options: &RedisOptions, infos: &[ConnectionInfo]) -> Result<(), ConfigError> {
    #[cfg(feature = "tls")]
    {
        install_tls_provider();
        if let Some(tls) = &options.tls {
            super::tls::validate(tls)?;
            if !infos.iter().any(is_tls) {
                return Err(ConfigError::with_kind(
                    ConfigErrorKind::Store,
                    "Redis TLS settings are given but no address uses TLS (rediss://)",
                ));
            }
        }
    }
    #[cfg(not(feature = "tls"))]
    let _ = (options, infos);
    Ok(())
}

#[cfg(feature = "tls")]
fn install_tls_provider() {
    super::tls::install_crypto_provider();
}

impl Connection {
    /// A standalone pool for `url`.
    pub(crate) fn standalone(url: &str, options: &RedisOptions) -> Result<Self, ConfigError> {
        let urls = [url.to_owned()];
        let (shown, redact) = redacted(&urls);
        let fail = |e: deadpool_redis::redis::RedisError| {
            invalid("Redis URL", &shown[0], redact(&e.to_string()))
        };
        let info = url.into_connection_info().map_err(fail)?;
        prepare_tls(options, std::slice::from_ref(&info))?;
        let info = complete(info, options).map_err(fail)?;
        let manager = deadpool_redis::Manager::new(info).map_err(fail)?;
        let pool = (deadpool_redis::Pool::builder(manager))
            .config(pool_config(options))
            .runtime(Runtime::Tokio1)
            .build()
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

    /// A pool that asks `sentinels` for the master named `master`, and reaches it with
    /// `options`' credentials, over TLS when the sentinels' URLs are `rediss://`.
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel<S: AsRef<str>>(
        sentinels: &[S],
        master: &str,
        options: &RedisOptions,
    ) -> Result<Self, ConfigError> {
        let urls: Vec<String> = sentinels.iter().map(|u| u.as_ref().to_owned()).collect();
        if urls.is_empty() {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Store,
                "a Redis Sentinel store needs at least one sentinel URL",
            ));
        }
        let (shown, redact) = redacted(&urls);
        let fail = |e: String| invalid("Redis sentinels", &shown, redact(&e));
        let infos = parse(&urls).map_err(|e| fail(e.to_string()))?;
        prepare_tls(options, &infos)?;
        let tls = infos.iter().any(is_tls);
        use deadpool_redis::redis::ConnectionAddr;
        let insecure = (infos.iter())
            .any(|i| matches!(i.addr(), ConnectionAddr::TcpTls { insecure: true, .. }));
        // The sentinels keep the credentials of their own URLs; TLS settings apply to them too.
        let sentinel_options = RedisOptions {
            username: None,
            password: None,
            ..options.clone()
        };
        let infos = (infos.into_iter())
            .map(|i| complete(i, &sentinel_options))
            .collect::<RedisResult<Vec<_>>>()
            .map_err(|e| fail(e.to_string()))?;
        let master_options = options.clone();
        let manager = SentinelManager {
            sentinels: infos,
            master: master.to_owned(),
            scheme: if tls { "rediss" } else { "redis" },
            insecure,
            complete: Box::new(move |info| complete(info, &master_options)),
        };
        let pool = (deadpool::managed::Pool::builder(manager))
            .config(pool_config(options))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| fail(e.to_string()))?;
        Ok(Self::Sentinel {
            pool: SentinelPool::Own(pool),
            sentinels: Some((shown, master.to_owned())),
            cached: CachedConnection::new(),
        })
    }

    /// A sentinel pool of the app's.
    #[cfg(feature = "sentinel")]
    pub(crate) fn sentinel_pool(pool: deadpool_redis::sentinel::Pool) -> Self {
        Self::Sentinel {
            pool: SentinelPool::App(pool),
            sentinels: None,
            cached: CachedConnection::new(),
        }
    }

    /// A cluster pool seeded with `nodes`.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster<S: AsRef<str>>(
        nodes: &[S],
        options: &RedisOptions,
    ) -> Result<Self, ConfigError> {
        let urls: Vec<String> = nodes.iter().map(|u| u.as_ref().to_owned()).collect();
        if urls.is_empty() {
            return Err(ConfigError::with_kind(
                ConfigErrorKind::Store,
                "a Redis Cluster store needs at least one node URL",
            ));
        }
        let (shown, redact) = redacted(&urls);
        let fail = |e: String| invalid("Redis Cluster nodes", &shown, redact(&e));
        let infos = parse(&urls).map_err(|e| fail(e.to_string()))?;
        prepare_tls(options, &infos)?;
        // The cluster client applies TLS to every node it meets, the seeds' and the others'.
        let infos = infos.into_iter().map(|i| with_credentials(i, options));
        #[allow(unused_mut)]
        let mut builder = deadpool_redis::cluster::ClusterClientBuilder::new(infos);
        #[cfg(feature = "tls")]
        if let Some(tls) = &options.tls {
            if let Some(certificates) = super::tls::certificates(tls) {
                builder = builder.certs(certificates);
            }
            builder = builder.danger_accept_invalid_hostnames(tls.skip_hostname_verification);
        }
        let client = builder.build().map_err(|e| fail(e.to_string()))?;
        let pool = (deadpool::managed::Pool::builder(ClusterManager(client)))
            .config(pool_config(options))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| fail(e.to_string()))?;
        Ok(Self::Cluster {
            pool: ClusterPool::Own(pool),
            nodes: Some(shown),
            cached: CachedConnection::new(),
        })
    }

    /// A cluster pool of the app's.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster_pool(pool: deadpool_redis::cluster::Pool) -> Self {
        Self::Cluster {
            pool: ClusterPool::App(pool),
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

    /// Runs `work` (a script call, a pipeline) on the kept connection (taken from the pool
    /// first if none is kept): the same `EVALSHA`, `NOSCRIPT` reload and error sorting for
    /// every kind. An error that may have broken the connection makes the next call take a
    /// fresh one.
    pub(crate) async fn run<W: OnConnection>(&self, work: W) -> Result<W::Output, StoreError> {
        match self {
            Self::Standalone { pool, cached, .. } => {
                let connect = || async {
                    let pooled = pool.get().await.map_err(StoreError::backend)?;
                    Ok(MultiplexedConnection::clone(&pooled))
                };
                cached.run(work, connect).await
            }
            #[cfg(feature = "sentinel")]
            Self::Sentinel { pool, cached, .. } => cached.run(work, || pool.connection()).await,
            #[cfg(feature = "cluster")]
            Self::Cluster { pool, cached, .. } => cached.run(work, || pool.connection()).await,
        }
    }

    /// The pool's state: connections open, idle, and calls waiting for one.
    pub(crate) fn pool_status(&self) -> deadpool_redis::Status {
        match self {
            Self::Standalone { pool, .. } => pool.status(),
            #[cfg(feature = "sentinel")]
            Self::Sentinel { pool, .. } => pool.status(),
            #[cfg(feature = "cluster")]
            Self::Cluster { pool, .. } => pool.status(),
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
    fn options_credentials_fill_only_what_a_url_lacks() {
        use super::{with_credentials, IntoConnectionInfo, RedisOptions};
        let options = RedisOptions::new().username("app").password("opt-pw");
        let bare = "redis+unix:///tmp/r.sock".into_connection_info().unwrap();
        let filled = with_credentials(bare, &options);
        let settings = filled.redis_settings();
        assert_eq!(
            (settings.username(), settings.password()),
            (Some("app"), Some("opt-pw"))
        );
        let own = "redis://u:own-pw@h:1".into_connection_info().unwrap();
        let kept = with_credentials(own, &options);
        assert_eq!(kept.redis_settings().password(), Some("own-pw"));
    }

    #[test]
    fn every_kind_takes_the_pool_size() {
        use super::RedisOptions;
        let options = RedisOptions::new().pool_size(5);
        let standalone = RedisStore::with_options("redis://127.0.0.1:1", &options).unwrap();
        assert!(format!("{standalone:?}").contains("max_size: 5"));
        #[cfg(feature = "sentinel")]
        {
            let sentinel =
                RedisStore::sentinel_with_options(&["redis://127.0.0.1:1"], "m", &options).unwrap();
            assert!(format!("{sentinel:?}").contains("max_size: 5"));
        }
        #[cfg(feature = "cluster")]
        {
            let cluster =
                RedisStore::cluster_with_options(&["redis://127.0.0.1:1"], &options).unwrap();
            assert!(format!("{cluster:?}").contains("max_size: 5"));
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_settings_no_address_uses_are_refused() {
        use super::RedisOptions;
        use crate::store::RedisTls;
        let options = RedisOptions::new().tls(RedisTls::new().skip_hostname_verification(true));
        let error = RedisStore::with_options("redis://127.0.0.1:1", &options).unwrap_err();
        assert!(error.to_string().contains("no address uses TLS"), "{error}");
        assert!(RedisStore::with_options("rediss://127.0.0.1:1", &options).is_ok());
    }

    #[test]
    fn each_kind_has_its_metrics_label() {
        use crate::store::contract::StoreExt;
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
