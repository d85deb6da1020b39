//! A store of your own, written with nothing but the kit `tollgate::store` holds (`Store`,
//! `Decision`, `Policy`, `StoreError`, and `OnStoreError` / `StoreFailure` to say what a
//! failure means): the layer decides by it, puts the cache of denials in front of it, and
//! answers its failures by the policy.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::{Request, Response, StatusCode};
use tower::{Layer, Service, ServiceExt};

/// The store, in a module of its own to show everything it imports.
mod ledger {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use tollgate::store::{Decision, Policy, Store, StoreError};

    /// Allows each client `limit` requests, ever; a client whose key starts with `down` finds
    /// the backend failing.
    #[derive(Default)]
    pub(super) struct Ledger {
        used: Mutex<HashMap<String, u64>>,
        /// How many decisions it was asked for.
        pub checks: Arc<AtomicU64>,
    }

    impl Ledger {
        fn decide(
            &self,
            key: &str,
            policy: &Policy,
            cost: u32,
            count: bool,
        ) -> Result<Decision, StoreError> {
            if key.starts_with("down") {
                return Err(StoreError::backend("the ledger is down"));
            }
            let limit = u64::from(policy.quota().limit());
            let mut used = self
                .used
                .lock()
                .map_err(|_| StoreError::backend("poisoned"))?;
            let spent = used.entry(key.to_owned()).or_default();
            let after = *spent + u64::from(cost);
            if after > limit {
                return Ok(Decision::denied(
                    limit,
                    limit - *spent,
                    Duration::from_secs(60),
                    Some(Duration::from_secs(60)),
                ));
            }
            if count {
                *spent = after;
            }
            Ok(Decision::allowed(
                limit,
                limit - after,
                Duration::from_secs(60),
            ))
        }
    }

    impl Store for Ledger {
        async fn check(
            &self,
            key: &str,
            policy: &Policy,
            cost: u32,
        ) -> Result<Decision, StoreError> {
            self.checks.fetch_add(1, Ordering::SeqCst);
            self.decide(key, policy, cost, true)
        }

        async fn peek(
            &self,
            key: &str,
            policy: &Policy,
            cost: u32,
        ) -> Result<Decision, StoreError> {
            self.decide(key, policy, cost, false)
        }

        async fn reset(&self, key: &str, _: &Policy) -> Result<(), StoreError> {
            self.used
                .lock()
                .map_err(|_| StoreError::backend("poisoned"))?
                .remove(key);
            Ok(())
        }

        async fn block(&self, _: &str, _: &Policy, _: Duration) -> Result<(), StoreError> {
            Err(StoreError::Unsupported("block"))
        }
    }
}

use ledger::Ledger;
use tollgate::store::{OnStoreError, StoreFailure};
use tollgate::{key, Quota, RateLimitLayer};

/// A service limited to 2 requests per `x-api-key` on a `Ledger`, failing closed; and the
/// ledger's count of decisions.
fn limited() -> (
    impl Service<Request<()>, Response = Response<impl Sized>, Error = Infallible> + Clone,
    Arc<AtomicU64>,
) {
    let store = Ledger::default();
    let checks = Arc::clone(&store.checks);
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(2).unwrap())
        .key(key::Header::new("x-api-key"))
        .store(store)
        .store_failure(StoreFailure::new(OnStoreError::Deny))
        .build()
        .unwrap();
    (layer.layer(crate::ok_service()), checks)
}

async fn call<S, B>(svc: &S, client: &str) -> Response<B>
where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible> + Clone,
{
    let request = Request::builder()
        .header("x-api-key", client)
        .body(())
        .unwrap();
    match svc.clone().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

#[tokio::test]
async fn the_layer_decides_by_a_store_of_your_own_with_its_cache_of_denials_in_front() {
    let (svc, checks) = limited();
    assert_eq!(call(&svc, "a").await.status(), StatusCode::OK);
    assert_eq!(call(&svc, "a").await.status(), StatusCode::OK);
    let denied = call(&svc, "a").await;
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.headers()["retry-after"], "60");
    assert_eq!(checks.load(Ordering::SeqCst), 3);
    // The denial is answered by the cache in front of the store, which is not asked again.
    assert_eq!(
        call(&svc, "a").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(checks.load(Ordering::SeqCst), 3);
    // Another client has its own allowance.
    assert_eq!(call(&svc, "b").await.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_failure_of_a_store_of_your_own_is_answered_by_the_policy() {
    let (svc, _) = limited();
    let failed = call(&svc, "down-1").await;
    assert_eq!(failed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(failed.headers().contains_key("retry-after"));
    assert_eq!(call(&svc, "a").await.status(), StatusCode::OK);
}
