//! Plain counters (`Policy::with_plain_counter`) on a real Redis and memcached: the keys,
//! values and commands of envoyproxy/ratelimit (cited per test), counters a reference instance
//! left counted, and the memory store's decisions for the same history in every charging mode.

use std::time::Duration;

use deadpool_redis::redis::{self, Commands};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::support;
use crate::clock::ManualClock;
use crate::engine::{Ask, Charging, Engine};
use crate::store::{MemoryStore, Policy, RedisStore, Store, StoreError};
use crate::{Algorithm, Quota};

/// 2023-11-14T22:14:15.5Z: 15.5 s into a minute (whose window opened at 1_700_000_040).
const NOW: u64 = 1_700_000_055_500_000;

fn plain(limit: u32, seconds: u64) -> Policy {
    let quota = Quota::new(limit, Duration::from_secs(seconds)).unwrap();
    Policy::new(format!("rls.{seconds}s"), quota, Algorithm::FixedWindow)
        .unwrap()
        .with_plain_counter()
        .unwrap()
}

fn engine(store: impl Store) -> Engine {
    Engine::builder().store(store).build().unwrap()
}

/// Each decision's (allowed, remaining).
fn answers(decisions: &[crate::store::Decision]) -> Vec<(bool, u64)> {
    decisions.iter().map(|d| (d.allowed, d.remaining)).collect()
}

/// Charging every hit, a request's counters are the reference's keys
/// (`src/limiter/cache_key.go`: the client key, then `(now / divider) * divider`), plain
/// integers with a TTL of one unit, sent `INCRBY` + `EXPIRE` each in one pipeline
/// (`src/redis/fixed_cache_impl.go` lines 35-38, 160-204): no script. A denial is the count
/// `INCRBY` returned past the limit (`src/limiter/base_limiter.go` line 104).
#[tokio::test]
async fn every_hit_is_incrby_and_expire_in_the_references_keys() {
    let server = support::RedisServer::start();
    let mut conn = support::redis_connection(&server.url());
    let clock = ManualClock::new(NOW);
    let store = RedisStore::from_url(&server.url())
        .unwrap()
        .with_clock(clock.clone());
    let engine = engine(store);
    let (minute, second) = (plain(3, 60), plain(2, 1));
    let asks = [
        Ask::new("edge_remote_address_10.0.0.1_", &minute, 1),
        Ask::new("edge_path_/api_", &second, 1),
    ];
    let mut got = Vec::new();
    for _ in 0..4 {
        got.push(answers(
            &engine.decide(&asks, Charging::EveryHit).await.unwrap(),
        ));
    }
    assert_eq!(
        got,
        [
            vec![(true, 2), (true, 1)],
            vec![(true, 1), (true, 0)],
            vec![(true, 0), (false, 0)],
            vec![(false, 0), (false, 0)],
        ]
    );
    for (command, calls) in [("incrby", 8), ("expire", 8), ("evalsha", 0), ("get", 0)] {
        assert_eq!(
            support::command_calls(&mut conn, command),
            calls,
            "{command}"
        );
    }
    let count: u64 = conn.get("edge_remote_address_10.0.0.1_1700000040").unwrap();
    assert_eq!(count, 4);
    let count: u64 = conn.get("edge_path_/api_1700000055").unwrap();
    assert_eq!(count, 4);
    let ttl: i64 = conn.ttl("edge_remote_address_10.0.0.1_1700000040").unwrap();
    assert!((59..=60).contains(&ttl), "{ttl}");
    let ttl: i64 = conn.ttl("edge_path_/api_1700000055").unwrap();
    assert_eq!(ttl, 1);
}

/// Counters a reference instance left, seeded by hand (`SET key count`, as its `INCRBY`
/// leaves them), are counted on: per unit, the key's window is `(now / divider) * divider`
/// with the reference's dividers (`src/utils/utilities.go` lines 20-39: a month is 30 days, a
/// year 365).
#[tokio::test]
async fn counters_a_reference_instance_left_are_counted_per_unit() {
    let url = support::shared_redis_url();
    let mut conn = support::redis_connection(&url);
    let clock = ManualClock::new(NOW);
    let store = RedisStore::from_url(&url)
        .unwrap()
        .with_clock(clock.clone());
    let engine = engine(store);
    let now = NOW / 1_000_000;
    for divider in [1, 60, 3_600, 86_400, 604_800, 2_592_000, 31_536_000] {
        let client = format!("{}_unit_{divider}_", support::unique_prefix("seeded"));
        let key = format!("{client}{}", now / divider * divider);
        let _: () = conn.set_ex(&key, 98, divider.max(2)).unwrap();
        let policy = plain(100, divider);
        let ask = [Ask::new(&client, &policy, 1)];
        let first = engine.decide(&ask, Charging::EveryHit).await.unwrap();
        let second = engine.decide(&ask, Charging::EveryHit).await.unwrap();
        let third = engine.decide(&ask, Charging::EveryHit).await.unwrap();
        assert_eq!(
            [answers(&first), answers(&second), answers(&third)],
            [vec![(true, 1)], vec![(true, 0)], vec![(false, 0)]],
            "{divider}"
        );
        let count: u64 = conn.get(&key).unwrap();
        assert_eq!(count, 101, "{divider}");
    }
}

/// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: the counters are read first in a pipeline of
/// `GET`s (`fixed_cache_impl.go` lines 117-158), then only those that would pass their limit
/// are charged when one would (`getHitsAddend`, lines 44-72; the reference's own test,
/// `test/redis/fixed_cache_impl_test.go` lines 730-746: counters at 13 of 15 and 13 of 14,
/// 2 hits each: the first OK with 2 left and still 13, the second charged to 15 and over).
#[tokio::test]
async fn stopping_when_over_reads_the_counters_first() {
    let server = support::RedisServer::start();
    let mut conn = support::redis_connection(&server.url());
    let clock = ManualClock::new(NOW);
    let store = RedisStore::from_url(&server.url())
        .unwrap()
        .with_clock(clock.clone());
    let engine = engine(store);
    let (fifteen, fourteen) = (plain(15, 86_400), plain(14, 86_400));
    let window = NOW / 1_000_000 / 86_400 * 86_400;
    for key in ["d_key4_v_", "d_key5_v_"] {
        let _: () = conn.set(format!("{key}{window}"), 13).unwrap();
    }
    let asks = [
        Ask::new("d_key4_v_", &fifteen, 2),
        Ask::new("d_key5_v_", &fourteen, 2),
    ];
    let decided = engine
        .decide(&asks, Charging::StopWhenOverLimit)
        .await
        .unwrap();
    // The first "as that limit alone would decide it": allowed, 0 left after its 2.
    assert_eq!(answers(&decided), [(true, 0), (false, 1)]);
    for (command, calls) in [("get", 2), ("incrby", 2), ("expire", 2), ("evalsha", 0)] {
        assert_eq!(
            support::command_calls(&mut conn, command),
            calls,
            "{command}"
        );
    }
    let counts: Vec<u64> = ["d_key4_v_", "d_key5_v_"]
        .iter()
        .map(|k| conn.get(format!("{k}{window}")).unwrap())
        .collect();
    assert_eq!(counts, [13, 15]);
}

/// The same history gives the same decisions on Redis (pipelines, or the script where one
/// atomic step is needed) as on the memory store, in every charging mode, plain counters
/// alone and beside another algorithm, with looks among them.
#[tokio::test]
async fn redis_decides_plain_counters_as_memory_does() {
    let url = support::shared_redis_url();
    for charging in [
        Charging::EveryHit,
        Charging::StopWhenOverLimit,
        Charging::AllowedOnly,
    ] {
        for mixed in [false, true] {
            let clock = ManualClock::new(NOW);
            let memory = engine(MemoryStore::with_clock(clock.clone()));
            let redis = engine(
                RedisStore::from_url(&url)
                    .unwrap()
                    .with_clock(clock.clone()),
            );
            let prefix = support::unique_prefix("plain-diff");
            let (a, b) = (plain(5, 2), plain(3, 1));
            let other = match mixed {
                true => Policy::new("g", Quota::per_second(4).unwrap(), Algorithm::Gcra).unwrap(),
                false => plain(4, 60),
            };
            let keys = [
                format!("{prefix}_a_"),
                format!("{prefix}_b_"),
                prefix.clone(),
            ];
            let mut rng = SmallRng::seed_from_u64(u64::from(mixed) * 7 + charging as u64);
            for step in 0..120 {
                clock.advance(Duration::from_millis(rng.random_range(0..150)));
                let costs: [u32; 3] = std::array::from_fn(|_| rng.random_range(0..3));
                let mut asks = vec![
                    Ask::new(&keys[0], &a, costs[0]),
                    Ask::new(&keys[1], &b, costs[1]).blocking(rng.random_bool(0.8)),
                    Ask::new(&keys[2], &other, costs[2].max(1)),
                ];
                if step % 5 == 4 {
                    // The same counter twice: the second sees what the first took.
                    asks.push(Ask::new(&keys[0], &a, 1));
                }
                let want = memory.decide(&asks, charging).await.unwrap();
                let got = redis.decide(&asks, charging).await.unwrap();
                assert_eq!(got, want, "{charging:?}, mixed {mixed}, step {step}");
            }
        }
    }
}

/// A store given a per-second store keeps the plain counters of one-second policies there
/// (the reference's `REDIS_PERSECOND`: `fixed_cache_impl.go` lines 173-186), and everything
/// else (other periods, other algorithms) in the main store.
#[tokio::test]
async fn one_second_counters_live_in_the_per_second_store() {
    let (main, fast) = (support::RedisServer::start(), support::RedisServer::start());
    let clock = ManualClock::new(NOW);
    let store = RedisStore::from_url(&main.url())
        .unwrap()
        .per_second(RedisStore::from_url(&fast.url()).unwrap())
        .with_clock(clock.clone());
    let engine = engine(store);
    let (second, minute) = (plain(3, 1), plain(3, 60));
    let gcra = Policy::new("g", Quota::per_second(3).unwrap(), Algorithm::Gcra).unwrap();
    for charging in [
        Charging::EveryHit,
        Charging::StopWhenOverLimit,
        Charging::AllowedOnly,
    ] {
        let asks = [
            Ask::new("d_s_", &second, 1),
            Ask::new("d_m_", &minute, 1),
            Ask::new("g", &gcra, 1),
        ];
        let decided = engine.decide(&asks, charging).await.unwrap();
        assert!(decided.iter().all(|d| d.allowed), "{charging:?}");
    }
    let keys = |url: &str| {
        let mut conn = support::redis_connection(url);
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
        keys.sort();
        keys
    };
    assert_eq!(keys(&fast.url()), ["d_s_1700000055"]);
    let main_keys = keys(&main.url());
    assert_eq!(main_keys.len(), 2, "{main_keys:?}");
    assert_eq!(main_keys[0], "d_m_1700000040");
    assert!(
        main_keys[1].starts_with("tollgate:g:gcra:"),
        "{main_keys:?}"
    );
    let mut fast_conn = support::redis_connection(&fast.url());
    let count: u64 = fast_conn.get("d_s_1700000055").unwrap();
    assert_eq!(count, 3);
}

/// A plain counter is only a count: its policy takes no block or lease, and a store asked to
/// block one says it cannot (a reset still forgets the window's count).
#[tokio::test]
async fn a_plain_counter_is_only_a_count() {
    let url = support::shared_redis_url();
    let policy = plain(2, 60);
    assert_eq!(
        policy.clone().with_block_for(Duration::from_secs(5)),
        policy
    );
    assert!(policy
        .clone()
        .with_lease(crate::rules::Lease::Auto)
        .is_err());
    let blocked = Policy::new("b", Quota::per_minute(2).unwrap(), Algorithm::FixedWindow)
        .unwrap()
        .with_block_for(Duration::from_secs(5));
    assert!(blocked.with_plain_counter().is_err());
    let odd = Policy::new(
        "o",
        Quota::new(2, Duration::from_millis(1_500)).unwrap(),
        Algorithm::FixedWindow,
    )
    .unwrap();
    assert!(odd.with_plain_counter().is_err());
    let clock = ManualClock::new(NOW);
    let store = RedisStore::from_url(&url).unwrap().with_clock(clock);
    let key = format!("{}_", support::unique_prefix("plain-only"));
    assert!(store.check(&key, &policy, 2).await.unwrap().allowed);
    assert!(!store.peek(&key, &policy, 1).await.unwrap().allowed);
    assert!(matches!(
        store.block(&key, &policy, Duration::from_secs(1)).await,
        Err(StoreError::Unsupported("block"))
    ));
    store.reset(&key, &policy).await.unwrap();
    assert!(store.peek(&key, &policy, 2).await.unwrap().allowed);
}

/// On memcached a plain counter is the reference's key, a decimal count made by an increment
/// that adds the counter when it has none (`src/memcached/cache_impl.go` lines 153-192); one a
/// reference instance left is counted on, and every hit stays counted.
#[cfg(feature = "memcached")]
#[tokio::test]
async fn memcached_counts_in_the_references_keys() {
    use crate::store::MemcachedStore;
    use async_memcached::AsciiProtocol;
    use tollgate_test_kit::memcached::MemcachedServer;

    let server = MemcachedServer::start();
    let clock = ManualClock::new(NOW);
    let store = MemcachedStore::from_url(&server.url())
        .unwrap()
        .with_clock(clock);
    let engine = engine(store.clone());
    let policy = plain(3, 60);
    let seeded = format!("{}_seeded_", support::unique_prefix("mc-plain"));
    let fresh = format!("{}_fresh_", support::unique_prefix("mc-plain"));
    // A reference instance's counter: the `add` of its hits, as gomemcache sends it.
    let mut reference = async_memcached::Client::new(format!("tcp://{}", server.address()))
        .await
        .unwrap();
    (reference.add(format!("{seeded}1700000040"), "2", Some(60), None))
        .await
        .unwrap();
    let asks = [Ask::new(&seeded, &policy, 1), Ask::new(&fresh, &policy, 1)];
    let first = engine.decide(&asks, Charging::EveryHit).await.unwrap();
    let second = engine.decide(&asks, Charging::EveryHit).await.unwrap();
    assert_eq!(answers(&first), [(true, 0), (true, 2)]);
    assert_eq!(answers(&second), [(false, 0), (true, 1)]);
    for (key, count) in [(seeded, "4"), (fresh, "2")] {
        let value = reference.get(format!("{key}1700000040")).await.unwrap();
        let data = value.and_then(|v| v.data).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&data).trim(), count, "{key}");
    }
}
