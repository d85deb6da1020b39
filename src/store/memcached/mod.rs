//! The memcached store: the algorithms on one or more memcached servers, shared by every
//! instance that uses them.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::algorithm::Algorithm;
use crate::clock::Clock;
use crate::decision::Decision;
use crate::error::{ConfigError, ConfigErrorKind, StoreError};
use crate::quota::{InFlight, Policy, Quota};
use crate::store::check::Check;
use crate::store::contract::{InFlightSlots, Leasing, QuotaOverrides, StoreExt};
use crate::store::grant::Grant;
use crate::store::slot::HeldSlot;
use crate::store::state::StateBackedStore;
use crate::store::Store;

mod counters;
mod plain;
mod servers;
mod srv;

use counters::FixedWindowCounters;
use plain::PlainCounters;
use servers::{ServerList, Servers};
pub use srv::MemcachedSrv;

/// Keeps rate-limit state in memcached, shared by every instance of the app, exactly at the
/// limit.
///
/// **The aligned fixed window** ([`Algorithm::FixedWindow`]) counts on memcached's own
/// arithmetic, as the reference rate limit service does: a plain counter per client per
/// window. A decision adds its cost to the counter of the window that holds now and creates it
/// if it is the window's first, to live until the window ends (memcached's meta arithmetic,
/// `ma` with `N`/`J`), while it reads the client's block, both at once; it then decides on the
/// count the addition returned, exactly as [`MemoryStore`](super::MemoryStore) decides on its
/// own. A request the limit refuses gives its cost back (`ma` in decrement mode), so it counts
/// against no later one, except where denied hits are charged (tollgate-rls charges every
/// hit, as the reference does). So an allowed decision is one round trip of latency (two
/// commands, sent at once) and a refused one two; nothing is compared-and-set and no decision
/// waits for another, however hot the key. While a refused request's cost is still counted,
/// a concurrent request that would just have fit may be refused too: under-admission for a
/// round trip, never over-admission. A decision given up while its addition is on the wire
/// may leave its cost counted until the window ends; one given up after it still gives back
/// what it owes (in a task of its own). Leases take up to the lease's size in one addition and
/// give back at once what did not fit; a lease's unused units go back with a read and a
/// compare-and-set of the counter, while its window lasts.
///
/// **Every other algorithm** reads the key's state with its CAS unique (`mg`), decides with the
/// same state machines as the memory store, and writes the new state only if nobody wrote it
/// in between (`ms` with `C<cas>`, or in add mode for a new key), with a time to live as long
/// as the algorithm needs it; otherwise it decides again on the newer state (see
/// [`StateBackedStore`](super::StateBackedStore), whose byte format it stores). Denials write
/// nothing. [`Algorithm::FixedWindowFromFirst`] stays on this path: its window opens at a
/// client's first request, which a counter cannot tell (memcached keeps a key's expiry in whole
/// seconds and never says when a key was made).
///
/// # Keys
///
/// With the default prefix `tollgate`, a client `k` under a policy `api`:
///
/// | key | what |
/// | --- | --- |
/// | `tollgate:api:<algorithm>:k` | its state in the [state format](super::StateBackedStore#the-states-bytes), or for the aligned fixed window only its block, if it is blocked |
/// | `tollgate:api:fixed_window@<window start, µs since the epoch>:k` | the aligned fixed window's count in that window, in decimal, living until the window ends (and memcached's second more) |
/// | `tollgate:api:slots:k` | under an in-flight limit `api`, the client's slots of requests in flight in the [state format](super::StateBackedStore), living until the last lease ends |
/// | `k<window start, Unix seconds>` | a [plain counter](Policy::with_plain_counter)'s count, in decimal, as envoyproxy/ratelimit keeps it (the client key as given, no prefix), made and added to by one increment, living one period |
///
/// A key longer than 250 bytes, or with bytes memcached does not take, is `#` and its SHA-256
/// in hex. Blocks (after a breach, or [`block`](Store::block)) forget the window's count, as
/// the memory store forgets the state of a client it blocks.
///
/// Several servers share the keys: each key lives on one, chosen by a hash of the key that
/// every instance computes alike. memcached keeps no time of its own that a client can read,
/// so the instances decide by their clocks (the system's, kept in sync by NTP, or
/// [`with_clock`](Self::with_clock)'s); the fixed window's counters are those of the window each
/// instance's clock is in. A server that does not answer is a store failure like any other:
/// the layer's timeout, circuit breaker and `OnStoreError` handle it; a restarted one starts
/// every client with a whole quota.
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

    /// The servers it uses now (`host:port`), in the order that spreads the keys.
    pub fn servers(&self) -> Vec<String> {
        self.servers.addresses()
    }

    /// Its servers' list, for [`from_srv`](Self::from_srv)'s refresh to replace.
    fn server_list(&self) -> ServerList {
        self.servers.list()
    }

    /// The fixed-window decisions on counters, if `policy` is an aligned fixed window that
    /// is not a plain counter.
    fn counters(&self, policy: &Policy) -> Option<FixedWindowCounters<'_>> {
        let counted = policy.algorithm() == Algorithm::FixedWindow && !policy.plain_counter();
        counted.then_some(FixedWindowCounters {
            servers: &self.servers,
            state: &self.state,
        })
    }

    /// The decisions of plain counters, if `policy` is one.
    fn plain(&self, policy: &Policy) -> Option<PlainCounters<'_>> {
        policy.plain_counter().then_some(PlainCounters {
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
        if let Some(plain) = self.plain(policy) {
            return plain.check(key, policy, cost, false).await;
        }
        match self.counters(policy) {
            Some(counters) => counters.check(key, policy, cost, true, false).await,
            None => self.state.check(key, policy, cost).await,
        }
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        if let Some(plain) = self.plain(policy) {
            return plain.peek(key, policy, cost).await;
        }
        match self.counters(policy) {
            Some(counters) => counters.peek(key, policy, cost).await,
            None => self.state.peek(key, policy, cost).await,
        }
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        if let Some(plain) = self.plain(policy) {
            return plain.reset(key, policy).await;
        }
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
        if let Some(plain) = self.plain(policy) {
            // A plain counter is only a count: a block is not kept (zero: a reset).
            return match duration.is_zero() {
                true => plain.reset(key, policy).await,
                false => Err(StoreError::Unsupported("block")),
            };
        }
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
                None if c.policy.plain_counter() => {
                    let plain = PlainCounters {
                        servers: &self.servers,
                        state: &self.state,
                    };
                    plain.check(c.key, c.policy, c.cost, c.charge).await?
                }
                Some(counters) => {
                    (counters.check(c.key, c.policy, c.cost, c.blocking, c.charge)).await?
                }
                None if checks.len() == 1 => {
                    let one = self.state.check_many(std::slice::from_ref(c)).await?;
                    one.into_iter().next().ok_or_else(|| {
                        StoreError::backend("memcached: a check without its decision")
                    })?
                }
                None => self.state.check_stacked(c).await?,
            };
            decisions.push(decision);
        }
        Ok(decisions)
    }

    async fn refund(&self, key: &str, policy: &Policy, n: u32) -> Result<(), StoreError> {
        if let Some(plain) = self.plain(policy) {
            return plain.refund(key, policy, n).await;
        }
        match self.counters(policy) {
            Some(counters) => counters.refund(key, policy, n).await,
            None => self.state.refund(key, policy, n).await,
        }
    }

    /// Never at once: every decision asks memcached.
    fn check_many_ready(&self, _: &[Check<'_>]) -> Option<Vec<Decision>> {
        None
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

/// As the state-backed store keeps them: `<prefix>:<rule>:quota:<client key>` (digested as
/// every key memcached cannot take), `L:P:B`.
impl QuotaOverrides for MemcachedStore {
    async fn quota_override(&self, rule: &str, key: &str) -> Result<Option<Quota>, StoreError> {
        self.state.quota_override(rule, key).await
    }

    async fn set_quota_override(
        &self,
        rule: &str,
        key: &str,
        quota: Option<Quota>,
        ttl: Option<Duration>,
    ) -> Result<(), StoreError> {
        self.state.set_quota_override(rule, key, quota, ttl).await
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
        if let Some(plain) = self.plain(policy) {
            return plain.acquire(key, policy, min).await;
        }
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
        if policy.plain_counter() {
            return Ok(0);
        }
        match self.counters(policy) {
            Some(counters) => counters.release(key, policy, unused, grant).await,
            None => self.state.release(key, policy, unused, grant).await,
        }
    }
}

/// Slots as the state-backed store keeps them: one key per client and limit (see the type's
/// docs).
impl InFlightSlots for MemcachedStore {
    async fn take_slot(
        &self,
        key: &str,
        limit: &InFlight,
        id: u64,
    ) -> Result<Decision, StoreError> {
        self.state.take_slot(key, limit, id).await
    }

    async fn give_back_slot(&self, key: &str, limit: &InFlight, id: u64) -> Result<(), StoreError> {
        self.state.give_back_slot(key, limit, id).await
    }

    async fn renew_slots(&self, slots: &[HeldSlot<'_>]) -> Result<(), StoreError> {
        self.state.renew_slots(slots).await
    }
}

#[cfg(test)]
mod tests;
