//! The Sentinel store against a real master, replica and sentinel: exact limits, no 5xx while
//! the master is killed and its replica promoted, and exact limits again on the new master.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use support::RedisSentinel;
use tollgate::store::{RedisStore, StoreFailure};
use tollgate::{
    key,
    store::{OnStoreError, Policy, Store},
    Algorithm, Quota, RateLimitLayer,
};

/// How many of 12 concurrent requests of `key` at limit 5 the store allows.
async fn allowed_of_twelve(store: &RedisStore, algorithm: Algorithm, key: &str) -> usize {
    let policy = Arc::new(Policy::new("s", Quota::per_minute(5).unwrap(), algorithm).unwrap());
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let (store, policy, key) = (store.clone(), Arc::clone(&policy), key.to_owned());
            tokio::spawn(async move { store.check(&key, &policy, 1).await.unwrap().allowed })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += usize::from(task.await.unwrap());
    }
    allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limits_are_exact_before_and_after_a_failover() {
    let mut redis = RedisSentinel::start();
    let store = RedisStore::sentinel(&[redis.sentinel_url()], RedisSentinel::MASTER_NAME).unwrap();
    for algorithm in Algorithm::ALL {
        assert_eq!(
            allowed_of_twelve(&store, algorithm, "before").await,
            5,
            "{algorithm}"
        );
    }
    // Blocks after a breach, resets and blocks go to the master too (and refunds and leases:
    // see the crate's store tests).
    let login = Policy::new("login", Quota::per_minute(2).unwrap(), Algorithm::Gcra)
        .unwrap()
        .with_block_for(Duration::from_secs(60));
    let check = async || store.check("eve", &login, 1).await.unwrap();
    assert_eq!((check().await.allowed, check().await.allowed), (true, true));
    let denied = check().await;
    assert_eq!(
        (denied.allowed, denied.remaining, denied.retry_after),
        (false, 0, Some(Duration::from_secs(60)))
    );
    store.reset("eve", &login).await.unwrap();
    assert_eq!(check().await.remaining, 1);
    store
        .block("eve", &login, Duration::from_secs(5))
        .await
        .unwrap();
    let blocked = check().await;
    assert_eq!((blocked.allowed, blocked.remaining), (false, 0));
    assert!(blocked
        .retry_after
        .is_some_and(|r| r > Duration::from_secs(4) && r <= Duration::from_secs(5)));

    // An app on the same store, failing open, with a quickly probing breaker.
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(1_000_000).unwrap())
        .key(key::Global)
        .store(store.clone())
        .store_failure(
            StoreFailure::new(OnStoreError::Allow)
                .timeout(Duration::from_millis(50))
                .open_after(3)
                .open_for(Duration::from_millis(100), Duration::from_millis(200)),
        )
        .build()
        .unwrap();
    let addr = support::serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await;
    let mut statuses = Vec::new();

    let killed = Instant::now();
    redis.kill_master();
    let probe = Policy::new(
        "probe",
        Quota::per_minute(1_000_000).unwrap(),
        Algorithm::Gcra,
    )
    .unwrap();
    let back_after = loop {
        let r = support::client()
            .get(format!("http://{addr}/"))
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
        let answered =
            tokio::time::timeout(Duration::from_millis(200), store.check("probe", &probe, 1)).await;
        if matches!(answered, Ok(Ok(_))) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "no master within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!(
        "failover: the store decided again {} ms after SIGKILL of the master",
        back_after.as_millis()
    );
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let role = support::redis_cli(redis.replica_port, &["role"]);
    assert!(
        role.starts_with("master"),
        "the replica was promoted: {role}"
    );
    for algorithm in Algorithm::ALL {
        assert_eq!(
            allowed_of_twelve(&store, algorithm, "after").await,
            5,
            "{algorithm}"
        );
    }
    // A peek on the new master: decides as a check would, and writes nothing.
    let policy = Policy::new("peeked", Quota::per_minute(2).unwrap(), Algorithm::Gcra).unwrap();
    let mut seen = Vec::new();
    for _ in 0..2 {
        let peek = store.peek("p", &policy, 1).await.unwrap();
        seen.push((peek.allowed, peek.remaining));
    }
    let checked = store.check("p", &policy, 1).await.unwrap();
    seen.push((checked.allowed, checked.remaining));
    let peek = store.peek("p", &policy, 2).await.unwrap();
    seen.push((peek.allowed, peek.remaining));
    assert_eq!(seen, [(true, 1), (true, 1), (true, 1), (false, 1)]);
}
