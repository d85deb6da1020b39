//! The cache of denials against a real redis-server: it changes no decision, and a flooded key
//! stops reaching Redis.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate::store::{DenialCache, MemoryStore, RedisStore};
use tollgate::{key, Algorithm, ManualClock, Policy, Quota, RateLimitLayer, Store};

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

/// An app limited globally at `per_minute` through the Redis at `url`, with or without the
/// cache of denials.
async fn app(url: &str, per_minute: u32, cache: bool) -> (RateLimitLayer<RedisStore>, SocketAddr) {
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(per_minute).unwrap())
        .key(key::Global)
        .store(RedisStore::from_url(url).unwrap())
        .denial_cache(cache)
        // Not about timeouts: a loaded machine must not make a request fail open.
        .store_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let addr = support::serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer.clone()),
    )
    .await;
    (layer, addr)
}

#[tokio::test]
async fn a_flooded_key_stops_reaching_redis() {
    let server = support::RedisServer::start();
    let (layer, addr) = app(&server.url(), 5, true).await;
    let client = support::client();
    let mut statuses = Vec::new();
    let mut retry_after = Vec::new();
    let started = std::time::Instant::now();
    for _ in 0..200 {
        let r = client.get(format!("http://{addr}/")).send().await.unwrap();
        statuses.push(r.status().as_u16());
        if let Some(v) = r.headers().get("retry-after") {
            retry_after.push(v.to_str().unwrap().parse::<u64>().unwrap());
        }
    }
    assert_eq!(statuses.iter().filter(|&&s| s == 200).count(), 5);
    assert_eq!(statuses.iter().filter(|&&s| s == 429).count(), 195);
    // Cached answers keep the store's Retry-After: 12 s per request at 5/min, rounded up,
    // counting down as the run's time passes (a loaded machine may take over a second).
    let elapsed = started.elapsed().as_secs();
    assert_eq!(retry_after[0], 12);
    assert!(
        retry_after.windows(2).all(|w| w[1] <= w[0]) && retry_after[194] + elapsed + 1 >= 12,
        "{retry_after:?} in {elapsed} s"
    );
    // 5 allowed and the first denial went to Redis; the other 194 were answered locally.
    let mut conn = support::redis_connection(&server.url());
    // (The first call also sent EVAL after NOSCRIPT, on this new server.)
    assert_eq!(support::command_calls(&mut conn, "evalsha"), 6);
    assert_eq!(layer.denial_cache_hits(), 194);
}

#[tokio::test]
async fn the_cache_can_be_turned_off() {
    let server = support::RedisServer::start();
    let (layer, addr) = app(&server.url(), 2, false).await;
    let client = support::client();
    for _ in 0..10 {
        client.get(format!("http://{addr}/")).send().await.unwrap();
    }
    let mut conn = support::redis_connection(&server.url());
    assert_eq!(support::command_calls(&mut conn, "evalsha"), 10);
    assert_eq!(layer.denial_cache_hits(), 0);
}
