//! The memory store's own tests; the stores' shared ones are in `store/tests/`.

use std::sync::Barrier;
use std::time::Duration;

use super::key_hasher::KeyHasher;
use super::shard::lock;
use super::table::{PolicyTable, MIN_SHRINK_CAPACITY};
use super::*;
use crate::algorithm::Algorithm;
use crate::clock::ManualClock;
use crate::quota::Quota;
use crate::store::check::Check;

fn policy(name: &str, limit: u32, algorithm: Algorithm) -> Policy {
    Policy::new(name, Quota::per_minute(limit).unwrap(), algorithm).unwrap()
}

#[test]
fn memory_follows_live_keys_not_every_key_ever_seen() {
    let clock = ManualClock::new(1_000_000);
    let store = MemoryStore::with_clock(clock.clone());
    // Each key's state lasts 100 ms; a new key every 10 µs: about 10,000 live at a time.
    let policy = Policy::new("p", Quota::per_second(10).unwrap(), Algorithm::Gcra).unwrap();
    let mut most = 0;
    for i in 0..300_000 {
        clock.advance(Duration::from_micros(10));
        assert!(store.check_now(&i.to_string(), &policy, 1).allowed);
        most = most.max(store.len());
    }
    // Sweeping lags at most one shard's worth of decisions behind: about twice the live set.
    assert!(most < 25_000, "{most} keys tracked at once");
    clock.advance(Duration::from_secs(1));
    for i in 0..20_000 {
        store.check_now(&format!("again-{i}"), &policy, 1);
    }
    assert!(
        store.len() < 25_000,
        "{} keys after everything expired",
        store.len()
    );
}

#[test]
fn max_keys_caps_what_is_tracked() {
    let store = MemoryStore::with_clock(ManualClock::new(0)).max_keys(1_000);
    let shards = store.inner.shards.len();
    let policy = policy("p", 10, Algorithm::Gcra);
    for i in 0..10_000 {
        assert!(store.check_now(&i.to_string(), &policy, 1).allowed);
    }
    assert!(store.len() <= 1_000 + shards, "{} tracked", store.len());
    // A tracked key keeps its state while others come and go in other shards.
    let hot = policy.clone();
    for _ in 0..10 {
        store.check_now("hot", &hot, 1);
    }
    assert!(!store.check_now("hot", &hot, 1).allowed);
}

#[test]
fn a_rounded_up_interval_makes_a_second_burst_one_period_later_wait_2_us() {
    // 3/s: T = ceil(1 s / 3) = 333,334 µs, so a full bucket of 3 refills in 1,000,002 µs,
    // 2 µs later than the exact rate. docs/algorithms.md states these figures.
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::TokenBucket,
        Algorithm::LeakyBucket,
    ] {
        let clock = ManualClock::new(1_000_000_000);
        let store = MemoryStore::with_clock(clock.clone());
        let p = Policy::new("p", "3/s".parse().unwrap(), algorithm).unwrap();
        for _ in 0..3 {
            assert!(store.check_now("k", &p, 1).allowed, "{algorithm}");
        }
        assert!(!store.check_now("k", &p, 1).allowed, "{algorithm}");
        // One period after the burst, a second burst of 3 loses its last request by 2 µs.
        clock.advance(Duration::from_secs(1));
        assert!(store.check_now("k", &p, 1).allowed, "{algorithm}");
        assert!(store.check_now("k", &p, 1).allowed, "{algorithm}");
        let third = store.check_now("k", &p, 1);
        assert!(!third.allowed, "{algorithm}");
        assert_eq!(
            third.retry_after,
            Some(Duration::from_micros(2)),
            "{algorithm}"
        );
        clock.advance(Duration::from_micros(1));
        assert!(!store.check_now("k", &p, 1).allowed, "{algorithm}");
        clock.advance(Duration::from_micros(1));
        assert!(store.check_now("k", &p, 1).allowed, "{algorithm}");
    }
}

/// Room in every shard's table, in keys.
fn capacity(store: &MemoryStore) -> usize {
    store.inner.shards.iter().map(|s| lock(s).capacity()).sum()
}

#[test]
fn a_flood_of_keys_gives_its_room_back_once_expired() {
    let clock = ManualClock::new(1_000_000);
    let store = MemoryStore::with_clock(clock.clone());
    let policy = Policy::new("p", "5/10s".parse().unwrap(), Algorithm::Gcra).unwrap();
    for i in 0..200_000 {
        assert!(store.check_now(&format!("flood-{i}"), &policy, 1).allowed);
    }
    let peak = capacity(&store);
    assert!(peak >= 200_000, "room for {peak} keys");

    // Every flood key has expired (5/10s keeps at most 10 s of state). One decision per
    // shard is far fewer than the keys each holds, yet sweeps it: every key its last sweep
    // kept has expired.
    clock.advance(Duration::from_secs(10));
    let now = store.inner.clock.now();
    for shard in store.inner.shards.iter() {
        lock(shard).count_decision(now, &store.inner.hasher);
    }
    assert_eq!(store.len(), 0);
    let after = capacity(&store);
    assert!(
        after <= store.inner.shards.len() * MIN_SHRINK_CAPACITY,
        "room for {after} keys after the flood (peak {peak})"
    );
}

#[test]
fn a_roomy_table_shrinks_to_twice_its_keys_and_then_holds_its_size() {
    const S: u64 = 1_000_000;
    let hasher = KeyHasher::default();
    // One request per second, two at once: a key's state lasts 1 s per request.
    let quota = Quota::per_second(1).unwrap().burst(2).unwrap();
    let policy = Policy::new("p", quota, Algorithm::Gcra).unwrap();
    let mut table = PolicyTable::new(&policy);
    let check = |table: &mut PolicyTable, key: &str, now: u64| {
        let hash = hasher.hash(key.as_bytes());
        assert!(table.check(key, hash, &policy, now, 1, &hasher).allowed);
    };
    for i in 0..10_000 {
        check(&mut table, &i.to_string(), S);
    }
    let full = table.capacity();
    // 1,000 keys used again (they now last until 3 s), the rest expire at 2 s.
    for i in 0..1_000 {
        check(&mut table, &i.to_string(), 2 * S - 1);
    }
    assert_eq!(table.sweep(2 * S, &hasher), Some(3 * S));
    assert_eq!(table.len(), 1_000);
    table.shrink_if_roomy(&hasher);
    let shrunk = table.capacity();
    assert!(
        (2_000..full / 2).contains(&shrunk),
        "room for {shrunk} keys, was {full}"
    );
    // No thrash: the same keys again change nothing, and twice as many fit without growing.
    table.shrink_if_roomy(&hasher);
    assert_eq!(table.capacity(), shrunk);
    for i in 0..1_000 {
        check(&mut table, &format!("new-{i}"), 2 * S);
    }
    assert_eq!(table.capacity(), shrunk);
}

fn check<'a>(key: &'a str, policy: &'a Policy, blocking: bool) -> Check<'a> {
    Check {
        key,
        policy,
        cost: 1,
        blocking,
        charge: false,
    }
}

#[test]
fn many_keys_sharing_shards_lock_each_shard_once() {
    let store = MemoryStore::with_clock(ManualClock::new(1_000_000));
    let p = policy("p", 1, Algorithm::FixedWindow);
    // More keys than shards: some shards hold several of them. Locking one twice would
    // deadlock (or panic) rather than return.
    let keys: Vec<String> = (0..2 * store.inner.shards.len() + 1)
        .map(|i| format!("k{i}"))
        .collect();
    let checks: Vec<Check<'_>> = keys.iter().map(|k| check(k, &p, true)).collect();
    let first = store.check_many_now(&checks);
    assert!(first.iter().all(|d| d.allowed && d.remaining == 0));
    assert_eq!(store.len(), keys.len());
    // Now every key is spent: all denied, and nothing more is tracked.
    assert!(store.check_many_now(&checks).iter().all(|d| !d.allowed));
    assert_eq!(store.len(), keys.len());
}

#[test]
fn a_stacked_check_of_many_keys_takes_time_linear_in_them() {
    let store = MemoryStore::with_clock(ManualClock::new(1_000_000));
    let p = policy("p", 10, Algorithm::Gcra);
    let n = 30_000;
    let keys: Vec<String> = (0..n).map(|i| format!("k{i}")).collect();
    // Every key twice: the second check of a key sees what the first consumed.
    let checks: Vec<Check<'_>> = (keys.iter().chain(&keys))
        .map(|k| Check::new(k, &p, 3))
        .collect();
    let started = std::time::Instant::now();
    let decisions = store.check_many_now(&checks);
    let took = started.elapsed();
    let remaining: Vec<u64> = decisions.iter().map(|d| d.remaining).collect();
    assert_eq!(remaining[..n], vec![7; n][..]);
    assert_eq!(remaining[n..], vec![4; n][..]);
    assert_eq!(store.len(), n);
    // Linear work takes about 0.5 s here (unoptimized, on a busy machine); quadratic work (a
    // scan of the pending keys per check) took 18 s.
    assert!(took < Duration::from_secs(6), "{took:?}");
}

#[test]
fn opposite_orders_on_many_threads_do_not_deadlock() {
    let store = MemoryStore::with_clock(ManualClock::new(1_000_000));
    let p = policy("p", 100_000, Algorithm::Gcra);
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    let forward: Vec<Check<'_>> = keys.iter().map(|k| check(k, &p, true)).collect();
    let backward: Vec<Check<'_>> = forward.iter().rev().copied().collect();
    let barrier = Barrier::new(8);
    std::thread::scope(|s| {
        for t in 0..8 {
            let checks = if t % 2 == 0 { &forward } else { &backward };
            let (store, barrier) = (&store, &barrier);
            s.spawn(move || {
                barrier.wait();
                for _ in 0..200 {
                    store.check_many_now(checks);
                }
            });
        }
    });
    // 8 × 200 requests, each consumed once from every key.
    let d = store.check_now("k0", &p, 1);
    assert_eq!(d.remaining, 100_000 - 1_601);
}

#[test]
fn a_repeated_check_sees_the_first_and_a_blocked_one_consumes_nothing() {
    let clock = ManualClock::new(1_000_000);
    let store = MemoryStore::with_clock(clock.clone());
    let p = policy("p", 3, Algorithm::SlidingWindowLog);
    let twice = [check("k", &p, true), check("k", &p, true)];
    let remaining = |ds: Vec<Decision>| -> Vec<(bool, u64)> {
        ds.iter().map(|d| (d.allowed, d.remaining)).collect()
    };
    // As two single checks would decide: the second sees the first.
    assert_eq!(
        remaining(store.check_many_now(&twice)),
        [(true, 2), (true, 1)]
    );
    // One left: the first takes it, the second is denied, so nothing is consumed.
    assert_eq!(
        remaining(store.check_many_now(&twice)),
        [(true, 0), (false, 0)]
    );
    assert_eq!(remaining(vec![store.check_now("k", &p, 1)]), [(true, 0)]);
    // Once the window has passed, the key is whole again.
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        remaining(store.check_many_now(&twice)),
        [(true, 2), (true, 1)]
    );
}

#[test]
fn a_peek_decides_as_a_check_would_and_consumes_nothing() {
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(1_000_000);
        let store = MemoryStore::with_clock(clock.clone());
        let p = policy("p", 3, algorithm);
        assert_eq!(store.peek_now("k", &p, 1), store.check_now("k", &p, 1));
        // Peeking again and again changes nothing: the next check sees one used.
        for _ in 0..5 {
            let peek = store.peek_now("k", &p, 2);
            assert!(peek.allowed && peek.remaining == 0, "{algorithm}: {peek:?}");
        }
        assert!(store.check_now("k", &p, 2).allowed, "{algorithm}");
        let denied = store.peek_now("k", &p, 1);
        assert_eq!(denied, store.check_now("k", &p, 1), "{algorithm}");
        assert!(!denied.allowed, "{algorithm}");
    }
    // A key never seen is not tracked by a peek.
    let store = MemoryStore::new();
    store.peek_now("new", &policy("p", 3, Algorithm::Gcra), 1);
    assert!(store.is_empty());
}

#[test]
fn a_denied_new_key_is_not_tracked_and_a_blocked_request_stores_nothing() {
    let store = MemoryStore::with_clock(ManualClock::new(1_000_000));
    let small = policy("small", 1, Algorithm::TokenBucket);
    let big = policy("big", 10, Algorithm::Gcra);
    let heavy = Check {
        key: "k",
        policy: &small,
        cost: 2,
        blocking: true,
        charge: false,
    };
    let ds = store.check_many_now(&[check("k", &big, true), heavy]);
    assert!(ds[0].allowed && !ds[1].allowed);
    assert!(store.is_empty());
}

/// A lone check that charges every hit and blocks nothing (the `rls` service's default) is
/// decided without the stacked bookkeeping; it decides as the stacked path decides the same
/// check beside another key: charged while over, a new key tracked, a live block obeyed.
#[test]
fn a_lone_charged_check_decides_as_the_stacked_path_does() {
    for algorithm in Algorithm::ALL {
        let clock = ManualClock::new(1_000_000);
        let (alone, beside) = (
            MemoryStore::with_clock(clock.clone()),
            MemoryStore::with_clock(clock.clone()),
        );
        let (p, other) = (policy("p", 3, algorithm), policy("other", 100, algorithm));
        let charged = |key, policy, cost| Check {
            key,
            policy,
            cost,
            blocking: false,
            charge: true,
        };
        let run = |cost: u32| {
            let one = alone.check_many_now(&[charged("k", &p, cost)]);
            let two = beside.check_many_now(&[charged("k", &p, cost), charged("o", &other, 1)]);
            assert_eq!(one.len(), 1, "{algorithm}");
            assert_eq!(one[0], two[0], "{algorithm}, cost {cost}");
            one[0]
        };
        for _ in 0..3 {
            assert!(run(1).allowed, "{algorithm}");
        }
        // Over: denied, and still charged, alike.
        assert!(!run(1).allowed, "{algorithm}");
        assert!(!run(2).allowed, "{algorithm}");
        assert_eq!(alone.len(), 1, "{algorithm}");
        clock.advance(Duration::from_secs(60));
        run(2);
        run(0);
        // A live block denies and charges nothing.
        alone.block_now("k", &p, 5_000_000);
        beside.block_now("k", &p, 5_000_000);
        assert!(!run(1).allowed, "{algorithm}");
        clock.advance(Duration::from_secs(6));
        run(1);
    }
}

mod leases {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;
    use crate::quota::Quota;

    #[tokio::test]
    async fn the_design_example_leaves_the_tat_after_what_others_consumed() {
        // T = 100 ms. A lease of 10 at 0, 1 unit from elsewhere at 20T, 5 returned at 20T.
        let clock = ManualClock::new(0);
        let store = MemoryStore::with_clock(clock.clone());
        let policy = Policy::new(
            "p",
            Quota::per_second(10).unwrap().burst(20).unwrap(),
            Algorithm::Gcra,
        )
        .unwrap();
        let grant = store.acquire("k", &policy, 1, 10).await.unwrap();
        assert_eq!((grant.granted, grant.mark), (10, 1_000_000));
        assert_eq!(grant.decision.remaining, 10);
        clock.set(2_000_000);
        assert!(store.check("k", &policy, 1).await.unwrap().allowed);
        assert_eq!(store.release("k", &policy, 5, &grant).await.unwrap(), 0);
        // TAT = 21T: the bucket is whole 100 ms later.
        let d = store.check_now("k", &policy, 1);
        assert_eq!(d.reset_after, Duration::from_millis(200));
        assert_eq!(d.remaining, 18);
    }
}

#[tokio::test]
async fn slots_are_counted_per_client_and_limit_and_never_below_zero() {
    let store = MemoryStore::new();
    let slow = InFlight::new("slow", 2).unwrap();
    let other = InFlight::new("other", 1).unwrap();
    let allowed = |d: Decision| (d.allowed, d.remaining);
    assert_eq!(allowed(store.take_slot_now("k", &slow)), (true, 1));
    assert_eq!(allowed(store.take_slot_now("k", &slow)), (true, 0));
    assert_eq!(allowed(store.take_slot_now("k", &slow)), (false, 0));
    // Another client, another limit: slots of their own.
    assert!(store.take_slot_now("j", &slow).allowed);
    assert!(store.take_slot_now("k", &other).allowed);
    assert!(store.give_back_slot_now("k", &slow, 0));
    assert_eq!(store.slots_held("k", &slow), 1);
    store.give_back_slot("k", &slow, 0).await.unwrap();
    // A slot given back twice does not make room for a third.
    assert!(store.give_back_slot_now("k", &slow, 0));
    assert_eq!(store.slots_held("k", &slow), 0);
    assert_eq!(store.slots_held("j", &slow), 1);
    store.renew_slots(&[]).await.unwrap();
}
