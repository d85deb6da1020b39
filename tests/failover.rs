//! Redis failures: killed, hung, restarted, absent at start. Each test owns its redis-server.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use support::RedisServer;
use tollgate::store::{CircuitBreaker, RedisStore};
use tollgate::{key, OnStoreError, Quota, RateLimitLayer};

/// An app limited through the Redis at `url`, with a breaker that probes again quickly.
async fn app(url: &str, quota: Quota, on_error: OnStoreError) -> SocketAddr {
    let layer = RateLimitLayer::builder()
        .quota(quota)
        .key(key::Global)
        .store(RedisStore::from_url(url).unwrap())
        .on_store_error(on_error)
        .store_timeout(Duration::from_millis(50))
        .circuit_breaker(
            CircuitBreaker::default()
                .failures(3)
                .open_for(Duration::from_millis(100), Duration::from_millis(200)),
        )
        .build()
        .unwrap();
    support::serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await
}

struct Reply {
    status: u16,
    limited: bool,
    retry_after: Option<String>,
    took: Duration,
}

async fn get_once(addr: SocketAddr) -> Reply {
    let started = Instant::now();
    let r = support::client()
        .get(format!("http://{addr}/"))
        .send()
        .await
        .unwrap();
    Reply {
        status: r.status().as_u16(),
        limited: r.headers().contains_key("ratelimit"),
        retry_after: r
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned()),
        took: started.elapsed(),
    }
}

/// Sends requests until one carries rate-limit headers (the store answered again).
async fn until_limiting(addr: SocketAddr, within: Duration) -> Reply {
    let deadline = Instant::now() + within;
    loop {
        let r = get_once(addr).await;
        if r.limited {
            return r;
        }
        assert!(Instant::now() < deadline, "limiting did not resume");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn redis_killed_mid_traffic_lets_everything_through_with_allow() {
    let mut redis = RedisServer::start();
    let addr = app(&redis.url(), Quota::per_minute(1000), OnStoreError::Allow).await;
    for _ in 0..10 {
        let r = get_once(addr).await;
        assert_eq!((r.status, r.limited), (200, true));
    }
    redis.stop();
    for _ in 0..30 {
        let r = get_once(addr).await;
        // Fail open, and no rate-limit numbers the limiter does not know.
        assert_eq!((r.status, r.limited), (200, false));
    }
}

#[tokio::test]
async fn hung_redis_costs_one_timeout_then_nothing_and_recovers() {
    let redis = RedisServer::start();
    let addr = app(&redis.url(), Quota::per_minute(1000), OnStoreError::Allow).await;
    assert!(get_once(addr).await.limited);
    redis.pause();
    // Until the breaker opens (3 failures), each request waits for the 50 ms timeout, no more.
    for _ in 0..3 {
        let r = get_once(addr).await;
        assert_eq!((r.status, r.limited), (200, false));
        assert!(r.took < Duration::from_millis(250), "waited {:?}", r.took);
    }
    // Breaker open: requests no longer wait for Redis. (Probes every 100-200 ms still wait
    // 50 ms, so look at the median.)
    let mut took: Vec<Duration> = Vec::new();
    for _ in 0..21 {
        let r = get_once(addr).await;
        assert_eq!((r.status, r.limited), (200, false));
        took.push(r.took);
    }
    took.sort();
    assert!(took[10] < Duration::from_millis(5), "median {:?}", took[10]);
    redis.resume();
    let r = until_limiting(addr, Duration::from_secs(3)).await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn limiting_resumes_after_redis_restarts_empty() {
    let mut redis = RedisServer::start();
    let addr = app(&redis.url(), Quota::per_minute(5), OnStoreError::Allow).await;
    assert_eq!(get_once(addr).await.status, 200);
    redis.restart(); // same port, no data, no scripts
    until_limiting(addr, Duration::from_secs(3)).await;
    let statuses: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            v.push(get_once(addr).await.status);
        }
        v
    };
    // One request counted already by until_limiting: 4 more allowed, then denied.
    assert_eq!(statuses, [200, 200, 200, 200, 429]);
}

#[tokio::test]
async fn fallback_to_memory_keeps_limiting_while_redis_is_dead() {
    let redis = RedisServer::not_started();
    let addr = app(
        &redis.url(),
        Quota::per_minute(3),
        OnStoreError::FallbackToMemory,
    )
    .await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let r = get_once(addr).await;
        statuses.push(r.status);
        assert!(r.limited, "the local limiter reports its numbers");
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
}

#[tokio::test]
async fn deny_answers_503_with_retry_after_while_redis_is_down() {
    let redis = RedisServer::not_started();
    let addr = app(&redis.url(), Quota::per_minute(100), OnStoreError::Deny).await;
    for _ in 0..5 {
        let r = get_once(addr).await;
        assert_eq!(r.status, 503);
        assert_eq!(r.retry_after.as_deref(), Some("1"));
    }
}

#[tokio::test]
async fn app_started_before_redis_begins_limiting_once_redis_is_up() {
    let mut redis = RedisServer::not_started();
    let addr = app(&redis.url(), Quota::per_minute(3), OnStoreError::Allow).await;
    for _ in 0..5 {
        assert_eq!(get_once(addr).await.status, 200);
    }
    redis.launch();
    until_limiting(addr, Duration::from_secs(3)).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(get_once(addr).await.status);
    }
    assert_eq!(statuses, [200, 200, 429]);
}
