//! The cluster store against a real 3-master + 3-replica Redis Cluster: exact limits on every
//! master, stacked limits across slots, and a master killed mid-traffic. Each test owns its
//! cluster.

use crate::support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use support::RedisCluster;
use tollgate::store::{RedisOptions, RedisStore, StoreFailure};
use tollgate::{
    key,
    store::{OnStoreError, Policy, Store},
    Algorithm, Quota, RateLimitLayer,
};

/// How many of 12 concurrent requests of `key` at limit 5 the store allows.
async fn allowed_of_twelve(store: &RedisStore, policy: &Arc<Policy>, key: &str) -> usize {
    let barrier = Arc::new(tokio::sync::Barrier::new(12));
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let (store, policy, barrier, key) = (
                store.clone(),
                Arc::clone(policy),
                Arc::clone(&barrier),
                key.to_owned(),
            );
            tokio::spawn(async move {
                barrier.wait().await;
                store.check(&key, &policy, 1).await.unwrap().allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += usize::from(task.await.unwrap());
    }
    allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_algorithm_is_exact_on_every_master() {
    let cluster = RedisCluster::start();
    let store = RedisStore::cluster(&cluster.urls()).unwrap();
    let keys = cluster.keys_on_every_master("client");
    for algorithm in Algorithm::ALL {
        let policy =
            Arc::new(Policy::new("exact", Quota::per_minute(5).unwrap(), algorithm).unwrap());
        for key in &keys {
            assert_eq!(
                allowed_of_twelve(&store, &policy, key).await,
                5,
                "{algorithm} on {key}"
            );
        }
    }

    // A script cache emptied on every node: the next decisions load the scripts again.
    for &port in &cluster.ports {
        support::redis_cli(port, &["script", "flush"]);
    }
    let policy = Policy::new("flushed", Quota::per_minute(2).unwrap(), Algorithm::Gcra).unwrap();
    for key in &keys {
        let mut allowed = Vec::new();
        for _ in 0..3 {
            allowed.push(store.check(key, &policy, 1).await.unwrap().allowed);
        }
        assert_eq!(allowed, [true, true, false], "{key}");
    }

    // A peek is one dry run on the key's master: it decides as a check would, writes nothing.
    let policy = Policy::new(
        "peeked",
        Quota::per_minute(2).unwrap(),
        Algorithm::TokenBucket,
    )
    .unwrap();
    for key in &keys {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let peek = store.peek(key, &policy, 1).await.unwrap();
            seen.push((peek.allowed, peek.remaining));
        }
        let checked = store.check(key, &policy, 1).await.unwrap();
        seen.push((checked.allowed, checked.remaining));
        let peek = store.peek(key, &policy, 2).await.unwrap();
        seen.push((peek.allowed, peek.remaining));
        assert_eq!(seen, [(true, 1), (true, 1), (true, 1), (false, 1)], "{key}");
    }

    // Slots of requests in flight on every master, renewed in one call per client key (a
    // script touches one hash slot only) and kept past their time to live.
    let engine = tollgate::engine::Engine::builder()
        .store(store.clone())
        .build()
        .unwrap();
    let ttl = Duration::from_millis(300);
    let limit = tollgate::store::InFlight::new("slow", 1)
        .unwrap()
        .with_ttl(ttl)
        .unwrap();
    let mut held = Vec::new();
    for key in &keys {
        let slot = engine.new_slot();
        assert!(
            engine.take_slot(key, &limit, slot).await.unwrap().allowed,
            "{key}"
        );
        held.push((key, slot));
    }
    for _ in 0..4 {
        tokio::time::sleep(ttl / 3).await;
        engine.renew_slots().await.unwrap();
    }
    for (key, slot) in held {
        let refused = engine
            .take_slot(key, &limit, engine.new_slot())
            .await
            .unwrap();
        assert!(!refused.allowed, "{key}: renewed, still held");
        engine.give_back_slot(key, &limit, slot).await.unwrap();
        assert!(
            engine
                .take_slot(key, &limit, engine.new_slot())
                .await
                .unwrap()
                .allowed
        );
    }
}

/// An app limited per `x-key` header through the cluster, with the layer's default
/// fail-open policy, a 50 ms store timeout and a quickly probing breaker.
async fn app(store: RedisStore, quota: Quota) -> SocketAddr {
    let layer = RateLimitLayer::builder()
        .quota(quota)
        .key(key::Header::new("x-key"))
        .store(store)
        .store_failure(
            StoreFailure::new(OnStoreError::Allow)
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

async fn status(addr: SocketAddr, key: &str) -> u16 {
    reply(addr, key).await.0
}

/// The status, and whether the reply carries rate-limit headers (the store decided it).
async fn reply(addr: SocketAddr, key: &str) -> (u16, bool) {
    let r = support::client()
        .get(format!("http://{addr}/"))
        .header("x-key", key)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.headers().contains_key("ratelimit"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_master_gives_no_errors_and_its_replica_limits_exactly() {
    let mut cluster = RedisCluster::start();
    let store = RedisStore::cluster(&cluster.urls()).unwrap();
    let addr = app(store.clone(), Quota::per_minute(5).unwrap()).await;
    let victim_key = cluster.keys_on_every_master("victim")[0].clone();
    let victim = cluster.master_of(&format!("{{{victim_key}}}"));
    // Fresh keys in the victim's slots, for after the failover.
    let later: Vec<String> = (0..)
        .map(|i| format!("later-{i}"))
        .filter(|k| cluster.master_of(&format!("{{{k}}}")) == victim)
        .take(8)
        .collect();
    for _ in 0..5 {
        assert_eq!(status(addr, &victim_key).await, 200);
    }
    assert_eq!(status(addr, &victim_key).await, 429);

    let killed = Instant::now();
    cluster.kill(victim);
    // Traffic on the victim's slots while its replica takes over: answers only, no 5xx.
    let policy = Policy::new(
        "probe",
        Quota::per_minute(1_000_000).unwrap(),
        Algorithm::Gcra,
    )
    .unwrap();
    let mut back_after = None;
    let mut statuses = Vec::new();
    while killed.elapsed() < Duration::from_secs(20) {
        statuses.push(status(addr, &later[0]).await);
        let answered = tokio::time::timeout(
            Duration::from_millis(200),
            store.check(&later[1], &policy, 1),
        )
        .await;
        if matches!(answered, Ok(Ok(_))) {
            back_after = Some(killed.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let back_after = back_after.expect("the replica did not take over within 20 s");
    eprintln!(
        "failover: the store decided on the killed master's slots again {} ms after SIGKILL \
         ({} HTTP requests meanwhile)",
        back_after.as_millis(),
        statuses.len()
    );
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );

    // Exact again on the promoted replica, through HTTP, with no restart, once the breaker
    // has let a probe through.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !reply(addr, &later[0]).await.1 {
        assert!(Instant::now() < deadline, "limiting did not resume");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let key = later[2].clone();
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let key = key.clone();
            tokio::spawn(async move { status(addr, &key).await })
        })
        .collect();
    let mut codes = Vec::new();
    for task in tasks {
        codes.push(task.await.unwrap());
    }
    codes.sort_unstable();
    assert_eq!(codes, [[200; 5].as_slice(), [429; 7].as_slice()].concat());
    // And on the store itself, for every algorithm.
    for (algorithm, key) in Algorithm::ALL.into_iter().zip(&later[1..]) {
        let policy =
            Arc::new(Policy::new("after", Quota::per_minute(5).unwrap(), algorithm).unwrap());
        assert_eq!(
            allowed_of_twelve(&store, &policy, key).await,
            5,
            "{algorithm}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_over_tls_with_a_password_limits_exactly() {
    let cluster = RedisCluster::start_tls("cluster-pw");
    let store = RedisStore::cluster(&cluster.urls()).unwrap();
    let shown = format!("{store:?}");
    assert!(
        !shown.contains("cluster-pw") && shown.contains("rediss://:***@"),
        "{shown}"
    );
    let keys = cluster.keys_on_every_master("tls");
    // One decision first: 12 cold requests would each open a cluster connection (TLS to six
    // nodes), which a loaded machine may not finish within the pool's 1 s.
    let warm = Policy::new("warm", Quota::per_minute(5).unwrap(), Algorithm::Gcra).unwrap();
    store.check("warm", &warm, 1).await.unwrap();
    for algorithm in Algorithm::ALL {
        let policy =
            Arc::new(Policy::new("tls", Quota::per_minute(5).unwrap(), algorithm).unwrap());
        for key in &keys {
            assert_eq!(
                allowed_of_twelve(&store, &policy, key).await,
                5,
                "{algorithm} on {key}"
            );
        }
    }
}

/// A password given in [`RedisOptions`] (the seeds' URLs carry none) reaches every node the
/// cluster client meets, and the pool takes the options' size.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_password_in_the_options_reaches_every_node() {
    let cluster = RedisCluster::start_tls("options-pw");
    let urls: Vec<String> = (cluster.urls().iter())
        .map(|u| u.replace(":options-pw@", ""))
        .collect();
    assert!(!urls[0].contains("options-pw"), "{urls:?}");
    let options = RedisOptions::new().password("options-pw").pool_size(3);
    let store = RedisStore::cluster_with_options(&urls, &options).unwrap();
    let shown = format!("{store:?}");
    assert!(shown.contains("max_size: 3"), "{shown}");
    let warm = Policy::new("warm", Quota::per_minute(5).unwrap(), Algorithm::Gcra).unwrap();
    store.check("warm", &warm, 1).await.unwrap();
    let policy =
        Arc::new(Policy::new("opt", Quota::per_minute(5).unwrap(), Algorithm::Gcra).unwrap());
    for key in cluster.keys_on_every_master("opt") {
        assert_eq!(allowed_of_twelve(&store, &policy, &key).await, 5, "{key}");
    }
    // Without the options' password, no node lets the store in.
    let bare = RedisStore::cluster(&urls).unwrap();
    assert!(bare.check("warm", &warm, 1).await.is_err());
}
