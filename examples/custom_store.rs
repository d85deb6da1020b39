//! Run with `cargo run --example custom_store`.
//!
//! A store of your own: a `HashMap` behind a lock that keeps bytes with a version and a time
//! to live. No algorithm code: `StateBackedStore` runs every algorithm on it, exactly, however
//! many limiters share it. Swap the map for your database's get and compare-and-set.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tollgate::store::{StateBackedStore, StateStore, StoreError, Versioned};
use tollgate::{key, Algorithm, Quota, RateLimitLayer};
use tower::{Service, ServiceExt};

/// Each key's bytes, version and expiry, and the last version given out. Clones share them.
#[derive(Clone, Default)]
pub struct MapStore(Arc<Mutex<(Map, u64)>>);
type Map = HashMap<String, (Vec<u8>, u64, Instant)>;

impl MapStore {
    fn lock(&self) -> Result<MutexGuard<'_, (Map, u64)>, StoreError> {
        self.0.lock().map_err(|_| StoreError::backend("poisoned"))
    }
}

impl StateStore for MapStore {
    async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let (map, _) = &*self.lock()?;
        let live = map.get(key).filter(|entry| entry.2 > Instant::now());
        Ok(live.map(|(bytes, version, _)| Versioned::new(bytes.clone(), *version)))
    }

    async fn set(
        &self,
        key: &str,
        bytes: &[u8],
        expected: Option<u64>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let (map, last_version) = &mut *self.lock()?;
        let now = Instant::now();
        if map
            .get(key)
            .filter(|entry| entry.2 > now)
            .map(|entry| entry.1)
            != expected
        {
            return Ok(false); // Written since it was read: the limiter reads it again.
        }
        *last_version += 1;
        map.insert(key.to_owned(), (bytes.to_vec(), *last_version, now + ttl));
        Ok(true)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.lock()?.0.remove(key);
        Ok(())
    }
}

/// Two limiters on one map, 20 requests in turn: each algorithm allows exactly its 10.
pub async fn run() -> Result<Vec<(Algorithm, usize)>, Box<dyn std::error::Error>> {
    let mut allowed = Vec::new();
    for algorithm in Algorithm::ALL {
        let backend = MapStore::default();
        let mut limiters = Vec::new();
        for _ in 0..2 {
            let layer = RateLimitLayer::builder()
                .quota(Quota::per_minute(10)?)
                .algorithm(algorithm)
                .key(key::Global)
                .store(StateBackedStore::new(backend.clone()))
                .build()?;
            limiters.push(tower::ServiceBuilder::new().layer(layer).service_fn(
                |_: http::Request<()>| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
                },
            ));
        }
        let mut ok = 0;
        for i in 0..20 {
            let limiter = &mut limiters[i % 2];
            let response = limiter.ready().await?.call(http::Request::new(())).await?;
            ok += usize::from(response.status().is_success());
        }
        allowed.push((algorithm, ok));
    }
    Ok(allowed)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    for (algorithm, ok) in run().await? {
        println!("{algorithm}: {ok} of 20 requests allowed (the limit is 10)");
    }
    Ok(())
}
