//! What tollgate logs through a sustained Redis outage, over real HTTP with a real
//! redis-server that is killed and started again: one line per change of state (the first
//! failure, the circuit opening, the store answering again), however long the outage and
//! however many requests arrive meanwhile.

use crate::support;

use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use support::log::Log;
use support::RedisServer;
use tollgate::store::{OnStoreError, RedisStore, StoreFailure};
use tollgate::{key, Quota, RateLimitLayer};

/// The lines logged by tollgate so far: level and message.
fn tollgate_lines(log: &Log) -> Vec<(String, String)> {
    log.text()
        .lines()
        .filter_map(|line| {
            let (head, message) = line.split_once(" tollgate: ")?;
            let level = head.split_whitespace().last()?.to_owned();
            Some((level, message.to_owned()))
        })
        .collect()
}

/// Alone in a process, with a process-wide subscriber: every line tollgate logs is seen.
#[test]
fn a_sustained_outage_is_logged_once_per_change_of_state() {
    support::alone(
        "store_outage_log::a_sustained_outage_is_logged_once_per_change_of_state",
        || support::block_on(sustained_outage()),
    );
}

async fn sustained_outage() {
    let log = Log::process_wide(tracing::Level::INFO);
    let mut redis = RedisServer::start();
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_second(1000).unwrap())
        .key(key::Global)
        .store(RedisStore::from_url(&redis.url()).unwrap())
        .store_failure(
            StoreFailure::new(OnStoreError::FallbackToMemory)
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
    let client = support::client();
    let get = || async {
        let r = client.get(format!("http://{addr}/")).send().await.unwrap();
        r.status().as_u16()
    };
    for _ in 0..5 {
        assert_eq!(get().await, 200);
    }
    assert_eq!(tollgate_lines(&log), []);

    // Down for longer than the 10 s between reports of repeated errors, with a request every
    // 20 ms: hundreds of failed or refused calls, and a probe every 100-200 ms.
    redis.stop();
    let down = Instant::now();
    let mut requests = 0;
    while down.elapsed() < Duration::from_millis(10_500) {
        assert_eq!(get().await, 200);
        requests += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(requests > 300, "{requests}");

    redis.launch();
    let back = Instant::now();
    while tollgate_lines(&log).len() < 3 && back.elapsed() < Duration::from_secs(5) {
        assert_eq!(get().await, 200);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // And a while longer, to see that nothing more comes.
    for _ in 0..20 {
        assert_eq!(get().await, 200);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let lines = tollgate_lines(&log);
    let levels: Vec<&str> = lines.iter().map(|(level, _)| level.as_str()).collect();
    assert_eq!(levels, ["WARN", "WARN", "INFO"], "{lines:#?}");
    let fallback = "failing over to the in-memory limiter of each instance (on_store_error \
                    fallback)";
    // The first failure (a field with the count follows the message).
    assert!(
        lines[0].1.starts_with("rate limit store failed: ")
            && lines[0].1.contains(&format!(
                " (store redis); {fallback} (0 more store errors since the last report)"
            )),
        "{lines:#?}"
    );
    assert!(
        lines[1]
            .1
            .starts_with("rate limit store redis keeps failing, circuit breaker open (")
            && lines[1].1.ends_with(&format!(
                "); {fallback}, probing the store again after a back-off"
            )),
        "{lines:#?}"
    );
    let closed = lines[2]
        .1
        .strip_prefix("rate limit store redis answers again, circuit breaker closed (")
        .and_then(|rest| rest.strip_suffix(" calls failed or were not made while it was open)"))
        .and_then(|n| n.parse::<u64>().ok());
    // Every request of the outage after the three that opened the circuit.
    assert!(
        closed.is_some_and(|n| n + 3 >= requests && n <= requests + 250),
        "{requests} requests: {lines:#?}"
    );
}
