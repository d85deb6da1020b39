//! tollgate-rls charges hits as the reference does, on the memory store and on Redis, for
//! every algorithm and in every [`Charging`] mode. Each expected answer is the one
//! envoyproxy/ratelimit's code gives (cited where it is checked):
//!
//! - every hit is added to a descriptor's counter whatever the answer: `INCRBY key
//!   hitsAddend` (`src/redis/fixed_cache_impl.go` line 36), sent for every descriptor with a
//!   key (lines 161-187; `getHitsAddend`, lines 47-50, returns the hits when
//!   `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT` is off);
//! - a descriptor is OVER_LIMIT iff its counter after the hits is past the limit
//!   (`src/limiter/base_limiter.go` line 104, `limitAfterIncrease > overLimitThreshold`),
//!   with 0 remaining (lines 106-107), else OK with `limit - counter` remaining (lines
//!   125-126). A look (`hits_addend` 0) is `INCRBY key 0`: over iff the counter is past the
//!   limit;
//! - with `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, the counters are read first (lines
//!   117-158): when one would go past its limit, only those are charged, the others get 0
//!   (`getHitsAddend`, lines 65-71) and report `limit - counter`; the reference's own test
//!   (`test/redis/fixed_cache_impl_test.go` lines 730-746: two counters at 13 of 15 and 14,
//!   2 hits each: the first OK with 2 left and not charged, the second charged and over).

use crate::support;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use tollgate::engine::Charging;
use tollgate::store::{MemoryStore, RedisStore, Store};
use tollgate::Algorithm;
use tollgate_rls::{DuplicateDomains, RateLimitService, RlsConfig};

const OK: Code = Code::Ok;
const OVER: Code = Code::OverLimit;

/// Per-day limits (no window ends during a test), under `algorithm`.
fn yaml(algorithm: Algorithm) -> String {
    let limit = |key: &str, n: u32| {
        format!(
            "  - key: {key}\n    rate_limit: {{ unit: day, requests_per_unit: {n}, algorithm: {algorithm} }}\n"
        )
    };
    format!(
        "domain: budget\ndescriptors:\n{}{}{}{}",
        limit("tokens", 1000),
        limit("small", 10),
        limit("key4", 15),
        limit("key5", 14)
    )
}

fn service(store: impl Store, algorithm: Algorithm, charging: Charging) -> RateLimitService {
    let yaml = yaml(algorithm);
    RateLimitService::builder()
        .config(
            RlsConfig::from_yaml([("budget.yaml", yaml.as_str())], DuplicateDomains::Refuse)
                .unwrap(),
        )
        .store(store)
        .charging(charging)
        .build()
        .unwrap()
}

/// A request of descriptors `(key, hits)`, each with its own `hits_addend`.
fn hits(descriptors: &[(&str, u64)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "budget".into(),
        descriptors: (descriptors.iter())
            .map(|&(key, n)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: key.into(),
                    value: "v".into(),
                }],
                hits_addend: Some(UInt64Value { value: n }),
                ..RateLimitDescriptor::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

/// Each descriptor's code and remaining.
async fn answer(service: &RateLimitService, descriptors: &[(&str, u64)]) -> Vec<(Code, u32)> {
    let response = service.decide(&hits(descriptors)).await.unwrap();
    (response.statuses.iter())
        .map(|s| (Code::try_from(s.code).unwrap(), s.limit_remaining))
        .collect()
}

/// The sequences and the reference's own stop-mode test, on one service.
async fn sequences(service: &RateLimitService, charging: Charging) -> Vec<Vec<(Code, u32)>> {
    let _ = charging;
    vec![
        // Limit 1000: two reports of 600, then a look.
        answer(service, &[("tokens", 600)]).await,
        answer(service, &[("tokens", 600)]).await,
        answer(service, &[("tokens", 0)]).await,
        // Limit 10: +8, +5, +1.
        answer(service, &[("small", 8)]).await,
        answer(service, &[("small", 5)]).await,
        answer(service, &[("small", 1)]).await,
        // Two counters brought to 13, then 2 hits each, then a look at each.
        answer(service, &[("key4", 13), ("key5", 13)]).await,
        answer(service, &[("key4", 2), ("key5", 2)]).await,
        answer(service, &[("key4", 0), ("key5", 0)]).await,
    ]
}

/// What the reference answers (see the module's citations), for `charging`.
fn expected(charging: Charging) -> Vec<Vec<(Code, u32)>> {
    match charging {
        // INCRBY every time: 600, 1200 (> 1000), a look at 1200; 8, 13, 14; 13 and 13,
        // 15 (of 15: OK, 0 left) and 15 (> 14); looks at 15 and 15.
        Charging::EveryHit => vec![
            vec![(OK, 400)],
            vec![(OVER, 0)],
            vec![(OVER, 0)],
            vec![(OK, 2)],
            vec![(OVER, 0)],
            vec![(OVER, 0)],
            vec![(OK, 2), (OK, 1)],
            vec![(OK, 0), (OVER, 0)],
            vec![(OK, 0), (OVER, 0)],
        ],
        // The over descriptor alone is charged: the same counters, but key4 stays at 13
        // (fixed_cache_impl_test.go lines 744-745: OK with 2 left, OVER_LIMIT).
        Charging::StopWhenOverLimit => vec![
            vec![(OK, 400)],
            vec![(OVER, 0)],
            vec![(OVER, 0)],
            vec![(OK, 2)],
            vec![(OVER, 0)],
            vec![(OVER, 0)],
            vec![(OK, 2), (OK, 1)],
            vec![(OK, 2), (OVER, 0)],
            vec![(OK, 2), (OVER, 0)],
        ],
        // tollgate's own: a refused request consumes nothing (not the reference's).
        _ => vec![
            vec![(OK, 400)],
            vec![(OVER, 0)],
            vec![(OK, 400)],
            vec![(OK, 2)],
            vec![(OVER, 0)],
            vec![(OK, 1)],
            vec![(OK, 2), (OK, 1)],
            vec![(OK, 2), (OVER, 0)],
            vec![(OK, 2), (OK, 1)],
        ],
    }
}

const MODES: [Charging; 3] = [
    Charging::EveryHit,
    Charging::StopWhenOverLimit,
    Charging::AllowedOnly,
];

#[tokio::test]
async fn hits_are_charged_as_the_reference_charges_them_on_memory() {
    for algorithm in Algorithm::ALL {
        for charging in MODES {
            let service = service(MemoryStore::new(), algorithm, charging);
            let got = sequences(&service, charging).await;
            assert_eq!(got, expected(charging), "{algorithm}, {charging:?}");
        }
    }
}

#[tokio::test]
async fn hits_are_charged_as_the_reference_charges_them_on_redis() {
    let url = support::shared_redis_url();
    for algorithm in Algorithm::ALL {
        for charging in MODES {
            let store = RedisStore::from_url(&url)
                .unwrap()
                .prefix(support::unique_prefix("rls-charging"));
            let service = service(store, algorithm, charging);
            let got = sequences(&service, charging).await;
            assert_eq!(got, expected(charging), "{algorithm}, {charging:?}");
        }
    }
}

/// The default is the reference's: every hit charged.
#[tokio::test]
async fn every_hit_is_charged_by_default() {
    let yaml = yaml(Algorithm::FixedWindow);
    let service = RateLimitService::builder()
        .config(
            RlsConfig::from_yaml([("budget.yaml", yaml.as_str())], DuplicateDomains::Refuse)
                .unwrap(),
        )
        .build()
        .unwrap();
    let got = sequences(&service, Charging::EveryHit).await;
    assert_eq!(got, expected(Charging::EveryHit));
}
