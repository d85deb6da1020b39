//! When a request is counted: in `call` when the store decides at once (the memory store),
//! and only once its response future runs when it waits for Redis.

use crate::support;

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tollgate::store::{MemoryStore, RedisStore, Store};
use tollgate::{key, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

use crate::built_in::BuiltIn;

fn request() -> Request<()> {
    Request::builder()
        .header("x-api-key", "client-1")
        .body(())
        .unwrap()
}

/// A service limited to 2 requests a minute per `x-api-key`, on `store`.
fn limited<S: Store>(
    store: S,
) -> impl Service<Request<()>, Response = Response<impl Sized>, Error = Infallible> + Clone {
    let layer = RateLimitLayer::builder()
        .quota(Quota::per_minute(2).unwrap())
        .key(key::Header::new("x-api-key"))
        .store(store)
        .store_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    layer.layer(crate::ok_service())
}

/// Calls the service and drops the response future without polling it.
async fn call_and_drop<S: Service<Request<()>> + Clone>(svc: &S) {
    let mut svc = svc.clone();
    let Ok(ready) = svc.ready().await else {
        panic!("the service is not ready");
    };
    drop(ready.call(request()));
}

async fn status<S: Service<Request<()>, Response = Response<B>> + Clone, B>(svc: &S) -> StatusCode {
    match svc.clone().oneshot(request()).await {
        Ok(response) => response.status(),
        Err(_) => panic!("the service failed"),
    }
}

#[tokio::test]
async fn the_memory_store_counts_a_request_in_call() {
    let svc = limited(MemoryStore::new());
    call_and_drop(&svc).await;
    call_and_drop(&svc).await;
    // Both were decided, and counted, before their futures were dropped.
    assert_eq!(status(&svc).await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_request_waiting_for_redis_counts_nothing_until_its_future_runs() {
    let store = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(support::unique_prefix("decided_at_once"));
    let svc = limited(store);
    for _ in 0..3 {
        call_and_drop(&svc).await;
    }
    let statuses = [status(&svc).await, status(&svc).await, status(&svc).await];
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

/// `Engine::decide_now` answers what `decide` answers, on memory, in every charging mode and
/// for one ask or several (two engines on clocks that agree, the same asks in turn); and
/// `None`, changing nothing, for asks that only look and for a store that waits (Redis).
#[tokio::test]
async fn the_engine_decides_now_what_it_would_decide() {
    use tollgate::clock::ManualClock;
    use tollgate::engine::{Ask, Charging, Engine};
    use tollgate::store::Policy;
    use tollgate::Algorithm;

    let per_user = Policy::new("per_user", Quota::per_minute(3).unwrap(), Algorithm::Gcra).unwrap();
    let global = Policy::new(
        "global",
        Quota::per_minute(5).unwrap(),
        Algorithm::FixedWindow,
    )
    .unwrap();
    let engine = |clock: &ManualClock| {
        (Engine::builder().store(MemoryStore::with_clock(clock.clone())))
            .build()
            .unwrap()
    };
    for charging in [
        Charging::AllowedOnly,
        Charging::EveryHit,
        Charging::StopWhenOverLimit,
    ] {
        let (clock, clock_now) = (ManualClock::new(T0), ManualClock::new(T0));
        let (waiting, at_once) = (engine(&clock), engine(&clock_now));
        let one = [Ask::new("alice", &per_user, 1)];
        let two = [Ask::new("bob", &per_user, 1), Ask::new("all", &global, 2)];
        for step in 0..6 {
            let asks: &[Ask<'_>] = if step % 2 == 0 { &one } else { &two };
            let decided = waiting.decide(asks, charging).await.unwrap();
            let now = at_once.decide_now(asks, charging);
            assert_eq!(now, Some(decided), "{charging:?}, step {step}");
            clock.advance(Duration::from_secs(1));
            clock_now.advance(Duration::from_secs(1));
        }
        let look = [Ask::new("carol", &per_user, 1).look(true)];
        assert_eq!(at_once.decide_now(&look, charging), None);
        assert_eq!(at_once.decide_now(&[], charging), None);
    }
    let redis = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(support::unique_prefix("decide_now"));
    let engine = Engine::builder().store(redis).build().unwrap();
    let asks = [Ask::new("alice", &per_user, 1)];
    assert_eq!(engine.decide_now(&asks, Charging::EveryHit), None);
    // Nothing was counted: the store still has the whole quota.
    let decided = engine.decide(&asks, Charging::EveryHit).await.unwrap();
    assert_eq!(decided[0].remaining, 2);
}

const T0: u64 = 1_700_000_000_000_000;

/// The usual layer (one rule for every request, on the memory store) decides its requests by
/// a shorter way than the general one (`Limiter::express`, and `Limiter::express_head` when the
/// key is a header, read before the request is taken apart): the same answers, statuses,
/// headers and bodies, allowed and denied, in every header style, for a key as it is, one made
/// a digest (not ASCII, too long), the first of two values, and none. A memory store given as a
/// store of one's own (`BuiltIn`) sends the same requests the general way (the engine's
/// `decide`); a skip that never skips, the short way after the plan (`Limiter::express`, the
/// head taken apart first).
#[tokio::test]
async fn the_usual_request_is_answered_as_the_general_way_answers_it() {
    use http::HeaderValue;
    use http_body_util::BodyExt;
    use tollgate::{HeaderStyle, Skip};

    let header = || key::Header::new("x-api-key");
    let from_head = || {
        key::from_fn(|parts: &http::request::Parts| {
            parts
                .headers
                .get("x-api-key")?
                .to_str()
                .ok()
                .map(str::to_owned)
        })
    };
    let values: [&[&[u8]]; 5] = [
        &[b"client-1"],
        // No key: refused as a bad request (the default), by the general way.
        &[],
        &[b"caf\xc3\xa9"],
        &[&[b'k'; 300]],
        &[b"first", b"second"],
    ];
    for style in [HeaderStyle::Ietf, HeaderStyle::Legacy, HeaderStyle::None] {
        for by_header in [true, false] {
            let layer = |way: Way| {
                let builder = RateLimitLayer::builder()
                    .name("usual")
                    .quota(Quota::per_hour(2).unwrap())
                    .headers(style);
                let mut builder = match by_header {
                    true => builder.key(header()),
                    false => builder.key(from_head()),
                };
                match way {
                    Way::Usual => {}
                    Way::Planned => builder = builder.skip(Skip::new().when(|_| false)),
                    Way::General => builder = builder.store(BuiltIn::Memory(MemoryStore::new())),
                }
                builder.build().unwrap().layer(crate::ok_service())
            };
            // Values a function of the head reads as text only.
            let values = if by_header { &values[..] } else { &values[..2] };
            for value in values {
                let request = || {
                    let mut request = Request::new(());
                    for one in *value {
                        let one = HeaderValue::from_bytes(one).unwrap();
                        request.headers_mut().append("x-api-key", one);
                    }
                    request
                };
                let (usual, general) = (layer(Way::Usual), layer(Way::General));
                let planned = layer(Way::Planned);
                let mut statuses = Vec::new();
                for _ in 0..3 {
                    let mut answers = Vec::new();
                    for svc in [&usual, &general, &planned] {
                        let response = svc.clone().oneshot(request()).await.unwrap();
                        let (head, body) = response.into_parts();
                        let body = body.collect().await.unwrap().to_bytes();
                        answers.push((head.status, head.headers, body));
                    }
                    let case = format!("{style:?}, by header: {by_header}, {value:?}");
                    assert_eq!(answers[0], answers[1], "{case}");
                    assert_eq!(answers[0], answers[2], "{case}, planned");
                    statuses.push(answers[0].0);
                }
                let expected = match value.is_empty() {
                    true => [StatusCode::BAD_REQUEST; 3],
                    false => [
                        StatusCode::OK,
                        StatusCode::OK,
                        StatusCode::TOO_MANY_REQUESTS,
                    ],
                };
                assert_eq!(statuses, expected, "{style:?}, {value:?}");
            }
        }
    }
}

/// Which way `the_usual_request_is_answered_as_the_general_way_answers_it` sends a request.
#[derive(Clone, Copy)]
enum Way {
    /// As it comes: the short way.
    Usual,
    /// After a skip that never skips.
    Planned,
    /// Through a store of one's own, which the engine asks as it asks any store.
    General,
}

/// A layer keyed by a header reads the key before it takes the request apart
/// (`Limiter::express_head`): the key every other part of tollgate reads, the first of the
/// header's values, made a digest when it is too long, as `Control` finds it.
#[tokio::test]
async fn a_header_key_read_from_the_whole_request_is_the_key_control_finds() {
    let long = "k".repeat(300);
    let cases: [(&[&str], &str); 3] = [
        (&["client-1"], "client-1"),
        (&["first", "second"], "first"),
        (&[&long], &long),
    ];
    for (values, key) in cases {
        let layer = RateLimitLayer::builder()
            .name("usual")
            .quota(Quota::per_hour(2).unwrap())
            .key(key::Header::new("x-api-key"))
            .build()
            .unwrap();
        let control = layer.control();
        let svc = layer.layer(crate::ok_service());
        for _ in 0..2 {
            let mut request = Request::new(());
            for value in values {
                request
                    .headers_mut()
                    .append("x-api-key", value.parse().unwrap());
            }
            let response = svc.clone().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{values:?}");
        }
        let peek = control.peek("usual", key).await.unwrap();
        assert!(!peek.allowed, "{values:?}: the key's quota is spent");
        assert_eq!(peek.remaining, 0, "{values:?}");
        let other = control.peek("usual", "second").await.unwrap();
        assert_eq!(other.remaining, 1, "{values:?}: another key is untouched");
    }
}
