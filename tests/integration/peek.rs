//! `peek`: the decision a request would get, consuming nothing, from the store and from the
//! layer, on the memory store and on a real redis-server.

use crate::support;

use std::time::Duration;

use crate::built_in::BuiltIn;
use axum::routing::get;
use axum::Router;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tollgate::store::{MemoryStore, RedisStore};
use tollgate::{
    clock::ManualClock,
    key,
    store::{Policy, Store},
    Algorithm, ControlError, Quota, RateLimitLayer,
};

#[tokio::test]
async fn memory_and_redis_peek_alike_for_the_same_history_and_consume_nothing() {
    let url = support::shared_redis_url();
    let mut conn = support::redis_connection(&url);
    // Without and with blocks (3 s after each denial, which this history meets often): a
    // blocked client peeks as its block, in both stores.
    for (algorithm, block_for) in Algorithm::ALL
        .into_iter()
        .flat_map(|a| [(a, None), (a, Some(Duration::from_secs(3)))])
    {
        let clock = ManualClock::new(1_700_000_000_000_000);
        let prefix = support::unique_prefix("peek-diff");
        let redis = RedisStore::from_url(&url)
            .unwrap()
            .prefix(prefix.as_str())
            .with_clock(clock.clone());
        let memory = MemoryStore::with_clock(clock.clone());
        let mut policy = Policy::new(
            "p",
            Quota::new(5, Duration::from_secs(10)).unwrap(),
            algorithm,
        )
        .unwrap();
        if let Some(block_for) = block_for {
            policy = policy.with_block_for(block_for);
        }
        let mut rng = SmallRng::seed_from_u64(0x9ee4 ^ algorithm as u64);

        // A peek of a client never seen writes nothing.
        assert_eq!(
            redis.peek("a", &policy, 1).await.unwrap(),
            memory.peek("a", &policy, 1).await.unwrap()
        );
        let keys: Vec<String> = deadpool_redis::redis::cmd("KEYS")
            .arg(format!("{prefix}:*"))
            .query(&mut conn)
            .unwrap();
        assert!(keys.is_empty(), "{algorithm}: {keys:?}");

        for step in 0..200 {
            clock.advance(Duration::from_millis(rng.random_range(0..1_500)));
            let cost = rng.random_range(1..4);
            // Peeks twice in a row agree with each other, between stores, and with the check
            // that follows them.
            let m = memory.peek("a", &policy, cost).await.unwrap();
            let r = redis.peek("a", &policy, cost).await.unwrap();
            assert_eq!(m, r, "{algorithm} {block_for:?} step {step} cost {cost}");
            assert_eq!(r, redis.peek("a", &policy, cost).await.unwrap());
            if rng.random_bool(0.7) {
                let checked = redis.check("a", &policy, cost).await.unwrap();
                if block_for.is_some() && !r.allowed {
                    // The check that denies sets a block (the peek sets none), or meets one.
                    assert!(!checked.allowed && checked.remaining == 0, "{algorithm}");
                    assert!(checked.retry_after <= block_for, "{algorithm}");
                } else {
                    assert_eq!(
                        checked, r,
                        "{algorithm} step {step}: the check after the peek"
                    );
                }
                assert_eq!(memory.check("a", &policy, cost).await.unwrap(), checked);
            }
        }
    }
}

#[tokio::test]
async fn a_redis_peek_is_one_script_call_that_writes_nothing() {
    // A redis-server of its own, so that the command counts are this test's alone.
    let server = support::RedisServer::start();
    let mut conn = support::redis_connection(&server.url());
    let store = RedisStore::from_url(&server.url()).unwrap();
    for algorithm in Algorithm::ALL {
        let policy = Policy::new("p", Quota::per_minute(3).unwrap(), algorithm).unwrap();
        store.check("k", &policy, 1).await.unwrap();
        let state_key = store.state_key(&policy, "k");
        let dump = |conn: &mut deadpool_redis::redis::Connection| -> Vec<u8> {
            deadpool_redis::redis::cmd("DUMP")
                .arg(&state_key)
                .query(conn)
                .unwrap()
        };
        let before = dump(&mut conn);
        let scripts = |conn: &mut _| {
            support::command_calls(conn, "evalsha") + support::command_calls(conn, "eval")
        };
        let calls = scripts(&mut conn);
        let peek = store.peek("k", &policy, 1).await.unwrap();
        assert_eq!(scripts(&mut conn) - calls, 1, "{algorithm}");
        assert!(peek.allowed, "{algorithm}");
        assert_eq!(peek.remaining, 1, "{algorithm}");
        assert_eq!(dump(&mut conn), before, "{algorithm}: the peek wrote");
        assert_eq!(store.check("k", &policy, 1).await.unwrap().remaining, 1);
    }
}

fn app(layer: RateLimitLayer) -> Router {
    Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(layer)
}

/// A layer limiting `/` to 5/min per `x-api-key`, with a tier of 10/min for keys `vip-…`.
fn layer(store: BuiltIn) -> RateLimitLayer {
    store
        .on(RateLimitLayer::builder())
        .name("api")
        .quota(Quota::per_minute(5).unwrap())
        .key(key::Header::new("x-api-key"))
        .store_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

async fn get_as(addr: std::net::SocketAddr, client_key: &str) -> (u16, String) {
    let r = support::client()
        .get(format!("http://{addr}/"))
        .header("x-api-key", client_key)
        .send()
        .await
        .unwrap();
    let header = r.headers()["ratelimit"].to_str().unwrap().to_owned();
    (r.status().as_u16(), header)
}

#[tokio::test]
async fn the_layer_peeks_a_client_by_its_raw_key_on_both_stores() {
    for store in BuiltIn::both("peek-layer") {
        let layer = layer(store.clone());
        let addr = support::serve(app(layer.clone())).await;
        for _ in 0..3 {
            assert_eq!(get_as(addr, "alice").await.0, 200);
        }
        // Peeking, however often, leaves alice 2 of 5.
        for _ in 0..3 {
            let peek = layer.control().peek("api", "alice").await.unwrap();
            assert!(peek.allowed, "{store:?}");
            assert_eq!((peek.limit, peek.remaining), (5, 1), "{store:?}");
        }
        assert_eq!(
            get_as(addr, "alice").await,
            (200, "\"api\";r=1;t=48".to_owned()),
            "{store:?}"
        );
        assert_eq!(get_as(addr, "alice").await.0, 200);
        let spent = layer.control().peek("api", "alice").await.unwrap();
        assert!(!spent.allowed);
        assert_eq!(spent.remaining, 0);
        assert_eq!(spent.retry_after.map(|d| d.as_secs()), Some(11));
        assert_eq!(get_as(addr, "alice").await.0, 429);
        // Bob is untouched; a key too long for the store is digested as a request's is.
        assert_eq!(
            layer.control().peek("api", "bob").await.unwrap().remaining,
            4
        );
        let long = "x".repeat(300);
        assert_eq!(get_as(addr, &long).await.0, 200);
        assert_eq!(
            layer.control().peek("api", &long).await.unwrap().remaining,
            3
        );

        match layer.control().peek("nope", "alice").await {
            Err(e @ ControlError::UnknownRule { .. }) => assert_eq!(
                e.to_string(),
                "no rule named \"nope\" (the rules in force are: api)"
            ),
            other => panic!("{other:?}"),
        }
    }
}
