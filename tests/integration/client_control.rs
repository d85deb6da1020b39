//! Acting on one client over real HTTP, on the memory store and on a real redis-server:
//! `block_for` after a breach, and the layer's `reset`, `block` and `refund`.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use tollgate::rules::{Mode, Rule};
use tollgate::store::{MemoryStore, RedisStore};
use tollgate::{
    clock::ManualClock, key, store::Store, ConfigErrorKind, ControlError, Quota, RateLimitLayer,
};

/// Starts the time of every test: a realistic µs timestamp.
const T0: u64 = 1_700_000_000_000_000;

async fn serve(layer: RateLimitLayer) -> SocketAddr {
    support::serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await
}

/// One request as client `user`: status, `Retry-After` (or "-") and `RateLimit`.
async fn hit(addr: SocketAddr, user: &str) -> (u16, String, String) {
    let response = support::client()
        .get(format!("http://{addr}/"))
        .header("x-user", user)
        .send()
        .await
        .unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map_or("-".to_owned(), |v| v.to_str().unwrap().to_owned())
    };
    (
        response.status().as_u16(),
        header("retry-after"),
        header("ratelimit"),
    )
}

fn answer(status: u16, retry_after: &str, ratelimit: &str) -> (u16, String, String) {
    (status, retry_after.to_owned(), ratelimit.to_owned())
}

/// "login": 2 per minute by GCRA (one back every 30 s), then blocked for 10 minutes.
fn login_layer(store: impl Store) -> RateLimitLayer {
    RateLimitLayer::builder()
        .rule(
            Rule::new("login", Quota::per_minute(2).unwrap())
                .key(key::Header::new("x-user"))
                .block_for(Duration::from_secs(600)),
        )
        .store(store)
        // Exact answers, not the timeout's: a loaded machine can take longer than 50 ms.
        .store_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// The client is denied for the whole block although its quota refills after a minute, and
/// `Retry-After` counts the block down; then it starts afresh. `a` and `b` are two instances
/// sharing the store's state (the same layer twice for the memory store).
async fn block_for_outlasts_the_refill(a: SocketAddr, b: SocketAddr, clock: &ManualClock) {
    assert_eq!(hit(a, "eve").await, answer(200, "-", "\"login\";r=1;t=30"));
    assert_eq!(hit(a, "eve").await, answer(200, "-", "\"login\";r=0;t=60"));
    // The breach: blocked from now for 600 s.
    assert_eq!(
        hit(a, "eve").await,
        answer(429, "600", "\"login\";r=0;t=600")
    );
    // Another client is not blocked.
    assert_eq!(hit(b, "bob").await, answer(200, "-", "\"login\";r=1;t=30"));

    // A minute later the quota would be whole again; the block holds, on both instances.
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        hit(b, "eve").await,
        answer(429, "540", "\"login\";r=0;t=540")
    );
    assert_eq!(
        hit(a, "eve").await,
        answer(429, "540", "\"login\";r=0;t=540")
    );
    // A denial during the block does not make it longer.
    clock.advance(Duration::from_secs(539));
    assert_eq!(hit(b, "eve").await, answer(429, "1", "\"login\";r=0;t=1"));

    // When it ends the client starts afresh.
    clock.advance(Duration::from_secs(1));
    assert_eq!(hit(b, "eve").await, answer(200, "-", "\"login\";r=1;t=30"));
    assert_eq!(hit(a, "eve").await, answer(200, "-", "\"login\";r=0;t=60"));
}

#[tokio::test]
async fn block_for_outlasts_the_refill_in_memory() {
    let clock = ManualClock::new(T0);
    let addr = serve(login_layer(MemoryStore::with_clock(clock.clone()))).await;
    block_for_outlasts_the_refill(addr, addr, &clock).await;
}

#[tokio::test]
async fn block_for_is_shared_by_two_instances_on_redis() {
    let clock = ManualClock::new(T0);
    let prefix = support::unique_prefix("block-for");
    let store = || {
        RedisStore::from_url(&support::shared_redis_url())
            .unwrap()
            .prefix(prefix.clone())
            .with_clock(clock.clone())
    };
    let a = serve(login_layer(store())).await;
    let b = serve(login_layer(store())).await;
    block_for_outlasts_the_refill(a, b, &clock).await;

    // The block is one marker in the client's own key, with a TTL.
    let mut redis = support::redis_connection(&support::shared_redis_url());
    let blocked = format!("{prefix}:login:gcra:{{eve}}");
    assert_eq!(
        hit(a, "eve").await,
        answer(429, "600", "\"login\";r=0;t=600")
    );
    let value: String = deadpool_redis::redis::cmd("GET")
        .arg(&blocked)
        .query(&mut redis)
        .unwrap();
    assert_eq!(value, format!("b{}", T0 + 600_000_000 * 2));
    let ttl: i64 = deadpool_redis::redis::cmd("PTTL")
        .arg(&blocked)
        .query(&mut redis)
        .unwrap();
    assert!((1..=600_000).contains(&ttl), "{ttl}");
}

/// A stacked request denied by one rule blocks that rule's key only.
#[tokio::test]
async fn only_the_denying_rule_blocks() {
    let clock = ManualClock::new(T0);
    let prefix = support::unique_prefix("stacked-block");
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::new("burst", Quota::per_second(1).unwrap())
                .key(key::Header::new("x-user"))
                .block_for(Duration::from_secs(30)),
        )
        .rule(
            Rule::new("hourly", Quota::per_hour(100).unwrap())
                .key(key::Header::new("x-user"))
                .block_for(Duration::from_secs(3600)),
        )
        .store(
            RedisStore::from_url(&support::shared_redis_url())
                .unwrap()
                .prefix(prefix.clone())
                .with_clock(clock.clone()),
        )
        .build()
        .unwrap();
    let addr = serve(layer).await;
    assert_eq!(
        hit(addr, "amy").await,
        answer(200, "-", "\"burst\";r=0;t=1")
    );
    assert_eq!(
        hit(addr, "amy").await,
        answer(429, "30", "\"burst\";r=0;t=30")
    );
    // The burst rule's key holds the block; the hourly one still the state of one request.
    let mut redis = support::redis_connection(&support::shared_redis_url());
    let get = |redis: &mut deadpool_redis::redis::Connection, rule: &str| -> String {
        deadpool_redis::redis::cmd("GET")
            .arg(format!("{prefix}:{rule}:gcra:{{amy}}"))
            .query(redis)
            .unwrap()
    };
    assert_eq!(get(&mut redis, "burst"), format!("b{}", T0 + 30_000_000));
    assert_eq!(get(&mut redis, "hourly"), (T0 + 36_000_000).to_string());
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        hit(addr, "amy").await,
        answer(200, "-", "\"burst\";r=0;t=1")
    );
    assert_eq!(get(&mut redis, "hourly"), (T0 + 72_000_000).to_string());
}

/// "api": 3 per minute by GCRA (one back every 20 s), keyed by `x-user`.
fn api_layer(store: impl Store) -> RateLimitLayer {
    RateLimitLayer::builder()
        .rule(Rule::new("api", Quota::per_minute(3).unwrap()).key(key::Header::new("x-user")))
        .store(store)
        .store_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// `refund`, `reset` and `block` through the layer, each seen by the next request (also when
/// the layer's cache of denials holds a denial of the client).
async fn reset_block_and_refund(layer: RateLimitLayer, clock: &ManualClock) {
    let addr = serve(layer.clone()).await;
    for remaining in ["r=2;t=20", "r=1;t=40", "r=0;t=60"] {
        assert_eq!(
            hit(addr, "ann").await,
            answer(200, "-", &format!("\"api\";{remaining}"))
        );
    }
    assert_eq!(
        hit(addr, "ann").await,
        answer(429, "20", "\"api\";r=0;t=60")
    );

    // Two back: the TAT moves back 40 s.
    layer.control().refund("api", "ann", 2).await.unwrap();
    assert_eq!(hit(addr, "ann").await, answer(200, "-", "\"api\";r=1;t=40"));
    assert_eq!(hit(addr, "ann").await, answer(200, "-", "\"api\";r=0;t=60"));
    assert_eq!(
        hit(addr, "ann").await,
        answer(429, "20", "\"api\";r=0;t=60")
    );
    // More than was used gives back no more than a whole quota.
    layer.control().refund("api", "ann", 10).await.unwrap();
    assert_eq!(hit(addr, "ann").await, answer(200, "-", "\"api\";r=2;t=20"));

    // A reset forgets everything.
    assert_eq!(hit(addr, "ann").await, answer(200, "-", "\"api\";r=1;t=40"));
    layer.control().reset("api", "ann").await.unwrap();
    assert_eq!(hit(addr, "ann").await, answer(200, "-", "\"api\";r=2;t=20"));

    // A block of 90 s: denied with the rest of it, then a whole quota.
    layer
        .control()
        .block("api", "ann", Duration::from_secs(90))
        .await
        .unwrap();
    // A peek sees the block (the store's answer: the block forgot any cached denial).
    let peek = layer.control().peek("api", "ann").await.unwrap();
    assert_eq!(
        (peek.allowed, peek.remaining, peek.retry_after),
        (false, 0, Some(Duration::from_secs(90)))
    );
    assert_eq!(
        hit(addr, "ann").await,
        answer(429, "90", "\"api\";r=0;t=90")
    );
    // A refund does not lift a block.
    layer.control().refund("api", "ann", 3).await.unwrap();
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        hit(addr, "ann").await,
        answer(429, "60", "\"api\";r=0;t=60")
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(hit(addr, "ann").await, answer(200, "-", "\"api\";r=2;t=20"));
    // A reset lifts one.
    layer
        .control()
        .block("api", "ann", Duration::from_secs(90))
        .await
        .unwrap();
    assert_eq!(
        hit(addr, "ann").await,
        answer(429, "90", "\"api\";r=0;t=90")
    );
    layer.control().reset("api", "ann").await.unwrap();
    assert_eq!(hit(addr, "ann").await, answer(200, "-", "\"api\";r=2;t=20"));

    // Keys are sanitized as requests' keys are: a key with braces is digested alike.
    layer
        .control()
        .block("api", "x{y}", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(hit(addr, "x{y}").await, answer(429, "5", "\"api\";r=0;t=5"));
    assert_eq!(
        hit(addr, "x{z}").await,
        answer(200, "-", "\"api\";r=2;t=20")
    );

    // An unknown rule is an error that names it.
    let error = layer.control().reset("apj", "ann").await.unwrap_err();
    assert!(matches!(&error, ControlError::UnknownRule { rule, .. } if rule == "apj"));
    assert_eq!(
        error.to_string(),
        "no rule named \"apj\" (the rules in force are: api)"
    );
}

#[tokio::test]
async fn reset_block_and_refund_in_memory() {
    let clock = ManualClock::new(T0);
    let layer = api_layer(MemoryStore::with_clock(clock.clone()));
    reset_block_and_refund(layer, &clock).await;
}

#[tokio::test]
async fn reset_block_and_refund_on_redis() {
    let clock = ManualClock::new(T0);
    let store = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(support::unique_prefix("control"))
        .with_clock(clock.clone());
    reset_block_and_refund(api_layer(store), &clock).await;
}

/// A store of the user's has no refund (it is not part of `Store`): it says so.
#[tokio::test]
async fn a_store_without_them_says_so() {
    use tollgate::store::{Decision, Policy, StoreError};

    #[derive(Debug)]
    struct OnlyChecks(MemoryStore);
    impl Store for OnlyChecks {
        async fn check(
            &self,
            key: &str,
            policy: &Policy,
            cost: u32,
        ) -> Result<Decision, StoreError> {
            self.0.check(key, policy, cost).await
        }
        async fn peek(
            &self,
            key: &str,
            policy: &Policy,
            cost: u32,
        ) -> Result<Decision, StoreError> {
            self.0.peek(key, policy, cost).await
        }
        async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
            self.0.reset(key, policy).await
        }
        async fn block(
            &self,
            key: &str,
            policy: &Policy,
            for_: Duration,
        ) -> Result<(), StoreError> {
            self.0.block(key, policy, for_).await
        }
    }
    let layer = api_layer(OnlyChecks(MemoryStore::new()));
    let error = layer.control().refund("api", "ann", 1).await.unwrap_err();
    assert_eq!(
        error.to_string(),
        "rate limit store does not support refund"
    );
}

#[test]
fn block_for_is_refused_in_delay_mode_and_out_of_range() {
    let build = |rule: Rule| RateLimitLayer::builder().rule(rule).build().unwrap_err();
    let delay = build(
        Rule::new("export", Quota::per_second(2).unwrap())
            .mode(Mode::Delay)
            .max_delay(Duration::from_secs(1))
            .block_for(Duration::from_secs(60)),
    );
    assert_eq!(delay.kind(), ConfigErrorKind::Rule);
    assert!(
        delay
            .to_string()
            .contains("block_for cannot be used in delay mode"),
        "{delay}"
    );
    let zero = build(Rule::new("api", Quota::per_second(2).unwrap()).block_for(Duration::ZERO));
    assert!(
        zero.to_string().contains("block_for 0ns is out of range"),
        "{zero}"
    );
}
