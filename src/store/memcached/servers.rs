//! [`Servers`]: memcached as a [`StateStore`], one connection pool per server, each key on
//! one server chosen by a hash of the key that every instance computes alike.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_memcached::{Client, Error, MetaProtocol, Status};
use deadpool::managed::{self, Manager, Metrics, Pool, RecycleError, RecycleResult};
use sha2::{Digest, Sha256};

use crate::error::StoreError;
use crate::store::state::{StateStore, Versioned};

/// Connections to one server at most, per instance.
const POOL_SIZE: usize = 32;
/// The longest a connection may take to open; the layer's store timeout is usually shorter.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// memcached reads a time to live above 30 days as an absolute Unix time.
const MAX_RELATIVE_TTL_SECS: u64 = 30 * 86_400;
/// The longest key memcached takes, in bytes.
const MAX_KEY_LEN: usize = 250;

/// Opens connections to one memcached server.
#[derive(Debug)]
struct Connect {
    address: String,
}

impl Manager for Connect {
    type Type = Client;
    type Error = Error;

    async fn create(&self) -> Result<Client, Error> {
        let dsn = format!("tcp://{}", self.address);
        match tokio::time::timeout(CONNECT_TIMEOUT, Client::new(dsn)).await {
            Ok(client) => client,
            Err(_) => Err(Error::Connect(std::io::ErrorKind::TimedOut.into())),
        }
    }

    /// A connection whose last call was cancelled or failed half-way is closed by the client:
    /// never handed out again.
    async fn recycle(&self, client: &mut Client, _: &Metrics) -> RecycleResult<Error> {
        if client.is_closed() {
            return Err(RecycleError::message("closed after an unfinished call"));
        }
        Ok(())
    }
}

/// memcached servers, as the state store of the algorithms. The list can be replaced while
/// decisions are under way (servers from a DNS SRV record, looked up again): a decision
/// uses the list it started with.
pub(crate) struct Servers {
    ring: Arc<RwLock<Arc<Ring>>>,
}

/// The list of a [`Servers`], to replace from elsewhere (a task that looks servers up again)
/// for as long as the store lives.
pub(crate) struct ServerList(Weak<RwLock<Arc<Ring>>>);

/// One list of servers: a pool for each, in the order every instance sorts them in.
#[derive(Default)]
struct Ring {
    pools: Vec<Pool<Connect>>,
    addresses: Vec<String>,
}

impl Servers {
    /// Pools for `addresses` (`host:port` each, at least one); no connection is opened yet.
    pub(crate) fn new(addresses: Vec<String>) -> Result<Self, String> {
        let ring = Ring::new(addresses, &Ring::default())?;
        Ok(Self {
            ring: Arc::new(RwLock::new(Arc::new(ring))),
        })
    }

    /// Its list, to replace from elsewhere.
    pub(crate) fn list(&self) -> ServerList {
        ServerList(Arc::downgrade(&self.ring))
    }

    /// The servers' addresses, in order.
    pub(crate) fn addresses(&self) -> Vec<String> {
        self.current().addresses.clone()
    }

    fn current(&self) -> Arc<Ring> {
        Arc::clone(&self.ring.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// A connection to the server that holds `key`.
    async fn connection(&self, key: &[u8]) -> Result<managed::Object<Connect>, StoreError> {
        let ring = self.current();
        let digest = Sha256::digest(key);
        let hash = u64::from_be_bytes(digest[..8].try_into().unwrap_or_default());
        // A list is never empty (`Ring::new` refuses one), but a request must not panic.
        let index = usize::try_from(hash % ring.pools.len().max(1) as u64).unwrap_or(0);
        let (Some(pool), Some(address)) = (ring.pools.get(index), ring.addresses.get(index)) else {
            return Err(StoreError::backend("memcached: no server".to_owned()));
        };
        pool.get()
            .await
            .map_err(|e| StoreError::backend(format!("memcached {address}: {e}")))
    }
}

impl ServerList {
    /// Serves keys from `addresses` from now on; `Ok(false)` if the store is gone. The
    /// connections to servers still on the list are kept, and a server keeps its keys unless
    /// the list's length or order changes.
    pub(crate) fn replace(&self, addresses: Vec<String>) -> Result<bool, String> {
        let Some(ring) = self.0.upgrade() else {
            return Ok(false);
        };
        let old = Arc::clone(&ring.read().unwrap_or_else(PoisonError::into_inner));
        let new = Arc::new(Ring::new(addresses, &old)?);
        *ring.write().unwrap_or_else(PoisonError::into_inner) = new;
        Ok(true)
    }

    /// Whether the store still lives.
    pub(crate) fn in_use(&self) -> bool {
        self.0.strong_count() > 0
    }
}

impl Ring {
    /// Pools for `addresses`, reusing `old`'s for the servers it has.
    fn new(addresses: Vec<String>, old: &Ring) -> Result<Self, String> {
        if addresses.is_empty() {
            return Err("no memcached server given".to_owned());
        }
        let pools = addresses
            .iter()
            .map(
                |address| match old.addresses.iter().position(|a| a == address) {
                    Some(kept) => Ok(old.pools[kept].clone()),
                    None => pool(address),
                },
            )
            .collect::<Result<_, _>>()?;
        Ok(Self { pools, addresses })
    }
}

/// A pool of connections to `address`; none is opened yet.
fn pool(address: &str) -> Result<Pool<Connect>, String> {
    let manager = Connect {
        address: address.to_owned(),
    };
    Pool::builder(manager)
        .max_size(POOL_SIZE)
        .runtime(deadpool::Runtime::Tokio1)
        .create_timeout(Some(CONNECT_TIMEOUT))
        .build()
        .map_err(|e| format!("memcached {address}: {e}"))
}

/// `key` as memcached takes it: as it is when it is at most 250 bytes without a space or a
/// control byte (what envoyproxy/ratelimit's client, gomemcache, takes: its `legalKey`, so
/// that plain counters share its keys), else `#` and its SHA-256 in hex.
pub(crate) fn memcached_key(key: &str) -> String {
    let plain = key.len() <= MAX_KEY_LEN
        && !key.starts_with('#')
        && key.bytes().all(|b| b > b' ' && b != 0x7f);
    if plain {
        return key.to_owned();
    }
    let mut out = String::from("#");
    for b in Sha256::digest(key.as_bytes()) {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// memcached's expiry for `ttl`: whole seconds, rounded up, and one more, since memcached's
/// clock ticks once a second and may end a key's life up to a second early; an absolute Unix
/// time beyond 30 days.
fn exptime(ttl: Duration) -> u64 {
    let secs = ttl.as_micros().div_ceil(1_000_000) + 1;
    let secs = u64::try_from(secs).unwrap_or(u64::MAX);
    if secs <= MAX_RELATIVE_TTL_SECS {
        return secs;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    now.saturating_add(secs)
}

/// A counter's value as memcached returns it: decimal digits (padded with spaces after a
/// decrement).
fn counter_value(data: Option<Vec<u8>>) -> Result<u64, StoreError> {
    let data = data.unwrap_or_default();
    std::str::from_utf8(&data)
        .ok()
        .and_then(|digits| digits.trim().parse().ok())
        .ok_or_else(|| StoreError::key_state(format!("memcached counter {data:?} is no number")))
}

impl Servers {
    /// Adds `delta` to the counter `key`, or creates it at `delta` to live for `ttl` if it has
    /// none, in one round trip (meta arithmetic with autovivification: `ma <key> N<ttl>
    /// J<delta> D<delta> v`); returns the counter after the addition.
    pub(crate) async fn increment(
        &self,
        key: &str,
        delta: u64,
        ttl: Duration,
    ) -> Result<u64, StoreError> {
        let key = memcached_key(key);
        let mut client = self.connection(key.as_bytes()).await?;
        let create = format!("N{}", exptime(ttl));
        let initial = format!("J{delta}");
        let flags = [create.as_str(), initial.as_str(), "v"];
        let value = client
            .meta_increment(&key, false, None, Some(delta), Some(&flags))
            .await
            .map_err(failed)?;
        counter_value(value.and_then(|v| v.data))
    }

    /// Takes `delta` off the counter `key` (memcached stops at 0), if it has one.
    pub(crate) async fn decrement(&self, key: &str, delta: u64) -> Result<(), StoreError> {
        let key = memcached_key(key);
        let mut client = self.connection(key.as_bytes()).await?;
        match client
            .meta_decrement(&key, false, None, Some(delta), None)
            .await
        {
            Ok(_) | Err(Error::Protocol(Status::NotFound)) => Ok(()),
            Err(e) => Err(failed(e)),
        }
    }

    /// The counter `key` and its version, if it has one.
    pub(crate) async fn counter(&self, key: &str) -> Result<Option<(u64, u64)>, StoreError> {
        match self.get(key).await? {
            Some(read) => Ok(Some((counter_value(Some(read.bytes))?, read.version))),
            None => Ok(None),
        }
    }

    /// Sets the counter `key` to `value` for `ttl` if its version is still `version`; whether
    /// it did.
    pub(crate) async fn set_counter(
        &self,
        key: &str,
        value: u64,
        version: u64,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let digits = value.to_string();
        self.set(key, digits.as_bytes(), Some(version), ttl).await
    }
}

/// A memcached error as a store error: the server is failing, or answered what no client
/// expects.
fn failed(e: Error) -> StoreError {
    StoreError::backend(format!("memcached: {e}"))
}

impl StateStore for Servers {
    async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let key = memcached_key(key);
        let mut client = self.connection(key.as_bytes()).await?;
        let value = client
            .meta_get(&key, false, None, Some(&["v", "c"]))
            .await
            .map_err(failed)?;
        Ok(value.map(|v| Versioned::new(v.data.unwrap_or_default(), v.cas.unwrap_or(0))))
    }

    async fn set(
        &self,
        key: &str,
        bytes: &[u8],
        expected: Option<u64>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let key = memcached_key(key);
        let mut client = self.connection(key.as_bytes()).await?;
        let ttl = format!("T{}", exptime(ttl));
        // With a version: compare-and-set (`cas`). Without: add, only if absent.
        let condition = match expected {
            Some(version) => format!("C{version}"),
            None => "ME".to_owned(),
        };
        let flags = [ttl.as_str(), condition.as_str()];
        match client
            .meta_set(&key, bytes, false, None, Some(&flags))
            .await
        {
            Ok(_) => Ok(true),
            Err(Error::Protocol(Status::Exists | Status::NotFound | Status::NotStored)) => {
                Ok(false)
            }
            Err(e) => Err(failed(e)),
        }
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let key = memcached_key(key);
        let mut client = self.connection(key.as_bytes()).await?;
        match client.meta_delete(&key, false, None, None).await {
            Ok(_) | Err(Error::Protocol(Status::NotFound)) => Ok(()),
            Err(e) => Err(failed(e)),
        }
    }
}

impl fmt::Debug for Servers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Servers")
            .field("addresses", &self.addresses())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_memcached_cannot_take_are_digested() {
        assert_eq!(memcached_key("tollgate:p:gcra:k"), "tollgate:p:gcra:k");
        // Bytes past ASCII are taken, as gomemcache takes them.
        assert_eq!(memcached_key("tollgate:p:gcra:é"), "tollgate:p:gcra:é");
        for odd in ["a b", "#x", "a\u{7f}", "a\tb", &"x".repeat(251)] {
            let key = memcached_key(odd);
            assert_eq!(key.len(), 65, "{odd}");
            assert!(key.starts_with('#'));
        }
    }

    #[test]
    fn expiry_is_whole_seconds_and_absolute_beyond_30_days() {
        assert_eq!(exptime(Duration::from_micros(1)), 2);
        assert_eq!(exptime(Duration::from_millis(1_001)), 3);
        assert_eq!(
            exptime(Duration::from_secs(MAX_RELATIVE_TTL_SECS - 1)),
            2_592_000
        );
        let year = exptime(Duration::from_secs(365 * 86_400));
        assert!(year > 1_700_000_000, "{year}");
    }
}
