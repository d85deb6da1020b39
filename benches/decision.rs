//! Run with `cargo bench --bench decision`.
//!
//! The cost of one decision: the memory store alone (one hot key, and a million keys), and the
//! whole layer around a trivial service. With `TOLLGATE_REDIS_URL` set, also the Redis store
//! (one round trip to that server).
#![allow(
    missing_docs,
    reason = "criterion_group! makes a public fn it cannot document"
)]

use std::convert::Infallible;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use http::{Request, Response};
use tollgate::store::MemoryStore;
use tollgate::{
    key,
    store::{Policy, Store},
    Algorithm, Quota, RateLimitLayer,
};
use tower::{Layer, Service, ServiceExt};

fn memory_store(c: &mut Criterion) {
    let mut group = c.benchmark_group("memory_store");
    for algorithm in Algorithm::ALL {
        let store = MemoryStore::new();
        let policy =
            Policy::new("bench", Quota::per_second(1_000_000).unwrap(), algorithm).unwrap();
        group.bench_function(format!("{algorithm}/one_key"), |b| {
            b.iter(|| black_box(store.check_now("client", &policy, 1)))
        });
    }
    let store = MemoryStore::new();
    let policy = Policy::new("bench", Quota::per_minute(100).unwrap(), Algorithm::Gcra).unwrap();
    let keys: Vec<String> = (0..1_000_000).map(|i| format!("client-{i}")).collect();
    let mut i = 0;
    group.bench_function("gcra/1M_keys", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(store.check_now(&keys[i], &policy, 1))
        })
    });
    group.finish();
}

fn layer(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let inner = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    });
    let limited = RateLimitLayer::new(
        Quota::per_second(1_000_000).unwrap(),
        key::Header::new("x-api-key"),
    )
    .layer(inner);
    let request = || {
        Request::builder()
            .header("x-api-key", "bench-client")
            .body(())
            .unwrap()
    };
    c.bench_function("layer/memory_gcra", |b| {
        b.to_async(&runtime).iter(|| {
            let svc = limited.clone();
            async move { black_box(svc.oneshot(request()).await.unwrap()) }
        })
    });
    c.bench_function("layer/none", |b| {
        b.to_async(&runtime).iter(|| {
            let mut svc = inner;
            async move { black_box(svc.call(request()).await.unwrap()) }
        })
    });
}

fn redis_store(c: &mut Criterion) {
    let Ok(url) = std::env::var("TOLLGATE_REDIS_URL") else {
        eprintln!("TOLLGATE_REDIS_URL not set: skipping the Redis benchmarks");
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = tollgate::store::RedisStore::from_url(&url)
        .unwrap()
        .prefix("bench");
    let mut group = c.benchmark_group("redis_store");
    for algorithm in Algorithm::ALL {
        let policy =
            Policy::new("bench", Quota::per_second(1_000_000).unwrap(), algorithm).unwrap();
        group.bench_function(format!("{algorithm}/one_key"), |b| {
            b.to_async(&runtime)
                .iter(|| async { black_box(store.check("client", &policy, 1).await.unwrap()) })
        });
    }
    group.finish();
}

criterion_group!(benches, memory_store, layer, redis_store);
criterion_main!(benches);
