//! Redis failures: killed, hung, restarted, absent at start. Each test owns its redis-server.

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use support::RedisServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tollgate::store::{OnStoreError, RedisStore, StoreFailure};
use tollgate::{key, Quota, RateLimitLayer};
use tower::{Layer, ServiceExt};

/// An app limited through the Redis at `url`, with a breaker that probes again quickly.
async fn app(url: &str, quota: Quota, on_error: OnStoreError) -> SocketAddr {
    let layer = RateLimitLayer::builder()
        .quota(quota)
        .key(key::Global)
        .store(RedisStore::from_url(url).unwrap())
        .store_failure(
            StoreFailure::new(on_error)
                .timeout(Duration::from_millis(50))
                .open_after(3)
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
    let addr = app(
        &redis.url(),
        Quota::per_minute(1000).unwrap(),
        OnStoreError::Allow,
    )
    .await;
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
    let addr = app(
        &redis.url(),
        Quota::per_minute(1000).unwrap(),
        OnStoreError::Allow,
    )
    .await;
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
    let addr = app(
        &redis.url(),
        Quota::per_minute(5).unwrap(),
        OnStoreError::Allow,
    )
    .await;
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
        Quota::per_minute(3).unwrap(),
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
    let addr = app(
        &redis.url(),
        Quota::per_minute(100).unwrap(),
        OnStoreError::Deny,
    )
    .await;
    for _ in 0..5 {
        let r = get_once(addr).await;
        assert_eq!(r.status, 503);
        assert_eq!(r.retry_after.as_deref(), Some("1"));
    }
}

#[tokio::test]
async fn app_started_before_redis_begins_limiting_once_redis_is_up() {
    let mut redis = RedisServer::not_started();
    let addr = app(
        &redis.url(),
        Quota::per_minute(3).unwrap(),
        OnStoreError::Allow,
    )
    .await;
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

#[tokio::test]
async fn a_probe_dropped_by_its_client_does_not_keep_the_circuit_open() {
    let redis = RedisServer::start();
    let addr = app(
        &redis.url(),
        Quota::per_hour(1000).unwrap(),
        OnStoreError::Deny,
    )
    .await;
    assert_eq!(get_once(addr).await.status, 200);
    redis.pause();
    for _ in 0..6 {
        assert_eq!(get_once(addr).await.status, 503);
    }
    // Past the back-off (100-200 ms), the next request probes; its client gives up first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let hung_up = support::client()
        .get(format!("http://{addr}/"))
        .timeout(Duration::from_millis(20))
        .send()
        .await;
    assert!(
        hung_up.is_err(),
        "the probe should still be waiting for Redis"
    );
    redis.resume();
    // The abandoned probe is handed back: the next request probes and closes the circuit.
    let r = until_limiting(addr, Duration::from_secs(2)).await;
    assert_eq!(r.status, 200);
}

/// Clients that give up sooner than the store's timeout (a deadline of 30 ms against a store
/// timeout of 500 ms, as an Envoy filter's against a slower setting): with Redis hung no call
/// ever times out, but each one given up after waiting fails, so the circuit opens and later
/// requests are answered at once instead of each waiting out its client's deadline.
#[tokio::test]
async fn calls_given_up_by_their_clients_open_the_circuit_while_redis_hangs() {
    let redis = RedisServer::start();
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_hour(1000).unwrap())
        .key(key::Global)
        .store(RedisStore::from_url(&redis.url()).unwrap())
        .store_failure(
            StoreFailure::new(OnStoreError::Allow)
                .timeout(Duration::from_millis(500))
                .open_after(3)
                .open_for(Duration::from_secs(30), Duration::from_secs(30)),
        )
        .build()
        .unwrap();
    let service = layer.layer(crate::ok_service());
    let send = || service.clone().oneshot(http::Request::new(()));
    let deadline = Duration::from_millis(30);
    assert!(send().await.unwrap().headers().contains_key("ratelimit"));
    redis.pause();
    for _ in 0..3 {
        let given_up = tokio::time::timeout(deadline, send()).await;
        assert!(
            given_up.is_err(),
            "Redis is hung: the call should still wait"
        );
    }
    let stats = layer.control().stats();
    assert!(
        stats.circuit_open,
        "three calls given up should open the circuit"
    );
    assert_eq!(stats.store_errors, 3);
    // Open: answered at once, through and without numbers (on_store_error allow).
    let started = Instant::now();
    let response = tokio::time::timeout(deadline, send())
        .await
        .expect("answered within the client's deadline")
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(!response.headers().contains_key("ratelimit"));
    assert!(
        started.elapsed() < Duration::from_millis(20),
        "took {:?}",
        started.elapsed()
    );
}

/// A TCP proxy whose connections can be frozen: a frozen connection stays open and forwards
/// nothing more, as one whose peer went away without a reset (a host gone, a firewall that
/// forgot it). Connections opened after the freeze forward as usual.
struct FreezingProxy {
    port: u16,
    accepted: Arc<AtomicU64>,
    /// Connections numbered below this are frozen.
    frozen_below: Arc<AtomicU64>,
}

impl FreezingProxy {
    async fn start(to: u16) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (accepted, frozen_below) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (counted, frozen) = (Arc::clone(&accepted), Arc::clone(&frozen_below));
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else {
                    continue;
                };
                let number = counted.fetch_add(1, Ordering::SeqCst);
                let ((from_client, to_client), (from_server, to_server)) =
                    (client.into_split(), server.into_split());
                tokio::spawn(forward(from_client, to_server, number, Arc::clone(&frozen)));
                tokio::spawn(forward(from_server, to_client, number, Arc::clone(&frozen)));
            }
        });
        Self {
            port,
            accepted,
            frozen_below,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Freezes every connection open now.
    fn freeze(&self) {
        let open = self.accepted.load(Ordering::SeqCst);
        self.frozen_below.store(open, Ordering::SeqCst);
    }
}

/// Copies `from` to `to` until either end closes, or forever holds both open, forwarding
/// nothing, once connection `number` is frozen.
async fn forward(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    number: u64,
    frozen_below: Arc<AtomicU64>,
) {
    let mut buffer = vec![0; 16 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => read,
        };
        if number < frozen_below.load(Ordering::SeqCst) {
            let _held_open = (from, to);
            return std::future::pending().await;
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// The store's connection hangs, without a reset, while Redis itself is fine: its calls time
/// out, the store drops it, and a probe gets through on a new connection. (Kept, every probe
/// would wait on the hung connection until the operating system gave up on it, many minutes.)
#[tokio::test]
async fn a_connection_that_hangs_without_a_reset_is_replaced() {
    let redis = RedisServer::start();
    let proxy = FreezingProxy::start(redis.port).await;
    let addr = app(
        &proxy.url(),
        Quota::per_minute(1000).unwrap(),
        OnStoreError::Allow,
    )
    .await;
    assert!(get_once(addr).await.limited);
    proxy.freeze();
    let r = get_once(addr).await;
    assert_eq!((r.status, r.limited), (200, false), "the connection hangs");
    assert!(r.took < Duration::from_millis(250), "waited {:?}", r.took);
    let r = until_limiting(addr, Duration::from_secs(3)).await;
    assert_eq!(r.status, 200);
    assert!(
        proxy.accepted.load(Ordering::SeqCst) >= 2,
        "limiting resumed on a new connection"
    );
}

/// Many decisions in flight on the store's one multiplexed connection when it is killed: they
/// fail together, and count as one failure, not enough to open the circuit. (Called through
/// the service, without HTTP, so that enough calls are in flight at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_killed_connection_under_load_costs_almost_nothing() {
    let redis = RedisServer::start();
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_hour(1_000_000_000).unwrap())
        .key(key::Global)
        .store(RedisStore::from_url(&redis.url()).unwrap())
        .on_store_error(OnStoreError::Deny)
        // Not about timeouts: a loaded machine must not turn slow answers into 503s.
        .store_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let service = layer.layer(crate::ok_service());
    let started = Instant::now();
    let run_for = Duration::from_millis(3_000);
    let concurrency = 32;
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let service = service.clone();
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                while started.elapsed() < run_for {
                    let r = service.clone().oneshot(http::Request::new(())).await;
                    statuses.push(r.unwrap().status().as_u16());
                }
                statuses
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let killed: i64 = deadpool_redis::redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal"])
        .query(&mut support::redis_connection(&redis.url()))
        .unwrap();
    assert!(killed >= 1, "the store's connection was killed");
    let mut statuses = Vec::new();
    for worker in workers {
        statuses.extend(worker.await.unwrap());
    }
    let unavailable = statuses.iter().filter(|&&s| s == 503).count();
    assert!(
        statuses.iter().all(|&s| s == 200 || s == 503),
        "only 200 and 503 expected"
    );
    assert!(
        statuses.len() > 2_000,
        "too little load: {}",
        statuses.len()
    );
    // The calls on the killed connection fail (about one per worker, and the few sent on it
    // before the store saw it break); an open circuit would answer 503 for a whole second.
    assert!(
        unavailable < 4 * concurrency,
        "{unavailable} of {} requests got 503",
        statuses.len()
    );
    assert!(!layer.control().stats().circuit_open);
}
