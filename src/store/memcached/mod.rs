//! The memcached store: the algorithms on one or more memcached servers, shared by every
//! instance that uses them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, ConfigErrorKind, StoreError};
use crate::quota::Policy;
use crate::store::check::Check;
use crate::store::contract::{Leasing, StoreExt};
use crate::store::grant::Grant;
use crate::store::state::StateBackedStore;
use crate::store::Store;

mod counters;
mod servers;

use counters::Counters;
use servers::Servers;

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
    servers: Arc<Servers>,
    /// Every decision but the aligned fixed window's, and the blocks of all.
    state: StateBackedStore,
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
        let servers = Arc::new(Servers::new(addresses).map_err(store_error)?);
        Ok(Self {
            state: StateBackedStore::new(Arc::clone(&servers)),
            servers,
        })
    }

    /// Sets the key prefix (default `"tollgate"`), e.g. to keep two apps apart on one
    /// memcached.
    #[must_use]
    pub fn prefix(self, prefix: impl Into<Arc<str>>) -> Self {
        Self {
            state: self.state.prefix(prefix),
            ..self
        }
    }

    /// Decides by `clock` instead of the system's (a [`ManualClock`](crate::clock::ManualClock) in
    /// tests).
    #[must_use]
    pub fn with_clock(self, clock: impl Clock) -> Self {
        Self {
            state: self.state.with_clock(clock),
            ..self
        }
    }

    /// The key under which the state of the client `key` under `policy` is kept (before the
    /// digest of a key memcached cannot take): for the aligned fixed window, its block; its
    /// counts are in the window's counter (see the type's docs).
    pub fn state_key(&self, key: &str, policy: &Policy) -> String {
        self.state.state_key(key, policy)
    }

    /// The fixed-window decisions on counters, if `policy` is an aligned fixed window.
    fn counters(&self, policy: &Policy) -> Option<Counters<'_>> {
        (policy.algorithm() == Algorithm::FixedWindow).then_some(Counters {
            servers: &self.servers,
            state: &self.state,
        })
    }
}

fn store_error(message: String) -> ConfigError {
    ConfigError::with_kind(ConfigErrorKind::Store, message)
}

impl fmt::Debug for MemcachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemcachedStore")
            .field("servers", &self.servers.addresses())
            .field("state", &self.state)
            .finish()
    }
}

impl Store for MemcachedStore {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        match self.counters(policy) {
            Some(counters) => counters.check(key, policy, cost, true, false).await,
            None => self.state.check(key, policy, cost).await,
        }
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        match self.counters(policy) {
            Some(counters) => counters.peek(key, policy, cost).await,
            None => self.state.peek(key, policy, cost).await,
        }
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        match self.counters(policy) {
            Some(counters) => counters.reset(key, policy).await,
            None => self.state.reset(key, policy).await,
        }
    }

    async fn block(
        &self,
        key: &str,
        policy: &Policy,
        duration: Duration,
    ) -> Result<(), StoreError> {
        match self.counters(policy) {
            Some(counters) => counters.block(key, policy, duration).await,
            None => self.state.block(key, policy, duration).await,
        }
    }
}

impl StoreExt for MemcachedStore {
    /// One limit after the other, as the state-backed store decides them (not atomic across
    /// them), each on its own path.
    async fn check_many(&self, checks: &[Check<'_>]) -> Result<Vec<Decision>, StoreError> {
        let mut decisions = Vec::with_capacity(checks.len());
        for c in checks {
            let decision = match self.counters(c.policy) {
                Some(counters) => {
                    (counters.check(c.key, c.policy, c.cost, c.blocking, c.charge)).await?
                }
                None => {
                    let one = self.state.check_many(std::slice::from_ref(c)).await?;
                    one.into_iter().next().ok_or_else(|| {
                        StoreError::backend("memcached: a check without its decision")
                    })?
                }
            };
            decisions.push(decision);
        }
        Ok(decisions)
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        match self.counters(policy) {
            Some(counters) => counters.refund(key, policy, n).await,
            None => self.state.refund(key, policy, n).await,
        }
    }

    /// Never at once: every decision asks memcached.
    fn check_ready(&self, _: &str, _: &Policy, _: u32) -> Option<Decision> {
        None
    }

    fn clock(&self) -> Option<&dyn Clock> {
        self.state.clock()
    }

    /// Nothing kept between calls that a given-up call could leave stuck: a connection whose
    /// call is dropped is closed, and what a decision owes a counter is given back by a task
    /// of its own.
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
        match self.counters(policy) {
            Some(counters) => counters.acquire(key, policy, min, max).await,
            None => self.state.acquire(key, policy, min, max).await,
        }
    }

    async fn release(
        &self,
        key: &str,
        policy: &Policy,
        unused: u32,
        grant: &Grant,
    ) -> Result<u32, StoreError> {
        match self.counters(policy) {
            Some(counters) => counters.release(key, policy, unused, grant).await,
            None => self.state.release(key, policy, unused, grant).await,
        }
    }
}

#[cfg(test)]
mod tests;
