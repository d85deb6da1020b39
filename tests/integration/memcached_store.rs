//! The memcached store against real memcached servers: the same decisions as `MemoryStore`
//! on the same seeded histories, exactly the limit across instances under concurrency, and a
//! server killed, restarted and hung under load, and decisions dropped while it hangs.

use std::time::{Duration, Instant};

use tollgate::store::{MemcachedStore, OnStoreError};
use tollgate::{key, Algorithm, Quota, RateLimitLayer};
use tower::{Service, ServiceExt};

use crate::state_store::{admitted_and_denied, decides_as_memory};
use crate::support::memcached::{shared_memcached_url, MemcachedServer};
use crate::support::unique_prefix;

#[tokio::test]
async fn memcached_decides_as_memory_on_every_algorithm() {
    let url = shared_memcached_url();
    decides_as_memory(300, |clock| {
        MemcachedStore::from_url(&url)
            .unwrap()
            .prefix(unique_prefix("mc-diff"))
            .with_clock(clock)
    })
    .await;
}

/// A limiter of `limit` per minute under `algorithm` on `store`, keyed globally.
fn limiter(
    store: MemcachedStore,
    algorithm: Algorithm,
    limit: u32,
    on_error: OnStoreError,
    timeout: Duration,
) -> impl Service<
    http::Request<()>,
    Response = http::Response<impl Sized>,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone
       + Send
       + 'static {
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(limit).unwrap())
        .algorithm(algorithm)
        .key(key::Global)
        .store(store)
        .on_store_error(on_error)
        .store_timeout(timeout)
        .denial_cache(false)
        .build()
        .unwrap();
    tower::ServiceBuilder::new()
        .layer(layer)
        .service(crate::ok_service())
}

/// Two instances on one memcached, 60 requests at once on four threads, failing closed:
/// exactly 10 admitted, for each of the seven algorithms.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_admit_exactly_the_limit_for_every_algorithm() {
    let url = shared_memcached_url();
    for algorithm in Algorithm::ALL {
        let prefix = unique_prefix("mc-exact");
        let store = || {
            MemcachedStore::from_url(&url)
                .unwrap()
                .prefix(prefix.clone())
        };
        let admitted = admitted_and_denied(algorithm, store).await;
        assert_eq!(admitted, (10, 50), "{algorithm}");
    }
}

/// Requests keep coming while memcached is killed, then started again: while it is down
/// every request is answered within the store timeout (fail open), and once it is back the
/// limit holds again (from a whole quota: memcached keeps nothing across a restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_memcached_fails_open_within_the_timeout_and_counts_again_once_back() {
    let mut server = MemcachedServer::start();
    let store = MemcachedStore::from_url(&server.url()).unwrap();
    let timeout = Duration::from_millis(100);
    // 5 per second in windows aligned to the second.
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_second(5).unwrap())
        .algorithm(Algorithm::FixedWindow)
        .key(key::Global)
        .store(store)
        .store_timeout(timeout)
        .denial_cache(false)
        .build()
        .unwrap();
    let service = tower::ServiceBuilder::new()
        .layer(layer)
        .service(crate::ok_service());
    let ask = || {
        let mut service = service.clone();
        async move {
            let started = Instant::now();
            let ready = service.ready().await.unwrap();
            let status = ready.call(http::Request::new(())).await.unwrap().status();
            (status.as_u16(), started.elapsed())
        }
    };
    // 8 requests at the start of a window: exactly 5 pass.
    let one_window = || async {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let into = Duration::from_micros(u64::from(now.subsec_micros()));
        tokio::time::sleep(Duration::from_millis(1_050) - into).await;
        let mut statuses = Vec::new();
        for _ in 0..8 {
            statuses.push(ask().await.0);
        }
        statuses
    };
    assert_eq!(one_window().await, [200, 200, 200, 200, 200, 429, 429, 429]);

    server.stop();
    let down = Instant::now();
    let mut answered = 0;
    while down.elapsed() < Duration::from_secs(2) {
        let (status, took) = ask().await;
        assert_eq!(status, 200, "fails open while memcached is down");
        assert!(took < timeout + Duration::from_millis(150), "{took:?}");
        answered += 1;
    }
    assert!(answered > 20, "{answered}");

    server.launch();
    // The circuit breaker probes again within its back-off; then the limit holds.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let statuses = one_window().await;
        if statuses.contains(&429) {
            assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429]);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never limited again after the restart"
        );
    }
}

/// A memcached that keeps its socket but answers nothing (SIGSTOP): every request is answered
/// within the store timeout, denied with `OnStoreError::Deny`, on the state path and on the
/// aligned fixed window's counters alike.
#[tokio::test]
async fn a_hung_memcached_is_a_store_failure_within_the_timeout() {
    for algorithm in [Algorithm::TokenBucket, Algorithm::FixedWindow] {
        let server = MemcachedServer::start();
        let store = MemcachedStore::from_url(&server.url()).unwrap();
        let timeout = Duration::from_millis(50);
        let mut service = limiter(store, algorithm, 5, OnStoreError::Deny, timeout);
        let ready = service.ready().await.unwrap();
        assert_eq!(
            ready.call(http::Request::new(())).await.unwrap().status(),
            200
        );
        server.pause();
        for _ in 0..20 {
            let started = Instant::now();
            let ready = service.ready().await.unwrap();
            let status = ready.call(http::Request::new(())).await.unwrap().status();
            let took = started.elapsed();
            assert_eq!(status, 503, "{algorithm}");
            assert!(
                took < timeout + Duration::from_millis(100),
                "{algorithm}: {took:?}"
            );
        }
        server.resume();
    }
}

/// Decisions dropped while memcached hangs (SIGSTOP), as a client that hangs up or a deadline
/// drops them, with their commands on the wire: once it answers again, no key's turn is still
/// held, no connection hands a dropped call's late reply to a new one, and a new client gets
/// exactly its quota, on the state path and on the fixed window's counters alike. What the
/// dropped calls sent may have counted, never more than they asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decisions_dropped_while_memcached_hangs_leave_nothing_behind() {
    use tollgate::store::{Policy, Store};
    for algorithm in [Algorithm::Gcra, Algorithm::FixedWindow] {
        let server = MemcachedServer::start();
        let store = MemcachedStore::from_url(&server.url())
            .unwrap()
            .prefix(unique_prefix("mc-dropped"));
        let policy = Policy::new("p", Quota::per_minute(5).unwrap(), algorithm).unwrap();
        // Each connection opened first, so that the dropped calls are sent, not connecting.
        assert!(store.check("warm", &policy, 1).await.unwrap().allowed);
        server.pause();
        let dropped: Vec<_> = (0..16)
            .map(|_| {
                let (store, policy) = (store.clone(), policy.clone());
                tokio::spawn(async move {
                    let check = store.check("hung", &policy, 1);
                    tokio::time::timeout(Duration::from_millis(50), check).await
                })
            })
            .collect();
        for call in dropped {
            // Timed out, or (on a machine so loaded that a connection gave up first) a store
            // error: never a decision from a server that cannot answer.
            let answered = call.await.unwrap();
            assert!(
                !matches!(answered, Ok(Ok(_))),
                "{algorithm}: decided while hung: {answered:?}"
            );
        }
        server.resume();
        let within = Duration::from_secs(2);
        let mut fresh = 0;
        for _ in 0..10 {
            let check = store.check("fresh", &policy, 1);
            let decision = tokio::time::timeout(within, check).await.unwrap().unwrap();
            fresh += usize::from(decision.allowed);
        }
        assert_eq!(fresh, 5, "{algorithm}");
        let mut hung = 0;
        for _ in 0..10 {
            let check = store.check("hung", &policy, 1);
            let decision = tokio::time::timeout(within, check).await.unwrap().unwrap();
            hung += usize::from(decision.allowed);
        }
        assert!(hung <= 5, "{algorithm}: {hung}");
    }
}
