//! Run with `cargo bench --bench versus_governor` (about two minutes on 2 cores).
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
//! Every figure is CPU time of the benchmark's thread (`CLOCK_THREAD_CPUTIME_ID`), not wall
//! time: on a machine shared with other work, wall time also counts the time other processes
//! hold the cores, and moves with their load. Everything measured runs on that one thread (a
//! current-thread tokio runtime).
//!
//! `layer/one_key/none` is the trivial service alone, with the same requests: the floor. Every
//! other `layer/*` row is the *overhead* of its layer over that floor, measured as its own
//! figure: each sample sends its requests in blocks of [`BLOCK`], alternately through the layer
//! and through the bare service, and reports the difference of the two times. Both halves see
//! the machine in the same state, so the overhead does not move the way a difference of two
//! separately measured medians does.
//!
//! A shared machine also runs faster or slower from one row to the next (other tenants' load,
//! clock speed), and a difference of two times moves with it: each sample's overhead is given
//! at the speed of one reference, the floor's time measured once before the first row (the
//! overhead is scaled by the reference over the floor's time in that sample). The rows then
//! compare like with like, whichever of them ran while the machine was slow. The rows run case
//! by case (every layer's `one_key`, then every layer's `1M_keys`, then `denied`), so that a
//! case's rows all meet the heap in the same state: in earlier runs, a row measured after
//! another layer's million keys were freed read faster than one measured before any were made.
//!
//! tollgate sends rate-limit headers on every response by default; `tower_governor` only with
//! `use_headers()`. Both kinds are measured on each side: `tollgate` (IETF headers) against
//! `tower_governor_headers`, and `tollgate_no_headers` against `tower_governor`. On one key,
//! `tollgate_legacy_headers` (`X-RateLimit-Limit`, `-Remaining`, `-Reset`) shows what that
//! style costs beside the IETF one.
//!
//! Before criterion starts, the memory each side needs per tracked key is measured at 1,000,000
//! keys and printed as a Markdown table: two child processes of this benchmark (one fills a
//! `MemoryStore`, the other governor's keyed `RateLimiter`, with the same keys under the same
//! GCRA quota) each report their resident set's growth (`VmRSS` in `/proc/self/status`) over
//! the fill. Separate processes, so neither side inherits the other's freed heap. A filter that
//! does not contain `memory` (e.g. `-- decision`) skips it.
#![allow(
    missing_docs,
    reason = "criterion_group! makes a public fn it cannot document"
)]

use std::convert::Infallible;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::process::Command;
use std::time::Duration;

use axum::body::Body;
use criterion::measurement::WallTime;
use criterion::{criterion_group, Bencher, BenchmarkGroup, Criterion};
use governor::{Quota as GovernorQuota, RateLimiter};
use http::{HeaderValue, Request, Response, StatusCode};
use tokio::runtime::Runtime;
use tollgate::store::{MemoryStore, Policy};
use tollgate::{key, Algorithm, HeaderStyle, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::key_extractor::KeyExtractor;
use tower_governor::{GovernorError, GovernorLayer};

/// How many distinct keys the "1M keys" cases spread over.
const MANY_KEYS: usize = 1_000_000;

/// A quota no benchmark exhausts, for one hot key: every decision is an allow. The finest rate
/// (one request a µs) is slower than a decision, so the bucket holds four billion: a run makes
/// a few hundred million decisions at most. (A bucket of a million emptied in the first second,
/// and most "allowed" decisions measured were denials.) Each case checks after measuring that
/// its key is still allowed.
fn generous() -> Quota {
    Quota::per_second(1_000_000)
        .and_then(|quota| quota.burst(4_000_000_000))
        .expect("a valid quota")
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

/// The CPU time this thread has used: unlike the wall clock, it does not count the time other
/// processes on a shared machine hold the cores.
fn thread_cpu() -> Duration {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Measures `routine` by the CPU time of this thread, once per iteration.
fn on_cpu<R>(b: &mut Bencher<'_, WallTime>, mut routine: impl FnMut() -> R) {
    b.iter_custom(|iters| {
        let start = thread_cpu();
        for _ in 0..iters {
            black_box(routine());
        }
        thread_cpu() - start
    })
}

fn decision(c: &mut Criterion) {
    let keys = keys();
    let hot = "client".to_owned();
    let mut group = c.benchmark_group("decision");
    {
        let store = MemoryStore::new();
        let policy = Policy::new("bench", generous(), Algorithm::Gcra).unwrap();
        group.bench_function("one_key/tollgate", |b| {
            on_cpu(b, || black_box(store.check_now(&hot, &policy, 1)))
        });
        assert!(store.check_now(&hot, &policy, 1).allowed, "still allowed");
        let limiter = RateLimiter::keyed(governor_quota(generous()));
        group.bench_function("one_key/governor", |b| {
            on_cpu(b, || black_box(limiter.check_key(&hot)))
        });
        assert!(limiter.check_key(&hot).is_ok(), "still allowed");
    }
    {
        // Both maps are filled before either is measured, so that both rows meet the same
        // heap (and the same other map in memory).
        let store = MemoryStore::new();
        let policy = Policy::new("bench", lasting(), Algorithm::Gcra).unwrap();
        for key in &keys {
            assert!(store.check_now(key, &policy, 1).allowed);
        }
        let limiter = RateLimiter::keyed(governor_quota(lasting()));
        for key in &keys {
            assert!(limiter.check_key(key).is_ok());
        }
        let mut i = 0;
        group.bench_function("1M_keys/tollgate", |b| {
            on_cpu(b, || {
                i = (i + 1) % keys.len();
                black_box(store.check_now(&keys[i], &policy, 1))
            })
        });
        assert!(
            store.check_now(&keys[0], &policy, 1).allowed,
            "still allowed"
        );
        let mut i = 0;
        group.bench_function("1M_keys/governor", |b| {
            on_cpu(b, || {
                i = (i + 1) % keys.len();
                black_box(limiter.check_key(&keys[i]))
            })
        });
        assert!(limiter.check_key(&keys[0]).is_ok(), "still allowed");
    }
    {
        let store = MemoryStore::new();
        let policy = Policy::new("bench", stingy(), Algorithm::Gcra).unwrap();
        assert!(store.check_now(&hot, &policy, 1).allowed);
        assert!(!store.check_now(&hot, &policy, 1).allowed);
        group.bench_function("denied/tollgate", |b| {
            on_cpu(b, || black_box(store.check_now(&hot, &policy, 1)))
        });
        let limiter = RateLimiter::keyed(governor_quota(stingy()));
        assert!(limiter.check_key(&hot).is_ok());
        assert!(limiter.check_key(&hot).is_err());
        group.bench_function("denied/governor", |b| {
            on_cpu(b, || black_box(limiter.check_key(&hot)))
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

/// Requests sent in a row through one service before switching to the other.
const BLOCK: u64 = 64;

/// Sends `n` requests through `svc`, the next of `keys` each (from `*next` on), one at a time.
async fn send<S>(svc: &S, keys: &[HeaderValue], next: &mut usize, n: u64)
where
    S: Service<Request<()>, Error = Infallible> + Clone,
{
    for _ in 0..n {
        *next = (*next + 1) % keys.len();
        let request = request(&keys[*next]);
        black_box(svc.clone().oneshot(request).await.unwrap());
    }
}

/// Measures the floor: one request through the trivial service per iteration.
fn bench_floor(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &Runtime,
    id: &str,
    keys: &[HeaderValue],
) {
    let floor = trivial_service();
    let mut next = 0;
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = thread_cpu();
                send(&floor, keys, &mut next, iters).await;
                thread_cpu() - start
            })
        })
    });
}

/// The floor's CPU time per request, the median of 101 rounds: the speed every overhead is
/// given at (see the file's documentation).
fn floor_reference(runtime: &Runtime, keys: &[HeaderValue]) -> Duration {
    let floor = trivial_service();
    let mut next = 0;
    let mut rounds: Vec<Duration> = (0..101)
        .map(|_| {
            runtime.block_on(async {
                let start = thread_cpu();
                send(&floor, keys, &mut next, 16 * BLOCK).await;
                (thread_cpu() - start) / (16 * BLOCK as u32)
            })
        })
        .collect();
    rounds.sort();
    rounds[rounds.len() / 2]
}

/// Measures what `svc` adds to one request over the trivial service, with the next of `keys`
/// each: the requests go in blocks of [`BLOCK`], alternately through `svc` and through the
/// trivial service alone (the same requests), and the time of the second is taken from the
/// time of the first, at the `reference` floor's speed.
fn bench_overhead<S>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &Runtime,
    reference: Duration,
    id: String,
    svc: &S,
    keys: &[HeaderValue],
) where
    S: Service<Request<()>, Error = Infallible> + Clone,
{
    let floor = trivial_service();
    let (mut next, mut next_floor) = (0, 0);
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let (mut limited, mut bare) = (Duration::ZERO, Duration::ZERO);
                let mut left = iters;
                while left > 0 {
                    let n = left.min(BLOCK);
                    let start = thread_cpu();
                    send(svc, keys, &mut next, n).await;
                    let middle = thread_cpu();
                    send(&floor, keys, &mut next_floor, n).await;
                    limited += middle - start;
                    bare += thread_cpu() - middle;
                    left -= n;
                }
                // At the reference's speed: scaled by what the floor took now against it.
                let floor = bare.as_secs_f64() / iters as f64;
                let speed = reference.as_secs_f64() / floor.max(f64::MIN_POSITIVE);
                limited.saturating_sub(bare).mul_f64(speed)
            })
        })
    });
}

/// The three cases of a layer's rows.
#[derive(Clone, Copy)]
enum Case {
    /// One hot key.
    OneKey,
    /// 1M keys, all tracked before measuring.
    ManyKeys,
    /// One key already over its limit.
    Denied,
}

/// What every layer row is measured with: the runtime, the floor's reference time, the 1M keys.
#[derive(Clone, Copy)]
struct LayerBench<'a> {
    runtime: &'a Runtime,
    reference: Duration,
    keys: &'a [HeaderValue],
}

/// Measures one case of the layer `limited` makes for a quota, as `{case}/{name}`.
fn layer_case<S, B>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    LayerBench {
        runtime,
        reference,
        keys,
    }: LayerBench<'_>,
    case: Case,
    name: &str,
    limited: &impl Fn(Quota) -> S,
) where
    S: Service<Request<()>, Response = Response<B>, Error = Infallible> + Clone,
{
    let hot = [HeaderValue::from_static("bench-client")];
    let status = |svc: &S, key: &HeaderValue| {
        let response = runtime.block_on(svc.clone().oneshot(request(key)));
        response.unwrap().status()
    };
    let mut measure = |case: &str, svc: &S, keys: &[HeaderValue]| {
        let id = format!("{case}/{name}");
        bench_overhead(group, runtime, reference, id, svc, keys);
    };
    match case {
        Case::OneKey => {
            let one_key = limited(generous());
            measure("one_key", &one_key, &hot);
            assert_eq!(status(&one_key, &hot[0]), StatusCode::OK, "still allowed");
        }
        Case::ManyKeys => {
            let many = limited(lasting());
            for key in keys {
                assert_eq!(status(&many, key), StatusCode::OK);
            }
            measure("1M_keys", &many, keys);
            for key in &keys[..100] {
                assert_eq!(status(&many, key), StatusCode::OK, "still allowed");
            }
        }
        Case::Denied => {
            let denying = limited(stingy());
            assert_eq!(status(&denying, &hot[0]), StatusCode::OK);
            assert_eq!(status(&denying, &hot[0]), StatusCode::TOO_MANY_REQUESTS);
            measure("denied", &denying, &hot);
        }
    }
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
    bench_floor(&mut group, &runtime, "one_key/none", &hot);
    let reference = floor_reference(&runtime, &hot);

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
    let tollgate_no_headers = tollgate(HeaderStyle::None);
    let tollgate_legacy_headers = tollgate(HeaderStyle::Legacy);
    let tollgate = tollgate(HeaderStyle::Ietf);
    let tower_governor = |quota: Quota| {
        let config = GovernorConfigBuilder::default()
            .period(quota.period() / quota.limit())
            .burst_size(quota.capacity())
            .key_extractor(ApiKey)
            .finish()
            .unwrap();
        GovernorLayer::new(config).layer(trivial_service())
    };
    let tower_governor_headers = |quota: Quota| {
        let config = GovernorConfigBuilder::default()
            .period(quota.period() / quota.limit())
            .burst_size(quota.capacity())
            .key_extractor(ApiKey)
            .use_headers()
            .finish()
            .unwrap();
        GovernorLayer::new(config).layer(trivial_service())
    };
    // Case by case, each layer in turn: a case's rows all run in the same state of the heap
    // (a row measured after another layer's million keys were freed ran faster than one
    // measured before any were made).
    let bench = LayerBench {
        runtime: &runtime,
        reference,
        keys: &keys,
    };
    for case in [Case::OneKey, Case::ManyKeys, Case::Denied] {
        layer_case(&mut group, bench, case, "tollgate", &tollgate);
        layer_case(
            &mut group,
            bench,
            case,
            "tollgate_no_headers",
            &tollgate_no_headers,
        );
        if let Case::OneKey = case {
            // What the legacy style costs beside the IETF one (one key: the header's cost
            // alone).
            let legacy = &tollgate_legacy_headers;
            layer_case(&mut group, bench, case, "tollgate_legacy_headers", legacy);
        }
        layer_case(&mut group, bench, case, "tower_governor", &tower_governor);
        let with_headers = &tower_governor_headers;
        layer_case(
            &mut group,
            bench,
            case,
            "tower_governor_headers",
            with_headers,
        );
    }
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

/// Set in the child processes that measure memory: which side this one fills.
const MEMORY_CHILD: &str = "VERSUS_GOVERNOR_MEMORY_CHILD";

fn main() {
    if let Ok(side) = std::env::var(MEMORY_CHILD) {
        return memory_child(&side);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let listing = args.iter().any(|a| a == "--list");
    if args.iter().any(|a| a == "--bench") && !listing && filter_allows(&args, "memory") {
        memory_per_key();
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}

/// Whether criterion's FILTER argument, if one is given, lets `name` run (it is a substring
/// match). The options of criterion's command line that take a value are skipped with it.
fn filter_allows(args: &[String], name: &str) -> bool {
    const WITH_VALUE: &[&str] = &[
        "-c",
        "--color",
        "-s",
        "--save-baseline",
        "-b",
        "--baseline",
        "--baseline-lenient",
        "--load-baseline",
        "--format",
        "--profile-time",
        "--sample-size",
        "--warm-up-time",
        "--measurement-time",
        "--nresamples",
        "--noise-threshold",
        "--confidence-level",
        "--significance-level",
        "--plotting-backend",
        "--output-format",
    ];
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if WITH_VALUE.contains(&arg.as_str()) {
            args.next();
        } else if !arg.starts_with('-') {
            return name.contains(arg.as_str());
        }
    }
    true
}

/// Measures both sides in child processes and prints the table.
fn memory_per_key() {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let measure = |side: &str| -> f64 {
        let output = Command::new(&exe)
            .env(MEMORY_CHILD, side)
            .output()
            .expect("the benchmark runs itself");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{side}: {text}");
        text.trim().parse().expect("bytes per key")
    };
    let tollgate = measure("tollgate");
    let governor = measure("governor");
    println!();
    println!("| case | tollgate | governor | ratio |");
    println!("|---|---|---|---|");
    println!(
        "| `memory/1M_keys` (RSS growth per tracked key) | {tollgate:.1} B | {governor:.1} B | {:.2}× |",
        tollgate / governor
    );
    println!();
}

/// A child process: fills one side with [`MANY_KEYS`] keys and prints the growth of its
/// resident set per key.
fn memory_child(side: &str) {
    let mut key = String::new();
    let each = |n: usize, key: &mut String| {
        use std::fmt::Write as _;
        key.clear();
        write!(key, "client-{n}").expect("writing to a String");
    };
    let (before, after) = match side {
        "tollgate" => {
            let store = MemoryStore::new();
            let policy = Policy::new("bench", lasting(), Algorithm::Gcra).unwrap();
            let before = resident_bytes();
            for n in 0..MANY_KEYS {
                each(n, &mut key);
                assert!(store.check_now(&key, &policy, 1).allowed);
            }
            let after = resident_bytes();
            assert_eq!(store.len(), MANY_KEYS);
            (before, after)
        }
        "governor" => {
            let limiter = RateLimiter::keyed(governor_quota(lasting()));
            let before = resident_bytes();
            for n in 0..MANY_KEYS {
                each(n, &mut key);
                assert!(limiter.check_key(&key).is_ok());
            }
            let after = resident_bytes();
            assert_eq!(limiter.len(), MANY_KEYS);
            (before, after)
        }
        other => panic!("unknown side {other:?}"),
    };
    println!("{}", (after - before) as f64 / MANY_KEYS as f64);
}

/// This process's resident set, from `/proc/self/status` (Linux).
fn resident_bytes() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<i64>()
                .ok()
        })
        .expect("a VmRSS line");
    kb * 1024
}
