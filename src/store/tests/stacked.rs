//! Stacked limits (`Store::check_many`) in both built-in stores: identical decisions, exact
//! atomicity (a blocked request consumes nothing anywhere, a shadow denial blocks nothing),
//! one script call per decision, and exact counts under concurrency.

use super::support;

use std::sync::Barrier;
use std::time::{Duration, Instant};

use crate::decision::Decision;
use crate::store::check::Check;
use crate::store::contract::StoreExt;
use crate::store::{MemoryStore, RedisStore, Store};
use crate::{clock::ManualClock, store::Policy, Algorithm, Quota};
use deadpool_redis::redis;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A fixed instant well inside a day, a minute and a second, for the exact tests.
const T0: u64 = 1_700_000_000_000_000;

fn check<'a>(key: &'a str, policy: &'a Policy, blocking: bool) -> Check<'a> {
    Check::new(key, policy, 1).blocking(blocking)
}

fn summary(decisions: &[Decision]) -> Vec<(bool, u64)> {
    decisions.iter().map(|d| (d.allowed, d.remaining)).collect()
}

/// The policies the differential test stacks: every algorithm, short and long periods,
/// bursts where they apply.
fn policies() -> Vec<Policy> {
    use Algorithm::*;
    let specs: [(Algorithm, Quota); 10] = [
        (Gcra, Quota::per_second(10).unwrap().burst(20).unwrap()),
        (Gcra, Quota::new(5, Duration::from_secs(10)).unwrap()),
        (
            TokenBucket,
            Quota::new(4, Duration::from_secs(3))
                .unwrap()
                .burst(2)
                .unwrap(),
        ),
        (
            LeakyBucket,
            Quota::new(7, Duration::from_millis(700)).unwrap(),
        ),
        (FixedWindow, Quota::new(5, Duration::from_secs(10)).unwrap()),
        (
            FixedWindowFromFirst,
            Quota::new(3, Duration::from_secs(1)).unwrap(),
        ),
        (
            SlidingWindowLog,
            Quota::new(6, Duration::from_secs(2)).unwrap(),
        ),
        (
            SlidingWindow,
            Quota::new(5, Duration::from_secs(10)).unwrap(),
        ),
        (SlidingWindow, Quota::per_minute(20).unwrap()),
        (FixedWindow, Quota::per_minute(1).unwrap()),
    ];
    specs
        .into_iter()
        .enumerate()
        .map(|(i, (algorithm, quota))| Policy::new(format!("p{i}"), quota, algorithm).unwrap())
        .collect()
}

const STEPS: usize = 3_000;

#[tokio::test]
async fn stacked_decisions_are_identical_in_memory_and_redis() {
    let seeds = [0x57ac_4ed1_u64, 0x0dd_ba11, 0x5eed_0003];
    let (matched, blocked, repeated, _) = differential(&policies(), &seeds, false).await;
    assert_eq!(matched, STEPS);
    // Both outcomes, and the same limit twice in one request, were exercised well.
    assert!(
        blocked > STEPS / 10 && blocked < STEPS * 9 / 10,
        "{blocked} blocked"
    );
    assert!(repeated > 50, "{repeated} with a repeated limit");
    eprintln!("{matched} stacked decisions matched ({blocked} blocked, {repeated} repeated)");
}

/// The same, with half the policies blocking a client for 1.5 s after a denial (`block_for`):
/// only the denying limit's key is blocked, and both stores agree on every block.
#[tokio::test]
async fn stacked_blocks_are_identical_in_memory_and_redis() {
    let policies: Vec<Policy> = policies()
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            if i % 2 == 0 {
                p.with_block_for(Duration::from_millis(1_500))
            } else {
                p
            }
        })
        .collect();
    let seeds = [0xb10c_0001_u64, 0xb10c_0002, 0xb10c_0003];
    let (matched, _, _, blocks) = differential(&policies, &seeds, false).await;
    assert_eq!(matched, STEPS);
    assert!(blocks > STEPS / 10, "{blocks} decisions by a block");
}

/// Charged while over (`Check::charge`, for Envoy's rate limit service): every algorithm
/// records a denied check's cost alike in memory and in Redis (`State::charge` and the
/// scripts' ARGV[7] = "c"), in blocked and unblocked requests, the same limit twice included,
/// and a look (a peek of cost 0) after each request answers alike.
#[tokio::test]
async fn charged_decisions_and_looks_are_identical_in_memory_and_redis() {
    let seeds = [0xc4a2_0001_u64, 0xc4a2_0002, 0xc4a2_0003];
    let (matched, blocked, repeated, _) = differential(&policies(), &seeds, true).await;
    assert_eq!(matched, STEPS);
    assert!(blocked > STEPS / 10, "{blocked} blocked");
    assert!(repeated > STEPS / 30, "{repeated} repeated");
}

/// Runs `STEPS` random stacked decisions over `policies` (a third per seed) in both stores
/// and checks that they agree; with `charge`, most checks are charged while over, requests
/// may have one check, and every key's look is compared after each request. Returns how many matched, how many requests were blocked,
/// how many named a limit twice, and how many decisions were a block's (nothing left, and
/// retry when whole again).
async fn differential(
    policies: &[Policy],
    seeds: &[u64],
    charge: bool,
) -> (usize, usize, usize, usize) {
    let url = support::shared_redis_url();
    let start = Instant::now();
    let (mut matched, mut blocked, mut repeated, mut blocks) = (0, 0, 0, 0);
    for &seed in seeds {
        let mut rng = SmallRng::seed_from_u64(seed);
        let clock = ManualClock::new(0);
        let redis = RedisStore::from_url(&url)
            .unwrap()
            .prefix(support::unique_prefix("stacked-diff"))
            .with_clock(clock.clone());
        let memory = MemoryStore::with_clock(clock.clone());
        // Manual time runs ahead of real time, never behind it, so a key that Redis has
        // expired (by real time) has also expired in the memory store.
        let mut offset = T0;
        for step in 0..STEPS / 3 {
            offset += match rng.random_range(0..10) {
                0..=3 => 0,
                4..=6 => rng.random_range(0..100_000),
                7..=8 => rng.random_range(0..1_000_000),
                _ => rng.random_range(0..20_000_000),
            };
            clock.set(offset + start.elapsed().as_micros() as u64);
            let n = rng.random_range(if charge { 1 } else { 2 }..=3);
            let checks: Vec<Check<'_>> = (0..n)
                .map(|_| {
                    // Few keys and policies: the same limit twice in one request happens too.
                    let key = ["a", "b", "c"][rng.random_range(0..3)];
                    let policy = &policies[rng.random_range(0..policies.len())];
                    let cost = if rng.random_bool(0.05) {
                        rng.random_range(1..25)
                    } else {
                        rng.random_range(1..3)
                    };
                    Check::new(key, policy, cost)
                        .blocking(rng.random_bool(0.75))
                        .charge(charge && rng.random_bool(0.8))
                })
                .collect();
            let m = memory.check_many(&checks).await.unwrap();
            let r = redis.check_many(&checks).await.unwrap();
            let what: Vec<String> = checks
                .iter()
                .map(|c| {
                    format!(
                        "{}/{}({}) cost {}{}",
                        c.policy.name(),
                        c.key,
                        c.policy.algorithm(),
                        c.cost,
                        if c.blocking { "" } else { " shadow" }
                    )
                })
                .collect();
            assert_eq!(m, r, "seed {seed:#x} step {step}: {what:?}");
            if charge {
                // Real time went on: Redis may have expired a key since (see above).
                clock.set(offset + start.elapsed().as_micros() as u64);
                for c in &checks {
                    let look_m = memory.peek(c.key, c.policy, 0).await.unwrap();
                    let look_r = redis.peek(c.key, c.policy, 0).await.unwrap();
                    assert_eq!(look_m, look_r, "seed {seed:#x} step {step} look: {what:?}");
                }
            }
            matched += 1;
            blocked += usize::from(checks.iter().zip(&m).any(|(c, d)| c.blocking && !d.allowed));
            repeated += usize::from(checks.iter().enumerate().any(|(i, a)| {
                checks[..i]
                    .iter()
                    .any(|b| a.key == b.key && a.policy.name() == b.policy.name())
            }));
            blocks += m
                .iter()
                .filter(|d| !d.allowed && d.remaining == 0 && d.retry_after == Some(d.reset_after))
                .count();
        }
    }
    (matched, blocked, repeated, blocks)
}

/// A burst limit (2/min) on `keys[0]` and a daily one (3/day) on `keys[1]` (the same key, or
/// keys in two cluster slots), in `store` at `clock`'s time.
async fn burst_and_daily_are_atomic(
    store: &impl StoreExt,
    clock: &ManualClock,
    label: &str,
    keys: [&str; 2],
) {
    clock.set(T0);
    let burst = Policy::new("burst", Quota::per_minute(2).unwrap(), Algorithm::Gcra).unwrap();
    let daily = Policy::new("daily", Quota::per_day(3).unwrap(), Algorithm::FixedWindow).unwrap();
    let both = [check(keys[0], &burst, true), check(keys[1], &daily, true)];
    let ask = async || summary(&store.check_many(&both).await.unwrap());
    assert_eq!(ask().await, [(true, 1), (true, 2)], "{label}");
    assert_eq!(ask().await, [(true, 0), (true, 1)], "{label}");
    // The burst limit denies: the daily one would allow (1 left, 0 after) but counts nothing.
    assert_eq!(ask().await, [(false, 0), (true, 0)], "{label}");
    assert_eq!(ask().await, [(false, 0), (true, 0)], "{label}");
    // A minute on, the burst is whole again and the daily limit still has exactly 1 left.
    clock.set(T0 + 60_000_000);
    assert_eq!(ask().await, [(true, 1), (true, 0)], "{label}");
    // Vice versa: the daily limit denies, and the burst limit keeps its 1 left.
    assert_eq!(ask().await, [(true, 0), (false, 0)], "{label}");
    assert_eq!(ask().await, [(true, 0), (false, 0)], "{label}");
    let alone = store.check(keys[0], &burst, 1).await.unwrap();
    assert_eq!((alone.allowed, alone.remaining), (true, 0), "{label}");
}

/// A blocking 2/min limit on `keys[0]` with a shadow (non-blocking) 1/min limit on `keys[1]`.
async fn shadow_denials_block_nothing(
    store: &impl StoreExt,
    clock: &ManualClock,
    label: &str,
    keys: [&str; 2],
) {
    clock.set(T0);
    let enforced = Policy::new("enforced", Quota::per_minute(2).unwrap(), Algorithm::Gcra).unwrap();
    let shadow = Policy::new("shadow", Quota::per_minute(1).unwrap(), Algorithm::Gcra).unwrap();
    let both = [
        check(keys[0], &enforced, true),
        check(keys[1], &shadow, false),
    ];
    let ask = async || store.check_many(&both).await.unwrap();
    let d = ask().await;
    assert_eq!(summary(&d), [(true, 1), (true, 0)], "{label}");
    assert_eq!(d[1].reset_after, Duration::from_secs(60), "{label}");
    // The shadow limit denies, yet the enforced one counts the request...
    let d = ask().await;
    assert_eq!(summary(&d), [(true, 0), (false, 0)], "{label}");
    // ...and the shadow limit's own denial is not consumed: still whole in 60 s, not 120 s.
    assert_eq!(d[1].reset_after, Duration::from_secs(60), "{label}");
    assert_eq!(d[1].retry_after, Some(Duration::from_secs(60)), "{label}");
    let d = ask().await;
    assert_eq!(summary(&d), [(false, 0), (false, 0)], "{label}");
    assert_eq!(d[0].retry_after, Some(Duration::from_secs(30)), "{label}");
    assert_eq!(d[1].reset_after, Duration::from_secs(60), "{label}");
    // A minute on both are whole: nothing denied was ever counted.
    clock.set(T0 + 60_000_000);
    let d = ask().await;
    assert_eq!(summary(&d), [(true, 1), (true, 0)], "{label}");
}

/// A burst limit (2/min, then blocked for 5 min) on `keys[0]` and an hourly log (100/h, then
/// blocked for an hour) on `keys[1]`: only the denying limit blocks; then `block`, `refund`
/// and `reset` of one limit's client, seen by the next stacked decision.
async fn only_the_denying_limit_blocks(
    store: &impl StoreExt,
    clock: &ManualClock,
    label: &str,
    keys: [&str; 2],
) {
    clock.set(T0);
    let burst = Policy::new(
        "burst-block",
        Quota::per_minute(2).unwrap(),
        Algorithm::Gcra,
    )
    .unwrap()
    .with_block_for(Duration::from_secs(300));
    let hourly = Policy::new(
        "hourly-block",
        Quota::per_hour(100).unwrap(),
        Algorithm::SlidingWindowLog,
    )
    .unwrap()
    .with_block_for(Duration::from_secs(3600));
    let both = [check(keys[0], &burst, true), check(keys[1], &hourly, true)];
    let ask = async || store.check_many(&both).await.unwrap();
    assert_eq!(summary(&ask().await), [(true, 1), (true, 99)], "{label}");
    assert_eq!(summary(&ask().await), [(true, 0), (true, 98)], "{label}");
    // The burst limit denies and blocks for 5 minutes; the hourly one counts nothing.
    let d = ask().await;
    assert_eq!(summary(&d), [(false, 0), (true, 97)], "{label}");
    assert_eq!(d[0].retry_after, Some(Duration::from_secs(300)), "{label}");
    assert_eq!(d[0].reset_after, Duration::from_secs(300), "{label}");
    // A minute on the burst would be whole: the block holds, and is not made longer.
    clock.set(T0 + 60_000_000);
    let d = ask().await;
    assert_eq!(summary(&d), [(false, 0), (true, 97)], "{label}");
    assert_eq!(d[0].retry_after, Some(Duration::from_secs(240)), "{label}");
    clock.set(T0 + 300_000_000);
    assert_eq!(summary(&ask().await), [(true, 1), (true, 97)], "{label}");

    // A block of the hourly client: the request is denied by it, and nothing is counted.
    store
        .block(keys[1], &hourly, Duration::from_secs(10))
        .await
        .unwrap();
    let d = ask().await;
    assert_eq!(summary(&d), [(true, 0), (false, 0)], "{label}");
    assert_eq!(d[1].retry_after, Some(Duration::from_secs(10)), "{label}");
    // A refund leaves the block; a reset lifts it, and the log starts afresh.
    store.refund(keys[1], &hourly, 5).await.unwrap();
    assert_eq!(summary(&ask().await), [(true, 0), (false, 0)], "{label}");
    store.reset(keys[1], &hourly).await.unwrap();
    assert_eq!(summary(&ask().await), [(true, 0), (true, 99)], "{label}");
    // A refund of the burst client: one back.
    store.refund(keys[0], &burst, 1).await.unwrap();
    assert_eq!(summary(&ask().await), [(true, 0), (true, 98)], "{label}");
}

#[tokio::test]
async fn a_blocked_request_consumes_nothing_in_either_store() {
    let url = support::shared_redis_url();
    for run in 0..2 {
        let clock = ManualClock::new(T0);
        let memory = MemoryStore::with_clock(clock.clone());
        let redis = RedisStore::from_url(&url)
            .unwrap()
            .prefix(support::unique_prefix("stacked-atomic"))
            .with_clock(clock.clone());
        if run == 0 {
            burst_and_daily_are_atomic(&memory, &clock, "memory", ["k", "k"]).await;
            shadow_denials_block_nothing(&memory, &clock, "memory", ["k", "k"]).await;
            only_the_denying_limit_blocks(&memory, &clock, "memory", ["k", "k"]).await;
        } else {
            burst_and_daily_are_atomic(&redis, &clock, "redis", ["k", "k"]).await;
            shadow_denials_block_nothing(&redis, &clock, "redis", ["k", "k"]).await;
            only_the_denying_limit_blocks(&redis, &clock, "redis", ["k", "k"]).await;
        }
    }
}

#[tokio::test]
async fn a_blocked_request_consumes_nothing_on_a_cluster_in_one_slot_or_across_masters() {
    let cluster = support::RedisCluster::start();
    // A second client key on another master than `k`'s.
    let k_master = cluster.master_of("{k}");
    let other = (0..)
        .map(|i| format!("ip-{i}"))
        .find(|key| cluster.master_of(&format!("{{{key}}}")) != k_master)
        .unwrap();
    for (run, keys) in [["k", "k"], ["k", other.as_str()]].into_iter().enumerate() {
        let clock = ManualClock::new(T0);
        let store = RedisStore::cluster(&cluster.urls())
            .unwrap()
            .prefix(format!("run{run}"))
            .with_clock(clock.clone());
        let label = format!("cluster {keys:?}");
        burst_and_daily_are_atomic(&store, &clock, &label, keys).await;
        shadow_denials_block_nothing(&store, &clock, &label, keys).await;
        only_the_denying_limit_blocks(&store, &clock, &label, keys).await;
    }
}

#[tokio::test]
async fn one_evalsha_per_stacked_decision() {
    let server = support::RedisServer::start();
    let store = RedisStore::from_url(&server.url()).unwrap();
    let mut conn = support::redis_connection(&server.url());
    let policies = policies();
    let checks = |i: usize| -> Vec<Check<'_>> {
        (0..2 + i % 2)
            .map(|j| {
                check(
                    ["x", "y"][j % 2],
                    &policies[(i + 3 * j) % policies.len()],
                    j != 1,
                )
            })
            .collect()
    };
    // Load the stacked script once, so that the count below is of steady-state decisions.
    store.check_many(&checks(0)).await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    for i in 0..50 {
        assert_eq!(store.check_many(&checks(i)).await.unwrap().len(), 2 + i % 2);
    }
    assert_eq!(support::command_calls(&mut conn, "evalsha"), 50);
    for other in ["eval", "script|load", "script|exists", "ping", "multi"] {
        assert_eq!(support::command_calls(&mut conn, other), 0, "{other} sent");
    }
    // Every key written has a TTL.
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    assert!(!keys.is_empty());
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
        assert!(ttl > 0, "{key} has PTTL {ttl}");
    }
}

#[tokio::test]
async fn script_flush_between_stacked_decisions_still_decides_correctly() {
    let url = support::shared_redis_url();
    let store = RedisStore::from_url(&url)
        .unwrap()
        .prefix(support::unique_prefix("stacked-flush"));
    let mut conn = support::redis_connection(&url);
    for algorithm in Algorithm::ALL {
        let small = Policy::new("small", Quota::per_minute(3).unwrap(), algorithm).unwrap();
        let big = Policy::new("big", Quota::per_hour(100).unwrap(), Algorithm::Gcra).unwrap();
        let key = algorithm.as_str();
        let both = [check(key, &small, true), check(key, &big, true)];
        let mut seen = Vec::new();
        for _ in 0..5 {
            let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
            seen.push(summary(&store.check_many(&both).await.unwrap()));
        }
        assert_eq!(
            seen,
            [
                [(true, 2), (true, 99)],
                [(true, 1), (true, 98)],
                [(true, 0), (true, 97)],
                [(false, 0), (true, 96)],
                [(false, 0), (true, 96)],
            ],
            "{algorithm}"
        );
    }
}

/// What is left of `policy` for `key`, without consuming any: a request larger than the whole
/// quota is always denied, and a denial reports what remains.
async fn left(store: &impl StoreExt, key: &str, policy: &Policy) -> u64 {
    let d = store
        .check(key, policy, policy.quota().limit() + 1)
        .await
        .unwrap();
    assert!(!d.allowed);
    d.remaining
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn concurrent_stacked_requests_count_exactly() {
    let url = support::shared_redis_url();
    for algorithm in Algorithm::ALL {
        let small = Policy::new("ten", Quota::per_minute(10).unwrap(), algorithm).unwrap();
        let big = Policy::new("thousand", Quota::per_minute(1000).unwrap(), algorithm).unwrap();
        let clock = ManualClock::new(T0);

        // Memory: 64 threads released at once.
        let memory = MemoryStore::with_clock(clock.clone());
        let barrier = Barrier::new(64);
        let allowed = std::thread::scope(|s| {
            let handles: Vec<_> = (0..64)
                .map(|_| {
                    let (memory, barrier, small, big) = (&memory, &barrier, &small, &big);
                    s.spawn(move || {
                        barrier.wait();
                        let ds = memory
                            .check_many_now(&[check("one", small, true), check("one", big, true)]);
                        ds.iter().all(|d| d.allowed)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(|&a| a)
                .count()
        });
        assert_eq!(allowed, 10, "memory {algorithm}");
        assert_eq!(left(&memory, "one", &big).await, 990, "memory {algorithm}");

        // Redis: 64 tasks over four stores (four connections) sharing one prefix.
        let prefix = support::unique_prefix("stacked-conc");
        let stores: Vec<RedisStore> = (0..4)
            .map(|_| {
                RedisStore::from_url(&url)
                    .unwrap()
                    .prefix(prefix.clone())
                    .with_clock(clock.clone())
            })
            .collect();
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let store = stores[i % 4].clone();
                let (small, big) = (small.clone(), big.clone());
                tokio::spawn(async move {
                    let ds = store
                        .check_many(&[check("one", &small, true), check("one", &big, true)])
                        .await
                        .unwrap();
                    ds.iter().all(|d| d.allowed)
                })
            })
            .collect();
        let mut allowed = 0;
        for task in tasks {
            allowed += usize::from(task.await.unwrap());
        }
        assert_eq!(allowed, 10, "redis {algorithm}");
        assert_eq!(
            left(&stores[0], "one", &big).await,
            990,
            "redis {algorithm}"
        );
    }
}
