//! Run with `cargo run --example custom_store`.
//!
//! A store of your own: a `HashMap` behind a lock that keeps bytes with a time to live, and
//! updates a key in one step under its lock. No algorithm code: `StateBackedStore` runs every
//! algorithm on it, exactly, however many limiters share it. Swap the lock for your database's
//! transaction (`SELECT ... FOR UPDATE`, then write), or see `StateStore` for a backend with
//! versions and compare-and-set instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tollgate::store::{AtomicStateStore, StateBackedStore, StoreError, Update};
use tollgate::{key, Algorithm, Quota, RateLimitLayer};
use tower::{Service, ServiceExt};

/// Each key's bytes and expiry. Clones share them.
#[derive(Clone, Default)]
pub struct MapStore(Arc<Mutex<Map>>);
type Map = HashMap<String, (Vec<u8>, Instant)>;

impl AtomicStateStore for MapStore {
    async fn update(
        &self,
        key: &str,
        mut decide: impl FnMut(Option<&[u8]>) -> Update + Send,
    ) -> Result<(), StoreError> {
        let mut map = self.0.lock().map_err(|_| StoreError::backend("poisoned"))?;
        let now = Instant::now();
        let live = map.get(key).filter(|(_, expires)| *expires > now);
        // The limiter decides on the state it is given, under the lock.
        if let Update::Set { bytes, ttl } = decide(live.map(|(bytes, _)| bytes.as_slice())) {
            map.insert(key.to_owned(), (bytes, now + ttl));
        }
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let mut map = self.0.lock().map_err(|_| StoreError::backend("poisoned"))?;
        map.remove(key);
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
                .store(StateBackedStore::atomic(backend.clone()))
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
