//! A client whose quota changes (per-client quotas, overrides): the memory store, the Redis
//! store and a state-backed store decide alike, step for step, for every algorithm, whichever
//! quota each step is decided under; and what a client used counts against its new quota.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::support;
use crate::clock::ManualClock;
use crate::rules::Lease;
use crate::store::check::Check;
use crate::store::contract::{Leasing, StoreExt};
use crate::store::grant::Grant;
use crate::store::{
    AtomicStateStore, MemoryStore, Policy, RedisStore, StateBackedStore, Store, StoreError, Update,
};
use crate::{Algorithm, Quota};

/// States in a map, updated under its lock (the adapter reads expired state as new).
#[derive(Clone, Default)]
struct Map(Arc<Mutex<HashMap<String, Vec<u8>>>>);

impl AtomicStateStore for Map {
    async fn update(
        &self,
        key: &str,
        mut decide: impl FnMut(Option<&[u8]>) -> Update + Send,
    ) -> Result<(), StoreError> {
        let mut map = self.0.lock().unwrap();
        if let Update::Set { bytes, .. } = decide(map.get(key).map(Vec::as_slice)) {
            map.insert(key.to_owned(), bytes);
        }
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.0.lock().unwrap().remove(key);
        Ok(())
    }
}

/// One rule's policy (5 per 2 s) and the quotas its clients may be given instead, each kept
/// in the rule's scale as a client's quota is: lower, higher, and for the buckets another
/// period and another burst. (A window counted under one period is forgotten when that
/// window ends, on every store, by its time to live: a quota of another period reads it
/// alike only in real time, which this test runs ahead of.)
fn policies(algorithm: Algorithm) -> Vec<Policy> {
    let rule = Policy::new(
        "r",
        Quota::new(5, Duration::from_secs(2)).unwrap(),
        algorithm,
    )
    .unwrap();
    let mut quotas = vec![
        Quota::new(2, Duration::from_secs(2)).unwrap(),
        Quota::new(20, Duration::from_secs(2)).unwrap(),
    ];
    if algorithm.uses_burst() {
        quotas.extend([
            Quota::new(3, Duration::from_secs(1)).unwrap(),
            Quota::new(7, Duration::from_millis(2_900)).unwrap(),
            Quota::new(5, Duration::from_secs(2))
                .unwrap()
                .burst(9)
                .unwrap(),
        ]);
    }
    let mut all = vec![rule.clone()];
    all.extend(
        quotas
            .into_iter()
            .map(|q| Policy::new("r", q, algorithm).unwrap().kept_as(&rule)),
    );
    all
}

/// Seeded histories where each step is decided under one of a rule's quotas: checks, looks,
/// refunds, charged hits, stacked checks and (for the algorithms that lease) leases taken and
/// given back. The three stores answer every step alike.
#[tokio::test]
async fn memory_redis_and_state_stores_agree_when_quotas_change() {
    let url = support::shared_redis_url();
    let start = Instant::now();
    let clock = ManualClock::new(0);
    for algorithm in Algorithm::ALL {
        let seed = 0x9a07a ^ (algorithm as u64) << 8;
        let mut rng = SmallRng::seed_from_u64(seed);
        let redis = RedisStore::from_url(&url)
            .unwrap()
            .prefix(support::unique_prefix("requota"))
            .with_clock(clock.clone());
        let memory = MemoryStore::with_clock(clock.clone());
        let state = StateBackedStore::atomic(Map::default()).with_clock(clock.clone());
        let policies = policies(algorithm);
        let other = Policy::new("o", Quota::per_second(4).unwrap(), algorithm).unwrap();
        let leases = Lease::ALGORITHMS.contains(&algorithm);
        let mut grants: Vec<(&str, usize, Grant)> = Vec::new();
        let mut offset: u64 = 1_700_000_000_000_000;
        let mut rescaled_denials = 0;
        for step in 0..700 {
            offset += match rng.random_range(0..10) {
                0..=4 => 0,
                5..=7 => rng.random_range(0..200_000),
                8 => rng.random_range(0..2_000_000),
                _ => rng.random_range(0..5_000_000),
            };
            // Manual time runs ahead of real time, so Redis never expires a key early.
            clock.set(offset + start.elapsed().as_micros() as u64);
            let key = ["a", "b"][rng.random_range(0..2)];
            let which = rng.random_range(0..policies.len());
            let policy = &policies[which];
            let at = format!("{algorithm} seed {seed:#x} step {step} key {key} quota {which}");
            let op = rng.random_range(0..12);
            match op {
                0 => {
                    let cost = rng.random_range(0..3);
                    let m = memory.peek(key, policy, cost).await.unwrap();
                    assert_eq!(m, redis.peek(key, policy, cost).await.unwrap(), "{at} peek");
                    assert_eq!(m, state.peek(key, policy, cost).await.unwrap(), "{at} peek");
                }
                1 => {
                    let n = rng.random_range(1..4);
                    memory.refund(key, policy, n).await.unwrap();
                    redis.refund(key, policy, n).await.unwrap();
                    state.refund(key, policy, n).await.unwrap();
                }
                2 => {
                    let cost = rng.random_range(1..4);
                    let checks = [Check::new(key, policy, cost).charge(true)];
                    let m = memory.check_many(&checks).await.unwrap();
                    assert_eq!(m, redis.check_many(&checks).await.unwrap(), "{at} charged");
                    assert_eq!(m, state.check_many(&checks).await.unwrap(), "{at} charged");
                }
                3 => {
                    // The other limit never blocks: the state store, which checks them in
                    // turn, consumes from the rule's exactly when the others do.
                    let checks = [
                        Check::new(key, policy, 1),
                        Check::new(key, &other, 1).blocking(false),
                    ];
                    let m = memory.check_many(&checks).await.unwrap();
                    assert_eq!(m, redis.check_many(&checks).await.unwrap(), "{at} stacked");
                    let s = state.check_many(&checks).await.unwrap();
                    assert_eq!(m[0], s[0], "{at} stacked");
                }
                4 if leases => {
                    let (min, max) = (rng.random_range(1..3), rng.random_range(3..6));
                    let m = memory.acquire(key, policy, min, max).await.unwrap();
                    let r = redis.acquire(key, policy, min, max).await.unwrap();
                    let s = state.acquire(key, policy, min, max).await.unwrap();
                    assert_eq!((m.granted, m.decision), (r.granted, r.decision), "{at}");
                    assert_eq!(m, s, "{at} acquire");
                    grants.push((key, which, m));
                }
                5 if !grants.is_empty() => {
                    let (key, which, grant) = grants.swap_remove(rng.random_range(0..grants.len()));
                    let unused = rng.random_range(0..=grant.granted);
                    let policy = &policies[which];
                    let m = memory.release(key, policy, unused, &grant).await.unwrap();
                    let r = redis.release(key, policy, unused, &grant).await.unwrap();
                    let s = state.release(key, policy, unused, &grant).await.unwrap();
                    assert_eq!((m, m), (r, s), "{at} release");
                }
                _ => {
                    let cost = rng.random_range(1..4);
                    let m = memory.check(key, policy, cost).await.unwrap();
                    assert_eq!(m, redis.check(key, policy, cost).await.unwrap(), "{at}");
                    assert_eq!(m, state.check(key, policy, cost).await.unwrap(), "{at}");
                    rescaled_denials += usize::from(!m.allowed && which > 0);
                }
            }
        }
        assert!(rescaled_denials > 20, "{algorithm}: {rescaled_denials}");
    }
}

/// A client that used 3 of a plan of 20, moved to a plan of 5 in the same window, gets 2 more
/// on every store and algorithm; moved to a plan of 2, none.
#[tokio::test]
async fn a_lowered_quota_lets_no_extra_request_through_on_any_store() {
    let url = support::shared_redis_url();
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(1_700_000_000_000_000);
        let redis = RedisStore::from_url(&url)
            .unwrap()
            .prefix(support::unique_prefix("lowered"))
            .with_clock(clock.clone());
        let memory = MemoryStore::with_clock(clock.clone());
        let state = StateBackedStore::atomic(Map::default()).with_clock(clock.clone());
        let ten = Duration::from_secs(10);
        let rule = Policy::new("plan", Quota::new(5, ten).unwrap(), algorithm).unwrap();
        let plan = |n| {
            let quota = Quota::new(n, ten).unwrap();
            Policy::new("plan", quota, algorithm)
                .unwrap()
                .kept_as(&rule)
        };
        let (pro, two) = (plan(20), plan(2));
        for (name, key) in [("memory", "m"), ("redis", "r"), ("state", "s")] {
            let check = |policy: &Policy| {
                let policy = policy.clone();
                let (memory, redis, state) = (&memory, &redis, &state);
                async move {
                    match name {
                        "memory" => memory.check(key, &policy, 1).await.unwrap(),
                        "redis" => redis.check(key, &policy, 1).await.unwrap(),
                        _ => state.check(key, &policy, 1).await.unwrap(),
                    }
                }
            };
            for _ in 0..3 {
                assert!(check(&pro).await.allowed, "{algorithm} {name}");
            }
            let allowed = [check(&rule).await, check(&rule).await, check(&rule).await];
            let seen: Vec<bool> = allowed.iter().map(|d| d.allowed).collect();
            assert_eq!(seen, [true, true, false], "{algorithm} {name}: 3 of 5 used");
            assert!(
                !check(&two).await.allowed,
                "{algorithm} {name}: 5 of 2 used"
            );
        }
    }
}
