//! Run with `cargo bench --bench rules`.
//!
//! Rules at scale: loading a rules file of 1,000 / 10,000 / 40,000 rules (the last is 2.4 MB),
//! and one request through a layer of 10 / 1,000 / 40,000 rules, to the last rule's path and to
//! a path no rule matches. Before measuring, it checks that loading grows linearly: 40,000
//! rules may take at most 20 times as long as 4,000 (parsing that counted lines from the start
//! of the file for each rule took 100 times as long).
#![allow(
    missing_docs,
    reason = "criterion_group! makes a public fn it cannot document"
)]

use std::convert::Infallible;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use http::{Request, Response};
use tollgate::RateLimitLayer;
use tower::{Layer, ServiceExt};

/// `n` rules, each for its own exact path, keyed globally.
fn rules_text(n: usize) -> String {
    let mut text = String::from("[defaults]\nkey = \"global\"\nquota = \"1000000/s\"\n");
    for i in 0..n {
        text.push_str(&format!(
            "\n[[rule]]\nname = \"r{i}\"\npath = \"/r/{i}\"\nquota = \"100000/s\"\n"
        ));
    }
    text
}

/// A rules file of `n` rules in a directory of its own.
fn rules_file(n: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tollgate-bench-rules-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rules.toml");
    std::fs::write(&path, rules_text(n)).unwrap();
    path
}

fn load(path: &PathBuf) -> RateLimitLayer {
    RateLimitLayer::from_rules_file(path).unwrap()
}

/// The fastest of a few loads.
fn best_load(path: &PathBuf) -> Duration {
    (0..3)
        .map(|_| {
            let started = Instant::now();
            drop(black_box(load(path)));
            started.elapsed()
        })
        .min()
        .unwrap()
}

/// Loading is linear in the number of rules: 10 times the rules, at most 20 times the time.
fn loading_is_linear() {
    let (small, large) = (rules_file(4_000), rules_file(40_000));
    let (small_time, large_time) = (best_load(&small), best_load(&large));
    let ratio = large_time.as_secs_f64() / small_time.as_secs_f64();
    eprintln!(
        "rules_file: 4,000 rules in {small_time:?}, 40,000 rules ({} bytes) in {large_time:?}: \
         {ratio:.1} times as long",
        std::fs::metadata(&large).unwrap().len()
    );
    assert!(
        ratio < 20.0,
        "loading 10 times the rules took {ratio:.1} times as long: not linear"
    );
}

fn loading(c: &mut Criterion) {
    loading_is_linear();
    let mut group = c.benchmark_group("rules_file_load");
    group.sample_size(10);
    for n in [1_000, 10_000, 40_000] {
        let path = rules_file(n);
        group.bench_with_input(BenchmarkId::from_parameter(n), &path, |b, path| {
            b.iter(|| black_box(load(path)))
        });
    }
    group.finish();
}

fn matching(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let inner = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::new()))
    });
    let mut group = c.benchmark_group("rules_match");
    for n in [10, 1_000, 40_000] {
        let limited = load(&rules_file(n)).layer(inner);
        for (case, path) in [
            ("last_rule", format!("/r/{}", n - 1)),
            ("no_rule", "/none".into()),
        ] {
            group.bench_function(BenchmarkId::new(case, n), |b| {
                b.to_async(&runtime).iter(|| {
                    let svc = limited.clone();
                    let request = Request::get(path.as_str()).body(()).unwrap();
                    async move { black_box(svc.oneshot(request).await.unwrap()) }
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, loading, matching);
criterion_main!(benches);
