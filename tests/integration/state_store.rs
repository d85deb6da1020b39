//! Stores of one's own through `StateBackedStore`: the `custom_store` example runs, decides
//! exactly as `MemoryStore` on the same seeded histories of every algorithm, and two limiters
//! sharing one backend admit exactly the limit under concurrency.

#[path = "../../examples/custom_store.rs"]
#[allow(dead_code)]
mod example;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate::clock::ManualClock;
use tollgate::store::{
    MemoryStore, OnStoreError, Policy, StateBackedStore, StateStore, Store, StoreError, Versioned,
};
use tollgate::{key, Algorithm, Quota, RateLimitLayer};
use tower::{Service, ServiceExt};

use example::MapStore;

#[tokio::test]
async fn the_example_admits_exactly_the_limit_for_every_algorithm() {
    let allowed = example::run().await.unwrap();
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

/// Runs the same seeded history of checks, peeks, blocks (by hand and after a denial, with
/// `block_for`) and resets on `MemoryStore` and on the store `make` builds on the same
/// clock, for every algorithm, and asserts that every decision is the same. The clock runs
/// ahead of real time, never behind it, so a backend that expires keys by real time has not
/// forgotten what the memory store still holds.
pub(crate) async fn decides_as_memory<S: Store>(steps: usize, make: impl Fn(ManualClock) -> S) {
    let start = Instant::now();
    let mut counted = [0u32; 3];
    for algorithm in Algorithm::ALL {
        for (q, quota) in quotas(algorithm).into_iter().enumerate() {
            let seed = 0x57a7_e000 ^ (algorithm as u64) << 8 ^ q as u64;
            let mut rng = SmallRng::seed_from_u64(seed);
            let clock = ManualClock::new(0);
            let memory = MemoryStore::with_clock(clock.clone());
            let other = make(clock.clone());
            let period = quota.period().as_micros() as u64;
            let policy = Policy::new("p", quota, algorithm).unwrap();
            let blocking = policy
                .clone()
                .with_block_for(Duration::from_micros(period / 2 + 1));
            let mut offset: u64 = 1_700_000_000_000_000;
            for step in 0..steps {
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
                        other.reset(key, policy).await.unwrap();
                        counted[0] += 1;
                    }
                    1 => {
                        let d = Duration::from_micros(rng.random_range(0..2 * period));
                        memory.block(key, policy, d).await.unwrap();
                        other.block(key, policy, d).await.unwrap();
                        counted[1] += 1;
                    }
                    2..=5 => {
                        let cost = cost % 3;
                        let m = memory.peek(key, policy, cost).await.unwrap();
                        let o = other.peek(key, policy, cost).await.unwrap();
                        assert_eq!(m, o, "{at} peek {cost}");
                        counted[2] += 1;
                    }
                    _ => {
                        let m = memory.check(key, policy, cost).await.unwrap();
                        let o = other.check(key, policy, cost).await.unwrap();
                        assert_eq!(m, o, "{at} cost {cost}");
                    }
                }
            }
        }
    }
    assert!(counted.iter().all(|&n| n > 20), "{counted:?}");
}

#[tokio::test]
async fn the_example_store_decides_as_memory_on_every_algorithm() {
    decides_as_memory(500, |clock| {
        StateBackedStore::new(MapStore::default()).with_clock(clock)
    })
    .await;
}

/// The example's map, with a pause between a read and what follows, so that concurrent
/// decisions interleave and write over each other's reads; counts the writes refused.
#[derive(Clone, Default)]
struct Contended {
    map: MapStore,
    conflicts: Arc<AtomicU64>,
}

impl StateStore for Contended {
    async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let read = self.map.get(key).await;
        tokio::time::sleep(Duration::from_micros(200)).await;
        read
    }

    async fn set(
        &self,
        key: &str,
        bytes: &[u8],
        expected: Option<u64>,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let written = self.map.set(key, bytes, expected, ttl).await?;
        if !written {
            self.conflicts.fetch_add(1, Ordering::Relaxed);
        }
        Ok(written)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.map.delete(key).await
    }
}

/// Two limiters on one backend, 60 requests at once on four threads: exactly the limit (10)
/// is admitted under every algorithm, and the backend saw writes refused (the two limiters
/// wrote over each other's reads) and decided again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_limiters_on_one_backend_admit_exactly_the_limit_under_concurrency() {
    let mut conflicts = 0;
    for algorithm in Algorithm::ALL {
        let backend = Contended::default();
        let limiters: Vec<_> = (0..2)
            .map(|_| {
                let layer = RateLimitLayer::builder()
                    .quota(Quota::per_minute(10).unwrap())
                    .algorithm(algorithm)
                    .key(key::Global)
                    .store(StateBackedStore::new(backend.clone()))
                    // Fail closed, with time to spare: an error must not pass for an admission.
                    .on_store_error(OnStoreError::Deny)
                    .store_timeout(Duration::from_secs(2))
                    .denial_cache(false)
                    .build()
                    .unwrap();
                tower::ServiceBuilder::new()
                    .layer(layer)
                    .service(crate::ok_service())
            })
            .collect();
        let tasks: Vec<_> = (0..60)
            .map(|i| {
                let mut limiter = limiters[i % 2].clone();
                tokio::spawn(async move {
                    let response = limiter
                        .ready()
                        .await
                        .unwrap()
                        .call(http::Request::new(()))
                        .await
                        .unwrap();
                    response.status().as_u16()
                })
            })
            .collect();
        let mut statuses = Vec::new();
        for task in tasks {
            statuses.push(task.await.unwrap());
        }
        let admitted = statuses.iter().filter(|&&s| s == 200).count();
        let denied = statuses.iter().filter(|&&s| s == 429).count();
        assert_eq!((admitted, denied), (10, 50), "{algorithm}: {statuses:?}");
        conflicts += backend.conflicts.load(Ordering::Relaxed);
    }
    assert!(conflicts > 0, "no write was ever refused: nothing raced");
}
