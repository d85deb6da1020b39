//! `tollgate_rls::RateLimitService` in a real tonic server, called by a real tonic client
//! over loopback: the reference's integration scenarios (its `basic` and `another` domains)
//! on memory and on Redis, atomic decisions across descriptors under concurrency, shadow and
//! quota modes, `unlimited`, `replaces`, limits of zero, hits, headers, Envoy's own limits,
//! the extensions' algorithms, and a store that is down.

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate::engine::Charging;
use tollgate::store::{Decision, OnStoreError, Policy, Store, StoreError};
use tollgate::store::{MemoryStore, RedisStore, StoreFailure};
use tollgate_rls::proto::rate_limit_descriptor::{Entry, RateLimitOverride};
use tollgate_rls::proto::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use tollgate_rls::proto::rate_limit_service_client::RateLimitServiceClient;
use tollgate_rls::proto::{RateLimitDescriptor, RateLimitRequest, RateLimitResponse, UInt64Value};
use tollgate_rls::{RateLimitService, ResponseHeaders, RlsConfig};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};

const BASIC: &str = include_str!("../rls/runtime/current/ratelimit/config/basic.yaml");
const ANOTHER: &str = include_str!("../rls/runtime/current/ratelimit/config/another.yaml");

type Client = RateLimitServiceClient<Channel>;

/// Serves `service` on a free loopback port and connects a client to it.
async fn serve(service: RateLimitService) -> Client {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    RateLimitServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

fn config(files: &[(&str, &str)]) -> RlsConfig {
    RlsConfig::from_yaml(
        files.iter().copied(),
        tollgate_rls::DuplicateDomains::Refuse,
    )
    .unwrap()
}

/// The service on `store`, with a store timeout long enough that no answer is a timeout's
/// (these tests count exactly; the outage tests use short ones).
async fn service_on(store: impl Store, files: &[(&str, &str)]) -> Client {
    service_charging(store, files, Charging::default()).await
}

/// [`service_on`], charging hits as `charging` says.
async fn service_charging(store: impl Store, files: &[(&str, &str)], charging: Charging) -> Client {
    serve(
        RateLimitService::builder()
            .config(config(files))
            .store(store)
            .store_timeout(Duration::from_secs(5))
            .charging(charging)
            .build()
            .unwrap(),
    )
    .await
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..RateLimitDescriptor::default()
    }
}

/// A request of the reference's tests' shape: one descriptor per list of entries.
fn request(domain: &str, descriptors: &[&[(&str, &str)]], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend: hits,
    }
}

async fn ask(client: &mut Client, request: RateLimitRequest) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
}

/// The status the reference's tests expect, with the reset copied from the answer.
fn expected(
    code: Code,
    per_unit: u32,
    unit: Unit,
    remaining: u32,
    got: &DescriptorStatus,
) -> DescriptorStatus {
    DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            name: String::new(),
            requests_per_unit: per_unit,
            unit: unit as i32,
        }),
        limit_remaining: remaining,
        duration_until_reset: got.duration_until_reset,
        quota: None,
    }
}

fn reset_seconds(s: &DescriptorStatus) -> i64 {
    let d = s.duration_until_reset.expect("a reset");
    assert_eq!(d.nanos, 0, "whole seconds, as the reference");
    d.seconds
}

/// The reference's `testBasicBaseConfig`, step by step.
async fn basic_scenario(client: &mut Client) {
    // An unknown domain: OK, no limit.
    let r = ask(client, request("foo", &[&[("hello", "world")]], 1)).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(
        r.statuses,
        [DescriptorStatus {
            code: Code::Ok as i32,
            ..DescriptorStatus::default()
        }]
    );

    let r = ask(client, request("basic", &[&[("key1", "foo")]], 1)).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(
        r.statuses[0],
        expected(Code::Ok, 50, Unit::Second, 49, &r.statuses[0])
    );
    assert_eq!(reset_seconds(&r.statuses[0]), 1);

    // Over a minute limit with a fresh value.
    let value = format!("{}", rand::random::<u64>());
    for i in 0..25u32 {
        let r = ask(client, request("another", &[&[("key2", &value)]], 1)).await;
        let (code, remaining) = match i >= 20 {
            true => (Code::OverLimit, 0),
            false => (Code::Ok, 20 - (i + 1)),
        };
        assert_eq!(r.overall_code, code as i32, "request {i}");
        assert_eq!(
            r.statuses[0],
            expected(code, 20, Unit::Minute, remaining, &r.statuses[0])
        );
        assert!((1..=60).contains(&reset_seconds(&r.statuses[0])));
    }

    // Two keys: key3 is over after 10, and key2 goes on counting, as the reference's own
    // scenario expects (test/integration/integration_test.go lines 688-699: limitRemaining1
    // stays 10 only with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).
    let value = format!("{}", rand::random::<u64>());
    for i in 0..15u32 {
        let r = ask(
            client,
            request("another", &[&[("key2", &value)], &[("key3", &value)]], 1),
        )
        .await;
        let (code, remaining2, remaining1) = match i >= 10 {
            true => (Code::OverLimit, 0, 20 - (i + 1)),
            false => (Code::Ok, 10 - (i + 1), 20 - (i + 1)),
        };
        assert_eq!(r.overall_code, code as i32, "request {i}");
        assert_eq!(
            r.statuses,
            [
                expected(Code::Ok, 20, Unit::Minute, remaining1, &r.statuses[0]),
                expected(code, 10, Unit::Hour, remaining2, &r.statuses[1]),
            ],
            "request {i}"
        );
    }

    // The reset counts down.
    let first = ask(client, request("another", &[&[("key4", "durTest")]], 1)).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let second = ask(client, request("another", &[&[("key4", "durTest")]], 1)).await;
    assert!(reset_seconds(&second.statuses[0]) < reset_seconds(&first.statuses[0]));
}

#[tokio::test]
async fn the_references_basic_scenario_on_memory() {
    let mut client = service_on(
        MemoryStore::new(),
        &[("basic.yaml", BASIC), ("another.yaml", ANOTHER)],
    )
    .await;
    basic_scenario(&mut client).await;
}

#[tokio::test]
async fn the_references_basic_scenario_on_redis() {
    let store = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(support::unique_prefix("rls-basic"));
    let mut client = service_on(store, &[("basic.yaml", BASIC), ("another.yaml", ANOTHER)]).await;
    basic_scenario(&mut client).await;
}

const TWO: &str = "
domain: two
descriptors:
  - key: wide
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: narrow
    rate_limit: { unit: minute, requests_per_unit: 5 }
";

/// Fires `n` requests with both descriptors at once and counts the OKs; then checks what
/// the wide limit has left.
async fn concurrent_pair(client: &Client, n: usize) {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let mut client = client.clone();
        tasks.push(tokio::spawn(async move {
            ask(
                &mut client,
                request("two", &[&[("wide", "w")], &[("narrow", "n")]], 1),
            )
            .await
        }));
    }
    let mut ok = 0;
    for task in tasks {
        let r = task.await.unwrap();
        assert!(
            r.statuses.iter().all(|s| s.current_limit.is_some()),
            "decided, not failed open"
        );
        if r.overall_code == Code::Ok as i32 {
            ok += 1;
        } else {
            assert_eq!(r.statuses[0].code, Code::Ok as i32);
            assert_eq!(r.statuses[1].code, Code::OverLimit as i32);
        }
    }
    assert_eq!(ok, 5, "exactly the narrow limit");
    // Only the 5 admitted requests used the wide limit: 5 left (this look uses one more).
    let mut client = client.clone();
    let r = ask(&mut client, request("two", &[&[("wide", "w")]], 1)).await;
    assert_eq!(r.statuses[0].limit_remaining, 4);
}

/// tollgate's atomic mode and the reference's `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`
/// both leave the wide limit alone once the narrow one is over; the reference reads the
/// counters before it increments them (`src/redis/fixed_cache_impl.go` lines 117-187), so
/// under concurrency it still charges refused requests. Here it is one atomic step: exact.
#[tokio::test]
async fn descriptors_are_decided_atomically_under_concurrency_on_memory() {
    for charging in [Charging::AllowedOnly, Charging::StopWhenOverLimit] {
        let client = service_charging(MemoryStore::new(), &[("two.yaml", TWO)], charging).await;
        concurrent_pair(&client, 60).await;
    }
}

#[tokio::test]
async fn descriptors_are_decided_atomically_under_concurrency_on_redis() {
    for charging in [Charging::AllowedOnly, Charging::StopWhenOverLimit] {
        let store = RedisStore::from_url(&support::shared_redis_url())
            .unwrap()
            .prefix(support::unique_prefix("rls-atomic"));
        let client = service_charging(store, &[("two.yaml", TWO)], charging).await;
        concurrent_pair(&client, 60).await;
    }
}

const MODES: &str = "
domain: modes
descriptors:
  - key: shadowed
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: strict
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: free
    rate_limit: { unlimited: true }
  - key: banned
    rate_limit: { name: banned_limit, unit: minute, requests_per_unit: 0 }
  - key: override
    rate_limit:
      replaces: [{ name: banned_limit }]
      unit: minute
      requests_per_unit: 2
  - key: q1
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: q2
    quota_mode: true
    rate_limit: { unit: minute, requests_per_unit: 2 }
";

#[tokio::test]
async fn shadow_mode_answers_ok_and_still_counts() {
    let service = RateLimitService::builder()
        .config(config(&[("modes.yaml", MODES)]))
        .build()
        .unwrap();
    let mut client = serve(service.clone()).await;
    let shadow = |client: &mut Client| {
        let mut client = client.clone();
        async move { ask(&mut client, request("modes", &[&[("shadowed", "a")]], 1)).await }
    };
    let first = shadow(&mut client).await;
    assert_eq!(first.statuses[0].limit_remaining, 0);
    let second = shadow(&mut client).await;
    // Over its limit: OK all the same, with nothing left.
    assert_eq!(second.overall_code, Code::Ok as i32);
    assert_eq!(second.statuses[0].code, Code::Ok as i32);
    assert_eq!(second.statuses[0].limit_remaining, 0);
    // A shadow limit over its limit does not keep the strict one from counting.
    let r = ask(
        &mut client,
        request("modes", &[&[("shadowed", "a")], &[("strict", "a")]], 1),
    )
    .await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses[1].limit_remaining, 1);
    // The second and third requests were over the shadow limit.
    assert_eq!(service.stats().shadow_denials, 2);
}

#[tokio::test]
async fn unlimited_replaces_and_limits_of_zero() {
    let mut client = service_on(MemoryStore::new(), &[("modes.yaml", MODES)]).await;
    let r = ask(&mut client, request("modes", &[&[("free", "x")]], 1)).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(
        r.statuses[0],
        DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: u32::MAX,
            ..DescriptorStatus::default()
        }
    );
    // A limit of zero refuses, and what else the request asks for is charged all the same, as
    // the reference's INCRBY does (`src/redis/fixed_cache_impl.go` line 36): 1, 0, then over.
    for (left, strict) in [(1, Code::Ok), (0, Code::Ok), (0, Code::OverLimit)] {
        let r = ask(
            &mut client,
            request("modes", &[&[("strict", "z")], &[("banned", "x")]], 1),
        )
        .await;
        assert_eq!(r.overall_code, Code::OverLimit as i32);
        assert_eq!(r.statuses[0].code, strict as i32);
        assert_eq!(r.statuses[0].limit_remaining, left, "strict is charged");
        assert_eq!(r.statuses[1].code, Code::OverLimit as i32);
        assert_eq!(
            r.statuses[1]
                .current_limit
                .as_ref()
                .unwrap()
                .requests_per_unit,
            0
        );
        assert_eq!(
            r.statuses[1].current_limit.as_ref().unwrap().name,
            "banned_limit"
        );
    }
    // `override` replaces `banned_limit`: two allowed, then over.
    let both: &[&[(&str, &str)]] = &[&[("banned", "x")], &[("override", "y")]];
    for i in 0..3 {
        let r = ask(&mut client, request("modes", both, 1)).await;
        assert_eq!(
            r.statuses[0],
            DescriptorStatus {
                code: Code::Ok as i32,
                ..DescriptorStatus::default()
            }
        );
        let code = if i < 2 { Code::Ok } else { Code::OverLimit };
        assert_eq!(r.overall_code, code as i32, "request {i}");
    }
}

#[tokio::test]
async fn quotas_refuse_only_when_all_of_them_are_over() {
    let mut client = service_on(MemoryStore::new(), &[("modes.yaml", MODES)]).await;
    let quotas: &[&[(&str, &str)]] = &[&[("q1", "a")], &[("q2", "a")]];
    let codes = |r: &RateLimitResponse| {
        (
            r.overall_code,
            r.statuses.iter().map(|s| s.code).collect::<Vec<_>>(),
        )
    };
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(
        codes(&ask(&mut client, request("modes", quotas, 1)).await),
        (ok, vec![ok, ok])
    );
    assert_eq!(
        codes(&ask(&mut client, request("modes", quotas, 1)).await),
        (ok, vec![over, ok])
    );
    assert_eq!(
        codes(&ask(&mut client, request("modes", quotas, 1)).await),
        (over, vec![over, over])
    );
}

#[tokio::test]
async fn hits_addend_counts_and_zero_only_looks() {
    let mut client = service_on(MemoryStore::new(), &[("another.yaml", ANOTHER)]).await;
    let remaining = |r: &RateLimitResponse| r.statuses[0].limit_remaining;
    // 0 means 1.
    assert_eq!(
        remaining(&ask(&mut client, request("another", &[&[("key2", "h")]], 0)).await),
        19
    );
    assert_eq!(
        remaining(&ask(&mut client, request("another", &[&[("key2", "h")]], 5)).await),
        14
    );
    // A descriptor's own hits_addend, 0 included: it looks and consumes nothing.
    let mut r = request("another", &[&[("key2", "h")]], 5);
    r.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    let looked = ask(&mut client, r).await;
    assert_eq!(
        (looked.overall_code, remaining(&looked)),
        (Code::Ok as i32, 14)
    );
    let mut r = request("another", &[&[("key2", "h")]], 1);
    r.descriptors[0].hits_addend = Some(UInt64Value { value: 14 });
    assert_eq!(remaining(&ask(&mut client, r).await), 0);
    let over = ask(&mut client, request("another", &[&[("key2", "h")]], 1)).await;
    assert_eq!(over.overall_code, Code::OverLimit as i32);
}

#[tokio::test]
async fn envoys_own_limit_overrides_the_configuration() {
    let mut client = service_on(MemoryStore::new(), &[("another.yaml", ANOTHER)]).await;
    let mut r = request("another", &[&[("key2", "o")]], 1);
    r.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: Unit::Hour as i32,
    });
    let first = ask(&mut client, r.clone()).await;
    assert_eq!(
        first.statuses[0],
        expected(Code::Ok, 2, Unit::Hour, 1, &first.statuses[0])
    );
    ask(&mut client, r.clone()).await;
    assert_eq!(
        ask(&mut client, r).await.overall_code,
        Code::OverLimit as i32
    );
}

#[tokio::test]
async fn headers_describe_the_descriptor_closest_to_its_limit() {
    let service = RateLimitService::builder()
        .config(config(&[("another.yaml", ANOTHER)]))
        .response_headers(ResponseHeaders::default())
        .build()
        .unwrap();
    let mut client = serve(service).await;
    let r = ask(
        &mut client,
        request("another", &[&[("key2", "x")], &[("key3", "x")]], 1),
    )
    .await;
    let headers: Vec<(String, String)> = r
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    let reset = reset_seconds(&r.statuses[1]).to_string();
    assert_eq!(
        headers,
        [
            ("RateLimit-Limit".into(), "10".into()),
            ("RateLimit-Remaining".into(), "9".into()),
            ("RateLimit-Reset".into(), reset),
        ]
    );
}

#[tokio::test]
async fn global_shadow_mode_answers_ok_but_reports_the_truth() {
    let service = RateLimitService::builder()
        .config(config(&[("basic.yaml", BASIC)]))
        .shadow_mode(true)
        .build()
        .unwrap();
    let mut client = serve(service.clone()).await;
    ask(
        &mut client,
        request("basic", &[&[("one_per_minute", "s")]], 1),
    )
    .await;
    let r = ask(
        &mut client,
        request("basic", &[&[("one_per_minute", "s")]], 1),
    )
    .await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    assert_eq!(r.statuses[0].code, Code::OverLimit as i32);
    assert_eq!(service.stats().shadow_denials, 1);
}

#[tokio::test]
async fn an_empty_domain_or_no_descriptor_is_an_error() {
    let mut client = service_on(MemoryStore::new(), &[("basic.yaml", BASIC)]).await;
    let e = client
        .should_rate_limit(request("", &[&[("a", "b")]], 1))
        .await
        .unwrap_err();
    assert_eq!(e.message(), "rate limit domain must not be empty");
    let e = client
        .should_rate_limit(request("basic", &[], 1))
        .await
        .unwrap_err();
    assert_eq!(e.message(), "rate limit descriptor list must not be empty");
}

const EXT: &str = "
domain: ext
descriptors:
  - key: bucket
    rate_limit: { unit: second, requests_per_unit: 1, algorithm: token_bucket, burst: 3 }
  - key: sliding
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: sliding_window_log }
";

#[tokio::test]
async fn the_extensions_algorithms_decide() {
    let mut client = service_on(MemoryStore::new(), &[("ext.yaml", EXT)]).await;
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = ask(&mut client, request("ext", &[&[("bucket", "b")]], 1)).await;
        seen.push((r.overall_code, r.statuses[0].limit_remaining));
    }
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    assert_eq!(seen, [(ok, 2), (ok, 1), (ok, 0), (over, 0)]);
    // The refusal says when one token is back: the refused fourth was charged (as every hit
    // is), so one token more than the bucket holds is owed: within two seconds.
    let r = ask(&mut client, request("ext", &[&[("bucket", "b")]], 1)).await;
    assert_eq!(reset_seconds(&r.statuses[0]), 2);
    for expect in [ok, ok, over] {
        let r = ask(&mut client, request("ext", &[&[("sliding", "s")]], 1)).await;
        assert_eq!(r.overall_code, expect);
    }
}

/// A Redis store on a port nothing listens on.
fn dead_redis() -> RedisStore {
    RedisStore::from_url(&format!("redis://127.0.0.1:{}", support::free_port())).unwrap()
}

/// The reference answers a failing store with a gRPC error: `ShouldRateLimit` recovers the
/// panic of its Redis client and returns it as the call's error (envoyproxy/ratelimit
/// `src/service/ratelimit.go` lines 415-443, `case redis.RedisError: ... finalError = t`), and
/// `POST /json` answers any such error with 400 (`src/server/server_impl.go` lines 103-107).
/// Envoy's `failure_mode_deny` then decides. The error is a plain Go error, which grpc-go sends
/// as `UNKNOWN` (lines 425-428); tollgate-rls answers `UNKNOWN` too, within the store timeout,
/// before and after its circuit breaker opens.
#[tokio::test]
async fn a_store_that_is_down_is_a_grpc_error_by_default_before_and_after_the_breaker_opens() {
    let service = RateLimitService::builder()
        .config(config(&[("basic.yaml", BASIC)]))
        .store(dead_redis())
        .store_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let mut client = serve(service.clone()).await;
    for i in 0..8 {
        let started = Instant::now();
        let answer = client
            .should_rate_limit(request("basic", &[&[("one_per_minute", "x")]], 1))
            .await;
        let took = started.elapsed();
        assert!(
            took < Duration::from_millis(600),
            "answer {i} took {took:?}"
        );
        let status = answer.expect_err("a store error is an error");
        assert_eq!(status.code(), tonic::Code::Unknown, "answer {i}");
        assert!(
            status.message().starts_with("rate limit store"),
            "{status:?}"
        );
    }
    assert!(
        service.stats().circuit_open,
        "the breaker opened on the way"
    );
    let body =
        br#"{"domain": "basic", "descriptors": [{"entries": [{"key": "key1", "value": "j"}]}]}"#;
    assert_eq!(service.decide_json(body).await.status, 400);
}

#[tokio::test]
async fn a_store_that_is_down_is_answered_by_the_policy_within_the_timeout() {
    let files = [("basic.yaml", BASIC)];
    for (policy, expect) in [
        (OnStoreError::Allow, Code::Ok),
        (OnStoreError::Deny, Code::OverLimit),
        (OnStoreError::FallbackToMemory, Code::Ok),
    ] {
        let service = RateLimitService::builder()
            .config(config(&files))
            .store(dead_redis())
            .on_store_error(policy)
            .store_timeout(Duration::from_millis(100))
            .build()
            .unwrap();
        let mut client = serve(service).await;
        for i in 0..3u32 {
            let started = Instant::now();
            let r = ask(
                &mut client,
                request("basic", &[&[("one_per_minute", "x")]], 1),
            )
            .await;
            assert!(
                started.elapsed() < Duration::from_millis(600),
                "{:?}",
                started.elapsed()
            );
            let s = &r.statuses[0];
            match policy {
                OnStoreError::Allow => {
                    assert_eq!(r.overall_code, expect as i32);
                    assert_eq!(
                        *s,
                        DescriptorStatus {
                            code: Code::Ok as i32,
                            ..DescriptorStatus::default()
                        }
                    );
                }
                OnStoreError::Deny => {
                    assert_eq!(r.overall_code, expect as i32);
                    assert_eq!(s.code, Code::OverLimit as i32);
                }
                // Decided in this process: one per minute still holds.
                _ => {
                    let code = if i == 0 { Code::Ok } else { Code::OverLimit };
                    assert_eq!(r.overall_code, code as i32, "request {i}");
                }
            }
        }
    }
}

/// A store of the user's: decides in memory, and counts the checks it is asked for.
struct Counting {
    inner: MemoryStore,
    checks: Arc<AtomicU64>,
}

impl Store for Counting {
    async fn check(&self, key: &str, policy: &Policy, cost: u32) -> Result<Decision, StoreError> {
        self.checks.fetch_add(1, Ordering::Relaxed);
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
async fn a_users_store_decides_inside_the_layers_stack() {
    let checks = Arc::new(AtomicU64::new(0));
    let store = Counting {
        inner: MemoryStore::new(),
        checks: Arc::clone(&checks),
    };
    // A store of the user's is charged only what it allows: its `check` consumes nothing
    // when it denies. The cache of denials answers for it in tollgate's own mode.
    let service = RateLimitService::builder()
        .config(config(&[("basic.yaml", BASIC)]))
        .store(store)
        .store_timeout(Duration::from_secs(5))
        .charging(Charging::AllowedOnly)
        .build()
        .unwrap();
    let mut client = serve(service.clone()).await;
    let one = || request("basic", &[&[("one_per_minute", "u")]], 1);
    let codes = [
        ask(&mut client, one()).await.overall_code,
        ask(&mut client, one()).await.overall_code,
    ];
    assert_eq!(codes, [Code::Ok as i32, Code::OverLimit as i32]);
    assert_eq!(checks.load(Ordering::Relaxed), 2);
    // The stack's cache of denials answers the denied client without asking the store.
    for _ in 0..5 {
        let r = ask(&mut client, one()).await;
        assert_eq!(r.overall_code, Code::OverLimit as i32);
        assert_eq!(r.statuses[0].limit_remaining, 0);
    }
    assert_eq!(checks.load(Ordering::Relaxed), 2);
    assert_eq!(service.stats().denial_cache_hits, 5);
    // Two descriptors: the store is asked once for each, in order.
    let two = request("basic", &[&[("key1", "a")], &[("key1_local", "b")]], 1);
    let r = ask(&mut client, two).await;
    assert_eq!(r.overall_code, Code::Ok as i32);
    let remaining: Vec<u32> = r.statuses.iter().map(|s| s.limit_remaining).collect();
    assert_eq!(remaining, [49, 49]);
    assert_eq!(checks.load(Ordering::Relaxed), 4);
}

#[tokio::test]
async fn store_failure_opens_the_breaker_after_its_failures() {
    let service = RateLimitService::builder()
        .config(config(&[("basic.yaml", BASIC)]))
        .store(dead_redis())
        .store_failure(
            StoreFailure::new(OnStoreError::Deny)
                .timeout(Duration::from_millis(200))
                .open_after(2)
                .open_for(Duration::from_secs(30), Duration::from_secs(30)),
        )
        .build()
        .unwrap();
    let one = request("basic", &[&[("key1", "x")]], 1);
    for i in 0..2 {
        assert!(!service.stats().circuit_open, "closed before failure {i}");
        let r = service.decide(&one).await.unwrap();
        assert_eq!(r.overall_code, Code::OverLimit as i32, "fail closed");
    }
    assert!(service.stats().circuit_open);
    // Open: answered by the policy without calling the store, and counted as a failure.
    let r = service.decide(&one).await.unwrap();
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    let stats = service.stats();
    assert_eq!((stats.store_errors, stats.denial_cache_hits), (3, 0));
}

/// "Effectively unlimited" limits, which the reference accepts (any `uint32` per any unit:
/// `YamlRateLimit.RequestsPerUnit uint32` in its `src/config/config_impl.go`) and decides
/// exactly: in its `src/limiter/base_limiter.go` a descriptor is over once the count after
/// the hits passes `RequestsPerUnit`, and `limit_remaining` is what is left of it.
const HUGE: &str = "
domain: huge
descriptors:
  - key: per_minute
    rate_limit: { unit: minute, requests_per_unit: 1000000000 }
  - key: per_second
    rate_limit: { unit: second, requests_per_unit: 4294967295 }
";

/// Takes the limit but one, then one, then one too many, within one window.
async fn huge_limits_are_decided_exactly(client: &mut Client) {
    for (key, limit, unit, window) in [
        ("per_minute", 1_000_000_000, Unit::Minute, 60),
        ("per_second", u32::MAX, Unit::Second, 1),
    ] {
        // Far enough from the window's end that the three requests share it.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let into = now.as_millis() % (window * 1000);
        if into > window * 1000 - 700 {
            tokio::time::sleep(Duration::from_millis(
                u64::try_from(window * 1000 - into).unwrap() + 20,
            ))
            .await;
        }
        let mut steps = Vec::new();
        for hits in [limit - 1, 1, 1] {
            let r = ask(client, request("huge", &[&[(key, "v")]], hits)).await;
            let s = &r.statuses[0];
            let current = s.current_limit.as_ref().expect("the limit");
            assert_eq!(
                (current.requests_per_unit, current.unit),
                (limit, unit as i32)
            );
            steps.push((r.overall_code, s.limit_remaining));
        }
        let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
        assert_eq!(steps, [(ok, 1), (ok, 0), (over, 0)], "{key}");
    }
}

#[tokio::test]
async fn huge_limits_are_accepted_and_decided_exactly_on_memory() {
    let mut client = service_on(MemoryStore::new(), &[("huge.yaml", HUGE)]).await;
    huge_limits_are_decided_exactly(&mut client).await;
}

#[tokio::test]
async fn huge_limits_are_accepted_and_decided_exactly_on_redis() {
    let store = RedisStore::from_url(&support::shared_redis_url())
        .unwrap()
        .prefix(support::unique_prefix("rls-huge"));
    let mut client = service_on(store, &[("huge.yaml", HUGE)]).await;
    huge_limits_are_decided_exactly(&mut client).await;
}
