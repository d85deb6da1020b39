//! Run with `cargo run --example custom_store` (its tests: `cargo test --example custom_store`).
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
struct MapStore(Arc<Mutex<Map>>);
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
async fn run() -> Result<Vec<(Algorithm, usize)>, Box<dyn std::error::Error>> {
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

#[cfg(test)]
mod tests {
    //! The map decides as `MemoryStore` does, and admits exactly the limit when two limiters
    //! share it, in turn or at once.

    use std::time::Duration;

    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use tollgate::clock::ManualClock;
    use tollgate::store::{MemoryStore, Policy, Store};

    use super::*;

    #[tokio::test]
    async fn two_limiters_on_one_map_admit_exactly_the_limit_for_every_algorithm() {
        let allowed = run().await.unwrap();
        let expected: Vec<_> = Algorithm::ALL.into_iter().map(|a| (a, 10)).collect();
        assert_eq!(allowed, expected);
    }

    /// Quotas each algorithm's history runs with (a burst only where it applies).
    fn quotas(algorithm: Algorithm) -> Vec<Quota> {
        let mut quotas = vec![
            Quota::new(5, Duration::from_secs(10)).unwrap(),
            Quota::new(3, Duration::from_secs(1)).unwrap(),
            Quota::new(7, Duration::from_millis(700)).unwrap(),
        ];
        if algorithm.as_str().ends_with("bucket") || algorithm == Algorithm::Gcra {
            quotas.push(Quota::per_second(10).unwrap().burst(20).unwrap());
        }
        if algorithm == Algorithm::SlidingWindowLog {
            quotas.push(Quota::new(60, Duration::from_millis(400)).unwrap());
        }
        quotas
    }

    /// The same seeded history of checks, peeks, blocks (by hand and after a denial, with
    /// `block_for`) and resets on `MemoryStore` and on the map, on one manual clock, for every
    /// algorithm: every decision is the same. The clock runs ahead of real time, never behind
    /// it, so the map (which expires keys by real time) has not forgotten what the memory store
    /// still holds.
    #[tokio::test]
    async fn the_map_decides_as_memory_on_every_algorithm() {
        let start = Instant::now();
        let mut counted = [0u32; 3];
        for algorithm in Algorithm::ALL {
            for (q, quota) in quotas(algorithm).into_iter().enumerate() {
                let seed = 0x57a7_e000 ^ (algorithm as u64) << 8 ^ q as u64;
                let mut rng = SmallRng::seed_from_u64(seed);
                let clock = ManualClock::new(0);
                let memory = MemoryStore::with_clock(clock.clone());
                let map = StateBackedStore::atomic(MapStore::default()).with_clock(clock.clone());
                let period = quota.period().as_micros() as u64;
                let policy = Policy::new("p", quota, algorithm).unwrap();
                let blocking = policy
                    .clone()
                    .with_block_for(Duration::from_micros(period / 2 + 1));
                let mut offset: u64 = 1_700_000_000_000_000;
                for step in 0..500 {
                    offset += match rng.random_range(0..10) {
                        0..=3 => 0,
                        4..=6 => rng.random_range(0..period / 4 + 1),
                        7..=8 => rng.random_range(0..period + 1),
                        _ => rng.random_range(0..3 * period),
                    };
                    clock.set(offset + start.elapsed().as_micros() as u64);
                    let key = ["a", "b", "c"][rng.random_range(0..3)];
                    let policy = if key == "c" { &blocking } else { &policy };
                    let at = format!("{algorithm} {quota} seed {seed:#x} step {step} key {key}");
                    let cost = if rng.random_bool(0.05) {
                        rng.random_range(1..30)
                    } else {
                        rng.random_range(1..4)
                    };
                    match rng.random_range(0..40) {
                        0 => {
                            memory.reset(key, policy).await.unwrap();
                            map.reset(key, policy).await.unwrap();
                            counted[0] += 1;
                        }
                        1 => {
                            let d = Duration::from_micros(rng.random_range(0..2 * period));
                            memory.block(key, policy, d).await.unwrap();
                            map.block(key, policy, d).await.unwrap();
                            counted[1] += 1;
                        }
                        2..=5 => {
                            let cost = cost % 3;
                            let m = memory.peek(key, policy, cost).await.unwrap();
                            let o = map.peek(key, policy, cost).await.unwrap();
                            assert_eq!(m, o, "{at} peek {cost}");
                            counted[2] += 1;
                        }
                        _ => {
                            let m = memory.check(key, policy, cost).await.unwrap();
                            let o = map.check(key, policy, cost).await.unwrap();
                            assert_eq!(m, o, "{at} cost {cost}");
                        }
                    }
                }
            }
        }
        assert!(counted.iter().all(|&n| n > 20), "{counted:?}");
    }

    /// Two limiters on one map, 60 requests at once on four threads: exactly the limit (10) is
    /// admitted under every algorithm.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn two_limiters_on_one_map_admit_exactly_the_limit_at_once() {
        for algorithm in Algorithm::ALL {
            let backend = MapStore::default();
            let limiters: Vec<_> = (0..2)
                .map(|_| {
                    let layer = RateLimitLayer::builder()
                        .quota(Quota::per_minute(10).unwrap())
                        .algorithm(algorithm)
                        .key(key::Global)
                        .store(StateBackedStore::atomic(backend.clone()))
                        .denial_cache(false)
                        .build()
                        .unwrap();
                    tower::ServiceBuilder::new().layer(layer).service_fn(
                        |_: http::Request<()>| async {
                            Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
                        },
                    )
                })
                .collect();
            let tasks: Vec<_> = (0..60)
                .map(|i| {
                    let mut limiter = limiters[i % 2].clone();
                    tokio::spawn(async move {
                        let ready = limiter.ready().await.unwrap();
                        let response = ready.call(http::Request::new(())).await.unwrap();
                        response.status().as_u16()
                    })
                })
                .collect();
            let mut admitted = 0;
            for task in tasks {
                admitted += usize::from(task.await.unwrap() == 200);
            }
            assert_eq!(admitted, 10, "{algorithm}");
        }
    }
}
