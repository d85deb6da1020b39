//! Limits on requests in flight (`Rule::in_flight`): a slot per running request, given back
//! however the request ends (its body done or failed, cancelled, its handler panicking),
//! stacked with rate rules, shared exactly by every store, with leases that a crashed
//! instance's slots outlive by at most their time to live.

use crate::support;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use tokio::sync::Notify;
use tollgate::engine::Engine;
use tollgate::rules::{Mode, Rule};
use tollgate::store::{InFlight, MemcachedStore, MemoryStore, RedisStore, StateBackedStore, Store};
use tollgate::{key, Quota, RateLimitLayer, RateLimitLayerBuilder, ResponseBody};
use tower::{Service, ServiceExt};

/// A body that fails at its first frame.
struct Failing;

impl Body for Failing {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(Some(Err(std::io::Error::other("broken"))))
    }
}

/// What the test handler does, by the request's path.
#[derive(Clone, Default)]
struct Handler {
    /// `/wait` waits for this before it answers, after telling `started`.
    release: Arc<Notify>,
    started: Arc<Notify>,
}

type Answer = Response<http_body_util::Either<String, Failing>>;

impl Handler {
    fn service(
        &self,
    ) -> impl Service<Request<()>, Response = Answer, Error = Infallible, Future: Send> + Clone
    {
        let this = self.clone();
        tower::service_fn(move |request: Request<()>| {
            let this = this.clone();
            async move {
                match request.uri().path() {
                    "/wait" => {
                        this.started.notify_one();
                        this.release.notified().await;
                    }
                    "/panic" => panic!("the handler panics"),
                    "/fail" => return Ok(Response::new(http_body_util::Either::Right(Failing))),
                    _ => {}
                }
                Ok(Response::new(http_body_util::Either::Left("done".into())))
            }
        })
    }
}

/// Keyed by `x-api-key`. A shared store may take its time on a busy machine: a call that timed
/// out would let its request through without a slot (failing open), which is not what these
/// tests are about.
fn builder() -> RateLimitLayerBuilder {
    RateLimitLayer::builder()
        .key(key::Header::new("x-api-key"))
        .store_timeout(Duration::from_secs(2))
}

fn request(path: &str, key: &str) -> Request<()> {
    Request::builder()
        .uri(path)
        .header("x-api-key", key)
        .body(())
        .unwrap()
}

/// One request of `key` to `path` through `layer`, its response held as the client holds it
/// (the body unread: the slot, if any, stays taken).
async fn call(
    layer: &RateLimitLayer,
    handler: &Handler,
    path: &str,
    key: &str,
) -> Response<ResponseBody<http_body_util::Either<String, Failing>>> {
    let service = tower::Layer::layer(layer, handler.service());
    service.oneshot(request(path, key)).await.unwrap()
}

fn header(response: &Response<impl Body>, name: &str) -> Option<String> {
    Some(response.headers().get(name)?.to_str().ok()?.to_owned())
}

#[tokio::test]
async fn a_slot_is_held_until_the_body_ends_and_refusals_say_so() {
    let layer = builder().rule(Rule::in_flight("slow", 2)).build().unwrap();
    let handler = Handler::default();
    let first = call(&layer, &handler, "/", "ann").await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "ratelimit-policy").as_deref(),
        Some("\"slow\";q=2;qu=\"concurrent-requests\"")
    );
    assert_eq!(
        header(&first, "ratelimit").as_deref(),
        Some("\"slow\";r=1;t=0")
    );
    let second = call(&layer, &handler, "/", "ann").await;
    assert_eq!(second.status(), 200);
    // Another client has slots of its own.
    assert_eq!(call(&layer, &handler, "/", "bob").await.status(), 200);
    let refused = call(&layer, &handler, "/", "ann").await;
    assert_eq!(refused.status(), 429);
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("1"));
    assert_eq!(
        header(&refused, "ratelimit").as_deref(),
        Some("\"slow\";r=0;t=1")
    );
    // Dropped unread: its slot comes back.
    drop(first);
    let third = call(&layer, &handler, "/", "ann").await;
    assert_eq!(third.status(), 200);
    // Read to its end, the body gives the slot back before it is dropped.
    let mut body = second.into_body();
    while body.frame().await.is_some() {}
    assert_eq!(call(&layer, &handler, "/", "ann").await.status(), 200);
    drop(body);
    drop(third);
}

#[tokio::test]
async fn no_slot_is_lost_to_a_failing_body_a_cancelled_request_or_a_panic() {
    let layer = builder().rule(Rule::in_flight("slow", 1)).build().unwrap();
    let handler = Handler::default();
    // A body that fails.
    let failed = call(&layer, &handler, "/fail", "ann").await;
    assert_eq!(failed.status(), 200);
    let mut body = failed.into_body();
    assert!(body.frame().await.unwrap().is_err());
    assert_eq!(call(&layer, &handler, "/", "ann").await.status(), 200);
    // A request cancelled while its handler runs (its client hung up).
    let service = tower::Layer::layer(&layer, handler.service());
    let running = tokio::spawn(service.oneshot(request("/wait", "ann")));
    handler.started.notified().await;
    assert_eq!(call(&layer, &handler, "/", "ann").await.status(), 429);
    running.abort();
    assert!(running.await.unwrap_err().is_cancelled());
    assert_eq!(call(&layer, &handler, "/", "ann").await.status(), 200);
    // A handler that panics.
    let service = tower::Layer::layer(&layer, handler.service());
    let panicked = tokio::spawn(service.oneshot(request("/panic", "ann"))).await;
    assert!(panicked.unwrap_err().is_panic());
    assert_eq!(call(&layer, &handler, "/", "ann").await.status(), 200);
    drop(body);
}

#[tokio::test]
async fn stacked_with_a_rate_a_refusal_of_either_costs_nothing_of_the_other() {
    let control_layer = builder()
        .rule(Rule::in_flight("slow", 1))
        .rule(Rule::new("rate", Quota::per_minute(2).unwrap()))
        .build()
        .unwrap();
    let control = control_layer.control();
    let (layer, handler) = (&control_layer, Handler::default());
    let first = call(layer, &handler, "/", "ann").await;
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "ratelimit-policy").as_deref(),
        Some("\"slow\";q=1;qu=\"concurrent-requests\", \"rate\";q=2;w=60")
    );
    // Refused for lack of a slot: the rate is not charged (one more request still fits).
    assert_eq!(call(layer, &handler, "/", "ann").await.status(), 429);
    let rate = control.peek("rate", "ann").await.unwrap();
    assert_eq!((rate.allowed, rate.remaining), (true, 0));
    drop(first);
    assert_eq!(call(layer, &handler, "/", "ann").await.status(), 200);
    // Refused by the rate: it holds no slot, so a slot is free for the door.
    let by_rate = call(layer, &handler, "/", "ann").await;
    assert_eq!(by_rate.status(), 429);
    assert!(
        header(&by_rate, "retry-after")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 1
    );
    let checked = control.check("slow", "ann", 1).await.unwrap();
    assert!(checked.is_allowed());
    // The door's slot is held while its answer lives.
    assert!(!control.check("slow", "ann", 1).await.unwrap().is_allowed());
    drop(checked);
    assert!(control.check("slow", "ann", 1).await.unwrap().is_allowed());
    // Peeking at or resetting slots is not a thing.
    assert!(control.peek("slow", "ann").await.is_err());
}

#[tokio::test]
async fn in_delay_mode_a_request_waits_for_a_slot_up_to_max_delay() {
    let layer = builder()
        .rule(
            Rule::in_flight("queue", 1)
                .mode(Mode::Delay)
                .max_delay(Duration::from_millis(300)),
        )
        .build()
        .unwrap();
    let handler = Handler::default();
    let first = call(&layer, &handler, "/", "ann").await;
    let started = Instant::now();
    let waiting = {
        let (layer, handler) = (layer.clone(), handler.clone());
        tokio::spawn(async move { call(&layer, &handler, "/", "ann").await.status() })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(first);
    assert_eq!(waiting.await.unwrap(), 200);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(100) && waited < Duration::from_millis(200),
        "{waited:?}"
    );
    // Nobody gives a slot back: refused once max_delay has passed.
    let held = call(&layer, &handler, "/", "ann").await;
    let started = Instant::now();
    assert_eq!(call(&layer, &handler, "/", "ann").await.status(), 429);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    drop(held);
}

#[tokio::test]
async fn a_shadow_rule_lets_a_request_through_without_a_slot() {
    let layer = builder()
        .rule(Rule::in_flight("try", 1).mode(Mode::Shadow))
        .build()
        .unwrap();
    let handler = Handler::default();
    let first = call(&layer, &handler, "/", "ann").await;
    let second = call(&layer, &handler, "/", "ann").await;
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    assert_eq!(layer.control().stats().shadow_denials, 1);
}

#[tokio::test]
async fn a_grpc_request_without_a_slot_gets_resource_exhausted() {
    let layer = builder().rule(Rule::in_flight("slow", 1)).build().unwrap();
    let handler = Handler::default();
    let held = call(&layer, &handler, "/", "ann").await;
    let service = tower::Layer::layer(&layer, handler.service());
    let mut grpc = request("/pkg.Svc/Method", "ann");
    grpc.headers_mut()
        .insert("content-type", "application/grpc".parse().unwrap());
    let refused = service.oneshot(grpc).await.unwrap();
    assert_eq!(refused.status(), 200);
    assert_eq!(header(&refused, "grpc-status").as_deref(), Some("8"));
    assert_eq!(
        header(&refused, "grpc-retry-pushback-ms").as_deref(),
        Some("1000")
    );
    drop(held);
}

#[test]
fn a_rule_that_mixes_a_rate_into_a_limit_on_requests_in_flight_is_refused() {
    let cases = [
        (Rule::in_flight("a", 0), "must be at least 1"),
        (
            Rule::in_flight("a", 1).cost_header("x-cost"),
            "a cost applies to a rate",
        ),
        (
            Rule::in_flight("a", 1).block_for(Duration::from_secs(1)),
            "block_for applies to a rate",
        ),
        (
            Rule::in_flight("a", 1).overridable(true),
            "overridable applies to a rate",
        ),
        (
            Rule::in_flight("a", 1).in_flight_ttl(Duration::from_millis(10)),
            "in_flight_ttl 10ms is out of range",
        ),
        (Rule::in_flight("a", 1).mode(Mode::Delay), "needs max_delay"),
        (
            Rule::new("a", Quota::per_minute(1).unwrap()).in_flight_ttl(Duration::from_secs(1)),
            "in_flight_ttl applies only",
        ),
    ];
    for (rule, expected) in cases {
        let e = builder().rule(rule).build().unwrap_err();
        assert!(e.to_string().contains(expected), "{e}");
    }
}

/// Two "instances" (layers) on one store: `max` slots of one client in flight between them.
async fn shared_by_two_instances(store: impl Fn() -> RateLimitLayerBuilder) {
    let (a, b) = (store().build().unwrap(), store().build().unwrap());
    let handler = Handler::default();
    let held_a = call(&a, &handler, "/", "ann").await;
    let held_b = call(&b, &handler, "/", "ann").await;
    assert_eq!(
        (held_a.status().as_u16(), held_b.status().as_u16()),
        (200, 200)
    );
    assert_eq!(call(&a, &handler, "/", "ann").await.status(), 429);
    assert_eq!(call(&b, &handler, "/", "ann").await.status(), 429);
    // Given back by instance a (in a task of its own): b admits again (at once, but for a
    // busy machine).
    drop(held_a);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let next = call(&b, &handler, "/", "ann").await;
        if next.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot did not come back");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(held_b);
}

#[tokio::test]
async fn redis_memcached_and_a_state_store_share_slots_between_instances() {
    let prefix = support::unique_prefix("in_flight_shared");
    let redis = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(prefix.as_str());
    shared_by_two_instances(|| {
        builder()
            .rule(Rule::in_flight("slow", 2))
            .store(redis.clone())
    })
    .await;
    let memcached = MemcachedStore::from_url(&support::memcached::shared_memcached_url())
        .unwrap()
        .prefix(prefix.as_str());
    shared_by_two_instances(|| {
        builder()
            .rule(Rule::in_flight("slow", 2))
            .store(memcached.clone())
    })
    .await;
    let map = StateBackedStore::new(crate::state_store::VersionedMap::default());
    shared_by_two_instances(|| {
        builder()
            .rule(Rule::in_flight("slow", 2))
            .store(map.clone())
    })
    .await;
}

/// Slots are leases on Redis: renewed while their requests run, and back for every instance
/// once the instance that held them stops renewing them (it crashed).
#[tokio::test]
async fn on_redis_running_requests_keep_their_slots_and_a_crashed_instances_come_back() {
    let prefix = support::unique_prefix("in_flight_leases");
    let redis = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(prefix.as_str());
    let ttl = Duration::from_millis(300);
    let layer = || {
        builder()
            .rule(Rule::in_flight("slow", 1).in_flight_ttl(ttl))
            .store(redis.clone())
            .build()
            .unwrap()
    };
    let (a, b) = (layer(), layer());
    let handler = Handler::default();
    let held = call(&a, &handler, "/", "ann").await;
    assert_eq!(held.status(), 200);
    // Three times its time to live later, the slot is still held: a renewed it.
    tokio::time::sleep(3 * ttl).await;
    assert_eq!(call(&b, &handler, "/", "ann").await.status(), 429);
    let key = redis.slots_key(&InFlight::new("slow", 1).unwrap(), "ann");
    let url = support::shared_redis_url();
    let port: u16 = url.rsplit(':').next().unwrap().parse().unwrap();
    let pttl: i64 = support::redis_cli(port, &["pttl", &key])
        .trim()
        .parse()
        .unwrap();
    assert!(pttl > 0 && pttl <= 300, "{pttl}");
    drop(held);

    // An instance that took a slot and never renews it or gives it back: a crash.
    let crashed = Engine::builder().store(redis.clone()).build().unwrap();
    let limit = InFlight::new("slow", 1).unwrap().with_ttl(ttl).unwrap();
    // Once a's slot is back (given back by a task of its own).
    let taken = loop {
        let taken = Instant::now();
        let slot = crashed.new_slot();
        if crashed
            .take_slot("ann", &limit, slot)
            .await
            .unwrap()
            .allowed
        {
            break taken;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(call(&b, &handler, "/", "ann").await.status(), 429);
    loop {
        if call(&b, &handler, "/", "ann").await.status() == 200 {
            break;
        }
        assert!(taken.elapsed() < ttl + Duration::from_millis(200));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(taken.elapsed() >= ttl - Duration::from_millis(20));
}

#[tokio::test]
async fn the_memory_store_counts_slots_without_leases() {
    let store = MemoryStore::new();
    let engine = Engine::builder().store(store.clone()).build().unwrap();
    let limit = InFlight::new("slow", 2).unwrap();
    let (one, two, three) = (engine.new_slot(), engine.new_slot(), engine.new_slot());
    assert!(engine.take_slot("k", &limit, one).await.unwrap().allowed);
    assert!(engine.take_slot("k", &limit, two).await.unwrap().allowed);
    let refused = engine.take_slot("k", &limit, three).await.unwrap();
    assert_eq!((refused.allowed, refused.remaining), (false, 0));
    assert_eq!(engine.slot_renewal_interval(), Some(limit.ttl() / 3));
    assert!(engine.give_back_slot_now("k", &limit, one));
    assert!(engine.take_slot("k", &limit, three).await.unwrap().allowed);
    engine.give_back_slot("k", &limit, two).await.unwrap();
    engine.give_back_slot("k", &limit, three).await.unwrap();
    assert_eq!(engine.slot_renewal_interval(), None);
    // A rate under the same name is another thing.
    let rate =
        tollgate::store::Policy::new("slow", Quota::per_minute(1).unwrap(), Default::default())
            .unwrap();
    assert!(store.check("k", &rate, 1).await.unwrap().allowed);
}

#[tokio::test]
async fn a_response_counted_by_its_status_still_holds_its_slot_until_its_body_ends() {
    let layer = builder()
        .rule(Rule::in_flight("slow", 1))
        .rule(Rule::new("ok", Quota::per_minute(5).unwrap()).count_status([200]))
        .build()
        .unwrap();
    let control = layer.control();
    let handler = Handler::default();
    let first = call(&layer, &handler, "/", "ann").await;
    assert_eq!(first.status(), 200);
    // Counted once its status was known, before it was sent.
    assert_eq!(control.peek("ok", "ann").await.unwrap().remaining, 3);
    assert_eq!(call(&layer, &handler, "/", "ann").await.status(), 429);
    drop(first);
    assert_eq!(call(&layer, &handler, "/", "ann").await.status(), 200);
}
