//! The cache of denials against a real redis-server, through the layer: a flooded key stops
//! reaching Redis (that it changes no decision is tested beside the stores).

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use tollgate::store::RedisStore;
use tollgate::{key, Quota, RateLimitLayer};

/// An app limited globally at `per_minute` through the Redis at `url`, with or without the
/// cache of denials.
async fn app(url: &str, per_minute: u32, cache: bool) -> (RateLimitLayer, SocketAddr) {
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
    assert_eq!(layer.control().stats().denial_cache_hits, 194);
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
    assert_eq!(layer.control().stats().denial_cache_hits, 0);
}
