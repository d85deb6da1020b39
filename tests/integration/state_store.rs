//! Stores of one's own through `StateBackedStore`, in both forms: a compare-and-set
//! `StateStore` decides exactly as `MemoryStore` on the same seeded histories of every
//! algorithm; two limiters sharing one backend of either form admit exactly the limit under
//! concurrency; a backend that fails is answered by the layer's `OnStoreError`. (The
//! `custom_store` example, an `AtomicStateStore`, is tested in its own `mod tests`.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate::clock::ManualClock;
use tollgate::store::{
    AtomicStateStore, MemoryStore, OnStoreError, Policy, StateBackedStore, StateStore, Store,
    StoreError, Update, Versioned,
};
use tollgate::{key, Algorithm, Quota, RateLimitLayer};
use tower::{Service, ServiceExt};

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

/// A map as a compare-and-set store: each key's bytes, version and expiry, and
/// the last version given out.
#[derive(Clone, Default)]
pub(crate) struct VersionedMap(Arc<Mutex<(Versions, u64)>>);
type Versions = HashMap<String, (Vec<u8>, u64, Instant)>;

impl StateStore for VersionedMap {
    async fn get(&self, key: &str) -> Result<Option<Versioned>, StoreError> {
        let (map, _) = &*self.0.lock().unwrap();
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
        let (map, last_version) = &mut *self.0.lock().unwrap();
        let now = Instant::now();
        let current = map.get(key).filter(|entry| entry.2 > now);
        if current.map(|entry| entry.1) != expected {
            return Ok(false);
        }
        *last_version += 1;
        map.insert(key.to_owned(), (bytes.to_vec(), *last_version, now + ttl));
        Ok(true)
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.0.lock().unwrap().0.remove(key);
        Ok(())
    }
}

#[tokio::test]
async fn a_compare_and_set_store_decides_as_memory_on_every_algorithm() {
    decides_as_memory(500, |clock| {
        StateBackedStore::new(VersionedMap::default()).with_clock(clock)
    })
    .await;
}

/// A compare-and-set map with a pause between a read and what follows, so that concurrent
/// decisions interleave and write over each other's reads; counts the writes refused.
#[derive(Clone, Default)]
struct Contended {
    map: VersionedMap,
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

/// Bytes and when they expire.
type Expiring = (Vec<u8>, Instant);

/// An atomic map whose updates hold its lock across a pause, as a database transaction holds
/// a row lock across round trips; counts the most updates under way at once.
#[derive(Clone, Default)]
struct Transactional {
    map: Arc<tokio::sync::Mutex<HashMap<String, Expiring>>>,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

impl AtomicStateStore for Transactional {
    async fn update(
        &self,
        key: &str,
        mut decide: impl FnMut(Option<&[u8]>) -> Update + Send,
    ) -> Result<(), StoreError> {
        let under_way = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(under_way, Ordering::SeqCst);
        let mut map = self.map.lock().await;
        tokio::time::sleep(Duration::from_micros(200)).await;
        let now = Instant::now();
        let live = map.get(key).filter(|(_, expires)| *expires > now);
        if let Update::Set { bytes, ttl } = decide(live.map(|(bytes, _)| bytes.as_slice())) {
            tokio::time::sleep(Duration::from_micros(200)).await;
            map.insert(key.to_owned(), (bytes, now + ttl));
        }
        drop(map);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.map.lock().await.remove(key);
        Ok(())
    }
}

/// Two limiters on `store`'s backend (limit 10, failing closed), 60 requests at once: how
/// many were admitted and denied.
pub(crate) async fn admitted_and_denied<S: Store>(
    algorithm: Algorithm,
    store: impl Fn() -> S,
) -> (usize, usize) {
    let limiters: Vec<_> = (0..2)
        .map(|_| {
            let layer = RateLimitLayer::builder()
                .quota(Quota::per_minute(10).unwrap())
                .algorithm(algorithm)
                .key(key::Global)
                .store(store())
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
    assert_eq!(admitted + denied, 60, "{algorithm}: {statuses:?}");
    (admitted, denied)
}

/// Two limiters on one compare-and-set backend, 60 requests at once on four threads: exactly
/// the limit (10) is admitted under every algorithm, and the backend saw writes refused (the
/// two limiters wrote over each other's reads) and decided again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_limiters_on_one_backend_admit_exactly_the_limit_under_concurrency() {
    let mut conflicts = 0;
    for algorithm in Algorithm::ALL {
        let backend = Contended::default();
        let outcome =
            admitted_and_denied(algorithm, || StateBackedStore::new(backend.clone())).await;
        assert_eq!(outcome, (10, 50), "{algorithm}");
        conflicts += backend.conflicts.load(Ordering::Relaxed);
    }
    assert!(conflicts > 0, "no write was ever refused: nothing raced");
}

/// The same on one atomic backend: exactly the limit under every algorithm, with the
/// decisions of both limiters waiting on the backend's own lock at once (the adapter holds
/// none of its own around them).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_limiters_on_one_atomic_backend_admit_exactly_the_limit_under_concurrency() {
    for algorithm in Algorithm::ALL {
        let backend = Transactional::default();
        let atomic = || StateBackedStore::atomic(backend.clone());
        let outcome = admitted_and_denied(algorithm, atomic).await;
        assert_eq!(outcome, (10, 50), "{algorithm}");
        let most = backend.most_in_flight.load(Ordering::SeqCst);
        assert!(
            most > 2,
            "{algorithm}: at most {most} updates under way at once"
        );
    }
}

/// An atomic backend that never answers: a store failure like any other, answered as the
/// layer's `OnStoreError` says.
#[tokio::test]
async fn an_atomic_backend_that_fails_is_answered_by_on_store_error() {
    #[derive(Clone)]
    struct Down;
    impl AtomicStateStore for Down {
        async fn update(
            &self,
            _: &str,
            _: impl FnMut(Option<&[u8]>) -> Update + Send,
        ) -> Result<(), StoreError> {
            Err(StoreError::backend("connection refused"))
        }
        async fn delete(&self, _: &str) -> Result<(), StoreError> {
            Err(StoreError::backend("connection refused"))
        }
    }
    for (on_error, status) in [(OnStoreError::Deny, 503), (OnStoreError::Allow, 200)] {
        let layer = RateLimitLayer::builder()
            .quota(Quota::per_minute(10).unwrap())
            .key(key::Global)
            .store(StateBackedStore::atomic(Down))
            .on_store_error(on_error)
            .build()
            .unwrap();
        let mut service = tower::ServiceBuilder::new()
            .layer(layer)
            .service(crate::ok_service());
        for _ in 0..3 {
            let response = service
                .ready()
                .await
                .unwrap()
                .call(http::Request::new(()))
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), status, "{on_error:?}");
        }
    }
}
