//! Quotas per client at run time through the public API: lookups (one at a time per key,
//! bounded by their timeout, their answer or none, the request head they see), quotas set
//! through the door and seen by every instance on Redis, memcached and a store of one's own,
//! a rules file's `quota_from`, and what is counted.

use crate::{ok_service, support};

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::request::Parts;
use http::Request;
use metrics_exporter_prometheus::PrometheusBuilder;
use tollgate::engine::OVERRIDE_TTL;
use tollgate::rules::{QuotaLookup, Rule};
use tollgate::store::{
    AtomicStateStore, MemcachedStore, MemoryStore, RedisStore, StateBackedStore, Store, StoreError,
    Update,
};
use tollgate::{key, Algorithm, Control, ControlError, Quota, RateLimitLayer};
use tower::{Layer, Service, ServiceExt};

fn q(text: &str) -> Quota {
    text.parse().unwrap()
}

/// A lookup that counts its calls and answers `answer(key)` after `delay`.
fn counting_lookup(
    delay: Duration,
    answer: fn(&str) -> Result<Option<Quota>, String>,
) -> (QuotaLookup, Arc<AtomicU64>) {
    let calls = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&calls);
    let lookup = QuotaLookup::new(move |_: &Parts, key: &str| {
        counted.fetch_add(1, Ordering::SeqCst);
        let answer = answer(key);
        async move {
            tokio::time::sleep(delay).await;
            answer
        }
    });
    (lookup, calls)
}

/// The rule "api": `default` per `x-api-key`, each client's quota from `lookup`.
fn layer(default: &str, lookup: QuotaLookup, store: impl Store) -> RateLimitLayer {
    RateLimitLayer::builder()
        .rule(
            Rule::new("api", q(default))
                .key(key::Header::new("x-api-key"))
                .quota_from(lookup),
        )
        .store(store)
        .build()
        .unwrap()
}

/// One request of `key` through `layer` around a service that answers 200: the status and
/// `RateLimit-Policy` ("-" for none).
fn call(layer: &RateLimitLayer, key: &str) -> impl Future<Output = (u16, String)> + Send + 'static {
    let service = layer.layer(ok_service());
    let request = Request::builder()
        .header("x-api-key", key)
        .body(())
        .unwrap();
    async move {
        let response = service.oneshot(request).await.unwrap();
        let policy = response
            .headers()
            .get("ratelimit-policy")
            .map_or("-".into(), |v| v.to_str().unwrap().to_owned());
        (response.status().as_u16(), policy)
    }
}

#[tokio::test]
async fn concurrent_first_requests_of_a_key_wait_for_one_lookup() {
    let (lookup, calls) = counting_lookup(Duration::from_millis(30), |_| Ok(Some(q("20/10s"))));
    let layer = layer("5/10s", lookup, MemoryStore::new());
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..64 {
        requests.spawn(call(&layer, "k"));
    }
    let answers = requests.join_all().await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(answers.iter().filter(|(s, _)| *s == 200).count(), 20);
    assert!(answers.iter().all(|(_, p)| p == "\"api\";q=20;w=10"));
    let stats = layer.control().stats();
    assert_eq!(
        (stats.quota_lookups, stats.quota_lookup_cache_hits),
        (1, 63)
    );
    // The answer is kept: no lookup for the next request.
    call(&layer, "k").await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_lookup_that_hangs_holds_no_request_longer_than_its_timeout() {
    let (lookup, calls) = counting_lookup(Duration::from_secs(30), |_| Ok(Some(q("20/10s"))));
    let lookup = lookup.timeout(Duration::from_millis(100));
    let layer = layer("2/10s", lookup, MemoryStore::new());
    let started = Instant::now();
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..3 {
        requests.spawn(call(&layer, "k"));
    }
    let mut statuses: Vec<u16> = (requests.join_all().await.iter())
        .map(|(status, policy)| {
            assert_eq!(policy, "\"api\";q=2;w=10");
            *status
        })
        .collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 429]);
    let waited = started.elapsed();
    assert!(waited < Duration::from_millis(600), "{waited:?}");
    // The failure is kept a second: no lookup meanwhile.
    assert_eq!(call(&layer, "k").await.0, 429);
    let stats = layer.control().stats();
    assert_eq!((calls.load(Ordering::SeqCst), stats.quota_lookups), (1, 1));
    assert_eq!(stats.quota_lookup_failures, 1);
    // Asked again once the failure has expired.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let _ = call(&layer, "other").await;
    assert_eq!(layer.control().stats().quota_lookups, 2);
}

#[tokio::test]
async fn a_failing_lookup_gets_the_tier_else_the_rules_quota_and_none_is_unlimited() {
    let (lookup, _) = counting_lookup(Duration::ZERO, |key| match key {
        "vip" => Ok(None),
        "paid-broken" | "broken" => Err("the database is down".into()),
        _ => Ok(Some(q("3/10s"))),
    });
    let layer = RateLimitLayer::builder()
        .rule(
            Rule::new("api", q("1/10s"))
                .key(key::Header::new("x-api-key"))
                .quota_for(|key| key.starts_with("paid-").then(|| q("7/10s")))
                .quota_from(lookup),
        )
        .build()
        .unwrap();
    assert_eq!(call(&layer, "someone").await.1, "\"api\";q=3;w=10");
    assert_eq!(call(&layer, "paid-broken").await.1, "\"api\";q=7;w=10");
    assert_eq!(call(&layer, "broken").await.1, "\"api\";q=1;w=10");
    for _ in 0..50 {
        assert_eq!(call(&layer, "vip").await, (200, "-".into()));
    }
    // The door answers alike.
    let control = layer.control();
    assert_eq!(control.peek("api", "someone").await.unwrap().limit, 3);
    assert!(control
        .check("api", "vip", 1_000)
        .await
        .unwrap()
        .is_allowed());
}

#[tokio::test]
async fn a_lookup_sees_the_request_head_and_its_extensions() {
    #[derive(Clone)]
    struct Plan(u32);
    let lookup = QuotaLookup::new(|request: &Parts, _: &str| {
        let plan = request.extensions.get::<Plan>().map(|p| p.0);
        async move {
            Ok::<_, std::io::Error>(plan.map(|n| Quota::new(n, Duration::from_secs(10)).unwrap()))
        }
    });
    let layer = layer("1/10s", lookup, MemoryStore::new());
    let mut service = layer.layer(ok_service());
    let mut request = Request::builder()
        .header("x-api-key", "k")
        .body(())
        .unwrap();
    request.extensions_mut().insert(Plan(9));
    let response = service.ready().await.unwrap().call(request).await.unwrap();
    assert_eq!(response.headers()["ratelimit-policy"], "\"api\";q=9;w=10");
}

/// A rule of 5 per 10 s whose clients may be given their own quota at run time.
fn overridable(store: impl Store) -> Control {
    RateLimitLayer::builder()
        .rule(
            Rule::new("api", q("5/10s"))
                .key(key::Header::new("x-api-key"))
                .algorithm(Algorithm::SlidingWindowLog)
                .overridable(true),
        )
        .store(store)
        .build_control()
        .unwrap()
}

/// A quota set through `a` is what `b` decides by within `OVERRIDE_TTL` (a at once); what the
/// client used counts against it; cleared, the rule's quota is back; set to expire, it does.
async fn quotas_set_reach_every_instance(a: Control, b: Control) {
    let key = support::unique_prefix("override");
    assert!(b.check("api", &key, 3).await.unwrap().is_allowed());
    a.set_quota("api", &key, q("4/10s"), None).await.unwrap();
    assert_eq!(a.peek("api", &key).await.unwrap().limit, 4);
    assert_eq!(
        a.quota_override("api", &key).await.unwrap(),
        Some(q("4/10s"))
    );
    tokio::time::sleep(OVERRIDE_TTL).await;
    let d = b.peek("api", &key).await.unwrap();
    assert_eq!((d.limit, d.remaining), (4, 0), "3 of 4 used: one more");
    a.clear_quota("api", &key).await.unwrap();
    assert_eq!(b.quota_override("api", &key).await.unwrap(), None);
    tokio::time::sleep(OVERRIDE_TTL).await;
    assert_eq!(b.peek("api", &key).await.unwrap().limit, 5);
    let short = Duration::from_millis(300);
    b.set_quota("api", &key, q("50/10s"), Some(short))
        .await
        .unwrap();
    assert_eq!(b.peek("api", &key).await.unwrap().limit, 50);
    tokio::time::sleep(short + OVERRIDE_TTL).await;
    assert_eq!(a.quota_override("api", &key).await.unwrap(), None);
    assert_eq!(b.peek("api", &key).await.unwrap().limit, 5);
}

#[tokio::test]
async fn quotas_set_on_redis_reach_every_instance() {
    let url = support::shared_redis_url();
    let store = || {
        RedisStore::from_url(&url)
            .unwrap()
            .prefix(support::unique_prefix("q"))
    };
    let prefix = support::unique_prefix("shared");
    let a = overridable(RedisStore::from_url(&url).unwrap().prefix(prefix.clone()));
    let b = overridable(RedisStore::from_url(&url).unwrap().prefix(prefix.clone()));
    quotas_set_reach_every_instance(a, b).await;
    // Kept as the rule, key and numbers say.
    let mut conn = support::redis_connection(&url);
    let c = overridable(store());
    c.set_quota("api", "k", q("10/s"), None).await.unwrap();
    let keys: Vec<String> = deadpool_redis::redis::cmd("KEYS")
        .arg("*:api:quota:{k}")
        .query(&mut conn)
        .unwrap();
    let value: String = deadpool_redis::redis::cmd("GET")
        .arg(&keys[0])
        .query(&mut conn)
        .unwrap();
    assert_eq!(value, "10:1000000:0");
}

#[tokio::test]
async fn quotas_set_on_memcached_reach_every_instance() {
    let url = support::memcached::shared_memcached_url();
    let prefix = support::unique_prefix("mc");
    let store = || {
        MemcachedStore::from_url(&url)
            .unwrap()
            .prefix(prefix.clone())
    };
    quotas_set_reach_every_instance(overridable(store()), overridable(store())).await;
}

/// Bytes in a map behind a lock, updated in place; expiry by the time to live given.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<HashMap<String, Expiring>>>);

/// Bytes, and until when they count.
type Expiring = (Vec<u8>, Instant);

impl AtomicStateStore for Shared {
    async fn update(
        &self,
        key: &str,
        mut decide: impl FnMut(Option<&[u8]>) -> Update + Send,
    ) -> Result<(), StoreError> {
        let mut map = self.0.lock().unwrap();
        let live = map.get(key).filter(|(_, until)| *until > Instant::now());
        if let Update::Set { bytes, ttl } = decide(live.map(|(bytes, _)| bytes.as_slice())) {
            map.insert(key.to_owned(), (bytes, Instant::now() + ttl));
        }
        Ok(())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.0.lock().unwrap().remove(key);
        Ok(())
    }
}

#[tokio::test]
async fn quotas_set_on_a_store_of_ones_own_reach_every_instance() {
    let shared = Shared::default();
    let store = || StateBackedStore::atomic(shared.clone());
    quotas_set_reach_every_instance(overridable(store()), overridable(store())).await;
}

#[tokio::test]
async fn quotas_set_on_memory_hold_for_that_instance() {
    let control = overridable(MemoryStore::new());
    control
        .set_quota("api", "k", q("9/10s"), None)
        .await
        .unwrap();
    assert_eq!(control.peek("api", "k").await.unwrap().limit, 9);
    assert_eq!(
        control.quota_override("api", "k").await.unwrap(),
        Some(q("9/10s"))
    );
}

#[tokio::test]
async fn what_cannot_be_set_is_refused() {
    let control = overridable(MemoryStore::new());
    let fixed = RateLimitLayer::builder()
        .rule(Rule::new("fixed", q("5/10s")).key(key::Global))
        .build_control()
        .unwrap();
    assert!(matches!(
        fixed.set_quota("fixed", "k", q("1/s"), None).await,
        Err(ControlError::NotOverridable { .. })
    ));
    assert!(matches!(
        control.set_quota("nope", "k", q("1/s"), None).await,
        Err(ControlError::UnknownRule { .. })
    ));
    let e = control
        .set_quota("api", "k", q("1/s; burst=5"), None)
        .await
        .unwrap_err();
    assert!(matches!(e, ControlError::Quota(_)), "{e}");
    assert!(
        e.to_string()
            .contains("burst is not used by sliding_window_log"),
        "{e}"
    );
    // A store of one's own that keeps no bytes keeps no quotas either.
    struct Plain(MemoryStore);
    impl Store for Plain {
        async fn check(
            &self,
            k: &str,
            p: &tollgate::store::Policy,
            c: u32,
        ) -> Result<tollgate::store::Decision, StoreError> {
            self.0.check(k, p, c).await
        }
        async fn peek(
            &self,
            k: &str,
            p: &tollgate::store::Policy,
            c: u32,
        ) -> Result<tollgate::store::Decision, StoreError> {
            self.0.peek(k, p, c).await
        }
        async fn reset(&self, k: &str, p: &tollgate::store::Policy) -> Result<(), StoreError> {
            self.0.reset(k, p).await
        }
        async fn block(
            &self,
            k: &str,
            p: &tollgate::store::Policy,
            d: Duration,
        ) -> Result<(), StoreError> {
            self.0.block(k, p, d).await
        }
    }
    let own = overridable(Plain(MemoryStore::new()));
    assert!(matches!(
        own.set_quota("api", "k", q("1/s"), None).await,
        Err(ControlError::Store(StoreError::Unsupported(_)))
    ));
    // Its requests are still decided, by the rule's quota.
    assert!(own.check("api", "k", 1).await.unwrap().is_allowed());
}

#[tokio::test]
async fn a_rules_file_names_a_registered_lookup() {
    let (lookup, calls) = counting_lookup(Duration::ZERO, |_| Ok(Some(q("8/10s"))));
    let file = support::rules_file(
        "quota-from",
        "[[rule]]\nname = \"api\"\nquota = \"2/10s\"\nkey = \"header:x-api-key\"\nquota_from = \"plan\"\n",
    );
    let layer = RateLimitLayer::builder()
        .quota_lookup("plan", lookup)
        .rules_file(&file)
        .build()
        .unwrap();
    assert_eq!(call(&layer, "k").await.1, "\"api\";q=8;w=10");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Quotas set at run time apply to it too.
    let control = layer.control();
    control
        .set_quota("api", "k", q("1/10s"), None)
        .await
        .unwrap();
    assert_eq!(call(&layer, "k").await.0, 429);

    let file = support::rules_file(
        "quota-from-unknown",
        "[[rule]]\nname = \"api\"\nquota = \"2/10s\"\nquota_from = \"plans\"\n",
    );
    let e = RateLimitLayer::builder()
        .rules_file(&file)
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains(":4:14:"), "{e}");
    assert!(e.contains("unknown quota lookup \"plans\""), "{e}");
}

#[test]
fn lookups_are_counted_in_metrics() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let (lookup, _) = counting_lookup(Duration::ZERO, |key| match key {
                "bad" => Err("no such plan".into()),
                _ => Ok(Some(q("3/10s"))),
            });
            let layer = layer("5/10s", lookup, MemoryStore::new());
            for key in ["a", "a", "a", "bad"] {
                call(&layer, key).await;
            }
        })
    });
    let text = handle.render();
    for series in [
        "tollgate_quota_lookups_total{rule=\"api\"} 2",
        "tollgate_quota_lookup_cache_hits_total{rule=\"api\"} 2",
        "tollgate_quota_lookup_failures_total{rule=\"api\",reason=\"error\"} 1",
    ] {
        assert!(text.contains(series), "{series} in:\n{text}");
    }
}
