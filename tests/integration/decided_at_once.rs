//! When a request is counted: in `call` when the store decides at once (the memory store),
//! and only once its response future runs when it waits for Redis.

use crate::support;

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tollgate::store::{MemoryStore, RedisStore, Store};
use tollgate::{key, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

fn request() -> Request<()> {
    Request::builder()
        .header("x-api-key", "client-1")
        .body(())
        .unwrap()
}

/// A service limited to 2 requests a minute per `x-api-key`, on `store`.
fn limited<S: Store>(
    store: S,
) -> impl Service<Request<()>, Response = Response<impl Sized>, Error = Infallible> + Clone {
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(2).unwrap())
        .key(key::Header::new("x-api-key"))
        .store(store)
        .store_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    layer.layer(crate::ok_service())
}

/// Calls the service and drops the response future without polling it.
async fn call_and_drop<S: Service<Request<()>> + Clone>(svc: &S) {
    let mut svc = svc.clone();
    let Ok(ready) = svc.ready().await else {
        panic!("the service is not ready");
    };
    drop(ready.call(request()));
}

async fn status<S: Service<Request<()>, Response = Response<B>> + Clone, B>(svc: &S) -> StatusCode {
    match svc.clone().oneshot(request()).await {
        Ok(response) => response.status(),
        Err(_) => panic!("the service failed"),
    }
}

#[tokio::test]
async fn the_memory_store_counts_a_request_in_call() {
    let svc = limited(MemoryStore::new());
    call_and_drop(&svc).await;
    call_and_drop(&svc).await;
    // Both were decided, and counted, before their futures were dropped.
    assert_eq!(status(&svc).await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_request_waiting_for_redis_counts_nothing_until_its_future_runs() {
    let store = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(support::unique_prefix("decided_at_once"));
    let svc = limited(store);
    for _ in 0..3 {
        call_and_drop(&svc).await;
    }
    let statuses = [status(&svc).await, status(&svc).await, status(&svc).await];
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}
