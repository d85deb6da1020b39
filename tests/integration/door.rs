//! The layer's door (`Control::check`, `acquire`) answers exactly as the layer does for the
//! same history, on memory and on a real redis-server; and `examples/in_handler.rs`, run as a
//! new user runs it, shares one limit between two instances.

use crate::support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use tollgate::clock::ManualClock;
use tollgate::rules::Rule;
use tollgate::store::{MemoryStore, OnStoreError, RedisStore, Store};
use tollgate::{key, Checked, Quota, RateLimitLayer};

const T0: u64 = 1_700_000_000_000_000;

/// Status, and the headers a client reads, of one answer.
type Seen = (u16, Vec<(String, String)>);

fn seen(status: u16, headers: &http::HeaderMap) -> Seen {
    let names = [
        "ratelimit-policy",
        "ratelimit",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "retry-after",
        "content-type",
    ];
    // A handler's own content type is not the limiter's: only a refusal's is compared.
    let names = if status == 200 {
        &names[..6]
    } else {
        &names[..]
    };
    let values = names
        .iter()
        .filter_map(|&n| Some((n.to_owned(), headers.get(n)?.to_str().ok()?.to_owned())))
        .collect();
    (status, values)
}

fn seen_of(checked: Checked) -> Seen {
    match checked.into_result() {
        Ok(headers) => seen(200, &headers),
        Err(refusal) => seen(refusal.status().as_u16(), refusal.headers()),
    }
}

/// "api": 3 per minute per `x-api-key` (GCRA, a burst of 3), in both header styles.
fn layer(store: impl Store, on_error: OnStoreError) -> RateLimitLayer {
    RateLimitLayer::builder()
        .rule(Rule::new("api", Quota::per_minute(3).unwrap()).key(key::Header::new("x-api-key")))
        .headers(tollgate::HeaderStyle::Both)
        .on_store_error(on_error)
        // Exact answers, not the timeout's: a loaded machine can take longer than 50 ms.
        .store_timeout(Duration::from_secs(2))
        .store(store)
        .build()
        .unwrap()
}

async fn hit(addr: SocketAddr, key: &str) -> Seen {
    let response = support::client()
        .get(format!("http://{addr}/"))
        .header("x-api-key", key)
        .send()
        .await
        .unwrap();
    let mut headers = http::HeaderMap::new();
    for (name, value) in response.headers() {
        headers.insert(name.clone(), value.clone());
    }
    seen(response.status().as_u16(), &headers)
}

/// The same history through the layer (client "by-layer") and through its door (client
/// "by-door"): the same status and headers at every step, and the same state after.
async fn door_answers_as_the_layer(store: impl Store, clock: &ManualClock) {
    let layer = layer(store, OnStoreError::Allow);
    let control = layer.control();
    let addr = support::serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await;
    let mut refused = 0;
    for step in 0..8 {
        let by_layer = hit(addr, "by-layer").await;
        let by_door = seen_of(control.check("api", "by-door", 1).await.unwrap());
        assert_eq!(by_door, by_layer, "step {step}");
        refused += u32::from(by_layer.0 == 429);
        clock.advance(Duration::from_secs(5));
    }
    // A burst of 3 (at 0, 5 and 10 s), then one every 20 s (at 20 s): 4 of 8 in 35 s.
    assert_eq!(refused, 4);
    assert_eq!(
        control.peek("api", "by-door").await.unwrap(),
        control.peek("api", "by-layer").await.unwrap()
    );
}

#[tokio::test]
async fn the_door_answers_as_the_layer_in_memory() {
    let clock = ManualClock::new(T0);
    door_answers_as_the_layer(MemoryStore::with_clock(clock.clone()), &clock).await;
}

#[tokio::test]
async fn the_door_answers_as_the_layer_on_redis() {
    let clock = ManualClock::new(T0);
    let store = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(support::unique_prefix("door_as_layer"))
        .with_clock(clock.clone());
    door_answers_as_the_layer(store, &clock).await;
}

#[tokio::test]
async fn a_store_that_is_down_is_answered_by_the_policy() {
    let dead =
        || RedisStore::from_url(&format!("redis://127.0.0.1:{}", support::free_port())).unwrap();
    let allow = layer(dead(), OnStoreError::Allow).control();
    let checked = allow.check("api", "k", 1).await.unwrap();
    assert!(checked.is_allowed() && checked.decision().is_none());
    let deny = layer(dead(), OnStoreError::Deny).control();
    let refusal = deny
        .check("api", "k", 1)
        .await
        .unwrap()
        .into_result()
        .unwrap_err();
    assert_eq!(refusal.status(), 503);
    assert_eq!(refusal.headers()["retry-after"], "1");
    let fallback = layer(dead(), OnStoreError::FallbackToMemory).control();
    for _ in 0..3 {
        assert!(fallback.check("api", "k", 1).await.unwrap().is_allowed());
    }
    assert!(!fallback.check("api", "k", 1).await.unwrap().is_allowed());
}

#[tokio::test]
async fn an_unknown_rule_is_an_error_naming_the_rules() {
    let control = layer(MemoryStore::new(), OnStoreError::Allow).control();
    let e = control.check("nope", "k", 1).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "no rule named \"nope\" (the rules in force are: api)"
    );
}

/// `acquire` waits for the quota (10 a second: one every 100 ms) up to its bound, and gives up
/// at once when the wait would pass it.
#[tokio::test]
async fn acquire_waits_up_to_its_bound() {
    let control = RateLimitLayer::builder()
        .name("jobs")
        .quota(Quota::per_second(10).unwrap().burst(1).unwrap())
        .key(key::Global)
        .build_control()
        .unwrap();
    let started = Instant::now();
    for _ in 0..4 {
        let checked = control
            .acquire("jobs", "all", 1, Duration::from_secs(1))
            .await
            .unwrap();
        assert!(checked.is_allowed());
    }
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(290), "{took:?}");
    assert!(took < Duration::from_millis(600), "{took:?}");
    let started = Instant::now();
    let checked = control
        .acquire("jobs", "all", 1, Duration::from_millis(20))
        .await
        .unwrap();
    assert!(!checked.is_allowed());
    assert!(started.elapsed() < Duration::from_millis(20));
}

/// A dropped `acquire` charges nothing: the next caller is allowed at its turn.
#[tokio::test]
async fn a_dropped_acquire_charges_nothing() {
    let control = RateLimitLayer::builder()
        .name("jobs")
        .quota(Quota::per_second(5).unwrap().burst(1).unwrap())
        .key(key::Global)
        .build_control()
        .unwrap();
    assert!(control.check("jobs", "all", 1).await.unwrap().is_allowed());
    let waiting = control.acquire("jobs", "all", 1, Duration::from_secs(5));
    assert!(tokio::time::timeout(Duration::from_millis(50), waiting)
        .await
        .is_err());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(control.check("jobs", "all", 1).await.unwrap().is_allowed());
}

/// The example's binary, which `cargo test` builds next to the test binaries (a filtered
/// `cargo test --test integration door::` does not: `cargo build --example in_handler` first).
fn in_handler() -> Command {
    let deps = std::env::current_exe().expect("test binary path");
    let path: PathBuf = deps
        .parent()
        .and_then(|d| d.parent())
        .expect("target directory")
        .join("examples")
        .join("in_handler");
    let mut command = Command::new(path);
    command.env_remove("REDIS_URL");
    command
}

/// A running example, killed when dropped.
struct Running(Child, u16);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(vars: &[(&str, &str)]) -> Running {
    let port = support::free_port();
    let mut child = in_handler()
        .env("PORT", port.to_string())
        .envs(vars.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .expect("in_handler");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("a line");
    assert_eq!(line.trim(), format!("listening on http://127.0.0.1:{port}"));
    Running(child, port)
}

async fn submit(port: u16, body: &str) -> (u16, String) {
    let response = support::client()
        .post(format!("http://127.0.0.1:{port}/submit"))
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// Two instances on one Redis with `RATE_LIMIT=5/1h`: exactly 5 of 20 posts for each user.
#[tokio::test]
async fn in_handler_shares_each_users_quota_across_two_instances() {
    let redis = support::RedisServer::start();
    let url = redis.url();
    let vars = [("REDIS_URL", url.as_str()), ("RATE_LIMIT", "5/1h")];
    let (a, b) = (start(&vars), start(&vars));
    for user in ["ann", "bob"] {
        let mut allowed = 0;
        for i in 0..20 {
            let port = if i % 2 == 0 { a.1 } else { b.1 };
            let (status, _) = submit(port, &format!("{{\"user\":\"{user}\"}}")).await;
            assert!(status == 200 || status == 429, "{status}");
            allowed += u32::from(status == 200);
        }
        assert_eq!(allowed, 5, "{user}");
    }
    let (status, reason) = submit(a.1, "{\"name\":\"ann\"}").await;
    assert_eq!(status, 400);
    assert!(reason.contains("missing field `user`"), "{reason}");
    assert_eq!(submit(b.1, "not json").await.0, 400);
}
