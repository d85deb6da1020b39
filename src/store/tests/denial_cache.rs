//! The cache of denials in front of a real redis-server: it changes no decision.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::support;
use crate::store::wrappers::DenialCache;
use crate::store::{MemoryStore, RedisStore, Store};
use crate::{clock::ManualClock, store::Policy, Algorithm, Quota};

/// Seeded histories of every algorithm: the memory store without a cache and the Redis store
/// behind one give the same decisions. A cached answer to a request costing more than the one
/// denied may report fewer `remaining` and an earlier `retry_after` than the store would (lower
/// bounds); for cost 1 every number is the store's.
#[tokio::test]
async fn the_cache_changes_no_decision() {
    let url = support::shared_redis_url();
    let start = Instant::now();
    let clock = ManualClock::new(0);
    let mut hits = 0;
    for algorithm in Algorithm::ALL {
        let quota = Quota::new(5, Duration::from_secs(2)).unwrap();
        let seed = 0xdea1_ca5e ^ (algorithm as u64);
        let mut rng = SmallRng::seed_from_u64(seed);
        let cached = DenialCache::new(
            RedisStore::from_url(&url)
                .unwrap()
                .prefix(support::unique_prefix("denials"))
                .with_clock(clock.clone()),
            1_000,
        );
        let memory = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new("p", quota, algorithm).unwrap();
        let period = quota.period().as_micros() as u64;
        // Manual time runs ahead of real time, so Redis never expires a key early.
        let mut offset: u64 = 1_700_000_000_000_000;
        for step in 0..800 {
            offset += match rng.random_range(0..10) {
                0..=5 => rng.random_range(0..period / 50 + 1),
                6..=8 => rng.random_range(0..period / 4 + 1),
                _ => rng.random_range(0..2 * period),
            };
            clock.set(offset + start.elapsed().as_micros() as u64);
            let key = ["a", "b"][rng.random_range(0..2)];
            let cost = if rng.random_bool(0.1) {
                rng.random_range(2..5)
            } else {
                1
            };
            let m = memory.check(key, &policy, cost).await.unwrap();
            let c = cached.check(key, &policy, cost).await.unwrap();
            let at = format!("{algorithm} seed {seed:#x} step {step} key {key} cost {cost}");
            assert_eq!(
                (m.allowed, m.limit, m.reset_after),
                (c.allowed, c.limit, c.reset_after),
                "{at}"
            );
            assert!(c.remaining <= m.remaining, "{at}");
            assert!(c.retry_after <= m.retry_after, "{at}");
            if cost == 1 {
                assert_eq!(
                    (c.remaining, c.retry_after),
                    (m.remaining, m.retry_after),
                    "{at}"
                );
            }
        }
        hits += cached.hits();
    }
    assert!(
        hits > 500,
        "the histories must exercise the cache: {hits} hits"
    );
}
