//! The Redis store beside the memory store: identical decisions for the same history
//! (checks, blocks, resets, refunds), algorithms kept apart, and state the store cannot read
//! left alone, alone or stacked.

use std::time::{Duration, Instant};

use deadpool_redis::redis;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::support;
use crate::store::check::Check;
use crate::store::contract::StoreExt;
use crate::store::{MemoryStore, RedisStore, Store};
use crate::{
    clock::ManualClock,
    store::{Policy, StoreError},
    Algorithm, Quota,
};

/// How much further than real time the manual clock moves at each step, in µs.
///
/// Redis expires a key by real time, the memory store by the manual clock, which is set
/// before each step's decisions: a thread stalled between setting it and Redis's call sees
/// real time move further than the clock did, and may find a key expired in Redis that the
/// memory store still counts. A step's lead keeps the clock ahead by more than such a stall
/// on a loaded machine (one was seen to fail the test once without it).
const STEP_LEAD_US: u64 = 1_000;

/// How far the histories' own time moves at a step, in µs, for a quota of `period` µs: often
/// not at all, else within a quarter period, a period or three, and always [`STEP_LEAD_US`].
fn step_ahead(rng: &mut SmallRng, period: u64) -> u64 {
    STEP_LEAD_US
        + match rng.random_range(0..10) {
            0..=3 => 0,
            4..=6 => rng.random_range(0..period / 4 + 1),
            7..=8 => rng.random_range(0..period + 1),
            _ => rng.random_range(0..3 * period),
        }
}

/// Quotas the differential test runs each algorithm with (burst only where it applies).
fn quotas(algorithm: Algorithm) -> Vec<Quota> {
    let mut quotas = vec![
        Quota::new(5, Duration::from_secs(10)).unwrap(),
        Quota::new(3, Duration::from_secs(1)).unwrap(),
        Quota::new(7, Duration::from_millis(700)).unwrap(),
        Quota::per_minute(1).unwrap(),
    ];
    if matches!(
        algorithm,
        Algorithm::Gcra | Algorithm::TokenBucket | Algorithm::LeakyBucket
    ) {
        quotas.push(Quota::per_second(10).unwrap().burst(20).unwrap());
        quotas.push(
            Quota::new(4, Duration::from_secs(3))
                .unwrap()
                .burst(1)
                .unwrap(),
        );
    }
    if algorithm == Algorithm::SlidingWindowLog {
        // Enough entries in the log for the search of a denied request's retry to take steps.
        quotas.push(Quota::new(60, Duration::from_millis(400)).unwrap());
    }
    quotas
}

#[tokio::test]
async fn redis_and_memory_give_identical_decisions() {
    let url = support::shared_redis_url();
    let start = Instant::now();
    let clock = ManualClock::new(0);
    for algorithm in Algorithm::ALL {
        for (q, quota) in quotas(algorithm).into_iter().enumerate() {
            let seed = 0x7011_6a7e ^ (algorithm as u64) << 8 ^ q as u64;
            let mut rng = SmallRng::seed_from_u64(seed);
            let prefix = support::unique_prefix("diff");
            let redis = RedisStore::from_url(&url)
                .unwrap()
                .prefix(prefix)
                .with_clock(clock.clone());
            let memory = MemoryStore::with_clock(clock.clone());
            let policy = Policy::new("p", quota, algorithm).unwrap();
            let period = quota.period().as_micros() as u64;
            // Manual time runs ahead of real time, never behind it, so a key that Redis has
            // expired (by real time) has also expired in the memory store.
            let mut offset: u64 = 1_700_000_000_000_000;
            for step in 0..600 {
                offset += step_ahead(&mut rng, period);
                clock.set(offset + start.elapsed().as_micros() as u64);
                let key = ["a", "b", "c"][rng.random_range(0..3)];
                let cost = if rng.random_bool(0.05) {
                    rng.random_range(1..30)
                } else {
                    rng.random_range(1..4)
                };
                let m = memory.check(key, &policy, cost).await.unwrap();
                let r = redis.check(key, &policy, cost).await.unwrap();
                assert_eq!(
                    m, r,
                    "{algorithm} {quota} seed {seed:#x} step {step} key {key} cost {cost}"
                );
            }
        }
    }
}

/// The same history as above, with blocks after a denial (`block_for`), and now and then a
/// reset, a block or a refund of a client: both stores still decide alike, step for step.
#[tokio::test]
async fn redis_and_memory_agree_on_blocks_resets_and_refunds() {
    let url = support::shared_redis_url();
    let start = Instant::now();
    let clock = ManualClock::new(0);
    let (mut blocked, mut refunded) = (0, 0);
    for algorithm in Algorithm::ALL {
        for (q, quota) in quotas(algorithm).into_iter().enumerate() {
            let seed = 0xb10c_0000 ^ (algorithm as u64) << 8 ^ q as u64;
            let mut rng = SmallRng::seed_from_u64(seed);
            let redis = RedisStore::from_url(&url)
                .unwrap()
                .prefix(support::unique_prefix("diff-ops"))
                .with_clock(clock.clone());
            let memory = MemoryStore::with_clock(clock.clone());
            let period = quota.period().as_micros() as u64;
            let block_for = Duration::from_micros(period / 2 + 1);
            let policy = Policy::new("p", quota, algorithm)
                .unwrap()
                .with_block_for(block_for);
            let mut offset: u64 = 1_700_000_000_000_000;
            for step in 0..400 {
                offset += step_ahead(&mut rng, period);
                clock.set(offset + start.elapsed().as_micros() as u64);
                let key = ["a", "b", "c"][rng.random_range(0..3)];
                let at = format!("{algorithm} {quota} seed {seed:#x} step {step} key {key}");
                match rng.random_range(0..20) {
                    0 => {
                        memory.reset(key, &policy).await.unwrap();
                        redis.reset(key, &policy).await.unwrap();
                    }
                    1 => {
                        let d = Duration::from_micros(rng.random_range(0..2 * period));
                        memory.block(key, &policy, d).await.unwrap();
                        redis.block(key, &policy, d).await.unwrap();
                    }
                    2..=4 => {
                        let n = rng.random_range(1..4);
                        memory.refund(key, &policy, n).await.unwrap();
                        redis.refund(key, &policy, n).await.unwrap();
                        refunded += 1;
                    }
                    _ => {
                        let cost = rng.random_range(1..4);
                        let m = memory.check(key, &policy, cost).await.unwrap();
                        let r = redis.check(key, &policy, cost).await.unwrap();
                        assert_eq!(m, r, "{at} cost {cost}");
                        if !m.allowed && m.remaining == 0 && m.retry_after == Some(m.reset_after) {
                            blocked += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(
        blocked > 100 && refunded > 100,
        "{blocked} blocked, {refunded} refunds"
    );
}

#[tokio::test]
async fn changing_a_policys_algorithm_starts_its_clients_afresh() {
    let url = support::shared_redis_url();
    let store = RedisStore::from_url(&url)
        .unwrap()
        .prefix(support::unique_prefix("switch"));
    // One policy name and one client; the algorithm changes as on a rules reload, through all
    // seven and back to the first.
    let policies =
        Algorithm::ALL.map(|a| Policy::new("api", Quota::per_minute(2).unwrap(), a).unwrap());
    for policy in &policies {
        let mut seen = Vec::new();
        for _ in 0..3 {
            let d = store.check("client", policy, 1).await.unwrap();
            seen.push((d.allowed, d.remaining));
        }
        assert_eq!(
            seen,
            [(true, 1), (true, 0), (false, 0)],
            "{}",
            policy.algorithm()
        );
    }
    // Each algorithm kept its own state: the first one's quota is still spent.
    let d = store.check("client", &policies[0], 1).await.unwrap();
    assert!(!d.allowed);
    let stacked = [Check::new("client", &policies[1], 1); 2];
    let ds = store.check_many(&stacked).await.unwrap();
    assert!(ds.iter().all(|d| !d.allowed));
}

/// `Err(StoreError::KeyState)`, or a panic saying what came instead.
fn assert_key_state(result: Result<impl std::fmt::Debug, StoreError>, what: &str) {
    match result {
        Err(StoreError::KeyState(e)) => assert!(!e.to_string().is_empty()),
        other => panic!("{what}: expected StoreError::KeyState, got {other:?}"),
    }
}

#[tokio::test]
async fn state_the_store_cannot_read_is_that_keys_problem_and_is_left_alone() {
    let url = support::shared_redis_url();
    let store = RedisStore::from_url(&url)
        .unwrap()
        .prefix(support::unique_prefix("unreadable"));
    let mut conn = support::redis_connection(&url);
    for algorithm in Algorithm::ALL {
        let policy = Policy::new("p", Quota::per_minute(5).unwrap(), algorithm).unwrap();
        let key = store.state_key(&policy, "k");
        // Another type than the script keeps (WRONGTYPE), then a value of its type that is
        // not its state.
        let other_type = if algorithm == Algorithm::SlidingWindowLog {
            redis::cmd("SET").arg(&key).arg("5").clone()
        } else {
            redis::cmd("ZADD").arg(&key).arg(1).arg("5").clone()
        };
        let garbage = if algorithm == Algorithm::SlidingWindowLog {
            redis::cmd("ZADD").arg(&key).arg(1).arg("garbage").clone()
        } else {
            redis::cmd("SET").arg(&key).arg("garbage").clone()
        };
        for (what, write) in [("another type", other_type), ("garbage", garbage)] {
            let _: () = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
            let _: () = write.query(&mut conn).unwrap();
            let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut conn).unwrap();
            let what = format!("{algorithm}, {what}");
            assert_key_state(store.check("k", &policy, 1).await, &what);
            // Stacked with a healthy limit: the whole decision fails the same way.
            let healthy = Policy::new("healthy", Quota::per_minute(5).unwrap(), algorithm).unwrap();
            let checks =
                [("k", &healthy), ("k", &policy)].map(|(key, policy)| Check::new(key, policy, 1));
            assert_key_state(store.check_many(&checks).await, &format!("{what}, stacked"));
            // Never overwritten: it may be another program's data.
            let after: Vec<u8> = redis::cmd("DUMP").arg(&key).query(&mut conn).unwrap();
            assert_eq!(after, dump, "{what}");
        }
        let _: () = redis::cmd("DEL").arg(&key).query(&mut conn).unwrap();
        assert!(store.check("k", &policy, 1).await.unwrap().allowed);
    }
}
