//! The memcached store on a real memcached, through what only the crate calls (leases,
//! refunds, charged hits): the same answers as the memory store on seeded histories, and the
//! aligned fixed window's counters exact across instances under concurrency.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate_test_kit::memcached::shared_memcached_url;
use tollgate_test_kit::unique_prefix;

use super::counters::counter_key;
use super::MemcachedStore;
use crate::algorithm::{window_start, Algorithm};
use crate::clock::{Clock, ManualClock};
use crate::quota::{Policy, Quota};
use crate::store::check::Check;
use crate::store::contract::{Leasing, StoreExt};
use crate::store::state::StateStore;
use crate::store::{MemoryStore, Store};

/// A store on the test binary's memcached, under a prefix of its own.
fn store(test: &str) -> MemcachedStore {
    MemcachedStore::from_url(&shared_memcached_url())
        .unwrap()
        .prefix(unique_prefix(test))
}

/// Leases taken and given back, refunds, charged hits (as `rls` sends them), blocks after a
/// denial and resets: the same answers as the memory store's on one seeded history per
/// algorithm; the aligned fixed window on its counters, the others on their state.
#[tokio::test]
async fn leases_refunds_and_charged_hits_agree_with_memory() {
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(1_700_000_000_000_000);
        let memory = MemoryStore::with_clock(clock.clone());
        let memcached = store("mc-contract").with_clock(clock.clone());
        let quota = Quota::new(8, Duration::from_secs(2)).unwrap();
        let policy = Policy::new("p", quota, algorithm).unwrap();
        let blocking = policy.clone().with_block_for(Duration::from_millis(700));
        let mut rng = SmallRng::seed_from_u64(0x3c3c ^ algorithm as u64);
        let mut granted = Vec::new();
        for step in 0..300 {
            clock.advance(Duration::from_micros(rng.random_range(0..300_000)));
            let key = ["a", "b", "c"][rng.random_range(0..3)];
            let policy = if key == "c" { &blocking } else { &policy };
            let at = format!("{algorithm} step {step} key {key}");
            let left = memory.peek(key, policy, 0).await.unwrap();
            assert_eq!(
                left,
                memcached.peek(key, policy, 0).await.unwrap(),
                "{at} peek"
            );
            match rng.random_range(0..8) {
                0 if key != "c" => {
                    let (min, max) = (rng.random_range(1..3), rng.random_range(3..6));
                    let m = memory.acquire(key, policy, min, max).await.unwrap();
                    let s = memcached.acquire(key, policy, min, max).await.unwrap();
                    assert_eq!(m, s, "{at} acquire");
                    granted.push((key, policy.clone(), m));
                }
                1 if !granted.is_empty() => {
                    let (key, policy, grant) =
                        granted.swap_remove(rng.random_range(0..granted.len()));
                    let unused = rng.random_range(0..=grant.granted);
                    let m = memory.release(key, &policy, unused, &grant).await.unwrap();
                    let s = memcached.release(key, &policy, unused, &grant).await;
                    assert_eq!(m, s.unwrap(), "{at} release");
                }
                2 => {
                    let n = rng.random_range(1..4);
                    memory.refund(key, policy, n).await.unwrap();
                    memcached.refund(key, policy, n).await.unwrap();
                }
                // The state-backed path does not charge a non-blocking check of a policy
                // with `block_for`, where the memory store does; the counters do as memory.
                3 if key != "c" || algorithm == Algorithm::FixedWindow => {
                    let cost = rng.random_range(1..5);
                    let checks = [Check::new(key, policy, cost).blocking(false).charge(true)];
                    let m = memory.check_many(&checks).await.unwrap();
                    let s = memcached.check_many(&checks).await.unwrap();
                    assert_eq!(m, s, "{at} charged {cost}");
                }
                4 if rng.random_bool(0.2) => {
                    memory.reset(key, policy).await.unwrap();
                    memcached.reset(key, policy).await.unwrap();
                }
                _ => {
                    let cost = rng.random_range(1..4);
                    let m = memory.check(key, policy, cost).await.unwrap();
                    let s = memcached.check(key, policy, cost).await.unwrap();
                    assert_eq!(m, s, "{at} cost {cost}");
                }
            }
        }
    }
}

fn fixed_window(limit: u32) -> Policy {
    let quota = Quota::per_minute(limit).unwrap();
    Policy::new("fw", quota, Algorithm::FixedWindow).unwrap()
}

/// Two stores (two instances) on one memcached, on one clock (20 s into a minute), so that
/// no window ends unless the test moves the clock.
fn two_instances(test: &str) -> ([MemcachedStore; 2], ManualClock) {
    let prefix = unique_prefix(test);
    let clock = ManualClock::new(1_700_000_000_000_000);
    let stores = [0, 1].map(|_| {
        MemcachedStore::from_url(&shared_memcached_url())
            .unwrap()
            .prefix(prefix.as_str())
            .with_clock(clock.clone())
    });
    (stores, clock)
}

/// 200 asks at once over two instances on a four-thread runtime, each of `cost`, against a
/// fixed window of 50: exactly as many admitted as fit, and what the refused ones added is
/// given back (the window has exactly the rest left).
///
/// The reference counts a window in memcached as these counters do (its
/// `src/memcached/cache_impl.go`, `increaseAsync`, lines 153-180: `Increment` by the hits,
/// on a miss `Add` with the window's expiry, on `NotStored` `Increment` again; here one `ma`
/// with `N`/`J` does all three), but it decides on a `GetMulti` made before the increment
/// (lines 113-140), so two instances can both admit the last unit; deciding on the count the
/// increment returns is what makes this exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_admit_exactly_the_limit_of_a_fixed_window_at_once() {
    for (cost, fit) in [(1, 50), (3, 16)] {
        let (stores, _) = two_instances("mc-fw-exact");
        let policy = fixed_window(50);
        let tasks: Vec<_> = (0..200)
            .map(|i| {
                let (store, policy) = (stores[i % 2].clone(), policy.clone());
                tokio::spawn(async move { store.check("k", &policy, cost).await.unwrap() })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += u32::from(task.await.unwrap().allowed);
        }
        assert_eq!(admitted, fit, "cost {cost}");
        for store in &stores {
            let left = store.peek("k", &policy, 0).await.unwrap();
            assert_eq!(left.remaining, u64::from(50 - fit * cost), "cost {cost}");
        }
    }
}

/// A request the window refuses for its cost counts against no later one, on any instance.
#[tokio::test]
async fn a_refused_cost_does_not_eat_the_window() {
    let ([a, b], clock) = two_instances("mc-fw-refused");
    let policy = fixed_window(10);
    assert_eq!(a.check("k", &policy, 7).await.unwrap().remaining, 3);
    let refused = b.check("k", &policy, 5).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.remaining, 3);
    let last = a.check("k", &policy, 3).await.unwrap();
    assert!(last.allowed);
    assert_eq!(last.remaining, 0);
    assert!(!b.check("k", &policy, 1).await.unwrap().allowed);
    // All of it in the window's counter; nothing at the state key, which only a block uses.
    let start = window_start(policy.params(), clock.now());
    let counter = counter_key(&a.state_key("", &policy), start, "k");
    assert_eq!(a.servers.counter(&counter).await.unwrap().unwrap().0, 10);
    assert_eq!(
        a.servers.get(&a.state_key("k", &policy)).await.unwrap(),
        None
    );
}

/// Charged while over (`rls` charging every hit, as the reference counts them): denied hits
/// count, up to one more quota, and a refund takes from that count.
#[tokio::test]
async fn charged_hits_count_when_denied() {
    let ([a, b], _) = two_instances("mc-fw-charged");
    let policy = fixed_window(5);
    let charged = |key| [Check::new(key, &policy, 1).blocking(false).charge(true)];
    let mut allowed = 0;
    for i in 0..8 {
        let store = [&a, &b][i % 2];
        allowed += u32::from(store.check_many(&charged("k")).await.unwrap()[0].allowed);
    }
    assert_eq!(allowed, 5);
    // 8 counted: a look is denied (past the limit), and after 2 back still nothing fits.
    assert!(!b.peek("k", &policy, 0).await.unwrap().allowed);
    a.refund("k", &policy, 2).await.unwrap();
    assert!(!b.check("k", &policy, 1).await.unwrap().allowed);
    // Not charged: the same hits leave 5 counted, and 2 back let 2 more through.
    for _ in 0..8 {
        a.check("n", &policy, 1).await.unwrap();
    }
    a.refund("n", &policy, 2).await.unwrap();
    assert!(b.check("n", &policy, 1).await.unwrap().allowed);
    assert!(b.check("n", &policy, 1).await.unwrap().allowed);
    assert!(!b.check("n", &policy, 1).await.unwrap().allowed);
    // Flooded: at most one more quota is counted, so two quotas back let one through.
    for _ in 0..30 {
        a.check_many(&charged("f")).await.unwrap();
    }
    a.refund("f", &policy, 5).await.unwrap();
    assert!(!b.check("f", &policy, 1).await.unwrap().allowed);
    a.refund("f", &policy, 1).await.unwrap();
    assert!(b.check("f", &policy, 1).await.unwrap().allowed);
}

/// Leases of a fixed window across two instances: each takes what is left, unused units come
/// back exactly, and many leases at once never grant more than the window.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_of_a_fixed_window_are_exact() {
    let ([a, b], _) = two_instances("mc-fw-lease");
    let policy = fixed_window(10);
    let first = a.acquire("k", &policy, 1, 4).await.unwrap();
    assert_eq!((first.granted, first.decision.remaining), (4, 6));
    let second = b.acquire("k", &policy, 1, 8).await.unwrap();
    assert_eq!((second.granted, second.decision.remaining), (6, 0));
    assert_eq!(a.acquire("k", &policy, 1, 1).await.unwrap().granted, 0);
    assert_eq!(b.release("k", &policy, 3, &second).await.unwrap(), 3);
    let third = a.acquire("k", &policy, 2, 5).await.unwrap();
    assert_eq!((third.granted, third.decision.remaining), (3, 0));
    // What the window had no room for was never counted.
    assert_eq!(a.peek("k", &policy, 0).await.unwrap().remaining, 0);
    assert_eq!(a.release("k", &policy, 3, &third).await.unwrap(), 3);
    assert_eq!(b.peek("k", &policy, 0).await.unwrap().remaining, 3);

    let stores = [a, b];
    let policy = fixed_window(50);
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let (store, policy) = (stores[i % 2].clone(), policy.clone());
            tokio::spawn(async move { store.acquire("many", &policy, 1, 3).await.unwrap() })
        })
        .collect();
    let mut granted = 0;
    for task in tasks {
        granted += task.await.unwrap().granted;
    }
    assert_eq!(granted, 50);
}

/// A block, set by hand or after a breach, is seen by the other instance, and forgets the
/// window's count: when it ends the client has its whole quota.
#[tokio::test]
async fn a_block_is_seen_by_every_instance() {
    let ([a, b], clock) = two_instances("mc-fw-block");
    let policy = fixed_window(3).with_block_for(Duration::from_secs(10));
    for _ in 0..3 {
        assert!(a.check("k", &policy, 1).await.unwrap().allowed);
    }
    let breach = a.check("k", &policy, 1).await.unwrap();
    assert_eq!(breach.retry_after, Some(Duration::from_secs(10)));
    let seen = b.check("k", &policy, 1).await.unwrap();
    assert!(!seen.allowed);
    assert_eq!(seen.retry_after, Some(Duration::from_secs(10)));
    // Ended: a whole quota, in the same window.
    clock.advance(Duration::from_secs(10));
    for _ in 0..3 {
        assert!(b.check("k", &policy, 1).await.unwrap().allowed);
    }
    // By hand, on the other instance; a reset ends it.
    let policy = fixed_window(3);
    b.block("h", &policy, Duration::from_secs(5)).await.unwrap();
    let blocked = a.check("h", &policy, 1).await.unwrap();
    assert_eq!(blocked.retry_after, Some(Duration::from_secs(5)));
    a.reset("h", &policy).await.unwrap();
    assert!(b.check("h", &policy, 3).await.unwrap().allowed);
}
