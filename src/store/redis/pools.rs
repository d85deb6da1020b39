//! The Sentinel and Cluster pools the store makes itself. deadpool-redis's managers take no TLS
//! certificates (and its Sentinel manager no TLS for the master), so the store builds each
//! redis-rs client itself and wraps it in a small deadpool manager; pools of the app's are
//! taken as they are.

use deadpool_redis::redis::{self, RedisError};
use deadpool_redis::Status;

use crate::error::StoreError;

#[cfg(feature = "sentinel")]
pub(crate) use sentinel::{SentinelManager, SentinelPool};

#[cfg(feature = "cluster")]
pub(crate) use cluster::{ClusterManager, ClusterPool};

/// The error of a manager's check that found a connection it must not hand out.
fn recycle_error(message: &'static str) -> deadpool::managed::RecycleError<RedisError> {
    deadpool::managed::RecycleError::message(message)
}

#[cfg(feature = "sentinel")]
mod sentinel {
    use std::time::Duration;

    use deadpool_redis::redis::aio::MultiplexedConnection;
    use deadpool_redis::redis::{ConnectionInfo, ErrorKind, IntoConnectionInfo, Role};

    use super::*;

    /// How long asking one sentinel for the master may take, so that a dead sentinel leaves
    /// time to ask the next within the pool's own bound.
    const SENTINEL_TIMEOUT: Duration = Duration::from_millis(300);

    /// Asks the sentinels, in order, where the master named `master` is, connects to it with
    /// the master's own credentials and TLS, and hands the connection out only while `ROLE`
    /// says it is a master (after a failover the old one comes back as a replica).
    pub(crate) struct SentinelManager {
        pub(crate) sentinels: Vec<ConnectionInfo>,
        pub(crate) master: String,
        /// `redis://` or `rediss://` (with `#insecure` when the sentinels' URLs have it).
        pub(crate) scheme: &'static str,
        pub(crate) insecure: bool,
        /// The master's connection details, its address left to the sentinels: credentials,
        /// TLS settings.
        pub(crate) complete:
            Box<dyn Fn(ConnectionInfo) -> redis::RedisResult<ConnectionInfo> + Send + Sync>,
    }

    impl SentinelManager {
        async fn master_from(
            &self,
            sentinel: &ConnectionInfo,
        ) -> redis::RedisResult<MultiplexedConnection> {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(SENTINEL_TIMEOUT))
                .set_response_timeout(Some(SENTINEL_TIMEOUT));
            let client = redis::Client::open(sentinel.clone())?;
            let mut asking = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            let address: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(&self.master)
                .query_async(&mut asking)
                .await?;
            let Some((host, port)) = address else {
                return Err(RedisError::from((
                    ErrorKind::MasterNameNotFoundBySentinel,
                    "the sentinel knows no master by this name",
                )));
            };
            let host = match host.contains(':') {
                true => format!("[{host}]"),
                false => host,
            };
            let fragment = if self.insecure { "#insecure" } else { "" };
            let info =
                format!("{}://{host}:{port}{fragment}", self.scheme).into_connection_info()?;
            let info = (self.complete)(info)?;
            let mut connection = redis::Client::open(info)?
                .get_multiplexed_async_connection()
                .await?;
            is_master(&mut connection).await?;
            Ok(connection)
        }
    }

    /// `Ok` when the connection's server says it is a master.
    async fn is_master(connection: &mut MultiplexedConnection) -> redis::RedisResult<()> {
        let role: Role = redis::cmd("ROLE").query_async(connection).await?;
        match role {
            Role::Primary { .. } => Ok(()),
            _ => Err(RedisError::from((
                ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                "the server the sentinel named is not a master",
            ))),
        }
    }

    impl deadpool::managed::Manager for SentinelManager {
        type Type = MultiplexedConnection;
        type Error = RedisError;

        async fn create(&self) -> Result<MultiplexedConnection, RedisError> {
            let mut last = None;
            for sentinel in &self.sentinels {
                match self.master_from(sentinel).await {
                    Ok(connection) => return Ok(connection),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| {
                RedisError::from((ErrorKind::EmptySentinelList, "no sentinel is given"))
            }))
        }

        async fn recycle(
            &self,
            connection: &mut MultiplexedConnection,
            _: &deadpool::managed::Metrics,
        ) -> deadpool::managed::RecycleResult<RedisError> {
            is_master(connection)
                .await
                .map_err(|_| recycle_error("no longer the master"))
        }
    }

    /// A Sentinel pool: the app's, or one the store made.
    pub(crate) enum SentinelPool {
        App(deadpool_redis::sentinel::Pool),
        Own(deadpool::managed::Pool<SentinelManager>),
    }

    impl SentinelPool {
        /// A connection to the master, taken from the pool (which then keeps its place).
        pub(crate) async fn connection(&self) -> Result<MultiplexedConnection, StoreError> {
            match self {
                Self::App(pool) => {
                    let pooled = pool.get().await.map_err(StoreError::backend)?;
                    Ok(MultiplexedConnection::clone(&pooled))
                }
                Self::Own(pool) => {
                    let pooled = pool.get().await.map_err(StoreError::backend)?;
                    Ok(MultiplexedConnection::clone(&pooled))
                }
            }
        }

        pub(crate) fn status(&self) -> Status {
            match self {
                Self::App(pool) => pool.status(),
                Self::Own(pool) => pool.status(),
            }
        }
    }
}

#[cfg(feature = "cluster")]
mod cluster {
    use deadpool_redis::cluster::{ClusterClient, ClusterConnection};

    use super::*;

    /// deadpool-redis's cluster manager, over a client the store built (with certificates).
    pub(crate) struct ClusterManager(pub(crate) ClusterClient);

    impl deadpool::managed::Manager for ClusterManager {
        type Type = ClusterConnection;
        type Error = RedisError;

        async fn create(&self) -> Result<ClusterConnection, RedisError> {
            self.0.get_async_connection().await
        }

        async fn recycle(
            &self,
            connection: &mut ClusterConnection,
            _: &deadpool::managed::Metrics,
        ) -> deadpool::managed::RecycleResult<RedisError> {
            let pong: String = redis::cmd("PING").query_async(connection).await?;
            match pong.as_str() {
                "PONG" => Ok(()),
                _ => Err(recycle_error("unexpected PING reply")),
            }
        }
    }

    /// A Cluster pool: the app's, or one the store made.
    pub(crate) enum ClusterPool {
        App(deadpool_redis::cluster::Pool),
        Own(deadpool::managed::Pool<ClusterManager>),
    }

    impl ClusterPool {
        /// A cluster connection, taken from the pool (which then keeps its place).
        pub(crate) async fn connection(&self) -> Result<ClusterConnection, StoreError> {
            match self {
                Self::App(pool) => {
                    let pooled = pool.get().await.map_err(StoreError::backend)?;
                    Ok(ClusterConnection::clone(&pooled))
                }
                Self::Own(pool) => {
                    let pooled = pool.get().await.map_err(StoreError::backend)?;
                    Ok(ClusterConnection::clone(&pooled))
                }
            }
        }

        pub(crate) fn status(&self) -> Status {
            match self {
                Self::App(pool) => pool.status(),
                Self::Own(pool) => pool.status(),
            }
        }
    }
}
