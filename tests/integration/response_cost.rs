//! Rules priced by their response (`Rule::cost_from_response`), on every store and every
//! algorithm: a request reserves its estimate, and its response's cost settles it (a header
//! before the response goes out, a trailer when a streamed body ends); a dropped body, a
//! failed body and a malformed cost settle at the estimate; a cost past the quota is charged
//! while over and closes the budget.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tollgate::rules::{ResponseCost, Rule};
use tollgate::store::{MemcachedStore, MemoryStore, RedisStore, StateBackedStore};
use tollgate::{key, Algorithm, Quota, RateLimitLayer, RateLimitLayerBuilder};
use tower::{Layer, Service, ServiceExt};

use crate::state_store::VersionedMap;
use crate::support::memcached::shared_memcached_url;
use crate::support::{shared_redis_url, unique_prefix};

/// A body of one chunk, then `x-usage` as a trailer (none when `usage` is `None`).
struct Streamed {
    chunk: Option<Bytes>,
    usage: Option<Option<String>>,
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(chunk) = self.chunk.take() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        let Some(Some(usage)) = self.usage.take() else {
            return Poll::Ready(None);
        };
        let mut trailers = HeaderMap::new();
        trailers.insert("x-usage", HeaderValue::from_str(&usage).unwrap());
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }
}

/// The upstream: answers with the request's `x-answer` as its `x-usage` header, or, with
/// `x-stream`, as a trailer after one chunk.
fn upstream(
) -> impl Service<Request<()>, Response = Response<Streamed>, Error = Infallible, Future: Send> + Clone
{
    tower::service_fn(|request: Request<()>| async move {
        let answer = (request.headers().get("x-answer")).map(|v| v.to_str().unwrap().to_owned());
        let streamed = request.headers().contains_key("x-stream");
        let mut response = Response::new(Streamed {
            chunk: Some(Bytes::from_static(b"chunk")),
            usage: Some(answer.clone().filter(|_| streamed)),
        });
        if let Some(answer) = answer.filter(|_| !streamed) {
            (response.headers_mut()).insert("x-usage", HeaderValue::from_str(&answer).unwrap());
        }
        Ok::<_, Infallible>(response)
    })
}

/// `RateLimit`'s `r`, what is left.
fn remaining(headers: &HeaderMap) -> u64 {
    let value = headers["ratelimit"].to_str().unwrap();
    let r = value.split(";r=").nth(1).unwrap();
    r.split(';').next().unwrap().parse().unwrap()
}

/// A request of `key` reserving `estimate`, whose upstream answers `usage` (streamed or not).
fn request(key: &str, estimate: u32, usage: Option<&str>, streamed: bool) -> Request<()> {
    let mut request = Request::builder()
        .header("x-api-key", key)
        .header("x-estimate", estimate.to_string());
    if let Some(usage) = usage {
        request = request.header("x-answer", usage);
    }
    if streamed {
        request = request.header("x-stream", "1");
    }
    request.body(()).unwrap()
}

/// The stores a priced rule runs on: memory, Redis, memcached, and a store of one's own on
/// the state contract.
fn stores(test: &str) -> Vec<(&'static str, Builder)> {
    let builder = || RateLimitLayer::builder().key(key::Header::new("x-api-key"));
    let redis = RedisStore::from_url(&shared_redis_url())
        .unwrap()
        .prefix(unique_prefix(test));
    let memcached = MemcachedStore::from_url(&shared_memcached_url())
        .unwrap()
        .prefix(unique_prefix(test));
    let state = VersionedMap::default();
    vec![
        (
            "memory",
            Box::new(move || builder().store(MemoryStore::new())),
        ),
        ("redis", Box::new(move || builder().store(redis.clone()))),
        (
            "memcached",
            Box::new(move || builder().store(memcached.clone())),
        ),
        (
            "state",
            Box::new(move || builder().store(StateBackedStore::new(state.clone()))),
        ),
    ]
}

/// A layer's builder on one store.
type Builder = Box<dyn Fn() -> RateLimitLayerBuilder>;

/// What a priced rule does on every store and algorithm: with 1000 a day (nothing refills
/// within the test), each step's remaining is the budget less the settled costs.
#[tokio::test]
async fn every_store_and_algorithm_settles_at_the_cost_the_response_tells() {
    for (store, builder) in stores("priced") {
        for algorithm in Algorithm::ALL {
            let rule = Rule::new("tokens", Quota::per_day(1000).unwrap())
                .algorithm(algorithm)
                .cost_from_response(
                    ResponseCost::header("x-usage")
                        .estimate_header("x-estimate")
                        .estimate(100),
                );
            let layer = builder().rule(rule).build().unwrap();
            let mut service = layer.layer(upstream());
            let key = format!("{store}-{algorithm}");
            let at = format!("{store}, {algorithm}");
            let mut call = async |request: Request<()>| {
                service.ready().await.unwrap().call(request).await.unwrap()
            };
            // Settled before the response goes out: its headers tell what is left after it.
            let r = call(request(&key, 100, Some("30"), false)).await;
            assert_eq!(remaining(r.headers()), 970, "{at}");
            let r = call(request(&key, 100, Some("250"), false)).await;
            assert_eq!(remaining(r.headers()), 720, "{at}");
            // Streamed: the head tells the reservation, the trailers the settlement.
            let r = call(request(&key, 100, Some("50"), true)).await;
            assert_eq!(remaining(r.headers()), 620, "{at}");
            let collected = r.into_body().collect().await.unwrap();
            let trailers = collected.trailers().unwrap();
            assert_eq!(trailers["x-usage"], "50", "{at}");
            assert_eq!(remaining(trailers), 670, "{at}");
            // A body dropped unread: its estimate.
            let r = call(request(&key, 60, Some("5"), true)).await;
            drop(r);
            // Settled in a task of its own.
            tokio::time::sleep(Duration::from_millis(50)).await;
            // A body without the trailer, and a malformed cost: the estimate.
            let r = call(request(&key, 40, None, true)).await;
            r.into_body().collect().await.unwrap();
            let r = call(request(&key, 30, Some("-5"), false)).await;
            // What is left after its reservation (settled at it when its body ends).
            assert_eq!(remaining(r.headers()), 670 - 60 - 40 - 30, "{at}");
            let r = call(request(&key, 1, Some("0"), false)).await;
            assert_eq!(remaining(r.headers()), 540, "{at}");
            // Past the budget, and clamped to max_cost (the quota): charged while over, the
            // budget is closed; the refusal says nothing is left.
            let r = call(request(&key, 1, Some("99999999999999999999999"), false)).await;
            assert_eq!(
                (r.status().as_u16(), remaining(r.headers())),
                (200, 0),
                "{at}"
            );
            let r = call(request(&key, 1, Some("0"), false)).await;
            assert_eq!(
                (r.status().as_u16(), remaining(r.headers())),
                (429, 0),
                "{at}"
            );
        }
    }
}

/// A request refused at admission reaches no upstream and settles nothing; an estimate
/// larger than what is left is refused although the real cost might have fit.
#[tokio::test]
async fn a_request_is_admitted_only_while_its_estimate_fits() {
    let rule = Rule::new("tokens", Quota::per_day(300).unwrap())
        .algorithm(Algorithm::FixedWindow)
        .cost_from_response(ResponseCost::header("x-usage").estimate_header("x-estimate"));
    let layer = RateLimitLayer::builder()
        .key(key::Header::new("x-api-key"))
        .rule(rule)
        .build()
        .unwrap();
    let mut service = layer.layer(upstream());
    let mut call =
        async |request: Request<()>| service.ready().await.unwrap().call(request).await.unwrap();
    let r = call(request("k", 200, Some("200"), false)).await;
    assert_eq!((r.status().as_u16(), remaining(r.headers())), (200, 100));
    let r = call(request("k", 101, Some("1"), false)).await;
    assert_eq!((r.status().as_u16(), remaining(r.headers())), (429, 100));
    let r = call(request("k", 100, Some("100"), false)).await;
    assert_eq!((r.status().as_u16(), remaining(r.headers())), (200, 0));
    // A malformed estimate is the client's to fix: 400.
    let mut bad = request("k", 1, Some("1"), false);
    bad.headers_mut()
        .insert("x-estimate", HeaderValue::from_static("lots"));
    assert_eq!(call(bad).await.status(), 400);
}

/// What does not go with a cost from the response is refused at build.
#[test]
fn a_priced_rule_refuses_what_does_not_go_with_it() {
    let priced = || {
        Rule::new("tokens", Quota::per_minute(100).unwrap())
            .cost_from_response(ResponseCost::header("x-usage"))
    };
    for (rule, what) in [
        (priced().cost_header("x-cost"), "cost or cost_header"),
        (priced().count_status([500]), "count_status"),
        (priced().block_for(Duration::from_secs(1)), "block_for"),
        (priced().lease(tollgate::rules::Lease::Auto), "lease"),
    ] {
        let e = RateLimitLayer::builder().rule(rule).build().unwrap_err();
        assert!(
            e.to_string().starts_with(&format!(
                "rule \"tokens\": cost_from_response does not work with {what}"
            )),
            "{e}"
        );
    }
    let e = RateLimitLayer::builder()
        .rule(Rule::in_flight("f", 2).cost_from_response(ResponseCost::header("x-usage")))
        .build()
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("a cost from the response applies to a rate"),
        "{e}"
    );
}

/// Work priced after it is done, outside the layer (a job, a WebSocket): reserved through the
/// door, settled at what it cost.
#[tokio::test]
async fn the_door_reserves_and_settles_too() {
    let rule = Rule::new("tokens", Quota::per_day(1000).unwrap())
        .algorithm(Algorithm::FixedWindow)
        .cost_from_response(ResponseCost::header("x-usage").estimate(100));
    let layer = RateLimitLayer::builder()
        .key(key::Header::new("x-api-key"))
        .rule(rule)
        .build()
        .unwrap();
    let control = layer.control();
    let checked = control.check("tokens", "job", 100).await.unwrap();
    assert_eq!(checked.decision().unwrap().remaining, 900);
    assert_eq!(
        control.settle("tokens", "job", 100, 30).await.unwrap(),
        None
    );
    // A peek is a request of cost 1: 970 left before it.
    assert_eq!(control.peek("tokens", "job").await.unwrap().remaining, 969);
    let charged = control
        .settle("tokens", "job", 100, 1100)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((charged.allowed, charged.remaining), (false, 0));
    assert!(!control
        .check("tokens", "job", 1)
        .await
        .unwrap()
        .is_allowed());
}

/// A layer of one priced rule (1000 tokens a day, a fixed window, estimate 100) over `inner`.
fn priced_over<S>(cost: ResponseCost, inner: S) -> tollgate::RateLimit<S> {
    let rule = Rule::new("tokens", Quota::per_day(1000).unwrap())
        .algorithm(Algorithm::FixedWindow)
        .cost_from_response(cost.estimate(100));
    let layer = RateLimitLayer::builder()
        .key(key::Header::new("x-api-key"))
        .rule(rule)
        .build()
        .unwrap();
    layer.layer(inner)
}

/// `x-api-key: k`, and nothing else.
fn keyed() -> Request<()> {
    Request::builder()
        .header("x-api-key", "k")
        .body(())
        .unwrap()
}

/// The cost read from the body's last event that names it, or from the response head; a body
/// that fails pays its estimate.
#[tokio::test]
async fn the_cost_comes_from_the_last_event_or_the_head_and_a_failed_body_pays_its_estimate() {
    // Server-sent events, the usage in the last one.
    let events = tower::service_fn(|_: Request<()>| async {
        let body = "data: {\"n\":1}\n\ndata: {\"usage\":42}\n\n";
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from(body))))
    });
    let usage = |chunk: &Bytes| {
        let text = std::str::from_utf8(chunk).ok()?;
        let rest = text
            .rsplit("\"usage\":")
            .next()
            .filter(|_| text.contains("\"usage\":"))?;
        rest.split('}').next()?.parse().ok()
    };
    let mut service = priced_over(ResponseCost::from_body(usage), events);
    let r = service.ready().await.unwrap().call(keyed()).await.unwrap();
    assert_eq!(remaining(r.headers()), 900);
    let trailers = r.into_body().collect().await.unwrap();
    assert!(trailers.trailers().is_none());
    let r = service.ready().await.unwrap().call(keyed()).await.unwrap();
    assert_eq!(remaining(r.headers()), 1000 - 42 - 100);

    // From the head: a server error costs nothing, anything else 10.
    let erring = tower::service_fn(|request: Request<()>| async move {
        let mut response = Response::new(String::new());
        if request.headers().contains_key("x-fail") {
            *response.status_mut() = http::StatusCode::BAD_GATEWAY;
        }
        Ok::<_, Infallible>(response)
    });
    let by_status = |head: &http::response::Parts| match head.status.is_server_error() {
        true => Some(0),
        false => Some(10),
    };
    let mut service = priced_over(ResponseCost::from_head(by_status), erring);
    let r = service.ready().await.unwrap().call(keyed()).await.unwrap();
    assert_eq!(remaining(r.headers()), 990);
    let mut failing = keyed();
    failing
        .headers_mut()
        .insert("x-fail", HeaderValue::from_static("1"));
    let r = service.ready().await.unwrap().call(failing).await.unwrap();
    assert_eq!((r.status().as_u16(), remaining(r.headers())), (502, 990));

    // A body that fails before its trailer: the estimate.
    let broken =
        tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(Failing)) });
    let mut service = priced_over(ResponseCost::header("x-usage"), broken);
    let r = service.ready().await.unwrap().call(keyed()).await.unwrap();
    assert!(r.into_body().collect().await.is_err());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let r = service.ready().await.unwrap().call(keyed()).await.unwrap();
    assert_eq!(remaining(r.headers()), 1000 - 100 - 100);
}

/// A body that fails at once.
struct Failing;

impl Body for Failing {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::other("upstream went away"))))
    }
}
