//! The Redis store on a real 3-master + 3-replica Redis Cluster: leases on every master, and
//! stacked limits whose keys live in different slots (a dry run of each slot's group, then the
//! commit).

use std::sync::Arc;

use super::leases::leases_are_exact;
use super::support::RedisCluster;
use crate::store::check::Check;
use crate::store::contract::StoreExt;
use crate::store::{RedisStore, Store};
use crate::{store::Policy, Algorithm, Quota};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_and_stacked_limits_span_slots() {
    let cluster = RedisCluster::start();
    let store = RedisStore::cluster(&cluster.urls()).unwrap();
    let keys = cluster.keys_on_every_master("client");

    // Leases on every master.
    for key in &keys {
        leases_are_exact(&store, key).await;
    }

    // Stacked limits of two client keys on two masters: a per-IP limit of 3 and a per-API-key
    // limit of 5. A request the IP limit blocks is counted by neither.
    let per_ip = Policy::new(
        "ip",
        Quota::per_minute(3).unwrap(),
        Algorithm::SlidingWindow,
    )
    .unwrap();
    let per_api_key =
        Policy::new("api", Quota::per_minute(5).unwrap(), Algorithm::TokenBucket).unwrap();
    let (ip, api_key) = (keys[0].as_str(), keys[1].as_str());
    let stacked = [
        Check::new(ip, &per_ip, 1),
        Check::new(api_key, &per_api_key, 1),
    ];
    let mut allowed = 0;
    for _ in 0..5 {
        let decisions = store.check_many(&stacked).await.unwrap();
        allowed += usize::from(decisions.iter().all(|d| d.allowed));
    }
    assert_eq!(allowed, 3);
    let api_left = store.check(api_key, &per_api_key, 1).await.unwrap();
    assert_eq!(
        api_left.remaining, 1,
        "the API key counted only the 3 allowed requests"
    );

    // A shadow (non-blocking) denial blocks nothing: the other slot's limit still counts.
    let shadow_ip = Policy::new(
        "shadow-ip",
        Quota::per_minute(1).unwrap(),
        Algorithm::FixedWindow,
    )
    .unwrap();
    let api = Policy::new("api2", Quota::per_minute(10).unwrap(), Algorithm::Gcra).unwrap();
    for _ in 0..3 {
        let checks = [
            Check::new(ip, &shadow_ip, 1).blocking(false),
            Check::new(api_key, &api, 1),
        ];
        let decisions = store.check_many(&checks).await.unwrap();
        assert!(decisions[1].allowed);
    }
    assert_eq!(store.check(api_key, &api, 1).await.unwrap().remaining, 6);

    // Concurrent stacked requests across slots: the per-IP limit stays exact on its own.
    let per_ip =
        Arc::new(Policy::new("ip-c", Quota::per_minute(5).unwrap(), Algorithm::Gcra).unwrap());
    let per_key =
        Arc::new(Policy::new("key-c", Quota::per_minute(100).unwrap(), Algorithm::Gcra).unwrap());
    let barrier = Arc::new(tokio::sync::Barrier::new(12));
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let (store, per_ip, per_key, barrier) = (
                store.clone(),
                Arc::clone(&per_ip),
                Arc::clone(&per_key),
                Arc::clone(&barrier),
            );
            let (ip, api_key) = (keys[0].clone(), keys[2].clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let checks = [
                    Check::new(&ip, &per_ip, 1),
                    Check::new(&api_key, &per_key, 1),
                ];
                let decisions = store.check_many(&checks).await.unwrap();
                decisions.iter().all(|d| d.allowed)
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += usize::from(task.await.unwrap());
    }
    assert_eq!(allowed, 5);
}
