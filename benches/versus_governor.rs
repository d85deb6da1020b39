//! Run with `cargo bench --bench versus_governor` (about a minute and a half on 2 idle cores).
//!
//! tollgate side by side with `governor` and `tower_governor`, like for like, in one run:
//!
//! - `decision/*`: the bare decision, tollgate's `MemoryStore::check_now` against governor's
//!   keyed `RateLimiter::check_key` (GCRA both, string keys both);
//! - `layer/*`: the whole layer around a trivial service, tollgate's `RateLimitLayer` against
//!   `tower_governor::GovernorLayer`, both keyed by the `x-api-key` header as a `String`;
//!
//! each on one hot key, on 1,000,000 keys (all tracked before measuring, so every decision is a
//! lookup in a map of a million), and on one key already over its limit (every request denied).
//!
//! tollgate sends rate-limit headers on every response by default; `tower_governor` only with
//! `use_headers()`. Both kinds are measured on each side: `tollgate` (IETF headers) against
//! `tower_governor_headers`, and `tollgate_no_headers` against `tower_governor`.

use std::convert::Infallible;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use axum::body::Body;
use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion};
use governor::{Quota as GovernorQuota, RateLimiter};
use http::{HeaderValue, Request, Response, StatusCode};
use tokio::runtime::Runtime;
use tollgate::store::MemoryStore;
use tollgate::{key, Algorithm, HeaderStyle, Policy, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

/// How many distinct keys the "1M keys" cases spread over.
const MANY_KEYS: usize = 1_000_000;

/// A quota no benchmark exhausts, for one hot key: every decision is an allow.
fn generous() -> Quota {
    Quota::per_second(1_000_000).expect("a valid quota")
}

/// For the 1M keys: each request keeps its key tracked for 8.64 s (so the map holds all of
/// them while measuring), and no key comes near its 10,000.
fn lasting() -> Quota {
    Quota::per_day(10_000).expect("a valid quota")
}

/// A quota the denied cases exhaust once, before measuring: one request per hour.
fn stingy() -> Quota {
    Quota::per_hour(1).expect("a valid quota")
}

/// A governor quota with the same semantics as a tollgate GCRA quota: one cell every
/// `period / limit`, a bucket of `capacity` cells.
fn governor_quota(quota: Quota) -> GovernorQuota {
    let burst = NonZeroU32::new(quota.capacity()).expect("quota capacity is at least 1");
    GovernorQuota::with_period(quota.period() / quota.limit())
        .expect("interval is not zero")
        .allow_burst(burst)
}

fn keys() -> Vec<String> {
    (0..MANY_KEYS).map(|i| format!("client-{i}")).collect()
}

fn decision(c: &mut Criterion) {
    let keys = keys();
    let hot = "client".to_owned();
    let mut group = c.benchmark_group("decision");
    {
        let store = MemoryStore::new();
        let policy = Policy::new("bench", generous(), Algorithm::Gcra).unwrap();
        group.bench_function("one_key/tollgate", |b| {
            b.iter(|| black_box(store.check_now(&hot, &policy, 1)))
        });
        let limiter = RateLimiter::keyed(governor_quota(generous()));
        group.bench_function("one_key/governor", |b| {
            b.iter(|| black_box(limiter.check_key(&hot)))
        });
    }
    {
        let store = MemoryStore::new();
        let policy = Policy::new("bench", lasting(), Algorithm::Gcra).unwrap();
        for key in &keys {
            assert!(store.check_now(key, &policy, 1).allowed);
        }
        let mut i = 0;
        group.bench_function("1M_keys/tollgate", |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(store.check_now(&keys[i], &policy, 1))
            })
        });
    }
    {
        let limiter = RateLimiter::keyed(governor_quota(lasting()));
        for key in &keys {
            assert!(limiter.check_key(key).is_ok());
        }
        let mut i = 0;
        group.bench_function("1M_keys/governor", |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                black_box(limiter.check_key(&keys[i]))
            })
        });
    }
    {
        let store = MemoryStore::new();
        let policy = Policy::new("bench", stingy(), Algorithm::Gcra).unwrap();
        assert!(store.check_now(&hot, &policy, 1).allowed);
        assert!(!store.check_now(&hot, &policy, 1).allowed);
        group.bench_function("denied/tollgate", |b| {
            b.iter(|| black_box(store.check_now(&hot, &policy, 1)))
        });
        let limiter = RateLimiter::keyed(governor_quota(stingy()));
        assert!(limiter.check_key(&hot).is_ok());
        assert!(limiter.check_key(&hot).is_err());
        group.bench_function("denied/governor", |b| {
            b.iter(|| black_box(limiter.check_key(&hot)))
        });
    }
    group.finish();
}

/// tower_governor's key for the same header tollgate's `key::Header` reads, a `String` as
/// tollgate's is.
#[derive(Debug, Clone, Copy)]
struct ApiKey;

impl KeyExtractor for ApiKey {
    type Key = String;

    fn extract<T>(&self, req: &Request<T>) -> Result<String, GovernorError> {
        req.headers()
            .get("x-api-key")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
            .ok_or(GovernorError::UnableToExtractKey)
    }
}

/// The same trivial service behind every layer (and alone, as the floor).
fn trivial_service(
) -> impl Service<Request<()>, Response = Response<Body>, Error = Infallible, Future: Send> + Clone
{
    tower::service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(Body::empty())) })
}

fn request(api_key: &HeaderValue) -> Request<()> {
    let mut request = Request::new(());
    request.headers_mut().insert("x-api-key", api_key.clone());
    request
}

/// Measures one request through `svc` per iteration, each with the next of `keys`.
fn bench_requests<S>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &Runtime,
    id: String,
    svc: &S,
    keys: &[HeaderValue],
) where
    S: Service<Request<()>, Error = Infallible> + Clone,
{
    let mut i = 0;
    group.bench_function(id, |b| {
        b.to_async(runtime).iter(|| {
            i = (i + 1) % keys.len();
            let svc = svc.clone();
            let request = request(&keys[i]);
            async move { black_box(svc.oneshot(request).await.unwrap()) }
        })
    });
}

/// One layer's three cases: one hot key, 1M keys (all tracked before measuring), one key
/// already denied.
fn layer_cases<S, B>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &Runtime,
    name: &str,
    limited: impl Fn(Quota) -> S,
    keys: &[HeaderValue],
) where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible> + Clone,
{
    let hot = [HeaderValue::from_static("bench-client")];
    let status = |svc: &S, key: &HeaderValue| {
        let response = runtime.block_on(svc.clone().oneshot(request(key)));
        response.unwrap().status()
    };

    bench_requests(
        group,
        runtime,
        format!("one_key/{name}"),
        &limited(generous()),
        &hot,
    );

    let many = limited(lasting());
    for key in keys {
        assert_eq!(status(&many, key), StatusCode::OK);
    }
    bench_requests(group, runtime, format!("1M_keys/{name}"), &many, keys);
    drop(many);

    let denying = limited(stingy());
    assert_eq!(status(&denying, &hot[0]), StatusCode::OK);
    assert_eq!(status(&denying, &hot[0]), StatusCode::TOO_MANY_REQUESTS);
    bench_requests(group, runtime, format!("denied/{name}"), &denying, &hot);
}

fn layer(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let keys: Vec<HeaderValue> = keys()
        .iter()
        .map(|k| HeaderValue::from_str(k).unwrap())
        .collect();
    let mut group = c.benchmark_group("layer");

    let hot = [HeaderValue::from_static("bench-client")];
    bench_requests(
        &mut group,
        &runtime,
        "one_key/none".into(),
        &trivial_service(),
        &hot,
    );

    let tollgate = |headers: HeaderStyle| {
        move |quota: Quota| {
            RateLimitLayer::builder()
                .quota(quota)
                .key(key::Header::new("x-api-key"))
                .headers(headers)
                .build()
                .unwrap()
                .layer(trivial_service())
        }
    };
    layer_cases(
        &mut group,
        &runtime,
        "tollgate",
        tollgate(HeaderStyle::Ietf),
        &keys,
    );
    layer_cases(
        &mut group,
        &runtime,
        "tollgate_no_headers",
        tollgate(HeaderStyle::None),
        &keys,
    );

    let governor = |quota: Quota| {
        let config = GovernorConfigBuilder::default()
            .period(quota.period() / quota.limit())
            .burst_size(quota.capacity())
            .key_extractor(ApiKey)
            .finish()
            .unwrap();
        GovernorLayer::new(config).layer(trivial_service())
    };
    layer_cases(&mut group, &runtime, "tower_governor", governor, &keys);
    let governor_with_headers = |quota: Quota| {
        let config = GovernorConfigBuilder::default()
            .period(quota.period() / quota.limit())
            .burst_size(quota.capacity())
            .key_extractor(ApiKey)
            .use_headers()
            .finish()
            .unwrap();
        GovernorLayer::new(config).layer(trivial_service())
    };
    layer_cases(
        &mut group,
        &runtime,
        "tower_governor_headers",
        governor_with_headers,
        &keys,
    );
    group.finish();
}

/// Short runs, and no plots (drawing them takes longer than measuring), so the whole file takes
/// about a minute and a half.
fn short() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = short();
    targets = decision, layer
}
criterion_main!(benches);
