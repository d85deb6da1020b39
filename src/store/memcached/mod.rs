//! The memcached store: the algorithms on one or more memcached servers, shared by every
//! instance that uses them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::decision::Decision;
use crate::error::{ConfigError, ConfigErrorKind, StoreError};
use crate::quota::Policy;
use crate::store::check::Check;
use crate::store::contract::{Leasing, StoreExt};
use crate::store::grant::Grant;
use crate::store::state::StateBacked;
use crate::store::Store;

mod servers;
mod srv;

use servers::{ServerList, Servers};
pub use srv::MemcachedSrv;

/// Keeps rate-limit state in memcached, shared by every instance of the app, exactly at the
/// limit: each decision reads the key's state with its CAS unique (`mg`), decides with the
/// same state machines as [`MemoryStore`](super::MemoryStore), and writes the new state only
/// if nobody wrote it in between (`ms` with `C<cas>`, or in add mode for a new key), with a
/// time to live as long as the algorithm needs it; otherwise it decides again on the newer
/// state (see [`state`](super::state), whose byte format it stores). Denials write nothing.
///
/// Several servers share the keys: each key lives on one, chosen by a hash of the key that
/// every instance computes alike. memcached keeps no time of its own that a client can read,
/// so the instances decide by their clocks (the system's, kept in sync by NTP, or
/// [`with_clock`](Self::with_clock)'s). A server that does not answer is a store failure like
/// any other: the layer's timeout, circuit breaker and `OnStoreError` handle it; a restarted
/// one starts every client with a whole quota.
///
/// ```
/// use tollgate::store::MemcachedStore;
/// use tollgate::{key, Quota, RateLimitLayer};
///
/// let store = MemcachedStore::from_url("memcache://127.0.0.1:11211")?;
/// let layer = RateLimitLayer::builder()
///     .quota(Quota::per_minute(100)?)
///     .key(key::Global)
///     .store(store)
///     .build()?;
/// # let _ = layer;
/// # Ok::<(), tollgate::ConfigError>(())
/// ```
///
/// Clones share the same connections.
#[derive(Clone)]
pub struct MemcachedStore {
    inner: Arc<StateBacked<Servers>>,
}

impl MemcachedStore {
    /// A store on the servers of `url`: `memcache://host:port`, several separated by commas
    /// (`memcache://a:11211,b:11211`). No connection is opened until the first decision.
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        let list = url
            .strip_prefix("memcache://")
            .or_else(|| url.strip_prefix("memcached://"))
            .ok_or_else(|| {
                store_error(format!(
                    "invalid memcached URL {url:?}: use memcache://host:port[,host:port...]"
                ))
            })?;
        Self::new(list.split(',').map(str::trim))
    }

    /// A store on `servers`, each `host:port`. No connection is opened until the first
    /// decision.
    pub fn new<I, S>(servers: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut addresses = Vec::new();
        for server in servers {
            let server: String = server.into();
            let valid = server
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !valid {
                return Err(store_error(format!(
                    "invalid memcached server {server:?}: use host:port"
                )));
            }
            addresses.push(server);
        }
        let servers = Servers::new(addresses).map_err(store_error)?;
        // The first read calibrates the clock: here, not in the first request.
        SystemClock.now();
        Ok(Self {
            inner: Arc::new(StateBacked::new(
                servers,
                Arc::new(SystemClock),
                "tollgate".into(),
            )),
        })
    }

    /// Sets the key prefix (default `"tollgate"`), e.g. to keep two apps apart on one
    /// memcached.
    #[must_use]
    pub fn prefix(self, prefix: impl Into<Arc<str>>) -> Self {
        let prefix = prefix.into();
        self.rebuild(|inner| inner.with_prefix(prefix))
    }

    /// Decides by `clock` instead of the system's (a [`ManualClock`](crate::clock::ManualClock) in
    /// tests).
    #[must_use]
    pub fn with_clock(self, clock: impl Clock) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(clock);
        self.rebuild(|inner| inner.with_clock(clock))
    }

    /// The key under which the state of the client `key` under `policy` is kept (before the
    /// digest of a key memcached cannot take).
    pub fn state_key(&self, key: &str, policy: &Policy) -> String {
        self.inner.state_key(key, policy)
    }

    /// The servers it uses now (`host:port`), in the order that spreads the keys.
    pub fn servers(&self) -> Vec<String> {
        self.inner.backend.addresses()
    }

    /// Its servers' list, for [`from_srv`](Self::from_srv)'s refresh to replace.
    fn server_list(&self) -> ServerList {
        self.inner.backend.list()
    }

    fn rebuild(self, f: impl FnOnce(StateBacked<Servers>) -> StateBacked<Servers>) -> Self {
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => Self {
                inner: Arc::new(f(inner)),
            },
            // Clones share their connections: a setting made on one of several changes none.
            Err(shared) => Self { inner: shared },
        }
    }
}

fn store_error(message: String) -> ConfigError {
    ConfigError::with_kind(ConfigErrorKind::Store, message)
}

impl fmt::Debug for MemcachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemcachedStore")
            .field("servers", &self.inner.backend.addresses())
            .field("inner", &self.inner)
            .finish()
    }
}

impl Store for MemcachedStore {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.inner.check(key, policy, cost, true, false).await
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.inner.peek(key, policy, cost).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.inner.reset(key, policy).await
    }

    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        self.inner.block(key, policy, duration).await
    }
}

impl StoreExt for MemcachedStore {
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        self.inner.check_many(checks).await
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        self.inner.refund(key, policy, n).await
    }

    /// Never at once: every decision asks the backend.
    fn check_ready(&self, _: &str, _: &Policy, _: u32) -> Option<Decision> {
        None
    }

    fn clock(&self) -> Option<&dyn Clock> {
        Some(self.inner.clock())
    }

    /// Nothing kept between calls that a given-up call could leave stuck: the backend's own
    /// connections are closed when a call on them is dropped.
    fn abandoned(&self) {}

    fn label(&self) -> Arc<str> {
        "memcached".into()
    }
}

impl Leasing for MemcachedStore {
    async fn acquire(
        &self,
        key: &str,
        policy: &Policy,
        min: u32,
        max: u32,
    ) -> Result<Grant, StoreError> {
        self.inner.acquire(key, policy, min, max).await
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        self.inner.release(key, policy, unused, grant).await
    }
}
