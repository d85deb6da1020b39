//! The Sentinel store against a real master, replica and sentinel: exact limits, and exact
//! again on the promoted replica after the master is killed.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::RedisSentinel;
use tollgate::store::RedisSentinelStore;
use tollgate::{Algorithm, Policy, Quota, Store};

/// How many of 12 concurrent requests of `key` at limit 5 the store allows.
async fn allowed_of_twelve(store: &RedisSentinelStore, algorithm: Algorithm, key: &str) -> usize {
    let policy = Arc::new(Policy::new("s", Quota::per_minute(5), algorithm).unwrap());
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
    let store =
        RedisSentinelStore::from_sentinels(&[redis.sentinel_url()], RedisSentinel::MASTER_NAME)
            .unwrap();
    for algorithm in Algorithm::ALL {
        assert_eq!(
            allowed_of_twelve(&store, algorithm, "before").await,
            5,
            "{algorithm}"
        );
    }

    let killed = Instant::now();
    redis.kill_master();
    let probe = Policy::new("probe", Quota::per_minute(1_000_000), Algorithm::Gcra).unwrap();
    let back_after = loop {
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
}
