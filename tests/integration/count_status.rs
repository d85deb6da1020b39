//! `count_status`: a rule that counts only some responses (failed sign-ins), over real HTTP,
//! on the memory store and on a real redis-server.

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::built_in::BuiltIn;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;
use http::Method;
use tollgate::rules::{Mode, Rule, StatusMatch};
use tollgate::{
    key,
    store::{Decision, Policy, Store, StoreError},
    ConfigErrorKind, Quota, RateLimitLayer, RateLimitLayerBuilder,
};

/// `POST /signin` (200 for `password=open-sesame`, else 401) and `GET /boom` (the status in
/// the query, e.g. `/boom?503`), counting the calls that reach the handlers.
fn app(layer: RateLimitLayer, calls: Arc<AtomicUsize>) -> Router {
    let boom_calls = Arc::clone(&calls);
    Router::new()
        .route(
            "/signin",
            post(move |body: String| async move {
                calls.fetch_add(1, Ordering::SeqCst);
                if body == "password=open-sesame" {
                    (StatusCode::OK, "welcome\n")
                } else {
                    (StatusCode::UNAUTHORIZED, "wrong password\n")
                }
            }),
        )
        .route(
            "/boom",
            get(move |query: axum::extract::RawQuery| async move {
                boom_calls.fetch_add(1, Ordering::SeqCst);
                let code = query.0.and_then(|q| q.parse().ok()).unwrap_or(200);
                StatusCode::from_u16(code).unwrap_or(StatusCode::OK)
            }),
        )
        .layer(layer)
}

fn signin_rule() -> Rule {
    Rule::new("signin", Quota::per_minute(3).unwrap())
        .methods([Method::POST])
        .path("/signin")
        .count_status([401])
}

/// A layer with `rules` on the store `with_store` sets.
fn layer(
    with_store: impl FnOnce(RateLimitLayerBuilder) -> RateLimitLayerBuilder,
    rules: impl IntoIterator<Item = Rule>,
) -> RateLimitLayer {
    let mut builder = with_store(RateLimitLayer::builder())
        .key(key::Header::new("x-api-key"))
        .store_timeout(Duration::from_secs(2));
    for rule in rules {
        builder = builder.rule(rule);
    }
    builder.build().unwrap()
}

/// Signs in as `client` with `password`: the status and the `ratelimit` header.
async fn signin(addr: SocketAddr, client: &str, password: &str) -> (u16, String) {
    let r = support::client()
        .post(format!("http://{addr}/signin"))
        .header("x-api-key", client)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("password={password}"))
        .send()
        .await
        .unwrap();
    let header = r
        .headers()
        .get("ratelimit")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (r.status().as_u16(), header)
}

/// The `r=` of a `RateLimit` header.
fn remaining(header: &str) -> u64 {
    header
        .split(';')
        .find_map(|p| p.strip_prefix("r="))
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no r= in {header:?}"))
}

#[tokio::test]
async fn only_listed_statuses_are_counted_and_a_spent_client_never_reaches_the_handler() {
    for store in BuiltIn::both("count") {
        let calls = Arc::new(AtomicUsize::new(0));
        let layer = layer(|b| store.clone().on(b), [signin_rule()]);
        let addr = support::serve(app(layer.clone(), Arc::clone(&calls))).await;

        // Successful sign-ins are never counted: the peek says 2 left after this one, always.
        for _ in 0..5 {
            let (status, header) = signin(addr, "mallory", "open-sesame").await;
            assert_eq!((status, remaining(&header)), (200, 2), "{store:?}");
        }
        // Each failure is counted: the headers are the peek before it.
        let mut seen = Vec::new();
        for _ in 0..3 {
            let (status, header) = signin(addr, "mallory", "guess").await;
            seen.push((status, remaining(&header)));
        }
        assert_eq!(seen, [(401, 2), (401, 1), (401, 0)], "{store:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 8);

        // Nothing left: the usual 429 before the handler, even with the right password.
        for password in ["guess", "open-sesame"] {
            let (status, header) = signin(addr, "mallory", password).await;
            assert_eq!((status, remaining(&header)), (429, 0), "{store:?}");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 8, "{store:?}: handler called");
        let peek = layer.control().peek("signin", "mallory").await.unwrap();
        assert!(!peek.allowed, "{store:?}");

        // Another client is untouched.
        assert_eq!(
            signin(addr, "alice", "open-sesame").await,
            (200, "\"signin\";r=2;t=20".to_owned()),
            "{store:?}"
        );
    }
}

#[tokio::test]
async fn classes_count_and_other_rules_on_the_request_behave_as_before() {
    for store in BuiltIn::both("count-class") {
        let calls = Arc::new(AtomicUsize::new(0));
        let errors = Rule::new("errors", Quota::per_minute(2).unwrap())
            .path("/boom")
            .count_status([StatusMatch::class(5)]);
        let every = Rule::new("every", Quota::per_minute(100).unwrap()).path("/boom");
        let layer = layer(|b| store.clone().on(b), [errors, every]);
        let addr = support::serve(app(layer.clone(), Arc::clone(&calls))).await;
        let boom = |code: u16| {
            let client = support::client();
            async move {
                let r = client
                    .get(format!("http://{addr}/boom?{code}"))
                    .header("x-api-key", "k")
                    .send()
                    .await
                    .unwrap();
                let header = r.headers()["ratelimit"].to_str().unwrap().to_owned();
                (r.status().as_u16(), header)
            }
        };
        let mut statuses = Vec::new();
        for code in [200, 404, 503, 200, 500, 200] {
            statuses.push(boom(code).await.0);
        }
        // Two 5xx counted; then 429 before the handler.
        assert_eq!(statuses, [200, 404, 503, 200, 500, 429], "{store:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 5);
        // The plain rule counted the five that went through, and not the denied one.
        let every = layer.control().peek("every", "k").await.unwrap();
        assert_eq!(every.remaining, 100 - 5 - 1, "{store:?}");
        // Headers: the most restrictive limit, here `errors` at 0 left.
        let (status, header) = boom(200).await;
        assert_eq!(status, 429);
        assert!(header.starts_with("\"errors\";r=0;"), "{header}");
    }
}

/// A store whose checks (not its peeks) take `delay`: the count after a response is slow,
/// long enough for the client to give up first.
#[derive(Debug, Clone)]
struct SlowChecks {
    inner: BuiltIn,
    delay: Duration,
}

impl Store for SlowChecks {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        tokio::time::sleep(self.delay).await;
        self.inner.check(key, policy, cost).await
    }

    async fn peek(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.inner.peek(key, policy, cost).await
    }

    async fn reset(&self, key: &str, policy: &Policy) -> Result<(), StoreError> {
        self.inner.reset(key, policy).await
    }

    async fn block(&self, key: &str, policy: &Policy, for_: Duration) -> Result<(), StoreError> {
        self.inner.block(key, policy, for_).await
    }
}

#[tokio::test]
async fn a_failure_is_counted_even_when_the_client_hangs_up_before_the_response() {
    for store in BuiltIn::both("count-hangup") {
        let slow = SlowChecks {
            inner: store.clone(),
            delay: Duration::from_millis(300),
        };
        let calls = Arc::new(AtomicUsize::new(0));
        let layer = layer(|b| b.store(slow), [signin_rule()]);
        let addr = support::serve(app(layer.clone(), Arc::clone(&calls))).await;
        let impatient = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_millis(100))
            .build()
            .unwrap();
        // The handler answers 401 at once; the count takes 300 ms; the client leaves at 100.
        let gave_up = impatient
            .post(format!("http://{addr}/signin"))
            .header("x-api-key", "eve")
            .body("password=guess")
            .send()
            .await;
        assert!(gave_up.unwrap_err().is_timeout());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let peek = layer.control().peek("signin", "eve").await.unwrap();
        assert_eq!(peek.remaining, 1, "{store:?}: the failure was not counted");
    }
}

#[tokio::test]
async fn a_response_future_dropped_while_counting_still_counts_and_one_dropped_before_does_not() {
    use tower::{Layer, Service, ServiceExt};

    for store in BuiltIn::both("count-drop") {
        let slow = SlowChecks {
            inner: store.clone(),
            delay: Duration::from_millis(300),
        };
        let layer = layer(|b| b.store(slow), [signin_rule()]);
        // The handler answers 401 after `wait`.
        let service = |wait: Duration| {
            layer.layer(tower::service_fn(
                move |_: http::Request<String>| async move {
                    tokio::time::sleep(wait).await;
                    let mut response = http::Response::new(String::new());
                    *response.status_mut() = http::StatusCode::UNAUTHORIZED;
                    Ok::<_, std::convert::Infallible>(response)
                },
            ))
        };
        let request = || {
            http::Request::post("/signin")
                .header("x-api-key", "trudy")
                .body(String::new())
                .unwrap()
        };

        // Answered at once, dropped 100 ms into the 300 ms count: counted.
        let mut answered = service(Duration::ZERO);
        let future = answered.ready().await.unwrap().call(request());
        assert!(tokio::time::timeout(Duration::from_millis(100), future)
            .await
            .is_err());
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            layer
                .control()
                .peek("signin", "trudy")
                .await
                .unwrap()
                .remaining,
            1
        );

        // Dropped while the handler still works: nothing to count.
        let mut slow_handler = service(Duration::from_millis(300));
        let future = slow_handler.ready().await.unwrap().call(request());
        assert!(tokio::time::timeout(Duration::from_millis(100), future)
            .await
            .is_err());
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(
            layer
                .control()
                .peek("signin", "trudy")
                .await
                .unwrap()
                .remaining,
            1,
            "{store:?}"
        );

        // And a response that waits for its count carries it: the next request sees it.
        let response = service(Duration::ZERO).oneshot(request()).await.unwrap();
        assert_eq!(response.status(), 401);
        assert_eq!(
            layer
                .control()
                .peek("signin", "trudy")
                .await
                .unwrap()
                .remaining,
            0
        );
    }
}

#[test]
fn bad_count_status_is_a_config_error_naming_the_rule() {
    let build = |rule: Rule| RateLimitLayer::builder().rule(rule).build().unwrap_err();
    let e =
        build(Rule::new("signin", Quota::per_minute(3).unwrap()).count_status(Vec::<u16>::new()));
    assert_eq!(e.kind(), ConfigErrorKind::Rule);
    assert!(
        e.message()
            .starts_with("rule \"signin\": count_status is an empty list"),
        "{e}"
    );
    let e = build(Rule::new("signin", Quota::per_minute(3).unwrap()).count_status([401, 99]));
    assert_eq!(
        e.message(),
        "rule \"signin\": count_status: 99 is not an HTTP status (use codes from 100 to 599 \
         and classes \"1xx\" to \"5xx\", e.g. [401, 403] or \"4xx\")"
    );
    let e = build(
        Rule::new("signin", Quota::per_minute(3).unwrap()).count_status([StatusMatch::class(6)]),
    );
    assert!(e.message().contains("\"6xx\" is not an HTTP status"), "{e}");
    let e = build(
        Rule::new("signin", Quota::per_minute(3).unwrap())
            .mode(Mode::Delay)
            .max_delay(Duration::from_secs(1))
            .count_status([401]),
    );
    assert!(
        e.message()
            .starts_with("rule \"signin\": count_status cannot be used in delay mode"),
        "{e}"
    );
}
