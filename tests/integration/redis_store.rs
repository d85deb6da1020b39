//! The Redis store against a real redis-server: exact across instances, one script call per
//! decision, nothing without a TTL. (That it decides as the memory store does, checks, blocks,
//! resets and refunds alike, is tested beside the stores.)

use crate::support;

use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use deadpool_redis::redis;
use tollgate::store::RedisStore;
use tollgate::{
    clock::{Clock, ManualClock},
    key,
    store::{Policy, Store},
    Algorithm, ConfigErrorKind, Quota, RateLimitLayer,
};

fn routes(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_sharing_redis_allow_exactly_the_limit() {
    let url = support::shared_redis_url();
    for algorithm in Algorithm::ALL {
        for round in 0..3 {
            let store = RedisStore::from_url(&url)
                .unwrap()
                .prefix(support::unique_prefix("two"));
            let layer = || {
                RateLimitLayer::builder()
                    .quota(Quota::per_minute(10).unwrap())
                    .algorithm(algorithm)
                    .key(key::Header::new("x-api-key"))
                    .store(store.clone())
                    .store_timeout(Duration::from_secs(2))
                    .build()
                    .unwrap()
            };
            let a = support::serve(routes(layer())).await;
            let b = support::serve(routes(layer())).await;
            let client = support::client();
            let requests: Vec<_> = (0..64)
                .map(|i| {
                    let addr = if i % 2 == 0 { a } else { b };
                    let request = client
                        .get(format!("http://{addr}/"))
                        .header("x-api-key", "shared-client");
                    tokio::spawn(async move { request.send().await.unwrap().status().as_u16() })
                })
                .collect();
            let mut ok = 0;
            let mut limited = 0;
            for r in requests {
                match r.await.unwrap() {
                    200 => ok += 1,
                    429 => limited += 1,
                    other => panic!("unexpected status {other}"),
                }
            }
            assert_eq!((ok, limited), (10, 54), "{algorithm}, round {round}");
        }
    }
}

#[tokio::test]
async fn script_flush_between_requests_still_decides_correctly() {
    let url = support::shared_redis_url();
    let store = RedisStore::from_url(&url)
        .unwrap()
        .prefix(support::unique_prefix("flush"));
    let mut conn = support::redis_connection(&url);
    for algorithm in Algorithm::ALL {
        let policy = Policy::new("f", Quota::per_minute(3).unwrap(), algorithm).unwrap();
        let mut remaining = Vec::new();
        for _ in 0..4 {
            let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
            let d = store.check("k", &policy, 1).await.unwrap();
            remaining.push((d.allowed, d.remaining));
        }
        assert_eq!(
            remaining,
            [(true, 2), (true, 1), (true, 0), (false, 0)],
            "{algorithm}"
        );
    }
}

#[tokio::test]
async fn one_script_call_per_decision_and_every_key_has_a_ttl() {
    let server = support::RedisServer::start();
    let store = RedisStore::from_url(&server.url()).unwrap();
    let mut conn = support::redis_connection(&server.url());
    // Load the scripts once, so that the count below is of steady-state decisions.
    for algorithm in Algorithm::ALL {
        let policy =
            Policy::new(algorithm.as_str(), Quota::per_minute(5).unwrap(), algorithm).unwrap();
        store.check("warm-up", &policy, 1).await.unwrap();
    }
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let mut decisions = 0;
    for algorithm in Algorithm::ALL {
        let policy =
            Policy::new(algorithm.as_str(), Quota::per_minute(5).unwrap(), algorithm).unwrap();
        for i in 0..40 {
            let key = format!("client-{}", i % 7);
            store.check(&key, &policy, 1 + i % 2).await.unwrap();
            decisions += 1;
        }
    }
    assert_eq!(support::command_calls(&mut conn, "evalsha"), decisions);
    // (commandstats also counts the GET/SET/TIME the scripts run inside Redis.)
    for other in ["eval", "script|load", "script|exists", "ping", "unwatch"] {
        assert_eq!(
            support::command_calls(&mut conn, other),
            0,
            "{other} sent by the client"
        );
    }

    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    assert_eq!(keys.len(), 7 * 8, "{keys:?}");
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
        // A sliding window's count still weighs in during the next window: up to 2P.
        let max = if key.contains(":sliding_window:") {
            120_000
        } else {
            60_000
        };
        assert!(ttl > 0 && ttl <= max, "{key} has PTTL {ttl}");
        assert!(key.starts_with("tollgate:") && key.ends_with('}'), "{key}");
    }
}

#[tokio::test]
async fn keys_share_a_hash_tag_and_odd_client_keys_are_digested() {
    let url = support::shared_redis_url();
    let prefix = support::unique_prefix("tag");
    let store = RedisStore::from_url(&url).unwrap().prefix(prefix.clone());
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(5).unwrap())
        .key(key::Header::new("x-api-key"))
        .store(store)
        .build()
        .unwrap();
    let addr = support::serve(Router::new().route("/", get(|| async { "" })).layer(layer)).await;
    let client = support::client();
    for value in ["plain-key", "{evil}tag", &"x".repeat(500)] {
        let r = client
            .get(format!("http://{addr}/"))
            .header("x-api-key", value)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let mut conn = support::redis_connection(&url);
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query(&mut conn)
        .unwrap();
    keys.sort();
    assert_eq!(keys.len(), 3);
    assert!(keys.contains(&format!("{prefix}:default:gcra:{{plain-key}}")));
    for k in keys.iter().filter(|k| !k.contains("plain-key")) {
        let tag = k.split_once('{').unwrap().1;
        assert_eq!(tag.len(), 33 + 1, "{k}: digest '#'+32 hex then '}}'");
        assert!(!tag[..33].contains(['{', '}']));
    }
}

/// `INFO memory`'s `used_memory`, bytes.
fn used_memory(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("memory").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap()
}

/// `INFO commandstats` server time of one command, µs in total.
fn command_usec(conn: &mut redis::Connection, command: &str) -> u64 {
    command_stat(conn, command, "usec=")
}

/// `INFO commandstats` calls of one command (also those made by scripts).
fn command_calls(conn: &mut redis::Connection, command: &str) -> u64 {
    command_stat(conn, command, "calls=")
}

/// One field (`"usec="`, `"calls="`) of one command's `INFO commandstats` line; 0 when the
/// command never ran.
fn command_stat(conn: &mut redis::Connection, command: &str, field: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:")))
        .and_then(|rest| rest.split(',').find_map(|f| f.strip_prefix(field)))
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn a_sliding_window_log_request_of_any_cost_is_one_member() {
    // A server of its own, so that nothing else moves its memory.
    let server = support::RedisServer::start();
    let store = RedisStore::from_url(&server.url()).unwrap();
    let mut conn = support::redis_connection(&server.url());
    let policy = Policy::new(
        "upload",
        Quota::per_hour(1_000_000).unwrap(),
        Algorithm::SlidingWindowLog,
    )
    .unwrap();
    let key = store.state_key(&policy, "k");
    store.check("warm-up", &policy, 1).await.unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut conn)
        .unwrap();
    let before = used_memory(&mut conn);

    let started = Instant::now();
    let d = store.check("k", &policy, 1_000_000).await.unwrap();
    let took = started.elapsed();
    assert_eq!((d.allowed, d.remaining), (true, 0));
    let zcard: u64 = redis::cmd("ZCARD").arg(&key).query(&mut conn).unwrap();
    assert_eq!(zcard, 1);
    let server_usec = command_usec(&mut conn, "evalsha");
    let grew = used_memory(&mut conn).saturating_sub(before);
    println!(
        "cost 1,000,000: {server_usec} µs of Redis server time, {:.2} ms round trip, \
         used_memory +{grew} bytes, ZCARD {zcard}",
        took.as_secs_f64() * 1e3
    );
    assert!(grew < 20_000_000, "used_memory grew by {grew} bytes");
    assert!(server_usec < 20_000, "the script ran {server_usec} µs");

    // The log is exact all the same: full for the hour, then denied until that member expires.
    let d = store.check("k", &policy, 1).await.unwrap();
    assert!(!d.allowed);
    let retry = d.retry_after.unwrap();
    assert!(retry > Duration::from_secs(3_599) && retry <= Duration::from_secs(3_600));
    // Requests in one µs share a member; a few more requests, a few more members.
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = store.with_clock(clock.clone());
    let other = store.state_key(&policy, "other");
    for cost in [400_000, 300_000, 200_000] {
        assert!(store.check("other", &policy, cost).await.unwrap().allowed);
    }
    clock.advance(Duration::from_micros(1));
    let d = store.check("other", &policy, 100_001).await.unwrap();
    assert_eq!((d.allowed, d.remaining), (false, 100_000));
    assert_eq!(
        d.retry_after,
        Some(Duration::from_secs(3_600) - Duration::from_micros(1))
    );
    assert!(
        store
            .check("other", &policy, 100_000)
            .await
            .unwrap()
            .allowed
    );
    let zcard: u64 = redis::cmd("ZCARD").arg(&other).query(&mut conn).unwrap();
    assert_eq!(zcard, 2);
}

#[tokio::test]
async fn a_sliding_window_log_trims_what_expired_and_keeps_at_most_its_limit() {
    // A server of its own, so that its command counts are this test's.
    let server = support::RedisServer::start();
    let clock = ManualClock::new(1_700_000_000_000_000);
    let store = RedisStore::from_url(&server.url())
        .unwrap()
        .with_clock(clock.clone());
    let mut conn = support::redis_connection(&server.url());
    let policy = Policy::new(
        "log",
        Quota::new(3, Duration::from_secs(10)).unwrap(),
        Algorithm::SlidingWindowLog,
    )
    .unwrap();
    let key = store.state_key(&policy, "k");
    let zcard = |conn: &mut redis::Connection| -> u64 {
        redis::cmd("ZCARD").arg(&key).query(conn).unwrap()
    };

    // A young log (nothing has expired yet) has nothing to trim, and is not asked to.
    let mut logged = Vec::new();
    for n in 1..=3 {
        assert!(store.check("k", &policy, 1).await.unwrap().allowed);
        logged.push(clock.now());
        assert_eq!(zcard(&mut conn), n);
        clock.advance(Duration::from_secs(1));
    }
    let d = store.check("k", &policy, 1).await.unwrap();
    assert_eq!(
        (d.allowed, d.retry_after),
        (false, Some(Duration::from_secs(7)))
    );
    assert_eq!(command_calls(&mut conn, "zremrangebyscore"), 0);

    // Steady traffic, one request every 3 s: each allow trims what expired, so the log holds
    // exactly the members of the last 10 s (never more than L); a denial changes nothing.
    let mut allowed = 0;
    for step in 0..20 {
        clock.advance(Duration::from_secs(3));
        let now = clock.now();
        let d = store.check("k", &policy, 1).await.unwrap();
        if d.allowed {
            allowed += 1;
            logged.push(now);
            let counting = logged.iter().filter(|&&t| now < t + 10_000_000).count();
            assert_eq!(zcard(&mut conn), counting as u64, "step {step}");
        }
        assert!(zcard(&mut conn) <= 3, "step {step}");
    }
    assert!(allowed >= 10, "{allowed} of 20 allowed");
    assert!(command_calls(&mut conn, "zremrangebyscore") > 0);
    // All expired: the next request starts the log afresh, alone in it.
    clock.advance(Duration::from_secs(60));
    assert_eq!(store.check("k", &policy, 1).await.unwrap().remaining, 2);
    assert_eq!(zcard(&mut conn), 1);
}

#[test]
fn redis_passwords_are_never_printed() {
    for url in [
        "redis://admin:hunter2@127.0.0.1:notaport/0",
        "redis://admin:hunter2@127.0.0.1:6379/notadb",
        "rediss://:hunter2@[::1:6379",
        "nosuchscheme://admin:hunter2@host",
    ] {
        let e = RedisStore::from_url(url).unwrap_err();
        assert_eq!(e.kind(), ConfigErrorKind::Store, "{url}");
        let shown = format!("{e} {e:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("***"), "{shown}");
    }
    let store = RedisStore::from_url("redis://admin:hunter2@127.0.0.1:6379/0").unwrap();
    let shown = format!("{store:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(
        shown.contains("redis://admin:***@127.0.0.1:6379/0"),
        "{shown}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_first_decisions_share_one_connection() {
    let redis = support::RedisServer::start();
    let store = RedisStore::from_url(&redis.url()).unwrap();
    let policy = std::sync::Arc::new(
        Policy::new("cold", Quota::per_minute(100).unwrap(), Algorithm::Gcra).unwrap(),
    );
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(12));
    let tasks: Vec<_> = (0..12)
        .map(|i| {
            let (store, policy) = (store.clone(), std::sync::Arc::clone(&policy));
            let barrier = std::sync::Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                store.check(&format!("k{i}"), &policy, 1).await.unwrap()
            })
        })
        .collect();
    for task in tasks {
        assert!(task.await.unwrap().allowed);
    }
    let mut conn = support::redis_connection(&redis.url());
    let info: String = redis::cmd("INFO").arg("stats").query(&mut conn).unwrap();
    let received: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap();
    // The start-up probe (`RedisServer::start` waits for the port), the store's one
    // connection, and this one.
    assert_eq!(received, 3);
}
